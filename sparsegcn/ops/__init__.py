"""The bottom layer: primitives that everything else in sparsegcn builds on.

- segment reductions (sum, mean, max, min, softmax) with defined empty
  segments, and a reduction registry by name;
- row gathers and edge scores from sender and receiver rows (SDDMM);
- the host-side CSR builder (grouping by row, row offsets) and node
  orders for locality (reverse Cuthill–McKee, degree, communities; METIS
  parts and Louvain communities from the optional ``order`` extra);
- counter-based random bits, shared by dropout and the neighbour sampler.

This package imports nothing from sparsegcn except :mod:`sparsegcn._checks`;
graph storage, backends, layers and the sampler import from it, never the
other way.
"""

from sparsegcn.ops.csr import group_by_row, indptr_from_sorted, offset_dtype
from sparsegcn.ops.gather import gather_rows
from sparsegcn.ops.ordering import (
    REORDER_METHODS,
    community_labels,
    metis_parts,
    networkit_communities,
    node_order,
)
from sparsegcn.ops.random import fmix32, hash_bits, keep_mask, mulhi_u32, uniform_below
from sparsegcn.ops.sddmm import edge_dot, edge_sum
from sparsegcn.ops.segment import (
    REDUCTIONS,
    segment_max,
    segment_mean,
    segment_min,
    segment_reduce,
    segment_softmax,
    segment_sum,
)

__all__ = [
    "REDUCTIONS",
    "REORDER_METHODS",
    "community_labels",
    "edge_dot",
    "edge_sum",
    "fmix32",
    "gather_rows",
    "group_by_row",
    "hash_bits",
    "indptr_from_sorted",
    "keep_mask",
    "metis_parts",
    "mulhi_u32",
    "networkit_communities",
    "node_order",
    "offset_dtype",
    "segment_max",
    "segment_mean",
    "segment_min",
    "segment_reduce",
    "segment_softmax",
    "segment_sum",
    "uniform_below",
]

"""The bottom layer: primitives that everything else in sparsegcn builds on.

Segment reductions, row gathers and edge scores (traced, ``jit``-friendly)
live here. This package imports nothing from sparsegcn except
:mod:`sparsegcn._checks`; graph storage, backends, layers and the sampler
import from it, never the other way.
"""

from sparsegcn.ops.gather import gather_rows
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
    "edge_dot",
    "edge_sum",
    "gather_rows",
    "segment_max",
    "segment_mean",
    "segment_min",
    "segment_reduce",
    "segment_softmax",
    "segment_sum",
]

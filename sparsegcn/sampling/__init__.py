"""Mini-batch machinery: on-device neighbour sampling and node-chunked propagation.

- :func:`sample_blocks` samples a batch's ``L``-hop computation tree on the
  CSR view, inside ``jit``, with static shapes (:class:`NeighborSample`);
- :func:`sample_dedup` samples the same neighbourhood with each distinct
  node once, in padded frontiers, and serves each layer a relabelled
  bipartite block (:class:`DedupSample`, :class:`DedupBlock`);
  :func:`sample_batch` picks either by name (:data:`SAMPLERS`);
- :class:`ChunkedGraph` and :func:`propagate_chunked` compute ``A @ x`` a
  block of rows at a time, for layer-wise full-neighbourhood inference in
  bounded memory;
- :class:`HostFeatureStore` keeps the features in host RAM or a memory-mapped
  file and gathers each batch's distinct rows (:func:`localize`) on the host;
- :class:`HostCSR` and :func:`sample_tree_host` draw the same trees on the
  host from a CSR whose neighbour ids stay memory-mapped on disk
  (:mod:`.host`), :func:`localize_host` localizes them, and
  :func:`sample_dedup_host` draws the de-duplicated frontiers there.
"""

from sparsegcn.sampling.chunks import (
    DEFAULT_CHUNK_EDGES,
    ChunkedGraph,
    map_chunks,
    propagate_chunk,
    propagate_chunked,
)
from sparsegcn.sampling.dedup import (
    SAMPLERS,
    DedupBlock,
    DedupSample,
    check_caps,
    dedup_sizes,
    sample_batch,
    sample_dedup,
)
from sparsegcn.sampling.feature_store import (
    FEATURES_ON,
    HostFeatureStore,
    LocalBatch,
    choose_features_on,
    gather_rows,
    local_rows_bound,
    localize,
)
from sparsegcn.sampling.host import HostCSR, localize_host, sample_dedup_host, sample_tree_host
from sparsegcn.sampling.neighbor import (
    NeighborSample,
    check_csr,
    check_fanouts,
    sample_blocks,
    sample_neighbors,
    sample_positions,
    sampled_edge_features,
    tree_sizes,
    uniform_below,
)

__all__ = [
    "DEFAULT_CHUNK_EDGES",
    "FEATURES_ON",
    "SAMPLERS",
    "ChunkedGraph",
    "DedupBlock",
    "DedupSample",
    "HostCSR",
    "HostFeatureStore",
    "LocalBatch",
    "NeighborSample",
    "check_caps",
    "check_csr",
    "check_fanouts",
    "choose_features_on",
    "dedup_sizes",
    "gather_rows",
    "local_rows_bound",
    "localize",
    "localize_host",
    "map_chunks",
    "propagate_chunk",
    "propagate_chunked",
    "sample_batch",
    "sample_blocks",
    "sample_dedup",
    "sample_dedup_host",
    "sample_neighbors",
    "sample_positions",
    "sample_tree_host",
    "sampled_edge_features",
    "tree_sizes",
    "uniform_below",
]

"""Parallelism: several devices, several processes.

- :mod:`~sparsegcn.parallel.mesh`: which devices a run uses (:func:`make_mesh`),
  the refusal of an impossible device count, placing data on a mesh (:func:`put`).
- :mod:`~sparsegcn.parallel.data_parallel`: GraphSAGE mini-batch training
  with each global batch split over the devices (:func:`fit_data_parallel`).
- :mod:`~sparsegcn.parallel.feature_shard`: features split by rows over the
  devices of a data-parallel run (:func:`shard_feature_rows`), each batch's
  rows fetched with collectives (:func:`fetch_rows`).
- :mod:`~sparsegcn.parallel.edge_shard`: propagation with the edges split by
  receiver range over the devices (:class:`EdgeShardedGraph`,
  :func:`propagate_shard`, the :class:`EdgeSharded` backend).
- :mod:`~sparsegcn.parallel.full_graph`: full-graph training and inference
  on edge-sharded propagation (:func:`fit_edge_sharded`, :func:`predict_edge_sharded`).
- :mod:`~sparsegcn.parallel.distributed`: joining a multi-process run
  (:func:`initialize`: ``jax.distributed``, gloo collectives on CPU).
"""

from sparsegcn.parallel.data_parallel import (
    data_parallel_chunk_fn,
    data_parallel_step_fn,
    fit_data_parallel,
    make_data_parallel_grad_fn,
    place_data,
    slice_batch,
)
from sparsegcn.parallel.distributed import (
    check_distinct_outputs,
    check_processes,
    check_same_settings,
    initialize,
    parse_coordinator,
    shutdown,
)
from sparsegcn.parallel.edge_shard import (
    EdgeSharded,
    EdgeShardedGraph,
    edge_sharded_model,
    edge_sharded_propagate,
    propagate_shard,
    shard_features,
)
from sparsegcn.parallel.feature_shard import (
    fetch_rows,
    positional_sample,
    rows_per_device,
    shard_feature_rows,
    sharded_features_model,
)
from sparsegcn.parallel.full_graph import (
    edge_sharded_chunk_fn,
    edge_sharded_step_fn,
    fit_edge_sharded,
    predict_edge_sharded,
    shard_node_data,
)
from sparsegcn.parallel.mesh import AXIS, SIMULATE_HINT, as_mesh, check_devices, make_mesh, put

__all__ = [
    "AXIS",
    "SIMULATE_HINT",
    "EdgeSharded",
    "EdgeShardedGraph",
    "as_mesh",
    "check_devices",
    "check_distinct_outputs",
    "check_processes",
    "check_same_settings",
    "data_parallel_chunk_fn",
    "data_parallel_step_fn",
    "edge_sharded_chunk_fn",
    "edge_sharded_model",
    "edge_sharded_propagate",
    "edge_sharded_step_fn",
    "fetch_rows",
    "fit_data_parallel",
    "fit_edge_sharded",
    "initialize",
    "make_data_parallel_grad_fn",
    "make_mesh",
    "parse_coordinator",
    "place_data",
    "positional_sample",
    "predict_edge_sharded",
    "propagate_shard",
    "put",
    "rows_per_device",
    "shard_feature_rows",
    "shard_features",
    "shard_node_data",
    "sharded_features_model",
    "shutdown",
    "slice_batch",
]

"""sparsegcn: scalable sparse message passing for graph neural networks in JAX."""

# ruff: noqa: E402 (the signal handler of `python -m sparsegcn` goes in before JAX)

from importlib import metadata as _metadata

from sparsegcn import _interrupt

# `python -m sparsegcn` (or one of its tools): Ctrl-C recorded from here, before JAX is
# imported, and acted on when the command starts (only when such a module is the
# program; a library leaves signals alone).
_interrupt.install_if_program()

from sparsegcn.backends import (
    BACKENDS,
    LAYOUTS,
    Backend,
    as_layout,
    get_backend,
    pack,
    pack_gcn_norm,
    propagate,
)
from sparsegcn.batch import Budget, GraphBatch, choose_budget, pack_graphs
from sparsegcn.features import SparseFeatures, as_features, row_normalize
from sparsegcn.graph import CSR, Graph
from sparsegcn.hetero import HeteroGraph
from sparsegcn.message_passing import edge_scores, edge_softmax, message_passing
from sparsegcn.nn import (
    MODELS,
    Model,
    ModelSpec,
    create_model,
    gat,
    gatv2,
    gcn,
    get_model_spec,
    mlp,
    run_layers,
    sage,
)
from sparsegcn.nn.graph_gin import GraphModel, graph_gin
from sparsegcn.nn.readout import attention_pool, readout
from sparsegcn.nn.rgcn import HeteroModel, rgcn
from sparsegcn.ops import (
    segment_max,
    segment_mean,
    segment_min,
    segment_softmax,
    segment_sum,
)
from sparsegcn.parallel import fit_data_parallel, fit_edge_sharded, make_mesh
from sparsegcn.plots import plot_curves
from sparsegcn.sampling import ChunkedGraph, NeighborSample, sample_blocks
from sparsegcn.sampling.typed import HeteroCSR, TypedSample, sample_typed
from sparsegcn.sampling.typed_dedup import TypedDedupSample, sample_typed_dedup
from sparsegcn.train import (
    CheckpointError,
    DivergenceError,
    FitResult,
    NodeData,
    TrainConfig,
    fit,
    fit_sweep,
    load_checkpoint,
    predict,
    save_checkpoint,
)
from sparsegcn.train.graphs import GraphTrainConfig, fit_graphs, fold_splits
from sparsegcn.train.minibatch import MinibatchConfig, fit_minibatch, minibatch_data
from sparsegcn.transforms import (
    add_remaining_self_loops,
    add_self_loops,
    coalesce,
    degree,
    edge_mean_features,
    gcn_norm,
    gcn_norm_factors,
    mean_norm,
    remove_self_loops,
    sort_edges,
    to_undirected,
)
from sparsegcn.views import Bipartite, EdgeListView
from sparsegcn.xla_tuning import tune_xla_flags

# Importing the modules above runs no JAX computation, so JAX's backends have
# not started yet unless the caller started them: XLA reads $XLA_FLAGS then.
tune_xla_flags()

try:  # the installed distribution's version, as pyproject.toml declares it
    __version__ = _metadata.version("sparsegcn")
except _metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

__all__ = [
    "BACKENDS",
    "CSR",
    "LAYOUTS",
    "MODELS",
    "Backend",
    "Bipartite",
    "Budget",
    "CheckpointError",
    "ChunkedGraph",
    "DivergenceError",
    "EdgeListView",
    "FitResult",
    "Graph",
    "GraphBatch",
    "GraphModel",
    "GraphTrainConfig",
    "HeteroCSR",
    "HeteroGraph",
    "HeteroModel",
    "MinibatchConfig",
    "Model",
    "ModelSpec",
    "NeighborSample",
    "NodeData",
    "SparseFeatures",
    "TrainConfig",
    "TypedDedupSample",
    "TypedSample",
    "__version__",
    "add_remaining_self_loops",
    "add_self_loops",
    "as_features",
    "as_layout",
    "attention_pool",
    "choose_budget",
    "coalesce",
    "create_model",
    "degree",
    "edge_mean_features",
    "edge_scores",
    "edge_softmax",
    "fit",
    "fit_data_parallel",
    "fit_edge_sharded",
    "fit_graphs",
    "fit_minibatch",
    "fit_sweep",
    "fold_splits",
    "gat",
    "gatv2",
    "gcn",
    "gcn_norm",
    "gcn_norm_factors",
    "get_backend",
    "get_model_spec",
    "graph_gin",
    "load_checkpoint",
    "make_mesh",
    "mean_norm",
    "message_passing",
    "minibatch_data",
    "mlp",
    "pack",
    "pack_gcn_norm",
    "pack_graphs",
    "plot_curves",
    "predict",
    "propagate",
    "readout",
    "remove_self_loops",
    "rgcn",
    "row_normalize",
    "run_layers",
    "sage",
    "sample_blocks",
    "sample_typed",
    "sample_typed_dedup",
    "save_checkpoint",
    "segment_max",
    "segment_mean",
    "segment_min",
    "segment_softmax",
    "segment_sum",
    "sort_edges",
    "to_undirected",
]

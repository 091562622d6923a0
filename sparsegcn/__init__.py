"""sparsegcn: scalable sparse message passing for graph neural networks in JAX."""

from sparsegcn.backends import BACKENDS, Backend, get_backend, propagate
from sparsegcn.features import SparseFeatures, as_features, row_normalize
from sparsegcn.graph import CSR, Graph
from sparsegcn.nn import Model, gcn, mlp, sage
from sparsegcn.parallel import fit_data_parallel, fit_edge_sharded, make_mesh
from sparsegcn.plots import plot_curves
from sparsegcn.sampling import ChunkedGraph, NeighborSample, sample_blocks
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
from sparsegcn.train.minibatch import MinibatchConfig, fit_minibatch, minibatch_data
from sparsegcn.transforms import (
    add_self_loops,
    coalesce,
    degree,
    gcn_norm,
    gcn_norm_factors,
    mean_norm,
    remove_self_loops,
    sort_edges,
    to_undirected,
)

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "CSR",
    "Backend",
    "CheckpointError",
    "ChunkedGraph",
    "DivergenceError",
    "FitResult",
    "Graph",
    "MinibatchConfig",
    "Model",
    "NeighborSample",
    "NodeData",
    "SparseFeatures",
    "TrainConfig",
    "__version__",
    "add_self_loops",
    "as_features",
    "coalesce",
    "degree",
    "fit",
    "fit_data_parallel",
    "fit_edge_sharded",
    "fit_minibatch",
    "fit_sweep",
    "gcn",
    "gcn_norm",
    "gcn_norm_factors",
    "get_backend",
    "load_checkpoint",
    "make_mesh",
    "mean_norm",
    "minibatch_data",
    "mlp",
    "plot_curves",
    "predict",
    "propagate",
    "remove_self_loops",
    "row_normalize",
    "sage",
    "sample_blocks",
    "save_checkpoint",
    "sort_edges",
    "to_undirected",
]

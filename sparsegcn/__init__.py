"""sparsegcn: scalable sparse message passing for graph neural networks in JAX."""

from sparsegcn.backends import BACKENDS, Backend, get_backend, propagate
from sparsegcn.features import SparseFeatures, as_features, row_normalize
from sparsegcn.graph import CSR, Graph
from sparsegcn.nn import Model, gcn, mlp
from sparsegcn.train import FitResult, NodeData, TrainConfig, fit
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
    "FitResult",
    "Graph",
    "Model",
    "NodeData",
    "SparseFeatures",
    "TrainConfig",
    "__version__",
    "add_self_loops",
    "as_features",
    "coalesce",
    "degree",
    "fit",
    "gcn",
    "gcn_norm",
    "gcn_norm_factors",
    "get_backend",
    "mean_norm",
    "mlp",
    "propagate",
    "remove_self_loops",
    "row_normalize",
    "sort_edges",
    "to_undirected",
]

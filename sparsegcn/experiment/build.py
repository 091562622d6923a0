"""From a :class:`~sparsegcn.datasets.Dataset` to what a trainer consumes."""

from __future__ import annotations

import numpy as np

from sparsegcn import transforms
from sparsegcn.datasets import Dataset
from sparsegcn.experiment.config import Experiment
from sparsegcn.features import as_features, normalize
from sparsegcn.nn import Model, gcn, mlp, sage
from sparsegcn.train import NodeData, index_mask


def prepare_graph(dataset: Dataset, model: str):
    """The propagation graph each model expects, computed once on the host."""
    if model == "gcn":
        return transforms.sort_edges(transforms.gcn_norm(dataset.graph))
    return dataset.graph


def node_data(
    dataset: Dataset, model: str = "gcn", *, normalize_features: str = "auto"
) -> NodeData:
    """Builds the :class:`NodeData` a full-batch trainer reads from a :class:`Dataset`."""
    n = dataset.num_nodes
    features = normalize(dataset.features, normalize_features)
    return NodeData(
        graph=prepare_graph(dataset, model),
        features=as_features(features, n),
        labels=np.maximum(dataset.labels, 0).astype(np.int32),
        train_mask=index_mask(dataset.split["train"], n),
        val_mask=index_mask(dataset.split["valid"], n),
        test_mask=index_mask(dataset.split["test"], n),
    )


MODEL_BUILDERS = {"gcn": gcn, "sage": sage, "mlp": mlp}


def build_model(exp: Experiment, dataset: Dataset) -> Model:
    """The model ``exp.model`` names, sized for ``dataset``."""
    kwargs = dict(hidden=exp.hidden, num_layers=exp.layers, dropout_rate=exp.dropout)
    if exp.model != "mlp":  # the graph models also take these
        kwargs.update(residual=exp.residual, backend=exp.backend)
    return MODEL_BUILDERS[exp.model](dataset.num_features, dataset.num_classes, **kwargs)

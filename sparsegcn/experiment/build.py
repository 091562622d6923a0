"""From a :class:`~sparsegcn.datasets.Dataset` to what a trainer consumes."""

from __future__ import annotations

import numpy as np

from sparsegcn import transforms
from sparsegcn.backends import pack_gcn_norm
from sparsegcn.datasets import Dataset
from sparsegcn.experiment.config import Experiment
from sparsegcn.features import as_features, normalize
from sparsegcn.nn import Model, gcn, mlp, sage
from sparsegcn.train import NodeData, index_mask

PACK_MIN_EDGES = 1 << 20
"""Stored edges from which :func:`prepare_graph` packs GCN's graph by default.

Packing pays off on large graphs (2-4x faster propagation at ogbn-arxiv
size) but its compiled products unroll many gathers: on small graphs such
as Cora the edge list compiles in a quarter of the time and steps about as
fast.
"""


def prepare_graph(dataset: Dataset, model: str, *, packed: bool | None = None):
    """The propagation graph each model expects, computed once on the host.

    ``gcn``: ``Â = D^-1/2 (A + I) D^-1/2``, either packed for the fast path
    of the ``segment`` backend (:func:`~sparsegcn.backends.pack_gcn_norm`;
    every backend accepts it) or as a receiver-sorted edge list. ``packed``
    ``None`` packs graphs of at least :data:`PACK_MIN_EDGES` stored edges.
    ``sage`` and ``mlp``: the dataset's graph as it is.
    """
    if model != "gcn":
        return dataset.graph
    if packed is None:
        packed = dataset.graph.num_edges >= PACK_MIN_EDGES
    if packed:
        return pack_gcn_norm(dataset.graph)
    return transforms.sort_edges(transforms.gcn_norm(dataset.graph))


def node_data(
    dataset: Dataset,
    model: str = "gcn",
    *,
    normalize_features: str = "auto",
    packed: bool | None = None,
) -> NodeData:
    """Builds the :class:`NodeData` a full-batch trainer reads from a :class:`Dataset`.

    Args:
      dataset: the loaded dataset.
      model: ``"gcn"``, ``"sage"`` or ``"mlp"`` (see :func:`prepare_graph`).
      normalize_features: ``"auto"``, ``"row"`` or ``"none"``
        (:func:`~sparsegcn.features.normalize`).
      packed: pack GCN's graph; ``None`` decides by size (see :func:`prepare_graph`).
    """
    n = dataset.num_nodes
    features = normalize(dataset.features, normalize_features)
    return NodeData(
        graph=prepare_graph(dataset, model, packed=packed),
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

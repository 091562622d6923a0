"""Full-batch GCN training steps to time: Kipf & Welling's Cora setup and an
arxiv-sized 3-layer GCN, built from the library's public pieces.

A step is ``sparsegcn.train.train_step`` (forward, masked cross-entropy,
backward, Adam) for one model, jitted with the state and data as arguments;
timing it excludes compilation (see :mod:`sparsegcn.bench.timing`).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from sparsegcn.backends import Backend, pack_gcn_norm
from sparsegcn.bench.graphs import random_graph
from sparsegcn.features import as_features, row_normalize
from sparsegcn.graph import Graph
from sparsegcn.nn import gcn
from sparsegcn.train import (
    NodeData,
    TrainConfig,
    index_mask,
    init_state,
    make_optimizer,
    train_step,
)
from sparsegcn.transforms import gcn_norm, sort_edges

# ogbn-arxiv's published size (Hu et al., 2020): nodes, directed edges,
# features, classes and training nodes.
ARXIV_SIZE = dict(num_nodes=169_343, num_edges=1_166_243, features=128, classes=40, train=90_941)


@dataclasses.dataclass(frozen=True)
class StepSetup:
    """Everything a GCN step needs, and the settings a peer must copy.

    Attributes:
      data: the :class:`~sparsegcn.train.NodeData` (graph normalized, and
        packed unless ``packed`` is False).
      num_classes: ``C``.
      hidden: hidden width.
      num_layers: graph convolutions.
      dropout: dropout rate before every convolution.
      graph: the raw undirected graph (no self-loops, unnormalized), for peers.
      dense_features: float32 ``[N, F]`` features (row-normalized for Cora), for peers.
    """

    data: NodeData
    num_classes: int
    hidden: int
    num_layers: int
    dropout: float
    graph: Graph
    dense_features: np.ndarray


def normalized(graph: Graph, packed: bool) -> Graph:
    """``Â`` for GCN: packed as the library packs it
    (:data:`~sparsegcn.experiment.build.PACK_FORMAT`), or a sorted edge list."""
    from sparsegcn.experiment.build import PACK_FORMAT

    return pack_gcn_norm(graph, format=PACK_FORMAT) if packed else sort_edges(gcn_norm(graph))


def cora_setup(root, *, packed: bool = True, sparse_features: bool = True) -> StepSetup:
    """Kipf & Welling's Cora setup: hidden 16, dropout 0.5, row-normalized features.

    Args:
      root: data root holding ``planetoid/ind.cora.*`` (not downloaded here).
      packed: propagate on a packed graph (the fast path).
      sparse_features: keep the bag-of-words features sparse (the library's
        way); ``False`` gives the model dense features.
    """
    from sparsegcn.datasets import load

    dataset = load("cora", root, download=False)
    n = dataset.num_nodes
    features = row_normalize(dataset.features)
    dense = np.asarray(features.toarray() if hasattr(features, "toarray") else features, np.float32)
    data = NodeData(
        graph=normalized(dataset.graph, packed),
        features=as_features(features if sparse_features else dense, n),
        labels=np.maximum(dataset.labels, 0).astype(np.int32),
        train_mask=index_mask(dataset.split["train"], n),
        val_mask=index_mask(dataset.split["valid"], n),
        test_mask=index_mask(dataset.split["test"], n),
    )
    return StepSetup(data, dataset.num_classes, 16, 2, 0.5, dataset.graph, dense)


def arxiv_like_setup(
    *, scale: float = 1.0, packed: bool = True, hidden: int = 256, seed: int = 0
) -> StepSetup:
    """A random graph of ogbn-arxiv's size with its GCN: 3 layers, hidden 256.

    The ``num_edges`` directed pairs are stored both ways (as arxiv's GCN
    examples symmetrize it), features are standard normal ``[N, 128]``,
    labels uniform over 40 classes, and the first ~54% of nodes train.

    Args:
      scale: shrink nodes and edges together (``1.0`` is full size).
      packed: propagate on a packed graph.
      hidden: hidden width.
      seed: seed of graph, features and labels.
    """
    n = max(int(ARXIV_SIZE["num_nodes"] * scale), 2)
    degree = 2 * ARXIV_SIZE["num_edges"] / ARXIV_SIZE["num_nodes"]
    graph = random_graph(n, degree, seed=seed)
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((n, ARXIV_SIZE["features"]), dtype=np.float32)
    labels = rng.integers(0, ARXIV_SIZE["classes"], n).astype(np.int32)
    train = np.arange(int(n * ARXIV_SIZE["train"] / ARXIV_SIZE["num_nodes"]))
    mask = index_mask(train, n)
    data = NodeData(
        graph=normalized(graph, packed),
        features=as_features(features, n),
        labels=labels,
        train_mask=mask,
        val_mask=~mask,
        test_mask=~mask,
    )
    return StepSetup(data, ARXIV_SIZE["classes"], hidden, 3, 0.5, graph, features)


def gcn_step(
    setup: StepSetup,
    *,
    backend: str | Backend = "segment",
    dropout_impl: str = "hash",
    seed: int = 0,
):
    """A jittable GCN training step and its arguments.

    Returns:
      ``(step, (state, data))`` where ``step(state, data)`` returns the new
      params, optimizer state, key, loss and gradient norm; ``data`` is on
      the device.
    """
    data = setup.data
    num_features = data.features.shape[1]
    model = gcn(
        num_features,
        setup.num_classes,
        hidden=setup.hidden,
        num_layers=setup.num_layers,
        dropout_rate=setup.dropout,
        backend=backend,
        dropout_impl=dropout_impl,
    )
    tx = make_optimizer(TrainConfig())
    state = init_state(model, tx, jax.random.key(seed))

    def step(state, data):
        return train_step(model, tx, state, data)

    return step, (state, jax.device_put(data))


def registered_step(dataset, model_name: str, *, seed: int = 0):
    """A jittable training step of a registered model with its paper's settings.

    The graph, features and model come the way ``sparsegcn train`` builds
    them (:func:`~sparsegcn.experiment.build.node_data`, the registry's
    defaults), so the step timed is the one the CLI runs.

    Returns:
      ``(step, (state, data))`` as :func:`gcn_step`.
    """
    from sparsegcn.experiment.build import build_model, node_data
    from sparsegcn.experiment.config import Experiment

    exp = Experiment(dataset=dataset.name, model=model_name)
    data = node_data(
        dataset, model_name, normalize_features=exp.normalize_features, options=exp.options()
    )
    model = build_model(exp, dataset)
    tx = make_optimizer(exp.train_config())
    state = init_state(model, tx, jax.random.key(seed))

    def step(state, data):
        return train_step(model, tx, state, data)

    return step, (state, jax.device_put(data))

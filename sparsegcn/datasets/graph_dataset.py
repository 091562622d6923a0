"""The graph-level dataset type: many small graphs as one block-diagonal edge list.

:class:`GraphDataset` is what every graph-level loader returns (``tu:NAME``,
``ogbg-*``, the synthetic molecule twins, the on-disk format) and what
:func:`~sparsegcn.batch.pack_graphs` packs;
:func:`~sparsegcn.datasets.graphs.load_graphs` picks the loader by the
dataset's name. Loaders import this module, never the dispatcher.

Three kinds of label (:attr:`GraphDataset.kind`):

- ``"class"``: int32 ``[G]``, one class index per graph (TU datasets);
  ``num_classes`` is the number of classes ``C``.
- ``"binary"``: float32 ``[G, T]``, one 0/1 label per graph and task, NaN
  where a label is missing (ogbg-molhiv, ogbg-molpcba); ``num_classes`` is
  the number of tasks ``T``, the model's output width.
- ``"regression"``: float32 ``[G, T]``, one real target per graph and task,
  NaN where missing (ogbg-molesol, ogbg-molfreesolv, ogbg-mollipo: metric
  ``rmse``; TU datasets with graph attributes and no graph labels: ``mae``); the
  dataset's metric is one of :data:`REGRESSION_METRICS`, which is what
  tells these labels from binary ones.

Node (and edge) features are float32 ``[n, F]``, or, when
``feature_dims`` (``edge_feature_dims``) is set, int32 ``[n, F]``
categorical columns, column ``j`` taking values in ``[0, feature_dims[j])``
(OGB's atom and bond features), which a model embeds (OGB's
``AtomEncoder``: a sum of one embedding per column).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

METRICS = ("acc", "rocauc", "ap", "rmse", "mae")
"""The metrics a graph dataset may name as its own."""

REGRESSION_METRICS = frozenset({"rmse", "mae"})
"""The metrics of real-valued targets (kind ``"regression"``); lower is better. Each
names its loss too: squared error for ``rmse`` (OGB's), absolute error for ``mae``
(as the ZINC benchmark reports; for TU's regression sets)."""


def label_kind(ndim: int, metric: str) -> str:
    """The kind of labels of rank ``ndim`` that ``metric`` scores: ``"class"`` for
    ``[G]``; for ``[G, T]``, ``"regression"`` under a metric of
    :data:`REGRESSION_METRICS`, else ``"binary"``."""
    if ndim == 1:
        return "class"
    return "regression" if metric in REGRESSION_METRICS else "binary"


@dataclasses.dataclass(frozen=True, eq=False)
class GraphDataset:
    """Many small graphs with labels, as one block-diagonal edge list.

    Nodes are numbered globally and graph by graph: the nodes of graph ``g``
    are ``node_ptr[g] .. node_ptr[g + 1] - 1`` and its edges
    ``edge_ptr[g] .. edge_ptr[g + 1] - 1`` (edges are sorted by graph).

    Attributes:
      name: e.g. ``"tu:MUTAG"``, ``"ogbg-molhiv"``.
      senders, receivers: int32 ``[E]`` global node ids, 0-based.
      node_ptr: int64 ``[G + 1]`` node offsets per graph.
      edge_ptr: int64 ``[G + 1]`` edge offsets per graph.
      features: ``[n, F]``: float32, or int32 categorical columns when
        ``feature_dims`` is set.
      labels: int32 ``[G]`` class index in ``[0, num_classes)`` (kind
        ``"class"``), or float32 ``[G, T]`` 0/1 with NaN for a missing
        label (kind ``"binary"``), or float32 ``[G, T]`` real targets with
        NaN for a missing one (kind ``"regression"``).
      num_classes: the model's output width: ``C`` classes or ``T`` tasks.
      classes: ``[C]`` the label value each class index stands for (``[T]``
        task indices for binary labels).
      edge_features: ``[E, D]`` float32 (int32 categorical when
        ``edge_feature_dims`` is set) or ``None``.
      targets: float32 ``[G, T]`` graph attributes (regression targets) or ``None``.
      info: provenance.
      metric: the dataset's own metric, one of :data:`METRICS` (``"acc"``
        for classes; OGB's ``eval metric`` for ``ogbg-*``; ``"mae"`` for
        TU regression targets).
      split: the official split, ``{"train", "valid", "test"}`` int64 graph
        indices, or ``None`` (then k-fold cross-validation or a holdout).
      feature_dims: vocabulary size of each categorical node-feature column,
        or ``None`` for float features.
      edge_feature_dims: likewise for edge features.
    """

    name: str
    senders: np.ndarray
    receivers: np.ndarray
    node_ptr: np.ndarray
    edge_ptr: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    num_classes: int
    classes: np.ndarray
    edge_features: np.ndarray | None = None
    targets: np.ndarray | None = None
    info: dict = dataclasses.field(default_factory=dict)
    metric: str = "acc"
    split: Mapping[str, np.ndarray] | None = None
    feature_dims: tuple[int, ...] | None = None
    edge_feature_dims: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"{self.name}: metric must be one of {METRICS}, got {self.metric!r}")
        labels = np.asarray(self.labels)
        if labels.ndim not in (1, 2):
            raise ValueError(f"{self.name}: labels must be [G] or [G, T], got {labels.shape}")
        if labels.ndim == 2 and labels.shape[1] != self.num_classes:
            raise ValueError(
                f"{self.name}: {self.kind} labels {labels.shape} must have num_classes="
                f"{self.num_classes} columns"
            )
        if self.metric in REGRESSION_METRICS and labels.ndim != 2:
            raise ValueError(
                f"{self.name}: metric {self.metric!r} needs float [G, T] regression targets, "
                f"got labels of shape {labels.shape}"
            )
        if self.split is not None:
            missing = {"train", "valid", "test"} - set(self.split)
            if missing:
                raise ValueError(f"{self.name}: split lacks {sorted(missing)}")

    @property
    def kind(self) -> str:
        """``"class"`` (int ``[G]`` labels), ``"binary"`` (float ``[G, T]`` 0/1, NaN
        missing) or ``"regression"`` (float ``[G, T]``, a metric of
        :data:`REGRESSION_METRICS`)."""
        return label_kind(np.ndim(self.labels), self.metric)

    @property
    def num_graphs(self) -> int:
        return int(np.shape(self.labels)[0])

    @property
    def num_nodes(self) -> int:
        return int(self.features.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.senders.shape[0])

    def nodes_per_graph(self) -> np.ndarray:
        """int64 ``[G]``."""
        return np.diff(self.node_ptr)

    def edges_per_graph(self) -> np.ndarray:
        """int64 ``[G]``."""
        return np.diff(self.edge_ptr)


def one_hot_degrees(dataset: GraphDataset) -> GraphDataset:
    """``dataset`` with node features replaced by one-hot node degrees (Xu et al.'s
    ``degree_as_tag``, their input for social networks, whose nodes carry no label).

    A node's degree is the number of stored edges into it (TU and OGB store each
    undirected edge in both directions, so it is the undirected degree). Column
    ``j`` stands for the ``j``-th smallest degree present in the whole dataset, as
    Xu et al. index the degrees they find; a graph's features thus depend on no
    label and no split.

    Returns:
      A copy whose ``features`` are float32 ``[n, K]`` (``K`` distinct degrees),
      ``feature_dims`` ``None``, and ``info["node_features"] = "one-hot degree"``;
      everything else is shared with ``dataset``.
    """
    n = dataset.num_nodes
    degree = np.bincount(np.asarray(dataset.receivers), minlength=n)
    values, index = np.unique(degree, return_inverse=True)
    features = np.zeros((n, values.shape[0]), np.float32)
    features[np.arange(n), index] = 1.0
    return dataclasses.replace(
        dataset,
        features=features,
        feature_dims=None,
        info={**dataset.info, "node_features": "one-hot degree", "degrees": values.tolist()},
    )


__all__ = ["METRICS", "REGRESSION_METRICS", "GraphDataset", "label_kind", "one_hot_degrees"]

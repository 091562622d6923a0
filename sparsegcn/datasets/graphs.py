"""Graph-level datasets: many small graphs as one block-diagonal edge list.

:class:`GraphDataset` is what every graph-level loader returns (``tu:NAME``,
``ogbg-*``, the synthetic molecule twins, the on-disk format) and what
:func:`~sparsegcn.batch.pack_graphs` packs. :func:`load_graphs` picks the
loader by the dataset's name.

Two kinds of label:

- ``"class"``: int32 ``[G]``, one class index per graph (TU datasets);
  ``num_classes`` is the number of classes ``C``.
- ``"binary"``: float32 ``[G, T]``, one 0/1 label per graph and task, NaN
  where a label is missing (ogbg-molhiv, ogbg-molpcba); ``num_classes`` is
  the number of tasks ``T``, the model's output width.

Node (and edge) features are float32 ``[n, F]``, or, when
``feature_dims`` (``edge_feature_dims``) is set, int32 ``[n, F]``
categorical columns, column ``j`` taking values in ``[0, feature_dims[j])``
(OGB's atom and bond features), which a model embeds (OGB's
``AtomEncoder``: a sum of one embedding per column).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import numpy as np

METRICS = ("acc", "rocauc", "ap")
"""The metrics a graph dataset may name as its own."""


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
        label (kind ``"binary"``).
      num_classes: the model's output width: ``C`` classes or ``T`` tasks.
      classes: ``[C]`` the label value each class index stands for (``[T]``
        task indices for binary labels).
      edge_features: ``[E, D]`` float32 (int32 categorical when
        ``edge_feature_dims`` is set) or ``None``.
      targets: float32 ``[G, T]`` graph attributes (regression targets) or ``None``.
      info: provenance.
      metric: the dataset's own metric, one of :data:`METRICS` (``"acc"``
        for classes; OGB's ``eval metric`` for ``ogbg-*``).
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
                f"{self.name}: binary labels {labels.shape} must have num_classes="
                f"{self.num_classes} columns"
            )
        if self.split is not None:
            missing = {"train", "valid", "test"} - set(self.split)
            if missing:
                raise ValueError(f"{self.name}: split lacks {sorted(missing)}")

    @property
    def kind(self) -> str:
        """``"class"`` (int ``[G]`` labels) or ``"binary"`` (float ``[G, T]``, NaN missing)."""
        return "class" if np.ndim(self.labels) == 1 else "binary"

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


def graph_names() -> list[str]:
    """The registered graph-level names :func:`load_graphs` takes (besides ``tu:NAME`` and
    folder paths)."""
    from sparsegcn.datasets import SYNTHETIC_GRAPHS
    from sparsegcn.datasets.ogbg import NAMES

    return [*NAMES, *SYNTHETIC_GRAPHS]


def load_graphs(
    name: str | os.PathLike,
    root,
    *,
    download: bool = True,
    progress: bool = False,
    seed: int = 0,
    verify: bool = False,
) -> GraphDataset:
    """The graph-level dataset ``name`` under ``root``, by its name's prefix.

    Args:
      name: ``"tu:NAME"`` (:func:`~sparsegcn.datasets.tu.load_tu`);
        ``"ogbg-*"`` (:func:`~sparsegcn.datasets.ogbg.load_ogbg`, OGB's raw
        files in ``<root>/ogbg_*``); ``"synthetic:molhiv"`` or
        ``"synthetic:molpcba"`` (generated,
        :func:`~sparsegcn.datasets.synthetic_graphs.generate_molecules`);
        or the path of an on-disk graph dataset folder
        (:func:`~sparsegcn.datasets.ondisk_graphs.load_graphs_ondisk`),
        written as a path (:func:`~sparsegcn.datasets.is_path`: ``./molpcba``).
      root: the data root (``None``: ``$SPARSEGCN_DATA`` or ``./datasets``;
        unused for a generated dataset or a folder).
      download: fetch a missing dataset where its loader can.
      progress: progress bars.
      seed: the generator's seed, for ``synthetic:*`` names.
      verify: check every file's sha256, for a folder.

    Raises:
      ValueError: a name no graph loader knows.
    """
    from sparsegcn.datasets import OGBG_PREFIX, SYNTHETIC_GRAPHS, TU_PREFIX, is_path

    if isinstance(name, os.PathLike):  # a pathlib.Path is a folder, whatever it looks like
        text = str(os.fspath(name))
        name = text if is_path(text) else os.path.join(os.curdir, text)
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a string, got {name!r} ({type(name).__name__})")
    if is_path(name):
        from sparsegcn.datasets.ondisk_graphs import load_graphs_ondisk

        return load_graphs_ondisk(os.path.expanduser(name), verify=verify)
    if root is None:
        from sparsegcn.datasets.base import default_root

        root = default_root()
    if name.startswith(TU_PREFIX):
        from sparsegcn.datasets.tu import load_tu

        return load_tu(name, root, download=download, progress=progress)
    if name.startswith(OGBG_PREFIX):
        from sparsegcn.datasets.ogbg import load_ogbg

        return load_ogbg(name, root, download=download, progress=progress)
    if name in SYNTHETIC_GRAPHS:
        from sparsegcn.datasets.synthetic_graphs import load_synthetic_graphs

        return load_synthetic_graphs(name, seed=seed)
    raise ValueError(
        f"{name!r} is not a graph-level dataset (expected tu:NAME, one of {graph_names()}, or "
        "the path of an on-disk graph dataset folder such as ./molpcba)"
    )


__all__ = ["METRICS", "GraphDataset", "graph_names", "load_graphs"]

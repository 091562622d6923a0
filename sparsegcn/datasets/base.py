"""The one record every loader returns, and the checks it enforces."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks
from sparsegcn.graph import Graph

DATA_ROOT_ENV = "SPARSEGCN_DATA"
SPLITS = ("train", "valid", "test")


def check_load_arguments(root, **flags) -> None:
    """Refuses a ``root`` that is no path and on/off ``flags`` that are not bools, the
    arguments every loader shares (``download="no"`` was truthy and tried the network;
    ``root=123`` failed inside pathlib)."""
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a folder path, got {root!r} ({type(root).__name__})")
    for name, value in flags.items():
        _checks.check_flag(name, value)


def check_class_labels(labels: np.ndarray, num_classes: int) -> None:
    """Raises naming the first label outside ``[-1, num_classes)`` (-1: unlabelled)."""
    bad = (labels < -1) | (labels >= num_classes)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"labels[{pos}] = {int(labels[pos])} is outside [0, {num_classes}) "
            f"(use -1 only for unlabelled nodes)"
        )


def default_root() -> Path:
    """``$SPARSEGCN_DATA`` if set, else ``./datasets`` (the repository's data folder)."""
    return Path(os.environ.get(DATA_ROOT_ENV, "datasets"))


_READING_ONLY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "sparsegcn_reading_only", default=None
)


@contextlib.contextmanager
def reading_only(who: str) -> Iterator[None]:
    """Within the block, loaders read what is under the data root and write nothing there.

    ``sparsegcn predict`` loads the data a checkpoint names, from the root
    the checkpoint recorded unless ``--root`` is given: a file that may come
    from anyone. Inside this block a loader that would download a missing
    file refuses instead (:func:`check_may_download`), and a synthetic
    preset without a cache is generated in memory and not cached
    (:func:`may_write_cache`). Loads outside the block are unchanged.

    Args:
      who: what reads only, for the messages (``"sparsegcn predict"``).
    """
    token = _READING_ONLY.set(who)
    try:
        yield
    finally:
        _READING_ONLY.reset(token)


def may_write_cache() -> bool:
    """Whether a loader may write a cache under the data root (not inside :func:`reading_only`)."""
    return _READING_ONLY.get() is None


def check_may_download(what: str, where: str | os.PathLike) -> None:
    """Refuses a download inside :func:`reading_only`.

    Raises:
      FileNotFoundError: naming ``what`` is missing and ``where`` it was looked for.
    """
    who = _READING_ONLY.get()
    if who is not None:
        raise FileNotFoundError(
            f"{what} is not in {str(where)!r}, and {who} reads the data only: it downloads "
            f"and writes nothing under a data root. Pass --root where the data is, or fetch "
            f"it first (sparsegcn info --dataset NAME --root ROOT)"
        )


def check_disjoint_splits(split: dict, error: Callable[[str, str], Exception] | None = None):
    """Raises unless no split repeats a node and no node is in two splits.

    A node in both ``train`` and ``test`` makes the test accuracy partly a
    training accuracy; a repeated id weighs a node twice. Cost: a sort of
    each split.

    Args:
      split: ``{name: int [n_name] node ids}`` (memory maps are read once).
      error: ``(split name, message) -> exception`` to raise; default a
        ``ValueError`` naming ``split[name]``.

    Raises:
      ValueError: (or ``error``'s) the first repeated or shared id, with the count.
    """

    def fail(key: str, message: str) -> Exception:
        return error(key, message) if error else ValueError(f"split[{key!r}]: {message}")

    ordered = {}
    for key, ids in split.items():
        ids = np.sort(np.asarray(ids, np.int64))
        repeats = ids[1:][ids[1:] == ids[:-1]]
        if repeats.size:
            raise fail(
                key,
                f"node {int(repeats[0])} appears more than once in the {key!r} split "
                f"({np.unique(repeats).size} repeated id(s)); each node may appear once",
            )
        ordered[key] = ids
    keys = list(ordered)
    for i, first in enumerate(keys):
        for second in keys[i + 1 :]:
            shared = np.intersect1d(ordered[first], ordered[second], assume_unique=True)
            if shared.size:
                raise fail(
                    second,
                    f"node {int(shared[0])} is in both the {first!r} and the {second!r} split "
                    f"({shared.size} shared node(s)); the splits must be disjoint",
                )


def kind_name(value) -> str:
    """How an error names a value of the wrong type: ``None``, or its type's name."""
    return "None" if value is None else type(value).__name__


def check_feature_array(name: str, features, shape: str, *, sparse: bool = False) -> None:
    """Refuses features that are not an array of real numbers, reading no values.

    Datasets take arrays only (NumPy, memory-mapped, JAX, and scipy sparse where
    ``sparse``): everything after reads their shape and row slices, and a caller's
    ``np.asarray`` would choose the dtype. ``name`` and ``shape`` (``"[N, F]"``)
    name them in the message.

    Raises:
      TypeError: not such an array (a list, ``None``).
      ValueError: a dtype that is not integer or floating (complex, bool, object):
        training's float32 cast would drop imaginary parts or read flags as values.
    """
    if not isinstance(features, (np.ndarray, jax.Array)) and not (sparse and sp.issparse(features)):
        kinds = "a NumPy, JAX or scipy sparse array" if sparse else "a NumPy or JAX array"
        raise TypeError(f"{name} must be {kinds} {shape}, got {kind_name(features)}")
    dtype = features.dtype
    if dtype == np.bool_ or not (
        np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)
    ):
        raise ValueError(f"{name} must be real numbers, got dtype {dtype}")


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """A node-property-prediction dataset, ready for any model.

    Attributes:
      name: canonical name, e.g. ``"cora"``, ``"ogbn-arxiv"``, ``"synthetic:arxiv"``.
      graph: host :class:`Graph` (NumPy arrays, possibly memory-mapped), as
        the models consume it: symmetric where the publisher's examples make
        it so, without added self-loops.
      features: ``[N, F]`` float32, dense NumPy or scipy sparse (CSR).
      labels: int64 ``[N]`` in ``[0, num_classes)``, ``-1`` for unlabelled nodes;
        or, for a multi-label dataset (:attr:`multilabel`), int64
        ``[N, num_classes]`` of binary tasks: 1, 0, or -1 for a missing label
        (a node is unlabelled when all its tasks are missing).
      split: ``{"train", "valid", "test"}`` -> int64 node indices: labelled
        nodes, none repeated, no node in two splits.
      num_classes: ``C`` (the number of tasks ``T`` when multi-label).
      metric: the task's metric name: ``"acc"`` (accuracy) for class labels,
        ``"rocauc"`` (ROC-AUC averaged over tasks) for multi-label ones; no
        other is scored, so no other is taken. ``"auto"`` (the default) is
        replaced by the one the labels take.
      num_edges: edges as the publisher counts them (directed for
        ogbn-arxiv, undirected pairs for ogbn-products and Planetoid).
      info: free-form provenance (source URL, license, preset, ...).

    Construction refuses degenerate data: no nodes, features without
    columns, labels outside ``[-1, C)``, and splits that are out of range,
    unlabelled, repeat a node or share one (:func:`check_disjoint_splits`).
    An empty split is allowed here (``info`` shows it); training refuses it
    (:meth:`require_splits`).
    """

    name: str
    graph: Graph
    features: Any
    labels: np.ndarray
    split: dict
    num_classes: int
    metric: str = "auto"
    num_edges: int = -1
    info: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        where = f"dataset {self.name!r}"
        if not isinstance(self.graph, Graph):
            raise TypeError(f"{where}: graph must be a Graph, got {kind_name(self.graph)}")
        check_feature_array(f"{where}: features", self.features, "[N, F]", sparse=True)
        n = self.graph.num_nodes
        if n < 1:
            raise ValueError(f"dataset {self.name!r} has no nodes (num_nodes={n})")
        _checks.check_num_rows("features", self.features.shape, n)
        if len(self.features.shape) != 2 or self.features.shape[1] < 1:
            raise ValueError(
                f"dataset {self.name!r}: features must be [N, F] with F >= 1, got shape "
                f"{tuple(self.features.shape)}"
            )
        labels = np.asarray(self.labels)
        multilabel = labels.ndim == 2
        _checks.check_integer_array("labels", labels, ndim=2 if multilabel else 1)
        _checks.check_num_rows("labels", labels.shape, n)
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {self.num_classes}")
        if multilabel:
            if labels.shape[1] != self.num_classes:
                raise ValueError(
                    f"multi-label labels have {labels.shape[1]} tasks (shape {labels.shape}) but "
                    f"num_classes={self.num_classes}"
                )
            bad = (labels < -1) | (labels > 1)
            if bad.any():
                row, col = np.argwhere(bad)[0]
                raise ValueError(
                    f"labels[{row}, {col}] = {int(labels[row, col])}: multi-label labels must "
                    f"be 1, 0 or -1 (missing)"
                )
        else:
            check_class_labels(labels, self.num_classes)
        scored = "rocauc" if multilabel else "acc"  # what the node tasks score
        if self.metric == "auto":
            object.__setattr__(self, "metric", scored)
        if self.metric != scored:
            raise ValueError(
                f"{where}: metric must be {scored!r} for "
                f"{'multi-label' if multilabel else 'single-label'} labels (what the node "
                f"task scores), got {self.metric!r}"
            )
        labelled = (labels >= 0).any(axis=1) if multilabel else labels >= 0
        if set(self.split) != set(SPLITS):
            raise ValueError(f"split must have keys {SPLITS}, got {sorted(self.split)}")
        split = {}
        for key in SPLITS:
            idx = np.asarray(self.split[key])
            _checks.check_integer_array(f"split[{key!r}]", idx, ndim=1)
            _checks.check_ids_in_range(f"split[{key!r}]", idx, n)
            unlabelled = ~labelled[idx]
            if unlabelled.any():
                pos = int(np.flatnonzero(unlabelled)[0])
                raise ValueError(f"split[{key!r}][{pos}] = node {int(idx[pos])} has no label (-1)")
            split[key] = idx.astype(np.int64, copy=False)
        check_disjoint_splits(split)
        object.__setattr__(self, "labels", labels.astype(np.int64, copy=False))
        object.__setattr__(self, "split", split)
        if self.num_edges < 0:
            object.__setattr__(self, "num_edges", self.graph.num_edges)

    def require_splits(self, needed=SPLITS, *, purpose: str = "training") -> None:
        """Raises unless every split in ``needed`` holds at least one node.

        Training needs all three: ``train`` for the gradients, ``valid`` for
        early stopping and the choice of the best epoch, ``test`` for the
        accuracy the run reports (an empty one would read as 0).

        Raises:
          ValueError: naming the first empty split.
        """
        folder = self.info.get("folder")
        where = f"dataset {self.name!r}" + (f" ({folder})" if folder else "")
        for key in needed:
            if self.split[key].shape[0] == 0:
                raise ValueError(
                    f"{where}: the {key!r} split is empty (0 nodes); {purpose} "
                    f"needs nodes in each of {', '.join(map(repr, needed))}"
                )

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def multilabel(self) -> bool:
        """Whether the labels are ``[N, T]`` binary tasks rather than a class per node."""
        return self.labels.ndim == 2

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def split_sizes(self) -> dict:
        return {k: int(v.shape[0]) for k, v in self.split.items()}

    @property
    def nbytes(self) -> int:
        """Host memory held by the graph, features, labels and split, in bytes."""
        g = self.graph
        total = g.senders.nbytes + g.receivers.nbytes
        total += 0 if g.weights is None else g.weights.nbytes
        total += 0 if g.edge_features is None else g.edge_features.nbytes
        if sp.issparse(self.features):
            f = self.features
            total += f.data.nbytes + f.indices.nbytes + f.indptr.nbytes
        else:
            total += np.asarray(self.features).nbytes
        total += self.labels.nbytes + sum(v.nbytes for v in self.split.values())
        return int(total)

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"num_features={self.num_features}, num_classes={self.num_classes}, "
            f"split={self.split_sizes})"
        )

"""The one record every loader returns, and the checks it enforces."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks
from sparsegcn.graph import Graph

DATA_ROOT_ENV = "SPARSEGCN_DATA"
SPLITS = ("train", "valid", "test")


def default_root() -> Path:
    """``$SPARSEGCN_DATA`` if set, else ``./datasets`` (the repository's data folder)."""
    return Path(os.environ.get(DATA_ROOT_ENV, "datasets"))


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """A node-property-prediction dataset, ready for any model.

    Attributes:
      name: canonical name, e.g. ``"cora"``, ``"ogbn-arxiv"``, ``"synthetic:arxiv"``.
      graph: host :class:`Graph` (NumPy arrays, possibly memory-mapped), as
        the models consume it: symmetric where the publisher's examples make
        it so, without added self-loops.
      features: ``[N, F]`` float32, dense NumPy or scipy sparse (CSR).
      labels: int64 ``[N]`` in ``[0, num_classes)``, ``-1`` for unlabelled nodes.
      split: ``{"train", "valid", "test"}`` -> int64 node indices.
      num_classes: ``C``.
      metric: the task's metric name (``"acc"``: accuracy).
      num_edges: edges as the publisher counts them (directed for
        ogbn-arxiv, undirected pairs for ogbn-products and Planetoid).
      info: free-form provenance (source URL, license, preset, ...).
    """

    name: str
    graph: Graph
    features: Any
    labels: np.ndarray
    split: dict
    num_classes: int
    metric: str = "acc"
    num_edges: int = -1
    info: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        n = self.graph.num_nodes
        _checks.check_num_rows("features", self.features.shape, n)
        labels = np.asarray(self.labels)
        _checks.check_integer_array("labels", labels, ndim=1)
        _checks.check_num_rows("labels", labels.shape, n)
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {self.num_classes}")
        bad = (labels < -1) | (labels >= self.num_classes)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"labels[{pos}] = {int(labels[pos])} is outside [0, {self.num_classes}) "
                f"(use -1 only for unlabelled nodes)"
            )
        if set(self.split) != set(SPLITS):
            raise ValueError(f"split must have keys {SPLITS}, got {sorted(self.split)}")
        split = {}
        for key in SPLITS:
            idx = np.asarray(self.split[key])
            _checks.check_integer_array(f"split[{key!r}]", idx, ndim=1)
            _checks.check_ids_in_range(f"split[{key!r}]", idx, n)
            unlabelled = labels[idx] < 0
            if unlabelled.any():
                pos = int(np.flatnonzero(unlabelled)[0])
                raise ValueError(f"split[{key!r}][{pos}] = node {int(idx[pos])} has no label (-1)")
            split[key] = idx.astype(np.int64, copy=False)
        object.__setattr__(self, "labels", labels.astype(np.int64, copy=False))
        object.__setattr__(self, "split", split)
        if self.num_edges < 0:
            object.__setattr__(self, "num_edges", self.graph.num_edges)

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

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

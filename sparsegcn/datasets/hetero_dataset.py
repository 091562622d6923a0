"""The in-memory heterogeneous node dataset, apart from its loaders (so the
on-disk reader and :mod:`sparsegcn.datasets.mag` both import it without a cycle)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn import _checks
from sparsegcn.datasets.base import (
    SPLITS,
    check_class_labels,
    check_disjoint_splits,
    check_feature_array,
    kind_name,
)
from sparsegcn.hetero import HeteroGraph

MAG_CLASSES = 349
"""ogbn-mag's classes (venues); here so that the on-disk reader and
:mod:`sparsegcn.datasets.mag` both import it without a cycle."""

FEATURE_CHUNK = 1 << 22
"""Feature entries per step of :func:`check_finite_features` (bounded temporaries)."""


@dataclasses.dataclass(frozen=True)
class HeteroDataset:
    """A heterogeneous node classification dataset.

    Attributes:
      name: the dataset's name.
      graph: the :class:`~sparsegcn.HeteroGraph` as stored (raw relations,
        no reverses).
      features: ``{type: float32 [N_t, F]}`` for the featured types.
      target: the labelled node type.
      labels: int64 ``[N_target]``, ``-1`` where unlabelled.
      num_classes: ``C``.
      split: ``{"train", "valid", "test"}: int64 ids of target nodes``; no id
        twice, in one split or in two.
      metric: what the report scores (``"acc"``).
      info: free-form provenance (the generator and its scale and seed; the
        folder it was read from, which writers refuse to write into).

    Construction refuses a ``graph`` that is not a :class:`~sparsegcn.HeteroGraph`,
    features that are not a mapping of NumPy or JAX arrays of a real dtype (a
    list too: :class:`~sparsegcn.datasets.Dataset` takes arrays only), a node
    type without nodes, labels or split ids of a non-integer dtype, labels
    outside ``[-1, C)``, a ``num_classes`` that is not an integer >= 1, splits
    other than train/valid/test, unlabelled split nodes, repeated or shared
    split ids, and another metric than ``"acc"``. An empty split is allowed
    here (``info`` shows it); training refuses it (:meth:`require_splits`),
    and non-finite features (:meth:`check_features`; not read here, to keep
    loading a memory-mapped folder cheap).
    """

    name: str
    graph: HeteroGraph
    features: Mapping[str, np.ndarray]
    target: str
    labels: np.ndarray
    num_classes: int
    split: Mapping[str, np.ndarray]
    metric: str = "acc"
    info: Mapping = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        where = f"dataset {self.name!r}"
        if not isinstance(self.graph, HeteroGraph):
            raise TypeError(f"{where}: graph must be a HeteroGraph, got {kind_name(self.graph)}")
        if not isinstance(self.features, Mapping):
            raise TypeError(
                f"{where}: features must be a {{node_type: [N_t, F] array}} mapping, got "
                f"{kind_name(self.features)}"
            )
        for t, x in self.features.items():
            check_feature_array(f"{where}: features[{t!r}]", x, f"[N_{t}, F]")
        for t, count in self.graph.num_nodes.items():
            if count < 1:
                raise ValueError(
                    f"{where}: node type {t!r} has no nodes (num_nodes=0); training cannot "
                    "gather rows of an empty type: leave the type and its relations out"
                )
        n = self.graph.num_nodes.get(self.target)
        if n is None:
            raise ValueError(f"target {self.target!r} is not a node type of {self.name}")
        if self.metric != "acc":
            raise ValueError(
                f"{where}: metric must be 'acc' (the hetero task scores accuracy), got "
                f"{self.metric!r}"
            )
        _checks.check_hyperparameter("num_classes", self.num_classes)
        labels = np.asarray(self.labels) if not hasattr(self.labels, "dtype") else self.labels
        _checks.check_integer_array("labels", labels, ndim=1)
        if labels.shape != (n,):
            raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
        check_class_labels(labels, self.num_classes)
        object.__setattr__(self, "labels", labels)
        for t, x in self.features.items():
            if x.ndim != 2 or x.shape[0] != self.graph.num_nodes.get(t, -1) or x.shape[1] < 1:
                raise ValueError(f"features[{t!r}] must be [N_{t}, F] with F >= 1, got {x.shape}")
        if set(self.split) != set(SPLITS):
            raise ValueError(f"split must have keys {SPLITS}, got {sorted(self.split)}")
        for part, idx in self.split.items():
            idx = np.asarray(idx)
            _checks.check_integer_array(f"split[{part!r}]", idx, ndim=1)
            _checks.check_ids_in_range(f"split[{part!r}]", idx, n)
            known = labels[idx]
            if (known < 0).any():
                raise ValueError(
                    f"split[{part!r}] holds nodes without a label in [0, {self.num_classes})"
                )
        check_disjoint_splits(
            self.split,
            error=lambda part, message: ValueError(
                f"split[{part!r}] of {self.target!r} nodes: {message}"
            ),
        )

    def require_splits(self, needed=SPLITS, *, purpose: str = "training") -> None:
        """Raises unless every split in ``needed`` holds at least one node, as
        :meth:`~sparsegcn.datasets.Dataset.require_splits` does (same words).

        Raises:
          ValueError: naming the first empty split.
        """
        folder = self.info.get("folder")
        where = f"dataset {self.name!r}" + (f" ({folder})" if folder else "")
        for key in needed:
            if np.shape(self.split[key])[0] == 0:
                raise ValueError(
                    f"{where}: the {key!r} split is empty (0 nodes); {purpose} "
                    f"needs nodes in each of {', '.join(map(repr, needed))}"
                )

    def check_features(self, chunk: int = FEATURE_CHUNK) -> None:
        """Raises unless every feature is finite (:func:`check_finite_features`)."""
        check_finite_features(self.features, chunk)

    def stats(self) -> dict:
        """``num_nodes``/``num_edges`` totals (raw edges) plus counts per type and relation."""
        edges = self.graph.num_edges
        return {
            "name": self.name,
            "num_nodes": int(sum(self.graph.num_nodes.values())),
            "num_edges": int(sum(edges.values())),
            "num_nodes_per_type": dict(self.graph.num_nodes),
            "num_edges_per_relation": {"___".join(k): v for k, v in edges.items()},
            "num_features": {t: int(x.shape[1]) for t, x in self.features.items()},
            "num_classes": int(self.num_classes),
            "target": self.target,
            **{f"num_{part}": len(idx) for part, idx in self.split.items()},
        }


def check_finite_features(features: Mapping[str, Any], chunk: int = FEATURE_CHUNK) -> None:
    """Raises naming the node type, row and column of the first non-finite feature.

    ``features`` is ``{type: [N_t, F]}``: NumPy arrays or memory maps (read in
    row chunks of about ``chunk`` entries, their pages released after each),
    or JAX arrays (checked on the device first; only a bad one is copied to
    the host to find the entry). A float64 value past float32's range is
    refused too: training casts the features to float32, where it is infinite.

    Raises:
      ValueError: ``"features['paper'][31, 2] = nan is not finite"``.
    """
    from sparsegcn.files import release_pages

    for t, x in features.items():
        name = f"features[{t!r}]"
        if isinstance(x, jax.Array):
            if not jnp.issubdtype(x.dtype, jnp.floating) or bool(jnp.isfinite(x).all()):
                continue
            x = np.asarray(x)
        dtype = np.dtype(x.dtype)
        if not np.issubdtype(dtype, np.floating):
            continue
        wide = np.finfo(dtype).max > np.finfo(np.float32).max
        rows = max(1, chunk // max(1, int(x.shape[1]) if x.ndim == 2 else 1))
        for start in range(0, x.shape[0], rows):
            part = np.asarray(x[start : start + rows])
            bad = ~np.isfinite(part)
            if wide:
                with np.errstate(invalid="ignore"):
                    bad |= np.abs(part) > np.finfo(np.float32).max
            if bad.any():
                pos = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), part.shape)
                value = part[pos]
                where = ", ".join(str(int(i) + (start if k == 0 else 0)) for k, i in enumerate(pos))
                if np.isfinite(value):
                    raise ValueError(
                        f"{name}[{where}] = {value} is past the range of float32 (|x| <= "
                        f"{np.finfo(np.float32).max:.4g}), the dtype training computes in"
                    )
                raise ValueError(f"{name}[{where}] = {value} is not finite")
            if isinstance(x, np.memmap):
                release_pages(x)


__all__ = ["FEATURE_CHUNK", "MAG_CLASSES", "HeteroDataset", "check_finite_features"]

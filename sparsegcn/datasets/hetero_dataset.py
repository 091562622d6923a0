"""The in-memory heterogeneous node dataset, apart from its loaders (so the
on-disk reader and :mod:`sparsegcn.datasets.mag` both import it without a cycle)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from sparsegcn import _checks
from sparsegcn.datasets.base import check_disjoint_splits
from sparsegcn.hetero import HeteroGraph


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
        n = self.graph.num_nodes.get(self.target)
        if n is None:
            raise ValueError(f"target {self.target!r} is not a node type of {self.name}")
        if self.labels.shape != (n,):
            raise ValueError(f"labels must have shape ({n},), got {self.labels.shape}")
        for t, x in self.features.items():
            if x.ndim != 2 or x.shape[0] != self.graph.num_nodes.get(t, -1):
                raise ValueError(f"features[{t!r}] must be [N_{t}, F], got {x.shape}")
        for part, idx in self.split.items():
            _checks.check_ids_in_range(f"split[{part!r}]", np.asarray(idx), n)
            known = self.labels[np.asarray(idx)]
            if (known < 0).any() or (known >= self.num_classes).any():
                raise ValueError(
                    f"split[{part!r}] holds nodes without a label in [0, {self.num_classes})"
                )
        check_disjoint_splits(
            self.split,
            error=lambda part, message: ValueError(
                f"split[{part!r}] of {self.target!r} nodes: {message}"
            ),
        )

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


# -- synthetic twin ------------------------------------------------------------


__all__ = ["HeteroDataset"]

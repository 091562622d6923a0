"""The record every link-prediction loader returns, and the graph of its training pairs.

:class:`LinkDataset` is defined here, below the loaders that build it
(:mod:`.ogbl`, :mod:`.synthetic_links`) and the dispatch that picks one
(:mod:`.links`, which re-exports it); see :mod:`.links` for the two forms of
negatives.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from sparsegcn import _checks
from sparsegcn.datasets.base import SPLITS
from sparsegcn.graph import Graph

LINK_SPLITS = (*SPLITS, "valid_neg", "test_neg")
"""The keys of :attr:`LinkDataset.split`."""
NEGATIVE_FORMS = ("pairs", "targets")
_METRIC = re.compile(r"(hits@[1-9][0-9]*|mrr|rocauc|auc|ap)")


def check_node_ids(name: str, array: np.ndarray, num_nodes: int) -> None:
    """Raises ``ValueError`` naming the first entry of ``array`` (any shape) outside
    ``[0, num_nodes)``: ``name[i, j] = v is not a node id in [0, N)``."""
    if array.size == 0:
        return
    bad = (array < 0) | (array >= num_nodes)
    if bad.any():
        pos = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), array.shape)
        index = ", ".join(str(int(i)) for i in pos)
        raise ValueError(
            f"{name}[{index}] = {int(array[pos])} is not a node id in [0, {num_nodes}) "
            f"({int(bad.sum())} bad id(s) in all)"
        )


def _check_pairs(name: str, pairs, num_nodes: int) -> np.ndarray:
    array = np.asarray(pairs)
    _checks.check_integer_array(name, array, ndim=2)
    if array.shape[1] != 2:
        raise ValueError(f"{name} must have shape [P, 2] (node pairs), got {array.shape}")
    check_node_ids(name, array, num_nodes)
    return array.astype(np.int64, copy=False)


def _check_per_edge(name: str, values, count: int, table: str) -> np.ndarray | None:
    if values is None:
        return None
    array = np.asarray(values)
    _checks.check_integer_array(name, array, ndim=1)
    if array.shape[0] != count:
        raise ValueError(
            f"{name} must have one value per row of {table} ({count}), got {array.shape}"
        )
    return array.astype(np.int64, copy=False)


@dataclasses.dataclass(frozen=True, eq=False)
class LinkDataset:
    """A link-prediction dataset: a training graph, node features, pairs to score.

    Attributes:
      name: e.g. ``"ogbl-collab"``, ``"synthetic:citation2"``.
      graph: the host :class:`Graph` messages pass on: the training edges,
        both directions of each, repeated pairs merged (distinct, sorted by
        receiver then sender, unweighted). The validation and test edges are
        not in it (though in ogbl-collab a pair that collaborated again in a
        later year is a training pair too); see
        :func:`~sparsegcn.datasets.links.message_graph` for OGB's
        ``--use_valedges_as_input``.
        For directed datasets (citation2) it is symmetric too, as OGB's
        baselines make it (``adj_t.to_symmetric()``); the split's pairs keep
        their direction.
      features: float32 ``[N, F]``, or ``None`` for a dataset without node
        features (ogbl-ddi: models learn an embedding per node).
      split: ``{"train": [P, 2], "valid": [Pv, 2], "test": [Pt, 2],
        "valid_neg": ..., "test_neg": ...}``, int64 node ids; positives are
        ``(source, target)`` rows; negatives in the form :attr:`negatives`
        names (see :mod:`sparsegcn.datasets.links`). ``train`` keeps repeats where the
        publisher has them (a collab pair collaborating in several years).
      metric: OGB's evaluation metric: ``"hits@50"``, ``"mrr"``, ...
      directed: whether a pair ``(s, t)`` differs from ``(t, s)`` (a
        citation ``s -> t``); ``False``: the pairs are unordered.
      num_edges: the positive edges as the publisher counts them: the rows
        of ``train``, ``valid`` and ``test`` together.
      edge_weight: int64 ``[P]``, one per ``train`` row, or ``None``
        (collab: papers co-written that year).
      edge_year: int64 ``[P]``, one per ``train`` row, or ``None`` (collab).
      node_year: int64 ``[N]`` or ``None`` (citation2: the paper's year).
      info: provenance (source, license, folder, generator, ...).
      negative_form: ``"pairs"`` or ``"targets"`` (:data:`NEGATIVE_FORMS`), as
        the source lays its negatives out (OGB's ``edge_neg`` or
        ``target_node_neg``); ``None``: told by their width, 2 columns pairs and
        any other ``K`` targets per source, so ``[P, 2]`` per-source negatives
        need the form given. Construction stores the form it settled on.

    Construction checks shapes, integer dtypes and node ranges of every
    array, that ``graph`` has the features' node count, and that per-source
    negatives have one row per positive; a :class:`ValueError` names the
    first offending array and value.
    """

    name: str
    graph: Graph
    features: np.ndarray | None
    split: dict
    metric: str
    directed: bool
    num_edges: int = -1
    edge_weight: np.ndarray | None = None
    edge_year: np.ndarray | None = None
    node_year: np.ndarray | None = None
    info: dict = dataclasses.field(default_factory=dict)
    # A str or None, checked by __post_init__; typed object because loaders splat dicts of
    # per-edge arrays (`**{"edge_weight": ...}`) into this constructor.
    negative_form: object = None

    def __post_init__(self):
        n = self.graph.num_nodes
        if n < 1:
            raise ValueError(f"link dataset {self.name!r} has no nodes")
        if self.features is not None:
            shape = tuple(self.features.shape)
            if len(shape) != 2 or shape[0] != n or shape[1] < 1:
                raise ValueError(
                    f"link dataset {self.name!r}: features must be [N, F] = [{n}, F >= 1], got "
                    f"shape {shape}"
                )
        if not isinstance(self.metric, str) or not _METRIC.fullmatch(self.metric):
            raise ValueError(
                f"link dataset {self.name!r}: metric must be hits@K, mrr, rocauc, auc or ap, "
                f"got {self.metric!r}"
            )
        if set(self.split) != set(LINK_SPLITS):
            raise ValueError(f"split must have keys {LINK_SPLITS}, got {sorted(self.split)}")
        split = {key: _check_pairs(f"split[{key!r}]", self.split[key], n) for key in SPLITS}
        for key in ("valid", "test"):
            neg = np.asarray(self.split[f"{key}_neg"])
            label = f"split[{key + '_neg'!r}]"
            _checks.check_integer_array(label, neg, ndim=2)
            check_node_ids(label, neg, n)
            split[f"{key}_neg"] = neg.astype(np.int64, copy=False)
        shapes = {split[k].shape for k in ("valid_neg", "test_neg")}
        form = self.negative_form
        if form is None:
            form = self._negative_form(split)
        elif not isinstance(form, str) or form not in NEGATIVE_FORMS:
            raise ValueError(
                f"link dataset {self.name!r}: negative_form must be one of {NEGATIVE_FORMS} "
                f"or None, got {form!r}"
            )
        if form == "targets":
            for key in ("valid", "test"):
                if split[f"{key}_neg"].shape[0] != split[key].shape[0]:
                    raise ValueError(
                        f"split[{key + '_neg'!r}] holds per-source negatives: one row per "
                        f"positive of split[{key!r}] ({split[key].shape[0]}), got "
                        f"{split[key + '_neg'].shape}"
                    )
        elif any(s[1] != 2 for s in shapes):
            raise ValueError(f"negatives must all be [Q, 2] pairs or all [P, K], got {shapes}")
        object.__setattr__(self, "split", split)
        object.__setattr__(self, "negative_form", form)
        p = split["train"].shape[0]
        for field in ("edge_weight", "edge_year"):
            value = _check_per_edge(field, getattr(self, field), p, "split['train']")
            object.__setattr__(self, field, value)
        node_year = _check_per_edge("node_year", self.node_year, n, "the nodes")
        object.__setattr__(self, "node_year", node_year)
        object.__setattr__(self, "directed", bool(self.directed))
        if self.num_edges < 0:
            object.__setattr__(self, "num_edges", sum(split[k].shape[0] for k in SPLITS))

    @staticmethod
    def _negative_form(split: dict) -> str:
        """The form told by the width when none is given: ``"pairs"`` when the negatives
        have 2 columns, ``"targets"`` (``[P, K]``) otherwise (``K = 2`` per-source
        negatives read as pairs here: give :attr:`negative_form` for them)."""
        return "pairs" if split["valid_neg"].shape[1] == 2 else "targets"

    @property
    def negatives(self) -> str:
        """``"pairs"`` (``[Q, 2]`` node pairs) or ``"targets"`` (``[P, K]`` targets per
        source); see the module docstring."""
        form = self.negative_form
        return form if isinstance(form, str) else self._negative_form(self.split)

    def require_splits(self, needed=LINK_SPLITS, *, purpose: str = "training") -> None:
        """Raises unless every split in ``needed`` holds at least one row.

        Construction allows an empty split (``describe_links`` shows it);
        training needs positives to fit, positives and negatives to validate
        and to test (an empty one would read as a metric of 0).

        Raises:
          ValueError: naming the first empty split and the dataset's folder.
        """
        folder = self.info.get("folder")
        where = f"dataset {self.name!r}" + (f" ({folder})" if folder else "")
        for key in needed:
            if self.split[key].shape[0] == 0:
                raise ValueError(
                    f"{where}: the {key!r} split is empty (0 rows); {purpose} needs rows in "
                    f"each of {', '.join(map(repr, needed))}"
                )

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_features(self) -> int:
        """``F``, or 0 for a dataset without features."""
        return 0 if self.features is None else int(self.features.shape[1])

    @property
    def split_sizes(self) -> dict:
        """Rows of each split array (negatives: pairs, or sources with ``K`` targets each)."""
        return {k: int(v.shape[0]) for k, v in self.split.items()}

    @property
    def nbytes(self) -> int:
        """Host memory held by the graph, features, split and per-edge arrays, in bytes."""
        arrays = [self.graph.senders, self.graph.receivers, self.features, *self.split.values()]
        arrays += [self.edge_weight, self.edge_year, self.node_year]
        return int(sum(np.asarray(a).nbytes for a in arrays if a is not None))

    def __repr__(self) -> str:
        return (
            f"LinkDataset({self.name!r}, num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"num_features={self.num_features}, metric={self.metric!r}, "
            f"negatives={self.negatives!r}, split={self.split_sizes})"
        )


def symmetric_graph(pairs: np.ndarray, num_nodes: int, weights=None) -> Graph:
    """Both directions of every pair, repeats merged, sorted by (receiver, sender).

    .. math:: A = \\min(1, B + B^\\top) \\quad\\text{or, weighted,}\\quad A = W + W^\\top
              \\text{ off the diagonal}

    where ``B`` counts the pairs and ``W`` sums their weights: a pair listed
    ``k`` times with weights ``w_1..w_k`` gets ``Σ w`` in both directions
    (OGB's ``ToSparseTensor`` on ``edge_weight``); a self-pair ``(v, v)``
    gets its sum once.

    Args:
      pairs: int ``[P, 2]`` node pairs.
      num_nodes: ``N``.
      weights: optional ``[P]`` numbers, one per pair.

    Returns:
      A host :class:`Graph` with ``edges_sorted=True``; float32 weights when
      ``weights`` is given, else ``None``.
    """
    pairs = _check_pairs("pairs", pairs, num_nodes)
    n = np.int64(num_nodes)
    a, b = pairs[:, 0], pairs[:, 1]
    keys = np.concatenate([b * n + a, a * n + b])  # receiver * N + sender
    if weights is None:
        keys.sort()
        keep = np.ones(keys.shape, bool)
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys, summed = keys[keep], None
    else:
        w = np.asarray(weights, np.float64)
        if w.shape != (pairs.shape[0],):
            raise ValueError(f"weights must have shape ({pairs.shape[0]},), got {w.shape}")
        loops = a == b  # both copies of a self-pair land on one key: count it once
        w2 = np.concatenate([w, np.where(loops, 0.0, w)])
        order = np.argsort(keys, kind="stable")
        keys, w2 = keys[order], w2[order]
        first = np.ones(keys.shape, bool)
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        keys = keys[starts]
        summed = np.add.reduceat(w2, starts).astype(np.float32) if starts.size else w2[:0]
    receivers, senders = np.divmod(keys, n)
    return Graph(senders, receivers, summed, num_nodes, edges_sorted=True)


__all__ = [
    "LINK_SPLITS",
    "NEGATIVE_FORMS",
    "LinkDataset",
    "check_node_ids",
    "symmetric_graph",
]

"""Link-prediction datasets: :class:`LinkDataset`, :func:`load_links` and :func:`describe_links`.

A link dataset is a graph whose messages pass on the *training* edges only,
node features, and a split of node pairs to predict:

==========================  ====================================================
name                        source
==========================  ====================================================
``ogbl-collab``,            OGB's raw layout read without ``ogb`` or torch
``ogbl-citation2``,         (:mod:`.ogbl`), with the official split
``ogbl-ddi``, ``ogbl-ppa``
``synthetic:collab``,       full-size twins generated locally
``synthetic:citation2``     (:mod:`.synthetic_links`)
==========================  ====================================================

**Two forms of negatives**, kept as OGB gives them (:attr:`LinkDataset.negatives`):

- ``"pairs"`` (collab, ddi, ppa; OGB's ``edge_neg``): ``valid_neg`` and
  ``test_neg`` are int64 ``[Q, 2]`` node pairs, shared by every positive;
  the metric is Hits@K, the fraction of positives scored above the K-th
  highest negative.
- ``"targets"`` (citation2; OGB's ``target_node_neg``): ``valid_neg`` is
  int64 ``[Pv, K]``: row ``i`` holds ``K`` target nodes that, with the
  source ``valid[i, 0]``, make the ``K`` negatives ranked against the
  positive ``valid[i]``; the metric is the mean reciprocal rank (MRR).

OGB's ``source_node``/``target_node`` arrays are stacked as the columns of
``[P, 2]``, so every split holds pairs ``(source, target)``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np

from sparsegcn import _checks
from sparsegcn.datasets.base import SPLITS, default_root
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
        receiver then sender, unweighted). Validation and test edges are not
        in it (see :func:`message_graph` for OGB's ``--use-valid-edges``).
        For directed datasets (citation2) it is symmetric too, as OGB's
        baselines make it (``adj_t.to_symmetric()``); the split's pairs keep
        their direction.
      features: float32 ``[N, F]``, or ``None`` for a dataset without node
        features (ogbl-ddi: models learn an embedding per node).
      split: ``{"train": [P, 2], "valid": [Pv, 2], "test": [Pt, 2],
        "valid_neg": ..., "test_neg": ...}``, int64 node ids; positives are
        ``(source, target)`` rows; negatives in the form :attr:`negatives`
        names (module docstring). ``train`` keeps repeats where the
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
        form = self._negative_form(split)
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
        """``"targets"`` when ``valid_neg`` is ``[Pv, K]`` with ``K != 2`` or with
        one row per positive and not pairs-shaped; ``"pairs"`` otherwise."""
        neg = split["valid_neg"]
        return "pairs" if neg.shape[1] == 2 else "targets"

    @property
    def negatives(self) -> str:
        """``"pairs"`` (``[Q, 2]`` node pairs) or ``"targets"`` (``[P, K]`` targets per
        source); see the module docstring."""
        return self._negative_form(self.split)

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


def message_graph(
    dataset: LinkDataset, *, use_valid_edges: bool = False, weighted: bool = False
) -> Graph:
    """The graph to pass messages on, as OGB's link baselines build it.

    - Default: ``dataset.graph``, the training edges (both directions,
      repeats merged, unweighted).
    - ``use_valid_edges=True``: the training and validation edges together,
      both directions, repeats merged, unweighted: OGB's
      ``--use_valid_edges_as_input`` for the final test of ogbl-collab
      (``examples/linkproppred/collab/gnn.py``: ``full_adj_t``), where test
      edges are predicted from every edge before 2019. Use it for the test
      only: model selection on the validation edges must not see them.
    - ``weighted=True``: the training edges weighted by the sum of their
      ``edge_weight`` over repeats (that baseline's ``adj_t``).

    Raises:
      ValueError: ``weighted`` without ``edge_weight``, or together with
        ``use_valid_edges`` (OGB's graph with validation edges is unweighted).
    """
    if weighted and use_valid_edges:
        raise ValueError(
            "weighted=True and use_valid_edges=True together: OGB's graph with the validation "
            "edges is unweighted (collab/gnn.py's full_adj_t); choose one"
        )
    if weighted:
        if dataset.edge_weight is None:
            raise ValueError(f"{dataset.name} has no edge_weight; weighted=True needs it")
        return symmetric_graph(dataset.split["train"], dataset.num_nodes, dataset.edge_weight)
    if not use_valid_edges:
        return dataset.graph
    g = dataset.graph
    present = np.stack([np.asarray(g.senders, np.int64), np.asarray(g.receivers, np.int64)], 1)
    return symmetric_graph(np.concatenate([present, dataset.split["valid"]]), dataset.num_nodes)


def _kind(name: str) -> str | None:
    from sparsegcn.datasets import SYNTHETIC_PREFIX
    from sparsegcn.datasets.ogbl import OGBL_LAYOUTS
    from sparsegcn.datasets.synthetic_links import LINK_PRESETS

    if name in OGBL_LAYOUTS:
        return "ogbl"
    if name.startswith(SYNTHETIC_PREFIX) and name[len(SYNTHETIC_PREFIX) :] in LINK_PRESETS:
        return "synthetic"
    return None


def link_names() -> list[str]:
    """Every name :func:`load_links` accepts."""
    from sparsegcn.datasets import SYNTHETIC_PREFIX
    from sparsegcn.datasets.ogbl import OGBL_LAYOUTS
    from sparsegcn.datasets.synthetic_links import LINK_PRESETS

    return [*OGBL_LAYOUTS, *(SYNTHETIC_PREFIX + p for p in LINK_PRESETS)]


def is_link_dataset(name) -> bool:
    """Whether ``name`` is a link-prediction dataset's name (:func:`link_names`)."""
    return isinstance(name, str) and _kind(name) is not None


def _check_name(name, scale, seed) -> str:
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a string, got {name!r} ({type(name).__name__})")
    kind = _kind(name)
    if kind is None:
        raise ValueError(f"unknown link dataset {name!r}; choose one of {link_names()}")
    if kind != "synthetic" and (scale != 1.0 or seed != 0):
        given = "scale" if scale != 1.0 else "seed"
        value = scale if scale != 1.0 else seed
        raise ValueError(
            f"{given}={value!r} applies only to generated datasets (synthetic:<preset>), "
            f"not {name!r}"
        )
    return kind


def load_links(
    name: str,
    root: str | os.PathLike | None = None,
    *,
    download: bool = True,
    progress: bool = False,
    scale: float = 1.0,
    seed: int = 0,
) -> LinkDataset:
    """Loads a link-prediction dataset by name.

    Args:
      name: one of :func:`link_names`: ``ogbl-collab``, ``ogbl-citation2``,
        ``ogbl-ddi``, ``ogbl-ppa``, ``synthetic:collab``, ``synthetic:citation2``.
      root: data root (default ``$SPARSEGCN_DATA`` or ``./datasets``); OGB
        folders live in ``<root>/ogbl_collab/`` etc., as ``ogb`` lays them
        out; synthetic caches in ``<root>/synthetic/``.
      download: fetch a missing OGB folder where a checksum is known
        (:func:`~sparsegcn.datasets.ogbl.load_ogbl`).
      progress: progress bars.
      scale: in ``(0, 1]``, synthetic presets only: nodes, edges and split
        sizes shrink by this factor.
      seed: generator seed, synthetic presets only.

    Raises:
      TypeError: ``name`` is not a string.
      ValueError: an unknown name, ``scale``/``seed`` for a non-synthetic
        dataset, or malformed files (naming file and line).
      FileNotFoundError: an OGB folder is missing and cannot be downloaded;
        the message says where to put it.
    """
    kind = _check_name(name, scale, seed)
    root = default_root() if root is None else Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"root {str(root)!r} exists but is not a directory")
    if kind == "ogbl":
        from sparsegcn.datasets.ogbl import load_ogbl

        return load_ogbl(name, root, download=download, progress=progress)
    from sparsegcn.datasets import SYNTHETIC_PREFIX
    from sparsegcn.datasets.synthetic_links import load_synthetic_links

    preset = name[len(SYNTHETIC_PREFIX) :]
    return load_synthetic_links(preset, root, scale=scale, seed=seed, progress=progress)


def link_stats(dataset: LinkDataset) -> dict:
    """The statistics :func:`describe_links` reports, from a loaded dataset.

    Keys: ``name``, ``num_nodes``, ``num_edges`` (positives as the publisher
    counts them), ``num_stored_edges`` (directed edges of the message
    graph), ``num_features``, ``directed``, ``metric``, ``negatives``,
    ``num_negatives_per_source`` (``K`` for ``"targets"``, else ``None``),
    ``split_sizes``, ``mean_degree`` (of the message graph) and ``bytes``.
    """
    neg = dataset.split["valid_neg"]
    return {
        "name": dataset.name,
        "num_nodes": dataset.num_nodes,
        "num_edges": int(dataset.num_edges),
        "num_stored_edges": dataset.graph.num_edges,
        "num_features": dataset.num_features,
        "directed": dataset.directed,
        "metric": dataset.metric,
        "negatives": dataset.negatives,
        "num_negatives_per_source": int(neg.shape[1]) if dataset.negatives == "targets" else None,
        "split_sizes": dataset.split_sizes,
        "mean_degree": dataset.graph.num_edges / dataset.num_nodes,
        "bytes": dataset.nbytes,
    }


def stats_text(stats: dict) -> str:
    """``stats`` (:func:`link_stats`) as the aligned lines ``sparsegcn info`` prints."""
    sizes = stats["split_sizes"]
    if stats["negatives"] == "targets":
        negatives = (
            f"{sizes['valid_neg']:,} / {sizes['test_neg']:,} sources x "
            f"{stats['num_negatives_per_source']:,} targets (valid / test)"
        )
    else:
        negatives = f"{sizes['valid_neg']:,} / {sizes['test_neg']:,} pairs (valid / test)"
    rows = [
        ("dataset", stats["name"]),
        ("nodes", f"{stats['num_nodes']:,}"),
        (
            "edges",
            f"{stats['num_edges']:,} {'directed' if stats['directed'] else 'undirected'} "
            f"(train + valid + test)",
        ),
        ("message graph", f"{stats['num_stored_edges']:,} directed edges (training edges)"),
        ("features", str(stats["num_features"]) if stats["num_features"] else "none"),
        (
            "positives",
            f"{sizes['train']:,} train, {sizes['valid']:,} valid, {sizes['test']:,} test",
        ),
        ("negatives", negatives),
        ("metric", stats["metric"]),
    ]
    if stats.get("note"):
        rows.append(("note", stats["note"]))
    width = max(len(k) for k, _ in rows) + 2
    return "\n".join(f"{k:<{width}}{v}" for k, v in rows)


def describe_links(
    name: str, root: str | os.PathLike | None = None, *, scale: float = 1.0, seed: int = 0
) -> tuple[dict, str]:
    """What ``sparsegcn info --dataset NAME`` reports for a link dataset.

    An ``ogbl-*`` dataset is read (never downloaded). A synthetic preset is
    described from its specification, without generating it: its counts
    are exact by construction (:mod:`.synthetic_links`), and ``bytes`` is
    the memory a load holds.

    Returns:
      ``(stats, text)``: the dict of :func:`link_stats` (synthetic presets
      add ``"note"``), and its lines (:func:`stats_text`).

    Raises:
      ValueError: as :func:`load_links`.
    """
    kind = _check_name(name, scale, seed)
    if kind == "synthetic":
        from sparsegcn.datasets import SYNTHETIC_PREFIX
        from sparsegcn.datasets.synthetic_links import LINK_PRESETS

        stats = LINK_PRESETS[name[len(SYNTHETIC_PREFIX) :]].scaled(scale).stats()
    else:
        stats = link_stats(load_links(name, root, download=False))
    return stats, stats_text(stats)


__all__ = [
    "LINK_SPLITS",
    "NEGATIVE_FORMS",
    "LinkDataset",
    "check_node_ids",
    "describe_links",
    "is_link_dataset",
    "link_names",
    "link_stats",
    "load_links",
    "message_graph",
    "stats_text",
    "symmetric_graph",
]

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

import os
from pathlib import Path

import numpy as np

from sparsegcn import _checks
from sparsegcn.datasets import OGBL, SYNTHETIC_LINKS, SYNTHETIC_PREFIX
from sparsegcn.datasets.base import check_load_arguments, default_root
from sparsegcn.datasets.link_base import (
    LINK_SPLITS,
    NEGATIVE_FORMS,
    LinkDataset,
    check_node_ids,
    symmetric_graph,
)
from sparsegcn.graph import Graph


def message_graph(
    dataset: LinkDataset, *, use_valid_edges: bool = False, weighted: bool = False
) -> Graph:
    """The graph to pass messages on, as OGB's link baselines build it.

    - Default: ``dataset.graph``, the training edges (both directions,
      repeats merged, unweighted).
    - ``use_valid_edges=True``: the training and validation edges together,
      both directions, repeats merged, unweighted: OGB's
      ``--use_valedges_as_input`` for the final test of ogbl-collab
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
    if name in OGBL:
        return "ogbl"
    if name.startswith(SYNTHETIC_PREFIX) and name[len(SYNTHETIC_PREFIX) :] in SYNTHETIC_LINKS:
        return "synthetic"
    return None


def link_names() -> list[str]:
    """Every name :func:`load_links` accepts."""
    return [*OGBL, *(SYNTHETIC_PREFIX + p for p in SYNTHETIC_LINKS)]


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
    check_load_arguments(root, download=download, progress=progress)
    kind = _check_name(name, scale, seed)
    root = default_root() if root is None else Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"root {str(root)!r} exists but is not a directory")
    if kind == "ogbl":
        from sparsegcn.datasets.ogbl import load_ogbl

        return load_ogbl(name, root, download=download, progress=progress)
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
        from sparsegcn.datasets.synthetic_links import LINK_PRESETS

        _checks.check_static_int("seed", seed)  # described, not generated: checked here

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

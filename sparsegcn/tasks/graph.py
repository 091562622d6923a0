"""The graph task's pipeline: a ``tu:NAME`` dataset, k folds, GIN, the report.

:func:`run_graph_experiment` loads the graphs, builds the folds
(:func:`~sparsegcn.train.graphs.fold_splits`; without ``--folds``, one
stratified holdout, fold 0 of 10), trains every fold and seed as one
program (:func:`~sparsegcn.train.graphs.fit_graphs`) and reports.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from sparsegcn.batch import choose_budget

HOLDOUT_FOLDS = 10
"""Without ``--folds``: train on one fold of a 10-fold split (test 10 %)."""

# Experiment settings the graph trainer does not read, with the value that means "unset".
_UNSUPPORTED = {
    "fanouts": (None, "none"),
    "checkpoint": (None,),
    "resume": (None,),
    "plot": (None,),
    "reorder": ("none",),
    "residual": (False,),
    "feature_cache": (None,),
    "features_on": ("auto", "device"),
    "graph_on": ("auto", "device"),
    "max_batches": (0,),
    "shard_features": (False,),
    "coordinator": (None,),
    "devices": (1,),
    "num_processes": (1,),
    "patience": (0,),
    "monitor": ("val_acc",),
    "epochs_per_call": (0,),
    "clip_norm": (0.0,),
}


def check_graph_experiment(exp) -> None:
    """Refuses the settings graph training does not support, naming the first.

    Raises:
      ValueError: a node-task setting (sampling, several devices,
        checkpoints, plots, ...), ``--folds 1``, or a readout it lacks.
    """
    for name, unset in _UNSUPPORTED.items():
        value = getattr(exp, name)
        if value not in unset:
            raise ValueError(
                f"{exp.dataset}: graph classification trains every fold on one device without "
                f"checkpoints or early stopping; {name}={value!r} is not supported with it"
            )
    from sparsegcn import _checks
    from sparsegcn.nn.graph_gin import GRAPH_READOUTS

    if _checks.check_static_int("folds", exp.folds) == 1:
        raise ValueError(f"--folds must be 0 (one holdout split) or at least 2, got {exp.folds}")
    if exp.readout not in GRAPH_READOUTS:
        raise ValueError(f"--readout must be one of {list(GRAPH_READOUTS)}, got {exp.readout!r}")


def prepare_graphs(exp, *, progress: bool = False):
    """The dataset, its splits and the trainer's settings for ``exp``.

    Returns:
      ``(dataset, splits, config)``: a
      :class:`~sparsegcn.datasets.graph_dataset.GraphDataset`,
      :class:`~sparsegcn.train.graphs.Splits` and
      :class:`~sparsegcn.train.graphs.GraphTrainConfig`.
    """
    from sparsegcn.datasets.base import default_root
    from sparsegcn.datasets.graphs import load_graphs
    from sparsegcn.train.graphs import GraphTrainConfig, fold_splits

    root = default_root() if exp.root is None else exp.root
    dataset = load_graphs(exp.dataset, root, progress=progress)
    folds = exp.folds or HOLDOUT_FOLDS
    splits = fold_splits(dataset.labels, folds, exp.seed)
    if not exp.folds:
        splits = type(splits)(*(m[:1] for m in splits))
    config = GraphTrainConfig(
        epochs=exp.epochs,
        learning_rate=exp.lr,
        weight_decay=exp.weight_decay,
        batch_size=exp.batch_size,
    )
    return dataset, splits, config


def _distribution(counts: np.ndarray) -> dict:
    q = np.percentile(counts, [0, 50, 90, 100])
    return {
        "mean": float(counts.mean()),
        "min": float(q[0]),
        "median": float(q[1]),
        "p90": float(q[2]),
        "max": float(q[3]),
    }


def describe_graphs(name: str, root, *, progress: bool = False) -> tuple[dict, str]:
    """``sparsegcn info`` of a graph dataset: counts, classes, and the
    distributions of nodes and edges per graph, with the batch budget.

    Returns:
      ``(stats, text)``.
    """
    from sparsegcn.datasets.base import default_root
    from sparsegcn.datasets.graphs import load_graphs

    start = time.perf_counter()
    dataset = load_graphs(name, default_root() if root is None else root, progress=progress)
    nodes, edges = dataset.nodes_per_graph(), dataset.edges_per_graph()
    budget = choose_budget(nodes, edges, 32)
    edge_width = 0 if dataset.edge_features is None else dataset.edge_features.shape[1]
    stats = {
        "name": dataset.name,
        "num_graphs": dataset.num_graphs,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "num_features": int(dataset.features.shape[1]),
        "num_edge_features": int(edge_width),
        "num_classes": dataset.num_classes,
        "class_counts": np.bincount(dataset.labels, minlength=dataset.num_classes).tolist(),
        "nodes_per_graph": _distribution(nodes),
        "edges_per_graph": _distribution(edges),
        "batch_budget_32": {"nodes": budget.nodes, "edges": budget.edges, "graphs": budget.graphs},
        "load_s": time.perf_counter() - start,
    }

    def line(d: dict) -> str:
        return (
            f"mean {d['mean']:.1f}; min {d['min']:.0f}, median {d['median']:.0f}, "
            f"p90 {d['p90']:.0f}, max {d['max']:.0f}"
        )

    rows = [
        ("dataset", stats["name"]),
        ("graphs", f"{dataset.num_graphs:,}"),
        ("nodes", f"{dataset.num_nodes:,}"),
        ("stored directed edges", f"{dataset.num_edges:,}"),
        ("node features", str(stats["num_features"])),
        ("edge features", str(edge_width)),
        (
            "classes",
            ", ".join(
                f"{c}: {n}" for c, n in zip(dataset.classes, stats["class_counts"], strict=True)
            ),
        ),
        ("nodes per graph", line(stats["nodes_per_graph"])),
        ("edges per graph", line(stats["edges_per_graph"])),
        (
            "batch of 32",
            f"{budget.nodes} node rows, {budget.edges} edge slots, {budget.graphs} graph slots",
        ),
        ("load time", f"{stats['load_s']:.2f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return stats, "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def summarize_graphs(exp, dataset, result, wall_s: float) -> dict:
    """The report of a graph run; see ``docs/graph-tasks.md`` for every key."""
    folds, seeds = result.folds, len(result.seeds)
    test = result.test_acc.reshape(folds, seeds)
    val = result.val_acc.reshape(folds, seeds)
    per_fold = test.mean(axis=1)
    curve = result.curves.test_accuracy.mean(axis=1)  # [epochs], over folds and seeds
    best = int(np.argmax(curve))
    epochs = result.curves.test_accuracy.shape[0]
    budget = result.budget
    nodes = dataset.nodes_per_graph()
    return {
        "dataset": dataset.name,
        "model": exp.model,
        "backend": "segment",
        "layout": "graph-batches",
        "num_graphs": dataset.num_graphs,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "folds": folds if exp.folds else 0,
        "seeds": seeds,
        "seed_list": list(result.seeds),
        "test_acc_mean": float(per_fold.mean()),
        "test_acc_std": float(per_fold.std()),
        "val_acc_mean": float(val.mean()),
        "val_acc_std": float(val.mean(axis=1).std()),
        "test_acc": per_fold.tolist(),
        "test_acc_per_member": result.test_acc.tolist(),
        "best_epoch": (result.best_epoch + 1).tolist(),
        "cv_curve_best_acc": float(curve[best]),
        "cv_curve_best_epoch": best + 1,
        "cv_curve": curve.tolist(),
        "train_graphs_per_s": result.train_graphs_per_s,
        "batch_budget": {"nodes": budget.nodes, "edges": budget.edges, "graphs": budget.graphs},
        "batches_per_epoch": result.batches_per_epoch,
        "packings": result.packings,
        "node_fill": float(nodes.mean() * (budget.graphs - 1) / budget.nodes),
        "train_step_ms_median": 1e3 * result.train_s / (epochs * result.batches_per_epoch),
        "epoch_ms_median": 1e3 * result.train_s / epochs,
        "compile_s": result.compile_s,
        "train_s": result.train_s,
        "wall_s": wall_s,
        "device": jax.devices()[0].device_kind,
        "devices": 1,
        "processes": jax.process_count(),
        "parallelism": "none",
        "checkpoint": None,
        "resumed_from": None,
        "plot": None,
        "config": dataclasses.asdict(exp),
    }


def run_graph_experiment(exp, *, progress: bool = False) -> dict:
    """Loads, trains every fold and seed as one program, reports (see :func:`summarize_graphs`)."""
    from sparsegcn.nn.graph_gin import graph_gin
    from sparsegcn.train.graphs import fit_graphs

    start = time.perf_counter()
    dataset, splits, config = prepare_graphs(exp, progress=progress)
    model = graph_gin(
        dataset.features.shape[1],
        dataset.num_classes,
        hidden=exp.hidden,
        num_layers=exp.layers,
        dropout_rate=exp.dropout,
        learn_eps=exp.learn_eps,
        readout_reduce=exp.readout,
        virtual_node=exp.virtual_node,
    )
    budget = choose_budget(dataset.nodes_per_graph(), dataset.edges_per_graph(), config.batch_size)
    result = fit_graphs(
        model, dataset, config, splits, seeds=exp.seed_list(), budget=budget, progress=progress
    )
    return summarize_graphs(exp, dataset, result, time.perf_counter() - start)


__all__ = [
    "check_graph_experiment",
    "describe_graphs",
    "prepare_graphs",
    "run_graph_experiment",
    "summarize_graphs",
]

"""The graph task's pipeline: a graph dataset, its splits, GIN, the report.

:func:`run_graph_experiment` loads the graphs, builds the splits (the
dataset's official one, :func:`~sparsegcn.train.graphs.official_splits`;
else :func:`~sparsegcn.train.graphs.fold_splits`, and without ``--folds``
one stratified holdout, fold 0 of 10), trains every fold and seed as one
program (:func:`~sparsegcn.train.graphs.fit_graphs`; batches of graphs
balanced by size, or random with ``--packing random``), over ``--devices``,
with ``--checkpoint``/``--resume`` (:class:`GraphLifecycle`), and reports.
:func:`predict_graph_checkpoint` is ``sparsegcn predict`` on a graph
checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Iterable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn._checks import INT32_MAX, Bound, check_bound
from sparsegcn.batch import check_packing, choose_budget
from sparsegcn.datasets.base import reading_only

HOLDOUT_FOLDS = 10
"""Without ``--folds``: train on one fold of a 10-fold split (test 10 %;
:func:`holdout_folds` on a dataset of fewer graphs)."""

FOLDS = Bound(int, low=0, high=INT32_MAX)
"""``--folds``, as the other integer options are bounded; 1 is refused too, and
more than the dataset's graphs once they are known (:func:`check_folds_fit`)."""

# Experiment settings the graph trainer does not read, with the value that means "unset".
_UNSUPPORTED = {
    "fanouts": (None, "none"),
    "plot": (None,),
    "reorder": ("none",),
    "residual": (False,),
    "feature_cache": (None,),
    "features_on": ("auto", "device"),
    "graph_on": ("auto", "device"),
    "max_batches": (0,),
    "shard_features": (False,),
    "patience": (0,),
    "epochs_per_call": (0,),
    "clip_norm": (0.0,),
}


def check_graph_experiment(exp) -> None:
    """Refuses the settings graph training does not support, naming the first.

    Raises:
      ValueError: a node-task setting (sampling, plots, early stopping,
        ...), ``--folds 1``, ``--folds`` on a dataset with an official split
        (``ogbg-*``), or a readout it lacks.
    """
    for name, unset in _UNSUPPORTED.items():
        value = getattr(exp, name)
        if value not in unset:
            raise ValueError(
                f"{exp.dataset}: graph-level training runs without sampling, "
                f"plots or early stopping; {name}={value!r} is not supported with it"
            )
    from sparsegcn.nn.graph_gin import GRAPH_READOUTS

    if check_bound("folds", exp.folds, FOLDS, flag="--folds") == 1:
        raise ValueError(f"--folds must be 0 (one holdout split) or at least 2, got {exp.folds}")
    if exp.folds and exp.dataset.startswith(OFFICIAL_SPLIT_PREFIXES):
        raise ValueError(_official_folds_error(exp.dataset, exp.folds))
    check_packing(exp.packing)
    if exp.readout not in GRAPH_READOUTS:
        raise ValueError(f"--readout must be one of {list(GRAPH_READOUTS)}, got {exp.readout!r}")


OFFICIAL_SPLIT_PREFIXES = ("ogbg-", "synthetic:mol")
"""Dataset names whose datasets come with an official split (refused with
``--folds`` before anything is read; any other dataset with a ``split`` is
refused once loaded)."""


def check_folds_fit(exp, num_graphs: int, name: str) -> None:
    """Refuses folds that ``num_graphs``, the graphs of dataset ``name``, cannot
    fill: each fold tests one graph at least, and leaves one to train and one
    to validate on (so the largest fold, ``ceil(G / k)`` graphs, leaves two).
    Without ``--folds`` the holdout split needs three graphs."""
    if num_graphs < 3:
        raise ValueError(
            f"{name} has {num_graphs} graph{'s' if num_graphs != 1 else ''}; a graph run "
            "needs 3 at least (one to train, one to validate and one to test on)"
        )
    if not exp.folds:
        return
    if exp.folds > num_graphs:
        raise ValueError(
            f"folds={exp.folds} (--folds) must be at most the number of graphs, "
            f"{num_graphs} in {name}"
        )
    largest = -(-num_graphs // exp.folds)
    if num_graphs - largest < 2:
        fits = [k for k in range(2, num_graphs + 1) if num_graphs - -(-num_graphs // k) >= 2]
        raise ValueError(
            f"folds={exp.folds} (--folds) tests {largest} of the {num_graphs} graphs in {name} "
            f"in one fold, leaving {num_graphs - largest} to train and validate on (2 at "
            f"least); use --folds {fits[0]} or more"
        )


def check_classes(dataset) -> None:
    """Refuses a classification dataset whose graphs all have one class: every
    model would score 1.0 on it, having learned nothing."""
    if dataset.kind != "class":
        return
    if dataset.num_graphs and np.unique(np.asarray(dataset.labels)).shape[0] == 1:
        raise ValueError(
            f"{dataset.name}: all its {dataset.num_graphs} graphs have one label; graph "
            "classification needs two classes at least"
        )


def holdout_folds(num_graphs: int) -> int:
    """The folds whose first is the holdout split without ``--folds``:
    :data:`HOLDOUT_FOLDS`, or one per graph on a dataset with fewer."""
    return min(HOLDOUT_FOLDS, num_graphs)


def _check_stored_folds(exp) -> None:
    """:func:`check_folds_fit` on a dataset folder before its arrays are read: its
    manifest records the number of graphs (a ``tu:`` dataset's is known once read)."""
    from sparsegcn.datasets import is_path
    from sparsegcn.datasets.ondisk_graphs import is_graph_ondisk, read_graph_manifest

    if exp.folds and is_path(exp.dataset) and is_graph_ondisk(exp.dataset):
        check_folds_fit(exp, read_graph_manifest(exp.dataset)["num_graphs"], exp.dataset)


def _official_folds_error(name: str, folds: int) -> str:
    return (
        f"{name} has an official train/valid/test split, which its runs use; folds={folds} "
        "(--folds) does not apply to it, drop --folds"
    )


def prepare_graphs(exp, *, progress: bool = False):
    """The dataset, its splits and the trainer's settings for ``exp``.

    A dataset with an official split (``dataset.split``) trains on its train
    graphs, selects on its valid graphs and reports its test graphs;
    ``--folds`` is refused on it.

    Returns:
      ``(dataset, splits, config)``: a
      :class:`~sparsegcn.datasets.graph_dataset.GraphDataset`,
      :class:`~sparsegcn.train.graphs.Splits` and
      :class:`~sparsegcn.train.graphs.GraphTrainConfig`.
    """
    dataset = load_experiment_graphs(exp, progress=progress)
    return dataset, graph_splits(exp, dataset), graph_config(exp)


def load_experiment_graphs(exp, *, progress: bool = False):
    """``exp.dataset`` as ``exp`` trains on it: loaded from ``exp.root`` (or the
    default root), with one-hot node degrees as its features under
    ``--degree-features`` (:func:`~sparsegcn.datasets.graph_dataset.one_hot_degrees`)."""
    from sparsegcn.datasets.base import default_root
    from sparsegcn.datasets.graph_dataset import one_hot_degrees
    from sparsegcn.datasets.graphs import load_graphs

    _check_stored_folds(exp)
    root = default_root() if exp.root is None else exp.root
    dataset = load_graphs(exp.dataset, root, progress=progress)
    return one_hot_degrees(dataset) if exp.degree_features else dataset


def graph_splits(exp, dataset):
    """``exp``'s :class:`~sparsegcn.train.graphs.Splits` of ``dataset``.

    Raises:
      ValueError: ``--folds`` on a dataset with an official split, or more
        than its graphs.
    """
    from sparsegcn.train.graphs import fold_splits, official_splits

    check_classes(dataset)
    if dataset.split is not None:
        if exp.folds:
            raise ValueError(_official_folds_error(dataset.name, exp.folds))
        return check_splits_scored(dataset, official_splits(dataset))
    check_folds_fit(exp, dataset.num_graphs, dataset.name)
    folds = exp.folds or holdout_folds(dataset.num_graphs)
    splits = fold_splits(dataset.labels, folds, exp.seed)
    if not exp.folds:
        splits = type(splits)(*(m[:1] for m in splits))
    return check_splits_scored(dataset, splits)


def check_splits_scored(dataset, splits):
    """``splits``, once every fold's validation and test graphs of a binary
    dataset (ROC-AUC, AP) hold both labels of some task
    (:func:`~sparsegcn.metrics.check_tasks_defined`)."""
    from sparsegcn.metrics import check_tasks_defined

    if dataset.kind == "binary":
        folds = splits.train.shape[0]
        for k in range(folds):
            for name in ("valid", "test"):
                fold = f" of fold {k}" if folds > 1 else ""
                rows = getattr(splits, name)[k]
                check_tasks_defined(dataset.labels, rows, f"{dataset.name}'s {name} graphs{fold}")
    return splits


def graph_config(exp):
    """The :class:`~sparsegcn.train.graphs.GraphTrainConfig` of ``exp``; with
    ``--checkpoint`` every multiple of ``--checkpoint-every`` ends a compiled call."""
    import math

    from sparsegcn.train.graphs import GraphTrainConfig

    config = GraphTrainConfig(
        epochs=exp.epochs,
        learning_rate=exp.lr,
        weight_decay=exp.weight_decay,
        batch_size=exp.batch_size,
        packing=exp.packing,
        divergence_factor=exp.divergence_factor or None,
        divergence_epochs=exp.divergence_epochs,
    )
    if exp.checkpoint and exp.checkpoint_every:
        config = dataclasses.replace(
            config, epochs_per_call=math.gcd(config.chunk, exp.checkpoint_every)
        )
    return config


def _distribution(counts: np.ndarray) -> dict:
    q = np.percentile(counts, [0, 50, 90, 100])
    return {
        "mean": float(counts.mean()),
        "min": float(q[0]),
        "median": float(q[1]),
        "p90": float(q[2]),
        "max": float(q[3]),
    }


def _label_counts(dataset) -> dict:
    if dataset.kind == "class":
        counts = np.bincount(dataset.labels, minlength=dataset.num_classes)
        return {"class_counts": counts.tolist()}
    labels = np.asarray(dataset.labels)
    labelled = ~np.isnan(labels)
    if dataset.kind == "regression":
        known = labels[labelled]
        return {
            "labelled_fraction": float(labelled.mean()),
            "target_mean": float(known.mean()) if known.size else float("nan"),
            "target_std": float(known.std()) if known.size else float("nan"),
            "target_min": float(known.min()) if known.size else float("nan"),
            "target_max": float(known.max()) if known.size else float("nan"),
        }
    return {
        "labelled_fraction": float(labelled.mean()),
        "positive_fraction": float(np.nansum(labels) / max(int(labelled.sum()), 1)),
    }


def _label_row(dataset, stats: dict) -> tuple[str, str]:
    if dataset.kind == "class":
        pairs = zip(dataset.classes, stats["class_counts"], strict=True)
        return "classes", ", ".join(f"{c}: {n}" for c, n in pairs)
    if dataset.kind == "regression":
        return (
            "regression targets",
            f"{dataset.num_classes}; {100 * stats['labelled_fraction']:.1f} % labelled, "
            f"mean {stats['target_mean']:.3g}, std {stats['target_std']:.3g}, "
            f"range [{stats['target_min']:.3g}, {stats['target_max']:.3g}]",
        )
    return (
        "binary tasks",
        f"{dataset.num_classes}; {100 * stats['labelled_fraction']:.1f} % labelled, "
        f"{100 * stats['positive_fraction']:.1f} % of labels positive",
    )


def describe_graphs(
    name: str,
    root,
    *,
    progress: bool = False,
    verify: bool = False,
    scale: float = 1.0,
    seed: int = 0,
) -> tuple[dict, str]:
    """``sparsegcn info`` of a graph dataset: counts, classes, and the
    distributions of nodes and edges per graph, with the batch budget.

    Returns:
      ``(stats, text)``.

    Raises:
      ValueError: ``scale`` or ``seed`` other than 1 and 0: graph datasets
        are generated at one size; a ``root`` for a folder, or ``verify``
        for a name (as :func:`~sparsegcn.datasets.load` refuses them for
        node datasets: they would do nothing).
    """
    from sparsegcn.datasets import _check_applies
    from sparsegcn.datasets.base import default_root
    from sparsegcn.datasets.graphs import load_graphs

    if scale != 1.0 or seed != 0:
        raise ValueError(
            f"--scale {scale} / --seed {seed}: graph datasets ({name!r}) are read or "
            "generated at one size; pass neither"
        )
    _check_applies(name, root=root, scale=scale, seed=seed, verify=verify)

    start = time.perf_counter()
    root = default_root() if root is None else root
    dataset = load_graphs(name, root, progress=progress, verify=verify)
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
        "kind": dataset.kind,
        "metric": dataset.metric,
        **_label_counts(dataset),
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
        _label_row(dataset, stats),
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


def _model(exp, dataset):
    """The graph model ``exp`` trains on ``dataset`` (the one place it is built):
    :func:`~sparsegcn.nn.graph_gin.build_graph_model`, Xu et al.'s GIN for
    float features, OGB's baseline for categorical ones."""
    from sparsegcn.nn.graph_gin import build_graph_model

    return build_graph_model(
        dataset,
        hidden=exp.hidden,
        num_layers=exp.layers,
        dropout_rate=exp.dropout,
        learn_eps=exp.learn_eps,
        readout_reduce=exp.readout,
        virtual_node=exp.virtual_node,
    )


def graph_fingerprint(dataset) -> dict:
    """What identifies a graph dataset for a checkpoint: its sizes and digests of
    its labels and split, node features and edges (all hashed whole)."""

    def digest(*arrays) -> str:
        h = hashlib.sha256()
        for a in arrays:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype} {list(a.shape)}\n".encode())
            h.update(a.tobytes())
        return h.hexdigest()

    split = dataset.split or {}
    return {
        "name": dataset.name,
        "num_graphs": int(dataset.num_graphs),
        "num_nodes": int(dataset.num_nodes),
        "num_edges": int(dataset.num_edges),
        "num_classes": int(dataset.num_classes),
        "labels_split_sha256": digest(
            dataset.labels, *(np.asarray(split[k], np.int64) for k in sorted(split))
        ),
        "features_sha256": digest(dataset.features),
        "graph_sha256": digest(
            dataset.senders,
            dataset.receivers,
            dataset.node_ptr,
            dataset.edge_ptr,
            *(() if dataset.edge_features is None else (dataset.edge_features,)),
        ),
    }


def _member_seeds(exp, splits) -> list[int]:
    return exp.seed_list() * int(splits.train.shape[0])


def _check_members(exp, seeds: list[int]) -> None:
    """Refuses ``exp.resume`` when its members are not this run's, naming the
    folds and seeds of both (a member is one fold of one seed, so the seeds
    alone, ``[0, 0, 0]``, would not say what differs)."""
    from sparsegcn.train.checkpoint import CheckpointError, read_manifest

    manifest = read_manifest(exp.resume)
    if [int(s) for s in manifest["seeds"]] == seeds:
        return
    config = manifest.get("metadata", {}).get("config", {})
    try:
        stored = _describe_members(int(config["folds"]), int(config["seed"]), int(config["seeds"]))
    except (KeyError, TypeError, ValueError):
        stored = f"seeds {[int(s) for s in manifest['seeds']]}"
    raise CheckpointError(
        f"incompatible checkpoint: it holds {stored} but this run trains "
        f"{_describe_members(exp.folds, exp.seed, exp.seeds)}"
    )


def _describe_members(folds: int, seed: int, seeds: int) -> str:
    split = f"folds={folds}" if folds else "one holdout split"
    return f"{split} x seeds {list(range(seed, seed + seeds))}"


@dataclasses.dataclass
class GraphLifecycle:
    """``--resume`` and ``--checkpoint`` around :func:`~sparsegcn.train.graphs.fit_graphs`.

    A graph checkpoint holds a
    :class:`~sparsegcn.train.graphs.GraphCheckpointState` (every member's
    state, best params included, and its epoch) and the curves so far, in the
    format of :mod:`sparsegcn.train.checkpoint`; its folder is locked and
    owned by one run as a node run's is. Members are fold-major; the
    checkpoint's ``seeds`` are the members' seeds.

    Attributes:
      resumed: the :class:`~sparsegcn.train.checkpoint.Checkpoint` resumed, or ``None``.
      hook: the checkpoint writer (``on_chunk``), or ``None``.
    """

    resumed: Any = None
    hook: Any = None

    @classmethod
    def start(cls, exp, dataset, model, splits, config) -> GraphLifecycle:
        """Restores ``exp.resume`` (refusing another dataset, seeds or settings)
        and claims ``exp.checkpoint``."""
        from sparsegcn.experiment.lifecycle import resume_settings
        from sparsegcn.train.checkpoint import CheckpointHook, load_checkpoint, read_manifest
        from sparsegcn.train.graphs import checkpoint_template

        seeds = _member_seeds(exp, splits)
        metadata = {"config": dataclasses.asdict(exp), "dataset": graph_fingerprint(dataset)}
        resumed = None
        if exp.resume:
            _check_members(exp, seeds)
            members = len(seeds)
            template = checkpoint_template(model, config, members)
            settings = resume_settings(exp, read_manifest(exp.resume))
            resumed = load_checkpoint(
                exp.resume,
                template,
                seeds=seeds,
                expect={"dataset": metadata["dataset"], "config": settings},
            )
        hook = CheckpointHook.for_run(exp, seeds=seeds, metadata=metadata, resumed=resumed)
        return cls(resumed=resumed, hook=hook)

    def fit_kwargs(self) -> dict:
        """``state``, ``history`` and ``on_chunk`` for :func:`~sparsegcn.train.graphs.fit_graphs`."""
        kwargs: dict[str, Any] = {"on_chunk": self.hook}
        if self.resumed is not None:
            kwargs.update(state=self.resumed.state.members, history=self.resumed.history)
        return kwargs

    def finish(self, result) -> dict:
        """Saves the final checkpoint if none was written, releases the folder; report entries."""
        from sparsegcn.train.graphs import Curves, GraphCheckpointState

        if self.hook is not None:
            if not self.hook.saved:
                members = result.best_epoch.shape[0]
                epochs = jnp.full((members,), result.curves.train_loss.shape[0], jnp.int32)
                history = {name: getattr(result.curves, name) for name in Curves._fields}
                self.hook.save(GraphCheckpointState(result.state, epochs, epochs > 0), history)
            self.hook.close()
        return {
            "checkpoint": str(self.hook.saved[-1]) if self.hook else None,
            "resumed_from": str(self.resumed.path) if self.resumed else None,
            "resumed_epoch": self.resumed.epoch if self.resumed else None,
        }


def _official(dataset, scores: np.ndarray, test: np.ndarray) -> dict | None:
    """``{"metric", "test": [K], "test_mean"}`` through ogb's Evaluator on the
    model's outputs ``scores`` ``[K, G, C]`` (logits, as training scores them:
    see :func:`~sparsegcn.train.graphs.graph_predictions`), or ``None``."""
    if not dataset.name.startswith("ogbg-"):
        return None
    from sparsegcn.datasets.ogbg import evaluate_graphs

    labels = np.asarray(dataset.labels)
    values = []
    for member in range(scores.shape[0]):
        rows = np.flatnonzero(test[member])
        pred = scores[member, rows]
        if dataset.kind == "class":
            pred = np.argmax(pred, axis=-1)
        value = evaluate_graphs(dataset.name, labels[rows], pred)
        if value is None:
            return None
        values.append(value)
    return {"metric": dataset.metric, "test": values, "test_mean": float(np.mean(values))}


def summarize_graphs(exp, dataset, result, wall_s: float, *, official: bool = False) -> dict:
    """The report of a graph run; see ``docs/graph-tasks.md`` for every key.

    With k folds, means and deviations are over the folds (each fold's seeds
    averaged); with one split (official, or a holdout), over the seeds. ``cv_curve_best_*``
    is the curve's best epoch: the highest mean, or the lowest for RMSE.
    """
    from sparsegcn.nn.graph_gin import auto_style
    from sparsegcn.train.graphs import selection_score

    m = result.metric
    folds, seeds = result.folds, len(result.seeds)
    test = result.test_metric.reshape(folds, seeds)
    val = result.val_metric.reshape(folds, seeds)
    per_seed = official or folds == 1  # an official split or a holdout: one fold
    spread = test.reshape(-1) if per_seed else test.mean(axis=1)
    val_spread = val.reshape(-1) if per_seed else val.mean(axis=1)
    curve = result.curves.test_metric.mean(axis=1)  # [epochs], over folds and seeds
    score = selection_score(m, curve)  # the highest accuracy, the lowest RMSE
    best = int(np.argmax(score)) if np.isfinite(score).any() else 0
    epochs = result.curves.test_metric.shape[0]
    budget = result.budget
    trained = max(epochs - result.start_epoch, 1)
    # The median over the compiled calls of each call's time per epoch (a call's
    # epochs, steps and evaluation run in one program: no step is timed alone).
    epoch_s = float(np.median(result.epoch_s)) if result.epoch_s else result.train_s / trained
    return {
        "dataset": dataset.name,
        "model": exp.model,
        "model_style": auto_style(dataset),
        "backend": "segment",
        "layout": "graph-batches",
        "metric": m,
        "kind": dataset.kind,
        "split": "official" if official else ("folds" if exp.folds else "holdout"),
        "num_graphs": dataset.num_graphs,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "folds": folds if exp.folds else 0,
        "seeds": seeds,
        "seed_list": list(result.seeds),
        f"test_{m}_mean": float(spread.mean()),
        f"test_{m}_std": float(spread.std()),
        f"val_{m}_mean": float(val_spread.mean()),
        f"val_{m}_std": float(val_spread.std()),
        f"test_{m}": test.mean(axis=1).tolist(),
        f"test_{m}_per_member": result.test_metric.tolist(),
        "best_epoch": (result.best_epoch + 1).tolist(),
        f"cv_curve_best_{m}": float(curve[best]),
        "cv_curve_best_epoch": best + 1,
        "cv_curve": curve.tolist(),
        "train_graphs_per_s": result.train_graphs_per_s,
        "batch_budget": {"nodes": budget.nodes, "edges": budget.edges, "graphs": budget.graphs},
        "batches_per_epoch": result.batches_per_epoch,
        "packings": result.packings,
        "packing": result.packing,
        "node_fill": result.node_fill,
        "edge_fill": result.edge_fill,
        "train_step_ms_median": 1e3 * epoch_s / result.batches_per_epoch,
        "epoch_ms_median": 1e3 * epoch_s,
        "compile_s": result.compile_s,
        "train_s": result.train_s,
        "wall_s": wall_s,
        "device": jax.devices()[0].device_kind,
        "devices": result.devices,
        "processes": jax.process_count(),
        "parallelism": "graph-batches" if result.devices > 1 else "none",
        "checkpoint": None,
        "resumed_from": None,
        "resumed_epoch": None,
        "plot": None,
        "config": dataclasses.asdict(exp),
    }


def run_graph_experiment(exp, *, progress: bool = False, dataset=None) -> dict:
    """Loads, trains every fold and seed as one program, reports (see :func:`summarize_graphs`).

    Several devices or processes (``--devices``, ``--coordinator``,
    ``--num-processes``): the processes join first
    (:func:`sparsegcn.parallel.initialize`), then every step's batch is split
    over the devices of all of them; only process 0 writes checkpoints.

    ``dataset``: the :class:`~sparsegcn.datasets.graph_dataset.GraphDataset`
    as ``exp`` trains on it (:func:`load_experiment_graphs`), when the caller
    has loaded it (a sweep loads it once).
    """
    from sparsegcn import parallel
    from sparsegcn.train.graphs import fit_graphs, predict_graphs

    start = time.perf_counter()
    if exp.coordinator is not None:
        parallel.initialize(exp.coordinator, exp.num_processes, exp.process_id)
    # Refuses a device count this process lacks, before any data is read.
    mesh = parallel.make_mesh(exp.devices) if exp.parallel else None
    if dataset is None:
        dataset, splits, config = prepare_graphs(exp, progress=progress)
    else:
        splits, config = graph_splits(exp, dataset), graph_config(exp)
    model = _model(exp, dataset)
    # Several processes train the same members: process 0 alone writes checkpoints.
    writer = exp.for_process(jax.process_index())
    lifecycle = GraphLifecycle.start(writer, dataset, model, splits, config)
    try:
        result = fit_graphs(
            model,
            dataset,
            config,
            splits,
            seeds=exp.seed_list(),
            devices=mesh if mesh is not None else 1,
            progress=progress,
            **lifecycle.fit_kwargs(),
        )
    except BaseException:
        if lifecycle.hook is not None:  # release the folder: this run writes no more
            lifecycle.hook.close()
        raise
    official = dataset.split is not None
    report = summarize_graphs(exp, dataset, result, 0.0, official=official)
    report.update(lifecycle.finish(result))
    if dataset.name.startswith("ogbg-"):
        member_test = splits.test[np.repeat(np.arange(splits.test.shape[0]), len(result.seeds))]
        state = result.state
        scores, _ = predict_graphs(
            model,
            state.best_params,
            state.best_stats,
            dataset,
            batch_size=config.batch_size,
            embeddings=False,
            scores=True,
        )
        evaluated = _official(dataset, scores, member_test)
        if evaluated is not None:
            report["ogb_evaluator"] = evaluated
    report["wall_s"] = time.perf_counter() - start
    return report


def run_graph_sweep(base, axes: dict, *, progress: bool = False, given: Iterable[str] = ()) -> dict:
    """``sparsegcn train --sweep`` on a graph dataset: every point of the grid
    ``axes`` around ``base`` trained as a run of its own (its folds and seeds
    one program, as :func:`run_graph_experiment` trains them), on the dataset
    loaded once; the rows ranked by the validation metric (highest, or lowest
    for RMSE and MAE).

    Every point is checked before anything is read or trained.

    Returns:
      ``{"rows", "programs", "metric", "axes", "base", "dataset", "seeds",
      "wall_s", "device"}``: a row per point with its swept values,
      ``val_<m>_mean``/``_std``, ``test_<m>_mean``/``_std``, ``test_<m>``
      (per fold, or per seed on an official split), ``cv_curve_best_<m>`` and
      ``cv_curve_best_epoch`` (Xu et al.'s figure, chosen on the test folds:
      reported, never ranked on), ``best_epoch_mean``, ``train_graphs_per_s``,
      ``program`` and ``rank``.
    """
    from sparsegcn.datasets.graph_dataset import REGRESSION_METRICS, one_hot_degrees
    from sparsegcn.experiment.sweep import sweep_points
    from sparsegcn.train.sweep import rank_rows

    start = time.perf_counter()
    points, experiments = sweep_points(base, axes, given)
    for exp in experiments:  # every point's settings, before any data is read
        exp.check_applies()
        check_graph_experiment(exp)
        _check_stored_folds(exp)
    raw = load_experiment_graphs(
        dataclasses.replace(base, degree_features=False), progress=progress
    )
    check_classes(raw)
    for exp in experiments:  # and what the graphs bound, before any point trains
        if raw.split is None:
            check_folds_fit(exp, raw.num_graphs, raw.name)
    degrees = None
    rows, programs = [], []
    for program, (point, exp) in enumerate(zip(points, experiments, strict=True)):
        tick = time.perf_counter()
        dataset = raw
        if exp.degree_features:
            degrees = one_hot_degrees(raw) if degrees is None else degrees
            dataset = degrees
        report = run_graph_experiment(exp, progress=progress, dataset=dataset)
        m = report["metric"]
        keys = (f"val_{m}_mean", f"val_{m}_std", f"test_{m}_mean", f"test_{m}_std", f"test_{m}")
        rows.append(
            dict(
                point,
                **{k: report[k] for k in keys},
                **{f"cv_curve_best_{m}": report[f"cv_curve_best_{m}"]},
                cv_curve_best_epoch=report["cv_curve_best_epoch"],
                best_epoch_mean=float(np.mean(report["best_epoch"])),
                train_graphs_per_s=report["train_graphs_per_s"],
                program=program,
            )
        )
        programs.append(
            {
                "program": program,
                "points": 1,
                "members": len(report["test_" + m + "_per_member"]),
                "compile_s": report["compile_s"],
                "wall_s": time.perf_counter() - tick,
            }
        )
    metric = raw.metric
    return {
        "dataset": raw.name,
        "metric": metric,
        "axes": {k: list(v) for k, v in axes.items()},
        "seeds": base.seed_list(),
        "rows": rank_rows(rows, metric, lower_is_better=metric in REGRESSION_METRICS),
        "programs": programs,
        "base": dataclasses.asdict(base),
        "wall_s": time.perf_counter() - start,
        "device": jax.devices()[0].device_kind,
    }


def predict_graph_checkpoint(
    checkpoint: str,
    *,
    dataset: str | None = None,
    root: str | None = None,
    params: str = "best",
    progress: bool = False,
) -> dict:
    """Per-graph probabilities and embeddings of every member of a graph checkpoint.

    Args:
      checkpoint: checkpoint folder (its newest checkpoint) or manifest file.
      dataset: dataset name (default: the one trained on); its
        :func:`graph_fingerprint` must match the checkpoint's.
      root: data root (default: the training run's).
      params: ``"best"`` (each member's params at its best validation epoch,
        whose test metric ``sparsegcn train`` reports) or ``"last"``.
      progress: show loading progress.

    Returns:
      ``{"predictions": float32 [K, G, C] class probabilities (softmax),
      [K, G, T] task probabilities (sigmoid) or [K, G, T] predicted regression
      targets, "embeddings": float32 [K, G, H]
      (the readout, :func:`~sparsegcn.train.graphs.readout_params`),
      "metric", "test": [K] the dataset's metric on each member's test
      graphs, of the model's outputs (logits, as training scores them: float32
      probabilities tie at 1), "reported_test": [K] as recorded in training
      (``best`` only), "seeds", "epoch", "checkpoint", "dataset", "kind"}``,
      and ``"ogb_evaluator"`` for ``ogbg-*`` datasets when ``ogb`` is installed.
    """
    from sparsegcn.experiment.lifecycle import experiment_from_checkpoint
    from sparsegcn.train.checkpoint import check_metadata, load_checkpoint, read_manifest
    from sparsegcn.train.graphs import (
        METRICS,
        GraphCheckpointState,
        checkpoint_template,
        graph_predictions,
        predict_graphs,
    )

    if params not in ("best", "last"):
        raise ValueError(f"params must be 'best' or 'last', got {params!r}")
    manifest = read_manifest(checkpoint)
    exp = experiment_from_checkpoint(manifest, dataset=dataset, root=root)
    with reading_only("predicting"):  # the root may come from the checkpoint: write nothing there
        data = load_experiment_graphs(exp, progress=progress)
    expect = {"dataset": graph_fingerprint(data)}
    check_metadata(manifest, expect)  # before the model is built or anything compiled
    splits, config = graph_splits(exp, data), graph_config(exp)
    model = _model(exp, data)
    members = len(manifest["seeds"])
    ckpt = load_checkpoint(
        manifest["path"], checkpoint_template(model, config, members), expect=expect
    )
    state = cast(GraphCheckpointState, ckpt.state).members
    chosen = (
        (state.best_params, state.best_stats) if params == "best" else (state.params, state.stats)
    )
    scores, embeddings = predict_graphs(
        model, *chosen, data, batch_size=config.batch_size, scores=True
    )
    member_test = splits.test[np.repeat(np.arange(splits.test.shape[0]), len(exp.seed_list()))]
    labels = jnp.asarray(data.labels)
    metric = METRICS[data.metric]
    test = [
        float(metric(jnp.asarray(scores[k]), labels, jnp.asarray(member_test[k])))
        for k in range(members)
    ]
    reported = None
    if params == "best":
        best = np.asarray(state.best_epoch)
        reported = ckpt.history["test_metric"][best, np.arange(members)].tolist()
    official = _official(data, scores, member_test)
    return {
        "predictions": graph_predictions(data.kind, scores),
        "embeddings": embeddings,
        "metric": data.metric,
        "kind": data.kind,
        "test": test,
        "reported_test": reported,
        "seeds": list(ckpt.seeds),
        "epoch": ckpt.epoch,
        "checkpoint": str(ckpt.path),
        "dataset": data.name,
        **({} if official is None else {"ogb_evaluator": official}),
    }


__all__ = [
    "OFFICIAL_SPLIT_PREFIXES",
    "GraphLifecycle",
    "check_classes",
    "check_folds_fit",
    "check_graph_experiment",
    "check_splits_scored",
    "describe_graphs",
    "graph_config",
    "graph_fingerprint",
    "graph_splits",
    "holdout_folds",
    "load_experiment_graphs",
    "predict_graph_checkpoint",
    "prepare_graphs",
    "run_graph_experiment",
    "run_graph_sweep",
    "summarize_graphs",
]

"""One training run end to end: load, prepare, train, report."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import time

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn import parallel
from sparsegcn.backends import get_backend
from sparsegcn.datasets import Dataset, load
from sparsegcn.experiment.build import (
    build_model,
    host_csr,
    node_data,
    reorder_dataset,
    resolve_features_on,
    resolve_graph_on,
    streamed_data,
    use_edge_features,
)
from sparsegcn.experiment.config import Experiment
from sparsegcn.experiment.lifecycle import Lifecycle, check_dataset, process_settings
from sparsegcn.experiment.resources import fit_to_graph
from sparsegcn.metrics import check_tasks_defined
from sparsegcn.tasks import task_for, task_name
from sparsegcn.train import FitResult, fit
from sparsegcn.train.losses import CLASSIFICATION, NodeObjective
from sparsegcn.train.minibatch import (
    MinibatchFitResult,
    epoch_overflow,
    first_epoch_key,
    fit_minibatch,
    minibatch_data,
)
from sparsegcn.train.streamed import StreamedFitResult, fit_streamed


def ogb_test_metric(dataset: Dataset, model, params, graph, features) -> dict | None:
    """:func:`~sparsegcn.datasets.ogb.official_test_metric` of every seed's
    predictions (for ogbn-proteins
    ``sparsegcn.datasets.proteins.official_test_metric`` of its
    scores), or ``None`` (see there).

    One inference pass per seed on ``graph`` (the layout training evaluated
    on), only when the metric applies.
    """
    from sparsegcn.datasets import OGB
    from sparsegcn.datasets.proteins import PROTEINS

    if importlib.util.find_spec("ogb") is None:
        return None
    if dataset.name == PROTEINS:
        from sparsegcn.datasets.proteins import official_test_metric as proteins_metric

        scores = jax.jit(jax.vmap(model.apply, in_axes=(0, None, None)))(params, graph, features)
        return proteins_metric(dataset, np.asarray(scores))
    if dataset.name not in OGB:
        return None

    def classes(p, g, x):
        return jnp.argmax(model.apply(p, g, x), axis=-1).astype(jnp.int32)

    from sparsegcn.datasets.ogb import official_test_metric

    predicted = jax.jit(jax.vmap(classes, in_axes=(0, None, None)))(params, graph, features)
    return official_test_metric(dataset, np.asarray(predicted))


def summarize(
    exp: Experiment,
    dataset: Dataset,
    result: FitResult | StreamedFitResult,
    wall_s: float,
    result_layout: str,
    ogb_metric: dict | None = None,
    metric_name: str = "acc",
) -> dict:
    """The report: the keys ``sparsegcn train --json`` promises, plus per-seed detail,
    and ``ogb_evaluator`` (:func:`ogb_test_metric`) when given.

    With another ``metric_name`` than ``"acc"`` (a task's
    :class:`~sparsegcn.train.losses.NodeObjective`, e.g. ``"rocauc"``) the
    score keys are named after it (``test_rocauc_mean``, ``val_rocauc_std``,
    ``test_rocauc``) and ``metric`` names it.
    """
    test, val = result.test_acc, result.val_acc
    extra = {} if ogb_metric is None else {"ogb_evaluator": ogb_metric}
    m = metric_name
    scores = {
        f"test_{m}_mean": float(test.mean()),
        f"test_{m}_std": float(test.std()),
        f"val_{m}_mean": float(val.mean()),
        f"val_{m}_std": float(val.std()),
        f"test_{m}": test.tolist(),
    }
    return {
        "dataset": dataset.name,
        "model": exp.model,
        "backend": get_backend(exp.backend).name,
        "layout": f"sampled-{exp.sampler}" if exp.sampled else result_layout,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "num_stored_edges": dataset.graph.num_edges,
        "seeds": len(result.seeds),
        "seed_list": list(result.seeds),
        **({} if m == "acc" else {"metric": m}),
        **scores,
        "best_epoch": result.best_epoch.tolist(),
        "train_step_ms_median": result.train_step_ms_median,
        "train_step_ms_per_seed": result.train_step_ms_median / len(result.seeds),
        "epoch_ms_median": result.epoch_ms_median,
        "compile_s": result.compile_s,
        "wall_s": wall_s,
        "device": jax.devices()[0].device_kind,
        "config": dataclasses.asdict(exp),
        **extra,
    }


def run_experiment(exp: Experiment, *, progress: bool = False) -> dict:
    """Runs ``exp`` through the pipeline of the task that owns its dataset.

    The task registry (:mod:`sparsegcn.tasks`) declares each task's data,
    trainer and report; the report names the task (``"task"``). A
    multi-process run (``exp.coordinator``) joins first and refuses, on
    every process, settings that differ between them
    (:func:`~sparsegcn.experiment.lifecycle.process_settings`).
    """
    if exp.coordinator is not None:
        # Before any data is read: processes given different settings would train
        # different replicas with the same collectives, and save the mix.
        parallel.initialize(exp.coordinator, exp.num_processes, exp.process_id)
        parallel.check_same_settings(process_settings(exp))
    report = task_for(exp.dataset, exp.task).run(exp, progress=progress)
    return {"task": task_name(exp.dataset, exp.task), **report}


def node_objective(exp) -> NodeObjective:
    """The loss and metric a node run trains with: those of the task ``exp.task``
    names (a task borrowing node datasets brings its own), else of the dataset's
    own task; plain classification where the task declares none."""
    return task_for(exp.dataset, exp.task).objective or CLASSIFICATION


def run_node_experiment(exp: Experiment, *, progress: bool = False) -> dict:
    """The node task's pipeline: loads the data, trains ``exp.seeds`` models at once,
    returns the report.

    ``exp.resume``, ``exp.checkpoint`` and ``exp.plot`` are handled by
    :class:`Lifecycle`; the report then also names the newest checkpoint,
    the checkpoint resumed from and the plot file.

    Several devices or processes (``exp.parallel``): ``exp.coordinator``
    joins the multi-process run first (:func:`sparsegcn.parallel.initialize`),
    and a device count this process lacks is refused before any data is
    read. ``sage`` then trains data parallel
    (:func:`~sparsegcn.parallel.fit_data_parallel`), ``gcn`` and ``mlp``
    edge-sharded (:func:`~sparsegcn.parallel.fit_edge_sharded`); only
    process 0 writes checkpoints and plots. The report gains ``devices``
    (all processes' devices the run spans), ``processes`` and ``parallelism``.
    """
    start = time.perf_counter()
    if exp.coordinator is not None:
        parallel.initialize(exp.coordinator, exp.num_processes, exp.process_id)
    mesh = parallel.make_mesh(exp.devices) if exp.parallel else None
    objective = node_objective(exp)
    dataset = load(exp.dataset, exp.root, scale=exp.scale, progress=progress)
    dataset.require_splits()
    if objective is CLASSIFICATION:
        labelled = np.concatenate(
            [np.asarray(dataset.split[k]) for k in ("train", "valid", "test")]
        )
        if np.unique(np.asarray(dataset.labels)[labelled]).shape[0] == 1:
            raise ValueError(
                f"{dataset.name}: all its {labelled.shape[0]} train, validation and test nodes "
                "have one label; node classification needs two classes at least"
            )
    if objective.metric_name == "rocauc":  # before training, not in ogb's Evaluator after it
        for split in ("valid", "test"):
            check_tasks_defined(
                dataset.labels, dataset.split[split], f"{dataset.name}'s {split} nodes"
            )
    if not exp.edge_features and dataset.graph.edge_features is None:
        raise ValueError(
            f"edge_features=False (--no-edge-features) drops edge features, but "
            f"{dataset.name} has none; leave the option out"
        )
    dataset = use_edge_features(dataset, exp.edge_features)
    if exp.resume:  # the data the checkpoint recorded (edge-feature means included), early
        check_dataset(exp.resume, dataset)
    if exp.normalize_features == "auto" and dataset.info.get("featureless"):
        # Edge-feature means are scores in [0, 1], not counts to row-normalize (OGB's
        # baselines normalize nothing): "auto" leaves them as they are.
        exp = dataclasses.replace(exp, normalize_features="none")
    exp = fit_to_graph(exp, dataset)  # fanouts, tree size and memory, before any compile
    tick = time.perf_counter()
    relabelled, _ = reorder_dataset(dataset, exp.reorder)
    reorder_s = time.perf_counter() - tick
    graph_on = resolve_graph_on(exp, relabelled)
    streamed = graph_on == "host" or exp.max_batches > 0
    # Sharded features live on the devices (Experiment refuses host and mmap with them).
    features_on = (
        "device" if exp.shard_features else resolve_features_on(exp, relabelled, streamed=streamed)
    )
    if features_on != "device" and mesh is not None:
        raise ValueError(multi_device_features_error(exp, relabelled, features_on))
    if features_on != "device" and objective is not CLASSIFICATION:
        # "auto" chose to stream (features too large for the device, or a graph too
        # large to expand): the streamed trainer has no multi-label objective.
        raise ValueError(
            f"{dataset.name}: features_on={exp.features_on!r} resolved to {features_on!r} "
            f"(graph_on {graph_on!r}), but multi-label node training keeps features and "
            "graph on its devices; use a smaller --scale, or a device with more memory"
        )
    if features_on != "device":
        report = run_streamed(
            exp,
            dataset,
            relabelled,
            build_model(exp, dataset),
            features_on,
            start,
            progress,
            graph_on=graph_on,
        )
        return dict(report, reorder_s=reorder_s)
    # The edge-sharded trainer repartitions the edges itself: no packing for it.
    with _staging(exp):
        data = node_data(
            relabelled,
            exp.model,
            normalize_features=exp.normalize_features,
            packed=None if mesh is None else False,
            backend=exp.backend,
            options=exp.options(),
            feature_cache=exp.feature_cache,
        )
    model = build_model(exp, dataset)
    writer = exp.for_process(jax.process_index())
    lifecycle = Lifecycle.start(writer, dataset, model)
    # What sampled training steps on and evaluates with (layer-wise, over node chunks).
    with _staging(exp):
        batches = minibatch_data(data) if exp.sampled else None
    result: FitResult
    if mesh is not None and batches is not None:
        result = parallel.fit_data_parallel(
            model,
            batches,
            exp.train_config(),
            exp.minibatch_config(),
            devices=mesh,
            seeds=exp.seed_list(),
            progress=progress,
            shard_features=exp.shard_features,
            objective=objective,
            **lifecycle.fit_kwargs(),
        )
    elif mesh is not None:
        result = parallel.fit_edge_sharded(
            model,
            data,
            exp.train_config(),
            devices=mesh,
            seeds=exp.seed_list(),
            progress=progress,
            objective=objective,
            **lifecycle.fit_kwargs(),
        )
    elif batches is not None:  # sampled mini-batches; layer-wise full-neighbourhood evaluation
        result = fit_minibatch(
            model,
            batches,
            exp.train_config(),
            exp.minibatch_config(),
            seeds=exp.seed_list(),
            progress=progress,
            objective=objective,
            **lifecycle.fit_kwargs(),
        )
    else:
        result = fit(
            model,
            data,
            exp.train_config(),
            seeds=exp.seed_list(),
            progress=progress,
            objective=objective,
            **lifecycle.fit_kwargs(),
        )
    layout = "edge_sharded" if mesh is not None else data.graph.layout_name
    evaluated = data if batches is None else batches
    metric = ogb_test_metric(
        relabelled, model, result.best_params, evaluated.graph, evaluated.features
    )
    report = summarize(
        exp, dataset, result, time.perf_counter() - start, layout, metric, objective.metric_name
    )
    report["devices"] = 1 if mesh is None else mesh.size
    report["processes"] = jax.process_count()
    report["reorder"] = exp.reorder
    report["reorder_s"] = reorder_s
    report["parallelism"] = (
        "none" if mesh is None else "data_parallel" if exp.sampled else "edge_sharded"
    )
    if isinstance(result, MinibatchFitResult):  # exactly the sampled runs
        report["sampled_edges_per_s"] = result.sampled_edges_per_s
        report["features_on"] = features_on
        report["graph_on"] = graph_on
        minibatch = exp.minibatch_config()
        if batches is not None and mesh is None and minibatch.caps is not None:
            # What the caps dropped in the first seed's first epoch, by a sampling pass alone.
            overflow = epoch_overflow(batches, minibatch, first_epoch_key(exp.seed))
            report["dedup_overflow"] = overflow.tolist()
    return dict(report, **lifecycle.finish(writer, result))


def _staging(exp: Experiment):
    """Where the features are built before training places them.

    Sharded features must not land whole on one accelerator first (the
    default device): they are built on the CPU backend, and
    :func:`~sparsegcn.parallel.shard_feature_rows` copies each device its
    block. Otherwise, and where there is no CPU backend, the default device.
    """
    if not exp.shard_features or jax.default_backend() == "cpu":
        return contextlib.nullcontext()
    try:
        return jax.default_device(jax.devices("cpu")[0])
    except RuntimeError:
        return contextlib.nullcontext()


def multi_device_features_error(exp: Experiment, dataset: Dataset, features_on: str) -> str:
    """Why ``features_on`` (resolved from ``"auto"``) cannot serve a run on several devices.

    Streamed features train on one device only; rather than fall back to
    one device silently, the run is refused, the sizes named.
    """
    x = dataset.features
    n, f = int(x.shape[0]), int(x.shape[1])
    gb = n * f * np.dtype(x.dtype).itemsize / 1e9
    devices = exp.devices * exp.num_processes
    share = parallel.rows_per_device(n, devices) * f * np.dtype(x.dtype).itemsize / 1e9
    return (
        f"features_on={exp.features_on!r} resolves to {features_on!r} for these {gb:.3g} GB of "
        f"features, which trains on one device, but devices={exp.devices} (--devices) spans "
        f"{devices}; pass --shard-features to split them over the devices ({share:.3g} GB "
        f"each), or --devices 1 --features-on {features_on} to stream them to one device"
    )


def run_streamed(
    exp: Experiment,
    dataset: Dataset,
    relabelled: Dataset,
    model,
    features_on: str,
    start: float,
    progress: bool = False,
    *,
    graph_on: str = "device",
) -> dict:
    """:func:`run_experiment` for features kept on the host (``"host"`` or ``"mmap"``):
    :func:`~sparsegcn.train.streamed.fit_streamed`, one seed, sampled evaluation;
    with ``graph_on="host"`` the trees are sampled on the host too (:func:`host_csr`).

    The report gains ``features_on``, ``graph_on``, ``host_gather_rows_per_s``,
    ``host_gather_gb_per_s``, ``host_gather_rows_per_batch``, ``batches_per_s``,
    ``batches_run``, ``steps_per_epoch``, ``projected_epoch_s`` (a full
    epoch's time at the measured rate), ``host_sample_ms_per_batch``,
    ``disk_read_gb``, ``disk_read_mb_per_s`` (page-cache misses while
    training) and ``train_s``; its accuracies are measured on sampled trees.
    """
    data = streamed_data(
        relabelled,
        exp.model,
        features_on,
        normalize_features=exp.normalize_features,
        graph_on=graph_on,
    )
    result = fit_streamed(
        model,
        data,
        exp.train_config(),
        exp.minibatch_config(),
        seed=exp.seed,
        progress=progress,
        host_csr=host_csr(relabelled, exp.model) if graph_on == "host" else None,
        max_batches=exp.max_batches or None,
    )
    gather = result.gather
    report = summarize(exp, dataset, result, time.perf_counter() - start, "sampled-tree")
    report.update(
        devices=1,
        processes=jax.process_count(),
        reorder=exp.reorder,
        parallelism="none",
        features_on=features_on,
        graph_on=result.graph_on,
        host_gather_rows_per_s=gather.rows_per_s,
        host_gather_gb_per_s=gather.gb_per_s,
        host_gather_rows_per_batch=gather.rows / gather.batches if gather.batches else 0.0,
        host_sample_ms_per_batch=result.host_sample_ms_per_batch,
        batches_per_s=result.batches_per_s,
        batches_run=result.batches_run,
        steps_per_epoch=result.steps_per_epoch,
        projected_epoch_s=result.projected_epoch_s,
        disk_read_gb=result.disk_read_bytes / 1e9,
        disk_read_mb_per_s=result.disk_read_bytes / 1e6 / result.train_s,
        train_s=result.train_s,
        evaluation="sampled",
        checkpoint=None,
        resumed_from=None,
        resumed_epoch=None,
        plot=None,
    )
    return report

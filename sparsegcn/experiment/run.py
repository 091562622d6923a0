"""One training run end to end: load, prepare, train, report."""

from __future__ import annotations

import dataclasses
import time

import jax

from sparsegcn.backends import get_backend
from sparsegcn.datasets import Dataset, load
from sparsegcn.experiment.build import build_model, node_data
from sparsegcn.experiment.config import Experiment
from sparsegcn.experiment.lifecycle import Lifecycle
from sparsegcn.train import FitResult, fit
from sparsegcn.train.minibatch import fit_minibatch, minibatch_data


def summarize(exp: Experiment, dataset: Dataset, result: FitResult, wall_s: float) -> dict:
    """The report: the keys ``sparsegcn train --json`` promises, plus per-seed detail."""
    test, val = result.test_acc, result.val_acc
    return {
        "dataset": dataset.name,
        "model": exp.model,
        "backend": get_backend(exp.backend).name,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "num_stored_edges": dataset.graph.num_edges,
        "seeds": len(result.seeds),
        "seed_list": list(result.seeds),
        "test_acc_mean": float(test.mean()),
        "test_acc_std": float(test.std()),
        "val_acc_mean": float(val.mean()),
        "val_acc_std": float(val.std()),
        "test_acc": test.tolist(),
        "best_epoch": result.best_epoch.tolist(),
        "train_step_ms_median": result.train_step_ms_median,
        "train_step_ms_per_seed": result.train_step_ms_median / len(result.seeds),
        "epoch_ms_median": result.epoch_ms_median,
        "compile_s": result.compile_s,
        "wall_s": wall_s,
        "device": jax.devices()[0].device_kind,
        "config": dataclasses.asdict(exp),
    }


def run_experiment(exp: Experiment, *, progress: bool = False) -> dict:
    """Loads the data, trains ``exp.seeds`` models at once, returns the report.

    ``exp.resume``, ``exp.checkpoint`` and ``exp.plot`` are handled by
    :class:`Lifecycle`; the report then also names the newest checkpoint,
    the checkpoint resumed from and the plot file.
    """
    start = time.perf_counter()
    dataset = load(exp.dataset, exp.root, scale=exp.scale, progress=progress)
    data = node_data(dataset, exp.model, normalize_features=exp.normalize_features)
    model = build_model(exp, dataset)
    lifecycle = Lifecycle.start(exp, dataset, model)
    if exp.model == "sage":  # sampled mini-batches; layer-wise full-neighbourhood evaluation
        result = fit_minibatch(
            model,
            minibatch_data(data),
            exp.train_config(),
            exp.minibatch_config(),
            seeds=exp.seed_list(),
            progress=progress,
            **lifecycle.fit_kwargs(),
        )
    else:
        result = fit(
            model,
            data,
            exp.train_config(),
            seeds=exp.seed_list(),
            progress=progress,
            **lifecycle.fit_kwargs(),
        )
    report = summarize(exp, dataset, result, time.perf_counter() - start)
    if exp.model == "sage":
        report["sampled_edges_per_s"] = result.sampled_edges_per_s
    return dict(report, **lifecycle.finish(exp, result))

"""Hyperparameter grids: ``sparsegcn train --sweep name=v1,v2``."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

import jax
import numpy as np

from sparsegcn.datasets import load
from sparsegcn.experiment.build import build_model, node_data, reorder_dataset
from sparsegcn.experiment.config import Experiment
from sparsegcn.experiment.resources import fit_to_graph
from sparsegcn.experiment.run import run_experiment
from sparsegcn.train.sweep import expand_grid, fit_sweep, rank_rows, summarize_result

# Experiment fields that name the data, the replicas or output files, not a setting.
NOT_SWEEPABLE = (
    "dataset",
    "root",
    "feature_cache",
    "scale",
    "seeds",
    "seed",
    "checkpoint",
    "checkpoint_every",
    "keep",
    "resume",
    "plot",
    "model_options",
    "task",  # each task has its own sweep (Task.sweep), chosen by the base run's
)
# Experiment fields whose one value is a comma-separated list: swept values split on ";".
LIST_FIELDS = ("fanouts", "dedup_caps")
# Experiment fields trained as data in one program: field -> injected optimizer value.
SWEEP_AS_DATA = {"lr": "learning_rate", "weight_decay": "weight_decay"}


def sweep_points(
    base: Experiment, axes: dict, given: Iterable[str] = ()
) -> tuple[list[dict], list[Experiment]]:
    """The grid ``axes`` around ``base``: ``(points, experiments)``, one of each per
    point (:func:`~sparsegcn.train.sweep.expand_grid`), every task's sweep checks first.
    ``given``: the fields set on the command line, which a swept model keeps
    (:meth:`~sparsegcn.experiment.Experiment.with_settings`).

    Raises:
      ValueError: ``base`` writes checkpoints, resumes or plots (single runs only), or
        ``axes`` sweeps a field of :data:`NOT_SWEEPABLE`.
    """
    if base.checkpoint or base.resume or base.plot:
        raise ValueError("--checkpoint, --resume and --plot apply to single runs, not to --sweep")
    bad = sorted(set(axes) & set(NOT_SWEEPABLE))
    if bad:
        raise ValueError(f"cannot sweep {bad}; sweepable fields exclude {list(NOT_SWEEPABLE)}")
    points = expand_grid(axes)
    # A swept model takes its own defaults, not base's (Experiment.with_settings).
    experiments = [base.with_settings(given, **point) for point in points]
    seen: dict = {}
    for point, exp in zip(points, experiments, strict=True):
        if exp in seen:  # "none" and the default it stands for, say: one run, twice
            raise ValueError(
                f"--sweep points {seen[exp]} and {point} are the same settings once defaults "
                "are filled in; drop one of the values"
            )
        seen[exp] = point
    return points, experiments


def run_sweep(
    base: Experiment, axes: dict, *, progress: bool = False, given: Iterable[str] = ()
) -> dict:
    """Trains the grid ``axes`` around ``base``; returns the ranked report.

    Grid points that differ only in :data:`SWEEP_AS_DATA` fields share one
    compiled program (:func:`~sparsegcn.train.sweep.fit_sweep`); each other
    combination compiles its own. Every point trains ``base``'s seeds.

    Args:
      base: the settings shared by every point.
      axes: ``{field: [values]}`` (see :func:`~sparsegcn.train.sweep.parse_sweep`).
      progress: show progress bars.
      given: the fields set on the command line (:func:`sweep_points`).

    Returns:
      ``{"rows": [...ranked by validation accuracy...], "programs": [...],
      "axes", "base", "dataset", "seeds", "wall_s", "device"}``; each row
      holds the swept values, accuracies (mean, std, per seed) and the
      index of the program that trained it.
    """
    start = time.perf_counter()
    points, experiments = sweep_points(base, axes, given)
    dataset = load(base.dataset, base.root, scale=base.scale, progress=progress)
    dataset.require_splits()
    experiments = [fit_to_graph(exp, dataset) for exp in experiments]
    programs: dict[tuple, list[int]] = {}
    for i, exp in enumerate(experiments):
        # Sampled points train one by one (run_experiment): a program each.
        data_fields = () if exp.sampled else SWEEP_AS_DATA
        shape = tuple((k, v) for k, v in dataclasses.asdict(exp).items() if k not in data_fields)
        programs.setdefault(shape, []).append(i)
    for members in programs.values():  # a program trains points x seeds members at once
        first = experiments[members[0]]
        if not first.sampled and len(members) > 1:
            try:
                fit_to_graph(dataclasses.replace(first, seeds=len(members) * first.seeds), dataset)
            except ValueError as err:
                raise ValueError(
                    f"--sweep trains {len(members)} points x {first.seeds} seed(s) of one program "
                    f"together: {err}, or sweep fewer values of {sorted(SWEEP_AS_DATA)}"
                ) from None
    rows: list = [None] * len(experiments)
    program_info = []
    for program, members in enumerate(programs.values()):
        tick = time.perf_counter()
        first = experiments[members[0]]
        if not first.sampled:
            relabelled, _ = reorder_dataset(dataset, first.reorder)  # part of the program's shape
            data = node_data(
                relabelled,
                first.model,
                normalize_features=first.normalize_features,
                backend=first.backend,
                options=first.options(),
                feature_cache=first.feature_cache,
            )
            config = dataclasses.replace(first.train_config(), timing_steps=0)
            values = [
                {hp: getattr(experiments[i], field) for field, hp in SWEEP_AS_DATA.items()}
                for i in members
            ]
            results = fit_sweep(
                build_model(first, dataset),
                data,
                config,
                seeds=first.seed_list(),
                points=values,
                progress=progress,
            )
            summaries = [summarize_result(r) for r in results]
            compile_s = results[0].compile_s
            layout = data.graph.layout_name
        else:  # other trainers: one run per point
            reports = [run_experiment(experiments[i], progress=progress) for i in members]
            keys = ("val_acc_mean", "val_acc_std", "test_acc_mean", "test_acc_std", "test_acc")
            summaries = [
                dict({k: r[k] for k in keys}, best_epoch_mean=float(np.mean(r["best_epoch"])))
                for r in reports
            ]
            compile_s = sum(r["compile_s"] for r in reports)
            layout = reports[0]["layout"]
        for i, summary in zip(members, summaries, strict=True):
            rows[i] = dict(points[i], **summary, program=program)
        program_info.append(
            {
                "program": program,
                "points": len(members),
                "members": len(members) * first.seeds,
                "layout": layout,
                "compile_s": compile_s,
                "wall_s": time.perf_counter() - tick,
            }
        )
    return {
        "dataset": dataset.name,
        "metric": "acc",
        "axes": {k: list(v) for k, v in axes.items()},
        "seeds": base.seed_list(),
        "rows": rank_rows(rows),
        "programs": program_info,
        "base": dataclasses.asdict(base),
        "wall_s": time.perf_counter() - start,
        "device": jax.devices()[0].device_kind,
    }

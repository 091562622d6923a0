"""``sparsegcn train``: train a model on a dataset over several seeds."""

from __future__ import annotations

import argparse
import os

from sparsegcn import _interrupt, parallel
from sparsegcn.bench.plot import require_matplotlib
from sparsegcn.cli.options import (
    add_dataclass_options,
    add_model_options,
    check_paths,
    dataclass_from_args,
    given_options,
    model_options_from_args,
)
from sparsegcn.cli.outputs import check_not_kept_files
from sparsegcn.experiment import NOT_SWEEPABLE, Experiment, run_experiment
from sparsegcn.experiment.lifecycle import Lifecycle, run_inputs
from sparsegcn.experiment.precompute import cache_owns
from sparsegcn.experiment.sweep import LIST_FIELDS
from sparsegcn.files import (
    check_distinct_outputs,
    check_not_inputs,
    check_writable,
    write_json_atomic,
)
from sparsegcn.nn.registry import MODELS
from sparsegcn.plots import PlotError, check_plot_path
from sparsegcn.tasks import resolve, task_for, task_name
from sparsegcn.train.checkpoint import LOCK_NAME, folder_of, folder_owns
from sparsegcn.train.sweep import format_table, parse_sweep

# Experiment fields that place a run on devices and processes.
PLACEMENT = frozenset({"devices", "coordinator", "num_processes", "process_id"})


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a GNN and report test accuracy over seeds",
        description="Train a model; with no --dataset, on an in-process synthetic graph.",
    )
    add_dataclass_options(parser, Experiment)
    add_model_options(parser, MODELS)
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON")
    parser.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="sweep a setting over values (repeatable; the grid of all is trained and "
        "ranked by validation accuracy), e.g. --sweep lr=0.005,0.01 --sweep hidden=16,64",
    )
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="progress bar"
    )
    parser.set_defaults(func=run)


def format_report(report: dict) -> str:
    """The final table: one row, the metric (accuracy, or a graph dataset's own) as
    mean ± std over seeds; link runs: test AUC and AP (and their ranking metric)."""
    if "test_auc_mean" in report:
        return _format_link_report(report)
    m = report.get("metric", "acc")
    header = (
        "dataset",
        "model",
        "backend",
        "seeds",
        f"test {m}",
        f"val {m}",
        "step ms",
        "compile s",
    )
    row = (
        report["dataset"],
        report["model"],
        report["backend"],
        str(report["seeds"]),
        f"{report[f'test_{m}_mean']:.4f} ± {report[f'test_{m}_std']:.4f}",
        f"{report[f'val_{m}_mean']:.4f} ± {report[f'val_{m}_std']:.4f}",
        f"{report['train_step_ms_median']:.2f}",
        f"{report['compile_s']:.2f}",
    )
    widths = [max(len(h), len(c)) for h, c in zip(header, row, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    values = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
    return f"{line}\n{values}"


def _format_link_report(report: dict) -> str:
    header: tuple[str, ...] = (
        "dataset",
        "model",
        "seeds",
        "test auc",
        "test ap",
        "step ms",
        "compile s",
    )
    row: tuple[str, ...] = (
        report["dataset"],
        report["model"],
        str(report["seeds"]),
        f"{report['test_auc_mean']:.4f} ± {report['test_auc_std']:.4f}",
        f"{report['test_ap_mean']:.4f} ± {report['test_ap_std']:.4f}",
        f"{report['train_step_ms_median']:.2f}",
        f"{report['compile_s']:.2f}",
    )
    metric = report.get("metric", "auc")
    if f"test_{metric}_mean" in report and metric not in ("auc", "ap"):
        header += (f"test {metric}",)
        row += (f"{report[f'test_{metric}_mean']:.4f} ± {report[f'test_{metric}_std']:.4f}",)
    widths = [max(len(h), len(c)) for h, c in zip(header, row, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    values = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
    return f"{line}\n{values}"


def check_cache_folder(cache: str | None, checkpoint: str | None, resumed: str | None) -> None:
    """Refuses a ``--feature-cache`` folder that is a run's checkpoint folder: this
    run's ``--checkpoint`` or ``--resume`` folder, or any folder a run has
    claimed (it holds the lock file), which belongs to that run alone.

    Raises:
      ValueError: naming the folder and whose it is.
    """
    if not cache:
        return
    real = os.path.realpath(cache)
    for flag, folder in (("--checkpoint", checkpoint), ("--resume", resumed)):
        if folder and os.path.realpath(folder) == real:
            raise ValueError(
                f"--feature-cache {cache!r} is the {flag} folder, which holds one run's "
                "checkpoints alone; keep the cache in a folder of its own"
            )
    if os.path.lexists(os.path.join(real, LOCK_NAME)):
        raise ValueError(
            f"--feature-cache {cache!r} is a run's checkpoint folder (it holds {LOCK_NAME}), "
            "which belongs to that run alone; keep the cache in a folder of its own"
        )


def check_outputs(experiment: Experiment, json_path: str | None) -> None:
    """Refuses unwritable outputs and unusable checkpoint folders before any data is read."""
    check_paths({"--json": json_path})
    if json_path:
        check_writable(json_path, what="--json")
    if experiment.plot:
        check_plot_path(experiment.plot, what="--plot")
        require_matplotlib()
        check_writable(experiment.plot, what="--plot")
    if experiment.checkpoint:
        check_writable(experiment.checkpoint, what="--checkpoint", folder=True)
    if experiment.feature_cache:
        check_writable(experiment.feature_cache, what="--feature-cache", folder=True)
    resumed = folder_of(experiment.resume) if experiment.resume else None
    check_cache_folder(experiment.feature_cache, experiment.checkpoint, resumed)
    check_distinct_outputs(
        {"--json": json_path, "--plot": experiment.plot},
        {
            "--checkpoint": (experiment.checkpoint, folder_owns),
            "--resume": (resumed, folder_owns),
            "--feature-cache": (experiment.feature_cache, cache_owns),
        },
    )
    Lifecycle.check(experiment)
    inputs = run_inputs(experiment)
    check_not_inputs({"--json": json_path, "--plot": experiment.plot}, inputs)
    check_not_kept_files({"--json": json_path, "--plot": experiment.plot})
    folders = {"--checkpoint": experiment.checkpoint, "--feature-cache": experiment.feature_cache}
    check_not_inputs(folders, inputs[:1])  # the dataset's folder: no files of ours in it


def run(args: argparse.Namespace) -> int:
    experiment = dataclass_from_args(
        Experiment, args, model_options=model_options_from_args(args, MODELS)
    )
    experiment.check_applies(given_options(args))
    check_outputs(experiment, args.json)
    if experiment.coordinator is not None:
        # Before anything starts JAX's backend: it then sees every process's devices.
        parallel.initialize(experiment.coordinator, experiment.num_processes, experiment.process_id)
        parallel.check_distinct_outputs({"--json": args.json})
    if args.sweep:
        sweep = task_for(experiment.dataset, experiment.task).sweep
        if sweep is None:
            task = task_name(experiment.dataset, experiment.task)
            raise ValueError(
                f"--sweep does not run on {experiment.dataset} ({task} task); train one "
                "setting per run"
            )
        axes = parse_sweep(args.sweep, Experiment, exclude=NOT_SWEEPABLE, lists=LIST_FIELDS)
        given = given_options(args)
        if experiment.parallel or set(axes) & PLACEMENT:
            raise ValueError(
                "--sweep trains on one device; drop --devices and --num-processes (and do "
                "not sweep them), or run the points one by one"
            )
        report = resolve(sweep)(experiment, axes, progress=args.progress, given=given)
        _interrupt.check()  # a swallowed Ctrl-C: no results after it
        print(format_table(report["rows"], list(axes), report.get("metric", "acc")))
    else:
        report = run_experiment(experiment, progress=args.progress)
        _interrupt.check()
        print(format_report(report))
        if report["devices"] > 1:
            print(
                f"devices: {report['devices']} ({report['parallelism']}) over "
                f"{report['processes']} process(es)"
            )
        for key in ("resumed_from", "checkpoint", "plot"):
            if report.get(key):
                print(f"{key.replace('_', ' ')}: {report[key]}")
    if args.json:
        _interrupt.check()
        write_json_atomic(args.json, report)
    if report.get("plot_error"):  # the run is reported above (and in --json) all the same
        raise PlotError(f"the run finished, but its plot was not drawn: {report['plot_error']}")
    return 0

"""``sparsegcn bench``: time the propagation backends over a matrix of graphs."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from sparsegcn.bench import PRESETS, format_table, plot_report, run_matrix
from sparsegcn.bench.plot import require_matplotlib
from sparsegcn.cli.outputs import check_not_kept_files
from sparsegcn.files import check_distinct_outputs, check_writable, write_json_atomic
from sparsegcn.plots import check_plot_path

_LISTS: dict[str, tuple[str, Callable[[str], Any]]] = {
    # option: (Matrix field, element parser)
    "backends": ("variants", str),
    "graphs": ("graphs", str),
    "nodes": ("nodes", int),
    "degrees": ("degrees", float),
    "features": ("features", int),
    "passes": ("passes", str),
    "reorders": ("reorders", lambda s: None if s == "none" else s),
}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark the propagation backends: time, GFLOP/s, GB/s, memory, crossover",
        description=(
            "Time propagate (forward, and forward + backward) for every backend over a matrix of "
            "graph sizes, degrees and feature widths, in one process. Prints backend x size with "
            "median ms, GFLOP/s, effective GB/s against the minimum bytes moved, '% stream' (that "
            "bandwidth as a share of the streaming bound, a donated x + 1 timed with no allocation), "
            "'x gather' (median over the gather floor: a row per edge plus the output and ids at "
            "that bound) and peak memory, and marks where sparse beats dense. The footer gives the "
            "bound and, beside it, x + 1 into a fresh buffer (on CPU mostly page faults)."
        ),
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--preset", choices=sorted(PRESETS), default="standard", help="matrix (default: standard)"
    )
    size.add_argument(
        "--quick", dest="preset", action="store_const", const="quick", help="small matrix, ~1 min"
    )
    size.add_argument(
        "--full", dest="preset", action="store_const", const="full", help="up to 1M nodes"
    )
    for option, (field, _) in _LISTS.items():
        parser.add_argument(
            f"--{option}",
            metavar="A,B,...",
            help=f"comma-separated {field} overriding the preset's"
            + (" ('none' for the generated order)" if option == "reorders" else ""),
        )
    parser.add_argument("--repeats", type=int, help="timed calls per case (median reported)")
    parser.add_argument("--seed", type=int, default=0, help="seed of graphs and features")
    parser.add_argument("--json", metavar="PATH", help="write the raw figures as JSON")
    parser.add_argument("--plot", metavar="PATH", help="write a log-log PNG of time vs edges")
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="progress bar"
    )
    parser.set_defaults(func=run)


def matrix_from_args(args: argparse.Namespace):
    """The preset with any list options applied."""
    changes: dict[str, Any] = {}
    for option, (field, parse) in _LISTS.items():
        text = getattr(args, option)
        if text is None:
            continue
        items = [item.strip() for item in text.split(",") if item.strip()]
        try:
            changes[field] = tuple(parse(item) for item in items)
        except ValueError as err:
            raise ValueError(f"--{option} {text!r}: {err}") from None
    if args.repeats is not None:
        changes["repeats"] = args.repeats
    return dataclasses.replace(PRESETS[args.preset], **changes)


def run(args: argparse.Namespace) -> int:
    from sparsegcn._checks import check_hyperparameter

    check_hyperparameter("seed", args.seed, label="--seed")  # [0, 2**32), before measuring
    matrix = matrix_from_args(args)
    check_distinct_outputs({"--json": args.json, "--plot": args.plot})
    check_not_kept_files({"--json": args.json, "--plot": args.plot})
    if args.json:
        check_writable(args.json, what="--json")
    if args.plot:
        check_plot_path(args.plot, what="--plot")
        require_matplotlib()  # fail before measuring, not after
        check_writable(args.plot, what="--plot")
    report = run_matrix(matrix, progress=args.progress, seed=args.seed)
    report["preset"] = args.preset
    print(format_table(report))
    if args.json:
        write_json_atomic(args.json, report)
    if args.plot:
        plot_report(report, args.plot)
    return 0

"""``sparsegcn info``: what a dataset holds, before any training."""

from __future__ import annotations

import argparse
import time

from sparsegcn.cli.options import check_paths
from sparsegcn.cli.outputs import check_not_kept_files
from sparsegcn.datasets import data_location, is_path, load
from sparsegcn.datasets.stats import describe
from sparsegcn.experiment import DEFAULT_DATASET
from sparsegcn.files import check_not_inputs, check_writable, write_json_atomic
from sparsegcn.tasks import resolve, task_for


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "info",
        help="print a dataset's size, splits, degrees, homophily and memory",
        description="Load a dataset and print its statistics.",
    )
    parser.add_argument(
        "--dataset",
        default=DEFAULT_DATASET,
        help="dataset name, or the path of an on-disk dataset folder (./NAME, DIR/NAME)",
    )
    parser.add_argument("--root", default=None, help="data root")
    parser.add_argument("--scale", type=float, default=1.0, help="synthetic shrink factor")
    parser.add_argument("--seed", type=int, default=0, help="synthetic generator seed")
    parser.add_argument("--json", metavar="PATH", help="write the statistics as JSON")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="for an on-disk folder, also check every file's sha256 (reads every byte)",
    )
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="progress bars"
    )
    parser.set_defaults(func=run)


def _format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_stats(stats: dict) -> str:
    d = stats["degree"]
    rows = [
        ("dataset", stats["name"]),
        ("nodes", f"{stats['num_nodes']:,}"),
        ("edges (as published)", f"{stats['num_edges']:,}"),
        ("stored directed edges", f"{stats['num_stored_edges']:,}"),
        ("features", f"{stats['num_features']:,} ({stats['feature_format']})"),
        # A multi-label dataset's outputs are binary tasks (ROC-AUC), not classes.
        (
            ("binary tasks", f"{stats['num_classes']}")
            if stats.get("metric") == "rocauc"
            else ("classes", f"{stats['num_classes']}")
        ),
        *(
            [("edge features", str(stats["num_edge_features"]))]
            if stats.get("num_edge_features")
            else []
        ),
        ("split", ", ".join(f"{k} {v:,}" for k, v in stats["split_sizes"].items())),
        (
            "in-degree",
            f"mean {d['mean']:.2f}; min {d['q0']:.0f}, median {d['q50']:.0f}, "
            f"p90 {d['q90']:.0f}, p99 {d['q99']:.0f}, max {d['q100']:.0f}",
        ),
        ("edge homophily", f"{stats['homophily']:.4f}"),
        ("memory", _format_bytes(stats["bytes"])),
        ("load time", f"{stats['load_s']:.2f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def run(args: argparse.Namespace) -> int:
    check_paths({"--root": args.root, "--json": args.json})
    if args.json:
        check_writable(args.json, what="--json")
        check_not_inputs(
            {"--json": args.json}, [("the dataset", data_location(args.dataset, args.root))]
        )
        check_not_kept_files({"--json": args.json})
    task = task_for(args.dataset)
    if task.info is not None:
        if args.verify and not is_path(args.dataset):
            raise ValueError(
                f"--verify applies only to on-disk dataset folders, not {args.dataset!r}"
            )
        extra = {"verify": True} if args.verify else {}  # the hooks of folder tasks take it
        if args.scale != 1.0 or args.seed != 0:  # generated datasets' hooks take these
            extra.update(scale=args.scale, seed=args.seed)
        stats, text = resolve(task.info)(args.dataset, args.root, progress=args.progress, **extra)
        print(text)
        if args.json:
            write_json_atomic(args.json, stats)
        return 0
    start = time.perf_counter()
    dataset = load(
        args.dataset,
        args.root,
        scale=args.scale,
        seed=args.seed,
        progress=args.progress,
        verify=args.verify,
    )
    stats = describe(dataset)
    stats["load_s"] = time.perf_counter() - start
    print(format_stats(stats))
    if args.json:
        write_json_atomic(args.json, stats)
    return 0

"""The command-line runs behind the figures of ``docs/performance.md`` that are
whole ``sparsegcn`` commands: loading datasets, a sweep on Cora, GCN against
an MLP and node orders on ``synthetic:arxiv``, and Cora on simulated devices.

Each run is a fresh process (``python -m sparsegcn ...``), one after the other
on a machine with nothing else running; its wall time and peak resident
memory (``os.wait4``'s ``ru_maxrss``) are measured from outside, and its
``--json`` report, where it writes one, is kept whole. Synthetic datasets are
generated into a fresh temporary root, so their first load includes
generation and caching and the second reads the cache.

Usage::

    python benchmarks/doc_runs.py --root DIR --out benchmarks/results/doc-runs-cpu.json
    python benchmarks/doc_runs.py --root DIR --only load,sweep --out OUT.json

``DIR`` holds ``planetoid/`` (Cora). The JSON records the machine, the
versions, the commit and, for each run, its command, environment additions,
exit status, wall seconds, peak RSS and report.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GROUPS = ("load", "sweep", "arxiv", "devices")


def runs(root: str, cache: str) -> dict[str, list[tuple[str, list[str], dict]]]:
    """``{group: [(name, argv after "sparsegcn", extra environment)]}``."""
    four = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    cora = ["--dataset", "cora", "--root", root]
    arxiv = ["--dataset", "synthetic:arxiv", "--root", cache]
    sage = [*cora, "--model", "sage", "--fanouts", "25,10", "--seeds", "10"]
    return {
        "load": [
            (f"info {name} ({when})", ["info", "--dataset", name, "--root", where], {})
            for name, where in (
                ("synthetic:tiny", cache),
                ("cora", root),
                ("synthetic:arxiv", cache),
                ("synthetic:products", cache),
            )
            for when in ("first", "second")
        ],
        "sweep": [
            (
                "sweep lr x hidden",
                [
                    "train",
                    *cora,
                    "--seeds",
                    "5",
                    *("--sweep", "lr=0.005,0.01,0.02"),
                    "--sweep",
                    "hidden=16,64",
                ],
                {},
            )
        ],
        "arxiv": [
            ("arxiv gcn", ["train", *arxiv, "--model", "gcn"], {}),
            ("arxiv mlp", ["train", *arxiv, "--model", "mlp", "--seeds", "3"], {}),
            ("arxiv order none", ["train", *arxiv, "--epochs", "30", "--patience", "0"], {}),
            (
                "arxiv order community",
                ["train", *arxiv, "--epochs", "30", "--patience", "0", "--reorder", "community"],
                {},
            ),
            (
                "arxiv order rcm",
                ["train", *arxiv, "--epochs", "30", "--patience", "0", "--reorder", "rcm"],
                {},
            ),
        ],
        "devices": [
            ("sage devices 4 seeds 0-9", ["train", *sage, "--devices", "4"], four),
            ("sage devices 1 seeds 0-9", ["train", *sage, "--devices", "1"], four),
            (
                "sage devices 4 seeds 10-19",
                ["train", *sage, "--devices", "4", "--seed", "10"],
                four,
            ),
            (
                "sage devices 1 seeds 10-19",
                ["train", *sage, "--devices", "1", "--seed", "10"],
                four,
            ),
            (
                "gcn devices 4",
                ["train", *cora, "--model", "gcn", "--seeds", "10", "--devices", "4"],
                four,
            ),
            (
                "gcn devices 1",
                ["train", *cora, "--model", "gcn", "--seeds", "10", "--devices", "1"],
                four,
            ),
        ],
    }


def run_one(argv: list[str], extra_env: dict, report: Path | None) -> dict:
    """Runs ``python -m sparsegcn argv`` and measures it from outside."""
    env = {**os.environ, **extra_env}
    command = [sys.executable, "-m", "sparsegcn", *argv, "--no-progress"]
    if argv[0] == "info":
        command.remove("--no-progress")
    if report is not None:
        command += ["--json", str(report)]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.communicate()
    wall = time.perf_counter() - start
    # communicate() has reaped the child; its rusage is the children's maximum so far,
    # so each run is measured in a process of its own (see main).
    return {
        "returncode": process.returncode,
        "wall_s": round(wall, 3),
        "stdout": out.decode(errors="replace")[-4000:],
        "stderr": err.decode(errors="replace")[-2000:],
    }


def measure(argv: list[str], extra_env: dict, report: Path | None) -> dict:
    """:func:`run_one` in a forked child, so that ``RUSAGE_CHILDREN`` holds this run alone."""
    import resource

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, then send the result with its children's peak
        os.close(read)
        result = run_one(argv, extra_env, report)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        result["peak_rss_bytes"] = peak
        with os.fdopen(write, "w") as f:
            json.dump(result, f)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    result = json.loads(text)
    if report is not None and report.exists():
        result["report"] = json.loads(report.read_text())
        report.unlink()
    return result


def environment() -> dict:
    """The machine, the versions and the commit."""
    import jax
    import jaxlib
    import numpy as np

    from sparsegcn.bench.runner import machine_info

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "numpy": np.__version__},
        "commit": commit,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="folder holding planetoid/ (Cora)")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"groups of {GROUPS}")
    parser.add_argument("--out", required=True, type=Path, help="the JSON to write")
    args = parser.parse_args(argv)
    groups = [g for g in args.only.split(",") if g]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        parser.error(f"--only: unknown group(s) {unknown}; choose from {GROUPS}")
    if args.out.exists() or not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: exists already, or its folder does not")
    results = {**environment(), "command": shlex.join([sys.argv[0], *sys.argv[1:]]), "runs": []}
    with tempfile.TemporaryDirectory(prefix="doc-runs-") as scratch:
        cache = str(Path(scratch) / "root")
        plan = runs(args.root, cache)
        for group in groups:
            for name, run_argv, extra in plan[group]:
                report = Path(scratch) / "report.json" if run_argv[0] == "train" else None
                print(f"{group}: {name} ...", file=sys.stderr, flush=True)
                result = measure(run_argv, extra, report)
                shown = shlex.join(["sparsegcn", *run_argv])
                entry = {"group": group, "name": name, "command": shown, "env": extra, **result}
                results["runs"].append(entry)
                print(f"  rc {result['returncode']}, {result['wall_s']} s", file=sys.stderr)
        # The paths of this machine are not kept: the root is DIR, the scratch root CACHE.
        text = json.dumps(results, indent=1).replace(cache, "CACHE").replace(args.root, "DIR")
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(text + "\n")
    partial.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

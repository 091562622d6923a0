"""One propagation with and without :func:`sparsegcn.allocator.keep_freed_memory`:
its time and the page faults it takes, each setting in processes of its own.

glibc's ``malloc`` setting is process-wide, so every measurement runs in a
fresh child process: the setting (``keep`` or ``default``) is applied first,
then a random graph (``N`` nodes, ``E`` edges, seeded) and ``x [N, F]`` are
built, ``jit(propagate)`` on the plain edge list (gather + ``segment_sum``,
which writes an ``[E, F]`` buffer on every call) is compiled and called
once, and ``--calls`` calls are timed (``block_until_ready``), with the
minor page faults (``getrusage``'s ``ru_minflt``) they took. The two
settings alternate, ``--rounds`` times each.

Usage::

    python benchmarks/allocator_faults.py --out benchmarks/results/allocator-faults.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path


def child(setting: str, nodes: int, edges: int, features: int, calls: int) -> dict:
    """One measurement, in this (fresh) process."""
    from sparsegcn import allocator

    if setting == "keep":
        allocator.keep_freed_memory()
    import jax
    import jax.numpy as jnp
    import numpy as np

    import sparsegcn as sg

    rng = np.random.default_rng(0)
    graph = sg.Graph(
        rng.integers(0, nodes, edges).astype(np.int32),
        rng.integers(0, nodes, edges).astype(np.int32),
        rng.uniform(0.5, 1.5, edges).astype(np.float32),
        nodes,
    )
    x = jnp.asarray(rng.standard_normal((nodes, features), np.float32))
    step = jax.jit(lambda g, x: sg.propagate(g, x, backend="segment"))
    step(graph, x).block_until_ready()  # compile and first call
    times = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        start = time.perf_counter()
        step(graph, x).block_until_ready()
        times.append((time.perf_counter() - start) * 1e3)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    return {
        "setting": setting,
        "keeps_freed_memory": allocator.keeps_freed_memory(),
        "median_ms": statistics.median(times),
        "times_ms": times,
        "minor_faults": faults,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="the JSON to write (not there yet)")
    parser.add_argument("--child", choices=["keep", "default"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = (args.nodes, args.edges, args.features, args.calls)
    if args.child:
        print(json.dumps(child(args.child, *sizes)))
        return 0
    if args.out is None or args.out.exists() or not args.out.parent.is_dir():
        parser.error("--out: a new file in an existing folder")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES",)}
    env["SPARSEGCN_KEEP_FREED_MEMORY"] = "0"  # each child sets (or not) its own
    runs = []
    for _ in range(args.rounds):
        for setting in ("default", "keep"):
            command = [sys.executable, __file__, "--child", setting]
            command += ["--nodes", str(args.nodes), "--edges", str(args.edges)]
            command += ["--features", str(args.features), "--calls", str(args.calls)]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs.append(result)
            print(
                f"{setting}: {result['median_ms']:.1f} ms, {result['minor_faults']} faults",
                file=sys.stderr,
            )
    from sparsegcn.bench.runner import machine_info

    summary = {
        setting: {
            "median_ms": statistics.median(r["median_ms"] for r in runs if r["setting"] == setting),
            "minor_faults_median": statistics.median(
                r["minor_faults"] for r in runs if r["setting"] == setting
            ),
        }
        for setting in ("default", "keep")
    }
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "benchmarks/allocator_faults.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "sizes": dict(zip(("nodes", "edges", "features", "calls"), sizes, strict=True)),
        "summary": summary,
        "speedup": summary["default"]["median_ms"] / summary["keep"]["median_ms"],
        "runs": runs,
    }
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(json.dumps(report, indent=1) + "\n")
    partial.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

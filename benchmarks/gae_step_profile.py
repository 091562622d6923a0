"""Where the time of one Cora GAE training step goes: XLA's CPU ops, by profile.

    python benchmarks/gae_step_profile.py --root DIR [--calls 20] [--out OUT]

Runs the trainer's call that ``compare.py --only gae`` times (10 epochs of one
seed's sampled GAE step, :func:`gae_compare.gae_chunk_setup`), warm, under
``jax.profiler`` for ``--calls`` calls, then reads the trace back
(``jax.profiler.ProfileData``) and sums each XLA op's time on the CPU
threads that run the program. Each row is one compiled op (a fusion, a
custom call such as the native CSR product, a dot) with its time per step
(microseconds, the profile's events over the steps), its runs per step, its
output shape and the JAX operation it came from (``op_name`` in the compiled
HLO). A loop's or a branch's row (``container``) holds the ops run inside
it, which have rows of their own; the totals leave it out. Ops run on both
cores at once, so the rows add up to more than the
step's wall time, and the profile adds its own cost to each op: read the
rows as shares, not as a time.

Prints the rows (largest first) and writes them as JSON with the step's
median wall time outside the profile and the machine.
"""

from __future__ import annotations

import argparse
import collections
import glob
import re
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

STEPS_A_CALL = 10  # gae_compare.CHUNK


def op_table(trace_dir: str, hlo: str, steps: int) -> list[dict]:
    """Per-op rows from a trace folder and the program's compiled HLO text."""
    from jax.profiler import ProfileData

    (path,) = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
    total: collections.Counter = collections.Counter()
    runs: collections.Counter = collections.Counter()
    for plane in ProfileData.from_file(path).planes:
        for line in plane.lines:
            if not line.name.startswith("tf_XLAEigen"):  # the threads that run XLA's ops
                continue
            for event in line.events:
                if event.name.startswith("ThunkExecutor"):
                    continue
                total[event.name] += event.duration_ns
                runs[event.name] += 1
    rows = []
    for name, ns in total.most_common():
        found = re.search(r"%" + re.escape(name) + r" = (\S+) [^\n]*?op_name=\"([^\"]+)\"", hlo)
        rows.append(
            {
                "op": name,
                "us_per_step": ns / steps / 1e3,
                "runs_per_step": runs[name] / steps,
                "shape": found.group(1) if found else None,
                "from": found.group(2) if found else None,
                # A loop or a branch: its time holds the ops run inside it.
                "container": re.match(r"(while|cond|conditional|call)\b", name) is not None,
            }
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="data root holding planetoid/ind.cora.*")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--out", default=None, help="JSON file to write (default: none)")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error(f"--calls must be at least 1, got {args.calls}")
    from sparsegcn.datasets import data_location
    from sparsegcn.files import check_outputs

    try:
        check_outputs({"--out": args.out}, [("Cora", data_location("cora", args.root))])
    except (OSError, ValueError) as err:
        parser.error(str(err))

    from gae_compare import gae_chunk_setup

    from sparsegcn.bench.runner import machine_info

    run, call_args = gae_chunk_setup(args.root)
    compiled = jax.jit(run).lower(*call_args).compile()
    walls = []
    for _ in range(5 * args.calls):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*call_args))
        walls.append((time.perf_counter() - start) / STEPS_A_CALL * 1e3)
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        for _ in range(args.calls):
            jax.block_until_ready(compiled(*call_args))
        jax.profiler.stop_trace()
        rows = op_table(trace_dir, compiled.as_text(), args.calls * STEPS_A_CALL)
    report = {
        "command": "python benchmarks/gae_step_profile.py --root DIR"
        + (f" --calls {args.calls}" if args.calls != 20 else ""),
        "machine": machine_info(),
        "step_ms_median_unprofiled": float(np.median(walls)),
        "ops_us_per_step_total": sum(r["us_per_step"] for r in rows if not r["container"]),
        "op_runs_per_step": sum(r["runs_per_step"] for r in rows if not r["container"]),
        "rows": rows,
    }
    print(
        f"step {report['step_ms_median_unprofiled']:.3f} ms (median, unprofiled); "
        f"ops {report['ops_us_per_step_total']:.0f} us a step over "
        f"{report['op_runs_per_step']:.0f} op runs (profiled, both cores)"
    )
    for r in rows[:40]:
        print(
            f"{r['us_per_step']:8.1f} us  x{r['runs_per_step']:<5.1f} {r['op']:32s} {r['shape'] or ''}"
        )
    if args.out is not None:
        from sparsegcn.files import write_json_atomic

        write_json_atomic(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

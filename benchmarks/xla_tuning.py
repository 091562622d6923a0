"""Training steps with and without ``sparsegcn.xla_tuning``, interleaved.

    python benchmarks/xla_tuning.py --root ../shared/data
    python benchmarks/xla_tuning.py --models gat,gcn --layouts edges,csr,ell --rounds 3 \\
        --json benchmarks/results/xla-tuning.json

Each measurement is a fresh process (XLA reads ``$XLA_FLAGS`` once, when
its backend starts) that builds a registered model's Cora training step the
way ``sparsegcn train`` does (:func:`sparsegcn.bench.steps.registered_step`),
puts the graph in one layout, compiles, and times ``--steps`` steps with
``block_until_ready``. ``SPARSEGCN_XLA_TUNING=0`` and ``=1`` alternate in
every round, so load hits both alike; the table gives each side's median of
the per-round medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MEASURE = r"""
import json, sys, time
import sparsegcn, jax, numpy as np
from sparsegcn.allocator import keep_freed_memory
from sparsegcn.backends import as_layout
from sparsegcn.bench.steps import registered_step
from sparsegcn.datasets import load
keep_freed_memory()
model, layout, steps, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
step, (state, data) = registered_step(load("cora", root, download=False), model)
if layout != "auto":
    data = data._replace(graph=jax.device_put(as_layout(data.graph, layout)))
tick = time.perf_counter()
compiled = jax.jit(step).lower(state, data).compile()
compile_s = time.perf_counter() - tick
for _ in range(5):
    jax.block_until_ready(compiled(state, data))
times = []
for _ in range(steps):
    tick = time.perf_counter()
    jax.block_until_ready(compiled(state, data))
    times.append(time.perf_counter() - tick)
print(json.dumps({"median_ms": 1e3 * float(np.median(times)), "compile_s": compile_s,
                  "tuning": sparsegcn.xla_tuning.status()}))
"""


def measure(model: str, layout: str, steps: int, root: str, tuning: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(SPARSEGCN_XLA_TUNING=tuning, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, model, layout, str(steps), root],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{model} {layout} tuning={tuning} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(REPO.parent / "shared/data"))
    parser.add_argument("--models", default="gat,gcn")
    parser.add_argument("--layouts", default="auto", help="auto (the CLI's), edges, csr, ell")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if not (Path(args.root) / "planetoid" / "ind.cora.x").exists():
        parser.error(f"needs planetoid/ind.cora.* under {args.root} (--root)")
    sys.path.insert(0, str(REPO))
    from sparsegcn.datasets import data_location
    from sparsegcn.files import check_outputs, write_json_atomic

    try:
        check_outputs({"--json": args.json}, [("Cora", data_location("cora", args.root))])
    except (OSError, ValueError) as err:
        parser.error(str(err))
    rows = []
    for model in args.models.split(","):
        for layout in args.layouts.split(","):
            runs: dict = {"0": [], "1": []}
            for _ in range(args.rounds):
                for tuning in runs:
                    runs[tuning].append(measure(model, layout, args.steps, args.root, tuning))
            off, on = (statistics.median(r["median_ms"] for r in runs[t]) for t in ("0", "1"))
            rows.append(
                {
                    "model": model,
                    "layout": layout,
                    "off_ms": off,
                    "on_ms": on,
                    "on_over_off": on / off,
                    "runs": runs,
                }
            )
            print(
                f"{model:6s} {layout:6s} tuning off {off:8.3f} ms  on {on:8.3f} ms  "
                f"on/off {on / off:.3f}",
                flush=True,
            )
    print(f"load average {os.getloadavg()}")
    if args.json:
        write_json_atomic(args.json, {"rows": rows, "load": os.getloadavg()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

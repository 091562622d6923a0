"""Before/after the engine redesign: the three steps that must not regress, interleaved.

    python benchmarks/regression.py --before 09845df
    python benchmarks/regression.py --before 09845df --rounds 5 --products-scale 0.25 \\
        --json benchmarks/results/regression.json

Measures, with the code of ``--before`` (a git revision, exported to a
temporary folder) and of this checkout, side by side:

- ``cora``: Kipf & Welling's Cora GCN training step (needs Cora:
  ``$SPARSEGCN_TEST_DATA`` or ``../shared/data``);
- ``arxiv``: the 3-layer, hidden-256 GCN step on a random graph of
  ogbn-arxiv's size (``--arxiv-scale``);
- ``products``: one GraphSAGE mini-batch step on ``synthetic:products``
  (3 layers, hidden 256, fanouts 15,10,5, batch 1024; ``--products-scale``).

Each measurement is a fresh process running one side on one case, timing
``--steps`` compiled steps (``block_until_ready``) after compiling; rounds
alternate the sides, so load hits both alike. The table reports each side's
median of the per-round medians and the ratio after / before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Runs in a child process against one side's code: only API both sides have.
MEASURE = r"""
import json, os, sys, time
import jax, numpy as np
from sparsegcn.allocator import keep_freed_memory
keep_freed_memory()
case, steps, scale, root = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]

def timed(step, args):
    tick = time.perf_counter()
    compiled = jax.jit(step).lower(*args).compile()
    compile_s = time.perf_counter() - tick
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(steps):
        tick = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - tick)
    return times, compile_s

if case in ("cora", "arxiv"):
    from sparsegcn.bench.steps import arxiv_like_setup, cora_setup, gcn_step
    setup = cora_setup(root) if case == "cora" else arxiv_like_setup(scale=scale)
    times, compile_s = timed(*gcn_step(setup))
else:
    from sparsegcn.datasets import load
    from sparsegcn.experiment import node_data
    from sparsegcn.nn import sage
    from sparsegcn.train import TrainConfig, init_state, make_optimizer
    from sparsegcn.train.minibatch import first_batch, make_step_fn, minibatch_data
    dataset = load("synthetic:products", root, scale=scale)
    data = jax.device_put(minibatch_data(node_data(dataset, "sage")))
    model = sage(dataset.num_features, dataset.num_classes, hidden=256, num_layers=3)
    tx = make_optimizer(TrainConfig())
    states = jax.jit(jax.vmap(lambda k: init_state(model, tx, k)))(
        jax.random.split(jax.random.key(0), 1))
    batch = first_batch(jax.random.key(1), data.train_nodes, 1024)
    times, compile_s = timed(make_step_fn(model, tx, (15, 10, 5)), (states, data, batch))
print(json.dumps({"median_ms": 1e3 * sorted(times)[len(times) // 2], "compile_s": compile_s}))
"""

CASES = ("cora", "arxiv", "products")


def export(revision: str, folder: Path) -> Path:
    """``revision``'s tree under ``folder`` (``git archive``), without touching the checkout."""
    archive = folder / "before.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(REPO), "archive", revision], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "before", filter="data")
    return folder / "before"


def measure(code_root: Path, case: str, steps: int, scale: float, root: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code_root))
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, case, str(steps), str(scale), root],
        env=env,
        cwd=code_root,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{case} on {code_root} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="git revision to compare against")
    parser.add_argument("--cases", default=",".join(CASES), help=f"some of {CASES}")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two sides")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per measurement")
    parser.add_argument("--arxiv-scale", type=float, default=1.0)
    parser.add_argument("--products-scale", type=float, default=1.0)
    parser.add_argument("--root", default=None, help="data root (Cora; the products cache)")
    parser.add_argument("--json", metavar="PATH", help="write the measurements as JSON")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        parser.error(f"--cases: {bad} not in {CASES}")
    root = args.root or os.environ.get("SPARSEGCN_TEST_DATA") or str(REPO.parent / "shared/data")
    if "cora" in cases and not (Path(root) / "planetoid" / "ind.cora.x").exists():
        parser.error(f"the cora case needs planetoid/ind.cora.* under {root} (--root)")
    cache = args.root or str(REPO / "datasets")
    sys.path.insert(0, str(REPO))
    from sparsegcn.datasets import data_location
    from sparsegcn.files import check_outputs, write_json_atomic

    inputs = {"cora": ("Cora", data_location("cora", root))}
    inputs["products"] = ("synthetic:products", data_location("synthetic:products", cache))
    try:
        check_outputs({"--json": args.json}, [inputs[c] for c in cases if c in inputs])
    except (OSError, ValueError) as err:
        parser.error(str(err))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"before": export(args.before, Path(tmp)), "after": REPO}
        for case in cases:
            scale = {"arxiv": args.arxiv_scale, "products": args.products_scale}.get(case, 1.0)
            where = cache if case == "products" else root
            runs: dict = {side: [] for side in sides}
            for _ in range(args.rounds):
                for side, code in sides.items():
                    runs[side].append(measure(code, case, args.steps, scale, where))
            medians = {s: statistics.median(r["median_ms"] for r in runs[s]) for s in sides}
            rows.append(
                {
                    "case": case,
                    "scale": scale,
                    "before_ms": medians["before"],
                    "after_ms": medians["after"],
                    "ratio": medians["after"] / medians["before"],
                    "rounds": runs,
                }
            )
            print(
                f"{case:9s} scale {scale:<5g} before {medians['before']:9.2f} ms  "
                f"after {medians['after']:9.2f} ms  after/before {rows[-1]['ratio']:.3f}",
                flush=True,
            )
    print(f"load average {os.getloadavg()}, before = {args.before}")
    if args.json:
        write_json_atomic(args.json, {"before": args.before, "rows": rows, "load": os.getloadavg()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

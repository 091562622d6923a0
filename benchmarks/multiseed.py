"""K seeds in one compiled program versus K sequential runs, side by side in one process.

Both sides train the same model on the same prepared data with the same
settings (``sparsegcn train`` defaults unless overridden) and the same seeds:

- *together*: one ``fit(..., seeds=range(K))``, a ``jit(vmap(scan))`` program;
- *sequential*: ``K`` calls ``fit(..., seeds=[s])``, one after the other, as a
  user looping over seeds in Python would (each call compiles its program).

Wall times include initialization, compilation and training; the dataset is
loaded and prepared once, outside both timers. Each repeat runs both sides,
alternating which goes first. Per-seed test accuracies of the two sides are
compared (they must agree to float32 tolerance), and the single-seed wall
time (median of the sequential runs) is reported for the GPU criterion
("K seeds at most 2x one seed").

Usage::

    python benchmarks/multiseed.py --dataset cora --root "$SPARSEGCN_TEST_DATA" --seeds 10

Results (JSON, with the command, machine and load average) go to
``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import jax
import numpy as np

from sparsegcn.allocator import keep_freed_memory_unless_disabled
from sparsegcn.datasets import data_location, load
from sparsegcn.experiment import Experiment, build_model, node_data
from sparsegcn.files import check_not_inputs, check_writable
from sparsegcn.train import fit
from sparsegcn.train.checkpoint import write_atomic

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--root", default=None, help="data root")
    parser.add_argument("--seeds", type=int, default=10, help="K")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--patience", type=int, default=100, help="0: never stop early")
    parser.add_argument("--backend", default=Experiment.backend)
    parser.add_argument("--repeats", type=int, default=1, help="runs of both sides")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    args = parser.parse_args(argv)
    try:
        check_writable(args.out, what="--out", folder=True)
        check_not_inputs(
            {"--out": args.out}, [(args.dataset, data_location(args.dataset, args.root))]
        )
    except (OSError, ValueError) as err:
        parser.error(str(err))
    return args


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_together(model, data, config, seeds) -> dict:
    start = time.perf_counter()
    result = fit(model, data, config, seeds=seeds)
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "compile_s": result.compile_s,
        "epochs_run": int(result.history["loss"].shape[0]),
        "test_acc": result.test_acc.tolist(),
    }


def time_sequential(model, data, config, seeds) -> dict:
    walls, compiles, accs, epochs = [], [], [], []
    start = time.perf_counter()
    for seed in seeds:
        tick = time.perf_counter()
        result = fit(model, data, config, seeds=[seed])
        walls.append(time.perf_counter() - tick)
        compiles.append(result.compile_s)
        accs.append(float(result.test_acc[0]))
        epochs.append(int(result.history["loss"].shape[0]))
    return {
        "wall_s": time.perf_counter() - start,
        "compile_s": float(np.sum(compiles)),
        "single_seed_wall_s": walls,
        "epochs_run": epochs,
        "test_acc": accs,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    keep_freed_memory_unless_disabled()  # as the sparsegcn command does
    if args.seeds < 2 or args.repeats < 1:
        raise SystemExit("--seeds must be >= 2 and --repeats >= 1")
    load_before = os.getloadavg()
    dataset = load(args.dataset, args.root, download=False)
    exp = Experiment(
        dataset=args.dataset,
        root=args.root,
        backend=args.backend,
        epochs=args.epochs,
        patience=args.patience,
        seeds=args.seeds,
    )
    data = jax.device_put(node_data(dataset, exp.model, normalize_features=exp.normalize_features))
    model = build_model(exp, dataset)
    config = dataclasses.replace(exp.train_config(), timing_steps=0)
    seeds = exp.seed_list()

    runs = []
    for repeat in range(args.repeats):
        sides = {}
        order = ("together", "sequential") if repeat % 2 == 0 else ("sequential", "together")
        for side in order:
            timer = time_together if side == "together" else time_sequential
            sides[side] = timer(model, data, config, seeds)
            print(f"repeat {repeat} {side}: {sides[side]['wall_s']:.2f} s", flush=True)
        runs.append(sides)

    together = float(np.median([r["together"]["wall_s"] for r in runs]))
    sequential = float(np.median([r["sequential"]["wall_s"] for r in runs]))
    single = float(np.median([w for r in runs for w in r["sequential"]["single_seed_wall_s"]]))
    acc_t = np.asarray(runs[0]["together"]["test_acc"])
    acc_s = np.asarray(runs[0]["sequential"]["test_acc"])
    summary = {
        "together_wall_s_median": together,
        "sequential_wall_s_median": sequential,
        "speedup": sequential / together,
        "single_seed_wall_s_median": single,
        "together_over_single": together / single,
        "test_acc_together_mean": float(acc_t.mean()),
        "test_acc_together_std": float(acc_t.std()),
        "test_acc_sequential_mean": float(acc_s.mean()),
        "test_acc_sequential_std": float(acc_s.std()),
        "test_acc_max_abs_diff": float(np.abs(acc_t - acc_s).max()),
    }
    record = {
        "benchmark": "multiseed",
        "command": shlex.join([sys.executable, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": cpu_model(),
            "cpu_count": os.cpu_count(),
            "device": jax.devices()[0].device_kind,
            "jax": jax.__version__,
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "settings": {**vars(args), "out": str(args.out), "config": dataclasses.asdict(config)},
        "dataset": {"name": dataset.name, "num_nodes": dataset.num_nodes},
        "summary": summary,
        "runs": runs,
    }
    print()
    print(f"{'':28}{'together':>12}{'sequential':>12}")
    print(f"{'wall s (incl. compile)':28}{together:12.2f}{sequential:12.2f}")
    compile_t = np.median([r["together"]["compile_s"] for r in runs])
    compile_s = np.median([r["sequential"]["compile_s"] for r in runs])
    print(f"{'compile s':28}{compile_t:12.2f}{compile_s:12.2f}")
    print(
        f"{'test acc (mean ± std)':28}"
        f"{acc_t.mean():8.4f}±{acc_t.std():.3f}{acc_s.mean():8.4f}±{acc_s.std():.3f}"
    )
    print(f"speedup {summary['speedup']:.2f}x; K seeds / one seed: {together / single:.2f}x wall")
    print(f"max per-seed test accuracy difference: {summary['test_acc_max_abs_diff']:.2e}")
    print(f"load average before {load_before}, after {os.getloadavg()}")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    device = jax.devices()[0].platform
    path = args.out / f"multiseed-{args.dataset}-{device}-{stamp}.json"
    text = json.dumps(record, indent=2) + "\n"
    write_atomic(path, lambda f: f.write(text.encode()))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Random against balanced packing of graph batches, side by side in one process.

The graph trainer packs each epoch's graphs into padded batches of a static
budget (:mod:`sparsegcn.batch`). ``random`` packs a random order under a
budget for a random batch's size (:func:`~sparsegcn.batch.choose_budget`);
``balanced`` (the default) deals graphs sorted by size so that every batch
sits near the mean (:func:`~sparsegcn.batch.balanced_order`) under the
budget of the largest batch it packs (:func:`~sparsegcn.batch.fit_budget`).
On the CPU GIN is arithmetic-bound, so padded rows are wasted compute.

For each dataset (``tu:MUTAG`` under ``--root``; the synthetic PROTEINS-like
set of ``benchmarks/peers/graph_data.py``, 1,113 graphs, as
``peers/graph_compare.py`` builds it) and each member count (``--members``:
1 is the plain program, more a ``vmap`` of seeds, as ``graph_compare``'s
rows), both packings run the trainer's one-epoch program
(``graph_compare.ours_epoch``: Xu et al.'s GIN-0, 5 layers, hidden 64,
batch 32, dropout 0.5, Adam 0.01, training only; every call is the
program's epoch 0, so it steps through the first packing's batches in a
fresh order), compiled apart (``compile_s``), then timed in interleaved
rounds (``--rounds``; each sample is ``--epochs`` chained epoch calls,
waited for with ``block_until_ready``): median epoch time, training
graphs/s (every member's graphs), node and edge fill (real rows of the
computed steps over all their rows), the budget, steps per epoch, and
balanced's graphs/s over random's.

Usage::

    python benchmarks/graph_packing.py --root DIR \\
        --out benchmarks/results/graph-packing-epochs.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "peers")]

from graph_compare import mutag_arrays, ours_epoch, tu_root  # noqa: E402
from graph_data import size_stats, synthetic_tu  # noqa: E402
from sage_products_epoch import machine  # noqa: E402
from typed_sampler_dedup_vs_tree import git_commit, load_note  # noqa: E402

from sparsegcn.datasets import data_location  # noqa: E402
from sparsegcn.files import check_outputs, write_json_atomic  # noqa: E402

PACKINGS = ("random", "balanced")


def _dataset(name: str, root) -> tuple[dict, str]:
    if name == "synthetic":
        return synthetic_tu(), "synthetic PROTEINS-like (1113 graphs, graph_data.synthetic_tu)"
    if name == "mutag":
        found = tu_root(root)
        if found is None:
            raise SystemExit(f"tu/MUTAG not found under {root!r} (--root)")
        return mutag_arrays(found), "tu:MUTAG (188 graphs)"
    raise SystemExit(f"unknown dataset {name!r}: synthetic or mutag")


def measure(arrays: dict, members: int, rounds: int, epochs: int, settings: dict) -> dict:
    """Both packings of one dataset and member count: compile, then interleaved rounds."""
    runs: dict = {}
    programs = {}
    for packing in PACKINGS:
        fn, args, info = ours_epoch(arrays, members=members, packing=packing, **settings)
        tick = time.perf_counter()
        compiled = jax.jit(fn).lower(*args).compile()
        compile_s = time.perf_counter() - tick
        state, rest = args[0], args[1:]
        state, _ = jax.block_until_ready(compiled(state, *rest))  # first call apart
        programs[packing] = [compiled, state, rest]
        runs[packing] = {**info, "compile_s": compile_s, "epoch_s_all": []}
    load_before = os.getloadavg()[0]
    for _ in range(rounds):
        for packing in PACKINGS:
            compiled, state, rest = programs[packing]
            tick = time.perf_counter()
            for _ in range(epochs):
                state, out = compiled(state, *rest)
            jax.block_until_ready((state, out))
            runs[packing]["epoch_s_all"].append((time.perf_counter() - tick) / epochs)
            programs[packing][1] = state
    load_after = os.getloadavg()[0]
    for packing in PACKINGS:
        run = runs[packing]
        run["epoch_ms_median"] = 1e3 * float(np.median(run["epoch_s_all"]))
        run["graphs_per_s"] = run["graphs"] / (run["epoch_ms_median"] / 1e3)
    return {
        "members": members,
        "runs": runs,
        "balanced_over_random_graphs_per_s": runs["balanced"]["graphs_per_s"]
        / runs["random"]["graphs_per_s"],
        "load_average_1m_before": load_before,
        "load_average_1m_after": load_after,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="data root holding tu/MUTAG")
    parser.add_argument("--datasets", default="mutag,synthetic")
    parser.add_argument("--members", default="1,10", help="comma-separated member counts")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=3, help="epoch calls per timed sample")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    found = tu_root(args.root) if "mutag" in args.datasets.split(",") else None
    inputs = [("MUTAG", data_location("tu:MUTAG", found))] if found is not None else []
    try:
        check_outputs({"--out": args.out}, inputs)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    settings = dict(hidden=64, num_layers=5, dropout=0.5, lr=0.01, batch_size=32)
    results: dict = {
        "benchmark": "graph_packing",
        "commit": git_commit(),
        "machine": machine(),
        "settings": {
            **settings,
            "model": "gin (GIN-0, Xu et al.)",
            "rounds": args.rounds,
            "epochs_per_sample": args.epochs,
            "timing": "one compiled epoch a call (training only, no evaluation), chained; "
            "packings interleaved round by round; medians; compile apart",
        },
        "datasets": [],
    }
    for name in args.datasets.split(","):
        arrays, label = _dataset(name, args.root)
        entry = {"dataset": label, "shape": size_stats(arrays), "cases": []}
        for members in (int(m) for m in args.members.split(",")):
            case = measure(arrays, members, args.rounds, args.epochs, settings)
            entry["cases"].append(case)
            print(
                name,
                members,
                {
                    p: (
                        round(case["runs"][p]["graphs_per_s"]),
                        round(case["runs"][p]["node_fill"], 3),
                        case["runs"][p]["budget"],
                    )
                    for p in PACKINGS
                },
                f"ratio {case['balanced_over_random_graphs_per_s']:.3f}",
                flush=True,
            )
        results["datasets"].append(entry)
    results["machine"]["load_average_1m_at_end"] = os.getloadavg()[0]
    loads = [
        results["machine"]["load_average_1m_at_start"],
        results["machine"]["load_average_1m_at_end"],
    ]
    loads += [
        c[k]
        for d in results["datasets"]
        for c in d["cases"]
        for k in ("load_average_1m_before", "load_average_1m_after")
    ]
    results["note"] = load_note(loads)
    if args.out:
        write_json_atomic(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

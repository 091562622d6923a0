"""One GIN-virtual epoch on the full-size ``synthetic:molpcba`` (issue 23's scale check).

OGB's GIN-virtual baseline (5 GINE layers, hidden 300, batch norm, dropout
0.5, mean readout, a virtual node) trains on the official split's training
graphs in one compiled epoch, then scores the validation and test graphs
on the device (average precision over 128 tasks). Reported: dataset load
time, compile time apart, the epoch's wall time (the training steps and
the scoring of every validation and test graph), training graphs per second, how many times the epoch program was traced, and the
process's peak RSS.

``--train-graphs K`` trains on the first ``K`` training graphs only (the
same budget and program, a shorter scan) and projects the whole epoch from
the measured steps; the JSON says which was run.

Usage::

    python benchmarks/graph_scale.py --json benchmarks/results/molpcba-gin-virtual-epoch.json
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time

import jax
import numpy as np


def peak_rss_gb() -> float:
    """This process's peak resident set size, in GB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic:molpcba")
    parser.add_argument("--hidden", type=int, default=300)
    parser.add_argument("--layers", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--train-graphs", type=int, default=0, help="0: every training graph")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from sparsegcn.datasets import data_location
    from sparsegcn.files import check_outputs, write_atomic

    try:
        check_outputs({"--json": args.json}, [(args.dataset, data_location(args.dataset))])
    except (OSError, ValueError) as err:
        parser.error(str(err))

    from sparsegcn.batch import choose_budget
    from sparsegcn.datasets.graphs import load_graphs
    from sparsegcn.nn.graph_gin import build_graph_model
    from sparsegcn.train.graphs import GraphTrainConfig, Splits, fit_graphs, official_splits

    start = time.perf_counter()
    dataset = load_graphs(args.dataset, None)
    load_s = time.perf_counter() - start
    rss_loaded = peak_rss_gb()
    splits = official_splits(dataset)
    train_all = int(splits.train.sum())
    if args.train_graphs:
        keep = np.flatnonzero(splits.train[0])[: args.train_graphs]
        train = np.zeros_like(splits.train)
        train[0, keep] = True
        splits = Splits(train, splits.valid, splits.test, splits.fold)
    model = build_graph_model(
        dataset,
        hidden=args.hidden,
        num_layers=args.layers,
        dropout_rate=0.5,
        learn_eps=True,
        readout_reduce="mean",
        virtual_node=True,
        style="ogb",
    )
    config = GraphTrainConfig(
        epochs=1, learning_rate=0.001, halve_every=0, batch_size=args.batch_size, packings=1
    )
    budget = choose_budget(dataset.nodes_per_graph(), dataset.edges_per_graph(), args.batch_size)
    start = time.perf_counter()
    result = fit_graphs(model, dataset, config, splits, seeds=(0,), budget=budget)
    wall_s = time.perf_counter() - start
    trained = int(splits.train.sum())
    report = {
        "what": "one GIN-virtual epoch (OGB's mol baseline) on the official split",
        "dataset": dataset.name,
        "num_graphs": dataset.num_graphs,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "num_tasks": dataset.num_classes,
        "model": {"hidden": args.hidden, "layers": args.layers, "virtual_node": True},
        "batch_size": args.batch_size,
        "budget": {"nodes": budget.nodes, "edges": budget.edges, "graphs": budget.graphs},
        "train_graphs": trained,
        "train_graphs_in_split": train_all,
        "full_epoch": trained == train_all,
        "steps": result.batches_per_epoch,
        "load_s": load_s,
        "compile_s": result.compile_s,
        "epoch_s": result.train_s,
        "fit_wall_s": wall_s,
        "train_graphs_per_s": result.train_graphs_per_s,
        # epoch_s holds the steps and the scoring of every validation and test graph;
        # scaling both by the training graphs over-projects a partial run (an upper bound).
        "projected_epoch_s_upper": result.train_s * train_all / max(trained, 1),
        "compiles": result.compiles,
        "metric": result.metric,
        "val_metric": float(result.val_metric[0]),
        "test_metric": float(result.test_metric[0]),
        "peak_rss_gb_after_load": rss_loaded,
        "peak_rss_gb": peak_rss_gb(),
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/graph_scale.py " + " ".join(sys.argv[1:]),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        write_atomic(args.json, lambda f: f.write((text + "\n").encode()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

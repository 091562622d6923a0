"""One process of the two-process test in tests/test_distributed.py.

    python tests/distributed_worker.py --coordinator 127.0.0.1:PORT \\
        --num-processes 2 --process-id I --out params-I.npz

Joins the run, trains GraphSAGE data parallel and GCN edge-sharded for a
few epochs on a mesh of one device per process (with ``--tasks``: GIN on a
graph-level task and GAE on a link task, full batch and sampled), and writes
the final params and curves (atomically) to ``--out``. :func:`train` is also what the
test runs in a single process on the same number of devices, as the oracle.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def train(devices) -> dict[str, np.ndarray]:
    """Trains both models on ``devices`` (count or mesh); returns their params by name."""
    import jax
    from helpers import two_communities

    import sparsegcn as sg
    from sparsegcn.parallel import fit_data_parallel, fit_edge_sharded
    from sparsegcn.train import MinibatchConfig, TrainConfig, minibatch_data

    node_data = two_communities()
    config = TrainConfig(epochs=3, patience=None, timing_steps=0)
    sage = fit_data_parallel(
        sg.sage(8, 2, hidden=8),
        minibatch_data(node_data),
        config,
        MinibatchConfig((4, 3), 16),
        devices=devices,
        seeds=[0, 1],
    )
    gcn = fit_edge_sharded(
        sg.gcn(8, 2, hidden=8),
        node_data._replace(graph=sg.gcn_norm(node_data.graph)),
        config,
        devices=devices,
        seeds=[0, 1],
    )
    out = {}
    for name, result in (("sage", sage), ("gcn", gcn)):
        for path, leaf in jax.tree_util.tree_leaves_with_path(result.state.params):
            out[name + jax.tree_util.keystr(path)] = np.asarray(leaf)
        out[f"{name}/loss"] = result.history["loss"]
    return out


def train_tasks(devices) -> dict[str, np.ndarray]:
    """The graph-level and link trainers on ``devices``: their curves and final params."""
    import jax
    from graph_sets import random_graphs
    from link_graphs import communities, data_of

    from sparsegcn.batch import Budget
    from sparsegcn.nn.graph_gin import graph_gin
    from sparsegcn.nn.registry import create_model
    from sparsegcn.sampling.links import random_link_split
    from sparsegcn.train.graphs import GraphTrainConfig, fit_graphs, fold_splits
    from sparsegcn.train.links import (
        LinkTrainConfig,
        fit_links,
        fit_links_sampled,
        sampled_link_data,
    )

    graphs = random_graphs(count=24, seed=1)
    gin = graph_gin(3, 2, hidden=8, num_layers=3, dropout_rate=0.0)
    graph_fit = fit_graphs(
        gin,
        graphs,
        GraphTrainConfig(epochs=2, batch_size=6, packings=2),
        fold_splits(graphs.labels, 3, seed=0),
        seeds=(0,),
        budget=Budget(25, 64, 4),
        devices=devices,
    )
    graph, x = communities(n=24, seed=1)
    gae = create_model("gae", 4, 4, hidden=8, layers=2, dropout=0.0)
    link_fit = fit_links(
        gae, data_of(graph, x, 0), LinkTrainConfig(epochs=3), seeds=(0, 1), devices=devices
    )
    split = random_link_split(graph, val=0.1, test=0.2, seed=0)
    sage_gae = create_model(
        "gae", 4, 4, hidden=8, layers=2, dropout=0.0, encoder="sage", recon="sampled"
    )
    sampled_fit = fit_links_sampled(
        sage_gae,
        sampled_link_data(split.graph, x, split.split["train"]),
        data_of(graph, x, 0),
        LinkTrainConfig(epochs=2),
        fanouts=(4, 3),
        batch_size=16,
        seeds=(0,),
        devices=devices,
    )
    out = {
        "graph/train_loss": graph_fit.curves.train_loss,
        "graph/test_metric": graph_fit.curves.test_metric,
        "link/loss": link_fit.losses,
        "link/test_auc": link_fit.test["auc"],
        "sampled_link/loss": sampled_fit.losses,
        "sampled_link/test_auc": sampled_fit.test["auc"],
    }
    for name, params in (("graph", graph_fit.state.params), ("link", link_fit.params)):
        for path, leaf in jax.tree_util.tree_leaves_with_path(params):
            out[name + jax.tree_util.keystr(path)] = np.asarray(leaf)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--tasks", action="store_true", help="train the graph and link models instead"
    )
    args = parser.parse_args()
    from sparsegcn import parallel
    from sparsegcn.files import write_atomic

    parallel.initialize(args.coordinator, args.num_processes, args.process_id, timeout_s=60)
    try:
        params = train_tasks(1) if args.tasks else train(1)
        write_atomic(args.out, lambda f: np.savez(f, **params))
    finally:
        parallel.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

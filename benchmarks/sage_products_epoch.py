"""One GraphSAGE training epoch on the ogbn-products-sized synthetic graph.

Measures, in one run on one machine:

- the wall time of one training epoch (one compiled ``lax.scan`` over every
  mini-batch: sampling, forward, backward, Adam), after compilation;
- compile time, reported apart;
- sampler throughput alone, in sampled edges per second (median of 3 runs);
- optionally (``--eval``) layer-wise full-neighbourhood inference over all
  nodes, in node chunks, with the resulting accuracies;
- peak memory: the process's ``ru_maxrss`` and, where the device reports
  them, its memory statistics;
- where PyG's sampler (``torch_geometric`` with ``pyg-lib`` or
  ``torch-sparse``) imports, its host-side throughput on the same graph.

The dataset is generated (or read from its cache) in a child process first,
so the peak memory measured here is that of training on the memory-mapped
cache, not of generating it. Delete the cache under ``--root`` afterwards.

Usage::

    python benchmarks/sage_products_epoch.py --root DIR \\
        --out benchmarks/results/sage_products_epoch.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings

import jax
import numpy as np

import sparsegcn as sg
from sparsegcn.allocator import keep_freed_memory_unless_disabled
from sparsegcn.datasets import data_location, load
from sparsegcn.files import check_outputs, write_json_atomic
from sparsegcn.sampling import check_fanouts, tree_sizes
from sparsegcn.train import NodeData, TrainConfig, index_mask, init_state, make_optimizer
from sparsegcn.train.fullbatch import evaluate
from sparsegcn.train.minibatch import (
    effective_batch_size,
    make_grad_fn,
    make_sampler_fn,
    minibatch_data,
    steps_per_epoch,
    train_epoch,
)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def machine() -> dict:
    total = None
    try:
        with open("/proc/meminfo") as f:
            total = int(next(line for line in f if line.startswith("MemTotal")).split()[1]) * 1024
    except (OSError, StopIteration, ValueError):
        pass
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": total,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device": jax.devices()[0].device_kind,
        "load_average_1m_at_start": os.getloadavg()[0],
    }


def timed(fn, *args):
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - start


def pyg_sampler_throughput(dataset, fanouts, batch_size, num_batches, seed=0) -> dict:
    """PyG's host sampler on the same CSR, if it can be imported."""
    try:
        import torch
        from torch_geometric.data import Data
        from torch_geometric.sampler import NeighborSampler, NodeSamplerInput
    except ImportError as err:
        return {"available": False, "reason": f"import failed: {err}"}
    backends = [name for name in ("pyg_lib", "torch_sparse") if importlib.util.find_spec(name)]
    if not backends:
        return {
            "available": False,
            "reason": "torch_geometric imports, but its sampler needs pyg-lib or torch-sparse, "
            "and neither is installed",
        }
    g = dataset.graph
    edge_index = torch.from_numpy(np.stack([g.senders, g.receivers]).astype(np.int64))
    data = Data(edge_index=edge_index, num_nodes=g.num_nodes)
    rng = np.random.default_rng(seed)
    train = rng.permutation(dataset.split["train"])
    edges, start = 0, time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyG warns before failing without pyg-lib
            sampler = NeighborSampler(data, num_neighbors=list(fanouts))
            for i in range(num_batches):
                seeds = torch.from_numpy(train[i * batch_size : (i + 1) * batch_size])
                out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
                edges += int(out.row.numel())
    except ImportError as err:
        return {"available": False, "reason": f"no sampling backend: {err}"}
    seconds = time.perf_counter() - start
    return {
        "available": True,
        "sampled_edges": edges,
        "seconds": seconds,
        "edges_per_s": edges / seconds,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="data root for the synthetic cache")
    parser.add_argument("--dataset", default="synthetic:products")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--sampler-batches", type=int, default=50)
    parser.add_argument("--eval", action="store_true", help="also time layer-wise inference")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    try:
        check_outputs({"--out": args.out}, [(args.dataset, data_location(args.dataset, args.root))])
    except (OSError, ValueError) as err:
        parser.error(str(err))
    keep_freed_memory_unless_disabled()  # as the sparsegcn command does
    fanouts = check_fanouts(args.fanouts)
    results: dict = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": machine(),
    }

    # Generate (or verify the cache) in a child process, so its peak is not ours.
    tick = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sparsegcn.datasets import load; "
            "load(sys.argv[1], sys.argv[2], scale=float(sys.argv[3]))",
            args.dataset,
            args.root,
            str(args.scale),
        ],
        check=True,
    )
    results["prepare_dataset_s"] = time.perf_counter() - tick
    tick = time.perf_counter()
    dataset = load(args.dataset, args.root, scale=args.scale)
    n = dataset.num_nodes
    data = minibatch_data(
        NodeData(
            graph=dataset.graph,
            features=sg.as_features(dataset.features, n),
            labels=np.maximum(dataset.labels, 0).astype(np.int32),
            train_mask=index_mask(dataset.split["train"], n),
            val_mask=index_mask(dataset.split["valid"], n),
            test_mask=index_mask(dataset.split["test"], n),
        )
    )
    results["build_minibatch_data_s"] = time.perf_counter() - tick
    results["graph"] = {
        "dataset": dataset.name,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "num_stored_edges": dataset.graph.num_edges,
        "num_features": dataset.num_features,
        "num_classes": dataset.num_classes,
        "num_train": int(data.train_nodes.shape[0]),
        "eval_chunk_size": data.graph.chunk_size,
        "eval_num_chunks": data.graph.num_chunks,
        "eval_max_chunk_edges": data.graph.max_chunk_edges,
    }
    results["peak_rss_bytes_after_load"] = peak_rss_bytes()

    tick = time.perf_counter()
    data = jax.device_put(data)
    jax.block_until_ready(data)
    results["device_put_s"] = time.perf_counter() - tick

    num_train = int(data.train_nodes.shape[0])
    batch_size = effective_batch_size(num_train, args.batch_size)
    steps = steps_per_epoch(num_train, batch_size)
    model = sg.sage(
        dataset.num_features,
        dataset.num_classes,
        hidden=args.hidden,
        num_layers=len(fanouts),
        dropout_rate=args.dropout,
    )
    config = TrainConfig(learning_rate=args.lr, weight_decay=0.0, decay_layers="none")
    tx = make_optimizer(config)
    state = jax.jit(lambda k: init_state(model, tx, k))(jax.random.key(0))
    grad_fn = make_grad_fn(model, fanouts)
    results["settings"] = {
        "fanouts": list(fanouts),
        "batch_size": batch_size,
        "steps_per_epoch": steps,
        "hidden": args.hidden,
        "layers": len(fanouts),
        "dropout": args.dropout,
        "lr": args.lr,
        "tree_entries_per_batch": tree_sizes(batch_size, fanouts),
    }

    def epoch(params, opt_state, data, key):
        return train_epoch(grad_fn, tx, batch_size, params, opt_state, data, key)

    tick = time.perf_counter()
    epoch_fn = jax.jit(epoch).lower(state.params, state.opt_state, data, state.key).compile()
    results["compile_epoch_s"] = time.perf_counter() - tick
    (params, _, losses, _), epoch_s = timed(
        epoch_fn, state.params, state.opt_state, data, state.key
    )
    losses = np.asarray(losses)
    results["epoch"] = {
        "wall_s": epoch_s,
        "steps": steps,
        "ms_per_step": 1e3 * epoch_s / steps,
        "seeds_per_s": num_train / epoch_s,
        "loss_first_batch": float(losses[0]),
        "loss_last_batch": float(losses[-1]),
        "loss_finite": bool(np.isfinite(losses).all()),
    }
    results["peak_rss_bytes_after_epoch"] = peak_rss_bytes()
    print(json.dumps(results["epoch"], indent=1), flush=True)

    num_batches = min(args.sampler_batches, steps)
    tick = time.perf_counter()
    sampler = jax.jit(make_sampler_fn(fanouts, batch_size, num_batches))
    sampler = sampler.lower(data, state.key).compile()
    results["compile_sampler_s"] = time.perf_counter() - tick
    jax.block_until_ready(sampler(data, state.key))
    runs = [timed(sampler, data, jax.random.key(i)) for i in range(3)]
    seconds = [t for _, t in runs]
    edges = [int(out[0]) for out, _ in runs]
    results["sampler"] = {
        "batches": num_batches,
        "sampled_edges_per_run": edges,
        "seconds": seconds,
        "edges_per_s_median": float(np.median(np.asarray(edges) / np.asarray(seconds))),
    }
    print(json.dumps(results["sampler"], indent=1), flush=True)

    if args.eval:
        tick = time.perf_counter()
        eval_fn = jax.jit(lambda p, d: evaluate(model, p, d)).lower(params, data).compile()
        results["compile_eval_s"] = time.perf_counter() - tick
        metrics, eval_s = timed(eval_fn, params, data)
        results["eval"] = {"wall_s": eval_s, **{k: float(v) for k, v in metrics.items()}}
        results["peak_rss_bytes_after_eval"] = peak_rss_bytes()
        print(json.dumps(results["eval"], indent=1), flush=True)

    results["pyg"] = pyg_sampler_throughput(dataset, fanouts, batch_size, num_batches)
    results["peak_rss_bytes"] = peak_rss_bytes()
    stats = jax.devices()[0].memory_stats()
    results["device_memory_stats"] = (
        {k: int(v) for k, v in stats.items()} if stats else "not reported by this backend"
    )
    print(json.dumps({k: v for k, v in results.items() if "peak" in k or k == "pyg"}, indent=1))
    if args.out:
        write_json_atomic(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

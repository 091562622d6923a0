"""GraphSAGE epochs with the features on the device, in host RAM, and memory-mapped.

One run, one machine, the same batches and keys for the three placements
(:mod:`sparsegcn.sampling.feature_store`):

- ``device``: the compiled ``lax.scan`` epoch (:func:`sparsegcn.train.train_epoch`);
- ``host`` / ``mmap``: :func:`sparsegcn.train.train_epoch_streamed`: sampling
  on the device, each batch's distinct rows gathered on the host by threads
  and copied while the previous step runs.

Each placement runs one untimed epoch (compilation) then ``--epochs`` timed
ones; the epoch is the first ``--batches`` batches of the train set (the
first ``batches * B`` train nodes), so a run stays short on a CPU. Also
measured: the host gather alone (rows/s, GB/s) on the distinct rows of real
batches, for 1, 2 and 4 threads; and whether the three placements end with
identical parameters. The memory-mapped file is read through the page
cache as the system left it (no cache dropping: the machine is shared).

Usage::

    python benchmarks/feature_store.py --root DIR \\
        --out benchmarks/results/feature-store.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import sys
import time

import jax
import numpy as np

import sparsegcn as sg
from sparsegcn.datasets import data_location, load
from sparsegcn.files import check_outputs, write_json_atomic
from sparsegcn.sampling import check_fanouts, sample_blocks
from sparsegcn.sampling.feature_store import (
    HostFeatureStore,
    gather_rows,
    local_rows_bound,
    localize,
)
from sparsegcn.train import NodeData, TrainConfig, index_mask, make_optimizer
from sparsegcn.train.minibatch import Batch, make_batches, make_grad_fn, minibatch_data, train_epoch
from sparsegcn.train.streamed import make_streamed_fns, train_epoch_streamed


def machine() -> dict:
    import numpy

    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpy": numpy.__version__,
        "backend": jax.default_backend(),
        "device": jax.devices()[0].device_kind,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="data root of the synthetic cache")
    parser.add_argument("--dataset", default="synthetic:products")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batches", type=int, default=8, help="batches per timed epoch")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per placement")
    parser.add_argument("--threads", type=int, default=None, help="gather threads")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    try:
        check_outputs({"--out": args.out}, [(args.dataset, data_location(args.dataset, args.root))])
    except (OSError, ValueError) as err:
        parser.error(str(err))
    fanouts = check_fanouts(args.fanouts)
    results: dict = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": machine(),
        "load_average_at_start": os.getloadavg(),
        "note": "CPU machine shared with other agents: timings are loaded",
    }
    dataset = load(args.dataset, args.root, scale=args.scale)
    n = dataset.num_nodes
    on_disk = dataset.features
    if not isinstance(on_disk, np.memmap):
        raise SystemExit(f"{args.dataset} features are not memory-mapped; use a cached dataset")
    in_ram = np.ascontiguousarray(on_disk, np.float32)
    data = minibatch_data(
        NodeData(
            graph=dataset.graph,
            features=sg.as_features(in_ram, n),
            labels=np.maximum(dataset.labels, 0).astype(np.int32),
            train_mask=index_mask(dataset.split["train"], n),
            val_mask=index_mask(dataset.split["valid"], n),
            test_mask=index_mask(dataset.split["test"], n),
        )
    )
    b = args.batch_size
    data = data._replace(train_nodes=np.asarray(data.train_nodes)[: args.batches * b])
    rows = local_rows_bound(fanouts, b, n)
    results["graph"] = {
        "dataset": dataset.name,
        "num_nodes": n,
        "num_stored_edges": dataset.graph.num_edges,
        "num_features": dataset.num_features,
        "features_bytes": int(in_ram.nbytes),
        "batch_size": b,
        "fanouts": list(fanouts),
        "hidden": args.hidden,
        "batches_per_epoch": args.batches,
        "local_rows_bound": rows,
        # The streamed path always gathers the tree's rows before the first
        # projection; the device path does when N exceeds the tree (T =
        # rows - 1 when T < N). Only then are the two bit-identical (same
        # dropout masks); otherwise they train equally but differently.
        "device_gathers_first": n > rows - 1,
    }
    model = sg.sage(
        dataset.num_features, dataset.num_classes, hidden=args.hidden, num_layers=len(fanouts)
    )
    tx = make_optimizer(TrainConfig(learning_rate=0.003))
    params0 = model.init(jax.random.key(0))
    opt0 = tx.init(params0)
    keys = jax.random.split(jax.random.key(1), args.epochs + 1)
    device_data = jax.device_put(data)
    streamed_data = jax.device_put(data._replace(features=None))
    jax.block_until_ready((device_data, streamed_data))

    epoch = jax.jit(lambda p, o, d, k: train_epoch(make_grad_fn(model, fanouts), tx, b, p, o, d, k))
    fns = make_streamed_fns(model, tx, fanouts, rows)
    final = {}
    for where in ("device", "host", "mmap"):
        store = None
        if where != "device":
            store = HostFeatureStore(
                in_ram if where == "host" else on_disk, rows, threads=args.threads
            )
        params, opt_state, seconds = params0, opt0, []
        for i, key in enumerate(keys):
            tick = time.perf_counter()
            if store is None:
                params, opt_state, losses, _ = epoch(params, opt_state, device_data, key)
            else:
                params, opt_state, losses, _ = train_epoch_streamed(
                    fns, store, b, params, opt_state, streamed_data, key
                )
            jax.block_until_ready((params, losses))
            seconds.append(time.perf_counter() - tick)
            if i == 0 and store is not None:
                store.stats = type(store.stats)()  # time the warm epochs only
        timed = float(np.median(seconds[1:]))
        entry = {
            "first_epoch_s_with_compile": seconds[0],
            "epoch_s": seconds[1:],
            "epoch_s_median": timed,
            "step_ms_median_of_epoch": 1e3 * timed / args.batches,
            "batches_per_s": args.batches / timed,
            "last_loss": float(np.asarray(losses)[-1]),
        }
        if store is not None:
            stats = store.stats
            entry.update(
                gather_rows_per_batch=stats.rows / stats.batches,
                gather_rows_per_s=stats.rows_per_s,
                gather_gb_per_s=stats.gb_per_s,
                gather_s_share_of_epoch=stats.seconds / sum(seconds[1:]),
                gather_threads=store.pool._max_workers,
            )
            store.close()
        results[where] = entry
        final[where] = params
        print(where, json.dumps(entry), flush=True)
    results["same_params_as_device"] = {
        where: all(
            np.array_equal(a, c)
            for a, c in zip(
                jax.tree.leaves(final[where]), jax.tree.leaves(final["device"]), strict=True
            )
        )
        for where in ("host", "mmap")
    }

    # The gather alone, on the distinct rows of real batches.
    batches = make_batches(keys[0], device_data.train_nodes, b)
    ids = []
    for i, key in enumerate(jax.random.split(keys[0], min(args.batches, 4))):
        local = fns.sample(
            streamed_data.graph.indptr,
            streamed_data.graph.indices,
            Batch(batches.nodes[i], batches.weights[i]),
            jax.random.key_data(key),
        )
        ids.append(np.asarray(local.rows)[: int(local.num_distinct)])
    out = np.empty((rows, dataset.num_features), np.float32)
    gather = {}
    for where, source in (("host", in_ram), ("mmap", on_disk)):
        for threads in (1, 2, 4):
            with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                times = []
                for _ in range(3):
                    tick = time.perf_counter()
                    for chunk in ids:
                        gather_rows(source, chunk, out, pool=pool if threads > 1 else None)
                    times.append(time.perf_counter() - tick)
            t = float(np.median(times))
            count = sum(c.size for c in ids)
            gather[f"{where}_threads{threads}"] = {
                "rows_per_s": count / t,
                "gb_per_s": count * dataset.num_features * 4 / t / 1e9,
            }
    results["gather_only"] = gather

    # Where a streamed batch's time goes besides the step: the tree alone,
    # its renumbering (localize) alone, and the copy of one buffer.
    sample_fn = jax.jit(
        lambda g, batch, key: sample_blocks(
            g.indptr, g.indices, batch.nodes, fanouts, key=key, mask=batch.mask
        )
    )
    localize_fn = jax.jit(localize, static_argnums=1)
    parts: dict = {"sample_ms": [], "localize_ms": [], "device_put_ms": []}
    for i, key in enumerate(jax.random.split(keys[0], min(args.batches, 4))):
        batch = Batch(batches.nodes[i], batches.weights[i])
        tree = jax.block_until_ready(sample_fn(streamed_data.graph, batch, key))
        jax.block_until_ready(localize_fn(tree, rows))
        tick = time.perf_counter()
        tree = jax.block_until_ready(sample_fn(streamed_data.graph, batch, key))
        parts["sample_ms"].append(1e3 * (time.perf_counter() - tick))
        tick = time.perf_counter()
        jax.block_until_ready(localize_fn(tree, rows))
        parts["localize_ms"].append(1e3 * (time.perf_counter() - tick))
        tick = time.perf_counter()
        jax.device_put(np.array(out)).block_until_ready()
        parts["device_put_ms"].append(1e3 * (time.perf_counter() - tick))
    results["per_batch_parts_ms_median"] = {k: float(np.median(v)) for k, v in parts.items()}
    results["gather_only_rows_per_batch"] = [int(c.size) for c in ids]
    results["load_average_at_end"] = os.getloadavg()
    summary = ("same_params_as_device", "gather_only", "per_batch_parts_ms_median")
    print(json.dumps({k: results[k] for k in summary}, indent=1))
    if args.out:
        write_json_atomic(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Tree versus de-duplicated neighbour sampling, side by side in one run.

On the ogbn-products-sized synthetic graph, GraphSAGE (3 layers, fanouts
15,10,5, 1024 seeds per batch), for each sampler:

- rows per batch: the tree's entries (all gathered) against the dedup
  sampler's distinct nodes (real rows) and its padded rows (what the static
  gather reads), over every batch of one epoch;
- the caps of the capped dedup sampler: per hop, the largest number of new
  nodes seen over ``--cap-batches`` batches of another epoch, times
  ``--cap-margin``, rounded up to a multiple of 256; and the number of nodes
  that overflowed them over the measured epoch (the sampler's counter);
- step time: one optimizer step (sampling included) of tree, capped dedup
  and uncapped dedup, interleaved over ``--step-rounds`` rounds (median),
  compile time apart;
- unless ``--no-epoch``: one training epoch (one compiled ``lax.scan``) of
  tree and capped dedup, timed after compilation, and the validation and
  test accuracy after it (layer-wise full-neighbour inference, the same for
  every sampler).

Every sampler trains from the same initial params, on the same batches and
with the same keys.

Usage::

    python benchmarks/sampler_dedup_vs_tree.py --root DIR --scale 1.0 \\
        --out benchmarks/results/sampler-dedup-vs-tree.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from sage_products_epoch import machine, timed

import sparsegcn as sg
from sparsegcn.allocator import keep_freed_memory_unless_disabled
from sparsegcn.datasets import data_location, load
from sparsegcn.files import check_outputs, write_json_atomic
from sparsegcn.sampling import check_fanouts, dedup_sizes, sample_dedup, tree_sizes
from sparsegcn.train import NodeData, TrainConfig, index_mask, init_state, make_optimizer
from sparsegcn.train.fullbatch import evaluate
from sparsegcn.train.minibatch import (
    effective_batch_size,
    first_batch,
    make_batches,
    make_grad_fn,
    make_step_fn,
    minibatch_data,
    steps_per_epoch,
    train_epoch,
)


def frontier_counts(fanouts, batch_size, data, key, num_batches, caps=None):
    """Per batch of the epoch ``key`` draws (the training epoch's own samples):
    real rows per frontier ``[S, L + 1]`` and overflow per hop ``[S, L]``."""

    def run(data, key):
        perm_key, steps_key = jax.random.split(key)
        batches = make_batches(perm_key, data.train_nodes, batch_size)
        batches = jax.tree.map(lambda a: a[:num_batches], batches)
        keys = jax.random.split(steps_key, batches.nodes.shape[0])[:num_batches]

        def step(_, inputs):
            batch, step_key = inputs
            sample_key, _ = jax.random.split(step_key)  # as make_grad_fn splits it
            s = sample_dedup(
                data.graph.indptr,
                data.graph.indices,
                batch.nodes,
                fanouts,
                key=sample_key,
                mask=batch.mask,
                caps=caps,
            )
            counts = jnp.stack([jnp.sum(m, dtype=jnp.int32) for m in s.masks])
            return None, (counts, s.overflow)

        return jax.lax.scan(step, None, (batches, keys))[1]

    counts, overflow = jax.jit(run)(data, key)
    return np.asarray(counts), np.asarray(overflow)


def probe_caps(fanouts, batch_size, data, key, batches: int, margin: float) -> list[int]:
    """Per-hop caps of the capped dedup sampler: the largest number of new nodes
    over ``batches`` batches of the epoch ``key`` draws, times ``margin``, rounded
    up to a multiple of 256 and at most the uncapped frontier size."""
    probe, _ = frontier_counts(fanouts, batch_size, data, key, batches)
    largest = probe[:, 1:].max(axis=0)
    caps = [int(-(-int(c * margin) // 256) * 256) for c in largest]
    bounds = dedup_sizes(batch_size, fanouts, num_nodes=data.graph.indptr.shape[0] - 1)[1:]
    return [min(c, s) for c, s in zip(caps, bounds, strict=True)]


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
    parser.add_argument("--cap-batches", type=int, default=20)
    parser.add_argument("--cap-margin", type=float, default=1.05)
    parser.add_argument("--step-rounds", type=int, default=5, help="timed steps per sampler")
    parser.add_argument(
        "--epoch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also train one epoch per sampler and evaluate it (--no-epoch: step times only)",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    try:
        check_outputs({"--out": args.out}, [(args.dataset, data_location(args.dataset, args.root))])
    except (OSError, ValueError) as err:
        parser.error(str(err))
    keep_freed_memory_unless_disabled()
    fanouts = check_fanouts(args.fanouts)
    results: dict = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": machine(),
    }
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
    data = jax.device_put(data)
    num_train = int(data.train_nodes.shape[0])
    batch_size = effective_batch_size(num_train, args.batch_size)
    steps = steps_per_epoch(num_train, batch_size)
    results["graph"] = {
        "dataset": dataset.name,
        "scale": args.scale,
        "num_nodes": n,
        "num_edges": dataset.num_edges,
        "num_features": dataset.num_features,
        "num_train": num_train,
    }
    results["settings"] = {
        "fanouts": list(fanouts),
        "batch_size": batch_size,
        "steps_per_epoch": steps,
        "hidden": args.hidden,
        "dropout": args.dropout,
        "lr": args.lr,
    }
    epoch_key, cap_key = jax.random.key(0), jax.random.key(1)

    # Caps from another epoch's batches, then the measured epoch's own rows.
    caps = probe_caps(fanouts, batch_size, data, cap_key, args.cap_batches, args.cap_margin)
    counts, _ = frontier_counts(fanouts, batch_size, data, epoch_key, steps)
    _, overflow = frontier_counts(fanouts, batch_size, data, epoch_key, steps, caps)
    tree_rows = tree_sizes(batch_size, fanouts)
    capped_sizes = dedup_sizes(batch_size, fanouts, num_nodes=n, caps=caps)
    results["rows_per_batch"] = {
        "tree_rows_per_level": tree_rows,
        "tree_rows": sum(tree_rows),
        "distinct_rows_per_frontier_mean": counts.mean(axis=0).tolist(),
        "distinct_rows_per_frontier_max": counts.max(axis=0).tolist(),
        "distinct_rows_mean": float(counts.sum(axis=1).mean()),
        "distinct_rows_max": int(counts.sum(axis=1).max()),
        "dedup_uncapped_padded_rows": sum(dedup_sizes(batch_size, fanouts, num_nodes=n)),
        "caps_from_probe": caps,
        "caps_probe": {"batches": args.cap_batches, "margin": args.cap_margin},
        "dedup_capped_padded_rows": sum(capped_sizes),
        "dedup_capped_overflow_nodes_epoch": overflow.sum(axis=0).tolist(),
        "dedup_capped_batches_with_overflow": int((overflow.sum(axis=1) > 0).sum()),
        "tree_over_distinct": sum(tree_rows) / float(counts.sum(axis=1).mean()),
    }
    print(results["rows_per_batch"], flush=True)

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
    configs = {
        "tree": ("tree", None),
        "dedup_capped": ("dedup", caps),
        "dedup_uncapped": ("dedup", None),
    }
    runs: dict = {name: {"sampler": sampler, "caps": c} for name, (sampler, c) in configs.items()}

    # Step time: one optimizer step (sampling included) on the epoch's first
    # batch, the samplers interleaved round by round so that the shared
    # machine's load falls on each alike; median per sampler.
    states = jax.tree.map(lambda a: a[None], state)
    batch = first_batch(epoch_key, data.train_nodes, batch_size)
    steppers = {}
    for name, (sampler, c) in configs.items():
        tick = time.perf_counter()
        step = make_step_fn(model, tx, fanouts, sampler=sampler, caps=c)
        steppers[name] = jax.jit(step).lower(states, data, batch).compile()
        runs[name]["compile_step_s"] = time.perf_counter() - tick
        jax.block_until_ready(steppers[name](states, data, batch))
    times: dict = {name: [] for name in configs}
    for _ in range(args.step_rounds):
        for name, compiled in steppers.items():
            times[name].append(timed(compiled, states, data, batch)[1])
    for name in configs:
        runs[name]["step_ms_median"] = 1e3 * float(np.median(times[name]))
        runs[name]["step_ms_all"] = [1e3 * t for t in times[name]]
    results["step_rounds"] = args.step_rounds
    results["step_load_average_1m_after"] = os.getloadavg()[0]
    print({k: v["step_ms_median"] for k, v in runs.items()}, flush=True)

    # One epoch each (tree, capped dedup) from the same params, then evaluation.
    eval_fn = None
    for name in ("tree", "dedup_capped") if args.epoch else ():
        sampler, c = configs[name]
        grad_fn = make_grad_fn(model, fanouts, sampler=sampler, caps=c)

        def epoch(params, opt_state, data, key, grad_fn=grad_fn):
            return train_epoch(grad_fn, tx, batch_size, params, opt_state, data, key)

        tick = time.perf_counter()
        compiled = jax.jit(epoch).lower(state.params, state.opt_state, data, epoch_key).compile()
        compile_s = time.perf_counter() - tick
        load_before = os.getloadavg()[0]
        (params, _, losses, _), wall = timed(
            compiled, state.params, state.opt_state, data, epoch_key
        )
        if eval_fn is None:
            eval_fn = jax.jit(lambda p, d: evaluate(model, p, d)).lower(params, data).compile()
        metrics, eval_s = timed(eval_fn, params, data)
        runs[name]["epoch"] = {
            "compile_epoch_s": compile_s,
            "epoch_wall_s": wall,
            "ms_per_step": 1e3 * wall / steps,
            "load_average_1m_before": load_before,
            "load_average_1m_after": os.getloadavg()[0],
            "loss_first_batch": float(losses[0]),
            "loss_last_batch": float(losses[-1]),
            "eval_wall_s": eval_s,
            **{k: float(v) for k, v in metrics.items()},
        }
        print(name, runs[name]["epoch"], flush=True)
    results["runs"] = runs
    results["step_ratio_tree_over_dedup_capped"] = (
        runs["tree"]["step_ms_median"] / runs["dedup_capped"]["step_ms_median"]
    )
    results["machine"]["load_average_1m_at_end"] = os.getloadavg()[0]
    loads = [results["machine"]["load_average_1m_at_start"], os.getloadavg()[0]]
    cores = os.cpu_count() or 1
    results["note"] = (
        f"load average {min(loads):.1f}-{max(loads):.1f} at start and end on {cores} cores"
        + (
            ": above the core count, other jobs shared the machine and only the "
            "side-by-side ratios mean anything"
            if max(loads) > cores
            else " (the benchmark's own threads count)"
        )
    )
    if args.out:
        write_json_atomic(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

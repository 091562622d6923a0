"""Typed tree against de-duplicated typed sampling for R-GCN, side by side in one run.

On ``synthetic:mag`` (``--scale`` shrinks every count; reverses added as the
hetero task adds them), R-GCN (2 layers, hidden 64, fanouts 25,20, 1,024
papers per batch by default), for each sampler:

- rows per batch: the tree's entries (one per path, all gathered) against
  the dedup sampler's distinct nodes per type (real rows) and its padded
  rows (what the static gather reads), uncapped and capped, over the
  measured batches;
- the caps of the capped dedup sampler: per hop and type, the largest
  number of new nodes seen over ``--cap-batches`` other batches, times
  ``--cap-margin``, rounded up to a multiple of 256; and what overflowed
  them over the measured batches (the sampler's counter);
- training steps per second: the hetero task's compiled epoch
  (:func:`sparsegcn.tasks.hetero.make_epoch`, one ``lax.scan`` of sampled
  Adam steps) over ``--scan-batches`` batches, the samplers interleaved
  round by round over ``--rounds`` rounds (median), compile time apart,
  every call waited for with ``block_until_ready``; every sampler runs on
  the same batches with the same keys, and one params and Adam state (from
  the same initial params) is threaded through all calls, so that at full
  size the embedding tables and their moments are held once;
- unless ``--no-sample-only``: the sampler alone (sample and gather every
  row's inputs), timed the same way.

Usage::

    python benchmarks/typed_sampler_dedup_vs_tree.py --scale 0.1 \\
        --out benchmarks/results/typed-sampler-dedup-vs-tree.json
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sage_products_epoch import machine, timed

from sparsegcn.allocator import keep_freed_memory_unless_disabled
from sparsegcn.files import check_outputs, write_json_atomic
from sparsegcn.nn.rgcn import rgcn
from sparsegcn.sampling.typed import check_typed_fanouts, gather_typed, sample_typed
from sparsegcn.sampling.typed_dedup import (
    gather_typed_dedup,
    sample_typed_dedup,
    typed_dedup_sizes,
)
from sparsegcn.tasks.hetero import HeteroData, make_epoch


def load_note(loads) -> str:
    """The load averages seen around a run, and whether they make it "loaded"."""
    cores = os.cpu_count() or 1
    return f"load average {min(loads):.1f}-{max(loads):.1f} on {cores} cores" + (
        ": loaded (above 1.5); other jobs shared the machine and only the side-by-side "
        "ratios mean much"
        if max(loads) > 1.5
        else ""
    )


def git_commit() -> str | None:
    """The checkout's commit (with ``+dirty`` for local changes), or ``None``."""
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        run = functools.partial(subprocess.run, cwd=here, capture_output=True, text=True)
        commit = run(["git", "rev-parse", "HEAD"], check=True).stdout.strip()
        dirty = run(["git", "status", "--porcelain", "--untracked-files=no"]).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def load(scale: float, seed: int) -> HeteroData:
    from sparsegcn.datasets.mag import load_mag
    from sparsegcn.sampling.typed import HeteroCSR

    dataset = load_mag("synthetic:mag", scale=scale, seed=seed)
    graph = dataset.graph.add_reverse_relations(merge_same_type=True)
    features = {t: jnp.asarray(x, jnp.float32) for t, x in dataset.features.items()}
    labels = jnp.asarray(dataset.labels, jnp.int32)
    return HeteroData(dataset, graph, HeteroCSR.from_graph(graph), features, labels)


def batches(ids: np.ndarray, batch_size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` full batches of ``ids``: ``(ids [count, B], mask [count, B])``."""
    if len(ids) < count * batch_size:
        raise SystemExit(
            f"{count} batches of {batch_size} need {count * batch_size} ids, got {len(ids)}"
        )
    taken = ids[: count * batch_size].reshape(count, batch_size)
    return taken, np.ones(taken.shape, bool)


def frontier_counts(data, table, ids, mask, key, caps=None):
    """Per batch: real rows per type and frontier ``{t: [S, L + 1]}`` and overflow
    ``{t: [S, L]}``, one compiled scan."""
    target = data.dataset.target

    @jax.jit
    def run(csr, ids, mask, key):
        def step(_, batch):
            b_ids, b_mask, b_key = batch
            s = sample_typed_dedup(
                csr, b_ids, table, seed_type=target, key=b_key, mask=b_mask, caps=caps
            )
            counts = {
                t: jnp.stack([jnp.sum(m, dtype=jnp.int32) for m in s.masks[t]]) for t in s.masks
            }
            return None, (counts, s.overflow)

        return jax.lax.scan(step, None, (ids, mask, jax.random.split(key, ids.shape[0])))[1]

    counts, overflow = run(data.csr, ids, mask, key)
    return (
        {t: np.asarray(v) for t, v in counts.items()},
        {t: np.asarray(v) for t, v in overflow.items()},
    )


def probe_caps(data, num_nodes, table, ids, mask, key, margin: float, batch_size: int):
    """Per hop, ``{type: cap}``: the most new nodes over the probe batches times
    ``margin``, rounded up to 256, at most the uncapped frontier size (types the
    hop cannot reach are left out)."""
    counts, _ = frontier_counts(data, table, ids, mask, key)
    bounds = typed_dedup_sizes(
        batch_size,
        table,
        data.csr.edge_types,
        num_nodes,
        seed_type=data.dataset.target,
    )
    caps = []
    for d in range(len(table)):
        hop = {}
        for t, c in counts.items():
            if bounds[t][d + 1]:  # a type the hop cannot reach needs no cap
                largest = int(c[:, d + 1].max())
                cap = max(256, -(-int(largest * margin) // 256) * 256)
                hop[t] = min(cap, bounds[t][d + 1])
        caps.append(hop)
    return caps


def tree_rows(table, edge_types, target: str, batch_size: int) -> int:
    from sparsegcn.sampling.typed import typed_paths

    total = 0
    for level in typed_paths(edge_types, target, len(table)):
        for path in level:
            total += batch_size * int(np.prod([table[d][r] for d, r in enumerate(path)]))
    return total


def make_sampler_only(sampler: str, table, target: str, caps):
    """``run(csr, features, embeddings, ids, mask, key) -> checksum``: sample and
    gather every row's inputs for each batch, in one scan."""

    @jax.jit
    def run(csr, features, embeddings, ids, mask, key):
        inputs = {**features, **embeddings}

        def step(total, batch):
            b_ids, b_mask, b_key = batch
            if sampler == "tree":
                s = sample_typed(csr, b_ids, table, seed_type=target, key=b_key, mask=b_mask)
                rows = gather_typed(s, inputs, csr.edge_types, target)
            else:
                s = sample_typed_dedup(
                    csr, b_ids, table, seed_type=target, key=b_key, mask=b_mask, caps=caps
                )
                rows = gather_typed_dedup(s, inputs)
            return total + sum(jnp.sum(v[..., 0]) for v in rows.values()), None

        keys = jax.random.split(key, ids.shape[0])
        return jax.lax.scan(step, jnp.zeros(()), (ids, mask, keys))[0]

    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.1, help="synthetic:mag scale")
    parser.add_argument("--fanouts", default="25,20")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--scan-batches", type=int, default=4, help="batches per timed scan")
    parser.add_argument("--rounds", type=int, default=5, help="timed scans per sampler")
    parser.add_argument("--cap-batches", type=int, default=8)
    parser.add_argument("--cap-margin", type=float, default=1.05)
    parser.add_argument(
        "--samplers",
        default="tree,dedup,dedup_capped",
        help="which of tree, dedup (uncapped), dedup_capped to time",
    )
    parser.add_argument(
        "--sample-only",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the samplers alone (sample and gather the inputs)",
    )
    parser.add_argument("--out", help="write the results as JSON here (checked first)")
    args = parser.parse_args(argv)
    if args.out and os.path.exists(args.out):
        parser.error(f"--out {args.out} exists; pass a new path")
    try:
        check_outputs({"--out": args.out})
    except (OSError, ValueError) as err:
        parser.error(str(err))
    keep_freed_memory_unless_disabled()
    results: dict = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "commit": git_commit(),
        "env": {k: os.environ.get(k) for k in ("SPARSEGCN_KEEP_FREED_MEMORY", "XLA_FLAGS")},
        "machine": machine(),
    }
    tick = time.perf_counter()
    data = load(args.scale, seed=0)
    target = data.dataset.target
    edge_types = data.graph.edge_types
    num_nodes = data.graph.num_nodes
    table = check_typed_fanouts(args.fanouts, edge_types)
    batch_size = args.batch_size
    results["graph"] = {
        "dataset": "synthetic:mag",
        "scale": args.scale,
        "num_nodes": num_nodes,
        "num_edges_with_reverses": {"___".join(k): v for k, v in data.graph.num_edges.items()},
        "num_edges_raw": int(sum(data.dataset.graph.num_edges.values())),
        "load_s": time.perf_counter() - tick,
    }
    results["settings"] = {
        "fanouts": [list(row) for row in table],
        "relations": ["___".join(k) for k in edge_types],
        "batch_size": batch_size,
        "scan_batches": args.scan_batches,
        "rounds": args.rounds,
        "hidden": args.hidden,
        "dropout": args.dropout,
        "optimizer": f"optax.adam({args.lr})",
    }
    print(results["graph"], flush=True)
    data = data._replace(graph=None)  # the host copy of the relations; the CSR stays

    rng = np.random.default_rng(0)
    train = np.asarray(data.dataset.split["train"]).astype(np.int32)
    perm = rng.permutation(train)
    ids, mask = batches(perm, batch_size, args.scan_batches)
    probe_ids, probe_mask = batches(perm[::-1].copy(), batch_size, args.cap_batches)
    key, probe_key = jax.random.key(0), jax.random.key(1)

    caps = probe_caps(
        data, num_nodes, table, probe_ids, probe_mask, probe_key, args.cap_margin, batch_size
    )
    counts, _ = frontier_counts(data, table, ids, mask, key)
    _, overflow = frontier_counts(data, table, ids, mask, key, caps)
    uncapped = typed_dedup_sizes(batch_size, table, edge_types, num_nodes, seed_type=target)
    capped = typed_dedup_sizes(
        batch_size, table, edge_types, num_nodes, seed_type=target, caps=caps
    )
    distinct = {t: c.sum(axis=1) for t, c in counts.items()}
    results["rows_per_batch"] = {
        "tree_rows": tree_rows(table, edge_types, target, batch_size),
        "distinct_rows_per_type_mean": {t: float(v.mean()) for t, v in distinct.items()},
        "distinct_rows_per_type_and_frontier_max": {
            t: c.max(axis=0).tolist() for t, c in counts.items()
        },
        "distinct_rows_mean": float(sum(distinct.values()).mean()),
        "dedup_uncapped_padded_rows_per_type": {t: sum(v) for t, v in uncapped.items()},
        "dedup_uncapped_padded_rows": sum(sum(v) for v in uncapped.values()),
        "caps_from_probe": caps,
        "caps_probe": {"batches": args.cap_batches, "margin": args.cap_margin},
        "dedup_capped_padded_rows_per_type": {t: sum(v) for t, v in capped.items()},
        "dedup_capped_padded_rows": sum(sum(v) for v in capped.values()),
        "dedup_capped_overflow_nodes": {t: v.sum(axis=0).tolist() for t, v in overflow.items()},
    }
    results["rows_per_batch"]["tree_over_distinct"] = (
        results["rows_per_batch"]["tree_rows"] / results["rows_per_batch"]["distinct_rows_mean"]
    )
    print(results["rows_per_batch"], flush=True)

    model = rgcn(
        num_nodes,
        edge_types,
        {t: int(x.shape[1]) for t, x in data.features.items()},
        data.dataset.num_classes,
        target=target,
        hidden=args.hidden,
        num_layers=len(table),
        dropout_rate=args.dropout,
    )
    tx = optax.adam(args.lr)
    params = jax.jit(model.init)(jax.random.key(0))
    configs = {"tree": ("tree", None), "dedup": ("dedup", None), "dedup_capped": ("dedup", caps)}
    names = [n.strip() for n in args.samplers.split(",") if n.strip()]
    unknown = sorted(set(names) - set(configs))
    if unknown:
        parser.error(f"--samplers names {unknown}; choose among {sorted(configs)}")
    runs: dict = {n: {"sampler": configs[n][0], "caps": configs[n][1]} for n in names}
    epochs, only = {}, {}
    args_data = (data.csr, data.features, data.labels, ids, mask)
    opt_state = tx.init(params)  # both donated by every call and threaded through
    for name in names:
        sampler, c = configs[name]
        tick = time.perf_counter()
        epoch = make_epoch(model, tx, table, target, sampler=sampler, caps=c)
        epochs[name] = epoch.lower(params, opt_state, key, *args_data).compile()
        runs[name]["compile_epoch_s"] = time.perf_counter() - tick
        memory = epochs[name].memory_analysis()
        if memory is not None:
            runs[name]["xla_temp_bytes_epoch"] = int(memory.temp_size_in_bytes)
        print(name, "compiled", runs[name], flush=True)
        params, opt_state, losses = jax.block_until_ready(
            epochs[name](params, opt_state, key, *args_data)
        )
        runs[name]["first_call_losses"] = np.asarray(losses).tolist()
        if args.sample_only:
            tick = time.perf_counter()
            fn = make_sampler_only(sampler, table, target, c)
            sample_args = (data.csr, data.features, params["embeddings"], ids, mask, key)
            only[name] = fn.lower(*sample_args).compile()
            runs[name]["compile_sample_only_s"] = time.perf_counter() - tick
            jax.block_until_ready(only[name](*sample_args))
        runs[name]["peak_rss_bytes_after_compile"] = (
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        )
        print(name, runs[name], flush=True)

    # Interleaved rounds: the shared machine's load falls on each sampler alike.
    times: dict = {n: [] for n in names}
    sample_times: dict = {n: [] for n in names}
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name in names:
            (params, opt_state, _), wall = timed(epochs[name], params, opt_state, key, *args_data)
            times[name].append(wall)
            if args.sample_only:
                sample_args = (data.csr, data.features, params["embeddings"], ids, mask, key)
                sample_times[name].append(timed(only[name], *sample_args)[1])
    load_after = os.getloadavg()[0]
    steps = ids.shape[0]
    for name in names:
        median = float(np.median(times[name]))
        runs[name]["scan_s_all"] = times[name]
        runs[name]["step_ms_median"] = 1e3 * median / steps
        runs[name]["steps_per_s"] = steps / median
        if args.sample_only:
            sample_median = float(np.median(sample_times[name]))
            runs[name]["sample_only_s_all"] = sample_times[name]
            runs[name]["sample_only_ms_per_batch_median"] = 1e3 * sample_median / steps
    results["runs"] = runs
    results["timing"] = {
        "load_average_1m_before": load_before,
        "load_average_1m_after": load_after,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if "tree" in runs:
        results["steps_per_s_over_tree"] = {
            n: runs[n]["steps_per_s"] / runs["tree"]["steps_per_s"] for n in names
        }
    print({n: (runs[n]["steps_per_s"], runs[n]["step_ms_median"]) for n in names}, flush=True)
    results["machine"]["load_average_1m_at_end"] = os.getloadavg()[0]
    loads = [results["machine"]["load_average_1m_at_start"], load_before, load_after]
    results["note"] = load_note(loads)
    if args.out:
        write_json_atomic(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

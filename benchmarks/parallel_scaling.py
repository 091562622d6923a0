"""Training throughput against device count: data-parallel GraphSAGE, edge-sharded GCN.

    python benchmarks/parallel_scaling.py                          # 1, 2, 4, 8 devices
    python benchmarks/parallel_scaling.py --devices 1,2 --nodes 20000 \\
        --out benchmarks/results/parallel_scaling-cpu.json

For each device count ``D`` (one mesh of the first ``D`` local devices, all
in this process), it times, compile excluded and interleaved round by round
so a noisy neighbour hits every ``D`` alike:

- ``sage``: one data-parallel optimizer step of GraphSAGE on a global batch
  of ``--batch-size`` seeds (sampling, forward, backward, ``psum``, Adam);
  throughput in seeds per second;
- ``gcn``: one edge-sharded full-batch step of a 2-layer GCN (two
  ``all_gather`` per forward, their ``psum_scatter`` transposes backward);
  throughput in edges per second (``E`` per step), with the shard balance
  ``D S / E``;

plus, as ``D = 0`` rows, the plain single-device trainers' steps (no mesh),
so the cost of the parallel machinery itself shows. On CPU the simulated
devices share the same cores (set with
``XLA_FLAGS=--xla_force_host_platform_device_count``, done here before JAX
starts), so the figures measure overhead, not speed-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def parse_devices(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise SystemExit(f"--devices needs positive counts like 1,2,4,8, got {text!r}")
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="1,2,4,8", help="device counts, comma separated")
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--degree", type=float, default=10.0)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanouts", default="10,5")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", metavar="PATH", help="write the JSON report here")
    args = parser.parse_args(argv)
    counts = parse_devices(args.devices)
    # Before JAX starts: on CPU, simulate the largest device count asked for.
    flags = os.environ.get("XLA_FLAGS", "")
    if "force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={max(counts)}"

    from sparsegcn.files import check_outputs

    try:
        check_outputs({"--out": args.out})
    except (OSError, ValueError) as err:
        parser.error(str(err))

    import jax
    import numpy as np

    from sparsegcn.allocator import keep_freed_memory_unless_disabled

    keep_freed_memory_unless_disabled()  # as the sparsegcn command does

    import sparsegcn as sg
    from sparsegcn.bench.graphs import random_graph
    from sparsegcn.bench.runner import machine_info
    from sparsegcn.files import write_json_atomic
    from sparsegcn.parallel import (
        EdgeShardedGraph,
        data_parallel_step_fn,
        edge_sharded_step_fn,
        make_mesh,
        put,
    )
    from sparsegcn.parallel.full_graph import place_node_data, shard_node_data
    from sparsegcn.train import (
        NodeData,
        TrainConfig,
        index_mask,
        init_state,
        make_batches,
        make_optimizer,
        minibatch_data,
        seed_keys,
    )
    from sparsegcn.train import fullbatch as single_full
    from sparsegcn.train import minibatch as single_mini

    n, f, classes = args.nodes, args.features, 16
    fanouts = tuple(int(k) for k in args.fanouts.split(","))
    rng = np.random.default_rng(0)
    graph = random_graph(n, args.degree)
    data = NodeData(
        graph=sg.gcn_norm(graph),
        features=sg.as_features(rng.normal(size=(n, f)).astype(np.float32), n),
        labels=rng.integers(0, classes, n).astype(np.int32),
        train_mask=index_mask(np.arange(n // 2), n),
        val_mask=index_mask(np.arange(n // 2, 3 * n // 4), n),
        test_mask=index_mask(np.arange(3 * n // 4, n), n),
    )
    mini = jax.device_put(minibatch_data(data._replace(graph=graph)))
    tx = make_optimizer(TrainConfig())
    sage = sg.sage(f, classes, hidden=args.hidden, num_layers=len(fanouts))
    gcn = sg.gcn(f, classes, hidden=args.hidden, dropout_rate=0.5)
    sage_state = jax.vmap(lambda k: init_state(sage, tx, k))(seed_keys([0]))
    gcn_state = jax.vmap(lambda k: init_state(gcn, tx, k))(seed_keys([0]))
    batch_size = min(args.batch_size, n // 2)
    batch = jax.tree.map(
        lambda a: a[0], make_batches(jax.random.key(0), mini.train_nodes, batch_size)
    )

    def compiled(fn, *fn_args):
        start = time.perf_counter()
        program = jax.jit(fn).lower(*fn_args).compile()
        return program, fn_args, time.perf_counter() - start

    cases = {
        ("sage", 0): compiled(single_mini.make_step_fn(sage, tx, fanouts), sage_state, mini, batch),
        ("gcn", 0): compiled(single_full.make_step_fn(gcn, tx), gcn_state, jax.device_put(data)),
    }
    balance = {}
    for d in counts:
        mesh = make_mesh(d)
        cases[("sage", d)] = compiled(
            data_parallel_step_fn(sage, tx, fanouts, mesh),
            put(sage_state, mesh),
            put(mini, mesh),
            put(batch, mesh),
        )
        sharded = shard_node_data(data, d)
        balance[d] = EdgeShardedGraph.build(data.graph, d).balance
        cases[("gcn", d)] = compiled(
            edge_sharded_step_fn(gcn, tx, mesh),
            put(gcn_state, mesh),
            place_node_data(sharded, mesh),
        )
    for program, fn_args, _ in cases.values():
        jax.block_until_ready(program(*fn_args))
    times = {case: [] for case in cases}
    for _ in range(args.rounds):
        for case, (program, fn_args, _) in cases.items():
            start = time.perf_counter()
            jax.block_until_ready(program(*fn_args))
            times[case].append(time.perf_counter() - start)

    rows = []
    for (model, d), values in times.items():
        median = float(np.median(values))
        base = float(np.median(times[(model, 0)]))
        row = {
            "model": model,
            "devices": d,
            "path": "single-device trainer"
            if d == 0
            else ("data parallel" if model == "sage" else "edge sharded"),
            "median_ms": 1e3 * median,
            "min_ms": 1e3 * min(values),
            "compile_s": cases[(model, d)][2],
            "vs_single_device": base / median,
        }
        if model == "sage":
            row["seeds_per_s"] = batch_size / median
        else:
            row["edges_per_s"] = graph.num_edges / median
            row["shard_balance"] = balance.get(d, 1.0)
        rows.append(row)
    print(
        f"N={n}, E={graph.num_edges}, F={f}, hidden={args.hidden}, batch={batch_size}, "
        f"fanouts={fanouts}; median of {args.rounds} interleaved rounds, compile excluded"
    )
    print(
        "| model | devices | path | median ms | min ms | throughput | vs single device | compile s |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        rate = (
            f"{row['seeds_per_s']:.0f} seeds/s"
            if row["model"] == "sage"
            else f"{row['edges_per_s'] / 1e6:.1f} M edges/s (balance {row['shard_balance']:.2f})"
        )
        print(
            f"| {row['model']} | {row['devices'] or 1} | {row['path']} | {row['median_ms']:.1f} | "
            f"{row['min_ms']:.1f} | {rate} | {row['vs_single_device']:.2f}x | "
            f"{row['compile_s']:.1f} |"
        )
    report = {
        "settings": vars(args) | {"batch_size": batch_size, "num_edges": graph.num_edges},
        "rows": rows,
        "machine": machine_info(),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
    }
    if args.out:
        write_json_atomic(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

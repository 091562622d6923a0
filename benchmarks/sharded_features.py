"""Data-parallel GraphSAGE step time with replicated against row-sharded features.

    python benchmarks/sharded_features.py                          # 2 and 4 devices
    python benchmarks/sharded_features.py --devices 2,4 --nodes 20000 --rounds 5 \\
        --note "loaded machine" --out benchmarks/results/sharded-features-cpu-loaded.json

For each device count ``D`` (one mesh of the first ``D`` local devices) it
compiles two data-parallel optimizer steps on the same global batch (``B``
seeds, sampling, forward, backward, ``psum``, Adam):

- ``replicated``: every device holds all ``N`` feature rows
  (:func:`~sparsegcn.parallel.data_parallel_step_fn`);
- ``sharded``: each holds ``ceil(N / D)`` rows and fetches its trees' rows
  from their owners (``all_gather`` of ids, ``all_to_all`` of rows;
  :func:`~sparsegcn.parallel.fetch_rows`),

checks that both give the same params, then times them interleaved round by
round (``block_until_ready``, median and minimum, compile time reported
apart) and reads each device's feature bytes from the arrays' shards. On
CPU the simulated devices share the same cores
(``XLA_FLAGS=--xla_force_host_platform_device_count``, set here before JAX
starts) and the collectives are memory copies, so the figures measure the
fetch's overhead, not a speed-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="2,4", help="device counts, comma separated")
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--degree", type=float, default=10.0)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--fanouts", default="10,5")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--note", default="", help="recorded in the report (e.g. the load)")
    parser.add_argument("--out", metavar="PATH", help="write the JSON report here")
    args = parser.parse_args(argv)
    counts = [int(v) for v in args.devices.split(",") if v.strip()]
    if not counts or min(counts) < 1:
        raise SystemExit(f"--devices needs positive counts like 2,4, got {args.devices!r}")
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
    from sparsegcn.parallel import data_parallel_step_fn, make_mesh, place_data, put
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

    n, f, classes = args.nodes, args.features, 16
    fanouts = tuple(int(k) for k in args.fanouts.split(","))
    rng = np.random.default_rng(0)
    graph = random_graph(n, args.degree)
    data = minibatch_data(
        NodeData(
            graph=graph,
            features=sg.as_features(rng.normal(size=(n, f)).astype(np.float32), n),
            labels=rng.integers(0, classes, n).astype(np.int32),
            train_mask=index_mask(np.arange(n // 2), n),
            val_mask=index_mask(np.arange(n // 2, 3 * n // 4), n),
            test_mask=index_mask(np.arange(3 * n // 4, n), n),
        )
    )
    tx = make_optimizer(TrainConfig())
    sage = sg.sage(f, classes, hidden=args.hidden, num_layers=len(fanouts))
    state = jax.vmap(lambda k: init_state(sage, tx, k))(seed_keys([0]))
    batch_size = min(args.batch_size, n // 2)
    batch = jax.tree.map(
        lambda a: a[0], make_batches(jax.random.key(0), np.asarray(data.train_nodes), batch_size)
    )

    def compiled(fn, *fn_args):
        start = time.perf_counter()
        program = jax.jit(fn).lower(*fn_args).compile()
        return program, fn_args, time.perf_counter() - start

    cases, feature_bytes, same = {}, {}, {}
    for d in counts:
        mesh = make_mesh(d)
        for layout in ("replicated", "sharded"):
            sharded = layout == "sharded"
            placed = place_data(data, mesh, shard_features=sharded)
            step = data_parallel_step_fn(
                sage, tx, fanouts, mesh, sharded_rows=n if sharded else None
            )
            cases[(layout, d)] = compiled(step, put(state, mesh), placed, put(batch, mesh))
            feature_bytes[(layout, d)] = max(
                s.data.nbytes for s in placed.features.addressable_shards
            )
    outputs = {}
    for case, (program, fn_args, _) in cases.items():
        outputs[case] = jax.block_until_ready(program(*fn_args))
    for d in counts:
        want, got = outputs[("replicated", d)].params, outputs[("sharded", d)].params
        same[d] = all(
            np.array_equal(a, b)
            for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
        )
    times: dict = {case: [] for case in cases}
    for _ in range(args.rounds):
        for case, (program, fn_args, _) in cases.items():
            start = time.perf_counter()
            jax.block_until_ready(program(*fn_args))
            times[case].append(time.perf_counter() - start)

    rows = []
    for (layout, d), values in times.items():
        median = float(np.median(values))
        rows.append(
            {
                "devices": d,
                "features": layout,
                "median_ms": 1e3 * median,
                "min_ms": 1e3 * min(values),
                "compile_s": cases[(layout, d)][2],
                "feature_bytes_per_device": feature_bytes[(layout, d)],
                "vs_replicated": float(np.median(times[("replicated", d)])) / median,
                "params_bitwise_equal_to_replicated": same[d],
            }
        )
    print(
        f"N={n}, E={graph.num_edges}, F={f}, hidden={args.hidden}, batch={batch_size}, "
        f"fanouts={fanouts}; median of {args.rounds} interleaved rounds, compile excluded"
    )
    print(
        "| devices | features | median ms | min ms | vs replicated | compile s | feature MB/device |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['devices']} | {row['features']} | {row['median_ms']:.1f} | "
            f"{row['min_ms']:.1f} | {row['vs_replicated']:.2f}x | {row['compile_s']:.1f} | "
            f"{row['feature_bytes_per_device'] / 1e6:.2f} |"
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

"""Before/after measurements of each performance change, side by side, in one process.

    python benchmarks/paths.py                       # 200k nodes, degree 10, F=64
    python benchmarks/paths.py --nodes 50000 --out benchmarks/results/paths-small.md
    python benchmarks/paths.py --only "CSR kernel" --rounds 11 --json out.json

Every pair (or group) is timed interleaved, round after round, so a noisy
neighbour hits both sides alike; the table reports median and minimum wall
time per call, compile time excluded, and the load average; rows that
compute ``Â x`` also give ``x gather``, the median over the gathered-rows
floor (a row of ``x`` per edge, ``y`` and the CSR ids, at the no-allocation
streaming bandwidth measured at the start; see ``sparsegcn.bench.runner``).
Pairs:

- edge list: receiver-sorted edges with and without ``indices_are_sorted``;
- layout: the packed sliced-ELL path against the edge list (forward, and
  forward + backward);
- folding ``D^-1/2``: packed with per-edge weights against packed with the
  scaling folded into the features;
- matmul order: ``Â (X W)`` against ``(Â X) W`` for a narrowing layer;
- node order: packed SBM graph as generated, RCM and degree order;
- dropout: the hash mask against threefry's ``bernoulli`` on ``[N, F]``;
- storage: float32 against bfloat16 gathers (accumulating in float32);
- CSR kernel: the packed CSR product on XLA's kernel (jaxlib's
  ``cpu_csr_sparse_dense``) against sparsegcn's native one
  (``sparsegcn.backends.native``), forward, and forward + backward.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.allocator import keep_freed_memory_unless_disabled
from sparsegcn.backends import Segment, native, pack, pack_gcn_norm, propagate
from sparsegcn.bench.graphs import add_graph_arguments, make_graph
from sparsegcn.bench.runner import gather_bytes, machine_info
from sparsegcn.bench.timing import stream_bandwidth
from sparsegcn.files import check_outputs, write_atomic
from sparsegcn.nn.dropout import dropout
from sparsegcn.transforms import gcn_norm, sort_edges


def interleaved(named: dict, rounds: int) -> dict:
    """``{name: (compiled, args)}`` -> ``{name: [seconds per round]}``, interleaved."""
    for compiled, args in named.values():
        jax.block_until_ready(compiled(*args))
    times = {name: [] for name in named}
    for _ in range(rounds):
        for name, (compiled, args) in named.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times[name].append(time.perf_counter() - start)
    return times


def compile_all(named: dict) -> dict:
    return {name: (jax.jit(fn).lower(*args).compile(), args) for name, (fn, args) in named.items()}


def fwd(backend=None):
    if backend is None:
        return lambda g, x: propagate(g, x)
    return lambda g, x: propagate(g, x, backend=backend)


def fwd_bwd(backend=None):
    def run(g, x):
        return jax.grad(lambda x: jnp.sum(jnp.square(fwd(backend)(g, x))))(x)

    return run


def groups(n: int, degree: float, features: int):
    """Yields ``(title, {name: (fn, args)}, floor_bytes)``; graphs are built lazily per group.

    ``floor_bytes`` is what the ``Â x`` products of the random graph one call
    computes (1 forward, 2 with the backward pass) move at the gathered-rows
    floor (:func:`~sparsegcn.bench.runner.gather_bytes`), or 0 where that
    floor does not apply.
    """
    key = jax.random.key(0)
    x = jax.random.normal(key, (n, features))
    random = make_graph("random", n, degree)
    row_bytes = gather_bytes(n, gcn_norm(random).num_edges, features)
    edge_list = jax.device_put(sort_edges(gcn_norm(random)))
    packed_weighted = jax.device_put(pack(sort_edges(gcn_norm(random))))
    packed_folded = jax.device_put(pack_gcn_norm(random))

    yield (
        "edge list: indices_are_sorted (receiver-sorted edges)",
        {
            "segment_sum(indices_are_sorted=False)": (
                fwd(Segment(use_layout=False)),
                (edge_list, x),
            ),
            "segment_sum(indices_are_sorted=True)": (
                fwd(Segment(use_layout=False, use_sorted=True)),
                (edge_list, x),
            ),
        },
        row_bytes,
    )
    yield (
        "layout: packed sliced ELL vs edge list (forward)",
        {
            "edge list (gather + segment_sum)": (fwd(), (edge_list, x)),
            "packed (sliced ELL, folded)": (fwd(), (packed_folded, x)),
        },
        row_bytes,
    )
    yield (
        "layout: packed sliced ELL vs edge list (forward + backward)",
        {
            "edge list (gather + segment_sum)": (fwd_bwd(), (edge_list, x)),
            "packed (sliced ELL, folded)": (fwd_bwd(), (packed_folded, x)),
        },
        2 * row_bytes,
    )
    yield (
        "folding D^-1/2 into the features (packed, forward + backward)",
        {
            "per-edge weights": (fwd_bwd(), (packed_weighted, x)),
            "scaling folded": (fwd_bwd(), (packed_folded, x)),
        },
        2 * row_bytes,
    )
    wide = jax.random.normal(key, (n, 4 * features))
    w = jax.random.normal(key, (4 * features, features))
    yield (
        f"matmul order, narrowing layer {4 * features} -> {features} (forward + backward)",
        {
            "(Â X) W": (
                lambda g, x, w: jax.grad(lambda w: jnp.sum(jnp.square(propagate(g, x) @ w)))(w),
                (packed_folded, wide, w),
            ),
            "Â (X W)": (
                lambda g, x, w: jax.grad(lambda w: jnp.sum(jnp.square(propagate(g, x @ w))))(w),
                (packed_folded, wide, w),
            ),
        },
        0,
    )
    del wide
    community = make_graph("sbm", n, degree)
    orders = {"as generated": community}
    for method in ("rcm", "degree"):
        orders[method] = community.reorder(method).graph
    yield (
        "node order, community (SBM) graph, packed (forward)",
        {
            name: (fwd(), (jax.device_put(pack_gcn_norm(graph)), x))
            for name, graph in orders.items()
        },
        0,
    )
    yield (
        f"dropout mask on [{n}, {features}]",
        {
            "threefry bernoulli": (
                lambda x, k: dropout(x, 0.5, key=k, impl="threefry"),
                (x, jax.random.key(1)),
            ),
            "hash": (lambda x, k: dropout(x, 0.5, key=k, impl="hash"), (x, jax.random.key(1))),
        },
        0,
    )
    yield (
        "gather storage dtype, packed (forward)",
        {
            "float32": (fwd(), (packed_folded, x)),
            "bfloat16 (f32 accumulation)": (
                fwd(Segment(storage_dtype="bfloat16")),
                (packed_folded, x),
            ),
        },
        row_bytes,
    )
    del packed_folded, packed_weighted, edge_list
    packed_csr = jax.device_put(pack_gcn_norm(random, format="csr"))
    for products, (label, make) in enumerate(
        (("forward", fwd), ("forward + backward", fwd_bwd)), start=1
    ):
        yield (
            f"CSR kernel, packed CSR ({label})",
            {
                "XLA (cpu_csr_sparse_dense)": (make(Segment(csr_kernel="xla")), (packed_csr, x)),
                "native (sparsegcn_csr_spmm)": (
                    make(Segment(csr_kernel="native")),
                    (packed_csr, x),
                ),
            },
            products * row_bytes,
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_graph_arguments(parser)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", metavar="PATH", help="also write the markdown table here")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON here")
    parser.add_argument(
        "--only",
        metavar="TEXT",
        help="run only the comparisons whose title contains TEXT (e.g. 'CSR kernel')",
    )
    args = parser.parse_args(argv)
    try:
        check_outputs({"--out": args.out, "--json": args.json})
    except (OSError, ValueError) as err:
        parser.error(str(err))
    keep_freed_memory_unless_disabled()  # as the sparsegcn command does
    stream_gbps = stream_bandwidth()
    lines = [
        f"N={args.nodes}, average degree {args.degree:g}, F={args.features}; "
        f"median / min wall ms per call over {args.rounds} interleaved rounds; "
        f"x gather: median over the gathered-rows floor at {stream_gbps:.1f} GB/s",
        "",
        "| comparison | variant | median ms | min ms | vs first | x gather | load |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    print("\n".join(lines), flush=True)
    rows = []
    for title, named, floor_bytes in groups(args.nodes, args.degree, args.features):
        if args.only and args.only not in title:
            continue
        times = interleaved(compile_all(named), args.rounds)
        load = " ".join(f"{v:.1f}" for v in os.getloadavg())
        floor_ms = 1e3 * floor_bytes / (stream_gbps * 1e9)
        base = None
        for name, values in times.items():
            median = 1e3 * float(np.median(values))
            base = median if base is None else base
            ratio = f"{median / floor_ms:.2f}" if floor_ms else ""
            line = (
                f"| {title} | {name} | {median:.1f} | {1e3 * min(values):.1f} | "
                f"{base / median:.2f}x | {ratio} | {load} |"
            )
            lines.append(line)
            print(line, flush=True)
            rows.append(
                {
                    "comparison": title,
                    "variant": name,
                    "median_ms": median,
                    "min_ms": 1e3 * min(values),
                    "times_ms": [1e3 * v for v in values],
                    "speedup_vs_first": base / median,
                    "gather_floor_ms": floor_ms or None,
                    "load_average": os.getloadavg(),
                }
            )
    machine = machine_info()
    kernel = native.kernel_info()
    lines += [
        "",
        f"Machine: {machine['cpu']}, {machine['cpu_count']} cores, jax {machine['jax']}; "
        f"streaming bandwidth {stream_gbps:.1f} GB/s (no allocation); native CSR kernel: "
        + (f"{kernel['isa']}, {kernel['threads']} threads" if kernel["available"] else "missing"),
    ]
    if args.out:
        table = "\n".join(lines) + "\n"
        write_atomic(args.out, lambda f: f.write(table.encode()))
    if args.json:
        report = {
            "graph": {"kind": "random", "nodes": args.nodes, "degree": args.degree},
            "features": args.features,
            "rounds": args.rounds,
            "stream_gbps": stream_gbps,
            "machine": machine,
            "native_kernel": kernel,
            "rows": rows,
        }
        text = json.dumps(report, indent=1) + "\n"
        write_atomic(args.json, lambda f: f.write(text.encode()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Locality orders side by side: the time to compute each, and ``Â·X`` after it.

On the ogbn-products-sized synthetic graph (``--scale`` shrinks it), for
each node order (the generated one, a random one, the hand-written label
propagation ``community``, METIS parts of ``METIS_PART_SIZE`` nodes and of
each of ``--metis-part-sizes``, networkit's PLM on one thread and on every
core):

- ``order_s``: host seconds to compute the permutation
  (:func:`sparsegcn.ops.node_order`), and ``relabel_s`` to apply it;
- locality: the share of edges whose two ends lie in one run of
  ``METIS_PART_SIZE`` consecutive ids, and the median ``|sender - receiver|``;
- ``Â·X`` with ``F = --features``: the GCN-normalized product in the layout
  training uses (packed CSR, :func:`~sparsegcn.backends.pack_gcn_norm`)
  and as a receiver-sorted edge list (``segment_sum``), median of
  ``--runs`` timed calls each, ``block_until_ready``, compiled apart. The
  orders are timed in interleaved rounds so that a change in the machine's
  load falls on all of them alike. Each result, restored to the original
  order, is checked against the generated order's.

Usage::

    python benchmarks/orders.py --scale 0.1 --out benchmarks/results/orders-products-0.1
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from sage_products_epoch import machine

import sparsegcn as sg
from sparsegcn.backends import pack_gcn_norm
from sparsegcn.datasets import load
from sparsegcn.files import write_json_atomic
from sparsegcn.graph import Reordering
from sparsegcn.ops.ordering import (
    METIS_PART_SIZE,
    metis_parts,
    node_order,
    require_order_library,
)

LAYOUTS = ("csr", "edges")


def relabel(graph: sg.Graph, permutation: np.ndarray) -> Reordering:
    """``graph`` relabelled by ``permutation``, as :meth:`sparsegcn.Graph.reorder` does."""
    n = graph.num_nodes
    inverse = np.empty(n, np.int64)
    inverse[permutation] = np.arange(n)
    s = inverse[np.asarray(graph.senders)].astype(np.int32)
    r = inverse[np.asarray(graph.receivers)].astype(np.int32)
    order = np.lexsort((s, r))
    return Reordering(
        sg.Graph(s[order], r[order], None, n, edges_sorted=True), permutation, inverse
    )


def locality(graph: sg.Graph, block: int = METIS_PART_SIZE) -> dict:
    s = np.asarray(graph.senders, np.int64)
    r = np.asarray(graph.receivers, np.int64)
    return {
        "edges_in_blocks": float(np.mean(s // block == r // block)),
        "median_id_distance": float(np.median(np.abs(s - r))),
    }


def orders(threads: int, part_sizes: list[int]) -> list[tuple[str, str | None, int]]:
    """``(label, method, threads or METIS part size)`` of each measured order."""
    return [
        ("none", None, 1),
        ("random", "random", 1),
        ("community", "community", 1),
        ("metis", "metis", 1),
        *((f"metis-{size}", "metis-parts", size) for size in part_sizes),
        ("networkit-1", "networkit", 1),
        (f"networkit-{threads}", "networkit", threads),
    ]


def metis_order(senders, receivers, n: int, part_size: int) -> np.ndarray:
    """``node_order(method="metis")`` with parts of ``part_size`` nodes."""
    labels = metis_parts(senders, receivers, n, part_size=part_size)
    counts = np.bincount(receivers, minlength=n)
    return np.lexsort((np.arange(n), -counts, labels))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synthetic:products")
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--metis-part-sizes",
        default="2048",
        help="METIS part sizes measured besides the default METIS_PART_SIZE ('' for none)",
    )
    parser.add_argument("--out", default=None, help="writes OUT.json and OUT.md")
    args = parser.parse_args(argv)

    info = machine()
    tick = time.perf_counter()
    dataset = load(args.dataset, scale=args.scale)
    graph = dataset.graph
    n = graph.num_nodes
    print(
        f"{args.dataset} x{args.scale}: {n:,} nodes, {graph.num_edges:,} stored edges, "
        f"loaded in {time.perf_counter() - tick:.1f} s",
        file=sys.stderr,
    )
    senders, receivers = np.asarray(graph.senders), np.asarray(graph.receivers)
    x = np.asarray(jax.random.normal(jax.random.key(0), (n, args.features), jnp.float32))

    for method in ("metis", "networkit"):
        module = require_order_library(method)  # imported before timing (networkit: seconds)
        version = getattr(module, "__version__", None) or getattr(module, "version", None)
        info[f"{module.__name__}_version"] = str(version)
    rows, prepared, reference = [], {}, {}
    part_sizes = [int(v) for v in args.metis_part_sizes.split(",") if v]
    for label, method, threads in orders(args.threads, part_sizes):
        tick = time.perf_counter()
        if method is None:
            permutation = np.arange(n, dtype=np.int64)
        elif method == "random":
            permutation = np.random.default_rng(0).permutation(n)
        elif method == "metis-parts":
            permutation = metis_order(senders, receivers, n, threads)
        else:
            permutation = node_order(senders, receivers, n, method=method, threads=threads)
        order_s = time.perf_counter() - tick
        tick = time.perf_counter()
        r = relabel(graph, permutation)
        relabel_s = time.perf_counter() - tick
        row = {"order": label, "order_s": order_s, "relabel_s": relabel_s, **locality(r.graph)}
        print(
            f"{label}: order {order_s:.2f} s, relabel {relabel_s:.2f} s, "
            f"{row['edges_in_blocks']:.3f} of edges in blocks",
            file=sys.stderr,
        )
        graphs = {
            "csr": pack_gcn_norm(r.graph, format="csr"),
            "edges": sg.sort_edges(sg.gcn_norm(r.graph)),
        }
        xs = jnp.asarray(r.permute(x))
        for layout, g in graphs.items():
            fn = jax.jit(sg.propagate)
            tick = time.perf_counter()
            out = jax.block_until_ready(fn(g, xs))
            row[f"{layout}_compile_s"] = time.perf_counter() - tick
            prepared[label, layout] = (fn, g, xs)
            restored = r.restore(np.asarray(out))
            if label == "none":
                reference[layout] = restored
            else:
                np.testing.assert_allclose(restored, reference[layout], rtol=1e-4, atol=1e-4)
        rows.append(row)

    times: dict = {key: [] for key in prepared}
    for _ in range(args.runs):
        for key, (fn, g, xs) in prepared.items():
            tick = time.perf_counter()
            jax.block_until_ready(fn(g, xs))
            times[key].append(time.perf_counter() - tick)
    for row in rows:
        for layout in LAYOUTS:
            samples = times[row["order"], layout]
            row[f"{layout}_ms_median"] = 1e3 * float(np.median(samples))
            row[f"{layout}_ms_min"] = 1e3 * float(np.min(samples))

    info["load_average_1m_at_end"] = os.getloadavg()[0]
    report = {
        "dataset": args.dataset,
        "scale": args.scale,
        "num_nodes": n,
        "num_stored_edges": int(graph.num_edges),
        "features": args.features,
        "runs": args.runs,
        "metis_part_size": METIS_PART_SIZE,
        "machine": info,
        "rows": rows,
    }
    table = markdown(report)
    print(table)
    if args.out:
        write_json_atomic(args.out + ".json", report)
        with open(args.out + ".md", "w", encoding="utf-8") as f:
            f.write(table)
    return 0


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"# Locality orders: {report['dataset']} at scale {report['scale']}",
        "",
        f"{report['num_nodes']:,} nodes, {report['num_stored_edges']:,} stored edges; "
        f"`Â·X` with F = {report['features']}, float32, median of {report['runs']} runs "
        f"(interleaved rounds), compile apart. {m['processor']}, {m['cpu_count']} cores, "
        f"{m['backend']}; load average {m['load_average_1m_at_start']:.1f} at the start and "
        f"{m['load_average_1m_at_end']:.1f} at the end: the machine was shared with other "
        "jobs, so the times are noisy; ratios within this table are what to read. "
        f"pymetis {m.get('pymetis_version', '?')}, networkit {m.get('networkit_version', '?')}.",
        "",
        f"| order | order s | relabel s | edges in {report['metis_part_size']}-blocks "
        "| median id distance "
        "| Â·X csr ms | Â·X edge list ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['order']} | {r['order_s']:.2f} | {r['relabel_s']:.2f} "
            f"| {r['edges_in_blocks']:.3f} | {r['median_id_distance']:,.0f} "
            f"| {r['csr_ms_median']:.1f} | {r['edges_ms_median']:.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

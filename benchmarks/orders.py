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
- with ``--sampled SAMPLERS``: one GraphSAGE optimizer step on sampled
  mini-batches (fanouts ``--fanouts``, ``--batch-size`` seeds, hidden
  ``--hidden``; sampling, feature gather, forward and backward) for each
  order and sampler, on the relabelled graph, features, labels and train
  nodes, on its own first batch, compiled per order (the evaluation chunks
  of the sampling graph are static and depend on the order), median of
  ``--runs`` interleaved rounds.

Usage::

    python benchmarks/orders.py --scale 0.1 --out benchmarks/results/orders-products-0.1
    python benchmarks/orders.py --scale 1 --orders none,metis,networkit-2 --metis-part-sizes '' \
        --layouts '' --sampled tree,dedup --runs 3 --out benchmarks/results/orders-products-1
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
from sparsegcn.datasets import data_location, load
from sparsegcn.files import check_outputs, write_atomic, write_json_atomic
from sparsegcn.graph import Reordering
from sparsegcn.ops.ordering import (
    METIS_PART_SIZE,
    metis_parts,
    node_order,
    require_order_library,
)
from sparsegcn.sampling import check_fanouts
from sparsegcn.train import NodeData, TrainConfig, index_mask, init_state, make_optimizer
from sparsegcn.train.minibatch import (
    effective_batch_size,
    first_batch,
    make_step_fn,
    minibatch_data,
)

# The GCN-normalized graph in each timed Â·X layout.
LAYOUTS = {
    "csr": lambda g: pack_gcn_norm(g, format="csr"),
    "edges": lambda g: sg.sort_edges(sg.gcn_norm(g)),
}


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


def sampled_steps(dataset, reorderings: dict, samplers: list[str], fanouts, args):
    """Yields ``{"order", "<sampler>_step_ms_median", "<sampler>_compile_s", ...}`` per
    order: one GraphSAGE step per order and sampler, in interleaved rounds."""
    n = dataset.num_nodes
    labels = np.maximum(dataset.labels, 0).astype(np.int32)
    masks = [index_mask(dataset.split[part], n) for part in ("train", "valid", "test")]
    model = sg.sage(
        dataset.num_features, dataset.num_classes, hidden=args.hidden, num_layers=len(fanouts)
    )
    tx = make_optimizer(TrainConfig(learning_rate=0.003, weight_decay=0.0, decay_layers="none"))
    state = jax.jit(lambda k: init_state(model, tx, k))(jax.random.key(0))
    states = jax.tree.map(lambda a: a[None], state)
    prepared = {}
    for label, r in reorderings.items():
        data = minibatch_data(
            NodeData(
                graph=r.graph,
                features=sg.as_features(r.permute(dataset.features), n),
                labels=r.permute(labels),
                train_mask=r.permute(masks[0]),
                val_mask=r.permute(masks[1]),
                test_mask=r.permute(masks[2]),
            )
        )
        data = jax.device_put(data)
        batch_size = effective_batch_size(int(data.train_nodes.shape[0]), args.batch_size)
        prepared[label] = (data, first_batch(jax.random.key(1), data.train_nodes, batch_size))
    # One program per order and sampler: the evaluation chunks (static metadata
    # of the sampling graph) depend on the order, so the programs are not shared.
    compiled, compile_s = {}, {}
    for sampler in samplers:
        step = jax.jit(make_step_fn(model, tx, fanouts, sampler=sampler))
        for label, (data, batch) in prepared.items():
            tick = time.perf_counter()
            compiled[label, sampler] = step.lower(states, data, batch).compile()
            compile_s[label, sampler] = time.perf_counter() - tick
            jax.block_until_ready(compiled[label, sampler](states, data, batch))  # warm-up
    times = {(label, s): [] for label in prepared for s in samplers}
    for _ in range(args.runs):
        for (label, sampler), samples in times.items():
            data, batch = prepared[label]
            tick = time.perf_counter()
            jax.block_until_ready(compiled[label, sampler](states, data, batch))
            samples.append(time.perf_counter() - tick)
    for label in prepared:
        row = {"order": label}
        for sampler in samplers:
            row[f"{sampler}_step_ms_median"] = 1e3 * float(np.median(times[label, sampler]))
            row[f"{sampler}_step_ms_min"] = 1e3 * float(np.min(times[label, sampler]))
            row[f"{sampler}_compile_s"] = compile_s[label, sampler]
        print(row, file=sys.stderr)
        yield row


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
    parser.add_argument(
        "--orders",
        default=None,
        help="comma-separated labels of the orders to measure (default: all; see orders())",
    )
    parser.add_argument(
        "--sampled",
        default="",
        help="samplers (tree, dedup) whose GraphSAGE step is timed after each order ('': none)",
    )
    parser.add_argument(
        "--layouts",
        default=",".join(LAYOUTS),
        help=f"the Â·X layouts timed, from {', '.join(LAYOUTS)}; '' for none (packing the full "
        "products graph needs more than 24 GB)",
    )
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--out", default=None, help="writes OUT.json and OUT.md")
    args = parser.parse_args(argv)
    outputs = {"--out (.json)": None, "--out (.md)": None}
    if args.out:
        outputs = {"--out (.json)": args.out + ".json", "--out (.md)": args.out + ".md"}
    try:
        check_outputs(outputs, [(args.dataset, data_location(args.dataset))])
    except (OSError, ValueError) as err:
        parser.error(str(err))
    part_sizes = [int(v) for v in args.metis_part_sizes.split(",") if v]
    measured = orders(args.threads, part_sizes)
    if args.orders is not None:
        wanted = [v for v in args.orders.split(",") if v]
        known = [label for label, _, _ in measured]
        unknown = [v for v in wanted if v not in known]
        if unknown or "none" not in wanted:
            parser.error(
                f"--orders {args.orders!r}: must include 'none' (the reference) and name only "
                f"{', '.join(known)}"
            )
        measured = [o for o in measured if o[0] in wanted]
    samplers = [v for v in args.sampled.split(",") if v]
    for sampler in samplers:
        if sampler not in ("tree", "dedup"):
            parser.error(f"--sampled: unknown sampler {sampler!r} (tree, dedup)")
    fanouts = check_fanouts(args.fanouts)
    layouts = [v for v in args.layouts.split(",") if v]
    if any(v not in LAYOUTS for v in layouts):
        parser.error(f"--layouts {args.layouts!r}: name layouts of {', '.join(LAYOUTS)} or none")

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
    rows, prepared, reference, reorderings = [], {}, {}, {}
    for label, method, threads in measured:
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
        graphs = {layout: LAYOUTS[layout](r.graph) for layout in layouts}
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
        if samplers:
            reorderings[label] = r

    times: dict = {key: [] for key in prepared}
    for _ in range(args.runs):
        for key, (fn, g, xs) in prepared.items():
            tick = time.perf_counter()
            jax.block_until_ready(fn(g, xs))
            times[key].append(time.perf_counter() - tick)
    for row in rows:
        for layout in layouts:
            samples = times[row["order"], layout]
            row[f"{layout}_ms_median"] = 1e3 * float(np.median(samples))
            row[f"{layout}_ms_min"] = 1e3 * float(np.min(samples))
    del prepared, reference
    for row in sampled_steps(dataset, reorderings, samplers, fanouts, args) if samplers else ():
        next(r for r in rows if r["order"] == row["order"]).update(row)

    info["load_average_1m_at_end"] = os.getloadavg()[0]
    report = {
        "dataset": args.dataset,
        "scale": args.scale,
        "num_nodes": n,
        "num_stored_edges": int(graph.num_edges),
        "features": args.features,
        "runs": args.runs,
        "metis_part_size": METIS_PART_SIZE,
        "samplers": samplers,
        "sampled_settings": {
            "fanouts": list(fanouts),
            "batch_size": args.batch_size,
            "hidden": args.hidden,
        },
        "machine": info,
        "rows": rows,
    }
    table = markdown(report)
    print(table)
    if args.out:
        write_json_atomic(args.out + ".json", report)
        write_atomic(args.out + ".md", lambda f: f.write(table.encode()))
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
        f"{m['load_average_1m_at_end']:.1f} at the end (the benchmark's own threads count; a "
        "load above the core count means other jobs shared the machine, and then only the "
        "ratios within this table mean anything). "
        f"pymetis {m.get('pymetis_version', '?')}, networkit {m.get('networkit_version', '?')}.",
    ]
    samplers = report.get("samplers") or []
    if samplers:
        st = report["sampled_settings"]
        lines.append(
            f"Sampled step: GraphSAGE mean, {len(st['fanouts'])} layers, hidden {st['hidden']}, "
            f"fanouts {','.join(map(str, st['fanouts']))}, {st['batch_size']} seeds, one "
            "optimizer step (sampling, gather, forward, backward), median of the same rounds."
        )
    head = (
        f"| order | order s | relabel s | edges in {report['metis_part_size']}-blocks "
        "| median id distance | Â·X csr ms | Â·X edge list ms |"
    )
    head += "".join(f" {s} step ms |" for s in samplers)
    lines += ["", head, "|---" * (7 + len(samplers)) + "|"]
    for r in report["rows"]:
        lines.append(
            f"| {r['order']} | {r['order_s']:.2f} | {r['relabel_s']:.2f} "
            f"| {r['edges_in_blocks']:.3f} | {r['median_id_distance']:,.0f} |"
            + "".join(
                f" {r[layout + '_ms_median']:.1f} |" if layout + "_ms_median" in r else " - |"
                for layout in LAYOUTS
            )
            + "".join(f" {r[s + '_step_ms_median']:.0f} |" for s in samplers)
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

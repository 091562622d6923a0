"""Ours against PyG, torch.sparse CSR and scipy CSR, in one process, same graphs.

    python benchmarks/peers/compare.py                      # propagation + GCN steps
    python benchmarks/peers/compare.py --only propagation --nodes 200000
    python benchmarks/peers/compare.py --json benchmarks/results/peers.json
    python benchmarks/peers/compare.py --torch-device cuda --nodes 1000000   # on a GPU

Propagation computes ``Â x`` (``Â = D^-1/2 (A + I) D^-1/2``) on a random
and a community-structured (SBM) graph. Ours runs the default backend on
the graph packed in CSR (the first row, which ratios refer to) and in
sliced ELL, on the plain edge list, and the BCOO backend; both packed forms
also after RCM and community reordering on the SBM graph. The peers run
on the graph as generated, and torch CSR also on the reordered ones. The GCN
steps are Kipf & Welling's Cora setup and a 3-layer, hidden-256 GCN on a
random graph of ogbn-arxiv's size, against PyG's GCN example. Every time is
a median after warm-up (ours: compiled, ``block_until_ready``); ratios are
``theirs / ours`` from the same run. Peers that are not installed are
skipped with a note. On a GPU (``--torch-device cuda``, the default when JAX
runs on one and torch sees it) the torch peers run on the same GPU, ours
adds the BCOO backend with its cuSPARSE lowering, and the host-only scipy
row is left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import implementations as peers
from conftest import shared_data_root

from sparsegcn.allocator import keep_freed_memory
from sparsegcn.backends import pack_gcn_norm, propagate
from sparsegcn.bench.graphs import add_graph_arguments, make_graph, propagation_graph
from sparsegcn.bench.runner import machine_info
from sparsegcn.bench.steps import arxiv_like_setup, cora_setup, gcn_step, registered_step
from sparsegcn.bench.timing import measure
from sparsegcn.transforms import gcn_norm, sort_edges


def time_python(fn, repeats: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _on(device: str) -> str:
    return "" if device == "cpu" else f"on {device}"


def _row(case: str, impl: str, times: list[float], note: str = "") -> dict:
    return {
        "case": case,
        "impl": impl,
        "median_ms": 1e3 * float(np.median(times)),
        "min_ms": 1e3 * float(np.min(times)),
        "repeats": len(times),
        "note": note,
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }


def propagation_rows(
    kind: str, nodes: int, degree: float, features: int, repeats: int, device: str = "cpu"
):
    case = f"propagate {kind} N={nodes} deg={degree:g} F={features}"
    graph = make_graph(kind, nodes, degree)
    a_hat = propagation_graph(graph, "segment-unpacked")
    x = np.random.default_rng(0).standard_normal((nodes, features), dtype=np.float32)
    xj = jax.device_put(x)
    rows = []

    def ours(g, label, note="", backend="segment"):
        timing = measure(
            lambda g, x: propagate(g, x, backend=backend), (jax.device_put(g), xj), repeats=repeats
        )
        rows.append(_row(case, label, list(timing.times_s), note))

    ours(propagation_graph(graph, "segment-csr"), "sparsegcn packed CSR")
    ours(propagation_graph(graph, "segment"), "sparsegcn packed ELL")
    ours(a_hat, "sparsegcn edge list")
    ours(a_hat, "sparsegcn bcoo", backend="bcoo")
    reordered = {}
    if kind == "sbm":
        for method in ("rcm", "community"):
            reordered[method] = graph.reorder(method).graph
            ours(
                propagation_graph(reordered[method], "segment-csr"),
                f"sparsegcn packed CSR +{method}",
            )
            ours(propagation_graph(reordered[method], "segment"), f"sparsegcn packed ELL +{method}")
    if peers.have_torch():
        rows.append(
            _row(
                case,
                "torch.sparse CSR",
                time_python(peers.torch_csr_propagate(a_hat, x, device), repeats),
                _on(device),
            )
        )
        for method, relabelled in reordered.items():
            a_new = propagation_graph(relabelled, "segment-unpacked")
            rows.append(
                _row(
                    case,
                    f"torch.sparse CSR +{method}",
                    time_python(peers.torch_csr_propagate(a_new, x, device), repeats),
                    _on(device),
                )
            )
    if device == "cpu":
        rows.append(
            _row(case, "scipy CSR", time_python(peers.scipy_csr_propagate(a_hat, x), repeats))
        )
    if peers.have_pyg():
        rows.append(
            _row(
                case,
                "PyG (scatter)",
                time_python(peers.pyg_propagate(a_hat, x, device), repeats),
                _on(device),
            )
        )
    return rows


STEP_GRAPHS = ("auto", "ell", "csr", "edges")


def step_graph(setup, form: str):
    """``setup`` with its propagation graph in ``form``: as set up, or packed
    ELL / packed CSR / the sorted edge list, for side-by-side steps."""
    if form == "auto":
        return setup
    if form == "edges":
        graph = sort_edges(gcn_norm(setup.graph))
    else:
        graph = pack_gcn_norm(setup.graph, format=form)
    return dataclasses.replace(setup, data=setup.data._replace(graph=graph))


def step_rows(
    name: str, setup, repeats: int, device: str = "cpu", forms: tuple[str, ...] = ("auto",)
) -> list[dict]:
    case = f"gcn step {name}"
    rows = []
    for form in forms:
        step, args = gcn_step(step_graph(setup, form))
        timing = measure(step, args, repeats=repeats, warmup=2)
        label = "sparsegcn" if form == "auto" else f"sparsegcn ({form})"
        rows.append(_row(case, label, list(timing.times_s), f"compile {timing.compile_s:.1f} s"))
    if peers.have_pyg():
        data = setup.data
        run = peers.pyg_gcn_step(
            setup.graph,
            setup.dense_features,
            np.asarray(data.labels),
            np.asarray(data.train_mask),
            setup.num_classes,
            hidden=setup.hidden,
            num_layers=setup.num_layers,
            dropout=setup.dropout,
            device=device,
        )
        rows.append(_row(case, "PyG GCNConv", time_python(run, repeats, warmup=2), _on(device)))
    return rows


def gat_rows(root, repeats: int, device: str = "cpu") -> list[dict]:
    """The Cora GAT training step (Veličković et al.'s setup), ours and PyG's GATConv."""
    from sparsegcn.datasets import load

    dataset = load("cora", root, download=False)
    rows = []
    for name in ("gat", "gatv2"):
        step, args = registered_step(dataset, name)
        timing = measure(step, args, repeats=repeats, warmup=2)
        rows.append(
            _row(
                f"{name} step cora",
                "sparsegcn",
                list(timing.times_s),
                f"compile {timing.compile_s:.1f} s",
            )
        )
        if peers.have_pyg():
            setup = cora_setup(root)
            data = setup.data
            run = peers.pyg_gat_step(
                setup.graph,
                setup.dense_features,
                np.asarray(data.labels),
                np.asarray(data.train_mask),
                setup.num_classes,
                device=device,
                v2=name == "gatv2",
            )
            label = "PyG GATv2Conv" if name == "gatv2" else "PyG GATConv"
            rows.append(
                _row(f"{name} step cora", label, time_python(run, repeats, warmup=2), _on(device))
            )
    return rows


def format_rows(rows: list[dict]) -> str:
    reference = {}
    for r in rows:
        reference.setdefault(r["case"], r["median_ms"])  # ours (first) per case
    lines = [f"{'case':44s} {'implementation':34s} {'median ms':>10s} {'vs ours':>8s}"]
    for r in rows:
        ratio = r["median_ms"] / reference[r["case"]]
        lines.append(
            f"{r['case']:44s} {r['impl']:34s} {r['median_ms']:10.2f} {ratio:7.2f}x {r['note']}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("propagation", "steps", "gat"), help="run one part")
    add_graph_arguments(parser)
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per measurement")
    parser.add_argument("--arxiv-scale", type=float, default=1.0, help="shrink the arxiv step")
    parser.add_argument(
        "--torch-device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where the torch peers run (default: cuda when JAX runs on a GPU torch sees)",
    )
    parser.add_argument(
        "--step-graphs",
        default="auto",
        metavar="A,B",
        help=f"graph forms our GCN steps run on, side by side, from {STEP_GRAPHS} "
        "(default: auto, the library's choice for this platform)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    parser.add_argument(
        "--default-malloc",
        action="store_true",
        help="leave glibc's malloc as it is (by default freed memory is kept for reuse, as the "
        "sparsegcn command does; see sparsegcn.allocator)",
    )
    args = parser.parse_args(argv)
    if not args.default_malloc:
        keep_freed_memory()
    if not peers.have_pyg():
        print("note: torch_geometric not installed; PyG rows skipped", file=sys.stderr)
    device = peers.torch_device(args.torch_device)
    forms = tuple(f.strip() for f in args.step_graphs.split(",") if f.strip())
    for position, form in enumerate(forms):
        if form not in STEP_GRAPHS:
            parser.error(f"--step-graphs[{position}] = {form!r} is not one of {STEP_GRAPHS}")
    rows = []
    if args.only in (None, "propagation"):
        for kind in ("random", "sbm"):
            rows += propagation_rows(
                kind, args.nodes, args.degree, args.features, args.repeats, device
            )
    if args.only == "gat":
        root = shared_data_root()
        if root is None:
            parser.error("the GAT step needs Cora: set SPARSEGCN_TEST_DATA")
        rows += gat_rows(root, max(args.repeats, 50), device)
    if args.only in (None, "steps"):
        root = shared_data_root()
        if root is not None:
            rows += step_rows("cora", cora_setup(root), max(args.repeats, 50), device, forms)
            rows += gat_rows(root, max(args.repeats, 50), device)
        else:
            print("note: Cora files not found; Cora step skipped", file=sys.stderr)
        setup = arxiv_like_setup(scale=args.arxiv_scale)
        rows += step_rows(
            f"arxiv-sized x{args.arxiv_scale:g}",
            setup,
            args.repeats if device == "cuda" else min(args.repeats, 3),
            device,
            forms,
        )
    print(format_rows(rows))
    machine = machine_info()
    print(
        f"machine: {machine['cpu']}, {machine['cpu_count']} cores, load {machine['load_average']}"
    )
    if args.json:
        from sparsegcn.files import write_json_atomic

        write_json_atomic(args.json, {"rows": rows, "machine": machine, "torch_device": device})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

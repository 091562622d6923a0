"""The backend benchmark matrix behind ``sparsegcn bench``.

A :class:`Matrix` names graph kinds, sizes, degrees, feature widths, passes
and propagation variants; :func:`run_matrix` measures every combination in
one process (so ratios compare like with like on a shared machine) and
returns a report: one record per measurement, the skipped cases with their
reason, the crossovers where sparse beats dense, and the machine.

Figures per record:

- ``median_ms``: median wall time of the compiled call (warm-up excluded,
  ``block_until_ready``), compile time reported apart as ``compile_s``;
- ``gflops``: useful floating-point work, ``2 E F`` per product
  (``fwd_bwd`` does two products), over the median time; the dense
  backend does ``N/deg`` times more work than this counts;
- ``gbps``: effective bandwidth against the minimum bytes a product must
  move, ``x`` and ``y`` once plus the CSR structure (``2 N F b + 4 E + 4 (N+1)``);
- ``peak_bytes``: XLA's peak-memory estimate of the compiled program;
- ``bound_fraction`` (the table's ``% stream``): ``gbps`` over the device's
  no-allocation streaming bandwidth (``machine.stream_gbps``, measured at
  the start of the run with :func:`~sparsegcn.bench.timing.stream_bandwidth`,
  input donated so the timed call allocates nothing): 1.0 would be a product
  moving only its minimum bytes at the memory-bandwidth bound;
- ``gather_floor_ms``: a second floor, for products that gather a row per
  edge: the gathered rows ``E F b``, the output ``N F b`` and the CSR ids
  ``4 E + 4 (N+1)`` per product (:func:`gather_bytes`), moved at
  ``machine.stream_gbps``; ``gather_floor_ratio`` is ``median_ms`` over it
  (the table's ``x gather``; 1.0 would be a gather at the bound).

``machine.stream_fresh_gbps`` is the same ``y = x + 1`` into a fresh output
buffer per call, reported beside the bound: on CPU it mostly measures the
cost of faulting in new pages, so it is no bound to set products against.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import os
import platform
import time
from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp

from sparsegcn.allocator import keeps_freed_memory
from sparsegcn.backends import native, propagate
from sparsegcn.bench.graphs import (
    ALL_VARIANTS,
    ATTENTION_VARIANTS,
    GRAPH_KINDS,
    PACKED_VARIANTS,
    VARIANTS,
    backend_of,
    make_graph,
    propagation_graph,
)
from sparsegcn.bench.timing import measure, stream_bandwidth
from sparsegcn.message_passing import edge_scores, edge_softmax
from sparsegcn.ops.ordering import REORDER_METHODS

PASSES = ("fwd", "fwd_bwd")
REORDERS = (None, *REORDER_METHODS)  # metis and networkit need the order extra
# Variants that compete for the crossover (full float32 precision).
SPARSE_VARIANTS = ("segment", "segment-unpacked", "bcoo", "segment-sorted", "segment-csr")
# Variants measured again after each reordering of the community graphs.
REORDERED_VARIANTS = ("segment", "segment-csr", "segment-csr-xla")
DENSE_MAX_BYTES = 4 * 2**30  # the dense backend's own default limit


@dataclasses.dataclass(frozen=True)
class Matrix:
    """A benchmark matrix: every combination of the listed values is a case.

    Attributes:
      variants: propagation variants (see :data:`sparsegcn.bench.graphs.VARIANTS`;
        :data:`~sparsegcn.bench.graphs.EXTRA_VARIANTS` on request).
      graphs: graph kinds, ``"random"`` and/or ``"sbm"``.
      nodes: node counts ``N``.
      degrees: average degrees (directed edges per node).
      features: feature widths ``F``.
      passes: ``"fwd"`` (``Â x``) and/or ``"fwd_bwd"`` (value and gradient
        with respect to ``x``).
      reorders: node orders for the community graphs' packed ``segment``
        and ``segment-csr`` (and ``segment-csr-xla``) variants:
        ``None`` (as generated) plus any of ``"rcm"``, ``"degree"``,
        ``"community"``, ``"metis"``, ``"networkit"`` (the last two need
        the ``order`` extra).
      repeats: timed calls per case.
      max_case_seconds: stop timing a case after this long.
    """

    variants: tuple[str, ...] = VARIANTS
    graphs: tuple[str, ...] = ("random",)
    nodes: tuple[int, ...] = (1_000, 10_000)
    degrees: tuple[float, ...] = (10,)
    features: tuple[int, ...] = (64,)
    passes: tuple[str, ...] = PASSES
    reorders: tuple[str | None, ...] = (None,)
    repeats: int = 5
    max_case_seconds: float = 20.0

    def __post_init__(self):
        _check_choices("variants", self.variants, ALL_VARIANTS)
        _check_choices("graphs", self.graphs, GRAPH_KINDS)
        _check_choices("passes", self.passes, PASSES)
        _check_choices("reorders", self.reorders, REORDERS)
        for name in ("nodes", "features"):
            values = getattr(self, name)
            if not values or any(int(v) != v or v < 2 for v in values):
                raise ValueError(f"{name} must be integers >= 2, got {values}")
        if not self.degrees or any(not d > 0 for d in self.degrees):
            raise ValueError(f"degrees must be positive, got {self.degrees}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")

    def cases(self) -> list[Case]:
        """Every case, grouped by graph so each graph is generated once."""
        out = []
        for kind, n, degree in itertools.product(self.graphs, self.nodes, self.degrees):
            for features, pass_, variant in itertools.product(
                self.features, self.passes, self.variants
            ):
                reordered = kind == "sbm" and variant in REORDERED_VARIANTS
                orders = self.reorders if reordered else (None,)
                for order in dict.fromkeys(orders):
                    out.append(
                        Case(variant, kind, int(n), float(degree), int(features), pass_, order)
                    )
        return out


def _check_choices(name: str, values: Iterable, allowed: tuple) -> None:
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must not be empty")
    for position, value in enumerate(values):
        if value not in allowed:
            raise ValueError(f"{name}[{position}] = {value!r} is not one of {allowed}")


PRESETS: dict[str, Matrix] = {
    # About a minute here: the plot's three sizes per backend, both passes.
    "quick": Matrix(
        nodes=(32, 256, 2_048, 16_384, 131_072),
        degrees=(8,),
        features=(64,),
        repeats=3,
        max_case_seconds=3,
    ),
    "standard": Matrix(
        graphs=("random", "sbm"),
        nodes=(1_000, 10_000, 100_000),
        degrees=(2, 10, 50),
        features=(16, 64, 256),
        reorders=(None, "rcm"),
    ),
    "full": Matrix(
        graphs=("random", "sbm"),
        nodes=(1_000, 10_000, 100_000, 1_000_000),
        degrees=(2, 10, 100),
        features=(16, 64, 256),
        reorders=(None, "rcm", "degree"),
        max_case_seconds=120,
    ),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One measurement: a variant on one graph, width and pass."""

    variant: str
    graph: str
    num_nodes: int
    avg_degree: float
    features: int
    pass_: str
    reorder: str | None = None

    @property
    def label(self) -> str:
        order = f" {self.reorder}" if self.reorder else ""
        return (
            f"{self.variant}{order} {self.graph} N={self.num_nodes} deg={self.avg_degree:g} "
            f"F={self.features} {self.pass_}"
        )


def estimate_bytes(case: Case, num_edges: int) -> int:
    """A generous estimate of the memory a case needs, to skip what cannot fit."""
    n, f, e = case.num_nodes, case.features, num_edges
    node_arrays = 4 * n * f * (4 if case.pass_ == "fwd_bwd" else 2)
    graph = 4 * e * 8
    if case.variant == "dense":
        return node_arrays + 4 * n * n * (2 if case.pass_ == "fwd_bwd" else 1) + graph
    if case.variant in PACKED_VARIANTS:
        return node_arrays + graph + 8 * n * f
    messages = 4 * e * f * (3 if case.pass_ == "fwd_bwd" else 1)
    return node_arrays + graph + messages


def available_memory() -> int | None:
    """Free memory of the default device in bytes, or None where unknown.

    On an accelerator: its allocator's limit less what is in use; on CPU:
    ``MemAvailable`` from ``/proc/meminfo``.
    """
    device = jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def min_bytes(num_nodes: int, num_edges: int, features: int, itemsize: int = 4) -> int:
    """Minimum bytes one product ``Â x`` moves: ``x`` and ``y`` once, plus CSR ids."""
    return 2 * num_nodes * features * itemsize + 4 * num_edges + 4 * (num_nodes + 1)


def gather_bytes(num_nodes: int, num_edges: int, features: int, itemsize: int = 4) -> int:
    """Bytes one gather-bound product moves: a gathered row per edge, ``y`` once, CSR ids.

    ``E F b + N F b + 4 E + 4 (N+1)``: a product that reads ``x[senders]``
    row by row (no reuse of a row between edges) and writes ``y``.
    """
    return (num_edges + num_nodes) * features * itemsize + 4 * num_edges + 4 * (num_nodes + 1)


def attention(graph, x: jax.Array) -> jax.Array:
    """GAT's sparse path with one head: scores ``LeakyReLU(x_j[0] + x_i[1])``,
    a softmax over each receiver's edges, then ``sum_j alpha_ji x_j`` on the
    graph's own layout."""
    scores = jax.nn.leaky_relu(edge_scores(graph, x[:, 0], x[:, 1]), 0.2)
    return graph.product(x, edge_softmax(graph, scores))


def pass_function(pass_: str, backend) -> Callable:
    """``fn(graph, x, cotangent)`` computing the pass with ``backend``
    (``"attention"``: :func:`attention` on the graph's layout)."""

    def forward(graph, x):
        if backend == "attention":
            return attention(graph, x)
        return propagate(graph, x, backend=backend)

    if pass_ == "fwd":
        return lambda graph, x, cotangent: forward(graph, x)

    def fwd_bwd(graph, x, cotangent):
        return jax.value_and_grad(lambda x: jnp.vdot(forward(graph, x), cotangent))(x)

    return fwd_bwd


def machine_info() -> dict:
    """The machine, the software and the load, recorded with every run."""
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    devices = jax.devices()
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "memory_bytes": _total_memory(),
        "load_average": None if load is None else [round(v, 2) for v in load],
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.device_kind}" for d in devices],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "keeps_freed_memory": keeps_freed_memory(),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        # The CPU CSR product's kernel: built or not, its ISA and threads.
        "native_csr_kernel": {
            key: value for key, value in native.kernel_info().items() if key != "path"
        },
    }


def _total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def run_matrix(
    matrix: Matrix,
    *,
    progress: bool = False,
    seed: int = 0,
    memory_limit: int | None = None,
    dense_max_bytes: int = DENSE_MAX_BYTES,
) -> dict:
    """Measures every case of ``matrix``.

    Args:
      matrix: what to measure.
      progress: show a tqdm progress bar.
      seed: seed of the generated graphs and features.
      memory_limit: skip cases estimated to need more bytes; defaults to
        60% of the memory available when the run starts.
      dense_max_bytes: skip the dense variant beyond this matrix size (its
        own refusal limit).

    Returns:
      ``{"results": [...], "skipped": [...], "crossovers": [...],
      "machine": {...}, "matrix": {...}, "wall_s": float}``; see the
      module docstring for the record fields.
    """
    from tqdm.auto import tqdm

    start = time.perf_counter()
    stream_gbps = stream_bandwidth()
    stream_fresh_gbps = stream_bandwidth(fresh=True)
    if memory_limit is None:
        available = available_memory()
        memory_limit = int(0.6 * available) if available else 2**62
    cases = matrix.cases()
    results, skipped = [], []
    graphs: dict = {}
    prepared: dict = {}
    inputs: dict = {}
    bar = tqdm(cases, disable=not progress, unit="case", leave=False, desc="bench")
    for case in bar:
        bar.set_postfix_str(case.label, refresh=False)
        key = (case.graph, case.num_nodes, case.avg_degree)
        if key not in graphs:
            graphs.clear()
            prepared.clear()
            gc.collect()
            try:
                graphs[key] = make_graph(case.graph, case.num_nodes, case.avg_degree, seed=seed)
            except ValueError as err:
                graphs[key] = err
        base = graphs[key]
        if isinstance(base, ValueError):
            skipped.append(_skip(case, None, f"graph not generated: {base}"))
            continue
        num_edges = base.num_edges
        if case.variant == "dense" and 4 * case.num_nodes**2 > dense_max_bytes:
            skipped.append(_skip(case, num_edges, "dense matrix over the dense backend's limit"))
            continue
        if estimate_bytes(case, num_edges) > memory_limit:
            skipped.append(_skip(case, num_edges, "estimated memory over the limit"))
            continue
        pkey = (key, case.variant, case.reorder)
        if pkey not in prepared:
            graph = base if case.reorder is None else base.reorder(case.reorder).graph
            prepared[pkey] = jax.device_put(propagation_graph(graph, case.variant))
        graph = prepared[pkey]
        ikey = (case.num_nodes, case.features)
        if ikey not in inputs:
            inputs.clear()
            k1, k2 = jax.random.split(jax.random.key(seed))
            shape = (case.num_nodes, case.features)
            inputs[ikey] = (jax.random.normal(k1, shape), jax.random.normal(k2, shape))
        x, cotangent = inputs[ikey]
        fn = pass_function(case.pass_, backend_of(case.variant))
        timing = measure(
            fn,
            (graph, x, cotangent),
            repeats=matrix.repeats,
            max_seconds=matrix.max_case_seconds,
        )
        record = _record(case, graph.num_edges, timing, stream_gbps)
        # Process-wide, and set by packing in CSR on GPU: which lowering BCOO got.
        lowering = jax.config.jax_bcoo_cusparse_lowering  # type: ignore[attr-defined]  # dynamic flag
        record["cusparse_lowering"] = bool(lowering)
        results.append(record)
    bar.close()
    return {
        "results": results,
        "skipped": skipped,
        "crossovers": crossovers(results, skipped),
        "attention": attention_fractions(results),
        "machine": {
            **machine_info(),
            "stream_gbps": stream_gbps,
            "stream_fresh_gbps": stream_fresh_gbps,
        },
        "matrix": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(matrix).items()},
        "wall_s": time.perf_counter() - start,
    }


def _skip(case: Case, num_edges: int | None, reason: str) -> dict:
    return {
        "backend": case.variant,
        "graph": case.graph,
        "num_nodes": case.num_nodes,
        "num_edges": num_edges,
        "avg_degree": case.avg_degree,
        "features": case.features,
        "pass": case.pass_,
        "reorder": case.reorder,
        "reason": reason,
    }


def _record(case: Case, num_edges: int, timing, stream_gbps: float) -> dict:
    products = 2 if case.pass_ == "fwd_bwd" else 1
    median = timing.median_s
    flops = products * 2 * num_edges * case.features
    moved = products * min_bytes(case.num_nodes, num_edges, case.features)
    floor_ms = 1e3 * products * gather_bytes(case.num_nodes, num_edges, case.features)
    floor_ms /= stream_gbps * 1e9
    return {
        "backend": case.variant,
        "graph": case.graph,
        "num_nodes": case.num_nodes,
        "num_edges": num_edges,
        "avg_degree": case.avg_degree,
        "features": case.features,
        "pass": case.pass_,
        "reorder": case.reorder,
        "median_ms": 1e3 * median,
        "min_ms": 1e3 * timing.min_s,
        "times_ms": [1e3 * t for t in timing.times_s],
        "compile_s": timing.compile_s,
        "peak_bytes": timing.peak_bytes,
        "gflops": flops / median / 1e9 if median > 0 else math.inf,
        "gbps": moved / median / 1e9 if median > 0 else math.inf,
        "bound_fraction": moved / median / 1e9 / stream_gbps if median > 0 else math.inf,
        "gather_floor_ms": floor_ms,
        "gather_floor_ratio": 1e3 * median / floor_ms,
    }


def attention_fractions(results: list[dict]) -> list[dict]:
    """Each attention row against the gather + segment_sum of the same shape.

    ``gather_scatter_fraction`` is ``segment-unpacked`` time over attention
    time: 1.0 would mean scores, softmax and the weighted product together
    cost one plain gather + ``segment_sum``, the floor of any edge-wise path.
    """
    plain = {
        (*_group_key(r), r["num_nodes"], r["reorder"]): r["median_ms"]
        for r in results
        if r["backend"] == "segment-unpacked"
    }
    rows = []
    for r in results:
        if r["backend"] not in ATTENTION_VARIANTS:
            continue
        base = plain.get((*_group_key(r), r["num_nodes"], r["reorder"]))
        if base is not None:
            rows.append(
                {
                    "backend": r["backend"],
                    "graph": r["graph"],
                    "pass": r["pass"],
                    "features": r["features"],
                    "num_nodes": r["num_nodes"],
                    "median_ms": r["median_ms"],
                    "gather_scatter_ms": base,
                    "gather_scatter_fraction": base / r["median_ms"],
                }
            )
    return rows


def _group_key(record: dict) -> tuple:
    return (record["graph"], record["pass"], record["features"], record["avg_degree"])


def crossovers(results: list[dict], skipped: Iterable[dict] = ()) -> list[dict]:
    """Where sparse beats dense, per (graph, pass, features, degree).

    For each group, sizes are scanned upward; the crossover is the smallest
    ``N`` from which the fastest sparse variant beats dense at every
    measured size (a dense case skipped for its size counts as a loss for
    dense). ``crossover_nodes`` is None when dense stays ahead throughout;
    groups where dense was neither measured nor refused are left out.
    """
    refused = {(_group_key(s), s["num_nodes"]) for s in skipped if s["backend"] == "dense"}
    groups: dict = {}
    for record in results:
        if record["reorder"] is not None:
            continue
        sizes = groups.setdefault(_group_key(record), {})
        sizes.setdefault(record["num_nodes"], {})[record["backend"]] = record
    out = []
    for key, sizes in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        verdicts = []
        for n in sorted(sizes):
            by_backend = sizes[n]
            sparse = [by_backend[v] for v in SPARSE_VARIANTS if v in by_backend]
            if not sparse:
                continue
            best = min(sparse, key=lambda r: r["median_ms"])
            dense = by_backend.get("dense")
            if dense is None and (key, n) not in refused:
                continue
            wins = dense is None or best["median_ms"] < dense["median_ms"]
            verdicts.append((n, best, wins))
        if not verdicts:
            continue  # dense neither measured nor refused: nothing to compare
        crossover = None
        for i, (n, best, _) in enumerate(verdicts):
            if all(w for _, _, w in verdicts[i:]):
                crossover = (n, best)
                break
        graph, pass_, features, degree = key
        out.append(
            {
                "graph": graph,
                "pass": pass_,
                "features": features,
                "avg_degree": degree,
                "crossover_nodes": None if crossover is None else crossover[0],
                "crossover_edges": None if crossover is None else crossover[1]["num_edges"],
                "fastest_sparse": None if crossover is None else crossover[1]["backend"],
                "density": None
                if crossover is None
                else crossover[1]["num_edges"] / float(crossover[0]) ** 2,
            }
        )
    return out


def format_table(report: dict) -> str:
    """The report as a text table, backend x size, with the crossovers marked."""
    header = (
        "graph",
        "pass",
        "F",
        "deg",
        "N",
        "E",
        "backend",
        "median ms",
        "GFLOP/s",
        "GB/s",
        "% stream",
        "x gather",
        "peak MiB",
        "vs dense",
        "",
    )
    marks = {
        (
            c["graph"],
            c["pass"],
            c["features"],
            c["avg_degree"],
            c["crossover_nodes"],
            c["fastest_sparse"],
        )
        for c in report["crossovers"]
        if c["crossover_nodes"] is not None
    }
    dense_ms = {
        (*_group_key(r), r["num_nodes"]): r["median_ms"]
        for r in report["results"]
        if r["backend"] == "dense"
    }
    rows = []
    ordered = sorted(
        report["results"],
        key=lambda r: (
            r["graph"],
            r["pass"],
            r["features"],
            r["avg_degree"],
            r["num_nodes"],
            ALL_VARIANTS.index(r["backend"]),
            str(r["reorder"]),
        ),
    )
    for r in ordered:
        group = _group_key(r)
        dense = dense_ms.get((*group, r["num_nodes"]))
        ratio = "" if dense is None or r["backend"] == "dense" else f"{dense / r['median_ms']:.2f}x"
        crossing = r["reorder"] is None and (*group, r["num_nodes"], r["backend"]) in marks
        backend = r["backend"] + (f" +{r['reorder']}" if r["reorder"] else "")
        rows.append(
            (
                r["graph"],
                r["pass"],
                str(r["features"]),
                f"{r['avg_degree']:g}",
                str(r["num_nodes"]),
                str(r["num_edges"]),
                backend,
                f"{r['median_ms']:.3f}",
                f"{r['gflops']:.2f}",
                f"{r['gbps']:.2f}",
                f"{100 * r['bound_fraction']:.1f}" if "bound_fraction" in r else "",
                f"{r['gather_floor_ratio']:.2f}" if "gather_floor_ratio" in r else "",
                f"{r['peak_bytes'] / 2**20:.1f}",
                ratio,
                "<- crossover" if crossing else "",
            )
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    for c in report["crossovers"]:
        where = (
            "dense stays ahead at every measured size"
            if c["crossover_nodes"] is None
            else f"sparse ({c['fastest_sparse']}) beats dense from N={c['crossover_nodes']} "
            f"(E={c['crossover_edges']}, density {c['density']:.2g})"
        )
        lines.append(
            f"crossover {c['graph']} {c['pass']} F={c['features']} deg={c['avg_degree']:g}: {where}"
        )
    for a in report.get("attention", []):
        lines.append(
            f"attention {a['graph']} {a['pass']} F={a['features']} N={a['num_nodes']}: "
            f"{a['backend']} {a['median_ms']:.3f} ms, {100 * a['gather_scatter_fraction']:.0f}% "
            f"of the speed of one gather + segment_sum ({a['gather_scatter_ms']:.3f} ms)"
        )
    if report["skipped"]:
        lines.append(f"skipped {len(report['skipped'])} case(s):")
        for s in report["skipped"]:
            lines.append(
                f"  {s['backend']} {s['graph']} N={s['num_nodes']} F={s['features']} "
                f"{s['pass']}: {s['reason']}"
            )
    machine = report["machine"]
    lines.append(
        f"machine: {machine['cpu']}, {machine['cpu_count']} cores, jax {machine['jax']} "
        f"({machine['backend']}), load {machine['load_average']}"
        + (f", {machine['devices'][0]}" if machine.get("backend") != "cpu" else "")
        + (
            f", streaming bandwidth {machine['stream_gbps']:.1f} GB/s (no allocation)"
            if "stream_gbps" in machine
            else ""
        )
        + (
            f", {machine['stream_fresh_gbps']:.1f} GB/s into a fresh buffer"
            if "stream_fresh_gbps" in machine
            else ""
        )
    )
    if "stream_gbps" in machine:
        lines.append(
            "% stream: minimum bytes (x, y, CSR ids) over the median, against the no-allocation "
            "bound; x gather: median over the gather floor (a row per edge + y + ids at that bound)"
        )
    return "\n".join(lines)

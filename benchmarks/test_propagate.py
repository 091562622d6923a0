"""``propagate`` forward and forward+backward for every backend, across sizes,
degrees, widths and graph kinds (random and community-structured).

Backend variants (see :mod:`sparsegcn.bench.graphs`): ``dense``;
``segment`` on a graph packed in sliced ELL (``pack_gcn_norm``);
``segment-csr`` on one packed in CSR (what ``sparsegcn train`` uses);
``segment-unpacked``, the same backend on the plain edge list; ``bcoo``.
All run on ``Â = D^-1/2 (A + I) D^-1/2``.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import pytest
from conftest import run_compiled

from sparsegcn.bench.graphs import backend_of, make_graph, propagation_graph
from sparsegcn.bench.runner import Case, available_memory, estimate_bytes, pass_function

SPARSE = ("segment", "segment-csr", "segment-unpacked", "bcoo")
ALL = ("dense", *SPARSE)
DENSE_MAX_NODES = 16_384


def default_cases() -> list[Case]:
    """About 40 cases: a size sweep, a degree sweep, a width sweep, and SBM with reordering."""
    cases = []
    for n, pass_, variant in itertools.product((1_000, 10_000, 100_000), ("fwd", "fwd_bwd"), ALL):
        cases.append(Case(variant, "random", n, 10.0, 64, pass_))
    for degree, variant in itertools.product((2.0, 50.0), SPARSE):
        cases.append(Case(variant, "random", 10_000, degree, 64, "fwd"))
    for features, variant in itertools.product((16, 256), SPARSE):
        cases.append(Case(variant, "random", 10_000, 10.0, features, "fwd"))
    for pass_ in ("fwd", "fwd_bwd"):
        for variant in SPARSE:
            cases.append(Case(variant, "sbm", 100_000, 10.0, 64, pass_))
        cases.append(Case("segment", "sbm", 100_000, 10.0, 64, pass_, "rcm"))
        for order in ("rcm", "community"):
            cases.append(Case("segment-csr", "sbm", 100_000, 10.0, 64, pass_, order))
    return cases


def full_cases() -> list[Case]:
    cases = []
    for kind, n, degree, features, pass_, variant in itertools.product(
        ("random", "sbm"),
        (1_000, 10_000, 100_000, 1_000_000),
        (2.0, 10.0, 100.0),
        (16, 64, 256),
        ("fwd", "fwd_bwd"),
        ALL,
    ):
        reordered = kind == "sbm" and variant in ("segment", "segment-csr")
        orders = (None, "rcm", "degree", "community") if reordered else (None,)
        cases.extend(Case(variant, kind, n, degree, features, pass_, o) for o in orders)
    return cases


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = full_cases() if metafunc.config.getoption("--full") else default_cases()
        metafunc.parametrize("case", cases, ids=[c.label.replace(" ", "-") for c in cases])


_GRAPHS: dict = {}
_PREPARED: dict = {}


def prepared_graph(case: Case):
    """Generates each graph once per pytest run and its per-variant form once."""
    key = (case.graph, case.num_nodes, case.avg_degree)
    if key not in _GRAPHS:
        _GRAPHS.clear()
        _PREPARED.clear()
        try:
            _GRAPHS[key] = make_graph(case.graph, case.num_nodes, case.avg_degree)
        except ValueError as err:
            _GRAPHS[key] = err
    base = _GRAPHS[key]
    if isinstance(base, ValueError):
        pytest.skip(f"graph not generated: {base}")
    pkey = (key, case.variant, case.reorder)
    if pkey not in _PREPARED:
        graph = base if case.reorder is None else base.reorder(case.reorder).graph
        _PREPARED[pkey] = jax.device_put(propagation_graph(graph, case.variant))
    return _PREPARED[pkey]


def test_propagate(benchmark, case):
    if case.variant == "dense" and case.num_nodes > DENSE_MAX_NODES:
        pytest.skip(f"dense N={case.num_nodes}: the N x N matrix would not fit the dense limit")
    graph = prepared_graph(case)
    limit = available_memory()
    if limit is not None and estimate_bytes(case, graph.num_edges) > 0.6 * limit:
        pytest.skip(f"{case.label}: estimated memory over 60% of the {limit / 2**30:.1f} GiB free")
    benchmark.group = f"propagate {case.graph} {case.pass_} N={case.num_nodes} deg={case.avg_degree:g} F={case.features}"
    key1, key2 = jax.random.split(jax.random.key(0))
    shape = (case.num_nodes, case.features)
    x, cotangent = jax.random.normal(key1, shape), jax.random.normal(key2, shape)
    products = 2 if case.pass_ == "fwd_bwd" else 1
    rounds = 3 if case.num_nodes * case.avg_degree * case.features > 5e8 else 7
    out = run_compiled(
        benchmark,
        pass_function(case.pass_, backend_of(case.variant)),
        (graph, x, cotangent),
        rounds=rounds,
        extra=dict(
            num_edges=graph.num_edges,
            useful_gflop=products * 2 * graph.num_edges * case.features / 1e9,
            reorder=case.reorder,
        ),
    )
    first = out if case.pass_ == "fwd" else out[1]
    assert bool(jnp.all(jnp.isfinite(first)))

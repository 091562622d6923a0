"""The view protocol on every layout, against dense references (sparsegcn/views.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import GRAPH_CASES, random_graph
from sweep import covering

import sparsegcn as sg
from sparsegcn.backends import LAYOUTS, as_layout
from sparsegcn.views import Bipartite

HEADS = 3


def dense_heads(graph: sg.Graph, w: jax.Array, x: jax.Array) -> jax.Array:
    """``y[:, h] = A_h x[:, h]`` with ``A_h[r, s] += w[e, h]``: the oracle."""
    n = graph.num_nodes
    r, s = np.asarray(graph.receivers), np.asarray(graph.senders)
    mats = [jnp.zeros((n, n)).at[r, s].add(w[:, h]) for h in range(w.shape[1])]
    return jnp.stack([m @ x[:, h] for h, m in enumerate(mats)], axis=1)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
def test_product_with_stored_weights_matches_dense(layout, case):
    graph = GRAPH_CASES[case]()
    view = as_layout(graph, layout)
    assert view.layout_name == layout
    x = jax.random.normal(jax.random.key(0), (graph.num_nodes, 5))
    expected = graph.to_dense() @ x
    np.testing.assert_allclose(view.product(x), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sg.propagate(view, x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("case", "layout"),
    covering(["random", "unweighted", "single_node_loop", "isolated_heavy"], LAYOUTS, strength=1),
)
def test_product_with_run_time_head_weights_matches_dense_forward_and_gradient(layout, case):
    """Attention-style weights, per head, in the view's own edge order, eager and jitted."""
    view = as_layout(GRAPH_CASES[case](), layout)
    e, n = view.num_edges, view.num_nodes
    kw, kx = jax.random.split(jax.random.key(1))
    w = jax.random.uniform(kw, (e, HEADS), minval=0.1, maxval=1.0)
    x = jax.random.normal(kx, (n, HEADS, 4))
    # The view's edges, in its own order, are the oracle's.
    edges = sg.Graph(np.asarray(view.senders), np.asarray(view.receivers), None, n)

    def loss(fn, w, x):
        return jnp.sum(jnp.sin(fn(w, x)))

    ours = lambda w, x: view.product(x, w)  # noqa: E731
    reference = lambda w, x: dense_heads(edges, w, x)  # noqa: E731
    np.testing.assert_allclose(ours(w, x), reference(w, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(ours)(w, x), reference(w, x), rtol=1e-5, atol=1e-5)
    got = jax.jit(jax.grad(lambda w, x: loss(ours, w, x), argnums=(0, 1)))(w, x)
    want = jax.jit(jax.grad(lambda w, x: loss(reference, w, x), argnums=(0, 1)))(w, x)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_packed_weighted_product_is_one_kernel_call_per_head_without_edge_buffers():
    """The CSR kernel runs on run-time weights: the lowered forward holds no [E, F] array."""
    graph = as_layout(random_graph(200, 900, seed=4), "csr")
    w = jnp.ones((graph.num_edges,))
    x = jnp.ones((graph.num_nodes, 64))
    text = jax.jit(lambda w, x: graph.product(x, w)).lower(w, x).as_text()
    assert "csr" in text.lower() or "bcsr" in text.lower() or "sparse" in text.lower()
    assert f"{graph.num_edges}x64" not in text


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_eager_products_compile_once(layout):
    # Called outside jit, the ELL product (a cond) and the per-head CSR product (a loop
    # over heads) built fresh branch and body functions on every call, and so compiled
    # on every call: 0.3-1.9 s a call instead of milliseconds.
    graph = as_layout(random_graph(40, 120, seed=4), layout)
    x = jax.random.normal(jax.random.key(0), (40, 2, 4), jnp.float32)
    heads = jax.random.uniform(jax.random.key(1), (graph.num_edges, 2), jnp.float32)
    flat = x.reshape(40, 8)
    calls = lambda: (graph.product(flat), graph.product(x, heads))  # noqa: E731
    jax.block_until_ready(calls())
    compiled = []
    listener = lambda event, duration, **kw: compiled.append(event) if "compile" in event else None  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for _ in range(3):
            jax.block_until_ready(calls())
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiled == []


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_masked_bipartite_aggregate_matches_numpy(reduce):
    rng = np.random.default_rng(5)
    senders = rng.integers(0, 6, 20).astype(np.int32)
    receivers = np.sort(rng.integers(0, 4, 20)).astype(np.int32)
    mask = rng.random(20) < 0.7
    mask[receivers == 3] = False  # target 3: only padding edges
    view = Bipartite(senders, receivers, None, mask, 0, 6, 4, edges_sorted=True)
    messages = jnp.asarray(rng.standard_normal((20, 2)), jnp.float32)
    out = np.asarray(view.aggregate(messages, reduce))
    ops = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
    for t in range(4):
        rows = np.asarray(messages)[(receivers == t) & mask]
        expected = ops[reduce](rows, axis=0) if rows.size else np.zeros(2)
        np.testing.assert_allclose(out[t], expected, rtol=1e-6, atol=1e-6)


def test_masked_softmax_ignores_padding_and_sums_to_one():
    senders = np.array([0, 1, 2, 3, 4], np.int32)
    receivers = np.array([0, 0, 0, 1, 1], np.int32)
    mask = np.array([True, True, False, False, False])
    view = Bipartite(senders, receivers, None, mask, 0, 5, 2)
    alpha = np.asarray(view.softmax(jnp.array([1.0, 2.0, 50.0, 3.0, 4.0])))
    e = np.exp([1.0, 2.0])
    np.testing.assert_allclose(alpha, [e[0] / e.sum(), e[1] / e.sum(), 0, 0, 0], rtol=1e-6)


def test_bipartite_targets_slice_from_dst_start():
    view = Bipartite(np.array([0], np.int32), np.array([0], np.int32), None, None, 3, 8, 2)
    h = jnp.arange(8.0)[:, None]
    np.testing.assert_array_equal(view.targets(h)[:, 0], [3.0, 4.0])


def test_unknown_layout_and_reduce_are_refused_with_the_name():
    graph = GRAPH_CASES["random"]()
    with pytest.raises(ValueError, match="unknown layout 'coo'"):
        as_layout(graph, "coo")
    with pytest.raises(ValueError, match="unknown reduce 'median'"):
        graph.aggregate(jnp.ones((graph.num_edges, 1)), "median")


def test_product_refuses_wrong_row_count():
    graph = GRAPH_CASES["random"]()
    with pytest.raises(ValueError, match="x_src"):
        graph.product(jnp.ones((graph.num_nodes + 1, 2)))


_S, _R = np.array([0, 1, 2]), np.array([0, 0, 1])


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        # Before: a length-1 weight or mask applied to every edge, an int mask weighted
        # its edges, and an out-of-range dst_start was clamped by dynamic_slice.
        (
            lambda: Bipartite(_S, _R, np.array([2.0], np.float32), None, 0, 3, 2),
            ValueError,
            r"weights must have shape \(3,\), one per edge, got \(1,\)",
        ),
        (
            lambda: Bipartite(_S, _R, None, np.array([False]), 0, 3, 2),
            ValueError,
            r"edge_mask must have shape \(3,\), one per edge, got \(1,\)",
        ),
        (
            lambda: Bipartite(_S, _R, None, np.array([1, 0, 2]), 0, 3, 2),
            TypeError,
            r"edge_mask must be bool .* got dtype int64",
        ),
        (
            lambda: Bipartite(_S, _R, np.array([1.0, np.nan, 1.0]), None, 0, 3, 2),
            ValueError,
            r"weights\[1\] = nan is not finite",
        ),
        (
            lambda: Bipartite(_S, _R, None, None, 5, 3, 2).targets(jnp.arange(3.0)),
            ValueError,
            r"targets are rows \[5, 7\) of h, which has 3 rows",
        ),
        (
            lambda: sg.message_passing(
                sg.Graph(_S, _R, None, 3),
                jnp.ones((3, 2)),
                message=lambda x_j, x_i, e: x_j * e,
                edge_features=jnp.array([[10.0]]),
            ),
            ValueError,
            r"edge_features has 1 rows but the graph has num_edges=3",
        ),
    ],
)
def test_bipartite_fields_and_edge_features_need_one_row_per_edge(make, error, words):
    with pytest.raises(error, match=words):
        make()


def test_a_checked_bipartite_view_still_masks_and_slices():
    view = Bipartite(_S, _R, np.ones(3, np.float32), np.array([True, False, True]), 1, 3, 2)
    x = jnp.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(sg.message_passing(view, x), [[0.0, 1.0], [4.0, 5.0]])
    np.testing.assert_array_equal(view.targets(jnp.arange(3.0)), [1.0, 2.0])

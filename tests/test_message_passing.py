"""message_passing, edge_scores and edge_softmax against NumPy loops (sparsegcn/message_passing.py)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import GRAPH_CASES, random_graph

from sparsegcn import Bipartite, Graph
from sparsegcn.backends import LAYOUTS, as_layout
from sparsegcn.message_passing import edge_scores, edge_softmax, message_passing


def loop_aggregate(graph, messages: np.ndarray, reduce: str) -> np.ndarray:
    """The per-target reduction, one target at a time."""
    r = np.asarray(graph.receivers)
    out = np.zeros((graph.num_nodes, *messages.shape[1:]), np.float64)
    for t in range(graph.num_nodes):
        rows = messages[r == t].astype(np.float64)
        if rows.size == 0:
            continue
        if reduce == "softmax":
            a = np.exp(rows - rows.max(axis=0))
            out[t] = (a / a.sum(axis=0) * rows).sum(axis=0)
        else:
            out[t] = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[reduce](
                rows, axis=0
            )
    return out


@pytest.mark.parametrize("aggregate", ["sum", "mean", "max", "min", "softmax"])
@pytest.mark.parametrize("case", ["random", "unweighted", "isolated_heavy", "no_edges"])
def test_every_aggregation_matches_a_loop(aggregate, case):
    graph = GRAPH_CASES[case]()
    x = np.random.default_rng(0).standard_normal((graph.num_nodes, 3)).astype(np.float32)
    s = np.asarray(graph.senders)
    w = np.asarray(graph.edge_weights(), np.float32)
    expected = loop_aggregate(graph, x[s] * w[:, None], aggregate)
    got = message_passing(graph, jnp.asarray(x), aggregate=aggregate)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    jitted = jax.jit(lambda x: message_passing(graph, x, aggregate=aggregate))(jnp.asarray(x))
    np.testing.assert_allclose(jitted, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_custom_message_with_edge_features_and_targets(layout):
    """A message reading both endpoints and edge features, reduced by max, on every layout."""
    view = as_layout(random_graph(20, 60, seed=6, weighted=False), layout)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((20, 4)).astype(np.float32)
    e = rng.standard_normal((view.num_edges, 4)).astype(np.float32)

    def message(x_j, x_i, feats):
        return jax.nn.relu(x_j - x_i + feats)

    got = message_passing(
        view, jnp.asarray(x), jnp.asarray(x), message=message, aggregate="max", edge_features=e
    )
    s, r = np.asarray(view.senders), np.asarray(view.receivers)
    expected = loop_aggregate(view, np.maximum(x[s] - x[r] + e, 0), "max")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_fused_sum_equals_gather_path_forward_and_gradient():
    """The fused weighted sum and a hand-written message give the same values and gradients."""
    graph = as_layout(random_graph(40, 150, seed=7), "csr")
    x = jax.random.normal(jax.random.key(0), (40, 8))
    w = jax.random.uniform(jax.random.key(1), (graph.num_edges,))

    def fused(x, w):
        return jnp.sum(message_passing(graph, x, edge_weight=w) ** 2)

    def explicit(x, w):
        out = message_passing(graph, x, message=lambda xj, xi, e: xj, edge_weight=w)
        return jnp.sum(out**2)

    np.testing.assert_allclose(fused(x, w), explicit(x, w), rtol=1e-5)
    for a, b in zip(jax.grad(fused, (0, 1))(x, w), jax.grad(explicit, (0, 1))(x, w), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_edge_softmax_sums_to_one_per_target_and_survives_large_scores():
    graph = random_graph(30, 120, seed=8)
    scores = jnp.asarray(np.random.default_rng(2).uniform(-1e4, 1e4, (graph.num_edges, 2)))
    scores = scores.astype(jnp.float32)
    alpha = np.asarray(edge_softmax(graph, scores))
    assert np.isfinite(alpha).all()
    r = np.asarray(graph.receivers)
    for t in np.unique(r):
        np.testing.assert_allclose(alpha[r == t].sum(axis=0), 1.0, rtol=1e-5)


def test_edge_scores_add_the_endpoint_shares():
    graph = random_graph(10, 30, seed=9)
    a = jnp.arange(10.0)[:, None] * jnp.ones((1, 2))
    b = 100.0 * jnp.arange(10.0)[:, None] * jnp.ones((1, 2))
    s, r = np.asarray(graph.senders), np.asarray(graph.receivers)
    np.testing.assert_allclose(edge_scores(graph, a, b)[:, 0], s + 100.0 * r)


def test_bad_aggregation_and_orphan_edge_features_are_refused():
    graph = random_graph(5, 8, seed=1)
    x = jnp.ones((5, 2))
    with pytest.raises(ValueError, match="unknown aggregate 'median'"):
        message_passing(graph, x, aggregate="median")
    with pytest.raises(ValueError, match="edge_features need a message function"):
        message_passing(graph, x, edge_features=jnp.ones((graph.num_edges, 2)))


def small_graph() -> Graph:
    """4 edges on 3 nodes; node 2 receives from node 1 only."""
    return Graph(np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1]), num_nodes=3)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("aggregate", ["sum", "mean", "max", "min", "softmax"])
def test_x_src_without_one_row_per_node_is_refused_on_every_path(layout, aggregate):
    view = as_layout(small_graph(), layout)
    short = jnp.ones((2, 1))
    with pytest.raises(ValueError, match=r"x_src has 2 rows .*num_nodes=3; x_src.shape = \(2, 1\)"):
        message_passing(view, short, aggregate=aggregate)
    with pytest.raises(ValueError, match="x_src has 2 rows"):
        jax.jit(lambda x: message_passing(view, x, aggregate=aggregate))(short)
    with pytest.raises(ValueError, match="x_src has 2 rows"):
        message_passing(view, short, message=lambda xj, xi, e: xj, aggregate=aggregate)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_short_x_dst_and_scores_are_refused(layout):
    view = as_layout(small_graph(), layout)
    x = jnp.ones((3, 1))
    with pytest.raises(ValueError, match=r"x_dst has 2 rows .*x_dst.shape = \(2, 1\)"):
        message_passing(view, x, jnp.ones((2, 1)), message=lambda xj, xi, e: xj * xi)
    with pytest.raises(ValueError, match=r"score_dst has 2 rows .*score_dst.shape = \(2,\)"):
        edge_scores(view, jnp.zeros(3), jnp.array([1.0, 10.0]))
    with pytest.raises(ValueError, match=r"score_src has 2 rows"):
        edge_scores(view, jnp.array([1.0, 10.0]), jnp.zeros(3))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("aggregate", ["sum", "mean", "max", "softmax"])
@pytest.mark.parametrize("shape", [(1,), (3,), (5,), (4, 1, 1), ()])
def test_edge_weight_of_the_wrong_shape_is_refused_alike_by_every_layout(layout, aggregate, shape):
    view = as_layout(small_graph(), layout)
    x = jnp.ones((3, 2))
    expected = rf"edge_weight must have shape \(4,\) or \(4, H\), got {re.escape(str(shape))}"
    with pytest.raises(ValueError, match=expected):
        message_passing(view, x, aggregate=aggregate, edge_weight=jnp.ones(shape))
    with pytest.raises(ValueError, match=expected):
        jax.jit(lambda w: message_passing(view, x, aggregate=aggregate, edge_weight=w))(
            jnp.ones(shape)
        )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("heads", [1, 3])
def test_per_head_edge_weight_must_match_the_heads_of_x(layout, heads):
    graph = Graph(np.array([0, 1, 1, 2, 2]), np.array([1, 0, 2, 1, 1]), num_nodes=3)
    view = as_layout(graph, layout)
    x = jnp.ones((3, 2, 4))
    with pytest.raises(ValueError, match=rf"per-head edge_weight \(5, {heads}\) needs x of shape"):
        view.product(x, jnp.ones((5, heads)))
    with pytest.raises(ValueError, match="per-head edge_weight"):
        message_passing(view, x, edge_weight=jnp.ones((5, heads)))
    with pytest.raises(ValueError, match="per-head edge_weight"):
        message_passing(view, x, aggregate="max", edge_weight=jnp.ones((5, heads)))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("aggregate", ["sum", "max"])
def test_per_head_edge_weight_under_vmap_matches_a_loop(layout, aggregate):
    """GAT's shapes, ``x [N, H, F]`` and ``alpha [E, H]``, batched: the checks
    see the per-example shapes."""
    view = as_layout(random_graph(8, 20, seed=3), layout)
    rng = np.random.default_rng(4)
    xs = jnp.asarray(rng.standard_normal((2, 8, 3, 2)), jnp.float32)
    ws = jnp.asarray(rng.uniform(size=(2, view.num_edges, 3)), jnp.float32)
    s = np.asarray(view.senders)
    got = jax.vmap(lambda x, w: message_passing(view, x, aggregate=aggregate, edge_weight=w))(
        xs, ws
    )
    for b in range(2):
        messages = np.asarray(xs[b])[s] * np.asarray(ws[b])[:, :, None]
        expected = loop_aggregate(view, messages, aggregate)
        np.testing.assert_allclose(got[b], expected, rtol=1e-5, atol=1e-5)


def test_bipartite_refuses_concrete_ids_out_of_range():
    with pytest.raises(ValueError, match=r"senders\[1\] = 5 is out of range.*num_src=2"):
        Bipartite(jnp.array([0, 5]), jnp.array([0, 0]), num_src=2, num_dst=1)
    with pytest.raises(ValueError, match=r"receivers\[1\] = 3 is out of range.*num_dst=1"):
        Bipartite(np.array([0, 1]), np.array([0, 3]), num_src=2, num_dst=1)
    with pytest.raises(ValueError, match=r"senders\[0\] = -1"):
        Bipartite(np.array([-1, 1]), np.array([0, 0]), num_src=2, num_dst=1)


def test_bipartite_with_traced_ids_is_built_unchecked():
    def run(senders, receivers, x):
        view = Bipartite(senders, receivers, num_src=2, num_dst=1)
        return message_passing(view, x)

    out = jax.jit(run)(jnp.array([0, 1]), jnp.array([0, 0]), jnp.array([[1.0], [10.0]]))
    np.testing.assert_allclose(out, [[11.0]])


def _padded_view():
    """Targets 0 and 1; edge 2 -> 1 is padding (masked), and source row 2 holds inf."""
    view = Bipartite(
        np.array([0, 1, 2], np.int32), np.array([0, 1, 1], np.int32), None,
        np.array([True, True, False]), 0, 3, 2,
    )  # fmt: skip
    real = Bipartite(np.array([0, 1], np.int32), np.array([0, 1], np.int32), num_src=3, num_dst=2)
    return view, real, jnp.array([[1.0], [2.0], [jnp.inf]])


@pytest.mark.parametrize("aggregate", ["sum", "mean", "max", "min", "softmax"])
@pytest.mark.parametrize("with_message", [False, True])
def test_a_non_finite_row_on_a_padding_edge_changes_nothing(aggregate, with_message):
    """Masked edges carry no message: the result and the gradient equal those of
    the graph without the padding edge (0 * inf would be NaN)."""
    view, real, x = _padded_view()
    message = (lambda xj, xi, e: 2.0 * xj) if with_message else None

    def total(v, xx):
        return jnp.sum(message_passing(v, xx, aggregate=aggregate, message=message))

    want = message_passing(real, x, aggregate=aggregate, message=message)
    np.testing.assert_allclose(message_passing(view, x, aggregate=aggregate, message=message), want)
    np.testing.assert_allclose(
        jax.grad(lambda xx: total(view, xx))(x), jax.grad(lambda xx: total(real, xx))(x)
    )
    scale = 2.0 if with_message else 1.0
    np.testing.assert_allclose(want, [[scale], [2.0 * scale]])  # by hand


def test_sampled_blocks_leave_a_padding_child_out_even_when_it_is_infinite():
    from sparsegcn.sampling.blocks import TreeBlock
    from sparsegcn.sampling.dedup import DedupBlock

    x = jnp.array([[1.0], [3.0], [jnp.inf]])  # the root, a real child, a padding child
    mask = jnp.array([True, False])
    for block in (
        TreeBlock((1, 2), (2,), mask),
        DedupBlock((1, 2), (2,), jnp.array([1, 2], jnp.int32), mask),
    ):
        np.testing.assert_array_equal(block.product(x), [[3.0]])
        grad = jax.grad(lambda xx, b=block: jnp.sum(b.product(xx)))(x)
        np.testing.assert_array_equal(grad, [[0.0], [1.0], [0.0]])


@pytest.mark.parametrize("aggregate", ["sum", "max", "min"])
def test_integer_messages_scaled_by_float_weights_are_not_truncated(aggregate):
    """int x with float weights gives what float x gives (numpy and torch promote too)."""
    weights = np.array([0.5, 2.5, -1.5], np.float32)
    g = Graph(np.array([0, 1, 0]), np.array([2, 2, 1]), weights, 3)
    x_int = jnp.array([[4], [3], [0]], jnp.int32)
    as_is = (lambda xj, xi, e: xj) if aggregate == "sum" else None
    got = message_passing(g, x_int, aggregate=aggregate, message=as_is)
    assert jnp.issubdtype(got.dtype, jnp.floating)
    want = loop_aggregate(g, np.array([[2.0], [7.5], [-6.0]]), aggregate)  # w_e x_{s_e}
    np.testing.assert_allclose(got, want)
    unweighted = Graph(np.array([0, 1, 0]), np.array([2, 2, 1]), None, 3)
    np.testing.assert_allclose(
        message_passing(unweighted, x_int, aggregate=aggregate, message=as_is, edge_weight=weights),
        want,
    )


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_masked_integer_and_bool_extrema(reduce):
    """The fill of a masked max (min) is the dtype's own least (greatest) value."""
    view = Bipartite(
        np.array([0, 1, 1], np.int32), np.array([0, 0, 1], np.int32), None,
        np.array([True, False, False]), 0, 2, 2,
    )  # fmt: skip
    ints = jnp.array([[3], [-7]], jnp.int32)
    got = message_passing(view, ints, aggregate=reduce)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, [[3], [0]])  # target 1 has only a padding edge
    bools = jnp.array([[False], [True]])
    np.testing.assert_array_equal(
        message_passing(view, bools, aggregate=reduce), [[False], [False]]
    )

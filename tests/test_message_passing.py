"""message_passing, edge_scores and edge_softmax against NumPy loops (sparsegcn/message_passing.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import GRAPH_CASES, random_graph

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

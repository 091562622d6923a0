"""Every backend against an independent dense reference: forward, gradients,
jit and vmap, on graphs with duplicates, self-loops, isolated nodes, unsorted
edges, a single node and no edges."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import GRAPH_CASES

import sparsegcn as sg
from sparsegcn.backends import Dense

BACKENDS = ["dense", "segment", "bcoo"]
TOL = dict(rtol=2e-5, atol=2e-5)  # float32 sums of up to ~10 terms of size ~2


def reference_matrix(g: sg.Graph) -> np.ndarray:
    """``A[r, s] = sum of w`` in float64, built by hand."""
    a = np.zeros((g.num_nodes, g.num_nodes))
    w = np.ones(g.num_edges) if g.weights is None else np.asarray(g.weights, np.float64)
    np.add.at(a, (np.asarray(g.receivers), np.asarray(g.senders)), w)
    return a


def features(g: sg.Graph, width: int = 3, seed: int = 0) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), (g.num_nodes, width), jnp.float32)


@pytest.fixture(params=list(GRAPH_CASES), ids=list(GRAPH_CASES))
def graph(request):
    return GRAPH_CASES[request.param]()


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_matches_reference(graph, backend):
    x = features(graph)
    expected = reference_matrix(graph) @ np.asarray(x, np.float64)
    np.testing.assert_allclose(sg.propagate(graph, x, backend=backend), expected, **TOL)
    jitted = jax.jit(lambda g, x: sg.propagate(g, x, backend=backend))
    np.testing.assert_allclose(jitted(graph, x), expected, **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vector_and_higher_rank_inputs(backend):
    g = GRAPH_CASES["random"]()
    a = reference_matrix(g)
    v = features(g, 1)[:, 0]
    np.testing.assert_allclose(sg.propagate(g, v, backend=backend), a @ np.asarray(v), **TOL)
    t = jax.random.normal(jax.random.key(3), (g.num_nodes, 2, 3), jnp.float32)
    expected = np.einsum("rs,sij->rij", a, np.asarray(t, np.float64))
    np.testing.assert_allclose(sg.propagate(g, t, backend=backend), expected, **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_match_reference(graph, backend):
    x = features(graph)
    cot = features(graph, seed=1)
    w0 = jnp.asarray(graph.edge_weights())

    def loss(x, w):
        return jnp.sum(cot * sg.propagate(graph.replace(weights=w), x, backend=backend))

    for fn in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1)))):
        gx, gw = fn(x, w0)
        a = reference_matrix(graph)
        np.testing.assert_allclose(gx, a.T @ np.asarray(cot, np.float64), **TOL)
        s, r = np.asarray(graph.senders), np.asarray(graph.receivers)
        expected_gw = np.sum(np.asarray(cot)[r] * np.asarray(x)[s], axis=1)
        np.testing.assert_allclose(gw, expected_gw, **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_over_features_and_weights(backend):
    g = GRAPH_CASES["random"]()
    a = reference_matrix(g)
    xs = jax.random.normal(jax.random.key(4), (4, g.num_nodes, 3), jnp.float32)
    out = jax.vmap(lambda x: sg.propagate(g, x, backend=backend))(xs)
    np.testing.assert_allclose(out, np.einsum("rs,bsf->brf", a, np.asarray(xs, np.float64)), **TOL)

    ws = jax.random.uniform(jax.random.key(5), (3, g.num_edges), jnp.float32)
    x = features(g)
    out = jax.vmap(lambda w: sg.propagate(g.replace(weights=w), x, backend=backend))(ws)
    for i in range(3):
        ref = reference_matrix(g.replace(weights=np.asarray(ws[i])))
        np.testing.assert_allclose(out[i], ref @ np.asarray(x, np.float64), **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gcn_product_matches_dense_a_hat(backend):
    g = GRAPH_CASES["random"]()
    x = features(g)
    a_hat = sg.gcn_norm(g)
    expected = np.asarray(a_hat.to_dense(jnp.float32)) @ np.asarray(x)
    np.testing.assert_allclose(sg.propagate(a_hat, x, backend=backend), expected, **TOL)
    np.testing.assert_allclose(
        sg.propagate(sg.sort_edges(a_hat), x, backend=backend), expected, **TOL
    )


def test_segment_with_sorted_hint_agrees():
    g = sg.sort_edges(GRAPH_CASES["random"]())
    x = features(g)
    expected = reference_matrix(g) @ np.asarray(x, np.float64)
    np.testing.assert_allclose(
        sg.propagate(g, x, backend=sg.backends.Segment(use_sorted=True)), expected, **TOL
    )


def test_wrong_feature_rows_are_refused_before_tracing():
    g = GRAPH_CASES["random"]()
    with pytest.raises(ValueError, match=r"x has 29 rows but the graph has num_nodes=30"):
        sg.propagate(g, jnp.ones((29, 2)))
    with pytest.raises(ValueError, match="x has 29 rows"):
        jax.jit(lambda x: sg.propagate(g, x))(jnp.ones((29, 2)))
    with pytest.raises(TypeError, match="floating dtype, got int32"):
        sg.propagate(g, jnp.ones((30, 2), jnp.int32))


def test_unknown_backend_is_refused():
    with pytest.raises(
        ValueError, match=r"unknown backend 'csr'; choose one of \['bcoo', 'dense', 'segment'\]"
    ):
        sg.propagate(GRAPH_CASES["random"](), jnp.ones((30, 1)), backend="csr")


def test_dense_refuses_over_its_memory_limit():
    g = sg.Graph(np.array([0]), np.array([1]), None, 100_000)
    with pytest.raises(ValueError, match=r"100000 x 100000 float32 matrix needing 37\.3 GiB"):
        sg.propagate(g, jnp.ones((100_000, 1)), backend="dense")
    small = GRAPH_CASES["random"]()
    with pytest.raises(ValueError, match=r"over its limit of 1\.0 KiB"):
        sg.propagate(small, features(small), backend=Dense(max_bytes=1024))

"""Sparse features: storage, X @ W and agreement with dense features."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import sparsegcn as sg
from sparsegcn import SparseFeatures


def random_sparse(n=40, f=30, density=0.1, seed=0):
    m = sp.random(n, f, density=density, random_state=seed, format="csr", dtype=np.float32)
    m.data[:] = np.random.default_rng(seed).uniform(0.5, 1.5, m.nnz)
    return m


def test_from_scipy_and_todense():
    m = random_sparse()
    x = SparseFeatures.from_scipy(m)
    assert x.shape == (40, 30) and x.nnz == m.nnz
    np.testing.assert_allclose(x.todense(), m.toarray())
    np.testing.assert_allclose(x.to_scipy().toarray(), m.toarray())


def test_matmul_matches_scipy():
    m = random_sparse()
    w = jax.random.normal(jax.random.key(0), (30, 5), jnp.float32)
    x = SparseFeatures.from_scipy(m)
    expected = m.toarray().astype(np.float64) @ np.asarray(w, np.float64)
    np.testing.assert_allclose(x.matmul(w), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(sg.features.matmul)(x, w), expected, rtol=1e-5, atol=1e-5)


def test_matmul_gradient_matches_dense():
    m = random_sparse()
    x_sparse = SparseFeatures.from_scipy(m)
    x_dense = jnp.asarray(m.toarray())
    w = jax.random.normal(jax.random.key(1), (30, 4), jnp.float32)
    g_sparse = jax.grad(lambda w: jnp.sum(jnp.sin(sg.features.matmul(x_sparse, w))))(w)
    g_dense = jax.grad(lambda w: jnp.sum(jnp.sin(x_dense @ w)))(w)
    np.testing.assert_allclose(g_sparse, g_dense, rtol=1e-5, atol=1e-5)


def _without_layout(x: SparseFeatures) -> SparseFeatures:
    return SparseFeatures.tree_unflatten(x.shape, (x.rows, x.cols, x.values))


@pytest.mark.parametrize("layout", [True, False], ids=["csr-kernel", "gather"])
def test_matmul_and_both_gradients_match_dense_with_empty_rows_and_columns(layout):
    m = random_sparse(n=40, f=30, density=0.15).tolil()
    m[3, :] = 0  # an empty row
    m[:, 7] = 0  # an unused feature
    x = SparseFeatures.from_scipy(m)
    assert x.layout is not None
    x = x if layout else _without_layout(x)
    w = jax.random.normal(jax.random.key(2), (30, 6), jnp.float32)

    def loss(w, values):
        return jnp.sum(jnp.sin(x.with_values(values).matmul(w)) * jnp.arange(6.0)[None, :])

    def dense_loss(w, values):
        dense = jnp.zeros(x.shape).at[x.rows, x.cols].add(values)
        return jnp.sum(jnp.sin(dense @ w) * jnp.arange(6.0)[None, :])

    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(w, x.values)
    want = jax.grad(dense_loss, argnums=(0, 1))(w, x.values)
    for g, d in zip(got, want, strict=True):
        np.testing.assert_allclose(g, d, rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(got[0])[7] == 0)  # the unused feature's row of W gets nothing


def test_matmul_under_vmap_of_seeds_equals_each_seed_alone():
    """Several seeds: per-seed weights and per-seed dropped values (a batched matrix)."""
    x = SparseFeatures.from_scipy(random_sparse())
    ws = jax.random.normal(jax.random.key(3), (3, 30, 4), jnp.float32)
    values = x.values[None] * jnp.asarray([[1.0], [0.0], [2.0]])
    batched = jax.vmap(jax.grad(lambda w, v: jnp.sum(x.with_values(v).matmul(w) ** 2)))
    out = batched(ws, values)
    for k in range(3):
        alone = jax.grad(lambda w, v=values[k]: jnp.sum(x.with_values(v).matmul(w) ** 2))(ws[k])
        np.testing.assert_allclose(out[k], alone, rtol=1e-5, atol=1e-6)


def test_features_without_stored_values_multiply_to_zero():
    x = SparseFeatures.from_scipy(sp.csr_array((5, 4), dtype=np.float32))
    w = jnp.ones((4, 3))
    np.testing.assert_array_equal(x.matmul(w), np.zeros((5, 3)))
    np.testing.assert_array_equal(jax.grad(lambda w: x.matmul(w).sum())(w), np.zeros((4, 3)))


def test_as_features_validates():
    with pytest.raises(ValueError, match=r"features has 3 rows but the graph has num_nodes=4"):
        sg.as_features(np.ones((3, 2)), 4)
    with pytest.raises(ValueError, match=r"features\[1, 0\] = nan is not finite"):
        sg.as_features(np.array([[1.0, 2.0], [np.nan, 0.0]]), 2)
    bad = sp.csr_array(np.array([[1.0, np.inf]]))
    with pytest.raises(ValueError, match=r"features.values\[1\] = inf is not finite"):
        sg.as_features(bad, 1)
    with pytest.raises(ValueError, match="2 dimensions"):
        sg.as_features(np.ones(3), 3)
    with pytest.raises(ValueError, match=r"features.cols\[0\] = 7 is out of range"):
        SparseFeatures(np.array([0]), np.array([7]), np.array([1.0]), (1, 3))
    with pytest.raises(ValueError, match="non-decreasing"):
        SparseFeatures(np.array([1, 0]), np.array([0, 0]), np.array([1.0, 1.0]), (2, 3))


def test_row_normalize_sparse_and_dense_agree():
    m = random_sparse(seed=3).tolil()
    m[0, :] = 0  # an all-zero row stays zero
    m = m.tocsr()
    sparse = sg.row_normalize(m).toarray()
    dense = sg.row_normalize(m.toarray())
    np.testing.assert_allclose(sparse, dense, rtol=1e-6)
    sums = dense.sum(axis=1)
    np.testing.assert_allclose(sums[1:][sums[1:] > 0], 1.0, rtol=1e-5)
    assert sums[0] == 0


@pytest.mark.parametrize("backend", ["segment", "bcoo", "dense"])
def test_gcn_on_sparse_features_equals_dense_features(backend):
    from graphs import random_graph

    g = sg.gcn_norm(random_graph(40, 120, seed=2))
    m = random_sparse(40, 30)
    model = sg.gcn(30, 4, hidden=8, backend=backend)
    params = model.init(jax.random.key(0))
    sparse_x, dense_x = sg.as_features(m), jnp.asarray(m.toarray())
    out_sparse = model.apply(params, g, sparse_x)
    out_dense = model.apply(params, g, dense_x)
    np.testing.assert_allclose(out_sparse, out_dense, rtol=1e-5, atol=1e-5)

    def loss(p, x):
        return jnp.sum(model.apply(p, g, x) ** 2)

    gs, gd = jax.grad(loss)(params, sparse_x), jax.grad(loss)(params, dense_x)
    for a, b in zip(jax.tree.leaves(gs), jax.tree.leaves(gd), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_row_normalize_refuses_signed_features_and_auto_keeps_them():
    signed = np.array([[1.0, -2.0], [0.5, 0.5]], np.float32)
    with pytest.raises(ValueError, match=r"features\[0, 1\] is negative"):
        sg.row_normalize(signed)
    with pytest.raises(ValueError, match=r"features\[0, 1\] is negative"):
        sg.row_normalize(sp.csr_array(signed))
    np.testing.assert_array_equal(sg.features.normalize(signed, "auto"), signed)
    counts = np.array([[1.0, 3.0], [0.0, 2.0]], np.float32)
    np.testing.assert_allclose(sg.features.normalize(counts, "auto"), [[0.25, 0.75], [0.0, 1.0]])
    np.testing.assert_array_equal(sg.features.normalize(counts, "none"), counts)
    with pytest.raises(ValueError, match="must be one of"):
        sg.features.normalize(counts, "l2")

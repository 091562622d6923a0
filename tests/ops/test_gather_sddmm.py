"""Row gather and edge scores against NumPy loop oracles: forward and gradient, eager and jitted."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sparsegcn.ops import edge_dot, edge_sum, gather_rows

# (senders, receivers, num_src, num_dst); bipartite where num_src != num_dst.
EDGE_CASES = {
    "empty": ([], [], 3, 3),
    "duplicates": ([0, 0, 0, 1, 2, 2], [1, 1, 1, 2, 0, 0], 3, 3),
    "self_loops": ([0, 1, 1, 2, 0], [0, 1, 1, 0, 2], 3, 3),
    "isolated": ([0, 3, 3, 5], [3, 0, 5, 3], 7, 7),
    "bipartite": ([0, 4, 4, 2, 1], [0, 0, 1, 1, 1], 5, 2),
}
TRAILING = {"flat": (4,), "heads": (2, 4)}


def case(name, trailing, seed=0):
    senders, receivers, n_src, n_dst = EDGE_CASES[name]
    rng = np.random.default_rng(seed)
    src = rng.normal(size=(n_src, *TRAILING[trailing])).astype(np.float32)
    dst = rng.normal(size=(n_dst, *TRAILING[trailing])).astype(np.float32)
    return np.asarray(senders, np.int32), np.asarray(receivers, np.int32), src, dst


def maybe_jit(fn, jit):
    return jax.jit(fn) if jit else fn


def scatter_rows(rows, ids, n):
    out = np.zeros((n, *rows.shape[1:]))
    for e, i in enumerate(ids):
        out[i] += rows[e]
    return out


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_gather_rows(name, jit):
    senders, _, src, _ = case(name, "heads")
    cot = np.random.default_rng(1).normal(size=(len(senders), *src.shape[1:])).astype(np.float32)
    out, pullback = jax.vjp(maybe_jit(lambda x: gather_rows(x, jnp.asarray(senders)), jit), src)
    expected = np.zeros((len(senders), *src.shape[1:]), np.float32)
    for e, i in enumerate(senders):
        expected[e] = src[i]
    np.testing.assert_array_equal(out, expected)
    # Duplicate ids accumulate in the gradient.
    np.testing.assert_allclose(
        pullback(jnp.asarray(cot))[0], scatter_rows(cot, senders, len(src)), rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("trailing", list(TRAILING))
@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_sum(name, trailing, jit):
    senders, receivers, src, dst = case(name, trailing)
    fn = maybe_jit(lambda a, b: edge_sum(jnp.asarray(senders), jnp.asarray(receivers), a, b), jit)
    out, pullback = jax.vjp(fn, src, dst)
    expected = np.zeros((len(senders), *src.shape[1:]))
    for e, (u, v) in enumerate(zip(senders, receivers, strict=True)):
        expected[e] = src[u] + dst[v]
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    cot = np.random.default_rng(2).normal(size=expected.shape).astype(np.float32)
    g_src, g_dst = pullback(jnp.asarray(cot))
    np.testing.assert_allclose(g_src, scatter_rows(cot, senders, len(src)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_dst, scatter_rows(cot, receivers, len(dst)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("trailing", list(TRAILING))
@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_dot_is_sampled_dense_product(name, trailing, jit):
    senders, receivers, src, dst = case(name, trailing)
    fn = maybe_jit(lambda a, b: edge_dot(jnp.asarray(senders), jnp.asarray(receivers), a, b), jit)
    out, pullback = jax.vjp(fn, src, dst)
    # Oracle: the dense product src @ dst.T (per head), read at the edge positions.
    dense = np.einsum("u...f,v...f->uv...", src.astype(np.float64), dst.astype(np.float64))
    expected = dense[senders, receivers]
    assert out.shape == (len(senders), *src.shape[1:-1])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    cot = np.random.default_rng(2).normal(size=expected.shape).astype(np.float32)
    g_src, g_dst = pullback(jnp.asarray(cot))
    ref_src = np.zeros(src.shape)
    ref_dst = np.zeros(dst.shape)
    for e, (u, v) in enumerate(zip(senders, receivers, strict=True)):
        ref_src[u] += cot[e][..., None] * dst[v]
        ref_dst[v] += cot[e][..., None] * src[u]
    np.testing.assert_allclose(g_src, ref_src, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_dst, ref_dst, rtol=1e-5, atol=1e-5)


def test_bad_input_is_named():
    ids = jnp.zeros(2, jnp.int32)
    x = jnp.ones((3, 4), jnp.float32)
    with pytest.raises(TypeError, match="integer dtype, got float32"):
        gather_rows(x, jnp.zeros(2, jnp.float32))
    with pytest.raises(ValueError, match=r"same shape, got \(4,\) and \(5,\)"):
        edge_sum(ids, ids, x, jnp.ones((3, 5), jnp.float32))
    with pytest.raises(ValueError, match=r"shape \[E\], got \(2,\) and \(3,\)"):
        edge_dot(ids, jnp.zeros(3, jnp.int32), x, x)
    with pytest.raises(ValueError, match="feature axis"):
        edge_dot(ids, ids, jnp.ones(3, jnp.float32), jnp.ones(3, jnp.float32))

"""Segment reductions against NumPy loop oracles: forward and gradient, eager and jitted."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sweep import covering

from sparsegcn.nn.readout import readout as sg_readout
from sparsegcn.ops import (
    REDUCTIONS,
    segment_max,
    segment_mean,
    segment_min,
    segment_reduce,
    segment_softmax,
    segment_sum,
)

# (senders, receivers, num_nodes): the receivers are the segment ids.
EDGE_CASES = {
    "empty": ([], [], 3),
    "duplicates": ([0, 0, 0, 1, 2, 2], [1, 1, 1, 2, 0, 0], 3),
    "self_loops": ([0, 1, 1, 2, 0], [0, 1, 1, 0, 2], 3),
    "isolated": ([0, 3, 3, 5], [3, 0, 5, 3], 7),
    "random": (
        np.random.default_rng(0).integers(0, 9, 40),
        np.random.default_rng(1).integers(0, 9, 40),
        11,
    ),
}
TRAILING = {"flat": (), "heads": (3,)}
JIT = {"eager": False, "jit": True}


def case(name, trailing, seed=0):
    senders, receivers, n = EDGE_CASES[name]
    senders = np.asarray(senders, np.int32)
    receivers = np.asarray(receivers, np.int32)
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(len(receivers), *TRAILING[trailing])).astype(np.float32)
    cot = rng.normal(size=(n, *TRAILING[trailing])).astype(np.float32)
    return senders, receivers, n, data, cot


def maybe_jit(fn, jit):
    return jax.jit(fn) if jit else fn


def vjp(fn, data, cot):
    out, pullback = jax.vjp(fn, jnp.asarray(data))
    return np.asarray(out), np.asarray(pullback(jnp.asarray(cot, out.dtype))[0])


# --- NumPy oracles (float64 loops) -------------------------------------------------


def oracle_reduce(data, ids, n, reduce, fill=0.0):
    data = data.astype(np.float64)
    out = np.full((n, *data.shape[1:]), np.nan)
    for s in range(n):
        members = np.flatnonzero(ids == s)
        if len(members) == 0:
            out[s] = fill
            continue
        rows = data[members]
        if reduce == "sum":
            out[s] = rows.sum(0)
        elif reduce == "mean":
            out[s] = rows.mean(0)
        elif reduce == "max":
            out[s] = rows.max(0)
        else:
            out[s] = rows.min(0)
    return out


def oracle_reduce_grad(data, ids, n, reduce, cot):
    """d <cot, reduce(data)> / d data, element by element."""
    data = data.astype(np.float64)
    grad = np.zeros_like(data)
    width = int(np.prod(data.shape[1:]))
    flat = data.reshape(len(ids), width)
    gflat = grad.reshape(len(ids), width)
    cflat = cot.astype(np.float64).reshape(n, width)
    for s in range(n):
        members = np.flatnonzero(ids == s)
        for col in range(width):
            if len(members) == 0:
                continue
            if reduce == "sum":
                gflat[members, col] += cflat[s, col]
            elif reduce == "mean":
                gflat[members, col] += cflat[s, col] / len(members)
            else:
                values = flat[members, col]
                best = values.max() if reduce == "max" else values.min()
                ties = members[values == best]
                gflat[ties, col] += cflat[s, col] / len(ties)  # split evenly among ties
    return grad


def oracle_softmax(logits, ids, n, mask=None):
    logits = logits.astype(np.float64)
    mask = np.ones(len(ids), bool) if mask is None else mask
    out = np.zeros_like(logits)
    for s in range(n):
        members = np.flatnonzero((ids == s) & mask)
        if len(members):
            z = logits[members]
            z = np.exp(z - z.max(0))
            out[members] = z / z.sum(0)
    return out


def oracle_softmax_grad(logits, ids, n, cot, mask=None):
    """Softmax Jacobian per segment: dz_i = y_i (g_i - sum_j g_j y_j)."""
    y = oracle_softmax(logits, ids, n, mask)
    cot = cot.astype(np.float64)
    grad = np.zeros_like(y)
    for s in range(n):
        members = np.flatnonzero(ids == s)
        if len(members):
            inner = (cot[members] * y[members]).sum(0)
            grad[members] = y[members] * (cot[members] - inner)
    return grad


# --- sum / mean / max / min --------------------------------------------------------


@pytest.mark.parametrize(
    ("reduce", "name", "trailing", "jit"),
    covering(["sum", "mean", "max", "min"], list(EDGE_CASES), list(TRAILING), JIT),
)
def test_reduction_matches_loop_oracle(reduce, name, trailing, jit):
    _, ids, n, data, cot = case(name, trailing)
    fn = maybe_jit(lambda d: REDUCTIONS[reduce](d, jnp.asarray(ids), n), jit)
    out, grad = vjp(fn, data, cot)
    assert out.shape == (n, *TRAILING[trailing]) and out.dtype == np.float32
    np.testing.assert_allclose(out, oracle_reduce(data, ids, n, reduce), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        grad, oracle_reduce_grad(data, ids, n, reduce, cot), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_sorted_promise_gives_same_result(reduce):
    _, ids, n, data, _ = case("random", "heads")
    order = np.argsort(ids, kind="stable")
    fn = REDUCTIONS[reduce]
    sorted_out = fn(data[order], jnp.asarray(ids[order]), n, indices_are_sorted=True)
    np.testing.assert_allclose(sorted_out, oracle_reduce(data, ids, n, reduce), rtol=1e-5)


def test_empty_segments_of_max_and_min_get_fill_not_inf():
    ids = jnp.asarray([1, 1], jnp.int32)
    data = jnp.asarray([-np.inf, 2.0], jnp.float32)
    # A real -inf entry is a value, not an empty segment: only segments 0 and 2 take fill.
    np.testing.assert_array_equal(segment_max(data, ids, 3), [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(segment_min(data, ids, 3, fill=-7.0), [-7.0, -np.inf, -7.0])
    np.testing.assert_array_equal(
        segment_max(jnp.asarray([4, 9], jnp.int32), ids, 3, fill=-1), [-1, 9, -1]
    )
    np.testing.assert_array_equal(segment_sum(data[:0], ids[:0], 2), [0.0, 0.0])
    np.testing.assert_array_equal(segment_mean(data[:0], ids[:0], 2), [0.0, 0.0])


def test_max_gradient_splits_ties_evenly():
    data = jnp.asarray([1.0, 3.0, 3.0, 2.0], jnp.float32)
    ids = jnp.asarray([0, 0, 0, 1], jnp.int32)
    grad = jax.grad(lambda d: segment_max(d, ids, 3).sum())(data)
    np.testing.assert_allclose(grad, [0.0, 0.5, 0.5, 1.0])


def test_segment_reduce_dispatches_and_names_unknown():
    _, ids, n, data, _ = case("duplicates", "heads")
    for reduce, fn in REDUCTIONS.items():
        np.testing.assert_array_equal(
            segment_reduce(data, jnp.asarray(ids), n, reduce), fn(data, jnp.asarray(ids), n)
        )
    np.testing.assert_array_equal(
        segment_reduce(data[:0], jnp.asarray(ids[:0]), n, "max", fill=5.0),
        np.full((n, 3), 5.0, np.float32),
    )
    with pytest.raises(ValueError, match="'median'"):
        segment_reduce(data, jnp.asarray(ids), n, "median")
    assert set(REDUCTIONS) == {"sum", "mean", "max", "min"}


def test_bad_input_is_named():
    data = jnp.ones((4, 2), jnp.float32)
    with pytest.raises(ValueError, match="4 rows"):
        segment_sum(data, jnp.zeros(3, jnp.int32), 2)
    with pytest.raises(ValueError, match=r"segment_ids must have 1 dimension"):
        segment_sum(data, jnp.zeros((4, 1), jnp.int32), 2)
    with pytest.raises(TypeError, match="integer dtype, got float32"):
        segment_sum(data, jnp.zeros(4, jnp.float32), 2)
    with pytest.raises(TypeError, match="num_segments must be a static Python int"):
        segment_sum(data, jnp.zeros(4, jnp.int32), 2.5)
    with pytest.raises(TypeError, match="floating-point data, got int32"):
        segment_mean(jnp.ones(4, jnp.int32), jnp.zeros(4, jnp.int32), 2)


def test_no_recompile_for_new_values():
    _, ids, n, data, _ = case("random", "heads")
    fn = jax.jit(functools.partial(segment_mean, num_segments=n))
    fn(data, jnp.asarray(ids))
    fn(data + 1.0, jnp.asarray(ids[::-1]))
    assert fn._cache_size() == 1


# --- softmax -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "trailing", "jit"), covering(list(EDGE_CASES), list(TRAILING), JIT)
)
def test_softmax_matches_loop_oracle(name, trailing, jit):
    _, ids, n, logits, _ = case(name, trailing)
    cot = np.random.default_rng(5).normal(size=logits.shape).astype(np.float32)
    fn = maybe_jit(lambda z: segment_softmax(z, jnp.asarray(ids), n), jit)
    out, grad = vjp(fn, logits, cot)
    assert out.shape == logits.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, oracle_softmax(logits, ids, n), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, oracle_softmax_grad(logits, ids, n, cot), rtol=1e-4, atol=1e-6)
    sums = oracle_reduce(out, ids, n, "sum")
    nonempty = np.isin(np.arange(n), ids)
    np.testing.assert_allclose(sums[nonempty], 1.0, rtol=1e-5)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("trailing", list(TRAILING))
def test_softmax_mask_excludes_entries_and_all_masked_segment_is_zero(trailing, jit):
    _, ids, n, logits, _ = case("random", trailing, seed=3)
    mask = np.random.default_rng(7).random(len(ids)) < 0.6
    mask[ids == ids[0]] = False  # one segment fully masked
    # Masked logits are garbage (huge, inf, nan): they must not leak into anything.
    garbage = np.resize(np.float32([1e30, np.inf, np.nan, -np.inf]), (~mask).sum())
    logits[~mask] = garbage.reshape(-1, *[1] * (logits.ndim - 1))
    cot = np.random.default_rng(5).normal(size=logits.shape).astype(np.float32)
    fn = maybe_jit(lambda z: segment_softmax(z, jnp.asarray(ids), n, mask=jnp.asarray(mask)), jit)
    out, grad = vjp(fn, logits, cot)
    assert np.isfinite(out).all() and np.isfinite(grad).all()
    assert (out[~mask] == 0).all() and (grad[~mask] == 0).all()
    clean = np.where(mask.reshape(-1, *([1] * (logits.ndim - 1))), logits, 0.0)
    np.testing.assert_allclose(out, oracle_softmax(clean, ids, n, mask), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        grad, oracle_softmax_grad(clean, ids, n, cot, mask), rtol=1e-4, atol=1e-6
    )
    sums = oracle_reduce(out, ids, n, "sum")
    live = np.isin(np.arange(n), ids[mask])
    np.testing.assert_allclose(sums[live], 1.0, rtol=1e-5)
    np.testing.assert_array_equal(sums[~live], 0.0)


def test_softmax_of_huge_logits_stays_finite():
    ids = jnp.asarray([0, 0, 0, 1, 1], jnp.int32)
    logits = jnp.asarray([1e4, 1e4 - 1.0, -1e4, 1e4, 1e4], jnp.float32)
    out = segment_softmax(logits, ids, 3)
    e = np.exp([0.0, -1.0])
    np.testing.assert_allclose(out, [e[0] / e.sum(), e[1] / e.sum(), 0.0, 0.5, 0.5], rtol=1e-6)
    grad = jax.grad(lambda z: (segment_softmax(z, ids, 3) * jnp.arange(5.0)).sum())(logits)
    assert np.isfinite(grad).all()


def test_softmax_all_masked_gradient_is_finite_zero():
    ids = jnp.asarray([0, 0, 1], jnp.int32)
    mask = jnp.asarray([False, False, True])
    logits = jnp.asarray([3.0, -2.0, 1.0], jnp.float32)
    out = segment_softmax(logits, ids, 2, mask=mask)
    np.testing.assert_array_equal(out, [0.0, 0.0, 1.0])
    grad = jax.grad(lambda z: (segment_softmax(z, ids, 2, mask=mask) ** 2).sum())(logits)
    np.testing.assert_array_equal(grad, [0.0, 0.0, 0.0])


def test_softmax_bad_input_is_named():
    ids = jnp.zeros(3, jnp.int32)
    with pytest.raises(ValueError, match=r"mask must be bool of shape \(3,\)"):
        segment_softmax(jnp.ones(3, jnp.float32), ids, 1, mask=jnp.ones(3, jnp.int32))
    with pytest.raises(TypeError, match="floating-point logits, got int32"):
        segment_softmax(jnp.ones(3, jnp.int32), ids, 1)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "softmax"])
def test_float64_matches_oracle_tightly(reduce):
    _, ids, n, data, cot = case("random", "heads", seed=4)
    with jax.enable_x64(True):
        x = jnp.asarray(data, jnp.float64)
        if reduce == "softmax":
            cot = np.random.default_rng(5).normal(size=data.shape)
            out, grad = vjp(lambda z: segment_softmax(z, jnp.asarray(ids), n), x, cot)
            expected = oracle_softmax(data, ids, n)
            expected_grad = oracle_softmax_grad(data, ids, n, cot)
        else:
            out, grad = vjp(lambda d: REDUCTIONS[reduce](d, jnp.asarray(ids), n), x, cot)
            expected = oracle_reduce(data, ids, n, reduce)
            expected_grad = oracle_reduce_grad(data, ids, n, reduce, cot)
    assert out.dtype == np.float64 and grad.dtype == np.float64
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-12, atol=1e-14)


BAD_IDS = {
    "too_large": ([0, 5, 1], 1, 5),
    "negative": ([0, 1, -1], 2, -1),
    "both": ([0, 5, -1], 1, 5),
}


@pytest.mark.parametrize("ids, pos, value", BAD_IDS.values(), ids=list(BAD_IDS))
@pytest.mark.parametrize("kind", ["list", "numpy", "jax"])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "softmax"])
def test_concrete_out_of_range_ids_are_named_not_dropped(op, kind, ids, pos, value):
    fn = segment_softmax if op == "softmax" else REDUCTIONS[op]
    ids = {"list": list, "numpy": np.asarray, "jax": jnp.asarray}[kind](ids)
    message = rf"segment_ids\[{pos}\] = {value} is out of range.*\[0, 2\).*num_segments=2"
    with pytest.raises(ValueError, match=message):
        fn(jnp.ones(3, jnp.float32), ids, 2)


def test_host_ids_are_checked_before_narrowing_to_int32():
    ids = np.array([0, 1, 2**32], np.int64)  # 2**32 would wrap to 0 in int32
    with pytest.raises(ValueError, match=r"segment_ids\[2\] = 4294967296 is out of range"):
        segment_sum(jnp.ones(3, jnp.float32), ids, 2)


def test_traced_ids_are_not_checked():
    # Documented: under jit the ids are tracers, so XLA drops the bad ones.
    out = jax.jit(lambda ids: segment_sum(jnp.ones(3, jnp.float32), ids, 2))(jnp.array([0, 5, -1]))
    np.testing.assert_array_equal(out, [1.0, 0.0])


def test_valid_edge_ids_pass_the_range_check():
    out = segment_sum(jnp.ones(3, jnp.float32), np.array([0, 1, 1]), 2)
    np.testing.assert_array_equal(out, [1.0, 2.0])
    assert segment_sum(jnp.ones((0, 2), jnp.float32), np.zeros(0, np.int32), 2).shape == (2, 2)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_narrow_floats_are_summed_in_float32(dtype):
    # Before: sums and counts ran in the data's dtype. In bfloat16 a count of
    # ones stops at 256 (float16: 2048), so the mean of 300 ones and 2,700 zeros
    # was 1.0, and a readout's or an aggregation's mean with it.
    values = np.r_[np.ones(300), np.zeros(2700)].astype(np.float32)[:, None]
    ids = np.zeros(3000, np.int32)
    data = jnp.asarray(values, dtype)
    mean = segment_mean(data, ids, 1)
    total = segment_sum(data, ids, 1)
    assert mean.dtype == total.dtype == jnp.dtype(dtype)
    np.testing.assert_allclose(np.asarray(mean, np.float32), [[0.1]], rtol=1e-2)
    np.testing.assert_allclose(np.asarray(total, np.float32), [[300.0]], rtol=1e-2)
    np.testing.assert_allclose(
        np.asarray(sg_readout(data, ids, 1, "mean"), np.float32), [[0.1]], rtol=1e-2
    )
    weights = segment_softmax(jnp.zeros((3000,), dtype), ids, 1)
    np.testing.assert_allclose(np.asarray(weights, np.float32), np.full(3000, 1 / 3000), rtol=1e-2)

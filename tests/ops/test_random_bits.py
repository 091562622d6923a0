"""Counter-based random bits: uniformity (chi-square), independence, determinism per key,
and exact integer arithmetic against uint64 NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from sparsegcn.ops import fmix32, hash_bits, keep_mask, mulhi_u32, uniform_below


def test_fmix32_is_murmur3_finalizer():
    # Reference: MurmurHash3's fmix32 written out in uint64 NumPy, masked to 32 bits.
    rng = np.random.default_rng(0)
    h = rng.integers(0, 2**32, 1000, dtype=np.uint64)
    ref = h.copy()
    mask = np.uint64(0xFFFFFFFF)
    ref ^= ref >> np.uint64(16)
    ref = (ref * np.uint64(0x85EBCA6B)) & mask
    ref ^= ref >> np.uint64(13)
    ref = (ref * np.uint64(0xC2B2AE35)) & mask
    ref ^= ref >> np.uint64(16)
    np.testing.assert_array_equal(fmix32(jnp.asarray(h.astype(np.uint32))), ref.astype(np.uint32))


def test_bits_are_uniform_and_neighbours_independent():
    bits = np.asarray(hash_bits(jax.random.key(1), (400_000,)))
    assert bits.dtype == np.uint32
    for shift in (24, 0):  # the top byte and the bottom byte
        counts = np.bincount(((bits >> shift) & 0xFF).astype(np.int64), minlength=256)
        assert stats.chisquare(counts).pvalue > 1e-4
    # Adjacent positions: a 16x16 contingency table of their top nibbles.
    a, b = (bits[:-1] >> 28).astype(np.int64), (bits[1:] >> 28).astype(np.int64)
    table = np.zeros((16, 16))
    np.add.at(table, (a, b), 1)
    assert stats.chi2_contingency(table).pvalue > 1e-4


def test_bits_are_a_function_of_key_and_position():
    a = hash_bits(jax.random.key(3), (50, 20))
    np.testing.assert_array_equal(a, hash_bits(jax.random.key(3), (50, 20)))
    np.testing.assert_array_equal(
        jax.jit(hash_bits, static_argnums=1)(jax.random.key(3), (50, 20)), a
    )
    # Position i of any shape is the same word: a reshape does not change the stream.
    np.testing.assert_array_equal(hash_bits(jax.random.key(3), (1000,)), np.ravel(a))
    other = np.asarray(hash_bits(jax.random.key(4), (50, 20)))
    assert np.mean(other == np.asarray(a)) < 0.01
    with pytest.raises(ValueError, match="at most 2\\*\\*32 values per call, got 8589934592"):
        hash_bits(jax.random.key(0), (2**17, 2**16))


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.8])
def test_keep_rate_is_binomial(rate):
    n = 200_000
    kept = int(keep_mask(jax.random.key(0), rate, (n,)).sum())
    # Two-sided binomial test at 1e-4: fails only if the rate is really off.
    assert stats.binomtest(kept, n, 1 - rate).pvalue > 1e-4


def test_keep_mask_same_key_same_mask_different_key_independent():
    for impl in ("hash", "threefry"):
        a = keep_mask(jax.random.key(3), 0.5, (1000,), impl=impl)
        np.testing.assert_array_equal(a, keep_mask(jax.random.key(3), 0.5, (1000,), impl=impl))
        c = keep_mask(jax.random.key(4), 0.5, (1000,), impl=impl)
        assert 0.45 < float(jnp.mean(a == c)) < 0.55  # independent masks agree half the time
    assert bool(keep_mask(jax.random.key(0), 0.0, (100,)).all())
    with pytest.raises(ValueError, match="impl must be 'hash' or 'threefry', got 'xorshift'"):
        keep_mask(jax.random.key(0), 0.5, (3,), impl="xorshift")


def test_mulhi_matches_64_bit_arithmetic():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**32, 5000, dtype=np.uint64)
    b = rng.integers(0, 2**32, 5000, dtype=np.uint64)
    edge = np.array([0, 1, 2**16 - 1, 2**16, 2**32 - 1], np.uint64)
    a, b = np.concatenate([a, np.repeat(edge, 5)]), np.concatenate([b, np.tile(edge, 5)])
    expected = ((a * b) >> np.uint64(32)).astype(np.uint32)  # exact: a*b < 2**64
    got = mulhi_u32(jnp.asarray(a.astype(np.uint32)), jnp.asarray(b.astype(np.uint32)))
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_uniform_below_is_in_range_and_uniform():
    bits = jnp.asarray(np.array([0, 1, 2**31, 2**32 - 1] * 3, np.uint32))
    bound = jnp.asarray(np.repeat([1, 7, 2**31 - 1], 4).astype(np.int32))
    out = np.asarray(uniform_below(bits, bound))
    assert out.dtype == np.int32
    assert ((out >= 0) & (out < np.asarray(bound))).all()
    assert out[3] == 0 and out[7] == 6 and out[11] == 2**31 - 2
    draws = np.asarray(uniform_below(hash_bits(jax.random.key(7), (300_000,)), jnp.int32(37)))
    assert stats.chisquare(np.bincount(draws, minlength=37)).pvalue > 1e-4

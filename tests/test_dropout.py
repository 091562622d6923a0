"""Dropout masks: statistics, determinism, and sparse values only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

import sparsegcn as sg
from sparsegcn.nn import dropout, hash_bits, keep_mask


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.8])
def test_drop_rate_is_binomial(rate):
    n = 200_000
    kept = int(keep_mask(jax.random.key(0), rate, (n,)).sum())
    # Two-sided binomial test at 1e-4: fails only if the rate is really off.
    assert stats.binomtest(kept, n, 1 - rate).pvalue > 1e-4


def test_bits_are_uniform_and_neighbours_independent():
    bits = np.asarray(hash_bits(jax.random.key(1), (400_000,)))
    byte = (bits >> 24).astype(np.int64)
    counts = np.bincount(byte, minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4
    # Adjacent positions: a 16x16 contingency table of their top nibbles.
    a, b = (bits[:-1] >> 28).astype(np.int64), (bits[1:] >> 28).astype(np.int64)
    table = np.zeros((16, 16))
    np.add.at(table, (a, b), 1)
    assert stats.chi2_contingency(table).pvalue > 1e-4


def test_same_key_same_mask_different_key_different_mask():
    a = keep_mask(jax.random.key(3), 0.5, (1000,))
    b = keep_mask(jax.random.key(3), 0.5, (1000,))
    c = keep_mask(jax.random.key(4), 0.5, (1000,))
    np.testing.assert_array_equal(a, b)
    agreement = float(jnp.mean(a == c))
    assert 0.45 < agreement < 0.55  # independent masks agree half the time


def test_inverted_scaling_and_threefry_option():
    x = jnp.ones((1000, 50))
    for impl in ("hash", "threefry"):
        y = dropout(x, 0.25, key=jax.random.key(0), impl=impl)
        values = np.unique(np.asarray(y))
        np.testing.assert_allclose(values, [0.0, 1 / 0.75], rtol=1e-6)
        assert abs(float(y.mean()) - 1.0) < 0.02


def test_sparse_dropout_touches_only_stored_values():
    m = sp.random(100, 80, density=0.05, random_state=0, format="csr", dtype=np.float32)
    x = sg.as_features(m)
    y = dropout(x, 0.5, key=jax.random.key(2))
    assert y.shape == x.shape and y.nnz == x.nnz
    np.testing.assert_array_equal(y.rows, x.rows)
    np.testing.assert_array_equal(y.cols, x.cols)
    kept = np.asarray(y.values) != 0
    np.testing.assert_allclose(
        np.asarray(y.values)[kept], 2 * np.asarray(x.values)[kept], rtol=1e-6
    )
    assert 0.35 < kept.mean() < 0.65


def test_bad_rates_are_refused():
    with pytest.raises(ValueError, match=r"dropout rate must be in \[0, 1\), got 1.0"):
        dropout(jnp.ones(3), 1.0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="impl must be 'hash' or 'threefry'"):
        dropout(jnp.ones(3), 0.5, key=jax.random.key(0), impl="xorshift")

"""Dropout: inverted scaling, the mask of the key, and sparse values only.

The random bits themselves are tested in tests/ops/test_random_bits.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import sparsegcn as sg
import sparsegcn.ops as ops
from sparsegcn.nn import dropout, hash_bits, keep_mask


def test_mask_names_stay_importable_from_nn_and_are_the_ops_ones():
    # The bits moved to sparsegcn.ops (tested in tests/ops/test_random_bits.py).
    assert (hash_bits, keep_mask) == (ops.hash_bits, ops.keep_mask)


@pytest.mark.parametrize("impl", ["hash", "threefry"])
def test_dropout_mask_is_keep_mask_of_the_key(impl):
    x = jnp.arange(1.0, 2001.0).reshape(40, 50)
    y = dropout(x, 0.3, key=jax.random.key(5), impl=impl)
    mask = np.asarray(keep_mask(jax.random.key(5), 0.3, x.shape, impl=impl))
    np.testing.assert_allclose(np.asarray(y), np.where(mask, np.asarray(x) / 0.7, 0.0), rtol=1e-6)
    np.testing.assert_array_equal(y, dropout(x, 0.3, key=jax.random.key(5), impl=impl))


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

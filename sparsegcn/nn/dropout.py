"""Dropout with a counter-based hash PRNG, for dense and sparse features.

The mask bits come from :func:`sparsegcn.ops.keep_mask` (a threefry draw of
two seeds, then a per-element hash: a few integer ops that XLA fuses into
the masking, where threefry itself costs more than the rest of a small
full-batch step). ``hash_bits`` and ``keep_mask`` stay importable from here
and from :mod:`sparsegcn.nn`.

Dropout on :class:`~sparsegcn.features.SparseFeatures` draws one value per
*stored* entry and leaves the sparsity pattern alone.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from sparsegcn.features import SparseFeatures
from sparsegcn.ops.random import hash_bits, keep_mask

__all__ = ["dropout", "hash_bits", "keep_mask"]


def dropout(x, rate: float, *, key: jax.Array, impl: str = "hash"):
    """Inverted dropout: zero each value with probability ``rate``, scale the rest.

    .. math:: y = x \\odot m / (1 - p), \\quad m_i \\sim \\mathrm{Bernoulli}(1 - p)

    Args:
      x: ``[...]`` dense array, or :class:`SparseFeatures` (only stored
        values are dropped; the pattern is unchanged).
      rate: static drop probability ``p`` in ``[0, 1)``.
      key: PRNG key; the same key gives the same mask.
      impl: ``"hash"`` (default, fast) or ``"threefry"``.

    Returns:
      Same type, shape and dtype as ``x``.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    if rate == 0.0:
        return x
    if isinstance(x, SparseFeatures):
        return x.with_values(dropout(x.values, rate, key=key, impl=impl))
    mask = keep_mask(key, rate, x.shape, impl=impl)
    scale = jnp.asarray(1.0 / (1.0 - rate), x.dtype)
    return jnp.where(mask, x * scale, jnp.zeros((), x.dtype))

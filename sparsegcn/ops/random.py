"""Counter-based random bits, shared by dropout and the neighbour sampler.

JAX's default threefry PRNG costs about 25 ns per value on a small CPU,
which for full-batch GNN steps costs more than the rest of the step. Here a
single threefry draw per call yields two 32-bit seeds; each element's random
word is then a stateless hash of its position and the seeds (two rounds of
MurmurHash3's 32-bit finalizer, a bijection with full avalanche), a few
integer ops per element that XLA fuses into whatever consumes the bits.

References:
  Appleby, *MurmurHash3* (the ``fmix32`` finalizer), 2011.
  https://github.com/aappleby/smhasher

  Salmon, Moraes, Dror & Shaw, *Parallel random numbers: as easy as 1, 2,
  3*, SC 2011 (counter-based generators).

  Lemire, *Fast Random Integer Generation in an Interval*, ACM TOMACS 29(1),
  2019. https://arxiv.org/abs/1805.10941
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["fmix32", "hash_bits", "keep_mask", "mulhi_u32", "uniform_below"]

_GOLDEN = np.uint32(0x9E3779B9)
_M1 = np.uint32(0x85EBCA6B)
_M2 = np.uint32(0xC2B2AE35)
_LOW16 = np.uint32(0xFFFF)
_SHIFT16 = np.uint32(16)


def fmix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finalizer: a bijection of uint32 with full avalanche.

    Args:
      h: uint32 array of any shape.

    Returns:
      uint32 array of the same shape.
    """
    h = h ^ (h >> 16)
    h = h * _M1
    h = h ^ (h >> 13)
    h = h * _M2
    return h ^ (h >> 16)


def hash_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Uniform uint32 words of ``shape``, a pure function of ``key``.

    .. math:: u_i = f(f(i \\cdot \\phi + s_0) \\oplus s_1)

    with ``f`` = :func:`fmix32`, ``phi`` the golden-ratio constant and
    ``(s_0, s_1)`` one threefry draw from ``key``. Element ``i`` (row-major
    position) depends only on ``key`` and ``i``, so disjoint slices of one
    call are independent streams.

    Args:
      key: a JAX PRNG key (typed or raw uint32).
      shape: static output shape; at most ``2**32`` elements.

    Returns:
      uint32 array of ``shape``.
    """
    size = int(np.prod(shape, dtype=np.int64))
    if size > 2**32:
        raise ValueError(f"hash_bits supports at most 2**32 values per call, got {size}")
    seeds = jax.random.bits(key, (2,), jnp.uint32)
    counter = jax.lax.iota(jnp.uint32, size).reshape(shape)
    h = fmix32(counter * _GOLDEN + seeds[0])
    return fmix32(h ^ seeds[1])


def keep_mask(
    key: jax.Array, rate: float, shape: tuple[int, ...], *, impl: str = "hash"
) -> jax.Array:
    """Boolean mask, ``True`` (keep) with probability ``1 - rate``.

    Args:
      key: PRNG key; the same key gives the same mask.
      rate: static drop probability in ``[0, 1]``.
      shape: static mask shape.
      impl: ``"hash"`` uses :func:`hash_bits` (drop probability exact to
        ``2**-32``); ``"threefry"`` uses ``jax.random.bernoulli``.

    Returns:
      bool array of ``shape``.
    """
    if impl == "threefry":
        return jax.random.bernoulli(key, 1.0 - rate, shape)
    if impl != "hash":
        raise ValueError(f"dropout impl must be 'hash' or 'threefry', got {impl!r}")
    threshold = np.uint32(min(round(rate * 2.0**32), 2**32 - 1))
    return hash_bits(key, shape) >= threshold


def mulhi_u32(a: jax.Array, b: jax.Array) -> jax.Array:
    """The high 32 bits of the 64-bit product of two uint32 arrays.

    Computed from 16-bit limbs so it needs no 64-bit types (JAX runs without
    ``jax_enable_x64``): ``a * b = hh 2^32 + (lh + hl) 2^16 + ll``.

    Args:
      a, b: uint32 arrays of broadcast-compatible shapes.

    Returns:
      uint32 ``floor(a * b / 2**32)``.
    """
    a_lo, a_hi = a & _LOW16, a >> _SHIFT16
    b_lo, b_hi = b & _LOW16, b >> _SHIFT16
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (ll >> _SHIFT16) + (lh & _LOW16) + (hl & _LOW16)
    return hh + (lh >> _SHIFT16) + (hl >> _SHIFT16) + (mid >> _SHIFT16)


def uniform_below(bits: jax.Array, bound: jax.Array) -> jax.Array:
    """Maps uniform uint32 ``bits`` to int32 in ``[0, bound)`` (Lemire's multiply-shift).

    .. math:: \\lfloor u \\cdot m / 2^{32} \\rfloor

    Each value has probability ``floor(2^32 / m) / 2^32`` or
    ``ceil(2^32 / m) / 2^32``: a relative deviation of at most ``m / 2^32``.

    Args:
      bits: uint32 uniform words.
      bound: int32 ``m >= 1``, broadcast against ``bits``.

    Returns:
      int32, the shape of ``bits`` broadcast with ``bound``.
    """
    return mulhi_u32(bits, bound.astype(jnp.uint32)).astype(jnp.int32)

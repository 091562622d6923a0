"""Row gather for validated ids."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

__all__ = ["gather_rows"]


def gather_rows(x: ArrayLike, ids: ArrayLike) -> jax.Array:
    """``x[ids]``: the rows of ``x`` named by ``ids``, promising the ids are in range.

    XLA gathers and scatters never fail on a bad id: a gather clamps it to
    the last row and ``segment_sum`` drops it, so an out-of-range id gives a
    silently wrong answer rather than an error. Ids are therefore validated
    once on the host (:mod:`sparsegcn._checks`, done by ``Graph``), and the
    gather then uses ``mode="promise_in_bounds"``, which skips the clamp and
    its bounds arithmetic. Passing unvalidated ids here is undefined.

    Args:
      x: ``[N, ...]`` rows.
      ids: int ``[E]`` (or any int shape ``S``), each in ``[0, N)``.

    Returns:
      ``[E, ...]`` (``S + x.shape[1:]``), ``x``'s dtype. Its gradient
      scatter-adds into ``x`` (duplicate ids accumulate).
    """
    x, ids = jnp.asarray(x), jnp.asarray(ids)
    if not jnp.issubdtype(ids.dtype, jnp.integer):
        raise TypeError(f"ids must have an integer dtype, got {ids.dtype}")
    if x.ndim < 1:
        raise ValueError(f"x must have a leading row dimension, got shape {x.shape}")
    return x.at[ids].get(mode="promise_in_bounds")


def gather_rows_widened(x: jax.Array, ids: jax.Array, wide) -> jax.Array:
    """``x[ids]`` in dtype ``wide`` (at least as wide as ``x``'s), gathered in
    ``x``'s dtype; its gradient scatter-adds in ``wide`` and rounds once to
    ``x``'s dtype.

    A bfloat16 (float16) gather's plain transpose scatter-adds in bfloat16,
    where a sum of ones stops growing at 256 (2048): a node read by many edges
    would get a gradient far too small. Ids as :func:`gather_rows` (in range).

    Args:
      x: ``[N, ...]`` rows (e.g. bfloat16).
      ids: int ``[E]``, each in ``[0, N)``.
      wide: the dtype of the result and of the gradient's sums (float32).

    Returns:
      ``[E, ...]`` in ``wide``.
    """
    if jnp.dtype(x.dtype) == jnp.dtype(wide):
        return x.at[ids].get(mode="promise_in_bounds")
    return _gather_widened(x, ids, jnp.dtype(wide), x.shape[0], jnp.dtype(x.dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _gather_widened(x: jax.Array, ids: jax.Array, wide, rows: int, dtype) -> jax.Array:
    return x.at[ids].get(mode="promise_in_bounds").astype(wide)


def _gather_widened_fwd(x, ids, wide, rows, dtype):
    return _gather_widened(x, ids, wide, rows, dtype), ids


def _gather_widened_bwd(wide, rows, dtype, ids, cotangent):
    sums = jax.ops.segment_sum(cotangent.astype(wide), ids, num_segments=rows)
    return sums.astype(dtype), None


_gather_widened.defvjp(_gather_widened_fwd, _gather_widened_bwd)

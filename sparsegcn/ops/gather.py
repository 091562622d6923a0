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
      scatter-adds into ``x`` (duplicate ids accumulate), in float32 for
      bfloat16 and float16 rows, rounded once: a plain scatter-add in
      bfloat16 stops growing at 256 (float16: 2048), and a row read by many
      edges would get a gradient far too small. (Those rows take reverse-mode
      derivatives only: ``jax.jvp`` needs float32.)
    """
    x, ids = jnp.asarray(x), jnp.asarray(ids)
    if not jnp.issubdtype(ids.dtype, jnp.integer):
        raise TypeError(f"ids must have an integer dtype, got {ids.dtype}")
    if x.ndim < 1:
        raise ValueError(f"x must have a leading row dimension, got shape {x.shape}")
    if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize < 4:
        return _gather_narrow(x, ids, x.shape[0], jnp.dtype(jnp.float32))
    return x.at[ids].get(mode="promise_in_bounds")


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _gather_narrow(x: jax.Array, ids: jax.Array, rows: int, wide) -> jax.Array:
    return x.at[ids].get(mode="promise_in_bounds")


def _gather_narrow_fwd(x, ids, rows, wide):
    return _gather_narrow(x, ids, rows, wide), ids


def _gather_narrow_bwd(rows, wide, ids, cotangent):
    sums = jax.ops.segment_sum(cotangent.astype(wide), ids, num_segments=rows)
    return sums.astype(cotangent.dtype), None


_gather_narrow.defvjp(_gather_narrow_fwd, _gather_narrow_bwd)

"""Row gather for validated ids."""

from __future__ import annotations

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

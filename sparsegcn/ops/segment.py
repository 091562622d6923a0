"""Segment reductions: reduce edge rows into node rows by segment id.

Every function takes ``data`` of shape ``[E, ...]`` (one row per edge) and
``segment_ids`` of shape ``[E]`` (the output row of each edge, usually the
receiver) and reduces into ``[num_segments, ...]``. ``num_segments`` must be a
static Python int: it is the output's leading dimension, and under ``jit``
shapes must be known at trace time (as in ``jax.ops.segment_sum`` and jraph).

Empty segments (isolated receivers) are defined, never ``-inf`` or ``NaN``:

=========  ===========================================================
reduction  empty segment
=========  ===========================================================
sum        0
mean       0
max, min   ``fill`` (0 by default, like PyG's ``scatter(reduce="max")``;
           jax and jraph give ``-inf``/``+inf``, which poisons a
           following matmul)
softmax    no entries, so nothing to define; a segment whose entries
           are all masked gives zeros
=========  ===========================================================

XLA's scatter silently drops ids outside ``[0, num_segments)``, so every
function checks concrete ``segment_ids`` on the host first and raises
``ValueError`` naming the first bad id. Traced ids (inside ``jit``, ``grad``
or ``vmap``) are not checked, since that would need a device sync: validate
them beforehand (see :mod:`sparsegcn._checks`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from sparsegcn._checks import check_static_int, is_traced

__all__ = [
    "REDUCTIONS",
    "segment_max",
    "segment_mean",
    "segment_min",
    "segment_reduce",
    "segment_softmax",
    "segment_sum",
]


def check_segment_ids(
    name: str, segment_ids, num_segments: int, *, count_name: str = "num_segments"
) -> None:
    """Raises naming the first concrete id outside ``[0, num_segments)``.

    The message names the ids as ``name`` and the bound as ``count_name``.

    One vectorised min/max on the host; traced ids are skipped (checking
    them would need a device sync), so out-of-range traced ids are still
    dropped by XLA's scatter.
    """
    if is_traced(segment_ids):
        return
    ids = np.asarray(segment_ids)
    if ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        return
    if ids.min() >= 0 and ids.max() < num_segments:
        return
    bad = (ids < 0) | (ids >= num_segments)
    pos = int(np.flatnonzero(bad.ravel())[0])
    raise ValueError(
        f"{name}[{pos}] = {int(ids.ravel()[pos])} is out of range: ids must lie in "
        f"[0, {num_segments}) for {count_name}={num_segments} "
        f"({int(bad.sum())} bad id(s) in all)"
    )


def _prepare(data, segment_ids, num_segments) -> tuple[jax.Array, jax.Array, int]:
    """``data`` and ``segment_ids`` as arrays, checked; ``num_segments`` as an int."""
    raw_ids = segment_ids
    data, segment_ids = jnp.asarray(data), jnp.asarray(segment_ids)
    num_segments = _check_segments(data, segment_ids, num_segments)
    # A host array is checked before the device copy, which may narrow int64 ids to int32.
    check_segment_ids(
        "segment_ids",
        raw_ids if isinstance(raw_ids, np.ndarray) else segment_ids,
        num_segments,
    )
    return data, segment_ids, num_segments


def _check_segments(data: jax.Array, segment_ids: jax.Array, num_segments) -> int:
    """Shape checks (static, so they also run under ``jit``); returns ``num_segments``."""
    num_segments = check_static_int("num_segments", num_segments)
    if data.ndim < 1:
        raise ValueError(f"data must have a leading edge dimension, got shape {data.shape}")
    if segment_ids.ndim != 1:
        raise ValueError(f"segment_ids must have 1 dimension, got shape {segment_ids.shape}")
    if segment_ids.shape[0] != data.shape[0]:
        raise ValueError(
            f"segment_ids has {segment_ids.shape[0]} entries but data has "
            f"{data.shape[0]} rows (shape {data.shape})"
        )
    if not jnp.issubdtype(segment_ids.dtype, jnp.integer):
        raise TypeError(f"segment_ids must have an integer dtype, got {segment_ids.dtype}")
    return num_segments


def _per_row(values: jax.Array, ndim: int) -> jax.Array:
    """``[N]`` -> ``[N, 1, ...]`` with ``ndim`` dimensions, so it broadcasts over rows."""
    return values.reshape(values.shape + (1,) * (ndim - 1))


def accumulation_dtype(dtype) -> jnp.dtype:
    """The dtype sums of ``dtype`` accumulate in: float32 for floats narrower than
    32 bits (bfloat16 counts no further than 256 by ones, float16 than 2048),
    ``dtype`` itself otherwise. Results are cast back to ``dtype``."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4:
        return jnp.dtype(jnp.float32)
    return dtype


def widened_segment_sum(data: jax.Array, segment_ids: jax.Array, **kw) -> jax.Array:
    """``jax.ops.segment_sum`` accumulated in :func:`accumulation_dtype`, cast back
    to ``data``'s dtype (no checks: callers check ids and shapes)."""
    wide = accumulation_dtype(data.dtype)
    if wide == data.dtype:
        return jax.ops.segment_sum(data, segment_ids, **kw)
    return jax.ops.segment_sum(data.astype(wide), segment_ids, **kw).astype(data.dtype)


def _nonempty(segment_ids: jax.Array, num_segments: int, indices_are_sorted: bool) -> jax.Array:
    """Bool ``[num_segments]``: True where at least one id falls in the segment."""
    ones = jnp.ones(segment_ids.shape, jnp.int32)
    counts = jax.ops.segment_sum(
        ones, segment_ids, num_segments=num_segments, indices_are_sorted=indices_are_sorted
    )
    return counts > 0


def segment_sum(
    data: ArrayLike,
    segment_ids: ArrayLike,
    num_segments: int,
    *,
    indices_are_sorted: bool = False,
) -> jax.Array:
    """Sum of the rows of each segment; an empty segment is 0.

    .. math:: y_n = \\sum_{e : s_e = n} x_e

    Args:
      data: ``[E, ...]`` rows to reduce.
      segment_ids: int ``[E]``, each in ``[0, num_segments)`` (checked when
        concrete; traced ids are not checked, and XLA drops those out of range).
      num_segments: static number of output rows ``N``.
      indices_are_sorted: promise that ``segment_ids`` is non-decreasing
        (lets XLA use a faster sorted scatter; a false promise gives wrong
        results).

    Returns:
      ``[N, ...]`` with ``data``'s trailing shape and dtype. Floats narrower
      than 32 bits (bfloat16, float16) are summed in float32 and the sums
      rounded once (in bfloat16, a sum of ones stops growing at 256).

    Raises:
      ValueError: a concrete id outside ``[0, num_segments)``, named with
        its position; shape mismatches.
      TypeError: non-integer ``segment_ids``.
    """
    data, segment_ids, num_segments = _prepare(data, segment_ids, num_segments)
    return widened_segment_sum(
        data, segment_ids, num_segments=num_segments, indices_are_sorted=indices_are_sorted
    )


def segment_mean(
    data: ArrayLike,
    segment_ids: ArrayLike,
    num_segments: int,
    *,
    indices_are_sorted: bool = False,
) -> jax.Array:
    """Mean of the rows of each segment; an empty segment is 0.

    .. math:: y_n = \\frac{1}{\\max(1, |\\{e : s_e = n\\}|)} \\sum_{e : s_e = n} x_e

    Args and shapes as :func:`segment_sum`; ``data`` must be floating point.

    Returns:
      ``[N, ...]`` with ``data``'s trailing shape and dtype (sums and counts
      of bfloat16 or float16 data in float32, the mean rounded once).
    """
    data, segment_ids, num_segments = _prepare(data, segment_ids, num_segments)
    if not jnp.issubdtype(data.dtype, jnp.floating):
        raise TypeError(f"segment_mean needs floating-point data, got {data.dtype}")
    wide = accumulation_dtype(data.dtype)
    totals, counts = (
        jax.ops.segment_sum(
            values,
            segment_ids,
            num_segments=num_segments,
            indices_are_sorted=indices_are_sorted,
        )
        for values in (data.astype(wide), jnp.ones(segment_ids.shape, wide))
    )
    means = totals / _per_row(jnp.maximum(counts, jnp.ones((), wide)), data.ndim)
    return means.astype(data.dtype)


def _segment_extremum(op, data, segment_ids, num_segments, indices_are_sorted, fill):
    data, segment_ids, num_segments = _prepare(data, segment_ids, num_segments)
    result = op(data, segment_ids, num_segments=num_segments, indices_are_sorted=indices_are_sorted)
    # The empty test uses counts, not isinf(result): a real -inf entry is not an empty segment.
    nonempty = _nonempty(segment_ids, num_segments, indices_are_sorted)
    return jnp.where(_per_row(nonempty, data.ndim), result, jnp.asarray(fill, data.dtype))


def segment_max(
    data: ArrayLike,
    segment_ids: ArrayLike,
    num_segments: int,
    *,
    indices_are_sorted: bool = False,
    fill: float = 0.0,
) -> jax.Array:
    """Element-wise maximum over the rows of each segment; an empty segment is ``fill``.

    .. math:: y_n = \\max_{e : s_e = n} x_e \\quad (\\text{fill if empty})

    ``fill`` defaults to 0, as PyG's ``scatter(..., reduce="max")``;
    ``jax.ops.segment_max`` and jraph return ``-inf`` (the dtype's minimum
    for integers) instead.

    The gradient is that of ``jax.ops.segment_max``: each output's cotangent
    flows to the entries equal to the maximum, split evenly among ties
    (two tied entries get half each). An empty segment's cotangent goes
    nowhere.

    Args:
      data: ``[E, ...]`` rows to reduce.
      segment_ids: int ``[E]``, each in ``[0, num_segments)`` (checked when
        concrete; traced ids are not checked, and XLA drops those out of range).
      num_segments: static number of output rows ``N``.
      indices_are_sorted: promise that ``segment_ids`` is non-decreasing.
      fill: value of empty segments, cast to ``data.dtype``.

    Returns:
      ``[N, ...]`` with ``data``'s trailing shape and dtype.

    Raises:
      ValueError: a concrete id outside ``[0, num_segments)``, named with
        its position; shape mismatches.
      TypeError: non-integer ``segment_ids``.
    """
    return _segment_extremum(
        jax.ops.segment_max, data, segment_ids, num_segments, indices_are_sorted, fill
    )


def segment_min(
    data: ArrayLike,
    segment_ids: ArrayLike,
    num_segments: int,
    *,
    indices_are_sorted: bool = False,
    fill: float = 0.0,
) -> jax.Array:
    """Element-wise minimum over the rows of each segment; an empty segment is ``fill``.

    The mirror of :func:`segment_max` (same arguments, same tie rule for the
    gradient; ``jax.ops.segment_min`` would give ``+inf`` for empty segments).
    """
    return _segment_extremum(
        jax.ops.segment_min, data, segment_ids, num_segments, indices_are_sorted, fill
    )


def segment_softmax(
    logits: ArrayLike,
    segment_ids: ArrayLike,
    num_segments: int,
    *,
    mask: ArrayLike | None = None,
    indices_are_sorted: bool = False,
) -> jax.Array:
    """Softmax of the entries of each segment (attention weights over in-edges).

    .. math::
        \\alpha_e = \\frac{\\exp(z_e - m_{s_e})}{\\sum_{e' : s_{e'} = s_e} \\exp(z_{e'} - m_{s_e})},
        \\qquad m_n = \\max_{e : s_e = n} z_e

    Subtracting the per-segment maximum keeps ``exp`` from overflowing
    (logits of 1e4 are fine); the maximum is wrapped in ``stop_gradient``,
    which changes nothing mathematically (softmax is shift-invariant) but
    keeps the tie rule of ``segment_max`` out of the gradient. Heads (the
    trailing dimensions) are normalised independently.

    Entries with ``mask[e] == False`` get weight exactly 0 and take no part
    in the maximum or the sum (padding edges, dropped edges). A segment whose
    entries are all masked gives zeros, with a zero (finite) gradient.

    Args:
      logits: floating ``[E]`` or ``[E, H, ...]`` scores.
      segment_ids: int ``[E]``, each in ``[0, num_segments)`` (checked when
        concrete; traced ids are not checked, and XLA drops those out of range).
      num_segments: static number of segments ``N``.
      mask: optional bool ``[E]``; False entries are excluded.
      indices_are_sorted: promise that ``segment_ids`` is non-decreasing.

    Returns:
      ``[E, ...]``, the shape and dtype of ``logits``; over the unmasked
      entries of each segment (per head) the weights sum to 1.

    Raises:
      ValueError: a concrete id outside ``[0, num_segments)``, named with
        its position; shape mismatches.
      TypeError: non-integer ``segment_ids``.

    References:
      Veličković et al., "Graph Attention Networks", ICLR 2018.
    """
    logits, segment_ids, num_segments = _prepare(logits, segment_ids, num_segments)
    if not jnp.issubdtype(logits.dtype, jnp.floating):
        raise TypeError(f"segment_softmax needs floating-point logits, got {logits.dtype}")
    kw: dict[str, Any] = dict(num_segments=num_segments, indices_are_sorted=indices_are_sorted)
    if mask is None:
        keep = None
        masked = logits
    else:
        mask = jnp.asarray(mask)
        if mask.dtype != jnp.bool_ or mask.shape != segment_ids.shape:
            raise ValueError(
                f"mask must be bool of shape {segment_ids.shape}, got {mask.dtype} {mask.shape}"
            )
        keep = _per_row(mask, logits.ndim)
        masked = jnp.where(keep, logits, jnp.asarray(-jnp.inf, logits.dtype))
    maxes = jax.ops.segment_max(masked, segment_ids, **kw)
    # Empty and all-masked segments have max -inf; any finite shift will do there.
    maxes = jax.lax.stop_gradient(jnp.where(jnp.isfinite(maxes), maxes, jnp.zeros((), maxes.dtype)))
    shifted = logits - maxes.at[segment_ids].get(mode="promise_in_bounds")
    if keep is not None:
        # Zero the masked shifts *before* exp, so a masked entry's exp (and its
        # gradient) stays finite whatever its logit was.
        shifted = jnp.where(keep, shifted, jnp.zeros((), shifted.dtype))
    weights = jnp.exp(shifted)
    if keep is not None:
        weights = jnp.where(keep, weights, jnp.zeros((), weights.dtype))
    totals = widened_segment_sum(weights, segment_ids, **kw)
    # Non-empty segments have total >= 1 (their maximum contributes exp(0));
    # all-masked ones have 0, replaced by 1 so that 0 / 1 = 0 instead of NaN.
    totals = jnp.where(totals > 0, totals, jnp.ones((), totals.dtype))
    return weights / totals.at[segment_ids].get(mode="promise_in_bounds")


REDUCTIONS: dict[str, Callable[..., jax.Array]] = {
    "sum": segment_sum,
    "mean": segment_mean,
    "max": segment_max,
    "min": segment_min,
}
"""The aggregations a message-passing layer can name, by name."""


def segment_reduce(
    data: ArrayLike,
    segment_ids: ArrayLike,
    num_segments: int,
    reduce: str,
    **kw,
) -> jax.Array:
    """Reduces by the named aggregation, one of :data:`REDUCTIONS`.

    Args:
      data, segment_ids, num_segments: as :func:`segment_sum`.
      reduce: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
      **kw: passed on (``indices_are_sorted``; ``fill`` for max and min).

    Returns:
      ``[num_segments, ...]``.
    """
    try:
        fn = REDUCTIONS[reduce]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown reduce {reduce!r}; expected one of {sorted(REDUCTIONS)}"
        ) from None
    return fn(data, segment_ids, num_segments, **kw)

"""Evaluation metrics as JAX functions: masked, static-shaped, jit- and vmap-able.

Every metric here runs on the device inside a compiled program (a whole
epoch's evaluation never returns scores to the host), and equals the
official definition it names:

- :func:`roc_auc` and :func:`average_precision` per task: scikit-learn's
  ``roc_auc_score`` and ``average_precision_score`` (ties handled as they
  do), which ``ogb``'s ``Evaluator`` calls for ``rocauc`` and ``ap``;
  :func:`mean_over_tasks` averages the tasks where the metric is defined,
  as ``ogb`` does (tasks with both a positive and a negative label);
- :func:`ranking_auc_ap`: the same two of positives against negatives held
  apart, sorting only the negatives (link prediction's few positives and
  many negatives);
- :func:`hits_at_k` and :func:`mrr`: ``ogb``'s link-prediction ``hits@K``
  and ``mrr``.

Missing labels are a boolean mask, or NaN: a NaN label is missing wherever it
stands, as ``ogb``'s ``Evaluator`` skips it (``mask & ~isnan(labels)`` is what
counts), never a negative.

Scores are compared in their own precision. On the device every metric compares
float32 (float64 under ``jax_enable_x64``); concrete scores of a wider dtype
(float64, int32, int64: what NumPy and Python lists give) are checked on the host
first, and where two distinct scores would round to one float32 they are replaced
by their ranks among all the scores compared (order and ties exactly theirs), so a
cast never turns a win into a tie (scikit-learn and ``ogb`` compare float64). More
than ``2**24`` distinct such scores cannot be ranked in float32 and are refused
(``ValueError``). Traced scores of a dtype wider than the device's are compared as
cast, as ``jit`` casts them.

Bad input is refused on the host before anything is computed: shapes and
complex dtypes always (they are static, so under ``jit`` too; ``TypeError``
naming the dtype, as scikit-learn refuses complex data), and NaN scores where
the scores are concrete arrays (``ValueError`` naming the first; scikit-learn
raises on NaN too). Inside a compiled program, where values cannot be checked,
a NaN among the scores counted makes the metric NaN, never a perfect score. A
NaN in a masked entry (padding, a missing label) counts for nothing, like the
entry.

Infinite scores are ranked, not refused. Every metric here depends on the
scores only through comparisons, and IEEE order places ``-inf`` below and
``inf`` above every finite score, tied with itself: each metric's value is
the one scikit-learn and ``ogb`` give for the scores with every infinity
replaced by a finite value beyond the others (the same order and ties).
scikit-learn's ``roc_auc_score`` and ``average_precision_score`` refuse
infinities (and so ``ogb``'s ``rocauc`` and ``ap``) only by their blanket
finiteness check of any input; ``ogb``'s ``hits@K`` and ``mrr`` compare them.
Log-probabilities are ``-inf`` where a probability underflows (masked
entries sort as ``-inf`` here too, apart from valid ones), and overflow cannot
flatter a model: scores that all overflow to one infinity tie (AUC 0.5, AP the
positives' share, Hits@K 0). NaN differs: it is unordered (every comparison is
false), so it has no rank.

References:
  Hu et al., *Open Graph Benchmark: Datasets for Machine Learning on
  Graphs*, NeurIPS 2020 (``ogb/graphproppred/evaluate.py``,
  ``ogb/linkproppred/evaluate.py``). https://arxiv.org/abs/2005.00687
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from sparsegcn._checks import is_traced


def _refuse_nan(name: str, scores: np.ndarray | jax.Array, valid: jax.Array | None = None) -> None:
    """Raises naming the first NaN of ``scores`` where ``valid`` (broadcast from the
    left: a row mask covers its row). Tracers, and arrays this process cannot read
    whole, pass: the metric itself turns their NaN into a NaN result."""
    arrays = (scores,) if valid is None else (scores, valid)
    if is_traced(*arrays) or not all(getattr(a, "is_fully_addressable", True) for a in arrays):
        return
    bad = np.isnan(np.asarray(scores))
    if valid is not None:
        keep = np.asarray(valid)
        bad &= keep.reshape(keep.shape + (1,) * (bad.ndim - keep.ndim))
    if bad.any():
        pos = np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape)
        where = ", ".join(str(int(i)) for i in pos)
        raise ValueError(
            f"{name}[{where}] is NaN ({int(bad.sum())} NaN score(s) in all): a metric of "
            f"NaN scores is undefined; check the model's outputs for divergence, or mask "
            f"these entries out"
        )


def _real(name: str, values: ArrayLike) -> np.ndarray | jax.Array:
    """``values`` as an array (NumPy, or the JAX array or tracer given), refused
    unless its dtype is real (bool, integer or floating): a cast of complex scores to
    float32 drops the imaginary parts with only a warning, and JAX orders complex
    numbers by their real parts first, so the metric would silently be that of other
    numbers."""
    array = values if isinstance(values, (jax.Array, np.ndarray)) else np.asarray(values)
    dtype = array.dtype
    if not (
        jnp.issubdtype(dtype, jnp.floating)
        or jnp.issubdtype(dtype, jnp.integer)
        or dtype == jnp.bool_
    ):
        raise TypeError(
            f"{name} must be real numbers (a bool, integer or floating dtype), got dtype {dtype}"
        )
    return array


def _exact_in_float32(dtype) -> bool:
    """Whether float32 holds every value of ``dtype`` exactly (so the cast keeps
    every comparison): bool, integers of 16 bits or fewer, floats of 32 or fewer."""
    if dtype == jnp.bool_:
        return True
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.iinfo(dtype).bits <= 16
    return jnp.finfo(dtype).bits <= 32


def _exact_cast(array: np.ndarray) -> bool:
    """Whether every value of the NumPy ``array`` survives the cast to float32 (NaN
    as NaN); a sufficient test for integers (``|x| <= 2**24``)."""
    if array.size == 0 or _exact_in_float32(array.dtype):
        return True
    if jnp.issubdtype(array.dtype, jnp.integer):
        return int(array.min()) >= -(2**24) and int(array.max()) <= 2**24
    with np.errstate(over="ignore"):
        return bool(np.array_equal(array.astype(np.float32), array, equal_nan=True))


_RANKABLE = 2**24
"""The most distinct values whose ranks float32 holds exactly (0 to ``2**24 - 1``)."""


def _comparable(named: dict[str, np.ndarray | jax.Array]) -> tuple[jax.Array, ...]:
    """The score arrays of ``named`` (compared with each other) as device arrays
    whose every comparison, within an array and across them, is the one of the
    values given, in their own precision.

    float32 (and narrower) scores, the compiled training paths', pass as they are.
    Traced wider ones are cast (float64 under ``jax_enable_x64``): their values
    cannot be read. Concrete wider ones (float64, int32, int64) are cast to float32
    unless two distinct values would round to one float32 (``1 + 1e-9`` and ``1``;
    ``2**24 + 1`` and ``2**24``); then each array is replaced by the ranks of its
    values among the distinct values of all of them (NaN kept), which float32
    holds exactly up to ``2**24`` distinct values.

    Raises:
      ValueError: more than ``2**24`` distinct values, some equal as float32.
    """
    arrays = list(named.values())
    if all(_exact_in_float32(a.dtype) for a in arrays):
        return tuple(jnp.asarray(a, jnp.float32) for a in arrays)
    if is_traced(*arrays) or not all(getattr(a, "is_fully_addressable", True) for a in arrays):
        wide = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32  # type: ignore[attr-defined]
        return tuple(jnp.asarray(a, wide) for a in arrays)
    hosts = [np.asarray(a) for a in arrays]
    if all(_exact_cast(h) for h in hosts):
        return tuple(jnp.asarray(h, jnp.float32) for h in hosts)
    distinct = np.unique(
        np.concatenate([h[~np.isnan(h)] if h.dtype.kind == "f" else h.ravel() for h in hosts])
    )
    with np.errstate(over="ignore"):
        rounded = distinct.astype(np.float32)
    if not np.any(rounded[1:] == rounded[:-1]):  # the cast is monotone: order and ties kept
        return tuple(jnp.asarray(h, jnp.float32) for h in hosts)
    if distinct.size > _RANKABLE:
        raise ValueError(
            f"{' and '.join(named)} ({distinct.dtype}) hold {distinct.size} distinct values, "
            f"some of which are equal as float32, the precision these metrics compare in: "
            f"too many (> 2**24) to rank exactly in float32; cast the scores to float32 "
            f"yourself to accept its ties"
        )
    ranked = []
    for h in hosts:
        rank = np.searchsorted(distinct, h).astype(np.float32)
        if h.dtype.kind == "f":
            rank[np.isnan(h)] = np.nan
        ranked.append(jnp.asarray(rank))
    return tuple(ranked)


def _label_parts(labels: np.ndarray | jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(positive, present)`` of ``labels`` in their own precision: ``> 0.5``, and
    not NaN (a NaN label is missing, as ``ogb`` skips it)."""
    if labels.dtype == jnp.bool_:
        return jnp.asarray(labels), jnp.ones(labels.shape, bool)
    if jnp.issubdtype(labels.dtype, jnp.integer):  # > 0.5 is > 0, without a float cast
        return jnp.asarray(labels > 0), jnp.ones(labels.shape, bool)
    xp = np if isinstance(labels, np.ndarray) else jnp
    return jnp.asarray(labels > 0.5), jnp.asarray(~xp.isnan(labels))


def _bool_mask(name: str, mask: ArrayLike | None, shape: tuple, per: str = "score") -> jax.Array:
    """``mask`` as a bool array of ``shape`` (``None``: all True); a mask of another
    dtype (an int mask meets ``&`` bitwise) or shape (it would broadcast) is refused."""
    if mask is None:
        return jnp.ones(shape, bool)
    valid = jnp.asarray(mask)
    if valid.dtype != jnp.bool_:
        raise TypeError(f"{name} must be a bool array, got {valid.dtype}")
    if valid.shape != shape:
        raise ValueError(f"{name} must have shape {shape} (one entry per {per}), got {valid.shape}")
    return valid


def _scores_1d(name: str, scores: ArrayLike) -> np.ndarray | jax.Array:
    """``scores`` as a real ``[n]`` array (NumPy or JAX, its dtype kept for
    :func:`_comparable`), ``n >= 1``; other ranks, empty arrays and complex dtypes
    refused."""
    out = _real(name, scores)
    if out.ndim != 1:
        raise ValueError(f"{name} must be [P], got shape {out.shape}")
    if out.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one score (P >= 1), got shape {out.shape}")
    return out


def _sorted_groups(scores: jax.Array, positive: jax.Array, valid: jax.Array):
    """One sort of a task's scores: each entry's tie group bounds, in sorted order.

    Masked entries sort below every valid score, in a group of their own
    (sorted by validity first: a valid ``-inf`` score never ties with
    them). Returns the sorted positive indicator ``[N]`` (masked: 0), each
    sorted entry's tie group ``start`` and ``end`` (inclusive) positions,
    and the masked count.
    """
    s = jnp.where(valid, scores, -jnp.inf)
    keys = (valid.astype(jnp.int32), s, (positive & valid).astype(jnp.float32))
    kept, ordered, pos = jax.lax.sort(keys, num_keys=2)
    index = jnp.arange(s.shape[0])
    change = (ordered[1:] != ordered[:-1]) | (kept[1:] != kept[:-1])
    first = jnp.concatenate([jnp.ones((1,), bool), change])
    last = jnp.concatenate([change, jnp.ones((1,), bool)])
    start = jax.lax.cummax(jnp.where(first, index, 0))
    end = jax.lax.cummin(jnp.where(last, index, s.shape[0] - 1), reverse=True)
    return pos, start, end, jnp.sum(~valid)


def _column_roc_auc(scores: jax.Array, positive: jax.Array, valid: jax.Array) -> jax.Array:
    pos, start, end, invalid = _sorted_groups(scores, positive, valid)
    # 1-based rank among the valid entries, ties sharing their mean rank.
    mid_rank = 0.5 * (start + end).astype(jnp.float32) + 1.0 - invalid.astype(jnp.float32)
    num_pos = jnp.sum(pos)
    num_neg = jnp.sum(~positive & valid).astype(jnp.float32)
    rank_sum = jnp.sum(pos * mid_rank)
    auc = (rank_sum - 0.5 * num_pos * (num_pos + 1.0)) / (num_pos * num_neg)
    defined = (num_pos > 0) & (num_neg > 0) & ~jnp.any(jnp.isnan(scores) & valid)
    return jnp.where(defined, auc, jnp.nan)


def _column_average_precision(
    scores: jax.Array, positive: jax.Array, valid: jax.Array
) -> jax.Array:
    pos, start, _, _ = _sorted_groups(scores, positive, valid)
    # positives_before[k]: positives among the k lowest entries.
    positives_before = jnp.concatenate([jnp.zeros((1,), jnp.float32), jnp.cumsum(pos)])
    total = pos.shape[0]
    num_pos = jnp.sum(pos)
    # Entries scoring at least an entry's score: its threshold keeps its whole tie group.
    kept = (total - start).astype(jnp.float32)
    true_kept = num_pos - positives_before[start]
    precision = true_kept / jnp.maximum(kept, 1.0)
    ap = jnp.sum(pos * precision) / num_pos
    defined = (num_pos > 0) & (jnp.sum(~positive & valid) > 0)
    defined &= ~jnp.any(jnp.isnan(scores) & valid)
    return jnp.where(defined, ap, jnp.nan)


def _per_task(fn, scores: ArrayLike, labels: ArrayLike, mask: ArrayLike | None) -> jax.Array:
    scores = _real("scores", scores)
    labels = _real("labels", labels)
    if scores.shape != labels.shape:
        raise ValueError(
            f"scores and labels must have the same shape, got {scores.shape} and {labels.shape}"
        )
    if scores.ndim not in (1, 2):
        raise ValueError(f"scores must be [N] or [N, T], got shape {scores.shape}")
    positive, present = _label_parts(labels)
    valid = _bool_mask("mask", mask, scores.shape) & present
    _refuse_nan("scores", scores, valid)
    (scores,) = _comparable({"scores": scores})
    if scores.ndim == 1:
        return fn(scores, positive, valid)
    return jax.vmap(fn, in_axes=1)(scores, positive, valid)


def roc_auc(scores: ArrayLike, labels: ArrayLike, mask: ArrayLike | None = None) -> jax.Array:
    """Area under the ROC curve of each task, from ranks (Mann–Whitney).

    .. math::

        \\mathrm{AUC} = \\frac{\\sum_{i \\in P} r_i - |P|(|P| + 1)/2}{|P|\\,|N|}

    with :math:`r_i` the 1-based rank of score :math:`i` among the task's
    unmasked scores, tied scores sharing their mean rank (so ties count a
    half, as in scikit-learn).

    Args:
      scores: ``[N]`` or ``[N, T]`` (any monotone scale: logits or probabilities),
        compared in their own precision (see the module's notes).
      labels: the same shape, 1 (or ``> 0.5``) positive, NaN missing (as if
        masked out, as ``ogb`` skips it), else negative.
      mask: bool, the same shape: which labels exist (``None``: all).

    Returns:
      float32 ``[]`` or ``[T]``; NaN for a task without both a positive and
      a negative unmasked label, and under ``jit`` for a task with a NaN
      unmasked score.

    Raises:
      ValueError: a shape mismatch; a NaN unmasked score of concrete ``scores``
        (scikit-learn raises on NaN too); more than ``2**24`` distinct concrete
        float64 or int scores that float32 cannot tell apart.
      TypeError: a ``mask`` that is not bool (0.5 would count as True); complex
        ``scores`` or ``labels``.
    """
    return _per_task(_column_roc_auc, scores, labels, mask)


def average_precision(
    scores: ArrayLike, labels: ArrayLike, mask: ArrayLike | None = None
) -> jax.Array:
    """Average precision of each task, as scikit-learn's ``average_precision_score``.

    .. math::

        \\mathrm{AP} = \\sum_k (R_k - R_{k-1})\\, P_k
            = \\frac{1}{|P|} \\sum_{i \\in P} \\mathrm{precision}(s_i)

    over the distinct thresholds :math:`s`, where
    :math:`\\mathrm{precision}(s)` is the fraction of positives among the
    unmasked scores :math:`\\ge s` (a tie group enters at once).

    Args:
      scores, labels, mask: as :func:`roc_auc`.

    Returns:
      float32 ``[]`` or ``[T]``; NaN where a task lacks a positive or a negative
      (``ogb`` skips such tasks), and under ``jit`` for a task with a NaN
      unmasked score.

    Raises:
      ValueError, TypeError: as :func:`roc_auc`.
    """
    return _per_task(_column_average_precision, scores, labels, mask)


def ranking_auc_ap(
    positive_scores: ArrayLike, negative_scores: ArrayLike
) -> tuple[jax.Array, jax.Array]:
    """``(AUC, AP)`` of positives against negatives given apart: :func:`roc_auc` and
    :func:`average_precision` of their concatenation, with one sort of the negatives.

    .. math::

        \\mathrm{AUC} = \\frac{1}{|P|\\,|N|} \\sum_{i \\in P}
            \\big(|\\{n < s_i\\}| + \\tfrac12 |\\{n = s_i\\}|\\big),
        \\qquad
        \\mathrm{AP} = \\frac{1}{|P|} \\sum_{i \\in P}
            \\frac{|\\{p \\ge s_i\\}|}{|\\{p \\ge s_i\\}| + |\\{n \\ge s_i\\}|}

    The counts over the negatives are binary searches in their sorted copy,
    those over the positives in theirs; nothing the size of both together
    is built. Link evaluation ranks few positives against many negatives
    (ogbl-citation2: 86,596 against 86.6 M), where sorting all of them with
    their labels took gigabytes.

    Args:
      positive_scores: ``[P]``, ``P >= 1``.
      negative_scores: any shape, ``Q >= 1`` entries (flattened).

    Returns:
      float32 ``([], [])``; both NaN under ``jit`` when a score is NaN.

    Raises:
      ValueError: ``P == 0`` or ``Q == 0``; a NaN among concrete scores; more than
        ``2**24`` distinct concrete scores that float32 cannot tell apart.
      TypeError: complex scores.
    """
    pos = _real("positive_scores", positive_scores)
    neg = _real("negative_scores", negative_scores)
    for name, scores, side in (("positive", pos, "P"), ("negative", neg, "Q")):
        if scores.size == 0:
            raise ValueError(
                f"{name}_scores must hold at least one score ({side} >= 1), "
                f"got shape {scores.shape}"
            )
        _refuse_nan(f"{name}_scores", scores)
    pos, neg = _comparable({"positive_scores": pos, "negative_scores": neg})
    pos, neg = pos.reshape(-1), neg.reshape(-1)
    undefined = jnp.any(jnp.isnan(pos)) | jnp.any(jnp.isnan(neg))
    neg = jnp.sort(neg)
    ranked = jnp.sort(pos)
    below = jnp.searchsorted(neg, pos, side="left").astype(jnp.float32)
    at_most = jnp.searchsorted(neg, pos, side="right").astype(jnp.float32)
    num_pos, num_neg = float(pos.shape[0]), float(neg.shape[0])
    auc = jnp.mean((below + 0.5 * (at_most - below)) / num_neg)
    true_kept = num_pos - jnp.searchsorted(ranked, pos, side="left").astype(jnp.float32)
    false_kept = num_neg - below
    ap = jnp.mean(true_kept / (true_kept + false_kept))
    return jnp.where(undefined, jnp.nan, auc), jnp.where(undefined, jnp.nan, ap)


def mean_over_tasks(
    values: ArrayLike, scores: ArrayLike | None = None, mask: ArrayLike | None = None
) -> jax.Array:
    """The mean of the defined (non-NaN) per-task values, as ``ogb`` averages
    ``rocauc`` and ``ap``; NaN when no task is defined.

    With the ``scores`` (and bool ``mask``) the values came from, the mean is
    NaN as well when an unmasked score is NaN: a task left undefined by NaN
    scores (a diverged model) must not drop out of the mean the way a task
    without both labels does, leaving a good-looking mean of the others.

    An infinite value is averaged, not refused: it is a true error (``ogb``'s
    ``rmse`` of infinite predictions is infinite too), never a ranking metric's.

    Raises:
      TypeError: complex ``values`` or ``scores``.
    """
    values = jnp.asarray(_real("values", values))
    defined = ~jnp.isnan(values)
    count = jnp.sum(defined)
    total = jnp.sum(jnp.where(defined, values, 0.0))
    mean = total / jnp.maximum(count, 1).astype(total.dtype)
    undefined = count == 0
    if scores is not None:
        nan_scores = jnp.isnan(jnp.asarray(_real("scores", scores)))
        if mask is not None:
            nan_scores = nan_scores & jnp.asarray(mask, bool)
        undefined = undefined | jnp.any(nan_scores)
    return jnp.where(undefined, jnp.nan, mean)


def hits_at_k(
    positive_scores: ArrayLike,
    negative_scores: ArrayLike,
    k: int,
    *,
    positive_mask: ArrayLike | None = None,
    negative_mask: ArrayLike | None = None,
) -> jax.Array:
    """``ogb``'s Hits@K: the fraction of positives scoring above the K-th best negative.

    .. math::

        \\mathrm{Hits@}K = \\frac{1}{|P|} \\sum_{i \\in P} [s_i > t_K],
        \\qquad t_K = K\\text{-th largest negative score}

    Ties with :math:`t_K` count as misses; with fewer than ``K`` negatives
    the value is 1, as in ``ogb``.

    Args:
      positive_scores: ``[P]``, ``P >= 1``.
      negative_scores: ``[Q]`` (shared by every positive; per-positive
        negatives ``[P, K]`` are :func:`mrr`'s).
      k: static ``K >= 1`` (a Python or NumPy int).
      positive_mask, negative_mask: bool ``[P]``, ``[Q]``: the real entries
        of padded arrays (``None``: all).

    Returns:
      float32 ``[]``; NaN when every positive is masked (``ogb`` divides by
      zero), and under ``jit`` when an unmasked score is NaN.

    Raises:
      ValueError: ``k``, a shape, or a NaN unmasked concrete score; more than
        ``2**24`` distinct concrete scores that float32 cannot tell apart.
      TypeError: a mask that is not bool; complex scores.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    k = int(k)
    pos = _scores_1d("positive_scores", positive_scores)
    neg = _real("negative_scores", negative_scores)
    if neg.ndim != 1:
        raise ValueError(
            f"negative_scores must be [Q] (shared by every positive; mrr ranks each "
            f"positive among its own [P, K]), got shape {neg.shape}"
        )
    pmask = _bool_mask("positive_mask", positive_mask, pos.shape)
    nmask = _bool_mask("negative_mask", negative_mask, neg.shape)
    _refuse_nan("positive_scores", pos, pmask)
    _refuse_nan("negative_scores", neg, nmask)
    pos, neg = _comparable({"positive_scores": pos, "negative_scores": neg})
    count = jnp.sum(pmask)
    undefined = (count == 0) | jnp.any(jnp.isnan(pos) & pmask) | jnp.any(jnp.isnan(neg) & nmask)
    width = min(k, neg.shape[0])
    if width == 0:
        return jnp.where(undefined, jnp.nan, jnp.float32(1.0))
    masked = jnp.where(nmask, neg, -jnp.inf)
    kth = jax.lax.top_k(masked, width)[0][-1]
    enough = jnp.sum(nmask) >= k
    hits = jnp.sum((pos > kth) & pmask).astype(jnp.float32)
    hits = hits / jnp.maximum(count, 1).astype(jnp.float32)
    return jnp.where(undefined, jnp.nan, jnp.where(enough, hits, jnp.float32(1.0)))


def mrr(
    positive_scores: ArrayLike, negative_scores: ArrayLike, mask: ArrayLike | None = None
) -> jax.Array:
    """``ogb``'s mean reciprocal rank of each positive among its own negatives.

    The rank is the mean of the optimistic and pessimistic ranks, so a tie
    counts a half:

    .. math::

        r_i = 1 + \\tfrac12\\big(|\\{j : n_{ij} \\ge s_i\\}| + |\\{j : n_{ij} > s_i\\}|\\big),
        \\qquad \\mathrm{MRR} = \\frac{1}{|P|} \\sum_i \\frac{1}{r_i}

    Args:
      positive_scores: ``[P]``, ``P >= 1``.
      negative_scores: ``[P, K]``, row ``i`` the negatives of positive ``i``.
      mask: bool ``[P]``, the real rows (``None``: all).

    Returns:
      float32 ``[]``; NaN when every row is masked (``ogb``'s mean of no
      ranks), and under ``jit`` when an unmasked row holds a NaN score
      (``ogb`` would rank a NaN positive first).

    Raises:
      ValueError: a shape, or a NaN in an unmasked row of concrete scores; more
        than ``2**24`` distinct concrete scores that float32 cannot tell apart.
      TypeError: a mask that is not bool; complex scores.
    """
    pos = _scores_1d("positive_scores", positive_scores)
    neg = _real("negative_scores", negative_scores)
    if neg.ndim != 2 or neg.shape[0] != pos.shape[0]:
        raise ValueError(
            f"negative_scores must be [P, K] with P={pos.shape[0]}, got shape {neg.shape}"
        )
    valid = _bool_mask("mask", mask, pos.shape, per="row")
    _refuse_nan("positive_scores", pos, valid)
    _refuse_nan("negative_scores", neg, valid)
    pos, neg = _comparable({"positive_scores": pos, "negative_scores": neg})
    optimistic = jnp.sum(neg >= pos[:, None], axis=1)
    pessimistic = jnp.sum(neg > pos[:, None], axis=1)
    reciprocal = 1.0 / (0.5 * (optimistic + pessimistic).astype(jnp.float32) + 1.0)
    unranked = jnp.isnan(pos) | jnp.any(jnp.isnan(neg), axis=1)
    reciprocal = jnp.where(unranked, jnp.nan, reciprocal)
    count = jnp.sum(valid)
    total = jnp.sum(jnp.where(valid, reciprocal, 0.0))
    return jnp.where(count > 0, total / jnp.maximum(count, 1).astype(jnp.float32), jnp.nan)


def check_tasks_defined(labels, rows, where: str) -> None:
    """Refuses an evaluation split on which no task has both a positive and a negative
    label: its ROC-AUC is undefined (NaN), so it could neither select a model nor
    report one (``ogb``'s Evaluator raises on it), and :func:`mean_over_tasks`
    has nothing to average.

    Args:
      labels: ``[N, T]`` 0/1 labels, a missing one NaN or negative.
      rows: the split's rows of ``labels`` (int ids or a boolean mask).
      where: what the rows are, for the message (``"ogbn-proteins' valid nodes"``).

    Raises:
      ValueError: naming ``where``, its rows and labels.
    """
    import numpy as np

    y = np.asarray(labels, np.float64)
    y = y.reshape(y.shape[0], -1)[np.asarray(rows)]
    present = np.isfinite(y) & (y >= 0)
    positive, negative = (present & (y > 0)).any(0), (present & (y == 0)).any(0)
    if not (positive & negative).any():
        raise ValueError(
            f"{where} ({y.shape[0]}): no task has both a positive and a negative label among "
            f"them ({int(present.sum())} labels, {int((present & (y > 0)).sum())} positive), "
            f"so their ROC-AUC is undefined; split the data so each evaluation split holds "
            f"both classes of some task"
        )


__all__ = [
    "average_precision",
    "check_tasks_defined",
    "hits_at_k",
    "mean_over_tasks",
    "mrr",
    "ranking_auc_ap",
    "roc_auc",
]

"""The device metrics against scikit-learn and ogb's Evaluator on random scores."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sparsegcn.metrics import (
    average_precision,
    hits_at_k,
    mean_over_tasks,
    mrr,
    ranking_auc_ap,
    roc_auc,
)

sklearn_metrics = pytest.importorskip("sklearn.metrics")


def _scores(seed: int, n: int = 60, tasks: int = 5, ties: bool = False):
    rng = np.random.default_rng(seed)
    labels = (rng.random((n, tasks)) < 0.3).astype(np.float32)
    scores = rng.normal(size=(n, tasks)).astype(np.float32) + labels
    if ties:  # few distinct values: tie groups mixing both classes
        scores = np.round(scores * 2) / 2
    mask = rng.random((n, tasks)) < 0.8
    return scores, labels, mask


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_roc_auc_and_ap_equal_sklearn_per_task(seed, ties):
    scores, labels, mask = _scores(seed, ties=ties)
    auc = np.asarray(jax.jit(roc_auc)(scores, labels, mask))
    ap = np.asarray(jax.jit(average_precision)(scores, labels, mask))
    for t in range(scores.shape[1]):
        m = mask[:, t]
        want_auc = sklearn_metrics.roc_auc_score(labels[m, t], scores[m, t])
        want_ap = sklearn_metrics.average_precision_score(labels[m, t], scores[m, t])
        np.testing.assert_allclose(auc[t], want_auc, rtol=1e-5)
        np.testing.assert_allclose(ap[t], want_ap, rtol=1e-5)


@pytest.mark.parametrize("ties", [False, True])
def test_positives_against_negatives_equal_sklearn_on_their_concatenation(ties):
    """Link evaluation's shape: few positives, many negatives in rows; ties across
    and within the classes (rounded scores) count as scikit-learn counts them."""
    rng = np.random.default_rng(3)
    pos = rng.normal(1.0, 1.0, 40).astype(np.float32)
    neg = rng.normal(0.0, 1.0, (40, 25)).astype(np.float32)
    if ties:
        pos, neg = np.round(pos * 2) / 2, np.round(neg * 2) / 2
    auc, ap = jax.jit(ranking_auc_ap)(pos, neg)
    scores = np.concatenate([pos, neg.ravel()])
    labels = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    np.testing.assert_allclose(auc, sklearn_metrics.roc_auc_score(labels, scores), rtol=1e-5)
    np.testing.assert_allclose(
        ap, sklearn_metrics.average_precision_score(labels, scores), rtol=1e-5
    )
    # The hand-computed case of roc_auc and average_precision below.
    auc, ap = ranking_auc_ap(np.array([0.8, 0.4]), np.array([0.4, 0.1]))
    assert float(auc) == pytest.approx(0.875) and float(ap) == pytest.approx(0.5 + 1 / 3)


def test_undefined_tasks_are_nan_and_skipped_by_the_mean():
    scores = np.array([[0.1, 0.2], [0.4, 0.3], [0.9, 0.5]], np.float32)
    labels = np.array([[0, 1], [1, 1], [1, 1]], np.float32)  # task 1: no negative
    auc = np.asarray(roc_auc(scores, labels))
    assert auc[0] == 1.0 and np.isnan(auc[1])
    assert np.isnan(np.asarray(average_precision(scores, labels))[1])
    assert float(mean_over_tasks(auc)) == 1.0
    assert np.isnan(float(mean_over_tasks(np.array([np.nan], np.float32))))


def test_hand_computed_case():
    # Positives 0.8 and 0.4; negatives 0.4 and 0.1. Pairs: (0.8 > 0.4), (0.8 > 0.1),
    # (0.4 = 0.4: a half), (0.4 > 0.1): AUC = 3.5 / 4.
    scores = np.array([0.8, 0.4, 0.4, 0.1], np.float32)
    labels = np.array([1, 1, 0, 0], np.float32)
    assert float(roc_auc(scores, labels)) == pytest.approx(0.875)
    # Thresholds 0.8: P=1, R=1/2; 0.4: P=2/3, R=1. AP = 1/2 * 1 + 1/2 * 2/3.
    assert float(average_precision(scores, labels)) == pytest.approx(0.5 + 1 / 3)


def test_a_valid_minus_infinity_never_ties_with_masked_entries():
    # Log-probabilities may be -inf. Masked entries sort as -inf too, and used to join
    # its tie group: its mid-rank and the AP threshold counted them (AUC 0.5, AP 0.70).
    # By hand, over the valid [-inf (+), -inf (-), 0 (-), 1 (+)]: the positive -inf ties
    # one negative (a half) and the positive 1 beats both: AUC = (0.5 + 2) / 4; AP:
    # threshold 1 gives P = 1 at R = 1/2, threshold -inf P = 2/4 at R = 1.
    scores = np.array([-np.inf, -np.inf, 0.0, 1.0, 5.0, -np.inf], np.float32)
    labels = np.array([1, 0, 0, 1, 0, 1], np.float32)
    mask = np.array([1, 1, 1, 1, 0, 0], bool)
    assert float(roc_auc(scores, labels, mask)) == pytest.approx(0.625)
    assert float(average_precision(scores, labels, mask)) == pytest.approx(0.75)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"same shape, got \(3,\) and \(2,\)"):
        roc_auc(np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="k must be an int >= 1, got 0"):
        hits_at_k(np.zeros(3), np.zeros(3), 0)
    with pytest.raises(ValueError, match=r"\[P, K\] with P=3"):
        mrr(np.zeros(3), np.zeros(3))


def _ogb_evaluator(module: str, name: str):
    pytest.importorskip("torch")
    ogb = pytest.importorskip(f"ogb.{module}")
    return ogb.Evaluator(name)


def test_rocauc_and_ap_equal_ogb_evaluator():
    for name, fn, key, tasks in [
        ("ogbg-molhiv", roc_auc, "rocauc", 1),
        ("ogbg-molpcba", average_precision, "ap", 128),
    ]:
        evaluator = _ogb_evaluator("graphproppred", name)
        scores, labels, mask = _scores(3, n=80, tasks=tasks)
        y_true = np.where(mask, labels, np.nan)
        want = evaluator.eval({"y_true": y_true, "y_pred": scores})[key]
        got = mean_over_tasks(fn(scores, labels, mask))
        assert float(got) == pytest.approx(want, rel=1e-5)
        # The NaN labels themselves, no mask: missing, as ogb skips them.
        got = mean_over_tasks(fn(scores, y_true))
        assert float(got) == pytest.approx(want, rel=1e-5)


def test_hits_and_mrr_equal_ogb_evaluator():
    rng = np.random.default_rng(4)
    pos = np.round(rng.normal(size=40), 1).astype(np.float32)  # ties with negatives
    neg = np.round(rng.normal(size=300), 1).astype(np.float32)
    evaluator = _ogb_evaluator("linkproppred", "ogbl-collab")  # hits@50
    want = evaluator.eval({"y_pred_pos": pos, "y_pred_neg": neg})["hits@50"]
    assert float(jax.jit(hits_at_k, static_argnums=2)(pos, neg, 50)) == pytest.approx(want)
    assert float(hits_at_k(pos, neg[:10], 50)) == 1.0  # fewer negatives than K, as ogb
    # Padding: masked negatives and positives change nothing.
    padded = hits_at_k(
        np.concatenate([pos, [9.0]]),
        np.concatenate([neg, [99.0]]),
        50,
        positive_mask=np.arange(41) < 40,
        negative_mask=np.arange(301) < 300,
    )
    assert float(padded) == pytest.approx(want)
    negs = np.round(rng.normal(size=(40, 20)), 1).astype(np.float32)
    evaluator = _ogb_evaluator("linkproppred", "ogbl-citation2")
    torch = pytest.importorskip("torch")  # ogb 1.3.6's NumPy branch of mrr fails (sum(dim=))
    ranked = evaluator.eval(
        {"y_pred_pos": torch.from_numpy(pos), "y_pred_neg": torch.from_numpy(negs)}
    )
    want = float(ranked["mrr_list"].mean())
    assert float(jax.jit(mrr)(pos, negs)) == pytest.approx(want, rel=1e-6)


# -- bad input: refused on the host, NaN (never a perfect score) under jit ----------

_POS = np.array([0.9, 0.5], np.float32)
_SHARED = np.array([0.1, 0.6, 0.3], np.float32)  # Hits@1: 0.9 beats 0.6, 0.5 does not
_ROWS = np.array([[0.1, 0.6, 0.3], [0.2, 0.2, 0.9]], np.float32)  # MRR ranks 1 and 2


def test_mrr_refuses_a_column_of_positives_and_masks_that_are_not_bool_of_length_p():
    # Before: [P, 1] positives broadcast against [P, K] negatives (MRR 2.33 for 0.75), a
    # mask of one entry broadcast over every row, and an int mask was cast to bool.
    assert float(mrr(_POS, _ROWS)) == pytest.approx(0.75)
    with pytest.raises(ValueError, match=r"^positive_scores must be \[P\], got shape \(2, 1\)"):
        mrr(_POS[:, None], _ROWS)
    with pytest.raises(ValueError, match=r"^mask must have shape \(2,\) .*, got \(1,\)"):
        mrr(_POS, _ROWS, mask=np.array([False]))
    with pytest.raises(TypeError, match=r"^mask must be a bool array, got int"):
        mrr(_POS, _ROWS, mask=np.array([0, 2]))
    with pytest.raises(ValueError, match=r"^positive_scores must hold at least one score"):
        mrr(np.zeros(0), np.zeros((0, 3)))
    assert float(mrr(_POS, _ROWS, mask=np.array([False, True]))) == 0.5
    # No row left: the mean of no ranks, NaN (ogb's mrr_list.mean()), not 0.
    assert np.isnan(float(mrr(_POS, _ROWS, mask=np.zeros(2, bool))))


def test_mrr_of_nan_scores_is_refused_or_nan_never_perfect():
    # Before: NaN compares false, so a NaN positive, or a row of NaN negatives, ranked
    # first: MRR 1.0 for all-NaN positives and for all-NaN negatives.
    nan_pos = np.array([0.9, np.nan], np.float32)
    nan_neg = _ROWS.copy()
    nan_neg[0, 2] = np.nan
    with pytest.raises(ValueError, match=r"^positive_scores\[1\] is NaN"):
        mrr(nan_pos, _ROWS)
    with pytest.raises(ValueError, match=r"^negative_scores\[0, 2\] is NaN"):
        mrr(_POS, nan_neg)
    # Inside a compiled program the values cannot be checked: the MRR is NaN.
    assert np.isnan(float(jax.jit(mrr)(np.full(2, np.nan, np.float32), _ROWS)))
    assert np.isnan(float(jax.jit(mrr)(_POS, np.full((2, 3), np.nan, np.float32))))
    assert np.isnan(float(jax.jit(mrr)(_POS, nan_neg)))
    # A masked row's NaN is padding: ignored.
    only_first = np.array([True, False])
    assert float(mrr(nan_pos, _ROWS, mask=only_first)) == 1.0
    assert float(jax.jit(mrr)(nan_pos, _ROWS, only_first)) == 1.0


def test_roc_auc_and_ap_refuse_nan_scores_as_sklearn_does_and_are_nan_under_jit():
    # Before: NaN sorted above every score, so a NaN positive gave AUC 1.0 and all-NaN
    # scores AUC 0.556, AP 0.589; scikit-learn raises on them.
    labels = np.array([0, 1, 0, 1, 1, 0], np.float32)
    scores = np.array([0.1, 0.9, 0.3, np.nan, 0.8, 0.4], np.float32)
    with pytest.raises(ValueError, match="NaN"):
        sklearn_metrics.roc_auc_score(labels, scores)
    with pytest.raises(ValueError, match="NaN"):
        sklearn_metrics.average_precision_score(labels, scores)
    for fn in (roc_auc, average_precision):
        with pytest.raises(ValueError, match=r"^scores\[3\] is NaN"):
            fn(scores, labels)
        assert np.isnan(float(jax.jit(fn)(scores, labels)))
        assert np.isnan(float(jax.jit(fn)(np.full(6, np.nan, np.float32), labels)))
    # A masked NaN is a missing entry: ignored, as scikit-learn on the rest.
    kept = ~np.isnan(scores)
    for fn, ref in (
        (roc_auc, sklearn_metrics.roc_auc_score),
        (average_precision, sklearn_metrics.average_precision_score),
    ):
        want = ref(labels[kept], scores[kept])
        assert float(fn(scores, labels, kept)) == pytest.approx(want, rel=1e-6)
        assert float(jax.jit(fn)(scores, labels, kept)) == pytest.approx(want, rel=1e-6)
    # Per task: the task holding the NaN is NaN, the others are unchanged.
    two = np.stack([scores, np.nan_to_num(scores)], axis=1)
    both = np.stack([labels, labels], axis=1)
    with pytest.raises(ValueError, match=r"^scores\[3, 0\] is NaN"):
        roc_auc(two, both)
    auc = np.asarray(jax.jit(roc_auc)(two, both))
    want = sklearn_metrics.roc_auc_score(labels, np.nan_to_num(scores))
    assert np.isnan(auc[0]) and auc[1] == pytest.approx(want, rel=1e-6)


def test_ranking_auc_ap_refuses_an_empty_side_and_nan_scores():
    # Before: no negatives gave AP 1.0 (AUC NaN); a NaN negative gave AUC 0.5, a NaN
    # positive counted as the highest score.
    with pytest.raises(ValueError, match=r"^negative_scores must hold at least one score"):
        ranking_auc_ap(_POS, np.zeros(0, np.float32))
    with pytest.raises(ValueError, match=r"^positive_scores must hold at least one score"):
        ranking_auc_ap(np.zeros(0, np.float32), _SHARED)
    with pytest.raises(ValueError, match=r"^negative_scores\[1, 0\] is NaN"):
        ranking_auc_ap(_POS, np.array([[0.1], [np.nan]], np.float32))
    with pytest.raises(ValueError, match=r"^positive_scores\[0\] is NaN"):
        ranking_auc_ap(np.array([np.nan, 0.5], np.float32), _SHARED)
    for pos, neg in (
        (np.array([np.nan, 0.5], np.float32), _SHARED),
        (_POS, np.array([0.1, np.nan, 0.3], np.float32)),
    ):
        auc, ap = jax.jit(ranking_auc_ap)(pos, neg)
        assert np.isnan(float(auc)) and np.isnan(float(ap))


def test_hits_at_k_refuses_masks_that_are_not_bool_or_not_one_per_score():
    # Before: the int mask [2, 2] met `&` bitwise (2 & True == 0): Hits@1 0.0 for 0.5;
    # a mask of one entry broadcast (1.0); a float mask or the wrong length raised raw
    # JAX errors.
    assert float(hits_at_k(_POS, _SHARED, 1, positive_mask=np.array([True, True]))) == 0.5
    with pytest.raises(TypeError, match=r"^positive_mask must be a bool array, got int"):
        hits_at_k(_POS, _SHARED, 1, positive_mask=np.array([2, 2]))
    with pytest.raises(TypeError, match=r"^negative_mask must be a bool array, got float32"):
        hits_at_k(_POS, _SHARED, 1, negative_mask=np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"^positive_mask must have shape \(2,\) .*, got \(1,\)"):
        hits_at_k(_POS, _SHARED, 1, positive_mask=np.array([True]))
    with pytest.raises(ValueError, match=r"^negative_mask must have shape \(3,\) .*, got \(2,\)"):
        hits_at_k(_POS, _SHARED, 1, negative_mask=np.array([True, False]))


def test_hits_at_k_refuses_row_negatives_and_no_positives_is_nan():
    # Before: [P, K] negatives were accepted (ogb's hits@K takes a shared [Q]), no
    # positives gave 0.0, and k=np.int64(1) was refused.
    with pytest.raises(ValueError, match=r"^negative_scores must be \[Q\].*got shape \(2, 3\)"):
        hits_at_k(_POS, _ROWS, 1)
    with pytest.raises(ValueError, match=r"^positive_scores must be \[P\], got shape \(2, 1\)"):
        hits_at_k(_POS[:, None], _SHARED, 1)
    with pytest.raises(ValueError, match=r"^positive_scores must hold at least one score"):
        hits_at_k(np.zeros(0, np.float32), _SHARED, 1)
    none = np.zeros(2, bool)
    assert np.isnan(float(hits_at_k(_POS, _SHARED, 1, positive_mask=none)))
    jitted = jax.jit(hits_at_k, static_argnums=2)
    assert np.isnan(float(jitted(_POS, _SHARED, 1, positive_mask=none)))
    assert np.isnan(float(jitted(_POS, _SHARED[:0], 1, positive_mask=none)))
    assert float(hits_at_k(_POS, _SHARED, np.int64(1))) == 0.5


def test_hits_at_k_of_nan_scores_is_refused_or_nan():
    # Before: a NaN positive counted as a miss and a NaN negative as the K-th best
    # negative (Hits 0.0), silently.
    nan_pos = np.array([np.nan, 0.2], np.float32)
    nan_neg = np.array([0.1, np.nan, 0.3], np.float32)
    with pytest.raises(ValueError, match=r"^positive_scores\[0\] is NaN"):
        hits_at_k(nan_pos, _SHARED, 1)
    with pytest.raises(ValueError, match=r"^negative_scores\[1\] is NaN"):
        hits_at_k(_POS, nan_neg, 1)
    jitted = jax.jit(hits_at_k, static_argnums=2)
    assert np.isnan(float(jitted(nan_pos, _SHARED, 1)))
    assert np.isnan(float(jitted(_POS, nan_neg, 1)))
    assert np.isnan(float(jitted(nan_pos, _SHARED, 5)))  # not 1.0: fewer negatives than K
    # Masked NaNs are padding: ignored (0.2 does not beat the best real negative, 0.3).
    pmask, nmask = ~np.isnan(nan_pos), ~np.isnan(nan_neg)
    assert float(jitted(nan_pos, nan_neg, 1, positive_mask=pmask, negative_mask=nmask)) == 0.0
    assert float(hits_at_k(_POS, nan_neg, 1, negative_mask=nmask)) == 1.0


# -- complex scores: refused, under jit too (the dtype is static); infinities: ranked ---


def _complex(x):
    return (np.asarray(x) + 1j).astype(np.complex64)


_LABELS = np.array([0, 1, 0, 1], np.float32)
_FOUR = np.array([0.1, 0.9, 0.3, 0.8], np.float32)
_COMPLEX_INPUTS = {
    "roc_auc": (roc_auc, (_complex(_FOUR), _LABELS), "scores"),
    "roc_auc-labels": (roc_auc, (_FOUR, _complex(_LABELS)), "labels"),
    "average_precision": (average_precision, (_complex(_FOUR), _LABELS), "scores"),
    "ranking_auc_ap-pos": (ranking_auc_ap, (_complex(_POS), _SHARED), "positive_scores"),
    "ranking_auc_ap-neg": (ranking_auc_ap, (_POS, _complex(_SHARED)), "negative_scores"),
    "hits_at_k-pos": (
        lambda p, n: hits_at_k(p, n, 1),
        (_complex(_POS), _SHARED),
        "positive_scores",
    ),
    "hits_at_k-neg": (
        lambda p, n: hits_at_k(p, n, 1),
        (_POS, _complex(_SHARED)),
        "negative_scores",
    ),
    "mrr-pos": (mrr, (_complex(_POS), _ROWS), "positive_scores"),
    "mrr-neg": (mrr, (_POS, _complex(_ROWS)), "negative_scores"),
    "mean_over_tasks-values": (mean_over_tasks, (_complex([0.5, 0.7]),), "values"),
    "mean_over_tasks-scores": (mean_over_tasks, (np.ones(2, np.float32), _complex(_POS)), "scores"),
}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case", list(_COMPLEX_INPUTS))
def test_complex_scores_are_refused_naming_the_dtype(case, jit):
    # Before: the float32 cast dropped the imaginary parts with only a ComplexWarning
    # (roc_auc read 1.0), mean_over_tasks returned a complex mean, and complex labels
    # compared by their real parts. scikit-learn refuses complex data too.
    fn, args, name = _COMPLEX_INPUTS[case]
    run = jax.jit(fn) if jit else fn
    with pytest.raises(TypeError, match=rf"^{name} must be real numbers .*got dtype complex64\b"):
        run(*args)


def _finite_stand_in(scores):
    """``scores`` with ``-inf`` and ``inf`` replaced by finite values below and above
    the others: the same order and the same ties."""
    finite = scores[np.isfinite(scores)]
    low, high = finite.min() - 1.0, finite.max() + 1.0
    return np.where(scores == np.inf, high, np.where(scores == -np.inf, low, scores))


def test_infinite_scores_are_ranked_as_sklearn_ranks_finite_stand_ins():
    # Ranking-only metrics: +-inf have a place in the order (each tied with itself), so
    # they are kept where NaN, which has none, is refused. scikit-learn refuses them by
    # its blanket finiteness check only; its value on stand-ins of the same order is
    # the metric's. A masked inf counts for nothing.
    labels = np.array([1, 0, 1, 0, 1, 0, 0, 1, 1], np.float32)
    scores = np.array([np.inf, np.inf, 0.5, 0.5, -np.inf, -np.inf, 2.0, -1.0, np.inf])
    scores = scores.astype(np.float32)
    mask = np.arange(9) < 8
    with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="infinity"):
        sklearn_metrics.roc_auc_score(labels, scores)
    kept, stand_in = labels[mask], _finite_stand_in(scores[mask])
    want_auc = sklearn_metrics.roc_auc_score(kept, stand_in)
    want_ap = sklearn_metrics.average_precision_score(kept, stand_in)
    assert float(jax.jit(roc_auc)(scores, labels, mask)) == pytest.approx(want_auc, rel=1e-6)
    assert float(jax.jit(average_precision)(scores, labels, mask)) == pytest.approx(want_ap)
    auc, ap = jax.jit(ranking_auc_ap)(scores[mask][kept == 1], scores[mask][kept == 0])
    assert (float(auc), float(ap)) == pytest.approx((want_auc, want_ap), rel=1e-6)


def test_infinite_scores_are_ranked_by_hand():
    # Positives inf, 1, -inf; negatives inf, 0.5, -inf. AUC: inf ties one negative and
    # beats two (2.5), 1 beats two (2), -inf ties one (0.5): 5/9. AP, over the thresholds
    # inf, 1, -inf: (1/2 + 2/3 + 3/6) / 3 = 5/9. ogb's hits@K compares infinities as
    # they are: Hits@1's threshold is inf, which no positive beats (a tie is a miss);
    # Hits@3's -inf is beaten by inf and 1, not by -inf; 4 > 3 negatives: 1. ogb's mrr,
    # row negatives inf, 0, -inf: positive inf ties one, rank 1 + 1/2; positive -inf is
    # below two and ties one, rank 1 + 2 + 1/2: (2/3 + 2/7) / 2 = 10/21.
    pos = np.array([np.inf, 1.0, -np.inf], np.float32)
    neg = np.array([np.inf, 0.5, -np.inf], np.float32)
    rows = np.tile(np.array([np.inf, 0.0, -np.inf], np.float32), (2, 1))

    # An infinite error is the task mean's truth (ogb's rmse is inf too); an infinite
    # score leaves a task defined, where a NaN one makes the mean NaN.
    errors, one = np.array([np.inf, 0.5], np.float32), np.array([0.75], np.float32)

    @jax.jit
    def ranked(pos, neg, rows):
        hits = [hits_at_k(pos, neg, k) for k in (1, 3, 4)]
        means = mean_over_tasks(errors), mean_over_tasks(one, pos[:1])
        return (*ranking_auc_ap(pos, neg), *hits, mrr(pos[jnp.array([0, 2])], rows), *means)

    got = [float(v) for v in ranked(pos, neg, rows)]
    assert got == pytest.approx([5 / 9, 5 / 9, 0.0, 2 / 3, 1.0, 10 / 21, np.inf, 0.75])
    # The host check passes them too, as it does a valid -inf in roc_auc (above).
    assert float(mrr(pos[[0, 2]], rows)) == pytest.approx(10 / 21)


def _saved_ring(folder, labels, cuts):
    """An on-disk dataset of a ring of ``len(labels)`` nodes (both directions), one-hot
    features, and train / valid / test the node ranges ending at ``cuts``."""
    from sparsegcn.datasets import Dataset, save
    from sparsegcn.graph import Graph

    n = len(labels)
    ring, starts = np.arange(n), (0, *cuts[:-1])
    parts = zip(("train", "valid", "test"), starts, cuts, strict=True)
    split = {k: np.arange(a, b) for k, a, b in parts}
    graph = Graph(np.r_[ring, (ring + 1) % n], np.r_[(ring + 1) % n, ring], None, n)
    return save(
        Dataset(
            name=folder.name,
            graph=graph,
            features=np.eye(n, dtype=np.float32),
            labels=labels,
            split=split,
            num_classes=2,
        ),
        folder,
    )


def test_an_evaluation_split_without_both_labels_of_any_task_is_refused(tmp_path, capsys):
    # Before: a validation split of one class scored NaN every epoch, so no epoch was
    # better than the start: "val rocauc -1.0000", "test rocauc 0.0000", exit 0; an
    # all-negative test split failed after training, inside ogb's Evaluator.
    from sparsegcn.cli import main
    from sparsegcn.metrics import check_tasks_defined

    labels = np.array([[1, 0], [0, np.nan], [1, np.nan], [0, 1], [-1, 1]])
    check_tasks_defined(labels, [0, 1], "two rows")  # task 0 has both
    check_tasks_defined(labels, np.array([1, 0, 0, 1, 0], bool), "a mask")  # rows 0 and 3
    for rows, counts in (([1, 3], "(3 labels, 1 positive)"), ([2, 4], "(2 labels, 2 positive)")):
        with pytest.raises(ValueError, match=rf"^x \(2\): no task .* {re.escape(counts)}"):
            check_tasks_defined(labels, rows, "x")
    y = np.tile([[1, 0], [0, 1]], (6, 1))
    y[8:10] = 0  # the validation nodes: no task has a positive
    folder = _saved_ring(tmp_path / "ml", y, (8, 10, 12))
    assert main(["train", "--dataset", str(folder), "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "ml's valid nodes (2): no task has both a positive and a negative label among them "
        "(4 labels, 0 positive), so their ROC-AUC is undefined; split the data so each "
        "evaluation split holds both classes of some task"
    )


def test_a_node_dataset_of_one_class_is_refused(tmp_path, capsys):
    # Before: it trained, and reported test accuracy 1.0.
    from sparsegcn.cli import main

    # Nodes 6 and 7, in no split, have the other class.
    folder = _saved_ring(tmp_path / "one", np.r_[np.zeros(6, np.int64), 1, 1], (2, 4, 6))
    assert main(["train", "--dataset", str(folder), "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "one: all its 6 train, validation and test nodes have one label; node "
        "classification needs two classes at least"
    )


def test_a_task_made_undefined_by_nan_scores_does_not_drop_out_of_the_mean():
    # Before: under jit the NaN task's ROC-AUC was NaN, mean_over_tasks skipped it as it
    # skips a task without both labels, and the mean of the other task read 1.0.
    from sparsegcn.train.losses import masked_roc_auc

    logits = jnp.array([[0.1, jnp.nan], [0.9, 0.2], [0.3, 0.8], [0.7, 0.1]])
    labels = jnp.array([[0, 1], [1, 0], [0, 1], [1, 0]])
    mask = jnp.ones(4, bool)
    assert np.isnan(jax.jit(masked_roc_auc)(logits, labels, mask))
    finite = jnp.nan_to_num(logits)
    assert float(jax.jit(masked_roc_auc)(finite, labels, mask)) == pytest.approx(0.75)
    # A NaN score of a masked node changes nothing.
    assert float(jax.jit(masked_roc_auc)(logits, labels, mask.at[0].set(False))) == 1.0


# -- scores compared in their own precision; NaN labels missing -----------------------


def _ogb_hits(pos, neg, k):
    """ogb's hits@K (its NumPy branch), in the inputs' precision."""
    if len(neg) < k:
        return 1.0
    return float(np.sum(pos > np.sort(neg)[-k])) / len(pos)


def _ogb_mrr(pos, neg):
    """ogb's MRR (``ogbl-citation2``'s ranks), in the inputs' precision."""
    optimistic = np.sum(neg > pos[:, None], axis=1)
    pessimistic = np.sum(neg >= pos[:, None], axis=1)
    return float(np.mean(1.0 / (0.5 * (optimistic + pessimistic) + 1.0)))


def _float32(x):
    """The float32 cast the metrics made before (1e300 overflowing to inf)."""
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(np.float32)


def test_float64_and_int_scores_that_float32_ties_are_compared_in_their_precision():
    # Before: every score was cast to float32, so 1 + 1e-9 tied 1 and 2**24 + 1 tied
    # 2**24: ROC-AUC 0.5 (scikit-learn 1.0), Hits@1 0.0 and MRR 2/3 (ogb 1.0).
    near, one = np.array([1.0, 1 + 1e-9]), np.array([0.0, 1.0])
    big = np.array([2**24, 2**24 + 1])
    for fn, ref in (
        (roc_auc, sklearn_metrics.roc_auc_score),
        (average_precision, sklearn_metrics.average_precision_score),
    ):
        for scores in (near, big, big.astype(np.int32)):
            assert float(fn(scores, one)) == ref(one, scores) == 1.0
    assert float(hits_at_k(np.array([1 + 1e-9]), np.array([1.0]), 1)) == 1.0
    assert float(mrr(np.array([1 + 1e-9]), np.array([[1.0, 0.5]]))) == 1.0
    assert [float(v) for v in ranking_auc_ap(np.array([1 + 1e-9]), np.array([1.0]))] == [1, 1]

    rankdata = pytest.importorskip("scipy.stats").rankdata
    # Random float64 scores on clusters a float32 cannot tell apart (steps of 1e-10
    # around 1), real ties among them, beyond float32's range, and infinities.
    rng = np.random.default_rng(7)
    n, tasks = 80, 4
    labels = (rng.random((n, tasks)) < 0.4).astype(np.float64)
    steps = rng.integers(0, 6, (n, tasks)) + labels * rng.integers(0, 3, (n, tasks))
    scores = 1.0 + steps * 1e-10
    scores[:3, 0] = [1e300, 2e300, np.inf]  # one float32 inf, but three distinct values
    scores[3, 1] = -np.inf
    mask = rng.random((n, tasks)) < 0.85
    assert np.unique(_float32(scores)).size < np.unique(scores).size / 3
    # scikit-learn refuses infinities: its value on the scores' ranks (same order and
    # ties; 1e300 + 1 would tie 1e300 as a finite stand-in for inf) is the metric's.
    stand_in = rankdata(scores, method="dense").reshape(scores.shape)
    auc, ap = roc_auc(scores, labels, mask), average_precision(scores, labels, mask)
    for t in range(tasks):
        m = mask[:, t]
        want_auc = sklearn_metrics.roc_auc_score(labels[m, t], stand_in[m, t])
        want_ap = sklearn_metrics.average_precision_score(labels[m, t], stand_in[m, t])
        assert float(auc[t]) == pytest.approx(want_auc, rel=1e-6)
        assert float(ap[t]) == pytest.approx(want_ap, rel=1e-6)
        # float32's ties would change every task's value: the test can tell.
        tied = _finite_stand_in(_float32(scores[m, t]))
        assert abs(sklearn_metrics.roc_auc_score(labels[m, t], tied) - want_auc) > 0.01

    pos = scores[labels[:, 1] == 1, 1]
    neg = scores[labels[:, 1] == 0, 1]
    kept = np.r_[np.ones(pos.size), np.zeros(neg.size)]
    both = rankdata(np.r_[pos, neg], method="dense")
    want = (
        sklearn_metrics.roc_auc_score(kept, both),
        sklearn_metrics.average_precision_score(kept, both),
    )
    assert [float(v) for v in ranking_auc_ap(pos, neg)] == pytest.approx(want, rel=1e-6)
    for k in (1, 3, 10):
        assert float(hits_at_k(pos, neg, k)) == pytest.approx(_ogb_hits(pos, neg, k))
    assert float(hits_at_k(pos, neg, 3)) != float(hits_at_k(_float32(pos), _float32(neg), 3))
    rows = 1.0 + rng.integers(0, 4, (pos.size, 12)) * 1e-10
    assert float(mrr(pos, rows)) == pytest.approx(_ogb_mrr(pos, rows), rel=1e-6)
    # ogb's own Evaluator, where importable, agrees on float64 input.
    evaluator = _ogb_evaluator("linkproppred", "ogbl-collab")  # hits@50
    tiny = 1.0 + rng.integers(0, 8, 300) * 1e-10
    want = evaluator.eval({"y_pred_pos": pos, "y_pred_neg": tiny})["hits@50"]
    assert float(hits_at_k(pos, tiny, 50)) == pytest.approx(want) == _ogb_hits(pos, tiny, 50)
    assert want not in (0.0, 1.0)
    # A masked NaN is still padding; an unmasked one still refused.
    padded = np.r_[pos, np.nan]
    keep = np.r_[np.ones(pos.size, bool), False]
    assert float(hits_at_k(padded, neg, 3, positive_mask=keep)) == pytest.approx(
        _ogb_hits(pos, neg, 3)
    )
    with pytest.raises(ValueError, match=r"^positive_scores\[\d+\] is NaN"):
        hits_at_k(padded, neg, 3)


def test_too_many_distinct_wide_scores_for_float32_ranks_are_refused(monkeypatch):
    import sparsegcn.metrics as metrics_module

    monkeypatch.setattr(metrics_module, "_RANKABLE", 3)
    scores = 1.0 + np.arange(4) * 1e-10  # 4 distinct values, one float32
    with pytest.raises(ValueError, match=r"^scores \(float64\) hold 4 distinct values, .*float32"):
        roc_auc(scores, np.array([0, 1, 0, 1]))
    # Distinct as float32 too: cast as they are, nothing ranked or refused.
    assert float(roc_auc(np.arange(4.0), np.array([0, 0, 1, 1]))) == 1.0


def test_nan_labels_are_missing_as_ogb_skips_them_not_negatives():
    # Before: a NaN label without a mask counted as a negative: AUC 0.5 for ogb's 0.75.
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.9])
    labels = np.array([0, 0, 1, 1, np.nan])
    kept = ~np.isnan(labels)
    for fn, ref in (
        (roc_auc, sklearn_metrics.roc_auc_score),
        (average_precision, sklearn_metrics.average_precision_score),
    ):
        want = ref(labels[kept], scores[kept])
        assert float(fn(scores, labels)) == pytest.approx(want, rel=1e-6)
        assert float(jax.jit(fn)(scores, labels)) == pytest.approx(want, rel=1e-6)
        assert float(fn(scores, labels, np.ones(5, bool))) == pytest.approx(want, rel=1e-6)
    assert float(roc_auc(scores, labels)) == pytest.approx(0.75)
    # A missing label's NaN score is the missing entry's: not refused.
    assert float(roc_auc(np.r_[scores[:4], np.nan], labels)) == pytest.approx(0.75)
    # Integer and bool labels have no NaN: > 0.5 is > 0 (under jit, and under strict
    # dtype promotion, which refused int labels > 0.5 before).
    want = float(roc_auc(_FOUR, _LABELS))
    for ints in (_LABELS.astype(np.int32), _LABELS.astype(bool)):
        assert float(roc_auc(_FOUR, ints)) == want
        assert float(jax.jit(roc_auc)(jnp.asarray(_FOUR), jnp.asarray(ints))) == want

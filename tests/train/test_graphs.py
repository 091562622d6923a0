"""Graph classification training: stratified folds, members trained as one vmapped
program equal to each fold trained alone, one compile for the whole run, balanced
or random packings of every training graph once, each fold scoring its own
held-out graphs, and the fill of the padded steps."""

from __future__ import annotations

import numpy as np
import pytest
from graph_sets import random_graphs

from sparsegcn.batch import Budget
from sparsegcn.nn.graph_gin import graph_gin
from sparsegcn.train.graphs import (
    Curves,
    GraphTrainConfig,
    Splits,
    fit_graphs,
    fold_eval_batches,
    fold_splits,
    member_batches,
    packings_for,
    select_best,
    stratified_folds,
    train_fill,
)

DATA = random_graphs(count=24, seed=1)
BUDGET = Budget(nodes=33, edges=96, graphs=7)


def test_stratified_folds_balance_every_class():
    labels = np.array([0] * 10 + [1] * 7 + [2] * 3)
    fold = stratified_folds(labels, 3, seed=0)
    for c, n in ((0, 10), (1, 7), (2, 3)):
        counts = np.bincount(fold[labels == c], minlength=3)
        assert counts.sum() == n and counts.max() - counts.min() <= 1
    with pytest.raises(ValueError, match=r"folds must be in \[2, 20\]"):
        stratified_folds(labels, 21, seed=0)


def test_fold_splits_partition_the_graphs_and_tests_each_once():
    splits = fold_splits(DATA.labels, 4, seed=0)
    total = splits.train.astype(int) + splits.valid + splits.test
    np.testing.assert_array_equal(total, np.ones((4, DATA.num_graphs), int))
    np.testing.assert_array_equal(splits.test.sum(axis=0), np.ones(DATA.num_graphs, int))
    assert (splits.valid.sum(axis=1) >= 1).all()
    np.testing.assert_array_equal(splits.fold, np.arange(4))


def test_select_best_prefers_accuracy_then_loss_then_earlier():
    acc = np.array([[0.5], [0.8], [0.8], [0.8]])
    loss = np.array([[1.0], [0.4], [0.3], [0.3]])
    curves = Curves(loss, loss, acc, acc)
    assert select_best(curves).tolist() == [2]


@pytest.mark.parametrize("packing", ["balanced", "random"])
def test_member_batches_pack_every_training_graph_once_per_packing(packing):
    splits = fold_splits(DATA.labels, 3, seed=0)
    batches, counts = member_batches(DATA, splits, (0, 5), BUDGET, 6, packings=3, packing=packing)
    mask, ids = np.asarray(batches.graph_mask), np.asarray(batches.graph_ids)
    assert mask.shape[:2] == (6, 3) and mask.shape[3] == 1  # [M, P, S, D, G_b]
    for m in range(6):
        expected = np.flatnonzero(splits.train[m // 2])
        assert counts[m] == expected.shape[0]
        firsts = []
        for p in range(3):
            np.testing.assert_array_equal(np.sort(ids[m, p][mask[m, p]]), expected)
            firsts.append(tuple(ids[m, p, 0, 0]))
        assert len(set(firsts)) > 1  # the packings differ in composition
    assert packings_for(DATA, BUDGET, DATA.num_graphs, 6) == 8
    # The fill counts the real rows of every step against all the rows computed.
    node_fill, edge_fill = train_fill(DATA, splits, (0, 5), batches)
    m, p, steps, d, rows = np.shape(batches.x)[:5]
    real_nodes = (np.asarray(batches.node_graph) != BUDGET.graphs - 1).sum() / p
    real_edges = (np.asarray(batches.senders) != BUDGET.nodes - 1).sum() / p
    np.testing.assert_allclose(node_fill, real_nodes / (m * steps * d * rows), rtol=1e-12)
    np.testing.assert_allclose(edge_fill, real_edges / (m * steps * d * BUDGET.edges), rtol=1e-12)


@pytest.mark.parametrize("packing", ["balanced", "random"])
def test_each_fold_scores_only_its_own_held_out_graphs(packing):
    splits = fold_splits(DATA.labels, 3, seed=0)
    batches = fold_eval_batches(DATA, splits, BUDGET, 6, packing=packing)
    mask, ids = np.asarray(batches.graph_mask), np.asarray(batches.graph_ids)
    assert mask.shape[0] == 3
    for f in range(3):
        held_out = np.flatnonzero(splits.valid[f] | splits.test[f])
        np.testing.assert_array_equal(np.sort(ids[f][mask[f]]), held_out)


@pytest.fixture(scope="module")
def tiny_model():
    return graph_gin(3, 2, hidden=4, num_layers=2, dropout_rate=0.5)


@pytest.mark.slow
def test_the_whole_run_compiles_once(tiny_model):
    splits = fold_splits(DATA.labels, 3, seed=0)
    config = GraphTrainConfig(epochs=3, batch_size=6, epochs_per_call=1)
    result = fit_graphs(tiny_model, DATA, config, splits, seeds=(0, 1), budget=BUDGET)
    assert result.compiles == 1  # three calls, one trace
    assert result.packings == 8
    assert result.curves.test_metric.shape == (3, 6)
    # The program's own choice of best epoch is the host's rule on the curves.
    np.testing.assert_array_equal(result.best_epoch, select_best(result.curves))
    assert result.train_graphs.tolist() == [int(splits.train[f].sum()) for f in (0, 0, 1, 1, 2, 2)]
    assert np.isfinite(result.curves.train_loss).all() and result.train_graphs_per_s > 0


@pytest.mark.slow
def test_vmapped_folds_equal_each_fold_alone(tiny_model):
    splits = fold_splits(DATA.labels, 3, seed=0)
    config = GraphTrainConfig(epochs=2, batch_size=6)
    together = fit_graphs(tiny_model, DATA, config, splits, seeds=(0, 1), budget=BUDGET)
    for f in range(3):
        alone = fit_graphs(
            tiny_model,
            DATA,
            config,
            Splits(*(m[f : f + 1] for m in splits)),
            seeds=(1,),
            budget=BUDGET,
        )
        # Training, evaluation and the metrics are the same to float rounding. The
        # validation loss differed (0.7042 alone, 0.6647 together) while linear maps
        # feeding a batch norm had biases: their rounding-size gradients, scaled by
        # Adam, moved the running means evaluation reads.
        for name in ("train_loss", "val_loss", "val_metric", "test_metric"):
            np.testing.assert_allclose(
                getattr(alone.curves, name)[:, 0],
                getattr(together.curves, name)[:, 2 * f + 1],
                rtol=1e-5,
                atol=1e-5,
            )


def test_nan_labels_are_a_stratum_of_their_own_and_every_graph_gets_a_fold():
    # Before: np.empty fold ids, and `labels == nan` never matched, so NaN-labelled
    # graphs kept garbage fold ids, were tested in no fold and varied between runs.
    labels = np.array([0.0, 1.0, np.nan, 1.0, 0.0, np.nan, 0.0, 1.0, np.nan, np.nan, 1.0])
    fold = stratified_folds(labels, 2, seed=3)
    assert set(fold.tolist()) <= {0, 1}
    np.testing.assert_array_equal(fold, stratified_folds(labels, 2, seed=3))
    for rows in (labels == 0, labels == 1, np.isnan(labels)):
        counts = np.bincount(fold[rows], minlength=2)
        assert counts.max() - counts.min() <= 1
    # The labelled graphs are dealt as before: NaN only adds a stratum after them.
    labelled = ~np.isnan(labels)
    np.testing.assert_array_equal(fold[labelled], stratified_folds(labels[labelled], 2, seed=3))
    splits = fold_splits(labels, 2, seed=3)
    np.testing.assert_array_equal(splits.test.sum(axis=0), np.ones(labels.shape[0], int))
    total = splits.train.astype(int) + splits.valid + splits.test
    np.testing.assert_array_equal(total, np.ones((2, labels.shape[0]), int))


@pytest.mark.parametrize(
    ("folds", "seed", "error", "message"),
    [
        (2.5, 0, TypeError, r"folds must be an integer >= 2, got 2\.5 \(float\)"),
        ("3", 0, TypeError, r"folds must be an integer >= 2, got '3' \(str\)"),
        (True, 0, TypeError, r"folds must be an integer >= 2, got True \(bool\)"),
        (1, 0, ValueError, r"folds must be >= 2, got 1"),
        (2, -1, ValueError, r"seed must be >= 0 and <= 4294967295, got -1"),
        (2, 1.5, TypeError, r"seed must be an integer >= 0 .*, got 1\.5 \(float\)"),
        (2, "a", TypeError, r"seed must be an integer >= 0 .*, got 'a' \(str\)"),
    ],
)
def test_fold_splits_names_a_bad_folds_or_seed(folds, seed, error, message):
    # Before: raw "'float' object cannot be interpreted as an integer" and NumPy's
    # "expected non-negative integer" / "SeedSequence expects int".
    with pytest.raises(error, match=message):
        fold_splits(DATA.labels, folds, seed)
    with pytest.raises(error, match=message):
        stratified_folds(DATA.labels, folds, seed)
    with pytest.raises(ValueError, match=r"labels must be \[G\] .* got shape \(\)"):
        fold_splits(np.array(3), 2, 0)


def test_the_graph_config_checks_its_rates_through_the_shared_table():
    with pytest.raises(TypeError, match=r"learning_rate must be a number > 0\.0, got True"):
        GraphTrainConfig(learning_rate=True)
    with pytest.raises(TypeError, match=r"weight_decay must be a number >= 0\.0, got '0'"):
        GraphTrainConfig(weight_decay="0")


G = DATA.num_graphs
SPLITS = fold_splits(DATA.labels, 3, seed=0)


@pytest.mark.parametrize(
    ("splits", "error", "message"),
    [
        (  # index arrays trained on graphs 0..n-1, the test graphs among them
            SPLITS._replace(train=np.stack([np.flatnonzero(r)[:10] for r in SPLITS.train])),
            TypeError,
            rf"splits.train must be a bool \[K, {G}\] mask .* got int64 of shape \(3, 10\); "
            "an index array is not a mask",
        ),
        (
            SPLITS._replace(valid=SPLITS.valid.astype(int)),
            TypeError,
            r"splits.valid must be a bool .* give splits.valid.astype\(bool\)",
        ),
        (  # before: test_metric 0.0
            SPLITS._replace(test=SPLITS.test & np.array([[True], [False], [True]])),
            ValueError,
            r"fold 1 has no graph to test on \(splits.test\[1\] is all False\)",
        ),
        (  # before: val_metric 0.0
            SPLITS._replace(valid=np.zeros_like(SPLITS.valid)),
            ValueError,
            r"fold 0 has no graph to validate on \(splits.valid\[0\] is all False\)",
        ),
        (  # before: raw IndexError
            fold_splits(DATA.labels[:20], 3, seed=0),
            ValueError,
            rf"splits.train must be \[K, {G}\] .* got shape \(3, 20\)",
        ),
        (
            SPLITS._replace(valid=SPLITS.valid[:2]),
            ValueError,
            r"splits.valid has 2 fold\(s\) \(shape \(2, 24\)\) but splits.train has 3",
        ),
        (
            SPLITS._replace(fold=np.array([0])),
            ValueError,
            r"splits.fold must be \[3\] integer fold numbers .* shape \(1,\)",
        ),
        (tuple(SPLITS[:3]), TypeError, r"splits must be a Splits .* tuple, which lacks train"),
    ],
)
def test_fit_graphs_refuses_splits_that_are_not_bool_masks_of_its_graphs(
    tiny_model, splits, error, message
):
    config = GraphTrainConfig(epochs=1, batch_size=6)
    with pytest.raises(error, match=message):
        fit_graphs(tiny_model, DATA, config, splits, budget=BUDGET)


@pytest.mark.parametrize(
    ("in_features", "num_classes", "message"),
    [
        (3, 5, r"tu:RANDOM has 2 classes .* built with num_classes=5 outputs; .*num_classes=2"),
        (3, 1, r"tu:RANDOM has 2 classes .* built with num_classes=1 outputs"),
        (6, 2, r"node features have 3 columns .* built with in_features=6; .*in_features=3"),
    ],
)
def test_fit_graphs_compares_the_model_widths_with_the_dataset(in_features, num_classes, message):
    # Before: 5 outputs trained silently, 1 output diverged after compiling, and 6
    # inputs failed with a raw dot_general error.
    model = graph_gin(in_features, num_classes, hidden=4, num_layers=2)
    config = GraphTrainConfig(epochs=1, batch_size=6)
    with pytest.raises(ValueError, match=message):
        fit_graphs(model, DATA, config, SPLITS, budget=BUDGET)

"""Graph-level training beyond k-fold classes: binary multi-task labels with missing
entries (loss and metrics against NumPy and scikit-learn), official splits, data
parallelism over devices, checkpoints and resume, and predictions."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graph_sets import binary_graphs, random_graphs

from sparsegcn.batch import Budget, pack_graphs
from sparsegcn.experiment import Experiment
from sparsegcn.nn.graph_gin import build_graph_model, graph_gin
from sparsegcn.tasks import TASKS
from sparsegcn.tasks.graph import check_graph_experiment, graph_splits
from sparsegcn.train.checkpoint import CheckpointHook, list_checkpoints, load_checkpoint
from sparsegcn.train.graphs import (
    Curves,
    GraphCheckpointState,
    GraphTrainConfig,
    binary_loss,
    fit_graphs,
    fold_splits,
    graph_loss,
    member_batches,
    member_template,
    merge_shards,
    official_splits,
    pack_steps,
    predict_graphs,
    select_best,
)

sklearn_metrics = pytest.importorskip("sklearn.metrics")

BINARY = binary_graphs(count=30, tasks=3, seed=2)
BUDGET = Budget(nodes=41, edges=120, graphs=9)


def _bce(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """-y log σ(z) - (1 - y) log(1 - σ(z)), in float64."""
    z = logits.astype(np.float64)
    return np.maximum(z, 0) - z * labels + np.log1p(np.exp(-np.abs(z)))


def _reference_metric(name, scores, labels, rows) -> float:
    """ogb's rule: per task over labelled rows, the mean over tasks with both classes."""
    fn = {"rocauc": sklearn_metrics.roc_auc_score, "ap": sklearn_metrics.average_precision_score}
    values = []
    for t in range(labels.shape[1]):
        y = labels[rows, t]
        keep = ~np.isnan(y)
        if len(np.unique(y[keep])) == 2:
            values.append(fn[name](y[keep], scores[rows, t][keep]))
    return float(np.mean(values))


def test_binary_loss_masks_missing_labels_and_padding():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 3)).astype(np.float32)
    labels = np.array(
        [[1, 0, np.nan], [np.nan, np.nan, np.nan], [0, 1, 1], [1, np.nan, 0], [0, 0, 0], [1, 1, 1]],
        np.float32,
    )
    mask = np.array([True, True, True, True, False, True])
    total, count = binary_loss(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(mask))
    labelled = ~np.isnan(labels) & mask[:, None]
    want = _bce(logits, np.nan_to_num(labels))[labelled]
    np.testing.assert_allclose(float(total), want.sum(), rtol=1e-5)
    assert float(count) == labelled.sum() == 10  # 2 + 0 + 3 + 2 + (masked) + 3
    # The gradient reaches labelled entries only, and is finite despite the NaN.
    grad = np.asarray(
        jax.grad(lambda z: binary_loss(z, jnp.asarray(labels), jnp.asarray(mask))[0])(
            jnp.asarray(logits)
        )
    )
    sigmoid = 1 / (1 + np.exp(-logits.astype(np.float64)))
    np.testing.assert_allclose(
        grad, np.where(labelled, sigmoid - np.nan_to_num(labels), 0.0), atol=1e-6
    )


def test_padding_changes_no_binary_output_loss_or_gradient():
    model = graph_gin(3, 3, hidden=8, num_layers=3, dropout_rate=0.0)
    params, stats = model.init(jax.random.key(0))
    order = np.arange(8)
    tight = jax.tree.map(lambda a: a[0], pack_graphs(BINARY, order, Budget(41, 120, 9), 8))
    loose = jax.tree.map(lambda a: a[0], pack_graphs(BINARY, order, Budget(97, 256, 13), 8))
    assert np.isnan(np.asarray(loose.labels)[~np.asarray(loose.graph_mask)]).all()

    def loss(p, batch):
        logits, _ = model.apply(p, stats, batch, training=True)
        return graph_loss(logits, batch), logits

    step = jax.jit(jax.value_and_grad(loss, has_aux=True))  # compiled: no op-by-op dispatch
    (l1, z1), g1 = step(params, tight)
    (l2, z2), g2 = step(params, loose)
    np.testing.assert_allclose(float(l1), float(l2), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(z1)[:8], np.asarray(z2)[:8], rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    # Against the reference: the mean BCE over the labelled entries of the real graphs.
    labels = BINARY.labels[order]
    labelled = ~np.isnan(labels)
    want = _bce(np.asarray(z1)[:8], np.nan_to_num(labels))[labelled].mean()
    np.testing.assert_allclose(float(l1), want, rtol=1e-5)


def test_graph_task_metrics_equal_sklearn_over_the_masked_graphs():
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(30, 3)).astype(np.float32) + np.nan_to_num(BINARY.labels)
    mask = np.zeros(30, bool)
    mask[BINARY.split["test"]] = True
    mask[BINARY.split["valid"]] = True
    rows = np.flatnonzero(mask)
    for name in ("rocauc", "ap"):
        got = TASKS["graph"].metrics[name](
            jnp.asarray(scores), jnp.asarray(BINARY.labels), jnp.asarray(mask)
        )
        np.testing.assert_allclose(
            float(got), _reference_metric(name, scores, BINARY.labels, rows), rtol=1e-5
        )
    classes = random_graphs(count=10, seed=4)
    logits = rng.normal(size=(10, 2)).astype(np.float32)
    acc = TASKS["graph"].metrics["acc"](
        jnp.asarray(logits), jnp.asarray(classes.labels), jnp.asarray(mask[:10])
    )
    want = (logits.argmax(1) == classes.labels)[mask[:10]].mean()
    np.testing.assert_allclose(float(acc), want, rtol=1e-6)


def test_official_split_is_one_fold_and_folds_are_refused():
    splits = official_splits(BINARY)
    assert splits.train.shape == (1, 30)
    for name, mask in (("train", splits.train), ("valid", splits.valid), ("test", splits.test)):
        np.testing.assert_array_equal(np.flatnonzero(mask[0]), BINARY.split[name])
    batches, counts = member_batches(BINARY, splits, (0, 1), BUDGET, 8, packings=2)
    ids, real = np.asarray(batches.graph_ids), np.asarray(batches.graph_mask)
    for m in range(2):
        for p in range(2):  # every packing trains on exactly the official train graphs
            np.testing.assert_array_equal(np.sort(ids[m, p][real[m, p]]), BINARY.split["train"])
    assert counts.tolist() == [18, 18]
    exp = Experiment(dataset="tu:MUTAG", model="gin", folds=3)
    with pytest.raises(ValueError, match=r"binary:RANDOM has an official train/valid/test split"):
        graph_splits(exp, BINARY)
    object.__setattr__(exp, "dataset", "ogbg-molhiv")  # refused before anything is read
    with pytest.raises(ValueError, match=r"ogbg-molhiv has an official .* folds=3 \(--folds\)"):
        check_graph_experiment(exp)


@pytest.fixture(scope="module")
def binary_run():
    """Four epochs on the official split, two seeds, checkpointed every two epochs."""
    model = graph_gin(3, 3, hidden=8, num_layers=3, dropout_rate=0.5)
    config = GraphTrainConfig(epochs=4, batch_size=8, epochs_per_call=2, packings=2)
    return model, config


def test_binary_run_metrics_resume_and_predictions(binary_run, tmp_path):
    model, config = binary_run
    splits = official_splits(BINARY)
    hook = CheckpointHook(tmp_path, seeds=[0, 1], every=2)
    full = fit_graphs(model, BINARY, config, splits, seeds=(0, 1), budget=BUDGET, on_chunk=hook)
    hook.close()
    assert full.metric == "rocauc" and full.compiles == 1  # two calls, one trace
    np.testing.assert_array_equal(full.best_epoch, select_best(full.curves))

    # The metrics computed in the compiled epoch equal sklearn's on the last params.
    state = full.state
    probs, embeddings = predict_graphs(model, state.params, state.stats, BINARY, batch_size=5)
    for m in range(2):
        for name, curve in (("valid", full.curves.val_metric), ("test", full.curves.test_metric)):
            want = _reference_metric("rocauc", probs[m], BINARY.labels, BINARY.split[name])
            np.testing.assert_allclose(curve[-1, m], want, rtol=1e-4)
        labelled = ~np.isnan(BINARY.labels[BINARY.split["valid"]])
        # The logits from the readout (checked below), not from saturating probabilities.
        heads = [jax.tree.map(lambda a, m=m: np.asarray(a[m]), h) for h in state.params["heads"]]
        w = np.concatenate([h["w"] for h in heads])
        logits = (embeddings[m] @ w + sum(h["b"] for h in heads))[BINARY.split["valid"]]
        want_loss = _bce(logits, np.nan_to_num(BINARY.labels[BINARY.split["valid"]]))[labelled]
        np.testing.assert_allclose(full.curves.val_loss[-1, m], want_loss.mean(), rtol=1e-3)

    # Predictions equal a direct forward of each graph alone; embeddings are the readout.
    for g in (0, 7, 29):
        alone = jax.tree.map(lambda a: a[0], pack_graphs(BINARY, np.array([g]), BUDGET, 1))
        for m in range(2):
            p = jax.tree.map(lambda a, m=m: a[m], state.params)
            s = jax.tree.map(lambda a, m=m: a[m], state.stats)
            logits, _ = model.apply(p, s, alone, training=False)
            np.testing.assert_allclose(
                probs[m, g], np.asarray(jax.nn.sigmoid(logits[0])), rtol=1e-5, atol=1e-6
            )
            w = np.concatenate([np.asarray(h["w"]) for h in p["heads"]])
            b = sum(np.asarray(h["b"]) for h in p["heads"])
            np.testing.assert_allclose(
                embeddings[m, g] @ w + b, np.asarray(logits[0]), rtol=1e-4, atol=1e-5
            )
    assert embeddings.shape == (2, 30, 3 + 8 + 8)  # every layer's readout, the input's too

    # Resume from the epoch-2 checkpoint: the same curves and final state.
    saved = list_checkpoints(tmp_path)
    assert [p.name for p in saved] == ["ckpt-000002.json", "ckpt-000004.json"]
    template = GraphCheckpointState(
        member_template(model, config, 2),
        jax.ShapeDtypeStruct((2,), jnp.int32),
        jax.ShapeDtypeStruct((2,), jnp.bool_),
    )
    ckpt = load_checkpoint(saved[0], template, seeds=[0, 1])
    assert ckpt.epoch == 2 and ckpt.history["val_metric"].shape == (2, 2)
    resumed = fit_graphs(
        model,
        BINARY,
        config,
        splits,
        seeds=(0, 1),
        budget=BUDGET,
        state=ckpt.state.members,
        history=ckpt.history,
    )
    for name in Curves._fields:
        np.testing.assert_array_equal(getattr(resumed.curves, name), getattr(full.curves, name))
    for a, b in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(full.state), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert resumed.start_epoch == 2


def _molecules(data, seed: int = 7):
    """``data`` with OGB-like categorical atom (2 columns) and bond (1 column) features."""
    rng = np.random.default_rng(seed)
    atoms = rng.integers(0, 5, size=(data.num_nodes, 2)).astype(np.int64)
    bonds = rng.integers(0, 3, size=(data.num_edges, 1)).astype(np.int64)
    return dataclasses.replace(
        data, features=atoms, feature_dims=(5, 5), edge_features=bonds, edge_feature_dims=(3,)
    )


@pytest.mark.parametrize("style", [pytest.param("xu", marks=pytest.mark.slow), "ogb"])
def test_shards_merge_into_one_block_diagonal_batch(style):
    data = random_graphs(count=12, seed=5)
    if style == "ogb":  # OGB's baseline: atom and bond encoders, GINE, mean readout
        data = _molecules(data)
    model = build_graph_model(data, hidden=8, num_layers=2, dropout_rate=0.0, style=style)
    params, stats = model.init(jax.random.key(1))
    order = np.arange(12)
    one = jax.tree.map(lambda a: a[0], pack_graphs(data, order, Budget(73, 200, 13), 12))
    two = jax.tree.map(lambda a: a[0], pack_steps(data, order, Budget(41, 100, 7), 12, devices=2))
    merged = merge_shards(two)

    def loss(p, batch):
        logits, new_stats = model.apply(p, stats, batch, training=True)
        return graph_loss(logits, batch), new_stats

    step = jax.jit(jax.value_and_grad(loss, has_aux=True))
    (l1, s1), g1 = step(params, one)
    (l2, s2), g2 = step(params, merged)
    np.testing.assert_allclose(float(l1), float(l2), rtol=1e-6)
    # Batch statistics are over the whole global batch: the running ones agree.
    for a, b in zip(jax.tree.leaves((g1, s1)), jax.tree.leaves((g2, s2)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("batch_size", [7, 3, 8])
def test_a_step_on_two_devices_holds_the_graphs_of_a_step_on_one(batch_size):
    # A random order, no overflow: step s holds order[sB, (s+1)B) on 1 and 2 devices
    # alike. Before: 2 sub-batches of ceil(B/2) graphs, 8 graphs a step for B = 7.
    data = random_graphs(count=23, seed=4)
    order = np.random.default_rng(0).permutation(23)
    budget = Budget(400, 1000, 9)

    def steps(devices):
        ids = np.asarray(pack_steps(data, order, budget, batch_size, devices).graph_ids)
        return [sorted(i for i in step.reshape(-1).tolist() if i >= 0) for step in ids]

    want = [sorted(order[s : s + batch_size].tolist()) for s in range(0, 23, batch_size)]
    assert steps(1) == want
    assert steps(2) == want


def test_ogb_model_on_binary_molecules_predicts_its_pooled_rows():
    data = _molecules(BINARY)
    model = build_graph_model(data, hidden=8, num_layers=2, dropout_rate=0.5)
    assert model.config["style"] == "ogb"
    config = GraphTrainConfig(epochs=2, batch_size=8, packings=1)
    result = fit_graphs(model, data, config, official_splits(data), seeds=(3,), budget=BUDGET)
    assert np.isfinite(result.curves.train_loss).all() and result.metric == "rocauc"
    state = result.state
    probs, embeddings = predict_graphs(model, state.best_params, state.best_stats, data)
    assert embeddings.shape == (1, 30, 8)  # the mean-pooled last layer
    head = jax.tree.map(lambda a: np.asarray(a[0]), state.best_params["head"])
    logits = embeddings[0] @ head["w"] + head["b"]
    np.testing.assert_allclose(probs[0], 1 / (1 + np.exp(-logits)), rtol=1e-4, atol=1e-6)
    test = BINARY.split["test"]
    want = _reference_metric("rocauc", probs[0], data.labels, test)
    np.testing.assert_allclose(result.test_metric[0], want, rtol=1e-4)


def test_two_devices_equal_one():
    model = graph_gin(3, 2, hidden=8, num_layers=3, dropout_rate=0.0)
    data = random_graphs(count=24, seed=1)
    splits = fold_splits(data.labels, 3, seed=0)
    config = GraphTrainConfig(epochs=2, batch_size=6, packings=2)
    one = fit_graphs(model, data, config, splits, seeds=(0,), budget=Budget(41, 120, 7))
    two = fit_graphs(model, data, config, splits, seeds=(0,), budget=Budget(25, 64, 4), devices=2)
    assert two.devices == 2 and one.batches_per_epoch == two.batches_per_epoch
    # Evaluation too: it read running means that biases before batch norm moved with
    # the rounding of the device count (validation loss 12.27 against 11.87 on MUTAG).
    for name in ("train_loss", "val_loss", "val_metric", "test_metric"):
        np.testing.assert_allclose(
            getattr(two.curves, name), getattr(one.curves, name), rtol=1e-5, atol=1e-6
        )
    for state in ("params", "stats"):
        flat_one = jax.tree.leaves(getattr(one.state, state))
        flat_two = jax.tree.leaves(getattr(two.state, state))
        for a, b in zip(flat_one, flat_two, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_graph_config_ends_calls_on_checkpoint_epochs():
    exp = Experiment(
        dataset="tu:MUTAG", model="gin", epochs=20, checkpoint="ck", checkpoint_every=4
    )
    from sparsegcn.tasks.graph import graph_config

    assert graph_config(exp).chunk == 2  # gcd(20 // 10, 4)
    plain = graph_config(dataclasses.replace(exp, checkpoint=None, checkpoint_every=50))
    assert plain.chunk == 2


def test_official_split_pipeline_reports_the_metric_and_ogbs_evaluator(monkeypatch):
    pytest.importorskip("ogb")
    import sparsegcn.datasets.graphs as graphs_module
    from sparsegcn.tasks.graph import run_graph_experiment

    one_task = binary_graphs(count=30, tasks=1, seed=6, missing=0.1)
    data = dataclasses.replace(one_task, name="ogbg-molhiv")  # ogb's Evaluator: one task
    monkeypatch.setattr(graphs_module, "load_graphs", lambda name, root, **kw: data)
    exp = Experiment(dataset="tu:STANDIN", model="gin", epochs=2, hidden=8, layers=3, seeds=2)
    report = run_graph_experiment(exp)
    assert report["split"] == "official" and report["metric"] == "rocauc"
    per_member = report["test_rocauc_per_member"]
    assert report["test_rocauc_mean"] == pytest.approx(np.mean(per_member))
    assert report["test_rocauc_std"] == pytest.approx(np.std(per_member))
    assert "val_rocauc_mean" in report and "test_acc_mean" not in report
    # ogb's Evaluator on the best params' test predictions equals the device metric there.
    official = report["ogb_evaluator"]
    assert official["metric"] == "rocauc"
    np.testing.assert_allclose(official["test"], per_member, rtol=1e-5)


def test_a_holdout_split_reports_the_deviation_over_its_seeds(monkeypatch):
    # Before: over its one fold, always 0 ("0.7193 +- 0.0000" for 0.842, 0.632, 0.684).
    import sparsegcn.datasets.graphs as graphs_module
    from sparsegcn.tasks.graph import run_graph_experiment

    data = dataclasses.replace(random_graphs(count=40, seed=3), name="tu:STANDIN")
    monkeypatch.setattr(graphs_module, "load_graphs", lambda name, root, **kw: data)
    exp = Experiment(dataset="tu:STANDIN", model="gin", epochs=3, hidden=8, layers=3, seeds=3)
    report = run_graph_experiment(exp)
    assert report["split"] == "holdout"
    per_member = report["test_acc_per_member"]
    assert len(per_member) == 3 and np.std(per_member) > 0
    assert report["test_acc_std"] == pytest.approx(np.std(per_member))
    assert report["test_acc_mean"] == pytest.approx(np.mean(per_member))
    # The timing keys are medians over the compiled calls, not means over the run.
    assert 0 < report["epoch_ms_median"] <= 1e3 * report["train_s"]
    steps = report["batches_per_epoch"]
    assert report["train_step_ms_median"] == pytest.approx(report["epoch_ms_median"] / steps)


def test_ogbs_evaluator_and_predict_score_logits_that_saturate_a_sigmoid(monkeypatch, tmp_path):
    # Before: both scored float32 sigmoid probabilities, exactly 1 past a logit of about
    # 17; the ties moved ROC-AUC and AP off the metric training recorded on the logits.
    pytest.importorskip("ogb")
    import sparsegcn.datasets.graphs as graphs_module
    import sparsegcn.tasks.graph as graph_task

    one_task = binary_graphs(count=40, tasks=1, seed=6, missing=0.1)
    data = dataclasses.replace(one_task, name="ogbg-molhiv")
    monkeypatch.setattr(graphs_module, "load_graphs", lambda name, root, **kw: data)
    built = graph_task._model

    def loud(exp, dataset):  # the model's logits times 1000: their sigmoids are 0 or 1
        model = built(exp, dataset)

        def apply(params, stats, batch, **kwargs):
            logits, stats = model.apply(params, stats, batch, **kwargs)
            return 1e3 * logits, stats

        return model._replace(apply=apply)

    monkeypatch.setattr(graph_task, "_model", loud)
    ckpt = tmp_path / "ckpt"
    exp = Experiment(
        dataset="tu:STANDIN", model="gin", epochs=2, hidden=8, layers=3, seeds=2,
        checkpoint=str(ckpt), root=str(tmp_path),
    )  # fmt: skip
    report = graph_task.run_graph_experiment(exp)
    per_member = report["test_rocauc_per_member"]
    np.testing.assert_allclose(report["ogb_evaluator"]["test"], per_member, rtol=1e-5)
    predicted = graph_task.predict_graph_checkpoint(ckpt)
    np.testing.assert_allclose(predicted["test"], per_member, rtol=1e-5)
    np.testing.assert_allclose(predicted["ogb_evaluator"]["test"], per_member, rtol=1e-5)
    probabilities = predicted["predictions"]
    assert np.isin(probabilities, (0.0, 1.0)).mean() > 0.5  # saturated, as meant


def test_pack_graphs_keeps_categorical_features_and_missing_labels():
    data = _molecules(BINARY)
    atoms, bonds = data.features, data.edge_features
    order = np.array([4, 0, 9])
    batch = jax.tree.map(lambda a: a[0], pack_graphs(data, order, BUDGET, 8))
    assert batch.x.dtype == np.int32 and batch.edge_features.dtype == np.int32
    assert batch.labels.dtype == np.float32 and batch.labels.shape == (BUDGET.graphs, 3)
    for slot, g in enumerate(order):
        np.testing.assert_array_equal(batch.labels[slot], data.labels[g])  # NaN kept
        rows = np.flatnonzero(batch.node_graph == slot)
        nodes = slice(data.node_ptr[g], data.node_ptr[g + 1])
        np.testing.assert_array_equal(batch.x[rows], atoms[nodes])
    assert np.isnan(batch.labels[3:]).all() and (batch.x[batch.node_graph >= 3] == 0).all()
    real_edges = int(data.edges_per_graph()[order].sum())
    np.testing.assert_array_equal(
        np.sort(batch.edge_features[:real_edges, 0]),
        np.sort(np.concatenate([bonds[data.edge_ptr[g] : data.edge_ptr[g + 1], 0] for g in order])),
    )


def test_a_held_out_graph_larger_than_every_training_batch_is_packed():
    # Before: balanced packing sized the budget from the training batches alone, and
    # the held-out batches failed with "graph 0 has 7 nodes and 12 edges; the budget
    # holds 8 nodes and 8 edges per batch" (graph 0: a position, not the graph's id).
    edges = BINARY.edges_per_graph()
    small = np.flatnonzero(edges <= 6)
    large = np.flatnonzero(edges > 8)
    assert small.size >= 4 and large.size >= 2
    split = {"train": small, "valid": large[::2], "test": large[1::2]}
    data = dataclasses.replace(BINARY, split=split)
    model = graph_gin(3, 3, hidden=4, num_layers=2, dropout_rate=0.0)
    config = GraphTrainConfig(epochs=1, batch_size=1, packings=1)
    result = fit_graphs(model, data, config, official_splits(data), seeds=(0,))
    assert result.budget.edges >= edges.max() and result.budget.nodes > data.nodes_per_graph().max()
    assert np.isfinite(result.curves.train_loss).all()


def test_binary_evaluation_graphs_without_both_labels_of_a_task_are_refused():
    # Before: "val rocauc nan" with exit 0 (an all-negative test split: ogb's
    # Evaluator raised after training).
    labels = BINARY.labels.copy()
    labels[BINARY.split["valid"]] = 0.0
    data = dataclasses.replace(BINARY, labels=labels)
    exp = Experiment(dataset="ogbg-molhiv", model="gin")
    with pytest.raises(ValueError, match=r"binary:RANDOM's valid graphs \(6\): no task has both"):
        graph_splits(exp, data)
    assert graph_splits(exp, BINARY).train.shape == (1, 30)


@pytest.mark.parametrize(
    ("metric", "outputs", "message"),
    [
        ("rocauc", 2, r"binary:RANDOM has 3 binary tasks \(labels shape \(30, 3\), metric "),
        ("rmse", 1, r"binary:RANDOM has 3 regression targets .* metric 'rmse'"),
    ],
)
def test_fit_graphs_needs_one_output_per_task_or_target(metric, outputs, message):
    # Before: trained (or failed inside the compiled loss) with the wrong width.
    data = dataclasses.replace(BINARY, metric=metric)
    model = graph_gin(3, outputs, hidden=4, num_layers=2)
    config = GraphTrainConfig(epochs=1, batch_size=8, packings=1)
    with pytest.raises(ValueError, match=message + rf".*num_classes={outputs} outputs"):
        fit_graphs(model, data, config, official_splits(data), budget=BUDGET)


def test_fit_graphs_compares_categorical_columns_with_the_dataset():
    # Before: a model embedding categories trained on real-valued features cast to
    # int32, and a smaller vocabulary than the dataset's clipped its ids silently.
    config = GraphTrainConfig(epochs=1, batch_size=8, packings=1)
    embeds = build_graph_model(_molecules(BINARY), hidden=4, num_layers=2, dropout_rate=0.0)
    real = dataclasses.replace(
        _molecules(BINARY), features=BINARY.features[:, :2], feature_dims=None
    )
    with pytest.raises(ValueError, match=r"embeds categorical node columns .* real-valued"):
        fit_graphs(embeds, real, config, official_splits(real), budget=BUDGET)
    data = dataclasses.replace(_molecules(BINARY), feature_dims=(5, 9))
    with pytest.raises(ValueError, match=r"feature_dims\[1\]=5 categories but .* takes 9"):
        fit_graphs(embeds, data, config, official_splits(data), budget=BUDGET)

"""The multi-label node task: loss, ROC-AUC against ogb's Evaluator, the trainers, the task."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import compiled_programs

import sparsegcn as sg
from sparsegcn.datasets import Dataset
from sparsegcn.experiment import Experiment
from sparsegcn.parallel import fit_data_parallel, fit_edge_sharded
from sparsegcn.tasks import TASKS, task_for, task_name
from sparsegcn.train import NodeData, TrainConfig, index_mask
from sparsegcn.train.losses import (
    CLASSIFICATION,
    MULTILABEL,
    binary_cross_entropy_per_node,
    masked_roc_auc,
)
from sparsegcn.train.minibatch import MinibatchConfig, fit_minibatch, minibatch_data

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def test_binary_cross_entropy_skips_missing_labels():
    logits = np.array([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0], [1.0, 1.0, 1.0]], np.float32)
    labels = np.array([[1, 0, -1], [0, 1, 1], [-1, -1, -1]])

    def bce(z, y):  # -[y log σ(z) + (1 - y) log(1 - σ(z))]
        p = 1 / (1 + np.exp(-z))
        return -(y * np.log(p) + (1 - y) * np.log(1 - p))

    expected = [
        (bce(2.0, 1) + bce(-1.0, 0)) / 2,
        (bce(0.0, 0) + bce(3.0, 1) + bce(-2.0, 1)) / 3,
        0.0,  # no label present
    ]
    got = binary_cross_entropy_per_node(jnp.asarray(logits), jnp.asarray(labels))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    mask = np.array([True, True, False])
    np.testing.assert_allclose(
        MULTILABEL.loss(jnp.asarray(logits), jnp.asarray(labels), mask),
        np.mean(expected[:2]),
        rtol=1e-5,
    )


def test_roc_auc_equals_ogb_evaluator():
    ogb = pytest.importorskip("ogb.nodeproppred")
    rng = np.random.default_rng(0)
    n, t = 300, 112
    labels = (rng.random((n, t)) < rng.uniform(0.05, 0.5, t)).astype(np.int64)
    scores = (labels + rng.normal(size=(n, t)) * 1.5).astype(np.float32)
    scores[:, :3] = np.round(scores[:, :3])  # ties, as sklearn counts them
    labels[rng.random((n, t)) < 0.1] = -1  # missing
    labels[:, 5] = np.where(labels[:, 5] >= 0, 0, -1)  # a task without positives: skipped
    mask = rng.random(n) < 0.6
    ours = masked_roc_auc(jnp.asarray(scores), jnp.asarray(labels), jnp.asarray(mask))
    truth = labels[mask].astype(np.float64)
    truth[truth < 0] = np.nan
    official = ogb.Evaluator("ogbn-proteins").eval({"y_true": truth, "y_pred": scores[mask]})
    np.testing.assert_allclose(float(ours), official["rocauc"], rtol=1e-5)


def community_multilabel_data(n=96, tasks=4, seed=0, shift=0.2, degree=6) -> NodeData:
    """Two communities; every task is positive in the first one (with noise). Features carry
    little (``shift``): the graph (``degree`` edges drawn per node) does."""
    rng = np.random.default_rng(seed)
    side = (np.arange(n) >= n // 2).astype(np.int64)
    e = degree * n
    s = rng.integers(0, n, e)
    r = np.where(
        rng.random(e) < 0.9,
        (s + rng.integers(1, n // 2, e)) % (n // 2) + side[s] * (n // 2),
        rng.integers(0, n, e),
    )
    g = sg.to_undirected(sg.Graph(s, r, None, n))
    labels = np.where(rng.random((n, tasks)) < 0.85, 1 - side[:, None], side[:, None])
    labels[rng.random((n, tasks)) < 0.1] = -1
    x = rng.normal(size=(n, 4)).astype(np.float32)
    x[:, 0] += shift * side
    perm = rng.permutation(n)
    return NodeData(
        graph=sg.sort_edges(sg.gcn_norm(g)),
        features=sg.as_features(x, n),
        labels=labels.astype(np.int32),
        train_mask=index_mask(perm[:30], n),
        val_mask=index_mask(perm[30:50], n),
        test_mask=index_mask(perm[50:], n),
    )


def count_compiles(fn):
    count = []

    def listener(event, duration, **kw):
        if event == COMPILE_EVENT:
            count.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return len(count)


def test_full_batch_multilabel_learns_and_compiles_once():
    data = community_multilabel_data()
    model = sg.gcn(4, 4, hidden=16)
    results = []

    def run(epochs):
        config = TrainConfig(epochs=epochs, epochs_per_call=10, patience=None)
        return lambda: results.append(sg.fit(model, data, config, objective=MULTILABEL))

    count_compiles(run(10))
    short, long = count_compiles(run(10)), count_compiles(run(60))
    assert long == short <= 2  # init and the epoch chunk, whatever the epochs
    result = results[-1]
    assert result.test_acc[0] > 0.85  # ROC-AUC averaged over the 4 tasks
    # The reported score is the metric of the restored params, as the Evaluator would compute.
    params = jax.tree.map(lambda p: p[0], result.best_params)
    logits = model.apply(params, data.graph, data.features)
    np.testing.assert_allclose(
        masked_roc_auc(logits, data.labels, data.test_mask), result.test_acc[0], rtol=1e-6
    )


def test_fit_refuses_a_split_whose_roc_auc_is_undefined():
    # Before: NaN every epoch, never "better", so the untrained init was reported
    # (val -1, test 0). The CLI refused it already (check_tasks_defined).
    data = community_multilabel_data()
    labels = np.asarray(data.labels).copy()
    labels[np.asarray(data.val_mask)] = 1  # every validation label positive
    with pytest.raises(ValueError, match=r"fit: data.val_mask's nodes .* no task has both"):
        sg.fit(
            sg.gcn(4, 4), data._replace(labels=labels), TrainConfig(epochs=1), objective=MULTILABEL
        )


def test_classification_objective_is_the_default():
    data = community_multilabel_data()
    data = data._replace(labels=np.maximum(data.labels[:, 0], 0))
    config = TrainConfig(epochs=5, patience=None)
    default = sg.fit(sg.gcn(4, 2), data, config)
    explicit = sg.fit(sg.gcn(4, 2), data, config, objective=CLASSIFICATION)
    np.testing.assert_array_equal(default.history["loss"], explicit.history["loss"])
    np.testing.assert_array_equal(default.test_acc, explicit.test_acc)


def test_sampled_multilabel_learns_and_each_program_compiles_once():
    data = community_multilabel_data(shift=1.0)
    plain = data._replace(
        graph=sg.to_undirected(
            sg.Graph(data.graph.senders, data.graph.receivers, None, data.graph.num_nodes)
        )
    )
    batches = minibatch_data(plain)
    # 3 compiled calls of 10 epochs of 3 batches each, 2 seeds: every program compiles once.
    config = TrainConfig(
        epochs=30, epochs_per_call=10, learning_rate=0.03, patience=None, timing_steps=2
    )
    results = []
    names = compiled_programs(
        lambda: results.append(
            fit_minibatch(
                sg.sage(4, 4, hidden=16, num_layers=2),
                batches,
                config,
                MinibatchConfig(fanouts=(5, 5), batch_size=10),
                seeds=[0, 1],
                objective=MULTILABEL,
            )
        )
    )
    for program in ("epochs_of_one_seed", "step_of_one_seed", "sample_batches"):
        assert names.count(f"jit({program})") == 1, names
    assert len(set(names)) == len(names), names  # nothing else twice either
    (result,) = results
    assert (result.history["loss"][-1] < result.history["loss"][0]).all()
    assert result.test_acc.min() > 0.75  # ROC-AUC averaged over the 4 tasks, each seed


# Slow: data parallelism equals one device for node training in
# tests/parallel/test_data_parallel.py; this case adds the multi-label loss.
@pytest.mark.slow
def test_data_parallel_multilabel_training_on_2_devices_equals_1():
    """Sampled GraphSAGE with every batch split over 2 devices trains as on one.

    Fanouts at the maximum degree sample every neighbour whatever the key, and
    without dropout the per-device keys change nothing: the 2-device run sums
    the same per-node losses in another order, so losses, params and ROC-AUC
    agree to rounding.
    """
    data = community_multilabel_data(shift=1.0, degree=2)
    plain = data._replace(
        graph=sg.to_undirected(
            sg.Graph(data.graph.senders, data.graph.receivers, None, data.graph.num_nodes)
        )
    )
    batches = minibatch_data(plain)
    fanout = int(np.diff(np.asarray(batches.graph.indptr)).max())
    model = sg.sage(4, 4, hidden=8, num_layers=2, dropout_rate=0.0)
    config = TrainConfig(epochs=6, learning_rate=0.03, patience=None)
    minibatch = MinibatchConfig(fanouts=(fanout, fanout), batch_size=11)
    runs = [
        fit_data_parallel(
            model, batches, config, minibatch, devices=2, seeds=[0, 1], objective=MULTILABEL
        ),
        fit_minibatch(model, batches, config, minibatch, seeds=[0, 1], objective=MULTILABEL),
    ]
    assert_runs_agree(*runs)


# Slow: edge sharding equals one device in tests/parallel/test_edge_shard.py.
@pytest.mark.slow
def test_edge_sharded_multilabel_training_on_2_devices_equals_1():
    """Full-batch GCN with the edges split over 2 devices trains as on one (no
    dropout): the sharded run all-gathers the same logits (its padding rows in
    no mask), so losses, params and ROC-AUC agree to rounding."""
    data = community_multilabel_data(n=95)  # odd: the second device's rows are padded
    model = sg.gcn(4, 4, hidden=8, dropout_rate=0.0)
    config = TrainConfig(epochs=6, patience=None)
    runs = [
        fit_edge_sharded(model, data, config, devices=2, seeds=[0, 1], objective=MULTILABEL),
        sg.fit(model, data, config, seeds=[0, 1], objective=MULTILABEL),
    ]
    assert_runs_agree(*runs)


def assert_runs_agree(got, want):
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=1e-5)
    for a, b in zip(
        jax.tree.leaves(got.state.params), jax.tree.leaves(want.state.params), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.history["val_acc"], want.history["val_acc"], atol=1e-6)
    np.testing.assert_allclose(got.test_acc, want.test_acc, atol=1e-6)
    assert (want.test_acc > 0.5).all() and want.history["loss"][-1].mean() < want.history["loss"][
        0
    ].mean()


def test_model_outputs_must_match_the_tasks():
    data = community_multilabel_data()
    with pytest.raises(ValueError, match=r"4 tasks .* num_classes=3"):
        sg.fit(sg.gcn(4, 3), data, TrainConfig(epochs=1), objective=MULTILABEL)


def test_dataset_takes_multilabel_labels():
    graph = sg.Graph(np.array([0, 1]), np.array([1, 0]), None, 3)
    labels = np.array([[1, 0], [-1, -1], [0, -1]])
    split = {"train": np.array([0]), "valid": np.array([2]), "test": np.array([2])}
    common = dict(name="m", graph=graph, features=np.ones((3, 1), np.float32), num_classes=2)
    with pytest.raises(ValueError, match="in both"):
        Dataset(labels=labels, split=split, **common)
    ok = Dataset(labels=labels, split={**split, "test": np.array([], np.int64)}, **common)
    assert ok.multilabel and ok.labels.shape == (3, 2) and ok.metric == "rocauc"
    with pytest.raises(ValueError, match=r"split\['train'\]\[0\] = node 1 has no label"):
        Dataset(labels=labels, split={**split, "train": np.array([1]), "test": []}, **common)
    with pytest.raises(ValueError, match=r"labels\[0, 1\] = 2: multi-label labels must be 1, 0"):
        Dataset(labels=np.array([[1, 2], [0, 0], [0, 0]]), split=split, **common)
    with pytest.raises(ValueError, match=r"2 tasks .* num_classes=3"):
        Dataset(labels=labels, split=split, **{**common, "num_classes": 3})


def test_the_task_owns_proteins_and_refuses_what_it_cannot_run():
    assert task_name("ogbn-proteins") == "node-multilabel"
    assert task_name("synthetic:proteins") == "node-multilabel"
    assert task_name("synthetic:arxiv") == "node" and task_name("ogbn-arxiv") == "node"
    assert list(TASKS)[:2] == ["node", "graph"]  # appended, not reordered
    assert task_for("ogbn-proteins").objective is MULTILABEL
    assert task_for("cora").objective is CLASSIFICATION
    with pytest.raises(ValueError, match=r"multi-label .* max_batches=5"):
        Experiment(dataset="synthetic:proteins", model="sage", fanouts="5,5", max_batches=5)
    # Several devices of one process: data parallel (sampled) or edge-sharded (full batch).
    Experiment(dataset="synthetic:proteins", model="sage", fanouts="5,5", devices=2)
    Experiment(dataset="synthetic:proteins", model="gcn", devices=2)
    with pytest.raises(ValueError, match=r"multi-label .* shard_features=True"):
        Experiment(
            dataset="synthetic:proteins",
            model="sage",
            fanouts="5,5",
            devices=2,
            shard_features=True,
        )


def test_a_multilabel_run_with_edge_features_resumes(tmp_path):
    # Before: the early dataset check compared the raw dataset (one constant column) with
    # the fingerprint the checkpoint recorded of the prepared one (the edge-feature
    # means), so every multi-label checkpoint refused to resume: "num_features is 8 in
    # the checkpoint but 1 in this run".
    from sparsegcn.cli import main

    base = [
        "train",
        "--dataset",
        "synthetic:proteins",
        "--scale",
        "0.002",
        "--model",
        "sage",
        "--fanouts",
        "none",
        "--hidden",
        "8",
    ]
    whole, half, resumed = (tmp_path / name for name in ("whole.json", "half.json", "r.json"))
    assert main([*base, "--epochs", "4", "--json", str(whole)]) == 0
    folder = tmp_path / "ck"
    assert main([*base, "--epochs", "2", "--checkpoint", str(folder), "--json", str(half)]) == 0
    assert main([*base, "--epochs", "4", "--resume", str(folder), "--json", str(resumed)]) == 0
    first, second = json.loads(whole.read_text()), json.loads(resumed.read_text())
    assert second["test_rocauc"] == first["test_rocauc"]


def test_a_multilabel_run_that_auto_would_stream_is_refused_before_training(monkeypatch, capsys):
    # Before: features_on "auto" resolved to "host" (features past 40 % of the device)
    # and the streamed trainer, which has no multi-label objective, failed after loading:
    # "indices and arr must have the same number of dimensions; 3 vs. 2".
    import sparsegcn.experiment.build as build
    from sparsegcn.cli import main

    monkeypatch.setattr(build, "device_memory_bytes", lambda: 1000)
    argv = ["train", "--dataset", "synthetic:proteins", "--scale", "0.002", "--model", "sage"]
    assert main([*argv, "--fanouts", "5,5", "--batch-size", "64", "--epochs", "1"]) == 2
    assert "multi-label node training keeps features and graph on its devices" in (
        capsys.readouterr().err
    )


def test_info_and_plots_name_binary_tasks_and_roc_auc(tmp_path, capsys):
    # Before: info printed "classes 112" for 112 binary tasks, and --plot labelled the
    # ROC-AUC curve "validation accuracy".
    from sparsegcn.cli import main
    from sparsegcn.experiment.lifecycle import _metric_label

    assert main(["info", "--dataset", "synthetic:proteins", "--scale", "0.002"]) == 0
    text = capsys.readouterr().out
    assert "binary tasks           112" in text and "classes" not in text
    assert _metric_label(Experiment(dataset="synthetic:proteins", model="sage")) == "ROC-AUC"
    assert _metric_label(Experiment(dataset="cora", model="gcn")) == "accuracy"

"""The mini-batch trainer: batches, gradients, learning, seeds, compile counts, the CLI."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import compiled_programs, two_communities

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.experiment import Experiment
from sparsegcn.train import (
    DivergenceError,
    MinibatchConfig,
    TrainConfig,
    make_batches,
    make_grad_fn,
    minibatch_data,
)
from sparsegcn.train.minibatch import effective_batch_size, steps_per_epoch


@pytest.fixture(scope="module")
def data():
    return minibatch_data(two_communities())


def test_batches_cover_every_train_node_once_and_pad_the_last():
    train = jnp.arange(100, 123, dtype=jnp.int32)  # T = 23
    batches = jax.jit(make_batches, static_argnums=2)(jax.random.key(0), train, 5)
    nodes, weights = np.asarray(batches.nodes), np.asarray(batches.weights)
    assert nodes.shape == weights.shape == (5, 5)
    real = weights > 0
    assert sorted(nodes[real].tolist()) == list(range(100, 123))
    assert real.sum(axis=1).tolist() == [5, 5, 5, 5, 3]
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(weights[4, :3], 1 / 3, rtol=1e-6)
    assert (nodes[~real] == 0).all()
    again = make_batches(jax.random.key(0), train, 5)
    other = make_batches(jax.random.key(1), train, 5)
    np.testing.assert_array_equal(again.nodes, nodes)
    assert not np.array_equal(other.nodes, nodes)
    assert (effective_batch_size(23, 512), steps_per_epoch(23, 5), steps_per_epoch(23, 512)) == (
        23,
        5,
        1,
    )


def test_grads_are_finite_and_the_loss_is_linear_over_batch_slots(data):
    # With fanout >= max degree and no dropout the sample is deterministic, so
    # splitting a batch's slots in two (as data parallelism does) and adding
    # the halves' gradients must give the whole batch's gradient exactly.
    fanout = int(np.diff(np.asarray(data.graph.indptr)).max())
    model = sg.sage(8, 2, hidden=8, dropout_rate=0.0)
    params = model.init(jax.random.key(0))
    grad_fn = jax.jit(make_grad_fn(model, (fanout, fanout)))
    nodes = jnp.asarray(np.asarray(data.train_nodes)[:8])
    weights = jnp.full((8,), 1 / 8, jnp.float32)
    whole_loss, whole = grad_fn(params, data, sg.train.Batch(nodes, weights), jax.random.key(1))
    halves = [
        grad_fn(
            params, data, sg.train.Batch(nodes[i : i + 4], weights[i : i + 4]), jax.random.key(i)
        )
        for i in (0, 4)
    ]
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(whole))
    np.testing.assert_allclose(halves[0][0] + halves[1][0], whole_loss, rtol=1e-5)
    summed = jax.tree.map(lambda a, b: a + b, halves[0][1], halves[1][1])
    for a, b in zip(jax.tree.leaves(summed), jax.tree.leaves(whole), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sage_learns_the_communities_and_restores_the_best_params(data):
    config = TrainConfig(epochs=30, patience=None, timing_steps=2)
    model = sg.sage(8, 2, hidden=16)
    result = sg.fit_minibatch(model, data, config, MinibatchConfig((5, 5), 16), seeds=[0, 1])
    assert result.test_acc.mean() > 0.9
    assert result.history["loss"].shape == (30, 2)
    assert result.history["loss"][-1].mean() < result.history["loss"][0].mean()
    assert result.steps_per_epoch == 3 and result.batch_size == 16  # 40 train nodes
    assert result.sampled_edges_per_s > 0 and result.train_step_ms_median > 0
    # The restored params reproduce the recorded best validation accuracy.
    for member in (0, 1):
        params = jax.tree.map(lambda p, m=member: p[m], result.best_params)
        logits = jax.jit(model.apply)(params, data.graph, data.features)
        val = sg.train.masked_accuracy(logits, jnp.asarray(data.labels), jnp.asarray(data.val_mask))
        np.testing.assert_allclose(val, result.val_acc[member], rtol=1e-6)
        best = int(result.best_epoch[member])
        np.testing.assert_allclose(result.history["val_acc"][best - 1, member], val, rtol=1e-6)


@pytest.mark.slow
def test_seeds_in_one_program_equal_a_seed_alone(data):
    config = TrainConfig(epochs=4, patience=None, timing_steps=0)
    model, mb = sg.sage(8, 2, hidden=8), MinibatchConfig((4, 3), 16)
    together = sg.fit_minibatch(model, data, config, mb, seeds=[3, 4])
    alone = sg.fit_minibatch(model, data, config, mb, seeds=[4])
    for a, b in zip(
        jax.tree.leaves(together.state.params), jax.tree.leaves(alone.state.params), strict=True
    ):
        np.testing.assert_allclose(a[1], b[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        together.history["loss"][:, 1], alone.history["loss"][:, 0], rtol=1e-5
    )
    w = together.state.params["layers"][0]["w_root"]
    assert not np.allclose(w[0], w[1])


def test_no_epoch_or_batch_after_the_first_recompiles(data):
    # 6 compiled calls of 2 epochs of 5 batches each: every program compiles once.
    config = TrainConfig(epochs=12, epochs_per_call=2, patience=None, timing_steps=2)
    mb = MinibatchConfig((4, 3), 8)
    names = compiled_programs(
        lambda: sg.fit_minibatch(sg.sage(8, 2, hidden=8), data, config, mb, seeds=[0, 1])
    )
    for program in ("epochs_of_one_seed", "step_of_one_seed", "sample_batches"):
        assert names.count(f"jit({program})") == 1, names
    # No program compiles twice (a total count would also count the small
    # helper programs that earlier tests in the process may have cached).
    assert len(names) == len(set(names)), names


def test_step_and_sampler_timing_are_opt_in(data):
    config = TrainConfig(epochs=2, patience=None)  # timing_steps: 0 by default
    results = []
    names = compiled_programs(
        lambda: results.append(
            sg.fit_minibatch(sg.sage(8, 2, hidden=8), data, config, MinibatchConfig((4, 3), 8))
        )
    )
    assert names.count("jit(epochs_of_one_seed)") == 1, names
    for program in ("step_of_one_seed", "sample_batches", "first_batch"):
        assert f"jit({program})" not in names, names
    (result,) = results
    assert np.isnan(result.train_step_ms_median) and np.isnan(result.sampled_edges_per_s)
    assert result.steps_per_epoch == 5 and result.batch_size == 8  # 40 train nodes


def test_early_stopping_freezes_a_seed(data):
    config = TrainConfig(epochs=200, patience=3, epochs_per_call=4, timing_steps=0)
    result = sg.fit_minibatch(
        sg.sage(8, 2, hidden=8), data, config, MinibatchConfig((4, 4), 16), seeds=[0]
    )
    epochs_run = result.history["loss"].shape[0]
    assert epochs_run < 200 and epochs_run == int(result.best_epoch[0]) + 3
    assert int(result.state.epoch[0]) == epochs_run


def test_divergence_is_caught(data):
    config = TrainConfig(epochs=20, learning_rate=1e30, patience=None, timing_steps=0)
    with pytest.raises(DivergenceError, match="training diverged at epoch"):
        sg.fit_minibatch(
            sg.sage(8, 2, hidden=8), data, config, MinibatchConfig((4, 4), 16), seeds=[0]
        )


def test_bad_inputs_are_refused():
    nd = two_communities()
    with pytest.raises(ValueError, match="train_mask is empty"):
        minibatch_data(nd._replace(train_mask=np.zeros(120, bool)))
    with pytest.raises(TypeError, match="expects MinibatchData"):
        sg.fit_minibatch(sg.sage(8, 2), nd)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        MinibatchConfig((5,), 0)
    with pytest.raises(ValueError, match="has 3 hops and layers=2; pass --layers 3"):
        Experiment(model="sage", fanouts="15,10,5", layers=2)


def test_cli_trains_sage_and_reports_gcn_keys_plus_sampler_throughput(tmp_path, capsys):
    out = tmp_path / "sage.json"
    argv = ["train", "--model", "sage", "--epochs", "3", "--seeds", "2", "--hidden", "8"]
    argv += ["--fanouts", "5,3", "--batch-size", "64", "--json", str(out), "--no-progress"]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    expected = {
        "dataset",
        "model",
        "backend",
        "num_nodes",
        "num_edges",
        "seeds",
        "test_acc_mean",
        "test_acc_std",
        "val_acc_mean",
        "train_step_ms_median",
        "compile_s",
        "wall_s",
        "sampled_edges_per_s",
    }
    assert expected <= set(report)
    assert report["model"] == "sage" and report["seeds"] == 2
    assert report["sampled_edges_per_s"] > 0
    assert report["config"]["fanouts"] == "5,3" and report["config"]["batch_size"] == 64
    assert "sage" in capsys.readouterr().out

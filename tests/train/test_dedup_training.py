"""Mini-batch training on the de-duplicated sampler: learning, one compile per
program, data parallelism, and the settings from Python and the CLI."""

import json

import jax
import numpy as np
import pytest
from helpers import compiled_programs, two_communities

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.experiment import Experiment
from sparsegcn.parallel.data_parallel import fit_data_parallel
from sparsegcn.train import MinibatchConfig, TrainConfig, make_grad_fn, minibatch_data


@pytest.fixture(scope="module")
def data():
    return minibatch_data(two_communities())


def test_sage_learns_on_dedup_samples_and_each_program_compiles_once(data):
    config = TrainConfig(epochs=16, epochs_per_call=8, patience=None, timing_steps=2)
    mb = MinibatchConfig((5, 5), 16, sampler="dedup", caps=(40, 60))
    results = []
    names = compiled_programs(
        lambda: results.append(
            sg.fit_minibatch(sg.sage(8, 2, hidden=16), data, config, mb, seeds=[0, 1])
        )
    )
    for program in ("epochs_of_one_seed", "step_of_one_seed", "sample_batches"):
        assert names.count(f"jit({program})") == 1, names
    (result,) = results
    assert result.test_acc.mean() > 0.9
    assert result.history["loss"][-1].mean() < result.history["loss"][0].mean()
    assert result.sampled_edges_per_s > 0


def test_dedup_and_tree_gradients_agree_with_full_neighbourhoods(data):
    fanout = int(np.diff(np.asarray(data.graph.indptr)).max())
    model = sg.sage(8, 2, hidden=8, dropout_rate=0.0)
    params = model.init(jax.random.key(0))
    batch = sg.train.Batch(
        jax.numpy.asarray(np.asarray(data.train_nodes)[:8]), jax.numpy.full((8,), 1 / 8)
    )
    grads = [
        jax.jit(make_grad_fn(model, (fanout, fanout), sampler=s))(
            params, data, batch, jax.random.key(1)
        )
        for s in ("tree", "dedup")
    ]
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(grads[0][1]), jax.tree.leaves(grads[1][1]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_data_parallel_training_runs_on_dedup_samples(data):
    config = TrainConfig(epochs=3, patience=None, timing_steps=0)
    mb = MinibatchConfig((4, 3), 16, sampler="dedup")
    result = fit_data_parallel(sg.sage(8, 2, hidden=8), data, config, mb, devices=2)
    assert np.isfinite(result.history["loss"]).all()


def test_settings_are_checked_and_reach_the_config():
    exp = Experiment(model="sage", sampler="dedup", dedup_caps="30,60")
    assert exp.minibatch_config() == MinibatchConfig((25, 10), 512, sampler="dedup", caps=(30, 60))
    assert Experiment(model="sage").minibatch_config().sampler == "tree"
    with pytest.raises(ValueError, match=r"sampler must be one of .*got 'bfs'"):
        Experiment(model="sage", sampler="bfs")
    with pytest.raises(
        ValueError, match=r"dedup_caps=.30,60. \(--dedup-caps\) applies only to the dedup sampler"
    ):
        Experiment(model="sage", dedup_caps="30,60")
    with pytest.raises(ValueError, match=r"one size per hop \(2\)"):
        Experiment(model="sage", sampler="dedup", dedup_caps="30")
    with pytest.raises(ValueError, match=r"caps=.*applies to sampler='dedup' only"):
        MinibatchConfig((5,), 8, caps=(3,))


@pytest.mark.slow
def test_cli_trains_with_the_dedup_sampler(tmp_path):
    out = tmp_path / "sage.json"
    argv = ["train", "--model", "sage", "--epochs", "2", "--hidden", "8", "--fanouts", "5,3"]
    argv += ["--sampler", "dedup", "--dedup-caps", "200,300", "--batch-size", "64"]
    assert main([*argv, "--json", str(out), "--no-progress"]) == 0
    report = json.loads(out.read_text())
    assert report["config"]["sampler"] == "dedup" and report["config"]["dedup_caps"] == "200,300"
    with pytest.raises(SystemExit) as exit_info:
        main([*argv[:-4], "--sampler", "bfs", "--no-progress"])
    assert exit_info.value.code == 2


def test_epoch_overflow_counts_what_the_caps_drop_over_the_epochs_batches(data):
    from sparsegcn.sampling import sample_dedup
    from sparsegcn.train import epoch_overflow, first_epoch_key, init_state, make_optimizer

    key = first_epoch_key(3)
    # The key of seed 3's first epoch: run_epoch splits the fresh state's key.
    model = sg.sage(8, 2, hidden=8)
    state = init_state(model, make_optimizer(TrainConfig()), jax.random.key(3))
    np.testing.assert_array_equal(
        jax.random.key_data(key), jax.random.key_data(jax.random.split(state.key)[1])
    )
    small = MinibatchConfig((5, 5), 16, sampler="dedup", caps=(20, 30))
    counts = epoch_overflow(data, small, key)
    # Oracle: the epoch's batches sampled one by one, as train_epoch and make_grad_fn draw them.
    perm_key, steps_key = jax.random.split(key)
    batches = sg.train.make_batches(perm_key, data.train_nodes, 16)
    keys = jax.random.split(steps_key, batches.nodes.shape[0])
    expected = np.zeros(2, np.int64)
    for i in range(batches.nodes.shape[0]):
        sample = sample_dedup(
            data.graph.indptr,
            data.graph.indices,
            batches.nodes[i],
            (5, 5),
            key=jax.random.split(keys[i])[0],
            mask=batches.mask[i],
            caps=(20, 30),
        )
        expected += np.asarray(sample.overflow)
    np.testing.assert_array_equal(counts, expected)
    assert counts.shape == (2,) and np.all(counts > 0)
    roomy = MinibatchConfig((5, 5), 16, sampler="dedup", caps=(80, 400))
    np.testing.assert_array_equal(epoch_overflow(data, roomy, key), [0, 0])
    with pytest.raises(ValueError, match="sampler='dedup' only, got 'tree'"):
        epoch_overflow(data, MinibatchConfig((5, 5), 16), key)


@pytest.mark.parametrize(
    ("caps", "overflows"), [("8,8", True), pytest.param("4000,4000", False, marks=pytest.mark.slow)]
)
def test_cli_report_counts_the_dedup_overflow_of_an_epoch(tmp_path, caps, overflows):
    out = tmp_path / "sage.json"
    argv = ["train", "--model", "sage", "--epochs", "1", "--hidden", "8", "--fanouts", "5,3"]
    argv += ["--sampler", "dedup", "--dedup-caps", caps, "--batch-size", "64", "--scale", "0.1"]
    assert main([*argv, "--json", str(out), "--no-progress"]) == 0
    overflow = json.loads(out.read_text())["dedup_overflow"]
    assert len(overflow) == 2 and all(isinstance(c, int) for c in overflow)
    assert all(c > 0 for c in overflow) if overflows else overflow == [0, 0]

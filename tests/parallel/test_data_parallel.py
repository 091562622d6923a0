"""Data-parallel mini-batch training against the single-device step and a pmap oracle."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import compiled_programs, two_communities

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.parallel import (
    check_devices,
    data_parallel_step_fn,
    fit_data_parallel,
    make_mesh,
    slice_batch,
)
from sparsegcn.train import (
    Batch,
    MinibatchConfig,
    TrainConfig,
    init_state,
    make_grad_fn,
    make_optimizer,
    minibatch_data,
    seed_keys,
)
from sparsegcn.train.fullbatch import apply_optimizer
from sparsegcn.train.minibatch import make_step_fn

SEEDS = [0, 1]


@pytest.fixture(scope="module")
def data():
    return minibatch_data(two_communities())


@pytest.fixture(scope="module")
def batch(data):
    # 11 seeds: not a multiple of 2, 4 or 8, so some devices get padding slots.
    nodes = jnp.asarray(np.asarray(data.train_nodes)[:11])
    return Batch(nodes, jnp.full((11,), 1 / 11, jnp.float32))


def initial_states(model, tx):
    return jax.jit(jax.vmap(lambda k: init_state(model, tx, k)))(seed_keys(SEEDS))


def assert_trees_close(got, want, rtol=1e-5, atol=1e-6):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def test_slices_partition_the_batch_and_pad_with_weight_zero(batch):
    slices = [slice_batch(batch, jnp.int32(d), 4) for d in range(4)]
    assert all(s.nodes.shape == (3,) for s in slices)  # ceil(11 / 4)
    nodes = np.concatenate([s.nodes for s in slices])
    weights = np.concatenate([s.weights for s in slices])
    np.testing.assert_array_equal(nodes[:11], batch.nodes)
    np.testing.assert_array_equal(weights, np.r_[np.full(11, 1 / 11, np.float32), 0.0])


@pytest.fixture(scope="module", params=["sage", "gat"])
def exact_step(data, batch, request):
    """A model, its states and the single-device step on ``batch``, with an exact sample.

    Fanout >= max degree and no dropout: the sample is the full neighbourhood
    whatever the key, so D devices must reproduce one device's step. Every
    registered sampled model runs the same trainer; GAT is checked beside SAGE.

    The update is plain SGD: Adam's first step is ``lr * g / (|g| + eps)``,
    which turns the last-bit differences of a gradient entry that cancels to
    about ``eps`` (summed in another order across devices) into differences
    of ``lr`` size. SGD keeps the comparison as well-conditioned as the
    gradient itself; Adam's state is checked on the sampled test below.
    """
    fanout = int(np.diff(np.asarray(data.graph.indptr)).max())
    model = sg.create_model(request.param, 8, 2, hidden=8, layers=2, dropout=0.0)
    tx = optax.sgd(1.0)
    states = initial_states(model, tx)
    want = jax.jit(make_step_fn(model, tx, (fanout, fanout)))(states, data, batch)
    return model, tx, (fanout, fanout), states, want


@pytest.mark.parametrize(
    "devices",
    [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(4, marks=pytest.mark.slow), 8],
)
def test_one_step_equals_the_single_device_step_on_the_global_batch(
    data, batch, exact_step, devices
):
    model, tx, fanouts, states, want = exact_step
    step = jax.jit(data_parallel_step_fn(model, tx, fanouts, make_mesh(devices)))
    got = step(states, data, batch)
    assert_trees_close(got.params, want.params)
    assert_trees_close(got.opt_state, want.opt_state)
    moved = jax.tree.map(
        lambda a, b: np.abs(np.asarray(a) - np.asarray(b)).max(), got.params, states.params
    )
    assert max(jax.tree.leaves(moved)) > 1e-3  # the step did something


def test_random_samples_and_dropout_follow_the_per_device_keys(data, batch):
    # With sampling and dropout, device d uses fold_in(step_key, d) on its
    # slice: a single-device loop over the slices with those keys is the oracle.
    model = sg.sage(8, 2, hidden=8, dropout_rate=0.5)
    tx = make_optimizer(TrainConfig())
    states = initial_states(model, tx)
    got = jax.jit(data_parallel_step_fn(model, tx, (3, 2), make_mesh(4)))(states, data, batch)
    grad_fn = make_grad_fn(model, (3, 2))

    slices = [slice_batch(batch, jnp.int32(d), 4) for d in range(4)]

    @jax.jit  # one program for the oracle's step, not one per operation
    def oracle(state, data, slices):
        _, step_key = jax.random.split(state.key)
        grads = [
            grad_fn(state.params, data, local, jax.random.fold_in(step_key, d))[1]
            for d, local in enumerate(slices)
        ]
        total = jax.tree.map(lambda *g: sum(g), *grads)
        return apply_optimizer(tx, total, state.opt_state, state.params)[0]

    for member in range(len(SEEDS)):
        params = oracle(jax.tree.map(lambda a, m=member: a[m], states), data, slices)
        assert_trees_close(jax.tree.map(lambda a, m=member: a[m], got.params), params)


def test_the_pmap_pmean_formulation_gives_the_same_step(data, batch):
    model = sg.sage(8, 2, hidden=8, dropout_rate=0.5)
    tx = make_optimizer(TrainConfig())
    states = initial_states(model, tx)
    got = jax.jit(data_parallel_step_fn(model, tx, (3, 2), make_mesh(4)))(states, data, batch)
    state = jax.tree.map(lambda a: a[0], states)
    _, step_key = jax.random.split(state.key)
    grad_fn = make_grad_fn(model, (3, 2))

    def replica(index, params, opt_state, data):
        local = slice_batch(batch, index, 4)
        _, grads = grad_fn(params, data, local, jax.random.fold_in(step_key, index))
        # Each device's loss is a share of the global mean: pmean of 4x it is the sum.
        grads = jax.lax.pmean(jax.tree.map(lambda g: 4.0 * g, grads), "i")
        return apply_optimizer(tx, grads, opt_state, params)[0]

    oracle = jax.pmap(replica, axis_name="i", in_axes=(0, None, None, None))
    replicas = oracle(jnp.arange(4, dtype=jnp.int32), state.params, state.opt_state, data)
    for d in range(4):
        assert_trees_close(
            jax.tree.map(lambda a, d=d: a[d], replicas), jax.tree.map(lambda a: a[0], got.params)
        )


def test_training_keeps_replicas_identical_learns_and_compiles_once(data):
    # 3 compiled calls of 10 epochs, 3 batches of 16 each, split over 4 devices.
    config = TrainConfig(epochs=30, epochs_per_call=10, patience=None, timing_steps=2)
    minibatch = MinibatchConfig((5, 5), 16)
    results = []
    names = compiled_programs(
        lambda: results.append(
            fit_data_parallel(
                sg.sage(8, 2, hidden=16), data, config, minibatch, devices=4, seeds=SEEDS
            )
        )
    )
    result = results[0]
    for program in ("epochs_of_one_seed", "step_of_one_seed"):  # the chunk, the timed step
        assert names.count(f"jit({program})") == 1, names
    assert len(names) <= 4, names
    assert result.test_acc.mean() > 0.9
    assert result.history["loss"].shape == (30, 2)
    assert result.history["loss"][-1].mean() < result.history["loss"][0].mean()
    # The global batch does not depend on the device count.
    assert (result.batch_size, result.steps_per_epoch) == (16, 3)
    assert result.train_step_ms_median > 0
    for leaf in jax.tree.leaves(result.state.params) + jax.tree.leaves(result.state.opt_state):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 4
        for other in shards[1:]:
            np.testing.assert_array_equal(other, shards[0])


@pytest.mark.slow
def test_one_device_equals_fit_minibatch_exactly(data):
    config = TrainConfig(epochs=3, patience=None, timing_steps=0)
    minibatch = MinibatchConfig((4, 3), 16)
    model = sg.sage(8, 2, hidden=8)
    got = fit_data_parallel(model, data, config, minibatch, devices=1, seeds=SEEDS)
    want = sg.fit_minibatch(model, data, config, minibatch, seeds=SEEDS)
    for a, b in zip(
        jax.tree.leaves(got.state.params), jax.tree.leaves(want.state.params), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got.history["loss"], want.history["loss"])


def test_too_many_devices_are_refused_with_how_to_simulate_them(data):
    with pytest.raises(
        ValueError,
        match=r"devices=16 \(--devices\) asks for 16 local devices but this process sees 8",
    ) as err:
        fit_data_parallel(sg.sage(8, 2), data, devices=16)
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=N" in str(err.value)
    assert "JAX_NUM_CPU_DEVICES=N" in str(err.value)
    with pytest.raises(ValueError, match="devices must be >= 1, got 0"):
        check_devices(0)
    with pytest.raises(TypeError, match="devices must be a static Python int"):
        check_devices(2.0)
    with pytest.raises(TypeError, match="expects MinibatchData"):
        fit_data_parallel(sg.sage(8, 2), two_communities(), devices=2)


@pytest.mark.slow
def test_cli_trains_sage_data_parallel(tmp_path):
    out = tmp_path / "sage.json"
    argv = ["train", "--model", "sage", "--epochs", "3", "--seeds", "2", "--hidden", "8"]
    argv += ["--fanouts", "5,3", "--batch-size", "64", "--devices", "2"]
    assert main([*argv, "--json", str(out), "--no-progress"]) == 0
    report = json.loads(out.read_text())
    assert (report["devices"], report["processes"], report["parallelism"]) == (
        2,
        1,
        "data_parallel",
    )
    assert report["config"]["devices"] == 2 and len(report["test_acc"]) == 2


def test_cli_refuses_too_many_devices_before_reading_data(tmp_path, capsys):
    root = tmp_path / "data"
    root.mkdir()
    argv = ["train", "--dataset", "cora", "--root", str(root), "--model", "sage"]
    assert main([*argv, "--devices", "64", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "devices=64 (--devices) asks for 64 local devices but this process sees 8" in err
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=64 sparsegcn train" in err
    assert list(root.iterdir()) == []  # nothing downloaded or read
    assert main(["train", "--devices", "2", "--sweep", "lr=0.01,0.1", "--no-progress"]) == 2
    assert "--sweep trains on one device" in capsys.readouterr().err
    assert main(["train", "--sweep", "devices=1,2", "--no-progress"]) == 2
    assert "do not sweep them" in capsys.readouterr().err

"""The divergence guard: detected inside the compiled chunk, reported by epoch and seed."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.datasets import load
from sparsegcn.experiment import node_data
from sparsegcn.train import (
    DivergenceError,
    TrainConfig,
    init_state,
    make_chunk_fn,
    make_optimizer,
    seed_keys,
    set_hyperparams,
    train_step,
)
from sparsegcn.train.guard import raise_if_diverged

SEEDS = [5, 6]
LEARNING_RATES = [0.01, 1e30]  # seed 6 blows up: Adam steps ~lr whatever the gradient
CONFIG = TrainConfig(epochs=20, patience=None, epochs_per_call=5, timing_steps=0)


@pytest.fixture(scope="module")
def setup():
    dataset = load("synthetic:tiny", scale=0.1)
    data = jax.device_put(node_data(dataset))
    model = sg.gcn(dataset.num_features, dataset.num_classes, hidden=8)
    tx = make_optimizer(CONFIG)
    state = jax.jit(jax.vmap(lambda k: init_state(model, tx, k)))(seed_keys(SEEDS))
    return model, tx, data, set_hyperparams(state, learning_rate=LEARNING_RATES)


@pytest.fixture(scope="module")
def oracle(setup):
    """Seed 6 stepped in a Python loop: its first non-finite epoch and the state before it."""
    model, tx, data, state = setup
    one = jax.tree.map(lambda leaf: leaf[1], state)
    step = jax.jit(lambda s: train_step(model, tx, s, data))
    for epoch in range(1, CONFIG.epochs + 1):
        params, opt_state, key, loss, grad_norm = step(one)
        if not (np.isfinite(loss) and np.isfinite(grad_norm)):
            return epoch, one
        one = one._replace(params=params, opt_state=opt_state, key=key, epoch=one.epoch + 1)
    pytest.fail("the oracle never diverged; raise the learning rate")


def test_chunk_freezes_the_diverged_seed_at_its_last_finite_state(setup, oracle):
    model, tx, data, state = setup
    first_bad, last_good = oracle
    assert 1 < first_bad <= CONFIG.chunk  # the guard acts inside one compiled call
    chunk = jax.jit(make_chunk_fn(model, tx, CONFIG))
    new_state, metrics = chunk(state, data)
    diverged = np.asarray(metrics["diverged"])  # [K, chunk]
    assert diverged[0].sum() == 0
    assert np.flatnonzero(diverged[1]).tolist() == [first_bad - 1]
    assert np.asarray(new_state.done).tolist() == [False, True]
    assert np.asarray(new_state.epoch).tolist() == [CONFIG.chunk, first_bad - 1]
    for got, want in zip(
        jax.tree.leaves(jax.tree.map(lambda leaf: leaf[1], new_state.params)),
        jax.tree.leaves(last_good.params),
        strict=True,
    ):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fit_names_the_epoch_seed_and_causes(setup, oracle):
    model, _, data, state = setup
    first_bad, _ = oracle
    with pytest.raises(DivergenceError) as info:
        sg.fit(model, data, CONFIG, seeds=SEEDS, state=state)
    err = info.value
    assert (err.epoch, err.seed, err.diverged_seeds, err.member) == (first_bad, 6, (6,), 1)
    assert not (np.isfinite(err.loss) and np.isfinite(err.grad_norm))
    message = str(err)
    assert f"training diverged at epoch {first_bad} (seed 6)" in message
    for cause in ("learning rate", "not normalized", "self-loops", "troubleshooting.md"):
        assert cause in message


def test_cli_reports_divergence_and_exits_2(capsys):
    argv = ["train", "--scale", "0.1", "--hidden", "8", "--epochs", "10", "--lr", "1e30"]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "sparsegcn train: error: training diverged at epoch" in err
    assert "(seed 0)" in err and "--clip-norm" in err


def test_raise_if_diverged_picks_the_earliest_epoch():
    metrics = {
        "diverged": np.array([[False, False, False], [False, True, False], [True, False, True]]),
        "epoch": np.array([[11, 11, 11], [12, 12, 12], [13, 13, 13]]),
        "loss": np.full((3, 3), np.nan, np.float32),
        "grad_norm": np.full((3, 3), np.inf, np.float32),
    }
    with pytest.raises(DivergenceError, match=r"epoch 12 \(seed 8\) \(seeds diverged in the same"):
        raise_if_diverged(metrics, [7, 8, 9])
    raise_if_diverged(dict(metrics, diverged=np.zeros((3, 3), bool)), [7, 8, 9])


def test_context_is_added_to_the_message():
    err = DivergenceError(3, 1, float("nan"), 2.0, [1]).with_context("sweep point {'lr': 1}")
    assert "epoch 3 (seed 1, sweep point {'lr': 1})" in str(err) and err.epoch == 3


def test_clip_norm_clips_the_gradient_before_adam():
    """Adam's first moment after one step is (1 - b1) times the clipped gradient."""
    params = {"layers": [{"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}]}
    grads = {"layers": [{"w": jnp.full((2, 2), 30.0), "b": jnp.full(2, 40.0)}]}
    norm = float(np.sqrt(4 * 30.0**2 + 2 * 40.0**2))
    tx = make_optimizer(TrainConfig(clip_norm=1.0, decay_layers="none"))
    with jax.numpy_dtype_promotion("standard"):
        _, state = tx.update(grads, tx.init(params), params)
    adam = state.inner_state[1][0]  # chain(clip, adam = chain(scale_by_adam, scale))
    assert isinstance(adam, optax.ScaleByAdamState)
    np.testing.assert_allclose(adam.mu["layers"][0]["w"], 0.1 * 30.0 / norm, rtol=1e-6)
    np.testing.assert_allclose(adam.mu["layers"][0]["b"], 0.1 * 40.0 / norm, rtol=1e-6)

"""The full-batch trainer: learning, seeds, early stopping, compile counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sparsegcn as sg
from sparsegcn.train import NodeData, TrainConfig, index_mask

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def two_community_data(n=120, seed=0) -> NodeData:
    """Two dense communities, weak noisy features: the graph carries the signal."""
    rng = np.random.default_rng(seed)
    labels = (np.arange(n) >= n // 2).astype(np.int32)
    s = rng.integers(0, n, 8 * n)
    r = np.where(
        rng.random(8 * n) < 0.9,
        (s + rng.integers(1, n // 2, 8 * n)) % (n // 2) + labels[s] * (n // 2),
        rng.integers(0, n, 8 * n),
    )
    g = sg.to_undirected(sg.Graph(s, r, None, n))
    x = rng.normal(size=(n, 8)).astype(np.float32) + 0.3 * labels[:, None]
    perm = rng.permutation(n)
    return NodeData(
        graph=sg.sort_edges(sg.gcn_norm(g)),
        features=sg.as_features(x, n),
        labels=labels,
        train_mask=index_mask(perm[:20], n),
        val_mask=index_mask(perm[20:60], n),
        test_mask=index_mask(perm[60:], n),
    )


@pytest.fixture(scope="module")
def data():
    return two_community_data()


def test_gcn_learns_the_communities_and_beats_an_mlp(data):
    config = TrainConfig(epochs=100, patience=None)
    gcn = sg.fit(sg.gcn(8, 2), data, config, seeds=[0, 1])
    mlp = sg.fit(sg.mlp(8, 2, hidden=16), data, config, seeds=[0, 1])
    assert gcn.test_acc.mean() > 0.9
    assert gcn.test_acc.mean() > mlp.test_acc.mean() + 0.1
    assert gcn.history["loss"].shape == (100, 2)
    assert gcn.history["loss"][-1].mean() < gcn.history["loss"][0].mean()


def test_seeds_in_one_program_equal_sequential_runs(data):
    config = TrainConfig(epochs=30, patience=None, timing_steps=0)
    together = sg.fit(sg.gcn(8, 2), data, config, seeds=[3, 4, 5])
    for i, seed in enumerate([3, 4, 5]):
        alone = sg.fit(sg.gcn(8, 2), data, config, seeds=[seed])
        for a, b in zip(
            jax.tree.leaves(together.best_params), jax.tree.leaves(alone.best_params), strict=True
        ):
            np.testing.assert_allclose(a[i], b[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            together.history["loss"][:, i], alone.history["loss"][:, 0], rtol=1e-5
        )


def test_different_seeds_differ(data):
    result = sg.fit(sg.gcn(8, 2), data, TrainConfig(epochs=3, timing_steps=0), seeds=[0, 1])
    w = result.state.params["layers"][0]["w"]
    assert not np.allclose(w[0], w[1])


def test_best_params_are_restored_and_early_stopping_freezes(data):
    config = TrainConfig(epochs=200, patience=5, epochs_per_call=7, timing_steps=0)
    result = sg.fit(sg.gcn(8, 2), data, config, seeds=[0])
    epochs_run = result.history["loss"].shape[0]
    best = int(result.best_epoch[0])
    assert epochs_run < 200 and epochs_run == best + 5
    # The restored params reproduce the recorded best validation accuracy.
    model = sg.gcn(8, 2)
    params = jax.tree.map(lambda p: p[0], result.best_params)
    logits = model.apply(params, data.graph, data.features)
    val = sg.train.masked_accuracy(logits, jnp.asarray(data.labels), jnp.asarray(data.val_mask))
    np.testing.assert_allclose(val, result.val_acc[0], rtol=1e-6)
    np.testing.assert_allclose(result.history["val_acc"][best - 1, 0], result.val_acc[0])


def count_compiles(fn):
    count = []
    listener = lambda event, duration, **kw: count.append(event) if event == COMPILE_EVENT else None  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return len(count)


def test_no_epoch_after_the_first_recompiles(data):
    model = sg.gcn(8, 2)

    def run(epochs):
        config = TrainConfig(epochs=epochs, epochs_per_call=5, patience=None, timing_steps=3)
        return lambda: sg.fit(model, data, config, seeds=[0, 1])

    count_compiles(run(10))  # the eager helpers (keys, device_put) compile once per process
    short, long = count_compiles(run(10)), count_compiles(run(60))
    assert long == short  # 12 chunks compile exactly what 2 chunks do
    assert long <= 3  # init, the epoch chunk, the timed step


@pytest.mark.slow
def test_step_timing_is_opt_in(data):
    model = sg.gcn(8, 2)
    results = []

    def run(timing_steps):
        config = TrainConfig(epochs=10, epochs_per_call=5, patience=None, timing_steps=timing_steps)
        return lambda: results.append(sg.fit(model, data, config, seeds=[0, 1]))

    assert TrainConfig().timing_steps == 0
    count_compiles(run(0))  # the eager helpers (keys, device_put) compile once per process
    untimed, timed = count_compiles(run(0)), count_compiles(run(3))
    assert untimed <= 2  # init and the epoch chunk
    assert timed == untimed + 1  # and the timed step
    assert np.isnan(results[1].train_step_ms_median)
    assert results[2].train_step_ms_median > 0
    # Timing runs after training and leaves its state alone: the run is the same.
    np.testing.assert_array_equal(results[1].history["loss"], results[2].history["loss"])
    untimed_state, timed_state = (r.state._replace(key=None) for r in results[1:])
    for a, b in zip(jax.tree.leaves(untimed_state), jax.tree.leaves(timed_state), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["fit", "fit_minibatch", "fit_data_parallel", "fit_edge_sharded"])
def test_every_trainer_refuses_no_seeds_by_its_name(data, name):
    # The four trainers share one skeleton (run_training), which names the caller.
    model = sg.sage(8, 2) if "minibatch" in name or "data_parallel" in name else sg.gcn(8, 2)
    if model.name == "sage":
        data = sg.minibatch_data(data)
    with pytest.raises(ValueError, match=f"^{name} needs at least one seed"):
        getattr(sg, name)(model, data, TrainConfig(epochs=1), seeds=[])


def test_training_with_dropout_requires_a_key(data):
    model = sg.gcn(8, 2)
    params = model.init(jax.random.key(0))
    with pytest.raises(ValueError, match="explicit PRNG key"):
        model.apply(params, data.graph, data.features, training=True)


def test_config_validation():
    with pytest.raises(ValueError, match="epochs must be >= 1, got 0"):
        TrainConfig(epochs=0)
    with pytest.raises(ValueError, match="decay_layers must be"):
        TrainConfig(decay_layers="last")


def test_the_three_backends_train_cora_to_the_same_result(cora):
    # Same seeds, same dropout masks: the backends differ only in float32 summation order.
    from sparsegcn.experiment import node_data

    data = node_data(cora, "gcn")
    model_config = dict(hidden=16, num_layers=2, dropout_rate=0.5)
    config = TrainConfig(epochs=40, epochs_per_call=40, patience=None, timing_steps=0)
    results = {}
    for backend in ("segment", "bcoo", "dense"):
        model = sg.gcn(cora.num_features, cora.num_classes, backend=backend, **model_config)
        results[backend] = sg.fit(model, data, config, seeds=[0])
    reference = results["dense"]
    assert reference.test_acc.mean() > 0.7  # it learned (Kipf & Welling: 0.815 at 200 epochs)
    for backend in ("segment", "bcoo"):
        got = results[backend]
        np.testing.assert_allclose(got.history["loss"], reference.history["loss"], rtol=1e-3)
        np.testing.assert_allclose(got.test_acc, reference.test_acc, atol=0.004)
        np.testing.assert_allclose(got.val_acc, reference.val_acc, atol=0.004)


@pytest.mark.parametrize("monitor", ["val_acc", "val_loss"])
def test_monitor_selects_the_best_epoch_from_the_history(data, monitor):
    """The selected epoch is the history's best by ``monitor`` (first on ties),
    and patience counts epochs since it."""
    config = TrainConfig(epochs=150, patience=15, monitor=monitor, timing_steps=0)
    result = sg.fit(sg.gcn(8, 2), data, config, seeds=[0, 1])
    for k in range(2):
        active = result.history["active"][:, k].astype(bool)
        val_acc = result.history["val_acc"][active, k]
        val_loss = result.history["val_loss"][active, k]
        if monitor == "val_loss":
            expected = int(np.argmin(val_loss))  # argmin: the first of equal minima
        else:
            # Highest accuracy, then lowest loss among those epochs.
            top = np.flatnonzero(val_acc == val_acc.max())
            expected = int(top[np.argmin(val_loss[top])])
        assert int(result.best_epoch[k]) == expected + 1
        assert active.sum() == expected + 1 + 15 or active.sum() == 150
        np.testing.assert_allclose(result.test_acc[k], result.history["test_acc"][expected, k])


def test_monitor_is_checked():
    with pytest.raises(ValueError, match=r"monitor must be one of .* got 'loss'"):
        TrainConfig(monitor="loss")


def test_a_call_runs_at_most_patience_epochs_so_an_early_stop_ends_the_run_soon(data):
    # Before: a call ran ceil(epochs / 20) epochs whatever the patience, the stopped seeds'
    # epochs as no-ops: --epochs 100000 --patience 100 ran 5,000 epochs before Python saw
    # that every seed had stopped, and --epochs 2**31 - 1 --patience 1 about 1e8.
    from sparsegcn.train.state import epochs_per_chunk

    assert epochs_per_chunk(100_000, None, 100) == 100
    assert epochs_per_chunk(200, None, 100) == 10
    assert epochs_per_chunk(2**31 - 1, None, 1) == 1
    assert epochs_per_chunk(100_000, 7, 1) == 7  # an explicit size is kept
    calls = []
    config = TrainConfig(epochs=100_000, patience=3)
    result = sg.fit(sg.gcn(8, 2), data, config, on_chunk=lambda state, history: calls.append(1))
    run = result.history["loss"].shape[0]  # the epochs until every seed stopped
    assert config.chunk == 3 and run < 100_000
    assert len(calls) * config.chunk < run + config.chunk  # no more than one call past it


def test_a_training_program_larger_than_free_memory_is_refused_before_it_runs(data, monkeypatch):
    # Before: nothing compared the compiled program with free memory; a wide model was
    # killed by the OOM killer (exit 137) with no message.
    from sparsegcn.bench import runner

    # gcn(8, 2)'s state is 2,901 bytes (test below); its one-epoch program needs about 80 kB.
    monkeypatch.setattr(runner, "available_memory", lambda: 10_000)
    with pytest.raises(ValueError, match=r"fit's training program \(1 seed\(s\)\) needs .* GiB"):
        sg.fit(sg.gcn(8, 2), data, TrainConfig(epochs=1))
    monkeypatch.setattr(runner, "available_memory", lambda: None)  # unknown: not checked
    sg.fit(sg.gcn(8, 2), data, TrainConfig(epochs=1))


def test_a_training_state_larger_than_free_memory_is_refused_before_it_is_built(data, monkeypatch):
    # Before: the state (parameters, Adam's two moments, the best parameters) was built
    # before any check, so a model as wide as --hidden 1000000 was killed while building it.
    from sparsegcn.bench import runner
    from sparsegcn.train import loop

    # By hand: gcn(8, 2) has W1 [8, 16], b1 [16], W2 [16, 2], b2 [2]: 178 float32s, held
    # 4 times (params, Adam's mu and nu, the best params); Adam's and the chain's counts,
    # learning rate and weight decay (4 x 4 bytes), a key (two uint32), epoch, bad_epochs
    # (int32), done (bool), the best's epoch (int32) and its four float32 scores.
    model, tx = sg.gcn(8, 2), sg.train.make_optimizer(TrainConfig())
    template = jax.eval_shape(
        jax.vmap(lambda k: sg.train.init_state(model, tx, k)), sg.train.seed_keys([0])
    )
    need = loop.tree_bytes(template)
    assert need == 4 * 178 * 4 + 4 * 4 + 8 + 4 + 4 + 1 + 4 + 4 * 4 == 2901
    monkeypatch.setattr(runner, "available_memory", lambda: need - 1)
    with pytest.raises(
        ValueError, match=r"training state of fit \(1 seed\(s\)\) .* needs 0\.0 GiB but 0\.0 GiB"
    ):
        sg.fit(sg.gcn(8, 2), data, TrainConfig(epochs=1))
    with pytest.raises(ValueError, match=r"training state of fit \(2 seed\(s\)\)"):
        sg.fit(sg.gcn(8, 2), data, TrainConfig(epochs=1), seeds=[0, 1])  # twice the state
    monkeypatch.setattr(runner, "available_memory", lambda: 2 * need)
    with pytest.raises(ValueError, match=r"training state"):
        sg.fit(sg.gcn(8, 2), data, TrainConfig(epochs=1), seeds=[0, 1, 2])


def test_tree_bytes_counts_arrays_their_shapes_and_keys():
    from sparsegcn.train.loop import tree_bytes

    tree = {"w": jnp.zeros((3, 4)), "n": np.zeros(5, np.int8), "k": jax.random.key(0)}
    assert tree_bytes(tree) == 3 * 4 * 4 + 5 + 8
    assert tree_bytes(jax.eval_shape(lambda: tree)) == 3 * 4 * 4 + 5 + 8
    assert tree_bytes(jax.random.split(jax.random.key(0), 6)) == 6 * 8

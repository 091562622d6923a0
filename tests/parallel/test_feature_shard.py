"""Features sharded by rows under data parallelism: the fetch against ``x[ids]``, the
training against the replicated and one-device runs, the bytes each device holds."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from conftest import fast_compile
from helpers import compiled_programs, two_communities
from jax.sharding import PartitionSpec as P

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.parallel import (
    AXIS,
    data_parallel_step_fn,
    fetch_rows,
    fit_data_parallel,
    make_mesh,
    place_data,
    rows_per_device,
    shard_feature_rows,
)
from sparsegcn.train import (
    Batch,
    MinibatchConfig,
    TrainConfig,
    init_state,
    make_optimizer,
    minibatch_data,
    seed_keys,
)

SEEDS = [0, 1]


def fetch_on(mesh, x_sharded, ids):
    """Runs :func:`fetch_rows` with device ``d`` holding ``ids[d]``; returns ``[D, ...]``."""
    fn = jax.shard_map(
        lambda xl, i: fetch_rows(xl, i[0])[None],
        mesh=mesh,
        in_specs=(P(AXIS, None), P(AXIS)),
        out_specs=P(AXIS),
        check_vma=False,
    )
    return np.asarray(jax.jit(fn)(x_sharded, ids))


def bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@pytest.mark.parametrize("n", [1, 10, 12, 13])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fetch_rows_is_bitwise_x_ids_on_4_devices(n, dtype):
    mesh = make_mesh(4)
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, 5)).astype(dtype)
    x[0, 0], x[-1, 1] = -0.0, np.nan  # signs and payloads survive: a selection, no sum
    xs = shard_feature_rows(x, mesh)
    r = rows_per_device(n, 4)
    assert xs.shape == (4 * r, 5)
    tail_owner = (n - 1) // r  # the device holding the last real rows (and the padding)
    ids = rng.integers(0, n, size=(4, 3, 7)).astype(np.int32)
    ids[0, 0, :] = n - 1  # repeated ids, all in the tail owner's block
    ids[1, 0, :3] = tail_owner * r  # the tail owner's first row
    ids[2] = ids[3]  # two devices asking the same rows
    got = fetch_on(mesh, xs, ids)
    assert got.shape == (4, 3, 7, 5) and got.dtype == dtype
    np.testing.assert_array_equal(bits(got), bits(x[ids]))


def test_fetch_rows_under_jit_and_vmap_compiles_once():
    mesh = make_mesh(4)
    x = np.arange(26 * 3, dtype=np.float32).reshape(26, 3)
    xs = shard_feature_rows(x, mesh)

    def per_device(xl, ids):  # ids [1, K, T]: K seeds' ids on each device
        return jax.vmap(lambda i: fetch_rows(xl, i))(ids[0])[None]

    fn = jax.jit(
        jax.shard_map(
            per_device,
            mesh=mesh,
            in_specs=(P(AXIS, None), P(AXIS)),
            out_specs=P(AXIS),
            check_vma=False,
        )
    )
    for seed in range(3):
        ids = np.random.default_rng(seed).integers(0, 26, size=(4, 2, 9)).astype(np.int32)
        np.testing.assert_array_equal(fn(xs, ids), x[ids])
    assert fn._cache_size() == 1


def test_shard_feature_rows_places_ceil_n_over_d_rows_per_device():
    mesh = make_mesh(4)
    x = np.arange(13 * 2, dtype=np.float32).reshape(13, 2) + 1
    xs = shard_feature_rows(x, mesh)
    assert xs.sharding.spec == P(AXIS, None)
    shards = sorted(xs.addressable_shards, key=lambda s: s.index[0].start)
    assert [s.data.shape for s in shards] == [(4, 2)] * 4
    np.testing.assert_array_equal(np.asarray(xs)[:13], x)
    np.testing.assert_array_equal(np.asarray(xs)[13:], 0)
    with pytest.raises(ValueError, match=r"must be \[N, F\].*got shape \(13,\)"):
        shard_feature_rows(x[:, 0], mesh)


@pytest.fixture(scope="module")
def data():
    # 122 nodes: not a multiple of 4 or 8, so the last device holds padding.
    return minibatch_data(two_communities(n=122))


def initial_states(model, tx):
    return jax.jit(jax.vmap(lambda k: init_state(model, tx, k)))(seed_keys(SEEDS))


@pytest.mark.parametrize(
    ("devices", "sampler"),
    [(2, "tree"), pytest.param(4, "tree", marks=pytest.mark.slow), (4, "dedup")],
)
def test_one_step_with_sampling_and_dropout_is_bitwise_the_replicated_step(data, devices, sampler):
    # N = 122 exceeds each device's sample (tree: ceil(11 / D) (1 + 3 + 6)
    # rows; dedup: at most as many), so both paths gather before projecting
    # and the fetched rows are bitwise x[ids]: the same arithmetic, the same bits.
    mesh = make_mesh(devices)
    model = sg.sage(8, 2, hidden=8, dropout_rate=0.5)
    tx = make_optimizer(TrainConfig())
    states = initial_states(model, tx)
    batch = Batch(jnp.asarray(np.asarray(data.train_nodes)[:11]), jnp.full((11,), 1 / 11))
    want = jax.jit(data_parallel_step_fn(model, tx, (3, 2), mesh, sampler=sampler))(
        states, data, batch
    )
    sharded = place_data(data, mesh, shard_features=True)
    step = data_parallel_step_fn(model, tx, (3, 2), mesh, sampler=sampler, sharded_rows=122)
    got = jax.jit(step)(states, sharded, batch)
    moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), got.params, states.params)
    assert max(jax.tree.leaves(moved)) > 1e-3  # the step did something
    for a, b in zip(
        jax.tree.leaves((got.params, got.opt_state)),
        jax.tree.leaves((want.params, want.opt_state)),
        strict=True,
    ):
        if fast_compile() and jnp.issubdtype(a.dtype, jnp.floating):
            # XLA's older emitters may round the two programs apart (2 ULP seen).
            np.testing.assert_array_max_ulp(a, b, maxulp=4)
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_training_with_sharded_features_equals_one_device_and_replicated(data):
    # Exact samples (fanout >= max degree) and no dropout: four devices must
    # reproduce one device, at test_data_parallel's tolerance. (Here each
    # device's tree is longer than N, so the replicated model projects all
    # N rows before gathering and the sharded one gathers first: equal to
    # float32 rounding, not bitwise.)
    fanout = int(np.diff(np.asarray(data.graph.indptr)).max())
    config = TrainConfig(epochs=4, epochs_per_call=2, patience=None, timing_steps=0)
    minibatch = MinibatchConfig((fanout, fanout), 16)
    model = sg.sage(8, 2, hidden=8, dropout_rate=0.0)
    one = sg.fit_minibatch(model, data, config, minibatch, seeds=SEEDS)
    replicated = fit_data_parallel(model, data, config, minibatch, devices=4, seeds=SEEDS)
    runs = []
    names = compiled_programs(
        lambda: runs.append(
            fit_data_parallel(
                model, data, config, minibatch, devices=4, seeds=SEEDS, shard_features=True
            )
        )
    )
    sharded = runs[0]
    assert names.count("jit(epochs_of_one_seed)") == 1, names  # 2 calls, one compile
    for want in (one, replicated):
        for a, b in zip(
            jax.tree.leaves(sharded.state.params), jax.tree.leaves(want.state.params), strict=True
        ):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        # Evaluation (on the all-gathered features) gives the same metrics.
        np.testing.assert_allclose(sharded.history["val_acc"], want.history["val_acc"])
        np.testing.assert_allclose(sharded.test_acc, want.test_acc)


def test_each_device_holds_a_quarter_of_the_feature_bytes(data):
    mesh = make_mesh(4)
    n, f = 122, 8
    placed = place_data(data, mesh, shard_features=True)
    x = placed.features
    shards = x.addressable_shards
    assert len(shards) == 4 and len({s.device for s in shards}) == 4
    per_device = rows_per_device(n, 4) * f * 4  # ceil(N / 4) rows of F float32
    assert per_device == 31 * 8 * 4
    assert [s.data.nbytes for s in shards] == [per_device] * 4
    assert sum(s.data.nbytes for s in shards) == n * f * 4 + (4 * 31 - n) * f * 4
    replicated = place_data(data, mesh).features
    assert [s.data.nbytes for s in replicated.addressable_shards] == [n * f * 4] * 4


def test_sparse_features_are_refused(data):
    sparse = data._replace(features=sg.as_features(sp.eye(122, 8, format="csr"), 122))
    with pytest.raises(TypeError, match="shard_features=True needs dense features"):
        fit_data_parallel(sg.sage(8, 2), sparse, devices=2, shard_features=True)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "gcn", "--devices", "2"], "fanouts='none': gcn trains full batch"),
        (["--model", "sage", "--devices", "1"], "devices=1: one device has nothing to split"),
        (
            ["--model", "sage", "--devices", "2", "--features-on", "host"],
            "features_on='host': the features stay on the host",
        ),
        (
            ["--model", "sage", "--devices", "2", "--features-on", "mmap"],
            "features_on='mmap': the features stay on the host",
        ),
    ],
)
def test_cli_refuses_shard_features_where_it_cannot_apply(tmp_path, capsys, argv, message):
    root = tmp_path / "data"
    root.mkdir()
    base = ["train", "--dataset", "cora", "--root", str(root), "--shard-features", "--no-progress"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert "--shard-features" in err
    assert list(root.iterdir()) == []  # refused before any data is read


def test_cli_refuses_auto_streaming_to_one_device_of_several(monkeypatch, capsys):
    # As if the features took most of the RAM: "auto" resolves to "host",
    # which streams to one device; with --devices 2 that is refused, not done.
    monkeypatch.setattr("sparsegcn.experiment.build.host_memory_bytes", lambda: 1000)
    argv = ["train", "--model", "sage", "--epochs", "1", "--devices", "2", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "features_on='auto' resolves to 'host'" in err, err
    assert "devices=2 (--devices) spans 2; pass --shard-features" in err
    assert len(err.splitlines()) == 1


@pytest.mark.slow
def test_cli_trains_sage_with_sharded_features(tmp_path):
    out = tmp_path / "sage.json"
    argv = ["train", "--model", "sage", "--epochs", "2", "--seeds", "2", "--hidden", "8"]
    argv += ["--fanouts", "5,3", "--batch-size", "64", "--devices", "4", "--shard-features"]
    assert main([*argv, "--json", str(out), "--no-progress"]) == 0
    report = json.loads(out.read_text())
    assert report["parallelism"] == "data_parallel" and report["devices"] == 4
    assert report["config"]["shard_features"] is True and len(report["test_acc"]) == 2

"""Features off the device: the store, the threaded gather, and streamed training
against the on-device trainer (same seeds, same parameters)."""

import concurrent.futures
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import compiled_programs, two_communities

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.experiment import Experiment
from sparsegcn.sampling import sample_blocks
from sparsegcn.sampling.blocks import tree_entries
from sparsegcn.sampling.feature_store import (
    HostFeatureStore,
    choose_features_on,
    gather_rows,
    local_rows_bound,
    localize,
)
from sparsegcn.sampling.host import HostCSR, MappedBudget
from sparsegcn.train import MinibatchConfig, TrainConfig, make_optimizer, minibatch_data
from sparsegcn.train.minibatch import make_grad_fn, train_epoch
from sparsegcn.train.streamed import (
    HostSampler,
    fit_streamed,
    make_streamed_fns,
    train_epoch_streamed,
)

FANOUTS, BATCH = (3, 2), 4  # a tree of 4 * (1 + 3 + 6) = 40 entries < 120 nodes


@pytest.fixture(scope="module")
def data():
    return minibatch_data(two_communities())


def test_local_rows_bound_is_the_tree_size_capped_by_n_plus_one():
    assert local_rows_bound((3, 2), 4, 120) == 41
    assert local_rows_bound((25, 10), 512, 1000) == 1001
    assert local_rows_bound("2", 5, 10**6) == 16


def test_localize_renumbers_the_tree_to_its_sorted_distinct_ids(data):
    tree = sample_blocks(
        data.graph.indptr,
        data.graph.indices,
        jnp.arange(8, dtype=jnp.int32),
        (4, 3),
        key=jax.random.key(0),
    )
    local = jax.jit(localize, static_argnums=1)(tree, 105)
    entries = np.asarray(tree_entries(tree))
    distinct = np.unique(entries)
    rows, count = np.asarray(local.rows), int(local.num_distinct)
    assert count == distinct.size
    np.testing.assert_array_equal(rows[:count], distinct)
    assert (rows[count:] == 0).all() and rows.shape == (105,)
    for level, renumbered in zip(tree.nodes, local.sample.nodes, strict=True):
        assert renumbered.shape == level.shape
        np.testing.assert_array_equal(rows[np.asarray(renumbered)], np.asarray(level))
        assert int(np.asarray(renumbered).max()) < count


@pytest.mark.parametrize("on_disk", [False, True])
def test_threaded_gather_equals_numpy_fancy_indexing(tmp_path, on_disk):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 7)).astype(np.float32)
    if on_disk:
        np.save(tmp_path / "x.npy", x)
        x = np.load(tmp_path / "x.npy", mmap_mode="r")
    ids = np.unique(rng.integers(0, 1000, 600))
    out = np.full((700, 7), np.nan, np.float32)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        gather_rows(x, ids, out, pool=pool, chunk_rows=37)
    np.testing.assert_array_equal(out[: ids.size], np.asarray(x)[ids])
    assert np.isnan(out[ids.size :]).all()  # padding untouched
    with pytest.raises(ValueError, match=r"out must be \[>= 401"):
        gather_rows(x, np.arange(401), np.zeros((400, 7), np.float32))


def test_a_batch_on_the_device_keeps_its_rows_when_the_next_is_gathered():
    # On the CPU backend device_put may alias host memory: a reused staging
    # buffer would rewrite earlier batches (seen with the sizes below).
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    store = HostFeatureStore(x, 4, threads=2)
    batches = [store.gather(np.array([i % 10, (i + 1) % 10, 0, 0]), 2) for i in range(20)]
    store.close()
    for i, batch in enumerate(batches):
        np.testing.assert_array_equal(np.asarray(batch)[:2], x[[i % 10, (i + 1) % 10]])
    assert store.stats.rows == 40 and store.stats.bytes == 40 * 16 and store.stats.batches == 20


def test_auto_placement_follows_the_sizes_and_bad_values_fail():
    gb = 2**30
    pick = choose_features_on
    assert pick("auto", 1 * gb, on_disk=False, device_bytes=80 * gb, host_bytes=64 * gb) == "device"
    assert pick("auto", 57 * gb, on_disk=False, device_bytes=80 * gb, host_bytes=256 * gb) == "host"
    assert pick("auto", 57 * gb, on_disk=True, device_bytes=80 * gb, host_bytes=256 * gb) == "host"
    assert pick("auto", 57 * gb, on_disk=True, device_bytes=80 * gb, host_bytes=64 * gb) == "mmap"
    # a device without a memory limit (the CPU) is held to the host's RAM
    assert pick("auto", 8 * gb, on_disk=True, device_bytes=None, host_bytes=64 * gb) == "device"
    assert pick("host", 1, on_disk=False, device_bytes=None, host_bytes=gb) == "host"
    with pytest.raises(ValueError, match="'gpu'"):
        pick("gpu", 1, on_disk=False, device_bytes=None, host_bytes=gb)
    with pytest.raises(ValueError, match="needs an on-disk dataset"):
        pick("mmap", 1, on_disk=False, device_bytes=None, host_bytes=gb)
    with pytest.raises(ValueError, match=r"features_on must be one of .*'disk'"):
        Experiment(model="sage", fanouts="3,2", layers=2, features_on="disk")
    with pytest.raises(TypeError, match="dense"):
        HostFeatureStore(jnp.zeros((3, 2)), 4)


class PoisonedStore(HostFeatureStore):
    """Padding rows that a read would turn into NaN parameters."""

    def allocate(self):
        return np.full((self.num_rows, self.features.shape[1]), np.nan, self.features.dtype)


def _device_epochs(model, tx, data, key, epochs):
    params = model.init(jax.random.split(key)[0])
    opt_state = tx.init(params)
    epoch = jax.jit(
        lambda p, o, d, k: train_epoch(make_grad_fn(model, FANOUTS), tx, BATCH, p, o, d, k)
    )
    device = jax.device_put(data)
    for k in jax.random.split(key, epochs):
        params, opt_state, losses, _ = epoch(params, opt_state, device, k)
    return params, losses


def _streamed_epochs(fns, tx, model, data, key, epochs, store, host=None):
    params = model.init(jax.random.split(key)[0])
    opt_state = tx.init(params)
    device = jax.device_put(data._replace(features=None))
    for k in jax.random.split(key, epochs):
        params, opt_state, losses, _ = train_epoch_streamed(
            fns, store, BATCH, params, opt_state, device, k, host=host
        )
    store.close()
    return params, losses


def test_host_and_mmap_stores_train_to_the_device_stores_parameters_compiling_once(data, tmp_path):
    # Two epochs of 10 batches, dropout on (the masks must agree too); the
    # poisoned store's padding rows are NaN, so reading one would show.
    model = sg.sage(8, 2, hidden=8, dropout_rate=0.5)
    tx = make_optimizer(TrainConfig())
    key = jax.random.key(3)
    features = np.asarray(data.features)
    np.save(tmp_path / "x.npy", features)
    rows = local_rows_bound(FANOUTS, BATCH, features.shape[0])
    stores = {
        "host": HostFeatureStore(features, rows, threads=2),
        "mmap": HostFeatureStore(np.load(tmp_path / "x.npy", mmap_mode="r"), rows, threads=2),
        "poisoned": PoisonedStore(features, rows, threads=2),
    }
    expected, expected_losses = _device_epochs(model, tx, data, key, 2)
    fns = make_streamed_fns(model, tx, FANOUTS, rows)
    results: list = []
    names = compiled_programs(
        lambda: [
            results.append(_streamed_epochs(fns, tx, model, data, key, 2, store))
            for store in stores.values()
        ]
    )
    assert [store.kind for store in stores.values()] == ["host", "mmap", "host"]
    for (params, losses), store in zip(results, stores.values(), strict=True):
        assert store.stats.batches == 2 * 10 and 0 < store.stats.rows <= 20 * 40
        np.testing.assert_array_equal(losses, expected_losses)
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(expected), strict=True):
            np.testing.assert_array_equal(a, b)
    # 60 batches over three stores, one compilation of each program.
    for program in ("sample", "step"):
        assert names.count(f"jit({program})") == 1, names


def test_fit_streamed_learns_and_reports_the_gather(data):
    config = TrainConfig(epochs=15, patience=None)
    result = fit_streamed(
        sg.sage(8, 2, hidden=16),
        data._replace(features=np.asarray(data.features)),
        config,
        MinibatchConfig((5, 5), 16),
    )
    assert result.features_on == "host"
    assert result.test_acc[0] > 0.85 and result.val_acc[0] > 0.85
    assert result.history["loss"].shape == (15, 1)
    assert result.history["loss"][-1, 0] < result.history["loss"][0, 0]
    assert result.gather.rows > 0 and result.gather.gb_per_s > 0 and result.batches_per_s > 0
    assert 1 <= result.best_epoch[0] <= 15


def test_fit_streamed_selects_and_stops_by_the_monitor(data):
    # Before: the monitor was ignored, the sampled accuracy alone selected (no val_loss kept).
    # At this rate the validation loss turns up before the accuracy peaks.
    chosen = {}
    for monitor in ("val_acc", "val_loss"):
        result = fit_streamed(
            sg.sage(8, 2, hidden=16),
            data._replace(features=np.asarray(data.features)),
            TrainConfig(epochs=20, patience=3, monitor=monitor, learning_rate=0.2),
            MinibatchConfig((5, 5), 16),
        )
        acc, loss = result.history["val_acc"][:, 0], result.history["val_loss"][:, 0]
        assert np.isfinite(loss).all()
        # TrainConfig.monitor: the lowest loss, or the highest accuracy and then the
        # lowest loss; the first such epoch.
        if monitor == "val_loss":
            best = min(range(len(loss)), key=lambda e: (loss[e], e))
        else:
            best = min(range(len(loss)), key=lambda e: (-acc[e], loss[e], e))
        assert result.best_epoch[0] == best + 1
        assert result.val_acc[0] == pytest.approx(acc[best])
        assert len(loss) == min(20, best + 1 + 3)  # patience counts epochs since the best
        chosen[monitor] = best
    assert chosen["val_acc"] != chosen["val_loss"]


def test_experiment_refuses_what_streamed_features_do_not_support():
    sage = {"model": "sage", "fanouts": "3,2", "layers": 2}
    for bad, match in [
        ({"seeds": 2}, "seeds=2"),
        ({"checkpoint": "ckpt"}, "checkpoint='ckpt'"),
        ({"features_on": "mmap", "reorder": "rcm"}, "reorder='rcm'"),
    ]:
        with pytest.raises(ValueError, match=match):
            Experiment(**{"features_on": "host", **sage, **bad})
    with pytest.raises(ValueError, match="fanouts='none'"):
        Experiment(model="gcn", features_on="host")
    assert Experiment(model="sage", features_on="device").features_on == "device"


@pytest.mark.slow
@pytest.mark.parametrize("where", ["host", "mmap"])
def test_cli_trains_with_features_off_the_device_and_reports_the_gather(tmp_path, where):
    dataset = "synthetic:tiny"
    if where == "mmap":
        from sparsegcn.datasets import load
        from sparsegcn.datasets.ondisk import save

        dataset = str(save(load("synthetic:tiny"), tmp_path / "tiny"))
    out = tmp_path / "report.json"
    argv = ["train", "--dataset", dataset, "--model", "sage", "--epochs", "3", "--hidden", "8"]
    argv += ["--fanouts", "5,3", "--batch-size", "64", "--features-on", where]
    argv += ["--normalize-features", "none", "--json", str(out), "--no-progress"]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["features_on"] == where and report["evaluation"] == "sampled"
    assert report["host_gather_rows_per_s"] > 0 and report["host_gather_gb_per_s"] > 0
    assert report["batches_per_s"] > 0 and 0 <= report["test_acc_mean"] <= 1
    assert report["config"]["features_on"] == where


def test_cli_names_a_bad_placement_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--model", "sage", "--fanouts", "3,2", "--features-on", "gpu"])
    assert exit_info.value.code == 2
    assert "'gpu'" in capsys.readouterr().err


def test_fit_streamed_names_the_epoch_whose_loss_is_not_finite(data):
    features = np.asarray(data.features).copy()
    features[:] = np.inf
    with pytest.raises(sg.train.DivergenceError) as err:
        fit_streamed(
            sg.sage(8, 2, hidden=8),
            data._replace(features=features),
            TrainConfig(epochs=3, patience=None),
            MinibatchConfig((3, 2), 16),
            seed=5,
        )
    assert err.value.epoch == 1 and err.value.seed == 5


class _GarbageNumpy:
    """NumPy whose ``empty`` returns NaN: what uninitialised float16 memory may hold."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float, **kwargs):
        return np.full(shape, np.nan, dtype)


def test_staging_padding_is_zero_so_a_graph_smaller_than_its_tree_trains_finite(
    tmp_path, monkeypatch
):
    # 30 nodes, a tree of 8 * (1 + 3 + 6) = 80 entries: U_max = N + 1 = 31 <= 80,
    # so the first layer projects every staging row, padding included.
    from sparsegcn.sampling import feature_store

    monkeypatch.setattr(feature_store, "np", _GarbageNumpy())
    small = minibatch_data(two_communities(n=30, train=10))
    np.save(tmp_path / "x.npy", np.asarray(small.features).astype(np.float16))
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert local_rows_bound(FANOUTS, 8, 30) == 31
    store = HostFeatureStore(mapped, 31, threads=1)
    assert not store.allocate().any()
    store.close()
    result = fit_streamed(
        sg.sage(8, 2, hidden=8),
        small._replace(features=mapped),
        TrainConfig(epochs=3, patience=None),
        MinibatchConfig(FANOUTS, 8),
    )
    assert result.features_on == "mmap"
    assert np.isfinite(result.history["loss"]).all()
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(result.params))


def _host_csr(data, tmp_path=None):
    indptr, indices = np.asarray(data.graph.indptr), np.asarray(data.graph.indices)
    if tmp_path is not None:  # the neighbour ids memory-mapped, as from an on-disk dataset
        np.save(tmp_path / "indices.npy", indices)
        indices = np.load(tmp_path / "indices.npy", mmap_mode="r")
    return HostCSR.from_arrays(indptr, indices)


def test_host_sampling_trains_to_the_device_parameters_compiling_only_the_step(data, tmp_path):
    # The host sampler draws the device's trees, so two epochs with dropout
    # end on the on-device trainer's parameters; nothing but the step (and
    # the epoch's key bookkeeping) compiles, and a later epoch compiles nothing.
    model = sg.sage(8, 2, hidden=8, dropout_rate=0.5)
    tx = make_optimizer(TrainConfig())
    key = jax.random.key(3)
    features = np.asarray(data.features)
    rows = local_rows_bound(FANOUTS, BATCH, features.shape[0])
    expected, expected_losses = _device_epochs(model, tx, data, key, 2)
    fns = make_streamed_fns(model, tx, FANOUTS, rows)
    store = HostFeatureStore(features, rows, threads=2)
    host = HostSampler(_host_csr(data, tmp_path), FANOUTS, rows, MappedBudget([]), store.pool)
    hosted = data._replace(graph=None)
    results: list = []
    names = compiled_programs(
        lambda: results.append(_streamed_epochs(fns, tx, model, hosted, key, 2, store, host))
    )
    params, losses = results[0]
    np.testing.assert_array_equal(losses, expected_losses)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(a, b)
    assert names.count("jit(step)") == 1 and "jit(sample)" not in names, names
    assert host.batches == 20 and host.ms_per_batch > 0
    store = HostFeatureStore(features, rows, threads=2)
    host = dataclasses.replace(host, pool=store.pool)
    again = compiled_programs(lambda: _streamed_epochs(fns, tx, model, hosted, key, 2, store, host))
    assert again == [], again


def test_fit_streamed_learns_with_the_graph_on_the_host_and_reports_it(data, tmp_path):
    result = fit_streamed(
        sg.sage(8, 2, hidden=16),
        data._replace(features=np.asarray(data.features), graph=None),
        TrainConfig(epochs=15, patience=None),
        MinibatchConfig((5, 5), 16),
        host_csr=_host_csr(data, tmp_path),
    )
    assert result.graph_on == "host" and result.features_on == "host"
    assert np.isfinite(result.history["loss"]).all()
    assert result.history["loss"][-1, 0] < result.history["loss"][0, 0]
    assert result.test_acc[0] > 0.85 and result.val_acc[0] > 0.85
    assert result.steps_per_epoch == 3 and result.batches_run == 45
    assert result.host_sample_ms_per_batch > 0 and result.projected_epoch_s > 0
    assert result.train_s > 0


def test_max_batches_cuts_every_epoch_and_the_evaluation(data):
    result = fit_streamed(
        sg.sage(8, 2, hidden=8),
        data._replace(features=np.asarray(data.features)),
        TrainConfig(epochs=2, patience=None),
        MinibatchConfig((3, 2), 8),
        max_batches=2,
    )
    assert result.graph_on == "device" and result.steps_per_epoch == 5
    # 2 training batches an epoch (2 of the 30 validation nodes' 4 batches are scored too,
    # and gathered, but `gather` counts the training batches alone, as documented)
    assert result.batches_run == 4 and result.gather.batches == 4
    assert np.isfinite(result.projected_epoch_s) and result.projected_epoch_s > 0
    with pytest.raises(ValueError, match="max_batches must be an int >= 1 or None, got 0"):
        fit_streamed(
            sg.sage(8, 2), data._replace(features=np.asarray(data.features)), max_batches=0
        )

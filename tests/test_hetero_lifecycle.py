"""The hetero task over several devices (data parallel) and with checkpoints and resume."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax
import pytest
from hetero_graphs import hetero_data, tiny_spec

from sparsegcn.cli import main
from sparsegcn.datasets.mag import generate_mag, write_mag_raw
from sparsegcn.experiment import Experiment, run_experiment
from sparsegcn.nn.rgcn import rgcn
from sparsegcn.tasks.hetero import CURVES, HeteroLifecycle, fit_hetero
from sparsegcn.train.checkpoint import CheckpointError, list_checkpoints, read_manifest


# The dedup case costs ~17 s of compilation: slow; the tree case stays in the default suite.
@pytest.mark.parametrize("sampler", ["tree", pytest.param("dedup", marks=pytest.mark.slow)])
def test_two_devices_equal_one(sampler):
    """A batch of 64 papers split 32 + 32 over two devices: the same papers, samples
    and dropout masks, the gradient of the global batch; only rounding differs."""
    data = hetero_data(tiny_spec())
    model = rgcn(
        data.graph.num_nodes, data.graph.edge_types, {"paper": 8}, 4, target="paper", hidden=8
    )
    kwargs = dict(fanouts=(4, 3), batch_size=64, epochs=2, seed=3, sampler=sampler)
    one = fit_hetero(model, data, optax.adam(0.02), **kwargs)
    two = fit_hetero(model, data, optax.adam(0.02), devices=2, **kwargs)
    assert (one.devices, two.devices, one.batches, two.batches) == (1, 2, 4, 4)
    np.testing.assert_allclose(two.losses, one.losses, rtol=1e-5)
    assert two.val_accs == one.val_accs and two.test_accs == one.test_accs
    np.testing.assert_array_equal(two.test_classes, one.test_classes)
    for a, b in zip(
        jax.tree.leaves(one.state.params), jax.tree.leaves(two.state.params), strict=True
    ):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)
    # The params, the embedding tables among them, stay whole on both devices.
    author = two.state.params["embeddings"]["author"]
    assert len(author.sharding.device_set) == 2 and author.sharding.is_fully_replicated


def test_too_many_devices_are_refused_before_the_data_is_read(tmp_path, capsys):
    argv = ["train", "--dataset", "ogbn-mag", "--root", str(tmp_path), "--model", "rgcn"]
    assert main([*argv, "--devices", "64", "--no-progress"]) == 2
    err = capsys.readouterr().err
    seen = jax.local_device_count()
    assert f"devices=64 (--devices) asks for 64 local devices but this process sees {seen}" in err
    assert list(tmp_path.iterdir()) == []


class Crash(Exception):
    pass


def test_resumed_run_equals_the_uninterrupted_one(tmp_path, monkeypatch, capsys):
    """Two seeds in turn, a checkpoint every epoch; a run killed in seed 1's first
    epoch resumes (seed 0 restored finished, seed 1 from its state) to the end state
    of the uninterrupted run, bit for bit."""
    write_mag_raw(generate_mag(tiny_spec(), seed=1), tmp_path / "ogbn_mag")
    exp = Experiment(
        dataset="ogbn-mag",
        root=str(tmp_path),
        model="rgcn",
        fanouts="4,3",
        batch_size=64,
        epochs=2,
        hidden=8,
        seeds=2,
        checkpoint=str(tmp_path / "full"),
        checkpoint_every=1,
    )
    full = run_experiment(exp)

    # Seed 1 stops after its first epoch's checkpoint: the folder keeps seed 0 finished.
    record = HeteroLifecycle.on_epoch

    def crash_in_seed_1(self, k):
        inner = record(self, k)

        def on_epoch(state, curves):
            inner(state, curves)
            if k == 1:
                raise Crash

        return on_epoch

    monkeypatch.setattr(HeteroLifecycle, "on_epoch", crash_in_seed_1)
    folder = str(tmp_path / "killed")
    with pytest.raises(Crash):
        run_experiment(dataclasses.replace(exp, checkpoint=folder))
    monkeypatch.undo()
    manifest = read_manifest(folder)
    assert (manifest["epoch"], manifest["seed_epochs"]) == (2, [2, 1])

    # The run resumes in its own folder (the lock was released on the crash).
    resumed = run_experiment(dataclasses.replace(exp, checkpoint=folder, resume=folder))
    assert resumed["resumed_epoch"] == 2 and resumed["resumed_from"] == manifest["path"]
    for key in ("test_acc", "val_acc_mean", "best_epoch", "train_loss"):
        assert resumed[key] == full[key], key
    ends = [read_manifest(tmp_path / name) for name in ("full", "killed")]
    assert ends[0]["seed_epochs"] == ends[1]["seed_epochs"] == [2, 2]
    arrays = [
        np.load(tmp_path / n / m["arrays"]) for n, m in zip(("full", "killed"), ends, strict=True)
    ]
    names = [k for k in arrays[0].files if not k.startswith("history/")]
    assert len(names) > 20 and names == [k for k in arrays[1].files if not k.startswith("history/")]
    for name in names:  # params, Adam's state, key, best params, every record
        np.testing.assert_array_equal(arrays[1][name], arrays[0][name], err_msg=name)
    for curve in CURVES[:3]:  # the curves but the timings
        np.testing.assert_array_equal(arrays[1][f"history/{curve}"], arrays[0][f"history/{curve}"])

    # The folder belongs to its run: a new run may not write there, nor resume
    # with other settings.
    argv = ["train", "--dataset", "ogbn-mag", "--root", str(tmp_path), "--model", "rgcn"]
    argv += ["--fanouts", "4,3", "--epochs", "1", "--no-progress", "--checkpoint", folder]
    assert main(argv) == 2
    assert "another run" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match=r"metadata\.config\.hidden is 8 in the checkpoint"):
        run_experiment(dataclasses.replace(exp, hidden=16, resume=folder))
    with pytest.raises(CheckpointError, match=r"metadata\.config\.epochs is 2 in the checkpoint"):
        run_experiment(dataclasses.replace(exp, epochs=3, resume=folder))
    assert [p.name for p in list_checkpoints(folder)] == ["ckpt-000001.json", "ckpt-000002.json"]
    predict = ["predict", "--checkpoint", folder, "--out", str(tmp_path / "p.npy")]
    assert main(predict) == 2
    assert "heterogeneous (R-GCN) checkpoint, which sparsegcn predict does not read" in (
        capsys.readouterr().err
    )

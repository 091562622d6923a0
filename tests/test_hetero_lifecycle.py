"""The hetero task over several devices (data parallel) and with checkpoints and resume."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import optax
import pytest
from hetero_graphs import hetero_data, tiny_spec

from sparsegcn.cli import main
from sparsegcn.datasets.mag import generate_mag, write_mag_raw
from sparsegcn.experiment import Experiment, run_experiment
from sparsegcn.nn.rgcn import rgcn
from sparsegcn.tasks.hetero import (
    CURVES,
    HeteroLifecycle,
    build_model,
    checkpoint_template,
    fit_hetero,
    prepare_hetero,
)
from sparsegcn.train.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    read_manifest,
)
from sparsegcn.train.optim import make_optimizer


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


def test_outputs_into_ogbn_mags_folder_are_refused_and_its_files_kept(tmp_path, capsys):
    # ogbn-mag is read from <root>/ogbn_mag: a report or checkpoint inside it would
    # replace (or sit among) its raw and split files.
    folder = write_mag_raw(generate_mag(tiny_spec(), seed=1), tmp_path / "ogbn_mag")
    split = folder / "split" / "time" / "paper" / "train.csv.gz"
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    data = ["--dataset", "ogbn-mag", "--root", str(tmp_path)]
    assert main(["info", *data, "--json", str(split)]) == 2
    assert f"--json {split} would overwrite the dataset {folder}" in capsys.readouterr().err
    train = ["train", *data, "--model", "rgcn", "--epochs", "1", "--no-progress"]
    assert main([*train, "--checkpoint", str(folder / "split" / "time" / "paper")]) == 2
    assert "would overwrite the dataset" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


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


def test_predict_scores_every_paper_as_the_full_graph_and_training_did(tmp_path, capsys):
    """With fanouts covering every neighbour the sampled neighbourhoods are whole:
    predict's classes and embeddings are the full-graph R-GCN's with the checkpoint's
    best params, and its test accuracy is the one training reported for the seed
    trained last."""
    # A quarter of tiny_spec's edges over more institutions and topics: whole
    # neighbourhoods stay small (degrees <= 20).
    base = tiny_spec()
    spec = tiny_spec(
        num_nodes={**base.num_nodes, "institution": 300, "field_of_study": 200},
        num_edges={k: n // 4 for k, n in base.num_edges.items()},
    )
    write_mag_raw(generate_mag(spec, seed=2), tmp_path / "ogbn_mag")
    exp = Experiment(dataset="ogbn-mag", root=str(tmp_path), model="rgcn", hidden=8, seeds=2)
    data = prepare_hetero(exp)
    full = max(int(np.diff(np.asarray(p)).max()) for p in data.csr.indptr)
    assert full <= 20
    folder = str(tmp_path / "run")
    exp = dataclasses.replace(
        exp, fanouts=f"{full},{full}", batch_size=64, epochs=3, checkpoint=folder
    )
    report = run_experiment(exp)
    out, emb, summary = (str(tmp_path / n) for n in ("p.npy", "e.npy", "p.json"))
    argv = ["predict", "--checkpoint", folder, "--out", out, "--embeddings", emb]
    assert main([*argv, "--json", summary]) == 0
    assert "400 paper nodes, 1 member(s)" in capsys.readouterr().out
    classes, embeddings = np.load(out), np.load(emb)
    assert classes.dtype == np.int32 and classes.shape == (400,)
    assert embeddings.dtype == np.float32 and embeddings.shape == (400, 8)
    with open(summary) as f:
        written = json.load(f)
    assert written["seeds"] == [1] and written["test_acc"] == written["reported_test_acc"]
    assert written["test_acc"] == [report["test_acc"][1]]

    # The reference: the full graph, every neighbour, the seed's best params.
    model = build_model(exp, data)
    tx = make_optimizer(exp.train_config())
    template = checkpoint_template(model, tx, 2, len(data.dataset.split["test"]))
    params = load_checkpoint(folder, template).state.current.best_params
    logits, hidden = model.apply(params, data.graph, data.features, embed=True)
    np.testing.assert_array_equal(classes, np.argmax(np.asarray(logits), axis=1))
    np.testing.assert_allclose(embeddings, np.asarray(hidden), rtol=1e-5, atol=1e-6)
    assert main([*argv[:-2], "--params", "last"]) == 0


def test_write_mag_raw_leaves_nothing_when_it_fails(tmp_path, monkeypatch):
    # Before: an error (or Ctrl-C) part way left its .ogbn_mag.tmp-... folder behind,
    # for good inside a long-lived process (a notebook: its pid stays alive).
    from sparsegcn.datasets import mag as mag_module

    dataset = generate_mag(tiny_spec(), seed=1)
    calls = []
    real_write = mag_module._write_csv

    def write_then_fail(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(mag_module, "_write_csv", write_then_fail)
    with pytest.raises(OSError, match="No space left"):
        write_mag_raw(dataset, tmp_path / "new" / "ogbn_mag")
    assert sorted(tmp_path.iterdir()) == []  # neither the temporary folder nor new/
    monkeypatch.setattr(mag_module, "_write_csv", real_write)
    (tmp_path / "ogbn_mag").mkdir()  # made while it wrote: not replaced, even empty
    with pytest.raises(FileExistsError):
        write_mag_raw(dataset, tmp_path / "ogbn_mag")

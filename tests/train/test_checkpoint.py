"""Checkpoints: exact resume, round trips, atomic writes, and refusing bad checkpoints."""

import dataclasses
import hashlib
import json
import os

import jax
import numpy as np
import pytest

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.datasets import Dataset, load
from sparsegcn.experiment import Experiment, checkpoint_metadata, node_data, restore_checkpoint
from sparsegcn.experiment import build_model as build_experiment_model
from sparsegcn.files import write_atomic
from sparsegcn.train import (
    CheckpointError,
    CheckpointHook,
    TrainConfig,
    init_state,
    latest_checkpoint,
    load_checkpoint,
    make_optimizer,
    resume_state,
    save_checkpoint,
    state_template,
)
from sparsegcn.train.checkpoint import (
    check_checkpoint_folder,
    dataset_fingerprint,
    list_checkpoints,
)

SEEDS = [0, 1]
# patience makes early-stopping state (bad_epochs, best, done) part of what must resume.
CONFIG = TrainConfig(epochs=200, patience=40, epochs_per_call=10, timing_steps=0)


@pytest.fixture(scope="module")
def dataset():
    return load("synthetic:tiny", scale=0.1)


@pytest.fixture(scope="module")
def data(dataset):
    return node_data(dataset)


def make_model(dataset, hidden=8):
    return sg.gcn(dataset.num_features, dataset.num_classes, hidden=hidden)


def template_for(model, config, num_seeds):
    tx = make_optimizer(config)
    return state_template(lambda k: init_state(model, tx, k), num_seeds)


@pytest.fixture(scope="module")
def run(dataset, data, tmp_path_factory):
    """An uninterrupted 200-epoch run that checkpoints every 50 epochs."""
    folder = tmp_path_factory.mktemp("ckpt")
    hook = CheckpointHook(folder, seeds=SEEDS, every=50, keep=None, metadata={"run": "a"})
    result = sg.fit(make_model(dataset), data, CONFIG, seeds=SEEDS, on_chunk=hook)
    return folder, hook, result


def leaves_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_resume_from_epoch_50_equals_the_uninterrupted_run(dataset, data, run):
    folder, hook, full = run
    epochs = [json.loads(p.read_text())["epoch"] for p in hook.saved]
    last = int(np.asarray(full.state.epoch).max())
    assert epochs[:1] == [50] and epochs[-1] == last  # every 50 epochs, and at the end
    model = make_model(dataset)
    ckpt = load_checkpoint(folder / "ckpt-000050.json", template_for(model, CONFIG, 2), seeds=SEEDS)
    assert ckpt.epoch == 50 and ckpt.history["loss"].shape == (50, 2)
    resumed = sg.fit(model, data, CONFIG, seeds=SEEDS, state=ckpt.state, history=ckpt.history)
    # Bitwise: params, Adam moments and step counts, PRNG keys, best params and
    # early-stopping counters all continue exactly.
    leaves_equal(resumed.state, full.state)
    assert set(resumed.history) == set(full.history)
    for name in full.history:
        np.testing.assert_array_equal(resumed.history[name], full.history[name])
    np.testing.assert_array_equal(resumed.test_acc, full.test_acc)


def test_a_finished_run_can_be_extended(run):
    """A 50-epoch run's final state, resumed with epochs=200, continues like the
    uninterrupted run (its ``done`` flags are recomputed for the new budget)."""
    folder, _, full = run
    state = load_checkpoint(folder / "ckpt-000050.json", full.state).state
    finished = state._replace(done=np.ones_like(np.asarray(state.done)))
    extended = resume_state(finished, CONFIG)
    np.testing.assert_array_equal(np.asarray(extended.done), np.asarray(state.done))
    stopped = resume_state(finished, TrainConfig(epochs=50, patience=40))
    assert np.asarray(stopped.done).all()


def test_round_trip_restores_every_leaf_keys_history_and_metadata(run, dataset, tmp_path):
    _, _, full = run
    path = save_checkpoint(
        tmp_path, full.state, seeds=SEEDS, history=full.history, metadata={"note": [1, "x"]}
    )
    ckpt = load_checkpoint(tmp_path, template_for(make_model(dataset), CONFIG, 2))
    assert ckpt.path == path and ckpt.seeds == (0, 1) and ckpt.metadata == {"note": [1, "x"]}
    assert ckpt.state.key.dtype == full.state.key.dtype  # a typed PRNG key again
    leaves_equal(ckpt.state, full.state)
    for name, values in full.history.items():
        np.testing.assert_array_equal(ckpt.history[name], values)
        assert ckpt.history[name].dtype == values.dtype


def test_manifest_describes_the_format(run):
    folder, _, _ = run
    manifest = json.loads((folder / "ckpt-000050.json").read_text())
    assert manifest["format"] == "sparsegcn.checkpoint" and manifest["format_version"] == 1
    assert manifest["seeds"] == SEEDS and manifest["epoch"] == 50
    paths = [leaf["path"] for leaf in manifest["leaves"]]
    assert ".params['layers'][0]['w']" in paths and ".key" in paths
    key = manifest["leaves"][paths.index(".key")]
    assert key["prng_impl"] == "threefry2x32" and key["stored_shape"] == [2, 2]
    w = manifest["leaves"][paths.index(".params['layers'][0]['w']")]
    assert w["shape"] == [2, 64, 8] and w["dtype"] == "float32"
    with np.load(folder / manifest["arrays"], allow_pickle=False) as npz:
        assert npz[w["name"]].shape == (2, 64, 8)


def test_keep_prunes_old_checkpoints_and_their_arrays_only(run, tmp_path):
    _, _, full = run
    # Named like checkpoint files, but no manifest of this run lists them: kept.
    (tmp_path / "ckpt-000001-0123456789ab.npz").write_bytes(b"a user's file")
    (tmp_path / "notes.txt").write_text("not ours")
    (tmp_path / ".ckpt-000002.json.abcd1234.tmp").write_bytes(b"write_atomic's, stale")
    for epoch in (10, 20, 30, 40):
        state = full.state._replace(epoch=np.full(2, epoch, np.int32))
        save_checkpoint(tmp_path, state, seeds=SEEDS, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-000030.json", "ckpt-000040.json"]
    names = sorted(p.name for p in tmp_path.iterdir())
    listed = {json.loads(p.read_text())["arrays"] for p in list_checkpoints(tmp_path)}
    assert {n for n in names if n.endswith(".npz")} == listed | {"ckpt-000001-0123456789ab.npz"}
    assert (tmp_path / "ckpt-000001-0123456789ab.npz").read_bytes() == b"a user's file"
    assert "notes.txt" in names and not any(n.endswith(".tmp") for n in names)
    assert latest_checkpoint(tmp_path).name == "ckpt-000040.json"


def test_arrays_a_killed_save_left_without_a_manifest_are_pruned_next_time(run, tmp_path):
    from sparsegcn.train.checkpoint import FolderLock, _record_pending

    _, _, full = run
    save_checkpoint(tmp_path, full.state, seeds=SEEDS, keep=1)
    # A writer killed between its arrays file and its manifest: the arrays
    # file is recorded in the lock file first, so the next prune knows it. It
    # is complete (renamed into place whole), so its name records its digest.
    orphan = f"ckpt-000099-{hashlib.sha256(b'arrays').hexdigest()[:12]}.npz"
    lock = FolderLock(tmp_path).acquire()
    _record_pending(tmp_path, orphan)
    (tmp_path / orphan).write_bytes(b"arrays")
    lock.release()  # no prune ran, as after kill -9
    state = full.state._replace(epoch=np.full(2, 300, np.int32))
    save_checkpoint(tmp_path, state, seeds=SEEDS, keep=1)
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".npz"))
    assert names == [json.loads(latest_checkpoint(tmp_path).read_text())["arrays"]]


def test_overwrite_deletes_only_checkpoints_and_refuses_lookalikes(run, dataset, tmp_path):
    _, _, full = run
    save_checkpoint(tmp_path, full.state, seeds=SEEDS, run_id="other")
    (tmp_path / "ckpt-000007.json").write_text('{"my": "data"}')
    for overwrite in (True, False):  # before, without: "pass --overwrite", which then refused
        with pytest.raises(CheckpointError, match=r"ckpt-000007.json, which is named like a"):
            CheckpointHook(tmp_path, seeds=SEEDS, overwrite=overwrite)
    assert (tmp_path / "ckpt-000007.json").read_text() == '{"my": "data"}'
    (tmp_path / "ckpt-000007.json").unlink()
    before = sorted(p.name for p in tmp_path.iterdir())
    CheckpointHook(tmp_path, seeds=SEEDS, overwrite=True).close()  # ended before saving
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({*before, ".lock"})
    hook = CheckpointHook(tmp_path, seeds=SEEDS, overwrite=True)
    path = hook.save(full.state, full.history)  # the other run's epoch, by name
    hook.close()
    assert list_checkpoints(tmp_path) == [path]
    assert json.loads(path.read_text())["run_id"] == hook.run_id
    assert len(list(tmp_path.glob("*.npz"))) == 1


def test_checkpoints_replaced_go_only_once_the_run_has_written_one(run, dataset, tmp_path):
    # --overwrite used to delete the other run's checkpoints when the run started, so a
    # run that failed or was killed before its first checkpoint left none. And a run
    # resumed from an older checkpoint into its own folder counted that run's later
    # checkpoints as its own: pruning (keep) deleted its new ones, the old branch's
    # newest stayed the folder's newest.
    folder, _, full = run
    template = template_for(make_model(dataset), CONFIG, 2)
    early, mid = (
        load_checkpoint(folder / f"ckpt-{e:06d}.json", template, seeds=SEEDS) for e in (50, 100)
    )
    for ckpt in (early, mid, full):
        save_checkpoint(tmp_path, ckpt.state, seeds=SEEDS, history=ckpt.history, run_id="r")
    names = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(CheckpointError, match=r"resumed run after its epoch 50 \(newest ckpt-0001"):
        CheckpointHook(tmp_path, seeds=SEEDS, start_epoch=50, run_id="r")
    with pytest.raises(CheckpointError, match=r"resumed run after its epoch 50"):
        check_checkpoint_folder(tmp_path, run_ids=("r",), after_epoch=50)
    check_checkpoint_folder(tmp_path, run_ids=("r",), after_epoch=int(full.state.epoch.max()))
    CheckpointHook(tmp_path, seeds=SEEDS, start_epoch=50, run_id="r", overwrite=True).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # nothing written, nothing lost
    hook = CheckpointHook(tmp_path, seeds=SEEDS, start_epoch=50, run_id="r", overwrite=True, keep=1)
    path = hook.save(mid.state, mid.history)  # epoch 100 again, on the new branch
    hook.close()
    assert list_checkpoints(tmp_path) == [path] and path.name == "ckpt-000100.json"
    assert len(list(tmp_path.glob("*.npz"))) == 1


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def failing(f):
        f.write(b"partial new content")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, failing)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    write_atomic(target, lambda f: f.write(b"new"))
    assert target.read_bytes() == b"new"
    assert os.stat(target).st_mode & 0o044  # readable by others, like a plain open()


@pytest.fixture
def saved(run, tmp_path):
    _, _, full = run
    save_checkpoint(tmp_path, full.state, seeds=SEEDS, history=full.history, metadata={"a": 1})
    manifest_path = latest_checkpoint(tmp_path)
    arrays_path = tmp_path / json.loads(manifest_path.read_text())["arrays"]
    return tmp_path, manifest_path, arrays_path, full


def test_truncated_arrays_are_refused(saved):
    folder, _, arrays, full = saved
    arrays.write_bytes(arrays.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(folder, full.state)


def test_corrupted_arrays_are_refused(saved):
    folder, _, arrays, full = saved
    payload = bytearray(arrays.read_bytes())
    payload[len(payload) // 2] ^= 0xFF
    arrays.write_bytes(bytes(payload))
    with pytest.raises(CheckpointError, match="corrupt: sha256"):
        load_checkpoint(folder, full.state)


def test_missing_arrays_are_refused(saved):
    folder, _, arrays, full = saved
    arrays.unlink()
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(folder, full.state)


def test_unreadable_and_foreign_manifests_are_refused(saved, tmp_path_factory):
    folder, manifest_path, _, full = saved
    text = manifest_path.read_text()
    manifest_path.write_text(text[: len(text) // 2])
    with pytest.raises(CheckpointError, match="not a readable checkpoint manifest"):
        load_checkpoint(folder, full.state)
    manifest = json.loads(text)
    manifest_path.write_text(json.dumps(dict(manifest, format_version=99)))
    with pytest.raises(CheckpointError, match="format version 99; this sparsegcn reads version 1"):
        load_checkpoint(folder, full.state)
    manifest_path.write_text(json.dumps(dict(manifest, arrays="../elsewhere.npz")))
    with pytest.raises(CheckpointError, match="outside its folder"):
        load_checkpoint(folder, full.state)
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        load_checkpoint(empty, full.state)


def test_another_model_shape_is_refused(saved, dataset):
    folder, *_ = saved
    wider = template_for(make_model(dataset, hidden=16), CONFIG, 2)
    with pytest.raises(
        CheckpointError,
        match=r"state leaf \.params\['layers'\]\[0\]\['b'\] has shape \[2, 8\] in the "
        r"checkpoint but \[2, 16\] in this run",
    ):
        load_checkpoint(folder, wider)


def test_another_optimizer_structure_is_refused(saved, dataset):
    folder, *_ = saved
    clipped = template_for(make_model(dataset), TrainConfig(clip_norm=1.0), 2)
    with pytest.raises(
        CheckpointError, match=r"state leaf \.opt_state\.inner_state\[2\]\[0\]\.count has path"
    ):
        load_checkpoint(folder, clipped)


def test_another_seed_count_is_refused(saved, dataset):
    folder, *_ = saved
    with pytest.raises(CheckpointError, match=r"holds seeds \[0, 1\] \(2 seeds\) but this run"):
        load_checkpoint(folder, template_for(make_model(dataset), CONFIG, 1), seeds=[0])
    with pytest.raises(CheckpointError, match=r"has shape \[2, 8\] in the checkpoint but \[3, 8\]"):
        load_checkpoint(folder, template_for(make_model(dataset), CONFIG, 3))


def test_expected_metadata_must_match(saved, dataset):
    folder, _, _, full = saved
    with pytest.raises(CheckpointError, match=r"metadata\.a is 1 in the checkpoint but 2"):
        load_checkpoint(folder, full.state, expect={"a": 2})
    with pytest.raises(CheckpointError, match=r"records no 'metadata\.b'"):
        load_checkpoint(folder, full.state, expect={"b": 1})
    # Another dataset (task) is named before the seeds it trained, which differ too.
    one_seed = template_for(make_model(dataset), CONFIG, 1)
    with pytest.raises(CheckpointError, match=r"metadata\.a is 1 in the checkpoint but 2"):
        load_checkpoint(folder, one_seed, seeds=[0], expect={"a": 2})
    # Both sides as JSON holds them: a tuple shows as the list it would be stored as.
    with pytest.raises(CheckpointError, match=r"is 1 in the checkpoint but \[\['k', 2\]\] in"):
        load_checkpoint(folder, full.state, expect={"a": (("k", 2),)})


@pytest.fixture(scope="module")
def experiment_checkpoint(dataset, tmp_path_factory):
    """A checkpoint as ``sparsegcn train --checkpoint`` writes it (state fresh from init)."""
    folder = tmp_path_factory.mktemp("exp")
    exp = Experiment(dataset="synthetic:tiny", scale=0.1, hidden=8, seeds=2, resume=str(folder))
    model = build_experiment_model(exp, dataset)
    tx = make_optimizer(exp.train_config())
    state = jax.jit(jax.vmap(lambda k: init_state(model, tx, k)))(sg.train.seed_keys(SEEDS))
    save_checkpoint(folder, state, seeds=SEEDS, metadata=checkpoint_metadata(exp, dataset))
    return exp, model


def test_experiment_resume_accepts_matching_settings(experiment_checkpoint, dataset):
    exp, model = experiment_checkpoint
    # Settings that do not change the computation may differ.
    longer = dataclasses.replace(exp, epochs=400, plot="x.png", backend="dense")
    ckpt = restore_checkpoint(longer, dataset, model)
    assert ckpt.seeds == (0, 1)


def test_experiment_resume_refuses_other_settings(experiment_checkpoint, dataset):
    exp, model = experiment_checkpoint
    other = dataclasses.replace(exp, lr=0.02)
    with pytest.raises(
        CheckpointError, match=r"metadata\.config\.lr is 0\.01 in the checkpoint but 0\.02"
    ):
        restore_checkpoint(other, dataset, model)


def test_experiment_resume_refuses_another_dataset(experiment_checkpoint):
    exp, model = experiment_checkpoint
    bigger = load("synthetic:tiny", scale=0.2)
    with pytest.raises(
        CheckpointError, match=r"metadata\.dataset\.num_nodes is 300 in the checkpoint but 600"
    ):
        restore_checkpoint(exp, bigger, model)


def test_dataset_fingerprint_sees_another_split(dataset):
    base = dataset_fingerprint(dataset)
    split = dict(dataset.split, test=dataset.split["test"][:-1])
    shifted = Dataset(
        dataset.name, dataset.graph, dataset.features, dataset.labels, split, dataset.num_classes
    )
    other = dataset_fingerprint(shifted)
    assert other["num_nodes"] == base["num_nodes"]
    assert other["labels_split_sha256"] != base["labels_split_sha256"]


def test_save_validates_its_inputs(run, tmp_path):
    _, _, full = run
    with pytest.raises(ValueError, match=r"state holds 2 members but 3 seeds were given"):
        save_checkpoint(tmp_path, full.state, seeds=[0, 1, 2])
    with pytest.raises(ValueError, match=r"keep must be >= 1 \(or None for off\), got 0"):
        save_checkpoint(tmp_path, full.state, seeds=SEEDS, keep=0)
    with pytest.raises(TypeError, match="plain JSON data"):
        save_checkpoint(tmp_path, full.state, seeds=SEEDS, metadata={"x": object()})
    assert list_checkpoints(tmp_path) == []


def test_hook_saves_at_each_multiple_and_at_the_end(run, tmp_path):
    _, _, full = run

    def at(epoch, done=False):
        return full.state._replace(epoch=np.full(2, epoch, np.int32), done=np.full(2, done, bool))

    hook = CheckpointHook(tmp_path, seeds=SEEDS, every=50, keep=None, start_epoch=20)
    for epoch, done in [(40, False), (60, False), (90, False), (100, False), (130, True)]:
        hook(at(epoch, done), {})
    assert [p.name for p in hook.saved] == [
        "ckpt-000060.json",
        "ckpt-000100.json",
        "ckpt-000130.json",
    ]
    final_only = CheckpointHook(tmp_path / "end", seeds=SEEDS, every=0)
    final_only(at(10), {})
    final_only(at(20, True), {})
    assert [p.name for p in final_only.saved] == ["ckpt-000020.json"]


def test_fit_validates_a_given_history(run, dataset, data):
    _, _, full = run
    model = make_model(dataset)
    with pytest.raises(ValueError, match=r"history\['loss'\] must be \[epochs, 2\]"):
        sg.fit(model, data, CONFIG, seeds=SEEDS, state=full.state, history={"loss": np.zeros(3)})
    with pytest.raises(ValueError, match="pass the state it belongs to"):
        sg.fit(model, data, CONFIG, seeds=SEEDS, history={"loss": np.zeros((3, 2))})
    with pytest.raises(ValueError, match=r"state holds 2 members .* but 1 seeds were given"):
        sg.fit(model, data, CONFIG, seeds=[0], state=full.state)


def test_a_lock_file_linked_to_another_file_is_refused_and_that_file_kept(tmp_path):
    # The lock is truncated and rewritten with a pid: through a link it replaced the
    # contents of whatever file the link named.
    from sparsegcn.train.checkpoint import FolderLock

    important = tmp_path / "important.txt"
    important.write_text("important data")
    for name, link in (("symbolic", os.symlink), ("hard", os.link)):
        folder = tmp_path / name
        folder.mkdir()
        link(important, folder / ".lock")
        with pytest.raises(CheckpointError, match=rf"\.lock is a {name} link; remove it"):
            FolderLock(folder).acquire()
        with pytest.raises(CheckpointError, match=rf"\.lock is a {name} link"):
            check_checkpoint_folder(folder)
    assert important.read_text() == "important data"


def test_a_full_disk_writing_the_lock_names_the_lock_file(tmp_path, monkeypatch):
    # A full disk at the lock's rewrite was a bare "[Errno 28] No space left on device".
    import errno

    from sparsegcn.train import checkpoint as checkpoint_module

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module.os, "write", full)
    folder = tmp_path / "ck"
    with pytest.raises(OSError, match=rf"^cannot write {folder / '.lock'}: No space left"):
        checkpoint_module.FolderLock(folder).acquire()


def test_save_checkpoint_replaces_only_its_own_runs_checkpoints(run, tmp_path):
    # It replaced another run's manifest of the same epoch (and deleted its arrays),
    # and wrote checkpoints beside a link model.
    _, _, full = run
    theirs = save_checkpoint(tmp_path, full.state, seeds=SEEDS, history=full.history, run_id="a")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(CheckpointError, match=r"is a checkpoint of run a, not of run b; it is not"):
        save_checkpoint(tmp_path, full.state, seeds=SEEDS, run_id="b")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert save_checkpoint(tmp_path, full.state, seeds=SEEDS, run_id="a") == theirs  # its own
    mine = save_checkpoint(tmp_path, full.state, seeds=SEEDS, run_id="b", supersedes=[theirs])
    assert list_checkpoints(tmp_path) == [mine] and json.loads(mine.read_text())["run_id"] == "b"
    lookalike = tmp_path / "other"
    lookalike.mkdir()
    (lookalike / theirs.name).write_text('{"my": "data"}')
    with pytest.raises(CheckpointError, match=r"named like a checkpoint but is not"):
        save_checkpoint(lookalike, full.state, seeds=SEEDS)
    assert (lookalike / theirs.name).read_text() == '{"my": "data"}'
    link = tmp_path / "link"
    link.mkdir()
    (link / "link-model.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"holds a link run's model \(link-model.json\)"):
        save_checkpoint(link, full.state, seeds=SEEDS)
    assert sorted(p.name for p in link.iterdir()) == [".lock", "link-model.json"]


def _rewrite_arrays(manifest_path, arrays_path, change) -> None:
    """Edits the arrays file with ``change(zipfile.ZipFile)`` and records its new size and
    sha256 in the manifest: the manifest's checks then pass, as for a hostile folder."""
    import hashlib
    import zipfile

    with zipfile.ZipFile(arrays_path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(arrays_path, "w") as archive:
        change(archive, members)
    blob = arrays_path.read_bytes()
    manifest = json.loads(manifest_path.read_text())
    manifest.update(arrays_bytes=len(blob), arrays_sha256=hashlib.sha256(blob).hexdigest())
    manifest_path.write_text(json.dumps(manifest))


def _npy_header(shape, dtype) -> bytes:
    import io

    buffer = io.BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def test_arrays_members_the_manifest_does_not_list_are_refused(saved):
    # They were decompressed whole (a 4.5 MB member of deflated zeros took 4.4 GB) and
    # accepted silently.
    folder, manifest_path, arrays, full = saved

    def add_junk(archive, members):
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr("junk.npy", _npy_header((10**13,), "<f8"))

    _rewrite_arrays(manifest_path, arrays, add_junk)
    with pytest.raises(
        CheckpointError,
        match=rf"checkpoint arrays {arrays} do not match their manifest: member junk\.npy is not "
        r"one of the checkpoint arrays expected \(history/",
    ):
        load_checkpoint(folder, full.state)


@pytest.mark.parametrize("member", ["leaf_00001.npy", "history/loss.npy"])
def test_a_member_declaring_more_than_its_entry_is_refused_unallocated(saved, member):
    # A 128-byte member declaring 10**13 floats ended as "out of memory" (exit status 1).
    folder, manifest_path, arrays, full = saved

    def inflate(archive, members):
        for name, data in members.items():
            shape = (10**13,) if name.startswith("leaf") else (10**12, len(SEEDS))
            archive.writestr(name, _npy_header(shape, "<f4") if name == member else data)

    _rewrite_arrays(manifest_path, arrays, inflate)
    with pytest.raises(CheckpointError, match=rf"member {member} declares float32\[10+"):
        load_checkpoint(folder, full.state)


def test_a_history_bomb_is_refused_before_it_is_decompressed(saved):
    # history/<metric> is [epochs, K] of any length: bounded by the file's own size.
    import zipfile

    folder, manifest_path, arrays, full = saved

    def bomb(archive, members):
        for name, data in members.items():
            if name != "history/loss.npy":
                archive.writestr(name, data)
        info = zipfile.ZipInfo("history/loss.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as f:
            f.write(_npy_header((1 << 23, len(SEEDS)), "<f4"))  # 64 MiB of zeros
            for _ in range(64):
                f.write(bytes(1 << 20))

    _rewrite_arrays(manifest_path, arrays, bomb)
    with pytest.raises(CheckpointError, match=r"members declare more than \d+ bytes of data"):
        load_checkpoint(folder, full.state)


def test_an_arrays_file_larger_than_its_manifest_says_is_refused_unread(saved):
    # It was read whole before its size was compared: a sparse terabyte went to RAM first.
    folder, _, arrays, full = saved
    with open(arrays, "r+b") as f:
        f.truncate(1 << 40)
    with pytest.raises(CheckpointError, match=r"truncated or corrupt: 1099511627776 bytes, the"):
        load_checkpoint(folder, full.state)


@pytest.mark.parametrize("kind", ["symbolic", "hard"])
def test_linked_checkpoint_files_are_refused_and_the_files_they_name_kept(
    run, saved, tmp_path_factory, kind
):
    # train --checkpoint DIR --overwrite wrote its manifest through DIR/ckpt-N.json, a
    # symbolic link to another run's checkpoint, replacing it (and breaking it).
    _, _, full = run
    theirs, manifest_path, arrays, _ = saved
    before = {p.name: p.read_bytes() for p in theirs.iterdir() if p.is_file()}
    link = os.symlink if kind == "symbolic" else os.link
    for linked in (manifest_path, arrays):
        mine = tmp_path_factory.mktemp("mine")
        link(linked, mine / linked.name)
        if kind == "hard":  # replaced by rename, removed by unlink: the other name keeps it
            check_checkpoint_folder(mine, overwrite=True)
            supersedes = [mine / linked.name] if linked == manifest_path else []
            save_checkpoint(
                mine, full.state, seeds=SEEDS, history=full.history, supersedes=supersedes
            )
            continue
        refused = rf"{mine / linked.name} is a {kind} link.*belong to its run alone"
        with pytest.raises(CheckpointError, match=refused):
            check_checkpoint_folder(mine, overwrite=True)
        with pytest.raises(CheckpointError, match=refused):
            CheckpointHook(mine, seeds=SEEDS, overwrite=True)
        with pytest.raises(CheckpointError, match=refused):
            save_checkpoint(mine, full.state, seeds=SEEDS, history=full.history, metadata={"a": 1})
    assert {p.name: p.read_bytes() for p in theirs.iterdir() if p.is_file()} == before


def test_a_dangling_link_in_a_checkpoints_place_is_never_written_through(run, tmp_path):
    _, _, full = run
    folder, elsewhere = tmp_path / "ck", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / f"ckpt-{int(full.state.epoch.max()):06d}.json").symlink_to(elsewhere / "x.json")
    with pytest.raises(CheckpointError, match=r"is a symbolic link to .*elsewhere/x\.json"):
        save_checkpoint(folder, full.state, seeds=SEEDS, run_id="a")
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(CheckpointError, match=r"is a symbolic link to .*elsewhere/x\.json"):
        check_checkpoint_folder(folder, overwrite=True)


def test_a_lock_file_holding_someone_elses_data_is_refused_and_kept(tmp_path, capsys):
    # `sparsegcn train --checkpoint ck` truncated a user's ck/.lock and wrote its pid there.
    from sparsegcn.cli import main
    from sparsegcn.train.checkpoint import FolderLock

    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / ".lock").write_text("USER LOCK DATA")
    refusal = r"ck/\.lock holds 14 byte\(s\) sparsegcn did not write .* it is not overwritten"
    with pytest.raises(CheckpointError, match=refusal):
        FolderLock(folder).acquire()
    with pytest.raises(CheckpointError, match=refusal):
        check_checkpoint_folder(folder)
    argv = ["train", "--epochs", "2", "--no-progress", "--checkpoint", str(folder)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds 14 byte(s) sparsegcn did not write" in err
    assert (folder / ".lock").read_text() == "USER LOCK DATA"
    assert sorted(p.name for p in folder.iterdir()) == [".lock"]
    # What this module writes there is taken: nothing, or a pid and arrays in flight.
    for ours in ("", "123\n", "123\narrays ckpt-000001-0123456789ab.npz\n"):
        (folder / ".lock").write_text(ours)
        FolderLock(folder).acquire().release()
        assert (folder / ".lock").read_text().split("\n")[0] == str(os.getpid())


def test_a_planted_lock_file_never_marks_a_users_file_for_removal(run, tmp_path):
    # A lock file in this module's format records the arrays files in flight, which
    # the next prune removes: one naming a user's file had it deleted.
    _, _, full = run
    user_file = tmp_path / "ckpt-000001-0123456789ab.npz"  # named like arrays, not ours
    user_file.write_bytes(b"user data")
    (tmp_path / ".lock").write_text(f"4242\narrays {user_file.name}\n")
    save_checkpoint(tmp_path, full.state, seeds=SEEDS, keep=1)
    assert user_file.read_bytes() == b"user data"
    outside = tmp_path / "outside.npz"
    outside.write_bytes(b"user data")
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / ".lock").write_text("4242\narrays ../outside.npz\n")
    with pytest.raises(CheckpointError, match=r"ck/\.lock holds 27 byte\(s\) sparsegcn did not"):
        save_checkpoint(folder, full.state, seeds=SEEDS, keep=1)
    assert outside.read_bytes() == b"user data"


def test_a_hook_that_saved_nothing_removes_only_the_folders_it_made(run, tmp_path):
    # A run interrupted or failed before its first save left its new folder,
    # holding only the .lock it had made there.
    _, _, full = run
    CheckpointHook(tmp_path / "new" / "ck", seeds=SEEDS).close()
    assert list(tmp_path.iterdir()) == []
    existing = tmp_path / "existing"
    existing.mkdir()
    CheckpointHook(existing / "ck", seeds=SEEDS).close()
    assert list(existing.iterdir()) == []  # ck was the hook's; existing was not
    CheckpointHook(existing, seeds=SEEDS).close()
    assert [p.name for p in existing.iterdir()] == [".lock"]
    hook = CheckpointHook(tmp_path / "saved", seeds=SEEDS)
    path = hook.save(full.state, full.history)
    hook.close()
    assert path.exists() and (tmp_path / "saved" / ".lock").exists()


def test_an_unset_keep_on_resume_keeps_what_the_resumed_run_kept(tmp_path):
    # Before: --keep left out on --resume took the default 3, and the resumed
    # --keep 0 run's older checkpoints were pruned by its first save.
    from types import SimpleNamespace

    from sparsegcn.train.checkpoint import DEFAULT_KEEP

    def hook(keep, recorded=None, resumed=True):
        exp = Experiment(checkpoint=str(tmp_path / "ck"), keep=keep)
        config = {} if recorded == "missing" else {"keep": recorded}
        old = SimpleNamespace(epoch=5, run_id="r", metadata={"config": config})
        made = CheckpointHook.for_run(
            exp, seeds=SEEDS, metadata={}, resumed=old if resumed else None
        )
        made.close()
        return made.keep

    assert hook(None, resumed=False) == DEFAULT_KEEP == 3
    assert hook(None, recorded=0) is None  # all, as the resumed run kept
    assert hook(None, recorded=5) == 5
    assert hook(None, recorded=None) == 3 and hook(None, recorded="missing") == 3
    assert hook(2, recorded=0) == 2  # given: the new value
    assert hook(0, recorded=4) is None
    assert Experiment().keep is None
    with pytest.raises(ValueError, match="keep"):
        Experiment(keep=-1)


def test_a_second_resume_keeps_what_the_first_run_kept(tmp_path):
    # Before: a resume recorded its keep as given (None), so a second resume read the
    # default 3 and deleted the checkpoints of epochs 5-25 of a --keep 0 run.
    folder = tmp_path / "k"
    argv = ["train", "--checkpoint", str(folder), "--checkpoint-every", "5", "--no-progress"]
    argv += ["--patience", "0", "--epochs-per-call", "5"]
    assert main([*argv, "--epochs", "20", "--keep", "0"]) == 0
    for epochs in ("30", "40"):
        assert main([*argv, "--epochs", epochs, "--resume", str(folder)]) == 0
    saved = sorted(p.name for p in folder.glob("ckpt-*.json"))
    assert saved == [f"ckpt-{e:06d}.json" for e in range(5, 45, 5)]
    # Fewer epochs than it trained: refused (before, nothing trained and it saved again).
    assert main([*argv, "--epochs", "35", "--resume", str(folder)]) == 2
    assert sorted(p.name for p in folder.glob("ckpt-*.json")) == saved


def test_a_resume_may_name_its_dataset_folder_by_another_path_and_its_task_by_name(
    tmp_path, monkeypatch
):
    # Before: "metadata.config.dataset is './toy' in the checkpoint but '/.../toy'", and
    # "metadata.config.task is 'auto' ... but 'node'", though the data and task are the same.
    from helpers import toy_ondisk

    toy_ondisk(tmp_path / "toy")
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "k"
    argv = ["train", "--checkpoint", str(folder), "--no-progress", "--patience", "0"]
    assert main([*argv, "--dataset", "./toy", "--epochs", "4"]) == 0
    again = [*argv, "--resume", str(folder), "--epochs", "6"]
    assert main([*again, "--dataset", str(tmp_path / "toy"), "--task", "node"]) == 0
    # Another folder's data is still refused, by its fingerprint.
    toy_ondisk(tmp_path / "other", shift=2)
    assert main([*again, "--epochs", "8", "--dataset", str(tmp_path / "other")]) == 2

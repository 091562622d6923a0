"""Nothing lost, nothing silent (issue 15): each test failed before its fix.

Checkpoint folders owned by one run and locked, every CLI failure one line,
outputs checked before the work, manifests validated by type, hyperparameters
refused up front, finite divergence, bounded Planetoid ids, and a fresh clone
whose tests skip without the shared data.
"""

from __future__ import annotations

import errno
import json
import math
import os
import pickle
import subprocess
import sys
import threading
import urllib.error
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from helpers import folder_locked_by, write_mini

from sparsegcn.cli import main
from sparsegcn.cli import train as train_cli
from sparsegcn.datasets import download
from sparsegcn.datasets import planetoid as planetoid_module
from sparsegcn.datasets.planetoid import load_planetoid
from sparsegcn.experiment import Experiment
from sparsegcn.train import DivergenceError, TrainConfig
from sparsegcn.train.checkpoint import (
    LOCK_NAME,
    CheckpointError,
    CheckpointHook,
    CheckpointLockedError,
    list_checkpoints,
    read_manifest,
    save_checkpoint,
)
from sparsegcn.train.guard import raise_if_loss_grew

REPO = Path(__file__).resolve().parents[1]
FAST = ["--epochs", "4", "--patience", "0", "--no-progress"]


def error_line(capsys) -> str:
    """The one line the CLI printed on stderr (asserting there is exactly one)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def manifests_run_ids(folder: Path) -> list[str | None]:
    return [json.loads(p.read_text())["run_id"] for p in list_checkpoints(folder)]


@pytest.fixture
def readonly_dir(tmp_path):
    """A folder this process cannot write in (a chmod-ed folder, or /sys as root)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").touch()
    except PermissionError:
        yield folder
        folder.chmod(0o755)
        return
    (folder / "probe").unlink()
    folder.chmod(0o755)
    if not _writable("/sys"):  # root ignores the mode bits; /sys is mounted read-only
        yield Path("/sys")
        return
    pytest.skip("no read-only folder: running as root and /sys is writable")


def _writable(folder: str) -> bool:
    try:
        fd = os.open(os.path.join(folder, ".sparsegcn-probe"), os.O_CREAT | os.O_WRONLY)
    except OSError:
        return False
    os.close(fd)
    os.unlink(os.path.join(folder, ".sparsegcn-probe"))
    return True


# -- 1. a checkpoint folder belongs to one run --------------------------------


@pytest.mark.slow
def test_a_second_run_refuses_a_folder_holding_another_runs_checkpoints(tmp_path, capsys):
    folder = tmp_path / "ck"
    first = ["train", *FAST, "--checkpoint", str(folder), "--checkpoint-every", "1"]
    assert main([*first, "--keep", "3"]) == 0
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert [p.name for p in list_checkpoints(folder)] == [f"ckpt-00000{e}.json" for e in (2, 3, 4)]
    capsys.readouterr()

    second = ["train", "--epochs", "2", "--patience", "0", "--no-progress", "--lr", "0.05"]
    assert main([*second, "--checkpoint", str(folder), "--keep", "3"]) == 2
    line = error_line(capsys)
    assert "holds 3 checkpoint(s) of another run (newest ckpt-000004.json" in line
    assert "--overwrite" in line
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # untouched

    # --overwrite replaces them: only the new run's checkpoints remain, and the
    # path it prints exists (it named a pruned file before).
    assert main([*second, "--checkpoint", str(folder), "--overwrite"]) == 0
    printed = capsys.readouterr().out.split("checkpoint: ")[1].split()[0]
    assert Path(printed).exists()
    assert [p.name for p in list_checkpoints(folder)] == ["ckpt-000002.json"]
    assert read_manifest(folder)["metadata"]["config"]["lr"] == 0.05


def test_resuming_into_the_same_folder_continues_the_run(tmp_path, capsys):
    folder = tmp_path / "ck"
    base = ["train", "--patience", "0", "--no-progress", "--checkpoint", str(folder)]
    assert main([*base, "--epochs", "2"]) == 0
    assert main([*base, "--epochs", "4", "--resume", str(folder)]) == 0
    ids = manifests_run_ids(folder)
    assert len(ids) == 2 and ids[0] == ids[1] is not None


def test_pruning_keeps_other_runs_checkpoints(tmp_path):
    state = _tiny_state()
    save_checkpoint(tmp_path, state(5), seeds=[0], run_id="a")
    for epoch in (1, 2, 3):
        save_checkpoint(tmp_path, state(epoch), seeds=[0], keep=1, run_id="b")
    names = {p.name: json.loads(p.read_text())["run_id"] for p in list_checkpoints(tmp_path)}
    assert names == {"ckpt-000003.json": "b", "ckpt-000005.json": "a"}
    arrays = sorted(p.name for p in tmp_path.glob("*.npz"))
    assert len(arrays) == 2  # each surviving manifest's arrays, nothing else


def _tiny_state():
    """``state(epoch)``: a one-seed TrainState of a 2-class MLP at ``epoch``."""
    import jax
    import jax.numpy as jnp

    import sparsegcn as sg
    from sparsegcn.train import init_state, make_optimizer

    model = sg.mlp(3, 2, hidden=4)
    tx = make_optimizer(TrainConfig(epochs=5))
    base = jax.vmap(lambda k: init_state(model, tx, k))(jax.random.split(jax.random.key(0), 1))

    def state(epoch: int):
        return base._replace(epoch=jnp.full((1,), epoch, jnp.int32))

    return state


# -- 2. one writer per folder -------------------------------------------------


def test_a_locked_folder_is_refused_naming_the_holder(tmp_path, capsys):
    folder = tmp_path / "ck"
    with folder_locked_by(folder, 424242):
        with pytest.raises(CheckpointLockedError, match="in use by process 424242") as info:
            CheckpointHook(folder, seeds=[0])
        assert info.value.pid == 424242
        assert main(["train", *FAST, "--checkpoint", str(folder)]) == 2
        assert "in use by process 424242" in error_line(capsys)
    hook = CheckpointHook(folder, seeds=[0])  # free again
    assert (folder / LOCK_NAME).read_text().strip() == str(os.getpid())
    hook.close()


def test_a_holder_that_has_not_yet_written_its_pid_is_still_named(tmp_path):
    # The holder truncates then writes its pid (on acquiring, and on each
    # pending-list rewrite): a refused run reading in between waits for it.
    folder = tmp_path / "ck"
    with folder_locked_by(folder, None) as fd:
        timer = threading.Timer(0.1, lambda: os.write(fd, b"424243\n"))
        timer.start()
        with pytest.raises(CheckpointLockedError, match="in use by process 424243"):
            CheckpointHook(folder, seeds=[0])
        timer.join()


def test_concurrent_runs_one_writes_the_other_is_refused(tmp_path):
    folder = tmp_path / "ck"
    argv = [sys.executable, "-m", "sparsegcn", "train", "--epochs", "60", "--patience", "0"]
    argv += ["--no-progress", "--checkpoint", str(folder), "--checkpoint-every", "1"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    runs = [subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [run.communicate(timeout=300)[1] for run in runs]
    outcomes = sorted((run.returncode, err) for run, err in zip(runs, errors, strict=True))
    assert [rc for rc, _ in outcomes] == [0, 2], outcomes
    assert "Traceback" not in outcomes[1][1]
    assert ("is in use by" in outcomes[1][1]) or ("of another run" in outcomes[1][1])
    assert read_manifest(folder)["epoch"] == 60


def test_a_plot_that_cannot_be_written_loses_no_results(tmp_path, monkeypatch, capsys):
    # The plot was drawn before the table was printed and --json written: a full
    # disk at the plot lost the finished run's results.
    from sparsegcn import plots

    real_write = plots.write_atomic

    def disk_full(path, write):
        def write_then_fail(f):
            write(f)
            raise OSError(errno.ENOSPC, "No space left on device")

        return real_write(path, write_then_fail)

    monkeypatch.setattr(plots, "write_atomic", disk_full)
    report, plot = tmp_path / "report.json", tmp_path / "curves.png"
    assert main(["train", *FAST, "--json", str(report), "--plot", str(plot)]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("dataset ") and "test acc" in captured.out
    assert captured.err == (
        f"sparsegcn train: error: the run finished, but its plot was not drawn: cannot write "
        f"{plot}: No space left on device\n"
    )
    written = json.loads(report.read_text())
    assert written["test_acc_mean"] > 0 and written["plot"] is None
    assert written["plot_error"] == f"cannot write {plot}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary file


# -- 3. one line per failure --------------------------------------------------


FAILURES = [
    (PermissionError(13, "Permission denied", "/ro/x"), 2, "Permission denied"),
    (IsADirectoryError(21, "Is a directory", "/tmp"), 2, "Is a directory"),
    (OSError(errno.ENOSPC, "No space left on device"), 1, "No space left on device"),
    (urllib.error.URLError("cannot download http://x: offline"), 1, "offline"),
    (pickle.UnpicklingError("refusing to load global os.system"), 2, "refusing to load"),
    (zipfile.BadZipFile("File is not a zip file"), 2, "not a zip file"),
    (EOFError("Ran out of input"), 2, "Ran out of input"),
    (MemoryError(), 1, "out of memory (MemoryError)"),
    (CheckpointError("bad manifest"), 2, "bad manifest"),
    (DivergenceError(3, 0, math.nan, 1.0, [0]), 2, "training diverged at epoch 3"),
    # raised by an operation, not by a check in sparsegcn: a defect
    (TypeError("bad type"), 1, "TypeError: bad type (rerun with --debug"),
    (RuntimeError("xla said no"), 1, "RuntimeError: xla said no (rerun with --debug"),
    (KeyError("leaf"), 2, "KeyError: 'leaf'"),
]


@pytest.mark.parametrize(
    "error, status, words", FAILURES, ids=[type(e).__name__ for e, _, _ in FAILURES]
)
def test_every_failure_is_one_line_with_status_1_or_2(monkeypatch, capsys, error, status, words):
    def fail(args):
        raise error

    monkeypatch.setattr(train_cli, "run", fail)
    monkeypatch.delenv("SPARSEGCN_DEBUG", raising=False)
    assert main(["train"]) == status
    line = error_line(capsys)
    assert line.startswith("sparsegcn train: error: ") and words in line


def test_a_type_error_is_the_inputs_only_where_a_check_raised_it(monkeypatch, capsys):
    # Before: every TypeError was exit status 2 and read as the user's fault, a
    # defect such as None + 1 inside sparsegcn included.
    def checked(args):
        TrainConfig(epochs=2.5)

    monkeypatch.delenv("SPARSEGCN_DEBUG", raising=False)
    monkeypatch.setattr(train_cli, "run", checked)
    assert main(["train"]) == 2
    assert (
        error_line(capsys)
        == "sparsegcn train: error: epochs must be an integer >= 1, got 2.5 (float)"
    )
    monkeypatch.setattr(train_cli, "run", lambda args: len(None))
    assert main(["train"]) == 1
    assert "TypeError: object of type 'NoneType' has no len() (rerun with --debug" in error_line(
        capsys
    )


def test_debug_shows_the_traceback(monkeypatch):
    def fail(args):
        raise zipfile.BadZipFile("File is not a zip file")

    monkeypatch.setattr(train_cli, "run", fail)
    with pytest.raises(zipfile.BadZipFile):
        main(["--debug", "train"])
    with pytest.raises(zipfile.BadZipFile):
        main(["train", "--debug"])
    monkeypatch.setenv("SPARSEGCN_DEBUG", "1")
    with pytest.raises(zipfile.BadZipFile):
        main(["train"])


def test_an_offline_download_is_one_line(tmp_path, monkeypatch, capsys):
    class Offline:
        def open(self, url, timeout):
            raise urllib.error.URLError(OSError(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(download, "_opener", lambda watchdog: Offline())
    assert main(["info", "--dataset", "cora", "--root", str(tmp_path), "--no-progress"]) == 1
    line = error_line(capsys)
    assert "cannot download https://github.com/kimiyoung/planetoid" in line
    assert line.endswith("ind.cora.x: [Errno -3] Temporary failure in name resolution")
    # Before: the failed download left the folders it had made (root/planetoid/, and
    # root/tu/ for a TU dataset), empty. A folder that was there is kept.
    for dataset in ("cora", "tu:MUTAG"):
        root = tmp_path / "new" / "root"
        assert main(["info", "--dataset", dataset, "--root", str(root), "--no-progress"]) == 1
        assert "cannot download" in error_line(capsys)
        assert sorted(tmp_path.iterdir()) == [], dataset
    assert main(["info", "--dataset", "tu:MUTAG", "--root", str(tmp_path), "--no-progress"]) == 1
    assert "cannot download" in error_line(capsys) and tmp_path.is_dir()


# -- 4. outputs checked before the work; predict writes all or none -----------


@pytest.mark.parametrize("flag", ["--json", "--plot", "--checkpoint"])
def test_unwritable_outputs_are_refused_before_data_is_read(flag, readonly_dir, tmp_path, capsys):
    if flag == "--plot":
        pytest.importorskip("matplotlib")
    root = tmp_path / "empty-root"
    root.mkdir()
    target = readonly_dir / {"--checkpoint": "ck", "--plot": "out.png"}.get(flag, "out.json")
    argv = ["train", "--dataset", "cora", "--root", str(root), *FAST, flag, str(target)]
    assert main(argv) == 2
    line = error_line(capsys)
    assert f"{flag} {target}" in line and "cannot be written" in line
    assert list(root.iterdir()) == []  # nothing downloaded or read


def test_a_folder_as_json_output_is_refused_up_front(tmp_path, capsys):
    assert main(["train", *FAST, "--json", str(tmp_path)]) == 2
    assert f"--json {tmp_path} is a folder" in error_line(capsys)


def test_predict_writes_all_outputs_or_none(tmp_path, readonly_dir, capsys, monkeypatch):
    folder = tmp_path / "ck"
    assert main(["train", *FAST, "--checkpoint", str(folder)]) == 0
    out, emb = tmp_path / "p.npy", readonly_dir / "e.npy"
    argv = ["predict", "--checkpoint", str(folder), "--out", str(out), "--embeddings", str(emb)]
    capsys.readouterr()
    assert main(argv) == 2
    assert "--embeddings" in error_line(capsys)
    assert not out.exists()  # nothing half-written

    import sparsegcn.cli.predict as predict_cli

    real = predict_cli.npy_writer

    def embeddings_fail(array):
        if array.ndim == 2:  # the embeddings, written after the predictions
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(array)

    emb = tmp_path / "e.npy"
    argv[-1] = str(emb)
    monkeypatch.setattr(predict_cli, "npy_writer", embeddings_fail)
    assert main(argv) == 1
    monkeypatch.setattr(predict_cli, "npy_writer", real)
    assert "No space left" in error_line(capsys)
    assert not out.exists() and not emb.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "ro"]
    assert main(argv) == 0 and out.exists() and emb.exists()
    # No output may replace a file of the checkpoint's folder, read by this run or not.
    manifest = sorted(folder.glob("ckpt-*.json"))[-1]
    before = manifest.read_bytes()
    for target in (manifest, folder / ".lock", folder / "ckpt-000001.json"):
        assert main([*argv[:-2], "--json", str(target)]) == 2
        assert "the files the folder of --checkpoint" in error_line(capsys)
    assert manifest.read_bytes() == before and not (folder / "ckpt-000001.json").exists()


# -- 5. manifests validated by type -------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("seeds", 5),
        ("arrays", 5),
        ("leaves", None),
        ("epoch", "7"),
        ("arrays_bytes", -1),
        ("history", {"loss": 1}),
        ("leaves", [{"path": "x"}]),
        ("metadata", []),
        ("seeds", [True]),
    ],
)
def test_manifest_fields_of_the_wrong_type_are_checkpoint_errors(tmp_path, field, value):
    state = _tiny_state()
    path = save_checkpoint(tmp_path, state(1), seeds=[0])
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps(dict(manifest, **{field: value})))
    with pytest.raises(CheckpointError, match=f"field '{field}' must be"):
        read_manifest(tmp_path)


def test_a_bad_manifest_is_one_line_in_predict(tmp_path, capsys):
    folder = tmp_path / "ck"
    assert main(["train", *FAST, "--checkpoint", str(folder)]) == 0
    path = list_checkpoints(folder)[-1]
    path.write_text(json.dumps(dict(json.loads(path.read_text()), seeds=5)))
    capsys.readouterr()
    argv = ["predict", "--checkpoint", str(folder), "--out", str(tmp_path / "p.npy")]
    assert main(argv) == 2
    assert "field 'seeds' must be a non-empty list of integers, got 5" in error_line(capsys)


# -- 6. hyperparameters refused up front --------------------------------------


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--hidden", "0", "hidden must be >= 1, got 0 (--hidden)"),
        ("--hidden", "-4", "hidden must be >= 1, got -4 (--hidden)"),
        ("--lr", "-0.01", "lr must be > 0.0, got -0.01 (--lr)"),
        ("--lr", "nan", "lr must be a finite number > 0.0, got nan (--lr)"),
        ("--weight-decay", "nan", "weight_decay must be a finite number >= 0.0, got nan"),
        ("--dropout", "1.5", "dropout must be >= 0.0 and < 1.0, got 1.5 (--dropout)"),
        ("--dropout", "-0.1", "dropout must be >= 0.0 and < 1.0, got -0.1"),
        ("--epochs", "0", "epochs must be >= 1, got 0 (--epochs)"),
        ("--batch-size", "0", "batch_size must be >= 1, got 0 (--batch-size)"),
        ("--clip-norm", "-1", "clip_norm must be > 0.0 (or 0 for off), got -1.0"),
        ("--clip-norm", "inf", "clip_norm must be a finite number > 0.0"),
        ("--layers", "0", "layers must be >= 1, got 0 (--layers)"),
        ("--patience", "-1", "patience must be >= 1 (or 0 for off), got -1"),
        ("--scale", "0", "scale must be > 0.0 and <= 1.0, got 0.0 (--scale)"),
        ("--seed", "-1", "seed must be >= 0 and <= 4294967295, got -1 (--seed)"),
        ("--divergence-factor", "0.5", "divergence_factor must be > 1.0 (or 0 for off)"),
    ],
)
def test_bad_hyperparameters_are_refused_before_data_is_read(
    option, value, words, tmp_path, capsys
):
    root = tmp_path / "root"
    root.mkdir()
    argv = ["train", "--dataset", "cora", "--root", str(root), "--no-progress"]
    assert main([*argv, option, value]) == 2
    assert words in error_line(capsys)
    assert list(root.iterdir()) == []


def test_the_python_api_shares_the_checks():
    with pytest.raises(ValueError, match=r"learning_rate must be a finite number > 0\.0, got nan"):
        TrainConfig(learning_rate=math.nan)
    with pytest.raises(ValueError, match=r"weight_decay must be >= 0\.0, got -1"):
        TrainConfig(weight_decay=-1)
    with pytest.raises(TypeError, match=r"epochs must be an integer >= 1, got 2.5 \(float\)"):
        TrainConfig(epochs=2.5)
    with pytest.raises(TypeError, match="hidden must be an integer >= 1, got True"):
        Experiment(hidden=True)
    with pytest.raises(ValueError, match=r"dropout must be >= 0\.0 and < 1\.0, got 1"):
        Experiment(dropout=1)
    assert Experiment(clip_norm=0.0).train_config().clip_norm is None  # 0 is "off"


# -- 7. finite divergence -----------------------------------------------------


def _history(loss: np.ndarray) -> dict:
    loss = np.asarray(loss, np.float32)
    epochs = np.arange(1, loss.shape[0] + 1)[:, None] * np.ones((1, loss.shape[1]), int)
    return {
        "loss": loss,
        "grad_norm": np.ones_like(loss),
        "active": np.ones(loss.shape, bool),
        "epoch": epochs,
    }


def test_loss_growth_is_divergence_after_the_stated_epochs():
    # Seed 1 (member 1) is above 100 x 2.0 from epoch 4 on; 10 epochs in a row at epoch 13.
    good = np.linspace(2.0, 0.5, 20)
    bad = np.concatenate([[2.0, 3.0, 50.0], np.full(17, 1e6)])
    history = _history(np.stack([good, bad], axis=1))
    with pytest.raises(DivergenceError) as info:
        raise_if_loss_grew(history, [7, 8], factor=100.0, epochs=10)
    err = info.value
    assert (err.epoch, err.seed, err.member, err.loss) == (13, 8, 1, 1e6)
    assert "above 100x its first epoch's 2 for 10 epochs in a row" in str(err)
    # One epoch short, a dip below the threshold, or the check off: no error.
    raise_if_loss_grew(_history(history["loss"][:12]), [7, 8], factor=100.0, epochs=10)
    dipped = history["loss"].copy()
    dipped[10, 1] = 1.0  # runs of 7 and 9 epochs above
    raise_if_loss_grew(_history(dipped), [7, 8], factor=100.0, epochs=10)
    raise_if_loss_grew(history, [7, 8], factor=None, epochs=10)


def test_a_first_epoch_that_already_ran_away_is_bounded_by_the_chance_level_loss():
    # An epoch of many steps averages the blow-up into its first loss (a graph run at
    # lr 1e4: 1e9 from the first epoch on). Before: never 100x above that, never stopped.
    history = _history(np.full((12, 1), 1e9))
    raise_if_loss_grew(history, [3], factor=100.0, epochs=10)  # no bound: no error
    with pytest.raises(DivergenceError, match=r"above 100x the chance-level loss 0.693147 \(its"):
        raise_if_loss_grew(history, [3], factor=100.0, epochs=10, chance=np.log(2.0))
    healthy = _history(np.linspace(0.7, 0.1, 12)[:, None])
    raise_if_loss_grew(healthy, [3], factor=100.0, epochs=10, chance=np.log(2.0))


@pytest.mark.slow
def test_a_runaway_finite_loss_fails_the_cli(capsys):
    assert main(["train", "--lr", "1e6", "--no-progress"]) == 2
    line = error_line(capsys)
    assert "training diverged at epoch" in line and "above 100x" in line
    assert "first epoch's" in line
    # The check can be turned off, and the run then finishes as before.
    off = ["--epochs", "12", "--divergence-factor", "0", "--no-progress"]
    assert main(["train", "--lr", "1e6", *off]) == 0


# -- 8. Planetoid sizes bounded -----------------------------------------------


def test_a_huge_test_index_id_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(planetoid_module, "NUM_VALID", 2)
    graph = defaultdict(list, {0: [1]})
    sums = write_mini(
        tmp_path / "planetoid", "citeseer", test_index=[8, 2**40], graph=graph, num_valid=2
    )
    monkeypatch.setitem(planetoid_module.SHA256, "citeseer", sums)
    with pytest.raises(ValueError, match=r"test node 1099511627776 is beyond 2x the 6 rows"):
        load_planetoid("citeseer", tmp_path, download=False)


# -- 9. a fresh clone passes pytest -------------------------------------------


def test_an_output_never_replaces_a_file_sparsegcn_reads_back(tmp_path, capsys):
    # Before: only this run's inputs were protected. --json onto another run's
    # checkpoint manifest (or an on-disk dataset's) left that folder unreadable.
    ck = tmp_path / "ck"
    run = ["train", "--epochs", "1", "--seeds", "1", "--no-progress", "--checkpoint", str(ck)]
    assert main(run) == 0
    capsys.readouterr()
    manifest = next(ck.glob("ckpt-*.json"))
    arrays = next(ck.glob("ckpt-*.npz"))
    before = {p.name: p.read_bytes() for p in ck.iterdir()}
    for path, words in [(manifest, "sparsegcn.checkpoint manifest"), (arrays, "checkpoint folder")]:
        assert main(["info", "--json", str(path)]) == 2
        line = error_line(capsys)
        assert f"--json {path} would overwrite" in line and words in line
    assert {p.name: p.read_bytes() for p in ck.iterdir()} == before
    dataset = tmp_path / "disk"
    dataset.mkdir()
    listing = {"format": "sparsegcn-graph", "files": {"labels": {"file": "labels.npy"}}}
    (dataset / "manifest.json").write_text(json.dumps(listing))
    (dataset / "labels.npy").write_bytes(b"kept")
    (dataset / "notes.txt").write_text("a user's file, not the dataset's")
    for name in ("manifest.json", "labels.npy"):
        assert main(["train", "--epochs", "1", "--json", str(dataset / name)]) == 2
        assert "would overwrite" in error_line(capsys)
    assert (dataset / "labels.npy").read_bytes() == b"kept"
    assert main(["info", "--json", str(dataset / "notes.txt")]) == 2  # text: another kind
    assert "is a text file, not a JSON report" in error_line(capsys)
    (dataset / "old.json").write_text('{"num_nodes": 1}')
    assert main(["info", "--json", str(dataset / "old.json")]) == 0  # a report, not the dataset's


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_reader_gone_from_stdout_loses_no_output(tmp_path, unbuffered):
    # Before: the table printed to a closed pipe (| head, a pager quit) raised
    # BrokenPipeError after the work, and --json was never written (status 1).
    out = tmp_path / "info.json"
    argv = [sys.executable, "-m", "sparsegcn", "info", "--dataset", "synthetic:tiny"]
    argv += ["--root", str(tmp_path / "root"), "--json", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED=unbuffered)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command prints
    try:
        done = subprocess.run(argv, env=env, stdout=write, stderr=subprocess.PIPE, timeout=300)
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert b"error" not in done.stderr and b"Exception ignored" not in done.stderr
    assert json.loads(out.read_text())["num_nodes"] > 0


def test_tests_needing_shared_data_skip_naming_where_they_looked(tmp_path):
    clone = tmp_path / "clone"
    (clone / "tests").mkdir(parents=True)
    (clone / "tests" / "conftest.py").write_bytes((REPO / "tests" / "conftest.py").read_bytes())
    (clone / "tests" / "test_needs_cora.py").write_text(
        "def test_cora(cora):\n    raise AssertionError('must not run')\n\n"
        "def test_root(data_root):\n    raise AssertionError('must not run')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SPARSEGCN_TEST_DATA"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", "tests"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 skipped" in done.stdout
    assert "shared test data not found: looked for" in done.stdout
    assert str(tmp_path / "shared" / "data" / "planetoid" / "ind.cora.x") in done.stdout

"""Fault cases: the bad inputs and faults a demanding user meets (issue 15), rerunnable.

Runs every case and prints one row per case and the table::

    cases tried | clean errors | correct results | tracebacks | unexpected errors |
    false errors | silent wrong results | lost data | open

- clean error: exit status 1 or 2 and one line on stderr (argparse's usage
  plus one error line for malformed options) naming the problem, or, from
  the Python API, an exception of a documented type (``ValueError``,
  ``TypeError``, ``OSError``, ``pickle.UnpicklingError``, ...).
- correct result: a fault that must be survived was (a resumed ``kill -9``
  reaching the uninterrupted run's arrays, an overwrite, a symlink entry
  that stays inside its archive).
- traceback: a Python traceback on stderr, or an exception of an
  undocumented type from the API (goal 0).
- unexpected error: one line, but sparsegcn's "unexpected error" line
  (goal 0).
- false error: a case that should succeed failed.
- silent wrong result: exit 0 (or no exception) where an error was due,
  or a wrong output (goal 0).
- lost data: a file that existed before the fault is gone or changed, or
  some but not all of an all-or-nothing output was written (goal 0).
- hang: a subprocess case still running after ``HANG_S`` seconds, or a
  download not cut off in time (goal 0).
- open: refusals that belong to code being changed elsewhere (the model
  builders, which will call ``sparsegcn._checks.check_hyperparameters``);
  listed, not hidden.

Most CLI cases run in this process through :func:`sparsegcn.cli.main` with
stderr captured; concurrency, ``kill -9`` and disk-full (``RLIMIT_FSIZE``)
cases run ``python -m sparsegcn`` subprocesses. Network cases use a loopback
server (``tests/http_server.py``). Cora cases need the shared data
(``$SPARSEGCN_TEST_DATA`` or ``../shared/data``) and are skipped without it.

Usage::

    PYTHONPATH=. python benchmarks/faults.py [--only WORDS] [--json PATH] [--kills 12]

Takes about 5-10 minutes on 2 CPU cores, plus about 5 for group 11 (issue 26:
``--only names``, ``applicability``, ``one-line faults``, ``outputs``). The issue 26
cases (``--only "26 "``) mount a 4 MiB tmpfs for full disks and mknod a device when
run as root, and report "skipped" otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import math
import os
import pickle
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers import TOY_SPLIT, toy_ondisk  # noqa: E402
from http_server import serve  # noqa: E402

import sparsegcn as sg  # noqa: E402
from sparsegcn.cli import main  # noqa: E402
from sparsegcn.datasets import load  # noqa: E402
from sparsegcn.datasets import ogb as ogb_module  # noqa: E402
from sparsegcn.datasets import planetoid as planetoid_module  # noqa: E402
from sparsegcn.datasets.download import download_file, sha256_file  # noqa: E402
from sparsegcn.experiment import Experiment, predict_checkpoint  # noqa: E402
from sparsegcn.files import check_outputs, write_atomic  # noqa: E402
from sparsegcn.train import TrainConfig  # noqa: E402
from sparsegcn.train.checkpoint import (  # noqa: E402
    CheckpointHook,
    list_checkpoints,
    load_checkpoint,
    read_manifest,
    save_checkpoint,
)

KINDS = (
    "clean",
    "correct",
    "traceback",
    "unexpected",
    "false_error",
    "silent",
    "lost",
    "open",
    "hang",
)
API_ERRORS = (ValueError, TypeError, OSError, pickle.UnpicklingError, EOFError, LookupError)
FAST = ["--epochs", "3", "--patience", "0", "--no-progress"]
UNEXPECTED = "(rerun with --debug for the traceback)"


@dataclasses.dataclass
class Result:
    kind: str
    detail: str = ""


@dataclasses.dataclass
class Case:
    group: str
    name: str
    run: Callable[[Path], Result]


CASES: list[Case] = []


def case(group: str, name: str):
    def register(fn):
        CASES.append(Case(group, name, fn))
        return fn

    return register


def add(group: str, name: str, fn: Callable[[Path], Result]) -> None:
    CASES.append(Case(group, name, fn))


# -- running and judging ------------------------------------------------------


def judge_cli(rc, err: str, *, expect_error: bool, words: str | None = None) -> Result:
    """Classifies a finished command by its status and stderr."""
    lines = [line for line in err.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in err:
        return Result("traceback", lines[-1] if lines else "")
    if rc == 0:
        return Result("silent", "exit 0") if expect_error else Result("correct", "exit 0")
    if rc not in (1, 2):
        return Result("traceback", f"exit {rc}: {lines[-1] if lines else ''}")
    last = lines[-1] if lines else ""
    argparse_error = lines and lines[0].startswith("usage:") and ": error: " in last
    if not (len(lines) == 1 or argparse_error) or ": error: " not in last:
        return Result("traceback", f"{len(lines)} lines on stderr: {last[:100]}")
    if UNEXPECTED in last:
        return Result("unexpected", last)
    if not expect_error:
        return Result("false_error", last)
    if words is not None and words not in last:
        return Result("unexpected", f"message lacks {words!r}: {last}")
    return Result("clean", last)


def cli(argv: list[str], entry=None) -> tuple[int | None, str, str]:
    """Runs ``sparsegcn argv`` (or ``entry(argv)``, another program's ``main``) in this
    process; ``(status, stdout, stderr)``.

    An exception escaping :func:`main` is rendered as the traceback Python
    would print (status ``None``).
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = (entry or main)(argv)
        except SystemExit as exit_:
            rc = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException:
            traceback.print_exc()
            rc = None
    return rc, out.getvalue(), err.getvalue()


def run_cli(argv, *, expect_error=True, words=None, check=None) -> Result:
    rc, out, err = cli(argv)
    result = judge_cli(rc, err, expect_error=expect_error, words=words)
    if check is not None and result.kind in ("clean", "correct"):
        verdict = check(rc, out, err)
        if verdict is not None:
            return verdict
    return result


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), SPARSEGCN_DEBUG="0")


def sub(argv, *, timeout=600, preexec=None, cwd=None) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "sparsegcn", *argv],
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec,
        cwd=cwd,
    )
    return done.returncode, done.stdout, done.stderr


def api(fn, *, expect=API_ERRORS, words=None) -> Result:
    """Calls ``fn()``; an exception of ``expect`` is a clean error."""
    try:
        fn()
    except expect as err:
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if words is not None and words not in str(err):
            return Result("unexpected", f"{type(err).__name__}: message lacks {words!r}: {text}")
        return Result("clean", f"{type(err).__name__}: {text}")
    except BaseException as err:
        return Result("traceback", f"{type(err).__name__}: {str(err)[:100]}")
    return Result("silent", "no error")


def snapshot(folder: Path) -> dict:
    """``{relative path: bytes}`` of every file under ``folder`` (lock files left out)."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def readonly_folder(tmp: Path) -> Path | None:
    """A folder this process cannot write in (mode 555, or /sys when root)."""
    folder = tmp / "readonly"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o555)
    try:
        (folder / ".probe").touch()
    except PermissionError:
        return folder
    (folder / ".probe").unlink()
    try:
        fd, name = tempfile.mkstemp(dir="/sys")
    except OSError:
        return Path("/sys")
    os.close(fd)
    os.unlink(name)
    return None


# -- shared fixtures ----------------------------------------------------------


def shared_data() -> Path | None:
    for candidate in (
        os.environ.get("SPARSEGCN_TEST_DATA"),
        REPO.parent / "shared" / "data",
    ):
        if candidate and (Path(candidate) / "planetoid" / "ind.cora.x").exists():
            return Path(candidate)
    return None


DATA = shared_data()
_BASE: dict[str, Path] = {}


def base_checkpoint(tmp: Path) -> Path:
    """A copy of a 1-seed synthetic:tiny checkpoint folder, trained once per run."""
    if "ck" not in _BASE:
        folder = Path(tempfile.mkdtemp(prefix="faults-base-")) / "ck"
        rc, _, err = cli(["train", *FAST, "--checkpoint", str(folder)])
        assert rc == 0, err
        _BASE["ck"] = folder
    target = tmp / "ck"
    shutil.copytree(_BASE["ck"], target)
    return target


def edit_manifest(folder: Path, **changes) -> Path:
    path = list_checkpoints(folder)[-1]
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))
    return path


def rewrite_arrays(folder: Path, change: Callable[[dict], dict]) -> None:
    """Replaces the newest checkpoint's arrays by ``change(arrays)``, fixing size and sha."""
    path = list_checkpoints(folder)[-1]
    manifest = json.loads(path.read_text())
    arrays_path = folder / manifest["arrays"]
    with np.load(arrays_path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    buffer = io.BytesIO()
    np.savez(buffer, **change(arrays))
    payload = buffer.getvalue()
    arrays_path.write_bytes(payload)
    manifest.update(arrays_bytes=len(payload), arrays_sha256=hashlib.sha256(payload).hexdigest())
    path.write_text(json.dumps(manifest))


def predict_argv(folder: Path, tmp: Path) -> list[str]:
    return ["predict", "--checkpoint", str(folder), "--out", str(tmp / "p.npy")]


# -- 1. command-line options --------------------------------------------------

BAD_OPTIONS = [
    (["--hidden", "0"], "hidden must be >= 1"),
    (["--hidden", "-4"], "hidden must be >= 1"),
    (["--hidden", "abc"], "invalid int value"),
    (["--hidden", "1.5"], "invalid int value"),
    (["--lr", "-0.01"], "lr must be > 0.0"),
    (["--lr", "0"], "lr must be > 0.0"),
    (["--lr", "nan"], "lr must be a finite number"),
    (["--lr", "inf"], "lr must be a finite number"),
    (["--weight-decay", "nan"], "weight_decay must be a finite number"),
    (["--weight-decay", "-1"], "weight_decay must be >= 0.0"),
    (["--dropout", "1.5"], "dropout must be >= 0.0 and < 1.0"),
    (["--dropout", "1.0"], "dropout must be >= 0.0 and < 1.0"),
    (["--dropout", "-0.1"], "dropout must be >= 0.0 and < 1.0"),
    (["--dropout", "nan"], "dropout must be a finite number"),
    (["--epochs", "0"], "epochs must be >= 1"),
    (["--epochs", "-5"], "epochs must be >= 1"),
    (["--layers", "0"], "layers must be >= 1"),
    (["--patience", "-1"], "patience must be >= 1 (or 0 for off)"),
    (["--seeds", "0"], "seeds must be >= 1"),
    (["--seed", "-1"], "seed must be >= 0"),
    (["--seed", str(2**32)], "seed must be >= 0 and <= 4294967295"),
    (["--model", "sage", "--batch-size", "0", "--layers", "2"], "batch_size must be >= 1"),
    (["--clip-norm", "-1"], "clip_norm must be > 0.0"),
    (["--clip-norm", "nan"], "clip_norm must be a finite number"),
    (["--epochs-per-call", "-1"], "epochs_per_call must be >= 1 (or 0 for off)"),
    (["--keep", "-1"], "keep must be >= 0"),
    (["--checkpoint-every", "-1"], "checkpoint_every must be >= 0"),
    (["--scale", "0"], "scale must be > 0.0 and <= 1.0"),
    (["--scale", "nan"], "scale must be a finite number"),
    (["--scale", "2"], "scale must be > 0.0 and <= 1.0"),
    (["--divergence-factor", "0.5"], "divergence_factor must be > 1.0"),
    (["--divergence-epochs", "0"], "divergence_epochs must be >= 1"),
    (["--model", "nosuch"], "invalid choice"),
    (["--backend", "cusparse"], "invalid choice"),
    (["--dataset", "nosuch"], "unknown dataset 'nosuch'"),
    (["--dataset", " cora"], "surrounding whitespace"),
    (["--model", "sage", "--fanouts", "a,b"], "fanouts"),
    (["--model", "sage", "--fanouts", ""], "fanouts"),
    (["--model", "sage", "--fanouts", "5,0"], "fanouts"),
    (["--model", "sage", "--layers", "3"], "sage samples one hop per layer"),
    (["--devices", "0"], "devices must be >= 1"),
    (["--devices", "64"], "asks for 64 local devices"),
    (["--num-processes", "0"], "num_processes"),
    (["--num-processes", "2", "--process-id", "5"], "process"),
    (["--reorder", "random"], "invalid choice"),
    (["--normalize-features", "zscore"], "invalid choice"),
    (["--decay-layers", "last"], "invalid choice"),
    (["--sweep", "lr="], "sweep"),
    (["--sweep", "nosuch=1,2"], "nosuch"),
    (["--sweep", "lr=-1,0.01"], "lr must be > 0.0"),
    (["--sweep", "hidden=0,16"], "hidden must be >= 1"),
    (["--sweep", "seeds=1,2"], "'seeds' cannot be swept"),
    (["--lr", "1e6", "--epochs", "200"], "training diverged"),
    (["--lr", "1e30"], "training diverged"),
    (["--devices", "2", "--sweep", "lr=0.01,0.1"], "--sweep trains on one device"),
]

for options, words in BAD_OPTIONS:
    add(
        "cli options",
        "train " + " ".join(options),
        lambda tmp, o=options, w=words: run_cli(["train", *FAST, *o], words=w),
    )


@case("cli options", "train with every setting valid (control)")
def _(tmp):
    return run_cli(["train", *FAST], expect_error=False)


@case("cli options", "info --scale 5")
def _(tmp):
    return run_cli(["info", "--scale", "5", "--no-progress"], words="scale")


@case("cli options", "bench --nodes abc")
def _(tmp):
    return run_cli(["bench", "--nodes", "abc", "--no-progress"], words="--nodes")


@case("cli options", "predict without --out")
def _(tmp):
    return run_cli(["predict", "--checkpoint", str(tmp)], words="--out")


# -- 2. output paths, checked before the work ---------------------------------


def _refused_before_reading(flag: str, target: Path, tmp: Path, words: str) -> Result:
    root = tmp / "root"
    root.mkdir()
    argv = ["train", "--dataset", "cora", "--root", str(root), *FAST, flag, str(target)]
    result = run_cli(argv, words=words)
    if result.kind == "clean" and any(root.iterdir()):
        return Result("unexpected", "refused only after reading data")
    return result


for flag in ("--json", "--plot", "--checkpoint"):

    def _readonly(tmp, flag=flag):
        folder = readonly_folder(tmp)
        if folder is None:
            return Result("skipped", "no read-only folder")
        name = "ck" if flag == "--checkpoint" else "out.png"
        return _refused_before_reading(flag, folder / name, tmp, "cannot be written")

    add("output paths", f"train {flag} in a read-only folder", _readonly)

    def _under_file(tmp, flag=flag):
        (tmp / "file").write_text("x")
        return _refused_before_reading(flag, tmp / "file" / "out.png", tmp, "is not a folder")

    add("output paths", f"train {flag} under a file", _under_file)


@case("output paths", "train --json names a folder")
def _(tmp):
    return _refused_before_reading("--json", tmp, tmp, "is a folder")


@case("output paths", "train --plot names a folder")
def _(tmp):
    (tmp / "curves.png").mkdir()
    return _refused_before_reading("--plot", tmp / "curves.png", tmp, "is a folder")


@case("output paths", "train --checkpoint names a file")
def _(tmp):
    (tmp / "f").write_text("x")
    return _refused_before_reading("--checkpoint", tmp / "f", tmp, "not a folder")


@case("output paths", "train --resume of a missing folder")
def _(tmp):
    return _refused_before_reading("--resume", tmp / "nope", tmp, "does not exist")


@case("output paths", "train --resume of an empty folder")
def _(tmp):
    (tmp / "empty").mkdir()
    return _refused_before_reading("--resume", tmp / "empty", tmp, "no checkpoint in")


@case("output paths", "train --resume of a file that is no manifest")
def _(tmp):
    (tmp / "notes.txt").write_text("x")
    return _refused_before_reading("--resume", tmp / "notes.txt", tmp, "not a checkpoint manifest")


@case("output paths", "info --json in a read-only folder")
def _(tmp):
    folder = readonly_folder(tmp)
    if folder is None:
        return Result("skipped", "no read-only folder")
    return run_cli(["info", "--json", str(folder / "i.json"), "--no-progress"], words="--json")


@case("output paths", "bench --json in a read-only folder")
def _(tmp):
    folder = readonly_folder(tmp)
    if folder is None:
        return Result("skipped", "no read-only folder")
    return run_cli(["bench", "--quick", "--json", str(folder / "b.json")], words="--json")


def _predict_outputs(tmp: Path, changes: dict, words: str) -> Result:
    folder = base_checkpoint(tmp)
    outputs = {"--out": tmp / "p.npy", "--embeddings": tmp / "e.npy", "--json": tmp / "s.json"}
    outputs.update(changes)
    argv = ["predict", "--checkpoint", str(folder)]
    for flag, path in outputs.items():
        argv += [flag, str(path)]
    result = run_cli(argv, words=words)
    written = [p for p in outputs.values() if Path(p).is_file()]
    if result.kind == "clean" and written:
        return Result("lost", f"partial outputs written: {written}")
    return result


for flag in ("--out", "--embeddings", "--json"):

    def _ro(tmp, flag=flag):
        folder = readonly_folder(tmp)
        if folder is None:
            return Result("skipped", "no read-only folder")
        suffix = ".json" if flag == "--json" else ".npy"
        return _predict_outputs(tmp, {flag: folder / f"x{suffix}"}, "cannot be written")

    add("output paths", f"predict {flag} in a read-only folder", _ro)

    def _dir(tmp, flag=flag):
        target = tmp / ("d.npy" if flag != "--json" else "d.json")
        target.mkdir()
        return _predict_outputs(tmp, {flag: target}, "is a folder")

    add("output paths", f"predict {flag} names a folder", _dir)


@case("output paths", "predict --out and --embeddings the same file")
def _(tmp):
    return _predict_outputs(tmp, {"--embeddings": tmp / "p.npy"}, "name the same file")


@case("output paths", "predict --out without .npy")
def _(tmp):
    return _predict_outputs(tmp, {"--out": tmp / "p.txt"}, "must name a .npy file")


# -- 3. a full disk (RLIMIT_FSIZE: writes beyond the limit fail with EFBIG) ---


def _small_files(limit: int):
    def preexec():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


@case("disk full", "train --checkpoint on a full disk")
def _(tmp):
    rc, _, err = sub(["train", *FAST, "--checkpoint", str(tmp / "ck")], preexec=_small_files(512))
    return judge_cli(rc, err, expect_error=True)


@case("disk full", "resumed run on a full disk keeps the earlier checkpoints")
def _(tmp):
    folder = base_checkpoint(tmp)
    before = snapshot(folder)
    argv = ["train", "--epochs", "6", "--patience", "0", "--no-progress"]
    argv += ["--resume", str(folder), "--checkpoint", str(folder)]
    rc, _, err = sub(argv, preexec=_small_files(512))
    result = judge_cli(rc, err, expect_error=True)
    if snapshot(folder) != before:
        return Result("lost", "earlier checkpoints changed")
    return result


@case("disk full", "train --json on a full disk")
def _(tmp):
    rc, _, err = sub(["train", *FAST, "--json", str(tmp / "r.json")], preexec=_small_files(200))
    return judge_cli(rc, err, expect_error=True)


@case("disk full", "predict on a full disk writes nothing")
def _(tmp):
    folder = base_checkpoint(tmp)
    argv = [*predict_argv(folder, tmp), "--embeddings", str(tmp / "e.npy")]
    rc, _, err = sub(argv, preexec=_small_files(1000))
    result = judge_cli(rc, err, expect_error=True)
    if (tmp / "p.npy").exists() or (tmp / "e.npy").exists():
        return Result("lost", "partial outputs")
    return result


# -- 4. corrupt and malicious dataset files -----------------------------------

CORA_PARTS = [f"ind.cora.{p}" for p in planetoid_module.PARTS]


def cora_copy(tmp: Path) -> Path:
    shutil.copytree(DATA / "planetoid", tmp / "planetoid", ignore=shutil.ignore_patterns(".*"))
    return tmp


def info(root: Path, name: str = "cora") -> list[str]:
    return ["info", "--dataset", name, "--root", str(root), "--no-progress"]


def needs_cora(fn):
    def run(tmp):
        if DATA is None:
            return Result("skipped", "no shared Cora")
        return fn(tmp)

    return run


for part in CORA_PARTS:

    def _truncated(tmp, part=part):
        root = cora_copy(tmp)
        path = root / "planetoid" / part
        path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 2)])
        return run_cli(info(root), words="corrupt or truncated")

    add("dataset files", f"cora {part} truncated", needs_cora(_truncated))

    def _flipped(tmp, part=part):
        root = cora_copy(tmp)
        path = root / "planetoid" / part
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        return run_cli(info(root), words="corrupt or truncated")

    add("dataset files", f"cora {part} one byte flipped", needs_cora(_flipped))


@case("dataset files", "cora ind.cora.x replaced by a folder")
def _(tmp):
    if DATA is None:
        return Result("skipped", "no shared Cora")
    root = cora_copy(tmp)
    (root / "planetoid" / "ind.cora.x").unlink()
    (root / "planetoid" / "ind.cora.x").mkdir()
    return run_cli(info(root))


@case("dataset files", "root is a file")
def _(tmp):
    (tmp / "f").write_text("x")
    return run_cli(info(tmp / "f"), words="not a directory")


@case("dataset files", "planetoid/ is a file")
def _(tmp):
    (tmp / "planetoid").write_text("x")
    return run_cli([*info(tmp), "--no-progress"])


class _Reduce:
    """Pickles as a call of ``func(*args)``: what a malicious pickle does."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def mini_objects(test_index=(8, 5, 7)) -> dict:
    """A 2-class, 3-feature Planetoid-format dataset (allx 4 nodes, tx 3), valid."""
    allx = sp.csr_matrix(np.eye(4, 3, dtype=np.float32))
    ally = np.eye(2, dtype=np.int32)[np.arange(4) % 2]
    n = len(test_index)
    tx = sp.csr_matrix(np.ones((n, 3), np.float32))
    ty = np.eye(2, dtype=np.int32)[np.arange(n) % 2]
    graph = {0: [1], 1: [0, 2], 2: [1]}
    return {
        "x": allx[:2],
        "y": ally[:2],
        "tx": tx,
        "ty": ty,
        "allx": allx,
        "ally": ally,
        "graph": graph,
        "test.index": "".join(f"{i}\n" for i in test_index).encode(),
    }


@contextlib.contextmanager
def mini_citeseer(tmp: Path, objects: dict, raw: dict | None = None):
    """Writes a mini 'citeseer' whose sha256 sums are taken as the published ones."""
    folder = tmp / "planetoid"
    folder.mkdir(parents=True, exist_ok=True)
    for part, obj in objects.items():
        path = folder / f"ind.citeseer.{part}"
        data = (raw or {}).get(part)
        if data is None:
            data = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=4)
        path.write_bytes(data)
    sums = {p.name: sha256_file(p) for p in folder.iterdir()}
    saved = dict(planetoid_module.SHA256["citeseer"])
    planetoid_module.SHA256["citeseer"] = sums
    old_valid = planetoid_module.NUM_VALID
    planetoid_module.NUM_VALID = 2
    try:
        yield tmp
    finally:
        planetoid_module.SHA256["citeseer"] = saved
        planetoid_module.NUM_VALID = old_valid


def mini_case(name: str, change: Callable[[dict], dict], words=None, raw=None, ok=False):
    def run(tmp):
        objects = change(mini_objects())
        with mini_citeseer(tmp, objects, raw=raw):
            return run_cli(info(tmp, "citeseer"), words=words, expect_error=not ok)

    add("dataset files", f"planetoid {name}", run)


def _set(**parts):
    return lambda objects: dict(objects, **parts)


def _index(text: bytes):
    return _set(**{"test.index": text})


mini_case("valid mini dataset (control)", lambda o: o, ok=True)
mini_case("test.index id 2**40", _index(b"8\n5\n1099511627776\n"), "beyond 2x")
mini_case("test.index negative id", _index(b"8\n5\n-7\n"), "collides")
mini_case("test.index id inside allx", _index(b"8\n5\n1\n"), "collides")
mini_case("test.index non-integer line", _index(b"8\n5\nseven\n"), "not a node id")
mini_case("test.index duplicate id", _index(b"8\n5\n5\n"), "more than once")
mini_case(
    "test.index empty",
    lambda o: dict(
        o,
        **{
            "test.index": b"",
            "tx": sp.csr_matrix((0, 3), dtype=np.float32),
            "ty": np.zeros((0, 2), np.int32),
        },
    ),
    "no test nodes",
)
mini_case("test.index non-ASCII bytes", _index(b"8\n5\n\xff\xfe\n"), "codec")
mini_case("test.index fewer ids than tx rows", _index(b"8\n5\n"), "rows")
mini_case("graph edge to node 10**6", _set(graph={0: [10**6]}), "outside")
mini_case("graph edge to node -1", _set(graph={0: [-1]}), "outside")
mini_case("graph is a list", _set(graph=[[0, 1]]), "expected a dict")
mini_case("graph key is a string", _set(graph={"0": [1]}), "not an integer")
mini_case("graph neighbours not a list", _set(graph={0: 1}), "not a list of integers")
mini_case("graph neighbour is a float", _set(graph={0: [1.5]}), "not a list of integers")
mini_case("x pickles os.system", _set(x=_Reduce(os.system, ("true",))), "refusing to load")
mini_case("allx pickles builtins.eval", _set(allx=_Reduce(eval, ("1",))), "refusing to load")
mini_case(
    "graph pickles subprocess.Popen",
    _set(graph=_Reduce(subprocess.Popen, (["true"],))),
    "refusing to load",
)
mini_case("y pickles shutil.rmtree", _set(y=_Reduce(shutil.rmtree, ("/nonexistent",))), "refusing")
mini_case("ally pickles os.remove", _set(ally=_Reduce(os.remove, ("/nonexistent",))), "refusing")
mini_case("tx truncated pickle", lambda o: o, raw={"tx": pickle.dumps(np.ones(3))[:20]})
mini_case("ty empty file", lambda o: o, raw={"ty": b""})
mini_case("allx garbage bytes", lambda o: o, raw={"allx": b"\x00\x01garbage" * 10})
mini_case("ally label value 2", _set(ally=np.full((4, 2), 2, np.int32)), "is not 0 or 1")
mini_case("ally two classes set", _set(ally=np.ones((4, 2), np.int32)), "classes set")
mini_case("ally strings", _set(ally=np.array([["a", "b"]] * 4)), "numeric")
mini_case("y 1-D", _set(y=np.zeros(2, np.int32)), "2-D one-hot")
mini_case(
    "allx NaN feature",
    _set(allx=sp.csr_matrix(np.full((4, 3), np.nan, np.float32))),
    "not finite",
)
mini_case(
    "allx inf feature",
    lambda o: dict(
        o,
        allx=sp.csr_matrix(np.full((4, 3), np.inf, np.float32)),
        x=sp.csr_matrix(np.full((2, 3), np.inf, np.float32)),
    ),
    "not finite",
)
mini_case("allx dense array", _set(allx=np.eye(4, 3, dtype=np.float32)), "CSR")
mini_case("x differs from allx", _set(x=sp.csr_matrix(np.ones((2, 3), np.float32))), "differ")
mini_case("tx 2 columns", _set(tx=sp.csr_matrix(np.ones((3, 2), np.float32))), "columns")


def _bad_csr(o):
    m = sp.csr_matrix(np.eye(4, 3, dtype=np.float32))
    m.indices[0] = 99  # a column beyond the matrix
    return dict(o, allx=m)


mini_case("allx column index out of range", _bad_csr, "malformed CSR")


def _ndarray_claiming(shape) -> bytes:
    """A pickle that rebuilds an ndarray of ``shape`` from 8 bytes of data."""
    arr = np.zeros(1, np.float64)
    func, args, state = arr.__reduce__()
    state = (state[0], tuple(shape), *state[2:])

    class Forged:
        def __reduce__(self):
            return func, args, state

    return pickle.dumps(Forged(), protocol=4)


mini_case("y ndarray claiming 2**40 rows", lambda o: o, raw={"y": _ndarray_claiming((2**40, 2))})


def _deep_pickle(depth: int) -> bytes:
    # PROTO 2, then `depth` EMPTY_LIST + MARK pairs closed by APPENDS: lists nested `depth` deep.
    return b"\x80\x02" + b"](" * depth + b"e" * depth + b"."


mini_case("graph pickle nested 100000 lists deep", lambda o: o, raw={"graph": _deep_pickle(100000)})


# -- 5. downloads from a loopback server --------------------------------------


def _serve_case(routes_for, *, words=None, expect=API_ERRORS, check_clean=None):
    def run(tmp):
        routes = routes_for()
        with serve(routes) as (_, url):
            result = api(
                lambda: download_file(
                    f"{url}/file",
                    tmp / "out" / "file",
                    sha256=ROUTE_SHA,
                    progress=False,
                    timeout=3,
                ),
                expect=expect,
                words=words,
            )
        if result.kind == "clean" and any((tmp / "out").glob("*")):
            return Result("lost", "a partial download was left behind")
        return result

    return run


PAYLOAD = b"the published bytes" * 100
ROUTE_SHA = hashlib.sha256(PAYLOAD).hexdigest()

for name, routes, words in [
    ("HTTP 404", lambda: {"/file": ("status", 404)}, "HTTP 404"),
    ("HTTP 500", lambda: {"/file": ("status", 500)}, "HTTP 500"),
    (
        "body shorter than Content-Length",
        lambda: {"/file": ("truncated", PAYLOAD[:50], len(PAYLOAD))},
        None,
    ),
    ("broken chunked body", lambda: {"/file": ("broken-chunked", PAYLOAD[:50])}, None),
    ("wrong bytes (sha256 mismatch)", lambda: {"/file": b"evil" * 100}, "sha256"),
    ("no Content-Length, wrong bytes", lambda: {"/file": ("no-length", b"evil")}, "sha256"),
    ("redirect to file:///etc/passwd", lambda: {"/file": ("redirect", "file:///etc/passwd")}, None),
    ("redirect loop", lambda: {"/file": ("redirect", "/file")}, None),
    ("server never answers (timeout)", lambda: {"/file": ("slow", 5)}, None),
]:
    add("downloads", name, _serve_case(routes, words=words))


@case("downloads", "connection refused")
def _(tmp):
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return api(
        lambda: download_file(
            f"http://127.0.0.1:{port}/x", tmp / "x", sha256=None, progress=False, timeout=3
        ),
        words="Connection refused",
    )


@case("downloads", "ftp:// URL")
def _(tmp):
    return api(
        lambda: download_file("ftp://127.0.0.1/x", tmp / "x", sha256=None), words="only http"
    )


@case("downloads", "offline Planetoid download through the CLI")
def _(tmp):
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    saved = planetoid_module.PLANETOID_URL
    defaults = planetoid_module.load_planetoid.__kwdefaults__
    old = defaults["base_url"]
    defaults["base_url"] = f"http://127.0.0.1:{port}/data/"
    try:
        return run_cli(info(tmp), words="cannot download")
    finally:
        defaults["base_url"] = old
        planetoid_module.PLANETOID_URL = saved


@case("downloads", "Planetoid server sends a malicious pickle with the right sha256")
def _(tmp):
    objects = mini_objects()
    objects["graph"] = _Reduce(os.system, ("touch pwned",))
    routes = {}
    sums = {}
    for part, obj in objects.items():
        data = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=4)
        routes[f"/data/ind.citeseer.{part}"] = data
        sums[f"ind.citeseer.{part}"] = hashlib.sha256(data).hexdigest()
    saved = planetoid_module.SHA256["citeseer"]
    planetoid_module.SHA256["citeseer"] = sums
    try:
        with serve(routes) as (_, url):
            result = api(
                lambda: planetoid_module.load_planetoid("citeseer", tmp, base_url=f"{url}/data"),
                words="refusing to load",
            )
    finally:
        planetoid_module.SHA256["citeseer"] = saved
    if Path("pwned").exists() or (tmp / "pwned").exists():
        return Result("silent", "the pickle ran code")
    return result


# -- 6. hostile archives (OGB) ------------------------------------------------


def _zip(entries: list[tuple[str | zipfile.ZipInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buffer.getvalue()


def _symlink_entry(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (0o120777 << 16) | 0
    info.create_system = 3
    return info


def _archive_case(name: str, archive: Callable[[], bytes], *, ok=False, words=None, sha=None):
    def run(tmp):
        data = archive()
        root = tmp / "root"
        outside = {p for p in tmp.rglob("*")}
        saved = dict(ogb_module.ARCHIVE_SHA256)
        ogb_module.ARCHIVE_SHA256["ogbn-arxiv"] = sha or hashlib.sha256(data).hexdigest()
        try:
            with serve({"/arxiv.zip": data}) as (_, url):
                result = api(
                    lambda: ogb_module.download_verified(
                        "ogbn-arxiv", root, f"{url}/arxiv.zip", "arxiv"
                    ),
                    words=words,
                )
        finally:
            ogb_module.ARCHIVE_SHA256.clear()
            ogb_module.ARCHIVE_SHA256.update(saved)
        escaped = {p for p in tmp.rglob("*") if not p.is_relative_to(root)} - outside
        if escaped or Path("/tmp/sparsegcn-faults-escaped").exists():
            return Result("silent", f"wrote outside the root: {sorted(escaped)}")
        if ok:
            if result.kind == "silent":  # no error: check what landed
                return Result("correct", "extracted inside the root only")
            return Result("false_error", result.detail)
        if result.kind == "clean" and (root / "ogbn_arxiv").exists():
            return Result("lost", "a partial dataset folder was left")
        return result

    add("archives", name, run)


_archive_case(
    "zip slip ../../escaped", lambda: _zip([("arxiv/../../escaped", b"x")]), words="escapes"
)
_archive_case(
    "absolute path entry",
    lambda: _zip([("/tmp/sparsegcn-faults-escaped", b"x")]),
    words="escapes",
)
_archive_case("no arxiv/ folder inside", lambda: _zip([("other/a.txt", b"x")]), words="no folder")
_archive_case("not a zip at all", lambda: b"this is not a zip file" * 10)
_archive_case("truncated zip", lambda: _zip([("arxiv/a.txt", b"x" * 5000)])[:100])
_archive_case(
    "sha256 mismatch",
    lambda: _zip([("arxiv/a.txt", b"x")]),
    sha="0" * 64,
    words="sha256",
)
_archive_case(
    "symlink entry pointing at /etc",
    lambda: _zip([("arxiv/RELEASE_v1.txt", b"x"), (_symlink_entry("arxiv/etc", "/etc"), b"/etc")]),
    ok=True,
)


# -- 7. checkpoints: corrupt and hostile manifests and arrays -----------------

MANIFEST_FAULTS = [
    ("seeds", 5),
    ("seeds", []),
    ("seeds", ["a"]),
    ("arrays", 5),
    ("arrays", "../../etc/passwd"),
    ("arrays", "other.npz"),
    ("leaves", None),
    ("leaves", [1]),
    ("leaves", [{"path": "x"}]),
    (
        "leaves",
        [
            {
                "path": "x",
                "shape": [2**30, 2**30],
                "dtype": "float32",
                "name": "leaf_00000",
                "stored_shape": [1],
                "stored_dtype": "float32",
            }
        ],
    ),
    ("epoch", "7"),
    ("epoch", -1),
    ("epoch", 10**6),
    ("arrays_bytes", -1),
    ("arrays_bytes", 3.5),
    ("arrays_sha256", "zz"),
    ("history", {"loss": 1}),
    ("history", ["nosuch"]),
    ("metadata", []),
    ("metadata", {"config": {"hidden": "wide"}}),
    ("metadata", {"config": {"unknown_setting": 1}}),
    ("run_id", 5),
    ("format_version", 2),
    ("format", "other"),
]

for field, value in MANIFEST_FAULTS:

    def _manifest(tmp, field=field, value=value):
        folder = base_checkpoint(tmp)
        edit_manifest(folder, **{field: value})
        return run_cli(predict_argv(folder, tmp))

    add("checkpoints", f"manifest {field} = {json.dumps(value)[:40]}", _manifest)


for name, text in [
    ("not JSON", "{not json"),
    ("empty", ""),
    ("a JSON list", "[1, 2]"),
    ("binary", "\udcff"),
]:

    def _text(tmp, text=text):
        folder = base_checkpoint(tmp)
        path = list_checkpoints(folder)[-1]
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        return run_cli(predict_argv(folder, tmp), words="not")

    add("checkpoints", f"manifest file {name}", _text)


@case("checkpoints", "manifest lacks 'leaves'")
def _(tmp):
    folder = base_checkpoint(tmp)
    path = list_checkpoints(folder)[-1]
    manifest = json.loads(path.read_text())
    del manifest["leaves"]
    path.write_text(json.dumps(manifest))
    return run_cli(predict_argv(folder, tmp), words="lacks manifest fields")


def _arrays_path(folder: Path) -> Path:
    return folder / read_manifest(folder)["arrays"]


@case("checkpoints", "arrays truncated")
def _(tmp):
    folder = base_checkpoint(tmp)
    path = _arrays_path(folder)
    path.write_bytes(path.read_bytes()[:100])
    return run_cli(predict_argv(folder, tmp), words="truncated")


@case("checkpoints", "arrays one byte flipped")
def _(tmp):
    folder = base_checkpoint(tmp)
    path = _arrays_path(folder)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    return run_cli(predict_argv(folder, tmp), words="corrupt")


@case("checkpoints", "arrays deleted")
def _(tmp):
    folder = base_checkpoint(tmp)
    _arrays_path(folder).unlink()
    return run_cli(predict_argv(folder, tmp), words="cannot be read")


@case("checkpoints", "arrays replaced by a folder")
def _(tmp):
    folder = base_checkpoint(tmp)
    path = _arrays_path(folder)
    path.unlink()
    path.mkdir()
    return run_cli(predict_argv(folder, tmp), words="cannot be read")


def _arrays_case(name: str, change, words=None):
    def run(tmp):
        folder = base_checkpoint(tmp)
        rewrite_arrays(folder, change)
        return run_cli(predict_argv(folder, tmp), words=words)

    add("checkpoints", f"arrays (sha256 fixed) {name}", run)


def _first_leaf(arrays: dict) -> str:
    return sorted(k for k in arrays if k.startswith("leaf_"))[0]


_arrays_case("hold a pickled object array", lambda a: dict(a, leaf_00000=np.array([{}], object)))
_arrays_case("lack a leaf", lambda a: {k: v for k, v in a.items() if k != _first_leaf(a)})
_arrays_case(
    "leaf of another shape", lambda a: dict(a, **{_first_leaf(a): np.zeros((7, 7), np.float32)})
)
_arrays_case(
    "leaf float64", lambda a: dict(a, **{_first_leaf(a): a[_first_leaf(a)].astype(np.float64)})
)
_arrays_case(
    "history of the wrong shape",
    lambda a: {k: (np.zeros(3) if k.startswith("history/") else v) for k, v in a.items()},
)


@case("checkpoints", "arrays (sha256 fixed) epoch leaf disagrees with the manifest")
def _(tmp):
    folder = base_checkpoint(tmp)
    leaves = read_manifest(folder)["leaves"]
    name = next(leaf["name"] for leaf in leaves if leaf["path"] == ".epoch")
    rewrite_arrays(folder, lambda a: dict(a, **{name: a[name] + 100}))
    return run_cli(predict_argv(folder, tmp), words="inconsistent")


@case("checkpoints", "predict --checkpoint missing")
def _(tmp):
    return run_cli(predict_argv(tmp / "nope", tmp), words="does not exist")


@case("checkpoints", "predict on another dataset")
def _(tmp):
    folder = base_checkpoint(tmp)
    argv = [*predict_argv(folder, tmp), "--dataset", "synthetic:arxiv"]
    return run_cli(argv, words="incompatible checkpoint")


@case("checkpoints", "resume with another hidden width")
def _(tmp):
    folder = base_checkpoint(tmp)
    argv = ["train", *FAST, "--hidden", "32", "--resume", str(folder)]
    return run_cli(argv, words="incompatible checkpoint")


@case("checkpoints", "resume with more seeds")
def _(tmp):
    folder = base_checkpoint(tmp)
    return run_cli(["train", *FAST, "--seeds", "3", "--resume", str(folder)], words="seeds")


# -- 8. one run per folder, concurrent runs, kill -9 --------------------------


@case("ownership", "fresh run into another run's folder")
def _(tmp):
    folder = base_checkpoint(tmp)
    before = snapshot(folder)
    result = run_cli(
        ["train", *FAST, "--lr", "0.05", "--checkpoint", str(folder)], words="another run"
    )
    if snapshot(folder) != before:
        return Result("lost", "the other run's checkpoints changed")
    return result


@case("ownership", "--overwrite replaces the other run; predict reads the new one")
def _(tmp):
    folder = base_checkpoint(tmp)
    argv = ["train", "--epochs", "2", "--patience", "0", "--no-progress", "--lr", "0.05"]
    rc, _, err = cli([*argv, "--checkpoint", str(folder), "--overwrite"])
    if rc != 0:
        return judge_cli(rc, err, expect_error=False)
    manifest = read_manifest(folder)
    epochs = [int(p.name[5:11]) for p in list_checkpoints(folder)]
    if manifest["metadata"]["config"]["lr"] != 0.05 or epochs != [2]:
        return Result(
            "silent", f"folder holds epochs {epochs} of lr {manifest['metadata']['config']['lr']}"
        )
    return Result("correct", "only the new run's checkpoint remains")


@case("ownership", "resume into the same folder continues the run")
def _(tmp):
    folder = base_checkpoint(tmp)
    argv = ["train", "--epochs", "6", "--patience", "0", "--no-progress"]
    rc, _, err = cli([*argv, "--resume", str(folder), "--checkpoint", str(folder)])
    if rc != 0:
        return judge_cli(rc, err, expect_error=False)
    ids = {json.loads(p.read_text())["run_id"] for p in list_checkpoints(folder)}
    epoch = read_manifest(folder)["epoch"]
    return Result(
        "correct" if len(ids) == 1 and epoch == 6 else "silent", f"run ids {ids}, epoch {epoch}"
    )


@case("ownership", "predict reads a folder while a run writes it")
def _(tmp):
    folder = base_checkpoint(tmp)
    argv = [
        "train",
        "--epochs",
        "40",
        "--patience",
        "0",
        "--no-progress",
        "--checkpoint-every",
        "1",
    ]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sparsegcn",
            *argv,
            "--resume",
            str(folder),
            "--checkpoint",
            str(folder),
        ],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    results = []
    while proc.poll() is None and len(results) < 20:
        rc, _, err = cli(predict_argv(folder, tmp))
        results.append((rc, err))
    proc.communicate(timeout=300)
    bad = [err for rc, err in results if rc != 0 and "in use" not in err]
    if proc.returncode != 0:
        return Result("false_error", "the writer failed")
    if bad:
        return Result("false_error", bad[0].strip()[:100])
    return Result("correct", f"{len(results)} predictions during the run")


@case("concurrency", "two runs on one folder at once")
def _(tmp):
    folder = tmp / "ck"
    argv = [sys.executable, "-m", "sparsegcn", "train", "--epochs", "40", "--patience", "0"]
    argv += ["--no-progress", "--checkpoint", str(folder), "--checkpoint-every", "1"]
    procs = [
        subprocess.Popen(
            argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    codes = sorted(p.returncode for p in procs)
    if codes != [0, 2]:
        return Result("false_error" if 1 in codes else "silent", f"exit codes {codes}: {errs}")
    loser = errs[[p.returncode for p in procs].index(2)]
    result = judge_cli(2, loser, expect_error=True)
    try:
        read_manifest(folder)
    except Exception as err:
        return Result("lost", f"the winner's checkpoint is unreadable: {err}")
    return result


@case("concurrency", "three runs on one folder at once")
def _(tmp):
    folder = tmp / "ck"
    argv = [sys.executable, "-m", "sparsegcn", "train", "--epochs", "30", "--patience", "0"]
    argv += ["--no-progress", "--checkpoint", str(folder), "--checkpoint-every", "1"]
    procs = [
        subprocess.Popen(
            argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    codes = sorted(p.returncode for p in procs)
    if codes != [0, 2, 2]:
        return Result("false_error" if 1 in codes else "silent", f"exit codes {codes}")
    for err, p in zip(errs, procs, strict=True):
        if p.returncode == 2 and judge_cli(2, err, expect_error=True).kind != "clean":
            return judge_cli(2, err, expect_error=True)
    return Result("clean", "one wrote, two were refused with one line each")


@case("concurrency", "a live process holds the lock: the refusal names its pid")
def _(tmp):
    folder = tmp / "ck"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from sparsegcn.train.checkpoint import FolderLock; lock = FolderLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)",
            str(folder),
        ],
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    holder.stdout.readline()
    try:
        return run_cli(["train", *FAST, "--checkpoint", str(folder)], words=f"process {holder.pid}")
    finally:
        holder.kill()
        holder.communicate()


@case("concurrency", "a lock left by a killed process does not block")
def _(tmp):
    folder = tmp / "ck"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from sparsegcn.train.checkpoint import FolderLock; lock = FolderLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)",
            str(folder),
        ],
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    holder.stdout.readline()
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    return run_cli(["train", *FAST, "--checkpoint", str(folder)], expect_error=False)


@case("concurrency", "two predicts writing at once")
def _(tmp):
    folder = base_checkpoint(tmp)
    for i in range(2):
        (tmp / str(i)).mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sparsegcn", *predict_argv(folder, tmp / str(i))],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    if any(p.returncode for p in procs):
        return Result("false_error", errs[0][-200:] + errs[1][-200:])
    same = np.array_equal(np.load(tmp / "0" / "p.npy"), np.load(tmp / "1" / "p.npy"))
    return Result("correct" if same else "silent", "both predictions equal" if same else "differ")


KILL_ARGV = ["train", "--epochs", "40", "--patience", "0", "--seeds", "2", "--no-progress"]
KILL_ARGV += ["--checkpoint-every", "1", "--keep", "2"]
_REFERENCE: dict = {}


def _final_arrays(folder: Path) -> dict:
    manifest = read_manifest(folder)
    with np.load(folder / manifest["arrays"], allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}, manifest["epoch"]


def kill_trial(trial: int):
    def run(tmp):
        if "arrays" not in _REFERENCE:
            rc, _, err = sub([*KILL_ARGV, "--checkpoint", str(tmp / "reference")])
            if rc != 0:
                return Result("false_error", err[-200:])
            _REFERENCE["arrays"] = _final_arrays(tmp / "reference")
        folder = tmp / "ck"
        # Kill right after a random epoch's checkpoint lands, plus up to 50 ms, so the
        # kill falls mid-run: inside the next compiled call or checkpoint write.
        rng = random.Random(trial)
        target, extra = rng.randint(1, 38), rng.uniform(0.0, 0.05)
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparsegcn", *KILL_ARGV, "--checkpoint", str(folder)],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            found = list_checkpoints(folder)
            if found and int(found[-1].name[5:-5]) >= target:
                break
            time.sleep(0.005)
        time.sleep(extra)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        resume = ["--resume", str(folder)] if list_checkpoints(folder) else []
        resumed_epoch = read_manifest(folder)["epoch"] if resume else 0
        rc, _, err = sub([*KILL_ARGV, *resume, "--checkpoint", str(folder)])
        if rc != 0:
            return Result("false_error", f"resume failed: {err.strip()[-200:]}")
        got, epoch = _final_arrays(folder)
        want, want_epoch = _REFERENCE["arrays"]
        same = (
            epoch == want_epoch
            and got.keys() == want.keys()
            and all(np.array_equal(got[k], want[k]) for k in want)
        )
        where = f"killed {extra * 1e3:.0f} ms after epoch {target}'s checkpoint, resumed from epoch {resumed_epoch}"
        return Result("correct" if same else "lost", where)

    return run


# -- 9. Python API misuse -----------------------------------------------------

API_CASES = [
    ("TrainConfig(learning_rate=nan)", lambda: TrainConfig(learning_rate=math.nan)),
    ("TrainConfig(epochs=0)", lambda: TrainConfig(epochs=0)),
    ("TrainConfig(epochs=2.5)", lambda: TrainConfig(epochs=2.5)),
    ("TrainConfig(epochs='10')", lambda: TrainConfig(epochs="10")),
    ("TrainConfig(weight_decay=-1)", lambda: TrainConfig(weight_decay=-1)),
    ("TrainConfig(clip_norm=0)", lambda: TrainConfig(clip_norm=0)),
    ("TrainConfig(patience=0)", lambda: TrainConfig(patience=0)),
    ("TrainConfig(divergence_factor=1.0)", lambda: TrainConfig(divergence_factor=1.0)),
    ("TrainConfig(divergence_epochs=0)", lambda: TrainConfig(divergence_epochs=0)),
    ("TrainConfig(decay_layers='last')", lambda: TrainConfig(decay_layers="last")),
    ("Experiment(hidden=True)", lambda: Experiment(hidden=True)),
    ("Experiment(dropout='0.5')", lambda: Experiment(dropout="0.5")),
    ("Experiment(lr=inf)", lambda: Experiment(lr=math.inf)),
    ("Experiment(seeds=0)", lambda: Experiment(seeds=0)),
    ("Experiment(model='nosuch')", lambda: Experiment(model="nosuch")),
    ("Experiment(dataset=5)", lambda: Experiment(dataset=5)),
    ("Experiment(batch_size=0, model='sage')", lambda: Experiment(batch_size=0, model="sage")),
    ("load('nosuch')", lambda: load("nosuch")),
    ("load('cora', empty root, download=False)", None),
    ("save_checkpoint(keep=0)", None),
    ("save_checkpoint(seeds of the wrong count)", None),
    ("save_checkpoint(metadata=object())", None),
    ("save_checkpoint(run_id=5)", None),
    ("CheckpointHook(every=-1)", None),
    ("load_checkpoint(template of another model)", None),
    ("predict_checkpoint(params='middle')", lambda: predict_checkpoint("x", params="middle")),
    ("Graph with an id out of range", lambda: sg.Graph([0, 5], [1, 0], None, 3)),
    ("sg.gcn(hidden=0) [model builders]", lambda: sg.gcn(5, 3, hidden=0)),
    ("sg.gcn(hidden=-4) [model builders]", lambda: sg.gcn(5, 3, hidden=-4)),
    ("sg.gcn(dropout_rate=1.5) [model builders]", lambda: sg.gcn(5, 3, dropout_rate=1.5)),
]


def _tiny_state(epoch: int = 1):
    import jax
    import jax.numpy as jnp

    from sparsegcn.train import init_state, make_optimizer

    model = sg.mlp(3, 2, hidden=4)
    tx = make_optimizer(TrainConfig(epochs=5))
    state = jax.vmap(lambda k: init_state(model, tx, k))(jax.random.split(jax.random.key(0), 1))
    return state._replace(epoch=jnp.full((1,), epoch, jnp.int32))


def _api_case(name, fn):
    def run(tmp):
        if fn is not None:
            result = api(fn)
        elif name.startswith("load('cora'"):
            (tmp / "root").mkdir()
            result = api(lambda: load("cora", tmp / "root", download=False))
        elif name == "save_checkpoint(keep=0)":
            result = api(lambda: save_checkpoint(tmp, _tiny_state(), seeds=[0], keep=0))
        elif name.startswith("save_checkpoint(seeds"):
            result = api(lambda: save_checkpoint(tmp, _tiny_state(), seeds=[0, 1]))
        elif name.startswith("save_checkpoint(metadata"):
            result = api(
                lambda: save_checkpoint(tmp, _tiny_state(), seeds=[0], metadata={"x": object()})
            )
        elif name.startswith("save_checkpoint(run_id"):
            result = api(lambda: save_checkpoint(tmp, _tiny_state(), seeds=[0], run_id=5))
        elif name.startswith("CheckpointHook"):
            result = api(lambda: CheckpointHook(tmp, seeds=[0], every=-1))
        elif name.startswith("load_checkpoint"):
            save_checkpoint(tmp, _tiny_state(), seeds=[0])
            import jax

            from sparsegcn.train import init_state, make_optimizer

            other = sg.mlp(3, 2, hidden=8)
            tx = make_optimizer(TrainConfig(epochs=5))
            template = jax.vmap(lambda k: init_state(other, tx, k))(
                jax.random.split(jax.random.key(0), 1)
            )
            result = api(lambda: load_checkpoint(tmp, template))
        else:
            raise AssertionError(name)
        if "[model builders]" in name and result.kind != "clean":
            return Result(
                "open",
                f"{result.kind}: {result.detail} (builders to call _checks.check_hyperparameters)",
            )
        return result

    add("python api", name, run)


for name, fn in API_CASES:
    _api_case(name, fn)


# -- issue 26, class 4: degenerate data is refused, not trained on --------------

DEGENERATE = [
    ("an empty train split", {"split": {**TOY_SPLIT, "train": []}}, "'train' split is empty"),
    ("an empty valid split", {"split": {**TOY_SPLIT, "valid": []}}, "'valid' split is empty"),
    ("an empty test split", {"split": {**TOY_SPLIT, "test": []}}, "'test' split is empty"),
    ("test = train", {"split": {**TOY_SPLIT, "test": [0, 1, 2, 3]}}, "in both the 'train'"),
    ("valid overlapping test", {"split": {**TOY_SPLIT, "valid": [4, 7]}}, "in both the 'valid'"),
    ("a repeated train id", {"split": {**TOY_SPLIT, "train": [0, 1, 1]}}, "more than once"),
    ("num_features: 0", {"features": np.ones((12, 0))}, "num_features: must be >= 1"),
    (
        "zero nodes",
        {"n": 0, "split": {"train": [], "valid": [], "test": []}},
        "num_nodes: must be >= 1",
    ),
]

for _name, _kwargs, _words in DEGENERATE:

    def _degenerate(tmp, kwargs=_kwargs, words=_words):
        folder = toy_ondisk(tmp / "ds", **kwargs)
        return run_cli(["train", "--dataset", str(folder), *FAST], words=words)

    add("degenerate data", f"train on an on-disk dataset with {_name}", _degenerate)


@case("degenerate data", "train synthetic:arxiv --scale 1e-9")
def _(tmp):
    argv = ["train", "--dataset", "synthetic:arxiv", "--scale", "1e-9", "--root", str(tmp)]
    return run_cli([*argv, *FAST], words="empty 'valid' split")


@case("degenerate data", "sweep on a dataset with an empty test split")
def _(tmp):
    folder = toy_ondisk(tmp / "ds", split={**TOY_SPLIT, "test": []})
    argv = ["train", "--dataset", str(folder), "--sweep", "lr=0.01,0.02", *FAST]
    return run_cli(argv, words="'test' split is empty")


@case("degenerate data", "create_model(in_features=0) and (num_classes=0)")
def _(tmp):
    first = api(lambda: sg.create_model("gcn", 0, 2, hidden=4, layers=2, dropout=0.0))
    if first.kind != "clean":
        return first
    return api(lambda: sg.create_model("gcn", 3, 0, hidden=4, layers=2, dropout=0.0))


@case("degenerate data", "fit with an empty validation mask")
def _(tmp):
    n = 6
    graph = sg.Graph(np.arange(n, dtype=np.int32), (np.arange(n, dtype=np.int32) + 1) % n, None, n)
    data = sg.train.NodeData(
        graph,
        np.ones((n, 3), np.float32),
        np.zeros(n, np.int32),
        np.arange(n) < 3,
        np.zeros(n, bool),
        np.arange(n) >= 3,
    )
    model = sg.create_model("gcn", 3, 2, hidden=4, layers=2, dropout=0.0)
    return api(lambda: sg.fit(model, data, TrainConfig(epochs=1)), words="val_mask")


@case("degenerate data", "Dataset(...) with test = train")
def _(tmp):
    from sparsegcn.datasets import Dataset

    n = 6
    graph = sg.Graph(np.arange(n, dtype=np.int32), (np.arange(n, dtype=np.int32) + 1) % n, None, n)
    split = {"train": np.arange(3), "valid": np.array([3]), "test": np.arange(3)}
    return api(
        lambda: Dataset("toy", graph, np.ones((n, 2), np.float32), np.arange(n) % 2, split, 2),
        words="in both",
    )


def ogb_raw(root: Path, *, nan_train_label=False, ragged=False) -> None:
    """A 12-node ogbn-arxiv raw layout (CSV) under ``root/ogbn_arxiv``."""
    import gzip

    folder = root / "ogbn_arxiv"
    n = 12
    rows = {
        "raw/edge.csv.gz": [f"{i},{(i + 1) % n}" for i in range(n)],
        "raw/node-feat.csv.gz": [f"{i},{i % 3},{i % 5}" for i in range(n)],
        "raw/node-label.csv.gz": [str(i % 40) for i in range(n)],
        "raw/num-node-list.csv.gz": [str(n)],
        "raw/num-edge-list.csv.gz": [str(n)],
        "split/time/train.csv.gz": ["0", "1", "2", "3"],
        "split/time/valid.csv.gz": ["4", "5"],
        "split/time/test.csv.gz": ["6", "7", "8"],
    }
    if nan_train_label:
        rows["raw/node-label.csv.gz"][0] = "nan"
    if ragged:
        rows["raw/node-feat.csv.gz"][3] = "3,0"
    for name, lines in rows.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as f:
            f.write("\n".join(lines) + "\n")


def _convert_case(tmp: Path, words: str, **fault) -> Result:
    from sparsegcn.datasets.convert import main as convert_main

    ogb_raw(tmp, **fault)
    out = tmp / "out"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = convert_main(
                ["ogbn-arxiv", "--root", str(tmp), "--out", str(out), "--no-progress"]
            )
        except BaseException as exc:
            return Result("traceback", f"{type(exc).__name__}: {exc}")
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    if rc == 0:
        return Result("silent", "exit 0")
    if len(lines) != 1 or words not in lines[0]:
        return Result("unexpected", f"{len(lines)} lines: {lines[-1] if lines else ''}")
    if out.exists() or [p for p in tmp.iterdir() if p.name.startswith(".")]:
        return Result("lost", "an output or a temporary folder was left")
    return Result("clean", lines[0])


@case("degenerate data", "convert: a NaN label on a train node")
def _(tmp):
    return _convert_case(tmp, "node 0 has no label", nan_train_label=True)


@case("degenerate data", "convert: a ragged feature row (padded with NaN)")
def _(tmp):
    return _convert_case(tmp, "is not finite", ragged=True)


@case("degenerate data", "convert --overwrite with bad data keeps the old dataset")
def _(tmp):
    ogb_raw(tmp / "good")
    from sparsegcn.datasets.convert import convert_ogb

    out = convert_ogb("ogbn-arxiv", tmp / "good", tmp / "out")
    before = snapshot(out)
    ogb_raw(tmp / "bad", ragged=True)
    result = api(lambda: convert_ogb("ogbn-arxiv", tmp / "bad", out, overwrite=True))
    if result.kind == "clean" and snapshot(out) != before:
        return Result("lost", "the old dataset changed")
    return result


# -- issue 26, class 5: what a result depends on is fingerprinted --------------


def _toy_checkpoint(tmp: Path) -> tuple[Path, Path]:
    folder = toy_ondisk(tmp / "ds")
    rc, _, err = cli(["train", "--dataset", str(folder), *FAST, "--checkpoint", str(tmp / "ck")])
    assert rc == 0, err
    return folder, tmp / "ck"


@case("fingerprints", "predict on a same-named dataset with other features")
def _(tmp):
    _, ck = _toy_checkpoint(tmp)
    other = toy_ondisk(tmp / "other", features=np.random.default_rng(1).random((12, 3)))
    argv = ["predict", "--checkpoint", str(ck), "--dataset", str(other)]
    return run_cli([*argv, "--out", str(tmp / "p.npy")], words="the features differ")


@case("fingerprints", "resume on the same folder with a rewired graph")
def _(tmp):
    folder, ck = _toy_checkpoint(tmp)
    shutil.rmtree(folder)
    toy_ondisk(folder, shift=3)  # same name, sizes, labels, splits and features
    argv = ["train", "--dataset", str(folder), *FAST, "--resume", str(ck)]
    return run_cli([*argv, "--epochs", "6"], words="the graph's edges differ")


@case("fingerprints", "predict on the same folder with one feature row changed in place")
def _(tmp):
    folder, ck = _toy_checkpoint(tmp)
    features = np.load(folder / "features.npy")
    features[5] += 1.0
    np.save(folder / "features.npy", features)  # the manifest's sha256 is now stale
    argv = ["predict", "--checkpoint", str(ck), "--out", str(tmp / "p.npy")]
    return run_cli(argv, words="the features differ")


@case("fingerprints", "sgc --feature-cache overwritten with zeros")
def _(tmp):
    cache = tmp / "cache"
    argv = ["train", "--model", "sgc", "--scale", "0.3", *FAST, "--feature-cache", str(cache)]
    rc, _, err = cli([*argv, "--json", str(tmp / "a.json")])
    if rc != 0:
        return Result("false_error", err.strip()[-200:])
    (path,) = cache.iterdir()
    with np.load(path, allow_pickle=False) as npz:
        stored = {k: npz[k] for k in npz.files}
    with open(path, "wb") as f:  # same shape, same key, zeros
        np.savez(f, **dict(stored, features=np.zeros_like(stored["features"])))
    rc, _, err = cli([*argv, "--json", str(tmp / "b.json")])
    if rc != 0:
        return Result("false_error", err.strip()[-200:])
    first, second = (json.loads((tmp / n).read_text())["test_acc"] for n in ("a.json", "b.json"))
    if first != second:
        return Result("silent", f"test acc {first} then {second} from the zeroed cache")
    return Result("correct", f"recomputed: test acc {second} both times")


# -- issue 26, class 1: never delete or replace what sparsegcn did not create ---
# -- issue 26, class 2: a full disk or a changing file never kills silently ---


def _ondisk(tmp: Path, name: str = "ds") -> Path:
    """A small on-disk dataset folder (synthetic:tiny at scale 0.1)."""
    return sg.datasets.save(load("synthetic:tiny", scale=0.1), tmp / name)


def _intact(folder: Path, before: dict, result: Result) -> Result:
    if snapshot(folder) != before:
        return Result("lost", f"{folder.name} changed; {result.kind}: {result.detail}")
    return result


@case("26 replace", "save(overwrite=True) on a folder of the user's files")
def _(tmp):
    target = tmp / "mine"
    target.mkdir()
    (target / "thesis.tex").write_text("years of work")
    (target / "indptr.npy").write_bytes(b"a file named like ours")
    before = snapshot(target)
    dataset = load("synthetic:tiny", scale=0.1)
    result = api(lambda: sg.datasets.save(dataset, target, overwrite=True), words="thesis.tex")
    return _intact(target, before, result)


@case("26 replace", "save(overwrite=True) on a dataset folder holding a user's file")
def _(tmp):
    folder = _ondisk(tmp)
    (folder / "notes.txt").write_text("mine")
    before = snapshot(folder)
    dataset = load("synthetic:tiny", scale=0.1, seed=1)
    result = api(lambda: sg.datasets.save(dataset, folder, overwrite=True), words="notes.txt")
    return _intact(folder, before, result)


@case("26 replace", "save(overwrite=True) replaces a sparsegcn dataset folder")
def _(tmp):
    folder = _ondisk(tmp)
    other = load("synthetic:tiny", scale=0.1, seed=1)
    try:
        sg.datasets.save(other, folder, overwrite=True)
    except Exception as err:
        return Result("false_error", f"{type(err).__name__}: {err}")
    same = np.array_equal(load(str(folder)).features, other.features)
    leftovers = [p.name for p in tmp.iterdir() if p.name != folder.name]
    if not same or leftovers:
        return Result("silent", f"features replaced: {same}; left: {leftovers}")
    return Result("correct", "replaced, nothing left beside it")


@case("26 replace", "synthetic_disk --overwrite on a folder of the user's files")
def _(tmp):
    from sparsegcn.datasets import synthetic_disk

    target = tmp / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    before = snapshot(target)
    argv = ["tiny", "--out", str(target), "--scale", "0.05", "--overwrite", "--no-progress"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = synthetic_disk.main(argv)
    result = judge_cli(rc, err.getvalue().replace("error: ", "synthetic_disk: error: "),
                       expect_error=True, words="not a sparsegcn dataset folder")  # fmt: skip
    return _intact(target, before, result)


@case("26 replace", "ogbn folder with RELEASE_v1.txt but no raw file: no download, no delete")
def _(tmp):
    import importlib.util
    import socket

    if importlib.util.find_spec("ogb") is None:
        return Result("skipped", "needs ogb")
    folder = tmp / "ogbn_arxiv"
    (folder / "raw").mkdir(parents=True)
    (folder / "RELEASE_v1.txt").touch()
    (folder / "notes.txt").write_text("mine")
    before = snapshot(folder)
    connect = socket.socket.connect
    attempts = []

    def refuse(self, address, *args):
        attempts.append(address)
        raise OSError(f"network access refused in this case: {address}")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    try:
        result = api(lambda: load("ogbn-arxiv", tmp), words="has no raw/edge.csv.gz")
    finally:
        socket.socket.connect = connect  # type: ignore[method-assign]
    if attempts:
        return Result("lost", f"tried to download: {attempts[0]}")
    return _intact(folder, before, result)


@case("26 replace", "checkpoint pruning keeps a user's file named like a checkpoint")
def _(tmp):
    user = tmp / "ckpt-000001-0123456789ab.npz"
    user.write_bytes(b"a user's file")
    for epoch in (1, 2, 3):
        save_checkpoint(tmp, _tiny_state(epoch), seeds=[0], keep=1)
    if not user.exists():
        return Result("lost", "pruning removed a file no manifest listed")
    arrays = sorted(p.name for p in tmp.glob("*.npz"))
    if len(arrays) != 2:
        return Result("silent", f"arrays files left: {arrays}")
    return Result("correct", "kept; the run's own old arrays pruned")


@case("26 replace", "train --overwrite with a look-alike ckpt-*.json of the user's")
def _(tmp):
    folder = base_checkpoint(tmp)
    (folder / "ckpt-000099.json").write_text('{"my": "data"}')
    before = snapshot(folder)
    argv = ["train", *FAST, "--checkpoint", str(folder), "--overwrite"]
    return _intact(folder, before, run_cli(argv, words="ckpt-000099.json"))


@case("26 replace", "train --dataset DS --json DS/manifest.json")
def _(tmp):
    folder = _ondisk(tmp)
    before = snapshot(folder)
    argv = ["train", *FAST, "--dataset", str(folder), "--json", str(folder / "manifest.json")]
    return _intact(folder, before, run_cli(argv, words="an input of this run"))


@case("26 replace", "train --checkpoint DS (the dataset folder)")
def _(tmp):
    folder = _ondisk(tmp)
    before = snapshot(folder)
    argv = ["train", *FAST, "--dataset", str(folder), "--checkpoint", str(folder)]
    return _intact(folder, before, run_cli(argv, words="an input of this run"))


@case("26 replace", "predict --dataset DS --embeddings DS/features.npy")
def _(tmp):
    checkpoint = base_checkpoint(tmp)
    folder = _ondisk(tmp)
    before = snapshot(folder)
    argv = [*predict_argv(checkpoint, tmp), "--dataset", str(folder)]
    argv += ["--embeddings", str(folder / "features.npy")]
    return _intact(folder, before, run_cli(argv, words="an input of this run"))


@case("26 replace", "predict --json onto the checkpoint's own manifest")
def _(tmp):
    checkpoint = base_checkpoint(tmp)
    before = snapshot(checkpoint)
    argv = [*predict_argv(checkpoint, tmp), "--json", str(list_checkpoints(checkpoint)[-1])]
    return _intact(
        checkpoint, before, run_cli(argv, words="names one of the files the folder of --checkpoint")
    )


@case("26 replace", "predict --out a symbolic link to the checkpoint's arrays")
def _(tmp):
    checkpoint = base_checkpoint(tmp)
    before = snapshot(checkpoint)
    link = tmp / "p.npy"
    link.symlink_to(checkpoint / read_manifest(checkpoint)["arrays"])
    argv = ["predict", "--checkpoint", str(checkpoint), "--out", str(link)]
    return _intact(
        checkpoint, before, run_cli(argv, words="names one of the files the folder of --checkpoint")
    )


@case("26 replace", "info --json on a character device (root: mknod) stays a device")
def _(tmp):
    import stat

    device = tmp / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError:
        return Result("skipped", "mknod needs root")
    folder = _ondisk(tmp)
    result = run_cli(["info", "--dataset", str(folder), "--json", str(device)], expect_error=False)
    if not stat.S_ISCHR(os.stat(device).st_mode):
        return Result("lost", "the device was replaced by a regular file")
    return result


@case("26 replace", "info --json /dev/null works (any user)")
def _(tmp):
    folder = _ondisk(tmp)
    return run_cli(["info", "--dataset", str(folder), "--json", os.devnull], expect_error=False)


@case("26 replace", "info --json on a FIFO with a reader: written in place")
def _(tmp):
    import stat

    fifo = tmp / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        folder = _ondisk(tmp)
        result = run_cli(
            ["info", "--dataset", str(folder), "--json", str(fifo)], expect_error=False
        )
        try:
            got = os.read(reader, 1 << 16)
        except BlockingIOError:
            got = b""
    finally:
        os.close(reader)
    if not stat.S_ISFIFO(os.stat(fifo).st_mode):
        return Result("lost", "the FIFO was replaced by a regular file")
    if result.kind == "correct" and b'"num_nodes"' not in got:
        return Result("silent", "nothing reached the reader")
    return result


@case("26 replace", "info --json on a FIFO nobody reads: refused, no hang")
def _(tmp):
    fifo = tmp / "pipe"
    os.mkfifo(fifo)
    folder = _ondisk(tmp)
    return run_cli(
        ["info", "--dataset", str(folder), "--json", str(fifo)], words="no process reads"
    )


@case("26 replace", "info --json on a socket: refused, kept")
def _(tmp):
    import socket
    import stat

    path = tmp / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        folder = _ondisk(tmp)
        result = run_cli(["info", "--dataset", str(folder), "--json", str(path)], words="socket")
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return Result("lost", "the socket was replaced")
        return result
    finally:
        server.close()


@contextlib.contextmanager
def small_disk(tmp: Path, size: str = "4m"):
    """A ``size`` tmpfs mounted under ``tmp`` (root only), or ``None``."""
    folder = tmp / "disk"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        yield None
        return
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


_BIG_SAVE = """
import sys, numpy as np
from sparsegcn.datasets import Dataset, save
from sparsegcn.graph import Graph
n = 20000
ids = np.arange(n, dtype=np.int32)
graph = Graph(ids, np.roll(ids, 1), None, n)
split = {"train": ids[:10], "valid": ids[10:20], "test": ids[20:30]}
dataset = Dataset(name="big", graph=graph, features=np.ones((n, 64), np.float32),
                  labels=np.zeros(n, np.int64), split=split, num_classes=2)
try:
    save(dataset, sys.argv[1])
except OSError as err:
    print(f"save: error: {err}", file=sys.stderr)
    sys.exit(1)
"""


def _python(code: str, *args: str, timeout: int = 300) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-c", code, *args], env=env(), capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    return done.returncode, done.stderr


def _crash_or(rc: int, err: str, **judge) -> Result:
    if rc < 0:
        return Result("traceback", f"killed by signal {signal.Signals(-rc).name}")
    return judge_cli(rc, err, **judge)


@case("26 disk", "save() of a 5 MB dataset on a 4 MiB tmpfs: OSError, no SIGBUS, no temp")
def _(tmp):
    with small_disk(tmp) as disk:
        if disk is None:
            return Result("skipped", "mounting a tmpfs needs root")
        rc, err = _python(_BIG_SAVE, str(disk / "out"))
        result = _crash_or(rc, err, expect_error=True, words="No space left")
        left = sorted(p.name for p in disk.iterdir())
    if result.kind == "clean" and left:
        return Result("unexpected", f"left behind: {left}")
    return result


@case("26 disk", "synthetic_disk on a 4 MiB tmpfs: one line, no SIGBUS, no temp")
def _(tmp):
    with small_disk(tmp) as disk:
        if disk is None:
            return Result("skipped", "mounting a tmpfs needs root")
        argv = ["-m", "sparsegcn.datasets.synthetic_disk", "arxiv", "--scale", "0.1"]
        argv += ["--out", str(disk / "out"), "--no-progress"]
        done = subprocess.run([sys.executable, *argv], env=env(), capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        err = done.stderr.replace("error: ", "synthetic_disk: error: ", 1)
        result = _crash_or(done.returncode, err, expect_error=True, words="No space left")
        left = sorted(p.name for p in disk.iterdir())
    if result.kind == "clean" and left:
        return Result("unexpected", f"left behind: {left}")
    return result


@case("26 disk", "kill -9 of synthetic_disk, then a rerun: no temp folder left")
def _(tmp):
    out = tmp / "out"
    argv = [sys.executable, "-m", "sparsegcn.datasets.synthetic_disk", "arxiv", "--scale", "0.2"]
    argv += ["--out", str(out), "--no-progress"]
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if any(p.name.startswith(".out.") for p in tmp.iterdir()):
            break
        time.sleep(0.01)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if out.exists():
        return Result("skipped", "finished before the kill")
    done = subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return Result("false_error", done.stderr.strip()[-200:])
    left = sorted(p.name for p in tmp.iterdir() if p.name != "out")
    if left:
        return Result("unexpected", f"left behind for good: {left}")
    return Result("correct", "the killed run's temp folders were removed by the rerun")


_TRUNCATE = """
import os, sys, numpy as np
from pathlib import Path
folder = Path(sys.argv[1])
np.save(folder / "f.npy", np.ones((4000, 64), np.float32))
np.save(folder / "i.npy", np.arange(4000, dtype=np.int32))
from sparsegcn.sampling.feature_store import HostFeatureStore
from sparsegcn.sampling.host import HostCSR
store = HostFeatureStore(np.load(folder / "f.npy", mmap_mode="r"), 8, threads=1)
csr = HostCSR.from_arrays(np.arange(4001), np.load(folder / "i.npy", mmap_mode="r"))
rows = np.array([0, 3999])
store.gather(rows, 2); csr.read(rows)
os.truncate(folder / sys.argv[2], 4096)
try:
    store.gather(rows, 2) if sys.argv[2] == "f.npy" else csr.read(rows)
except OSError as err:
    print(f"run: error: {err}", file=sys.stderr)
    sys.exit(1)
"""


@case("26 disk", "features file truncated under a host-store run: error, not SIGBUS")
def _(tmp):
    rc, err = _python(_TRUNCATE, str(tmp), "f.npy")
    return _crash_or(rc, err, expect_error=True, words="shrank")


@case("26 disk", "indices file truncated under a host-sampled run: error, not SIGBUS")
def _(tmp):
    rc, err = _python(_TRUNCATE, str(tmp), "i.npy")
    return _crash_or(rc, err, expect_error=True, words="shrank")


_TRUNCATE_LOADED = """
import os, sys
import sparsegcn as sg
from sparsegcn.experiment import node_data
folder = sg.datasets.save(sg.datasets.load("synthetic:tiny", scale=0.1), sys.argv[1])
dataset = sg.datasets.load(str(folder))
os.truncate(folder / "features.npy", 128)
try:
    node_data(dataset)
except OSError as err:
    print(f"run: error: {err}", file=sys.stderr)
    sys.exit(1)
"""


@case("26 disk", "features truncated between loading and training: error, not SIGBUS")
def _(tmp):
    rc, err = _python(_TRUNCATE_LOADED, str(tmp / "ds"))
    return _crash_or(rc, err, expect_error=True, words="shrank")


@case("26 disk", "a dataset folder follows the umask (022: readable by others)")
def _(tmp):
    old = os.umask(0o022)
    try:
        folder = _ondisk(tmp)
    finally:
        os.umask(old)
    mode = folder.stat().st_mode & 0o777
    if mode != 0o755:
        return Result("silent", f"mode {oct(mode)}")
    return Result("correct", "mode 0o755")


# -- 10. only regular files are read, nothing waits forever (issue 26, 3 and 10) -

HANG_S = 180  # a case still running after this long is a hang


def sub_judged(argv, *, expect_error=True, words=None, extra_env=None, timeout=HANG_S) -> Result:
    """``python -m sparsegcn argv`` in a subprocess (a hang cannot stall the table)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sparsegcn", *argv],
            env=dict(env(), **(extra_env or {})),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return Result("hang", f"no answer in {timeout} s")
    return judge_cli(done.returncode, done.stderr, expect_error=expect_error, words=words)


def tiny_ondisk(tmp: Path) -> Path:
    """A 6-node on-disk dataset (a path graph, 2 features, 2 classes)."""
    from sparsegcn.datasets.base import Dataset
    from sparsegcn.datasets.ondisk import save

    senders = np.array([0, 1, 1, 2, 2, 3, 3, 4, 4, 5])
    receivers = np.array([1, 0, 2, 1, 3, 2, 4, 3, 5, 4])
    dataset = Dataset(
        name="tiny",
        graph=sg.Graph(senders, receivers, None, 6),
        features=np.arange(12, dtype=np.float32).reshape(6, 2),
        labels=np.array([0, 0, 0, 1, 1, 1]),
        split={"train": np.array([0, 5]), "valid": np.array([1, 4]), "test": np.array([2, 3])},
        num_classes=2,
        num_edges=5,
    )
    return save(dataset, tmp / "tiny")


def _replace(path: Path, by: str) -> None:
    """Puts a FIFO (``by="fifo"``) or a link to a device (``by="/dev/zero"``) at ``path``."""
    path.unlink(missing_ok=True)
    if by == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(by)


for _name in ("manifest.json", "indptr.npy", "indices.npy", "features.npy", "labels.npy"):
    for _by in ("fifo", "/dev/zero"):
        # Not named _ondisk: that name is the dataset-folder helper the issue-26 cases call.
        def _special_file(tmp, name=_name, by=_by):
            folder = tiny_ondisk(tmp)
            _replace(folder / name, by)
            return sub_judged(
                ["info", "--dataset", str(folder), "--no-progress"], words="not a regular file"
            )

        add("regular files", f"on-disk {_name} is {_by}", _special_file)


@case("regular files", "info --verify: a FIFO in place of test.npy is not 'missing'")
def _(tmp):
    folder = tiny_ondisk(tmp)
    _replace(folder / "test.npy", "fifo")
    return sub_judged(
        ["info", "--dataset", str(folder), "--verify", "--no-progress"], words="not a regular file"
    )


@case("regular files", "on-disk manifest.json nested 100,000 deep")
def _(tmp):
    folder = tiny_ondisk(tmp)
    (folder / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    return sub_judged(["info", "--dataset", str(folder), "--no-progress"], words="nested more than")


@case("regular files", "on-disk manifest.json: an object nested 70 deep")
def _(tmp):
    folder = tiny_ondisk(tmp)
    (folder / "manifest.json").write_text('{"a":' * 70 + "1" + "}" * 70)
    return sub_judged(["info", "--dataset", str(folder), "--no-progress"], words="nested more than")


for _part in ("ind.cora.x", "ind.cora.graph", "ind.cora.test.index"):
    for _by in ("fifo", "/dev/zero"):

        def _cora(tmp, part=_part, by=_by):
            root = cora_copy(tmp)
            _replace(root / "planetoid" / part, by)
            return sub_judged(info(root), words="not a regular file")

        add("regular files", f"cora {_part} is {_by}", needs_cora(_cora))


def _checkpoint_case(what: str):
    def run(tmp):
        folder = base_checkpoint(tmp)
        manifest = list_checkpoints(folder)[-1]
        target = {
            "manifest": manifest,
            "arrays": folder / json.loads(manifest.read_text())["arrays"],
        }[what]
        _replace(target, "fifo")
        return sub_judged(predict_argv(folder, tmp), words="not a regular file")

    add("regular files", f"predict: the checkpoint's {what} file is a FIFO", run)


_checkpoint_case("manifest")
_checkpoint_case("arrays")


@case("regular files", "train --checkpoint: the folder's .lock is a FIFO")
def _(tmp):
    folder = tmp / "ck"
    folder.mkdir()
    _replace(folder / ".lock", "fifo")
    return sub_judged(["train", *FAST, "--checkpoint", str(folder)], words="not a regular file")


@case("downloads", "a body trickling a byte every 0.2 s (min_rate 100 B/s over 1 s)")
def _(tmp):
    with serve({"/b": ("trickle", 0.2, b"x" * 50)}) as (_, url):
        tick = time.perf_counter()
        result = api(
            lambda: download_file(f"{url}/b", tmp / "b", sha256=None, timeout=1, min_rate=100),
            words="stalled",
        )
        if result.kind == "clean" and time.perf_counter() - tick > 5:
            return Result("hang", f"cut off after {time.perf_counter() - tick:.1f} s")
    return result


@case("downloads", "headers trickling a byte every 0.2 s (default min_rate, timeout 1 s)")
def _(tmp):
    with serve({"/b": ("trickle-headers", 0.2)}) as (_, url):
        return api(lambda: download_file(f"{url}/b", tmp / "b", sha256=None, timeout=1))


@case("downloads", "a download past its deadline")
def _(tmp):
    with serve({"/b": ("trickle", 0.05, b"x" * 100)}) as (_, url):
        return api(
            lambda: download_file(f"{url}/b", tmp / "b", sha256=None, timeout=1, deadline=0.5),
            words="deadline of 0.5 s",
        )


def _bomb(mib: int = 200, members: int = 0) -> bytes:
    """A zip of ``mib`` MiB of zeros in one member (~1 KiB per MiB), or of ``members``
    empty members."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        if mib:
            with zf.open("arxiv/raw/zeros.bin", "w", force_zip64=True) as f:
                block = bytes(1 << 20)
                for _ in range(mib):
                    f.write(block)
        for i in range(members):
            zf.writestr(f"arxiv/{i}", b"")
    return buffer.getvalue()


_archive_case("a zip bomb: 200 MiB of zeros in ~200 KiB", _bomb, words="refusing to extract")
_archive_case(
    "an archive of 20,000 empty members",
    lambda: _bomb(0, 20_000),
    words="refusing to extract 20000 files",
)


@case("resources", "train --model sage --fanouts 2147483648 (refused before reading)")
def _(tmp):
    return run_cli(
        ["train", *FAST, "--dataset", str(tmp / "none"), "--model", "sage", "--fanouts",
         "2147483648"],
        words="fanouts[0] must be <= 2**31 - 1",
    )  # fmt: skip


@case("resources", "cora gcn --seeds 10000 (memory estimate)")
def _(tmp):
    if DATA is None:
        return Result("skipped", "no shared Cora")
    argv = ["train", *FAST, "--dataset", "cora", "--root", str(DATA), "--seeds", "10000"]
    return sub_judged(argv, words="needs an estimated")


@case("resources", "cora sage --fanouts 100000,100000 --seeds 8 (memory estimate, ~210 GiB)")
def _(tmp):
    if DATA is None:
        return Result("skipped", "no shared Cora")
    argv = ["train", *FAST, "--dataset", "cora", "--root", str(DATA), "--model", "sage"]
    argv += ["--fanouts", "100000,100000", "--seeds", "8"]
    return sub_judged(argv, words="needs an estimated")


@case("resources", "cora sage --fanouts 100000 trains, lowered to the max in-degree 168")
def _(tmp):
    if DATA is None:
        return Result("skipped", "no shared Cora")
    report = tmp / "r.json"
    argv = ["train", *FAST, "--dataset", "cora", "--root", str(DATA), "--model", "sage"]
    result = sub_judged([*argv, "--fanouts", "100000", "--json", str(report)], expect_error=False)
    if result.kind == "correct":
        fanouts = json.loads(report.read_text())["config"]["fanouts"]
        if fanouts != "168":
            return Result("silent", f"fanouts {fanouts!r}, expected '168'")
    return result


@case("x64", "JAX_ENABLE_X64=1 train cora --model sage (the documented advice)")
def _(tmp):
    if DATA is None:
        return Result("skipped", "no shared Cora")
    argv = ["train", *FAST, "--dataset", "cora", "--root", str(DATA), "--model", "sage"]
    return sub_judged(argv, expect_error=False, extra_env={"JAX_ENABLE_X64": "1"})


@case("x64", "JAX_ENABLE_X64=1 train cora --model gcn")
def _(tmp):
    if DATA is None:
        return Result("skipped", "no shared Cora")
    argv = ["train", *FAST, "--dataset", "cora", "--root", str(DATA)]
    return sub_judged(argv, expect_error=False, extra_env={"JAX_ENABLE_X64": "1"})


# -- 10. graph datasets (tu:NAME) -------------------------------------------


def _tu_folder(tmp: Path, **changes) -> Path:
    """A three-graph TU folder ``tmp/root/tu/MINI`` with ``changes`` replacing files."""
    files = {
        "A": "1, 2\n2, 1\n4, 5\n5, 4\n",
        "graph_indicator": "1\n1\n2\n2\n2\n3\n",
        "graph_labels": "1\n-1\n1\n",
        **changes,
    }
    folder = tmp / "root" / "tu" / "MINI"
    folder.mkdir(parents=True)
    for suffix, text in files.items():
        (folder / f"MINI_{suffix}.txt").write_text(text)
    return tmp / "root"


def _train_tu(root: Path, *extra: str) -> list[str]:
    return ["train", "--dataset", "tu:MINI", "--root", str(root), "--model", "gin", *extra]


@case("graph datasets", "tu: an edge line with one value")
def _(tmp):
    root = _tu_folder(tmp, A="1, 2\n2\n")
    return run_cli(_train_tu(root, "--no-progress"), words="MINI_A.txt line 2")


@case("graph datasets", "tu: an edge joining two graphs")
def _(tmp):
    root = _tu_folder(tmp, A="1, 2\n2, 3\n")
    return run_cli(_train_tu(root, "--no-progress"), words="joins graphs 1 and 2")


@case("graph datasets", "tu: more folds than graphs")
def _(tmp):
    root = _tu_folder(tmp)
    return run_cli(
        _train_tu(root, "--folds", "10", "--no-progress"),
        words="(--folds) must be at most the number of graphs",
    )


@case("graph datasets", "--folds on a node dataset")
def _(tmp):
    return run_cli(["train", *FAST, "--folds", "5"], words="applies only to graph-level datasets")


# -- 11. names, options that do not apply, one-line faults, valid outputs (issue 26) --


def _sub_env(argv, extra: dict, *, close_stderr=False, timeout=600) -> tuple[int, str, str]:
    """``python -m sparsegcn argv`` with ``extra`` in its environment (``None`` unsets);
    with ``close_stderr``, file descriptor 2 closed (``2>&-``)."""
    environment = env()
    for key, value in extra.items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    done = subprocess.run(
        [sys.executable, "-m", "sparsegcn", *argv],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if close_stderr else subprocess.PIPE,
        text=True,
        timeout=timeout,
        preexec_fn=(lambda: os.close(2)) if close_stderr else None,
    )
    return done.returncode, done.stdout, done.stderr or ""


@contextlib.contextmanager
def _chdir(folder: Path):
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _environ(**values):
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@case("names", "'cora' with a ./cora folder holding a manifest in the working directory")
def _(tmp):
    if DATA is None:
        return Result("skipped", "no shared data")
    (tmp / "cora").mkdir()
    (tmp / "cora" / "manifest.json").write_text("{}")
    with _chdir(tmp):
        try:
            dataset = load("cora", DATA, download=False)
        except Exception as err:
            return Result("false_error", f"{type(err).__name__}: {err}")
    if dataset.num_nodes != 2708:
        return Result("silent", f"loaded {dataset!r}")
    return Result("correct", "the Planetoid dataset, not the folder")


@case("names", "a bare folder name is refused with a hint to write ./NAME")
def _(tmp):
    (tmp / "mydata").mkdir()
    (tmp / "mydata" / "manifest.json").write_text("{}")
    with _chdir(tmp):
        return api(lambda: load("mydata"), words="./mydata")


@case("names", "train --dataset ./folder reads the folder (named as given)")
def _(tmp):
    with _chdir(tmp):
        return run_cli(["train", *FAST, "--dataset", "./nosuch"], words="nosuch")


for _value, _expect in (("no", "hidden must be"), ("off", "hidden must be"), ("", "hidden must be"),
                        ("maybe", "is not a switch"), ("2", "is not a switch")):  # fmt: skip

    def _debug_case(tmp, value=_value, expect=_expect):
        with _environ(SPARSEGCN_DEBUG=value):
            return run_cli(["train", "--hidden", "0"], words=expect)

    add("names", f"SPARSEGCN_DEBUG={_value!r} train --hidden 0", _debug_case)


for _name in ("SPARSEGCN_KEEP_FREED_MEMORY", "SPARSEGCN_XLA_TUNING"):

    def _switch_case(tmp, name=_name):
        rc, _, err = _sub_env(["train", "--hidden", "0"], {name: "sometimes"})
        return judge_cli(rc, err, expect_error=True, words=f"{name}='sometimes'")

    add("names", f"{_name}=sometimes (subprocess)", _switch_case)


NOT_APPLYING_ARGV = [
    ["--batch-size", "7"],
    ["--batch-size", "512"],
    ["--sampler", "dedup"],
    ["--model", "gat", "--sampler", "dedup"],
    ["--model", "sage", "--fanouts", "none", "--batch-size", "7"],
    ["--model", "sage", "--dedup-caps", "50,100"],
    ["--features-on", "host"],
    ["--features-on", "device"],
    ["--graph-on", "host"],
    ["--max-batches", "2"],
    ["--keep", "5"],
    ["--checkpoint-every", "10"],
    ["--overwrite"],
    ["--divergence-factor", "0", "--divergence-epochs", "4"],
    ["--model", "gat", "--residual"],
    ["--model", "gcn", "--feature-cache", "cache"],
    ["--model", "mlp", "--fanouts", "5,5"],
    ["--model", "gcn", "--heads", "4"],
    ["--dataset", "./folder", "--root", "data"],
    ["--dataset", "./folder", "--scale", "0.5"],
    ["--sweep", "batch_size=64,128"],
]

for _argv in NOT_APPLYING_ARGV:
    add(
        "applicability",
        "train " + " ".join(_argv),
        lambda tmp, a=_argv: run_cli(["train", *FAST, *a], words="appl"),
    )

for _argv in (["--scale", "0.5"], ["--seed", "3"], ["--verify"]):
    add(
        "applicability",
        "info --dataset cora " + " ".join(_argv),
        lambda tmp, a=_argv: run_cli(
            ["info", "--dataset", "cora", "--root", str(tmp), "--no-progress", *a],
            words="applies only to",
        ),
    )


@case("applicability", "train sage --fanouts 3,2 --batch-size 64 --sampler dedup (control)")
def _(tmp):
    argv = ["--model", "sage", "--fanouts", "3,2", "--batch-size", "64", "--sampler", "dedup"]
    return run_cli(["train", *FAST, *argv, "--dedup-caps", "200,400"], expect_error=False)


def _convert_cli(argv) -> tuple[int | None, str, str]:
    from sparsegcn.datasets import convert

    return cli(argv, convert.main)


def _raw_arxiv(tmp: Path, edges: bytes) -> Path:
    import gzip

    raw = tmp / "root" / "ogbn_arxiv" / "raw"
    raw.mkdir(parents=True)
    (raw / "num-node-list.csv.gz").write_bytes(gzip.compress(b"3\n"))
    (raw / "num-edge-list.csv.gz").write_bytes(gzip.compress(b"300\n"))
    (raw / "edge.csv.gz").write_bytes(edges)
    return raw


def _good_edges() -> bytes:
    import gzip

    return gzip.compress("".join(f"{i % 3},{(i + 1) % 3}\n" for i in range(300)).encode())


for _label, _damage, _words in (
    ("truncated", lambda g: g[: len(g) // 2], "truncated"),
    ("corrupt", lambda g: g[:10] + b"\xff" * 40 + g[50:], "corrupt"),
    ("not gzip", lambda g: b"0,1\n1,2\n", "not a gzip file"),
    ("empty", lambda g: b"", "edge.csv.gz"),
    ("text rows", lambda g: __import__("gzip").compress(b"a,b\nc,d\n"), "edge.csv.gz"),
):

    def _raw_edges_case(tmp, damage=_damage, words=_words):
        raw = _raw_arxiv(tmp, damage(_good_edges()))
        argv = ["ogbn-arxiv", "--root", str(tmp / "root"), "--out", str(tmp / "out")]
        rc, _, err = _convert_cli([*argv, "--no-progress"])
        result = judge_cli(rc, err, expect_error=True, words=words)
        if result.kind == "clean" and str(raw / "edge.csv.gz") not in err:
            return Result("unexpected", f"the file is not named: {err.strip()}")
        return result

    add("one-line faults", f"convert: edge.csv.gz {_label}", _raw_edges_case)


@case("one-line faults", "convert: papers100M data.npz that is not a zip")
def _(tmp):
    raw = tmp / "ogbn_papers100M" / "raw"
    raw.mkdir(parents=True)
    (raw / "data.npz").write_text("not a zip")
    argv = ["ogbn-papers100M", "--root", str(tmp), "--out", str(tmp / "out"), "--no-progress"]
    rc, _, err = _convert_cli(argv)
    return judge_cli(rc, err, expect_error=True, words="data.npz: not a zip archive")


@case("one-line faults", "train 2>&- (stderr closed, progress bar on)")
def _(tmp):
    rc, out, _ = _sub_env(["train", "--epochs", "3", "--patience", "0"], {}, close_stderr=True)
    if rc == 0 and "test acc" in out:
        return Result("correct", "exit 0, report on stdout")
    return Result("traceback", f"exit {rc}")


@case("one-line faults", "train --hidden 0 2>&- (exit status still tells)")
def _(tmp):
    rc, _, _ = _sub_env(["train", "--hidden", "0"], {}, close_stderr=True)
    return Result("clean", "exit 2") if rc == 2 else Result("traceback", f"exit {rc}")


for _platforms in ("cuda", "tpu", "nosuch"):

    def _platform_case(tmp, platforms=_platforms):
        rc, _, err = _sub_env(["train", *FAST], {"JAX_PLATFORMS": platforms})
        return judge_cli(rc, err, expect_error=True, words="JAX could not initialise")

    add("one-line faults", f"JAX_PLATFORMS={_platforms} train", _platform_case)


def _tiny_node_data(labels):
    graph = sg.Graph(np.array([0, 1]), np.array([1, 0]), None, len(labels))
    mask = np.ones(len(labels), bool)
    return sg.NodeData(graph, np.ones((len(labels), 3), np.float32), np.asarray(labels), mask,
                       mask, mask)  # fmt: skip


for _label, _data in (("{'x': 1}", {"x": 1}), ("None", None), ("a list", [1, 2])):
    add(
        "one-line faults",
        f"fit(model, {_label})",
        lambda tmp, d=_data: api(lambda: sg.fit(sg.mlp(3, 2, hidden=4), d), words="NodeData"),
    )

add(
    "one-line faults",
    "fit_sweep(model, {'x': 1})",
    lambda tmp: api(
        lambda: sg.fit_sweep(
            sg.mlp(3, 2, hidden=4), {"x": 1}, TrainConfig(), seeds=[0], points=[{}]
        ),
        words="NodeData",
    ),
)
add(
    "one-line faults",
    "fit of a 3-class model on labels up to 6",
    lambda tmp: api(
        lambda: sg.fit(sg.mlp(3, 3, hidden=4), _tiny_node_data([0, 6, 2, 1])),
        words="num_classes=3",
    ),
)


def _tiny_dataset(num_edges: int = 2):
    from sparsegcn.datasets import Dataset

    senders = np.array([0, 1][:num_edges], np.int64)
    receivers = np.array([1, 0][:num_edges], np.int64)
    return Dataset(
        "tiny",
        sg.Graph(senders, receivers, None, 3),
        np.ones((3, 2), np.float32),
        np.array([0, 1, 0]),
        {"train": np.array([0]), "valid": np.array([1]), "test": np.array([2])},
        num_classes=2,
    )


for _content, _label in ((b'{"a": 1}', "JSON"), (b"1 2 3\n", "text"), (b"", "an empty file")):

    def _npy_case(tmp, content=_content):
        from sparsegcn.datasets import save

        folder = save(_tiny_dataset(), tmp / "ds")
        (folder / "features.npy").write_bytes(content)
        return run_cli(["info", "--dataset", str(folder), "--no-progress"],
                       words="not a NumPy .npy file")  # fmt: skip

    add("one-line faults", f"on-disk features.npy holding {_label}", _npy_case)


@case("one-line faults", "download: the temporary file cannot be created")
def _(tmp):
    import secrets

    from sparsegcn.files import temp_file_path

    saved = secrets.token_hex
    secrets.token_hex = lambda n: "abcd"
    temp_file_path(tmp, "ind.cora.y").mkdir()
    try:
        result = api(lambda: download_file("http://127.0.0.1:9/x", tmp / "ind.cora.y", sha256=None),
                     words=f"cannot write {tmp / 'ind.cora.y'}")  # fmt: skip
    finally:
        secrets.token_hex = saved
    if ".part" in result.detail:
        return Result("unexpected", f"a temporary name: {result.detail}")
    return result


@case("one-line faults", "ogb: a truncated edge.csv.gz is named, not a download prompt")
def _(tmp):
    import importlib.util

    if importlib.util.find_spec("ogb") is None or importlib.util.find_spec("torch") is None:
        return Result("skipped", "no ogb")
    spec = importlib.util.spec_from_file_location("ogb_fake", REPO / "tests/datasets/test_ogb.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = module.write_arxiv(tmp)
    edges = folder / "raw" / "edge.csv.gz"
    edges.write_bytes(edges.read_bytes()[:-12])
    return api(lambda: ogb_module.load_ogb("ogbn-arxiv", tmp), words="edge.csv.gz: truncated")


def _strict_json(path: Path):
    def refuse(word):
        raise ValueError(f"not JSON: {word}")

    return json.loads(path.read_text(), parse_constant=refuse)


@case("outputs", "info --json of a graph without edges (homophily undefined)")
def _(tmp):
    from sparsegcn.datasets import save

    folder = save(_tiny_dataset(num_edges=0), tmp / "ds")
    out = tmp / "info.json"
    result = run_cli(["info", "--dataset", str(folder), "--json", str(out), "--no-progress"],
                     expect_error=False)  # fmt: skip
    if result.kind != "correct":
        return result
    try:
        stats = _strict_json(out)
    except ValueError as err:
        return Result("silent", str(err))
    return Result("correct", f"homophily {stats['homophily']!r}")


@case("outputs", "train --json (timings and metrics strict JSON)")
def _(tmp):
    out = tmp / "r.json"
    result = run_cli(["train", *FAST, "--json", str(out)], expect_error=False)
    if result.kind != "correct":
        return result
    try:
        _strict_json(out)
    except ValueError as err:
        return Result("silent", str(err))
    return result


for _argv in (["--lr", "1e300"], ["--lr", "1e-50"], ["--weight-decay", "1e300"],
              ["--clip-norm", "1e39"], ["--divergence-factor", "1e300"],
              ["--model", "gat", "--value-dropout", "1e-50"]):  # fmt: skip
    add(
        "outputs",
        "train " + " ".join(_argv),
        lambda tmp, a=_argv: run_cli(["train", *FAST, *a], words="not representable in float32"),
    )

add(
    "outputs",
    "TrainConfig(learning_rate=1e300)",
    lambda tmp: api(lambda: TrainConfig(learning_rate=1e300), words="not representable"),
)
add(
    "outputs",
    "fit_sweep point learning_rate=1e300",
    lambda tmp: api(
        lambda: sg.fit_sweep(
            sg.mlp(3, 2, hidden=4),
            _tiny_node_data([0, 1, 0, 1]),
            TrainConfig(),
            seeds=[0],
            points=[{"learning_rate": 1e300}],
        ),
        words="not representable",
    ),
)

for _flags in ("garbage", "--xla_cpu_use_thunk_runtime=true junk", "-xla_foo=1"):

    def _xla_case(tmp, flags=_flags):
        rc, _, err = _sub_env(["train", *FAST], {"XLA_FLAGS": flags})
        result = judge_cli(rc, err, expect_error=True, words="XLA_FLAGS")
        if "ynn_fusion_type" in err:
            return Result("unexpected", f"our own flag is quoted: {err.strip()[:120]}")
        return result

    add("outputs", f"XLA_FLAGS={_flags!r} train", _xla_case)


@case("outputs", "XLA_FLAGS=--xla_nosuch=1: XLA's fatal line names only the user's flag")
def _(tmp):
    rc, _, err = _sub_env(["train", *FAST], {"XLA_FLAGS": "--xla_nosuch=1"})
    lines = [line for line in err.splitlines() if line.strip()]
    if rc == 0:
        return Result("silent", "exit 0")
    if "ynn_fusion_type" in err or not any("XLA_FLAGS" in line for line in lines):
        return Result("unexpected", err.strip()[:150])
    return Result("clean", lines[-1][:150])


# -- running ------------------------------------------------------------------


def main_(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run only the cases whose group or name contains this")
    parser.add_argument("--json", help="write every case's result to this JSON file")
    parser.add_argument("--kills", type=int, default=12, help="kill -9 trials (default 12)")
    args = parser.parse_args(argv)
    try:
        check_outputs({"--json": args.json})
    except (OSError, ValueError) as err:
        parser.error(str(err))
    for trial in range(args.kills):
        add("kill -9", f"kill -9 mid-run, resume (trial {trial + 1})", kill_trial(trial))

    import jax

    jax.devices()  # start the backend (and any warning it logs) before capturing stderr
    os.environ.pop("SPARSEGCN_DEBUG", None)
    selected = [c for c in CASES if not args.only or args.only in c.group or args.only in c.name]
    rows = []
    start = time.perf_counter()
    for i, fault in enumerate(selected, 1):
        tmp = Path(tempfile.mkdtemp(prefix="faults-"))
        tick = time.perf_counter()
        try:
            result = fault.run(tmp)
        except Exception as err:
            result = Result("harness", f"{type(err).__name__}: {err}")
        finally:
            for path in tmp.rglob("*"):
                with contextlib.suppress(OSError):
                    if path.is_dir():
                        path.chmod(0o755)
            shutil.rmtree(tmp, ignore_errors=True)
        seconds = time.perf_counter() - tick
        rows.append({"group": fault.group, "case": fault.name, "kind": result.kind,
                     "detail": result.detail, "seconds": round(seconds, 2)})  # fmt: skip
        print(f"{i:3d} {result.kind:11s} {fault.group:14s} {fault.name[:60]:60s} "
              f"{result.detail[:150]}", flush=True)  # fmt: skip
    for folder in _BASE.values():
        shutil.rmtree(folder.parent, ignore_errors=True)
    counts = Counter(row["kind"] for row in rows)
    tried = len(rows) - counts["skipped"]
    print()
    print(f"cases tried            {tried}  ({counts['skipped']} skipped, "
          f"{time.perf_counter() - start:.0f} s)")  # fmt: skip
    labels = {
        "clean": "clean errors",
        "correct": "correct results",
        "traceback": "tracebacks (goal 0)",
        "unexpected": "unexpected errors (goal 0)",
        "false_error": "false errors (goal 0)",
        "silent": "silent wrong results (goal 0)",
        "lost": "lost data (goal 0)",
        "open": "open (model builders)",
        "harness": "harness failures",
        "hang": "hangs (goal 0)",
    }
    for kind, label in labels.items():
        print(f"{label:30s} {counts[kind]}")
    if args.json:
        text = json.dumps({"counts": dict(counts), "rows": rows}, indent=1)
        write_atomic(args.json, lambda f: f.write(text.encode()))
    bad = sum(
        counts[k]
        for k in ("traceback", "unexpected", "false_error", "silent", "lost", "harness", "hang")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main_())

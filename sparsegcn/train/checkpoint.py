"""Checkpoints of a multi-seed training state: an ``.npz`` plus a JSON manifest.

Format (version 1). A checkpoint directory holds, per saved epoch ``E``:

- ``ckpt-EEEEEE-<sha12>.npz``: the state's leaves as NumPy arrays named
  ``leaf_00000``, ``leaf_00001``, ... in ``jax.tree_util`` flattening order,
  PRNG keys stored as their raw ``uint32`` key data
  (``jax.random.key_data``), plus the per-epoch history as ``history/<metric>``
  ``[epochs, K]``. Only numeric arrays are written (object arrays are
  refused) and files are read with ``allow_pickle=False``.
- ``ckpt-EEEEEE.json``: the manifest, written *after* the arrays; a
  checkpoint exists exactly when its manifest does. It records the format
  name and version, the epoch, the seeds, the arrays file's name, size and
  sha256, one entry per leaf (tree path, shape, dtype and, for keys, the PRNG
  implementation), the history's metric names, and caller ``metadata`` (the
  experiment config and a dataset fingerprint, for ``sparsegcn train``).

A folder belongs to one run. Each manifest records its writer's ``run_id``
(a random hex string a :class:`CheckpointHook` makes, or continues when
resuming); pruning touches only the writer's own checkpoints, and a hook
refuses a folder that holds another run's checkpoints unless told to
``overwrite`` them (it then deletes them once it has written its own first
checkpoint, so a run that fails sooner loses nothing), and refuses a folder holding
a link run's model (:data:`LINK_MODEL_FILES`) in any case. Nothing else is ever
deleted: pruning removes manifests and the arrays files they list (or that
the lock file records as being written, after a ``kill -9``), never a file
that merely has a checkpoint's name. A writer holds an
exclusive ``fcntl.flock`` on ``<folder>/.lock`` (which records its pid)
while it may write, so a second writer is refused with
:class:`CheckpointLockedError` naming the holder, instead of the two
deleting each other's temporary files.

Every file is written atomically (temporary file in the same folder, fsync,
``os.replace``, fsync of the folder), so a crash leaves either the previous
checkpoints or the new one, never a partial file. A checkpoint manifest,
arrays file or link-model file that is a symbolic link is refused before a
run starts, and never written through nor pruned: its file lives in another
place. (A hard link is fine: renaming over or removing one name leaves the
others' copy.) Loading checks the arrays file's size against
the manifest before reading it, reads it once, checks its sha256, decodes
only the members the manifest lists (each header checked against its leaf
entry before any data is decompressed: :func:`~sparsegcn.files.read_npz`),
then checks every leaf's path, shape and dtype against a template state (and the
``expect`` metadata against the manifest's); any mismatch raises
:class:`CheckpointError` naming it, before anything is returned.

orbax-checkpoint was considered and not used: it pulls in tensorstore,
protobuf, absl, etils and a dozen more packages, while a full-batch state is
a few megabytes that NumPy writes in milliseconds, and the compatibility
checks above would still be ours to write.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import fcntl
import hashlib
import io
import json
import math
import os
import re
import stat
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from sparsegcn import _interrupt
from sparsegcn._checks import Bound, check_bound, check_hyperparameter
from sparsegcn.files import (
    CorruptFileError,
    NpySpec,
    fsync_directory,
    json_text,
    make_folders,
    naming_errors,
    open_regular,
    read_json,
    read_npz,
    read_text,
    save_npy_atomic,
    write_atomic,
)
from sparsegcn.train.state import TrainState

FORMAT = "sparsegcn.checkpoint"
FORMAT_VERSION = 1
_MANIFEST = re.compile(r"^ckpt-(\d{6,})\.json$")
_ARRAYS = re.compile(r"^ckpt-(\d{6,})-[0-9a-f]{12}\.npz$")
# write_atomic's temporary files of a manifest or arrays file (mkstemp's 8 characters).
_TEMP = re.compile(r"^\.ckpt-\d{6,}(?:-[0-9a-f]{12}\.npz|\.json)\.[a-z0-9_]{8}\.tmp$")
LOCK_NAME = ".lock"
_PENDING = "arrays "
# What this module writes in a lock file: nothing yet, or the holder's pid and
# one line per arrays file in flight (_rewrite_lock). Anything else is a file of
# someone else's, never overwritten.
_LOCK_TEXT = re.compile(r"(?:\d+\n(?:arrays ckpt-\d{6,}-[0-9a-f]{12}\.npz\n)*)?")
_LOCK_MAX_BYTES = 1 << 16

LINK_MODEL_FILES = ("link-model.json", "link-model.npz")
"""What a link run's ``--checkpoint`` folder holds
(``sparsegcn.tasks.link.save_link_model``), written once, at the end: the
run's settings and seeds, and every seed's final params."""

LINK_MODEL_FORMAT = "sparsegcn-link-model"
"""The ``format`` of a link model's ``link-model.json``."""

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # an .npz is a zip archive (an empty one: 2nd)


def _not_a_link_model(path: Path) -> bool:
    """Whether ``path``, named like one of :data:`LINK_MODEL_FILES`, is no such file: a
    ``link-model.json`` whose ``format`` is not :data:`LINK_MODEL_FORMAT`, or a
    ``link-model.npz`` that is not a zip archive. Reads the manifest (bounded) or
    four bytes."""
    try:
        if path.suffix == ".npz":
            with open_regular(path) as f:  # a FIFO named so is refused, never waited on
                return f.read(4) not in _ZIP_MAGIC
        manifest = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return True
    return not isinstance(manifest, dict) or manifest.get("format") != LINK_MODEL_FORMAT


def folder_of(path: str | os.PathLike) -> str:
    """The folder of a ``--checkpoint``/``--resume`` path: the path itself when it
    is a folder, else the folder of the manifest it names."""
    return str(path) if os.path.isdir(path) else os.path.dirname(os.fspath(path)) or "."


def folder_owns(name: str) -> bool:
    """Whether a run writes or deletes a file named ``name`` in its checkpoint
    folder: a checkpoint's manifest or arrays (or their temporary files), the
    lock, or a link model's files."""
    named = _MANIFEST.match(name) or _ARRAYS.match(name) or _TEMP.match(name)
    return bool(named) or name == LOCK_NAME or name in LINK_MODEL_FILES


FOLDER_KINDS = ("checkpoints", "link-model")
"""What a run keeps in its ``--checkpoint`` folder: this module's checkpoints
(node and graph runs), or a link model (:data:`LINK_MODEL_FILES`). A folder
holds one kind: each refuses a folder holding the other, ``--overwrite`` or not."""


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, truncated or incompatible with this run."""


class CheckpointLockedError(CheckpointError):
    """Another process holds the checkpoint folder's lock (it is writing there).

    Attributes:
      pid: the holder's process id as it recorded it, or ``None`` if unreadable.
    """

    def __init__(self, directory: Path, pid: int | None):
        self.pid = pid
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"checkpoint folder {directory} is in use by {holder} (it holds "
            f"{directory / LOCK_NAME}); wait for that run to end or choose another --checkpoint "
            f"folder"
        )


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint.

    Attributes:
      path: the manifest file it was read from.
      epoch: the epoch it was saved at (the largest epoch over seeds).
      seeds: the integer seeds, in member order (``K`` of them).
      state: the :class:`TrainState`, every leaf with a leading ``[K]`` axis.
      history: per-epoch metrics ``{name: [epochs, K]}`` (NumPy).
      metadata: what the writer stored (for ``sparsegcn train``: ``config``,
        the experiment's fields, and ``dataset``, its fingerprint).
      run_id: the id of the run that wrote it (``None`` for checkpoints
        written before runs had ids).
    """

    path: Path
    epoch: int
    seeds: tuple[int, ...]
    state: TrainState
    history: dict
    metadata: dict
    run_id: str | None = None


# -- the folder's lock and owner ----------------------------------------------

# Folders this process holds the lock of: flock is per open file, so a second
# open in the same process would conflict with the first.
_HELD: dict[Path, int] = {}


def _lock_key(directory: Path) -> Path:
    return directory.resolve()


def _holder_pid(directory: Path, wait_s: float = 0.5) -> int | None:
    """The pid the lock's holder recorded, or ``None`` if unreadable.

    A holder that has just taken the lock (or is rewriting its pending list)
    may not have written its pid yet: the file is read again for up to
    ``wait_s`` seconds before giving up.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            text = read_text(directory / LOCK_NAME).strip()
            if text:
                return int(text.split()[0])
        except (OSError, ValueError, IndexError):
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _pending(directory: Path) -> list[str]:
    """The arrays files a writer recorded in the lock file before writing them.

    The lock file holds the writer's pid, then one ``arrays <name>`` line per
    arrays file written (or replaced) since the last prune: the files a
    ``kill -9`` may leave without a manifest, which the next prune removes.
    Only names recorded there are ever removed as orphans, and only from a
    lock file in the format this module writes (:func:`_lock_records`).
    """
    try:
        with open_regular(directory / LOCK_NAME) as f:
            data = f.read(_LOCK_MAX_BYTES + 1)
    except OSError:
        return []
    return _lock_records(data) or []


def _lock_records(data: bytes) -> list[str] | None:
    """The arrays file names a lock file's contents record, or ``None`` when the
    contents are not what :func:`_rewrite_lock` writes (someone else's file)."""
    if len(data) > _LOCK_MAX_BYTES:
        return None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return None
    if not _LOCK_TEXT.fullmatch(text):
        return None
    return [line[len(_PENDING) :] for line in text.splitlines() if line.startswith(_PENDING)]


def _check_lock_contents(fd: int, path: Path) -> None:
    """Refuses a lock file whose contents this module did not write: it is
    rewritten (truncated) by the next writer, and would be lost."""
    data = os.pread(fd, _LOCK_MAX_BYTES + 1, 0)
    if _lock_records(data) is None:
        size = os.fstat(fd).st_size
        raise CheckpointError(
            f"checkpoint lock {path} holds {size} byte(s) sparsegcn did not write (a "
            f"checkpoint lock holds a process id); it is not overwritten: move it, or choose "
            f"another --checkpoint folder"
        )


def _rewrite_lock(fd: int, path: Path, pending: Sequence[str] = ()) -> None:
    """Writes this process's id and ``pending`` into the held lock file ``path`` (open
    as ``fd``); an error names ``path`` (a full disk)."""
    text = "".join([f"{os.getpid()}\n", *(f"{_PENDING}{name}\n" for name in pending)])
    data = memoryview(text.encode())
    with naming_errors(path):
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        while data:  # a short write (a full disk) would leave a cut line, refused later
            written = os.write(fd, data)
            if written <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            data = data[written:]
        os.fsync(fd)


def _record_pending(directory: Path, name: str) -> None:
    """Adds ``name`` to the held lock file's list of arrays files in flight."""
    fd = _HELD.get(_lock_key(directory))
    if fd is None:
        return
    _rewrite_lock(fd, directory / LOCK_NAME, [*_pending(directory), name])


def _open_lock(directory: Path, flags: int) -> int:
    """Opens the lock file without blocking (a FIFO in its place would wait for a
    writer), refusing anything but a regular file of its own: the lock is rewritten
    (truncated), so a symbolic link or a hard link in its place would have another
    file's contents replaced by a pid."""
    path = directory / LOCK_NAME
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CheckpointError(
                f"checkpoint lock {path} is a symbolic link; remove it (the file it names "
                f"would be overwritten)"
            ) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else "a hard link"
        raise CheckpointError(
            f"checkpoint lock {path} is {what}; remove it (it would be overwritten)"
        )
    return fd


def _is_open_as(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed, not replaced)."""
    try:
        here = os.lstat(path)
    except FileNotFoundError:
        return False
    there = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _unlock(key: Path, fd: int, created: Sequence[Path] = ()) -> None:
    """Releases the lock ``fd`` of folder ``key``. A folder the lock made
    (``created``: it and the parents made for it, deepest first) that holds
    nothing but the lock file, as after a run that failed or was interrupted
    before its first save, is removed, lock file first, while still locked."""
    try:
        if created and os.listdir(key) == [LOCK_NAME] and _is_open_as(fd, key / LOCK_NAME):
            os.unlink(key / LOCK_NAME)
            for folder in created:
                os.rmdir(folder)
    except OSError:
        pass  # not empty (another process wrote there meanwhile) or gone: left as it is
    finally:
        _HELD.pop(key, None)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class FolderLock:
    """An exclusive ``fcntl.flock`` on ``<directory>/.lock``, recording this pid.

    Acquiring never waits: a folder another process holds raises
    :class:`CheckpointLockedError`, and a ``.lock`` holding anything but what
    this module writes there (its holder's pid and arrays files in flight) is
    refused with :class:`CheckpointError`, never overwritten. The lock file is
    left in place on release (removing it would let two processes lock two
    different files), except in a folder the lock made itself and that
    holds nothing else: that folder is removed, so a run that fails or is
    interrupted before its first save leaves nothing behind (and a lock
    taken on a lock file removed so meanwhile is dropped and taken again, on
    the folder's new one). Re-acquiring a folder this process already holds is a no-op lock that
    releases nothing.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self._release: weakref.finalize | None = None

    def acquire(self) -> FolderLock:
        created = make_folders(self.directory)
        key = _lock_key(self.directory)
        if key in _HELD:
            return self
        path = self.directory / LOCK_NAME
        for _ in range(100):
            try:
                fd = self._lock_file()
            except FileNotFoundError:  # its maker removed the folder after we made sure of it
                fd = None
            if fd is not None and _is_open_as(fd, path):
                break
            if fd is not None:  # locked after its maker removed it (_unlock): a stale file
                os.close(fd)
            created = sorted({*created, *make_folders(self.directory)}, key=lambda f: -len(f.parts))
        else:
            raise CheckpointLockedError(self.directory, None)
        try:
            _check_lock_contents(fd, self.directory / LOCK_NAME)
            pending = _pending(self.directory)  # a killed writer's, cleaned up by the next prune
            _rewrite_lock(fd, self.directory / LOCK_NAME, pending)
        except BaseException:
            _unlock(key, fd, created)
            raise
        _HELD[key] = fd
        # Released when the lock (or the hook holding it) is garbage collected,
        # e.g. after training raised, so a long-lived process does not keep it.
        self._release = weakref.finalize(self, _unlock, key, fd, created)
        return self

    def _lock_file(self) -> int:
        """The lock file open and locked (exclusive), or :class:`CheckpointLockedError`."""
        fd = _open_lock(self.directory, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise CheckpointLockedError(self.directory, _holder_pid(self.directory)) from None
            raise
        return fd

    def release(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# CheckpointHook's default run id: make a new one.
NEW_RUN = object()


def new_run_id() -> str:
    """A fresh random run id (32 hex digits)."""
    return uuid.uuid4().hex


def _arrays_of(path: Path) -> str | None:
    """The arrays file a checkpoint manifest lists, or ``None`` for anything else."""
    try:
        manifest = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None
    arrays = manifest.get("arrays")
    return arrays if isinstance(arrays, str) and _ARRAYS.match(arrays) else None


def _manifest_run_id(path: Path) -> tuple[bool, str | None]:
    """``(readable, run_id)`` of a manifest on disk."""
    try:
        manifest = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return False, None
    if not isinstance(manifest, dict):
        return False, None
    run_id = manifest.get("run_id")
    return True, run_id if isinstance(run_id, str) else None


def _epoch_of(path: Path) -> int:
    match = _MANIFEST.match(path.name)
    return int(match.group(1)) if match else -1


def _linked(path: Path) -> str | None:
    """``"a symbolic link"`` (dangling or not) when the entry ``path`` is one, else ``None``.

    Hard links are not refused: a file is replaced by renaming over its name
    and removed by unlinking it, so the other names keep their copy (a
    ``cp -al`` snapshot of the folder, the backup link a killed
    :func:`~sparsegcn.files.write_all_atomic` leaves). Only the lock is
    written in place, and :func:`_open_lock` refuses it hard-linked.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return "a symbolic link" if stat.S_ISLNK(info.st_mode) else None


def _link_refusal(path: Path) -> CheckpointError | None:
    """The error refusing ``path`` as a link (:func:`_linked`), or ``None``.

    A checkpoint folder's files belong to its run alone: a write of a
    symbolic link replaces the file it names, in another folder (another
    run's checkpoint).
    """
    how = _linked(path)
    if how is None:
        return None
    try:
        detail = f"a symbolic link to {os.readlink(path)}; writing it would replace that file"
    except OSError:  # gone or replaced meanwhile: still refused
        detail = how
    return CheckpointError(
        f"{path} is {detail}: a checkpoint folder's files belong to its run alone, so it is "
        f"neither written nor removed; replace it with a copy of the file, remove it, or "
        f"choose another --checkpoint folder"
    )


def _linked_files(directory: str | os.PathLike) -> list[Path]:
    """The checkpoint and link-model files in ``directory`` that are links
    (:func:`_linked`): manifests, arrays files and :data:`LINK_MODEL_FILES`, in name order."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    names = sorted(
        name
        for name in os.listdir(directory)
        if _MANIFEST.match(name) or _ARRAYS.match(name) or name in LINK_MODEL_FILES
    )
    return [directory / name for name in names if _linked(directory / name)]


def foreign_checkpoints(
    directory: str | os.PathLike, run_ids, *, after_epoch: int | None = None
) -> list[Path]:
    """The manifests in ``directory`` not written by one of ``run_ids`` (``None``: no id).

    With ``after_epoch`` (a run resumed from that epoch), the run's own
    checkpoints of later epochs count too: they are another branch of it,
    which the resumed run would mix with its own (its pruning, the folder's
    newest checkpoint). A manifest that is a symbolic link
    (:func:`_linked_files`) is foreign whatever it records: its
    file lives in another place.
    """
    own = set(run_ids)
    foreign = []
    for path in list_checkpoints(directory):
        readable, run_id = _manifest_run_id(path)
        later = after_epoch is not None and _epoch_of(path) > after_epoch
        if not readable or run_id not in own or later or _linked(path):
            foreign.append(path)
    return foreign


def check_checkpoint_folder(
    directory: str | os.PathLike,
    *,
    run_ids=(),
    overwrite: bool = False,
    kind: str = "checkpoints",
    after_epoch: int | None = None,
) -> None:
    """Refuses a checkpoint folder a new writer may not use, without touching it.

    Args:
      directory: the folder (it need not exist).
      run_ids: the runs whose checkpoints the writer may write beside
        (a resumed run's).
      after_epoch: the epoch a resumed run starts from: its run's
        checkpoints of later epochs count as another run's
        (:func:`foreign_checkpoints`).
      overwrite: whether the writer may replace another run's files of
        its own kind (``--overwrite``).
      kind: what the writer keeps there, one of :data:`FOLDER_KINDS`.

    Raises:
      CheckpointLockedError: another process holds the folder's lock.
      CheckpointError: its ``.lock`` holds what this module does not write
        there (someone else's file, which the writer would overwrite); a
        checkpoint manifest, arrays file or link-model file
        there is a symbolic link (:func:`_linked_files`;
        whatever ``overwrite`` says: a write would replace the file it names,
        outside the folder); or the folder holds files of the other kind (whatever
        ``overwrite`` says: neither kind deletes the other's); or
        checkpoints of runs other than ``run_ids`` (a link model, for
        ``"link-model"``) and ``overwrite`` is false; or it is not a folder.
      ValueError: an unknown ``kind``.
    """
    if kind not in FOLDER_KINDS:
        raise ValueError(f"kind must be one of {FOLDER_KINDS}, got {kind!r}")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"checkpoint folder {directory} exists and is not a folder")
    if not directory.is_dir():
        return
    if _lock_key(directory) not in _HELD and (directory / LOCK_NAME).exists():
        try:
            fd = _open_lock(directory, os.O_RDONLY)
        except OSError:
            fd = None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                _check_lock_contents(fd, directory / LOCK_NAME)
            except OSError as err:
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise CheckpointLockedError(directory, _holder_pid(directory)) from None
                raise
            finally:
                os.close(fd)
    for path in _linked_files(directory):
        refusal = _link_refusal(path)
        if refusal is not None:
            raise refusal
    link_files = [name for name in LINK_MODEL_FILES if (directory / name).exists()]
    if kind == "link-model":
        found = list_checkpoints(directory)
        if found:
            raise CheckpointError(
                f"checkpoint folder {directory} holds {len(found)} checkpoint(s) of a node or "
                f"graph run (newest {found[-1].name}); a link model never shares their folder, "
                f"and --overwrite does not remove them: choose another --checkpoint folder"
            )
        lookalikes = [name for name in link_files if _not_a_link_model(directory / name)]
        if lookalikes:  # --overwrite would not help: say so whether or not it was given
            raise CheckpointError(
                f"checkpoint folder {directory} holds {lookalikes[0]}, which is named like a "
                f"link model's file but is not one; --overwrite replaces only a link model: "
                f"move it, or choose another --checkpoint folder"
            )
        if link_files and not overwrite:
            raise CheckpointError(
                f"checkpoint folder {directory} already holds a link model "
                f"({', '.join(link_files)}); pass --overwrite to replace it, or choose "
                f"another --checkpoint folder"
            )
        return
    if link_files:
        raise CheckpointError(
            f"checkpoint folder {directory} holds a link run's model ({', '.join(link_files)}); "
            f"checkpoints never share its folder, and --overwrite does not remove it: choose "
            f"another --checkpoint folder"
        )
    foreign = foreign_checkpoints(directory, run_ids, after_epoch=after_epoch)
    strangers = [path for path in foreign if _arrays_of(path) is None]
    if strangers:  # --overwrite would not help: say so whether or not it was given
        raise CheckpointError(
            f"checkpoint folder {directory} holds {strangers[0].name}, which is named like a "
            f"checkpoint but is not a {FORMAT} manifest; --overwrite replaces only "
            f"checkpoints: move it, or choose another --checkpoint folder"
        )
    if foreign and not overwrite:
        _, other = _manifest_run_id(foreign[-1])
        if other is not None and other in set(run_ids):
            raise CheckpointError(
                f"checkpoint folder {directory} holds {len(foreign)} checkpoint(s) of the "
                f"resumed run after its epoch {after_epoch} (newest {foreign[-1].name}): resumed "
                f"from there, the run would branch from them; pass --overwrite to replace them "
                f"once this run has written its first checkpoint, resume from the newest with "
                f"--resume {directory}, or choose another --checkpoint folder"
            )
        raise CheckpointError(
            f"checkpoint folder {directory} holds {len(foreign)} checkpoint(s) of another run "
            f"(newest {foreign[-1].name}, run {other or 'without an id'}); pass --overwrite to "
            f"replace them, resume that run with --resume {directory}, or choose another "
            f"--checkpoint folder"
        )


# -- atomic files -------------------------------------------------------------


# -- describing trees ---------------------------------------------------------


def _is_key(leaf) -> bool:
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _describe(path, leaf) -> dict:
    entry = {
        "path": jax.tree_util.keystr(path),
        "shape": [int(d) for d in leaf.shape],
        "dtype": str(leaf.dtype),
    }
    if _is_key(leaf) and isinstance(leaf, jax.Array):
        entry["prng_impl"] = str(jax.random.key_impl(leaf))
    return entry


def describe_tree(tree) -> list[dict]:
    """One ``{"path", "shape", "dtype"[, "prng_impl"]}`` entry per leaf, in flattening order.

    Works on arrays and on ``jax.ShapeDtypeStruct`` templates alike; PRNG key
    leaves have a dtype such as ``key<fry>`` and, for concrete keys, the
    implementation's name (``threefry2x32``).
    """
    return [_describe(p, leaf) for p, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


def state_template(init: Callable[[jax.Array], TrainState], num_seeds: int) -> TrainState:
    """The shapes and dtypes of ``vmap(init)`` over ``num_seeds`` keys, computed abstractly.

    Args:
      init: ``init(key) -> TrainState`` for one seed, e.g.
        ``lambda k: init_state(model, tx, k)``.
      num_seeds: ``K``.

    Returns:
      A :class:`TrainState` of ``jax.ShapeDtypeStruct`` leaves (no arrays are built).
    """
    keys = jax.ShapeDtypeStruct((num_seeds,), jax.random.key(0).dtype)
    return jax.eval_shape(jax.vmap(init), keys)


# -- saving -------------------------------------------------------------------


def _history_arrays(history: Mapping | None) -> dict[str, np.ndarray]:
    arrays = {}
    for name, values in (history or {}).items():
        if "/" in name:
            raise ValueError(f"history metric names may not contain '/', got {name!r}")
        # Trainers that keep per-call chunks hand over lists of [chunk, K] arrays.
        arrays[name] = np.concatenate(values) if isinstance(values, list) else np.asarray(values)
    return arrays


def _serialize(state: TrainState, history: dict[str, np.ndarray]) -> tuple[bytes, list[dict]]:
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    leaves, arrays = [], {}
    for i, (path, leaf) in enumerate(flat):
        name = f"leaf_{i:05d}"
        entry = _describe(path, leaf)
        data = jax.random.key_data(leaf) if _is_key(leaf) else leaf
        arrays[name] = np.asarray(data)
        entry["name"] = name
        entry["stored_shape"] = list(arrays[name].shape)
        entry["stored_dtype"] = str(arrays[name].dtype)
        leaves.append(entry)
    for metric, values in history.items():
        arrays[f"history/{metric}"] = values
    for name, array in arrays.items():
        if array.dtype == object:
            raise TypeError(f"checkpoint array {name!r} has dtype object; only numbers are saved")
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)  # numeric arrays only (checked above)
    return buffer.getvalue(), leaves


def _epochs(state: TrainState) -> np.ndarray:
    return np.atleast_1d(np.asarray(state.epoch)).astype(np.int64)


def save_checkpoint(
    directory: str | os.PathLike,
    state: TrainState,
    *,
    seeds: Sequence[int],
    history: Mapping | None = None,
    metadata: Mapping | None = None,
    keep: int | None = None,
    run_id: str | None = None,
    supersedes: Sequence[Path] = (),
) -> Path:
    """Saves ``state`` (leading ``[K]`` axis) as one checkpoint in ``directory``.

    Args:
      directory: the checkpoint folder (created if missing).
      state: the training state of every seed.
      seeds: the ``K`` integer seeds, in member order.
      history: per-epoch metrics ``{name: [epochs, K]}`` to store alongside.
      metadata: JSON-serializable description of the run, stored in the
        manifest and checked on load through ``expect``.
      keep: keep only the newest ``keep`` checkpoints of ``run_id``
        (``None``: keep all); other runs' checkpoints are never pruned.
      run_id: the writing run's id, recorded in the manifest.
      supersedes: manifests (of another run, or another branch of this one)
        to remove once this checkpoint is written, with their arrays; not
        before, so that a run that fails first loses nothing
        (:class:`CheckpointHook` with ``overwrite``).

    Returns:
      The manifest's path. Saving the same epoch of the same run again
      replaces it.

    Raises:
      CheckpointError: the folder holds a link model; or a file by this
        epoch's name that is not a checkpoint manifest, or is another run's
        (and not in ``supersedes``): it is never replaced; or the manifest or
        arrays file to write is a symbolic link (never written through).

    The folder's lock (:class:`FolderLock`) is held while saving (it is
    already held when a :class:`CheckpointHook` saves).
    """
    _interrupt.check()  # a swallowed Ctrl-C: write and remove nothing
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"save_checkpoint: directory must be a path, got {directory!r}")
    if not hasattr(state, "epoch"):
        raise TypeError(
            f"save_checkpoint: state must be a training state with per-member epochs (a "
            f"TrainState), got {type(state).__name__}"
        )
    directory = Path(directory)
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(f"save_checkpoint: seeds must be a sequence of integers, got {seeds!r}")
    seeds = list(seeds)
    for position, seed in enumerate(seeds):  # members may share a seed (folds x seeds)
        check_hyperparameter("seed", seed, label=f"save_checkpoint: seeds[{position}]")
    seeds = [int(s) for s in seeds]
    epochs = _epochs(state)
    if epochs.shape[0] != len(seeds):
        raise ValueError(
            f"state holds {epochs.shape[0]} members but {len(seeds)} seeds were given: {seeds}"
        )
    if keep is not None:
        check_bound("save_checkpoint: keep", keep, Bound(int, low=1), off=(None,))
    epoch = int(epochs.max())
    history = _history_arrays(history)
    for metric, values in history.items():
        if values.ndim != 2 or values.shape[1] != len(seeds):
            raise ValueError(
                f"save_checkpoint: history[{metric!r}] has shape {values.shape}; it must be "
                f"[epochs, K] with K = {len(seeds)} members (one column per seed), or "
                "load_checkpoint would refuse it"
            )
    payload, leaves = _serialize(state, history)
    digest = hashlib.sha256(payload).hexdigest()
    arrays_name = f"ckpt-{epoch:06d}-{digest[:12]}.npz"
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "jax_version": jax.__version__,
        "epoch": epoch,
        "seed_epochs": epochs.tolist(),
        "seeds": seeds,
        "arrays": arrays_name,
        "arrays_bytes": len(payload),
        "arrays_sha256": digest,
        "leaves": leaves,
        "history": sorted(history),
        "metadata": _jsonable(dict(metadata or {})),
        "run_id": run_id,
    }
    if run_id is not None and not isinstance(run_id, str):
        raise TypeError(f"run_id must be a string or None, got {run_id!r}")
    with FolderLock(directory):
        path = directory / f"ckpt-{epoch:06d}.json"
        link_files = [name for name in LINK_MODEL_FILES if (directory / name).exists()]
        if link_files:
            raise CheckpointError(
                f"checkpoint folder {directory} holds a link run's model "
                f"({', '.join(link_files)}); checkpoints never share its folder"
            )
        if path.exists() and path not in supersedes:
            readable, owner = _manifest_run_id(path)
            if not readable or _arrays_of(path) is None:
                raise CheckpointError(
                    f"{path} is named like a checkpoint but is not a {FORMAT} manifest; it is "
                    f"not replaced: move it, or save elsewhere"
                )
            if owner != run_id:
                raise CheckpointError(
                    f"{path} is a checkpoint of run {owner or 'without an id'}, not of run "
                    f"{run_id or 'without an id'}; it is not replaced (pass it in supersedes, "
                    f"or CheckpointHook(overwrite=True), to replace that run's checkpoints)"
                )
        for target in (directory / arrays_name, path):
            refusal = _link_refusal(target)
            if refusal is not None:
                raise refusal
        replaced = _arrays_of(path) if path.exists() else None
        if replaced is not None:  # saving an epoch again orphans its old arrays
            _record_pending(directory, replaced)
        _record_pending(directory, arrays_name)
        write_atomic(directory / arrays_name, lambda f: f.write(payload))
        text = json_text(manifest)
        write_atomic(path, lambda f: f.write(text.encode()))
        _prune(directory, keep, run_id, drop=[p for p in supersedes if p != path])
    return path


def _string_keys(value, where: str = "metadata") -> None:
    """Refuses a mapping key that is not a string: JSON would turn ``1`` into ``"1"``, and
    the checkpoint would no longer match the metadata it was saved with."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"checkpoint {where} keys must be strings (JSON would store {key!r} as "
                    f"{str(key)!r}), got {key!r} ({type(key).__name__})"
                )
            _string_keys(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for position, item in enumerate(value):
            _string_keys(item, f"{where}[{position}]")


def _jsonable(metadata: dict) -> dict:
    _string_keys(metadata)
    try:
        return json.loads(json.dumps(metadata, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise TypeError(f"checkpoint metadata must be plain JSON data: {err}") from None


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The committed checkpoints (manifests) in ``directory``, oldest epoch first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _MANIFEST.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest checkpoint's manifest in ``directory``, or ``None``."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def _prune(directory: Path, keep: int | None, run_id: str | None, drop=()) -> None:
    """Drops ``run_id``'s checkpoints beyond its newest ``keep`` (and the manifests
    ``drop``), then the arrays files they listed and those left in flight.

    Runs under the folder's lock, so no other writer can have arrays or
    temporary files in flight. Only files this code wrote are removed: the
    manifests pruned and the arrays files they list, arrays files the lock
    file records as written (a crash between an arrays file and its
    manifest) and no manifest lists, and ``write_atomic``'s temporary files
    of checkpoint names. A manifest is removed before its arrays, so a crash
    in between leaves a recorded orphan (removed next time), never a
    dangling manifest. Any other file, even one named like a checkpoint,
    stays, and so does any symbolic link (:func:`_linked`) and what
    a linked manifest lists; an arrays file known from the lock file alone
    is removed only when it is a regular file whose contents hash to the
    digest its name records (:func:`_is_orphan`), as every arrays file
    :func:`save_checkpoint` writes does.

    An interrupt recorded by ``sparsegcn._interrupt`` (a Ctrl-C whose
    ``KeyboardInterrupt`` was swallowed) stops it before anything is removed.
    """
    _interrupt.check()
    recorded = set(_pending(directory))
    candidates = set(recorded)
    doomed = list(drop)
    if keep is not None:
        own = [
            p
            for p in list_checkpoints(directory)
            if p not in doomed and _manifest_run_id(p) == (True, run_id)
        ]
        doomed += own[:-keep]
    for manifest in doomed:
        arrays = None if _linked(manifest) else _arrays_of(manifest)
        if arrays is None:
            continue  # not a checkpoint manifest of this folder: not ours to remove
        _record_pending(directory, arrays)
        candidates.add(arrays)
        recorded.discard(arrays)  # listed by a manifest of this folder: known to be ours
        manifest.unlink(missing_ok=True)
    referenced = {_arrays_of(manifest) for manifest in list_checkpoints(directory)}
    for name in candidates - referenced:
        path = directory / name
        if _linked(path) or (name in recorded and not _is_orphan(path)):
            continue
        path.unlink(missing_ok=True)
    for path in directory.iterdir():
        if _TEMP.match(path.name) and path.is_file() and not _linked(path):
            path.unlink(missing_ok=True)
    fd = _HELD.get(_lock_key(directory))
    if fd is not None:
        _rewrite_lock(fd, directory / LOCK_NAME)
    fsync_directory(directory)


def _is_orphan(path: Path) -> bool:
    """Whether ``path``, an arrays file's name the lock file records, is one
    :func:`save_checkpoint` wrote: a regular file whose sha256 starts with the
    12 hex digits its name records."""
    match = _ARRAYS.fullmatch(path.name)
    try:
        if match is None or not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        digest = hashlib.sha256()
        with open_regular(path) as f:
            while block := f.read(1 << 20):
                digest.update(block)
    except OSError:
        return False
    return digest.hexdigest()[:12] == path.name[-16:-4]


# -- loading ------------------------------------------------------------------


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A manifest path from a checkpoint folder (its newest) or a manifest file."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"a checkpoint path must be a str or os.PathLike, got {path!r}")
    path = Path(path)
    if path.is_dir():
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"no checkpoint in {path}: expected ckpt-<epoch>.json files")
        return latest
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if not _MANIFEST.match(path.name):
        raise CheckpointError(
            f"{path} is not a checkpoint manifest (expected a folder or a ckpt-<epoch>.json file)"
        )
    return path


def checkpoint_files(path: str | os.PathLike) -> list[Path]:
    """The files a checkpoint is read from: its manifest and the arrays file it lists."""
    manifest = resolve_checkpoint(path)
    arrays = _arrays_of(manifest)
    return [manifest] if arrays is None else [manifest, manifest.parent / arrays]


def read_manifest(path: str | os.PathLike) -> dict:
    """The validated manifest of a checkpoint (a folder's newest, or a manifest file)."""
    path = resolve_checkpoint(path)
    try:
        manifest = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{path} is not a readable checkpoint manifest: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a {FORMAT} manifest")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format version {version}; this sparsegcn reads version "
            f"{FORMAT_VERSION}"
        )
    required = ("epoch", "seeds", "arrays", "arrays_bytes", "arrays_sha256", "leaves", "history")
    missing = [k for k in required if k not in manifest]
    if missing:
        raise CheckpointError(f"{path} lacks manifest fields {missing}")
    arrays = manifest["arrays"]
    if isinstance(arrays, str) and Path(arrays).name != arrays:
        raise CheckpointError(f"{path} names arrays outside its folder: {arrays!r}")
    _check_manifest_fields(path, manifest)
    manifest["path"] = str(path)
    return manifest


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_seed(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_list_of(value, test) -> bool:
    return isinstance(value, list) and all(test(v) for v in value)


def _is_str(value) -> bool:
    return isinstance(value, str)


def _is_hex64(value) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def _is_leaf(entry) -> bool:
    if not isinstance(entry, dict):
        return False
    shapes = ("shape", "stored_shape")
    texts = ("path", "dtype", "name", "stored_dtype")
    return (
        all(_is_list_of(entry.get(k), _is_count) for k in shapes)
        and all(_is_str(entry.get(k)) for k in texts)
        and _is_str(entry.get("prng_impl", ""))
    )


# Manifest field -> (test, what it must be). Checked before any field is used,
# so a hand-edited or hostile manifest is a CheckpointError naming the field,
# never a TypeError from deep inside the loader.
_MANIFEST_FIELDS = {
    "epoch": (_is_count, "an integer >= 0"),
    "seeds": (lambda v: _is_list_of(v, _is_seed) and len(v) > 0, "a non-empty list of integers"),
    "arrays": (
        lambda v: isinstance(v, str) and _ARRAYS.match(v) is not None,
        "a ckpt-<epoch>-<hash>.npz file name",
    ),
    "arrays_bytes": (_is_count, "an integer >= 0"),
    "arrays_sha256": (_is_hex64, "64 lowercase hex digits"),
    "leaves": (lambda v: _is_list_of(v, _is_leaf), "a list of leaf entries"),
    "history": (lambda v: _is_list_of(v, _is_str), "a list of metric names"),
    "seed_epochs": (lambda v: _is_list_of(v, _is_count), "a list of integers >= 0"),
    "metadata": (lambda v: isinstance(v, dict), "an object"),
    "run_id": (lambda v: v is None or isinstance(v, str), "a string or null"),
}


def _check_manifest_fields(path: Path, manifest: dict) -> None:
    for field, (test, what) in _MANIFEST_FIELDS.items():
        if field in manifest and not test(manifest[field]):
            shown = json.dumps(manifest[field])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise CheckpointError(
                f"{path} is not a valid checkpoint manifest: field {field!r} must be {what}, "
                f"got {shown}"
            )
    for i, entry in enumerate(manifest["leaves"]):
        for key in ("shape", "stored_shape"):
            if math.prod(entry[key]) > 2**40:
                raise CheckpointError(
                    f"{path} is not a valid checkpoint manifest: leaves[{i}].{key} "
                    f"{entry[key]} is absurdly large"
                )


def _stored_specs(manifest: dict) -> dict[str, NpySpec]:
    """The arrays a manifest lists, as :func:`~sparsegcn.files.read_npz` expects them: each
    leaf's ``stored_shape`` and ``stored_dtype``, and each history metric ``[epochs, K]``
    (any numeric dtype; its length bounded by the file's size)."""
    path = manifest["path"]
    specs = {}
    for i, entry in enumerate(manifest["leaves"]):
        try:
            dtype = np.dtype(entry["stored_dtype"])
        except (TypeError, ValueError):
            raise CheckpointError(
                f"{path} is not a valid checkpoint manifest: leaves[{i}].stored_dtype "
                f"{entry['stored_dtype']!r} is not a NumPy dtype"
            ) from None
        specs[entry["name"]] = NpySpec(tuple(entry["stored_shape"]), dtype)
    for metric in manifest["history"]:
        specs[f"history/{metric}"] = NpySpec((None, len(manifest["seeds"])))
    return specs


def _read_arrays(folder: Path, manifest: dict) -> dict[str, np.ndarray]:
    """The arrays of a checkpoint, read once and checked against its manifest.

    The file's size (``fstat``) must be the manifest's ``arrays_bytes``
    before a byte is read (a sparse file of terabytes is refused unread),
    then its sha256 the manifest's ``arrays_sha256``. The members are then
    read by :func:`~sparsegcn.files.read_npz`: exactly the arrays the
    manifest lists (:func:`_stored_specs`), each header checked against its
    entry before its data is decompressed; a member the manifest does not
    list means the file is corrupt.

    Returns:
      ``{name: array}``: ``leaf_NNNNN`` and ``history/<metric>``.

    Raises:
      CheckpointError: naming the file (and the member): unreadable, another
        size or sha256 than the manifest records, or members that are not the
        ones it lists.
    """
    arrays_path = folder / manifest["arrays"]
    specs = _stored_specs(manifest)
    try:
        with open_regular(arrays_path) as f:
            size = os.fstat(f.fileno()).st_size
            if size != manifest["arrays_bytes"]:
                raise CheckpointError(
                    f"checkpoint arrays {arrays_path} are truncated or corrupt: {size} bytes, "
                    f"the manifest says {manifest['arrays_bytes']}"
                )
            payload = f.read(size)
    except OSError as err:
        raise CheckpointError(f"checkpoint arrays {arrays_path} cannot be read: {err}") from None
    if len(payload) != size:
        raise CheckpointError(
            f"checkpoint arrays {arrays_path} are truncated or corrupt: {len(payload)} bytes "
            f"read, the manifest says {manifest['arrays_bytes']}"
        )
    digest = hashlib.sha256(payload).hexdigest()
    if digest != manifest["arrays_sha256"]:
        raise CheckpointError(
            f"checkpoint arrays {arrays_path} are corrupt: sha256 {digest}, the manifest says "
            f"{manifest['arrays_sha256']}"
        )
    try:
        return read_npz(arrays_path, specs, what="checkpoint arrays", data=payload)
    except CorruptFileError as err:
        raise CheckpointError(
            f"checkpoint arrays {err.path} do not match their manifest: {err.cause}"
        ) from None


def _check_expected(manifest: Mapping, expect: Mapping, where: str = "") -> None:
    for key, wanted in expect.items():
        name = f"{where}{key}"
        if key not in manifest:
            raise CheckpointError(
                f"incompatible checkpoint: it records no {name!r}, this run needs {wanted!r}"
            )
        found = manifest[key]
        if isinstance(wanted, Mapping) and isinstance(found, Mapping):
            _check_expected(found, wanted, f"{name}.")
        elif not _same_value(found, wanted) and key in DATA_DIGESTS:
            raise CheckpointError(
                f"incompatible checkpoint: {DATA_DIGESTS[key]} ({name} is {str(found)[:12]}... "
                f"in the checkpoint but {str(wanted)[:12]}... in this run)"
            )
        elif not _same_value(found, wanted):
            raise CheckpointError(
                f"incompatible checkpoint: {name} is {found!r} in the checkpoint but "
                f"{_as_stored(wanted)!r} in this run"
            )


def _as_stored(value):
    """``value`` as the manifest's JSON would hold it (tuples as lists), so that
    a mismatch message shows both sides alike; ``value`` if it is no JSON."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value


def check_metadata(manifest: Mapping, expect: Mapping) -> None:
    """Raises unless a checkpoint's manifest carries ``expect`` in its metadata
    (compared recursively, as :func:`load_checkpoint` does), before any array is read.

    Raises:
      CheckpointError: naming the first entry that is missing or differs.
    """
    _check_expected(manifest.get("metadata", {}), expect, "metadata.")


def _same_value(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _check_leaves(manifest: dict, template, arrays: dict[str, np.ndarray]) -> list:
    expected = describe_tree(template)
    stored = manifest["leaves"]
    if len(stored) != len(expected):
        raise CheckpointError(
            f"incompatible checkpoint: it holds {len(stored)} state arrays, this model's state "
            f"has {len(expected)} (another model, optimizer or clipping setting?)"
        )
    values = []
    for entry, want in zip(stored, expected, strict=True):
        for field in ("path", "shape", "dtype"):
            if entry.get(field) != want.get(field):
                raise CheckpointError(
                    f"incompatible checkpoint: state leaf {want['path']} has {field} "
                    f"{entry.get(field)!r} in the checkpoint but {want.get(field)!r} in this run"
                )
        array = arrays.get(entry.get("name"))
        if array is None:
            raise CheckpointError(f"checkpoint arrays lack {entry.get('name')!r} ({want['path']})")
        if list(array.shape) != entry.get("stored_shape") or str(array.dtype) != entry.get(
            "stored_dtype"
        ):
            raise CheckpointError(
                f"checkpoint array {entry.get('name')} ({want['path']}) is {array.dtype}"
                f"{list(array.shape)}, the manifest says {entry.get('stored_dtype')}"
                f"{entry.get('stored_shape')}"
            )
        if "prng_impl" in entry:
            try:
                # It takes NumPy key data too; JAX annotates it jax.Array only.
                value = jax.random.wrap_key_data(array, impl=entry["prng_impl"])  # type: ignore[arg-type]
            except (TypeError, ValueError) as err:
                raise CheckpointError(
                    f"checkpoint key {want['path']} cannot be restored: {err}"
                ) from None
        else:
            value = jnp.asarray(array)
        if str(value.dtype) != want["dtype"]:
            raise CheckpointError(
                f"incompatible checkpoint: state leaf {want['path']} restores as {value.dtype}, "
                f"this run needs {want['dtype']}"
            )
        values.append(value)
    return values


def load_checkpoint(
    path: str | os.PathLike,
    template: TrainState,
    *,
    seeds: Sequence[int] | None = None,
    expect: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """Loads and verifies a checkpoint; nothing is returned unless all of it checks out.

    Args:
      path: a checkpoint folder (its newest checkpoint is read) or a manifest.
      template: the state this run would build (arrays or
        ``jax.ShapeDtypeStruct``; see :func:`state_template`). Every stored
        leaf must match its tree path, shape and dtype.
      seeds: if given, the checkpoint's seeds must equal these.
      expect: metadata the checkpoint must carry, compared recursively (for
        example ``{"dataset": {...fingerprint...}}``); extra stored keys are
        ignored.

    Returns:
      A :class:`Checkpoint`.

    Raises:
      CheckpointError: missing, unreadable, corrupt or truncated files, an
        unknown format version, or a mismatch with ``template``, ``seeds``
        or ``expect`` (the message names the first mismatch).
    """
    manifest = read_manifest(path)
    manifest_path = Path(manifest["path"])
    stored_seeds = [int(s) for s in manifest["seeds"]]
    if expect:  # first: another dataset or task is the difference to name, not its seeds
        _check_expected(manifest.get("metadata", {}), expect, "metadata.")
    if seeds is not None and stored_seeds != [int(s) for s in seeds]:
        raise CheckpointError(
            f"incompatible checkpoint: it holds seeds {stored_seeds} ({len(stored_seeds)} "
            f"seeds) but this run trains seeds {list(seeds)} ({len(seeds)} seeds)"
        )
    arrays = _read_arrays(manifest_path.parent, manifest)
    leaves = _check_leaves(manifest, template, arrays)
    history = {}
    for metric in manifest["history"]:
        values = arrays.get(f"history/{metric}")
        if values is None or values.ndim != 2 or values.shape[1] != len(stored_seeds):
            raise CheckpointError(f"checkpoint history {metric!r} is missing or not [epochs, K]")
        history[metric] = values
    state = jax.tree.unflatten(jax.tree.structure(template), leaves)
    epochs = _epochs(state)
    if epochs.shape[0] != len(stored_seeds) or int(epochs.max()) != manifest["epoch"]:
        raise CheckpointError(
            f"{manifest_path} is inconsistent: epoch {manifest['epoch']} and seeds "
            f"{stored_seeds}, but the state holds epochs {epochs.tolist()}"
        )
    return Checkpoint(
        path=manifest_path,
        epoch=int(manifest["epoch"]),
        seeds=tuple(stored_seeds),
        state=state,
        history=history,
        metadata=manifest.get("metadata", {}),
        run_id=manifest.get("run_id"),
    )


# -- saving during training ---------------------------------------------------


DEFAULT_KEEP = 3
"""Checkpoints a run keeps when ``--keep`` is not given and it resumes nothing."""


def _recorded_keep(metadata: Mapping) -> int:
    """The ``keep`` a checkpoint's run recorded (its config), :data:`DEFAULT_KEEP` if none."""
    keep = metadata.get("config", {}).get("keep") if isinstance(metadata, Mapping) else None
    if isinstance(keep, int) and not isinstance(keep, bool) and keep >= 0:
        return keep
    return DEFAULT_KEEP


class CheckpointHook:
    """An ``on_chunk`` hook for :func:`~sparsegcn.train.fit`: saves every ``every`` epochs.

    A checkpoint is written at the first compiled-call boundary at or after
    each multiple of ``every`` (choose ``epochs_per_call`` dividing
    ``every`` for exact multiples), and once more when every seed is done.

    The hook claims its folder when it is made: it takes the folder's lock
    (:class:`FolderLock`, held until :meth:`close`) and refuses a folder
    holding checkpoints of another run (:func:`check_checkpoint_folder`),
    or of its own run after ``start_epoch`` (another branch of a resumed
    run), unless ``overwrite``. Those checkpoints are then deleted when the
    hook writes its first checkpoint, not before: a run that fails or is
    killed before then leaves them as they were.

    Args:
      directory: checkpoint folder.
      seeds: the run's seeds.
      every: epochs between checkpoints (``0``: only at the end).
      keep: checkpoints of this run to keep (``None``: all).
      metadata: stored in every manifest.
      start_epoch: the epoch training starts from (when resuming).
      run_id: this run's id; pass the resumed checkpoint's to continue its
        run (``None`` for one written before runs had ids). Default
        :data:`NEW_RUN`: a new id (:func:`new_run_id`).
      overwrite: replace another run's checkpoints in ``directory`` (once
        this run's first is written) instead of refusing the folder.

    Raises:
      CheckpointLockedError: another process writes to ``directory``.
      CheckpointError: ``directory`` holds another run's checkpoints and
        ``overwrite`` is false.
    """

    @classmethod
    def for_run(cls, exp, *, seeds: Sequence[int], metadata: Mapping, resumed=None):
        """The hook of an experiment's ``--checkpoint`` folder, or ``None`` without one.

        ``exp`` supplies ``checkpoint``, ``checkpoint_every``, ``keep`` and
        ``overwrite``; a ``resumed`` :class:`Checkpoint` makes the hook continue
        its epoch count and run id (so it may write beside that run's files).
        ``exp.keep`` left ``None`` keeps :data:`DEFAULT_KEEP` checkpoints, or,
        resuming, as many as the resumed run kept (its recorded ``keep``), so a
        resumed ``--keep 0`` run's older checkpoints are not pruned by a default.
        """
        if not exp.checkpoint:
            return None
        keep = exp.keep
        if keep is None:  # not given: a resumed run keeps what it kept (nothing lost to a default)
            keep = _recorded_keep(resumed.metadata) if resumed else DEFAULT_KEEP
        config = metadata.get("config")
        if isinstance(config, Mapping):
            # Recorded as resolved, so that the next resume keeps it too (a recorded None
            # read as the default pruned a second resume of a --keep 0 run to 3).
            metadata = {**metadata, "config": {**config, "keep": keep}}
        return cls(
            exp.checkpoint,
            seeds=seeds,
            every=exp.checkpoint_every,
            keep=keep or None,
            metadata=metadata,
            start_epoch=resumed.epoch if resumed else 0,
            run_id=resumed.run_id if resumed else NEW_RUN,
            overwrite=exp.overwrite,
        )

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        seeds: Sequence[int],
        every: int = 0,
        keep: int | None = None,
        metadata: Mapping | None = None,
        start_epoch: int = 0,
        run_id: str | object | None = NEW_RUN,
        overwrite: bool = False,
    ):
        if every < 0:
            raise ValueError(f"every must be >= 0, got {every}")
        self.directory = Path(directory)
        self.seeds = tuple(int(s) for s in seeds)
        self.every = every
        self.keep = keep
        self.metadata = dict(metadata or {})
        run_id = new_run_id() if run_id is NEW_RUN else run_id
        if run_id is not None and not isinstance(run_id, str):
            raise TypeError(f"run_id must be a string or None, got {run_id!r}")
        self.run_id: str | None = run_id
        self._epoch = start_epoch
        self.saved: list[Path] = []
        check_checkpoint_folder(self.directory, run_ids=(self.run_id,), overwrite=True)
        self._lock = FolderLock(self.directory).acquire()
        try:
            mine = (self.run_id,)
            # Replaced by the first save (save_checkpoint's supersedes), not now.
            self._superseded = foreign_checkpoints(self.directory, mine, after_epoch=start_epoch)
            if self._superseded:
                check_checkpoint_folder(
                    self.directory, run_ids=mine, overwrite=overwrite, after_epoch=start_epoch
                )
            _prune(self.directory, None, self.run_id)  # what a killed writer left in flight
        except BaseException:
            self.close()
            raise

    def __call__(self, state: TrainState, history: dict) -> None:
        epoch = int(_epochs(state).max())
        due = self.every > 0 and epoch // self.every > self._epoch // self.every
        if due or bool(np.asarray(state.done).all()):
            self.save(state, history)
        self._epoch = epoch

    def save(self, state: TrainState, history: dict) -> Path:
        """Saves now, whatever the epoch."""
        path = save_checkpoint(
            self.directory,
            state,
            seeds=self.seeds,
            history=history,
            metadata=self.metadata,
            keep=self.keep,
            run_id=self.run_id,
            supersedes=self._superseded,
        )
        self._superseded = []
        self.saved.append(path)
        return path

    def close(self) -> None:
        """Releases the folder's lock; later saves take it for their own duration."""
        self._lock.release()


FINGERPRINT_BYTES = 1 << 26
"""Features (as float32) and edge lists up to this many bytes are hashed whole
into a dataset's fingerprint; larger ones by :data:`FINGERPRINT_ROWS` evenly
spaced rows (or edges)."""

FINGERPRINT_ROWS = 4096

DATA_DIGESTS = {
    "features_sha256": "the features differ from those it was trained on",
    "graph_sha256": "the graph's edges differ from those it was trained on",
    "labels_split_sha256": "the labels or splits differ from those it was trained on",
}
"""The fingerprint's digests, and what a mismatch means. Checkpoints written
before ``features_sha256`` and ``graph_sha256`` existed are compared on the
entries they record (:func:`fingerprint_expectation`)."""


def _positions(count: int, row_bytes: int) -> np.ndarray | None:
    """``None`` (hash everything) for small arrays, else evenly spaced row ids."""
    if count * row_bytes <= FINGERPRINT_BYTES:
        return None
    return np.unique(np.linspace(0, count - 1, FINGERPRINT_ROWS).astype(np.int64))


def features_sha256(features) -> str:
    """sha256 of ``[N, F]`` features as float32 rows: all of them up to
    :data:`FINGERPRINT_BYTES`, else :data:`FINGERPRINT_ROWS` evenly spaced rows.

    Dense and scipy-sparse, float16 and float32 copies of the same values hash
    alike, so the same dataset loaded from another source matches.
    """
    n, f = (int(d) for d in features.shape)
    digest = hashlib.sha256(f"features [{n}, {f}] float32\n".encode())
    positions = _positions(n, 4 * f)
    rows = features if positions is None else features[positions]
    rows = rows.toarray() if sp.issparse(rows) else np.asarray(rows)
    digest.update(np.ascontiguousarray(rows, np.float32).tobytes())
    return digest.hexdigest()


def graph_sha256(graph) -> str:
    """sha256 of a host graph's edges as (receiver, sender[, weight]) in
    (receiver, sender) order: every edge up to :data:`FINGERPRINT_BYTES`, else
    :data:`FINGERPRINT_ROWS` evenly spaced stored edges (in stored order).
    """
    e, weights = int(graph.num_edges), graph.weights
    digest = hashlib.sha256(
        f"graph {int(graph.num_nodes)} nodes {e} edges weighted={weights is not None}\n".encode()
    )
    positions = _positions(e, 12 if weights is not None else 8)
    if positions is None:
        senders = np.asarray(graph.senders[:e], np.int64)
        receivers = np.asarray(graph.receivers[:e], np.int64)
        order = None if graph.edges_sorted else np.lexsort((senders, receivers))
        parts = [receivers, senders] + ([] if weights is None else [np.asarray(weights)])
        if order is not None:
            parts = [part[order] for part in parts]
    else:
        parts = [graph.receivers[positions], graph.senders[positions]]
        parts += [] if weights is None else [np.asarray(weights)[positions]]
    for part, dtype in zip(parts, (np.int64, np.int64, np.float32), strict=False):
        digest.update(np.ascontiguousarray(part, dtype).tobytes())
    return digest.hexdigest()


def dataset_fingerprint(dataset) -> dict:
    """What identifies a dataset for a checkpoint: sizes, and digests of its data.

    Args:
      dataset: a :class:`~sparsegcn.datasets.Dataset`.

    Returns:
      ``{"name", "num_nodes", "num_edges", "num_features", "num_classes",
      "labels_split_sha256", "features_sha256", "graph_sha256"}``: the
      labels and the train, valid and test indices are hashed whole (another
      split of the same graph differs); the features and the edges whole up
      to :data:`FINGERPRINT_BYTES`, else a deterministic sample of rows
      (:func:`features_sha256`, :func:`graph_sha256`), so a fingerprint costs
      milliseconds to a fraction of a second at any size.
    """
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(dataset.labels, np.int64).tobytes())
    for name in sorted(dataset.split):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(dataset.split[name], np.int64).tobytes())
    return {
        "name": dataset.name,
        "num_nodes": int(dataset.num_nodes),
        "num_edges": int(dataset.num_edges),
        "num_features": int(dataset.num_features),
        "num_classes": int(dataset.num_classes),
        "labels_split_sha256": digest.hexdigest(),
        "features_sha256": features_sha256(dataset.features),
        "graph_sha256": graph_sha256(dataset.graph),
    }


def fingerprint_expectation(manifest: Mapping, fingerprint: Mapping) -> dict:
    """``fingerprint`` less the digests a checkpoint's older fingerprint lacks.

    A checkpoint written before the features and the graph were
    fingerprinted records neither: it stays loadable, checked on what it
    records (name, sizes, labels and splits).

    Args:
      manifest: the checkpoint's manifest (:func:`read_manifest`).
      fingerprint: this run's :func:`dataset_fingerprint`.
    """
    stored = manifest.get("metadata", {}).get("dataset")
    if not isinstance(stored, Mapping):
        return dict(fingerprint)
    return {k: v for k, v in fingerprint.items() if k in stored or k not in DATA_DIGESTS}


__all__ = [
    "DEFAULT_KEEP",
    "FOLDER_KINDS",
    "FORMAT",
    "FORMAT_VERSION",
    "LINK_MODEL_FILES",
    "Checkpoint",
    "CheckpointError",
    "CheckpointHook",
    "CheckpointLockedError",
    "FolderLock",
    "check_checkpoint_folder",
    "check_metadata",
    "checkpoint_files",
    "dataset_fingerprint",
    "describe_tree",
    "features_sha256",
    "fingerprint_expectation",
    "folder_of",
    "folder_owns",
    "foreign_checkpoints",
    "graph_sha256",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "new_run_id",
    "read_manifest",
    "resolve_checkpoint",
    "save_checkpoint",
    "save_npy_atomic",
    "state_template",
    "write_atomic",
]

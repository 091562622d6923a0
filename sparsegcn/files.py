"""Files that appear complete or not at all: write to a temporary file, then rename.

Every file sparsegcn writes (reports, checkpoints, predictions, plots,
caches) goes through :func:`write_atomic`, so an interrupted run never
leaves a partial file where a complete one is expected.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np


def fsync_directory(directory: str | os.PathLike) -> None:
    """Flushes a folder's entries (new and renamed names) to disk, where supported."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # platforms that cannot open folders (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Writes a file through ``write(file)`` so that it appears complete or not at all.

    The bytes go to a temporary file in the same folder, which is fsynced,
    renamed over ``path`` with ``os.replace`` and followed by an fsync of the
    folder. On any error the temporary file is removed and ``path`` is left
    as it was.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make results private
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
    return path


def save_npy_atomic(path: str | os.PathLike, array: np.ndarray) -> Path:
    """``np.save`` through :func:`write_atomic` (no pickled objects)."""
    array = np.asarray(array)
    if array.dtype == object:
        raise TypeError(f"refusing to save an object array to {path}: it would need pickle")
    return write_atomic(path, lambda f: np.save(f, array, allow_pickle=False))


def write_json_atomic(path: str | os.PathLike, payload: dict) -> Path:
    """Writes ``payload`` as indented, key-sorted JSON through :func:`write_atomic`."""
    text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    return write_atomic(path, lambda f: f.write(text.encode()))

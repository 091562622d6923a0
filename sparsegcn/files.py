"""Files that appear complete or not at all: write to a temporary file, then rename.

Every file sparsegcn writes (reports, checkpoints, predictions, plots,
caches) goes through :func:`write_atomic`, so an interrupted run never
leaves a partial file where a complete one is expected.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import mmap
import os
import stat
import tempfile
import traceback
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO, Literal

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


def memory_map(array) -> mmap.mmap | None:
    """The ``mmap.mmap`` under a NumPy memory map (or a view of one), else ``None``."""
    mapped = getattr(array, "_mmap", None)
    if isinstance(mapped, mmap.mmap):
        return mapped
    base = getattr(array, "base", None)
    while base is not None:
        if isinstance(base, mmap.mmap):
            return base
        base = getattr(base, "base", None)
    return None


_ADVICE = {"random": "MADV_RANDOM", "dontneed": "MADV_DONTNEED"}


def advise(array, advice: str) -> bool:
    """``madvise`` the whole memory map under ``array`` (``"random"`` or ``"dontneed"``).

    ``"random"``: no read-ahead (a batch reads scattered pages; read-ahead
    around each would read more than the batch needs). ``"dontneed"``: drop
    the map's pages from this process's resident set (see
    :func:`release_pages`, which does it for a row range).

    Returns:
      whether advice was given (``False`` for an array in RAM, or where
      ``mmap.madvise`` or the advice is unavailable).
    """
    if advice not in _ADVICE:
        raise ValueError(f"advice must be one of {sorted(_ADVICE)}, got {advice!r}")
    mapped = memory_map(array)
    flag = getattr(mmap, _ADVICE[advice], None)
    if mapped is None or flag is None or not hasattr(mapped, "madvise"):
        return False
    mapped.madvise(flag)
    return True


def release_pages(array: np.ndarray, start: int = 0, stop: int | None = None) -> bool:
    """Drops rows ``[start, stop)`` of a memory-mapped array from the process's resident set.

    Pages of a file mapping count in the process RSS from the first touch
    until they are unmapped, so writing (or reading) a file larger than RAM
    through :class:`numpy.memmap` grows the RSS towards the file's size even
    though the kernel could evict those pages at any time. This advises the
    pages that hold the rows ``MADV_DONTNEED``: they leave the RSS, and their
    contents stay in the page cache and the file (for a shared file mapping,
    written pages are kept and written back; nothing is lost). A later access
    maps them again.

    Args:
      array: a :class:`numpy.memmap` (as ``np.load(..., mmap_mode=...)`` or
        ``np.lib.format.open_memmap`` return) or a row slice of one,
        C-contiguous; rows are along axis 0.
      start, stop: the row range, ``0 <= start <= stop <= len(array)``;
        ``stop=None`` is ``len(array)`` (by default, every row).

    Returns:
      Whether the pages were advised: False where the platform has no
      ``madvise`` or ``array`` is not a memory map (nothing to release).
    """
    mapping = memory_map(array)
    if mapping is None or not hasattr(mapping, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    rows = array.shape[0] if array.ndim else 1
    stop = rows if stop is None else stop
    if not 0 <= start <= stop <= rows:
        raise ValueError(f"rows [{start}, {stop}) are outside an array of {rows} rows")
    if stop == start:
        return True
    row_bytes = array.strides[0] if array.ndim else array.itemsize
    # Where the array's data starts inside the mapping (the .npy header, the
    # offset's rounding to the allocation granularity, a slice's start).
    view = np.frombuffer(mapping, np.uint8)
    lead = array.__array_interface__["data"][0] - view.__array_interface__["data"][0]
    del view  # an exported buffer would keep the mapping from closing
    first = (lead + start * row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
    last = min(lead + stop * row_bytes, len(mapping))
    if last > first:
        mapping.madvise(mmap.MADV_DONTNEED, first, last - first)
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
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
    except OSError as err:  # a full disk, a quota: name the file the user asked for
        Path(tmp).unlink(missing_ok=True)
        raise _naming(err, path) from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
    return path


def _naming(err: OSError, path: str | os.PathLike) -> OSError:
    """``err`` (same type) with a message that names ``path``."""
    return type(err)(f"cannot write {path}: {err.strerror or err}")


@contextlib.contextmanager
def naming(path: str | os.PathLike):
    """Reraises an ``OSError`` from the block (same type) as ``cannot write <path>: <cause>``.

    Around writes to a temporary file or folder that stands for ``path``, so
    that messages name the user's path, never the temporary one
    (``.ind.cora.y.<hex>.part``, ``.out.<hex>/features.npy``).
    """
    try:
        yield
    except OSError as err:
        raise _naming(err, path) from err


class CorruptFileError(ValueError):
    """A file that is not what it should be: truncated, corrupt, or another format.

    The message names the file and the cause, e.g. ``DIR/raw/edge.csv.gz:
    truncated: the data ends early (EOFError: ...)``.

    Attributes:
      path: the file.
      cause: what is wrong with it, in words.
    """

    def __init__(self, path: str | os.PathLike, cause: str):
        self.path, self.cause = Path(path), cause
        super().__init__(f"{path}: {cause}")


def read_cause(err: BaseException) -> str | None:
    """What a low-level decoding error says about the file it came from, or ``None``."""
    if isinstance(err, gzip.BadGzipFile):
        return "not a gzip file"
    if isinstance(err, zipfile.BadZipFile):
        return "not a zip archive (or a truncated one)"
    if isinstance(err, EOFError):
        return "truncated: the data ends early"
    if isinstance(err, zlib.error):
        return "corrupt compressed data"
    if isinstance(err, UnicodeDecodeError):
        return "not text in the expected encoding"
    if isinstance(err, ValueError) and _raised_in_pandas(err):
        return "malformed CSV"  # its parser errors, or int('a') on a cell
    return None


def _raised_in_pandas(err: BaseException) -> bool:
    if type(err).__module__.split(".")[0] == "pandas":
        return True
    frames = traceback.extract_tb(err.__traceback__)
    return any(f"{os.sep}pandas{os.sep}" in frame.filename for frame in frames)


@contextlib.contextmanager
def reading(path: str | os.PathLike):
    """Reraises a decoding error of the block as one :class:`CorruptFileError` naming ``path``.

    Python's readers report a bad file by the decoder's symptom, without the
    file: ``EOFError`` (a truncated gzip), ``zlib.error`` (a corrupt one),
    ``gzip.BadGzipFile``, ``zipfile.BadZipFile``, ``UnicodeDecodeError``,
    pandas' parser errors. Every reader of an input file wraps its reads in
    ``with reading(path):``, so each of them ends as one line that names the
    file and the cause. Other errors pass through unchanged.
    """
    try:
        yield
    except CorruptFileError:
        raise
    except Exception as err:
        cause = read_cause(err)
        if cause is None:
            raise
        detail = " ".join(str(err).split())
        raise CorruptFileError(
            path, f"{cause} ({type(err).__name__}{': ' + detail if detail else ''})"
        ) from err


NPY_MAGIC = b"\x93NUMPY"


def load_npy(
    path: str | os.PathLike, *, mmap_mode: Literal["r", "r+", "c"] | None = None
) -> np.ndarray:
    """``np.load`` of a ``.npy`` file, never unpickling, with errors that name the file.

    ``np.load`` reads anything that is not ``.npy`` as a pickle, so a JSON or
    text file in place of an array is reported as "pickled (object) data";
    this checks the format first.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      CorruptFileError: ``path`` is not a ``.npy`` file (naming what it starts
        with), is truncated, or holds Python objects (which would need pickle).
      OSError: it cannot be read.
    """
    path = Path(path)
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device would block or never end
        raise CorruptFileError(path, "not a regular file")
    with open(path, "rb") as f:
        head = f.read(len(NPY_MAGIC))
    if head != NPY_MAGIC:
        what = "it is empty" if not head else f"it starts with {head!r}"
        raise CorruptFileError(path, f"not a NumPy .npy file ({what})")
    try:
        with reading(path):
            return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except ValueError as err:
        if isinstance(err, CorruptFileError):
            raise
        text = " ".join(str(err).split())
        if "pickle" in text:
            raise CorruptFileError(
                path, "holds Python objects (an object array), which would need pickle; refused"
            ) from err
        raise CorruptFileError(path, f"not a readable .npy file or truncated ({text})") from err


def save_npy_atomic(path: str | os.PathLike, array: np.ndarray) -> Path:
    """``np.save`` through :func:`write_atomic` (no pickled objects)."""
    array = np.asarray(array)
    if array.dtype == object:
        raise TypeError(f"refusing to save an object array to {path}: it would need pickle")
    return write_atomic(path, lambda f: np.save(f, array, allow_pickle=False))


def strict_json(value):
    """``value`` with every non-finite float (``NaN``, ``inf``) replaced by ``None``.

    Python's ``json`` writes those as the bare words ``NaN`` and
    ``Infinity``, which are not JSON: strict parsers (``jq``, JavaScript's
    ``JSON.parse``, Go) reject the whole file. NumPy scalars become Python
    numbers; dicts, lists and tuples are converted recursively.
    """
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        return number if np.isfinite(number) else None
    return value


def json_text(payload, *, indent: int | None = 2) -> str:
    """``payload`` as strict JSON text (key-sorted, ending in a newline): non-finite
    floats are written as ``null`` (:func:`strict_json`), never as ``NaN``."""
    return json.dumps(strict_json(payload), indent=indent, sort_keys=True, allow_nan=False) + "\n"


def write_json_atomic(path: str | os.PathLike, payload: dict) -> Path:
    """Writes ``payload`` as indented, key-sorted, strict JSON (:func:`json_text`)
    through :func:`write_atomic`."""
    text = json_text(payload)
    return write_atomic(path, lambda f: f.write(text.encode()))


def check_writable(path: str | os.PathLike, *, what: str, folder: bool = False) -> Path:
    """Refuses an output path that could not be written, before any work is done.

    A temporary file is created and removed in the nearest existing folder
    on the way to ``path`` (folders still missing are made when the output
    is written). Nothing else is touched.

    Args:
      path: the file to be written later (with ``folder``: the folder files
        will be written in).
      what: how messages name it, e.g. ``"--json"``.
      folder: ``path`` is a folder, not a file.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      IsADirectoryError: ``path`` is a folder (and ``folder`` is false).
      NotADirectoryError: a parent of ``path`` (or, with ``folder``,
        ``path`` itself) is a file.
      PermissionError, OSError: the folder cannot be written (read-only,
        full, ...); the message names ``what``, ``path`` and the folder.
    """
    path = Path(path)
    if path.is_dir() and not folder:
        raise IsADirectoryError(f"{what} {path} is a folder; give the path of a file to write")
    where = path if folder else path.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise NotADirectoryError(f"{what} {path} cannot be written: {where} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=where)
    except OSError as err:
        raise type(err)(
            f"{what} {path} cannot be written: {err.strerror or err} (in {where})"
        ) from None
    os.close(fd)
    os.unlink(probe)
    return path


def write_all_atomic(writers: Mapping[str | os.PathLike, Callable[[BinaryIO], object]]) -> None:
    """Writes several files so that all of them appear or none does.

    Every file is first written in full to a temporary file beside it and
    fsynced; only when all are written are they renamed into place (renames
    within a folder do not fail for want of space). On an error before the
    renames, every temporary file is removed and no ``path`` is touched.

    Args:
      writers: ``{path: write(file)}``.
    """
    temps: list[tuple[str, Path]] = []
    path = None
    try:
        for path, write in writers.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            temps.append((tmp, path))
            os.chmod(tmp, 0o666 & ~_umask())
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
    except BaseException as err:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and path is not None:
            raise _naming(err, path) from err
        raise
    for tmp, path in temps:
        os.replace(tmp, path)
    for folder in {path.parent for _, path in temps}:
        fsync_directory(folder)


def npy_writer(array: np.ndarray) -> Callable[[BinaryIO], object]:
    """A ``write(file)`` for :func:`write_all_atomic` that saves ``array`` as ``.npy`` (no pickle)."""
    array = np.asarray(array)
    if array.dtype == object:
        raise TypeError("refusing to save an object array: it would need pickle")
    return lambda f: np.save(f, array, allow_pickle=False)


def json_writer(payload: dict) -> Callable[[BinaryIO], object]:
    """A ``write(file)`` for :func:`write_all_atomic` writing indented, key-sorted,
    strict JSON (:func:`json_text`)."""
    text = json_text(payload)
    return lambda f: f.write(text.encode())

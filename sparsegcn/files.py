"""Files that appear complete or not at all: write to a temporary file, then rename.

Every file sparsegcn writes (reports, checkpoints, predictions, plots,
caches) goes through :func:`write_atomic`, so an interrupted run never
leaves a partial file where a complete one is expected.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gzip
import hashlib
import io
import json
import math
import mmap
import os
import re
import secrets
import shutil
import socket
import stat
import struct
import sys
import tempfile
import traceback
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, BinaryIO, Literal, NamedTuple

import numpy as np

from sparsegcn import _interrupt


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


def _replaced_status(target: Path, *, folder: bool = False) -> os.stat_result | None:
    """The status of the regular file (``folder``: the folder, not a link to one) a
    write is about to replace at ``target``, or ``None``: nothing, or something else."""
    try:
        info = os.lstat(target) if folder else os.stat(target)
    except OSError:
        return None
    wanted = stat.S_ISDIR if folder else stat.S_ISREG
    return info if wanted(info.st_mode) else None


def _take_permissions(
    path: str | os.PathLike, replaced: os.stat_result | None, *, folder: bool = False
) -> None:
    """Gives the new file or folder ``path`` the permissions of the one it is to replace.

    A replacement is a new inode: without this it would get ``0666 & ~umask``
    (``0777`` for a folder) and this process's owner and group, so a report
    the user made ``0600`` would become readable by all, and a group folder
    ``2770`` would become ``0755`` and this user's group. With ``replaced``
    (the status of what is replaced):

    - its owner, where ``chown`` to it is permitted (root), and its group,
      where permitted (a group of this process, or root); silently not where
      not: the write never fails over it;
    - its mode bits, when ``path`` now has the replaced one's owner (a mode
      made for another owner, ``0600`` say, would lock that owner out of
      the file, or make it someone else's), else the mode the umask allows;
    - never a file's set-user-id or set-group-id bit: an output is data, and
      a set-id file of this process's owner is not to be made from another's.

    Without ``replaced``, the mode the umask allows.
    """
    default = (0o777 if folder else 0o666) & ~_umask()
    if replaced is None:
        os.chmod(path, default)
        return
    now = os.stat(path)
    if (replaced.st_uid, replaced.st_gid) != (now.st_uid, now.st_gid):
        with contextlib.suppress(OSError):  # chown first: it may clear the set-id bits
            os.chown(path, replaced.st_uid, -1)
        with contextlib.suppress(OSError):
            os.chown(path, -1, replaced.st_gid)
    mode = stat.S_IMODE(replaced.st_mode)
    if not folder:
        mode &= ~(stat.S_ISUID | stat.S_ISGID)
    os.chmod(path, mode if os.stat(path).st_uid == replaced.st_uid else default)


def _through_link(path: Path) -> Path:
    """Where a write of ``path`` lands: a symbolic link's target (the link itself is not
    replaced), else ``path``. Callers first divert paths of this process's descriptors
    (:func:`_own_descriptor`), which name an open file, not a place to rename into."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


# /proc/PID/fd or /proc/PID/task/TID/fd, as realpath spells /proc/self/fd, /dev/fd and
# /proc/thread-self/fd.
_FD_FOLDER = re.compile(r"/proc/(?P<pid>[0-9]+)(?:/task/[0-9]+)?/fd")


def _own_descriptor(path: Path) -> int | None:
    """The descriptor of this process that ``path`` names, or ``None``.

    ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N`` and
    ``/proc/<this pid>/fd/N`` (and links to them) name a file this process
    already holds open: the one the shell redirected to (``>> runs.log``), a
    pipe (``| head``), a terminal. Linux shows them as links to that file,
    so following the link and renaming a new file over its target would
    replace the user's ``runs.log`` instead of writing to it, and fail for
    a pipe (``pipe:[123]`` names no file). Only the path is read: the
    descriptor need not be open.
    """
    if not sys.platform.startswith("linux"):
        return None
    for _ in range(40):  # the kernel's limit on links followed
        try:
            folder = os.path.realpath(path.parent)
            match = _FD_FOLDER.fullmatch(folder)
            if match and int(match["pid"]) == os.getpid():
                name = path.name
                return int(name) if name.isascii() and name.isdigit() else None
            if not path.is_symlink():
                return None
            path = Path(folder, os.readlink(path))  # an absolute target replaces folder
        except OSError:
            return None
    return None


def _check_descriptor(fd: int) -> str | None:
    """Why this process cannot write to its descriptor ``fd``, or ``None``."""
    import fcntl

    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return f"descriptor {fd} is not open in this process"
    if flags & os.O_ACCMODE == os.O_RDONLY:
        return f"descriptor {fd} is open for reading only"
    return None


def _write_descriptor(path: Path, fd: int, data: bytes) -> None:
    """Writes ``data`` to this process's open descriptor ``fd``, where its offset is.

    Nothing is opened, truncated or renamed: ``--json /dev/stdout >> runs.log``
    appends the report after what the run printed. Python's buffered
    ``sys.stdout`` and ``sys.stderr`` are flushed first (both: ``2>&1`` makes
    them one file), so the bytes follow the text printed before them.
    """
    import select

    for number, stream in ((1, sys.stdout), (2, sys.stderr)):
        if stream is None or stream.closed:
            continue
        try:
            stream.flush()
        except OSError as err:  # another stream's trouble is not this output's
            if number == fd:
                raise _naming(err, path) from err
    problem = _check_descriptor(fd)
    if problem is not None:
        raise OSError(f"cannot write {path}: {problem}")
    view = memoryview(data)
    try:
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:  # a descriptor someone made non-blocking: wait, as print does
                select.select([], [fd], [])
    except OSError as err:
        raise _naming(err, path) from err


def _sink_kind(path: Path) -> str | None:
    """What a non-regular file at ``path`` is (following links), or ``None``.

    ``None``: nothing there, a regular file or a folder (the callers' own
    checks handle those).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


SINKS = ("character device", "FIFO")
"""Non-regular outputs written in place (``/dev/null``, a terminal, a named
pipe): never replaced, never renamed over. Other kinds are refused."""


def _check_sink(path: Path, kind: str) -> None:
    if kind not in SINKS:
        raise OSError(
            f"cannot write {path}: it is a {kind}, not a regular file, and is not replaced"
        )


def _write_sink(path: Path, data: bytes) -> None:
    """Writes ``data`` straight into a character device or FIFO (no temporary file).

    A FIFO nobody reads is refused (``ENXIO``) instead of waiting for a
    reader forever.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ENXIO:
            raise OSError(f"cannot write {path}: no process reads from this FIFO") from None
        raise _naming(err, path) from err
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as err:
        raise _naming(err, path) from err
    finally:
        os.close(fd)


def _to_bytes(write: Callable[[BinaryIO], object]) -> bytes:
    import io

    buffer = io.BytesIO()
    write(buffer)
    return buffer.getvalue()


def write_atomic(
    path: str | os.PathLike, write: Callable[[BinaryIO], object], *, name: str | None = None
) -> Path:
    """Writes a file through ``write(file)`` so that it appears complete or not at all.

    The bytes go to a temporary file in the same folder, which is fsynced,
    renamed over ``path`` with ``os.replace`` and followed by an fsync of the
    folder. On any error the temporary file is removed and ``path`` is left
    as it was; the error names ``path`` (or ``name``). A file replaced
    keeps its mode and, where permitted, its group (:func:`_take_permissions`).
    A symbolic link is written through: its target is replaced,
    the link stays. A character device or FIFO at ``path`` (``/dev/null``, a
    terminal, a named pipe; see :data:`SINKS`) is written in place, never
    replaced; any other non-regular file is refused. A path naming one of
    this process's open descriptors (``/dev/stdout``, ``/dev/stderr``,
    ``/dev/fd/N``, ``/proc/self/fd/N``) is written to that descriptor, at
    its offset (appended after ``>>``), whatever file it is open on.

    Args:
      path: the file to write.
      write: writes the bytes into the open binary file it is given.
      name: how errors name the file (default: ``path``), e.g. the folder
        the user asked for rather than a temporary folder being built.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    named = path if name is None else name
    fd = _own_descriptor(path)
    if fd is not None:
        _write_descriptor(path, fd, _to_bytes(write))
        return path
    target = _through_link(path)
    kind = _sink_kind(target)
    if kind is not None:
        _check_sink(path, kind)
        _write_sink(path, _to_bytes(write))
        return path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise _naming(err, named) from err
    try:
        # mkstemp's 0600 would make results private; a replaced file keeps its own mode
        _take_permissions(tmp, _replaced_status(target))
        with os.fdopen(fd, "wb") as f:
            write(f)
            check_complete(f)
            os.fsync(f.fileno())
        _replace_regular(tmp, target)
    except OSError as err:  # a full disk, a quota: name the file the user asked for
        Path(tmp).unlink(missing_ok=True)
        raise _naming(err, named) from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)
    return path


def _replace_regular(tmp: str | os.PathLike, path: Path) -> None:
    """``os.replace(tmp, path)``, unless ``path`` became a non-regular file meanwhile,
    or the command was interrupted (``sparsegcn._interrupt.check``)."""
    _interrupt.check()  # a Ctrl-C swallowed on the way here replaces nothing
    kind = _sink_kind(path)
    if kind is not None:
        raise OSError(f"it is a {kind}, not a regular file, and is not replaced")
    os.replace(tmp, path)


# NumPy's words for a write that stopped short (ndarray.tofile, np.save to a file): no errno.
_SHORT_WRITE = re.compile(r"(?P<asked>[0-9]+) requested and (?P<done>[0-9]+) written")


def _naming(err: OSError, path: str | os.PathLike) -> OSError:
    """``err`` (same type and errno) with a message that names ``path``."""
    cause = err.strerror or str(err)
    short = _SHORT_WRITE.fullmatch(cause)
    if err.errno is None and short:
        cause = (
            f"only {int(short['done']):,} of {int(short['asked']):,} bytes could be written "
            f"(the disk, or a quota, is full)"
        )
    named = type(err)(f"cannot write {path}: {cause}")
    named.errno = err.errno
    return named


@contextlib.contextmanager
def naming_errors(path: str | os.PathLike):
    """Re-raises an ``OSError`` inside the block as one naming ``path`` (the user's output),
    not the temporary file it happened on; messages that already start with "cannot"
    pass unchanged."""
    try:
        yield
    except OSError as err:
        if str(err).startswith("cannot "):
            raise
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


def save_npy_atomic(path: str | os.PathLike, array: np.ndarray, *, name: str | None = None) -> Path:
    """``np.save`` through :func:`write_atomic` (no pickled objects); errors name
    ``name`` (default: ``path``)."""
    array = np.asarray(array)
    if array.dtype == object:
        raise TypeError(f"refusing to save an object array to {path}: it would need pickle")
    return write_atomic(path, lambda f: np.save(f, array, allow_pickle=False), name=name)


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


def write_json_atomic(path: str | os.PathLike, payload: dict, *, name: str | None = None) -> Path:
    """Writes ``payload`` as indented, key-sorted, strict JSON (:func:`json_text`)
    through :func:`write_atomic`; errors name ``name`` (default: ``path``)."""
    text = json_text(payload)
    return write_atomic(path, lambda f: f.write(text.encode()), name=name)


def check_complete(f: BinaryIO) -> None:
    """Flushes the file ``f``, written from its start, and raises if it holds fewer bytes
    than were written to it.

    ``np.save`` to an open file writes the data with ``ndarray.tofile``,
    which flushes its C buffer without checking (see :func:`write_array`):
    on a nearly full disk the file ends short and nothing is raised. Then
    ``f``'s position (where the writes ended) is past the file's end.

    Raises:
      OSError: ``ENOSPC``, saying how many bytes are missing; callers name the file.
    """
    f.flush()
    written, held = f.tell(), os.fstat(f.fileno()).st_size
    if held < written:
        raise OSError(
            errno.ENOSPC,
            f"only {held:,} of {written:,} bytes reached the file (the disk, or a quota, is full)",
        )


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    """``np.save`` to the file ``path`` in place, fsynced, raising when bytes are lost
    (:func:`check_complete`); for files in a temporary folder built whole (outputs
    the user names go through :func:`save_npy_atomic`). No pickled objects."""
    with open(path, "wb") as f:
        np.save(f, np.asarray(array), allow_pickle=False)
        check_complete(f)
        os.fsync(f.fileno())


def write_array(f: BinaryIO, array: np.ndarray) -> None:
    """Appends the bytes of ``array`` (C order) to the open binary file ``f``.

    What ``array.tofile(f)`` writes, but through ``f.write``: ``tofile``
    writes through a C ``FILE*`` whose buffered tail it flushes without
    checking, so on a full disk an array smaller than that buffer is
    dropped without an error, and the file silently lacks it. Here a full
    disk raises ``OSError`` (``ENOSPC``), at this write or at the file's
    ``flush`` or ``close``: the caller closes inside its error handling.
    """
    f.write(np.ascontiguousarray(array).data.cast("B"))


def close_all(files) -> None:
    """Closes every file of ``files``, then raises the first error a close raised (a
    full disk's, when a buffered tail is written), so that no file is left open."""
    first: OSError | None = None
    for f in files:
        try:
            f.close()
        except OSError as err:
            first = first or err
    if first is not None:
        raise first


def save_array(path: str | os.PathLike, array: np.ndarray) -> None:
    """Writes the bytes of ``array`` to the file ``path`` (replacing it), as
    ``array.tofile(path)`` would, except that a full disk raises (:func:`write_array`)."""
    with open(path, "wb") as f:
        write_array(f, array)


def check_work_folder(
    path: str | os.PathLike,
    *,
    what: str,
    outside: Mapping[str, str | os.PathLike | None] | None = None,
) -> Path:
    """An existing folder a tool may put its temporary files in (``--tmp-dir``).

    Never created: a mistyped path would otherwise become a new folder tree,
    left behind. Checked before the work starts.

    Args:
      path: the folder.
      what: how messages name it, e.g. ``"tmp_dir (--tmp-dir)"``.
      outside: ``{description: folder}`` of the folders the tool replaces
        with its result (``{"out (--out)": out}``); ``None`` entries are
        skipped. The work folder may be neither one of them nor inside one:
        its temporary files would sit in the folder being replaced, which
        then no longer holds only what may be replaced (and a ``kill -9``
        would leave them there).

    Raises:
      ValueError: an empty path, one that is not a folder, or one that is
        (or lies inside) a folder of ``outside``, naming ``what``.
      FileNotFoundError: nothing at ``path``.
      PermissionError: a folder this process cannot write into.
    """
    text = os.fspath(path)
    if text == "":
        raise ValueError(f"{what} is empty; name an existing folder, or leave it out")
    folder = Path(text).expanduser()
    if not folder.exists():
        raise FileNotFoundError(f"{what} {text!r} does not exist; create it first")
    if not folder.is_dir():
        raise ValueError(f"{what} {text!r} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{what} {text!r} is not writable")
    real = os.path.realpath(folder)
    for output_what, output in (outside or {}).items():
        if output is None:
            continue
        output_real = os.path.realpath(Path(output).expanduser())
        if real == output_real or _within(real, {output_real}):
            where = "is" if real == output_real else "lies inside"
            raise ValueError(
                f"{what} {text!r} {where} the folder {output_what} {os.fspath(output)!r} "
                f"that this run replaces with its result; give a work folder outside it"
            )
    return folder


def check_writable(path: str | os.PathLike, *, what: str, folder: bool = False) -> Path:
    """Refuses an output path that could not be written, before any work is done.

    A temporary file is created and removed in the nearest existing folder
    on the way to ``path`` (folders still missing are made when the output
    is written), and an existing file at ``path`` must be one this process
    may rename over (:func:`_sticky_refusal`). Nothing else is touched. A
    path naming one of this process's descriptors (``/dev/stdout``) must
    name one open for writing; it is written to, never replaced.

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
        full, ...), or the file there cannot be replaced (another user's, in
        a folder with the sticky bit); the message names ``what``, ``path``
        and the folder or file.
    """
    path = Path(path)
    fd = None if folder else _own_descriptor(path)
    if fd is not None:
        problem = _check_descriptor(fd)
        if problem is not None:
            raise OSError(f"{what} {path} cannot be written: {problem}")
        return path
    if path.is_dir() and not folder:
        raise IsADirectoryError(f"{what} {path} is a folder; give the path of a file to write")
    target = path if folder else _through_link(path)
    if not folder and path.is_symlink() and not target.parent.exists():
        raise FileNotFoundError(
            f"{what} {path} is a symbolic link to {target}, whose folder {target.parent} does "
            f"not exist: the output would be written there, making folders outside "
            f"{path.parent}; give another path, or make that folder first"
        )
    kind = None if folder else _sink_kind(target)
    if kind is not None:  # written in place (SINKS), never replaced
        if kind not in SINKS:
            raise OSError(
                f"{what} {path} is a {kind}, not a regular file; give the path of a file to write"
            )
        if not os.access(path, os.W_OK):
            raise PermissionError(f"{what} {path} cannot be written: permission denied")
        return path
    where = target if folder else target.parent
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
    refusal = None if folder else _sticky_refusal(target)
    if refusal is not None:
        raise PermissionError(f"{what} {path} cannot be replaced: {refusal}")
    return path


def _sticky_refusal(target: Path) -> str | None:
    """Why this process could not rename a new file over the existing ``target``, or ``None``.

    In a folder with the sticky bit (mode ``+t``, as ``/tmp``), only the
    owner of an entry or of the folder may rename over it or remove it (or a
    process with ``CAP_FOWNER``; root is taken to have it), however writable
    the folder is: creating a new file there succeeds, replacing another
    user's fails with ``EPERM``. A missing ``target`` is fine.
    """
    try:
        entry = os.lstat(target)
        folder = os.stat(target.parent)
    except OSError:
        return None
    euid = os.geteuid()
    if not folder.st_mode & stat.S_ISVTX or euid in (0, entry.st_uid, folder.st_uid):
        return None
    return (
        f"it belongs to another user (uid {entry.st_uid}), and its folder {target.parent} has "
        f"the sticky bit, so only that user (or the folder's owner) may replace it; remove it "
        f"as that user, or write elsewhere"
    )


def write_all_atomic(writers: Mapping[str | os.PathLike, Callable[[BinaryIO], object]]) -> None:
    """Writes several files so that all of them appear or none does.

    Every file is first written in full to a temporary file beside it and
    fsynced; only when all are written are they renamed into place
    (:func:`_replace_all`: a rename that fails puts every file already
    replaced back as it was). On any error, every temporary file is removed
    and every ``path`` is as it was; the error names the ``path``. A file
    replaced keeps its mode and, where permitted, its group
    (:func:`_take_permissions`). A character device or FIFO among the paths
    (:data:`SINKS`), or one of this process's descriptors (``/dev/stdout``),
    is written in place after the renames, in order, while the files they
    replaced are still kept aside: should one fail (``/dev/full``, a FIFO
    nobody reads, Ctrl-C), every file is put back as it was, and the error
    names the outputs written in place already (a stream cannot take its
    bytes back). Any other non-regular file is refused first.

    Args:
      writers: ``{path: write(file)}``.
    """
    temps: list[tuple[str, Path, Path]] = []  # (temporary file, target, path as given)
    sinks: list[tuple[Path, bytes, int | None]] = []  # (path, bytes, descriptor)
    named = None
    try:
        for given, write in writers.items():
            named = Path(given)
            fd = _own_descriptor(named)
            if fd is not None:
                problem = _check_descriptor(fd)
                if problem is not None:
                    raise OSError(f"cannot write {named}: {problem}")
                sinks.append((named, _to_bytes(write), fd))
                continue
            target = _through_link(named)
            kind = _sink_kind(target)
            if kind is not None:
                _check_sink(named, kind)
                sinks.append((named, _to_bytes(write), None))
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            temps.append((tmp, target, named))
            _take_permissions(tmp, _replaced_status(target))
            with os.fdopen(fd, "wb") as f:
                write(f)
                check_complete(f)
                os.fsync(f.fileno())
        for _tmp, target, given_path in temps:
            named = given_path
            kind = _sink_kind(target)
            if kind is not None:
                raise OSError(f"it is a {kind}, not a regular file, and is not replaced")
    except BaseException as err:
        for tmp, _, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and named is not None and not str(err).startswith("cannot "):
            raise _naming(err, named) from err
        raise

    def write_sinks() -> None:
        written: list[Path] = []
        for sink, data, fd in sinks:
            try:
                if fd is None:
                    _write_sink(sink, data)
                else:
                    _write_descriptor(sink, fd, data)
            except OSError as err:
                if not written:
                    raise
                were = "was" if len(written) == 1 else "were"
                failed = type(err)(f"{err}; {', '.join(map(str, written))} {were} written already")
                failed.errno = err.errno
                raise failed from err
            written.append(sink)

    _replace_all(temps, then=write_sinks if sinks else None)
    for folder in {target.parent for _, target, _ in temps}:
        fsync_directory(folder)


def _replace_all(
    temps: list[tuple[str, Path, Path]], then: Callable[[], object] | None = None
) -> None:
    """Renames each temporary file over its target: all of them, or none.

    Each existing target is first kept under a backup name beside it, a hard
    link (the target never goes missing), or, where the file system has no
    hard links, the target itself renamed. Should a rename fail (a target
    another user owns in a sticky folder), ``then()`` (called after the
    renames, the backups still kept) fail, or the process be interrupted
    (Ctrl-C), every target already replaced gets its backup back, a target
    that did not exist before is removed again, and the remaining temporary
    files and the backups are deleted. On success the backups are deleted.
    A ``kill -9`` in between can leave a backup (``.NAME.<hex>.old``) behind.

    Args:
      temps: ``(temporary file, target, path as given)``; errors name the last.
      then: more writing that must succeed for the renames to stand (the
        outputs written in place, :func:`write_all_atomic`); its errors name
        their own files.

    Raises:
      OSError: naming the output whose backup or rename failed (or ``then``'s
        error), and any previous file that could not be put back (where its
        copy is).
    """
    backups: list[tuple[Path, Path, bool]] = []  # (target, backup, made by renaming target)
    done: list[Path] = []
    named = None
    try:
        for _, target, given in temps:
            named = given
            if os.path.lexists(target):
                backups.append((target, *_keep_aside(target)))
        for tmp, target, given in temps:
            named = given
            _replace_regular(tmp, target)
            done.append(target)
        named = None
        if then is not None:
            then()
    except BaseException as err:
        kept = _put_back(backups, done)
        for tmp, _, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        if not isinstance(err, OSError):
            raise
        failed = err if named is None or str(err).startswith("cannot ") else _naming(err, named)
        if kept:
            failed = type(failed)(f"{failed}; {kept}")
            failed.errno = err.errno
        if failed is err:
            raise
        raise failed from err
    for _, backup, _ in backups:
        backup.unlink(missing_ok=True)


def _keep_aside(target: Path) -> tuple[Path, bool]:
    """A backup of ``target`` beside it: ``(backup, whether target was renamed to it)``."""
    while True:
        backup = target.with_name(f".{target.name}.{os.urandom(6).hex()}.old")
        try:
            os.link(target, backup)
            return backup, False
        except FileExistsError:
            continue
        except OSError:  # no hard links on this file system (EPERM, EOPNOTSUPP, EMLINK)
            os.rename(target, backup)
            return backup, True


def _put_back(backups: list[tuple[Path, Path, bool]], done: list[Path]) -> str:
    """Restores the targets :func:`_replace_all` replaced or moved; what could not be."""
    kept = []
    for target, backup, moved in reversed(backups):
        try:
            if moved or target in done:
                os.replace(backup, target)
            else:
                backup.unlink()
        except OSError as err:
            kept.append(f"the previous {target} is kept as {backup} ({err.strerror or err})")
    had = {target for target, _, _ in backups}
    for target in done:
        if target not in had:
            target.unlink(missing_ok=True)
    return "; ".join(kept)


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


# -- temporary folders --------------------------------------------------------

_TEMP_SUFFIX = ".sparsegcn"


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _temp_pattern(stem: str) -> re.Pattern:
    return re.compile(
        rf"^\.{re.escape(stem)}\.(?P<kind>[a-z]+)-(?P<host>[0-9a-f]{{8}})-(?P<pid>\d+)-[a-z0-9_]+"
        rf"{re.escape(_TEMP_SUFFIX)}$"
    )


def make_folders(directory: str | os.PathLike) -> list[Path]:
    """Makes ``directory`` and its missing parents; returns those this call made,
    deepest first (absolute paths), for :func:`remove_made_folders`.

    A folder made meanwhile by another process is not counted as made here.
    """
    directory = Path(directory)
    missing: list[Path] = []
    folder = directory.absolute()
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    made: list[Path] = []
    for folder in reversed(missing):
        try:
            os.mkdir(folder)
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours to remove
        except OSError as err:
            remove_made_folders(made[::-1])
            raise _naming(err, folder) from err
        made.append(folder)
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)  # the error naming what is in the way
    return made[::-1]


def remove_made_folders(made: list[Path]) -> None:
    """Removes the folders :func:`make_folders` made (deepest first) while they are
    empty: a failed download or build leaves no empty ``--root`` behind, and never
    a folder that something else has put a file in since."""
    for folder in made:
        try:
            os.rmdir(folder)
        except OSError:
            return  # not empty (or gone): neither it nor its parents are ours to remove


# The parents temp_folder made for each temporary folder (discard_temp_folder removes them).
_TEMP_PARENTS: dict[Path, list[Path]] = {}


def discard_temp_folder(folder: str | os.PathLike) -> None:
    """Removes a :func:`temp_folder` that will not be renamed into place (the work
    failed, or was interrupted), and then the parents it made, while empty."""
    folder = Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
    remove_made_folders(_TEMP_PARENTS.pop(folder, []))


def temp_folder(parent: str | os.PathLike, stem: str, kind: str = "tmp") -> Path:
    """A new temporary folder in ``parent`` for building ``parent/stem``, mode per the umask.

    Named ``.<stem>.<kind>-<host>-<pid>-<random>.sparsegcn`` so that a later
    call recognises it as one of ours and, once its process is gone,
    removes it (:func:`remove_stale_temp_folders`, called here first):
    a ``kill -9`` leaves nothing behind for good. ``tempfile.mkdtemp``'s
    mode 0700 is widened to what the umask allows, since the folder is
    renamed into place as a result others may read.

    Args:
      parent: the folder to create it in (made if missing).
      stem: the name of what is being built (``path.name``).
      kind: a lowercase word naming the folder's role (``"tmp"``, ``"old"``,
        ``"edges"``...).
    """
    parent = Path(parent)
    try:
        made = make_folders(parent)
    except OSError as err:
        raise _naming(err, parent / stem) from err
    remove_stale_temp_folders(parent, stem)
    prefix = f".{stem}.{kind}-{_host_tag()}-{os.getpid()}-"
    try:
        folder = Path(tempfile.mkdtemp(prefix=prefix, suffix=_TEMP_SUFFIX, dir=parent))
    except OSError as err:
        remove_made_folders(made)
        raise _naming(err, parent / stem) from err
    os.chmod(folder, 0o777 & ~_umask())
    if made:
        _TEMP_PARENTS[folder] = made
    return folder


def temp_file_path(parent: str | os.PathLike, stem: str, kind: str = "part") -> Path:
    """A fresh name in ``parent`` for a temporary file building ``parent/stem`` (not created).

    Named as :func:`temp_folder` names folders, so that once its process is
    gone a later call removes it (:func:`remove_stale_temp_folders`, called
    here first): a download killed with ``kill -9`` leaves its partial file
    only until the next one into that folder. Create it with ``open(path, "xb")``.
    """
    parent = Path(parent)
    remove_stale_temp_folders(parent, stem)
    random = secrets.token_hex(8)
    return parent / f".{stem}.{kind}-{_host_tag()}-{os.getpid()}-{random}{_TEMP_SUFFIX}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process, or no way to tell
        return True
    return True


def remove_stale_temp_folders(parent: str | os.PathLike, stem: str) -> list[Path]:
    """Removes the temporary folders (and files) of ``parent/stem`` whose process has ended.

    Only folders named as :func:`temp_folder` names them, made on this host
    by a process that no longer runs, owned by this user and not symbolic
    links, are removed; anything else is left alone. An ``old`` folder
    (:func:`replace_folder`) whose process died after moving ``parent/stem``
    into it and before moving the new folder in holds the only copy: while
    ``parent/stem`` is missing, its ``data`` is moved back there first.

    Returns:
      The folders removed.
    """
    pattern = _temp_pattern(stem)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(os.fspath(parent)))
    except OSError:
        return removed
    host = _host_tag()
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or match["host"] != host:
            continue
        pid = int(match["pid"])
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        is_folder, is_file = stat.S_ISDIR(info.st_mode), stat.S_ISREG(info.st_mode)
        if not (is_folder or is_file) or info.st_uid != os.geteuid():
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        if is_file:  # a temp_file_path's partial file
            Path(entry.path).unlink(missing_ok=True)
            removed.append(Path(entry.path))
            continue
        kept = Path(entry.path) / "data"
        target = Path(parent) / stem
        # Unless the new folder made it into place, this is the only copy: put it back.
        if match["kind"] == "old" and os.path.lexists(kept) and not os.path.lexists(target):
            try:
                os.replace(kept, target)
            except OSError:
                continue  # keep it where it is
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swaps the entries ``a`` and ``b`` in one step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``); False where the system or file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # glibc before 2.28, another libc
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(b))


def replace_folder(new: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Moves the finished folder ``new`` to ``path``, replacing what is there.

    ``new`` must be in ``path``'s parent folder (a :func:`temp_folder`). An
    empty folder or nothing at ``path`` is replaced by one rename. A folder
    with contents, or a symbolic link (to a folder, an empty one, or
    nothing: the link is replaced, never what it names), is swapped with
    ``new`` in one step where Linux can
    (``renameat2(RENAME_EXCHANGE)``), then removed; elsewhere it is first
    moved aside into an ``old`` :func:`temp_folder`, and put back if moving
    ``new`` in fails (an exception, ``KeyboardInterrupt`` included). A
    process killed between the two renames leaves the old folder's only copy
    in that ``old`` folder, and the next :func:`temp_folder` for ``path``
    moves it back (:func:`remove_stale_temp_folders`). At no point is
    neither the old nor the new folder at ``path`` for longer than that.

    A folder replaced hands its mode and, where permitted, its group on to
    ``new`` (:func:`_take_permissions`); with the set-group-id bit, the
    group of the files in ``new`` too, as if they had been made in it.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      OSError: naming ``path``; a mount point at ``path`` (which cannot be
        renamed over, see :func:`check_not_mount_point`) says so.
    """
    new, path = Path(new), Path(path)
    try:
        return _replace_folder(new, path)
    except OSError as err:
        if str(err).startswith("cannot "):
            raise
        named = _naming(err, path)
        if err.errno == errno.EBUSY and os.path.ismount(path):
            named = OSError(f"cannot write {path}: {_MOUNT_POINT}")
            named.errno = err.errno
        raise named from err


_MOUNT_POINT = (
    "it is a mount point, which a folder built beside it cannot be renamed over; give a "
    "folder inside it"
)


def rename_into_place(new: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Renames the finished folder ``new`` to ``path``, unless a folder got there first.

    Two loads of one dataset may download it at once, each into its own
    :func:`temp_folder`. The first to finish renames its copy into place; a
    rename over that folder then fails (``ENOTEMPTY`` or ``EEXIST``: a folder
    with contents is never replaced), and the later load uses the folder
    that is there, leaving ``new`` for its caller to remove.

    Returns:
      True when ``new`` is now at ``path``; False when a folder with
      contents was there already (``new`` is left as it is).

    Raises:
      OSError: any other failure, naming ``path`` (a file there:
        ``NotADirectoryError``).
    """
    try:
        os.replace(new, path)
    except OSError as err:
        if err.errno in (errno.ENOTEMPTY, errno.EEXIST) and Path(path).is_dir():
            return False
        raise _naming(err, path) from err
    return True


def _entry_kind(path: Path) -> str:
    """What the existing entry ``path`` is, for a message: ``"a file"``, ``"a FIFO ..."``."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a broken symbolic link"
    return "a file" if stat.S_ISREG(mode) else _kind(mode)


def check_folder_path(path: str | os.PathLike, *, what: str | None = None) -> Path:
    """Refuses a folder to read from or create when something else is in the way.

    ``path``, when it exists, must be a folder (or a symbolic link to one);
    when it is missing, the nearest of its parents that exists must be one.
    Otherwise creating it fails with a bare ``[Errno 17] File exists`` or
    ``[Errno 20] Not a directory``, and reading from it with a file said to
    be missing: neither names the file in the way. Nothing is created.

    Args:
      path: the folder.
      what: how the message names it (``"root"``), before the path.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      ValueError: naming the path that is not a folder, and what it is.
    """
    path = Path(path)
    named = f"{what} {str(path)!r}" if what else repr(str(path))
    if os.path.lexists(path):
        if not path.is_dir():
            raise ValueError(f"{named} exists but is not a directory: it is {_entry_kind(path)}")
        return path
    parent = path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(
            f"cannot create {named}: {str(parent)!r} exists but is not a directory: it is "
            f"{_entry_kind(parent)}"
        )
    return path


def check_not_mount_point(path: str | os.PathLike, *, what: str | None = None) -> None:
    """Refuses a mount point as a folder :func:`replace_folder` is to replace, before the work.

    The new folder is built beside ``path``, in its parent's file system,
    and renamed over it at the end; a mount point cannot be renamed over
    (``EBUSY``), so the whole work would be lost at the last step. A path
    inside the mounted file system works.

    Args:
      path: the folder to be replaced.
      what: how the message names it before the path (``"--out"``).

    Raises:
      ValueError: ``path`` is a mount point (a link to one is fine: the link
        is replaced).
    """
    if not os.path.islink(path) and os.path.ismount(path):
        named = f"{what} {path}" if what else str(path)
        raise ValueError(f"{named}: {_MOUNT_POINT}, e.g. {os.path.join(path, 'dataset')}")


def _inherit_group(folder: Path, gid: int) -> None:
    """Gives the files and folders in ``folder`` the group ``gid``, where permitted."""
    for top, folders, names in os.walk(folder):
        for name in folders + names:
            with contextlib.suppress(OSError):
                os.chown(os.path.join(top, name), -1, gid, follow_symlinks=False)


def _replace_folder(new: Path, path: Path) -> Path:
    _interrupt.check()  # a Ctrl-C swallowed on the way here replaces nothing
    replaced = _replaced_status(path, folder=True)
    if replaced is not None:
        if replaced.st_mode & stat.S_ISGID:
            _inherit_group(new, replaced.st_gid)
        _take_permissions(new, replaced, folder=True)
    empty = replaced is not None and not any(path.iterdir())
    if empty or not os.path.lexists(path):
        os.replace(new, path)
    elif _exchange(new, path):
        fsync_directory(path.parent)
        if new.is_symlink():  # path was a link to a folder: the link is replaced, not its target
            new.unlink()
        else:
            shutil.rmtree(new, ignore_errors=True)  # now the old folder
        return path
    else:
        old = temp_folder(path.parent, path.name, "old")
        os.replace(path, old / "data")
        try:
            os.replace(new, path)
        except BaseException:
            if not os.path.lexists(path):
                with contextlib.suppress(OSError):
                    os.replace(old / "data", path)
            if not os.path.lexists(old / "data"):
                shutil.rmtree(old, ignore_errors=True)
            raise
        fsync_directory(path.parent)
        shutil.rmtree(old, ignore_errors=True)
        return path
    fsync_directory(path.parent)
    return path


# -- space and mapped files ---------------------------------------------------


def reserve_space(path: str | os.PathLike, size: int, *, name: str | None = None) -> None:
    """Allocates the first ``size`` bytes of the file at ``path`` on disk now.

    A file that a memory map writes must have its blocks before the pages
    are stored: a sparse file on a full disk makes the store fault with
    ``SIGBUS``, which kills the process without a message. With the blocks
    reserved, a full disk is an :class:`OSError` here instead.

    Args:
      path: an existing file.
      size: bytes to allocate from its start.
      name: how the error names the file (default: ``path``), e.g. the
        folder the user asked for rather than a temporary file in it.

    Raises:
      OSError: (``ENOSPC``, a quota, ...) naming ``name`` or ``path``.
    """
    if size <= 0:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        allocate = getattr(os, "posix_fallocate", None)
        if allocate is None:  # no posix_fallocate (macOS, Windows): write zeros
            _write_zeros(fd, size)
        else:
            try:
                allocate(fd, 0, size)
            except OSError as err:
                if err.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
                _write_zeros(fd, size)
    except OSError as err:
        named = type(err)(
            f"cannot write {name or path}: {err.strerror or err} ({size:,} bytes needed)"
        )
        named.errno = err.errno
        raise named from err
    finally:
        os.close(fd)


def _write_zeros(fd: int, size: int, block: int = 1 << 22) -> None:
    zeros = bytes(block)
    done = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while done < size:
        done += os.write(fd, zeros[: min(block, size - done)])


def check_mapped(array, what: str = "a memory-mapped file") -> None:
    """Raises if the file under a memory-mapped ``array`` is now shorter than its mapping.

    A read of a mapped page past a file's end is ``SIGBUS``: the process
    dies without a message. Call this before each batch of reads of a file
    that another process might truncate or rewrite meanwhile; it costs one
    ``stat``. A truncation between this check and the reads still crashes
    the process (nothing in Python can catch that signal).

    Args:
      array: a :class:`numpy.memmap` or a view of one; anything else passes.
      what: how the message names the array (e.g. ``"features"``).

    Raises:
      OSError: the file shrank, or is gone, naming it and both sizes.
    """
    holder = array
    while holder is not None and not isinstance(holder, np.memmap):
        holder = getattr(holder, "base", None)
    mapped = memory_map(array)
    if holder is None or mapped is None or getattr(holder, "filename", None) is None:
        return
    filename = str(holder.filename)
    offset = int(holder.offset)  # the map starts at offset rounded down to the granularity
    needed = offset - offset % mmap.ALLOCATIONGRANULARITY + len(mapped)
    try:
        size = os.stat(filename).st_size
    except OSError as err:
        raise OSError(
            f"{what} {filename} can no longer be read ({err.strerror or err}) while it is "
            f"memory-mapped by this run"
        ) from None
    if size < needed:
        raise OSError(
            f"{what} {filename} shrank to {size:,} bytes while this run reads it "
            f"({needed:,} expected): it was truncated or rewritten under the run; restore "
            f"it and run again"
        )


# -- outputs that are inputs --------------------------------------------------


def _output_targets(path: Path) -> set[str]:
    """The real paths a write of ``path`` may land on (the name, and a link's target)."""
    parent = os.path.realpath(path.parent)
    return {os.path.join(parent, path.name), os.path.realpath(path)}


def _written_in_place(path: Path) -> bool:
    """Whether a write of ``path`` goes into an open stream that outputs share without
    replacing one another: one of this process's descriptors (``/dev/stdout``), or a
    character device (``/dev/null``, a terminal). Not a FIFO: each output opens it anew,
    and its reader may stop at the end of the first."""
    return _own_descriptor(path) is not None or _sink_kind(_through_link(path)) == (
        "character device"
    )


def _hard_linked(a: Path, b: Path) -> bool:
    """Whether two existing regular files are one file (hard links: the same inode)."""
    if not (a.is_file() and b.is_file()):
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _within(path: str, parents: set[str]) -> bool:
    """Whether the real path ``path`` lies strictly inside one of the real paths ``parents``."""
    return any(path.startswith(parent.rstrip(os.sep) + os.sep) for parent in parents)


def _within_any(paths: set[str], parent: str) -> bool:
    """Whether one of the real paths ``paths`` lies strictly inside the real path ``parent``."""
    return any(_within(path, {parent}) for path in paths)


def check_distinct_outputs(
    files: Mapping[str, str | os.PathLike | None],
    folders: Mapping[str, tuple[str | os.PathLike | None, Callable[[str], bool]]] | None = None,
) -> None:
    """Refuses outputs of one run that would land on one another, before any work is done.

    Two file outputs naming one file (compared as :func:`check_not_inputs`
    compares: real paths, and hard links by identity), a file output inside
    an output folder under a name that folder's writer writes or deletes
    there (a checkpoint's manifest in ``--checkpoint DIR``, say), or a file
    output whose path another output needs as a folder: the path of an
    output folder or one of its parents (``--json out --checkpoint out``,
    ``--json j --checkpoint j/sub``), or a parent of another file output
    (``--json a --plot a/b.png``). Each of those would fail only when the
    second output is written, after the run.
    Outputs that are both written in place, to this process's descriptors
    or a character device (``--json /dev/stdout --plot /dev/stdout``,
    ``/dev/null`` twice), are allowed: each is written after the other,
    nothing is replaced. One of them and a file replaced by rename are
    still refused when they land on one file (``--json /dev/stdout --plot
    runs.log`` with stdout redirected to ``runs.log``).

    Args:
      files: ``{flag: path}`` of the file outputs; ``None`` entries are skipped.
      folders: ``{flag: (path, owns)}`` of the folder outputs, ``owns(name)``
        telling whether a file named ``name`` is one that folder keeps (a
        checkpoint's manifest or arrays, its lock, a cached result): what a
        run writes or deletes there, or reads from it.

    Raises:
      ValueError: naming both flags and the path.
    """
    named = [(flag, Path(p)) for flag, p in files.items() if p is not None]
    for i, (flag, path) in enumerate(named):
        targets = _output_targets(path)
        in_place = _written_in_place(path)
        for other, other_path in named[:i]:
            if in_place and _written_in_place(other_path):
                continue
            other_targets = _output_targets(other_path)
            if targets & other_targets or _hard_linked(path, other_path):
                raise ValueError(
                    f"{flag} and {other} name the same file {str(path)!r}: one would replace "
                    f"the other; give each its own path"
                )
            for outer, outer_path, outer_targets, inner, inner_path, inner_targets in (
                (flag, path, targets, other, other_path, other_targets),
                (other, other_path, other_targets, flag, path, targets),
            ):
                if any(_within(t, outer_targets) for t in inner_targets):
                    raise ValueError(
                        f"{outer} {str(outer_path)!r} is a file, but {inner} "
                        f"{str(inner_path)!r} needs it as a folder; give each its own path"
                    )
        for folder_flag, (folder, owns) in (folders or {}).items():
            if folder is None:
                continue
            real = os.path.realpath(folder)
            if real in targets:
                raise ValueError(
                    f"{flag} and {folder_flag} name the same path {str(path)!r}, a file for "
                    f"{flag} and a folder for {folder_flag}; give each its own path"
                )
            if _within(real, targets):
                raise ValueError(
                    f"{flag} {str(path)!r} is a file, but {folder_flag} {str(folder)!r} "
                    f"needs it as a folder; give each its own path"
                )
            if any(os.path.dirname(t) == real and owns(os.path.basename(t)) for t in targets):
                raise ValueError(
                    f"{flag} {str(path)!r} names one of the files the folder of {folder_flag} "
                    f"{str(folder)!r} keeps; write it elsewhere"
                )


def _host_id() -> str:
    """This machine's identity for comparing file identities between processes: the
    kernel's boot id (two containers on one kernel share it, and their files' device
    numbers), and the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{boot}\0{socket.gethostname()}"


def output_identity(path: str | os.PathLike | None) -> bytes:
    """8 bytes that two processes on one host share exactly when a write of ``path``
    by each would replace one file; 8 zero bytes when nothing would be replaced.

    Zero for no path, and for outputs written in place (this process's own
    ``/dev/stdout``, a character device), which each process writes where it
    stands. Otherwise a digest of the host (:func:`_host_id`), the device
    and inode of the folder the file lands in (links followed, as
    :func:`write_atomic` follows them) and its name: ``out.json`` and
    ``./sub/../out.json``, or two links to one folder, agree; the same
    path on two hosts does not (without a shared disk those are two files;
    with one, this cannot tell).
    """
    if path is None or _written_in_place(Path(path)):
        return bytes(8)
    target = _through_link(Path(path).expanduser())
    parent = os.path.realpath(target.parent)
    try:
        folder = os.stat(parent)
        where = f"{folder.st_dev}:{folder.st_ino}"
    except OSError:
        where = parent
    digest = hashlib.sha256(f"{_host_id()}\0{where}\0{target.name}".encode()).digest()
    return digest[:8] if any(digest[:8]) else b"\x01" + digest[1:8]


#: How far :func:`_linked_targets` looks for symbolic links in an input folder: this many
#: folders down, and this many entries in all. A dataset's folder holds a few files, a few
#: levels deep (``ogbn_arxiv/split/time/``); a larger one is checked as far as this goes.
LINK_SEARCH_DEPTH = 4
LINK_SEARCH_ENTRIES = 10_000


def _linked_targets(folder: Path) -> list[tuple[Path, str, bool]]:
    """The symbolic links in an input folder, and below it: ``(link, real path of its
    target, whether that is a folder)``.

    A dataset whose files are links into a store elsewhere (DVC's symlink
    cache, git-annex and datalad, a shared copy) is read from the targets; a
    write there replaces the dataset as surely as one in its folder. Linked
    folders are looked into too (their links count), each real folder once;
    the search stops at :data:`LINK_SEARCH_DEPTH` levels and
    :data:`LINK_SEARCH_ENTRIES` entries. Unreadable folders are skipped, and
    so is a link to the folder itself or to a folder it lies in (``up ->
    ..``): nothing of the input is read through it that is not in the folder.
    """
    found: list[tuple[Path, str, bool]] = []
    top = os.path.realpath(folder)
    seen = {top}
    pending = [(folder, 0)]
    entries = 0
    while pending and entries < LINK_SEARCH_ENTRIES:
        where, depth = pending.pop()
        try:
            with os.scandir(where) as listing:
                for entry in listing:
                    entries += 1
                    if entries > LINK_SEARCH_ENTRIES:
                        break
                    is_link, is_dir = entry.is_symlink(), entry.is_dir()
                    if not (is_link or is_dir):
                        continue
                    path = where / entry.name
                    real = os.path.realpath(path) if is_link else None
                    if real is not None:
                        if is_dir and (real == top or _within(top, {real})):
                            continue
                        found.append((path, real, is_dir))
                    if is_dir and depth + 1 < LINK_SEARCH_DEPTH:
                        real = real or os.path.realpath(path)
                        if real not in seen:
                            seen.add(real)
                            pending.append((path, depth + 1))
        except OSError:
            continue
    return found


def check_not_inputs(outputs: Mapping[str, str | os.PathLike | None], inputs) -> None:
    """Refuses an output that is one of the run's inputs, or lies inside an input folder.

    Compares real paths (symbolic links resolved), and file identities
    (``os.path.samefile``) for hard links, before any work is done. The
    targets of the symbolic links in an input folder are inputs too (a
    dataset whose files link into a DVC or git-annex store): an output that
    is one, or lies inside a linked folder, is refused (:func:`_linked_targets`).

    Args:
      outputs: ``{flag: path}`` of the files (or folders) the run writes;
        ``None`` entries are skipped.
      inputs: ``(description, path)`` pairs of what the run reads: a file,
        or a folder whose every file is an input, or a path not there yet (a
        dataset the run downloads, a cache made on first use), refused as a
        folder would be.

    Raises:
      ValueError: naming the flag, the output and the input.
    """
    inputs = [(what, Path(p)) for what, p in inputs if p is not None]
    links: dict[Path, list[tuple[Path, str, bool]]] = {}
    for flag, out in outputs.items():
        if out is None:
            continue
        out = Path(out)
        targets = _output_targets(out)
        for what, source in inputs:
            real = os.path.realpath(source)
            clash = real in targets
            inside = not clash and any(_within(t, {real}) for t in targets)
            if inside and not os.path.lexists(source):
                # Not there yet (a dataset the run downloads, a cache made on first use):
                # it may become a folder, with the output inside.
                raise ValueError(
                    f"{flag} {out} lies inside {what} {source}, which this run reads "
                    f"(it is made on first use); write it elsewhere"
                )
            clash = clash or (inside and source.is_dir())
            if clash or _hard_linked(out, source):
                raise ValueError(
                    f"{flag} {out} would overwrite {what} {source}, an input of this run; "
                    f"write it elsewhere"
                )
            if not source.is_dir():
                continue
            if source not in links:
                links[source] = _linked_targets(source)
            for link, target, folder in links[source]:
                if target in targets or (folder and _within_any(targets, target)):
                    raise ValueError(
                        f"{flag} {out} would overwrite {target} (linked to by {link}) in "
                        f"{what} {source}, an input of this run; write it elsewhere"
                    )


def check_inputs_outside(folders: Mapping[str, str | os.PathLike | None], inputs) -> None:
    """Refuses an input that is, or lies inside, an output folder the run replaces whole.

    The reverse of :func:`check_not_inputs`: a folder replaced by the run's
    result (``--out DIR``, renamed over at the end) would take the input
    with it, and an input made on first use (a synthetic cache under
    ``--root``, a download) would first be written into it, so that the
    folder no longer holds only what may be replaced and is refused after
    the work. Real paths are compared (symbolic links resolved, missing
    paths as they would be made), before any work is done.

    Args:
      folders: ``{flag: path}`` of the folders the run replaces; ``None``
        entries are skipped.
      inputs: ``(description, path)`` pairs of what the run reads, there
        already or made on first use; ``None`` paths are skipped.

    Raises:
      ValueError: naming the flag, the folder and the input.
    """
    inputs = [(what, Path(p)) for what, p in inputs if p is not None]
    for flag, folder in folders.items():
        if folder is None:
            continue
        real = os.path.realpath(Path(folder).expanduser())
        for what, source in inputs:
            source_real = os.path.realpath(source.expanduser())
            if source_real == real or _within(source_real, {real}):
                where = "is" if source_real == real else "lies inside"
                raise ValueError(
                    f"{what} {source} {where} {flag} {folder}, the folder this run replaces "
                    f"with its result; write the result elsewhere, or keep the input outside it"
                )


def check_outputs(
    outputs: Mapping[str, str | os.PathLike | None],
    inputs=(),
    *,
    defaults: Mapping[str, str | os.PathLike] | None = None,
) -> None:
    """Refuses a run's output paths before any work is done, so a bad one costs no run.

    The checks a command with output options makes once, right after parsing
    its arguments: the outputs are distinct (:func:`check_distinct_outputs`),
    each can be written (:func:`check_writable`), none is an input
    (:func:`check_not_inputs`), and none is a default path whose file exists
    already. A default path names a kept result (``benchmarks/results/...``)
    that a run without the output option would replace unasked; a path given
    explicitly may be replaced as usual. Nothing is created or changed.

    Args:
      outputs: ``{flag: path}`` of the files the run writes, e.g.
        ``{"--json": args.json}``; ``None`` entries are skipped.
      inputs: ``(description, path)`` pairs of what the run reads: a file, or
        a folder whose every file is an input (a dataset's folder, e.g.
        ``sparsegcn.datasets.data_location``), or a path not there yet
        (a cache made on first use), refused as a folder would be; ``None``
        paths are skipped.
      defaults: ``{flag: path}`` of the outputs the run chose itself because
        the flag was not given.

    Raises:
      ValueError: two outputs name one file, or an output is (or lies inside)
        an input; the message names the flag and the paths.
      FileExistsError: an output is its flag's default path and that file
        exists; the message names the flag and the file.
      OSError: an output cannot be written (:func:`check_writable`); the
        message names the flag and the path.
    """
    check_distinct_outputs(outputs)
    for flag, path in outputs.items():
        if path is None:
            continue
        default = (defaults or {}).get(flag)
        if (
            default is not None
            and os.path.realpath(path) == os.path.realpath(default)
            and os.path.lexists(path)
        ):
            raise FileExistsError(
                f"{flag} defaults to {path}, which exists (a kept result); pass {flag} PATH "
                f"to write elsewhere, or {flag} {path} to replace it"
            )
        check_writable(path, what=flag)
    check_not_inputs(outputs, inputs)


# -- reading inputs -------------------------------------------------------------------

#: JSON nesting deeper than this is refused: no manifest or report nests past a few levels,
#: and Python's recursion (the decoder's, or any code that walks the result) stops near 1000.
MAX_JSON_DEPTH = 64

#: JSON files larger than this are refused unread (manifests and checkpoint histories
#: take kilobytes to megabytes).
MAX_JSON_BYTES = 1 << 28

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFileError(OSError, ValueError):
    """An input path names something other than a regular file (a FIFO, a device, a folder).

    Reading a FIFO waits for a writer forever, and ``/dev/zero`` never ends, so inputs
    are refused before they are opened for reading. An ``OSError`` (code that handles
    unreadable files handles it) and a ``ValueError`` (the input is at fault: the CLI
    exits with status 2).

    Attributes:
      kind: what the path is instead, e.g. ``"a FIFO (named pipe)"``.
    """

    kind: str = "not a regular file"


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse(path: str | os.PathLike, mode: int, what: str | None) -> NotRegularFileError:
    named = f"{what} {path}" if what else str(path)
    err = NotRegularFileError(f"{named} is not a regular file: it is {_kind(mode)}")
    err.kind = _kind(mode)
    return err


def check_regular_file(path: str | os.PathLike, *, what: str | None = None) -> Path:
    """Refuses a path that is not a regular file (symbolic links are followed).

    ``os.stat`` does not open the path, so a FIFO does not block here.

    Args:
      path: the input file.
      what: how the message names it (e.g. ``"--resume"``), before the path.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      NotRegularFileError: it is a folder, a FIFO, a device or a socket (the
        message names the path and what it is).
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _refuse(path, mode, what)
    return Path(path)


def open_regular(path: str | os.PathLike, *, what: str | None = None) -> BinaryIO:
    """Opens a regular file for binary reading; anything else is refused without waiting.

    The file is opened non-blocking (so a FIFO without a writer does not
    block), checked with ``fstat`` on the open descriptor (no race with a
    rename), and then switched back to blocking reads.

    Raises:
      FileNotFoundError, PermissionError: as ``open`` would.
      NotRegularFileError: ``path`` is not a regular file (see
        :func:`check_regular_file`).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, mode, what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, *, what: str | None = None) -> bytes:
    """The contents of a regular file (:func:`open_regular`)."""
    with open_regular(path, what=what) as f:
        return f.read()


def read_text(path: str | os.PathLike, *, encoding: str = "utf-8", what: str | None = None) -> str:
    """The text of a regular file (:func:`open_regular`)."""
    return read_bytes(path, what=what).decode(encoding)


def read_json(path: str | os.PathLike, *, what: str | None = None):
    """Decodes the JSON of a regular file, refusing nesting deeper than :data:`MAX_JSON_DEPTH`.

    Raises:
      FileNotFoundError, PermissionError, NotRegularFileError: see
        :func:`open_regular`.
      UnicodeDecodeError: the file is not UTF-8.
      ValueError: not JSON, larger than :data:`MAX_JSON_BYTES`, or nested
        deeper than :data:`MAX_JSON_DEPTH` (the message names the file).
    """
    with open_regular(path, what=what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_JSON_BYTES:  # e.g. a sparse file of terabytes: never read it whole
            raise ValueError(
                f"{path}: {size} bytes is too large for JSON we read (at most {MAX_JSON_BYTES})"
            )
        text = f.read().decode("utf-8")
    try:
        value = json.loads(text)
        deep = _nested_deeper(value, MAX_JSON_DEPTH)
    except RecursionError:
        deep = True
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if deep:
        raise ValueError(f"{path}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return value


def _nested_deeper(value, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` levels in ``value`` (no recursion)."""
    level, depth = [value], 0
    while True:
        containers = [item for item in level if isinstance(item, (dict, list))]
        if not containers:
            return False
        depth += 1
        if depth > limit:
            return True
        level = [
            child
            for item in containers
            for child in (item.values() if isinstance(item, dict) else item)
        ]


def check_regular_tree(folder: str | os.PathLike) -> None:
    """Refuses a folder holding anything but folders and regular files (links followed).

    For folders a third-party reader walks by itself (``ogb`` reads its raw
    files with pandas): a FIFO among them would block it, a device never end.
    Links to folders are not walked into.

    Raises:
      NotRegularFileError: naming the first entry that is a FIFO, a device
        or a socket.
      FileNotFoundError: a broken link.
    """
    for top, _, names in os.walk(os.fspath(folder)):
        for name in names:
            check_regular_file(Path(top) / name)


NPY_MAGIC = b"\x93NUMPY"

#: ``.npy`` headers longer than this are refused unread (NumPy writes 118 bytes or so;
#: its own reader refuses headers over 10000 characters).
MAX_NPY_HEADER = 1 << 16

# The header length's format per .npy version; version 3.0 differs from 2.0 only in
# the header's encoding (UTF-8, for structured field names).
_NPY_LENGTHS = {(1, 0): "<H", (2, 0): "<I", (3, 0): "<I"}


class NpyHeader(NamedTuple):
    """What an ``.npy`` header declares (:func:`read_npy_header`).

    Attributes:
      shape: the array's shape, every dimension ``>= 0``.
      fortran_order: whether the data is in column-major order.
      dtype: the element type (never an object dtype).
      offset: the header's length in bytes: the data starts there.
    """

    shape: tuple[int, ...]
    fortran_order: bool
    dtype: np.dtype
    offset: int

    @property
    def nbytes(self) -> int:
        """The bytes of data the header declares: ``prod(shape) * itemsize``."""
        return math.prod(self.shape) * self.dtype.itemsize

    def describe(self) -> str:
        """``float32[2708, 1433]``."""
        return f"{self.dtype}{list(self.shape)}"


def read_npy_header(
    f: IO[bytes], path: str | os.PathLike, *, member: str | None = None
) -> NpyHeader:
    """Reads the header of the ``.npy`` data at ``f``'s position, and nothing more.

    At most ``12 + MAX_NPY_HEADER`` bytes are read, however large a shape
    the header declares: callers compare :attr:`NpyHeader.nbytes` with the
    bytes there are before reading (or allocating) any data.

    Args:
      f: a binary file at the start of the ``.npy`` data (an open file, or
        a member of a zip archive).
      path: the file, for messages.
      member: the member of ``path`` that ``f`` reads (an ``.npz``'s
        ``name.npy``), for messages.

    Returns:
      the :class:`NpyHeader`.

    Raises:
      CorruptFileError: naming ``path`` (and ``member``): not ``.npy`` data,
        a truncated or unreadable header, an unknown format version, a
        negative dimension, or an object dtype (which would need pickle).
    """
    where = f"member {member}: " if member else ""

    def corrupt(cause: str) -> CorruptFileError:
        return CorruptFileError(path, where + cause)

    magic = f.read(len(NPY_MAGIC) + 2)
    if magic[: len(NPY_MAGIC)] != NPY_MAGIC:
        what = "it is empty" if not magic else f"it starts with {magic[: len(NPY_MAGIC)]!r}"
        raise corrupt(f"not a NumPy .npy file ({what})")
    version = tuple(magic[len(NPY_MAGIC) :])
    if version not in _NPY_LENGTHS:
        raise corrupt(f"not a NumPy .npy file this reader knows (format version {version})")
    length_format = _NPY_LENGTHS[version]
    length_bytes = f.read(struct.calcsize(length_format))
    if len(length_bytes) < struct.calcsize(length_format):
        raise corrupt("truncated in its .npy header")
    (length,) = struct.unpack(length_format, length_bytes)
    if length > MAX_NPY_HEADER:
        raise corrupt(f"its .npy header claims {length} bytes (at most {MAX_NPY_HEADER})")
    text = f.read(length)
    if len(text) < length:
        raise corrupt("truncated in its .npy header")
    try:
        if version == (3, 0):  # UTF-8; the 2.0 reader decodes Latin-1
            text = text.decode("utf-8").encode("latin-1")
        reader = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran_order, dtype = reader(io.BytesIO(length_bytes + text))
    except (ValueError, TypeError, UnicodeError, RecursionError) as err:
        raise corrupt(f"not a readable .npy header ({' '.join(str(err).split())})") from None
    if any(d < 0 for d in shape):
        raise corrupt(f"its .npy header declares a negative shape {list(shape)}")
    if dtype.hasobject:
        raise corrupt("holds Python objects (an object array), which would need pickle; refused")
    offset = len(magic) + len(length_bytes) + length
    return NpyHeader(tuple(int(d) for d in shape), bool(fortran_order), dtype, offset)


def load_npy(
    path: str | os.PathLike, *, mmap_mode: Literal["r", "r+", "c"] | None = None
) -> np.ndarray:
    """``np.load`` of a ``.npy`` regular file, never unpickling, with errors that name the file.

    The path is refused first if it is not a regular file (a FIFO would block,
    a device never end), then if it does not start as a ``.npy`` file:
    ``np.load`` reads anything else as a pickle, so a JSON or text file in
    place of an array would be reported as "pickled (object) data". Then the
    bytes of data its header declares (:func:`read_npy_header`) must be the
    bytes the file holds after the header, before any is read: a header
    claiming ``[10**12, 2]`` in an 80-byte file is a truncated file, never
    an allocation of 16 TB.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      NotRegularFileError: ``path`` is a FIFO, a device, a folder, ...
      CorruptFileError: ``path`` is not a ``.npy`` file (naming what it starts
        with), is truncated or longer than its header declares, or holds
        Python objects (which would need pickle).
      OSError: it cannot be read.
    """
    path = Path(path)
    with open_regular(path) as f:
        header = read_npy_header(f, path)
        held = os.fstat(f.fileno()).st_size - header.offset
        if held != header.nbytes:
            cause = "truncated" if held < header.nbytes else "longer than its header declares"
            raise CorruptFileError(
                path,
                f"{cause}: its header declares {header.describe()} ({header.nbytes} bytes of "
                f"data), the file holds {held} bytes after its {header.offset}-byte header",
            )
        try:
            with reading(path):
                if mmap_mode is not None:
                    return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
                f.seek(0)
                return np.load(f, allow_pickle=False)
        except ValueError as err:
            if isinstance(err, CorruptFileError):
                raise
            text = " ".join(str(err).split())
            raise CorruptFileError(path, f"not a readable .npy file or truncated ({text})") from err


class NpySpec(NamedTuple):
    """What an array read by :func:`read_npz` must be.

    Attributes:
      shape: its shape; ``None`` in a dimension allows any length there,
        and ``None`` for the whole allows any shape.
      dtype: its dtype (byte order included: ``"float32"`` is ``"<f4"`` on
        little-endian machines); ``None`` allows any but an object dtype.
    """

    shape: tuple[int | None, ...] | None = None
    dtype: np.dtype | str | None = None

    def admits(self, header: NpyHeader) -> bool:
        """Whether ``header`` declares an array this spec allows."""
        if self.dtype is not None and header.dtype != np.dtype(self.dtype):
            return False
        if self.shape is None:
            return True
        return len(self.shape) == len(header.shape) and all(
            want is None or want == got for want, got in zip(self.shape, header.shape, strict=True)
        )

    def describe(self) -> str:
        """``float32[2708, 1433]``, ``any dtype[?, 2]``, ``any array``."""
        dtype = "any dtype" if self.dtype is None else str(np.dtype(self.dtype))
        if self.shape is None:
            return "any array" if self.dtype is None else f"{dtype} of any shape"
        return f"{dtype}[{', '.join('?' if d is None else str(d) for d in self.shape)}]"


# Arrays are copied out of an .npz member this many bytes at a time.
_NPZ_CHUNK = 1 << 24


@contextlib.contextmanager
def _reading_member(path: Path, member: str, problem: str):
    """Reraises a decoder's complaint about a zip member as a :class:`CorruptFileError`.

    The decompressors report bad data as ``zlib.error``, ``EOFError``, bz2's
    ``OSError`` without an errno and ``lzma.LZMAError``; an ``OSError`` with
    an errno (a failing disk) passes unchanged.
    """
    import lzma

    try:
        yield
    except (zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, OSError) as err:
        if isinstance(err, OSError) and not isinstance(err, zipfile.BadZipFile) and err.errno:
            raise
        raise CorruptFileError(path, f"member {member}: {problem} ({err})") from None


def read_npz(
    path: str | os.PathLike,
    expected: Mapping[str, NpySpec | None],
    *,
    what: str = "arrays",
    max_bytes: int | None = None,
    data: bytes | None = None,
) -> dict[str, np.ndarray]:
    """Reads the arrays ``expected`` from an ``.npz`` file, in memory bounded before reading.

    ``np.load`` of an ``.npz`` decompresses each member whole, sized by what
    the member claims, and reads members nobody asked for: a 100-byte
    member declaring ``10**13`` floats, or a few megabytes of deflated zeros
    expanding to gigabytes, exhaust memory before any check. Here:

    - the archive must hold exactly the members ``name.npy`` for each name
      of ``expected``, each once: a member not expected, or one missing, is
      refused (an ``.npz`` sparsegcn reads is one it wrote, with known
      members; a stranger means the file is not what it should be);
    - every member's header (:func:`read_npy_header`) is read first, and
      must declare an array its :class:`NpySpec` admits, whose bytes are
      exactly the member's uncompressed size (``file_size``) less the
      header, and all members together at most ``max_bytes`` of data;
    - only then is any data decompressed, exactly the declared bytes of
      each member (its CRC is checked), never more.

    Nothing is unpickled. Memory: the arrays themselves (plus 16 MB), and
    ``data`` or the zip's central directory.

    Args:
      path: the ``.npz`` file (opened with :func:`open_regular`); with
        ``data``, only named in messages.
      expected: ``{name: spec}`` of the arrays to read; a ``None`` spec
        allows any array (bounded by ``max_bytes``).
      what: what the file holds, for messages (``"checkpoint arrays"``).
      max_bytes: the most bytes of data all members may declare together.
        Default: the file's size, which bounds what an uncompressed archive
        (``np.savez``, as sparsegcn writes) can hold; pass a bound to read a
        compressed one (``np.savez_compressed``).
      data: the file's contents, when the caller has read (and verified) them.

    Returns:
      ``{name: array}`` in ``expected``'s order; each array is writable, a
      view of neither the file nor ``data``.

    Raises:
      CorruptFileError: naming ``path`` and the member: not a zip archive,
        an unexpected, missing or repeated member, encrypted or compressed
        by an unknown method, a header that is not what the spec admits or
        that does not match the member's size, more data than
        ``max_bytes``, or data that is truncated or fails its CRC.
      FileNotFoundError, NotRegularFileError, OSError: ``path`` cannot be
        opened or read (without ``data``).
    """
    path = Path(path)
    with contextlib.ExitStack() as stack:
        if data is None:
            source: BinaryIO = stack.enter_context(open_regular(path))
            size = os.fstat(source.fileno()).st_size
        else:
            source, size = io.BytesIO(data), len(data)
        limit = size if max_bytes is None else max_bytes
        try:
            archive = stack.enter_context(zipfile.ZipFile(source))
        except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, struct.error) as err:
            raise CorruptFileError(
                path, f"not an .npz file of {what} (not a zip archive, or a truncated one: {err})"
            ) from None
        members = {f"{name}.npy": name for name in expected}
        infos: dict[str, zipfile.ZipInfo] = {}
        for info in archive.infolist():
            if info.filename not in members:
                raise CorruptFileError(
                    path,
                    f"member {info.filename} is not one of the {what} expected "
                    f"({_some(sorted(members))}); refused",
                )
            if info.filename in infos:
                raise CorruptFileError(path, f"member {info.filename} appears twice; refused")
            infos[info.filename] = info
        missing = [member for member in members if member not in infos]
        if missing:
            raise CorruptFileError(path, f"lacks member {missing[0]} of the {what} expected")
        headers: dict[str, NpyHeader] = {}
        total = 0
        for member, name in members.items():
            header = _npz_header(archive, infos[member], path)
            spec = expected[name]
            if spec is not None and not spec.admits(header):
                raise CorruptFileError(
                    path,
                    f"member {member} declares {header.describe()}, the {what} expected "
                    f"{spec.describe()}",
                )
            held = infos[member].file_size - header.offset
            if held != header.nbytes:
                raise CorruptFileError(
                    path,
                    f"member {member} declares {header.describe()} ({header.nbytes} bytes of "
                    f"data) but holds {held} bytes after its header",
                )
            total += header.nbytes
            if total > limit:
                raise CorruptFileError(
                    path,
                    f"its members declare more than {limit} bytes of data (member {member} "
                    f"declares {header.describe()}), more than the {what} can hold",
                )
            headers[member] = header
        return {
            name: _npz_array(archive, infos[member], headers[member], path)
            for member, name in members.items()
        }


def _some(names: list[str], shown: int = 3) -> str:
    """``a.npy, b.npy, c.npy and 35 more``; ``none`` for no names."""
    if len(names) <= shown + 1:
        return ", ".join(names) or "none"
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"


def _open_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> IO[bytes]:
    if info.flag_bits & 0x1:
        raise CorruptFileError(path, f"member {info.filename} is encrypted; refused")
    try:
        return archive.open(info)
    # ValueError: a local header offset that points before the file's start.
    except (zipfile.BadZipFile, NotImplementedError, EOFError, ValueError) as err:
        raise CorruptFileError(path, f"member {info.filename}: cannot be read ({err})") from None


def _npz_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> NpyHeader:
    """A member's ``.npy`` header; only the header's bytes are decompressed."""
    reading_it = _reading_member(path, info.filename, "corrupt or truncated")
    with _open_member(archive, info, path) as member, reading_it:
        return read_npy_header(member, path, member=info.filename)


def _npz_array(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, header: NpyHeader, path: Path
) -> np.ndarray:
    """A member's array: exactly ``header.nbytes`` decompressed, then the CRC checked."""
    order: Literal["C", "F"] = "F" if header.fortran_order else "C"
    buffer = bytearray(header.nbytes)
    reading_it = _reading_member(path, info.filename, "corrupt or truncated")
    with _open_member(archive, info, path) as member, reading_it:
        member.read(header.offset)
        filled = 0
        while filled < header.nbytes:
            chunk = member.read(min(_NPZ_CHUNK, header.nbytes - filled))
            if not chunk:
                break
            buffer[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
        extra = member.read(1)  # at the end: checks the CRC
    if filled < header.nbytes or extra:
        raise CorruptFileError(
            path, f"member {info.filename}: its data does not match its header ({filled} bytes)"
        )
    if header.nbytes == 0:
        return np.empty(header.shape, header.dtype, order=order)
    return np.frombuffer(buffer, header.dtype).reshape(header.shape, order=order)


def sha256_file(path: str | os.PathLike, *, block: int = 1 << 20) -> str:
    """The sha256 hex digest of a regular file, read in ``block``-byte pieces.

    Raises:
      NotRegularFileError: ``path`` is not a regular file (hashing ``/dev/zero``
        or a FIFO would never end).
    """
    digest = hashlib.sha256()
    with open_regular(path) as f:
        while piece := f.read(block):
            digest.update(piece)
    return digest.hexdigest()

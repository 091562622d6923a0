"""OGB node-property-prediction datasets through the ``ogb`` package.

``ogbn-arxiv``, ``ogbn-products`` and ``ogbn-papers100M`` are read by
``ogb.nodeproppred.NodePropPredDataset`` (which downloads and processes them
on first use) and returned as a :class:`~sparsegcn.datasets.base.Dataset`
with the official split from ``get_idx_split()``. Files live under
``<root>/ogbn_arxiv/`` etc., exactly as ``ogb`` lays them out, so a folder
that ``ogb`` or PyG already downloaded is reused.

``ogb`` imports ``torch``, which is not a dependency of sparsegcn: both are
imported lazily, here only. Install the CPU build of torch first, then
``pip install 'sparsegcn[ogb]'``.

These problems of ``ogb`` 1.3.6 with current libraries are handled here:

- **The processed cache.** ``ogb`` saves ``processed/data_processed`` with
  ``torch.save(..., pickle_protocol=4)`` and reads it back with a bare
  ``torch.load``. Since torch 2.6 that load is ``weights_only=True``, whose
  unpickler does not implement protocol 4 (``Unsupported operand 149``, the
  ``FRAME`` opcode), so allow-listing globals with
  ``torch.serialization.safe_globals`` cannot help: every second load fails.
  The cache holds only dicts, ints and NumPy arrays, so it is read here with
  :func:`~sparsegcn.datasets.unpickle.safe_load`, which admits exactly the
  NumPy globals that arrays need (:data:`PROCESSED_GLOBALS`); a file naming
  anything else is refused before anything is imported.
- **Building the processed cache.** ``ogb`` writes that cache in place
  (``torch.save`` straight to its final name), so a run killed meanwhile
  leaves a truncated cache that every later run fails on, and a second
  process starting meanwhile reads the partial file with ``torch.load``.
  The raw files are read here with ``ogb``'s own readers, as its
  ``pre_process`` does (:func:`_read_raw`), but the cache is saved under a
  temporary name and renamed into place (:func:`_save_processed`), while
  an exclusive lock on ``processed/data_processed.lock`` is held
  (:func:`_processing_lock`): a second first load of the same folder waits
  for the first, saying so on stderr, and then reads its cache.
  ``ogb``'s ``pre_process`` (its ``torch.load``, its download) never runs.
  Inside :func:`~sparsegcn.datasets.base.reading_only` (``sparsegcn
  predict``) a missing cache is not written, nor is the lock file: the raw
  files are read into memory.
- **The version check.** ``import ogb`` starts a thread that asks PyPI
  (through the ``outdated`` package) whether ``ogb`` is current, and
  ``import outdated`` starts a second one about itself. ``ogb`` sets
  ``OUTDATED_IGNORE=1``, but that only filters ``outdated``'s warnings: the
  threads and their requests still run. ``ogb`` skips the check when
  ``outdated`` cannot be imported, so :func:`import_ogb` hides ``outdated``
  while ``ogb`` is first imported. No thread starts and nothing goes online.
- **Unverified downloads.** ``ogb`` downloads archives without checking
  them. Missing datasets are downloaded here instead, with
  :func:`~sparsegcn.datasets.download.download_file` against the archive's
  published sha256 (:data:`ARCHIVE_SHA256`), extracted into a temporary
  folder and renamed into place, so ``ogb`` only ever processes a verified,
  complete folder. An archive with no published checksum is refused.
- **Interactive prompts and deletions.** ``ogb`` calls ``input()`` when a
  dataset folder lacks its ``RELEASE_v<version>.txt`` marker (and then may
  delete the folder), and when a folder lacks its raw file it downloads the
  archive again over plain http, unverified, and removes the
  folder. Both are refused here before ``ogb`` runs (and ``pre_process``
  refuses the second again): ``ogb`` never downloads and never deletes.
- **Unchecked raw files.** ``ogb``'s ``read_csv_graph_raw`` slices the
  edges and node rows to the counts in ``num-edge-list.csv.gz`` and
  ``num-node-list.csv.gz`` without comparing them with the files, so a
  wrong count silently drops edges or nodes, and its pandas errors do not
  say which file failed. Before ``ogb`` processes a CSV folder, the two
  counts are read and every file ``ogb`` will read is streamed once (gzip
  integrity, line and value counts; no parsing), and a mismatch is refused
  naming both files and both numbers. The split files
  are read here, not by ``ogb``, so that a missing or empty one is named.

References:
  Hu et al., *Open Graph Benchmark: Datasets for Machine Learning on
  Graphs*, NeurIPS 2020, https://arxiv.org/abs/2005.00687 ;
  dataset pages: https://ogb.stanford.edu/docs/nodeprop/
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gzip
import importlib.util
import os
import pickle
import shutil
import stat
import sys
import threading
import time
import traceback
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sparsegcn.datasets import OGB
from sparsegcn.datasets.base import SPLITS, Dataset, check_may_download, may_write_cache
from sparsegcn.datasets.download import download_file
from sparsegcn.datasets.proteins import read_table
from sparsegcn.datasets.unpickle import safe_load
from sparsegcn.files import (
    CorruptFileError,
    check_complete,
    check_regular_file,
    check_regular_tree,
    discard_temp_folder,
    fsync_directory,
    naming_errors,
    read_cause,
    reading,
    rename_into_place,
    temp_file_path,
    temp_folder,
)
from sparsegcn.graph import Graph
from sparsegcn.transforms import to_undirected

INSTALL_HINT = (
    "OGB datasets need the optional packages torch and ogb. Install the CPU build of torch "
    "first (pip install torch --index-url https://download.pytorch.org/whl/cpu; a plain "
    "'pip install torch' pulls a multi-GB CUDA build), then pip install 'sparsegcn[ogb]'."
)

# sha256 of the archives at the URLs in ogb's master.csv. ogbn-arxiv: listed
# identically by two unrelated public projects that verify their downloads
# (a benchmark suite's OGBN_ARXIV_ZIP_SHA256 and an arxiv training script's
# DATA_SHA256); ogbn-products: a dataset library's checksum table. No digest
# of papers100M-bin.zip has been published that we could check, so it is
# refused rather than fetched unverified.
ARCHIVE_SHA256 = {
    "ogbn-arxiv": "49f85c801589ecdcc52cfaca99693aaea7b8af16a9ac3f41dd85a5f3193fe276",
    "ogbn-products": "5ea0a112edaec2141c0a2a612dd4aed58df97ff3e1ab1a0ca8238f43cbbb50a8",
    "ogbn-papers100M": None,
}

# From the dataset pages, https://ogb.stanford.edu/docs/nodeprop/
LICENSES = {
    "ogbn-arxiv": "ODC-BY",
    "ogbn-products": "Amazon license (https://s3.amazonaws.com/amazon-reviews-pds/license.txt)",
    "ogbn-papers100M": "ODC-BY",
}

# What a processed cache written by ogb's torch.save may reference: NumPy
# arrays (_reconstruct, ndarray, dtype) and NumPy scalars (scalar; the
# binary loader stores papers100M's num_nodes as np.int64), spelt as NumPy 2
# writes them and as NumPy 1 did. Found with pickletools on the caches ogb
# wrote for the fakes in tests/test_ogb.py (CSV layout: arxiv, products;
# binary layout: papers100M); dicts, ints and None need no global.
PROCESSED_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "scalar"),
    }
)

# import_ogb swaps entries of sys.modules and os.environ; two threads doing it
# at once could restore each other's state.
_IMPORT_LOCK = threading.Lock()

# Bounds on what an archive may expand to: a zip bomb declares far more bytes or
# members than its own size could honestly hold. The published archives hold
# gzip-compressed CSV or NumPy files, which zip stores at about 1:1; Python's
# zipfile never writes more than a member's declared size.
MAX_EXPANSION = 100
"""The most an archive's members may declare in all, as a multiple of the archive's size."""
MAX_MEMBERS = 10_000
"""The most members an archive may hold."""

_CHUNK_BYTES = 1 << 24

PROCESSED_NAME = "data_processed"
"""``ogb``'s processed cache, in ``<dataset folder>/processed/``."""
LOCK_NAME = "data_processed.lock"
"""The lock file beside it, held while the cache is built (left in place: empty)."""
WAIT_NOTICE_S = 2.0
"""Seconds a load waits for another process's lock before saying so on stderr."""


def import_ogb():
    """Imports ``ogb.nodeproppred`` without its PyPI version-check threads.

    ``ogb/version.py`` runs ``from outdated import check_outdated`` and, if
    that succeeds, starts a thread that queries PyPI. While ``ogb`` is first
    imported, ``sys.modules["outdated"]`` is set to ``None`` (documented to
    make the import raise ``ImportError``), so ``ogb`` skips the check; the
    previous entry, and ``OUTDATED_IGNORE`` (which ``ogb`` overwrites), are
    restored afterwards. If ``ogb`` was already imported elsewhere, its
    thread has already run and this changes nothing.

    Returns:
      The ``ogb.nodeproppred`` module.

    Raises:
      ImportError: torch or ogb is missing; the message says how to install them.
    """
    try:
        import torch  # noqa: F401  # ogb's own ImportError would not say which torch build
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    with _IMPORT_LOCK:
        missing = object()
        saved_module = sys.modules.get("outdated", missing)
        saved_env = os.environ.get("OUTDATED_IGNORE")
        first_import = "ogb.version" not in sys.modules
        if first_import:
            sys.modules["outdated"] = None
        try:
            import ogb.nodeproppred
        except ImportError as err:
            raise ImportError(INSTALL_HINT) from err
        finally:
            if first_import:
                if saved_module is missing:
                    del sys.modules["outdated"]
                else:
                    sys.modules["outdated"] = saved_module
                if saved_env is None:
                    os.environ.pop("OUTDATED_IGNORE", None)
                else:
                    os.environ["OUTDATED_IGNORE"] = saved_env
    return ogb.nodeproppred


def load_processed(path: str | os.PathLike) -> dict:
    """Reads ``ogb``'s ``processed/data_processed`` without ``torch.load``.

    The file is a ``torch.save`` zip archive whose ``<name>/data.pkl`` is a
    protocol-4 pickle of ``{"graph": {...}, "labels": ndarray}``; it holds no
    tensors, so no storage records are read.

    Args:
      path: the ``data_processed`` file.

    Returns:
      The ``{"graph", "labels"}`` dict ``ogb`` saved.

    Raises:
      ValueError: the file is not such an archive (e.g. cut short: ``ogb``
        itself, and sparsegcn before it saved the cache atomically, wrote it in
        place, so an interrupted first run left it truncated; delete it and the
        raw files are processed again), or does not hold that dict.
      pickle.UnpicklingError: the pickle references a global outside
        :data:`PROCESSED_GLOBALS`, or a tensor.
    """
    path = check_regular_file(path)
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as err:
        raise ValueError(
            f"{path} is not a torch.save archive ({err}); if a first run that wrote it was "
            f"interrupted, delete it so that the raw files are processed again"
        ) from err
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ValueError(
                f"{path} should hold one <name>/data.pkl (torch.save's layout), got "
                f"{len(pickles)} among {archive.namelist()[:8]}"
            )
        with archive.open(pickles[0]) as f:
            try:
                loaded = safe_load(f, allowed=PROCESSED_GLOBALS)
            except pickle.UnpicklingError as err:
                raise pickle.UnpicklingError(f"{path}: {err}") from err
    if not (isinstance(loaded, dict) and {"graph", "labels"} <= loaded.keys()):
        raise ValueError(
            f"{path} should hold a dict with keys 'graph' and 'labels', got "
            f"{type(loaded).__name__} {sorted(loaded) if isinstance(loaded, dict) else ''}"
        )
    return loaded


def raw_file(meta) -> str:
    """The file under a dataset folder whose absence makes ``ogb`` download the archive
    again (and delete the folder): ``raw/data.npz`` or ``raw/edge.csv.gz``."""
    return "raw/data.npz" if str(meta["binary"]) == "True" else "raw/edge.csv.gz"


def _missing_raw(name: str, dataset_dir: Path, raw: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{name}: {str(dataset_dir)!r} has no {raw} (and no processed cache), so it is not a "
        f"complete ogb download; it is left as it is (ogb would download the archive again "
        f"without a checksum and delete the folder): restore the file, or move the folder away "
        f"to download it again"
    )


def _dataset_class(nodeproppred, raw: str):
    """``NodePropPredDataset`` whose ``pre_process`` is :func:`_pre_process`: the cache
    read by :func:`load_processed` and built atomically under a lock, and never a
    download: ``ogb``'s own (unverified, then ``shutil.rmtree`` of the folder) is refused.
    A ``split/<type>/split_dict.pt`` is read by
    :func:`~sparsegcn.datasets.torchfile.read_torch_file` (a restricted unpickler), not
    by ``ogb``'s ``torch.load``, which runs its pickle where
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is set."""

    class SafeNodePropPredDataset(nodeproppred.NodePropPredDataset):
        def pre_process(self):
            self.graph, self.labels = _pre_process(self, raw)

        def get_idx_split(self, split_type=None):
            folder = Path(self.root) / "split" / (split_type or self.meta_info["split"])
            path = folder / "split_dict.pt"
            if not path.is_file():
                return _read_split(folder)
            from sparsegcn.datasets.torchfile import read_torch_file

            split = read_torch_file(path)
            if not isinstance(split, dict) or not {"train", "valid", "test"} <= set(split):
                raise CorruptFileError(path, "not a dict with keys train, valid and test")
            return split

    return SafeNodePropPredDataset


def _pre_process(dataset, raw: str) -> tuple:
    """``(graph, labels)`` of an ``ogb`` dataset object, in place of its ``pre_process``.

    An existing ``processed/data_processed`` is read with :func:`load_processed`
    (it only ever appears complete: :func:`_save_processed`). Otherwise the raw
    files are read (:func:`_read_raw`) and, unless inside
    :func:`~sparsegcn.datasets.base.reading_only`, saved as that cache, all while
    holding :func:`_processing_lock`; a process that waited for the lock finds the
    cache its holder saved and reads that instead.
    """
    folder = Path(dataset.root)
    cache = folder / "processed" / PROCESSED_NAME
    if not cache.exists():
        if not (folder / raw).is_file():
            raise _missing_raw(dataset.name, folder, raw)
        if not may_write_cache():  # sparsegcn predict: nothing written, not even the lock
            return _read_raw(dataset, raw)
        with naming_errors(cache.parent):
            cache.parent.mkdir(exist_ok=True)
        with _processing_lock(cache.parent, dataset.name):
            if not cache.exists():  # or another process saved it while this one waited
                graph, labels = _read_raw(dataset, raw)
                _save_processed(cache, graph, labels)
                return graph, labels
    loaded = load_processed(cache)
    return loaded["graph"], loaded["labels"]


def _read_raw(dataset, raw: str) -> tuple:
    """``(graph, labels)`` from the raw files, read as ``ogb`` 1.3.6's ``pre_process`` reads
    those of a homogeneous dataset (its ``read_csv_graph_raw`` or ``read_binary_graph_raw``
    and its label file), after :func:`_check_raw_csv`; nothing is downloaded or saved."""
    import pandas as pd
    from ogb.io.read_graph_raw import read_binary_graph_raw, read_csv_graph_raw

    folder, meta = Path(dataset.root), dataset.meta_info
    if str(meta["is hetero"]) == "True":
        raise ValueError(f"{dataset.name} is heterogeneous, which this loader does not read")
    if raw == "raw/edge.csv.gz":  # ogb reads only the first N and E rows: check first
        _check_raw_csv(folder, meta)

    def listed(key: str) -> list[str]:
        names = str(meta[f"additional {key} files"])
        return [] if names == "None" else names.split(",")

    raw_dir = str(folder / "raw")
    add_inverse_edge = str(meta["add_inverse_edge"]) == "True"
    # ogb prints "Loading necessary files...": progress, which goes to stderr, never
    # into a command's printed table or report.
    with contextlib.redirect_stdout(sys.stderr):
        if str(meta["binary"]) == "True":
            graph = read_binary_graph_raw(raw_dir, add_inverse_edge=add_inverse_edge)[0]
            with np.load(folder / "raw" / "node-label.npz") as archive:
                labels = archive["node_label"]
        else:
            graph = read_csv_graph_raw(
                raw_dir,
                add_inverse_edge=add_inverse_edge,
                additional_node_files=listed("node"),
                additional_edge_files=listed("edge"),
            )[0]
            labels = pd.read_csv(
                folder / "raw" / "node-label.csv.gz", compression="gzip", header=None
            ).values
    return graph, labels


def _save_processed(cache: Path, graph, labels) -> None:
    """Saves ``{"graph", "labels"}`` as ``ogb`` does (``torch.save``, pickle protocol 4,
    so that ``ogb`` and PyG read it too), to a temporary file beside ``cache`` that is
    fsynced and then renamed to ``cache``: the cache is complete or absent. A process
    killed meanwhile leaves only its temporary file, which the next save removes
    (:func:`~sparsegcn.files.temp_file_path`).

    Raises:
      OSError: the file could not be written (a full disk), naming ``cache``.
    """
    import torch

    print(f"Saving {cache}...", file=sys.stderr, flush=True)
    with naming_errors(cache):
        tmp = temp_file_path(cache.parent, cache.name)
        try:
            with open(tmp, "xb") as f:
                torch.save({"graph": graph, "labels": labels}, f, pickle_protocol=4)
                check_complete(f)
                os.fsync(f.fileno())
            os.replace(tmp, cache)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_directory(cache.parent)


@contextlib.contextmanager
def _processing_lock(folder: Path, name: str) -> Iterator[None]:
    """Holds an exclusive ``fcntl.flock`` on ``folder/``:data:`LOCK_NAME` for the block,
    waiting for another process that holds it (one line on stderr after
    :data:`WAIT_NOTICE_S` seconds). The lock file is opened read-only and never
    written, so nothing of anyone's is changed; it is left in place (removing it would
    let two processes lock two different files). Where the file system has no
    ``flock`` the block runs unlocked: the cache is still renamed into place whole.

    Raises:
      ValueError: the lock's name is taken by a symbolic link or by something
        other than a regular file.
      OSError: the lock file cannot be created or opened (named).
    """
    path = folder / LOCK_NAME
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError(f"{name}: the lock {path} is a symbolic link; remove it") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{name}: the lock {path} is not a regular file; remove it")
        _lock(fd, path, name)
        yield
    finally:
        os.close(fd)  # releases the lock


def _lock(fd: int, path: Path, name: str) -> None:
    """Takes the exclusive lock on ``fd``, polling for :data:`WAIT_NOTICE_S` seconds and
    then, after saying so, blocking (a signal still interrupts the wait)."""
    deadline = time.monotonic() + WAIT_NOTICE_S
    operation = fcntl.LOCK_EX | fcntl.LOCK_NB
    while True:
        try:
            fcntl.flock(fd, operation)
            return
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            print(
                f"{name}: waiting for another process, which holds {path}, to finish "
                f"processing the raw files...",
                file=sys.stderr,
                flush=True,
            )
            operation = fcntl.LOCK_EX
        except OSError as err:
            if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                return  # no flock here (some network file systems): run unlocked
            raise


def _hint(dataset_dir: Path) -> str:
    return f"; restore it, or move {str(dataset_dir)!r} away to download the dataset again"


def _csv_shape(path: Path, hint: str) -> tuple[int, int]:
    """``(lines, values per line)`` of the gzip CSV ``path``, from one streamed pass that
    counts newlines and commas (no parsing).

    Raises:
      CorruptFileError: the file is not gzip, truncated or corrupt, empty, or
        has a blank line or a line with another count of values than line 1
        (found by a line-by-line scan that runs only then).
    """
    check_regular_file(path)
    try:
        with reading(path), gzip.open(path, "rb") as f:
            first = f.readline()
            width = first.count(b",") + 1
            newlines, commas, last = first.count(b"\n"), first.count(b","), first[-1:]
            blank = not first.strip()
            while chunk := f.read(_CHUNK_BYTES):
                newlines += chunk.count(b"\n")
                commas += chunk.count(b",")
                blank = blank or b"\n\n" in chunk or b"\n\r\n" in chunk
                blank = blank or (last == b"\n" and chunk[:1] in (b"\n", b"\r"))
                last = chunk[-1:]
    except CorruptFileError as err:
        raise CorruptFileError(err.path, err.cause + hint) from err
    if not first:
        raise CorruptFileError(path, "the file is empty" + hint)
    lines = newlines + (last != b"\n")
    if blank or commas != lines * (width - 1):
        raise _bad_csv_line(path, width, hint)
    return lines, width


def _bad_csv_line(path: Path, width: int, hint: str) -> CorruptFileError:
    """The error for the first blank line of ``path``, or the first without ``width`` values
    (a scan line by line, run only when the counts of :func:`_csv_shape` disagree)."""
    with gzip.open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            text = line.rstrip(b"\r\n")
            if not text.strip():
                return CorruptFileError(path, f"line {number} is blank" + hint)
            if text.count(b",") + 1 != width:
                shown = text[:80].decode(errors="replace") + ("..." if len(text) > 80 else "")
                return CorruptFileError(
                    path,
                    f"line {number} holds {text.count(b',') + 1} comma-separated values, line 1 "
                    f"holds {width}: {shown!r}{hint}",
                )
    return CorruptFileError(path, f"the lines do not all hold {width} values" + hint)


def _one_count(path: Path, what: str, hint: str) -> int:
    """The single count in ``num-node-list.csv.gz`` or ``num-edge-list.csv.gz``."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (one line: the number of {what}){hint}")
    table = read_table(path, 1, "int")
    if table.shape[0] != 1:
        raise CorruptFileError(
            path,
            f"expected one line (a node-property dataset is one graph), got {table.shape[0]}"
            + hint,
        )
    count = int(table[0, 0])
    if count < 0:
        raise CorruptFileError(path, f"line 1: the number of {what} is {count}" + hint)
    return count


def _check_raw_csv(dataset_dir: str | os.PathLike, meta) -> None:
    """Refuses raw CSV files that ``ogb``'s ``read_csv_graph_raw`` would misread.

    ``ogb`` takes the first ``E`` edges and ``N`` node rows, ``E`` and ``N``
    as ``num-edge-list.csv.gz`` and ``num-node-list.csv.gz`` say, so a wrong
    count drops data silently; and its pandas errors (a ragged or empty
    file) do not name the file. Every file it will read is streamed once
    here (about as long as decompressing it; ogb's parse takes far longer).

    Args:
      dataset_dir: the dataset folder, e.g. ``<root>/ogbn_arxiv``.
      meta: the dataset's row of ``ogb``'s master.csv.

    Raises:
      FileNotFoundError: a count file, ``edge.csv.gz``, ``node-feat.csv.gz``,
        ``node-label.csv.gz`` or an additional file master.csv lists is
        missing (named).
      CorruptFileError: a file that is not gzip or truncated; empty; with a
        blank line or a line of another width than line 1 (named, 1-based);
        with ``edge.csv.gz`` not 2 values a line or the labels not one per
        task; or whose line count differs from its count file (both files
        and both numbers named).
    """
    dataset_dir = Path(dataset_dir)
    raw = dataset_dir / "raw"
    hint = _hint(dataset_dir)
    node_count, edge_count = raw / "num-node-list.csv.gz", raw / "num-edge-list.csv.gz"
    counts = {
        "nodes": (node_count, _one_count(node_count, "nodes", hint)),
        "edges": (edge_count, _one_count(edge_count, "edges", hint)),
    }

    def extra(key: str) -> list[str]:
        listed = str(meta[f"additional {key} files"])
        return [] if listed == "None" else [f"{name}.csv.gz" for name in listed.split(",")]

    # (file, one line per, values per line or None for any, required)
    files = [
        ("edge.csv.gz", "edges", 2, True),
        ("edge-feat.csv.gz", "edges", None, False),
        ("node-feat.csv.gz", "nodes", None, True),
        ("node-label.csv.gz", "nodes", int(meta["num tasks"]), True),
        *((name, "nodes", None, True) for name in extra("node")),
        *((name, "edges", None, True) for name in extra("edge")),
    ]
    for name, per, width, required in files:
        path = raw / name
        if not path.exists():
            if required:
                raise FileNotFoundError(f"{path} is missing (one line per {per[:-1]}){hint}")
            continue
        lines, values = _csv_shape(path, hint)
        if width is not None and values != width:
            raise CorruptFileError(
                path, f"line 1: expected {width} comma-separated values, got {values}" + hint
            )
        count_file, count = counts[per]
        if lines != count:
            raise CorruptFileError(
                path,
                f"expected {count} lines, one per {per[:-1]} as {count_file} says, got "
                f"{lines}{hint}",
            )


def _read_split(folder: str | os.PathLike) -> dict[str, np.ndarray]:
    """The ``{train,valid,test}.csv.gz`` node ids of ``split/<type>/``, read as ``ogb`` reads
    them, but with each bad file named.

    Returns:
      ``{"train", "valid", "test"}`` -> int64 ``[n]`` node ids.

    Raises:
      FileNotFoundError: a split file is missing (named).
      ValueError: a file that is not gzip or truncated, empty, or has a line
        that is not one integer (the file and the 1-based line named).
    """
    folder = Path(folder)
    hint = _hint(folder.parent.parent)
    split = {}
    for key in SPLITS:
        path = folder / f"{key}.csv.gz"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing (the {key} node ids, one a line){hint}")
        _, width = _csv_shape(path, hint)
        if width != 1:
            raise CorruptFileError(path, f"line 1: expected one node id, got {width} values" + hint)
        split[key] = read_table(path, 1, "int")[:, 0]
    return split


def _from_prompt(err: BaseException) -> bool:
    """Whether ``err`` is ``ogb``'s ``input()`` or ``exit()`` prompt giving up (not a
    truncated file, whose decoder also raises ``EOFError``)."""
    if isinstance(err, SystemExit):
        return True
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and "input(" in (frames[-1].line or "")


def _bad_raw_file(dataset_dir: Path, err: BaseException) -> CorruptFileError:
    """The raw file of ``dataset_dir`` that ``err`` (a decoding error inside ``ogb``)
    came from, found by decompressing each ``.gz`` file and testing each ``.npz``."""
    hint = _hint(dataset_dir)
    for path in sorted(dataset_dir.rglob("*")):
        if not path.is_file() or path.suffix not in (".gz", ".npz"):
            continue
        try:
            with reading(path):
                if path.suffix == ".gz":
                    with gzip.open(path, "rb") as f:
                        while f.read(1 << 24):
                            pass
                else:
                    with zipfile.ZipFile(path) as zf:
                        zf.testzip()
        except CorruptFileError as found:
            return CorruptFileError(found.path, found.cause + hint)
    cause = read_cause(err) or "unreadable"
    return CorruptFileError(
        dataset_dir, f"a file ogb read is {cause} ({type(err).__name__}: {err}){hint}"
    )


def _meta_info(nodeproppred, name: str):
    import pandas as pd

    master = Path(nodeproppred.__file__).parent / "master.csv"
    return pd.read_csv(master, index_col=0, keep_default_na=False)[name]


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_folders(name: str, root: Path, dataset_dir: Path, version: str, raw: str) -> None:
    """Refuses roots ``ogb`` would fail on, prompt about, download into or delete, before
    it runs."""
    if root.exists() and not root.is_dir():
        raise ValueError(f"root {str(root)!r} exists but is not a directory")
    if dataset_dir.exists() and not dataset_dir.is_dir():
        raise ValueError(f"{name}: {str(dataset_dir)!r} exists but is not a directory")
    marker = f"RELEASE_v{version}.txt"
    if dataset_dir.is_dir() and not (dataset_dir / marker).exists():
        raise ValueError(
            f"{name}: {str(dataset_dir)!r} exists but has no {marker}, so it is not a complete "
            f"ogb download of version {version} (ogb would ask whether to delete it); remove "
            f"or move the folder to download it again"
        )
    if (dataset_dir / "processed" / PROCESSED_NAME).exists():
        return
    if dataset_dir.is_dir() and not (dataset_dir / raw).is_file():
        raise _missing_raw(name, dataset_dir, raw)
    if not may_write_cache():  # reading only: the raw files are read, nothing is written
        if not dataset_dir.is_dir():
            check_may_download(name, root)
        return
    # The processed cache is written next to the raw files, or the archive is
    # downloaded into root; check now instead of failing after the download.
    target = dataset_dir / "processed" if dataset_dir.is_dir() else root
    existing = _nearest_existing(target.absolute())
    if not existing.is_dir():
        raise ValueError(
            f"{name}: cannot create {str(target)!r}: {str(existing)!r} is not a directory"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(
            f"{name}: {str(existing)!r} is not writable, but ogb must write "
            f"{'its processed cache' if dataset_dir.is_dir() else 'the download'} under it "
            f"(to {str(target)!r})"
        )
    if not dataset_dir.is_dir():
        check_may_download(name, root)
    target.mkdir(parents=True, exist_ok=True)


def _extract(archive: Path, member_dir: str, dataset_dir: Path) -> None:
    """Unzips ``archive`` and renames its ``member_dir/`` to ``dataset_dir`` atomically.

    Entries that would land outside the extraction folder (absolute paths,
    ``..``) are refused. A failure leaves neither the temporary folder nor a
    partial ``dataset_dir``. A ``dataset_dir`` that a concurrent load of the
    same dataset put in place meanwhile is kept, and this copy discarded
    (:func:`~sparsegcn.files.rename_into_place`): the caller goes on to read
    it as it reads any folder already there.
    """
    work = temp_folder(dataset_dir.parent, dataset_dir.name, "extract")
    try:
        with zipfile.ZipFile(archive) as zf:
            _check_expansion(archive, zf.infolist(), work)
            for info in zf.infolist():
                target = (work / info.filename).resolve()
                if not target.is_relative_to(work.resolve()):
                    raise ValueError(f"{archive}: entry {info.filename!r} escapes the archive")
            zf.extractall(work)
        extracted = work / member_dir
        if not extracted.is_dir():
            raise ValueError(f"{archive} has no folder {member_dir!r}")
        rename_into_place(extracted, dataset_dir)  # False: ours is removed with `work`
    except zipfile.BadZipFile as err:  # documented as ValueError: a malformed archive
        raise ValueError(f"{archive} is not a valid zip archive: {err}") from err
    finally:
        discard_temp_folder(work)


def _check_expansion(archive: Path, infos: list, work: Path) -> None:
    """Refuses an archive whose members declare more than :data:`MAX_MEMBERS` files,
    :data:`MAX_EXPANSION` times its size, or the free space where they would go."""
    packed = archive.stat().st_size
    declared = sum(info.file_size for info in infos)
    free = shutil.disk_usage(work).free
    limit = min(MAX_EXPANSION * max(packed, 1 << 20), free)
    if len(infos) > MAX_MEMBERS or declared > limit:
        raise ValueError(
            f"{archive}: refusing to extract {len(infos)} files of {declared} bytes in all from "
            f"{packed} bytes (at most {MAX_MEMBERS} files and {limit} bytes: "
            f"{MAX_EXPANSION} times the archive, and no more than the {free} bytes free)"
        )


def download_verified(
    name: str, root: Path, url: str, member_dir: str, *, progress: bool = False
) -> Path:
    """Downloads ``name``'s archive, checks its sha256, extracts it to ``<root>/<name>``.

    Args:
      name: the OGB dataset name (selects :data:`ARCHIVE_SHA256`).
      root: data root.
      url: the archive's URL (ogb's master.csv).
      member_dir: the folder inside the archive (``download_name``).
      progress: show a progress bar.

    Returns:
      The dataset folder ``<root>/<name with '_'>``.

    Raises:
      ValueError: no published checksum, a checksum mismatch (the archive is
        deleted), or a malformed archive.
      OSError: the download failed.
    """
    digest = ARCHIVE_SHA256[name]
    dataset_dir = root / name.replace("-", "_")
    if digest is None:
        raise ValueError(
            f"{name}: no published sha256 of {url} is known, so it is not downloaded "
            f"unverified. Download it yourself (e.g. with ogb: NodePropPredDataset("
            f"{name!r}, root=...)) or unzip the archive into {str(root)!r} and rename its "
            f"folder {member_dir!r} to {dataset_dir.name!r}; then pass that root"
        )
    check_may_download(name, root)
    work = temp_folder(root, dataset_dir.name, "download")  # nothing of the user's is touched
    try:
        archive = work / f"{member_dir}.zip"
        download_file(url, archive, sha256=digest, progress=progress)
        _extract(archive, member_dir, dataset_dir)
    finally:
        discard_temp_folder(work)
    return dataset_dir


def as_labels(raw, num_nodes: int) -> np.ndarray:
    """``ogb``'s ``[N, 1]`` labels as int64 ``[N]``, ``-1`` where unlabelled.

    ``ogb`` marks unlabelled nodes with ``NaN`` (ogbn-papers100M stores float
    labels for that reason); every other value must be a non-negative
    integer.

    Raises:
      ValueError: naming the first label that is negative or not an integer,
        or a wrong shape.
    """
    labels = np.asarray(raw)
    if labels.shape not in ((num_nodes, 1), (num_nodes,)):
        raise ValueError(
            f"labels must have shape ({num_nodes}, 1) or ({num_nodes},), one per node, "
            f"got {labels.shape}"
        )
    labels = labels.reshape(num_nodes)
    if np.issubdtype(labels.dtype, np.floating):
        known = ~np.isnan(labels)
        bad = known & ~((labels == np.floor(labels)) & np.isfinite(labels) & (labels >= 0))
    elif np.issubdtype(labels.dtype, np.integer) and labels.dtype != np.bool_:
        known = np.ones(labels.shape, bool)
        bad = labels < 0
    else:
        raise ValueError(f"labels must be numbers, got dtype {labels.dtype}")
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"labels[{pos}] = {labels[pos]} is not a class id (a non-negative integer; "
            f"ogb marks unlabelled nodes with NaN)"
        )
    out = np.full(labels.shape, -1, np.int64)
    out[known] = labels[known].astype(np.int64)
    return out


def load_ogb(
    name: str,
    root: str | os.PathLike,
    *,
    download: bool = True,
    progress: bool = False,
    url: str | None = None,
) -> Dataset:
    """Loads an OGB node-property dataset with its official split.

    The graph is stored as the publisher's examples use it: ogbn-arxiv and
    ogbn-papers100M are directed citation graphs and are made undirected
    with :func:`~sparsegcn.transforms.to_undirected`, the union of both
    directions with duplicates merged, as ``adj_t.to_symmetric()`` in
    ``examples/nodeproppred/arxiv/gnn.py`` and ``to_undirected`` in
    ``examples/nodeproppred/papers100M/sgc.py`` of the ogb repository;
    ogbn-products comes with every pair in both directions
    (``add_inverse_edge``) and is kept as ``ogb`` builds it.

    The first load reads the raw files and saves ``processed/data_processed``
    (renamed into place whole, under a lock that a concurrent first load of the
    same folder waits for); later loads read that cache. Inside
    :func:`~sparsegcn.datasets.base.reading_only` a missing cache is not
    written: the raw files are read every time.

    Args:
      name: ``"ogbn-arxiv"``, ``"ogbn-products"`` or ``"ogbn-papers100M"``.
      root: data root; the dataset lives in ``<root>/ogbn_arxiv/`` etc.
      download: when the folder is missing, download the archive, verify
        its sha256 and extract it (:func:`download_verified`); ``False``
        raises ``FileNotFoundError`` instead.
      progress: show a download progress bar.
      url: the archive URL (default: ogb's master.csv, over https).

    Returns:
      A :class:`Dataset`: host int32 graph, float32 ``[N, F]`` features,
      int64 labels (``-1`` unlabelled), split ``train``/``valid``/``test``,
      ``num_classes`` and ``metric`` from ``ogb``'s master table, and
      ``num_edges`` as the publisher counts them (directed edges for
      ogbn-arxiv and ogbn-papers100M, undirected pairs for ogbn-products).

    Raises:
      ImportError: torch or ogb is not installed.
      ValueError: unknown name; a root or dataset folder that is not a
        directory, or lacks ogb's release marker; data that break the
        :class:`Dataset` checks (e.g. a label outside ``[0, num_classes)``),
        always naming the dataset, folder and offending value.
      CorruptFileError: a raw or split file that is not gzip, truncated,
        empty or ragged, or whose line count differs from
        ``num-node-list.csv.gz`` / ``num-edge-list.csv.gz`` (the file, the
        line and both counts named).
      PermissionError: the download or the processed cache would have to be
        written under a read-only folder (not inside ``reading_only``, which
        writes neither).
      FileNotFoundError: the dataset is missing and ``download`` is False,
        or its folder lacks the raw file and the processed cache (``ogb``
        would download it unverified and delete the folder), or a raw or
        split file (named).
      OSError: the download failed.
    """
    if name not in OGB:
        raise ValueError(f"unknown OGB dataset {name!r}; choose one of {list(OGB)}")
    nodeproppred = import_ogb()
    meta = _meta_info(nodeproppred, name)
    root = Path(root)
    dataset_dir = root / name.replace("-", "_")
    raw = raw_file(meta)
    _check_folders(name, root, dataset_dir, str(meta["version"]), raw)
    if not dataset_dir.exists():
        source = url or str(meta["url"]).replace("http://", "https://", 1)
        if not download:
            raise FileNotFoundError(
                f"{name}: {str(dataset_dir)!r} does not exist; download it from {source} "
                f"(or pass download=True / drop --no-download)"
            )
        download_verified(name, root, source, str(meta["download_name"]), progress=progress)
        _check_folders(name, root, dataset_dir, str(meta["version"]), raw)
    check_regular_tree(dataset_dir)  # ogb reads what is there: no FIFO or device
    try:
        dataset = _dataset_class(nodeproppred, raw)(name=name, root=str(root))
        split = dataset.get_idx_split()
    except (EOFError, SystemExit) as err:
        if not _from_prompt(err):  # a truncated raw file, not an unanswered question
            raise _bad_raw_file(dataset_dir, err) from err
        raise RuntimeError(
            f"{name}: ogb asked to confirm a download of over 1 GB from {meta['url']} and got "
            f"no 'y' ({type(err).__name__}). Answer 'y' at an interactive prompt, or unzip "
            f"that archive into {str(root)!r} and rename its folder {meta['download_name']!r} "
            f"to {dataset_dir.name!r}"
        ) from err
    except Exception as err:
        if read_cause(err) is None:
            raise
        raise _bad_raw_file(dataset_dir, err) from err
    graph, labels = dataset.graph, dataset.labels
    try:
        num_nodes = int(graph["num_nodes"])
        edge_index = np.asarray(graph["edge_index"])
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, E), got {edge_index.shape}")
        if graph.get("node_feat") is None:
            raise ValueError("ogb returned no node features")
        inverse_added = meta["add_inverse_edge"] == "True"
        host = Graph(edge_index[0], edge_index[1], None, num_nodes)
        if not inverse_added:
            host = to_undirected(host)
        return Dataset(
            name=name,
            graph=host,
            features=np.asarray(graph["node_feat"]).astype(np.float32, copy=False),
            labels=as_labels(labels, num_nodes),
            split={key: np.asarray(split[key]) for key in ("train", "valid", "test")},
            num_classes=int(meta["num classes"]),
            metric=str(meta["eval metric"]),
            num_edges=edge_index.shape[1] // 2 if inverse_added else edge_index.shape[1],
            info={
                "source": str(meta["url"]),
                "license": LICENSES[name],
                "split": str(meta["split"]),
                "folder": str(dataset_dir),
                "ogb_version": sys.modules["ogb"].__version__,
            },
        )
    except ValueError as err:
        raise ValueError(f"{name} ({str(dataset_dir)!r}): {err}") from err


def evaluate(name: str, y_true, y_pred) -> float:
    """The official metric of ``name`` through ``ogb.nodeproppred.Evaluator``.

    For the three supported datasets the metric is accuracy,

    .. math:: \\mathrm{acc} = \\frac{1}{n} \\sum_{i=1}^{n} [\\hat y_i = y_i].

    Args:
      name: an OGB dataset name, e.g. ``"ogbn-arxiv"``.
      y_true: ``[n]`` or ``[n, 1]`` integer class ids of labelled nodes
        (NumPy or JAX); ``-1`` (unlabelled) is refused, since ogb would
        count it as a class.
      y_pred: predicted class ids, same shape.

    Returns:
      The metric as a Python float.

    Raises:
      ValueError: unknown name, mismatched shapes, or an unlabelled node.
    """
    if name not in OGB:
        raise ValueError(f"unknown OGB dataset {name!r}; choose one of {list(OGB)}")
    true, pred = np.asarray(y_true), np.asarray(y_pred)
    if true.shape != pred.shape:
        raise ValueError(
            f"y_true and y_pred must have the same shape, got {true.shape} and {pred.shape}"
        )
    if true.ndim == 1:
        true, pred = true[:, None], pred[:, None]
    if true.ndim != 2 or true.shape[1] != 1:
        raise ValueError(f"y_true must have shape [n] or [n, 1], got {np.asarray(y_true).shape}")
    if true.shape[0] == 0:
        raise ValueError("y_true is empty: the metric is undefined for no nodes")
    unlabelled = true[:, 0] < 0
    if unlabelled.any():
        pos = int(np.flatnonzero(unlabelled)[0])
        raise ValueError(f"y_true[{pos}] = {true[pos, 0]} marks an unlabelled node; drop it")
    evaluator = import_ogb().Evaluator(name)
    result = evaluator.eval({"y_true": true, "y_pred": pred})
    return float(result[evaluator.eval_metric])


def official_test_metric(dataset: Dataset, classes) -> dict | None:
    """``ogb``'s official metric (:func:`evaluate`) of predicted classes on the test split.

    Only for ``ogbn-*`` datasets (also converted on-disk ones, which keep
    the name) and when ``ogb`` is importable; ``None`` otherwise.

    Args:
      dataset: the dataset, in the node order of ``classes``.
      classes: int ``[K, N]`` predicted classes, one row per seed.

    Returns:
      ``{"metric": name, "test": [K] values, "test_mean": mean}``.
    """
    if dataset.name not in OGB or importlib.util.find_spec("ogb") is None:
        return None
    test = np.asarray(dataset.split["test"])
    truth = np.asarray(dataset.labels)[test]
    values = [evaluate(dataset.name, truth, row[test]) for row in np.asarray(classes)]
    return {"metric": dataset.metric, "test": values, "test_mean": float(np.mean(values))}


__all__ = [
    "INSTALL_HINT",
    "LICENSES",
    "PROCESSED_GLOBALS",
    "as_labels",
    "evaluate",
    "import_ogb",
    "load_ogb",
    "load_processed",
    "official_test_metric",
]

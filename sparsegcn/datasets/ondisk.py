"""The on-disk graph format: a folder of ``.npy`` files that loads memory-mapped.

A dataset too large to build in RAM (ogbn-papers100M: 3.2 billion stored
edges, 57 GB of float32 features) is written once, chunk by chunk, into a
folder that later runs memory-map instead of reading. Anyone can write one
with NumPy alone; :func:`save` writes one from a :class:`Dataset`,
:class:`DatasetWriter` streams one, and ``sparsegcn.datasets.load(PATH)``
(so ``sparsegcn train --dataset PATH`` and ``sparsegcn info --dataset PATH``)
reads it.

Format (version 1)
------------------

A folder holding exactly these files (``N`` nodes, ``E`` stored directed
edges, ``F`` features, ``C`` classes):

==================  =====================  ==============================================
file                dtype, shape           content
==================  =====================  ==============================================
``indptr.npy``      int64 ``[N + 1]``      CSR row offsets by *receiver*: node ``r``'s
                                           in-neighbours are ``indices[indptr[r]:indptr[r+1]]``;
                                           ``indptr[0] == 0``, non-decreasing,
                                           ``indptr[N] == E``
``indices.npy``     int32 ``[E]``          sender ids in ``[0, N)``, ascending within each
                                           row (repeats allowed: a multigraph)
``features.npy``    float32 or float16     node features, row ``i`` for node ``i``
                    ``[N, F]``
``labels.npy``      int64 ``[N]``          class ids in ``[0, C)``, ``-1`` for unlabelled
``train.npy``,      int64 ``[n_split]``    node ids of each split, labelled, in ``[0, N)``
``valid.npy``,
``test.npy``
``manifest.json``   JSON                   see below
==================  =====================  ==============================================

One file is optional: ``edge_features.npy``, float32 ``[E, D]``, row ``e``
holding the features of the ``e``-th stored edge (the edge into the row
of ``indptr`` that contains position ``e``, from ``indices[e]``), i.e. in
the same (receiver, sender) order as ``indices``. When present the
manifest lists it in ``files`` like the others and gives
``num_edge_features`` (``D``); the loaded graph's ``edge_features`` is
then that file, memory-mapped.

A multi-label dataset (ogbn-proteins: 112 binary tasks per node) sets the
manifest's optional ``multilabel`` to ``true``; ``labels.npy`` is then
int64 ``[N, T]`` (``T = num_classes`` tasks), each entry ``1``, ``0`` or
``-1`` for a missing label (:class:`~sparsegcn.datasets.Dataset`'s
convention), and a split node needs at least one present label. Such a
folder trains under the ``node-multilabel`` task (per-task binary
cross-entropy, ROC-AUC; :func:`is_multilabel_ondisk`), whatever its name.
Without the key (or ``false``) the labels are one class per node.

Writing one by hand takes NumPy alone (``sha256`` from :func:`sha256_file`
or ``hashlib``), e.g. for a 3-node path graph ``0 - 1 - 2``::

    np.save("g/indptr.npy", np.array([0, 1, 3, 4], np.int64))   # in-edges per node
    np.save("g/indices.npy", np.array([1, 0, 2, 1], np.int32))  # their senders
    np.save("g/features.npy", np.eye(3, dtype=np.float32))
    np.save("g/labels.npy", np.array([0, 1, 1]))
    for split, ids in {"train": [0], "valid": [1], "test": [2]}.items():
        np.save(f"g/{split}.npy", np.array(ids, np.int64))
    # then g/manifest.json as below

The manifest is a JSON object with keys ``format`` (``"sparsegcn-graph"``),
``version`` (``1``), ``name`` (the dataset's name, e.g. ``"ogbn-arxiv"``:
``ogbn-*`` names get ``ogb``'s official metric in reports), ``num_nodes``,
``num_stored_edges`` (``E``), ``num_edges`` (as the publisher counts them),
``num_features``, ``num_classes``, ``metric``, ``info`` (free-form
provenance), optionally ``multilabel`` (see above) and ``files``: an object
keyed by the array names above (``indptr``, ``indices``, ...), each entry
``{"file": "indptr.npy", "dtype": "int64", "shape": [N + 1], "sha256": "..."}``,
as in ``{"files": {"indptr": {...}, "indices": {...}, ...}}``.
The graph is stored as models consume it (the publisher's undirected
graphs with both directions of every edge), without added self-loops.

Checks
------

:func:`load_ondisk` checks everything that can be checked in bounded memory
(chunks of :data:`CHECK_CHUNK` entries, never a full-length temporary):
the manifest's keys and counts, every file's dtype and shape against the
manifest, ``indptr`` (starts at 0, non-decreasing, ends at ``E``), every
``indices`` entry in range and ascending within its row, labels in
``[-1, C)`` (multi-label: ``-1``, ``0`` or ``1``), at least one node and one feature, split ids in range,
labelled, never repeated and in one split only (:func:`check_contents`).
The first problem raises one :class:`FormatError` naming the file and the
field. :class:`DatasetWriter` (so :func:`save`, the converter and the
synthetic generator) runs the same checks, and the features' finiteness,
on what it wrote before renaming it into place.

The sha256 checksums are written always but verified only on request
(``verify=True``, :func:`verify_checksums`, ``sparsegcn info --verify``):
hashing reads every byte, about 45 GB at papers100M size, minutes of disk
reading at every start, while a memory-mapped run reads only what it
touches. The structural checks catch truncation and most corruption
anyway; a flipped bit inside the features is caught only by the checksum.

The :class:`~sparsegcn.Graph` of the loaded :class:`Dataset` is an edge
list: its ``senders`` are the memory-mapped ``indices``, its ``receivers``
are expanded from ``indptr`` into RAM (4 bytes per stored edge), since no
receiver array is stored (it would add 13 GB on disk at papers100M size).
Above :data:`EXPAND_FRACTION` of physical RAM (12.9 GB of receivers for
papers100M) they are not expanded: the graph then holds
:class:`ExpandedRows`, which computes any slice on demand and refuses to be
read whole, so the folder loads in seconds and only paths that never need
the full receiver array run (host sampling, ``--graph-on host``).
"""

from __future__ import annotations

import functools
import json
import numbers
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from sparsegcn import files as _files
from sparsegcn.datasets.base import SPLITS, Dataset, check_disjoint_splits
from sparsegcn.files import (
    CorruptFileError,
    NotRegularFileError,
    check_regular_file,
    json_text,
    load_npy,
    naming_errors,
    open_regular,
    read_json,
    read_npy_header,
    release_pages,
    replace_folder,
    reserve_space,
    temp_folder,
)
from sparsegcn.graph import Graph

FORMAT = "sparsegcn-graph"
VERSION = 1
MANIFEST = "manifest.json"
FEATURE_DTYPES = ("float32", "float16")
CHECK_CHUNK = 1 << 24
"""Entries per chunk of the load-time checks: the temporaries stay at a few
hundred MB whatever the graph's size."""

EXPAND_FRACTION = 1 / 8
"""Share of physical RAM up to which :func:`load_ondisk` expands the receivers
(4 bytes per stored edge) eagerly; above it they stay :class:`ExpandedRows`."""

_FILES = ("indptr", "indices", "features", "labels", *SPLITS)
_OPTIONAL_FILES = ("edge_features",)
_COUNTS = ("num_nodes", "num_stored_edges", "num_edges", "num_features", "num_classes")
_HASH_BLOCK = 1 << 24


class FormatError(ValueError):
    """A file of an on-disk dataset is missing, malformed or inconsistent.

    Attributes:
      file: the offending file's path.
      field: what is wrong in it (``"shape"``, ``"dtype"``, ``"sha256"``,
        ``"indptr[7]"``, a manifest key, ...).
      message: the problem, without the file and field.
    """

    def __init__(self, file, field: str, message: str):
        self.file, self.field, self.message = Path(file), field, message
        super().__init__(f"{file}: {field}: {message}")


def is_ondisk(path) -> bool:
    """Whether ``path`` is a folder holding a :data:`MANIFEST` (an on-disk dataset)."""
    try:
        return (Path(path) / MANIFEST).is_file()
    except (OSError, ValueError):
        return False


def is_multilabel_ondisk(path) -> bool:
    """Whether ``path`` holds an on-disk node dataset whose manifest says ``multilabel``
    (labels ``[N, T]`` of binary tasks): the ``node-multilabel`` task's folders."""
    try:
        manifest = read_json(Path(path) / MANIFEST)
    except (OSError, ValueError):
        return False
    return (
        isinstance(manifest, dict)
        and manifest.get("format") == FORMAT
        and manifest.get("multilabel") is True
    )


def sha256_file(path, *, block: int = _HASH_BLOCK) -> str:
    """The sha256 hex digest of a regular file, read in ``block``-byte pieces
    (:func:`sparsegcn.files.sha256_file`: a FIFO or a device is refused)."""
    return _files.sha256_file(path, block=block)


def _fsync_dir(folder: Path) -> None:
    if os.name == "posix":  # directories cannot be opened on Windows
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _count(name: str, value, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _written_key(key: str) -> bool:
    """Whether a folder of this format can hold file ``<key>.npy``: :data:`_FILES` and
    the optional ones (``edge_features``). The graph-level and hetero formats pass
    their own rule to :func:`_check_target` (``written``)."""
    return key in (*_FILES, *_OPTIONAL_FILES)


def _unlike_entry(file: Path, entry: dict, fmt: str) -> str | None:
    """Why the regular file ``file`` is not the array manifest ``entry`` lists (``None``
    when its ``.npy`` header declares the entry's dtype and shape). Only the header is
    read, however large the file."""
    dtype, shape = entry.get("dtype"), entry.get("shape")
    if not isinstance(dtype, str) or not isinstance(shape, list):
        return f"which the {fmt} manifest there lists without a dtype and shape"
    listed = f"{dtype}{shape}"
    try:
        with open_regular(file) as f:
            header = read_npy_header(f, file)
    except CorruptFileError as err:
        return f"which the {fmt} manifest there lists as {listed} but is not one: {err.cause}"
    except OSError as err:
        return f"which cannot be read to compare with the {fmt} manifest there ({err})"
    if str(header.dtype) != dtype or list(header.shape) != shape:
        return (
            f"whose .npy header declares {header.describe()} where the {fmt} manifest there "
            f"lists {listed}"
        )
    return None


def _foreign_entries(
    path: Path, fmt: str = FORMAT, written: Callable[[str], bool] = _written_key
) -> dict[str, str | None]:
    """What in folder ``path`` is not part of the ``fmt`` dataset its manifest describes.

    A manifest claims a file only under the name sparsegcn writes for its key
    (``<key>.npy``, the key one the format writes: ``written(key)``), and only
    if the file's ``.npy`` header declares the dtype and shape the manifest
    lists for that key (only headers are read): a manifest planted among a
    user's files, or one left over from an old dataset, cannot make them
    count as a dataset's, so ``overwrite`` never replaces them.

    Returns:
      ``{}`` when ``path`` holds a readable manifest of format ``fmt`` and
      nothing but the regular files it lists by such names, with such
      headers (a folder :func:`save` or :class:`DatasetWriter` made);
      otherwise ``{name: why}`` for each entry that is not such a file:
      ``why`` is ``None`` for an entry no manifest lists (all entries when
      there is no valid manifest), else why the listed file is not the
      manifest's (its header, or that it is no ``.npy`` file).
    """
    names = sorted(entry.name for entry in os.scandir(path))
    try:
        manifest = read_json(path / MANIFEST)
        listed = {
            entry["file"]: entry
            for key, entry in manifest["files"].items()
            if entry["file"] == f"{key}.npy" and written(key)
        }
        ours = manifest.get("format") == fmt
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return dict.fromkeys(names)
    if not ours:
        return dict.fromkeys(names)
    foreign: dict[str, str | None] = {}
    for name in names:
        file = path / name
        if (name not in listed and name != MANIFEST) or not file.is_file() or file.is_symlink():
            foreign[name] = None
        elif name in listed and (why := _unlike_entry(file, listed[name], fmt)) is not None:
            foreign[name] = why
    return foreign


def _shown(names: list[str]) -> str:
    """``a, b, c and 4 more``."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _check_target(
    path: Path, overwrite: bool, fmt: str = FORMAT, written: Callable[[str], bool] = _written_key
) -> None:
    """Refuses an output folder that is a file or a mount point, holds data without
    ``overwrite``, or holds anything but a dataset of format ``fmt`` (what ``overwrite``
    may replace); shared by the on-disk formats, each passing which keys it writes
    (``written(key)``, see :func:`_foreign_entries`)."""
    if os.path.islink(path) and not overwrite:
        raise ValueError(
            f"{path} is a symbolic link (to {os.readlink(path)}), which the finished dataset "
            "folder would replace, leaving what it names as it is; give the folder's own "
            "path, or pass overwrite=True (--overwrite) to replace the link"
        )
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} exists and is not a folder")
    _files.check_not_mount_point(path)  # the finished folder is renamed over it: EBUSY
    real, cwd = os.path.realpath(path), os.path.realpath(os.getcwd())
    if cwd == real or cwd.startswith(real.rstrip(os.sep) + os.sep):
        where = "the current folder" if cwd == real else "a folder holding the current one"
        raise ValueError(
            f"{path} is {where}, which the finished dataset folder would replace whole; "
            f"name a folder to create, e.g. {Path(path) / 'NAME'}"
        )
    if not path.is_dir() or not any(path.iterdir()):
        return
    if not overwrite:
        raise ValueError(
            f"{path} exists and is not empty; pass overwrite=True (--overwrite) to replace it"
        )
    foreign = _foreign_entries(path, fmt, written)
    if foreign:
        unlisted = [name for name, why in foreign.items() if why is None]
        unlike = [(name, why) for name, why in foreign.items() if why is not None]
        clauses = [f"{_shown(unlisted)}, which no {fmt} manifest there lists"] if unlisted else []
        clauses += [f"{name}, {why}" for name, why in unlike[:3]]
        if len(unlike) > 3:
            clauses.append(f"{len(unlike) - 3} more files it does not describe")
        raise ValueError(
            f"{path} is not a sparsegcn dataset folder (it holds {'; and '.join(clauses)}); "
            f"overwrite replaces only such a folder or an empty one: choose another folder, "
            f"or empty this one yourself"
        )


class DatasetWriter:
    """Streams an on-disk dataset into a temporary folder, renamed into place at the end.

    The arrays are ``.npy`` files opened as writable memory maps
    (``numpy.lib.format.open_memmap``): fill ``writer.indptr``,
    ``writer.indices``, ``writer.features`` and ``writer.labels`` slice by
    slice, write the splits with :meth:`write_split`, then call
    :meth:`finish`, which hashes the files, writes the manifest and renames
    the folder to ``path``. Used as a context manager, an exception (or a
    missing :meth:`finish`) removes the temporary folder and leaves ``path``
    untouched.

    Args:
      path: the folder to create. An existing empty folder is replaced; a
        non-empty one only with ``overwrite=True`` and only if it is a
        sparsegcn dataset folder (a manifest and the files it lists, each with the
        ``.npy`` header of its listed dtype and shape), once the new one is complete.
      num_nodes, num_stored_edges, num_features: ``N``, ``E``, ``F``.
      features_dtype: ``"float32"`` or ``"float16"``.
      overwrite: replace an existing dataset folder at ``path``.
      num_edge_features: ``D``; above 0, ``writer.edge_features`` is a
        float32 ``[E, D]`` map to fill in ``indices``' order.
      num_tasks: ``T``; above 0, the dataset is multi-label: ``writer.labels``
        is int64 ``[N, T]`` (1, 0 or -1 for missing) and :meth:`finish`
        needs ``num_classes == T``.
    """

    def __init__(
        self,
        path,
        *,
        num_nodes: int,
        num_stored_edges: int,
        num_features: int,
        features_dtype: str = "float32",
        overwrite: bool = False,
        num_edge_features: int = 0,
        num_tasks: int = 0,
    ):
        self.path = Path(path)
        self.num_edge_features = _count("num_edge_features", num_edge_features)
        self.num_tasks = _count("num_tasks", num_tasks)
        self.num_nodes = _count("num_nodes", num_nodes, 1)
        self.num_stored_edges = _count("num_stored_edges", num_stored_edges)
        self.num_features = _count("num_features", num_features, 1)
        if self.num_nodes >= 2**31:
            raise ValueError(f"num_nodes={self.num_nodes} does not fit int32 node ids")
        if str(features_dtype) not in FEATURE_DTYPES:
            raise ValueError(
                f"features_dtype must be one of {FEATURE_DTYPES}, got {features_dtype!r}"
            )
        self.overwrite = bool(overwrite)
        _check_target(self.path, self.overwrite)
        self._tmp: Path | None = temp_folder(self.path.parent, self.path.name)
        self._splits: dict = {}
        n, e = self.num_nodes, self.num_stored_edges
        try:
            self.indptr = self._open("indptr", np.int64, (n + 1,))
            self.indices = self._open("indices", np.int32, (e,))
            self.features = self._open("features", np.dtype(features_dtype), (n, self.num_features))
            label_shape = (n, self.num_tasks) if self.num_tasks else (n,)
            self.labels = self._open("labels", np.int64, label_shape)
            self.edge_features = None
            if self.num_edge_features:
                self.edge_features = self._open(
                    "edge_features", np.float32, (e, self.num_edge_features)
                )
        except BaseException:
            self.abort()
            raise

    def _open(self, name: str, dtype, shape):
        """A writable memory map of ``name.npy`` whose blocks are all allocated on disk.

        ``open_memmap`` makes a sparse file; storing into its pages on a full
        disk would be ``SIGBUS``. :func:`~sparsegcn.files.reserve_space`
        makes a full disk an ``OSError`` here instead, before any work.
        """
        file = self.tmp / f"{name}.npy"
        with naming_errors(self.path):  # not the temporary folder's name
            array = np.lib.format.open_memmap(file, "w+", dtype, shape)
        reserve_space(
            file, int(array.offset) + int(array.nbytes), name=f"{self.path} ({file.name})"
        )
        return array

    def write_split(self, name: str, ids) -> None:
        """Writes split ``name`` (``train``/``valid``/``test``) as int64 node ids."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        with naming_errors(self.path):
            _files.save_npy(self.tmp / f"{name}.npy", np.asarray(ids, np.int64))
        self._splits[name] = True

    def finish(
        self,
        *,
        name: str,
        num_edges: int,
        num_classes: int,
        metric: str = "acc",
        info: dict | None = None,
        progress: bool = False,
    ) -> Path:
        """Hashes the files, writes the manifest, checks the result as loading
        would (:func:`check_contents`, features' finiteness included) and
        renames the folder into place.

        Returns:
          ``path``.

        Raises:
          FormatError: the written data fails a check (naming the file under
            ``path`` and the entry); ``path`` is left as it was.
        """
        with naming_errors(self.path):
            return self._finish(name, num_edges, num_classes, metric, info, progress)

    def _finish(self, name, num_edges, num_classes, metric, info, progress) -> Path:
        missing = [s for s in SPLITS if s not in self._splits]
        if missing:
            raise ValueError(f"splits {missing} were not written (write_split)")
        arrays = {"indptr": self.indptr, "indices": self.indices}
        arrays.update(features=self.features, labels=self.labels)
        if self.edge_features is not None:
            arrays["edge_features"] = self.edge_features
        for array in arrays.values():
            array.flush()
        del arrays
        self.indptr = self.indices = self.features = self.labels = self.edge_features = None
        files = {}
        from tqdm.auto import tqdm

        keys = _FILES + (("edge_features",) if self.num_edge_features else ())
        for key in tqdm(keys, disable=not progress, desc="sha256", leave=False):
            file = self.tmp / f"{key}.npy"
            header = load_npy(file, mmap_mode="r")
            files[key] = {
                "file": file.name,
                "dtype": str(header.dtype),
                "shape": list(header.shape),
                "sha256": sha256_file(file),
            }
            del header
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "name": str(name),
            "num_nodes": self.num_nodes,
            "num_stored_edges": self.num_stored_edges,
            "num_edges": _count("num_edges", num_edges),
            "num_features": self.num_features,
            "num_classes": _count("num_classes", num_classes, 1),
            "metric": str(metric),
            "info": info or {},
            "files": files,
        }
        if self.num_edge_features:
            manifest["num_edge_features"] = self.num_edge_features
        if self.num_tasks:
            if manifest["num_classes"] != self.num_tasks:
                raise ValueError(
                    f"num_classes={num_classes} but the labels hold {self.num_tasks} tasks "
                    "(multi-label: num_classes is the number of tasks)"
                )
            manifest["multilabel"] = True
        with open(self.tmp / MANIFEST, "w") as f:
            f.write(json_text(manifest, indent=1))
            f.flush()
            os.fsync(f.fileno())
        for key in keys:
            with open(self.tmp / f"{key}.npy", "rb+") as f:
                os.fsync(f.fileno())
        _fsync_dir(self.tmp)
        self._validate()
        _check_target(self.path, self.overwrite)
        replace_folder(self.tmp, self.path)  # an empty target folder is replaced too
        self._tmp = None
        return self.path

    def _validate(self) -> None:
        """Runs the checks loading runs (and the features' finiteness) on the temporary
        folder: what fails them is never renamed into place."""
        try:
            manifest = read_manifest(self.tmp)
            check_contents(self.tmp, manifest, _open_arrays(self.tmp, manifest), features=True)
        except FormatError as err:
            file = self.path / err.file.name if err.file.parent == self.tmp else err.file
            raise FormatError(
                file, err.field, f"{err.message} (so nothing was written to {self.path})"
            ) from None

    @property
    def tmp(self) -> Path:
        """The temporary folder being written (until :meth:`commit` or :meth:`abort`)."""
        if self._tmp is None:
            raise ValueError(f"the dataset writer for {self.path} is closed")
        return self._tmp

    def abort(self) -> None:
        """Removes the temporary folder (nothing is left behind)."""
        self.indptr = self.indices = self.features = self.labels = self.edge_features = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.abort()


def _host_csr(graph: Graph, chunk: int = CHECK_CHUNK):
    """``(indptr int64 [N + 1], senders in (receiver, sender) order, order)`` of a
    host graph; ``order`` (``None`` when already sorted) maps the stored
    positions to the graph's edge ids."""
    n = graph.num_nodes
    receivers = np.asarray(graph.receivers)
    senders = np.asarray(graph.senders)
    order = None
    if not graph.edges_sorted:
        order = np.lexsort((senders, receivers))
        senders, receivers = senders[order], receivers[order]
    counts = np.zeros(n, np.int64)
    for start in range(0, receivers.shape[0], chunk):
        counts += np.bincount(receivers[start : start + chunk], minlength=n)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, senders, order


def save(
    dataset: Dataset,
    path,
    *,
    features_dtype: str | None = None,
    overwrite: bool = False,
    progress: bool = False,
    chunk: int = CHECK_CHUNK,
) -> Path:
    """Writes ``dataset`` to the folder ``path`` in the on-disk format (module docstring).

    Written into a temporary folder beside ``path`` and renamed into place
    once complete, so ``path`` never holds a partial dataset. Edges are
    sorted by (receiver, sender) first unless the graph says they are; the
    graph's ``edge_features``, if any, move with their edges into
    ``edge_features.npy``. Edge weights are not stored (the format has
    none): a weighted graph is refused.

    Args:
      dataset: any :class:`Dataset` (dense or scipy-sparse features).
      path: the folder to write.
      features_dtype: ``"float32"`` or ``"float16"``; default: float16 if the
        features are float16, else float32.
      overwrite: replace an existing dataset folder (a folder holding
        anything else is refused).
      progress: progress bars.
      chunk: rows and edges copied at a time.

    Returns:
      ``Path(path)``.

    Raises:
      ValueError: ``path`` is a non-empty folder (without ``overwrite``, or
        not a sparsegcn dataset folder) or
        a file, lies inside the folder ``dataset`` was read from
        (``info["folder"]``; that folder itself may be replaced, with
        ``overwrite``), the graph has weights, or a bad ``features_dtype``.

    A multi-label dataset (labels ``[N, T]``) is written with ``multilabel``
    in its manifest (module docstring).
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a Dataset, got {type(dataset).__name__}")
    if dataset.graph.weights is not None:
        raise ValueError(
            "the on-disk format stores no edge weights, but the dataset's graph has them"
        )
    source = dataset.info.get("folder")  # a loaded folder: replaced whole, never written into
    if source is not None and os.path.realpath(path) != os.path.realpath(source):
        _files.check_not_inputs({"path": path}, [("the dataset's own folder", source)])
    if features_dtype is None:
        features_dtype = "float16" if dataset.features.dtype == np.float16 else "float32"
    indptr, senders, order = _host_csr(dataset.graph)
    edge_features = dataset.graph.edge_features
    writer = DatasetWriter(
        path,
        num_nodes=dataset.num_nodes,
        num_stored_edges=int(senders.shape[0]),
        num_features=dataset.num_features,
        features_dtype=features_dtype,
        overwrite=overwrite,
        num_edge_features=dataset.graph.num_edge_features,
        num_tasks=dataset.num_classes if dataset.multilabel else 0,
    )
    with writer:
        writer.indptr[:] = indptr
        edge_rows = writer.edge_features  # None exactly when edge_features is
        for start in range(0, senders.shape[0], chunk):
            writer.indices[start : start + chunk] = senders[start : start + chunk]
            if edge_rows is not None and edge_features is not None:
                ids = slice(start, start + chunk) if order is None else order[start : start + chunk]
                edge_rows[start : start + chunk] = edge_features[ids]
        features = dataset.features
        for start in range(0, dataset.num_nodes, chunk):
            rows = features[start : start + chunk]
            rows = rows.toarray() if sp.issparse(rows) else np.asarray(rows)
            writer.features[start : start + chunk] = rows.astype(features_dtype)
        writer.labels[:] = dataset.labels
        for key in SPLITS:
            writer.write_split(key, dataset.split[key])
        return writer.finish(
            name=dataset.name,
            num_edges=dataset.num_edges,
            num_classes=dataset.num_classes,
            metric=dataset.metric,
            info=_jsonable(dataset.info),
            progress=progress,
        )


def _jsonable(info: dict) -> dict:
    return json.loads(json.dumps(info, default=str))


def open_listed_file(folder: Path, key: str, entry: dict) -> np.ndarray:
    """The array a manifest lists as ``files[key] = entry``, memory-mapped.

    Checked against the entry before it is returned: the file exists, is
    regular, holds ``entry["bytes"]`` bytes (a truncated or replaced file is
    named) and is a readable ``.npy`` of ``entry["dtype"]`` and
    ``entry["shape"]``. The graph and heterogeneous formats open every file
    through it.

    Raises:
      FormatError: naming the file and what is wrong with it.
    """
    file = folder / entry["file"]
    try:
        size = os.stat(file).st_size
    except FileNotFoundError:
        raise FormatError(file, key, "missing") from None
    if size != entry["bytes"]:
        raise FormatError(
            file,
            "bytes",
            f"holds {size} bytes but the manifest says {entry['bytes']} (truncated or replaced)",
        )
    try:
        array = load_npy(file, mmap_mode="r")
    except NotRegularFileError as err:
        raise FormatError(file, key, f"not a regular file: it is {err.kind}") from None
    except CorruptFileError as err:
        raise FormatError(file, key, err.cause) from None
    _check_listed(file, array, entry)
    return array


def _check_listed(file: Path, array: np.ndarray, entry: dict) -> None:
    """Raises :class:`FormatError` unless ``array``'s dtype and shape are the
    manifest ``entry``'s (``{"dtype", "shape"}``)."""
    if str(array.dtype) != entry["dtype"] or list(array.shape) != entry["shape"]:
        raise FormatError(
            file,
            "dtype" if str(array.dtype) != entry["dtype"] else "shape",
            f"holds {array.dtype} {list(array.shape)} but the manifest says "
            f"{entry['dtype']} {entry['shape']}",
        )


def read_format_manifest(file: Path, format: str, version: int, counts, *, what: str) -> dict:
    """The JSON object in manifest ``file``, checked for ``format``, ``version``
    and non-negative integer ``counts`` keys (the checks every on-disk format
    shares).

    Raises:
      FormatError: missing (not ``what``), not a regular file, unreadable, not
        an object, another format or version, or a bad count (naming it).
    """
    try:
        manifest = read_json(file)
    except FileNotFoundError as err:
        raise FormatError(file, "file", f"missing: not {what}") from err
    except NotRegularFileError as err:
        raise FormatError(file, "file", f"not a regular file: it is {err.kind}") from None
    except (OSError, ValueError) as err:
        raise FormatError(file, "json", f"unreadable ({err})") from err
    if not isinstance(manifest, dict):
        raise FormatError(file, "json", f"must hold an object, got {type(manifest).__name__}")
    if manifest.get("format") != format:
        raise FormatError(file, "format", f"must be {format!r}, got {manifest.get('format')!r}")
    if manifest.get("version") != version:
        raise FormatError(
            file,
            "version",
            f"this sparsegcn reads version {version}, got {manifest.get('version')!r}",
        )
    for key in counts:
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise FormatError(file, key, f"must be a non-negative integer, got {value!r}")
    return manifest


def read_manifest(path) -> dict:
    """The validated manifest of the on-disk dataset in folder ``path``.

    Raises:
      FormatError: a missing or unreadable manifest, a wrong format or
        version, or a missing or ill-typed key (naming it).
    """
    file = Path(path) / MANIFEST
    manifest = read_format_manifest(
        file, FORMAT, VERSION, _COUNTS, what="an on-disk dataset folder"
    )
    has_edge_features = "edge_features" in (manifest.get("files") or {})
    value = manifest.get("num_edge_features", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FormatError(
            file, "num_edge_features", f"must be a non-negative integer, got {value!r}"
        )
    if has_edge_features != (value > 0):
        raise FormatError(
            file,
            "num_edge_features",
            f"is {value} but files {'lists' if has_edge_features else 'lacks'} edge_features; "
            "give both or neither",
        )
    for key in ("name", "metric"):
        if not isinstance(manifest.get(key), str):
            raise FormatError(file, key, f"must be a string, got {manifest.get(key)!r}")
    if not isinstance(manifest.get("multilabel", False), bool):
        raise FormatError(
            file, "multilabel", f"must be true or false, got {manifest.get('multilabel')!r}"
        )
    if not isinstance(manifest.get("info", {}), dict):
        raise FormatError(file, "info", "must be an object")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise FormatError(file, "files", f"must be an object, got {files!r}")
    for key in _FILES + (("edge_features",) if has_edge_features else ()):
        entry = files.get(key)
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("file"), str)
            and isinstance(entry.get("dtype"), str)
            and isinstance(entry.get("shape"), list)
            and isinstance(entry.get("sha256"), str)
        ):
            raise FormatError(
                file, f"files.{key}", f"must be {{file, dtype, shape, sha256}}, got {entry!r}"
            )
        if Path(entry["file"]).name != entry["file"]:
            raise FormatError(
                file, f"files.{key}.file", f"must be a file name, got {entry['file']!r}"
            )
    return manifest


def _expected(manifest: dict) -> dict:
    """``{file key: (allowed dtypes, shape or None for any 1-D length)}`` from the counts."""
    n, e, f = manifest["num_nodes"], manifest["num_stored_edges"], manifest["num_features"]
    labels = (n, manifest["num_classes"]) if manifest.get("multilabel") else (n,)
    expected = {
        "indptr": (("int64",), (n + 1,)),
        "indices": (("int32",), (e,)),
        "features": (FEATURE_DTYPES, (n, f)),
        "labels": (("int64",), labels),
        **{key: (("int64",), None) for key in SPLITS},
    }
    if manifest.get("num_edge_features", 0):
        expected["edge_features"] = (("float32",), (e, manifest["num_edge_features"]))
    return expected


def _open_arrays(folder: Path, manifest: dict) -> dict:
    arrays = {}
    for key, (dtypes, shape) in _expected(manifest).items():
        entry = manifest["files"][key]
        file = folder / entry["file"]
        try:
            array = load_npy(file, mmap_mode="r")
        except FileNotFoundError as err:
            raise FormatError(file, key, "missing") from err
        except NotRegularFileError as err:
            raise FormatError(file, key, f"not a regular file: it is {err.kind}") from None
        except CorruptFileError as err:
            raise FormatError(file, key, err.cause) from err
        except OSError as err:
            raise FormatError(file, key, f"unreadable ({err.strerror or err})") from err
        _check_listed(file, array, entry)
        if str(array.dtype) not in dtypes:
            raise FormatError(file, "dtype", f"must be one of {dtypes}, got {array.dtype}")
        if shape is None and array.ndim != 1:
            raise FormatError(file, "shape", f"must be 1-D, got {list(array.shape)}")
        if shape is not None and array.shape != shape:
            raise FormatError(
                file,
                "shape",
                f"must be {list(shape)} for num_nodes={manifest['num_nodes']}, num_stored_edges="
                f"{manifest['num_stored_edges']}, num_features={manifest['num_features']}, "
                f"num_edge_features={manifest.get('num_edge_features', 0)}"
                + (
                    f", num_classes={manifest['num_classes']} (multilabel)"
                    if key == "labels" and manifest.get("multilabel")
                    else ""
                )
                + f", got {list(array.shape)}",
            )
        arrays[key] = array
    return arrays


def check_csr_chunked(
    indptr, indices, num_nodes: int, *, files=("indptr", "indices"), chunk=CHECK_CHUNK
):
    """Checks a (possibly memory-mapped) CSR pair in bounded memory.

    ``indptr`` must start at 0, never decrease and end at ``len(indices)``;
    every entry of ``indices`` must lie in ``[0, num_nodes)`` and the
    entries of a row must be ascending. Temporaries are ``O(chunk)``.

    Args:
      indptr: integer ``[N + 1]``.
      indices: integer ``[E]``.
      num_nodes: ``N``.
      files: the names the errors give for ``indptr`` and ``indices``.
      chunk: entries per step.

    Raises:
      FormatError: the first violation, naming the file and the entry.
    """
    ptr_file, idx_file = files
    e = int(indices.shape[0])
    if int(indptr[0]) != 0:
        raise FormatError(ptr_file, "indptr[0]", f"must be 0, got {int(indptr[0])}")
    if int(indptr[-1]) != e:
        raise FormatError(
            ptr_file,
            f"indptr[{num_nodes}]",
            f"must equal the number of stored edges {e}, got {int(indptr[-1])}",
        )
    for start in range(0, indptr.shape[0] - 1, chunk):
        part = np.asarray(indptr[start : start + chunk + 1])
        steps = np.diff(part)
        if (steps < 0).any():
            pos = start + int(np.flatnonzero(steps < 0)[0]) + 1
            raise FormatError(
                ptr_file,
                f"indptr[{pos}]",
                f"indptr is not monotone: indptr[{pos}] = {int(indptr[pos])} < indptr[{pos - 1}]"
                f" = {int(indptr[pos - 1])}",
            )
        release_pages(indptr)
    for start in range(0, e, chunk):
        part = np.asarray(indices[start : start + chunk])
        bad = (part < 0) | (part >= num_nodes)
        if bad.any():
            pos = start + int(np.flatnonzero(bad)[0])
            raise FormatError(
                idx_file,
                f"indices[{pos}]",
                f"node id {int(indices[pos])} is out of range [0, {num_nodes})",
            )
        lo = max(start - 1, 0)
        steps = np.diff(np.asarray(indices[lo : start + chunk], np.int64))
        # A decrease is allowed only where a new row starts.
        falls = np.flatnonzero(steps < 0) + lo + 1
        if falls.size:
            row = np.searchsorted(indptr, falls, side="left")
            ok = (row < indptr.shape[0]) & (np.asarray(indptr[np.minimum(row, num_nodes)]) == falls)
            if not ok.all():
                pos = int(falls[np.flatnonzero(~ok)[0]])
                raise FormatError(
                    idx_file,
                    f"indices[{pos}]",
                    f"a row's senders must be ascending, but indices[{pos}] = "
                    f"{int(indices[pos])} < indices[{pos - 1}] = {int(indices[pos - 1])} in row "
                    f"{int(np.searchsorted(indptr, pos, side='right')) - 1}",
                )
        release_pages(indices)  # memory maps: resident memory stays O(chunk), not 4 E bytes


def _check_labels(file: Path, labels, num_classes: int, chunk: int) -> None:
    if labels.ndim == 2:  # multi-label: binary tasks, -1 missing
        rows = max(1, chunk // max(1, int(labels.shape[1])))
        for start in range(0, labels.shape[0], rows):
            part = np.asarray(labels[start : start + rows])
            bad = (part < -1) | (part > 1)
            if bad.any():
                row, col = (int(k[0]) for k in np.nonzero(bad))
                raise FormatError(
                    file,
                    f"labels[{start + row}, {col}]",
                    f"{int(part[row, col])} is not 1, 0 or -1 (missing): the labels are "
                    "binary tasks (multilabel)",
                )
            release_pages(labels)
        return
    for start in range(0, labels.shape[0], chunk):
        part = np.asarray(labels[start : start + chunk])
        bad = (part < -1) | (part >= num_classes)
        if bad.any():
            pos = start + int(np.flatnonzero(bad)[0])
            raise FormatError(
                file,
                f"labels[{pos}]",
                f"{int(labels[pos])} is outside [0, {num_classes}) (-1 marks unlabelled nodes)",
            )
        release_pages(labels)


def _check_split(file: Path, key: str, ids, labels, num_nodes: int) -> None:
    ids = np.asarray(ids)
    bad = (ids < 0) | (ids >= num_nodes)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise FormatError(
            file, f"{key}[{pos}]", f"node id {int(ids[pos])} is out of range [0, {num_nodes})"
        )
    given = np.asarray(labels[ids]) >= 0
    unlabelled = ~given.any(axis=1) if given.ndim == 2 else ~given
    if unlabelled.any():
        pos = int(np.flatnonzero(unlabelled)[0])
        what = "no label (-1)" if given.ndim == 1 else "no task labelled (all -1)"
        raise FormatError(file, f"{key}[{pos}]", f"node {int(ids[pos])} has {what}")


def _check_features(file: Path, features, chunk: int, field: str = "features") -> None:
    rows = max(1, chunk // max(1, int(features.shape[1])))
    for start in range(0, features.shape[0], rows):
        part = np.asarray(features[start : start + rows])
        finite = np.isfinite(part)
        if not finite.all():
            row, col = np.unravel_index(int(np.flatnonzero(~finite.ravel())[0]), part.shape)
            raise FormatError(
                file,
                f"{field}[{start + row}, {col}]",
                f"{part[row, col]} is not finite (a missing value in the source?)",
            )
        release_pages(features)


def check_contents(
    folder, manifest: dict, arrays: dict, *, features: bool = False, chunk: int = CHECK_CHUNK
) -> None:
    """The load-time checks of an on-disk dataset's contents, in bounded memory.

    Counts (at least one node, feature and class; ids that fit int32), the
    CSR (:func:`check_csr_chunked`), labels in ``[-1, C)``, split ids in
    range, labelled, never repeated and in one split only; with
    ``features``, every feature finite too (a full read: :class:`DatasetWriter`
    checks what it wrote, loading does not).

    Args:
      folder: the dataset folder (for the messages).
      manifest: its :func:`read_manifest`.
      arrays: the opened arrays (memory maps), by file key.
      features: also check the features are finite.
      chunk: entries per step.

    Raises:
      FormatError: the first problem, naming the file and the field.
    """
    folder = Path(folder)
    files = {key: folder / manifest["files"][key]["file"] for key in _FILES}
    if "edge_features" in arrays:
        files["edge_features"] = folder / manifest["files"]["edge_features"]["file"]
    n, num_classes = manifest["num_nodes"], manifest["num_classes"]
    if n < 1:
        raise FormatError(folder / MANIFEST, "num_nodes", "must be >= 1: the dataset has no nodes")
    if n >= 2**31:
        raise FormatError(folder / MANIFEST, "num_nodes", f"{n} does not fit int32 node ids")
    if manifest["num_features"] < 1:
        raise FormatError(
            folder / MANIFEST,
            "num_features",
            f"must be >= 1, got {manifest['num_features']}: the nodes have no features",
        )
    if num_classes < 1:
        raise FormatError(folder / MANIFEST, "num_classes", f"must be >= 1, got {num_classes}")
    check_csr_chunked(
        arrays["indptr"],
        arrays["indices"],
        n,
        files=(files["indptr"], files["indices"]),
        chunk=chunk,
    )
    _check_labels(files["labels"], arrays["labels"], num_classes, chunk)
    for key in SPLITS:
        _check_split(files[key], key, arrays[key], arrays["labels"], n)
    check_disjoint_splits(
        {key: arrays[key] for key in SPLITS},
        error=lambda key, message: FormatError(files[key], key, message),
    )
    if features:
        _check_features(files["features"], arrays["features"], chunk)
        if "edge_features" in arrays:
            _check_features(files["edge_features"], arrays["edge_features"], chunk, "edge_features")


def verify_checksums(path, *, progress: bool = False) -> None:
    """Hashes every file of the dataset in ``path`` and compares with the manifest.

    Raises:
      FormatError: the first file whose sha256 differs (field ``"sha256"``).
    """
    from tqdm.auto import tqdm

    folder = Path(path)
    manifest = read_manifest(folder)
    keys = [*_FILES, *(k for k in _OPTIONAL_FILES if k in manifest["files"])]
    for key in tqdm(keys, disable=not progress, desc="sha256", leave=False):
        entry = manifest["files"][key]
        file = folder / entry["file"]
        if not file.exists():
            raise FormatError(file, key, "missing")
        try:
            check_regular_file(file)
        except NotRegularFileError as err:
            raise FormatError(file, key, f"not a regular file: it is {err.kind}") from None
        digest = sha256_file(file)
        if digest != entry["sha256"]:
            raise FormatError(
                file,
                "sha256",
                f"checksum mismatch: the file hashes to {digest}, the manifest says "
                f"{entry['sha256']} (corrupt or modified)",
            )


def load_csr(path) -> tuple[np.ndarray, np.ndarray]:
    """The memory-mapped ``(indptr int64 [N + 1], indices int32 [E])`` of a dataset folder,
    with dtypes and shapes checked against the manifest (not the contents)."""
    folder = Path(path)
    manifest = read_manifest(folder)
    arrays = _open_arrays(folder, manifest)
    return arrays["indptr"], arrays["indices"]


def expand_rows(indptr, num_edges: int, chunk: int = CHECK_CHUNK) -> np.ndarray:
    """int32 ``[E]`` row id of every CSR entry (the receivers), filled row chunk by row chunk."""
    n = int(indptr.shape[0]) - 1
    rows = np.empty(num_edges, np.int32)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        bounds = np.asarray(indptr[start : stop + 1])
        rows[bounds[0] : bounds[-1]] = np.repeat(
            np.arange(start, stop, dtype=np.int32), np.diff(bounds)
        )
    return rows


def physical_memory_bytes() -> int:
    """Physical host RAM in bytes."""
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


class ExpandedRows:
    """The receivers of a CSR, ``int32 [E]``, computed slice by slice and never whole.

    Stands in for :func:`expand_rows`'s array when it would not fit in RAM:
    it has the array's ``shape``, ``dtype``, ``ndim`` and ``len``, and
    ``rows[a:b]`` (or integer positions) computes those entries from
    ``indptr`` (a binary search per row boundary), so chunked code runs on
    it. Anything that reads it whole (``np.asarray``, ``jax.device_put``, a
    full-graph trainer, the device sampler) fails with one message naming
    the way out.

    Args:
      indptr: int64 ``[N + 1]`` row offsets (a memory map is fine).
      num_edges: ``E``.
      name: the dataset, for the error.
    """

    dtype = np.dtype(np.int32)
    ndim = 1

    def __init__(self, indptr, num_edges: int, name: str = "the graph") -> None:
        self.indptr = indptr
        self.shape = (int(num_edges),)
        self.name = name

    @property
    def size(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        """0: no entry is held (``indptr`` is the caller's)."""
        return 0

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ExpandedRows(num_edges={self.shape[0]}, not in memory)"

    def degrees(self) -> np.ndarray:
        """int64 ``[N]`` in-degrees (row lengths)."""
        return np.diff(np.asarray(self.indptr))

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                return self[np.arange(start, stop, step)]
            if stop <= start:
                return np.zeros(0, np.int32)
            first = int(np.searchsorted(self.indptr, start, side="right")) - 1
            last = int(np.searchsorted(self.indptr, stop - 1, side="right")) - 1
            bounds = np.clip(np.asarray(self.indptr[first : last + 2], np.int64), start, stop)
            return np.repeat(np.arange(first, last + 1, dtype=np.int32), np.diff(bounds))
        positions = np.asarray(key)
        if not np.issubdtype(positions.dtype, np.integer):
            raise TypeError(f"ExpandedRows takes slices or integer positions, got {key!r}")
        positions = np.where(positions < 0, positions + self.shape[0], positions)
        if positions.size and (positions.min() < 0 or positions.max() >= self.shape[0]):
            raise IndexError(f"positions out of range [0, {self.shape[0]})")
        rows = np.searchsorted(self.indptr, positions, side="right") - 1
        return rows.astype(np.int32)

    def __array__(self, dtype=None, copy=None):
        gigabytes = 4 * self.shape[0] / 1e9
        raise ValueError(
            f"the receivers of {self.name} ({self.shape[0]:,} stored edges, {gigabytes:.1f} GB "
            f"expanded) are not in RAM: they take more than {EXPAND_FRACTION:.3g} of its "
            f"{physical_memory_bytes() / 1e9:.1f} GB, and this step needs the whole array "
            "(full-batch training, device sampling, reordering); train a sampled model with "
            "the graph sampled on the host (--graph-on host)"
        )


SWAP_RETRIES = 5
"""How often :func:`read_unswapped` reads a folder again that another process replaced."""


def _identity(folder) -> tuple[int, int] | None:
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def read_unswapped(folder, read: Callable[[], Any]) -> Any:
    """``read()`` of a dataset folder that another process may replace meanwhile.

    A writer with ``overwrite`` swaps the whole folder in one step
    (:func:`~sparsegcn.files.replace_folder`), but a reader opens its files one
    by one, by path: a swap between two opens would mix the two datasets (or
    fail on a mix that looks corrupt). The folder's identity (device, inode) is
    read before and after: the files opened in between, memory maps included,
    all belong to that folder when it is unchanged; otherwise, or when ``read``
    failed while it changed, the folder is read again (up to
    :data:`SWAP_RETRIES` times).

    Raises:
      FormatError: the folder changed during every try; whatever ``read`` raises
        while the folder stays the same.
    """
    for _ in range(SWAP_RETRIES):
        before = _identity(folder)
        try:
            result = read()
        except (ValueError, OSError):
            if before is not None and _identity(folder) != before:
                continue  # swapped while it was read: the error may be the mix's
            raise
        if _identity(folder) == before:
            return result
    raise FormatError(
        Path(folder),
        "folder",
        f"was replaced by another process during each of {SWAP_RETRIES} reads; read it "
        "again once its writer is done",
    )


def unswapped(load: Callable[..., Any]) -> Callable[..., Any]:
    """``load(path, ...)`` run through :func:`read_unswapped` on ``path``: a loader of
    a dataset folder that another process may replace meanwhile."""

    @functools.wraps(load)
    def wrapper(path, *args, **kwargs):
        return read_unswapped(path, lambda: load(path, *args, **kwargs))

    return wrapper


@unswapped
def load_ondisk(
    path,
    *,
    verify: bool = False,
    progress: bool = False,
    expand_limit: int | None = None,
) -> Dataset:
    """Memory-maps the on-disk dataset in folder ``path`` (format: module docstring).

    Args:
      path: the dataset folder.
      verify: also hash every file against the manifest's sha256 (reads
        every byte; see the module docstring for why it is optional).
      progress: progress bar while verifying.
      expand_limit: bytes of receivers (4 per stored edge) expanded into
        RAM at most; default :data:`EXPAND_FRACTION` of physical RAM. Above
        it the graph's receivers are an :class:`ExpandedRows`.

    Returns:
      A :class:`Dataset` whose features, labels, splits and graph senders
      are read-only memory maps (receivers are expanded into RAM, or lazy).

    Raises:
      FormatError: (a ``ValueError``) the first missing, malformed or
        inconsistent file, naming the file and the field.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FormatError(folder, "folder", "does not exist or is not a folder")
    manifest = read_manifest(folder)
    if verify:
        verify_checksums(folder, progress=progress)
    arrays = _open_arrays(folder, manifest)
    check_contents(folder, manifest, arrays)
    n, num_classes = manifest["num_nodes"], manifest["num_classes"]
    e = manifest["num_stored_edges"]
    limit = EXPAND_FRACTION * physical_memory_bytes() if expand_limit is None else expand_limit
    receivers: np.ndarray | ExpandedRows
    if 4 * e <= limit:
        receivers = expand_rows(arrays["indptr"], e)
    else:
        receivers = ExpandedRows(arrays["indptr"], e, name=str(folder))
    # The chunked checks above are the Graph's (ids in range, edges sorted by
    # (receiver, sender)); its constructor would repeat them with full-length
    # temporaries (three bool arrays of E), so the checked leaves are unflattened.
    graph = Graph.tree_unflatten(
        (n, True), (arrays["indices"], receivers, None, arrays.get("edge_features"))
    )
    info = dict(manifest.get("info", {}), folder=str(folder))
    return Dataset(
        name=manifest["name"],
        graph=graph,
        features=arrays["features"],
        labels=arrays["labels"],
        split={key: arrays[key] for key in SPLITS},
        num_classes=num_classes,
        metric=manifest["metric"],
        num_edges=manifest["num_edges"],
        info=info,
    )


__all__ = [
    "CHECK_CHUNK",
    "EXPAND_FRACTION",
    "FEATURE_DTYPES",
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "DatasetWriter",
    "ExpandedRows",
    "FormatError",
    "check_contents",
    "check_csr_chunked",
    "expand_rows",
    "is_multilabel_ondisk",
    "is_ondisk",
    "load_csr",
    "load_ondisk",
    "physical_memory_bytes",
    "read_format_manifest",
    "read_manifest",
    "read_unswapped",
    "save",
    "sha256_file",
    "unswapped",
    "verify_checksums",
]

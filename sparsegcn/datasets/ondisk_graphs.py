"""The on-disk format of graph-level datasets: ``.npy`` files that load memory-mapped.

:func:`save_graphs` writes a :class:`~sparsegcn.datasets.graphs.GraphDataset`
once (ogbg-molpcba's 437,929 molecules, or their synthetic twin); later runs
:func:`load_graphs_ondisk` it, which memory-maps every array: no Python
object per graph is ever made, and only the pages a run touches are read.
``load_graphs(PATH)`` (so ``sparsegcn info --dataset ./folder``) reads one.

Graph folder format (version 1)
-------------------------------

A folder holding (``G`` graphs, ``n`` nodes, ``E`` directed edges):

=======================  ============================  ==========================================
file                     dtype, shape                  content
=======================  ============================  ==========================================
``senders.npy``          int32 ``[E]``                 global node ids, edges graph by graph
``receivers.npy``        int32 ``[E]``
``node_ptr.npy``         int64 ``[G + 1]``             node offsets: graph ``g`` owns nodes
                                                       ``node_ptr[g] .. node_ptr[g+1] - 1``
``edge_ptr.npy``         int64 ``[G + 1]``             edge offsets, likewise
``features.npy``         float32 or int32 ``[n, F]``   node features (int32: categorical
                                                       columns, vocabularies in the manifest)
``labels.npy``           int32 ``[G]`` or float32      class ids, or 0/1 per task with NaN
                         ``[G, T]``                    where missing, or real targets with
                                                       NaN where missing (a regression
                                                       ``metric``: rmse)
``classes.npy``          integer or string ``[C]``     what each class index stands for
                                                       (``C`` = ``num_classes``: the task
                                                       indices for ``[G, T]`` labels)
``edge_features.npy``    float32 or int32 ``[E, D]``   optional
``targets.npy``          float32 ``[G, T]``            optional regression targets
``train.npy``,           int64 ``[k]``                 optional official split (graph ids)
``valid.npy``,
``test.npy``
``manifest.json``        JSON                          see below
=======================  ============================  ==========================================

The manifest is an object with ``format`` (``"sparsegcn-graphs"``),
``version`` (1), ``name`` (``ogbg-*`` names keep OGB's evaluator),
``num_graphs``, ``num_nodes``, ``num_edges``, ``num_classes``, ``metric``,
``feature_dims`` and ``edge_feature_dims`` (lists or ``null``), ``info``,
and ``files``: for each array above that is present,
``{"file", "dtype", "shape", "bytes", "sha256"}``.

Checks on loading
-----------------

Loading checks, in chunks of :data:`CHECK_CHUNK` entries (bounded memory):
the manifest's keys; each file's size in bytes, dtype and shape against the
manifest (a truncated file is caught here, before it is mapped); the
offsets (start at 0, never decrease, end at ``n`` and ``E``); every edge
inside its own graph; labels (class ids in range, binary values 0, 1 or
NaN, regression targets finite or NaN; so are ``targets.npy``'s); one
class entry per class;
categorical features inside their vocabularies, float ones finite (a NaN
would otherwise surface as a diverged training); split ids in range,
never repeated and in one split only. The first problem raises one
:class:`~sparsegcn.datasets.ondisk.FormatError` naming the file and the
field. ``verify=True`` also compares every file's sha256 (reads every byte).

:func:`save_graphs` writes into a temporary folder beside the target, runs
the same checks there, and only then renames it into place; it replaces an
existing folder only with ``overwrite=True`` and only if that folder is a
dataset of this format (its manifest and the files it lists, nothing else).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sparsegcn.datasets.base import check_disjoint_splits
from sparsegcn.datasets.graph_dataset import REGRESSION_METRICS, GraphDataset
from sparsegcn.datasets.ondisk import (
    FormatError,
    open_listed_file,
    read_format_manifest,
    unswapped,
)
from sparsegcn.datasets.ondisk import _check_features as check_finite_features
from sparsegcn.datasets.ondisk import _check_target as check_target
from sparsegcn.files import (
    check_not_inputs,
    discard_temp_folder,
    read_json,
    release_pages,
    replace_folder,
    save_npy_atomic,
    sha256_file,
    temp_folder,
    write_json_atomic,
)

FORMAT = "sparsegcn-graphs"
VERSION = 1
MANIFEST = "manifest.json"
CHECK_CHUNK = 1 << 22
"""Entries per step of the load-time checks."""

SPLITS = ("train", "valid", "test")
_REQUIRED = ("senders", "receivers", "node_ptr", "edge_ptr", "features", "labels", "classes")
_OPTIONAL = ("edge_features", "targets", *SPLITS)
_COUNTS = ("num_graphs", "num_nodes", "num_edges", "num_classes")


def is_graph_ondisk(path) -> bool:
    """Whether ``path`` is a folder whose manifest names this format."""
    try:
        manifest = read_json(Path(path) / MANIFEST)
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def _arrays(dataset: GraphDataset) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {
        "senders": np.asarray(dataset.senders, np.int32),
        "receivers": np.asarray(dataset.receivers, np.int32),
        "node_ptr": np.asarray(dataset.node_ptr, np.int64),
        "edge_ptr": np.asarray(dataset.edge_ptr, np.int64),
        "features": np.asarray(dataset.features),
        "labels": np.asarray(dataset.labels),
        "classes": np.asarray(dataset.classes),
    }
    if dataset.edge_features is not None:
        arrays["edge_features"] = np.asarray(dataset.edge_features)
    if dataset.targets is not None:
        arrays["targets"] = np.asarray(dataset.targets, np.float32)
    if dataset.split is not None:
        for key in SPLITS:
            arrays[key] = np.asarray(dataset.split[key], np.int64)
    return arrays


def written_key(key: str) -> bool:
    """Whether a folder of this format can hold ``<key>.npy`` (what ``overwrite`` replaces)."""
    return key in (*_REQUIRED, *_OPTIONAL)


def _check_target(path: Path, overwrite: bool) -> None:
    check_target(path, overwrite, FORMAT, written_key)


def save_graphs(dataset: GraphDataset, path, *, overwrite: bool = False) -> Path:
    """Writes ``dataset`` to folder ``path`` in the on-disk format (module docstring).

    Args:
      dataset: any :class:`GraphDataset` (memory-mapped arrays are copied
        file to file, never whole into RAM by this function).
      path: the folder to write.
      overwrite: replace an existing dataset folder of this format.

    Returns:
      ``Path(path)``.

    Raises:
      TypeError: ``dataset`` is not a :class:`GraphDataset`, or an array holds objects.
      ValueError: ``path`` is a file, or a non-empty folder (without
        ``overwrite``, or one that is not a dataset of this format), or the
        folder ``dataset`` was read from (``info["folder"]``) or lies in it;
        :class:`FormatError` when the written data fail a load-time check
        (nothing is written then).
    """
    if not isinstance(dataset, GraphDataset):
        raise TypeError(f"dataset must be a GraphDataset, got {type(dataset).__name__}")
    path = Path(path)
    source = dataset.info.get("folder")  # a loaded folder: never written into or over
    check_not_inputs({"path": path}, [("the dataset's own folder", source)])
    _check_target(path, overwrite)
    arrays = _arrays(dataset)
    tmp = temp_folder(path.parent, path.name)
    try:
        files = {}
        for key, array in arrays.items():
            # Errors name the folder asked for, not the temporary one.
            file = save_npy_atomic(tmp / f"{key}.npy", array, name=f"{path} ({key}.npy)")
            files[key] = {
                "file": file.name,
                "dtype": str(array.dtype),
                "shape": list(array.shape),
                "bytes": file.stat().st_size,
                "sha256": sha256_file(file),
            }
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "name": dataset.name,
            "num_graphs": dataset.num_graphs,
            "num_nodes": dataset.num_nodes,
            "num_edges": dataset.num_edges,
            "num_classes": int(dataset.num_classes),
            "metric": dataset.metric,
            "feature_dims": None if dataset.feature_dims is None else list(dataset.feature_dims),
            "edge_feature_dims": (
                None if dataset.edge_feature_dims is None else list(dataset.edge_feature_dims)
            ),
            "info": {k: v for k, v in dataset.info.items() if isinstance(v, (str, int, float))},
            "files": files,
        }
        write_json_atomic(tmp / MANIFEST, manifest, name=f"{path} ({MANIFEST})")
        try:
            load_graphs_ondisk(tmp)
        except FormatError as err:
            raise FormatError(
                path / err.file.name, err.field, f"{err.message} (so nothing was written)"
            ) from None
        _check_target(path, overwrite)
        replace_folder(tmp, path)
    except BaseException:
        discard_temp_folder(tmp)
        raise
    return path


def read_graph_manifest(path) -> dict:
    """The validated manifest of the dataset in folder ``path``.

    Raises:
      FormatError: missing or unreadable, another format or version, a
        missing or ill-typed key (naming it).
    """
    file = Path(path) / MANIFEST
    manifest = read_format_manifest(
        file, FORMAT, VERSION, _COUNTS, what="an on-disk graph dataset folder"
    )
    for key in ("name", "metric"):
        if not isinstance(manifest.get(key), str):
            raise FormatError(file, key, f"must be a string, got {manifest.get(key)!r}")
    for key in ("feature_dims", "edge_feature_dims"):
        dims = manifest.get(key)
        if dims is not None and not (
            isinstance(dims, list) and all(isinstance(d, int) and d > 0 for d in dims)
        ):
            raise FormatError(
                file, key, f"must be null or a list of positive integers, got {dims!r}"
            )
    if not isinstance(manifest.get("info", {}), dict):
        raise FormatError(file, "info", "must be an object")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise FormatError(file, "files", f"must be an object, got {files!r}")
    for key in _REQUIRED:
        if key not in files:
            raise FormatError(file, f"files.{key}", "missing")
    split = [key for key in SPLITS if key in files]
    if split and len(split) != len(SPLITS):
        raise FormatError(file, "files", f"lists the split files {split}: all three or none")
    for key, entry in files.items():
        if key not in _REQUIRED + _OPTIONAL:
            raise FormatError(file, f"files.{key}", "is not a file of this format")
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("file"), str)
            and Path(entry["file"]).name == entry["file"]
            and isinstance(entry.get("dtype"), str)
            and isinstance(entry.get("shape"), list)
            and isinstance(entry.get("bytes"), int)
            and isinstance(entry.get("sha256"), str)
        ):
            raise FormatError(
                file,
                f"files.{key}",
                f"must be {{file (a name), dtype, shape, bytes, sha256}}, got {entry!r}",
            )
    return manifest


def _open(folder: Path, manifest: dict) -> dict[str, np.ndarray]:
    """Every listed array, memory-mapped, its size, dtype and shape checked."""
    arrays = {}
    for key, entry in manifest["files"].items():
        array = open_listed_file(folder, key, entry)
        arrays[key] = array
    return arrays


def _expect(file, key: str, array, dtypes: tuple[str, ...], shape: tuple) -> None:
    if str(array.dtype) not in dtypes:
        raise FormatError(file, "dtype", f"{key} must be one of {dtypes}, got {array.dtype}")
    if len(shape) != array.ndim or any(
        s is not None and s != a for s, a in zip(shape, array.shape, strict=True)
    ):
        shown = ["*" if s is None else s for s in shape]
        raise FormatError(file, "shape", f"{key} must be {shown}, got {list(array.shape)}")


def _check_classes(file, classes, num_classes: int) -> None:
    """``classes`` must name each of the ``num_classes`` classes (or tasks) once: a
    shorter or 2-D array, or float values, would be shown as the wrong labels."""
    if classes.dtype.kind not in "iuU":
        raise FormatError(
            file,
            "dtype",
            f"classes must be integers or strings (the label each class index stands for), "
            f"got {classes.dtype}",
        )
    if classes.shape != (num_classes,):
        raise FormatError(
            file,
            "shape",
            f"classes must be [num_classes] = [{num_classes}], one entry per class or task, "
            f"got {list(classes.shape)}",
        )


def _check_ptr(file, key: str, ptr, total: int) -> None:
    if int(ptr[0]) != 0:
        raise FormatError(file, f"{key}[0]", f"must be 0, got {int(ptr[0])}")
    if int(ptr[-1]) != total:
        raise FormatError(file, f"{key}[-1]", f"must be {total}, got {int(ptr[-1])}")
    steps = np.diff(np.asarray(ptr))
    if (steps < 0).any():
        i = int(np.flatnonzero(steps < 0)[0]) + 1
        raise FormatError(
            file, f"{key}[{i}]", f"offsets decrease: {int(ptr[i])} < {int(ptr[i - 1])}"
        )


def _check_edges(files, arrays, chunk: int) -> None:
    node_ptr, edge_ptr = np.asarray(arrays["node_ptr"]), np.asarray(arrays["edge_ptr"])
    for key in ("senders", "receivers"):
        ids = arrays[key]
        for start in range(0, ids.shape[0], chunk):
            part = np.asarray(ids[start : start + chunk], np.int64)
            graph = np.searchsorted(edge_ptr, np.arange(start, start + part.shape[0]), "right") - 1
            bad = (part < node_ptr[graph]) | (part >= node_ptr[graph + 1])
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                g = int(graph[i])
                raise FormatError(
                    files[key],
                    f"{key}[{start + i}]",
                    f"node {int(part[i])} is outside its graph {g}'s nodes "
                    f"[{int(node_ptr[g])}, {int(node_ptr[g + 1])})",
                )
            release_pages(ids)


def _check_vocab(file, key: str, values, dims, chunk: int) -> None:
    if dims is None:
        return
    if values.ndim != 2 or values.shape[1] != len(dims):
        raise FormatError(file, "shape", f"{key} needs {len(dims)} columns for its vocabularies")
    limit = np.asarray(dims)
    rows = max(1, chunk // max(1, len(dims)))
    for start in range(0, values.shape[0], rows):
        part = np.asarray(values[start : start + rows])
        bad = (part < 0) | (part >= limit)
        if bad.any():
            i, j = (int(k[0]) for k in np.nonzero(bad))
            raise FormatError(
                file,
                f"{key}[{start + i}, {j}]",
                f"{int(part[i, j])} is outside the vocabulary [0, {dims[j]})",
            )
        release_pages(values)


def _check_values(file: Path, key: str, values, chunk: int, what: str, bad_of) -> None:
    """Raises naming the first entry of ``values`` (any shape, read ``chunk`` entries at a
    time) where ``bad_of`` holds: ``<key>[i, j]: <value> is <what>``."""
    flat = values.reshape(-1)
    for start in range(0, flat.shape[0], chunk):
        bad = bad_of(np.asarray(flat[start : start + chunk]))
        if bad.any():
            i = start + int(np.flatnonzero(bad)[0])
            index = list(map(int, np.unravel_index(i, values.shape)))
            raise FormatError(file, f"{key}{index}", f"{float(flat[i]):g} is {what}")


def _check_contents(folder: Path, manifest: dict, arrays: dict, chunk: int) -> None:
    files = {key: folder / entry["file"] for key, entry in manifest["files"].items()}
    g, n, e = manifest["num_graphs"], manifest["num_nodes"], manifest["num_edges"]
    c = manifest["num_classes"]
    int_ids = ("int32",)
    _expect(files["senders"], "senders", arrays["senders"], int_ids, (e,))
    _expect(files["receivers"], "receivers", arrays["receivers"], int_ids, (e,))
    _expect(files["node_ptr"], "node_ptr", arrays["node_ptr"], ("int64",), (g + 1,))
    _expect(files["edge_ptr"], "edge_ptr", arrays["edge_ptr"], ("int64",), (g + 1,))
    dims, edge_dims = manifest["feature_dims"], manifest["edge_feature_dims"]
    kind = ("int32",) if dims is not None else ("float32",)
    _expect(files["features"], "features", arrays["features"], kind, (n, None))
    labels = arrays["labels"]
    if labels.ndim == 1:
        _expect(files["labels"], "labels", labels, ("int32",), (g,))
    else:
        _expect(files["labels"], "labels", labels, ("float32",), (g, c))
    if "edge_features" in arrays:
        kind = ("int32",) if edge_dims is not None else ("float32",)
        _expect(files["edge_features"], "edge_features", arrays["edge_features"], kind, (e, None))
    if "targets" in arrays:
        _expect(files["targets"], "targets", arrays["targets"], ("float32",), (g, None))
    _check_classes(files["classes"], arrays["classes"], c)
    if "train" in arrays:
        for key in SPLITS:
            _expect(files[key], key, arrays[key], ("int64",), (None,))
    if n >= 2**31:
        raise FormatError(folder / MANIFEST, "num_nodes", f"{n} does not fit int32 node ids")
    _check_ptr(files["node_ptr"], "node_ptr", arrays["node_ptr"], n)
    _check_ptr(files["edge_ptr"], "edge_ptr", arrays["edge_ptr"], e)
    _check_edges(files, arrays, chunk)
    _check_vocab(files["features"], "features", arrays["features"], dims, chunk)
    if dims is None:
        check_finite_features(files["features"], arrays["features"], chunk)
    if "edge_features" in arrays:
        _check_vocab(
            files["edge_features"], "edge_features", arrays["edge_features"], edge_dims, chunk
        )
        if edge_dims is None:
            check_finite_features(
                files["edge_features"], arrays["edge_features"], chunk, "edge_features"
            )
    if labels.ndim == 1:
        _check_values(files["labels"], "labels", labels, chunk, f"outside [0, {c})",
                      lambda part: (part < 0) | (part >= c))  # fmt: skip
    elif manifest["metric"] in REGRESSION_METRICS:
        _check_values(files["labels"], "labels", labels, chunk,
                      "not a finite regression target or NaN (missing)", np.isinf)  # fmt: skip
    else:
        _check_values(files["labels"], "labels", labels, chunk, "not 0, 1 or NaN (missing)",
                      lambda part: ~(np.isnan(part) | (part == 0) | (part == 1)))  # fmt: skip
    if "targets" in arrays:
        _check_values(files["targets"], "targets", arrays["targets"], chunk,
                      "not a finite target or NaN (missing)", np.isinf)  # fmt: skip
    if "train" in arrays:
        for key in SPLITS:
            ids = np.asarray(arrays[key])
            bad = (ids < 0) | (ids >= g)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise FormatError(
                    files[key], f"{key}[{i}]", f"graph id {int(ids[i])} is outside [0, {g})"
                )
        check_disjoint_splits(
            {key: arrays[key] for key in SPLITS},
            error=lambda key, message: FormatError(files[key], key, message),
        )


def verify_graph_checksums(path) -> None:
    """Hashes every file of the dataset in ``path`` against the manifest.

    Raises:
      FormatError: the first file whose sha256 differs (field ``"sha256"``).
    """
    folder = Path(path)
    manifest = read_graph_manifest(folder)
    for entry in manifest["files"].values():
        file = folder / entry["file"]
        digest = sha256_file(file)
        if digest != entry["sha256"]:
            raise FormatError(
                file,
                "sha256",
                f"checksum mismatch: the file hashes to {digest}, the manifest says "
                f"{entry['sha256']} (corrupt or modified)",
            )


@unswapped
def load_graphs_ondisk(path, *, verify: bool = False, chunk: int = CHECK_CHUNK) -> GraphDataset:
    """Memory-maps the graph dataset in folder ``path`` (format: module docstring).

    Args:
      path: the folder.
      verify: also compare every file's sha256 with the manifest.
      chunk: entries per step of the checks.

    Returns:
      A :class:`GraphDataset` whose arrays are read-only memory maps.

    Raises:
      FormatError: (a ``ValueError``) the first missing, truncated,
        malformed or inconsistent file, naming the file and the field.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FormatError(folder, "folder", "does not exist or is not a folder")
    manifest = read_graph_manifest(folder)
    arrays = _open(folder, manifest)
    if verify:
        verify_graph_checksums(folder)
    _check_contents(folder, manifest, arrays, chunk)
    split = {key: arrays[key] for key in SPLITS} if "train" in arrays else None
    dims, edge_dims = manifest["feature_dims"], manifest["edge_feature_dims"]
    return GraphDataset(
        name=manifest["name"],
        senders=arrays["senders"],
        receivers=arrays["receivers"],
        node_ptr=arrays["node_ptr"],
        edge_ptr=arrays["edge_ptr"],
        features=arrays["features"],
        labels=arrays["labels"],
        num_classes=manifest["num_classes"],
        classes=arrays["classes"],
        edge_features=arrays.get("edge_features"),
        targets=arrays.get("targets"),
        info=dict(manifest.get("info") or {}, folder=str(folder)),
        metric=manifest["metric"],
        split=split,
        feature_dims=None if dims is None else tuple(dims),
        edge_feature_dims=None if edge_dims is None else tuple(edge_dims),
    )


__all__ = [
    "CHECK_CHUNK",
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "is_graph_ondisk",
    "load_graphs_ondisk",
    "read_graph_manifest",
    "save_graphs",
    "verify_graph_checksums",
]

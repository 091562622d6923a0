"""The on-disk format of heterogeneous datasets (ogbn-mag): ``.npy`` files that load memory-mapped.

:func:`save_hetero` writes a :class:`~sparsegcn.datasets.mag.HeteroDataset`
once (``synthetic:mag`` takes tens of seconds to generate, ``ogbn-mag``'s
raw CSVs minutes to parse); later runs :func:`load_hetero_ondisk` it, which
memory-maps every array: only the pages a run touches are read, and no
Python object is made per node or edge. ``sparsegcn train --dataset DIR``
and ``sparsegcn info --dataset DIR`` route such a folder to the ``hetero``
task (:func:`is_hetero_ondisk`).

Hetero folder format (version 1)
--------------------------------

A folder holding (``N_t`` nodes of type ``t``, ``E_r`` edges of relation
``r = (src, rel, dst)``, written ``<r>`` = ``src___rel___dst`` in file names):

=========================  ===============================  =======================================
file                       dtype, shape                     content
=========================  ===============================  =======================================
``senders.<r>.npy``        int32 ``[E_r]``                  source ids in ``[0, N_src)``, edges in
                                                            their stored order (duplicates kept)
``receivers.<r>.npy``      int32 ``[E_r]``                  target ids in ``[0, N_dst)``
``features.<type>.npy``    float32 or float16 ``[N_t, F]``  a featured type's features (ogbn-mag:
                                                            ``paper`` only)
``labels.npy``             int64 ``[N_target]``             the target type's class ids in
                                                            ``[0, C)``, ``-1`` for unlabelled
``train.npy``              int64 ``[k]``                    target-node ids of the training split
``valid.npy``              int64 ``[k]``                    ... of the validation split
``test.npy``               int64 ``[k]``                    ... of the test split (ogbn-mag: by year)
``manifest.json``          JSON                             see below
=========================  ===============================  =======================================

The relations are stored as raw edge lists, as the dataset holds them
(no reverse relations: training adds them), so a saved dataset loads
back array for array and trains exactly as the one it was saved from.
Node types and relation names must be file-name safe: a letter or digit
then letters, digits, ``_`` and ``-``.

The manifest is an object with ``format`` (``"sparsegcn-hetero"``),
``version`` (1), ``name`` (``ogbn-mag`` keeps OGB's evaluator),
``target`` (the labelled node type), ``num_classes``, ``metric``,
``node_types`` (a list, in the graph's order, of ``{"type", "num_nodes"}``),
``relations`` (a list, in the graph's order, of ``{"edge_type": [src, rel,
dst], "num_edges"}``), ``features`` (a list of ``{"type",
"num_features"}`` for the featured types), ``info`` (free-form provenance)
and ``files``: for each array above, keyed by its name without ``.npy``,
``{"file", "dtype", "shape", "bytes", "sha256"}``. Lists keep the order of
node types and relations, which fixes the model's parameter layout.

Checks on loading a heterogeneous folder
----------------------------------------

Loading checks, in chunks of :data:`CHECK_CHUNK` entries (bounded memory):
the manifest's keys and that it lists exactly the files its node types,
relations and features call for (every node type with at least one node,
``metric`` ``"acc"``, the only one the hetero task scores, and for
``ogbn-mag`` its 349 classes); each file's size in bytes (a truncated
file is caught before it is mapped), dtype and shape against the manifest
and the counts; every sender and receiver id inside its type's range;
labels in ``[-1, C)``; split ids in range, labelled, never repeated and in
one split only. The first problem raises one
:class:`~sparsegcn.datasets.ondisk.FormatError` naming the file and the
field. Features are not read on loading; training checks them
(the hetero task's ``prepare_hetero``). ``verify=True``
(``sparsegcn info --verify``) also compares every
file's sha256 with the manifest (reads every byte: about 1 GB at ogbn-mag
size).

:func:`save_hetero` writes into a temporary folder beside the target, runs
the same checks there (and the features' finiteness), and only then renames
it into place; it replaces an existing folder only with ``overwrite=True``
and only if that folder is a dataset of this format (its manifest and the
files it lists, nothing else).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from sparsegcn.datasets.base import SPLITS, check_disjoint_splits
from sparsegcn.datasets.hetero_dataset import MAG_CLASSES, HeteroDataset
from sparsegcn.datasets.ondisk import (
    FEATURE_DTYPES,
    FormatError,
    _check_features,
    open_listed_file,
    read_format_manifest,
    unswapped,
)
from sparsegcn.datasets.ondisk import _check_target as check_target
from sparsegcn.files import (
    NotRegularFileError,
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
from sparsegcn.hetero import EdgeType, HeteroGraph
from sparsegcn.views import Bipartite

FORMAT = "sparsegcn-hetero"
VERSION = 1
MANIFEST = "manifest.json"
CHECK_CHUNK = 1 << 22
"""Entries per step of the load-time checks."""

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")
_INT32_MAX = int(np.iinfo(np.int32).max)


def is_hetero_ondisk(path) -> bool:
    """Whether ``path`` is a folder whose manifest names this format (the ``hetero``
    task's folders)."""
    try:
        manifest = read_json(Path(os.path.expanduser(path)) / MANIFEST)
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def relation_name(edge_type: EdgeType) -> str:
    """``src___rel___dst``: how file names (and reports) spell an edge type."""
    return "___".join(edge_type)


def _file_keys(edge_types, featured) -> list[str]:
    """Every file key a manifest with these relations and featured types lists."""
    keys = []
    for edge_type in edge_types:
        name = relation_name(edge_type)
        keys += [f"senders.{name}", f"receivers.{name}"]
    keys += [f"features.{t}" for t in featured]
    return [*keys, "labels", *SPLITS]


def _safe_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not _SAFE.match(name):
        raise ValueError(
            f"{what} {name!r} cannot name a file: the on-disk hetero format takes a letter or "
            "digit followed by letters, digits, '_' and '-'"
        )
    return name


def _arrays(dataset: HeteroDataset) -> dict[str, np.ndarray]:
    """The files' arrays by key, refusing what the format does not store."""
    graph = dataset.graph
    for t in graph.num_nodes:
        _safe_name("node type", t)
    for edge_type, view in graph.relations.items():
        _safe_name("relation", edge_type[1])
        if view.weights is not None:
            raise ValueError(
                f"the on-disk hetero format stores no edge weights, but relation {edge_type} "
                "has them"
            )
    names = [relation_name(k) for k in graph.edge_types]
    if len(set(names)) != len(names):
        raise ValueError(f"edge types {list(graph.edge_types)} give the same file name twice")
    arrays: dict[str, np.ndarray] = {}
    for edge_type, view in graph.relations.items():
        name = relation_name(edge_type)
        arrays[f"senders.{name}"] = np.asarray(view.senders, np.int32)
        arrays[f"receivers.{name}"] = np.asarray(view.receivers, np.int32)
    for t, x in dataset.features.items():
        x = np.asarray(x)
        arrays[f"features.{t}"] = x if x.dtype == np.float16 else np.asarray(x, np.float32)
    arrays["labels"] = np.asarray(dataset.labels, np.int64)
    for key in SPLITS:
        arrays[key] = np.asarray(dataset.split[key], np.int64)
    return arrays


def _jsonable(info) -> dict:
    import json

    return json.loads(json.dumps(dict(info or {}), default=str))


def written_key(key: str) -> bool:
    """Whether a folder of this format can hold ``<key>.npy`` (what ``overwrite`` replaces):
    the labels, the splits, and ``senders.``/``receivers.``/``features.`` followed by a
    relation's or a node type's name."""
    kind, _, name = key.partition(".")
    if kind in ("senders", "receivers", "features"):
        return bool(_SAFE.match(name))
    return key in ("labels", *SPLITS)


def save_hetero(dataset: HeteroDataset, path, *, overwrite: bool = False) -> Path:
    """Writes ``dataset`` to folder ``path`` in the on-disk hetero format (module docstring).

    Args:
      dataset: a :class:`~sparsegcn.datasets.mag.HeteroDataset` (memory-mapped
        arrays are copied file to file, never whole into RAM by this function).
      path: the folder to write.
      overwrite: replace an existing dataset folder of this format.

    The dataset's ``info`` (provenance: generator, scale, seed) goes into the
    manifest, values that are not JSON as strings, without ``folder``
    (loading sets it to the folder read).

    Returns:
      ``Path(path)``.

    Raises:
      TypeError: ``dataset`` is not a :class:`HeteroDataset`.
      ValueError: ``path`` is a file, or a non-empty folder (without
        ``overwrite``, or one that is not a dataset of this format), or the
        folder ``dataset`` was loaded from (or lies in it); a node type or
        relation that cannot name a file; weighted relations;
        :class:`FormatError` when the written data fail a check (non-finite
        features included; nothing is written then).
    """
    if not isinstance(dataset, HeteroDataset):
        raise TypeError(f"dataset must be a HeteroDataset, got {type(dataset).__name__}")
    path = Path(path)
    source = dataset.info.get("folder")  # a loaded folder: never written into or over
    check_not_inputs({"path": path}, [("the dataset's own folder", source)])
    check_target(path, overwrite, FORMAT, written_key)
    arrays = _arrays(dataset)
    graph = dataset.graph
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
        del arrays
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "name": dataset.name,
            "target": dataset.target,
            "num_classes": int(dataset.num_classes),
            "metric": dataset.metric,
            "node_types": [{"type": t, "num_nodes": n} for t, n in graph.num_nodes.items()],
            "relations": [
                {"edge_type": list(k), "num_edges": e} for k, e in graph.num_edges.items()
            ],
            "features": [
                {"type": t, "num_features": int(x.shape[1])} for t, x in dataset.features.items()
            ],
            "info": _jsonable({k: v for k, v in dataset.info.items() if k != "folder"}),
            "files": files,
        }
        write_json_atomic(tmp / MANIFEST, manifest, name=f"{path} ({MANIFEST})")
        try:
            loaded = load_hetero_ondisk(tmp)
            for t, x in loaded.features.items():
                _check_features(tmp / f"features.{t}.npy", x, CHECK_CHUNK, f"features.{t}")
            del loaded
        except FormatError as err:
            raise FormatError(
                path / err.file.name, err.field, f"{err.message} (so nothing was written)"
            ) from None
        check_target(path, overwrite, FORMAT, written_key)
        replace_folder(tmp, path)
    except BaseException:
        discard_temp_folder(tmp)
        raise
    return path


def _entry_list(file: Path, manifest: dict, key: str, fields: dict) -> list[dict]:
    """Manifest list ``key`` of objects with exactly ``fields`` (``{name: check}``)."""
    items = manifest.get(key)
    if not isinstance(items, list):
        raise FormatError(file, key, f"must be a list, got {items!r}")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != set(fields):
            raise FormatError(
                file, f"{key}[{i}]", f"must be an object with keys {sorted(fields)}, got {item!r}"
            )
        for name, check in fields.items():
            problem = check(item[name])
            if problem:
                raise FormatError(file, f"{key}[{i}].{name}", f"{problem}, got {item[name]!r}")
    return items


def _count_problem(value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return "must be a non-negative integer"
    if value > _INT32_MAX:
        return "does not fit int32 ids"
    return None


def _name_problem(value) -> str | None:
    if not isinstance(value, str) or not _SAFE.match(value):
        return "must be a file-name safe string (letters, digits, '_', '-')"
    return None


def _triple_problem(value) -> str | None:
    if not (isinstance(value, list) and len(value) == 3) or any(_name_problem(v) for v in value):
        return "must be [src, relation, dst] of file-name safe strings"
    return None


def read_hetero_manifest(path) -> dict:
    """The validated manifest of the hetero dataset in folder ``path``.

    Raises:
      FormatError: missing or unreadable, another format or version, a
        missing or ill-typed key, an unknown or repeated node type or
        relation, or files other than those the counts call for (naming it).
    """
    file = Path(path) / MANIFEST
    manifest = read_format_manifest(
        file, FORMAT, VERSION, ("num_classes",), what="an on-disk hetero dataset folder"
    )
    for key in ("name", "metric", "target"):
        if not isinstance(manifest.get(key), str):
            raise FormatError(file, key, f"must be a string, got {manifest.get(key)!r}")
    if manifest["num_classes"] < 1:
        raise FormatError(file, "num_classes", f"must be >= 1, got {manifest['num_classes']}")
    if manifest["metric"] != "acc":
        raise FormatError(
            file,
            "metric",
            f"must be 'acc' (the hetero task scores accuracy), got {manifest['metric']!r}",
        )
    if manifest["name"] == "ogbn-mag" and manifest["num_classes"] != MAG_CLASSES:
        raise FormatError(
            file,
            "num_classes",
            f"ogbn-mag has {MAG_CLASSES} classes (venues), got {manifest['num_classes']}",
        )
    if not isinstance(manifest.get("info", {}), dict):
        raise FormatError(file, "info", "must be an object")
    types = _entry_list(
        file, manifest, "node_types", {"type": _name_problem, "num_nodes": _count_problem}
    )
    relations = _entry_list(
        file, manifest, "relations", {"edge_type": _triple_problem, "num_edges": _count_problem}
    )
    features = _entry_list(
        file,
        manifest,
        "features",
        {
            "type": _name_problem,
            "num_features": lambda v: _count_problem(v) or (v < 1 and "must be >= 1"),
        },
    )
    for i, item in enumerate(types):
        if item["num_nodes"] < 1:
            raise FormatError(
                file,
                f"node_types[{i}].num_nodes",
                f"node type {item['type']!r} has no nodes (0); training cannot gather rows of "
                "an empty type: leave the type and its relations out",
            )
    known = [item["type"] for item in types]
    if not known:
        raise FormatError(file, "node_types", "is empty: the dataset has no node types")
    for key, names in (
        ("node_types", known),
        ("relations", [relation_name(item["edge_type"]) for item in relations]),
        ("features", [item["type"] for item in features]),
    ):
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise FormatError(file, key, f"lists {repeated[0]!r} more than once")
    for i, item in enumerate(relations):
        for side, t in zip(("source", "target"), item["edge_type"][::2], strict=True):
            if t not in known:
                raise FormatError(
                    file, f"relations[{i}].edge_type", f"{side} type {t!r} is not in node_types"
                )
    for i, item in enumerate(features):
        if item["type"] not in known:
            raise FormatError(file, f"features[{i}].type", f"{item['type']!r} is not in node_types")
    if manifest["target"] not in known:
        raise FormatError(file, "target", f"{manifest['target']!r} is not in node_types {known}")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise FormatError(file, "files", f"must be an object, got {files!r}")
    expected = _file_keys(
        [tuple(item["edge_type"]) for item in relations], [item["type"] for item in features]
    )
    for key in expected:
        if key not in files:
            raise FormatError(file, f"files.{key}", "missing")
    for key, entry in files.items():
        if key not in expected:
            raise FormatError(
                file, f"files.{key}", "is not a file of this dataset's relations and features"
            )
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


def _expected(manifest: dict) -> dict[str, tuple[tuple[str, ...], tuple[int, ...] | None]]:
    """``{file key: (allowed dtypes, shape or None for any 1-D length)}`` from the counts."""
    n = {item["type"]: item["num_nodes"] for item in manifest["node_types"]}
    expected: dict[str, tuple[tuple[str, ...], tuple[int, ...] | None]] = {}
    for item in manifest["relations"]:
        name, e = relation_name(item["edge_type"]), item["num_edges"]
        expected[f"senders.{name}"] = (("int32",), (e,))
        expected[f"receivers.{name}"] = (("int32",), (e,))
    for item in manifest["features"]:
        expected[f"features.{item['type']}"] = (
            FEATURE_DTYPES,
            (n[item["type"]], item["num_features"]),
        )
    expected["labels"] = (("int64",), (n[manifest["target"]],))
    for key in SPLITS:
        expected[key] = (("int64",), None)
    return expected


def _open(folder: Path, manifest: dict) -> dict[str, np.ndarray]:
    """Every listed array, memory-mapped, its size, dtype and shape checked."""
    arrays = {}
    for key, (dtypes, shape) in _expected(manifest).items():
        entry = manifest["files"][key]
        file = folder / entry["file"]
        array = open_listed_file(folder, key, entry)
        if str(array.dtype) not in dtypes:
            raise FormatError(file, "dtype", f"{key} must be one of {dtypes}, got {array.dtype}")
        if (shape is None and array.ndim != 1) or (shape is not None and array.shape != shape):
            want = "1-D" if shape is None else list(shape)
            raise FormatError(
                file,
                "shape",
                f"{key} must be {want} for the manifest's counts, got {list(array.shape)}",
            )
        arrays[key] = array
    return arrays


def _check_ids(file: Path, key: str, ids, n: int, what: str, chunk: int) -> None:
    for start in range(0, ids.shape[0], chunk):
        part = np.asarray(ids[start : start + chunk])
        bad = (part < 0) | (part >= n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FormatError(
                file, f"{key}[{start + i}]", f"{what} id {int(part[i])} is outside [0, {n})"
            )
        release_pages(ids)


def _check_contents(folder: Path, manifest: dict, arrays: dict, chunk: int) -> None:
    files = {key: folder / entry["file"] for key, entry in manifest["files"].items()}
    n = {item["type"]: item["num_nodes"] for item in manifest["node_types"]}
    for item in manifest["relations"]:
        src, _, dst = item["edge_type"]
        name = relation_name(item["edge_type"])
        for side, t in (("senders", src), ("receivers", dst)):
            key = f"{side}.{name}"
            _check_ids(files[key], side, arrays[key], n[t], t, chunk)
    target, c = manifest["target"], manifest["num_classes"]
    if n[target] < 1:
        raise FormatError(folder / MANIFEST, "node_types", f"target type {target!r} has no nodes")
    labels = arrays["labels"]
    for start in range(0, labels.shape[0], chunk):
        part = np.asarray(labels[start : start + chunk])
        bad = (part < -1) | (part >= c)
        if bad.any():
            i = start + int(np.flatnonzero(bad)[0])
            raise FormatError(
                files["labels"],
                f"labels[{i}]",
                f"{int(labels[i])} is outside [0, {c}) (-1 marks unlabelled nodes)",
            )
    for key in SPLITS:
        ids = np.asarray(arrays[key])
        bad = (ids < 0) | (ids >= n[target])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FormatError(
                files[key], f"{key}[{i}]", f"{target} id {int(ids[i])} is outside [0, {n[target]})"
            )
        unlabelled = np.asarray(labels[ids]) < 0
        if unlabelled.any():
            i = int(np.flatnonzero(unlabelled)[0])
            raise FormatError(
                files[key], f"{key}[{i}]", f"{target} {int(ids[i])} has no label (-1)"
            )
    check_disjoint_splits(
        {key: arrays[key] for key in SPLITS},
        error=lambda key, message: FormatError(files[key], key, message),
    )


def verify_hetero_checksums(path) -> None:
    """Hashes every file of the hetero dataset in ``path`` against the manifest.

    Raises:
      FormatError: a missing file, or the first file whose sha256 differs
        (field ``"sha256"``).
    """
    folder = Path(path)
    manifest = read_hetero_manifest(folder)
    for key, entry in manifest["files"].items():
        file = folder / entry["file"]
        try:
            digest = sha256_file(file)
        except FileNotFoundError:
            raise FormatError(file, key, "missing") from None
        except NotRegularFileError as err:
            raise FormatError(file, key, f"not a regular file: it is {err.kind}") from None
        if digest != entry["sha256"]:
            raise FormatError(
                file,
                "sha256",
                f"checksum mismatch: the file hashes to {digest}, the manifest says "
                f"{entry['sha256']} (corrupt or modified)",
            )


@unswapped
def load_hetero_ondisk(path, *, verify: bool = False, chunk: int = CHECK_CHUNK) -> HeteroDataset:
    """Memory-maps the hetero dataset in folder ``path`` (format: module docstring).

    Args:
      path: the folder.
      verify: also compare every file's sha256 with the manifest (reads every byte).
      chunk: entries per step of the checks.

    Returns:
      A :class:`~sparsegcn.datasets.mag.HeteroDataset` whose edge lists,
      features, labels and splits are read-only memory maps, with node types
      and relations in the saved order; its ``info`` is the manifest's, with
      ``folder`` set to ``path``.

    Raises:
      FormatError: (a ``ValueError``) the first missing, truncated, malformed
        or inconsistent file, naming the file and the field.
    """
    folder = Path(os.path.expanduser(path))
    if not folder.is_dir():
        raise FormatError(folder, "folder", "does not exist or is not a folder")
    manifest = read_hetero_manifest(folder)
    arrays = _open(folder, manifest)
    if verify:
        verify_hetero_checksums(folder)
    _check_contents(folder, manifest, arrays, chunk)
    n = {item["type"]: item["num_nodes"] for item in manifest["node_types"]}
    keys = [tuple(item["edge_type"]) for item in manifest["relations"]]
    # The ids were checked above in chunks; HeteroGraph's constructor would check them
    # again whole, so the views are assembled as its pytree.
    views = []
    for src, rel, dst in keys:
        name = relation_name((src, rel, dst))
        view = Bipartite.tree_unflatten(
            (n[src], n[dst], False),
            (arrays[f"senders.{name}"], arrays[f"receivers.{name}"], None, None, 0),
        )
        views.append(view)
    graph = HeteroGraph.tree_unflatten((tuple(n.items()), tuple(keys)), tuple(views))
    dataset = HeteroDataset(
        name=manifest["name"],
        graph=graph,
        features={
            item["type"]: arrays[f"features.{item['type']}"] for item in manifest["features"]
        },
        target=manifest["target"],
        labels=arrays["labels"],
        num_classes=manifest["num_classes"],
        split={key: arrays[key] for key in SPLITS},
        metric=manifest["metric"],
        info=dict(manifest.get("info") or {}, folder=str(folder)),
    )
    return dataset


__all__ = [
    "CHECK_CHUNK",
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "is_hetero_ondisk",
    "load_hetero_ondisk",
    "read_hetero_manifest",
    "relation_name",
    "save_hetero",
    "verify_hetero_checksums",
]

"""OGB graph-property-prediction datasets (``ogbg-*``) read from OGB's raw files, without torch.

``ogb``'s ``GraphPropPredDataset`` defines the layout; this module reads
the same folder with NumPy and gzip alone (``ogb`` itself imports torch and
loops over graphs in Python). A dataset ``ogbg-molhiv`` lives in
``<root>/ogbg_molhiv/``:

============================================  ===============================================
file                                          lines: content
============================================  ===============================================
``RELEASE_v1.txt``                            the release marker (``ogb`` checks it too)
``raw/num-node-list.csv.gz``                  ``G``: nodes of graph ``g``
``raw/num-edge-list.csv.gz``                  ``G``: edges of graph ``g`` (each bond once)
``raw/edge.csv.gz``                           ``sum(num-edge-list)``: ``src,dst``, node ids
                                              *local to the graph*, graph after graph
``raw/node-feat.csv.gz``                      ``sum(num-node-list)``: 9 integer atom features
                                              (absent where ``has_node_attr`` is False)
``raw/edge-feat.csv.gz``                      one row per edge line: 3 integer bond features
                                              (ppa: 7 reals)
``raw/graph-label.csv.gz``                    ``G``: ``T`` binary labels (empty or ``nan``:
                                              missing), ``T`` real targets (regression;
                                              empty or ``nan``: missing), or one class id
                                              (ppa)
``split/<split>/{train,valid,test}.csv.gz``   graph ids, one a line (``<split>`` is
                                              ``scaffold`` or ``species``)
============================================  ===============================================

Where master.csv says ``add_inverse_edge`` (every supported dataset), each
stored edge becomes two, the edge then its reverse, and its features are
repeated for both, exactly as ``ogb.io.read_graph_raw.read_csv_graph_raw``
builds them. Integer files are parsed by NumPy's C reader (``np.loadtxt``),
the label matrix by byte-level array operations (:func:`read_binary_labels`),
and every check is vectorised: no Python loop runs per graph or per line
(a molpcba-size folder reads in about 15 s of CPU). A file that breaks the
layout raises ``ValueError`` naming the file and its line; a truncated or
corrupt gzip raises :class:`~sparsegcn.files.CorruptFileError` naming the
file.

The dataset table (``num tasks``, ``eval metric``, ``task type``,
``add_inverse_edge``, the archive URL...) is read from the installed
``ogb`` package's ``graphproppred/master.csv`` as a plain file (located with
``importlib.util.find_spec``, so nothing imports torch); without ``ogb``,
the copy in :data:`MASTER` serves. Supported (:data:`NAMES`): the
binary-classification molecule datasets, the regression ones (esol,
freesolv, lipo: metric ``rmse``, lower is better) and the multiclass
``ogbg-ppa``. ``ogbg-code2`` (sequences of sub-tokens, metric F1) is not: its
labels are no per-graph class, task or target.

A missing folder is downloaded from master.csv's URL (over https) only
where the archive's sha256 is recorded (:data:`ARCHIVE_SHA256`), then
extracted into a temporary folder and renamed into place; otherwise it is
refused with a message saying where to put the folder.

References:
  Hu et al., *Open Graph Benchmark: Datasets for Machine Learning on
  Graphs*, NeurIPS 2020, https://arxiv.org/abs/2005.00687 ;
  https://ogb.stanford.edu/docs/graphprop/
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sparsegcn.datasets import OGBG_PREFIX
from sparsegcn.datasets.base import check_may_download
from sparsegcn.datasets.download import download_file
from sparsegcn.datasets.graph_dataset import GraphDataset
from sparsegcn.files import check_regular_file, discard_temp_folder, reading, temp_folder

ATOM_FEATURE_DIMS = (119, 5, 12, 12, 10, 6, 6, 2, 2)
"""Vocabulary of each of the 9 atom-feature columns, as
``ogb.utils.features.get_atom_feature_dims()``: atomic number, chirality,
degree, formal charge, number of H, radical electrons, hybridization,
aromatic, in ring."""

BOND_FEATURE_DIMS = (5, 6, 2)
"""Vocabulary of each of the 3 bond-feature columns, as
``ogb.utils.features.get_bond_feature_dims()``: bond type, stereo,
conjugated."""


def _mol_row(
    tasks: int, metric: str, download_name: str, task_type: str = "binary classification"
) -> dict[str, str]:
    return {
        "num tasks": str(tasks),
        "eval metric": metric,
        "download_name": download_name,
        "version": "1",
        "url": (
            f"http://snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/{download_name}.zip"
        ),
        "add_inverse_edge": "True",
        "data type": "mol",
        "has_node_attr": "True",
        "has_edge_attr": "True",
        "task type": task_type,
        "num classes": "-1" if task_type == "regression" else "2",
        "split": "scaffold",
        "additional node files": "None",
        "additional edge files": "None",
        "binary": "False",
    }


MASTER: dict[str, dict[str, str]] = {
    "ogbg-molbace": _mol_row(1, "rocauc", "bace"),
    "ogbg-molbbbp": _mol_row(1, "rocauc", "bbbp"),
    "ogbg-molclintox": _mol_row(2, "rocauc", "clintox"),
    "ogbg-molmuv": _mol_row(17, "ap", "muv"),
    "ogbg-molpcba": _mol_row(128, "ap", "pcba"),
    "ogbg-molsider": _mol_row(27, "rocauc", "sider"),
    "ogbg-moltox21": _mol_row(12, "rocauc", "tox21"),
    "ogbg-moltoxcast": _mol_row(617, "rocauc", "toxcast"),
    "ogbg-molhiv": _mol_row(1, "rocauc", "hiv"),
    "ogbg-molesol": _mol_row(1, "rmse", "esol", "regression"),
    "ogbg-molfreesolv": _mol_row(1, "rmse", "freesolv", "regression"),
    "ogbg-mollipo": _mol_row(1, "rmse", "lipophilicity", "regression"),
    "ogbg-molchembl": _mol_row(1310, "rocauc", "chembl"),
    "ogbg-ppa": {
        "num tasks": "1",
        "eval metric": "acc",
        "download_name": "ogbg_ppi_medium",
        "version": "1",
        "url": "http://snap.stanford.edu/ogb/data/graphproppred/ogbg_ppi_medium.zip",
        "add_inverse_edge": "True",
        "data type": "",
        "has_node_attr": "False",
        "has_edge_attr": "True",
        "task type": "multiclass classification",
        "num classes": "37",
        "split": "species",
        "additional node files": "None",
        "additional edge files": "None",
        "binary": "False",
    },
}
"""The rows of ``ogb`` 1.3.6's ``graphproppred/master.csv`` for :data:`NAMES`, used when
``ogb`` is not installed (a test checks them against the installed file)."""

NAMES = tuple(MASTER)
"""The ``ogbg-*`` datasets this module reads."""

ARCHIVE_SHA256: dict[str, str | None] = {
    # tensorflow/datasets records this digest (and 39,533,472 bytes) for
    # https://snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/pcba.zip
    # in datasets/ogbg_molpcba/checksums.tsv and checks every download against it.
    "ogbg-molpcba": "0bb12da2f3ec8b0bb80564114a6174fad2df6a3a0d3c19470b3a27813a7d4e53",
}
"""sha256 of the archives at master.csv's URLs, where a published one is known;
any other dataset is never downloaded unverified (see :func:`download_ogbg`)."""

LICENSE = "MIT (OGB); molecules from MoleculeNet"


def installed_master() -> Path | None:
    """The installed ``ogb`` package's ``graphproppred/master.csv``, found without importing
    ``ogb`` (which imports torch); ``None`` where ``ogb`` is not installed."""
    try:
        spec = importlib.util.find_spec("ogb")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "graphproppred" / "master.csv"
        if path.is_file():
            return path
    return None


def read_master(path: str | os.PathLike) -> dict[str, dict[str, str]]:
    """``{dataset: {field: value}}`` of a master.csv (one column per dataset)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    names = rows[0][1:]
    return {
        name: {row[0]: row[i + 1] for row in rows[1:] if len(row) > i + 1}
        for i, name in enumerate(names)
    }


def master_row(name: str) -> dict[str, str]:
    """master.csv's row for ``name``: the installed ``ogb``'s, else :data:`MASTER`'s.

    Raises:
      ValueError: ``name`` is not one of :data:`NAMES`.
    """
    if name not in MASTER:
        raise ValueError(
            f"unknown or unsupported OGB graph dataset {name!r}; choose one of {NAMES}"
        )
    path = installed_master()
    if path is not None:
        row = read_master(path).get(name)
        if row is not None:
            return row
    return dict(MASTER[name])


# -- reading the raw files -------------------------------------------------------------------


def _read_gz(path: Path) -> bytes:
    """The decompressed bytes of ``path`` (a regular file), ``\\r\\n`` made ``\\n``, the
    final newline dropped."""
    check_regular_file(path)
    with reading(path), gzip.open(path, "rb") as f:
        data = f.read()
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    return data[:-1] if data.endswith(b"\n") else data


def _line_of(data: bytes, row: int) -> str:
    lines = data.split(b"\n", row + 1)
    return lines[row].decode(errors="replace") if row < len(lines) else ""


def _blank_line(data: bytes) -> int | None:
    """0-based index of the first empty line of ``data``, or ``None``."""
    if not data:
        return 0
    if data.startswith(b"\n"):
        return 0
    pos = data.find(b"\n\n")
    return None if pos < 0 else data.count(b"\n", 0, pos) + 1


_LABEL_TOKENS = {b"0": 0.0, b"1": 1.0, b"0.0": 0.0, b"1.0": 1.0, b"nan": np.nan, b"NaN": np.nan}
"""What a binary label may be written as (pandas writes a missing one as an empty field)."""


def read_binary_labels(path: str | os.PathLike, width: int) -> np.ndarray:
    """float32 ``[lines, width]`` of a gzip file of 0/1 labels, NaN where missing.

    A field is ``0``, ``1``, ``0.0``, ``1.0``, ``nan``, ``NaN`` or empty
    (missing). Tokenised with array operations over the bytes (the label
    matrix of ogbg-molpcba has 56 million fields, 40 % of them empty).

    Raises:
      ValueError: naming the file and line of a wrong count of values or a
        value that is not a binary label.
    """
    path = Path(path)
    data = _read_gz(path)
    buf = np.frombuffer(data, np.uint8)
    index = np.int32 if buf.size < 2**31 - 1 else np.int64
    separators = np.flatnonzero((buf == ord(",")) | (buf == ord("\n"))).astype(index)
    line_ends = np.flatnonzero(buf[separators] == ord("\n"))  # ranks among the separators
    fields = np.diff(np.concatenate([[-1], line_ends, [separators.shape[0]]]))
    lines = fields.shape[0]
    wrong = np.flatnonzero(fields != width)
    if wrong.size:
        i = int(wrong[0])
        line = data.split(b"\n")[i].decode(errors="replace")
        raise ValueError(
            f"{path} line {i + 1}: expected {width} comma-separated values, got "
            f"{int(fields[i])}: {line!r}"
        )
    starts = np.concatenate([np.zeros(1, index), separators + 1])
    lengths = np.concatenate([separators, np.array([buf.size], index)]) - starts
    padded = np.concatenate([buf, np.zeros(3, np.uint8)])
    code = np.zeros(starts.shape[0], np.int32)
    for k in range(3):  # the first three bytes of each field (zero past its end)
        byte = np.where(lengths > k, padded[starts + k], 0).astype(np.int32)
        code |= byte << (8 * k)
    values = np.full(starts.shape[0], np.nan, np.float32)
    known = lengths == 0
    for token, value in _LABEL_TOKENS.items():
        packed = sum(b << (8 * k) for k, b in enumerate(token))
        match = (lengths == len(token)) & (code == packed)
        values[match] = value
        known |= match
    if not known.all():
        i = int(np.flatnonzero(~known)[0])
        first = int(starts[i])
        text = data[first : first + int(lengths[i])].decode(errors="replace")
        raise ValueError(
            f"{path} line {i // width + 1}: task {i % width + 1} holds {text!r}; a binary "
            f"label is 0, 1 or missing (empty or nan)"
        )
    return values.reshape(lines, width)


def read_csv_gz(path: str | os.PathLike, dtype, width: int | None = None) -> np.ndarray:
    """The comma-separated rows of the gzip file ``path`` as ``[lines, columns]``.

    Every line must hold the same number of values (``width`` when given),
    each an integer (integer ``dtype``) or a real (float ``dtype``).

    Raises:
      ValueError: naming the file, the line (1-based) and what is wrong.
      CorruptFileError: the file is not gzip, or truncated.
    """
    path = Path(path)
    return _parse_csv(path, _read_gz(path), dtype, width)


def _parse_csv(path: Path, data: bytes, dtype, width: int | None) -> np.ndarray:
    """:func:`read_csv_gz` of ``data``, the contents of ``path``."""
    floating = np.issubdtype(np.dtype(dtype), np.floating)
    blank = _blank_line(data)
    if blank is not None:
        what = "the file is empty" if not data else f"line {blank + 1}: empty line"
        raise ValueError(f"{path}: {what}")
    try:
        values = np.loadtxt(
            io.BytesIO(data), delimiter=",", dtype=dtype, ndmin=2, comments=None, encoding=None
        )
    except ValueError as err:
        raise _parse_error(path, data, err, floating) from None
    if width is not None and values.shape[1] != width:
        raise ValueError(
            f"{path} line 1: expected {width} comma-separated values, got {values.shape[1]}: "
            f"{_line_of(data, 0)!r}"
        )
    return values


def _parse_error(path: Path, data: bytes, err: ValueError, floating: bool) -> ValueError:
    """The error naming the first line NumPy's reader refused (found by a scan that runs only
    on this error path, since NumPy's messages number rows inconsistently)."""
    kind = float if floating else int
    what = "a number" if floating else "an integer"
    width = None
    for i, line in enumerate(data.split(b"\n")):
        tokens = line.split(b",")
        width = len(tokens) if width is None else width
        if len(tokens) != width:
            return ValueError(
                f"{path} line {i + 1}: expected {width} comma-separated values, got "
                f"{len(tokens)}: {line.decode(errors='replace')!r}"
            )
        for token in tokens:
            try:
                kind(token)
            except ValueError:
                text = token.decode(errors="replace").strip()
                return ValueError(f"{path} line {i + 1}: {text!r} is not {what}")
    return ValueError(f"{path}: {err}")


def _first_bad(path: Path, bad: np.ndarray, what: Callable[[int], str]) -> ValueError:
    """The error for the first True row of ``bad`` (a per-line mask)."""
    i = int(np.flatnonzero(bad)[0])
    return ValueError(f"{path} line {i + 1}: {what(i)}")


_MAX_COUNT = 2**31 - 1
"""The largest count a line of ``num-node-list`` or ``num-edge-list`` may hold: node ids are
int32, and with each count this small the running sums cannot wrap int64."""


def _counts(path: Path) -> np.ndarray:
    values = read_csv_gz(path, np.int64, 1)[:, 0]
    negative = values < 0
    if negative.any():
        raise _first_bad(path, negative, lambda i: f"count {int(values[i])} is negative")
    large = values > _MAX_COUNT
    if large.any():
        raise _first_bad(
            path,
            large,
            lambda i: f"count {int(values[i])} is past {_MAX_COUNT}, the most a graph may have",
        )
    return values


def _read_rows(
    path: Path, dtype, rows: int, why: str, *, width: int | None = None, empty_width: int = 0
) -> np.ndarray:
    """:func:`read_csv_gz` of a file that must have ``rows`` lines (``why`` says whence the
    count). Its lines are counted before they are parsed, and with ``rows == 0`` only an
    empty file passes (``[0, empty_width]``, or ``[0, width]``): the count files are
    checked against the data, never trusted to skip it."""
    data = _read_gz(path)
    lines = data.count(b"\n") + 1 if data else 0
    if lines != rows:
        raise ValueError(f"{path}: expected {rows} lines ({why}), got {lines}")
    if not rows:
        return np.zeros((0, width or empty_width), dtype)
    return _parse_csv(path, data, dtype, width)


def _check_vocab(path: Path, values: np.ndarray, dims: tuple[int, ...]) -> None:
    """Refuses a categorical value outside ``[0, dims[j])`` in column ``j``."""
    if values.shape[1] != len(dims):
        raise ValueError(
            f"{path} line 1: expected {len(dims)} comma-separated values, got {values.shape[1]}"
        )
    bad = (values < 0) | (values >= np.asarray(dims))
    if bad.any():
        i, j = (int(k[0]) for k in np.nonzero(bad))
        raise ValueError(
            f"{path} line {i + 1}: column {j + 1} holds {int(values[i, j])}, outside the "
            f"vocabulary [0, {dims[j]})"
        )


def _required(folder: Path, relative: str) -> Path:
    path = folder / relative
    if not path.exists():
        raise ValueError(f"{path} is missing (required by OGB's raw layout)")
    return path


def read_ogbg(folder: str | os.PathLike, name: str) -> GraphDataset:
    """Reads the OGB raw files in ``folder`` (the layout of the module docstring).

    Args:
      folder: the dataset folder, e.g. ``<root>/ogbg_molhiv``.
      name: the dataset, one of :data:`NAMES` (selects master.csv's row).

    Returns:
      A :class:`GraphDataset` with ``ogb``'s graph and edge order: for
      molecules, int32 ``[n, 9]`` atom features (``feature_dims`` =
      :data:`ATOM_FEATURE_DIMS`), int32 ``[E, 3]`` bond features
      (:data:`BOND_FEATURE_DIMS`), float32 ``[G, T]`` labels with NaN where
      missing; for ogbg-ppa, int32 zeros ``[n, 1]`` (``feature_dims=(1,)``:
      its nodes have no features), float32 ``[E, 7]`` edge features and int32
      ``[G]`` class ids. ``metric`` and ``split`` are master.csv's.

    Raises:
      ValueError: a missing file or a malformed one, naming the file and its
        line: a count past ``2**31 - 1``, line counts that disagree with the
        count files (an empty file where they sum to 0), wrong counts of values, a
        non-number, a node id outside
        its graph, a feature outside its vocabulary, a label that is not 0, 1
        or missing, a split id out of range or in two splits.
      CorruptFileError: a truncated or corrupt gzip file.
    """
    meta = master_row(name)
    folder = Path(folder)
    marker = folder / f"RELEASE_v{meta['version']}.txt"
    if not marker.exists():
        raise ValueError(
            f"{folder} has no {marker.name}, so it is not a complete OGB download of {name} "
            f"version {meta['version']}; move it away to download it again"
        )
    raw = folder / "raw"
    nodes_path = _required(raw, "num-node-list.csv.gz")
    edges_path = _required(raw, "num-edge-list.csv.gz")
    num_nodes_list = _counts(nodes_path)
    num_edges_list = _counts(edges_path)
    num_graphs = num_nodes_list.shape[0]
    if num_edges_list.shape[0] != num_graphs:
        raise ValueError(
            f"{edges_path}: expected {num_graphs} lines (one per graph, as "
            f"{nodes_path.name}), got {num_edges_list.shape[0]}"
        )
    node_ptr = np.zeros(num_graphs + 1, np.int64)
    np.cumsum(num_nodes_list, out=node_ptr[1:])
    num_nodes = int(node_ptr[-1])
    if num_nodes > _MAX_COUNT:
        raise ValueError(f"{nodes_path}: {num_nodes} nodes do not fit int32 node ids")
    stored_ptr = np.zeros(num_graphs + 1, np.int64)
    np.cumsum(num_edges_list, out=stored_ptr[1:])

    path = _required(raw, "edge.csv.gz")
    why = f"the sum of {edges_path.name}"
    local = _read_rows(path, np.int64, int(stored_ptr[-1]), why, width=2)
    edge_graph = np.repeat(np.arange(num_graphs), num_edges_list)
    size = num_nodes_list[edge_graph][:, None]
    out = ((local < 0) | (local >= size)).any(axis=1)
    if out.any():
        i = int(np.flatnonzero(out)[0])
        raise ValueError(
            f"{path} line {i + 1}: node id {int(local[i, 0])}, {int(local[i, 1])} outside "
            f"graph {int(edge_graph[i])}'s [0, {int(size[i, 0])}) (ids are local to each graph)"
        )
    stored = (local + node_ptr[edge_graph][:, None]).astype(np.int32)
    inverse = meta["add_inverse_edge"] == "True"
    if inverse:
        pairs = np.repeat(stored, 2, axis=0)
        pairs[1::2] = stored[:, ::-1]
        edge_ptr = 2 * stored_ptr
    else:
        pairs, edge_ptr = stored, stored_ptr

    molecule = meta["data type"] == "mol"
    if meta["has_node_attr"] == "True":
        path = _required(raw, "node-feat.csv.gz")
        why = f"the sum of {nodes_path.name}"
        features = _read_rows(path, np.int32, num_nodes, why, empty_width=9)
        if molecule:
            _check_vocab(path, features, ATOM_FEATURE_DIMS)
        feature_dims: tuple[int, ...] | None = ATOM_FEATURE_DIMS if molecule else None
        features = features.astype(np.int32 if molecule else np.float32, copy=False)
    else:  # ogbg-ppa: one constant category, as ogb's example embeds it
        features, feature_dims = np.zeros((num_nodes, 1), np.int32), (1,)

    edge_features, edge_feature_dims = None, None
    if meta["has_edge_attr"] == "True":
        path = _required(raw, "edge-feat.csv.gz")
        kind = np.int32 if molecule else np.float32
        why = "one per line of edge.csv.gz"
        values = _read_rows(path, kind, local.shape[0], why, empty_width=3)
        if molecule:
            _check_vocab(path, values, BOND_FEATURE_DIMS)
            edge_feature_dims = BOND_FEATURE_DIMS
            values = values.astype(np.int32, copy=False)
        elif not np.isfinite(values).all():
            finite = np.asarray(np.isfinite(values).all(axis=1))
            raise _first_bad(path, ~finite, lambda i: "a value is not finite")
        edge_features = np.repeat(values, 2, axis=0) if inverse else values

    labels, num_classes, classes = _labels(raw, meta, num_graphs)
    split = _split(folder, meta["split"], num_graphs)
    return GraphDataset(
        name=name,
        senders=np.ascontiguousarray(pairs[:, 0]),
        receivers=np.ascontiguousarray(pairs[:, 1]),
        node_ptr=node_ptr,
        edge_ptr=edge_ptr,
        features=np.ascontiguousarray(features),
        labels=labels,
        num_classes=num_classes,
        classes=classes,
        edge_features=edge_features,
        info={
            "source": meta["url"].replace("http://", "https://", 1),
            "folder": str(folder),
            "split": meta["split"],
            "task_type": meta["task type"],
            "license": LICENSE if molecule else "CC-0",
        },
        metric=meta["eval metric"],
        split=split,
        feature_dims=feature_dims,
        edge_feature_dims=edge_feature_dims,
    )


def read_real_labels(path: str | os.PathLike, width: int) -> np.ndarray:
    """float32 ``[lines, width]`` of a gzip file of real targets, NaN where missing.

    A field is a number (``nan`` included) or empty (missing).

    Raises:
      ValueError: naming the file and line of a wrong count of values, a
        value that is not a number, or an infinite one.
    """
    path = Path(path)
    data = _read_gz(path)
    # An empty field (at a line's start or end, or between two commas) is missing.
    filled = re.sub(rb"(?m)(^|,)(?=,|$)", rb"\1nan", data) if data else data
    values = _parse_csv(path, filled, np.float64, width)
    infinite = np.isinf(values).any(axis=1)
    if infinite.any():
        raise _first_bad(path, infinite, lambda i: f"{_line_of(data, i)!r} holds an infinite value")
    return values.astype(np.float32)


def _labels(raw: Path, meta: dict, num_graphs: int):
    """``(labels, num_classes, classes)``: float32 ``[G, T]`` 0/1/NaN for binary tasks,
    float32 ``[G, T]`` reals/NaN for regression, int32 ``[G]`` class ids for multiclass."""
    path = _required(raw, "graph-label.csv.gz")
    tasks = int(meta["num tasks"])
    if meta["task type"] == "binary classification":
        values = read_binary_labels(path, tasks)
        labels, num_classes, classes = values, tasks, np.arange(tasks)
    elif meta["task type"] == "regression":
        values = read_real_labels(path, tasks)
        labels, num_classes, classes = values, tasks, np.arange(tasks)
    elif meta["task type"] == "multiclass classification":
        values = read_csv_gz(path, np.int64, 1)[:, 0]
        num_classes = int(meta["num classes"])
        bad = (values < 0) | (values >= num_classes)
        if bad.any():
            raise _first_bad(
                path, bad, lambda i: f"class {int(values[i])} is outside [0, {num_classes})"
            )
        labels, classes = values.astype(np.int32), np.arange(num_classes)
    else:
        raise ValueError(f"task type {meta['task type']!r} is not supported")
    if labels.shape[0] != num_graphs:
        raise ValueError(
            f"{path}: expected {num_graphs} lines (one per graph), got {labels.shape[0]}"
        )
    return labels, num_classes, classes


def _split(folder: Path, split: str, num_graphs: int) -> dict[str, np.ndarray]:
    ids = {}
    seen = np.zeros(num_graphs, np.int32)
    for key in ("train", "valid", "test"):
        path = _required(folder, f"split/{split}/{key}.csv.gz")
        values = read_csv_gz(path, np.int64, 1)[:, 0]
        bad = (values < 0) | (values >= num_graphs)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{path} line {i + 1}: graph id {int(values[i])} is outside [0, {num_graphs})"
            )
        np.add.at(seen, values, 1)
        repeated = seen[values] > 1
        if repeated.any():
            i = int(np.flatnonzero(repeated)[0])
            raise ValueError(
                f"{path} line {i + 1}: graph {int(values[i])} is already in this or an "
                "earlier split"
            )
        ids[key] = values
    return ids


# -- download ----------------------------------------------------------------------------------


def download_ogbg(
    name: str, root: str | os.PathLike, *, url: str | None = None, progress: bool = False
) -> Path:
    """Downloads ``name``'s archive, checks its sha256 and extracts it to ``<root>/<name_>``.

    The archive is fetched into a temporary folder under ``root``
    (:func:`~sparsegcn.files.temp_folder`), checked against
    :data:`ARCHIVE_SHA256`, unpacked beside the target and its folder
    (master.csv's ``download_name``) renamed into place; nothing is left
    behind on failure.

    Args:
      name: one of :data:`NAMES`.
      root: the data root.
      url: the archive's URL (default master.csv's, over https).
      progress: a progress bar.

    Returns:
      The dataset folder.

    Raises:
      ValueError: no recorded sha256 for ``name`` (the message says where to
        put the folder instead), a checksum mismatch, or a malformed archive.
      OSError: the download failed.
    """
    from sparsegcn.datasets.ogb import _extract

    meta = master_row(name)
    root = Path(root)
    folder = root / name.replace("-", "_")
    source = url or meta["url"].replace("http://", "https://", 1)
    digest = ARCHIVE_SHA256.get(name)
    if digest is None:
        raise ValueError(
            f"{folder} is missing and {name} has no recorded sha256 to check a download of "
            f"{source} against (recorded: {sorted(ARCHIVE_SHA256)}); download and unzip it "
            f"yourself, rename its folder {meta['download_name']!r} to {folder.name!r} and put "
            f"it under {str(root)!r} (it must hold RELEASE_v{meta['version']}.txt, raw/ and "
            f"split/{meta['split']}/)"
        )
    check_may_download(name, root)
    work = temp_folder(root, folder.name, "download")
    try:
        archive = work / f"{meta['download_name']}.zip"
        download_file(source, archive, sha256=digest, progress=progress)
        _extract(archive, meta["download_name"], folder)
    finally:
        discard_temp_folder(work)
    return folder


def load_ogbg(
    name: str,
    root: str | os.PathLike,
    *,
    download: bool = True,
    url: str | None = None,
    progress: bool = False,
) -> GraphDataset:
    """``name`` from ``<root>/ogbg_*/``, downloaded first when missing (:func:`download_ogbg`).

    Args:
      name: one of :data:`NAMES`, e.g. ``"ogbg-molhiv"``.
      root: the data root.
      download: fetch a missing folder; ``False`` refuses instead.
      url: the archive's URL (tests serve their own).
      progress: a download progress bar.
    """
    meta = master_row(name)
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"root {str(root)!r} exists but is not a directory")
    folder = root / name.replace("-", "_")
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{name}: {str(folder)!r} exists but is not a directory")
    if not folder.exists():
        if not download:
            raise ValueError(
                f"{folder} is missing; download it (from {meta['url']}) or drop download=False"
            )
        download_ogbg(name, root, url=url, progress=progress)
    return read_ogbg(folder, name)


# -- the official evaluator --------------------------------------------------------------------


def evaluate_graphs(name: str, y_true, y_pred) -> float | None:
    """``name``'s official metric through ``ogb.graphproppred.Evaluator``; ``None`` without ogb.

    Binary tasks (rocauc, ap): ``y_true`` float ``[G, T]`` 0/1 with NaN for
    missing labels, ``y_pred`` ``[G, T]`` scores (logits or probabilities);
    the metric is averaged over the tasks with both classes present.
    Regression (rmse): ``y_true`` float ``[G, T]`` with NaN for missing
    targets, ``y_pred`` ``[G, T]`` predictions; lower is better.
    Multiclass (acc): ``y_true`` and ``y_pred`` int ``[G]`` or ``[G, 1]`` class ids.

    Raises:
      ValueError: ``name`` is unknown, or the shapes differ.
    """
    meta = master_row(name)
    true, pred = np.asarray(y_true), np.asarray(y_pred)
    if true.shape != pred.shape:
        raise ValueError(f"y_true {true.shape} and y_pred {pred.shape} must have the same shape")
    if true.ndim == 1:
        true, pred = true[:, None], pred[:, None]
    if importlib.util.find_spec("ogb") is None:
        return None
    from sparsegcn.datasets.ogb import import_ogb

    try:
        import_ogb()  # first import without ogb's PyPI version-check threads
        from ogb.graphproppred import Evaluator
    except ImportError:
        return None
    evaluator = Evaluator(name)
    result = evaluator.eval({"y_true": true, "y_pred": pred})
    return float(result[meta["eval metric"]])


__all__ = [
    "ARCHIVE_SHA256",
    "ATOM_FEATURE_DIMS",
    "BOND_FEATURE_DIMS",
    "MASTER",
    "NAMES",
    "OGBG_PREFIX",
    "download_ogbg",
    "evaluate_graphs",
    "installed_master",
    "load_ogbg",
    "master_row",
    "read_binary_labels",
    "read_csv_gz",
    "read_master",
    "read_ogbg",
    "read_real_labels",
]

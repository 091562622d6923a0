"""TU Dortmund graph datasets (``tu:NAME``): many small graphs, classified or regressed.

The format (the README shipped with every dataset, ``DS`` its name): all
graphs share one numbering of nodes, ``1 .. n``, and of graphs, ``1 .. N``.

====================================  ===========  ==============================
file                                  lines        content
====================================  ===========  ==============================
``DS_A.txt``                          ``m``        ``row, col``: one directed edge
``DS_graph_indicator.txt``            ``n``        the graph id of node ``i``
``DS_graph_labels.txt`` (see below)   ``N``        the class label of graph ``i``
``DS_node_labels.txt`` (optional)     ``n``        integer label(s) of node ``i``
``DS_node_attributes.txt`` (opt.)     ``n``        comma-separated reals
``DS_edge_labels.txt`` (optional)     ``m``        integer label(s) of edge ``i``
``DS_edge_attributes.txt`` (opt.)     ``m``        comma-separated reals
``DS_graph_attributes.txt`` (opt.)    ``N``        regression target(s)
====================================  ===========  ==============================

:func:`load_tu` reads every one of them. The graphs' labels are the class labels;
a dataset without ``DS_graph_labels.txt`` but with ``DS_graph_attributes.txt``
(TU's regression sets, such as QM9) is a regression dataset whose
labels are those attributes, float32 ``[N, T]``, with metric ``"mae"`` (as
PyG's ``TUDataset`` takes graph attributes as the target; where both files
exist the class labels are the labels and the attributes stay in
``targets``). Node features are the one-hot node
labels (one block per label column, over its values from the smallest to
the largest, as PyG's ``TUDataset``) followed by the node attributes; edge
features likewise. Edges are kept as ``DS_A.txt`` lists them (graph by
graph, the file's order within each), self-loops and repeated lines included (PyG's ``TUDataset`` drops
self-loops and merges repeats, summing their features; MUTAG has neither).
A file that breaks the format is refused with a ``ValueError`` naming the
file and the line; a label column spanning more values than it has lines
(:func:`one_hot_columns`) too; a FIFO or a device in place of a file is
refused (:class:`~sparsegcn.files.NotRegularFileError`) before it is read.
A missing folder is downloaded from the TU site (:data:`TU_URL`, at most
:data:`MAX_ARCHIVE_BYTES`) and each extracted file checked against its
recorded sha256 (:data:`TU_SHA256`); :func:`load_tu` checks them again on
every load of a folder already there (:func:`verify_tu`), as the Planetoid
loader does.

References:
  Morris et al., *TUDataset: A collection of benchmark datasets for learning
  with graphs*, ICML 2020 GRL+ workshop. https://chrsmrrs.github.io/datasets/
"""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np

from sparsegcn.datasets import TU_PREFIX
from sparsegcn.datasets.base import check_may_download
from sparsegcn.datasets.download import download_file, sha256_file
from sparsegcn.datasets.graph_dataset import GraphDataset
from sparsegcn.files import (
    CorruptFileError,
    check_folder_path,
    check_regular_file,
    discard_temp_folder,
    read_text,
    reading,
    rename_into_place,
    temp_folder,
)

TU_URL = "https://www.chrsmrrs.com/graphkerneldatasets/{name}.zip"
"""Where a missing ``<root>/tu/NAME/`` folder is downloaded from."""

TU_SHA256: dict[str, dict[str, str]] = {
    "MUTAG": {
        "MUTAG_A.txt": "d9656ca7493f3445d737c711710bb36fd432dddd1c0ea32e1d4713c86ebd28e2",
        "MUTAG_edge_labels.txt": "4669ce755075ff86c3240709345745886400908fa637a49310459b9c267b3e56",
        "MUTAG_graph_indicator.txt": (
            "7d520a4d6c7961c0cdeabe076d8fe27e795b6d373485c9a2b744987e560a2056"
        ),
        "MUTAG_graph_labels.txt": (
            "a1518ea39ba3426bd42f57396b9c4baffe68e9adc718caeeab0119c6591a5f2c"
        ),
        "MUTAG_node_labels.txt": "678f429965490e84dd27713017538c995fc05d1621beac910848b600015ee863",
    },
}
"""The sha256 of every data file of a downloadable dataset, as extracted."""

MAX_MEMBER_BYTES = 1 << 30
"""The most bytes one file of a downloaded TU archive may expand to: a member
claiming more is refused before it is read."""

MAX_ARCHIVE_BYTES = 1 << 30
"""The most bytes a downloaded ``NAME.zip`` may have (1 GiB): the largest archives
on the TU site are a few hundred MB, MUTAG's a few dozen KB. A server that
announces more is refused before the body is read, one that sends more is cut
off there, and nothing is left on disk (:func:`~sparsegcn.datasets.download.download_file`'s
``max_bytes``)."""

_DATA_FILES = (
    "A",
    "graph_indicator",
    "graph_labels",
    "node_labels",
    "node_attributes",
    "edge_labels",
    "edge_attributes",
    "graph_attributes",
)
"""The suffixes of the files :func:`read_tu` reads (``NAME_<suffix>.txt``)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


FLOAT32_MAX = float(np.finfo(np.float32).max)
INT64_RANGE = (-(2**63), 2**63 - 1)


def _rows(path: Path, kind: type, width: int | None = None) -> np.ndarray:
    """The comma-separated rows of ``path`` as ``[lines, columns]``.

    Every line must hold the same number of values (``width`` when given),
    each a 64-bit integer (``kind=int``) or a real that float32 holds
    finitely (``kind=float``: the attributes are kept as float32). Blank
    lines at the end and a UTF-8 byte-order mark at the start are ignored;
    blank lines anywhere else are refused.

    Raises:
      ValueError: naming ``path``, the line (1-based) and what is wrong;
        :class:`~sparsegcn.files.CorruptFileError` when it is not UTF-8 text.
      NotRegularFileError: ``path`` is a FIFO, a device, a folder (never read).
    """
    with reading(path):
        lines = read_text(path).removeprefix("\ufeff").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ValueError(f"{path}: the file is empty")
    counts = np.array([line.count(",") + 1 for line in lines])
    expected = width if width is not None else int(counts[0])
    blank = [i for i, line in enumerate(lines) if not line.strip()]
    if blank:
        raise ValueError(f"{path} line {blank[0] + 1}: empty line")
    wrong = np.flatnonzero(counts != expected)
    if wrong.size:
        i = int(wrong[0])
        raise ValueError(
            f"{path} line {i + 1}: expected {expected} comma-separated values, got "
            f"{int(counts[i])}: {lines[i]!r}"
        )
    joined = ",".join(lines)
    try:  # Python's number syntax takes "1_0" for 10; a TU file's does not
        values = None
        if "_" not in joined:
            values = np.array(joined.split(",")).astype(np.int64 if kind is int else np.float64)
    except (ValueError, OverflowError):  # OverflowError: an integer past 64 bits
        values = None
    if values is not None and (kind is int or (np.abs(values) <= FLOAT32_MAX).all()):
        return values.reshape(len(lines), expected)
    for i, line in enumerate(lines):
        for token in line.split(","):
            _check_token(path, i + 1, token, kind)
    raise AssertionError("unreachable: a row failed to parse but no token did")


def _check_token(path: Path, line: int, token: str, kind: type) -> None:
    """Refuses one value of :func:`_rows`, naming the file, the line and why."""
    where = f"{path} line {line}: {token.strip()!r}"
    try:
        if "_" in token:
            raise ValueError(token)
        value = kind(token)
    except ValueError:
        raise ValueError(
            f"{where} is not {'an integer' if kind is int else 'a finite number'}"
        ) from None
    if kind is int and not INT64_RANGE[0] <= value <= INT64_RANGE[1]:
        raise ValueError(f"{where} is out of the 64-bit integer range")
    if kind is float and not np.isfinite(value):
        raise ValueError(f"{where} is not a finite number")
    if kind is float and abs(value) > FLOAT32_MAX:
        raise ValueError(f"{where} is too large for float32 (at most {FLOAT32_MAX:.4g})")


def _check_lines(path: Path, rows: np.ndarray, count: int, what: str) -> None:
    if rows.shape[0] != count:
        raise ValueError(f"{path}: expected {count} lines (one per {what}), got {rows.shape[0]}")


MIN_ONE_HOT_LIMIT = 1024
"""How many values a label column may span whatever its number of lines (see
:func:`one_hot_columns`)."""


def one_hot_columns(labels: np.ndarray, *, source: str = "labels") -> np.ndarray:
    """``[n, k]`` integer labels -> float32 one-hot blocks, one per column.

    Column ``j`` gets ``max_j - min_j + 1`` indicator columns (values are
    shifted by the column's minimum, as PyG's ``TUDataset`` does), so a
    value absent from the column still has its (all-zero) indicator.

    A column may span at most ``max(n, MIN_ONE_HOT_LIMIT)`` values: labels
    are categories, and a wider range (one line edited to ``200000``) would
    mostly be absent values, yet cost ``n`` times its width in float32 memory.
    Such a column is refused, not re-numbered, so every accepted file gives
    the same features as PyG.

    Raises:
      ValueError: a column spanning too many values, naming ``source`` (the
        file), the column and its range.
    """
    blocks = []
    limit = max(labels.shape[0], MIN_ONE_HOT_LIMIT)
    for j, column in enumerate(labels.T):
        low, high = int(column.min()), int(column.max())  # Python ints: no overflow
        if high - low + 1 > limit:
            raise ValueError(
                f"{source}: label column {j + 1} spans the values {low} .. {high}, "
                f"{high - low + 1:,} one-hot columns for {labels.shape[0]} lines; at most "
                f"{limit:,} (the number of lines, or {MIN_ONE_HOT_LIMIT}) are accepted"
            )
        shifted = column - low
        block = np.zeros((column.shape[0], high - low + 1), np.float32)
        block[np.arange(column.shape[0]), shifted] = 1.0
        blocks.append(block)
    return np.concatenate(blocks, axis=1)


def _optional(folder: Path, name: str, suffix: str) -> Path | None:
    """``folder/NAME_<suffix>.txt``, or ``None`` when there is no such entry.

    Raises:
      NotRegularFileError: it is a FIFO, a device or a folder (a FIFO would
        block the read forever, so it is refused rather than read or skipped).
      FileNotFoundError: a broken symbolic link.
    """
    path = folder / f"{name}_{suffix}.txt"
    return check_regular_file(path) if os.path.lexists(path) else None


def read_tu(folder: str | Path, name: str) -> GraphDataset:
    """Reads the TU files ``folder/NAME_*.txt`` (see the module table).

    Args:
      folder: the dataset's folder.
      name: ``NAME``, the files' prefix.

    Returns:
      A :class:`GraphDataset`; graphs and nodes keep the files' order.

    Raises:
      ValueError: a missing required file, or a malformed one (the message
        names the file and line): wrong counts of lines or values, ids out of
        range, node ids of one graph not contiguous, an edge between two
        graphs, a label column spanning too many values
        (:func:`one_hot_columns`).
      NotRegularFileError: one of the files is a FIFO, a device or a folder.
    """
    folder = Path(folder)
    for suffix in ("A", "graph_indicator"):
        if _optional(folder, name, suffix) is None:
            raise ValueError(f"{folder / f'{name}_{suffix}.txt'} is missing (required by TU)")
    regression = _optional(folder, name, "graph_labels") is None
    if regression and _optional(folder, name, "graph_attributes") is None:
        raise ValueError(
            f"{folder / f'{name}_graph_labels.txt'} is missing, and so is "
            f"{name}_graph_attributes.txt: TU needs one of them as the graphs' labels"
        )
    path = folder / f"{name}_graph_indicator.txt"
    indicator = _rows(path, int, 1)[:, 0]
    step = np.diff(indicator)
    if indicator[0] != 1 or ((step != 0) & (step != 1)).any():
        bad = 0 if indicator[0] != 1 else int(np.flatnonzero((step != 0) & (step != 1))[0]) + 1
        raise ValueError(
            f"{path} line {bad + 1}: graph id {int(indicator[bad])}; graph ids must start at "
            "1 and number the graphs in order, each graph's nodes on consecutive lines"
        )
    num_nodes = indicator.shape[0]
    num_graphs = int(indicator[-1])
    node_graph = indicator - 1
    node_ptr = np.searchsorted(node_graph, np.arange(num_graphs + 1)).astype(np.int64)

    if not regression:
        path = folder / f"{name}_graph_labels.txt"
        graph_labels = _rows(path, int, 1)[:, 0]
        _check_lines(path, graph_labels[:, None], num_graphs, "graph")
        classes, inverse = np.unique(graph_labels, return_inverse=True)
        labels: np.ndarray = inverse.astype(np.int32)

    path = folder / f"{name}_A.txt"
    edges = _rows(path, int, 2)
    out = np.flatnonzero((edges < 1).any(axis=1) | (edges > num_nodes).any(axis=1))
    if out.size:
        i = int(out[0])
        raise ValueError(
            f"{path} line {i + 1}: node id out of [1, {num_nodes}]: "
            f"{int(edges[i, 0])}, {int(edges[i, 1])}"
        )
    edges = edges - 1
    cross = np.flatnonzero(node_graph[edges[:, 0]] != node_graph[edges[:, 1]])
    if cross.size:
        i = int(cross[0])
        raise ValueError(
            f"{path} line {i + 1}: edge {int(edges[i, 0]) + 1}, {int(edges[i, 1]) + 1} joins "
            f"graphs {int(node_graph[edges[i, 0]]) + 1} and {int(node_graph[edges[i, 1]]) + 1}"
        )
    # Edges sorted by graph (stably: each graph's edges keep the file's order).
    order = np.argsort(node_graph[edges[:, 0]], kind="stable")
    edge_graph = node_graph[edges[order, 0]]
    edge_ptr = np.searchsorted(edge_graph, np.arange(num_graphs + 1)).astype(np.int64)

    columns = []
    if (found := _optional(folder, name, "node_labels")) is not None:
        path = found
        node_labels = _rows(path, int)
        _check_lines(path, node_labels, num_nodes, "node")
        columns.append(one_hot_columns(node_labels, source=str(path)))
    if (found := _optional(folder, name, "node_attributes")) is not None:
        path = found
        attributes = _rows(path, float)
        _check_lines(path, attributes, num_nodes, "node")
        columns.append(attributes.astype(np.float32))
    features = np.concatenate(columns, axis=1) if columns else np.ones((num_nodes, 1), np.float32)

    edge_columns = []
    if (found := _optional(folder, name, "edge_labels")) is not None:
        path = found
        edge_labels = _rows(path, int)
        _check_lines(path, edge_labels, edges.shape[0], f"line of {name}_A.txt")
        edge_columns.append(one_hot_columns(edge_labels, source=str(path)))
    if (found := _optional(folder, name, "edge_attributes")) is not None:
        path = found
        attributes = _rows(path, float)
        _check_lines(path, attributes, edges.shape[0], f"line of {name}_A.txt")
        edge_columns.append(attributes.astype(np.float32))
    edge_features = np.concatenate(edge_columns, axis=1)[order] if edge_columns else None

    targets = None
    if (found := _optional(folder, name, "graph_attributes")) is not None:
        path = found
        values = _rows(path, float)
        _check_lines(path, values, num_graphs, "graph")
        targets = values.astype(np.float32)
    if regression:  # the attributes are the labels (finite: _rows refuses the rest)
        assert targets is not None
        labels, classes = targets, np.arange(targets.shape[1])  # float32 [G, T]

    return GraphDataset(
        name=TU_PREFIX + name,
        senders=edges[order, 0].astype(np.int32),
        receivers=edges[order, 1].astype(np.int32),
        node_ptr=node_ptr,
        edge_ptr=edge_ptr,
        features=np.ascontiguousarray(features, np.float32),
        labels=labels,
        num_classes=int(classes.shape[0]),
        classes=classes,
        edge_features=edge_features,
        targets=targets,
        info={"source": TU_URL.format(name=name), "folder": str(folder)},
        metric="mae" if regression else "acc",
    )


def check_tu_name(dataset: str) -> str:
    """``NAME`` of ``"tu:NAME"``; ``ValueError`` naming a malformed one."""
    name = dataset[len(TU_PREFIX) :] if dataset.startswith(TU_PREFIX) else ""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"dataset {dataset!r}: expected tu:NAME with NAME a TU dataset's name "
            "(letters, digits, '_', '-', '.'), e.g. tu:MUTAG"
        )
    return name


def download_tu(name: str, folder: Path, *, url: str | None = None, progress: bool = False) -> bool:
    """Fetches ``NAME.zip`` from the TU site into ``folder`` (which must not exist).

    The recorded data files (:data:`TU_SHA256`) are unpacked into a temporary
    folder beside ``folder``; each must match its sha256, and only then is
    the folder renamed into place. Nothing is left behind on failure. A
    folder that another load (downloading the same dataset at the same time)
    put in place first is kept and this copy discarded
    (:func:`~sparsegcn.files.rename_into_place`). Other
    members (a README) are not unpacked, and a ``NAME_*`` file without a
    recorded sha256 (``NAME_node_attributes.txt``, which :func:`read_tu`
    would read) refuses the archive: every file the loader reads is checked.

    The archive is streamed to disk (at most :data:`MAX_ARCHIVE_BYTES`) and
    read from there, one member at a time: neither the archive nor a member
    is held in memory whole.

    Returns:
      True when this download is now ``folder``; False when another load's
      folder was there first (its files are not checked here:
      :func:`load_tu` checks them as it checks any folder already there).

    Raises:
      ValueError: ``name`` has no recorded checksums (the message says where
        to put the files instead), an archive larger than
        :data:`MAX_ARCHIVE_BYTES`, an archive member that would land outside
        the folder, an unrecorded data file, or a checksum mismatch;
        :class:`~sparsegcn.files.CorruptFileError` naming the archive and
        its URL when it is not a zip archive (or a truncated or corrupt one).
      OSError: the download failed.
    """
    if name not in TU_SHA256:
        raise ValueError(
            f"{folder} is missing and tu:{name} has no recorded sha256 to check a download "
            f"against (recorded: {sorted(TU_SHA256)}); put {name}_A.txt, "
            f"{name}_graph_indicator.txt, {name}_graph_labels.txt, ... into {folder}"
        )
    source = url or TU_URL.format(name=name)
    staging = temp_folder(folder.parent, name, "part")  # a kill -9's is removed next time
    try:
        archive = download_file(
            source,
            staging / f"{name}.zip",
            sha256=None,
            progress=progress,
            max_bytes=MAX_ARCHIVE_BYTES,
        )
        with reading(f"{name}.zip from {source}"), zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                base = Path(member).name
                if member.endswith("/") or not base:
                    continue
                if ".." in Path(member).parts or Path(member).is_absolute():
                    raise ValueError(f"{name}.zip: member {member!r} leaves the folder")
                size = zf.getinfo(member).file_size
                if size > MAX_MEMBER_BYTES:  # a zip bomb would fill memory before the check
                    raise ValueError(
                        f"{name}.zip: member {member!r} expands to {size:,} bytes, over the "
                        f"{MAX_MEMBER_BYTES:,} a TU data file may have; nothing was installed"
                    )
                if base not in TU_SHA256[name]:
                    if base.startswith(f"{name}_"):
                        raise ValueError(
                            f"{name}.zip holds {member!r}, a data file without a recorded "
                            f"sha256 (recorded: {sorted(TU_SHA256[name])}); nothing was installed"
                        )
                    continue
                with zf.open(member) as src, open(staging / base, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        archive.unlink()
        for file, expected in TU_SHA256[name].items():
            if not (staging / file).exists():
                raise ValueError(f"{name}.zip from {source} lacks {file}")
            actual = sha256_file(staging / file)
            if actual != expected:
                raise ValueError(
                    f"sha256 mismatch for {file} in {name}.zip: expected {expected}, got {actual}"
                )
        installed = rename_into_place(staging, folder)
    except BaseException:
        discard_temp_folder(staging)
        raise
    if not installed:
        shutil.rmtree(staging, ignore_errors=True)
    return installed


def verify_tu(folder: str | Path, name: str) -> None:
    """Checks a folder of a recorded dataset (:data:`TU_SHA256`) against its checksums.

    Every recorded file must be there with its recorded sha256, and no other
    file :func:`read_tu` reads (``NAME_node_attributes.txt`` for MUTAG) may be:
    so every file the loaded dataset comes from is the published one. A name
    without recorded checksums (a folder put there by hand) is not checked.

    Raises:
      CorruptFileError: a recorded file whose sha256 differs (edited,
        truncated), naming the file and both digests.
      ValueError: a recorded file is missing, or an unrecorded data file is
        present (naming it).
      NotRegularFileError: a recorded file is a FIFO, a device or a folder.
    """
    folder = Path(folder)
    recorded = TU_SHA256.get(name)
    if recorded is None:
        return
    fresh = f"delete {folder} and load again with download=True to fetch a fresh copy"
    for file, expected in recorded.items():
        path = folder / file
        if not os.path.lexists(path):
            raise ValueError(f"{path} is missing: it is a recorded file of tu:{name}; {fresh}")
        actual = sha256_file(path)
        if actual != expected:
            raise CorruptFileError(
                path,
                f"changed or truncated: its sha256 is {actual}, but the published file's "
                f"(TU_SHA256) is {expected}; {fresh}",
            )
    for suffix in _DATA_FILES:
        file = f"{name}_{suffix}.txt"
        if file not in recorded and os.path.lexists(folder / file):
            raise ValueError(
                f"{folder / file} is not a file of the published tu:{name} (it has no "
                f"recorded sha256: {sorted(recorded)}), but it would be read into the "
                f"dataset; remove it, or {fresh}"
            )


def load_tu(
    dataset: str,
    root: str | Path,
    *,
    download: bool = True,
    url: str | None = None,
    progress: bool = False,
) -> GraphDataset:
    """``tu:NAME`` from ``<root>/tu/NAME/``, downloaded first when missing.

    A folder already there is checked first (:func:`verify_tu`) when ``NAME``
    has recorded checksums, on every load: hashing MUTAG's files adds well
    under a millisecond. So is one that a concurrent load of the same
    dataset put there while this one was downloading (this copy is dropped).

    Args:
      dataset: ``"tu:NAME"``.
      root: the data root.
      download: fetch a missing folder (:func:`download_tu`).
      url: the archive's URL (default :data:`TU_URL`; tests serve their own).
      progress: a download progress bar.

    Raises:
      ValueError: a malformed name, a ``root`` or ``<root>/tu/NAME`` that is
        not a folder or lies under a file (naming it), a missing folder with
        ``download=False``, a folder that fails :func:`verify_tu` (a changed
        file is a :class:`~sparsegcn.files.CorruptFileError`), or what
        :func:`read_tu` and :func:`download_tu` raise.
      NotRegularFileError: a file of the folder is a FIFO, a device or a folder.
      OSError: the download failed.
    """
    name = check_tu_name(dataset)
    check_folder_path(root, what="root")
    folder = check_folder_path(Path(root) / "tu" / name, what=f"tu:{name}'s folder")
    installed = False
    if not folder.exists():
        if not download:
            raise ValueError(f"{folder} is missing; download it or drop download=False")
        check_may_download(f"tu:{name}", folder.parent)
        installed = download_tu(name, folder, url=url, progress=progress)  # checks its files
    if not installed:  # there before, or put there by a concurrent load meanwhile
        verify_tu(folder, name)
    return read_tu(folder, name)


__all__ = ["TU_PREFIX", "TU_SHA256", "TU_URL", "load_tu", "read_tu", "verify_tu"]

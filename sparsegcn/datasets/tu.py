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
labels (one block per label column, over the values present, as PyG's
``TUDataset``) followed by the node attributes; edge features likewise.
A file that breaks the format is refused with a ``ValueError`` naming the
file and the line. A missing folder is downloaded from the TU site
(:data:`TU_URL`) and each extracted file checked against its recorded
sha256 (:data:`TU_SHA256`).

References:
  Morris et al., *TUDataset: A collection of benchmark datasets for learning
  with graphs*, ICML 2020 GRL+ workshop. https://chrsmrrs.github.io/datasets/
"""

from __future__ import annotations

import io
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np

from sparsegcn.datasets import TU_PREFIX
from sparsegcn.datasets.download import download_file, sha256_file
from sparsegcn.datasets.graph_dataset import GraphDataset
from sparsegcn.files import temp_folder

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
"""The most bytes one file of a downloaded TU archive may expand to: an archive is
unpacked in memory, so a member claiming more is refused before it is read."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def _rows(path: Path, kind: type, width: int | None = None) -> np.ndarray:
    """The comma-separated rows of ``path`` as ``[lines, columns]``.

    Every line must hold the same number of values (``width`` when given),
    each an integer (``kind=int``) or a finite real. Blank lines at the end
    are ignored; anywhere else they are refused.

    Raises:
      ValueError: naming ``path``, the line (1-based) and what is wrong.
    """
    lines = path.read_text().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ValueError(f"{path.name}: the file is empty")
    counts = np.array([line.count(",") + 1 for line in lines])
    expected = width if width is not None else int(counts[0])
    blank = [i for i, line in enumerate(lines) if not line.strip()]
    if blank:
        raise ValueError(f"{path.name} line {blank[0] + 1}: empty line")
    wrong = np.flatnonzero(counts != expected)
    if wrong.size:
        i = int(wrong[0])
        raise ValueError(
            f"{path.name} line {i + 1}: expected {expected} comma-separated values, got "
            f"{int(counts[i])}: {lines[i]!r}"
        )
    tokens = ",".join(lines).split(",")
    try:
        values = np.array(tokens).astype(np.int64 if kind is int else np.float64)
    except ValueError:
        values = None
    if values is not None and (kind is int or np.isfinite(values).all()):
        return values.reshape(len(lines), expected)
    for i, line in enumerate(lines):
        for token in line.split(","):
            try:
                value = kind(token)
            except ValueError:
                value = None
            if value is None or (kind is float and not np.isfinite(value)):
                what = "an integer" if kind is int else "a finite number"
                raise ValueError(f"{path.name} line {i + 1}: {token.strip()!r} is not {what}")
    raise AssertionError("unreachable: a row failed to parse but no token did")


def _check_lines(path: Path, rows: np.ndarray, count: int, what: str) -> None:
    if rows.shape[0] != count:
        raise ValueError(
            f"{path.name}: expected {count} lines (one per {what}), got {rows.shape[0]}"
        )


def one_hot_columns(labels: np.ndarray) -> np.ndarray:
    """``[n, k]`` integer labels -> float32 one-hot blocks, one per column.

    Column ``j`` gets ``max_j - min_j + 1`` indicator columns (values are
    shifted by the column's minimum, as PyG's ``TUDataset`` does).
    """
    blocks = []
    for column in labels.T:
        shifted = column - column.min()
        block = np.zeros((column.shape[0], int(shifted.max()) + 1), np.float32)
        block[np.arange(column.shape[0]), shifted] = 1.0
        blocks.append(block)
    return np.concatenate(blocks, axis=1)


def _optional(folder: Path, name: str, suffix: str) -> Path | None:
    path = folder / f"{name}_{suffix}.txt"
    return path if path.exists() else None


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
        graphs.
    """
    folder = Path(folder)
    for suffix in ("A", "graph_indicator"):
        if not (folder / f"{name}_{suffix}.txt").exists():
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
            f"{path.name} line {bad + 1}: graph id {int(indicator[bad])}; graph ids must start at "
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
            f"{path.name} line {i + 1}: node id out of [1, {num_nodes}]: "
            f"{int(edges[i, 0])}, {int(edges[i, 1])}"
        )
    edges = edges - 1
    cross = np.flatnonzero(node_graph[edges[:, 0]] != node_graph[edges[:, 1]])
    if cross.size:
        i = int(cross[0])
        raise ValueError(
            f"{path.name} line {i + 1}: edge {int(edges[i, 0]) + 1}, {int(edges[i, 1]) + 1} joins "
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
        columns.append(one_hot_columns(node_labels))
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
        edge_columns.append(one_hot_columns(edge_labels))
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


def download_tu(name: str, folder: Path, *, url: str | None = None, progress: bool = False):
    """Fetches ``NAME.zip`` from the TU site into ``folder`` (which must not exist).

    The recorded data files (:data:`TU_SHA256`) are unpacked into a temporary
    folder beside ``folder``; each must match its sha256, and only then is
    the folder renamed into place. Nothing is left behind on failure. Other
    members (a README) are not unpacked, and a ``NAME_*`` file without a
    recorded sha256 (``NAME_node_attributes.txt``, which :func:`read_tu`
    would read) refuses the archive: every file the loader reads is checked.

    Raises:
      ValueError: ``name`` has no recorded checksums (the message says where
        to put the files instead), an archive member that would land outside
        the folder, an unrecorded data file, or a checksum mismatch.
      OSError: the download failed.
    """
    if name not in TU_SHA256:
        raise ValueError(
            f"{folder} is missing and tu:{name} has no recorded sha256 to check a download "
            f"against (recorded: {sorted(TU_SHA256)}); put {name}_A.txt, "
            f"{name}_graph_indicator.txt, {name}_graph_labels.txt, ... into {folder}"
        )
    staging = temp_folder(folder.parent, name, "part")  # a kill -9's is removed next time
    try:
        archive = download_file(
            url or TU_URL.format(name=name), staging / f"{name}.zip", sha256=None, progress=progress
        )
        with zipfile.ZipFile(io.BytesIO(archive.read_bytes())) as zf:
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
                (staging / base).write_bytes(zf.read(member))
        archive.unlink()
        for file, expected in TU_SHA256[name].items():
            if not (staging / file).exists():
                raise ValueError(f"{name}.zip from {url or TU_URL.format(name=name)} lacks {file}")
            actual = sha256_file(staging / file)
            if actual != expected:
                raise ValueError(
                    f"sha256 mismatch for {file} in {name}.zip: expected {expected}, got {actual}"
                )
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_tu(
    dataset: str,
    root: str | Path,
    *,
    download: bool = True,
    url: str | None = None,
    progress: bool = False,
) -> GraphDataset:
    """``tu:NAME`` from ``<root>/tu/NAME/``, downloaded first when missing.

    Args:
      dataset: ``"tu:NAME"``.
      root: the data root.
      download: fetch a missing folder (:func:`download_tu`).
      url: the archive's URL (default :data:`TU_URL`; tests serve their own).
      progress: a download progress bar.
    """
    name = check_tu_name(dataset)
    folder = Path(root) / "tu" / name
    if not folder.exists():
        if not download:
            raise ValueError(f"{folder} is missing; download it or drop download=False")
        download_tu(name, folder, url=url, progress=progress)
    return read_tu(folder, name)


__all__ = ["TU_PREFIX", "TU_SHA256", "TU_URL", "load_tu", "read_tu"]

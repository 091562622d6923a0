"""OGB link-property datasets read from OGB's raw layout, without ``ogb`` or torch.

A dataset folder ``<root>/ogbl_collab/`` (etc.) is what ``ogb``'s
``LinkPropPredDataset`` downloads and unzips:

- ``raw/num-node-list.csv.gz``: one line, the node count ``N``;
- ``raw/edge.csv.gz``: ``s,t`` per line, the training edges (the graph
  ``ogb`` returns as ``dataset[0]``);
- ``raw/node-feat.csv.gz``: ``N`` lines of ``F`` numbers (not ogbl-ddi);
- ``raw/node_year.csv.gz``: ``N`` years (ogbl-citation2);
- ``split/<type>/{train,valid,test}.pt`` (or one ``split_dict.pt``):
  ``torch.save`` files of dicts, read by
  :func:`~sparsegcn.datasets.torchfile.read_torch_file`.

**Why not** ``torch.load``: the split files are pickles. ``weights_only=False``
would run whatever they name; ``weights_only=True`` refuses the NumPy arrays
ogbl-collab's files hold (and, on torch >= 2.6, protocol-4 pickles). The
reader here admits only NumPy's array reconstruction and torch's tensor and
storage records, which it replaces by NumPy stand-ins, so torch is not
needed and nothing else in a file can run.

The split dicts, per dataset (``get_edge_split()`` in ``ogb``):

==================  ==========================================================
ogbl-collab         ``train``: ``edge`` [P, 2], ``weight`` [P], ``year`` [P];
                    ``valid``/``test``: also ``edge_neg`` [Q, 2]
ogbl-ddi, ogbl-ppa  ``edge`` [P, 2]; ``valid``/``test``: ``edge_neg`` [Q, 2]
ogbl-citation2      ``source_node`` [P], ``target_node`` [P];
                    ``valid``/``test``: ``target_node_neg`` [P, 1000]
==================  ==========================================================

They become a :class:`~sparsegcn.datasets.links.LinkDataset`: ``edge`` (or
the stacked ``source_node, target_node``) as ``[P, 2]`` pairs,
``edge_neg`` as ``"pairs"`` negatives, ``target_node_neg`` as ``"targets"``
negatives, collab's training ``weight``/``year`` as ``edge_weight``/``edge_year``.

**Downloads.** No sha256 of the ``ogbl`` archives has been published that
could be checked here, so a missing folder is not downloaded (``ogb`` would
fetch it unverified over plain http): the error says where to unzip the
archive. :data:`ARCHIVE_SHA256` is where a verified digest would go.

References:
  Hu et al., *Open Graph Benchmark: Datasets for Machine Learning on
  Graphs*, NeurIPS 2020, https://arxiv.org/abs/2005.00687 ;
  dataset pages: https://ogb.stanford.edu/docs/linkprop/
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from sparsegcn.datasets.base import check_may_download
from sparsegcn.datasets.link_base import LinkDataset, check_node_ids, symmetric_graph
from sparsegcn.datasets.torchfile import read_torch_file, write_torch_file
from sparsegcn.files import (
    CorruptFileError,
    check_regular_file,
    discard_temp_folder,
    reading,
    temp_folder,
    write_atomic,
)


class LinkLayout(NamedTuple):
    """What the reader needs to know of an OGB link dataset (``ogb``'s
    ``linkproppred/master.csv``).

    Attributes:
      download_name: the archive's folder name (and file stem).
      split: the folder under ``split/``.
      metric: the evaluation metric.
      directed: ``add_inverse_edge`` is false: the pairs are ordered.
      features: whether ``raw/node-feat.csv.gz`` exists.
      node_year: whether ``raw/node_year.csv.gz`` exists.
      license: from the dataset page.
    """

    download_name: str
    split: str
    metric: str
    directed: bool
    features: bool
    node_year: bool
    license: str


OGBL_LAYOUTS = {
    "ogbl-collab": LinkLayout("collab", "time", "hits@50", False, True, False, "ODC-BY"),
    "ogbl-citation2": LinkLayout("citation-v2", "time", "mrr", True, True, True, "ODC-BY"),
    "ogbl-ddi": LinkLayout("ddi", "target", "hits@20", False, False, False, "CC-0"),
    "ogbl-ppa": LinkLayout("ppassoc", "throughput", "hits@100", False, True, False, "CC-0"),
}
URL = "https://snap.stanford.edu/ogb/data/linkproppred/{}.zip"
ARCHIVE_SHA256: dict[str, str | None] = {name: None for name in OGBL_LAYOUTS}
"""Published sha256 of each archive; ``None``: none known, so it is not downloaded."""


def _pandas():
    try:
        import pandas as pd
    except ImportError as err:
        raise ImportError(
            "reading OGB's CSV files needs pandas: pip install 'sparsegcn[ogb]' or pandas"
        ) from err
    return pd


CHUNK_ROWS = 1 << 21
"""CSV lines parsed at a time."""


def read_csv(path: Path, *, columns: int | None, integer: bool) -> np.ndarray:
    """A headerless gzip CSV as int64 (``integer``) or float32 ``[rows, columns]``.

    Parsed by pandas' C reader straight into the dtype, ``CHUNK_ROWS`` lines
    at a time; only when that fails is the file read again as text, to find
    the first bad line and say what is wrong with it.

    Args:
      path: the ``.csv.gz`` file.
      columns: the expected number of values per line, or ``None`` (any, but
        the same on every line).
      integer: read integers (ids, years, counts); else real numbers.

    Raises:
      FileNotFoundError: ``path`` is missing.
      CorruptFileError: not gzip, truncated, or a line with more values than
        the first (pandas' message gives the line).
      ValueError: ``path, line L, column C``: a missing value or one that is
        not a number (an integer, when ``integer``); or the wrong number of
        values per line.
    """
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    check_regular_file(path)
    pd = _pandas()
    dtype = np.int64 if integer else np.float32
    parts = []
    try:
        with reading(path):
            reader = pd.read_csv(
                path, header=None, compression="gzip", dtype=dtype, chunksize=CHUNK_ROWS
            )
            with reader:
                for frame in reader:
                    parts.append(frame.to_numpy())
    except CorruptFileError as err:
        # A value that does not parse as the dtype: find and name it. A line
        # with too many fields is already named by pandas ("Expected 2 fields in line 3").
        if not err.cause.startswith("malformed CSV") or "Expected" in err.cause:
            raise
        _find_bad_value(path, integer, err)
        raise
    if not parts:
        return np.zeros((0, columns or 1), dtype)
    out = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if columns is not None and out.shape[1] != columns:
        raise ValueError(f"{path}, line 1: {out.shape[1]} value(s) per line, expected {columns}")
    if not integer:
        bad = np.isnan(out).any(axis=1)
        if bad.any():
            _find_bad_value(path, integer, None)
    return out


def _find_bad_value(path: Path, integer: bool, cause: BaseException | None) -> None:
    """Raises ``ValueError`` naming the first line and column of ``path`` whose value is
    missing or not a number (an integer, when ``integer``); returns if there is none."""
    pd = _pandas()
    with reading(path):
        reader = pd.read_csv(
            path, header=None, compression="gzip", dtype=str, na_filter=False, chunksize=CHUNK_ROWS
        )
        with reader:
            first = 0
            for frame in reader:
                for j in range(frame.shape[1]):
                    text = frame.iloc[:, j]
                    values = pd.to_numeric(text, errors="coerce").to_numpy(
                        np.float64, na_value=np.nan
                    )
                    bad = np.isnan(values)
                    if integer:
                        bad |= values != np.floor(values)
                    if bad.any():
                        row = int(np.flatnonzero(bad)[0])
                        value = text.iloc[row]
                        kind = "an integer" if integer else "a number"
                        what = "a missing value" if value == "" else f"{value!r} is not {kind}"
                        raise ValueError(
                            f"{path}, line {first + row + 1}, column {j + 1}: {what}"
                        ) from cause
                first += frame.shape[0]


def _num_nodes(folder: Path) -> int:
    path = folder / "raw" / "num-node-list.csv.gz"
    counts = read_csv(path, columns=1, integer=True).ravel()
    if counts.shape != (1,) or counts[0] < 1:
        raise ValueError(f"{path} must hold one positive node count, got {counts.tolist()}")
    return int(counts[0])


def _split_dict(folder: Path, split: str) -> tuple[dict, dict]:
    """``{"train", "valid", "test"} -> dict`` and the file each came from."""
    base = folder / "split" / split
    whole = base / "split_dict.pt"
    if whole.exists():
        loaded = read_torch_file(whole)
        if not (isinstance(loaded, dict) and {"train", "valid", "test"} <= set(loaded)):
            raise ValueError(f"{whole} must hold a dict with keys train, valid, test")
        return {k: loaded[k] for k in ("train", "valid", "test")}, dict.fromkeys(loaded, whole)
    parts, files = {}, {}
    for key in ("train", "valid", "test"):
        path = base / f"{key}.pt"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing (the {key!r} split of OGB's layout)")
        parts[key], files[key] = read_torch_file(path), path
    return parts, files


def _field(part: dict, key: str, path: Path, split: str, ndim: int, columns: int | None = None):
    where = f"{path} ({split}[{key!r}])"
    if not isinstance(part, dict):
        raise ValueError(f"{path} must hold a dict of arrays, got {type(part).__name__}")
    if key not in part:
        raise ValueError(f"{path}: the {split!r} split has no {key!r} (keys: {sorted(part)})")
    array = np.asarray(part[key])
    if array.ndim != ndim or (columns is not None and array.shape[1] != columns):
        want = f"[n, {columns}]" if columns else ("[n]" if ndim == 1 else f"{ndim} dimensions")
        raise ValueError(f"{where} must be {want}, got shape {array.shape}")
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        if not np.issubdtype(array.dtype, np.floating):
            raise ValueError(f"{where} must hold integers, got dtype {array.dtype}")
        # collab's weights are saved as float. inf, nan and floats past int64 would cast
        # to garbage (INT64_MIN), so each value must be a whole number int64 holds.
        whole = np.isfinite(array) & (array == np.floor(array))
        whole &= (array >= -(2.0**63)) & (array < 2.0**63)
        if not whole.all():
            pos = np.unravel_index(int(np.flatnonzero(~whole.ravel())[0]), array.shape)
            index = ", ".join(str(int(i)) for i in pos)
            raise ValueError(
                f"{where}[{index}] = {float(array[pos])} is not an integer that int64 holds "
                f"(dtype {array.dtype})"
            )
        array = array.astype(np.int64)
    return array.astype(np.int64, copy=False)


def _check_weights(weights: np.ndarray, path: Path) -> None:
    """Refuses a weight below 1: collab's weight counts the papers a pair co-wrote that year."""
    bad = weights < 1
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{path} (train['weight'])[{i}] = {int(weights[i])}: a weight counts the papers "
            f"a pair co-wrote that year, at least 1 ({int(bad.sum())} bad weight(s) in all)"
        )


def _pairs_of(part: dict, path: Path, split: str, layout: LinkLayout) -> np.ndarray:
    if layout.directed:
        source = _field(part, "source_node", path, split, 1)
        target = _field(part, "target_node", path, split, 1)
        if source.shape != target.shape:
            raise ValueError(
                f"{path}: {split}['source_node'] {source.shape} and ['target_node'] "
                f"{target.shape} differ in length"
            )
        return np.stack([source, target], axis=1)
    return _field(part, "edge", path, split, 2, 2)


def _negatives_of(part: dict, path: Path, split: str, layout: LinkLayout) -> np.ndarray:
    if layout.directed:
        return _field(part, "target_node_neg", path, split, 2)
    return _field(part, "edge_neg", path, split, 2, 2)


def _missing_folder(name: str, root: Path, dataset_dir: Path, layout: LinkLayout) -> str:
    url = URL.format(layout.download_name)
    return (
        f"{name}: {str(dataset_dir)!r} does not exist. No published sha256 of {url} is "
        f"known, so it is not downloaded unverified: download that archive yourself, unzip it "
        f"into {str(root)!r} and rename its folder {layout.download_name!r} to "
        f"{dataset_dir.name!r} (the folder ogb's LinkPropPredDataset({name!r}, root=...) "
        f"creates is the same and is read as it is)"
    )


def _download(name: str, root: Path, layout: LinkLayout, url: str, *, progress: bool) -> None:
    """Downloads and extracts ``name`` against :data:`ARCHIVE_SHA256` (a known digest only)."""
    from sparsegcn.datasets.download import download_file
    from sparsegcn.datasets.ogb import _extract

    dataset_dir = root / name.replace("-", "_")
    check_may_download(name, root)
    root.mkdir(parents=True, exist_ok=True)
    work = temp_folder(root, dataset_dir.name, "download")
    try:
        archive = work / f"{layout.download_name}.zip"
        download_file(
            url,
            archive,
            sha256=ARCHIVE_SHA256[name],
            progress=progress,
        )
        _extract(archive, layout.download_name, dataset_dir)
    finally:
        discard_temp_folder(work)


def load_ogbl(
    name: str,
    root: str | os.PathLike,
    *,
    download: bool = True,
    progress: bool = False,
    url: str | None = None,
) -> LinkDataset:
    """Loads an OGB link dataset from ``<root>/<name with '_'>/`` with its official split.

    The message graph is ``raw/edge.csv.gz`` (the training edges), both
    directions, repeats merged (:func:`~sparsegcn.datasets.links.symmetric_graph`);
    citation2's is made symmetric too, as OGB's baseline does
    (``adj_t.to_symmetric()``), while its split pairs stay directed.

    Args:
      name: a key of :data:`OGBL_LAYOUTS`.
      root: the data root.
      download: fetch a missing folder when :data:`ARCHIVE_SHA256` has its
        digest (none is known: see the module docstring).
      progress: download progress bar.
      url: the archive's URL (default :data:`URL`, https).

    Raises:
      FileNotFoundError: the folder or one of its files is missing; for the
        folder, the message says where to unzip the archive.
      ValueError: a malformed file, naming it (and the line, for CSV) or
        the split key; a node id out of range; a split value that is no
        integer int64 holds (inf, nan, 1e30) or a weight below 1; a
        downloaded archive whose sha256 differs (it is deleted, nothing is
        left).
      pickle.UnpicklingError: a split file names a global outside
        :data:`~sparsegcn.datasets.torchfile.TORCH_GLOBALS`.
    """
    if name not in OGBL_LAYOUTS:
        raise ValueError(f"unknown OGB link dataset {name!r}; choose one of {list(OGBL_LAYOUTS)}")
    layout = OGBL_LAYOUTS[name]
    root = Path(root)
    dataset_dir = root / name.replace("-", "_")
    if dataset_dir.exists() and not dataset_dir.is_dir():
        raise ValueError(f"{name}: {str(dataset_dir)!r} exists but is not a directory")
    if not dataset_dir.exists():
        if not (download and ARCHIVE_SHA256[name]):
            raise FileNotFoundError(_missing_folder(name, root, dataset_dir, layout))
        source = url or URL.format(layout.download_name)
        _download(name, root, layout, source, progress=progress)
    n = _num_nodes(dataset_dir)
    raw = dataset_dir / "raw"
    edges = read_csv(raw / "edge.csv.gz", columns=2, integer=True)
    check_node_ids(f"{raw / 'edge.csv.gz'}: edge", edges, n)
    graph = symmetric_graph(edges, n)
    del edges
    features = None
    if layout.features:
        path = raw / "node-feat.csv.gz"
        features = read_csv(path, columns=None, integer=False)
        if features.shape[0] != n:
            raise ValueError(f"{path} has {features.shape[0]} lines, one per node expected ({n})")
    node_year = None
    if layout.node_year:
        path = raw / "node_year.csv.gz"
        node_year = read_csv(path, columns=1, integer=True).ravel()
        if node_year.shape[0] != n:
            raise ValueError(f"{path} has {node_year.shape[0]} lines, one per node expected ({n})")
    parts, files = _split_dict(dataset_dir, layout.split)
    split = {}
    for key in ("train", "valid", "test"):
        split[key] = _pairs_of(parts[key], files[key], key, layout)
        check_node_ids(f"{files[key]}: {key} pair", split[key], n)
    for key in ("valid", "test"):
        neg = _negatives_of(parts[key], files[key], key, layout)
        check_node_ids(f"{files[key]}: {key} negative", neg, n)
        split[f"{key}_neg"] = neg
    train = parts["train"]
    per_edge = {}
    for field, key in (("edge_weight", "weight"), ("edge_year", "year")):
        if isinstance(train, dict) and key in train:
            per_edge[field] = _field(train, key, files["train"], "train", 1)
            if key == "weight":
                _check_weights(per_edge[field], files["train"])
            if per_edge[field].shape[0] != split["train"].shape[0]:
                raise ValueError(
                    f"{files['train']}: train[{key!r}] has {per_edge[field].shape[0]} values, "
                    f"one per train edge expected ({split['train'].shape[0]})"
                )
    return LinkDataset(
        name=name,
        graph=graph,
        features=features,
        split=split,
        metric=layout.metric,
        directed=layout.directed,
        node_year=node_year,
        info={
            "source": URL.format(layout.download_name),
            "license": layout.license,
            "split": layout.split,
            "folder": str(dataset_dir),
        },
        negative_form="targets" if layout.directed else "pairs",
        **per_edge,
    )


def _write_csv(path: Path, array: np.ndarray, fmt: str) -> None:
    array = np.asarray(array)
    rows = array.reshape(array.shape[0], -1)

    def write(f) -> None:
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1, mtime=0) as gz:
            for start in range(0, rows.shape[0], CHUNK_ROWS):
                np.savetxt(gz, rows[start : start + CHUNK_ROWS], fmt=fmt, delimiter=",")

    write_atomic(path, write)


def save_ogbl_layout(dataset: LinkDataset, root: str | os.PathLike, name: str) -> Path:
    """Writes ``dataset`` as OGB's raw layout of ``name`` under ``<root>/<name with '_'>/``.

    The folder :func:`load_ogbl` (and ``ogb``'s ``LinkPropPredDataset``)
    reads: ``raw/`` CSV files (the training pairs as ``edge.csv.gz``, which
    ``ogb`` makes its graph; features printed with 9 significant digits,
    exact for float32; collab's ``edge_weight``/``edge_year``; citation2's
    ``node_year``), an empty ``processed/``, ``split/<type>/{train,valid,test}.pt`` as legacy
    ``torch.save`` streams of NumPy dicts (:func:`~sparsegcn.datasets.torchfile.write_torch_file`,
    as ogbl-collab ships them; ``ogb``'s own ``torch.load`` needs
    ``weights_only=False`` for them), and ``RELEASE_v1.txt``. For tests and
    benchmarks that need an ``ogbl-*`` folder without the download, e.g.
    from ``synthetic:collab``. Built in a temporary folder and renamed into
    place.

    Args:
      dataset: the data; its negatives must have the form ``name`` uses
        (pairs for collab, ddi, ppa; targets per source for citation2).
      root: the data root.
      name: a key of :data:`OGBL_LAYOUTS`.

    Returns:
      The dataset folder.

    Raises:
      ValueError: an unknown name, negatives of the other form, a dataset
        without the features the layout has, or an existing folder.
    """
    if name not in OGBL_LAYOUTS:
        raise ValueError(f"unknown OGB link dataset {name!r}; choose one of {list(OGBL_LAYOUTS)}")
    layout = OGBL_LAYOUTS[name]
    want = "targets" if layout.directed else "pairs"
    if dataset.negatives != want:
        raise ValueError(
            f"{name} stores {want!r} negatives, {dataset.name} has {dataset.negatives!r}"
        )
    if layout.features and dataset.features is None:
        raise ValueError(f"{name} has node features and {dataset.name} has none")
    if layout.node_year and dataset.node_year is None:
        raise ValueError(f"{name} has node years and {dataset.name} has none")
    folder = Path(root) / name.replace("-", "_")
    if folder.exists():
        raise ValueError(f"{str(folder)!r} exists; refusing to overwrite it")
    work = temp_folder(folder.parent, folder.name)
    try:
        _write_layout(dataset, work, layout)
        os.rename(work, folder)
    except BaseException:
        discard_temp_folder(work)
        raise
    return folder


def _write_layout(dataset: LinkDataset, work: Path, layout: LinkLayout) -> None:
    raw, split_dir = work / "raw", work / "split" / layout.split
    raw.mkdir()
    split_dir.mkdir(parents=True)
    (work / "processed").mkdir()  # where ogb writes its cache; its archives ship it empty
    train = np.asarray(dataset.split["train"])
    _write_csv(raw / "num-node-list.csv.gz", np.array([dataset.num_nodes]), "%d")
    _write_csv(raw / "num-edge-list.csv.gz", np.array([train.shape[0]]), "%d")
    _write_csv(raw / "edge.csv.gz", train, "%d")
    if layout.features:
        _write_csv(raw / "node-feat.csv.gz", np.asarray(dataset.features), "%.9g")
    if layout.node_year:
        _write_csv(raw / "node_year.csv.gz", np.asarray(dataset.node_year), "%d")
    parts: dict[str, dict] = {}
    for key in ("train", "valid", "test"):
        pairs = np.ascontiguousarray(dataset.split[key])
        if layout.directed:
            parts[key] = {"source_node": pairs[:, 0].copy(), "target_node": pairs[:, 1].copy()}
        else:
            parts[key] = {"edge": pairs}
    for key in ("valid", "test"):
        neg = np.ascontiguousarray(dataset.split[f"{key}_neg"])
        parts[key]["target_node_neg" if layout.directed else "edge_neg"] = neg
    for field, key in (("edge_weight", "weight"), ("edge_year", "year")):
        values = getattr(dataset, field)
        if values is not None:
            parts["train"][key] = np.asarray(values)
            _write_csv(raw / f"{field}.csv.gz", np.asarray(values), "%d")
    for key, part in parts.items():
        write_torch_file(part, split_dir / f"{key}.pt")
    (work / "RELEASE_v1.txt").write_text("written by sparsegcn.datasets.ogbl.save_ogbl_layout\n")


__all__ = [
    "ARCHIVE_SHA256",
    "CHUNK_ROWS",
    "OGBL_LAYOUTS",
    "URL",
    "LinkLayout",
    "load_ogbl",
    "read_csv",
    "save_ogbl_layout",
]

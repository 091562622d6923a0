"""Streaming conversion of OGB node-property raw files into the on-disk format.

``ogb``'s own loader reads every file whole into RAM (ogbn-papers100M
fails at 256 GB, snap-stanford/ogb#46), so it is not used here. The raw
files are read chunk by chunk instead:

- ``raw/edge.csv.gz`` (CSV layout: arxiv, products) or the ``edge_index``
  member of ``raw/data.npz`` (binary layout: papers100M), one pass;
- ``raw/node-feat.csv.gz`` or ``data.npz``'s ``node_feat``, row chunks;
- ``raw/node-label.csv.gz`` or ``raw/node-label.npz``'s ``node_label``
  (``NaN`` marks unlabelled nodes: label ``-1``);
- ``split/<type>/{train,valid,test}.csv.gz``;
- ``raw/num-node-list.csv.gz`` or ``data.npz``'s ``num_nodes_list``.

``.npz`` members are read straight from the zip archive with
``numpy.lib.format``'s header readers, never loaded whole.

**Edges.** The stored graph is the one :func:`~sparsegcn.datasets.ogb.load_ogb`
builds: both directions of every raw edge, then, for the directed
datasets (arxiv, papers100M: ``add_inverse_edge`` is false in ogb's
master table), repeated pairs merged as
:func:`~sparsegcn.transforms.to_undirected` does; for products (whose
raw edges ``ogb`` duplicates in reverse) every edge is kept, repeats
included. The pass over the raw edges appends each directed edge, as the
int64 key ``receiver * N + sender``, to one of ``P`` temporary bucket
files by receiver range (``16`` bytes of temporary disk per raw edge,
deleted bucket by bucket). Consecutive buckets are then read in groups of
at most ``group_edges`` keys, sorted (and de-duplicated), and written into
``indices``, with ``indptr`` from the row counts. Peak memory is about
``32 * group_edges`` bytes (keys, the row ids, the sender ids) plus one input
chunk (``2**22`` raw edges, about 0.5 GB with pandas' parsing; features
in chunks of :data:`FEATURE_CHUNK_BYTES`), whatever the graph's size: at
the default ``2**26``, about 2.6 GB, within the 8 GB allowed for
papers100M (a design figure: the full conversion was not run here). A single bucket larger
than ``group_edges`` (a node range far denser than the average) is still
read whole; there are ``4x`` more buckets than the average needs so that
only a strongly skewed id order can do that.

References:
  Hu et al., *Open Graph Benchmark: Datasets for Machine Learning on
  Graphs*, NeurIPS 2020. https://arxiv.org/abs/2005.00687
"""

from __future__ import annotations

import contextlib
import math
import sys
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm.auto import tqdm

from sparsegcn.datasets.base import SPLITS
from sparsegcn.datasets.ogb import LICENSES, _read_split, as_labels, download_verified
from sparsegcn.datasets.ondisk import FEATURE_DTYPES, DatasetWriter, _check_target
from sparsegcn.files import (
    check_inputs_outside,
    check_regular_file,
    check_work_folder,
    close_all,
    discard_temp_folder,
    naming_errors,
    reading,
    save_array,
    temp_folder,
    write_array,
)

GROUP_EDGES = 1 << 26
"""Default directed edges sorted at once: bounds the converter's memory."""
CHUNK_ROWS = 1 << 22
"""Default raw edges, feature rows or labels read at a time."""
FEATURE_CHUNK_BYTES = 1 << 27
"""Feature bytes (as float32) read at a time: 262k rows of 128 features."""
_BUCKETS_PER_GROUP = 4


class OgbLayout(NamedTuple):
    """What the converter needs to know about an OGB node-property dataset
    (the values of ``ogb``'s ``nodeproppred/master.csv``).

    Attributes:
      num_classes: ``C``.
      add_inverse_edge: ``True`` when ``ogb`` adds the reverse of every raw
        edge and keeps repeats (products); ``False`` for directed data made
        undirected with repeats merged (arxiv, papers100M).
      binary: raw files in ``data.npz`` / ``node-label.npz`` rather than CSV.
      split: the split folder's name under ``split/``.
      download_name: the archive's folder name (and file stem).
      metric: the evaluation metric.
    """

    num_classes: int
    add_inverse_edge: bool
    binary: bool
    split: str
    download_name: str
    metric: str = "acc"


OGB_LAYOUTS = {
    "ogbn-arxiv": OgbLayout(40, False, False, "time", "arxiv"),
    "ogbn-products": OgbLayout(47, True, False, "sales_ranking", "products"),
    "ogbn-papers100M": OgbLayout(172, False, True, "time", "papers100M-bin"),
}
URL = "https://snap.stanford.edu/ogb/data/nodeproppred/{}.zip"


def _pandas():
    try:
        import pandas as pd
    except ImportError as err:
        raise ImportError(
            "reading OGB's CSV files needs pandas: pip install 'sparsegcn[ogb]' or pandas"
        ) from err
    return pd


def _csv_chunks(path: Path, rows: int, dtype):
    """``[r, columns]`` arrays of a headerless gzip CSV, ``rows`` lines at a time."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    check_regular_file(path)
    with reading(path):  # a truncated or corrupt gzip, a malformed CSV: one error naming path
        reader = _pandas().read_csv(
            path, header=None, chunksize=rows, dtype=dtype, compression="gzip", na_filter=True
        )
        with reader:
            for frame in reader:
                yield frame.to_numpy()


def _read_csv(path: Path, dtype) -> np.ndarray:
    parts = list(_csv_chunks(path, CHUNK_ROWS, dtype))
    return np.concatenate(parts) if parts else np.zeros((0, 1), dtype)


class NpzMember(NamedTuple):
    """One ``.npy`` member of a ``.npz`` archive, read in pieces without loading it.

    Attributes:
      archive: the ``.npz`` path.
      member: the member's name (``"edge_index.npy"``).
      shape, dtype, fortran_order: from its header.
      data_offset: bytes from the member's start to its data.
    """

    archive: Path
    member: str
    shape: tuple
    dtype: np.dtype
    fortran_order: bool
    data_offset: int

    @classmethod
    def open(cls, archive: Path, key: str) -> NpzMember:
        member = f"{key}.npy"
        if not archive.exists():
            raise FileNotFoundError(f"{archive} is missing")
        check_regular_file(archive)
        with reading(archive), zipfile.ZipFile(archive) as zf:
            if member not in zf.namelist():
                raise ValueError(f"{archive} has no array {key!r} (members: {zf.namelist()})")
            with zf.open(member) as f:
                version = np.lib.format.read_magic(f)
                read = {
                    (1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0,
                }
                if version not in read:
                    raise ValueError(f"{archive}:{member}: unsupported .npy version {version}")
                shape, fortran, dtype = read[version](f)
                if dtype.hasobject:
                    raise ValueError(f"{archive}:{member}: object arrays are refused")
                return cls(archive, member, tuple(shape), dtype, bool(fortran), f.tell())

    def read_flat(self, start: int, count: int, chunk: int):
        """Elements ``[start, start + count)`` in storage order, ``chunk`` at a time."""
        size = self.dtype.itemsize
        where = f"{self.archive}:{self.member}"
        with reading(where), zipfile.ZipFile(self.archive) as zf, zf.open(self.member) as f:
            f.seek(self.data_offset + start * size)
            for first in range(0, count, chunk):
                want = min(chunk, count - first)
                data = f.read(want * size)
                if len(data) != want * size:
                    raise ValueError(f"{self.archive}:{self.member} is truncated")
                yield np.frombuffer(data, self.dtype)


def _num_nodes(folder: Path, layout: OgbLayout) -> int:
    if layout.binary:
        member = NpzMember.open(folder / "raw" / "data.npz", "num_nodes_list")
        counts = np.concatenate(list(member.read_flat(0, math.prod(member.shape), 1 << 20)))
        source = f"{member.archive}:num_nodes_list"
    else:
        counts = _read_csv(folder / "raw" / "num-node-list.csv.gz", np.int64).ravel()
        source = str(folder / "raw" / "num-node-list.csv.gz")
    if counts.shape != (1,) or counts[0] < 1:
        raise ValueError(f"{source} must hold one positive node count, got {counts.tolist()}")
    return int(counts[0])


def _edge_chunks(folder: Path, layout: OgbLayout, rows: int):
    """``(source, (src int64 [r], dst int64 [r]))`` chunks of the raw edge list."""
    if not layout.binary:
        path = folder / "raw" / "edge.csv.gz"
        for chunk in _csv_chunks(path, rows, np.int64):
            if chunk.ndim != 2 or chunk.shape[1] != 2:
                raise ValueError(f"{path} must have 2 columns (source, target), got {chunk.shape}")
            yield path, (chunk[:, 0], chunk[:, 1])
        return
    member = NpzMember.open(folder / "raw" / "data.npz", "edge_index")
    if len(member.shape) != 2 or member.shape[0] != 2:
        raise ValueError(f"{member.archive}: edge_index must have shape (2, E), got {member.shape}")
    e = member.shape[1]
    if member.fortran_order:  # stored as (src, dst) pairs
        for flat in member.read_flat(0, 2 * e, 2 * rows):
            pairs = flat.reshape(-1, 2).astype(np.int64)
            yield member.archive, (pairs[:, 0], pairs[:, 1])
    else:  # all sources, then all targets: two readers in step
        sources = member.read_flat(0, e, rows)
        targets = member.read_flat(e, e, rows)
        for src, dst in zip(sources, targets, strict=True):
            yield member.archive, (src.astype(np.int64), dst.astype(np.int64))


def _check_binary_counts(folder: Path, n: int) -> None:
    """Cross-checks the binary layout's arrays against its counts from their headers
    alone (no data read), before the hours of bucketing they would otherwise wait for:
    ``num_edges_list`` against ``edge_index``'s ``E``, ``node_feat``'s rows and
    ``node-label.npz``'s labels against ``N``."""
    data = folder / "raw" / "data.npz"
    edges = NpzMember.open(data, "edge_index")
    if len(edges.shape) != 2 or edges.shape[0] != 2:
        raise ValueError(f"{data}: edge_index must have shape (2, E), got {edges.shape}")
    with reading(data), zipfile.ZipFile(data) as zf:
        has_count = "num_edges_list.npy" in zf.namelist()
    if has_count:
        member = NpzMember.open(data, "num_edges_list")
        counts = np.concatenate(list(member.read_flat(0, math.prod(member.shape), 16)))
        if counts.shape != (1,) or int(counts[0]) != edges.shape[1]:
            raise ValueError(
                f"{data}: num_edges_list says {counts.tolist()} but edge_index holds "
                f"{edges.shape[1]} edges"
            )
    features = NpzMember.open(data, "node_feat")
    if len(features.shape) != 2 or features.shape[0] != n:
        raise ValueError(
            f"{data}: node_feat has shape {features.shape} but num_nodes_list says {n} nodes"
        )
    labels = NpzMember.open(folder / "raw" / "node-label.npz", "node_label")
    if math.prod(labels.shape) != n:
        raise ValueError(
            f"{labels.archive}: node_label has shape {labels.shape} but num_nodes_list says "
            f"{n} nodes"
        )


def _num_raw_edges(folder: Path, layout: OgbLayout) -> int | None:
    if layout.binary:
        return NpzMember.open(folder / "raw" / "data.npz", "edge_index").shape[1]
    path = folder / "raw" / "num-edge-list.csv.gz"
    if not path.is_file():
        return None
    counts = _read_csv(path, np.int64)
    if counts.shape != (1, 1) or counts[0, 0] < 0:
        raise ValueError(
            f"{path} must hold one edge count (one graph: one line, one non-negative "
            f"integer), got {counts.tolist()}"
        )
    return int(counts[0, 0])


def _split_ids(folder: Path, layout: OgbLayout, n: int) -> dict[str, np.ndarray]:
    """The node ids of ``split/<type>/{train,valid,test}.csv.gz``, read as the ogbn loader
    reads them (one id a line: :func:`~sparsegcn.datasets.ogb._read_split`), each in
    ``[0, n)``; read before the edges, so a bad split fails before hours of bucketing."""
    split = _read_split(folder / "split" / layout.split)
    for key, ids in split.items():
        bad = (ids < 0) | (ids >= n)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            path = folder / "split" / layout.split / f"{key}.csv.gz"
            raise ValueError(f"{path}: line {pos + 1}: node {int(ids[pos])} is outside [0, {n})")
    return split


class _Buckets:
    """Temporary files of int64 keys ``receiver * N + sender``, one per receiver range."""

    def __init__(self, folder: Path, num_nodes: int, count: int):
        self.folder, self.n = folder, num_nodes
        self.width = -(-num_nodes // count)
        self.count = -(-num_nodes // self.width)
        self.sizes = np.zeros(self.count, np.int64)
        # Errors name the folder the buckets live in, not their temporary names.
        self.where = f"the temporary edge buckets in {folder.parent}"
        with naming_errors(self.where):
            self.files = [open(self.path(b), "wb") for b in range(self.count)]  # noqa: SIM115

    def path(self, b: int) -> Path:
        return self.folder / f"bucket{b:05d}.bin"

    def add(self, receivers: np.ndarray, senders: np.ndarray) -> None:
        keys = receivers * self.n + senders
        bucket = receivers // self.width
        order = np.argsort(bucket, kind="stable")
        counts = np.bincount(bucket, minlength=self.count)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        keys = keys[order]
        with naming_errors(self.where):
            for b in np.flatnonzero(counts):
                write_array(self.files[b], keys[bounds[b] : bounds[b + 1]])
        self.sizes += counts

    def close(self) -> None:
        with naming_errors(self.where):  # the buffered tails: a full disk raises here
            close_all(self.files)

    def rewrite(self, b: int, keys: np.ndarray) -> None:
        """Replaces bucket ``b``'s keys."""
        with naming_errors(self.where):
            save_array(self.path(b), keys)
        self.sizes[b] = keys.shape[0]

    def groups(self, group_edges: int) -> list[tuple[int, int]]:
        """Consecutive bucket ranges ``[b0, b1)`` of at most ``group_edges`` keys
        (or one bucket, if it alone is larger)."""
        groups, first, total = [], 0, 0
        for b, size in enumerate(self.sizes.tolist()):
            if b > first and total + size > group_edges:
                groups.append((first, b))
                first, total = b, 0
            total += size
        groups.append((first, self.count))
        return groups

    def read(self, b0: int, b1: int) -> np.ndarray:
        keys = np.empty(int(self.sizes[b0:b1].sum()), np.int64)
        filled = 0
        for b in range(b0, b1):
            part = np.fromfile(self.path(b), np.int64)
            if part.shape[0] != self.sizes[b]:  # never read past what the file holds
                raise OSError(
                    f"cannot read {self.where}: {self.path(b).name} holds {part.shape[0]} "
                    f"keys, {self.sizes[b]} were written to it (was it changed meanwhile?)"
                )
            keys[filled : filled + part.shape[0]] = part
            filled += part.shape[0]
            self.path(b).unlink()
        return keys


def _distinct_sorted(keys: np.ndarray) -> np.ndarray:
    if keys.size < 2:
        return keys
    first = np.empty(keys.shape, bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


def _check_ids(source, ids: np.ndarray, n: int, offset: int, what: str) -> None:
    bad = (ids < 0) | (ids >= n)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{source}: edge {offset + pos}: {what} {int(ids[pos])} is outside [0, {n}) "
            f"for num_nodes={n}"
        )


def convert_ogb(
    name: str,
    root,
    out,
    *,
    features_dtype: str = "float32",
    overwrite: bool = False,
    download: bool = False,
    progress: bool = False,
    chunk_rows: int = CHUNK_ROWS,
    group_edges: int = GROUP_EDGES,
    tmp_dir=None,
    layout: OgbLayout | None = None,
) -> Path:
    """Converts ``<root>/<name with '_'>/`` (OGB's raw files) into an on-disk dataset.

    Args:
      name: ``"ogbn-arxiv"``, ``"ogbn-products"``, ``"ogbn-papers100M"``, or
        any name with an explicit ``layout``.
      root: data root holding the dataset folder as ``ogb`` lays it out.
      out: the folder to write (see :class:`~sparsegcn.datasets.ondisk.DatasetWriter`).
      features_dtype: ``"float32"`` or ``"float16"``.
      overwrite: replace ``out`` if it is a sparsegcn dataset folder.
      download: fetch a missing dataset folder first
        (``sparsegcn.datasets.ogb.download_verified``: sha256-checked;
        papers100M has no published checksum and is refused).
      progress: tqdm progress bars.
      chunk_rows: raw edges, feature rows or labels read at a time.
      group_edges: directed edges sorted at once (the memory bound).
      tmp_dir: where the bucket files go (default: beside ``out``).
      layout: overrides :data:`OGB_LAYOUTS`.

    Returns:
      ``Path(out)``; load it with ``sparsegcn.datasets.load(str(out))``.

    Raises:
      ValueError: unknown name without ``layout``, a malformed raw file
        (naming it, and the edge or row; count and split files are checked
        before the edges are read: one edge count, one node id a line, ids
        in range), ``out`` not empty or a mount point, ``tmp_dir`` or the raw
        files' folder in ``out``.
      FileNotFoundError: a raw file is missing.
    """
    if layout is None:
        if name not in OGB_LAYOUTS:
            raise ValueError(f"unknown OGB dataset {name!r}; choose one of {list(OGB_LAYOUTS)}")
        layout = OGB_LAYOUTS[name]
    if features_dtype not in FEATURE_DTYPES:
        raise ValueError(f"features_dtype must be one of {FEATURE_DTYPES}, got {features_dtype!r}")
    for label, value in (("chunk_rows", chunk_rows), ("group_edges", group_edges)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive int, got {value!r}")
    root, out = Path(root), Path(out)
    if tmp_dir is not None:  # its buckets inside out would make out not replaceable at the end
        tmp_dir = check_work_folder(
            tmp_dir, what="tmp_dir (--tmp-dir)", outside={"out (--out)": out}
        )
    folder = root / name.replace("-", "_")
    check_inputs_outside({"out (--out)": out}, [("the raw files' folder", folder)])
    _check_target(out, overwrite)  # before hours of work, not after
    out.parent.mkdir(parents=True, exist_ok=True)
    if not folder.is_dir():
        if not download:
            raise FileNotFoundError(
                f"{name}: {folder} does not exist; download it (download=True / --download) or "
                f"unzip {URL.format(layout.download_name)} there"
            )
        download_verified(
            name, root, URL.format(layout.download_name), layout.download_name, progress=progress
        )
    n = _num_nodes(folder, layout)
    if layout.binary:
        _check_binary_counts(folder, n)
    raw_edges = _num_raw_edges(folder, layout)
    split = _split_ids(folder, layout, n)
    dedup = not layout.add_inverse_edge
    work = temp_folder(tmp_dir or out.parent, out.name, "edges")
    try:
        average = 2 * (raw_edges or group_edges) / group_edges
        buckets = _Buckets(work, n, max(1, math.ceil(_BUCKETS_PER_GROUP * average)))
        seen = 0
        with tqdm(
            total=raw_edges, disable=not progress, unit="edge", desc="bucketing edges"
        ) as bar:
            try:
                for source, (src, dst) in _edge_chunks(folder, layout, chunk_rows):
                    _check_ids(source, src, n, seen, "source")
                    _check_ids(source, dst, n, seen, "target")
                    buckets.add(dst, src)
                    buckets.add(src, dst)
                    seen += src.shape[0]
                    bar.update(src.shape[0])
            finally:
                buckets.close()
        if raw_edges is not None and seen != raw_edges:
            raise ValueError(
                f"{folder / 'raw'}: read {seen} edges but the count file says {raw_edges}"
            )
        groups = buckets.groups(group_edges)
        if dedup:  # the stored edge count is known only once repeats are merged
            stored = 0
            for b0, b1 in tqdm(groups, disable=not progress, desc="merging repeats"):
                keys = buckets.read(b0, b1)
                keys.sort()
                keys = _distinct_sorted(keys)
                buckets.sizes[b0:b1] = 0
                for b in range(b0 + 1, b1):
                    buckets.rewrite(b, keys[:0])
                buckets.rewrite(b0, keys)
                stored += keys.shape[0]
        else:
            stored = 2 * seen
        writer = DatasetWriter(
            out,
            num_nodes=n,
            num_stored_edges=stored,
            num_features=_num_features(folder, layout),
            features_dtype=features_dtype,
            overwrite=overwrite,
        )
        with writer:
            writer.indptr[0] = 0
            offset = 0
            for b0, b1 in tqdm(groups, disable=not progress, desc="writing CSR"):
                keys = buckets.read(b0, b1)
                keys.sort()
                rows = keys // n
                r0, r1 = b0 * buckets.width, min(b1 * buckets.width, n)
                writer.indices[offset : offset + keys.shape[0]] = keys - rows * n
                counts = np.bincount(rows - r0, minlength=r1 - r0)
                writer.indptr[r0 + 1 : r1 + 1] = offset + np.cumsum(counts)
                offset += keys.shape[0]
                del keys, rows
            _write_features(writer, folder, layout, chunk_rows, progress)
            _write_labels(writer, folder, layout, chunk_rows)
            for key in SPLITS:
                writer.write_split(key, split[key])
            return writer.finish(
                name=name,
                num_edges=seen,
                num_classes=layout.num_classes,
                metric=layout.metric,
                info={
                    "source": URL.format(layout.download_name),
                    "license": LICENSES.get(name, "see the publisher"),
                    "split": layout.split,
                    "converted_from": str(folder),
                    "converter": "sparsegcn.datasets.convert",
                },
                progress=progress,
            )
    finally:
        discard_temp_folder(work)


def _num_features(folder: Path, layout: OgbLayout) -> int:
    if layout.binary:
        shape = NpzMember.open(folder / "raw" / "data.npz", "node_feat").shape
        if len(shape) != 2:
            raise ValueError(
                f"{folder / 'raw' / 'data.npz'}: node_feat must be [N, F], got {shape}"
            )
        return int(shape[1])
    path = folder / "raw" / "node-feat.csv.gz"
    with contextlib.closing(_csv_chunks(path, 1, np.float32)) as rows:
        first = next(rows, None)
    if first is None:
        raise ValueError(f"{path} is empty")
    return int(first.shape[1])


def _write_features(writer, folder: Path, layout: OgbLayout, rows: int, progress: bool) -> None:
    n, f = writer.features.shape
    # Wide rows: keep a chunk near FEATURE_CHUNK_BYTES of float32 (papers100M's
    # 4M-row default chunk would be 2 GB, and pandas parses CSV at several times that).
    rows = max(1, min(rows, FEATURE_CHUNK_BYTES // (4 * f)))
    if layout.binary:
        member = NpzMember.open(folder / "raw" / "data.npz", "node_feat")
        source = f"{member.archive}:node_feat"
        if member.shape != (n, f) or member.fortran_order:
            raise ValueError(f"{source} must be a C-ordered [{n}, {f}] array, got {member.shape}")
        chunks = (c.reshape(-1, f) for c in member.read_flat(0, n * f, rows * f))
    else:
        source = str(folder / "raw" / "node-feat.csv.gz")
        chunks = _csv_chunks(folder / "raw" / "node-feat.csv.gz", rows, np.float32)
    filled = 0
    with tqdm(total=n, disable=not progress, unit="node", desc="features") as bar:
        for chunk in chunks:
            if chunk.ndim != 2 or chunk.shape[1] != f or filled + chunk.shape[0] > n:
                raise ValueError(
                    f"{source}: rows from {filled} have shape {chunk.shape}, not [*, {f}]"
                )
            writer.features[filled : filled + chunk.shape[0]] = chunk.astype(writer.features.dtype)
            filled += chunk.shape[0]
            bar.update(chunk.shape[0])
    if filled != n:
        raise ValueError(f"{source} has {filled} rows but there are {n} nodes")


def _write_labels(writer, folder: Path, layout: OgbLayout, rows: int) -> None:
    num_classes = layout.num_classes
    n = writer.labels.shape[0]
    if layout.binary:
        member = NpzMember.open(folder / "raw" / "node-label.npz", "node_label")
        source = f"{member.archive}:node_label"
        if math.prod(member.shape) != n:
            raise ValueError(f"{source} must hold {n} labels, got shape {member.shape}")
        chunks = member.read_flat(0, n, rows)
    else:
        source = str(folder / "raw" / "node-label.csv.gz")
        chunks = _csv_chunks(folder / "raw" / "node-label.csv.gz", rows, np.float64)
    filled = 0
    for chunk in chunks:
        flat = chunk.reshape(-1)
        if filled + flat.shape[0] > n:
            raise ValueError(f"{source} has more than {n} labels")
        try:
            labels = as_labels(flat, flat.shape[0])
        except ValueError as err:
            raise ValueError(f"{source}: rows from {filled}: {err}") from err
        bad = labels >= num_classes
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{source}: node {filled + pos}: label {int(labels[pos])} is outside "
                f"[0, {num_classes})"
            )
        writer.labels[filled : filled + flat.shape[0]] = labels
        filled += flat.shape[0]
    if filled != n:
        raise ValueError(f"{source} has {filled} labels but there are {n} nodes")


def main(argv=None) -> int:
    """``python -m sparsegcn.datasets.convert NAME --root ROOT --out PATH``."""
    from sparsegcn.cli.options import OneLineParser

    parser = OneLineParser(
        prog="python -m sparsegcn.datasets.convert",
        description="Convert OGB node-property raw files into sparsegcn's on-disk format, "
        "streaming in bounded memory.",
    )
    parser.add_argument("name", choices=sorted(OGB_LAYOUTS))
    parser.add_argument("--root", required=True, help="data root holding <name with _>/raw")
    parser.add_argument("--out", required=True, help="the dataset folder to write")
    parser.add_argument("--features-dtype", choices=FEATURE_DTYPES, default="float32")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace --out if it is a sparsegcn dataset folder"
    )
    parser.add_argument("--download", action="store_true", help="fetch a missing dataset")
    parser.add_argument("--group-edges", type=int, default=GROUP_EDGES)
    parser.add_argument("--tmp-dir", default=None, help="folder for the edge buckets")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    from sparsegcn.cli import run_tool
    from sparsegcn.cli.options import check_paths, expand_home

    args = expand_home(parser.parse_args(argv))

    def work():
        check_paths({"--out": args.out, "--root": args.root, "--tmp-dir": args.tmp_dir})
        return convert_ogb(
            args.name,
            args.root,
            args.out,
            features_dtype=args.features_dtype,
            overwrite=args.overwrite,
            download=args.download,
            progress=not args.no_progress,
            group_edges=args.group_edges,
            tmp_dir=args.tmp_dir,
        )

    return run_tool(parser.prog, work, debug=args.debug)


__all__ = ["GROUP_EDGES", "OGB_LAYOUTS", "NpzMember", "OgbLayout", "convert_ogb", "main"]

if __name__ == "__main__":
    sys.exit(main())

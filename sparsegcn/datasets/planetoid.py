"""The Planetoid citation graphs: Cora, CiteSeer and PubMed, with their public split.

Each dataset is eight files, ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}``,
published in the ``data/`` folder of https://github.com/kimiyoung/planetoid
(MIT license). The first seven are Python 2 pickles, read here through
:func:`~sparsegcn.datasets.unpickle.safe_load`; every file is checked
against its published sha256 before it is read, whether it was just
downloaded or was already on disk.

File contents (``L`` labelled training nodes, ``T`` test nodes):

- ``x`` ``[L, F]``, ``y`` ``[L, C]``: the labelled training nodes (the first
  ``L`` rows of ``allx``/``ally``).
- ``allx`` ``[A, F]``, ``ally`` ``[A, C]``: all training nodes, ids ``0 .. A-1``.
- ``tx`` ``[T, F]``, ``ty`` ``[T, C]``: the test nodes; row ``k`` belongs to
  node ``test.index[k]``.
- ``graph``: ``{node: [neighbour, ...]}``.
- ``test.index``: the ``T`` test node ids, one per line, in ``tx`` order.

Features are scipy CSR matrices, labels one-hot rows.

References:
  Yang, Cohen & Salakhutdinov, *Revisiting Semi-Supervised Learning with
  Graph Embeddings*, ICML 2016, https://arxiv.org/abs/1603.08861
  Kipf & Welling, *Semi-Supervised Classification with Graph Convolutional
  Networks*, ICLR 2017 (``gcn/utils.py:load_data``), https://arxiv.org/abs/1609.02907
  PyTorch Geometric, ``torch_geometric.io.planetoid.read_planetoid_data``.
"""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks
from sparsegcn.datasets.base import Dataset, check_may_download
from sparsegcn.datasets.download import download_file
from sparsegcn.datasets.unpickle import safe_load
from sparsegcn.files import check_folder_path, read_text, sha256_file
from sparsegcn.graph import Graph
from sparsegcn.transforms import remove_self_loops, to_undirected

PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data/"
PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
NUM_VALID = 500

# The globals the Planetoid pickles reference, found by disassembling the
# eight Cora files with pickletools (Python 2 pickles, protocol 2, written with
# NumPy 1 and SciPy < 1.8):
#   x, tx, allx  scipy.sparse.csr.csr_matrix, rebuilt by NEWOBJ + BUILD; its
#                arrays as below.
#   y, ty, ally  numpy.core.multiarray._reconstruct(numpy.ndarray, ...) with
#                numpy.dtype.
#   graph        collections.defaultdict(__builtin__.list).
# Each is also admitted under the path current NumPy, SciPy and Python write,
# so the same files re-pickled by a current stack at protocol 3 or later load too
# (protocol 2 pickles bytes through _codecs.encode, which is refused). Nothing else.
PICKLE_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("scipy.sparse.csr", "csr_matrix"),
        ("scipy.sparse._csr", "csr_matrix"),
        ("collections", "defaultdict"),
        ("__builtin__", "list"),
        ("builtins", "list"),
    }
)

# Cora: the SHA256SUMS file of the shared test data (planetoid/SHA256SUMS), files verified against a copy of
# kimiyoung/planetoid/data. CiteSeer and PubMed: published in
# skygazer42/sky-vgl, vgl/data/public.py (commit 7cbb28df98d5eea988f5b010f3e0df6a191f533b),
# pinned there to kimiyoung/planetoid commit af6abf468a772cc055bec88c52e4d6f51b7c37e3;
# two further public projects list the same 16 digests, and that file's Cora
# digests equal ours.
SHA256 = {
    "cora": {
        "ind.cora.x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
        "ind.cora.y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
        "ind.cora.tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
        "ind.cora.ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
        "ind.cora.allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
        "ind.cora.ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
        "ind.cora.graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
        "ind.cora.test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
    },
    "citeseer": {
        "ind.citeseer.x": "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
        "ind.citeseer.y": "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
        "ind.citeseer.tx": "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
        "ind.citeseer.ty": "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
        "ind.citeseer.allx": "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
        "ind.citeseer.ally": "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
        "ind.citeseer.graph": "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
        "ind.citeseer.test.index": "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
    },
    "pubmed": {
        "ind.pubmed.x": "fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33",
        "ind.pubmed.y": "e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3",
        "ind.pubmed.tx": "4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d",
        "ind.pubmed.ty": "ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd",
        "ind.pubmed.allx": "508e538e2abdccdd54c4d3e9f49d638b4af7107d85845f66ddea5a5152658b7e",
        "ind.pubmed.ally": "0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e",
        "ind.pubmed.graph": "5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9",
        "ind.pubmed.test.index": "b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5",
    },
}


# Node ids in test.index may leave gaps (isolated nodes in no file) but must be
# below this multiple of the node rows allx and tx hold.
MAX_NODES_PER_ROW = 2


def planetoid_paths(name: str, root: str | Path) -> dict[str, Path]:
    """``{part: <root>/planetoid/ind.<name>.<part>}`` for the eight parts, in :data:`PARTS` order."""
    if name not in SHA256:
        raise ValueError(f"unknown Planetoid dataset {name!r}; choose one of {sorted(SHA256)}")
    folder = Path(root) / "planetoid"
    return {part: folder / f"ind.{name}.{part}" for part in PARTS}


def _verify(path: Path, expected: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise ValueError(
            f"{path} is corrupt or truncated: its sha256 is {actual}, but the published file's "
            f"is {expected}. Delete it and load again with download=True to fetch a fresh copy."
        )


def _fetch(
    name: str, paths: dict[str, Path], *, download: bool, progress: bool, base_url: str
) -> None:
    """Verifies the files on disk, then downloads (or reports) the missing ones."""
    sums = SHA256[name]
    missing = [path for path in paths.values() if not path.exists()]
    for path in paths.values():
        if path.exists():
            _verify(path, sums[path.name])
    if not missing:
        return
    if not download:
        folder = missing[0].parent
        raise FileNotFoundError(
            f"Planetoid file {missing[0]} not found ({len(missing)} of 8 files missing: "
            f"{', '.join(p.name for p in missing)}). Load with download=True to fetch them, "
            f"or download the eight ind.{name}.* files from {PLANETOID_URL} yourself and place "
            f"them in {folder}/."
        )
    check_may_download(f"Planetoid {name} ({len(missing)} of 8 files)", missing[0].parent)
    base = base_url.rstrip("/") + "/"
    for path in missing:
        download_file(base + path.name, path, sha256=sums[path.name], progress=progress)


def _unpickle(path: Path):
    """:func:`safe_load` with the file named in every error (a truncated or
    garbled pickle otherwise says only "Ran out of input")."""
    try:
        return safe_load(path, allowed=PICKLE_GLOBALS)
    except (EOFError, pickle.UnpicklingError) as err:
        if str(path) in str(err):
            raise
        raise type(err)(f"{path}: not a complete pickle ({err or type(err).__name__})") from err
    except (ValueError, TypeError) as err:  # an object's reconstructor refused its arguments
        raise ValueError(f"{path}: holds a malformed object ({err})") from err


def _read_test_index(path: Path) -> np.ndarray:
    ids = []
    try:
        text = read_text(path, encoding="ascii")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a text file of node ids ({err})") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        text = line.strip()
        if not text:
            continue
        try:
            ids.append(int(text))
        except ValueError:
            raise ValueError(f"{path}: line {lineno} is not a node id: {line!r}") from None
    return np.asarray(ids, dtype=np.int64)


def _features(path: Path, obj) -> sp.csr_array:
    """A pickled CSR matrix as a validated float32 ``csr_array``."""
    if not isinstance(obj, sp.csr_matrix):
        raise ValueError(f"{path}: expected a scipy CSR feature matrix, got {type(obj).__name__}")
    try:
        matrix = sp.csr_array(
            (np.asarray(obj.data, np.float32), obj.indices, obj.indptr), shape=obj.shape
        )
        matrix.check_format(full_check=True)
    except (AttributeError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: malformed CSR matrix: {err}") from err
    _checks.check_finite(f"{path.name} values", matrix.data)
    return matrix


def _labels(path: Path, obj) -> np.ndarray:
    """One-hot rows ``[n, C]`` -> int64 class ids ``[n]``, ``-1`` for all-zero rows."""
    if not isinstance(obj, np.ndarray) or obj.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D one-hot label array, got {obj!r:.80}")
    if not (np.issubdtype(obj.dtype, np.integer) or np.issubdtype(obj.dtype, np.floating)):
        raise ValueError(f"{path}: expected numeric one-hot labels, got dtype {obj.dtype}")
    not_binary = (obj != 0) & (obj != 1)
    if not_binary.any():
        row, col = np.argwhere(not_binary)[0]
        raise ValueError(f"{path}: entry [{row}, {col}] = {obj[row, col]} is not 0 or 1")
    counts = (obj == 1).sum(axis=1)
    if (counts > 1).any():
        row = int(np.flatnonzero(counts > 1)[0])
        raise ValueError(f"{path}: row {row} has {int(counts[row])} classes set; expected one-hot")
    return np.where(counts == 1, obj.argmax(axis=1), -1).astype(np.int64)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _edges(path: Path, obj, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The adjacency dict as ``(senders, receivers)``: edge ``node -> neighbour``."""
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a dict of adjacency lists, got {type(obj).__name__}")
    for node, neighbours in obj.items():
        if not _is_int(node):
            raise ValueError(f"{path}: node key {node!r} is not an integer")
        if not isinstance(neighbours, (list, tuple)) or not all(map(_is_int, neighbours)):
            raise ValueError(f"{path}: neighbours of node {node} are not a list of integers")
    counts = np.fromiter(map(len, obj.values()), np.int64, count=len(obj))
    senders = np.repeat(np.fromiter(obj.keys(), np.int64, count=len(obj)), counts)
    receivers = np.fromiter(
        itertools.chain.from_iterable(obj.values()), np.int64, count=int(counts.sum())
    )
    for ids in (senders, receivers):
        bad = (ids < 0) | (ids >= num_nodes)
        if bad.any():
            raise ValueError(
                f"{path}: node {int(ids[bad][0])} is outside [0, {num_nodes}), the nodes that "
                f"allx, tx and test.index define"
            )
    return senders, receivers


def _check_rows(path: Path, shape: tuple, rows: int, what: str) -> None:
    if shape[0] != rows:
        raise ValueError(f"{path}: has {shape[0]} rows, but {what} has {rows}")


def _check_cols(path: Path, shape: tuple, cols: int, what: str) -> None:
    if shape[1] != cols:
        raise ValueError(f"{path}: has {shape[1]} columns, but {what} has {cols}")


def load_planetoid(
    name: str,
    root: str | Path,
    *,
    download: bool = True,
    progress: bool = False,
    base_url: str = PLANETOID_URL,
) -> Dataset:
    """Loads Cora, CiteSeer or PubMed with the public Planetoid split.

    Processing follows the GCN reference loader and PyG's ``Planetoid``:

    - Nodes ``0 .. A-1`` are the ``allx`` rows; test node ``test.index[k]``
      gets row ``k`` of ``tx``/``ty``. ``N = max(A, max(test.index) + 1)``.
      CiteSeer's test ids leave gaps (isolated nodes that are in no file):
      those nodes get an all-zero feature row and label ``-1``. A test id of
      :data:`MAX_NODES_PER_ROW` times the rows of ``allx`` and ``tx`` or
      more is refused (CiteSeer's gaps add 0.5%).
    - Labels are the argmax of the one-hot rows, ``-1`` for all-zero rows.
    - Edges come from the adjacency dict, self-loops removed, duplicates
      merged and made symmetric with :func:`~sparsegcn.transforms.to_undirected`.
    - Split: ``train`` is the first ``L = len(y)`` nodes, ``valid`` the next
      500, ``test`` the sorted test ids.

    Cora: 2708 nodes, 10556 stored directed edges (5278 undirected pairs),
    1433 features, 7 classes, split 140 / 500 / 1000.

    Args:
      name: ``"cora"``, ``"citeseer"`` or ``"pubmed"``.
      root: data root; the files live in ``<root>/planetoid/``.
      download: fetch missing files from ``base_url``. Files already present
        are never downloaded again, but are always checked.
      progress: show download progress bars.
      base_url: where ``ind.<name>.*`` are fetched from (tests point it at a
        local server); the sha256 checks do not depend on it.

    Returns:
      A :class:`~sparsegcn.datasets.Dataset` whose features are the raw
      (not normalized) float32 ``[N, F]`` scipy ``csr_array``, whose
      ``num_edges`` counts undirected pairs, with metric ``"acc"``.

    Raises:
      ValueError: unknown ``name``; a ``root`` or ``<root>/planetoid`` that is
        not a folder, or lies under a file (naming it); a file on disk or
        downloaded whose sha256 differs from the published one (the message
        names the file); a file whose content does not fit the format.
      FileNotFoundError: a file is missing and ``download=False`` (the message
        names the path and how to get the files).
      OSError: the download failed (see :func:`~sparsegcn.datasets.download.download_file`).
      pickle.UnpicklingError: a pickle references a global outside
        :data:`PICKLE_GLOBALS`.
    """
    paths = planetoid_paths(name, root)
    check_folder_path(root, what="root")
    check_folder_path(paths["x"].parent, what="Planetoid's folder")
    _fetch(name, paths, download=download, progress=progress, base_url=base_url)

    raw = {part: _unpickle(paths[part]) for part in PARTS[:-1]}
    x, tx, allx = (_features(paths[p], raw[p]) for p in ("x", "tx", "allx"))
    y, ty, ally = (_labels(paths[p], raw[p]) for p in ("y", "ty", "ally"))
    test_index = _read_test_index(paths["test.index"])

    num_features = allx.shape[1]
    num_classes = raw["ally"].shape[1]
    num_train, num_all = y.shape[0], allx.shape[0]
    _check_rows(paths["x"], x.shape, num_train, paths["y"].name)
    _check_rows(paths["ally"], ally.shape, num_all, paths["allx"].name)
    _check_rows(paths["tx"], tx.shape, test_index.shape[0], paths["test.index"].name)
    _check_rows(paths["ty"], ty.shape, test_index.shape[0], paths["test.index"].name)
    for part in ("x", "tx"):
        _check_cols(paths[part], raw[part].shape, num_features, paths["allx"].name)
    for part in ("y", "ty"):
        _check_cols(paths[part], raw[part].shape, num_classes, paths["ally"].name)
    if (x != allx[:num_train]).nnz or not np.array_equal(y, ally[:num_train]):
        raise ValueError(
            f"{paths['x']}, {paths['y']}: the labelled training nodes must be the first "
            f"{num_train} rows of allx and ally, but they differ"
        )
    if num_train + NUM_VALID > num_all:
        raise ValueError(
            f"{paths['allx']}: has {num_all} rows, fewer than the {num_train} training plus "
            f"{NUM_VALID} validation nodes of the public split"
        )
    if test_index.size == 0:
        raise ValueError(f"{paths['test.index']}: lists no test nodes")
    if np.unique(test_index).size != test_index.size:
        raise ValueError(f"{paths['test.index']}: lists a node more than once")
    if test_index.min() < num_all:
        raise ValueError(
            f"{paths['test.index']}: test node {int(test_index.min())} collides with the "
            f"{num_all} allx nodes (ids 0..{num_all - 1})"
        )

    # CiteSeer's gaps make N a little larger than its row count (3327 nodes for
    # 3312 rows); a hostile test.index could name node 2**40 and make every
    # [N] array exhaust memory. Ids are bounded by a multiple of the rows.
    limit = MAX_NODES_PER_ROW * (num_all + test_index.size)
    if test_index.max() >= limit:
        raise ValueError(
            f"{paths['test.index']}: test node {int(test_index.max())} is beyond "
            f"{MAX_NODES_PER_ROW}x the {num_all + test_index.size} rows of allx and tx (ids "
            f"must be < {limit}); the file is corrupt or not a Planetoid test index"
        )
    num_nodes = max(num_all, int(test_index.max()) + 1)
    node_of_row = np.concatenate([np.arange(num_all, dtype=np.int64), test_index])
    stacked = sp.vstack([allx, tx], format="coo")
    features = sp.csr_array(
        (stacked.data, (node_of_row[stacked.row], stacked.col)),
        shape=(num_nodes, num_features),
        dtype=np.float32,
    )
    features.sort_indices()
    labels = np.full(num_nodes, -1, np.int64)
    labels[node_of_row] = np.concatenate([ally, ty])

    senders, receivers = _edges(paths["graph"], raw["graph"], num_nodes)
    directed = Graph(senders, receivers, None, num_nodes)
    graph = to_undirected(remove_self_loops(directed))

    return Dataset(
        name=name,
        graph=graph,
        features=features,
        labels=labels,
        split={
            "train": np.arange(num_train, dtype=np.int64),
            "valid": np.arange(num_train, num_train + NUM_VALID, dtype=np.int64),
            "test": np.sort(test_index),
        },
        num_classes=num_classes,
        metric="acc",
        num_edges=graph.num_edges // 2,
        info={
            "source": PLANETOID_URL,
            "license": "MIT (kimiyoung/planetoid)",
            "citation": "Yang, Cohen & Salakhutdinov, ICML 2016, https://arxiv.org/abs/1603.08861",
            "files": str(paths["x"].parent),
            "raw_edges": int(senders.shape[0]),
            "self_loops_removed": int((senders == receivers).sum()),
            "gap_nodes": int(num_nodes - node_of_row.shape[0]),
        },
    )


__all__ = [
    "MAX_NODES_PER_ROW",
    "NUM_VALID",
    "PARTS",
    "PICKLE_GLOBALS",
    "PLANETOID_URL",
    "SHA256",
    "load_planetoid",
]

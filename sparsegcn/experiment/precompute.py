"""Features computed once before training, cached on disk: SGC's ``Â^K X``.

A model whose registry entry sets ``precompute`` (SGC) trains on
``Â^K X`` instead of ``X``: a parameter-free propagation, the same for
every seed and epoch, so it runs once, on the host, before training
(:func:`~sparsegcn.nn.sgc.sgc_features`). With a cache folder the result is
kept as one ``.npy`` file named by a key that covers everything it depends
on:

- the dataset's fingerprint (:func:`~sparsegcn.train.checkpoint.dataset_fingerprint`:
  name, sizes, labels and split);
- a sha256 of the graph's senders, receivers and weights, and of the
  feature rows after their normalization, so an edited graph or feature
  matrix under the same name misses;
- ``K`` (``hops``) and the normalizations (adjacency ``gcn_norm``, the
  features' ``normalize_features`` mode).

A hit reads the file (``np.load(..., allow_pickle=False)``: nothing is
unpickled) and skips the propagation; a file that cannot be read as the
expected ``[N, F]`` float32 array counts as a miss and is rewritten. Files
are written through :func:`~sparsegcn.files.save_npy_atomic` (a temporary
file renamed into place), so concurrent runs and interruptions never leave
a partial file under a key.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks, transforms
from sparsegcn.features import Features, SparseFeatures, as_features
from sparsegcn.files import load_npy, save_npy_atomic
from sparsegcn.graph import Graph
from sparsegcn.nn.sgc import sgc_features
from sparsegcn.train.checkpoint import dataset_fingerprint

CACHE_FORMAT = 1
"""Part of every key: bump it when what a cached file holds changes."""


def _digest(*arrays) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        if array is None:
            digest.update(b"none")
            continue
        array = np.ascontiguousarray(np.asarray(array))
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _features_digest(x) -> str:
    """Of the host form: dense rows, or a scipy matrix's CSR arrays and shape."""
    if isinstance(x, SparseFeatures):
        x = x.to_scipy()
    if sp.issparse(x):
        csr = sp.csr_array(x)
        csr.sort_indices()
        return _digest(csr.indptr, csr.indices, csr.data, np.asarray(csr.shape))
    return _digest(x)


def precompute_key(dataset, graph: Graph, features, *, hops: int, normalize_features: str) -> str:
    """The cache key of ``Â^K X`` for these inputs: a sha256 hex digest.

    Args:
      dataset: the :class:`~sparsegcn.datasets.Dataset` (its fingerprint).
      graph: the raw graph ``Â`` is built from (hashed: senders, receivers,
        weights).
      features: ``X`` after normalization, dense or scipy sparse (hashed).
      hops: ``K``.
      normalize_features: the features' normalization mode (named in the key).
    """
    parts = {
        "format": CACHE_FORMAT,
        "model": "sgc",
        "dataset": dataset_fingerprint(dataset),
        "graph_sha256": _digest(graph.senders, graph.receivers, graph.weights),
        "num_nodes": int(graph.num_nodes),
        "features_sha256": _features_digest(features),
        "hops": int(hops),
        "adjacency": "gcn_norm",
        "normalize_features": normalize_features,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _read(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached array, or ``None`` when absent or not the expected float32 ``shape``."""
    try:
        array = load_npy(path)
    except (OSError, ValueError):  # absent, truncated, not .npy, or an object array
        return None
    if array.shape != shape or array.dtype != np.float32:
        return None
    return array


def sgc_precompute(
    dataset,
    features,
    *,
    hops: int,
    normalize_features: str,
    cache_dir: str | Path | None = None,
) -> tuple[Features, bool]:
    """``Â^K X`` of ``dataset`` with ``Â = gcn_norm(graph)``, from ``cache_dir`` when there.

    Args:
      dataset: the :class:`~sparsegcn.datasets.Dataset` (graph and fingerprint).
      features: ``X``, ``[N, F]`` dense or scipy sparse, already normalized
        by ``normalize_features``.
      hops: ``K >= 1``.
      normalize_features: the mode ``features`` were normalized with (part
        of the key).
      cache_dir: folder of cached results, created when missing; ``None``
        computes without caching.

    Returns:
      ``(features, hit)``: ``[N, F]`` dense float32 features, and whether
      they came from the cache (the propagation was skipped).

    Cost: a hit reads ``N F`` floats and hashes the graph and features
    (``O(E + nnz(X))``); a miss adds ``K`` sparse-dense products,
    ``O(K E F)``, and writes the file.
    """
    _checks.check_static_int("hops", hops, minimum=1)
    graph, n = dataset.graph, int(dataset.num_nodes)
    path = None
    if cache_dir is not None:
        key = precompute_key(
            dataset, graph, features, hops=hops, normalize_features=normalize_features
        )
        path = Path(cache_dir) / f"sgc-{key}.npy"
        cached = _read(path, (n, int(features.shape[1])))
        if cached is not None:
            return as_features(cached, n), True
    x = as_features(features, n)
    rows = np.asarray(sgc_features(transforms.gcn_norm(graph), x, hops=hops), np.float32)
    if path is not None:
        save_npy_atomic(path, rows)
    return as_features(rows, dataset.num_nodes), False


__all__ = ["CACHE_FORMAT", "precompute_key", "sgc_precompute"]

"""Features computed once before training, cached on disk: SGC's ``Â^K X``.

A model whose registry entry sets ``precompute`` (SGC) trains on
``Â^K X`` instead of ``X``: a parameter-free propagation, the same for
every seed and epoch, so it runs once, on the host, before training
(:func:`~sparsegcn.nn.sgc.sgc_features`). With a cache folder the result is
kept as one ``.npz`` file named by a key that covers everything it depends
on:

- the dataset's fingerprint (:func:`~sparsegcn.train.checkpoint.dataset_fingerprint`:
  name, sizes, labels and split, sampled digests of features and edges);
- a sha256 of the graph's senders, receivers and weights, and of the
  feature rows after their normalization, so an edited graph or feature
  matrix under the same name misses;
- ``K`` (``hops``) and the normalizations (adjacency ``gcn_norm``, the
  features' ``normalize_features`` mode).

Each file is an ``.npz`` holding the features (``features``, float32
``[N, F]``), the key of the inputs they were computed from (``key``) and a
sha256 of their bytes (``sha256``). A hit reads the file
(:func:`~sparsegcn.files.read_npz`: nothing is unpickled, and no member is
decompressed before its header is checked against the expected float32
``[N, F]``), checks that it records this key and that the features hash
to the recorded digest, and skips the propagation; any other file
(unreadable, another shape or dtype, other members, a header declaring
more data than the file holds, another key, contents that no longer match
their digest, e.g. a file overwritten in place) counts as a miss and is
recomputed and rewritten. Files are written through
:func:`~sparsegcn.files.write_atomic` (a temporary file renamed into
place), so concurrent runs and interruptions never leave a partial file
under a key.

A cache entry that is a symbolic link is refused when the cache may be
written (:class:`FeatureCacheError`, before anything is read or
computed), as a checkpoint folder refuses one
(:mod:`sparsegcn.train.checkpoint`): a miss would be written through it,
replacing the file it names, in another place. A hard link is fine: the
rename replaces that name alone.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks, _interrupt, transforms
from sparsegcn.features import Features, SparseFeatures, as_features
from sparsegcn.files import NotRegularFileError, NpySpec, read_npz, write_atomic
from sparsegcn.graph import Graph
from sparsegcn.nn.sgc import sgc_features
from sparsegcn.train.checkpoint import dataset_fingerprint

CACHE_FORMAT = 2
"""Part of every key: bump it when what a cached file holds changes (2: an
``.npz`` with the key and the features' digest; 1: a bare ``.npy``)."""


class FeatureCacheError(ValueError):
    """A feature cache entry that is never written: a symbolic link (exit status 2)."""


def _check_not_linked(path: Path) -> None:
    """Refuses a cache entry that is a symbolic link (dangling or not)."""
    if not path.is_symlink():
        return
    try:
        detail = f"a symbolic link to {os.readlink(path)}; writing it would replace that file"
    except OSError:  # gone or replaced meanwhile: still refused
        detail = "a symbolic link"
    raise FeatureCacheError(
        f"feature cache entry {path} is {detail}: a cache folder's files belong to it, so it "
        f"is not used; replace it with a copy of the file, remove it, or choose another "
        f"--feature-cache folder"
    )


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


def _read(path: Path, key: str, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached features, or ``None`` when absent, unreadable, not the expected
    float32 ``shape``, recorded under another key, or not matching their digest.

    Read by :func:`~sparsegcn.files.read_npz`: exactly the three members, each
    header checked against float32 ``shape`` (the key and digest: 64-character
    strings) before any data is decompressed, so a file declaring another
    shape, holding other members or expanding past its own size is a miss
    that costs no more memory than the features themselves.

    Raises:
      NotRegularFileError: ``path`` is a FIFO, a device or a folder (neither a
        cache to read nor a file to replace).
    """
    try:
        stored = read_npz(path, _members(shape), what="cached features")
    except NotRegularFileError:  # a FIFO or a device is not a cache to read or replace
        raise
    except (OSError, ValueError):  # absent or unreadable; CorruptFileError: not this cache
        return None
    array, stored_key, digest = stored["features"], stored["key"], stored["sha256"]
    if str(stored_key) != key:
        return None
    if hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest() != str(digest):
        return None
    return array


def _members(shape: tuple[int, int]) -> dict[str, NpySpec]:
    """What a cache file holds: float32 ``[N, F]`` features, and the key and the
    features' sha256 as 64-character strings (``np.array(hex)``)."""
    text = NpySpec((), np.dtype("U64"))
    return {"features": NpySpec(shape, np.dtype(np.float32)), "key": text, "sha256": text}


def _write(path: Path, key: str, rows: np.ndarray) -> None:
    digest = hashlib.sha256(np.ascontiguousarray(rows).tobytes()).hexdigest()
    write_atomic(
        path, lambda f: np.savez(f, features=rows, key=np.array(key), sha256=np.array(digest))
    )


def sgc_precompute(
    dataset,
    features,
    *,
    hops: int,
    normalize_features: str,
    cache_dir: str | Path | None = None,
    write: bool = True,
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
      write: store a miss in ``cache_dir``; ``False`` only reads it (``predict``
        uses the training run's cache but creates none).

    Returns:
      ``(features, hit)``: ``[N, F]`` dense float32 features, and whether
      they came from the cache (the propagation was skipped).

    Raises:
      FeatureCacheError: with ``write``, the entry for these inputs is a
        symbolic link (never written through; see the module docstring).

    Cost: a hit reads ``N F`` floats, hashes them, the graph and the features
    (``O(E + nnz(X) + N F)``); a miss adds ``K`` sparse-dense products,
    ``O(K E F)``, and writes the file.
    """
    _checks.check_static_int("hops", hops, minimum=1)
    graph, n = dataset.graph, int(dataset.num_nodes)
    path = None
    if cache_dir is not None:
        key = precompute_key(
            dataset, graph, features, hops=hops, normalize_features=normalize_features
        )
        path = Path(cache_dir) / f"sgc-{key}.npz"
        if write:
            _check_not_linked(path)
        cached = _read(path, key, (n, int(features.shape[1])))
        if cached is not None:
            return as_features(cached, n), True
    x = as_features(features, n)
    rows = np.asarray(sgc_features(transforms.gcn_norm(graph), x, hops=hops), np.float32)
    if path is not None and write:
        _interrupt.check()  # a swallowed Ctrl-C: replace nothing
        _check_not_linked(path)  # made a link meanwhile: still never written through
        _write(path, key, rows)
    return as_features(rows, dataset.num_nodes), False


def cache_owns(name: str) -> bool:
    """Whether :func:`sgc_precompute` writes a file named ``name`` in its cache folder."""
    return name.startswith("sgc-") and (name.endswith(".npz") or name.endswith(".tmp"))


__all__ = ["CACHE_FORMAT", "FeatureCacheError", "cache_owns", "precompute_key", "sgc_precompute"]

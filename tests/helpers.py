"""Builders shared by several test modules: small datasets and compile counting."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import pickle

import jax
import numpy as np
import pytest
import scipy.sparse as sp

import sparsegcn as sg
from sparsegcn.datasets.download import sha256_file
from sparsegcn.datasets.planetoid import PARTS
from sparsegcn.ops.ordering import ORDER_LIBRARIES
from sparsegcn.train import NodeData, index_mask
from sparsegcn.train.checkpoint import LOCK_NAME

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def two_communities(n=120, seed=0, train=40) -> NodeData:
    """Two dense communities and weak noisy features: the graph carries the signal."""
    rng = np.random.default_rng(seed)
    labels = (np.arange(n) >= n // 2).astype(np.int32)
    s = rng.integers(0, n, 6 * n)
    r = np.where(
        rng.random(6 * n) < 0.9,
        (s + rng.integers(1, n // 2, 6 * n)) % (n // 2) + labels[s] * (n // 2),
        rng.integers(0, n, 6 * n),
    )
    g = sg.remove_self_loops(sg.to_undirected(sg.Graph(s, r, None, n)))
    x = rng.normal(size=(n, 8)).astype(np.float32) + 0.3 * labels[:, None]
    perm = rng.permutation(n)
    valid = min(30, (n - train) // 2)  # and at least as many test nodes: no empty split
    return NodeData(
        graph=g,
        features=sg.as_features(x, n),
        labels=labels,
        train_mask=index_mask(perm[:train], n),
        val_mask=index_mask(perm[train : train + valid], n),
        test_mask=index_mask(perm[train + valid :], n),
    )


def needs_order(method: str):
    """A mark that skips, naming the extra, when the library reorder ``method``
    needs (``ORDER_LIBRARIES``) is not installed; no mark for built-in methods."""
    library = ORDER_LIBRARIES.get(method)
    return pytest.mark.skipif(
        library is not None and importlib.util.find_spec(library) is None,
        reason=f'{library} is not installed (the order extra: pip install -e ".[order]")',
    )


def order_method(method: str, *marks):
    """``method`` as a test parameter, skipped when its library is missing (``needs_order``)."""
    return pytest.param(method, marks=(needs_order(method), *marks))


def compiled_programs(fn) -> list[str]:
    """Names of the programs XLA compiled while ``fn`` ran, one entry per compilation."""
    names = []

    def listener(event, duration, **kwargs):
        if event == COMPILE_EVENT:
            names.append(kwargs.get("fun_name", "?"))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return names


def write_mini(folder, name, *, test_index, graph, num_valid):
    """A 2-class, 3-feature Planetoid dataset: 2 labelled + num_valid more allx nodes."""
    num_all = 2 + num_valid
    rng = np.random.default_rng(0)
    allx = sp.csr_matrix(rng.integers(0, 2, (num_all, 3)).astype(np.float32))
    ally = np.eye(2, dtype=np.int32)[np.arange(num_all) % 2]
    tx = sp.csr_matrix(np.arange(1, 1 + 3 * len(test_index), dtype=np.float32).reshape(-1, 3))
    ty = np.eye(2, dtype=np.int32)[np.arange(len(test_index)) % 2]
    objects = {
        "x": allx[:2],
        "y": ally[:2],
        "tx": tx,
        "ty": ty,
        "allx": allx,
        "ally": ally,
        "graph": graph,
    }
    folder.mkdir(parents=True, exist_ok=True)
    for part, obj in objects.items():
        (folder / f"ind.{name}.{part}").write_bytes(pickle.dumps(obj, protocol=4))
    (folder / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_index))
    return {f"ind.{name}.{part}": sha256_file(folder / f"ind.{name}.{part}") for part in PARTS}


TOY_SPLIT = {"train": [0, 1, 2, 3], "valid": [4, 5, 6], "test": [7, 8, 9, 10]}


def toy_ondisk(folder, *, n=12, f=3, split=None, features=None, shift=1):
    """An on-disk dataset named ``toy`` written with NumPy alone, as the format
    documents, bypassing every writer's checks (so degenerate data can be made):
    a circulant graph joining ``r`` to ``r ± shift``, labels ``r % 2``,
    random features, :data:`TOY_SPLIT` unless ``split`` is given."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True)
    rows = [sorted({(r - shift) % n, (r + shift) % n}) for r in range(n)]
    x = np.random.default_rng(0).random((n, f)).astype(np.float32)
    arrays = {
        "indptr": np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64),
        "indices": np.array([s for r in rows for s in r], np.int32),
        "features": x if features is None else np.asarray(features, np.float32),
        "labels": (np.arange(n) % 2).astype(np.int64),
        **{k: np.asarray(v, np.int64) for k, v in (split or TOY_SPLIT).items()},
    }
    files = {}
    for key, array in arrays.items():
        np.save(folder / f"{key}.npy", array)
        entry = {"file": f"{key}.npy", "dtype": str(array.dtype), "shape": list(array.shape)}
        files[key] = dict(entry, sha256=sha256_file(folder / f"{key}.npy"))
    e = int(arrays["indices"].shape[0])
    manifest = {
        "format": "sparsegcn-graph",
        "version": 1,
        "name": "toy",
        "num_nodes": n,
        "num_stored_edges": e,
        "num_edges": e // 2,
        "num_features": int(arrays["features"].shape[1]),
        "num_classes": 2,
        "metric": "acc",
        "info": {},
        "files": files,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@contextlib.contextmanager
def folder_locked_by(folder, pid: int | None):
    """Holds ``folder``'s checkpoint lock as another process would, made if missing;
    the lock file says ``pid`` (``None``: nothing yet). Yields the lock's fd."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if pid is not None:
            os.write(fd, f"{pid}\n".encode())
        yield fd
    finally:
        os.close(fd)

"""The graph-classification data every side of ``compare.py --only graph`` reads.

NumPy only: ``compare.py`` (ours) and the peers (``pyg_peer.py``,
``dgl_peer.py``, ``jraph_peer.py``, each under its own Python) import it, so
every side trains on the same arrays, read from one ``.npz``:

- ``senders``, ``receivers``: int32 ``[E]`` global node ids, both directions
  of every undirected edge stored (as the TU format stores them), sorted by
  graph;
- ``node_ptr``, ``edge_ptr``: int64 ``[G + 1]`` offsets of each graph's
  nodes and edges;
- ``features``: float32 ``[N, F]``; ``labels``: int32 ``[G]`` in ``[0, C)``;
- ``train``: int64 ``[T]``, the training graphs, in a fixed order;
- ``num_classes``: ``C``.

:func:`synthetic_tu` makes a PROTEINS-like dataset deterministically (no
download: the only TU dataset on this machine is MUTAG's 188 graphs).
:func:`gin_weights` lays out a GIN's parameters in one flat ``.npz`` that
every side can load, for the tests that check the peers run the same model.
"""

from __future__ import annotations

import math
import os

import numpy as np

PROTEINS_LIKE = {
    "num_graphs": 1113,
    "median_nodes": 26.0,
    "lognormal_mean": 41.0,
    "min_nodes": 4,
    "max_nodes": 620,
    "edges_per_node": 1.86,
    "num_features": 3,
}
"""PROTEINS' published shape (Borgwardt et al. 2005; the TU collection's
statistics): 1,113 graphs, 39.1 nodes and 72.8 undirected edges a graph on
average, median 26 nodes, 3 node labels, 2 classes. ``lognormal_mean`` is the
mean of the node counts' log-normal before rounding and clipping: 41.0 gives
39.0 nodes and 72.5 undirected edges a graph with seed 0."""


def synthetic_tu(
    num_graphs: int = PROTEINS_LIKE["num_graphs"],
    *,
    median_nodes: float = PROTEINS_LIKE["median_nodes"],
    lognormal_mean: float = PROTEINS_LIKE["lognormal_mean"],
    min_nodes: int = PROTEINS_LIKE["min_nodes"],
    max_nodes: int = PROTEINS_LIKE["max_nodes"],
    edges_per_node: float = PROTEINS_LIKE["edges_per_node"],
    num_features: int = PROTEINS_LIKE["num_features"],
    train_fraction: float = 0.9,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """A TU-like dataset of many small connected graphs, the same for every seed.

    Node counts are log-normal with the given median and mean (clipped to
    ``[min_nodes, max_nodes]``). Each graph is a random tree (node ``i > 0``
    joins a random earlier node) plus distinct random extra edges up to
    ``round(edges_per_node * n)`` undirected edges; no self-loops, no
    duplicates. Node features are a one-hot label of ``num_features`` kinds;
    the class (2 classes, balanced) depends on the graph's size and the share
    of its nodes of kind 0, plus noise, so that it can be learnt.

    Args:
      num_graphs: ``G``.
      median_nodes, lognormal_mean: of the log-normal node counts.
      min_nodes, max_nodes: clip of the node counts.
      edges_per_node: undirected edges per node, on average.
      num_features: one-hot width.
      train_fraction: the first ``ceil(train_fraction * G)`` graphs of a
        seeded permutation train.
      seed: everything is drawn from ``default_rng(seed)``.

    Returns:
      The arrays of the module's ``.npz`` layout (see the module docstring).

    Raises:
      ValueError: sizes that make no graph.
    """
    if num_graphs < 2:
        raise ValueError(f"num_graphs must be >= 2, got {num_graphs}")
    if not 2 <= min_nodes <= max_nodes:
        raise ValueError(f"need 2 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
    if not 0 < median_nodes <= lognormal_mean:
        raise ValueError(
            f"need 0 < median_nodes <= lognormal_mean, got {median_nodes}, {lognormal_mean}"
        )
    if not 0.0 < train_fraction <= 1.0:
        raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction}")
    rng = np.random.default_rng(seed)
    mu = math.log(median_nodes)
    sigma = math.sqrt(2.0 * math.log(lognormal_mean / median_nodes))
    nodes = np.clip(np.rint(rng.lognormal(mu, sigma, num_graphs)), min_nodes, max_nodes)
    nodes = nodes.astype(np.int64)
    senders, receivers, edge_counts = [], [], []
    offset = 0
    for n in nodes:
        n = int(n)
        want = min(max(n - 1, round(edges_per_node * n)), n * (n - 1) // 2)
        child = np.arange(1, n)
        parent = (rng.random(n - 1) * child).astype(np.int64)
        keys = np.minimum(child, parent) * n + np.maximum(child, parent)
        while keys.shape[0] < want:
            a, b = rng.integers(0, n, size=(2, 2 * (want - keys.shape[0]) + 4))
            extra = np.minimum(a, b) * n + np.maximum(a, b)
            extra = extra[a != b]
            _, first = np.unique(np.concatenate([keys, extra]), return_index=True)
            fresh = np.sort(first[first >= keys.shape[0]]) - keys.shape[0]
            keys = np.concatenate([keys, extra[fresh][: want - keys.shape[0]]])
        lo, hi = keys // n, keys % n
        senders.append(np.concatenate([lo, hi]) + offset)
        receivers.append(np.concatenate([hi, lo]) + offset)
        edge_counts.append(2 * keys.shape[0])
        offset += n
    kinds = rng.choice(num_features, size=int(nodes.sum()), p=_kind_shares(num_features))
    node_ptr = np.concatenate([[0], np.cumsum(nodes)]).astype(np.int64)
    share0 = np.add.reduceat((kinds == 0).astype(np.float64), node_ptr[:-1]) / nodes
    score = (
        share0 + 0.5 * np.log(nodes) / math.log(max_nodes) + 0.1 * rng.standard_normal(num_graphs)
    )
    labels = (score > np.median(score)).astype(np.int32)
    features = np.eye(num_features, dtype=np.float32)[kinds]
    train = rng.permutation(num_graphs)[: math.ceil(train_fraction * num_graphs)]
    return {
        "senders": np.concatenate(senders).astype(np.int32),
        "receivers": np.concatenate(receivers).astype(np.int32),
        "node_ptr": node_ptr,
        "edge_ptr": np.concatenate([[0], np.cumsum(edge_counts)]).astype(np.int64),
        "features": features,
        "labels": labels,
        "train": train.astype(np.int64),
        "num_classes": np.int64(2),
    }


def _kind_shares(kinds: int) -> np.ndarray:
    shares = np.linspace(2.0, 1.0, kinds)
    return shares / shares.sum()


def graph_arrays(
    senders,
    receivers,
    node_ptr,
    edge_ptr,
    features,
    labels,
    num_classes: int,
    train_fraction: float = 0.9,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Any graph dataset's arrays in the ``.npz`` layout; the first
    ``ceil(train_fraction * G)`` graphs of a seeded permutation train."""
    labels = np.asarray(labels, np.int32)
    count = labels.shape[0]
    train = np.random.default_rng(seed).permutation(count)[: math.ceil(train_fraction * count)]
    return {
        "senders": np.asarray(senders, np.int32),
        "receivers": np.asarray(receivers, np.int32),
        "node_ptr": np.asarray(node_ptr, np.int64),
        "edge_ptr": np.asarray(edge_ptr, np.int64),
        "features": np.asarray(features, np.float32),
        "labels": labels,
        "train": train.astype(np.int64),
        "num_classes": np.int64(num_classes),
    }


def graph_list(data) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """Each graph of an ``.npz`` alone: ``(senders, receivers, features, label)``
    with node ids local to the graph (0-based)."""
    node_ptr, edge_ptr = data["node_ptr"], data["edge_ptr"]
    senders, receivers = data["senders"], data["receivers"]
    features, labels = data["features"], data["labels"]
    out = []
    for g in range(labels.shape[0]):
        e0, e1 = edge_ptr[g], edge_ptr[g + 1]
        n0 = node_ptr[g]
        out.append(
            (
                (senders[e0:e1] - n0).astype(np.int64),
                (receivers[e0:e1] - n0).astype(np.int64),
                np.asarray(features[n0 : node_ptr[g + 1]], np.float32),
                int(labels[g]),
            )
        )
    return out


def size_stats(data) -> dict:
    """Graph count, and mean / median / max nodes and undirected edges a graph."""
    nodes = np.diff(data["node_ptr"])
    edges = np.diff(data["edge_ptr"]) / 2
    return {
        "graphs": int(nodes.shape[0]),
        "train_graphs": int(np.asarray(data["train"]).shape[0]),
        "nodes_mean": float(nodes.mean()),
        "nodes_median": float(np.median(nodes)),
        "nodes_max": int(nodes.max()),
        "undirected_edges_mean": float(edges.mean()),
        "features": int(data["features"].shape[1]),
        "classes": int(data["num_classes"]),
    }


def gin_weight_names(num_layers: int) -> list[str]:
    """The keys of :func:`gin_weights`' layout, layer by layer."""
    names = []
    for k in range(1, num_layers):
        names += [f"{p}_{k}" for p in ("w1", "b1", "bn1_scale", "bn1_bias")]
        names += [f"{p}_{k}" for p in ("w2", "b2", "bn_scale", "bn_bias")]
    names += [f"{p}_{k}" for k in range(num_layers) for p in ("head_w", "head_b")]
    return names


def gin_weights(params: dict) -> dict[str, np.ndarray]:
    """Ours (:func:`sparsegcn.nn.graph_gin.graph_gin` params) as flat arrays.

    Linear maps are ``[in, out]`` (``y = x W + b``); layer ``k`` counts the
    input as 0, so GIN layers are ``1 .. L-1`` and heads ``0 .. L-1``.
    """
    out = {}
    for k, layer in enumerate(params["layers"], start=1):
        zero = np.zeros(np.shape(layer["w1"])[1], np.float32)  # no bias before a batch norm
        out[f"w1_{k}"], out[f"b1_{k}"] = layer["w1"], zero
        out[f"bn1_scale_{k}"], out[f"bn1_bias_{k}"] = layer["bn1"]["scale"], layer["bn1"]["bias"]
        out[f"w2_{k}"], out[f"b2_{k}"] = layer["w2"], np.zeros(np.shape(layer["w2"])[1], np.float32)
        out[f"bn_scale_{k}"], out[f"bn_bias_{k}"] = layer["bn"]["scale"], layer["bn"]["bias"]
    for k, head in enumerate(params["heads"]):
        out[f"head_w_{k}"], out[f"head_b_{k}"] = head["w"], head["b"]
    return {name: np.asarray(value, np.float32) for name, value in out.items()}


def save_npz(path: str, arrays: dict) -> str:
    """``arrays`` to ``path`` through a temporary name."""
    partial = f"{path}.partial.npz"
    np.savez(partial, **arrays)
    os.replace(partial, path)
    return path


__all__ = [
    "PROTEINS_LIKE",
    "gin_weight_names",
    "gin_weights",
    "graph_arrays",
    "graph_list",
    "save_npz",
    "size_stats",
    "synthetic_tu",
]

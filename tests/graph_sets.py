"""Small random graph-classification datasets for the graph-task tests."""

from __future__ import annotations

import numpy as np

from sparsegcn.datasets.tu import GraphDataset


def random_graphs(count: int = 7, features: int = 3, seed: int = 0) -> GraphDataset:
    """``count`` random undirected graphs of 1..6 nodes (some without edges), two classes."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, count)
    node_ptr = np.concatenate([[0], np.cumsum(sizes)])
    senders, receivers, edge_ptr = [], [], [0]
    for g, n in enumerate(sizes):
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.5]
        for i, j in pairs:
            senders += [node_ptr[g] + i, node_ptr[g] + j]
            receivers += [node_ptr[g] + j, node_ptr[g] + i]
        edge_ptr.append(len(senders))
    return GraphDataset(
        name="tu:RANDOM",
        senders=np.asarray(senders, np.int32),
        receivers=np.asarray(receivers, np.int32),
        node_ptr=node_ptr.astype(np.int64),
        edge_ptr=np.asarray(edge_ptr, np.int64),
        features=rng.normal(size=(int(node_ptr[-1]), features)).astype(np.float32),
        labels=(np.arange(count) % 2).astype(np.int32),
        num_classes=2,
        classes=np.arange(2),
    )

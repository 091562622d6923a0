"""Small random graph-classification datasets for the graph-task tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sparsegcn.datasets.graphs import GraphDataset


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


def binary_graphs(
    count: int = 30, tasks: int = 3, features: int = 3, seed: int = 0, missing: float = 0.3
) -> GraphDataset:
    """``count`` random graphs with ``tasks`` binary labels, a fraction ``missing``
    of them NaN, and an official split (60 / 20 / 20 %)."""
    base = random_graphs(count=count, features=features, seed=seed)
    rng = np.random.default_rng(seed + 100)
    labels = (rng.random((count, tasks)) < 0.4).astype(np.float32)
    labels[rng.random((count, tasks)) < missing] = np.nan
    order = rng.permutation(count)
    cut = [int(0.6 * count), int(0.8 * count)]
    split = {
        "train": np.sort(order[: cut[0]]),
        "valid": np.sort(order[cut[0] : cut[1]]),
        "test": np.sort(order[cut[1] :]),
    }
    return GraphDataset(
        name="binary:RANDOM",
        senders=base.senders,
        receivers=base.receivers,
        node_ptr=base.node_ptr,
        edge_ptr=base.edge_ptr,
        features=base.features,
        labels=labels,
        num_classes=tasks,
        classes=np.arange(tasks),
        metric="rocauc",
        split=split,
    )


# Three graphs: 1 = nodes 1-3 (a path), 2 = nodes 4-5, 3 = node 6 alone.
# Edge lines deliberately out of graph order (graph 2's edge first).
MINI = {
    "A": "4, 5\n1, 2\n2, 1\n2, 3\n5, 4\n3, 2\n",
    "graph_indicator": "1\n1\n1\n2\n2\n3\n",
    "graph_labels": "1\n-1\n1\n",
    "node_labels": "0\n2\n0\n1\n1\n2\n",
    "node_attributes": "0.5, 1\n1.5, 2\n2.5, 3\n3.5, 4\n4.5, 5\n5.5, 6\n",
    "edge_labels": "3\n1\n1\n2\n3\n2\n",
    "edge_attributes": "10\n11\n12\n13\n14\n15\n",
    "graph_attributes": "0.25\n0.5\n0.75\n",
}


def write_mini(folder: Path, name: str = "MINI", **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for suffix, text in {**MINI, **changes}.items():
        if text is not None:
            (folder / f"{name}_{suffix}.txt").write_text(text)
    return folder

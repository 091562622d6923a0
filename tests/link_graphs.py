"""Link-prediction fixtures shared by the trainer tests: a graph of four communities
and its split prepared as :func:`sparsegcn.train.links.link_data`."""

from __future__ import annotations

import numpy as np

import sparsegcn as sg
from sparsegcn import transforms
from sparsegcn.sampling.links import random_link_split
from sparsegcn.train.links import eval_set, link_data


def communities(n: int = 48, seed: int = 0):
    """Four dense communities, a few bridges; features: the community plus noise.

    A test edge almost always joins one community, a random negative pair
    only a quarter of the time: scores that know the communities reach an
    AUC near 7/8 (chance: 1/2).
    """
    rng = np.random.default_rng(seed)
    side = np.arange(n) % 4
    p = np.where(side[:, None] == side[None, :], 0.5, 0.01)
    upper = np.triu(rng.random((n, n)) < p, 1)
    s, r = np.nonzero(upper | upper.T)
    x = np.eye(4, dtype=np.float32)[side] + 0.1 * rng.normal(size=(n, 4)).astype(np.float32)
    return sg.Graph(s, r, None, n), x


def data_of(graph, x, seed):
    split = random_link_split(graph, val=0.1, test=0.2, seed=seed)
    return link_data(
        transforms.sort_edges(sg.gcn_norm(split.graph)),
        x,
        graph.num_nodes,
        split.split["train"],
        eval_set(split.split["valid"], split.split["valid_neg"]),
        eval_set(split.split["test"], split.split["test_neg"]),
    )

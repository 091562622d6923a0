"""Random test graphs with the awkward cases the backends must handle."""

from __future__ import annotations

import numpy as np

from sparsegcn import Graph


def random_graph(
    num_nodes: int,
    num_edges: int,
    *,
    seed: int = 0,
    weighted: bool = True,
    duplicates: int = 3,
    self_loops: int = 2,
    isolated: int = 2,
) -> Graph:
    """An unsorted multigraph with duplicate edges, self-loops and isolated nodes.

    The last ``isolated`` nodes touch no edge at all.
    """
    rng = np.random.default_rng(seed)
    active = max(num_nodes - isolated, 1)
    senders = rng.integers(0, active, num_edges)
    receivers = rng.integers(0, active, num_edges)
    if num_edges and duplicates:
        picks = rng.integers(0, num_edges, duplicates)
        senders = np.concatenate([senders, senders[picks]])
        receivers = np.concatenate([receivers, receivers[picks]])
    if num_nodes and self_loops:
        loops = rng.integers(0, active, self_loops)
        senders = np.concatenate([senders, loops])
        receivers = np.concatenate([receivers, loops])
    order = rng.permutation(senders.shape[0])
    senders, receivers = senders[order], receivers[order]
    weights = rng.uniform(0.5, 2.0, senders.shape[0]).astype(np.float32) if weighted else None
    return Graph(senders, receivers, weights, num_nodes)


GRAPH_CASES = {
    "random": lambda: random_graph(30, 90, seed=1),
    "unweighted": lambda: random_graph(25, 60, seed=2, weighted=False),
    "single_node": lambda: Graph(np.zeros(0, np.int32), np.zeros(0, np.int32), None, 1),
    "single_node_loop": lambda: Graph(np.array([0]), np.array([0]), np.array([2.0]), 1),
    "no_edges": lambda: Graph(np.zeros(0, np.int32), np.zeros(0, np.int32), None, 7),
    "no_nodes": lambda: Graph(np.zeros(0, np.int32), np.zeros(0, np.int32), None, 0),
    "isolated_heavy": lambda: random_graph(40, 12, seed=3, isolated=25),
}


def with_edge_codes(graph: Graph) -> Graph:
    """``graph`` with ``edge_features`` row ``e = [e + 1, s_e, r_e, w_e]``.

    Each row names the edge it was given to (its position, shifted so that
    a zero row is never a real one, and its endpoints and weight), so a test
    can tell where a row went after edges were reordered or padded.
    """
    senders, receivers = np.asarray(graph.senders), np.asarray(graph.receivers)
    position = np.arange(1, graph.num_edges + 1)
    codes = np.stack([position, senders, receivers, np.asarray(graph.edge_weights())], axis=1)
    return graph.replace(edge_features=codes.astype(np.float32))

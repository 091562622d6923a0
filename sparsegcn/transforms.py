"""Host-side graph transformations: small verbs that return new graphs.

They run once, in NumPy, while the data is prepared, never inside a
compiled step: they change the number of edges, which ``jit`` cannot do.
Each accepts host or concrete device graphs and returns a host graph.

References:
  Kipf & Welling, *Semi-Supervised Classification with Graph Convolutional
  Networks*, ICLR 2017, https://arxiv.org/abs/1609.02907
"""

from __future__ import annotations

import numpy as np

from sparsegcn import _checks
from sparsegcn.graph import Graph, Reordering
from sparsegcn.ops.ordering import (
    COMMUNITY_MAX_ROUNDS,
    COMMUNITY_TOLERANCE,
    REORDER_METHODS,
    community_labels,
)

# Re-exported: these lived here before the node orders moved to sparsegcn.ops.ordering.
__all__ = [
    "COMMUNITY_MAX_ROUNDS",
    "COMMUNITY_TOLERANCE",
    "REORDER_METHODS",
    "Reordering",
    "add_remaining_self_loops",
    "add_self_loops",
    "coalesce",
    "community_labels",
    "degree",
    "gcn_norm",
    "gcn_norm_factors",
    "mean_norm",
    "remove_self_loops",
    "reorder",
    "sort_edges",
    "to_undirected",
]


def _host_edges(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    senders = _checks.as_host("graph.senders", graph.senders)
    receivers = _checks.as_host("graph.receivers", graph.receivers)
    weights = None if graph.weights is None else _checks.as_host("graph.weights", graph.weights)
    return senders, receivers, weights


def _ones_like(senders: np.ndarray) -> np.ndarray:
    return np.ones(senders.shape, np.float32)


def degree(graph: Graph, *, direction: str = "in", weighted: bool = True) -> np.ndarray:
    """Degree of every node.

    Args:
      graph: the graph.
      direction: ``"in"`` sums over edges into a node (its receivers' side),
        ``"out"`` over edges leaving it.
      weighted: sum edge weights (``True``) or count edges (``False``).
        Duplicate edges count once each.

    Returns:
      float32 ``[N]`` (weighted) or int64 ``[N]`` (counts).
    """
    if direction not in ("in", "out"):
        raise ValueError(f"direction must be 'in' or 'out', got {direction!r}")
    senders, receivers, weights = _host_edges(graph)
    ids = receivers if direction == "in" else senders
    if not weighted:
        return np.bincount(ids, minlength=graph.num_nodes).astype(np.int64)
    w = _ones_like(ids) if weights is None else weights
    return np.bincount(ids, weights=w, minlength=graph.num_nodes).astype(np.float32)


def remove_self_loops(graph: Graph) -> Graph:
    """Drops every edge ``i -> i`` (explicitly: this is the one verb that removes edges)."""
    senders, receivers, weights = _host_edges(graph)
    keep = senders != receivers
    return Graph(
        senders[keep],
        receivers[keep],
        None if weights is None else weights[keep],
        graph.num_nodes,
        edges_sorted=graph.edges_sorted,
    )


def add_self_loops(graph: Graph, *, fill_value: float = 1.0) -> Graph:
    """Adds a self-loop ``i -> i`` to every node that has none.

    A node that already has one or more self-loops keeps them, with their
    weights, and gets no additional loop (:func:`add_remaining_self_loops`
    collapses them to one instead, as :func:`gcn_norm` needs). New loops are appended after the
    existing edges with weight ``fill_value`` (the graph becomes weighted
    only if it was, or if ``fill_value != 1``).
    """
    senders, receivers, weights = _host_edges(graph)
    has_loop = np.zeros(graph.num_nodes, bool)
    has_loop[senders[senders == receivers]] = True
    new = np.flatnonzero(~has_loop).astype(np.int32)
    new_senders = np.concatenate([senders, new])
    new_receivers = np.concatenate([receivers, new])
    if weights is None and fill_value == 1.0:
        new_weights = None
    else:
        old = _ones_like(senders) if weights is None else weights
        new_weights = np.concatenate([old, np.full(new.shape, fill_value, np.float32)])
    return Graph(new_senders, new_receivers, new_weights, graph.num_nodes)


def add_remaining_self_loops(graph: Graph, *, fill_value: float = 1.0) -> Graph:
    """Gives every node exactly one self-loop, as PyG's ``add_remaining_self_loops``.

    All existing self-loops are removed and one loop ``i -> i`` per node is
    appended after the other edges, in node order. A node that had a loop
    keeps its weight (if it had several, the last one in edge order; PyG's
    scatter assignment leaves that choice open, here it is fixed); a node
    without one gets ``fill_value``. In an unweighted graph an
    existing loop has weight 1, so it stays 1 whatever ``fill_value`` is
    (as PyG's ``gcn_norm``, which fills the missing weights with ones first).
    The result is unweighted only if the input was and ``fill_value == 1``.

    Compare :func:`add_self_loops`, which keeps every existing loop.

    Returns:
      A graph with the ``E - L`` non-loop edges (``L`` loops in the input),
      in their original order, followed by ``N`` loops.

    References:
      PyG, ``torch_geometric.utils.add_remaining_self_loops``.
    """
    senders, receivers, weights = _host_edges(graph)
    n = graph.num_nodes
    is_loop = senders == receivers
    keep = ~is_loop
    nodes = np.arange(n, dtype=np.int32)
    new_senders = np.concatenate([senders[keep], nodes])
    new_receivers = np.concatenate([receivers[keep], nodes])
    if weights is None and fill_value == 1.0:
        return Graph(new_senders, new_receivers, None, n)
    loop_weights = np.full(n, fill_value, np.float32)
    loops = np.flatnonzero(is_loop)
    # The last loop of each node, explicitly: NumPy leaves repeated fancy assignment unordered.
    _, first_from_end = np.unique(senders[loops[::-1]], return_index=True)
    last = loops[::-1][first_from_end]
    old = _ones_like(senders) if weights is None else weights
    loop_weights[senders[last]] = old[last]
    return Graph(new_senders, new_receivers, np.concatenate([old[keep], loop_weights]), n)


_REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def coalesce(graph: Graph, *, reduce: str = "sum") -> Graph:
    """Merges duplicate edges and sorts edges by (receiver, sender).

    Duplicates' weights are combined with ``reduce`` (``"sum"``, ``"max"``
    or ``"min"``); an unweighted graph counts as weight 1 per copy, so with
    ``"sum"`` duplicates become an edge of weight equal to their count. An
    unweighted graph without duplicates stays unweighted.

    Returns:
      A graph whose edges are unique and sorted by receiver, then sender.
    """
    if reduce not in _REDUCERS:
        raise ValueError(f"reduce must be one of {sorted(_REDUCERS)}, got {reduce!r}")
    senders, receivers, weights = _host_edges(graph)
    n = max(graph.num_nodes, 1)
    key = receivers.astype(np.int64) * n + senders
    # A sort and a boundary mask: np.unique is several times slower on int64 keys.
    order = np.argsort(key)
    key = key[order]
    first = np.ones(key.shape, bool)
    np.not_equal(key[1:], key[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    unique = key[starts]
    new_receivers = (unique // n).astype(np.int32)
    new_senders = (unique % n).astype(np.int32)
    has_duplicates = unique.shape[0] != key.shape[0]
    if weights is None and (not has_duplicates or reduce != "sum"):
        new_weights = None
    elif not has_duplicates:
        new_weights = (_ones_like(senders) if weights is None else weights)[order]
    else:
        w = _ones_like(senders) if weights is None else weights
        ufunc = _REDUCERS[reduce]
        new_weights = ufunc.reduceat(w[order].astype(np.float64), starts).astype(np.float32)
    return Graph(new_senders, new_receivers, new_weights, graph.num_nodes, edges_sorted=True)


def to_undirected(graph: Graph, *, reduce: str = "max") -> Graph:
    """Returns the symmetric graph holding every edge in both directions.

    The edge list is concatenated with its reverse and coalesced. With the
    default ``reduce="max"`` this is the union of ``A`` and ``A^T``: an
    unweighted graph stays unweighted, and a pair present in both
    directions is not counted twice. ``reduce="sum"`` gives ``A + A^T``.
    """
    senders, receivers, weights = _host_edges(graph)
    both = Graph(
        np.concatenate([senders, receivers]),
        np.concatenate([receivers, senders]),
        None if weights is None else np.concatenate([weights, weights]),
        graph.num_nodes,
    )
    return coalesce(both, reduce=reduce)


def _inv_sqrt_or_zero(deg: np.ndarray) -> np.ndarray:
    if (deg < 0).any():
        node = int(np.flatnonzero(deg < 0)[0])
        raise ValueError(
            f"gcn_norm needs non-negative degrees, but node {node} has weighted degree {deg[node]}"
        )
    out = np.zeros_like(deg, dtype=np.float32)
    positive = deg > 0
    out[positive] = 1.0 / np.sqrt(deg[positive].astype(np.float64))
    return out


def gcn_norm_factors(graph: Graph, *, self_loops: bool = True) -> tuple[Graph, np.ndarray]:
    """The factors of the symmetric normalization, without per-edge products.

    Returns ``(adjacency, scale)`` with ``Â = diag(scale) · A' · diag(scale)``,
    where ``A'`` is ``graph`` with one self-loop per node
    (:func:`add_remaining_self_loops`, see :func:`gcn_norm`) and
    ``scale = D^{-1/2}``. Propagating with folded scales,
    ``scale * propagate(adjacency, scale * x)``, equals ``propagate(gcn_norm(graph), x)``
    and needs no per-edge multiply when ``adjacency`` is unweighted, which
    it is whenever ``graph`` is.

    Returns:
      ``(Graph, float32 [N])``.
    """
    g = add_remaining_self_loops(graph) if self_loops else graph
    scale = _inv_sqrt_or_zero(degree(g, direction="in"))
    return g, scale


def gcn_norm(graph: Graph, *, self_loops: bool = True) -> Graph:
    """Symmetric GCN normalization as edge weights, with PyG's ``gcn_norm`` semantics.

    .. math::

        \\hat A = D^{-1/2} A' D^{-1/2}, \\qquad
        D_{ii} = \\sum_j A'_{ij}

    where ``A'`` is ``A`` with exactly one self-loop per node
    (:func:`add_remaining_self_loops`, as PyG's ``gcn_norm``): existing
    loops, duplicates included, collapse to one that keeps the (last)
    existing loop's weight; other nodes get a loop of weight 1. Without
    loops in the input this is Kipf & Welling's ``A + I``.
    ``A[r, s]`` is the weight of edge ``s -> r``, so ``D`` counts each node's
    incoming edge weights, its self-loop included. A degree of 0 maps to 0,
    never to ``inf`` or ``NaN``. Duplicate non-loop edges are kept and
    normalized individually, so they still add up.

    Args:
      graph: the input graph (weights default to 1).
      self_loops: use ``A'`` (default). ``False`` normalizes ``A`` as given,
        its loops included.

    Returns:
      A weighted :class:`Graph` whose weights are the entries of ``Â``; with
      ``self_loops`` its edges are the non-loop edges in input order, then
      the ``N`` loops in node order (PyG's order).

    References:
      Kipf & Welling, ICLR 2017, eq. (2). https://arxiv.org/abs/1609.02907
    """
    g, scale = gcn_norm_factors(graph, self_loops=self_loops)
    senders, receivers, weights = _host_edges(g)
    w = _ones_like(senders) if weights is None else weights
    return Graph(senders, receivers, scale[senders] * w * scale[receivers], g.num_nodes)


def mean_norm(graph: Graph) -> Graph:
    """Row normalization for mean aggregation: ``w_e / deg_in(receiver_e)``.

    .. math:: \\bar A = D^{-1} A

    Propagating with the result averages each node's in-neighbours (weighted
    mean for weighted graphs). Nodes without in-edges get a zero row.
    """
    senders, receivers, weights = _host_edges(graph)
    deg = degree(graph, direction="in")
    inv = np.zeros_like(deg)
    np.divide(1.0, deg, out=inv, where=deg != 0)
    w = _ones_like(senders) if weights is None else weights
    return Graph(
        senders, receivers, w * inv[receivers], graph.num_nodes, edges_sorted=graph.edges_sorted
    )


def sort_edges(graph: Graph) -> Graph:
    """Sorts edges by (receiver, sender), keeping duplicates; sets ``edges_sorted``.

    This is the row-major order of ``A[receiver, sender]``: the order BCOO
    and cuSPARSE want, and the one that makes the scatter of
    ``segment_sum`` write each output row once.
    """
    if graph.edges_sorted:
        return graph
    senders, receivers, weights = _host_edges(graph)
    order = np.lexsort((senders, receivers))
    return Graph(
        senders[order],
        receivers[order],
        None if weights is None else weights[order],
        graph.num_nodes,
        edges_sorted=True,
    )


def reorder(graph: Graph, *, method: str = "rcm", seed: int = 0, threads: int = 1) -> Reordering:
    """Relabels nodes so that neighbours get nearby ids: ``graph.reorder(method)``.

    The verb form of :meth:`Graph.reorder` (which see for the math, the
    methods, ``seed`` and ``threads``); it returns a
    :class:`~sparsegcn.graph.Reordering`.
    """
    return graph.reorder(method, seed=seed, threads=threads)

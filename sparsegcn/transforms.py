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
    "edge_mean_features",
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


def _edge_features(graph: Graph) -> np.ndarray | None:
    if graph.edge_features is None:
        return None
    return np.asarray(_checks.as_host("graph.edge_features", graph.edge_features), np.float32)


def _take(features: np.ndarray | None, index) -> np.ndarray | None:
    return None if features is None else features[index]


LOOP_FEATURES = ("mean", "zeros")
"""What a new self-loop's edge features are (see :func:`add_self_loops`)."""

FEATURE_REDUCTIONS = ("mean", "sum", "max", "min")
"""How :func:`coalesce` merges the edge features of duplicate edges."""


def _check_loop_features(loop_features: str) -> None:
    if loop_features not in LOOP_FEATURES:
        raise ValueError(f"loop_features must be one of {LOOP_FEATURES}, got {loop_features!r}")


def _loop_features(
    features: np.ndarray, senders, receivers, nodes: np.ndarray, num_nodes: int, how: str
) -> np.ndarray:
    """Rows ``[len(nodes), D]`` for new self-loops at ``nodes``: zeros, or the
    mean of each node's incoming non-loop edges' features (zeros without any)."""
    out = np.zeros((nodes.shape[0], features.shape[1]), np.float32)
    if how == "zeros" or nodes.shape[0] == 0:
        return out
    incoming = senders != receivers
    sums = np.zeros((num_nodes, features.shape[1]), np.float64)
    np.add.at(sums, receivers[incoming], features[incoming])
    counts = np.bincount(receivers[incoming], minlength=num_nodes)
    mean = sums / np.maximum(counts, 1)[:, None]
    return mean[nodes].astype(np.float32)


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
    _checks.check_flag("weighted", weighted)
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
        edge_features=_take(_edge_features(graph), keep),
    )


def add_self_loops(graph: Graph, *, fill_value: float = 1.0, loop_features: str = "mean") -> Graph:
    """Adds a self-loop ``i -> i`` to every node that has none.

    A node that already has one or more self-loops keeps them, with their
    weights, and gets no additional loop (:func:`add_remaining_self_loops`
    collapses them to one instead, as :func:`gcn_norm` needs). New loops are appended after the
    existing edges with weight ``fill_value`` (the graph becomes weighted
    only if it was, or if ``fill_value != 1``).

    With edge features, existing edges keep theirs and a new loop at node
    ``i`` gets ``loop_features``: ``"mean"`` (default, PyG's
    ``fill_value="mean"``) the mean of the features of the edges into ``i``,
    zeros when there are none; ``"zeros"`` zeros.
    """
    _check_loop_features(loop_features)
    features = _edge_features(graph)
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
    new_features = None
    if features is not None:
        fill = _loop_features(features, senders, receivers, new, graph.num_nodes, loop_features)
        new_features = np.concatenate([features, fill])
    return Graph(
        new_senders, new_receivers, new_weights, graph.num_nodes, edge_features=new_features
    )


def add_remaining_self_loops(
    graph: Graph, *, fill_value: float = 1.0, loop_features: str = "mean"
) -> Graph:
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

    Edge features follow the weights: a node that had a loop keeps its
    (last) loop's features, any other node gets ``loop_features``
    (``"mean"`` of its incoming non-loop edges' features, or ``"zeros"``;
    see :func:`add_self_loops`).

    Returns:
      A graph with the ``E - L`` non-loop edges (``L`` loops in the input),
      in their original order, followed by ``N`` loops.

    References:
      PyG, ``torch_geometric.utils.add_remaining_self_loops``.
    """
    _check_loop_features(loop_features)
    features = _edge_features(graph)
    senders, receivers, weights = _host_edges(graph)
    n = graph.num_nodes
    is_loop = senders == receivers
    keep = ~is_loop
    nodes = np.arange(n, dtype=np.int32)
    new_senders = np.concatenate([senders[keep], nodes])
    new_receivers = np.concatenate([receivers[keep], nodes])
    loops = np.flatnonzero(is_loop)
    # The last loop of each node, explicitly: NumPy leaves repeated fancy assignment unordered.
    _, first_from_end = np.unique(senders[loops[::-1]], return_index=True)
    last = loops[::-1][first_from_end]
    new_features = None
    if features is not None:
        loop_rows = _loop_features(features, senders, receivers, nodes, n, loop_features)
        loop_rows[senders[last]] = features[last]
        new_features = np.concatenate([features[keep], loop_rows])
    if weights is None and fill_value == 1.0:
        return Graph(new_senders, new_receivers, None, n, edge_features=new_features)
    loop_weights = np.full(n, fill_value, np.float32)
    old = _ones_like(senders) if weights is None else weights
    loop_weights[senders[last]] = old[last]
    return Graph(
        new_senders,
        new_receivers,
        np.concatenate([old[keep], loop_weights]),
        n,
        edge_features=new_features,
    )


_REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def coalesce(graph: Graph, *, reduce: str = "sum", feature_reduce: str = "mean") -> Graph:
    """Merges duplicate edges and sorts edges by (receiver, sender).

    Duplicates' weights are combined with ``reduce`` (``"sum"``, ``"max"``
    or ``"min"``); an unweighted graph counts as weight 1 per copy, so with
    ``"sum"`` duplicates become an edge of weight equal to their count. An
    unweighted graph without duplicates stays unweighted.

    Duplicates' edge features are combined row-wise with ``feature_reduce``
    (``"mean"``, the default, ``"sum"``, ``"max"`` or ``"min"``, per column);
    an edge without duplicates keeps its row unchanged.

    Returns:
      A graph whose edges are unique and sorted by receiver, then sender.
    """
    if reduce not in _REDUCERS:
        raise ValueError(f"reduce must be one of {sorted(_REDUCERS)}, got {reduce!r}")
    if feature_reduce not in FEATURE_REDUCTIONS:
        raise ValueError(
            f"feature_reduce must be one of {FEATURE_REDUCTIONS}, got {feature_reduce!r}"
        )
    features = _edge_features(graph)
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
    new_features = None
    if features is not None:
        new_features = features[order]
        if has_duplicates:
            new_features = _reduce_rows(new_features, starts, feature_reduce)
    return Graph(
        new_senders,
        new_receivers,
        new_weights,
        graph.num_nodes,
        edges_sorted=True,
        edge_features=new_features,
    )


def _reduce_rows(rows: np.ndarray, starts: np.ndarray, how: str) -> np.ndarray:
    """Reduces the groups of consecutive ``rows`` that begin at ``starts``."""
    if rows.shape[0] == 0:
        return rows
    if how == "mean":
        sums = np.add.reduceat(rows.astype(np.float64), starts, axis=0)
        counts = np.diff(np.append(starts, rows.shape[0]))
        return (sums / counts[:, None]).astype(np.float32)
    ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum}[how]
    return ufunc.reduceat(rows.astype(np.float64), starts, axis=0).astype(np.float32)


def to_undirected(graph: Graph, *, reduce: str = "max", feature_reduce: str = "mean") -> Graph:
    """Returns the symmetric graph holding every edge in both directions.

    The edge list is concatenated with its reverse and coalesced. With the
    default ``reduce="max"`` this is the union of ``A`` and ``A^T``: an
    unweighted graph stays unweighted, and a pair present in both
    directions is not counted twice. ``reduce="sum"`` gives ``A + A^T``.

    Edge features: the reverse of edge ``e`` copies ``e``'s row; the copies
    of a pair that end up duplicated (the pair was stored in both directions,
    or repeated) are merged by ``feature_reduce`` (default ``"mean"``, see
    :func:`coalesce`). So ``i -> j`` stored alone gives two edges with its
    features; ``i -> j`` (features ``a``) and ``j -> i`` (``b``) give two
    edges with ``(a + b) / 2``.
    """
    features = _edge_features(graph)
    senders, receivers, weights = _host_edges(graph)
    both = Graph(
        np.concatenate([senders, receivers]),
        np.concatenate([receivers, senders]),
        None if weights is None else np.concatenate([weights, weights]),
        graph.num_nodes,
        edge_features=None if features is None else np.concatenate([features, features]),
    )
    return coalesce(both, reduce=reduce, feature_reduce=feature_reduce)


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
    _checks.check_flag("self_loops", self_loops)
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
    return Graph(
        senders,
        receivers,
        scale[senders] * w * scale[receivers],
        g.num_nodes,
        edge_features=g.edge_features,
    )


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
        senders,
        receivers,
        w * inv[receivers],
        graph.num_nodes,
        edges_sorted=graph.edges_sorted,
        edge_features=graph.edge_features,
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
        edge_features=_take(_edge_features(graph), order),
    )


def reorder(graph: Graph, *, method: str = "rcm", seed: int = 0, threads: int = 1) -> Reordering:
    """Relabels nodes so that neighbours get nearby ids: ``graph.reorder(method)``.

    The verb form of :meth:`Graph.reorder` (which see for the math, the
    methods, ``seed`` and ``threads``); it returns a
    :class:`~sparsegcn.graph.Reordering`.
    """
    return graph.reorder(method, seed=seed, threads=threads)


def edge_mean_features(graph: Graph, *, chunk: int = 1 << 22) -> np.ndarray:
    """Node features from edge features: the mean of each node's incoming edges' rows.

    .. math:: x_i = \\frac{1}{|\\{e : r_e = i\\}|} \\sum_{e:\\, r_e = i} f_e

    (zeros for a node without incoming edges). On a symmetric graph (every
    edge stored in both directions, as ``ogbn-proteins`` is used) the
    incoming edges are all incident edges. This is what OGB's ogbn-proteins
    baselines feed their GNNs, which have no node features
    (``data.x = data.adj_t.mean(dim=1)``).

    Args:
      graph: a graph with ``edge_features`` ``[E, D]``.
      chunk: edges summed per step (bounded float64 temporaries).

    Returns:
      float32 ``[N, D]``.

    Raises:
      ValueError: the graph has no edge features, or one is not finite
        (naming its edge row and column).

    References:
      Hu et al., *Open Graph Benchmark*, NeurIPS 2020,
      ``examples/nodeproppred/proteins``. https://arxiv.org/abs/2005.00687
    """
    if graph.edge_features is None:
        raise ValueError(f"edge_mean_features needs a graph with edge_features; {graph!r} has none")
    features = graph.edge_features
    receivers = graph.receivers
    n, d = graph.num_nodes, int(features.shape[1])
    sums = np.zeros((n, d), np.float64)
    counts = np.zeros(n, np.int64)
    for start in range(0, int(features.shape[0]), chunk):
        r = np.asarray(receivers[start : start + chunk], np.int64)
        f = np.asarray(features[start : start + chunk], np.float64)
        bad = ~np.isfinite(f)
        if bad.any():  # named here: the node features it would make are derived
            row, column = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"edge_features[{start + row}, {column}] = {f[row, column]} is not finite "
                "(the node features are means of the edge features)"
            )
        counts += np.bincount(r, minlength=n)
        for column in range(d):
            sums[:, column] += np.bincount(r, weights=f[:, column], minlength=n)
    return (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)

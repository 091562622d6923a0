"""Batches of many small graphs as one padded, block-diagonal graph.

A batch of graphs is one :class:`~sparsegcn.Graph` whose connected blocks
are the graphs, plus ``node_graph``, each node's graph within the batch
(PyG's ``batch`` vector). Every array is padded to a static
:class:`Budget` of nodes, edges and graphs, so one compiled step serves
every batch. As in jraph's ``pad_with_graphs``, the last graph slot is a
padding graph that owns every padding node and edge: padding edges run
from the last node to itself, so no message ever crosses into a real
graph, and a readout over ``node_graph`` leaves the real graphs' rows
untouched. Any model written against the view protocol runs on
``batch.graph`` unchanged.

Which graphs share a batch is a *packing* (:data:`PACKINGS`). ``"random"``
packs a random order, and the budget covers a random batch's size
(:func:`choose_budget`: mean plus three deviations). ``"balanced"`` (the
default) deals the graphs, sorted by size, so that every batch holds one
graph of each size stratum (:func:`balanced_order`): batch totals sit near
the mean, and the budget is the largest batch actually packed
(:func:`fit_budget`), so far fewer padding rows are computed. Either way
:func:`pack_graphs` fills batches greedily in the given order and starts a
new batch where the next graph would overflow a budget, so no graph is ever
dropped or cut. Packing is vectorised NumPy: a Python loop runs once per
batch or size stratum, never per node or edge.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np

from sparsegcn import _checks
from sparsegcn.graph import Graph

Array = Any

PACKINGS = ("balanced", "random")
"""How graphs are dealt to batches: ``"balanced"`` (:func:`balanced_order`), or
``"random"`` (a random permutation)."""


class Budget(NamedTuple):
    """Static sizes of a padded batch (padding slots included).

    Attributes:
      nodes: node rows ``N_b`` (at least one more than the real nodes).
      edges: edge slots ``E_b``.
      graphs: graph slots ``G_b`` (at least one more than the real graphs).
    """

    nodes: int
    edges: int
    graphs: int


class GraphBatch(NamedTuple):
    """A padded batch of graphs; a pytree (a NamedTuple of arrays).

    With a leading axis ``[B, ...]`` on every leaf it holds ``B`` batches
    (:func:`pack_graphs`); index it with ``jax.tree.map(lambda a: a[b], ...)``.

    Attributes:
      senders, receivers: int32 ``[E_b]`` node rows within the batch;
        padding edges are ``N_b - 1 -> N_b - 1``.
      node_graph: int32 ``[N_b]`` graph slot of each node; padding nodes
        belong to the padding graph ``G_b - 1``.
      x: ``[N_b, F]`` node features, zero on padding rows: float32, or
        int32 categorical columns (a dataset with ``feature_dims``).
      labels: int32 ``[G_b]`` classes, 0 on padding slots; or, for binary
        multi-task labels, float32 ``[G_b, T]`` 0/1 with NaN where a label
        is missing, NaN on padding slots (the loss and the metrics mask NaN:
        ``~isnan(labels) & graph_mask[:, None]``).
      graph_mask: bool ``[G_b]``, ``True`` on real graphs.
      graph_ids: int32 ``[G_b]`` each slot's index in the dataset, ``-1``
        on padding slots.
      edge_features: ``[E_b, D]`` (zero on padding; float32, or int32
        categorical columns) or ``None``.
    """

    senders: Array
    receivers: Array
    node_graph: Array
    x: Array
    labels: Array
    graph_mask: Array
    graph_ids: Array
    edge_features: Array | None = None

    @property
    def num_nodes(self) -> int:
        """Static ``N_b``."""
        return int(self.x.shape[-2])

    @property
    def num_graphs(self) -> int:
        """Static ``G_b``."""
        return int(self.graph_mask.shape[-1])

    @property
    def graph(self) -> Graph:
        """The block-diagonal :class:`~sparsegcn.Graph` (unweighted) of one batch."""
        return Graph(self.senders, self.receivers, None, self.num_nodes)

    @property
    def node_mask(self) -> jax.Array:
        """bool ``[N_b]``: ``True`` on nodes of real graphs."""
        return self.graph_mask[self.node_graph]


def choose_budget(
    nodes_per_graph: np.ndarray, edges_per_graph: np.ndarray, batch_size: int
) -> Budget:
    """Budgets for batches of ``batch_size`` graphs, from the size distribution.

    A batch of ``B`` graphs drawn at random holds ``B μ`` nodes on average
    with a standard deviation of about ``σ √B``; the node budget is that
    mean plus three deviations (rounded up to a multiple of 8), and at
    least the largest graph, so that any graph fits alone; the edge budget
    likewise. A rare batch that exceeds it is split by :func:`pack_graphs`.
    One padding node and one padding graph slot are added.

    Args:
      nodes_per_graph: int ``[G]``.
      edges_per_graph: int ``[G]``.
      batch_size: graphs per batch ``B``.

    Returns:
      The :class:`Budget`.

    Raises:
      ValueError: counts that are not ``[G]`` with ``G >= 1`` (a 2-D array
        would be budgeted as one graph), of different lengths, negative,
        fractional or not finite, naming the first such count.
      TypeError: counts that are not numbers.
    """
    batch_size = _checks.check_static_int("batch_size", batch_size, minimum=1)
    nodes_per_graph, edges_per_graph = _check_counts(nodes_per_graph, edges_per_graph)
    sizes = []
    for counts in (nodes_per_graph, edges_per_graph):
        b = min(batch_size, counts.shape[0])
        typical = b * counts.mean() + 3.0 * math.sqrt(b) * counts.std()
        # Never below the largest graph, nor above the b largest together.
        most = np.sort(counts)[::-1][:b].sum()
        need = max(math.ceil(min(typical, float(most))), int(counts.max()), 1)
        sizes.append(-(-need // 8) * 8)
    return Budget(
        nodes=sizes[0] + 1, edges=sizes[1], graphs=min(batch_size, len(nodes_per_graph)) + 1
    )


def _check_counts(nodes_per_graph, edges_per_graph) -> tuple[np.ndarray, np.ndarray]:
    """Both as int64 ``[G]`` (``G >= 1``) if they are whole, non-negative counts
    of the same graphs; else raises naming the array and its first bad count."""
    arrays = {
        "nodes_per_graph": _checks.as_host("nodes_per_graph", nodes_per_graph),
        "edges_per_graph": _checks.as_host("edges_per_graph", edges_per_graph),
    }
    shapes = [a.shape for a in arrays.values()]
    if any(len(shape) != 1 for shape in shapes) or shapes[0] != shapes[1]:
        raise ValueError(
            f"nodes_per_graph and edges_per_graph must be [G], one count per graph, got shapes "
            f"{shapes[0]} and {shapes[1]}"
        )
    if shapes[0][0] == 0:
        raise ValueError("choose_budget needs the sizes of at least one graph, got G = 0")
    counts = []
    for name, a in arrays.items():
        if a.dtype == np.bool_ or not (
            np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)
        ):
            raise TypeError(f"{name} must hold integer counts, got dtype {a.dtype}")
        bad = a < 0
        if np.issubdtype(a.dtype, np.floating):
            bad = ~np.isfinite(a) | (a != np.round(a)) | bad
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{name}[{pos}] = {a[pos].item()!r} is not a count (a whole number >= 0)"
            )
        counts.append(a.astype(np.int64))
    return counts[0], counts[1]


def check_budget(budget: Budget) -> Budget:
    """``budget`` with int fields, if one graph and the padding fit in it.

    Packing adds graphs while they fit, so a budget with no graph slot or no
    node row besides padding's would never make progress.

    Raises:
      TypeError: ``budget`` is not a :class:`Budget`, or a field is not an int.
      ValueError: fewer than 2 node rows or graph slots, or negative edges.
    """
    if not isinstance(budget, Budget):
        raise TypeError(
            f"budget must be a Budget(nodes, edges, graphs), got {type(budget).__name__} {budget!r}"
        )
    nodes = _checks.check_static_int("budget.nodes", budget.nodes)
    edges = _checks.check_static_int("budget.edges", budget.edges)
    graphs = _checks.check_static_int("budget.graphs", budget.graphs)
    if graphs < 2:
        raise ValueError(
            f"budget.graphs must be >= 2 (one graph slot plus the padding slot), got {graphs}"
        )
    if nodes < 2:
        raise ValueError(
            f"budget.nodes must be >= 2 (one node row plus the padding row), got {nodes}"
        )
    return Budget(nodes, edges, graphs)


def _check_order(order, num_graphs: int, name: str = "order") -> np.ndarray:
    """``order`` as int64 ``[K]`` if it holds distinct graph ids in ``[0, num_graphs)``.

    Raises:
      ValueError: naming ``name`` (the order), the first bad position and its value.
    """
    order = np.asarray(order)
    if order.ndim != 1:
        raise ValueError(f"{name} must have 1 dimension, got shape {order.shape}")
    if order.size == 0:
        return order.astype(np.int64)
    if order.dtype == np.bool_ or not np.issubdtype(order.dtype, np.integer):
        whole = np.zeros(order.shape, bool)
        if np.issubdtype(order.dtype, np.floating):
            whole = np.isfinite(order) & (order == np.round(order))
        pos = int(np.flatnonzero(~whole)[0]) if not whole.all() else 0
        raise ValueError(
            f"{name} must hold integer graph ids, got {name}[{pos}] = {order[pos].item()!r} "
            f"(dtype {order.dtype})"
        )
    if order.min() < 0 or order.max() >= num_graphs:
        pos = int(np.flatnonzero((order < 0) | (order >= num_graphs))[0])
        raise ValueError(
            f"{name}[{pos}] = {int(order[pos])} is out of range: graph ids must lie in "
            f"[0, {num_graphs}) for a dataset of {num_graphs} graphs"
        )
    order = order.astype(np.int64)
    by_id = np.argsort(order, kind="stable")
    repeats = by_id[1:][order[by_id][1:] == order[by_id][:-1]]
    if repeats.size:
        pos = int(repeats.min())
        first = int(np.flatnonzero(order[:pos] == order[pos])[0])
        raise ValueError(
            f"{name}[{pos}] = {int(order[pos])} repeats {name}[{first}]; "
            "each graph is packed at most once"
        )
    return order


def batch_bounds(
    nodes: np.ndarray,
    edges: np.ndarray,
    budget: Budget,
    batch_size: int,
    *,
    group: int | None = None,
) -> np.ndarray:
    """Where each batch starts in a sequence of graphs, greedily under ``budget``.

    Args:
      nodes, edges: int ``[G]`` sizes of the graphs in packing order.
      budget: the :class:`Budget` (one node and one graph slot are padding's).
      batch_size: the most graphs per batch.
      group: no batch spans a multiple of ``group`` in the sequence (the
        balanced groups of :func:`balanced_order`: a group that overflows is
        split, and the next group still starts a batch); ``None``: no such
        bound.

    Returns:
      int64 ``[B + 1]`` offsets: batch ``b`` holds graphs ``bounds[b] ..
      bounds[b + 1] - 1``.

    Raises:
      ValueError: a single graph larger than the budget (naming it);
        ``batch_size`` below 1; a budget without room for one graph and
        the padding (fewer than 2 graph slots or 2 node rows).
    """
    batch_size = _checks.check_static_int("batch_size", batch_size, minimum=1)
    budget = check_budget(budget)
    too_big = np.flatnonzero((nodes > budget.nodes - 1) | (edges > budget.edges))
    if too_big.size:
        g = int(too_big[0])
        raise ValueError(
            f"graph {g} has {int(nodes[g])} nodes and {int(edges[g])} edges; the budget holds "
            f"{budget.nodes - 1} nodes and {budget.edges} edges per batch"
        )
    node_end = np.concatenate([[0], np.cumsum(nodes)])
    edge_end = np.concatenate([[0], np.cumsum(edges)])
    most = min(batch_size, budget.graphs - 1)
    if group is not None:
        group = _checks.check_static_int("group", group, minimum=1)
    bounds = [0]
    count = nodes.shape[0]
    while bounds[-1] < count:
        start = bounds[-1]
        by_nodes = np.searchsorted(node_end, node_end[start] + budget.nodes - 1, side="right") - 1
        by_edges = np.searchsorted(edge_end, edge_end[start] + budget.edges, side="right") - 1
        end = min(by_nodes, by_edges, start + most, count)
        if group is not None:
            end = min(end, (start // group + 1) * group)
        bounds.append(int(end))
    return np.asarray(bounds, np.int64)


def _dtype(features: np.ndarray) -> type:
    """int32 for categorical columns, float32 for the rest."""
    return np.int32 if np.issubdtype(features.dtype, np.integer) else np.float32


def pack_graphs(
    dataset,
    order: np.ndarray,
    budget: Budget,
    batch_size: int,
    *,
    num_batches: int | None = None,
    group: int | None = None,
) -> GraphBatch:
    """Packs the graphs ``order`` of ``dataset``, in that order, into padded batches.

    Args:
      dataset: a :class:`~sparsegcn.datasets.graph_dataset.GraphDataset` (any object
        with ``senders``, ``receivers``, ``node_ptr``, ``edge_ptr``,
        ``features``, ``labels`` and ``edge_features``). Integer features
        stay int32 (categorical columns); ``[G, T]`` labels stay float32 with
        their NaN.
      order: int ``[K]`` graph indices in ``[0, G)``, each at most once.
      budget: static sizes of every batch (:func:`choose_budget`).
      batch_size: the most graphs per batch.
      num_batches: pad with empty batches (every graph slot padding) to this
        many, so that several packings stack; default: as many as needed.
      group: no batch spans a multiple of ``group`` graphs of ``order``
        (:func:`batch_bounds`).

    Returns:
      A :class:`GraphBatch` of NumPy arrays with a leading axis ``[B]``.

    Raises:
      ValueError: a graph over the budget, or more batches than
        ``num_batches``; ``batch_size`` below 1 or a budget without room for
        one graph plus padding (:func:`batch_bounds`); an ``order`` entry
        that is not an integer, out of range or repeated (naming its
        position and value).
    """
    node_ptr, edge_ptr = np.asarray(dataset.node_ptr), np.asarray(dataset.edge_ptr)
    order = _check_order(order, node_ptr.shape[0] - 1)
    nodes = (node_ptr[order + 1] - node_ptr[order]).astype(np.int64)
    edges = (edge_ptr[order + 1] - edge_ptr[order]).astype(np.int64)
    bounds = batch_bounds(nodes, edges, budget, batch_size, group=group)
    count = bounds.shape[0] - 1
    total = count if num_batches is None else num_batches
    if count > total:
        raise ValueError(f"the graphs need {count} batches, more than num_batches={total}")
    n_b, e_b, g_b = budget
    # Each graph's batch and slot; each node's and edge's batch and row.
    graph_batch = np.repeat(np.arange(count), np.diff(bounds))
    graph_slot = np.arange(order.shape[0]) - bounds[graph_batch]
    node_start = np.concatenate([[0], np.cumsum(nodes)])
    batch_node_start = node_start[bounds[:-1]]
    # Global id of every node in packing order (graphs' node ranges concatenated).
    node_src = np.repeat(node_ptr[order] - node_start[:-1], nodes) + np.arange(node_start[-1])
    node_owner = np.repeat(np.arange(order.shape[0]), nodes)
    node_batch = graph_batch[node_owner]
    node_row = np.arange(node_start[-1]) - batch_node_start[node_batch]
    row_of = np.zeros(dataset.features.shape[0], np.int64)
    row_of[node_src] = node_row
    edge_start = np.concatenate([[0], np.cumsum(edges)])
    edge_src = np.repeat(edge_ptr[order] - edge_start[:-1], edges) + np.arange(edge_start[-1])
    edge_batch = graph_batch[np.repeat(np.arange(order.shape[0]), edges)]
    edge_slot = np.arange(edge_start[-1]) - edge_start[bounds[:-1]][edge_batch]

    senders = np.full((total, e_b), n_b - 1, np.int32)
    receivers = np.full((total, e_b), n_b - 1, np.int32)
    senders[edge_batch, edge_slot] = row_of[np.asarray(dataset.senders)[edge_src]]
    receivers[edge_batch, edge_slot] = row_of[np.asarray(dataset.receivers)[edge_src]]
    node_graph = np.full((total, n_b), g_b - 1, np.int32)
    node_graph[node_batch, node_row] = graph_slot[node_owner]
    features = np.asarray(dataset.features)
    x = np.zeros((total, n_b, features.shape[1]), _dtype(features))
    x[node_batch, node_row] = features[node_src]
    source_labels = np.asarray(dataset.labels)
    if source_labels.ndim == 2:  # binary tasks: NaN is a missing label, padding included
        labels = np.full((total, g_b, source_labels.shape[1]), np.nan, np.float32)
    else:
        labels = np.zeros((total, g_b), np.int32)
    labels[graph_batch, graph_slot] = source_labels[order]
    graph_mask = np.zeros((total, g_b), bool)
    graph_mask[graph_batch, graph_slot] = True
    graph_ids = np.full((total, g_b), -1, np.int32)
    graph_ids[graph_batch, graph_slot] = order
    edge_features = None
    if dataset.edge_features is not None:
        source = np.asarray(dataset.edge_features)
        edge_features = np.zeros((total, e_b, source.shape[1]), _dtype(source))
        edge_features[edge_batch, edge_slot] = source[edge_src]
    return GraphBatch(
        senders, receivers, node_graph, x, labels, graph_mask, graph_ids, edge_features
    )


def batch_count(
    dataset, order: np.ndarray, budget: Budget, batch_size: int, *, group: int | None = None
) -> int:
    """How many batches :func:`pack_graphs` makes of ``order`` (checked as there)."""
    order = _check_order(order, np.asarray(dataset.node_ptr).shape[0] - 1)
    nodes = np.diff(np.asarray(dataset.node_ptr))[order]
    edges = np.diff(np.asarray(dataset.edge_ptr))[order]
    return int(batch_bounds(nodes, edges, budget, batch_size, group=group).shape[0] - 1)


def check_packing(packing: str) -> str:
    """``packing`` if it names one of :data:`PACKINGS`.

    Raises:
      ValueError: naming the value and the choices.
    """
    if packing not in PACKINGS:
        raise ValueError(f"packing must be one of {list(PACKINGS)}, got {packing!r}")
    return packing


def _size_key(nodes: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """float64 ``[G]``: nodes and edges, each relative to its mean, added."""
    key = np.zeros(nodes.shape[0], np.float64)
    for counts in (nodes, edges):
        mean = float(np.mean(counts)) if counts.size else 0.0
        if mean > 0:
            key += counts / mean
    return key


def balanced_order(
    nodes: np.ndarray,
    edges: np.ndarray,
    batch_size: int,
    *,
    rng: np.random.Generator,
    devices: int = 1,
) -> np.ndarray:
    """A random order of ``G`` graphs whose runs of ``batch_size`` have near-equal sizes.

    The graphs are sorted by size (nodes and edges, each relative to its
    mean; ties broken at random) and cut into ``B = batch_size`` strata of
    ``n = ⌈G / B⌉`` graphs (the last ``G - (n - 1) B`` graphs' batch draws
    its graphs from that many strata, chosen at random). Every batch takes
    one graph of each stratum, largest stratum first: even-numbered strata
    past the first go, largest graph first, to the batches whose graphs so
    far are smallest against their strata's means; the other strata are
    dealt at random. Every batch is then a random draw of one graph per
    stratum, corrected for what earlier strata gave it, so its total sits
    near ``B`` times the mean; the size spread of a batch is the spread
    within strata rather than ``σ √B`` (:func:`choose_budget`), apart from
    the largest graphs' tail. A fresh ``rng`` gives a fresh assignment.

    The order lists batch after batch, the partial batch last; within a
    batch, its graphs are dealt, largest first, each to the sub-batch with the
    lowest total so far, among the ``D = devices`` consecutive sub-batches of
    ``⌈B / D⌉`` graphs that ``pack_steps`` cuts it into (the last takes what is
    left), so that each is balanced as well.

    Args:
      nodes, edges: int ``[G]`` sizes.
      batch_size: ``B``.
      rng: the randomness (the caller's seed).
      devices: ``D`` sub-batches per batch.

    Returns:
      int64 ``[G]``, a permutation of ``0 .. G - 1``: graph ``order[i]``
      goes ``i``-th. Pack it with ``group=batch_size`` (:func:`pack_graphs`)
      so that a batch split by an overflow does not shift the ones after it.
    """
    batch_size = _checks.check_static_int("batch_size", batch_size, minimum=1)
    devices = _checks.check_static_int("devices", devices, minimum=1)
    nodes, edges = np.asarray(nodes), np.asarray(edges)
    count = nodes.shape[0]
    if count == 0:
        return np.zeros(0, np.int64)
    b = min(batch_size, count)
    n = -(-count // b)  # batches
    last = count - (n - 1) * b  # graphs of the last batch, 1 .. b
    key = _size_key(nodes, edges)
    by_size = np.lexsort((np.asarray(rng.random(count)), -key))  # largest first
    in_last = np.zeros(b, bool)
    in_last[rng.choice(b, last, replace=False)] = True
    sizes = n - 1 + in_last  # graphs per stratum
    starts = np.concatenate([[0], np.cumsum(sizes)])
    slot = np.empty((n, b), np.int64)  # graph (index into nodes) of each batch's stratum
    slot.fill(-1)
    excess = np.zeros(n, np.float64)  # each batch's size minus its strata's means
    for s in range(b):
        members = by_size[starts[s] : starts[s + 1]]
        targets = np.arange(n) if in_last[s] else np.arange(n - 1)
        if s > 0 and s % 2 == 0:
            # Largest graph to the batch furthest below its strata's means.
            graphs = members  # already largest first
            targets = targets[np.lexsort((rng.random(targets.shape[0]), excess[targets]))]
        else:
            graphs = rng.permutation(members)
        slot[targets, s] = graphs
        excess[targets] += key[graphs] - key[members].mean()
    # Within a batch: its graphs dealt to the D sub-batches that pack_steps cuts it
    # into, so that each sub-batch is balanced too (one per device).
    order = []
    for row in slot:
        graphs = row[row >= 0]
        order.append(graphs[_deal(key[graphs], devices, -(-b // devices))])
    return np.concatenate(order).astype(np.int64)


def _deal(sizes: np.ndarray, devices: int, per_device: int) -> np.ndarray:
    """Positions of a batch's ``sizes`` in sub-batch order: ``devices`` sub-batches of
    ``per_device`` graphs, the last taking what is left (as ``pack_steps`` cuts
    ``len(sizes)`` consecutive graphs). Largest graph first, each goes to the
    sub-batch, not yet full, whose total per slot is lowest (ties: the lower index)."""
    count = sizes.shape[0]
    capacity = np.array([min(per_device, max(0, count - d * per_device)) for d in range(devices)])
    if devices == 1:
        return np.arange(count)
    totals = np.zeros(devices)
    dealt: list[list[int]] = [[] for _ in range(devices)]
    for position in np.argsort(-sizes, kind="stable"):
        open_ = np.flatnonzero([len(dealt[d]) < capacity[d] for d in range(devices)])
        d = int(open_[np.argmin(totals[open_] / capacity[open_])])
        dealt[d].append(int(position))
        totals[d] += sizes[position]
    return np.asarray([p for sub in dealt for p in sub], np.int64)


def fit_budget(
    nodes_per_graph: np.ndarray,
    edges_per_graph: np.ndarray,
    orders,
    batch_size: int,
    *,
    group: int | None = None,
) -> Budget:
    """The smallest budget under which :func:`pack_graphs` splits no batch of ``orders``.

    Each order is cut into batches of ``batch_size`` graphs (within runs of
    ``group``, as :func:`batch_bounds` cuts them); the node budget is the
    largest batch's nodes, the edge budget its edges, each rounded up to a
    multiple of 8, plus one padding node and one padding graph slot. So the
    budget is set by the batches a run packs, not by a bound on random ones.

    Args:
      nodes_per_graph, edges_per_graph: int ``[G]`` over the dataset.
      orders: int arrays of graph ids (packing orders).
      batch_size: the most graphs per batch.
      group: as :func:`pack_graphs`'s (``None``: no groups).

    Returns:
      The :class:`Budget`.

    Raises:
      ValueError: no order holds a graph; an order with a graph id that is
        not an integer, out of range or repeated; counts of different lengths.
    """
    batch_size = _checks.check_static_int("batch_size", batch_size, minimum=1)
    if group is not None:
        group = _checks.check_static_int("group", group, minimum=1)
    nodes_per_graph = np.asarray(nodes_per_graph, np.int64)
    edges_per_graph = np.asarray(edges_per_graph, np.int64)
    if nodes_per_graph.ndim != 1 or nodes_per_graph.shape != edges_per_graph.shape:
        raise ValueError(
            f"nodes_per_graph and edges_per_graph must be [G], one count per graph, got shapes "
            f"{nodes_per_graph.shape} and {edges_per_graph.shape}"
        )
    most_nodes = most_edges = longest = 0
    for index, order in enumerate(orders):
        order = _check_order(order, nodes_per_graph.shape[0], f"orders[{index}]")
        if order.size == 0:
            continue
        position = np.arange(order.shape[0])
        if group is None:
            batch = position // batch_size
        else:
            per_group = -(-group // batch_size)
            batch = (position // group) * per_group + (position % group) // batch_size
        most_nodes = max(most_nodes, int(np.bincount(batch, nodes_per_graph[order]).max()))
        most_edges = max(most_edges, int(np.bincount(batch, edges_per_graph[order]).max()))
        longest = max(longest, int(np.bincount(batch).max()))
    if longest == 0:
        raise ValueError("fit_budget needs at least one graph in orders, got none")
    return Budget(
        nodes=-(-max(most_nodes, 1) // 8) * 8 + 1,
        edges=-(-max(most_edges, 1) // 8) * 8,
        graphs=longest + 1,
    )


__all__ = [
    "PACKINGS",
    "Budget",
    "GraphBatch",
    "balanced_order",
    "batch_bounds",
    "batch_count",
    "check_budget",
    "check_packing",
    "choose_budget",
    "fit_budget",
    "pack_graphs",
]

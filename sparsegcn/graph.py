"""Graph storage: an immutable edge-list pytree, its CSR view and node relabelling.

A :class:`Graph` is a directed multigraph stored as two parallel id arrays.
Edge ``e`` carries a message from ``senders[e]`` to ``receivers[e]``; message
passing computes, for every node ``r``,

.. math::

    y_r = \\sum_{e:\\, \\mathrm{receivers}_e = r} w_e \\, x_{\\mathrm{senders}_e}

so the graph acts as the sparse matrix ``A[receiver, sender] = w`` and
``propagate(graph, x) == A @ x``.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks
from sparsegcn.ops.csr import group_by_row
from sparsegcn.ops.ordering import node_order
from sparsegcn.views import EdgeListView

Array = Any  # np.ndarray on the host, jax.Array on device, a tracer under jit.

_INT32_MAX = np.iinfo(np.int32).max

GRAPH_CHILDREN = ("senders", "receivers", "weights", "edge_features")
"""A :class:`Graph`'s pytree leaves, in order (subclasses append theirs after them)."""


def _prepare_ids(name: str, ids, num_nodes: int):
    if _checks.is_traced(ids):
        return ids
    host = np.asarray(ids)
    _checks.check_integer_array(name, host, ndim=1)
    _checks.check_ids_in_range(name, host, num_nodes)
    if isinstance(ids, jax.Array):
        return ids.astype(jnp.int32)
    return host.astype(np.int32, copy=False)


def _prepare_weights(weights, num_edges: int):
    if weights is None or _checks.is_traced(weights):
        return weights
    host = np.asarray(weights)
    if host.ndim != 1 or host.shape[0] != num_edges:
        raise ValueError(f"weights must have shape ({num_edges},), one per edge, got {host.shape}")
    _checks.check_real_values("weights", host)  # finite, and inside float32's range
    if isinstance(weights, jax.Array):
        return weights.astype(jnp.float32)
    return host.astype(np.float32, copy=False)


def _prepare_edge_features(features, num_edges: int):
    if features is None or _checks.is_traced(features):
        return features
    host = features if isinstance(features, np.ndarray) else np.asarray(features)
    if host.ndim != 2 or host.shape[0] != num_edges:
        raise ValueError(
            f"edge_features must have shape ({num_edges}, D), one row per edge, got {host.shape}"
        )
    if not (np.issubdtype(host.dtype, np.floating) or np.issubdtype(host.dtype, np.integer)):
        raise ValueError(f"edge_features must be real numbers, got dtype {host.dtype}")
    if isinstance(features, jax.Array):
        return features.astype(jnp.float32)
    if isinstance(features, np.memmap) and features.dtype == np.float32:
        return features  # checked when the on-disk dataset was written; never read whole here
    _checks.check_real_values("edge_features", host)  # finite, and inside float32's range
    return host.astype(np.float32, copy=False)


def _check_sorted(senders: np.ndarray, receivers: np.ndarray, chunk: int = 1 << 22) -> None:
    """Raises unless edges are sorted by (receiver, sender).

    Works in chunks so a memory-mapped edge list of 10^8 edges needs no
    full-length temporaries.
    """
    for start in range(1, receivers.shape[0], chunk):
        stop = min(start + chunk, receivers.shape[0])
        r = np.asarray(receivers[start - 1 : stop], np.int64)
        s = np.asarray(senders[start - 1 : stop], np.int64)
        dr, ds = np.diff(r), np.diff(s)
        bad = (dr < 0) | ((dr == 0) & (ds < 0))
        if bad.any():
            pos = start + int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"edges_sorted=True but edge {pos} (receiver {int(receivers[pos])}, sender "
                f"{int(senders[pos])}) comes after (receiver {int(receivers[pos - 1])}, sender "
                f"{int(senders[pos - 1])}); sort with sparsegcn.sort_edges"
            )


@dataclasses.dataclass(frozen=True, eq=False)
class Graph(EdgeListView):
    """A directed multigraph as an edge list; a JAX pytree.

    Attributes:
      senders: int32 ``[E]``, the source node of each edge.
      receivers: int32 ``[E]``, the target node of each edge.
      weights: float32 ``[E]`` edge weights, or ``None`` for all ones.
      num_nodes: static Python int ``N``. It fixes the leading dimension of
        every node array and the ``num_segments`` of every reduction, so it
        must be known at trace time: a traced ``N`` would make output shapes
        data dependent, which ``jit`` cannot compile.
      edges_sorted: static flag, ``True`` when edges are sorted by
        ``(receiver, sender)`` (duplicates allowed). Backends use it to skip
        sorting; it is verified when the graph is built from concrete arrays.
      edge_features: float32 ``[E, D]``, one row per edge (row ``e`` belongs
        to edge ``senders[e] -> receivers[e]``), or ``None``. Every transform
        of :mod:`sparsegcn.transforms`, :meth:`reorder`, every layout of
        :func:`sparsegcn.backends.as_layout` (and :meth:`unpack` back) and
        the on-disk format carry it along with the edges (see
        ``docs/edge-features.md``).

    Construction validates concrete inputs once, on the host: ids must be
    integers in ``[0, N)`` and weights finite, otherwise a ``ValueError``
    names the first offending value and its position. Duplicate edges and
    self-loops are allowed and kept; nothing is dropped. Arrays may be NumPy
    (host, e.g. memory-mapped for large graphs) or JAX arrays; move a host
    graph to the device with ``jax.device_put(graph)``.

    Graphs are immutable: transformations return new graphs.

    A graph is also the square view of :mod:`sparsegcn.views`: both sides
    are its ``N`` nodes, and ``product``/``aggregate``/``softmax`` gather
    rows and reduce them by receiver (``layout_name == "edges"``).
    """

    senders: Array
    receivers: Array
    weights: Array | None = None
    num_nodes: int = 0
    edges_sorted: bool = False
    edge_features: Array | None = None

    def __post_init__(self):
        n = _checks.check_static_int("num_nodes", self.num_nodes)
        if n > _INT32_MAX:
            raise ValueError(f"num_nodes={n} does not fit int32 node ids")
        senders = _prepare_ids("senders", self.senders, n)
        receivers = _prepare_ids("receivers", self.receivers, n)
        if senders.shape != receivers.shape:
            raise ValueError(
                f"senders and receivers must have the same shape, got {senders.shape} "
                f"and {receivers.shape}"
            )
        weights = _prepare_weights(self.weights, senders.shape[0])
        edge_features = _prepare_edge_features(self.edge_features, senders.shape[0])
        if self.edges_sorted and not _checks.is_traced(senders, receivers):
            _check_sorted(np.asarray(senders), np.asarray(receivers))
        object.__setattr__(self, "edges_sorted", bool(self.edges_sorted))
        object.__setattr__(self, "num_nodes", n)
        object.__setattr__(self, "senders", senders)
        object.__setattr__(self, "receivers", receivers)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "edge_features", edge_features)

    # -- pytree protocol: unflattening bypasses validation (leaves may be tracers).
    def tree_flatten_with_keys(self):
        children = tuple(
            (jax.tree_util.GetAttrKey(name), getattr(self, name)) for name in GRAPH_CHILDREN
        )
        return children, (self.num_nodes, self.edges_sorted)

    @classmethod
    def tree_unflatten(cls, static, children):
        """Rebuilds a graph from its leaves; ``edge_features`` may be left out (``None``)."""
        graph = object.__new__(cls)
        children = (*children, None) if len(children) == len(GRAPH_CHILDREN) - 1 else children
        for name, value in zip(GRAPH_CHILDREN, children, strict=True):
            object.__setattr__(graph, name, value)
        object.__setattr__(graph, "num_nodes", static[0])
        object.__setattr__(graph, "edges_sorted", static[1])
        return graph

    # -- constructors ------------------------------------------------------
    @classmethod
    def from_edge_index(cls, edge_index, num_nodes: int | None = None, weights=None) -> Graph:
        """Builds a graph from a PyG-style ``edge_index``.

        Args:
          edge_index: integer array of shape ``(2, E)``; row 0 holds the
            sources and row 1 the targets (PyG's ``source_to_target`` flow).
          num_nodes: number of nodes ``N``; defaults to ``max(edge_index) + 1``.
          weights: optional ``[E]`` edge weights.
        """
        host = _checks.as_host("edge_index", edge_index)
        _checks.check_integer_array("edge_index", host, ndim=2)
        if host.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, E), got {host.shape}")
        if num_nodes is None:
            num_nodes = int(host.max()) + 1 if host.size else 0
        return cls(host[0], host[1], weights, num_nodes)

    @classmethod
    def from_scipy(cls, matrix) -> Graph:
        """Builds a graph from a square scipy sparse matrix ``A``.

        Entry ``A[i, j] = w`` becomes the edge ``j -> i`` with weight ``w``,
        so that ``propagate(Graph.from_scipy(A), x) == A @ x``. Explicitly
        stored zeros are kept as zero-weight edges; duplicates are kept.
        """
        if not sp.issparse(matrix):
            raise TypeError(
                f"from_scipy expects a scipy.sparse matrix, got {type(matrix).__name__}"
            )
        if matrix.shape[0] != matrix.shape[1]:
            raise ValueError(f"adjacency must be square, got shape {matrix.shape}")
        coo = matrix.tocoo()
        return cls(coo.col, coo.row, np.asarray(coo.data), matrix.shape[0])

    # -- views -------------------------------------------------------------
    @property
    def num_src(self) -> int:
        """``N``: a graph's sources are all its nodes."""
        return self.num_nodes

    @property
    def num_dst(self) -> int:
        """``N``: a graph's targets are all its nodes."""
        return self.num_nodes

    @property
    def num_edges(self) -> int:
        """Number of stored (directed) edges ``E``, duplicates included."""
        return int(self.senders.shape[0])

    @property
    def edge_index(self) -> Array:
        """``(2, E)`` array of (source, target) rows, PyG's convention."""
        stack = jnp.stack if isinstance(self.senders, jax.Array) else np.stack
        return stack([self.senders, self.receivers])

    def replace(self, **changes) -> Graph:
        """Returns a validated copy with the given fields replaced."""
        return dataclasses.replace(self, **changes)

    @property
    def num_edge_features(self) -> int:
        """``D``, the width of :attr:`edge_features` (0 without them)."""
        return 0 if self.edge_features is None else int(self.edge_features.shape[1])

    def without_edge_features(self) -> Graph:
        """The same graph with ``edge_features=None``.

        The other fields are shared, not copied or checked again (a
        memory-mapped graph is not read; lazily expanded receivers stay lazy).
        """
        if self.edge_features is None:
            return self
        clone = copy.copy(self)
        object.__setattr__(clone, "edge_features", None)
        return clone

    def unpack(self) -> Graph:
        """The plain edge-list :class:`Graph` of any layout (``layout_name == "edges"``).

        A layout (``PackedGraph``, ``BcooGraph``, ``DenseGraph``) is a
        subclass that keeps the edge list and adds a product; this drops the
        product and keeps every edge array as it is stored: ``senders``,
        ``receivers``, ``weights`` and ``edge_features``, in the same order,
        shared rather than copied or checked again. A plain graph returns
        itself.
        """
        if type(self) is Graph:
            return self
        leaves = tuple(getattr(self, name) for name in GRAPH_CHILDREN)
        return Graph.tree_unflatten((self.num_nodes, self.edges_sorted), leaves)

    def edge_weights(self) -> Array:
        """The ``[E]`` weights, materialising ones when ``weights`` is None."""
        if self.weights is not None:
            return self.weights
        if isinstance(self.senders, np.ndarray):
            return np.ones(self.senders.shape, np.float32)
        return jnp.ones(self.senders.shape, jnp.float32)

    def to_scipy(self) -> sp.csr_array:
        """The ``N x N`` matrix ``A[receiver, sender]``, duplicates summed."""
        s = _checks.as_host("senders", self.senders)
        r = _checks.as_host("receivers", self.receivers)
        w = np.asarray(self.edge_weights(), np.float64)
        return sp.csr_array((w, (r, s)), shape=(self.num_nodes, self.num_nodes))

    def to_dense(self, dtype=jnp.float32) -> jax.Array:
        """The dense ``N x N`` matrix ``A[receiver, sender]``; the reference oracle.

        Differentiable with respect to ``weights``; duplicates add up.
        """
        n = self.num_nodes
        w = jnp.asarray(self.edge_weights(), dtype)
        return jnp.zeros((n, n), dtype).at[self.receivers, self.senders].add(w)

    def to_csr(self) -> CSR:
        """The CSR view grouped by receiver; see :class:`CSR`. Host-side."""
        return CSR.from_graph(self)

    def reorder(self, method: str = "rcm", *, seed: int = 0, threads: int = 1) -> Reordering:
        """Relabels nodes so that neighbours get nearby ids.

        Propagation reads the rows of ``x`` at each node's neighbours; when
        their ids are close, those reads hit the cache. ``propagate`` on the
        result equals the original up to the permutation:

        .. math:: P A P^T (P x) = P (A x)

        so ``r.restore(propagate(r.graph, r.permute(x))) == propagate(graph, x)``.
        Permute features and labels once, train in the new order, and restore
        the predictions. Host-side.

        Args:
          method: ``"rcm"`` (reverse Cuthill–McKee), ``"degree"``,
            ``"community"``, ``"metis"`` or ``"networkit"`` (the last two
            need the ``order`` extra); see :func:`sparsegcn.ops.ordering.node_order`.
          seed: the random seed of the community and partition methods.
          threads: networkit's threads (1, the default, is deterministic).

        Returns:
          A :class:`Reordering`: the relabelled graph (edges sorted by
          ``(receiver, sender)``) plus the permutation both ways.
        """
        senders = _checks.as_host("senders", self.senders)
        receivers = _checks.as_host("receivers", self.receivers)
        weights = None if self.weights is None else _checks.as_host("weights", self.weights)
        features = self.edge_features
        n = self.num_nodes
        permutation = node_order(senders, receivers, n, method=method, seed=seed, threads=threads)
        inverse = np.empty(n, np.int64)
        inverse[permutation] = np.arange(n)
        new_senders = inverse[senders].astype(np.int32)
        new_receivers = inverse[receivers].astype(np.int32)
        order = np.lexsort((new_senders, new_receivers))
        relabelled = Graph(
            new_senders[order],
            new_receivers[order],
            None if weights is None else weights[order],
            n,
            edges_sorted=True,
            edge_features=None if features is None else np.asarray(features)[order],
        )
        return Reordering(relabelled, permutation, inverse)

    def __repr__(self) -> str:
        weighted = "weighted" if self.weights is not None else "unweighted"
        extra = (
            f", {self.num_edge_features} edge features" if self.edge_features is not None else ""
        )
        return (
            f"Graph(num_nodes={self.num_nodes}, num_edges={self.senders.shape[0]}, "
            f"{weighted}{extra})"
        )


jax.tree_util.register_pytree_with_keys_class(Graph)


class Reordering(NamedTuple):
    """A relabelling of nodes: the relabelled graph and the maps between orders.

    Attributes:
      graph: the relabelled :class:`Graph`, edges sorted by (receiver, sender).
      permutation: int64 ``[N]``; new node ``i`` is old node ``permutation[i]``.
      inverse: int64 ``[N]``; old node ``j`` is new node ``inverse[j]``.
    """

    graph: Graph
    permutation: np.ndarray
    inverse: np.ndarray

    def permute(self, x):
        """Node data ``[N, ...]`` (NumPy, JAX or scipy sparse rows) in the new order."""
        return x[self.permutation]

    def restore(self, y):
        """Results ``[N, ...]`` computed in the new order, back in the original one."""
        return y[self.inverse]


@dataclasses.dataclass(frozen=True, eq=False)
class CSR:
    """Compressed sparse rows of a :class:`Graph`, grouped by receiver; a pytree.

    Row ``r`` lists the in-neighbours of ``r`` (the senders of edges into
    ``r``): ``indices[indptr[r]:indptr[r + 1]]``. Within a row, edges keep
    their original relative order. This is the layout neighbour sampling
    needs: a node's neighbourhood is one contiguous slice.

    Attributes:
      indptr: ``[N + 1]`` row offsets; int32, or int64 once ``E >= 2**31``.
      indices: int32 ``[E]`` sender ids.
      weights: float32 ``[E]`` or ``None``.
      edge_ids: ``[E]`` position of each CSR entry in the source edge list
        (int32 or int64 like ``indptr``), so edge data can be permuted along.
      num_nodes: static ``N``.
    """

    indptr: Array
    indices: Array
    weights: Array | None
    edge_ids: Array
    num_nodes: int

    @classmethod
    def from_graph(cls, graph: Graph) -> CSR:
        """Groups ``graph``'s edges by receiver (stable); host-side, O(E + N)."""
        receivers = _checks.as_host("receivers", graph.receivers)
        senders = _checks.as_host("senders", graph.senders)
        n = graph.num_nodes
        order, indptr = group_by_row(receivers, n)
        weights = None if graph.weights is None else np.asarray(graph.weights)[order]
        return cls(indptr, senders[order], weights, order, n)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def degrees(self) -> Array:
        """In-degree (edge count, duplicates included) of each node, ``[N]``."""
        return self.indptr[1:] - self.indptr[:-1]

    def tree_flatten_with_keys(self):
        names = ("indptr", "indices", "weights", "edge_ids")
        return tuple((jax.tree_util.GetAttrKey(k), getattr(self, k)) for k in names), self.num_nodes

    @classmethod
    def tree_unflatten(cls, num_nodes, children):
        return cls(*children, num_nodes)


jax.tree_util.register_pytree_with_keys_class(CSR)

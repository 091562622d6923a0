"""Graphs packed for fast propagation: the edge list plus precomputed layouts.

:func:`pack` returns a :class:`PackedGraph`: the same graph (same edges, same
weights, usable everywhere a :class:`~sparsegcn.Graph` is) carrying the
layouts of ``A`` and ``A^T`` and, optionally, a folded node scaling. Two
layout formats: sliced ELL (:mod:`sparsegcn.backends.ell`, the default), and
CSR (:mod:`sparsegcn.backends.csr`), which runs a native sparse kernel and
is the faster one once nodes are in a local order (``graph.reorder``). The
default ``"segment"`` backend uses them: the forward product runs on the layout of ``A``, the gradient with
respect to ``x`` on that of ``A^T``, and neither writes an ``[E, F]``
message buffer.

Layouts have data-dependent shapes, so they are built once on the host,
like :func:`~sparsegcn.gcn_norm`, and travel with the graph as pytree leaves.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks
from sparsegcn.backends.bcoo import enable_cusparse_if_gpu
from sparsegcn.backends.csr import CsrLayout, build_csr, check_csr_kernel, csr_matmul
from sparsegcn.backends.ell import DEFAULT_WIDTHS, EllLayout, build_ell, ell_matmul
from sparsegcn.graph import GRAPH_CHILDREN, Graph
from sparsegcn.ops.segment import accumulation_dtype
from sparsegcn.transforms import gcn_norm, gcn_norm_factors
from sparsegcn.views import check_edge_weight

_PACKED_CHILDREN = ("layout", "transpose_layout", "scale", "reverse_edges")
"""A :class:`PackedGraph`'s pytree children after the edge list's, in order."""


@dataclasses.dataclass(frozen=True, eq=False)
class PackedGraph(Graph):
    """A :class:`~sparsegcn.Graph` with its propagation layouts; build it with :func:`pack`.

    It is the same matrix ``A[receiver, sender] = w`` as the edge list it
    holds: ``to_dense``, ``to_scipy`` and every backend agree with it. Only
    the ``"segment"`` backend reads the layouts.

    The edge list (``senders``, ``receivers``, ``weights``,
    ``edge_features``) stays in the order of the graph it was packed from:
    the layouts are indices into it, not copies. Each layout entry names its
    edge by ``edge_ids`` (``E`` in ELL padding), so per-edge values in edge
    order, the edge features or attention weights, are read through them,
    as the weights are; nothing ``[E, D]`` is stored twice.

    Attributes:
      layout: :class:`~sparsegcn.backends.ell.EllLayout` or
        :class:`~sparsegcn.backends.csr.CsrLayout` of ``A``.
      transpose_layout: layout of ``A^T``, or None when ``A`` is symmetric
        (``A^T = A``, checked when packing), so the gradient reuses ``layout``.
      scale: float32 ``[N]`` or None. When set, the graph was packed from an
        unweighted adjacency ``A'`` with ``weights[e] = scale[s_e] *
        scale[r_e]`` (:func:`pack` computes them), and the backend computes
        ``scale * (A' (scale * x))``: no per-edge weights are read, as long
        as ``weights`` still hold those products (compared at run time, ``E``
        scalars); other weights are read as they are. The gradient with
        respect to ``weights`` is the exact ``<ȳ_{r_e}, x_{s_e}>``;
        ``scale`` itself gets none.
      reverse_edges: int32 ``[E]`` or None. Set for a weighted graph packed
        with one layout: the edges whose weights make ``layout`` the layout
        of ``A^T``, whatever the weights are now. Each edge is paired one to
        one with an edge in the opposite direction (a self-loop with
        itself); ELL holds, in edge order, the pair of each edge (the
        layout then reads ``weights[reverse_edges]`` by its edge ids), CSR,
        in the layout's entry order, the pair of each entry's edge (read as
        its ``data``: ``weights[reverse_edges]``, one gather).

    The products read the ``weights`` leaf the graph holds when it runs,
    not the values it was packed with: swapping that leaf in the pytree
    (under ``jit`` or ``vmap``, or to learn edge weights) changes the
    forward product and both gradients alike. Changing a packed graph's
    edges or weights with :meth:`replace` returns a plain
    :class:`~sparsegcn.Graph` (the layouts describe the old edges): pack it
    again if it is to stay fast. Changing only ``edge_features`` keeps it
    packed.
    """

    layout: EllLayout | CsrLayout | None = None
    transpose_layout: EllLayout | CsrLayout | None = None
    scale: jax.Array | np.ndarray | None = None
    reverse_edges: jax.Array | np.ndarray | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.layout is None:
            raise ValueError("a PackedGraph needs a layout; build one with sparsegcn.backends.pack")

    def tree_flatten_with_keys(self):
        children, static = super().tree_flatten_with_keys()
        extra = tuple(
            (jax.tree_util.GetAttrKey(name), getattr(self, name)) for name in _PACKED_CHILDREN
        )
        return children + extra, static

    @classmethod
    def tree_unflatten(cls, static, children):
        base = len(GRAPH_CHILDREN)
        graph = super().tree_unflatten(static, children[:base])
        for name, value in zip(_PACKED_CHILDREN, children[base:], strict=True):
            object.__setattr__(graph, name, value)
        return graph

    @property
    def format(self) -> str:
        """``"ell"`` or ``"csr"``: the layout format (see :func:`pack`)."""
        return "csr" if isinstance(self.layout, CsrLayout) else "ell"

    @property
    def symmetric(self) -> bool:
        """Whether ``A^T = A`` as packed (so one layout serves both directions).

        A weighted matrix that is symmetric only with duplicate edges summed
        (no one-to-one pairing of edges with their reverses) gets a transpose
        layout, and is not reported symmetric here."""
        return self.transpose_layout is None

    @property
    def layout_name(self) -> str:
        """``"csr"`` or ``"ell"``: what reports name as the layout that ran."""
        return self.format

    def product(self, x_src, edge_weight=None) -> jax.Array:
        """``A @ x`` on the packed layout (see :mod:`sparsegcn.views`).

        With ``edge_weight`` (``[E]``, or ``[E, H]`` for ``x_src [N, H, ...]``)
        the layout is read with those weights instead of the stored ones
        (attention), see :func:`packed_weighted_matmul`.
        """
        x = self.check_sources(x_src)
        if edge_weight is None:
            return packed_matmul(self, x)
        return packed_weighted_matmul(self, x, edge_weight)

    def replace(self, **changes) -> Graph:
        """A validated copy with the given fields replaced: still packed when only
        ``edge_features`` change (the layouts index edges, not their rows), a
        plain :class:`~sparsegcn.Graph` otherwise."""
        if changes.keys() <= {"edge_features"}:
            return dataclasses.replace(self, **changes)
        return self.unpack().replace(**changes)

    def __repr__(self) -> str:
        folded = ", scale folded" if self.scale is not None else ""
        features = (
            f", {self.num_edge_features} edge features" if self.edge_features is not None else ""
        )
        return (
            f"PackedGraph(num_nodes={self.num_nodes}, num_edges={self.senders.shape[0]}, "
            f"format={self.format}, symmetric={self.symmetric}{folded}{features})"
        )


jax.tree_util.register_pytree_with_keys_class(PackedGraph)


def _is_symmetric(senders: np.ndarray, receivers: np.ndarray, weights, n: int) -> bool:
    """``A == A^T`` exactly, duplicates summed (float64)."""
    w = np.ones(senders.shape, np.float64) if weights is None else np.asarray(weights, np.float64)
    a = sp.csr_array((w, (receivers, senders)), shape=(n, n))
    difference = (a - a.T).tocsr()
    difference.eliminate_zeros()
    return difference.nnz == 0


def _reverse_edges(senders: np.ndarray, receivers: np.ndarray, n: int) -> np.ndarray | None:
    """int32 ``[E]``: for each edge ``e``, an edge from ``r_e`` to ``s_e``, each
    used once (a self-loop is its own); None when no such pairing exists (the
    edge multiset is not symmetric)."""
    num_edges = senders.shape[0]
    if num_edges == 0:
        return np.zeros(0, np.int32)
    s = senders.astype(np.int64)
    r = receivers.astype(np.int64)
    pair = np.minimum(s, r) * n + np.maximum(s, r)  # the unordered pair, < n^2 <= 2^62
    backward = s > r
    # One sort: each pair's edges together, those with s <= r first.
    order = np.argsort(2 * pair + backward)
    pair, backward = pair[order], backward[order]
    starts = np.flatnonzero(np.concatenate([[True], pair[1:] != pair[:-1]]))
    sizes = np.diff(np.append(starts, num_edges))
    num_backward = np.add.reduceat(backward.astype(np.int64), starts)
    loops = pair[starts] // n == pair[starts] % n
    num_forward = np.where(loops, 0, sizes - num_backward)
    if not np.array_equal(num_forward, num_backward):
        return None
    # The k-th edge s -> r of a pair is paired with its k-th edge r -> s.
    shift = np.repeat(num_forward, sizes)
    shift = np.where(backward, -shift, shift)
    reverse = np.empty(num_edges, np.int32)
    reverse[order] = order[np.arange(num_edges) + shift]
    return reverse


FORMATS = ("ell", "csr")


def _build(format: str, cols: np.ndarray, rows: np.ndarray, n: int, weights, widths):
    if format == "csr":
        return build_csr(cols, rows, n, weights)
    return build_ell(cols, rows, n, widths=widths)


def pack(graph: Graph, *, scale=None, widths=DEFAULT_WIDTHS, format: str = "ell") -> PackedGraph:
    """Builds the propagation layouts of ``graph`` once, on the host.

    Args:
      graph: any graph (host or concrete device arrays).
      scale: optional float ``[N]`` node scaling to fold in. ``graph`` must
        then be unweighted; the packed graph is the matrix
        ``diag(scale) A diag(scale)``, with those products as its weights.
        With ``(A', d) = gcn_norm_factors(g)`` this is ``gcn_norm(g)``
        (see :func:`pack_gcn_norm`).
      widths: slice boundaries of the ELL layout (see
        :func:`~sparsegcn.backends.ell.build_ell`).
      format: ``"ell"`` (sliced ELL, fused gathers; the default) or
        ``"csr"`` (a native CSR kernel: faster on graphs in a local node
        order, e.g. after ``graph.reorder("rcm")``; no ``storage_dtype``).

    Returns:
      A :class:`PackedGraph`; edge order, weights, ``edge_features`` and
      ``edges_sorted`` are those of ``graph`` (a packed graph keeps its edge
      list in order; the layouts index it).

    Raises:
      ValueError: ``scale`` has the wrong shape or non-finite values, or is
        given for a weighted graph; ``format`` is unknown.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    if format == "csr":
        enable_cusparse_if_gpu()  # the BCSR product's cuSPARSE lowering, on GPU only
    if not isinstance(graph, Graph):
        raise TypeError(f"pack expects a sparsegcn.Graph, got {type(graph).__name__}")
    graph = graph.unpack()
    n = graph.num_nodes
    senders = _checks.as_host("graph.senders", graph.senders)
    receivers = _checks.as_host("graph.receivers", graph.receivers)
    weights = None if graph.weights is None else _checks.as_host("graph.weights", graph.weights)
    if scale is not None:
        if weights is not None:
            raise ValueError(
                "pack(graph, scale=...) folds a node scaling into an unweighted graph, but this "
                "graph has edge weights; pack the weighted graph without scale"
            )
        scale = _checks.as_host("scale", scale).astype(np.float32, copy=False)
        if scale.shape != (n,):
            raise ValueError(f"scale must have shape ({n},), one per node, got {scale.shape}")
        _checks.check_finite("scale", scale)
        weights = scale[senders] * scale[receivers]
    # The CSR layout keeps a row-order copy of the weights (ones with a
    # folded scale, which the product applies to x and y itself); the
    # products read the graph's weights leaf through edge ids all the same,
    # as it may have been replaced since packing.
    stored = None if scale is not None else weights
    layout = _build(format, senders, receivers, n, stored, widths)
    transpose = reverse = None
    if not _is_symmetric(senders, receivers, weights, n):
        transpose = _build(format, receivers, senders, n, stored, widths)
    elif weights is not None:
        # One layout serves A^T for the weights read at run time too, which
        # need not be symmetric: each edge reads the weight of its reverse.
        reverse = _reverse_edges(senders, receivers, n)
        if reverse is None:  # symmetric only with duplicates summed
            transpose = _build(format, receivers, senders, n, stored, widths)
        elif format == "csr":  # in entry order: one gather gives the data
            reverse = reverse[layout.edge_ids]
    return PackedGraph(
        senders,
        receivers,
        weights,
        n,
        graph.edges_sorted,
        edge_features=graph.edge_features,
        layout=layout,
        transpose_layout=transpose,
        scale=scale,
        reverse_edges=reverse,
    )


def pack_gcn_norm(
    graph: Graph, *, self_loops: bool = True, widths=DEFAULT_WIDTHS, format: str = "ell"
) -> PackedGraph:
    """``gcn_norm(graph)``, packed, with ``D^{-1/2}`` folded in when possible.

    .. math:: \\hat A = D^{-1/2} A' D^{-1/2}

    with ``A'`` the graph with exactly one self-loop per node (see
    :func:`~sparsegcn.gcn_norm`). For an unweighted ``graph`` ``A'`` is
    unweighted too, and the packed product computes ``d * (A' (d * x))``
    with ``d = D^{-1/2}``, so propagation reads no per-edge weights; its
    ``weights`` equal ``gcn_norm(graph).weights``.
    A weighted graph is normalized with :func:`~sparsegcn.gcn_norm` and packed.
    ``format`` is :func:`pack`'s; in the CSR format nothing is folded: the
    product reads the normalized weights (in row order, through the
    layout's edge ids).
    """
    adjacency, scale = gcn_norm_factors(graph, self_loops=self_loops)
    if adjacency.weights is not None or format == "csr":
        # CSR reads the normalized weights: folding would cost two passes over x.
        return pack(gcn_norm(graph, self_loops=self_loops), widths=widths, format=format)
    return pack(adjacency, scale=scale, widths=widths, format=format)


def packed_matmul(
    graph: PackedGraph, x: jax.Array, *, storage_dtype=None, csr_kernel: str = "auto"
) -> jax.Array:
    """``A @ x`` for a :class:`PackedGraph` and ``x`` of shape ``[N, ...]``.

    ``csr_kernel`` picks the CSR product's kernel, forward and gradient
    (:data:`~sparsegcn.backends.csr.CSR_KERNELS`); ELL layouts ignore it.

    Raises:
      ValueError: ``storage_dtype`` is given for a CSR-packed graph (the
        native kernel reads ``x`` in its own dtype), or ``csr_kernel`` is
        unknown or ``"native"`` without the built library.
    """
    check_csr_kernel(csr_kernel)
    if storage_dtype is not None and graph.format == "csr":
        raise ValueError(
            f"storage_dtype={jnp.dtype(storage_dtype).name} needs an ELL-packed graph "
            "(pack(graph, format='ell')); the CSR kernel reads x in its own dtype"
        )
    n = graph.num_nodes
    flat = x.reshape(n, math.prod(x.shape[1:]))  # not -1: n may be 0
    static = (n, storage_dtype, csr_kernel)
    y = _packed(
        static,
        graph.layout,
        graph.transpose_layout,
        graph.reverse_edges,
        graph.senders,
        graph.receivers,
        graph.weights,
        graph.scale,
        flat,
    )
    return y.reshape(x.shape)


def _layout_matmul(layout, x, weights, n, storage_dtype, csr_kernel, reverse=None):
    """``A @ x`` on ``layout`` with ``weights`` in edge order (None: ones).

    Both formats read the weights given (the CSR layout's stored ``data``
    are only the weights it was packed with, and the leaf may have been
    replaced since): ``E`` scalars gathered, no ``[E, F]`` buffer. With
    ``reverse`` (a graph's ``reverse_edges``), the layout of a symmetric
    ``A`` is read as that of ``A^T`` for these weights.
    """
    if weights is None:
        reverse = None  # ones: the same matrix either way
    if isinstance(layout, CsrLayout):
        if weights is not None:
            ids = layout.edge_ids if reverse is None else reverse
            data = jnp.asarray(weights).at[jnp.asarray(ids)].get(mode="promise_in_bounds")
            layout = layout._replace(data=data)
        return csr_matmul(layout, x, n, kernel=csr_kernel)
    if reverse is not None:
        weights = jnp.asarray(weights).at[jnp.asarray(reverse)].get(mode="promise_in_bounds")
    return ell_matmul(layout, x, weights, n, storage_dtype=storage_dtype)


def _still_folded(weights, scale, senders, receivers):
    """Whether ``weights`` are still the products ``scale[s] * scale[r]`` :func:`pack`
    folded (a traced boolean: the leaf may have been replaced under ``jit``)."""
    scale = jnp.asarray(scale)
    folded = scale.at[senders].get(mode="promise_in_bounds") * scale.at[receivers].get(
        mode="promise_in_bounds"
    )
    return jnp.all(weights == folded)


@functools.lru_cache(maxsize=256)
def _scaled_branches(static):
    """The two products of a graph packed with a folded scale, built once per
    ``static`` (an eager ``cond`` compiles once per pair of branch functions).

    ``folded``: ``scale * (A' (scale * x))``, no per-edge weights read.
    ``weighted``: the weights as they are now, ``weights[reverse]`` when
    ``reverse`` is given (``A^T`` on the layout of a symmetric ``A``).
    """
    n, storage_dtype, csr_kernel = static

    def folded(layout, weights, reverse, scale, x):
        s = jnp.asarray(scale).astype(x.dtype)[:, None]
        return s * _layout_matmul(layout, s * x, None, n, storage_dtype, csr_kernel)

    def weighted(layout, weights, reverse, scale, x):
        return _layout_matmul(layout, x, weights, n, storage_dtype, csr_kernel, reverse)

    return folded, weighted


def _apply(static, layout, weights, reverse, scale, keep_folded, x):
    """``A @ x`` (or ``A^T @ x`` with ``reverse``) with the current ``weights``."""
    n, storage_dtype, csr_kernel = static
    if keep_folded is None:
        return _layout_matmul(layout, x, weights, n, storage_dtype, csr_kernel, reverse)
    folded, weighted = _scaled_branches(static)
    return jax.lax.cond(keep_folded, folded, weighted, layout, weights, reverse, scale, x)


def _forward(static, layout, senders, receivers, weights, scale, x):
    keep_folded = None
    if scale is not None and weights is not None:
        keep_folded = _still_folded(weights, scale, senders, receivers)
    return _apply(static, layout, weights, None, scale, keep_folded, x), keep_folded


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _packed(static, layout, transpose_layout, reverse, senders, receivers, weights, scale, x):
    return _forward(static, layout, senders, receivers, weights, scale, x)[0]


def _packed_fwd(static, layout, transpose_layout, reverse, senders, receivers, weights, scale, x):
    y, keep_folded = _forward(static, layout, senders, receivers, weights, scale, x)
    residuals = (layout, transpose_layout, reverse, senders, receivers, weights, scale, x)
    return y, (*residuals, keep_folded)


def _packed_bwd(static, residuals, cotangent):
    layout, transpose_layout, reverse, senders, receivers, weights, scale, x, keep_folded = (
        residuals
    )
    if transpose_layout is not None:
        x_bar = _apply(static, transpose_layout, weights, None, scale, keep_folded, cotangent)
    elif weights is None or reverse is not None:
        # A's layout read with each edge's reverse weight is A^T's.
        x_bar = _apply(static, layout, weights, reverse, scale, keep_folded, cotangent)
    else:
        # A PackedGraph built without pack (no pairing of reverse edges): the
        # current weights need not be symmetric, so gather and scatter.
        rows = (
            cotangent.at[receivers].get(mode="promise_in_bounds")
            * weights.astype(cotangent.dtype)[:, None]
        )
        x_bar = jax.ops.segment_sum(rows, senders, num_segments=static[0])
    w_bar = None
    if weights is not None:
        # d y_r / d w_e = x_{s_e} on row r_e: the exact weight gradient, also
        # when the forward pass read the folded scale instead of the weights.
        pairs = cotangent.at[receivers].get(mode="promise_in_bounds") * x.at[senders].get(
            mode="promise_in_bounds"
        )
        w_bar = jnp.sum(pairs, axis=1).astype(weights.dtype)
    return (None, None, None, None, None, w_bar, None, x_bar)


_packed.defvjp(_packed_fwd, _packed_bwd)


def packed_weighted_matmul(
    graph: PackedGraph, x: jax.Array, edge_weight, *, csr_kernel: str = "auto"
) -> jax.Array:
    """``y_r = sum_e w_e x_{s_e}`` on ``graph``'s layout with weights computed at run time.

    The layout's structure is reused and ``edge_weight`` replaces the stored
    weights (and any folded scale): the CSR kernel reads ``w[edge_ids]``
    (``E`` scalars), the ELL products read weights by edge id anyway. No
    ``[E, F]`` buffer is written in the forward pass. Per-head weights
    ``[E, H]`` with ``x [N, H, F]`` run one product per head.

    The gradient with respect to ``x`` runs on the layout of ``A^T``; a
    graph packed as symmetric stores no such layout (its stored weights
    were symmetric, run-time ones need not be), so there it gathers and
    scatters. The gradient with respect to ``edge_weight`` is
    ``<ȳ_{r_e}, x_{s_e}>``, per edge.

    Args:
      graph: a :class:`PackedGraph` with ``N`` nodes and ``E`` edges.
      x: ``[N, F]``, or ``[N, H, F]`` with per-head weights.
      edge_weight: ``[E]`` or ``[E, H]``, in the graph's edge order.
      csr_kernel: the CSR product's kernel (see :func:`packed_matmul`).

    Returns:
      ``[N, F]`` or ``[N, H, F]`` in ``x``'s dtype.
    """
    check_csr_kernel(csr_kernel)
    check_edge_weight(edge_weight, graph.num_edges, x.shape)
    w = jnp.asarray(edge_weight).astype(x.dtype)
    n = graph.num_nodes
    if w.ndim == 2:
        heads = jax.vmap(
            lambda wh, xh: packed_weighted_matmul(graph, xh, wh, csr_kernel=csr_kernel), (1, 1), 1
        )
        return heads(w, x)
    flat = x.reshape(n, math.prod(x.shape[1:]))  # not -1: n may be 0
    y = _dynamic(
        (n, csr_kernel),
        graph.layout,
        graph.transpose_layout,
        graph.senders,
        graph.receivers,
        w,
        flat,
    )
    return y.reshape(x.shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _dynamic(static, layout, transpose_layout, senders, receivers, weights, x):
    n, csr_kernel = static
    return _layout_matmul(layout, x, weights, n, None, csr_kernel)


def _dynamic_fwd(static, layout, transpose_layout, senders, receivers, weights, x):
    n, csr_kernel = static
    y = _layout_matmul(layout, x, weights, n, None, csr_kernel)
    return y, (layout, transpose_layout, senders, receivers, weights, x)


def _dynamic_bwd(static, residuals, cotangent):
    _, transpose_layout, senders, receivers, weights, x = residuals
    n, csr_kernel = static
    wide = accumulation_dtype(cotangent.dtype)  # bf16 / f16: summed in float32
    gathered = cotangent.at[receivers].get(mode="promise_in_bounds").astype(wide)
    if transpose_layout is not None:
        x_bar = _layout_matmul(transpose_layout, cotangent, weights, n, None, csr_kernel)
    else:
        rows = gathered * weights[:, None].astype(wide)
        x_bar = jax.ops.segment_sum(rows, senders, num_segments=n).astype(cotangent.dtype)
    pairs = gathered * x.at[senders].get(mode="promise_in_bounds").astype(wide)
    w_bar = jnp.sum(pairs, axis=1).astype(weights.dtype)
    return (None, None, None, None, w_bar, x_bar)


_dynamic.defvjp(_dynamic_fwd, _dynamic_bwd)

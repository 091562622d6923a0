"""Propagation backends: named choices behind one function, :func:`propagate`.

=========  ===========================================================
name       computes ``A @ x`` by
=========  ===========================================================
dense      materialising ``A`` (the reference; ``O(N^2)`` memory)
segment    gathering ``x[senders]`` and ``segment_sum`` by receiver, or,
           on a :class:`PackedGraph`, sliced-ELL or CSR products (:func:`pack`;
           CSR runs sparsegcn's native kernel on CPU, see ``CSR_KERNELS``)
bcoo       ``jax.experimental.sparse.BCOO`` matmul (cuSPARSE on GPU)
=========  ===========================================================

Pack a graph once on the host (``pack(graph)``, or ``pack_gcn_norm(graph)``
for GCN's normalized adjacency with ``D^-1/2`` folded in) and the default
backend runs several times faster on CPU; see ``benchmarks/README.md``.
"""

from __future__ import annotations

import jax

from sparsegcn.backends.base import Backend, check_propagate_inputs
from sparsegcn.backends.bcoo import BCOO, BcooGraph
from sparsegcn.backends.csr import CSR_KERNELS, CsrLayout, build_csr, csr_matmul
from sparsegcn.backends.dense import Dense, DenseGraph
from sparsegcn.backends.ell import EllLayout, build_ell, ell_matmul
from sparsegcn.backends.packed import PackedGraph, pack, pack_gcn_norm
from sparsegcn.backends.segment import Segment, gather_scatter
from sparsegcn.graph import Graph

BACKENDS: dict[str, type[Backend]] = {"dense": Dense, "segment": Segment, "bcoo": BCOO}
DEFAULT_BACKEND = "segment"


def get_backend(backend: str | Backend = DEFAULT_BACKEND) -> Backend:
    """Resolves a backend name (``"dense"``, ``"segment"``, ``"bcoo"``) or passes an instance."""
    if isinstance(backend, Backend):
        return backend
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {sorted(BACKENDS)}")
    return BACKENDS[backend]()


LAYOUTS = ("edges", "csr", "ell", "bcoo", "dense")
"""Names :func:`as_layout` converts to; reports print the one that ran (``graph.layout_name``)."""


def as_layout(graph: Graph, layout: str) -> Graph:
    """``graph`` converted once, on the host, to the named layout.

    ============  ===============================================================
    ``edges``     the plain edge list (gather and ``segment_sum``)
    ``csr``       :func:`pack` in CSR (a native kernel; cuSPARSE on GPU)
    ``ell``       :func:`pack` in sliced ELL (fused gathers)
    ``bcoo``      :class:`BcooGraph` (``jax.experimental.sparse.BCOO``)
    ``dense``     :class:`DenseGraph` (the ``O(N^2)`` reference)
    ============  ===============================================================

    Every layout holds the same edges and weights and answers the protocol
    of :mod:`sparsegcn.views`; they differ only in how ``product`` runs.
    ``edge_features`` travel with their edges: row ``e`` of the result's
    ``edge_features`` belongs to its edge ``e`` in every layout. ``csr``,
    ``ell``, ``dense`` and ``edges`` keep the input's edge order; ``bcoo``
    sorts edges by ``(receiver, sender)``, rows along. ``"edges"`` turns any
    layout back into the plain edge list (:meth:`~sparsegcn.Graph.unpack`).

    Raises:
      ValueError: an unknown layout name.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {list(LAYOUTS)}")
    plain = graph.unpack()
    if layout == "edges":
        return plain
    if layout in ("csr", "ell"):
        return graph if getattr(graph, "format", None) == layout else pack(plain, format=layout)
    return get_backend(layout).view(plain)


def propagate(graph: Graph, x: jax.Array, *, backend: str | Backend | None = None) -> jax.Array:
    """Sums weighted messages along edges: ``y = A @ x``.

    .. math::

        y_r = \\sum_{e:\\, s_e \\to r} w_e \\, x_{s_e}

    with ``w_e = 1`` for an unweighted graph. Duplicate edges add up; a node
    with no incoming edge gets a zero row. ``propagate(gcn_norm(graph), x)``
    is the GCN product ``Â x``.

    Args:
      graph: a :class:`Graph` with ``N`` nodes and ``E`` edges, in any
        layout (see :func:`as_layout`).
      x: ``[N, ...]`` node features (floating dtype).
      backend: ``None`` (default): the graph's own product, whatever its
        layout. A name (``"segment"``, ``"bcoo"``, ``"dense"``) or a
        :class:`Backend` instance such as ``Dense(max_bytes=...)`` converts
        the graph on every call instead: convert once with
        :func:`as_layout` outside a training loop.

    Returns:
      ``[N, ...]``, the same shape and dtype as ``x``.

    Raises:
      ValueError: if ``x`` does not have ``N`` rows, the backend is unknown,
        or the dense backend would exceed its memory limit.
    """
    if backend is None:
        x = check_propagate_inputs(graph, x)
        return graph.product(x)
    return get_backend(backend)(graph, x)


__all__ = [
    "BACKENDS",
    "BCOO",
    "CSR_KERNELS",
    "DEFAULT_BACKEND",
    "LAYOUTS",
    "Backend",
    "BcooGraph",
    "CsrLayout",
    "Dense",
    "DenseGraph",
    "EllLayout",
    "PackedGraph",
    "Segment",
    "as_layout",
    "build_csr",
    "build_ell",
    "csr_matmul",
    "ell_matmul",
    "gather_scatter",
    "get_backend",
    "pack",
    "pack_gcn_norm",
    "propagate",
]

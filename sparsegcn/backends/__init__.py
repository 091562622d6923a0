"""Propagation backends: named choices behind one function, :func:`propagate`.

=========  ===========================================================
name       computes ``A @ x`` by
=========  ===========================================================
dense      materialising ``A`` (the reference; ``O(N^2)`` memory)
segment    gathering ``x[senders]`` and ``segment_sum`` by receiver, or,
           on a :class:`PackedGraph`, sliced-ELL or CSR products (:func:`pack`)
bcoo       ``jax.experimental.sparse.BCOO`` matmul (cuSPARSE on GPU)
=========  ===========================================================

Pack a graph once on the host (``pack(graph)``, or ``pack_gcn_norm(graph)``
for GCN's normalized adjacency with ``D^-1/2`` folded in) and the default
backend runs several times faster on CPU; see ``benchmarks/README.md``.
"""

from __future__ import annotations

import jax

from sparsegcn.backends.base import Backend
from sparsegcn.backends.bcoo import BCOO
from sparsegcn.backends.csr import CsrLayout, build_csr, csr_matmul
from sparsegcn.backends.dense import Dense
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


def propagate(graph: Graph, x: jax.Array, *, backend: str | Backend = DEFAULT_BACKEND) -> jax.Array:
    """Sums weighted messages along edges: ``y = A @ x``.

    .. math::

        y_r = \\sum_{e:\\, s_e \\to r} w_e \\, x_{s_e}

    with ``w_e = 1`` for an unweighted graph. Duplicate edges add up; a node
    with no incoming edge gets a zero row. ``propagate(gcn_norm(graph), x)``
    is the GCN product ``Â x``.

    Args:
      graph: a :class:`Graph` with ``N`` nodes and ``E`` edges.
      x: ``[N, ...]`` node features (floating dtype).
      backend: ``"segment"`` (default), ``"bcoo"``, ``"dense"``, or a
        :class:`Backend` instance such as ``Dense(max_bytes=...)``.

    Returns:
      ``[N, ...]``, the same shape and dtype as ``x``.

    Raises:
      ValueError: if ``x`` does not have ``N`` rows, the backend is unknown,
        or the dense backend would exceed its memory limit.
    """
    return get_backend(backend)(graph, x)


__all__ = [
    "BACKENDS",
    "BCOO",
    "DEFAULT_BACKEND",
    "Backend",
    "CsrLayout",
    "Dense",
    "EllLayout",
    "PackedGraph",
    "Segment",
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

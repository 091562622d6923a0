"""Node-chunked propagation: ``A @ x`` a block of output rows at a time.

Full-neighbourhood inference on a large graph cannot gather one message per
edge at once (ogbn-products: 124M directed edges times 256 hidden floats is
127 GB). :class:`ChunkedGraph` splits the output rows into fixed-size chunks
of ``R`` consecutive nodes; because edges are sorted by receiver, a chunk's
edges are one contiguous slice of the edge list, read with a
``lax.dynamic_slice`` of static length (the largest chunk's edge count), so
every chunk has the same shapes and :func:`propagate_chunked` is one
``lax.fori_loop`` writing each chunk's rows into the output in place. Peak
memory is the ``[N, F]`` output plus ``O(max_chunk_edges * F)`` for one
chunk's messages, instead of ``O(E * F)``.

Each chunk is computed on the backend ``propagate`` would use: ``segment``
(gather and ``segment_sum``), ``bcoo`` (a rectangular ``[R, N]`` BCOO
matrix, sorted, so cuSPARSE applies on GPU) or ``dense`` (an ``[R, N]``
dense block, the oracle).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

from sparsegcn import _checks, transforms
from sparsegcn.backends import BCOO, DEFAULT_BACKEND, Backend, Dense, Segment, get_backend
from sparsegcn.backends.base import check_propagate_inputs
from sparsegcn.backends.segment import gather_scatter
from sparsegcn.graph import Graph
from sparsegcn.ops.csr import indptr_from_sorted
from sparsegcn.sampling.neighbor import rebase_offsets
from sparsegcn.views import Bipartite, start_indices

Array = Any

# Edges per chunk when the chunk size is derived: 2**19 messages of 256 float32
# features is 512 MiB, so layer-wise inference on ogbn-products fits 24 GiB.
DEFAULT_CHUNK_EDGES = 2**19


@dataclasses.dataclass(frozen=True, eq=False)
class ChunkedGraph:
    """A receiver-sorted graph with its CSR offsets, cut into row chunks; a pytree.

    ``graph.senders`` is the CSR ``indices`` array and ``indptr`` its row
    offsets, so the same arrays serve neighbour sampling
    (:func:`~sparsegcn.sampling.sample_blocks`) and chunked propagation.

    Attributes:
      graph: :class:`~sparsegcn.Graph` with ``edges_sorted=True``.
      indptr: ``[N + 1]`` offsets of each receiver's edges, in
        :func:`~sparsegcn.sampling.neighbor.device_offset_dtype`: int32, or
        once ``E >= 2**31`` uint32 (int64 if ``jax_enable_x64`` is on), so
        graphs of up to ``2**32 - 1`` stored edges need no 64-bit types.
      chunk_size: static ``R``, output rows per chunk.
      max_chunk_edges: static, the most edges any chunk receives: the
        length of every chunk's edge slice.
    """

    graph: Graph
    indptr: Array
    chunk_size: int
    max_chunk_edges: int

    @classmethod
    def build(
        cls,
        graph: Graph,
        chunk_size: int | None = None,
        *,
        chunk_edges: int = DEFAULT_CHUNK_EDGES,
    ) -> ChunkedGraph:
        """Sorts ``graph`` by receiver (if needed) and sizes the chunks; host-side.

        Args:
          graph: any :class:`~sparsegcn.Graph` (weights kept).
          chunk_size: ``R >= 1``, clipped to ``N``; by default the ``R`` that
            gives chunks of about ``chunk_edges`` edges on average.
          chunk_edges: the average edges per chunk aimed at when ``chunk_size``
            is not given.
        """
        n = graph.num_nodes
        if n == 0:
            raise ValueError("a graph without nodes has no rows to chunk (num_nodes=0)")
        if chunk_size is None:
            chunk_edges = _checks.check_static_int("chunk_edges", chunk_edges, minimum=1)
            chunk_size = n * chunk_edges // max(graph.num_edges, 1)
        else:
            chunk_size = _checks.check_static_int("chunk_size", chunk_size, minimum=1)
        graph = transforms.sort_edges(graph)
        receivers = _checks.as_host("graph.receivers", graph.receivers)
        # int64 on the host once E >= 2**31; on the device int32, or uint32
        # without jax_enable_x64 (device_offset_dtype), never silently truncated.
        indptr = rebase_offsets(indptr_from_sorted(receivers, n))
        rows = max(min(chunk_size, n), 1)
        starts = np.minimum(np.arange(0, n, rows), n - rows)
        max_edges = int((indptr[starts + rows].astype(np.int64) - indptr[starts]).max())
        return cls(graph, indptr, rows, max_edges)

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_chunks(self) -> int:
        """``ceil(N / R)``."""
        return -(-self.num_nodes // self.chunk_size)

    @property
    def indices(self) -> Array:
        """The CSR neighbour ids, ``graph.senders``."""
        return self.graph.senders

    def chunk_start(self, chunk: jax.Array) -> jax.Array:
        """First row of ``chunk``: ``min(chunk R, N - R)``.

        Every chunk has exactly ``R`` rows, so nothing is padded; the last
        one overlaps its predecessor instead (its shared rows are computed
        twice, identically).
        """
        return jnp.minimum(chunk * self.chunk_size, self.num_nodes - self.chunk_size)

    def chunk_edges(self, chunk: jax.Array):
        """The edges into the ``R`` rows from :meth:`chunk_start`, padded to ``max_chunk_edges``.

        Returns:
          ``(senders, local_receivers, weights)``, each ``[max_chunk_edges]``.
          Padding edges have weight 0; they are placed at ``(0, 0)`` before
          the chunk's edges and ``(R - 1, N - 1)`` after them, so the
          ``(receiver, sender)`` order BCOO wants is kept.
        """
        g, rows, m = self.graph, self.chunk_size, self.max_chunk_edges
        n = self.num_nodes
        indptr = jnp.asarray(self.indptr)
        first = self.chunk_start(chunk)
        start = indptr[first]
        end = indptr[first + rows]
        # dynamic_slice clamps the start so the slice stays in bounds; the
        # clamped-in edges belong to earlier rows and are masked below.
        offset = jnp.clip(start, 0, g.num_edges - m)
        positions = offset + jnp.arange(m, dtype=indptr.dtype)
        before, after = positions < start, positions >= end
        senders = jax.lax.dynamic_slice(jnp.asarray(g.senders), (offset,), (m,))
        receivers = jax.lax.dynamic_slice(jnp.asarray(g.receivers), (offset,), (m,)) - first
        weights = jax.lax.dynamic_slice(jnp.asarray(g.edge_weights()), (offset,), (m,))
        senders = jnp.where(before, 0, jnp.where(after, n - 1, senders))
        receivers = jnp.where(before, 0, jnp.where(after, rows - 1, receivers))
        weights = jnp.where(before | after, jnp.zeros((), weights.dtype), weights)
        return senders, receivers, weights

    def chunk_view(self, chunk: jax.Array) -> Bipartite:
        """The chunk as a bipartite view (:mod:`sparsegcn.views`): sources are
        all ``N`` nodes, targets its ``R`` rows from :meth:`chunk_start`;
        padding edges are masked. Layers run on it unchanged."""
        g, m = self.graph, self.max_chunk_edges
        indptr = jnp.asarray(self.indptr)
        first = self.chunk_start(chunk)
        start, end = indptr[first], indptr[first + self.chunk_size]
        offset = jnp.clip(start, 0, g.num_edges - m)
        positions = offset + jnp.arange(m, dtype=indptr.dtype)
        senders, receivers, weights = self.chunk_edges(chunk)
        return Bipartite(
            senders,
            receivers,
            None if g.weights is None else weights,
            (positions >= start) & (positions < end),
            first,
            self.num_nodes,
            self.chunk_size,
            edges_sorted=True,
        )

    def tree_flatten_with_keys(self):
        children = (
            (jax.tree_util.GetAttrKey("graph"), self.graph),
            (jax.tree_util.GetAttrKey("indptr"), self.indptr),
        )
        return children, (self.chunk_size, self.max_chunk_edges)

    @classmethod
    def tree_unflatten(cls, static, children):
        chunked = object.__new__(cls)
        object.__setattr__(chunked, "graph", children[0])
        object.__setattr__(chunked, "indptr", children[1])
        object.__setattr__(chunked, "chunk_size", static[0])
        object.__setattr__(chunked, "max_chunk_edges", static[1])
        return chunked

    def __repr__(self) -> str:
        return (
            f"ChunkedGraph(num_nodes={self.num_nodes}, num_edges={self.graph.num_edges}, "
            f"chunk_size={self.chunk_size}, num_chunks={self.num_chunks}, "
            f"max_chunk_edges={self.max_chunk_edges})"
        )


jax.tree_util.register_pytree_with_keys_class(ChunkedGraph)


def propagate_chunk(
    chunked: ChunkedGraph,
    chunk: jax.Array,
    x: jax.Array,
    *,
    backend: str | Backend = DEFAULT_BACKEND,
) -> jax.Array:
    """One chunk's ``R`` rows of ``A @ x``.

    Args:
      chunked: the :class:`ChunkedGraph`.
      chunk: int ``[]`` chunk number in ``[0, num_chunks)`` (may be traced).
      x: ``[N, ...]`` node values (floating).
      backend: ``"segment"``, ``"bcoo"`` or ``"dense"`` (or an instance).

    Returns:
      ``[R, ...]``, rows ``chunked.chunk_start(chunk)`` to ``+ R`` of ``A @ x``.
    """
    resolved = get_backend(backend)
    x = check_propagate_inputs(chunked.graph, x)
    senders, receivers, weights = chunked.chunk_edges(chunk)
    weights = weights.astype(x.dtype)
    rows, n = chunked.chunk_size, chunked.num_nodes
    flat = x.reshape(n, -1)
    if isinstance(resolved, Segment):
        storage = getattr(resolved, "storage_dtype", None)
        out = gather_scatter(
            senders,
            receivers,
            weights,
            flat,
            rows,
            indices_are_sorted=resolved.promises_sorted(True),
            storage_dtype=None if storage is None else jnp.dtype(storage),
        )
    elif isinstance(resolved, BCOO):
        indices = jnp.stack([receivers, senders], axis=1)
        matrix = jsparse.BCOO(
            (weights, indices), shape=(rows, n), indices_sorted=True, unique_indices=False
        )
        out = matrix @ flat
    elif isinstance(resolved, Dense):
        needed = rows * n * jnp.dtype(x.dtype).itemsize
        if needed > resolved.max_bytes:
            raise ValueError(
                f"the dense backend would materialise a {rows} x {n} block of {needed} bytes "
                f"per chunk, over its limit of {resolved.max_bytes} bytes; use a smaller "
                f"chunk_size or backend='segment'"
            )
        block = jnp.zeros((rows, n), x.dtype).at[receivers, senders].add(weights)
        out = block @ flat
    else:
        raise TypeError(f"backend {resolved.name!r} has no row-chunked implementation")
    return out.reshape((rows, *x.shape[1:]))


def map_chunks(chunked: ChunkedGraph, fn) -> jax.Array:
    """``fn(chunk) -> [R, ...]`` (rows :meth:`~ChunkedGraph.chunk_start` on) for every
    chunk, assembled into ``[N, ...]``.

    One ``lax.fori_loop`` writes each block into the output in place: one
    chunk's intermediates live at a time, and the output is the only
    ``[N, ...]`` array made.
    """
    zero = jnp.zeros((), jnp.int32)
    block = jax.eval_shape(fn, zero)
    out = jnp.zeros((chunked.num_nodes, *block.shape[1:]), block.dtype)

    def write(chunk, out):
        corner = start_indices(chunked.chunk_start(chunk), len(block.shape))
        return jax.lax.dynamic_update_slice(out, fn(chunk), corner)

    return jax.lax.fori_loop(0, chunked.num_chunks, write, out)


def propagate_chunked(
    chunked: ChunkedGraph, x: jax.Array, *, backend: str | Backend = DEFAULT_BACKEND
) -> jax.Array:
    """``A @ x`` chunk by chunk: equals ``propagate(chunked.graph, x)`` in bounded memory.

    Args:
      chunked: the :class:`ChunkedGraph`.
      x: ``[N, ...]`` node values.
      backend: see :func:`propagate_chunk`.

    Returns:
      ``[N, ...]``, the same shape and dtype as ``x``.
    """
    resolved = get_backend(backend)
    x = check_propagate_inputs(chunked.graph, x)
    return map_chunks(chunked, lambda c: propagate_chunk(chunked, c, x, backend=resolved))

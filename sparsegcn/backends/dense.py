"""The reference backend: materialise ``A`` as a dense ``N x N`` matrix."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from sparsegcn.backends.base import Backend
from sparsegcn.graph import Graph
from sparsegcn.ops.segment import accumulation_dtype
from sparsegcn.views import check_edge_weight

DEFAULT_MAX_BYTES = 4 * 2**30


def _format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    raise AssertionError("unreachable")


@dataclasses.dataclass(frozen=True)
class Dense(Backend):
    """Builds ``A`` densely (duplicates summed) and multiplies with ``A @ x``.

    The oracle for every sparse path: simple enough to trust, ``O(N^2)``
    memory. It refuses, before allocating, when the matrix would exceed
    ``max_bytes``.

    Attributes:
      max_bytes: the largest dense matrix allowed, in bytes (default 4 GiB).
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    name: ClassVar[str] = "dense"

    def matmul(self, graph: Graph, x: jax.Array) -> jax.Array:
        return dense_product(graph, x, None, self.max_bytes)

    def view(self, graph: Graph) -> DenseGraph:
        """``graph`` as a :class:`DenseGraph` with this backend's memory limit."""
        plain = graph.unpack()
        children, (n, edges_sorted) = plain.tree_flatten_with_keys()
        leaves = tuple(value for _, value in children)
        return DenseGraph.tree_unflatten((n, edges_sorted, self.max_bytes), leaves)


def dense_product(graph: Graph, x: jax.Array, edge_weight, max_bytes: int) -> jax.Array:
    """``A @ x`` with ``A`` materialised (duplicates summed); per-head weights
    ``[E, H]`` with ``x [N, H, F]`` build one matrix per head."""
    n = graph.num_nodes
    needed = n * n * jnp.dtype(x.dtype).itemsize
    if needed > max_bytes:
        raise ValueError(
            f"the dense backend would materialise a {n} x {n} {jnp.dtype(x.dtype).name} "
            f"matrix needing {_format_bytes(needed)}, over its limit of "
            f"{_format_bytes(max_bytes)}; use backend='segment' or 'bcoo', or raise "
            f"the limit with sparsegcn.backends.Dense(max_bytes=...)"
        )
    if edge_weight is not None:
        check_edge_weight(edge_weight, graph.num_edges, x.shape)
    if edge_weight is not None and jnp.ndim(edge_weight) == 2:
        per_head = jax.vmap(lambda w, xh: dense_product(graph, xh, w, max_bytes), (1, 1), 1)
        return per_head(edge_weight, x)
    wide = accumulation_dtype(x.dtype)  # bf16 / f16: duplicates and rows summed in float32
    if edge_weight is None:
        adjacency = graph.to_dense(wide)
    else:
        w = jnp.asarray(edge_weight).astype(wide)
        adjacency = jnp.zeros((n, n), wide).at[graph.receivers, graph.senders].add(w)
    flat = x.reshape(n, math.prod(x.shape[1:])).astype(wide)  # not -1: n may be 0
    return (adjacency @ flat).astype(x.dtype).reshape(x.shape)


@dataclasses.dataclass(frozen=True, eq=False)
class DenseGraph(Graph):
    """A :class:`~sparsegcn.Graph` whose product materialises ``A`` (``layout_name == "dense"``).

    The reference layout: ``O(N^2)`` memory, refused above ``max_bytes``.
    Built by ``Dense(max_bytes).view(graph)``.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    layout_name: ClassVar[str] = "dense"

    def product(self, x_src, edge_weight=None) -> jax.Array:
        x = self.check_sources(x_src)
        return dense_product(self, x, edge_weight, self.max_bytes)

    def tree_flatten_with_keys(self):
        children, static = super().tree_flatten_with_keys()
        return children, (*static, self.max_bytes)

    @classmethod
    def tree_unflatten(cls, static, children):
        graph = super().tree_unflatten(static[:2], children)
        object.__setattr__(graph, "max_bytes", static[2])
        return graph


jax.tree_util.register_pytree_with_keys_class(DenseGraph)

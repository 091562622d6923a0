"""``jax.experimental.sparse.BCOO`` matmul: the reference sparse format of JAX."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.experimental import sparse as jsparse

from sparsegcn.backends.base import Backend
from sparsegcn.graph import Graph
from sparsegcn.ops.segment import accumulation_dtype
from sparsegcn.transforms import sort_edges
from sparsegcn.views import check_edge_weight


def to_bcoo(graph: Graph, dtype=jnp.float32, weights=None) -> jsparse.BCOO:
    """``A[receiver, sender] = w`` as a BCOO matrix with sorted indices.

    A graph whose ``edges_sorted`` flag is set is used as is; any other is
    sorted here, which inside a jitted step costs a sort per call: sort once
    with :func:`sparsegcn.sort_edges` instead (:meth:`BCOO.view` does).
    ``weights`` ``[E]`` replaces the graph's own.
    """
    n = graph.num_nodes
    weights = graph.edge_weights() if weights is None else weights
    weights = jnp.asarray(weights).astype(dtype)
    indices = jnp.stack([jnp.asarray(graph.receivers), jnp.asarray(graph.senders)], axis=1)
    matrix = jsparse.BCOO(
        (weights, indices), shape=(n, n), indices_sorted=graph.edges_sorted, unique_indices=False
    )
    return matrix if graph.edges_sorted else matrix.sort_indices()


def enable_cusparse_if_gpu() -> None:
    """Turns on ``jax_bcoo_cusparse_lowering`` when JAX runs on a GPU.

    The flag is process-wide and read when a function is lowered; it routes
    both BCOO and BCSR products to cuSPARSE, which speeds up BCSR and slows
    down BCOO on a GPU (``benchmarks/bcoo_lowering.py``; figures on the
    documentation's performance page). :func:`~sparsegcn.backends.pack` calls this for the
    CSR format; the :class:`BCOO` backend leaves the flag as it finds it.
    """
    # jax.config's flags are dynamic attributes, absent from its type.
    lowering = jax.config.jax_bcoo_cusparse_lowering  # type: ignore[attr-defined]
    if jax.default_backend() == "gpu" and not lowering:
        jax.config.update("jax_bcoo_cusparse_lowering", True)


@dataclasses.dataclass(frozen=True)
class BCOO(Backend):
    """Sparse-dense matmul with ``jax.experimental.sparse.BCOO``.

    It lowers to gather and scatter-add, on every platform, unless
    ``jax_bcoo_cusparse_lowering`` is set: then, on GPU, with the sorted
    indices given here, to cuSPARSE's COO SpMM, which is slower than gather
    and scatter on a GPU (see :func:`enable_cusparse_if_gpu`).
    The backend does not change the flag; packing a graph in the CSR format
    on GPU sets it, process-wide.
    """

    name: ClassVar[str] = "bcoo"

    def matmul(self, graph: Graph, x: jax.Array) -> jax.Array:
        return bcoo_product(graph, x)

    def view(self, graph: Graph) -> BcooGraph:
        """``graph`` as a :class:`BcooGraph`, its edges sorted once on the host."""
        plain = graph.unpack()
        return BcooGraph.tree_unflatten(*_graph_parts(sort_edges(plain)))


def _graph_parts(graph: Graph):
    children, static = graph.tree_flatten_with_keys()
    return static, tuple(value for _, value in children)


def bcoo_product(graph: Graph, x: jax.Array, edge_weight=None) -> jax.Array:
    """``A @ x`` through ``jax.experimental.sparse.BCOO``; per-head weights
    ``[E, H]`` with ``x [N, H, F]`` run one product per head (BCOO's batching
    rule takes no batched values with unbatched indices). With run-time
    ``edge_weight`` the product has its own VJP (``A^T ȳ`` and
    ``w̄_e = <ȳ_{r_e}, x_{s_e}>``): JAX's BCOO transpose rule fails under
    ``vmap`` over the weights with an unbatched ``x``. That product is
    reverse-mode only (``jax.jvp`` needs another layout). bfloat16 and float16
    ``x`` are multiplied in float32 and the result rounded once (BCOO sums in
    ``x``'s dtype: in bfloat16 a hub's sum stops growing)."""
    n = graph.num_nodes
    if edge_weight is not None:
        check_edge_weight(edge_weight, graph.num_edges, x.shape)
    wide = accumulation_dtype(x.dtype)
    if wide != x.dtype:
        return bcoo_product(graph, x.astype(wide), edge_weight).astype(x.dtype)
    if edge_weight is not None and jnp.ndim(edge_weight) == 2:
        heads = range(jnp.shape(edge_weight)[1])
        return jnp.stack([bcoo_product(graph, x[:, h], edge_weight[:, h]) for h in heads], 1)
    flat = x.reshape(n, math.prod(x.shape[1:]))  # not -1: n may be 0
    if edge_weight is None:
        return (to_bcoo(graph, x.dtype) @ flat).reshape(x.shape)
    weights = jnp.asarray(edge_weight).astype(x.dtype)
    senders, receivers = jnp.asarray(graph.senders), jnp.asarray(graph.receivers)
    return _weighted_product(n, senders, receivers, weights, flat).reshape(x.shape)


def _coo_matmul(rows, cols, n: int, weights, x):
    """``M @ x`` for ``M[rows_e, cols_e] += weights_e``, ``[n, n]``."""
    matrix = jsparse.BCOO((weights, jnp.stack([rows, cols], axis=1)), shape=(n, n))
    return matrix @ x


# Run-time weights have their own VJP: JAX's BCOO transpose rule fails under vmap
# over the weights with an unbatched x ("dot_general requires lhs batch
# dimensions..."), while the products themselves batch.
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _weighted_product(n: int, senders, receivers, weights, flat):
    return _coo_matmul(receivers, senders, n, weights, flat)


def _weighted_product_fwd(n, senders, receivers, weights, flat):
    y = _coo_matmul(receivers, senders, n, weights, flat)
    return y, (senders, receivers, weights, flat)


def _weighted_product_bwd(n, residuals, cotangent):
    senders, receivers, weights, flat = residuals
    x_bar = _coo_matmul(senders, receivers, n, weights, cotangent)  # A^T y_bar
    pairs = cotangent.at[receivers].get(mode="promise_in_bounds") * flat.at[senders].get(
        mode="promise_in_bounds"
    )
    w_bar = jnp.sum(pairs, axis=1).astype(weights.dtype)
    return (None, None, w_bar, x_bar)


_weighted_product.defvjp(_weighted_product_fwd, _weighted_product_bwd)


@dataclasses.dataclass(frozen=True, eq=False)
class BcooGraph(Graph):
    """A :class:`~sparsegcn.Graph` whose product is a BCOO matmul (``layout_name == "bcoo"``).

    Built by ``BCOO().view(graph)`` (edges sorted by receiver once, on the
    host); gathers, reductions and softmax stay those of the edge list.
    """

    layout_name: ClassVar[str] = "bcoo"

    def product(self, x_src, edge_weight=None) -> jax.Array:
        x = self.check_sources(x_src)
        return bcoo_product(self, x, edge_weight)


jax.tree_util.register_pytree_with_keys_class(BcooGraph)

"""``jax.experimental.sparse.BCOO`` matmul: the reference sparse format of JAX."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.experimental import sparse as jsparse

from sparsegcn.backends.base import Backend
from sparsegcn.graph import Graph


def to_bcoo(graph: Graph, dtype=jnp.float32) -> jsparse.BCOO:
    """``A[receiver, sender] = w`` as a BCOO matrix with sorted indices.

    A graph whose ``edges_sorted`` flag is set is used as is; any other is
    sorted here, which inside a jitted step costs a sort per call: sort once
    with :func:`sparsegcn.sort_edges` instead.
    """
    n = graph.num_nodes
    weights = jnp.asarray(graph.edge_weights()).astype(dtype)
    indices = jnp.stack([jnp.asarray(graph.receivers), jnp.asarray(graph.senders)], axis=1)
    matrix = jsparse.BCOO(
        (weights, indices), shape=(n, n), indices_sorted=graph.edges_sorted, unique_indices=False
    )
    return matrix if graph.edges_sorted else matrix.sort_indices()


def enable_cusparse_if_gpu() -> None:
    """Turns on ``jax_bcoo_cusparse_lowering`` when JAX runs on a GPU.

    The flag is process-wide and read when a function is lowered; it routes
    both BCOO and BCSR products to cuSPARSE. Measured on one H200 (``Â x``,
    1M nodes, 11M edges, F = 64, ``benchmarks/bcoo_lowering.py``): BCSR
    1.67 ms with it against 2.0 ms without, BCOO 6.6 ms with it against
    1.85 ms without. :func:`~sparsegcn.backends.pack` calls this for the
    CSR format; the :class:`BCOO` backend leaves the flag as it finds it.
    """
    if jax.default_backend() == "gpu" and not jax.config.jax_bcoo_cusparse_lowering:
        jax.config.update("jax_bcoo_cusparse_lowering", True)


@dataclasses.dataclass(frozen=True)
class BCOO(Backend):
    """Sparse-dense matmul with ``jax.experimental.sparse.BCOO``.

    It lowers to gather and scatter-add, on every platform, unless
    ``jax_bcoo_cusparse_lowering`` is set: then, on GPU, with the sorted
    indices given here, to cuSPARSE's COO SpMM, which measured 3.6x slower
    than gather and scatter on an H200 (see :func:`enable_cusparse_if_gpu`).
    The backend does not change the flag; packing a graph in the CSR format
    on GPU sets it, process-wide.
    """

    name: ClassVar[str] = "bcoo"

    def matmul(self, graph: Graph, x: jax.Array) -> jax.Array:
        n = graph.num_nodes
        flat = x.reshape(n, -1)
        return (to_bcoo(graph, x.dtype) @ flat).reshape(x.shape)

"""``jax.experimental.sparse.BCOO`` matmul, with cuSPARSE on GPU."""

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
    """BCOO's cuSPARSE lowering is off by default; turn it on when running on GPU.

    The flag is read at lowering time, so it is set globally, once, when the
    backend is chosen (outside any compiled loop).
    """
    if jax.default_backend() == "gpu" and not jax.config.jax_bcoo_cusparse_lowering:
        jax.config.update("jax_bcoo_cusparse_lowering", True)


@dataclasses.dataclass(frozen=True)
class BCOO(Backend):
    """Sparse-dense matmul with ``jax.experimental.sparse.BCOO``.

    On CPU it lowers to gather and scatter; on GPU, with sorted indices and
    the cuSPARSE lowering (enabled here), to cuSPARSE SpMM.
    """

    name: ClassVar[str] = "bcoo"

    def __post_init__(self):
        enable_cusparse_if_gpu()

    def matmul(self, graph: Graph, x: jax.Array) -> jax.Array:
        n = graph.num_nodes
        flat = x.reshape(n, -1)
        return (to_bcoo(graph, x.dtype) @ flat).reshape(x.shape)

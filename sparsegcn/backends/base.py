"""What every propagation backend shares: the contract and input checks."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from sparsegcn import _checks
from sparsegcn.graph import Graph


class Backend:
    """A way to compute ``y = A @ x`` for the matrix ``A[receiver, sender] = w``.

    Subclasses are frozen dataclasses, hashable, so a backend can be a static
    argument of ``jit``. They implement :meth:`matmul`; :meth:`__call__`
    validates once and dispatches.
    """

    name: ClassVar[str] = "backend"

    def __call__(self, graph: Graph, x: jax.Array) -> jax.Array:
        x = check_propagate_inputs(graph, x)
        return self.matmul(graph, x)

    def matmul(self, graph: Graph, x: jax.Array) -> jax.Array:
        raise NotImplementedError

    def view(self, graph: Graph) -> Graph:
        """``graph`` converted once, on the host, into the view whose own
        ``product`` is this backend's (see :mod:`sparsegcn.views`); the
        default keeps the graph as it is."""
        return graph


def check_propagate_inputs(graph: Graph, x) -> jax.Array:
    """Static checks that hold under tracing too: type, rows, dtype."""
    if not isinstance(graph, Graph):
        raise TypeError(f"propagate expects a sparsegcn.Graph, got {type(graph).__name__}")
    x = jnp.asarray(x)
    _checks.check_num_rows("x", x.shape, graph.num_nodes)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        raise TypeError(f"x must have a floating dtype, got {x.dtype}")
    return x


def edge_weights_like(graph: Graph, x: jax.Array) -> jax.Array | None:
    """Edge weights cast to ``x``'s dtype, or None for an unweighted graph."""
    if graph.weights is None:
        return None
    return jnp.asarray(graph.weights).astype(x.dtype)


def fence(values, ids: jax.Array):
    """Returns ``values`` unchanged, computed once into buffers XLA cannot fuse through.

    XLA on CPU removes ``optimization_barrier`` before fusing, and it
    happily fuses a producer into a consumer that reads each element many
    times: a dropout hash recomputed for every feature of a gathered row, or
    a whole propagation recomputed for every entry of a sparse feature
    matrix. The operands and results of a conditional are always
    materialised, so this wraps ``values`` in one whose predicate can never
    hold (a validated id is never negative) but cannot be folded away.

    Args:
      values: a pytree of arrays.
      ids: an integer array whose entries are all ``>= 0`` (validated ids).

    Returns:
      ``values``.
    """
    if ids.size == 0:
        return values
    never = ids.reshape(-1)[0] < 0
    return jax.lax.cond(never, lambda v: jax.tree.map(jnp.zeros_like, v), lambda v: v, values)


@custom_vmap
def fence_ids(ids: jax.Array) -> jax.Array:
    """Integer ``ids`` (all ``>= 0``) unchanged, materialised as by :func:`fence`,
    under ``vmap`` too.

    Under ``vmap`` with batched ``ids``, :func:`fence`'s conditional becomes
    a select, which XLA fuses through. Here the batching rule fences the
    whole batch at once, so the predicate stays a scalar. Integer ids have
    no tangents; the values of a differentiated computation need
    :func:`fence`.
    """
    return fence(ids, ids)


@fence_ids.def_vmap
def _fence_ids_batched(axis_size, in_batched, ids):
    return fence_ids(ids), in_batched[0]

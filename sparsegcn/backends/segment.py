"""The default backend: gather rows by sender, ``segment_sum`` into receivers."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax

from sparsegcn.backends.base import Backend, edge_weights_like
from sparsegcn.graph import Graph


def gather_scatter(
    senders: jax.Array,
    receivers: jax.Array,
    weights: jax.Array | None,
    x: jax.Array,
    num_segments: int,
    *,
    indices_are_sorted: bool = False,
) -> jax.Array:
    """``y[r] = sum over e with receivers[e] == r of weights[e] * x[senders[e]]``.

    The sparse-dense product behind both message passing (square ``A``) and
    sparse features (rectangular ``X``). Ids must already be validated:
    out-of-range ids are silently dropped by ``segment_sum``.

    Args:
      senders: int ``[E]`` rows of ``x`` to gather.
      receivers: int ``[E]`` output rows, each in ``[0, num_segments)``.
      weights: ``[E]`` per-edge factors, or None for ones.
      x: ``[M, ...]`` values to gather from.
      num_segments: static number of output rows.
      indices_are_sorted: promise that ``receivers`` is non-decreasing.

    Returns:
      ``[num_segments, ...]`` with ``x``'s trailing shape and dtype.
    """
    messages = x.at[senders].get(mode="promise_in_bounds")
    if weights is not None:
        messages = messages * weights.reshape(weights.shape + (1,) * (x.ndim - 1))
    return jax.ops.segment_sum(
        messages, receivers, num_segments=num_segments, indices_are_sorted=indices_are_sorted
    )


@dataclasses.dataclass(frozen=True)
class Segment(Backend):
    """Gather ``x[senders]``, scale by the weights, ``jax.ops.segment_sum`` by receiver.

    Memory is ``O(E * F)`` for the gathered messages; time is one gather
    and one scatter-add. Works on every platform and under jit, grad and vmap.

    Attributes:
      use_sorted: pass ``indices_are_sorted`` to ``segment_sum`` when the
        graph's ``edges_sorted`` flag is set.
    """

    use_sorted: bool = False
    name: ClassVar[str] = "segment"

    def matmul(self, graph: Graph, x: jax.Array) -> jax.Array:
        return gather_scatter(
            graph.senders,
            graph.receivers,
            edge_weights_like(graph, x),
            x,
            graph.num_nodes,
            indices_are_sorted=self.use_sorted and graph.edges_sorted,
        )

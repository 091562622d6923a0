"""Graph readouts: one vector per graph from its nodes' rows.

Each readout is a segment reduction over ``node_graph`` (a node's graph
slot, :class:`~sparsegcn.batch.GraphBatch`), the ``global_*_pool`` of PyG
and the ``*Pooling`` of DGL. ``node_mask`` (``False`` on padding nodes)
leaves nodes out; in a padded batch padding nodes belong to the padding
graph anyway, so real graphs' rows never see them either way.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from sparsegcn.nn.initializers import glorot_uniform
from sparsegcn.ops import segment_softmax, segment_sum
from sparsegcn.ops.segment import segment_max

READOUTS = ("sum", "mean", "max")


def _masked(h: jax.Array, node_mask: jax.Array | None, fill) -> jax.Array:
    if node_mask is None:
        return h
    keep = jnp.reshape(node_mask, node_mask.shape + (1,) * (h.ndim - 1))
    return jnp.where(keep, h, jnp.asarray(fill, h.dtype))


def readout(
    h: jax.Array,
    node_graph: jax.Array,
    num_graphs: int,
    reduce: str = "sum",
    *,
    node_mask: jax.Array | None = None,
) -> jax.Array:
    """Sum, mean or max of each graph's node rows.

    .. math:: r_g = \\bigoplus_{i:\\, \\mathrm{graph}(i) = g} h_i

    Args:
      h: ``[N, F]`` node rows.
      node_graph: int ``[N]`` graph slot of each node, in ``[0, num_graphs)``.
      num_graphs: static ``G``.
      reduce: ``"sum"``, ``"mean"`` or ``"max"``.
      node_mask: optional bool ``[N]``; ``False`` nodes are left out.

    Returns:
      ``[G, F]``; a graph without (unmasked) nodes gets 0.

    Raises:
      ValueError: an unknown ``reduce``.
    """
    if reduce not in READOUTS:
        raise ValueError(f"unknown readout {reduce!r}; choose one of {list(READOUTS)}")
    if reduce == "max":
        out = segment_max(_masked(h, node_mask, -jnp.inf), node_graph, num_graphs)
        return jnp.where(jnp.isfinite(out), out, jnp.zeros((), out.dtype))
    total = segment_sum(_masked(h, node_mask, 0.0), node_graph, num_graphs)
    if reduce == "sum":
        return total
    ones = jnp.ones(node_graph.shape, h.dtype)
    count = segment_sum(_masked(ones, node_mask, 0.0), node_graph, num_graphs)
    return total / jnp.maximum(count, jnp.ones((), h.dtype))[:, None]


def attention_pool_params(key: jax.Array, features: int) -> dict:
    """``{"w_gate": [F, 1], "b_gate": [1]}`` for :func:`attention_pool`."""
    return {
        "w_gate": glorot_uniform(key, (features, 1)),
        "b_gate": jnp.zeros((1,), jnp.float32),
    }


def attention_pool(
    params: dict,
    h: jax.Array,
    node_graph: jax.Array,
    num_graphs: int,
    *,
    node_mask: jax.Array | None = None,
) -> jax.Array:
    """Global attention pooling: a softmax gate over each graph's nodes.

    .. math::

        r_g = \\sum_{i \\in g} \\mathrm{softmax}_{i \\in g}(h_i w + b)\\, h_i

    Args:
      params: :func:`attention_pool_params`.
      h: ``[N, F]``.
      node_graph: int ``[N]``.
      num_graphs: static ``G``.
      node_mask: optional bool ``[N]``; masked nodes get weight 0.

    Returns:
      ``[G, F]``.

    References:
      Li, Tarlow, Brockschmidt & Zemel, *Gated Graph Sequence Neural
      Networks*, ICLR 2016 (eq. 7). https://arxiv.org/abs/1511.05493
    """
    gate = (h @ params["w_gate"] + params["b_gate"][None, :])[:, 0]
    alpha = segment_softmax(gate, node_graph, num_graphs, mask=node_mask)
    return segment_sum(alpha[:, None] * h, node_graph, num_graphs)


__all__ = ["READOUTS", "attention_pool", "attention_pool_params", "readout"]

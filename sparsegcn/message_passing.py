"""Message passing: edge-wise messages, any aggregation, on every graph view.

One function, :func:`message_passing`, writes a layer's neighbourhood step
against the view protocol of :mod:`sparsegcn.views`, so the same layer code
runs on a full graph in any layout, a row chunk, a sampled block and an
edge shard:

.. math::

    y_i = \\bigoplus_{e:\\, j \\to i} \\phi(x^{src}_j, x^{dst}_i, e_{ji})

with ``⊕`` one of ``sum``, ``mean``, ``max``, ``min`` or ``softmax`` and
``φ`` the ``message`` function (``w_e x_j`` when none is given).

When the message is a weighted sum of source rows (no ``message``
function, no edge features; ``sum`` or ``mean``) nothing per edge is
built: the view's fused ``product`` runs, which on a packed graph is the
native CSR kernel or the fused ELL loops, with run-time weights
(attention) read per edge. Any other message gathers ``[E, ...]`` rows and
reduces them by target.

Attention is three calls (see :func:`sparsegcn.nn.gat_conv`):
:func:`edge_scores` (per-edge logits from source and target rows),
:func:`edge_softmax`, then :func:`message_passing` with
``edge_weight=alpha``, which takes the fused path.

References:
  Gilmer et al., *Neural Message Passing for Quantum Chemistry*, ICML 2017.
  https://arxiv.org/abs/1704.01212

  Battaglia et al., *Relational inductive biases, deep learning, and graph
  networks*, 2018 (jraph's ``GraphNetwork``). https://arxiv.org/abs/1806.01261
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from sparsegcn import _checks
from sparsegcn.views import REDUCES, broadcast_edges, check_edge_weight, masked_messages

AGGREGATIONS = (*REDUCES, "softmax")

Message = Callable[[jax.Array, jax.Array | None, jax.Array | None], jax.Array]


def message_passing(
    graph,
    x_src: jax.Array,
    x_dst: jax.Array | None = None,
    *,
    message: Message | None = None,
    aggregate: str = "sum",
    edge_weight: jax.Array | None = None,
    edge_features: jax.Array | None = None,
) -> jax.Array:
    """Aggregates messages along the edges of ``graph`` into its targets.

    Args:
      graph: any view (:class:`~sparsegcn.Graph` in any layout, or a
        bipartite view) with ``num_src`` sources, ``num_dst`` targets and
        ``E`` edges.
      x_src: ``[num_src, ...]`` source rows (``graph.sources(h)``).
      x_dst: ``[num_dst, ...]`` target rows (``graph.targets(h)``), passed
        to ``message``; ``None`` if the message does not read them.
      message: ``message(x_j [E, ...], x_i [E, ...] | None, e [E, ...] | None)
        -> [E, ...]``; ``None`` for ``w_e x_j`` (``x_j`` when
        ``edge_weight`` is ``None`` and the graph is unweighted).
      aggregate: ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` (a target
        without edges gets 0), or ``"softmax"``: ``sum_j softmax_j(m_j) *
        m_j`` per feature (PyG's ``SoftmaxAggregation`` with ``t = 1``).
      edge_weight: ``[E]`` or per head ``[E, H]`` factors, replacing the
        graph's weights (attention coefficients, say). With a ``message``
        function the messages are multiplied by it, or by the graph's own
        weights when it is ``None``, for every aggregation (pass an
        unweighted graph to keep them as they are). Integer (bool) messages
        scaled by floating weights take the weights' dtype.
      edge_features: ``[E, ...]`` per-edge inputs to ``message``.

    Returns:
      ``[num_dst, ...]``. Masked edges (``graph.edge_mask`` false) carry no
      message on any path: their entries are selected away, so a non-finite
      value there reaches neither the result nor the gradient.

    Raises:
      ValueError: an unknown aggregation, edge features without a message
        function to read them, ``x_src`` (or ``x_dst``, when the message
        reads it) without one row per source (target), or ``edge_weight``
        neither ``[E]`` nor ``[E, H]`` with ``H`` heads in the messages.
    """
    if aggregate not in AGGREGATIONS:
        raise ValueError(f"unknown aggregate {aggregate!r}; choose one of {list(AGGREGATIONS)}")
    if edge_features is not None and message is None:
        raise ValueError("edge_features need a message function to read them")
    if edge_features is not None:
        _checks.check_num_rows(
            "edge_features", jnp.shape(edge_features), jnp.shape(graph.senders)[0], "num_edges"
        )
    if message is None and aggregate in ("sum", "mean"):
        if edge_weight is not None:
            check_edge_weight(edge_weight, jnp.shape(graph.senders)[0], jnp.shape(x_src))
        y = graph.product(x_src, edge_weight)
        if aggregate == "mean":
            count = broadcast_edges(graph.in_count(y.dtype), y)
            y = y / jnp.maximum(count, jnp.ones((), y.dtype))
        return y
    x_j = graph.gather_src(jnp.asarray(x_src))
    if message is None:
        messages = x_j
    else:
        x_i = None if x_dst is None else graph.gather_dst(jnp.asarray(x_dst))
        messages = message(x_j, x_i, edge_features)
    factors = graph.weights if edge_weight is None else edge_weight
    if factors is not None and not jnp.issubdtype(messages.dtype, jnp.inexact):
        # Integer (bool) messages scaled by float (integer) weights take the weights'
        # dtype, as numpy and torch promote: the weights are never truncated.
        w_dtype = jnp.asarray(factors).dtype
        if jnp.issubdtype(w_dtype, jnp.inexact) or messages.dtype == jnp.bool_:
            messages = messages.astype(w_dtype)
    weights = graph.edge_factors(edge_weight, messages.dtype, messages.shape, "messages")
    if weights is not None:
        messages = messages * broadcast_edges(weights, messages)
    # Masked edges' messages are 0 before anything multiplies them (a non-finite
    # message on a padding edge would make 0 * inf = NaN in the softmax's gradient).
    messages = masked_messages(messages, graph.edge_mask)
    if aggregate == "softmax":
        alpha = graph.softmax(messages)
        return graph.aggregate(alpha * messages, "sum")
    return graph.aggregate(messages, aggregate)


def edge_scores(graph, score_src: jax.Array, score_dst: jax.Array) -> jax.Array:
    """Per-edge scores ``score_src[s_e] + score_dst[r_e]``, ``[E, ...]``.

    The additive form of GAT's attention logits: each side's share is
    computed once per node (``[num_src, H]``, ``[num_dst, H]``), so only
    ``E H`` scalars are gathered, never ``[E, F]`` rows.

    Raises:
      ValueError: ``score_src`` without one row per source or ``score_dst``
        without one per target.
    """
    _checks.check_num_rows(
        "score_src", jnp.shape(score_src), graph.num_src, getattr(graph, "source_count", "num_src")
    )
    _checks.check_num_rows(
        "score_dst", jnp.shape(score_dst), graph.num_dst, getattr(graph, "target_count", "num_dst")
    )
    return graph.gather_src(jnp.asarray(score_src)) + graph.gather_dst(jnp.asarray(score_dst))


def edge_softmax(graph, scores: jax.Array) -> jax.Array:
    """``scores [E, ...]`` normalized over each target's incoming edges (``graph.softmax``).

    .. math:: \\alpha_e = \\exp(s_e - m_{r_e}) / \\sum_{e': r_{e'} = r_e} \\exp(s_{e'} - m_{r_e})

    with ``m`` the per-target maximum, so large scores stay finite.
    """
    return graph.softmax(scores)


__all__ = ["AGGREGATIONS", "edge_scores", "edge_softmax", "message_passing"]

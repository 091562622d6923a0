"""Graph readouts: one vector per graph from its nodes' rows.

Each readout is a segment reduction over ``node_graph`` (a node's graph
slot, :class:`~sparsegcn.batch.GraphBatch`), the ``global_*_pool`` of PyG
and the ``*Pooling`` of DGL. ``node_mask`` (``False`` on padding nodes)
leaves nodes out; in a padded batch padding nodes belong to the padding
graph anyway, so real graphs' rows never see them either way.

Two readouts learn: :func:`attention_pool` (a softmax gate per node) and
:func:`set2set` (an LSTM that attends over the nodes several times and
returns ``[query, read]``, twice the width).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from sparsegcn import _checks
from sparsegcn.nn.initializers import glorot_uniform
from sparsegcn.ops import segment_softmax, segment_sum
from sparsegcn.ops.segment import check_segment_ids, segment_max

READOUTS = ("sum", "mean", "max")


def _graph_slots(node_graph, num_graphs) -> tuple[jax.Array, int]:
    """``node_graph`` as an array and ``num_graphs`` as an int, after the range check.

    Concrete ids are checked on the host (the segment ops would drop an
    out-of-range slot silently); traced ids are not checked.
    """
    num_graphs = _checks.check_static_int("num_graphs", num_graphs)
    check_segment_ids("node_graph", node_graph, num_graphs, count_name="num_graphs")
    return jnp.asarray(node_graph), num_graphs


def _check_rows(caller: str, h) -> None:
    """Refuses ``h`` that is not ``[N, F]`` (its shape is static, so this holds under jit).

    A 1-D ``h`` would broadcast against the ``[G, 1]`` node counts of the mean
    into ``[G, G]``, and a 3-D one against them wrongly.
    """
    shape = jnp.shape(h)
    if len(shape) != 2:
        hint = "; give one feature per node as h[:, None]" if len(shape) == 1 else ""
        raise ValueError(f"{caller}: h must be [N, F] node rows, got shape {tuple(shape)}{hint}")


def _masked(h: jax.Array, node_mask: jax.Array | None, fill) -> jax.Array:
    if node_mask is None:
        return h
    node_mask = jnp.asarray(node_mask)
    if node_mask.dtype != jnp.bool_ or node_mask.shape != h.shape[:1]:
        raise ValueError(
            f"node_mask must be bool of shape {h.shape[:1]}, got {node_mask.dtype} "
            f"{node_mask.shape}"
        )
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
      ``[G, F]``; a graph without (unmasked) nodes gets 0. Non-finite rows
      propagate as the reduction does in NumPy: a NaN makes its graph's
      sum, mean and max NaN, and ``±inf`` is a graph's max when it is one.

    Raises:
      ValueError: an unknown ``reduce``, ``h`` not ``[N, F]``, a
        ``node_mask`` not bool ``[N]``, or a concrete ``node_graph`` id
        outside ``[0, num_graphs)`` (named with its position; traced ids
        are not checked).
    """
    if reduce not in READOUTS:
        raise ValueError(f"unknown readout {reduce!r}; choose one of {list(READOUTS)}")
    _check_rows("readout", h)
    node_graph, num_graphs = _graph_slots(node_graph, num_graphs)
    if reduce == "max":
        h = jnp.asarray(h)
        lowest = -jnp.inf if jnp.issubdtype(h.dtype, jnp.inexact) else jnp.iinfo(h.dtype).min
        masked = _masked(h, node_mask, lowest)
        # An empty segment is 0 (segment_max's fill); a graph whose nodes are all
        # masked holds only the -inf fill, so it is told apart by its count.
        out = segment_max(masked, node_graph, num_graphs)
        if jnp.issubdtype(h.dtype, jnp.inexact):
            # NaN wins on every backend (a scatter-max need not propagate it).
            nan = segment_sum(jnp.isnan(masked).astype(jnp.int32), node_graph, num_graphs) > 0
            out = jnp.where(nan, jnp.asarray(jnp.nan, out.dtype), out)
        if node_mask is not None:
            kept = jnp.asarray(node_mask).astype(jnp.int32)
            real = segment_sum(kept, node_graph, num_graphs) > 0
            out = jnp.where(real[:, None], out, jnp.zeros((), out.dtype))
        return out
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
      node_graph: int ``[N]``, in ``[0, num_graphs)``.
      num_graphs: static ``G``.
      node_mask: optional bool ``[N]``; masked nodes get weight 0.

    Returns:
      ``[G, F]``.

    Raises:
      ValueError: ``h`` not ``[N, F]``, ``params`` not for ``F`` features
        (naming both widths), or a concrete ``node_graph`` id outside
        ``[0, num_graphs)`` (traced ids are not checked).

    References:
      Li, Tarlow, Brockschmidt & Zemel, *Gated Graph Sequence Neural
      Networks*, ICLR 2016 (eq. 7). https://arxiv.org/abs/1511.05493
    """
    _check_rows("attention_pool", h)
    features = jnp.shape(h)[1]
    w_gate, b_gate = jnp.shape(params["w_gate"]), jnp.shape(params["b_gate"])
    if w_gate != (features, 1) or b_gate != (1,):
        raise ValueError(
            f"attention_pool params are for {w_gate[0] if w_gate else '?'} features "
            f"(w_gate shape {tuple(w_gate)}, b_gate shape {tuple(b_gate)}), h has {features} "
            f"(shape {tuple(jnp.shape(h))}); build them with attention_pool_params(key, {features})"
        )
    node_graph, num_graphs = _graph_slots(node_graph, num_graphs)
    gate = (h @ params["w_gate"] + params["b_gate"][None, :])[:, 0]
    alpha = segment_softmax(gate, node_graph, num_graphs, mask=node_mask)
    return segment_sum(alpha[:, None] * h, node_graph, num_graphs)


def set2set_params(key: jax.Array, features: int) -> dict:
    """The LSTM of :func:`set2set` over ``F`` features, laid out as ``torch.nn.LSTM``.

    Returns:
      ``{"w_ih": [2F, 4F], "w_hh": [F, 4F], "b_ih": [4F], "b_hh": [4F]}``
      (gates in PyTorch's order: input, forget, cell, output; the weights
      are PyTorch's ``weight_ih_l0`` and ``weight_hh_l0`` transposed), every
      entry ``U(-1/sqrt(F), 1/sqrt(F))`` as PyTorch initialises an LSTM.
    """
    bound = 1.0 / math.sqrt(features)
    keys = jax.random.split(key, 4)
    shapes = {
        "w_ih": (2 * features, 4 * features),
        "w_hh": (features, 4 * features),
        "b_ih": (4 * features,),
        "b_hh": (4 * features,),
    }
    return {
        name: jax.random.uniform(k, shape, jnp.float32, -bound, bound)
        for k, (name, shape) in zip(keys, shapes.items(), strict=True)
    }


def set2set(
    params: dict,
    h: jax.Array,
    node_graph: jax.Array,
    num_graphs: int,
    *,
    steps: int,
    node_mask: jax.Array | None = None,
) -> jax.Array:
    """Set2Set: ``steps`` rounds of LSTM-driven attention over each graph's nodes.

    .. math::

        q_t = \\mathrm{LSTM}(q^*_{t-1}), \\quad
        a_{i,t} = \\mathrm{softmax}_{i \\in g}(h_i \\cdot q_t), \\quad
        r_t = \\textstyle\\sum_{i \\in g} a_{i,t} h_i, \\quad
        q^*_t = [q_t \\,\\Vert\\, r_t]

    from ``q^*_0 = 0`` and a zero LSTM state; the result is ``q^*_T``
    (PyG's ``Set2Set(F, processing_steps=T)``). The LSTM carries one state
    per graph slot; every node row is read once per step (``[N, F]``, no
    per-edge work).

    Args:
      params: :func:`set2set_params` for ``F``.
      h: ``[N, F]`` node rows.
      node_graph: int ``[N]`` graph slot of each node.
      num_graphs: static ``G``.
      steps: static ``T >= 1``, the processing steps.
      node_mask: optional bool ``[N]``; masked nodes get attention 0. A
        graph without (unmasked) nodes reads ``r_t = 0``.

    Returns:
      ``[G, 2F]``.

    Raises:
      ValueError: ``steps`` below 1, ``h`` not ``[N, F]``, ``params`` not for ``F`` features, or
        a concrete ``node_graph`` id outside ``[0, num_graphs)`` (traced
        ids are not checked).

    References:
      Vinyals, Bengio & Kudlur, *Order Matters: Sequence to sequence for
      sets*, ICLR 2016. https://arxiv.org/abs/1511.06391
    """
    steps = _checks.check_static_int("steps", steps, minimum=1)
    _check_rows("set2set", h)
    node_graph, num_graphs = _graph_slots(node_graph, num_graphs)
    features = h.shape[-1]
    if params["w_hh"].shape != (features, 4 * features):
        raise ValueError(
            f"set2set params are for {params['w_hh'].shape[0]} features, h has {features}"
        )
    zeros = jnp.zeros((num_graphs, features), h.dtype)
    q_star = jnp.zeros((num_graphs, 2 * features), h.dtype)
    state, cell = zeros, zeros
    bias = (params["b_ih"] + params["b_hh"])[None, :]
    for _ in range(steps):
        gates = q_star @ params["w_ih"] + state @ params["w_hh"] + bias
        i, f, g, o = jnp.split(gates, 4, axis=1)
        cell = jax.nn.sigmoid(f) * cell + jax.nn.sigmoid(i) * jnp.tanh(g)
        state = jax.nn.sigmoid(o) * jnp.tanh(cell)
        scores = jnp.sum(h * state[node_graph], axis=1)
        alpha = segment_softmax(scores, node_graph, num_graphs, mask=node_mask)
        read = segment_sum(alpha[:, None] * h, node_graph, num_graphs)
        q_star = jnp.concatenate([state, read], axis=1)
    return q_star


__all__ = [
    "READOUTS",
    "attention_pool",
    "attention_pool_params",
    "readout",
    "set2set",
    "set2set_params",
]

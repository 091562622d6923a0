"""What every graph-level model shares: the model record, masked batch norm, readouts.

A graph-level model is a :class:`GraphModel`, a pair of pure functions over
parameters and batch-norm running statistics (two pytrees), applied to a
padded :class:`~sparsegcn.batch.GraphBatch`. :func:`masked_batch_norm`
takes batch statistics over real rows only, so padding changes no real
output; :func:`pool` turns node rows into one row per graph slot with any
of :data:`GRAPH_READOUTS`. The families built on these are
:func:`~sparsegcn.nn.graph_gin.graph_gin` (Xu et al.) and
:func:`~sparsegcn.nn.graph_ogb.graph_ogb` (OGB's baseline).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from sparsegcn import _checks
from sparsegcn.nn.readout import (
    READOUTS,
    attention_pool,
    attention_pool_params,
    readout,
    set2set,
    set2set_params,
)

GRAPH_READOUTS = (*READOUTS, "attention", "set2set")
"""The readouts the graph models take: a reduction, global attention pooling, or
Set2Set (whose rows are twice as wide)."""

SET2SET_STEPS = 2
"""Set2Set's default processing steps (OGB's mol baseline uses 2)."""

BN_MOMENTUM = 0.1
BN_EPS = 1e-5


class GraphModel(NamedTuple):
    """A graph-level model: pure functions over params and batch-norm statistics.

    Attributes:
      init: ``init(key) -> (params, stats)``.
      apply: ``apply(params, stats, batch, *, key=None, training=False) ->
        (logits [G_b, C], stats)`` on a :class:`~sparsegcn.batch.GraphBatch`;
        the returned stats are updated when ``training``, else unchanged.
      name: short name for reports.
      config: the hyperparameters it was built with.
    """

    init: Callable[[jax.Array], tuple[Any, Any]]
    apply: Callable[..., tuple[jax.Array, Any]]
    name: str
    config: dict


def batch_norm_params(width: int) -> dict:
    """``{"scale": [F] ones, "bias": [F] zeros}`` for :func:`masked_batch_norm`."""
    return {"scale": jnp.ones((width,), jnp.float32), "bias": jnp.zeros((width,), jnp.float32)}


def batch_norm_stats(width: int) -> dict:
    """``{"mean": [F] zeros, "var": [F] ones}``: running statistics at the start."""
    return {"mean": jnp.zeros((width,), jnp.float32), "var": jnp.ones((width,), jnp.float32)}


def masked_batch_norm(
    params: dict, stats: dict, h: jax.Array, mask: jax.Array, training: bool
) -> tuple[jax.Array, dict]:
    """Batch norm over the rows where ``mask`` holds.

    Training normalises with the masked rows' mean and (biased) variance and
    moves the running statistics by :data:`BN_MOMENTUM` (the variance
    unbiased, as PyTorch); evaluation uses the running statistics. A batch
    with no real row leaves them as they are, and one with a single row moves
    only the mean (its unbiased variance is undefined: PyTorch refuses such a
    batch in training).

    Args:
      params: ``{"scale": [F], "bias": [F]}``.
      stats: ``{"mean": [F], "var": [F]}``.
      h: ``[N, F]``.
      mask: bool ``[N]``.
      training: batch statistics (and updated running ones) or running ones.

    Returns:
      ``([N, F], stats)``.
    """
    keep = mask[:, None]
    if training:
        # Selected, not weighted: a padding row may hold anything (inf * 0 is NaN).
        rows = jnp.sum(mask.astype(h.dtype))
        count = jnp.maximum(rows, jnp.ones((), h.dtype))
        mean = jnp.sum(jnp.where(keep, h, 0.0), axis=0) / count
        var = jnp.sum(jnp.where(keep, (h - mean[None, :]) ** 2, 0.0), axis=0) / count
        unbiased = var * count / jnp.maximum(count - 1.0, jnp.ones((), h.dtype))
        moved_mean = (1.0 - BN_MOMENTUM) * stats["mean"] + BN_MOMENTUM * mean
        moved_var = (1.0 - BN_MOMENTUM) * stats["var"] + BN_MOMENTUM * unbiased
        stats = {
            "mean": jnp.where(rows >= 1, moved_mean, stats["mean"]),
            "var": jnp.where(rows >= 2, moved_var, stats["var"]),
        }
    else:
        mean, var = stats["mean"], stats["var"]
    normed = (h - mean[None, :]) * jax.lax.rsqrt(var[None, :] + BN_EPS)
    out = normed * params["scale"][None, :] + params["bias"][None, :]
    # Padding rows leave as zeros: scaled by 1/sqrt(var + eps) at every layer they
    # would otherwise grow without bound where the real rows barely vary (one node).
    return jnp.where(keep, out, 0.0), stats


def check_graph_readout(readout_reduce: str, set2set_steps: int) -> None:
    """Refuses an unknown readout or a bad Set2Set step count, naming it."""
    if readout_reduce not in GRAPH_READOUTS:
        raise ValueError(
            f"unknown readout {readout_reduce!r}; choose one of {list(GRAPH_READOUTS)}"
        )
    _checks.check_static_int("set2set_steps", set2set_steps, minimum=1)


def pooled_width(readout_reduce: str, width: int) -> int:
    """The width of a readout's rows: ``2F`` for Set2Set, else ``F``."""
    return 2 * width if readout_reduce == "set2set" else width


def pool_params(key: jax.Array, readout_reduce: str, width: int) -> dict | None:
    """A learnt readout's params (attention gate, Set2Set LSTM), else ``None``."""
    if readout_reduce == "attention":
        return attention_pool_params(key, width)
    if readout_reduce == "set2set":
        return set2set_params(key, width)
    return None


def pool(params, readout_reduce: str, h, batch, *, set2set_steps: int) -> jax.Array:
    """One row per graph slot of ``batch`` from the real node rows of ``h [N_b, F]``."""
    node_graph, num_graphs, mask = batch.node_graph, batch.num_graphs, batch.node_mask
    if readout_reduce == "attention":
        return attention_pool(params, h, node_graph, num_graphs, node_mask=mask)
    if readout_reduce == "set2set":
        return set2set(params, h, node_graph, num_graphs, steps=set2set_steps, node_mask=mask)
    return readout(h, node_graph, num_graphs, readout_reduce, node_mask=mask)


__all__ = [
    "BN_EPS",
    "BN_MOMENTUM",
    "GRAPH_READOUTS",
    "SET2SET_STEPS",
    "GraphModel",
    "batch_norm_params",
    "batch_norm_stats",
    "check_graph_readout",
    "masked_batch_norm",
    "pool",
    "pool_params",
    "pooled_width",
]

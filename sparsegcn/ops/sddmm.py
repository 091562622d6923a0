"""Edge-wise scores from sender and receiver rows (SDDMM-style ops).

An edge score combines a row of the sender side (``src``, ``[N_src, ...]``)
with a row of the receiver side (``dst``, ``[N_dst, ...]``), one value per
edge. In a bipartite sampled block ``N_src`` and ``N_dst`` differ; on a full
graph both are the node count. Ids must be validated beforehand (see
:func:`sparsegcn.ops.gather_rows`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from sparsegcn.ops.gather import gather_rows

__all__ = ["edge_dot", "edge_sum"]


def _check_edges(
    senders: ArrayLike, receivers: ArrayLike, src: ArrayLike, dst: ArrayLike, *, same_shape: bool
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    senders, receivers = jnp.asarray(senders), jnp.asarray(receivers)
    src, dst = jnp.asarray(src), jnp.asarray(dst)
    if senders.ndim != 1 or receivers.shape != senders.shape:
        raise ValueError(
            f"senders and receivers must both have shape [E], got {senders.shape} and "
            f"{receivers.shape}"
        )
    if src.ndim < 1 or dst.ndim < 1:
        raise ValueError(f"src and dst need a leading row dimension, got {src.shape}, {dst.shape}")
    if same_shape and src.shape[1:] != dst.shape[1:]:
        raise ValueError(
            f"src and dst rows must have the same shape, got {src.shape[1:]} and {dst.shape[1:]}"
        )
    return senders, receivers, src, dst


def edge_sum(senders: ArrayLike, receivers: ArrayLike, src: ArrayLike, dst: ArrayLike) -> jax.Array:
    """Additive edge score ``src[senders] + dst[receivers]``.

    .. math:: s_e = a_{\\text{src}}[u_e] + a_{\\text{dst}}[v_e]

    This is GAT's attention logit before the LeakyReLU, with ``src = x W a_l``
    and ``dst = x W a_r`` computed per node (``[N, H]``), so no ``[E, F]``
    tensor is formed.

    Args:
      senders: int ``[E]``, rows of ``src``.
      receivers: int ``[E]``, rows of ``dst``.
      src: ``[N_src, ...]``.
      dst: ``[N_dst, ...]``, same trailing shape and dtype as ``src``.

    Returns:
      ``[E, ...]``.

    References:
      Veličković et al., "Graph Attention Networks", ICLR 2018.
    """
    senders, receivers, src, dst = _check_edges(senders, receivers, src, dst, same_shape=True)
    return gather_rows(src, senders) + gather_rows(dst, receivers)


def edge_dot(senders: ArrayLike, receivers: ArrayLike, src: ArrayLike, dst: ArrayLike) -> jax.Array:
    """Dot-product edge score ``sum(src[senders] * dst[receivers], axis=-1)`` (SDDMM).

    .. math:: s_e = \\langle x_{\\text{src}}[u_e], x_{\\text{dst}}[v_e] \\rangle

    The sampled dense-dense product: the entries of ``src @ dst.T`` at the
    edges' positions, for dot-product attention and link scores.

    Args:
      senders: int ``[E]``, rows of ``src``.
      receivers: int ``[E]``, rows of ``dst``.
      src: ``[N_src, ..., F]``.
      dst: ``[N_dst, ..., F]``, same trailing shape and dtype as ``src``.

    Returns:
      ``[E, ...]`` (the last axis ``F`` is contracted).
    """
    senders, receivers, src, dst = _check_edges(senders, receivers, src, dst, same_shape=True)
    if src.ndim < 2:
        raise ValueError(f"edge_dot needs a feature axis: src must be [N, ..., F], got {src.shape}")
    return jnp.sum(gather_rows(src, senders) * gather_rows(dst, receivers), axis=-1)

"""Graph convolution layers as pure functions of ``(params, graph, x)``."""

from __future__ import annotations

import jax

from sparsegcn.backends import Backend, propagate
from sparsegcn.backends.base import fence
from sparsegcn.features import Features, SparseFeatures, matmul
from sparsegcn.graph import Graph


def transform_first(in_features: int, out_features: int, x: Features) -> bool:
    """Whether to compute ``Â (X W)`` rather than ``(Â X) W``.

    Both are equal; the cheaper one propagates the narrower matrix. Sparse
    ``X`` is always transformed first (it cannot be propagated densely).
    """
    return isinstance(x, SparseFeatures) or out_features <= in_features


def gcn_conv(
    params: dict, graph: Graph, x: Features, *, backend: str | Backend = "segment"
) -> jax.Array:
    """Graph convolution of Kipf & Welling.

    .. math:: H' = \\hat A \\, X W + b

    with ``Â`` the edge weights of ``graph`` (pass ``gcn_norm(graph)``).

    Args:
      params: ``{"w": [F, F'], "b": [F']}`` (``b`` optional).
      graph: the normalized adjacency, ``N`` nodes.
      x: ``[N, F]`` dense or sparse features.
      backend: propagation backend.

    Returns:
      ``[N, F']``.

    Shapes:
      ``x: [N, F] -> [N, F']``.

    References:
      Kipf & Welling, *Semi-Supervised Classification with Graph
      Convolutional Networks*, ICLR 2017. https://arxiv.org/abs/1609.02907
    """
    w = params["w"]
    if isinstance(x, SparseFeatures):
        # X W gathers rows of W per stored value: without the fence XLA fuses
        # the values' producer (dropout's hash) into that gather and hashes
        # each value once per output feature (measured 2x slower on Cora).
        x = x.with_values(fence(x.values, x.rows))
    if transform_first(w.shape[0], w.shape[1], x):
        h = propagate(graph, matmul(x, w), backend=backend)
    else:
        h = propagate(graph, x, backend=backend) @ w
    return h + params["b"][None, :] if "b" in params else h

"""Graph isomorphism networks: GIN (Xu et al. 2019) and its edge-feature form GINE.

GIN sums the neighbours' rows, adds ``(1 + ε)`` times the node's own row
with a learnable ``ε``, and runs a two-layer MLP on the result. The MLP's
first linear map commutes with the sum, so the model projects first
(``x W_1``, the narrow side on bag-of-words inputs, sparse rows welcome)
and the graph carries ``hidden`` columns, never ``F``. The sum of the
projected rows is the view's fused product: no ``[E, F]`` buffer.

GINE (Hu et al. 2020) puts a nonlinearity on every edge's message,
``ReLU(x_j + e_{ji} W_e + b_e)``, so it gathers ``[E, F]`` rows and runs
through :func:`~sparsegcn.message_passing.message_passing`'s ``message``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from sparsegcn import _checks
from sparsegcn.features import Features, SparseFeatures, matmul
from sparsegcn.message_passing import message_passing
from sparsegcn.nn.initializers import glorot_uniform
from sparsegcn.nn.model import (
    Model,
    check_edge_features,
    check_model_settings,
    check_unweighted,
)
from sparsegcn.nn.stack import layered_model


def gin_layer_params(
    key: jax.Array, fan_in: int, hidden: int, fan_out: int, *, edge_dim: int | None = None
) -> dict:
    """Parameters of one GIN (or, with ``edge_dim``, GINE) layer.

    Returns:
      ``{"eps": [] = 0, "w1": [F, H], "b1": [H], "w2": [H, F'], "b2": [F']}``
      (Glorot weights, zero biases, ``ε = 0`` as PyG's ``train_eps``), plus
      GINE's edge map ``{"w_e": [D, F], "b_e": [F]}`` when ``edge_dim = D``.
    """
    keys = jax.random.split(key, 3)
    params = {
        "eps": jnp.zeros((), jnp.float32),
        "w1": glorot_uniform(keys[0], (fan_in, hidden)),
        "b1": jnp.zeros((hidden,), jnp.float32),
        "w2": glorot_uniform(keys[1], (hidden, fan_out)),
        "b2": jnp.zeros((fan_out,), jnp.float32),
    }
    if edge_dim is not None:
        _checks.check_static_int("edge_dim", edge_dim, minimum=1)
        params["w_e"] = glorot_uniform(keys[2], (edge_dim, fan_in))
        params["b_e"] = jnp.zeros((fan_in,), jnp.float32)
    return params


def gin_project(params: dict, x: Features) -> jax.Array:
    """``[N, F] -> [N, H]``: ``x W_1``, the MLP's first map without its bias.

    Row-wise, so it commutes with taking rows (a sampled tree's, a chunk's).
    """
    return matmul(x, params["w1"])


def _mlp_tail(params: dict, pre: jax.Array) -> jax.Array:
    """``ReLU(pre + b_1) W_2 + b_2``: the rest of GIN's MLP after ``x W_1``."""
    hidden = jax.nn.relu(pre + params["b1"][None, :])
    return hidden @ params["w2"] + params["b2"][None, :]


def gin_conv(params: dict, graph, z: jax.Array) -> jax.Array:
    """One GIN layer on any view, from the projected rows ``z = x W_1``.

    .. math::

        h_i = \\mathrm{MLP}\\Big((1 + \\varepsilon)\\, x_i + \\sum_{j \\to i} x_j\\Big),
        \\qquad \\mathrm{MLP}(u) = \\mathrm{ReLU}(u W_1 + b_1) W_2 + b_2

    computed as ``ReLU((1 + ε) z_i + Σ_j z_j + b_1) W_2 + b_2`` with
    ``z = x W_1`` (equal: ``W_1`` is linear). The sum runs over the edges
    as given, duplicates and self-loops included, unweighted (PyG's
    ``GINConv``): pass a graph without weights.

    Args:
      params: :func:`gin_layer_params` (no edge map).
      graph: a view (see :mod:`sparsegcn.views`), unweighted.
      z: ``[num_rows, H]``, :func:`gin_project` of the layer's input rows.

    Returns:
      ``[num_dst, F']``.

    References:
      Xu, Hu, Leskovec & Jegelka, *How Powerful are Graph Neural Networks?*,
      ICLR 2019. https://arxiv.org/abs/1810.00826
    """
    check_unweighted(graph, "gin_conv")
    total = message_passing(graph, graph.sources(z))
    own = graph.targets(z)
    return _mlp_tail(params, (1.0 + params["eps"]) * own + total)


def gine_conv(params: dict, graph, x: jax.Array, edge_features: jax.Array) -> jax.Array:
    """One GINE layer: GIN with a per-edge feature vector in every message.

    .. math::

        h_i = \\mathrm{MLP}\\Big((1 + \\varepsilon)\\, x_i + \\sum_{j \\to i}
        \\mathrm{ReLU}(x_j + e_{ji} W_e + b_e)\\Big)

    (PyG's ``GINEConv`` with ``edge_dim``). The message is nonlinear in
    ``x_j``, so the ``[E, F]`` messages are built.

    Args:
      params: :func:`gin_layer_params` with ``edge_dim = D``.
      graph: a view, unweighted, with ``E`` edges.
      x: ``[num_rows, F]`` dense rows of the layer's input.
      edge_features: ``[E, D]``, one row per edge of ``graph`` in its own
        edge order (a packed or sorted layout reorders edges: give the
        features in that order).

    Returns:
      ``[num_dst, F']``.

    Raises:
      ValueError: ``params`` has no edge map, or ``edge_features`` is not
        ``[E, D]``.

    References:
      Hu et al., *Strategies for Pre-training Graph Neural Networks*, ICLR
      2020. https://arxiv.org/abs/1905.12265
    """
    if "w_e" not in params:
        raise ValueError("gine_conv needs an edge map: gin_layer_params(..., edge_dim=D)")
    check_edge_features(params, graph, edge_features, "gine_conv")
    check_unweighted(graph, "gine_conv")

    def message(x_j, x_i, e):
        return jax.nn.relu(x_j + e @ params["w_e"] + params["b_e"][None, :])

    x_src, x_dst = graph.sources(x), graph.targets(x)
    total = message_passing(graph, x_src, message=message, edge_features=edge_features)
    return _mlp_tail(params, ((1.0 + params["eps"]) * x_dst + total) @ params["w1"])


def gin(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 64,
    num_layers: int = 2,
    dropout_rate: float = 0.5,
    edge_dim: int | None = None,
    dropout_impl: str = "hash",
) -> Model:
    """GIN for node classification: dropout, GIN layer and ReLU per layer, logits last.

    .. math::

        H^{(l+1)} = \\mathrm{ReLU}\\big(\\mathrm{GIN}(\\mathrm{drop}(H^{(l)}))\\big)

    Every layer's MLP is ``[F_l, hidden, F_{l+1}]`` with ``F_{l+1} =
    hidden``, and ``num_classes`` on the last layer (no ReLU after it).
    The graph is the dataset's, unweighted (the registry's ``unweighted``
    preparation); ``apply`` takes any view: a
    :class:`~sparsegcn.Graph` in any layout, a
    :class:`~sparsegcn.sampling.ChunkedGraph` or a
    :class:`~sparsegcn.sampling.NeighborSample` (``[B, C]`` for its seeds;
    the sum then runs over the sampled neighbours).

    With ``edge_dim = D`` every layer is GINE (:func:`gine_conv`) and
    ``apply(params, graph, x, *, edge_features)`` takes ``[E, D]`` edge
    features in the prepared graph's own edge order, on a full
    :class:`~sparsegcn.Graph` only (a chunk or a sampled tree has no map back
    to the graph's edges). GINE's message is nonlinear in ``x_j``, so it
    gathers ``[E, F_l]`` rows (``F`` dense columns on the first layer: sparse
    ``x`` is densified).

    Args:
      in_features: ``F``.
      num_classes: ``C``.
      hidden: MLP width ``H`` (64).
      num_layers: GIN layers (2).
      dropout_rate: dropout of every layer's input (0.5).
      edge_dim: ``D``, the width of per-edge features (GINE); ``None``
        (default) for GIN without them.
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.

    Returns:
      A :class:`Model`. Params: ``{"layers": [gin_layer_params, ...]}``.

    Shapes:
      ``apply(params, graph, x [N, F]) -> [N, C]``; ``embed -> [N, H]``.

    References:
      Xu, Hu, Leskovec & Jegelka, *How Powerful are Graph Neural Networks?*,
      ICLR 2019. https://arxiv.org/abs/1810.00826
    """
    check_model_settings(
        hidden, num_layers, dropout_rate, in_features=in_features, num_classes=num_classes
    )
    fans = [in_features] + [hidden] * (num_layers - 1) + [num_classes]
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
    )
    if edge_dim is not None:
        _checks.check_static_int("edge_dim", edge_dim, minimum=1)
        config["edge_dim"] = edge_dim

    @jax.jit
    def init(key: jax.Array) -> dict:
        keys = jax.random.split(key, num_layers)
        return {
            "layers": [
                gin_layer_params(k, a, hidden, b, edge_dim=edge_dim)
                for k, a, b in zip(keys, fans[:-1], fans[1:], strict=True)
            ]
        }

    def project(layer, h, i, view):
        if edge_dim is None:
            return gin_project(layer, h)
        return h.todense() if isinstance(h, SparseFeatures) else h

    def propagate(layer, view, z, key, i, edge_features=None):
        if edge_dim is None:
            return gin_conv(layer, view, z)
        return gine_conv(layer, view, z, edge_features)

    return layered_model(
        init,
        "gin",
        config,
        edge_dim=edge_dim,
        project=project,
        propagate=propagate,
        dropout_rate=dropout_rate,
        dropout_impl=dropout_impl,
        activation=jax.nn.relu,
    )

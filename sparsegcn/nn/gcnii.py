"""GCNII (Chen et al. 2020): deep GCNs with an initial residual and an identity mapping.

Each layer mixes the propagated rows with the first layer's output
(initial residual, weight ``α``) and shrinks its weight towards the
identity (``β_l = log(λ / l + 1)``), so 64 layers train without
over-smoothing. The layers share one shape, so their weights are stacked
``[L, H, H]`` and run under :func:`jax.lax.scan`: one layer compiled, not 64.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from sparsegcn import _checks
from sparsegcn.features import Features, matmul
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.initializers import glorot_uniform, linear_params
from sparsegcn.nn.model import Model, check_model_settings, split_dropout_keys


def gcnii_betas(num_layers: int, lam: float) -> jax.Array:
    """``[L]`` float32 ``β_l = log(λ / l + 1)`` for ``l = 1 .. L``."""
    return jnp.asarray([math.log(lam / layer + 1.0) for layer in range(1, num_layers + 1)])


def gcnii_conv(
    w: jax.Array, graph, h: jax.Array, h0: jax.Array, *, alpha: float, beta: jax.Array
) -> jax.Array:
    """One GCNII layer (PyG's ``GCN2Conv`` with shared weights), before its ReLU.

    .. math::

        S = (1 - \\alpha)\\, \\hat A H + \\alpha H^{(0)}, \\qquad
        H' = (1 - \\beta_l)\\, S + \\beta_l\\, S W_l

    Args:
      w: ``[H, H]`` the layer's weight ``W_l``.
      graph: ``Â = gcn_norm(g)``, any square view (a
        :class:`~sparsegcn.Graph` in any layout, an edge shard).
      h: ``[N, H]`` the layer's input.
      h0: ``[N, H]`` the first layer's output ``H^{(0)}``.
      alpha: initial-residual weight ``α``.
      beta: scalar ``β_l``.

    Returns:
      ``[N, H]``.

    References:
      Chen, Wei, Huang, Ding & Li, *Simple and Deep Graph Convolutional
      Networks*, ICML 2020. https://arxiv.org/abs/2007.02133
    """
    support = (1.0 - alpha) * graph.product(graph.sources(h)) + alpha * graph.targets(h0)
    return (1.0 - beta) * support + beta * (support @ w)


def gcnii(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 64,
    num_layers: int = 64,
    dropout_rate: float = 0.6,
    alpha: float = 0.1,
    lam: float = 0.5,
    dropout_impl: str = "hash",
) -> Model:
    """GCNII: linear in, ``L`` GCNII layers, linear out; dropout before each.

    .. math::

        H^{(0)} = \\mathrm{ReLU}(\\mathrm{drop}(X) W_{in} + b_{in}), \\quad
        H^{(l)} = \\mathrm{ReLU}\\big(\\mathrm{GCNII}_l(\\mathrm{drop}(H^{(l-1)}),
        H^{(0)})\\big), \\quad
        Y = \\mathrm{drop}(H^{(L)}) W_{out} + b_{out}

    as in PyG's ``examples/gcn2_cora.py``. ``apply`` reads ``Â =
    gcn_norm(g)`` (the registry's ``gcn_norm`` preparation) on any square
    view: a :class:`~sparsegcn.Graph` in any layout or an edge shard.

    Params are ``{"layers": [{"w": [L, H, H]}, {"in": {"w": [F, H], "b":
    [H]}, "out": {"w": [H, C], "b": [C]}}]}``: the convolutions first, so
    ``decay_layers="first"`` decays them alone. Chen et al. decay the
    convolutions by 0.01 and the linear maps by 5e-4; the trainer has one
    decay value, and the registry's default is 5e-4 on all (measured best
    of the three choices it allows, see :mod:`sparsegcn.nn.registry`).
    Chen et al. train up to 1500 epochs: on Cora pass ``--epochs 1000
    --patience 0`` (the best epoch comes after 600 to 850).

    Args:
      in_features: ``F``.
      num_classes: ``C``.
      hidden: width ``H`` (64 on Cora in Chen et al.).
      num_layers: GCNII layers ``L`` (64).
      dropout_rate: dropout before every layer and the output map (0.6).
      alpha: initial-residual weight ``α`` (0.1).
      lam: ``λ`` of ``β_l = log(λ / l + 1)`` (0.5).
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.

    Returns:
      A :class:`Model`; ``embed`` is ``H^{(L)}``, ``[N, H]``.

    Shapes:
      ``apply(params, graph, x [N, F]) -> [N, C]``.

    References:
      Chen, Wei, Huang, Ding & Li, *Simple and Deep Graph Convolutional
      Networks*, ICML 2020. https://arxiv.org/abs/2007.02133
    """
    check_model_settings(
        hidden, num_layers, dropout_rate, in_features=in_features, num_classes=num_classes
    )
    _checks.check_hyperparameter("alpha", alpha)
    _checks.check_hyperparameter("lam", lam)
    betas = gcnii_betas(num_layers, lam)
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        alpha=alpha,
        lam=lam,
    )

    @jax.jit
    def init(key: jax.Array) -> dict:
        k_in, k_out, k_convs = jax.random.split(key, 3)
        convs = jax.vmap(lambda k: glorot_uniform(k, (hidden, hidden)))(
            jax.random.split(k_convs, num_layers)
        )
        dense = {
            "in": linear_params(k_in, in_features, hidden),
            "out": linear_params(k_out, hidden, num_classes),
        }
        return {"layers": [{"w": convs}, dense]}

    # Jitted so that an eager call does not trace its scan again each time (the
    # layer closure is new on every call); under an outer jit it is inlined.
    @functools.partial(jax.jit, static_argnums=(4, 5))
    def forward(params, graph, x, key, training, stop_before_last):
        convs, dense = params["layers"]
        k_in, k_convs, k_out = split_dropout_keys(key, 3, training, dropout_rate)

        def drop(h, k):
            return h if k is None else dropout(h, dropout_rate, key=k, impl=dropout_impl)

        h0 = jax.nn.relu(matmul(drop(x, k_in), dense["in"]["w"]) + dense["in"]["b"][None, :])
        layer_keys = None if k_convs is None else jax.random.split(k_convs, num_layers)

        def layer(h, step):
            w, beta, k = step
            out = gcnii_conv(w, graph, drop(h, k), h0, alpha=alpha, beta=beta)
            return jax.nn.relu(out), None

        h, _ = jax.lax.scan(layer, h0, (convs["w"], betas, layer_keys))
        if stop_before_last:
            return h
        return drop(h, k_out) @ dense["out"]["w"] + dense["out"]["b"][None, :]

    def apply(params, graph, x: Features, *, key=None, training: bool = False):
        return forward(params, graph, x, key, training, stop_before_last=False)

    def embed(params, graph, x: Features) -> jax.Array:
        return forward(params, graph, x, None, False, stop_before_last=True)

    return Model(init=init, apply=apply, embed=embed, name="gcnii", config=config)

"""Jumping-knowledge networks (Xu et al. 2018): every GCN layer's output reaches the classifier.

A stack of GCN layers whose outputs are combined per node, by
concatenation or an element-wise maximum, before one linear map to the
classes; each node picks its own effective neighbourhood range.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from sparsegcn.features import Features
from sparsegcn.nn.conv import gcn_conv
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.initializers import linear_params
from sparsegcn.nn.model import Model, check_model_settings, split_dropout_keys

JK_MODES = ("cat", "max")


def jumping_knowledge(outputs: list[jax.Array], mode: str) -> jax.Array:
    """Combines ``L`` layers' ``[N, H]`` outputs per node.

    .. math::

        \\mathrm{cat}: [h^{(1)} \\Vert \\dots \\Vert h^{(L)}] \\in \\mathbb R^{N \\times LH},
        \\qquad \\mathrm{max}: \\max_l h^{(l)} \\in \\mathbb R^{N \\times H}

    Raises:
      ValueError: ``mode`` is not one of :data:`JK_MODES`.
    """
    if mode == "cat":
        return jnp.concatenate(outputs, axis=-1)
    if mode == "max":
        return jnp.max(jnp.stack(outputs), axis=0)
    raise ValueError(f"jk mode must be one of {list(JK_MODES)}, got {mode!r}")


def jk(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 64,
    num_layers: int = 3,
    dropout_rate: float = 0.5,
    mode: str = "cat",
    dropout_impl: str = "hash",
) -> Model:
    """JK-Net over GCN layers: ``L`` convolutions, jumping knowledge, a linear classifier.

    .. math::

        h^{(l)} = \\mathrm{ReLU}\\big(\\hat A\\, \\mathrm{drop}(h^{(l-1)}) W_l + b_l\\big),
        \\qquad Y = \\mathrm{drop}\\big(\\mathrm{JK}(h^{(1)}, \\dots, h^{(L)})\\big) W + b

    ``apply`` reads ``Â = gcn_norm(g)`` (the registry's ``gcn_norm``
    preparation) on any square view: a :class:`~sparsegcn.Graph` in any
    layout or an edge shard.

    Args:
      in_features: ``F``.
      num_classes: ``C``.
      hidden: width ``H`` of every GCN layer (64).
      num_layers: GCN layers ``L`` (3).
      dropout_rate: dropout before every layer and the classifier (0.5).
      mode: ``"cat"`` (``[N, L H]``) or ``"max"`` (``[N, H]``).
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.

    Returns:
      A :class:`Model`. Params: ``{"layers": [{"w", "b"} per GCN layer,
      {"w": [L H or H, C], "b": [C]}]}``; ``embed`` is the combined
      ``JK(...)`` rows.

    Shapes:
      ``apply(params, graph, x [N, F]) -> [N, C]``.

    References:
      Xu, Li, Tian, Sonobe, Kawarabayashi & Jegelka, *Representation
      Learning on Graphs with Jumping Knowledge Networks*, ICML 2018.
      https://arxiv.org/abs/1806.03536
    """
    check_model_settings(hidden, num_layers, dropout_rate)
    if mode not in JK_MODES:
        raise ValueError(f"jk mode must be one of {list(JK_MODES)}, got {mode!r}")
    combined = hidden * num_layers if mode == "cat" else hidden
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        mode=mode,
    )

    def init(key: jax.Array) -> dict:
        keys = jax.random.split(key, num_layers + 1)
        fans = [in_features] + [hidden] * num_layers
        convs = [linear_params(k, a, hidden) for k, a in zip(keys[:-1], fans, strict=False)]
        return {"layers": [*convs, linear_params(keys[-1], combined, num_classes)]}

    def forward(params, graph, x, key, training, stop_before_last):
        *convs, out = params["layers"]
        keys = split_dropout_keys(key, num_layers + 1, training, dropout_rate)

        def drop(h, k):
            return h if k is None else dropout(h, dropout_rate, key=k, impl=dropout_impl)

        h, outputs = x, []
        for layer, k in zip(convs, keys[:-1], strict=True):
            h = jax.nn.relu(gcn_conv(layer, graph, drop(h, k)))
            outputs.append(h)
        rows = jumping_knowledge(outputs, mode)
        if stop_before_last:
            return rows
        return drop(rows, keys[-1]) @ out["w"] + out["b"][None, :]

    def apply(params, graph, x: Features, *, key=None, training: bool = False):
        return forward(params, graph, x, key, training, stop_before_last=False)

    def embed(params, graph, x: Features) -> jax.Array:
        return forward(params, graph, x, None, False, stop_before_last=True)

    return Model(init=init, apply=apply, embed=embed, name="jk", config=config)

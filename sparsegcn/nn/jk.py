"""Jumping-knowledge networks (Xu et al. 2018): every layer's output reaches the classifier.

A stack of graph layers whose outputs are combined per node, by
concatenation or an element-wise maximum, before one linear map to the
classes; each node picks its own effective neighbourhood range.
:func:`jk_net` builds it over any layer written for
:func:`~sparsegcn.nn.stack.run_layers`: the registered ``jk`` model (GCN
layers) and the ``jk`` option of ``gcn`` and ``sage`` are all this one
builder.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from sparsegcn.features import Features
from sparsegcn.nn.conv import gcn_project, gcn_propagate, transform_first
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.initializers import linear_params
from sparsegcn.nn.model import Model, check_model_settings, split_dropout_keys
from sparsegcn.nn.stack import layer_outputs

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


def check_jk(jk: str, residual: bool) -> None:
    """The ``jk`` setting of ``gcn`` and ``sage``: ``"none"``, ``"cat"`` or ``"max"``.

    Raises:
      ValueError: another value, or ``residual`` with jumping knowledge
        (which combines the layers' outputs itself).
    """
    if jk not in ("none", *JK_MODES):
        raise ValueError(f"jk must be one of {['none', *JK_MODES]}, got {jk!r}")
    if residual and jk != "none":
        raise ValueError(f"residual=True with jk={jk!r}: jumping knowledge has no skip connections")


def jk_net(
    name: str,
    config: dict,
    *,
    init_layer: Callable,
    project: Callable,
    propagate: Callable,
    in_features: int,
    num_classes: int,
    hidden: int,
    num_layers: int,
    dropout_rate: float,
    mode: str,
    dropout_impl: str = "hash",
    gather_first: bool | None = None,
) -> Model:
    """JK-Net over ``L`` layers of any kind: layers, jumping knowledge, a linear classifier.

    .. math::

        h^{(l)} = \\mathrm{ReLU}\\big(\\mathrm{layer}_l(\\mathrm{drop}(h^{(l-1)}))\\big),
        \\qquad Y = \\mathrm{drop}\\big(\\mathrm{JK}(h^{(1)}, \\dots, h^{(L)})\\big) W + b

    Every layer is ``[F_l, hidden]``; they run through
    :func:`~sparsegcn.nn.stack.layer_outputs`, so the model takes every view
    the layer does (a :class:`~sparsegcn.Graph` in any layout, an edge
    shard, a :class:`~sparsegcn.sampling.ChunkedGraph`, and a
    :class:`~sparsegcn.sampling.NeighborSample` for sampled layers, where
    ``apply`` returns the seeds' ``[B, C]``).

    Args:
      name, config: the :class:`Model`'s.
      init_layer: ``init_layer(key, fan_in, fan_out) -> layer params``.
      project, propagate: the layer, as :func:`~sparsegcn.nn.stack.run_layers` takes it.
      in_features, num_classes, hidden, num_layers: ``F``, ``C``, ``H``, ``L``.
      dropout_rate: dropout before every layer and the classifier.
      mode: ``"cat"`` (``[N, L H]``) or ``"max"`` (``[N, H]``).
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.
      gather_first: see :func:`~sparsegcn.nn.stack.run_layers`.

    Returns:
      A :class:`Model`. Params: ``{"layers": [layer params per layer,
      {"w": [L H or H, C], "b": [C]}]}``; ``embed`` is the combined
      ``JK(...)`` rows.

    Raises:
      ValueError: ``mode`` is not one of :data:`JK_MODES`.
    """
    check_model_settings(hidden, num_layers, dropout_rate)
    if mode not in JK_MODES:
        raise ValueError(f"jk mode must be one of {list(JK_MODES)}, got {mode!r}")
    combined = hidden * num_layers if mode == "cat" else hidden

    def init(key: jax.Array) -> dict:
        keys = jax.random.split(key, num_layers + 1)
        fans = [in_features] + [hidden] * (num_layers - 1)
        layers = [init_layer(k, a, hidden) for k, a in zip(keys[:-1], fans, strict=True)]
        return {"layers": [*layers, linear_params(keys[-1], combined, num_classes)]}

    def forward(params, graph, x, key, training, stop_before_last):
        *layers, out = params["layers"]
        outputs = layer_outputs(
            layers,
            graph,
            x,
            project=project,
            propagate=propagate,
            key=key,
            training=training,
            dropout_rate=dropout_rate,
            dropout_impl=dropout_impl,
            gather_first=gather_first,
        )
        rows = jumping_knowledge(outputs, mode)
        if stop_before_last:
            return rows
        out_key = None if key is None else jax.random.fold_in(key, num_layers + 1)
        (k,) = split_dropout_keys(out_key, 1, training, dropout_rate)
        if k is not None:
            rows = dropout(rows, dropout_rate, key=k, impl=dropout_impl)
        return rows @ out["w"] + out["b"][None, :]

    def apply(params, graph, x: Features, *, key=None, training: bool = False):
        return forward(params, graph, x, key, training, stop_before_last=False)

    def embed(params, graph, x: Features) -> jax.Array:
        return forward(params, graph, x, None, False, stop_before_last=True)

    return Model(init=init, apply=apply, embed=embed, name=name, config=config)


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
    layout or an edge shard. The same model as ``gcn(..., jk=mode)``
    (:func:`jk_net` over GCN layers), registered under its own name.

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
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        mode=mode,
    )
    return jk_net(
        "jk",
        config,
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        mode=mode,
        dropout_impl=dropout_impl,
        **gcn_layer(),
    )


def gcn_layer(backend=None) -> dict:
    """A GCN layer as :func:`jk_net` and :func:`~sparsegcn.nn.stack.run_layers`
    take it: ``init_layer``, ``project``, ``propagate``.

    ``project`` returns ``{"xw": x W}`` or ``{"x": x}``, whichever
    :func:`~sparsegcn.nn.conv.transform_first` finds cheaper on the view, so
    ``propagate`` knows which it got even when ``F = F'``.
    """

    def project(layer, h, i, view):
        first = transform_first(*layer["w"].shape, h, view)
        return {"xw" if first else "x": gcn_project(layer, h, view)}

    def propagate(layer, view, z, key, i):
        ((name, rows),) = z.items()
        return gcn_propagate(layer, view, rows, backend=backend, projected=name == "xw")

    return dict(init_layer=linear_params, project=project, propagate=propagate)

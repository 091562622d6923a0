"""The GCN model of Kipf & Welling as an ``init``/``apply`` pair."""

from __future__ import annotations

import jax

from sparsegcn.backends import Backend, get_backend
from sparsegcn.nn.jk import check_jk, gcn_layer, jk_net
from sparsegcn.nn.model import Model, check_model_settings, init_linear_stack, layer_sizes
from sparsegcn.nn.stack import layered_model


def gcn(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 16,
    num_layers: int = 2,
    dropout_rate: float = 0.5,
    residual: bool = False,
    backend: str | Backend | None = None,
    jk: str = "none",
    dropout_impl: str = "hash",
) -> Model:
    """A GCN: dropout, graph convolution and ReLU per layer, logits last.

    .. math::

        H^{(l+1)} = \\sigma\\big(\\hat A \\, \\mathrm{drop}(H^{(l)}) W^{(l)} + b^{(l)}\\big)
        \\; [+ H^{(l)} \\text{ if residual and shapes match}]

    with ``σ = ReLU`` on hidden layers and the identity on the last. The
    graph passed to ``apply`` must be normalized: ``gcn_norm(graph)``.

    Args:
      in_features: ``F``, input feature width.
      num_classes: ``C``, output width.
      hidden: hidden width ``H`` (16 in Kipf & Welling).
      num_layers: number of graph convolutions (2 in Kipf & Welling).
      dropout_rate: dropout before every convolution (0.5).
      residual: add skip connections between hidden layers of equal width.
      backend: ``None`` (default): the graph's own layout (prepare it once
        with :func:`~sparsegcn.backends.as_layout`); a backend name or
        instance converts the graph on every call.
      jk: ``"none"`` (default), or ``"cat"``/``"max"`` for JK-Net
        (:func:`~sparsegcn.nn.jk.jk_net`): ``num_layers`` convolutions of
        width ``hidden``, all ReLU, their outputs combined per node, then a
        linear classifier (the registered ``jk`` model is this with ``"cat"``
        and its own defaults). Not with ``residual``.
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.

    Returns:
      A :class:`Model`. Params: ``{"layers": [{"w": [F_l, F_l+1], "b": [F_l+1]}, ...]}``
      (with ``jk``: :func:`~sparsegcn.nn.jk.jk_net`'s).

    Shapes:
      ``apply(params, graph, x [N, F]) -> [N, C]``; ``embed(...) -> [N, H]``.

    References:
      Kipf & Welling, *Semi-Supervised Classification with Graph
      Convolutional Networks*, ICLR 2017. https://arxiv.org/abs/1609.02907
    """
    check_model_settings(
        hidden,
        num_layers,
        dropout_rate,
        in_features=in_features,
        num_classes=num_classes,
        flags={"residual": residual},
    )
    sizes = layer_sizes(in_features, hidden, num_classes, num_layers)
    resolved = None if backend is None else get_backend(backend)
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        residual=residual,
        backend=None if resolved is None else resolved.name,
    )
    if jk != "none":
        check_jk(jk, residual)
        return jk_net(
            "gcn",
            dict(config, jk=jk),
            in_features=in_features,
            num_classes=num_classes,
            hidden=hidden,
            num_layers=num_layers,
            dropout_rate=dropout_rate,
            mode=jk,
            dropout_impl=dropout_impl,
            **gcn_layer(resolved),
        )

    def init(key: jax.Array) -> dict:
        return init_linear_stack(key, sizes)

    layer = gcn_layer(resolved)
    return layered_model(
        init,
        "gcn",
        config,
        project=layer["project"],
        propagate=layer["propagate"],
        dropout_rate=dropout_rate,
        dropout_impl=dropout_impl,
        residual=residual,
    )

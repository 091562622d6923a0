"""APPNP (Gasteiger et al. 2019): predict with an MLP, then propagate by personalized PageRank.

The MLP maps every node to class scores first; ``K`` steps of
personalized-PageRank power iteration then smooth them over the graph.
The propagation has no parameters and runs at the class width ``C``
(``[N, 7]`` on Cora), never at the feature or hidden width.
"""

from __future__ import annotations

import jax

from sparsegcn import _checks
from sparsegcn.features import Features, matmul
from sparsegcn.nn.model import Model, check_model_settings, init_linear_stack, layer_sizes
from sparsegcn.nn.stack import run_layers


def appnp_propagate(graph, z: jax.Array, *, hops: int = 10, alpha: float = 0.1) -> jax.Array:
    """``K`` steps of personalized PageRank from ``z`` on any square view.

    .. math::

        H^{(0)} = Z, \\qquad
        H^{(k+1)} = (1 - \\alpha)\\, \\hat A H^{(k)} + \\alpha Z

    Args:
      graph: the normalized adjacency ``Â = gcn_norm(g)``: a
        :class:`~sparsegcn.Graph` in any layout or an edge shard (rows are
        the view's own; sources are read through ``graph.sources``).
      z: ``[N, C]`` the predictions to propagate.
      hops: ``K >= 1``.
      alpha: teleport probability ``α`` in ``[0, 1]``.

    Returns:
      ``[N, C]``, ``H^{(K)}``.

    References:
      Gasteiger, Bojchevski & Günnemann, *Predict then Propagate: Graph
      Neural Networks meet Personalized PageRank*, ICLR 2019.
      https://arxiv.org/abs/1810.05997
    """
    keep = 1.0 - alpha
    h = z
    for _ in range(hops):
        h = keep * graph.product(graph.sources(h)) + alpha * graph.targets(z)
    return h


def appnp(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 64,
    num_layers: int = 2,
    dropout_rate: float = 0.5,
    hops: int = 10,
    alpha: float = 0.1,
    dropout_impl: str = "hash",
) -> Model:
    """APPNP: an MLP's logits propagated by ``K`` personalized-PageRank steps.

    .. math::

        Z = \\mathrm{MLP}(X), \\qquad
        Y = \\mathrm{APPNP}_{K, \\alpha}(\\hat A, Z)

    The MLP has ``num_layers`` linear layers (dropout before each, ReLU
    between); :func:`appnp_propagate` follows. ``apply`` reads
    ``Â = gcn_norm(g)`` (the registry's ``gcn_norm`` preparation) on any
    square view: a :class:`~sparsegcn.Graph` in any layout or an edge shard.

    Args:
      in_features: ``F``.
      num_classes: ``C``.
      hidden: MLP width (64 in Gasteiger et al.).
      num_layers: linear layers of the MLP (2).
      dropout_rate: dropout before every linear layer (0.5).
      hops: propagation steps ``K`` (10).
      alpha: teleport probability ``α`` (0.1).
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.

    Returns:
      A :class:`Model`. Params: ``{"layers": [{"w", "b"}, ...]}`` (the MLP);
      ``embed`` is the MLP's last hidden layer, ``[N, hidden]``.

    Shapes:
      ``apply(params, graph, x [N, F]) -> [N, C]``.

    References:
      Gasteiger, Bojchevski & Günnemann, *Predict then Propagate: Graph
      Neural Networks meet Personalized PageRank*, ICLR 2019.
      https://arxiv.org/abs/1810.05997
    """
    check_model_settings(
        hidden, num_layers, dropout_rate, in_features=in_features, num_classes=num_classes
    )
    _checks.check_static_int("hops", hops, minimum=1)
    _checks.check_hyperparameter("alpha", alpha)
    sizes = layer_sizes(in_features, hidden, num_classes, num_layers)
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        hops=hops,
        alpha=alpha,
    )

    def init(key: jax.Array) -> dict:
        return init_linear_stack(key, sizes)

    def mlp(params, x, key, training, stop_before_last):
        return run_layers(
            params["layers"],
            None,  # the MLP is row-wise; the propagation follows it
            x,
            project=lambda layer, h, i, view: matmul(h, layer["w"]),
            propagate=lambda layer, view, z, key, i: z + layer["b"][None, :],
            key=key,
            training=training,
            dropout_rate=dropout_rate,
            dropout_impl=dropout_impl,
            stop_before_last=stop_before_last,
        )

    def apply(params, graph, x: Features, *, key=None, training: bool = False):
        z = mlp(params, x, key, training, stop_before_last=False)
        return appnp_propagate(graph, z, hops=hops, alpha=alpha)

    def embed(params, graph, x: Features) -> jax.Array:
        return mlp(params, x, None, False, stop_before_last=True)

    return Model(init=init, apply=apply, embed=embed, name="appnp", config=config)

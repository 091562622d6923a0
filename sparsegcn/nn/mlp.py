"""A multi-layer perceptron that ignores the graph: the baseline GNNs must beat."""

from __future__ import annotations

import jax

from sparsegcn.features import Features, matmul
from sparsegcn.nn.model import Model, check_model_settings, init_linear_stack, layer_sizes
from sparsegcn.nn.stack import run_layers


def mlp(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 64,
    num_layers: int = 2,
    dropout_rate: float = 0.5,
    dropout_impl: str = "hash",
) -> Model:
    """``H^{(l+1)} = σ(drop(H^{(l)}) W^{(l)} + b^{(l)})``, node by node.

    Same ``apply(params, graph, x, *, key, training)`` signature as the
    GNNs so trainers treat it alike; ``graph`` is ignored.

    Shapes:
      ``apply(params, graph, x [N, F]) -> [N, C]``.
    """
    check_model_settings(
        hidden, num_layers, dropout_rate, in_features=in_features, num_classes=num_classes
    )
    sizes = layer_sizes(in_features, hidden, num_classes, num_layers)
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
    )

    def init(key: jax.Array) -> dict:
        return init_linear_stack(key, sizes)

    def forward(params, x: Features, key, training: bool, stop_before_last: bool):
        return run_layers(
            params["layers"],
            None,  # no graph: every layer is row-wise
            x,
            project=lambda layer, h, i, view: matmul(h, layer["w"]),
            propagate=lambda layer, view, z, key, i: z + layer["b"][None, :],
            key=key,
            training=training,
            dropout_rate=dropout_rate,
            dropout_impl=dropout_impl,
            stop_before_last=stop_before_last,
        )

    def apply(params, graph, x, *, key=None, training=False):
        del graph
        return forward(params, x, key, training, stop_before_last=False)

    def embed(params, graph, x):
        del graph
        return forward(params, x, None, False, stop_before_last=True)

    return Model(init=init, apply=apply, embed=embed, name="mlp", config=config)

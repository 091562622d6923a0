"""The model type: a named pair of pure functions over a params pytree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from sparsegcn._checks import check_flag, check_hyperparameters
from sparsegcn.nn.initializers import linear_params

Params = Any  # a pytree of jax.Array


class Model(NamedTuple):
    """A model as pure functions, in the style of ``optax.GradientTransformation``.

    Attributes:
      init: ``init(key) -> params``, a pytree of arrays.
      apply: ``apply(params, graph, x, *, key=None, training=False) -> logits``
        with ``x`` ``[N, F]`` (dense or :class:`~sparsegcn.SparseFeatures`)
        and logits ``[N, C]``. ``key`` is required when ``training`` and the
        model uses dropout. GAT, GATv2 and GIN built with ``edge_dim = D``
        also take ``edge_features [E, D]`` (keyword, required), in the
        graph's own edge order.
      embed: ``embed(params, graph, x) -> [N, H]``, the input to the last
        layer (inference mode): the node embeddings.
      name: short name, used in reports.
      config: the hyperparameters the model was built with.
    """

    init: Callable[[jax.Array], Params]
    apply: Callable[..., jax.Array]
    embed: Callable[..., jax.Array]
    name: str
    config: dict


def split_dropout_keys(key: jax.Array | None, count: int, training: bool, rate: float):
    """One key per dropout site; refuses to train with dropout but no key."""
    if not training or rate == 0.0:
        return [None] * count
    if key is None:
        raise ValueError("training with dropout needs an explicit PRNG key: apply(..., key=key)")
    return list(jax.random.split(key, count))


def check_model_settings(
    hidden: int,
    num_layers: int,
    dropout_rate: float,
    *,
    in_features: int | None = None,
    num_classes: int | None = None,
    flags: dict | None = None,
) -> None:
    """Every builder's shared settings, through the table the CLI and trainers use
    (:data:`sparsegcn._checks.HYPERPARAMETERS`): refused with the value named, before
    anything is built (``in_features`` and ``num_classes``, where a builder passes
    them, too: ``gcn(-1, 2)`` failed only in ``init``, ``gcn(4, 0)`` gave ``[N, 0]``
    logits); ``flags``, ``{name: value}`` of the builder's on/off settings, must be
    bools (a string such as ``"no"`` would switch them on)."""
    for name, value in (flags or {}).items():
        check_flag(name, value)
    widths = {"in_features": in_features, "num_classes": num_classes}
    check_hyperparameters(
        {**{k: v for k, v in widths.items() if v is not None}, "hidden": hidden,
         "layers": num_layers, "dropout": dropout_rate},
        labels={"layers": "num_layers", "dropout": "dropout_rate"},
    )  # fmt: skip


def check_unweighted(graph, what: str) -> None:
    """Refuses a graph that carries edge weights: GIN sums its neighbours unweighted
    (PyG's ``GINConv`` and ``GINEConv`` ignore weights), and the sum would scale
    each message by its weight instead. Static (a pytree's structure), so under
    ``jit`` too.

    Raises:
      ValueError: naming ``what`` and the fix.
    """
    if getattr(graph, "weights", None) is not None:
        raise ValueError(
            f"{what} sums neighbours unweighted (Xu et al.; PyG's GINConv ignores edge "
            f"weights), but this graph has weights, which would scale its messages; drop "
            f"them first: graph.replace(weights=None) (the registry's 'unweighted' "
            f"preparation)"
        )


def check_edge_features(params: dict, graph, edge_features, where: str) -> None:
    """Refuses edge features a layer cannot read, before tracing, naming the shapes.

    A layer reads ``edge_features [E, D]`` when its ``params`` hold an edge
    map ``"w_e" [D, ...]``; ``E`` is the view's edge count, in its own edge
    order.

    Raises:
      ValueError: features without an edge map, an edge map without
        features, or features that are not ``[E, D]``.
    """
    if "w_e" not in params:
        if edge_features is not None:
            raise ValueError(
                f"{where} got edge_features but its params have no edge map (edge_dim)"
            )
        return
    edge_dim = params["w_e"].shape[0]
    if edge_features is None:
        raise ValueError(f"{where} has an edge map (edge_dim={edge_dim}): pass edge_features")
    num_edges = graph.senders.shape[0]
    if jnp.shape(edge_features) != (num_edges, edge_dim):
        raise ValueError(
            f"edge_features must be [E, D] = [{num_edges}, {edge_dim}], "
            f"got {jnp.shape(edge_features)}"
        )


def layer_sizes(in_features: int, hidden: int, num_classes: int, num_layers: int) -> list[int]:
    """``[F, H, ..., H, C]`` with ``num_layers`` transitions."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    return [in_features] + [hidden] * (num_layers - 1) + [num_classes]


def init_linear_stack(key: jax.Array, sizes: list[int]) -> dict:
    """``{"layers": [{"w", "b"}, ...]}`` with Glorot weights for consecutive ``sizes``."""
    keys = jax.random.split(key, len(sizes) - 1)
    return {
        "layers": [
            linear_params(k, a, b) for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)
        ]
    }

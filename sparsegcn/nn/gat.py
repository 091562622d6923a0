"""Graph attention: GAT (Veličković et al.) and GATv2 (Brody et al.).

Both are three calls of the message-passing API: per-edge scores, a
softmax over each target's incoming edges, and a weighted sum that takes
the view's fused product (the packed CSR/ELL kernels on a packed graph;
no ``[E, F]`` buffer there). GAT's scores are additive, so they gather
``E H`` scalars; GATv2 applies its nonlinearity before the attention
vector, which needs the ``[E, H, F']`` sum of both sides' rows.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from sparsegcn import _checks
from sparsegcn.features import Features, matmul
from sparsegcn.message_passing import edge_scores, edge_softmax, message_passing
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.initializers import glorot_uniform
from sparsegcn.nn.model import Model, check_edge_features, check_model_settings
from sparsegcn.nn.stack import layered_model


def gat_project(params: dict, x: Features) -> jax.Array:
    """``[N, F] -> [N, H, F']``: every head's projection (and GATv2's target side).

    GAT: ``z = x W`` (one weight for both sides). GATv2: ``[x W_l + b_l,
    x W_r + b_r]`` stacked on a leading axis of 2 after the node axis
    (``[N, 2, H, F']``), the source and target projections.
    """
    heads, width = params["att"].shape if "att" in params else params["att_src"].shape
    if "w_l" in params:
        z_l = matmul(x, params["w_l"]) + params["b_l"][None, :]
        z_r = matmul(x, params["w_r"]) + params["b_r"][None, :]
        return jnp.stack([z_l, z_r], axis=1).reshape(-1, 2, heads, width)
    return matmul(x, params["w"]).reshape(-1, heads, width)


def gat_conv(
    params: dict,
    graph,
    z: jax.Array,
    *,
    concat: bool = True,
    negative_slope: float = 0.2,
    attention_dropout: float = 0.0,
    value_dropout: float = 0.0,
    key: jax.Array | None = None,
    edge_features: jax.Array | None = None,
) -> jax.Array:
    """One GAT or GATv2 layer on any view, from the projected rows ``z``.

    GAT:

    .. math::

        e_{ji} = \\mathrm{LeakyReLU}(a_s^\\top W x_j + a_d^\\top W x_i), \\quad
        \\alpha_{ji} = \\mathrm{softmax}_{j \\in N(i)}(e_{ji}), \\quad
        h_i = \\Big\\Vert_{k=1}^{H} \\sum_{j} \\alpha^k_{ji} W^k x_j + b

    GATv2 moves the nonlinearity inside:
    ``e_ji = a^T LeakyReLU(W_l x_j + W_r x_i)``, messages ``W_l x_j``.
    Heads are concatenated, or averaged when ``concat=False`` (the output
    layer). Self-loops are the graph's: GAT's preparation adds one per node.

    With edge features ``e_ji`` (params from ``gat_layer_params(...,
    edge_dim=D)``; PyG's ``GATConv(edge_dim=D)``), each score gains an edge
    term:

    .. math::

        e_{ji} = \\mathrm{LeakyReLU}(a_s^\\top W x_j + a_d^\\top W x_i
                 + a_e^\\top W_e e_{ji})

    computed as ``e_ji (W_e a_e)``: ``E H`` scalars, no ``[E, H F']``
    buffer. GATv2 (``GATv2Conv(edge_dim=D)``) adds ``W_e e_ji`` inside the
    nonlinearity: ``a^T LeakyReLU(W_l x_j + W_r x_i + W_e e_ji)``.

    Args:
      params: GAT ``{"w": [F, H F'], "att_src": [H, F'], "att_dst": [H, F'],
        "b": [H F'] or [F']}``; GATv2 ``{"w_l", "b_l", "w_r", "b_r": ...,
        "att": [H, F'], "b"}``.
      graph: a view (see :mod:`sparsegcn.views`).
      z: :func:`gat_project` of the layer's input rows.
      concat: concatenate heads (``[num_dst, H F']``) or average them
        (``[num_dst, F']``).
      negative_slope: of the LeakyReLU (0.2 in both papers).
      attention_dropout: drop probability of each coefficient ``α`` (0.6 in
        Veličković et al.); needs ``key``.
      value_dropout: drop probability of the projected rows ``W x_j`` that
        are summed (the authors' code applies its input dropout there too;
        PyG's ``GATConv`` does not); needs ``key``.
      key: PRNG key for both dropouts, ``None`` for none.
      edge_features: ``[E, D]``, one row per edge of ``graph`` in its own
        edge order, when ``params`` has an edge map (``w_e``); else ``None``.

    Returns:
      ``[num_dst, H F']`` or ``[num_dst, F']``.

    Raises:
      ValueError: edge features without an edge map in ``params`` or the
        reverse, or ``edge_features`` not ``[E, D]``.

    References:
      Veličković et al., *Graph Attention Networks*, ICLR 2018.
      https://arxiv.org/abs/1710.10903

      Brody, Alon & Yahav, *How Attentive are Graph Attention Networks?*,
      ICLR 2022. https://arxiv.org/abs/2105.14491
    """
    check_edge_features(params, graph, edge_features, "gat_conv")
    heads, width = params["att"].shape if "att" in params else params["att_src"].shape
    if "att" in params:  # GATv2
        z_src = graph.sources(z[:, 0])
        z_dst = graph.targets(z[:, 1])
        pair = edge_scores(graph, z_src, z_dst)
        if edge_features is not None:
            pair = pair + (edge_features @ params["w_e"]).reshape(-1, heads, width)
        pair = jax.nn.leaky_relu(pair, negative_slope)
        scores = jnp.sum(pair * params["att"][None], axis=-1)
    else:
        z_src, z_dst = graph.sources(z), graph.targets(z)
        score_src = jnp.sum(z_src * params["att_src"][None], axis=-1)
        score_dst = jnp.sum(z_dst * params["att_dst"][None], axis=-1)
        scores = edge_scores(graph, score_src, score_dst)
        if edge_features is not None:
            w_e = params["w_e"].reshape(-1, heads, width)
            scores = scores + edge_features @ jnp.sum(w_e * params["att_edge"][None], axis=-1)
        scores = jax.nn.leaky_relu(scores, negative_slope)
    alpha = edge_softmax(graph, scores)
    if key is not None:
        attention_key, value_key = jax.random.split(key)
        if attention_dropout > 0.0:
            alpha = dropout(alpha, attention_dropout, key=attention_key)
        if value_dropout > 0.0:
            z_src = dropout(z_src, value_dropout, key=value_key)
    out = message_passing(graph, z_src, edge_weight=alpha)
    # not -1: a graph may have 0 nodes
    out = out.reshape(out.shape[0], math.prod(out.shape[1:])) if concat else jnp.mean(out, axis=1)
    return out + params["b"][None, :]


def gat_layer_params(
    key: jax.Array,
    fan_in: int,
    heads: int,
    width: int,
    *,
    concat: bool,
    v2: bool,
    edge_dim: int | None = None,
) -> dict:
    """Glorot-initialized parameters of one :func:`gat_conv` layer (biases zero).

    With ``edge_dim = D`` the layer reads edge features: it gains
    ``"w_e": [D, H F']`` (no bias, as PyG's ``lin_edge``) and, for GAT,
    ``"att_edge": [H, F']``.
    """
    keys = jax.random.split(key, 3)
    out = heads * width if concat else width
    if v2:
        params = {
            "w_l": glorot_uniform(keys[0], (fan_in, heads * width)),
            "b_l": jnp.zeros((heads * width,), jnp.float32),
            "w_r": glorot_uniform(keys[1], (fan_in, heads * width)),
            "b_r": jnp.zeros((heads * width,), jnp.float32),
            "att": glorot_uniform(keys[2], (heads, width)),
            "b": jnp.zeros((out,), jnp.float32),
        }
    else:
        att = glorot_uniform(keys[1], (2 * heads, width))
        params = {
            "w": glorot_uniform(keys[0], (fan_in, heads * width)),
            "att_src": att[:heads],
            "att_dst": att[heads:],
            "b": jnp.zeros((out,), jnp.float32),
        }
    if edge_dim is not None:
        _checks.check_static_int("edge_dim", edge_dim, minimum=1)
        # Own keys, so the other weights stay those of the same seed without edges.
        edge_keys = jax.random.split(jax.random.fold_in(key, 3), 2)
        params["w_e"] = glorot_uniform(edge_keys[0], (edge_dim, heads * width))
        if not v2:
            params["att_edge"] = glorot_uniform(edge_keys[1], (heads, width))
    return params


def gat(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 8,
    heads: int = 8,
    output_heads: int = 1,
    num_layers: int = 2,
    dropout_rate: float = 0.6,
    attention_dropout: float | None = None,
    value_dropout: float = 0.0,
    negative_slope: float = 0.2,
    v2: bool = False,
    edge_dim: int | None = None,
    dropout_impl: str = "hash",
) -> Model:
    """GAT (or GATv2): dropout, attention layer and ELU per layer; averaged heads last.

    .. math::

        H^{(l+1)} = \\mathrm{ELU}\\big(\\mathrm{GAT}(\\mathrm{drop}(H^{(l)}))\\big)

    Hidden layers concatenate ``heads`` heads of ``hidden`` features; the
    last layer averages ``output_heads`` heads of ``num_classes``. The graph
    should carry one self-loop per node (the registry's preparation for
    ``gat`` adds them: ``add_self_loops(remove_self_loops(g))``). It is not
    checked: without them a node attends to its in-neighbours alone, and one
    with none outputs the bias (PyG's ``GATConv(add_self_loops=False)``).

    ``apply(params, graph, x, *, key, training)`` takes any graph view: a
    :class:`~sparsegcn.Graph` in any layout (``[N, C]``), a
    :class:`~sparsegcn.sampling.ChunkedGraph` (``[N, C]``, layer by layer in
    chunks) or a :class:`~sparsegcn.sampling.NeighborSample` (``[B, C]`` for
    its seeds; each target attends to its sampled neighbours, its own
    self-loop among them, sampled from the prepared graph).

    With ``edge_dim = D`` every layer scores its edges with their features
    too (see :func:`gat_conv`) and ``apply(..., edge_features)`` takes
    ``[E, D]`` rows in the prepared graph's own edge order (its self-loops
    included: give them features, PyG fills them with the mean of each
    node's incoming ones), on a full :class:`~sparsegcn.Graph` only.

    Args:
      in_features: ``F``.
      num_classes: ``C``.
      hidden: features per head ``F'`` (8 in Veličković et al.).
      heads: heads of the hidden layers (8).
      output_heads: heads of the output layer, averaged (1 on Cora).
      num_layers: attention layers (2).
      dropout_rate: dropout of every layer's input (0.6).
      attention_dropout: dropout of the attention coefficients (default:
        ``dropout_rate``).
      value_dropout: dropout of the projected rows that are summed (see
        :func:`gat_conv`; 0 as in PyG).
      negative_slope: the LeakyReLU's (0.2).
      v2: GATv2's scoring (Brody et al.) instead of GAT's.
      edge_dim: ``D``, the width of per-edge features; ``None`` (default)
        for none.
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.

    Returns:
      A :class:`Model`. Params: ``{"layers": [gat_conv params, ...]}``.

    Shapes:
      ``apply(params, graph, x [N, F]) -> [N, C]``; ``embed -> [N, H F']``.

    References:
      Veličković et al., *Graph Attention Networks*, ICLR 2018.
      https://arxiv.org/abs/1710.10903

      Brody, Alon & Yahav, *How Attentive are Graph Attention Networks?*,
      ICLR 2022. https://arxiv.org/abs/2105.14491
    """
    check_model_settings(
        hidden,
        num_layers,
        dropout_rate,
        in_features=in_features,
        num_classes=num_classes,
        flags={"v2": v2},
    )
    for name, value in (("heads", heads), ("output_heads", output_heads)):
        _checks.check_static_int(name, value, minimum=1)
    attention_dropout = dropout_rate if attention_dropout is None else attention_dropout
    for name, rate in (("attention_dropout", attention_dropout), ("value_dropout", value_dropout)):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {rate}")
    shapes = []  # (fan_in, heads, width, concat) per layer
    fan_in = in_features
    for i in range(num_layers):
        last = i == num_layers - 1
        h, w = (output_heads, num_classes) if last else (heads, hidden)
        shapes.append((fan_in, h, w, not last))
        fan_in = h * w
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        heads=heads,
        output_heads=output_heads,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        attention_dropout=attention_dropout,
        value_dropout=value_dropout,
        negative_slope=negative_slope,
        v2=v2,
    )
    if edge_dim is not None:
        _checks.check_static_int("edge_dim", edge_dim, minimum=1)
        config["edge_dim"] = edge_dim

    @jax.jit
    def init(key: jax.Array) -> dict:
        keys = jax.random.split(key, num_layers)
        return {
            "layers": [
                gat_layer_params(k, f, h, w, concat=c, v2=v2, edge_dim=edge_dim)
                for k, (f, h, w, c) in zip(keys, shapes, strict=True)
            ]
        }

    def project(layer, h, i, view):
        return gat_project(layer, h)

    def propagate(layer, view, z, key, i, edge_features=None):
        return gat_conv(
            layer,
            view,
            z,
            concat=shapes[i][3],
            negative_slope=negative_slope,
            attention_dropout=attention_dropout,
            value_dropout=value_dropout,
            key=key,
            edge_features=edge_features,
        )

    return layered_model(
        init,
        "gatv2" if v2 else "gat",
        config,
        edge_dim=edge_dim,
        project=project,
        propagate=propagate,
        dropout_rate=dropout_rate,
        dropout_impl=dropout_impl,
        activation=jax.nn.elu,
    )


def gatv2(in_features: int, num_classes: int, **kwargs) -> Model:
    """GATv2 (Brody et al.): :func:`gat` with ``v2=True``; same arguments."""
    return gat(in_features, num_classes, v2=True, **kwargs)

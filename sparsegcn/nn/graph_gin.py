"""GIN for graph classification, as Xu et al. ran it: a readout of every layer.

Layer ``k`` updates every node with an MLP (two linear maps, batch norm and
ReLU between them) of its own row and the sum of its neighbours', then
batch norm and ReLU; each layer's representation, the input's included, is
summed (or averaged, or maxed) per graph and mapped to class scores; the
scores of all layers add up:

.. math::

    h_i^{(k)} = \\mathrm{ReLU}\\Big(\\mathrm{BN}\\Big(\\mathrm{MLP}^{(k)}\\big((1 + \\varepsilon^{(k)})
        h_i^{(k-1)} + \\textstyle\\sum_{j \\to i} h_j^{(k-1)}\\big)\\Big)\\Big), \\qquad
    s_g = \\sum_{k=0}^{K} \\mathrm{drop}\\Big(W^{(k)} \\textstyle\\bigoplus_{i \\in g}
        h_i^{(k)} + b^{(k)}\\Big)

GIN-0 fixes ``ε = 0``; GIN-ε learns it. ``num_layers`` counts the input,
as the paper does (5: the input and four GIN layers).

Batch norm is masked: its batch statistics are taken over the real nodes
of a padded batch only, so padding changes no real output, and evaluation
uses running averages (PyTorch's momentum 0.1), kept in a ``stats`` pytree
beside the parameters. The linear maps that feed a batch norm have no bias
(here and in :func:`~sparsegcn.nn.graph_ogb.graph_ogb`): the norm subtracts
it again, and its shift takes its place. Xu et al.'s and OGB's code keep
one, whose gradient is zero up to float rounding; Adam normalises that
rounding into steps of about the learning rate, which the running means
lag behind, so evaluation moved with the rounding (with the device count,
or with how many members one program trains).

:func:`build_graph_model` is the one builder a graph task calls: it picks
this family (``style="xu"``) or OGB's molecule baseline
(:func:`~sparsegcn.nn.graph_ogb.graph_ogb`: atom and bond encoders, GINE,
JK "last"; ``style="ogb"``), and with ``style="auto"`` the latter exactly
when the dataset's node features are categorical. :class:`GraphModel`,
:func:`masked_batch_norm` and :data:`GRAPH_READOUTS` live in
:mod:`sparsegcn.nn.graph_model` and are importable from here too.

References:
  Xu, Hu, Leskovec & Jegelka, *How Powerful are Graph Neural Networks?*,
  ICLR 2019. https://arxiv.org/abs/1810.00826 (code:
  github.com/weihua916/powerful-gnns)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from sparsegcn.message_passing import message_passing
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.encoders import atom_encoder_params, check_feature_dims, encode
from sparsegcn.nn.graph_model import (
    GRAPH_READOUTS,
    SET2SET_STEPS,
    GraphModel,
    batch_norm_params,
    batch_norm_stats,
    check_graph_readout,
    masked_batch_norm,
    pool,
    pool_params,
    pooled_width,
)
from sparsegcn.nn.graph_ogb import graph_ogb
from sparsegcn.nn.initializers import linear_params
from sparsegcn.nn.model import check_model_settings
from sparsegcn.nn.readout import readout

GRAPH_STYLES = ("auto", "xu", "ogb")
"""The model families :func:`build_graph_model` chooses between."""


def graph_gin(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 64,
    num_layers: int = 5,
    dropout_rate: float = 0.5,
    learn_eps: bool = False,
    readout_reduce: str = "sum",
    virtual_node: bool = False,
    feature_dims: tuple[int, ...] | None = None,
    set2set_steps: int = SET2SET_STEPS,
) -> GraphModel:
    """GIN-0 (``learn_eps=False``) or GIN-ε with a readout of every layer.

    Args:
      in_features: ``F``, the node features' width (categorical columns
        with ``feature_dims``).
      num_classes: ``C``.
      hidden: width of every hidden layer (Xu et al. chose from 16, 32, 64).
      num_layers: layers counting the input (5: four GIN layers).
      dropout_rate: dropout of each layer's class scores (Xu et al.'s
        ``final_dropout``: 0 or 0.5).
      learn_eps: learn ``ε`` per layer (GIN-ε) instead of ``ε = 0`` (GIN-0).
      readout_reduce: ``"sum"`` (the paper's), ``"mean"``, ``"max"``,
        ``"attention"`` (:func:`~sparsegcn.nn.readout.attention_pool`, one
        gate per layer) or ``"set2set"`` (:func:`~sparsegcn.nn.readout.set2set`,
        one LSTM per layer; each head then reads ``2 F_k`` features).
      virtual_node: one extra node per graph joined to all its nodes, as in
        OGB's GIN-virtual (Gilmer et al. 2017; Hu et al. 2020): its vector
        (a learnt embedding at first) is added to every node's row before
        each GIN layer, and after each layer but the last it becomes
        ``ReLU(BN(MLP(Σ_i (h_i + v) + v)))`` (MLP ``w -> 2H -> H`` with batch
        norm, over real graphs only). Readouts pool the rows without it.
      feature_dims: categorical node features (OGB's atom columns): the
        input is first embedded to ``hidden`` columns by
        :func:`~sparsegcn.nn.encoders.encode` (one table per column), and
        layer 0's readout reads the embedding.
      set2set_steps: Set2Set's processing steps.

    Returns:
      A :class:`GraphModel`. Params: ``{"layers": [{"eps", "w1", "bn1",
      "w2", "bn"}, ...], "heads": [{"w", "b"}, ...]}``, plus
      ``"encoder"`` with ``feature_dims``, ``"gates"`` (attention) or
      ``"set2set"`` (one per layer); stats:
      ``{"layers": [{"bn1": {"mean", "var"}, "bn": {...}}, ...]}``.

    Shapes:
      ``apply(params, stats, batch) -> ([G_b, C], stats)``.
    """
    check_model_settings(
        hidden,
        num_layers,
        dropout_rate,
        in_features=in_features,
        num_classes=num_classes,
        flags={"learn_eps": learn_eps, "virtual_node": virtual_node},
    )
    if num_layers < 2:
        raise ValueError(f"num_layers counts the input and must be >= 2, got {num_layers}")
    check_graph_readout(readout_reduce, set2set_steps)
    if feature_dims is not None:
        feature_dims = check_feature_dims(feature_dims)
        if len(feature_dims) != in_features:
            raise ValueError(
                f"feature_dims has {len(feature_dims)} columns, in_features is {in_features}"
            )
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        learn_eps=learn_eps,
        readout=readout_reduce,
        virtual_node=virtual_node,
        feature_dims=feature_dims,
        style="xu",
    )
    if readout_reduce == "set2set":
        config["set2set_steps"] = set2set_steps
    embedded = in_features if feature_dims is None else hidden
    widths = [embedded] + [hidden] * (num_layers - 1)

    @jax.jit
    def init(key: jax.Array) -> tuple[dict, dict]:
        keys = jax.random.split(key, 2 * num_layers)
        layers, layer_stats = [], []
        for k in range(1, num_layers):
            first = linear_params(keys[2 * k], widths[k - 1], hidden)
            second = linear_params(keys[2 * k + 1], hidden, hidden)
            layers.append(
                {
                    "eps": jnp.zeros((), jnp.float32),
                    "w1": first["w"],
                    "bn1": batch_norm_params(hidden),
                    "w2": second["w"],
                    "bn": batch_norm_params(hidden),
                }
            )
            layer_stats.append({"bn1": batch_norm_stats(hidden), "bn": batch_norm_stats(hidden)})
        heads = [
            linear_params(keys[k], pooled_width(readout_reduce, widths[k]), num_classes)
            for k in range(num_layers)
        ]
        params: dict = {"layers": layers, "heads": heads}
        pool_keys = jax.random.split(keys[0], num_layers)
        if readout_reduce in ("attention", "set2set"):
            name = "gates" if readout_reduce == "attention" else "set2set"
            params[name] = [
                pool_params(pool_keys[k], readout_reduce, widths[k]) for k in range(num_layers)
            ]
        if feature_dims is not None:
            encoder_key = jax.random.fold_in(key, num_layers)
            params["encoder"] = atom_encoder_params(encoder_key, feature_dims, hidden)
        stats: dict = {"layers": layer_stats}
        if virtual_node:
            vn_keys = jax.random.split(keys[1], 2 * num_layers)
            updates, update_stats = [], []
            for k in range(1, num_layers - 1):
                first = linear_params(vn_keys[2 * k], widths[k - 1], 2 * hidden)
                second = linear_params(vn_keys[2 * k + 1], 2 * hidden, hidden)
                updates.append(
                    {
                        "w1": first["w"],
                        "bn1": batch_norm_params(2 * hidden),
                        "w2": second["w"],
                        "bn": batch_norm_params(hidden),
                    }
                )
                update_stats.append(
                    {"bn1": batch_norm_stats(2 * hidden), "bn": batch_norm_stats(hidden)}
                )
            params["virtual"] = {
                "embedding": jnp.zeros((embedded,), jnp.float32),
                "updates": updates,
            }
            stats["virtual"] = update_stats
        return params, stats

    def update_virtual(update, update_stats, v, graph_mask, training):
        u = v @ update["w1"]
        u, bn1 = masked_batch_norm(update["bn1"], update_stats["bn1"], u, graph_mask, training)
        u = jax.nn.relu(u) @ update["w2"]
        u, bn = masked_batch_norm(update["bn"], update_stats["bn"], u, graph_mask, training)
        return jax.nn.relu(u), {"bn1": bn1, "bn": bn}

    def apply(params, stats, batch, *, key=None, training=False):
        if training and dropout_rate > 0.0 and key is None:
            raise ValueError(
                "training with dropout needs an explicit PRNG key: apply(..., key=key)"
            )
        graph, mask = batch.graph, batch.node_mask
        keys = (
            list(jax.random.split(key, num_layers))
            if training and dropout_rate > 0.0
            else [None] * num_layers
        )
        if feature_dims is None:
            h = jnp.asarray(batch.x)
        else:
            h = jnp.where(mask[:, None], encode(params["encoder"], batch.x), 0.0)
        new_stats, virtual_stats = [], []
        learnt = params.get("gates", params.get("set2set"))
        scores = None
        if virtual_node:
            shape = (batch.num_graphs, params["virtual"]["embedding"].shape[0])
            v = jnp.broadcast_to(params["virtual"]["embedding"][None, :], shape)
        for k in range(num_layers):
            if k > 0:
                layer, layer_stats = params["layers"][k - 1], stats["layers"][k - 1]
                eps = layer["eps"] if learn_eps else 0.0
                if virtual_node:
                    h_in = h + v[batch.node_graph]
                    if k < num_layers - 1:
                        total = readout(h_in, batch.node_graph, batch.num_graphs, node_mask=mask)
                        v, vs = update_virtual(
                            params["virtual"]["updates"][k - 1],
                            stats["virtual"][k - 1],
                            total + v,
                            batch.graph_mask,
                            training,
                        )
                        virtual_stats.append(vs)
                    h = h_in
                u = (1.0 + eps) * h + message_passing(graph, h)
                u = u @ layer["w1"]
                u, bn1 = masked_batch_norm(layer["bn1"], layer_stats["bn1"], u, mask, training)
                u = jax.nn.relu(u) @ layer["w2"]
                u, bn = masked_batch_norm(layer["bn"], layer_stats["bn"], u, mask, training)
                h = jax.nn.relu(u)
                new_stats.append({"bn1": bn1, "bn": bn})
            pooled = pool(
                learnt[k] if learnt else None,
                readout_reduce,
                h,
                batch,
                set2set_steps=set2set_steps,
            )
            head = params["heads"][k]
            score = pooled @ head["w"] + head["b"][None, :]
            if keys[k] is not None:
                score = dropout(score, dropout_rate, key=keys[k])
            scores = score if scores is None else scores + score
        if virtual_node:
            return scores, {"layers": new_stats, "virtual": virtual_stats}
        return scores, {"layers": new_stats}

    return GraphModel(init, apply, "gin", config)


def auto_style(dataset) -> str:
    """The family :func:`build_graph_model`'s ``style="auto"`` builds for ``dataset``:
    ``"ogb"`` for categorical (integer) node features (``feature_dims`` set),
    ``"xu"`` for float ones."""
    return "xu" if dataset.feature_dims is None else "ogb"


def build_graph_model(
    dataset,
    *,
    hidden: int,
    num_layers: int,
    dropout_rate: float,
    learn_eps: bool = False,
    readout_reduce: str = "sum",
    virtual_node: bool = False,
    style: str = "auto",
) -> GraphModel:
    """The graph-level model for ``dataset``: Xu et al.'s GIN or OGB's baseline.

    ``style`` picks the family:

    - ``"xu"``: :func:`graph_gin`, Xu et al.'s TU GIN with a readout (and a
      head) of every layer; ``num_layers`` counts the input. Categorical
      node columns (``dataset.feature_dims``) are embedded first; edge
      features are not read.
    - ``"ogb"``: :func:`~sparsegcn.nn.graph_ogb.graph_ogb`, OGB's mol
      baseline: an atom encoder (or a linear map of float features), GINE
      layers with a per-layer bond encoder when the dataset has edge
      features (GIN layers when not), JK "last", the readout, one linear
      head; ``num_layers`` counts the message-passing layers (OGB's
      ``num_layer``). OGB's own settings are ``hidden=300, num_layers=5,
      dropout_rate=0.5, learn_eps=True, readout_reduce="mean"``.
    - ``"auto"``: ``"ogb"`` when the dataset's node features are
      categorical (``dataset.feature_dims is not None``, the ``ogbg-mol*``
      datasets and their synthetic twins), else ``"xu"``.

    Args:
      dataset: a :class:`~sparsegcn.datasets.graphs.GraphDataset` (its
        ``features``, ``num_classes``, ``feature_dims``, ``edge_features``
        and ``edge_feature_dims`` are read; no graph is).
      hidden: the hidden width.
      num_layers: the depth, counted as the family counts it (above).
      dropout_rate: Xu's dropout of each layer's scores; OGB's node-wise
        dropout after every layer.
      learn_eps: GIN-ε (learnt ``ε``, starting at 0) instead of ``ε = 0``.
      readout_reduce: one of :data:`GRAPH_READOUTS`.
      virtual_node: GIN-virtual.
      style: ``"auto"``, ``"xu"`` or ``"ogb"``.

    Returns:
      A :class:`GraphModel` whose logits are ``[G_b, dataset.num_classes]``
      (class scores, or one logit per binary task); ``config["style"]`` is
      the family chosen.

    Raises:
      ValueError: an unknown ``style`` or a bad setting, naming it.
    """
    if style not in GRAPH_STYLES:
        raise ValueError(f"unknown graph model style {style!r}; choose one of {list(GRAPH_STYLES)}")
    feature_dims = dataset.feature_dims
    if style == "auto":
        style = auto_style(dataset)
    in_features = int(dataset.features.shape[1])
    settings = dict(
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        learn_eps=learn_eps,
        readout_reduce=readout_reduce,
        virtual_node=virtual_node,
        feature_dims=feature_dims,
    )
    if style == "xu":
        return graph_gin(in_features, dataset.num_classes, **settings)
    edges = dataset.edge_features
    return graph_ogb(
        in_features,
        dataset.num_classes,
        edge_dim=None if edges is None else int(edges.shape[1]),
        edge_feature_dims=None if edges is None else dataset.edge_feature_dims,
        **settings,
    )


__all__ = [
    "GRAPH_READOUTS",
    "GRAPH_STYLES",
    "GraphModel",
    "auto_style",
    "build_graph_model",
    "graph_gin",
    "masked_batch_norm",
]

"""OGB's GIN and GIN-virtual graph baselines: encoders, GINE layers, JK "last".

The molecule baselines of the Open Graph Benchmark
(``examples/graphproppred/mol/gnn.py`` and ``conv.py`` in
snap-stanford/ogb) embed the atoms' categorical columns
(:func:`~sparsegcn.nn.encoders.encode`, OGB's ``AtomEncoder``), run ``K``
GINE layers whose messages carry each layer's own embedding of the bond
columns (``BondEncoder``), and read out only the last layer (JK "last"):

.. math::

    h_i^{(0)} &= \\mathrm{AtomEnc}(x_i), \\qquad
    e_{ji}^{(k)} = \\mathrm{BondEnc}^{(k)}(x_{ji}) \\\\
    u_i^{(k)} &= (1 + \\varepsilon^{(k)})\\, h_i^{(k-1)} +
        \\textstyle\\sum_{j \\to i} \\mathrm{ReLU}\\big(h_j^{(k-1)} + e_{ji}^{(k)}\\big) \\\\
    h_i^{(k)} &= \\mathrm{drop}\\Big(\\sigma_k\\Big(\\mathrm{BN}\\big(W_2^{(k)}\\,
        \\mathrm{ReLU}(\\mathrm{BN}(W_1^{(k)} u_i^{(k)} + b_1^{(k)})) + b_2^{(k)}\\big)\\Big)\\Big) \\\\
    y_g &= W \\textstyle\\bigoplus_{i \\in g} h_i^{(K)} + b

with ``σ_k = ReLU`` except on the last layer (identity), ``W_1`` mapping
``H -> 2H`` and ``W_2`` back to ``H``, and node-wise dropout after every
layer. Without edge features a layer is GIN (``Σ_j h_j``, the view's fused
product: no ``[E, H]`` buffer).

The virtual-node form (``GNN_node_Virtualnode``) keeps one vector ``v_g``
per graph, zero at first: before layer ``k`` it is added to every node of
its graph, and after every layer but the last it becomes
``drop(ReLU(BN(W_4 ReLU(BN(W_3 (Σ_{i∈g} (h_i + v_g) + v_g))))))``.

Batch norm is masked (:func:`~sparsegcn.nn.graph_model.masked_batch_norm`):
statistics over real nodes (real graphs for the virtual node) only. In a
padded :class:`~sparsegcn.batch.GraphBatch` padding edges run from the last
node, a padding node, to itself, so their messages reach only that node;
padding rows are zeroed after the encoder and after every layer, so they
stay finite whatever the number of padding edges and never reach a real
row, a statistic or a readout.

References:
  Hu, Liu, Gomes, Zitnik, Liang, Pande & Leskovec, *Strategies for
  Pre-training Graph Neural Networks*, ICLR 2020 (GINE).
  https://arxiv.org/abs/1905.12265

  Hu, Fey, Zitnik, Dong, Ren, Liu, Catasta & Leskovec, *Open Graph
  Benchmark: Datasets for Machine Learning on Graphs*, NeurIPS 2020.
  https://arxiv.org/abs/2005.00687

  Gilmer, Schoenholz, Riley, Vinyals & Dahl, *Neural Message Passing for
  Quantum Chemistry*, ICML 2017 (the virtual node).
  https://arxiv.org/abs/1704.01212
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from sparsegcn import _checks
from sparsegcn.message_passing import message_passing
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.encoders import atom_encoder_params, check_feature_dims, encode
from sparsegcn.nn.graph_model import (
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
from sparsegcn.nn.initializers import linear_params
from sparsegcn.nn.model import check_model_settings, check_unweighted
from sparsegcn.nn.readout import readout


def _relu_of_sum(x_j: jax.Array, x_i: jax.Array | None, e: jax.Array | None) -> jax.Array:
    assert e is not None  # gine_aggregate always passes the edge embedding
    return jax.nn.relu(x_j + e)


def gine_aggregate(graph, h: jax.Array, edge_embedding: jax.Array) -> jax.Array:
    """GINE's neighbourhood sum ``Σ_{j→i} ReLU(h_j + e_ji)`` on any view.

    The message is not a weighted sum of source rows, so it is built once
    per edge (``[E, F]``: the gathered row plus the embedding, fused by XLA)
    and summed by receiver (``segment_sum``); nothing else per edge.

    Args:
      graph: a view with ``E`` edges, unweighted.
      h: ``[N, F]`` node rows.
      edge_embedding: ``[E, F]``, in the view's own edge order.

    Returns:
      ``[num_dst, F]``.

    Raises:
      ValueError: ``edge_embedding`` is not ``[E, F]``.

    References:
      Hu et al., *Strategies for Pre-training Graph Neural Networks*, ICLR
      2020. https://arxiv.org/abs/1905.12265
    """
    check_unweighted(graph, "gine_aggregate")
    edges = int(jnp.shape(graph.senders)[-1])
    if edge_embedding.shape != (edges, h.shape[-1]):
        raise ValueError(
            f"edge_embedding must be [E, F] = [{edges}, {h.shape[-1]}], got {edge_embedding.shape}"
        )
    return message_passing(
        graph, graph.sources(h), message=_relu_of_sum, edge_features=edge_embedding
    )


def _embed_params(key: jax.Array, dims: tuple[int, ...] | None, width: int, out: int) -> dict:
    """Embedding tables for categorical columns, else a linear map ``width -> out``."""
    if dims is not None:
        return atom_encoder_params(key, dims, out)
    return linear_params(key, width, out)


def _embed(params: dict, x: jax.Array) -> jax.Array:
    if "tables" in params:
        return encode(params, x)
    return jnp.asarray(x) @ params["w"] + params["b"][None, :]


def _mlp_bn_params(key: jax.Array, fan_in: int, hidden: int, fan_out: int) -> tuple[dict, dict]:
    first, second = jax.random.split(key)
    one = linear_params(first, fan_in, hidden)
    two = linear_params(second, hidden, fan_out)
    params = {
        "w1": one["w"],
        "bn1": batch_norm_params(hidden),
        "w2": two["w"],
        "bn": batch_norm_params(fan_out),
    }
    return params, {"bn1": batch_norm_stats(hidden), "bn": batch_norm_stats(fan_out)}


def _mlp_bn(params, stats, u, mask, training) -> tuple[jax.Array, dict]:
    """``BN(ReLU(BN(u W_1)) W_2)``, batch norm over the ``mask`` rows (no biases before
    a batch norm: see :func:`~sparsegcn.nn.graph_gin.graph_gin`)."""
    u = u @ params["w1"]
    u, bn1 = masked_batch_norm(params["bn1"], stats["bn1"], u, mask, training)
    u = jax.nn.relu(u) @ params["w2"]
    u, bn = masked_batch_norm(params["bn"], stats["bn"], u, mask, training)
    return u, {"bn1": bn1, "bn": bn}


def graph_ogb(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 300,
    num_layers: int = 5,
    dropout_rate: float = 0.5,
    learn_eps: bool = True,
    readout_reduce: str = "mean",
    virtual_node: bool = False,
    feature_dims: tuple[int, ...] | None = None,
    edge_dim: int | None = None,
    edge_feature_dims: tuple[int, ...] | None = None,
    set2set_steps: int = SET2SET_STEPS,
) -> GraphModel:
    """OGB's mol baseline: GIN (``virtual_node=False``) or GIN-virtual.

    The defaults are OGB's (``examples/graphproppred/mol``: 5 layers,
    ``emb_dim`` 300, dropout 0.5, a learnt ``ε`` starting at 0, mean
    pooling, JK "last", no residual). Linear maps are Glorot-initialised
    with zero biases (PyTorch's ``Linear`` draws both from
    ``U(±1/sqrt(fan_in))``); the embedding tables are Xavier-uniform as
    OGB's.

    Args:
      in_features: ``F``, node feature columns.
      num_classes: ``C`` classes or ``T`` tasks, the output width.
      hidden: ``H``, every layer's width (OGB's ``emb_dim``).
      num_layers: ``K`` message-passing layers (OGB's ``num_layer``; the
        input embedding is not counted, unlike :func:`graph_gin`).
      dropout_rate: node-wise dropout after every layer (and on the virtual
        node after every update).
      learn_eps: learn ``ε`` per layer (OGB's); ``False`` fixes ``ε = 0``.
      readout_reduce: one of :data:`~sparsegcn.nn.graph_model.GRAPH_READOUTS`
        (OGB's ``graph_pooling``; ``"attention"`` here gates with one linear
        map, OGB's with an MLP; ``"set2set"`` doubles the head's input).
      virtual_node: GIN-virtual (``GNN_node_Virtualnode``).
      feature_dims: categorical node columns: the input is the sum of one
        embedding per column (OGB's ``AtomEncoder``); ``None``: float
        features through a linear map ``F -> H``.
      edge_dim: ``D``, edge feature columns; ``None`` with
        ``edge_feature_dims`` ``None``: no edge features, GIN layers.
      edge_feature_dims: categorical edge columns: each layer embeds them
        (OGB's per-layer ``BondEncoder``); ``None``: float edge features
        through a linear map ``D -> H`` per layer.
      set2set_steps: Set2Set's processing steps (OGB's 2).

    Returns:
      A :class:`~sparsegcn.nn.graph_model.GraphModel`. Params: ``{"encoder",
      "layers": [{"eps", "edge"?, "w1", "bn1", "w2", "bn"}, ...],
      "head": {"w", "b"}}``, plus ``"pool"`` (attention, Set2Set) and
      ``"virtual": {"embedding" [H], "updates": [...]}``; stats:
      ``{"layers": [{"bn1", "bn"}, ...], "virtual": [...]}``. ``apply``
      reads ``batch.edge_features [E_b, D]`` when the layers are GINE.

    Raises:
      ValueError: a bad setting, naming it.

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
    check_graph_readout(readout_reduce, set2set_steps)
    in_features = _checks.check_static_int("in_features", in_features, minimum=1)
    if feature_dims is not None:
        feature_dims = check_feature_dims(feature_dims)
        if len(feature_dims) != in_features:
            raise ValueError(
                f"feature_dims has {len(feature_dims)} columns, in_features is {in_features}"
            )
    if edge_feature_dims is not None:
        edge_feature_dims = check_feature_dims(edge_feature_dims)
        if edge_dim is None:
            edge_dim = len(edge_feature_dims)
    if edge_dim is not None:
        edge_dim = _checks.check_static_int("edge_dim", edge_dim, minimum=1)
        if edge_feature_dims is not None and len(edge_feature_dims) != edge_dim:
            raise ValueError(
                f"edge_feature_dims has {len(edge_feature_dims)} columns, edge_dim is {edge_dim}"
            )
    gine = edge_dim is not None
    edge_width = 0 if edge_dim is None else edge_dim
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
        edge_dim=edge_dim,
        edge_feature_dims=edge_feature_dims,
        conv="gine" if gine else "gin",
        style="ogb",
    )
    if readout_reduce == "set2set":
        config["set2set_steps"] = set2set_steps

    @jax.jit
    def init(key: jax.Array) -> tuple[dict, dict]:
        keys = jax.random.split(key, 4 + 3 * num_layers)
        layers, layer_stats = [], []
        for k in range(num_layers):
            layer, layer_stat = _mlp_bn_params(keys[4 + 3 * k], hidden, 2 * hidden, hidden)
            layer["eps"] = jnp.zeros((), jnp.float32)
            if gine:
                layer["edge"] = _embed_params(
                    keys[5 + 3 * k], edge_feature_dims, edge_width, hidden
                )
            layers.append(layer)
            layer_stats.append(layer_stat)
        params: dict = {
            "encoder": _embed_params(keys[0], feature_dims, in_features, hidden),
            "layers": layers,
            "head": linear_params(keys[1], pooled_width(readout_reduce, hidden), num_classes),
        }
        learnt = pool_params(keys[2], readout_reduce, hidden)
        if learnt is not None:
            params["pool"] = learnt
        stats: dict = {"layers": layer_stats}
        if virtual_node:
            updates = [
                _mlp_bn_params(keys[6 + 3 * k], hidden, 2 * hidden, hidden)
                for k in range(num_layers - 1)
            ]
            params["virtual"] = {
                "embedding": jnp.zeros((hidden,), jnp.float32),
                "updates": [u[0] for u in updates],
            }
            stats["virtual"] = [u[1] for u in updates]
        return params, stats

    def apply(params, stats, batch, *, key=None, training=False):
        drop = training and dropout_rate > 0.0
        if drop and key is None:
            raise ValueError(
                "training with dropout needs an explicit PRNG key: apply(..., key=key)"
            )
        edge_rows = batch.edge_features
        if gine and (edge_rows is None or jnp.shape(edge_rows)[-1] != edge_dim):
            got = None if edge_rows is None else jnp.shape(edge_rows)
            raise ValueError(f"the model reads edge features [E_b, {edge_dim}], got {got}")
        graph, mask, node_graph = batch.graph, batch.node_mask, batch.node_graph
        keys = jax.random.split(key, 2 * num_layers) if drop else None
        real = mask[:, None]
        h = jnp.where(real, _embed(params["encoder"], batch.x), 0.0)
        if virtual_node:
            shape = (batch.num_graphs, hidden)
            v = jnp.broadcast_to(params["virtual"]["embedding"][None, :], shape)
        new_stats, virtual_stats = [], []
        for k in range(num_layers):
            layer, layer_stats = params["layers"][k], stats["layers"][k]
            if virtual_node:
                h = h + v[node_graph]
            if gine:
                total = gine_aggregate(graph, h, _embed(layer["edge"], edge_rows))
            else:
                check_unweighted(graph, "graph_ogb's GIN layer")
                total = message_passing(graph, h)
            eps = layer["eps"] if learn_eps else 0.0
            u, layer_stat = _mlp_bn(layer, layer_stats, (1.0 + eps) * h + total, mask, training)
            new_stats.append(layer_stat)
            if k < num_layers - 1:
                u = jax.nn.relu(u)
            if drop:
                u = dropout(u, dropout_rate, key=keys[2 * k])
            if virtual_node and k < num_layers - 1:
                gathered = readout(h, node_graph, batch.num_graphs, node_mask=mask) + v
                v, vs = _mlp_bn(
                    params["virtual"]["updates"][k],
                    stats["virtual"][k],
                    gathered,
                    batch.graph_mask,
                    training,
                )
                v = jax.nn.relu(v)
                if drop:
                    v = dropout(v, dropout_rate, key=keys[2 * k + 1])
                virtual_stats.append(vs)
            h = jnp.where(real, u, 0.0)
        pooled = pool(params.get("pool"), readout_reduce, h, batch, set2set_steps=set2set_steps)
        logits = pooled @ params["head"]["w"] + params["head"]["b"][None, :]
        new: dict = {"layers": new_stats}
        if virtual_node:
            new["virtual"] = virtual_stats
        return logits, new

    name = "ogb-gin-virtual" if virtual_node else "ogb-gin"
    return GraphModel(init, apply, name, config)


__all__ = ["gine_aggregate", "graph_ogb"]

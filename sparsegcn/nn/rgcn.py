"""R-GCN, the relational graph convolution, on heterogeneous graphs and typed samples.

One layer maps the rows ``h_t`` of every node type ``t`` to

.. math::

    h'_i = W_{\\mathrm{root}, t}^\\top h_i + b_t
         + \\sum_{r:\\ \\mathrm{dst}(r) = t} W_r^\\top \\frac{1}{|N_r(i)|}
           \\sum_{j \\in N_r(i)} h_j

for ``i`` of type ``t``: a mean per relation (``c_{i,r} = |N_r(i)|``, the
paper's normalization), summed over the relations that end in ``t``, plus a
root (self-connection) weight per node type, as OGB's ogbn-mag baseline
(``examples/nodeproppred/mag/rgcn.py`` and ``sampler.py``) does. A target
without neighbours in a relation gets nothing from it. With basis
decomposition (``num_bases = B > 0``) the relation weights share ``B``
matrices:

.. math:: W_r = \\sum_{b=1}^{B} a_{rb} V_b

Node types without input features get a learnable embedding table
``[N_t, F]`` (Glorot-uniform, as OGB's ``emb_dict``), held in the params
pytree as ordinary dense arrays under ``params["embeddings"]``: the
optimizer treats them like every other weight (Adam keeps two moments per
entry, so a table costs three times its size in state, and every step
updates all its rows; a row not in the batch gets a zero gradient, and Adam
still moves it by its momentum, as PyTorch's dense Adam does in OGB's
baseline). For ogbn-mag that is 1,134,649 authors, 59,965 fields and 8,740
institutions: 1,203,354 x 128 float32 = 616 MB of parameters, 1.85 GB with
Adam's moments.

The model runs on a :class:`~sparsegcn.HeteroGraph` (every node of every
type: each relation's mean is :func:`~sparsegcn.message_passing` on its
bipartite view, the fused product), on a
:class:`~sparsegcn.sampling.typed.TypedSample` (the seeds only: masked
means over each path's last axis) or on a
:class:`~sparsegcn.sampling.typed_dedup.TypedDedupSample` (layer ``i`` of
``L`` computes every type's rows within ``L - i - 1`` hops, each relation's
mean on its :class:`~sparsegcn.sampling.typed_dedup.TypedDedupBlock`; each
distinct node's input row is gathered once). With full fanouts all three
give the same seed logits (tested).

References:
  Schlichtkrull, Kipf, Bloem, van den Berg, Titov & Welling, *Modeling
  Relational Data with Graph Convolutional Networks*, ESWC 2018.
  https://arxiv.org/abs/1703.06103

  Hu et al., *Open Graph Benchmark*, NeurIPS 2020 (the ogbn-mag R-GCN
  baseline). https://arxiv.org/abs/2005.00687
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn import _checks
from sparsegcn.hetero import EdgeType, HeteroGraph, check_edge_type
from sparsegcn.message_passing import message_passing
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.initializers import glorot_uniform
from sparsegcn.nn.model import Model, check_model_settings, split_dropout_keys
from sparsegcn.sampling.typed import TypedSample, gather_typed, path_type, typed_paths
from sparsegcn.sampling.typed_dedup import TypedDedupSample, gather_typed_dedup

Params = Any


class HeteroModel(NamedTuple):
    """A model over typed node sets, as pure functions.

    Attributes:
      init: ``init(key) -> params``.
      apply: ``apply(params, graph, x, *, key=None, training=False) -> logits``.
        ``graph`` is a :class:`~sparsegcn.HeteroGraph` (logits ``[N_target, C]``
        for every node of the target type), a
        :class:`~sparsegcn.sampling.typed.TypedSample` or a
        :class:`~sparsegcn.sampling.typed_dedup.TypedDedupSample` (logits
        ``[B, C]`` for its seeds); ``x`` is ``{node_type: [N_t, F]}`` for the featured types.
      name: ``"rgcn"``.
      config: the hyperparameters it was built with.
    """

    init: Callable[[jax.Array], Params]
    apply: Callable[..., jax.Array]
    name: str
    config: dict


def relation_weights(layer: Params) -> jax.Array:
    """``[R, F, F']``: the layer's relation weights, composed from bases if it has them."""
    if "bases" in layer:
        return jnp.einsum("rb,bio->rio", layer["coeffs"], layer["bases"])
    return layer["w_rel"]


def rgcn_combine(layer: Params, node_type: str, h_self, means: Mapping[int, jax.Array], w_rel):
    """A node type's layer output from its own rows and its relations' means.

    ``h_self [..., F]``, ``means {r: [..., F]}`` (the mean over relation
    ``r``'s neighbours, zero without any) -> ``[..., F']``.
    """
    root = layer["root"][node_type]
    out = h_self @ root["w"]
    out = out + root["b"].reshape((1,) * (out.ndim - 1) + (-1,))
    for r, mean in means.items():
        out = out + mean @ w_rel[r]
    return out


def rgcn_conv(
    layer: Params,
    graph: HeteroGraph,
    h: Mapping[str, jax.Array],
    node_types: Sequence[str] | None = None,
) -> dict[str, jax.Array]:
    """One R-GCN layer over every node of ``node_types`` (default: all) of ``graph``.

    Args:
      layer: ``{"root": {t: {"w" [F, F'], "b" [F']}}, "w_rel" [R, F, F']}``
        (or ``"bases" [B, F, F']`` and ``"coeffs" [R, B]`` instead of
        ``"w_rel"``), relations in ``graph.edge_types`` order.
      graph: the heterogeneous graph.
      h: ``{t: [N_t, F]}``, the rows of every source type used.
      node_types: the target types to compute.

    Returns:
      ``{t: [N_t, F']}`` (see the module's formula).

    Raises:
      ValueError: a relation of ``graph`` carries edge weights. The mean is
        the paper's ``1/|N_r(i)|``, as on samples, which carry none; a
        weighted relation would be summed with its weights over an
        unweighted count, a third thing.
    """
    weighted = [key for key, rel in graph.relations.items() if rel.weights is not None]
    if weighted:
        raise ValueError(
            f"R-GCN averages each relation's neighbours unweighted (1/|N_r(i)|), but "
            f"relation(s) {weighted} carry edge weights it would not use; build the "
            f"HeteroGraph from (senders, receivers) pairs"
        )
    w_rel = relation_weights(layer)
    out = {}
    for t in graph.node_types if node_types is None else node_types:
        means = {}
        for r, key in enumerate(graph.edge_types):
            if key[2] == t:
                means[r] = message_passing(graph.relations[key], h[key[0]], aggregate="mean")
        out[t] = rgcn_combine(layer, t, h[t], means, w_rel)
    return out


def _masked_mean(h: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean over axis -2 of ``h [..., k, F]`` where ``mask [..., k]``; 0 without any."""
    m = mask.astype(h.dtype)[..., None]
    total = jnp.sum(h * m, axis=-2)
    count = jnp.sum(m, axis=-2)
    return total / jnp.maximum(count, jnp.ones((), h.dtype))


def check_num_bases(num_bases, relations: int, *, flag: str | None = None) -> int:
    """Returns ``num_bases`` if it is 0 (no decomposition) or at most ``relations``.

    More bases than relations span no more weights than one full weight per
    relation, and cost ``num_bases * F * F'`` parameters per layer.

    Raises:
      TypeError: not an int.
      ValueError: negative, or above ``relations``, naming both (and ``flag``).
    """
    num_bases = _checks.check_static_int("num_bases", num_bases)
    if num_bases > relations:
        where = f" ({flag})" if flag else ""
        raise ValueError(
            f"num_bases must be at most the number of relations, {relations} here (more bases "
            f"than relations only add parameters), got {num_bases}{where}"
        )
    return num_bases


def rgcn(
    num_nodes: Mapping[str, int],
    edge_types: Sequence[EdgeType],
    in_features: Mapping[str, int],
    num_classes: int,
    *,
    target: str,
    hidden: int = 64,
    num_layers: int = 2,
    dropout_rate: float = 0.5,
    num_bases: int = 0,
) -> HeteroModel:
    """R-GCN over typed nodes: ReLU and dropout between layers, logits of ``target`` last.

    .. math::

        H^{(l+1)} = \\mathrm{drop}(\\mathrm{ReLU}(\\mathrm{RGCN}(H^{(l)})))
        \\text{ for } l < L - 1, \\qquad Z = \\mathrm{RGCN}(H^{(L-1)})_{\\mathrm{target}}

    (OGB's ogbn-mag baseline: dropout after each hidden layer, none on the
    inputs.)

    Args:
      num_nodes: ``{t: N_t}`` (the sizes of the embedding tables).
      edge_types: the relations, in the order the graph stores them.
      in_features: ``{t: F}`` for the types with input features; every
        other type gets a learnable ``[N_t, F]`` embedding of the same width
        ``F`` (all featured types must share it).
      num_classes: ``C``.
      target: the node type classified (papers).
      hidden: hidden width ``H``.
      num_layers: ``L`` (= sampling hops).
      dropout_rate: dropout after every hidden layer.
      num_bases: ``0`` for a full ``[F, F']`` weight per relation, else the
        number of shared bases ``B`` (basis decomposition), at most the
        number of relations (:func:`check_num_bases`).

    Returns:
      A :class:`HeteroModel`.

    Raises:
      ValueError: unknown types, featured types of different widths, or a
        bad setting, naming it.
    """
    check_model_settings(hidden, num_layers, dropout_rate, num_classes=num_classes)
    counts = {t: _checks.check_static_int(f"num_nodes[{t!r}]", n) for t, n in num_nodes.items()}
    edge_types = tuple(check_edge_type(tuple(k)) for k in edge_types)
    if not edge_types:
        raise ValueError(
            "edge_types must name at least one relation: R-GCN without relations is a "
            "per-type linear model"
        )
    for key in edge_types:
        for t in (key[0], key[2]):
            if t not in counts:
                raise ValueError(f"edge type {key} names node type {t!r}, not in {sorted(counts)}")
    if target not in counts:
        raise ValueError(f"target {target!r} is not a node type; node types are {sorted(counts)}")
    widths = {
        t: _checks.check_static_int(f"in_features[{t!r}]", f, minimum=1)
        for t, f in in_features.items()
    }
    unknown = sorted(set(widths) - set(counts))
    if unknown or not widths:
        raise ValueError(
            f"in_features must name featured node types among {sorted(counts)}, got {sorted(widths)}"
        )
    if len(set(widths.values())) != 1:
        raise ValueError(
            f"featured node types must share one width (embeddings take it), got {widths}"
        )
    width = next(iter(widths.values()))
    _checks.check_static_int("num_classes", num_classes, minimum=1)
    check_num_bases(num_bases, len(edge_types))
    featureless = tuple(t for t in counts if t not in widths)
    sizes = [width] + [hidden] * (num_layers - 1) + [num_classes]
    node_types = tuple(counts)
    # Which node types each layer must compute: the target last, and before
    # that every type some relation into a type of the next layer reads.
    needed = [{target}]
    for _ in range(num_layers - 1):
        needed.insert(0, needed[0] | {k[0] for k in edge_types if k[2] in needed[0]})
    layer_types = [tuple(t for t in node_types if t in n) for n in needed]

    def init(key: jax.Array) -> Params:
        keys = jax.random.split(key, num_layers + 1)
        emb_keys = jax.random.split(keys[0], max(len(featureless), 1))
        params: dict = {
            "embeddings": {
                t: glorot_uniform(k, (counts[t], width))
                for t, k in zip(featureless, emb_keys, strict=False)
            },
            "layers": [],
        }
        for lk, fan_in, fan_out in zip(keys[1:], sizes[:-1], sizes[1:], strict=True):
            root_keys = jax.random.split(lk, len(node_types) + 2)
            layer: dict = {
                "root": {
                    t: {"w": glorot_uniform(k, (fan_in, fan_out)), "b": jnp.zeros((fan_out,))}
                    for t, k in zip(node_types, root_keys, strict=False)
                }
            }
            rel_key, coeff_key = root_keys[-2:]
            if num_bases:
                bases = jax.random.split(rel_key, num_bases)
                layer["bases"] = jnp.stack([glorot_uniform(k, (fan_in, fan_out)) for k in bases])
                layer["coeffs"] = glorot_uniform(coeff_key, (len(edge_types), num_bases))
            else:
                rels = jax.random.split(rel_key, max(len(edge_types), 1))[: len(edge_types)]
                layer["w_rel"] = jnp.stack([glorot_uniform(k, (fan_in, fan_out)) for k in rels])
            params["layers"].append(layer)
        return params

    def inputs(params, x: Mapping[str, jax.Array]) -> dict:
        missing = sorted(set(widths) - set(x))
        if missing:
            raise ValueError(f"x has no rows for the featured node types {missing}")
        return {**{t: jnp.asarray(x[t]) for t in widths}, **params["embeddings"]}

    def check_rows(h: Mapping[str, jax.Array]) -> None:
        """Samples index the tables by node id: one row per node of the model's
        counts (static shapes: free under ``jit``). A gather past the end would read NaN
        (``jnp.take`` fills) under ``jit``, where the ids are not checked."""
        for t in node_types:
            shape = tuple(h[t].shape)
            what = f"x[{t!r}]" if t in widths else f"the embedding table of {t!r}"
            if len(shape) != 2 or shape[0] != counts[t]:
                raise ValueError(
                    f"{what} has {shape[0] if shape else 0} rows but the model has "
                    f"num_nodes[{t!r}]={counts[t]}; {what}.shape = {shape}"
                )
            if shape[1] != width:
                raise ValueError(
                    f"{what} has {shape[1]} columns but the model takes in_features={width}; "
                    f"{what}.shape = {shape}"
                )

    def check_sample_ids(nodes: Mapping[str, Any]) -> None:
        """Outside ``jit`` (concrete ids), each type's ids against the model's counts: a
        sample of a graph with more nodes than the model was built for would read
        clamped rows. Traced ids are not read (the trainer samples the graph the
        model was built over)."""
        if any(_checks.is_traced(*ids) for ids in nodes.values()):
            return
        for t, ids in nodes.items():
            if t not in counts:
                continue
            top = max((int(np.max(np.asarray(i))) for i in ids if np.size(i)), default=-1)
            if top >= counts[t]:
                raise ValueError(
                    f"the sample holds {t!r} id {top}, but the model has num_nodes[{t!r}]="
                    f"{counts[t]}; sample the graph the model was built over"
                )

    def after(i_layer: int, out: dict, key) -> dict:
        """ReLU and dropout (one key per entry) on a hidden layer's outputs."""
        if i_layer == num_layers - 1:
            return out
        keys = [None] * len(out) if key is None else list(jax.random.split(key, len(out)))
        return {
            name: jax.nn.relu(v) if k is None else dropout(jax.nn.relu(v), dropout_rate, key=k)
            for (name, v), k in zip(out.items(), keys, strict=True)
        }

    def apply_full(params, graph: HeteroGraph, x, *, key=None, training=False, embed=False):
        if tuple(graph.edge_types) != edge_types:
            raise ValueError(
                f"graph's edge types {graph.edge_types} differ from the model's {edge_types}"
            )
        h = inputs(params, x)
        keys = split_dropout_keys(key, num_layers, training, dropout_rate)
        for i_layer, layer in enumerate(params["layers"]):
            if i_layer == num_layers - 1:
                hidden = h[target]
            h = after(i_layer, rgcn_conv(layer, graph, h, layer_types[i_layer]), keys[i_layer])
        return (h[target], hidden) if embed else h[target]

    def apply_sampled(params, sample: TypedSample, x, *, key=None, training=False, embed=False):
        if sample.edge_types != edge_types:
            raise ValueError(
                f"the sample's edge types {sample.edge_types} differ from the model's "
                f"{edge_types}; sample a HeteroCSR of the model's graph"
            )
        if sample.seed_type != target:
            raise ValueError(
                f"the sample is seeded with {sample.seed_type!r} nodes, but the model "
                f"classifies {target!r} nodes; sample with seed_type={target!r}"
            )
        levels = typed_paths(edge_types, target, num_layers)
        if set(sample.nodes) != {p for level in levels for p in level}:
            raise ValueError(f"the sample's paths do not match {num_layers} hops from {target!r}")
        rows = inputs(params, x)
        check_rows(rows)
        by_type: dict[str, list] = {t: [] for t in node_types}
        for p, ids in sample.nodes.items():
            by_type[path_type(p, edge_types, target)].append(ids)
        check_sample_ids(by_type)
        h = gather_typed(sample, rows, edge_types, target)
        keys = split_dropout_keys(key, num_layers, training, dropout_rate)
        for i_layer, layer in enumerate(params["layers"]):
            if i_layer == num_layers - 1:
                hidden = h[()]
            w_rel = relation_weights(layer)
            out = {}
            for depth in range(num_layers - i_layer):
                for p in levels[depth]:
                    t = path_type(p, edge_types, target)
                    means = {
                        r: _masked_mean(h[child], sample.masks[child])
                        for r, key_r in enumerate(edge_types)
                        if key_r[2] == t
                        for child in [(*p, r)]
                    }
                    out[p] = rgcn_combine(layer, t, h[p], means, w_rel)
            h = after(i_layer, out, keys[i_layer])
        return (h[()], hidden) if embed else h[()]

    def apply_dedup(params, sample: TypedDedupSample, x, *, key=None, training=False, embed=False):
        if set(sample.edge_types) != set(edge_types) or sample.num_hops != num_layers:
            raise ValueError(
                f"the sample's {sample.num_hops} hops over {sorted(sample.edge_types)} do not "
                f"match {num_layers} layers over {sorted(edge_types)}"
            )
        if sample.seed_type != target:
            raise ValueError(
                f"the sample is seeded with {sample.seed_type!r} nodes, but the model "
                f"classifies {target!r} nodes; sample with seed_type={target!r}"
            )
        rows = inputs(params, x)
        check_rows(rows)
        check_sample_ids({t: list(sample.nodes[t]) for t in sample.node_types})
        h = gather_typed_dedup(sample, rows)
        keys = split_dropout_keys(key, num_layers, training, dropout_rate)
        for i_layer, layer in enumerate(params["layers"]):
            if i_layer == num_layers - 1:
                hidden = h[target][: sample.batch_size]
            parents = num_layers - i_layer  # targets: frontiers 0..parents-1 of each type
            w_rel = relation_weights(layer)
            out = {}
            for t in node_types:
                means = {
                    r: message_passing(
                        sample.block(parents, key_r),
                        h[key_r[0]][: sample.offsets(key_r[0])[parents + 1]],
                        aggregate="mean",
                    )
                    for r, key_r in enumerate(edge_types)
                    if key_r[2] == t
                }
                out[t] = rgcn_combine(layer, t, h[t][: sample.offsets(t)[parents]], means, w_rel)
            h = after(i_layer, out, keys[i_layer])
        logits = h[target][: sample.batch_size]
        return (logits, hidden) if embed else logits

    def apply(params, graph, x, *, key=None, training=False, embed=False):
        """``[B, C]`` logits of the target rows; with ``embed``, ``(logits,
        embeddings [B, H])``: the target rows the last layer reads (its input;
        the input features or embedding for a one-layer model)."""
        kwargs = dict(key=key, training=training, embed=embed)
        if isinstance(graph, TypedSample):
            return apply_sampled(params, graph, x, **kwargs)
        if isinstance(graph, TypedDedupSample):
            return apply_dedup(params, graph, x, **kwargs)
        if isinstance(graph, HeteroGraph):
            return apply_full(params, graph, x, **kwargs)
        raise TypeError(
            f"rgcn runs on a HeteroGraph, a TypedSample or a TypedDedupSample, got "
            f"{type(graph).__name__}"
        )

    config = dict(
        target=target,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        num_bases=num_bases,
        in_features=width,
        featureless=featureless,
        num_classes=num_classes,
    )
    return HeteroModel(init, apply, "rgcn", config)


def rgcn_homogeneous(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 64,
    num_layers: int = 2,
    dropout_rate: float = 0.5,
    num_bases: int = 0,
) -> Model:
    """R-GCN on a homogeneous graph (one relation): the model registry's ``rgcn``.

    With a single relation the layer is ``W_root^T h_i + b + W_1^T mean_j h_j``,
    which is GraphSAGE's mean layer term by term (PyG's ``SAGEConv``:
    ``lin_r(x_i) + lin_l(mean_j x_j)``), so this builds
    :func:`~sparsegcn.nn.sage.sage` with the mean aggregator and names it
    ``rgcn``. Basis decomposition of one relation's weight spans the same
    matrices, so ``num_bases`` changes nothing here (a run on a homogeneous
    dataset refuses it: :data:`~sparsegcn.experiment.config.OPTION_APPLIES`).
    Heterogeneous datasets (``ogbn-mag``, ``synthetic:mag``) build the typed
    model, :func:`rgcn`.
    """
    from sparsegcn.nn.sage import sage

    _checks.check_static_int("num_bases", num_bases)
    model = sage(
        in_features,
        num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        aggregator="mean",
    )
    return model._replace(name="rgcn", config={**model.config, "num_bases": num_bases})


__all__ = [
    "HeteroModel",
    "check_num_bases",
    "relation_weights",
    "rgcn",
    "rgcn_combine",
    "rgcn_conv",
    "rgcn_homogeneous",
]

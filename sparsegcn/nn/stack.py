"""One forward pass for every graph view: full graphs, row chunks, sampled trees, shards.

A layer written against :mod:`sparsegcn.views` is two pure functions:

- ``project(params, h, i, view) -> z``, row by row (``h W``), so that it
  commutes with taking rows: ``project(h)[ids] == project(h[ids])``.
  ``view`` is the view the layer's ``propagate`` will read (for row chunks,
  the :class:`~sparsegcn.sampling.ChunkedGraph` itself, since one ``z``
  serves every chunk; ``None`` for graph-free models): a linear layer may return ``h`` itself and multiply
  after aggregating when the view has fewer targets than ``h`` has rows
  (:func:`~sparsegcn.nn.conv.transform_first`). ``z`` may be an array or
  any pytree of row arrays;
- ``propagate(params, view, z, key, i) -> [num_dst, ...]``, the message
  passing, reading ``view.sources(z)`` and ``view.targets(z)``.

:func:`run_layers` stacks them with dropout before each layer and an
activation after each hidden one, and picks the views from the graph it is
given, in one place:

============================================  =================================
graph                                         each layer runs on
============================================  =================================
:class:`~sparsegcn.Graph` (any layout),       the graph itself
an edge shard inside ``shard_map``,
or ``None`` (graph-free models: the MLP)
:class:`~sparsegcn.sampling.ChunkedGraph`     each chunk's bipartite view, in a
                                              loop (bounded memory; inference)
:class:`~sparsegcn.sampling.NeighborSample`   the tree's block for that layer
                                              (:class:`~sparsegcn.sampling.blocks.TreeBlock`);
                                              the output is the seeds' rows
:class:`~sparsegcn.sampling.DedupSample`      its de-duplicated block for that
                                              layer (:class:`~sparsegcn.sampling.DedupBlock`);
                                              the output is the seeds' rows
============================================  =================================

A sample gives its rows' node ids (:func:`_sample_rows`) and each layer's
block (:func:`_sample_block`); the layers see only the view protocol.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp

from sparsegcn.features import SparseFeatures
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.model import Model, split_dropout_keys
from sparsegcn.sampling.blocks import TreeBlock, tree_entries
from sparsegcn.sampling.chunks import ChunkedGraph, map_chunks
from sparsegcn.sampling.dedup import DedupSample
from sparsegcn.sampling.neighbor import NeighborSample

Project = Callable
Propagate = Callable


SAMPLES = (NeighborSample, DedupSample)


def _sample_rows(sample) -> jax.Array:
    """int32 ``[T]``: the node id of each row a sample's layers compute on."""
    return tree_entries(sample) if isinstance(sample, NeighborSample) else sample.entries()


def _sample_block(sample, parents: int):
    """The view of the layer whose targets are the sample's first ``parents`` levels."""
    if isinstance(sample, NeighborSample):
        return TreeBlock.from_sample(sample, parents)
    return sample.block(parents)


def _gather_first(x, num_rows: int, choice: bool | None) -> bool:
    """Whether layer 1 takes the sample's ``num_rows`` rows of ``x`` before projecting them.

    ``project(x)[ids] == project(x[ids])``: projecting all ``N`` rows costs
    ``N`` rows of matmul, gathering first one per sample row. Sparse rows
    cannot be gathered, so sparse ``x`` is always projected first.
    """
    if isinstance(x, SparseFeatures):
        if choice:
            raise ValueError(
                "gather_first=True needs dense features; sparse rows can't be gathered"
            )
        return False
    if choice is not None:
        return choice
    return x.shape[0] > num_rows


def _skip(h, out):
    """``h`` if it can be added to ``out`` (a dense array of its shape), else ``None``."""
    return h if isinstance(h, jax.Array) and h.shape == out.shape else None


def run_layers(
    layers: Sequence,
    graph,
    x,
    *,
    project: Callable,
    propagate: Callable,
    key: jax.Array | None,
    training: bool,
    dropout_rate: float,
    dropout_impl: str = "hash",
    activation: Callable = jax.nn.relu,
    residual: bool = False,
    gather_first: bool | None = None,
    stop_before_last: bool = False,
    edge_features: jax.Array | None = None,
    every_output: bool = False,
) -> Any:
    """``dropout -> project -> propagate -> activation`` per layer, logits last.

    Args:
      layers: per-layer params.
      graph: the view to run on (see the module table).
      x: ``[N, F]`` dense or :class:`~sparsegcn.SparseFeatures` inputs.
      project: ``project(layer_params, h, index, view) -> z``, row-wise;
        ``view`` is the view ``propagate`` reads next (the whole graph for
        chunks, ``None`` without a graph).
      propagate: ``propagate(layer_params, view, z, key, index) -> out``;
        ``key`` is ``None`` unless training (for attention dropout).
      key: PRNG key, required when training with dropout.
      training: apply dropout.
      dropout_rate: drop probability of each layer's input.
      dropout_impl: see :func:`sparsegcn.nn.dropout`.
      activation: applied to every hidden layer's output.
      residual: add each hidden layer's input (its targets' rows) to its
        activated output when the widths match.
      gather_first: samples only: take the sample's rows of ``x`` before
        the first projection (``True``) or project all ``N`` rows and gather
        those (``False``); ``None`` picks the cheaper from the shapes.
      stop_before_last: return the last layer's input (embeddings; full
        views only).
      edge_features: ``[E, D]`` per-edge inputs in ``graph``'s own edge
        order, passed to every layer as ``propagate(...,
        edge_features=edge_features)``; full graphs and edge shards only
        (a chunk or a sampled tree has no map back to the graph's edges).
      every_output: return every layer's output instead, each one activated
        (no layer is a logits layer): the list jumping knowledge combines
        (:mod:`sparsegcn.nn.jk`). On a sample each is cut to the seeds'
        rows, the first ones of every block's targets.

    Returns:
      ``[N, C]`` logits on full and chunked views, ``[B, C]`` for the
      seeds of a sample; ``[N, H]`` embeddings with ``stop_before_last``;
      with ``every_output`` a list of ``L`` arrays ``[N or B, F_l]``.
    """
    count = len(layers)
    if edge_features is not None:
        if isinstance(graph, NeighborSample | ChunkedGraph):
            raise TypeError(
                f"edge_features need the full graph (or an edge shard), not a "
                f"{type(graph).__name__}: its edges are not the graph's edge order"
            )
        propagate = functools.partial(propagate, edge_features=edge_features)
    drop_keys = split_dropout_keys(key, count, training, dropout_rate)
    inner_keys = (
        list(jax.random.split(jax.random.fold_in(key, count), count))
        if training and key is not None
        else []
    )

    def drop(h, i):
        k = drop_keys[i]
        return h if k is None else dropout(h, dropout_rate, key=k, impl=dropout_impl)

    def finish(out, i, view, h):
        if i == count - 1 and not every_output:
            return out
        out = activation(out)
        skip = _skip(view.targets(h), out) if residual and isinstance(h, jax.Array) else None
        return out if skip is None else out + skip

    if isinstance(graph, SAMPLES):
        if stop_before_last:
            raise TypeError(
                f"embeddings are computed on a full graph, not on a {type(graph).__name__}"
            )
        if len(graph.fanouts) != count:
            raise ValueError(
                f"the sample has {len(graph.fanouts)} hops (fanouts {graph.fanouts}) but the "
                f"model has {count} layers; they must match"
            )
        ids = _sample_rows(graph)
        first = _gather_first(x, int(ids.shape[0]), gather_first)
        rows = None
        if isinstance(x, jax.Array) and (residual or first):
            rows = jnp.take(x, ids, axis=0, mode="clip")
        block = _sample_block(graph, count)
        if first:
            z = project(layers[0], drop(rows, 0), 0, block)
        else:
            z = project(layers[0], drop(x, 0), 0, block)
            if isinstance(z, SparseFeatures):
                raise TypeError(
                    "the first layer keeps sparse features unprojected (it aggregates them "
                    "first, as SAGE's max aggregator does), and a sample can't take rows of "
                    "sparse features: pass them dense (x.todense())"
                )
            z = jax.tree.map(lambda a: jnp.take(a, ids, axis=0, mode="clip"), z)
        h = rows
        seeds = int(graph.nodes[0].size)
        outputs = []
        for i in range(count):
            if i > 0:
                block = _sample_block(graph, count - i)
                z = project(layers[i], drop(h, i), i, block)
            h = finish(propagate(layers[i], block, z, _key(inner_keys, i), i), i, block, h)
            if every_output:
                outputs.append(h[:seeds])  # the seeds lead every block's targets
        # `h` starts as the optional gathered rows; after a layer it is its output.
        return outputs if every_output else cast(jax.Array, h)

    h = x
    outputs = []
    for i in range(count):
        if stop_before_last and i == count - 1:
            return h
        z = project(layers[i], drop(h, i), i, graph)
        if isinstance(graph, ChunkedGraph):
            layer_key = _key(inner_keys, i)

            def chunk_out(chunk, z=z, i=i, h=h, layer_key=layer_key):
                view = graph.chunk_view(chunk)
                return finish(propagate(layers[i], view, z, layer_key, i), i, view, h)

            h = map_chunks(graph, chunk_out)
        else:
            h = finish(propagate(layers[i], graph, z, _key(inner_keys, i), i), i, graph, h)
        if every_output:
            outputs.append(h)
    return outputs if every_output else h


def layer_outputs(layers: Sequence, graph, x, **kwargs) -> list[jax.Array]:
    """Every layer's activated output: :func:`run_layers` with ``every_output=True``
    (same keywords), the ``L`` arrays jumping knowledge combines."""
    return run_layers(layers, graph, x, every_output=True, **kwargs)


def layered_model(
    init: Callable, name: str, config: dict, *, edge_dim: int | None = None, **run_kwargs
) -> Model:
    """The :class:`~sparsegcn.nn.Model` whose ``apply`` and ``embed`` are
    :func:`run_layers` over ``params["layers"]`` with ``run_kwargs``
    (``project``, ``propagate``, ``dropout_rate``, ...): what every layered
    model's builder returns, so a builder only supplies its layer.

    With ``edge_dim = D``, ``apply`` and ``embed`` take a keyword
    ``edge_features [E, D]`` (required) and ``propagate`` receives it;
    without, they refuse one.
    """

    def forward(params, graph, x, key, training, stop_before_last, edge_features):
        if edge_dim is None and edge_features is not None:
            raise ValueError(f"{name} was built without edge_dim; it reads no edge_features")
        if edge_dim is not None and edge_features is None:
            raise ValueError(f"{name} was built with edge_dim={edge_dim}: pass edge_features")
        return run_layers(
            params["layers"],
            graph,
            x,
            key=key,
            training=training,
            stop_before_last=stop_before_last,
            edge_features=edge_features,
            **run_kwargs,
        )

    def apply(params, graph, x, *, key=None, training: bool = False, edge_features=None):
        return forward(params, graph, x, key, training, False, edge_features)

    def embed(params, graph, x, *, edge_features=None) -> jax.Array:
        return forward(params, graph, x, None, False, True, edge_features)

    return Model(init=init, apply=apply, embed=embed, name=name, config=config)


def _key(keys: list, i: int):
    return keys[i] if keys else None

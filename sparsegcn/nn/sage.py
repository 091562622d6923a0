"""GraphSAGE with the mean aggregator, as an ``init``/``apply`` pair.

One model runs on three views of the graph, chosen by the type of the graph
argument of ``apply``:

===========================================  ==================================
graph argument                               computes
===========================================  ==================================
:class:`~sparsegcn.Graph` (``mean_norm``-ed)  every node, full neighbourhoods,
                                             one ``propagate`` per layer
:class:`~sparsegcn.sampling.ChunkedGraph`    the same, layer by layer in node
                                             chunks: bounded memory (inference)
:class:`~sparsegcn.sampling.NeighborSample`  the seeds of a mini-batch, on
                                             their sampled computation tree
===========================================  ==================================

All three compute the same function: with fanouts at least the largest
degree, the sampled output equals the full one (tested).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.backends import DEFAULT_BACKEND, Backend, get_backend
from sparsegcn.features import Features, SparseFeatures, matmul
from sparsegcn.graph import Graph
from sparsegcn.nn.conv import propagate_view, transform_first
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.initializers import glorot_uniform
from sparsegcn.nn.model import Model, layer_sizes, split_dropout_keys
from sparsegcn.sampling.chunks import ChunkedGraph, map_chunks, propagate_chunk
from sparsegcn.sampling.neighbor import NeighborSample

_EPS = 1e-12


def l2_normalize(h: jax.Array) -> jax.Array:
    """``h / max(||h||_2, 1e-12)`` along the last axis (PyG's ``F.normalize``)."""
    norm = jnp.sqrt(jnp.sum(h * h, axis=-1, keepdims=True))
    return h / jnp.maximum(norm, jnp.asarray(_EPS, h.dtype))


def masked_mean(h: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``h [..., k, F]`` over its ``k`` axis, counting entries where ``mask [..., k]``.

    An all-masked row gives zeros, as ``mean_norm`` gives a node without
    in-edges a zero row.
    """
    weights = mask.astype(h.dtype)
    total = jnp.sum(h * weights[..., None], axis=-2)
    count = jnp.maximum(jnp.sum(weights, axis=-1, keepdims=True), jnp.ones((), h.dtype))
    return total / count


def _rows(x: jax.Array, ids: jax.Array) -> jax.Array:
    """``x[ids]`` for ids known to be in range; clipping is XLA's cheapest safe gather."""
    return jnp.take(x, ids, axis=0, mode="clip")


def _finish(params: dict, h: jax.Array, normalize: bool) -> jax.Array:
    h = h + params["b"][None, :]
    return l2_normalize(h) if normalize else h


def sage_conv(
    params: dict,
    graph: Graph,
    x: Features,
    *,
    backend: str | Backend | None = None,
    normalize: bool = False,
) -> jax.Array:
    """The GraphSAGE layer with the mean aggregator, over full neighbourhoods.

    .. math::

        h'_i = W_{\\mathrm{root}}^\\top x_i
             + W_{\\mathrm{neigh}}^\\top \\frac{1}{|N(i)|} \\sum_{j \\in N(i)} x_j + b,
        \\qquad h'_i \\leftarrow h'_i / \\lVert h'_i \\rVert_2 \\text{ if normalize}

    The mean is ``propagate(graph, x)`` with ``graph = mean_norm(g)`` (row
    normalization ``D^{-1} A``); a node without in-neighbours aggregates
    zero. The narrower side is propagated (``mean(x) W == mean(x W)``).

    Args:
      params: ``{"w_root": [F, F'], "w_neigh": [F, F'], "b": [F']}``.
      graph: ``mean_norm(g)``, ``N`` nodes, in any layout or view (an edge
        shard: ``x`` holds its rows).
      x: ``[N, F]`` dense or sparse features.
      backend: ``None`` for the graph's own product, or a backend to
        convert to on every call.
      normalize: L2-normalize each output row.

    Returns:
      ``[N, F']``.

    References:
      Hamilton, Ying & Leskovec, *Inductive Representation Learning on Large
      Graphs*, NeurIPS 2017, Algorithm 1 (mean aggregator, with the root
      weight kept separate as in PyG's ``SAGEConv``). https://arxiv.org/abs/1706.02216
    """
    w_root, w_neigh = params["w_root"], params["w_neigh"]
    if transform_first(w_neigh.shape[0], w_neigh.shape[1], x):
        neigh = propagate_view(graph, matmul(x, w_neigh), backend)
    else:
        neigh = propagate_view(graph, x, backend) @ w_neigh
    return _finish(params, matmul(x, w_root) + neigh, normalize)


def sage_conv_chunked(
    params: dict,
    chunked: ChunkedGraph,
    x: Features,
    *,
    backend: str | Backend = DEFAULT_BACKEND,
    normalize: bool = False,
    epilogue: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
) -> jax.Array:
    """:func:`sage_conv` computed ``chunked.chunk_size`` output rows at a time.

    Memory: the ``[N, F']`` output, plus per chunk ``max_chunk_edges`` gathered
    messages of width ``min(F, F')``; with ``F' < F`` (or sparse ``x``) also
    the two ``[N, F']`` projections. ``chunked.graph`` must be ``mean_norm``-ed.

    Args:
      params, x, backend, normalize: as :func:`sage_conv`.
      chunked: :class:`~sparsegcn.sampling.ChunkedGraph` of ``mean_norm(g)``.
      epilogue: ``epilogue(block [R, F'], rows [R]) -> [R, F']`` applied to
        each chunk's output (e.g. the activation), so that it makes no
        second ``[N, F']`` array.
    """
    w_root, w_neigh = params["w_root"], params["w_neigh"]

    def row_ids(chunk):
        return chunked.chunk_start(chunk) + jnp.arange(chunked.chunk_size, dtype=jnp.int32)

    # Projecting first makes two [N, F'] arrays: worth it only when it narrows.
    if isinstance(x, SparseFeatures) or w_neigh.shape[1] < w_neigh.shape[0]:
        root, neigh = matmul(x, w_root), matmul(x, w_neigh)

        def block(chunk, rows):
            agg = propagate_chunk(chunked, chunk, neigh, backend=backend)
            return _finish(params, _rows(root, rows) + agg, normalize)

    else:

        def block(chunk, rows):
            agg = propagate_chunk(chunked, chunk, x, backend=backend)
            return _finish(params, _rows(x, rows) @ w_root + agg @ w_neigh, normalize)

    def chunk_fn(chunk):
        rows = row_ids(chunk)
        out = block(chunk, rows)
        return out if epilogue is None else epilogue(out, rows)

    return map_chunks(chunked, chunk_fn)


def _project_first(x: Features, sample: NeighborSample, choice: bool | None) -> bool:
    """Whether layer 1 projects all ``N`` rows of ``x`` before gathering.

    ``(X W)[ids] == X[ids] W``: projecting first costs ``N`` rows of matmul,
    gathering first one row per tree entry above the leaves. Sparse ``X``
    rows cannot be gathered, so it is always projected.
    """
    if isinstance(x, SparseFeatures):
        if choice is False:
            raise ValueError(
                "project_first=False needs dense features; sparse rows can't be gathered"
            )
        return True
    if choice is not None:
        return choice
    inner = sum(int(level.size) for level in sample.nodes[:-1])
    return x.shape[0] <= inner


def sage(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 256,
    num_layers: int = 2,
    dropout_rate: float = 0.5,
    normalize: bool = False,
    residual: bool = False,
    backend: str | Backend | None = None,
    dropout_impl: str = "hash",
    project_first: bool | None = None,
) -> Model:
    """GraphSAGE-mean: dropout, SAGE layer and ReLU per layer, logits last.

    .. math::

        H^{(l+1)} = \\sigma\\big(\\mathrm{SAGE}(\\mathrm{drop}(H^{(l)}))\\big)
        \\; [+ H^{(l)} \\text{ if residual and shapes match}]

    with ``SAGE`` the layer of :func:`sage_conv` (L2-normalized on hidden
    layers when ``normalize``), ``σ = ReLU`` on hidden layers and the
    identity on the last.

    ``apply(params, graph, x, *, key=None, training=False)`` dispatches on
    ``graph`` (see the module table):

    - a :class:`~sparsegcn.Graph`, ``mean_norm(g)``: ``[N, C]`` logits;
    - a :class:`~sparsegcn.sampling.ChunkedGraph` built from ``mean_norm(g)``:
      the same ``[N, C]``, layer-wise in node chunks;
    - a :class:`~sparsegcn.sampling.NeighborSample` with one fanout per
      layer: ``[B, C]`` logits of its seeds, ``x`` being all ``[N, F]``
      features. Dropout draws one mask per tree entry (per node of the
      whole graph when layer 1 projects first; see ``project_first``).

    Args:
      in_features: ``F``.
      num_classes: ``C``.
      hidden: hidden width ``H``.
      num_layers: number of SAGE layers ``L`` (= number of sampling hops).
      dropout_rate: dropout before every layer.
      normalize: L2-normalize hidden layers' outputs (Hamilton et al.).
      residual: skip connections between hidden layers of equal width.
      backend: ``None`` (default): each graph's own layout; a backend name
        or instance converts full graphs on every call and picks the
        chunked views' product.
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.
      project_first: on a sample, compute ``X W`` for all ``N`` nodes and
        gather projected rows (``True``), or gather feature rows of the tree
        and project them (``False``); ``None`` picks the cheaper from the
        shapes. Equal results, different cost.

    Returns:
      A :class:`Model`. Params:
      ``{"layers": [{"w_root": [F_l, F_l+1], "w_neigh": [F_l, F_l+1], "b": [F_l+1]}, ...]}``.

    Shapes:
      ``apply(params, graph, x [N, F]) -> [N, C]``;
      ``apply(params, sample, x [N, F]) -> [B, C]``; ``embed(...) -> [N, H]``.

    References:
      Hamilton, Ying & Leskovec, *Inductive Representation Learning on Large
      Graphs*, NeurIPS 2017. https://arxiv.org/abs/1706.02216
    """
    sizes = layer_sizes(in_features, hidden, num_classes, num_layers)
    resolved = None if backend is None else get_backend(backend)
    chunk_backend = get_backend(DEFAULT_BACKEND) if resolved is None else resolved
    if not 0.0 <= dropout_rate < 1.0:
        raise ValueError(f"dropout_rate must be in [0, 1), got {dropout_rate}")
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        normalize=normalize,
        residual=residual,
        backend=None if resolved is None else resolved.name,
    )

    # Jitted: one small program instead of a dispatch (and compile) per op.
    @jax.jit
    def init(key: jax.Array) -> dict:
        keys = jax.random.split(key, 2 * num_layers)
        layers = []
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            layers.append(
                {
                    "w_root": glorot_uniform(keys[2 * i], (a, b)),
                    "w_neigh": glorot_uniform(keys[2 * i + 1], (a, b)),
                    "b": jnp.zeros((b,), jnp.float32),
                }
            )
        return {"layers": layers}

    def drop(h, key):
        return h if key is None else dropout(h, dropout_rate, key=key, impl=dropout_impl)

    def activate(h, skip, last):
        if last:
            return h
        h = jax.nn.relu(h)
        if residual and isinstance(skip, jax.Array) and skip.shape == h.shape:
            h = h + skip
        return h

    def forward_full(params, graph, x, key, training, stop_before_last):
        layers = params["layers"]
        keys = split_dropout_keys(key, len(layers), training, dropout_rate)
        h = x
        for i, (layer, layer_key) in enumerate(zip(layers, keys, strict=True)):
            last = i == len(layers) - 1
            if last and stop_before_last:
                return h
            hidden_norm = normalize and not last
            if isinstance(graph, ChunkedGraph):
                # The activation runs per chunk: one [N, H] array per layer, not two.
                def epilogue(block, rows, h=h, last=last):
                    same = residual and isinstance(h, jax.Array) and h.shape[1:] == block.shape[1:]
                    return activate(block, _rows(h, rows) if same else None, last)

                h = sage_conv_chunked(
                    layer,
                    graph,
                    drop(h, layer_key),
                    backend=chunk_backend,
                    normalize=hidden_norm,
                    epilogue=epilogue,
                )
            else:
                out = sage_conv(
                    layer, graph, drop(h, layer_key), backend=resolved, normalize=hidden_norm
                )
                h = activate(out, h, last)
        return h

    def forward_sampled(params, sample: NeighborSample, x, key, training):
        layers = params["layers"]
        if len(sample.fanouts) != len(layers):
            raise ValueError(
                f"the sample has {len(sample.fanouts)} hops (fanouts {sample.fanouts}) but the "
                f"model has {len(layers)} layers; they must match"
            )
        keys = split_dropout_keys(key, len(layers), training, dropout_rate)
        # All levels live in one flat [entries, F] array, level after level, so
        # each layer is two matmuls and one dropout whatever the depth.
        fanouts = sample.fanouts
        sizes = [int(level.size) for level in sample.nodes]
        offsets = np.cumsum([0, *sizes]).tolist()
        ids = jnp.concatenate([level.reshape(-1) for level in sample.nodes])
        child_masks = [m.reshape(sizes[d], fanouts[d]) for d, m in enumerate(sample.masks[1:])]

        def aggregate(h, parents: int):
            """Masked mean over each entry's children, for levels ``0..parents-1``."""
            means = [
                masked_mean(
                    h[offsets[d + 1] : offsets[d + 2]].reshape(sizes[d], fanouts[d], -1),
                    child_masks[d],
                )
                for d in range(parents)
            ]
            return jnp.concatenate(means) if len(means) > 1 else means[0]

        depth = len(layers)
        inner = offsets[depth]
        first = layers[0]
        if _project_first(x, sample, project_first):
            xd = drop(x, keys[0])
            root = _rows(matmul(xd, first["w_root"]), ids[:inner])
            h = root + aggregate(_rows(matmul(xd, first["w_neigh"]), ids), depth)
        else:
            xs = drop(_rows(x, ids), keys[0])
            h = xs[:inner] @ first["w_root"] + aggregate(xs, depth) @ first["w_neigh"]
        skip = _rows(x, ids[:inner]) if residual and isinstance(x, jax.Array) else None
        last = depth == 1
        h = activate(_finish(first, h, normalize and not last), skip, last)
        for i in range(1, depth):
            layer, last, parents = layers[i], i == depth - 1, depth - i
            inputs = drop(h, keys[i])
            out = (
                inputs[: offsets[parents]] @ layer["w_root"]
                + aggregate(inputs, parents) @ layer["w_neigh"]
            )
            h = activate(_finish(layer, out, normalize and not last), h[: offsets[parents]], last)
        return h

    def apply(params, graph, x: Features, *, key=None, training: bool = False):
        if isinstance(graph, NeighborSample):
            return forward_sampled(params, graph, x, key, training)
        return forward_full(params, graph, x, key, training, stop_before_last=False)

    def embed(params, graph, x: Features) -> jax.Array:
        if isinstance(graph, NeighborSample):
            raise TypeError("embed runs on a Graph or ChunkedGraph, not on a NeighborSample")
        return forward_full(params, graph, x, None, False, stop_before_last=True)

    return Model(init=init, apply=apply, embed=embed, name="sage", config=config)

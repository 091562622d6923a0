"""GraphSAGE (mean, max or sum aggregator), as an ``init``/``apply`` pair.

The layer is written once against the view protocol (:mod:`sparsegcn.views`)
and runs through :func:`~sparsegcn.nn.stack.run_layers`, so one model runs
on every view of the graph, chosen by the type of ``apply``'s graph:

===========================================  ==================================
graph argument                               computes
===========================================  ==================================
:class:`~sparsegcn.Graph` (any layout)       every node, full neighbourhoods
:class:`~sparsegcn.sampling.ChunkedGraph`    the same, layer by layer in node
                                             chunks: bounded memory (inference)
:class:`~sparsegcn.sampling.NeighborSample`  the seeds of a mini-batch, on
                                             their sampled computation tree
an edge shard inside ``shard_map``           this device's rows
===========================================  ==================================

All compute the same function: with fanouts at least the largest degree,
the sampled output equals the full one (tested). Neighbourhoods are
unweighted, as in PyG's ``SAGEConv``: edge weights are ignored.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp

from sparsegcn import _checks
from sparsegcn.backends import Backend, get_backend
from sparsegcn.features import Features, SparseFeatures, matmul
from sparsegcn.message_passing import message_passing
from sparsegcn.nn.conv import transform_first
from sparsegcn.nn.initializers import glorot_uniform
from sparsegcn.nn.jk import check_jk, jk_net
from sparsegcn.nn.model import Model, check_model_settings, layer_sizes
from sparsegcn.nn.stack import layered_model

_EPS = 1e-12

AGGREGATORS = ("mean", "max", "sum")


def l2_normalize(h: jax.Array) -> jax.Array:
    """``h / max(||h||_2, 1e-12)`` along the last axis (PyG's ``F.normalize``).

    The square root is taken of ``max(||h||², 1e-24)``: the same quotient, and a
    finite gradient at a zero row (a padded or featureless node), where the
    derivative of ``sqrt`` at 0 made every gradient NaN.
    """
    squared = jnp.sum(h * h, axis=-1, keepdims=True)
    return h / jnp.sqrt(jnp.maximum(squared, jnp.asarray(_EPS * _EPS, h.dtype)))


def projects_first(aggregator: str, fan_in: int, fan_out: int, h=None, view=None) -> bool:
    """Whether a layer multiplies its rows ``h`` by its weights before aggregating.

    ``mean`` and ``sum`` are linear, so ``agg(x) W == agg(x W)``: the choice
    is :func:`~sparsegcn.nn.conv.transform_first`'s cost rule with two
    matmuls per row (root and neighbour weights), on ``view`` when given.
    On a square graph that is "aggregate the narrower side"; on a sampled
    block, whose sources outnumber its targets, it aggregates first.
    Sparse inputs are always projected first. ``max`` does not commute with
    ``W``: PyG's ``SAGEConv(aggr="max")`` takes the maximum of the inputs,
    then projects. Without ``h``, the widths alone decide.
    """
    if aggregator == "max":
        return False
    if h is None:
        return fan_out <= fan_in
    return transform_first(fan_in, fan_out, h, view, products=2)


def sage_project(params: dict, h: Features, aggregator: str = "mean", view=None):
    """The row-wise part of a layer: ``[h W_root, h W_neigh]`` stacked on axis 1
    when the layer projects first on ``view`` (:func:`projects_first`), else
    ``h`` itself."""
    w_root, w_neigh = params["w_root"], params["w_neigh"]
    fan_in, fan_out = w_root.shape
    if projects_first(aggregator, fan_in, fan_out, h, view):
        return jnp.stack([matmul(h, w_root), matmul(h, w_neigh)], axis=1)
    if isinstance(h, SparseFeatures):
        # The maximum is taken over the input rows themselves, which sparse rows are
        # not (no gather, no elementwise max): the layer reads them dense, as PyG's.
        return h.todense()
    return h


def sage_propagate(
    params: dict, graph, z: jax.Array, *, aggregator: str = "mean", normalize: bool = False
) -> jax.Array:
    """The neighbourhood part of a layer, on any view, from :func:`sage_project`'s ``z``.

    .. math::

        h'_i = W_{\\mathrm{root}}^\\top x_i
             + W_{\\mathrm{neigh}}^\\top \\mathop{\\mathrm{agg}}_{j \\in N(i)} x_j + b,
        \\qquad h'_i \\leftarrow h'_i / \\lVert h'_i \\rVert_2 \\text{ if normalize}

    A node without neighbours aggregates zero. Edge weights are ignored.
    """
    unweighted = None
    if graph.weights is not None:
        unweighted = jnp.ones(jnp.shape(graph.weights), jnp.float32)
    if z.ndim == 3:  # projected: [rows, 2, F']
        root = graph.targets(z[:, 0])
        neigh = message_passing(
            graph, graph.sources(z[:, 1]), aggregate=aggregator, edge_weight=unweighted
        )
    else:
        root = matmul(graph.targets(z), params["w_root"])
        agg = message_passing(graph, graph.sources(z), aggregate=aggregator, edge_weight=unweighted)
        neigh = agg @ params["w_neigh"]
    h = root + neigh + params["b"][None, :]
    return l2_normalize(h) if normalize else h


def sage_conv(
    params: dict,
    graph,
    x: Features,
    *,
    backend: str | Backend | None = None,
    normalize: bool = False,
    aggregator: str = "mean",
) -> jax.Array:
    """One GraphSAGE layer over full neighbourhoods (``x`` holds every node's row).

    Args:
      params: ``{"w_root": [F, F'], "w_neigh": [F, F'], "b": [F']}``.
      graph: the graph (any layout or view; weights ignored), ``N`` nodes.
      x: ``[N, F]`` dense or sparse features.
      backend: ``None`` for the graph's own layout, or a backend name or
        instance to convert to first (on every call).
      normalize: L2-normalize each output row.
      aggregator: ``"mean"`` (default), ``"max"`` or ``"sum"``.

    Returns:
      ``[N, F']``.

    References:
      Hamilton, Ying & Leskovec, *Inductive Representation Learning on Large
      Graphs*, NeurIPS 2017, Algorithm 1 (with the root weight kept
      separate as in PyG's ``SAGEConv``). https://arxiv.org/abs/1706.02216
    """
    view = graph if backend is None else get_backend(backend).view(graph)
    z = sage_project(params, x, aggregator, view)
    return sage_propagate(params, view, z, aggregator=aggregator, normalize=normalize)


def sage_layer_params(key: jax.Array, fan_in: int, fan_out: int) -> dict:
    """One layer's ``{"w_root": [F, F'], "w_neigh": [F, F'], "b": [F']}`` (Glorot, zero bias)."""
    keys = jax.random.split(key, 2)
    return {
        "w_root": glorot_uniform(keys[0], (fan_in, fan_out)),
        "w_neigh": glorot_uniform(keys[1], (fan_in, fan_out)),
        "b": jnp.zeros((fan_out,), jnp.float32),
    }


def sage(
    in_features: int,
    num_classes: int,
    *,
    hidden: int = 256,
    num_layers: int = 2,
    dropout_rate: float = 0.5,
    aggregator: str = "mean",
    normalize: bool = False,
    residual: bool = False,
    dropout_impl: str = "hash",
    project_first: bool | None = None,
    jk: str = "none",
) -> Model:
    """GraphSAGE: dropout, SAGE layer and ReLU per layer, logits last.

    .. math::

        H^{(l+1)} = \\sigma\\big(\\mathrm{SAGE}(\\mathrm{drop}(H^{(l)}))\\big)
        \\; [+ H^{(l)} \\text{ if residual and shapes match}]

    with ``SAGE`` the layer of :func:`sage_conv` (L2-normalized on hidden
    layers when ``normalize``), ``σ = ReLU`` on hidden layers and the
    identity on the last. ``apply(params, graph, x, *, key=None,
    training=False)`` runs on any view (see the module table).

    Args:
      in_features: ``F``.
      num_classes: ``C``.
      hidden: hidden width ``H``.
      num_layers: number of SAGE layers ``L`` (= number of sampling hops).
      dropout_rate: dropout before every layer.
      aggregator: ``"mean"`` (Hamilton et al.'s default), ``"max"`` (PyG's
        ``aggr="max"``: the element-wise maximum of the neighbours' rows,
        then ``W_neigh``) or ``"sum"``.
      normalize: L2-normalize hidden layers' outputs (Hamilton et al.).
      residual: skip connections between hidden layers of equal width.
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.
      project_first: on a sample, run the first layer's row-wise step on
        all ``N`` rows of ``x`` and gather the sample's rows of its result
        (``True``), or gather the sample's rows of ``x`` first (``False``);
        ``None`` gathers first when ``N`` exceeds the sample's rows. Whether
        that step multiplies by the weights is :func:`projects_first`'s
        rule on the layer's block. Equal results, different cost.
      jk: ``"none"`` (default), or ``"cat"``/``"max"`` for JK-Net over SAGE
        layers (:func:`~sparsegcn.nn.jk.jk_net`): ``num_layers`` layers of
        width ``hidden``, all ReLU (and L2-normalized when ``normalize``),
        their outputs combined per node, then a linear classifier; on a
        sample the seeds' rows of each layer are combined. Not with
        ``residual``.

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
    check_model_settings(
        hidden,
        num_layers,
        dropout_rate,
        in_features=in_features,
        num_classes=num_classes,
        flags={"normalize": normalize, "residual": residual},
    )
    sizes = layer_sizes(in_features, hidden, num_classes, num_layers)
    if not 0.0 <= dropout_rate < 1.0:
        raise ValueError(f"dropout_rate must be in [0, 1), got {dropout_rate}")
    if aggregator not in AGGREGATORS:
        raise ValueError(f"aggregator must be one of {AGGREGATORS}, got {aggregator!r}")
    _checks.check_static_int("hidden", hidden, minimum=1)
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout_rate,
        aggregator=aggregator,
        normalize=normalize,
        residual=residual,
    )
    check_jk(jk, residual)
    gather_first = None if project_first is None else not project_first

    def project(layer, h, i, view):
        return sage_project(layer, h, aggregator, view)

    if jk != "none":

        def propagate_all(layer, view, z, key, i):
            return sage_propagate(layer, view, z, aggregator=aggregator, normalize=normalize)

        return jk_net(
            "sage",
            dict(config, jk=jk),
            init_layer=sage_layer_params,
            project=project,
            propagate=propagate_all,
            in_features=in_features,
            num_classes=num_classes,
            hidden=hidden,
            num_layers=num_layers,
            dropout_rate=dropout_rate,
            mode=jk,
            dropout_impl=dropout_impl,
            gather_first=gather_first,
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

    def propagate(layer, view, z, key, i):
        hidden_norm = normalize and i < num_layers - 1
        return sage_propagate(layer, view, z, aggregator=aggregator, normalize=hidden_norm)

    return layered_model(
        init,
        "sage",
        config,
        project=project,
        propagate=propagate,
        dropout_rate=dropout_rate,
        dropout_impl=dropout_impl,
        residual=residual,
        gather_first=gather_first,
    )

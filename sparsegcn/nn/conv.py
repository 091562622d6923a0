"""Graph convolution layers as pure functions of ``(params, graph, x)``."""

from __future__ import annotations

import jax

from sparsegcn.backends import Backend, propagate
from sparsegcn.backends.base import fence
from sparsegcn.features import Features, SparseFeatures, matmul
from sparsegcn.graph import Graph
from sparsegcn.sampling.chunks import ChunkedGraph

# What reading and adding one aggregated element costs, in multiply-adds of
# a dense matmul: a gather/segment step is memory-bound, a matmul is not
# (this CPU: ~67 GFLOP/s against ~1-2 G aggregated floats/s).
AGGREGATE_COST = 32


def transform_first(
    in_features: int, out_features: int, x: Features, view=None, *, products: int = 1
) -> bool:
    """Whether to compute ``Â (X W)`` rather than ``(Â X) W``.

    Both are equal. ``X W`` multiplies every row ``x`` holds (``R``);
    ``(Â X) W`` multiplies only the view's targets (``T = view.num_dst``)
    but aggregates the wider side. With ``E ≈ max(R, T)`` aggregated rows
    and ``p = products`` matmuls per row (SAGE's root and neighbour
    weights: 2), projecting first costs ``p R F F' + c E F'`` against
    ``p T F F' + c E F`` (``c`` = :data:`AGGREGATE_COST`), and the cheaper
    one wins, ties to projecting first.

    On a square graph, a row chunk or an edge shard ``R = T``, so this is
    "propagate the narrower matrix". A sampled block has several source
    rows per target (a tree: about the fanout), so it aggregates first
    unless the output is much narrower: projecting all sources of a
    256-wide layer of a 15,10,5 tree multiplies 10x the rows it needs.
    Without a view, ``R = T``. Sparse ``X`` is always transformed first (it
    cannot be propagated densely).

    A :class:`~sparsegcn.sampling.ChunkedGraph` (layer-by-layer inference in
    bounded memory, every chunk's targets together cover the graph) is
    square, and there ties go the other way: to aggregating first. The two
    cost the same, but projecting first builds ``products`` arrays of
    ``[N, F']`` beside the layer's ``[N, F']`` output (SAGE: 6 GB a layer at
    ogbl-citation2's 2.9 M nodes and 256 features), aggregating first none.
    """
    if isinstance(x, SparseFeatures):
        return True
    rows = int(x.shape[0])
    targets = rows if view is None or isinstance(view, ChunkedGraph) else int(view.num_dst)
    edges = max(rows, targets)
    per_row = products * in_features * out_features
    first = per_row * rows + AGGREGATE_COST * edges * out_features
    later = per_row * targets + AGGREGATE_COST * edges * in_features
    if isinstance(view, ChunkedGraph):
        return first < later
    return first <= later


def propagate_view(graph, h: jax.Array, backend: str | Backend | None = None) -> jax.Array:
    """``A h`` on any view (:mod:`sparsegcn.views`): ``graph.product(graph.sources(h))``.

    ``backend`` (a name or instance) converts a :class:`~sparsegcn.Graph`
    on every call instead (:func:`~sparsegcn.propagate`); ``None`` runs the
    view's own product, which is what a prepared graph wants.
    """
    if backend is None:
        return graph.product(graph.sources(h))
    return propagate(graph, h, backend=backend)


def gcn_project(params: dict, x: Features, view=None):
    """The row-wise part of a GCN layer: ``x W`` when that is cheaper on
    ``view`` (see :func:`transform_first`), else ``x`` itself (propagated first)."""
    w = params["w"]
    if transform_first(w.shape[0], w.shape[1], x, view):
        if isinstance(x, SparseFeatures):
            # X W gathers rows of W per stored value: without the fence XLA
            # fuses the values' producer (dropout's hash) into that gather
            # and hashes each value once per output feature (measured 2x
            # slower on Cora).
            x = x.with_values(fence(x.values, x.rows))
        return matmul(x, w)
    return x


def gcn_propagate(
    params: dict,
    graph,
    z: jax.Array,
    *,
    backend: str | Backend | None = None,
    projected: bool | None = None,
) -> jax.Array:
    """The neighbourhood part of a GCN layer, on any view: ``Â z (W) + b``.

    ``projected`` says whether ``z`` is :func:`gcn_project`'s ``x W``
    (``True``) or ``x`` (``False``: multiplied by ``W`` after propagating);
    ``None`` tells them apart by width, which needs ``F != F'``.

    Raises:
      ValueError: ``projected=None`` with a square ``W`` (``F == F'``), where
        ``x W`` and ``x`` have the same width and either could be meant;
        ``projected=True`` with ``z`` not ``F'`` wide.
    """
    fan_in, fan_out = params["w"].shape
    if projected is None:
        if fan_in == fan_out:
            raise ValueError(
                f"gcn_propagate: W is square ({fan_in} x {fan_out}), so z's width cannot say "
                "whether it is gcn_project's x W or x itself; pass projected=True or False "
                "(gcn_project projected it exactly when transform_first(...) is True)"
            )
        projected = z.shape[-1] == fan_out
    if projected and z.shape[-1] != fan_out:  # not projected: matmul names the shapes
        raise ValueError(
            f"gcn_propagate: z has {z.shape[-1]} columns, but projected=True needs "
            f"{fan_out} (W is {fan_in} x {fan_out})"
        )
    h = propagate_view(graph, z, backend)
    if not projected:  # (Â X) W
        h = matmul(h, params["w"])
    return h + params["b"][None, :] if "b" in params else h


def gcn_conv(
    params: dict, graph: Graph, x: Features, *, backend: str | Backend | None = None
) -> jax.Array:
    """Graph convolution of Kipf & Welling.

    .. math:: H' = \\hat A \\, X W + b

    with ``Â`` the edge weights of ``graph`` (pass ``gcn_norm(graph)``).
    Both ``Â (X W)`` and ``(Â X) W`` are equal; the narrower one is
    propagated (:func:`transform_first`).

    Args:
      params: ``{"w": [F, F'], "b": [F']}`` (``b`` optional).
      graph: the normalized adjacency, ``N`` nodes, in any layout, or any
        view of it (an edge shard, say).
      x: ``[N, F]`` dense or sparse features (the view's rows).
      backend: ``None`` for the graph's own product, or a backend to
        convert to on every call (see :func:`propagate_view`).

    Returns:
      ``[N, F']``.

    Shapes:
      ``x: [N, F] -> [N, F']``.

    References:
      Kipf & Welling, *Semi-Supervised Classification with Graph
      Convolutional Networks*, ICLR 2017. https://arxiv.org/abs/1609.02907
    """
    w = params["w"]
    projected = transform_first(w.shape[0], w.shape[1], x)  # gcn_project's own choice
    return gcn_propagate(
        params, graph, gcn_project(params, x), backend=backend, projected=projected
    )

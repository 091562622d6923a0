"""Edge-sharded propagation: ``A @ x`` with the edges split over ``D`` devices.

For graphs whose edges do not fit one device. Nodes are cut into ``D``
equal ranges of ``R = ceil(N / D)`` rows (padded to ``D R``); device ``d``
owns output rows ``[d R, (d + 1) R)`` and stores exactly the edges whose
receiver lies in its range, padded to the largest shard's edge count ``S``
(padding edges point at a spill row ``R`` that is dropped). Node arrays are
row-sharded the same way, so a product reads

.. math::

    y_{[dR,(d+1)R)} = A_{[dR,(d+1)R),\\,:}\\; \\mathrm{all\\_gather}_d\\big(x_{[dR,(d+1)R)}\\big)

on device ``d``: one ``all_gather`` of ``x`` (``N x F`` values per
device), then a local gather and ``segment_sum`` over ``S`` edges; no
device holds more than its share of the edges. Differentiating transposes
the ``all_gather`` into a ``psum_scatter``: each device's cotangent
contributions to every sender row are summed onto the row's owner.

The per-device cost is set by the largest shard, so :attr:`EdgeShardedGraph.balance`
reports ``D S / E`` (1.0 is a perfect split; power-law graphs whose hubs
share a range do worse; reordering nodes first helps).

Everything here runs inside ``jax.shard_map`` over mesh axis
:data:`~sparsegcn.parallel.mesh.AXIS`; :func:`edge_sharded_propagate` wraps one
product for use outside, and :func:`edge_sharded_model` a whole model.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from sparsegcn import _checks
from sparsegcn.backends.base import Backend
from sparsegcn.backends.segment import gather_scatter
from sparsegcn.features import Features, SparseFeatures
from sparsegcn.graph import Graph
from sparsegcn.nn import Model
from sparsegcn.parallel.mesh import AXIS, as_mesh
from sparsegcn.views import EdgeListView, broadcast_edges

Array = Any


def rows_per_shard(num_nodes: int, num_shards: int) -> int:
    """``R = max(ceil(N / D), 1)``, the output rows each device owns."""
    return max(-(-int(num_nodes) // int(num_shards)), 1)


@dataclasses.dataclass(frozen=True, eq=False)
class EdgeShardedGraph(EdgeListView):
    """A graph's edges partitioned by receiver range into ``D`` padded shards; a pytree.

    Shard ``d`` occupies entries ``[d S, (d + 1) S)`` of every edge array,
    so sharding the leading axis over a ``D``-device mesh (``P(AXIS)``)
    gives each device its own edges; inside ``shard_map`` the same class
    describes one shard (arrays of length ``S``).

    Attributes:
      senders: int32 ``[D S]`` global sender ids in ``[0, N)`` (0 for padding).
      receivers: int32 ``[D S]`` receiver ids local to the shard's row
        range, in ``[0, R)``; padding edges hold ``R`` (the spill row).
      weights: float32 ``[D S]`` (0 for padding), or ``None`` for all ones.
      edge_ids: int32 ``[D S]`` position of each entry in the source edge
        list, ``-1`` for padding, or ``None`` once dropped (it is only
        needed to map edge data to and from the shards, on the host).
      num_nodes: static ``N``.
      num_shards: static ``D``.
      rows_per_shard: static ``R = max(ceil(N / D), 1)``.
      shard_edges: static ``S``, the largest shard's edge count (at least 1).
      edge_features: float32 ``[D S, F_e]``, the source graph's
        ``edge_features`` moved with their edges (zeros for padding), or
        ``None`` when the graph has none.

    Within a shard, edges are sorted by (receiver, sender); duplicates and
    self-loops are kept, nothing is dropped.
    """

    senders: Array
    receivers: Array
    weights: Array | None
    edge_ids: Array | None
    num_nodes: int
    num_shards: int
    rows_per_shard: int
    shard_edges: int
    edge_features: Array | None = None

    @classmethod
    def build(cls, graph: Graph, num_shards: int) -> EdgeShardedGraph:
        """Partitions ``graph``'s edges by receiver range; host-side, once.

        Args:
          graph: a :class:`~sparsegcn.Graph` (weights kept; e.g. ``gcn_norm(g)``).
          num_shards: ``D >= 1``, the device count.

        Raises:
          TypeError: ``graph`` is not a Graph, or its arrays are traced.
          ValueError: ``num_shards < 1``.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"EdgeShardedGraph.build expects a Graph, got {type(graph).__name__}")
        d = _checks.check_static_int("num_shards", num_shards, minimum=1)
        n = graph.num_nodes
        r = rows_per_shard(n, d)
        senders = _checks.as_host("graph.senders", graph.senders).astype(np.int64)
        receivers = _checks.as_host("graph.receivers", graph.receivers).astype(np.int64)
        weights = None
        if graph.weights is not None:
            weights = _checks.as_host("graph.weights", graph.weights).astype(np.float32)
        order = np.lexsort((senders, receivers))
        shard = receivers[order] // r
        counts = np.bincount(shard, minlength=d)
        s = max(int(counts.max()) if counts.size else 0, 1)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slots = shard * s + (np.arange(order.shape[0]) - starts[shard])
        out_senders = np.zeros(d * s, np.int32)
        out_receivers = np.full(d * s, r, np.int32)
        out_ids = np.full(d * s, -1, np.int32 if order.shape[0] < 2**31 else np.int64)
        out_senders[slots] = senders[order]
        out_receivers[slots] = receivers[order] - shard * r
        out_ids[slots] = order
        out_weights = None
        if weights is not None:
            out_weights = np.zeros(d * s, np.float32)
            out_weights[slots] = weights[order]
        out_features = None
        if graph.edge_features is not None:
            features = np.asarray(graph.edge_features, np.float32)
            out_features = np.zeros((d * s, features.shape[1]), np.float32)
            out_features[slots] = features[order]
        return cls(
            out_senders, out_receivers, out_weights, out_ids, n, d, r, s, edge_features=out_features
        )

    # -- the view protocol, for one shard inside shard_map (sparsegcn.views) --
    edges_sorted = True
    layout_name = "edge_sharded"

    @property
    def num_src(self) -> int:
        """``D R``: a shard's sources are every device's rows, all-gathered."""
        return self.padded_nodes

    @property
    def num_dst(self) -> int:
        """``R``: a shard's targets are its own rows."""
        return self.rows_per_shard

    @property
    def edge_mask(self) -> jax.Array:
        """Real edges; padding edges point at the spill row ``R``."""
        return self.receivers < self.rows_per_shard

    def sources(self, h: jax.Array) -> jax.Array:
        """Every device's rows of ``h [R, ...]``: ``[D R, ...]`` (an ``all_gather``;
        its transpose sums cotangents onto each row's owner)."""
        return jax.lax.all_gather(h, AXIS, tiled=True)

    def product(self, x_src, edge_weight=None) -> jax.Array:
        if edge_weight is None:
            edge_weight = self.weights
        messages = self.gather_src(jnp.asarray(x_src))
        w = self.edge_factors(edge_weight, messages.dtype)
        if w is not None:  # always set: a shard's edge_mask is never None
            messages = messages * broadcast_edges(w, messages)
        # Receivers are sorted within a shard; the spill row R is dropped.
        return jax.ops.segment_sum(
            messages, self.receivers, self.rows_per_shard, indices_are_sorted=True
        )

    @property
    def padded_nodes(self) -> int:
        """``D R``, the row count of row-sharded node arrays."""
        return self.num_shards * self.rows_per_shard

    @property
    def balance(self) -> float:
        """``D S / E``: per-device edge work relative to a perfect split (>= 1)."""
        real = int(np.sum(np.asarray(self.receivers) < self.rows_per_shard))
        return self.num_shards * self.shard_edges / max(real, 1)

    def without_edge_ids(self) -> EdgeShardedGraph:
        """The same graph without :attr:`edge_ids` (a quarter less to put on devices)."""
        return dataclasses.replace(self, edge_ids=None)

    def edge_values(self, sharded) -> np.ndarray:
        """Per-edge values in shard layout ``[D S]`` back in source edge order ``[E]``.

        E.g. the gradient with respect to :attr:`weights`; padding entries
        are dropped. Host-side; needs :attr:`edge_ids`.
        """
        if self.edge_ids is None:
            raise ValueError("this EdgeShardedGraph has no edge_ids (dropped); rebuild it")
        ids = np.asarray(self.edge_ids)
        values = np.asarray(sharded)
        if values.shape[:1] != ids.shape:
            raise ValueError(
                f"expected values of shape ({ids.shape[0]}, ...), one per shard slot, got "
                f"{values.shape}"
            )
        real = ids >= 0
        out = np.zeros((int(real.sum()), *values.shape[1:]), values.dtype)
        out[ids[real]] = values[real]
        return out

    def tree_flatten_with_keys(self):
        names = ("senders", "receivers", "weights", "edge_ids", "edge_features")
        children = tuple((jax.tree_util.GetAttrKey(k), getattr(self, k)) for k in names)
        return children, (self.num_nodes, self.num_shards, self.rows_per_shard, self.shard_edges)

    @classmethod
    def tree_unflatten(cls, static, children):
        return cls(*children[:4], *static, edge_features=children[4])

    def __repr__(self) -> str:
        return (
            f"EdgeShardedGraph(num_nodes={self.num_nodes}, num_shards={self.num_shards}, "
            f"rows_per_shard={self.rows_per_shard}, shard_edges={self.shard_edges})"
        )


jax.tree_util.register_pytree_with_keys_class(EdgeShardedGraph)


def propagate_shard(shard: EdgeShardedGraph, x: jax.Array, axis_name: str = AXIS) -> jax.Array:
    """This device's ``R`` rows of ``A @ x``; call inside ``shard_map`` over ``axis_name``.

    Args:
      shard: this device's :class:`EdgeShardedGraph` shard (arrays ``[S]``).
      x: ``[R, ...]`` this device's rows of the node values.
      axis_name: the mesh axis the graph is sharded over (size ``D``).

    Returns:
      ``[R, ...]``: rows ``[d R, (d + 1) R)`` of ``A @ x``.
    """
    rows = shard.rows_per_shard
    if x.shape[0] != rows:
        raise ValueError(
            f"x must hold this device's {rows} rows (rows_per_shard), got shape {x.shape}"
        )
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        raise TypeError(f"x must have a floating dtype, got {x.dtype}")
    full = jax.lax.all_gather(x, axis_name, tiled=True)
    weights = None if shard.weights is None else shard.weights.astype(x.dtype)
    out = gather_scatter(
        shard.senders, shard.receivers, weights, full, rows + 1, indices_are_sorted=True
    )
    return out[:rows]


@dataclasses.dataclass(frozen=True)
class EdgeSharded(Backend):
    """The propagation backend of edge-sharded models: :func:`propagate_shard`.

    Pass it as a model's ``backend`` (``gcn(..., backend=EdgeSharded())``)
    and apply the model inside ``shard_map`` to an :class:`EdgeShardedGraph`
    shard and this device's rows of the features (see
    :func:`edge_sharded_model`, which does this).

    Attributes:
      axis_name: the mesh axis the edges are sharded over.
    """

    axis_name: str = AXIS
    name: ClassVar[str] = "edge_sharded"

    def __call__(self, graph, x: jax.Array) -> jax.Array:
        if not isinstance(graph, EdgeShardedGraph):
            raise TypeError(
                f"the edge_sharded backend propagates over an EdgeShardedGraph shard inside "
                f"shard_map, got {type(graph).__name__}"
            )
        return propagate_shard(graph, jnp.asarray(x), self.axis_name)


def pad_rows(x, num_rows: int, fill=0) -> np.ndarray:
    """Host array ``x [N, ...]`` with ``fill`` rows appended up to ``num_rows``."""
    host = np.asarray(x)
    pad = num_rows - host.shape[0]
    if pad < 0:
        raise ValueError(f"cannot pad {host.shape[0]} rows down to {num_rows}")
    return np.concatenate([host, np.full((pad, *host.shape[1:]), fill, host.dtype)])


def shard_features(features: Features, num_shards: int) -> Features:
    """Node features row-sharded like an :class:`EdgeShardedGraph` of the same ``N``; host-side.

    Dense ``[N, F]`` features become ``[D R, F]`` (zero rows appended). A
    :class:`~sparsegcn.SparseFeatures` becomes one whose arrays stack ``D``
    blocks of ``M`` stored values (``M`` the largest shard's count; padding
    values are zeros in the shard's last row), with rows local to the shard
    and static shape ``(R, F)``: the shape each device sees inside
    ``shard_map`` once the arrays are split with ``P(AXIS)``.
    """
    d = _checks.check_static_int("num_shards", num_shards, minimum=1)
    if not isinstance(features, SparseFeatures):
        host = _checks.as_host("features", features)
        return pad_rows(host.astype(np.float32, copy=False), d * rows_per_shard(host.shape[0], d))
    n, f = features.shape
    r = rows_per_shard(n, d)
    rows = np.asarray(features.rows, np.int64)
    cols, values = np.asarray(features.cols), np.asarray(features.values, np.float32)
    shard = rows // r
    counts = np.bincount(shard, minlength=d)
    m = max(int(counts.max()) if counts.size else 0, 1)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slots = shard * m + (np.arange(rows.shape[0]) - starts[shard])
    out_rows = np.full(d * m, r - 1, np.int32)
    out_cols = np.zeros(d * m, np.int32)
    out_values = np.zeros(d * m, np.float32)
    out_rows[slots] = rows - shard * r
    out_cols[slots] = cols
    out_values[slots] = values
    return SparseFeatures.tree_unflatten((r, f), (out_rows, out_cols, out_values))


def edge_sharded_propagate(graph: EdgeShardedGraph, x, devices: int | Mesh) -> jax.Array:
    """``A @ x`` computed edge-sharded over ``devices``; equals ``propagate(graph, x)``.

    Differentiable with respect to ``x`` and to ``graph.weights`` (in shard
    layout; :meth:`EdgeShardedGraph.edge_values` maps them back).

    Args:
      graph: an :class:`EdgeShardedGraph` with ``num_shards`` equal to the
        mesh size (``edge_ids`` may be present; it is not used).
      x: ``[N, ...]`` node values (floating).
      devices: local device count or a mesh (see :func:`~sparsegcn.parallel.make_mesh`).

    Returns:
      ``[N, ...]``.
    """
    mesh = as_mesh(devices)
    if graph.num_shards != mesh.size:
        raise ValueError(
            f"the graph has {graph.num_shards} shards but the mesh has {mesh.size} devices"
        )
    x = jnp.asarray(x)
    _checks.check_num_rows("x", x.shape, graph.num_nodes)
    return _sharded_product(graph.without_edge_ids(), x, mesh)


# Jitted with the mesh static: an eager shard_map would run (and compile) its
# body op by op.
@functools.partial(jax.jit, static_argnames="mesh")
def _sharded_product(graph: EdgeShardedGraph, x: jax.Array, mesh: Mesh) -> jax.Array:
    run = jax.shard_map(
        lambda g, xs: propagate_shard(g, xs, AXIS),
        mesh=mesh,
        in_specs=(P(AXIS), P(AXIS)),
        out_specs=P(AXIS),
    )
    pad = [(0, graph.padded_nodes - graph.num_nodes)] + [(0, 0)] * (x.ndim - 1)
    return run(graph, jnp.pad(x, pad))[: graph.num_nodes]


def edge_sharded_model(model: Model, axis_name: str = AXIS) -> Model:
    """``model`` run edge-sharded inside ``shard_map`` over ``axis_name``.

    Every model is written against the view protocol (:mod:`sparsegcn.views`)
    and an :class:`EdgeShardedGraph` shard is such a view (sources
    all-gathered, targets its own rows), so the model runs unchanged (same
    params). Its ``apply(params, shard, x_rows, *, key, training)`` takes
    this device's graph shard and feature rows (``[R, F]``) and returns the
    logits of **all** ``D R`` rows, all-gathered and identical on every
    device (so a loss over them is replicated and its gradient needs no
    further collective; gathering ``[D R, C]`` logits costs one more
    ``all_gather`` of the size each layer already does). ``embed`` likewise
    returns all ``[D R, H]`` rows.

    Dropout: with ``D > 1`` device ``d`` draws its rows' masks from
    ``fold_in(key, d)``; the masks therefore differ from a single-device
    run's (same distribution), and equal it when ``D = 1``.

    Raises:
      ValueError: ``axis_name`` is not the axis shards are gathered over.
    """
    if axis_name != AXIS:
        raise ValueError(f"edge shards gather over the mesh axis {AXIS!r}, got {axis_name!r}")
    inner = model

    def gather(rows: jax.Array) -> jax.Array:
        return jax.lax.all_gather(rows, axis_name, tiled=True, to="invarying")

    def apply(params, graph, x: Features, *, key=None, training: bool = False):
        if key is not None and jax.lax.axis_size(axis_name) > 1:
            key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))
        return gather(inner.apply(params, graph, x, key=key, training=training))

    def embed(params, graph, x: Features) -> jax.Array:
        return gather(inner.embed(params, graph, x))

    return Model(
        init=inner.init,
        apply=apply,
        embed=embed,
        name=inner.name,
        config=dict(inner.config, backend=EdgeSharded.name),
    )

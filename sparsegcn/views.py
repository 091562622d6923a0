"""Graph views: the small protocol every graph layout answers, and its edge-list form.

Message passing reads a graph through five operations, whatever the graph's
storage. A *view* maps the rows of a node array ``h`` that a layer holds to
the two sides of a bipartite graph, sources and targets, and moves values
along its ``E`` edges ``s_e -> r_e``:

=========================  ====================================================
``sources(h)``             ``x_src [num_src, ...]``: the rows messages come from
``targets(h)``             ``x_dst [num_dst, ...]``: the rows that receive
``product(x_src, w)``      ``y_r = sum_{e: r_e = r} w_e x_src[s_e]``, the fused
                           weighted sum (``w`` ``[E]`` or ``[E, H]`` per head;
                           the view's own weights when ``None``)
``aggregate(m, reduce)``   reduces per-edge messages ``m [E, ...]`` into
                           ``[num_dst, ...]`` (``sum``, ``mean``, ``max``,
                           ``min``)
``softmax(scores)``        ``scores [E, ...]`` normalized over each target's
                           incoming edges
=========================  ====================================================

plus ``gather_src``/``gather_dst`` (per-edge rows), ``in_count`` (edges per
target) and ``layout_name``, the name reports print. A square
:class:`~sparsegcn.Graph` is the view whose both sides are all ``N`` nodes;
a sampled block, a row chunk or an edge shard is bipartite. Every layer is
written once against this protocol, so the full graph, a mini-batch and a
shard run the same code, and each layout brings its fastest product: the
edge list gathers and scatters (:class:`EdgeListView`), packed layouts run
native CSR or fused ELL products, BCOO and dense run their matrices.

Masked edges (``edge_mask`` ``False``: padding of static shapes) carry no
message: they are left out of sums, means, maxima and softmax
normalizations alike.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn import _checks
from sparsegcn.ops import gather_rows, segment_reduce, segment_softmax, segment_sum

Array = Any

REDUCES = ("sum", "mean", "max", "min")


def masked_messages(messages: jax.Array, mask) -> jax.Array:
    """``messages [E, ...]`` with the entries of masked edges (``mask [E]``
    ``False``) set to 0 by a select, not a product: a non-finite value on a
    padding edge gives 0, not ``0 * inf = NaN``, forward and in the gradient
    of what it multiplies. ``mask=None`` returns ``messages``."""
    if mask is None:
        return messages
    keep = broadcast_edges(jnp.asarray(mask), messages)
    return jnp.where(keep, messages, jnp.zeros((), messages.dtype))


def reduce_fill(reduce: str, dtype) -> jax.Array:
    """The identity of ``max`` (``min``) in ``dtype``: ``-inf`` (``inf``) for
    floats, the integer type's minimum (maximum), ``False`` (``True``) for bool."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.inexact):
        value = -jnp.inf if reduce == "max" else jnp.inf
    elif dtype == jnp.bool_:
        value = reduce != "max"
    else:
        info = jnp.iinfo(dtype)
        value = info.min if reduce == "max" else info.max
    return jnp.asarray(value, dtype)


def broadcast_edges(w: jax.Array, like: jax.Array) -> jax.Array:
    """``w [E]`` or ``[E, H]`` reshaped to broadcast against messages ``like [E, ...]``."""
    return w.reshape(w.shape + (1,) * (like.ndim - w.ndim))


def check_edge_weight(edge_weight, num_edges: int, like_shape=None, like: str = "x") -> None:
    """Raises unless ``edge_weight`` is ``[E]``, or ``[E, H]`` per head.

    The one shape check every layout and aggregation shares, so none of
    them broadcasts a wrong-length weight or reads a head that is not there.
    Shapes are static, so it holds under ``jit`` and ``vmap`` too.

    Args:
      edge_weight: the run-time edge factors.
      num_edges: ``E``, the view's edge count.
      like_shape: the shape of the rows the weights scale (``x [N, H, ...]``
        or messages ``[E, H, ...]``); ``None`` skips the per-head check.
      like: how the message names those rows.
    """
    shape = tuple(jnp.shape(edge_weight))
    if len(shape) not in (1, 2) or shape[0] != num_edges:
        raise ValueError(
            f"edge_weight must have shape ({num_edges},) or ({num_edges}, H), got {shape}"
        )
    if (
        len(shape) == 2
        and like_shape is not None
        and (len(like_shape) < 2 or like_shape[1] != shape[1])
    ):
        rows = "E" if like == "messages" else "N"
        raise ValueError(
            f"per-head edge_weight {shape} needs {like} of shape [{rows}, {shape[1]}, ...], "
            f"got {tuple(like_shape)}"
        )


class EdgeListView:
    """The view protocol over an explicit edge list: gathers and segment reductions.

    A mixin: the class provides ``senders``, ``receivers`` (int ``[E]``),
    ``weights`` (``[E]`` or ``None``), ``num_src``, ``num_dst``,
    ``edge_mask`` (bool ``[E]`` or ``None``) and ``edges_sorted``. Products
    gather ``[E, F]`` rows and ``segment_sum`` them: ``O(E F)`` time and a
    transient ``[E, F]`` buffer, the price layouts that fuse avoid.
    """

    #: How row-count messages name ``num_src`` and ``num_dst``: a graph's sources
    #: and targets are all its nodes; :class:`Bipartite` names its two sides.
    source_count = "num_nodes"
    target_count = "num_nodes"

    if TYPE_CHECKING:
        # The name reports print: a class constant, or a property where it
        # depends on the instance (a packed graph's format).
        @property
        def layout_name(self) -> str: ...

        # What the class that mixes this in provides (fields or properties):
        # declared read-only, so either may implement them.
        @property
        def senders(self) -> jax.Array: ...
        @property
        def receivers(self) -> jax.Array: ...

        weights: jax.Array | None
        edges_sorted: bool

        @property
        def num_src(self) -> int: ...
        @property
        def num_dst(self) -> int: ...
        @property
        def edge_mask(self) -> jax.Array | None: ...
    else:
        layout_name = "edges"
        edge_mask = None

    def sources(self, h):
        """The source-side rows of ``h`` (all of it for a square graph)."""
        return h

    def targets(self, h):
        """The target-side rows of ``h`` (all of it for a square graph)."""
        return h

    def gather_src(self, x_src: jax.Array) -> jax.Array:
        """``x_src[senders]``: ``[num_src, ...] -> [E, ...]``.

        The gather skips bounds checks, so the row count is checked here:
        a short ``x_src`` would be read out of range.
        """
        _checks.check_num_rows("x_src", jnp.shape(x_src), self.num_src, self.source_count)
        return gather_rows(x_src, self.senders)

    def gather_dst(self, x_dst: jax.Array) -> jax.Array:
        """``x_dst[receivers]``: ``[num_dst, ...] -> [E, ...]`` (padding rows clipped).

        The clip would hide a short ``x_dst``, so its row count is checked.
        """
        _checks.check_num_rows("x_dst", jnp.shape(x_dst), self.num_dst, self.target_count)
        return jnp.take(x_dst, self.receivers, axis=0, mode="clip")

    def edge_factors(self, edge_weight, dtype, like_shape=None, like="x") -> jax.Array | None:
        """The per-edge factors a product uses: ``edge_weight`` or the view's own
        weights, zero on masked edges; ``None`` means all ones.

        ``edge_weight`` must be ``[E]`` or ``[E, H]`` (:func:`check_edge_weight`,
        against ``like_shape`` when given).
        """
        if edge_weight is not None:
            check_edge_weight(edge_weight, jnp.shape(self.senders)[0], like_shape, like)
        w = self.weights if edge_weight is None else edge_weight
        if self.edge_mask is None:
            return None if w is None else jnp.asarray(w).astype(dtype)
        mask = jnp.asarray(self.edge_mask)
        if w is None:
            return mask.astype(dtype)
        w = jnp.asarray(w).astype(dtype)
        return jnp.where(broadcast_edges(mask, w), w, jnp.zeros((), dtype))

    def check_sources(self, x_src) -> jax.Array:
        x_src = jnp.asarray(x_src)
        _checks.check_num_rows("x_src", x_src.shape, self.num_src, self.source_count)
        if not jnp.issubdtype(x_src.dtype, jnp.inexact):
            raise TypeError(f"x_src must have a floating dtype, got {x_src.dtype}")
        return x_src

    def product(self, x_src, edge_weight=None) -> jax.Array:
        """``y_r = sum_{e: r_e = r} w_e x_src[s_e]``, ``[num_src, ...] -> [num_dst, ...]``.

        ``edge_weight`` ``[E]`` scales each edge (replacing the view's own
        weights), or ``[E, H]`` scales head ``h`` of ``x_src [num_src, H, ...]``.
        """
        x_src = self.check_sources(x_src)
        messages = self.gather_src(x_src)
        w = self.edge_factors(edge_weight, x_src.dtype, x_src.shape)
        if w is not None:
            messages = masked_messages(messages * broadcast_edges(w, messages), self.edge_mask)
        return segment_sum(
            messages, self.receivers, self.num_dst, indices_are_sorted=self.sorted_for_segments
        )

    @property
    def sorted_for_segments(self) -> bool:
        """Whether to promise sorted receivers to ``segment_sum``: on accelerators
        only, where the sorted scatter is faster; on CPU it is no faster."""
        return bool(self.edges_sorted) and jax.default_backend() != "cpu"

    def aggregate(self, messages: jax.Array, reduce: str = "sum") -> jax.Array:
        """Reduces ``messages [E, ...]`` per target into ``[num_dst, ...]``.

        Masked edges are left out; a target without (unmasked) edges gets 0
        for every reduction.
        """
        if reduce not in REDUCES:
            raise ValueError(f"unknown reduce {reduce!r}; choose one of {REDUCES}")
        messages = jnp.asarray(messages)
        if self.edge_mask is not None:
            mask = broadcast_edges(jnp.asarray(self.edge_mask), messages)
            if reduce in ("sum", "mean"):
                messages = jnp.where(mask, messages, jnp.zeros((), messages.dtype))
            else:
                messages = jnp.where(mask, messages, reduce_fill(reduce, messages.dtype))
        if reduce == "mean" and self.edge_mask is not None:
            total = segment_sum(messages, self.receivers, self.num_dst)
            count = broadcast_edges(self.in_count(jnp.int32), total)
            return total / jnp.maximum(count, 1).astype(jnp.result_type(total.dtype, float))
        out = segment_reduce(messages, self.receivers, self.num_dst, reduce)
        if reduce in ("max", "min") and self.edge_mask is not None:
            # A target whose edges are all masked got the fill; one with a real edge
            # keeps its value, an infinite one included.
            count = broadcast_edges(self.in_count(jnp.int32), out)
            out = jnp.where(count > 0, out, jnp.zeros((), out.dtype))
        return out

    def softmax(self, scores: jax.Array) -> jax.Array:
        """``scores [E, ...]`` normalized over each target's incoming (unmasked) edges."""
        return segment_softmax(
            jnp.asarray(scores),
            self.receivers,
            self.num_dst,
            mask=None if self.edge_mask is None else jnp.asarray(self.edge_mask),
        )

    def in_count(self, dtype=jnp.float32) -> jax.Array:
        """``[num_dst]`` number of (unmasked) edges into each target."""
        ones = (
            jnp.ones(self.receivers.shape, dtype)
            if self.edge_mask is None
            else jnp.asarray(self.edge_mask).astype(dtype)
        )
        return segment_sum(ones, self.receivers, self.num_dst)


def start_indices(first, ndim: int) -> tuple:
    """``(first, 0, ..., 0)``, ``ndim`` start indices of ``lax.dynamic_slice`` (or
    ``dynamic_update_slice``) along axis 0, all of ``first``'s integer dtype: ``lax``
    refuses mixed index types, which a Python ``0`` next to an int32 id becomes
    under ``jax_enable_x64`` (int64)."""
    first = jnp.asarray(first)
    return (first,) + (jnp.zeros((), first.dtype),) * (ndim - 1)


@dataclasses.dataclass(frozen=True, eq=False)
class Bipartite(EdgeListView):
    """A bipartite edge list between ``num_src`` sources and ``num_dst`` targets; a pytree.

    The view of a row chunk (sources: all nodes; targets: the chunk's rows,
    starting at ``dst_start``) and of anything else whose two sides differ.
    Concrete ids are checked on the host against ``num_src`` and
    ``num_dst`` when the view is built; traced ids (a view built inside
    ``jit``, such as a row chunk's) cannot be and are trusted. Padding
    edges are masked, and their ids must be in range too.

    Attributes:
      senders: int32 ``[E]`` source rows in ``[0, num_src)``.
      receivers: int32 ``[E]`` target rows in ``[0, num_dst)``.
      weights: float ``[E]`` or ``None`` (ones).
      edge_mask: bool ``[E]`` or ``None`` (every edge real).
      dst_start: int ``[]``: ``targets(h)`` is ``h[dst_start : dst_start + num_dst]``.
      num_src: static number of sources.
      num_dst: static number of targets.
      edges_sorted: static, receivers non-decreasing.
    """

    source_count = "num_src"
    target_count = "num_dst"

    senders: Array
    receivers: Array
    weights: Array | None = None
    edge_mask: Array | None = None
    dst_start: Array = 0
    num_src: int = 0
    num_dst: int = 0
    edges_sorted: bool = False

    def __post_init__(self):
        num_edges = jnp.shape(self.senders)[0] if jnp.ndim(self.senders) else None
        if jnp.shape(self.receivers) != jnp.shape(self.senders) or jnp.ndim(self.senders) != 1:
            raise ValueError(
                f"senders and receivers must be [E], one entry per edge, got shapes "
                f"{jnp.shape(self.senders)} and {jnp.shape(self.receivers)}"
            )
        for name, value in (("weights", self.weights), ("edge_mask", self.edge_mask)):
            if value is not None and jnp.shape(value) != (num_edges,):
                raise ValueError(
                    f"{name} must have shape ({num_edges},), one per edge, got {jnp.shape(value)}"
                )
        mask_dtype = getattr(self.edge_mask, "dtype", None) or np.asarray(self.edge_mask).dtype
        if self.edge_mask is not None and mask_dtype != np.bool_:
            raise TypeError(
                f"edge_mask must be bool (True for a real edge), got dtype {mask_dtype}; a "
                "number would weight its edge"
            )
        if self.weights is not None and not _checks.is_traced(self.weights):
            _checks.check_real_values("weights", np.asarray(self.weights))
        concrete_start = not _checks.is_traced(self.dst_start) and jnp.ndim(self.dst_start) == 0
        if concrete_start and int(self.dst_start) < 0:
            raise ValueError(f"dst_start must be >= 0, got {int(self.dst_start)}")
        sides = (
            ("senders", self.senders, self.num_src),
            ("receivers", self.receivers, self.num_dst),
        )
        for name, ids, bound in sides:
            if _checks.is_traced(ids):
                continue
            host = np.asarray(ids)
            bad = (host < 0) | (host >= bound)
            if bad.any():
                pos = int(np.flatnonzero(bad)[0])
                side = "num_src" if name == "senders" else "num_dst"
                raise ValueError(
                    f"{name}[{pos}] = {int(host[pos])} is out of range: {name} must lie in "
                    f"[0, {bound}) for {side}={bound} ({int(bad.sum())} bad id(s) in all)"
                )

    def targets(self, h):
        if isinstance(self.dst_start, int) and self.dst_start == 0 and h.shape[0] == self.num_dst:
            return h
        if not _checks.is_traced(self.dst_start) and jnp.ndim(self.dst_start) == 0:
            end = int(self.dst_start) + self.num_dst
            if end > h.shape[0]:  # dynamic_slice would clamp to other rows
                raise ValueError(
                    f"targets are rows [{int(self.dst_start)}, {end}) of h, which has "
                    f"{h.shape[0]} rows (dst_start={int(self.dst_start)}, num_dst={self.num_dst})"
                )
        start = start_indices(self.dst_start, h.ndim)
        return jax.lax.dynamic_slice(h, start, (self.num_dst, *h.shape[1:]))

    def tree_flatten_with_keys(self):
        names = ("senders", "receivers", "weights", "edge_mask", "dst_start")
        children = tuple((jax.tree_util.GetAttrKey(k), getattr(self, k)) for k in names)
        return children, (self.num_src, self.num_dst, self.edges_sorted)

    @classmethod
    def tree_unflatten(cls, static, children):
        view = object.__new__(cls)
        for name, value in zip(
            ("senders", "receivers", "weights", "edge_mask", "dst_start"), children, strict=True
        ):
            object.__setattr__(view, name, value)
        for name, value in zip(("num_src", "num_dst", "edges_sorted"), static, strict=True):
            object.__setattr__(view, name, value)
        return view

    def __repr__(self) -> str:
        return (
            f"Bipartite(num_src={self.num_src}, num_dst={self.num_dst}, "
            f"num_edges={np.shape(self.senders)[0]})"
        )


jax.tree_util.register_pytree_with_keys_class(Bipartite)

"""Sliced ELL: a host-built layout whose product XLA fuses into one pass per slice.

Gather-then-``segment_sum`` writes every message ``w_e x_{s_e}`` to an
``[E, F]`` buffer and reads it back for the scatter: on a CPU that buffer,
ten times the size of ``x`` on a degree-10 graph, costs more than the
arithmetic (measured in ``benchmarks/results/propagation_paths.md``). This
layout removes it. The first ``W`` entries of every row (receiver) are
grouped into *slices* by row length, and each slice stores its column ids
as a dense ``[L, n]`` matrix: entry ``[k, i]`` is the ``k``-th sender of
row ``i``. The rest of a longer row (a hub: degree 70 with ``W = 32``
leaves 38 entries) is cut into extra rows of ``W``. A slice's product is

.. math::

    \\mathrm{acc}_i = \\sum_{k < L} w_{k i} \\, x_{\\mathrm{slots}_{k i}}

a sum of ``L`` row gathers of shape ``[n, F]`` that XLA fuses into a single
loop writing ``acc`` once; padding entries hold the out-of-range id ``N``
(and edge id ``E``), which the gathers' ``fill`` mode reads as zero. The
output row of node ``i`` is then read back from its slice, plus, for a
hub, the sum of its extra rows: both are gathers, which XLA fuses into
whatever consumes ``y``. Nothing of size ``[E, F]`` is written,
and no scatter touches ``y``: on this CPU every freshly written buffer costs
page faults, so buffers saved are time saved.
This is the SELL format of Kreutzer et al. with row splitting for hubs
(without the splitting one hub would widen its whole slice).

References:
  Kreutzer, Hager, Wellein, Fehske, Bishop, *A unified sparse matrix data
  format for efficient general sparse matrix-vector multiplication on
  modern processors with wide SIMD units*, SIAM J. Sci. Comput. 36(5), 2014.
  https://arxiv.org/abs/1307.6209
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.ops.csr import group_by_row
from sparsegcn.ops.segment import accumulation_dtype

# Slice boundaries on the virtual-row length. Powers of two bound the padding
# by 2x while keeping the unrolled gathers per product at 1+2+...+32 = 63,
# which compiles in about 2 s; finer boundaries measured no faster on this
# CPU (benchmarks/results/propagation_paths.md) and compile slower.
DEFAULT_WIDTHS = (1, 2, 4, 8, 16, 32)


class EllLayout(NamedTuple):
    """The sliced-ELL layout of an ``N x N`` matrix ``A[row, col]``; a pytree.

    All sizes are array shapes, hence static under ``jit``: a slice of
    ``n`` rows of length at most ``L`` is an ``[L, n]`` matrix. Each row's
    first ``W`` entries live in the slices (``V`` virtual rows in all,
    numbered slice after slice); the rest of a longer row (a *hub*) lives in
    ``extra_*``, cut into rows of ``W``.

    Attributes:
      slots: per slice, int32 ``[L, n]`` column ids; padding holds ``N``.
      edge_ids: per slice, int32 ``[L, n]`` position of each entry in the
        graph's edge list, so weights are read from the graph itself;
        padding holds ``E``.
      first: int32 ``[N]``, each row's virtual row, ``V`` for an empty row.
      extra_slots: int32 ``[W, X]``, the hubs' remaining entries, ``W`` per
        extra row (padding ``N``).
      extra_edge_ids: int32 ``[W, X]``, their edge ids (padding ``E``).
      extra_hub: int32 ``[X]``, which hub (``0..H-1``) each extra row adds to.
      hubs: int32 ``[H]``, the rows longer than ``W``.
      hub_of: int32 ``[N]``, each row's index in ``hubs``, ``H`` for the others.
    """

    slots: tuple
    edge_ids: tuple
    # NumPy as built on the host (build_ell), jax.Array once put on a device.
    first: jax.Array | np.ndarray
    extra_slots: jax.Array | np.ndarray
    extra_edge_ids: jax.Array | np.ndarray
    extra_hub: jax.Array | np.ndarray
    hubs: jax.Array | np.ndarray
    hub_of: jax.Array | np.ndarray


def _padded_rows(begin, length, width, sorted_cols, order, num_nodes, num_edges):
    """``[width, n]`` column ids and edge ids of rows starting at ``begin``."""
    k = np.arange(width)[:, None]
    valid = k < length[None, :]
    position = np.where(valid, begin[None, :] + k, 0)
    cols = np.where(valid, sorted_cols[position] if sorted_cols.size else 0, num_nodes)
    ids = np.where(valid, order[position] if order.size else 0, num_edges)
    return cols.astype(np.int32), ids.astype(np.int32)


def build_ell(
    cols: np.ndarray, rows: np.ndarray, num_nodes: int, *, widths=DEFAULT_WIDTHS
) -> EllLayout:
    """Builds the layout of ``A[rows[e], cols[e]] += w_e`` on the host.

    Args:
      cols: int ``[E]`` column (sender) of each edge; validated ids.
      rows: int ``[E]`` row (receiver) of each edge.
      num_nodes: ``N``.
      widths: increasing slice boundaries on the row length; the last one
        is the split width ``W``.

    Returns:
      An :class:`EllLayout` of NumPy arrays (move it with ``jax.device_put``).
    """
    widths = tuple(int(w) for w in widths)
    if not widths or widths[0] < 1 or any(b <= a for a, b in itertools.pairwise(widths)):
        raise ValueError(f"widths must be increasing positive integers, got {widths}")
    cols = np.asarray(cols)
    rows = np.asarray(rows)
    num_edges = cols.shape[0]
    # Within a row, entries in sender order: neighbouring slots then read
    # nearby rows of x when the graph has locality.
    order, indptr = group_by_row(rows, num_nodes, cols=cols, dtype=np.int64)
    sorted_cols = cols[order]
    degree = np.diff(indptr)
    split = widths[-1]
    head = np.minimum(degree, split)

    slots, edge_ids, members_all = [], [], []
    low = 0
    for high in widths:
        members = np.flatnonzero((head > low) & (head <= high))
        low = high
        if members.size == 0:
            continue
        width = int(head[members].max())
        s, e = _padded_rows(
            indptr[members], head[members], width, sorted_cols, order, num_nodes, num_edges
        )
        slots.append(s)
        edge_ids.append(e)
        members_all.append(members)
    members = np.concatenate(members_all) if members_all else np.zeros(0, np.int64)
    first = np.full(num_nodes, members.shape[0], np.int64)
    first[members] = np.arange(members.shape[0])

    hubs = np.flatnonzero(degree > split)
    pieces = -(-(degree[hubs] - split) // split)
    extra_hub = np.repeat(np.arange(hubs.shape[0]), pieces)
    piece = np.arange(extra_hub.shape[0]) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    offset = split * (1 + piece)
    owner = hubs[extra_hub]
    extra_slots, extra_edge_ids = _padded_rows(
        indptr[owner] + offset,
        np.minimum(degree[owner] - offset, split),
        split if hubs.size else 0,
        sorted_cols,
        order,
        num_nodes,
        num_edges,
    )
    hub_of = np.full(num_nodes, hubs.shape[0], np.int64)
    hub_of[hubs] = np.arange(hubs.shape[0])
    return EllLayout(
        tuple(slots),
        tuple(edge_ids),
        first.astype(np.int32),
        extra_slots,
        extra_edge_ids,
        extra_hub.astype(np.int32),
        hubs.astype(np.int32),
        hub_of.astype(np.int32),
    )


def _row_sums(source, weights, slots, edge_ids, dtype):
    """``acc[i] = sum_k w[edge_ids[k, i]] * source[slots[k, i]]``: one fused loop."""
    acc = None
    for k in range(slots.shape[0]):
        term = source.at[slots[k]].get(mode="fill", fill_value=0).astype(dtype)
        if weights is not None:
            term = term * weights.at[edge_ids[k]].get(mode="fill", fill_value=0)[:, None]
        acc = term if acc is None else acc + term
    return acc


def ell_matmul(
    layout: EllLayout,
    x: jax.Array,
    weights: jax.Array | None,
    num_rows: int,
    *,
    storage_dtype=None,
) -> jax.Array:
    """``y = A @ x`` with ``A`` in sliced-ELL form.

    Args:
      layout: the :class:`EllLayout` of ``A``.
      x: ``[N, F]`` (two dimensions).
      weights: ``[E]`` edge weights in edge-list order, or None for ones.
      num_rows: static number of output rows.
      storage_dtype: dtype rows are gathered in (e.g. ``jnp.bfloat16`` to
        halve the bytes read); sums are accumulated in ``x.dtype``, or in
        float32 where ``x`` is bfloat16 or float16.

    Returns:
      ``[num_rows, F]`` in ``x``'s dtype.
    """
    features = x.shape[1]
    if weights is not None:
        weights = jnp.asarray(weights).astype(accumulation_dtype(x.dtype))
    if not layout.slots:
        return jnp.zeros((num_rows, features), x.dtype)

    empty, product = _fenced_branches(num_rows, features, x.dtype, storage_dtype)
    # A fusion fence. XLA on CPU drops optimization barriers before fusing,
    # and left alone it fuses this product into consumers that read rows
    # several times (the gradient of sparse features gathers ~18 times per
    # row on Cora: 18 recomputations) and fuses producers, a dropout hash,
    # into each of the dozens of gathers here. Operands and results of a
    # conditional are always materialised, so the product runs once, on a
    # materialised x. The predicate is never true (ids are non-negative),
    # but XLA cannot know it: a reduction over N ints, microseconds.
    never = jnp.any(layout.first < 0)
    return jax.lax.cond(never, empty, product, layout, weights, x)


@functools.lru_cache(maxsize=256)
def _fenced_branches(num_rows: int, features: int, dtype, storage_dtype):
    """:func:`ell_matmul`'s two branches for one set of static values, built once:
    a called-eagerly ``cond`` is compiled per pair of branch functions, so fresh
    closures on every call compiled it on every call (hundreds of ms each)."""

    def empty(layout, weights, x):
        return jnp.zeros((num_rows, features), dtype)

    def product(layout, weights, x):
        return _ell_product(layout, x, weights, num_rows, storage_dtype)

    return empty, product


def _ell_product(layout, x, weights, num_rows, storage_dtype):
    source = x if storage_dtype is None else x.astype(storage_dtype)
    wide = accumulation_dtype(x.dtype)
    parts = [
        _row_sums(source, weights, slots, edge_ids, wide)
        for slots, edge_ids in zip(layout.slots, layout.edge_ids, strict=True)
    ]
    # The slices are read once, by this gather, so XLA fuses them, the
    # concatenation and the gather into one loop over the output rows (a
    # second reader would make it write every gathered term out instead).
    stacked = jnp.concatenate(parts) if len(parts) > 1 else parts[0]
    y = stacked.at[layout.first].get(mode="fill", fill_value=0)
    if layout.hubs.shape[0]:
        extra = _row_sums(source, weights, layout.extra_slots, layout.extra_edge_ids, wide)
        hub_sums = jax.ops.segment_sum(extra, layout.extra_hub, num_segments=layout.hubs.shape[0])
        y = y + hub_sums.at[layout.hub_of].get(mode="fill", fill_value=0)
    return y.astype(x.dtype)

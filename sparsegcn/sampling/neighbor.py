"""Uniform neighbour sampling on device, with static shapes.

GraphSAGE trains on mini-batches: for each seed node it samples up to
``k_1`` in-neighbours, for each of those up to ``k_2``, and so on, and runs
the model on that computation tree only. PyG and DGL sample on the host; here
sampling is ``jax.numpy``/``lax`` code that runs inside the compiled training
step, with output shapes fixed by the batch size and the fanouts alone, so a
whole epoch compiles once.

**Layout.** The sample is a tree stored level by level, without
de-duplication (see :class:`NeighborSample`): the level-``d`` array has shape
``(B, k_1, ..., k_d)``, and the children of an entry are the entries one level
deeper that extend its index by one axis. Which parent a child belongs to is
therefore given by its position alone, no index arrays are needed, and the
mean over a node's sampled neighbours is a masked mean over the last axis.
A node reached along two paths appears twice (and is computed twice):
de-duplicating on device would need a sort of every level (``jnp.unique``
with a static size) and index arrays between levels; the tree wastes
compute on repeats instead but keeps every shape static, every gather
contiguous and no padding guessed. Level ``d`` holds exactly
``B * k_1 * ... * k_d`` entries, the padding included.

**Sampling.** A node of in-degree ``d`` gets ``min(k, d)`` distinct positions
of its CSR row, uniformly among all subsets of that size: every position
when ``d <= k`` (the rest of its ``k`` slots masked), otherwise a subset drawn
by Robert Floyd's algorithm, vectorised over the nodes. Floyd's algorithm
takes ``k`` draws and ``O(k^2)`` comparisons per node whatever ``d`` is, so a
node of degree ``10^4`` costs what a node of degree ``k + 1`` does. Random
words come from :func:`sparsegcn.ops.hash_bits` (one threefry call for the
whole tree, then a counter hash); a word is mapped to ``[0, m)`` by Lemire's
multiply-shift, ``floor(u * m / 2^32)``, whose largest deviation from exact
uniformity is a relative ``m / 2^32`` (``2e-6`` for ``m = 10^4``).

Positions, not ids, are sampled: in a multigraph a repeated edge is a
distinct neighbour (as in ``mean_norm``, where duplicates count twice).

References:
  Hamilton, Ying & Leskovec, *Inductive Representation Learning on Large
  Graphs*, NeurIPS 2017. https://arxiv.org/abs/1706.02216

  Bentley & Floyd, *Programming Pearls: A Sample of Brilliance*, CACM 30(9),
  1987 (Floyd's sampling algorithm).

  Lemire, *Fast Random Integer Generation in an Interval*, ACM TOMACS 29(1),
  2019. https://arxiv.org/abs/1805.10941
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn import _checks

# mulhi_u32 is re-exported: it was defined here before the bits moved to ops.
from sparsegcn.ops.random import hash_bits, uniform_below
from sparsegcn.ops.random import mulhi_u32 as mulhi_u32

if TYPE_CHECKING:  # dedup builds on this module
    from sparsegcn.sampling.dedup import DedupSample

_INT32_MAX = int(np.iinfo(np.int32).max)


class NeighborSample(NamedTuple):
    """The sampled computation tree of one mini-batch; a pytree.

    With fanouts ``(k_1, ..., k_L)`` and ``B`` seeds, level ``d`` (``0 <= d <= L``)
    holds ``B * k_1 * ... * k_d`` entries, shaped ``(B, k_1, ..., k_d)``. The
    children of entry ``nodes[d][i_0, ..., i_d]`` are
    ``nodes[d + 1][i_0, ..., i_d, :]``: its sampled in-neighbours. Nodes are
    not de-duplicated (see the module docstring).

    Attributes:
      nodes: ``L + 1`` int32 arrays of node ids; ``nodes[0]`` ``[B]`` are the
        seeds. Masked entries hold node 0 (a valid id, so gathers stay in
        bounds) and must be ignored.
      masks: ``L + 1`` bool arrays shaped like ``nodes``: ``True`` for a real
        seed or a real sampled neighbour of an unmasked parent; ``False`` for
        padding (a node with fewer than ``k`` neighbours, a padded seed, or
        any descendant of a masked entry).
      edges: ``None``, or (with ``with_edges=True``) ``L`` arrays shaped
        like ``nodes[1:]``: the CSR position of the edge each level-``d + 1``
        entry was sampled along (``indptr``'s dtype; 0 where masked). The
        graph's edge id is ``Graph.to_csr().edge_ids[position]``, and a
        sampled edge's features are that edge's row of
        ``graph.edge_features`` (:func:`sampled_edge_features`).
    """

    nodes: tuple
    masks: tuple
    edges: tuple | None = None

    @property
    def fanouts(self) -> tuple[int, ...]:
        """The static ``(k_1, ..., k_L)``, read from the shapes."""
        return tuple(int(level.shape[-1]) for level in self.nodes[1:])

    @property
    def batch_size(self) -> int:
        """The static number of seed slots ``B``."""
        return int(self.nodes[0].shape[0])

    def num_sampled_edges(self) -> jax.Array:
        """int32 ``[]``: unmasked (parent, neighbour) pairs, over all levels."""
        return sum((jnp.sum(m, dtype=jnp.int32) for m in self.masks[1:]), jnp.int32(0))


def check_fanout(label: str, k) -> int:
    """One fanout: a static int in ``[1, 2**31)``; ``label`` names it in the message."""
    if _checks.is_traced(k) or isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{label} must be a static Python int, got {k!r}")
    if k < 1:
        raise ValueError(f"{label} must be >= 1, got {int(k)}")
    if k > _INT32_MAX:
        raise ValueError(
            f"{label} must be <= 2**31 - 1 = {_INT32_MAX} (a fanout above the graph's "
            f"largest in-degree samples nothing more), got {int(k)}"
        )
    return int(k)


def check_fanouts(fanouts, name: str = "fanouts") -> tuple[int, ...]:
    """Validates ``fanouts`` (a sequence of ints >= 1, or ``"25,10"``) into a tuple;
    ``name`` is how messages name the sequence (entry ``i`` is ``name[i]``)."""
    if isinstance(fanouts, str):
        parts = [p.strip() for p in fanouts.split(",")]
        try:
            fanouts = [int(p) for p in parts]
        except ValueError:
            raise ValueError(
                f"fanouts must be comma-separated integers such as '25,10', got {fanouts!r}"
            ) from None
    if not isinstance(fanouts, Sequence) or len(fanouts) == 0:
        raise ValueError(f"fanouts must be a non-empty sequence of ints, got {fanouts!r}")
    return tuple(check_fanout(f"{name}[{i}]", k) for i, k in enumerate(fanouts))


_UINT32_LIMIT = 1 << 32
_CHECK_CHUNK = 1 << 24  # entries per step of the host checks: bounded temporaries


def device_offset_dtype(span: int) -> np.dtype:
    """The dtype CSR offsets take on the device for ``span`` entries.

    int32 below ``2**31`` entries. From there int64 when ``jax_enable_x64``
    is on; with it off (the default) uint32, which addresses up to
    ``2**32 - 1`` entries (ogbn-papers100M stores 3.2e9 directed edges),
    so nobody has to turn on 64-bit types for the whole program. Node ids
    and degrees stay int32 either way.

    Raises:
      ValueError: ``span >= 2**32`` with 64-bit types disabled.
    """
    if span <= _INT32_MAX:
        return np.dtype(np.int32)
    if jax.config.jax_enable_x64:  # type: ignore[attr-defined]  # flags are dynamic attributes
        return np.dtype(np.int64)
    if span < _UINT32_LIMIT:
        return np.dtype(np.uint32)
    raise ValueError(
        f"the CSR spans {span} >= 2**32 entries, beyond 32-bit offsets: enable 64-bit types "
        "with jax.config.update('jax_enable_x64', True) before building arrays"
    )


def rebase_offsets(indptr, *, chunk: int = _CHECK_CHUNK) -> np.ndarray:
    """Host offsets (any integer dtype, int64 included) as device-ready offsets from 0.

    ``indptr - indptr[0]`` in :func:`device_offset_dtype` of its span,
    converted ``chunk`` entries at a time (no full-length int64 temporary,
    so a memory-mapped ``indptr`` of 10^8 rows stays cheap).
    """
    ptr = np.asarray(indptr)
    base = int(ptr[0])
    dtype = device_offset_dtype(int(ptr[-1]) - base)
    out = np.empty(ptr.shape, dtype)
    for start in range(0, ptr.shape[0], chunk):
        out[start : start + chunk] = np.asarray(ptr[start : start + chunk], np.int64) - base
    return out


def check_csr(indptr, indices) -> tuple[jax.Array, jax.Array]:
    """Validates a concrete CSR pair once, on the host, and moves it to the device.

    ``indptr`` may be int64 and hold values of ``2**31`` and more without
    ``jax_enable_x64``: it is rebased to start at 0 and stored on the device
    in :func:`device_offset_dtype` (int32 below ``2**31`` entries, uint32
    below ``2**32``, int64 with 64-bit types on). A CSR need not start at 0:
    ``indptr[0] = b`` makes it a window of a larger CSR whose entries
    ``[b, b + len(indices))`` are ``indices`` (the rows of a memory-mapped
    graph, say). The checks run in chunks of ``2**24`` entries. Tracers pass
    unchecked.

    Args:
      indptr: ``[N + 1]`` non-decreasing row offsets, ``indptr[0] >= 0`` and
        ``indptr[N] == indptr[0] + E``.
      indices: ``[E]`` neighbour ids in ``[0, N)``.

    Returns:
      ``(indptr, indices)`` as device arrays (``indptr`` rebased to 0,
      ``indices`` int32).

    Raises:
      ValueError: a malformed CSR, naming the first bad entry, or a span of
        ``2**32`` entries or more with 64-bit types disabled.
    """
    if _checks.is_traced(indptr, indices):
        return indptr, indices
    ptr = indptr if isinstance(indptr, np.ndarray) else np.asarray(indptr)
    idx = indices if isinstance(indices, np.ndarray) else np.asarray(indices)
    _checks.check_integer_array("indptr", ptr, ndim=1)
    _checks.check_integer_array("indices", idx, ndim=1)
    if ptr.shape[0] < 1:
        raise ValueError("indptr must have N + 1 >= 1 entries, got an empty array")
    n, e = ptr.shape[0] - 1, idx.shape[0]
    base, last = int(ptr[0]), int(ptr[-1])
    if base < 0 or last - base != e:
        raise ValueError(
            f"indptr must start at a non-negative offset and end at len(indices) = {e} past "
            f"it, got indptr[0] = {base} and indptr[{n}] = {last}"
        )
    largest = 0
    for start in range(0, n, _CHECK_CHUNK):
        steps = np.diff(np.asarray(ptr[start : start + _CHECK_CHUNK + 1], np.int64))
        if (steps < 0).any():
            pos = start + int(np.flatnonzero(steps < 0)[0])
            raise ValueError(
                f"indptr must be non-decreasing, but indptr[{pos + 1}] = {int(ptr[pos + 1])} < "
                f"indptr[{pos}] = {int(ptr[pos])}"
            )
        largest = max(largest, int(steps.max(initial=0)))
    if largest > _INT32_MAX:
        raise ValueError(f"a node has {largest} >= 2**31 neighbours; degrees must fit int32")
    for start in range(0, e, _CHECK_CHUNK):
        part = np.asarray(idx[start : start + _CHECK_CHUNK])
        bad = (part < 0) | (part >= n)
        if bad.any():
            pos = start + int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"indices[{pos}] = {int(idx[pos])} is out of range: node ids must lie in "
                f"[0, {n}) for num_nodes={n}"
            )
    ptr_dtype = device_offset_dtype(e)
    if isinstance(indptr, jax.Array) and indptr.dtype == ptr_dtype and base == 0:
        device_ptr = indptr
    else:
        device_ptr = jnp.asarray(rebase_offsets(ptr))
    if isinstance(indices, jax.Array) and indices.dtype == jnp.int32:
        device_idx = indices
    else:
        device_idx = jnp.asarray(idx.astype(np.int32, copy=False))
    return device_ptr, device_idx


def sample_positions(degrees: jax.Array, fanout: int, *, key: jax.Array):
    """Uniform ``min(k, d)``-subsets of ``range(d)`` for a batch of degrees.

    Args:
      degrees: int32 ``[n]``, each node's number of neighbours ``d`` (0 allowed).
      fanout: static ``k >= 1``.
      key: PRNG key; the result is a pure function of it.

    Returns:
      ``(positions, valid)``: int32 ``[n, k]`` distinct offsets into each
      node's row, and bool ``[n, k]``, ``True`` for the first ``min(k, d)``
      slots. Invalid slots hold 0. Offsets form a set: their order carries
      no meaning.
    """
    (k,) = check_fanouts((fanout,))
    return _positions_jit(jnp.asarray(degrees, jnp.int32), key, k)


@functools.partial(jax.jit, static_argnums=2)
def _positions_jit(degrees, key, k: int):
    return _floyd(degrees, k, hash_bits(key, (degrees.shape[0], k)))


def _floyd(degrees: jax.Array, k: int, bits: jax.Array):
    """:func:`sample_positions` from given uniform words ``bits`` (uint32 ``[n, k]``)."""
    cols = jnp.arange(k, dtype=jnp.int32)
    d = degrees[:, None]
    # Floyd: for j = d-k, ..., d-1 draw t uniform in [0, j]; keep t unless
    # already chosen, else keep j. Each k-subset comes out with probability 1/C(d, k).
    bound = jnp.maximum(d - k + 1 + cols[None, :], 1)
    draws = uniform_below(bits, bound)
    # Rows are slots, so each iteration reads and writes one contiguous row;
    # unfilled slots hold -1, which no draw equals.
    draws_t, bound_t = draws.T, bound.T

    def pick(i, chosen):
        t = draws_t[i]
        taken = jnp.any(chosen == t[None, :], axis=0)
        return chosen.at[i].set(jnp.where(taken, bound_t[i] - 1, t))

    floyd = jax.lax.fori_loop(0, k, pick, jnp.full((k, degrees.shape[0]), -1, jnp.int32)).T
    everything = d <= k
    valid = cols[None, :] < d
    positions = jnp.where(everything, cols[None, :], floyd)
    return jnp.where(valid, positions, 0), valid


def sample_neighbors(
    indptr: jax.Array,
    indices: jax.Array,
    nodes: jax.Array,
    fanout: int,
    *,
    key: jax.Array,
    mask: jax.Array | None = None,
    with_edges: bool = False,
) -> tuple[jax.Array, ...]:
    """Samples up to ``fanout`` distinct in-neighbours of each node, uniformly.

    Args:
      indptr: ``[N + 1]`` CSR row offsets (``Graph.to_csr().indptr``), any
        integer dtype on the host (see :func:`check_csr`); traced: int32, or
        uint32/int64 from :func:`check_csr` when ``E >= 2**31``.
      indices: int32 ``[E]`` CSR neighbour ids (``Graph.to_csr().indices``).
      nodes: int32 ``[...]`` node ids in ``[0, N)`` (any shape).
      fanout: static ``k >= 1``.
      key: PRNG key; the same key gives the same sample.
      mask: optional bool, shaped like ``nodes``: ``False`` entries get no
        neighbours.
      with_edges: also return the sampled edges' CSR positions.

    Returns:
      ``(neighbors, neighbor_mask)``, both of shape ``nodes.shape + (k,)``:
      int32 ids (0 where masked) and bool, ``True`` for a real neighbour;
      with ``with_edges``, a third array of the same shape: each sampled
      edge's CSR position (``indptr``'s dtype, 0 where masked), so
      ``csr.edge_ids[position]`` is its id in the graph's edge list.

    Raises:
      ValueError: for a malformed concrete CSR, out-of-range concrete
        ``nodes``, or a bad ``fanout``.
    """
    (k,) = check_fanouts((fanout,))
    indptr, indices = check_csr(indptr, indices)
    _check_nodes("nodes", nodes, int(indptr.shape[0]) - 1)
    nodes = jnp.asarray(nodes, jnp.int32)
    if mask is not None:
        mask = jnp.asarray(mask, bool)
        if mask.shape != nodes.shape:
            raise ValueError(f"mask must have the nodes' shape {nodes.shape}, got {mask.shape}")
    out = _neighbors_jit(indptr, indices, nodes, mask, key, k)
    return out if with_edges else out[:2]


# The public functions validate on the host, then run one compiled program
# (inlined when called under an outer jit); op-by-op dispatch would be slow.
@functools.partial(jax.jit, static_argnums=5)
def _neighbors_jit(indptr, indices, nodes, mask, key, k: int):
    bits = hash_bits(key, (nodes.size, k))
    return _sample_level(indptr, indices, nodes, mask, k, bits, with_positions=True)


def _check_nodes(name: str, nodes, num_nodes: int) -> None:
    if _checks.is_traced(nodes):
        return
    host = np.asarray(nodes).reshape(-1)
    _checks.check_integer_array(name, host, ndim=1)
    _checks.check_ids_in_range(name, host, num_nodes)


def _sample_level(indptr, indices, nodes, mask, k: int, bits, *, with_positions: bool = False):
    """:func:`sample_neighbors` on checked device inputs, from random words ``bits [n, k]``;
    with ``with_positions`` also the sampled CSR positions."""
    flat = nodes.reshape(-1)
    shape = (*nodes.shape, k)
    if indices.shape[0] == 0:  # no edges: nothing to sample, and nothing to gather from
        empty = (jnp.zeros(shape, jnp.int32), jnp.zeros(shape, bool))
        return (*empty, jnp.zeros(shape, indptr.dtype)) if with_positions else empty
    start = indptr[flat]
    degrees = (indptr[flat + 1] - start).astype(jnp.int32)
    # Traced ids are not checked: one outside [0, N) samples nothing (a negative one
    # read node N - id's row otherwise, its neighbours marked valid).
    inside = (flat >= 0) & (flat < indptr.shape[0] - 1)
    degrees = jnp.where(inside, degrees, 0)
    if mask is not None:
        degrees = jnp.where(mask.reshape(-1), degrees, 0)
    offsets, valid = _floyd(degrees, k, bits)
    positions = jnp.where(valid, start[:, None] + offsets.astype(indptr.dtype), 0)
    neighbors = jnp.where(valid, indices.at[positions].get(mode="promise_in_bounds"), 0)
    if with_positions:
        return neighbors.reshape(shape), valid.reshape(shape), positions.reshape(shape)
    return neighbors.reshape(shape), valid.reshape(shape)


def sample_blocks(
    indptr: jax.Array,
    indices: jax.Array,
    seeds: jax.Array,
    fanouts: Sequence[int],
    *,
    key: jax.Array,
    mask: jax.Array | None = None,
    with_edges: bool = False,
) -> NeighborSample:
    """Samples the ``L``-hop computation tree of a batch of seeds.

    Level ``d + 1`` samples ``fanouts[d]`` neighbours of every level-``d``
    entry; the random words of all levels come from one draw of ``key``
    (disjoint counter ranges of :func:`~sparsegcn.ops.hash_bits`).

    Args:
      indptr, indices: the CSR view (see :func:`sample_neighbors`).
      seeds: int32 ``[B]`` seed ids in ``[0, N)``.
      fanouts: static ``(k_1, ..., k_L)``.
      key: PRNG key; the same key gives the same tree.
      mask: optional bool ``[B]``, ``False`` for padded seed slots.
      with_edges: also record each sampled edge's CSR position
        (:attr:`NeighborSample.edges`); the nodes and masks are the same
        either way.

    Returns:
      A :class:`NeighborSample` with levels of static shapes
      ``(B,), (B, k_1), ..., (B, k_1, ..., k_L)``.

    Shapes:
      ``seeds [B] -> nodes[d] [B, k_1, ..., k_d]``.
    """
    fanouts = check_fanouts(fanouts)
    indptr, indices = check_csr(indptr, indices)
    _check_nodes("seeds", seeds, int(indptr.shape[0]) - 1)
    seeds = jnp.asarray(seeds)
    if seeds.ndim != 1:
        raise ValueError(f"seeds must have 1 dimension [B], got shape {seeds.shape}")
    seed_mask = jnp.ones(seeds.shape, bool) if mask is None else jnp.asarray(mask, bool)
    if seed_mask.shape != seeds.shape:
        raise ValueError(f"mask must have the seeds' shape {seeds.shape}, got {seed_mask.shape}")
    return _blocks_jit(indptr, indices, seeds, seed_mask, key, fanouts, bool(with_edges))


@functools.partial(jax.jit, static_argnums=(5, 6))
def _blocks_jit(
    indptr, indices, seeds, seed_mask, key, fanouts: tuple[int, ...], with_edges: bool = False
) -> NeighborSample:
    seeds = jnp.where(seed_mask, seeds.astype(jnp.int32), 0)
    nodes, masks, edges = [seeds], [seed_mask], []
    # All levels' random words in one draw: they do not depend on the nodes,
    # and each threefry call site costs compile time.
    sizes = tree_sizes(seeds.shape[0], fanouts)
    bits = hash_bits(key, (sum(sizes[1:]),))
    for k, n, offset in zip(fanouts, sizes[:-1], np.cumsum([0, *sizes[1:-1]]), strict=True):
        level_bits = jax.lax.slice(bits, (int(offset),), (int(offset) + n * k,)).reshape(n, k)
        neighbors, valid, positions = _sample_level(
            indptr, indices, nodes[-1], masks[-1], k, level_bits, with_positions=True
        )
        nodes.append(neighbors)
        masks.append(valid)
        edges.append(positions)
    return NeighborSample(
        nodes=tuple(nodes), masks=tuple(masks), edges=tuple(edges) if with_edges else None
    )


def sampled_edge_features(
    edge_features: jax.typing.ArrayLike,
    edge_ids: jax.typing.ArrayLike,
    sample: NeighborSample | DedupSample,
) -> tuple[jax.Array, ...]:
    """The features of every sampled edge of a sample drawn with ``with_edges=True``.

    Args:
      edge_features: float ``[E, D]``, the graph's rows in edge-list order.
      edge_ids: ``[E]`` CSR position -> edge-list index (``Graph.to_csr().edge_ids``).
      sample: a :class:`NeighborSample` or a
        :class:`~sparsegcn.sampling.DedupSample` with ``edges``.

    Returns:
      ``L`` arrays, one per hop ``d``: for a tree, ``[B, k_1, ..., k_{d+1}, D]``,
      level ``d + 1``'s entry holding the row of the edge it was sampled
      along; for a de-duplicated sample, ``[f_d, k_{d+1}, D]``, the row of the
      edge from ``neighbors[d]`` to frontier ``d``'s node. Zeros where masked
      (``masks[d + 1]``, resp. ``edge_masks[d]``).

    Raises:
      ValueError: the sample was drawn without ``with_edges``.
    """
    if sample.edges is None:
        raise ValueError(
            f"this {type(sample).__name__} has no edges; sample it with with_edges=True"
        )
    masks = sample.masks[1:] if isinstance(sample, NeighborSample) else sample.edge_masks
    features, ids = jnp.asarray(edge_features), jnp.asarray(edge_ids)
    out = []
    for positions, mask in zip(sample.edges, masks, strict=True):
        out.append(jnp.where(mask[..., None], features[ids[positions]], 0))
    return tuple(out)


def tree_sizes(batch_size: int, fanouts: Sequence[int]) -> list[int]:
    """Entries per level, ``[B, B k_1, ..., B k_1 ... k_L]``: the padding budget."""
    sizes = [int(batch_size)]
    for k in check_fanouts(fanouts):
        sizes.append(sizes[-1] * k)
    return sizes

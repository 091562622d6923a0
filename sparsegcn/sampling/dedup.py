"""De-duplicated neighbour sampling: each distinct node of a batch is gathered once.

The tree sampler (:func:`~sparsegcn.sampling.sample_blocks`) stores a node
once per path that reaches it: with 1024 seeds and fanouts ``15, 10, 5`` a
batch carries ``1024 (1 + 15 + 150 + 750) = 938k`` rows however many
distinct nodes they hold. PyG and DGL relabel the sampled nodes so that each
distinct node is one row. :func:`sample_dedup` does the same on the device,
with static shapes:

**Frontiers.** Hop ``d`` adds the *frontier* ``F_d``: the nodes first reached
at hop ``d`` (``F_0`` = the seeds). Each frontier is a padded array of a
static size ``f_d`` with a mask:

.. math::

    f_0 = B, \\qquad f_{d+1} = \\min(f_d k_{d+1},\\ N,\\ c_{d+1})

(``c`` the optional user caps). Frontiers are concatenated into one array of
``T = f_0 + ... + f_L`` *rows*; ``offsets[d]`` is where ``F_d`` starts, so the
nodes within ``d`` hops are the prefix ``rows[:offsets[d + 1]]``.

**Sampling.** Every node of ``F_d`` samples ``k_{d+1}`` distinct in-neighbour
positions exactly as the tree does (Floyd's algorithm on the counter-based
words of :func:`~sparsegcn.ops.hash_bits`); slot ``j`` of ``F_d`` reads the
words tree entry ``j`` of level ``d`` reads with the same key. A node is
sampled once, at the hop that first reaches it, and its neighbours serve
every layer: the tree samples an entry at depth ``d`` with ``k_{d+1}``, so
when no node repeats and none has fewer in-neighbours than its fanout (the
tree's masked slots have no frontier rows), the frontiers are the tree's
levels in the same order and both samplers draw the same edges.

**De-duplication.** The hop's sampled neighbours and the rows so far are
grouped by node id (a sort of the ids, a binary search of each entry's
group and a scatter-min of positions: ``O(M log M)`` for ``M`` entries,
independent of ``N``); a sampled node already among the rows maps to its
row, and the first occurrence (in frontier order) of each new node becomes
the next row of ``F_{d+1}``. Frontier order is first-appearance order.

**Overflow.** When a hop reaches more than ``f_{d+1}`` new nodes (only
possible under a cap), the ones first reached last in frontier order are
dropped: they get no row, and every edge to them is masked, so their
targets aggregate over the remaining neighbours.
:attr:`DedupSample.overflow` counts the dropped distinct nodes per hop.
The drop is not uniform over a node's sample: its slots are Floyd's, and
slot ``j`` of ``k`` draws from the row's first ``d - k + j + 1`` positions,
so the node whose slots the cap cuts through keeps neighbours from early
in its row (measured: degree 9, fanout 4, a cap of 2 new nodes: positions
7 and 8 never kept). Caps trade this bias for memory; the tree sampler
and uncapped dedup have none.

**Blocks.** Layer ``i`` of ``L`` (``P = L - i``) runs on
:class:`DedupBlock`: sources ``rows[:offsets[P + 1]]``, targets
``rows[:offsets[P]]`` (a prefix, as in PyG's sampled blocks), and the
sampled edges of frontiers ``0..P-1`` relabelled to local rows. Each target
owns ``k`` consecutive edge slots, so sums and counts are reshapes.

References:
  Hamilton, Ying & Leskovec, *Inductive Representation Learning on Large
  Graphs*, NeurIPS 2017. https://arxiv.org/abs/1706.02216

  Fey & Lenssen, *Fast Graph Representation Learning with PyTorch
  Geometric*, 2019 (``NeighborLoader``'s relabelled blocks).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.ops import gather_rows, hash_bits
from sparsegcn.sampling.neighbor import (
    NeighborSample,
    _check_nodes,
    _sample_level,
    check_csr,
    check_fanouts,
    sample_blocks,
    tree_sizes,
)
from sparsegcn.views import EdgeListView, broadcast_edges, masked_messages

SAMPLERS = ("tree", "dedup")
"""Neighbour sampler names: ``"tree"`` (:func:`~sparsegcn.sampling.sample_blocks`)
and ``"dedup"`` (:func:`sample_dedup`)."""

_SENTINEL = int(np.iinfo(np.int32).max)  # sorts after every node id


class DedupSample(NamedTuple):
    """The de-duplicated sample of one mini-batch; a pytree.

    With ``L`` hops, frontier ``d`` has a static size ``f_d``
    (:func:`dedup_sizes`) and the rows ``offsets[d] .. offsets[d+1] - 1`` of
    the concatenated frontiers.

    Attributes:
      nodes: ``L + 1`` int32 ``[f_d]`` node ids, ``nodes[0]`` ``[B]`` the
        seeds; padding holds node 0 (a valid id) and must be ignored.
      masks: ``L + 1`` bool ``[f_d]``, ``True`` for a real node.
      neighbors: ``L`` int32 ``[f_d, k_{d+1}]``: the rows (into the
        concatenated frontiers, ``< offsets[d + 2]``) of the sampled
        in-neighbours of frontier ``d``'s nodes; 0 where masked.
      edge_masks: ``L`` bool ``[f_d, k_{d+1}]``: ``True`` for a real sampled
        edge whose source kept its row.
      overflow: int32 ``[L]``: distinct nodes hop ``d + 1`` reached but had
        no room for (0 without caps).
      edges: ``None``, or (``sample_dedup(..., with_edges=True)``) ``L``
        arrays ``[f_d, k_{d+1}]``: the CSR position of each sampled edge
        (0 where masked); ``Graph.to_csr().edge_ids[position]`` is its id in
        the edge list, whose ``edge_features`` row it keeps
        (:func:`~sparsegcn.sampling.sampled_edge_features` gathers them).
    """

    nodes: tuple
    masks: tuple
    neighbors: tuple
    edge_masks: tuple
    overflow: jax.Array | np.ndarray  # NumPy from sample_dedup_host
    edges: tuple | None = None

    @property
    def fanouts(self) -> tuple[int, ...]:
        """The static ``(k_1, ..., k_L)``, read from the shapes."""
        return tuple(int(n.shape[1]) for n in self.neighbors)

    @property
    def batch_size(self) -> int:
        """The static number of seed slots ``B``."""
        return int(self.nodes[0].shape[0])

    @property
    def sizes(self) -> tuple[int, ...]:
        """The static frontier sizes ``(f_0, ..., f_L)``."""
        return tuple(int(n.shape[0]) for n in self.nodes)

    @property
    def num_rows(self) -> int:
        """The static number of rows ``T = f_0 + ... + f_L``."""
        return sum(self.sizes)

    def entries(self) -> jax.Array:
        """int32 ``[T]``: the node id of every row (0 for padding)."""
        return jnp.concatenate(self.nodes)

    def num_unique_nodes(self) -> jax.Array:
        """int32 ``[]``: real rows, the distinct nodes whose features are read."""
        return jnp.sum(jnp.concatenate(self.masks), dtype=jnp.int32)

    def num_sampled_edges(self) -> jax.Array:
        """int32 ``[]``: unmasked (target, neighbour) pairs, over all hops."""
        return jnp.sum(jnp.concatenate([m.reshape(-1) for m in self.edge_masks]), dtype=jnp.int32)

    def block(self, parents: int) -> DedupBlock:
        """The bipartite block whose targets are frontiers ``0..parents-1``."""
        if not 1 <= parents <= len(self.neighbors):
            raise ValueError(
                f"parents must be in [1, {len(self.neighbors)}] for a sample with "
                f"{len(self.neighbors)} hops, got {parents}"
            )
        senders = [n.reshape(-1) for n in self.neighbors[:parents]]
        masks = [m.reshape(-1) for m in self.edge_masks[:parents]]
        return DedupBlock(
            self.sizes[: parents + 1],
            self.fanouts[:parents],
            jnp.concatenate(senders),
            jnp.concatenate(masks),
        )


@dataclasses.dataclass(frozen=True, eq=False)
class DedupBlock(EdgeListView):
    """One layer's bipartite view of a :class:`DedupSample`; a pytree.

    Attributes:
      sizes: static frontier sizes ``(f_0, ..., f_P)``.
      fanouts: static ``(k_1, ..., k_P)``.
      senders: int32 ``[E]``, ``E = f_0 k_1 + ... + f_{P-1} k_P``: the
        source row of each edge slot, frontier after frontier, ``k_{d+1}``
        consecutive slots per target.
      edge_mask: bool ``[E]``.

    ``num_src = f_0 + ... + f_P``, ``num_dst = f_0 + ... + f_{P-1}``; the
    targets are the first ``num_dst`` sources. Receivers are computed from
    the sizes (iota arithmetic, nothing stored).
    """

    sizes: tuple
    fanouts: tuple
    senders: jax.Array
    edge_mask: jax.Array

    weights = None
    edges_sorted = True
    layout_name = "dedup"

    @property
    def offsets(self) -> list[int]:
        return np.cumsum([0, *self.sizes]).tolist()

    @property
    def num_src(self) -> int:
        return self.offsets[-1]

    @property
    def num_dst(self) -> int:
        return self.offsets[-2]

    @property
    def receivers(self) -> jax.Array:  # computed, not stored
        offsets = self.offsets
        parents = [
            offsets[d] + jnp.arange(self.sizes[d] * k, dtype=jnp.int32) // k
            for d, k in enumerate(self.fanouts)
        ]
        return jnp.concatenate(parents) if len(parents) > 1 else parents[0]

    def targets(self, h):
        return h[: self.num_dst]

    def _per_target(self, values: jax.Array) -> list[jax.Array]:
        """``values [E, ...]`` split by frontier into ``[f_d, k_{d+1}, ...]`` pieces."""
        pieces, pos = [], 0
        for n, k in zip(self.sizes[:-1], self.fanouts, strict=True):
            pieces.append(values[pos : pos + n * k].reshape(n, k, *values.shape[1:]))
            pos += n * k
        return pieces

    def product(self, x_src, edge_weight=None) -> jax.Array:
        """The weighted sum over each target's ``k`` edge slots: a gather, then reshapes."""
        x = self.check_sources(x_src)
        w = self.edge_factors(edge_weight, x.dtype)
        messages = gather_rows(x, self.senders)
        if w is not None:  # always set: edge_mask is
            messages = masked_messages(messages * broadcast_edges(w, messages), self.edge_mask)
        out = [jnp.sum(m, axis=1) for m in self._per_target(messages)]
        return jnp.concatenate(out) if len(out) > 1 else out[0]

    def in_count(self, dtype=jnp.float32) -> jax.Array:
        """``[num_dst]`` real edges per target, by reshapes (no scatter)."""
        counts = [jnp.sum(m, axis=1) for m in self._per_target(self.edge_mask.astype(dtype))]
        return jnp.concatenate(counts) if len(counts) > 1 else counts[0]

    def tree_flatten_with_keys(self):
        children = (
            (jax.tree_util.GetAttrKey("senders"), self.senders),
            (jax.tree_util.GetAttrKey("edge_mask"), self.edge_mask),
        )
        return children, (self.sizes, self.fanouts)

    @classmethod
    def tree_unflatten(cls, static, children):
        sizes, fanouts = static
        return cls(sizes, fanouts, *children)


jax.tree_util.register_pytree_with_keys_class(DedupBlock)


def check_caps(caps, num_hops: int) -> tuple[int, ...] | None:
    """Validates per-hop frontier caps: ``None``, one int for every hop, a
    sequence of ``num_hops`` ints >= 1, or a string ``"20000,200000,400000"``."""
    if caps is None:
        return None
    if isinstance(caps, (int, np.integer)) and not isinstance(caps, bool):
        caps = (int(caps),) * num_hops
    try:
        parsed = check_fanouts(caps)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"caps must be ints >= 1, one per hop, got {caps!r}: {str(err).replace('fanouts', 'caps')}"
        ) from None
    if len(parsed) != num_hops:
        raise ValueError(f"caps must give one size per hop ({num_hops}), got {caps!r}")
    return parsed


def dedup_sizes(
    batch_size: int,
    fanouts: Sequence[int],
    *,
    num_nodes: int | None = None,
    caps: Sequence[int] | int | str | None = None,
) -> list[int]:
    """The static frontier sizes ``[f_0, ..., f_L]`` (see the module docstring).

    ``f_{d+1} = min(f_d k_{d+1}, num_nodes, caps[d])``: a frontier can hold no
    more nodes than its parents sample, nor than the graph has. Without caps
    the sizes bound the distinct nodes, so nothing overflows.
    """
    fanouts = check_fanouts(fanouts)
    caps = check_caps(caps, len(fanouts))
    sizes = [int(batch_size)]
    for d, k in enumerate(fanouts):
        size = sizes[-1] * k
        if num_nodes is not None:
            size = min(size, max(int(num_nodes), 1))
        if caps is not None:
            size = min(size, caps[d])
        sizes.append(size)
    return sizes


def sample_dedup(
    indptr: jax.Array,
    indices: jax.Array,
    seeds: jax.Array,
    fanouts: Sequence[int],
    *,
    key: jax.Array,
    mask: jax.Array | None = None,
    caps: Sequence[int] | int | str | None = None,
    with_edges: bool = False,
) -> DedupSample:
    """Samples a batch's ``L``-hop neighbourhood, each distinct node once.

    Args:
      indptr, indices: the CSR view (see :func:`~sparsegcn.sampling.sample_neighbors`).
      seeds: int32 ``[B]`` seed ids in ``[0, N)``; each seed slot is a row
        (seeds are not de-duplicated among themselves).
      fanouts: static ``(k_1, ..., k_L)``.
      key: PRNG key; with the same key, a batch whose tree has no repeated
        node and no masked slot gets the tree sampler's edges.
      mask: optional bool ``[B]``, ``False`` for padded seed slots.
      caps: optional static per-hop frontier caps (:func:`dedup_sizes`).
      with_edges: also record each sampled edge's CSR position
        (:attr:`DedupSample.edges`).

    Returns:
      A :class:`DedupSample` with frontiers of static sizes
      :func:`dedup_sizes` ``(B, fanouts, num_nodes=N, caps=caps)``.

    Cost: ``L`` sorts of the ids of the rows so far plus the hop's samples,
    ``O(M log M)`` for ``M <= T + f_{L-1} k_L`` entries; no ``O(N)`` work.
    """
    fanouts = check_fanouts(fanouts)
    indptr, indices = check_csr(indptr, indices)
    num_nodes = int(indptr.shape[0]) - 1
    _check_nodes("seeds", seeds, num_nodes)
    seeds = jnp.asarray(seeds)
    if seeds.ndim != 1:
        raise ValueError(f"seeds must have 1 dimension [B], got shape {seeds.shape}")
    seed_mask = jnp.ones(seeds.shape, bool) if mask is None else jnp.asarray(mask, bool)
    if seed_mask.shape != seeds.shape:
        raise ValueError(f"mask must have the seeds' shape {seeds.shape}, got {seed_mask.shape}")
    sizes = tuple(dedup_sizes(seeds.shape[0], fanouts, num_nodes=num_nodes, caps=caps))
    return _dedup_jit(indptr, indices, seeds, seed_mask, key, fanouts, sizes, bool(with_edges))


@functools.partial(jax.jit, static_argnums=(5, 6, 7))
def _dedup_jit(
    indptr, indices, seeds, seed_mask, key, fanouts, sizes, with_edges: bool = False
) -> DedupSample:
    seeds = jnp.where(seed_mask, seeds.astype(jnp.int32), 0)
    nodes, masks, neighbors, edge_masks, overflow = [seeds], [seed_mask], [], [], []
    edges = []
    # The tree's words: frontier d's slot j reads tree level d's entry j.
    tree = tree_sizes(seeds.shape[0], fanouts)
    bits = hash_bits(key, (sum(tree[1:]),))
    level_start = np.cumsum([0, *tree[1:-1]]).tolist()
    for d, k in enumerate(fanouts):
        f = sizes[d]
        start = int(level_start[d])
        level_bits = jax.lax.slice(bits, (start,), (start + f * k,)).reshape(f, k)
        sampled, valid, positions = _sample_level(
            indptr, indices, nodes[d], masks[d], k, level_bits, with_positions=True
        )
        rows, new_nodes, new_mask, edge_ok, dropped = _relabel(
            jnp.concatenate(nodes),
            jnp.concatenate(masks),
            sampled.reshape(-1),
            valid.reshape(-1),
            sizes[d + 1],
        )
        nodes.append(new_nodes)
        masks.append(new_mask)
        neighbors.append(rows.reshape(f, k))
        edge_masks.append(edge_ok.reshape(f, k))
        edges.append(jnp.where(edge_ok.reshape(f, k), positions, 0))
        overflow.append(dropped)
    return DedupSample(
        nodes=tuple(nodes),
        masks=tuple(masks),
        neighbors=tuple(neighbors),
        edge_masks=tuple(edge_masks),
        overflow=jnp.stack(overflow),
        edges=tuple(edges) if with_edges else None,
    )


def _first_positions(ids: jax.Array) -> jax.Array:
    """int32 ``[M]``: for each entry of ``ids [M]``, the first position holding the same id.

    The ids alone are sorted, each entry finds its id's group by binary search,
    and a scatter-min gives each group its smallest position. (A stable sort
    of ``(id, position)`` pairs gives the same; on CPU the two-operand sort
    of 534k entries took 0.38 s against 0.14 s for this, loaded.)
    """
    n = ids.shape[0]
    group = jnp.searchsorted(jax.lax.sort(ids), ids, side="left").astype(jnp.int32)
    first = jnp.full((n,), n, jnp.int32).at[group].min(jnp.arange(n, dtype=jnp.int32))
    return first[group]


def _relabel(known, known_mask, sampled, valid, room: int):
    """Rows for one hop's sampled nodes, adding the new ones as the next frontier.

    Args:
      known: int32 ``[U]`` node ids of the rows so far (row ``i`` is ``known[i]``).
      known_mask: bool ``[U]``.
      sampled: int32 ``[M]`` the hop's sampled ids, in frontier order.
      valid: bool ``[M]``.
      room: static size of the new frontier (rows ``U .. U + room - 1``).

    Returns:
      ``(rows [M], new_nodes [room], new_mask [room], edge_ok [M], dropped [])``.
    """
    u, m = known.shape[0], sampled.shape[0]
    ids = jnp.concatenate(
        [jnp.where(known_mask, known, _SENTINEL), jnp.where(valid, sampled, _SENTINEL)]
    )
    # Known rows come first, so each id's first position is its row if it has
    # one, else its first sampled occurrence.
    head = _first_positions(ids)[u:]
    own = jnp.arange(m, dtype=jnp.int32)
    known_row = head < u
    new = valid & (head == u + own)
    rank = jnp.cumsum(new, dtype=jnp.int32) - 1
    kept = new & (rank < room)
    first_seen = jnp.clip(head - u, 0, m - 1)
    rows = jnp.where(known_row, head, u + rank[first_seen])
    edge_ok = valid & (known_row | kept[first_seen])
    new_nodes = (
        jnp.zeros((room,), jnp.int32).at[jnp.where(kept, rank, room)].set(sampled, mode="drop")
    )
    total_new = jnp.sum(new, dtype=jnp.int32)
    new_mask = jnp.arange(room, dtype=jnp.int32) < total_new
    dropped = total_new - jnp.sum(kept, dtype=jnp.int32)
    return jnp.where(edge_ok, rows, 0), new_nodes, new_mask, edge_ok, dropped


def sample_batch(
    sampler: str,
    indptr: jax.Array,
    indices: jax.Array,
    seeds: jax.Array,
    fanouts: Sequence[int],
    *,
    key: jax.Array,
    mask: jax.Array | None = None,
    caps: Sequence[int] | int | str | None = None,
) -> NeighborSample | DedupSample:
    """The named sampler's sample of a batch: ``"tree"`` (:func:`sample_blocks`;
    ``caps`` must be ``None``) or ``"dedup"`` (:func:`sample_dedup`)."""
    if sampler == "tree":
        if caps is not None:
            raise ValueError(f"caps={caps!r} applies to the dedup sampler, not the tree")
        return sample_blocks(indptr, indices, seeds, fanouts, key=key, mask=mask)
    if sampler == "dedup":
        return sample_dedup(indptr, indices, seeds, fanouts, key=key, mask=mask, caps=caps)
    raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")

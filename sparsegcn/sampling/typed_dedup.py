"""De-duplicated typed neighbour sampling: each distinct node of each type once.

The typed tree (:func:`~sparsegcn.sampling.typed.sample_typed`) stores a
node once per path that reaches it. :func:`sample_typed_dedup` is the typed
form of :func:`~sparsegcn.sampling.sample_dedup`: per hop and per node type,
the nodes first reached at that hop, each once, in padded arrays of static
sizes; per hop and per relation, the sampled edges relabelled to rows.

**Frontiers.** ``F^t_d`` holds the type-``t`` nodes first reached at hop
``d``; ``F^s_0`` are the seeds (type ``s``) and ``F^t_0`` is empty for every
other type. Its static size is

.. math::

    f^s_0 = B,\\quad f^{t}_0 = 0\\ (t \\ne s), \\qquad
    f^u_{d+1} = \\min\\Big(\\sum_{r:\\ \\mathrm{src}(r) = u} f^{\\mathrm{dst}(r)}_d
    k_{d+1, r},\\ N_u,\\ c^u_{d+1}\\Big)

(``k_{d+1,r}`` the fanout of relation ``r`` at hop ``d + 1``, ``c`` the
optional caps). A type's frontiers are concatenated into its *rows*
``R^t = F^t_0 | ... | F^t_L``; ``offsets(t)[d]`` is where ``F^t_d`` starts.

**Sampling.** Hop ``d + 1`` samples, for every relation ``r`` into type
``t``, ``k_{d+1,r}`` distinct in-neighbour positions of each node of
``F^t_d`` (Floyd's algorithm, as the tree), so a node is expanded once, at
the hop that first reaches it, and its neighbours serve every layer.

**De-duplication.** For each source type ``u``, the hop's samples of every
relation out of ``u`` (relations in edge-type order, then frontier slot,
then sample slot) are relabelled together against ``R^u`` so far, by
``sparsegcn.sampling.dedup._relabel`` (a sort of the ids, a binary search
of each entry's group and a scatter-min of positions): a node already
among the rows maps to its row; the first occurrence of each new node
becomes the next row of ``F^u_{d+1}``.

**Overflow.** When a hop reaches more than ``f^u_{d+1}`` new nodes of type
``u`` (only possible under a cap), the ones first reached last in that
order get no row, every edge to them is masked (their targets average over
the remaining neighbours of that relation, or get nothing from it), and
they are not expanded. :attr:`TypedDedupSample.overflow` counts them per
type and hop. A dropped node reached again at a later hop gets a row there.

**Blocks.** Layer ``i`` of ``L`` (``P = L - i``) computes, for every type
``t``, the rows ``R^t[:offsets(t)[P]]`` (frontiers ``0..P-1``); relation
``r`` reads :meth:`TypedDedupSample.block` ``(P, r)``, a
:class:`TypedDedupBlock` from the rows ``R^{src}[:offsets(src)[P + 1]]`` to
those targets, each target owning ``k`` consecutive edge slots. With every
fanout at least its relation's largest in-degree and no caps, R-GCN on the
blocks equals full-graph R-GCN on the seeds (tested).

References:
  Schlichtkrull et al., *Modeling Relational Data with Graph Convolutional
  Networks*, ESWC 2018. https://arxiv.org/abs/1703.06103

  Fey & Lenssen, *Fast Graph Representation Learning with PyTorch
  Geometric*, 2019 (relabelled typed neighbour samples, ``NeighborLoader``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn import _checks
from sparsegcn.hetero import EdgeType
from sparsegcn.ops import gather_rows, hash_bits
from sparsegcn.sampling.dedup import _relabel, check_caps
from sparsegcn.sampling.neighbor import _sample_level
from sparsegcn.sampling.typed import HeteroCSR, TypedSample, check_typed_fanouts, sample_typed
from sparsegcn.views import EdgeListView, broadcast_edges, masked_messages

TYPED_SAMPLERS = ("tree", "dedup")
"""Typed sampler names: ``"tree"`` (:func:`~sparsegcn.sampling.typed.sample_typed`)
and ``"dedup"`` (:func:`sample_typed_dedup`)."""

Caps = tuple[tuple[int | None, ...], ...]


class TypedDedupSample(NamedTuple):
    """The de-duplicated typed sample of one mini-batch; a pytree.

    With ``L`` hops, node type ``t`` has frontiers of static sizes
    ``f^t_0, ..., f^t_L`` (:func:`typed_dedup_sizes`); its rows are their
    concatenation.

    Attributes:
      nodes: ``{t: (L + 1) int32 [f^t_d]}`` node ids of type ``t``; the seed
        type's frontier 0 is the seeds ``[B]``, every other type's is empty.
        Padding holds 0 and must be ignored.
      masks: ``{t: (L + 1) bool [f^t_d]}``, ``True`` for a real node.
      neighbors: ``L`` dicts ``{edge_type: int32 [f^dst_d, k_{d+1,r}]}``:
        for relation ``r = (src, rel, dst)``, the rows (into ``src``'s rows,
        ``< offsets(src)[d + 2]``) of the sampled in-neighbours of ``dst``'s
        frontier ``d``; 0 where masked.
      edge_masks: ``L`` dicts of bool shaped like ``neighbors``: ``True``
        for a real sampled edge whose source kept its row.
      overflow: ``{t: int32 [L]}``: distinct type-``t`` nodes hop ``d + 1``
        reached but had no room for (0 without caps).
    """

    nodes: dict
    masks: dict
    neighbors: tuple
    edge_masks: tuple
    overflow: dict

    @property
    def node_types(self) -> tuple[str, ...]:
        return tuple(self.nodes)

    @property
    def edge_types(self) -> tuple[EdgeType, ...]:
        return tuple(self.neighbors[0]) if self.neighbors else ()

    @property
    def num_hops(self) -> int:
        return len(self.neighbors)

    @property
    def seed_type(self) -> str:
        """The one type whose frontier 0 is not empty."""
        return next(t for t, n in self.nodes.items() if n[0].shape[0])

    @property
    def batch_size(self) -> int:
        """The static number of seed slots ``B``."""
        return int(self.nodes[self.seed_type][0].shape[0])

    def sizes(self, node_type: str) -> tuple[int, ...]:
        """The static frontier sizes ``(f^t_0, ..., f^t_L)`` of one type."""
        return tuple(int(n.shape[0]) for n in self.nodes[node_type])

    def offsets(self, node_type: str) -> list[int]:
        """``[0, f^t_0, f^t_0 + f^t_1, ...]``: where each frontier's rows start."""
        return np.cumsum([0, *self.sizes(node_type)]).tolist()

    def fanouts(self, edge_type: EdgeType) -> tuple[int, ...]:
        """The static ``(k_{1,r}, ..., k_{L,r})`` of one relation."""
        return tuple(int(n[edge_type].shape[1]) for n in self.neighbors)

    def entries(self, node_type: str) -> jax.Array:
        """int32 ``[T_t]``: the node id of every row of one type (0 for padding)."""
        return jnp.concatenate(self.nodes[node_type])

    def row_mask(self, node_type: str) -> jax.Array:
        """bool ``[T_t]``: ``True`` for a real row."""
        return jnp.concatenate(self.masks[node_type])

    def num_unique_nodes(self) -> dict[str, jax.Array]:
        """``{t: int32 []}``: real rows per type, the distinct nodes whose rows are read."""
        return {t: jnp.sum(self.row_mask(t), dtype=jnp.int32) for t in self.nodes}

    def num_sampled_edges(self) -> jax.Array:
        """int32 ``[]``: unmasked (target, neighbour) pairs, over all hops and relations."""
        return sum(
            (jnp.sum(m, dtype=jnp.int32) for hop in self.edge_masks for m in hop.values()),
            jnp.zeros((), jnp.int32),
        )

    def block(self, parents: int, edge_type: EdgeType) -> TypedDedupBlock:
        """Relation ``edge_type``'s bipartite block whose targets are the ``dst``
        type's frontiers ``0..parents-1`` and whose sources are the ``src``
        type's frontiers ``0..parents``."""
        if not 1 <= parents <= self.num_hops:
            raise ValueError(
                f"parents must be in [1, {self.num_hops}] for a sample with {self.num_hops} "
                f"hops, got {parents}"
            )
        if edge_type not in self.neighbors[0]:
            raise ValueError(f"unknown edge type {edge_type!r}; the sample has {self.edge_types}")
        src, _, dst = edge_type
        senders = [n[edge_type].reshape(-1) for n in self.neighbors[:parents]]
        masks = [m[edge_type].reshape(-1) for m in self.edge_masks[:parents]]
        return TypedDedupBlock(
            self.sizes(dst)[:parents],
            self.fanouts(edge_type)[:parents],
            self.offsets(src)[parents + 1],
            jnp.concatenate(senders),
            jnp.concatenate(masks),
        )


@dataclasses.dataclass(frozen=True, eq=False)
class TypedDedupBlock(EdgeListView):
    """One relation's bipartite view for one layer of a :class:`TypedDedupSample`; a pytree.

    Attributes:
      target_sizes: static ``(f^dst_0, ..., f^dst_{P-1})``, the target
        frontiers.
      fanouts: static ``(k_{1,r}, ..., k_{P,r})``.
      num_src: static number of source rows, ``offsets(src)[P + 1]``.
      senders: int32 ``[E]``, ``E = sum_d f^dst_d k_{d+1,r}``: the source
        row of each edge slot, frontier after frontier, ``k_{d+1,r}``
        consecutive slots per target.
      edge_mask: bool ``[E]``.

    ``num_dst = f^dst_0 + ... + f^dst_{P-1}``. Receivers are computed from
    the sizes; sums and counts are reshapes, no scatter.
    """

    target_sizes: tuple
    fanouts: tuple
    source_rows: int
    senders: jax.Array
    edge_mask: jax.Array

    weights = None
    edges_sorted = True
    layout_name = "typed-dedup"

    @property
    def num_src(self) -> int:
        return int(self.source_rows)

    @property
    def num_dst(self) -> int:
        return int(sum(self.target_sizes))

    @property
    def receivers(self) -> jax.Array:  # computed, not stored
        starts = np.cumsum([0, *self.target_sizes]).tolist()
        parts = [
            starts[d] + jnp.arange(n * k, dtype=jnp.int32) // k
            for d, (n, k) in enumerate(zip(self.target_sizes, self.fanouts, strict=True))
        ]
        return jnp.concatenate(parts)

    def _per_target(self, values: jax.Array) -> list[jax.Array]:
        """``values [E, ...]`` split by frontier into ``[f_d, k_{d+1}, ...]`` pieces."""
        pieces, pos = [], 0
        for n, k in zip(self.target_sizes, self.fanouts, strict=True):
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
        return jnp.concatenate([jnp.sum(m, axis=1) for m in self._per_target(messages)])

    def in_count(self, dtype=jnp.float32) -> jax.Array:
        """``[num_dst]`` real edges per target, by reshapes."""
        pieces = self._per_target(self.edge_mask.astype(dtype))
        return jnp.concatenate([jnp.sum(m, axis=1) for m in pieces])

    def tree_flatten_with_keys(self):
        children = (
            (jax.tree_util.GetAttrKey("senders"), self.senders),
            (jax.tree_util.GetAttrKey("edge_mask"), self.edge_mask),
        )
        return children, (self.target_sizes, self.fanouts, self.source_rows)

    @classmethod
    def tree_unflatten(cls, static, children):
        return cls(*static, *children)


jax.tree_util.register_pytree_with_keys_class(TypedDedupBlock)


def check_typed_caps(caps, node_types: Sequence[str], num_hops: int) -> Caps | None:
    """Per-hop, per-type frontier caps: ``((c_{1,t})_t, ..., (c_{L,t})_t)``, ``None``
    for an uncapped type.

    Args:
      caps: ``None`` (no caps); one int (every hop and type); a string
        ``"20000,200000"`` or a sequence of ``num_hops`` entries, each an int
        (every type at that hop), ``None`` (no cap at that hop), a
        ``{type: cap}`` mapping (types not named are uncapped) or a tuple of
        one cap or ``None`` per node type, in order (what this returns).
      node_types: the graph's node types, in order.
      num_hops: ``L``.

    Raises:
      ValueError: a cap below 1, a count of hops other than ``num_hops``,
        or an unknown type, naming it.
    """
    if caps is None:
        return None
    if isinstance(caps, str) or (
        isinstance(caps, (int, np.integer)) and not isinstance(caps, bool)
    ):
        return tuple((c,) * len(node_types) for c in check_caps(caps, num_hops) or ())
    if not isinstance(caps, Sequence) or len(caps) != num_hops:
        raise ValueError(f"caps must give one entry per hop ({num_hops}), got {caps!r}")
    table: list[tuple[int | None, ...]] = []
    for hop, entry in enumerate(caps):
        if entry is None:
            table.append((None,) * len(node_types))
        elif isinstance(entry, Mapping):
            unknown = sorted(set(entry) - set(node_types), key=str)
            if unknown:
                raise ValueError(
                    f"caps[{hop}] names {unknown}, not node types; node types are {list(node_types)}"
                )
            table.append(
                tuple(
                    None if t not in entry else _check_cap(f"caps[{hop}][{t!r}]", entry[t])
                    for t in node_types
                )
            )
        elif isinstance(entry, Sequence) and not isinstance(entry, str):
            if len(entry) != len(node_types):
                raise ValueError(
                    f"caps[{hop}] = {entry!r} must give one cap (or None) per node type "
                    f"({len(node_types)})"
                )
            table.append(
                tuple(
                    None if c is None else _check_cap(f"caps[{hop}][{i}]", c)
                    for i, c in enumerate(entry)
                )
            )
        else:
            table.append((_check_cap(f"caps[{hop}]", entry),) * len(node_types))
    return tuple(table)


def _check_cap(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def typed_dedup_sizes(
    batch_size: int,
    fanouts,
    edge_types: Sequence[EdgeType],
    num_nodes: Mapping[str, int],
    *,
    seed_type: str,
    caps=None,
) -> dict[str, list[int]]:
    """The static frontier sizes ``{t: [f^t_0, ..., f^t_L]}`` (module docstring).

    Without caps the sizes bound the distinct nodes, so nothing overflows.
    """
    table = check_typed_fanouts(fanouts, edge_types)
    capped = check_typed_caps(caps, tuple(num_nodes), len(table))
    return _sizes(int(batch_size), table, tuple(edge_types), dict(num_nodes), seed_type, capped)


def _sizes(batch_size: int, table, edge_types, num_nodes, seed_type: str, capped):
    """:func:`typed_dedup_sizes` from checked fanouts and caps."""
    types = tuple(num_nodes)
    sizes = {t: [batch_size if t == seed_type else 0] for t in types}
    for d, row in enumerate(table):
        reached = {
            u: sum(sizes[dst][d] * row[r] for r, (src, _, dst) in enumerate(edge_types) if src == u)
            for u in types
        }
        for i, u in enumerate(types):
            size = min(reached[u], max(int(num_nodes[u]), 1))
            cap = None if capped is None else capped[d][i]
            sizes[u].append(size if cap is None else min(size, cap))
    return sizes


def sample_typed_dedup(
    csr: HeteroCSR,
    seeds: jax.Array,
    fanouts,
    *,
    seed_type: str,
    key: jax.Array,
    mask: jax.Array | None = None,
    caps=None,
) -> TypedDedupSample:
    """Samples a batch's ``L``-hop typed neighbourhood, each distinct node once per type.

    Args:
      csr: the graph's relations grouped by target (:meth:`HeteroCSR.from_graph`).
      seeds: int32 ``[B]`` ids of ``seed_type`` nodes (each seed slot is a
        row; seeds are not de-duplicated among themselves).
      fanouts: per hop, an int for every relation or a ``{relation: k}``
        mapping (:func:`~sparsegcn.sampling.typed.check_typed_fanouts`); static.
      seed_type: the seeds' node type.
      key: PRNG key; the same key gives the same sample.
      mask: optional bool ``[B]``, ``False`` for padded seed slots.
      caps: optional static frontier caps per hop and type (:func:`check_typed_caps`).

    Returns:
      A :class:`TypedDedupSample` with frontiers of static sizes
      :func:`typed_dedup_sizes`.

    Raises:
      ValueError: an unknown seed type, out-of-range concrete seeds, a mask
        of another shape, bad fanouts or caps.

    Cost: per hop and source type, one sort of its rows so far and the
    hop's samples, a binary search and a scatter-min; no ``O(N)`` work.
    """
    counts = dict(csr.num_nodes)
    if seed_type not in counts:
        raise ValueError(f"unknown seed type {seed_type!r}; node types are {sorted(counts)}")
    table = check_typed_fanouts(fanouts, csr.edge_types)
    capped = check_typed_caps(caps, tuple(counts), len(table))
    if not _checks.is_traced(seeds):
        host = np.asarray(seeds)
        _checks.check_integer_array("seeds", host, ndim=1)
        _checks.check_ids_in_range("seeds", host, counts[seed_type])
    seeds = jnp.asarray(seeds)
    if seeds.ndim != 1:
        raise ValueError(f"seeds must have 1 dimension [B], got shape {seeds.shape}")
    seed_mask = jnp.ones(seeds.shape, bool) if mask is None else jnp.asarray(mask, bool)
    if seed_mask.shape != seeds.shape:
        raise ValueError(f"mask must have the seeds' shape {seeds.shape}, got {seed_mask.shape}")
    return _typed_dedup_jit(csr, seeds, seed_mask, key, table, seed_type, capped)


@functools.partial(jax.jit, static_argnums=(4, 5, 6))
def _typed_dedup_jit(csr, seeds, seed_mask, key, table, seed_type, caps) -> TypedDedupSample:
    edge_types = csr.edge_types
    types = tuple(t for t, _ in csr.num_nodes)
    sizes = _sizes(seeds.shape[0], table, edge_types, dict(csr.num_nodes), seed_type, caps)
    nodes: dict[str, list] = {t: [jnp.zeros((0,), jnp.int32)] for t in types}
    masks: dict[str, list] = {t: [jnp.zeros((0,), bool)] for t in types}
    nodes[seed_type] = [jnp.where(seed_mask, seeds.astype(jnp.int32), 0)]
    masks[seed_type] = [seed_mask]
    overflow: dict[str, list] = {t: [] for t in types}
    neighbors, edge_masks = [], []
    words = [
        sizes[dst][d] * row[r]
        for d, row in enumerate(table)
        for r, (_, _, dst) in enumerate(edge_types)
    ]
    bits = hash_bits(key, (max(sum(words), 1),))
    offset = 0
    for d, row in enumerate(table):
        sampled: dict[int, Any] = {}
        for r, (_, _, dst) in enumerate(edge_types):
            n, k = sizes[dst][d], row[r]
            level_bits = jax.lax.slice(bits, (offset,), (offset + n * k,)).reshape(n, k)
            offset += n * k
            sampled[r] = _sample_level(
                csr.indptr[r], csr.indices[r], nodes[dst][d], masks[dst][d], k, level_bits
            )
        hop_rows: dict[EdgeType, Any] = {}
        hop_ok: dict[EdgeType, Any] = {}
        for u in types:
            rels = [r for r, (src, _, _) in enumerate(edge_types) if src == u]
            room = sizes[u][d + 1]
            if room == 0:  # nothing of type u reached at this hop
                nodes[u].append(jnp.zeros((0,), jnp.int32))
                masks[u].append(jnp.zeros((0,), bool))
                overflow[u].append(jnp.zeros((), jnp.int32))
                for r in rels:
                    hop_rows[edge_types[r]] = sampled[r][0]
                    hop_ok[edge_types[r]] = sampled[r][1]
                continue
            rows, new_nodes, new_mask, edge_ok, dropped = _relabel(
                jnp.concatenate(nodes[u]),
                jnp.concatenate(masks[u]),
                jnp.concatenate([sampled[r][0].reshape(-1) for r in rels]),
                jnp.concatenate([sampled[r][1].reshape(-1) for r in rels]),
                room,
            )
            nodes[u].append(new_nodes)
            masks[u].append(new_mask)
            overflow[u].append(dropped)
            pos = 0
            for r in rels:
                shape = sampled[r][0].shape
                size = int(np.prod(shape))
                hop_rows[edge_types[r]] = rows[pos : pos + size].reshape(shape)
                hop_ok[edge_types[r]] = edge_ok[pos : pos + size].reshape(shape)
                pos += size
        neighbors.append(hop_rows)
        edge_masks.append(hop_ok)
    return TypedDedupSample(
        nodes={t: tuple(v) for t, v in nodes.items()},
        masks={t: tuple(v) for t, v in masks.items()},
        neighbors=tuple(neighbors),
        edge_masks=tuple(edge_masks),
        overflow={t: jnp.stack(v) for t, v in overflow.items()},
    )


def gather_typed_dedup(
    sample: TypedDedupSample, features: Mapping[str, jax.Array]
) -> dict[str, jax.Array]:
    """Each type's input rows, one per row of the sample: ``{t: [T_t, F]}``.

    ``features[t]`` is ``[N_t, F]`` (input features or a learnable embedding
    table); each distinct node's row is read once; padding rows read row 0.
    """
    return {t: gather_rows(features[t], sample.entries(t)) for t in sample.node_types}


def sample_hetero(
    sampler: str,
    csr: HeteroCSR,
    seeds: jax.Array,
    fanouts,
    *,
    seed_type: str,
    key: jax.Array,
    mask: jax.Array | None = None,
    caps=None,
) -> TypedSample | TypedDedupSample:
    """The named typed sampler's sample of a batch: ``"tree"``
    (:func:`~sparsegcn.sampling.typed.sample_typed`; ``caps`` must be ``None``)
    or ``"dedup"`` (:func:`sample_typed_dedup`)."""
    if sampler == "tree":
        if caps is not None:
            raise ValueError(f"caps={caps!r} applies to the dedup sampler, not the tree")
        return sample_typed(csr, seeds, fanouts, seed_type=seed_type, key=key, mask=mask)
    if sampler == "dedup":
        return sample_typed_dedup(
            csr, seeds, fanouts, seed_type=seed_type, key=key, mask=mask, caps=caps
        )
    raise ValueError(f"sampler must be one of {TYPED_SAMPLERS}, got {sampler!r}")


def count_typed_overflow(
    csr: HeteroCSR,
    ids: jax.typing.ArrayLike,
    mask: jax.typing.ArrayLike,
    keys: jax.Array,
    fanouts,
    *,
    seed_type: str,
    caps,
) -> dict[str, np.ndarray]:
    """What the caps drop over a sequence of batches, by a sampling pass alone.

    Args:
      csr: the graph's relations.
      ids, mask: int32 and bool ``[S, B]``, one batch of seeds per row.
      keys: ``[S]`` the sample keys of the batches.
      fanouts, seed_type, caps: as :func:`sample_typed_dedup`.

    Returns:
      ``{t: int64 [L]}``: per type and hop, the distinct nodes dropped,
      summed over the batches (zeros without caps).
    """
    table = check_typed_fanouts(fanouts, csr.edge_types)
    capped = check_typed_caps(caps, tuple(t for t, _ in csr.num_nodes), len(table))

    @jax.jit
    def count(csr, ids, mask, keys):
        def step(total, batch):
            b_ids, b_mask, b_key = batch
            s = sample_typed_dedup(
                csr, b_ids, table, seed_type=seed_type, key=b_key, mask=b_mask, caps=capped
            )
            return {t: total[t] + s.overflow[t] for t in total}, None

        zero = {t: jnp.zeros((len(table),), jnp.int32) for t, _ in csr.num_nodes}
        return jax.lax.scan(step, zero, (ids, mask, keys))[0]

    return {t: np.asarray(v, np.int64) for t, v in count(csr, ids, mask, keys).items()}


__all__ = [
    "TYPED_SAMPLERS",
    "TypedDedupBlock",
    "TypedDedupSample",
    "check_typed_caps",
    "count_typed_overflow",
    "gather_typed_dedup",
    "sample_hetero",
    "sample_typed_dedup",
    "typed_dedup_sizes",
]

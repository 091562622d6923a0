"""Typed neighbour sampling on a heterogeneous graph, on device, with static shapes.

The typed analogue of :func:`~sparsegcn.sampling.sample_blocks`: from seeds
of one node type (papers), every hop samples up to ``k`` in-neighbours of
each sampled node **through every relation that ends in its type**. The
sample is a tree of *paths*: a path is the tuple of relations (indices into
the edge types) walked from the seeds, and its nodes are of the source type
of its last relation. With fanouts ``(k_1, ..., k_L)`` the nodes of a path
of length ``d`` have static shape ``(B, k_1, ..., k_d)``; the children of an
entry through relation ``r`` are one axis deeper in the path ``p + (r,)``.
Which parent an entry belongs to is given by its position, as in the
homogeneous tree, so the per-relation mean over a node's sampled neighbours
is a masked mean over the last axis.

A fanout may also be a ``{relation: k}`` mapping for a hop (every edge type
named, by triple or unique relation name): each relation then samples its
own number of neighbours.

Each relation's neighbours are drawn as in :mod:`sparsegcn.sampling.neighbor`
(uniform ``min(k, d)``-subsets of the node's CSR row, Floyd's algorithm), so
with every fanout at least the largest in-degree of its relation the sample
holds every neighbour exactly once and a model on it equals the full-graph
model on the seeds (tested).

The number of paths grows with the number of relations per type: with
ogbn-mag's 7 relations (reverses added, citations symmetric) two hops give
3 + 6 paths.

This is the tree sampler; the de-duplicated one is
:mod:`sparsegcn.sampling.typed_dedup`.

References:
  Schlichtkrull et al., *Modeling Relational Data with Graph Convolutional
  Networks*, ESWC 2018. https://arxiv.org/abs/1703.06103

  Hamilton, Ying & Leskovec, *Inductive Representation Learning on Large
  Graphs*, NeurIPS 2017. https://arxiv.org/abs/1706.02216
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn import _checks
from sparsegcn.hetero import EdgeType, HeteroGraph
from sparsegcn.ops.random import hash_bits
from sparsegcn.sampling.neighbor import _sample_level, check_fanout, check_fanouts, rebase_offsets

Path = tuple[int, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class HeteroCSR:
    """Every relation of a :class:`~sparsegcn.hetero.HeteroGraph` grouped by target; a pytree.

    Attributes:
      indptr: one ``[N_dst(r) + 1]`` offset array per edge type (device
        offsets of :func:`~sparsegcn.sampling.neighbor.rebase_offsets`).
      indices: one int32 ``[E_r]`` source-id array per edge type.
      num_nodes: static ``((type, N_t), ...)``.
      edge_types: static, the graph's edge types in order (path entries
        index them).
    """

    indptr: tuple
    indices: tuple
    num_nodes: tuple
    edge_types: tuple

    @classmethod
    def from_graph(cls, graph: HeteroGraph) -> HeteroCSR:
        """Groups each relation by target (host side, once) and moves it to the device."""
        if not isinstance(graph, HeteroGraph):
            raise TypeError(f"graph must be a HeteroGraph, got {type(graph).__name__}")
        ptrs, idxs = [], []
        for key in graph.edge_types:
            # Ids were checked by the graph (sources and targets differ in number,
            # which check_csr's square check does not allow).
            ptr, idx = graph.csr(key)
            ptrs.append(jnp.asarray(rebase_offsets(ptr)))
            idxs.append(jnp.asarray(idx.astype(np.int32, copy=False)))
        return cls(tuple(ptrs), tuple(idxs), tuple(graph.num_nodes.items()), graph.edge_types)

    def tree_flatten(self):
        return (self.indptr, self.indices), (self.num_nodes, self.edge_types)

    @classmethod
    def tree_unflatten(cls, static, children):
        return cls(children[0], children[1], static[0], static[1])


jax.tree_util.register_pytree_node_class(HeteroCSR)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True, eq=False)
class TypedSample:
    """The typed computation tree of one mini-batch; a pytree.

    Attributes:
      nodes: ``{path: int32 [B, k_1, ..., k_d]}``, the node ids reached along
        each path (node type: the source type of the path's last relation;
        the seeds' type for the empty path ``()``). Masked entries hold 0.
      masks: ``{path: bool}`` shaped like ``nodes``: ``True`` for a real
        seed or a real sampled neighbour of an unmasked parent.
      edge_types: the relations the paths' indices ``r`` stand for, in the
        order of the :class:`HeteroCSR` sampled (static: pytree metadata, so
        a model can refuse a sample of relations in another order).
      seed_type: the seeds' node type (static).
    """

    nodes: dict
    masks: dict
    edge_types: tuple[EdgeType, ...] = ()
    seed_type: str = ""

    def tree_flatten(self):
        return (self.nodes, self.masks), (self.edge_types, self.seed_type)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @property
    def batch_size(self) -> int:
        return int(self.nodes[()].shape[0])


def path_type(path: Path, edge_types: Sequence[EdgeType], seed_type: str) -> str:
    """The node type of a path's nodes."""
    return edge_types[path[-1]][0] if path else seed_type


def typed_paths(edge_types: Sequence[EdgeType], seed_type: str, hops: int) -> list[list[Path]]:
    """Paths by depth, ``[[()], [(r,), ...], ...]``: every walk of up to ``hops``
    relations backwards from the seeds (each relation's target type is the
    node type it extends)."""
    levels: list[list[Path]] = [[()]]
    for _ in range(hops):
        levels.append(
            [
                (*path, r)
                for path in levels[-1]
                for r, (_, _, dst) in enumerate(edge_types)
                if dst == path_type(path, edge_types, seed_type)
            ]
        )
    return levels


def check_typed_fanouts(fanouts, edge_types: Sequence[EdgeType]) -> tuple[tuple[int, ...], ...]:
    """Fanouts per hop and edge type: ``((k_{1,r})_r, ..., (k_{L,r})_r)``.

    Args:
      fanouts: ``"25,20"``, a sequence of ints, or a sequence whose entries
        may be ``{relation: k}`` mappings naming every edge type (by triple
        or unique relation name) or tuples of one int per edge type, in order.

    Raises:
      ValueError, TypeError: a malformed fanout, naming it.
    """

    def per_relation(entry) -> bool:
        return isinstance(entry, Mapping) or (
            isinstance(entry, Sequence) and not isinstance(entry, str)
        )

    if isinstance(fanouts, str) or (
        isinstance(fanouts, Sequence) and not any(per_relation(f) for f in fanouts)
    ):
        return tuple((k,) * len(edge_types) for k in check_fanouts(fanouts))
    if not isinstance(fanouts, Sequence) or len(fanouts) == 0:
        raise ValueError(f"fanouts must be a non-empty sequence, got {fanouts!r}")
    names = {r: [k for k in edge_types if k[1] == r] for _, r, _ in edge_types}
    table = []
    for hop, entry in enumerate(fanouts):
        if not per_relation(entry):
            table.append((check_fanout(f"fanouts[{hop}]", entry),) * len(edge_types))
            continue
        if not isinstance(entry, Mapping):  # one int per edge type, in order
            if len(entry) != len(edge_types):
                raise ValueError(
                    f"fanouts[{hop}] = {entry!r} must give one fanout per edge type "
                    f"({len(edge_types)})"
                )
            table.append(check_fanouts(tuple(entry), f"fanouts[{hop}]"))
            continue
        row: dict[EdgeType, int] = {}
        for name, k in entry.items():
            key = name if name in edge_types else None
            if key is None and len(names.get(name, ())) == 1:
                key = names[name][0]
            if key is None:
                raise ValueError(
                    f"fanouts[{hop}] names relation {name!r}, which is not a unique relation; "
                    f"edge types are {list(edge_types)}"
                )
            value = check_fanout(f"fanouts[{hop}][{name!r}]", k)
            if key in row:
                raise ValueError(
                    f"fanouts[{hop}] gives relation {key} twice ({row[key]} and {value}), by "
                    "its triple and by its name; give it once"
                )
            row[key] = value
        missing = [k for k in edge_types if k not in row]
        if missing:
            raise ValueError(f"fanouts[{hop}] gives no fanout for {missing}")
        table.append(tuple(row[k] for k in edge_types))
    return tuple(table)


def sample_typed(
    csr: HeteroCSR,
    seeds: jax.Array,
    fanouts,
    *,
    seed_type: str,
    key: jax.Array,
    mask: jax.Array | None = None,
) -> TypedSample:
    """Samples the ``L``-hop typed computation tree of a batch of seeds.

    Args:
      csr: the graph's relations grouped by target (:meth:`HeteroCSR.from_graph`).
      seeds: int32 ``[B]`` ids of ``seed_type`` nodes.
      fanouts: per hop, an int for every relation or a ``{relation: k}``
        mapping (:func:`check_typed_fanouts`); static.
      seed_type: the seeds' node type.
      key: PRNG key; the same key gives the same tree.
      mask: optional bool ``[B]``, ``False`` for padded seed slots.

    Returns:
      A :class:`TypedSample` whose path ``p`` of length ``d`` holds
      ``[B, k_1(p_1), ..., k_d(p_d)]`` entries.

    Raises:
      ValueError: an unknown seed type, out-of-range concrete seeds, a
        mask of another shape, or bad fanouts.
    """
    counts = dict(csr.num_nodes)
    if seed_type not in counts:
        raise ValueError(f"unknown seed type {seed_type!r}; node types are {sorted(counts)}")
    table = check_typed_fanouts(fanouts, csr.edge_types)
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
    return _typed_jit(csr, seeds, seed_mask, key, table, seed_type)


@functools.partial(jax.jit, static_argnums=(4, 5))
def _typed_jit(csr, seeds, seed_mask, key, table, seed_type) -> TypedSample:
    levels = typed_paths(csr.edge_types, seed_type, len(table))
    nodes: dict[Path, Any] = {(): jnp.where(seed_mask, seeds.astype(jnp.int32), 0)}
    masks: dict[Path, Any] = {(): seed_mask}
    sizes = [
        nodes_of * table[len(path) - 1][path[-1]]
        for level in levels[1:]
        for path in level
        for nodes_of in [int(np.prod(_shape(path, table, seeds.shape[0])[:-1]))]
    ]
    bits = hash_bits(key, (max(sum(sizes), 1),))
    offset = 0
    for level in levels[1:]:
        for path in level:
            r, k = path[-1], table[len(path) - 1][path[-1]]
            parent = path[:-1]
            n = int(np.prod(nodes[parent].shape))
            words = jax.lax.slice(bits, (offset,), (offset + n * k,)).reshape(n, k)
            offset += n * k
            nodes[path], masks[path] = _sample_level(
                csr.indptr[r], csr.indices[r], nodes[parent], masks[parent], k, words
            )
    return TypedSample(
        nodes=nodes, masks=masks, edge_types=tuple(map(tuple, csr.edge_types)), seed_type=seed_type
    )


def _shape(path: Path, table, batch: int) -> tuple[int, ...]:
    return (batch, *(table[d][r] for d, r in enumerate(path)))


def gather_typed(sample: TypedSample, features: Mapping[str, jax.Array], edge_types, seed_type):
    """Each path's input rows, from its node type's table: ``{path: [..., F]}``.

    ``features[t]`` is ``[N_t, F]`` (input features, or a learnable
    embedding table); masked entries read row 0.
    """
    return {
        path: jnp.take(features[path_type(path, edge_types, seed_type)], ids, axis=0)
        for path, ids in sample.nodes.items()
    }


__all__ = [
    "HeteroCSR",
    "TypedSample",
    "check_typed_fanouts",
    "gather_typed",
    "path_type",
    "sample_typed",
    "typed_paths",
]

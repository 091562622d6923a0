"""Heterogeneous graphs: typed node sets and one bipartite relation graph per edge type.

A :class:`HeteroGraph` holds a node count per node type and, for every edge
type ``(src_type, relation, dst_type)``, a bipartite edge list from the
``src_type`` nodes to the ``dst_type`` nodes. Each relation is a
:class:`~sparsegcn.views.Bipartite` view, so :func:`~sparsegcn.message_passing`
and the view products run on it as on any graph:

.. math::

    y^{(r)}_i = \\sum_{e:\\, j \\to i,\\ e \\in r} w_e \\, x^{\\mathrm{src}(r)}_j,
    \\qquad y^{(r)} = A_r\\, x^{\\mathrm{src}(r)},
    \\quad A_r \\in \\mathbb{R}^{N_{\\mathrm{dst}(r)} \\times N_{\\mathrm{src}(r)}}

A heterogeneous layer combines the relations that end in one node type
(:func:`sparsegcn.nn.rgcn.rgcn_conv` sums their means).

Edge types are written as triples, OGB's and PyG's convention; a relation
name alone (``"cites"``) may stand for its triple where it is unique.

References:
  Schlichtkrull et al., *Modeling Relational Data with Graph Convolutional
  Networks*, ESWC 2018. https://arxiv.org/abs/1703.06103
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn import _checks
from sparsegcn.views import Bipartite

Array = Any
EdgeType = tuple[str, str, str]

_INT32_MAX = np.iinfo(np.int32).max


def check_edge_type(key) -> EdgeType:
    """``key`` if it is a ``(src_type, relation, dst_type)`` triple of non-empty
    strings, else ``TypeError`` naming it."""
    if (
        not isinstance(key, tuple)
        or len(key) != 3
        or not all(isinstance(part, str) and part for part in key)
    ):
        raise TypeError(
            f"an edge type must be a (src_type, relation, dst_type) triple of non-empty "
            f"strings, got {key!r}"
        )
    return key


def _relation_view(key: EdgeType, edges, num_src: int, num_dst: int) -> Bipartite:
    """Validates one relation's ``(senders, receivers)`` or view and returns the view."""
    if isinstance(edges, Bipartite):
        senders, receivers, weights = edges.senders, edges.receivers, edges.weights
        if edges.edge_mask is not None:
            raise ValueError(f"relation {key}: padded (masked) edges are not a stored relation")
    elif isinstance(edges, tuple) and len(edges) in (2, 3):
        senders, receivers = edges[0], edges[1]
        weights = edges[2] if len(edges) == 3 else None
    else:
        raise TypeError(
            f"relation {key} must be (senders, receivers[, weights]) or a Bipartite view, "
            f"got {type(edges).__name__}"
        )
    if not _checks.is_traced(senders, receivers):
        s, r = np.asarray(senders), np.asarray(receivers)
        for label, ids, n in (("senders", s, num_src), ("receivers", r, num_dst)):
            _checks.check_integer_array(f"{label} of relation {key}", ids, ndim=1)
            _checks.check_ids_in_range(f"{label} of relation {key}", ids, n)
        if s.shape != r.shape:
            raise ValueError(
                f"relation {key}: senders and receivers must have the same shape, got "
                f"{s.shape} and {r.shape}"
            )
        as_ids = jnp.asarray if isinstance(senders, jax.Array) else np.asarray
        senders, receivers = as_ids(s, np.int32), as_ids(r, np.int32)
    if weights is not None and not _checks.is_traced(weights):
        w = np.asarray(weights)
        if w.shape != (np.shape(senders)[0],):
            raise ValueError(
                f"relation {key}: weights must have shape ({np.shape(senders)[0]},), one per "
                f"edge, got {w.shape}"
            )
        if not (np.issubdtype(w.dtype, np.floating) or np.issubdtype(w.dtype, np.integer)):
            raise ValueError(f"relation {key}: weights must be real numbers, got dtype {w.dtype}")
        _checks.check_finite(f"weights of relation {key}", w)
        weights = (jnp.asarray if isinstance(weights, jax.Array) else np.asarray)(w, np.float32)
    return Bipartite(senders, receivers, weights, None, 0, num_src, num_dst)


@dataclasses.dataclass(frozen=True, eq=False)
class HeteroGraph:
    """A heterogeneous graph: typed node sets and typed relations; an immutable pytree.

    Attributes:
      num_nodes: static ``{node_type: N_t}``, the node count of every type
        (node ids of type ``t`` lie in ``[0, N_t)``).
      relations: ``{(src_type, relation, dst_type): Bipartite}``, one
        bipartite view per edge type with ``num_src = N_src`` and
        ``num_dst = N_dst``; ``senders`` int32 ``[E_r]``, ``receivers`` int32
        ``[E_r]``, ``weights`` float32 ``[E_r]`` or ``None``. Build it from
        ``(senders, receivers)`` or ``(senders, receivers, weights)`` pairs:
        construction validates them on the host and fails naming the
        relation and the first bad id. Duplicate edges are kept (they count
        twice in a mean); a relation may have no edges.

    The node counts and edge types are static (they fix shapes); the edge
    arrays are the leaves. Transformations return new graphs.
    """

    num_nodes: Mapping[str, int]
    relations: Mapping[EdgeType, Any]

    def __post_init__(self):
        if not isinstance(self.num_nodes, Mapping) or not self.num_nodes:
            raise TypeError(
                f"num_nodes must be a non-empty {{type: count}} mapping, got {self.num_nodes!r}"
            )
        counts = {}
        for node_type, count in self.num_nodes.items():
            if not isinstance(node_type, str) or not node_type:
                raise TypeError(f"node types must be non-empty strings, got {node_type!r}")
            n = _checks.check_static_int(f"num_nodes[{node_type!r}]", count)
            if n > _INT32_MAX:
                raise ValueError(f"num_nodes[{node_type!r}]={n} does not fit int32 node ids")
            counts[node_type] = n
        if not isinstance(self.relations, Mapping):
            raise TypeError(f"relations must be a mapping, got {type(self.relations).__name__}")
        views = {}
        for key, edges in self.relations.items():
            src, _, dst = check_edge_type(key)
            for side, node_type in (("source", src), ("target", dst)):
                if node_type not in counts:
                    raise ValueError(
                        f"relation {key}: {side} type {node_type!r} is not a node type; "
                        f"node types are {sorted(counts)}"
                    )
            views[key] = _relation_view(key, edges, counts[src], counts[dst])
        object.__setattr__(self, "num_nodes", counts)
        object.__setattr__(self, "relations", views)

    # -- pytree protocol: unflattening bypasses validation (leaves may be tracers).
    def tree_flatten(self):
        keys = tuple(self.relations)
        return tuple(self.relations[k] for k in keys), (tuple(self.num_nodes.items()), keys)

    @classmethod
    def tree_unflatten(cls, static, children):
        graph = object.__new__(cls)
        object.__setattr__(graph, "num_nodes", dict(static[0]))
        object.__setattr__(graph, "relations", dict(zip(static[1], children, strict=True)))
        return graph

    # -- structure -----------------------------------------------------------
    @property
    def node_types(self) -> tuple[str, ...]:
        return tuple(self.num_nodes)

    @property
    def edge_types(self) -> tuple[EdgeType, ...]:
        return tuple(self.relations)

    @property
    def num_edges(self) -> dict[EdgeType, int]:
        """Stored edges per edge type (duplicates included)."""
        return {k: int(np.shape(v.senders)[0]) for k, v in self.relations.items()}

    def edge_type(self, name) -> EdgeType:
        """The triple of ``name`` (a triple, or a relation name that is unique).

        Raises:
          ValueError: an unknown or ambiguous name, listing the edge types.
        """
        if isinstance(name, tuple):
            if name in self.relations:
                return name
        else:
            matches = [k for k in self.relations if k[1] == name]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise ValueError(f"relation {name!r} is ambiguous: {matches}; pass the triple")
        raise ValueError(f"unknown relation {name!r}; edge types are {list(self.relations)}")

    def relation(self, name) -> Bipartite:
        """The bipartite view of one edge type (a triple or a unique relation name)."""
        return self.relations[self.edge_type(name)]

    def incoming(self, node_type: str) -> tuple[EdgeType, ...]:
        """The edge types whose targets are ``node_type`` nodes, in stored order."""
        if node_type not in self.num_nodes:
            raise ValueError(f"unknown node type {node_type!r}; node types are {self.node_types}")
        return tuple(k for k in self.relations if k[2] == node_type)

    def replace(self, **changes) -> HeteroGraph:
        """Returns a validated copy with the given fields replaced."""
        return dataclasses.replace(self, **changes)

    # -- transforms (host side) ---------------------------------------------
    def add_reverse_relations(self, *, merge_same_type: bool = False) -> HeteroGraph:
        """Adds ``(dst, "rev_<relation>", src)`` with every edge reversed, per edge type.

        Args:
          merge_same_type: a relation between nodes of one type (citations)
            becomes symmetric instead, ``A + A^T`` with duplicate edges
            merged and weights dropped, as OGB's R-GCN baseline does with
            ``to_symmetric``; no ``rev_`` relation is added for it.

        Returns:
          A new graph; the original relations come first, in their order.

        Raises:
          ValueError: a ``rev_`` name that already exists.
        """
        out: dict[EdgeType, Any] = {}
        reverses: dict[EdgeType, Any] = {}
        for (src, rel, dst), view in self.relations.items():
            s = _checks.as_host("senders", view.senders)
            r = _checks.as_host("receivers", view.receivers)
            if merge_same_type and src == dst:
                n = self.num_nodes[src]
                pairs = np.unique(
                    np.concatenate([r.astype(np.int64) * n + s, s.astype(np.int64) * n + r])
                )
                out[(src, rel, dst)] = ((pairs % n).astype(np.int32), (pairs // n).astype(np.int32))
                continue
            out[(src, rel, dst)] = view
            reverse = (dst, f"rev_{rel}", src)
            if reverse in self.relations:
                raise ValueError(
                    f"relation {reverse} exists already; cannot add the reverse of {(src, rel, dst)}"
                )
            w = None if view.weights is None else _checks.as_host("weights", view.weights)
            reverses[reverse] = (r, s) if w is None else (r, s, w)
        return HeteroGraph(dict(self.num_nodes), {**out, **reverses})

    def csr(self, name) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr [N_dst + 1], indices [E_r])`` of one relation grouped by target
        (stable): row ``i`` lists the ``src_type`` in-neighbours of target ``i``.
        Host-side, for neighbour sampling."""
        from sparsegcn.ops.csr import group_by_row

        view = self.relation(name)
        receivers = _checks.as_host("receivers", view.receivers)
        order, indptr = group_by_row(receivers, view.num_dst)
        return indptr, _checks.as_host("senders", view.senders)[order]

    def to_dense(self, name, dtype=jnp.float32) -> jax.Array:
        """The dense ``[N_dst, N_src]`` matrix ``A_r[receiver, sender]`` (duplicates
        add up): the reference oracle."""
        view = self.relation(name)
        w = jnp.ones(jnp.shape(view.senders), dtype) if view.weights is None else view.weights
        zeros = jnp.zeros((view.num_dst, view.num_src), dtype)
        return zeros.at[view.receivers, view.senders].add(jnp.asarray(w, dtype))

    def __repr__(self) -> str:
        nodes = ", ".join(f"{t}={n}" for t, n in self.num_nodes.items())
        edges = ", ".join(f"{'-'.join(k)}={e}" for k, e in self.num_edges.items())
        return f"HeteroGraph(nodes: {nodes}; edges: {edges})"


jax.tree_util.register_pytree_node_class(HeteroGraph)


__all__ = ["EdgeType", "HeteroGraph", "check_edge_type"]

"""Sampled computation trees seen as bipartite blocks, one per layer.

A :class:`~sparsegcn.sampling.NeighborSample` stores its tree level by
level. Concatenated, the levels form one flat array of ``T`` entries
(``offsets[d]`` is where level ``d`` starts). A model's layer ``i`` of
``L`` updates the entries of levels ``0..P-1`` (``P = L - i``) from their
children in levels ``1..P``: a bipartite graph whose sources are the first
``offsets[P + 1]`` entries and whose targets are the first ``offsets[P]``,
a prefix of the sources (PyG's convention for sampled blocks). Its edges
run from each entry of level ``d + 1`` to its parent in level ``d``. A
model whose graph carries self-loops (GAT) samples them like any edge, so
with fanouts at least the largest degree the block holds the full
neighbourhood and the sampled output equals the full one.

:class:`TreeBlock` is that graph as a view (:mod:`sparsegcn.views`), so a
layer written against the protocol runs on mini-batches unchanged. Its
``product`` never scatters: each parent's children are ``k`` consecutive
entries, so a weighted sum is a reshape and a sum over the fanout axis.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.sampling.neighbor import NeighborSample
from sparsegcn.views import EdgeListView, broadcast_edges, masked_messages


@dataclasses.dataclass(frozen=True, eq=False)
class TreeBlock(EdgeListView):
    """One layer's view of a flat sampled tree; a pytree.

    Attributes:
      sizes: static entries per level, ``(n_0, ..., n_P)``.
      fanouts: static ``(k_1, ..., k_P)``; ``n_{d+1} = n_d k_{d+1}``.
      edge_mask: bool ``[E]``: the children's masks, level after level.

    ``num_src = n_0 + ... + n_P``, ``num_dst = n_0 + ... + n_{P-1}``;
    ``E = n_1 + ... + n_P``. Senders and
    receivers are computed from the sizes (iota arithmetic, nothing stored).
    """

    sizes: tuple
    fanouts: tuple
    edge_mask: jax.Array

    weights = None
    edges_sorted = False
    layout_name = "tree"

    @classmethod
    def from_sample(cls, sample: NeighborSample, parents: int):
        """The block whose targets are levels ``0..parents-1`` of ``sample``."""
        if not 1 <= parents < len(sample.nodes):
            raise ValueError(
                f"parents must be in [1, {len(sample.nodes) - 1}] for a sample with "
                f"{len(sample.nodes) - 1} hops, got {parents}"
            )
        sizes = tuple(int(level.size) for level in sample.nodes[: parents + 1])
        masks = [m.reshape(-1) for m in sample.masks[1 : parents + 1]]
        return cls(sizes, sample.fanouts[:parents], jnp.concatenate(masks))

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
    def senders(self) -> jax.Array:
        return jnp.arange(self.offsets[1], self.offsets[-1], dtype=jnp.int32)

    @property
    def receivers(self) -> jax.Array:
        offsets = self.offsets
        parents = [
            offsets[d] + jnp.arange(self.sizes[d + 1], dtype=jnp.int32) // k
            for d, k in enumerate(self.fanouts)
        ]
        return jnp.concatenate(parents) if len(parents) > 1 else parents[0]

    def targets(self, h):
        return h[: self.num_dst]

    def product(self, x_src, edge_weight=None) -> jax.Array:
        """The weighted sum over each target's children, by reshapes (no scatter)."""
        x = self.check_sources(x_src)
        w = self.edge_factors(edge_weight, x.dtype)
        offsets, rest = self.offsets, x.shape[1:]
        out, pos = [], 0
        for d, k in enumerate(self.fanouts):
            n = self.sizes[d]
            children = x[offsets[d + 1] : offsets[d + 2]].reshape(n, k, *rest)
            if w is not None:  # always set: edge_mask is
                wd = w[pos : pos + n * k]
                wd = wd.reshape(n, k, *wd.shape[1:])
                keep = self.edge_mask[pos : pos + n * k].reshape(n, k)
                children = masked_messages(children * broadcast_edges(wd, children), keep)
            out.append(jnp.sum(children, axis=1))
            pos += n * k
        return jnp.concatenate(out) if len(out) > 1 else out[0]

    def in_count(self, dtype=jnp.float32) -> jax.Array:
        """``[num_dst]`` real children per target, by reshapes (no scatter)."""
        counts = [
            jnp.sum(self.edge_mask[start : start + n * k].reshape(n, k).astype(dtype), axis=1)
            for n, k, start in zip(
                self.sizes[:-1],
                self.fanouts,
                np.cumsum([0, *self.sizes[1:-1]]).tolist(),
                strict=True,
            )
        ]
        return jnp.concatenate(counts) if len(counts) > 1 else counts[0]

    def tree_flatten_with_keys(self):
        children = ((jax.tree_util.GetAttrKey("edge_mask"), self.edge_mask),)
        return children, (self.sizes, self.fanouts)

    @classmethod
    def tree_unflatten(cls, static, children):
        sizes, fanouts = static
        return cls(sizes, fanouts, children[0])


jax.tree_util.register_pytree_with_keys_class(TreeBlock)


def tree_entries(sample: NeighborSample) -> jax.Array:
    """int32 ``[T]``: every level's node ids, concatenated (the flat tree's rows)."""
    return jnp.concatenate([level.reshape(-1) for level in sample.nodes])

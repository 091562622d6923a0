"""Row-chunked propagation and bipartite views with 64-bit types on
(``jax_enable_x64``, which the troubleshooting page recommends past 2**31 edges):
``lax.dynamic_slice`` and ``dynamic_update_slice`` refuse mixed index types."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.graph import Graph
from sparsegcn.sampling.chunks import ChunkedGraph, propagate_chunked
from sparsegcn.views import Bipartite

SENDERS = np.array([0, 1, 2, 3, 4, 0, 2])
RECEIVERS = np.array([1, 2, 3, 4, 0, 3, 0])


def test_chunked_propagation_under_x64_matches_a_dense_product():
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    dense = np.zeros((5, 5), np.float32)
    np.add.at(dense, (RECEIVERS, SENDERS), 1.0)  # row r sums its in-neighbours
    with jax.enable_x64(True):
        chunked = ChunkedGraph.build(Graph(SENDERS, RECEIVERS, None, 5), chunk_size=2)
        out = propagate_chunked(chunked, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), dense @ x)


def test_bipartite_targets_under_x64_with_an_int32_start():
    h = np.arange(12, dtype=np.float32).reshape(6, 2)
    with jax.enable_x64(True):
        view = Bipartite(
            senders=jnp.zeros(1, jnp.int32),
            receivers=jnp.zeros(1, jnp.int32),
            dst_start=jnp.asarray(3, jnp.int32),
            num_src=6,
            num_dst=2,
        )
        np.testing.assert_array_equal(np.asarray(view.targets(jnp.asarray(h))), h[3:5])

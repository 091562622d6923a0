"""Full GCN training steps (forward, loss, backward, Adam), and the sampler.

``test_cora_step[packed-hash]`` is the figure the README quotes for issue 2's
target (Kipf & Welling's setup: hidden 16, dropout 0.5, row-normalized
sparse features, Adam; target <= 3.4 ms median on the 2-core CPU). The other
Cora variants are the before-measurements of the performance work: the
unpacked edge list, and JAX's threefry dropout instead of the hash.
``benchmarks/peers/`` times PyG's step on the same data in the same run.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import run_compiled

from sparsegcn.bench.steps import arxiv_like_setup, cora_setup, gcn_step

CORA_VARIANTS = {
    "packed-hash": dict(packed=True, dropout_impl="hash"),
    "unpacked-hash": dict(packed=False, dropout_impl="hash"),
    "packed-threefry": dict(packed=True, dropout_impl="threefry"),
    "packed-dense-features": dict(packed=True, dropout_impl="hash", sparse_features=False),
}


@pytest.mark.parametrize("variant", list(CORA_VARIANTS))
def test_cora_step(benchmark, cora_root, variant):
    options = dict(CORA_VARIANTS[variant])
    impl = options.pop("dropout_impl")
    setup = cora_setup(cora_root, **options)
    benchmark.group = "gcn step cora"
    step, args = gcn_step(setup, dropout_impl=impl)
    new = run_compiled(benchmark, step, args, rounds=200, extra=dict(variant=variant))
    assert np.isfinite(float(new[3]))


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_arxiv_sized_step(benchmark, full, packed):
    """3-layer GCN, hidden 256, on a random graph of ogbn-arxiv's size."""
    if not packed and not full:
        pytest.skip("the unpacked arxiv-sized step (~12 s a call) runs with --full")
    setup = arxiv_like_setup(packed=packed)
    benchmark.group = "gcn step arxiv-sized"
    step, args = gcn_step(setup)
    new = run_compiled(
        benchmark, step, args, rounds=3, extra=dict(num_edges=setup.data.graph.num_edges)
    )
    assert np.isfinite(float(new[3]))


@pytest.mark.parametrize("fanouts", [(15, 10), (25, 10)])
def test_neighbor_sampler(benchmark, fanouts):
    """Two-hop neighbour sampling of a 1024-seed batch on a 100k-node graph."""
    sampling = pytest.importorskip("sparsegcn.sampling")
    from sparsegcn.bench.graphs import random_graph

    graph = random_graph(100_000, 10.0)
    csr = graph.to_csr()
    indptr, indices = jax.device_put((csr.indptr, csr.indices))
    seeds = jax.device_put(np.arange(1024, dtype=np.int32) * 97 % 100_000)
    benchmark.group = "sampler"

    def sample(indptr, indices, seeds, key):
        return sampling.sample_blocks(indptr, indices, seeds, fanouts, key=key)

    run_compiled(benchmark, sample, (indptr, indices, seeds, jax.random.key(0)), rounds=20)

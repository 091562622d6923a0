"""PyG, torch.sparse CSR and scipy CSR on the graphs ``benchmarks/`` times ours on.

Each benchmark joins the group of the matching one of ours, so
pytest-benchmark's table shows them side by side (its relative columns are
the ratios). Skipped when ``torch_geometric`` is not installed: it is never
a dependency of sparsegcn. For a one-table comparison with explicit
``theirs / ours`` ratios, run ``python benchmarks/peers/compare.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch_geometric")

import implementations as peers

from sparsegcn.bench.graphs import make_graph, propagation_graph
from sparsegcn.bench.steps import arxiv_like_setup, cora_setup

PROPAGATION = {
    "pyg-scatter": peers.pyg_propagate,
    "torch-csr": peers.torch_csr_propagate,
    "scipy-csr": peers.scipy_csr_propagate,
}


@pytest.mark.peers
@pytest.mark.parametrize("kind", ["random", "sbm"])
@pytest.mark.parametrize("peer", list(PROPAGATION))
def test_peer_propagate(benchmark, peer, kind):
    n, degree, features = 100_000, 10.0, 64
    a_hat = propagation_graph(make_graph(kind, n, degree), "segment-unpacked")
    x = np.random.default_rng(0).standard_normal((n, features), dtype=np.float32)
    run = PROPAGATION[peer](a_hat, x)
    benchmark.group = f"propagate {kind} fwd N={n} deg={degree:g} F={features}"
    benchmark.pedantic(run, rounds=7, warmup_rounds=1, iterations=1)


def _pyg_step(setup):
    data = setup.data
    return peers.pyg_gcn_step(
        setup.graph,
        setup.dense_features,
        np.asarray(data.labels),
        np.asarray(data.train_mask),
        setup.num_classes,
        hidden=setup.hidden,
        num_layers=setup.num_layers,
        dropout=setup.dropout,
    )


@pytest.mark.peers
def test_pyg_cora_step(benchmark, cora_root):
    benchmark.group = "gcn step cora"
    benchmark.pedantic(_pyg_step(cora_setup(cora_root)), rounds=50, warmup_rounds=3, iterations=1)


@pytest.mark.peers
def test_pyg_arxiv_sized_step(benchmark, full):
    """About 35 s a step here: one timed round by default, three with --full."""
    benchmark.group = "gcn step arxiv-sized"
    run = _pyg_step(arxiv_like_setup(packed=False))
    benchmark.pedantic(run, rounds=3 if full else 1, warmup_rounds=1, iterations=1)

"""GIN and GINE against a dense reference and PyG, on every view (sparsegcn/nn/gin.py)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from graphs import random_graph

import sparsegcn as sg
from sparsegcn.backends import LAYOUTS, as_layout
from sparsegcn.cli import main
from sparsegcn.nn.gin import gin, gin_conv, gin_layer_params, gin_project, gine_conv
from sparsegcn.nn.registry import PREPARATIONS
from sparsegcn.sampling import ChunkedGraph, sample_blocks

FEATURES, HIDDEN, OUT, EDGE_DIM = 5, 6, 4, 3


def prepared_graph(seed=0, n=24, e=70) -> sg.Graph:
    """Duplicates, self-loops and isolated nodes, weights dropped (GIN's preparation)."""
    return PREPARATIONS["unweighted"](random_graph(n, e, seed=seed, isolated=3))


def counts(graph) -> np.ndarray:
    """``A[i, j]`` = number of edges ``j -> i``: the dense sum GIN takes."""
    a = np.zeros((graph.num_nodes, graph.num_nodes), np.float32)
    np.add.at(a, (np.asarray(graph.receivers), np.asarray(graph.senders)), 1.0)
    return a


def dense_mlp(params, u):
    return jax.nn.relu(u @ params["w1"] + params["b1"][None]) @ params["w2"] + params["b2"][None]


def dense_gin(params, graph, x):
    """``MLP((1 + ε) x + A x)`` with a dense count matrix: the oracle."""
    return dense_mlp(params, (1.0 + params["eps"]) * x + jnp.asarray(counts(graph)) @ x)


def dense_gine(params, graph, x, e):
    """GINE with an explicit ``[N, N, F]`` message tensor, one edge at a time."""
    n = graph.num_nodes
    messages = jax.nn.relu(x[np.asarray(graph.senders)] + e @ params["w_e"] + params["b_e"][None])
    onehot = jnp.asarray(np.eye(n, dtype=np.float32)[np.asarray(graph.receivers)])  # [E, N]
    return dense_mlp(params, (1.0 + params["eps"]) * x + onehot.T @ messages)


def test_parameters_have_the_documented_shapes():
    params = gin_layer_params(jax.random.key(0), FEATURES, HIDDEN, OUT, edge_dim=EDGE_DIM)
    shapes = {k: v.shape for k, v in params.items()}
    assert shapes == {
        "eps": (),
        "w1": (FEATURES, HIDDEN),
        "b1": (HIDDEN,),
        "w2": (HIDDEN, OUT),
        "b2": (OUT,),
        "w_e": (EDGE_DIM, FEATURES),
        "b_e": (FEATURES,),
    }
    assert float(params["eps"]) == 0.0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layer_matches_dense_reference_forward_and_gradient(layout):
    graph = prepared_graph()
    view = as_layout(graph, layout)
    params = gin_layer_params(jax.random.key(0), FEATURES, HIDDEN, OUT)
    params = jax.tree.map(lambda p: p + 0.1, params)  # non-zero biases and ε
    x = jax.random.normal(jax.random.key(1), (graph.num_nodes, FEATURES))

    def ours(params, x):
        return gin_conv(params, view, gin_project(params, x))

    def reference(params, x):
        return dense_gin(params, graph, x)

    np.testing.assert_allclose(ours(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(ours)(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    loss = lambda f: lambda p, x: jnp.sum(jnp.tanh(f(p, x)))  # noqa: E731
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1)))(params, x)
    want = jax.jit(jax.grad(loss(reference), argnums=(0, 1)))(params, x)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_gine_matches_dense_reference_forward_and_gradient():
    graph = prepared_graph(seed=1, n=12, e=30)
    params = gin_layer_params(jax.random.key(2), FEATURES, HIDDEN, OUT, edge_dim=EDGE_DIM)
    params = jax.tree.map(lambda p: p + 0.1, params)
    x = jax.random.normal(jax.random.key(3), (graph.num_nodes, FEATURES))
    e = jax.random.normal(jax.random.key(4), (graph.num_edges, EDGE_DIM))
    np.testing.assert_allclose(
        gine_conv(params, graph, x, e), dense_gine(params, graph, x, e), rtol=1e-5, atol=1e-5
    )
    loss = lambda f: lambda p, x, e: jnp.sum(jnp.tanh(f(p, graph, x, e)))  # noqa: E731
    got = jax.jit(jax.grad(loss(gine_conv), argnums=(0, 1, 2)))(params, x, e)
    want = jax.jit(jax.grad(loss(dense_gine), argnums=(0, 1, 2)))(params, x, e)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_gine_refuses_missing_edge_map_and_misshapen_features():
    graph = prepared_graph(n=8, e=10)
    x = jnp.ones((graph.num_nodes, FEATURES))
    plain = gin_layer_params(jax.random.key(0), FEATURES, HIDDEN, OUT)
    with pytest.raises(ValueError, match="needs an edge map"):
        gine_conv(plain, graph, x, jnp.ones((graph.num_edges, EDGE_DIM)))
    params = gin_layer_params(jax.random.key(0), FEATURES, HIDDEN, OUT, edge_dim=EDGE_DIM)
    with pytest.raises(ValueError, match=rf"\[{graph.num_edges}, {EDGE_DIM}\], got \(2, 3\)"):
        gine_conv(params, graph, x, jnp.ones((2, EDGE_DIM)))


def test_model_on_chunks_and_on_full_samples_equals_the_full_graph():
    """Row chunks and a sampled tree with every neighbour give the full graph's logits."""
    graph = prepared_graph(seed=3, n=30, e=80)
    model = gin(FEATURES, 3, hidden=HIDDEN, dropout_rate=0.0)
    params = jax.tree.map(lambda p: p + 0.05, model.init(jax.random.key(2)))
    x = jax.random.normal(jax.random.key(3), (graph.num_nodes, FEATURES))
    full = model.apply(params, graph, x)
    np.testing.assert_allclose(full, dense_model(params, graph, x), rtol=1e-5, atol=1e-5)
    chunked = ChunkedGraph.build(graph, chunk_size=7)
    np.testing.assert_allclose(model.apply(params, chunked, x), full, rtol=1e-5, atol=1e-5)
    max_degree = int(np.bincount(np.asarray(graph.receivers)).max())
    seeds = jnp.arange(graph.num_nodes, dtype=jnp.int32)
    sample = sample_blocks(
        chunked.indptr, chunked.indices, seeds, (max_degree, max_degree), key=jax.random.key(4)
    )
    np.testing.assert_allclose(model.apply(params, sample, x), full, rtol=1e-5, atol=1e-5)
    sparse = sg.as_features(sp.csr_array(np.asarray(x)))
    np.testing.assert_allclose(model.apply(params, sample, sparse), full, rtol=1e-5, atol=1e-5)


def dense_model(params, graph, x):
    """Two dense GIN layers with a ReLU between them."""
    first, last = params["layers"]
    return dense_gin(last, graph, jax.nn.relu(dense_gin(first, graph, x)))


def test_builder_refuses_bad_settings_with_the_value():
    with pytest.raises(ValueError, match="hidden must be >= 1, got 0"):
        gin(4, 2, hidden=0)
    with pytest.raises(ValueError, match=r"dropout_rate must be >= 0.0 and < 1.0, got 1.0"):
        gin(4, 2, dropout_rate=1.0)


def test_cli_trains_checkpoints_and_predicts(tmp_path):
    argv = ["train", "--model", "gin", "--scale", "0.1", "--epochs", "5", "--seeds", "2"]
    ckpt = tmp_path / "ckpt"
    argv += ["--checkpoint", str(ckpt), "--json", str(tmp_path / "r.json"), "--no-progress"]
    assert main(argv) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["model"] == "gin" and report["seeds"] == 2
    out = tmp_path / "p.npy"
    assert main(["predict", "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    assert np.load(out).shape[0] == 2


@pytest.mark.slow
def test_cora_accuracy_over_ten_seeds(data_root, tmp_path):
    out = tmp_path / "cora.json"
    argv = ["train", "--dataset", "cora", "--root", str(data_root), "--model", "gin"]
    assert main([*argv, "--seeds", "10", "--json", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["test_acc_mean"] >= 0.77


@pytest.mark.parametrize("edges", [False, True], ids=["GINConv", "GINEConv"])
def test_layer_equals_pyg_with_the_same_weights(edges):
    # Skipped here, not at import, so a missing peer skips only this test.
    torch = pytest.importorskip("torch", reason="PyG parity needs torch (never a dependency)")
    pyg_conv = pytest.importorskip(
        "torch_geometric.nn", reason="PyG parity needs torch_geometric (never a dependency)"
    )
    raw = random_graph(24, 70, seed=5, isolated=3, weighted=False)
    params = gin_layer_params(
        jax.random.key(7), FEATURES, HIDDEN, OUT, edge_dim=EDGE_DIM if edges else None
    )
    params = jax.tree.map(lambda p: p + 0.05, params)
    x = np.asarray(jax.random.normal(jax.random.key(8), (raw.num_nodes, FEATURES)))
    e = np.asarray(jax.random.normal(jax.random.key(9), (raw.num_edges, EDGE_DIM)))
    t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
    mlp = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT)
    )
    if edges:
        conv = pyg_conv.GINEConv(mlp, train_eps=True, edge_dim=EDGE_DIM)
    else:
        conv = pyg_conv.GINConv(mlp, train_eps=True)
    with torch.no_grad():
        mlp[0].weight.copy_(t(params["w1"]).T)
        mlp[0].bias.copy_(t(params["b1"]))
        mlp[2].weight.copy_(t(params["w2"]).T)
        mlp[2].bias.copy_(t(params["b2"]))
        conv.eps.copy_(t(params["eps"]).reshape(1))
        if edges:
            conv.lin.weight.copy_(t(params["w_e"]).T)
            conv.lin.bias.copy_(t(params["b_e"]))
    edge_index = torch.tensor(np.stack([raw.senders, raw.receivers]).astype(np.int64))
    xt = t(x).requires_grad_(True)
    want = conv(xt, edge_index, t(e)) if edges else conv(xt, edge_index)
    want.square().sum().backward()
    graph = PREPARATIONS["unweighted"](raw)

    def ours(x):
        if edges:
            return gine_conv(params, graph, x, jnp.asarray(e))
        return gin_conv(params, graph, gin_project(params, x))

    np.testing.assert_allclose(ours(jnp.asarray(x)), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    grad = jax.grad(lambda x: jnp.sum(ours(x) ** 2))(jnp.asarray(x))
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_gin_layers_refuse_a_weighted_graph():
    # Before: a weighted graph scaled every message by its weight, silently (PyG's
    # GINConv and GINEConv ignore weights; GIN's sum is unweighted).
    from sparsegcn.nn.graph_ogb import gine_aggregate

    weighted = random_graph(24, 70, seed=1)
    assert weighted.weights is not None
    x = jnp.ones((24, FEATURES))
    params = gin_layer_params(jax.random.key(0), FEATURES, HIDDEN, OUT, edge_dim=EDGE_DIM)
    edges = jnp.ones((weighted.num_edges, EDGE_DIM))
    with pytest.raises(ValueError, match="gin_conv sums neighbours unweighted"):
        gin_conv(params, weighted, gin_project(params, x))
    with pytest.raises(ValueError, match="gine_conv sums neighbours unweighted"):
        gine_conv(params, weighted, x, edges)
    with pytest.raises(ValueError, match="gine_aggregate sums neighbours unweighted"):
        gine_aggregate(weighted, jnp.ones((24, HIDDEN)), jnp.ones((weighted.num_edges, HIDDEN)))
    unweighted = weighted.replace(weights=None)
    assert gin_conv(params, unweighted, gin_project(params, x)).shape == (24, OUT)

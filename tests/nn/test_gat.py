"""GAT and GATv2 against a dense reference and PyG, on every view (sparsegcn/nn/gat.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from graphs import random_graph
from sweep import covering

import sparsegcn as sg
from sparsegcn.backends import LAYOUTS, as_layout
from sparsegcn.nn.gat import gat, gat_conv, gat_layer_params, gat_project
from sparsegcn.nn.registry import PREPARATIONS
from sparsegcn.sampling import ChunkedGraph, sample_blocks

HEADS, WIDTH, FEATURES = 3, 4, 5


def prepared_graph(seed=0, n=24, e=70) -> sg.Graph:
    """Duplicates, several self-loops and isolated nodes, then GAT's preparation."""
    return PREPARATIONS["self_loops"](random_graph(n, e, seed=seed, isolated=3))


def dense_gat(params, graph, x, *, v2: bool, concat: bool, slope=0.2):
    """GAT written with dense [H, N, N] score matrices: an independent oracle.

    Duplicate edges count as separate terms of the softmax, as in the edge list.
    """
    n = graph.num_nodes
    s, r = np.asarray(graph.senders), np.asarray(graph.receivers)
    counts = np.zeros((n, n))
    np.add.at(counts, (r, s), 1.0)
    present = jnp.asarray(counts > 0)
    heads, width = (params["att"] if v2 else params["att_src"]).shape
    if v2:
        z_l = (x @ params["w_l"] + params["b_l"][None]).reshape(n, heads, width)
        z_r = (x @ params["w_r"] + params["b_r"][None]).reshape(n, heads, width)
        pair = jax.nn.leaky_relu(z_r[:, None] + z_l[None, :], slope)  # [i, j, H, F]
        logits = jnp.einsum("ijhf,hf->hij", pair, params["att"])
        z = z_l
    else:
        z = (x @ params["w"]).reshape(n, heads, width)
        a_src = jnp.einsum("jhf,hf->hj", z, params["att_src"])
        a_dst = jnp.einsum("ihf,hf->hi", z, params["att_dst"])
        logits = jax.nn.leaky_relu(a_dst[:, :, None] + a_src[:, None, :], slope)
    masked = jnp.where(present[None], logits, -jnp.inf)
    peak = jnp.max(jnp.where(present[None], logits, -1e30), axis=2, keepdims=True)
    weights = jnp.asarray(counts)[None] * jnp.exp(masked - jax.lax.stop_gradient(peak))
    total = jnp.sum(weights, axis=2, keepdims=True)
    alpha = weights / jnp.where(total > 0, total, 1.0)
    out = jnp.einsum("hij,jhf->ihf", alpha, z)
    out = out.reshape(n, -1) if concat else out.mean(axis=1)
    return out + params["b"][None]


@pytest.mark.parametrize(
    ("layout", "concat", "v2"),
    covering(LAYOUTS, {"concat": True, "mean": False}, {"gat": False, "gatv2": True}),
)
def test_layer_matches_dense_reference_forward_and_gradient(layout, concat, v2):
    graph = prepared_graph()
    view = as_layout(graph, layout)
    params = gat_layer_params(jax.random.key(0), FEATURES, HEADS, WIDTH, concat=concat, v2=v2)
    params = jax.tree.map(lambda p: p + 0.1, params)  # non-zero biases
    x = jax.random.normal(jax.random.key(1), (graph.num_nodes, FEATURES))

    def ours(params, x):
        return gat_conv(params, view, gat_project(params, x), concat=concat)

    def reference(params, x):
        return dense_gat(params, graph, x, v2=v2, concat=concat)

    np.testing.assert_allclose(ours(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(ours)(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    loss = lambda f: lambda p, x: jnp.sum(jnp.tanh(f(p, x)))  # noqa: E731
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1)))(params, x)
    want = jax.jit(jax.grad(loss(reference), argnums=(0, 1)))(params, x)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "v2", [pytest.param(False, id="gat", marks=pytest.mark.slow), pytest.param(True, id="gatv2")]
)
def test_model_on_chunks_and_on_full_samples_equals_the_full_graph(v2):
    """Row chunks and a sampled tree with every neighbour give the full graph's logits."""
    graph = prepared_graph(seed=3, n=30, e=80)
    model = gat(FEATURES, 3, hidden=WIDTH, heads=2, v2=v2, dropout_rate=0.0)
    params = model.init(jax.random.key(2))
    x = jax.random.normal(jax.random.key(3), (graph.num_nodes, FEATURES))
    full = model.apply(params, graph, x)
    chunked = ChunkedGraph.build(graph, chunk_size=7)
    np.testing.assert_allclose(model.apply(params, chunked, x), full, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        model.embed(params, chunked, x), model.embed(params, graph, x), rtol=1e-5, atol=1e-5
    )
    max_degree = int(np.bincount(np.asarray(graph.receivers)).max())
    seeds = jnp.arange(graph.num_nodes, dtype=jnp.int32)
    sample = sample_blocks(
        chunked.indptr, chunked.indices, seeds, (max_degree, max_degree), key=jax.random.key(4)
    )
    np.testing.assert_allclose(model.apply(params, sample, x), full, rtol=1e-5, atol=1e-5)
    sparse = sg.as_features(sp.csr_array(np.asarray(x)))
    np.testing.assert_allclose(model.apply(params, sample, sparse), full, rtol=1e-5, atol=1e-5)


def test_attention_dropout_needs_training_and_changes_the_output():
    graph = prepared_graph()
    model = gat(FEATURES, 3, hidden=WIDTH, heads=2, dropout_rate=0.5)
    params = model.init(jax.random.key(0))
    x = jnp.ones((graph.num_nodes, FEATURES))
    a = model.apply(params, graph, x, key=jax.random.key(1), training=True)
    b = model.apply(params, graph, x, key=jax.random.key(2), training=True)
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(
        model.apply(params, graph, x), model.apply(params, graph, x, key=jax.random.key(1))
    )
    with pytest.raises(ValueError, match="explicit PRNG key"):
        model.apply(params, graph, x, training=True)


def test_builder_refuses_bad_settings_with_the_value():
    with pytest.raises(ValueError, match="heads must be >= 1, got 0"):
        gat(4, 2, heads=0)
    with pytest.raises(ValueError, match=r"attention_dropout must be in \[0, 1\), got 1.0"):
        gat(4, 2, attention_dropout=1.0)


@pytest.mark.parametrize("v2", [False, True], ids=["GATConv", "GATv2Conv"])
@pytest.mark.parametrize("concat", [True, False], ids=["concat", "mean"])
def test_layer_equals_pyg_with_the_same_weights(v2, concat, pyg_nn):
    """PyG removes existing self-loops and adds one per node, like GAT's preparation here."""
    import torch

    raw = random_graph(24, 70, seed=5, isolated=3, weighted=False)
    params = gat_layer_params(jax.random.key(7), FEATURES, HEADS, WIDTH, concat=concat, v2=v2)
    params = jax.tree.map(lambda p: p + 0.05, params)
    x = np.asarray(jax.random.normal(jax.random.key(8), (raw.num_nodes, FEATURES)))
    cls = pyg_nn.GATv2Conv if v2 else pyg_nn.GATConv
    conv = cls(FEATURES, WIDTH, heads=HEADS, concat=concat, dropout=0.0)
    t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
    with torch.no_grad():
        if v2:
            conv.lin_l.weight.copy_(t(params["w_l"]).T)
            conv.lin_l.bias.copy_(t(params["b_l"]))
            conv.lin_r.weight.copy_(t(params["w_r"]).T)
            conv.lin_r.bias.copy_(t(params["b_r"]))
            conv.att.copy_(t(params["att"])[None])
        else:
            conv.lin.weight.copy_(t(params["w"]).T)
            conv.att_src.copy_(t(params["att_src"])[None])
            conv.att_dst.copy_(t(params["att_dst"])[None])
        conv.bias.copy_(t(params["b"]))
    edge_index = torch.tensor(np.stack([raw.senders, raw.receivers]).astype(np.int64))
    xt = t(x).requires_grad_(True)
    want = conv(xt, edge_index)
    want.square().sum().backward()
    graph = PREPARATIONS["self_loops"](raw)

    def ours(x):
        return gat_conv(params, graph, gat_project(params, x), concat=concat)

    np.testing.assert_allclose(ours(jnp.asarray(x)), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    grad = jax.grad(lambda x: jnp.sum(ours(x) ** 2))(jnp.asarray(x))
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("v2", [False, True])
def test_gat_on_a_graph_without_nodes_gives_no_rows(v2):
    # Before: ZeroDivisionError from reshape(0, -1); every other model gave [0, C].
    model = gat(3, 2, v2=v2, heads=2, hidden=4)
    graph = sg.Graph(np.zeros(0, np.int32), np.zeros(0, np.int32), None, 0)
    out = model.apply(model.init(jax.random.key(0)), graph, jnp.zeros((0, 3)))
    assert out.shape == (0, 2)

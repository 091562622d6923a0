"""Edge features in GAT, GATv2 and GIN (GINE): per-edge oracle, PyG, and the models' API.

The oracle walks the edges with one-hot ``[E, N]`` matrices (no segment
operation), so duplicate edges with different features, several self-loops
and isolated nodes (which receive nothing) are each their own case.
"""

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
from sparsegcn.nn.gin import gin, gin_layer_params, gine_conv
from sparsegcn.nn.registry import PREPARATIONS
from sparsegcn.sampling import ChunkedGraph

HEADS, WIDTH, FEATURES, EDGE_DIM = 3, 4, 5, 2


def raw_graph(seed=0, n=16, e=40) -> sg.Graph:
    """Duplicates, several self-loops and isolated nodes, unweighted, edges unsorted."""
    return random_graph(n, e, seed=seed, isolated=3, duplicates=6, self_loops=4, weighted=False)


def one_hot(ids, n) -> jax.Array:
    return jnp.asarray(np.eye(n, dtype=np.float32)[np.asarray(ids)])  # [E, N]


def edge_gat(params, graph, x, e, *, v2: bool, concat: bool, slope=0.2):
    """GAT with edge features, edge by edge: one-hot gathers, a per-target softmax by matmuls."""
    n = graph.num_nodes
    src, dst = one_hot(graph.senders, n), one_hot(graph.receivers, n)
    heads, width = (params["att"] if v2 else params["att_src"]).shape
    e_proj = (e @ params["w_e"]).reshape(-1, heads, width)  # [E, H, F]
    if v2:
        z_l = (x @ params["w_l"] + params["b_l"][None]).reshape(n, heads, width)
        z_r = (x @ params["w_r"] + params["b_r"][None]).reshape(n, heads, width)
        pair = jnp.einsum("en,nhf->ehf", src, z_l) + jnp.einsum("en,nhf->ehf", dst, z_r)
        logits = jnp.einsum("ehf,hf->eh", jax.nn.leaky_relu(pair + e_proj, slope), params["att"])
        z = z_l
    else:
        z = (x @ params["w"]).reshape(n, heads, width)
        logits = jax.nn.leaky_relu(
            jnp.einsum("en,nhf,hf->eh", src, z, params["att_src"])
            + jnp.einsum("en,nhf,hf->eh", dst, z, params["att_dst"])
            + jnp.einsum("ehf,hf->eh", e_proj, params["att_edge"]),
            slope,
        )
    # Per-target maximum through an [E, N] mask, then sums through the one-hot matrix.
    peak = jnp.max(jnp.where(dst.T[:, :, None] > 0, logits[None], -1e30), axis=1)  # [N, H]
    weights = jnp.exp(logits - jax.lax.stop_gradient(dst @ peak))
    alpha = weights / (dst @ (dst.T @ weights))  # [E, H]
    messages = alpha[:, :, None] * jnp.einsum("en,nhf->ehf", src, z)
    out = jnp.einsum("en,ehf->nhf", dst, messages)
    out = out.reshape(n, -1) if concat else out.mean(axis=1)
    return out + params["b"][None]


def edge_gine(params, graph, x, e):
    """GINE, edge by edge with one-hot matrices: ``MLP((1 + ε) x_i + Σ ReLU(x_j + e W_e + b_e))``."""
    n = graph.num_nodes
    src, dst = one_hot(graph.senders, n), one_hot(graph.receivers, n)
    messages = jax.nn.relu(src @ x + e @ params["w_e"] + params["b_e"][None])
    u = (1.0 + params["eps"]) * x + dst.T @ messages
    hidden = jax.nn.relu(u @ params["w1"] + params["b1"][None])
    return hidden @ params["w2"] + params["b2"][None]


def check_forward_and_gradient(ours, reference, params, x, e):
    np.testing.assert_allclose(ours(params, x, e), reference(params, x, e), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        jax.jit(ours)(params, x, e), reference(params, x, e), rtol=1e-5, atol=1e-5
    )
    loss = lambda f: lambda p, x, e: jnp.sum(jnp.tanh(f(p, x, e)))  # noqa: E731
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1, 2)))(params, x, e)
    want = jax.jit(jax.grad(loss(reference), argnums=(0, 1, 2)))(params, x, e)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def inputs(graph, seed=1):
    x = jax.random.normal(jax.random.key(seed), (graph.num_nodes, FEATURES))
    e = jax.random.normal(jax.random.key(seed + 1), (graph.num_edges, EDGE_DIM))
    return x, e


@pytest.mark.parametrize(
    ("layout", "concat", "v2"),
    covering(  # the edge list and BCOO (which sorts its edges) by default
        LAYOUTS,
        {"concat": True, "mean": False},
        {"gat": False, "gatv2": True},
        within=lambda layout, *_: layout in ("edges", "bcoo"),
    ),
)
def test_gat_layer_matches_the_edge_oracle_forward_and_gradient(layout, concat, v2):
    graph = raw_graph()
    view = as_layout(graph, layout)
    params = gat_layer_params(
        jax.random.key(0), FEATURES, HEADS, WIDTH, concat=concat, v2=v2, edge_dim=EDGE_DIM
    )
    params = jax.tree.map(lambda p: p + 0.1, params)
    x, e = inputs(graph)

    def ours(params, x, e):
        return gat_conv(params, view, gat_project(params, x), concat=concat, edge_features=e)

    def reference(params, x, e):  # the features follow the view's own edge order (bcoo sorts)
        return edge_gat(params, view, x, e, v2=v2, concat=concat)

    check_forward_and_gradient(ours, reference, params, x, e)
    # Isolated nodes receive nothing: their rows are the bias.
    out = ours(params, x, e)
    width = out.shape[1]
    np.testing.assert_allclose(out[-3:], np.broadcast_to(params["b"], (3, width)), atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gine_layer_matches_the_edge_oracle_on_every_layout(layout):
    graph = raw_graph(seed=2)
    view = as_layout(graph, layout)
    params = gin_layer_params(jax.random.key(3), FEATURES, 6, 4, edge_dim=EDGE_DIM)
    params = jax.tree.map(lambda p: p + 0.1, params)
    x, e = inputs(graph, seed=4)

    def ours(params, x, e):
        return gine_conv(params, view, x, e)

    def reference(params, x, e):
        return edge_gine(params, view, x, e)

    check_forward_and_gradient(ours, reference, params, x, e)


def test_edge_term_changes_the_attention_and_zero_features_remove_it():
    """Zero edge features give plain GAT with the same weights; others change the output."""
    graph = raw_graph(seed=5)
    with_edges = gat_layer_params(
        jax.random.key(0), FEATURES, HEADS, WIDTH, concat=True, v2=False, edge_dim=EDGE_DIM
    )
    plain = gat_layer_params(jax.random.key(0), FEATURES, HEADS, WIDTH, concat=True, v2=False)
    assert set(with_edges) - set(plain) == {"w_e", "att_edge"}
    for k in plain:  # the edge map has its own keys: the seed's other weights are unchanged
        np.testing.assert_array_equal(with_edges[k], plain[k])
    x, e = inputs(graph)
    z = gat_project(plain, x)
    zero = gat_conv(with_edges, graph, z, edge_features=jnp.zeros_like(e))
    np.testing.assert_allclose(zero, gat_conv(plain, graph, z), rtol=1e-6, atol=1e-6)
    assert not np.allclose(gat_conv(with_edges, graph, z, edge_features=e), zero, atol=1e-3)


def stacked_reference(model_name, params, graph, x, e):
    """Two oracle layers with the model's activation between them."""
    first, last = params["layers"]
    if model_name == "gin":
        return edge_gine(last, graph, jax.nn.relu(edge_gine(first, graph, x, e)), e)
    h = jax.nn.elu(edge_gat(first, graph, x, e, v2=model_name == "gatv2", concat=True))
    return edge_gat(last, graph, h, e, v2=model_name == "gatv2", concat=False)


def build(model_name, edge_dim=EDGE_DIM):
    if model_name == "gin":
        return gin(FEATURES, 3, hidden=6, dropout_rate=0.0, edge_dim=edge_dim)
    return gat(
        FEATURES, 3, hidden=WIDTH, heads=2, dropout_rate=0.0, v2=model_name == "gatv2",
        edge_dim=edge_dim,
    )  # fmt: skip


@pytest.mark.parametrize(
    "model_name",
    [
        pytest.param("gat", marks=pytest.mark.slow),
        pytest.param("gatv2", marks=pytest.mark.slow),
        "gin",
    ],
)
def test_models_thread_edge_features_through_every_layer(model_name):
    prepare = "unweighted" if model_name == "gin" else "self_loops"
    graph = PREPARATIONS[prepare](raw_graph(seed=6))
    model = build(model_name)
    params = jax.tree.map(lambda p: p + 0.05, model.init(jax.random.key(7)))
    x, e = inputs(graph, seed=8)

    def ours(params, x, e):
        return model.apply(params, graph, x, edge_features=e)

    def reference(params, x, e):
        return stacked_reference(model_name, params, graph, x, e)

    check_forward_and_gradient(ours, reference, params, x, e)
    assert model.config["edge_dim"] == EDGE_DIM
    embeddings = model.embed(params, graph, x, edge_features=e)
    assert embeddings.shape[0] == graph.num_nodes
    if model_name == "gin":  # sparse input rows are densified for GINE's messages
        sparse = sg.as_features(sp.csr_array(np.maximum(np.asarray(x), 0.0)))
        dense = jnp.maximum(x, 0.0)
        np.testing.assert_allclose(
            model.apply(params, graph, sparse, edge_features=e),
            model.apply(params, graph, dense, edge_features=e),
            rtol=1e-5,
            atol=1e-5,
        )


@pytest.mark.parametrize("model_name", ["gat", "gin"])
def test_bad_edge_features_are_refused_with_the_shapes(model_name):
    graph = PREPARATIONS["self_loops"](raw_graph(seed=9))
    model = build(model_name)
    params = model.init(jax.random.key(0))
    x, e = inputs(graph)
    with pytest.raises(ValueError, match=f"built with edge_dim={EDGE_DIM}: pass edge_features"):
        model.apply(params, graph, x)
    with pytest.raises(ValueError, match=rf"\[{graph.num_edges}, {EDGE_DIM}\], got \(3, 2\)"):
        model.apply(params, graph, x, edge_features=e[:3])
    with pytest.raises(TypeError, match=r"edge_features need the full graph.*ChunkedGraph"):
        model.apply(params, ChunkedGraph.build(graph, chunk_size=5), x, edge_features=e)
    plain = build(model_name, edge_dim=None)
    with pytest.raises(ValueError, match="built without edge_dim; it reads no edge_features"):
        plain.apply(plain.init(jax.random.key(0)), graph, x, edge_features=e)
    with pytest.raises(ValueError, match="edge_dim must be >= 1, got 0"):
        build(model_name, edge_dim=0)
    layer = gat_layer_params(jax.random.key(0), FEATURES, 2, WIDTH, concat=True, v2=False)
    with pytest.raises(ValueError, match="gat_conv got edge_features but its params have no"):
        gat_conv(layer, graph, gat_project(layer, x), edge_features=e)


@pytest.mark.parametrize("v2", [False, True], ids=["GATConv", "GATv2Conv"])
def test_gat_layer_equals_pyg_with_edge_dim(v2):
    """PyG's convolution on the same (prepared) edges, its own self-loop filling off."""
    torch = pytest.importorskip("torch", reason="PyG parity needs torch (never a dependency)")
    pyg_conv = pytest.importorskip(
        "torch_geometric.nn", reason="PyG parity needs torch_geometric (never a dependency)"
    )
    graph = raw_graph(seed=10)  # duplicates and several self-loops, as given
    params = gat_layer_params(
        jax.random.key(11), FEATURES, HEADS, WIDTH, concat=True, v2=v2, edge_dim=EDGE_DIM
    )
    params = jax.tree.map(lambda p: p + 0.05, params)
    x, e = (np.asarray(a) for a in inputs(graph, seed=12))
    cls = pyg_conv.GATv2Conv if v2 else pyg_conv.GATConv
    conv = cls(FEATURES, WIDTH, heads=HEADS, edge_dim=EDGE_DIM, add_self_loops=False)
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
            conv.att_edge.copy_(t(params["att_edge"])[None])
        conv.lin_edge.weight.copy_(t(params["w_e"]).T)
        conv.bias.copy_(t(params["b"]))
    edge_index = torch.tensor(np.stack([graph.senders, graph.receivers]).astype(np.int64))
    xt, et = t(x).requires_grad_(True), t(e).requires_grad_(True)
    want = conv(xt, edge_index, et)
    want.square().sum().backward()

    def ours(x, e):
        return gat_conv(params, graph, gat_project(params, x), edge_features=e)

    np.testing.assert_allclose(
        ours(jnp.asarray(x), jnp.asarray(e)), want.detach().numpy(), rtol=1e-4, atol=1e-5
    )
    grads = jax.grad(lambda x, e: jnp.sum(ours(x, e) ** 2), argnums=(0, 1))(
        jnp.asarray(x), jnp.asarray(e)
    )
    np.testing.assert_allclose(grads[0], xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[1], et.grad.numpy(), rtol=1e-4, atol=1e-5)

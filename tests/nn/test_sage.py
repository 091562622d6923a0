"""GraphSAGE: the layer against a hand-written dense reference, and the three views
(full graph, node chunks, sampled tree) against each other."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from sweep import covering

import sparsegcn as sg
from sparsegcn.backends import as_layout
from sparsegcn.nn import sage, sage_conv
from sparsegcn.sampling import ChunkedGraph, sample_blocks
from sparsegcn.sampling.blocks import TreeBlock

TOL = dict(rtol=1e-5, atol=1e-5)


def graph_with_isolated(n=30, m=90, seed=0) -> sg.Graph:
    rng = np.random.default_rng(seed)
    g = sg.Graph(rng.integers(0, n - 3, m), rng.integers(0, n - 3, m), None, n)
    return sg.to_undirected(g)


def reference_layer(g: sg.Graph, x, w_root, w_neigh, b, aggregator="mean") -> np.ndarray:
    """``x W_r + agg_{j in N(i)} x_j W_n + b`` in float64, node by node, 0 for no neighbours."""
    r, s = np.asarray(g.receivers), np.asarray(g.senders)
    agg = np.zeros((g.num_nodes, x.shape[1]))
    for i in range(g.num_nodes):
        rows = x[s[r == i]]
        if rows.size:
            agg[i] = {"mean": np.mean, "max": np.max, "sum": np.sum}[aggregator](rows, axis=0)
    return x @ w_root + agg @ w_neigh + b


@pytest.mark.parametrize("aggregator", ["mean", "max", "sum"])
@pytest.mark.parametrize("layout", ["dense", "edges", "csr", "bcoo"])
@pytest.mark.parametrize("widths", [(6, 4), (3, 8)])
def test_sage_conv_matches_the_dense_reference(layout, widths, aggregator):
    g = graph_with_isolated()
    rng = np.random.default_rng(1)
    f, out = widths
    x = rng.normal(size=(g.num_nodes, f))
    params = {
        "w_root": rng.normal(size=(f, out)),
        "w_neigh": rng.normal(size=(f, out)),
        "b": rng.normal(size=(out,)),
    }
    expected = reference_layer(g, x, **params, aggregator=aggregator)
    as32 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), params)
    view = as_layout(sg.mean_norm(g), layout)  # weights are ignored: a plain mean
    x32 = jnp.asarray(x, jnp.float32)
    got = sage_conv(as32, view, x32, aggregator=aggregator)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    normalized = sage_conv(as32, view, x32, normalize=True, aggregator=aggregator)
    unit = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(normalized, unit, rtol=1e-4, atol=1e-4)


def test_tree_block_counts_and_sums_children_by_hand():
    """Two seeds, fanout 3: the first has children 0 and 2 real, the second none."""
    sample = sg.NeighborSample(
        nodes=(jnp.array([5, 6]), jnp.array([[1, 2, 3], [4, 4, 4]])),
        masks=(jnp.array([True, True]), jnp.array([[True, False, True], [False, False, False]])),
    )
    block = TreeBlock.from_sample(sample, 1)
    h = jnp.arange(8.0)[:, None]  # rows 0-1: the seeds, rows 2-7: their children
    np.testing.assert_array_equal(block.in_count(), [2.0, 0.0])
    np.testing.assert_array_equal(block.product(h)[:, 0], [2.0 + 4.0, 0.0])
    np.testing.assert_array_equal(block.aggregate(h[2:], "max")[:, 0], [4.0, 0.0])


def views(g: sg.Graph, x, model, params, chunk_size=7):
    mean = sg.mean_norm(g)
    csr = g.to_csr()
    fanout = int(np.diff(csr.indptr).max())
    num_layers = len(params["layers"])
    sample = sample_blocks(
        csr.indptr,
        csr.indices,
        np.arange(g.num_nodes),
        (fanout,) * num_layers,
        key=jax.random.key(3),
    )
    apply = jax.jit(model.apply)
    full = apply(params, mean, x)
    chunked = apply(params, ChunkedGraph.build(mean, chunk_size), x)
    sampled = apply(params, sample, x)
    return full, chunked, sampled


@pytest.mark.parametrize(
    "num_layers, hidden, normalize, project_first",
    [
        (1, 8, False, None),
        (2, 8, False, True),
        (2, 8, True, False),
        (3, 5, False, False),
        (3, 5, True, True),
    ],
)
def test_sampled_equals_full_when_fanout_covers_every_degree(
    num_layers, hidden, normalize, project_first
):
    g = graph_with_isolated(seed=num_layers)
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 6))
    model = sage(
        6,
        3,
        hidden=hidden,
        num_layers=num_layers,
        normalize=normalize,
        project_first=project_first,
    )
    params = model.init(jax.random.key(1))
    full, chunked, sampled = views(g, x, model, params)
    assert full.shape == sampled.shape == (g.num_nodes, 3)
    np.testing.assert_allclose(chunked, full, **TOL)
    np.testing.assert_allclose(sampled, full, **TOL)


@pytest.mark.parametrize(
    ("layout", "aggregator"),
    covering(["edges", "csr", "bcoo", "dense"], ["mean", "max", "sum"], strength=1),
)
def test_views_agree_on_every_layout_with_residuals(layout, aggregator):
    g = graph_with_isolated(seed=5)
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 8))
    model = sage(8, 4, hidden=8, num_layers=3, residual=True, aggregator=aggregator)
    params = model.init(jax.random.key(1))
    expected = model.apply(params, as_layout(g, "dense"), x)
    np.testing.assert_allclose(model.apply(params, as_layout(g, layout), x), expected, **TOL)
    for out in views(g, x, model, params):
        np.testing.assert_allclose(out, expected, **TOL)


@pytest.mark.parametrize("aggregator", ["mean", "max", "sum"])
def test_sparse_features_equal_dense_ones(aggregator):
    # Before: max with sparse features failed, full batch ("float() argument must be
    # ... not 'SparseFeatures'") and sampled ("a sample can't take rows of sparse
    # features"), so `train --dataset cora --model sage --aggregator max` did not run.
    g = graph_with_isolated(seed=6)
    dense = np.random.default_rng(2).random((g.num_nodes, 8)).astype(np.float32)
    dense[dense < 0.6] = 0.0
    model = sage(8, 4, hidden=6, num_layers=2, aggregator=aggregator)
    params = model.init(jax.random.key(1))
    expected = model.apply(params, sg.mean_norm(g), jnp.asarray(dense))
    for out in views(g, sg.as_features(sp.csr_array(dense)), model, params):
        np.testing.assert_allclose(out, expected, **TOL)


def test_gradients_are_finite_and_match_the_full_graph():
    g = graph_with_isolated(seed=7)
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 5))
    labels = jnp.arange(g.num_nodes) % 3
    model = sage(5, 3, hidden=8, num_layers=2)
    params = model.init(jax.random.key(1))
    csr = g.to_csr()
    fanout = int(np.diff(csr.indptr).max())
    seeds = np.array([0, 4, 9, g.num_nodes - 1])  # the last one is isolated
    sample = sample_blocks(csr.indptr, csr.indices, seeds, (fanout, fanout), key=jax.random.key(0))

    def loss(logits, nodes):
        return jnp.mean(-jax.nn.log_softmax(logits)[jnp.arange(nodes.size), labels[nodes]])

    mean = sg.mean_norm(g)
    nodes = jnp.asarray(seeds)
    sampled = jax.jit(jax.grad(lambda p: loss(model.apply(p, sample, x), nodes)))(params)
    full = jax.jit(jax.grad(lambda p: loss(model.apply(p, mean, x)[nodes], nodes)))(params)
    for a, b in zip(jax.tree.leaves(sampled), jax.tree.leaves(full), strict=True):
        assert np.isfinite(np.asarray(a)).all()
        np.testing.assert_allclose(a, b, **TOL)


def test_isolated_seed_uses_only_its_own_features():
    g = graph_with_isolated(seed=8)
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 4))
    model = sage(4, 2, hidden=6, num_layers=1)
    params = model.init(jax.random.key(1))
    csr = g.to_csr()
    isolated = g.num_nodes - 1
    sample = sample_blocks(
        csr.indptr, csr.indices, np.array([isolated]), (5,), key=jax.random.key(0)
    )
    layer = params["layers"][0]
    np.testing.assert_allclose(
        model.apply(params, sample, x)[0], x[isolated] @ layer["w_root"] + layer["b"], **TOL
    )


def test_dropout_needs_a_key_and_changes_training_outputs_only():
    g = graph_with_isolated()
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 4))
    model = sage(4, 2, hidden=6, dropout_rate=0.5)
    params = model.init(jax.random.key(1))
    csr = g.to_csr()
    sample = sample_blocks(csr.indptr, csr.indices, np.arange(6), (3, 3), key=jax.random.key(0))
    with pytest.raises(ValueError, match="explicit PRNG key"):
        model.apply(params, sample, x, training=True)
    train_apply = jax.jit(lambda p, s, x, k: model.apply(p, s, x, key=k, training=True))
    train = train_apply(params, sample, x, jax.random.key(2))
    again = train_apply(params, sample, x, jax.random.key(2))
    evaluation = jax.jit(model.apply)(params, sample, x)
    np.testing.assert_array_equal(train, again)
    assert not np.allclose(train, evaluation)


def test_model_refuses_a_sample_with_the_wrong_depth():
    g = graph_with_isolated()
    csr = g.to_csr()
    model = sage(4, 2, num_layers=2)
    params = model.init(jax.random.key(0))
    sample = sample_blocks(csr.indptr, csr.indices, np.arange(3), (3, 3, 3), key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"the sample has 3 hops .* the model has 2 layers"):
        model.apply(params, sample, jnp.ones((g.num_nodes, 4)))
    with pytest.raises(ValueError, match=r"dropout_rate must be >= 0.0 and < 1.0, got 1.0"):
        sage(4, 2, dropout_rate=1.0)


def test_embed_is_the_input_of_the_last_layer():
    g = graph_with_isolated()
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 4))
    model = sage(4, 3, hidden=5, num_layers=2)
    params = model.init(jax.random.key(1))
    mean = sg.mean_norm(g)
    emb = model.embed(params, mean, x)
    assert emb.shape == (g.num_nodes, 5)
    np.testing.assert_allclose(
        sage_conv(params["layers"][1], mean, emb), model.apply(params, mean, x), **TOL
    )
    np.testing.assert_allclose(model.embed(params, ChunkedGraph.build(mean, 4), x), emb, **TOL)


@pytest.mark.parametrize("aggregator", ["mean", "max", "sum"])
def test_layer_equals_pyg_sageconv_with_the_same_weights(aggregator, pyg_nn):
    """Duplicate edges, self-loops and isolated nodes: forward and input gradient."""
    import torch

    rng = np.random.default_rng(3)
    n = 20
    s = np.concatenate([rng.integers(0, n - 3, 50), [4, 4, 7]])
    r = np.concatenate([rng.integers(0, n - 3, 50), [9, 9, 7]])  # a duplicate and a loop
    g = sg.Graph(s, r, None, n)
    params = {
        "w_root": jnp.asarray(rng.normal(size=(5, 4)), jnp.float32),
        "w_neigh": jnp.asarray(rng.normal(size=(5, 4)), jnp.float32),
        "b": jnp.asarray(rng.normal(size=(4,)), jnp.float32),
    }
    x = rng.normal(size=(n, 5)).astype(np.float32)
    conv = pyg_nn.SAGEConv(5, 4, aggr=aggregator)
    with torch.no_grad():
        conv.lin_l.weight.copy_(torch.tensor(np.asarray(params["w_neigh"]).T))
        conv.lin_l.bias.copy_(torch.tensor(np.asarray(params["b"])))
        conv.lin_r.weight.copy_(torch.tensor(np.asarray(params["w_root"]).T))
    xt = torch.tensor(x, requires_grad=True)
    want = conv(xt, torch.tensor(np.stack([s, r]).astype(np.int64)))
    want.square().sum().backward()

    def ours(x):
        return sage_conv(params, g, x, aggregator=aggregator)

    np.testing.assert_allclose(ours(jnp.asarray(x)), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    grad = jax.grad(lambda x: jnp.sum(ours(x) ** 2))(jnp.asarray(x))
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_normalize_has_a_finite_gradient_at_a_zero_row():
    # Before: every first-layer gradient was NaN when a row was all zeros before the
    # normalisation (an isolated featureless node, as a padding row is): d sqrt at 0.
    model = sage(4, 3, hidden=8, num_layers=2, dropout_rate=0.0, normalize=True)
    params = model.init(jax.random.key(0))
    graph = sg.Graph(np.array([0, 1]), np.array([1, 0]), None, 3)
    x = jnp.asarray(np.r_[np.random.default_rng(0).normal(size=(2, 4)), np.zeros((1, 4))])
    x = x.astype(jnp.float32)
    grads = jax.grad(lambda p: jnp.sum(model.apply(p, graph, x)[:2] ** 2))(params)
    alone = jax.grad(  # the real rows alone: the zero row reaches neither of them
        lambda p: jnp.sum(
            model.apply(p, sg.Graph(graph.senders, graph.receivers, None, 2), x[:2]) ** 2
        )
    )(params)
    for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(alone), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

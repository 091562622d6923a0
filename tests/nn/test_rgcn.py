"""R-GCN against a dense per-relation reference, forward and gradient; PyG's RGCNConv
where torch_geometric is installed."""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hetero_graphs import NUM_NODES, dense_rgcn, paper_features, small_hetero

from sparsegcn.nn.rgcn import relation_weights, rgcn, rgcn_conv, rgcn_homogeneous


def build(num_bases=0, layers=2, graph=None):
    graph = graph or small_hetero()
    model = rgcn(
        graph.num_nodes,
        graph.edge_types,
        {"paper": 4},
        3,
        target="paper",
        hidden=5,
        num_layers=layers,
        dropout_rate=0.5,
        num_bases=num_bases,
    )
    return graph, model, model.init(jax.random.key(0))


@pytest.mark.parametrize("num_bases", [0, 2])
def test_forward_and_gradient_equal_dense_reference(num_bases):
    graph, model, params = build(num_bases)
    x = {"paper": paper_features()}
    assert set(params["embeddings"]) == {"author", "topic", "venue"}
    assert params["embeddings"]["author"].shape == (NUM_NODES["author"], 4)
    logits = jax.jit(model.apply)(params, graph, x)
    assert logits.shape == (NUM_NODES["paper"], 3)
    np.testing.assert_allclose(logits, dense_rgcn(params, graph, x, "paper"), rtol=1e-5, atol=1e-6)

    weights = jnp.asarray(np.random.default_rng(1).normal(size=(7, 3)), jnp.float32)
    grad = jax.grad(lambda p: jnp.sum(model.apply(p, graph, x) * weights))(params)
    ref = jax.grad(lambda p: jnp.sum(dense_rgcn(p, graph, x, "paper") * weights))(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), grad, ref)
    # The empty relation's weights get no gradient beyond zero; author 4 (writes nothing)
    # and the isolated venues get zero embedding gradients.
    np.testing.assert_array_equal(grad["embeddings"]["venue"], 0.0)
    np.testing.assert_array_equal(grad["embeddings"]["author"][4], 0.0)
    assert np.abs(grad["embeddings"]["author"][:4]).sum() > 0


def test_layer_by_hand():
    """One layer, one relation with a duplicate edge: the mean counts it twice."""
    graph, _model, params = build(layers=1)
    layer = params["layers"][0]
    h = {"paper": jnp.asarray(paper_features()), **params["embeddings"]}
    out = rgcn_conv(layer, graph, h, ["paper"])["paper"]
    w = relation_weights(layer)
    root = layer["root"]["paper"]
    x = h["paper"]
    # paper 0 receives cites from 1, 1, 2 and writes from authors 0, 1.
    expected = (
        x[0] @ root["w"]
        + root["b"]
        + ((2 * x[1] + x[2]) / 3) @ w[0]
        + ((h["author"][0] + h["author"][1]) / 2) @ w[1]
    )
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-6)
    # paper 6 receives nothing: root only.
    np.testing.assert_allclose(out[6], x[6] @ root["w"] + root["b"], rtol=1e-6, atol=1e-7)


def test_dropout_needs_a_key_and_changes_training_output():
    graph, model, params = build()
    x = {"paper": paper_features()}
    with pytest.raises(ValueError, match="PRNG key"):
        model.apply(params, graph, x, training=True)
    a = model.apply(params, graph, x, training=True, key=jax.random.key(1))
    b = model.apply(params, graph, x, training=True, key=jax.random.key(1))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, model.apply(params, graph, x))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(target="nobody"), "target 'nobody'"),
        (dict(in_features={"paper": 4, "author": 3}), "share one width"),
        (dict(in_features={"ghost": 4}), "featured node types"),
        (dict(num_bases=-1), "num_bases"),
        (dict(hidden=0), "hidden"),
    ],
)
def test_bad_settings_fail_early(kwargs, match):
    graph = small_hetero()
    args = dict(target="paper", in_features={"paper": 4})
    args.update(kwargs)
    in_features = args.pop("in_features")
    with pytest.raises(ValueError, match=match):
        rgcn(graph.num_nodes, graph.edge_types, in_features, 3, **args)


def test_wrong_graph_is_refused():
    graph, model, params = build()
    with pytest.raises(TypeError, match="HeteroGraph, a TypedSample or a TypedDedupSample"):
        model.apply(params, "graph", {"paper": paper_features()})
    reversed_graph = graph.add_reverse_relations()
    with pytest.raises(ValueError, match="differ from the model's"):
        model.apply(params, reversed_graph, {"paper": paper_features()})


def test_a_weighted_relation_is_refused():
    # It was summed with its weights over an unweighted count: neither the paper's mean
    # (what samples compute) nor a weighted mean.
    from sparsegcn.hetero import HeteroGraph

    cites = ("paper", "cites", "paper")
    weights = np.array([2.0, 0.5, 4.0], np.float32)
    graph = HeteroGraph({"paper": 3}, {cites: (np.array([1, 2, 2]), np.array([0, 0, 1]), weights)})
    layer = {"root": {"paper": {"w": jnp.eye(3), "b": jnp.zeros(3)}}, "w_rel": jnp.eye(3)[None]}
    with pytest.raises(ValueError, match=r"relation\(s\) \[\('paper', 'cites', 'paper'\)\]"):
        rgcn_conv(layer, graph, {"paper": jnp.eye(3)})


def test_homogeneous_rgcn_is_one_relation():
    """The registry's rgcn on a plain graph equals the typed model on one relation."""
    from sparsegcn.graph import Graph
    from sparsegcn.hetero import HeteroGraph

    s, r = np.array([0, 1, 1, 2, 3]), np.array([1, 0, 0, 3, 3])
    graph = Graph(s, r, None, 5)
    x = paper_features()[:5]
    model = rgcn_homogeneous(4, 3, hidden=6, num_layers=2, dropout_rate=0.0)
    params = model.init(jax.random.key(0))
    typed = rgcn({"n": 5}, [("n", "to", "n")], {"n": 4}, 3, target="n", hidden=6, num_layers=2)
    tp = typed.init(jax.random.key(0))
    # Map the SAGE weights onto the typed model's root and relation weights.
    for i_layer, layer in enumerate(params["layers"]):
        tp["layers"][i_layer]["root"]["n"] = {"w": layer["w_root"], "b": layer["b"]}
        tp["layers"][i_layer]["w_rel"] = layer["w_neigh"][None]
    hetero = HeteroGraph({"n": 5}, {("n", "to", "n"): (s, r)})
    np.testing.assert_allclose(
        model.apply(params, graph, x), typed.apply(tp, hetero, {"n": x}), rtol=1e-5, atol=1e-6
    )
    assert model.name == "rgcn"


@pytest.mark.skipif(
    importlib.util.find_spec("torch_geometric") is None, reason="torch_geometric is not installed"
)
@pytest.mark.parametrize("num_bases", [0, 2])
def test_matches_pyg_rgcnconv(num_bases):  # pragma: no cover - needs torch_geometric
    """Our layer with PyG's ``RGCNConv`` parameters: ``root``, ``bias`` and per relation
    ``weight [R, F, F']``, or with bases ``weight [B, F, F']`` (our ``bases``) and
    ``comp [R, B]`` (our ``coeffs``)."""
    import torch
    from torch_geometric.nn import RGCNConv

    from sparsegcn.hetero import HeteroGraph

    rng = np.random.default_rng(0)
    n, e, num_rel = 9, 30, 3
    src, dst, et = rng.integers(0, n, e), rng.integers(0, n, e), rng.integers(0, num_rel, e)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    torch.manual_seed(0)
    conv = RGCNConv(4, 5, num_rel, num_bases=num_bases or None, aggr="mean")
    keys = [("n", f"r{i}", "n") for i in range(num_rel)]
    hetero = HeteroGraph({"n": n}, {k: (src[et == i], dst[et == i]) for i, k in enumerate(keys)})
    weight = jnp.asarray(conv.weight.detach().numpy())
    relations = (
        {"bases": weight, "coeffs": jnp.asarray(conv.comp.detach().numpy())}
        if num_bases
        else {"w_rel": weight}
    )
    layer = {
        "root": {
            "n": {
                "w": jnp.asarray(conv.root.detach().numpy()),
                "b": jnp.asarray(conv.bias.detach().numpy()),
            }
        },
        **relations,
    }
    ours = rgcn_conv(layer, hetero, {"n": jnp.asarray(x)})["n"]
    theirs = conv(torch.from_numpy(x), torch.from_numpy(np.stack([src, dst])), torch.from_numpy(et))
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-4, atol=1e-5)


def _sampled(graph, seed_type="paper", seeds=None, sampler="tree", hops=2):
    from sparsegcn.sampling.typed import HeteroCSR, sample_typed
    from sparsegcn.sampling.typed_dedup import sample_typed_dedup

    csr = HeteroCSR.from_graph(graph)
    seeds = jnp.arange(4) if seeds is None else seeds
    sample = sample_typed if sampler == "tree" else sample_typed_dedup
    return sample(csr, seeds, [3] * hops, seed_type=seed_type, key=jax.random.key(0))


@pytest.mark.parametrize("sampler", ["tree", "dedup"])
def test_sampled_apply_refuses_feature_rows_of_another_count(sampler):
    """The full graph refused x of the wrong row count; samples clamped the gathers."""
    graph, model, params = build()
    sample = _sampled(graph, sampler=sampler)
    with pytest.raises(
        ValueError, match=r"x\['paper'\] has 2 rows but the model has num_nodes\['paper'\]=7"
    ):
        model.apply(params, sample, {"paper": paper_features()[:2]})


@pytest.mark.parametrize("sampler", ["tree", "dedup"])
def test_sampled_apply_refuses_ids_past_the_models_tables(sampler):
    """A model built for 5 authors on a sample of a graph with 8: ids 5..7 read row 4."""
    from sparsegcn.hetero import HeteroGraph

    small = small_hetero()
    relations = {
        k: (np.asarray(v.senders), np.asarray(v.receivers)) for k, v in small.relations.items()
    }
    relations[("author", "writes", "paper")] = (np.arange(8), np.arange(8) % 7)
    big = HeteroGraph({**small.num_nodes, "author": 8}, relations)
    _, model, params = build()
    sample = _sampled(big, seeds=jnp.arange(7), sampler=sampler)
    with pytest.raises(
        ValueError,
        match=r"the sample holds 'author' id [5-7], but the model has num_nodes\['author'\]=5",
    ):
        model.apply(params, sample, {"paper": paper_features()})


def test_a_tree_sample_of_relations_in_another_order_is_refused():
    """It ran each relation's weight on another relation's neighbours (under jit,
    where the id check is skipped, NaN logits for relations of other source types)."""
    from sparsegcn.hetero import HeteroGraph

    graph, model, params = build()
    order = list(reversed(graph.edge_types))
    reordered = HeteroGraph(
        graph.num_nodes,
        {k: (graph.relations[k].senders, graph.relations[k].receivers) for k in order},
    )
    assert list(reordered.edge_types) == order
    sample = _sampled(reordered)
    x = {"paper": paper_features()}
    for apply in (model.apply, jax.jit(model.apply)):
        with pytest.raises(ValueError, match=r"the sample's edge types .* differ from the model's"):
            apply(params, sample, x)
    assert model.apply(params, _sampled(graph), x).shape == (4, 3)  # the model's order


def test_dedup_sample_of_another_seed_type_is_refused():
    """It returned an empty [0, C] array; the tree sample raised."""
    graph, model, params = build(layers=1)
    sample = _sampled(graph, seed_type="author", seeds=jnp.arange(3), sampler="dedup", hops=1)
    with pytest.raises(
        ValueError, match="seeded with 'author' nodes, but the model classifies 'paper'"
    ):
        model.apply(params, sample, {"paper": paper_features()})


def test_no_edge_types_is_refused():
    with pytest.raises(ValueError, match="edge_types must name at least one relation"):
        rgcn(NUM_NODES, [], {"paper": 4}, 3, target="paper")

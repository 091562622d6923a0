"""JK-Net against a dense reference and PyG's ``JumpingKnowledge`` (sparsegcn/nn/jk.py)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from graphs import random_graph
from sweep import covering

import sparsegcn as sg
from sparsegcn.backends import LAYOUTS, as_layout
from sparsegcn.cli import main
from sparsegcn.experiment import Experiment
from sparsegcn.nn.jk import jk, jumping_knowledge
from sparsegcn.nn.registry import PREPARATIONS

FEATURES, HIDDEN, CLASSES = 6, 5, 3


def normalized_graph(seed=0, n=20, e=60) -> sg.Graph:
    return PREPARATIONS["gcn_norm"](random_graph(n, e, seed=seed, isolated=2))


def dense_adjacency(graph) -> jax.Array:
    a = np.zeros((graph.num_nodes, graph.num_nodes), np.float32)
    np.add.at(a, (np.asarray(graph.receivers), np.asarray(graph.senders)), graph.weights)
    return jnp.asarray(a)


def dense_jk(params, a, x, mode):
    *convs, out = params["layers"]
    h, outputs = x, []
    for layer in convs:
        h = jax.nn.relu(a @ h @ layer["w"] + layer["b"][None])
        outputs.append(h)
    rows = jnp.concatenate(outputs, axis=1) if mode == "cat" else jnp.stack(outputs).max(axis=0)
    return rows @ out["w"] + out["b"][None]


@pytest.mark.parametrize(("layout", "mode"), covering(LAYOUTS, ["cat", "max"], strength=1))
def test_model_matches_dense_reference_forward_and_gradient(layout, mode):
    graph = normalized_graph()
    view = as_layout(graph, layout)
    model = jk(FEATURES, CLASSES, hidden=HIDDEN, num_layers=3, mode=mode, dropout_rate=0.0)
    params = jax.tree.map(lambda p: p + 0.05, model.init(jax.random.key(0)))
    x = jax.random.normal(jax.random.key(1), (graph.num_nodes, FEATURES))
    a = dense_adjacency(graph)

    def reference(params, x):
        return dense_jk(params, a, x, mode)

    def ours(params, x):
        return model.apply(params, view, x)

    np.testing.assert_allclose(ours(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(ours)(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    loss = lambda f: lambda p, x: jnp.sum(jnp.tanh(f(p, x)))  # noqa: E731
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1)))(params, x)
    want = jax.jit(jax.grad(loss(reference), argnums=(0, 1)))(params, x)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    width = 3 * HIDDEN if mode == "cat" else HIDDEN
    assert model.embed(params, view, x).shape == (graph.num_nodes, width)


def test_sparse_features_give_the_dense_logits():
    graph = normalized_graph(seed=4)
    x = np.maximum(np.asarray(jax.random.normal(jax.random.key(2), (20, FEATURES))), 0.0)
    model = jk(FEATURES, CLASSES, hidden=HIDDEN, mode="max")
    params = model.init(jax.random.key(3))
    np.testing.assert_allclose(
        model.apply(params, graph, sg.as_features(sp.csr_array(x))),
        model.apply(params, graph, jnp.asarray(x)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_bad_settings_are_refused_with_the_value():
    with pytest.raises(ValueError, match=r"jk mode must be one of \['cat', 'max'\], got 'lstm'"):
        jk(4, 2, mode="lstm")
    with pytest.raises(ValueError, match="jk mode must be one of"):
        jumping_knowledge([jnp.ones((2, 2))], "sum")
    with pytest.raises(ValueError, match=r"jk=.max. applies to gcn, sage, jk, not gat"):
        Experiment(model="gat", model_options=(("jk", "max"),))
    with pytest.raises(ValueError, match=r"jk must be one of \['none', 'cat', 'max'\], got 'lstm'"):
        sg.gcn(4, 2, jk="lstm")
    with pytest.raises(ValueError, match="residual=True with jk='cat'"):
        sg.sage(4, 2, jk="cat", residual=True)
    with pytest.raises(ValueError, match="--residual with --jk max: jumping"):
        Experiment(model="gcn", residual=True, model_options=(("jk", "max"),))
    assert Experiment(model="gcn").options() == {"jk": "none"}
    assert Experiment(model="jk").options() == {"jk": "cat"}
    assert Experiment(model="jk", model_options=(("jk", "max"),)).options() == {"jk": "max"}


def test_cli_trains_checkpoints_and_predicts(tmp_path):
    argv = ["train", "--model", "jk", "--scale", "0.1", "--epochs", "5", "--seeds", "2"]
    ckpt = tmp_path / "ckpt"
    argv += ["--jk", "max", "--checkpoint", str(ckpt), "--json", str(tmp_path / "r.json")]
    assert main([*argv, "--no-progress"]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["model"] == "jk" and report["seeds"] == 2
    out = tmp_path / "p.npy"
    assert main(["predict", "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    assert np.load(out).shape[0] == 2


@pytest.mark.slow
def test_cora_accuracy_over_ten_seeds(data_root, tmp_path):
    out = tmp_path / "cora.json"
    argv = ["train", "--dataset", "cora", "--root", str(data_root), "--model", "jk"]
    assert main([*argv, "--seeds", "10", "--json", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["test_acc_mean"] >= 0.805


@pytest.mark.parametrize("mode", ["cat", "max"])
def test_combination_equals_pyg_jumping_knowledge(mode):
    torch = pytest.importorskip("torch", reason="PyG parity needs torch (never a dependency)")
    pyg_nn = pytest.importorskip(
        "torch_geometric.nn", reason="PyG parity needs torch_geometric (never a dependency)"
    )
    outputs = [np.asarray(jax.random.normal(jax.random.key(i), (7, HIDDEN))) for i in range(3)]
    want = pyg_nn.JumpingKnowledge(mode)([torch.tensor(o) for o in outputs]).numpy()
    got = jumping_knowledge([jnp.asarray(o) for o in outputs], mode)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("mode", ["cat", "max"])
def test_gcn_with_jk_is_the_jk_model_with_the_same_weights(mode):
    """``gcn --jk`` and the registered ``jk`` model are one builder: same params, same logits."""
    graph = normalized_graph(seed=5)
    ours = sg.gcn(FEATURES, CLASSES, hidden=HIDDEN, num_layers=3, jk=mode, dropout_rate=0.5)
    theirs = jk(FEATURES, CLASSES, hidden=HIDDEN, num_layers=3, mode=mode, dropout_rate=0.5)
    params = ours.init(jax.random.key(0))
    for a, b in zip(
        jax.tree.leaves(params), jax.tree.leaves(theirs.init(jax.random.key(0))), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    x = jax.random.normal(jax.random.key(1), (graph.num_nodes, FEATURES))
    np.testing.assert_allclose(
        ours.apply(params, graph, x),
        dense_jk(params, dense_adjacency(graph), x, mode),
        rtol=1e-5,
        atol=1e-5,
    )
    key = jax.random.key(2)  # dropout too: the same masks
    np.testing.assert_array_equal(
        ours.apply(params, graph, x, key=key, training=True),
        theirs.apply(params, graph, x, key=key, training=True),
    )
    assert (ours.name, ours.config["jk"]) == ("gcn", mode)


def dense_sage_jk(params, graph, x, mode):
    """JK over mean-aggregating SAGE layers, with a dense row-normalized count matrix."""
    counts = np.zeros((graph.num_nodes, graph.num_nodes), np.float32)
    np.add.at(counts, (np.asarray(graph.receivers), np.asarray(graph.senders)), 1.0)
    mean = jnp.asarray(counts / np.maximum(counts.sum(1, keepdims=True), 1.0))
    *layers, out = params["layers"]
    h, outputs = x, []
    for layer in layers:
        h = jax.nn.relu(h @ layer["w_root"] + mean @ h @ layer["w_neigh"] + layer["b"][None])
        outputs.append(h)
    rows = jnp.concatenate(outputs, axis=1) if mode == "cat" else jnp.stack(outputs).max(axis=0)
    return rows @ out["w"] + out["b"][None]


@pytest.mark.parametrize("mode", ["cat", "max"])
def test_sage_with_jk_matches_dense_reference_on_full_chunked_and_sampled_views(mode):
    from sparsegcn.sampling import ChunkedGraph, sample_blocks

    graph = PREPARATIONS["unweighted"](random_graph(20, 60, seed=6, isolated=2))
    model = sg.sage(FEATURES, CLASSES, hidden=HIDDEN, num_layers=2, jk=mode, dropout_rate=0.0)
    params = jax.tree.map(lambda p: p + 0.05, model.init(jax.random.key(3)))
    x = jax.random.normal(jax.random.key(4), (graph.num_nodes, FEATURES))

    def reference(params, x):
        return dense_sage_jk(params, graph, x, mode)

    def full(params, x):
        return model.apply(params, graph, x)

    np.testing.assert_allclose(full(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    loss = lambda f: lambda p, x: jnp.sum(jnp.tanh(f(p, x)))  # noqa: E731
    got = jax.jit(jax.grad(loss(full), argnums=(0, 1)))(params, x)
    want = jax.jit(jax.grad(loss(reference), argnums=(0, 1)))(params, x)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    chunked = ChunkedGraph.build(graph, chunk_size=6)
    np.testing.assert_allclose(
        model.apply(params, chunked, x), reference(params, x), rtol=1e-5, atol=1e-5
    )
    # Every neighbour sampled: each layer's seed rows, combined, are the full graph's.
    max_degree = int(np.bincount(np.asarray(graph.receivers)).max())
    seeds = jnp.asarray([3, 0, 17, 9], jnp.int32)
    sample = sample_blocks(
        chunked.indptr, chunked.indices, seeds, (max_degree, max_degree), key=jax.random.key(5)
    )
    np.testing.assert_allclose(
        model.apply(params, sample, x),
        reference(params, x)[np.asarray(seeds)],
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.slow
def test_cli_trains_gcn_and_sampled_sage_with_jk(tmp_path):
    for model, extra in (("gcn", ["--jk", "cat"]), ("sage", ["--jk", "max", "--fanouts", "5,5"])):
        out = tmp_path / f"{model}.json"
        argv = ["train", "--model", model, "--scale", "0.1", "--epochs", "3", *extra]
        assert main([*argv, "--json", str(out), "--no-progress"]) == 0
        report = json.loads(out.read_text())
        assert report["model"] == model and np.isfinite(report["test_acc_mean"])

"""JK-Net against a dense reference and PyG's ``JumpingKnowledge`` (sparsegcn/nn/jk.py)."""

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


@pytest.mark.parametrize("mode", ["cat", "max"])
@pytest.mark.parametrize("layout", LAYOUTS)
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
    got = jax.grad(loss(ours), argnums=(0, 1))(params, x)
    want = jax.grad(loss(reference), argnums=(0, 1))(params, x)
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
    with pytest.raises(ValueError, match=r"jk=.max. applies to jk, not gcn"):
        Experiment(model="gcn", model_options=(("jk", "max"),))
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

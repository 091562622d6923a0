"""SGC against a dense ``Â^K X W + b`` on every layout (sparsegcn/nn/sgc.py)."""

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
from sparsegcn.nn.registry import PREPARATIONS
from sparsegcn.nn.sgc import sgc, sgc_features

FEATURES, CLASSES = 6, 3


def normalized_graph(seed=0, n=20, e=60) -> sg.Graph:
    return PREPARATIONS["gcn_norm"](random_graph(n, e, seed=seed, isolated=2))


def dense_adjacency(graph) -> np.ndarray:
    """``Â[r, s] = Σ w`` over the edges ``s -> r``, in float64."""
    a = np.zeros((graph.num_nodes, graph.num_nodes))
    np.add.at(a, (np.asarray(graph.receivers), np.asarray(graph.senders)), graph.weights)
    return a


@pytest.mark.parametrize(
    ("layout", "hops"), covering(LAYOUTS, [1, 2, 3], strength=1, within=lambda _, hops: hops < 3)
)
def test_logits_match_dense_propagation_forward_and_gradient(layout, hops):
    graph = normalized_graph()
    view = as_layout(graph, layout)
    model = sgc(FEATURES, CLASSES, hops=hops)
    params = jax.tree.map(lambda p: p + 0.1, model.init(jax.random.key(0)))
    x = jax.random.normal(jax.random.key(1), (graph.num_nodes, FEATURES))
    power = jnp.asarray(np.linalg.matrix_power(dense_adjacency(graph), hops), jnp.float32)

    def reference(params, x):
        layer = params["layers"][0]
        return power @ x @ layer["w"] + layer["b"][None]

    def ours(params, x):
        return model.apply(params, view, x)

    np.testing.assert_allclose(ours(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(ours)(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    loss = lambda f: lambda p, x: jnp.sum(jnp.tanh(f(p, x)))  # noqa: E731
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1)))(params, x)
    want = jax.jit(jax.grad(loss(reference), argnums=(0, 1)))(params, x)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model.embed(params, view, x), power @ x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense_x", "sparse_x"])
def test_host_precomputation_equals_the_fused_model(sparse):
    """``sgc_features`` once, then a linear model, gives the in-step propagation's logits."""
    graph = normalized_graph(seed=2)
    x = np.maximum(np.asarray(jax.random.normal(jax.random.key(3), (20, FEATURES))), 0.0)
    features = sg.as_features(sp.csr_array(x) if sparse else x, 20)
    propagated = sgc_features(graph, features, hops=2)
    want = np.linalg.matrix_power(dense_adjacency(graph), 2) @ x.astype(np.float64)
    np.testing.assert_allclose(propagated, want, rtol=1e-6, atol=1e-6)
    fused, cached = sgc(FEATURES, CLASSES), sgc(FEATURES, CLASSES, precomputed=True)
    params = fused.init(jax.random.key(4))
    np.testing.assert_allclose(
        cached.apply(params, graph, propagated),
        fused.apply(params, graph, features),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(cached.embed(params, graph, propagated), propagated)
    np.testing.assert_allclose(fused.embed(params, graph, features), want, rtol=1e-5, atol=1e-5)


def test_dropout_is_keyed_and_only_in_training():
    graph = normalized_graph()
    model = sgc(FEATURES, CLASSES, dropout_rate=0.5)
    params = model.init(jax.random.key(0))
    x = jnp.ones((graph.num_nodes, FEATURES))
    a = model.apply(params, graph, x, key=jax.random.key(1), training=True)
    b = model.apply(params, graph, x, key=jax.random.key(2), training=True)
    assert not np.allclose(a, b)
    with pytest.raises(ValueError, match="explicit PRNG key"):
        model.apply(params, graph, x, training=True)


def test_bad_settings_are_refused_with_the_value():
    with pytest.raises(ValueError, match="no hidden layer; hidden must be None, got 16"):
        sgc(4, 2, hidden=16)
    with pytest.raises(ValueError, match="num_layers must be 1, got 2"):
        sgc(4, 2, num_layers=2)
    with pytest.raises(ValueError, match="hops must be >= 1, got 0"):
        sgc(4, 2, hops=0)
    with pytest.raises(ValueError, match=r"x must have 20 rows \(one per node\), got \(3, 6\)"):
        sgc_features(normalized_graph(), np.ones((3, 6)))
    with pytest.raises(ValueError, match=r"hops=3 applies to sgc.*, not gcn"):
        Experiment(model="gcn", model_options=(("hops", 3),))
    with pytest.raises(ValueError, match=r"hops must be >= 1.*got 0"):
        Experiment(model="sgc", model_options=(("hops", 0),))
    assert Experiment(model="sgc").options() == {"hops": 2}
    assert Experiment(model="sgc").hidden is None


def test_cli_trains_checkpoints_and_predicts(tmp_path):
    argv = ["train", "--model", "sgc", "--scale", "0.1", "--epochs", "5", "--seeds", "2"]
    ckpt = tmp_path / "ckpt"
    argv += ["--hops", "3", "--checkpoint", str(ckpt), "--json", str(tmp_path / "r.json")]
    assert main([*argv, "--no-progress"]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["model"] == "sgc" and report["seeds"] == 2
    out, emb = tmp_path / "p.npy", tmp_path / "e.npy"
    argv = ["predict", "--checkpoint", str(ckpt), "--out", str(out), "--embeddings", str(emb)]
    assert main(argv) == 0
    assert np.load(out).shape[0] == 2 and np.isfinite(np.load(emb)).all()


@pytest.mark.slow
def test_cora_accuracy_over_ten_seeds(data_root, tmp_path):
    out = tmp_path / "cora.json"
    argv = ["train", "--dataset", "cora", "--root", str(data_root), "--model", "sgc"]
    assert main([*argv, "--seeds", "10", "--json", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["test_acc_mean"] >= 0.805

"""APPNP against a dense power iteration and PyG's ``APPNP`` (sparsegcn/nn/appnp.py)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import random_graph

import sparsegcn as sg
from sparsegcn.backends import LAYOUTS, as_layout
from sparsegcn.cli import main
from sparsegcn.experiment import Experiment
from sparsegcn.nn.appnp import appnp, appnp_propagate
from sparsegcn.nn.registry import PREPARATIONS

FEATURES, CLASSES = 6, 3


def normalized_graph(seed=0, n=20, e=60) -> sg.Graph:
    return PREPARATIONS["gcn_norm"](random_graph(n, e, seed=seed, isolated=2))


def dense_adjacency(graph) -> jax.Array:
    a = np.zeros((graph.num_nodes, graph.num_nodes), np.float32)
    np.add.at(a, (np.asarray(graph.receivers), np.asarray(graph.senders)), graph.weights)
    return jnp.asarray(a)


def closed_form(graph, z, alpha, hops):
    """``Σ_{k<K} α (1-α)^k Â^k Z + (1-α)^K Â^K Z``: the iteration unrolled by hand."""
    a = np.asarray(dense_adjacency(graph), np.float64)
    z = np.asarray(z, np.float64)
    power, total = z, np.zeros_like(z)
    for k in range(hops):
        total += alpha * (1 - alpha) ** k * power
        power = a @ power
    return total + (1 - alpha) ** hops * power


@pytest.mark.parametrize("layout", LAYOUTS)
def test_model_matches_dense_reference_forward_and_gradient(layout):
    graph = normalized_graph()
    view = as_layout(graph, layout)
    model = appnp(FEATURES, CLASSES, hidden=5, hops=4, alpha=0.2, dropout_rate=0.0)
    params = jax.tree.map(lambda p: p + 0.1, model.init(jax.random.key(0)))
    x = jax.random.normal(jax.random.key(1), (graph.num_nodes, FEATURES))
    a = dense_adjacency(graph)

    def reference(params, x):
        first, last = params["layers"]
        z = jax.nn.relu(x @ first["w"] + first["b"][None]) @ last["w"] + last["b"][None]
        h = z
        for _ in range(4):
            h = 0.8 * (a @ h) + 0.2 * z
        return h

    def ours(params, x):
        return model.apply(params, view, x)

    np.testing.assert_allclose(ours(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(ours)(params, x), reference(params, x), rtol=1e-5, atol=1e-5)
    loss = lambda f: lambda p, x: jnp.sum(jnp.tanh(f(p, x)))  # noqa: E731
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1)))(params, x)
    want = jax.jit(jax.grad(loss(reference), argnums=(0, 1)))(params, x)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 1.0])
def test_propagation_equals_the_unrolled_series(alpha):
    """α = 0 is ``Â^K Z``, α = 1 returns ``Z``; between, the geometric series."""
    graph = normalized_graph(seed=1)
    z = jax.random.normal(jax.random.key(2), (graph.num_nodes, CLASSES))
    got = appnp_propagate(graph, z, hops=10, alpha=alpha)
    np.testing.assert_allclose(got, closed_form(graph, z, alpha, 10), rtol=1e-5, atol=1e-5)


def test_bad_settings_are_refused_with_the_value():
    with pytest.raises(ValueError, match=r"alpha must be >= 0.0 and <= 1.0, got 1.5"):
        appnp(4, 2, alpha=1.5)
    with pytest.raises(ValueError, match="hops must be >= 1, got 0"):
        appnp(4, 2, hops=0)
    with pytest.raises(ValueError, match=r"alpha must be .*got -0.1"):
        Experiment(model="appnp", model_options=(("alpha", -0.1),))
    with pytest.raises(ValueError, match=r"alpha=0.5 applies to appnp.*, not sgc"):
        Experiment(model="sgc", model_options=(("alpha", 0.5),))
    exp = Experiment(model="appnp")
    assert (exp.hidden, exp.decay_layers) == (64, "first")
    assert exp.options() == {"hops": 10, "alpha": 0.1}


def test_cli_trains_checkpoints_and_predicts(tmp_path):
    argv = ["train", "--model", "appnp", "--scale", "0.1", "--epochs", "5", "--seeds", "2"]
    ckpt = tmp_path / "ckpt"
    argv += ["--alpha", "0.2", "--checkpoint", str(ckpt), "--json", str(tmp_path / "r.json")]
    assert main([*argv, "--no-progress"]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["model"] == "appnp" and report["seeds"] == 2
    out = tmp_path / "p.npy"
    assert main(["predict", "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    assert np.load(out).shape[0] == 2


@pytest.mark.slow
def test_cora_accuracy_over_ten_seeds(data_root, tmp_path):
    out = tmp_path / "cora.json"
    argv = ["train", "--dataset", "cora", "--root", str(data_root), "--model", "appnp"]
    assert main([*argv, "--seeds", "10", "--json", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["test_acc_mean"] >= 0.830


def test_propagation_equals_pyg_appnp():
    """PyG's ``APPNP`` normalizes internally (self-loops, symmetric): same ``Â``."""
    torch = pytest.importorskip("torch", reason="PyG parity needs torch (never a dependency)")
    pyg_nn = pytest.importorskip(
        "torch_geometric.nn", reason="PyG parity needs torch_geometric (never a dependency)"
    )
    raw = random_graph(24, 70, seed=5, isolated=3, weighted=False)
    z = np.asarray(jax.random.normal(jax.random.key(8), (raw.num_nodes, CLASSES)))
    edge_index = torch.tensor(np.stack([raw.senders, raw.receivers]).astype(np.int64))
    want = pyg_nn.APPNP(K=10, alpha=0.1)(torch.tensor(z), edge_index).numpy()
    got = appnp_propagate(PREPARATIONS["gcn_norm"](raw), jnp.asarray(z), hops=10, alpha=0.1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

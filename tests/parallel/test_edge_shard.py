"""Edge-sharded propagation and full-graph training against the single-device oracle."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from graphs import GRAPH_CASES, random_graph
from helpers import compiled_programs, two_communities
from jax.sharding import PartitionSpec as P
from sweep import covering

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.nn.registry import MODELS, create_model, get_model_spec
from sparsegcn.parallel import (
    AXIS,
    EdgeSharded,
    EdgeShardedGraph,
    edge_sharded_model,
    edge_sharded_propagate,
    fit_edge_sharded,
    make_mesh,
    predict_edge_sharded,
    shard_features,
)
from sparsegcn.parallel.full_graph import DATA_SPECS, place_node_data, shard_node_data
from sparsegcn.train import TrainConfig, masked_cross_entropy

RTOL, ATOL = 1e-5, 1e-6


def test_partition_by_hand():
    # N = 5 over D = 2: R = 3, shard 0 owns rows 0-2, shard 1 rows 3-4 (and padding row 5).
    g = sg.Graph([4, 0, 1, 2, 3, 2], [0, 4, 2, 2, 1, 3], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 5)
    sharded = EdgeShardedGraph.build(g, 2)
    assert (sharded.rows_per_shard, sharded.shard_edges, sharded.padded_nodes) == (3, 4, 6)
    # Shard 0: edges into 0, 1, 2 sorted by (receiver, sender); shard 1: into 3, 4, then padding.
    np.testing.assert_array_equal(sharded.senders, [4, 3, 1, 2, 2, 0, 0, 0])
    np.testing.assert_array_equal(sharded.receivers, [0, 1, 2, 2, 0, 1, 3, 3])
    np.testing.assert_array_equal(sharded.weights, [1, 5, 3, 4, 6, 2, 0, 0])
    np.testing.assert_array_equal(sharded.edge_ids, [0, 4, 2, 3, 5, 1, -1, -1])
    assert sharded.balance == pytest.approx(8 / 6)
    np.testing.assert_array_equal(sharded.edge_values(np.arange(8) * 10), [0, 50, 20, 30, 10, 40])


@pytest.mark.parametrize(
    ("case", "devices"),
    # Each graph case on some number of devices by default; all of them with -m slow.
    covering(sorted(GRAPH_CASES), [1, 2, 3, 8], strength=1, within=lambda _, d: d > 1),
)
def test_propagate_and_its_gradients_equal_single_device(case, devices):
    g = GRAPH_CASES[case]()
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 3))
    sharded = EdgeShardedGraph.build(g, devices)
    np.testing.assert_allclose(
        edge_sharded_propagate(sharded, x, devices), g.to_dense() @ x, rtol=RTOL, atol=ATOL
    )

    def loss(propagate, x):
        return jnp.sum(jnp.sin(propagate(x)) * jnp.arange(3.0)[None, :])

    # Compiled whole: eagerly, each operation of a gradient compiles alone.
    grad_x = jax.jit(
        jax.grad(lambda x: loss(lambda v: edge_sharded_propagate(sharded, v, devices), x))
    )(x)
    want_x = jax.jit(jax.grad(lambda x: loss(lambda v: sg.propagate(g, v), x)))(x)
    np.testing.assert_allclose(grad_x, want_x, rtol=RTOL, atol=ATOL)
    if g.weights is None or g.num_edges == 0:
        return
    grad_w = jax.jit(
        jax.grad(
            lambda w: loss(
                lambda v: edge_sharded_propagate(
                    dataclasses.replace(sharded, weights=w), v, devices
                ),
                x,
            )
        )
    )(jnp.asarray(sharded.weights))
    want_w = jax.jit(jax.grad(lambda w: loss(lambda v: sg.propagate(g.replace(weights=w), v), x)))(
        jnp.asarray(g.weights)
    )
    np.testing.assert_allclose(sharded.edge_values(grad_w), want_w, rtol=RTOL, atol=ATOL)


def test_every_edge_lands_in_its_receivers_shard_once():
    g = random_graph(23, 200, seed=4, duplicates=10, self_loops=5)
    sharded = EdgeShardedGraph.build(g, 4)
    ids = np.asarray(sharded.edge_ids).reshape(4, -1)
    receivers = np.asarray(sharded.receivers).reshape(4, -1)
    real = ids >= 0
    assert sorted(ids[real].tolist()) == list(range(g.num_edges))
    r = sharded.rows_per_shard
    for d in range(4):
        # receiver ids are local; padding (and only padding) points at the spill row R.
        np.testing.assert_array_equal(receivers[d][real[d]] + d * r, g.receivers[ids[d][real[d]]])
        assert (receivers[d][~real[d]] == r).all()


def test_propagate_under_jit_and_with_a_wide_trailing_shape():
    g = random_graph(13, 50, seed=5)
    sharded = EdgeShardedGraph.build(g, 4)
    x = jax.random.normal(jax.random.key(1), (13, 2, 3))
    out = jax.jit(lambda s, x: edge_sharded_propagate(s, x, 4))(sharded, x)
    want = sg.propagate(g, x.reshape(13, 6)).reshape(13, 2, 3)
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)


EDGE_SHARD_UNSUPPORTED: dict[str, str] = {}
"""Registered models that cannot run on an edge shard, each with the reason why.

Empty: every model is written against the view protocol, and an edge shard is
a view (the graph-free MLP ignores it). A model added to the registry is
covered by the test below, or is named here with its reason and skipped.
"""

# By default each model once (3 devices, sparse features), and the 4-device
# and dense cases on two; every combination runs with the slow tests.
_FAST = {(m, 3, True) for m in MODELS} | {("gcn", 4, False), ("sage", 4, False)}


def _shard_cases():
    for name in MODELS:
        for devices in (3, 4):
            for sparse in (False, True):
                marks = [] if (name, devices, sparse) in _FAST else [pytest.mark.slow]
                if name in EDGE_SHARD_UNSUPPORTED:
                    marks.append(pytest.mark.skip(reason=EDGE_SHARD_UNSUPPORTED[name]))
                case = f"{name}-{devices}dev-{'sparse' if sparse else 'dense'}_x"
                yield pytest.param(name, devices, sparse, marks=marks, id=case)


@pytest.mark.parametrize(("model_name", "devices", "sparse"), list(_shard_cases()))
def test_forward_and_param_gradient_equal_single_device(devices, sparse, model_name):
    """Every registered model runs on an edge shard unchanged (the view protocol): the
    loop is over the registry, so a new model is covered, or must say why it cannot be."""
    nd = two_communities(n=50, train=20)
    spec = get_model_spec(model_name)
    nd = nd._replace(graph=spec.prepare_graph(nd.graph))
    x = np.maximum(np.asarray(nd.features), 0.0)  # half zeros: a real sparsity pattern
    nd = nd._replace(features=sg.as_features(sp.csr_array(x) if sparse else x, 50))
    # The registry's depth capped at 2 (SGC's is 1); no width for models without one.
    hidden = 6 if "hidden" in spec.defaults else None
    layers = min(spec.defaults["layers"], 2)
    model = create_model(model_name, 8, 2, hidden=hidden, layers=layers, dropout=0.0)
    params = model.init(jax.random.key(2))
    mesh = make_mesh(devices)
    sharded = place_node_data(shard_node_data(nd, devices), mesh)
    wrapped = edge_sharded_model(model)

    def sharded_loss(params, data):
        logits = wrapped.apply(params, data.graph, data.features)
        return masked_cross_entropy(logits, data.labels, data.train_mask), logits

    run = jax.jit(
        jax.shard_map(
            jax.value_and_grad(sharded_loss, has_aux=True),
            mesh=mesh,
            in_specs=(P(), DATA_SPECS),
            out_specs=P(),
        )
    )
    (loss, logits), grads = run(params, sharded)

    def loss_fn(params):
        logits = model.apply(params, nd.graph, nd.features)
        return masked_cross_entropy(logits, jnp.asarray(nd.labels), jnp.asarray(nd.train_mask))

    # The single-device reference, compiled as one program (eagerly, each of its
    # operations would compile alone).
    want_loss, want_grads = jax.jit(jax.value_and_grad(loss_fn))(params)
    want_logits = jax.jit(model.apply)(params, nd.graph, nd.features)
    np.testing.assert_allclose(logits[:50], want_logits, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(loss, want_loss, rtol=RTOL)
    for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_sharded_sparse_features_hold_each_shards_rows():
    x = np.array([[1, 0, 2], [0, 0, 0], [0, 3, 0], [4, 0, 5], [0, 0, 6]], np.float32)
    sparse = sg.SparseFeatures.from_scipy(sp.csr_array(x))
    sharded = shard_features(sparse, 2)  # R = 3: rows 0-2 | rows 3-4
    assert sharded.shape == (3, 3)
    blocks = [
        sg.SparseFeatures.tree_unflatten(
            (3, 3),
            tuple(
                np.asarray(a).reshape(2, -1)[d]
                for a in (sharded.rows, sharded.cols, sharded.values)
            ),
        ).todense()
        for d in range(2)
    ]
    np.testing.assert_array_equal(np.concatenate(blocks), np.concatenate([x, np.zeros((1, 3))]))
    dense = shard_features(x, 4)  # R = 2: one zero row of padding
    np.testing.assert_array_equal(dense, np.concatenate([x, np.zeros((3, 3))]))


@pytest.fixture(scope="module")
def gcn_data():
    nd = two_communities()
    return nd._replace(graph=sg.sort_edges(sg.gcn_norm(nd.graph)))


def test_training_without_dropout_equals_single_device_and_compiles_once(gcn_data):
    # 3 devices for 120 nodes: 40 rows each. 4 compiled calls of 3 epochs.
    config = TrainConfig(epochs=12, epochs_per_call=3, patience=None, timing_steps=2)
    model = sg.gcn(8, 2, hidden=8, dropout_rate=0.0)
    names = []
    result = None

    def run():
        nonlocal result
        result = fit_edge_sharded(model, gcn_data, config, devices=3, seeds=[0, 1])

    names = compiled_programs(run)
    assert sum("one_seed" in name for name in names) == 2, names  # the chunk and the timed step
    assert len(names) <= 4, names
    want = sg.fit(model, gcn_data, config, seeds=[0, 1])
    for got, ref in zip(jax.tree.leaves(result.state), jax.tree.leaves(want.state), strict=True):
        if jnp.issubdtype(ref.dtype, jnp.floating):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(result.history["loss"], want.history["loss"], rtol=1e-5)
    np.testing.assert_array_equal(result.history["val_acc"], want.history["val_acc"])
    # Replicated outputs: every device ended with the same bits.
    for leaf in jax.tree.leaves(result.state.params) + jax.tree.leaves(result.state.opt_state):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 3
        for other in shards[1:]:
            np.testing.assert_array_equal(other, shards[0])


def test_training_with_dropout_learns_and_predicts_like_predict(gcn_data):
    config = TrainConfig(epochs=40, patience=None, timing_steps=0)
    model = sg.gcn(8, 2, hidden=8)
    result = fit_edge_sharded(model, gcn_data, config, devices=4, seeds=[0, 1])
    assert result.test_acc.mean() > 0.9
    assert result.history["loss"][-1].mean() < result.history["loss"][0].mean()
    classes, embeddings = predict_edge_sharded(model, result.best_params, gcn_data, devices=4)
    want_classes, want_embeddings = sg.predict(model, result.best_params, gcn_data)
    assert classes.shape == (2, 120) and embeddings.shape == (2, 120, 8)
    np.testing.assert_array_equal(classes, want_classes)
    np.testing.assert_allclose(embeddings, want_embeddings, rtol=RTOL, atol=ATOL)
    # The restored params reproduce the recorded best validation accuracy.
    val = (np.asarray(classes)[:, gcn_data.val_mask] == gcn_data.labels[gcn_data.val_mask]).mean(1)
    np.testing.assert_allclose(val, result.val_acc, rtol=1e-6)


def test_bad_inputs_are_refused():
    g = random_graph(10, 20)
    with pytest.raises(ValueError, match="num_shards must be >= 1, got 0"):
        EdgeShardedGraph.build(g, 0)
    with pytest.raises(TypeError, match="expects a Graph, got ndarray"):
        EdgeShardedGraph.build(np.zeros((2, 3)), 2)
    sharded = EdgeShardedGraph.build(g, 2)
    with pytest.raises(ValueError, match="the graph has 2 shards but the mesh has 4 devices"):
        edge_sharded_propagate(sharded, jnp.ones((10, 2)), 4)
    with pytest.raises(ValueError, match=r"x has 9 rows but the graph has num_nodes=10"):
        edge_sharded_propagate(sharded, jnp.ones((9, 2)), 2)
    with pytest.raises(
        TypeError, match="over an EdgeShardedGraph shard inside shard_map, got Graph"
    ):
        sg.propagate(g, jnp.ones((10, 2)), backend=EdgeSharded())
    with pytest.raises(ValueError, match="no edge_ids"):
        sharded.without_edge_ids().edge_values(np.zeros(sharded.num_shards * sharded.shard_edges))
    model = sg.gcn(4, 2)
    with pytest.raises(ValueError, match="edge shards gather over the mesh axis"):
        edge_sharded_model(model, axis_name="x")
    with pytest.raises(ValueError, match=f"single axis '{AXIS}'"):
        edge_sharded_propagate(sharded, jnp.ones((10, 2)), jax.make_mesh((2,), ("x",)))


@pytest.mark.slow
def test_cli_trains_gcn_edge_sharded(tmp_path):
    reports = {}
    for devices in (1, 3):
        out = tmp_path / f"gcn{devices}.json"
        argv = ["train", "--epochs", "30", "--dropout", "0", "--devices", str(devices)]
        assert main([*argv, "--json", str(out), "--no-progress"]) == 0
        reports[devices] = json.loads(out.read_text())
    one, three = reports[1], reports[3]
    assert (one["devices"], one["processes"], one["parallelism"]) == (1, 1, "none")
    assert (three["devices"], three["processes"], three["parallelism"]) == (3, 1, "edge_sharded")
    # Without dropout the sharded run is the same computation, up to summation order.
    assert three["test_acc"] == pytest.approx(one["test_acc"], abs=0.02)
    assert three["val_acc_mean"] == pytest.approx(one["val_acc_mean"], abs=0.02)


@pytest.mark.slow
def test_cli_resumes_a_one_device_checkpoint_on_two_devices(tmp_path):
    # The state is replicated, so a checkpoint carries over to another device count;
    # without dropout the resumed sharded run continues the one-device run's numbers.
    base = ["train", "--epochs", "20", "--dropout", "0", "--patience", "0", "--no-progress"]
    full, first, resumed = tmp_path / "full.json", tmp_path / "first.json", tmp_path / "res.json"
    assert main([*base, "--json", str(full)]) == 0
    ckpt = tmp_path / "ckpt"
    argv = ["train", "--epochs", "10", "--dropout", "0", "--patience", "0", "--no-progress"]
    assert main([*argv, "--checkpoint", str(ckpt), "--json", str(first)]) == 0
    assert main([*base, "--devices", "2", "--resume", str(ckpt), "--json", str(resumed)]) == 0
    want, got = json.loads(full.read_text()), json.loads(resumed.read_text())
    assert got["resumed_from"] and got["devices"] == 2
    assert got["parallelism"] == "edge_sharded"
    assert got["best_epoch"] == want["best_epoch"]
    assert got["val_acc_mean"] == pytest.approx(want["val_acc_mean"], abs=1e-6)
    assert got["test_acc"] == pytest.approx(want["test_acc"], abs=1e-6)

"""The ``graph`` part of ``compare.py``: its data, our epoch program, and the peers' GIN.

The peers (PyG, DGL, Jraph) run in their own environments, found as
``compare.py`` finds them (``$SPARSEGCN_PYG_PYTHON``, ``$SPARSEGCN_DGL_PYTHON``,
``$SPARSEGCN_JRAPH_PYTHON``); a peer that is not given is skipped with the
reason. Their tests are ``slow`` (each starts a Python with torch or JAX):

    SPARSEGCN_PYG_PYTHON=... SPARSEGCN_DGL_PYTHON=... SPARSEGCN_JRAPH_PYTHON=... \\
        python -m pytest -n 0 benchmarks/peers/test_graph_peers.py -m slow
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from compare import main as compare_main
from graph_compare import as_dataset, finish_rows, ours_epoch
from graph_data import gin_weight_names, gin_weights, graph_list, save_npz, synthetic_tu
from peer_process import PeerProcess, start_peer

from sparsegcn.batch import Budget, pack_graphs
from sparsegcn.nn.graph_gin import graph_gin


def test_synthetic_tu_is_deterministic_connected_and_simple():
    data = synthetic_tu(60, seed=3)
    again = synthetic_tu(60, seed=3)
    assert all(np.array_equal(data[k], again[k]) for k in data)
    assert not np.array_equal(synthetic_tu(60, seed=4)["senders"], data["senders"])
    count = 60
    n = int(data["node_ptr"][-1])
    senders, receivers = data["senders"], data["receivers"]
    assert data["features"].shape == (n, 3)
    np.testing.assert_array_equal(data["features"].sum(axis=1), 1.0)  # one-hot
    assert data["train"].shape == (math.ceil(0.9 * count),)
    assert np.unique(data["train"]).shape == data["train"].shape
    # Every edge stays in its graph; no self-loops, no duplicates, both directions.
    graph_of = np.repeat(np.arange(count), np.diff(data["node_ptr"]))
    np.testing.assert_array_equal(graph_of[senders], graph_of[receivers])
    edge_graph = np.repeat(np.arange(count), np.diff(data["edge_ptr"]))
    np.testing.assert_array_equal(graph_of[senders], edge_graph)
    assert np.all(senders != receivers)
    adjacency = sp.coo_matrix((np.ones(senders.shape[0]), (receivers, senders)), shape=(n, n))
    adjacency = adjacency.tocsr()
    assert adjacency.max() == 1.0 and (adjacency != adjacency.T).nnz == 0
    # Each graph is one connected component.
    components, _ = sp.csgraph.connected_components(adjacency, directed=False)
    assert components == count
    assert set(np.unique(data["labels"])) == {0, 1}


def test_synthetic_tu_has_proteins_shape():
    data = synthetic_tu()
    nodes = np.diff(data["node_ptr"])
    edges = np.diff(data["edge_ptr"]) / 2
    assert nodes.shape == (1113,) and data["train"].shape == (1002,)
    assert 37 < nodes.mean() < 41 and 23 <= np.median(nodes) <= 28
    assert 69 < edges.mean() < 76 and nodes.min() >= 4 and nodes.max() <= 620
    assert abs(np.mean(data["labels"]) - 0.5) < 0.01


def test_synthetic_tu_refuses_sizes_that_make_no_graph():
    with pytest.raises(ValueError, match="num_graphs must be >= 2, got 1"):
        synthetic_tu(1)
    with pytest.raises(ValueError, match="min_nodes <= max_nodes, got 9, 5"):
        synthetic_tu(10, min_nodes=9, max_nodes=5)


def test_graph_list_gives_each_graph_alone():
    data = synthetic_tu(5, seed=1)
    graphs = graph_list(data)
    assert len(graphs) == 5
    for g, (senders, receivers, x, label) in enumerate(graphs):
        n = int(data["node_ptr"][g + 1] - data["node_ptr"][g])
        assert x.shape == (n, 3) and label == data["labels"][g]
        assert senders.min() >= 0 and max(senders.max(), receivers.max()) < n
        assert senders.shape[0] == data["edge_ptr"][g + 1] - data["edge_ptr"][g]


def test_gin_weights_layout_names_every_parameter():
    model = graph_gin(3, 2, hidden=8, num_layers=3, dropout_rate=0.0)
    params, _ = model.init(jax.random.key(0))
    flat = gin_weights(params)
    assert sorted(flat) == sorted(gin_weight_names(3))
    assert flat["w1_1"].shape == (3, 8) and flat["w2_2"].shape == (8, 8)
    assert flat["head_w_0"].shape == (3, 2) and flat["head_w_2"].shape == (8, 2)
    total = sum(np.size(v) for v in jax.tree.leaves(params)) - 2  # less the eps scalars
    biases = [flat[f"b{i}_{k}"] for i in (1, 2) for k in (1, 2)]  # zero: ours have none
    assert all(not b.any() for b in biases) and [b.size for b in biases] == [8] * 4
    assert sum(v.size for v in flat.values()) == total + 4 * 8


def test_ours_epoch_trains_every_training_graph_once():
    data = synthetic_tu(40, seed=2, max_nodes=40)
    fn, args, info = ours_epoch(data, hidden=8, num_layers=2, batch_size=8)
    assert info["graphs"] == 36
    compiled = jax.jit(fn).lower(*args).compile()
    losses = []
    state = args[0]
    for _ in range(8):
        state, metrics = compiled(state, *args[1:])
        losses.append(float(np.asarray(metrics)[0, 0]))
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    # The batches of every packing hold each training graph exactly once.
    train = args[1]
    ids = np.asarray(train.graph_ids)  # [P, B, G_b]
    for packing in ids:
        real = np.sort(packing[packing >= 0])
        np.testing.assert_array_equal(real, np.sort(data["train"]))
    assert ids.shape[1] == info["batches"]


def test_ours_epoch_members_count_every_members_graphs():
    data = synthetic_tu(20, seed=5, max_nodes=30)
    _, args, info = ours_epoch(data, hidden=4, num_layers=2, batch_size=8, members=3)
    assert info["graphs"] == 3 * 18
    assert np.asarray(args[1].graph_ids).shape[0] == 3  # [M, P, B, G_b]


def test_finish_rows_computes_graphs_per_s_and_speedups():
    def row(impl, ms, stats=None):
        return {"case": "c", "impl": impl, "median_ms": ms, "note": "", "stats": stats or {}}

    rows = [
        row("ours", 100.0),
        row("ours x4", 200.0),
        row("peer", 1000.0, {"graphs": 50, "batches": 2}),
        row("short peer", 500.0, {"graphs": 49, "batches": 2}),
        {"case": "c", "impl": "gone", "median_ms": None, "note": "missing: x"},
    ]
    info = {"budget": {}, "batches": 2, "packings": 1, "node_fill": 0.5}
    out = finish_rows(rows, {"ours": 50, "ours x4": 200}, {}, info, members=4)
    by = {r["impl"]: r for r in out}
    assert [r["impl"] for r in out] == ["ours", "peer", "short peer", "gone", "ours x4"]
    assert by["ours"]["graphs_per_s"] == pytest.approx(500.0)
    assert by["peer"]["graphs_per_s"] == pytest.approx(50.0)
    assert by["peer"]["ours_speedup"] == pytest.approx(10.0)
    assert by["peer"]["batches_per_epoch"] == 2 and by["ours"]["batches_per_epoch"] == 2
    assert "WARNING: 49 graphs an epoch, ours 50" in by["short peer"]["note"]
    assert by["ours x4"]["graphs_per_s"] == pytest.approx(1000.0)
    assert by["ours x4"]["case"] == "c | 4 models"
    assert by["ours x4"]["vs_one_model"] == pytest.approx(2.0)
    assert "ours_speedup" not in by["ours x4"]
    assert "graphs_per_s" not in by["gone"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--graph-datasets", "synthetic,proteins"], "--graph-datasets[1] = 'proteins'"),
        (["--graph-members", "0"], "--graph-members must be >= 1, got 0"),
        (["--graph-graphs", "1"], "--graph-graphs must be >= 2, got 1"),
        (["--graph-torch-threads", "0"], "--graph-torch-threads must be >= 1, got 0"),
    ],
)
def test_compare_refuses_bad_graph_options_before_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        compare_main(["--only", "graph", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.fixture(scope="module", params=["pyg", "dgl", "jraph"])
def peer(request):
    started = start_peer(request.param)
    if isinstance(started, str):
        pytest.skip(f"{request.param} peer missing: {started}")
    yield started
    started.close()


def _ours_scores(data, weights_params, hidden, layers):
    """Our GIN's training-mode scores (batch statistics, no dropout), all graphs as one batch."""
    dataset = as_dataset(data, "tiny")
    model = graph_gin(3, 2, hidden=hidden, num_layers=layers, dropout_rate=0.0)
    _, stats = model.init(jax.random.key(0))
    count = dataset.num_graphs
    budget = Budget(dataset.num_nodes + 1, dataset.num_edges, count + 1)
    batch = jax.tree.map(lambda a: a[0], pack_graphs(dataset, np.arange(count), budget, count))
    scores, _ = model.apply(weights_params, stats, batch, training=True)
    return np.asarray(scores)[:count]


@pytest.mark.slow
def test_peer_gin_equals_ours(peer: PeerProcess, tmp_path):
    """The same weights give the same class scores: the peers run our model."""
    data = synthetic_tu(12, seed=7, max_nodes=30)
    hidden, layers = 8, 4
    model = graph_gin(3, 2, hidden=hidden, num_layers=layers, dropout_rate=0.0)
    params, _ = model.init(jax.random.key(1))
    # Batch-norm affine weights away from 1 and 0, so that a swapped one shows.
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda p: p + 0.1 * rng.standard_normal(np.shape(p)), params)
    params = jax.tree.map(lambda p: np.asarray(p, np.float32), params)
    for layer in params["layers"]:
        layer["eps"] = np.zeros((), np.float32)
    expected = _ours_scores(data, params, hidden, layers)
    spec = dict(
        data=save_npz(str(tmp_path / "tiny.npz"), data),
        weights=save_npz(str(tmp_path / "weights.npz"), gin_weights(params)),
        hidden=hidden,
        num_layers=layers,
        warmup=0,
    )
    peer.setup("gin_forward", **spec)
    theirs = peer.output("gin_forward")
    assert theirs.shape == (12, 2)
    np.testing.assert_allclose(theirs, expected, rtol=1e-4, atol=1e-3 * np.abs(expected).max())


@pytest.mark.slow
def test_peer_gin_epoch_trains_every_training_graph(peer: PeerProcess, tmp_path):
    data = synthetic_tu(40, seed=2, max_nodes=40)
    _, _, info = ours_epoch(data, hidden=8, num_layers=2, batch_size=8)
    spec = dict(
        data=save_npz(str(tmp_path / "train.npz"), data),
        budget=info["peer_budget"],
        hidden=8,
        num_layers=5,
        dropout=0.5,
        lr=0.01,
        batch_size=8,
        torch_threads=1,  # torch's spinning threads are slow on a shared machine
        warmup=0,
    )
    cases = ["gin_epoch", "gin_epoch_prebatched"] if peer.name == "jraph" else ["gin_epoch"]
    for case in cases:
        peer.setup(case, **spec)
        first = float(peer.output(case))
        answer = peer.time(case, 3)
        last = float(peer.output(case))
        assert answer["stats"]["graphs"] == 36, case
        assert answer["stats"]["batches"] >= math.ceil(36 / 8), case
        assert np.isfinite(first) and np.isfinite(last), case

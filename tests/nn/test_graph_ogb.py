"""OGB's graph baseline (atom/bond encoders, GINE, GIN-virtual) and the Set2Set readout.

Each graph alone through a dense reference (one-hot incidence matrices, no
gather or segment sum) equals its row of a padded batch, forward and
gradient; padding (rows, edges, garbage in both) changes no real output,
gradient or statistic; the encoders equal a hand-computed sum and OGB's own
``AtomEncoder``/``BondEncoder`` with the same tables; Set2Set equals a NumPy
loop per graph (and its LSTM PyTorch's); one compile serves every batch of
a budget.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graph_sets import random_graphs

from sparsegcn.batch import Budget, pack_graphs
from sparsegcn.nn.encoders import atom_encoder_params, bond_encoder_params, encode
from sparsegcn.nn.graph_gin import GRAPH_READOUTS, build_graph_model
from sparsegcn.nn.graph_ogb import gine_aggregate, graph_ogb
from sparsegcn.nn.readout import set2set, set2set_params

NODE_DIMS = (4, 3, 2)
EDGE_DIMS = (3, 2)


def molecules(seed: int = 0):
    """:func:`random_graphs` with categorical atom and bond columns (OGB's form)."""
    data = random_graphs(seed=seed)
    rng = np.random.default_rng(seed + 10)
    atoms = np.stack([rng.integers(0, d, data.num_nodes) for d in NODE_DIMS], 1)
    bonds = np.stack([rng.integers(0, d, data.num_edges) for d in EDGE_DIMS], 1)
    return dataclasses.replace(
        data,
        name="ogbg-random",
        features=atoms.astype(np.int32),
        feature_dims=NODE_DIMS,
        edge_features=bonds.astype(np.int32),
        edge_feature_dims=EDGE_DIMS,
    )


DATA = molecules()
SIZE = int(DATA.nodes_per_graph().max())
EDGES = int(DATA.edges_per_graph().max())


def one(batches, b: int):
    return jax.tree.map(lambda a: None if a is None else a[b], batches)


def one_hot_columns(x: np.ndarray, dims, rows: int) -> np.ndarray:
    """``[rows, Σ d_j]``: the concatenated one-hot columns of ``x [n, C]``, zero past ``n``."""
    out = np.zeros((rows, sum(dims)), np.float32)
    offsets = np.concatenate([[0], np.cumsum(dims)[:-1]])
    for j in range(len(dims)):
        out[np.arange(x.shape[0]), offsets[j] + x[:, j]] = 1.0
    return out


def dense_molecule(g: int):
    """Graph ``g``: one-hot atoms ``[SIZE, Σ d]``, one-hot bonds ``[EDGES, Σ d]``,
    sender and receiver incidence ``[EDGES, SIZE]`` and a node mask."""
    nodes = slice(DATA.node_ptr[g], DATA.node_ptr[g + 1])
    edges = slice(DATA.edge_ptr[g], DATA.edge_ptr[g + 1])
    n, m = nodes.stop - nodes.start, edges.stop - edges.start
    senders = np.zeros((EDGES, SIZE), np.float32)
    receivers = np.zeros((EDGES, SIZE), np.float32)
    senders[np.arange(m), DATA.senders[edges] - nodes.start] = 1.0
    receivers[np.arange(m), DATA.receivers[edges] - nodes.start] = 1.0
    return (
        one_hot_columns(DATA.features[nodes], NODE_DIMS, SIZE),
        one_hot_columns(DATA.edge_features[edges], EDGE_DIMS, EDGES),
        senders,
        receivers,
        (np.arange(SIZE) < n).astype(np.float32),
    )


def dense_ogb(params, stats, atoms, bonds, senders, receivers, real):
    """OGB's GIN / GIN-virtual on one graph, dense, batch norm from running
    statistics, mean pooling; embeddings are one-hot products with the
    stacked tables."""

    def bn(p, s, h):
        scale = p["scale"][None, :] / jnp.sqrt(s["var"][None, :] + 1e-5)
        return (h - s["mean"][None, :]) * scale + p["bias"][None, :]

    def mlp(p, s, u):
        u = jax.nn.relu(bn(p["bn1"], s["bn1"], u @ p["w1"]))
        return bn(p["bn"], s["bn"], u @ p["w2"])

    virtual = "virtual" in params
    count = len(params["layers"])
    h = atoms @ jnp.concatenate(params["encoder"]["tables"])
    v = params["virtual"]["embedding"] if virtual else None
    for k, (layer, st) in enumerate(zip(params["layers"], stats["layers"], strict=True)):
        if virtual:
            h = h + real[:, None] * v[None, :]
        e = bonds @ jnp.concatenate(layer["edge"]["tables"])
        total = receivers.T @ jax.nn.relu(senders @ h + e)
        u = mlp(layer, st, (1.0 + layer["eps"]) * h + total)
        if k < count - 1:
            u = jax.nn.relu(u)
            if virtual:
                update, update_stats = params["virtual"]["updates"][k], stats["virtual"][k]
                v = jax.nn.relu(mlp(update, update_stats, (real @ h + v)[None, :]))[0]
        h = u * real[:, None]
    pooled = real @ h / jnp.sum(real)
    return pooled @ params["head"]["w"] + params["head"]["b"]


def nontrivial(model, seed: int):
    """Params and running statistics the reference has to use: non-zero ε, a
    non-zero virtual embedding, statistics away from (0, 1)."""
    params, stats = model.init(jax.random.key(seed))
    stats = jax.tree.map(lambda s: s + 0.3, stats)
    for k, layer in enumerate(params["layers"]):
        layer["eps"] = jnp.float32(0.1 * (k + 1))
    if "virtual" in params:
        params["virtual"]["embedding"] = jnp.linspace(-1.0, 1.0, 5, dtype=jnp.float32)
    return params, stats


@pytest.mark.parametrize("virtual_node", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_each_graph_alone_equals_its_row_forward_and_gradient(virtual_node):
    model = build_graph_model(
        DATA,
        hidden=5,
        num_layers=3,
        dropout_rate=0.5,
        learn_eps=True,
        readout_reduce="mean",
        virtual_node=virtual_node,
    )
    assert model.config["style"] == "ogb" and model.config["conv"] == "gine"
    params, stats = nontrivial(model, 0)
    budget = Budget(nodes=15, edges=40, graphs=4)
    batches = pack_graphs(DATA, np.arange(DATA.num_graphs), budget, batch_size=3)

    @jax.jit
    def batched(p, batch, slot):
        logits = model.apply(p, stats, batch)[0]
        grad = jax.grad(lambda q: model.apply(q, stats, batch)[0][slot, 1])(p)
        return logits, grad

    @jax.jit
    def alone(p, *graph):
        return dense_ogb(p, stats, *graph), jax.grad(lambda q: dense_ogb(q, stats, *graph)[1])(p)

    checked = 0
    for b in range(batches.graph_mask.shape[0]):
        batch = one(batches, b)
        for slot in np.flatnonzero(batch.graph_mask):
            logits, grad = batched(params, batch, slot)
            expected, expected_grad = alone(params, *dense_molecule(int(batch.graph_ids[slot])))
            np.testing.assert_allclose(logits[slot], expected, rtol=1e-5, atol=1e-5)
            for u, v in zip(jax.tree.leaves(grad), jax.tree.leaves(expected_grad), strict=True):
                np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)
            checked += 1
    assert checked == DATA.num_graphs


# The virtual node by default here, and without it above.
@pytest.mark.parametrize("virtual_node", [pytest.param(False, marks=pytest.mark.slow), True])
def test_padding_changes_no_real_output_gradient_or_statistic(virtual_node):
    model = graph_ogb(
        3,
        2,
        hidden=5,
        num_layers=3,
        dropout_rate=0.5,
        virtual_node=virtual_node,
        feature_dims=NODE_DIMS,
        edge_feature_dims=EDGE_DIMS,
    )
    params, stats = nontrivial(model, 1)
    order = np.arange(DATA.num_graphs)
    tight = one(pack_graphs(DATA, order, Budget(40, 120, 8), batch_size=7), 0)
    loose = one(pack_graphs(DATA, order, Budget(64, 400, 12), batch_size=7), 0)
    # Garbage in the padding rows and on the padding edges (out-of-range categories).
    pad_nodes = ~np.asarray(loose.node_mask)
    pad_edges = np.arange(400) >= DATA.num_edges
    assert pad_edges.sum() == 380  # many padding edges, all into the last node
    loose = loose._replace(
        x=np.where(pad_nodes[:, None], np.float32(1e3), loose.x),
        edge_features=np.where(pad_edges[:, None], np.float32(7.0), loose.edge_features),
    )
    key = jax.random.key(2)

    def loss(p, batch):
        logits, new = model.apply(p, stats, batch, key=key, training=True)
        return jnp.sum(logits[:7, 1] - logits[:7, 0]), (logits[:7], new)

    step = jax.jit(jax.value_and_grad(loss, has_aux=True))
    (_, (a, stats_a)), grad_a = step(params, tight)
    (_, (b, stats_b)), grad_b = step(params, loose)
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for u, v in zip(
        jax.tree.leaves((grad_a, stats_a)), jax.tree.leaves((grad_b, stats_b)), strict=True
    ):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)


def test_gine_aggregate_against_a_loop_over_edges_with_duplicates_and_self_loops():
    senders = np.array([0, 0, 1, 2, 2, 3, 3], np.int32)
    receivers = np.array([1, 1, 1, 2, 0, 0, 3], np.int32)  # a duplicate edge, self-loops
    from sparsegcn import Graph

    graph = Graph(senders, receivers, None, 5)  # node 4: no edge at all
    rng = np.random.default_rng(0)
    h = rng.normal(size=(5, 3)).astype(np.float32)
    e = rng.normal(size=(7, 3)).astype(np.float32)
    expected = np.zeros((5, 3), np.float32)
    for k in range(7):
        expected[receivers[k]] += np.maximum(h[senders[k]] + e[k], 0.0)
    out = jax.jit(lambda h, e: gine_aggregate(graph, h, e))(h, e)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"edge_embedding must be \[E, F\] = \[7, 3\]"):
        gine_aggregate(graph, h, e[:6])


def test_encode_is_the_sum_of_one_row_per_column():
    params = atom_encoder_params(jax.random.key(0), (3, 5, 2), 4)
    x = np.array([[0, 4, 1], [2, 0, 0], [1, 1, 1]], np.int32)
    tables = [np.asarray(t) for t in params["tables"]]
    expected = np.stack([sum(tables[j][row[j]] for j in range(3)) for row in x])
    np.testing.assert_allclose(encode(params, x), expected, rtol=1e-6)
    # A padded batch stores categories as float32: the same rows.
    np.testing.assert_allclose(encode(params, x.astype(np.float32)), expected, rtol=1e-6)
    # Xavier-uniform tables: within ±sqrt(6 / (d + W)), reaching towards it.
    for d, table in zip((3, 5, 2), tables, strict=True):
        assert table.shape == (d, 4)
        assert np.abs(table).max() <= np.sqrt(6.0 / (d + 4))
    big = np.asarray(bond_encoder_params(jax.random.key(1), (200,), 50)["tables"][0])
    bound = np.sqrt(6.0 / 250)
    assert np.abs(big).max() <= bound and abs(big.std() - bound / np.sqrt(3)) < 0.01 * bound
    with pytest.raises(ValueError, match=r"encode needs \[n, 3\] category columns"):
        encode(params, x[:, :2])
    with pytest.raises(ValueError, match=r"feature_dims\[1\] must be >= 1, got 0"):
        atom_encoder_params(jax.random.key(0), (3, 0), 4)


def test_encoders_equal_ogbs_with_the_same_tables():
    torch = pytest.importorskip("torch", reason="OGB parity needs torch (never a dependency)")
    mol_encoder = pytest.importorskip(
        "ogb.graphproppred.mol_encoder", reason="OGB parity needs ogb (an optional extra)"
    )
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    rng = np.random.default_rng(0)
    atoms, bonds = mol_encoder.AtomEncoder(emb_dim=6), mol_encoder.BondEncoder(emb_dim=6)
    for module, embeddings, dims in (
        (atoms, atoms.atom_embedding_list, get_atom_feature_dims()),
        (bonds, bonds.bond_embedding_list, get_bond_feature_dims()),
    ):
        tables = [emb.weight.detach().numpy().copy() for emb in embeddings]
        assert [t.shape[0] for t in tables] == list(dims)
        params = {"tables": [jnp.asarray(t) for t in tables]}
        x = np.stack([rng.integers(0, d, 20) for d in dims], 1)
        with torch.no_grad():
            expected = module(torch.as_tensor(x)).numpy()
        np.testing.assert_allclose(encode(params, x), expected, rtol=1e-5, atol=1e-6)
        # Same initialisation law: ours within OGB's Xavier bound for each table.
        ours = atom_encoder_params(jax.random.key(0), dims, 6)["tables"]
        for d, table in zip(dims, ours, strict=True):
            assert np.abs(np.asarray(table)).max() <= np.sqrt(6.0 / (d + 6))


def numpy_set2set(params, h, steps):
    """Set2Set on one graph's rows ``h [n, F]`` (``n`` may be 0), in NumPy."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    features = p["w_hh"].shape[0]

    def sigmoid(z):
        return 1.0 / (1.0 + np.exp(-z))

    q_star = np.zeros(2 * features)
    state, cell = np.zeros(features), np.zeros(features)
    for _ in range(steps):
        gates = q_star @ p["w_ih"] + state @ p["w_hh"] + p["b_ih"] + p["b_hh"]
        i, f, g, o = np.split(gates, 4)
        cell = sigmoid(f) * cell + sigmoid(i) * np.tanh(g)
        state = sigmoid(o) * np.tanh(cell)
        read = np.zeros(features)
        if h.shape[0]:
            scores = h @ state
            alpha = np.exp(scores - scores.max())
            read = (alpha / alpha.sum()) @ h
        q_star = np.concatenate([state, read])
    return q_star


def test_set2set_equals_a_loop_per_graph_with_masked_and_empty_graphs():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(9, 3)).astype(np.float32)
    node_graph = np.array([0, 0, 0, 2, 2, 3, 3, 3, 3], np.int32)  # graph 1: no node
    mask = np.array([True, True, True, True, True, True, False, True, False])
    params = set2set_params(jax.random.key(0), 3)
    bound = 1.0 / np.sqrt(3.0)
    assert all(np.abs(np.asarray(v)).max() <= bound for v in params.values())
    out = jax.jit(lambda p, h: set2set(p, h, node_graph, 4, steps=3, node_mask=mask))(params, h)
    assert out.shape == (4, 6)
    for g in range(4):
        rows = h[(node_graph == g) & mask].astype(np.float64)
        np.testing.assert_allclose(out[g], numpy_set2set(params, rows, 3), rtol=1e-5, atol=1e-6)
    grad = jax.jit(
        jax.grad(lambda h: jnp.sum(set2set(params, h, node_graph, 4, steps=2, node_mask=mask)))
    )
    assert np.all(np.asarray(grad(h))[~mask] == 0.0)
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        set2set(params, h, node_graph, 4, steps=0)


def test_set2set_lstm_is_pytorchs():
    torch = pytest.importorskip("torch", reason="PyTorch parity needs torch (never a dependency)")
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(6, 3)
    params = {
        "w_ih": jnp.asarray(lstm.weight_ih_l0.detach().numpy().T),
        "w_hh": jnp.asarray(lstm.weight_hh_l0.detach().numpy().T),
        "b_ih": jnp.asarray(lstm.bias_ih_l0.detach().numpy()),
        "b_hh": jnp.asarray(lstm.bias_hh_l0.detach().numpy()),
    }
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(4, 3))
    q_star = np.zeros((1, 6), np.float32)
    state = (torch.zeros(1, 1, 3), torch.zeros(1, 1, 3))
    with torch.no_grad():
        for _ in range(2):  # PyG's Set2Set loop, one graph
            q, state = lstm(torch.as_tensor(q_star)[None], state)
            q = q[0, 0].numpy().astype(np.float64)
            a = np.exp(rows @ q - (rows @ q).max())
            q_star = np.concatenate([q, (a / a.sum()) @ rows])[None].astype(np.float32)
    out = set2set(params, jnp.asarray(rows, jnp.float32), np.zeros(4, np.int32), 1, steps=2)
    np.testing.assert_allclose(out[0], q_star[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[0], numpy_set2set(params, rows, 2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("style", ["xu", "ogb"])
def test_set2set_readout_keeps_graphs_apart(style):
    """Evaluated, each graph alone gives its row of a batch of several; the
    head reads ``2H`` features."""
    model = build_graph_model(
        DATA, hidden=4, num_layers=2, dropout_rate=0.0, readout_reduce="set2set", style=style
    )
    params, stats = model.init(jax.random.key(3))
    heads = params["heads"] if style == "xu" else [params["head"]]
    assert heads[-1]["w"].shape == (8, 2)
    apply = jax.jit(lambda batch: model.apply(params, stats, batch)[0])
    budget = Budget(40, 120, 8)
    together = apply(one(pack_graphs(DATA, np.arange(DATA.num_graphs), budget, 7), 0))
    for g in range(DATA.num_graphs):
        alone = apply(one(pack_graphs(DATA, np.array([g]), budget, 7), 0))
        np.testing.assert_allclose(together[g], alone[0], rtol=1e-5, atol=1e-5)


def test_one_compile_serves_every_batch_of_a_budget():
    model = build_graph_model(
        DATA, hidden=4, num_layers=2, dropout_rate=0.5, virtual_node=True, learn_eps=True
    )
    params, stats = model.init(jax.random.key(0))
    batches = pack_graphs(DATA, np.arange(DATA.num_graphs), Budget(15, 40, 4), batch_size=3)
    traces = []

    @jax.jit
    def step(p, s, batch, key):
        traces.append(1)

        def loss(q):
            logits, new = model.apply(q, s, batch, key=key, training=True)
            return jnp.sum(logits), new

        return jax.grad(loss, has_aux=True)(p)

    for b in range(batches.graph_mask.shape[0]):
        grad, stats = step(params, stats, one(batches, b), jax.random.key(b))
        jax.block_until_ready(grad)
    assert batches.graph_mask.shape[0] >= 3 and len(traces) == 1


def test_build_graph_model_chooses_the_family_and_refuses_bad_settings():
    plain = random_graphs()
    xu = build_graph_model(plain, hidden=4, num_layers=3, dropout_rate=0.5)
    assert xu.config["style"] == "xu" and xu.name == "gin"
    ogb = build_graph_model(plain, hidden=4, num_layers=3, dropout_rate=0.5, style="ogb")
    assert ogb.config["conv"] == "gin"  # float features, no edge features: GIN layers
    params, stats = ogb.init(jax.random.key(0))
    batch = one(pack_graphs(plain, np.arange(7), Budget(40, 120, 8), 7), 0)
    assert ogb.apply(params, stats, batch)[0].shape == (8, plain.num_classes)
    no_bonds = dataclasses.replace(DATA, edge_features=None, edge_feature_dims=None)
    assert (
        build_graph_model(no_bonds, hidden=4, num_layers=2, dropout_rate=0.0).config["conv"]
        == "gin"
    )
    assert "set2set" in GRAPH_READOUTS
    with pytest.raises(ValueError, match="unknown graph model style 'tu'"):
        build_graph_model(DATA, hidden=4, num_layers=2, dropout_rate=0.0, style="tu")
    with pytest.raises(ValueError, match="unknown readout 'median'"):
        build_graph_model(DATA, hidden=4, num_layers=2, dropout_rate=0.0, readout_reduce="median")
    with pytest.raises(ValueError, match=r"feature_dims has 2 columns, in_features is 3"):
        graph_ogb(3, 2, feature_dims=(4, 4))
    model = graph_ogb(3, 2, hidden=4, num_layers=2, feature_dims=NODE_DIMS, edge_dim=2)
    params, stats = model.init(jax.random.key(0))
    no_edges = one(pack_graphs(no_bonds, np.arange(7), Budget(40, 120, 8), 7), 0)
    with pytest.raises(ValueError, match=r"reads edge features \[E_b, 2\], got None"):
        model.apply(params, stats, no_edges)


def test_batch_norm_keeps_its_running_statistics_without_real_rows():
    # Before: a training batch of no real rows moved the running variance 1 -> 0.9, and one
    # of a single row pulled it toward 0 (its unbiased variance is undefined).
    from sparsegcn.nn.graph_model import batch_norm_params, batch_norm_stats, masked_batch_norm

    params, stats = batch_norm_params(2), batch_norm_stats(2)
    stats = {"mean": jnp.array([0.5, -1.0]), "var": jnp.array([2.0, 3.0])}
    h = jnp.arange(8.0).reshape(4, 2)
    _, none = masked_batch_norm(params, stats, h, jnp.zeros(4, bool), True)
    np.testing.assert_array_equal(none["mean"], stats["mean"])
    np.testing.assert_array_equal(none["var"], stats["var"])
    _, one = masked_batch_norm(params, stats, h, jnp.array([False, True, False, False]), True)
    np.testing.assert_allclose(one["mean"], 0.9 * stats["mean"] + 0.1 * h[1])  # by hand
    np.testing.assert_array_equal(one["var"], stats["var"])
    _, two = masked_batch_norm(params, stats, h, jnp.array([True, True, False, False]), True)
    np.testing.assert_allclose(two["var"], 0.9 * stats["var"] + 0.1 * jnp.var(h[:2], 0, ddof=1))

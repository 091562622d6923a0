"""Padded batches of graphs: each graph alone through a dense reference equals its
row of the batched output (forward and gradient), padding changes no real output,
overflowing batches split (never truncated), balanced packing deals every graph
once into batches near the mean size (a tighter budget than random batches need),
registered node models run unchanged, and one compiled step serves every batch."""

from __future__ import annotations

import contextlib
import signal
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graph_sets import random_graphs

from sparsegcn.batch import (
    Budget,
    balanced_order,
    batch_bounds,
    batch_count,
    choose_budget,
    fit_budget,
    pack_graphs,
)
from sparsegcn.datasets.graphs import GraphDataset
from sparsegcn.nn.graph_gin import graph_gin
from sparsegcn.nn.readout import (
    READOUTS,
    attention_pool,
    attention_pool_params,
    readout,
    set2set,
    set2set_params,
)
from sparsegcn.nn.registry import create_model, get_model_spec

DATA = random_graphs()


def one(batches, b: int):
    return jax.tree.map(lambda a: None if a is None else a[b], batches)


SIZE = 6  # the largest graph of DATA: the dense reference pads every graph to it


def dense_graph(data: GraphDataset, g: int):
    """Graph ``g`` as a dense ``[SIZE, SIZE]`` adjacency, ``[SIZE, F]`` rows and a row mask."""
    start, stop = data.node_ptr[g], data.node_ptr[g + 1]
    edges = slice(data.edge_ptr[g], data.edge_ptr[g + 1])
    a = np.zeros((SIZE, SIZE), np.float32)
    np.add.at(a, (data.receivers[edges] - start, data.senders[edges] - start), 1.0)
    x = np.zeros((SIZE, data.features.shape[1]), np.float32)
    x[: stop - start] = data.features[start:stop]
    return a, x, (np.arange(SIZE) < stop - start).astype(np.float32)


@jax.jit
def dense_gin(params, stats, a, x, real):
    """Xu et al.'s GIN on one graph, dense, batch norm from running statistics;
    rows past the graph's nodes (``real == 0``) are left out of every sum."""

    def bn(p, s, h):
        scale = p["scale"][None, :] / jnp.sqrt(s["var"][None, :] + 1e-5)
        return (h - s["mean"][None, :]) * scale + p["bias"][None, :]

    def pool(h, head):
        return (real @ h) @ head["w"] + head["b"]

    h = x
    score = pool(h, params["heads"][0])
    for k, (layer, st) in enumerate(zip(params["layers"], stats["layers"], strict=True)):
        u = (1.0 + layer["eps"]) * h + a @ h
        u = jax.nn.relu(bn(layer["bn1"], st["bn1"], u @ layer["w1"]))
        h = jax.nn.relu(bn(layer["bn"], st["bn"], u @ layer["w2"]))
        score = score + pool(h, params["heads"][k + 1])
    return score


@pytest.fixture(scope="module")
def gin_model():
    model = graph_gin(3, 2, hidden=5, num_layers=3, dropout_rate=0.0, learn_eps=True)
    params, stats = model.init(jax.random.key(0))
    # Non-trivial running statistics and eps, so that the reference has to use them.
    stats = jax.tree.map(lambda s: s + 0.3, stats)
    params["layers"][0]["eps"] = jnp.float32(0.2)
    return model, params, stats


def test_each_graph_alone_equals_its_row_forward_and_gradient(gin_model):
    model, params, stats = gin_model
    budget = Budget(nodes=15, edges=40, graphs=4)
    batches = pack_graphs(DATA, np.arange(DATA.num_graphs), budget, batch_size=3)

    @jax.jit
    def batched(p, batch, slot):
        logits = model.apply(p, stats, batch)[0]
        grad = jax.grad(lambda q: model.apply(q, stats, batch)[0][slot, 1])(p)
        return logits, grad

    @jax.jit
    def alone(p, a, x, real):
        return dense_gin(p, stats, a, x, real), jax.grad(
            lambda q: dense_gin(q, stats, a, x, real)[1]
        )(p)

    checked = 0
    for b in range(batches.graph_mask.shape[0]):
        batch = one(batches, b)
        for slot in np.flatnonzero(batch.graph_mask):
            logits, grad = batched(params, batch, slot)
            expected, expected_grad = alone(params, *dense_graph(DATA, int(batch.graph_ids[slot])))
            np.testing.assert_allclose(logits[slot], expected, rtol=1e-5, atol=1e-4)
            for u, v in zip(jax.tree.leaves(grad), jax.tree.leaves(expected_grad), strict=True):
                np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)
            checked += 1
    assert checked == DATA.num_graphs


@pytest.mark.parametrize("virtual_node", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_padding_changes_no_real_output_or_gradient(gin_model, virtual_node):
    model, params, stats = gin_model
    if virtual_node:
        model = graph_gin(3, 2, hidden=5, num_layers=3, dropout_rate=0.5, virtual_node=True)
        params, stats = model.init(jax.random.key(2))
    order = np.arange(DATA.num_graphs)
    tight = pack_graphs(DATA, order, Budget(40, 120, 8), batch_size=7)
    loose = pack_graphs(DATA, order, Budget(64, 200, 12), batch_size=7)
    assert tight.graph_mask.shape[0] == loose.graph_mask.shape[0] == 1
    tight, loose = one(tight, 0), one(loose, 0)
    # Garbage in the padding rows, and the padding graph's edges.
    pad = ~np.asarray(loose.node_mask)
    loose = loose._replace(x=np.where(pad[:, None], np.float32(1e3), loose.x))
    key = jax.random.key(1)

    def loss(p, batch):
        logits, new = model.apply(p, stats, batch, key=key, training=True)
        return jnp.sum(logits[:7, 1] - logits[:7, 0]), (logits[:7], new)

    step = jax.jit(jax.value_and_grad(loss, has_aux=True))
    (_, (a, stats_a)), grad_a = step(params, tight)
    (_, (b, stats_b)), grad_b = step(params, loose)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)
    for u, v in zip(
        jax.tree.leaves((grad_a, stats_a)), jax.tree.leaves((grad_b, stats_b)), strict=True
    ):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)


def test_one_real_node_among_padding_trains_finite_and_as_without_padding():
    """A batch whose real rows barely vary (one node: batch norm's variance is 0)
    used to scale the padding rows by 1/sqrt(eps) at every batch norm; five layers
    overflowed them and inf * 0 made the loss NaN (tu:MINI's one-node graph)."""
    single = GraphDataset(
        name="tu:ONE",
        senders=np.zeros(0, np.int64),
        receivers=np.zeros(0, np.int64),
        node_ptr=np.array([0, 1]),
        edge_ptr=np.array([0, 0]),
        features=np.array([[0.5, 1.0, 2.0]], np.float32),
        labels=np.array([1]),
        num_classes=2,
        classes=np.arange(2),
    )
    model = graph_gin(3, 2, hidden=8, num_layers=5, dropout_rate=0.0)
    params, stats = model.init(jax.random.key(0))
    order = np.arange(1)

    def step(budget):
        batch = one(pack_graphs(single, order, budget, batch_size=1), 0)

        def loss(p):
            logits, _ = model.apply(p, stats, batch, key=jax.random.key(1), training=True)
            return jnp.sum(logits[0, 1] - logits[0, 0]), logits[0]

        return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)

    (_, tight), grad_tight = step(Budget(2, 0, 2))  # one padding row: the least
    (_, padded), grad_padded = step(Budget(9, 8, 4))
    assert np.isfinite(padded).all()
    np.testing.assert_allclose(padded, tight, rtol=1e-5, atol=1e-5)
    for u, v in zip(jax.tree.leaves(grad_padded), jax.tree.leaves(grad_tight), strict=True):
        assert np.isfinite(u).all()
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("virtual_node", "how"),
    [(True, "sum"), pytest.param(False, "attention", marks=pytest.mark.slow)],
)
def test_virtual_node_and_attention_keep_graphs_apart(virtual_node, how):
    """Evaluated, each graph alone gives its row of a batch of several (the virtual
    node and the attention gate of one graph read only that graph's nodes)."""
    model = graph_gin(
        3,
        2,
        hidden=5,
        num_layers=4,
        dropout_rate=0.0,
        virtual_node=virtual_node,
        readout_reduce=how,
    )
    params, stats = model.init(jax.random.key(3))
    if virtual_node:
        params["virtual"]["embedding"] = jnp.arange(3, dtype=jnp.float32)
    stats = jax.tree.map(lambda s: s + 0.2, stats)
    apply = jax.jit(lambda batch: model.apply(params, stats, batch)[0])
    batch = one(pack_graphs(DATA, np.arange(DATA.num_graphs), Budget(40, 120, 8), 7), 0)
    together = apply(batch)
    for g in range(DATA.num_graphs):
        alone = apply(one(pack_graphs(DATA, np.array([g]), Budget(40, 120, 8), 7), 0))
        np.testing.assert_allclose(together[g], alone[0], rtol=1e-5, atol=1e-4)


def test_overflow_splits_and_never_drops_a_graph():
    nodes, edges = DATA.nodes_per_graph(), DATA.edges_per_graph()
    budget = Budget(nodes=int(nodes.max()) + 3, edges=int(edges.max()) + 2, graphs=5)
    order = np.random.default_rng(3).permutation(DATA.num_graphs)
    batches = pack_graphs(DATA, order, budget, batch_size=4)
    count = batches.graph_mask.shape[0]
    assert count == batch_count(DATA, order, budget, 4) > -(-DATA.num_graphs // 4)
    ids = np.asarray(batches.graph_ids)[np.asarray(batches.graph_mask)]
    np.testing.assert_array_equal(ids, order)  # every graph once, in order
    real_nodes = (np.asarray(batches.node_graph) < budget.graphs - 1).sum()
    assert real_nodes == DATA.num_nodes
    real_edges = (np.asarray(batches.senders) != budget.nodes - 1).sum()
    assert real_edges == DATA.num_edges
    with pytest.raises(ValueError, match=r"graph .* nodes and .* edges; the budget holds"):
        pack_graphs(DATA, order, Budget(2, 100, 5), batch_size=4)


def test_choose_budget_fits_the_largest_graph_and_pads_one_slot():
    nodes = np.array([3, 30, 4, 5, 4, 3])
    edges = np.array([2, 90, 6, 8, 6, 4])
    budget = choose_budget(nodes, edges, batch_size=4)
    assert budget.graphs == 5
    assert budget.nodes >= 31 and (budget.nodes - 1) % 8 == 0
    assert 90 <= budget.edges <= 90 + 6 + 8 + 6 + 8  # the 4 largest together, rounded up


def skewed_sizes(count: int = 600, seed: int = 0):
    """Log-normal node counts (a long tail, as PROTEINS') and about two edges a node."""
    rng = np.random.default_rng(seed)
    nodes = np.clip(np.round(rng.lognormal(np.log(26.0), 0.8, count)), 4, 600).astype(np.int64)
    edges = (2 * np.round(nodes * rng.uniform(1.5, 2.2, count))).astype(np.int64)
    ptr = types.SimpleNamespace(
        node_ptr=np.concatenate([[0], np.cumsum(nodes)]),
        edge_ptr=np.concatenate([[0], np.cumsum(edges)]),
    )
    return nodes, edges, ptr


@pytest.mark.parametrize(("count", "batch_size", "devices"), [(600, 32, 1), (101, 8, 2), (5, 8, 1)])
def test_balanced_order_deals_every_graph_once_in_full_batches(count, batch_size, devices):
    nodes, edges, _ = skewed_sizes(count)
    orders = [
        balanced_order(nodes, edges, batch_size, rng=np.random.default_rng(s), devices=devices)
        for s in range(3)
    ]
    for order in orders:
        np.testing.assert_array_equal(np.sort(order), np.arange(count))
    if count > batch_size:
        # Different draws deal different batches, not only the same ones in another order.
        batches = [
            {frozenset(o[i : i + batch_size].tolist()) for i in range(0, count, batch_size)}
            for o in orders
        ]
        assert batches[0] != batches[1] and batches[1] != batches[2]
    # The same rng, the same order.
    again = balanced_order(nodes, edges, batch_size, rng=np.random.default_rng(0), devices=devices)
    np.testing.assert_array_equal(again, orders[0])


def test_balanced_batches_fit_their_budget_unsplit_and_fill_it_more_than_random_ones():
    """A deterministic check on a skewed size distribution: a balanced order packs
    into ceil(G / B) batches under the budget fitted to it, every batch within the
    budget, and pads fewer node rows than random batches under choose_budget
    (their usual budget) or under the budget fitted to the random batches themselves."""
    nodes, edges, ptr = skewed_sizes()
    count, b = nodes.shape[0], 32
    rng = np.random.default_rng(7)
    balanced = [balanced_order(nodes, edges, b, rng=rng) for _ in range(8)]
    shuffled = [rng.permutation(count) for _ in range(8)]
    budget = fit_budget(nodes, edges, balanced, b, group=b)
    assert budget.graphs == b + 1 and (budget.nodes - 1) % 8 == 0 and budget.edges % 8 == 0

    def fill(orders, budget, group):
        rows = real = 0
        for order in orders:
            bounds = batch_bounds(nodes[order], edges[order], budget, b, group=group)
            sums = np.add.reduceat(nodes[order], bounds[:-1])
            assert (sums <= budget.nodes - 1).all()
            assert (np.add.reduceat(edges[order], bounds[:-1]) <= budget.edges).all()
            assert batch_count(ptr, order, budget, b, group=group) == bounds.shape[0] - 1
            rows += (bounds.shape[0] - 1) * budget.nodes
            real += nodes.sum()
        return real / rows, bounds.shape[0] - 1

    balanced_fill, batches = fill(balanced, budget, b)
    assert batches == -(-count // b)  # nothing split
    random_fill, _ = fill(shuffled, choose_budget(nodes, edges, b), None)
    refit = fit_budget(nodes, edges, shuffled, b)
    assert budget.nodes < refit.nodes and budget.edges < refit.edges
    assert balanced_fill > random_fill + 0.05, (balanced_fill, random_fill)


def test_a_split_group_shifts_no_later_batch():
    nodes = np.array([5, 5, 5, 5, 1, 1, 1, 1])
    edges = np.zeros(8, np.int64)
    budget = Budget(nodes=11, edges=8, graphs=5)  # ten real nodes a batch
    np.testing.assert_array_equal(batch_bounds(nodes, edges, budget, 4), [0, 2, 4, 8])
    np.testing.assert_array_equal(batch_bounds(nodes, edges, budget, 4, group=3), [0, 2, 3, 6, 8])
    np.testing.assert_array_equal(batch_bounds(nodes, edges, budget, 2, group=4), [0, 2, 4, 6, 8])


def test_readouts_against_numpy():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(6, 2)).astype(np.float32)
    node_graph = np.array([0, 0, 2, 2, 2, 3])
    mask = np.array([True, True, True, False, True, False])
    pooled = jax.jit(
        lambda h: {how: readout(h, node_graph, 4, how, node_mask=mask) for how in READOUTS}
    )(h)
    for how, fn in (("sum", np.sum), ("mean", np.mean), ("max", np.max)):
        out = np.asarray(pooled[how])
        for g in range(4):
            rows = h[(node_graph == g) & mask]
            expected = fn(rows, axis=0) if rows.size else np.zeros(2)
            np.testing.assert_allclose(out[g], expected, rtol=1e-6)
    params = attention_pool_params(jax.random.key(0), 2)
    pool = jax.jit(lambda p, h: attention_pool(p, h, node_graph, 4, node_mask=mask))
    out = np.asarray(pool(params, h))
    gate = (h @ np.asarray(params["w_gate"]))[:, 0]
    for g in range(4):
        keep = (node_graph == g) & mask
        w = np.exp(gate[keep] - gate[keep].max()) if keep.any() else np.zeros(0)
        expected = (w[:, None] * h[keep]).sum(0) / w.sum() if keep.any() else np.zeros(2)
        np.testing.assert_allclose(out[g], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name",
    [
        "gin",
        pytest.param("gcn", marks=pytest.mark.slow),
        pytest.param("gat", marks=pytest.mark.slow),
        pytest.param("sage", marks=pytest.mark.slow),
    ],
)
def test_registered_node_models_run_on_a_batch_unchanged(name):
    spec = get_model_spec(name)
    model = create_model(name, 3, 2, hidden=4, layers=2, dropout=0.0)
    params = model.init(jax.random.key(0))
    apply = jax.jit(model.apply)
    batch = one(pack_graphs(DATA, np.arange(4), Budget(24, 60, 5), batch_size=4), 0)
    out = apply(params, spec.prepare_graph(batch.graph), jnp.asarray(batch.x))
    for slot in range(4):
        g = int(batch.graph_ids[slot])
        alone = one(pack_graphs(DATA, np.array([g]), Budget(24, 60, 5), batch_size=4), 0)
        expected = apply(params, spec.prepare_graph(alone.graph), jnp.asarray(alone.x))
        rows = np.flatnonzero(np.asarray(batch.node_graph) == slot)
        n = rows.shape[0]
        np.testing.assert_allclose(out[rows], expected[:n], rtol=1e-5, atol=1e-5)


def test_one_compiled_step_serves_every_batch(gin_model):
    model, params, stats = gin_model
    batches = pack_graphs(DATA, np.arange(DATA.num_graphs), Budget(15, 40, 4), batch_size=3)
    traces = []

    @jax.jit
    def step(p, batch):
        traces.append(1)
        return jax.grad(lambda q: jnp.sum(model.apply(q, stats, batch)[0]))(p)

    for b in range(batches.graph_mask.shape[0]):
        jax.block_until_ready(step(params, one(batches, b)))
    assert batches.graph_mask.shape[0] >= 3 and len(traces) == 1


@contextlib.contextmanager
def fails_instead_of_hanging(seconds: float = 5.0):
    """Turns a hang (the old endless packing loop) into a failure."""

    def stop(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    "budget, batch_size, message",
    [
        (Budget(64, 64, 5), 0, r"batch_size must be >= 1, got 0"),
        (Budget(64, 64, 5), -2, r"batch_size must be >= 1, got -2"),
        (Budget(64, 64, 1), 4, r"budget.graphs must be >= 2 .*got 1"),
        (Budget(64, 64, 0), 4, r"budget.graphs must be >= 2 .*got 0"),
        (Budget(1, 64, 5), 4, r"budget.nodes must be >= 2 .*got 1"),
        (Budget(64, -1, 5), 4, r"budget.edges must be >= 0, got -1"),
    ],
)
def test_a_budget_or_batch_size_without_room_is_refused_before_packing(budget, batch_size, message):
    order = np.arange(DATA.num_graphs)
    with fails_instead_of_hanging():
        with pytest.raises(ValueError, match=message):
            pack_graphs(DATA, order, budget, batch_size)
        with pytest.raises(ValueError, match=message):
            batch_count(DATA, order, budget, batch_size)


@pytest.mark.parametrize(
    "order, message",
    [
        ([0, -1], r"order\[1\] = -1 is out of range.*\[0, \d+\)"),
        ([0, 1, 10**6], r"order\[2\] = 1000000 is out of range"),
        ([1.7], r"order must hold integer graph ids, got order\[0\] = 1.7"),
        ([1.0, 2.5], r"order\[1\] = 2.5"),
        ([True, False], r"order must hold integer graph ids.*bool"),
        ([2, 0, 3, 0], r"order\[3\] = 0 repeats order\[1\]; each graph is packed at most once"),
        ([[0, 1]], r"order must have 1 dimension"),
    ],
)
def test_a_bad_order_is_named(order, message):
    budget = Budget(64, 64, 5)
    with pytest.raises(ValueError, match=message):
        pack_graphs(DATA, np.asarray(order), budget, 4)
    with pytest.raises(ValueError, match=message):
        batch_count(DATA, np.asarray(order), budget, 4)


def test_an_empty_order_packs_no_batch():
    batches = pack_graphs(DATA, [], Budget(64, 64, 5), 4, num_batches=1)
    assert not np.asarray(batches.graph_mask).any()


@pytest.mark.parametrize("node_graph", [[0, 0, 5], [0, -1, 1]])
@pytest.mark.parametrize("how", [*READOUTS, "attention", "set2set"])
def test_readout_names_an_out_of_range_graph_slot(how, node_graph):
    h = jnp.array([[1.0], [2.0], [4.0]])
    pos = 2 if node_graph[2] == 5 else 1
    message = rf"node_graph\[{pos}\] = {node_graph[pos]} is out of range.*num_graphs=2"
    with pytest.raises(ValueError, match=message):
        if how == "attention":
            attention_pool(attention_pool_params(jax.random.key(0), 1), h, node_graph, 2)
        elif how == "set2set":
            set2set(set2set_params(jax.random.key(0), 1), h, jnp.asarray(node_graph), 2, steps=1)
        else:
            readout(h, np.asarray(node_graph), 2, how)


@pytest.mark.parametrize("mask", [[False], [0, 2, 1]])
def test_readout_refuses_a_node_mask_not_bool_per_node(mask):
    with pytest.raises(ValueError, match=r"node_mask must be bool of shape \(3,\)"):
        readout(jnp.ones((3, 1)), jnp.array([0, 0, 1]), 2, node_mask=jnp.asarray(mask))


def test_max_readout_keeps_nan_and_infinities_of_non_empty_graphs():
    # Before: jnp.where(isfinite(max), max, 0) turned NaN, +inf and -inf into 0.
    h = np.array(
        [[np.nan, 1.0], [2.0, 3.0], [np.inf, -1.0], [0.0, 5.0], [-np.inf, 7.0], [-np.inf, 8.0]],
        np.float32,
    )
    node_graph = np.array([0, 0, 1, 1, 2, 3])
    mask = np.array([True, True, True, True, True, False])  # graph 3: its one node masked
    out = np.asarray(
        jax.jit(lambda h: readout(h, node_graph, 5, "max", node_mask=mask))(jnp.asarray(h))
    )
    for g in range(5):
        rows = h[(node_graph == g) & mask]
        expected = np.max(rows, axis=0) if rows.size else np.zeros(2)  # graphs 3, 4: 0
        np.testing.assert_array_equal(out[g], expected)
    unmasked = np.asarray(readout(h, node_graph, 4, "max"))
    np.testing.assert_array_equal(unmasked[3], h[5])
    # As the sum readout does.
    assert np.isnan(np.asarray(readout(h, node_graph, 4, "sum"))[0, 0])


def test_masked_max_readout_of_integer_rows():
    # Before: the -inf fill of masked rows raised OverflowError for integer h.
    h = np.array([[-5, 1], [9, 2], [4, -3]], np.int32)
    mask = np.array([True, False, True])
    out = readout(jnp.asarray(h), jnp.array([0, 0, 1]), 3, "max", node_mask=mask)
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(out, [[-5, 1], [4, -3], [0, 0]])  # graph 2 has no node


@pytest.mark.parametrize("how", [*READOUTS, "attention", "set2set"])
@pytest.mark.parametrize("shape", [(3,), (3, 1, 2)])
def test_readouts_refuse_h_not_nodes_by_features(how, shape):
    # Before: a 1-D h of the mean readout came back [G, G] (broadcast against the counts).
    h = jnp.ones(shape)
    node_graph = jnp.array([0, 0, 1])
    width = shape[-1]
    with pytest.raises(ValueError, match=r"h must be \[N, F\] node rows, got shape \(3"):
        if how == "attention":
            attention_pool(attention_pool_params(jax.random.key(0), width), h, node_graph, 2)
        elif how == "set2set":
            set2set(set2set_params(jax.random.key(0), width), h, node_graph, 2, steps=1)
        else:
            readout(h, node_graph, 2, how)


def test_attention_pool_names_both_widths_of_a_params_mismatch():
    # Before: "dot_general requires contracting dimensions to have the same shape".
    h = jnp.ones((3, 2))
    params = attention_pool_params(jax.random.key(0), 3)
    with pytest.raises(
        ValueError, match=r"params are for 3 features .* h has 2 \(shape \(3, 2\)\)"
    ):
        attention_pool(params, h, jnp.array([0, 0, 1]), 2)


@pytest.mark.parametrize(
    ("nodes", "edges", "message"),
    [
        ([3, 4, 5], [4, 6], r"got shapes \(3,\) and \(2,\)"),
        ([[3, 4, 5]], [[4, 6, 8]], r"got shapes \(1, 3\) and \(1, 3\)"),
        (3, 4, r"got shapes \(\) and \(\)"),
        ([], [], r"at least one graph, got G = 0"),
        ([3, -4, 5], [4, 6, 8], r"nodes_per_graph\[1\] = -4 is not a count"),
        ([3, 4, 5], [4, 6.5, 8], r"edges_per_graph\[1\] = 6\.5 is not a count"),
        ([3, np.nan, 5], [4, 6, 8], r"nodes_per_graph\[1\] = nan is not a count"),
    ],
)
def test_choose_budget_refuses_counts_that_are_not_one_per_graph(nodes, edges, message):
    # Before: mismatched lengths and negative counts were budgeted, a 2-D array as
    # one graph; empty counts failed with "cannot convert float NaN to integer".
    with pytest.raises(ValueError, match=message):
        choose_budget(np.asarray(nodes), np.asarray(edges), batch_size=2)


def test_the_sub_batches_of_a_balanced_batch_are_balanced_too():
    # Before: sub-batch d took strata d, d + D, ... of strata ordered largest first, so
    # sub-batch 0 always took the largest graphs: mean node totals 353, 284, 252 and 229
    # per sub-batch here. Each graph now goes to the lightest sub-batch, largest first.
    nodes, edges, _ = skewed_sizes(640)
    b, devices, per_device = 32, 4, 8
    totals = []
    for seed in range(40):
        order = balanced_order(nodes, edges, b, rng=np.random.default_rng(seed), devices=devices)
        assert np.array_equal(np.sort(order), np.arange(640))
        batches = order.reshape(-1, b)
        totals.append(
            np.stack([nodes[batches[:, i : i + per_device]].sum(1) for i in range(0, b, 8)], 1)
        )
    totals = np.concatenate(totals)  # [batches, D]
    mean = totals.mean()
    np.testing.assert_allclose(totals.mean(axis=0), mean, rtol=0.05)
    assert totals.max(axis=1).mean() < 1.08 * mean


def test_a_partial_batch_is_dealt_to_the_sub_batches_pack_steps_cuts():
    from sparsegcn.batch import _deal

    # 10 graphs, 4 devices of 3 slots: pack_steps cuts 3, 3, 3 and 1.
    sizes = np.array([9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0, 0.5])
    order = _deal(sizes, 4, 3)
    np.testing.assert_array_equal(np.sort(order), np.arange(10))
    cuts = [sizes[order[i : i + 3]].tolist() for i in range(0, 10, 3)]
    # Largest first, each to the open sub-batch with the lowest total per slot: 9, 8, 7
    # and 6 open the four; the one-slot sub-batch is then full, and 5 .. 0.5 go to the
    # lightest of the others in turn (by hand).
    assert cuts == [[9.0, 3.0, 2.0], [8.0, 4.0, 1.0], [7.0, 5.0, 0.5], [6.0]]

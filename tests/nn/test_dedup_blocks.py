"""Every sampled model on de-duplicated blocks: equal to the tree where nothing repeats
(random samples), equal to the full graph with full neighbourhoods (repeats
galore), forward and gradient, through ``run_layers`` alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sparsegcn as sg
from sparsegcn.nn.registry import MODELS, create_model
from sparsegcn.sampling import sample_blocks, sample_dedup

TOL = dict(rtol=2e-5, atol=2e-5)

SAMPLED = [
    (name, options)
    for name, spec in MODELS.items()
    if spec.sampled
    for options in (
        [{"aggregator": a} for a in spec.options["aggregator"].choices]
        if "aggregator" in spec.options
        else [{}]
    )
]


def halves(first: bool) -> list:
    """``SAMPLED``, every other case slow: the two tests below split the registry's
    sampled models by default (each runs in one of them), and run all of them with
    ``-m slow``."""
    return [
        pytest.param(*case, marks=() if i % 2 == (0 if first else 1) else pytest.mark.slow)
        for i, case in enumerate(SAMPLED)
    ]


def forest(roots: int, children: int, depth: int) -> sg.Graph:
    """Disjoint complete trees, edges towards the root: no node repeats in a sample."""
    senders, receivers, next_id, frontier = [], [], roots, list(range(roots))
    for _ in range(depth):
        new = []
        for parent in frontier:
            kids = list(range(next_id, next_id + children))
            next_id += children
            senders += kids
            receivers += [parent] * children
            new += kids
        frontier = new
    return sg.Graph(np.array(senders), np.array(receivers), None, next_id)


def random_graph(n=30, m=100, seed=0) -> sg.Graph:
    rng = np.random.default_rng(seed)
    g = sg.Graph(rng.integers(0, n - 2, m), rng.integers(0, n - 2, m), None, n)
    return sg.remove_self_loops(sg.to_undirected(g))


def build(name, options, in_features):
    model = create_model(name, in_features, 3, hidden=4, layers=2, dropout=0.0, **options)
    return model, model.init(jax.random.key(1))


def outputs_and_grads(model, params, graph, x, seeds=None):
    weights = jax.random.normal(jax.random.key(9), (4, 3))

    def loss(p):
        out = model.apply(p, graph, x)
        out = out if seeds is None else out[seeds]
        return jnp.sum(out * weights), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return out, grads


def assert_same(a, b):
    out_a, grads_a = a
    out_b, grads_b = b
    np.testing.assert_allclose(out_a, out_b, **TOL)
    for ga, gb in zip(jax.tree.leaves(grads_a), jax.tree.leaves(grads_b), strict=True):
        assert np.isfinite(np.asarray(ga)).all()
        np.testing.assert_allclose(ga, gb, **TOL)


@pytest.mark.parametrize("name, options", halves(True), ids=lambda v: str(v))
def test_dedup_equals_the_tree_when_no_node_repeats(name, options):
    g = forest(roots=5, children=4, depth=2)
    csr = g.to_csr()
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 6))
    model, params = build(name, options, 6)
    seeds = np.array([4, 0, 2, 1])
    key = jax.random.key(3)  # fanouts below the degree: a random sample
    tree = sample_blocks(csr.indptr, csr.indices, seeds, (3, 2), key=key)
    dedup = sample_dedup(csr.indptr, csr.indices, seeds, (3, 2), key=key)
    assert dedup.num_rows == sum(int(level.size) for level in tree.nodes)  # N is no bound here
    assert_same(
        outputs_and_grads(model, params, dedup, x), outputs_and_grads(model, params, tree, x)
    )


@pytest.mark.parametrize("name, options", halves(False), ids=lambda v: str(v))
def test_dedup_with_full_neighbourhoods_equals_the_full_graph(name, options):
    # Many repeats (a random graph, GAT's self-loops): every distinct node is one
    # row, and with fanouts >= every degree the seeds' outputs are the full graph's.
    spec = MODELS[name]
    g = spec.prepare_graph(random_graph())
    csr = g.to_csr()
    fanout = int(np.diff(csr.indptr).max())
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 5))
    model, params = build(name, options, 5)
    seeds = np.array([0, 7, 3, g.num_nodes - 1])  # the last one isolated (or a lone loop)
    dedup = sample_dedup(csr.indptr, csr.indices, seeds, (fanout, fanout), key=jax.random.key(0))
    assert dedup.num_rows <= 4 + 2 * g.num_nodes
    full = outputs_and_grads(model, params, g, x, jnp.asarray(seeds))
    assert_same(outputs_and_grads(model, params, dedup, x), full)


def test_sage_on_a_capped_sample_matches_a_node_level_numpy_reference():
    # Two SAGE-mean layers computed node by node from the sampled neighbour
    # multisets (an overflowed neighbour simply missing), in float64.
    g = random_graph(seed=4)
    csr = g.to_csr()
    x = np.random.default_rng(0).normal(size=(g.num_nodes, 5))
    model, params = build("sage", {"aggregator": "mean"}, 5)
    seeds = np.arange(6)
    s = sample_dedup(csr.indptr, csr.indices, seeds, (4, 3), key=jax.random.key(2), caps=(8, 9))
    assert int(jnp.sum(s.overflow)) > 0
    ids = np.asarray(s.entries())
    neighbors = {}
    for d in range(2):
        nodes, masks = np.asarray(s.nodes[d]), np.asarray(s.masks[d])
        for i in np.flatnonzero(masks):
            rows = np.asarray(s.neighbors[d])[i][np.asarray(s.edge_masks[d])[i]]
            neighbors[int(nodes[i])] = ids[rows].tolist()
    layers = [jax.tree.map(lambda a: np.asarray(a, np.float64), p) for p in params["layers"]]

    def layer(p, h, v):
        neigh = np.mean([h[u] for u in neighbors[v]], axis=0) if neighbors[v] else 0.0
        return h[v] @ p["w_root"] + neigh @ p["w_neigh"] + p["b"]

    hidden = {v: np.maximum(layer(layers[0], x, v), 0.0) for v in neighbors}
    expected = np.stack([layer(layers[1], hidden, int(v)) for v in seeds])
    got = model.apply(params, s, jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)

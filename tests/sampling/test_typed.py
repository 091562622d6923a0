"""Typed neighbour sampling: with full fanouts R-GCN on the sample equals full-graph R-GCN."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hetero_graphs import CITES, EMPTY, WRITES, paper_features, small_hetero

from sparsegcn.nn.rgcn import rgcn
from sparsegcn.sampling.typed import (
    HeteroCSR,
    check_typed_fanouts,
    path_type,
    sample_typed,
    typed_paths,
)


def test_paths_follow_relation_types():
    g = small_hetero().add_reverse_relations()
    levels = typed_paths(g.edge_types, "paper", 2)
    # Into papers: cites, writes, hosts (empty), rev_cites.
    assert [g.edge_types[p[0]] for p in levels[1]] == list(g.incoming("paper"))
    for level in levels[1:]:
        for p in level:
            for a, b in itertools.pairwise(p):
                assert g.edge_types[b][2] == g.edge_types[a][0]
    assert path_type((1,), g.edge_types, "paper") == "author"


def test_sample_shapes_masks_and_neighbours_are_real_edges():
    g = small_hetero()
    csr = HeteroCSR.from_graph(g)
    seeds = jnp.array([0, 3, 6, 0], jnp.int32)
    mask = jnp.array([True, True, True, False])
    s = sample_typed(csr, seeds, (2, 1), seed_type="paper", key=jax.random.key(0), mask=mask)
    w = g.edge_types.index(WRITES)
    assert s.nodes[(w,)].shape == (4, 2)
    assert not [p for p in s.nodes if p[:1] == (w,) and len(p) == 2]  # nothing into authors
    dense = {k: np.asarray(g.to_dense(k)) for k in g.edge_types}
    for path, ids in s.nodes.items():
        if not path:
            continue
        parent = np.asarray(s.nodes[path[:-1]])[..., None]
        m = np.asarray(s.masks[path])
        rel = dense[g.edge_types[path[-1]]]
        assert (rel[np.broadcast_to(parent, ids.shape)[m], np.asarray(ids)[m]] > 0).all()
        assert not m[3].any()  # the padded seed samples nothing
    # Paper 0 has three citing positions (capped at 2), paper 3 two, paper 6 none.
    c = g.edge_types.index(CITES)
    np.testing.assert_array_equal(np.asarray(s.masks[(c,)]).sum(1), [2, 2, 0, 0])
    assert not np.asarray(s.masks[(g.edge_types.index(EMPTY),)]).any()


def test_full_fanouts_equal_full_graph_rgcn_forward_and_gradient():
    g = small_hetero().add_reverse_relations()
    model = rgcn(g.num_nodes, g.edge_types, {"paper": 4}, 3, target="paper", hidden=5, num_bases=2)
    params = model.init(jax.random.key(0))
    x = {"paper": paper_features()}
    csr = HeteroCSR.from_graph(g)
    seeds = jnp.array([0, 1, 2, 3, 4, 5, 6, 2], jnp.int32)
    mask = jnp.array([True] * 7 + [False])
    sample = sample_typed(csr, seeds, (4, 4), seed_type="paper", key=jax.random.key(3), mask=mask)
    # Compiled, not run op by op: the same values, a fraction of the test's time.
    full = jax.jit(model.apply)(params, g, x)
    np.testing.assert_allclose(
        jax.jit(model.apply)(params, sample, x)[:7], full, rtol=1e-5, atol=1e-6
    )
    weights = jnp.asarray(np.random.default_rng(0).normal(size=(7, 3)), jnp.float32)
    grad_s = jax.jit(jax.grad(lambda p: jnp.sum(model.apply(p, sample, x)[:7] * weights)))(params)
    grad_f = jax.jit(jax.grad(lambda p: jnp.sum(model.apply(p, g, x) * weights)))(params)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), grad_s, grad_f
    )


def test_small_fanouts_sample_uniform_subsets():
    """Paper 0 has 3 cited-by positions (one duplicated neighbour); fanout 1 picks each
    position with probability 1/3, so neighbour 1 comes out 2/3 of the time."""
    g = small_hetero()
    csr = HeteroCSR.from_graph(g)
    c = g.edge_types.index(CITES)
    seeds = jnp.zeros(3000, jnp.int32)
    s = sample_typed(csr, seeds, (1,), seed_type="paper", key=jax.random.key(7))
    picks = np.asarray(s.nodes[(c,)])[:, 0]
    share = (picks == 1).mean()
    assert abs(share - 2 / 3) < 4 * np.sqrt(2 / 9 / 3000)
    assert set(np.unique(picks)) == {1, 2}


def test_per_relation_fanouts():
    g = small_hetero()
    table = check_typed_fanouts(
        [{"cites": 2, "writes": 1, "has_topic": 3, "hosts": 1}, 5], g.edge_types
    )
    assert table == ((2, 1, 3, 1), (5, 5, 5, 5))
    csr = HeteroCSR.from_graph(g)
    s = sample_typed(csr, jnp.array([0, 1]), table, seed_type="paper", key=jax.random.key(0))
    assert s.nodes[(g.edge_types.index(WRITES),)].shape == (2, 1)
    assert s.nodes[(0, 0)].shape == (2, 2, 5)
    with pytest.raises(ValueError, match="gives no fanout"):
        check_typed_fanouts([{"cites": 2}], g.edge_types)
    with pytest.raises(ValueError, match="not a unique relation"):
        check_typed_fanouts([{"nope": 2}], g.edge_types)


def test_bad_inputs_fail_before_tracing():
    csr = HeteroCSR.from_graph(small_hetero())
    with pytest.raises(ValueError, match="unknown seed type 'author s'"):
        sample_typed(csr, jnp.array([0]), (2,), seed_type="author s", key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"seeds\[1\] = 7 is out of range"):
        sample_typed(csr, np.array([0, 7]), (2,), seed_type="paper", key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"fanouts\[0\] must be >= 1"):
        sample_typed(csr, np.array([0]), (0,), seed_type="paper", key=jax.random.key(0))


def test_a_relation_given_twice_in_one_hop_is_refused():
    """By its triple and its name: the last one was kept silently."""
    g = small_hetero()
    fanouts = [
        {("author", "writes", "paper"): 2, "writes": 5, "cites": 1, "has_topic": 1, "hosts": 1}
    ]
    with pytest.raises(
        ValueError, match=r"fanouts\[0\] gives relation .*writes.* twice \(2 and 5\)"
    ):
        check_typed_fanouts(fanouts, g.edge_types)

"""The random edge split and the device negative samplers (sparsegcn/sampling/links.py):
set-based oracles for the split and membership, binomial and chi-square tests for
the samplers' exclusion rule and uniformity."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import scipy.stats

import sparsegcn as sg
from sparsegcn.sampling import links as links_module
from sparsegcn.sampling.links import (
    BITMAP_MAX_NODES,
    corrupt_targets,
    edge_index,
    is_edge,
    random_link_split,
    spare_pool_size,
    uniform_negatives,
)


def random_undirected(n: int, p: float, seed: int) -> sg.Graph:
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((n, n)) < p, 1)
    s, r = np.nonzero(upper | upper.T)
    return sg.Graph(s, r, None, n)


def pair_set(pairs) -> set:
    return {(int(a), int(b)) for a, b in np.asarray(pairs)}


def test_split_holds_out_both_directions_and_draws_true_negatives():
    n = 60
    base = random_undirected(n, 0.15, 0)
    # A duplicate edge and a self-loop in the input: dropped, not counted.
    s0, r0 = np.asarray(base.senders), np.asarray(base.receivers)
    s, r = np.concatenate([s0, [3, s0[0]]]), np.concatenate([r0, [3, r0[0]]])
    graph = sg.Graph(s, r, None, n)
    edges = pair_set(np.stack([s, r], 1)) - {(3, 3)}
    undirected = {(a, b) for a, b in edges if a < b}
    out = random_link_split(graph, seed=1)
    assert out.undirected
    m = len(undirected)
    sizes = {k: len(v) for k, v in out.split.items()}
    assert sizes["valid"] == int(0.05 * m) and sizes["test"] == int(0.10 * m)
    assert sizes["train"] == m - sizes["valid"] - sizes["test"]
    assert sizes["valid_neg"] == sizes["valid"] and sizes["test_neg"] == sizes["test"]
    pos = {k: pair_set(out.split[k]) for k in ("train", "valid", "test")}
    assert pos["train"] | pos["valid"] | pos["test"] == undirected  # each pair once, u < v
    assert sum(len(p) for p in pos.values()) == m
    message = pair_set(np.stack([out.graph.senders, out.graph.receivers], 1))
    # The message graph is the train pairs in both directions, nothing held out.
    assert message == pos["train"] | {(b, a) for a, b in pos["train"]}
    for held in ("valid", "test"):
        for a, b in pos[held]:
            assert (a, b) not in message and (b, a) not in message
    negatives = np.concatenate([out.split["valid_neg"], out.split["test_neg"]])
    neg = pair_set(negatives)
    assert len(neg) == len(negatives)  # none repeated, valid and test disjoint
    assert all(a < b for a, b in neg) and not neg & edges and not {(b, a) for a, b in neg} & edges
    again = random_link_split(graph, seed=1)
    for key in out.split:
        np.testing.assert_array_equal(out.split[key], again.split[key])
    other = random_link_split(graph, seed=2)
    assert pair_set(other.split["test"]) != pos["test"]


def test_split_of_a_directed_graph_keeps_directions():
    s, r = np.array([0, 1, 2, 3, 4, 0, 2, 5]), np.array([1, 2, 3, 4, 5, 2, 0, 1])
    out = random_link_split(sg.Graph(s, r, None, 6), val=0.2, test=0.2, seed=0)
    assert not out.undirected
    pos = set().union(*(pair_set(out.split[k]) for k in ("train", "valid", "test")))
    assert pos == pair_set(np.stack([s, r], 1))
    assert pair_set(np.stack([out.graph.senders, out.graph.receivers], 1)) == pair_set(
        out.split["train"]
    )


def test_split_refuses_bad_fractions_and_tiny_graphs():
    graph = random_undirected(10, 0.5, 0)
    with pytest.raises(ValueError, match="val must be a fraction in"):
        random_link_split(graph, val=1.5)
    with pytest.raises(ValueError, match="val \\+ test must be below 1"):
        random_link_split(graph, val=0.5, test=0.5)
    with pytest.raises(ValueError, match=r"at least 20 edges .* got 1"):
        random_link_split(sg.Graph(np.array([0, 1]), np.array([1, 0]), None, 3))
    # Before: 3 pairs split into 3 train, 0 validation and 0 test, and AUC was NaN.
    path = np.arange(20)
    chain = sg.Graph(path[:-1], path[1:], None, 20)  # 19 directed edges
    with pytest.raises(ValueError, match=r"at least 20 edges \(edges, .*got 19"):
        random_link_split(chain)
    one_more = sg.Graph(np.arange(20), (np.arange(20) + 1) % 20, None, 20)
    split = random_link_split(one_more)
    assert [split.split[k].shape[0] for k in ("train", "valid", "test")] == [17, 1, 2]
    assert random_link_split(chain, val=0.0, test=0.25).split["test"].shape[0] == 4
    with pytest.raises(ValueError, match="at least 34 edges"):  # floor(0.03 * 33) = 0
        random_link_split(one_more, val=0.03)


@pytest.mark.parametrize("lookup", ["bitmap", "binary search"])
def test_is_edge_equals_set_membership(lookup):
    # 33 nodes: 1,089 bits, so the map's last word is partly used.
    graph = random_undirected(33, 0.15, 3)
    pairs = np.stack([graph.senders, graph.receivers], 1)
    index = edge_index(pairs, 33, symmetric=False)
    assert index.bitmap is not None and index.bitmap.shape == (35,)
    if lookup == "binary search":
        index = index._replace(bitmap=None)
    u, v = np.meshgrid(np.arange(33), np.arange(33), indexing="ij")
    got = np.asarray(jax.jit(is_edge)(index, u.ravel(), v.ravel()))
    edges = pair_set(pairs)
    want = np.array([(a, b) in edges for a, b in zip(u.ravel(), v.ravel(), strict=True)])
    np.testing.assert_array_equal(got, want)
    empty = edge_index(np.zeros((0, 2), np.int64), 4)
    assert not np.asarray(is_edge(empty, np.arange(4), np.arange(4))).any()


def test_edge_index_keeps_the_bitmap_to_small_graphs():
    pairs = np.array([[0, 1]])
    assert edge_index(pairs, BITMAP_MAX_NODES).bitmap.shape == (BITMAP_MAX_NODES**2 // 32,)
    assert edge_index(pairs, BITMAP_MAX_NODES + 1).bitmap is None


@pytest.mark.parametrize("rounds", [0, 1, 2])
def test_uniform_negatives_residual_rate_is_the_rejected_fraction_to_the_rounds_plus_one(rounds):
    n, count = 24, 40_000
    graph = random_undirected(n, 0.4, 1)
    pairs = np.stack([graph.senders, graph.receivers], 1)
    index = edge_index(pairs, n)
    d = (len(pairs) + n) / n**2  # edges (both directions) and self-loops among all pairs
    sample = np.asarray(uniform_negatives(jax.random.key(7), count, n, index, rounds=rounds))
    edges = pair_set(pairs)
    bad = np.array([(a, b) in edges or a == b for a, b in sample])
    expected = d ** (rounds + 1)
    sigma = np.sqrt(expected * (1 - expected) / count)
    assert abs(bad.mean() - expected) < 5 * sigma, (bad.mean(), expected)


def assert_uniform_over_the_non_edges(sample: np.ndarray, pairs: np.ndarray, n: int) -> None:
    """Every drawn pair is a non-edge, and a chi-square test finds them uniform."""
    edges = pair_set(pairs)
    non_edges = [(a, b) for a in range(n) for b in range(n) if a != b and (a, b) not in edges]
    counts = {p: 0 for p in non_edges}
    for a, b in sample:
        counts[(int(a), int(b))] += 1  # a KeyError would be an edge or a self-loop drawn
    assert sum(counts.values()) == len(sample)
    assert scipy.stats.chisquare(list(counts.values())).pvalue > 1e-3


def test_uniform_negatives_are_uniform_over_the_non_edges():
    n, count = 12, 60_000
    graph = random_undirected(n, 0.3, 2)
    pairs = np.stack([graph.senders, graph.receivers], 1)
    sample = np.asarray(
        uniform_negatives(jax.random.key(3), count, n, edge_index(pairs, n), rounds=12)
    )
    assert_uniform_over_the_non_edges(sample, pairs, n)


def sparse_graph_pairs(n: int, undirected_edges: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    upper = {
        tuple(sorted(p)) for p in rng.integers(0, n, (4 * undirected_edges, 2)) if p[0] != p[1]
    }
    chosen = np.array(sorted(upper))[:undirected_edges]
    return np.concatenate([chosen, chosen[:, ::-1]])


def test_uniform_negatives_on_a_sparse_graph_refill_from_the_spare_pool_exactly_and_uniformly():
    # d = (40 + 40) / 1600 = 0.05: the spare-pool path (about 5,000 slots refilled).
    n, count = 40, 100_000
    pairs = sparse_graph_pairs(n, 20, 5)
    index = edge_index(pairs, n)
    assert spare_pool_size(count, n, index.indices.shape[0]) is not None
    sample = np.asarray(jax.jit(lambda k: uniform_negatives(k, count, n, index))(jax.random.key(4)))
    assert_uniform_over_the_non_edges(sample, pairs, n)


def test_a_spare_pool_that_runs_short_leaves_the_remaining_slots_their_first_draw(monkeypatch):
    n, count = 40, 20_000
    pairs = sparse_graph_pairs(n, 20, 6)
    index = edge_index(pairs, n)
    d = (len(pairs) + n) / n**2
    monkeypatch.setattr(links_module, "spare_pool_size", lambda *args: 10)
    sample = np.asarray(uniform_negatives(jax.random.key(8), count, n, index))
    edges = pair_set(pairs)
    bad = sum((int(a), int(b)) in edges or a == b for a, b in sample)
    # About count * d = 1,000 rejected first draws, at most 10 of them refilled.
    expected = count * d - 10 * (1 - d)
    assert abs(bad - expected) < 5 * np.sqrt(count * d), (bad, expected)
    assert spare_pool_size(4488, 2708, 10556) < 100  # Cora's train graph: ~8 rejections a step


def test_corrupt_targets_keep_sources_and_exclude_their_edges():
    n = 30
    graph = random_undirected(n, 0.3, 4)
    pairs = np.stack([graph.senders, graph.receivers], 1)
    index = edge_index(pairs, n)
    sources = np.arange(n, dtype=np.int32)
    edges = pair_set(pairs)
    exact = np.asarray(corrupt_targets(jax.random.key(0), sources, 200, n, index, rounds=20))
    assert exact.shape == (n, 200)
    assert not any((s, int(t)) in edges or s == t for s in range(n) for t in exact[s])
    raw = np.asarray(corrupt_targets(jax.random.key(1), sources, 2000, n, index, rounds=0))
    degree = np.bincount(pairs[:, 0], minlength=n)
    rate = np.array([np.mean([(s, int(t)) in edges or s == t for t in raw[s]]) for s in range(n)])
    expected = (degree + 1) / n  # without redraws: the chance of hitting a neighbour or itself
    assert np.abs(rate - expected).max() < 5 * np.sqrt(0.25 / 2000)


def test_materialized_candidates_are_the_same_draws_alone_and_under_vmap():
    """``materialize`` only changes where XLA computes the candidates."""
    graph = random_undirected(40, 0.1, 5)
    index = edge_index(np.stack([graph.senders, graph.receivers], 1), 40, symmetric=False)
    keys = jax.random.split(jax.random.key(3), 3)
    sources = np.arange(40, dtype=np.int32)
    for sample in (
        lambda k, m: uniform_negatives(k, 50, 40, index, materialize=m),
        lambda k, m: corrupt_targets(k, sources, 2, 40, index, materialize=m),
    ):
        plain = jax.jit(jax.vmap(lambda k, s=sample: s(k, False)))(keys)
        fenced = jax.jit(jax.vmap(lambda k, s=sample: s(k, True)))(keys)
        np.testing.assert_array_equal(fenced, plain)
        np.testing.assert_array_equal(jax.jit(lambda k, s=sample: s(k, True))(keys[1]), plain[1])


def test_edge_index_refuses_pairs_outside_the_nodes():
    # Before: the key u * N + v made (0, 6) of a 5-node graph the edge (1, 1).
    with pytest.raises(ValueError, match=r"pairs\[0, 1\] = 6 is not a node id in \[0, 5\)"):
        edge_index(np.array([[0, 1], [0, 6]])[1:], 5, symmetric=False)
    with pytest.raises(ValueError, match=r"pairs\[1, 0\] = -1 is not a node id in \[0, 5\)"):
        edge_index(np.array([[0, 1], [-1, 2]]), 5)
    with pytest.raises(TypeError, match=r"num_nodes must be a static Python int, got 5\.0"):
        edge_index(np.array([[0, 1]]), 5.0)
    index = edge_index(np.array([[0, 4]]), 5, symmetric=False)
    got = np.asarray(is_edge(index, np.array([0, 4, 1]), np.array([4, 0, 1])))
    np.testing.assert_array_equal(got, [True, False, False])


def test_negative_samplers_refuse_bad_counts_and_keys_naming_them():
    index = edge_index(np.array([[0, 1], [1, 2]]), 5)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"^count must be >= 0, got -1$"):
        uniform_negatives(key, -1, 5, index)
    with pytest.raises(TypeError, match=r"^count must be a static Python int, got 2.0$"):
        uniform_negatives(key, 2.0, 5, index)
    with pytest.raises(ValueError, match=r"^rounds must be >= 0, got -1$"):
        uniform_negatives(key, 2, 5, index, rounds=-1)
    with pytest.raises(ValueError, match=r"^per_source must be >= 0, got -2$"):
        corrupt_targets(key, np.array([0, 1]), -2, 5, index)
    # The index fixes N: its bitmap holds N² bits, and a larger N would read past them.
    with pytest.raises(ValueError, match=r"num_nodes=50 .* index of 5 nodes"):
        uniform_negatives(key, 4, 50, index)
    with pytest.raises(ValueError, match=r"sources\[1\] = 9 is out of range"):
        corrupt_targets(key, np.array([0, 9]), 2, 5, index)
    for bad, error, what in [
        (0, TypeError, r"got 0 \(int\)"),
        (None, TypeError, r"got None \(NoneType\)"),
        (np.zeros(2, np.float32), TypeError, r"float32\[2\]"),
        (np.zeros(2, np.int32), TypeError, r"int32\[2\]"),
        (np.zeros(3, np.uint32), ValueError, r"uint32\[3\]"),
        (jax.random.split(key, 3), ValueError, r"a batch of 3 keys"),
    ]:
        for sample in (
            lambda k: uniform_negatives(k, 2, 5, index),
            lambda k: corrupt_targets(k, np.array([0, 1]), 2, 5, index),
        ):
            with pytest.raises(error, match=rf"^key must be a PRNG key .*{what}"):
                sample(bad)
    # Typed and legacy keys, concrete or traced, are accepted and draw the same pairs.
    typed = np.asarray(uniform_negatives(key, 3, 5, index))
    legacy = np.asarray(uniform_negatives(jax.random.PRNGKey(0), 3, 5, index))
    np.testing.assert_array_equal(legacy, typed)
    np.testing.assert_array_equal(jax.jit(lambda k: uniform_negatives(k, 3, 5, index))(key), typed)
    assert uniform_negatives(key, 0, 5, index).shape == (0, 2)


def test_split_refuses_bad_seeds_and_flags_naming_them():
    graph = random_undirected(30, 0.3, 0)
    with pytest.raises(
        ValueError, match=r"^random_link_split: seed must be >= 0 and <= 4294967295, got -1$"
    ):
        random_link_split(graph, seed=-1)
    with pytest.raises(TypeError, match=r"^random_link_split: seed must be an integer .* got 1.5"):
        random_link_split(graph, seed=1.5)
    with pytest.raises(TypeError, match=r"^random_link_split: seed must be an integer .* got 'a'"):
        random_link_split(graph, seed="a")
    with pytest.raises(TypeError, match=r"^undirected must be True or False, got 'yes'"):
        random_link_split(graph, undirected="yes")
    same = random_link_split(graph, seed=np.int64(3)).split
    for name, pairs in random_link_split(graph, seed=3).split.items():
        np.testing.assert_array_equal(same[name], pairs)


def test_a_forced_undirected_split_keeps_edges_stored_in_one_direction():
    # Before: with undirected=True only the stored pairs with u < v were kept, so an edge
    # stored as (v, u) was dropped (492 of 900 here), and its pair could be drawn as a
    # negative (25 of 60).
    rng = np.random.default_rng(0)
    pairs = set()
    while len(pairs) < 300:
        a, b = (int(i) for i in rng.integers(0, 40, 2))
        if a != b:
            pairs.add((min(a, b), max(a, b)))
    stored = np.array(sorted(pairs))
    flip = rng.random(len(stored)) < 0.5
    stored[flip] = stored[flip][:, ::-1]
    graph = sg.Graph(stored[:, 0].astype(np.int32), stored[:, 1].astype(np.int32), None, 40)
    split = random_link_split(graph, seed=0, undirected=True)
    positives = np.concatenate([split.split[k] for k in ("train", "valid", "test")])
    assert {tuple(p) for p in positives.tolist()} == pairs
    negatives = np.concatenate([split.split["valid_neg"], split.split["test_neg"]])
    assert not {(min(u, v), max(u, v)) for u, v in negatives.tolist()} & pairs
    assert split.graph.num_edges == 2 * split.split["train"].shape[0]


def test_a_nearly_undirected_graph_is_refused_when_detecting():
    # Before: one edge without its reverse made the whole graph "directed", split
    # edge by edge: 161 of 200 test edges had their reverse in training.
    g = random_undirected(200, 0.05, seed=3)
    s, r = np.asarray(g.senders), np.asarray(g.receivers)
    lonely = next(
        (u, v)
        for u in range(200)
        for v in range(200)
        if u != v and not (np.any((s == u) & (r == v)) or np.any((s == v) & (r == u)))
    )
    g = sg.Graph(np.r_[s, lonely[0]], np.r_[r, lonely[1]], None, 200)
    edges = s.shape[0] + 1
    with pytest.raises(ValueError, match=rf"{edges - 1:,} of the graph's {edges:,} edges have"):
        random_link_split(g, seed=0)
    forced = random_link_split(g, seed=0, undirected=True)
    test = {tuple(p) for p in forced.split["test"].tolist()}
    senders, receivers = np.asarray(forced.graph.senders), np.asarray(forced.graph.receivers)
    message = set(zip(senders.tolist(), receivers.tolist(), strict=True))
    assert forced.undirected and not any((u, v) in message or (v, u) in message for u, v in test)
    # A directed graph with a few reciprocal edges is still split edge by edge.
    d = sg.Graph(np.r_[np.arange(50), 1], np.r_[(np.arange(50) + 1) % 50, 0], None, 50)
    assert not random_link_split(d, seed=0).undirected


def test_negatives_are_refused_where_none_exist():
    # Before: a complete graph's "negatives" were true edges, and a source linked to
    # every other node got true edges and itself, with no warning.
    n = 6
    complete = edge_index(np.array([(u, v) for u in range(n) for v in range(u + 1, n)]), n)
    with pytest.raises(ValueError, match="every pair of the 6 nodes is an edge"):
        uniform_negatives(jax.random.key(0), 4, n, complete)
    star = edge_index(np.array([(0, v) for v in range(1, n)]), n)
    with pytest.raises(ValueError, match="source 0 has an edge to every other of the 6 nodes"):
        corrupt_targets(jax.random.key(0), np.array([2, 0]), 3, n, star)
    assert corrupt_targets(jax.random.key(0), np.array([2, 3]), 5, n, star).shape == (2, 5)
    assert uniform_negatives(jax.random.key(0), 0, n, complete).shape == (0, 2)  # none asked

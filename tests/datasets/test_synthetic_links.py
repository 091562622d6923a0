"""synthetic:collab and synthetic:citation2 at small scales: protocol, exclusions, learnability."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from sparsegcn.datasets.links import describe_links, link_stats, load_links
from sparsegcn.datasets.synthetic_links import (
    COLLAB_YEARS,
    LINK_PRESETS,
    cache_dir,
    community_labels,
    generate_links,
)
from sparsegcn.files import memory_map

COLLAB = LINK_PRESETS["collab"].scaled(0.01)  # 2,359 nodes, 12,855 edges
CITATION = LINK_PRESETS["citation2"].scaled(0.002)  # 5,856 nodes, 61,122 edges


@pytest.fixture(scope="module")
def collab():
    return generate_links(COLLAB, seed=3)


@pytest.fixture(scope="module")
def citation():
    return generate_links(CITATION, seed=3)


def _keys(pairs, n):
    pairs = np.asarray(pairs, np.int64)
    return pairs[:, 0] * n + pairs[:, 1]


def _check_message_graph(ds):
    """The graph is exactly the symmetric, deduplicated adjacency of the train pairs
    (scipy as the reference), so both directions are always together."""
    n, train = ds.num_nodes, ds.split["train"]
    a = sp.coo_array((np.ones(train.shape[0]), (train[:, 1], train[:, 0])), shape=(n, n))
    reference = ((a + a.T) > 0).astype(np.int8).tocsr()
    g = ds.graph
    got = sp.csr_array((np.ones(g.num_edges, np.int8), (g.receivers, g.senders)), shape=(n, n))
    assert got.nnz == g.num_edges  # no repeated edge
    assert (got != reference).nnz == 0
    assert (got != got.T).nnz == 0
    return set(_keys(np.stack([g.senders, g.receivers], 1), n).tolist())


def test_collab_shapes_and_time_split(collab):
    ds, spec = collab, COLLAB
    n = spec.num_nodes
    assert (ds.num_nodes, ds.num_edges, ds.metric, ds.negatives) == (n, 12_855, "hits@50", "pairs")
    assert ds.features.shape == (n, 128) and ds.features.dtype == np.float32
    sizes = ds.split_sizes
    assert (sizes["valid"], sizes["test"]) == (spec.num_valid, spec.num_test) == (601, 463)
    assert sizes["train"] + sizes["valid"] + sizes["test"] == spec.num_edges
    assert sizes["valid_neg"] == sizes["test_neg"] == 1_000
    assert ds.graph.num_edges == 2 * sizes["train"]
    first, last, _, _ = COLLAB_YEARS
    assert ds.edge_year.min() >= first and ds.edge_year.max() <= last
    assert ds.edge_weight.min() >= 1
    # The training years follow P(y) ∝ exp(0.08 (y - 1963)) (chi-square goodness of fit).
    years = np.arange(first, last + 1)
    expected = np.exp(0.08 * (years - first))
    expected *= sizes["train"] / expected.sum()
    counts = np.bincount(ds.edge_year - first, minlength=years.shape[0])
    assert stats.chisquare(counts, expected).pvalue > 1e-4
    assert (
        stats.chisquare(counts, np.full(years.shape, sizes["train"] / years.shape[0])).pvalue
        < 1e-10
    )


def test_collab_held_out_edges_are_not_in_the_graph(collab):
    ds, n = collab, collab.num_nodes
    graph_keys = _check_message_graph(ds)
    everything = np.concatenate([ds.split[k] for k in ("train", "valid", "test")])
    canonical = np.minimum(everything[:, 0], everything[:, 1]) * n
    canonical += np.maximum(everything[:, 0], everything[:, 1])
    assert np.unique(canonical).shape[0] == ds.num_edges  # each pair in one split only
    for key in ("valid", "test"):
        pairs = ds.split[key]
        both = np.concatenate([_keys(pairs, n), _keys(pairs[:, ::-1], n)])
        assert not graph_keys.intersection(both.tolist()), key
    # Negatives: two distinct nodes, never an edge of any split.
    for key in ("valid_neg", "test_neg"):
        neg = ds.split[key]
        assert (neg[:, 0] != neg[:, 1]).all()
        neg_canonical = np.minimum(neg[:, 0], neg[:, 1]) * n + np.maximum(neg[:, 0], neg[:, 1])
        assert not np.isin(neg_canonical, canonical).any()
    # Pair order is random: about half the positives list the larger id first.
    assert 0.4 < np.mean(ds.split["train"][:, 0] > ds.split["train"][:, 1]) < 0.6


def test_citation2_protocol(citation):
    ds, spec = citation, CITATION
    n = spec.num_nodes
    assert (ds.metric, ds.directed, ds.negatives) == ("mrr", True, "targets")
    assert ds.num_edges == spec.num_edges
    s = spec.num_valid
    assert ds.split["valid"].shape == ds.split["test"].shape == (s, 2)
    assert ds.split["valid_neg"].shape == ds.split["test_neg"].shape == (s, 1_000)
    # One source set for both splits, all papers of the last year, two different references.
    np.testing.assert_array_equal(ds.split["valid"][:, 0], ds.split["test"][:, 0])
    assert np.unique(ds.split["valid"][:, 0]).shape[0] == s
    assert (ds.node_year[ds.split["valid"][:, 0]] == 2019).all()
    assert (ds.split["valid"][:, 1] != ds.split["test"][:, 1]).all()
    # Citations point from the newer paper to the older one (or within a year).
    everything = np.concatenate([ds.split[k] for k in ("train", "valid", "test")])
    assert (ds.node_year[everything[:, 0]] >= ds.node_year[everything[:, 1]]).all()
    directed = _keys(everything, n)
    assert np.unique(directed).shape[0] == ds.num_edges
    # Each source keeps at least one reference for training.
    assert np.isin(ds.split["valid"][:, 0], ds.split["train"][:, 0]).all()
    graph_keys = _check_message_graph(ds)
    for key in ("valid", "test"):
        pairs = ds.split[key]
        both = np.concatenate([_keys(pairs, n), _keys(pairs[:, ::-1], n)])
        assert not graph_keys.intersection(both.tolist()), key
    # Negatives: never the source, never a paper it cites (in any split).
    for key in ("valid_neg", "test_neg"):
        src = ds.split["valid"][:, :1]
        neg = ds.split[key]
        assert (neg != src).all()
        assert not np.isin(src * n + neg, directed).any()


@pytest.mark.parametrize("preset", ["collab", "citation2"])
def test_links_follow_communities(collab, citation, preset):
    """Positives join two nodes of one community far more often than uniform pairs,
    and their features are more alike: the links are learnable."""
    ds, spec = (collab, COLLAB) if preset == "collab" else (citation, CITATION)
    community = community_labels(spec, seed=3)
    rng = np.random.default_rng(0)
    for key in ("train", "test"):
        pos = ds.split[key]
        uniform = rng.integers(0, ds.num_nodes, size=pos.shape)
        same_pos = community[pos[:, 0]] == community[pos[:, 1]]
        same_uni = community[uniform[:, 0]] == community[uniform[:, 1]]
        table = [[same_pos.sum(), (~same_pos).sum()], [same_uni.sum(), (~same_uni).sum()]]
        _, p = stats.fisher_exact(table, alternative="greater")
        assert p < 1e-10, (key, table)
        assert same_pos.mean() > 0.6 > 0.1 > same_uni.mean()
    x = np.asarray(ds.features)
    pos = ds.split["train"]
    neg = rng.integers(0, ds.num_nodes, size=(20_000, 2))
    pos_dot = np.einsum("ij,ij->i", x[pos[:, 0]], x[pos[:, 1]])
    neg_dot = np.einsum("ij,ij->i", x[neg[:, 0]], x[neg[:, 1]])
    assert stats.mannwhitneyu(pos_dot, neg_dot, alternative="greater").pvalue < 1e-6


def test_deterministic_per_seed():
    spec = LINK_PRESETS["citation2"].scaled(0.001)
    first, again, other = (generate_links(spec, seed=s) for s in (5, 5, 6))
    for key in first.split:
        np.testing.assert_array_equal(first.split[key], again.split[key])
    np.testing.assert_array_equal(first.features, again.features)
    np.testing.assert_array_equal(first.graph.senders, again.graph.senders)
    np.testing.assert_array_equal(first.node_year, again.node_year)
    assert not np.array_equal(first.split["valid"], other.split["valid"])


def test_cache_round_trip_and_describe(tmp_path):
    ds = load_links("synthetic:collab", tmp_path, scale=0.005, seed=1)
    folder = cache_dir(tmp_path, "collab", 0.005, 1)
    assert (folder / "manifest.json").exists()
    cached = load_links("synthetic:collab", tmp_path, scale=0.005, seed=1)
    assert memory_map(cached.split["train"]) is not None
    assert memory_map(cached.features) is not None
    for key in ds.split:
        np.testing.assert_array_equal(ds.split[key], cached.split[key])
    np.testing.assert_array_equal(ds.edge_weight, cached.edge_weight)
    np.testing.assert_array_equal(ds.graph.receivers, cached.graph.receivers)
    # describe_links computes from the spec, without generating: the same numbers.
    described, text = describe_links("synthetic:collab", tmp_path, scale=0.005, seed=1)
    measured = link_stats(ds)
    assert {k: v for k, v in described.items() if k != "note"} == measured
    assert "hits@50" in text and f"{ds.num_nodes:,}" in text
    (folder / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match=r"manifest.*corrupt.*delete"):
        load_links("synthetic:collab", tmp_path, scale=0.005, seed=1)


def test_describe_citation2_matches_generation(citation):
    described, text = describe_links("synthetic:citation2", scale=0.002)
    assert {k: v for k, v in described.items() if k != "note"} == link_stats(citation)
    assert "1,000 targets" in text


def test_too_small_a_scale_is_refused():
    with pytest.raises(ValueError, match="a split is empty; use a larger scale"):
        LINK_PRESETS["citation2"].scaled(1e-6)
    with pytest.raises(ValueError, match=r"scale must lie in \(0, 1\]"):
        load_links("synthetic:collab", scale=2.0)


@pytest.mark.slow
def test_full_size_collab_has_the_published_counts():
    ds = generate_links(LINK_PRESETS["collab"], seed=0)
    assert (ds.num_nodes, ds.num_edges, ds.num_features) == (235_868, 1_285_465, 128)
    sizes = ds.split_sizes
    assert (sizes["train"], sizes["valid"], sizes["test"]) == (1_179_052, 60_084, 46_329)
    assert sizes["valid_neg"] == sizes["test_neg"] == 100_000
    community = community_labels(LINK_PRESETS["collab"], seed=0)
    train = ds.split["train"]
    assert np.mean(community[train[:, 0]] == community[train[:, 1]]) == pytest.approx(0.8, abs=0.01)

"""Node reordering: a true permutation, the same product up to it, and the
locality it promises (RCM narrows the band, degree order sorts degrees,
community and partition orders keep planted communities in blocks)."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from graphs import random_graph
from helpers import needs_order, order_method

import sparsegcn as sg
from sparsegcn.backends import pack
from sparsegcn.transforms import Reordering, reorder

METIS, NETWORKIT = order_method("metis"), order_method("networkit")
METHODS = ["rcm", "degree", "community", METIS, NETWORKIT]


def bandwidth(g: sg.Graph) -> int:
    return int(np.max(np.abs(np.asarray(g.senders, np.int64) - np.asarray(g.receivers))))


def scrambled_path(n: int, seed: int = 0) -> tuple[sg.Graph, np.ndarray]:
    """An undirected path whose node ids are shuffled: bandwidth ~n, RCM's best is 1."""
    labels = np.random.default_rng(seed).permutation(n)
    a, b = labels[:-1], labels[1:]
    return sg.Graph(np.r_[a, b], np.r_[b, a], None, n), labels


@pytest.mark.parametrize("method", METHODS)
def test_reordering_is_a_permutation_that_round_trips(method):
    g = random_graph(50, 200, seed=1)
    r = g.reorder(method)
    assert isinstance(r, Reordering)
    np.testing.assert_array_equal(np.sort(r.permutation), np.arange(50))
    np.testing.assert_array_equal(r.inverse[r.permutation], np.arange(50))
    x = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    np.testing.assert_array_equal(r.restore(r.permute(x)), x)
    assert r.graph.edges_sorted and r.graph.num_edges == g.num_edges


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("packed", [False, True])
def test_propagation_in_the_new_order_restores_to_the_original(method, packed):
    g = random_graph(60, 240, seed=2)
    r = reorder(g, method=method)
    graph = pack(r.graph) if packed else r.graph
    x = jax.random.normal(jax.random.key(0), (60, 3), jnp.float32)
    expected = np.asarray(g.to_dense(), np.float64) @ np.asarray(x, np.float64)
    out = r.restore(sg.propagate(graph, r.permute(x)))
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)
    # The relabelled matrix is P A P^T, entry by entry (duplicates summed).
    a = g.to_scipy().toarray()
    np.testing.assert_allclose(
        r.graph.to_scipy().toarray(), a[np.ix_(r.permutation, r.permutation)], rtol=1e-6
    )


def test_rcm_recovers_a_scrambled_path():
    g, _ = scrambled_path(200)
    assert bandwidth(g) > 50
    assert bandwidth(g.reorder("rcm").graph) == 1


def test_rcm_matches_scipy():
    g = sg.to_undirected(random_graph(80, 160, seed=3, weighted=False))
    expected = sp.csgraph.reverse_cuthill_mckee(g.to_scipy().tocsr(), symmetric_mode=True)
    np.testing.assert_array_equal(g.reorder("rcm").permutation, expected)


def test_degree_order_puts_high_in_degree_first():
    g = random_graph(70, 300, seed=4)
    r = g.reorder("degree")
    counts = np.bincount(np.asarray(r.graph.receivers), minlength=70)
    assert np.all(np.diff(counts) <= 0)
    original = np.bincount(np.asarray(g.receivers), minlength=70)
    np.testing.assert_array_equal(counts, original[r.permutation])


def test_weights_and_duplicates_travel_with_their_edges():
    g = sg.Graph(np.array([0, 0, 2, 1]), np.array([1, 1, 0, 2]), np.array([1.0, 2.0, 5.0, 7.0]), 3)
    r = g.reorder("degree")
    a = np.zeros((3, 3))
    a[1, 0], a[0, 2], a[2, 1] = 3.0, 5.0, 7.0
    np.testing.assert_allclose(
        r.graph.to_scipy().toarray(), a[np.ix_(r.permutation, r.permutation)]
    )


def planted_communities(k: int, size: int, seed: int = 0):
    """``k`` dense communities of ``size`` nodes (90% of edges inside), ids shuffled."""
    rng = np.random.default_rng(seed)
    n = k * size
    truth = rng.permutation(np.repeat(np.arange(k), size))
    members = [np.flatnonzero(truth == c) for c in range(k)]
    pairs = 6 * n
    inside = rng.random(pairs) < 0.9
    a = rng.integers(0, n, pairs)
    same = np.array([rng.choice(members[truth[i]]) for i in a[inside]])
    b = np.empty(pairs, np.int64)
    b[inside] = same
    b[~inside] = rng.integers(0, n, np.count_nonzero(~inside))
    keep = a != b
    a, b = a[keep], b[keep]
    return sg.Graph(np.r_[a, b], np.r_[b, a], None, n), truth


def test_community_order_recovers_planted_communities():
    g, truth = planted_communities(8, 150)
    r = g.reorder("community")
    # Read in the new order, the planted community changes only at block
    # boundaries: 7 changes for 8 communities, against ~1050 in the shuffled order.
    in_order = truth[r.permutation]
    assert np.count_nonzero(np.diff(in_order)) <= 10
    assert np.count_nonzero(np.diff(truth)) > 900
    # The order is label by label, hubs first within each found community.
    from sparsegcn.transforms import community_labels

    found = community_labels(np.asarray(g.senders), np.asarray(g.receivers), g.num_nodes)
    found, degrees = found[r.permutation], np.bincount(np.asarray(g.receivers))[r.permutation]
    assert np.all(np.diff(found) >= 0)
    same = np.diff(found) == 0
    assert np.all(np.diff(degrees)[same] <= 0)


def test_community_labels_are_deterministic_and_respect_components():
    from sparsegcn.transforms import community_labels

    # Two components: labels never cross between them.
    g, _ = planted_communities(4, 50, seed=3)
    s, r = np.asarray(g.senders), np.asarray(g.receivers)
    both = sg.Graph(np.r_[s, s + 200], np.r_[r, r + 200], None, 400)
    bs, br = np.asarray(both.senders), np.asarray(both.receivers)
    labels = community_labels(bs, br, 400)
    np.testing.assert_array_equal(labels, community_labels(bs, br, 400))
    assert set(labels[:200]).isdisjoint(labels[200:])
    with pytest.raises(ValueError, match="max_rounds must be an integer >= 1, got 0"):
        community_labels(bs, br, 400, max_rounds=0)
    with pytest.raises(ValueError, match=r"tolerance must be in \[0, 1\), got 1.5"):
        community_labels(bs, br, 400, tolerance=1.5)
    # Isolated nodes keep their own label.
    lonely = community_labels(np.array([0, 1]), np.array([1, 0]), 5)
    np.testing.assert_array_equal(lonely[2:], [2, 3, 4])
    assert lonely[0] == lonely[1]


def test_features_of_every_kind_can_be_permuted():
    g = random_graph(20, 40, seed=5)
    r = g.reorder("rcm")
    dense = np.arange(40.0).reshape(20, 2)
    sparse = sp.csr_array(dense)
    np.testing.assert_array_equal(r.permute(sparse).toarray(), r.permute(dense))
    np.testing.assert_array_equal(np.asarray(r.permute(jnp.asarray(dense))), r.permute(dense))


@pytest.mark.parametrize("method", METHODS)
def test_empty_and_edgeless_graphs(method):
    for n in (0, 5):
        g = sg.Graph(np.zeros(0, np.int32), np.zeros(0, np.int32), None, n)
        r = g.reorder(method)
        assert r.permutation.shape == (n,) and r.graph.num_edges == 0
        np.testing.assert_array_equal(np.sort(r.permutation), np.arange(n))


def test_unknown_method_is_refused():
    with pytest.raises(
        ValueError,
        match=r"reorder method must be one of \('rcm', 'degree', 'community', 'metis', "
        r"'networkit'\), got 'louvain'",
    ):
        random_graph(5, 5).reorder("louvain")


def fraction_in_blocks(g: sg.Graph, block: int) -> float:
    """The share of edges whose two ends lie in the same run of ``block`` consecutive ids."""
    s, r = np.asarray(g.senders) // block, np.asarray(g.receivers) // block
    return float(np.mean(s == r))


@pytest.mark.parametrize("method", ["community", METIS, NETWORKIT])
def test_community_and_partition_orders_keep_planted_communities_in_blocks(method):
    """4 planted communities of 1024 nodes (90% of edges inside), ids shuffled:
    blocks of 2048 consecutive ids (METIS's part size) hold about half of the
    edges in a random order, and nearly all in a community or partition order."""
    from sparsegcn.ops.ordering import METIS_PART_SIZE

    assert METIS_PART_SIZE == 2048  # two parts of two communities each
    g, _ = planted_communities(4, 1024, seed=5)  # ids already shuffled
    block = METIS_PART_SIZE
    assert fraction_in_blocks(g, block) < 0.6
    assert fraction_in_blocks(g.reorder(method).graph, block) > 0.85


@pytest.mark.parametrize("method", ["community", METIS, NETWORKIT])
def test_orders_are_deterministic_for_a_seed(method):
    g, _ = planted_communities(4, 100, seed=6)
    a, b = g.reorder(method, seed=3), g.reorder(method, seed=3)
    np.testing.assert_array_equal(a.permutation, b.permutation)


@needs_order("metis")
def test_metis_parts_recover_planted_communities():
    from sparsegcn.ops import metis_parts

    g, truth = planted_communities(8, 150, seed=7)
    parts = metis_parts(np.asarray(g.senders), np.asarray(g.receivers), g.num_nodes, part_size=150)
    assert parts.min() == 0 and parts.max() == 7
    # Each part is (nearly) one planted community: the pair (part, community)
    # takes about 8 values, against 64 for unrelated labels.
    _, counts = np.unique(parts * 8 + truth, return_counts=True)
    assert np.sum(counts[np.argsort(counts)[-8:]]) >= 0.95 * g.num_nodes
    with pytest.raises(ValueError, match="part_size must be an integer >= 1, got 0"):
        metis_parts(np.asarray(g.senders), np.asarray(g.receivers), g.num_nodes, part_size=0)


@needs_order("networkit")
def test_networkit_runs_on_several_threads_and_restores_the_thread_count():
    import networkit as nk

    from sparsegcn.ops import networkit_communities

    g, _ = planted_communities(4, 100, seed=8)
    before = nk.getMaxNumberOfThreads()
    labels = networkit_communities(
        np.asarray(g.senders), np.asarray(g.receivers), g.num_nodes, threads=2
    )
    assert nk.getMaxNumberOfThreads() == before
    assert labels.shape == (400,) and len(np.unique(labels)) < 20
    with pytest.raises(ValueError, match="threads must be an integer >= 1, got 0"):
        networkit_communities(np.asarray(g.senders), np.asarray(g.receivers), 400, threads=0)


@pytest.mark.parametrize(("method", "library"), [("metis", "pymetis"), ("networkit", "networkit")])
def test_a_missing_library_names_the_extra(method, library, monkeypatch):
    monkeypatch.setitem(sys.modules, library, None)  # import raises ImportError
    with pytest.raises(
        ImportError, match=rf"{method!r} needs {library}, .*pip install -e \"\.\[order\]\""
    ):
        random_graph(5, 5).reorder(method)


def test_reordered_dataset_moves_every_node_field_together():
    from sparsegcn.datasets import load
    from sparsegcn.experiment import reorder_dataset

    dataset = load("synthetic:tiny", scale=0.1)
    same, none = reorder_dataset(dataset, "none")
    assert same is dataset and none is None
    moved, r = reorder_dataset(dataset, "community")
    old = np.arange(dataset.num_nodes)
    new = r.inverse[old]  # where each node went
    features = dataset.features
    dense = features.toarray() if hasattr(features, "toarray") else np.asarray(features)
    moved_dense = moved.features.toarray() if hasattr(moved.features, "toarray") else moved.features
    np.testing.assert_array_equal(moved_dense[new], dense)
    np.testing.assert_array_equal(moved.labels[new], dataset.labels)
    for name, nodes in dataset.split.items():
        np.testing.assert_array_equal(np.sort(moved.split[name]), np.sort(new[nodes]))
    # Edge (s, r) of the dataset is edge (new[s], new[r]) of the relabelled graph.
    a = dataset.graph.to_scipy().toarray()
    b = moved.graph.to_scipy().toarray()
    np.testing.assert_array_equal(b[np.ix_(new, new)], a)
    assert moved.info["reorder"] == "community"

"""Node reordering: a true permutation, the same product up to it, and the
locality it promises (RCM narrows the band, degree order sorts degrees)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from graphs import random_graph

import sparsegcn as sg
from sparsegcn.backends import pack
from sparsegcn.transforms import Reordering, reorder


def bandwidth(g: sg.Graph) -> int:
    return int(np.max(np.abs(np.asarray(g.senders, np.int64) - np.asarray(g.receivers))))


def scrambled_path(n: int, seed: int = 0) -> tuple[sg.Graph, np.ndarray]:
    """An undirected path whose node ids are shuffled: bandwidth ~n, RCM's best is 1."""
    labels = np.random.default_rng(seed).permutation(n)
    a, b = labels[:-1], labels[1:]
    return sg.Graph(np.r_[a, b], np.r_[b, a], None, n), labels


@pytest.mark.parametrize("method", ["rcm", "degree"])
def test_reordering_is_a_permutation_that_round_trips(method):
    g = random_graph(50, 200, seed=1)
    r = g.reorder(method)
    assert isinstance(r, Reordering)
    np.testing.assert_array_equal(np.sort(r.permutation), np.arange(50))
    np.testing.assert_array_equal(r.inverse[r.permutation], np.arange(50))
    x = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    np.testing.assert_array_equal(r.restore(r.permute(x)), x)
    assert r.graph.edges_sorted and r.graph.num_edges == g.num_edges


@pytest.mark.parametrize("method", ["rcm", "degree"])
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


def test_features_of_every_kind_can_be_permuted():
    g = random_graph(20, 40, seed=5)
    r = g.reorder("rcm")
    dense = np.arange(40.0).reshape(20, 2)
    sparse = sp.csr_array(dense)
    np.testing.assert_array_equal(r.permute(sparse).toarray(), r.permute(dense))
    np.testing.assert_array_equal(np.asarray(r.permute(jnp.asarray(dense))), r.permute(dense))


def test_empty_and_edgeless_graphs():
    for n in (0, 5):
        g = sg.Graph(np.zeros(0, np.int32), np.zeros(0, np.int32), None, n)
        for method in ("rcm", "degree"):
            r = g.reorder(method)
            assert r.permutation.shape == (n,) and r.graph.num_edges == 0


def test_unknown_method_is_refused():
    with pytest.raises(
        ValueError, match=r"reorder method must be one of \('rcm', 'degree'\), got 'metis'"
    ):
        random_graph(5, 5).reorder("metis")

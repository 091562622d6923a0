"""Host-side transforms against hand-computed and scipy references."""

import numpy as np
import pytest
from graphs import random_graph
from helpers import order_method

import sparsegcn as sg
from sparsegcn import Graph, transforms
from sparsegcn.transforms import add_remaining_self_loops


def loop_nodes(g: Graph) -> set:
    return {int(s) for s, r in zip(g.senders, g.receivers, strict=True) if s == r}


def reference_gcn_matrix(g: Graph) -> np.ndarray:
    """Â from the definition, in float64, independent of the library's code.

    PyG's semantics: every node gets exactly one self-loop, whose weight is
    that of the node's last existing loop, or 1 if it has none.
    """
    a = np.zeros((g.num_nodes, g.num_nodes))
    w = np.ones(g.num_edges) if g.weights is None else g.weights
    diagonal = np.ones(g.num_nodes)
    for s, r, x in zip(g.senders, g.receivers, w, strict=True):
        if s == r:
            diagonal[s] = x  # a later loop overwrites an earlier one
        else:
            a[r, s] += x
    a[np.diag_indices(g.num_nodes)] = diagonal
    deg = a.sum(axis=1)
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    return inv[:, None] * a * inv[None, :]


def test_add_self_loops_never_doubles_an_existing_loop():
    g = Graph(np.array([0, 1, 1]), np.array([0, 2, 1]), np.array([3.0, 1.0, 5.0]), 4)
    out = sg.add_self_loops(g)
    loops = [
        (int(s), float(w))
        for s, r, w in zip(out.senders, out.receivers, out.weights, strict=True)
        if s == r
    ]
    assert sorted(loops) == [(0, 3.0), (1, 5.0), (2, 1.0), (3, 1.0)]
    assert out.num_edges == 5


def test_add_self_loops_keeps_unweighted_graphs_unweighted():
    out = sg.add_self_loops(Graph(np.array([0]), np.array([1]), None, 3))
    assert out.weights is None and loop_nodes(out) == {0, 1, 2}


def test_add_remaining_self_loops_leaves_exactly_one_loop_per_node():
    # Node 1 has two loops (weights 5 then 7), node 0 one, nodes 2 and 3 none.
    g = Graph(
        np.array([1, 0, 1, 2, 1, 2]),
        np.array([1, 0, 2, 1, 1, 1]),
        np.array([5.0, 3.0, 1.0, 2.0, 7.0, 4.0]),
        4,
    )
    out = add_remaining_self_loops(g, fill_value=0.5)
    # Non-loop edges first, in input order (the duplicate 2 -> 1 kept), then one loop per node.
    np.testing.assert_array_equal(out.senders, [1, 2, 2, 0, 1, 2, 3])
    np.testing.assert_array_equal(out.receivers, [2, 1, 1, 0, 1, 2, 3])
    np.testing.assert_allclose(out.weights, [1.0, 2.0, 4.0, 3.0, 7.0, 0.5, 0.5])


def test_add_remaining_self_loops_unweighted():
    g = Graph(np.array([0, 0, 0, 1]), np.array([0, 0, 1, 2]), None, 4)
    out = add_remaining_self_loops(g)
    assert out.weights is None
    np.testing.assert_array_equal(out.senders, [0, 1, 0, 1, 2, 3])
    np.testing.assert_array_equal(out.receivers, [1, 2, 0, 1, 2, 3])
    # An existing unweighted loop weighs 1 whatever the fill (as in PyG's gcn_norm).
    filled = add_remaining_self_loops(g, fill_value=2.0)
    np.testing.assert_allclose(filled.weights, [1.0, 1.0, 1.0, 2.0, 2.0, 2.0])
    empty = add_remaining_self_loops(Graph(np.zeros(0, np.int32), np.zeros(0, np.int32), None, 3))
    np.testing.assert_array_equal(empty.senders, [0, 1, 2])


def test_coalesce_sums_duplicates_and_sorts():
    g = Graph(np.array([2, 0, 2, 1]), np.array([1, 1, 1, 0]), np.array([1.0, 2.0, 3.0, 4.0]), 3)
    out = sg.coalesce(g)
    assert out.edges_sorted
    np.testing.assert_array_equal(out.receivers, [0, 1, 1])
    np.testing.assert_array_equal(out.senders, [1, 0, 2])
    np.testing.assert_allclose(out.weights, [4.0, 2.0, 4.0])
    np.testing.assert_allclose(out.to_scipy().toarray(), g.to_scipy().toarray())


def test_coalesce_counts_unweighted_duplicates():
    out = sg.coalesce(Graph(np.array([0, 0, 1]), np.array([1, 1, 0]), None, 2))
    np.testing.assert_allclose(out.weights, [1.0, 2.0])
    assert sg.coalesce(Graph(np.array([0, 1]), np.array([1, 0]), None, 2)).weights is None


def test_to_undirected_is_the_union():
    g = Graph(np.array([0, 1, 2, 3]), np.array([1, 0, 3, 3]), None, 5)
    out = sg.to_undirected(g)
    a = out.to_scipy().toarray()
    np.testing.assert_array_equal(a, a.T)
    expected = np.zeros((5, 5))
    expected[[1, 0, 3, 2, 3], [0, 1, 2, 3, 3]] = 1
    np.testing.assert_array_equal(a, expected)
    assert out.weights is None


def test_degree_matches_scipy():
    g = random_graph(20, 70, seed=5)
    a = g.to_scipy()
    np.testing.assert_allclose(sg.degree(g), a.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(sg.degree(g, direction="out"), a.sum(axis=0), rtol=1e-5)
    np.testing.assert_array_equal(
        sg.degree(g, weighted=False), np.bincount(g.receivers, minlength=20)
    )


@pytest.mark.parametrize("weighted", [True, False])
def test_gcn_norm_matches_the_definition(weighted):
    g = random_graph(25, 80, seed=6, weighted=weighted, isolated=4)
    out = sg.gcn_norm(g)
    np.testing.assert_allclose(
        out.to_scipy().toarray(), reference_gcn_matrix(g), rtol=1e-5, atol=1e-7
    )
    assert np.isfinite(out.weights).all()


def test_gcn_norm_zero_degree_maps_to_zero_not_nan():
    # Node 0 receives nothing (degree 0), so its column of Â is zero too.
    g = Graph(np.array([0, 2, 1]), np.array([1, 1, 2]), np.array([1.0, 1.0, 4.0]), 4)
    out = sg.gcn_norm(g, self_loops=False)
    expected = np.zeros((4, 4))
    expected[1, 2] = 1.0 / np.sqrt(2.0 * 4.0)
    expected[2, 1] = 4.0 / np.sqrt(4.0 * 2.0)
    np.testing.assert_allclose(out.to_scipy().toarray(), expected, rtol=1e-6)
    assert np.isfinite(out.weights).all()


def test_gcn_norm_hand_computed_path():
    # Path 0 - 1 - 2 with loops: degrees 2, 3, 2.
    g = sg.to_undirected(Graph.from_edge_index(np.array([[0, 1], [1, 2]]), 3))
    a = sg.gcn_norm(g).to_scipy().toarray()
    d = np.array([2.0, 3.0, 2.0])
    expected = np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1]]) / np.sqrt(np.outer(d, d))
    np.testing.assert_allclose(a, expected, rtol=1e-6)


def test_gcn_norm_collapses_duplicate_self_loops_hand_computed():
    # Edges 1 -> 0 twice, and node 0 with two loops: A' has ONE loop at 0 and at 1.
    # A'[0] = [1, 2] (loop, duplicate edge), A'[1] = [0, 1]: degrees 3 and 1.
    g = Graph(np.array([0, 1, 0, 1]), np.array([0, 0, 0, 0]), None, 2)
    out = sg.gcn_norm(g)
    expected = np.array([[1 / 3, 2 / np.sqrt(3)], [0.0, 1.0]])
    np.testing.assert_allclose(out.to_scipy().toarray(), expected, rtol=1e-6)
    assert out.num_edges == 4  # the two copies of 1 -> 0, then one loop per node
    # The weighted case keeps the last loop's weight: A'[0] = [3, 2], A'[1] = [0, 1].
    weighted = g.replace(weights=np.array([9.0, 1.0, 3.0, 1.0]))
    a = sg.gcn_norm(weighted).to_scipy().toarray()
    expected = np.array([[3 / 5, 2 / np.sqrt(5)], [0.0, 1.0]])
    np.testing.assert_allclose(a, expected, rtol=1e-6)


def pyg_gcn_norm():
    torch_geometric = pytest.importorskip(
        "torch_geometric", reason="torch_geometric is not installed (it is never a dependency)"
    )
    del torch_geometric
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    return gcn_norm


@pytest.mark.parametrize("weighted", [True, False])
def test_gcn_norm_matches_pyg(weighted):
    pyg = pyg_gcn_norm()
    import torch

    g = random_graph(25, 80, seed=11, weighted=weighted, duplicates=6, self_loops=0, isolated=4)
    senders, receivers = np.asarray(g.senders), np.asarray(g.receivers)
    # Duplicated self-loops, with equal weights (PyG does not fix which copy's weight it keeps).
    loops = np.array([3, 3, 7, 3, 11], np.int32)
    senders = np.concatenate([senders, loops])
    receivers = np.concatenate([receivers, loops])
    weights = None
    if weighted:
        loop_w = np.array([2.5, 2.5, 0.75, 2.5, 1.5], np.float32)
        weights = np.concatenate([np.asarray(g.weights), loop_w])
    g = Graph(senders, receivers, weights, g.num_nodes)
    ours = sg.gcn_norm(g)
    index, w = pyg(
        torch.as_tensor(np.stack([senders, receivers]).astype(np.int64)),
        None if weights is None else torch.as_tensor(weights),
        num_nodes=g.num_nodes,
    )
    np.testing.assert_array_equal(index[0].numpy(), ours.senders)
    np.testing.assert_array_equal(index[1].numpy(), ours.receivers)
    np.testing.assert_allclose(w.numpy(), ours.weights, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("weighted", [True, False])
def test_gcn_norm_factors_fold_into_the_same_matrix(weighted):
    g = random_graph(20, 60, seed=7, weighted=weighted, self_loops=6)  # some loops repeat
    adjacency, scale = sg.gcn_norm_factors(g)
    # The packed GCN path folds the scales only into an unweighted adjacency.
    assert (adjacency.weights is None) == (not weighted)
    folded = scale[:, None] * adjacency.to_scipy().toarray() * scale[None, :]
    np.testing.assert_allclose(folded, sg.gcn_norm(g).to_scipy().toarray(), rtol=1e-5)
    np.testing.assert_allclose(folded, reference_gcn_matrix(g), rtol=1e-5, atol=1e-7)


def test_gcn_norm_refuses_negative_degree():
    g = Graph(np.array([0, 1]), np.array([1, 1]), np.array([-5.0, 1.0]), 2)
    with pytest.raises(ValueError, match="node 1 has weighted degree -4"):
        sg.gcn_norm(g)


def test_mean_norm_rows_average():
    g = random_graph(15, 40, seed=8, weighted=False, isolated=3)
    a = sg.mean_norm(g).to_scipy().toarray()
    counts = np.bincount(g.receivers, minlength=15)
    np.testing.assert_allclose(a.sum(axis=1), (counts > 0).astype(float), rtol=1e-6)


def test_sort_edges_keeps_the_matrix():
    g = random_graph(20, 60, seed=9)
    out = sg.sort_edges(g)
    assert out.edges_sorted and out.num_edges == g.num_edges
    np.testing.assert_allclose(out.to_scipy().toarray(), g.to_scipy().toarray(), rtol=1e-6)


def test_remove_self_loops():
    g = random_graph(10, 30, seed=10)
    out = sg.remove_self_loops(g)
    assert not loop_nodes(out)
    assert out.num_edges == g.num_edges - int((g.senders == g.receivers).sum())


def test_transforms_refuse_traced_graphs():
    import jax

    g = random_graph(5, 5)
    with pytest.raises(TypeError, match="host-side operation"):
        jax.jit(sg.gcn_norm)(g)


@pytest.mark.parametrize("method", [order_method(m) for m in transforms.REORDER_METHODS])
def test_reorder_verb_is_graph_reorder(method):
    g = random_graph(30, 90, seed=9, weighted=True)
    a, b = transforms.reorder(g, method=method), g.reorder(method)
    assert isinstance(a, transforms.Reordering)
    np.testing.assert_array_equal(a.permutation, b.permutation)
    np.testing.assert_array_equal(a.graph.senders, b.graph.senders)
    np.testing.assert_array_equal(a.graph.weights, b.graph.weights)

"""Graph storage: construction, validation, views and the pytree contract."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from graphs import random_graph

from sparsegcn import CSR, Graph


def test_from_edge_index_follows_pyg_convention():
    g = Graph.from_edge_index(np.array([[0, 1, 2], [1, 2, 0]]), 3)
    np.testing.assert_array_equal(g.senders, [0, 1, 2])
    np.testing.assert_array_equal(g.receivers, [1, 2, 0])
    assert g.senders.dtype == np.int32 and g.receivers.dtype == np.int32
    assert g.num_edges == 3 and g.weights is None
    np.testing.assert_array_equal(g.edge_index, [[0, 1, 2], [1, 2, 0]])


def test_num_nodes_inferred_from_max_id():
    assert Graph.from_edge_index(np.array([[0, 4], [1, 2]])).num_nodes == 5


def test_dense_view_is_receiver_by_sender_with_duplicates_summed():
    g = Graph(np.array([0, 0, 2]), np.array([1, 1, 1]), np.array([1.0, 2.0, 4.0]), 3)
    expected = np.zeros((3, 3))
    expected[1, 0] = 3.0
    expected[1, 2] = 4.0
    np.testing.assert_allclose(g.to_dense(), expected)
    np.testing.assert_allclose(g.to_scipy().toarray(), expected)


def test_from_scipy_round_trip():
    a = sp.random(20, 20, density=0.2, random_state=0, format="csr")
    g = Graph.from_scipy(a)
    np.testing.assert_allclose(g.to_scipy().toarray(), a.toarray(), rtol=1e-6)


@pytest.mark.parametrize(
    ("edge_index", "num_nodes", "match"),
    [
        (np.array([[0, 5], [1, 2]]), 5, r"edge_index|senders\[1\] = 5 is out of range"),
        (np.array([[0, 1], [1, -3]]), 5, r"receivers\[1\] = -3 is out of range"),
        (np.array([[0, 1, 2]]), 5, r"shape \(2, E\), got \(1, 3\)"),
        (np.array([0, 1]), 5, "must have 2 dimension"),
        (np.array([[0.0, 1.0], [1.0, 0.0]]), 5, "integer dtype, got float64"),
        (np.array([[True], [False]]), 5, "integer dtype, got bool"),
    ],
)
def test_bad_edge_index_is_refused_with_position(edge_index, num_nodes, match):
    with pytest.raises(ValueError, match=match):
        Graph.from_edge_index(edge_index, num_nodes)


def test_bad_weights_and_sizes_are_refused():
    s, r = np.array([0, 1, 2]), np.array([1, 2, 0])
    with pytest.raises(ValueError, match=r"weights\[1\] = nan is not finite"):
        Graph(s, r, np.array([1.0, np.nan, 1.0]), 3)
    with pytest.raises(ValueError, match=r"weights\[2\] = inf is not finite"):
        Graph(s, r, np.array([1.0, 1.0, np.inf]), 3)
    # Before: finite in float64, these became inf in the float32 graph, silently.
    with pytest.raises(ValueError, match=r"weights\[1\] = 1e\+300 is past the range of float32"):
        Graph(s, r, np.array([1.0, 1e300, 1.0]), 3)
    with pytest.raises(ValueError, match=r"edge_features\[2, 0\] = -1e\+300 is past the range"):
        Graph(s, r, None, 3, edge_features=np.array([[0.0], [1.0], [-1e300]]))
    with pytest.raises(ValueError, match=r"shape \(3,\), one per edge, got \(2,\)"):
        Graph(s, r, np.array([1.0, 1.0]), 3)
    with pytest.raises(ValueError, match="same shape"):
        Graph(s, r[:2], None, 3)
    with pytest.raises(ValueError, match="num_nodes must be >= 0, got -1"):
        Graph(s, r, None, -1)
    with pytest.raises(TypeError, match="static Python int"):
        Graph(s, r, None, 3.5)


def test_device_arrays_are_validated_too():
    with pytest.raises(ValueError, match=r"senders\[0\] = 9 is out of range"):
        Graph(jnp.array([9]), jnp.array([0]), None, 3)


def test_pytree_keeps_num_nodes_static_under_jit():
    g = random_graph(10, 20)

    @jax.jit
    def f(graph):
        assert isinstance(graph.num_nodes, int)
        return graph.replace(weights=graph.weights * 2.0)

    out = f(g)
    assert out.num_nodes == 10
    np.testing.assert_allclose(out.weights, g.weights * 2.0)
    leaves, treedef = jax.tree.flatten(g)
    assert len(leaves) == 3
    assert jax.tree.unflatten(treedef, leaves).num_nodes == 10


def test_graph_is_immutable():
    g = random_graph(5, 5)
    with pytest.raises(AttributeError):
        g.num_nodes = 3


def test_edges_sorted_flag_is_verified():
    with pytest.raises(ValueError, match="edges_sorted=True but edge 1"):
        Graph(np.array([0, 1]), np.array([2, 1]), None, 3, edges_sorted=True)
    Graph(np.array([0, 1, 1]), np.array([1, 1, 2]), None, 3, edges_sorted=True)


def test_csr_groups_in_neighbours_by_receiver():
    g = random_graph(15, 50, seed=4)
    csr = g.to_csr()
    assert isinstance(csr, CSR)
    assert csr.indptr.dtype == np.int32 and csr.indptr[-1] == g.num_edges
    for r in range(g.num_nodes):
        row = slice(csr.indptr[r], csr.indptr[r + 1])
        expected = np.flatnonzero(g.receivers == r)  # stable: original order
        np.testing.assert_array_equal(csr.edge_ids[row], expected)
        np.testing.assert_array_equal(csr.indices[row], g.senders[expected])
        np.testing.assert_allclose(csr.weights[row], g.weights[expected])
    np.testing.assert_array_equal(csr.degrees(), np.bincount(g.receivers, minlength=15))


def test_graph_module_imports_only_the_bottom_layer():
    # graph.py sits right above sparsegcn.ops: importing transforms (or anything
    # else of sparsegcn) from it would make a cycle, since they all import Graph.
    import ast
    from pathlib import Path

    import sparsegcn.graph

    tree = ast.parse(Path(sparsegcn.graph.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
    ours = {name for name in imported if name.split(".")[0] == "sparsegcn"}
    assert ours and all(
        n.startswith(("sparsegcn.ops.", "sparsegcn._checks", "sparsegcn.views.")) for n in ours
    ), ours


def test_unpack_of_a_plain_graph_is_the_graph_itself():
    g = random_graph(6, 10).replace(edge_features=np.ones((15, 2), np.float32))
    assert g.unpack() is g

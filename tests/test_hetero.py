"""HeteroGraph: validation, pytree, relation views, reverse relations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hetero_graphs import CITES, EMPTY, NUM_NODES, TOPIC, WRITES, paper_features, small_hetero

from sparsegcn.datasets.hetero_dataset import HeteroDataset
from sparsegcn.graph import Graph
from sparsegcn.hetero import HeteroGraph
from sparsegcn.message_passing import message_passing


def test_relations_are_bipartite_views_and_message_passing_runs_per_relation():
    g = small_hetero()
    rng = np.random.default_rng(0)
    x_author = rng.normal(size=(5, 3)).astype(np.float32)
    view = g.relation("writes")
    assert (view.num_src, view.num_dst) == (5, 7)
    dense = np.zeros((7, 5), np.float32)
    np.add.at(dense, (np.asarray(view.receivers), np.asarray(view.senders)), 1.0)
    np.testing.assert_allclose(message_passing(view, x_author), dense @ x_author, rtol=1e-6)
    count = np.maximum(dense.sum(1, keepdims=True), 1.0)
    np.testing.assert_allclose(
        message_passing(view, x_author, aggregate="mean"), dense @ x_author / count, rtol=1e-6
    )
    np.testing.assert_allclose(g.to_dense("writes"), dense)
    # The empty relation: zeros, not an error.
    out = message_passing(g.relation(EMPTY), np.ones((2, 3), np.float32), aggregate="mean")
    np.testing.assert_array_equal(out, np.zeros((7, 3), np.float32))


def test_counts_lookup_and_incoming():
    g = small_hetero()
    assert g.node_types == tuple(NUM_NODES)
    assert g.num_edges == {CITES: 8, WRITES: 7, TOPIC: 5, EMPTY: 0}
    assert g.edge_type("cites") == CITES
    assert g.incoming("paper") == (CITES, WRITES, EMPTY)
    with pytest.raises(ValueError, match="unknown relation 'nope'"):
        g.edge_type("nope")
    with pytest.raises(ValueError, match="unknown node type 'x'"):
        g.incoming("x")


def test_pytree_round_trip_under_jit():
    g = small_hetero()
    leaves, tree = jax.tree_util.tree_flatten(g)
    # senders, receivers and the view's dst_start per relation; weights None
    assert len(leaves) == 3 * 4
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert back.num_nodes == g.num_nodes and back.edge_types == g.edge_types

    @jax.jit
    def degree_of_papers(graph):
        return graph.relation(CITES).in_count()

    np.testing.assert_array_equal(degree_of_papers(g), [3, 1, 2, 2, 0, 0, 0])


@pytest.mark.parametrize(
    ("relations", "error", "match"),
    [
        (
            {CITES: ([0, 7], [0, 1])},
            ValueError,
            r"senders of relation \('paper', 'cites', 'paper'\)\[1\] = 7",
        ),
        (
            {WRITES: ([0, 4], [0, -1])},
            ValueError,
            r"receivers of relation \('author', 'writes', 'paper'\)\[1\] = -1",
        ),
        (
            {("paper", "x", "nobody"): ([0], [0])},
            ValueError,
            "target type 'nobody' is not a node type",
        ),
        ({("paper", "x"): ([0], [0])}, TypeError, "triple"),
        ({CITES: ([0, 1], [0])}, ValueError, "same shape"),
        ({CITES: ([0.5], [0])}, ValueError, "integer"),
        ({CITES: ([0], [0], [np.nan])}, ValueError, "not finite"),
    ],
)
def test_bad_relations_fail_naming_the_relation(relations, error, match):
    with pytest.raises(error, match=match):
        HeteroGraph(dict(NUM_NODES), relations)


def test_add_reverse_relations():
    g = small_hetero()
    r = g.add_reverse_relations()
    assert r.edge_types == (
        CITES,
        WRITES,
        TOPIC,
        EMPTY,
        ("paper", "rev_cites", "paper"),
        ("paper", "rev_writes", "author"),
        ("topic", "rev_has_topic", "paper"),
        ("paper", "rev_hosts", "venue"),
    )
    np.testing.assert_array_equal(r.to_dense("rev_writes"), g.to_dense("writes").T)
    np.testing.assert_array_equal(r.to_dense("rev_has_topic"), g.to_dense("has_topic").T)
    with pytest.raises(ValueError, match="exists already"):
        r.add_reverse_relations()
    # OGB's choice for a same-type relation: symmetric, duplicates merged.
    m = g.add_reverse_relations(merge_same_type=True)
    assert ("paper", "rev_cites", "paper") not in m.relations
    a = np.asarray(g.to_dense("cites"))
    np.testing.assert_array_equal(m.to_dense("cites"), ((a + a.T) > 0).astype(np.float32))


def test_csr_groups_by_target():
    g = small_hetero()
    indptr, indices = g.csr("writes")
    np.testing.assert_array_equal(indptr, [0, 2, 3, 4, 5, 6, 7, 7])
    dense = np.zeros((7, 5))
    for i in range(7):
        for j in indices[indptr[i] : indptr[i + 1]]:
            dense[i, j] += 1
    np.testing.assert_array_equal(dense, g.to_dense("writes"))
    assert jnp.asarray(indices).dtype == jnp.int32


def _dataset_fields() -> dict:
    """The fields of a valid HeteroDataset over small_hetero (papers labelled)."""
    return dict(
        name="small",
        graph=small_hetero(),
        features={"paper": paper_features()},
        target="paper",
        labels=np.array([0, 2, -1, 1, 2, -1, 0]),
        num_classes=3,
        split={"train": np.array([0, 1, 3]), "valid": np.array([4]), "test": np.array([6])},
    )


@pytest.mark.parametrize(
    ("field", "value", "error", "match"),
    [
        ("graph", None, TypeError, r"graph must be a HeteroGraph, got None$"),
        ("graph", Graph([0], [1], None, 2), TypeError, r"graph must be a HeteroGraph, got Graph$"),
        (
            "features",
            None,
            TypeError,
            r"features must be a \{node_type: \[N_t, F\] array\} .*None$",
        ),
        (
            "features",
            {"paper": paper_features().tolist()},
            TypeError,
            r"features\['paper'\] must be a NumPy or JAX array \[N_paper, F\], got list$",
        ),
        (
            "features",
            {"paper": paper_features().astype(np.complex64)},
            ValueError,
            r"features\['paper'\] must be real numbers, got dtype complex64$",
        ),
        (
            "features",
            {"paper": paper_features() > 0},
            ValueError,
            r"features\['paper'\] must be real numbers, got dtype bool$",
        ),
    ],
    ids=["graph-none", "graph-homogeneous", "features-none", "list", "complex", "bool"],
)
def test_hetero_dataset_refuses_bad_fields_naming_them(field, value, error, match):
    # Before: a list, None or a homogeneous Graph failed with a bare AttributeError
    # ('list' object has no attribute 'ndim'), and complex and bool features were
    # accepted (training's float32 cast dropped the imaginary parts).
    with pytest.raises(error, match=r"^dataset 'small': " + match):
        HeteroDataset(**{**_dataset_fields(), field: value})


def test_hetero_dataset_takes_real_numpy_and_jax_feature_arrays_as_they_are():
    kept = {"paper": jnp.asarray(paper_features()), "topic": np.ones((3, 2), np.int32)}
    dataset = HeteroDataset(**{**_dataset_fields(), "features": kept})
    assert all(dataset.features[t] is x for t, x in kept.items())

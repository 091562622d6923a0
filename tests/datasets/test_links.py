"""LinkDataset's checks, symmetric_graph against scipy, and name dispatch."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsegcn.datasets import SYNTHETIC_LINKS, load
from sparsegcn.datasets.links import (
    LinkDataset,
    is_link_dataset,
    link_names,
    load_links,
    symmetric_graph,
)
from sparsegcn.datasets.synthetic_links import LINK_PRESETS
from sparsegcn.graph import Graph


def _dataset(**changes):
    graph = Graph(np.array([0, 1]), np.array([1, 0]), None, 4)
    fields = {
        "name": "toy",
        "graph": graph,
        "features": np.ones((4, 2), np.float32),
        "split": {
            "train": np.array([[0, 1]]),
            "valid": np.array([[1, 2]]),
            "test": np.array([[2, 3]]),
            "valid_neg": np.array([[0, 3], [1, 3]]),
            "test_neg": np.array([[0, 2]]),
        },
        "metric": "hits@50",
        "directed": False,
    }
    fields.update(changes)
    return LinkDataset(**fields)


def test_defaults_and_negative_forms():
    ds = _dataset()
    assert ds.num_edges == 3 and ds.negatives == "pairs" and ds.num_features == 2
    assert ds.split["train"].dtype == np.int64
    targets = _dataset(
        split={
            **_dataset().split,
            "valid_neg": np.array([[0, 1, 3]]),
            "test_neg": np.array([[1, 1, 1]]),
        },
        metric="mrr",
    )
    assert targets.negatives == "targets"


TWO_PER_SOURCE = {
    **_dataset().split,
    "valid_neg": np.array([[0, 3]]),
    "test_neg": np.array([[1, 0]]),
}


@pytest.mark.parametrize(
    ("form", "split", "want"),
    [
        (None, TWO_PER_SOURCE, "pairs"),  # told by the width
        ("targets", TWO_PER_SOURCE, "targets"),  # [P, 2] per source, as the loader knows
        ("pairs", TWO_PER_SOURCE, "pairs"),
        ("targets", {**TWO_PER_SOURCE, "valid_neg": np.array([[0, 1, 3]])}, "targets"),
    ],
)
def test_a_given_negative_form_is_kept(form, split, want):
    ds = _dataset(split=split, negative_form=form)
    assert ds.negatives == ds.negative_form == want


@pytest.mark.parametrize(
    ("form", "split", "pattern"),
    [
        ("targets", _dataset().split, r"split\['valid_neg'\] holds per-source negatives: one row"),
        (
            "pairs",
            {**TWO_PER_SOURCE, "valid_neg": np.array([[0, 1, 3]])},
            r"negatives must all be \[Q, 2\] pairs",
        ),
        ("per-source", TWO_PER_SOURCE, r"negative_form must be one of .* got 'per-source'"),
    ],
)
def test_a_negative_form_the_arrays_do_not_have_is_refused(form, split, pattern):
    with pytest.raises(ValueError, match=pattern):
        _dataset(split=split, negative_form=form)


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"features": np.ones((3, 2), np.float32)}, r"features must be \[N, F\] = \[4, F >= 1\]"),
        ({"metric": "accuracy"}, "metric must be hits@K, mrr"),
        ({"split": {"train": np.array([[0, 1]])}}, "split must have keys"),
        ({"edge_weight": np.array([1, 2])}, r"edge_weight must have one value per row"),
        ({"node_year": np.array([1.5, 2, 3, 4])}, "node_year must have an integer dtype"),
    ],
)
def test_bad_fields_are_refused(changes, pattern):
    with pytest.raises(ValueError, match=pattern):
        _dataset(**changes)


def test_bad_split_arrays_are_refused():
    base = _dataset().split
    with pytest.raises(ValueError, match=r"split\[.test.\]\[0, 1\] = 4 is not a node id"):
        _dataset(split={**base, "test": np.array([[2, 4]])})
    with pytest.raises(ValueError, match=r"split\['valid'\] must have shape \[P, 2\]"):
        _dataset(split={**base, "valid": np.array([[1, 2, 3]])})
    with pytest.raises(ValueError, match=r"one row per positive of split\['valid'\] \(1\)"):
        _dataset(split={**base, "valid_neg": np.array([[0, 1, 2], [0, 1, 2]])})
    with pytest.raises(ValueError, match="all be"):
        _dataset(split={**base, "test_neg": np.array([[0, 1, 2]])})


@pytest.mark.parametrize("weighted", [False, True])
def test_symmetric_graph_matches_scipy(weighted):
    rng = np.random.default_rng(0)
    n = 30
    pairs = rng.integers(0, n, size=(200, 2))  # repeats, both orders, self-pairs
    pairs[:5] = [[3, 3], [4, 7], [7, 4], [4, 7], [9, 9]]
    w = rng.integers(1, 5, size=200) if weighted else None
    g = symmetric_graph(pairs, n, w)
    values = np.ones(200) if w is None else w.astype(float)
    a = sp.coo_array((values, (pairs[:, 0], pairs[:, 1])), shape=(n, n)).toarray()
    both = a + a.T
    both[np.diag_indices(n)] = np.diag(a)  # a self-pair counts once
    dense = np.zeros((n, n))
    np.add.at(dense, (g.receivers, g.senders), 1.0 if g.weights is None else g.weights)
    if weighted:
        np.testing.assert_allclose(dense, both)
    else:
        np.testing.assert_array_equal(dense, (both > 0).astype(float))
    assert g.edges_sorted
    assert np.unique(g.receivers.astype(np.int64) * n + g.senders).shape[0] == g.num_edges


def test_names_and_dispatch():
    assert set(SYNTHETIC_LINKS) == set(LINK_PRESETS)  # the package's table and the presets
    names = link_names()
    assert {"ogbl-collab", "ogbl-citation2", "synthetic:collab", "synthetic:citation2"} <= set(
        names
    )
    assert all(is_link_dataset(name) for name in names)
    assert not is_link_dataset("cora") and not is_link_dataset("synthetic:arxiv")
    with pytest.raises(ValueError, match="unknown link dataset 'cora'"):
        load_links("cora")
    with pytest.raises(TypeError, match="must be a string"):
        load_links(3)
    with pytest.raises(ValueError, match="is a link-prediction dataset"):
        load("synthetic:collab", scale=0.1)


def test_require_splits_names_the_empty_split():
    ds = _dataset(split={**_dataset().split, "test_neg": np.zeros((0, 2), np.int64)})
    ds.require_splits(("train", "valid", "test"))
    with pytest.raises(ValueError, match=r"dataset 'toy': the 'test_neg' split is empty"):
        ds.require_splits()

"""The synthetic molecule twins at small scale: shapes, dtypes, OGB's vocabularies, the
stated rates, determinism, the split, and labels that the stated motif predicts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from sparsegcn.datasets.graphs import load_graphs
from sparsegcn.datasets.ogbg import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS
from sparsegcn.datasets.synthetic_graphs import PRESETS, generate_molecules, scaffold_split


@pytest.fixture(scope="module")
def pcba():
    return generate_molecules("molpcba", num_graphs=3000, seed=3)


@pytest.fixture(scope="module")
def hiv():
    return generate_molecules("molhiv", num_graphs=6000, seed=1)


def test_shapes_dtypes_and_vocabularies(pcba):
    g, n, e = pcba.num_graphs, pcba.num_nodes, pcba.num_edges
    assert (g, pcba.num_classes, pcba.metric, pcba.kind) == (3000, 128, "ap", "binary")
    assert pcba.features.shape == (n, 9) and pcba.features.dtype == np.int32
    assert pcba.edge_features.shape == (e, 3) and pcba.edge_features.dtype == np.int32
    assert pcba.labels.shape == (g, 128) and pcba.labels.dtype == np.float32
    assert pcba.senders.dtype == pcba.receivers.dtype == np.int32
    assert (pcba.feature_dims, pcba.edge_feature_dims) == (ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS)
    assert (pcba.features >= 0).all() and (pcba.features < ATOM_FEATURE_DIMS).all()
    assert (pcba.edge_features >= 0).all() and (pcba.edge_features < BOND_FEATURE_DIMS).all()
    known = pcba.labels[~np.isnan(pcba.labels)]
    assert set(np.unique(known)) == {0.0, 1.0}


def test_graph_structure(pcba):
    s, r = pcba.senders, pcba.receivers
    # Each bond then its reverse, with the same bond features; no self-loop.
    np.testing.assert_array_equal(s[1::2], r[::2])
    np.testing.assert_array_equal(r[1::2], s[::2])
    np.testing.assert_array_equal(pcba.edge_features[1::2], pcba.edge_features[::2])
    assert (s != r).all()
    # Every edge inside its own graph.
    graph = np.repeat(np.arange(pcba.num_graphs), pcba.edges_per_graph())
    assert (s >= pcba.node_ptr[graph]).all() and (s < pcba.node_ptr[graph + 1]).all()
    assert (r >= pcba.node_ptr[graph]).all() and (r < pcba.node_ptr[graph + 1]).all()
    # The degree column is the atom's bond count; no bond is stored twice.
    np.testing.assert_array_equal(pcba.features[:, 2], np.bincount(s, minlength=pcba.num_nodes))
    keys = np.unique(s.astype(np.int64) * pcba.num_nodes + r)
    assert keys.shape[0] == pcba.num_edges
    assert (pcba.nodes_per_graph() >= 2).all()


@pytest.mark.parametrize("preset", ["molhiv", "molpcba"])
def test_sizes_and_rates_follow_the_preset(preset, hiv, pcba):
    data = hiv if preset == "molhiv" else pcba
    spec = PRESETS[preset]
    assert data.nodes_per_graph().mean() == pytest.approx(spec.mean_nodes, abs=0.8)
    assert data.edges_per_graph().mean() / 2 == pytest.approx(spec.mean_bonds, abs=0.8)
    missing = np.isnan(data.labels).mean()
    assert missing == pytest.approx(spec.missing_rate, abs=0.01)
    positive = np.nanmean(data.labels, axis=0)
    np.testing.assert_allclose(positive, data.info["positive_rates"], atol=0.015)
    if preset == "molhiv":
        assert positive[0] == pytest.approx(0.035, abs=0.003)


def test_deterministic_per_seed():
    a = generate_molecules("molpcba", num_graphs=300, seed=7)
    b = generate_molecules("molpcba", num_graphs=300, seed=7)
    c = generate_molecules("molpcba", num_graphs=300, seed=8)
    for key in ("senders", "receivers", "node_ptr", "features", "edge_features", "labels"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.node_ptr, c.node_ptr)
    for key in ("train", "valid", "test"):
        np.testing.assert_array_equal(a.split[key], b.split[key])


def test_split_is_a_partition_near_80_10_10(pcba):
    ids = np.concatenate([pcba.split[k] for k in ("train", "valid", "test")])
    np.testing.assert_array_equal(np.sort(ids), np.arange(pcba.num_graphs))
    sizes = [pcba.split[k].shape[0] / pcba.num_graphs for k in ("train", "valid", "test")]
    np.testing.assert_allclose(sizes, [0.8, 0.1, 0.1], atol=0.05)


def test_scaffold_split_by_hand():
    # Groups: key 7 x4 (ids 0,2,4,6), key 1 x3, key 9 x2, key 3 x1; ten graphs.
    keys = np.array([7, 1, 7, 1, 7, 9, 7, 9, 1, 3])
    split = scaffold_split(keys, fractions=(0.7, 0.2, 0.1))
    assert split["train"].tolist() == [0, 1, 2, 3, 4, 6, 8]  # 4 + 3 = 7 <= 7
    assert split["valid"].tolist() == [5, 7]  # ends at 9 <= 9
    assert split["test"].tolist() == [9]


def _motif_scores(data, task: int) -> np.ndarray:
    """The stated rule's noiseless score, recomputed from the dataset's arrays alone:
    bonds joining types a and b, plus aromatic atoms of type c, per molecule."""
    a, b, c = data.info["motifs"][task]
    atom = data.features[:, 0]
    s, r = data.senders[::2], data.receivers[::2]  # each bond once
    pair = ((atom[s] == a) & (atom[r] == b)) | ((atom[s] == b) & (atom[r] == a))
    graph_of = np.repeat(np.arange(data.num_graphs), data.nodes_per_graph())
    bonds = np.bincount(graph_of[s], weights=pair, minlength=data.num_graphs)
    ring = (atom == c) & (data.features[:, 7] == 1)
    return bonds + np.bincount(graph_of, weights=ring, minlength=data.num_graphs)


def _auc(score, labels):
    """ROC-AUC of ``score`` for the known 0/1 ``labels`` (Mann-Whitney), and the one-sided
    p-value of no association."""
    pos, neg = score[labels == 1], score[labels == 0]
    test = mannwhitneyu(pos, neg, alternative="greater")
    return test.statistic / (pos.size * neg.size), test.pvalue


def test_the_motif_predicts_the_labels(hiv, pcba):
    auc, p = _auc(_motif_scores(hiv, 0), hiv.labels[:, 0])
    assert auc > 0.75 and p < 1e-20, (auc, p)
    # The same scores shuffled across molecules are at chance.
    shuffled = np.random.default_rng(0).permutation(_motif_scores(hiv, 0))
    assert abs(_auc(shuffled, hiv.labels[:, 0])[0] - 0.5) < 0.06
    aucs = []
    for task in range(pcba.num_classes):
        labels = pcba.labels[:, task]
        if (labels == 1).sum() >= 20:
            aucs.append(_auc(_motif_scores(pcba, task), labels)[0])
    assert len(aucs) >= 10 and min(aucs) > 0.6 and np.mean(aucs) > 0.75, aucs


def test_load_graphs_names_and_bad_arguments():
    with pytest.raises(ValueError, match="unknown molecule preset"):
        generate_molecules("moltox")
    with pytest.raises(ValueError, match="num_graphs must be >= 1"):
        generate_molecules("molhiv", num_graphs=0)
    with pytest.raises(ValueError, match=r"missing_rate must be in \[0, 1\)"):
        generate_molecules("molhiv", num_graphs=5, missing_rate=1.5)
    with pytest.raises(ValueError, match="not a graph-level dataset"):
        load_graphs("synthetic:moltox", None)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["molhiv", "molpcba"])
def test_full_size(preset):
    data = load_graphs(f"synthetic:{preset}", None)
    spec = PRESETS[preset]
    assert data.num_graphs == spec.num_graphs and data.num_classes == spec.num_tasks
    assert data.nodes_per_graph().mean() == pytest.approx(spec.mean_nodes, abs=0.3)
    assert data.edges_per_graph().mean() / 2 == pytest.approx(spec.mean_bonds, abs=0.3)

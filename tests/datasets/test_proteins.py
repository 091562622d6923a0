"""ogbn-proteins from a miniature raw folder, synthetic:proteins, and their training runs."""

from __future__ import annotations

import collections
import gzip

import numpy as np
import pytest

from sparsegcn import transforms
from sparsegcn.datasets import load
from sparsegcn.datasets.proteins import (
    NUM_TASKS,
    SPLIT_SIZES,
    generate_proteins,
    load_proteins,
)
from sparsegcn.experiment import Experiment, run_experiment

pytest.importorskip("pandas")

EDGES = [[0, 1], [1, 2], [3, 4], [2, 0], [4, 5]]
EDGE_FEATS = [[0.1 * (e + 1) + 0.01 * k for k in range(8)] for e in range(5)]
SPECIES = [3702, 3702, 3702, 4932, 4932, 9606]
SPLIT = {"train": [0, 1], "valid": [2, 3], "test": [4, 5]}


def labels(n: int = 6) -> np.ndarray:
    rng = np.random.default_rng(0)
    y = (rng.random((n, NUM_TASKS)) < 0.5).astype(int)
    y[0, :] = 1
    y[1, :] = 0
    return y


def write(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


@pytest.fixture
def root(tmp_path):
    raw = tmp_path / "ogbn_proteins" / "raw"
    write(raw / "edge.csv.gz", EDGES)
    write(raw / "edge-feat.csv.gz", EDGE_FEATS)
    write(raw / "node-label.csv.gz", labels())
    write(raw / "node_species.csv.gz", SPECIES)
    write(raw / "num-node-list.csv.gz", [6])
    write(raw / "num-edge-list.csv.gz", [5])
    for key, ids in SPLIT.items():
        write(tmp_path / "ogbn_proteins" / "split" / "species" / f"{key}.csv.gz", ids)
    return tmp_path


def test_raw_folder_reads_by_hand(root):
    d = load("ogbn-proteins", root)
    assert d.name == "ogbn-proteins" and d.metric == "rocauc" and d.multilabel
    assert (d.num_nodes, d.num_edges, d.graph.num_edges, d.num_classes) == (6, 5, 10, 112)
    np.testing.assert_array_equal(d.labels, labels())
    assert {k: v.tolist() for k, v in d.split.items()} == SPLIT
    # Both directions of every pair, each with the pair's features (ogb's add_inverse_edge).
    got = collections.Counter(
        (int(s), int(r), tuple(np.round(f, 4)))
        for s, r, f in zip(d.graph.senders, d.graph.receivers, d.graph.edge_features, strict=True)
    )
    want = collections.Counter()
    for (u, v), f in zip(EDGES, EDGE_FEATS, strict=True):
        row = tuple(np.round(np.float32(f), 4))
        want[u, v, row] += 1
        want[v, u, row] += 1
    assert got == want
    # Node 0's incident pairs are 0-1 (row 0) and 2-0 (row 3): its mean feature is by hand.
    mean = transforms.edge_mean_features(d.graph)
    np.testing.assert_allclose(mean[0], (np.float32(EDGE_FEATS[0]) + EDGE_FEATS[3]) / 2, rtol=1e-6)
    np.testing.assert_allclose(mean[5], EDGE_FEATS[4], rtol=1e-6)


@pytest.mark.parametrize(
    ("file", "rows", "message"),
    [
        ("edge-feat.csv.gz", [*EDGE_FEATS[:2], [0.5] * 7, *EDGE_FEATS[3:]], r"line 3: expected 8"),
        ("edge.csv.gz", [[0, 1], [1, 2], ["x", 4], [2, 0], [4, 5]], r"line 3: expected 2 .*'x,4'"),
        ("edge.csv.gz", [[0, 1], [1, 2], [3, 4], [2, 9], [4, 5]], r"line 4: node id 9 .*\[0, 6\)"),
        ("edge.csv.gz", EDGES[:4], r"expected 5 lines, got 4"),
        (
            "node-label.csv.gz",
            np.where(np.arange(6)[:, None] == 4, 2, labels()),
            r"line 5: label 2",
        ),
        ("num-node-list.csv.gz", [6, 6], "expected one line"),
    ],
)
def test_malformed_files_are_named_with_their_line(root, file, rows, message):
    folder = root / "ogbn_proteins" / "raw"
    write(folder / file, rows)
    with pytest.raises(ValueError, match=f"{file}.*{message}"):
        load_proteins(root)


def test_missing_file_is_named(root):
    (root / "ogbn_proteins" / "split" / "species" / "valid.csv.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"species/valid\.csv\.gz is missing"):
        load_proteins(root)


@pytest.mark.slow
def test_training_reports_rocauc_and_the_official_evaluator(root):
    pytest.importorskip("ogb")
    exp = Experiment(
        dataset="ogbn-proteins", root=str(root), model="sage", fanouts="none", epochs=3, hidden=8
    )
    report = run_experiment(exp)
    assert report["task"] == "node-multilabel" and report["metric"] == "rocauc"
    assert "test_acc_mean" not in report
    # The run's metric (JAX, in the compiled program) is ogb's Evaluator's on the same params.
    official = report["ogb_evaluator"]
    assert official["metric"] == "rocauc" and len(official["test"]) == 1
    np.testing.assert_allclose(official["test_mean"], report["test_rocauc_mean"], rtol=1e-5)


def test_synthetic_proteins_layout():
    d = generate_proteins(0.002, seed=1)
    n = d.num_nodes
    assert n == round(132_534 * 0.002) and d.num_edges == round(39_561_252 * 0.002)
    assert d.graph.num_edges == 2 * d.num_edges and d.graph.num_edge_features == 8
    sizes = d.split_sizes
    total = sum(SPLIT_SIZES.values())
    for key, size in sizes.items():
        assert abs(size - SPLIT_SIZES[key] * n / total) <= 2
    assert d.labels.shape == (n, 112) and set(np.unique(d.labels)) == {0, 1}
    f = np.asarray(d.graph.edge_features)
    assert f.min() >= 0 and f.max() <= 1
    s, r = d.graph.senders, d.graph.receivers
    assert (s != r).all()
    # Edges never cross the species split groups (species are split-wise disjoint).
    group = np.zeros(n, int)
    for g, key in enumerate(("train", "valid", "test")):
        group[d.split[key]] = g
    assert (group[s] == group[r]).all()
    again = generate_proteins(0.002, seed=1)
    np.testing.assert_array_equal(again.graph.senders, s)
    np.testing.assert_array_equal(again.labels, d.labels)

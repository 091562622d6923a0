"""ogbn-proteins from a miniature raw folder, synthetic:proteins, and their training runs."""

from __future__ import annotations

import collections
import gzip
import json

import numpy as np
import pytest

from sparsegcn import transforms
from sparsegcn.cli import main
from sparsegcn.datasets import load
from sparsegcn.datasets.proteins import (
    NUM_TASKS,
    SPLIT_SIZES,
    generate_proteins,
    load_proteins,
    read_table,
)
from sparsegcn.datasets.proteins import SPECIES as TAXONOMY_IDS  # the fixture's SPECIES: rows
from sparsegcn.experiment import Experiment, run_experiment
from sparsegcn.experiment.build import node_data, use_edge_features
from sparsegcn.nn import sage
from sparsegcn.train import TrainConfig, fit
from sparsegcn.train.losses import MULTILABEL

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
        (
            "raw/edge-feat.csv.gz",
            [*EDGE_FEATS[:2], [0.5] * 7, *EDGE_FEATS[3:]],
            r"line 3: expected 8 .* \(7 fields\)",
        ),
        (
            "raw/edge.csv.gz",
            [[0, 1], [1, 2], ["x", 4], [2, 0], [4, 5]],
            r"line 3: expected 2 .*'x,4'",
        ),
        (
            "raw/edge.csv.gz",
            [[0, 1], [1, 2], [3, 4], [2, 9], [4, 5]],
            r"line 4: node id 9 .*\[0, 6\)",
        ),
        ("raw/edge.csv.gz", EDGES[:4], r"expected 5 lines, got 4"),
        (
            "raw/node-label.csv.gz",
            np.where(np.arange(6)[:, None] == 4, 2, labels()),
            r"line 5: label 2",
        ),
        ("raw/num-node-list.csv.gz", [6, 6], "expected one line"),
        ("raw/num-node-list.csv.gz", [-6], r"line 1: expected a count >= 0, got -6"),
        # Integers written as floats are read; the first row that is not one is named.
        (
            "raw/edge.csv.gz",
            [[0, 1], ["1.0", "2.0"], [3, 4], ["2.5", 0], [4, 5]],
            r"line 4: .*'2\.5,0' \(2\.5 is not an integer\)",
        ),
        (
            "raw/edge.csv.gz",
            [[0, 1], [1, 2], ["1e20", 4], [2, 0], [4, 5]],
            r"line 3: .*'1e20,4' \(1e20 is past 2\*\*53",
        ),
        # Every line is a row: a blank one is named, and rows after it keep their lines.
        (
            "split/species/test.csv.gz",
            [4, [], 7],
            r"line 2: expected one integer, got '' \(.*blank",
        ),
        ("split/species/test.csv.gz", [4, 5, 7], r"line 3: node id 7 is outside \[0, 6\)"),
        ("raw/node_species.csv.gz", ["species", *SPECIES[1:]], r"line 1: .*'species'"),
        ("raw/node_species.csv.gz", [3702, 3702, -1, 4932, 4932, 9606], r"line 3: species -1 is"),
        ("raw/node_species.csv.gz", [3702, 3702, 3702, 4932, 11, 9606], r"line 5: species 11 is"),
    ],
)
def test_malformed_files_are_named_with_their_line(root, file, rows, message):
    write(root / "ogbn_proteins" / file, rows)
    with pytest.raises(ValueError, match=f"{file}.*{message}"):
        load_proteins(root)


def test_species_are_ogbs_taxonomy_ids(root):
    """OGB's node_species holds NCBI taxonomy ids, not 0-based indices (mapping/README.md)."""
    assert load_proteins(root).info["num_species"] == 3
    write(root / "ogbn_proteins" / "raw" / "node_species.csv.gz", [0, 0, 0, 1, 1, 2])
    with pytest.raises(
        ValueError, match=r"line 1: species 0 is not one of ogbn-proteins' 8 .*3702"
    ):
        load_proteins(root)


def write_text(path, text: str) -> None:
    with gzip.open(path, "wt", newline="") as f:
        f.write(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", None),  # no lines, no rows
        ("0,1\r\n 2 ,+3e0\r\n", None),
        ("\n0,1\n", r"line 1: expected 2 .*'' \(the line is blank\)"),
        ("0,1\n1,2\n\n", r"line 3: .*'' \(the line is blank\)"),
        ("0,1\n1_0,2\n", r"line 2: .*'1_0' is not a finite number"),
        ('0,1\n"2",3\nx,1\n', r"line 2: .*'\"2\",3'"),
        ("0,1\n1e3,2\nx,1\n", r"line 3: .*'x' is not a finite number"),
        ("0,1\n1,\n", r"line 2: .*'1,' \(a field is empty\)"),
    ],
)
def test_read_table_names_the_line_pandas_stops_at(tmp_path, text, message):
    path = tmp_path / "t.csv.gz"
    write_text(path, text)
    if message is None:
        assert read_table(path, 2, "int").shape == (text.count("\n"), 2)
    else:
        with pytest.raises(ValueError, match=f"t\\.csv\\.gz, {message}"):
            read_table(path, 2, "int")


def test_read_table_names_where_a_truncated_gzip_stops(tmp_path):
    path = tmp_path / "t.csv.gz"
    write_text(path, "".join(f"{i},{i + 1}\n" for i in range(50_000)))
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(ValueError, match=r"t\.csv\.gz: unreadable from line [1-9]\d* on \("):
        read_table(path, 2, "int")


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


def write_edge_signal_folder(root, n: int = 480, degree: int = 4, seed: int = 0):
    """An ogbn-proteins raw folder whose labels only the edge features carry.

    Node ``i`` has 8 hidden bits ``b_i``; task ``t`` is ``b_i[t mod 8]``. Pair
    ``(u, v)`` has features ``0.1 + 0.4 (b_u + b_v) + 0.1 U(0, 1)``, so a node's
    mean incident feature ``k`` is ``0.4 b_k`` above its neighbours' average
    (noise about 0.07 at ``degree`` 4 pairs a node): the bits are readable
    from the edge features. The pairs are a ring plus uniform random pairs,
    drawn without looking at the bits, and the node features are one
    constant column: without the edge features nothing tells nodes apart.
    Split by "species" into train / valid / test halves, sixths and thirds.
    """
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2, (n, 8))
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n], axis=1)
    u = rng.integers(0, n, (degree - 1) * n)
    v = (u + rng.integers(1, n, u.size)) % n  # no self-loops
    edges = np.concatenate([ring, np.stack([u, v], axis=1)])
    feats = 0.1 + 0.4 * (bits[edges[:, 0]] + bits[edges[:, 1]]) + 0.1 * rng.random((len(edges), 8))
    raw = root / "ogbn_proteins" / "raw"
    write(raw / "edge.csv.gz", edges)
    write(raw / "edge-feat.csv.gz", np.round(feats, 4))
    write(raw / "node-label.csv.gz", bits[:, np.arange(NUM_TASKS) % 8])
    order = rng.permutation(n)
    cuts = {
        "train": order[: n // 2],
        "valid": order[n // 2 : 2 * n // 3],
        "test": order[2 * n // 3 :],
    }
    species = np.zeros(n, int)
    for g, (key, ids) in enumerate(cuts.items()):
        species[ids] = TAXONOMY_IDS[g]  # as OGB's node_species holds them
        write(root / "ogbn_proteins" / "split" / "species" / f"{key}.csv.gz", np.sort(ids))
    write(raw / "node_species.csv.gz", species)
    write(raw / "num-node-list.csv.gz", [n])
    write(raw / "num-edge-list.csv.gz", [len(edges)])


def test_learns_the_labels_from_the_edge_features_alone(tmp_path):
    """The pipeline's steps from a raw folder of 240 nodes
    (:func:`write_edge_signal_folder`) to a one-layer GraphSAGE, without the CLI
    (the slow :func:`test_cli_learns_the_labels_from_the_edge_features_alone` runs
    it): with the edge features (their incident means as node features) test
    ROC-AUC > 0.9, without them < 0.65.

    Chance cannot pass either bound: a score independent of the labels has a
    per-task ROC-AUC of 0.5 with a standard deviation of about 0.065 on 80 test
    nodes (about 40 positives), and the 112 tasks are 8 independent bits, so
    their mean deviates by about 0.023: 0.9 is 17 of those away, and 0.65 about
    6.5. (Without edge features every node's input is the same constant and every
    node has a neighbour, so SAGE scores all nodes alike: 0.5 up to rounding.)
    """
    write_edge_signal_folder(tmp_path, n=240)
    dataset = load("ogbn-proteins", tmp_path)
    scores = {}
    for use in (True, False):
        data = node_data(use_edge_features(dataset, use), "sage", normalize_features="none")
        model = sage(data.features.shape[1], NUM_TASKS, hidden=16, num_layers=1, dropout_rate=0.0)
        config = TrainConfig(epochs=20, learning_rate=0.1, patience=None, epochs_per_call=20)
        scores[use] = float(fit(model, data, config, objective=MULTILABEL).test_acc[0])
    assert scores[True] > 0.9 and scores[False] < 0.65, scores


@pytest.mark.slow
def test_cli_learns_the_labels_from_the_edge_features_alone(tmp_path):
    """Only the edge features carry the labels (:func:`write_edge_signal_folder`):
    ``sparsegcn train --model sage`` reads them (``--edge-features``, the default:
    node features are the incident edges' means) and scores ROC-AUC > 0.9 on the
    160 test nodes; with ``--no-edge-features`` it cannot beat chance.

    Chance cannot pass either bound: a score independent of the labels has a
    per-task ROC-AUC of 0.5 with a standard deviation of about 0.046 on 160 test
    nodes (about 80 positives), and the 112 tasks are 8 independent bits, so
    their mean deviates by about 0.016: 0.9 is 25 of those away, and 0.65 about 9.
    """
    write_edge_signal_folder(tmp_path)
    reports = {}
    for flag in ("--edge-features", "--no-edge-features"):
        out = tmp_path / f"{flag}.json"
        argv = ["train", "--dataset", "ogbn-proteins", "--root", str(tmp_path), "--model", "sage"]
        argv += ["--fanouts", "none", "--epochs", "100", "--hidden", "16", "--lr", "0.05"]
        argv += ["--dropout", "0", "--patience", "0", "--no-progress", "--json", str(out), flag]
        assert main(argv) == 0
        reports[flag] = json.loads(out.read_text())
    with_features, without = reports["--edge-features"], reports["--no-edge-features"]
    assert with_features["metric"] == "rocauc" and with_features["num_nodes"] == 480
    assert with_features["config"]["edge_features"] and not without["config"]["edge_features"]
    assert with_features["test_rocauc_mean"] > 0.9, with_features["test_rocauc_mean"]
    assert without["test_rocauc_mean"] < 0.65, without["test_rocauc_mean"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sampling", "parallelism"),
    [
        (["--fanouts", "none"], "edge_sharded"),
        (["--fanouts", "10,10", "--batch-size", "120"], "data_parallel"),
    ],
    ids=["edge-sharded", "data-parallel"],
)
def test_cli_trains_multilabel_on_2_devices(tmp_path, sampling, parallelism):
    """``--devices 2`` on the edge-signal folder (:func:`write_edge_signal_folder`):
    full-batch SAGE edge-sharded, sampled SAGE data parallel, both learning the
    labels (ROC-AUC > 0.9 on 160 test nodes; chance: see
    :func:`test_cli_learns_the_labels_from_the_edge_features_alone`)."""
    write_edge_signal_folder(tmp_path)
    out = tmp_path / "report.json"
    argv = ["train", "--dataset", "ogbn-proteins", "--root", str(tmp_path), "--model", "sage"]
    argv += [*sampling, "--devices", "2", "--epochs", "60", "--hidden", "16"]
    argv += ["--lr", "0.05", "--dropout", "0", "--patience", "0"]
    argv += ["--no-progress", "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert (report["devices"], report["parallelism"]) == (2, parallelism)
    assert report["metric"] == "rocauc" and report["test_rocauc_mean"] > 0.9, report

"""ogbn-mag's raw layout and the synthetic twin (sparsegcn/datasets/mag.py)."""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import re
import shutil

import numpy as np
import pytest
from hetero_graphs import tiny_spec

from sparsegcn.datasets.mag import (
    MAG_NUM_EDGES,
    MAG_NUM_NODES,
    HeteroDataset,
    MagSpec,
    generate_mag,
    load_mag,
    load_mag_raw,
    write_mag_raw,
)

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")


def test_full_size_counts_are_ogbs():
    spec = MagSpec()
    assert dict(spec.num_nodes) == MAG_NUM_NODES and sum(MAG_NUM_NODES.values()) == 1_939_743
    assert dict(spec.num_edges) == MAG_NUM_EDGES and sum(MAG_NUM_EDGES.values()) == 21_111_007
    assert (spec.num_classes, spec.num_features) == (349, 128)
    assert sum(spec.split_sizes.values()) == MAG_NUM_NODES["paper"]


def test_synthetic_counts_split_and_typed_homophily():
    spec = tiny_spec()
    data = generate_mag(spec, seed=0)
    assert data.graph.num_nodes == dict(spec.num_nodes)
    assert data.graph.num_edges == dict(spec.num_edges)
    assert data.features["paper"].shape == (400, 8) and data.features["paper"].dtype == np.float32
    assert {k: len(v) for k, v in data.split.items()} == {"train": 200, "valid": 100, "test": 100}
    assert len(np.unique(np.concatenate(list(data.split.values())))) == 400
    assert data.labels.min() == 0 and data.labels.max() == 3
    venue = data.labels
    cites = data.graph.relation(CITES)
    same = (venue[np.asarray(cites.senders)] == venue[np.asarray(cites.receivers)]).mean()
    assert same > 0.85  # homophily 0.9 plus chance agreements
    # Two papers of one author mostly share its venue: the typed graph carries the label.
    w = data.graph.relation(WRITES)
    a, p = np.asarray(w.senders), np.asarray(w.receivers)
    order = np.argsort(a, kind="stable")
    a, p = a[order], p[order]
    pair = a[1:] == a[:-1]
    assert (venue[p[1:]][pair] == venue[p[:-1]][pair]).mean() > 0.7
    # Same seed, same data; the features carry no venue signal at feature_signal=0.
    again = generate_mag(spec, seed=0)
    np.testing.assert_array_equal(again.features["paper"], data.features["paper"])
    means = np.stack([data.features["paper"][venue == c].mean(0) for c in range(4)])
    assert np.abs(means).max() < 0.6


def test_scaled_spec_and_load_mag_synthetic():
    spec = MagSpec().scaled(0.001)
    assert spec.num_nodes["author"] == 1135 and spec.num_edges[WRITES] == 7146
    assert spec.num_nodes["paper"] == 349 * 3  # at least three papers per venue
    with pytest.raises(ValueError, match="scale must be in"):
        MagSpec().scaled(0.0)
    with pytest.raises(ValueError, match="unknown heterogeneous dataset"):
        load_mag("ogbn-arxiv")


def test_raw_layout_round_trip(tmp_path):
    data = generate_mag(tiny_spec(feature_signal=1.0), seed=1)
    folder = write_mag_raw(data, tmp_path / "ogbn_mag")
    back = load_mag_raw(folder)
    assert back.target == "paper" and back.graph.num_nodes == data.graph.num_nodes
    assert set(back.graph.edge_types) == set(data.graph.edge_types)
    for key in data.graph.edge_types:
        np.testing.assert_array_equal(
            back.graph.relation(key).senders, data.graph.relation(key).senders
        )
        np.testing.assert_array_equal(
            back.graph.relation(key).receivers, data.graph.relation(key).receivers
        )
    np.testing.assert_allclose(back.features["paper"], data.features["paper"], rtol=1e-6)
    np.testing.assert_array_equal(back.labels, data.labels)
    for part in ("train", "valid", "test"):
        np.testing.assert_array_equal(back.split[part], data.split[part])
    with pytest.raises(FileExistsError):
        write_mag_raw(data, folder)
    loaded = load_mag("ogbn-mag", tmp_path)
    assert loaded.num_classes == 349 and loaded.stats()["num_edges"] == 3100


@pytest.mark.skipif(importlib.util.find_spec("ogb") is None, reason="ogb is not installed")
def test_reader_agrees_with_ogbs_own(tmp_path):
    from sparsegcn.datasets.ogb import import_ogb

    import_ogb()  # ogb without its online version check
    from ogb.io.read_graph_raw import (
        read_csv_heterograph_raw,
        read_node_label_hetero,
        read_nodesplitidx_split_hetero,
    )

    data = generate_mag(tiny_spec(), seed=2)
    folder = write_mag_raw(data, tmp_path / "ogbn_mag")
    ours = load_mag_raw(folder)
    theirs = read_csv_heterograph_raw(str(folder / "raw"))[0]
    assert theirs["num_nodes_dict"] == ours.graph.num_nodes
    for key, edge_index in theirs["edge_index_dict"].items():
        view = ours.graph.relation(key)
        np.testing.assert_array_equal(edge_index, np.stack([view.senders, view.receivers]))
    np.testing.assert_allclose(theirs["node_feat_dict"]["paper"], ours.features["paper"])
    np.testing.assert_array_equal(
        read_node_label_hetero(str(folder / "raw"))["paper"][:, 0], ours.labels
    )
    train, _valid, test = read_nodesplitidx_split_hetero(str(folder / "split" / "time"))
    np.testing.assert_array_equal(train["paper"], ours.split["train"])
    np.testing.assert_array_equal(test["paper"], ours.split["test"])


def test_bad_raw_files_fail_naming_them(tmp_path):
    data = generate_mag(tiny_spec(), seed=3)
    folder = write_mag_raw(data, tmp_path / "ogbn_mag")
    edge_file = folder / "raw" / "relations" / "paper___cites___paper" / "edge.csv.gz"
    with gzip.open(edge_file, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    rows[5, 1] = 400
    with gzip.open(edge_file, "wt") as f:
        np.savetxt(f, rows, fmt="%d", delimiter=",")
    with pytest.raises(
        ValueError, match=r"receivers of relation \('paper', 'cites', 'paper'\)\[5\] = 400"
    ):
        load_mag_raw(folder)
    (folder / "split" / "time" / "paper" / "valid.csv.gz").unlink()
    edge_file.unlink()
    with pytest.raises(FileNotFoundError, match=r"edge\.csv\.gz is missing"):
        load_mag_raw(folder)
    with pytest.raises(FileNotFoundError, match=r"mag\.zip"):
        load_mag("ogbn-mag", tmp_path / "elsewhere")


# -- bad input -----------------------------------------------------------------
RAW = "raw/"
SPLIT = "split/time/paper/"
FEAT = RAW + "node-feat/paper/node-feat.csv.gz"
LABEL = RAW + "node-label/paper/node-label.csv.gz"


@pytest.fixture(scope="module")
def raw_base(tmp_path_factory):
    """The tiny spec's raw layout, written once; tests corrupt copies of it."""
    data = generate_mag(tiny_spec(), seed=4)
    return write_mag_raw(data, tmp_path_factory.mktemp("mag") / "ogbn_mag")


def _corrupt(base, tmp_path, relative: str, edit):
    """A copy of ``base`` whose ``relative`` file holds ``edit(its lines)`` (gzip text),
    or is deleted when ``edit`` is ``None``; returns ``(folder, that file)``."""
    folder = tmp_path / "ogbn_mag"
    shutil.copytree(base, folder)
    path = folder / relative
    if edit is None:
        path.unlink()
    else:
        lines = gzip.decompress(path.read_bytes()).decode().splitlines()
        path.write_bytes(gzip.compress("".join(f"{line}\n" for line in edit(lines)).encode()))
    return folder, path


def test_hetero_dataset_refuses_repeated_and_shared_split_ids():
    data = generate_mag(tiny_spec(), seed=4)
    train, test = data.split["train"], data.split["test"]
    with pytest.raises(
        ValueError,
        match=rf"split\['train'\] of 'paper' nodes: node {train[0]} appears more than once in "
        r"the 'train' split \(1 repeated id\(s\)\)",
    ):
        dataclasses.replace(data, split={**data.split, "train": np.append(train, train[0])})
    with pytest.raises(
        ValueError,
        match=rf"split\['test'\] of 'paper' nodes: node {train[0]} is in both the 'train' and the "
        r"'test' split \(2 shared node\(s\)\); the splits must be disjoint",
    ):
        HeteroDataset(**{**data.__dict__, "split": {**data.split, "test": np.r_[test, train[:2]]}})


def test_raw_split_with_repeated_or_shared_ids_is_refused_naming_the_file(raw_base, tmp_path):
    train = gzip.decompress((raw_base / SPLIT / "train.csv.gz").read_bytes()).decode().split()
    folder, path = _corrupt(raw_base, tmp_path / "a", SPLIT + "train.csv.gz", lambda x: x + x[:5])
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{path}: node {min(train[:5], key=int)} appears more than once in the "
            "'train' split (5 repeated id(s)); each node may appear once"
        ),
    ):
        load_mag_raw(folder)
    folder, path = _corrupt(
        raw_base, tmp_path / "b", SPLIT + "test.csv.gz", lambda x: x + train[:5]
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"{path}: node {min(train[:5], key=int)} is in both the 'train' and the "
            "'test' split (5 shared node(s)); the splits must be disjoint"
        ),
    ):
        load_mag_raw(folder)


def _ragged(lines):
    lines[3] = ",".join(lines[3].split(",")[:7])
    return lines


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_ragged, r", line 4: expected 8 comma-separated finite float32 numbers, got '"),
        (lambda lines: ["nan," * 7 + "nan", *lines[1:]], r", line 1: expected 8 .* got 'nan,"),
        # Before: read as inf (finite as float64, not as the float32 it is kept as).
        (lambda lines: ["1e39," * 7 + "1", *lines[1:]], r", line 1: expected 8 .* got '1e39,"),
        (lambda lines: lines[1:], r": expected 400 lines, got 399"),
        (None, r" is missing"),
    ],
    ids=["ragged", "nan", "past-float32", "short", "missing"],
)
def test_bad_feature_file_is_refused_naming_it_and_the_line(raw_base, tmp_path, edit, message):
    folder, path = _corrupt(raw_base, tmp_path, FEAT, edit)
    error = FileNotFoundError if edit is None else ValueError
    with pytest.raises(error, match=re.escape(str(path)) + message):
        load_mag_raw(folder)


@pytest.mark.parametrize(
    ("relative", "edit", "message"),
    [
        (
            RAW + "num-node-dict.csv.gz",
            lambda lines: [lines[0], lines[1].replace("300", "abc", 1)],
            r": the count of 'author' nodes is 'abc', not a non-negative integer",
        ),
        (
            RAW + "nodetype-has-label.csv.gz",
            lambda lines: [lines[0], lines[1].replace("True", "yes")],
            r": the flag of 'paper' is 'yes'; expected True or False",
        ),
        (
            LABEL,
            lambda lines: ["-1", *lines[1:]],
            r": labels\[0\] = -1\.0 is not a class id",
        ),
        (LABEL, lambda lines: lines[1:], r": expected 400 lines \(one per paper\), got 399"),
        (
            SPLIT + "test.csv.gz",
            lambda lines: ["400"],
            r", line 1: paper id 400 is outside \[0, 400\)",
        ),
    ],
    ids=["count", "flag", "negative-label", "short-labels", "split-id"],
)
def test_bad_raw_file_is_refused_naming_it(raw_base, tmp_path, relative, edit, message):
    folder, path = _corrupt(raw_base, tmp_path, relative, edit)
    with pytest.raises(ValueError, match=re.escape(str(path)) + message):
        load_mag_raw(folder)


def test_truncated_header_file_is_a_corrupt_file_naming_it(raw_base, tmp_path):
    from sparsegcn.files import CorruptFileError

    folder, path = _corrupt(raw_base, tmp_path, RAW + "num-node-dict.csv.gz", lambda lines: lines)
    path.write_bytes(path.read_bytes()[:-6])
    with pytest.raises(CorruptFileError, match=re.escape(str(path)) + ": truncated"):
        load_mag_raw(folder)


def test_a_scale_too_small_for_the_splits_is_refused(capsys):
    from sparsegcn.cli import main

    message = (
        "synthetic:mag at scale 1e-09 has 1 paper(s) in the 'train' split, fewer than its 349 "
        "venues; use a larger --scale (e.g. 0.00056)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        MagSpec().scaled(1e-9)
    smallest = MagSpec().scaled(0.00056)
    assert dict(smallest.split_sizes) == {"train": 353, "valid": 36, "test": 23}
    for scale in (0.001, 0.01):  # what the test suite and the docs use
        assert min(MagSpec().scaled(scale).split_sizes.values()) >= 10
    # A split already below the minimum is not refused for staying there.
    assert dict(tiny_spec(num_classes=300).scaled(1.0).split_sizes)["train"] == 200
    few_tests = tiny_spec(split_sizes={"train": 200, "valid": 100, "test": 40})
    with pytest.raises(
        ValueError,
        match=r"has 4 paper\(s\) in the 'test' split, fewer than 10; "
        r"use a larger --scale \(e\.g\. 0\.24\)",
    ):
        few_tests.scaled(0.1)
    argv = ["info", "--dataset", "synthetic:mag", "--scale", "1e-9", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_label_past_ogbn_mags_venues_is_refused_naming_the_file_and_line(raw_base, tmp_path):
    """max(label) + 1 made one corrupt label of 100000 into 100,001 classes."""
    folder, path = _corrupt(raw_base, tmp_path, LABEL, lambda lines: ["100000", *lines[1:]])
    with pytest.raises(
        ValueError,
        match=re.escape(f"{path}, line 1: label 100000 is outside [0, 349): ogbn-mag has 349"),
    ):
        load_mag_raw(folder)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda d: {"labels": d.labels + 0.5}, ValueError, r"labels must have an integer dtype"),
        (lambda d: {"num_classes": 4.0}, TypeError, r"num_classes must be an integer >= 1"),
        (lambda d: {"num_classes": 0}, ValueError, r"num_classes must be >= 1, got 0"),
        (
            lambda d: {"labels": np.r_[d.labels[:-1], 7]},
            ValueError,
            r"labels\[399\] = 7 is outside \[0, 4\) \(use -1 only for unlabelled nodes\)",
        ),
        (
            lambda d: {"split": {**d.split, "train": d.split["train"].astype(float)}},
            ValueError,
            r"split\['train'\] must have an integer dtype, got float64",
        ),
        (
            lambda d: {"split": {"train": d.split["train"], "test": d.split["test"]}},
            ValueError,
            r"split must have keys \('train', 'valid', 'test'\), got \['test', 'train'\]",
        ),
        (lambda d: {"metric": "rocauc"}, ValueError, r"metric must be 'acc'"),
    ],
    ids=[
        "float-labels",
        "float-classes",
        "no-classes",
        "label-past-C",
        "float-split",
        "no-valid",
        "metric",
    ],
)
def test_hetero_dataset_refuses_bad_labels_classes_and_splits(change, error, message):
    data = generate_mag(tiny_spec(), seed=4)
    with pytest.raises(error, match=message):
        dataclasses.replace(data, **change(data))


def test_hetero_dataset_refuses_a_node_type_without_nodes():
    """Training crashed inside JAX gathering from the empty type."""
    from sparsegcn.hetero import HeteroGraph

    data = generate_mag(tiny_spec(), seed=4)
    relations = {
        k: (np.asarray(v.senders), np.asarray(v.receivers)) for k, v in data.graph.relations.items()
    }
    relations[("author", "affiliated_with", "institution")] = (np.zeros(0, int), np.zeros(0, int))
    graph = HeteroGraph({**data.graph.num_nodes, "institution": 0}, relations)
    with pytest.raises(ValueError, match=r"node type 'institution' has no nodes"):
        dataclasses.replace(data, graph=graph)

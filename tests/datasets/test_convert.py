"""The streaming OGB converter against a NumPy oracle, on tiny raw layouts made here."""

import gzip
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from sparsegcn.cli import main as cli_main
from sparsegcn.datasets import convert as convert_module
from sparsegcn.datasets import load
from sparsegcn.datasets.convert import OGB_LAYOUTS, _Buckets, convert_ogb, main

N, F = 12, 3
# Repeats (2 -> 3 twice), a reciprocated pair (0 <-> 1), a self-loop (5 -> 5), node 11 isolated.
EDGES = np.array(
    [[0, 1], [1, 0], [2, 3], [2, 3], [3, 4], [5, 5], [6, 7], [8, 0], [9, 10], [10, 2], [4, 9]]
)
SPLIT = {"train": [0, 1, 2, 3, 4], "valid": [5, 6], "test": [7, 8, 9]}


def write_csv(path: Path, rows, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, np.asarray(rows).reshape(len(rows), -1), fmt=fmt, delimiter=",")


def features() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N, F)).astype(np.float32)


def labels(num_classes: int) -> np.ndarray:
    return np.arange(N) * 7 % num_classes


def write_raw(root: Path, name: str, *, fortran=False, edges=EDGES, label_values=None) -> Path:
    """OGB's raw layout of ``name`` (CSV, or ``data.npz`` for the binary datasets)."""
    layout = OGB_LAYOUTS[name]
    folder = root / name.replace("-", "_")
    raw = folder / "raw"
    raw.mkdir(parents=True)
    y = labels(layout.num_classes).astype(np.float64) if label_values is None else label_values
    if layout.binary:
        edge_index = edges.T.astype(np.int64)
        np.savez(
            raw / "data.npz",
            edge_index=np.asfortranarray(edge_index) if fortran else edge_index,
            num_nodes_list=np.array([N]),
            num_edges_list=np.array([edges.shape[0]]),
            node_feat=features(),
        )
        np.savez(raw / "node-label.npz", node_label=y[:, None])
    else:
        write_csv(raw / "edge.csv.gz", edges, "%d")
        write_csv(raw / "node-feat.csv.gz", features(), "%.9g")
        write_csv(raw / "node-label.csv.gz", y, "%g")
        write_csv(raw / "num-node-list.csv.gz", [N], "%d")
        write_csv(raw / "num-edge-list.csv.gz", [edges.shape[0]], "%d")
    for part, idx in SPLIT.items():
        write_csv(folder / "split" / layout.split / f"{part}.csv.gz", idx, "%d")
    return folder


def oracle_adjacency(edges, merge_repeats: bool) -> np.ndarray:
    """Dense ``A[receiver, sender]`` holding both directions of every raw edge."""
    both = np.concatenate([edges, edges[:, ::-1]])
    if merge_repeats:
        both = np.unique(both, axis=0)
    a = np.zeros((N, N))
    np.add.at(a, (both[:, 1], both[:, 0]), 1.0)
    return a


def adjacency(graph) -> np.ndarray:
    a = np.zeros((graph.num_nodes, graph.num_nodes))
    np.add.at(a, (np.asarray(graph.receivers), np.asarray(graph.senders)), 1.0)
    return a


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products", "ogbn-papers100M"])
@pytest.mark.parametrize(("chunk_rows", "group_edges"), [(3, 4), (1000, 1 << 20)])
def test_converted_dataset_equals_the_oracle(tmp_path, name, chunk_rows, group_edges):
    write_raw(tmp_path, name)
    out = convert_ogb(
        name, tmp_path, tmp_path / "out", chunk_rows=chunk_rows, group_edges=group_edges
    )
    dataset = load(str(out))
    layout = OGB_LAYOUTS[name]
    expected = oracle_adjacency(EDGES, merge_repeats=not layout.add_inverse_edge)
    np.testing.assert_array_equal(adjacency(dataset.graph), expected)
    assert dataset.graph.num_edges == int(expected.sum())
    assert dataset.num_edges == EDGES.shape[0] and dataset.name == name
    np.testing.assert_array_equal(dataset.features, features())
    np.testing.assert_array_equal(dataset.labels, labels(layout.num_classes))
    for key, idx in SPLIT.items():
        np.testing.assert_array_equal(dataset.split[key], idx)
    assert dataset.num_classes == layout.num_classes
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", name.replace("-", "_")])


def test_binary_layout_fortran_order_nan_labels_and_float16(tmp_path):
    y = labels(172).astype(np.float64)
    y[[10, 11]] = np.nan
    write_raw(tmp_path, "ogbn-papers100M", fortran=True, label_values=y)
    out = convert_ogb(
        "ogbn-papers100M", tmp_path, tmp_path / "out", features_dtype="float16", chunk_rows=4
    )
    dataset = load(str(out))
    np.testing.assert_array_equal(adjacency(dataset.graph), oracle_adjacency(EDGES, True))
    assert dataset.features.dtype == np.float16
    np.testing.assert_array_equal(dataset.features, features().astype(np.float16))
    assert dataset.labels[10] == -1 and dataset.labels[11] == -1 and dataset.labels[3] == 21


def test_bad_raw_files_name_the_file_and_entry(tmp_path):
    bad = EDGES.copy()
    bad[6] = [6, N]
    write_raw(tmp_path / "a", "ogbn-arxiv", edges=bad)
    with pytest.raises(ValueError, match=r"edge.csv.gz: edge 6: target 12 is outside \[0, 12\)"):
        convert_ogb("ogbn-arxiv", tmp_path / "a", tmp_path / "out", chunk_rows=4)
    y = labels(40).astype(np.float64)
    y[4] = 40
    write_raw(tmp_path / "b", "ogbn-arxiv", label_values=y)
    with pytest.raises(ValueError, match=r"node-label.csv.gz: node 4: label 40 is outside"):
        convert_ogb("ogbn-arxiv", tmp_path / "b", tmp_path / "out")
    folder = write_raw(tmp_path / "c", "ogbn-arxiv")
    (folder / "raw" / "node-feat.csv.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"node-feat\.csv\.gz is missing"):
        convert_ogb("ogbn-arxiv", tmp_path / "c", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="does not exist; download it"):
        convert_ogb("ogbn-products", tmp_path / "c", tmp_path / "out")
    with pytest.raises(ValueError, match="unknown OGB dataset 'ogbn-mag'"):
        convert_ogb("ogbn-mag", tmp_path / "c", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_groups_respect_the_edge_budget(tmp_path):
    buckets = _Buckets(tmp_path, 100, 10)
    buckets.close()
    buckets.sizes[:] = [3, 3, 3, 9, 1, 1, 1, 1, 0, 2]
    groups = buckets.groups(6)
    assert groups == [(0, 2), (2, 3), (3, 4), (4, 10)]
    # Every group fits the budget unless it is a single oversized bucket.
    for b0, b1 in groups:
        assert buckets.sizes[b0:b1].sum() <= 6 or b1 == b0 + 1


def test_module_command_line(tmp_path, capsys):
    write_raw(tmp_path, "ogbn-arxiv")
    out = tmp_path / "out"
    argv = ["ogbn-arxiv", "--root", str(tmp_path), "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert load(str(out)).num_nodes == N
    assert main(argv) == 2
    assert "not empty; pass overwrite=True" in capsys.readouterr().err


@pytest.mark.ogb
@pytest.mark.skipif(
    importlib.util.find_spec("ogb") is None or importlib.util.find_spec("torch") is None,
    reason="needs the optional extra: torch (CPU) and sparsegcn[ogb]",
)
@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products"])
def test_matches_ogbs_own_loader(tmp_path, name):
    from sparsegcn.datasets.ogb import load_ogb

    folder = write_raw(tmp_path, name)
    (folder / "processed").mkdir()
    (folder / "RELEASE_v1.txt").touch()
    if name == "ogbn-arxiv":  # ogb also reads arxiv's publication years
        write_csv(folder / "raw" / "node_year.csv.gz", 2000 + np.arange(N) % 20, "%d")
    ours = load(str(convert_ogb(name, tmp_path, tmp_path / "out", chunk_rows=5)))
    theirs = load_ogb(name, tmp_path, download=False)
    np.testing.assert_array_equal(adjacency(ours.graph), adjacency(theirs.graph))
    np.testing.assert_array_equal(ours.features, theirs.features)
    np.testing.assert_array_equal(ours.labels, theirs.labels)
    assert ours.num_edges == theirs.num_edges and ours.metric == theirs.metric
    for key in SPLIT:
        np.testing.assert_array_equal(ours.split[key], theirs.split[key])


@pytest.mark.ogb
@pytest.mark.skipif(
    importlib.util.find_spec("ogb") is None or importlib.util.find_spec("torch") is None,
    reason="needs the optional extra: torch (CPU) and sparsegcn[ogb]",
)
@pytest.mark.parametrize(
    "extra",
    [
        [],
        pytest.param(
            ["--model", "sage", "--fanouts", "3,2", "--batch-size", "4"], marks=pytest.mark.slow
        ),
    ],
)
def test_train_report_carries_ogbs_evaluator_metric(tmp_path, extra):
    write_raw(tmp_path, "ogbn-arxiv")
    out = convert_ogb("ogbn-arxiv", tmp_path, tmp_path / "out")
    report = tmp_path / "report.json"
    argv = ["train", "--dataset", str(out), "--epochs", "3", "--seeds", "2", "--json", str(report)]
    assert cli_main([*argv, *extra, "--no-progress"]) == 0
    result = json.loads(report.read_text())
    official = result["ogb_evaluator"]
    assert official["metric"] == "acc" and len(official["test"]) == 2
    # ogb's accuracy of the best params' predictions is our reported test accuracy.
    np.testing.assert_allclose(official["test"], result["test_acc"], atol=1e-6)


@pytest.mark.ogb
@pytest.mark.skipif(
    importlib.util.find_spec("ogb") is None or importlib.util.find_spec("torch") is None,
    reason="needs the optional extra: torch (CPU) and sparsegcn[ogb]",
)
@pytest.mark.parametrize("reorder", ["none", "degree"])
def test_predict_report_carries_ogbs_evaluator_metric(tmp_path, capsys, reorder):
    write_raw(tmp_path, "ogbn-arxiv")
    out = convert_ogb("ogbn-arxiv", tmp_path, tmp_path / "out")
    ckpt, summary = tmp_path / "ckpt", tmp_path / "predict.json"
    argv = ["train", "--dataset", str(out), "--epochs", "3", "--seeds", "2", "--no-progress"]
    assert cli_main([*argv, "--reorder", reorder, "--checkpoint", str(ckpt)]) == 0
    argv = ["predict", "--checkpoint", str(ckpt), "--out", str(tmp_path / "p.npy")]
    assert cli_main([*argv, "--json", str(summary)]) == 0
    assert "ogb Evaluator test acc: " in capsys.readouterr().out
    result = json.loads(summary.read_text())
    official = result["ogb_evaluator"]
    assert official["metric"] == "acc" and len(official["test"]) == 2
    # ogb's accuracy of the predictions (in the dataset's order) is ours, and training's.
    np.testing.assert_allclose(official["test"], result["test_acc"], atol=1e-6)
    np.testing.assert_allclose(official["test"], result["reported_test_acc"], atol=1e-6)
    np.testing.assert_allclose(official["test_mean"], np.mean(result["test_acc"]), atol=1e-6)


def test_predict_report_has_no_ogb_metric_for_other_datasets(tmp_path):
    ckpt, summary = tmp_path / "ckpt", tmp_path / "predict.json"
    argv = ["train", "--scale", "0.1", "--epochs", "2", "--no-progress"]
    assert cli_main([*argv, "--checkpoint", str(ckpt)]) == 0
    argv = ["predict", "--checkpoint", str(ckpt), "--out", str(tmp_path / "p.npy")]
    assert cli_main([*argv, "--json", str(summary)]) == 0
    assert "ogb_evaluator" not in json.loads(summary.read_text())


def test_a_non_empty_target_is_refused_before_any_work(tmp_path, monkeypatch):
    write_raw(tmp_path, "ogbn-arxiv")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")

    def no_reading(*args, **kwargs):
        raise AssertionError("the raw files were read")

    monkeypatch.setattr(convert_module, "_edge_chunks", no_reading)
    with pytest.raises(ValueError, match="not empty; pass overwrite=True"):
        convert_ogb("ogbn-arxiv", tmp_path, tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    # overwrite replaces a dataset folder only, never a folder of the user's files
    with pytest.raises(ValueError, match=r"out is not a sparsegcn dataset folder .*keep\.txt"):
        convert_ogb("ogbn-arxiv", tmp_path, tmp_path / "out", overwrite=True)
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    monkeypatch.undo()
    out = convert_ogb("ogbn-arxiv", tmp_path, tmp_path / "ds")
    out = convert_ogb("ogbn-arxiv", tmp_path, out, overwrite=True)
    assert load(str(out)).num_nodes == N
    nested = convert_ogb("ogbn-arxiv", tmp_path, tmp_path / "new" / "deeper" / "out")
    assert load(str(nested)).num_nodes == N


def test_a_full_disk_under_the_buckets_is_an_error_not_lost_edges(tmp_path, monkeypatch):
    # ndarray.tofile dropped a small bucket append on a full disk without an error; the
    # buckets then read short, and the CSR pass allocated from garbage ("85 TiB").
    import errno

    write_raw(tmp_path, "ogbn-arxiv")

    def full(f, array):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(convert_module, "write_array", full)
    with pytest.raises(OSError, match=r"^cannot write the temporary edge buckets in .*: No space"):
        convert_ogb("ogbn-arxiv", tmp_path, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ogbn_arxiv"]
    monkeypatch.undo()
    (tmp_path / "b").mkdir()
    buckets = _Buckets(tmp_path / "b", 10, 2)
    buckets.add(np.array([1, 7]), np.array([2, 3]))
    buckets.close()
    buckets.path(1).write_bytes(b"")  # what a lost write leaves
    with pytest.raises(OSError, match=r"bucket00001\.bin holds 0 keys, 1 were written"):
        buckets.read(0, 2)


def test_raw_files_to_be_downloaded_into_out_are_refused_first(tmp_path, monkeypatch):
    def no_download(*args, **kwargs):
        raise AssertionError("downloaded")

    monkeypatch.setattr(convert_module, "download_verified", no_download)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"raw files' folder .*out/ogbn_arxiv lies inside out"):
        convert_ogb("ogbn-arxiv", out, out, download=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("array", "words"),
    [
        ("num_edges_list", r"num_edges_list says \[99\] but edge_index holds 11 edges"),
        ("node_feat", r"node_feat has shape \(11, 3\) but num_nodes_list says 12 nodes"),
        ("node_label", r"node_label has shape \(13, 1\) but num_nodes_list says 12 nodes"),
    ],
)
def test_binary_counts_are_checked_before_bucketing(tmp_path, monkeypatch, array, words):
    # Before: a wrong num_edges_list passed, and node_feat and node_label rows were found
    # wrong only after every edge had been bucketed (hours at papers100M's size).
    folder = write_raw(tmp_path, "ogbn-papers100M")
    raw = folder / "raw"
    data = dict(np.load(raw / "data.npz"))
    label = np.load(raw / "node-label.npz")["node_label"]
    if array == "num_edges_list":
        data[array] = np.array([99])
    elif array == "node_feat":
        data[array] = data[array][:-1]
    else:
        label = np.concatenate([label, label[:1]])
    np.savez(raw / "data.npz", **data)
    np.savez(raw / "node-label.npz", node_label=label)
    monkeypatch.setattr(convert_module, "_Buckets", None)  # bucketing would fail otherwise
    with pytest.raises(ValueError, match=words):
        convert_ogb("ogbn-papers100M", tmp_path, tmp_path / "out")


@pytest.mark.parametrize(
    ("relative", "text", "words"),
    [
        # Read as one flat list of ids (0, 1, 2, 3) before; ogb's loader refuses it.
        ("split/time/train.csv.gz", "0,1\n2,3\n", r"train\.csv\.gz: line 1: expected one node id"),
        # Only the first line was used before.
        ("raw/num-edge-list.csv.gz", "11\n5\n", r"must hold one edge count .*\[\[11\], \[5\]\]"),
        ("raw/num-edge-list.csv.gz", "11,5\n", r"must hold one edge count .*\[\[11, 5\]\]"),
        ("raw/num-edge-list.csv.gz", "-1\n", r"must hold one edge count .*\[\[-1\]\]"),
        # Found only after every edge had been bucketed before.
        (
            "split/time/test.csv.gz",
            "7\n12\n",
            r"test\.csv\.gz: line 2: node 12 is outside \[0, 12\)",
        ),
    ],
)
def test_count_and_split_files_are_checked_before_bucketing(
    tmp_path, monkeypatch, relative, text, words
):
    folder = write_raw(tmp_path, "ogbn-arxiv")
    (folder / relative).write_bytes(gzip.compress(text.encode()))
    monkeypatch.setattr(convert_module, "_Buckets", None)  # bucketing would fail otherwise
    with pytest.raises(ValueError, match=words):
        convert_ogb("ogbn-arxiv", tmp_path, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ogbn_arxiv"]

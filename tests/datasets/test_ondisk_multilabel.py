"""Multi-label node datasets (ogbn-proteins' layout) in the on-disk format: labels ``[N, T]``
with missing entries, edge features moved with their edges, the ``node-multilabel`` task routed
by the folder, and the faults a multi-label folder can have refused naming the file."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from sparsegcn.cli import main
from sparsegcn.datasets import is_path, load, save
from sparsegcn.datasets.ondisk import (
    MANIFEST,
    FormatError,
    is_multilabel_ondisk,
    is_ondisk,
    load_ondisk,
    verify_checksums,
)
from sparsegcn.datasets.proteins import generate_proteins
from sparsegcn.datasets.to_disk import main as to_disk
from sparsegcn.tasks import task_name


def proteins():
    """synthetic:proteins at 265 nodes, with missing labels (-1) in some rows."""
    data = generate_proteins(0.002, seed=1)
    labels = np.array(data.labels)
    labels[:5, :3] = -1
    labels[10, 1:] = -1  # one task left
    return dataclasses.replace(data, labels=labels)


def edge_rows(graph) -> np.ndarray:
    """Every stored edge as a row ``(receiver, sender, features...)``, sorted: the
    multiset of edges with their features, whatever the order they are stored in."""
    rows = np.column_stack(
        [np.asarray(graph.receivers), np.asarray(graph.senders), np.asarray(graph.edge_features)]
    )
    return rows[np.lexsort(rows.T[::-1])]


@pytest.fixture
def saved(tmp_path):
    data = proteins()
    return data, save(data, tmp_path / "proteins")


def test_round_trip_keeps_labels_with_missing_entries_and_edge_features(saved):
    data, folder = saved
    assert is_ondisk(folder) and is_multilabel_ondisk(folder)
    assert task_name(str(folder)) == "node-multilabel" and is_path(str(folder))
    loaded = load(str(folder), verify=True)
    assert loaded.multilabel and loaded.labels.shape == (265, 112)
    np.testing.assert_array_equal(loaded.labels, data.labels)
    assert loaded.labels.dtype == np.int64 and (np.asarray(loaded.labels) == -1).sum() == 15 + 111
    assert not loaded.labels.flags.writeable  # the read-only map, not a copy
    for key in ("train", "valid", "test"):
        np.testing.assert_array_equal(loaded.split[key], data.split[key])
    np.testing.assert_array_equal(loaded.features, data.features)
    assert (loaded.name, loaded.metric, loaded.num_classes) == ("synthetic:proteins", "rocauc", 112)
    assert loaded.num_edges == data.num_edges and loaded.graph.num_edges == 2 * data.num_edges
    assert loaded.info["featureless"] is True and loaded.info["scale"] == 0.002
    # Stored sorted by (receiver, sender), each edge with its own features.
    assert loaded.graph.edges_sorted and loaded.graph.num_edge_features == 8
    np.testing.assert_array_equal(edge_rows(loaded.graph), edge_rows(data.graph))
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["multilabel"] is True and manifest["files"]["labels"]["shape"] == [265, 112]


def test_a_single_label_folder_stays_with_the_node_task(tmp_path):
    data = proteins()
    single = dataclasses.replace(
        data, labels=np.maximum(data.labels[:, 0], 0), num_classes=2, metric="acc"
    )
    folder = save(single, tmp_path / "single")
    assert not is_multilabel_ondisk(folder) and task_name(str(folder)) == "node"
    assert "multilabel" not in json.loads((folder / MANIFEST).read_text())
    assert not is_multilabel_ondisk(tmp_path / "nowhere")


def edit_manifest(folder, change) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    change(manifest)
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_each_multilabel_fault_is_one_error_naming_the_file(saved):
    data, folder = saved
    labels = np.array(data.labels)
    labels[7, 9] = 2
    np.save(folder / "labels.npy", labels)  # same dtype and shape: the manifest still agrees
    with pytest.raises(FormatError, match=r"labels.npy: labels\[7, 9\]: 2 is not 1, 0 or -1"):
        load_ondisk(folder)
    labels[7, 9] = 0
    first = int(data.split["valid"][3])
    labels[first] = -1
    np.save(folder / "labels.npy", labels)
    with pytest.raises(
        FormatError, match=rf"valid.npy: valid\[3\]: node {first} has no task labelled"
    ):
        load_ondisk(folder)
    edit_manifest(folder, lambda m: m.pop("multilabel"))
    with pytest.raises(FormatError, match=r"labels.npy: shape: must be \[265\] for num_nodes"):
        load_ondisk(folder)
    edit_manifest(folder, lambda m: m.update(multilabel="yes"))
    with pytest.raises(FormatError, match=r"manifest.json: multilabel: must be true or false"):
        load_ondisk(folder)
    edit_manifest(folder, lambda m: m.update(multilabel=True, num_classes=100))
    with pytest.raises(FormatError, match=r"labels.npy: shape: holds int64 \[265, 112\]|must be"):
        load_ondisk(folder)


def test_checksum_mismatch_and_missing_file_are_refused_naming_the_file(saved):
    _, folder = saved
    rows = np.load(folder / "edge_features.npy")
    rows[100, 3] = 0.5 if rows[100, 3] != 0.5 else 0.25
    np.save(folder / "edge_features.npy", rows)
    assert load_ondisk(folder).graph.num_edge_features == 8  # the hash is checked on request
    with pytest.raises(FormatError, match=r"edge_features.npy: sha256: checksum mismatch"):
        verify_checksums(folder)
    (folder / "labels.npy").unlink()
    with pytest.raises(FormatError, match=r"labels.npy: labels: missing"):
        load_ondisk(folder)


def test_to_disk_writes_synthetic_proteins_and_refuses_an_existing_folder(tmp_path, capsys):
    out = tmp_path / "p"
    argv = ["synthetic:proteins", "--scale", "0.002", "--seed", "1", "--out", str(out)]
    assert to_disk([*argv, "--no-progress"]) == 0
    data = generate_proteins(0.002, seed=1)
    np.testing.assert_array_equal(load(str(out)).labels, data.labels)
    # info reads the folder as the dataset it was written from.
    stats = {}
    generated = ["--scale", "0.002", "--seed", "1"]
    for dataset, extra in ((str(out), []), ("synthetic:proteins", generated)):
        path = tmp_path / f"{len(stats)}.json"
        argv_info = ["info", "--dataset", dataset, *extra, "--json", str(path), "--no-progress"]
        assert main(argv_info) == 0
        stats[dataset] = {k: v for k, v in json.loads(path.read_text()).items() if k != "load_s"}
        path.unlink()
    assert stats[str(out)] == stats["synthetic:proteins"]
    assert stats[str(out)]["num_edge_features"] == 8 and stats[str(out)]["num_classes"] == 112
    capsys.readouterr()
    assert to_disk([*argv, "--no-progress"]) == 2
    assert "not empty; pass overwrite=True (--overwrite)" in capsys.readouterr().err
    assert to_disk([*argv, "--no-progress", "--overwrite"]) == 0
    assert to_disk(["synthetic:collab", "--out", str(tmp_path / "c")]) == 2
    assert "a link dataset, which has no on-disk format" in capsys.readouterr().err
    assert to_disk([str(out), "--out", str(out / "inner")]) == 2
    assert "dataset" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


# Slow: the saved folder's arrays are checked against the dataset above; training from a
# saved folder through the CLI runs in the default suite in tests/datasets/test_ondisk_hetero.py.
@pytest.mark.slow
def test_a_saved_proteins_folder_trains_sage_through_the_cli(saved, tmp_path):
    _, folder = saved
    out = tmp_path / "report.json"
    argv = ["train", "--dataset", str(folder), "--model", "sage", "--fanouts", "5,5"]
    argv += ["--epochs", "1", "--hidden", "8", "--batch-size", "64", "--no-progress"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["task"] == "node-multilabel" and report["metric"] == "rocauc"
    assert report["dataset"] == "synthetic:proteins" and report["layout"] == "sampled-tree"
    assert 0.0 <= report["test_rocauc_mean"] <= 1.0 and "test_acc_mean" not in report
    assert report["num_stored_edges"] == 2 * report["num_edges"]

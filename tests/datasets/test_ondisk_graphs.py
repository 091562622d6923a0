"""The on-disk graph format: round trips with equal, memory-mapped arrays; truncated,
corrupt and inconsistent files refused naming them; nothing overwritten but its own folders."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from graph_sets import random_graphs

from sparsegcn.datasets.graphs import load_graphs
from sparsegcn.datasets.ondisk import FormatError
from sparsegcn.datasets.ondisk_graphs import (
    MANIFEST,
    is_graph_ondisk,
    load_graphs_ondisk,
    save_graphs,
)
from sparsegcn.datasets.synthetic_graphs import generate_molecules

FIELDS = ("senders", "receivers", "node_ptr", "edge_ptr", "features", "labels", "classes")


@pytest.fixture(scope="module")
def molecules():
    return generate_molecules("molpcba", num_graphs=200, seed=0)


def _same(a, b):
    for key in (*FIELDS, "edge_features", "targets"):
        x, y = getattr(a, key), getattr(b, key)
        assert (x is None) == (y is None), key
        if x is not None:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=key)
            assert np.asarray(x).dtype == np.asarray(y).dtype, key
    assert (a.name, a.num_classes, a.metric, a.kind) == (b.name, b.num_classes, b.metric, b.kind)
    assert (a.feature_dims, a.edge_feature_dims) == (b.feature_dims, b.edge_feature_dims)
    assert (a.split is None) == (b.split is None)
    if a.split is not None:
        for key in ("train", "valid", "test"):
            np.testing.assert_array_equal(a.split[key], b.split[key])


def test_round_trip_is_equal_and_memory_mapped(tmp_path, molecules):
    folder = save_graphs(molecules, tmp_path / "pcba")
    assert is_graph_ondisk(folder)
    loaded = load_graphs(f"{folder}", None, verify=True)  # a path: the on-disk reader
    _same(molecules, loaded)
    for key in FIELDS:
        assert isinstance(getattr(loaded, key), np.memmap), key
    assert isinstance(loaded.edge_features, np.memmap)
    assert np.isnan(np.asarray(loaded.labels)).any()  # NaN (missing) kept
    assert loaded.info["folder"] == str(folder) and loaded.info["preset"] == "molpcba"


def test_round_trip_of_class_labels_float_features_and_targets(tmp_path):
    data = random_graphs(9, seed=2)
    assert data.split is None and data.feature_dims is None
    _same(data, load_graphs_ondisk(save_graphs(data, tmp_path / "r")))


def test_truncated_file_is_refused_naming_it(tmp_path, molecules):
    folder = save_graphs(molecules, tmp_path / "pcba")
    path = folder / "features.npy"
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(FormatError, match=r"features.npy: bytes: holds \d+ bytes but the manifest"):
        load_graphs_ondisk(folder)


def test_corrupt_bytes_are_caught_by_checks_or_checksum(tmp_path, molecules):
    folder = save_graphs(molecules, tmp_path / "pcba")
    path = folder / "receivers.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x7F  # the last receiver's high byte: far outside its graph
    path.write_bytes(bytes(data))
    with pytest.raises(
        FormatError, match=r"receivers.npy: receivers\[\d+\]: node .* outside its graph"
    ):
        load_graphs_ondisk(folder)
    folder = save_graphs(molecules, tmp_path / "again")
    path = folder / "labels.npy"
    labels = np.load(path)
    labels[0, 0] = 1.0 - np.nan_to_num(labels[0, 0])  # still a valid label: only sha256 sees it
    np.save(path, labels)
    load_graphs_ondisk(folder)
    with pytest.raises(FormatError, match=r"labels.npy: sha256: checksum mismatch"):
        load_graphs_ondisk(folder, verify=True)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(format="sparsegcn-graph"), r"manifest.json: format: must be"),
        (lambda m: m.update(num_nodes=-1), r"manifest.json: num_nodes: must be a non-negative"),
        (lambda m: m["files"].pop("labels"), r"manifest.json: files.labels: missing"),
        (lambda m: m["files"].pop("test"), r"files: lists the split files \['train', 'valid'\]"),
        (lambda m: m["files"]["labels"].update(file="../x.npy"), r"files.labels: must be"),
        (lambda m: m.update(num_edges=m["num_edges"] + 2), r"senders.npy: shape: senders must be"),
        (
            lambda m: m.update(feature_dims=[2] * 9),
            r"features.npy: features\[\d+, 0\]: \d+ is outside",
        ),
    ],
)
def test_inconsistent_manifest_is_refused(tmp_path, molecules, edit, message):
    folder = save_graphs(molecules, tmp_path / "pcba")
    manifest = json.loads((folder / MANIFEST).read_text())
    edit(manifest)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=message):
        load_graphs_ondisk(folder)


def _put(folder, key: str, array: np.ndarray) -> None:
    """Writes ``<key>.npy`` and lists it in the manifest as it is (dtype, shape, size,
    digest): only the load-time checks of the contents stand in the way."""
    import hashlib

    path = folder / f"{key}.npy"
    np.save(path, array)
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][key] = {
        "file": path.name,
        "dtype": str(array.dtype),
        "shape": list(array.shape),
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _with(array: np.ndarray, index, value) -> np.ndarray:
    array = np.array(array)
    array[index] = value
    return array


@pytest.mark.parametrize(
    ("key", "field", "value"),
    [("features", "features", np.nan), ("edge_features", "edge_features", -np.inf)],
)
def test_a_float_feature_that_is_not_finite_is_named(tmp_path, key, field, value):
    # Before: loaded, and training ended "diverged ... the learning rate is too high".
    folder = save_graphs(random_graphs(9, seed=2), tmp_path / "r")
    data = load_graphs_ondisk(folder)
    shape = (data.num_edges, 2) if key == "edge_features" else data.features.shape
    _put(folder, key, _with(np.ones(shape, np.float32), (3, 1), value))
    with pytest.raises(FormatError, match=rf"{key}\.npy: {field}\[3, 1\]: {value} is not finite"):
        load_graphs_ondisk(folder)


def test_targets_may_be_missing_but_not_infinite(tmp_path):
    # Before: an infinite target loaded unchecked, unlike a regression label.
    data = random_graphs(9, seed=2)
    folder = save_graphs(data, tmp_path / "r")
    targets = np.ones((data.num_graphs, 2), np.float32)
    _put(folder, "targets", _with(targets, (2, 0), np.nan))
    assert np.isnan(np.asarray(load_graphs_ondisk(folder).targets)[2, 0])
    _put(folder, "targets", _with(targets, (4, 0), np.inf))
    with pytest.raises(FormatError, match=r"targets\.npy: targets\[4, 0\]: inf is not a finite"):
        load_graphs_ondisk(folder)


@pytest.mark.parametrize(
    ("key", "array", "message"),
    [
        # Before: info failed with "zip() argument 2 is longer than argument 1".
        ("classes", np.array([-1]), r"shape: classes must be \[num_classes\] = \[2\], .*got \[1\]"),
        # Before: shown as the labels "[1 2]: 5, [3 4]: 4" and "0.5: 5, 7.25: 4".
        ("classes", np.array([[1, 2], [3, 4]]), r"shape: classes must be .*got \[2, 2\]"),
        ("classes", np.array([0.5, 7.25]), r"dtype: classes must be integers or strings.*float64"),
        ("classes", np.array([True, False]), r"dtype: classes must be integers or strings.*bool"),
        # Before: float ids were accepted, bool ones said "node 0 appears more than once".
        (
            "train",
            np.arange(3, dtype=np.float64),
            r"dtype: train must be one of \('int64',\), got float64",
        ),
        ("train", np.ones(3, bool), r"dtype: train must be one of \('int64',\), got bool"),
        ("train", np.arange(4, dtype=np.int64).reshape(2, 2), r"shape: train must be \['\*'\]"),
    ],
)
def test_classes_and_split_files_of_the_wrong_dtype_or_shape_are_refused(
    tmp_path, key, array, message
):
    data = random_graphs(9, seed=2)
    split = {"train": np.arange(5), "valid": np.arange(5, 7), "test": np.arange(7, 9)}
    folder = save_graphs(dataclasses.replace(data, split=split), tmp_path / "r")
    _put(folder, key, array)
    with pytest.raises(FormatError, match=rf"{key}\.npy: {message}"):
        load_graphs_ondisk(folder)


def test_classes_may_be_integers_or_names(tmp_path):
    data = random_graphs(9, seed=2)
    folder = save_graphs(data, tmp_path / "r")
    for classes in (np.array([-1, 1], np.int8), np.array(["inactive", "mutagen"])):
        _put(folder, "classes", classes)
        np.testing.assert_array_equal(load_graphs_ondisk(folder).classes, classes)


def test_bad_contents_are_refused_before_anything_is_written(tmp_path, molecules):
    edge_ptr = np.asarray(molecules.edge_ptr).copy()
    edge_ptr[5] = edge_ptr[4] - 1
    bad = dataclasses.replace(molecules, edge_ptr=edge_ptr)
    with pytest.raises(FormatError, match=r"edge_ptr.npy: edge_ptr\[5\]: offsets decrease"):
        save_graphs(bad, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary folder left


def test_overwrites_only_its_own_folders(tmp_path, molecules):
    folder = save_graphs(molecules, tmp_path / "pcba")
    with pytest.raises(ValueError, match="exists and is not empty; pass overwrite=True"):
        save_graphs(molecules, folder)
    small = generate_molecules("molhiv", num_graphs=20, seed=1)
    save_graphs(small, folder, overwrite=True)
    assert load_graphs_ondisk(folder).num_graphs == 20
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(
        ValueError,
        match=r"not a sparsegcn dataset folder \(it holds notes.txt, which no sparsegcn-graphs manifest",
    ):
        save_graphs(small, folder, overwrite=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("1,2\n")
    with pytest.raises(
        ValueError, match=r"not a sparsegcn dataset folder .*which no sparsegcn-graphs manifest"
    ):
        save_graphs(small, other, overwrite=True)
    assert (other / "data.csv").read_text() == "1,2\n"
    with pytest.raises(FormatError, match=r"manifest.json: file: missing"):
        load_graphs_ondisk(other)


def test_never_writes_over_the_folder_it_was_read_from(tmp_path, molecules):
    folder = save_graphs(molecules, tmp_path / "pcba")
    loaded = load_graphs_ondisk(folder)  # memory maps of the files in folder
    for target in (folder, folder / "inner"):
        with pytest.raises(ValueError, match="would overwrite the dataset's own folder"):
            save_graphs(loaded, target, overwrite=True)
    _same(molecules, load_graphs_ondisk(folder))
    _same(molecules, load_graphs_ondisk(save_graphs(loaded, tmp_path / "copy")))


def test_a_full_disk_names_the_folder_asked_for(tmp_path, molecules, monkeypatch):
    # It named the temporary folder: .pcba.tmp-<host>-<pid>-<random>.sparsegcn/senders.npy.
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", full)
    with pytest.raises(OSError, match=r"^cannot write .*/pcba \(\w+\.npy\): No space left"):
        save_graphs(molecules, tmp_path / "pcba")
    assert list(tmp_path.iterdir()) == []

"""The on-disk format: round trips against the in-memory dataset, and one clear error per fault."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from sparsegcn import Graph
from sparsegcn.cli import main
from sparsegcn.datasets import Dataset, load, save
from sparsegcn.datasets.ondisk import (
    MANIFEST,
    DatasetWriter,
    FormatError,
    check_csr_chunked,
    load_ondisk,
    sha256_file,
    verify_checksums,
)


def small_dataset(num_nodes=40, num_edges=150, seed=0) -> Dataset:
    """An unsorted multigraph (duplicates, self-loops, isolated nodes), 5 features, 3 classes."""
    rng = np.random.default_rng(seed)
    senders = rng.integers(0, num_nodes - 2, num_edges)
    receivers = rng.integers(0, num_nodes - 2, num_edges)
    senders = np.concatenate([senders, senders[:4], [3, 3]])
    receivers = np.concatenate([receivers, receivers[:4], [3, 3]])
    labels = rng.integers(0, 3, num_nodes)
    labels[-3:] = -1
    order = rng.permutation(num_nodes - 3)
    return Dataset(
        name="ogbn-small",
        graph=Graph(senders, receivers, None, num_nodes),
        features=rng.standard_normal((num_nodes, 5)).astype(np.float32),
        labels=labels,
        split={"train": order[:20], "valid": order[20:28], "test": order[28:]},
        num_classes=3,
        num_edges=77,
        info={"source": "test"},
    )


@pytest.fixture
def saved(tmp_path):
    dataset = small_dataset()
    return dataset, save(dataset, tmp_path / "small")


def dense_adjacency(graph: Graph) -> np.ndarray:
    a = np.zeros((graph.num_nodes, graph.num_nodes))
    np.add.at(a, (np.asarray(graph.receivers), np.asarray(graph.senders)), 1.0)
    return a


def test_round_trip_matches_the_dataset_and_is_memory_mapped(saved):
    dataset, path = saved
    loaded = load(str(path))
    assert loaded.name == "ogbn-small" and loaded.num_edges == 77 and loaded.num_classes == 3
    np.testing.assert_array_equal(dense_adjacency(loaded.graph), dense_adjacency(dataset.graph))
    assert loaded.graph.edges_sorted
    # The stored CSR equals scipy's (rows = receivers, sorted columns, duplicates kept).
    reference = sp.csr_matrix(dense_adjacency(dataset.graph))
    indptr = np.load(path / "indptr.npy")
    counts = np.diff(indptr)
    np.testing.assert_array_equal(counts, np.asarray(reference.sum(axis=1)).ravel())
    assert indptr.dtype == np.int64 and np.load(path / "indices.npy").dtype == np.int32
    for key in ("train", "valid", "test"):
        np.testing.assert_array_equal(loaded.split[key], dataset.split[key])
    np.testing.assert_array_equal(loaded.labels, dataset.labels)
    np.testing.assert_array_equal(loaded.features, dataset.features)
    assert isinstance(loaded.features, np.memmap)
    assert not loaded.graph.senders.flags.writeable  # a view of the read-only map
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["num_nodes"] == 40 and manifest["num_stored_edges"] == 156
    for entry in manifest["files"].values():
        assert entry["sha256"] == sha256_file(path / entry["file"])
    verify_checksums(path)
    assert load_ondisk(path, verify=True).num_nodes == 40


def test_float16_features_and_sparse_features(tmp_path):
    dataset = small_dataset()
    path = save(dataset, tmp_path / "half", features_dtype="float16")
    loaded = load(str(path))
    assert loaded.features.dtype == np.float16
    np.testing.assert_array_equal(loaded.features, dataset.features.astype(np.float16))
    sparse = Dataset(**{**dataset.__dict__, "features": sp.csr_matrix(dataset.features)})
    path = save(sparse, tmp_path / "sparse", chunk=7)
    np.testing.assert_array_equal(load(str(path)).features, dataset.features)


def test_refuses_to_overwrite_unless_asked(tmp_path):
    dataset = small_dataset()
    (tmp_path / "empty").mkdir()
    save(dataset, tmp_path / "empty")  # an empty folder is fine
    with pytest.raises(ValueError, match="not empty; pass overwrite=True"):
        save(dataset, tmp_path / "empty")
    other = small_dataset(seed=1)
    save(other, tmp_path / "empty", overwrite=True)
    np.testing.assert_array_equal(load(str(tmp_path / "empty")).features, other.features)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a folder"):
        save(dataset, tmp_path / "file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file"]  # no temp left


def test_an_interrupted_write_leaves_nothing(tmp_path):
    writer = DatasetWriter(tmp_path / "x", num_nodes=3, num_stored_edges=2, num_features=2)
    with pytest.raises(RuntimeError, match="boom"), writer:
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="features_dtype"):
        DatasetWriter(
            tmp_path / "x",
            num_nodes=3,
            num_stored_edges=2,
            num_features=2,
            features_dtype="float64",
        )
    weighted = small_dataset()
    weighted = Dataset(
        **{
            **weighted.__dict__,
            "graph": Graph(
                weighted.graph.senders,
                weighted.graph.receivers,
                np.ones(weighted.graph.num_edges, np.float32),
                40,
            ),
        }
    )
    with pytest.raises(ValueError, match="no edge weights"):
        save(weighted, tmp_path / "w")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "plant",
    [
        lambda d: (d / "thesis.tex").write_text("mine"),  # no manifest at all
        lambda d: (d / MANIFEST).write_text('{"format": "something-else", "files": {}}'),
        lambda d: (d / "indptr.npy").write_bytes(b"not ours"),  # an array name, no manifest
    ],
    ids=["user-file", "other-manifest", "array-name-only"],
)
def test_overwrite_replaces_only_a_sparsegcn_dataset_folder(tmp_path, plant):
    target = tmp_path / "out"
    target.mkdir()
    plant(target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(ValueError, match=r"is not a sparsegcn dataset folder"):
        save(small_dataset(), target, overwrite=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp left


def test_a_loaded_dataset_is_saved_over_its_folder_but_never_into_it(saved):
    dataset, path = saved
    loaded = load(str(path))
    with pytest.raises(ValueError, match=r"path .*small/sub would overwrite the dataset's own"):
        save(loaded, path / "sub")
    assert not (path / "sub").exists()
    assert save(loaded, path, overwrite=True) == path  # replaced whole, from its own mapping
    np.testing.assert_array_equal(load(str(path)).features, dataset.features)


def test_overwrite_refuses_a_dataset_folder_holding_a_user_file(saved):
    _, path = saved
    (path / "notes.txt").write_text("mine")
    (path / "sub").mkdir()
    with pytest.raises(ValueError, match=r"holds notes.txt, sub"):
        save(small_dataset(seed=1), path, overwrite=True)
    assert (path / "notes.txt").read_text() == "mine"
    load(str(path))  # the old dataset is intact


def test_a_stale_manifest_cannot_claim_user_arrays_it_does_not_describe(saved, tmp_path):
    # A manifest copied from a real dataset names features.npy and indptr.npy; the user's
    # own files under those names are not the arrays it lists, so overwrite keeps them.
    _, path = saved
    target = tmp_path / "mine"
    target.mkdir()
    (target / MANIFEST).write_bytes((path / MANIFEST).read_bytes())
    np.save(target / "features.npy", np.ones((40, 5)))  # the listed shape, not the dtype
    (target / "indptr.npy").write_text("my notes")  # not an array at all
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(
        ValueError,
        match=r"mine is not a sparsegcn dataset folder \(it holds features\.npy, whose \.npy "
        r"header declares float64\[40, 5\] where the sparsegcn-graph manifest there lists "
        r"float32\[40, 5\]; and indptr\.npy, which the sparsegcn-graph manifest there lists "
        r"as int64\[41\] but is not one: not a NumPy \.npy file \(it starts with b'my not'\)\)",
    ):
        save(small_dataset(seed=1), target, overwrite=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "small"]  # no temp left
    (target / "features.npy").unlink()
    (target / "indptr.npy").unlink()
    np.save(target / "indptr.npy", np.zeros(41, np.int64))  # what the manifest lists
    assert save(small_dataset(seed=1), target, overwrite=True) == target


def test_a_full_disk_is_an_oserror_before_any_mapped_write(tmp_path, monkeypatch):
    # A sparse open_memmap file stored into on a full disk is SIGBUS; the
    # writer reserves every block first, so ENOSPC surfaces as an OSError.
    import errno
    import os

    calls = []

    def full(fd, offset, length):
        calls.append(length)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError, match=r"cannot write .*out \(indptr.npy\): No space left") as err:
        save(small_dataset(), tmp_path / "out")
    assert err.value.errno == errno.ENOSPC
    assert calls and calls[0] == 128 + 41 * 8  # indptr: header + (N + 1) int64
    assert list(tmp_path.iterdir()) == []  # the temporary folder is gone


def test_a_failing_constructor_leaves_no_temporary_folder(tmp_path, monkeypatch):
    real = np.lib.format.open_memmap

    def fail_on_labels(file, *args, **kwargs):
        if str(file).endswith("labels.npy"):
            raise OSError(28, "No space left on device")
        return real(file, *args, **kwargs)

    monkeypatch.setattr(np.lib.format, "open_memmap", fail_on_labels)
    with pytest.raises(OSError, match=r"cannot write .*x: No space left"):
        DatasetWriter(tmp_path / "x", num_nodes=3, num_stored_edges=2, num_features=2)
    assert list(tmp_path.iterdir()) == []


def test_a_killed_writers_temporary_folder_is_removed_by_the_next(tmp_path, monkeypatch):
    import os
    import subprocess

    ended = subprocess.Popen(["true"])
    ended.wait()
    monkeypatch.setattr(os, "getpid", lambda: ended.pid)  # a writer that is then killed
    DatasetWriter(tmp_path / "x", num_nodes=3, num_stored_edges=2, num_features=2)
    monkeypatch.undo()
    (stale,) = tmp_path.iterdir()
    assert stale.name.startswith(".x.tmp-") and (stale / "features.npy").exists()
    user = tmp_path / ".x.tmp-mine"  # not named as ours: never touched
    user.mkdir()
    save(small_dataset(), tmp_path / "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".x.tmp-mine", "x"]


def test_dataset_folders_follow_the_umask(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        path = save(small_dataset(), tmp_path / "shared")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755  # mkdtemp alone makes 0700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in path.iterdir())


def test_a_replaced_out_folder_keeps_its_mode(tmp_path):
    # An empty --out made 2770 for a group became 0755.
    import os
    import stat

    path = tmp_path / "group"
    path.mkdir()
    path.chmod(0o2770)
    old = os.umask(0o022)
    try:
        save(small_dataset(), path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o2770
        path.chmod(0o750)
        save(small_dataset(seed=1), path, overwrite=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert load_ondisk(path).num_nodes == 40 and sorted(os.listdir(tmp_path)) == ["group"]


def test_a_mount_point_is_refused_before_any_work(tmp_path, monkeypatch):
    import os

    mount = tmp_path / "mnt"
    mount.mkdir()
    monkeypatch.setattr(os.path, "ismount", lambda p: str(p) == str(mount))
    with pytest.raises(ValueError, match=r"mnt: it is a mount point, .*e\.g\. .*mnt/dataset"):
        DatasetWriter(mount, num_nodes=3, num_stored_edges=2, num_features=2)
    assert os.listdir(tmp_path) == ["mnt"] and not any(mount.iterdir())
    assert save(small_dataset(), mount / "ds") == mount / "ds"


def test_a_split_a_full_disk_cuts_short_is_an_error_naming_the_dataset(tmp_path, monkeypatch):
    # The splits went through np.save to an open file: ndarray.tofile, which drops a
    # buffered tail on a full disk without an error.
    import os

    real = os.fstat

    def short(fd):
        info = real(fd)
        if info.st_size > 128:  # a split file, after its header: a page the disk lacked
            return os.stat_result((*info[:6], info.st_size - 8, *info[7:]))
        return info

    writer = DatasetWriter(tmp_path / "x", num_nodes=3, num_stored_edges=2, num_features=2)
    with writer:
        monkeypatch.setattr(os, "fstat", short)
        with pytest.raises(OSError, match=r"cannot write .*x: only \d+ of \d+ bytes reached"):
            writer.write_split("train", np.arange(3))
        monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def rewrite(path, key, array, *, manifest=True):
    """Replaces ``key``'s file; with ``manifest``, updates its shape, dtype and sha256 too,
    so only the structural checks can catch the fault."""
    file = path / f"{key}.npy"
    np.save(file, array)
    if manifest:
        data = json.loads((path / MANIFEST).read_text())
        data["files"][key].update(
            shape=list(array.shape), dtype=str(array.dtype), sha256=sha256_file(file)
        )
        (path / MANIFEST).write_text(json.dumps(data))


def edit_manifest(path, **changes):
    data = json.loads((path / MANIFEST).read_text())
    data.update(changes)
    (path / MANIFEST).write_text(json.dumps(data))


def not_monotone(path):
    indptr = np.load(path / "indptr.npy")
    indptr[10] = indptr[11] + 1
    rewrite(path, "indptr", indptr)


def last_offset(path):
    indptr = np.load(path / "indptr.npy")
    indptr[-1] -= 1
    rewrite(path, "indptr", indptr)


def first_offset(path):
    indptr = np.load(path / "indptr.npy")
    indptr[0] = 1
    rewrite(path, "indptr", indptr)


def id_out_of_range(path):
    indices = np.load(path / "indices.npy")
    indices[17] = 40
    rewrite(path, "indices", indices)


def negative_id(path):
    indices = np.load(path / "indices.npy")
    indices[5] = -2
    rewrite(path, "indices", indices)


def unsorted_row(path):
    indptr, indices = np.load(path / "indptr.npy"), np.load(path / "indices.npy")
    row = int(np.flatnonzero(np.diff(indptr) >= 3)[0])
    a = indptr[row]
    indices[a], indices[a + 2] = indices[a + 2], indices[a]
    if indices[a] == indices[a + 2]:
        pytest.skip("row with equal ids")
    rewrite(path, "indices", indices)


def wrong_shape(path):
    rewrite(path, "indices", np.load(path / "indices.npy")[:-1])


def stale_manifest_shape(path):
    rewrite(path, "features", np.load(path / "features.npy")[:, :4], manifest=False)


def wrong_dtype(path):
    rewrite(path, "labels", np.load(path / "labels.npy").astype(np.int32))


def label_out_of_range(path):
    labels = np.load(path / "labels.npy")
    labels[2] = 3
    rewrite(path, "labels", labels)


def split_out_of_range(path):
    train = np.load(path / "train.npy")
    train[1] = 99
    rewrite(path, "train", train)


def split_unlabelled(path):
    valid = np.load(path / "valid.npy")
    valid[0] = 39
    rewrite(path, "valid", valid)


def truncated(path):
    data = (path / "labels.npy").read_bytes()
    (path / "labels.npy").write_bytes(data[:-8])


def missing(path):
    (path / "test.npy").unlink()


FAULTS = {
    "indptr_not_monotone": (not_monotone, "indptr.npy", r"indptr\[11\]: indptr is not monotone"),
    "indptr_last": (last_offset, "indptr.npy", r"indptr\[40\]: must equal the number of stored"),
    "indptr_first": (first_offset, "indptr.npy", r"indptr\[0\]: must be 0"),
    "id_out_of_range": (id_out_of_range, "indices.npy", r"indices\[17\]: node id 40 is out"),
    "negative_id": (negative_id, "indices.npy", r"indices\[5\]: node id -2 is out"),
    "unsorted_row": (unsorted_row, "indices.npy", r"must be ascending"),
    "wrong_shape": (wrong_shape, "indices.npy", r"shape: must be \[156\]"),
    "stale_manifest": (stale_manifest_shape, "features.npy", r"shape: holds float32 \[40, 4\]"),
    "wrong_dtype": (wrong_dtype, "labels.npy", r"dtype: must be one of \('int64',\)"),
    "label_range": (label_out_of_range, "labels.npy", r"labels\[2\]: 3 is outside \[0, 3\)"),
    "split_range": (split_out_of_range, "train.npy", r"train\[1\]: node id 99 is out of range"),
    "split_unlabelled": (split_unlabelled, "valid.npy", r"valid\[0\]: node 39 has no label"),
    "truncated": (truncated, "labels.npy", r"labels: (not a readable .npy file or )?truncated"),
    "missing": (missing, "test.npy", r"test: missing"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_one_error_naming_file_and_field(saved, fault):
    _, path = saved
    corrupt, file, message = FAULTS[fault]
    corrupt(path)
    with pytest.raises(FormatError, match=message) as err:
        load(str(path))
    assert err.value.file == path / file


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"format": "other"}, "format"),
        ({"version": 2}, "version"),
        ({"num_nodes": -1}, "num_nodes"),
        ({"num_classes": "3"}, "num_classes"),
        ({"files": {}}, "files.indptr"),
        ({"num_features": 6}, "shape"),
    ],
)
def test_bad_manifest_fields(saved, changes, field):
    _, path = saved
    edit_manifest(path, **changes)
    with pytest.raises(FormatError, match=f": {field}: ") as err:
        load_ondisk(path)
    assert err.value.field == field


def test_unreadable_manifest_and_missing_folder(saved, tmp_path):
    _, path = saved
    (path / MANIFEST).write_text("{not json")
    with pytest.raises(FormatError, match=r"manifest.json: json: unreadable"):
        load_ondisk(path)
    with pytest.raises(FormatError, match="does not exist or is not a folder"):
        load(str(tmp_path / "nowhere" / "x"))


def test_checksum_mismatch_is_caught_on_request(saved):
    _, path = saved
    features = np.load(path / "features.npy")
    features[3, 1] += 1.0  # same shape and dtype: only the checksum can tell
    rewrite(path, "features", features, manifest=False)
    assert load(str(path)).num_nodes == 40  # by default the hash is not checked
    with pytest.raises(FormatError, match=r"features.npy: sha256: checksum mismatch") as err:
        load(str(path), verify=True)
    assert err.value.field == "sha256"
    with pytest.raises(FormatError, match="sha256"):
        verify_checksums(path)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 64])
def test_chunked_csr_check_agrees_with_a_whole_array_check(chunk):
    # Rows [0, 2) [2, 2) [2, 5) [5, 6): a fall at a row start is fine.
    indptr = np.array([0, 2, 2, 5, 6], np.int64)
    check_csr_chunked(indptr, np.array([1, 3, 0, 0, 2, 1], np.int32), 4, chunk=chunk)
    with pytest.raises(FormatError, match=r"indices\[4\].*row 2"):
        check_csr_chunked(indptr, np.array([1, 3, 0, 2, 1, 1], np.int32), 4, chunk=chunk)
    with pytest.raises(FormatError, match=r"indptr\[2\]"):
        check_csr_chunked(np.array([0, 3, 2, 5, 6]), np.zeros(6, np.int32), 4, chunk=chunk)
    with pytest.raises(FormatError, match=r"indices\[5\]"):
        check_csr_chunked(indptr, np.array([1, 3, 0, 0, 2, 4], np.int32), 4, chunk=chunk)


def test_cli_info_and_train_read_a_folder(saved, tmp_path, capsys):
    _, path = saved
    out = tmp_path / "info.json"
    assert main(["info", "--dataset", str(path), "--json", str(out), "--no-progress"]) == 0
    stats = json.loads(out.read_text())
    assert stats["num_nodes"] == 40 and stats["num_stored_edges"] == 156
    assert main(["info", "--dataset", str(path), "--verify", "--no-progress"]) == 0
    report = tmp_path / "report.json"
    argv = ["train", "--dataset", str(path), "--epochs", "2", "--json", str(report)]
    assert main([*argv, "--no-progress"]) == 0
    result = json.loads(report.read_text())
    assert result["num_nodes"] == 40
    assert "ogb_evaluator" not in result  # "ogbn-small" is no OGB dataset
    capsys.readouterr()
    (path / "test.npy").unlink()
    assert main(["info", "--dataset", str(path), "--no-progress"]) == 2
    assert "test.npy: test: missing" in capsys.readouterr().err


def test_a_folder_written_by_hand_as_documented(tmp_path):
    """The module docstring's recipe, with NumPy alone, loads as the path graph 0 - 1 - 2."""
    g = tmp_path / "g"
    g.mkdir()
    np.save(g / "indptr.npy", np.array([0, 1, 3, 4], np.int64))
    np.save(g / "indices.npy", np.array([1, 0, 2, 1], np.int32))
    np.save(g / "features.npy", np.eye(3, dtype=np.float32))
    np.save(g / "labels.npy", np.array([0, 1, 1]))
    for split, ids in {"train": [0], "valid": [1], "test": [2]}.items():
        np.save(g / f"{split}.npy", np.array(ids, np.int64))
    files = {}
    for key in ("indptr", "indices", "features", "labels", "train", "valid", "test"):
        array = np.load(g / f"{key}.npy")
        files[key] = {
            "file": f"{key}.npy",
            "dtype": str(array.dtype),
            "shape": list(array.shape),
            "sha256": sha256_file(g / f"{key}.npy"),
        }
    manifest = {
        "format": "sparsegcn-graph",
        "version": 1,
        "name": "path",
        "num_nodes": 3,
        "num_stored_edges": 4,
        "num_edges": 2,
        "num_features": 3,
        "num_classes": 2,
        "metric": "acc",
        "info": {},
        "files": files,
    }
    (g / MANIFEST).write_text(json.dumps(manifest))
    dataset = load_ondisk(g, verify=True)
    expected = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], float)
    np.testing.assert_array_equal(dense_adjacency(dataset.graph), expected)
    assert dataset.split_sizes == {"train": 1, "valid": 1, "test": 1}


@pytest.mark.parametrize(
    "listed",
    [
        {"indptr": "thesis.tex", "indices": "photo.jpg"},  # any names
        {"thesis": "thesis.npy"},  # an array name no saved dataset has
        {"indptr": "indices.npy"},  # a known name under another key
    ],
    ids=["user-names", "unknown-key", "swapped"],
)
def test_a_planted_manifest_cannot_claim_user_files(tmp_path, listed):
    # overwrite=True replaces a folder whole when its manifest lists everything in
    # it: a manifest listing a user's files must not make their folder replaceable.
    target = tmp_path / "out"
    target.mkdir()
    for name in listed.values():
        (target / name).write_text("mine")
    files = {key: {"file": name} for key, name in listed.items()}
    (target / MANIFEST).write_text(json.dumps({"format": "sparsegcn-graph", "files": files}))
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(ValueError, match=r"is not a sparsegcn dataset folder \(it holds "):
        save(small_dataset(), target, overwrite=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp left


def test_a_folder_swapped_while_it_is_read_is_read_again(tmp_path, monkeypatch):
    # Another process's `to_disk --overwrite` swaps the folder between the reader's opens.
    # Before: the old manifest with the new files, a mix (or a "corrupt" error).
    import sparsegcn.datasets.ondisk as ondisk
    from sparsegcn.files import replace_folder

    live = save(small_dataset(seed=0), tmp_path / "live")
    newer = small_dataset(seed=1)
    staged = save(newer, tmp_path / ".staged")
    original, calls = ondisk._open_arrays, []

    def open_after_a_swap(folder, manifest):
        calls.append(folder)
        if len(calls) == 1:  # the manifest was read from the old folder: swap now
            replace_folder(staged, live)
        return original(folder, manifest)

    monkeypatch.setattr(ondisk, "_open_arrays", open_after_a_swap)
    got = load(str(live))
    assert len(calls) == 2  # the first try saw the folder change and was dropped
    np.testing.assert_array_equal(got.labels, newer.labels)
    np.testing.assert_array_equal(got.features, newer.features)
    assert not np.array_equal(newer.labels, small_dataset(seed=0).labels)

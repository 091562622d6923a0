"""OGB loading through the ``ogb`` package, offline, on tiny fake datasets.

Each fake is written in OGB's on-disk layout (raw CSV or binary files, the
official split folder, the additional node files ``ogb``'s master.csv lists,
an empty ``processed/`` and the ``RELEASE_v1.txt`` marker) and then loaded
by ``ogb``'s own reader through :func:`load_ogb`. The references are the
arrays the test wrote.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

# Not pytest.importorskip("ogb"): importing ogb plainly would start its PyPI
# version-check thread in the test process (see test_importing_through_...).
if importlib.util.find_spec("ogb") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("needs the optional extra: torch (CPU) and sparsegcn[ogb]", allow_module_level=True)

import sparsegcn
from sparsegcn.datasets import load
from sparsegcn.datasets.base import reading_only
from sparsegcn.datasets.ogb import (
    as_labels,
    evaluate,
    import_ogb,
    load_ogb,
    load_processed,
)
from sparsegcn.train import NodeData, index_mask

pytestmark = pytest.mark.ogb

REPO = Path(__file__).resolve().parents[2]


# -- the fake datasets ---------------------------------------------------------


def _master(name: str):
    import pandas as pd

    path = Path(import_ogb().__file__).parent / "master.csv"
    return pd.read_csv(path, index_col=0, keep_default_na=False)[name]


def _write_csv(path: Path, rows: np.ndarray, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, np.asarray(rows).reshape(len(rows), -1), fmt=fmt, delimiter=",")


def write_fake(root: Path, name: str, *, edges, features, labels, split) -> Path:
    """Writes a dataset as ``ogb`` ships it (master.csv decides CSV or binary
    files, the split folder and the additional node files). Returns its folder.
    """
    meta = _master(name)
    folder = root / name.replace("-", "_")
    raw = folder / "raw"
    raw.mkdir(parents=True)
    edges, features, labels = np.asarray(edges), np.asarray(features), np.asarray(labels)
    n = features.shape[0]
    extra = {}
    if meta["additional node files"] != "None":
        for key in meta["additional node files"].split(","):
            extra[key] = 2000 + np.arange(n, dtype=np.int64)[:, None] % 20
    if meta["binary"] == "True":
        np.savez(
            raw / "data.npz",
            edge_index=edges.T.astype(np.int64),
            num_nodes_list=np.array([n]),
            num_edges_list=np.array([edges.shape[0]]),
            node_feat=features,
            **extra,
        )
        np.savez(raw / "node-label.npz", node_label=labels.astype(np.float64)[:, None])
    else:
        _write_csv(raw / "edge.csv.gz", edges, "%d")
        _write_csv(raw / "node-feat.csv.gz", features, "%.9g")
        _write_csv(raw / "node-label.csv.gz", labels, "%d")
        _write_csv(raw / "num-node-list.csv.gz", [n], "%d")
        _write_csv(raw / "num-edge-list.csv.gz", [edges.shape[0]], "%d")
        for key, values in extra.items():
            _write_csv(raw / f"{key}.csv.gz", values, "%d")
    for part, idx in split.items():
        _write_csv(folder / "split" / meta["split"] / f"{part}.csv.gz", idx, "%d")
    (folder / "processed").mkdir()
    (folder / f"RELEASE_v{meta['version']}.txt").touch()
    return folder


# 9 nodes; 0 -> 1 and 1 -> 0 are both present, so they form one undirected pair.
ARXIV_EDGES = np.array([[0, 1], [1, 0], [1, 2], [2, 3], [3, 4], [5, 4], [6, 7], [8, 0]])
ARXIV_SPLIT = {"train": [0, 1, 2, 3], "valid": [4, 5], "test": [6, 7, 8]}


def _features(n: int, f: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, f)).astype(np.float32)


def _arxiv_labels() -> np.ndarray:
    return np.array([0, 1, 2, 39, 1, 0, 2, 5, 1])


def write_arxiv(root: Path, labels=None) -> Path:
    return write_fake(
        root,
        "ogbn-arxiv",
        edges=ARXIV_EDGES,
        features=_features(9, 4, seed=0),
        labels=_arxiv_labels() if labels is None else labels,
        split=ARXIV_SPLIT,
    )


def _edge_set(graph) -> list:
    return sorted(
        zip(np.asarray(graph.senders).tolist(), np.asarray(graph.receivers).tolist(), strict=True)
    )


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Fails any connection attempt beyond the loopback test server, recording it;
    the test then fails too."""
    attempts = []
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def guard(original):
        def refuse(self, address, *args):
            if isinstance(address, tuple) and str(address[0]).startswith("127."):
                return original(self, address, *args)
            attempts.append(address)
            raise OSError(f"network access in a test: {address}")

        return refuse

    monkeypatch.setattr(socket.socket, "connect", guard(connect))
    monkeypatch.setattr(socket.socket, "connect_ex", guard(connect_ex))
    yield attempts
    assert attempts == [], f"the test tried to reach the network: {attempts}"


# -- loading -------------------------------------------------------------------


def test_arxiv_matches_the_written_arrays_and_is_symmetrized(tmp_path, capfd):
    write_arxiv(tmp_path)
    ds = load_ogb("ogbn-arxiv", tmp_path)
    # ogb's "Loading necessary files..." went to stdout, into `sparsegcn info`'s table.
    out, err = capfd.readouterr()
    assert out == "" and "Loading necessary files" in err

    reference = sorted(
        {(s, r) for s, r in ARXIV_EDGES.tolist()} | {(r, s) for s, r in ARXIV_EDGES.tolist()}
    )
    assert _edge_set(ds.graph) == reference  # each direction once: 0 <-> 1 not doubled
    assert ds.graph.senders.dtype == np.int32 and ds.graph.receivers.dtype == np.int32
    assert ds.graph.weights is None and ds.graph.num_nodes == 9
    assert ds.num_edges == len(ARXIV_EDGES)  # the publisher's directed count
    np.testing.assert_array_equal(ds.features, _features(9, 4, seed=0))
    assert ds.features.dtype == np.float32
    np.testing.assert_array_equal(ds.labels, _arxiv_labels())
    assert ds.labels.dtype == np.int64
    for part, idx in ARXIV_SPLIT.items():
        np.testing.assert_array_equal(ds.split[part], idx)
    assert (ds.num_classes, ds.metric) == (40, "acc")
    assert ds.info["license"] == "ODC-BY"
    assert ds.info["source"].endswith("/arxiv.zip")


def test_load_dispatches_ogb_names(tmp_path):
    write_arxiv(tmp_path)
    ds = load("ogbn-arxiv", tmp_path)
    assert ds.name == "ogbn-arxiv" and ds.num_edges == len(ARXIV_EDGES)


def test_second_load_reads_the_cache_without_torch_load(tmp_path, monkeypatch):
    import torch

    folder = write_arxiv(tmp_path)
    first = load_ogb("ogbn-arxiv", tmp_path)
    assert (folder / "processed" / "data_processed").is_file()
    # The second load must come from the cache, and not through torch.load,
    # which refuses ogb's protocol-4 pickle since torch 2.6.
    for raw in (folder / "raw").iterdir():
        raw.unlink()

    def no_torch_load(*args, **kwargs):
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", no_torch_load)
    second = load_ogb("ogbn-arxiv", tmp_path)
    assert _edge_set(second.graph) == _edge_set(first.graph)
    np.testing.assert_array_equal(second.features, first.features)
    np.testing.assert_array_equal(second.labels, first.labels)
    for part in ARXIV_SPLIT:
        np.testing.assert_array_equal(second.split[part], first.split[part])
    assert second.num_edges == first.num_edges


def test_products_keeps_both_directions_and_counts_pairs(tmp_path):
    pairs = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [4, 2], [5, 4]])
    labels = np.array([0, 46, 3, 3, 1, 2])
    split = {"train": [0, 1, 2], "valid": [3], "test": [4, 5]}
    write_fake(
        tmp_path,
        "ogbn-products",
        edges=pairs,
        features=_features(6, 5, 1),
        labels=labels,
        split=split,
    )
    ds = load_ogb("ogbn-products", tmp_path)

    assert ds.num_edges == len(pairs)  # undirected pairs, as the publisher counts
    assert ds.graph.num_edges == 2 * len(pairs)
    dense = np.zeros((6, 6))
    for s, r in pairs:
        dense[s, r] = dense[r, s] = 1.0
    np.testing.assert_array_equal(ds.graph.to_scipy().toarray(), dense)
    np.testing.assert_array_equal(ds.labels, labels)
    assert (ds.num_classes, ds.metric) == (47, "acc")
    assert ds.info["license"].startswith("Amazon")
    np.testing.assert_array_equal(ds.split["valid"], [3])


def test_papers100m_binary_layout_maps_nan_labels_to_minus_one(tmp_path):
    edges = np.array([[1, 0], [2, 0], [2, 1], [3, 2], [4, 3]])
    labels = np.array([3.0, np.nan, 171.0, 0.0, np.nan])
    split = {"train": [0], "valid": [3], "test": [2]}
    write_fake(
        tmp_path,
        "ogbn-papers100M",
        edges=edges,
        features=_features(5, 3, 2),
        labels=labels,
        split=split,
    )
    first = load_ogb("ogbn-papers100M", tmp_path)
    # The binary reader stores num_nodes as a NumPy scalar: the cache read
    # must admit it.
    second = load_ogb("ogbn-papers100M", tmp_path)

    for ds in (first, second):
        np.testing.assert_array_equal(ds.labels, [3, -1, 171, 0, -1])
        assert ds.num_edges == len(edges) and ds.num_classes == 172
        assert _edge_set(ds.graph) == sorted(
            {*map(tuple, edges.tolist()), *map(tuple, edges[:, ::-1].tolist())}
        )
        np.testing.assert_array_equal(ds.features, _features(5, 3, 2))


# -- bad data and roots ----------------------------------------------------------


def test_label_outside_num_classes_names_dataset_and_value(tmp_path):
    labels = _arxiv_labels()
    labels[3] = 40
    write_arxiv(tmp_path, labels=labels)
    with pytest.raises(ValueError, match=r"ogbn-arxiv .*labels\[3\] = 40 is outside \[0, 40\)"):
        load_ogb("ogbn-arxiv", tmp_path)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda data: data[: len(data) - 12], "truncated"),
        (lambda data: b"0,1\n", "not a gzip file"),
    ],
)
def test_a_bad_raw_file_is_named_not_taken_for_a_download_prompt(tmp_path, damage, words):
    edges = write_arxiv(tmp_path) / "raw" / "edge.csv.gz"
    edges.write_bytes(damage(edges.read_bytes()))
    with pytest.raises(ValueError, match=rf"raw/edge\.csv\.gz: {words}"):
        load_ogb("ogbn-arxiv", tmp_path)


@pytest.mark.parametrize(
    ("count_file", "counted", "rows", "file", "expected", "got"),
    [
        # ogb takes the first 7 edges and drops the eighth without a word.
        ("num-edge-list", "edge", [7], "edge.csv.gz", 7, 8),
        ("num-node-list", "node", [10], "node-feat.csv.gz", 10, 9),
        ("num-node-list", "node", [9], "node-label.csv.gz", 9, 8),
    ],
)
def test_a_line_count_that_disagrees_with_its_count_file_names_both(
    tmp_path, count_file, counted, rows, file, expected, got
):
    folder = write_arxiv(tmp_path)
    raw = folder / "raw"
    if file == "node-label.csv.gz":
        _write_csv(raw / file, _arxiv_labels()[:got], "%d")
    else:
        _write_csv(raw / f"{count_file}.csv.gz", rows, "%d")
    message = (
        rf"{re.escape(str(raw / file))}: expected {expected} lines, one per {counted} as "
        rf"{re.escape(str(raw / count_file))}\.csv\.gz says, got {got}"
    )
    with pytest.raises(ValueError, match=message):
        load_ogb("ogbn-arxiv", tmp_path)
    assert not (folder / "processed" / "data_processed").exists()  # ogb cached nothing


def test_a_ragged_raw_row_names_the_file_and_line(tmp_path):
    features = write_arxiv(tmp_path) / "raw" / "node-feat.csv.gz"
    rows = gzip.decompress(features.read_bytes()).splitlines(keepends=True)
    rows[2] = b"1.5,2.5\n"  # pandas would fill the missing values with NaN
    features.write_bytes(gzip.compress(b"".join(rows)))
    with pytest.raises(
        ValueError,
        match=rf"{re.escape(str(features))}: line 3 holds 2 comma-separated values, line 1 holds 4",
    ):
        load_ogb("ogbn-arxiv", tmp_path)


@pytest.mark.parametrize(
    ("part", "data", "error", "words"),
    [
        ("valid", b"", ValueError, "the file is empty"),
        ("test", None, FileNotFoundError, "is missing"),
    ],
)
def test_an_empty_or_missing_split_file_is_named(tmp_path, part, data, error, words):
    path = write_arxiv(tmp_path) / "split" / "time" / f"{part}.csv.gz"
    if data is None:
        path.unlink()
    else:
        path.write_bytes(gzip.compress(data))
    with pytest.raises(error, match=rf"^{re.escape(str(path))}:? {words}"):
        load_ogb("ogbn-arxiv", tmp_path)


def test_negative_raw_label_is_not_taken_for_unlabelled(tmp_path):
    labels = _arxiv_labels()
    labels[6] = -1
    write_arxiv(tmp_path, labels=labels)
    with pytest.raises(ValueError, match=r"ogbn-arxiv .*labels\[6\] = -1 is not a class id"):
        load_ogb("ogbn-arxiv", tmp_path)


def test_as_labels():
    np.testing.assert_array_equal(as_labels(np.array([[2.0], [np.nan], [0.0]]), 3), [2, -1, 0])
    with pytest.raises(ValueError, match=r"labels\[1\] = 2.5 is not a class id"):
        as_labels(np.array([0.0, 2.5]), 2)
    with pytest.raises(ValueError, match=r"labels\[0\] = inf"):
        as_labels(np.array([np.inf]), 1)
    with pytest.raises(ValueError, match=r"shape \(3, 1\) or \(3,\).*got \(2, 1\)"):
        as_labels(np.zeros((2, 1)), 3)


def test_root_that_is_a_file(tmp_path):
    root = tmp_path / "file"
    root.write_text("")
    with pytest.raises(ValueError, match="exists but is not a directory"):
        load_ogb("ogbn-arxiv", root)
    with pytest.raises(ValueError, match=r"cannot create .*'.*file' is not a directory"):
        load_ogb("ogbn-arxiv", root / "below")


def test_unwritable_root(tmp_path, monkeypatch):
    # Tests run as root here and in CI, where chmod cannot make a folder read-only.
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if Path(p) == tmp_path else real_access(p, mode)
    )
    with pytest.raises(PermissionError, match=r"is not writable, but ogb must write the download"):
        load_ogb("ogbn-arxiv", tmp_path / "data")


def test_folder_without_release_marker_is_refused_before_ogb_prompts(tmp_path):
    folder = write_arxiv(tmp_path)
    (folder / "RELEASE_v1.txt").unlink()
    with pytest.raises(ValueError, match=r"has no RELEASE_v1.txt"):
        load_ogb("ogbn-arxiv", tmp_path)
    assert (folder / "raw" / "edge.csv.gz").exists()  # ogb would have offered to delete it


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-papers100M"])
def test_folder_without_its_raw_file_is_refused_and_never_downloaded_or_deleted(
    tmp_path, monkeypatch, name
):
    # ogb's own pre_process would download the archive over http, unverified,
    # and shutil.rmtree the folder with the user's other files in it.
    folder = write_fake(
        tmp_path,
        name,
        edges=ARXIV_EDGES,
        features=_features(9, 4, seed=0),
        labels=_arxiv_labels(),
        split=ARXIV_SPLIT,
    )
    raw = folder / ("raw/data.npz" if name == "ogbn-papers100M" else "raw/edge.csv.gz")
    raw.unlink()
    (folder / "notes.txt").write_text("mine")
    import ogb.nodeproppred.dataset as ogb_dataset

    def no_download(*args, **kwargs):
        raise AssertionError("ogb was allowed to download")

    monkeypatch.setattr(ogb_dataset, "decide_download", no_download)
    monkeypatch.setattr(ogb_dataset, "download_url", no_download)
    with pytest.raises(FileNotFoundError, match=rf"has no {raw.relative_to(folder)}"):
        load_ogb(name, tmp_path)
    assert (folder / "notes.txt").read_text() == "mine"
    assert (folder / "raw").is_dir()
    # pre_process refuses too, should a caller bypass the folder check.
    from sparsegcn.datasets.ogb import _dataset_class, raw_file

    nodeproppred = import_ogb()
    with pytest.raises(FileNotFoundError, match="has no"):
        _dataset_class(nodeproppred, raw_file(_master(name)))(name=name, root=str(tmp_path))
    assert (folder / "notes.txt").read_text() == "mine"


def _zipped_arxiv(tmp_path: Path) -> bytes:
    """The fake ogbn-arxiv as ogb's archive holds it: one folder named ``arxiv``."""
    folder = write_arxiv(tmp_path / "staging")
    archive = tmp_path / "arxiv.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, Path("arxiv") / path.relative_to(folder))
    return archive.read_bytes()


def test_missing_dataset_is_downloaded_verified_and_extracted(tmp_path, monkeypatch):
    import hashlib

    from http_server import serve

    from sparsegcn.datasets import ogb as ogb_module

    body = _zipped_arxiv(tmp_path)
    monkeypatch.setitem(ogb_module.ARCHIVE_SHA256, "ogbn-arxiv", hashlib.sha256(body).hexdigest())
    root = tmp_path / "data"
    with serve({"/arxiv.zip": body}) as (server, base):
        loaded = load_ogb("ogbn-arxiv", root, url=f"{base}/arxiv.zip")
    assert server.requests == ["/arxiv.zip"]
    reference = load_ogb("ogbn-arxiv", tmp_path / "staging")
    np.testing.assert_array_equal(loaded.graph.senders, reference.graph.senders)
    np.testing.assert_array_equal(loaded.features, reference.features)
    assert sorted(p.name for p in root.iterdir()) == ["ogbn_arxiv"]  # no archive, no temp folder


def test_corrupt_archive_is_refused_and_nothing_is_left(tmp_path, monkeypatch):
    import hashlib

    from http_server import serve

    from sparsegcn.datasets import ogb as ogb_module

    body = _zipped_arxiv(tmp_path)
    monkeypatch.setitem(ogb_module.ARCHIVE_SHA256, "ogbn-arxiv", hashlib.sha256(body).hexdigest())
    flipped = bytearray(body)
    flipped[len(body) // 2] ^= 0xFF
    root = tmp_path / "data"
    with (
        serve({"/arxiv.zip": bytes(flipped)}) as (_, base),
        pytest.raises(ValueError, match=r"sha256"),
    ):
        load_ogb("ogbn-arxiv", root, url=f"{base}/arxiv.zip")
    assert list(root.iterdir()) == []


def test_an_archive_that_expands_past_its_bound_is_refused_and_nothing_is_left(
    tmp_path, monkeypatch
):
    import hashlib

    from http_server import serve

    from sparsegcn.datasets import ogb as ogb_module

    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("arxiv/raw/zeros.bin", bytes(4 << 20))  # 4 MiB of zeros in ~4 KiB
    body = archive.read_bytes()
    monkeypatch.setitem(ogb_module.ARCHIVE_SHA256, "ogbn-arxiv", hashlib.sha256(body).hexdigest())
    # raising=False: the old code, which had no bound, expands it (and fails this test).
    monkeypatch.setattr(ogb_module, "MAX_EXPANSION", 2, raising=False)  # 2 MiB for this one
    root = tmp_path / "data"
    with (
        serve({"/arxiv.zip": body}) as (_, base),
        pytest.raises(ValueError, match=r"refusing to extract 1 files of 4194304 bytes in all"),
    ):
        load_ogb("ogbn-arxiv", root, url=f"{base}/arxiv.zip")
    assert list(root.iterdir()) == []


def test_a_fifo_among_the_raw_files_is_refused_before_ogb_reads(tmp_path):
    from fifos import fifo

    folder = write_arxiv(tmp_path)
    with (
        fifo(folder / "raw" / "node-label.csv.gz"),
        pytest.raises(ValueError, match=r"node-label.csv.gz is not a regular file: it is a FIFO"),
    ):
        load_ogb("ogbn-arxiv", tmp_path)


def test_default_url_is_masters_over_https_and_papers100m_is_not_fetched_unverified(
    tmp_path, monkeypatch
):
    from sparsegcn.datasets import ogb as ogb_module

    requested = []

    class Stop(Exception):
        pass

    def fake_download(url, dest, *, sha256, progress=False):
        requested.append((url, sha256))
        raise Stop

    monkeypatch.setattr(ogb_module, "download_file", fake_download)
    with pytest.raises(Stop):
        load_ogb("ogbn-arxiv", tmp_path)
    url = _master("ogbn-arxiv")["url"].replace("http://", "https://")
    assert requested == [(url, ogb_module.ARCHIVE_SHA256["ogbn-arxiv"])]
    with pytest.raises(ValueError, match="no published sha256"):
        load_ogb("ogbn-papers100M", tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_ogb("ogbn-products", tmp_path, download=False)
    assert len(requested) == 1


def test_unknown_name():
    with pytest.raises(ValueError, match=r"unknown OGB dataset 'ogbn-mag'"):
        load_ogb("ogbn-mag", "unused")


def test_processed_cache_is_read_with_a_restricted_unpickler(tmp_path):
    folder = write_arxiv(tmp_path)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    cache = folder / "processed" / "data_processed"
    with zipfile.ZipFile(cache, "w") as archive:
        archive.writestr(
            "data_processed/data.pkl", pickle.dumps({"graph": Exploit(), "labels": None})
        )
    with pytest.raises(
        pickle.UnpicklingError, match=r"data_processed: .*refusing to load global posix.mkdir"
    ):
        load_ogb("ogbn-arxiv", tmp_path)
    assert not marker.exists()

    cache.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match=r"not a torch.save archive.*delete it"):
        load_processed(cache)


def test_a_split_dict_is_read_with_a_restricted_unpickler(tmp_path, monkeypatch):
    # ogb's get_idx_split reads split/<type>/split_dict.pt with torch.load, which
    # runs the pickle when TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set.
    from sparsegcn.datasets.torchfile import write_torch_file

    folder = write_arxiv(tmp_path)
    split = {"train": np.array([8, 7]), "valid": np.array([0]), "test": np.array([1, 2])}
    write_torch_file(split, folder / "split" / "time" / "split_dict.pt")
    data = load_ogb("ogbn-arxiv", tmp_path)
    for key, idx in split.items():
        np.testing.assert_array_equal(data.split[key], idx)

    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with zipfile.ZipFile(folder / "split" / "time" / "split_dict.pt", "w") as archive:
        archive.writestr("split_dict/data.pkl", pickle.dumps({"train": Exploit()}, protocol=2))
    with pytest.raises(
        pickle.UnpicklingError, match=r"split_dict.pt: .*refusing to load global posix.mkdir"
    ):
        load_ogb("ogbn-arxiv", tmp_path)
    assert not marker.exists()


def test_missing_torch_or_ogb_says_how_to_install(monkeypatch):
    for module in ("torch", "ogb.nodeproppred"):
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, module, None)
            with pytest.raises(ImportError, match=r"CPU build of torch.*sparsegcn\[ogb\]"):
                import_ogb()


# -- the processed cache: concurrent, interrupted and read-only first loads ------


def _no_torch_load(monkeypatch) -> None:
    """Makes ``torch.load`` fail the test: ogb's cache is read by load_processed only."""
    import torch

    def no_torch_load(*args, **kwargs):
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", no_torch_load)


def _cut_save(monkeypatch, pause):
    """Makes ``torch.save`` write the first half of its bytes, call ``pause()``, then
    write the rest: a save that another process can observe (or a kill can cut)
    halfway. It writes where it is told, a path (ogb) or an open file."""
    import torch

    real_save = torch.save

    def cut_save(obj, f, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer, **kwargs)
        data = buffer.getvalue()
        out = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f  # noqa: SIM115
        try:
            out.write(data[: len(data) // 2])
            out.flush()
            pause()
            out.write(data[len(data) // 2 :])
            out.flush()
        finally:
            if out is not f:
                out.close()

    monkeypatch.setattr(torch, "save", cut_save)


def _same(a, b) -> None:
    assert _edge_set(a.graph) == _edge_set(b.graph)
    np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.labels, b.labels)


def test_a_first_load_never_runs_ogbs_pre_process_and_its_cache_is_ogbs_format(
    tmp_path, monkeypatch
):
    # ogb's pre_process checks for the cache itself and reads it with a bare
    # torch.load: reached whenever another process saved (part of) it meanwhile.
    import torch

    nodeproppred = import_ogb()

    def no_ogb_pre_process(self):
        raise AssertionError("ogb's pre_process ran")

    monkeypatch.setattr(nodeproppred.NodePropPredDataset, "pre_process", no_ogb_pre_process)
    real_load = torch.load
    _no_torch_load(monkeypatch)
    folder = write_arxiv(tmp_path)
    first = load_ogb("ogbn-arxiv", tmp_path)
    cache = folder / "processed" / "data_processed"
    second = load_ogb("ogbn-arxiv", tmp_path)
    _same(first, second)
    # The cache is the one ogb (and PyG) would write and read back.
    saved = real_load(cache, weights_only=False)
    assert set(saved) == {"graph", "labels"} and saved["graph"]["num_nodes"] == 9
    np.testing.assert_array_equal(saved["labels"][:, 0], _arxiv_labels())
    assert sorted(p.name for p in cache.parent.iterdir()) == [
        "data_processed",
        "data_processed.lock",
    ]


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products", "ogbn-papers100M"])
def test_the_raw_files_are_read_as_ogbs_own_pre_process_reads_them(tmp_path, name):
    # sparsegcn reads the raw files with ogb's readers in place of ogb's pre_process
    # (whose save is in place and whose check for the cache ends in torch.load):
    # the arrays must be the very ones ogb builds.
    nodeproppred = import_ogb()
    for who in ("ogb", "ours"):
        write_fake(
            tmp_path / who,
            name,
            edges=ARXIV_EDGES,
            features=_features(9, 4, seed=0),
            labels=_arxiv_labels(),
            split=ARXIV_SPLIT,
        )
    theirs = nodeproppred.NodePropPredDataset(name, root=str(tmp_path / "ogb"))
    from sparsegcn.datasets.ogb import _dataset_class, raw_file

    ours = _dataset_class(nodeproppred, raw_file(_master(name)))(name, root=str(tmp_path / "ours"))
    assert ours.graph.keys() == theirs.graph.keys()
    for key, value in theirs.graph.items():
        if isinstance(value, np.ndarray):
            assert ours.graph[key].dtype == value.dtype, key
            np.testing.assert_array_equal(ours.graph[key], value, err_msg=key)
        else:
            assert ours.graph[key] == value, key
    assert ours.labels.dtype == theirs.labels.dtype
    np.testing.assert_array_equal(ours.labels, theirs.labels)


def test_a_load_starting_while_another_saves_the_cache_waits_for_it(tmp_path, monkeypatch, capfd):
    # Before: ogb wrote the cache in place, so a second first load read the half
    # written file ("not a torch.save archive", or torch's "PytorchStreamReader
    # failed" / "Weights only load failed" through ogb's own torch.load).
    import sparsegcn.datasets.ogb as ogb_module

    monkeypatch.setattr(ogb_module, "WAIT_NOTICE_S", 0.0, raising=False)
    _no_torch_load(monkeypatch)
    halfway = threading.Event()

    def pause():
        halfway.set()
        time.sleep(1.0)

    _cut_save(monkeypatch, pause)
    write_arxiv(tmp_path)
    results: dict = {}

    def first_load():
        try:
            results["first"] = load_ogb("ogbn-arxiv", tmp_path)
        except BaseException as err:  # reported by the main thread
            results["first"] = err

    thread = threading.Thread(target=first_load)
    thread.start()
    try:
        assert halfway.wait(60), "the first load never started saving"
        second = load_ogb("ogbn-arxiv", tmp_path)
    finally:
        thread.join(60)
    first = results["first"]
    assert not isinstance(first, BaseException), first
    _same(first, second)
    err = capfd.readouterr().err
    assert "waiting for another process" in err and "data_processed.lock" in err
    assert err.count("Loading necessary files") == 1  # the second read the first's cache


def test_an_interrupted_save_leaves_no_cache_and_the_next_load_builds_it(tmp_path, monkeypatch):
    # Before: the half-written cache stayed, and every later load failed on it.
    def interrupt():
        raise KeyboardInterrupt

    folder = write_arxiv(tmp_path)
    with monkeypatch.context() as patch:
        _cut_save(patch, interrupt)
        with pytest.raises(KeyboardInterrupt):
            load_ogb("ogbn-arxiv", tmp_path)
    processed = folder / "processed"
    assert [p.name for p in processed.iterdir()] == ["data_processed.lock"]  # no partial file
    _no_torch_load(monkeypatch)
    ds = load_ogb("ogbn-arxiv", tmp_path)
    np.testing.assert_array_equal(ds.labels, _arxiv_labels())
    assert (processed / "data_processed").is_file()


def test_a_killed_saves_temporary_file_is_removed_by_the_next_load(tmp_path):
    # What kill -9 during the save leaves: the temporary file of a process gone.
    from sparsegcn.files import _host_tag

    folder = write_arxiv(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = folder / "processed" / f".data_processed.part-{_host_tag()}-{gone.pid}-0a1b.sparsegcn"
    stale.write_bytes(b"PK\x03\x04 cut short")
    theirs = folder / "processed" / "notes.txt"
    theirs.write_text("mine")
    load_ogb("ogbn-arxiv", tmp_path)
    assert not stale.exists() and theirs.read_text() == "mine"
    assert (folder / "processed" / "data_processed").is_file()


def test_reading_only_reads_the_raw_files_and_writes_nothing_under_the_root(tmp_path, monkeypatch):
    # sparsegcn predict loads under reading_only, which promises to write nothing
    # under the data root; before, ogb's processed cache was written there.
    folder = write_arxiv(tmp_path)
    processed = folder / "processed"
    real_access = os.access  # a read-only processed/ is no reason to refuse
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if Path(p) == processed else real_access(p, mode)
    )
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with reading_only("predicting"):
        ds = load_ogb("ogbn-arxiv", tmp_path)
        processed.rmdir()  # not even the folder is needed
        again = load_ogb("ogbn-arxiv", tmp_path)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == [
        p for p in before if p != Path("ogbn_arxiv/processed")
    ]
    np.testing.assert_array_equal(ds.labels, _arxiv_labels())
    _same(ds, again)
    # Outside the block the cache is written as usual, and read under it.
    _same(load_ogb("ogbn-arxiv", tmp_path), ds)
    assert (processed / "data_processed").is_file()
    with reading_only("predicting"):
        _no_torch_load(monkeypatch)
        _same(load_ogb("ogbn-arxiv", tmp_path), ds)


_LOAD_IN_CHILD = """
import sys
import torch

def no_torch_load(*args, **kwargs):
    raise AssertionError("torch.load was called")

torch.load = no_torch_load
if sys.argv[2] == "cut":  # save half the cache, say so, and wait to be killed
    import io, os, pathlib, time
    real_save = torch.save
    def cut_save(obj, f, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer, **kwargs)
        out = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f
        out.write(buffer.getvalue()[:4096])
        out.flush()
        pathlib.Path(sys.argv[3]).touch()
        time.sleep(120)
    torch.save = cut_save
from sparsegcn.datasets.ogb import load_ogb
ds = load_ogb("ogbn-arxiv", sys.argv[1])
print(ds.num_nodes, ds.num_edges, int(ds.labels.sum()))
"""


def _load_in_child(root: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _LOAD_IN_CHILD, str(root), *(args or ("plain",))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


# Slow: three fresh interpreters importing torch and ogb side by side (10 s to over a
# minute, as busy as the machine is).
@pytest.mark.slow
def test_three_processes_loading_one_new_folder_at_once_all_succeed(tmp_path):
    # Before: 1 or 2 of 3 failed with torch's "Weights only load failed" or
    # "PytorchStreamReader failed reading zip archive".
    n = 20_000
    rng = np.random.default_rng(0)
    perm = rng.permutation(n)
    folder = write_fake(
        tmp_path,
        "ogbn-arxiv",
        edges=rng.integers(0, n, size=(6 * n, 2)),
        features=_features(n, 16, seed=1),
        labels=rng.integers(0, 40, n),
        split={
            "train": np.sort(perm[: n // 2]),
            "valid": np.sort(perm[n // 2 : 3 * n // 4]),
            "test": np.sort(perm[3 * n // 4 :]),
        },
    )
    children = [_load_in_child(tmp_path) for _ in range(3)]
    outputs = []
    for child in children:
        stdout, stderr = child.communicate(timeout=300)
        assert child.returncode == 0, stderr
        outputs.append(stdout.strip())
    assert len(set(outputs)) == 1
    assert sorted(p.name for p in (folder / "processed").iterdir()) == [
        "data_processed",
        "data_processed.lock",
    ]


# Slow: a fresh interpreter importing torch and ogb (5 to 20 s).
@pytest.mark.slow
def test_a_load_killed_while_saving_the_cache_leaves_none_for_the_next(tmp_path):
    # Before: the truncated cache blocked every later load until deleted by hand.
    folder = write_arxiv(tmp_path)
    halfway = tmp_path / "halfway"
    child = _load_in_child(tmp_path, "cut", str(halfway))
    try:
        deadline = time.monotonic() + 120
        while not halfway.exists():
            assert child.poll() is None, child.communicate()[1]
            assert time.monotonic() < deadline, "the child never started saving"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    assert not (folder / "processed" / "data_processed").exists()
    ds = load_ogb("ogbn-arxiv", tmp_path)
    np.testing.assert_array_equal(ds.labels, _arxiv_labels())
    assert sorted(p.name for p in (folder / "processed").iterdir()) == [
        "data_processed",
        "data_processed.lock",
    ]


# -- the version check -----------------------------------------------------------

_RECORD_THREADS = """
import json, os, sys, threading
started = []
start = threading.Thread.start
def recording_start(self):
    target = getattr(self, "_target", None)
    started.append(getattr(target, "__module__", "?") + "." + getattr(target, "__qualname__", "?"))
    return start(self)
threading.Thread.start = recording_start
{body}
print(json.dumps({{"started": started, "outdated": "outdated" in sys.modules,
                  "OUTDATED_IGNORE": os.environ.get("OUTDATED_IGNORE")}}))
"""


def _start_recording(body: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "OUTDATED_IGNORE"}
    return subprocess.Popen(
        [sys.executable, "-c", _RECORD_THREADS.format(body=body)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )


def _recorded(process: subprocess.Popen) -> dict:
    stdout, stderr = process.communicate(timeout=180)
    assert process.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


# Slow (a fresh interpreter importing torch and ogb, about 9 s).
@pytest.mark.slow
def test_importing_through_the_module_starts_no_version_check_thread():
    # Two fresh interpreters (ogb runs its check once, at first import), run
    # side by side: a plain import as the control, and ours.
    plain = _start_recording("import ogb.nodeproppred")
    ours = _start_recording(
        "import sparsegcn.datasets.ogb as m\nstarted.clear()\nm.import_ogb()\nimport ogb.version\n"
        "assert ogb.version.check_outdated is None"
    )
    plain, ours = _recorded(plain), _recorded(ours)
    if not any(t.startswith(("ogb.", "outdated.")) for t in plain["started"]):
        pytest.skip(f"this ogb starts no version-check thread (started: {plain['started']})")
    assert ours == {"started": [], "outdated": False, "OUTDATED_IGNORE": None}


# -- training and the official metric ------------------------------------------


def test_evaluate_is_accuracy():
    y_true = np.array([0, 1, 2, 1])
    y_pred = np.array([0, 2, 2, 1])
    assert evaluate("ogbn-arxiv", y_true, y_pred) == 0.75
    assert evaluate("ogbn-products", y_true[:, None], y_pred[:, None]) == 0.75
    with pytest.raises(ValueError, match=r"same shape, got \(4,\) and \(3,\)"):
        evaluate("ogbn-arxiv", y_true, y_pred[:3])
    with pytest.raises(ValueError, match=r"y_true\[2\] = -1 marks an unlabelled node"):
        evaluate("ogbn-arxiv", np.array([0, 1, -1]), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"unknown OGB dataset 'cora'"):
        evaluate("cora", y_true, y_pred)


def test_one_gcn_epoch_offline_then_the_official_evaluator(tmp_path):
    import jax
    import jax.numpy as jnp

    write_arxiv(tmp_path)
    ds = load_ogb("ogbn-arxiv", tmp_path)
    n = ds.num_nodes
    data = NodeData(
        graph=sparsegcn.sort_edges(sparsegcn.gcn_norm(ds.graph)),
        features=sparsegcn.as_features(ds.features, n),
        labels=jnp.asarray(np.maximum(ds.labels, 0), jnp.int32),
        train_mask=jnp.asarray(index_mask(ds.split["train"], n)),
        val_mask=jnp.asarray(index_mask(ds.split["valid"], n)),
        test_mask=jnp.asarray(index_mask(ds.split["test"], n)),
    )
    model = sparsegcn.gcn(ds.num_features, ds.num_classes, hidden=8)
    result = sparsegcn.fit(model, data, sparsegcn.TrainConfig(epochs=1, timing_steps=0))
    params = jax.tree.map(lambda p: p[0], result.best_params)
    pred = np.asarray(jnp.argmax(model.apply(params, data.graph, data.features), axis=-1))

    test = ds.split["test"]
    acc = evaluate("ogbn-arxiv", ds.labels[test], pred[test])
    assert acc == np.mean(pred[test] == ds.labels[test])
    np.testing.assert_allclose(acc, result.test_acc[0], rtol=1e-6)

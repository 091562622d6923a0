"""Only regular files are read: a FIFO, a device or a folder in place of an input file
is refused at once, naming it, wherever sparsegcn reads what a user gives it.

A FIFO blocks a reader until a writer opens it; :func:`fifos.fifo` unblocks
one, so that code that opens it (what these tests guard against) fails on the
message instead of hanging.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from fifos import fifo

from sparsegcn.cli import main
from sparsegcn.datasets import planetoid as planetoid_module
from sparsegcn.datasets.base import Dataset
from sparsegcn.datasets.ondisk import (
    MANIFEST,
    FormatError,
    load_ondisk,
    save,
    verify_checksums,
)
from sparsegcn.datasets.planetoid import load_planetoid
from sparsegcn.datasets.unpickle import safe_load
from sparsegcn.graph import Graph

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


def tiny_dataset() -> Dataset:
    """A 6-node path graph, 2 features, 2 classes."""
    senders = np.array([0, 1, 1, 2, 2, 3, 3, 4, 4, 5])
    receivers = np.array([1, 0, 2, 1, 3, 2, 4, 3, 5, 4])
    return Dataset(
        name="tiny",
        graph=Graph(senders, receivers, None, 6),
        features=np.arange(12, dtype=np.float32).reshape(6, 2),
        labels=np.array([0, 0, 0, 1, 1, 1]),
        split={"train": np.array([0, 5]), "valid": np.array([1, 4]), "test": np.array([2, 3])},
        num_classes=2,
        num_edges=5,
    )


@pytest.fixture
def folder(tmp_path) -> Path:
    return save(tiny_dataset(), tmp_path / "tiny")


def test_the_shared_check_names_what_the_path_is(tmp_path):
    from sparsegcn.files import (
        NotRegularFileError,
        check_regular_file,
        load_npy,
        read_json,
        sha256_file,
    )

    regular = tmp_path / "a.npy"
    np.save(regular, np.arange(3))
    assert check_regular_file(regular) == regular
    assert load_npy(regular).tolist() == [0, 1, 2]
    with fifo(tmp_path / "pipe") as pipe:
        for read in (check_regular_file, load_npy, read_json, sha256_file):
            with pytest.raises(
                NotRegularFileError, match=r"pipe is not a regular file: it is a FIFO"
            ):
                read(pipe)
    with pytest.raises(NotRegularFileError, match="it is a folder"):
        load_npy(tmp_path)
    if os.path.exists("/dev/zero"):
        with pytest.raises(NotRegularFileError, match="it is a character device"):
            sha256_file("/dev/zero")  # would hash forever
    with pytest.raises(FileNotFoundError):
        check_regular_file(tmp_path / "absent")
    assert issubclass(NotRegularFileError, OSError) and issubclass(NotRegularFileError, ValueError)


def test_a_fifo_manifest_is_refused_naming_it(folder):
    with (
        fifo(folder / MANIFEST),
        pytest.raises(FormatError, match=r"manifest.json: file: not a regular file: it is a FIFO"),
    ):
        load_ondisk(folder)


@pytest.mark.parametrize("key", ["indptr", "features", "labels", "test"])
def test_a_fifo_array_file_is_refused_naming_it(folder, key):
    with (
        fifo(folder / f"{key}.npy"),
        pytest.raises(FormatError, match=rf"{key}.npy: {key}: not a regular file: it is a FIFO"),
    ):
        load_ondisk(folder)


def test_verify_says_not_a_regular_file_not_missing(folder, capsys):
    with fifo(folder / "labels.npy"):
        with pytest.raises(
            FormatError, match=r"labels.npy: labels: not a regular file: it is a FIFO"
        ):
            verify_checksums(folder)
        assert main(["info", "--dataset", str(folder), "--verify"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a regular file: it is a FIFO" in err
    assert "labels.npy" in err and "missing" not in err


def test_a_deeply_nested_manifest_is_one_error_naming_the_file(folder):
    (folder / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FormatError, match=r"manifest.json: json: unreadable .*nested more than"):
        load_ondisk(folder)
    # Below the decoder's recursion limit but past any sane manifest: refused too.
    nested = "[" * 65 + "]" * 65  # MAX_JSON_DEPTH is 64
    (folder / MANIFEST).write_text(nested)
    with pytest.raises(FormatError, match="nested more than"):
        load_ondisk(folder)
    (folder / MANIFEST).write_text(json.dumps({"format": "other", "a": [[{"b": 1}]]}))
    with pytest.raises(FormatError, match="format: must be 'sparsegcn-graph'"):
        load_ondisk(folder)  # shallow nesting reads on


def test_a_fifo_planetoid_file_is_refused_before_hashing(tmp_path, monkeypatch):
    from helpers import write_mini

    folder = tmp_path / "planetoid"
    sums = write_mini(folder, "cora", test_index=[4, 5], graph={0: [1], 1: [0]}, num_valid=2)
    monkeypatch.setitem(planetoid_module.SHA256, "cora", sums)
    with fifo(folder / "ind.cora.tx"):
        with pytest.raises(ValueError, match=r"ind.cora.tx is not a regular file"):
            load_planetoid("cora", tmp_path, download=False)
        with pytest.raises(ValueError, match="it is a FIFO"):
            safe_load(folder / "ind.cora.tx", allowed=frozenset())


def test_a_fifo_checkpoint_manifest_is_refused(tmp_path, capsys):
    with fifo(tmp_path / "ckpt-000001.json") as manifest:
        code = main(["predict", "--checkpoint", str(manifest), "--out", str(tmp_path / "p.npy")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "ckpt-000001.json" in err and "not a regular file: it is a FIFO" in err


def test_a_fifo_in_place_of_a_feature_cache_entry_is_refused_not_replaced(tmp_path):
    from sparsegcn.experiment.precompute import precompute_key, sgc_precompute

    dataset = tiny_dataset()
    features = np.asarray(dataset.features)
    key = precompute_key(dataset, dataset.graph, features, hops=2, normalize_features="none")
    entry = tmp_path / f"sgc-{key}.npz"
    with fifo(entry), pytest.raises(ValueError, match=r"is not a regular file: it is a FIFO"):
        sgc_precompute(dataset, features, hops=2, normalize_features="none", cache_dir=tmp_path)
    assert not entry.is_file()  # left as it was, not replaced by a computed file


def test_a_huge_sparse_manifest_is_refused_unread(folder):
    with open(folder / MANIFEST, "r+b") as f:
        f.truncate((1 << 28) + 1)  # sparse, one byte past MAX_JSON_BYTES: not read
    with pytest.raises(FormatError, match=r"manifest.json: json: unreadable .*too large"):
        load_ondisk(folder)

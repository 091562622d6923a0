"""Degenerate data is refused where it enters, not trained on (issue 26, class 4).

Every case fails before anything is compiled: at load (the
:class:`~sparsegcn.datasets.Dataset` and the on-disk checks), at the start
of a run (empty splits), in the trainers (empty masks), in the model
builder (zero widths), or in the writer (what ``convert`` and ``save``
wrote, checked as loading checks it, before it is renamed into place).
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import TOY_SPLIT, toy_ondisk
from test_convert import labels as raw_labels
from test_convert import write_raw

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.datasets import Dataset, load, save
from sparsegcn.datasets.convert import main as convert_main
from sparsegcn.datasets.ondisk import FormatError
from sparsegcn.train import NodeData, TrainConfig, fit

SPLIT = {"train": [0, 1], "valid": [2, 3], "test": [4, 5]}


def ring(n: int) -> sg.Graph:
    senders = np.concatenate([np.arange(n), (np.arange(n) + 1) % n]).astype(np.int32)
    receivers = np.concatenate([(np.arange(n) + 1) % n, np.arange(n)]).astype(np.int32)
    return sg.Graph(senders, receivers, None, n)


def dataset(n: int = 6, f: int = 3, split=None, **changes) -> Dataset:
    fields = dict(
        name="toy",
        graph=ring(n),
        features=np.ones((n, f), np.float32),
        labels=np.arange(n) % 2,
        split={k: np.asarray(v, np.int64) for k, v in (split or SPLIT).items()},
        num_classes=2,
    )
    return Dataset(**{**fields, **changes})


# -- the Dataset: every loader builds one -------------------------------------


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"split": {**SPLIT, "test": [0, 5]}}, "node 0 is in both the 'train' and the 'test'"),
        ({"split": {**SPLIT, "valid": [2, 3, 3]}}, "node 3 appears more than once in the 'valid'"),
        ({"features": np.ones((6, 0), np.float32)}, r"F >= 1, got shape \(6, 0\)"),
        ({"features": np.ones(6, np.float32)}, r"features must be \[N, F\]"),
    ],
)
def test_dataset_refuses_overlapping_repeated_splits_and_featureless_nodes(changes, words):
    if "split" in changes:
        changes = {"split": {k: np.asarray(v, np.int64) for k, v in changes["split"].items()}}
    with pytest.raises(ValueError, match=words):
        dataset(**changes)


@pytest.mark.parametrize(
    ("changes", "error", "words"),
    [
        ({"graph": None}, TypeError, "graph must be a Graph, got None"),
        ({"features": np.ones((6, 3)).tolist()}, TypeError, r"a NumPy, JAX or scipy .*got list"),
        ({"features": None}, TypeError, r"\[N, F\], got None"),
        ({"features": np.ones((6, 3), np.complex64)}, ValueError, "got dtype complex64"),
        ({"features": np.ones((6, 3), bool)}, ValueError, "real numbers, got dtype bool"),
        ({"features": np.ones((6, 3), object)}, ValueError, "got dtype object"),
        ({"metric": "mrr"}, ValueError, "metric must be 'acc' for single-label .*got 'mrr'"),
        ({"metric": "rocauc"}, ValueError, "metric must be 'acc' .*got 'rocauc'"),
    ],
    ids=["graph-none", "list", "features-none", "complex", "bool", "object", "mrr", "rocauc"],
)
def test_dataset_refuses_fields_of_the_wrong_kind_naming_them(changes, error, words):
    # Before: AttributeError ('NoneType' object has no attribute 'num_nodes', 'list'
    # object has no attribute 'shape'), and complex or bool features were accepted.
    with pytest.raises(error, match="^dataset 'toy': .*" + words):
        dataset(**changes)


def test_dataset_takes_dense_sparse_and_jax_features_as_they_are():
    import jax.numpy as jnp
    import scipy.sparse as sp

    for features in (np.ones((6, 3), np.float32), sp.csr_matrix(np.eye(6, 3)), jnp.ones((6, 3))):
        assert dataset(features=features).features is features
    assert dataset().metric == "acc"  # "auto": what class labels are scored by


def test_dataset_refuses_zero_nodes():
    empty = {k: np.zeros(0, np.int64) for k in SPLIT}
    with pytest.raises(ValueError, match="'toy' has no nodes"):
        dataset(
            graph=sg.Graph(np.zeros(0, np.int32), np.zeros(0, np.int32), None, 0),
            features=np.ones((0, 3), np.float32),
            labels=np.zeros(0, np.int64),
            split=empty,
        )


def test_an_empty_split_loads_but_training_refuses_it():
    ds = dataset(split={**SPLIT, "valid": []})
    assert ds.split_sizes == {"train": 2, "valid": 0, "test": 2}  # info may show it
    ds.require_splits(("train", "test"))
    with pytest.raises(ValueError, match="the 'valid' split is empty"):
        ds.require_splits()


# -- on-disk folders: the checks name the file ---------------------------------


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (
            {"split": {**TOY_SPLIT, "test": [7, 1]}},
            r"test\.npy: test: node 1 is in both the 'train'",
        ),
        ({"split": {**TOY_SPLIT, "train": [0, 1, 1]}}, r"train\.npy: train: node 1 appears more"),
        ({"features": np.ones((12, 0))}, r"manifest\.json: num_features: must be >= 1"),
        (
            {"n": 0, "split": {"train": [], "valid": [], "test": []}},
            r"manifest\.json: num_nodes: must be >= 1",
        ),
    ],
)
def test_ondisk_folders_with_degenerate_data_are_refused_naming_the_file(tmp_path, kwargs, words):
    folder = toy_ondisk(tmp_path / "ds", **kwargs)
    with pytest.raises(FormatError, match=words):
        load(str(folder))


@pytest.mark.parametrize("key", ["train", "valid", "test"])
def test_cli_train_refuses_an_empty_split_before_compiling(tmp_path, capsys, key):
    folder = toy_ondisk(tmp_path / "ds", split={**TOY_SPLIT, key: []})
    assert main(["train", "--dataset", str(folder), "--epochs", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"the {key!r} split is empty (0 nodes)" in err and str(folder) in err


def test_synthetic_scale_that_empties_a_split_is_refused(tmp_path, capsys):
    argv = ["info", "--dataset", "synthetic:arxiv", "--scale", "1e-9", "--root", str(tmp_path)]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "synthetic:arxiv at scale 1e-09 has 1 node(s) and an empty 'valid' split" in err
    # The smallest two-digit scale that generates (2.5e-05 was suggested before: it has
    # a node in every split, but 29 edges on 4 nodes, too dense to draw).
    assert "use a larger --scale (e.g. 0.00037)" in err
    assert not (tmp_path / "synthetic").exists()  # refused before generating or caching


# -- trainers and model builders ------------------------------------------------


@pytest.mark.parametrize("field", ["train_mask", "val_mask", "test_mask"])
def test_fit_refuses_an_empty_mask_before_compiling(field):
    ds = dataset()
    masks = {
        k: np.isin(np.arange(6), ds.split[s])
        for k, s in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test"))
    }
    masks[field] = np.zeros(6, bool)
    data = NodeData(ring(6), np.ones((6, 3), np.float32), np.zeros(6, np.int32), **masks)
    model = sg.create_model("gcn", 3, 2, hidden=4, layers=2, dropout=0.0)
    with pytest.raises(ValueError, match=f"fit: data.{field} selects no node"):
        fit(model, data, TrainConfig(epochs=1))


@pytest.mark.parametrize(
    ("in_features", "num_classes", "words"),
    [(0, 2, "in_features must be >= 1, got 0"), (3, 0, "num_classes must be >= 1, got 0")],
)
def test_create_model_refuses_zero_widths(in_features, num_classes, words):
    with pytest.raises(ValueError, match=words):
        sg.create_model("gcn", in_features, num_classes, hidden=4, layers=2, dropout=0.0)


# -- writers check what they wrote ------------------------------------------------


def _ragged(folder: Path) -> None:
    path = folder / "raw" / "node-feat.csv.gz"
    with gzip.open(path, "rt") as f:
        lines = f.read().splitlines()
    lines[3] = ",".join(lines[3].split(",")[:2])  # a row one value short: pandas pads NaN
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("nan-label", r"out/train\.npy: train\[0\]: node 0 has no label \(-1\)"),
        ("ragged", r"out/features\.npy: features\[3, 2\]: nan is not finite"),
    ],
)
def test_convert_refuses_output_that_loading_would_refuse(tmp_path, capsys, fault, words):
    y = raw_labels(40).astype(np.float64)
    if fault == "nan-label":
        y[0] = np.nan  # node 0 is in the train split
    folder = write_raw(tmp_path, "ogbn-arxiv", label_values=y)
    if fault == "ragged":
        _ragged(folder)
    out = tmp_path / "out"
    argv = ["ogbn-arxiv", "--root", str(tmp_path), "--out", str(out), "--no-progress"]
    assert convert_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nothing was written" in err
    assert re.search(words, err)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_a_failed_overwrite_keeps_the_old_dataset(tmp_path):
    out = save(dataset(), tmp_path / "out")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad = dataset(features=np.full((6, 3), np.nan, np.float32))
    with pytest.raises(FormatError, match=r"features\[0, 0\]: nan is not finite"):
        save(bad, out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_writer_refuses_zero_nodes_before_writing(tmp_path):
    from sparsegcn.datasets.ondisk import DatasetWriter

    with pytest.raises(ValueError, match="num_nodes must be >= 1, got 0"):
        DatasetWriter(tmp_path / "out", num_nodes=0, num_stored_edges=0, num_features=1)
    assert list(tmp_path.iterdir()) == []

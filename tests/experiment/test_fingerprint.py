"""What a result depends on is fingerprinted (issue 26, class 5).

A checkpoint records digests of the features and the edges beside the
labels and splits; ``predict`` and ``--resume`` refuse data that differs,
before anything is compiled. Checkpoints written before these digests
existed still load.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest
import scipy.sparse as sp

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.datasets import load, save
from sparsegcn.datasets.ondisk import ExpandedRows, load_ondisk
from sparsegcn.experiment import Experiment, build_model, checkpoint_metadata, restore_checkpoint
from sparsegcn.experiment.build import node_data, reorder_dataset, streamed_data
from sparsegcn.experiment.lifecycle import check_dataset
from sparsegcn.train import (
    CheckpointError,
    init_state,
    make_optimizer,
    save_checkpoint,
    state_template,
)
from sparsegcn.train import checkpoint as checkpoint_module
from sparsegcn.train.checkpoint import dataset_fingerprint
from sparsegcn.train.minibatch import minibatch_data

SEEDS = [0]


@pytest.fixture(scope="module")
def dataset():
    return load("synthetic:tiny", scale=0.1)


def other_features(dataset):
    x = np.array(dataset.features)
    x[7] += 1.0  # one row changed
    return dataclasses.replace(dataset, features=x)


def rewired(dataset):
    g = dataset.graph
    receivers = np.array(g.receivers)
    receivers[0] = (receivers[0] + 1) % g.num_nodes  # one edge re-targeted
    return dataclasses.replace(dataset, graph=sg.Graph(g.senders, receivers, None, g.num_nodes))


@pytest.fixture(scope="module")
def stored(dataset, tmp_path_factory):
    """An on-disk copy of ``dataset`` and a checkpoint as ``train --dataset DIR
    --checkpoint`` writes it (state fresh from init: nothing is trained)."""
    root = tmp_path_factory.mktemp("fp")
    folder = save(dataset, root / "ds")
    on_disk = load(str(folder))
    exp = Experiment(dataset=str(folder), hidden=8, seeds=len(SEEDS))
    model = build_model(exp, on_disk)
    tx = make_optimizer(exp.train_config())
    template = state_template(lambda k: init_state(model, tx, k), len(SEEDS))  # traced only

    def zeros(leaf):  # a state of the right shapes, without compiling anything
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(np.zeros((*leaf.shape, 2), np.uint32))
        return np.zeros(leaf.shape, leaf.dtype)

    state = jax.tree.map(zeros, template)
    metadata = checkpoint_metadata(exp, on_disk)
    save_checkpoint(root / "ck", state, seeds=SEEDS, metadata=metadata)
    return root, exp, model


def test_digests_see_one_changed_row_and_one_rewired_edge(dataset):
    base = dataset_fingerprint(dataset)
    feat, graph = (
        dataset_fingerprint(other_features(dataset)),
        dataset_fingerprint(rewired(dataset)),
    )
    assert feat["features_sha256"] != base["features_sha256"]
    assert graph["graph_sha256"] != base["graph_sha256"]
    assert {k: v for k, v in feat.items() if k != "features_sha256"} == {
        k: v for k, v in base.items() if k != "features_sha256"
    }


def test_digests_do_not_depend_on_the_storage(dataset):
    x = np.asarray(dataset.features)
    assert checkpoint_module.features_sha256(sp.csr_array(x)) == checkpoint_module.features_sha256(
        x
    )
    halves = x.astype(np.float16)
    assert checkpoint_module.features_sha256(halves) == checkpoint_module.features_sha256(
        halves.astype(np.float32)
    )
    g = dataset.graph
    order = np.random.default_rng(0).permutation(g.num_edges)
    shuffled = sg.Graph(np.asarray(g.senders)[order], np.asarray(g.receivers)[order], None, 300)
    assert checkpoint_module.graph_sha256(shuffled) == checkpoint_module.graph_sha256(g)


def test_large_arrays_are_hashed_by_sampled_rows(dataset, monkeypatch, tmp_path):
    """Above FINGERPRINT_BYTES only evenly spaced rows are read: a change in one of
    them shows, a change elsewhere does not (the documented cost of a cheap digest)."""
    monkeypatch.setattr(checkpoint_module, "FINGERPRINT_BYTES", 1024)
    monkeypatch.setattr(checkpoint_module, "FINGERPRINT_ROWS", 4)  # rows 0, 99, 199, 299
    x = np.array(dataset.features)
    base = checkpoint_module.features_sha256(x)
    x[150] += 1.0
    assert checkpoint_module.features_sha256(x) == base
    x[199] += 1.0
    assert checkpoint_module.features_sha256(x) != base
    lazy = load_ondisk(save(dataset, tmp_path / "ds"), expand_limit=0)
    assert isinstance(lazy.graph.receivers, ExpandedRows)  # never read whole
    assert checkpoint_module.graph_sha256(lazy.graph) == checkpoint_module.graph_sha256(
        dataset.graph
    )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (other_features, "the features differ from those it was trained on"),
        (rewired, "the graph's edges differ from those it was trained on"),
    ],
)
def test_resume_and_predict_refuse_other_data_under_the_same_name(stored, change, words, capsys):
    root, exp, model = stored
    folder = root / "ds"
    original = load(str(folder))
    other = change(original)
    with pytest.raises(CheckpointError, match=words):
        restore_checkpoint(dataclasses.replace(exp, resume=str(root / "ck")), other, model)
    replaced = root / change.__name__
    save(dataclasses.replace(other, info={}), replaced)  # same name, sizes, labels, splits
    out = root / "p.npy"
    argv = ["predict", "--checkpoint", str(root / "ck"), "--dataset", str(replaced)]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err
    assert not out.exists()
    train = ["train", "--dataset", str(replaced), "--hidden", "8", "--no-progress"]
    assert main([*train, "--resume", str(root / "ck")]) == 2
    assert words in capsys.readouterr().err


def test_old_checkpoints_without_data_digests_still_load(stored, dataset):
    root, exp, model = stored
    (manifest_path,) = (root / "ck").glob("ckpt-*.json")
    old = root / "old"
    old.mkdir()
    manifest = json.loads(manifest_path.read_text())
    for key in ("features_sha256", "graph_sha256"):
        del manifest["metadata"]["dataset"][key]
    (old / manifest_path.name).write_text(json.dumps(manifest))
    (old / manifest["arrays"]).write_bytes((root / "ck" / manifest["arrays"]).read_bytes())
    ckpt = restore_checkpoint(dataclasses.replace(exp, resume=str(old)), load(exp.dataset), model)
    assert ckpt.seeds == tuple(SEEDS)
    with pytest.raises(CheckpointError, match="labels_split_sha256"):  # what it records is checked
        split = dict(dataset.split, test=dataset.split["test"][:-1])
        restore_checkpoint(
            dataclasses.replace(exp, resume=str(old)),
            dataclasses.replace(dataset, split=split),
            model,
        )


def reversed_splits(dataset):
    """The same train, valid and test nodes, each split's rows in the opposite order."""
    return dataclasses.replace(dataset, split={k: v[::-1].copy() for k, v in dataset.split.items()})


def test_a_node_run_reads_its_splits_as_sets(dataset):
    """What the node trainers read of a split is the same for any order of its rows."""
    shuffled = reversed_splits(dataset)
    full, other = node_data(dataset, "gcn"), node_data(shuffled, "gcn")
    for mask in ("train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(full, mask), getattr(other, mask))
    np.testing.assert_array_equal(
        minibatch_data(full).train_nodes, minibatch_data(other).train_nodes
    )
    np.testing.assert_array_equal(
        streamed_data(dataset, "sage", "host").train_nodes,
        streamed_data(shuffled, "sage", "host").train_nodes,
    )
    for key, ids in reorder_dataset(shuffled, "degree")[0].split.items():
        np.testing.assert_array_equal(ids, reorder_dataset(dataset, "degree")[0].split[key])


def test_resume_accepts_split_files_that_reorder_the_same_ids(stored):
    root, exp, model = stored
    folder = save(
        dataclasses.replace(reversed_splits(load(str(root / "ds"))), info={}), root / "rev"
    )
    reordered = load(str(folder))
    assert reordered.split["test"].tolist() == sorted(
        reordered.split["test"].tolist(), reverse=True
    )
    # exp names the first folder, as if its split files had been rewritten in this order.
    resume = dataclasses.replace(exp, resume=str(root / "ck"))
    check_dataset(resume.resume, reordered)
    assert restore_checkpoint(resume, reordered, model).seeds == tuple(SEEDS)
    # Another split of the same nodes is another run.
    moved = dict(reordered.split)
    moved["valid"], moved["test"] = moved["valid"][1:], np.append(moved["test"], moved["valid"][0])
    with pytest.raises(CheckpointError, match="the labels or splits differ"):
        check_dataset(resume.resume, dataclasses.replace(reordered, split=moved))


def test_a_checkpoint_that_recorded_splits_in_file_order_still_loads(stored):
    """Before splits were sorted for the fingerprint, a checkpoint recorded them as read."""
    root, exp, model = stored
    shuffled = reversed_splits(load(exp.dataset))
    (manifest_path,) = (root / "ck").glob("ckpt-*.json")
    old = root / "file-order"
    old.mkdir()
    manifest = json.loads(manifest_path.read_text())
    manifest["metadata"]["dataset"] = dataset_fingerprint(shuffled)
    (old / manifest_path.name).write_text(json.dumps(manifest))
    (old / manifest["arrays"]).write_bytes((root / "ck" / manifest["arrays"]).read_bytes())
    check_dataset(str(old), shuffled)
    ckpt = restore_checkpoint(dataclasses.replace(exp, resume=str(old)), shuffled, model)
    assert ckpt.seeds == tuple(SEEDS)

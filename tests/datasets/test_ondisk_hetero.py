"""The on-disk hetero format: round trips equal array by array and memory-mapped; missing,
truncated, corrupt and inconsistent files refused naming them; nothing overwritten but its own
folders; a saved folder trains through the CLI exactly as the dataset it was saved from."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hetero_graphs import EMPTY, NUM_NODES, small_hetero, tiny_spec

from sparsegcn import Graph
from sparsegcn.cli import main
from sparsegcn.datasets import Dataset, save
from sparsegcn.datasets.mag import HeteroDataset, generate_mag, load_mag, write_mag_raw
from sparsegcn.datasets.ondisk import FormatError
from sparsegcn.datasets.ondisk_hetero import (
    MANIFEST,
    is_hetero_ondisk,
    load_hetero_ondisk,
    save_hetero,
    verify_hetero_checksums,
)
from sparsegcn.datasets.to_disk import main as to_disk
from sparsegcn.files import sha256_file
from sparsegcn.hetero import HeteroGraph
from sparsegcn.tasks import task_name

WRITES = "author___writes___paper"


def small_dataset() -> HeteroDataset:
    """small_hetero's graph (a duplicate edge, a self-loop, an empty relation, a node
    type without edges), features of papers and topics, unlabelled papers (-1)."""
    rng = np.random.default_rng(0)
    return HeteroDataset(
        name="small",
        graph=small_hetero(),
        features={
            "topic": rng.normal(size=(NUM_NODES["topic"], 2)).astype(np.float32),
            "paper": rng.normal(size=(NUM_NODES["paper"], 4)).astype(np.float32),
        },
        target="paper",
        labels=np.array([0, 2, -1, 1, 2, -1, 0]),
        num_classes=3,
        split={"train": np.array([0, 1, 3]), "valid": np.array([4]), "test": np.array([6])},
        info={"source": "hand-made", "seed": 7},
    )


def assert_same(a: HeteroDataset, b: HeteroDataset) -> None:
    """Equal array by array, dtypes and the order of types and relations included."""
    assert (a.name, a.target, a.num_classes, a.metric) == (
        b.name,
        b.target,
        b.num_classes,
        b.metric,
    )
    assert list(a.graph.num_nodes.items()) == list(b.graph.num_nodes.items())
    assert a.graph.edge_types == b.graph.edge_types
    for key in a.graph.edge_types:
        x, y = a.graph.relations[key], b.graph.relations[key]
        assert (x.num_src, x.num_dst) == (y.num_src, y.num_dst), key
        for side in ("senders", "receivers"):
            u, v = np.asarray(getattr(x, side)), np.asarray(getattr(y, side))
            np.testing.assert_array_equal(u, v, err_msg=f"{key} {side}")
            assert u.dtype == v.dtype == np.int32, key
    assert list(a.features) == list(b.features)
    for t in a.features:
        np.testing.assert_array_equal(a.features[t], b.features[t], err_msg=t)
        assert a.features[t].dtype == b.features[t].dtype
    np.testing.assert_array_equal(a.labels, b.labels)
    assert np.asarray(a.labels).dtype == np.asarray(b.labels).dtype == np.int64
    assert list(a.split) == list(b.split)
    for key in a.split:
        np.testing.assert_array_equal(a.split[key], b.split[key], err_msg=key)


@pytest.fixture
def saved(tmp_path):
    dataset = small_dataset()
    return dataset, save_hetero(dataset, tmp_path / "small")


def test_round_trip_is_equal_and_memory_mapped(saved):
    dataset, folder = saved
    assert is_hetero_ondisk(folder) and task_name(str(folder)) == "hetero"
    loaded = load_mag(str(folder), verify=True)  # a path: the on-disk reader
    assert_same(dataset, loaded)
    assert loaded.graph.num_edges[EMPTY] == 0
    for view in loaded.graph.relations.values():
        assert isinstance(view.senders, np.memmap) and not view.senders.flags.writeable
    assert isinstance(loaded.features["paper"], np.memmap)
    assert isinstance(loaded.labels, np.memmap) and isinstance(loaded.split["test"], np.memmap)
    assert loaded.info == {"source": "hand-made", "seed": 7, "folder": str(folder)}
    assert loaded.stats() == dataset.stats()
    manifest = json.loads((folder / MANIFEST).read_text())
    assert [t["type"] for t in manifest["node_types"]] == list(NUM_NODES)
    assert [r["edge_type"][1] for r in manifest["relations"]] == [
        "cites",
        "writes",
        "has_topic",
        "hosts",
    ]
    for entry in manifest["files"].values():
        assert entry["sha256"] == sha256_file(folder / entry["file"])
        assert entry["bytes"] == (folder / entry["file"]).stat().st_size
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [MANIFEST, *(e["file"] for e in manifest["files"].values())]
    )


def test_synthetic_mag_round_trip_and_a_copy_of_a_loaded_folder(tmp_path):
    data = generate_mag(tiny_spec(), seed=3)
    folder = save_hetero(data, tmp_path / "mag")
    loaded = load_hetero_ondisk(folder)
    assert_same(data, loaded)
    for target in (folder, folder / "inner"):
        with pytest.raises(ValueError, match="would overwrite the dataset's own folder"):
            save_hetero(loaded, target, overwrite=True)
    assert_same(data, load_hetero_ondisk(save_hetero(loaded, tmp_path / "copy")))


def test_checksum_mismatch_is_refused_on_request_naming_the_file(saved):
    _, folder = saved
    path = folder / "features.paper.npy"
    features = np.load(path)
    features[3, 1] += 1.0  # same size, dtype and shape: only the checksum can tell
    np.save(path, features)
    assert load_hetero_ondisk(folder).num_classes == 3  # by default the hash is not checked
    with pytest.raises(FormatError, match=r"features.paper.npy: sha256: checksum mismatch") as err:
        load_hetero_ondisk(folder, verify=True)
    assert err.value.file == path and err.value.field == "sha256"
    with pytest.raises(FormatError, match=r"features\.paper\.npy: sha256"):
        verify_hetero_checksums(folder)


def test_a_missing_or_truncated_file_is_refused_naming_it(saved):
    _, folder = saved
    path = folder / f"receivers.{WRITES}.npy"
    data = path.read_bytes()
    path.write_bytes(data[:-4])
    with pytest.raises(FormatError, match=rf"receivers.{WRITES}.npy: bytes: holds \d+ bytes but"):
        load_hetero_ondisk(folder)
    path.unlink()
    with pytest.raises(FormatError, match=rf"receivers.{WRITES}.npy: receivers.{WRITES}: missing"):
        load_hetero_ondisk(folder)
    with pytest.raises(FormatError, match=rf"receivers.{WRITES}.npy: receivers.{WRITES}: missing"):
        verify_hetero_checksums(folder)


def rewrite(folder, key: str, array: np.ndarray) -> None:
    """Replaces file ``key`` and updates the manifest's size, dtype and shape (not the hash)."""
    manifest = json.loads((folder / MANIFEST).read_text())
    entry = manifest["files"][key]
    np.save(folder / entry["file"], array)
    entry.update(
        bytes=(folder / entry["file"]).stat().st_size,
        dtype=str(array.dtype),
        shape=list(array.shape),
    )
    (folder / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("key", "array", "message"),
    [
        (
            f"receivers.{WRITES}",
            np.array([0, 0, 1, 2, 3, 7, 5], np.int32),
            rf"receivers.{WRITES}.npy: receivers\[5\]: paper id 7 is outside \[0, 7\)",
        ),
        (
            f"senders.{WRITES}",
            np.array([0, 1, 1, 2, 3, 3, -1], np.int32),
            rf"senders.{WRITES}.npy: senders\[6\]: author id -1 is outside \[0, 5\)",
        ),
        (
            f"senders.{WRITES}",
            np.zeros(7, np.int64),
            rf"senders.{WRITES}.npy: dtype: senders.{WRITES} must be one of \('int32',\)",
        ),
        (
            f"senders.{WRITES}",
            np.zeros(6, np.int32),
            rf"senders.{WRITES}.npy: shape: senders.{WRITES} must be \[7\]",
        ),
        ("labels", np.array([0, 2, -1, 1, 3, -1, 0]), r"labels.npy: labels\[4\]: 3 is outside"),
        ("labels", np.array([0, 2, -1, 1, 2, -1, -1]), r"test.npy: test\[0\]: paper 6 has no lab"),
        ("features.paper", np.zeros((7, 4), np.float64), r"features.paper.npy: dtype: features"),
        ("valid", np.array([3]), r"valid.npy: valid: node 3 is in both the 'train' and"),
        ("test", np.array([9]), r"test.npy: test\[0\]: paper id 9 is outside \[0, 7\)"),
    ],
)
def test_each_bad_file_is_one_error_naming_file_and_field(saved, key, array, message):
    _, folder = saved
    rewrite(folder, key, array)
    with pytest.raises(FormatError, match=message):
        load_hetero_ondisk(folder)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # What the hetero task cannot train is refused on loading too.
        (
            lambda m: m.update(metric="rocauc"),
            r"manifest.json: metric: must be 'acc' \(the hetero task scores accuracy\)",
        ),
        (
            lambda m: m["node_types"][3].update(num_nodes=0),
            r"manifest.json: node_types\[3\].num_nodes: node type 'venue' has no nodes",
        ),
        (
            lambda m: m.update(name="ogbn-mag"),
            r"manifest.json: num_classes: ogbn-mag has 349 classes \(venues\), got 3",
        ),
        (lambda m: m.update(format="sparsegcn-graph"), r"manifest.json: format: must be"),
        (lambda m: m.update(version=2), r"manifest.json: version: this sparsegcn reads version 1"),
        (lambda m: m.update(target="book"), r"manifest.json: target: 'book' is not in node_types"),
        (lambda m: m.update(num_classes=0), r"manifest.json: num_classes: must be >= 1"),
        (
            lambda m: m["relations"][1].update(edge_type=["author", "writes", "book"]),
            r"relations\[1\].edge_type: target type 'book' is not in node_types",
        ),
        (
            lambda m: m["node_types"].append({"type": "paper", "num_nodes": 3}),
            r"manifest.json: node_types: lists 'paper' more than once",
        ),
        (
            lambda m: m["node_types"][0].update(type="../paper"),
            r"node_types\[0\].type: must be a file-name safe string",
        ),
        (lambda m: m["files"].pop("labels"), r"manifest.json: files.labels: missing"),
        (
            lambda m: m["files"].update(extra=m["files"]["labels"]),
            r"files.extra: is not a file of this dataset's relations",
        ),
        (
            lambda m: m["files"]["labels"].update(file="../labels.npy"),
            r"files.labels: must be \{file \(a name\)",
        ),
        (
            lambda m: m["relations"][1].update(num_edges=8),
            rf"senders.{WRITES}.npy: shape: senders.{WRITES} must be \[8\]",
        ),
    ],
)
def test_an_inconsistent_manifest_is_refused(saved, edit, message):
    _, folder = saved
    manifest = json.loads((folder / MANIFEST).read_text())
    edit(manifest)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=message):
        load_hetero_ondisk(folder)


def test_overwrites_only_its_own_folders(tmp_path):
    dataset = small_dataset()
    folder = save_hetero(dataset, tmp_path / "h")
    with pytest.raises(ValueError, match="exists and is not empty; pass overwrite=True"):
        save_hetero(dataset, folder)
    other = generate_mag(tiny_spec(), seed=1)
    save_hetero(other, folder, overwrite=True)
    assert_same(other, load_hetero_ondisk(folder))
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"it holds notes.txt, which no sparsegcn-hetero manifest"):
        save_hetero(dataset, folder, overwrite=True)
    (folder / "notes.txt").unlink()
    # A folder of another on-disk format is not this format's to replace.
    node = save(
        Dataset(
            name="pair",
            graph=Graph(np.array([0, 1]), np.array([1, 0]), None, 2),
            features=np.ones((2, 1), np.float32),
            labels=np.array([0, 1]),
            split={"train": np.array([0]), "valid": np.array([1]), "test": np.array([1])[:0]},
            num_classes=2,
        ),
        tmp_path / "node",
    )
    with pytest.raises(ValueError, match="which no sparsegcn-hetero manifest there lists"):
        save_hetero(dataset, node, overwrite=True)
    assert (node / "indptr.npy").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h", "node"]  # no temporary left


def test_what_the_format_cannot_store_is_refused_before_writing(tmp_path):
    dataset = small_dataset()
    graph = dataset.graph
    weighted = {k: (v.senders, v.receivers) for k, v in graph.relations.items()}
    key = next(iter(weighted))
    weighted[key] = (*weighted[key], np.ones(len(weighted[key][0]), np.float32))
    cases = [
        (dataclasses.replace(dataset, graph=HeteroGraph(graph.num_nodes, weighted)), "weights"),
        (
            dataclasses.replace(
                dataset,
                graph=HeteroGraph(
                    {**graph.num_nodes, "a/b": 1},
                    {k: (v.senders, v.receivers) for k, v in graph.relations.items()},
                ),
            ),
            r"node type 'a/b' cannot name a file",
        ),
    ]
    features = dict(dataset.features, paper=dataset.features["paper"].copy())
    features["paper"][2, 3] = np.nan
    cases.append(
        (
            dataclasses.replace(dataset, features=features),
            r"features.paper.npy: features.paper\[2, 3\]: nan is not finite .*nothing was written",
        )
    )
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            save_hetero(bad, tmp_path / "bad")
        assert list(tmp_path.iterdir()) == []  # nothing, no temporary folder either


def test_info_reports_a_folder_as_the_dataset_it_holds(saved, tmp_path, capsys):
    dataset, folder = saved
    out = tmp_path / "info.json"
    argv = ["info", "--dataset", str(folder), "--verify", "--json", str(out), "--no-progress"]
    assert main(argv) == 0
    stats = json.loads(out.read_text())
    assert {k: v for k, v in stats.items() if k != "load_s"} == dataset.stats()
    assert (stats["num_nodes"], stats["num_edges"]) == (17, 20)
    assert stats["num_edges_per_relation"]["paper___cites___paper"] == 8
    text = capsys.readouterr().out
    assert str(folder) in text and "edges: venue___hosts___paper" in text
    np.save(folder / "labels.npy", np.array([0, 2, -1, 1, 2, -1, 1]))  # same size: the hash
    assert main(argv) == 2
    assert "labels.npy: sha256: checksum mismatch" in capsys.readouterr().err
    assert main(["info", "--dataset", "synthetic:mag", "--verify"]) == 2
    assert "--verify applies only to on-disk dataset folders" in capsys.readouterr().err


def test_a_saved_folder_trains_through_the_cli_as_the_dataset_it_was_saved_from(tmp_path):
    """ogbn-mag read from OGB's raw layout, then written with to_disk: one epoch on each,
    same seed, gives the same report (timings and the dataset path aside)."""
    write_mag_raw(generate_mag(tiny_spec(feature_signal=0.5), seed=4), tmp_path / "ogbn_mag")
    folder = tmp_path / "mag"
    assert (
        to_disk(["ogbn-mag", "--root", str(tmp_path), "--out", str(folder), "--no-progress"]) == 0
    )
    assert to_disk(["ogbn-mag", "--root", str(tmp_path), "--out", str(folder)]) == 2  # exists
    common = ["--model", "rgcn", "--fanouts", "4", "--layers", "1", "--batch-size", "128"]
    common += ["--epochs", "1", "--hidden", "8", "--seed", "3", "--no-progress", "--json"]
    reports = {}
    for dataset, extra in (("ogbn-mag", ["--root", str(tmp_path)]), (str(folder), [])):
        out = tmp_path / f"{len(reports)}.json"
        assert main(["train", "--dataset", dataset, *extra, *common, str(out)]) == 0
        reports[dataset] = json.loads(out.read_text())
    memory, disk = reports.values()
    assert disk["task"] == "hetero" and disk["dataset"] == "ogbn-mag"
    assert disk["config"]["dataset"] == str(folder) and disk["config"]["root"] is None
    timings = {"compile_s", "epoch_ms_median", "epoch_s", "eval_s", "load_s", "wall_s"}
    timings |= {"train_step_ms_median", "config"}
    assert set(memory) == set(disk)
    for key in set(memory) - timings:
        assert memory[key] == disk[key], key
    assert disk["train_loss"][0][0] > 0 and disk["batches_per_epoch"] == 2
    config = {k: v for k, v in disk["config"].items() if k not in ("dataset", "root")}
    assert config == {k: v for k, v in memory["config"].items() if k not in ("dataset", "root")}


def _train_argv(folder, *extra) -> list[str]:
    argv = ["train", "--dataset", str(folder), "--model", "rgcn", "--fanouts", "4,3"]
    return [*argv, "--batch-size", "128", "--epochs", "1", "--hidden", "8", "--no-progress", *extra]


@pytest.fixture
def mag_folder(tmp_path):
    return save_hetero(generate_mag(tiny_spec(), seed=4), tmp_path / "mag")


def test_non_finite_features_are_refused_before_training_naming_type_row_and_column(
    mag_folder, tmp_path, capsys
):
    """A NaN row of a test paper without edges trained with exit 0, classed 0."""
    features = np.load(mag_folder / "features.paper.npy")
    features[31, 2] = np.nan
    rewrite(mag_folder, "features.paper", features)
    assert load_hetero_ondisk(mag_folder).num_classes == 4  # loading reads no feature
    assert main(_train_argv(mag_folder, "--checkpoint", str(tmp_path / "ck"))) == 2
    err = capsys.readouterr().err
    assert "features['paper'][31, 2] = nan is not finite" in err, err
    assert not (tmp_path / "ck").exists()
    features[31, 2] = np.inf
    rewrite(mag_folder, "features.paper", features)
    assert main(_train_argv(mag_folder)) == 2
    assert "features['paper'][31, 2] = inf is not finite" in capsys.readouterr().err


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_an_empty_split_is_refused_before_training_naming_it(mag_folder, split, capsys):
    """An empty train split trained with loss 0.0; an empty valid or test one scored NaN."""
    rewrite(mag_folder, split, np.zeros(0, np.int64))
    assert load_hetero_ondisk(mag_folder).stats()[f"num_{split}"] == 0  # info shows it
    assert main(_train_argv(mag_folder)) == 2
    err = capsys.readouterr().err
    assert f"the {split!r} split is empty (0 nodes); training needs nodes in each of" in err, err
    assert "RuntimeWarning" not in err

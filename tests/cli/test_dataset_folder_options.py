"""Graph and hetero dataset folders on the command line: ``--root`` refused, not
ignored, and ``--verify`` for folders only, as for node folders; a non-finite float
feature in a graph folder named at load, before any training."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from graph_sets import random_graphs, write_mini
from hetero_graphs import tiny_spec

from sparsegcn.cli import main
from sparsegcn.datasets import save
from sparsegcn.datasets.mag import generate_mag
from sparsegcn.datasets.ondisk_graphs import save_graphs
from sparsegcn.datasets.ondisk_hetero import save_hetero
from sparsegcn.datasets.synthetic import load_synthetic
from sparsegcn.tasks.graph import describe_graphs
from sparsegcn.tasks.hetero import describe_hetero


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``{kind: folder}`` of an on-disk node, graph and hetero dataset."""
    base = tmp_path_factory.mktemp("folders")
    node = load_synthetic("tiny", base / "root", scale=0.1)
    return {
        "node": save(node, base / "node"),
        "graph": save_graphs(random_graphs(9, seed=2), base / "graph"),
        "hetero": save_hetero(generate_mag(tiny_spec(), seed=0), base / "hetero"),
    }


@pytest.mark.parametrize("kind", ["node", "graph", "hetero"])
def test_a_root_for_a_folder_is_refused_not_ignored(folders, kind, tmp_path, capsys):
    # Before: graph and hetero folders loaded (exit 0) with --root ignored.
    root = tmp_path / "nonexistent"
    argv = ["info", "--dataset", str(folders[kind]), "--root", str(root), "--no-progress"]
    assert main(argv) == 2
    assert f"root='{root}' applies only to datasets named by name" in one_error(capsys)


def test_verify_applies_to_folders_only_from_python_as_from_the_cli(tmp_path, folders):
    # Before: describe_graphs("tu:MINI", verify=True) loaded without a check (the CLI
    # refused --verify; the Python call the CLI makes ignored it).
    write_mini(tmp_path / "tu" / "MINI")
    with pytest.raises(ValueError, match=r"verify=True applies only to on-disk dataset folders"):
        describe_graphs("tu:MINI", tmp_path, verify=True)
    with pytest.raises(ValueError, match=r"root='.*' applies only to datasets named by name"):
        describe_hetero(str(folders["hetero"]), str(tmp_path))
    with pytest.raises(ValueError, match=r"seed=3 applies only to generated datasets"):
        describe_hetero("ogbn-mag", tmp_path, seed=3)
    stats, _ = describe_graphs(str(folders["graph"]), None, verify=True)
    assert stats["num_graphs"] == 9


def test_verify_checks_a_graph_folder_as_it_checks_a_node_folder(tmp_path, capsys):
    folder = save_graphs(random_graphs(9, seed=2), tmp_path / "graph")
    labels = np.load(folder / "labels.npy")
    np.save(folder / "labels.npy", 1 - labels)  # still valid labels: only sha256 tells
    argv = ["info", "--dataset", str(folder), "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--verify"]) == 2
    assert "labels.npy: sha256: checksum mismatch" in one_error(capsys)


@pytest.mark.parametrize(
    "command",
    [["info"], ["train", "--model", "gin", "--epochs", "1", "--seeds", "1"]],
)
def test_a_nan_feature_of_a_graph_folder_is_named_before_training(tmp_path, command, capsys):
    # Before: info passed, and training ended "diverged ... the learning rate is too high".
    folder = save_graphs(random_graphs(30, seed=1), tmp_path / "graph")
    features = np.load(folder / "features.npy")
    features[3, 1] = np.nan
    np.save(folder / "features.npy", features)
    manifest = json.loads((folder / "manifest.json").read_text())
    digest = hashlib.sha256((folder / "features.npy").read_bytes()).hexdigest()
    manifest["files"]["features"]["sha256"] = digest
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert main([*command, "--dataset", str(folder), "--no-progress"]) == 2
    assert "features.npy: features[3, 1]: nan is not finite" in one_error(capsys)

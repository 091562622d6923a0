"""The command line: a thin layer whose outputs match the library's."""

import json
from pathlib import Path

import numpy as np
import pytest

from sparsegcn.cli import main
from sparsegcn.datasets.stats import describe, edge_homophily

TRAIN_KEYS = {
    "dataset",
    "model",
    "backend",
    "num_nodes",
    "num_edges",
    "seeds",
    "test_acc_mean",
    "test_acc_std",
    "val_acc_mean",
    "train_step_ms_median",
    "compile_s",
    "wall_s",
}


def test_info_reports_cora(cora, data_root, tmp_path, capsys):
    out = tmp_path / "info.json"
    assert (
        main(
            [
                "info",
                "--dataset",
                "cora",
                "--root",
                str(data_root),
                "--json",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    stats = json.loads(out.read_text())
    assert {
        "num_nodes",
        "num_edges",
        "num_stored_edges",
        "num_features",
        "num_classes",
        "split_sizes",
        "homophily",
        "bytes",
    } <= set(stats)
    assert (stats["num_nodes"], stats["num_edges"], stats["num_stored_edges"]) == (
        2708,
        5278,
        10556,
    )
    assert stats["split_sizes"] == {"train": 140, "valid": 500, "test": 1000}
    # Independent homophily: via a dense label-agreement matrix over the scipy adjacency.
    a = cora.graph.to_scipy().tocoo()
    expected = np.mean(cora.labels[a.row] == cora.labels[a.col])
    assert stats["homophily"] == pytest.approx(expected)
    assert "edge homophily" in capsys.readouterr().out


def test_homophily_ignores_unlabelled_nodes(cora):
    import dataclasses

    labels = cora.labels.copy()
    labels[cora.split["train"][-1] + 1 :] = -1  # keep the split nodes labelled
    labels[cora.split["valid"]] = cora.labels[cora.split["valid"]]
    labels[cora.split["test"]] = cora.labels[cora.split["test"]]
    partial = dataclasses.replace(cora, labels=labels)
    s, r = np.asarray(cora.graph.senders), np.asarray(cora.graph.receivers)
    keep = (labels[s] >= 0) & (labels[r] >= 0)
    assert edge_homophily(partial) == pytest.approx(np.mean(labels[s][keep] == labels[r][keep]))
    assert describe(partial)["num_nodes"] == 2708


def test_train_writes_the_promised_report(data_root, tmp_path, capsys):
    out = tmp_path / "report.json"
    argv = [
        "train",
        "--dataset",
        "cora",
        "--root",
        str(data_root),
        "--epochs",
        "5",
        "--seeds",
        "2",
        "--json",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert set(report) >= TRAIN_KEYS
    assert report["seeds"] == 2 and report["num_nodes"] == 2708 and report["dataset"] == "cora"
    assert 0.0 <= report["test_acc_mean"] <= 1.0 and report["train_step_ms_median"] > 0
    table = capsys.readouterr().out
    assert "test acc" in table and "±" in table


def test_bad_input_is_a_clean_error(capsys, tmp_path):
    assert main(["info", "--dataset", "cora2", "--root", str(tmp_path)]) == 2
    assert "unknown dataset 'cora2'" in capsys.readouterr().err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["info", "--dataset", "cora", "--root", str(a_file)]) == 2
    assert "is not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--backend", "csr"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train", "--epochs", "abc"],
            "sparsegcn train: error: argument --epochs: invalid int value: 'abc'",
        ),
        (
            ["train", "--backend", "csr"],
            "sparsegcn train: error: argument --backend: invalid choice: 'csr'",
        ),
        (["train", "--model", "sage", "--fanouts", "-1,5"], "written --flag=VALUE"),
        (
            ["predict", "--params", "foo"],
            "sparsegcn predict: error: argument --params: invalid choice",
        ),
        (["trian"], "sparsegcn: error: argument command: invalid choice: 'trian'"),
        ([], "sparsegcn: error: the following arguments are required: command"),
    ],
)
def test_a_bad_argument_is_one_line_and_status_2(argv, message, capsys):
    """argparse's errors print one line naming the value, not the whole usage before it."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "--help)" in lines[0], lines
    assert captured.out == ""


def test_version_is_the_one_pyproject_declares(capsys):
    import re
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE).group(1)
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"sparsegcn {declared}"


def test_train_and_info_refuse_an_output_that_is_one_of_their_inputs(tmp_path, capsys):
    """``--json DS/manifest.json`` destroyed the dataset's manifest; refused before any work."""
    import sparsegcn as sg

    ids = np.arange(4)
    dataset = sg.datasets.Dataset(
        name="four",
        graph=sg.Graph(ids, np.roll(ids, 1), None, 4),
        features=np.eye(4, dtype=np.float32),
        labels=np.array([0, 1, 0, 1]),
        split={"train": ids[:2], "valid": ids[2:3], "test": ids[3:]},
        num_classes=2,
    )
    folder = sg.datasets.save(dataset, tmp_path / "ds")
    manifest = (folder / "manifest.json").read_bytes()
    argv = ["train", "--dataset", str(folder), "--no-progress"]
    assert main([*argv, "--json", str(folder / "manifest.json")]) == 2
    err = capsys.readouterr().err
    assert f"--json {folder / 'manifest.json'} would overwrite the dataset {folder}" in err
    assert main([*argv, "--plot", str(folder / "curves.png")]) == 2
    assert f"--plot {folder / 'curves.png'} would overwrite the dataset" in capsys.readouterr().err
    assert main([*argv, "--checkpoint", str(folder)]) == 2
    assert "--checkpoint" in capsys.readouterr().err
    assert main(["info", "--dataset", str(folder), "--json", str(folder / "test.npy")]) == 2
    assert "--json" in capsys.readouterr().err
    assert (folder / "manifest.json").read_bytes() == manifest
    arrays = ("indptr", "indices", "features", "labels", "train", "valid", "test")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["manifest.json", *(f"{name}.npy" for name in arrays)]
    )


def test_an_output_on_a_linked_dataset_files_target_is_refused(data_root, tmp_path, capsys):
    """A dataset whose files link into a shared store (DVC, datalad, git-annex): before,
    ``--json store/ind.cora.x`` replaced the Cora features the link points at."""
    import shutil

    import sparsegcn as sg

    store, root = tmp_path / "store", tmp_path / "R"
    store.mkdir()
    (root / "planetoid").mkdir(parents=True)
    for source in sorted((data_root / "planetoid").glob("ind.cora.*")):
        shutil.copy(source, store / source.name)
        (root / "planetoid" / source.name).symlink_to(Path("..", "..", "store", source.name))
    features = (store / "ind.cora.x").read_bytes()
    argv = ["--dataset", "cora", "--root", str(root), "--no-progress"]
    for command in (["info"], ["train", "--epochs", "1"]):
        assert main([*command, *argv, "--json", str(store / "ind.cora.x")]) == 2
        err = capsys.readouterr().err
        assert f"--json {store / 'ind.cora.x'} would overwrite {store / 'ind.cora.x'}" in err
        assert f"in the dataset {root / 'planetoid'}, an input of this run" in err
    assert (store / "ind.cora.x").read_bytes() == features
    # An on-disk dataset whose features.npy links into another folder.
    ids = np.arange(4)
    dataset = sg.datasets.Dataset(
        name="four",
        graph=sg.Graph(ids, np.roll(ids, 1), None, 4),
        features=np.eye(4, dtype=np.float32),
        labels=np.array([0, 1, 0, 1]),
        split={"train": ids[:2], "valid": ids[2:3], "test": ids[3:]},
        num_classes=2,
    )
    folder = sg.datasets.save(dataset, tmp_path / "ds")
    (folder / "features.npy").rename(store / "features.npy")
    (folder / "features.npy").symlink_to(store / "features.npy")
    kept = (store / "features.npy").read_bytes()
    for command in (["info"], ["train", "--epochs", "1", "--no-progress"]):
        assert (
            main([*command, "--dataset", str(folder), "--json", str(store / "features.npy")]) == 2
        )
        assert "would overwrite" in capsys.readouterr().err
    assert (store / "features.npy").read_bytes() == kept
    assert sg.datasets.load(str(folder)).num_nodes == 4


def test_a_path_that_is_not_utf8_is_printed_and_the_report_written(tmp_path, monkeypatch):
    """Before: with a strict stdout (``LANG=en_US.UTF-8``; here ``PYTHONIOENCODING``'s
    way), printing ``checkpoint: ck\\xff`` failed after the run: exit 2, no --json."""
    import io
    import os

    buffer = io.BytesIO()
    stdout = io.TextIOWrapper(buffer, encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.setattr("sys.stdout", stdout)
    ck, report = os.fsdecode(bytes(tmp_path) + b"/ck\xff"), tmp_path / "r.json"
    argv = ["train", "--hidden", "4", "--epochs", "1", "--no-progress", "--checkpoint", ck]
    assert main([*argv, "--json", str(report)]) == 0
    assert json.loads(report.read_text())["checkpoint"].startswith(ck)
    assert b"checkpoint: " + bytes(tmp_path) + b"/ck\\udcff/ckpt-000001.json" in buffer.getvalue()


def test_a_home_folder_in_a_path_option_is_expanded(tmp_path, monkeypatch, capsys):
    # Before: --json=~/r.json (no shell expansion after "=") wrote ./~/r.json.
    import argparse

    from sparsegcn.cli.options import PATH_DESTS, expand_home

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert main(["train", "--epochs", "1", "--no-progress", "--json=~/r.json"]) == 0
    assert (home / "r.json").is_file() and not any(work.iterdir())
    args = expand_home(argparse.Namespace(**{d: "~/x" for d in PATH_DESTS}, seeds="~/x"))
    assert all(getattr(args, d) == str(home / "x") for d in PATH_DESTS)
    assert args.seeds == "~/x"  # not a path option

"""``sparsegcn train`` on graph datasets: settings refused before any data is read,
and (slow) a cross-validated MUTAG run with the report's keys."""

from __future__ import annotations

import json
import re

import pytest
from graph_sets import random_graphs, write_mini

from sparsegcn.cli import main


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--folds", "3"],
            r"folds=3 \(--folds\) applies only to graph-level datasets \(tu:NAME, ogbg-NAME, "
            r"synthetic:molNAME\)",
        ),
        (["--learn-eps"], r"learn_eps=True \(--learn-eps\) applies only to graph-level datasets"),
        (["--virtual-node"], r"virtual_node=True \(--virtual-node\) applies only to graph-level"),
        (["--degree-features"], r"degree_features=True \(--degree-features\) applies only to"),
        (["--packing", "random"], r"packing='random' \(--packing\) applies only to graph-level"),
        (["--dataset", "tu:MUTAG"], r"model 'gcn' does not train on it, choose one of \['gin'\]"),
        (["--dataset", "tu:MUTAG", "--model", "gin", "--folds", "1"], r"--folds must be 0"),
        (
            ["--dataset", "tu:MUTAG", "--model", "gin", "--plot", "x.png"],
            r"plot='x.png' is not supported",
        ),
        (
            ["--dataset", "tu:MUTAG", "--model", "gin", "--fanouts", "5,5"],
            r"fanouts='5,5' is not supported",
        ),
        (["--dataset", "tu:NOSUCH", "--model", "gin"], r"no recorded sha256"),
        (
            ["--dataset", "tu:MUTAG", "--model", "gin", "--sweep", "folds=1,3"],
            r"--folds must be 0 \(one holdout split\) or at least 2, got 1",
        ),
    ],
)
def test_refused_before_any_data_is_read(argv, message, capsys, tmp_path):
    code = main(["train", "--root", str(tmp_path), "--no-progress", *argv])
    assert code == 2
    assert re.search(message, one_error(capsys))
    assert not (tmp_path / "tu").exists() or not any((tmp_path / "tu").iterdir())


def test_info_shows_graph_counts_and_size_distributions(tmp_path, capsys):
    write_mini(tmp_path / "tu" / "MINI")
    out = tmp_path / "info.json"
    code = main(["info", "--dataset", "tu:MINI", "--root", str(tmp_path), "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert re.search(r"graphs\s+3\n", text) and "classes                -1: 1, 1: 2" in text
    stats = json.loads(out.read_text())
    assert stats["num_graphs"] == 3 and stats["class_counts"] == [1, 2]
    assert stats["nodes_per_graph"]["max"] == 3 and stats["edges_per_graph"]["min"] == 0
    assert stats["num_features"] == 5 and stats["num_edge_features"] == 4


def write_plain_tu(root, count: int = 30):
    """``tu:PLAIN`` under ``root``: ``random_graphs(count, seed=3)`` in the TU format without
    node labels. Returns the dataset and each node's graph."""
    import numpy as np

    data = random_graphs(count=count, seed=3)
    folder = root / "tu" / "PLAIN"
    folder.mkdir(parents=True)
    node_graph = np.repeat(np.arange(count), np.diff(data.node_ptr))
    edges = np.stack([data.senders, data.receivers], 1) + 1
    (folder / "PLAIN_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
    (folder / "PLAIN_graph_indicator.txt").write_text("".join(f"{g + 1}\n" for g in node_graph))
    (folder / "PLAIN_graph_labels.txt").write_text("".join(f"{y}\n" for y in data.labels))
    return data, node_graph


def test_degree_features_train_checkpoint_and_predict_on_graphs_without_node_labels(tmp_path):
    import numpy as np

    data, node_graph = write_plain_tu(tmp_path)  # no node labels: constant features
    out, ckpt = tmp_path / "report.json", tmp_path / "ckpt"
    argv = ["train", "--dataset", "tu:PLAIN", "--root", str(tmp_path), "--model", "gin"]
    argv += ["--degree-features", "--hidden", "4", "--layers", "2", "--epochs", "2"]
    argv += ["--no-progress", "--checkpoint", str(ckpt), "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["config"]["degree_features"] is True and report["model_style"] == "xu"
    # predict reads the checkpoint's setting and builds the same features (the dataset's
    # fingerprint matches); the embeddings start with the one-hot degrees' readout.
    emb = tmp_path / "e.npy"
    predict = ["predict", "--checkpoint", str(ckpt), "--out", str(tmp_path / "p.npy")]
    assert main([*predict, "--embeddings", str(emb)]) == 0
    degrees = np.bincount(data.receivers, minlength=data.num_nodes)
    distinct = np.unique(degrees)
    embeddings = np.load(emb)
    assert embeddings.shape == (30, distinct.size + 4)
    counts = [
        np.bincount(np.searchsorted(distinct, degrees[node_graph == g]), minlength=distinct.size)
        for g in range(30)
    ]
    np.testing.assert_allclose(embeddings[:, : distinct.size], counts)  # the sum readout


def test_sweep_ranks_each_point_as_its_own_run(tmp_path, capsys):
    write_plain_tu(tmp_path)
    base = ["train", "--dataset", "tu:PLAIN", "--root", str(tmp_path), "--model", "gin"]
    base += ["--folds", "3", "--layers", "2", "--epochs", "3", "--no-progress"]
    out = tmp_path / "sweep.json"
    sweep = ["--sweep", "hidden=8", "--sweep", "degree_features=false,true"]
    assert main([*base, *sweep, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "val acc" in table and "degree_features" in table
    report = json.loads(out.read_text())
    assert report["metric"] == "acc" and len(report["rows"]) == 2
    means = [row["val_acc_mean"] for row in report["rows"]]
    assert means == sorted(means, reverse=True)
    assert [row["rank"] for row in report["rows"]] == [1, 2]
    # Each row is what a run of that point alone reports.
    row = next(r for r in report["rows"] if r["hidden"] == 8 and r["degree_features"])
    alone = tmp_path / "alone.json"
    assert main([*base, "--hidden", "8", "--degree-features", "--json", str(alone)]) == 0
    single = json.loads(alone.read_text())
    for key in ("val_acc_mean", "test_acc_mean", "test_acc", "cv_curve_best_acc"):
        assert row[key] == pytest.approx(single[key], rel=1e-6), key


@pytest.mark.slow
def test_mutag_cross_validation_report(data_root, tmp_path, capsys):
    out = tmp_path / "out.json"
    code = main(
        [
            "train",
            "--dataset",
            "tu:MUTAG",
            "--root",
            str(data_root),
            "--model",
            "gin",
            "--folds",
            "3",
            "--epochs",
            "4",
            "--hidden",
            "8",
            "--no-progress",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["task"] == "graph" and report["folds"] == 3 and len(report["test_acc"]) == 3
    for key in ("test_acc_mean", "test_acc_std", "cv_curve_best_acc", "train_graphs_per_s"):
        assert isinstance(report[key], float)
    assert 1 <= report["cv_curve_best_epoch"] <= 4
    assert report["cv_curve_best_acc"] == max(report["cv_curve"])


def _train(data_root, tmp_path, name, *extra) -> dict:
    out = tmp_path / f"{name}.json"
    argv = ["train", "--dataset", "tu:MUTAG", "--root", str(data_root), "--model", "gin"]
    argv += ["--hidden", "8", "--layers", "3", "--no-progress", "--json", str(out), *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_checkpoint_resume_and_predict_on_graphs(data_root, tmp_path, capsys):
    import numpy as np

    full = _train(data_root, tmp_path, "full", "--epochs", "4", "--seeds", "2")
    first = tmp_path / "first"
    _train(data_root, tmp_path, "half", "--epochs", "2", "--seeds", "2", "--checkpoint", str(first))
    resumed = _train(
        data_root,
        tmp_path,
        "resumed",
        "--epochs",
        "4",
        "--seeds",
        "2",
        "--resume",
        str(first),
        "--checkpoint",
        str(tmp_path / "second"),
    )
    assert resumed["resumed_epoch"] == 2
    for key in ("cv_curve", "test_acc_per_member", "best_epoch", "val_acc_mean"):
        assert resumed[key] == full[key]
    out, emb = tmp_path / "p.npy", tmp_path / "e.npy"
    predict = ["predict", "--checkpoint", str(tmp_path / "second"), "--out", str(out)]
    code = main([*predict, "--embeddings", str(emb), "--json", str(tmp_path / "p.json")])
    assert code == 0
    probs, embeddings = np.load(out), np.load(emb)
    assert probs.shape == (2, 188, 2) and embeddings.shape == (2, 188, 7 + 8 + 8)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)
    summary = json.loads((tmp_path / "p.json").read_text())
    np.testing.assert_allclose(summary["test_acc"], full["test_acc_per_member"], rtol=1e-6)
    assert summary["reported_test_acc"] == full["test_acc_per_member"]
    # A second run may not write into the folder this run's checkpoints own.
    capsys.readouterr()
    train = ["train", "--dataset", "tu:MUTAG", "--root", str(data_root), "--model", "gin"]
    code = main([*train, "--epochs", "2", "--no-progress", "--checkpoint", str(first)])
    assert code == 2 and "another run" in one_error(capsys)


def test_more_folds_than_graphs_are_refused_naming_the_flag(tmp_path, capsys):
    # Before: "folds must be in [2, 3] (the graphs), got 4", the flag unnamed.
    write_mini(tmp_path / "tu" / "MINI")
    argv = ["train", "--dataset", "tu:MINI", "--root", str(tmp_path), "--model", "gin"]
    assert main([*argv, "--folds", "4", "--no-progress"]) == 2
    err = one_error(capsys)
    assert "folds=4 (--folds) must be at most the number of graphs, 3 in tu:MINI" in err
    # A sweep refuses such a point once the graphs are read, before it trains any point.
    assert main([*argv, "--sweep", "folds=3,4", "--epochs", "1", "--no-progress"]) == 2
    assert "folds=4 (--folds) must be at most the number of graphs, 3" in one_error(capsys)


def test_a_folders_manifest_bounds_the_folds_before_its_arrays_are_read(tmp_path, capsys):
    from sparsegcn.datasets.ondisk_graphs import save_graphs

    folder = save_graphs(random_graphs(count=7), tmp_path / "seven")
    for array in folder.glob("*.npy"):
        array.unlink()  # read, they would be refused as missing
    argv = ["train", "--dataset", str(folder), "--model", "gin", "--folds", "8", "--no-progress"]
    assert main(["train", *argv[1:]]) == 2
    assert f"folds=8 (--folds) must be at most the number of graphs, 7 in {folder}" in one_error(
        capsys
    )


def test_resume_with_other_folds_names_folds_and_seeds(tmp_path, capsys):
    # Before: "it holds seeds [0, 0, 0] (3 seeds) but this run trains seeds [0, 1, 0, 1, 0, 1]".
    write_mini(tmp_path / "tu" / "MINI")
    argv = ["train", "--dataset", "tu:MINI", "--root", str(tmp_path), "--model", "gin"]
    argv += ["--hidden", "4", "--epochs", "1", "--no-progress"]
    assert main([*argv, "--folds", "3", "--checkpoint", str(tmp_path / "ck")]) == 0
    capsys.readouterr()
    resume = ["--resume", str(tmp_path / "ck")]
    assert main([*argv, "--folds", "3", "--seeds", "2", *resume]) == 2
    err = one_error(capsys)
    assert "it holds folds=3 x seeds [0] but this run trains folds=3 x seeds [0, 1]" in err
    assert main([*argv, "--seed", "1", "--seeds", "3", *resume]) == 2
    assert "this run trains one holdout split x seeds [1, 2, 3]" in one_error(capsys)


def test_folds_must_leave_graphs_to_train_and_validate_on(tmp_path, capsys):
    # Before: "folds must be in [2, 1] (the graphs), got 1" for --folds 2 on 3 graphs,
    # and "folds must be in [2, 3] (the graphs), got 10" with no --folds at all.
    write_mini(tmp_path / "tu" / "MINI")
    argv = ["train", "--dataset", "tu:MINI", "--root", str(tmp_path), "--model", "gin"]
    argv += ["--hidden", "4", "--epochs", "1", "--no-progress"]
    assert main([*argv, "--folds", "2"]) == 2
    assert (
        "folds=2 (--folds) tests 2 of the 3 graphs in tu:MINI in one fold, leaving 1 to train "
        "and validate on (2 at least); use --folds 3 or more" in one_error(capsys)
    )
    out = tmp_path / "holdout.json"
    assert main([*argv, "--json", str(out)]) == 0  # the holdout split: one fold of 3
    report = json.loads(out.read_text())
    assert report["split"] == "holdout" and report["folds"] == 0
    two = {  # MINI's first two graphs (nodes 1-5 and all six edges)
        "graph_indicator": "1\n1\n1\n2\n2\n",
        "graph_labels": "1\n-1\n",
        "node_labels": "0\n2\n0\n1\n1\n",
        "node_attributes": "0.5, 1\n1.5, 2\n2.5, 3\n3.5, 4\n4.5, 5\n",
        "graph_attributes": "0.25\n0.5\n",
    }
    write_mini(tmp_path / "tu" / "TWO", "TWO", **two)
    argv[2] = "tu:TWO"
    assert main(argv) == 2
    assert "tu:TWO has 2 graphs; a graph run needs 3 at least" in one_error(capsys)


def test_a_dataset_of_one_class_is_refused(tmp_path, capsys):
    # Before: it trained, and reported test accuracy 1.0.
    write_mini(tmp_path / "tu" / "ONE", "ONE", graph_labels="1\n1\n1\n")
    argv = ["train", "--dataset", "tu:ONE", "--root", str(tmp_path), "--model", "gin"]
    assert main([*argv, "--epochs", "1", "--no-progress"]) == 2
    assert "tu:ONE: all its 3 graphs have one label; graph classification needs two" in (
        one_error(capsys)
    )


def test_a_state_or_program_larger_than_free_memory_is_refused_first(tmp_path, monkeypatch, capsys):
    # Before: synthetic:molhiv --batch-size 100000 allocated 14.5 GiB of temporaries
    # (XLA's count) and died of it where less was free, an "unexpected error" or a kill.
    import jax
    import jax.numpy as jnp

    from sparsegcn.batch import Budget
    from sparsegcn.bench import runner
    from sparsegcn.train.graphs import check_program_memory

    compiled = jax.jit(lambda x: jnp.outer(x, x).sum(0)).lower(jnp.ones(1000)).compile()
    temps = compiled.memory_analysis().temp_size_in_bytes
    assert temps >= 1000 * 1000 * 4  # the [1000, 1000] outer product
    check_program_memory(compiled, Budget(8, 8, 2), 1, 4, available=None)  # unknown: run
    check_program_memory(compiled, Budget(8, 8, 2), 1, 4, available=2 * temps)
    with pytest.raises(ValueError, match=r"needs 0\.0 GiB more .* 3 member\(s\)"):
        check_program_memory(compiled, Budget(8, 8, 2), 3, 4, available=temps // 2)
    write_mini(tmp_path / "tu" / "MINI")
    argv = ["train", "--dataset", "tu:MINI", "--root", str(tmp_path), "--model", "gin"]
    argv += ["--epochs", "1", "--no-progress", "--batch-size", "2"]
    # The state (about 0.5 MB here) is checked before it is built, the program after
    # its compile: free memory is asked once for each.
    free = iter([2**40, 1024])
    monkeypatch.setattr(runner, "available_memory", lambda: next(free))
    assert main(argv) == 2
    err = one_error(capsys)
    assert "on batches of up to 2 graphs" in err and "but 0.0 GiB is free" in err
    monkeypatch.setattr(runner, "available_memory", lambda: 1024)
    assert main(argv) == 2
    err = one_error(capsys)
    assert "training state of this graph run (1 member(s): folds x seeds)" in err

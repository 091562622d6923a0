"""`sparsegcn train --graph-on host --max-batches B` on an on-disk dataset."""

import json

import pytest

from sparsegcn.cli import main
from sparsegcn.datasets import load, ondisk, save
from sparsegcn.experiment import Experiment

HOST_KEYS = {
    "graph_on",
    "batches_run",
    "steps_per_epoch",
    "projected_epoch_s",
    "host_sample_ms_per_batch",
    "host_gather_rows_per_batch",
    "disk_read_gb",
    "disk_read_mb_per_s",
    "train_s",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save(load("synthetic:tiny"), tmp_path_factory.mktemp("host") / "tiny")


def _train(folder, out, *extra):
    argv = ["train", "--dataset", str(folder), "--model", "sage", "--fanouts", "5,3"]
    argv += ["--hidden", "8", "--batch-size", "32", "--epochs", "2", "--patience", "0"]
    argv += ["--json", str(out), "--no-progress", *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


def test_cli_samples_on_the_host_and_reports_the_projection(folder, tmp_path):
    report = _train(folder, tmp_path / "r.json", "--graph-on", "host", "--max-batches", "2")
    assert set(report) >= HOST_KEYS
    assert report["graph_on"] == "host" and report["features_on"] == "host"
    assert report["config"]["layers"] == 2 and report["config"]["max_batches"] == 2
    # 140 train nodes in batches of 32: 5 a full epoch, 2 of each run
    assert report["steps_per_epoch"] == 5 and report["batches_run"] == 4
    assert report["projected_epoch_s"] > 0 and report["train_s"] > 0
    assert report["host_sample_ms_per_batch"] > 0
    assert 32 < report["host_gather_rows_per_batch"] <= 32 * (1 + 5 + 15) + 1
    assert report["disk_read_gb"] >= 0 and 0 <= report["test_acc_mean"] <= 1


def test_auto_samples_on_the_host_when_the_graph_is_too_large_to_expand(
    folder, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(ondisk, "physical_memory_bytes", lambda: 1 << 16)
    report = _train(folder, tmp_path / "r.json", "--max-batches", "1", "--epochs", "1")
    assert report["graph_on"] == "host" and report["batches_run"] == 1
    out = tmp_path / "device.json"
    argv = ["train", "--dataset", str(folder), "--model", "sage", "--fanouts", "5,3"]
    assert main([*argv, "--graph-on", "device", "--json", str(out), "--no-progress"]) != 0
    assert "graph_on='device' needs the graph's receivers in RAM" in capsys.readouterr().err
    assert not out.exists()
    # Full-batch models too, one line, never JAX's error about the stand-in (mlp reads no
    # graph, sage without fanouts and gin read it whole: before, rc 1 and a JAX error).
    for model in (["--model", "mlp"], ["--model", "sage", "--fanouts", "none"], ["--model", "gin"]):
        argv = ["train", "--dataset", str(folder), *model, "--epochs", "1", "--no-progress"]
        assert main(argv) == 2
        assert "trains full batch here, which needs" in capsys.readouterr().err


def test_bad_graph_placements_and_batch_counts_fail_early_naming_the_value(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--model", "sage", "--graph-on", "gpu"])
    assert "'gpu'" in capsys.readouterr().err
    assert main(["train", "--model", "sage", "--max-batches", "-1", "--no-progress"]) != 0
    err = capsys.readouterr().err.strip()
    assert "max_batches must be >= 0, got -1" in err and len(err.splitlines()) == 1
    with pytest.raises(ValueError, match=r"graph_on must be one of .*'disk'"):
        Experiment(model="sage", graph_on="disk")
    with pytest.raises(ValueError, match=r"graph_on='host' .* model='gat' is not supported"):
        Experiment(model="gat", fanouts="3,2", graph_on="host")
    with pytest.raises(ValueError, match=r"max_batches=3 .* features_on='device'"):
        Experiment(model="sage", max_batches=3, features_on="device")
    with pytest.raises(ValueError, match=r"graph_on='host' .* seeds=2"):
        Experiment(model="sage", graph_on="host", seeds=2)
    # A streamed run steps one epoch a call (before: accepted, and did nothing).
    with pytest.raises(ValueError, match=r"features_on='host' .* epochs_per_call=2 is not"):
        Experiment(model="sage", features_on="host", epochs_per_call=2)
    with pytest.raises(ValueError, match=r"graph_on='host' .* fanouts='none'"):
        Experiment(model="gcn", graph_on="host")

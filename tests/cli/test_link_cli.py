"""``sparsegcn train --task link``: settings refused with one line before any data is
read, the ogb Evaluator's figure in the report, and a short Cora GAE run end to end."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import types

import numpy as np
import pytest
from helpers import folder_locked_by

from sparsegcn.cli import main
from sparsegcn.metrics import hits_at_k, mrr
from sparsegcn.tasks.link import encoder_packed


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


SAMPLED_GAE = ["--dataset", "cora", "--task", "link", "--model", "gae", "--fanouts", "10,5"]
SAMPLED_VGAE = [*SAMPLED_GAE[:5], "vgae", *SAMPLED_GAE[6:]]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--dataset", "tu:MUTAG", "--task", "link", "--model", "gae"],
            r"--task link does not apply to 'tu:MUTAG', a graph-level dataset",
        ),
        (
            ["--dataset", "cora", "--model", "gae"],
            r"model 'gae' trains on link-level tasks only; 'cora' is a node-level dataset here "
            r"\(pass --task link\)",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--decoder", "hadamard"],
            r"--recon full scores all N² pairs as one matrix product; --decoder hadamard",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--negatives", "targets"],
            r"--negatives targets chooses the negatives of --recon sampled; --recon full",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--use-valid-edges"],
            r"--use-valid-edges adds the official validation edges .* 'cora' has no official",
        ),
        (
            ["--dataset", "cora", "--use-valid-edges"],
            r"use_valid_edges=True \(--use-valid-edges\) applies only to link-level datasets",
        ),
        (
            ["--dataset", "cora", "--task", "link"],  # said "cora is a link-level dataset"
            r"--task link trains gae, vgae; model 'gcn' does not \(pass --model gae\)",
        ),
        (
            # said "heads=2 applies to gat, gatv2, not gae"
            [
                "--dataset",
                "cora",
                "--task",
                "link",
                "--model",
                "gae",
                "--encoder",
                "gat",
                "--heads",
                "2",
            ],
            r"heads=2 is an option of --encoder gat, which gae builds with its defaults; "
            r"encoder options cannot be set",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--patience", "5"],
            r"link prediction trains for a fixed number of epochs, without "
            r"early stopping; patience=5 \(--patience\) is not supported",
        ),
        # Each said "trains for a fixed number of epochs, without resuming".
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--reorder", "degree"],
            r"keeps the dataset's node ids, which its splits and pairs name; reorder='degree'",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--features-on", "host"],
            r"keeps the features and the graph on the device, whole; features_on='host'",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--resume", "ck"],
            r"saves its final model once, without resuming; resume='ck' \(--resume\)",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--monitor", "val_loss"],
            r"keeps the last params, selecting none; monitor='val_loss' \(--monitor\) is not",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--backend", "dense"],
            r"propagates on its encoder's own graph, not through a backend; backend='dense' "
            r"\(--backend\) is not supported",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--no-edge-features"],
            r"encodes node features alone, never edge features; edge_features=False "
            r"\(--no-edge-features\) is not supported",
        ),
        (
            [*SAMPLED_GAE[:-1], "2000000000,5"],
            r"--fanouts 2000000000,5 with --batch-size 512 samples 20480000000000 tree entries "
            r"per batch \(2048 endpoint nodes .*\); a tree must stay below 2\*\*31 = 2147483648: "
            r"lower --fanouts or --batch-size",
        ),
        (
            [*SAMPLED_GAE[:-1], ",".join(["5"] * 12)],
            r"--fanouts 5,5,5,5,5,5,5,5,5,5,5,5 with --batch-size 512 samples 500000000000 tree",
        ),
        (
            [*SAMPLED_GAE, "--batch-size", str(2**63 - 1), "--negatives", "targets"],
            rf"--batch-size {2**63 - 1} samples {3 * 50 * (2**63 - 1)} tree entries .* "
            r"lower --fanouts or --batch-size",
        ),
        (
            [*SAMPLED_VGAE, "--recon", "full"],
            r"--fanouts trains on sampled batches .* recon='full' is not supported with it",
        ),
        (
            [*SAMPLED_GAE, "--epochs-per-call", "4"],
            r"--fanouts trains on sampled batches .* one epoch a compiled call; "
            r"epochs_per_call=4 is not supported with it",
        ),
        (
            [*SAMPLED_GAE, "--encoder", "gcn"],
            r"encoder='gcn' runs full batch only, choose one of \['sage', 'gat', 'gatv2', 'gin'\]",
        ),
        (
            ["--dataset", "cora", "--task", "link", "--model", "gae", "--batch-size", "64"],
            r"batch_size=64 \(--batch-size\) applies only to sampled mini-batch training",
        ),
    ],
)
def test_bad_link_settings_are_refused_before_reading_data(argv, message, capsys, tmp_path):
    # The data root is empty: a run that got as far as reading data would fail differently.
    code = main(["train", "--root", str(tmp_path), *argv])
    assert code in (1, 2)
    assert re.search(message, one_error(capsys))


def test_an_unknown_decoder_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", "link", "--model", "gae", "--decoder", "bilinear"])
    assert exit_info.value.code == 2
    assert "argument --decoder: invalid choice: 'bilinear'" in capsys.readouterr().err


def test_ogb_evaluator_figure_equals_the_device_metrics():
    pytest.importorskip("torch")
    pytest.importorskip("ogb.linkproppred")
    from sparsegcn.tasks.link import ogb_link_metric

    rng = np.random.default_rng(0)
    pos, neg = rng.normal(size=(2, 40)).astype(np.float32), rng.normal(size=(2, 300))
    result = types.SimpleNamespace(test_scores=(pos + 1.5, neg.astype(np.float32)))
    got = ogb_link_metric("ogbl-collab", "hits@50", result)
    want = [float(hits_at_k(p, q, 50)) for p, q in zip(*result.test_scores, strict=True)]
    assert got["metric"] == "hits@50" and np.allclose(got["test"], want)
    assert np.isclose(got["test_mean"], np.mean(want))
    targets = (pos, rng.normal(size=(2, 40, 20)).astype(np.float32))
    got = ogb_link_metric("ogbl-citation2", "mrr", types.SimpleNamespace(test_scores=targets))
    want = [float(mrr(p, q)) for p, q in zip(*targets, strict=True)]
    assert np.allclose(got["test"], want, atol=1e-6)
    assert ogb_link_metric("cora", "auc", result) is None


def test_cora_gae_trains_end_to_end_and_predict_scores_pairs(data_root, tmp_path, capsys):
    from sklearn.metrics import roc_auc_score

    import sparsegcn as sg
    from sparsegcn.sampling.links import random_link_split

    out, folder = tmp_path / "report.json", tmp_path / "model"
    argv = ["train", "--dataset", "cora", "--root", str(data_root), "--task", "link"]
    argv += ["--model", "gae", "--epochs", "3", "--epochs-per-call", "3", "--seeds", "2"]
    argv += ["--no-progress"]
    assert main([*argv, "--json", str(out), "--checkpoint", str(folder)]) == 0
    assert "test auc" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["task"] == "link" and report["model"] == "gae" and report["seeds"] == 2
    assert report["sampled"] is False
    # The encoder's graph: CSR wherever the native kernel runs the product.
    assert report["layout"] == ("csr" if encoder_packed() else "edges")
    for key in ("test_auc_mean", "test_ap_mean", "test_auc_std", "val_auc_mean"):
        assert 0.0 <= report[key] <= 1.0
    assert len(report["test_auc"]) == 2 and report["train_step_ms_median"] > 0
    # The 3 epochs run as one call of 3 steps: train_s is that call's time.
    call_s = 3 * report["train_step_ms_median"] / 1e3
    assert report["train_s"] == pytest.approx(call_s) and call_s <= report["wall_s"]
    sizes = report["split_sizes"]
    assert sizes["test"] == int(0.10 * 5278) and sizes["valid"] == int(0.05 * 5278)
    assert report["num_message_edges"] == 2 * sizes["train"]
    # A second run into the same folder is refused before training.
    assert main([*argv, "--checkpoint", str(folder)]) == 2
    assert "already holds a link model" in one_error(capsys)
    # predict: seed 1's test pairs, as its split drew them, scored again.
    split = random_link_split(sg.datasets.load("cora", data_root).graph, seed=1).split
    pairs = np.concatenate([split["test"], split["test_neg"]])
    np.save(tmp_path / "pairs.npy", pairs)
    scores, emb = tmp_path / "scores.npy", tmp_path / "emb.npy"
    predict = ["predict", "--checkpoint", str(folder), "--pairs", str(tmp_path / "pairs.npy")]
    assert main([*predict, "--out", str(scores), "--embeddings", str(emb)]) == 0
    s, z = np.load(scores), np.load(emb)
    assert s.shape == (2, len(pairs)) and z.shape == (2, 2708, 16)
    # The model's link-model.json names it as well as its folder (the error's hint).
    by_file = ["predict", "--checkpoint", str(folder / "link-model.json")]
    by_file += ["--pairs", str(tmp_path / "pairs.npy"), "--out", str(tmp_path / "again.npy")]
    assert main(by_file) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "again.npy"), s)
    np.testing.assert_allclose(s[1], (z[1][pairs[:, 0]] * z[1][pairs[:, 1]]).sum(1), rtol=1e-4)
    labels = np.r_[np.ones(len(split["test"])), np.zeros(len(split["test_neg"]))]
    assert np.isclose(roc_auc_score(labels, s[1]), report["test_auc"][1], atol=1e-4)
    # No output may replace an input: the pairs, the model's files, the dataset.
    before = (tmp_path / "pairs.npy").read_bytes(), (folder / "link-model.json").read_bytes()
    assert main([*predict, "--out", str(tmp_path / "pairs.npy")]) == 2
    assert "would overwrite --pairs" in one_error(capsys)
    assert main([*predict, "--out", str(scores), "--json", str(folder / "link-model.json")]) == 2
    assert "the files the folder of --checkpoint" in one_error(capsys)
    after = (tmp_path / "pairs.npy").read_bytes(), (folder / "link-model.json").read_bytes()
    assert after == before
    np.save(tmp_path / "bad.npy", np.array([[0, 9999]]))
    bad = ["predict", "--checkpoint", str(folder), "--pairs", str(tmp_path / "bad.npy")]
    assert main([*bad, "--out", str(tmp_path / "x.npy")]) == 2
    assert "outside [0, 2708)" in one_error(capsys)
    # The model's file names the data and its root: predicting reads there, never writes.
    meta_file = folder / "link-model.json"
    meta = json.loads(meta_file.read_text())
    anywhere = tmp_path / "anywhere"
    meta["config"].update(dataset="synthetic:collab", scale=0.001, root=str(anywhere))
    meta_file.write_text(json.dumps(meta))
    assert main([*predict, "--out", str(tmp_path / "y.npy")]) == 2
    one_error(capsys)
    del meta["config"]  # was a KeyError naming no file
    meta_file.write_text(json.dumps(meta))
    assert main([*predict, "--out", str(tmp_path / "y.npy")]) == 2
    assert f"{meta_file} records no experiment config" in one_error(capsys)
    assert not anywhere.exists() and not (tmp_path / "y.npy").exists()


LINK_RUN = ["train", "--dataset", "synthetic:tiny", "--task", "link", "--model", "gae"]
NODE_RUN = ["train", "--dataset", "synthetic:tiny", "--epochs", "2", "--no-progress"]


def test_a_link_models_folder_is_its_runs_alone(tmp_path, capsys):
    """A link run's ``--checkpoint`` folder: locked while a run holds it, never
    shared with node or graph checkpoints (``--overwrite`` or not), and checked
    again once locked. Every refusal comes before any data is read."""
    import fcntl
    import os

    from sparsegcn.experiment.config import Experiment
    from sparsegcn.tasks.link import claim_link_folder
    from sparsegcn.train.checkpoint import LOCK_NAME, CheckpointError

    root = ["--root", str(tmp_path / "data"), "--epochs", "2", "--no-progress"]
    folder = tmp_path / "model"
    with folder_locked_by(folder, 424242):
        assert main([*LINK_RUN, *root, "--checkpoint", str(folder)]) == 2
        assert "in use by process 424242" in one_error(capsys)
    # The run holds the lock from its claim until it releases it.
    exp = Experiment(dataset="synthetic:tiny", task="link", model="gae", checkpoint=str(folder))
    lock = claim_link_folder(exp)
    probe = os.open(folder / LOCK_NAME, os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.release()
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
    finally:
        os.close(probe)
    # A model saved by another run meanwhile is not replaced without --overwrite.
    (folder / "link-model.json").write_text('{"format": "sparsegcn-link-model"}')
    with pytest.raises(CheckpointError, match="already holds a link model"):
        claim_link_folder(exp)
    # A file of the user's under a link model's name is never replaced, --overwrite or not.
    # Before: with --overwrite the run wrote its model over them.
    forced = dataclasses.replace(exp, overwrite=True)
    for name, text in (("link-model.json", '{"my": "notes"}'), ("link-model.npz", "x")):
        mine = tmp_path / "mine"
        mine.mkdir()
        (mine / name).write_text(text)
        for run in (exp, forced):
            with pytest.raises(CheckpointError, match=rf"holds {name}, which is named like a link"):
                claim_link_folder(dataclasses.replace(run, checkpoint=str(mine)))
        assert (mine / name).read_text() == text
        shutil.rmtree(mine)
    # Node and graph checkpoints never share a link model's folder, and back.
    assert not list(tmp_path.glob("data/*"))
    assert (
        main(
            [
                *NODE_RUN,
                "--root",
                str(tmp_path / "data"),
                "--checkpoint",
                str(folder),
                "--overwrite",
            ]
        )
        == 2
    )
    assert "holds a link run's model (link-model.json)" in one_error(capsys)
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    (nodes / "ckpt-000002.json").write_text("{}")
    assert main([*LINK_RUN, *root, "--checkpoint", str(nodes), "--overwrite"]) == 2
    assert "holds 1 checkpoint(s) of a node or graph run" in one_error(capsys)
    assert (folder / "link-model.json").read_text() == '{"format": "sparsegcn-link-model"}'
    assert (nodes / "ckpt-000002.json").read_text() == "{}"
    assert not (tmp_path / "data").exists()  # nothing was read or downloaded


def _csv(path, rows) -> None:
    import gzip

    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(",".join(map(str, row)) + "\n" for row in rows)
    path.write_bytes(gzip.compress(text.encode()))


def write_mini_collab(root, n: int = 40, seed: int = 0):
    """An ogbl-collab folder in OGB's raw layout: two communities, 8 features, a time split."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    side = np.arange(n) % 2
    upper = np.triu(rng.random((n, n)) < np.where(side[:, None] == side[None, :], 0.3, 0.02), 1)
    edges = np.argwhere(upper)
    rng.shuffle(edges)
    train, valid, test = np.split(edges, [int(0.8 * len(edges)), int(0.9 * len(edges))])
    folder = root / "ogbl_collab"
    raw = folder / "raw"
    _csv(raw / "num-node-list.csv.gz", [[n]])
    _csv(raw / "num-edge-list.csv.gz", [[len(train)]])
    _csv(raw / "edge.csv.gz", train.tolist())
    _csv(raw / "node-feat.csv.gz", (np.eye(8)[side * 4] + rng.random((n, 8))).round(3).tolist())
    (folder / "RELEASE_v1.txt").write_text("v1")
    split = folder / "split" / "time"
    split.mkdir(parents=True)
    for key, pos in (("train", train), ("valid", valid), ("test", test)):
        part = {"edge": torch.tensor(pos), "weight": torch.ones(len(pos), dtype=torch.long)}
        part["year"] = torch.full((len(pos),), 2010, dtype=torch.long)
        if key != "train":
            part["edge_neg"] = torch.tensor(rng.integers(0, n, (60, 2)))
        torch.save(part, split / f"{key}.pt")
    return len(train), len(valid)


def test_an_ogbl_collab_folder_trains_and_reports_hits_at_50(tmp_path):
    train, valid = write_mini_collab(tmp_path)
    base = ["train", "--dataset", "ogbl-collab", "--root", str(tmp_path), "--model", "gae"]
    base += ["--epochs", "3", "--seeds", "2", "--no-progress"]
    out = tmp_path / "collab.json"
    assert main([*base, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["task"] == "link" and report["metric"] == "hits@50"
    assert report["split"] == "official" and report["num_message_edges"] == 2 * train
    assert len(report["test_hits@50"]) == 2 and "val_hits@50_mean" in report
    if "ogb_evaluator" in report:  # ogb installed: its Evaluator on the same scores
        assert report["ogb_evaluator"]["metric"] == "hits@50"
        np.testing.assert_allclose(report["ogb_evaluator"]["test"], report["test_hits@50"])
    assert report["num_test_message_edges"] == 2 * train
    out = tmp_path / "collab-valid.json"
    assert main([*base, "--use-valid-edges", "--json", str(out)]) == 0
    with_valid = json.loads(out.read_text())
    assert with_valid["num_message_edges"] == 2 * train  # training and validation
    assert with_valid["num_test_message_edges"] == 2 * (train + valid)
    assert with_valid["split_sizes"]["train"] == train
    # Training and the validation scores are those of the run without the option.
    assert with_valid["loss_curve"] == report["loss_curve"]
    assert with_valid["val_hits@50"] == report["val_hits@50"]


def test_use_valid_edges_scores_the_test_edges_alone_on_train_and_valid_edges(tmp_path):
    """OGB's ``--use_valedges_as_input``: params trained on the train edges alone
    (equal to a run without it), validation scored on them, the test edges on
    embeddings of the train and validation edges: Hits@50 recomputed by hand."""
    import jax

    from sparsegcn.datasets.links import load_links, message_graph
    from sparsegcn.experiment.build import model_graph
    from sparsegcn.experiment.config import Experiment
    from sparsegcn.tasks.link import predict_links, prepare_links, save_link_model
    from sparsegcn.train.links import PhasedEvaluation, fit_links

    write_mini_collab(tmp_path)
    runs = {}
    for use in (False, True):
        exp = Experiment(
            dataset="ogbl-collab", root=str(tmp_path), model="gae", epochs=3, use_valid_edges=use
        )
        _, data, model, config = prepare_links(exp)
        runs[use] = (data, model, fit_links(model, data, config, seeds=(0,)))
    saved = save_link_model(tmp_path / "model", exp, runs[True][2])
    (data, model, with_valid), (_, _, without) = runs[True], runs[False]
    assert data.test_graph is not None and runs[False][0].test_graph is None
    for a, b in zip(
        jax.tree.leaves(with_valid.params), jax.tree.leaves(without.params), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(with_valid.valid["hits@50"], without.valid["hits@50"])

    dataset = load_links("ogbl-collab", str(tmp_path))
    full = message_graph(dataset, use_valid_edges=True)
    params = jax.tree.map(lambda a: a[0], with_valid.params)
    z = np.asarray(
        model.embed(params, model_graph(full, "gcn", packed=encoder_packed()), data.features)
    )
    pos, neg = dataset.split["test"], dataset.split["test_neg"]
    s_pos = np.einsum("pd,pd->p", z[pos[:, 0]], z[pos[:, 1]])
    s_neg = np.einsum("pd,pd->p", z[neg[:, 0]], z[neg[:, 1]])
    kth = np.sort(s_neg)[-50]  # 60 negatives
    np.testing.assert_allclose(with_valid.test["hits@50"], [np.mean(s_pos > kth)])
    assert not np.allclose(s_pos, np.asarray(without.test_scores[0][0]), atol=1e-4)
    # The sampled runs' evaluation (one seed and phase at a time) scores alike.
    phased = PhasedEvaluation.compile(model, with_valid.params, data, "hits@50")
    np.testing.assert_allclose(
        phased(with_valid.params, data)["test"]["hits@50"], [np.mean(s_pos > kth)]
    )
    # predict embeds on the graph the test edges were scored on.
    np.testing.assert_allclose(predict_links(saved, pos)["scores"][0], s_pos, rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # 33 s in the default suite's cold run (two trainings at scale 0.5)
def test_sampled_link_run_equals_fit_links_sampled_and_learns(tmp_path):
    """``--fanouts`` on a link run: the report equals ``fit_links_sampled`` called on
    the same split, model and settings (recon sampled and a sage encoder by
    default), and the model ranks test edges of a homophilous graph above chance."""
    import sparsegcn as sg
    from sparsegcn import transforms
    from sparsegcn.nn.registry import create_model, get_model_spec
    from sparsegcn.sampling.links import random_link_split
    from sparsegcn.train.links import (
        LinkTrainConfig,
        eval_set,
        fit_links_sampled,
        link_data,
        sampled_link_data,
    )

    out = tmp_path / "sampled.json"
    argv = ["train", "--dataset", "synthetic:tiny", "--scale", "0.5", "--root", str(tmp_path)]
    argv += ["--task", "link", "--model", "gae", "--fanouts", "5,5", "--batch-size", "64"]
    assert main([*argv, "--epochs", "20", "--no-progress", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["sampled"] is True and report["fanouts"] == [5, 5]
    assert report["layout"] == f"sampled-{report['sampler']}"
    assert report["encoder"] == "sage" and report["recon"] == "sampled"
    assert report["negatives"] == "pairs"
    train = report["split_sizes"]["train"]
    assert report["batch_size"] == 64 and report["batches_per_epoch"] == -(-train // 64)
    assert report["train_step_ms_median"] > 0 and len(report["loss_curve"]) == 20
    # Chance is 0.5; with 600 test pairs a side the AUC's standard error is about
    # 0.017, and this run reaches about 0.67.
    assert report["test_auc_mean"] > 0.6

    dataset = sg.datasets.load("synthetic:tiny", tmp_path, scale=0.5)
    split = random_link_split(dataset.graph, seed=0)
    x = np.asarray(dataset.features, np.float32)
    n, s = dataset.graph.num_nodes, split.split
    prepared = transforms.sort_edges(get_model_spec("sage").prepare_graph(split.graph))
    eval_data = link_data(
        prepared,
        x,
        n,
        s["train"],
        eval_set(s["valid"], s["valid_neg"]),
        eval_set(s["test"], s["test_neg"]),
    )
    model = create_model(
        "gae", x.shape[1], 16, hidden=32, layers=2, dropout=0.0, encoder="sage", recon="sampled"
    )
    result = fit_links_sampled(
        model,
        sampled_link_data(split.graph, x, s["train"]),
        eval_data,
        LinkTrainConfig(epochs=20),
        fanouts=(5, 5),
        batch_size=64,
        seeds=(0,),
    )
    np.testing.assert_allclose(report["test_auc"], result.test["auc"], rtol=1e-5)
    np.testing.assert_allclose(report["loss_curve"], result.losses[:, 0], rtol=1e-5)


def test_too_many_devices_are_refused_before_reading_data(tmp_path):
    """``--devices 3`` where JAX sees 2 devices: one line naming both counts and how to
    simulate more, exit 2, nothing read (a fresh interpreter: the count is fixed
    when JAX starts)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    env["PYTHONPATH"] = os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])
    argv = ["train", "--dataset", "cora", "--root", str(tmp_path), "--task", "link"]
    done = subprocess.run(
        [sys.executable, "-m", "sparsegcn", *argv, "--model", "gae", "--devices", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "devices=3 (--devices) asks for 3 local devices but this process sees 2" in err[0]
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=3 sparsegcn train" in err[0]
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or read


def test_link_runs_on_two_devices_report_them_and_equal_one(tmp_path):
    base = ["train", "--dataset", "synthetic:tiny", "--scale", "0.05", "--root", str(tmp_path)]
    base += ["--task", "link", "--model", "gae", "--epochs", "3", "--no-progress"]
    reports = {}
    for devices in (1, 2):
        out = tmp_path / f"full-{devices}.json"
        assert main([*base, "--devices", str(devices), "--json", str(out)]) == 0
        reports[devices] = json.loads(out.read_text())
    assert (reports[1]["devices"], reports[1]["parallelism"]) == (1, "none")
    assert (reports[2]["devices"], reports[2]["parallelism"]) == (2, "link-pairs")
    np.testing.assert_allclose(reports[2]["loss_curve"], reports[1]["loss_curve"], rtol=1e-5)
    np.testing.assert_allclose(reports[2]["test_auc"], reports[1]["test_auc"], atol=1e-5)


@pytest.mark.slow
def test_a_sampled_link_run_with_the_dedup_sampler_reports_it(tmp_path):
    out = tmp_path / "dedup.json"
    argv = ["train", "--dataset", "synthetic:tiny", "--scale", "0.05", "--root", str(tmp_path)]
    argv += ["--task", "link", "--model", "gae", "--epochs", "3", "--no-progress"]
    argv += ["--fanouts", "5,5", "--batch-size", "64", "--sampler", "dedup"]
    assert main([*argv, "--dedup-caps", "200,400", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["sampler"], report["caps"]) == ("dedup", [200, 400])
    assert np.isfinite(report["loss_curve"]).all() and 0.0 <= report["test_auc_mean"] <= 1.0


# Slow: two devices equal one for the link trainer in tests/train/test_link_training.py.
@pytest.mark.slow
def test_a_sampled_link_run_on_two_devices_reports_them(tmp_path):
    out = tmp_path / "sampled-2.json"
    argv = ["train", "--dataset", "synthetic:tiny", "--scale", "0.05", "--root", str(tmp_path)]
    argv += ["--task", "link", "--model", "gae", "--epochs", "3", "--no-progress"]
    argv += ["--fanouts", "5,5", "--batch-size", "64", "--devices", "2", "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["sampled"] is True and report["config"]["devices"] == 2
    assert (report["devices"], report["parallelism"]) == (2, "link-pairs")
    assert np.isfinite(report["loss_curve"]).all()


def test_a_saved_link_models_params_are_checked_before_use(tmp_path):
    """``read_link_params``: the params round-trip bitwise; a truncated file, arrays
    that are not the ones the settings list, and a leaf of another shape are each
    refused naming the file (a file saved without its sha256 still by its content)."""
    import jax

    from sparsegcn.experiment.config import Experiment
    from sparsegcn.nn.registry import create_model
    from sparsegcn.tasks.link import read_link_params, save_link_model
    from sparsegcn.train.checkpoint import LINK_MODEL_FILES

    model = create_model("gae", 5, 4, hidden=8, layers=2, dropout=0.0)
    params = jax.vmap(model.init)(jax.random.split(jax.random.key(0), 2))
    template = model.init(jax.random.key(1))
    folder = tmp_path / "model"
    exp = Experiment(dataset="cora", task="link", model="gae", hidden=8)
    save_link_model(folder, exp, types.SimpleNamespace(params=params, seeds=[0, 1]))
    meta_path, params_path = (folder / name for name in LINK_MODEL_FILES)
    meta = json.loads(meta_path.read_text())
    got = read_link_params(folder, meta, template)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(a, b)
    blob = params_path.read_bytes()
    params_path.write_bytes(blob[:1000])
    with pytest.raises(ValueError, match=r"link-model.npz is truncated or corrupt: 1000 bytes"):
        read_link_params(folder, meta, template)
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 1
    params_path.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=r"corrupt: its sha256 is not the one link-model.json"):
        read_link_params(folder, meta, template)
    params_path.write_bytes(blob[:1000])
    unhashed = {k: v for k, v in meta.items() if k != "params_sha256"}
    with pytest.raises(ValueError, match=r"link-model.npz is not a readable .npz"):
        read_link_params(folder, unhashed, template)
    np.save(params_path.with_suffix(".npy"), np.zeros(3))
    params_path.write_bytes(params_path.with_suffix(".npy").read_bytes())
    with pytest.raises(ValueError, match=r"not a readable .npz of params \(it holds one bare"):
        read_link_params(folder, unhashed, template)
    params_path.write_bytes(blob)
    with pytest.raises(ValueError, match=r"lacks member arr_4\.npy"):
        read_link_params(folder, {**meta, "leaves": 5}, template)
    with pytest.raises(ValueError, match=r"too few for the 1000000000 params"):
        read_link_params(folder, {**meta, "leaves": 10**9}, template)  # no names built first
    wider = create_model("gae", 5, 4, hidden=9, layers=2, dropout=0.0).init(jax.random.key(1))
    with pytest.raises(ValueError, match=r"param \['encoder'\]\['layers'\]\[0\]\['b'\] is "):
        read_link_params(folder, meta, wider)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--embedding-dim", "1000000000"],
            r"this link run needs an estimated [0-9.]+ GiB \(1 seed\(s\) x .* and the 3000² "
            r"reconstruction\) but [0-9.]+ GiB is available; lower --seeds, --hidden or "
            r"--embedding-dim, or pass --recon sampled",
        ),
        (["--hidden", "1000000000"], r"this link run needs an estimated [0-9.]+ GiB \(1 seed"),
        (["--seeds", "100000"], r"this link run needs an estimated [0-9.]+ GiB \(100000 seed"),
        (
            ["--fanouts", "10,5", "--hidden", "100000000"],
            r"weights, optimizer state, activations and sampled trees\) but .* lower --seeds, "
            r"--hidden, --embedding-dim, --batch-size or --fanouts$",
        ),
    ],
)
def test_a_link_run_that_cannot_fit_is_refused_before_it_is_split(flags, message, capsys):
    """Every one of these went on to allocate (out of memory after 17-33 s) or to
    split the data 100,000 times; the estimate refuses them once synthetic:tiny
    (3,000 nodes) is loaded."""
    assert main([*LINK_RUN, "--epochs", "1", "--no-progress", *flags]) == 2
    assert re.search(message, one_error(capsys))


def test_the_link_memory_estimate_counts_seeds_reconstruction_and_trees():
    from sparsegcn.experiment.config import Experiment
    from sparsegcn.tasks.link import check_link_memory, estimate_link_bytes

    def estimate(**settings):
        exp = Experiment(dataset="cora", task="link", model="gae", **settings)
        return estimate_link_bytes(exp, 2708, 1433, 10556)

    one = estimate()
    # Per seed: 4 weight copies of 1433x32 + 32x16, activations 2708 x (32 + 16) float32,
    # the [N, N] logits and their gradient, a split of 32 B an edge and 16 a node.
    weights = 1433 * 32 + 32 * 16
    assert one == 16 * weights + 2708 * 48 * 4 + 8 * 2708**2 + 32 * 10556 + 16 * 2708
    assert estimate(seeds=3) == 3 * one
    sampled = estimate(model_options=(("recon", "sampled"),))
    assert one - sampled == 8 * 2708**2
    tree = estimate(fanouts="10,5", batch_size=64)
    assert tree > sampled  # the trees of 256 endpoints: 256 + 2560 + 12800 entries
    exp = Experiment(dataset="cora", task="link", model="gae")
    check_link_memory(exp, 2708, 1433, 10556, available=one)
    check_link_memory(exp, 2708, 1433, 10556, available=None)
    with pytest.raises(ValueError, match=r"needs an estimated .* \(1 seed\(s\) x"):
        check_link_memory(exp, 2708, 1433, 10556, available=one - 1)


@pytest.fixture(scope="module")
def tiny_link_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-link")
    argv = [*LINK_RUN, "--epochs", "1", "--no-progress", "--checkpoint", str(folder / "model")]
    assert main(argv) == 0
    np.save(folder / "pairs.npy", np.array([[0, 1], [2, 3]]))
    return folder


@pytest.mark.parametrize(
    ("pairs", "flags", "message"),
    [
        ("pairs.npy", ["--params", "last"], r"--params last: '.*model' holds a link model, which "),
        ("pairs.npy", ["--params", "best"], r"keeps one set of params, its last epoch's"),
        ("missing.npy", [], r"--pairs '.*missing.npy' does not exist$"),
        ("float.npy", [], r"--pairs '.*float.npy' must be an int array \[P, 2\], got float64"),
        ("far.npy", [], r"--pairs '.*far.npy': node ids outside \[0, 3000\): 0\.\.3000$"),
    ],
)
def test_predicts_link_refusals_name_the_flag(tiny_link_model, pairs, flags, message, capsys):
    np.save(tiny_link_model / "float.npy", np.array([[0.0, 1.0]]))
    np.save(tiny_link_model / "far.npy", np.array([[0, 3000]]))
    out = tiny_link_model / "scores.npy"
    argv = ["predict", "--checkpoint", str(tiny_link_model / "model"), "--out", str(out)]
    assert main([*argv, "--pairs", str(tiny_link_model / pairs), *flags]) == 2
    assert re.search(message, one_error(capsys))
    assert not out.exists()


@pytest.mark.parametrize("where", ["empty", "notes.json"])
def test_pairs_with_no_link_model_say_so(where, tmp_path, capsys):
    # Before: "... is a node or graph classification checkpoint", of an empty folder.
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.json").write_text("{}")
    np.save(tmp_path / "p.npy", np.array([[0, 1]]))
    argv = ["predict", "--checkpoint", str(tmp_path / where), "--out", str(tmp_path / "s.npy")]
    assert main([*argv, "--pairs", str(tmp_path / "p.npy")]) == 2
    error = one_error(capsys)
    assert re.search(r"--pairs scores node pairs with a link model; '.*' holds none", error)


def test_an_empty_pairs_file_gives_the_embeddings_and_no_mean(tiny_link_model, capsys):
    """``[0, 2]`` pairs: the embeddings alone, a ``[0]`` scores file and a summary
    whose mean probability is null, without NumPy's empty-mean warnings (errors here)."""
    np.save(tiny_link_model / "none.npy", np.zeros((0, 2), np.int64))
    out, emb, summary = (tiny_link_model / name for name in ("e.npy", "z.npy", "e.json"))
    argv = ["predict", "--checkpoint", str(tiny_link_model / "model"), "--out", str(out)]
    argv += ["--pairs", str(tiny_link_model / "none.npy"), "--embeddings", str(emb)]
    assert main([*argv, "--json", str(summary)]) == 0
    assert "Warning" not in capsys.readouterr().err
    assert np.load(out).shape == (0,) and np.load(emb).shape == (3000, 16)
    report = json.loads(summary.read_text())
    assert report["mean_probability"] is None and report["out_shape"] == [0]


def test_a_dataset_folder_trains_links_and_one_too_small_is_refused(tmp_path, capsys):
    # Before: any folder was refused, "root=PosixPath('datasets') applies only to datasets
    # named by name", a --root never given; and 3 edges split into no validation or test
    # edge, and the run reported NaN AUC with exit 0.
    from sparsegcn.datasets import Dataset, load, save
    from sparsegcn.graph import Graph

    folder = save(load("synthetic:tiny", tmp_path, scale=0.5), tmp_path / "tiny")
    out = tmp_path / "r.json"
    argv = ["train", "--dataset", str(folder), "--task", "link", "--model", "gae"]
    assert main([*argv, "--epochs", "2", "--no-progress", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["task"] == "link" and np.isfinite(report["test_auc_mean"])
    chain = np.arange(6)
    small = Dataset(
        name="chain",
        graph=Graph(np.r_[chain[:-1], chain[1:]], np.r_[chain[1:], chain[:-1]], None, 6),
        features=np.eye(6, dtype=np.float32),
        labels=np.zeros(6, np.int64),
        split={"train": chain[:2], "valid": chain[2:4], "test": chain[4:]},
        num_classes=2,
        num_edges=5,
    )
    save(small, tmp_path / "chain")
    argv[2] = str(tmp_path / "chain")
    assert main([*argv, "--epochs", "2", "--no-progress"]) == 2
    err = one_error(capsys)
    assert f"{tmp_path / 'chain'}: random_link_split needs at least 20 edges" in err
    assert "got 5" in err

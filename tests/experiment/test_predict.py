"""``sparsegcn predict``: a round trip through training, checkpoint and prediction."""

import json
import os
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import order_method

from sparsegcn.cli import main
from sparsegcn.datasets import load
from sparsegcn.experiment import node_data
from sparsegcn.train import latest_checkpoint, load_checkpoint, save_checkpoint
from sparsegcn.train.checkpoint import read_manifest

TRAIN = ["train", "--scale", "0.1", "--hidden", "8", "--epochs", "40", "--no-progress"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    report_path = folder / "report.json"
    argv = [*TRAIN, "--seeds", "2", "--checkpoint", str(folder / "ckpt")]
    assert main([*argv, "--json", str(report_path)]) == 0
    return folder, json.loads(report_path.read_text())


@pytest.fixture(scope="module")
def predicted(trained):
    folder, _ = trained
    out, emb = folder / "preds.npy", folder / "emb.npy"
    argv = ["predict", "--checkpoint", str(folder / "ckpt"), "--out", str(out)]
    assert main([*argv, "--embeddings", str(emb), "--json", str(folder / "p.json")]) == 0
    return np.load(out, allow_pickle=False), np.load(emb, allow_pickle=False)


def test_predictions_reproduce_the_reported_test_accuracy(trained, predicted):
    _, report = trained
    preds, _ = predicted
    dataset = load("synthetic:tiny", scale=0.1)
    test = dataset.split["test"]
    assert preds.dtype == np.int32 and preds.shape == (2, dataset.num_nodes)
    accuracy = (preds[:, test] == dataset.labels[test]).mean(axis=1)
    np.testing.assert_allclose(accuracy, report["test_acc"], atol=1e-6)


def test_embeddings_are_the_last_layers_input(trained, predicted):
    """Dense oracle: ``argmax(Â (E W) + b)`` with the best params gives the predictions."""
    folder, _ = trained
    preds, emb = predicted
    dataset = load("synthetic:tiny", scale=0.1)
    assert emb.dtype == np.float32 and emb.shape == (2, dataset.num_nodes, 8)
    manifest = read_manifest(folder / "ckpt")
    arrays = np.load(folder / "ckpt" / manifest["arrays"], allow_pickle=False)
    paths = {leaf["path"]: leaf["name"] for leaf in manifest["leaves"]}
    w = arrays[paths[".best.params['layers'][1]['w']"]]
    b = arrays[paths[".best.params['layers'][1]['b']"]]
    a_hat = np.asarray(node_data(dataset).graph.to_dense())
    for k in range(2):
        logits = a_hat @ (emb[k].astype(np.float64) @ w[k]) + b[k]
        agree = (logits.argmax(axis=1) == preds[k]).mean()
        assert agree > 0.995  # float64 vs float32 may flip a near-tie


def test_predict_json_summary(trained, predicted):
    folder, report = trained
    summary = json.loads((folder / "p.json").read_text())
    assert summary["out_shape"] == [2, 300] and summary["embeddings_shape"] == [2, 300, 8]
    assert summary["epoch"] == 40 and summary["seeds"] == [0, 1]
    np.testing.assert_allclose(summary["test_acc"], report["test_acc"], atol=1e-6)
    np.testing.assert_allclose(summary["reported_test_acc"], report["test_acc"])


def test_one_seed_writes_flat_arrays(trained, predicted, tmp_path):
    folder, _ = trained
    preds, emb = predicted
    manifest = read_manifest(folder / "ckpt")
    ckpt = load_checkpoint(folder / "ckpt", _template(manifest))
    first = jax.tree.map(lambda leaf: leaf[:1], ckpt.state)
    metadata = dict(ckpt.metadata, config=dict(ckpt.metadata["config"], seeds=1))
    save_checkpoint(tmp_path / "one", first, seeds=[0], history=None, metadata=metadata)
    out, out_emb = tmp_path / "p.npy", tmp_path / "e.npy"
    argv = ["predict", "--checkpoint", str(latest_checkpoint(tmp_path / "one"))]
    assert main([*argv, "--out", str(out), "--embeddings", str(out_emb)]) == 0
    np.testing.assert_array_equal(np.load(out), preds[0])
    np.testing.assert_allclose(np.load(out_emb), emb[0], rtol=1e-5, atol=1e-5)  # K=1 vs K=2 vmap


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_summary_that_cannot_be_written_leaves_the_previous_outputs(trained, tmp_path, capsys):
    # Before: --out was renamed into place, then writing --json /dev/full failed: exit 1,
    # and the previous predictions were gone although the help promises all or none.
    folder, _ = trained
    out, emb = tmp_path / "p.npy", tmp_path / "e.npy"
    np.save(out, np.array([7, 7, 7]))  # the previous predictions
    old = out.read_bytes()
    argv = ["predict", "--checkpoint", str(folder / "ckpt"), "--out", str(out)]
    assert main([*argv, "--embeddings", str(emb), "--json", "/dev/full"]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        "sparsegcn predict: error: cannot write /dev/full: No space left on device"
    )
    assert out.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npy"]


def test_a_summary_over_earlier_predictions_is_refused(trained, tmp_path, capsys):
    # Before: --json n.npy replaced the predictions an earlier predict had written there.
    folder, _ = trained
    earlier = tmp_path / "n.npy"
    np.save(earlier, np.array([7, 7, 7]))
    old = earlier.read_bytes()
    argv = ["predict", "--checkpoint", str(folder / "ckpt"), "--out", str(tmp_path / "x.npy")]
    assert main([*argv, "--json", str(earlier)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a .npy array, not a JSON report" in err[0], err
    assert earlier.read_bytes() == old and sorted(p.name for p in tmp_path.iterdir()) == ["n.npy"]


def test_a_resumed_runs_checkpoint_predicts_after_its_source_is_gone(tmp_path, capsys):
    # Before: predict checked the files of the run's --resume source, which it never
    # reads: "checkpoint .../first does not exist" once that folder was pruned or removed.
    first, second = tmp_path / "first", tmp_path / "second"
    argv = ["train", "--hidden", "4", "--epochs", "1", "--no-progress", "--checkpoint-every", "1"]
    assert main([*argv, "--checkpoint", str(first)]) == 0
    argv[argv.index("--epochs") + 1] = "2"
    assert main([*argv, "--resume", str(first), "--checkpoint", str(second)]) == 0
    for path in first.iterdir():
        path.unlink()
    first.rmdir()
    capsys.readouterr()
    out = tmp_path / "p.npy"
    assert main(["predict", "--checkpoint", str(second), "--out", str(out)]) == 0, (
        capsys.readouterr().err
    )
    assert np.load(out).ndim == 1


def _template(manifest):
    from sparsegcn.experiment import build_model, experiment_from_checkpoint
    from sparsegcn.train import init_state, make_optimizer, state_template

    exp = experiment_from_checkpoint(manifest)
    model = build_model(exp, load(exp.dataset, scale=exp.scale))
    tx = make_optimizer(exp.train_config())
    return state_template(lambda k: init_state(model, tx, k), len(manifest["seeds"]))


def test_another_dataset_is_refused(trained, data_root, tmp_path, capsys):
    folder, _ = trained
    argv = ["predict", "--checkpoint", str(folder / "ckpt"), "--out", str(tmp_path / "p.npy")]
    assert main([*argv, "--dataset", "cora", "--root", str(data_root)]) == 2
    err = capsys.readouterr().err
    assert "metadata.dataset.name is 'synthetic:tiny' in the checkpoint but 'cora'" in err
    assert not (tmp_path / "p.npy").exists()


def test_the_root_a_checkpoint_records_is_read_never_written(trained, tmp_path, capsys):
    # A checkpoint names its data and root, and predict loads from that root by default:
    # an edited manifest made predict generate a dataset cache, or start a download,
    # wherever it said, before it refused the checkpoint.
    import shutil

    folder, _ = trained
    anywhere = tmp_path / "anywhere"
    for dataset, scale, message in (
        ("synthetic:arxiv", 0.001, "metadata.dataset.name is 'synthetic:tiny' in the checkpoint"),
        ("cora", 1.0, "predicting reads the data only"),
    ):
        ckpt = tmp_path / f"ckpt-{dataset.replace(':', '-')}"
        shutil.copytree(folder / "ckpt", ckpt)
        manifest = read_manifest(ckpt)
        path = Path(manifest["path"])
        text = json.loads(path.read_text())
        text["metadata"]["config"].update(dataset=dataset, scale=scale, root=str(anywhere))
        path.write_text(json.dumps(text))
        argv = ["predict", "--checkpoint", str(ckpt), "--out", str(tmp_path / "p.npy")]
        assert main(argv) == 2
        assert message in capsys.readouterr().err
        assert not anywhere.exists() and not (tmp_path / "p.npy").exists()


def test_bad_paths_are_refused(trained, tmp_path, capsys):
    folder, _ = trained
    argv = ["predict", "--checkpoint", str(folder / "ckpt"), "--out", str(tmp_path / "p.txt")]
    assert main(argv) == 2
    assert "--out must name a .npy file" in capsys.readouterr().err
    argv = ["predict", "--checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "p.npy")]
    assert main(argv) == 2
    assert "does not exist" in capsys.readouterr().err
    # "" meant the current folder ("no checkpoint in .") or, for --json, no summary at all.
    out = ["--out", str(tmp_path / "p.npy")]
    assert main(["predict", "--checkpoint", "", *out]) == 2
    assert "--checkpoint '' is empty" in capsys.readouterr().err
    assert main(["predict", "--checkpoint", str(folder / "ckpt"), *out, "--json", ""]) == 2
    assert "--json '' is empty" in capsys.readouterr().err


def test_an_output_that_is_an_input_is_refused_before_work(trained, tmp_path, capsys):
    folder, _ = trained
    ckpt = folder / "ckpt"
    manifest = read_manifest(ckpt)
    arrays = ckpt / manifest["arrays"]
    before = arrays.read_bytes()
    argv = ["predict", "--checkpoint", str(ckpt), "--out", str(tmp_path / "p.npy")]
    assert main([*argv, "--json", str(manifest["path"])]) == 2
    assert "--json" in capsys.readouterr().err
    link = tmp_path / "link.npy"  # a symbolic link into the checkpoint's folder
    link.symlink_to(arrays)
    assert main(["predict", "--checkpoint", str(ckpt), "--out", str(link)]) == 2
    assert "the files the folder of --checkpoint" in capsys.readouterr().err
    hard = tmp_path / "hard.npy"  # a hard link to an input is one too
    os.link(arrays, hard)
    assert main(["predict", "--checkpoint", str(ckpt), "--out", str(hard)]) == 2
    assert "would overwrite the checkpoint file" in capsys.readouterr().err
    assert arrays.read_bytes() == before
    # predict --dataset DS --embeddings DS/features.npy replaced the features.
    dataset = tmp_path / "ds"
    dataset.mkdir()
    (dataset / "manifest.json").write_text("{}")
    (dataset / "features.npy").write_bytes(b"the user's features")
    argv = [*argv, "--dataset", str(dataset), "--embeddings", str(dataset / "features.npy")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--embeddings {dataset / 'features.npy'} would overwrite the dataset {dataset}" in err
    assert (dataset / "features.npy").read_bytes() == b"the user's features"
    # Nor the target of a link in the dataset's folder (a DVC or git-annex store).
    store = tmp_path / "store"
    store.mkdir()
    (dataset / "features.npy").rename(store / "features.npy")
    (dataset / "features.npy").symlink_to(store / "features.npy")
    argv[-1] = str(store / "features.npy")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"would overwrite {store / 'features.npy'} (linked to by" in err
    assert (store / "features.npy").read_bytes() == b"the user's features"
    assert not (tmp_path / "p.npy").exists()


@pytest.mark.slow
def test_cora_round_trip(data_root, tmp_path):
    """The done-when check on Cora: predict's test accuracy equals training's."""
    report_path = tmp_path / "r.json"
    argv = ["train", "--dataset", "cora", "--root", str(data_root), "--seeds", "3"]
    argv += ["--checkpoint", str(tmp_path / "ckpt"), "--json", str(report_path), "--no-progress"]
    assert main(argv) == 0
    out = tmp_path / "preds.npy"
    assert main(["predict", "--checkpoint", str(tmp_path / "ckpt"), "--out", str(out)]) == 0
    report = json.loads(report_path.read_text())
    cora = load("cora", data_root, download=False)
    test = cora.split["test"]
    accuracy = (np.load(out)[:, test] == cora.labels[test]).mean(axis=1)
    np.testing.assert_allclose(accuracy, report["test_acc"], atol=1e-6)
    assert report["test_acc_mean"] > 0.75


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(["--model", "sage"], marks=pytest.mark.slow, id="sage"),
        pytest.param(["--model", "gat", "--fanouts", "4,4"], id="gat-sampled"),
        pytest.param(["--model", "gatv2"], marks=pytest.mark.slow, id="gatv2-full"),
    ],
)
def test_checkpoint_predictions_reproduce_the_report(model, tmp_path):
    """Sampled models predict by layer-wise full-neighbourhood inference, as their
    evaluation does; full-batch ones on the whole graph."""
    report_path = tmp_path / "report.json"
    argv = [*TRAIN, *model, "--epochs", "10", "--checkpoint", str(tmp_path / "ckpt")]
    assert main([*argv, "--json", str(report_path)]) == 0
    out = tmp_path / "preds.npy"
    assert main(["predict", "--checkpoint", str(tmp_path / "ckpt"), "--out", str(out)]) == 0
    preds = np.load(out, allow_pickle=False)
    dataset = load("synthetic:tiny", scale=0.1)
    test = dataset.split["test"]
    assert preds.shape == (dataset.num_nodes,)
    report = json.loads(report_path.read_text())
    np.testing.assert_allclose(
        (preds[test] == dataset.labels[test]).mean(), report["test_acc"][0], atol=1e-6
    )


@pytest.mark.parametrize(
    "method",
    [
        "community",
        order_method("metis"),
        order_method("networkit"),
        order_method("rcm", pytest.mark.slow),
    ],
)
def test_reordered_training_predicts_in_the_datasets_order(method, tmp_path):
    """Trained on relabelled nodes, the predictions come back in the dataset's order:
    scored against the dataset's own labels they reproduce the reported accuracy."""
    report_path = tmp_path / "report.json"
    argv = [*TRAIN, "--reorder", method, "--checkpoint", str(tmp_path / "ckpt")]
    assert main([*argv, "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["reorder"] == method and report["reorder_s"] >= 0
    assert report["test_acc"][0] > 0.5  # learned: a scrambled restore would score at chance
    out = tmp_path / "preds.npy"
    assert main(["predict", "--checkpoint", str(tmp_path / "ckpt"), "--out", str(out)]) == 0
    preds = np.load(out, allow_pickle=False)
    dataset = load("synthetic:tiny", scale=0.1)
    test = dataset.split["test"]
    np.testing.assert_allclose(
        (preds[test] == dataset.labels[test]).mean(), report["test_acc"][0], atol=1e-6
    )


def test_a_missing_order_library_is_refused_before_loading(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pymetis", None)  # import raises ImportError
    assert main([*TRAIN, "--reorder", "metis"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "sparsegcn train: error: reorder method 'metis' needs pymetis, which is not installed; "
        'install the order extra: pip install -e ".[order]" (or pip install pymetis)'
    )


@pytest.mark.slow
def test_gat_resume_is_bit_exact(tmp_path):
    """Ten epochs, then ten more from the epoch-10 checkpoint, equal twenty at once."""
    from sparsegcn.experiment import Experiment
    from sparsegcn.experiment.build import build_model
    from sparsegcn.train import init_state, make_optimizer
    from sparsegcn.train.checkpoint import state_template

    base = [*TRAIN, "--model", "gat", "--hidden", "4", "--heads", "2", "--patience", "0"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*base, "--epochs", "20", "--checkpoint", str(whole)]) == 0
    assert main([*base, "--epochs", "10", "--checkpoint", str(part)]) == 0
    resumed = tmp_path / "resumed"
    assert main([*base, "--epochs", "20", "--resume", str(part), "--checkpoint", str(resumed)]) == 0
    exp = Experiment(scale=0.1, model="gat", hidden=4, model_options=(("heads", 2),))
    model = build_model(exp, load("synthetic:tiny", scale=0.1))
    tx = make_optimizer(exp.train_config())
    template = state_template(lambda key: init_state(model, tx, key), 1)
    a = load_checkpoint(latest_checkpoint(whole), template)
    b = load_checkpoint(latest_checkpoint(resumed), template)
    assert a.epoch == b.epoch == 20

    def raw(leaf):
        keys = jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
        return np.asarray(jax.random.key_data(leaf) if keys else leaf)

    for x, y in zip(jax.tree.leaves(a.state), jax.tree.leaves(b.state), strict=True):
        np.testing.assert_array_equal(raw(x), raw(y))


def test_another_tasks_dataset_is_refused_before_the_checkpoints_scale_is_applied():
    """A hetero checkpoint of synthetic:mag at scale 0.005 asked for synthetic:tiny
    carried the scale over and failed in the generator ("too dense")."""
    import dataclasses

    from sparsegcn.experiment import Experiment
    from sparsegcn.experiment.lifecycle import experiment_from_checkpoint
    from sparsegcn.train.checkpoint import CheckpointError

    for trained, asked, kinds in (
        (dict(dataset="synthetic:mag", model="rgcn", scale=0.005), "synthetic:tiny", "hetero"),
        (dict(dataset="tu:MUTAG", model="gin"), "synthetic:tiny", "graph"),
        (dict(dataset="synthetic:tiny"), "tu:MUTAG", "node"),
    ):
        config = dataclasses.asdict(Experiment(**trained))
        manifest = {"metadata": {"config": config}, "path": "ck/ckpt-000001.json"}
        with pytest.raises(
            CheckpointError, match=rf"is a {kinds} checkpoint of '{trained['dataset']}'; "
        ):
            experiment_from_checkpoint(manifest, dataset=asked)
    # The same task's dataset goes on to the fingerprint check, as before.
    config = dataclasses.asdict(Experiment(dataset="synthetic:tiny", scale=0.1))
    got = experiment_from_checkpoint({"metadata": {"config": config}}, dataset="synthetic:arxiv")
    assert (got.dataset, got.scale) == ("synthetic:arxiv", 0.1)


def test_predict_names_a_hetero_checkpoint_given_a_node_dataset(trained, tmp_path, capsys):
    import shutil

    folder, _ = trained
    ckpt = tmp_path / "ckpt-mag"
    shutil.copytree(folder / "ckpt", ckpt)
    path = Path(read_manifest(ckpt)["path"])
    text = json.loads(path.read_text())
    text["metadata"]["config"].update(dataset="synthetic:mag", model="rgcn", scale=0.005)
    path.write_text(json.dumps(text))
    argv = ["predict", "--checkpoint", str(ckpt), "--out", str(tmp_path / "p.npy")]
    assert main([*argv, "--dataset", "synthetic:tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "is a hetero checkpoint of 'synthetic:mag'; dataset 'synthetic:tiny' is a node-level" in err
    )
    assert len(err.splitlines()) == 1 and not (tmp_path / "p.npy").exists()

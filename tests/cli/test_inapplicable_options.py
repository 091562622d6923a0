"""Options a run would ignore, empty paths and epoch counts past int32: each refused
with exit 2 and one line naming the flag, before any data is read (the data root
given is an empty folder)."""

import pytest

from sparsegcn.cli import main

MUTAG = ["train", "--dataset", "tu:MUTAG", "--model", "gin", "--epochs", "1", "--no-progress"]
MAG = ["train", "--dataset", "synthetic:mag", "--model", "rgcn", "--scale", "0.005"]
MAG += ["--epochs", "1", "--no-progress"]
TINY = ["train", "--epochs", "1", "--no-progress"]


def refused(argv, capsys) -> str:
    """The one-line error of ``argv``, which must exit 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--backend", "dense"], "backend='dense' (--backend)"),
        (["--normalize-features", "row"], "normalize_features='row' (--normalize-features)"),
        (["--no-edge-features"], "edge_features=False (--edge-features)"),
        # fit_graphs decays every parameter: no per-layer choice to make.
        (["--decay-layers", "all"], "decay_layers='all' (--decay-layers)"),
        (["--decay-layers", "none"], "decay_layers='none' (--decay-layers)"),
        # fit_graphs selects by the dataset's metric: even the node default is refused.
        (["--monitor", "val_acc"], "monitor='val_acc' (--monitor)"),
        (["--monitor", "val_loss"], "monitor='val_loss' (--monitor)"),
    ],
)
def test_graph_runs_refuse_what_graph_training_does_not_read(flags, named, tmp_path, capsys):
    err = refused([*MUTAG, "--root", str(tmp_path), *flags], capsys)
    assert named in err and "graph-level task" in err
    assert not any(tmp_path.iterdir())  # nothing downloaded or written


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--normalize-features", "row"], "normalize_features='row' (--normalize-features)"),
        (["--no-edge-features"], "edge_features=False (--edge-features)"),
        (["--monitor", "val_loss"], "monitor='val_loss' (--monitor)"),
        (["--backend", "dense"], "backend='dense' (--backend)"),
    ],
)
def test_hetero_runs_refuse_what_the_hetero_trainer_does_not_read(flags, named, capsys):
    err = refused([*MAG, *flags], capsys)
    assert named in err and "hetero-level task" in err


def test_num_bases_is_refused_where_it_changes_nothing(capsys):
    err = refused([*TINY, "--model", "rgcn", "--num-bases", "4"], capsys)
    assert "num_bases=4 (--num-bases) applies only to heterogeneous datasets" in err


def test_num_bases_is_bounded_by_the_relations(capsys):
    # ogbn-mag's 4 relations: 3 reversed, paper-cites-paper made symmetric: 7.
    err = refused([*MAG, "--num-bases", "8"], capsys)
    assert "num_bases must be at most the number of relations, 7 here" in err
    assert "got 8 (--num-bases)" in err


def test_link_runs_refuse_checkpoint_settings_of_resumable_checkpoints(tmp_path, capsys):
    link = [*TINY, "--task", "link", "--model", "gae", "--checkpoint", str(tmp_path / "c")]
    err = refused([*link, "--checkpoint-every", "7"], capsys)
    assert "checkpoint_every=7 (--checkpoint-every)" in err and "link-level task" in err
    err = refused([*link, "--keep", "1"], capsys)
    assert "keep=1 (--keep)" in err


@pytest.mark.parametrize("monitor", ["val_acc", "val_loss"])
def test_link_runs_refuse_a_monitor_as_they_select_no_epoch(monitor, capsys):
    err = refused([*TINY, "--task", "link", "--model", "gae", "--monitor", monitor], capsys)
    assert f"monitor='{monitor}' (--monitor)" in err and "selecting none" in err


@pytest.mark.parametrize(
    ("folds", "message"),
    [
        (str(2**31), f"folds must be >= 0 and <= 2147483647, got {2**31} (--folds)"),
        (str(2**63), f"folds must be >= 0 and <= 2147483647, got {2**63} (--folds)"),
        ("-1", "folds must be >= 0 and <= 2147483647, got -1 (--folds)"),
        ("1", "--folds must be 0 (one holdout split) or at least 2, got 1"),
    ],
)
def test_folds_are_bounded_naming_the_flag_before_any_data_is_read(
    folds, message, tmp_path, capsys
):
    # Before: 2**31 and 2**63 passed until the graphs were read (or downloaded).
    err = refused([*MUTAG, "--root", str(tmp_path), "--folds", folds], capsys)
    assert message in err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["train", "--json", ""], "--json ''"),
        (["train", "--plot", ""], "plot='' (--plot)"),
        (["train", "--checkpoint", ""], "checkpoint='' (--checkpoint)"),
        (["train", "--resume", ""], "resume='' (--resume)"),
        (["train", "--model", "sgc", "--feature-cache", ""], "feature_cache='' (--feature-cache)"),
        (["train", "--dataset", "cora", "--root", ""], "root='' (--root)"),
        (["info", "--json", ""], "--json ''"),
        (["info", "--dataset", "cora", "--root", ""], "--root ''"),
    ],
)
def test_an_empty_path_is_refused_naming_its_flag(command, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "" would have meant this folder
    err = refused([*command, "--no-progress"], capsys)
    assert flag in err and "is empty" in err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        (["--epochs", str(2**31)], "epochs"),
        (["--epochs", "2", "--patience", str(2**63 - 1)], "patience"),
        (["--divergence-epochs", str(2**31)], "divergence_epochs"),
        (["--epochs-per-call", str(2**31)], "epochs_per_call"),
        (["--checkpoint", "CK", "--checkpoint-every", str(2**31)], "checkpoint_every"),
        (["--sweep", f"epochs=1,{2**31}"], "epochs"),
    ],
)
def test_epoch_counts_past_int32_are_refused_naming_the_flag(flags, name, tmp_path, capsys):
    # Before: an OverflowError from a jitted comparison, exit 1, after the data loaded.
    flags = [str(tmp_path / f) if f == "CK" else f for f in flags]
    err = refused(["train", "--no-progress", *flags], capsys)
    assert f"{name} must be <= 2147483647 (compiled code counts it in int32)" in err
    assert f"(--{name.replace('_', '-')})" in err


def test_dropping_edge_features_a_dataset_lacks_is_refused(tmp_path, capsys):
    # --no-edge-features on a node dataset without edge features trained as if not given.
    argv = ["train", "--dataset", "synthetic:tiny", "--root", str(tmp_path), "--epochs", "1"]
    assert main([*argv, "--no-edge-features", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--no-edge-features) drops edge features, but" in err[0]


def test_scale_is_refused_on_graph_datasets_generated_at_one_size(capsys):
    # Before: train --dataset synthetic:molhiv --scale 1e-9 trained the full dataset
    # (info refused it).
    argv = ["train", "--dataset", "synthetic:molhiv", "--model", "gin", "--scale", "0.5"]
    err = refused([*argv, "--epochs", "1", "--no-progress"], capsys)
    assert "scale=0.5 (--scale) applies only to generated node, link and heterogeneous" in err
    assert "graph dataset 'synthetic:molhiv' is generated at one size" in err

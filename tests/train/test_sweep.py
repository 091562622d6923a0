"""Sweeps: parsing, grids, one program for values that are data, ranked reports."""

import dataclasses
import json

import jax
import numpy as np
import pytest

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.datasets import load
from sparsegcn.experiment import NOT_SWEEPABLE, Experiment, node_data
from sparsegcn.train import TrainConfig, fit_sweep
from sparsegcn.train.sweep import (
    expand_grid,
    format_table,
    parse_sweep,
    rank_rows,
    set_hyperparams,
)

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def compiled_programs(fn):
    """Runs ``fn``; returns the names of the programs XLA compiled, and its result."""
    names = []

    def listener(event, duration, **kwargs):
        if event == COMPILE_EVENT:
            names.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        result = fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return names, result


def test_parse_sweep_converts_by_field_type():
    axes = parse_sweep(
        ["lr=0.005,0.01", "hidden=16,64", "residual=true,no", "weight-decay=0,5e-4"],
        Experiment,
    )
    assert axes == {
        "lr": [0.005, 0.01],
        "hidden": [16, 64],
        "residual": [True, False],
        "weight_decay": [0.0, 5e-4],
    }
    assert isinstance(axes["hidden"][0], int) and isinstance(axes["weight_decay"][0], float)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lr", r"--sweep 'lr': expected NAME=V1,V2"),
        ("=1,2", r"expected NAME=V1,V2"),
        ("lrr=0.1", r"'lrr' cannot be swept; choose from \['dataset'"),
        ("hidden=16,,64", r"value 2 is empty"),
        ("hidden=16,sixty", r"value 2 \('sixty'\) is not a int"),
        ("lr=0.1,nan", r"value 2 \('nan'\) is not finite"),
        ("residual=maybe", r"value 1 \('maybe'\) is not a boolean"),
        ("hidden=16,16", r"value 2 \(16\) is repeated"),
    ],
)
def test_parse_sweep_rejects_bad_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_sweep([spec], Experiment)


def test_parse_sweep_rejects_repeats_and_excluded_fields():
    with pytest.raises(ValueError, match="'lr' is swept twice"):
        parse_sweep(["lr=0.1", "lr=0.2"], Experiment)
    with pytest.raises(ValueError, match="'seed' cannot be swept"):
        parse_sweep(["seed=1,2"], Experiment, exclude=NOT_SWEEPABLE)


def test_expand_grid_is_the_product_first_axis_slowest():
    grid = expand_grid({"lr": [1, 2], "hidden": [16, 64, 128]})
    assert grid == [
        {"lr": 1, "hidden": 16},
        {"lr": 1, "hidden": 64},
        {"lr": 1, "hidden": 128},
        {"lr": 2, "hidden": 16},
        {"lr": 2, "hidden": 64},
        {"lr": 2, "hidden": 128},
    ]
    assert expand_grid({}) == [{}]


def test_rank_rows_orders_by_validation_not_test():
    rows = [
        {"val_acc_mean": 0.7, "val_acc_std": 0.0, "test_acc_mean": 0.9},
        {"val_acc_mean": 0.8, "val_acc_std": 0.1, "test_acc_mean": 0.1},
        {"val_acc_mean": 0.8, "val_acc_std": 0.0, "test_acc_mean": 0.2},
    ]
    ranked = rank_rows(rows)
    assert [r["test_acc_mean"] for r in ranked] == [0.2, 0.1, 0.9]
    assert [r["rank"] for r in ranked] == [1, 2, 3]
    # An error metric ranks lowest first; NaN (no validation figure) last either way.
    errors = [
        {"val_rmse_mean": 0.5, "val_rmse_std": 0.0},
        {"val_rmse_mean": float("nan"), "val_rmse_std": 0.0},
        {"val_rmse_mean": 0.2, "val_rmse_std": 0.3},
        {"val_rmse_mean": 0.2, "val_rmse_std": 0.1},
    ]
    ranked = rank_rows(errors, "rmse", lower_is_better=True)
    assert [(r["val_rmse_mean"], r["val_rmse_std"]) for r in ranked[:3]] == [
        (0.2, 0.1),
        (0.2, 0.3),
        (0.5, 0.0),
    ]
    assert np.isnan(ranked[3]["val_rmse_mean"])
    assert np.isnan(rank_rows(errors[:2], "rmse")[1]["val_rmse_mean"])


@pytest.fixture(scope="module")
def setup():
    dataset = load("synthetic:tiny", scale=0.1)
    model = sg.gcn(dataset.num_features, dataset.num_classes, hidden=8)
    return model, node_data(dataset)


POINTS = [
    {"learning_rate": 0.005},
    {"learning_rate": 0.05, "weight_decay": 0.0},
    {"learning_rate": 0.02, "weight_decay": 5e-3},
]


@pytest.fixture(scope="module")
def sweep(setup):
    """Three points x two seeds in one program, and point 1 trained alone."""
    model, data = setup
    config = TrainConfig(epochs=30, patience=10, epochs_per_call=10, timing_steps=0)
    names, results = compiled_programs(
        lambda: fit_sweep(model, data, config, seeds=[0, 1], points=POINTS)
    )
    alone_config = dataclasses.replace(config, learning_rate=0.05, weight_decay=0.0)
    alone = sg.fit(model, data, alone_config, seeds=[0, 1])
    return names, results, alone


def test_points_in_one_program_equal_separate_runs_and_compile_once(sweep):
    names, results, alone = sweep
    # The epoch program (make_chunk_fn's one_seed) and the init compile once for 3 points.
    assert names.count("jit(one_seed)") == 1 and names.count("jit(init_member)") == 1
    assert len(results) == 3 and results[1].seeds == (0, 1)
    got = results[1]
    for a, b in zip(jax.tree.leaves(got.state), jax.tree.leaves(alone.state), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got.best_epoch, alone.best_epoch)
    np.testing.assert_allclose(got.history["loss"], alone.history["loss"], rtol=1e-5)
    hyperparams = got.state.opt_state.hyperparams
    np.testing.assert_array_equal(hyperparams["learning_rate"], np.float32([0.05, 0.05]))
    # Different learning rates really train differently.
    assert not np.allclose(results[0].history["loss"][-1], got.history["loss"][-1])


def test_set_hyperparams_per_member_and_validation(sweep):
    state = sweep[1][0].state
    new = set_hyperparams(state, learning_rate=[0.1, 0.2], weight_decay=0.0)
    np.testing.assert_array_equal(
        new.opt_state.hyperparams["learning_rate"], np.float32([0.1, 0.2])
    )
    np.testing.assert_array_equal(new.opt_state.hyperparams["weight_decay"], np.float32([0, 0]))
    leaves = zip(jax.tree.leaves(new.params), jax.tree.leaves(state.params), strict=True)
    assert all(a is b for a, b in leaves)  # nothing else changes
    with pytest.raises(ValueError, match=r"learning_rate needs a scalar or 2 values"):
        set_hyperparams(state, learning_rate=[0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"'momentum' is not an injected hyperparameter"):
        set_hyperparams(state, momentum=0.9)
    with pytest.raises(ValueError, match=r"learning_rate must be finite"):
        set_hyperparams(state, learning_rate=float("inf"))


def test_fit_sweep_refuses_points_that_are_not_data(setup):
    model, data = setup
    with pytest.raises(ValueError, match=r"points\[1\] sets \['hidden'\]"):
        fit_sweep(model, data, TrainConfig(), seeds=[0], points=[{}, {"hidden": 8}])


@pytest.mark.slow
def test_cli_sweep_ranks_the_grid_and_writes_json(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    argv = ["train", "--scale", "0.1", "--epochs", "15", "--seeds", "2", "--no-progress"]
    argv += ["--sweep", "lr=0.01,0.05", "--sweep", "hidden=4,8", "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert len(rows) == 4 and {(r["lr"], r["hidden"]) for r in rows} == {
        (0.01, 4),
        (0.05, 4),
        (0.01, 8),
        (0.05, 8),
    }
    # hidden changes shapes: two programs, each training both learning rates.
    assert [p["points"] for p in report["programs"]] == [2, 2]
    assert [p["members"] for p in report["programs"]] == [4, 4]
    assert {r["program"] for r in rows if r["hidden"] == 4} == {0}
    vals = [r["val_acc_mean"] for r in rows]
    assert vals == sorted(vals, reverse=True) and [r["rank"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        assert len(row["test_acc"]) == 2
        assert row["test_acc_mean"] == pytest.approx(np.mean(row["test_acc"]))
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[:3] == ["rank", "lr", "hidden"]
    assert printed == format_table(rows, ["lr", "hidden"]) + "\n"


def test_cli_sweep_refuses_checkpoints(tmp_path, capsys):
    argv = ["train", "--sweep", "lr=0.01,0.05", "--checkpoint", str(tmp_path / "c")]
    assert main(argv) == 2
    assert "--checkpoint, --resume and --plot apply to single runs" in capsys.readouterr().err
    assert main(["train", "--sweep", "seeds=1,2"]) == 2
    assert "'seeds' cannot be swept" in capsys.readouterr().err


def test_a_sweep_trains_each_point_as_its_settings_say(monkeypatch, capsys):
    """Before: every point trained on the edge list whatever --backend said; a CLI
    setting equal to the first model's default was dropped for a swept model; points
    sharing a program were checked for memory one at a time; `task` could be swept
    past its task's refusal."""
    from sparsegcn.experiment import resources, run_sweep
    from sparsegcn.experiment.sweep import sweep_points

    base = Experiment(scale=0.1, epochs=2, hidden=4)
    report = run_sweep(base, {"backend": ["segment", "dense"]})
    assert [p["layout"] for p in report["programs"]] == ["edges", "dense"]
    # --lr 0.01 and --hidden 16 typed for gcn stay for gat (its own defaults: 0.005, 8).
    typed = Experiment(model="gcn", lr=0.01, hidden=16)
    _, (kept,) = sweep_points(typed, {"model": ["gat"]}, given={"lr", "hidden"})
    _, (fresh,) = sweep_points(typed, {"model": ["gat"]})
    assert (kept.lr, kept.hidden) == (0.01, 16) and (fresh.lr, fresh.hidden) == (0.005, 8)
    # Three learning rates are one program of 3 x 2 members: checked as one.
    dataset = load(base.dataset, base.root, scale=base.scale)
    one = resources.estimate_bytes(dataclasses.replace(base, seeds=2), dataset)
    monkeypatch.setattr(resources, "available_memory", lambda: int(1.5 * one))
    with pytest.raises(ValueError, match=r"--sweep trains 3 points x 2 seed\(s\) of one program"):
        run_sweep(dataclasses.replace(base, seeds=2), {"lr": [0.01, 0.02, 0.03]})
    assert main(["train", "--epochs", "1", "--sweep", "task=link", "--sweep", "model=gae"]) == 2
    assert "'task' cannot be swept" in capsys.readouterr().err
    # "none" is gcn's default hidden width, 16: the same run twice, refused.
    with pytest.raises(ValueError, match=r"points \{'hidden': None\} and \{'hidden': 16\} are"):
        sweep_points(Experiment(), {"hidden": [None, 16]})
    # Sampled points train one by one: a program each (before: one program, 2 points).
    monkeypatch.undo()
    sampled = Experiment(model="sage", scale=0.1, epochs=1, hidden=4, fanouts="2,2")
    report = run_sweep(sampled, {"lr": [0.01, 0.02]})
    assert [p["points"] for p in report["programs"]] == [1, 1]


def test_list_valued_fields_sweep_values_separated_by_semicolons():
    from sparsegcn.experiment.sweep import LIST_FIELDS

    axes = parse_sweep(["fanouts=25,10;15,5", "lr=0.01,0.02"], Experiment, lists=LIST_FIELDS)
    assert axes == {"fanouts": ["25,10", "15,5"], "lr": [0.01, 0.02]}
    # Before, split on commas: "fanouts='25' has 1 hops and layers=2".
    with pytest.raises(ValueError, match=r"value 2 \('25,10'\) is repeated"):
        parse_sweep(["fanouts=25,10;25,10"], Experiment, lists=LIST_FIELDS)

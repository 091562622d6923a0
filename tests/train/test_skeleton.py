"""One trainer skeleton: :func:`sparsegcn.train.loop.drive` is the host loop of every
trainer, whatever its task, so every one stops on divergence, records its history and
calls its checkpoint hook the same way."""

from __future__ import annotations

import re

import numpy as np
import optax
import pytest
from graph_sets import random_graphs, write_mini
from helpers import two_communities
from hetero_graphs import hetero_data, tiny_spec
from link_graphs import communities, data_of

from sparsegcn.cli import main
from sparsegcn.nn import sage
from sparsegcn.nn.graph_gin import graph_gin
from sparsegcn.nn.registry import create_model
from sparsegcn.nn.rgcn import rgcn
from sparsegcn.sampling.links import random_link_split
from sparsegcn.tasks.hetero import fit_hetero
from sparsegcn.train import DivergenceError, MinibatchConfig, TrainConfig, minibatch_data
from sparsegcn.train.graphs import GraphTrainConfig, fit_graphs, fold_splits
from sparsegcn.train.links import (
    LinkTrainConfig,
    fit_links,
    fit_links_sampled,
    sampled_link_data,
)
from sparsegcn.train.loop import drive
from sparsegcn.train.streamed import fit_streamed

HUGE_LR = 1e30  # Adam steps by about the learning rate whatever the gradient


def counting(losses: np.ndarray, chunk: int = 1):
    """``advance`` for :func:`drive` that replays ``losses`` ``[epochs, K]``, ``chunk`` a call."""
    position = [0]

    def advance(state):
        rows = losses[position[0] : position[0] + chunk]
        position[0] += chunk
        return state + 1, {"loss": rows.T, "val": -rows.T}

    return advance


# -- the host loop ---------------------------------------------------------------


def test_runs_to_the_last_epoch_growing_the_history_and_calling_the_hook():
    losses = np.linspace(1.0, 0.1, 12).reshape(6, 2)
    seen = []
    state, history, seconds = drive(
        counting(losses, chunk=2),
        0,
        epochs=6,
        seeds=[3, 4],
        on_chunk=lambda s, h: seen.append((s, {k: v.copy() for k, v in h.items()})),
    )
    assert state == 3 and len(seconds) == 3
    np.testing.assert_array_equal(history["loss"], losses)
    np.testing.assert_array_equal(history["val"], -losses)
    assert [s for s, _ in seen] == [1, 2, 3]
    assert [h["loss"].shape for _, h in seen] == [(2, 2), (4, 2), (6, 2)]


def test_a_resumed_run_continues_its_history_and_refuses_another_trainers():
    losses = np.linspace(1.0, 0.1, 10).reshape(5, 2)
    earlier = {"loss": losses[:2], "val": -losses[:2]}
    advance = counting(losses[2:])
    _, history, _ = drive(advance, 0, epochs=5, seeds=[0, 1], start=2, history=earlier)
    np.testing.assert_array_equal(history["loss"], losses)
    with pytest.raises(ValueError, match=r"history has metrics \['acc'\]"):
        drive(counting(losses), 0, epochs=5, seeds=[0, 1], history={"acc": losses[:1]})


def test_stops_where_finished_says():
    losses = np.ones((9, 1))
    state, history, _ = drive(counting(losses), 0, epochs=9, seeds=[0], finished=lambda s: s >= 4)
    assert state == 4 and history["loss"].shape == (4, 1)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_loss_names_its_epoch_and_seed_before_the_hook(bad):
    losses = np.ones((8, 3))
    losses[4, 2] = losses[5, 1] = bad  # epochs 5 and 6; the earliest is reported
    calls = []
    with pytest.raises(DivergenceError, match=r"at epoch 5 \(seed 12\)") as caught:
        drive(
            counting(losses, chunk=3),
            0,
            epochs=8,
            seeds=[10, 11, 12],
            on_chunk=lambda s, h: calls.append(s),
        )
    assert calls == [1]  # the call with the bad epoch is not checkpointed
    assert caught.value.diverged_seeds == (11, 12) and caught.value.member == 2


def test_a_non_finite_gradient_norm_stops_a_finite_loss():
    def advance(state):
        return state + 1, {"loss": np.ones((1, 1)), "grad_norm": np.full((1, 1), np.inf)}

    with pytest.raises(DivergenceError, match="gradient norm inf"):
        drive(advance, 0, epochs=3, seeds=[0])


def test_a_finite_runaway_loss_stops_after_the_stated_epochs_unless_turned_off():
    losses = np.concatenate([np.ones(3), np.full(12, 1e4)])[:, None]
    with pytest.raises(DivergenceError, match=r"at epoch 13 .*above 100x") as caught:
        drive(counting(losses), 0, epochs=15, seeds=[7], divergence_epochs=10)
    assert caught.value.seed == 7
    _, history, _ = drive(counting(losses), 0, epochs=15, seeds=[7], divergence_factor=None)
    assert history["loss"].shape == (15, 1)


# -- every trainer runs on it --------------------------------------------------------


def link_setup():
    graph, x = communities(n=24)
    split = random_link_split(graph, val=0.1, test=0.2, seed=0)
    return x, split, data_of(graph, x, 0)


def test_the_graph_trainer_stops_on_divergence():
    model = graph_gin(3, 2, hidden=8, num_layers=3, dropout_rate=0.0)
    data = random_graphs(count=24, seed=1)
    config = GraphTrainConfig(epochs=6, batch_size=6, learning_rate=HUGE_LR, epochs_per_call=2)
    with pytest.raises(DivergenceError, match=r"training diverged at epoch \d \(seed [45]\)"):
        fit_graphs(model, data, config, fold_splits(data.labels, 3, seed=0), seeds=(4, 5))


def test_the_full_batch_link_trainer_stops_on_divergence_and_records_each_step():
    _, _, data = link_setup()
    model = create_model("gae", 4, 4, hidden=8, layers=2, dropout=0.0, encoder="gcn")
    result = fit_links(model, data, LinkTrainConfig(epochs=4), seeds=(0, 1))
    assert result.losses.shape == (4, 2) and result.step_ms.shape == (4,)
    with pytest.raises(DivergenceError, match=r"training diverged at epoch \d"):
        fit_links(model, data, LinkTrainConfig(epochs=30, learning_rate=HUGE_LR), seeds=(0, 1))


def test_the_sampled_link_trainer_stops_on_divergence():
    x, split, data = link_setup()
    sampled = sampled_link_data(split.graph, x, split.split["train"])
    model = create_model(
        "gae", 4, 4, hidden=8, layers=2, dropout=0.0, encoder="sage", recon="sampled"
    )
    with pytest.raises(DivergenceError, match=r"training diverged at epoch \d"):
        fit_links_sampled(
            model,
            sampled,
            data,
            LinkTrainConfig(epochs=30, learning_rate=HUGE_LR),
            fanouts=(5, 5),
            batch_size=16,
        )


def test_the_hetero_trainer_stops_on_divergence():
    data = hetero_data(tiny_spec())
    model = rgcn(
        data.graph.num_nodes, data.graph.edge_types, {"paper": 8}, 4, target="paper", hidden=8
    )
    with pytest.raises(DivergenceError, match=r"training diverged at epoch \d \(seed 3\)"):
        fit_hetero(
            model, data, optax.adam(HUGE_LR), fanouts=(4, 3), batch_size=128, epochs=20, seed=3
        )


def _fresh_runs():
    """One short run of each trainer outside the node skeleton, from a fresh state."""
    x, split, data = link_setup()
    gae = create_model("gae", 4, 4, hidden=8, layers=2, dropout=0.0, encoder="gcn")
    sampled_gae = create_model(
        "gae", 4, 4, hidden=8, layers=2, dropout=0.0, encoder="sage", recon="sampled"
    )
    hetero = hetero_data(tiny_spec())
    rgcn_model = rgcn(
        hetero.graph.num_nodes, hetero.graph.edge_types, {"paper": 8}, 4, target="paper", hidden=8
    )
    graphs = random_graphs(count=24, seed=1)
    node = two_communities()
    return {
        "this graph run (2 member(s): folds x seeds)": lambda: fit_graphs(
            graph_gin(3, 2, hidden=8, num_layers=3, dropout_rate=0.0),
            graphs,
            GraphTrainConfig(epochs=1, batch_size=6),
            fold_splits(graphs.labels, 2, seed=0),
        ),
        "fit_links (2 seed(s))": lambda: fit_links(
            gae, data, LinkTrainConfig(epochs=1), seeds=(0, 1)
        ),
        "fit_links_sampled (1 seed(s))": lambda: fit_links_sampled(
            sampled_gae,
            sampled_link_data(split.graph, x, split.split["train"]),
            data,
            LinkTrainConfig(epochs=1),
            fanouts=(5, 5),
            batch_size=16,
        ),
        "fit_hetero (seed 3)": lambda: fit_hetero(
            rgcn_model, hetero, optax.adam(0.01), fanouts=(4, 3), batch_size=128, epochs=1, seed=3
        ),
        "fit_streamed": lambda: fit_streamed(
            sage(8, 2, hidden=8),
            minibatch_data(node)._replace(features=np.asarray(node.features)),
            TrainConfig(epochs=1),
            MinibatchConfig((3, 2), 16),
        ),
    }


def test_every_trainer_refuses_a_state_larger_than_free_memory_before_building_it(monkeypatch):
    # Before: each trainer built its parameters and optimizer state first, so a model
    # too wide for memory was killed by the OOM killer while building them.
    from sparsegcn.bench import runner

    runs = _fresh_runs()
    monkeypatch.setattr(runner, "available_memory", lambda: 1000)
    for what, run in runs.items():
        with pytest.raises(
            ValueError, match=rf"training state of {re.escape(what)} .* but 0\.0 GiB"
        ):
            run()


# Slow: the graph and link trainers' divergence stops are checked above, and the CLI's
# one-line report in tests/train/test_guard.py.
@pytest.mark.slow
def test_cli_graph_and_link_runs_report_divergence_in_one_line_and_exit_2(tmp_path, capsys):
    write_mini(tmp_path / "tu" / "MINI")
    runs = [
        [
            "--dataset",
            "tu:MINI",
            "--model",
            "gin",
            "--hidden",
            "8",
            "--epochs",
            "20",
            "--folds",
            "3",
        ],
        ["--dataset", "synthetic:tiny", "--scale", "0.05", "--task", "link", "--model", "gae"],
    ]
    for argv in runs:
        code = main(["train", "--root", str(tmp_path), "--no-progress", "--lr", "1e30", *argv])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "sparsegcn train: error: training diverged at epoch" in err
        assert "Traceback" not in err

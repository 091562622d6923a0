"""The model registry: one table that the CLI, builders and checks read (sparsegcn/nn/registry.py)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.experiment import Experiment
from sparsegcn.nn.registry import MODELS, PREPARATIONS, create_model, get_model_spec


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_registered_model_builds_trains_a_step_and_reports_its_name(name):
    spec = get_model_spec(name)
    graph = spec.prepare_graph(sg.Graph(np.array([0, 1, 2]), np.array([1, 2, 0]), None, 4))
    # The model's own layer count and width where it has no choice (sgc: one layer, no hidden).
    layers = spec.defaults.get("layers", 2) if name == "sgc" else 2
    hidden = None if name == "sgc" else 4
    model = create_model(name, 5, 3, hidden=hidden, layers=layers, dropout=0.0)
    assert model.name == name
    params = model.init(jax.random.key(0))
    logits = model.apply(params, graph, jax.numpy.ones((4, 5)))
    # A link model's output is its node embeddings, as wide as its embedding_dim option.
    width = model.config["num_classes"]
    assert width == (
        spec.options["embedding_dim"].default if "embedding_dim" in spec.options else 3
    )
    assert logits.shape == (4, width) and np.isfinite(np.asarray(logits)).all()


def test_preparations_give_each_model_its_graph():
    g = sg.Graph(np.array([0, 1, 1, 1]), np.array([1, 0, 1, 1]), np.array([2.0, 2, 3, 3]), 3)
    looped = PREPARATIONS["self_loops"](g)  # one unweighted loop per node, no other loop
    senders, receivers = np.asarray(looped.senders), np.asarray(looped.receivers)
    pairs = sorted(zip(senders.tolist(), receivers.tolist(), strict=True))
    assert pairs == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 2)] and looped.weights is None
    np.testing.assert_allclose(
        PREPARATIONS["gcn_norm"](g).to_dense(), sg.gcn_norm(g).to_dense(), rtol=1e-6
    )
    assert PREPARATIONS["unweighted"](g).weights is None


def test_experiment_takes_the_models_paper_settings_unless_told():
    gat = Experiment(model="gat")
    assert (gat.hidden, gat.dropout, gat.lr, gat.decay_layers) == (8, 0.6, 0.005, "all")
    assert (gat.epochs, gat.patience, gat.monitor) == (1000, 100, "val_loss")
    assert gat.train_config().monitor == "val_loss" and gat.train_config().epochs == 1000
    told = Experiment(model="gat", epochs=50, patience=0, monitor="val_acc")
    assert (told.epochs, told.patience, told.monitor) == (50, 0, "val_acc")
    assert told.train_config().patience is None
    assert gat.options() == {"heads": 8, "value_dropout": 0.0}
    assert Experiment(model="gat", hidden=16, model_options=(("heads", 4),)).options() == {
        "heads": 4,
        "value_dropout": 0.0,
    }
    gcn = Experiment()
    assert (gcn.hidden, gcn.dropout, gcn.lr, gcn.decay_layers) == (16, 0.5, 0.01, "first")
    assert (gcn.epochs, gcn.patience, gcn.monitor) == (200, 100, "val_acc")  # the fallbacks
    assert gcn.fanouts is None and not gcn.sampled
    assert Experiment(model="sage").sampled and Experiment(model="sage").fanouts == "25,10"
    assert Experiment(model="gat", fanouts="10,5").sampled


def test_bad_model_settings_are_refused_with_the_value(capsys):
    with pytest.raises(ValueError, match=r"heads=4 applies to gat, gatv2, not gcn"):
        Experiment(model="gcn", model_options=(("heads", 4),))
    with pytest.raises(ValueError, match="heads must be >= 1, got 0"):
        Experiment(model="gat", model_options=(("heads", 0),))
    with pytest.raises(ValueError, match=r"aggregator must be one of \['mean', 'max', 'sum'\]"):
        Experiment(model="sage", model_options=(("aggregator", "median"),))
    with pytest.raises(ValueError, match="gcn trains full batch only"):
        Experiment(model="gcn", fanouts="10,5")
    with pytest.raises(ValueError, match="unknown model 'gin2'"):
        get_model_spec("gin2")
    assert main(["train", "--model", "mlp", "--heads", "2"]) == 2
    assert "heads=2 applies to gat, gatv2, not mlp" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"monitor must be one of \['val_acc', 'val_loss'\]"):
        Experiment(model="gat", monitor="test_acc")


def test_cli_model_choices_are_the_registry():
    import argparse

    from sparsegcn.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    model = next(a for a in sub.choices["train"]._actions if a.dest == "model")
    assert tuple(model.choices) == tuple(MODELS)


def test_every_model_that_may_encode_links_does():
    # --encoder takes the registry's models whose spec allows it, not a list of its own.
    from sparsegcn.nn.registry import ENCODERS

    assert set(ENCODERS) == {n for n, s in MODELS.items() if s.link_encoder}
    assert set(MODELS) - set(ENCODERS) == {"sgc", "rgcn", "gae", "vgae"}
    x = jax.numpy.ones((4, 5))
    for name in ENCODERS:
        model = create_model("gae", 5, 3, hidden=4, layers=2, dropout=0.0, encoder=name)
        graph = get_model_spec(name).prepare_graph(
            sg.Graph(np.array([0, 1, 2]), np.array([1, 2, 0]), None, 4)
        )
        z = model.apply(model.init(jax.random.key(0)), graph, x)
        assert z.shape == (4, 16) and np.isfinite(np.asarray(z)).all(), name

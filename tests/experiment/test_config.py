"""Experiment settings that depend on each other: layers from the sampled hops."""

import pytest

from sparsegcn.cli import build_parser
from sparsegcn.cli.options import dataclass_from_args
from sparsegcn.experiment import Experiment


@pytest.mark.parametrize(
    ("model", "fanouts", "layers"),
    [("sage", "15,10,5", 3), ("sage", "7", 1), ("gat", "5,5,5", 3), ("gin", "4,4", 2)],
)
def test_a_sampled_model_takes_one_layer_per_hop_when_layers_is_unset(model, fanouts, layers):
    assert Experiment(model=model, fanouts=fanouts).layers == layers


def test_layers_keep_their_default_or_explicit_value_otherwise():
    assert Experiment(model="sage").layers == 2  # its default fanouts 25,10
    assert Experiment(model="gat").layers == 2  # full batch
    assert Experiment(model="gat", fanouts="none").layers == 2
    assert Experiment(model="sage", fanouts="15,10,5", layers=3).layers == 3
    with pytest.raises(ValueError, match="fanouts='15,10,5' has 3 hops and layers=2"):
        Experiment(model="sage", fanouts="15,10,5", layers=2)
    with pytest.raises(ValueError, match="fanouts must be comma-separated integers"):
        Experiment(model="sage", fanouts="15,x")


def test_the_command_line_takes_the_layers_from_the_fanouts():
    args = build_parser().parse_args(["train", "--model", "sage", "--fanouts", "15,10,5"])
    assert dataclass_from_args(Experiment, args).layers == 3

"""Experiment refuses, naming the field, what the command line's parser cannot
produce but the Python API can; a model swept in takes its own defaults."""

import dataclasses

import pytest

from sparsegcn.experiment import Experiment
from sparsegcn.experiment.config import without_inapplicable
from sparsegcn.experiment.sweep import sweep_points

GIN = dict(dataset="tu:MUTAG", model="gin")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # "no" is truthy: GIN-eps would have been switched on.
        (dict(GIN, learn_eps="no"), r"learn_eps must be True or False, got 'no' \(str\)"),
        (dict(GIN, virtual_node=1), r"virtual_node must be True or False, got 1 \(int\)"),
        (dict(model="sage", residual="no"), "residual must be True or False"),
        (dict(edge_features="no"), "edge_features must be True or False"),
        (dict(root=3), r"root must be a string, got 3 \(int\) \(--root\)"),
        (dict(checkpoint=3), r"checkpoint must be a string, got 3 \(int\)"),
        (dict(resume=3), r"resume must be a string, got 3 \(int\)"),
        (dict(plot=3), r"plot must be a string, got 3 \(int\)"),
        (dict(normalize_features=None), "normalize_features must be a string, got None"),
        (dict(model_options=(("decoder",),)), r"model_options must be \(name, value\) pairs"),
        (dict(model_options="decoder=inner"), "model_options must be .* got 'decoder=inner'"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_naming_it(settings, message):
    with pytest.raises(TypeError, match=message):
        Experiment(**settings)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(normalize_features="bogus"), r"normalize_features must be one of \['auto', "),
        (dict(decay_layers="bogus"), r"decay_layers must be one of .* got 'bogus'"),
        (dict(dataset="synthetic:collab", model="gae", decay_layers="last"), "decay_layers"),
        (dict(root=""), r"root='' \(--root\) is empty"),
        (dict(model="sgc", feature_cache=""), r"feature_cache='' \(--feature-cache\) is empty"),
        (dict(dataset=""), r"dataset='' \(--dataset\) is empty"),
    ],
)
def test_a_value_outside_a_fields_choices_or_an_empty_path_is_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        Experiment(**settings)


def test_model_options_may_be_a_mapping_or_pairs_as_a_checkpoint_records_them():
    assert Experiment(model_options={"jk": "cat"}).options()["jk"] == "cat"
    assert Experiment(model_options=[["jk", "cat"]]).options()["jk"] == "cat"


def test_a_model_swept_in_takes_its_own_defaults_and_options():
    # Before: gat kept gcn's jk='none' and was refused ("jk='none' applies to gcn, ...").
    _, (gcn, gat) = sweep_points(Experiment(), {"model": ["gcn", "gat"]})
    assert (gcn.hidden, gcn.lr, gcn.decay_layers, gcn.options()) == (
        16,
        0.01,
        "first",
        {"jk": "none"},
    )
    assert (gat.hidden, gat.lr, gat.dropout, gat.monitor) == (8, 0.005, 0.6, "val_loss")
    assert gat.options() == {"heads": 8, "value_dropout": 0.0}
    _, (_, gcn) = sweep_points(Experiment(model="gat"), {"model": ["gat", "gcn"]})
    assert gcn.options() == {"jk": "none"} and gcn.epochs == 200
    # A setting of the base's own stays; a sampled model's hops go with it.
    _, (gcn, gat) = sweep_points(Experiment(hidden=32, lr=0.02), {"model": ["gcn", "gat"]})
    assert (gat.hidden, gat.lr, gat.dropout) == (32, 0.02, 0.6)
    _, (_, gcn) = sweep_points(Experiment(model="sage"), {"model": ["sage", "gcn"]})
    assert (gcn.fanouts, gcn.layers) == (None, 2)


def test_an_option_set_for_the_base_model_only_is_refused_for_the_swept_one():
    with pytest.raises(ValueError, match="heads=4 applies to gat, gatv2, not gcn"):
        sweep_points(Experiment(model="gat", model_options={"heads": 4}), {"model": ["gat", "gcn"]})


def test_a_homogeneous_checkpoints_num_bases_is_dropped_as_it_did_nothing():
    settings = {"model": "rgcn", "model_options": [["num_bases", 4]]}
    assert Experiment(**without_inapplicable(settings)).options() == {"num_bases": 0}
    with pytest.raises(ValueError, match=r"num_bases=4 \(--num-bases\) applies only"):
        Experiment(**settings)


def test_num_bases_above_the_relations_of_a_read_graph_is_refused_when_built():
    # A dataset folder's relations are known only once read: the builder bounds it.
    from sparsegcn.nn.rgcn import rgcn

    types = {"a": 3, "b": 2}
    relations = [("a", "to", "b"), ("b", "rev_to", "a")]
    rgcn(types, relations, {"a": 4}, 2, target="b", num_bases=2)
    with pytest.raises(ValueError, match=r"at most the number of relations, 2 here .* got 3"):
        rgcn(types, relations, {"a": 4}, 2, target="b", num_bases=3)


# -- monitor and decay_layers where a task's own trainer decides them ----------

LINK = dict(task="link", model="gae")
MAG = dict(dataset="synthetic:mag", model="rgcn")


@pytest.mark.parametrize("settings", [GIN, LINK, MAG], ids=["graph", "link", "hetero"])
@pytest.mark.parametrize("monitor", ["val_acc", "val_loss"])
def test_an_explicit_monitor_is_refused_where_no_node_trainer_selects(settings, monitor):
    # Before: monitor='val_acc' equalled the value these tasks filled in, and passed unseen.
    with pytest.raises(ValueError, match=rf"monitor='{monitor}' \(--monitor\)"):
        Experiment(**settings, monitor=monitor)


def test_monitor_is_unset_where_no_node_trainer_selects_and_checkpoints_still_load():
    from sparsegcn.experiment.lifecycle import experiment_from_checkpoint

    assert [Experiment(**s).monitor for s in (GIN, LINK, MAG)] == [None, None, None]
    assert (Experiment().monitor, Experiment(model="gat").monitor) == ("val_acc", "val_loss")
    assert Experiment(**MAG).train_config().monitor == "val_acc"  # read by nothing there
    _, points = sweep_points(Experiment(**GIN), {"lr": [0.01, 0.02]})
    assert [p.monitor for p in points] == [None, None]
    for settings in (GIN, LINK, MAG):  # written when these runs recorded "val_acc"
        config = {**dataclasses.asdict(Experiment(**settings)), "monitor": "val_acc"}
        assert experiment_from_checkpoint({"metadata": {"config": config}}).monitor is None


def test_a_graph_run_records_the_decay_graph_training_applies():
    # fit_graphs decays every parameter by weight_decay; before, "none" was recorded always.
    assert Experiment(**GIN).decay_layers == "none"  # Xu et al.: no weight decay
    assert Experiment(**GIN, weight_decay=1e-3).decay_layers == "all"
    _, points = sweep_points(Experiment(**GIN), {"weight_decay": [1e-3, 0.0, 2e-3]})
    assert [p.decay_layers for p in points] == ["all", "none", "all"]
    config = {**dataclasses.asdict(Experiment(**GIN)), "weight_decay": 1e-3}
    assert Experiment(**without_inapplicable(config)).decay_layers == "all"
    with pytest.raises(ValueError, match=r"decay_layers='first' \(--decay-layers\) applies only"):
        Experiment(**GIN, weight_decay=1e-3, decay_layers="first")
    with pytest.raises(ValueError, match=r"decay_layers='none' \(--decay-layers\) applies only"):
        Experiment(**GIN, weight_decay=1e-3, decay_layers="none")
    assert Experiment(dataset="synthetic:mag", model="rgcn", weight_decay=1e-3).decay_layers == (
        "none"  # the hetero trainer reads --decay-layers: its default stands
    )

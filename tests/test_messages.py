"""Names mean one thing, options that do not apply are refused, every fault is one
line naming the file and the cause, and outputs are valid JSON (issue 26, classes
6 to 9). Every case fails before JAX compiles anything."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import sys
import traceback
from pathlib import Path

import jax
import numpy as np
import pytest

import sparsegcn as sg
from sparsegcn import xla_tuning
from sparsegcn.cli import main
from sparsegcn.datasets import convert, load
from sparsegcn.datasets.download import download_file
from sparsegcn.datasets.ondisk import MANIFEST, FormatError
from sparsegcn.experiment import Experiment
from sparsegcn.files import write_json_atomic
from sparsegcn.nn.registry import MODELS
from sparsegcn.train import TrainConfig


def new(module: str, name: str):
    """``module.name``, imported in the test (names added with the fixes)."""
    return getattr(importlib.import_module(module), name)


def one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return lines[0]


# -- 6. names mean one thing ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("cora", False),
        ("ogbn-arxiv", False),
        ("synthetic:tiny", False),
        ("synthetic:a/b", False),
        ("tu:MUTAG", False),
        ("tu:a/b", False),
        ("mydata", False),
        ("./cora", True),
        ("../cora", True),
        (".cora", True),
        ("data/cora", True),
        ("/tmp/cora", True),
        ("~/cora", True),
        ("~", True),
    ],
)
def test_a_path_looks_like_one(name, path):
    assert new("sparsegcn.datasets", "is_path")(name) is path


def test_data_location_follows_the_same_names(tmp_path, monkeypatch):
    # What a run may not overwrite is what load reads: "cora" is under the root
    # even beside a ./cora folder; tu: and synthetic: names are never paths.
    from sparsegcn.datasets import data_location

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cora").mkdir()
    (tmp_path / "cora" / MANIFEST).write_text("{}")
    root = tmp_path / "root"
    assert data_location("cora", root) == root / "planetoid"
    assert data_location("./cora", root) == Path("./cora")
    assert data_location("tu:MUTAG", root) == root / "tu" / "MUTAG"
    assert data_location("synthetic:tiny", root) == root / "synthetic"
    # Every name a task reads from the root has a place there (ogbn-mag's was missing,
    # so a report could be written over its raw files).
    from sparsegcn.datasets import names
    from sparsegcn.datasets.mag import mag_folder
    from sparsegcn.tasks import TASKS

    listed = [d for task in TASKS.values() for d in task.datasets if not d.endswith((":", "-"))]
    for name in [*names(), *listed, "ogbl-collab", "ogbg-molhiv", "tu:MUTAG"]:
        assert data_location(name, root) is not None, name
    assert data_location("ogbn-mag", root) == mag_folder("ogbn-mag", root) == root / "ogbn_mag"
    assert data_location("ogbn-proteins", root) == root / "ogbn_proteins"
    assert data_location("no-such-dataset", root) is None


def test_a_registered_name_is_not_shadowed_by_a_folder(tmp_path, monkeypatch):
    # A ./cora folder holding a manifest: "cora" is still the Planetoid dataset
    # (missing here, and not downloaded), and "./cora" is the folder.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cora").mkdir()
    (tmp_path / "cora" / MANIFEST).write_text("{}")
    root = tmp_path / "root"
    with pytest.raises(FileNotFoundError, match=r"ind\.cora"):
        load("cora", root, download=False)
    with pytest.raises(FormatError, match=r"manifest\.json"):
        load("./cora")
    with pytest.raises(FormatError, match=r"manifest\.json"):
        load(Path("cora"))  # a path object is a folder


def test_an_unregistered_bare_name_is_not_read_as_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mydata").mkdir()
    (tmp_path / "mydata" / MANIFEST).write_text("{}")
    with pytest.raises(ValueError, match=r"unknown dataset 'mydata'.*write \./mydata"):
        load("mydata")


@pytest.mark.parametrize(
    ("value", "on"),
    [
        *[("1", True), ("TRUE", True), (" yes ", True), ("on", True)],
        *[("0", False), ("false", False), ("No", False), ("off", False), ("", False)],
    ],
)
def test_switches_parse_strictly(value, on):
    assert new("sparsegcn._env", "parse_switch")("SPARSEGCN_DEBUG", value) is on


@pytest.mark.parametrize("value", ["maybe", "2", "enable", "-1", "y"])
def test_a_switch_that_is_neither_on_nor_off_is_refused(value):
    with pytest.raises(ValueError, match=f"SPARSEGCN_DEBUG={value!r} is not a switch"):
        new("sparsegcn._env", "parse_switch")("SPARSEGCN_DEBUG", value)


def test_debug_no_means_off_and_a_bad_switch_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("SPARSEGCN_DEBUG", "no")
    assert main(["train", "--hidden", "0"]) == 2  # no traceback: debugging is off
    assert "hidden must be >= 1" in one_error_line(capsys)
    for name in ("SPARSEGCN_DEBUG", "SPARSEGCN_XLA_TUNING", "SPARSEGCN_KEEP_FREED_MEMORY"):
        monkeypatch.setenv("SPARSEGCN_DEBUG", "0")
        monkeypatch.setenv(name, "maybe")
        assert main(["train", "--hidden", "0"]) == 2
        assert f"{name}='maybe' is not a switch" in one_error_line(capsys)
        monkeypatch.delenv(name)


# -- 7. options that do not apply are refused ----------------------------------

# A value other than the default for every row of APPLIES, and a run it does not apply to.
NOT_APPLYING = {
    # options the graph, hetero and link trainers do not read (node classification only)
    "backend": ({"dataset": "tu:MUTAG", "model": "gin"}, "dense"),
    "normalize_features": ({"dataset": "tu:MUTAG", "model": "gin"}, "row"),
    "edge_features": ({"dataset": "tu:MUTAG", "model": "gin"}, False),
    "monitor": ({"dataset": "synthetic:mag", "model": "rgcn"}, "val_loss"),
    "decay_layers": ({"dataset": "tu:MUTAG", "model": "gin"}, "all"),
    "fanouts": ({"model": "gcn"}, "10,5"),
    "batch_size": ({"model": "gcn"}, 7),
    "sampler": ({"model": "gcn"}, "dedup"),
    "dedup_caps": ({"model": "sage"}, "30,60"),
    "features_on": ({"model": "gcn"}, "host"),
    "graph_on": ({"model": "gcn"}, "host"),
    "max_batches": ({"model": "sage", "fanouts": "none"}, 3),
    "residual": ({"model": "gat"}, True),
    "feature_cache": ({"model": "gcn"}, "cache"),
    "checkpoint_every": ({}, 10),
    "keep": ({}, 5),
    "overwrite": ({}, True),
    "divergence_epochs": ({"divergence_factor": 0.0}, 3),
    "root": ({"dataset": "./folder"}, "data"),
    "scale": ({"dataset": "cora"}, 0.5),
    # the graph task's own fields (sparsegcn.tasks.TASKS["graph"].fields), on a node dataset
    "folds": ({"dataset": "cora"}, 3),
    "readout": ({"dataset": "cora"}, "mean"),
    "learn_eps": ({"dataset": "cora"}, True),
    "virtual_node": ({"dataset": "cora"}, True),
    "degree_features": ({"dataset": "cora"}, True),
    "packing": ({"dataset": "cora"}, "random"),
    # the link task's own field, on a node run
    "use_valid_edges": ({"dataset": "cora"}, True),
}


def test_every_row_of_the_table_has_a_case():
    assert set(NOT_APPLYING) == set(new("sparsegcn.experiment.config", "APPLIES"))


@pytest.mark.parametrize("name", sorted(NOT_APPLYING))
def test_an_option_that_does_not_apply_is_refused(name):
    settings, value = NOT_APPLYING[name]
    with pytest.raises(
        ValueError, match=rf"^{name}=.* \(--{name.replace('_', '-')}\) applies only"
    ):
        Experiment(**settings, **{name: value})


def test_options_that_apply_are_accepted():
    assert Experiment(model="sage", batch_size=7, sampler="dedup", dedup_caps="30,60").batch_size
    assert Experiment(model="gcn", fanouts="none").fanouts == "none"
    assert Experiment(model="gcn", features_on="auto", checkpoint="ck", keep=5).keep == 5
    assert Experiment(model="sage", graph_on="device").graph_on == "device"
    assert Experiment(dataset="synthetic:tiny", scale=0.5).scale == 0.5
    graph = Experiment(
        dataset="tu:MUTAG", model="gin", folds=3, readout="mean", learn_eps=True,
        virtual_node=True, batch_size=16, degree_features=True,
    )  # fmt: skip
    assert (graph.folds, graph.readout, graph.batch_size) == (3, "mean", 16)
    assert Experiment(dataset="tu:MUTAG", model="gin").batch_size == 32  # the task's default


def test_checkpoints_recording_settings_that_had_no_effect_still_load():
    import dataclasses

    from sparsegcn.experiment.lifecycle import experiment_from_checkpoint

    config = {**dataclasses.asdict(Experiment()), "batch_size": 7, "sampler": "dedup"}
    exp = experiment_from_checkpoint({"metadata": {"config": config}})
    assert (exp.model, exp.batch_size, exp.sampler) == ("gcn", 512, "tree")
    config = {**dataclasses.asdict(Experiment(dataset="cora")), "root": "data"}
    assert (
        experiment_from_checkpoint({"metadata": {"config": config}}, dataset="./copy").root is None
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--batch-size", "512"],  # the default, given explicitly, is still refused
        ["--batch-size", "7"],
        ["--sampler", "dedup"],
        ["--sampler", "tree"],
        ["--keep", "3"],
        ["--model", "sage", "--fanouts", "none", "--batch", "64"],  # an abbreviation
        ["--no-overwrite"],
    ],
)
def test_the_command_line_refuses_a_flag_that_does_not_apply(argv, capsys):
    assert main(["train", "--dataset", "./missing", *argv]) == 2
    assert "applies only to" in one_error_line(capsys)


def test_dataset_options_apply_to_their_datasets_only(tmp_path):
    for kwargs, words in [
        ({"scale": 0.5}, "scale=0.5 applies only to generated datasets"),
        ({"seed": 3}, "seed=3 applies only to generated datasets"),
        ({"verify": True}, "verify=True applies only to on-disk dataset folders"),
    ]:
        with pytest.raises(ValueError, match=words):
            load("cora", tmp_path, download=False, **kwargs)
    with pytest.raises(ValueError, match=r"root=.* applies only to datasets named by name"):
        load(str(tmp_path / "folder"), tmp_path)


# -- 8. every fault is one line naming the file --------------------------------


def _gzip_bytes(text: str) -> bytes:
    return gzip.compress(text.encode())


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda good: good[: len(good) // 2], "truncated"),
        (lambda good: good[:10] + b"\xff" * 40 + good[50:], "corrupt compressed data"),
        (lambda good: b"0,1\n1,2\n", "not a gzip file"),
        (lambda good: gzip.compress(b"a,b\nc,d\n"), "malformed CSV"),
    ],
)
def test_convert_names_a_bad_gzip_file(tmp_path, capsys, damage, words):
    raw = tmp_path / "root" / "ogbn_arxiv" / "raw"
    raw.mkdir(parents=True)
    raw.joinpath("num-node-list.csv.gz").write_bytes(_gzip_bytes("3\n"))
    raw.joinpath("num-edge-list.csv.gz").write_bytes(_gzip_bytes("200\n"))
    good = _gzip_bytes("".join(f"{i % 3},{(i + 1) % 3}\n" for i in range(200)))
    raw.joinpath("edge.csv.gz").write_bytes(damage(good))
    split = raw.parent / "split" / "time"  # read (and checked) before the edges
    split.mkdir(parents=True)
    for node, name in enumerate(("train", "valid", "test")):
        split.joinpath(f"{name}.csv.gz").write_bytes(_gzip_bytes(f"{node}\n"))
    argv = ["ogbn-arxiv", "--root", str(tmp_path / "root"), "--out", str(tmp_path / "out")]
    assert convert.main([*argv, "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("python -m sparsegcn.datasets.convert: error: ")
    assert str(raw / "edge.csv.gz") in line and words in line, line


def test_convert_names_a_data_npz_that_is_not_a_zip(tmp_path, capsys):
    raw = tmp_path / "ogbn_papers100M" / "raw"
    raw.mkdir(parents=True)
    raw.joinpath("data.npz").write_text("not a zip archive")
    argv = ["ogbn-papers100M", "--root", str(tmp_path), "--out", str(tmp_path / "out")]
    assert convert.main([*argv, "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert str(raw / "data.npz") in line and "not a zip archive" in line, line


def test_reading_passes_other_errors_through(tmp_path):
    reading = new("sparsegcn.files", "reading")
    with pytest.raises(KeyError), reading(tmp_path / "x"):
        raise KeyError("k")
    with pytest.raises(ValueError, match=r"x: truncated: .*EOFError"), reading(tmp_path / "x"):
        raise EOFError("Compressed file ended")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"not": "an array"}', 'not a NumPy .npy file (it starts with b\'{"not"'),
        (b"1 2 3\n", "not a NumPy .npy file"),
        (b"", "not a NumPy .npy file (it is empty)"),
    ],
)
def test_a_file_in_place_of_an_npy_is_named_as_such(tmp_path, content, words):
    path = tmp_path / "features.npy"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        new("sparsegcn.files", "load_npy")(path, mmap_mode="r")
    assert str(path) in str(info.value) and words in str(info.value)
    assert "pickle" not in str(info.value)


def test_an_ondisk_dataset_with_json_for_features_says_so(tmp_path):
    graph = sg.Graph(np.array([0, 1]), np.array([1, 0]), None, 3)
    dataset = sg.datasets.Dataset(
        "tiny",
        graph,
        np.ones((3, 2), np.float32),
        np.array([0, 1, 0]),
        {"train": np.array([0]), "valid": np.array([1]), "test": np.array([2])},
        num_classes=2,
    )
    folder = sg.datasets.save(dataset, tmp_path / "ds")
    (folder / "features.npy").write_text('{"a": 1}')
    with pytest.raises(FormatError, match=r"features.npy: features: not a NumPy .npy file"):
        load(str(folder))


def test_download_errors_name_the_destination_not_the_temporary_file(tmp_path, monkeypatch):
    from sparsegcn.files import temp_file_path

    monkeypatch.setattr("secrets.token_hex", lambda n: "abcd")
    temp_file_path(tmp_path, "ind.cora.y").mkdir()  # opening the temporary file fails
    with pytest.raises(OSError) as info:
        download_file("http://127.0.0.1:9/x", tmp_path / "ind.cora.y", sha256=None)
    assert f"cannot write {tmp_path / 'ind.cora.y'}" in str(info.value)
    assert ".part" not in str(info.value)


def test_fit_refuses_what_is_not_node_data_naming_it():
    model = MODELS["gcn"].build(5, 3, hidden=4, num_layers=2, dropout_rate=0.0)
    with pytest.raises(TypeError, match=r"fit: data must be a NodeData .* got dict \{'x': 1\}"):
        sg.fit(model, {"x": 1})
    with pytest.raises(TypeError, match=r"fit: model must be a sparsegcn Model .*got int 3"):
        sg.fit(3, {"x": 1})


def test_labels_and_masks_need_one_bool_row_per_node():
    # Before: masks of length 1 broadcast (test accuracy 2.0), and an int mask [0, 0, 3, 1]
    # weighted its third node three times.
    model = MODELS["gcn"].build(4, 2, hidden=4, num_layers=2, dropout_rate=0.0)
    graph = sg.Graph(np.array([0, 1, 2, 3]), np.array([1, 0, 3, 2]), None, 4)
    x, labels, mask = np.eye(4, dtype=np.float32), np.array([0, 1, 0, 1]), np.ones(4, bool)
    one = np.array([True])
    with pytest.raises(ValueError, match=r"fit: data.labels has shape \(1,\) but data.graph"):
        sg.fit(model, sg.NodeData(graph, x, np.array([1]), one, one, one))
    with pytest.raises(ValueError, match=r"fit: data.val_mask has shape \(1,\) .* 4 nodes"):
        sg.fit(model, sg.NodeData(graph, x, labels, mask, one, mask))
    weights = np.array([0, 0, 3, 1])
    with pytest.raises(TypeError, match=r"fit: data.train_mask has dtype int64; masks must be"):
        sg.fit(model, sg.NodeData(graph, x, labels, weights, mask, mask))


def test_labels_beyond_the_models_classes_are_refused_naming_both():
    model = MODELS["gcn"].build(5, 3, hidden=4, num_layers=2, dropout_rate=0.0)
    graph = sg.Graph(np.array([0, 1]), np.array([1, 0]), None, 4)
    train = np.array([True, True, True, False])
    data = sg.NodeData(
        graph, np.ones((4, 5), np.float32), np.array([0, 1, 6, 2]), train, ~train, ~train
    )
    with pytest.raises(ValueError, match=r"label 6 .* outside \[0, 3\) .* num_classes=3"):
        sg.fit(model, data)


def test_a_closed_stderr_is_replaced_and_the_status_still_tells(monkeypatch):
    monkeypatch.setattr(sys, "stderr", None)
    assert main(["train", "--hidden", "0"]) == 2
    replaced = sys.stderr
    assert replaced is not None and replaced.name == os.devnull
    replaced.close()


def _failure_in_xla_bridge(error: str) -> BaseException:
    code = compile(f"raise {error}", "/site-packages/jax/_src/xla_bridge.py", "exec")
    try:
        exec(code)
    except BaseException as err:
        return err
    raise AssertionError("unreachable")


def test_a_platform_that_cannot_start_is_named(monkeypatch):
    from jax._src import xla_bridge

    monkeypatch.setattr(xla_bridge, "_default_backend", None)
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    backend_failure = new("sparsegcn.cli", "backend_failure")
    explained = backend_failure(_failure_in_xla_bridge("AssertionError()"))
    assert isinstance(explained, OSError)
    assert "JAX could not initialise JAX_PLATFORMS='cuda': no NVIDIA GPU is visible" in str(
        explained
    )
    assert backend_failure(KeyError("x")) is None
    try:
        raise AssertionError("ours")
    except AssertionError as err:
        assert backend_failure(err) is None, traceback.format_exc()


# -- 9. outputs are valid and shareable ----------------------------------------


def _strict(text: str):
    def refuse(word):
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def test_json_outputs_write_non_finite_numbers_as_null(tmp_path):
    payload = {"homophily": float("nan"), "x": [np.float32("inf"), 1.5, np.int64(3)], "ok": True}
    write_json_atomic(tmp_path / "out.json", payload)
    assert _strict((tmp_path / "out.json").read_text()) == {
        "homophily": None,
        "x": [None, 1.5, 3],
        "ok": True,
    }


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--lr", "1e300"], "lr = 1e+300 is not representable in float32"),
        (["--lr", "1e-60"], "lr = 1e-60 is not representable in float32"),
        (["--weight-decay", "1e39"], "weight_decay = 1e+39 is not representable"),
        (["--clip-norm", "1e300"], "clip_norm = 1e+300 is not representable"),
    ],
)
def test_float_settings_must_be_representable_in_float32(argv, words, capsys):
    assert main(["train", "--dataset", "./missing", *argv]) == 2
    assert words in one_error_line(capsys)


def test_the_python_api_shares_the_representability_check():
    with pytest.raises(ValueError, match="not representable in float32"):
        TrainConfig(learning_rate=1e300)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ("garbage", "XLA_FLAGS='garbage' is neither flags"),
        ("--xla_cpu_use_thunk_runtime=true junk", "'junk' is not a flag"),
    ],
)
def test_malformed_xla_flags_are_one_line_naming_xla_flags(monkeypatch, capsys, flags, words):
    monkeypatch.setenv("XLA_FLAGS", flags)
    assert main(["train", "--hidden", "0"]) == 2
    assert words in one_error_line(capsys)
    assert not xla_tuning.tune_xla_flags()
    assert "left as it is" in xla_tuning.status()["reason"]
    assert xla_tuning.FLAG not in os.environ["XLA_FLAGS"]


def test_well_formed_xla_flags_pass(monkeypatch, tmp_path):
    for flags in ("", "  --xla_a=1 --xla_b", "--xla_force_host_platform_device_count=8"):
        assert new("sparsegcn.xla_tuning", "xla_flags_problem")(flags) is None
    (tmp_path / "flags").write_text("--xla_a=1\n")
    assert new("sparsegcn.xla_tuning", "xla_flags_problem")(str(tmp_path / "flags")) is None


def test_predict_compiles_once_for_repeated_calls():
    # Before: jax.jit of a new closure on every call traced and compiled it again.
    model = MODELS["gcn"].build(4, 2, hidden=4, num_layers=2, dropout_rate=0.0)
    graph = sg.gcn_norm(sg.Graph(np.array([0, 1, 2, 3]), np.array([1, 0, 3, 2]), None, 4))
    mask = np.ones(4, bool)
    data = sg.NodeData(graph, np.eye(4, dtype=np.float32), np.array([0, 1, 0, 1]), mask, mask, mask)
    traces = []
    counted = model._replace(apply=lambda *a, **k: traces.append(1) or model.apply(*a, **k))
    params = jax.vmap(model.init)(jax.random.split(jax.random.key(0), 2))
    first = sg.predict(counted, params, data)
    for _ in range(3):
        again = sg.predict(counted, params, data)
    assert len(traces) == 1
    np.testing.assert_array_equal(first[0], again[0])
    assert first[0].shape == (2, 4) and first[1].shape[:2] == (2, 4)


@pytest.mark.parametrize("builder", ["gcn", "sage", "gat", "gatv2", "gin", "mlp", "appnp", "gcnii"])
def test_builders_called_directly_refuse_bad_widths(builder):
    # Before: gcn(-1, 2) failed in init ("invalid tensor dimension size"), gcn(4, 0) gave
    # [N, 0] logits and gat(4, 0) raised ZeroDivisionError; create_model refused them.
    build = getattr(sg, builder, None) or MODELS[builder].build
    with pytest.raises(ValueError, match=r"in_features must be >= 1, got -1"):
        build(-1, 2)
    with pytest.raises(ValueError, match=r"num_classes must be >= 1, got 0"):
        build(4, 0)
    with pytest.raises(TypeError, match=r"num_classes must be an integer >= 1, got 2.5"):
        build(4, 2.5)


def _tiny_node_data(labels=None, features=None):
    graph = sg.gcn_norm(sg.Graph(np.array([0, 1, 2, 3]), np.array([1, 0, 3, 2]), None, 4))
    mask = np.ones(4, bool)
    labels = np.array([0, 1, 0, 1]) if labels is None else labels
    features = np.eye(4, dtype=np.float32) if features is None else features
    return sg.NodeData(graph, features, labels, mask, mask, mask)


@pytest.mark.parametrize("model", ["gcn", "sage", "gat", "gin", "mlp", "appnp", "gcnii", "jk"])
@pytest.mark.parametrize("width", [3, 8])
def test_features_of_another_width_than_the_model_are_named(model, width):
    # Before: "dot_general requires contracting dimensions to have the same shape" from XLA
    # (gcn, sage, jk), from apply as from fit; width 8 equals the hidden width, which gcn's
    # "already projected?" test by width could mistake for x W.
    built = sg.create_model(model, in_features=5, num_classes=2, hidden=8, layers=2, dropout=0.5)
    x = np.ones((4, width), np.float32)
    data = _tiny_node_data(features=x)
    with pytest.raises(ValueError, match=rf"features of shape \(4, {width}\) meet a weight of "):
        built.apply(built.init(jax.random.key(0)), data.graph, x)
    with pytest.raises(
        ValueError, match=rf"fit: data.features has {width} columns .*in_features=5"
    ):
        sg.fit(built, data, TrainConfig(epochs=1))


def test_fit_refuses_float_labels_and_a_dict_config():
    model = sg.gcn(4, 2)
    with pytest.raises(TypeError, match=r"fit: data.labels has dtype float64; labels must be"):
        sg.fit(model, _tiny_node_data(labels=np.array([0.0, 1.0, 0.0, 1.0])))
    with pytest.raises(TypeError, match=r"build one with TrainConfig\(\*\*config\)"):
        sg.fit(model, _tiny_node_data(), {"epochs": 2})


@pytest.mark.parametrize(
    ("seeds", "error", "words"),
    [
        (("01",), TypeError, r"seeds\[0\] must be an integer .* got '01' \(str\)"),
        ((0, 1.5), TypeError, r"seeds\[1\] must be an integer .* got 1.5 \(float\)"),
        ((True,), TypeError, r"seeds\[0\] must be an integer"),
        ((-1,), ValueError, r"seeds\[0\] must be >= 0 and <= 4294967295, got -1"),
        ((2**32,), ValueError, r"seeds\[0\] must be >= 0 and <= 4294967295, got 4294967296"),
        (3, TypeError, r"seeds must be a sequence of integers, e.g. \(0, 1, 2\), got 3"),
        ("012", TypeError, r"seeds must be a sequence of integers"),
    ],
)
def test_seeds_are_refused_not_coerced(seeds, error, words):
    # Before: int() coerced "01" to 1 and 1.5 to 1; key(2**32) is key(0), key(-1) key(2**32-1).
    with pytest.raises(error, match=rf"^fit: {words}"):
        sg.fit(sg.gcn(4, 2), _tiny_node_data(), TrainConfig(epochs=1), seeds=seeds)


def test_numpy_integer_seeds_are_seeds():
    result = sg.fit(sg.gcn(4, 2), _tiny_node_data(), TrainConfig(epochs=1), seeds=np.arange(2))
    assert result.seeds == (0, 1)


@pytest.mark.parametrize(
    "call",
    [
        lambda g: sg.gcn_norm(g, self_loops="no"),
        lambda g: sg.degree(g, weighted="no"),
        lambda g: sg.gcn(4, 2, residual="no"),
        lambda g: sg.sage(4, 2, normalize=1),
        lambda g: sg.create_model("gcn", 4, 2, hidden=4, layers=2, dropout=0.0, residual="no"),
    ],
)
def test_flags_must_be_bools(call):
    # Before: a string was truthy, so self_loops="no" added self loops.
    graph = sg.Graph(np.array([0, 1]), np.array([1, 0]), None, 3)
    with pytest.raises(TypeError, match=r"must be True or False, got"):
        call(graph)


def test_hetero_weights_must_be_real():
    # Before: complex weights lost their imaginary part with a ComplexWarning.
    with pytest.raises(
        ValueError, match=r"relation .* weights must be real numbers, got dtype complex"
    ):
        sg.HeteroGraph(
            {"a": 2, "b": 2},
            {("a", "to", "b"): (np.array([0, 1]), np.array([1, 0]), np.array([1 + 2j, 1]))},
        )


@pytest.mark.parametrize("layout", ["csr", "ell"])
def test_packed_products_refuse_a_scalar_weight_as_the_others_do(layout):
    # Before: IndexError "tuple index out of range" from the packed product.
    view = sg.as_layout(sg.Graph(np.array([0, 1]), np.array([1, 0]), None, 3), layout)
    with pytest.raises(
        ValueError, match=r"edge_weight must have shape \(2,\) or \(2, H\), got \(\)"
    ):
        view.product(np.ones((3, 2), np.float32), 2.0)


def test_bipartite_row_counts_name_its_sides():
    from sparsegcn.views import Bipartite

    view = Bipartite(np.array([0, 1], np.int32), np.array([0, 0], np.int32), num_src=3, num_dst=1)
    with pytest.raises(ValueError, match=r"x_src has 2 rows but the graph has num_src=3"):
        view.product(np.ones((2, 4), np.float32))

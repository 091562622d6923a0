"""SGC's ``Â^K X`` computed once before training and cached (sparsegcn/experiment/precompute.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
import pytest

import sparsegcn as sg
from sparsegcn.cli import main
from sparsegcn.datasets import load
from sparsegcn.experiment import Experiment, node_data, precompute
from sparsegcn.experiment.build import build_model
from sparsegcn.features import normalize
from sparsegcn.nn import sgc


@pytest.fixture(scope="module")
def dataset():
    return load("synthetic:tiny", scale=0.1)


@pytest.fixture
def propagations(monkeypatch):
    """Counts the propagations ``precompute`` runs (the cache's misses)."""
    calls = []
    real = precompute.sgc_features

    def counting(graph, x, hops=2):
        calls.append(hops)
        return real(graph, x, hops=hops)

    monkeypatch.setattr(precompute, "sgc_features", counting)
    return calls


def oracle(dataset, hops, mode="auto"):
    """``Â^K X`` with a dense ``Â`` and numpy matrix powers."""
    a_hat = np.asarray(sg.gcn_norm(dataset.graph).to_dense(), np.float64)
    x = normalize(dataset.features, mode)
    x = x.toarray() if hasattr(x, "toarray") else np.asarray(x)
    return np.linalg.matrix_power(a_hat, hops) @ x


def features_of(dataset, cache, **kwargs):
    return np.asarray(node_data(dataset, "sgc", feature_cache=cache, **kwargs).features)


def members(path) -> dict:
    """Every member of a cache file, read back with numpy (the independent reader)."""
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def test_a_hit_skips_the_propagation_and_every_input_change_misses(dataset, propagations, tmp_path):
    cache = tmp_path / "cache"
    first = features_of(dataset, cache)
    assert propagations == [2]
    np.testing.assert_allclose(first, oracle(dataset, 2), rtol=1e-5, atol=1e-6)
    again = features_of(dataset, cache)
    assert propagations == [2], "a cache hit must not propagate"
    np.testing.assert_array_equal(again, first)

    three = features_of(dataset, cache, options={"hops": 3})
    assert propagations == [2, 3]
    np.testing.assert_allclose(three, oracle(dataset, 3), rtol=1e-5, atol=1e-6)

    # One edge re-targeted: same name, sizes, labels and split, another graph.
    g = dataset.graph
    receivers = np.array(g.receivers)
    receivers[0] = (receivers[0] + 1) % g.num_nodes
    moved = dataclasses.replace(
        dataset, graph=sg.Graph(g.senders, receivers, g.weights, g.num_nodes)
    )
    before, after = (precompute.dataset_fingerprint(d) for d in (dataset, moved))
    assert before["graph_sha256"] != after["graph_sha256"]
    assert {k: v for k, v in before.items() if k != "graph_sha256"} == {
        k: v for k, v in after.items() if k != "graph_sha256"
    }
    np.testing.assert_allclose(features_of(moved, cache), oracle(moved, 2), rtol=1e-5, atol=1e-6)
    assert propagations == [2, 3, 2]

    features_of(dataset, cache, normalize_features="none")
    assert propagations == [2, 3, 2, 2]
    names = sorted(p.name for p in cache.iterdir())
    assert len(names) == 4 and all(n.startswith("sgc-") and n.endswith(".npz") for n in names)
    for name in names:  # plain float32 arrays, readable without pickle; no temporary left
        with np.load(cache / name, allow_pickle=False) as npz:
            assert npz["features"].dtype == np.float32 and f"sgc-{npz['key']}.npz" == name

    features_of(dataset, None)  # no cache folder: always computed
    assert propagations == [2, 3, 2, 2, 2]


def test_unreadable_or_pickled_files_are_misses_and_are_rewritten(dataset, propagations, tmp_path):
    cache = tmp_path / "cache"
    want = features_of(dataset, cache)
    (path,) = cache.iterdir()

    def replace(**arrays):
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    with open(path, "wb") as f:
        np.save(f, np.array([{"not": "features"}], dtype=object), allow_pickle=True)
    np.testing.assert_array_equal(features_of(dataset, cache), want)  # never unpickled
    assert propagations == [2, 2]
    path.write_bytes(path.read_bytes()[:100])  # truncated
    np.testing.assert_array_equal(features_of(dataset, cache), want)
    stored = members(path)
    replace(**dict(stored, features=np.zeros((3, 3), np.float32)))  # another shape
    np.testing.assert_array_equal(features_of(dataset, cache), want)
    assert propagations == [2, 2, 2, 2]
    with np.load(path, allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["features"], want)


def test_a_cache_whose_contents_changed_is_recomputed(dataset, propagations, tmp_path):
    """Same shape, same key, other contents (overwritten with zeros): a miss, not a hit."""
    cache = tmp_path / "cache"
    want = features_of(dataset, cache)
    (path,) = cache.iterdir()
    stored = members(path)
    with open(path, "wb") as f:
        np.savez(f, **dict(stored, features=np.zeros_like(want)))
    np.testing.assert_array_equal(features_of(dataset, cache), want)
    assert propagations == [2, 2]
    with open(path, "wb") as f:  # the features, but filed under another key
        np.savez(f, **dict(stored, key=np.array("0" * 64)))
    np.testing.assert_array_equal(features_of(dataset, cache), want)
    assert propagations == [2, 2, 2]
    with open(path, "wb") as f:  # a bare .npy of zeros, as version 1 wrote (no digest)
        np.save(f, np.zeros_like(want))
    np.testing.assert_array_equal(features_of(dataset, cache), want)
    assert propagations == [2, 2, 2, 2]


def test_the_trained_model_gives_the_in_step_models_logits(dataset):
    exp = Experiment(dataset=dataset.name, model="sgc", model_options=(("hops", 3),))
    model = build_model(exp, dataset)
    assert model.config["precomputed"] and model.config["hops"] == 3
    data = node_data(dataset, "sgc", options=exp.options())
    in_step = sgc(dataset.num_features, dataset.num_classes, hops=3)
    raw = sg.as_features(normalize(dataset.features, "auto"), dataset.num_nodes)
    params = model.init(jax.random.key(0))
    np.testing.assert_allclose(
        model.apply(params, data.graph, data.features),
        in_step.apply(params, sg.gcn_norm(dataset.graph), raw),
        rtol=1e-4,
        atol=1e-5,
    )
    with pytest.raises(ValueError, match="precomputed=True: gcn has no precomputed features"):
        sg.create_model("gcn", 4, 2, hidden=8, layers=2, dropout=0.5, precomputed=True)


def test_cli_training_and_prediction_reuse_the_cache(propagations, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    argv = ["train", "--model", "sgc", "--scale", "0.1", "--epochs", "3", "--no-progress"]
    argv += ["--feature-cache", str(cache), "--checkpoint", str(tmp_path / "ckpt")]
    assert main([*argv, "--json", str(tmp_path / "r.json")]) == 0
    assert propagations == [2]
    out = tmp_path / "p.npy"
    assert main(["predict", "--checkpoint", str(tmp_path / "ckpt"), "--out", str(out)]) == 0
    assert propagations == [2], "predict reads the training run's cache"
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["model"] == "sgc" and len(list(cache.iterdir())) == 1
    # Recorded as a relative path, the cache is elsewhere from another folder: predict
    # then computes the features, and creates no cache the user did not ask for.
    ckpt = tmp_path / "rel"
    monkeypatch.chdir(tmp_path)
    assert main([*argv[:-4], "--feature-cache", "cache", "--checkpoint", str(ckpt)]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["predict", "--checkpoint", str(ckpt), "--out", str(tmp_path / "q.npy")]) == 0
    assert propagations == [2, 2] and list(elsewhere.iterdir()) == []


def test_a_linked_cache_entry_is_refused_and_the_file_it_names_kept(tmp_path, capsys):
    # The miss was written through the link: the user's other/mine.npz was replaced.
    cache, other = tmp_path / "C", tmp_path / "other"
    argv = ["train", "--model", "sgc", "--scale", "0.1", "--epochs", "1", "--no-progress"]
    assert main([*argv, "--feature-cache", str(cache)]) == 0
    (entry,) = cache.iterdir()
    entry.unlink()
    other.mkdir()
    (other / "mine.npz").write_bytes(b"USER DATA")
    entry.symlink_to(Path("..") / "other" / "mine.npz")
    capsys.readouterr()
    assert main([*argv, "--feature-cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"feature cache entry {entry} is a symbolic link to ../other/mine.npz" in err
    assert (other / "mine.npz").read_bytes() == b"USER DATA"
    assert sorted(p.name for p in cache.iterdir()) == [entry.name] and entry.is_symlink()


def test_the_cache_option_is_refused_where_it_does_nothing(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"\(--feature-cache\) applies only to models that precompute their features \(sgc\); "
        r"gcn has none to cache",
    ):
        Experiment(model="gcn", feature_cache=str(tmp_path))
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["train", "--model", "sgc", "--epochs", "1", "--feature-cache", str(blocker / "sub")]
    assert main([*argv, "--no-progress"]) == 2  # refused before any data is read


def test_a_file_declaring_a_huge_shape_or_other_members_is_a_miss(dataset, propagations, tmp_path):
    # A 200-byte cache file declaring 10**13 features ended the run as "out of memory"
    # (exit status 1) instead of counting as a miss.
    import io
    import zipfile

    cache = tmp_path / "cache"
    want = features_of(dataset, cache)
    (path,) = cache.iterdir()
    stored = members(path)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**13,)}
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("features.npy", header.getvalue())
        for name in ("key", "sha256"):
            buffer = io.BytesIO()
            np.save(buffer, stored[name])
            archive.writestr(f"{name}.npy", buffer.getvalue())
    np.testing.assert_array_equal(features_of(dataset, cache), want)
    assert propagations == [2, 2]
    with open(path, "wb") as f:  # the right features, and a stranger beside them
        np.savez(f, **stored, extra=np.zeros(3))
    np.testing.assert_array_equal(features_of(dataset, cache), want)
    assert propagations == [2, 2, 2]
    with np.load(path, allow_pickle=False) as npz:  # rewritten as it should be
        assert sorted(npz.files) == ["features", "key", "sha256"]

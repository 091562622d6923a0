"""The synthetic OGB-like generator (degree-corrected SBM) and its cache.

Graph invariants are checked against scipy's sparse matrices (an independent
implementation of duplicate summing and transposition), split sizes against
the published fractions, and the model's statistics (degree tail, edge
homophily) against the spec, with tolerances justified where they are set.
"""

from __future__ import annotations

import dataclasses
import json
import math
import mmap
import re
import time

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegcn
from sparsegcn.datasets import load, names, sbm
from sparsegcn.datasets import synthetic as synthetic_module
from sparsegcn.datasets.synthetic import (
    MANIFEST,
    PRESETS,
    SyntheticSpec,
    cache_dir,
    estimate_bytes,
    generate,
    load_synthetic,
)
from sparsegcn.train import NodeData, TrainConfig, index_mask

SMALL_SCALES = {"arxiv": 1e-3, "products": 1e-3, "papers100M": 2e-5, "tiny": 1.0}
ARRAYS = ("senders", "receivers", "features", "labels", "train", "valid", "test")


def arrays_of(ds) -> dict:
    return {
        "senders": np.asarray(ds.graph.senders),
        "receivers": np.asarray(ds.graph.receivers),
        "features": np.asarray(ds.features),
        "labels": ds.labels,
        **ds.split,
    }


def assert_same_arrays(a, b):
    left, right = arrays_of(a), arrays_of(b)
    for name in ARRAYS:
        assert left[name].dtype == right[name].dtype, name
        np.testing.assert_array_equal(left[name], right[name], err_msg=name)


def is_memory_mapped(array) -> bool:
    while isinstance(array, np.ndarray):
        if isinstance(array, np.memmap):
            return True
        array = array.base
    return isinstance(array, mmap.mmap)


@pytest.fixture(scope="module")
def small():
    """Each preset at a small scale, generated once with seed 0."""
    return {p: generate(PRESETS[p].scaled(s), seed=0) for p, s in SMALL_SCALES.items()}


# -- exact sizes and a simple symmetric graph ----------------------------------


@pytest.mark.parametrize("preset", list(SMALL_SCALES))
def test_exact_node_and_edge_counts(small, preset):
    base, scale = PRESETS[preset], SMALL_SCALES[preset]
    ds = small[preset]
    assert ds.name == f"synthetic:{preset}"
    assert ds.num_nodes == round(base.num_nodes * scale)
    assert ds.num_edges == round(base.num_edges * scale)
    assert ds.graph.num_edges == 2 * ds.num_edges
    assert ds.num_classes == base.num_classes
    assert ds.features.shape == (ds.num_nodes, base.num_features)
    assert ds.features.dtype == np.float32 and np.isfinite(ds.features).all()
    assert ds.graph.senders.dtype == ds.graph.receivers.dtype == np.int32
    assert ds.info["preset"] == preset and ds.info["scale"] == scale and ds.info["seed"] == 0
    assert ds.info["directed"] is base.directed


@pytest.mark.parametrize("preset", list(SMALL_SCALES))
def test_graph_is_simple_symmetric_and_sorted(small, preset):
    g = small[preset].graph
    n = g.num_nodes
    senders, receivers = np.asarray(g.senders), np.asarray(g.receivers)
    assert g.edges_sorted
    np.testing.assert_array_equal(np.lexsort((senders, receivers)), np.arange(g.num_edges))
    a = sp.coo_array((np.ones(g.num_edges), (receivers, senders)), shape=(n, n)).tocsr()
    a.sum_duplicates()
    assert a.nnz == g.num_edges, "duplicate edges"
    assert a.max() == 1.0
    assert not a.diagonal().any(), "self-loops"
    assert (a != a.T).nnz == 0, "not symmetric"


@pytest.mark.parametrize("preset", list(SMALL_SCALES))
def test_labels_and_splits_follow_the_spec(small, preset):
    ds = small[preset]
    spec = PRESETS[preset].scaled(SMALL_SCALES[preset])
    n = ds.num_nodes
    labelled = ds.labels >= 0
    assert ds.labels.max() < ds.num_classes
    assert labelled.sum() == max(round(spec.labelled_fraction * n), sum(ds.split_sizes.values()))
    sizes = ds.split_sizes
    if spec.train_per_class is None:
        for key in ("train", "valid", "test"):
            assert abs(sizes[key] - getattr(spec, f"{key}_fraction") * n) <= 1, key
    else:
        per_class = np.bincount(ds.labels[ds.split["train"]], minlength=ds.num_classes)
        np.testing.assert_array_equal(per_class, spec.train_per_class)
        assert sizes["valid"] == round(spec.valid_fraction * n)
        assert sizes["test"] == round(spec.test_fraction * n)
    everything = np.concatenate(list(ds.split.values()))
    assert np.unique(everything).size == everything.size, "splits overlap"
    assert labelled[everything].all()
    for idx in ds.split.values():
        assert (np.diff(idx) > 0).all()


def test_papers100m_labels_only_its_split_nodes(small):
    ds = small["papers100M"]
    in_split = np.zeros(ds.num_nodes, bool)
    in_split[np.concatenate(list(ds.split.values()))] = True
    # ogbn-papers100M labels exactly its ~1.4% split nodes; the rest are -1.
    np.testing.assert_array_equal(ds.labels >= 0, in_split)
    assert 0.005 < in_split.mean() < 0.03


def test_tiny_matches_its_description_and_is_fast():
    start = time.perf_counter()
    ds = generate(PRESETS["tiny"])
    elapsed = time.perf_counter() - start
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == (3000, 12000, 64, 7)
    assert ds.split_sizes == {"train": 140, "valid": 500, "test": 1000}
    # Measured ~0.02 s; a generous bound that still fails on an accidental O(N^2).
    assert elapsed < 1.0


def test_progress_bars_go_to_stderr(capsys):
    generate(PRESETS["tiny"], progress=True)
    err = capsys.readouterr().err
    assert "edges" in err and "features" in err


def test_scaled_spec_rounds_nodes_edges_and_splits():
    spec = PRESETS["arxiv"].scaled(0.5)
    assert (spec.num_nodes, spec.num_edges) == (round(169_343 / 2), round(1_166_243 / 2))
    assert spec.num_features == 128 and spec.num_classes == 40 and spec.scale == 0.5
    assert PRESETS["arxiv"].scaled(1.0) is PRESETS["arxiv"]
    assert PRESETS["tiny"].scaled(0.5).train_per_class == 10
    full = PRESETS["arxiv"].split_sizes()
    assert (full["train"], full["valid"], full["test"]) == (90_941, 29_799, 48_603)
    papers = PRESETS["papers100M"].split_sizes()
    assert (papers["train"], papers["valid"], papers["test"]) == (1_207_179, 125_265, 214_338)
    products = PRESETS["products"].split_sizes()
    assert (products["train"], products["valid"], products["test"]) == (
        196_615,
        39_323,
        2_213_091,
    )


def test_published_statistics_of_the_presets():
    expected = {
        "arxiv": (169_343, 1_166_243, True, 128, 40),
        "products": (2_449_029, 61_859_140, False, 100, 47),
        "papers100M": (111_059_956, 1_615_685_872, True, 128, 172),
    }
    for name, stats in expected.items():
        s = PRESETS[name]
        assert (s.num_nodes, s.num_edges, s.directed, s.num_features, s.num_classes) == stats
    assert {f"synthetic:{p}" for p in PRESETS} <= set(names())


# -- determinism ----------------------------------------------------------------


def test_same_seed_gives_identical_arrays_and_another_seed_differs():
    spec = PRESETS["arxiv"].scaled(0.01)
    a, b, c = generate(spec, seed=3), generate(spec, seed=3), generate(spec, seed=4)
    assert_same_arrays(a, b)
    assert not np.array_equal(a.graph.senders, c.graph.senders)
    assert not np.array_equal(a.features, c.features)
    assert not np.array_equal(a.split["train"], c.split["train"])


def test_output_does_not_depend_on_the_chunking(monkeypatch):
    # 0.2 x arxiv: ~153k same-class and ~80k cross-class draws, several
    # 65536-draw blocks in each pool, drawn one block per chunk here.
    spec = PRESETS["arxiv"].scaled(0.2)
    default = generate(spec, seed=1)
    monkeypatch.setattr(sbm, "_CHUNK_BLOCKS", 1)
    assert_same_arrays(generate(spec, seed=1), default)


# -- model statistics -----------------------------------------------------------


def hill_exponent(degrees: np.ndarray, k: int) -> float:
    """Hill's estimate of ``γ`` in ``P(d) ∝ d^{-γ}`` from the ``k`` largest degrees."""
    d = np.sort(degrees)[::-1].astype(np.float64)
    return 1.0 + k / float(np.sum(np.log(d[:k] / d[k])))


@pytest.mark.parametrize("seed", [0, 1])
def test_degrees_are_heavy_tailed_with_the_spec_exponent(seed):
    spec = PRESETS["arxiv"].scaled(0.1)
    ds = generate(spec, seed=seed)
    degrees = np.bincount(ds.graph.receivers, minlength=ds.num_nodes)
    assert degrees.mean() == pytest.approx(2 * spec.num_edges / spec.num_nodes)
    # Without degree correction degrees would be ~Poisson(13.8): a maximum
    # above 20x the mean (276) would then have probability < 1e-200.
    assert degrees.max() > 20 * degrees.mean()
    # Hill's estimator on the top 2% (k = 338) has standard error about
    # (γ - 1) / √k = 0.08; in this model it also reads ~0.2 high (discrete,
    # Poisson-smeared degrees and the cap on θ; measured 2.72 and 2.75 for
    # seeds 0 and 1). ±0.5 leaves ~3 standard errors beyond that bias.
    k = ds.num_nodes // 50
    assert hill_exponent(degrees, k) == pytest.approx(spec.degree_exponent, abs=0.5)


@pytest.mark.parametrize(("preset", "scale"), [("arxiv", 0.05), ("products", 0.005), ("tiny", 1)])
def test_edge_homophily_matches_the_spec(preset, scale):
    spec = PRESETS[preset].scaled(scale)
    ds = generate(spec, seed=2)
    same = ds.labels[ds.graph.senders] == ds.labels[ds.graph.receivers]
    # The generator draws exactly round(h E) same-class pairs (two pools of
    # fixed size, deduplicated and topped up separately), so there is no
    # sampling error at all, only rounding: |same - h| <= 0.5 / E. A bug that
    # mislabels nodes or leaks same-class pairs into the cross-class pool
    # shifts it by far more than that.
    assert abs(same.mean() - spec.homophily) <= 0.5 / spec.num_edges + 1e-12
    assert ds.info["edge_homophily"] == pytest.approx(same.mean())


def test_classes_too_small_for_their_share_cap_the_homophily(small):
    # 169 nodes in 40 classes hold only ~300 same-class pairs: far fewer than
    # the 0.655 * 1166 requested, so the pool stops at a quarter of them.
    ds = small["arxiv"]
    same = ds.labels[ds.graph.senders] == ds.labels[ds.graph.receivers]
    assert same.mean() < 0.2


def tiny_node_data(ds, model: str) -> NodeData:
    n = ds.num_nodes
    graph = sparsegcn.sort_edges(sparsegcn.gcn_norm(ds.graph)) if model == "gcn" else ds.graph
    return NodeData(
        graph=graph,
        features=sparsegcn.as_features(ds.features, n),
        labels=ds.labels.astype(np.int32),
        train_mask=index_mask(ds.split["train"], n),
        val_mask=index_mask(ds.split["valid"], n),
        test_mask=index_mask(ds.split["test"], n),
    )


@pytest.mark.slow
def test_gcn_clearly_beats_an_mlp_on_tiny():
    ds = generate(PRESETS["tiny"], seed=0)
    config = TrainConfig(epochs=200, timing_steps=0)
    gcn = sparsegcn.gcn(ds.num_features, ds.num_classes)
    mlp = sparsegcn.mlp(ds.num_features, ds.num_classes)
    gcn_acc = float(sparsegcn.fit(gcn, tiny_node_data(ds, "gcn"), config).test_acc[0])
    mlp_acc = float(sparsegcn.fit(mlp, tiny_node_data(ds, "mlp"), config).test_acc[0])
    print(f"synthetic:tiny test accuracy: GCN {gcn_acc:.3f}, MLP {mlp_acc:.3f}")
    # Measured over generator seeds 0-3: GCN 0.83-0.86, MLP 0.52-0.54 (chance 0.14).
    assert 0.7 <= gcn_acc <= 0.95, "tiny should be learnable but not trivial"
    assert gcn_acc - mlp_acc >= 0.2
    assert mlp_acc >= 0.3, "features alone should carry signal"


# -- cache ----------------------------------------------------------------------


def test_cache_round_trip_is_memory_mapped_and_equal(tmp_path):
    first = load_synthetic("arxiv", tmp_path, scale=1e-3, seed=5)
    folder = tmp_path / "synthetic" / "arxiv-scale0.001-seed5"
    assert folder == cache_dir(tmp_path, "arxiv", 1e-3, 5)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [MANIFEST, *(f"{k}.npy" for k in ARRAYS)]
    )
    second = load_synthetic("arxiv", tmp_path, scale=1e-3, seed=5)
    assert_same_arrays(first, second)
    for array in arrays_of(second).values():
        assert is_memory_mapped(array)
    assert not is_memory_mapped(first.features)
    assert second.num_edges == first.num_edges and second.info == first.info
    assert second.graph.edges_sorted
    via_load = load("synthetic:arxiv", tmp_path, scale=1e-3, seed=5)
    assert is_memory_mapped(via_load.features)


def test_no_cache_and_tiny_write_nothing(tmp_path):
    load_synthetic("arxiv", tmp_path, scale=1e-3, cache=False)
    load_synthetic("tiny", tmp_path)
    load("synthetic:tiny", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_failed_cache_write_leaves_no_trace(tmp_path, monkeypatch):
    calls = []
    real_save = synthetic_module._save_array

    def failing_save(path, array):
        calls.append(path.name)
        if len(calls) == 3:
            raise OSError("disk full (simulated)")
        real_save(path, array)

    monkeypatch.setattr(synthetic_module, "_save_array", failing_save)
    with pytest.raises(OSError, match=r"disk full \(simulated\)"):
        load_synthetic("arxiv", tmp_path, scale=1e-3)
    assert len(calls) == 3
    assert list((tmp_path / "synthetic").iterdir()) == []
    monkeypatch.setattr(synthetic_module, "_save_array", real_save)
    assert_same_arrays(
        load_synthetic("arxiv", tmp_path, scale=1e-3), generate(PRESETS["arxiv"].scaled(1e-3))
    )


def test_losing_a_race_to_write_the_same_cache_keeps_the_winner(tmp_path, monkeypatch):
    real_generate = synthetic_module.generate
    spec = PRESETS["arxiv"].scaled(1e-3)

    def generate_while_another_process_finishes_first(*args, **kwargs):
        dataset = real_generate(*args, **kwargs)
        synthetic_module._write_cache(cache_dir(tmp_path, "arxiv", 1e-3, 0), dataset, spec, 0)
        return dataset

    monkeypatch.setattr(synthetic_module, "generate", generate_while_another_process_finishes_first)
    load_synthetic("arxiv", tmp_path, scale=1e-3)
    assert [p.name for p in (tmp_path / "synthetic").iterdir()] == ["arxiv-scale0.001-seed0"]
    monkeypatch.setattr(synthetic_module, "generate", real_generate)
    assert is_memory_mapped(load_synthetic("arxiv", tmp_path, scale=1e-3).features)


@pytest.fixture
def cached(tmp_path):
    load_synthetic("arxiv", tmp_path, scale=1e-3)
    return tmp_path, cache_dir(tmp_path, "arxiv", 1e-3, 0)


def test_truncated_cache_file_is_named(cached):
    root, folder = cached
    path = folder / "features.npy"
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*truncated"):
        load_synthetic("arxiv", root, scale=1e-3)


def test_cache_file_of_the_wrong_shape_is_named(cached):
    root, folder = cached
    path = folder / "labels.npy"
    np.save(path, np.zeros(3, np.int64))
    with pytest.raises(ValueError, match=re.escape(str(path)) + r".*\(3,\).*manifest says"):
        load_synthetic("arxiv", root, scale=1e-3)


def test_missing_or_corrupt_manifest_is_named(cached):
    root, folder = cached
    path = folder / MANIFEST
    path.write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*corrupt"):
        load_synthetic("arxiv", root, scale=1e-3)
    path.unlink()
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*missing"):
        load_synthetic("arxiv", root, scale=1e-3)


def test_cache_from_another_generator_version_is_refused(cached):
    root, folder = cached
    path = folder / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["generator"] = "dcsbm-0"
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"another generator version.*delete"):
        load_synthetic("arxiv", root, scale=1e-3)


# -- memory ---------------------------------------------------------------------


def test_refuses_what_does_not_fit_before_allocating(tmp_path, monkeypatch):
    monkeypatch.setattr(synthetic_module, "_available_memory", lambda: 2**30)
    start = time.perf_counter()
    with pytest.raises(
        ValueError, match=r"needs about [\d.]+ GiB.*only 1\.0 GiB.*--scale 0\.00"
    ) as err:
        load_synthetic("papers100M", tmp_path)
    assert time.perf_counter() - start < 1.0
    suggested = float(re.search(r"--scale (\S+)", str(err.value)).group(1))
    assert estimate_bytes(PRESETS["papers100M"].scaled(suggested)) < 2**30
    with pytest.raises(ValueError, match=r"synthetic:products at scale 1\.0 needs about"):
        generate(PRESETS["products"])
    assert not (tmp_path / "synthetic").exists()


def test_memory_estimate_bounds_the_graph_and_features():
    papers = PRESETS["papers100M"]
    graph_and_features = 8 * 2 * papers.num_edges + 4 * papers.num_nodes * papers.num_features
    assert estimate_bytes(papers) > graph_and_features > 64 * 2**30
    # Measured peak RSS for full products: 3.9 GiB (0.2 GiB of it the interpreter).
    assert 4 * 2**30 < estimate_bytes(PRESETS["products"]) < 6 * 2**30
    available = synthetic_module._available_memory()
    assert available is None or available > 0


# -- bad input ------------------------------------------------------------------


def test_unknown_preset_lists_the_presets(tmp_path):
    with pytest.raises(ValueError, match=r"unknown synthetic preset 'nope'.*'arxiv'.*'tiny'"):
        load_synthetic("nope", tmp_path)
    with pytest.raises(ValueError, match="unknown synthetic preset 'Tiny'"):
        load("synthetic:Tiny", tmp_path)


@pytest.mark.parametrize("scale", [0.0, -0.5, 1.5, math.nan, math.inf])
def test_scale_outside_the_unit_interval_is_refused(tmp_path, scale):
    with pytest.raises(ValueError, match=r"scale must lie in \(0, 1\], got"):
        load_synthetic("arxiv", tmp_path, scale=scale)
    with pytest.raises(ValueError, match=r"scale must lie in \(0, 1\]"):
        PRESETS["tiny"].scaled(scale)


def test_non_numeric_scale_and_bad_seed_are_refused(tmp_path):
    with pytest.raises(TypeError, match=r"scale must be a real number, got '0\.5'"):
        load_synthetic("arxiv", tmp_path, scale="0.5")
    with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
        generate(PRESETS["tiny"], seed=-1)
    with pytest.raises(TypeError, match="spec must be a SyntheticSpec, got str"):
        generate("tiny")


def test_classes_too_small_for_train_per_class_are_refused_before_sampling(monkeypatch):
    spec = SyntheticSpec(
        name="x",
        num_nodes=200,
        num_edges=400,
        directed=False,
        num_features=4,
        num_classes=5,
        train_fraction=0.75,
        valid_fraction=0.1,
        test_fraction=0.1,
        train_per_class=30,
    )
    # Shares 1 : 4^-1/4 : ... : 1/4 of 200 nodes: the smallest class holds 18.
    np.testing.assert_array_equal(sbm.class_sizes(200, 5, 4.0), [71, 50, 36, 25, 18])
    monkeypatch.setattr(sbm, "sample_pairs", None)  # fails loudly if reached
    with pytest.raises(ValueError, match="class 4 of synthetic:x has 18 nodes, fewer than"):
        generate(spec)
    with pytest.raises(
        ValueError, match=r"splits need 300 \+ 20 \+ 20 nodes but there are only 200"
    ):
        generate(dataclasses.replace(spec, train_per_class=60))


def test_scale_too_small_for_the_edge_count_is_refused(tmp_path):
    # 17 nodes cannot hold 117 edges as a sparse graph (136 pairs in all).
    with pytest.raises(ValueError, match="has 117 edges on 17 nodes, too dense"):
        load_synthetic("arxiv", tmp_path, scale=1e-4, cache=False)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_nodes": 0}, "num_nodes must be >= 1, got 0"),
        ({"homophily": 1.5}, r"homophily must lie in \[0.0, 1.0\], got 1.5"),
        ({"degree_exponent": 2.0}, "degree_exponent must be > 2, got 2.0"),
        ({"feature_signal": -1.0}, "feature_signal must be >= 0, got -1.0"),
        ({"class_imbalance": 0.5}, "class_imbalance must be >= 1, got 0.5"),
        ({"valid_fraction": 0.6}, r"split fractions sum to .*more than labelled_fraction=1.0"),
    ],
)
def test_spec_validation(change, message):
    fields = {
        "name": "x",
        "num_nodes": 100,
        "num_edges": 200,
        "directed": False,
        "num_features": 4,
        "num_classes": 2,
        "train_fraction": 0.5,
        "valid_fraction": 0.2,
        "test_fraction": 0.3,
    }
    SyntheticSpec(**fields)
    with pytest.raises(ValueError, match=message):
        SyntheticSpec(**{**fields, **change})

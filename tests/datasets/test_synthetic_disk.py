"""Synthetic presets streamed to disk: exact counts, the in-memory generator as oracle, bounded memory."""

import json
import tracemalloc

import numpy as np
import pytest

from sparsegcn.datasets import load, sbm
from sparsegcn.datasets.synthetic import PRESETS, generate
from sparsegcn.datasets.synthetic_disk import (
    disk_bytes,
    generate_to_disk,
    main,
    stream_bytes,
)

SCALE = 2e-5  # 2,221 nodes and 32,314 pairs of papers100M


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    root = tmp_path_factory.mktemp("disk")
    path = generate_to_disk("papers100M", root / "papers", scale=SCALE, group_edges=1 << 12)
    return load(str(path)), path


def test_full_size_counts_are_papers100ms():
    spec = PRESETS["papers100M"]
    sizes = spec.split_sizes()
    assert (spec.num_nodes, spec.num_edges) == (111_059_956, 1_615_685_872)
    assert (spec.num_features, spec.num_classes, sizes["train"]) == (128, 172, 1_207_179)
    # By design: at most 16 GB of RAM and ~45 GB of disk with float16 features.
    assert stream_bytes(spec) <= 16 * 10**9
    assert disk_bytes(spec, "float16") <= 45 * 10**9
    # The CSR alone crosses 2**31 stored edges: indptr must be int64.
    assert 2 * spec.num_edges >= 2**31


def test_streamed_graph_is_exact_symmetric_and_simple(streamed):
    dataset, _ = streamed
    spec = PRESETS["papers100M"].scaled(SCALE)
    n, e = spec.num_nodes, spec.num_edges
    s, r = np.asarray(dataset.graph.senders), np.asarray(dataset.graph.receivers)
    assert dataset.graph.num_edges == 2 * e and dataset.num_edges == e
    assert not (s == r).any()  # no self-loops
    keys = r.astype(np.int64) * n + s
    assert np.unique(keys).shape[0] == 2 * e  # distinct directed edges
    np.testing.assert_array_equal(np.sort(keys), np.sort(s.astype(np.int64) * n + r))  # symmetric
    # Exactly round(h E) same-class pairs (capped at a quarter of the possible ones at
    # tiny scales), as sbm.sample_pairs promises.
    model = sbm.block_model(
        n,
        e,
        spec.num_classes,
        degree_exponent=spec.degree_exponent,
        imbalance=spec.class_imbalance,
        seed=0,
    )
    num_same = min(round(spec.homophily * e), model.pair_capacity()[0] // 4)
    assert int((model.labels[s] == model.labels[r]).sum()) == 2 * num_same
    assert dataset.info["edge_homophily"] == num_same / e


def test_nodes_features_and_splits_equal_the_in_memory_generator(streamed):
    dataset, _ = streamed
    reference = generate(PRESETS["papers100M"].scaled(SCALE))
    np.testing.assert_array_equal(dataset.features, reference.features)
    np.testing.assert_array_equal(dataset.labels, reference.labels)
    for key in ("train", "valid", "test"):
        np.testing.assert_array_equal(dataset.split[key], reference.split[key])

    # Same draws; only the surplus of the last round is dropped differently.
    def edges(d):
        return set(
            zip(
                np.asarray(d.graph.senders).tolist(),
                np.asarray(d.graph.receivers).tolist(),
                strict=True,
            )
        )

    ours, theirs = edges(dataset), edges(reference)
    assert len(ours & theirs) > 0.9 * len(ours)


def test_output_depends_on_the_seed_only_and_float16(streamed, tmp_path):
    _, path = streamed
    other = generate_to_disk(
        "papers100M", tmp_path / "big-groups", scale=SCALE, features_dtype="float16"
    )
    first = json.loads((path / "manifest.json").read_text())["files"]
    second = json.loads((other / "manifest.json").read_text())["files"]
    for key in ("indptr", "indices", "labels", "train", "valid", "test"):
        assert first[key]["sha256"] == second[key]["sha256"], key
    np.testing.assert_array_equal(
        np.load(other / "features.npy"), np.load(path / "features.npy").astype(np.float16)
    )
    seed1 = generate_to_disk("papers100M", tmp_path / "seed1", scale=SCALE, seed=1)
    assert (
        json.loads((seed1 / "manifest.json").read_text())["files"]["indices"]["sha256"]
        != (first["indices"]["sha256"])
    )


@pytest.mark.parametrize(("scale", "group_edges"), [(2e-5, 1 << 12), (1e-4, 1 << 26)])
def test_peak_memory_is_within_the_design_bound(tmp_path, scale, group_edges):
    spec = PRESETS["papers100M"].scaled(scale)
    tracemalloc.start()
    try:
        path = generate_to_disk(spec, tmp_path / "x", group_edges=group_edges)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= stream_bytes(spec, group_edges)
    info = json.loads((path / "manifest.json").read_text())["info"]
    # Each bucket sorted at once stays within the budget (4x headroom by design).
    assert info["max_bucket_edges"] <= group_edges


def test_bad_input_and_command_line(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown synthetic preset 'nope'"):
        generate_to_disk("nope", tmp_path / "x")
    with pytest.raises(ValueError, match=r"scale must lie in \(0, 1\]"):
        generate_to_disk("arxiv", tmp_path / "x", scale=2.0)
    with pytest.raises(ValueError, match="features_dtype"):
        generate_to_disk("arxiv", tmp_path / "x", scale=1e-3, features_dtype="float64")
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "tiny"
    assert main(["tiny", "--out", str(out), "--no-progress"]) == 0
    assert load(str(out)).num_nodes == 3000
    assert main(["tiny", "--out", str(out), "--no-progress"]) == 2
    assert "pass overwrite=True" in capsys.readouterr().err


def test_a_full_tmp_dir_is_an_error_naming_it_not_lost_pairs(tmp_path, monkeypatch):
    # ndarray.tofile dropped a small append on a full disk without an error, and the
    # error that did come named --out, which had room.
    import errno

    from sparsegcn.datasets import synthetic_disk

    def full(f, array):
        raise OSError(errno.ENOSPC, "No space left on device")

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(synthetic_disk, "write_array", full)
    message = rf"^cannot write the temporary pair files in {work}: No space left on device$"
    with pytest.raises(OSError, match=message):
        generate_to_disk("tiny", tmp_path / "out", tmp_dir=work)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["work"]

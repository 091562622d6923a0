"""``link_sampled_epoch.py`` at a tiny scale: it runs and writes every key of its JSON.

Run: ``pytest -n 0 -q benchmarks/test_link_sampled_epoch.py`` (``-m slow``
adds the run beside DGL, when its Python is there).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import link_sampled_epoch

TINY = [
    "--scale", "0.005", "--fanouts", "3,2", "--layers", "2", "--hidden", "16",
    "--batch-size", "32", "--rounds", "1", "--per-round", "2", "--warmup", "1",
    "--train-batches", "2", "--mrr-sources", "40", "--mrr-chunk", "16",
]  # fmt: skip


def _run(tmp_path, *extra) -> dict:
    out = tmp_path / "out.json"
    argv = [*TINY, "--root", str(tmp_path / "data"), "--out", str(out), *extra]
    assert link_sampled_epoch.main(argv) == 0
    return json.loads(out.read_text())


def test_ours_alone_writes_the_report(tmp_path):
    result = _run(tmp_path, "--dgl-python", "")
    for key in ("date", "command", "machine", "loadavg", "loaded", "dataset", "setup", "mrr"):
        assert key in result
    ours = result["ours"]
    for key in ("median_ms", "projected_epoch_s", "compile_s", "peak_rss_gb", "batches_per_epoch"):
        assert ours[key] > 0
    assert ours["batches_per_epoch"] == -(-result["dataset"]["train_pairs"] // 32)
    assert len(ours["times_ms"]) == 2
    assert result["dgl"] == {"missing": "no DGL Python given"}
    assert result["mrr"]["sources"] == 40 and result["mrr"]["negatives_per_source"] == 1000
    assert 0.0 < result["mrr"]["mrr"] <= 1.0
    assert result["target_rss_met"] is True


@pytest.mark.slow
def test_beside_dgl(tmp_path):
    python = os.environ.get("SPARSEGCN_DGL_PYTHON", "")
    if not python or not os.access(python, os.X_OK):
        pytest.skip(f"no DGL Python at $SPARSEGCN_DGL_PYTHON ({python!r})")
    result = _run(tmp_path, "--dgl-python", python)
    dgl = result["dgl"]
    assert "missing" not in dgl, dgl
    assert len(dgl["times_ms"]) == 2 and dgl["peak_rss_gb"] > 0
    assert dgl["fanouts_dgl_order"] == [2, 3]
    assert result["epoch_ratio_ours_over_dgl"] > 0


def test_dedup_with_probed_caps(tmp_path):
    argv = ["--dgl-python", "", "--sampler", "dedup", "--caps", "auto", "--mrr-embed", "sampled"]
    result = _run(tmp_path, *argv)
    setup = result["setup"]
    assert setup["sampler"] == "dedup" and len(setup["caps"]) == 2
    for d, cap in enumerate(setup["caps"]):
        most = max(counts[d] for counts in setup["dedup_probe_distinct_per_hop"])
        assert most <= cap
    assert result["ours"]["median_ms"] > 0 and 0.0 < result["mrr"]["mrr"] <= 1.0
    assert result["mrr"]["embedded_nodes"] > 40

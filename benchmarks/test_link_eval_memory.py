"""``link_eval_memory.py`` at a tiny scale: both modes run, write their JSON, and agree.

Run: ``pytest -n 0 -q benchmarks/test_link_eval_memory.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import link_eval_memory


def test_phased_and_one_program_evaluations_agree(tmp_path):
    results = {}
    for mode in ("phased", "one-program"):
        out = tmp_path / f"{mode}.json"
        argv = ["--root", str(tmp_path / "data"), "--scale", "0.002", "--hidden", "8"]
        assert (
            link_eval_memory.main([*argv, "--layers", "2", "--mode", mode, "--out", str(out)]) == 0
        )
        results[mode] = json.loads(out.read_text())
    phased, one = results["phased"], results["one-program"]
    for key in ("date", "command", "machine", "peak_rss_gb", "xla_temp_gb", "eval_s"):
        assert key in phased
    assert phased["peak_rss_gb"] >= phased["peak_rss_after_load_gb"] > 0
    for split in ("valid", "test"):
        assert set(phased[split]) == {"auc", "ap", "mrr"}
        for name, value in phased[split].items():
            assert value == pytest.approx(one[split][name], rel=1e-5), (split, name)


@pytest.mark.slow  # 10 s: it compiles the sampled epoch
def test_a_short_run_prepared_as_the_cli_prepares_it(tmp_path):
    out = tmp_path / "run.json"
    argv = ["--root", str(tmp_path / "data"), "--scale", "0.002", "--hidden", "8", "--layers", "2"]
    assert (
        link_eval_memory.main([*argv, "--mode", "run", "--max-batches", "2", "--out", str(out)])
        == 0
    )
    result = json.loads(out.read_text())
    assert result["batches"] == 2 and result["step_ms"] > 0
    assert result["peak_rss_gb"] >= result["peak_rss_after_load_gb"] > 0
    assert set(result["test"]) == {"auc", "ap", "mrr"}

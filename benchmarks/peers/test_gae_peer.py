"""The ``gae`` part of ``compare.py``: its options, our step, and PyG's ``gae_step``.

PyG runs in its own environment (``$SPARSEGCN_PYG_PYTHON``); its test is
``slow`` (it starts a Python with torch) and is skipped without it:

    SPARSEGCN_PYG_PYTHON=... python -m pytest -n 0 benchmarks/peers/test_gae_peer.py -m slow
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from compare import main as compare_main
from peer_process import start_peer, write_npz


def test_compare_refuses_a_gae_root_without_cora_before_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        compare_main(["--only", "gae", "--gae-root", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--gae-root" in capsys.readouterr().err


def test_gae_rows_give_speedups_from_the_same_rounds(cora_root, tmp_path, monkeypatch):
    """Our sampled step runs on Cora's split; a missing PyG is a row saying so."""
    import gae_compare
    from compare import External, Rounds

    rows = gae_compare.gae_rows(
        cora_root, External({"pyg": "not given"}, str(tmp_path)), Rounds(1, 1), full=False
    )
    # Ours: the step alone, then the trainer's call per step; PyG's row last.
    assert len(rows) == 3 and rows[-1]["impl"] == gae_compare.PYG_LABEL
    assert "the trainer's call" in rows[1]["impl"]
    for row in rows[:2]:
        assert row["median_ms"] > 0 and "ours_speedup" not in row
    assert rows[-1]["median_ms"] is None and rows[-1]["note"] == "missing: not given"
    # PyG's file: the message edges are the train positives in both directions.
    data = np.load(tmp_path / "gae-cora.npz")
    pos, edges = data["pos"], data["edge_index"]
    assert data["features"].shape == (2708, 1433) and pos.shape[0] == 2
    assert edges.shape[1] == 2 * pos.shape[1]
    forward = set(map(tuple, pos.T))
    assert set(map(tuple, edges.T)) == forward | {(v, u) for u, v in forward}


@pytest.mark.slow
def test_pyg_gae_step_runs_and_learns(tmp_path):
    """PyG's case (negative_sampling inside) gives a finite loss that falls on a tiny graph."""
    peer = start_peer("pyg")
    if isinstance(peer, str):
        pytest.skip(f"pyg peer missing: {peer}")
    rng = np.random.default_rng(0)
    n = 40
    pos = np.array([[i, (i + 1) % n] for i in range(n)], np.int64).T  # a ring
    data = write_npz(
        str(tmp_path),
        "gae-tiny",
        features=rng.standard_normal((n, 8)).astype(np.float32),
        edge_index=np.concatenate([pos, pos[::-1]], axis=1),
        pos=pos,
    )
    with peer:
        info = peer.setup("gae_step", warmup=0, data=data, hidden=8, embedding_dim=4, lr=0.05)
        first = info["stats"]["loss"]
        assert math.isfinite(first) and first > 0
        answer = peer.time("gae_step", 60)
        assert len(answer["times_s"]) == 60
        last = answer["stats"]["loss"]
        assert math.isfinite(last) and last < first

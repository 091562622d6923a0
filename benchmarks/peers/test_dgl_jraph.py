"""DGL and Jraph, each in its own environment, against a dense reference and ours.

The peers are found as ``compare.py`` finds them: ``$SPARSEGCN_DGL_PYTHON``
and ``$SPARSEGCN_JRAPH_PYTHON`` name the Python of each environment (see
benchmarks/README.md for how they are made). A peer whose environment is not
given, or whose library does not import there, is skipped with the reason.

    SPARSEGCN_DGL_PYTHON="$DGL_PYTHON" \\
    SPARSEGCN_JRAPH_PYTHON="$JRAPH_PYTHON" \\
        python -m pytest benchmarks/peers/test_dgl_jraph.py -m slow
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from compare import External, Rounds, interleaved_rows
from peer_process import PeerError, PeerProcess, start_peer, write_npz

from sparsegcn.backends import propagate
from sparsegcn.graph import Graph
from sparsegcn.transforms import gcn_norm


def _tiny_graph(n: int = 40, p: float = 0.12, seed: int = 0):
    """A random undirected graph with no self-loops: its dense adjacency and edge list."""
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((n, n)) < p, 1)
    adjacency = (upper | upper.T).astype(np.float64)
    receivers, senders = np.nonzero(adjacency)
    return adjacency, senders.astype(np.int32), receivers.astype(np.int32)


def _dense_a_hat(adjacency: np.ndarray) -> np.ndarray:
    """``D^-1/2 (A + I) D^-1/2`` in float64, straight from the definition."""
    a = adjacency + np.eye(len(adjacency))
    d = a.sum(axis=1)
    return a / np.sqrt(np.outer(d, d))


@pytest.fixture(scope="module", params=["dgl", "jraph"])
def peer(request):
    started = start_peer(request.param)
    if isinstance(started, str):
        pytest.skip(f"{request.param} peer missing: {started}")
    yield started
    started.close()


def test_missing_peer_is_a_reason_not_an_error(monkeypatch):
    monkeypatch.delenv("SPARSEGCN_DGL_PYTHON", raising=False)
    assert start_peer("dgl") == "no Python given (--dgl-python or $SPARSEGCN_DGL_PYTHON)"
    assert start_peer("jraph", "/nonexistent/python") == "/nonexistent/python is not an executable"
    with pytest.raises(ValueError, match="'spektral'"):
        start_peer("spektral")


def test_interleaved_rows_report_missing_peers(tmp_path):
    x = np.arange(6, dtype=np.float32)
    external = External({"dgl": "no Python given"}, str(tmp_path))
    rows = interleaved_rows(
        "double",
        ("ours", lambda v: 2 * v, (jax.device_put(x),)),
        [("DGL double", "dgl", "double", {}), ("Jraph double", "jraph", "double", {})],
        external,
        Rounds(rounds=2, per_round=3),
    )
    assert [r["impl"] for r in rows] == ["ours", "DGL double", "Jraph double"]
    assert rows[0]["repeats"] == 6 and rows[0]["median_ms"] > 0
    assert rows[1]["median_ms"] is None and rows[1]["note"] == "missing: no Python given"
    assert rows[2]["note"] == "missing: jraph not requested"
    assert {r["case"] for r in rows} == {"double | interleaved"}


class _DiesOnSecondRound:
    """A peer whose process goes away after its first timed round."""

    def __init__(self):
        self.versions = {"fake": "1"}
        self.calls = 0

    def setup(self, case, **spec):
        return {"setup_s": 0.0, "first_call_s": 0.0, "stats": {}}

    def time(self, case, repeats):
        self.calls += 1
        if self.calls > 1:
            raise PeerError("fake peer exited (rc -9)")
        return {"times_s": [0.001] * repeats, "stats": {}}


def test_a_peer_failing_mid_way_is_a_row(tmp_path):
    external = External({"dgl": _DiesOnSecondRound()}, str(tmp_path))
    rows = interleaved_rows(
        "negate",
        ("ours", lambda v: -v, (jax.device_put(np.ones(3, np.float32)),)),
        [("DGL negate", "dgl", "negate", {})],
        external,
        Rounds(rounds=3, per_round=2),
    )
    assert rows[0]["repeats"] == 6
    assert rows[1]["median_ms"] is None
    assert rows[1]["note"] == "missing: failed while timed: fake peer exited (rc -9)"


@pytest.mark.slow
def test_peer_propagation_equals_dense_and_ours(peer: PeerProcess, tmp_path):
    adjacency, senders, receivers = _tiny_graph()
    n = len(adjacency)
    x = np.random.default_rng(1).standard_normal((n, 5)).astype(np.float32)
    expected = _dense_a_hat(adjacency) @ x.astype(np.float64)

    graph = Graph(senders=senders, receivers=receivers, num_nodes=n)
    a_hat = gcn_norm(graph)
    ours = np.asarray(propagate(a_hat, jax.device_put(x), backend="segment"))
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)

    coo = a_hat.to_scipy().tocoo()
    data = write_npz(
        str(tmp_path),
        "tiny",
        senders=coo.col.astype(np.int32),
        receivers=coo.row.astype(np.int32),
        weights=coo.data.astype(np.float32),
        num_nodes=np.int64(n),
        x=x,
    )
    cases = ["propagate-copy", "propagate-weighted"] if peer.name == "dgl" else ["propagate"]
    for case in cases:
        peer.setup(case, data=data, warmup=0)
        theirs = peer.output(case)
        assert theirs.shape == (n, 5)
        np.testing.assert_allclose(theirs, expected, rtol=1e-5, atol=1e-5, err_msg=case)
        np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5, err_msg=case)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["gcn_step", "gat_step"])
def test_peer_training_step_fits_a_tiny_graph(peer: PeerProcess, case, tmp_path):
    """Labels that the features give away: the peer's step must drive the loss down."""
    adjacency, senders, receivers = _tiny_graph()
    n = len(adjacency)
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, n)
    features = np.eye(3, dtype=np.float32)[labels] + 0.1 * rng.standard_normal((n, 3))
    data = write_npz(
        str(tmp_path),
        case,
        senders=senders,
        receivers=receivers,
        num_nodes=np.int64(n),
        features=features.astype(np.float32),
        labels=labels.astype(np.int32),
        train_mask=np.arange(n) < n // 2,
    )
    spec = dict(data=data, num_classes=3, lr=0.05, weight_decay=0.0, warmup=0, dropout=0.0)
    spec.update(hidden=8, num_layers=2) if case == "gcn_step" else spec.update(hidden=4, heads=2)
    peer.setup(case, **spec)
    first = float(peer.output(case))
    peer.time(case, 60)
    last = float(peer.output(case))
    assert np.isfinite(first) and last < 0.5 * first, (first, last)

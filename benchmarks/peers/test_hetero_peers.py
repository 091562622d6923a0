"""The ``mag`` and ``proteins`` parts of ``compare.py``: their data, our side, and the peers' models.

The peers run in their own environments, found as ``compare.py`` finds them
(``$SPARSEGCN_DGL_PYTHON``, ``$SPARSEGCN_PYG_PYTHON``); a peer that is not
given is skipped with the reason. Their tests are ``slow`` (each starts a
Python with torch) and check that, with our weights copied in, the peer's
model computes ours on a tiny graph:

    SPARSEGCN_PYG_PYTHON=... SPARSEGCN_DGL_PYTHON=... \\
        python -m pytest -n 0 benchmarks/peers/test_hetero_peers.py -m slow
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from compare import External, Rounds
from compare import main as compare_main
from hetero_compare import DGL_LABEL, MagSetup, mag_experiment, mag_rows, tree_rows
from hetero_data import load_hetero, rgcn_weights, sage_weights, save_hetero, save_weights
from peer_process import PeerProcess, start_peer
from proteins_compare import PEER_LABELS, proteins_npz, proteins_rows, proteins_setup

from sparsegcn.sampling.typed import HeteroCSR, check_typed_fanouts, sample_typed

TINY_MAG = 0.001  # 1,047 papers, 1,135 authors, about 21,000 raw edges
TINY_PROTEINS = 0.002  # 265 nodes, 158,246 stored edges


@pytest.fixture(scope="module")
def tiny_mag():
    from sparsegcn.tasks.hetero import prepare_hetero

    return prepare_hetero(mag_experiment(TINY_MAG, MagSetup()))


def test_hetero_npz_keeps_every_relation_in_model_order(tiny_mag, tmp_path):
    from hetero_compare import mag_npz

    data = load_hetero(np.load(mag_npz(str(tmp_path), "mag", tiny_mag)))
    graph = tiny_mag.graph
    assert list(data["relations"]) == list(graph.edge_types)
    assert data["num_nodes"] == dict(graph.num_nodes)
    for key, (senders, receivers) in data["relations"].items():
        np.testing.assert_array_equal(senders, np.asarray(graph.relations[key].senders))
        np.testing.assert_array_equal(receivers, np.asarray(graph.relations[key].receivers))
    # Reverses are there: every relation's edges come back reversed in its partner.
    writes = data["relations"][("author", "writes", "paper")]
    rev = data["relations"][("paper", "rev_writes", "author")]
    np.testing.assert_array_equal(writes[0], rev[1])
    assert data["target"] == "paper" and set(data["features"]) == {"paper"}
    np.testing.assert_array_equal(data["train"], tiny_mag.dataset.split["train"])
    assert (data["labels"][data["train"]] >= 0).all()


def test_save_hetero_refuses_repeated_relation_names(tmp_path):
    relations = {("a", "r", "b"): ([0], [0]), ("b", "r", "a"): ([0], [0])}
    with pytest.raises(ValueError, match=r"relation names must be unique.*'r', 'r'"):
        save_hetero(
            str(tmp_path),
            "x",
            num_nodes={"a": 1, "b": 1},
            relations=relations,
            features={},
            target="a",
            labels=[0],
            train=[0],
        )


def test_rgcn_weights_name_every_parameter(tiny_mag):
    from sparsegcn.tasks.hetero import build_model

    exp = mag_experiment(TINY_MAG, MagSetup(hidden=8))
    params = build_model(exp, tiny_mag).init(jax.random.key(0))
    flat = rgcn_weights(params)
    assert sum(v.size for v in flat.values()) == sum(np.size(v) for v in jax.tree.leaves(params))
    relations = len(tiny_mag.graph.edge_types)
    assert flat["w_rel_0"].shape == (relations, 128, 8)
    assert flat["w_rel_1"].shape == (relations, 8, tiny_mag.dataset.num_classes)
    assert flat["emb_author"].shape == (tiny_mag.graph.num_nodes["author"], 128)
    assert "emb_paper" not in flat and flat["root_b_1_paper"].shape == (349,)


def test_tree_rows_count_the_sampled_tree(tiny_mag):
    table = check_typed_fanouts("3,2", tiny_mag.graph.edge_types)
    sample = sample_typed(
        HeteroCSR.from_graph(tiny_mag.graph),
        np.arange(5, dtype=np.int32),
        table,
        seed_type="paper",
        key=jax.random.key(0),
    )
    counted = sum(int(np.prod(v.shape)) for v in sample.nodes.values())
    assert tree_rows(table, tiny_mag.graph.edge_types, "paper", 5) == counted
    # Into papers: writes, cites, rev_has_topic; 2 hops give 3 + 6 paths.
    assert len(sample.nodes) == 1 + 3 + 6


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--only", "mag", "--mag-scale", "0"], "--mag-scale must be in (0, 1], got 0.0"),
        (["--only", "mag", "--mag-batches", "0"], "--mag-batches must be >= 1, got 0"),
        (["--only", "proteins", "--proteins-scale", "2"], "--proteins-scale must be in (0, 1]"),
        (["--only", "proteins", "--proteins-layers", "0"], "--proteins-layers must be >= 1"),
        (["--only", "proteins", "--proteins-peers", "pyg,jraph"], "--proteins-peers[1] = 'jraph'"),
    ],
)
def test_compare_refuses_bad_mag_and_proteins_options_before_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        compare_main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_mag_rows_time_ours_and_report_a_missing_dgl(tmp_path):
    setup = MagSetup(fanouts=(3, 2), batch_size=64, hidden=8)
    rows = mag_rows(
        External({"dgl": "not given"}, str(tmp_path)),
        Rounds(2, 1),
        scale=TINY_MAG,
        batches=2,
        setup=setup,
    )
    ours, dgl = rows
    assert ours["repeats"] == 2 and ours["median_ms"] > 0 and ours["batches_per_call"] == 2
    assert ours["steps_per_epoch"] == math.ceil(630 / 64)
    assert ours["projected_epoch_s"] == pytest.approx(10 * ours["median_ms"] / 1e3)
    assert math.isfinite(ours["last_loss"]) and ours["peak_rss_gb"] > 0
    assert "ours_speedup" not in ours
    assert dgl["impl"] == DGL_LABEL and dgl["note"] == "missing: not given"
    assert (tmp_path / "mag.npz").exists()


def test_proteins_rows_time_ours_against_each_peer_in_turn(tmp_path):
    rows = proteins_rows(
        External({"pyg": "not given", "dgl": "not given"}, str(tmp_path)),
        Rounds(1, 2),
        scale=TINY_PROTEINS,
        hidden=8,
        layers=2,
    )
    assert [r["impl"] for r in rows[1::2]] == [PEER_LABELS["pyg"], PEER_LABELS["dgl"]]
    assert rows[0]["case"].endswith("| vs pyg | interleaved")
    for ours in rows[::2]:
        assert ours["repeats"] == 2 and ours["median_ms"] > 0 and ours["peak_rss_gb"] > 0
    data = np.load(tmp_path / "proteins.npz")
    assert data["features"].shape == (265, 8) and data["labels"].shape == (265, 112)
    assert data["senders"].shape == (2 * round(39_561_252 * TINY_PROTEINS),)


def test_multilabel_loss_is_ours():
    """The peers' loss (torch) equals ours on labels with missing entries."""
    torch = pytest.importorskip("torch")
    from sage_torch import multilabel_loss

    from sparsegcn.train.losses import masked_binary_cross_entropy

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((30, 7)).astype(np.float32)
    labels = rng.integers(-1, 2, (30, 7)).astype(np.int8)
    labels[3] = -1  # a node without any label
    train = np.array([0, 3, 5, 8, 13, 21, 29])
    mask = np.zeros(30, bool)
    mask[train] = True
    expected = float(masked_binary_cross_entropy(logits, labels, mask))
    theirs = multilabel_loss(
        torch.from_numpy(logits), torch.from_numpy(labels), torch.from_numpy(train)
    )
    assert float(theirs) == pytest.approx(expected, rel=1e-5)


# -- the peers ---------------------------------------------------------------------
@pytest.fixture(scope="module", params=["pyg", "dgl"])
def peer(request):
    started = start_peer(request.param)
    if isinstance(started, str):
        pytest.skip(f"{request.param} peer missing: {started}")
    yield started
    started.close()


@pytest.fixture(scope="module")
def dgl():
    started = start_peer("dgl")
    if isinstance(started, str):
        pytest.skip(f"dgl peer missing: {started}")
    yield started
    started.close()


def _shifted(params, seed: int):
    """``params`` plus noise (biases away from 0, so that a dropped one shows), as float32."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda p: np.asarray(p + 0.1 * rng.standard_normal(np.shape(p)), np.float32), params
    )


@pytest.mark.slow
def test_peer_sage_equals_ours(peer: PeerProcess, tmp_path):
    """Our weights in the peer's full-batch GraphSAGE give our outputs on every node."""
    dataset, data, _, _, model = proteins_setup(TINY_PROTEINS, hidden=8, layers=3)
    params = _shifted(model.init(jax.random.key(1)), 0)
    expected = np.asarray(model.apply(params, data.graph, data.features))
    spec = dict(
        data=proteins_npz(str(tmp_path), "proteins", dataset),
        weights=save_weights(str(tmp_path / "weights.npz"), sage_weights(params)),
        hidden=8,
        num_layers=3,
        lr=0.01,
        warmup=0,
    )
    peer.setup("sage_full_forward", **spec)
    theirs = peer.output("sage_full_forward")
    assert theirs.shape == (dataset.num_nodes, 112)
    np.testing.assert_allclose(theirs, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    # The training step runs and learns on the same data.
    peer.setup("sage_full_step", **spec)
    first = float(peer.output("sage_full_step"))
    peer.time("sage_full_step", 20)
    assert math.isfinite(first) and float(peer.output("sage_full_step")) < first


@pytest.mark.slow
def test_dgl_rgcn_equals_ours(dgl: PeerProcess, tiny_mag, tmp_path):
    """Our weights in DGL's R-GCN give our full-neighbourhood paper logits."""
    from hetero_compare import mag_npz

    from sparsegcn.tasks.hetero import build_model

    exp = mag_experiment(TINY_MAG, MagSetup(hidden=8))
    model = build_model(exp, tiny_mag)
    params = _shifted(model.init(jax.random.key(2)), 1)
    expected = np.asarray(model.apply(params, tiny_mag.graph, tiny_mag.features))
    spec = dict(
        data=mag_npz(str(tmp_path), "mag", tiny_mag),
        weights=save_weights(str(tmp_path / "weights.npz"), rgcn_weights(params)),
        fanouts=[25, 20],
        hidden=8,
        num_classes=tiny_mag.dataset.num_classes,
        warmup=0,
    )
    dgl.setup("rgcn_forward", **spec)
    theirs = dgl.output("rgcn_forward")
    assert theirs.shape == expected.shape == (tiny_mag.graph.num_nodes["paper"], 349)
    np.testing.assert_allclose(theirs, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.slow
def test_dgl_rgcn_batches_sample_our_fanouts_and_learn(dgl: PeerProcess, tiny_mag, tmp_path):
    from hetero_compare import mag_npz

    spec = dict(
        data=mag_npz(str(tmp_path), "mag", tiny_mag),
        fanouts=[3, 2],
        batch_size=64,
        hidden=8,
        dropout=0.5,
        lr=0.01,
        num_classes=tiny_mag.dataset.num_classes,
        batches=4,
        warmup=0,
    )
    info = dgl.setup("rgcn_batches", **spec)
    first = info["stats"]["loss"]
    answer = dgl.time("rgcn_batches", 5)
    stats = answer["stats"]
    assert len(answer["times_s"]) == 5 and stats["batches_per_call"] == 4
    assert stats["seeds"][:9] == [64] * 9  # 630 training papers: 9 full batches, then 54
    assert stats["seeds"][9] == 630 - 9 * 64
    assert answer["peak_rss_gb"] > 0
    assert math.isfinite(first) and stats["loss"] < first

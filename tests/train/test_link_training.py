"""The full-batch link trainer (sparsegcn/train/links.py): the loss weights by hand,
metrics against scikit-learn, one compile for every epoch, and per-seed data in one
vmapped program equal to each seed trained alone."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from link_graphs import communities, data_of
from sklearn.metrics import average_precision_score, roc_auc_score

import sparsegcn as sg
from sparsegcn import transforms
from sparsegcn.nn.registry import create_model
from sparsegcn.sampling.links import random_link_split
from sparsegcn.train.links import (
    LinkTrainConfig,
    eval_set,
    evaluate,
    fit_links,
    link_data,
    stack_link_data,
)


def test_link_data_weights_are_kipf_and_wellings():
    train = np.array([[0, 1], [1, 2], [3, 4]])
    data = link_data(None, None, 6, train, None, None)
    e, n2 = 6, 36  # directed train edges, N^2
    assert np.isclose(float(data.pos_weight), (n2 - e) / e)
    assert np.isclose(float(data.norm), n2 / (2 * (n2 - e)))
    labels = {tuple(p) for p in np.asarray(data.labels).tolist()}
    want = {(0, 1), (1, 0), (1, 2), (2, 1), (3, 4), (4, 3)} | {(i, i) for i in range(6)}
    assert labels == want and len(np.asarray(data.labels)) == len(want)


@pytest.mark.parametrize("recon", ["full", "sampled"])
def test_training_compiles_once_learns_and_reports_sklearns_metrics(recon, monkeypatch):
    graph, x = communities()
    data = data_of(graph, x, 0)
    model = create_model("gae", 4, 4, hidden=8, layers=2, dropout=0.0, recon=recon)
    traces = {"n": 0}
    encode = model.encode

    def counting(*args, **kwargs):
        traces["n"] += 1
        return encode(*args, **kwargs)

    model = model._replace(encode=counting)
    result = fit_links(model, data, LinkTrainConfig(epochs=60), seeds=(0, 1))
    assert traces["n"] == 1  # the training step traced once for 60 epochs
    # 20 calls of 3 epochs (about 20 calls a run), each timed.
    assert result.losses.shape == (60, 2) and result.step_ms.shape == (20,)
    assert (result.losses[-1] < result.losses[0]).all()
    for k in range(2):
        params = jax.tree.map(lambda a, k=k: a[k], result.params)
        z = np.asarray(model.embed(params, data.graph, data.features), np.float64)
        test = data.test
        pos = np.asarray(test.positives)
        neg = np.asarray(test.negatives)
        scores = np.concatenate(
            [(z[pos[:, 0]] * z[pos[:, 1]]).sum(1), (z[neg[:, 0]] * z[neg[:, 1]]).sum(1)]
        )
        labels = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
        np.testing.assert_allclose(result.test["auc"][k], roc_auc_score(labels, scores), atol=1e-5)
        np.testing.assert_allclose(
            result.test["ap"][k], average_precision_score(labels, scores), atol=1e-5
        )
    assert result.test["auc"].mean() > 0.75  # the communities are learnt


def test_chunks_of_epochs_equal_one_epoch_a_call_and_the_tail_chunk_stops_at_the_end():
    graph, x = communities(seed=2)
    data = data_of(graph, x, 0)
    model = create_model("vgae", 4, 4, hidden=8, layers=2, dropout=0.0)
    one = fit_links(model, data, LinkTrainConfig(epochs=7, epochs_per_call=1), seeds=(0, 1))
    # 3 calls: 3 + 3 + 1 epochs; the last call's two idle epochs change nothing.
    chunked = fit_links(model, data, LinkTrainConfig(epochs=7, epochs_per_call=3), seeds=(0, 1))
    assert one.step_ms.shape == (7,) and chunked.step_ms.shape == (3,)
    np.testing.assert_allclose(chunked.losses, one.losses, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(chunked.params), jax.tree.leaves(one.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(chunked.test["auc"], one.test["auc"], rtol=1e-6)
    with pytest.raises(ValueError, match="epochs_per_call must be"):
        fit_links(model, data, LinkTrainConfig(epochs=7, epochs_per_call=0))


def test_per_seed_splits_in_one_program_equal_each_seed_alone():
    graph, x = communities(seed=1)
    members = [data_of(graph, x, s) for s in (3, 4)]
    model = create_model("vgae", 4, 4, hidden=8, layers=2, dropout=0.0)
    config = LinkTrainConfig(epochs=5)
    together = fit_links(model, stack_link_data(members), config, seeds=(3, 4), per_seed_data=True)
    for k, (seed, data) in enumerate(zip((3, 4), members, strict=True)):
        alone = fit_links(model, data, config, seeds=(seed,))
        np.testing.assert_allclose(together.losses[:, k], alone.losses[:, 0], rtol=1e-4)
        np.testing.assert_allclose(together.test["auc"][k], alone.test["auc"][0], atol=1e-5)


def test_trainer_refuses_bad_settings():
    graph, x = communities()
    model = create_model("gae", 4, 4, hidden=8, layers=2, dropout=0.0)
    with pytest.raises(ValueError, match="metric must be '', 'mrr' or 'hits@K', got 'acc'"):
        fit_links(model, data_of(graph, x, 0), LinkTrainConfig(metric="acc"))
    with pytest.raises(ValueError, match=r"train must be an int array of node pairs \[P, 2\]"):
        link_data(None, None, 4, np.zeros((3, 3), np.int64), None, None)


@pytest.mark.parametrize(
    ("sampler", "negatives"),
    # Each sampler and each negative kind by default; the third pair is slow.
    [
        pytest.param("tree", "pairs", marks=pytest.mark.slow),
        ("dedup", "pairs"),
        ("tree", "targets"),
    ],
)
def test_sampled_link_step_with_full_fanouts_equals_the_full_batch_step(sampler, negatives):
    from sparsegcn.nn.gae import sampled_reconstruction_loss
    from sparsegcn.train.links import (
        batch_endpoints,
        draw_negatives,
        sampled_link_data,
        sampled_link_loss,
    )

    graph, x = communities(n=24, seed=2)
    split = random_link_split(graph, val=0.1, test=0.2, seed=0)
    message = split.graph
    sampled = sampled_link_data(message, x, split.split["train"])
    full_graph = transforms.sort_edges(sg.nn.get_model_spec("sage").prepare_graph(message))
    model = create_model(
        "gae",
        4,
        4,
        hidden=8,
        layers=2,
        dropout=0.0,
        encoder="sage",
        recon="sampled",
        negatives=negatives,
    )
    params = model.init(jax.random.key(0))
    degree = int(np.bincount(np.asarray(message.receivers), minlength=24).max())
    fanouts = (degree, degree)  # every neighbour: the tree is the whole 2-hop neighbourhood
    pairs = jax.numpy.asarray(split.split["train"][:6].astype(np.int32))
    weights = jax.numpy.full((6,), 1 / 6, jax.numpy.float32)
    key = jax.random.key(9)

    def tree_loss(p):
        return sampled_link_loss(
            model, p, sampled, pairs, weights, key, fanouts, sampler=sampler, negatives=negatives
        )

    drawn = draw_negatives(negatives, jax.random.split(key, 3)[0], pairs, sampled.edges, 3)
    if negatives == "targets":  # each negative keeps its positive's source
        np.testing.assert_array_equal(np.asarray(drawn[:, 0]), np.asarray(pairs[:, 0]))

    def full_loss(p):
        z = model.embed(p, full_graph, x)
        return sampled_reconstruction_loss(model.decode(p, z, pairs), model.decode(p, z, drawn))

    (tree_value, tree_grad) = jax.jit(jax.value_and_grad(tree_loss))(params)
    (full_value, full_grad) = jax.jit(jax.value_and_grad(full_loss))(params)
    np.testing.assert_allclose(tree_value, full_value, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(tree_grad), jax.tree.leaves(full_grad), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    nodes, mask, local_pos, local_neg = batch_endpoints(
        pairs, drawn, shared_sources=negatives == "targets"
    )
    assert nodes.shape == ((3 if negatives == "targets" else 4) * 6,)
    ends = np.concatenate([np.asarray(pairs).ravel(), np.asarray(drawn).ravel()])
    assert int(mask.sum()) == len(np.unique(ends))  # distinct endpoints only
    np.testing.assert_array_equal(np.asarray(nodes)[np.asarray(local_pos)], np.asarray(pairs))
    np.testing.assert_array_equal(np.asarray(nodes)[np.asarray(local_neg)], np.asarray(drawn))


def test_evaluation_ranks_per_source_targets_and_shared_pairs_as_ogb_defines():
    from sparsegcn.train.links import EvalSet, score_set, split_metrics

    model = create_model("gae", 4, 3, hidden=8, layers=2, dropout=0.0, embedding_dim=3)
    rng = np.random.default_rng(3)
    z = jax.numpy.asarray(rng.normal(size=(20, 3)).astype(np.float32))
    zn = np.asarray(z, np.float64)
    pos = rng.integers(0, 20, (6, 2)).astype(np.int32)
    targets = rng.integers(0, 20, (6, 7)).astype(np.int32)  # per-source negatives, OGB citation2
    p, q = score_set(
        model, {"decoder": {}}, z, EvalSet(jax.numpy.asarray(pos), jax.numpy.asarray(targets))
    )
    want_p = (zn[pos[:, 0]] * zn[pos[:, 1]]).sum(1)
    want_q = (zn[pos[:, :1]] * zn[targets]).sum(-1)
    np.testing.assert_allclose(p, want_p, rtol=1e-5)
    np.testing.assert_allclose(q, want_q, rtol=1e-5, atol=1e-6)
    got = split_metrics(p, q, "mrr")["mrr"]
    rank = 1 + 0.5 * ((want_q >= want_p[:, None]).sum(1) + (want_q > want_p[:, None]).sum(1))
    np.testing.assert_allclose(got, np.mean(1 / rank), rtol=1e-5)
    shared = rng.integers(0, 20, (30, 2)).astype(np.int32)  # pairs shared by all, OGB collab
    p, q = score_set(
        model, {"decoder": {}}, z, EvalSet(jax.numpy.asarray(pos), jax.numpy.asarray(shared))
    )
    assert q.shape == (30,)
    got = split_metrics(p, q, "hits@5")
    kth = np.sort((zn[shared[:, 0]] * zn[shared[:, 1]]).sum(1))[-5]
    np.testing.assert_allclose(got["hits@5"], np.mean(want_p > kth), rtol=1e-6)


def test_two_targets_per_source_are_scored_per_source_when_the_form_says_so():
    # Before: the form was told by the width alone, so [P, 2] per-source negatives
    # (citation2 with two per source) were scored as 2 node pairs (u = t1, v = t2).
    from sparsegcn.train.links import score_set

    model = create_model("gae", 4, 3, hidden=8, layers=2, dropout=0.0, embedding_dim=3)
    rng = np.random.default_rng(4)
    zn = rng.normal(size=(20, 3))
    pos = rng.integers(0, 20, (6, 2)).astype(np.int32)
    targets = rng.integers(0, 20, (6, 2)).astype(np.int32)
    z = jax.numpy.asarray(zn, np.float32)
    split = eval_set(pos, targets, "targets")
    assert split.per_source
    _, q = jax.jit(lambda z: score_set(model, {"decoder": {}}, z, split))(z)
    np.testing.assert_allclose(q, (zn[pos[:, :1]] * zn[targets]).sum(-1), rtol=1e-5, atol=1e-6)
    _, q = score_set(model, {"decoder": {}}, z, eval_set(pos, targets))  # no form: pairs
    np.testing.assert_allclose(q, (zn[targets[:, 0]] * zn[targets[:, 1]]).sum(-1), rtol=1e-5)
    with pytest.raises(ValueError, match=r"form 'pairs' must be \[Q, 2\], got \(6, 3\)"):
        eval_set(pos, np.zeros((6, 3), np.int32), "pairs")
    with pytest.raises(ValueError, match=r"form 'targets' must be \[P, K\] with P = 6"):
        eval_set(pos, np.zeros((5, 2), np.int32), "targets")


@pytest.mark.parametrize("rows", [1, 4, 6])
def test_per_source_scores_in_chunks_of_sources_equal_all_at_once(rows, monkeypatch):
    from sparsegcn.train import links

    monkeypatch.setattr(links, "SCORE_ROWS", rows)  # 4: a remainder of 2 sources
    model = create_model("gae", 4, 3, hidden=8, layers=2, dropout=0.0, embedding_dim=3)
    rng = np.random.default_rng(5)
    zn = rng.normal(size=(20, 3))
    pos = rng.integers(0, 20, (6, 2)).astype(np.int32)
    targets = rng.integers(0, 20, (6, 7)).astype(np.int32)
    split = links.EvalSet(jax.numpy.asarray(pos), jax.numpy.asarray(targets))
    _, q = jax.jit(lambda z: links.score_set(model, {"decoder": {}}, z, split))(
        jax.numpy.asarray(zn, np.float32)
    )
    np.testing.assert_allclose(q, (zn[pos[:, :1]] * zn[targets]).sum(-1), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_sampled_link_epochs_run_as_one_program_for_every_seed():
    from sparsegcn.train.links import fit_links_sampled, sampled_link_data

    graph, x = communities(n=24, seed=2)
    split = random_link_split(graph, val=0.1, test=0.2, seed=0)
    sampled = sampled_link_data(split.graph, x, split.split["train"])
    full_graph = transforms.sort_edges(sg.nn.get_model_spec("sage").prepare_graph(split.graph))
    model = create_model(
        "gae", 4, 4, hidden=8, layers=2, dropout=0.0, encoder="sage", recon="sampled"
    )
    eval_data = data_of(graph, x, 0)._replace(graph=full_graph)
    result = fit_links_sampled(
        model,
        sampled,
        eval_data,
        LinkTrainConfig(epochs=3),
        fanouts=(5, 5),
        batch_size=16,
        seeds=(0, 1),
    )
    assert result.losses.shape == (3, 2) and np.isfinite(result.losses).all()
    assert result.test["auc"].shape == (2,)
    # Evaluated layer by layer on the chunked sampling graph: the full-batch numbers.
    for seed in range(2):
        params = jax.tree.map(lambda a, s=seed: a[s], result.params)
        want = evaluate(model, params, eval_data)
        for split, got in (("test", result.test), ("valid", result.valid)):
            np.testing.assert_allclose(got["auc"][seed], want[split]["auc"], rtol=1e-5)
            np.testing.assert_allclose(got["ap"][seed], want[split]["ap"], rtol=1e-5)


# -- several devices (tests/conftest.py simulates 8 CPU devices) ----------------


def assert_same_run(got, want):
    np.testing.assert_allclose(got.losses, want.losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def counting_encoder(model):
    """``model`` whose ``encode`` counts its traces in the returned dict."""
    traces = {"n": 0}
    encode = model.encode

    def counting(*args, **kwargs):
        traces["n"] += 1
        return encode(*args, **kwargs)

    return model._replace(encode=counting), traces


def test_full_batch_on_two_devices_equals_one_and_compiles_once():
    graph, x = communities(seed=1)
    data = stack_link_data([data_of(graph, x, s) for s in (3, 4)])
    # VGAE's noise and the negatives are drawn from the same keys on one device and two.
    model = create_model("vgae", 4, 4, hidden=8, layers=2, dropout=0.0, recon="sampled")
    config = LinkTrainConfig(epochs=4)
    one = fit_links(model, data, config, seeds=(3, 4), per_seed_data=True)
    counted, traces = counting_encoder(model)
    two = fit_links(counted, data, config, seeds=(3, 4), per_seed_data=True, devices=2)
    assert traces["n"] == 1  # one trace of the step for every epoch
    assert (one.devices, two.devices) == (1, 2)
    assert all(len(leaf.sharding.device_set) == 2 for leaf in jax.tree.leaves(two.params))
    assert_same_run(two, one)
    np.testing.assert_allclose(two.test["auc"], one.test["auc"], atol=1e-5)


@pytest.mark.parametrize("recon", ["full", "sampled"])
def test_a_full_batch_step_on_two_devices_sums_their_shares(recon):
    from sparsegcn.train.links import link_loss, link_mesh

    graph, x = communities(seed=1)
    data = data_of(graph, x, 0)
    model = create_model("gae", 4, 4, hidden=8, layers=2, dropout=0.0, recon=recon)
    params = model.init(jax.random.key(0))
    mesh = link_mesh(2)
    assert link_mesh(1) is None

    def grad(mesh):
        return jax.jit(
            jax.grad(lambda p: link_loss(model, p, data, jax.random.key(1), 3, mesh=mesh))
        )

    two = grad(mesh).lower(params).compile()
    assert "all-reduce(" in two.as_text()  # the devices' partial sums
    for a, b in zip(jax.tree.leaves(two(params)), jax.tree.leaves(grad(None)(params)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def sampled_setup(n=24):
    from sparsegcn.train.links import sampled_link_data

    graph, x = communities(n=n, seed=2)
    split = random_link_split(graph, val=0.1, test=0.2, seed=0)
    sampled = sampled_link_data(split.graph, x, split.split["train"])
    degree = int(np.bincount(np.asarray(split.graph.receivers), minlength=n).max())
    model = create_model(
        "gae", 4, 4, hidden=8, layers=2, dropout=0.0, encoder="sage", recon="sampled"
    )
    return split, sampled, model, (degree, degree)


# Slow: the full-batch link step on two devices is checked above (default suite).
@pytest.mark.slow
def test_sampled_epochs_on_two_devices_equal_one_and_compile_once():
    from sparsegcn.train.links import fit_links_sampled

    split, sampled, model, every = sampled_setup()
    full_graph = transforms.sort_edges(sg.nn.get_model_spec("sage").prepare_graph(split.graph))
    graph, x = communities(n=24, seed=2)
    eval_data = data_of(graph, x, 0)._replace(graph=full_graph)
    # Every neighbour and no dropout: the trees, hence the steps, do not depend on the keys.
    # 13 edges a batch: 2 devices take 7 slots each, one of them padding.
    kwargs = {"fanouts": every, "batch_size": 13, "seeds": (0, 1)}
    config = LinkTrainConfig(epochs=2)
    one = fit_links_sampled(model, sampled, eval_data, config, **kwargs)
    counted, traces = counting_encoder(model)
    two = fit_links_sampled(counted, sampled, eval_data, config, devices=2, **kwargs)
    assert traces["n"] == 1  # the epoch program traced once for both epochs
    assert two.devices == 2 and one.losses.shape == (2, 2)
    assert_same_run(two, one)


def test_a_sampled_batch_on_two_devices_is_two_halves_and_their_gradient_sum():
    from sparsegcn.train.links import link_mesh, sampled_link_loss

    split, sampled, model, every = sampled_setup()
    params = model.init(jax.random.key(0))
    pairs = jax.numpy.asarray(split.split["train"][:13].astype(np.int32))
    weights = jax.numpy.full((13,), 1 / 13, jax.numpy.float32)
    key = jax.random.key(5)

    def grad(mesh):
        return jax.jit(
            jax.value_and_grad(
                lambda p: sampled_link_loss(
                    model, p, sampled, pairs, weights, key, every, mesh=mesh
                )
            )
        )

    two = grad(link_mesh(2)).lower(params).compile()
    # Each device samples and encodes its own half: only the gradients are summed.
    assert "all-reduce(" in two.as_text() and "all-gather(" not in two.as_text()
    (loss2, g2), (loss1, g1) = two(params), grad(None)(params)
    np.testing.assert_allclose(loss2, loss1, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_more_devices_than_there_are_are_refused_before_training():
    graph, x = communities()
    model = create_model("gae", 4, 4, hidden=8, layers=2, dropout=0.0)
    with pytest.raises(ValueError, match=r"devices=64 \(--devices\) asks for 64 local devices"):
        fit_links(model, data_of(graph, x, 0), LinkTrainConfig(epochs=1), devices=64)


# Slow: --max-batches is the node runs' option too, tested in tests/train/test_streamed.py.
@pytest.mark.slow
def test_max_batches_trains_that_many_batches_and_all_of_them_is_the_whole_epoch():
    from sparsegcn.train.links import fit_links_sampled

    split, sampled, model, _ = sampled_setup()
    graph, x = communities(n=24, seed=2)
    eval_data = data_of(graph, x, 0)._replace(
        graph=transforms.sort_edges(sg.nn.get_model_spec("sage").prepare_graph(split.graph))
    )
    batches = -(-int(sampled.train.shape[0]) // 16)

    def fit(limit):
        return fit_links_sampled(
            model,
            sampled,
            eval_data,
            LinkTrainConfig(epochs=2),
            fanouts=(5, 5),
            batch_size=16,
            max_batches=limit,
        )

    whole, capped, one = fit(0), fit(batches + 3), fit(1)
    for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(capped.params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert batches > 1 and np.isfinite(one.losses).all()
    moved = [
        float(np.abs(np.asarray(a) - np.asarray(b)).max())
        for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(one.params), strict=True)
    ]
    assert max(moved) > 0  # fewer steps: other params
    with pytest.raises(ValueError, match="max_batches"):
        fit(-1)


def test_sampled_per_seed_splits_in_one_program_equal_each_seed_alone():
    """Kipf & Welling split anew for every run: sampled training takes one split a
    seed too, stacked, in one program, and each seed equals its split trained alone."""
    from sparsegcn.train.links import (
        fit_links_sampled,
        sampled_link_data,
        stack_sampled_link_data,
    )

    graph, x = communities(n=24, seed=2)
    model = create_model(
        "gae", 4, 4, hidden=8, layers=2, dropout=0.0, encoder="sage", recon="sampled"
    )
    prepare = sg.nn.get_model_spec("sage").prepare_graph
    members, evals = [], []
    for seed in (3, 4):
        split = random_link_split(graph, val=0.1, test=0.2, seed=seed)
        members.append(sampled_link_data(split.graph, x, split.split["train"]))
        evals.append(
            data_of(graph, x, seed)._replace(graph=transforms.sort_edges(prepare(split.graph)))
        )
    config = LinkTrainConfig(epochs=2)

    def fit(sampled, eval_data, seeds, per_seed):
        return fit_links_sampled(
            model,
            sampled,
            eval_data,
            config,
            fanouts=(5, 5),
            batch_size=16,
            seeds=seeds,
            per_seed_data=per_seed,
        )

    together = fit(stack_sampled_link_data(members), stack_link_data(evals), (3, 4), True)
    for k, seed in enumerate((3, 4)):
        alone = fit(members[k], evals[k], (seed,), False)
        np.testing.assert_allclose(together.losses[:, k], alone.losses[:, 0], rtol=1e-5)
        for a, b in zip(
            jax.tree.leaves(together.params), jax.tree.leaves(alone.params), strict=True
        ):
            np.testing.assert_allclose(np.asarray(a)[k], np.asarray(b)[0], rtol=1e-4, atol=1e-6)
        for name in ("auc", "ap"):
            np.testing.assert_allclose(together.test[name][k], alone.test[name][0], rtol=1e-5)
    assert together.test["auc"][0] != together.test["auc"][1]  # each its own split


@pytest.mark.parametrize("recon", ["full", "sampled"])
def test_the_packed_encoder_graph_trains_as_the_edge_list(recon):
    """What `sparsegcn train --task link` prepares (CSR, one split a seed,
    stacked) against the receiver-sorted edge list: the same run."""
    from sparsegcn.experiment.build import model_graph

    graph, x = communities(seed=3)
    runs = {}
    for packed in (False, True):
        members = []
        for seed in (0, 1):
            split = random_link_split(graph, val=0.1, test=0.2, seed=seed)
            members.append(
                data_of(graph, x, seed)._replace(
                    graph=model_graph(split.graph, "gcn", packed=packed)
                )
            )
        data = stack_link_data(members)
        assert data.graph.layout_name == ("csr" if packed else "edges")
        model = create_model("gae", 4, 4, hidden=8, layers=2, dropout=0.0, recon=recon)
        runs[packed] = fit_links(
            model, data, LinkTrainConfig(epochs=20), seeds=(0, 1), per_seed_data=True
        )
    np.testing.assert_allclose(runs[True].losses, runs[False].losses, rtol=2e-5)
    np.testing.assert_allclose(runs[True].test["auc"], runs[False].test["auc"], atol=1e-4)


def test_link_data_refuses_node_ids_outside_the_graph():
    ok = eval_set([[0, 1]], [[1, 3]])
    # Before: labels held the pair (5, 0) of a 4-node graph, and the full loss read it clamped.
    with pytest.raises(ValueError, match=r"^train\[1, 1\] = 5 is not a node id in \[0, 4\)"):
        link_data(None, None, 4, np.array([[0, 1], [0, 5]]), ok, ok)
    with pytest.raises(
        ValueError, match=r"^valid.positives\[0, 1\] = 999 is not a node id in \[0, 4\)"
    ):
        link_data(None, None, 4, [[0, 1]], eval_set([[0, 999]], [[1, 3]]), ok)
    with pytest.raises(ValueError, match=r"^test.negatives\[1, 2\] = -1 is not a node id"):
        link_data(None, None, 4, [[0, 1]], ok, eval_set([[0, 1], [2, 3]], [[1, 2, 3], [0, 1, -1]]))
    with pytest.raises(ValueError, match=r"^num_nodes=14 disagrees with graph.num_nodes=4"):
        link_data(sg.Graph(np.array([0]), np.array([1]), None, 4), None, 14, [[0, 1]], ok, ok)
    with pytest.raises(ValueError, match=r"^features has 3 rows but the graph has num_nodes=4"):
        link_data(None, np.ones((3, 2), np.float32), 4, [[0, 1]], ok, ok)
    # Ids past int32, named as given (before: 2**32 + 3 became the valid id 3).
    wide = np.array([[0, 1], [2**32 + 3, 1]], np.int64)
    with pytest.raises(ValueError, match=r"^train\[1, 0\] = 4294967299 is not a node id"):
        link_data(None, None, 4, wide, ok, ok)
    with pytest.raises(ValueError, match=r"^negatives\[0, 1\] = 4294967297 is not a node id"):
        eval_set([[0, 1]], np.array([[1, 2**32 + 1]], np.uint64))


def test_fit_links_refuses_evaluation_pairs_outside_the_graph_before_training():
    graph, x = communities(n=16)
    data = data_of(graph, x, 0)
    model = create_model("gae", 4, 4, hidden=4, layers=1, dropout=0.0)
    bad = data.test._replace(positives=data.test.positives.at[1, 1].set(999))
    # Before: trained and reported a test AUC, the id 999 clamped to node 15.
    with pytest.raises(
        ValueError,
        match=r"^fit_links: data.test.positives\[1, 1\] = 999 is not a node id in \[0, 16\)",
    ):
        fit_links(model, data._replace(test=bad), LinkTrainConfig(epochs=1))
    stacked = stack_link_data(
        [
            data,
            data._replace(
                valid=data.valid._replace(negatives=data.valid.negatives.at[0, 0].set(-4))
            ),
        ]
    )
    with pytest.raises(
        ValueError, match=r"^fit_links: data.valid.negatives\[1, 0, 0\] = -4 is not a node id"
    ):
        fit_links(model, stacked, LinkTrainConfig(epochs=1), seeds=(0, 1), per_seed_data=True)


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"learning_rate": -1.0}, ValueError, r"^learning_rate must be > 0.0, got -1.0$"),
        ({"learning_rate": 0.0}, ValueError, r"^learning_rate must be > 0.0, got 0.0$"),
        ({"learning_rate": float("nan")}, ValueError, r"learning_rate must be a finite number"),
        ({"learning_rate": "0.1"}, TypeError, r"^learning_rate must be a number > 0.0, got '0.1'"),
        ({"learning_rate": True}, TypeError, r"^learning_rate must be a number"),
        ({"weight_decay": -5.0}, ValueError, r"^weight_decay must be >= 0.0, got -5.0$"),
        ({"weight_decay": "0"}, TypeError, r"^weight_decay must be a number >= 0.0, got '0'"),
        ({"epochs": 0}, ValueError, r"^epochs must be >= 1, got 0$"),
        ({"decay_layers": "some"}, ValueError, r"^decay_layers must be 'none', 'first' or 'all'"),
    ],
)
def test_link_train_config_refuses_bad_settings_when_built(settings, error, message):
    # Before: learning_rate=-1 ran gradient ascent, '0.1' failed inside optax.
    with pytest.raises(error, match=message):
        LinkTrainConfig(**settings)
    config = LinkTrainConfig(learning_rate=np.float32(0.5), weight_decay=0, epochs=np.int64(3))
    assert (config.learning_rate, config.weight_decay, config.epochs) == (0.5, 0, 3)

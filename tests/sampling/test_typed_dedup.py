"""The de-duplicated typed sampler against independent oracles: the dense per-relation
R-GCN with full fanouts (forward and gradient), neighbour sets from the dense relation
matrices, numpy means over the sampled edges, a hand-counted overflow, sizes by hand,
padding swapped for garbage, and compile counts."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import compiled_programs
from hetero_graphs import (
    CITES,
    EMPTY,
    TOPIC,
    WRITES,
    dense_rgcn,
    paper_features,
    random_hetero,
    small_hetero,
)

from sparsegcn.message_passing import message_passing
from sparsegcn.nn.rgcn import rgcn
from sparsegcn.sampling.typed import HeteroCSR, TypedSample
from sparsegcn.sampling.typed_dedup import (
    TypedDedupSample,
    check_typed_caps,
    sample_hetero,
    sample_typed_dedup,
    typed_dedup_sizes,
)


def sample(graph, seeds, fanouts, key=0, **kwargs) -> TypedDedupSample:
    return sample_typed_dedup(
        HeteroCSR.from_graph(graph),
        np.asarray(seeds),
        fanouts,
        seed_type="paper",
        key=jax.random.key(key),
        **kwargs,
    )


def in_neighbours(graph, edge_type) -> list[set[int]]:
    a = np.asarray(graph.to_dense(edge_type))
    return [set(np.flatnonzero(row).tolist()) for row in a]


@pytest.mark.parametrize(
    ("num_bases", "layers"),
    [
        (2, 2),
        pytest.param(0, 2, marks=pytest.mark.slow),
        pytest.param(2, 3, marks=pytest.mark.slow),
    ],
)
def test_full_fanouts_equal_the_dense_rgcn_forward_and_gradient(num_bases, layers):
    g = small_hetero().add_reverse_relations()
    model = rgcn(
        g.num_nodes,
        g.edge_types,
        {"paper": 4},
        3,
        target="paper",
        hidden=5,
        num_layers=layers,
        num_bases=num_bases,
    )
    params = model.init(jax.random.key(0))
    x = {"paper": paper_features()}
    seeds = np.array([0, 1, 2, 3, 4, 5, 6, 2, 0])  # 2 twice; the last slot padding
    mask = np.arange(9) < 8
    s = sample(g, seeds, (3,) * layers, key=3, mask=mask)  # 3: the largest in-degree
    assert all(int(v.sum()) == 0 for v in s.overflow.values())
    real = seeds[mask]
    dense = jax.jit(dense_rgcn, static_argnums=3)(params, g, x, "paper")
    out = jax.jit(model.apply)(params, s, x)
    assert out.shape == (9, 3)
    np.testing.assert_allclose(out[:8], dense[real], rtol=1e-5, atol=1e-6)
    # The rows the last layer reads (predict's embeddings) are the full graph's too.
    embed = jax.jit(functools.partial(model.apply, embed=True))
    logits, hidden = embed(params, s, x)
    full_logits, full_hidden = embed(params, g, x)
    np.testing.assert_allclose(logits, out, rtol=1e-6, atol=1e-7)
    assert hidden.shape == (9, 5)
    np.testing.assert_allclose(hidden[:8], full_hidden[real], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(full_logits, dense, rtol=1e-5, atol=1e-6)
    weights = jnp.asarray(np.random.default_rng(0).normal(size=(8, 3)), jnp.float32)
    grad_s = jax.jit(jax.grad(lambda p: jnp.sum(model.apply(p, s, x)[:8] * weights)))(params)
    grad_d = jax.jit(jax.grad(lambda p: jnp.sum(dense_rgcn(p, g, x, "paper")[real] * weights)))(
        params
    )
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), grad_s, grad_d
    )


def test_rows_are_distinct_and_every_edge_is_a_real_edge_of_its_relation():
    g = random_hetero(seed=1)
    first = {"cites": 2, "writes": 3, "has_topic": 2, "rev_cites": 1, "rev_writes": 2}
    fanouts = ({**first, "rev_has_topic": 4}, 2)
    seeds = np.array([0, 4, 9, 13, 21, 29])  # distinct (seed slots are rows as given)
    s = sample(g, seeds, fanouts, key=2)
    table = {k: (fanouts[0][k[1]], 2) for k in g.edge_types}
    sizes = typed_dedup_sizes(len(seeds), fanouts, g.edge_types, g.num_nodes, seed_type="paper")
    assert {t: list(s.sizes(t)) for t in g.node_types} == sizes
    neighbours = {k: in_neighbours(g, k) for k in g.edge_types}
    ids = {t: np.asarray(s.entries(t)) for t in g.node_types}
    real = {t: np.asarray(s.row_mask(t)) for t in g.node_types}
    for t in g.node_types:
        assert (ids[t][~real[t]] == 0).all()
        assert len(set(ids[t][real[t]].tolist())) == real[t].sum()  # distinct per type
    reached = {t: set() for t in g.node_types}
    reached["paper"] = set(seeds.tolist())
    for d in range(2):
        hop: dict[str, set] = {t: set() for t in g.node_types}
        for k in g.edge_types:
            src, _, dst = k
            rows = np.asarray(s.neighbors[d][k])
            ok = np.asarray(s.edge_masks[d][k])
            assert rows.shape == (s.sizes(dst)[d], table[k][d])
            targets = np.asarray(s.nodes[dst][d])
            target_mask = np.asarray(s.masks[dst][d])
            assert not ok[~target_mask].any() and (rows[~ok] == 0).all()
            assert (rows[ok] < s.offsets(src)[d + 2]).all()
            for i in np.flatnonzero(target_mask):
                got = ids[src][rows[i][ok[i]]].tolist()
                true = neighbours[k][targets[i]]
                assert len(got) == min(table[k][d], len(true))
                assert len(set(got)) == len(got) and set(got) <= true
                hop[src] |= set(got)
        for t in g.node_types:
            frontier = np.asarray(s.nodes[t][d + 1])[np.asarray(s.masks[t][d + 1])]
            assert sorted(frontier.tolist()) == sorted(hop[t] - reached[t])
            assert np.asarray(s.masks[t][d + 1])[: len(frontier)].all()  # real rows first
            reached[t] |= hop[t]
    unique = s.num_unique_nodes()
    assert {t: int(v) for t, v in unique.items()} == {t: int(real[t].sum()) for t in real}
    assert int(s.num_sampled_edges()) == sum(
        int(np.asarray(m).sum()) for hop_masks in s.edge_masks for m in hop_masks.values()
    )


def test_block_means_are_the_numpy_means_over_the_sampled_edges():
    g = random_hetero(seed=3)
    s = sample(g, np.arange(8), (3, 2), key=5, caps=(None, {"author": 4}))
    x = {
        t: np.random.default_rng(1).normal(size=(n, 3)).astype(np.float32)
        for t, n in g.num_nodes.items()
    }

    @jax.jit
    def means(s):
        return {
            (parents, k): message_passing(
                s.block(parents, k),
                jnp.asarray(x[k[0]])[s.entries(k[0])[: s.offsets(k[0])[parents + 1]]],
                aggregate="mean",
            )
            for parents in (1, 2)
            for k in g.edge_types
        }

    computed = means(s)
    for parents in (1, 2):
        for k in g.edge_types:
            src, _, dst = k
            mean = np.asarray(computed[parents, k])
            assert mean.shape == (s.offsets(dst)[parents], 3)
            row = 0
            for d in range(parents):
                for i in range(s.sizes(dst)[d]):
                    ok = np.asarray(s.edge_masks[d][k])[i]
                    neigh = np.asarray(s.entries(src))[np.asarray(s.neighbors[d][k])[i][ok]]
                    expected = x[src][neigh].mean(axis=0) if ok.any() else np.zeros(3)
                    np.testing.assert_allclose(mean[row], expected, rtol=1e-5, atol=1e-6)
                    row += 1


def test_padding_never_reaches_the_seeds_outputs():
    """Padding rows and masked edge slots are replaced by other valid ids: the real
    seeds' logits do not move, and neither do the gradients."""
    g = random_hetero(seed=4)
    model = rgcn(g.num_nodes, g.edge_types, {"paper": 3}, 2, target="paper", hidden=4)
    params = model.init(jax.random.key(1))
    x = {"paper": np.random.default_rng(2).normal(size=(30, 3)).astype(np.float32)}
    mask = np.array([True, True, True, False, True, False])
    s = sample(g, [1, 7, 7, 3, 11, 0], (3, 2), key=6, mask=mask, caps=(6, 9))
    rng = np.random.default_rng(0)

    def garbage(ids, real, high):
        return jnp.where(real, ids, jnp.asarray(rng.integers(0, high, ids.shape), jnp.int32))

    swapped = s._replace(
        nodes={
            t: tuple(
                garbage(n, m, g.num_nodes[t]) for n, m in zip(s.nodes[t], s.masks[t], strict=True)
            )
            for t in s.nodes
        },
        neighbors=tuple(
            {
                k: garbage(rows, s.edge_masks[d][k], s.offsets(k[0])[d + 2])
                for k, rows in hop.items()
            }
            for d, hop in enumerate(s.neighbors)
        ),
    )
    assert any(
        not np.array_equal(a, b)
        for t in s.nodes
        for a, b in zip(s.nodes[t], swapped.nodes[t], strict=True)
    )
    apply = jax.jit(model.apply)
    np.testing.assert_array_equal(apply(params, s, x)[mask], apply(params, swapped, x)[mask])
    grad = jax.jit(jax.grad(lambda p, smp: jnp.sum(model.apply(p, smp, x)[mask] ** 2)))
    jax.tree.map(np.testing.assert_array_equal, grad(params, s), grad(params, swapped))


def test_overflow_drops_the_last_reached_nodes_and_counts_them():
    g = random_hetero(seed=6)
    seeds = np.arange(6)
    free = sample(g, seeds, (4, 2), key=1)
    capped = sample(g, seeds, (4, 2), key=1, caps=({"author": 5}, 3))
    assert capped.sizes("author") == (0, 5, 3) and capped.sizes("paper")[2] == 3
    assert capped.sizes("paper")[1] == free.sizes("paper")[1]  # uncapped at hop 1
    reached = int(np.asarray(free.masks["author"][1]).sum())
    assert reached > 5
    np.testing.assert_array_equal(capped.overflow["author"][0], reached - 5)
    np.testing.assert_array_equal(capped.overflow["paper"][0], 0)
    # Hop 1 draws the same edges; the first 5 authors in first-appearance order keep
    # their rows, and the edges to the others are masked.
    np.testing.assert_array_equal(
        capped.nodes["author"][1], np.asarray(free.nodes["author"][1])[:5]
    )
    writes = free.neighbors[0][WRITES]
    expected = np.asarray(free.edge_masks[0][WRITES]) & (np.asarray(writes) < 5)
    np.testing.assert_array_equal(capped.edge_masks[0][WRITES], expected)
    np.testing.assert_array_equal(
        np.asarray(capped.neighbors[0][WRITES])[expected], np.asarray(writes)[expected]
    )
    for k in (CITES, ("topic", "rev_has_topic", "paper")):
        np.testing.assert_array_equal(capped.edge_masks[0][k], free.edge_masks[0][k])
    # Hop 2: at most 3 new nodes of each type, the rest counted.
    for t in g.node_types:
        kept = int(np.asarray(capped.masks[t][2]).sum())
        assert kept <= 3 and (kept == 3 or int(capped.overflow[t][1]) == 0)
    assert sum(int(v[1]) for v in capped.overflow.values()) > 0


def test_sizes_by_hand_and_per_relation_fanouts():
    g = small_hetero().add_reverse_relations()
    # Into papers: cites, writes (authors), hosts (venues), rev_cites, rev_has_topic (topics).
    fanouts = [{k[1]: 1 for k in g.edge_types} | {"writes": 2, "cites": 3}, 1]
    sizes = typed_dedup_sizes(4, fanouts, g.edge_types, g.num_nodes, seed_type="paper")
    # Hop 1 reaches 4 x 3 (cites) + 4 x 1 (rev_cites) papers, at most the 7 there are.
    assert sizes == {
        "paper": [4, 7, 7],  # N_paper = 7
        "author": [0, 5, 5],  # 4 x 2 = 8 > 5 authors
        "topic": [0, 3, 3],
        "venue": [0, 2, 2],
    }
    capped = typed_dedup_sizes(
        4, fanouts, g.edge_types, g.num_nodes, seed_type="paper", caps=[{"paper": 2}, 1]
    )
    assert capped == {
        "paper": [4, 2, 1],
        "author": [0, 5, 1],
        "topic": [0, 3, 1],
        "venue": [0, 2, 1],
    }
    s = sample(g, [0, 1, 2, 3], fanouts)
    assert s.neighbors[0][WRITES].shape == (4, 2) and s.neighbors[0][CITES].shape == (4, 3)
    assert s.neighbors[1][CITES].shape == (7, 1) and s.neighbors[0][TOPIC].shape == (0, 1)
    assert not np.asarray(s.edge_masks[0][EMPTY]).any()
    assert s.seed_type == "paper" and s.batch_size == 4 and s.num_hops == 2


def test_a_scan_of_training_steps_compiles_once():
    g = random_hetero(seed=7)
    csr = HeteroCSR.from_graph(g)
    model = rgcn(g.num_nodes, g.edge_types, {"paper": 3}, 2, target="paper", hidden=4)
    x = {"paper": jnp.ones((30, 3), jnp.float32)}
    labels = jnp.asarray(np.arange(30) % 2, jnp.int32)

    @jax.jit
    def epoch(params, ids, mask, key):
        def step(params, batch):
            b_ids, b_mask, b_key = batch
            k_sample, k_drop = jax.random.split(b_key)
            s = sample_hetero(
                "dedup",
                csr,
                b_ids,
                (3, 2),
                seed_type="paper",
                key=k_sample,
                mask=b_mask,
                caps=(8, 12),
            )

            def loss(p):
                logits = model.apply(p, s, x, key=k_drop, training=True)
                picked = jnp.take_along_axis(logits, labels[b_ids][:, None], axis=1)[:, 0]
                return -jnp.sum(jnp.where(b_mask, picked, 0.0))

            grads = jax.grad(loss)(params)
            params = jax.tree.map(lambda p, gr: p - 0.1 * gr, params, grads)
            return params, sum(s.overflow.values())

        keys = jax.random.split(key, ids.shape[0])
        return jax.lax.scan(step, params, (ids, mask, keys))

    params = model.init(jax.random.key(0))
    rng = np.random.default_rng(0)

    def batches(i):
        ids = jnp.asarray(rng.integers(0, 30, (3, 5)), jnp.int32)
        return ids, jnp.asarray(np.arange(15).reshape(3, 5) < 15 - i), jax.random.key(i)

    params, overflow = jax.block_until_ready(epoch(params, *batches(0)))
    assert overflow.shape == (3, 2)
    assert compiled_programs(lambda: jax.block_until_ready(epoch(params, *batches(1)))) == []
    assert compiled_programs(lambda: jax.block_until_ready(epoch(params, *batches(4)))) == []
    tree = sample_hetero("tree", csr, np.arange(2), (2,), seed_type="paper", key=jax.random.key(0))
    assert isinstance(tree, TypedSample)


def test_bad_inputs_fail_early_with_the_offending_value():
    g = small_hetero()
    types = tuple(g.num_nodes)
    with pytest.raises(ValueError, match=r"one entry per hop \(2\), got \(3,\)"):
        check_typed_caps((3,), types, 2)
    with pytest.raises(ValueError, match=r"caps must be ints >= 1.*got '0,2'"):
        check_typed_caps("0,2", types, 2)
    with pytest.raises(ValueError, match=r"caps\[1\]\['paper'\] must be an int >= 1, got 0"):
        check_typed_caps([None, {"paper": 0}], types, 2)
    with pytest.raises(ValueError, match=r"caps\[0\] names \['ghost'\], not node types"):
        check_typed_caps([{"ghost": 3}], types, 1)
    assert check_typed_caps(4, types, 2) == ((4,) * 4, (4,) * 4)
    assert check_typed_caps([None, {"author": 2}], types, 2) == (
        (None,) * 4,
        (None, 2, None, None),
    )
    csr = HeteroCSR.from_graph(g)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"sampler must be one of .*got 'bfs'"):
        sample_hetero("bfs", csr, np.arange(2), (2,), seed_type="paper", key=key)
    with pytest.raises(ValueError, match="applies to the dedup sampler"):
        sample_hetero("tree", csr, np.arange(2), (2,), seed_type="paper", key=key, caps=3)
    with pytest.raises(ValueError, match="unknown seed type 'ghost'"):
        sample_typed_dedup(csr, np.arange(2), (2,), seed_type="ghost", key=key)
    with pytest.raises(ValueError, match=r"seeds\[1\] = 7 is out of range"):
        sample_typed_dedup(csr, np.array([0, 7]), (2,), seed_type="paper", key=key)
    with pytest.raises(ValueError, match="mask must have the seeds' shape"):
        sample_typed_dedup(csr, np.arange(2), (2,), seed_type="paper", key=key, mask=np.ones(3))
    s = sample_typed_dedup(csr, np.arange(2), (2,), seed_type="paper", key=key)
    with pytest.raises(ValueError, match=r"parents must be in \[1, 1\].*got 2"):
        s.block(2, CITES)
    model = rgcn(g.num_nodes, g.edge_types, {"paper": 4}, 3, target="paper", num_layers=2)
    with pytest.raises(ValueError, match=r"1 hops .* do not match 2 layers"):
        model.apply(model.init(key), s, {"paper": paper_features()})

"""The de-duplicated sampler against independent oracles: neighbour sets from scipy,
numpy means over the sampled multisets, the tree sampler where nothing repeats,
chi-square frequencies, a hand-counted overflow, and compile counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.stats
from helpers import compiled_programs

import sparsegcn as sg
from sparsegcn.sampling import (
    DedupSample,
    check_csr,
    dedup_sizes,
    sample_batch,
    sample_blocks,
    sample_dedup,
)


def random_graph(n=40, m=200, seed=0, isolated=3) -> sg.Graph:
    """A symmetric multigraph-free graph with repeats galore; the last nodes isolated."""
    rng = np.random.default_rng(seed)
    active = n - isolated
    g = sg.Graph(rng.integers(0, active, m), rng.integers(0, active, m), None, n)
    return sg.remove_self_loops(sg.to_undirected(g))


def in_neighbors(g: sg.Graph) -> list[set[int]]:
    a = sp.csr_array(
        (np.ones(g.num_edges), (np.asarray(g.receivers), np.asarray(g.senders))),
        shape=(g.num_nodes, g.num_nodes),
    )
    return [set(a.indices[a.indptr[r] : a.indptr[r + 1]].tolist()) for r in range(g.num_nodes)]


def forest(roots: int, children: int, depth: int) -> sg.Graph:
    """Disjoint complete trees whose edges point to the parent: from any root the
    ``depth``-hop neighbourhood has no repeated node, and each inner node has
    ``children`` in-neighbours."""
    senders, receivers, next_id = [], [], roots
    frontier = list(range(roots))
    for _ in range(depth):
        new = []
        for parent in frontier:
            kids = list(range(next_id, next_id + children))
            next_id += children
            senders += kids
            receivers += [parent] * children
            new += kids
        frontier = new
    return sg.Graph(np.array(senders), np.array(receivers), None, next_id)


def sample(g, seeds, fanouts, key=0, **kwargs) -> DedupSample:
    csr = g.to_csr()
    return sample_dedup(
        csr.indptr, csr.indices, np.asarray(seeds), fanouts, key=jax.random.key(key), **kwargs
    )


@pytest.mark.parametrize("fanouts", [(3,), (4, 2), (2, 3, 2)])
def test_rows_are_unique_and_edges_are_true_sampled_neighbours(fanouts):
    g = random_graph()
    neighbors = in_neighbors(g)
    seeds = np.array([0, 5, 9, 13, 21, 38, 39])  # 38, 39: isolated
    s = sample(g, seeds, fanouts)
    sizes = dedup_sizes(len(seeds), fanouts, num_nodes=g.num_nodes)
    assert s.sizes == tuple(sizes) and s.fanouts == fanouts and s.batch_size == 7
    offsets = np.cumsum([0, *sizes])
    ids = np.asarray(s.entries())
    mask = np.concatenate([np.asarray(m) for m in s.masks])
    assert (ids[~mask] == 0).all()
    assert len(set(ids[mask].tolist())) == mask.sum()  # every real row a distinct node
    assert int(s.num_unique_nodes()) == mask.sum()
    np.testing.assert_array_equal(np.asarray(s.overflow), 0)
    reached = set(seeds.tolist())
    for d, k in enumerate(fanouts):
        rows = np.asarray(s.neighbors[d])
        ok = np.asarray(s.edge_masks[d])
        parents = np.asarray(s.nodes[d])[np.asarray(s.masks[d])]
        hop = set()
        for i, parent in enumerate(parents):
            got = ids[rows[i][ok[i]]].tolist()
            assert len(got) == min(k, len(neighbors[parent]))
            assert len(set(got)) == len(got) and set(got) <= neighbors[parent]
            assert (rows[i][ok[i]] < offsets[d + 2]).all()
            hop |= set(got)
        assert not ok[len(parents) :].any() and (rows[~ok] == 0).all()
        # The frontier is exactly the newly reached nodes, real rows first.
        frontier = np.asarray(s.nodes[d + 1])[np.asarray(s.masks[d + 1])]
        assert sorted(frontier.tolist()) == sorted(hop - reached)
        assert np.asarray(s.masks[d + 1])[: len(frontier)].all()
        reached |= hop
    assert int(s.num_sampled_edges()) == sum(int(np.asarray(m).sum()) for m in s.edge_masks)


def test_mean_over_each_seeds_sampled_multiset_matches_numpy():
    # Reference by node ids: the mean of x over the sampled neighbours of each
    # target, read straight from the sample's edges; the block's by rows.
    g = random_graph(seed=2)
    seeds = np.arange(10)
    s = sample(g, seeds, (3, 4))
    x = np.random.default_rng(0).normal(size=(g.num_nodes, 5)).astype(np.float32)
    ids = np.asarray(s.entries())
    for parents in (1, 2):
        block = s.block(parents)
        x_src = jnp.asarray(x[ids[: block.num_src]])
        mean = np.asarray(block.aggregate(block.gather_src(x_src), "mean"))
        summed = np.asarray(block.product(x_src))
        assert mean.shape == (block.num_dst, 5)
        row = 0
        for d in range(parents):
            nodes, masks = np.asarray(s.nodes[d]), np.asarray(s.masks[d])
            for i in range(len(nodes)):
                edges = np.asarray(s.neighbors[d])[i][np.asarray(s.edge_masks[d])[i]]
                neigh = x[ids[edges]]
                expected = neigh.mean(axis=0) if len(edges) else np.zeros(5)
                if not masks[i]:
                    assert len(edges) == 0
                np.testing.assert_allclose(mean[row], expected, rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(summed[row], neigh.sum(axis=0), rtol=1e-5, atol=1e-5)
                row += 1
        counts = np.asarray(block.in_count())
        np.testing.assert_array_equal(
            counts,
            np.bincount(
                np.asarray(block.receivers)[np.asarray(block.edge_mask)], minlength=block.num_dst
            ),
        )


def test_same_frontiers_and_edges_as_the_tree_when_no_node_repeats():
    # Every node has 4 children and fanouts are below 4: the sample is random,
    # but with one key both samplers must draw the same edges.
    g = forest(roots=6, children=4, depth=3)
    csr = g.to_csr()
    seeds = np.array([3, 0, 5, 1])
    for key in range(3):
        tree = sample_blocks(csr.indptr, csr.indices, seeds, (3, 2, 2), key=jax.random.key(key))
        dedup = sample(g, seeds, (3, 2, 2), key=key)
        assert int(dedup.num_unique_nodes()) == sum(int(np.asarray(m).sum()) for m in tree.masks)
        ids = np.asarray(dedup.entries())
        for d in range(3):
            np.testing.assert_array_equal(dedup.nodes[d + 1], np.asarray(tree.nodes[d + 1]).ravel())
            children = ids[np.asarray(dedup.neighbors[d])]
            np.testing.assert_array_equal(
                children, np.asarray(tree.nodes[d + 1]).reshape(-1, tree.fanouts[d])
            )


def test_a_node_reached_twice_is_sampled_once():
    # Seeds 0 and 1 both receive from 2 and 3; 2 and 3 receive from 4..9.
    senders = [2, 3, 2, 3, *range(4, 10), *range(4, 10)]
    receivers = [0, 0, 1, 1, *[2] * 6, *[3] * 6]
    g = sg.Graph(np.array(senders), np.array(receivers), None, 10)
    s = sample(g, [0, 1], (2, 3))
    assert np.asarray(s.masks[1]).sum() == 2  # {2, 3} once, though reached 4 times
    assert sorted(np.asarray(s.nodes[1])[:2].tolist()) == [2, 3]
    assert np.asarray(s.edge_masks[1])[:2].sum() == 6  # each samples 3 of its 6 once
    tree_rows = sum(np.prod(sh) for sh in [(2,), (2, 2), (2, 2, 3)])
    assert s.num_rows < tree_rows and int(s.num_unique_nodes()) <= 2 + 2 + 6


def test_each_neighbour_is_chosen_with_equal_frequency():
    # Node 0 receives from 1..10; node i in 1..10 from its own 8 nodes. Hop 2
    # samples 3 of 8 for each first-hop node once per batch, however many
    # seed slots reached it: counted over keys, each private neighbour has
    # probability 3/8.
    senders, receivers = list(range(1, 11)), [0] * 10
    for i in range(1, 11):
        private = list(range(11 + 8 * (i - 1), 11 + 8 * i))
        senders += private
        receivers += [i] * 8
    g = sg.Graph(np.array(senders), np.array(receivers), None, 91)
    csr = g.to_csr()
    indptr, indices = check_csr(csr.indptr, csr.indices)
    run = jax.jit(
        lambda key: sample_dedup(indptr, indices, jnp.zeros((6,), jnp.int32), (4, 3), key=key)
    )
    counts = np.zeros(91, np.int64)
    expansions = np.zeros(91, np.int64)
    for k in range(400):
        s = run(jax.random.key(k))
        ids = np.asarray(s.entries())
        first = np.asarray(s.nodes[1])[np.asarray(s.masks[1])]
        expansions[first] += 1
        edges = np.asarray(s.neighbors[1])[np.asarray(s.edge_masks[1])]
        np.add.at(counts, ids[edges], 1)
    assert np.asarray(s.masks[1]).sum() <= 10  # 6 slots x 4 draws, deduplicated
    for i in range(1, 11):
        private = counts[11 + 8 * (i - 1) : 11 + 8 * i]
        assert private.sum() == 3 * expansions[i]  # once per batch that reached i
        assert scipy.stats.chisquare(private).pvalue > 1e-4
    # First hop: each of node 0's 10 neighbours is reached equally often.
    assert scipy.stats.chisquare(expansions[1:11]).pvalue > 1e-4


def test_overflow_drops_the_last_reached_nodes_and_counts_them():
    g = random_graph(seed=6)
    seeds = np.arange(6)
    free = sample(g, seeds, (4, 3), key=1)
    capped = sample(g, seeds, (4, 3), key=1, caps=(5, 2))
    assert capped.sizes == (6, 5, 2)
    reached = int(np.asarray(free.masks[1]).sum())
    assert reached > 5
    assert int(capped.overflow[0]) == reached - 5
    # The first 5 nodes in first-appearance order keep their rows, the rest none.
    np.testing.assert_array_equal(capped.nodes[1], np.asarray(free.nodes[1])[:5])
    free_rows = np.asarray(free.neighbors[0])
    expected = np.asarray(free.edge_masks[0]) & (free_rows < 6 + 5)
    np.testing.assert_array_equal(capped.edge_masks[0], expected)
    kept_rows = np.asarray(capped.neighbors[0])[expected]
    np.testing.assert_array_equal(kept_rows, free_rows[expected])
    # Hop 2 keeps at most 2 new nodes and counts the rest of what it reached.
    ids = np.asarray(capped.entries())
    kept2 = int(np.asarray(capped.masks[2]).sum())
    hop2 = set()
    rows1, ok1 = np.asarray(capped.neighbors[1]), np.asarray(capped.edge_masks[1])
    hop2 |= set(ids[rows1[ok1]].tolist())
    known = set(ids[: 6 + 5][np.concatenate([np.asarray(m) for m in capped.masks[:2]])].tolist())
    assert kept2 == len(hop2 - known) <= 2
    assert int(capped.overflow[1]) >= 0 and (kept2 == 2 or int(capped.overflow[1]) == 0)
    assert int(jnp.sum(capped.overflow)) > 0


def test_padded_seeds_and_isolated_nodes_get_no_rows_or_edges():
    g = random_graph(isolated=5)
    seeds = np.array([0, 36, 1, 2])
    s = sample(g, seeds, (3, 2), mask=np.array([True, True, True, False]))
    ok = np.asarray(s.edge_masks[0])
    assert ok[0].sum() == 3 and not ok[1].any() and not ok[3].any()  # 36 isolated, 3 padding
    assert int(s.nodes[0][3]) == 0


def test_no_recompile_across_batches_and_the_named_dispatch():
    g = random_graph(seed=5)
    csr = g.to_csr()
    indptr, indices = check_csr(csr.indptr, csr.indices)
    run = jax.jit(
        lambda seeds, mask, key: sample_batch(
            "dedup", indptr, indices, seeds, (6, 2), key=key, mask=mask, caps=(20, 30)
        )
    )
    rng = np.random.default_rng(0)

    def batch(i):
        seeds = jnp.asarray(rng.integers(0, g.num_nodes, 16), jnp.int32)
        return run(seeds, jnp.asarray(np.arange(16) < 16 - i), jax.random.key(i))

    jax.block_until_ready(batch(0))
    assert compiled_programs(lambda: [jax.block_until_ready(batch(i)) for i in range(1, 6)]) == []
    assert batch(1).sizes == (16, 20, 30)
    tree = sample_batch("tree", csr.indptr, csr.indices, np.arange(4), (2,), key=jax.random.key(0))
    assert isinstance(tree, sg.NeighborSample)


def test_a_scan_over_batches_compiles_once():
    g = random_graph(seed=9)
    csr = g.to_csr()
    indptr, indices = check_csr(csr.indptr, csr.indices)

    def epoch(seeds, keys):
        def step(total, inputs):
            s = sample_dedup(indptr, indices, inputs[0], (3, 3), key=inputs[1])
            return total + s.num_unique_nodes(), s.overflow

        return jax.lax.scan(step, jnp.zeros((), jnp.int32), (seeds, keys))

    seeds = jnp.asarray(np.arange(32).reshape(4, 8), jnp.int32)
    total, overflow = jax.jit(epoch)(seeds, jax.random.split(jax.random.key(0), 4))
    assert int(total) > 32 and np.asarray(overflow).shape == (4, 2)


def test_bad_inputs_fail_early_with_the_offending_value():
    g = random_graph()
    with pytest.raises(ValueError, match=r"one size per hop \(2\), got \(3,\)"):
        sample(g, [0], (2, 2), caps=(3,))
    with pytest.raises(ValueError, match=r"caps must be ints >= 1.*got \(0, 2\)"):
        sample(g, [0], (2, 2), caps=(0, 2))
    csr = g.to_csr()
    with pytest.raises(ValueError, match=r"sampler must be one of .*got 'bfs'"):
        sample_batch("bfs", csr.indptr, csr.indices, np.arange(2), (2,), key=jax.random.key(0))
    with pytest.raises(ValueError, match="applies to the dedup sampler"):
        sample_batch(
            "tree", csr.indptr, csr.indices, np.arange(2), (2,), key=jax.random.key(0), caps=3
        )
    with pytest.raises(ValueError, match="out of range"):
        sample(g, [0, g.num_nodes], (2,))
    assert dedup_sizes(1024, (15, 10, 5)) == [1024, 15360, 153600, 768000]
    assert dedup_sizes(1024, (15, 10, 5), num_nodes=10**5, caps="9000,80000,200000") == [
        1024,
        9000,
        80000,
        100000,
    ]


def test_first_positions_match_numpy():
    from sparsegcn.sampling.dedup import _first_positions

    ids = np.random.default_rng(3).integers(0, 50, 400).astype(np.int32)
    ids[::7] = np.iinfo(np.int32).max  # the padding sentinel groups like any id
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    np.testing.assert_array_equal(jax.jit(_first_positions)(jnp.asarray(ids)), first[inverse])

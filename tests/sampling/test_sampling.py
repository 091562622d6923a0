"""On-device neighbour sampling and chunked propagation, against independent oracles:
neighbour sets from scipy, chi-square uniformity, uint64 arithmetic, and
``propagate`` itself."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.stats
from graphs import GRAPH_CASES

import sparsegcn as sg
from sparsegcn.sampling import (
    ChunkedGraph,
    check_csr,
    propagate_chunk,
    propagate_chunked,
    sample_blocks,
    sample_neighbors,
    sample_positions,
    tree_sizes,
    uniform_below,
)
from sparsegcn.sampling.neighbor import mulhi_u32

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def simple_graph(n=40, m=160, seed=0, isolated=3) -> sg.Graph:
    """A symmetric graph without duplicates; the last ``isolated`` nodes have no edges."""
    rng = np.random.default_rng(seed)
    active = n - isolated
    g = sg.Graph(rng.integers(0, active, m), rng.integers(0, active, m), None, n)
    return sg.remove_self_loops(sg.to_undirected(g))


def in_neighbors(g: sg.Graph) -> list[list[int]]:
    """Each node's in-neighbour list (with multiplicity), from scipy: row r of A."""
    a = sp.csr_array(
        (np.ones(g.num_edges), (np.asarray(g.receivers), np.asarray(g.senders))),
        shape=(g.num_nodes, g.num_nodes),
    )
    a.sum_duplicates()
    out = []
    for r in range(g.num_nodes):
        cols = a.indices[a.indptr[r] : a.indptr[r + 1]]
        counts = a.data[a.indptr[r] : a.indptr[r + 1]].astype(int)
        out.append(sorted(np.repeat(cols, counts).tolist()))
    return out


def count_compiles(fn) -> int:
    events = []

    def listener(event, duration, **kwargs):
        if event == COMPILE_EVENT:
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return len(events)


# -- random words ---------------------------------------------------------------


def test_mulhi_matches_64_bit_arithmetic():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**32, 5000, dtype=np.uint64)
    b = rng.integers(0, 2**32, 5000, dtype=np.uint64)
    edge = np.array([0, 1, 2**16 - 1, 2**16, 2**32 - 1], np.uint64)
    a, b = np.concatenate([a, np.repeat(edge, 5)]), np.concatenate([b, np.tile(edge, 5)])
    expected = ((a * b) >> np.uint64(32)).astype(np.uint32)  # exact: a*b < 2**64
    got = mulhi_u32(jnp.asarray(a.astype(np.uint32)), jnp.asarray(b.astype(np.uint32)))
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_uniform_below_stays_in_range():
    bits = jnp.asarray(np.array([0, 1, 2**31, 2**32 - 1] * 3, np.uint32))
    bound = jnp.asarray(np.repeat([1, 7, 2**31 - 1], 4).astype(np.int32))
    out = np.asarray(uniform_below(bits, bound))
    assert ((out >= 0) & (out < np.asarray(bound))).all()
    assert out[3] == 0 and out[7] == 6 and out[11] == 2**31 - 2


# -- correctness against scipy neighbour sets -------------------------------------


@pytest.mark.parametrize("fanouts", [(3,), (5, 2), (2, 3, 4)])
def test_every_sample_is_a_true_distinct_neighbor_and_masks_are_the_padding(fanouts):
    g = simple_graph()
    neighbors = in_neighbors(g)
    csr = g.to_csr()
    seeds = np.arange(g.num_nodes)
    sample = jax.jit(sample_blocks, static_argnums=3)(
        csr.indptr, csr.indices, seeds, fanouts, key=jax.random.key(1)
    )
    assert [lvl.shape for lvl in sample.nodes] == [
        (g.num_nodes, *fanouts[:d]) for d in range(len(fanouts) + 1)
    ]
    assert sample.fanouts == fanouts and sample.batch_size == g.num_nodes
    for d, k in enumerate(fanouts):
        parents = np.asarray(sample.nodes[d]).reshape(-1)
        parent_mask = np.asarray(sample.masks[d]).reshape(-1)
        children = np.asarray(sample.nodes[d + 1]).reshape(-1, k)
        child_mask = np.asarray(sample.masks[d + 1]).reshape(-1, k)
        for p, alive, kids, km in zip(parents, parent_mask, children, child_mask, strict=True):
            real = kids[km].tolist()
            expected_count = min(k, len(neighbors[p])) if alive else 0
            assert len(real) == expected_count
            assert set(real) <= set(neighbors[p])
            assert len(set(real)) == len(real)  # no repeats within a node's sample
            assert (kids[~km] == 0).all()
    total = sum(int(np.asarray(m).sum()) for m in sample.masks[1:])
    assert int(sample.num_sampled_edges()) == total


def test_multigraph_duplicates_are_distinct_positions():
    # Node 0 receives from 1 three times and from 2 once: 4 positions.
    g = sg.Graph(np.array([1, 1, 1, 2]), np.array([0, 0, 0, 0]), None, 3)
    csr = g.to_csr()
    ids, mask = sample_neighbors(csr.indptr, csr.indices, np.array([0]), 4, key=jax.random.key(0))
    assert sorted(np.asarray(ids)[np.asarray(mask)].tolist()) == [1, 1, 1, 2]


def test_small_degrees_take_every_neighbor():
    g = simple_graph(seed=3)
    csr = g.to_csr()
    maxdeg = int(np.diff(csr.indptr).max())
    seeds = np.arange(g.num_nodes)
    ids, mask = sample_neighbors(csr.indptr, csr.indices, seeds, maxdeg, key=jax.random.key(5))
    neighbors = in_neighbors(g)
    for s in seeds:
        assert sorted(np.asarray(ids)[s][np.asarray(mask)[s]].tolist()) == neighbors[s]


# -- uniformity ------------------------------------------------------------------


def star(num_leaves: int) -> sg.Graph:
    leaves = np.arange(1, num_leaves + 1)
    return sg.Graph(leaves, np.zeros_like(leaves), None, num_leaves + 1)


@pytest.mark.parametrize("num_leaves, fanout, copies", [(20, 5, 4000), (1000, 10, 20000)])
def test_each_neighbor_is_equally_likely(num_leaves, fanout, copies):
    csr = star(num_leaves).to_csr()
    ids, mask = sample_neighbors(
        csr.indptr, csr.indices, np.zeros(copies, np.int32), fanout, key=jax.random.key(7)
    )
    assert bool(np.asarray(mask).all())
    counts = np.bincount(np.asarray(ids).ravel(), minlength=num_leaves + 1)[1:]
    assert counts.sum() == copies * fanout
    assert scipy.stats.chisquare(counts).pvalue > 1e-3


def test_every_subset_is_equally_likely():
    # Floyd's algorithm is uniform over k-subsets, not only over single elements.
    d, k, copies = 6, 3, 12000
    positions, valid = sample_positions(
        jnp.full((copies,), d, jnp.int32), k, key=jax.random.key(11)
    )
    assert bool(np.asarray(valid).all())
    subsets = [tuple(sorted(row)) for row in np.asarray(positions).tolist()]
    assert all(len(set(s)) == k for s in subsets)
    index = {s: i for i, s in enumerate(itertools.combinations(range(d), k))}
    counts = np.bincount([index[s] for s in subsets], minlength=len(index))
    assert scipy.stats.chisquare(counts).pvalue > 1e-3


def test_first_positions_are_not_favoured_at_high_degree():
    # A sampler that drew O(k) from a short prefix of the row would fail here.
    d, k, copies = 10_000, 5, 20_000
    positions, _ = sample_positions(jnp.full((copies,), d, jnp.int32), k, key=jax.random.key(2))
    positions = np.asarray(positions).ravel()
    assert positions.min() >= 0 and positions.max() < d
    counts = np.bincount(positions * 10 // d, minlength=10)  # deciles of the row
    assert scipy.stats.chisquare(counts).pvalue > 1e-3


# -- keys, shapes, compilation ------------------------------------------------------


def test_same_key_same_sample_and_new_key_new_sample():
    g = simple_graph(seed=4)
    csr = g.to_csr()
    seeds = np.arange(20)
    a = sample_blocks(csr.indptr, csr.indices, seeds, (4, 3), key=jax.random.key(3))
    b = sample_blocks(csr.indptr, csr.indices, seeds, (4, 3), key=jax.random.key(3))
    c = sample_blocks(csr.indptr, csr.indices, seeds, (4, 3), key=jax.random.key(4))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.nodes[2], c.nodes[2])


def test_shapes_are_static_and_batches_after_the_first_do_not_recompile():
    g = simple_graph(seed=5)
    csr = g.to_csr()
    run = jax.jit(
        lambda indptr, indices, seeds, mask, key: sample_blocks(
            indptr, indices, seeds, (6, 2), key=key, mask=mask
        )
    )
    indptr, indices = check_csr(csr.indptr, csr.indices)
    rng = np.random.default_rng(0)

    def batch(i):
        seeds = jnp.asarray(rng.integers(0, g.num_nodes, 16), jnp.int32)
        mask = jnp.asarray(np.arange(16) < 16 - i)
        return run(indptr, indices, seeds, mask, jax.random.key(i))

    jax.block_until_ready(batch(0))
    assert count_compiles(lambda: [jax.block_until_ready(batch(i)) for i in range(1, 6)]) == 0
    assert [lvl.shape for lvl in batch(1).nodes] == [(16,), (16, 6), (16, 6, 2)]
    assert tree_sizes(16, (6, 2)) == [16, 96, 192]


# -- degenerate graphs ---------------------------------------------------------


def test_isolated_and_padded_seeds_get_no_neighbors():
    g = simple_graph(isolated=5)
    csr = g.to_csr()
    isolated = np.arange(g.num_nodes - 5, g.num_nodes)
    seeds = np.concatenate([isolated, [0, 1]])
    mask = np.array([True] * 5 + [True, False])
    sample = sample_blocks(csr.indptr, csr.indices, seeds, (3, 2), key=jax.random.key(0), mask=mask)
    m1, m2 = np.asarray(sample.masks[1]), np.asarray(sample.masks[2])
    assert not m1[:5].any() and not m2[:5].any()  # isolated seeds
    assert m1[5].any()  # node 0 has neighbours
    assert not m1[6].any() and not m2[6].any()  # a padded seed samples nothing
    assert not np.asarray(sample.masks[0])[6]


@pytest.mark.parametrize("num_nodes", [1, 7])
def test_graph_without_edges(num_nodes):
    g = sg.Graph(np.zeros(0, np.int32), np.zeros(0, np.int32), None, num_nodes)
    csr = g.to_csr()
    seeds = np.zeros(4, np.int32)
    sample = jax.jit(lambda ip, ix, s, k: sample_blocks(ip, ix, s, (3, 2), key=k))(
        csr.indptr, csr.indices, seeds, jax.random.key(0)
    )
    assert [lvl.shape for lvl in sample.nodes] == [(4,), (4, 3), (4, 3, 2)]
    assert int(sample.num_sampled_edges()) == 0
    assert not any(np.asarray(m).any() for m in sample.masks[1:])


def test_int64_indptr_gives_the_same_sample():
    g = simple_graph(seed=6)
    csr = g.to_csr()
    seeds = np.arange(12)
    base = sample_blocks(csr.indptr, csr.indices, seeds, (4, 3), key=jax.random.key(9))
    with jax.enable_x64(True):
        indptr = jnp.asarray(csr.indptr.astype(np.int64))
        assert indptr.dtype == jnp.int64
        sample = jax.jit(lambda ip, ix, s, k: sample_blocks(ip, ix, s, (4, 3), key=k))(
            indptr, jnp.asarray(csr.indices), seeds, jax.random.key(9)
        )
        for x, y in zip(jax.tree.leaves(base), jax.tree.leaves(sample), strict=True):
            np.testing.assert_array_equal(x, y)
    # A concrete int64 indptr of a graph with E < 2**31 is narrowed to int32.
    indptr, _ = check_csr(csr.indptr.astype(np.int64), csr.indices)
    assert indptr.dtype == jnp.int32


# -- validation -----------------------------------------------------------------


def test_bad_inputs_fail_early_with_the_offending_value():
    csr = simple_graph().to_csr()
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"fanouts\[1\] must be >= 1, got 0"):
        sample_blocks(csr.indptr, csr.indices, np.arange(3), (5, 0), key=key)
    with pytest.raises(ValueError, match="comma-separated integers"):
        sample_blocks(csr.indptr, csr.indices, np.arange(3), "25,x", key=key)
    with pytest.raises(ValueError, match="non-empty"):
        sample_blocks(csr.indptr, csr.indices, np.arange(3), (), key=key)
    with pytest.raises(ValueError, match=r"seeds\[1\] = 40 is out of range"):
        sample_blocks(csr.indptr, csr.indices, np.array([0, 40]), (2,), key=key)
    with pytest.raises(ValueError, match="mask must have the seeds' shape"):
        sample_blocks(csr.indptr, csr.indices, np.arange(3), (2,), key=key, mask=np.ones(4, bool))
    bad = csr.indptr.copy()
    bad[5] = bad[6] + 1
    with pytest.raises(ValueError, match=r"indptr must be non-decreasing, but indptr\[6\]"):
        sample_blocks(bad, csr.indices, np.arange(3), (2,), key=key)
    with pytest.raises(ValueError, match="end at len\\(indices\\)"):
        sample_blocks(csr.indptr, csr.indices[:-1], np.arange(3), (2,), key=key)
    with pytest.raises(TypeError, match="static Python int"):
        sample_blocks(csr.indptr, csr.indices, np.arange(3), (2.5,), key=key)


# -- chunked propagation ---------------------------------------------------------


def check_chunked(g: sg.Graph, chunk_size: int, backend: str) -> None:
    chunked = ChunkedGraph.build(g, chunk_size)
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 3))
    expected = sg.propagate(g, x, backend="dense")
    out = jax.jit(lambda c, x: propagate_chunked(c, x, backend=backend))(chunked, x)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
@pytest.mark.parametrize("backend", ["segment", "bcoo", "dense"])
def test_chunked_propagation_equals_propagate(case, backend):
    if case == "no_nodes":  # no rows to chunk: refused by name, not an empty product
        with pytest.raises(ValueError, match="num_nodes=0"):
            check_chunked(GRAPH_CASES[case](), 4, backend)
        return
    check_chunked(GRAPH_CASES[case](), 4, backend)


@pytest.mark.parametrize("chunk_size", [1, 7, 29, 1000])
def test_chunked_propagation_any_chunk_size(chunk_size):
    check_chunked(GRAPH_CASES["random"](), chunk_size, "segment")


def test_chunked_propagation_gradient_equals_propagate():
    g = GRAPH_CASES["random"]()
    chunked = ChunkedGraph.build(g, 7)
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 4))
    w = jax.random.normal(jax.random.key(1), (g.num_nodes, 4))
    grad = jax.grad(lambda x: jnp.sum(w * propagate_chunked(chunked, x)))(x)
    expected = jax.grad(lambda x: jnp.sum(w * sg.propagate(g, x, backend="dense")))(x)
    np.testing.assert_allclose(grad, expected, rtol=2e-5, atol=2e-5)


def test_chunks_are_sized_from_the_edge_budget():
    g = simple_graph(n=100, m=1000, isolated=0)
    chunked = ChunkedGraph.build(g, chunk_edges=200)
    assert chunked.chunk_size == 100 * 200 // g.num_edges
    degrees = np.diff(np.asarray(g.to_csr().indptr))
    r = chunked.chunk_size
    starts = [min(i, 100 - r) for i in range(0, 100, r)]  # the last chunk ends at N
    assert chunked.max_chunk_edges == max(degrees[i : i + r].sum() for i in starts)
    assert chunked.num_chunks == -(-100 // r)
    assert int(chunked.chunk_start(chunked.num_chunks - 1)) == 100 - r
    row_block = propagate_chunk(chunked, jnp.asarray(1), jnp.ones((100, 2)))
    np.testing.assert_allclose(row_block[:, 0], degrees[r : 2 * r])


def test_traced_seeds_outside_the_graph_sample_nothing():
    # Traced ids are not checked. Before: a negative seed read node N - id's row
    # (numpy-style wrap-around), its neighbours marked valid.
    rng = np.random.default_rng(0)
    n = 50
    g = sg.Graph(rng.integers(0, n, 400), rng.integers(0, n, 400), None, n)
    csr = g.to_csr()
    seeds = jnp.asarray([n + 5, -3, 7], jnp.int32)
    sample = jax.jit(
        lambda s: sample_blocks(csr.indptr, csr.indices, s, (3,), key=jax.random.key(0))
    )(seeds)
    valid = np.asarray(sample.masks[1]).reshape(3, 3)
    assert not valid[:2].any()  # both outside [0, N): nothing sampled
    assert valid[2].any()  # node 7 has in-edges

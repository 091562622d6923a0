"""Host sampling from a (memory-mapped) CSR: the device sampler's draws and layout,
uniformity, validity, the localized contract, and the resident-memory budget."""

import itertools

import jax
import numpy as np
import pytest
import scipy.stats

from sparsegcn.files import advise
from sparsegcn.ops import hash_bits
from sparsegcn.sampling import localize, sample_blocks, sample_dedup
from sparsegcn.sampling.host import (
    HashSeeds,
    HostCSR,
    MappedBudget,
    hash_words,
    localize_host,
    rss_file_bytes,
    sample_dedup_host,
    sample_tree_host,
)


def _csr(degrees, seed=0):
    """A CSR whose row ``r`` has ``degrees[r]`` distinct sorted neighbours."""
    rng = np.random.default_rng(seed)
    n = len(degrees)
    rows = [np.sort(rng.choice(n, size=d, replace=False)) for d in degrees]
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int32) if sum(degrees) else np.zeros(0, np.int32)
    return indptr, indices


# Isolated nodes, degrees below, at and above the fanouts, and a hub.
DEGREES = [0, 1, 2, 3, 5, 8, 0, 13, 40, 4, 7, 2, 0, 9, 30, 6] * 4


def test_hash_words_are_the_device_words():
    key = jax.random.key(7)
    device = np.asarray(hash_bits(key, (1000,)))
    seeds = HashSeeds.from_key(key)
    np.testing.assert_array_equal(hash_words(seeds, 0, 1000), device)
    np.testing.assert_array_equal(hash_words(seeds, 300, 50), device[300:350])


@pytest.mark.parametrize("fanouts", [(3,), (4, 3), (2, 5, 3)])
@pytest.mark.parametrize("key", [0, 1, 2])
def test_the_host_tree_is_the_device_tree_for_the_same_key(fanouts, key):
    indptr, indices = _csr(DEGREES)
    csr = HostCSR.from_arrays(indptr, indices)
    seeds = np.array([0, 5, 8, 6, 1, 14, 3, 9, 63, 12], np.int32)
    mask = np.ones(10, bool)
    mask[[3, 7]] = False  # padded seed slots
    k = jax.random.key(key)
    device = sample_blocks(indptr, indices, seeds, fanouts, key=k, mask=mask)
    host = sample_tree_host(csr, seeds, fanouts, k, mask=mask)
    for d, h in zip(device.nodes + device.masks, host.nodes + host.masks, strict=True):
        assert h.shape == d.shape and h.dtype == d.dtype
        np.testing.assert_array_equal(h, np.asarray(d))


def test_every_sampled_edge_exists_and_masks_are_exactly_the_padding():
    indptr, indices = _csr(DEGREES, seed=1)
    csr = HostCSR.from_arrays(indptr, indices)
    seeds = np.arange(len(DEGREES), dtype=np.int32)
    fanouts = (5, 4)
    tree = sample_tree_host(csr, seeds, fanouts, np.random.default_rng(0))
    assert [level.shape for level in tree.nodes] == [(64,), (64, 5), (64, 5, 4)]
    for depth, k in enumerate(fanouts):
        parents, parent_mask = tree.nodes[depth], tree.masks[depth]
        children, child_mask = tree.nodes[depth + 1], tree.masks[depth + 1]
        for index in np.ndindex(parents.shape):
            p = int(parents[index])
            row = indices[indptr[p] : indptr[p + 1]]
            got = children[index][child_mask[index]]
            if not parent_mask[index]:
                assert not child_mask[index].any()
                continue
            expected = min(k, row.size)
            # the first min(k, d) slots are the valid ones; the rest hold node 0
            np.testing.assert_array_equal(child_mask[index], np.arange(k) < expected)
            assert (children[index][~child_mask[index]] == 0).all()
            assert set(got.tolist()) <= set(row.tolist())
            assert len(set(got.tolist())) == got.size  # rows have distinct ids: no repeats
            if row.size <= k:  # every neighbour, in row order
                np.testing.assert_array_equal(got, row)


def test_neighbours_are_uniform_per_neighbour_and_per_subset():
    # One seed of degree 9, fanout 3, 20,000 draws: each neighbour has probability
    # 3/9, each of the C(9, 3) = 84 subsets 1/84.
    degree, k, draws = 9, 3, 20_000
    indptr = np.array([0, degree] + [degree] * degree, np.int64)
    indices = np.arange(1, degree + 1, dtype=np.int32)
    csr = HostCSR.from_arrays(indptr, indices)
    seeds = np.zeros(draws, np.int32)  # one tree of 20,000 copies of node 0
    tree = sample_tree_host(csr, seeds, (k,), np.random.default_rng(1))
    picked = np.sort(tree.nodes[1], axis=1)
    assert tree.masks[1].all()
    counts = np.bincount(picked.reshape(-1), minlength=degree + 1)[1:]
    assert scipy.stats.chisquare(counts).pvalue > 1e-3
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(1, degree + 1), k))}
    codes = np.array([subsets[tuple(row)] for row in picked.tolist()])
    assert scipy.stats.chisquare(np.bincount(codes, minlength=len(subsets))).pvalue > 1e-3


def test_localize_host_gives_the_device_contract():
    indptr, indices = _csr(DEGREES, seed=2)
    seeds = np.array([8, 14, 0, 3], np.int32)
    key = jax.random.key(5)
    tree = sample_blocks(indptr, indices, seeds, (6, 4), key=key)
    host_tree = sample_tree_host(HostCSR.from_arrays(indptr, indices), seeds, (6, 4), key)
    device = jax.jit(localize, static_argnums=1)(tree, 65)
    host = localize_host(host_tree, 65)
    np.testing.assert_array_equal(host.rows, np.asarray(device.rows))
    assert host.rows.dtype == np.int32 and host.num_distinct.dtype == np.int32
    assert int(host.num_distinct) == int(device.num_distinct)
    count = int(host.num_distinct)
    assert (np.diff(host.rows[:count]) > 0).all()  # ascending: the file is read in order
    for level, d, h in zip(host_tree.nodes, device.sample.nodes, host.sample.nodes, strict=True):
        np.testing.assert_array_equal(h, np.asarray(d))
        np.testing.assert_array_equal(host.rows[h], level)
    # the scratch path (any prior contents, reused) gives the same arrays
    scratch = np.full(len(DEGREES), 7, np.int32)
    for _ in range(2):
        fast = localize_host(host_tree, 65, scratch=scratch)
        np.testing.assert_array_equal(fast.rows, host.rows)
        assert fast.num_distinct == host.num_distinct
        for a, b in zip(fast.sample.nodes, host.sample.nodes, strict=True):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype == np.int32
    with pytest.raises(ValueError, match="num_rows=3 must exceed"):
        localize_host(host_tree, 3)


def test_a_memory_mapped_csr_stays_mapped_and_bad_input_is_named(tmp_path):
    indptr, indices = _csr(DEGREES, seed=3)
    np.save(tmp_path / "indices.npy", indices)
    mapped = np.load(tmp_path / "indices.npy", mmap_mode="r")
    csr = HostCSR.from_arrays(np.asarray(indptr), mapped)
    assert isinstance(csr.indices, np.memmap) and csr.indptr.dtype == np.int64
    assert advise(csr.indices, "random") and not advise(np.zeros(3), "random")
    tree = sample_tree_host(csr, np.arange(5), (3, 2), jax.random.key(0))
    in_ram = sample_tree_host(
        HostCSR.from_arrays(indptr, indices), np.arange(5), (3, 2), jax.random.key(0)
    )
    for a, b in zip(tree.nodes, in_ram.nodes, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"indptr must run from 0 to len\(indices\) = 3"):
        HostCSR.from_arrays(np.array([0, 2]), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="seed 64 is out of range"):
        sample_tree_host(csr, np.array([1, 64]), (2,), np.random.default_rng(0))
    with pytest.raises(ValueError, match="fanouts"):
        sample_tree_host(csr, np.array([1]), (0,), np.random.default_rng(0))
    with pytest.raises(ValueError, match="advice must be one of"):
        advise(mapped, "sequential")


def test_a_graph_without_edges_samples_only_padding():
    csr = HostCSR.from_arrays(np.zeros(5, np.int64), np.zeros(0, np.int32))
    tree = sample_tree_host(csr, np.arange(4), (3, 2), np.random.default_rng(0))
    assert tree.masks[0].all() and not tree.masks[1].any() and not tree.masks[2].any()
    assert tree.nodes[2].shape == (4, 3, 2) and not tree.nodes[2].any()


@pytest.mark.skipif(rss_file_bytes() is None, reason="RssFile needs Linux /proc")
def test_the_mapped_budget_drops_resident_pages_above_its_limit(tmp_path):
    size = 64 << 20
    np.save(tmp_path / "big.npy", np.ones(size // 4, np.float32))
    mapped = np.load(tmp_path / "big.npy", mmap_mode="r")
    before = rss_file_bytes()
    assert float(mapped[::1024].sum()) == size // 4 // 1024  # touches every page
    touched = rss_file_bytes()
    assert touched - before > size // 2
    idle = MappedBudget([mapped, np.zeros(3)], limit=touched + size)
    assert len(idle.arrays) == 1 and not idle.check() and idle.releases == 0
    budget = MappedBudget([mapped], limit=before + size // 4)
    assert budget.check() and budget.releases == 1
    assert rss_file_bytes() < touched - size // 2
    assert float(mapped[:10].sum()) == 10.0  # the data is still there


@pytest.mark.parametrize(
    ("fanouts", "caps"), [((3,), None), ((4, 3), None), ((3, 2, 2), None), ((4, 3), (12, 20))]
)
@pytest.mark.parametrize("key", [0, 1])
def test_host_dedup_is_the_device_dedup_for_the_same_key(fanouts, caps, key):
    indptr, indices = _csr(DEGREES, seed=4)
    csr = HostCSR.from_arrays(indptr, indices)
    seeds = np.array([0, 5, 8, 6, 1, 14, 3, 9, 63, 12, 8], np.int32)  # a repeated seed too
    mask = np.ones(11, bool)
    mask[[3, 7]] = False
    k = jax.random.key(key)
    device = sample_dedup(indptr, indices, seeds, fanouts, key=k, mask=mask, caps=caps)
    host = sample_dedup_host(csr, seeds, fanouts, k, mask=mask, caps=caps)
    for field in ("nodes", "masks", "neighbors", "edge_masks"):
        for d, h in zip(getattr(device, field), getattr(host, field), strict=True):
            assert h.shape == d.shape and h.dtype == d.dtype, field
            np.testing.assert_array_equal(h, np.asarray(d), err_msg=field)
    np.testing.assert_array_equal(host.overflow, np.asarray(device.overflow))
    if caps is not None:
        assert host.overflow.sum() > 0  # the caps bite on this graph

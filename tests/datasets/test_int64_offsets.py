"""CSR offsets past 2**31 without jax_enable_x64: int64 on the host, 32-bit on the device."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import sparsegcn as sg
from sparsegcn.sampling import ChunkedGraph, neighbor, sample_blocks
from sparsegcn.sampling.chunks import propagate_chunked
from sparsegcn.sampling.neighbor import check_csr, device_offset_dtype, rebase_offsets

HUGE = 2**31 + 12_345  # an offset past int32: a window deep inside a huge CSR


def small_graph(n=30, m=120, seed=0) -> sg.Graph:
    rng = np.random.default_rng(seed)
    g = sg.Graph(rng.integers(0, n - 2, m), rng.integers(0, n - 2, m), None, n)
    return sg.sort_edges(sg.remove_self_loops(sg.to_undirected(g)))


def leaves_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_offset_dtypes_without_and_with_x64():
    assert not jax.config.jax_enable_x64
    assert device_offset_dtype(2**31 - 1) == np.int32
    assert device_offset_dtype(2**31) == np.uint32
    assert device_offset_dtype(3_231_371_744) == np.uint32  # papers100M's stored edges
    with pytest.raises(ValueError, match=r"spans 4294967296 >= 2\*\*32 entries.*jax_enable_x64"):
        device_offset_dtype(2**32)
    with jax.enable_x64(True):
        assert device_offset_dtype(2**31) == np.int64
        assert device_offset_dtype(2**31 - 1) == np.int32


@pytest.mark.parametrize("chunk", [1, 4, 1 << 24])
def test_rebase_is_exact_past_int32(chunk):
    indptr = np.array([0, 3, 3, 10, 2**31 + 5, 2**32 - 2], np.int64) + 7
    out = rebase_offsets(indptr, chunk=chunk)
    assert out.dtype == np.uint32
    np.testing.assert_array_equal(out.astype(np.int64), indptr - 7)


def test_sampler_reads_a_window_with_a_huge_int64_offset():
    """The CSR's rows live at offsets past 2**31 of a larger CSR (as in a memory-mapped
    papers100M); the sample equals that of the same rows rebased to 0, with x64 off."""
    csr = small_graph().to_csr()
    indptr64 = csr.indptr.astype(np.int64) + HUGE
    assert indptr64.max() > np.iinfo(np.int32).max and not jax.config.jax_enable_x64
    device_ptr, _ = check_csr(indptr64, csr.indices)
    assert device_ptr.dtype == jnp.int32
    np.testing.assert_array_equal(device_ptr, csr.indptr)
    seeds = np.arange(0, 30, 2)
    key = jax.random.key(3)
    expected = sample_blocks(csr.indptr, csr.indices, seeds, (4, 3), key=key)
    leaves_equal(sample_blocks(indptr64, csr.indices, seeds, (4, 3), key=key), expected)
    # Every sampled neighbour is a real in-neighbour (scipy's row as the oracle).
    a = sp.csr_array((np.ones(csr.indices.shape[0]), csr.indices, csr.indptr), shape=(30, 30))
    parents, children = expected.nodes[1], expected.nodes[2]
    for p, c, m in zip(
        np.asarray(parents).ravel(),
        np.asarray(children).reshape(-1, 3),
        np.asarray(expected.masks[2]).reshape(-1, 3),
        strict=True,
    ):
        assert all(a[p, x] > 0 for x in c[m])
    with pytest.raises(ValueError, match=r"end at len\(indices\) = \d+ past it"):
        check_csr(indptr64, csr.indices[:-1])
    bad = indptr64.copy()
    bad[4] = bad[5] + 1
    with pytest.raises(ValueError, match=r"indptr\[5\] = 21474\d+ < indptr\[4\] = 21474\d+"):
        check_csr(bad, csr.indices)


@pytest.fixture
def int32_boundary_at_40(monkeypatch):
    """Moves the int32/uint32 boundary down to 40 entries, so that a small CSR crosses
    it and takes the uint32 device path a graph of >= 2**31 edges takes (building a
    real one needs 16 GB)."""
    monkeypatch.setattr(neighbor, "_INT32_MAX", 40)


def test_uint32_offsets_give_the_same_sample(int32_boundary_at_40):
    csr = small_graph().to_csr()
    assert csr.indices.shape[0] > 40
    key = jax.random.key(5)
    seeds = np.arange(30)
    ptr, idx = check_csr(csr.indptr.astype(np.int64) + HUGE, csr.indices)
    assert ptr.dtype == jnp.uint32
    sample = jax.jit(lambda p, i, s, k: sample_blocks(p, i, s, (5, 2), key=k))(ptr, idx, seeds, key)
    int32_path = neighbor._blocks_jit(
        jnp.asarray(csr.indptr, jnp.int32),
        jnp.asarray(csr.indices),
        jnp.asarray(seeds, jnp.int32),
        jnp.ones(30, bool),
        key,
        (5, 2),
    )
    leaves_equal(sample, int32_path)


def test_chunked_graph_with_uint32_offsets(int32_boundary_at_40):
    graph = small_graph()
    chunked = ChunkedGraph.build(graph, chunk_size=7)
    assert chunked.indptr.dtype == np.uint32
    x = np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32)
    a = np.zeros((30, 30), np.float32)
    np.add.at(a, (np.asarray(graph.receivers), np.asarray(graph.senders)), 1.0)
    out = jax.jit(propagate_chunked)(chunked, x)
    np.testing.assert_allclose(out, a @ x, rtol=1e-5, atol=1e-5)
    key = jax.random.key(1)
    seeds = np.arange(30)
    from_chunked = sample_blocks(chunked.indptr, chunked.indices, seeds, (3,), key=key)
    csr = graph.to_csr()
    leaves_equal(from_chunked, sample_blocks(csr.indptr, csr.indices, seeds, (3,), key=key))

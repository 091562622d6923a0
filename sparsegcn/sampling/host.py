"""Neighbour sampling on the host, from a CSR that may stay on disk.

The device sampler (:mod:`sparsegcn.sampling.neighbor`) needs the graph on
the device: at ogbn-papers100M size (3.2 billion stored edges) its neighbour
ids alone take 12.9 GB, more than a 24 GiB machine can hold next to
anything else. Here the same computation tree is drawn with NumPy:

- :class:`HostCSR` keeps the ``[N + 1]`` int64 row offsets in RAM and leaves
  the ``[E]`` neighbour ids where they are (the read-only memory map of an
  on-disk dataset's ``indices.npy``), advised ``MADV_RANDOM`` so the kernel
  reads the pages a batch touches and no read-ahead around them;
- :func:`sample_tree_host` draws the tree of
  :func:`~sparsegcn.sampling.sample_blocks`, with its static shapes, its
  padding and its masks;
- :func:`localize_host` renumbers it to the rows of its distinct ids, as
  :func:`~sparsegcn.sampling.localize` does on the device, so the same
  compiled step consumes either;
- :func:`sample_dedup_host` draws :func:`~sparsegcn.sampling.sample_dedup`'s
  de-duplicated frontiers the same way;
- :class:`MappedBudget` keeps the resident pages of the memory maps bounded.

**The same draws as the device.** The device sampler's random words are
:func:`~sparsegcn.ops.hash_bits`: one threefry draw of two uint32 seeds
``(s_0, s_1)`` per key, then a counter hash of each position. That hash is
integer arithmetic, reproduced here bit for bit (:func:`hash_words`), and
so are Lemire's multiply-shift and Floyd's algorithm. Given the key the
device would use (:meth:`HashSeeds.from_key`), :func:`sample_tree_host`
returns exactly the device's tree (tested), and host-sampled training
reproduces device-sampled training.

**Sampling rules** (those of :func:`~sparsegcn.sampling.sample_positions`).
A node of in-degree ``d`` with fanout ``k``:

- ``d > k``: ``k`` distinct positions of its CSR row, uniform among the
  ``C(d, k)`` subsets (Floyd's algorithm, ``k`` draws whatever ``d`` is);
- ``1 <= d <= k``: every position once, in row order, in the first ``d``
  slots; the other ``k - d`` slots are masked (no replacement, no repeats);
- ``d = 0``, a masked entry or a padded seed: all ``k`` slots masked.

Masked slots hold node 0, and their own children are masked. Positions, not
ids, are drawn: a repeated edge of a multigraph is a distinct neighbour.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.files import advise, check_mapped, memory_map
from sparsegcn.sampling.dedup import DedupSample, dedup_sizes
from sparsegcn.sampling.feature_store import LocalBatch, host_memory_bytes
from sparsegcn.sampling.neighbor import NeighborSample, check_fanouts, tree_sizes

__all__ = [
    "GRAPH_ON",
    "HashSeeds",
    "HostCSR",
    "MappedBudget",
    "check_graph_on",
    "floyd_host",
    "hash_words",
    "localize_host",
    "rss_file_bytes",
    "sample_dedup_host",
    "sample_tree_host",
]

GRAPH_ON = ("auto", "device", "host")
"""Where sampled training samples the graph: on the device, on the host
(:func:`sample_tree_host`), or ``"auto"``: the host when the graph is too
large to expand in RAM."""

_GOLDEN = np.uint32(0x9E3779B9)
_M1 = np.uint32(0x85EBCA6B)
_M2 = np.uint32(0xC2B2AE35)
_READ_CHUNK = 1 << 16  # neighbour ids read per thread task


def check_graph_on(value) -> str:
    """Validates a graph placement name (one of :data:`GRAPH_ON`)."""
    if not isinstance(value, str) or value not in GRAPH_ON:
        raise ValueError(f"graph_on must be one of {list(GRAPH_ON)}, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True, eq=False)
class HostCSR:
    """A CSR graph for host sampling: offsets in RAM, neighbour ids wherever they are.

    Attributes:
      indptr: int64 ``[N + 1]`` row offsets in RAM (``8 (N + 1)`` bytes:
        0.9 GB for ogbn-papers100M); row ``r``'s in-neighbours are
        ``indices[indptr[r]:indptr[r + 1]]``.
      indices: int32 ``[E]`` neighbour ids: an array, or a read-only
        ``np.memmap`` that is never read whole.
    """

    indptr: np.ndarray
    indices: np.ndarray

    @classmethod
    def from_arrays(cls, indptr, indices, *, random_access: bool = True) -> HostCSR:
        """Builds one from an ``[N + 1]`` offsets array (copied into RAM as int64) and
        ``[E]`` ids (kept as given; a memory map is advised ``MADV_RANDOM`` unless
        ``random_access=False``).

        The contents are not checked (a loaded on-disk dataset was); the
        shapes and the ends of ``indptr`` are.

        Raises:
          ValueError: ``indptr`` not 1-D with ``indptr[0] == 0`` and
            ``indptr[-1] == len(indices)``, or non-integer arrays.
        """
        ptr = np.asarray(indptr)
        idx = indices if isinstance(indices, np.ndarray) else np.asarray(indices)
        for name, array in (("indptr", ptr), ("indices", idx)):
            if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
                raise ValueError(
                    f"{name} must be a 1-D integer array, got {array.dtype} {list(array.shape)}"
                )
        if ptr.shape[0] < 1 or int(ptr[0]) != 0 or int(ptr[-1]) != idx.shape[0]:
            ends = (int(ptr[0]), int(ptr[-1])) if ptr.shape[0] else None
            raise ValueError(
                f"indptr must run from 0 to len(indices) = {idx.shape[0]}, got ends {ends}"
            )
        ptr = np.array(ptr, np.int64)  # in RAM, whatever it was (a memory map included)
        advise(indptr, "dontneed")  # the copy is what stays resident, not the map's pages
        if idx.dtype != np.int32:
            idx = idx.astype(np.int32)
        if random_access:
            advise(idx, "random")
        return cls(ptr, idx)

    @classmethod
    def open(cls, path) -> HostCSR:
        """The CSR of the on-disk dataset in folder ``path``: ``indices.npy`` stays mapped."""
        from sparsegcn.datasets.ondisk import load_csr

        indptr, indices = load_csr(path)
        return cls.from_arrays(indptr, indices)

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def read(
        self, positions: np.ndarray, *, pool: concurrent.futures.Executor | None = None
    ) -> np.ndarray:
        """int32 ``indices[positions]``, read in chunks on ``pool``'s threads (the page
        faults of a memory map then wait on the disk in parallel).

        Raises:
          OSError: ``indices`` is a memory map whose file shrank since it
            was opened (a read would be ``SIGBUS``; :func:`check_mapped`).
        """
        check_mapped(self.indices, "the graph's indices file")
        if pool is None or positions.shape[0] <= _READ_CHUNK:
            return np.take(self.indices, positions)
        out = np.empty(positions.shape, np.int32)
        tasks = [
            pool.submit(
                np.take,
                self.indices,
                positions[a : a + _READ_CHUNK],
                None,
                out[a : a + _READ_CHUNK],
            )
            for a in range(0, positions.shape[0], _READ_CHUNK)
        ]
        for task in tasks:
            task.result()
        return out


class HashSeeds(NamedTuple):
    """The two uint32 seeds ``(s_0, s_1)`` of :func:`~sparsegcn.ops.hash_bits`.

    Attributes:
      words: uint32 ``[2]``.
    """

    words: np.ndarray

    @classmethod
    def from_key(cls, key: jax.Array) -> HashSeeds:
        """The seeds :func:`~sparsegcn.ops.hash_bits` derives from ``key`` (one threefry
        draw on the default device): the device sampler's, for the same key."""
        return cls(np.asarray(jax.random.bits(key, (2,), jnp.uint32), np.uint32))

    @classmethod
    def from_generator(cls, rng: np.random.Generator) -> HashSeeds:
        """Two fresh seeds drawn from a NumPy generator."""
        return cls(rng.integers(0, 2**32, size=2, dtype=np.uint64).astype(np.uint32))


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * _M1
    h = h ^ (h >> np.uint32(13))
    h = h * _M2
    return h ^ (h >> np.uint32(16))


def hash_words(seeds: HashSeeds, start: int, count: int) -> np.ndarray:
    """uint32 ``[count]``: words ``start .. start + count - 1`` of
    :func:`~sparsegcn.ops.hash_bits` for ``seeds``, bit for bit.

    .. math:: u_i = f(f(i \\cdot \\phi + s_0) \\oplus s_1)
    """
    if start < 0 or start + count > 2**32:
        raise ValueError(f"word positions must lie in [0, 2**32), got [{start}, {start + count})")
    s0, s1 = (np.uint32(w) for w in np.asarray(seeds.words, np.uint32))
    counter = np.arange(start, start + count, dtype=np.int64).astype(np.uint32)
    return _fmix32(_fmix32(counter * _GOLDEN + s0) ^ s1)


def floyd_host(degrees: np.ndarray, k: int, bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The device's Floyd sampling (:func:`~sparsegcn.sampling.sample_positions`) in NumPy.

    Args:
      degrees: int ``[n]`` degrees ``d`` (0 allowed).
      k: fanout.
      bits: uint32 ``[n, k]`` uniform words.

    Returns:
      ``(positions int64 [n, k], valid bool [n, k])``: distinct offsets into
      each row (0 where invalid); the first ``min(k, d)`` slots are valid.
      Rows with ``d <= k`` take offsets ``0 .. d - 1`` in order.
    """
    d = np.asarray(degrees, np.int64)
    cols = np.arange(k, dtype=np.int64)
    valid = cols[None, :] < d[:, None]
    positions = np.where(valid, cols[None, :], 0)
    big = np.flatnonzero(d > k)
    if big.size:
        # Slot-major (k rows of the big nodes), so every step reads contiguous rows.
        words = np.ascontiguousarray(bits[big].T).astype(np.uint64)
        low = (d[big] - k + 1).astype(np.uint64)  # >= 2 here
        chosen = np.empty((k, big.size), np.int64)
        for i in range(k):
            bound = low + np.uint64(i)
            # Lemire: floor(u * m / 2^32), exact in 64 bits.
            t = ((words[i] * bound) >> np.uint64(32)).astype(np.int64)
            taken = np.zeros(big.size, bool)
            for j in range(i):
                taken |= chosen[j] == t
            chosen[i] = np.where(taken, bound.astype(np.int64) - 1, t)
        positions[big] = chosen.T
    return positions, valid


def _sample_level(
    csr: HostCSR,
    nodes: np.ndarray,
    mask: np.ndarray,
    k: int,
    bits: np.ndarray,
    pool: concurrent.futures.Executor | None,
) -> tuple[np.ndarray, np.ndarray]:
    flat, flat_mask = nodes.reshape(-1), mask.reshape(-1)
    shape = (*nodes.shape, k)
    if csr.num_edges == 0:
        return np.zeros(shape, np.int32), np.zeros(shape, bool)
    start = csr.indptr[flat]
    degrees = np.where(flat_mask, csr.indptr[flat + 1] - start, 0)
    offsets, valid = floyd_host(degrees, k, bits.reshape(-1, k))
    neighbors = np.zeros(valid.shape, np.int32)
    neighbors[valid] = csr.read((start[:, None] + offsets)[valid], pool=pool)
    return neighbors.reshape(shape), valid.reshape(shape)


def _start(csr: HostCSR, seeds, rng, mask) -> tuple[HashSeeds, list, list]:
    """The checked seeds (masked slots to node 0), their mask, and the hash seeds."""
    if isinstance(rng, np.random.Generator):
        rng = HashSeeds.from_generator(rng)
    elif not isinstance(rng, HashSeeds):
        rng = HashSeeds.from_key(rng)
    seeds = np.asarray(seeds)
    if seeds.ndim != 1 or not np.issubdtype(seeds.dtype, np.integer):
        raise ValueError(f"seeds must be a 1-D integer array [B], got {seeds.dtype} {seeds.shape}")
    seed_mask = np.ones(seeds.shape, bool) if mask is None else np.asarray(mask, bool)
    if seed_mask.shape != seeds.shape:
        raise ValueError(f"mask must have the seeds' shape {seeds.shape}, got {seed_mask.shape}")
    real = seeds[seed_mask]
    if real.size and (real.min() < 0 or real.max() >= csr.num_nodes):
        bad = int(real[(real < 0) | (real >= csr.num_nodes)][0])
        raise ValueError(f"seed {bad} is out of range [0, {csr.num_nodes})")
    return rng, [np.where(seed_mask, seeds, 0).astype(np.int32)], [seed_mask]


def sample_tree_host(
    csr: HostCSR,
    seeds,
    fanouts: Sequence[int],
    rng: HashSeeds | np.random.Generator | jax.Array,
    *,
    mask=None,
    pool: concurrent.futures.Executor | None = None,
) -> NeighborSample:
    """Samples a batch's ``L``-hop computation tree on the host (rules: module docstring).

    The layout of :func:`~sparsegcn.sampling.sample_blocks`: level ``d``
    shaped ``(B, k_1, ..., k_d)``, int32 ids, bool masks, node 0 in masked
    slots. With ``rng`` a JAX key, the tree equals ``sample_blocks(...,
    key=rng)`` entry for entry. Cost: ``O(T k)`` NumPy work for ``T`` tree
    entries and one read of ``indices`` per sampled edge, whatever ``N`` and
    ``E`` are.

    Args:
      csr: the graph.
      seeds: int ``[B]`` ids in ``[0, N)``.
      fanouts: ``(k_1, ..., k_L)``.
      rng: :class:`HashSeeds`; a JAX PRNG key (the device's words for it,
        :meth:`HashSeeds.from_key`); or a NumPy generator (two fresh seeds).
      mask: optional bool ``[B]``, ``False`` for padded seed slots.
      pool: threads for the reads of ``indices``.

    Returns:
      A :class:`~sparsegcn.sampling.NeighborSample` of NumPy arrays.

    Raises:
      ValueError: bad fanouts, seeds out of range or of the wrong shape.
    """
    fanouts = check_fanouts(fanouts)
    rng, nodes, masks = _start(csr, seeds, rng, mask)
    sizes = tree_sizes(nodes[0].shape[0], fanouts)
    offset = 0
    for k, n in zip(fanouts, sizes[:-1], strict=True):
        bits = hash_words(rng, offset, n * k)
        neighbors, valid = _sample_level(csr, nodes[-1], masks[-1], k, bits, pool)
        nodes.append(neighbors)
        masks.append(valid)
        offset += n * k
    return NeighborSample(nodes=tuple(nodes), masks=tuple(masks))


def _relabel_host(known, known_mask, sampled, valid, room: int):
    """:func:`sparsegcn.sampling.dedup._relabel` in NumPy (same outputs, same rules):
    rows for one hop's sampled nodes, the first occurrence of each new node (in
    frontier order) becoming the next row, those past ``room`` dropped."""
    u, m = known.shape[0], sampled.shape[0]
    sentinel = np.iinfo(np.int32).max
    ids = np.concatenate(
        [np.where(known_mask, known, sentinel), np.where(valid, sampled, sentinel)]
    )
    # Known rows come first and the sort is stable, so each id's group starts
    # with its row if it has one, else with its first sampled occurrence.
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    first = np.ones(u + m, bool)
    first[1:] = sorted_ids[1:] != sorted_ids[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(u + m), 0))
    head = np.empty(u + m, np.int64)
    head[order] = order[group_start]
    head = head[u:]
    known_row = head < u
    new = valid & (head == u + np.arange(m))
    rank = np.cumsum(new) - 1
    kept = new & (rank < room)
    first_seen = np.clip(head - u, 0, max(m - 1, 0))
    rows = np.where(known_row, head, u + rank[first_seen])
    edge_ok = valid & (known_row | kept[first_seen])
    new_nodes = np.zeros(room, np.int32)
    new_nodes[rank[kept]] = sampled[kept]
    total_new = int(new.sum())
    new_mask = np.arange(room) < total_new
    dropped = total_new - int(kept.sum())
    return np.where(edge_ok, rows, 0).astype(np.int32), new_nodes, new_mask, edge_ok, dropped


def sample_dedup_host(
    csr: HostCSR,
    seeds,
    fanouts: Sequence[int],
    rng: HashSeeds | np.random.Generator | jax.Array,
    *,
    mask=None,
    caps: Sequence[int] | int | str | None = None,
    pool: concurrent.futures.Executor | None = None,
) -> DedupSample:
    """:func:`~sparsegcn.sampling.sample_dedup` on the host: each distinct node once.

    The device's rules (frontiers of static sizes
    :func:`~sparsegcn.sampling.dedup_sizes`, frontier ``d``'s slot ``j``
    reading the words of tree entry ``j`` of level ``d``, first-appearance
    order, caps dropping the nodes reached last) and, for a JAX key ``rng``,
    the device's draws: the result equals ``sample_dedup(..., key=rng)``
    (tested). Arguments as for :func:`sample_tree_host`; ``caps`` as for
    the device sampler.

    Returns:
      A :class:`~sparsegcn.sampling.DedupSample` of NumPy arrays.
    """
    fanouts = check_fanouts(fanouts)
    rng, nodes, masks = _start(csr, seeds, rng, mask)
    sizes = dedup_sizes(nodes[0].shape[0], fanouts, num_nodes=csr.num_nodes, caps=caps)
    tree = tree_sizes(nodes[0].shape[0], fanouts)
    level_start = np.cumsum([0, *tree[1:-1]]).tolist()
    neighbors, edge_masks, overflow = [], [], []
    for d, k in enumerate(fanouts):
        bits = hash_words(rng, int(level_start[d]), sizes[d] * k)
        sampled, valid = _sample_level(csr, nodes[d], masks[d], k, bits, pool)
        rows, new_nodes, new_mask, edge_ok, dropped = _relabel_host(
            np.concatenate(nodes),
            np.concatenate(masks),
            sampled.reshape(-1),
            valid.reshape(-1),
            sizes[d + 1],
        )
        nodes.append(new_nodes)
        masks.append(new_mask)
        neighbors.append(rows.reshape(sizes[d], k))
        edge_masks.append(edge_ok.reshape(sizes[d], k))
        overflow.append(dropped)
    return DedupSample(
        nodes=tuple(nodes),
        masks=tuple(masks),
        neighbors=tuple(neighbors),
        edge_masks=tuple(edge_masks),
        overflow=np.asarray(overflow, np.int32),
    )


def localize_host(
    sample: NeighborSample, num_rows: int, *, scratch: np.ndarray | None = None
) -> LocalBatch:
    """:func:`~sparsegcn.sampling.localize` on the host: the tree's distinct ids and
    the tree renumbered to them.

    Returns the same arrays as the device function for the same tree
    (tested): ``rows`` int32 ``[num_rows]`` holds the distinct ids of every
    entry (masked ones, node 0, included) ascending, so the feature file is
    read in order, then zeros; each level is renumbered to rows;
    ``num_distinct`` is an int32 scalar.

    Args:
      sample: a tree of global ids (NumPy).
      num_rows: static ``U_max``.
      scratch: optional int32 ``[N]`` workspace, any contents, reused across
        calls: two scatters and a sort of the ``U`` distinct ids replace a
        sort of all ``T`` entries (``O(T + U log U)``, several times faster
        for trees of 10^6 entries). Without it, ``np.unique`` (``O(T log T)``).

    Raises:
      ValueError: ``num_rows`` not above the number of distinct ids.
    """
    ids = np.concatenate([np.asarray(level).reshape(-1) for level in sample.nodes])
    if scratch is None:
        distinct, inverse = np.unique(ids, return_inverse=True)
        inverse = inverse.reshape(-1).astype(np.int32)
    else:
        # Each entry writes its position; for every id one write survives, and
        # the entries reading their own position back are one per distinct id.
        positions = np.arange(ids.shape[0], dtype=np.int32)
        scratch[ids] = positions
        distinct = np.sort(ids[scratch[ids] == positions])
        scratch[distinct] = np.arange(distinct.shape[0], dtype=np.int32)
        inverse = scratch[ids]
    if distinct.shape[0] >= num_rows:
        raise ValueError(
            f"num_rows={num_rows} must exceed the tree's {distinct.shape[0]} distinct ids "
            "(use local_rows_bound)"
        )
    rows = np.zeros(num_rows, np.int32)
    rows[: distinct.shape[0]] = distinct
    levels, start = [], 0
    for level in sample.nodes:
        size = int(np.asarray(level).size)
        levels.append(inverse[start : start + size].reshape(np.shape(level)))
        start += size
    return LocalBatch(
        sample=sample._replace(nodes=tuple(levels)),
        rows=rows,
        num_distinct=np.int32(distinct.shape[0]),
    )


def rss_file_bytes() -> int | None:
    """This process's file-backed resident memory (``RssFile`` of ``/proc/self/status``),
    in bytes; ``None`` where it is not reported (not Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssFile:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class MappedBudget:
    """Keeps the resident pages of some memory maps under a budget.

    A page of a memory map counts in the process's resident set once read,
    and a long run over a 40 GB folder would keep reading new ones. After
    each read task, :meth:`check` compares the file-backed resident memory
    (:func:`rss_file_bytes`) with ``limit``; above it, every map is advised
    ``MADV_DONTNEED``: the pages leave this process's resident set but stay
    in the kernel's page cache, so the next read of a hot page costs a minor
    fault, not a disk read.

    Args:
      arrays: the memory-mapped arrays to watch (arrays in RAM are ignored).
      limit: bytes of ``RssFile`` allowed; default a quarter of host RAM.
    """

    def __init__(self, arrays: Sequence, limit: int | None = None) -> None:
        self.arrays = [a for a in arrays if memory_map(a) is not None]
        self.limit = host_memory_bytes() // 4 if limit is None else int(limit)
        self.releases = 0

    def check(self) -> bool:
        """Releases the maps' pages if ``RssFile`` exceeds the limit; whether it did."""
        rss = rss_file_bytes()
        if rss is None or rss <= self.limit or not self.arrays:
            return False
        for array in self.arrays:
            advise(array, "dontneed")
        self.releases += 1
        return True


def proc_read_bytes() -> int | None:
    """Bytes this process has caused to be read from storage (``read_bytes`` of
    ``/proc/self/io``: page-cache misses, not cached reads); ``None`` if unavailable."""
    try:
        with open(f"/proc/{os.getpid()}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None

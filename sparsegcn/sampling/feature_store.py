"""Where a sampled model's input features live: on the device, in host RAM, or on disk.

Sampled training reads, per batch, only the feature rows of the nodes in
the batch's computation tree. When the ``[N, F]`` features do not fit on
the device (ogbn-papers100M: 57 GB), they stay on the host, and each batch
ships only its rows:

1. the tree is sampled on the device as usual (the graph structure fits);
2. :func:`localize` (compiled) finds the tree's distinct node ids, sorted,
   in a static ``[U_max]`` buffer, and renumbers the tree's entries to
   their rows in that buffer;
3. :meth:`HostFeatureStore.gather` copies those rows on the host, with
   several threads over row chunks (NumPy's ``take`` releases the GIL),
   into a ``[U_max, F]`` buffer whose shape never changes;
4. the buffer goes to the device (``jax.device_put``) and the compiled step
   runs on ``(local features, renumbered tree)``.

``U_max`` (:func:`local_rows_bound`) is the tree's size bound plus one
spare row, so a batch can never overflow it; rows past the batch's
distinct count are padding that no tree entry points at. The spare row
keeps the buffer longer than the tree, so the first layer gathers the
tree's rows before projecting them (see
:func:`sparsegcn.nn.stack.run_layers`), as it does on the device when
``N`` exceeds the tree: both paths then see the same dropout masks and
the same arithmetic.

Placement is a named choice (:data:`FEATURES_ON`), resolved once from the
sizes by :func:`choose_features_on`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import time
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.files import check_mapped
from sparsegcn.sampling.blocks import tree_entries
from sparsegcn.sampling.neighbor import NeighborSample, check_fanouts

__all__ = [
    "FEATURES_ON",
    "GatherStats",
    "HostFeatureStore",
    "LocalBatch",
    "check_features_on",
    "choose_features_on",
    "device_memory_bytes",
    "gather_rows",
    "host_memory_bytes",
    "local_rows_bound",
    "localize",
]

FEATURES_ON = ("auto", "device", "host", "mmap")
# Share of device memory the features may take before "auto" keeps them on
# the host: the rest holds the graph, the sampled trees and activations.
DEVICE_FRACTION = 0.4
# Share of host RAM an on-disk dataset may take before "auto" leaves it on disk.
HOST_FRACTION = 0.5


def check_features_on(value) -> str:
    """Validates a placement name (one of :data:`FEATURES_ON`)."""
    if not isinstance(value, str) or value not in FEATURES_ON:
        raise ValueError(f"features_on must be one of {list(FEATURES_ON)}, got {value!r}")
    return value


def device_memory_bytes(device: jax.Device | None = None) -> int | None:
    """The device's memory limit in bytes, or ``None`` when it reports none (CPU)."""
    device = jax.local_devices()[0] if device is None else device  # this process's own
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    limit = (stats or {}).get("bytes_limit")
    return int(limit) if limit else None


def host_memory_bytes() -> int:
    """Physical host RAM in bytes."""
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


def choose_features_on(
    requested: str,
    nbytes: int,
    *,
    on_disk: bool,
    device_bytes: int | None,
    host_bytes: int,
    device_fraction: float = DEVICE_FRACTION,
    host_fraction: float = HOST_FRACTION,
) -> str:
    """Resolves ``requested`` (:data:`FEATURES_ON`) to ``"device"``, ``"host"`` or ``"mmap"``.

    ``"auto"``: the device when the features take at most
    ``device_fraction`` of its memory (a device that reports no limit, the
    CPU, shares the host's RAM, so ``host_bytes`` stands in); else the host
    when they are already in RAM or take at most ``host_fraction`` of it;
    else the memory-mapped file (only an on-disk dataset has one).

    Args:
      requested: the user's choice; anything but ``"auto"`` is returned as is,
        except ``"mmap"`` without a file.
      nbytes: size of the ``[N, F]`` features.
      on_disk: whether the features are a memory-mapped ``.npy`` file.
      device_bytes: device memory (:func:`device_memory_bytes`).
      host_bytes: host RAM (:func:`host_memory_bytes`).

    Raises:
      ValueError: an unknown name, or ``"mmap"`` for features not on disk.
    """
    check_features_on(requested)
    if requested == "mmap" and not on_disk:
        raise ValueError(
            "features_on='mmap' needs an on-disk dataset (memory-mapped .npy features); "
            "these features are in memory, use 'host' or 'device'"
        )
    if requested != "auto":
        return requested
    budget = host_bytes if device_bytes is None else device_bytes
    if nbytes <= device_fraction * budget:
        return "device"
    if not on_disk or nbytes <= host_fraction * host_bytes:
        return "host"
    return "mmap"


def local_rows_bound(fanouts: Sequence[int], batch_size: int, num_nodes: int) -> int:
    """``U_max = min(T, N) + 1``: rows of the local feature buffer.

    ``T = B (1 + k_1 + k_1 k_2 + ...)`` entries in a tree, so a batch has at
    most ``min(T, N)`` distinct nodes; the spare row is padding (see the
    module docstring).
    """
    fanouts = check_fanouts(fanouts)
    size, total = int(batch_size), int(batch_size)
    for k in fanouts:
        size *= k
        total += size
    return min(total, int(num_nodes)) + 1


class LocalBatch(NamedTuple):
    """A sampled tree renumbered to the rows of its local feature buffer; a pytree.

    Attributes:
      sample: the :class:`~sparsegcn.sampling.NeighborSample` whose node ids
        are rows of the local buffer (masks unchanged).
      rows: int32 ``[U_max]``: global node id of each local row; the first
        ``num_distinct`` are the tree's distinct ids, ascending; the rest are 0
        (padding).
      num_distinct: int32 ``[]``, the number of distinct ids.
    """

    sample: NeighborSample
    # NumPy when localized on the host (sparsegcn.sampling.host.localize_host).
    rows: jax.Array | np.ndarray
    num_distinct: jax.Array | np.ndarray


def localize(sample: NeighborSample, num_rows: int) -> LocalBatch:
    """Renumbers ``sample``'s entries to rows of a ``[num_rows]`` buffer of its distinct ids.

    A sort of the ``T`` entries (``O(T log T)``), a scan for the first of
    each run of equal ids, and two scatters. Every entry counts, masked ones
    included (they hold node 0): the first layer reads the rows of all
    ``T`` entries (:func:`~sparsegcn.sampling.blocks.tree_entries`).

    Args:
      sample: a tree with global ids.
      num_rows: static ``U_max`` > the number of distinct ids (use
        :func:`local_rows_bound`).

    Returns:
      :class:`LocalBatch` with ``local.rows[local.sample.nodes[d]] ==
      sample.nodes[d]`` for every level ``d``.
    """
    ids = tree_entries(sample)
    order = jnp.argsort(ids)
    ordered = ids[order]
    first = jnp.concatenate([jnp.ones((1,), bool), ordered[1:] != ordered[:-1]])
    rank = jnp.cumsum(first.astype(jnp.int32)) - 1
    inverse = jnp.zeros_like(ids).at[order].set(rank, unique_indices=True)
    rows = (
        jnp.zeros((num_rows,), jnp.int32)
        .at[jnp.where(first, rank, num_rows)]
        .set(ordered, mode="drop", unique_indices=True)
    )
    levels, start = [], 0
    for level in sample.nodes:
        levels.append(inverse[start : start + level.size].reshape(level.shape))
        start += level.size
    local = sample._replace(nodes=tuple(levels))
    return LocalBatch(sample=local, rows=rows, num_distinct=rank[-1] + 1)


def gather_rows(
    features: np.ndarray,
    ids: np.ndarray,
    out: np.ndarray,
    *,
    pool: concurrent.futures.Executor | None = None,
    chunk_rows: int = 8192,
) -> None:
    """``out[:len(ids)] = features[ids]``, over row chunks on ``pool``'s threads.

    NumPy's ``take`` releases the GIL, so the chunks copy in parallel; for a
    memory-mapped ``features`` the page faults run in parallel too (ascending
    ``ids`` read the file in order). ``O(len(ids) F)`` bytes copied.

    Args:
      features: ``[N, F]`` array or ``np.memmap``.
      ids: int ``[U]`` row ids in ``[0, N)``.
      out: ``[>= U, F]`` buffer of ``features``' dtype; rows past ``U`` are
        left as they are.
      pool: thread pool; ``None`` copies on the calling thread.
      chunk_rows: rows per task.
    """
    u = int(ids.shape[0])
    if out.shape[0] < u or out.shape[1:] != features.shape[1:] or out.dtype != features.dtype:
        raise ValueError(
            f"out must be [>= {u}, {features.shape[1:]}] {features.dtype}, "
            f"got {list(out.shape)} {out.dtype}"
        )
    if pool is None or u <= chunk_rows:
        np.take(features, ids, axis=0, out=out[:u])
        return
    bounds = range(0, u, chunk_rows)
    tasks = [
        pool.submit(np.take, features, ids[a : a + chunk_rows], 0, out[a : min(a + chunk_rows, u)])
        for a in bounds
    ]
    for task in tasks:
        task.result()


@dataclasses.dataclass
class GatherStats:
    """Host-gather totals of a run: rows and bytes copied, seconds spent copying."""

    rows: int = 0
    bytes: int = 0
    seconds: float = 0.0
    batches: int = 0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("nan")

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else float("nan")


class HostFeatureStore:
    """``[N, F]`` features in host RAM (``"host"``) or a memory-mapped file (``"mmap"``).

    Holds a thread pool. Each batch is gathered into a fresh ``[U_max, F]``
    staging buffer that is never written again: on the CPU backend
    ``jax.device_put`` may alias host memory (even with ``may_alias=False``
    the copy can complete after ``block_until_ready`` returns), so a reused
    buffer could change under a queued step. Double buffering comes from
    the caller preparing the next batch on another thread
    (:mod:`sparsegcn.train.streamed`).

    Args:
      features: ``[N, F]`` dense NumPy array or ``np.memmap``.
      num_rows: static ``U_max`` (:func:`local_rows_bound`).
      threads: gather threads (default: the CPU count, at most 8).

    Raises:
      TypeError: ``features`` is not a 2-D NumPy array.
    """

    def __init__(self, features, num_rows: int, *, threads: int | None = None) -> None:
        if not isinstance(features, np.ndarray) or features.ndim != 2:
            raise TypeError(
                "a host feature store needs dense [N, F] NumPy features (array or memmap), got "
                f"{type(features).__name__}{getattr(features, 'shape', '')}"
            )
        self.features = features
        self.kind = "mmap" if isinstance(features, np.memmap) else "host"
        self.num_rows = int(num_rows)
        count = threads or min(os.cpu_count() or 1, 8)
        self.pool = concurrent.futures.ThreadPoolExecutor(count, thread_name_prefix="gather")
        self.stats = GatherStats()

    @property
    def row_bytes(self) -> int:
        return int(self.features.shape[1]) * self.features.dtype.itemsize

    def allocate(self) -> np.ndarray:
        """A zeroed ``[U_max, F]`` staging buffer (rows past a batch's count stay zero).

        Zeroed, not left uninitialised: when the graph has fewer nodes than
        the tree has entries (``U_max = N + 1``), the first layer projects
        every staging row, the padding included, before gathering the
        tree's; garbage there (NaN in a float16 file's bytes) would turn the
        weights' gradient into NaN even though no entry reads those rows.
        """
        return np.zeros((self.num_rows, self.features.shape[1]), self.features.dtype)

    def gather(self, rows: np.ndarray, count: int) -> jax.Array:
        """The device copy of ``features[rows[:count]]``, padded to ``[U_max, F]``.

        ``O(count F)`` bytes copied by the pool's threads; the padding rows
        are zeros (see :meth:`allocate`). Run it on
        a background thread to overlap with the device's work.
        """
        check_mapped(self.features, "the features file")  # truncated under the run: SIGBUS
        buffer = self.allocate()
        tick = time.perf_counter()
        gather_rows(self.features, rows[:count], buffer, pool=self.pool)
        self.stats.seconds += time.perf_counter() - tick
        self.stats.rows += count
        self.stats.bytes += count * self.row_bytes
        self.stats.batches += 1
        return jax.device_put(buffer)

    def close(self) -> None:
        """Stops the gather threads."""
        self.pool.shutdown()

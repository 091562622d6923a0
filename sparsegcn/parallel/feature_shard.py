"""Feature rows sharded over the devices of a data-parallel run, fetched per batch.

Data parallelism (:mod:`sparsegcn.parallel.data_parallel`) replicates the
``[N, F]`` features on every device, so adding devices adds no memory for
them. Here each of the ``D`` devices of the mesh holds ``R = ceil(N / D)``
consecutive rows instead (:func:`shard_feature_rows`; device ``d`` owns the
nodes ``[d R, (d + 1) R)``, the last device's tail is zero padding), and a
step fetches the rows its sampled tree reads from their owners
(:func:`fetch_rows`, inside ``shard_map``):

1. ``all_gather`` of every device's ids (``[D, T]`` on each device);
2. each device reads, for every one of those ids, the row at its own local
   position (a row it does not own is read from a clipped position and
   never used);
3. ``all_to_all``: device ``d`` receives, from every device ``e``, the
   ``[T, F]`` rows ``e`` read for ``d``'s ids;
4. each id keeps the copy its owner ``id // R`` sent.

The result is ``x[ids]`` bit for bit (a selection, no arithmetic), for any
dtype. Per device and per fetch it moves and holds ``2 D T F`` elements
(what device ``d`` reads for everyone, what it receives): the global
batch's tree rows, twice. Ids never travel sorted by owner, so no buffer has
a data-dependent size and the step compiles once.

:func:`sharded_features_model` wraps a sampled model so that its ``apply``
takes the local block of rows: on a sampled tree it fetches the tree's rows
and runs the model on them (bitwise the replicated model's arithmetic
whenever that one gathers before projecting, i.e. ``N`` exceeds the
per-device tree); on any other graph (layer-wise evaluation on a
:class:`~sparsegcn.sampling.ChunkedGraph`) it ``all_gather``-s the full
matrix for the call, so evaluation is the single-device one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from sparsegcn.features import SparseFeatures
from sparsegcn.nn.model import Model
from sparsegcn.parallel.mesh import AXIS
from sparsegcn.sampling.blocks import tree_entries
from sparsegcn.sampling.dedup import DedupSample
from sparsegcn.sampling.neighbor import NeighborSample

SAMPLES = (NeighborSample, DedupSample)


def rows_per_device(num_nodes: int, num_devices: int) -> int:
    """``R = ceil(N / D)``: feature rows each device holds (the last one's tail padded)."""
    return -(-int(num_nodes) // int(num_devices))


def shard_feature_rows(x, mesh: Mesh, axis: str = AXIS) -> jax.Array:
    """Places ``x`` on ``mesh`` split by rows: ``R = ceil(N / D)`` rows per device.

    The global array is ``[D R, F]``: rows ``[N, D R)`` are zeros, on the
    last device(s). Each device's block is cut from ``x`` on the host and
    padded on its own, so no padded copy of the whole matrix is made (a
    memory-mapped ``x`` is read block by block). In a multi-process run
    each process fills only its own devices.

    Args:
      x: dense ``[N, F]`` features (NumPy, memory-mapped, or a JAX array).
      mesh: the run's mesh (:func:`~sparsegcn.parallel.make_mesh`).
      axis: the mesh axis the rows are split over.

    Returns:
      A ``[D R, F]`` :class:`jax.Array` with sharding
      ``NamedSharding(mesh, P(axis, None))``.

    Raises:
      TypeError: sparse features (their rows are not fixed-size).
      ValueError: ``x`` is not 2-D.
    """
    if isinstance(x, SparseFeatures):
        raise TypeError(
            "shard_features needs dense features; got SparseFeatures (sparse rows are not "
            "fixed-size blocks)"
        )
    if np.ndim(x) != 2:
        raise ValueError(f"features must be [N, F] to shard by rows, got shape {np.shape(x)}")
    n, f = (int(s) for s in np.shape(x))
    rows = rows_per_device(n, mesh.shape[axis])
    total = rows * mesh.shape[axis]
    dtype = x.dtype

    def block(index) -> np.ndarray:
        start, stop, _ = index[0].indices(total)
        part = np.asarray(x[min(start, n) : min(stop, n)], dtype)
        if part.shape[0] == stop - start:
            return part
        pad = np.zeros((stop - start - part.shape[0], f), dtype)
        return np.concatenate([part, pad])

    sharding = NamedSharding(mesh, P(axis, None))
    return jax.make_array_from_callback((total, f), sharding, block)


def fetch_rows(x_local: jax.Array, ids: jax.Array, axis_name: str = AXIS) -> jax.Array:
    """``x[ids]`` from row-sharded ``x``, each device with its own ``ids``; inside ``shard_map``.

    Args:
      x_local: this device's ``[R, F]`` block of :func:`shard_feature_rows`'s
        array (the ``shard_map`` view of ``P(axis_name, None)``).
      ids: int ``[...]`` global row ids in ``[0, D R)``, different on each
        device; any shape, the same on every device (static).
      axis_name: the mesh axis the rows are split over.

    Returns:
      ``[*ids.shape, F]``: the rows of ``x`` at ``ids``, bitwise, in
      ``x_local``'s dtype. Ids outside ``[0, D R)`` are clipped.
    """
    num_devices = jax.lax.axis_size(axis_name)
    rows = x_local.shape[0]
    flat = jnp.clip(ids.reshape(-1).astype(jnp.int32), 0, num_devices * rows - 1)
    me = jax.lax.axis_index(axis_name)
    everyone = jax.lax.all_gather(flat, axis_name)  # [D, T]: device e's ids in row e
    local = jnp.clip(everyone - me * rows, 0, rows - 1)
    read = jnp.take(x_local, local, axis=0)  # [D, T, F]; rows not owned are never selected
    received = jax.lax.all_to_all(read, axis_name, 0, 0, tiled=True)  # row e: e's reads for me
    owner = flat // rows
    out = received[owner, jnp.arange(flat.shape[0])]
    return out.reshape(*ids.shape, x_local.shape[1])


def sample_rows(sample) -> jax.Array:
    """int32 ``[T]``: the node id of each row a sample's first layer reads."""
    return tree_entries(sample) if isinstance(sample, NeighborSample) else sample.entries()


def positional_sample(sample):
    """``sample`` with every node id replaced by its row's position in :func:`sample_rows`.

    The model reads a sample's node ids only to gather feature rows, so on
    the fetched rows (row ``t`` holding node ``sample_rows(sample)[t]``)
    the positional sample computes what the original does on ``x``.
    """
    levels, start = [], 0
    for level in sample.nodes:
        levels.append(jnp.arange(start, start + level.size, dtype=jnp.int32).reshape(level.shape))
        start += level.size
    return sample._replace(nodes=tuple(levels))


def sharded_features_model(model: Model, num_nodes: int, axis_name: str = AXIS) -> Model:
    """``model`` reading row-sharded features, for use inside ``shard_map`` over ``axis_name``.

    ``apply(params, graph, x_local, **kwargs)``, with ``x_local`` the device's
    ``[R, F]`` block of :func:`shard_feature_rows`:

    - on a sampled tree (:class:`~sparsegcn.sampling.NeighborSample` or
      :class:`~sparsegcn.sampling.DedupSample`), the tree's ``T`` rows are
      fetched (:func:`fetch_rows`) into a ``[T + 1, F]`` buffer (one spare
      zero row, so the first layer gathers before projecting, as the
      replicated model does when ``N > T``) and the model runs on the
      positional tree (:func:`positional_sample`);
    - on anything else (a :class:`~sparsegcn.sampling.ChunkedGraph` for
      layer-wise evaluation), the full ``[N, F]`` matrix is gathered
      (``all_gather``) for the call.

    ``embed`` gathers the full matrix likewise.

    Args:
      model: a sampled model (sage, gat, gatv2, gin).
      num_nodes: static ``N``, the real rows (the padding is cut off).
      axis_name: the mesh axis the rows are split over.
    """

    def full(x_local):
        return jax.lax.all_gather(x_local, axis_name, tiled=True)[:num_nodes]

    def apply(params, graph, x_local, **kwargs):
        if not isinstance(graph, SAMPLES):
            return model.apply(params, graph, full(x_local), **kwargs)
        rows = fetch_rows(x_local, sample_rows(graph), axis_name)
        spare = jnp.zeros((1, rows.shape[1]), rows.dtype)
        buffer = jnp.concatenate([rows, spare])
        return model.apply(params, positional_sample(graph), buffer, **kwargs)

    def embed(params, graph, x_local, **kwargs):
        return model.embed(params, graph, full(x_local), **kwargs)

    return model._replace(apply=apply, embed=embed)

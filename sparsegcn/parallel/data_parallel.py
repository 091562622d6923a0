"""Data-parallel mini-batch training: one global batch split over the devices of a mesh.

Every device holds the whole graph, the features, the params and the
optimizer state (replicated). For each global batch of ``B`` seeds (the
``B`` of :class:`~sparsegcn.train.MinibatchConfig`, whatever the device
count ``D``), device ``d`` takes slots ``[d b, (d + 1) b)`` with
``b = ceil(B / D)`` (the batch is padded with weight-0 slots to ``D b``),
samples their computation trees with its own key ``fold_in(key, d)``, and
computes the gradient of its share of the loss. Because the mini-batch
loss is a weighted sum over slots (weight ``1 / |real seeds|``, 0 for
padding; see :mod:`sparsegcn.train.minibatch`),

.. math::

    \\nabla L = \\sum_{d=0}^{D-1} \\nabla \\sum_{i \\in \\text{slice}_d} w_i \\ell_i
              = D \\cdot \\mathrm{pmean}_d\\big(\\nabla L_d\\big),

so a ``psum`` of the devices' gradients inside the compiled step is
exactly the gradient of the global batch (equal to the single-device one
when the samples are: tested), and every device applies the same Adam
update to the same params, which therefore stay identical. The whole
epoch (``lax.scan`` over batches) and ``config.chunk`` epochs of every seed
(``vmap``) are one ``shard_map`` program, compiled once.

With ``D = 1`` no key is folded, so the run equals
:func:`~sparsegcn.train.fit_minibatch` exactly. With ``D > 1`` the
batches (which seeds, in which order) are those of a single-device run of
the same seed; only the sampled neighbours and dropout masks differ, being
drawn from per-device keys.

Evaluation (layer-wise, full neighbourhoods) runs on every device on the
replicated graph: its cost does not shrink with ``D``.

With ``shard_features=True`` the features are not replicated: each device
holds ``ceil(N / D)`` rows (:func:`~sparsegcn.parallel.shard_feature_rows`)
and every step fetches its tree's rows from their owners with collectives
(:func:`~sparsegcn.parallel.fetch_rows`), bitwise the rows a replicated
step reads; evaluation gathers the whole matrix for its call
(:func:`~sparsegcn.parallel.sharded_features_model`).

References:
  Hamilton, Ying & Leskovec, *Inductive Representation Learning on Large
  Graphs*, NeurIPS 2017. https://arxiv.org/abs/1706.02216
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import cast

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from sparsegcn._checks import check_config, check_flag
from sparsegcn.features import SparseFeatures
from sparsegcn.nn.model import Model
from sparsegcn.parallel.feature_shard import shard_feature_rows, sharded_features_model
from sparsegcn.parallel.mesh import AXIS, as_mesh, put
from sparsegcn.sampling.neighbor import check_fanouts
from sparsegcn.train import loop
from sparsegcn.train.losses import (
    CLASSIFICATION,
    NodeObjective,
    chance_loss,
    model_classes,
)
from sparsegcn.train.minibatch import (
    Batch,
    MinibatchConfig,
    MinibatchData,
    MinibatchFitResult,
    effective_batch_size,
    first_batch,
    make_chunk_fn,
    make_grad_fn,
    make_step_fn,
    steps_per_epoch,
)
from sparsegcn.train.state import TrainConfig, TrainState


def device_batch_size(batch_size: int, num_devices: int) -> int:
    """Slots per device, ``ceil(B / D)``."""
    return -(-int(batch_size) // int(num_devices))


def slice_batch(batch: Batch, index: jax.Array, num_devices: int) -> Batch:
    """Device ``index``'s share of ``batch``: slots ``[index b, (index + 1) b)``.

    Args:
      batch: the global :class:`~sparsegcn.train.Batch`, ``[B]``.
      index: int32 scalar device index in ``[0, D)`` (traced is fine).
      num_devices: static ``D``.

    Returns:
      A ``[b]`` batch, ``b = ceil(B / D)``; slots past ``B`` are padding
      (node 0, weight 0).
    """
    per = device_batch_size(batch.nodes.shape[0], num_devices)
    pad = per * num_devices - batch.nodes.shape[0]
    nodes = jnp.pad(batch.nodes, (0, pad))
    weights = jnp.pad(batch.weights, (0, pad))
    start = index * per
    return Batch(
        nodes=jax.lax.dynamic_slice_in_dim(nodes, start, per),
        weights=jax.lax.dynamic_slice_in_dim(weights, start, per),
    )


def make_data_parallel_grad_fn(
    model: Model,
    fanouts: Sequence[int],
    num_devices: int,
    axis_name: str = AXIS,
    *,
    sampler: str = "tree",
    caps=None,
    objective: NodeObjective = CLASSIFICATION,
) -> Callable:
    """``grad_fn(params, data, batch, key) -> (loss, grads)`` over the global batch.

    To be called inside ``shard_map`` over ``axis_name`` (size
    ``num_devices``): each device computes
    :func:`~sparsegcn.train.make_grad_fn`'s loss and gradient on its slice
    of ``batch`` (:func:`slice_batch`) with key ``fold_in(key, d)`` (``key``
    itself when ``D = 1``), and the results are ``psum``-ed, so loss and
    gradient are those of the whole global batch, identical on every device.
    ``sampler`` and ``caps`` choose the sampler (see
    :class:`~sparsegcn.train.MinibatchConfig`); ``objective`` the per-node
    loss (softmax cross-entropy by default; any
    :class:`~sparsegcn.train.NodeObjective` whose ``node_losses`` are per
    node, as the seed-weighted sum then splits over devices).
    """
    local_grad_fn = make_grad_fn(
        model, check_fanouts(fanouts), sampler=sampler, caps=caps, objective=objective
    )

    def grad_fn(params, data: MinibatchData, batch: Batch, key: jax.Array):
        if num_devices == 1:
            return local_grad_fn(params, data, batch, key)
        index = jax.lax.axis_index(axis_name)
        local = slice_batch(batch, index, num_devices)
        loss, grads = local_grad_fn(params, data, local, jax.random.fold_in(key, index))
        return jax.lax.psum((loss, grads), axis_name)

    return grad_fn


def data_parallel_chunk_fn(
    model: Model,
    tx,
    config: TrainConfig,
    minibatch: MinibatchConfig,
    mesh: Mesh,
    *,
    sharded_rows: int | None = None,
    objective: NodeObjective = CLASSIFICATION,
) -> Callable:
    """``(states [K], data) -> (states, metrics [K, chunk])`` on ``mesh``, to be jitted.

    :func:`~sparsegcn.train.minibatch.make_chunk_fn` with the data-parallel
    gradient, as one ``shard_map`` program: state and data replicated in,
    state and metrics replicated out. With ``sharded_rows = N``,
    ``data.features`` comes in row-sharded instead
    (:func:`~sparsegcn.parallel.shard_feature_rows` of ``N`` rows) and the
    model reads it through :func:`~sparsegcn.parallel.sharded_features_model`.
    ``objective`` gives the loss and the evaluation's metric.
    """
    model = _reading_features(model, sharded_rows)
    grad_fn = make_data_parallel_grad_fn(
        model, minibatch.fanouts, mesh.size, **minibatch.sampling, objective=objective
    )
    chunk_fn = make_chunk_fn(model, tx, config, minibatch, grad_fn=grad_fn, objective=objective)
    return _replicated_program(chunk_fn, mesh, (P(), _data_spec(sharded_rows)))


def data_parallel_step_fn(
    model: Model,
    tx,
    fanouts: Sequence[int],
    mesh: Mesh,
    *,
    sampler: str = "tree",
    caps=None,
    sharded_rows: int | None = None,
    objective: NodeObjective = CLASSIFICATION,
) -> Callable:
    """``(states [K], data, batch) -> states``: one data-parallel optimizer step of every seed
    (``sampler``, ``caps``, ``objective``: see :func:`make_data_parallel_grad_fn`;
    ``sharded_rows``: see :func:`data_parallel_chunk_fn`)."""
    model = _reading_features(model, sharded_rows)
    grad_fn = make_data_parallel_grad_fn(
        model, fanouts, mesh.size, sampler=sampler, caps=caps, objective=objective
    )
    step_fn = make_step_fn(model, tx, fanouts, grad_fn=grad_fn)
    return _replicated_program(step_fn, mesh, (P(), _data_spec(sharded_rows), P()))


def _reading_features(model: Model, sharded_rows: int | None) -> Model:
    return model if sharded_rows is None else sharded_features_model(model, sharded_rows)


def _data_spec(sharded_rows: int | None):
    if sharded_rows is None:
        return P()
    replicated = MinibatchData._make([P()] * len(MinibatchData._fields))
    return replicated._replace(features=P(AXIS, None))


def _replicated_program(fn: Callable, mesh: Mesh, in_specs: tuple) -> Callable:
    # check_vma=False: the sampler's loops start from constants (invariant)
    # and carry sampled ids (varying per device), which the varying-axes
    # type check refuses. Nothing here relies on it: gradients are taken
    # locally and psum-ed explicitly, and every output is computed from
    # psum-ed gradients, hence equal on all devices (tested).
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=P(), check_vma=False)


def place_data(data: MinibatchData, mesh: Mesh, *, shard_features: bool = False) -> MinibatchData:
    """``data`` on ``mesh``: replicated, or with the features split by rows
    (:func:`~sparsegcn.parallel.shard_feature_rows`) when ``shard_features``."""
    if not shard_features:
        return put(data, mesh)
    rest = put(data._replace(features=None), mesh)
    return rest._replace(features=shard_feature_rows(data.features, mesh))


def fit_data_parallel(
    model: Model,
    data: MinibatchData,
    config: TrainConfig | None = None,
    minibatch: MinibatchConfig | None = None,
    *,
    devices: int | Mesh = 1,
    seeds: Sequence[int] = (0,),
    progress: bool = False,
    state: TrainState | None = None,
    history: dict | None = None,
    on_chunk: Callable[[TrainState, dict], None] | None = None,
    shard_features: bool = False,
    objective: NodeObjective = CLASSIFICATION,
) -> MinibatchFitResult:
    """:func:`~sparsegcn.train.fit_minibatch` with each batch split over several devices.

    Same arguments, results and divergence handling as ``fit_minibatch``;
    the global batch size is ``minibatch.batch_size`` whatever the device
    count. Seeds are trained together on every device (``vmap`` inside each
    device's program), each seed's batch split over all devices.

    Args:
      devices: local devices per process ``D`` (the mesh spans ``D`` devices
        of every process of a multi-process run), or a mesh from
        :func:`~sparsegcn.parallel.make_mesh`.
      model, data, config, minibatch, seeds, progress, state, history, on_chunk, objective:
        as :func:`~sparsegcn.train.fit_minibatch`.
      shard_features: split the dense features by rows over the devices
        (``ceil(N / D)`` rows each) instead of replicating them; each step
        fetches its trees' rows with collectives (see the module docstring).
        The trained params equal the replicated run's.

    Returns:
      A :class:`~sparsegcn.train.MinibatchFitResult`; its state is
      replicated on the mesh (every process can read it).
      ``train_step_ms_median`` times one data-parallel step of all seeds
      (NaN unless ``config.timing_steps > 0``); ``sampled_edges_per_s`` is
      not measured here (NaN).

    Raises:
      TypeError: ``data`` is not :class:`~sparsegcn.train.MinibatchData`, or
        ``shard_features`` with sparse features.
      ValueError: more devices than available (the message says how to
        simulate devices on CPU), no seeds, or a state that does not match
        ``seeds``.
      DivergenceError: a seed's loss or gradient became non-finite.
    """
    mesh = as_mesh(devices)
    minibatch = check_config("fit_data_parallel", minibatch, MinibatchConfig, name="minibatch")
    if not isinstance(data, MinibatchData):
        raise TypeError(
            f"fit_data_parallel expects MinibatchData (see minibatch_data), got "
            f"{type(data).__name__}"
        )
    num_train = int(data.train_nodes.shape[0])
    batch_size = effective_batch_size(num_train, minibatch.batch_size)
    check_flag("shard_features", shard_features)
    sharded_rows = int(data.graph.num_nodes) if shard_features else None
    if shard_features and isinstance(data.features, SparseFeatures):
        raise TypeError(
            "shard_features=True needs dense features; got SparseFeatures (sparse rows are "
            "not fixed-size blocks)"
        )

    def step_args(state: TrainState, data: MinibatchData, seeds: tuple[int, ...]) -> tuple:
        batch = first_batch(jax.random.key(seeds[0]), data.train_nodes, batch_size)
        return state, data, put(batch, mesh)

    trainer = loop.Trainer(
        name="fit_data_parallel",
        chance=chance_loss(objective.metric_name, model_classes(model)),
        make_chunk=lambda tx, config: data_parallel_chunk_fn(
            model, tx, config, minibatch, mesh, sharded_rows=sharded_rows, objective=objective
        ),
        make_step=lambda tx: data_parallel_step_fn(
            model,
            tx,
            minibatch.fanouts,
            mesh,
            **minibatch.sampling,
            sharded_rows=sharded_rows,
            objective=objective,
        ),
        place=lambda state, data: (
            put(state, mesh),
            place_data(data, mesh, shard_features=shard_features),
        ),
        step_args=step_args,
        result=functools.partial(
            MinibatchFitResult,
            steps_per_epoch=steps_per_epoch(num_train, batch_size),
            batch_size=batch_size,
        ),
    )
    result = loop.run_training(
        trainer,
        model,
        data,
        config,
        seeds=seeds,
        progress=progress,
        state=state,
        history=history,
        on_chunk=on_chunk,
    )
    # trainer.result is the MinibatchFitResult partial above.
    return cast(MinibatchFitResult, result)

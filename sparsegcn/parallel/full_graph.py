"""Full-graph training and inference with edge-sharded propagation.

:func:`fit_edge_sharded` is :func:`~sparsegcn.train.fit` on a mesh of
``D`` devices: the graph's edges are split by receiver range
(:class:`~sparsegcn.parallel.EdgeShardedGraph`), the features by rows, and
every propagation runs edge-sharded (:func:`~sparsegcn.parallel.propagate_shard`),
so no device holds more than ``1 / D`` of the edges or of the input
features. Params, optimizer state, labels and masks are replicated; the
logits of all nodes are all-gathered once per forward, so loss, accuracy
and the early-stopping bookkeeping are the single-device trainer's own
functions (``run_epoch``, ``train_step``, ``evaluate``) unchanged, run
identically on every device. Seeds are ``vmap``-ed inside each device's
program, and ``config.chunk`` epochs of all of them are one compiled
``shard_map`` program.

Equal to the single-device trainer up to float32 summation order when
dropout is off (tested); with dropout, device ``d`` draws its rows' masks
from its own key (see :func:`~sparsegcn.parallel.edge_sharded_model`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from sparsegcn.nn.model import Model
from sparsegcn.parallel.edge_shard import (
    EdgeShardedGraph,
    edge_sharded_model,
    pad_rows,
    shard_features,
)
from sparsegcn.parallel.mesh import AXIS, as_mesh, put
from sparsegcn.train import loop
from sparsegcn.train.fullbatch import make_chunk_fn, make_step_fn
from sparsegcn.train.loop import FitResult
from sparsegcn.train.losses import (
    CLASSIFICATION,
    NodeObjective,
    chance_loss,
    model_classes,
)
from sparsegcn.train.state import NodeData, TrainConfig, TrainState

# A NodeData-shaped tree of PartitionSpecs (shard_map's specs mirror the data
# pytree): its leaves are specs, not the arrays the fields are typed as.
# fmt: off
DATA_SPECS = NodeData(
    graph=P(AXIS), features=P(AXIS), labels=P(), train_mask=P(), val_mask=P(), test_mask=P()  # type: ignore[arg-type]
)
# fmt: on
"""How :func:`shard_node_data`'s fields lie on the mesh: graph and features split, the rest replicated."""


def shard_node_data(data: NodeData, num_shards: int) -> NodeData:
    """``data`` laid out for ``D = num_shards`` devices; host-side, once.

    The graph becomes an :class:`~sparsegcn.parallel.EdgeShardedGraph`
    (without ``edge_ids``), the features are row-sharded
    (:func:`~sparsegcn.parallel.shard_features`), and labels and masks are
    padded to ``D R`` rows (padding rows are in no split).
    """
    graph = EdgeShardedGraph.build(data.graph, num_shards).without_edge_ids()
    rows = graph.padded_nodes
    return NodeData(
        graph=graph,
        features=shard_features(data.features, num_shards),
        labels=pad_rows(np.asarray(data.labels, np.int32), rows),
        train_mask=pad_rows(np.asarray(data.train_mask, bool), rows, False),
        val_mask=pad_rows(np.asarray(data.val_mask, bool), rows, False),
        test_mask=pad_rows(np.asarray(data.test_mask, bool), rows, False),
    )


def place_node_data(data: NodeData, mesh: Mesh) -> NodeData:
    """Puts :func:`shard_node_data`'s result on ``mesh`` as :data:`DATA_SPECS` says."""
    return NodeData(*(put(field, mesh, spec) for field, spec in zip(data, DATA_SPECS, strict=True)))


def edge_sharded_chunk_fn(
    model: Model,
    tx,
    config: TrainConfig,
    mesh: Mesh,
    objective: NodeObjective = CLASSIFICATION,
) -> Callable:
    """``(states [K], sharded data) -> (states, metrics [K, chunk])`` on ``mesh``, to be jitted.

    :func:`~sparsegcn.train.make_chunk_fn` of the edge-sharded model as one
    ``shard_map`` program (loss and metric: ``objective``'s).
    """
    chunk_fn = make_chunk_fn(edge_sharded_model(model), tx, config, objective)
    return jax.shard_map(chunk_fn, mesh=mesh, in_specs=(P(), DATA_SPECS), out_specs=P())


def edge_sharded_step_fn(
    model: Model, tx, mesh: Mesh, objective: NodeObjective = CLASSIFICATION
) -> Callable:
    """``(states [K], sharded data) -> states``: one edge-sharded optimizer step of every seed
    (on ``objective``'s loss)."""
    step_fn = make_step_fn(edge_sharded_model(model), tx, objective)
    return jax.shard_map(step_fn, mesh=mesh, in_specs=(P(), DATA_SPECS), out_specs=P())


def fit_edge_sharded(
    model: Model,
    data: NodeData,
    config: TrainConfig | None = None,
    *,
    devices: int | Mesh = 1,
    seeds: Sequence[int] = (0,),
    progress: bool = False,
    state: TrainState | None = None,
    history: dict | None = None,
    on_chunk: Callable[[TrainState, dict], None] | None = None,
    objective: NodeObjective = CLASSIFICATION,
) -> FitResult:
    """:func:`~sparsegcn.train.fit` with edges and features sharded over several devices.

    Args:
      model: any registered node model: each runs on an edge shard unchanged, with
        the same params (:func:`~sparsegcn.parallel.edge_sharded_model`; tested
        against a single device for every model of the registry).
      data: the same :class:`~sparsegcn.train.NodeData` ``fit`` takes
        (normalized graph); sharded on the host once.
      devices: local devices per process ``D`` or a mesh; the graph is
        split over all mesh devices.
      config, seeds, progress, state, history, on_chunk, objective: as
        :func:`~sparsegcn.train.fit` (labels ``[N]`` or, multi-label,
        ``[N, T]``; their padding rows are in no mask).

    Returns:
      A :class:`~sparsegcn.train.FitResult` whose state is replicated on the
      mesh (readable by every process); ``train_step_ms_median`` is NaN
      unless ``config.timing_steps > 0``.

    Raises:
      ValueError: more devices than available (with how to simulate
        devices on CPU), no seeds, or a state that does not match ``seeds``.
      DivergenceError: a seed's loss or gradient became non-finite.
    """
    mesh = as_mesh(devices)
    trainer = loop.Trainer(
        name="fit_edge_sharded",
        chance=chance_loss(objective.metric_name, model_classes(model)),
        make_chunk=lambda tx, config: edge_sharded_chunk_fn(model, tx, config, mesh, objective),
        make_step=lambda tx: edge_sharded_step_fn(model, tx, mesh, objective),
        place=lambda state, data: (
            put(state, mesh),
            place_node_data(shard_node_data(data, mesh.size), mesh),
        ),
    )
    return loop.run_training(
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


def predict_edge_sharded(
    model: Model, params, data: NodeData, *, devices: int | Mesh = 1
) -> tuple[jax.Array, jax.Array]:
    """:func:`~sparsegcn.train.predict` (layer-wise full-graph inference), edge-sharded.

    Args:
      model: the model the params belong to (any registered node model).
      params: params with a leading ``[K]`` seed axis.
      data: the :class:`~sparsegcn.train.NodeData` (graph and features are read).
      devices: local devices per process or a mesh.

    Returns:
      ``(classes, embeddings)``: int32 ``[K, N]`` and float32 ``[K, N, H]``,
      replicated on the mesh.
    """
    mesh = as_mesh(devices)
    sharded = edge_sharded_model(model)
    n = data.graph.num_nodes
    graph = EdgeShardedGraph.build(data.graph, mesh.size).without_edge_ids()
    graph = put(graph, mesh, P(AXIS))
    features = put(shard_features(data.features, mesh.size), mesh, P(AXIS))

    def one_seed(p, graph, features):
        logits = sharded.apply(p, graph, features)
        classes = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return classes[:n], sharded.embed(p, graph, features)[:n]

    run = jax.shard_map(
        jax.vmap(one_seed, in_axes=(0, None, None)),
        mesh=mesh,
        in_specs=(P(), P(AXIS), P(AXIS)),
        out_specs=P(),
    )
    return jax.jit(run)(put(params, mesh), graph, features)

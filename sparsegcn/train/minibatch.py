"""Mini-batch training with on-device neighbour sampling, one compiled loop per epoch.

The pieces are pure functions composed bottom-up, as in the full-batch trainer:

- :func:`make_batches`: the train nodes permuted on device and cut into
  ``[S, B]`` seed batches, the last one padded (weight 0), never dropped or
  repeated;
- :func:`make_grad_fn`: ``(params, data, batch, key) -> (loss, grads)``:
  sample the computation tree, forward, backward. No optimizer and no
  collective: the unit that data parallelism wraps (each device its own
  slice of the batch and its own key, then a ``psum``/``pmean`` of grads);
- :func:`train_epoch`: a ``lax.scan`` of sample, forward, backward and optax
  update over the ``S`` batches;
- :func:`run_epoch`: an epoch, layer-wise full-neighbourhood evaluation on
  the validation and test nodes (chunked, not sampled), and early stopping;
- :func:`make_chunk_fn`: ``jit(vmap(scan(run_epoch)))`` over seeds and epochs;
- :func:`fit_minibatch`: that program run by the shared skeleton
  :func:`~sparsegcn.train.loop.run_training`.

There is no Python per batch and no host round-trip: a run compiles each
program once whatever the number of epochs or batches.

**Loss weights.** A batch carries one loss weight per seed slot: ``1 / b``
for each of its ``b`` real seeds, 0 for padding, so the loss
``sum_i w_i l_i`` is the mean over the batch's real seeds. The loss is
linear in the seeds: split a batch's slots across devices, keep the
weights, and the ``psum`` of the devices' gradients is exactly the
single-device gradient (``pmean`` after scaling the weights by the device
count).

References:
  Hamilton, Ying & Leskovec, *Inductive Representation Learning on Large
  Graphs*, NeurIPS 2017. https://arxiv.org/abs/1706.02216
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sparsegcn import _checks
from sparsegcn.features import Features, as_features
from sparsegcn.nn.model import Model
from sparsegcn.sampling.chunks import ChunkedGraph
from sparsegcn.sampling.dedup import SAMPLERS, check_caps, sample_batch
from sparsegcn.sampling.neighbor import check_fanouts
from sparsegcn.train import loop
from sparsegcn.train.fullbatch import end_epoch, evaluate
from sparsegcn.train.loop import FitResult
from sparsegcn.train.losses import (
    CLASSIFICATION,
    NodeObjective,
    chance_loss,
    model_classes,
)
from sparsegcn.train.optim import apply_optimizer
from sparsegcn.train.state import NodeData, TrainConfig, TrainState, check_node_rows


@dataclasses.dataclass(frozen=True)
class MinibatchConfig:
    """What mini-batch training adds to :class:`~sparsegcn.train.TrainConfig`.

    Attributes:
      fanouts: neighbours sampled per hop, ``(k_1, ..., k_L)``, one per
        layer; ``k_1`` for the seeds' neighbours. A string ``"25,10"`` is
        accepted.
      batch_size: seeds per batch ``B``; clipped to the number of train
        nodes (a larger batch would be padding only).
      sampler: ``"tree"`` (:func:`~sparsegcn.sampling.sample_blocks`, a
        row per path) or ``"dedup"`` (:func:`~sparsegcn.sampling.sample_dedup`,
        a row per distinct node).
      caps: dedup only: per-hop frontier caps (see
        :func:`~sparsegcn.sampling.dedup_sizes`), ``None`` for none.
    """

    fanouts: tuple[int, ...] = (25, 10)
    batch_size: int = 512
    sampler: str = "tree"
    caps: tuple[int, ...] | str | None = None  # a string "A,B,C" is parsed

    def __post_init__(self):
        object.__setattr__(self, "fanouts", check_fanouts(self.fanouts))
        _checks.check_static_int("batch_size", self.batch_size, minimum=1)
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {self.sampler!r}")
        if self.caps is not None and self.sampler != "dedup":
            raise ValueError(f"caps={self.caps!r} applies to sampler='dedup' only")
        object.__setattr__(self, "caps", check_caps(self.caps, len(self.fanouts)))

    @property
    def sampling(self) -> dict:
        """``{"sampler": ..., "caps": ...}``: the keywords of :func:`make_grad_fn` and co."""
        return {"sampler": self.sampler, "caps": self.caps}


class MinibatchData(NamedTuple):
    """Everything a mini-batch epoch reads; a pytree passed as an argument.

    Attributes:
      graph: :class:`~sparsegcn.sampling.ChunkedGraph` of the unweighted
        graph the model reads (its preparation, e.g. GAT's self-loops): its
        ``indptr``/``indices`` are the CSR view the sampler reads, and it
        serves chunked evaluation.
      features: ``[N, F]`` dense array or :class:`~sparsegcn.SparseFeatures`.
      labels: int32 ``[N]``.
      train_nodes: int32 ``[T]``, the nodes permuted into batches each epoch.
      train_mask, val_mask, test_mask: bool ``[N]``.
    """

    graph: ChunkedGraph
    features: Features
    # NumPy on the host until the trainer puts them on the device.
    labels: jax.Array | np.ndarray
    train_nodes: jax.Array | np.ndarray
    train_mask: jax.Array | np.ndarray
    val_mask: jax.Array | np.ndarray
    test_mask: jax.Array | np.ndarray


def sampling_graph(graph, chunk_size: int | None = None) -> ChunkedGraph:
    """The unweighted structure of ``graph``, chunked: what the sampler and
    layer-wise evaluation read.

    Edge weights are dropped: sampling picks neighbours uniformly, and the
    sampled models aggregate by an unweighted mean or by attention.
    """
    unweighted = graph if graph.weights is None else graph.replace(weights=None)
    return ChunkedGraph.build(unweighted, chunk_size)


def minibatch_data(data: NodeData, *, chunk_size: int | None = None) -> MinibatchData:
    """Builds :class:`MinibatchData` from full-batch :class:`NodeData` (host-side, once).

    Args:
      data: node data whose ``graph`` is the raw (un-normalized) graph.
      chunk_size: nodes per chunk of layer-wise evaluation, which bounds its
        memory; by default sized for about ``2**19`` edges per chunk (see
        :class:`~sparsegcn.sampling.ChunkedGraph`).

    Raises:
      ValueError: if there are no train nodes, or labels and masks without one
        row per node.
      TypeError: masks that are not bool, or labels that are not integers (they
        were truncated: 6.9 became class 6).
    """
    check_node_rows("minibatch_data", data)
    n = data.graph.num_nodes
    train_mask = np.asarray(data.train_mask, bool)
    train_nodes = np.flatnonzero(train_mask).astype(np.int32)
    if train_nodes.size == 0:
        raise ValueError("mini-batch training needs at least one train node; train_mask is empty")
    return MinibatchData(
        graph=sampling_graph(data.graph, chunk_size),
        features=as_features(data.features, n),
        labels=np.asarray(data.labels, np.int32),
        train_nodes=train_nodes,
        train_mask=train_mask,
        val_mask=np.asarray(data.val_mask, bool),
        test_mask=np.asarray(data.test_mask, bool),
    )


class Batch(NamedTuple):
    """The seeds of one mini-batch (a leading ``[S]`` axis for a whole epoch).

    Attributes:
      nodes: int32 ``[B]`` seed ids; padding slots hold node 0.
      weights: float32 ``[B]`` loss weights: ``1 / b`` for each of the
        batch's ``b`` real seeds, 0 for padding.
    """

    nodes: jax.Array
    weights: jax.Array

    @property
    def mask(self) -> jax.Array:
        """bool ``[B]``, ``True`` for real seeds."""
        return self.weights > 0


def effective_batch_size(num_train: int, batch_size: int) -> int:
    """``min(batch_size, num_train)``: a batch larger than the train set is all padding."""
    return max(min(int(batch_size), int(num_train)), 1)


def steps_per_epoch(num_train: int, batch_size: int) -> int:
    """``ceil(T / B)`` with ``B`` clipped as in :func:`effective_batch_size`."""
    return -(-int(num_train) // effective_batch_size(num_train, batch_size))


def make_batches(key: jax.Array, train_nodes: jax.Array | np.ndarray, batch_size: int) -> Batch:
    """One epoch's batches: a uniform permutation of ``train_nodes``, cut into ``[S, B]``.

    Every train node appears exactly once; the last batch is padded to ``B``
    slots with weight 0.

    Args:
      key: PRNG key for the permutation.
      train_nodes: int32 ``[T]``.
      batch_size: static ``B`` (already clipped to ``T``).

    Returns:
      :class:`Batch` of ``[S, B]`` arrays, ``S = ceil(T / B)``.
    """
    t = int(train_nodes.shape[0])
    num_steps = -(-t // batch_size)
    pad = num_steps * batch_size - t
    order = jax.random.permutation(key, jnp.asarray(train_nodes, jnp.int32))
    nodes = jnp.concatenate([order, jnp.zeros((pad,), jnp.int32)]).reshape(num_steps, batch_size)
    real = (jnp.arange(num_steps * batch_size) < t).reshape(num_steps, batch_size)
    counts = jnp.sum(real, axis=1, keepdims=True).astype(jnp.float32)
    return Batch(nodes=nodes, weights=real.astype(jnp.float32) / counts)


@functools.partial(jax.jit, static_argnums=2)
def first_batch(key: jax.Array, train_nodes: jax.Array, batch_size: int) -> Batch:
    """The first batch of the epoch ``key`` draws (what the timed step runs on); one program."""
    return jax.tree.map(lambda a: a[0], make_batches(key, train_nodes, batch_size))


def make_grad_fn(
    model: Model,
    fanouts: Sequence[int],
    *,
    sampler: str = "tree",
    caps=None,
    objective: NodeObjective = CLASSIFICATION,
) -> Callable:
    """``grad_fn(params, data, batch, key) -> (loss, grads)`` for one mini-batch.

    ``key`` is split into a sampling key and a dropout key; the batch is
    sampled by ``sampler`` (with ``caps``; see :class:`MinibatchConfig`);
    the result is a pure function of its arguments. The loss is
    ``sum_i w_i l_i`` over the seed slots (see the module docstring), with
    ``l_i`` seed ``i``'s ``objective.node_losses`` (by default its softmax
    cross-entropy).
    """
    fanouts = check_fanouts(fanouts)

    def loss_fn(params, data: MinibatchData, batch: Batch, key: jax.Array) -> jax.Array:
        sample_key, dropout_key = jax.random.split(key)
        sample = sample_batch(
            sampler,
            data.graph.indptr,
            data.graph.indices,
            batch.nodes,
            fanouts,
            key=sample_key,
            mask=batch.mask,
            caps=caps,
        )
        logits = model.apply(params, sample, data.features, key=dropout_key, training=True)
        losses = objective.node_losses(logits, data.labels[batch.nodes])
        return jnp.sum(losses * batch.weights)

    return jax.value_and_grad(loss_fn)


def train_epoch(
    grad_fn: Callable,
    tx: optax.GradientTransformation,
    batch_size: int,
    params,
    opt_state,
    data: MinibatchData,
    key: jax.Array,
):
    """One pass over the train nodes: a ``lax.scan`` of optimizer steps.

    Returns:
      ``(params, opt_state, losses [S], grad_norms [S])``.
    """
    perm_key, steps_key = jax.random.split(key)
    batches = make_batches(perm_key, data.train_nodes, batch_size)
    keys = jax.random.split(steps_key, batches.nodes.shape[0])

    def step(carry, inputs):
        params, opt_state = carry
        batch, step_key = inputs
        loss, grads = grad_fn(params, data, batch, step_key)
        params, opt_state = apply_optimizer(tx, grads, opt_state, params)
        return (params, opt_state), (loss, optax.tree.norm(grads))

    (params, opt_state), (losses, norms) = jax.lax.scan(step, (params, opt_state), (batches, keys))
    return params, opt_state, losses, norms


def run_epoch(
    model: Model,
    tx,
    config: TrainConfig,
    minibatch: MinibatchConfig,
    state: TrainState,
    data: MinibatchData,
    *,
    grad_fn: Callable | None = None,
    objective: NodeObjective = CLASSIFICATION,
):
    """A training epoch, layer-wise evaluation and early-stopping bookkeeping (one seed).

    As in the full-batch trainer, a seed whose ``done`` is set is frozen, so
    seeds stopping at different epochs share one compiled program; and an
    epoch in which any batch's loss or gradient is not finite is discarded
    whole, the seed frozen at the state before it and the epoch flagged in
    ``diverged`` (turned into a :class:`~sparsegcn.train.DivergenceError` on
    the host).

    ``grad_fn`` replaces ``make_grad_fn(model, minibatch.fanouts)``, with
    the same signature (data parallelism passes one that splits the batch
    over devices and sums their gradients). ``objective`` gives the loss
    (when ``grad_fn`` is built here) and the evaluation's metric.

    Returns:
      ``(new_state, metrics)`` with scalar metrics ``loss`` and ``grad_norm``
      (means over the epoch's batches), ``train_acc``, ``val_acc``,
      ``val_loss``, ``test_acc``, ``active``, ``diverged`` and ``epoch``.
    """
    batch_size = effective_batch_size(data.train_nodes.shape[0], minibatch.batch_size)
    if grad_fn is None:
        grad_fn = make_grad_fn(model, minibatch.fanouts, **minibatch.sampling, objective=objective)
    key, epoch_key = jax.random.split(state.key)
    params, opt_state, losses, norms = train_epoch(
        grad_fn, tx, batch_size, state.params, state.opt_state, data, epoch_key
    )
    finite = jnp.all(jnp.isfinite(losses)) & jnp.all(jnp.isfinite(norms))
    return end_epoch(
        config,
        state,
        params,
        opt_state,
        key,
        evaluate(model, params, data, objective),
        loss=jnp.mean(losses),
        grad_norm=jnp.mean(norms),
        finite=finite,
    )


def make_chunk_fn(
    model: Model,
    tx,
    config: TrainConfig,
    minibatch: MinibatchConfig,
    *,
    grad_fn: Callable | None = None,
    objective: NodeObjective = CLASSIFICATION,
) -> Callable:
    """``(states [K], data) -> (states, metrics [K, chunk])``: ``config.chunk`` epochs
    of every seed, ``vmap`` over seeds of a ``lax.scan`` over epochs (``grad_fn``:
    see :func:`run_epoch`).
    """

    def epochs_of_one_seed(state, data):
        def body(carry, _):
            return run_epoch(
                model, tx, config, minibatch, carry, data, grad_fn=grad_fn, objective=objective
            )

        return jax.lax.scan(body, state, None, length=config.chunk)

    return jax.vmap(epochs_of_one_seed, in_axes=(0, None))


def make_step_fn(
    model: Model,
    tx,
    fanouts: Sequence[int],
    *,
    grad_fn: Callable | None = None,
    sampler: str = "tree",
    caps=None,
    objective: NodeObjective = CLASSIFICATION,
) -> Callable:
    """``(states [K], data, batch) -> states``: one optimizer step of every seed on ``batch``
    (``grad_fn``: see :func:`run_epoch`; ``sampler``, ``caps``, ``objective``:
    :func:`make_grad_fn`)."""
    if grad_fn is None:
        grad_fn = make_grad_fn(model, fanouts, sampler=sampler, caps=caps, objective=objective)

    def step_of_one_seed(state, data, batch):
        key, step_key = jax.random.split(state.key)
        _, grads = grad_fn(state.params, data, batch, step_key)
        params, opt_state = apply_optimizer(tx, grads, state.opt_state, state.params)
        return state._replace(params=params, opt_state=opt_state, key=key)

    return jax.vmap(step_of_one_seed, in_axes=(0, None, None))


def make_sampler_fn(
    fanouts: Sequence[int],
    batch_size: int,
    num_batches: int,
    *,
    sampler: str = "tree",
    caps=None,
) -> Callable:
    """``(data, key) -> (sampled_edges, checksum)``: sampling alone, ``num_batches`` batches
    (``sampler``, ``caps``: :func:`make_grad_fn`).

    For measuring sampler throughput: the batches are those of an epoch
    (first ``num_batches``); the checksum of all sampled ids keeps every
    gather alive in the compiled program.
    """
    fanouts = check_fanouts(fanouts)

    def sample_batches(data: MinibatchData, key: jax.Array):
        perm_key, steps_key = jax.random.split(key)
        batches = make_batches(perm_key, data.train_nodes, batch_size)
        batches = jax.tree.map(lambda a: a[:num_batches], batches)
        keys = jax.random.split(steps_key, num_batches)

        def step(carry, inputs):
            batch, step_key = inputs
            sample = sample_batch(
                sampler,
                data.graph.indptr,
                data.graph.indices,
                batch.nodes,
                fanouts,
                key=step_key,
                mask=batch.mask,
                caps=caps,
            )
            checksum = sum(jnp.sum(ids, dtype=jnp.int32) for ids in sample.nodes)
            edges, total = carry
            return (edges + sample.num_sampled_edges(), total + checksum), None

        zero = jnp.zeros((), jnp.int32)
        (edges, checksum), _ = jax.lax.scan(step, (zero, zero), (batches, keys))
        return edges, checksum

    return sample_batches


def first_epoch_key(seed: int) -> jax.Array:
    """The key of a fresh run's first epoch for integer ``seed``: the key that
    :func:`train_epoch` receives from :func:`run_epoch` in epoch 1 of
    :func:`fit_minibatch` (after :func:`~sparsegcn.train.init_state`'s split)."""
    _, train_key = jax.random.split(jax.random.key(int(seed)))  # init_state's split
    _, epoch_key = jax.random.split(train_key)  # run_epoch's split
    return epoch_key


def epoch_overflow(data: MinibatchData, minibatch: MinibatchConfig, key: jax.Array) -> np.ndarray:
    """Per hop, the distinct nodes the capped dedup sampler drops over one epoch.

    A sampling pass alone (no model) over the batches and sample keys that
    :func:`train_epoch` draws from ``key`` (with :func:`first_epoch_key`:
    exactly those of a seed's first training epoch), summing each batch's
    :attr:`~sparsegcn.sampling.dedup.DedupSample.overflow`. Nonzero counts mean
    the caps cut the neighbourhoods those batches sampled.

    Args:
      data: the :class:`MinibatchData` trained on (only its graph and train
        nodes are read).
      minibatch: a ``sampler="dedup"`` config; its ``caps`` bound the frontiers.
      key: the epoch's PRNG key.

    Returns:
      int64 ``[L]``: dropped nodes per hop, summed over the epoch's batches
      (zeros without caps).

    Raises:
      ValueError: ``minibatch.sampler`` is not ``"dedup"``.
    """
    if minibatch.sampler != "dedup":
        raise ValueError(f"overflow is counted for sampler='dedup' only, got {minibatch.sampler!r}")
    num_train = int(data.train_nodes.shape[0])
    batch_size = effective_batch_size(num_train, minibatch.batch_size)
    fanouts, caps = minibatch.fanouts, minibatch.caps

    @jax.jit
    def count(indptr, indices, train_nodes, key):
        perm_key, steps_key = jax.random.split(key)  # as train_epoch splits it
        batches = make_batches(perm_key, train_nodes, batch_size)
        keys = jax.random.split(steps_key, batches.nodes.shape[0])

        def step(total, inputs):
            batch, step_key = inputs
            sample_key, _ = jax.random.split(step_key)  # as make_grad_fn splits it
            sample = sample_batch(
                "dedup",
                indptr,
                indices,
                batch.nodes,
                fanouts,
                key=sample_key,
                mask=batch.mask,
                caps=caps,
            )
            return total + sample.overflow, None

        zero = jnp.zeros((len(fanouts),), jnp.int32)
        return jax.lax.scan(step, zero, (batches, keys))[0]

    graph = data.graph
    counts = count(graph.indptr, graph.indices, jnp.asarray(data.train_nodes), key)
    return np.asarray(counts, np.int64)


@dataclasses.dataclass
class MinibatchFitResult(FitResult):
    """:class:`~sparsegcn.train.FitResult` plus what mini-batch training measures.

    Attributes:
      sampled_edges_per_s: sampler throughput: (parent, neighbour) pairs
        sampled per second by the compiled sampler alone, over
        ``config.timing_steps`` batches of one seed (median of 3 runs);
        ``nan`` when ``timing_steps == 0``.
      steps_per_epoch: batches per epoch ``S``.
      batch_size: the batch size used (clipped to the train set).
    """

    sampled_edges_per_s: float = float("nan")
    steps_per_epoch: int = 0
    batch_size: int = 0


def fit_minibatch(
    model: Model,
    data: MinibatchData,
    config: TrainConfig | None = None,
    minibatch: MinibatchConfig | None = None,
    *,
    seeds: Sequence[int] = (0,),
    progress: bool = False,
    state: TrainState | None = None,
    history: dict | None = None,
    on_chunk: Callable[[TrainState, dict], None] | None = None,
    objective: NodeObjective = CLASSIFICATION,
) -> MinibatchFitResult:
    """Trains one model per seed with sampled mini-batches, all in one compiled program.

    The counterpart of :func:`~sparsegcn.train.fit` (same state, history,
    resume and divergence handling), with an epoch being a pass over all
    train nodes in batches instead of one full-batch step.

    Args:
      model: a model whose ``apply`` accepts a
        :class:`~sparsegcn.sampling.NeighborSample` and a
        :class:`~sparsegcn.sampling.ChunkedGraph` (:func:`sparsegcn.nn.sage`).
      data: :class:`MinibatchData` (see :func:`minibatch_data`); moved to the
        device once.
      config: epochs, optimizer, early stopping (``TrainConfig()`` default;
        ``patience`` counts epochs).
      minibatch: fanouts and batch size (``MinibatchConfig()`` default).
      seeds: integer seeds, trained together (``vmap``); seed ``s`` uses
        ``jax.random.key(s)`` for init, permutations, sampling and dropout,
        so a seed gives the same result alone or among others.
      progress: show a tqdm progress bar.
      state: resume from this state (leading ``[K]`` axis); its ``done``
        flags are recomputed for ``config``.
      history: metrics of the epochs already run (``{name: [E0, K]}``).
      on_chunk: called with ``(state, history)`` after every compiled call.
      objective: loss and metric (see :func:`~sparsegcn.train.fit`).

    Returns:
      A :class:`MinibatchFitResult`; ``train_step_ms_median`` is one
      optimizer step (sampling included) of all seeds in lockstep. Both it
      and ``sampled_edges_per_s`` are NaN unless ``config.timing_steps > 0``.

    Raises:
      TypeError: ``data`` is not :class:`MinibatchData`.
      ValueError: no seeds, or a state or history that does not match them.
      DivergenceError: a seed's loss or gradient became non-finite.
    """
    minibatch = _checks.check_config("fit_minibatch", minibatch, MinibatchConfig, name="minibatch")
    if not isinstance(data, MinibatchData):
        raise TypeError(
            f"fit_minibatch expects MinibatchData (see minibatch_data), got {type(data).__name__}"
        )
    num_train = int(data.train_nodes.shape[0])
    batch_size = effective_batch_size(num_train, minibatch.batch_size)
    num_steps = steps_per_epoch(num_train, batch_size)

    def step_args(state: TrainState, data: MinibatchData, seeds: tuple[int, ...]) -> tuple:
        return state, data, first_batch(jax.random.key(seeds[0]), data.train_nodes, batch_size)

    def sampler_throughput(data: MinibatchData, config: TrainConfig, seeds: tuple[int, ...]):
        key = jax.random.key(seeds[0])
        num_batches = min(num_steps, config.timing_steps)
        sampler, compile_s = loop.compile_for(
            make_sampler_fn(minibatch.fanouts, batch_size, num_batches, **minibatch.sampling),
            data,
            key,
        )
        sample_s, (edges, _) = loop.median_seconds(sampler, (data, key), 3)
        return {"sampled_edges_per_s": int(edges) / sample_s}, compile_s

    trainer = loop.Trainer(
        name="fit_minibatch",
        chance=chance_loss(objective.metric_name, model_classes(model)),
        make_chunk=lambda tx, config: make_chunk_fn(
            model, tx, config, minibatch, objective=objective
        ),
        make_step=lambda tx: make_step_fn(
            model, tx, minibatch.fanouts, **minibatch.sampling, objective=objective
        ),
        step_args=step_args,
        measure=sampler_throughput,
        result=functools.partial(
            MinibatchFitResult, steps_per_epoch=num_steps, batch_size=batch_size
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

"""Sampled mini-batch training with the features off the device, one batch per compiled call.

The counterpart of :mod:`sparsegcn.train.minibatch` for features kept in
host RAM or a memory-mapped file (:mod:`sparsegcn.sampling.feature_store`).
The graph structure, labels and sampling stay on the device; an epoch is a
Python loop over batches with two compiled programs, each compiled once:

- ``sample``: ``(indptr, indices, batch, key) -> LocalBatch``: the tree,
  its distinct ids and the tree renumbered to them;
- ``step``: ``(params, opt_state, x_local [U_max, F], tree, labels, batch,
  key) -> (params, opt_state, loss, grad_norm)``.

Between them the host gathers the distinct ids' rows. Batch ``i + 1``'s
tree is dispatched before batch ``i``'s step, and a background thread
gathers its rows and copies them to the device while that step runs (JAX
dispatch is asynchronous): double buffering.

Keys, batches and losses are those of :func:`~sparsegcn.train.train_epoch`
(same permutation, sampling and dropout keys), so a seed trains to the same
parameters whichever store holds its features.

Validation and test accuracy are measured on sampled trees of the
evaluation nodes (same fanouts, a fixed key), not on the full
neighbourhood: full-neighbourhood evaluation reads every node's features.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from sparsegcn.nn.model import Model
from sparsegcn.sampling.feature_store import (
    GatherStats,
    HostFeatureStore,
    LocalBatch,
    local_rows_bound,
    localize,
)
from sparsegcn.sampling.neighbor import check_fanouts, sample_blocks
from sparsegcn.train.guard import DivergenceError
from sparsegcn.train.minibatch import (
    Batch,
    MinibatchConfig,
    MinibatchData,
    effective_batch_size,
    make_batches,
)
from sparsegcn.train.optim import apply_optimizer, make_optimizer
from sparsegcn.train.state import TrainConfig

__all__ = [
    "StreamedFitResult",
    "StreamedFns",
    "evaluate_streamed",
    "fit_streamed",
    "make_streamed_fns",
    "train_epoch_streamed",
]


class StreamedFns(NamedTuple):
    """The compiled programs of streamed training (see the module docstring).

    Attributes:
      sample: ``(indptr, indices, batch, key_data) -> LocalBatch``.
      step: ``(params, opt_state, x, sample, labels, batch, key_data) ->
        (params, opt_state, loss, grad_norm)``; ``x`` in the store's dtype
        (a float16 file travels at half the bytes), cast to float32 inside.
      logits: ``(params, x, sample) -> [B, C]`` inference logits of the seeds.
      num_rows: static ``U_max``.
    """

    sample: Callable
    step: Callable
    logits: Callable
    num_rows: int


def make_streamed_fns(
    model: Model, tx: optax.GradientTransformation, fanouts: Sequence[int], num_rows: int
) -> StreamedFns:
    """Builds :class:`StreamedFns`; keys travel as raw key data (uint32 ``[2]``).

    As in :func:`~sparsegcn.train.make_grad_fn`, a batch's key splits into
    a sampling key and a dropout key, and the loss is ``sum_i w_i l_i``.
    """
    fanouts = check_fanouts(fanouts)

    @jax.jit
    def sample(indptr, indices, batch: Batch, key_data) -> LocalBatch:
        sample_key, _ = jax.random.split(jax.random.wrap_key_data(key_data))
        tree = sample_blocks(indptr, indices, batch.nodes, fanouts, key=sample_key, mask=batch.mask)
        return localize(tree, num_rows)

    @jax.jit
    def step(params, opt_state, x, tree, labels, batch: Batch, key_data):
        _, dropout_key = jax.random.split(jax.random.wrap_key_data(key_data))

        def loss_fn(params):
            logits = model.apply(
                params, tree, x.astype(jnp.float32), key=dropout_key, training=True
            )
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels[batch.nodes])
            return jnp.sum(losses * batch.weights)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        params, opt_state = apply_optimizer(tx, grads, opt_state, params)
        return params, opt_state, loss, optax.tree.norm(grads)

    @jax.jit
    def logits(params, x, tree):
        return model.apply(params, tree, x.astype(jnp.float32))

    return StreamedFns(sample=sample, step=step, logits=logits, num_rows=int(num_rows))


def _stream(fns: StreamedFns, store: HostFeatureStore, graph, nodes, weights, keys):
    """Yields ``(x_local, tree, batch, key)`` per batch, gathering the next on a thread.

    ``nodes``, ``weights``: NumPy ``[S, B]``; ``keys``: uint32 ``[S, 2]``.
    Batch ``i + 1``'s tree is dispatched before batch ``i`` is yielded, so it
    precedes step ``i`` on the device, and its rows are gathered on the
    host while step ``i`` runs.
    """

    def sample(i: int):
        batch = Batch(nodes=nodes[i], weights=weights[i])
        return fns.sample(graph.indptr, graph.indices, batch, keys[i]), batch, keys[i]

    def gather(local: LocalBatch, batch: Batch, key):
        rows, count = np.asarray(local.rows), int(local.num_distinct)  # waits for the tree
        return store.gather(rows, count), local.sample, batch, key

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="prefetch") as prefetch:
        pending = prefetch.submit(gather, *sample(0))
        for i in range(nodes.shape[0]):
            ready = pending.result()
            if i + 1 < nodes.shape[0]:
                pending = prefetch.submit(gather, *sample(i + 1))
            yield ready


def train_epoch_streamed(
    fns: StreamedFns,
    store: HostFeatureStore,
    batch_size: int,
    params,
    opt_state,
    data: MinibatchData,
    key: jax.Array,
    *,
    progress: bool = False,
):
    """One pass over the train nodes, batch by batch, features gathered on the host.

    The same batches and keys as :func:`~sparsegcn.train.train_epoch` for
    ``key``; ``data`` must already be on the device except its features,
    which ``store`` holds.

    Returns:
      ``(params, opt_state, losses [S], grad_norms [S])``.
    """
    perm_key, steps_key = jax.random.split(key)
    batches = _batches(perm_key, data.train_nodes, batch_size)
    nodes, weights = np.asarray(batches.nodes), np.asarray(batches.weights)
    keys = np.asarray(jax.random.key_data(jax.random.split(steps_key, nodes.shape[0])))
    losses, norms = [], []
    stream = _stream(fns, store, data.graph, nodes, weights, keys)
    for x, tree, batch, key_data in tqdm(
        stream, total=nodes.shape[0], disable=not progress, unit="batch", leave=False
    ):
        params, opt_state, loss, norm = fns.step(
            params, opt_state, x, tree, data.labels, batch, key_data
        )
        losses.append(loss)
        norms.append(norm)
    return params, opt_state, jnp.stack(losses), jnp.stack(norms)


@functools.partial(jax.jit, static_argnums=2)
def _batches(key, train_nodes, batch_size):
    return make_batches(key, train_nodes, batch_size)


def evaluate_streamed(
    fns: StreamedFns,
    store: HostFeatureStore,
    params,
    data: MinibatchData,
    nodes: np.ndarray,
    batch_size: int,
    key: jax.Array,
) -> float:
    """Accuracy on ``nodes`` (int ``[V]``) from sampled trees, ``batch_size`` seeds at a time."""
    v = int(nodes.shape[0])
    if v == 0:
        return float("nan")
    steps = -(-v // batch_size)
    padded = np.zeros(steps * batch_size, np.int32)
    padded[:v] = nodes
    real = np.arange(steps * batch_size) < v
    keys = np.asarray(jax.random.key_data(jax.random.split(key, steps)))
    labels = np.asarray(data.labels)
    correct = 0
    stream = _stream(
        fns,
        store,
        data.graph,
        padded.reshape(steps, batch_size),
        real.astype(np.float32).reshape(steps, batch_size),
        keys,
    )
    for i, (x, tree, _, _) in enumerate(stream):
        predicted = np.asarray(jnp.argmax(fns.logits(params, x, tree), axis=-1))
        seeds = padded[i * batch_size : (i + 1) * batch_size]
        mask = real[i * batch_size : (i + 1) * batch_size]
        correct += int(np.sum((predicted == labels[seeds]) & mask))
    return correct / v


@dataclasses.dataclass
class StreamedFitResult:
    """What :func:`fit_streamed` measured (one seed; ``[1]`` arrays like a
    :class:`~sparsegcn.train.FitResult` of one seed).

    Attributes:
      params: params at the best validation epoch.
      history: ``{"loss", "grad_norm", "val_acc"}``, each ``[epochs_run, 1]``.
      val_acc, test_acc: ``[1]`` sampled accuracies at the best epoch.
      best_epoch: ``[1]``, 1-based.
      features_on: ``"host"`` or ``"mmap"``.
      gather: host-gather totals over training batches.
      batches_per_s: training batches per second (gather, copy and step;
        evaluation excluded), over the epochs after the first.
      train_step_ms_median: median wall time of a training batch, after the
        first epoch (which compiles).
      epoch_ms_median: median training-epoch time, after the first.
      compile_s: the first epoch's time minus the median of the others.
      wall_s: total wall time.
    """

    params: object
    history: dict
    val_acc: np.ndarray
    test_acc: np.ndarray
    best_epoch: np.ndarray
    seeds: tuple
    features_on: str
    gather: GatherStats
    batches_per_s: float
    train_step_ms_median: float
    epoch_ms_median: float
    compile_s: float
    wall_s: float

    @property
    def best_params(self):
        """The best params with a leading ``[1]`` seed axis."""
        return jax.tree.map(lambda p: jnp.asarray(p)[None], self.params)


def fit_streamed(
    model: Model,
    data: MinibatchData,
    config: TrainConfig | None = None,
    minibatch: MinibatchConfig | None = None,
    *,
    seed: int = 0,
    threads: int | None = None,
    progress: bool = False,
) -> StreamedFitResult:
    """Trains one seed with its features in host RAM or a memory-mapped file.

    Seed ``s`` uses ``jax.random.key(s)`` for init, and every epoch's key as
    :func:`~sparsegcn.train.run_epoch` derives it, so its training batches
    and parameters match :func:`~sparsegcn.train.fit_minibatch`'s. Early
    stopping on the sampled validation accuracy (``config.patience`` epochs).

    Args:
      model: a sampled model (:func:`sparsegcn.nn.sage`, ...).
      data: :class:`~sparsegcn.train.MinibatchData` whose ``features`` are a
        NumPy ``[N, F]`` array (``"host"``) or ``np.memmap`` (``"mmap"``);
        the rest is moved to the device.
      config, minibatch: as for :func:`~sparsegcn.train.fit_minibatch`.
      seed: the seed.
      threads: host-gather threads.
      progress: tqdm bars over epochs and batches.

    Raises:
      TypeError: features that are not a dense NumPy array.
      DivergenceError: a batch's loss or gradient was not finite.
    """
    start = time.perf_counter()
    config = TrainConfig() if config is None else config
    minibatch = MinibatchConfig() if minibatch is None else minibatch
    num_nodes = int(np.asarray(data.labels).shape[0])
    num_train = int(np.asarray(data.train_nodes).shape[0])
    batch_size = effective_batch_size(num_train, minibatch.batch_size)
    num_rows = local_rows_bound(minibatch.fanouts, batch_size, num_nodes)
    store = HostFeatureStore(data.features, num_rows, threads=threads)
    device_data = jax.device_put(data._replace(features=None))
    tx = make_optimizer(config)
    fns = make_streamed_fns(model, tx, minibatch.fanouts, num_rows)
    key = jax.random.key(seed)
    init_key, key = jax.random.split(key)
    params = model.init(init_key)
    opt_state = tx.init(params)
    eval_key = jax.random.fold_in(jax.random.key(seed), 2**31 - 1)
    val_nodes = np.flatnonzero(np.asarray(data.val_mask)).astype(np.int32)
    test_nodes = np.flatnonzero(np.asarray(data.test_mask)).astype(np.int32)
    history: dict[str, list] = {"loss": [], "grad_norm": [], "val_acc": []}
    epoch_s, batches = [], 0
    best = (-1.0, 0, params)
    bad = 0
    try:
        for epoch in tqdm(range(1, config.epochs + 1), disable=not progress, unit="epoch"):
            key, epoch_key = jax.random.split(key)
            tick = time.perf_counter()
            params, opt_state, losses, norms = train_epoch_streamed(
                fns, store, batch_size, params, opt_state, device_data, epoch_key
            )
            losses, norms = np.asarray(losses), np.asarray(norms)
            epoch_s.append(time.perf_counter() - tick)
            batches = losses.shape[0]
            if not (np.isfinite(losses).all() and np.isfinite(norms).all()):
                bad_step = int(np.flatnonzero(~(np.isfinite(losses) & np.isfinite(norms)))[0])
                raise DivergenceError(
                    epoch, seed, float(losses[bad_step]), float(norms[bad_step]), [seed]
                )
            val = evaluate_streamed(
                fns, store, params, device_data, val_nodes, batch_size, eval_key
            )
            history["loss"].append([losses.mean()])
            history["grad_norm"].append([norms.mean()])
            history["val_acc"].append([val])
            if val > best[0]:
                best, bad = (val, epoch, params), 0
            else:
                bad += 1
                if config.patience is not None and bad >= config.patience:
                    break
        gather = dataclasses.replace(store.stats)
        test = evaluate_streamed(fns, store, best[2], device_data, test_nodes, batch_size, eval_key)
    finally:
        store.close()
    timed = epoch_s[1:] or epoch_s
    epoch_median = float(np.median(timed))
    return StreamedFitResult(
        params=best[2],
        history={name: np.asarray(v, np.float32) for name, v in history.items()},
        val_acc=np.asarray([best[0]]),
        test_acc=np.asarray([test]),
        best_epoch=np.asarray([best[1]]),
        seeds=(seed,),
        features_on=store.kind,
        gather=gather,
        batches_per_s=batches / epoch_median,
        train_step_ms_median=1e3 * epoch_median / max(batches, 1),
        epoch_ms_median=1e3 * epoch_median,
        compile_s=max(epoch_s[0] - epoch_median, 0.0) if len(epoch_s) > 1 else float("nan"),
        wall_s=time.perf_counter() - start,
    )

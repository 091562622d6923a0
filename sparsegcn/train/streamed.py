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

Validation and test accuracy (and the validation loss that
``TrainConfig.monitor`` may select by) are measured on sampled trees of the
evaluation nodes (same fanouts, a fixed key), not on the full
neighbourhood: full-neighbourhood evaluation reads every node's features.

**The graph on the host** (``host_csr``, :class:`~sparsegcn.sampling.host.HostCSR`):
when the graph structure does not fit on the device (or in RAM once
expanded: ogbn-papers100M), the prefetch thread also samples the tree, on
the host, from the memory-mapped CSR
(:func:`~sparsegcn.sampling.host.sample_tree_host`), localizes it
(:func:`~sparsegcn.sampling.host.localize_host`) and ships it with the rows;
the device runs only ``step``, and no sampler is compiled. The host sampler
draws the device's trees for the same keys, so the parameters are again
those of the on-device trainer. A :class:`~sparsegcn.sampling.host.MappedBudget`
keeps the memory maps' resident pages under a quarter of RAM.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from sparsegcn.files import advise
from sparsegcn.nn.model import Model
from sparsegcn.sampling.feature_store import (
    GatherStats,
    HostFeatureStore,
    LocalBatch,
    local_rows_bound,
    localize,
)
from sparsegcn.sampling.host import (
    HashSeeds,
    HostCSR,
    MappedBudget,
    localize_host,
    proc_read_bytes,
    sample_tree_host,
)
from sparsegcn.sampling.neighbor import check_fanouts, sample_blocks
from sparsegcn.train.loop import check_state_memory, drive
from sparsegcn.train.losses import chance_loss, cross_entropy_per_node, model_classes
from sparsegcn.train.minibatch import (
    Batch,
    MinibatchConfig,
    MinibatchData,
    effective_batch_size,
    make_batches,
)
from sparsegcn.train.optim import apply_optimizer, make_optimizer
from sparsegcn.train.state import TrainConfig, check_masks, check_node_data

__all__ = [
    "HostSampler",
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


@jax.jit
def _hash_seeds(keys_data):
    """uint32 ``[S, 2]``: the :class:`~sparsegcn.sampling.host.HashSeeds` of each
    batch's sampling key, split from its key data as ``StreamedFns.sample`` does."""

    def one(key_data):
        sample_key, _ = jax.random.split(jax.random.wrap_key_data(key_data))
        return jax.random.bits(sample_key, (2,), jnp.uint32)

    return jax.vmap(one)(keys_data)


@dataclasses.dataclass
class HostSampler:
    """The host side of sampling a streamed run's trees (``host_csr`` of :func:`fit_streamed`).

    Attributes:
      csr: the graph.
      fanouts: ``(k_1, ..., k_L)``.
      num_rows: static ``U_max``.
      budget: releases the memory maps' pages after each batch.
      pool: threads reading ``csr.indices``.
      batches, seconds: batches sampled and localized, and the time it took.
      scratch: :func:`~sparsegcn.sampling.host.localize_host`'s int32 ``[N]``
        workspace (allocated when not given).
    """

    csr: HostCSR
    fanouts: tuple[int, ...]
    num_rows: int
    budget: MappedBudget
    pool: concurrent.futures.ThreadPoolExecutor
    batches: int = 0
    seconds: float = 0.0
    scratch: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.scratch is None:  # localize_host's workspace: 4 N bytes, reused
            self.scratch = np.zeros(self.csr.num_nodes, np.int32)

    def localized(self, nodes: np.ndarray, mask: np.ndarray, seeds: HashSeeds) -> LocalBatch:
        """The batch's tree, sampled and localized on the host (NumPy arrays)."""
        tick = time.perf_counter()
        tree = sample_tree_host(self.csr, nodes, self.fanouts, seeds, mask=mask, pool=self.pool)
        local = localize_host(tree, self.num_rows, scratch=self.scratch)
        self.seconds += time.perf_counter() - tick
        self.batches += 1
        return local

    @property
    def ms_per_batch(self) -> float:
        return 1e3 * self.seconds / self.batches if self.batches else float("nan")


def _stream(fns: StreamedFns, store: HostFeatureStore, graph, nodes, weights, keys, host=None):
    """Yields ``(x_local, tree, batch, key)`` per batch, preparing the next on a thread.

    ``nodes``, ``weights``: NumPy ``[S, B]``; ``keys``: uint32 ``[S, 2]``.
    On the device (``host`` is ``None``), batch ``i + 1``'s tree is
    dispatched before batch ``i`` is yielded, so it precedes step ``i`` on
    the device, and its rows are gathered on the host while step ``i`` runs.
    With a :class:`HostSampler`, the prefetch thread samples, localizes and
    gathers batch ``i + 1`` while step ``i`` runs.
    """

    def sample(i: int):
        batch = Batch(nodes=nodes[i], weights=weights[i])
        return fns.sample(graph.indptr, graph.indices, batch, keys[i]), batch, keys[i]

    def gather(local: LocalBatch, batch: Batch, key):
        rows, count = np.asarray(local.rows), int(local.num_distinct)  # waits for the tree
        return store.gather(rows, count), local.sample, batch, key

    def on_host(i: int):
        batch = Batch(nodes=nodes[i], weights=weights[i])
        local = host.localized(nodes[i], weights[i] > 0, HashSeeds(words[i]))
        x = store.gather(local.rows, int(local.num_distinct))
        host.budget.check()
        return x, jax.device_put(local.sample), batch, keys[i]

    if host is not None:
        words = np.asarray(_hash_seeds(keys), np.uint32)
        prepare = on_host
    else:

        def prepare(i: int):
            return gather(*sample(i))

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="prefetch") as prefetch:
        pending = prefetch.submit(prepare, 0)
        for i in range(nodes.shape[0]):
            ready = pending.result()
            if i + 1 < nodes.shape[0]:
                pending = prefetch.submit(prepare, i + 1)
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
    host: HostSampler | None = None,
    max_batches: int | None = None,
    timing: dict | None = None,
):
    """One pass over the train nodes, batch by batch, features gathered on the host.

    The same batches and keys as :func:`~sparsegcn.train.train_epoch` for
    ``key``; ``data`` must already be on the device except its features,
    which ``store`` holds (and its graph, with ``host``).

    Args:
      host: sample on the host (:class:`HostSampler`) instead of the device.
      max_batches: train only the epoch's first ``max_batches`` batches.
      timing: if given, receives ``first_batch_s`` (the first step waited
        for: with the first epoch's compile) and ``batches``.

    Returns:
      ``(params, opt_state, losses [S], grad_norms [S])``.
    """
    tick = time.perf_counter()
    perm_key, steps_key = jax.random.split(key)
    batches = _batches(perm_key, data.train_nodes, batch_size)
    nodes, weights = np.asarray(batches.nodes), np.asarray(batches.weights)
    keys = np.asarray(jax.random.key_data(jax.random.split(steps_key, nodes.shape[0])))
    if max_batches is not None:
        nodes, weights, keys = nodes[:max_batches], weights[:max_batches], keys[:max_batches]
    losses: list[jax.Array] = []
    norms: list[jax.Array] = []
    stream = _stream(fns, store, data.graph, nodes, weights, keys, host)
    for x, tree, batch, key_data in tqdm(
        stream, total=nodes.shape[0], disable=not progress, unit="batch", leave=False
    ):
        params, opt_state, loss, norm = fns.step(
            params, opt_state, x, tree, data.labels, batch, key_data
        )
        if timing is not None and not losses:
            jax.block_until_ready(loss)
            timing["first_batch_s"] = time.perf_counter() - tick
        losses.append(loss)
        norms.append(norm)
    if timing is not None:
        timing["batches"] = len(losses)
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
    *,
    host: HostSampler | None = None,
) -> float:
    """Accuracy on ``nodes`` (int ``[V]``) from sampled trees, ``batch_size`` seeds at a time
    (sampled on the host with ``host``)."""
    return _evaluate(fns, store, params, data, nodes, batch_size, key, host=host)[0]


def _evaluate(
    fns: StreamedFns,
    store: HostFeatureStore,
    params,
    data: MinibatchData,
    nodes: np.ndarray,
    batch_size: int,
    key: jax.Array,
    *,
    host: HostSampler | None = None,
) -> tuple[float, float]:
    """``(accuracy, mean cross-entropy)`` on ``nodes``, as :func:`evaluate_streamed`."""
    v = int(nodes.shape[0])
    if v == 0:
        return float("nan"), float("nan")
    steps = -(-v // batch_size)
    padded = np.zeros(steps * batch_size, np.int32)
    padded[:v] = nodes
    real = np.arange(steps * batch_size) < v
    keys = np.asarray(jax.random.key_data(jax.random.split(key, steps)))
    labels = np.asarray(data.labels)
    correct, loss = 0, 0.0
    stream = _stream(
        fns,
        store,
        data.graph,
        padded.reshape(steps, batch_size),
        real.astype(np.float32).reshape(steps, batch_size),
        keys,
        host,
    )
    for i, (x, tree, _, _) in enumerate(stream):
        logits = fns.logits(params, x, tree)
        seeds = padded[i * batch_size : (i + 1) * batch_size]
        mask = real[i * batch_size : (i + 1) * batch_size]
        predicted = np.asarray(jnp.argmax(logits, axis=-1))
        correct += int(np.sum((predicted == labels[seeds]) & mask))
        loss += float(np.sum(np.asarray(cross_entropy_per_node(logits, labels[seeds])) * mask))
    return correct / v, loss / v


def _improves(monitor: str, acc: float, loss: float, best_acc: float, best_loss: float) -> bool:
    """Whether an epoch's validation accuracy and loss beat the best so far by
    ``monitor``, as :attr:`~sparsegcn.train.TrainConfig.monitor` defines it."""
    if monitor == "val_loss":
        return loss < best_loss
    return acc > best_acc or (acc == best_acc and loss < best_loss)


@dataclasses.dataclass
class StreamedFitResult:
    """What :func:`fit_streamed` measured (one seed; ``[1]`` arrays like a
    :class:`~sparsegcn.train.FitResult` of one seed).

    Attributes:
      params: params at the best validation epoch (by ``TrainConfig.monitor``).
      history: ``{"loss", "grad_norm", "val_acc", "val_loss"}``, each ``[epochs_run, 1]``.
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
      graph_on: ``"device"`` (sampled on the device) or ``"host"``.
      steps_per_epoch: batches in a full epoch.
      batches_run: training batches run, over all epochs.
      train_s: time in training epochs (evaluation excluded).
      projected_epoch_s: ``steps_per_epoch`` times the time per batch after
        the run's first batch (which compiles): a full epoch's time when
        ``max_batches`` cut the epochs short.
      host_sample_ms_per_batch: host sampling and localizing per batch
        (training and evaluation; NaN when sampled on the device).
      disk_read_bytes: bytes read from storage during the training epochs
        (page-cache misses, ``/proc/self/io``; NaN where unavailable).
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
    graph_on: str = "device"
    steps_per_epoch: int = 0
    batches_run: int = 0
    train_s: float = float("nan")
    projected_epoch_s: float = float("nan")
    host_sample_ms_per_batch: float = float("nan")
    disk_read_bytes: float = float("nan")

    @property
    def best_params(self):
        """The best params with a leading ``[1]`` seed axis."""
        return jax.tree.map(lambda p: jnp.asarray(p)[None], self.params)


def _eval_subset(nodes: np.ndarray, size: int | None, seed: int) -> np.ndarray:
    """A fixed random subset of ``size`` of ``nodes`` (ascending), or all of them."""
    if size is None or nodes.shape[0] <= size:
        return nodes
    picked = np.random.default_rng(seed).choice(nodes.shape[0], size, replace=False)
    return nodes[np.sort(picked)]


def fit_streamed(
    model: Model,
    data: MinibatchData,
    config: TrainConfig | None = None,
    minibatch: MinibatchConfig | None = None,
    *,
    seed: int = 0,
    threads: int | None = None,
    progress: bool = False,
    host_csr: HostCSR | None = None,
    max_batches: int | None = None,
    resident_limit: int | None = None,
) -> StreamedFitResult:
    """Trains one seed with its features in host RAM or a memory-mapped file.

    Seed ``s`` uses ``jax.random.key(s)`` for init, and every epoch's key as
    :func:`~sparsegcn.train.run_epoch` derives it, so its training batches
    and parameters match :func:`~sparsegcn.train.fit_minibatch`'s (with
    ``host_csr`` too: the host sampler draws the device's trees). The best
    epoch and early stopping (``config.patience`` epochs) follow
    ``config.monitor`` on the sampled validation accuracy and loss.

    Args:
      model: a sampled model (:func:`sparsegcn.nn.sage`, ...).
      data: :class:`~sparsegcn.train.MinibatchData` whose ``features`` are a
        NumPy ``[N, F]`` array (``"host"``) or ``np.memmap`` (``"mmap"``);
        the rest is moved to the device (its ``graph`` may be ``None`` with
        ``host_csr``).
      config, minibatch: as for :func:`~sparsegcn.train.fit_minibatch`.
      seed: the seed.
      threads: host-gather threads.
      progress: tqdm bars over epochs and batches.
      host_csr: sample on the host from this graph (the one ``model``
        reads, e.g. GraphSAGE's unweighted graph), not on the device.
      max_batches: train only the first ``max_batches`` batches of every
        epoch, and evaluate on a fixed random subset of ``max_batches``
        batches of validation and test nodes; the report projects a full
        epoch's time.
      resident_limit: ``RssFile`` bytes above which the memory maps'
        pages are released after a batch
        (:class:`~sparsegcn.sampling.host.MappedBudget`; default a quarter
        of RAM).

    Raises:
      TypeError: features that are not a dense NumPy array.
      ValueError: ``max_batches < 1``, no graph to sample from, or an empty
        train, validation or test mask.
      DivergenceError: a batch's loss or gradient was not finite.
    """
    start = time.perf_counter()
    config = TrainConfig() if config is None else config
    minibatch = MinibatchConfig() if minibatch is None else minibatch
    if max_batches is not None and (isinstance(max_batches, bool) or int(max_batches) < 1):
        raise ValueError(f"max_batches must be an int >= 1 or None, got {max_batches!r}")
    check_node_data("fit_streamed", model, data)
    if host_csr is None and data.graph is None:
        raise ValueError("data.graph is None: pass host_csr to sample on the host")
    check_masks(data, "fit_streamed")
    num_nodes = int(np.asarray(data.labels).shape[0])
    num_train = int(np.asarray(data.train_nodes).shape[0])
    batch_size = effective_batch_size(num_train, minibatch.batch_size)
    steps = -(-num_train // batch_size)
    num_rows = local_rows_bound(minibatch.fanouts, batch_size, num_nodes)
    store = HostFeatureStore(data.features, num_rows, threads=threads)
    host = None
    if host_csr is not None:
        if host_csr.num_nodes != num_nodes:
            raise ValueError(f"host_csr has {host_csr.num_nodes} nodes but the labels {num_nodes}")
        advise(data.features, "random")
        host = HostSampler(
            host_csr,
            minibatch.fanouts,
            num_rows,
            MappedBudget([data.features, host_csr.indices], resident_limit),
            store.pool,
        )
    # Only what the step and the batches read goes to the device (the masks
    # alone are 3N bytes: 0.3 GB at papers100M size).
    absent: Any = None
    device_data = jax.device_put(
        data._replace(
            features=absent,
            graph=absent if host is not None else data.graph,
            train_mask=absent,
            val_mask=absent,
            test_mask=absent,
        )
    )
    tx = make_optimizer(config)
    fns = make_streamed_fns(model, tx, minibatch.fanouts, num_rows)
    key = jax.random.key(seed)
    init_key, key = jax.random.split(key)

    def init(k):
        params = model.init(k)
        return params, tx.init(params)

    check_state_memory(init, init_key, what="fit_streamed")
    params = model.init(init_key)
    opt_state = tx.init(params)
    eval_key = jax.random.fold_in(jax.random.key(seed), 2**31 - 1)
    eval_size = None if max_batches is None else int(max_batches) * batch_size
    val_nodes = np.flatnonzero(np.asarray(data.val_mask)).astype(np.int32)
    test_nodes = np.flatnonzero(np.asarray(data.test_mask)).astype(np.int32)
    val_nodes = _eval_subset(val_nodes, eval_size, seed)
    test_nodes = _eval_subset(test_nodes, eval_size, seed + 1)
    epoch_s: list[float] = []
    batches, batches_run = 0, 0
    first_batch_s = float("nan")
    read_before = proc_read_bytes()
    read_bytes = 0
    best = (-1.0, float("inf"), 0, params)  # validation accuracy, loss, epoch, params
    bad = 0
    stop = False
    trained = GatherStats()  # the training batches' gathers alone (the store's count all)

    def advance(state: tuple) -> tuple[tuple, dict]:
        """One epoch: stream the training batches, then score the validation nodes."""
        nonlocal batches, batches_run, first_batch_s, read_bytes, best, bad, stop
        params, opt_state, key = state
        key, epoch_key = jax.random.split(key)
        tick = time.perf_counter()
        reads = proc_read_bytes()
        timing: dict = {}
        before = dataclasses.replace(store.stats)
        params, opt_state, losses, norms = train_epoch_streamed(
            fns,
            store,
            batch_size,
            params,
            opt_state,
            device_data,
            epoch_key,
            progress=progress,
            host=host,
            max_batches=max_batches,
            timing=timing,
        )
        losses, norms = np.asarray(losses), np.asarray(norms)
        for name in (field.name for field in dataclasses.fields(GatherStats)):
            grown = getattr(store.stats, name) - getattr(before, name)
            setattr(trained, name, getattr(trained, name) + grown)
        epoch_s.append(time.perf_counter() - tick)
        if reads is not None:
            read_bytes += (proc_read_bytes() or reads) - reads
        if len(epoch_s) == 1:
            first_batch_s = timing["first_batch_s"]
        batches = losses.shape[0]
        batches_run += batches
        finite = np.isfinite(losses) & np.isfinite(norms)
        # A diverged epoch reports its first bad batch (drive's guard raises on it).
        at = int(np.flatnonzero(~finite)[0]) if not finite.all() else None
        loss = float(losses.mean()) if at is None else float(losses[at])
        norm = float(norms.mean()) if at is None else float(norms[at])
        val, val_loss = float("nan"), float("nan")
        if at is None:
            val, val_loss = _evaluate(
                fns, store, params, device_data, val_nodes, batch_size, eval_key, host=host
            )
            if _improves(config.monitor, val, val_loss, best[0], best[1]):
                best, bad = (val, val_loss, len(epoch_s), params), 0
            else:
                bad += 1
                stop = config.patience is not None and bad >= config.patience
        metrics = {"loss": loss, "grad_norm": norm, "val_acc": val, "val_loss": val_loss}
        return (params, opt_state, key), {
            k: np.array([[v]], np.float32) for k, v in metrics.items()
        }

    try:
        _, recorded, _ = drive(
            advance,
            (params, opt_state, key),
            epochs=config.epochs,
            seeds=[seed],
            finished=lambda _state: stop or len(epoch_s) >= config.epochs,
            progress=progress,
            watch=config.monitor,
            divergence_factor=config.divergence_factor,
            divergence_epochs=config.divergence_epochs,
            chance=chance_loss("acc", model_classes(model)),
        )
        history = {name: values.astype(np.float32) for name, values in recorded.items()}
        gather = dataclasses.replace(trained)
        test = evaluate_streamed(
            fns, store, best[3], device_data, test_nodes, batch_size, eval_key, host=host
        )
    finally:
        store.close()
    timed = epoch_s[1:] or epoch_s
    epoch_median = float(np.median(timed))
    train_s = float(np.sum(epoch_s))
    # The first batch compiles the step; later ones show the steady rate.
    steady = (train_s - first_batch_s) / (batches_run - 1) if batches_run > 1 else train_s
    return StreamedFitResult(
        params=best[3],
        history=history,
        val_acc=np.asarray([best[0]]),
        test_acc=np.asarray([test]),
        best_epoch=np.asarray([best[2]]),
        seeds=(seed,),
        features_on=store.kind,
        gather=gather,
        batches_per_s=batches / epoch_median,
        train_step_ms_median=1e3 * epoch_median / max(batches, 1),
        epoch_ms_median=1e3 * epoch_median,
        compile_s=max(epoch_s[0] - epoch_median, 0.0) if len(epoch_s) > 1 else float("nan"),
        wall_s=time.perf_counter() - start,
        graph_on="host" if host is not None else "device",
        steps_per_epoch=steps,
        batches_run=batches_run,
        train_s=train_s,
        projected_epoch_s=steady * steps,
        host_sample_ms_per_batch=host.ms_per_batch if host is not None else float("nan"),
        disk_read_bytes=float(read_bytes) if read_before is not None else float("nan"),
    )

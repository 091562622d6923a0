"""Graph classification: k folds and several seeds trained as one compiled program.

Every member of the run (one fold, one seed) gets its training graphs
packed once into padded batches (:func:`~sparsegcn.batch.pack_graphs`);
the members' batches stack into ``[M, B, ...]`` arrays (members with fewer
batches get empty ones, whose steps change nothing). One compiled call
runs several epochs for all members at once: ``vmap`` over members, a
``lax.scan`` over epochs, inside it a permutation of the batches drawn on
the device and a ``lax.scan`` over them, then an evaluation of every graph
of the dataset (packed once, shared by all members), read through each
member's validation and test masks. Nothing returns to the host between
epochs but the per-epoch metrics.

Model selection follows Errica et al. (ICLR 2020): each fold's model is
the epoch with the best accuracy on its inner validation split (ties: the
lower validation loss, then the earlier epoch). Xu et al.'s figure, the
epoch whose test accuracy averaged over the folds is highest, is reported
beside it (``cv_curve``); it is optimistic, as it selects on test data.

References:
  Xu, Hu, Leskovec & Jegelka, *How Powerful are Graph Neural Networks?*,
  ICLR 2019. https://arxiv.org/abs/1810.00826

  Errica, Podda, Bacciu & Micheli, *A Fair Comparison of Graph Neural
  Networks for Graph Classification*, ICLR 2020. https://arxiv.org/abs/1912.09893
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sparsegcn import _checks
from sparsegcn.batch import Budget, GraphBatch, batch_count, choose_budget, pack_graphs
from sparsegcn.nn.graph_gin import GraphModel

MAX_PACKINGS = 8
"""The most packings of each member's training graphs (see :func:`member_batches`)."""

PACKING_BYTES = 32 << 20
"""Host and device bytes the packings of one member may take together."""

INNER_VALIDATION = 0.1
"""Fraction of each fold's training graphs held out (stratified) for model selection."""


@dataclasses.dataclass(frozen=True)
class GraphTrainConfig:
    """Settings of :func:`fit_graphs`; the defaults are Xu et al.'s.

    Attributes:
      epochs: passes over each member's training batches (350).
      learning_rate: Adam's initial rate (0.01).
      weight_decay: coupled L2 on every parameter (0).
      halve_every: the rate halves every this many epochs (50; 0: never).
      batch_size: graphs per batch (32).
      epochs_per_call: epochs per compiled call (default: about 10 calls).
      packings: how many packings of each member's graphs the epochs cycle
        through (default: :func:`packings_for`).
    """

    epochs: int = 350
    learning_rate: float = 0.01
    weight_decay: float = 0.0
    halve_every: int = 50
    batch_size: int = 32
    epochs_per_call: int | None = None
    packings: int | None = None

    def __post_init__(self):
        _checks.check_static_int("epochs", self.epochs, minimum=1)
        _checks.check_static_int("halve_every", self.halve_every, minimum=0)
        _checks.check_static_int("batch_size", self.batch_size, minimum=1)
        if self.packings is not None:
            _checks.check_static_int("packings", self.packings, minimum=1)
        if self.epochs_per_call is not None:
            _checks.check_static_int("epochs_per_call", self.epochs_per_call, minimum=1)
            if self.epochs % self.epochs_per_call:
                raise ValueError(
                    f"epochs_per_call={self.epochs_per_call} must divide epochs={self.epochs}"
                )
        for name in ("learning_rate", "weight_decay"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    @property
    def chunk(self) -> int:
        """Epochs per compiled call: a divisor of ``epochs`` near a tenth of it."""
        if self.epochs_per_call is not None:
            return self.epochs_per_call
        target = max(1, self.epochs // 10)
        return max(d for d in range(1, target + 1) if self.epochs % d == 0)


def stratified_folds(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """int ``[G]`` fold of each graph: each class shuffled, then dealt round-robin.

    Every fold gets ``⌊n_c / k⌋`` or ``⌈n_c / k⌉`` graphs of each class ``c``.

    Raises:
      ValueError: fewer graphs than folds, or ``folds < 2``.
    """
    labels = np.asarray(labels)
    if folds < 2 or folds > labels.shape[0]:
        raise ValueError(f"folds must be in [2, {labels.shape[0]}] (the graphs), got {folds}")
    rng = np.random.default_rng(seed)
    fold = np.empty(labels.shape[0], np.int64)
    offset = 0
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        fold[members] = (offset + np.arange(members.shape[0])) % folds
        offset += members.shape[0]
    return fold


class Splits(NamedTuple):
    """Boolean ``[K, G]`` masks over the graphs, one row per fold, and each row's
    fold number ``[K]`` (it seeds the fold's packing order, so a fold trained
    alone packs as it does among the others)."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    fold: np.ndarray


def fold_splits(labels: np.ndarray, folds: int, seed: int) -> Splits:
    """Stratified ``folds``-fold splits, each with an inner validation split.

    Fold ``f`` tests on the graphs of fold ``f``; of the rest,
    :data:`INNER_VALIDATION` (stratified, at least one graph) validate and
    the others train.
    """
    labels = np.asarray(labels)
    outer = stratified_folds(labels, folds, seed)
    rows = []
    for f in range(folds):
        test = outer == f
        rest = np.flatnonzero(~test)
        inner_folds = max(2, round(1.0 / INNER_VALIDATION))
        inner = stratified_folds(labels[rest], min(inner_folds, rest.shape[0]), seed + 1 + f)
        valid = np.zeros_like(test)
        valid[rest[inner == 0]] = True
        rows.append((~test & ~valid, valid, test))
    train, valid, test = (np.stack(r) for r in zip(*rows, strict=True))
    return Splits(train, valid, test, np.arange(folds))


class MemberState(NamedTuple):
    """One member's training state (a leading ``[M]`` axis when stacked)."""

    params: Any
    stats: Any
    opt_state: Any
    key: jax.Array


class Curves(NamedTuple):
    """Per-epoch metrics, ``[epochs, M]`` each."""

    train_loss: np.ndarray
    val_loss: np.ndarray
    val_accuracy: np.ndarray
    test_accuracy: np.ndarray


@dataclasses.dataclass(frozen=True)
class GraphFitResult:
    """What :func:`fit_graphs` measured.

    Attributes:
      folds: ``K``; seeds: the seeds; members are fold-major (``m = f S + s``).
      curves: :class:`Curves`.
      best_epoch: int ``[M]`` (0-based) chosen on validation.
      test_acc: ``[M]`` at ``best_epoch``; val_acc likewise.
      budget: the batch :class:`~sparsegcn.batch.Budget`.
      batches_per_epoch: padded batches per member and epoch.
      packings: packings of each member's graphs, used in turn by the epochs.
      train_graphs: ``[M]`` training graphs per member.
      train_s: seconds of the compiled calls after compilation.
      compile_s: seconds compiling.
      compiles: how many times the epoch program was traced (1).
    """

    folds: int
    seeds: tuple[int, ...]
    curves: Curves
    best_epoch: np.ndarray
    test_acc: np.ndarray
    val_acc: np.ndarray
    budget: Budget
    batches_per_epoch: int
    packings: int
    train_graphs: np.ndarray
    train_s: float
    compile_s: float
    compiles: int

    @property
    def train_graphs_per_s(self) -> float:
        """Training graphs processed per second, all members and epochs, after compiling."""
        total = float(self.train_graphs.sum()) * self.curves.train_loss.shape[0]
        return total / self.train_s if self.train_s > 0 else float("nan")


def _optimizer(config: GraphTrainConfig) -> optax.GradientTransformation:
    parts = []
    if config.weight_decay:
        parts.append(optax.add_decayed_weights(config.weight_decay))
    parts.append(optax.scale_by_adam())
    return optax.chain(*parts)


def graph_loss(logits: jax.Array, batch: GraphBatch) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Cross-entropy and correctness per graph slot, and the real-graph mask.

    Returns:
      ``(loss [G_b], correct [G_b] float, mask [G_b] float)``; padding
      slots carry 0 loss.
    """
    mask = batch.graph_mask.astype(logits.dtype)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch.labels) * mask
    correct = (jnp.argmax(logits, axis=-1) == batch.labels).astype(logits.dtype) * mask
    return losses, correct, mask


def make_epochs_fn(model: GraphModel, config: GraphTrainConfig, num_epochs: int):
    """``run(state, train, eval_batches, valid, test, first_epoch) -> (state, metrics)``
    for one member: ``num_epochs`` epochs of training and evaluation.

    ``train`` is the member's ``[B, ...]`` batches, ``eval_batches`` every
    graph's ``[B_e, ...]``, ``valid``/``test`` bool ``[G]`` masks over the
    dataset's graphs, ``first_epoch`` the index of the first epoch (for the
    learning-rate schedule). ``vmap`` it over members.
    """
    tx = _optimizer(config)

    def step(carry, inputs):
        params, stats, opt_state = carry
        batch, key = inputs

        def loss_fn(p):
            logits, new_stats = model.apply(p, stats, batch, key=key, training=True)
            losses, _, mask = graph_loss(logits, batch)
            return jnp.sum(losses) / jnp.maximum(jnp.sum(mask), 1.0), (new_stats, jnp.sum(mask))

        (loss, (new_stats, count)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        with jax.numpy_dtype_promotion("standard"):
            updates, new_opt = tx.update(grads, opt_state, params)
        return (params, new_stats, new_opt, updates, loss, count)

    def train_epoch(state: MemberState, train: GraphBatch, epoch: jax.Array):
        key, perm_key, drop_key = jax.random.split(state.key, 3)
        packings, num_batches = train.graph_mask.shape[:2]
        packing = epoch % packings
        order = jax.random.permutation(perm_key, num_batches)
        halvings = epoch // config.halve_every if config.halve_every else jnp.zeros((), jnp.int32)
        lr = config.learning_rate * jnp.power(jnp.float32(0.5), halvings.astype(jnp.float32))

        def body(carry, inputs):
            b, k = inputs
            batch = jax.tree.map(lambda a: a[packing, b], train)
            params, stats, opt_state, updates, loss, count = step(carry, (batch, k))
            new_params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
            real = count > 0
            keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(real, n, o), new, old)  # noqa: E731
            carry = (
                keep(new_params, params),
                keep(stats, carry[1]),
                keep(opt_state, carry[2]),
            )
            return carry, (loss * count, count)

        keys = jax.random.split(drop_key, num_batches)
        carry, (losses, counts) = jax.lax.scan(
            body, (state.params, state.stats, state.opt_state), (order, keys)
        )
        mean_loss = jnp.sum(losses) / jnp.maximum(jnp.sum(counts), 1.0)
        return MemberState(*carry, key), mean_loss

    def evaluate(params, stats, eval_batches: GraphBatch, valid, test):
        def body(_, batch):
            logits, _ = model.apply(params, stats, batch, training=False)
            losses, correct, mask = graph_loss(logits, batch)
            ids = jnp.maximum(batch.graph_ids, 0)
            in_valid = valid[ids].astype(losses.dtype) * mask
            in_test = test[ids].astype(losses.dtype) * mask
            sums = jnp.stack(
                [
                    jnp.sum(losses * in_valid),
                    jnp.sum(correct * in_valid),
                    jnp.sum(in_valid),
                    jnp.sum(correct * in_test),
                    jnp.sum(in_test),
                ]
            )
            return None, sums

        _, sums = jax.lax.scan(body, None, eval_batches)
        total = jnp.sum(sums, axis=0)
        val_loss = total[0] / jnp.maximum(total[2], 1.0)
        val_acc = total[1] / jnp.maximum(total[2], 1.0)
        test_acc = total[3] / jnp.maximum(total[4], 1.0)
        return val_loss, val_acc, test_acc

    def run(state: MemberState, train, eval_batches, valid, test, first_epoch):
        def one(state, epoch):
            state, train_loss = train_epoch(state, train, epoch)
            val_loss, val_acc, test_acc = evaluate(
                state.params, state.stats, eval_batches, valid, test
            )
            return state, jnp.stack([train_loss, val_loss, val_acc, test_acc])

        epochs = first_epoch + jnp.arange(num_epochs, dtype=jnp.int32)
        return jax.lax.scan(one, state, epochs)

    return run


def packings_for(dataset, budget: Budget, train_graphs: int, batch_size: int) -> int:
    """How many packings of a member's training graphs to prepare: up to
    :data:`MAX_PACKINGS`, within :data:`PACKING_BYTES` per member."""
    batches = -(-train_graphs // batch_size)
    width = dataset.features.shape[1] + 1
    edge_width = 8 + 4 * (0 if dataset.edge_features is None else dataset.edge_features.shape[1])
    one = batches * (4 * width * budget.nodes + edge_width * budget.edges + 13 * budget.graphs)
    return int(max(1, min(MAX_PACKINGS, PACKING_BYTES // max(one, 1))))


def member_batches(
    dataset,
    splits: Splits,
    seeds: Sequence[int],
    budget: Budget,
    batch_size: int,
    packings: int = 1,
) -> tuple[GraphBatch, np.ndarray]:
    """Every member's training graphs packed ``packings`` times, stacked
    ``[M, P, B, ...]``; and ``[M]`` counts.

    Members are fold-major; each packs its graphs in orders drawn from its
    seed and fold, so a member packs the same whatever else trains beside
    it. Epoch ``e`` steps on packing ``e mod P``, its batches in an order
    the device draws, so batches change composition as well as order.
    """
    orders = []
    for f in range(splits.train.shape[0]):
        graphs = np.flatnonzero(splits.train[f])
        for s in seeds:
            rng = np.random.default_rng([s, int(splits.fold[f])])
            orders.append([rng.permutation(graphs) for _ in range(packings)])
    most = max(batch_count(dataset, o, budget, batch_size) for member in orders for o in member)
    members = []
    for member in orders:
        packed = [pack_graphs(dataset, o, budget, batch_size, num_batches=most) for o in member]
        members.append(jax.tree.map(lambda *a: np.stack(a), *packed))
    stacked = jax.tree.map(lambda *a: np.stack(a), *members)
    return stacked, np.array([member[0].shape[0] for member in orders], np.int64)


def select_best(curves: Curves) -> np.ndarray:
    """int ``[M]``: each member's epoch of best validation accuracy (ties: lower
    validation loss, then earlier)."""
    best = []
    for m in range(curves.val_accuracy.shape[1]):
        order = np.lexsort(
            (
                np.arange(curves.val_accuracy.shape[0]),
                curves.val_loss[:, m],
                -curves.val_accuracy[:, m],
            )
        )
        best.append(int(order[0]))
    return np.asarray(best, np.int64)


def fit_graphs(
    model: GraphModel,
    dataset,
    config: GraphTrainConfig,
    splits: Splits,
    *,
    seeds: Sequence[int] = (0,),
    budget: Budget | None = None,
    progress: bool = False,
) -> GraphFitResult:
    """Trains every (fold, seed) member of ``splits`` x ``seeds`` as one program.

    Args:
      model: a :class:`~sparsegcn.nn.graph_gin.GraphModel`.
      dataset: a :class:`~sparsegcn.datasets.graph_dataset.GraphDataset`.
      config: :class:`GraphTrainConfig`.
      splits: :class:`Splits` (``[K, G]`` masks), e.g. :func:`fold_splits`.
      seeds: parameter, dropout and shuffling seeds of every fold.
      budget: batch budget; default :func:`~sparsegcn.batch.choose_budget`.
      progress: print a line per compiled call.

    Returns:
      A :class:`GraphFitResult`.
    """
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    if budget is None:
        budget = choose_budget(
            dataset.nodes_per_graph(), dataset.edges_per_graph(), config.batch_size
        )
    # From the whole dataset's size, so that a fold packs alike alone or among others.
    packings = config.packings or packings_for(
        dataset, budget, dataset.num_graphs, config.batch_size
    )
    train, train_graphs = member_batches(
        dataset, splits, seeds, budget, config.batch_size, packings
    )
    everything = np.arange(dataset.num_graphs)
    eval_batches = pack_graphs(dataset, everything, budget, config.batch_size)
    folds = splits.train.shape[0]
    member_fold = np.repeat(np.arange(folds), len(seeds))
    valid = jnp.asarray(splits.valid[member_fold])
    test = jnp.asarray(splits.test[member_fold])
    tx = _optimizer(config)

    def init(key):
        init_key, run_key = jax.random.split(key)
        params, stats = model.init(init_key)
        return MemberState(params, stats, tx.init(params), run_key)

    keys = jnp.stack([jax.random.key(s) for s in seeds] * folds)
    state = jax.jit(jax.vmap(init))(keys)
    chunk = config.chunk
    traces = []

    def program(state, train, eval_batches, valid, test, first_epoch):
        traces.append(1)
        run = make_epochs_fn(model, config, chunk)
        return jax.vmap(run, in_axes=(0, 0, None, 0, 0, None))(
            state, train, eval_batches, valid, test, first_epoch
        )

    train_dev = jax.device_put(train)
    eval_dev = jax.device_put(eval_batches)
    start = time.perf_counter()
    compiled = (
        jax.jit(program, donate_argnums=0)
        .lower(state, train_dev, eval_dev, valid, test, jnp.int32(0))
        .compile()
    )
    compile_s = time.perf_counter() - start
    metrics = []
    train_s = 0.0
    done = 0
    while done < config.epochs:
        tick = time.perf_counter()
        state, out = compiled(state, train_dev, eval_dev, valid, test, jnp.int32(done))
        out = np.asarray(jax.block_until_ready(out))  # [M, chunk, 4]
        train_s += time.perf_counter() - tick
        metrics.append(out)
        done += chunk
        if progress:
            print(f"epoch {done}/{config.epochs}: val acc {out[:, -1, 2].mean():.4f}", flush=True)
    stacked = np.concatenate(metrics, axis=1)  # [M, epochs, 4]
    curves = Curves(*(np.ascontiguousarray(stacked[:, :, i].T) for i in range(4)))
    best = select_best(curves)
    members = np.arange(best.shape[0])
    return GraphFitResult(
        folds=folds,
        seeds=seeds,
        curves=curves,
        best_epoch=best,
        test_acc=curves.test_accuracy[best, members],
        val_acc=curves.val_accuracy[best, members],
        budget=budget,
        batches_per_epoch=int(train.graph_mask.shape[2]),
        packings=packings,
        train_graphs=train_graphs,
        train_s=train_s,
        compile_s=compile_s,
        compiles=len(traces),
    )


__all__ = [
    "INNER_VALIDATION",
    "Curves",
    "GraphFitResult",
    "GraphTrainConfig",
    "Splits",
    "fit_graphs",
    "fold_splits",
    "make_epochs_fn",
    "member_batches",
    "packings_for",
    "select_best",
    "stratified_folds",
]

"""Full-batch node classification: several seeds as one compiled program.

The pieces are pure functions composed bottom-up:

- :func:`make_optimizer`: optax Adam with (first-layer) weight decay;
- :func:`train_step`: one forward/backward/update on the train mask;
- :func:`run_epoch`: a step, then evaluation and early-stopping bookkeeping;
- :func:`fit`: ``jit(vmap(scan(run_epoch)))`` over seeds and epochs, driven
  in chunks of ``epochs_per_call`` so a progress bar can advance.

A run compiles each program exactly once (ahead of time, so the compile time
is measured apart from step times), whatever the number of epochs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sparsegcn.nn.model import Model
from sparsegcn.train import loop
from sparsegcn.train.losses import masked_accuracy, masked_cross_entropy
from sparsegcn.train.state import Best, NodeData, TrainConfig, TrainState, initial_best


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Adam with L2 weight decay on the layers ``config.decay_layers`` names.

    ``add_decayed_weights`` before ``adam`` is coupled L2 regularisation,
    the same update as PyTorch's ``Adam(weight_decay=...)`` in PyG's example.

    The learning rate and weight decay are injected hyperparameters
    (``optax.inject_hyperparams``): they live in the optimizer state as
    float32 scalars ``opt_state.hyperparams["learning_rate" | "weight_decay"]``,
    so one compiled program can train members with different values
    (:func:`sparsegcn.train.sweep.fit_sweep`) and checkpoints record them.
    The decay term is present whenever ``decay_layers != "none"``, even at
    zero decay (adding ``0 * p`` changes nothing), so every weight decay
    value shares one state structure.
    """

    def decay_mask(p):
        if config.decay_layers == "all":
            return jax.tree.map(lambda _: True, p)
        masked = jax.tree.map(lambda _: False, p)
        if config.decay_layers == "first":
            masked["layers"][0] = jax.tree.map(lambda _: True, p["layers"][0])
        return masked

    def build(learning_rate, weight_decay):
        parts = []
        if config.clip_norm is not None:
            parts.append(optax.clip_by_global_norm(config.clip_norm))
        if config.decay_layers != "none":
            parts.append(optax.masked(optax.add_decayed_weights(weight_decay), decay_mask))
        parts.append(optax.adam(learning_rate))
        return optax.chain(*parts)

    return optax.inject_hyperparams(build)(
        learning_rate=config.learning_rate, weight_decay=config.weight_decay
    )


def init_state(model: Model, tx: optax.GradientTransformation, key: jax.Array) -> TrainState:
    """Fresh state for one seed: ``key`` is split into init and training keys."""
    init_key, train_key = jax.random.split(key)
    params = model.init(init_key)
    return TrainState(
        params=params,
        opt_state=tx.init(params),
        key=train_key,
        epoch=jnp.zeros((), jnp.int32),
        bad_epochs=jnp.zeros((), jnp.int32),
        done=jnp.zeros((), bool),
        best=initial_best(params),
    )


def train_step(model: Model, tx, state: TrainState, data: NodeData):
    """One optimizer step. Returns ``(params, opt_state, key, loss, grad_norm)``."""
    key, dropout_key = jax.random.split(state.key)

    def loss_fn(params):
        logits = model.apply(params, data.graph, data.features, key=dropout_key, training=True)
        return masked_cross_entropy(logits, data.labels, data.train_mask)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    params, opt_state = apply_optimizer(tx, grads, state.opt_state, state.params)
    return params, opt_state, key, loss, optax.tree.norm(grads)


def apply_optimizer(tx: optax.GradientTransformation, grads, opt_state, params):
    """``tx.update`` then ``apply_updates``; returns ``(params, opt_state)``.

    optax mixes Python floats with int32 step counts (Adam's bias
    correction), which JAX's strict dtype-promotion mode refuses, so its
    update runs under standard promotion whatever the caller's setting.
    """
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state


def evaluate(model: Model, params, data: NodeData) -> dict:
    """Inference-mode accuracies and validation loss (scalars)."""
    logits = model.apply(params, data.graph, data.features)
    return {
        "train_acc": masked_accuracy(logits, data.labels, data.train_mask),
        "val_acc": masked_accuracy(logits, data.labels, data.val_mask),
        "test_acc": masked_accuracy(logits, data.labels, data.test_mask),
        "val_loss": masked_cross_entropy(logits, data.labels, data.val_mask),
    }


def predict(model: Model, params, data: NodeData) -> tuple[jax.Array, jax.Array]:
    """Inference-mode class predictions and embeddings of every seed, jitted.

    Args:
      model: the model the params belong to.
      params: params with a leading ``[K]`` seed axis (e.g. ``FitResult.best_params``).
      data: the :class:`NodeData` (only ``graph`` and ``features`` are read).

    Returns:
      ``(classes, embeddings)``: int32 ``[K, N]`` arg-max classes and float32
      ``[K, N, H]`` embeddings (``model.embed``, the last layer's input).
    """

    def one_seed(p, graph, features):
        logits = model.apply(p, graph, features)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), model.embed(p, graph, features)

    run = jax.jit(jax.vmap(one_seed, in_axes=(0, None, None)))
    return run(params, data.graph, data.features)


def _select(pred: jax.Array, on_true, on_false):
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def run_epoch(model: Model, tx, config: TrainConfig, state: TrainState, data: NodeData):
    """A training step, evaluation, and early-stopping bookkeeping for one seed.

    Once ``state.done`` is set the state is frozen: later epochs of the same
    compiled scan leave it unchanged, so seeds that stop early (or runs whose
    epoch count is not a multiple of the chunk) need no recompilation.

    Divergence guard: a step whose loss or gradient norm is not finite is
    discarded, the seed is frozen at its last finite state (``done``) and
    the step is flagged in the ``diverged`` metric, which :func:`fit`
    turns into a :class:`~sparsegcn.train.guard.DivergenceError` after the
    compiled call; no Python runs per epoch.

    Returns:
      ``(new_state, metrics)`` with scalar metrics ``loss``, ``grad_norm``,
      ``train_acc``, ``val_acc``, ``val_loss``, ``test_acc``, ``active``
      (the seed was still training), ``diverged`` and ``epoch`` (the
      1-based epoch this step would complete).
    """
    params, opt_state, key, loss, grad_norm = train_step(model, tx, state, data)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    return end_epoch(
        config,
        state,
        params,
        opt_state,
        key,
        evaluate(model, params, data),
        loss=loss,
        grad_norm=grad_norm,
        finite=finite,
    )


def end_epoch(
    config: TrainConfig,
    state: TrainState,
    params,
    opt_state,
    key: jax.Array,
    metrics: dict,
    *,
    loss: jax.Array,
    grad_norm: jax.Array,
    finite: jax.Array,
):
    """The bookkeeping every trainer does after an epoch's updates (one seed).

    Tracks the best epoch (by validation accuracy, then loss), patience and
    the stop flag, and applies the divergence guard: when ``finite`` is
    false the epoch's updates are discarded and the seed is frozen at
    ``state``. A seed already ``done`` is left unchanged.

    Args:
      config: the run's :class:`TrainConfig`.
      state: the state before the epoch.
      params, opt_state, key: after the epoch's updates.
      metrics: ``evaluate``'s accuracies and validation loss for ``params``.
      loss, grad_norm: the epoch's training loss and gradient norm.
      finite: bool ``[]``, every loss and gradient of the epoch was finite.

    Returns:
      ``(new_state, metrics)``, the metrics extended with ``loss``,
      ``grad_norm``, ``active``, ``diverged`` and ``epoch``.
    """
    best = state.best
    improved = (metrics["val_acc"] > best.val_acc) | (
        (metrics["val_acc"] == best.val_acc) & (metrics["val_loss"] < best.val_loss)
    )
    epoch = state.epoch + 1
    candidate = Best(
        params=params,
        epoch=epoch,
        val_acc=metrics["val_acc"],
        val_loss=metrics["val_loss"],
        train_acc=metrics["train_acc"],
        test_acc=metrics["test_acc"],
    )
    bad_epochs = jnp.where(improved, 0, state.bad_epochs + 1)
    new_state = TrainState(
        params=params,
        opt_state=opt_state,
        key=key,
        epoch=epoch,
        bad_epochs=bad_epochs,
        done=should_stop(config, epoch, bad_epochs),
        best=_select(improved, candidate, best),
    )
    metrics = dict(
        metrics,
        loss=loss,
        grad_norm=grad_norm,
        active=~state.done,
        diverged=~state.done & ~finite,
        epoch=epoch,
    )
    held = state._replace(done=state.done | ~finite)
    return _select(state.done | ~finite, held, new_state), metrics


def should_stop(config: TrainConfig, epoch: jax.Array, bad_epochs: jax.Array) -> jax.Array:
    """bool ``[]``: the epoch budget is spent or patience ran out."""
    done = epoch >= config.epochs
    if config.patience is not None:
        done = done | (bad_epochs >= config.patience)
    return done


def resume_state(state: TrainState, config: TrainConfig) -> TrainState:
    """``state`` (leading ``[K]`` axis) with ``done`` recomputed for ``config``.

    A checkpoint written at the end of a 50-epoch run has every seed done;
    resumed with ``epochs=200`` its seeds continue, while seeds that ran out
    of patience stay stopped (unless ``config`` has more patience). For a
    state taken mid-run with the same config nothing changes, which is what
    makes an interrupted and resumed run equal an uninterrupted one.
    """
    done = jax.vmap(lambda e, b: should_stop(config, e, b))(state.epoch, state.bad_epochs)
    return state._replace(done=done)


def make_chunk_fn(model: Model, tx, config: TrainConfig) -> Callable:
    """``(states [K], data) -> (states, metrics [K, chunk])``: ``config.chunk``
    epochs of every seed, as ``vmap`` over seeds of a ``lax.scan`` over epochs.
    """

    def one_seed(state, data):
        def body(carry, _):
            return run_epoch(model, tx, config, carry, data)

        return jax.lax.scan(body, state, None, length=config.chunk)

    return jax.vmap(one_seed, in_axes=(0, None))


def make_step_fn(model: Model, tx) -> Callable:
    """``(states [K], data) -> states``: one optimizer step of every seed."""

    def one_seed(state, data):
        params, opt_state, key, _, _ = train_step(model, tx, state, data)
        return state._replace(params=params, opt_state=opt_state, key=key)

    return jax.vmap(one_seed, in_axes=(0, None))


@dataclasses.dataclass
class FitResult:
    """What :func:`fit` measured. Per-seed arrays have a leading ``[K]`` axis.

    Attributes:
      state: the final :class:`TrainState` of every seed.
      history: per-epoch metrics, each ``[epochs_run, K]`` (NumPy).
      best_params: the restored params of every seed (``state.best.params``).
      test_acc, val_acc, train_acc: ``[K]`` accuracies at each seed's best epoch.
      best_epoch: ``[K]``.
      compile_s: seconds spent lowering and compiling.
      train_step_ms_median: median wall time of one compiled optimizer step
        (all ``K`` seeds in lockstep), after compilation.
      epoch_ms_median: median wall time per epoch (step + evaluation).
      wall_s: total wall time of :func:`fit`.
    """

    state: TrainState
    history: dict
    seeds: tuple
    compile_s: float
    train_step_ms_median: float
    epoch_ms_median: float
    wall_s: float

    @property
    def best_params(self):
        return self.state.best.params

    @property
    def test_acc(self) -> np.ndarray:
        return np.asarray(self.state.best.test_acc)

    @property
    def val_acc(self) -> np.ndarray:
        return np.asarray(self.state.best.val_acc)

    @property
    def train_acc(self) -> np.ndarray:
        return np.asarray(self.state.best.train_acc)

    @property
    def best_epoch(self) -> np.ndarray:
        return np.asarray(self.state.best.epoch)


def seed_keys(seeds: Sequence[int]) -> jax.Array:
    """One PRNG key per integer seed, stacked ``[K]``."""
    return jnp.stack([jax.random.key(int(s)) for s in seeds])


def fit(
    model: Model,
    data: NodeData,
    config: TrainConfig | None = None,
    *,
    seeds: Sequence[int] = (0,),
    progress: bool = False,
    state: TrainState | None = None,
    history: dict | None = None,
    on_chunk: Callable[[TrainState, dict], None] | None = None,
) -> FitResult:
    """Trains one model per seed, all in one compiled program.

    Args:
      model: the model (``init``/``apply``).
      data: the :class:`NodeData`; moved to the device once.
      config: hyperparameters (default ``TrainConfig()``).
      seeds: integer seeds; seed ``s`` uses ``jax.random.key(s)`` for
        initialization and dropout, so a seed gives the same result alone
        or among others.
      progress: show a tqdm progress bar.
      state: resume from this state (leading ``[K]`` axis) instead of
        initializing; its ``done`` flags are recomputed for ``config``
        (:func:`resume_state`), so a finished run can be extended.
      history: metrics of the epochs already run (``{name: [E0, K]}``,
        e.g. from a checkpoint); the result's history continues it.
      on_chunk: called with ``(state, history)`` after every compiled call,
        ``history`` as ``{name: [epochs so far, K]}`` NumPy arrays (the hook
        for checkpoints and logging).

    Returns:
      A :class:`FitResult`.

    Raises:
      DivergenceError: a seed's loss or gradient became non-finite; raised
        after the compiled call in which it happened, before ``on_chunk``.
    """
    start = time.perf_counter()
    config = TrainConfig() if config is None else config
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("fit needs at least one seed")
    data = jax.device_put(data)
    tx = make_optimizer(config)
    state = loop.start_state(model, tx, config, seeds, state, history)

    chunk_fn, compile_s = loop.compile_for(make_chunk_fn(model, tx, config), state, data)
    state, history, chunk_times = loop.run_chunks(
        chunk_fn, state, data, config, seeds, progress=progress, history=history, on_chunk=on_chunk
    )

    step_ms, step_compile_s = loop.time_step(
        make_step_fn(model, tx), (state, data), config.timing_steps
    )
    return FitResult(
        state=state,
        history=history,
        seeds=seeds,
        compile_s=compile_s + step_compile_s,
        train_step_ms_median=step_ms,
        epoch_ms_median=loop.epoch_ms(chunk_times, config.chunk),
        wall_s=time.perf_counter() - start,
    )

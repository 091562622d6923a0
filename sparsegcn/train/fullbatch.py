"""Full-batch node classification: several seeds as one compiled program.

The pieces are pure functions composed bottom-up:

- :func:`train_step`: one forward/backward/update on the train mask;
- :func:`run_epoch`: a step, then evaluation and early-stopping bookkeeping;
- :func:`make_chunk_fn`: ``jit(vmap(scan(run_epoch)))`` over seeds and epochs;
- :func:`fit`: that program (and :func:`make_step_fn`'s, for opt-in step
  timing) run by the shared skeleton :func:`~sparsegcn.train.loop.run_training`,
  in chunks of ``epochs_per_call`` so a progress bar can advance.

A run compiles its training program exactly once (ahead of time, so the
compile time is measured apart from step times), whatever the number of
epochs; the optimizer (:func:`~sparsegcn.train.make_optimizer`) and the
state's start and resume (:mod:`sparsegcn.train.state`) are shared by every
trainer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sparsegcn.nn.model import Model
from sparsegcn.train import loop
from sparsegcn.train.loop import FitResult
from sparsegcn.train.losses import (
    CLASSIFICATION,
    NodeObjective,
    chance_loss,
    model_classes,
)
from sparsegcn.train.optim import apply_optimizer
from sparsegcn.train.state import (
    Best,
    LabelledNodes,
    NodeData,
    TrainConfig,
    TrainState,
    should_stop,
)


def train_step(
    model: Model, tx, state: TrainState, data: NodeData, objective: NodeObjective = CLASSIFICATION
):
    """One optimizer step on ``objective``'s loss (default: softmax cross-entropy).

    Returns ``(params, opt_state, key, loss, grad_norm)``."""
    key, dropout_key = jax.random.split(state.key)

    def loss_fn(params):
        logits = model.apply(params, data.graph, data.features, key=dropout_key, training=True)
        return objective.loss(logits, data.labels, data.train_mask)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    params, opt_state = apply_optimizer(tx, grads, state.opt_state, state.params)
    return params, opt_state, key, loss, optax.tree.norm(grads)


def evaluate(
    model: Model, params, data: LabelledNodes, objective: NodeObjective = CLASSIFICATION
) -> dict:
    """Inference-mode scores and validation loss (scalars).

    ``*_acc`` hold ``objective``'s metric (accuracy by default, ROC-AUC for
    :data:`~sparsegcn.train.losses.MULTILABEL`), ``val_loss`` its loss.
    """
    logits = model.apply(params, data.graph, data.features)
    metric = objective.metric
    return {
        "train_acc": metric(logits, data.labels, data.train_mask),
        "val_acc": metric(logits, data.labels, data.val_mask),
        "test_acc": metric(logits, data.labels, data.test_mask),
        "val_loss": objective.loss(logits, data.labels, data.val_mask),
    }


def predict(model: Model, params, data: LabelledNodes) -> tuple[jax.Array, jax.Array]:
    """Inference-mode class predictions and embeddings of every seed, jitted.

    Args:
      model: the model the params belong to.
      params: params with a leading ``[K]`` seed axis (e.g. ``FitResult.best_params``).
      data: the :class:`NodeData` (only ``graph`` and ``features`` are read).

    Returns:
      ``(classes, embeddings)``: int32 ``[K, N]`` arg-max classes and float32
      ``[K, N, H]`` embeddings (``model.embed``, the last layer's input).
    """
    return _predict_program(model.apply, model.embed)(params, data.graph, data.features)


@functools.lru_cache(maxsize=32)
def _predict_program(apply: Callable, embed: Callable):
    """:func:`predict`'s jitted program for a model's functions, built once per model
    (rebuilt on every call, ``jax.jit`` of a new closure compiled every time)."""

    def one_seed(p, graph, features):
        logits = apply(p, graph, features)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), embed(p, graph, features)

    return jax.jit(jax.vmap(one_seed, in_axes=(0, None, None)))


def _select(pred: jax.Array, on_true, on_false):
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def run_epoch(
    model: Model,
    tx,
    config: TrainConfig,
    state: TrainState,
    data: NodeData,
    objective: NodeObjective = CLASSIFICATION,
):
    """A training step, evaluation, and early-stopping bookkeeping for one seed
    (loss and metric: ``objective``'s).

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
    params, opt_state, key, loss, grad_norm = train_step(model, tx, state, data, objective)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    return end_epoch(
        config,
        state,
        params,
        opt_state,
        key,
        evaluate(model, params, data, objective),
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

    Tracks the best epoch (by ``config.monitor``), patience and
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
    if config.monitor == "val_loss":
        improved = metrics["val_loss"] < best.val_loss
    else:
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


def make_chunk_fn(
    model: Model, tx, config: TrainConfig, objective: NodeObjective = CLASSIFICATION
) -> Callable:
    """``(states [K], data) -> (states, metrics [K, chunk])``: ``config.chunk``
    epochs of every seed, as ``vmap`` over seeds of a ``lax.scan`` over epochs.
    """

    def one_seed(state, data):
        def body(carry, _):
            return run_epoch(model, tx, config, carry, data, objective)

        return jax.lax.scan(body, state, None, length=config.chunk)

    return jax.vmap(one_seed, in_axes=(0, None))


def make_step_fn(model: Model, tx, objective: NodeObjective = CLASSIFICATION) -> Callable:
    """``(states [K], data) -> states``: one optimizer step of every seed."""

    def one_seed(state, data):
        params, opt_state, key, _, _ = train_step(model, tx, state, data, objective)
        return state._replace(params=params, opt_state=opt_state, key=key)

    return jax.vmap(one_seed, in_axes=(0, None))


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
    objective: NodeObjective = CLASSIFICATION,
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
        (:func:`~sparsegcn.train.resume_state`), so a finished run can be
        extended.
      history: metrics of the epochs already run (``{name: [E0, K]}``,
        e.g. from a checkpoint); the result's history continues it.
      on_chunk: called with ``(state, history)`` after every compiled call,
        ``history`` as ``{name: [epochs so far, K]}`` NumPy arrays (the hook
        for checkpoints and logging).
      objective: the loss and metric (:class:`~sparsegcn.train.losses.NodeObjective`):
        :data:`~sparsegcn.train.losses.CLASSIFICATION` (the default) for a
        class per node, :data:`~sparsegcn.train.losses.MULTILABEL` for
        ``[N, T]`` binary labels; the result's accuracies are its metric.

    Returns:
      A :class:`~sparsegcn.train.FitResult`; its ``train_step_ms_median``
      is NaN unless ``config.timing_steps > 0`` opts in to step timing.

    Raises:
      TypeError: ``model`` is not a ``Model`` or ``data`` not a ``NodeData``
        (a dict, a ``Dataset``), naming the value.
      ValueError: no seeds, a state or history that does not match them,
        a labelled node's class outside the model's ``[0, num_classes)``, or
        (a ROC-AUC objective) a validation or test split where no task has
        both a positive and a negative label.
      DivergenceError: a seed's loss or gradient became non-finite; raised
        after the compiled call in which it happened, before ``on_chunk``.
    """
    if objective.metric_name == "rocauc" and isinstance(data, NodeData):
        # An undefined ROC-AUC (no task with both classes) never selects a model: the
        # untrained init would be reported. Refused before training, as the CLI does.
        from sparsegcn.metrics import check_tasks_defined

        for split in ("val", "test"):
            mask = np.asarray(getattr(data, f"{split}_mask"), bool)
            if mask.any():
                check_tasks_defined(data.labels, mask, f"fit: data.{split}_mask's nodes")
    trainer = loop.Trainer(
        name="fit",
        chance=chance_loss(objective.metric_name, model_classes(model)),
        make_chunk=lambda tx, config: make_chunk_fn(model, tx, config, objective),
        make_step=lambda tx: make_step_fn(model, tx, objective),
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

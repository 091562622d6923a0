"""The host loop shared by every trainer: starting state, compiled chunks, timing.

Each trainer (:func:`~sparsegcn.train.fit`,
:func:`~sparsegcn.train.fit_minibatch`, and the parallel ones in
:mod:`sparsegcn.parallel`) compiles one program ``(state [K], data) ->
(state, metrics [K, chunk])`` that runs ``config.chunk`` epochs of all ``K``
seeds. This module drives it: it calls the program until every seed is
done, stops on divergence, grows the per-epoch history, advances the
progress bar and calls the ``on_chunk`` hook. Only the small per-epoch
metrics come back to the host between calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import jax
import numpy as np
import optax

from sparsegcn.nn.model import Model
from sparsegcn.train.guard import raise_if_diverged, raise_if_loss_grew
from sparsegcn.train.state import TrainConfig, TrainState


def start_state(
    model: Model,
    tx: optax.GradientTransformation,
    config: TrainConfig,
    seeds: Sequence[int],
    state: TrainState | None = None,
    history: dict | None = None,
) -> TrainState:
    """The state training starts from: fresh per seed, or ``state`` resumed for ``config``.

    Args:
      model, tx: what :func:`~sparsegcn.train.init_state` initializes.
      config: the run's settings; a resumed state's ``done`` flags are
        recomputed for it (:func:`~sparsegcn.train.resume_state`), so a
        finished run can be extended.
      seeds: the ``K`` integer seeds.
      state: a state with a leading ``[K]`` axis to resume, or ``None``.
      history: metrics of the epochs already run, ``{name: [E0, K]}``.

    Raises:
      ValueError: ``state`` or ``history`` do not hold ``K`` members, or a
        history comes without the state it belongs to.
    """
    from sparsegcn.train.fullbatch import init_state, resume_state, seed_keys

    num_seeds = len(seeds)
    if history is not None:
        if state is None:
            raise ValueError("history continues a run: pass the state it belongs to as well")
        for name, values in history.items():
            shape = np.shape(values)
            if len(shape) != 2 or shape[1] != num_seeds:
                raise ValueError(
                    f"history[{name!r}] must be [epochs, {num_seeds}] (one column per seed), "
                    f"got shape {shape}"
                )
    if state is None:
        return jax.jit(jax.vmap(lambda k: init_state(model, tx, k)))(seed_keys(seeds))
    members = int(np.shape(state.epoch)[0]) if np.ndim(state.epoch) else None
    if members != num_seeds:
        raise ValueError(
            f"state holds {members} members (leading axis of state.epoch, shape "
            f"{np.shape(state.epoch)}) but {num_seeds} seeds were given: {list(seeds)}"
        )
    return resume_state(state, config)


def run_chunks(
    program: Callable,
    state: TrainState,
    data,
    config: TrainConfig,
    seeds: Sequence[int],
    *,
    progress: bool = False,
    history: dict | None = None,
    on_chunk: Callable[[TrainState, dict], None] | None = None,
) -> tuple[TrainState, dict, list[float]]:
    """Calls ``program(state, data) -> (state, metrics [K, chunk])`` until every seed is done.

    Args:
      program: the compiled chunk of epochs.
      state, data: its arguments; ``state`` is replaced by each call's result.
      config: ``config.epochs`` sizes the progress bar.
      seeds: named in a divergence error.
      progress: show a tqdm progress bar (on stderr).
      history: metrics of earlier epochs, continued.
      on_chunk: called with ``(state, history so far)`` after every call.

    Returns:
      ``(state, history, seconds per call)``, ``history`` as
      ``{name: [epochs run, K]}`` NumPy arrays.

    Raises:
      DivergenceError: a seed's loss or gradient became non-finite, or its
        loss stayed above ``config.divergence_factor`` times its first value
        for ``config.divergence_epochs`` epochs; raised after the call in
        which it happened, before ``on_chunk``.
    """
    from tqdm.auto import tqdm

    chunks: dict[str, list] = {k: [np.asarray(v)] for k, v in (history or {}).items()}
    times = []
    bar = tqdm(
        total=config.epochs,
        initial=int(np.asarray(state.epoch).min()),
        disable=not progress,
        unit="epoch",
        leave=False,
    )
    try:
        while not bool(np.asarray(state.done).all()):
            tick = time.perf_counter()
            state, metrics = jax.block_until_ready(program(state, data))
            times.append(time.perf_counter() - tick)
            metrics = jax.tree.map(lambda m: np.asarray(m).T, metrics)  # [chunk, K]
            raise_if_diverged(metrics, tuple(seeds))
            if chunks and set(chunks) != set(metrics):
                raise ValueError(
                    f"the given history has metrics {sorted(chunks)} but training records "
                    f"{sorted(metrics)}; pass the history of a run of this trainer"
                )
            active = metrics["active"].any(axis=1)
            for name, values in metrics.items():
                chunks.setdefault(name, []).append(values[active])
            bar.update(int(active.sum()))
            if active.any():
                bar.set_postfix(
                    loss=f"{metrics['loss'][active][-1].mean():.4f}",
                    val=f"{metrics['val_acc'][active][-1].mean():.3f}",
                )
            so_far = {k: np.concatenate(v) for k, v in chunks.items()}
            raise_if_loss_grew(
                so_far, seeds, factor=config.divergence_factor, epochs=config.divergence_epochs
            )
            if on_chunk is not None:
                on_chunk(state, so_far)
    finally:
        bar.close()
    return state, {k: np.concatenate(v) for k, v in chunks.items()}, times


def compile_for(fn: Callable, *args) -> tuple[Callable, float]:
    """``jax.jit(fn)`` lowered and compiled for ``args``, and the seconds that took.

    Compiling ahead of the first call keeps compile time out of every timed
    call and reports it on its own.
    """
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - start


def time_step(fn: Callable, args: tuple, repeats: int) -> tuple[float, float]:
    """``(median milliseconds of one compiled call of fn(*args), compile seconds)``.

    ``(nan, 0.0)`` when ``repeats`` is 0: nothing is compiled or run.
    """
    if repeats <= 0:
        return float("nan"), 0.0
    compiled, compile_s = compile_for(fn, *args)
    return 1e3 * median_seconds(compiled, args, repeats)[0], compile_s


def median_seconds(fn: Callable, args: tuple, repeats: int) -> tuple[float, object]:
    """Median wall time of ``fn(*args)`` over ``repeats`` calls after one warm-up call.

    Each call is waited for (``block_until_ready``) before the clock stops.

    Returns:
      ``(seconds, the last call's output)``.
    """
    out = jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times)), out


def epoch_ms(chunk_seconds: Sequence[float], epochs_per_call: int) -> float:
    """Median milliseconds per epoch from the seconds each compiled call took."""
    if not chunk_seconds:
        return float("nan")
    return 1e3 * float(np.median(chunk_seconds)) / epochs_per_call

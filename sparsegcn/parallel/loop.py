"""The host loop of the parallel trainers: compiled chunks of epochs, history, hooks.

It is the loop of :func:`~sparsegcn.train.fit` run on a program over a
mesh: state and data stay on the mesh between calls; only the small
per-epoch metrics (replicated, so every process holds them) come back to
the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import jax
import numpy as np

from sparsegcn.train.guard import raise_if_diverged
from sparsegcn.train.state import TrainConfig, TrainState


def check_resume(state: TrainState, history: dict | None, num_seeds: int) -> None:
    """Refuses a resumed state or history that does not hold ``num_seeds`` members."""
    members = int(np.shape(state.epoch)[0]) if np.ndim(state.epoch) else None
    if members != num_seeds:
        raise ValueError(
            f"state holds {members} members (leading axis of state.epoch, shape "
            f"{np.shape(state.epoch)}) but {num_seeds} seeds were given"
        )
    for name, values in (history or {}).items():
        shape = np.shape(values)
        if len(shape) != 2 or shape[1] != num_seeds:
            raise ValueError(
                f"history[{name!r}] must be [epochs, {num_seeds}] (one column per seed), "
                f"got shape {shape}"
            )


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

    Returns:
      ``(state, history, seconds per call)``, ``history`` as
      ``{name: [epochs run, K]}`` NumPy arrays continuing the given one.

    Raises:
      DivergenceError: a seed's loss or gradient became non-finite.
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
            if on_chunk is not None:
                on_chunk(state, {k: np.concatenate(v) for k, v in chunks.items()})
    finally:
        bar.close()
    return state, {k: np.concatenate(v) for k, v in chunks.items()}, times


def median_seconds(fn: Callable, args: tuple, repeats: int) -> float:
    """Median wall time of ``fn(*args)`` over ``repeats`` calls, after one warm-up call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))

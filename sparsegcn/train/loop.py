"""The skeleton every trainer shares: :func:`run_training` and its host loop.

Each trainer (:func:`~sparsegcn.train.fit`,
:func:`~sparsegcn.train.fit_minibatch`, and the parallel ones in
:mod:`sparsegcn.parallel`) is a :class:`Trainer`: how its data is placed,
its compiled program ``(state [K], data) -> (state, metrics [K, chunk])``
that runs ``config.chunk`` epochs of all ``K`` seeds, the one-step program
that optional timing measures, and its result class. :func:`run_training`
does the rest, once for all of them: seeds to keys, optimizer, starting or
resumed state, ahead-of-time compilation, the chunks (until every seed is
done, stopping on divergence, growing the per-epoch history, advancing the
progress bar, calling the ``on_chunk`` hook), opt-in step timing and the
result. Only the small per-epoch metrics come back to the host between calls.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
import optax

from sparsegcn._checks import check_config, check_seeds
from sparsegcn.nn.model import Model
from sparsegcn.train.guard import raise_if_diverged, raise_if_loss_grew, raise_if_not_finite
from sparsegcn.train.optim import make_optimizer
from sparsegcn.train.state import (
    DIVERGENCE_EPOCHS,
    DIVERGENCE_FACTOR,
    TrainConfig,
    TrainState,
    check_masks,
    check_node_data,
    init_state,
    resume_state,
    seed_keys,
)


@dataclasses.dataclass
class FitResult:
    """What a trainer measured. Per-seed arrays have a leading ``[K]`` axis.

    Attributes:
      state: the final :class:`TrainState` of every seed.
      history: per-epoch metrics, each ``[epochs_run, K]`` (NumPy).
      best_params: the restored params of every seed (``state.best.params``).
      test_acc, val_acc, train_acc: ``[K]`` accuracies at each seed's best epoch.
      best_epoch: ``[K]``.
      compile_s: seconds spent lowering and compiling: the training program,
        plus the timed step's when ``config.timing_steps > 0``.
      train_step_ms_median: median wall time of one compiled optimizer step
        (all ``K`` seeds in lockstep), after compilation, over
        ``config.timing_steps`` steps; NaN when ``timing_steps`` is 0 (the
        default: timing is opt-in).
      epoch_ms_median: median wall time per epoch (step + evaluation).
      wall_s: total wall time of the run.
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


def _same_place(state: TrainState, data) -> tuple[TrainState, Any]:
    return state, jax.device_put(data)


def _state_and_data(state: TrainState, data, seeds: tuple[int, ...]) -> tuple:
    return state, data


class Trainer(NamedTuple):
    """What one trainer adds to :func:`run_training`; everything else is shared.

    Attributes:
      name: the public function's name, used in error messages.
      make_chunk: ``(tx, config) -> chunk_fn``, with ``chunk_fn(state [K],
        data) -> (state, metrics [K, config.chunk])`` the training program
        (e.g. :func:`~sparsegcn.train.make_chunk_fn`); compiled once.
      make_step: ``tx -> step_fn``, with ``step_fn(state [K], *args) ->
        state`` one optimizer step of every seed; compiled and timed only
        when ``config.timing_steps > 0``.
      place: ``(state, data) -> (state, data)`` as the programs read them
        (on the device, sharded over a mesh, ...); the default puts ``data``
        on the default device and leaves ``state`` where it is.
      step_args: ``(state, data, seeds) -> args`` of ``step_fn`` after
        training; the default is ``(state, data)``.
      measure: optional ``(data, config, seeds) -> (fields, compile_s)``:
        further timings (run, like the step's, only when
        ``config.timing_steps > 0``), ``fields`` passed on to ``result``.
      result: called with :class:`FitResult`'s fields (and ``measure``'s)
        to build the result; e.g. a subclass, or a ``functools.partial`` of
        one holding its static fields.
      chance: the objective's chance-level loss (:func:`drive`'s ``chance``).
    """

    name: str
    make_chunk: Callable[[optax.GradientTransformation, TrainConfig], Callable]
    make_step: Callable[[optax.GradientTransformation], Callable]
    place: Callable[[TrainState, Any], tuple[TrainState, Any]] = _same_place
    step_args: Callable[[TrainState, Any, tuple[int, ...]], tuple] = _state_and_data
    measure: Callable[[Any, TrainConfig, tuple[int, ...]], tuple[Mapping, float]] | None = None
    result: Callable[..., FitResult] = FitResult
    chance: float | None = None


def run_training(
    trainer: Trainer,
    model: Model,
    data,
    config: TrainConfig | None = None,
    *,
    seeds: Sequence[int] = (0,),
    progress: bool = False,
    state: TrainState | None = None,
    history: dict | None = None,
    on_chunk: Callable[[TrainState, dict], None] | None = None,
) -> FitResult:
    """Trains one model per seed with ``trainer``'s programs: the shared skeleton.

    Seeds become keys (:func:`~sparsegcn.train.seed_keys`), the optimizer is
    :func:`~sparsegcn.train.make_optimizer`'s, the state fresh or resumed
    (:func:`start_state`), the chunk program is compiled ahead of time
    (:func:`compile_for`) and called until every seed is done
    (:func:`run_chunks`); with ``config.timing_steps > 0`` one optimizer
    step is then compiled and timed (:func:`time_step`).

    Args:
      trainer: what differs between trainers (:class:`Trainer`).
      model: the model (``init``/``apply``).
      data: the trainer's data, placed by ``trainer.place``.
      config: hyperparameters (default ``TrainConfig()``).
      seeds: integer seeds; seed ``s`` uses ``jax.random.key(s)``, so a seed
        gives the same result alone or among others.
      progress: show a tqdm progress bar.
      state: resume from this state (leading ``[K]`` axis) instead of
        initializing; its ``done`` flags are recomputed for ``config``.
      history: metrics of the epochs already run (``{name: [E0, K]}``).
      on_chunk: called with ``(state, history)`` after every compiled call.

    Returns:
      ``trainer.result(...)``, a :class:`FitResult`.

    Raises:
      TypeError: ``model`` or ``data`` of the wrong type
        (:func:`~sparsegcn.train.state.check_node_data`).
      ValueError: no seeds, a state or history that does not match them,
        labels outside the model's classes, or an empty train, validation or
        test mask (:func:`~sparsegcn.train.state.check_masks`).
      DivergenceError: a seed's loss or gradient became non-finite; raised
        after the compiled call in which it happened, before ``on_chunk``.
    """
    start = time.perf_counter()
    check_node_data(trainer.name, model, data)
    config = check_config(trainer.name, config, TrainConfig)
    seeds = check_seeds(trainer.name, seeds)
    check_masks(data, trainer.name)
    tx = make_optimizer(config)
    state = start_state(
        model, tx, config, seeds, state, history, what=f"{trainer.name} ({len(seeds)} seed(s))"
    )
    state, data = trainer.place(state, data)

    program, compile_s = compile_for(trainer.make_chunk(tx, config), state, data)
    check_compiled_memory(program, f"{trainer.name}'s training program ({len(seeds)} seed(s))")
    state, history, chunk_seconds = run_chunks(
        program,
        state,
        data,
        config,
        seeds,
        progress=progress,
        history=history,
        on_chunk=on_chunk,
        chance=trainer.chance,
    )

    step_ms = float("nan")
    fields: Mapping[str, Any] = {}
    if config.timing_steps > 0:
        args = trainer.step_args(state, data, seeds)
        step_ms, step_compile_s = time_step(trainer.make_step(tx), args, config.timing_steps)
        compile_s += step_compile_s
        if trainer.measure is not None:
            fields, measure_compile_s = trainer.measure(data, config, seeds)
            compile_s += measure_compile_s
    return trainer.result(
        state=state,
        history=history,
        seeds=seeds,
        compile_s=compile_s,
        train_step_ms_median=step_ms,
        epoch_ms_median=epoch_ms(chunk_seconds, config.chunk),
        wall_s=time.perf_counter() - start,
        **fields,
    )


def start_state(
    model: Model,
    tx: optax.GradientTransformation,
    config: TrainConfig,
    seeds: Sequence[int],
    state: TrainState | None = None,
    history: dict | None = None,
    *,
    what: str = "training",
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
      what: names the trainer where a fresh state is larger than free memory.

    Raises:
      ValueError: ``state`` or ``history`` do not hold ``K`` members, a
        history comes without the state it belongs to, or a fresh state
        would not fit in free memory (:func:`check_state_memory`).
    """
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
        init = jax.vmap(lambda k: init_state(model, tx, k))
        keys = seed_keys(seeds)
        check_state_memory(init, keys, what=what)
        return jax.jit(init)(keys)
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
    chance: float | None = None,
) -> tuple[TrainState, dict, list[float]]:
    """Calls ``program(state, data) -> (state, metrics [K, chunk])`` until every seed is done.

    The node trainers' use of :func:`drive`: a seed is done when its
    ``state.done`` flag is set (early stopping, or ``config.epochs``).

    Args:
      program: the compiled chunk of epochs.
      state, data: its arguments; ``state`` is replaced by each call's result.
      config: ``config.epochs`` sizes the progress bar; its divergence settings
        drive the guard.
      seeds: named in a divergence error.
      progress: show a tqdm progress bar (on stderr).
      history: metrics of earlier epochs, continued.
      on_chunk: called with ``(state, history so far)`` after every call.

    Returns:
      ``(state, history, seconds per call)``, ``history`` as
      ``{name: [epochs run, K]}`` NumPy arrays.

    Raises:
      DivergenceError: see :func:`drive`.
    """
    return drive(
        lambda s: program(s, data),
        state,
        epochs=config.epochs,
        seeds=seeds,
        finished=lambda s: bool(np.asarray(s.done).all()),
        start=int(np.asarray(state.epoch).min()),
        history=history,
        on_chunk=on_chunk,
        progress=progress,
        watch="val_acc",
        divergence_factor=config.divergence_factor,
        divergence_epochs=config.divergence_epochs,
        chance=chance,
    )


def drive(
    advance: Callable[[Any], tuple[Any, Mapping[str, Any]]],
    state: Any,
    *,
    epochs: int,
    seeds: Sequence[int],
    finished: Callable[[Any], bool] | None = None,
    start: int = 0,
    history: Mapping[str, Any] | None = None,
    on_chunk: Callable[[Any, dict], None] | None = None,
    progress: bool = False,
    loss: str = "loss",
    watch: str | None = None,
    divergence_factor: float | None = DIVERGENCE_FACTOR,
    divergence_epochs: int = DIVERGENCE_EPOCHS,
    desc: str | None = None,
    chance: float | None = None,
) -> tuple[Any, dict, list[float]]:
    """The host loop every trainer runs: calls ``advance`` until the run is finished.

    Every trainer, whatever its task, has one compiled program (or, for the
    host-fed ones, one host function) that advances all its ``K`` members by
    a chunk of epochs: ``advance(state) -> (state, metrics)``, ``metrics``
    ``{name: [K, chunk]}``. This loop is the rest, shared:

    - it calls ``advance`` until ``finished(state)`` (default: ``epochs``
      epochs run, counting ``start``), waiting for each call
      (``block_until_ready``) and timing it;
    - it stops on divergence after the call in which it happened: a
      non-finite training loss (metric ``loss``), or one that stayed above
      ``divergence_factor`` times its first epoch's for
      ``divergence_epochs`` epochs (:mod:`sparsegcn.train.guard`);
    - it grows the history ``{name: [epochs, K]}``, advances the progress bar
      (the loss and the ``watch`` metric on it), and calls ``on_chunk(state,
      history so far)`` (checkpoints) after every call.

    Optional metrics with a meaning here: ``active`` (bool: the member
    trained in that epoch; default all), ``epoch`` (the 1-based epoch, named
    in errors; default counted from ``start``), ``grad_norm``, and
    ``diverged`` (bool: a non-finite step the program already discarded,
    :func:`~sparsegcn.train.guard.raise_if_diverged`; without it a non-finite
    ``loss`` is the signal).

    Args:
      advance: one call of the trainer's program, ``state -> (state, metrics)``.
      state: where training starts (fresh or resumed).
      epochs: the run's last epoch (sizes the progress bar).
      seeds: the ``K`` members' seeds, named in a divergence error.
      finished: ``state -> bool``; default: ``start`` plus the epochs run
        reach ``epochs``.
      start: epochs already run (a resumed run's).
      history: the metrics of those epochs, ``{name: [start, K]}``, continued.
      on_chunk: called with ``(state, history so far)`` after every call.
      progress: show a tqdm progress bar (on stderr).
      loss: the metric that holds the training loss.
      watch: a metric shown on the progress bar beside the loss.
      divergence_factor, divergence_epochs: the finite growth guard
        (``None`` turns it off).
      desc: the progress bar's label.
      chance: the task's chance-level loss (an uninformative prediction's:
        ``ln C``, ``ln 2`` a binary task), which bounds the growth guard's
        reference where the first epoch's mean loss is higher
        (:func:`~sparsegcn.train.guard.raise_if_loss_grew`); ``None``: none.

    Returns:
      ``(state, history, seconds of each call)``; ``history`` holds the
      metrics ``advance`` returns as NumPy ``[epochs run, K]`` arrays.

    Raises:
      DivergenceError: a member's loss (or gradient) became non-finite, or
        its loss ran away; raised after the call, before ``on_chunk``.
      ValueError: ``history`` records other metrics than training does.
    """
    from tqdm.auto import tqdm

    chunks: dict[str, list] = {k: [np.asarray(v)] for k, v in (history or {}).items()}
    ran = start

    def done(state) -> bool:
        return finished(state) if finished is not None else ran >= epochs

    times = []
    bar = tqdm(
        total=epochs, initial=start, disable=not progress, unit="epoch", leave=False, desc=desc
    )
    try:
        while not done(state):
            tick = time.perf_counter()
            state, metrics = jax.block_until_ready(advance(state))
            times.append(time.perf_counter() - tick)
            metrics = {k: np.asarray(m).T for k, m in metrics.items()}  # [chunk, K]
            if chunks and set(chunks) != set(metrics):
                raise ValueError(
                    f"the given history has metrics {sorted(chunks)} but training records "
                    f"{sorted(metrics)}; pass the history of a run of this trainer"
                )
            rows, members = metrics[loss].shape
            active = metrics.get("active", np.ones((rows, members), bool))
            counted = {
                "active": active,
                "epoch": metrics.get(
                    "epoch", np.broadcast_to(ran + 1 + np.arange(rows)[:, None], (rows, members))
                ),
                "loss": metrics[loss],
            }
            if "grad_norm" in metrics:
                counted["grad_norm"] = metrics["grad_norm"]
            if "diverged" in metrics:  # the program discarded the step (node trainers)
                raise_if_diverged(dict(counted, diverged=metrics["diverged"]), tuple(seeds))
            else:
                raise_if_not_finite(counted, tuple(seeds))
            trained = active.any(axis=1)
            ran += int(trained.sum())
            for name, values in metrics.items():
                chunks.setdefault(name, []).append(values[trained])
            bar.update(int(trained.sum()))
            if trained.any():
                shown = {"loss": f"{metrics[loss][trained][-1].mean():.4f}"}
                if watch is not None and watch in metrics:
                    shown[watch] = f"{np.nanmean(metrics[watch][trained][-1]):.3f}"
                bar.set_postfix(shown)
            so_far = {k: np.concatenate(v) for k, v in chunks.items()}
            guarded = {
                "loss": so_far[loss],
                "active": so_far.get("active", np.ones(so_far[loss].shape, bool)),
                "epoch": so_far.get(
                    "epoch",
                    np.broadcast_to(
                        1 + np.arange(so_far[loss].shape[0])[:, None], so_far[loss].shape
                    ),
                ),
                "grad_norm": so_far.get("grad_norm", np.full(so_far[loss].shape, np.nan)),
            }
            raise_if_loss_grew(
                guarded, seeds, factor=divergence_factor, epochs=divergence_epochs, chance=chance
            )
            if on_chunk is not None:
                on_chunk(state, so_far)
    finally:
        bar.close()
    return state, {k: np.concatenate(v) for k, v in chunks.items()}, times


def compiled_need(compiled) -> int | None:
    """The bytes a compiled program allocates when it runs, from XLA's buffer
    assignment (``memory_analysis()``): its temporaries and outputs, less the
    inputs it updates in place; ``None`` where XLA does not say."""
    try:
        stats = compiled.memory_analysis()
    except (NotImplementedError, AttributeError):
        return None
    if stats is None:
        return None
    return int(stats.temp_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes)


def refuse_past_memory(
    need: int | None, subject: str, advice: str, *, detail: str = "", available: int | None = -1
) -> None:
    """Raises when ``need`` bytes are more than is free, saying
    ``"{subject} needs N GiB{detail} but M GiB is free; {advice}"``.

    Nothing is raised where either figure is unknown (``None``);
    ``available=-1`` asks the default device
    (:func:`sparsegcn.bench.runner.available_memory`), ``None`` skips the check.

    Raises:
      ValueError: naming the need, what is free and what to lower.
    """
    from sparsegcn.bench import runner

    if available == -1:
        available = runner.available_memory()
    if available is None or need is None or need <= available:
        return
    raise ValueError(
        f"{subject} needs {need / 2**30:.1f} GiB{detail} but {available / 2**30:.1f} GiB "
        f"is free; {advice}"
    )


def check_compiled_memory(compiled, what: str, *, available: int | None = -1) -> None:
    """Refuses a compiled program that needs more memory than is free, before it runs
    (a wide model's activations past free memory were killed by the OOM killer, exit
    137, with no message).

    Args:
      compiled: the compiled program; ``what`` names it in the message.
      available: free bytes; ``-1`` asks the default device
        (:func:`sparsegcn.bench.runner.available_memory`), ``None`` skips the check.

    Raises:
      ValueError: naming the need, what is free and what to lower.
    """
    refuse_past_memory(
        compiled_need(compiled),
        what,
        "lower --hidden, --layers, --heads, --seeds or --batch-size, or sample (--fanouts)",
        detail=" more when it runs (XLA's buffer assignment)",
        available=available,
    )


def tree_bytes(tree) -> int:
    """Bytes of the arrays (or :class:`jax.ShapeDtypeStruct` shapes) in ``tree``;
    a typed PRNG key counts its key data (two ``uint32`` for threefry)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        dtype = leaf.dtype
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            itemsize = int(np.prod(jax.random.key_data(jax.random.key(0)).shape)) * 4
        else:
            itemsize = np.dtype(dtype).itemsize
        total += int(np.prod(leaf.shape, dtype=np.int64)) * itemsize
    return total


def check_state_memory(init: Callable, *args, what: str, available: int | None = -1) -> None:
    """Refuses a training state larger than free memory before any of it is built.

    ``init(*args)`` is traced, not run (:func:`jax.eval_shape`): its arrays'
    bytes (parameters, optimizer moments, best parameters, for every seed)
    are compared with free memory. A model as wide as ``--hidden 1000000``
    on Cora (46 GB of state) was killed by the OOM killer while its state was
    built, before :func:`check_compiled_memory` could see its program.

    Args:
      init: builds the state from ``args`` (e.g. ``vmap(init_state)`` over keys).
      what: names the run in the message ("the training state of {what}").
      available: free bytes; ``-1`` asks the default device, ``None`` skips the check.

    Raises:
      ValueError: naming the state's size, what is free and what to lower.
    """
    refuse_past_memory(
        tree_bytes(jax.eval_shape(init, *args)),
        f"the training state of {what} (parameters and optimizer state)",
        "lower --hidden, --layers, --heads or --seeds",
        available=available,
    )


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

    ``fn`` is compiled for ``args``, called once to warm up, then ``repeats``
    (>= 1) more times (:func:`median_seconds`).
    """
    compiled, compile_s = compile_for(fn, *args)
    return 1e3 * median_seconds(compiled, args, repeats)[0], compile_s


def median_seconds(fn: Callable, args: tuple, repeats: int) -> tuple[float, Any]:
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

"""Hyperparameter sweeps: grids of runs that share compiled programs where shapes allow.

Values that only enter the optimizer's arithmetic (the learning rate and the
weight decay, injected into the optimizer state by
:func:`~sparsegcn.train.make_optimizer`) are *data*: every grid point that
differs only in them trains in one ``vmap``-ed program of ``P x K`` members
(points times seeds), compiled once. Values that change shapes or the traced
program (hidden width, layers, dropout rate, model, ...) need a program of
their own; the experiment layer (:func:`sparsegcn.experiment.run_sweep`)
groups the grid accordingly.

The pieces:

- :func:`parse_sweep`: ``["lr=0.005,0.01", "hidden=16,64"]`` -> typed axes;
- :func:`expand_grid`: axes -> the list of grid points (Cartesian product);
- :func:`set_hyperparams`: write injected hyperparameters into a state;
- :func:`fit_sweep`: train several hyperparameter points x seeds as one program;
- :func:`rank_rows` and :func:`format_table`: the ranked report.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import typing
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn._checks import check_hyperparameter, check_seeds
from sparsegcn.nn.model import Model
from sparsegcn.train.fullbatch import fit
from sparsegcn.train.guard import DivergenceError
from sparsegcn.train.loop import FitResult
from sparsegcn.train.optim import make_optimizer
from sparsegcn.train.state import (
    NodeData,
    TrainConfig,
    TrainState,
    check_node_data,
    init_state,
    seed_keys,
)

INJECTED = ("learning_rate", "weight_decay")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _convert(text: str, kind, spec: str, position: int):
    base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
    if base is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(
            f"--sweep {spec!r}: value {position} ({text!r}) is not a boolean "
            f"(use one of {_TRUE + _FALSE})"
        )
    if text.lower() == "none" and kind is not base:
        return None
    try:
        value = base(text)
    except ValueError:
        raise ValueError(
            f"--sweep {spec!r}: value {position} ({text!r}) is not a {base.__name__}"
        ) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"--sweep {spec!r}: value {position} ({text!r}) is not finite")
    return value


def parse_sweep(
    specs: Sequence[str],
    cls,
    *,
    exclude: Sequence[str] = (),
    lists: Sequence[str] = (),
) -> dict[str, list]:
    """Parses ``name=v1,v2,...`` sweep specifications against a dataclass's fields.

    Args:
      specs: e.g. ``["lr=0.005,0.01,0.02", "hidden=16,64"]``; names may use
        dashes (``weight-decay``), values are converted to the field's type
        (booleans accept ``true/false/1/0/yes/no``; optional fields ``none``).
      cls: the dataclass whose fields may be swept (e.g.
        :class:`~sparsegcn.experiment.Experiment`).
      exclude: field names that may not be swept.
      lists: fields whose one value is itself a comma-separated list
        (``fanouts=25,10``): their values are separated by ``;`` instead
        (``fanouts=25,10;15,5``).

    Returns:
      ``{field_name: [values...]}`` in the order given.

    Raises:
      ValueError: a malformed spec, an unknown or excluded name, a name given
        twice, an empty or repeated value, or a value of the wrong type.
    """
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls) if f.name not in exclude]
    axes: dict[str, list] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name or not values.strip():
            raise ValueError(f"--sweep {spec!r}: expected NAME=V1,V2,... (e.g. lr=0.005,0.01)")
        if name not in fields:
            raise ValueError(f"--sweep {spec!r}: {name!r} cannot be swept; choose from {fields}")
        if name in axes:
            raise ValueError(f"--sweep {spec!r}: {name!r} is swept twice; list all values once")
        texts = [v.strip() for v in values.split(";" if name in lists else ",")]
        for position, text in enumerate(texts, start=1):
            if not text:
                raise ValueError(f"--sweep {spec!r}: value {position} is empty")
        converted = [_convert(t, hints[name], spec, i) for i, t in enumerate(texts, start=1)]
        for position, value in enumerate(converted, start=1):
            if value in converted[: position - 1]:
                raise ValueError(f"--sweep {spec!r}: value {position} ({value!r}) is repeated")
        axes[name] = converted
    return axes


def expand_grid(axes: Mapping[str, Sequence]) -> list[dict]:
    """The Cartesian product of ``axes``, first axis slowest: ``[{name: value, ...}, ...]``."""
    names = list(axes)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*axes.values())]


def set_hyperparams(state: TrainState, **values) -> TrainState:
    """``state`` (leading ``[K]`` axis) with injected optimizer hyperparameters replaced.

    Args:
      state: a state whose optimizer comes from :func:`make_optimizer`.
      **values: ``learning_rate`` and/or ``weight_decay``: a scalar for all
        ``K`` members, or ``K`` values, one per member.

    Returns:
      The new state; nothing else changes.
    """
    hyperparams = getattr(state.opt_state, "hyperparams", None)
    if hyperparams is None:
        raise ValueError("state.opt_state has no injected hyperparameters (use make_optimizer)")
    updated = {}
    for name, value in values.items():
        if name not in hyperparams:
            raise ValueError(
                f"{name!r} is not an injected hyperparameter; choose from {sorted(hyperparams)}"
            )
        current = hyperparams[name]
        host = np.asarray(value, np.float64)
        if not np.isfinite(host).all():
            raise ValueError(f"{name} must be finite, got {value}")
        if host.ndim and host.shape != current.shape:
            raise ValueError(
                f"{name} needs a scalar or {current.shape[0]} values (one per member), "
                f"got shape {host.shape}"
            )
        updated[name] = jnp.broadcast_to(jnp.asarray(host, current.dtype), current.shape)
    return _with_hyperparams(state, updated)


def _with_hyperparams(state: TrainState, values: Mapping) -> TrainState:
    hyperparams = dict(state.opt_state.hyperparams, **values)
    return state._replace(opt_state=state.opt_state._replace(hyperparams=hyperparams))


def fit_sweep(
    model: Model,
    data: NodeData,
    config: TrainConfig,
    *,
    seeds: Sequence[int],
    points: Sequence[Mapping[str, float]],
    progress: bool = False,
) -> list[FitResult]:
    """Trains every ``(point, seed)`` pair as one compiled program.

    Each point sets injected hyperparameters (``learning_rate``,
    ``weight_decay``; unset ones keep ``config``'s value); every point trains
    the same ``seeds`` (common random numbers: points differ only in their
    hyperparameters). Member ``p * K + k`` is point ``p``, seed ``seeds[k]``,
    and equals a separate :func:`fit` of that point to float32 tolerance. The
    number of compiled programs does not grow with the number of points.

    Args:
      model: the model, shared by all points.
      data: the node data.
      config: everything but the injected values.
      seeds: the ``K`` seeds of every point.
      points: ``P`` mappings of injected hyperparameter values.
      progress: show a progress bar.

    Returns:
      ``P`` :class:`FitResult` objects, one per point. Timings (``compile_s``,
      ``wall_s``, step and epoch medians) are those of the shared program.

    Raises:
      DivergenceError: with the diverged point named in its message.
    """
    check_node_data("fit_sweep", model, data)
    if not points:
        raise ValueError("fit_sweep needs at least one point")
    defaults = {"learning_rate": config.learning_rate, "weight_decay": config.weight_decay}
    columns: dict[str, list[float]] = {name: [] for name in INJECTED}
    for position, point in enumerate(points):
        unknown = sorted(set(point) - set(INJECTED))
        if unknown:
            raise ValueError(
                f"points[{position}] sets {unknown}, which are not injected hyperparameters "
                f"{list(INJECTED)}; points differing in them need separate programs"
            )
        for name in INJECTED:
            value = point.get(name, defaults[name])
            check_hyperparameter(name, value, label=f"points[{position}][{name!r}]")
            columns[name].append(float(value))
    seeds = check_seeds("fit_sweep", seeds)
    k, p = len(seeds), len(points)
    tx = make_optimizer(config)

    def init_member(key, values):
        return _with_hyperparams(init_state(model, tx, key), values)

    values = {name: jnp.repeat(jnp.asarray(v, jnp.float32), k) for name, v in columns.items()}
    keys = jnp.tile(seed_keys(seeds), p)
    state = jax.jit(jax.vmap(init_member))(keys, values)
    try:
        result = fit(model, data, config, seeds=seeds * p, progress=progress, state=state)
    except DivergenceError as err:
        point = dict(points[err.member // k])
        raise err.with_context(f"sweep point {point}") from None
    take = jax.jit(
        lambda tree, start: jax.tree.map(lambda a: jax.lax.dynamic_slice_in_dim(a, start, k), tree)
    )
    results = []
    for i in range(p):
        active = np.asarray(result.history["active"])[:, i * k : (i + 1) * k].any(axis=1)
        history = {
            name: np.asarray(v)[active][:, i * k : (i + 1) * k]
            for name, v in result.history.items()
        }
        state_i = take(result.state, jnp.asarray(i * k, jnp.int32))
        results.append(dataclasses.replace(result, state=state_i, history=history, seeds=seeds))
    return results


def summarize_result(result: FitResult) -> dict:
    """Mean and standard deviation over seeds of the best-epoch accuracies."""
    return {
        "val_acc_mean": float(result.val_acc.mean()),
        "val_acc_std": float(result.val_acc.std()),
        "test_acc_mean": float(result.test_acc.mean()),
        "test_acc_std": float(result.test_acc.std()),
        "best_epoch_mean": float(result.best_epoch.mean()),
        "test_acc": result.test_acc.tolist(),
        "val_acc": result.val_acc.tolist(),
    }


def rank_rows(
    rows: Sequence[dict], metric: str = "acc", *, lower_is_better: bool = False
) -> list[dict]:
    """Rows sorted by the validation ``metric`` (``val_<metric>_mean``: highest, or
    lowest with ``lower_is_better``; then the lower std; NaN last), ``rank`` added.

    Ranking uses the validation metric only: choosing by test figures would
    leak the test set into model selection.
    """

    def key(i: int):
        mean = float(rows[i][f"val_{metric}_mean"])
        score = -math.inf if math.isnan(mean) else (-mean if lower_is_better else mean)
        return (-score, rows[i][f"val_{metric}_std"], i)

    order = sorted(range(len(rows)), key=key)
    return [dict(rows[i], rank=r) for r, i in enumerate(order, start=1)]


def format_table(rows: Sequence[dict], names: Sequence[str], metric: str = "acc") -> str:
    """A ranked plain-text table: rank, the swept values, the validation and test ``metric``."""
    header = ("rank", *names, f"val {metric}", f"test {metric}", "best epoch", "program")
    lines = [
        (
            str(row["rank"]),
            *(str(row[name]) for name in names),
            f"{row[f'val_{metric}_mean']:.4f} ± {row[f'val_{metric}_std']:.4f}",
            f"{row[f'test_{metric}_mean']:.4f} ± {row[f'test_{metric}_std']:.4f}",
            f"{row['best_epoch_mean']:.1f}",
            str(row["program"]),
        )
        for row in rows
    ]
    widths = [max(len(c) for c in column) for column in zip(header, *lines, strict=True)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in (header, *lines)
    )


__all__ = [
    "INJECTED",
    "expand_grid",
    "fit_sweep",
    "format_table",
    "parse_sweep",
    "rank_rows",
    "set_hyperparams",
    "summarize_result",
]

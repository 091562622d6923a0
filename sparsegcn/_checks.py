"""Host-side input validation shared by storage, features and models.

Every check runs on concrete (host or device) values before anything is
traced, and raises ``ValueError`` or ``TypeError`` naming the offending value
and its position. ``jax.ops.segment_sum`` silently drops out-of-range ids, so
these checks are the only thing standing between a bad edge list and a wrong
answer.
"""

from __future__ import annotations

import dataclasses
import operator

import jax
import numpy as np


def is_traced(*values) -> bool:
    """True when any value is a JAX tracer (we are inside jit/grad/vmap)."""
    return any(isinstance(v, jax.core.Tracer) for v in values)


def as_host(name: str, value) -> np.ndarray:
    """Returns ``value`` as a NumPy array, refusing tracers with a clear error."""
    if is_traced(value):
        raise TypeError(
            f"{name} is a traced value; this is a host-side operation. "
            "Call it once on concrete arrays, outside jit/grad/vmap."
        )
    return np.asarray(value)


def check_static_int(name: str, value, *, minimum: int = 0) -> int:
    """Returns ``value`` as a Python int, or raises if it is not a static integer."""
    if is_traced(value) or isinstance(value, bool):
        raise TypeError(f"{name} must be a static Python int, got {value!r}")
    try:
        result = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be a static Python int, got {value!r}") from None
    if result < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {result}")
    return result


def check_integer_array(name: str, array: np.ndarray, *, ndim: int) -> None:
    if array.ndim != ndim:
        raise ValueError(
            f"{name} must have {ndim} dimension(s), got {array.ndim} (shape {array.shape})"
        )
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype, got {array.dtype}")


def check_ids_in_range(name: str, ids: np.ndarray, num_nodes: int) -> None:
    """Raises naming the first id outside ``[0, num_nodes)``."""
    if ids.size == 0:
        return
    bad = (ids < 0) | (ids >= num_nodes)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name}[{pos}] = {int(ids[pos])} is out of range: node ids must lie in "
            f"[0, {num_nodes}) for num_nodes={num_nodes} ({int(bad.sum())} bad id(s) in all)"
        )


def check_finite(name: str, values: np.ndarray) -> None:
    """Raises naming the first non-finite entry of ``values``."""
    if values.size == 0 or not np.issubdtype(values.dtype, np.floating):
        return
    finite = np.isfinite(values)
    if not finite.all():
        pos = np.unravel_index(int(np.flatnonzero(~finite.ravel())[0]), values.shape)
        where = ", ".join(str(int(i)) for i in pos)
        raise ValueError(f"{name}[{where}] = {values[pos]} is not finite")


def check_num_rows(name: str, shape: tuple, num_nodes: int, size: str = "num_nodes") -> None:
    """Raises unless an array of ``shape`` has one row per node; ``size`` is how the
    message names the count (``"num_src"`` for a bipartite view's sources)."""
    if len(shape) == 0:
        raise ValueError(f"{name} must have at least 1 dimension (one row per node), got a scalar")
    if shape[0] != num_nodes:
        raise ValueError(
            f"{name} has {shape[0]} rows but the graph has {size}={num_nodes}; "
            f"{name}.shape = {tuple(shape)}"
        )


# -- hyperparameters ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Bound:
    """The allowed values of one hyperparameter.

    Attributes:
      kind: ``int`` (a Python or NumPy integer, not ``bool``) or ``float``
        (any real number, not ``bool``, finite and representable in
        :data:`COMPUTE_DTYPE`: neither overflowing it nor, unless 0,
        rounding to 0 in it).
      low, high: inclusive bounds, ``None`` for none.
      low_open, high_open: make the bound exclusive.
      int32: compiled code holds the value as an int32 (an epoch count
        and its counters): at most :data:`INT32_MAX`, a limit of the
        implementation that a message names only when it is exceeded.
      host: the value never reaches compiled code (``scale`` multiplies
        a generated dataset's sizes in Python), so a float one is not held
        to :data:`COMPUTE_DTYPE`: a scale too small for any node is
        refused by the dataset, naming what it would lack.
    """

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    int32: bool = False
    host: bool = False

    def describe(self) -> str:
        """The bounds in words, e.g. ``">= 0 and < 1"``."""
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {self.high}")
        return " and ".join(parts)


#: The dtype training computes in: a float setting must survive conversion to it.
COMPUTE_DTYPE = np.float32

#: The largest value of a setting compiled code holds as an int32
#: (:attr:`Bound.int32`): epochs and the counters compared with them.
INT32_MAX = 2**31 - 1

#: One table for every entry point: Experiment (the CLI), TrainConfig, the
#: mini-batch settings and the model builders all check through it, so a value
#: refused by one is refused by all, with the same words.
HYPERPARAMETERS: dict[str, Bound] = {
    "in_features": Bound(int, low=1),
    "num_classes": Bound(int, low=1),
    "hidden": Bound(int, low=1),
    "layers": Bound(int, low=1),
    "heads": Bound(int, low=1),
    "hops": Bound(int, low=1),
    "alpha": Bound(float, low=0.0, high=1.0),
    "lam": Bound(float, low=0.0, low_open=True),
    "dropout": Bound(float, low=0.0, high=1.0, high_open=True),
    "learning_rate": Bound(float, low=0.0, low_open=True),
    "weight_decay": Bound(float, low=0.0),
    "epochs": Bound(int, low=1, int32=True),
    "patience": Bound(int, low=1, int32=True),
    "epochs_per_call": Bound(int, low=1, int32=True),
    "clip_norm": Bound(float, low=0.0, low_open=True),
    "batch_size": Bound(int, low=1),
    "seeds": Bound(int, low=1),
    "seed": Bound(int, low=0, high=2**32 - 1),
    "scale": Bound(float, low=0.0, high=1.0, low_open=True, host=True),
    "checkpoint_every": Bound(int, low=0, int32=True),
    "keep": Bound(int, low=0),
    "timing_steps": Bound(int, low=0),
    "divergence_factor": Bound(float, low=1.0, low_open=True),
    "divergence_epochs": Bound(int, low=1, int32=True),
}


def check_hyperparameter(
    name: str, value, *, label: str | None = None, flag: str | None = None, off=()
):
    """Returns ``value`` if :data:`HYPERPARAMETERS` allows it for ``name``, else raises.

    Args:
      name: a key of :data:`HYPERPARAMETERS`.
      value: the value to check (a tracer is refused: settings are static).
      label: how the message names the setting (default ``name``).
      flag: the command-line option, added to the message, e.g. ``"--lr"``.
      off: values that switch the setting off and are accepted as they are
        (``None`` for an optional field, ``0`` for a CLI option whose 0
        means "off").

    Returns:
      ``value`` unchanged.

    Raises:
      TypeError: ``value`` is not a number of the right kind (a ``bool``, a
        string, a float for an integer setting, a traced value).
      ValueError: ``value`` is NaN, infinite or out of bounds; the message
        names the setting, the value and the allowed range, e.g.
        ``"dropout must be >= 0.0 and < 1.0, got 1.5"``.
    """
    return check_bound(label or name, value, HYPERPARAMETERS[name], flag=flag, off=off)


def check_bound(label: str, value, bound: Bound, *, flag: str | None = None, off=()):
    """Returns ``value`` if ``bound`` allows it, else raises naming ``label``
    (see :func:`check_hyperparameter`, which checks against the shared table)."""
    if any(value is o or (o is not None and _equal(value, o)) for o in off):
        return value
    bounds = bound.describe()
    if off:
        bounds += f" (or {' or '.join(map(repr, off))} for off)"
    where = f" ({flag})" if flag else ""
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    is_real = is_int or (
        isinstance(value, (float, np.floating)) and not isinstance(value, (bool, np.bool_))
    )
    if is_traced(value) or not (is_int if bound.kind is int else is_real):
        kind = "an integer" if bound.kind is int else "a number"
        raise TypeError(
            f"{label} must be {kind} {bounds}, got {value!r} ({type(value).__name__}){where}"
        )
    number = float(value)
    if not np.isfinite(number):
        raise ValueError(f"{label} must be a finite number {bounds}, got {value!r}{where}")
    if bound.kind is float and not bound.host:
        _check_representable(label, number, value, where)
    too_low = bound.low is not None and (
        number <= bound.low if bound.low_open else number < bound.low
    )
    too_high = bound.high is not None and (
        number >= bound.high if bound.high_open else number > bound.high
    )
    if too_low or too_high:
        raise ValueError(f"{label} must be {bounds}, got {value!r}{where}")
    if bound.int32 and number > INT32_MAX:
        raise ValueError(
            f"{label} must be <= {INT32_MAX} (compiled code counts it in int32), "
            f"got {value!r}{where}"
        )
    return value


def _check_representable(label: str, number: float, value, where: str) -> None:
    """Refuses a float that overflows :data:`COMPUTE_DTYPE` or rounds to 0 in it."""
    info = np.finfo(COMPUTE_DTYPE)
    with np.errstate(over="ignore", under="ignore"):
        converted = COMPUTE_DTYPE(number)
    if not np.isfinite(converted) or (number != 0 and converted == 0):
        name = np.dtype(COMPUTE_DTYPE).name
        raise ValueError(
            f"{label} = {value!r} is not representable in {name}, the dtype training computes "
            f"in (its magnitude must lie in [{info.smallest_subnormal:.3g}, {info.max:.3g}] "
            f"or be 0){where}"
        )


def _equal(value, other) -> bool:
    try:
        return not isinstance(value, (bool, np.bool_)) and bool(value == other)
    except (TypeError, ValueError):
        return False


def check_hyperparameters(
    values: dict, *, labels: dict | None = None, flags: dict | None = None, off: dict | None = None
) -> None:
    """:func:`check_hyperparameter` for every ``{name: value}``, in order.

    Model builders call this with their own settings, e.g.
    ``check_hyperparameters({"hidden": hidden, "layers": layers, "dropout": rate})``.

    Args:
      values: ``{name: value}``, names from :data:`HYPERPARAMETERS`.
      labels, flags: optional message labels and command-line options per name.
      off: optional ``{name: tuple of "off" values}``.
    """
    labels, flags, off = labels or {}, flags or {}, off or {}
    for name, value in values.items():
        check_hyperparameter(
            name, value, label=labels.get(name), flag=flags.get(name), off=off.get(name, ())
        )


def check_seeds(caller: str, seeds) -> tuple[int, ...]:
    """Returns ``seeds`` as a tuple of Python ints, or raises naming the bad one.

    Each seed must be an integer in ``[0, 2**32)``, the range of
    ``jax.random.key`` without 64-bit mode (beyond it ``key(2**32)`` equals
    ``key(0)``, and ``key(-1)`` equals ``key(2**32 - 1)``). Strings, floats and
    bools are refused rather than coerced (``int("01")`` and ``int(1.5)`` would
    train a seed the caller did not name).

    Args:
      caller: the trainer's name, for the message (``"fit"``).
      seeds: a sequence of integers, e.g. ``(0, 1, 2)``.

    Raises:
      TypeError: ``seeds`` is not a sequence (a bare int, a string), or a
        seed is not an integer.
      ValueError: no seeds, or a seed outside ``[0, 2**32)``.
    """
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(
            f"{caller}: seeds must be a sequence of integers, e.g. (0, 1, 2), got {seeds!r} "
            f"({type(seeds).__name__})"
        )
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError(f"{caller} needs at least one seed, got seeds={seeds!r}")
    for position, seed in enumerate(seeds):
        check_hyperparameter("seed", seed, label=f"{caller}: seeds[{position}]")
    return tuple(int(s) for s in seeds)


def check_config(caller: str, value, cls: type, *, name: str = "config", optional: bool = True):
    """Returns ``value`` if it is a ``cls`` (``cls()`` for ``None`` when ``optional``),
    else raises.

    A trainer reads its settings as attributes, so a dict (or another
    trainer's config) would fail deep inside with an ``AttributeError``, or
    run with settings the caller did not give.

    Raises:
      TypeError: naming ``value``'s type and, for a mapping, how to build a ``cls``.
    """
    if value is None and optional:
        return cls()
    if isinstance(value, cls):
        return value
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    hint = f"; build one with {cls.__name__}(**{name})" if isinstance(value, dict) else ""
    raise TypeError(
        f"{caller}: {name} must be a {cls.__name__}, got {type(value).__name__} {text}{hint}"
    )


def check_flag(name: str, value) -> bool:
    """Returns ``value`` as a Python bool if it is one (or a NumPy bool), else raises.

    A string or a number would be truthy: ``self_loops="no"`` would add self
    loops, ``residual=0.0`` would pass only by accident.

    Raises:
      TypeError: naming ``name`` and the value.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def check_real_values(name: str, values: np.ndarray) -> None:
    """Raises unless ``values`` are finite real numbers that fit :data:`COMPUTE_DTYPE`.

    Refuses complex, bool, string and object dtypes (a cast to float32 would drop an
    imaginary part, or fail deep inside), NaN and infinities (naming the first), and
    values past float32's range (``1e300`` is finite in float64 and ``inf`` after the
    cast training makes).
    """
    dtype = values.dtype
    if dtype == np.bool_ or not (
        np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)
    ):
        raise ValueError(f"{name} must be real numbers, got dtype {dtype}")
    check_finite(name, values)
    if values.size == 0 or not np.issubdtype(dtype, np.floating):
        return
    if np.finfo(dtype).max <= np.finfo(COMPUTE_DTYPE).max:
        return
    limit = np.finfo(COMPUTE_DTYPE).max
    past = np.abs(values) > limit
    if past.any():
        pos = np.unravel_index(int(np.flatnonzero(past.ravel())[0]), values.shape)
        where = ", ".join(str(int(i)) for i in pos)
        raise ValueError(
            f"{name}[{where}] = {values[pos]} is past the range of "
            f"{np.dtype(COMPUTE_DTYPE).name} (|x| <= {limit:.4g}), the dtype training computes in"
        )


def check_key(name: str, key):
    """Returns ``key`` if it is one JAX PRNG key, else raises naming ``name``.

    Accepted: a typed key (``jax.random.key(seed)``, shape ``()``) or a
    legacy raw key (``jax.random.PRNGKey(seed)``: ``uint32[2]`` for the
    default threefry implementation; the configured implementation's shape).
    A traced key (inside ``jit``, ``grad`` or ``vmap``) is checked by its
    shape and dtype, which are static; its value is never read.

    Raises:
      TypeError: ``key`` is not an array (an int seed, ``None``), or its
        dtype is neither a key's nor uint32 (float or int32 data).
      ValueError: a batch of typed keys, or uint32 data of another shape
        than a raw key's.
    """
    expected = "jax.random.key(seed), or a legacy jax.random.PRNGKey(seed)"
    dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
    if dtype is None or shape is None:
        raise TypeError(
            f"{name} must be a PRNG key ({expected}), got {key!r} ({type(key).__name__})"
        )
    shape = tuple(shape)
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        if shape == ():
            return key
        raise ValueError(
            f"{name} must be a PRNG key ({expected}), got a batch of "
            f"{int(np.prod(shape))} keys (shape {shape}); pass one key"
        )
    text = f"{np.dtype(dtype).name}{list(shape)}"
    if np.dtype(dtype) != np.uint32:
        raise TypeError(f"{name} must be a PRNG key ({expected}), got an array of {text}")
    raw = tuple(jax.eval_shape(jax.random.PRNGKey, 0).shape)
    if shape != raw:
        raise ValueError(
            f"{name} must be a PRNG key ({expected}), got an array of {text}; a raw key is "
            f"uint32{list(raw)}"
        )
    return key

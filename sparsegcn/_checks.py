"""Host-side input validation shared by storage, features and models.

Every check runs on concrete (host or device) values before anything is
traced, and raises ``ValueError`` or ``TypeError`` naming the offending value
and its position. ``jax.ops.segment_sum`` silently drops out-of-range ids, so
these checks are the only thing standing between a bad edge list and a wrong
answer.
"""

from __future__ import annotations

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


def check_num_rows(name: str, shape: tuple, num_nodes: int) -> None:
    """Raises unless an array of ``shape`` has one row per node."""
    if len(shape) == 0:
        raise ValueError(f"{name} must have at least 1 dimension (one row per node), got a scalar")
    if shape[0] != num_nodes:
        raise ValueError(
            f"{name} has {shape[0]} rows but the graph has num_nodes={num_nodes}; "
            f"{name}.shape = {tuple(shape)}"
        )

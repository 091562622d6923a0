"""Timing compiled JAX functions: compile apart, warm up, ``block_until_ready``, medians."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class Timing:
    """What one measurement found.

    Attributes:
      times_s: wall time of each timed call, in seconds, after warm-up.
      compile_s: seconds spent lowering and compiling (never in ``times_s``).
      peak_bytes: XLA's static estimate of the program's peak memory:
        arguments, outputs and temporaries (``compiled.memory_analysis()``).
    """

    times_s: tuple[float, ...]
    compile_s: float
    peak_bytes: int

    @property
    def median_s(self) -> float:
        return float(np.median(self.times_s))

    @property
    def min_s(self) -> float:
        return float(np.min(self.times_s))


def peak_bytes(compiled) -> int:
    """Peak device memory of a compiled program, from XLA's buffer assignment."""
    stats = compiled.memory_analysis()
    if stats is None:
        return 0
    total = (
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        + stats.temp_size_in_bytes
        - stats.alias_size_in_bytes
    )
    return int(max(total, getattr(stats, "peak_memory_in_bytes", 0)))


def measure(
    fn: Callable,
    args: tuple,
    *,
    repeats: int = 5,
    warmup: int = 1,
    max_seconds: float | None = None,
) -> Timing:
    """Compiles ``jax.jit(fn)`` for ``args`` and times it.

    Args:
      fn: a function of ``args`` returning arrays.
      args: its arguments (pytrees of arrays; already on the device).
      repeats: timed calls (the median is robust to a noisy neighbour).
      warmup: untimed calls first (caches, allocator).
      max_seconds: stop timing early once this much time has been spent
        (at least one timed call is always made).

    Returns:
      A :class:`Timing`.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - start
    for _ in range(warmup):
        jax.block_until_ready(compiled(*args))
    times = []
    budget_start = time.perf_counter()
    for _ in range(repeats):
        tick = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - tick)
        if max_seconds is not None and time.perf_counter() - budget_start > max_seconds:
            break
    return Timing(tuple(times), compile_s, peak_bytes(compiled))


def stream_kernel(x: jax.Array, *, donate: bool = True):
    """The compiled ``y = x + 1`` the streaming bound is timed on.

    With ``donate`` (the default) ``x``'s buffer is donated and XLA writes
    ``y`` into it (``compiled.memory_analysis().alias_size_in_bytes`` is
    ``x.nbytes``), so a timed call allocates nothing: it reads and writes
    memory already mapped. Without it every call writes a fresh buffer, and
    on CPU the time includes faulting in its new pages.
    """
    fn = jax.jit(lambda x: x + 1.0, donate_argnums=0 if donate else ())
    return fn.lower(x).compile()


def stream_bandwidth(nbytes: int | None = None, repeats: int = 5, *, fresh: bool = False) -> float:
    """Effective memory bandwidth of the default device, in GB/s.

    Times a compiled ``y = x + 1`` over ``nbytes`` of float32 (read once,
    written once: ``2 * nbytes`` moved; median of ``repeats`` calls after two
    warm-up calls, each waited on with ``block_until_ready``), the streaming
    bound that a memory-bound product such as ``Â x`` is compared against.
    Defaults to 256 MiB on CPU and 2 GiB on an accelerator, well past the
    caches.

    By default the input is donated (:func:`stream_kernel`): each call
    writes into the buffer it read, nothing is allocated in the timed
    region, and the figure is the no-allocation bound. ``fresh=True`` times
    the same sum into a new output buffer per call; on CPU that measures
    mostly the cost of faulting in fresh pages, several times slower than
    the no-allocation bound, and is reported beside it, not as the bound.
    """
    import jax.numpy as jnp

    if nbytes is None:
        nbytes = 2**28 if jax.default_backend() == "cpu" else 2**31
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    x = jnp.zeros((nbytes // 4,), jnp.float32)
    if fresh:
        timing = measure(lambda x: x + 1.0, (x,), repeats=repeats, warmup=2)
        del x
        return 2 * nbytes / timing.median_s / 1e9
    compiled = stream_kernel(x)
    for _ in range(2):  # warm-up; each call consumes its input and returns the next one
        x = jax.block_until_ready(compiled(x))
    times = []
    for _ in range(repeats):
        tick = time.perf_counter()
        x = jax.block_until_ready(compiled(x))
        times.append(time.perf_counter() - tick)
    del x
    return 2 * nbytes / float(np.median(times)) / 1e9

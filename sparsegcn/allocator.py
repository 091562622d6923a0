"""Host memory: keep freed memory in the process instead of returning it to the kernel.

On CPU, XLA allocates every large buffer of a compiled call (``[N, F]``
activations, gathered messages) with ``malloc``, and frees it when the call
returns. glibc serves allocations above its mmap threshold (at most 32 MiB)
with fresh ``mmap`` s and hands them back with ``munmap`` on free. The next
call then faults every page in again, and the kernel zeroes each one, a
cost proportional to the bytes allocated per call; keeping the memory makes
large propagations markedly faster on CPU (figures, and the command that
measures them, on the documentation's performance page).

:func:`keep_freed_memory` tells glibc to serve every allocation from its
heap (``M_MMAP_MAX = 0``), never to trim the heap (``M_TRIM_THRESHOLD`` of
``(size_t) -1``: the largest ``int`` would still hand back a free top over
2 GiB, as a large step's temporaries leave it), and to keep one arena for every thread (``M_ARENA_MAX = 1``),
so freed buffers are reused by the next call. The last matters because XLA
allocates from its worker threads: a thread's own arena grows by ``mmap``
ed heaps of at most 64 MiB, serves a larger buffer with its own ``mmap``
whatever ``M_MMAP_MAX`` says, and returns it on free, so without it every
large buffer allocated off the main thread is faulted in again on every
call. A thread that has allocated before the call keeps its arena: call it
before the first computation. The price: the process keeps its peak
resident memory until it exits. The
``sparsegcn`` command applies it at start-up unless the environment sets
``SPARSEGCN_KEEP_FREED_MEMORY=0``; the library never applies it on import.
Setting ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` before Python starts
(transparent huge pages for large allocations) has a similar effect.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

from sparsegcn._env import env_switch

ENV = "SPARSEGCN_KEEP_FREED_MEMORY"
"""Set to ``0`` to keep the ``sparsegcn`` command from calling :func:`keep_freed_memory`."""

# What keep_freed_memory sets: (mallopt option from glibc's <malloc.h>, the
# same setting's glibc tunable, value). glibc stores the trim threshold as a
# size_t, so -1 is its largest value (the tunable spells it unsigned).
_SETTINGS = (
    (-4, "mmap_max", 0),  # M_MMAP_MAX
    (-1, "trim_threshold", -1),  # M_TRIM_THRESHOLD
    (-8, "arena_max", 1),  # M_ARENA_MAX
)
_applied = False  # what this process's malloc was told; reported by benchmarks


GLIBC_TUNABLES = ":".join(f"glibc.malloc.{name}={value % 2**64}" for _, name, value in _SETTINGS)
"""What :func:`keep_freed_memory` sets, as ``$GLIBC_TUNABLES`` for a process
about to start (glibc reads it once, at start-up). Benchmarks give it to the
peers they run in processes of their own, so both sides allocate alike."""


def keeps_freed_memory() -> bool:
    """Whether :func:`keep_freed_memory` has been applied in this process."""
    return _applied


def keep_freed_memory() -> bool:
    """Makes glibc's malloc keep freed memory for reuse (see the module docstring).

    Affects the whole process from the next allocation on, and the threads
    that have not allocated yet (see the module docstring). Safe to call more
    than once.

    Returns:
      ``True`` if applied; ``False`` where the C library is not glibc (macOS,
      musl), which is then left as it is.
    """
    global _applied
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    ok = all(bool(libc.mallopt(option, value)) for option, _, value in _SETTINGS)
    _applied = _applied or ok
    return ok


def keep_freed_memory_unless_disabled() -> bool:
    """:func:`keep_freed_memory`, unless ``$SPARSEGCN_KEEP_FREED_MEMORY`` is off
    (``0``, ``false``, ``no``, ``off`` or empty).

    Raises:
      ValueError: the variable is set to a value that is no switch
        (``sparsegcn._env.parse_switch``).
    """
    if not env_switch(ENV, True):
        return False
    return keep_freed_memory()

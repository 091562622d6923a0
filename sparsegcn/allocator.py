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
heap (``M_MMAP_MAX = 0``) and never to trim the heap (``M_TRIM_THRESHOLD``
at its maximum), so freed buffers are reused by the next call. The price:
the process keeps its peak resident memory until it exits. The
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

# From glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1
_applied = False  # what this process's malloc was told; reported by benchmarks


def keeps_freed_memory() -> bool:
    """Whether :func:`keep_freed_memory` has been applied in this process."""
    return _applied


def keep_freed_memory() -> bool:
    """Makes glibc's malloc keep freed memory for reuse (see the module docstring).

    Affects the whole process from the next allocation on. Safe to call more
    than once.

    Returns:
      ``True`` if applied; ``False`` where the C library is not glibc (macOS,
      musl), which is then left as it is.
    """
    global _applied
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    ok = bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _INT_MAX))
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

"""Ctrl-C and SIGTERM in the ``sparsegcn`` command: recorded, so that none is lost.

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main
thread happens to be. Where that is a garbage-collector callback (JAX
registers one, ``jax._src.lib._xla_gc_callback``, that runs on every
collection), the interpreter prints ``Exception ignored in: ...
KeyboardInterrupt`` and carries on: the Ctrl-C is lost, and a run goes on
to delete what ``--overwrite`` replaces and exits 0.

The handler :func:`install` sets records the signal in this module before
it raises, so a swallowed interrupt is still known: :func:`check` raises it
again, and the commands call it before each step that deletes or replaces
files, and before reporting success. SIGTERM is handled alike, raising
:class:`Terminated` (a ``KeyboardInterrupt``), so a ``kill`` unwinds through
the same ``finally`` blocks as a Ctrl-C (temporary files removed, locks
released) instead of ending the process where it stands.

Only the command line installs the handler (:func:`sparsegcn.cli.console_main`,
:func:`sparsegcn.cli.main`, :func:`sparsegcn.cli.run_tool`); importing
``sparsegcn`` leaves a program's signals alone, and :func:`check` never
raises in a process that has not installed it. The ``sparsegcn`` console
script installs it before ``sparsegcn`` (and JAX) is imported
(:mod:`sparsegcn_console` loads this module, which imports nothing but the
standard library, from its file), and a signal recorded then stops the
command before it starts. ``python -m sparsegcn`` and the dataset tools'
``python -m`` entry points import the package first, so a Ctrl-C in their
first second or so still meets Python's own handler.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals :func:`install` handles."""

_received: int | None = None  # the first signal handled since install()
_previous: dict[int, Any] = {}  # the handlers install() replaced, by signal
_previous_hook: Any = None  # the sys.unraisablehook install() wrapped


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's ``KeyboardInterrupt`` would be."""


def _raised(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _handle(signum: int, frame) -> None:
    """Records ``signum`` and raises it: the record survives a caller that swallows it."""
    global _received
    if _received is None:
        _received = signum
    raise _raised(signum)


def _unraisable(unraisable) -> None:
    """``sys.unraisablehook`` while installed: a recorded signal's exception, swallowed
    where it was raised, is not printed ("Exception ignored in: ..."); :func:`check`
    raises it again, and the command reports it in one line."""
    if _received is not None and isinstance(unraisable.exc_value, KeyboardInterrupt):
        return
    (_previous_hook or sys.__unraisablehook__)(unraisable)


def install() -> tuple[int, ...]:
    """Handles SIGINT and SIGTERM in this process from now on (see the module docstring).

    A signal that is ignored (``nohup``, a background job of a non-interactive
    shell) stays ignored, one already handled here is left as it is, and
    nothing changes outside the main thread (where Python runs handlers).
    ``sys.unraisablehook`` is wrapped so that the interrupt a callback
    swallowed is not printed: the command reports it, once.

    Returns:
      The signals this call began handling, for :func:`restore`.
    """
    global _previous_hook
    if threading.current_thread() is not threading.main_thread():
        return ()
    added = []
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if signum in _previous or current is signal.SIG_IGN:
            continue
        signal.signal(signum, _handle)
        _previous[signum] = current
        added.append(signum)
    if added and sys.unraisablehook is not _unraisable:
        _previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    return tuple(added)


def restore(signals: tuple[int, ...]) -> None:
    """Gives ``signals`` (:func:`install`'s result) their former handlers back and,
    when none is handled here any more, ``sys.unraisablehook`` too, and forgets
    the signal received."""
    global _received, _previous_hook
    for signum in signals:
        previous = _previous.pop(signum)
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    if not _previous:
        _received = None
        if sys.unraisablehook is _unraisable:
            sys.unraisablehook = _previous_hook or sys.__unraisablehook__
        _previous_hook = None


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """:func:`install` for the duration of the block, then :func:`restore`."""
    added = install()
    try:
        yield
    finally:
        restore(added)


def received() -> int | None:
    """The signal handled since :func:`install` (the first, if several), or ``None``."""
    return _received


def check() -> None:
    """Raises the signal received (:func:`received`) again, if there is one.

    Call it before a step that deletes or replaces files, and before a
    command reports success: a Ctrl-C whose ``KeyboardInterrupt`` was
    swallowed (see the module docstring) then still stops the run there.

    Raises:
      KeyboardInterrupt: after a SIGINT; :class:`Terminated` (a
        ``KeyboardInterrupt``) after a SIGTERM.
    """
    if _received is not None:
        raise _raised(_received)


def exit_status(signum: int) -> int:
    """A process's exit status after signal ``signum``: ``128 + signum`` (130, 143)."""
    return 128 + signum


def describe(signum: int | None) -> str:
    """The one word a command prints for ``signum``: ``terminated`` or ``interrupted``."""
    return "terminated" if signum == signal.SIGTERM else "interrupted"


def leave(status: int) -> None:
    """Ends the process now with ``status``, after an interrupt has been reported.

    Runs the collector once (finalizers of objects in reference cycles: a
    checkpoint folder's lock), flushes ``stdout`` and ``stderr``, and leaves
    with ``os._exit``, skipping the interpreter's teardown: torn down while
    JAX's threads still run a computation the interrupt abandoned, it has
    crashed (exit 139). What the teardown would have done is done already or
    not needed: ``finally`` blocks ran while the interrupt unwound, every file
    is written atomically (a temporary file renamed into place), and the
    kernel releases ``flock`` locks and descriptors with the process.
    """
    with contextlib.suppress(BaseException):
        gc.collect()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            if stream is not None:
                stream.flush()
    os._exit(status)


def _leave_now(signum: int, frame) -> None:
    leave(exit_status(signum))


def leave_on_signal() -> None:
    """From now on, a signal :func:`install` handled ends the process at once
    (:func:`leave`, ``128 + signum``) instead of raising: for a command whose
    work is done and reported, so that a Ctrl-C during the interpreter's
    teardown neither prints a traceback nor waits for it."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _previous:
        signal.signal(signum, _leave_now)


__all__ = [
    "SIGNALS",
    "Terminated",
    "check",
    "describe",
    "exit_status",
    "install",
    "installed",
    "leave",
    "leave_on_signal",
    "received",
    "restore",
]

"""Ctrl-C, SIGTERM and SIGHUP in the ``sparsegcn`` command: recorded, so that none is lost.

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
released) instead of ending the process where it stands; so is SIGHUP (a
closed terminal), with ``hangup`` and status 129.

Only the command line installs the handler (:func:`sparsegcn.cli.console_main`,
:func:`sparsegcn.cli.main`, :func:`sparsegcn.cli.run_tool`); importing
``sparsegcn`` leaves a program's signals alone, and :func:`check` never
raises in a process that has not installed it. The ``sparsegcn`` console
script installs it before ``sparsegcn`` (and JAX) is imported
(:mod:`sparsegcn_console` loads this module, which imports nothing but the
standard library, from its file); ``python -m sparsegcn`` and the dataset
tools' ``python -m sparsegcn.datasets...`` have the package install it as
its first step (:func:`install_if_program`: only when the program run is one
of :data:`PROGRAMS`). During that start-up a signal is recorded and not
raised (raised in a C extension's initialisation, it would come out as an
``ImportError``); when the command starts (:func:`end_start_up`, or the
command's own :func:`install`), one that came ends it with one line.
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

SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""The signals :func:`install` handles: Ctrl-C, ``kill``, and the hangup of a closed
terminal or a dropped ssh connection (POSIX only). A hangup left unhandled ended the
process where it stood, with no ``finally`` block run: temporary folders of
hundreds of MB stayed behind."""

_received: int | None = None  # the first signal handled since install()
_deferred = False  # start-up: record a signal, raise nothing (install(defer=True))
_previous: dict[int, Any] = {}  # the handlers install() replaced, by signal
_previous_hook: Any = None  # the sys.unraisablehook install() wrapped


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C's ``KeyboardInterrupt`` would be."""


def _raised(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def _handle(signum: int, frame) -> None:
    """Records ``signum`` and raises it: the record survives a caller that swallows it.
    While deferred (start-up), only records it."""
    global _received
    if _received is None:
        _received = signum
    if not _deferred:
        raise _raised(signum)


def _unraisable(unraisable) -> None:
    """``sys.unraisablehook`` while installed: a recorded signal's exception, swallowed
    where it was raised, is not printed ("Exception ignored in: ..."); :func:`check`
    raises it again, and the command reports it in one line."""
    if _received is not None and isinstance(unraisable.exc_value, KeyboardInterrupt):
        return
    (_previous_hook or sys.__unraisablehook__)(unraisable)


def install(*, defer: bool = False) -> tuple[int, ...]:
    """Handles :data:`SIGNALS` in this process from now on (see the module docstring).

    With ``defer`` (start-up, while the package and JAX are imported), a
    signal is only recorded, not raised: a ``KeyboardInterrupt`` raised in a
    C extension's initialisation would come out as an ``ImportError``
    traceback; :func:`end_start_up` then acts on it. Without, a later call
    ends the deferral too.

    A signal that is ignored (``nohup``, a background job of a non-interactive
    shell) stays ignored, one already handled here is left as it is, and
    nothing changes outside the main thread (where Python runs handlers).
    ``sys.unraisablehook`` is wrapped so that the interrupt a callback
    swallowed is not printed: the command reports it, once.

    Returns:
      The signals this call began handling, for :func:`restore`.
    """
    global _previous_hook, _deferred
    if threading.current_thread() is not threading.main_thread():
        return ()
    _deferred = defer
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
    global _received, _previous_hook, _deferred
    for signum in signals:
        previous = _previous.pop(signum)
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    if not _previous:
        _received = None
        _deferred = False
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
        ``KeyboardInterrupt``) after a SIGTERM or SIGHUP.
    """
    if _received is not None:
        raise _raised(_received)


def exit_status(signum: int) -> int:
    """A process's exit status after signal ``signum``: ``128 + signum`` (130, 143, 129)."""
    return 128 + signum


def describe(signum: int | None) -> str:
    """The one word a command prints for ``signum``: ``terminated``, ``hangup`` or
    ``interrupted``."""
    if signum == signal.SIGTERM:
        return "terminated"
    if signum is not None and signum == getattr(signal, "SIGHUP", None):
        return "hangup"
    return "interrupted"


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


def program() -> str | None:
    """The module ``python -m`` runs as this process's program (``sparsegcn``,
    ``sparsegcn.datasets.convert``, ...; read from ``sys.orig_argv``), or ``None``
    (a script, ``-c``, the interactive interpreter)."""
    argv = list(getattr(sys, "orig_argv", ()))[1:]
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("-m"):
            return arg[2:]
        if arg == "-c" or arg == "-" or not arg.startswith("-"):
            return None
        i += 2 if arg in ("-X", "-W") else 1
    return None


PROGRAMS = (
    "sparsegcn",
    "sparsegcn.__main__",
    "sparsegcn.datasets.convert",
    "sparsegcn.datasets.synthetic_disk",
    "sparsegcn.datasets.to_disk",
)
"""The modules ``python -m`` runs as commands. Each starts through
:func:`sparsegcn.cli.console_main` or :func:`sparsegcn.cli.run_tool`, whose
:func:`install` ends the deferral of :func:`install_if_program` (a test checks
that no other module of the package is a ``__main__``)."""


def install_if_program() -> str | None:
    """:func:`install` with ``defer``, when this process's program is one of
    :data:`PROGRAMS` run by ``python -m`` (:func:`program`): the package calls it
    first thing, so that a Ctrl-C while it imports JAX, or before the command
    starts, is recorded; the command's own :func:`install` ends the deferral and
    its first :func:`check` acts on it. Returns the module's name, or ``None`` (a
    program of its own: its signals are left alone)."""
    module = program()
    if module not in PROGRAMS:
        return None
    install(defer=True)
    return module


def end_start_up(prog: str) -> None:
    """Ends :func:`install`'s deferral: signals raise from now on. One received during
    start-up ends the process here, with one line ``<prog>: interrupted`` (or
    ``terminated``) and ``128 + signum``: nothing has run yet."""
    global _deferred
    _deferred = False
    if _received is not None:
        print(f"{prog}: {describe(_received)}", file=sys.stderr)
        leave(exit_status(_received))


_late_prog: str | None = None  # leave_on_signal's prog: who says a late signal ended it


def late_message(prog: str, signum: int) -> str:
    """The line a command prints for a signal that came once its work was done
    (its outputs written, its result printed): ``<prog>: interrupted after its
    work was done``."""
    return f"{prog}: {describe(signum)} after its work was done"


def _leave_now(signum: int, frame) -> None:
    if _late_prog is not None:
        with contextlib.suppress(BaseException):
            print(late_message(_late_prog, signum), file=sys.stderr)
    leave(exit_status(signum))


def leave_on_signal(prog: str | None = None) -> None:
    """From now on, a signal :func:`install` handled ends the process at once
    (:func:`leave`, ``128 + signum``) instead of raising: for a command whose
    work is done and reported, so that a Ctrl-C during the interpreter's
    teardown neither prints a traceback nor waits for it. ``prog``: the
    command, which then prints :func:`late_message` first (``None``: nothing,
    for a command that has reported its signal already)."""
    global _late_prog
    if threading.current_thread() is not threading.main_thread():
        return
    _late_prog = prog
    for signum in _previous:
        signal.signal(signum, _leave_now)


__all__ = [
    "PROGRAMS",
    "SIGNALS",
    "Terminated",
    "check",
    "describe",
    "end_start_up",
    "exit_status",
    "install",
    "install_if_program",
    "installed",
    "late_message",
    "leave",
    "leave_on_signal",
    "program",
    "received",
    "restore",
]

"""The ``sparsegcn`` command: a thin layer over the library.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers its options and sets ``func`` to a ``run(args) -> int``.

Every failure ends as one line on stderr, ``sparsegcn <command>: error:
<message>``, and an exit status (:func:`exit_status`): 2 when the input is
at fault (a bad option, file, dataset or checkpoint, a diverged run), 1
when the environment is (the network, a full disk, memory, a JAX platform
that cannot start, an unexpected error). ``--debug`` (or
``SPARSEGCN_DEBUG=1``) shows the traceback instead.

Before a subcommand runs, the environment it reads is checked: the
switches of ``sparsegcn._env`` (``SPARSEGCN_DEBUG=maybe`` is refused)
and ``$XLA_FLAGS`` (:func:`sparsegcn.xla_tuning.check_xla_flags`), so
that XLA never aborts on a value it cannot parse. A closed stderr
(``2>&-``) is replaced by the null device: progress bars and messages
then go nowhere, and the exit status still tells the outcome.

Ctrl-C ends a command with ``<prog>: interrupted`` and status 130, SIGTERM
with ``<prog>: terminated`` and 143, SIGHUP with ``<prog>: hangup`` and 129,
after the ``finally`` blocks on the way out have run (temporary files
removed, checkpoint folders released). Each is recorded by ``sparsegcn._interrupt``, so one whose
``KeyboardInterrupt`` was swallowed still ends the command there, never
with its results and status 0.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pickle
import signal
import sys
import traceback
import urllib.error
import zipfile
from collections.abc import Callable, Iterator

from sparsegcn import __version__, _interrupt
from sparsegcn._env import check_switches, env_switch
from sparsegcn.allocator import keep_freed_memory_unless_disabled
from sparsegcn.cli import bench, info, predict, train
from sparsegcn.cli.options import OneLineParser, expand_home
from sparsegcn.train.guard import DivergenceError
from sparsegcn.xla_tuning import check_xla_flags

SUBCOMMANDS = (train, predict, info, bench)

# Failures caused by what the user gave: exit status 2.
INPUT_ERRORS = (
    ValueError,  # includes CheckpointError and UnicodeDecodeError
    TypeError,
    LookupError,
    ImportError,
    DivergenceError,
    pickle.UnpicklingError,
    zipfile.BadZipFile,
    EOFError,  # a truncated pickle or archive
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="sparsegcn", description="Sparse message passing for GNNs in JAX.")
    parser.add_argument("--version", action="version", version=f"sparsegcn {__version__}")
    debug_help = "on an error, show the Python traceback (also: SPARSEGCN_DEBUG=1)"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    for sub in subparsers.choices.values():
        # SUPPRESS: a subcommand without --debug keeps the top-level value.
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    return parser


def exit_status(err: BaseException) -> int:
    """2 for an error in the input, 1 for one in the environment or in sparsegcn.

    A ``TypeError`` is the input's only where sparsegcn raised it (a check
    naming a value of the wrong kind); one that an operation raised (``None +
    1`` in sparsegcn, jax or numpy) is a defect, status 1.
    """
    if isinstance(err, TypeError) and not _raised_by_a_check(err):
        return 1
    return 2 if isinstance(err, INPUT_ERRORS) else 1


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _raised_by_a_check(err: BaseException) -> bool:
    """Whether ``err`` comes from a ``raise`` statement in the sparsegcn package."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return True  # never raised (built and handed over): nothing says otherwise
    last = frames[-1]
    inside = os.path.abspath(last.filename).startswith(_PACKAGE + os.sep)
    return inside and (last.line or "").lstrip().startswith("raise")


def one_line(err: BaseException) -> str:
    """The error as one line: its message's lines joined, or its type when it has none."""
    if isinstance(err, urllib.error.URLError) and not isinstance(err, urllib.error.HTTPError):
        message = str(err.reason)  # str(err) wraps it in "<urlopen error ...>"
    else:
        message = str(err)
    text = " ".join(line.strip() for line in message.splitlines() if line.strip())
    if isinstance(err, MemoryError):
        return f"out of memory{': ' + text if text else ''} (MemoryError)"
    if isinstance(err, KeyError) or not text:
        return f"{type(err).__name__}: {text}" if text else type(err).__name__
    if exit_status(err) == 1 and not isinstance(err, OSError):
        return f"{type(err).__name__}: {text} (rerun with --debug for the traceback)"
    return text


class BackendUnavailable(OSError):
    """JAX could not start the platform the environment asks for (exit status 1)."""


def backend_failure(err: BaseException) -> BackendUnavailable | None:
    """``err`` explained when it is JAX failing to start its backends, else ``None``.

    JAX raises a bare ``AssertionError`` for ``JAX_PLATFORMS=cuda`` on a
    machine without a visible NVIDIA GPU, and a ``RuntimeError`` for a
    platform whose plugin fails; the result names ``$JAX_PLATFORMS`` and
    the cause.
    """
    if not isinstance(err, (AssertionError, RuntimeError)):
        return None
    frames = traceback.extract_tb(err.__traceback__)
    if not frames or not frames[-1].filename.replace(os.sep, "/").endswith(
        "jax/_src/xla_bridge.py"
    ):
        return None
    bridge = sys.modules.get("jax._src.xla_bridge")
    if getattr(bridge, "_default_backend", None) is not None:
        return None  # the backends started; the error is another one
    platforms = os.environ.get("JAX_PLATFORMS", "")
    asked = f"JAX_PLATFORMS={platforms!r}" if platforms else "the default JAX platforms"
    text = " ".join(str(err).split())
    if not text:
        wanted = [p.strip() for p in platforms.split(",") if p.strip()]
        gpu = any(p in ("cuda", "gpu") for p in wanted)
        text = "no NVIDIA GPU is visible" if gpu else "no platform could be started"
    return BackendUnavailable(
        f"JAX could not initialise {asked}: {text}; unset JAX_PLATFORMS or set it to a "
        f"platform this machine has (e.g. cpu)"
    )


def _debug(args) -> bool:
    return bool(getattr(args, "debug", False)) or env_switch("SPARSEGCN_DEBUG", False)


def _usable_stderr() -> None:
    """Points a closed or missing ``sys.stderr`` (``2>&-``) at the null device, and
    makes printing a path never fail (:func:`_printable_paths`)."""
    stream = sys.stderr
    if stream is None or getattr(stream, "closed", False):
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- lives as long as the process
    _printable_paths()


class _StdoutWithoutReader:
    """``sys.stdout`` where a reader that has gone (``| head``, a pager quit during
    a long run) ends what is printed, not the command.

    A command prints its table before it writes ``--json`` and ``--plot``:
    the ``BrokenPipeError`` of that print ended the command after all its
    work, with none of its outputs written. Here the first one points the
    stream at the null device, and the command goes on to write its files and
    exit as it would have.
    """

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        # The buffered text stays in the stream; its later flushes reach /dev/null.
        with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _stdout_without_reader() -> Iterator[None]:
    """``sys.stdout`` as :class:`_StdoutWithoutReader` for the block (restored after)."""
    stream = sys.stdout
    if stream is None or isinstance(stream, _StdoutWithoutReader):
        yield
        return
    sys.stdout = _StdoutWithoutReader(stream)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()  # before it is unwrapped: a gone reader is quiet here too
        sys.stdout = stream


def _printable_paths() -> None:
    """Makes ``sys.stdout`` and ``sys.stderr`` write what their encoding cannot as
    backslash escapes, where they would raise instead.

    A path that is not valid in the file system's encoding (``ck\\xff`` under
    UTF-8) is a ``str`` with a surrogate (``'ck\\udcff'``). A stream with
    ``errors="strict"`` (``LANG=en_US.UTF-8``; ``PYTHONIOENCODING=utf-8:strict``)
    refuses to print it, and a command would fail after its work, at the
    line that names a file it wrote, before writing its ``--json``. Such a
    stream prints ``ck\\udcff`` instead; one that already escapes
    (``surrogateescape`` under ``C.UTF-8``: the original bytes) is left as it is.
    """
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) != "strict":
            continue
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError, AttributeError):
                reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    """Runs one ``sparsegcn`` subcommand; returns the exit status (see the module docstring)."""
    with _interrupt.installed():
        _usable_stderr()
        args = expand_home(build_parser().parse_args(argv))
        try:
            check_switches()
        except ValueError as err:
            print(f"sparsegcn {args.command}: error: {one_line(err)}", file=sys.stderr)
            return 2
        with _stdout_without_reader():
            return _guarded(f"sparsegcn {args.command}", lambda: args.func(args), _debug(args))


def _guarded(prog: str, work: Callable[[], int], debug: bool) -> int:
    """``work()``'s exit status; an exception becomes one line ``<prog>: error: ...`` and
    :func:`exit_status`, Ctrl-C ``<prog>: interrupted`` and 130, SIGTERM ``<prog>:
    terminated`` and 143 (``debug``: raised).

    A signal ``sparsegcn._interrupt`` recorded decides the outcome whatever
    ``work`` did after it: swallowed, and ``work`` returned or failed otherwise,
    it still ends as that signal.
    """
    try:
        _interrupt.check()  # one received before this (during imports): nothing runs
        check_xla_flags()
        status = work()
        _interrupt.check()  # a swallowed interrupt: no success after it
        return status
    except KeyboardInterrupt:
        if debug:
            raise
        return _stopped(prog)
    except Exception as err:
        if debug:
            raise
        if _interrupt.received() is not None:  # failed after a swallowed interrupt
            return _stopped(prog)
        err = backend_failure(err) or err
        print(f"{prog}: error: {one_line(err)}", file=sys.stderr)
        return exit_status(err)


def _stopped(prog: str) -> int:
    """Reports the signal that stopped ``prog`` (SIGINT unless another was recorded)."""
    signum = _interrupt.received() or signal.SIGINT
    print(f"{prog}: {_interrupt.describe(signum)}", file=sys.stderr)
    return _interrupt.exit_status(signum)


def run_tool(prog: str, work: Callable[[], object], *, debug: bool = False) -> int:
    """Runs a dataset tool's ``work`` (``python -m sparsegcn.datasets.to_disk`` ...) as
    :func:`main` runs a subcommand, printing what it returns.

    An error is one line ``<prog>: error: <message>`` with :func:`exit_status`;
    Ctrl-C is ``<prog>: interrupted`` and 130, SIGTERM ``<prog>: terminated`` and
    143 (:func:`_guarded`), and no result is printed after either. ``debug`` (the tool's
    ``--debug``) or ``SPARSEGCN_DEBUG=1`` raises instead, with the traceback.
    """
    _usable_stderr()

    def work_and_show() -> int:
        result = work()
        _interrupt.check()  # a swallowed Ctrl-C: no result shown
        print(result)
        return 0

    with _interrupt.installed(), _stdout_without_reader():
        return _guarded(prog, work_and_show, debug or env_switch("SPARSEGCN_DEBUG", False))


def console_main() -> int:
    """Entry point of the ``sparsegcn`` console script and ``python -m sparsegcn``.

    :func:`main` in a process that keeps freed memory for reuse
    (:func:`sparsegcn.allocator.keep_freed_memory`; ``SPARSEGCN_KEEP_FREED_MEMORY=0``
    turns it off), which saves the page faults of re-allocating large buffers
    on every compiled call.

    Ctrl-C and SIGTERM are handled (``sparsegcn._interrupt``) from its
    first line, and for good: after one, once :func:`main` has reported it
    (and the ``finally`` blocks on the way out have run), the process leaves
    at once with its status (``sparsegcn._interrupt.leave``), skipping an
    interpreter teardown that could crash under JAX's running threads.
    """
    _interrupt.install()
    with contextlib.suppress(ValueError):  # a malformed switch: main() refuses it
        keep_freed_memory_unless_disabled()
    signal_statuses = {_interrupt.exit_status(s) for s in _interrupt.SIGNALS}
    try:
        status = main()
        # A status of a signal: main reported it; any other, and a signal came after
        # the command's work (between its last check and here).
        reported = status in signal_statuses
    except KeyboardInterrupt:  # --debug, or outside _guarded (parsing the options)
        reported = True
        _interrupt.leave_on_signal()
        stopped_by = _interrupt.received() or signal.SIGINT
        debug = "--debug" in sys.argv[1:]
        with contextlib.suppress(ValueError):
            debug = debug or env_switch("SPARSEGCN_DEBUG", False)
        if debug:
            traceback.print_exc()
        else:
            print(f"sparsegcn: {_interrupt.describe(stopped_by)}", file=sys.stderr)
        status = _interrupt.exit_status(stopped_by)
    # From here, a signal ends the process at once (saying so where not reported yet).
    _interrupt.leave_on_signal(None if reported else "sparsegcn")
    signum = _interrupt.received()
    if signum is not None:
        if not reported:
            print(_interrupt.late_message("sparsegcn", signum), file=sys.stderr)
        status = _interrupt.exit_status(signum)
    if status in signal_statuses:
        _interrupt.leave(status)
    return status


__all__ = [
    "BackendUnavailable",
    "backend_failure",
    "build_parser",
    "console_main",
    "exit_status",
    "main",
    "one_line",
    "run_tool",
]

"""The ``sparsegcn`` command: a thin layer over the library.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers its options and sets ``func`` to a ``run(args) -> int``.

Every failure ends as one line on stderr, ``sparsegcn <command>: error:
<message>``, and an exit status (:func:`exit_status`): 2 when the input is
at fault (a bad option, file, dataset or checkpoint, a diverged run), 1
when the environment is (the network, a full disk, memory, an unexpected
error). ``--debug`` (or ``SPARSEGCN_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import urllib.error
import zipfile

from sparsegcn import __version__
from sparsegcn.allocator import keep_freed_memory_unless_disabled
from sparsegcn.cli import bench, info, predict, train
from sparsegcn.train.guard import DivergenceError

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
    parser = argparse.ArgumentParser(
        prog="sparsegcn", description="Sparse message passing for GNNs in JAX."
    )
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
    """2 for an error in the input, 1 for one in the environment or in sparsegcn."""
    return 2 if isinstance(err, INPUT_ERRORS) else 1


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


def _debug(args) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("SPARSEGCN_DEBUG", "") not in (
        "",
        "0",
    )


def main(argv: list[str] | None = None) -> int:
    """Runs one ``sparsegcn`` subcommand; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        if _debug(args):
            raise
        print(f"sparsegcn {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if _debug(args):
            raise
        print(f"sparsegcn {args.command}: error: {one_line(err)}", file=sys.stderr)
        return exit_status(err)


def console_main() -> int:
    """Entry point of the ``sparsegcn`` console script and ``python -m sparsegcn``.

    :func:`main` in a process that keeps freed memory for reuse
    (:func:`sparsegcn.allocator.keep_freed_memory`; ``SPARSEGCN_KEEP_FREED_MEMORY=0``
    turns it off), which saves the page faults of re-allocating large buffers
    on every compiled call.
    """
    keep_freed_memory_unless_disabled()
    return main()


__all__ = ["build_parser", "console_main", "exit_status", "main", "one_line"]

"""The ``sparsegcn`` command: a thin layer over the library.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers its options and sets ``func`` to a ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import sys

from sparsegcn.allocator import keep_freed_memory_unless_disabled
from sparsegcn.cli import bench, info, predict, train
from sparsegcn.train.guard import DivergenceError

SUBCOMMANDS = (train, predict, info, bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparsegcn", description="Sparse message passing for GNNs in JAX."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs one ``sparsegcn`` subcommand; returns the exit status (2 on a user error)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, ImportError, DivergenceError) as err:
        print(f"sparsegcn {args.command}: error: {err}", file=sys.stderr)
        return 2


def console_main() -> int:
    """Entry point of the ``sparsegcn`` console script and ``python -m sparsegcn``.

    :func:`main` in a process that keeps freed memory for reuse
    (:func:`sparsegcn.allocator.keep_freed_memory`; ``SPARSEGCN_KEEP_FREED_MEMORY=0``
    turns it off), which saves the page faults of re-allocating large buffers
    on every compiled call.
    """
    keep_freed_memory_unless_disabled()
    return main()


__all__ = ["build_parser", "console_main", "main"]

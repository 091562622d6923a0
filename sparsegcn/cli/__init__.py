"""The ``sparsegcn`` command: a thin layer over the library.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers its options and sets ``func`` to a ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import sys

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
    """Entry point of the ``sparsegcn`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, ImportError, DivergenceError) as err:
        print(f"sparsegcn {args.command}: error: {err}", file=sys.stderr)
        return 2


__all__ = ["build_parser", "main"]

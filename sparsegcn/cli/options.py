"""Argparse options generated from a dataclass, so defaults live in one place."""

from __future__ import annotations

import argparse
import dataclasses
import typing


def add_dataclass_options(parser: argparse.ArgumentParser, cls) -> None:
    """Adds ``--field-name`` for every field of ``cls``, typed by its annotation."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        flag = "--" + field.name.replace("_", "-")
        kind = hints[field.name]
        help_text = field.metadata.get("help", "")
        if kind is bool:
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=field.default,
                help=help_text,
            )
            continue
        base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
        parser.add_argument(
            flag,
            type=base,
            default=field.default,
            choices=field.metadata.get("choices"),
            help=help_text if field.default is None else f"{help_text} (default: {field.default})",
        )


def dataclass_from_args(cls, args: argparse.Namespace):
    """Builds ``cls`` from the parsed options :func:`add_dataclass_options` added."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})

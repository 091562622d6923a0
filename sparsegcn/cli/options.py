"""Argparse options generated from a dataclass, so defaults live in one place."""

from __future__ import annotations

import argparse
import dataclasses
import typing


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors end as one line on stderr and status 2:
    ``<prog>: error: <message> (see <prog> --help)``, not the whole usage first.

    Its subparsers (``add_subparsers``) are of this class too. An option's
    value that starts with ``-`` (``--fanouts -1,5``) reads to argparse as
    another option; the message then says to write ``--flag=VALUE``.
    """

    def error(self, message: str):
        if message.endswith("expected one argument"):
            message += " (a value that starts with '-' is written --flag=VALUE)"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


GIVEN = "given_options"
"""The namespace attribute listing the fields whose flags were on the command line."""


def _recording(action: type[argparse.Action]) -> type[argparse.Action]:
    """``action`` that also adds its ``dest`` to ``namespace.given_options``."""

    class Recording(action):  # type: ignore[valid-type,misc]
        def __call__(self, parser, namespace, values, option_string=None):
            super().__call__(parser, namespace, values, option_string)
            given = getattr(namespace, GIVEN, None) or set()
            setattr(namespace, GIVEN, given | {self.dest})

    return Recording


_STORE = _recording(argparse._StoreAction)
_BOOLEAN = _recording(argparse.BooleanOptionalAction)


def check_paths(paths: dict) -> None:
    """Refuses an empty path option: ``{"--json": args.json, ...}``, ``None`` for unset.

    ``--json ""`` would silently write nothing, ``--root ""`` mean the current
    folder; a path option is given a path or left out.

    Raises:
      ValueError: naming the first flag given ``""``.
    """
    for flag, path in paths.items():
        if path is not None and not str(path):
            raise ValueError(f"{flag} '' is empty: give a path, or leave the option out")


PATH_DESTS = (
    "dataset",
    "root",
    "json",
    "checkpoint",
    "resume",
    "plot",
    "feature_cache",
    "out",
    "embeddings",
    "pairs",
    "tmp_dir",
)
"""The options of the commands and dataset tools that name paths (:func:`expand_home`)."""


def expand_home(args: argparse.Namespace) -> argparse.Namespace:
    """Expands a leading ``~`` or ``~user`` in every path option (:data:`PATH_DESTS`), as
    a shell does for a separate word but not after ``--json=``: ``--json=~/r.json``
    would otherwise write into a folder named ``~`` in the current one."""
    import os

    for dest in PATH_DESTS:
        value = getattr(args, dest, None)
        if isinstance(value, str) and value.startswith("~"):
            setattr(args, dest, os.path.expanduser(value))
    return args


def given_options(args: argparse.Namespace) -> frozenset:
    """The fields whose flags :func:`add_dataclass_options` saw on the command line
    (even when given their default value)."""
    return frozenset(getattr(args, GIVEN, None) or ())


def add_dataclass_options(parser: argparse.ArgumentParser, cls) -> None:
    """Adds ``--field-name`` for every field of ``cls``, typed by its annotation
    (each flag given is recorded: :func:`given_options`)."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if not field.metadata.get("cli", True):
            continue
        flag = "--" + field.name.replace("_", "-")
        kind = hints[field.name]
        help_text = field.metadata.get("help", "")
        if kind is bool:
            parser.add_argument(flag, action=_BOOLEAN, default=field.default, help=help_text)
            continue
        base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
        parser.add_argument(
            flag,
            action=_STORE,
            type=base,
            default=field.default,
            choices=field.metadata.get("choices"),
            help=help_text if field.default is None else f"{help_text} (default: {field.default})",
        )


def dataclass_from_args(cls, args: argparse.Namespace, **extra):
    """Builds ``cls`` from the parsed options :func:`add_dataclass_options` added
    (and ``extra`` for fields without a flag of their own)."""
    fields = dataclasses.fields(cls)
    values = {f.name: getattr(args, f.name) for f in fields if f.metadata.get("cli", True)}
    return cls(**values, **extra)


def add_model_options(parser: argparse.ArgumentParser, models) -> None:
    """One ``--name`` flag per model option of the registry ``models``
    (:class:`~sparsegcn.nn.registry.Option`); unset flags stay ``None``."""
    group = parser.add_argument_group("model options (each applies to the models named)")
    seen: dict[str, list[str]] = {}
    defaults: dict[str, list] = {}
    choices: dict[str, list] = {}
    options: dict = {}
    for model, spec in models.items():
        for name, option in spec.options.items():
            seen.setdefault(name, []).append(model)
            defaults.setdefault(name, []).append(option.default)
            known = choices.setdefault(name, [])
            known += [c for c in option.choices or () if c not in known]
            options.setdefault(name, option)
    for name, option in options.items():
        flag = "--" + name.replace("_", "-")
        if len(set(defaults[name])) == 1:
            default = f"default: {option.default}"
        else:  # each model's own
            default = "defaults: " + ", ".join(
                f"{m} {d}" for m, d in zip(seen[name], defaults[name], strict=True)
            )
        help_text = f"{option.help} ({', '.join(seen[name])}; {default})"
        if isinstance(option.default, bool):
            group.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            group.add_argument(
                flag,
                type=type(option.default),
                default=None,
                choices=choices[name] or None,
                help=help_text,
            )


def model_options_from_args(args: argparse.Namespace, models) -> tuple:
    """The model-option flags that were given, as ``(name, value)`` pairs."""
    names = {name for spec in models.values() for name in spec.options}
    return tuple(sorted((n, getattr(args, n)) for n in names if getattr(args, n) is not None))

"""Switches read from environment variables, parsed strictly.

A switch is on for ``1``, ``true``, ``yes`` or ``on`` and off for ``0``,
``false``, ``no``, ``off`` or an empty value (any case, surrounding spaces
ignored). Anything else is an error naming the variable and its value:
``SPARSEGCN_DEBUG=no`` means off, and ``SPARSEGCN_DEBUG=maybe`` is refused
rather than guessed. This module imports nothing heavy, so it can run
before JAX starts.
"""

from __future__ import annotations

import os

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")

SWITCHES = ("SPARSEGCN_DEBUG", "SPARSEGCN_XLA_TUNING", "SPARSEGCN_KEEP_FREED_MEMORY")
"""Every switch sparsegcn reads; :func:`check_switches` validates them all."""


def parse_switch(name: str, value: str) -> bool:
    """``value`` of environment variable ``name`` as a bool.

    Raises:
      ValueError: ``value`` is neither on nor off; the message names both.
    """
    word = value.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise ValueError(
        f"environment variable {name}={value!r} is not a switch: use one of "
        f"{', '.join(TRUE)} (on) or {', '.join(w for w in FALSE if w)} or empty (off)"
    )


def env_switch(name: str, default: bool) -> bool:
    """The switch ``$name``; ``default`` when it is unset (an empty value is off).

    Raises:
      ValueError: a value that is neither on nor off (:func:`parse_switch`).
    """
    value = os.environ.get(name)
    return default if value is None else parse_switch(name, value)


def check_switches() -> None:
    """Raises ``ValueError`` for the first switch of :data:`SWITCHES` set to a bad value."""
    for name in SWITCHES:
        env_switch(name, False)

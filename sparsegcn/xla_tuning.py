"""XLA's CPU compiler settings that sparse message passing needs.

jaxlib 0.10 hands reductions on CPU to YNNPACK fusions by default. For the
short reductions message passing is made of (a per-head dot product over
``F' = 7`` or ``8`` features on ``[E, H, F']`` edge rows, an attention
vector, a loss over classes) the YNNPACK kernel is several times slower
than XLA's own loop fusion: on Cora, one such reduction of GAT's backward
pass took 1.0 ms of a 4.5 ms training step. Leaving reductions to XLA
(``--xla_cpu_experimental_ynn_fusion_type=-reduce``) makes the GAT step
about 1.9x faster and leaves dot products on YNNPACK (measured figures
and the commands on the documentation's performance page).

:func:`tune_xla_flags` adds that flag to ``$XLA_FLAGS``. ``import
sparsegcn`` calls it, so it takes effect if JAX has not yet started its
backends in this process (XLA reads ``$XLA_FLAGS`` once, when the first
backend starts; import sparsegcn before running any JAX computation, or
set the flag yourself). It changes which code XLA generates for a
reduction, never what the reduction computes. It is applied only on the
jaxlib versions where it was measured (:data:`TESTED_JAXLIB`), because an
XLA that does not know a flag aborts the process; and never where the
user's ``$XLA_FLAGS`` already sets ``xla_cpu_experimental_ynn_fusion_type``
or ``$SPARSEGCN_XLA_TUNING`` is off (``0``, ``false``, ``no``, ``off`` or
empty; a value that is no switch leaves ``$XLA_FLAGS`` alone too, and the
``sparsegcn`` command refuses it, see ``sparsegcn._env``).
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata

from sparsegcn._env import env_switch

ENV = "SPARSEGCN_XLA_TUNING"
"""Off (``0``) leaves ``$XLA_FLAGS`` alone; on (``1``) applies the flags on any
jaxlib; unset: on the measured jaxlib versions only."""

FLAG = "--xla_cpu_experimental_ynn_fusion_type=-reduce"
"""Reductions go to XLA's loop fusions instead of YNNPACK (dots stay on YNNPACK)."""

TESTED_JAXLIB = ((0, 10),)
"""``(major, minor)`` jaxlib versions whose XLA knows :data:`FLAG` and was measured."""

_state = {"applied": False, "reason": "not called"}

_FLAG = re.compile(r"--[A-Za-z][A-Za-z0-9_]*(=.*)?$")


def xla_flags_problem(flags: str) -> str | None:
    """What is wrong with an ``$XLA_FLAGS`` value, in words, or ``None``.

    XLA reads ``$XLA_FLAGS`` as flags ``--name=value`` separated by spaces,
    or, when the value does not start with ``--``, as the name of a file of
    flags; it aborts the process on what it cannot parse. This finds what
    it would abort on without starting it (an unknown flag name is left to
    XLA, whose message names it).
    """
    text = flags.strip()
    if not text:
        return None
    if not text.startswith("--"):
        if os.path.isfile(text):
            return None
        return (
            f"XLA_FLAGS={flags!r} is neither flags (--xla_name=value ...) nor a file of them "
            f"(XLA reads a value that does not start with -- as a file name)"
        )
    for token in text.split():
        if not _FLAG.match(token):
            return f"XLA_FLAGS={flags!r}: {token!r} is not a flag of the form --xla_name=value"
    return None


def check_xla_flags() -> None:
    """Refuses an ``$XLA_FLAGS`` that XLA would abort on (:func:`xla_flags_problem`).

    The ``sparsegcn`` command calls it before JAX starts, so a bad value is
    one line naming ``XLA_FLAGS`` instead of XLA's fatal error.

    Raises:
      ValueError: naming the variable and what is wrong with it.
    """
    problem = xla_flags_problem(os.environ.get("XLA_FLAGS", ""))
    if problem is not None:
        raise ValueError(problem)


def _jaxlib_version() -> tuple[int, int] | None:
    try:
        parts = metadata.version("jaxlib").split(".")
        return int(parts[0]), int(parts[1])
    except (metadata.PackageNotFoundError, ValueError, IndexError):
        return None


def _backends_started() -> bool:
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def tune_xla_flags() -> bool:
    """Adds :data:`FLAG` to ``$XLA_FLAGS`` where it is safe and has effect.

    Returns:
      ``True`` when the flag is in ``$XLA_FLAGS`` (added now or before) and
      JAX's backends had not started, so it governs this process's
      compilations; ``False`` otherwise (:func:`status` says why).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    try:
        choice = None if ENV not in os.environ else env_switch(ENV, False)
    except ValueError as err:
        return _record(False, str(err))
    if choice is False:
        return _record(False, f"${ENV}={os.environ[ENV]!r} (off)")
    problem = xla_flags_problem(flags)
    if problem is not None:
        # Appended to a value XLA cannot parse, the flag would show in XLA's error.
        return _record(False, f"$XLA_FLAGS is left as it is: {problem}")
    if flags.strip() and not flags.strip().startswith("--"):
        return _record(False, "$XLA_FLAGS names a file of flags; nothing can be appended to it")
    if "xla_cpu_experimental_ynn_fusion_type" in flags:
        return _record(False, "$XLA_FLAGS already sets xla_cpu_experimental_ynn_fusion_type")
    version = _jaxlib_version()
    if choice is None and version not in TESTED_JAXLIB:
        return _record(False, f"jaxlib {version} is not among the measured {TESTED_JAXLIB}")
    if _backends_started():
        return _record(False, "JAX's backends had started before sparsegcn was imported")
    os.environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
    return _record(True, f"added {FLAG} to $XLA_FLAGS")


def _record(applied: bool, reason: str) -> bool:
    _state.update(applied=applied, reason=reason)
    return applied


def status() -> dict:
    """``{"applied": bool, "reason": str}``: what :func:`tune_xla_flags` did last."""
    return dict(_state)

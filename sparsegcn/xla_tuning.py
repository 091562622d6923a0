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
or ``$SPARSEGCN_XLA_TUNING`` is ``0``.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata

ENV = "SPARSEGCN_XLA_TUNING"
"""``0`` leaves ``$XLA_FLAGS`` alone; ``1`` applies the flags on any jaxlib."""

FLAG = "--xla_cpu_experimental_ynn_fusion_type=-reduce"
"""Reductions go to XLA's loop fusions instead of YNNPACK (dots stay on YNNPACK)."""

TESTED_JAXLIB = ((0, 10),)
"""``(major, minor)`` jaxlib versions whose XLA knows :data:`FLAG` and was measured."""

_state = {"applied": False, "reason": "not called"}


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
    choice = os.environ.get(ENV, "").strip().lower()
    flags = os.environ.get("XLA_FLAGS", "")
    if choice in ("0", "false", "no", "off"):
        return _record(False, f"${ENV}={choice}")
    if "xla_cpu_experimental_ynn_fusion_type" in flags:
        return _record(False, "$XLA_FLAGS already sets xla_cpu_experimental_ynn_fusion_type")
    version = _jaxlib_version()
    if choice not in ("1", "true", "yes", "on") and version not in TESTED_JAXLIB:
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

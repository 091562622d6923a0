"""The ``sparsegcn`` console script: Ctrl-C and SIGTERM handled from its first line.

Importing the package :mod:`sparsegcn` imports JAX, about 1.5 s on a small
CPU. A Ctrl-C in that time would meet Python's own handler, whose
``KeyboardInterrupt`` JAX's garbage-collector callback may swallow (see
:mod:`sparsegcn._interrupt`): the command would go on, ``--overwrite``
included. So this entry point loads :mod:`sparsegcn._interrupt` alone, from
its file (it imports nothing but the standard library), installs its
handler (recording a signal, raising none, until the imports are done), and
only then imports the package and runs :func:`sparsegcn.cli.console_main`. It lives outside the package because
importing any module of a package runs the package's ``__init__`` first.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

NAME = "sparsegcn._interrupt"


def install_first() -> ModuleType:
    """Loads :mod:`sparsegcn._interrupt` without importing :mod:`sparsegcn`, registers it
    under its own name (the package then finds it, the one module, with its record of a
    signal), and installs its handlers. Returns the module."""
    loaded = sys.modules.get(NAME)
    if loaded is None:
        package = importlib.util.find_spec("sparsegcn")  # finds; imports nothing
        if package is None or not package.submodule_search_locations:
            raise ModuleNotFoundError("sparsegcn is not installed", name="sparsegcn")
        folder = next(iter(package.submodule_search_locations))
        spec = importlib.util.spec_from_file_location(NAME, os.path.join(folder, "_interrupt.py"))
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = loaded
        spec.loader.exec_module(loaded)
    loaded.install(defer=True)
    return loaded


def main() -> int:
    """Runs the ``sparsegcn`` command (:func:`sparsegcn.cli.console_main`), its signal
    handlers installed before :mod:`sparsegcn` (and JAX) is imported."""
    interrupt = install_first()
    import sparsegcn
    from sparsegcn.cli import console_main

    sparsegcn._interrupt = interrupt  # as importing the submodule would have set it
    interrupt.end_start_up("sparsegcn")  # a signal during the imports: one line, leave
    return console_main()


__all__ = ["install_first", "main"]

"""A restricted unpickler for data files that come from outside.

A pickle is a program: every global it names is imported and may be
called, so ``pickle.load`` on a downloaded file runs whatever the file says
(``os.system`` included). :func:`safe_load` only lets a file name the
globals the caller lists; anything else raises
:class:`pickle.UnpicklingError` before it is imported.

Old pickles name objects by the module paths of the library version that
wrote them. Those paths move (``numpy.core`` became ``numpy._core`` in
NumPy 2, ``scipy.sparse.csr`` became ``scipy.sparse._csr`` in SciPy 1.8), and
the old ones are deprecated shims that warn or will disappear. The allow-list
is matched against the path *as written in the file*; the admitted object is
then taken from where it lives in the installed version.

References:
  Python docs, *Restricting Globals*,
  https://docs.python.org/3/library/pickle.html#restricting-globals
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
from typing import IO

import numpy as np

from sparsegcn.files import open_regular

_NUMPY_CORE = "numpy._core" if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else "numpy.core"

# Module paths written by older Python, NumPy or SciPy versions -> where the
# same objects live now. Only consulted for globals the caller admitted.
_MODULE_RENAMES = {
    "__builtin__": "builtins",
    "numpy.core.multiarray": f"{_NUMPY_CORE}.multiarray",
    "numpy._core.multiarray": f"{_NUMPY_CORE}.multiarray",
    "scipy.sparse.csr": "scipy.sparse",
    "scipy.sparse._csr": "scipy.sparse",
}


def _resolve(module: str, name: str):
    obj = importlib.import_module(_MODULE_RENAMES.get(module, module))
    for attr in name.split("."):
        obj = getattr(obj, attr)
    return obj


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, *, allowed: frozenset, encoding: str, source: str):
        super().__init__(file, encoding=encoding)
        self._allowed = allowed
        self._source = source

    def find_class(self, module: str, name: str):
        if (module, name) not in self._allowed:
            raise pickle.UnpicklingError(
                f"{self._source}: refusing to load global {module}.{name}: it is not in the "
                f"allowed set {sorted(f'{m}.{n}' for m, n in self._allowed)}"
            )
        try:
            return _resolve(module, name)
        except (ImportError, AttributeError) as err:
            raise pickle.UnpicklingError(
                f"{self._source}: allowed global {module}.{name} does not exist in the "
                f"installed libraries: {err}"
            ) from err


def _check_allowed(allowed) -> frozenset:
    if not isinstance(allowed, (set, frozenset)):
        raise TypeError(
            f"allowed must be a frozenset of (module, name) pairs, got {type(allowed).__name__}"
        )
    for pair in allowed:
        if not (
            isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        ):
            raise TypeError(f"allowed must hold (module, name) string pairs, got {pair!r}")
    return frozenset(allowed)


def safe_load(
    path_or_file: str | os.PathLike | IO[bytes],
    *,
    allowed: frozenset[tuple[str, str]],
    encoding: str = "latin1",
):
    """Unpickles one object, importing only the globals in ``allowed``.

    Args:
      path_or_file: a path, or a binary file object positioned at the pickle.
      allowed: the ``(module, name)`` pairs the pickle may reference, spelt as
        the pickle spells them (e.g. ``("numpy.core.multiarray",
        "_reconstruct")`` for a NumPy 1 pickle). Keep it to what the file
        format needs: every admitted callable can be called with arguments of
        the file's choosing.
      encoding: how to decode Python 2 ``str`` objects. ``"latin1"`` maps every
        byte to one code point, which is what NumPy arrays pickled by Python 2
        need (their raw buffer is a Python 2 ``str``).

    Returns:
      The unpickled object.

    Raises:
      pickle.UnpicklingError: the pickle references a global outside
        ``allowed`` (the message names it and the file), or an admitted one
        that the installed libraries lack. Nothing is imported for a refused
        global.
      TypeError: ``allowed`` is not a set of ``(module, name)`` string pairs.
    """
    allowed = _check_allowed(allowed)
    if isinstance(path_or_file, (str, os.PathLike)):
        with open_regular(path_or_file) as f:
            return _RestrictedUnpickler(
                f, allowed=allowed, encoding=encoding, source=os.fspath(path_or_file)
            ).load()
    if not hasattr(path_or_file, "read") or isinstance(path_or_file, io.TextIOBase):
        raise TypeError(
            f"path_or_file must be a path or a binary file object, got "
            f"{type(path_or_file).__name__}"
        )
    source = getattr(path_or_file, "name", None) or "<pickle stream>"
    return _RestrictedUnpickler(
        path_or_file, allowed=allowed, encoding=encoding, source=str(source)
    ).load()


__all__ = ["safe_load"]

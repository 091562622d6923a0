"""The native CPU CSR kernel: a compiled library registered through ``jax.ffi``.

``pip install`` compiles ``sparsegcn/backends/_csr_kernel.cc`` (see
``setup.py``) into a small shared library beside this module. It computes
the packed CSR product

.. math:: y_i = \\sum_{k = p_i}^{p_{i+1} - 1} d_k \\, x_{c_k}

for float32 values and int32 offsets and columns, multi-threaded, gathering
the rows of ``x`` with software prefetch and summing each output row in
registers (an AVX2 + FMA build of the loop is chosen at load time on CPUs
that have it); the rows of an ``x`` larger than half the L2 cache are
prefetched a few entries ahead. :func:`csr_spmm` calls it; :mod:`sparsegcn.backends.csr`
picks it for the CPU when a program is lowered and keeps XLA's kernel on
other platforms or when the library is missing.

The same library holds the inner-product (and DistMult) link decoder's
kernels, :func:`pair_scores` and :func:`pair_scores_grad`: two rows of ``z``
read per pair, where XLA's CPU gather and scatter-add make several passes
over ``[P, D]`` temporaries.

The library is loaded and registered with JAX once per process, on first
use (``jax.ffi.register_ffi_target`` is process-wide). When it was not built
(no C++ compiler at install time) :func:`ffi_available` is False and
:func:`unavailable_reason` says why; nothing else changes.

``SPARSEGCN_CSR_THREADS`` caps the threads a product uses (default: the
cores this process may run on), read when the library is loaded.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp

TARGET = "sparsegcn_csr_spmm"
"""The FFI target name the kernel is registered under (CPU only)."""
PAIR_TARGETS = {
    "sparsegcn_pair_scores": "SparsegcnPairScores",
    "sparsegcn_pair_scores_grad": "SparsegcnPairScoresGrad",
}
"""The pair-score kernels' FFI target names and their symbols in the library."""
LIBRARY_STEM = "_csr_kernel"
BUILD_ERROR = f"{LIBRARY_STEM}.build-error.txt"  # written by setup.py when the build fails
ISAS = ("auto", "baseline")


class _Library(NamedTuple):
    path: Path | None
    isa: str  # the hot loop chosen at load: "avx2+fma" or "baseline"
    threads: int
    error: str | None
    resident_bytes: int = 0  # the largest x read without prefetching its rows


def library_path() -> Path | None:
    """The built library beside this module, or None when there is none."""
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = here / f"{LIBRARY_STEM}{suffix}"
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _load() -> _Library:
    """Loads the library and registers its handler with JAX, once per process."""
    path = library_path()
    if path is None:
        here = Path(__file__).resolve().parent
        note = here / BUILD_ERROR
        why = f": {note.read_text().strip()}" if note.is_file() else ""
        return _Library(
            None,
            "",
            0,
            f"the native CSR kernel was not built{why} (no {LIBRARY_STEM}.*.so in {here}; "
            "reinstall with a C++17 compiler on the PATH: pip install . builds it)",
        )
    try:
        library = ctypes.CDLL(str(path))
        handler = library.SparsegcnCsrSpmm
        library.SparsegcnCsrIsa.restype = ctypes.c_char_p
        isa = library.SparsegcnCsrIsa().decode()
        threads = int(library.SparsegcnCsrThreads())
        library.SparsegcnCsrResidentBytes.restype = ctypes.c_int64
        resident = int(library.SparsegcnCsrResidentBytes())
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handler), platform="cpu")
        for target, symbol in PAIR_TARGETS.items():
            capsule = jax.ffi.pycapsule(getattr(library, symbol))
            jax.ffi.register_ffi_target(target, capsule, platform="cpu")
    except (OSError, AttributeError) as error:
        return _Library(path, "", 0, f"the native CSR kernel at {path} failed to load: {error}")
    return _Library(path, isa, threads, None, resident)


def ffi_available() -> bool:
    """Whether the native CSR kernel is built and registered (loads it on first call)."""
    return _load().error is None


def unavailable_reason() -> str | None:
    """Why the native kernel cannot run, or None when it can."""
    return _load().error


def kernel_info() -> dict:
    """What the loaded kernel is: ``available``, ``path``, ``isa``, ``threads``,
    ``resident_bytes`` (the largest ``x`` whose rows the product reads without
    prefetching them: half this CPU's L2 cache), ``reason``."""
    lib = _load()
    return {
        "available": lib.error is None,
        "path": None if lib.path is None else str(lib.path),
        "isa": lib.isa or None,
        "threads": lib.threads or None,
        "resident_bytes": lib.resident_bytes or None,
        "reason": lib.error,
    }


def _check_arrays(name: str, expected) -> None:
    """``ValueError`` naming the first ``(arg, value, dtype, ndim)`` that does not match."""
    for arg, value, dtype, ndim in expected:
        if value.dtype != dtype or value.ndim != ndim:
            raise ValueError(
                f"{name} needs {arg} as {jnp.dtype(dtype).name} with {ndim} dimension(s), "
                f"got {value.dtype} with shape {value.shape}"
            )


def _require_library() -> None:
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)


def csr_spmm(
    indptr: jax.Array,
    columns: jax.Array,
    data: jax.Array,
    x: jax.Array,
    *,
    isa: str = "auto",
    threads: int = 0,
) -> jax.Array:
    """``y = A @ x`` for ``A`` in CSR, on the native kernel (CPU only).

    Args:
      indptr: int32 ``[R + 1]``, row ``i``'s entries are ``indptr[i]:indptr[i + 1]``.
      columns: int32 ``[E]``, each entry's row of ``x``.
      data: float32 ``[E]``, each entry's value.
      x: float32 ``[M, F]``.
      isa: ``"auto"`` (the best build of the loop this CPU runs) or
        ``"baseline"`` (the x86-64 baseline build, for tests).
      threads: threads to use at most; 0 for the default (see the module).

    Returns:
      float32 ``[R, F]``. Each row is summed in entry order by one thread,
      so the result is bitwise the same from call to call and for any
      thread count.

    Raises:
      RuntimeError: the library is not available (see :func:`unavailable_reason`).
      ValueError: wrong dtypes or ranks, or an unknown ``isa``.
    """
    if isa not in ISAS:
        raise ValueError(f"isa must be one of {ISAS}, got {isa!r}")
    if not isinstance(threads, int) or threads < 0:
        raise ValueError(f"threads must be an int >= 0, got {threads!r}")
    expected = (
        ("indptr", indptr, jnp.int32, 1),
        ("columns", columns, jnp.int32, 1),
        ("data", data, jnp.float32, 1),
        ("x", x, jnp.float32, 2),
    )
    _check_arrays("csr_spmm", expected)
    _require_library()
    out = jax.ShapeDtypeStruct((indptr.shape[0] - 1, x.shape[1]), jnp.float32)
    call = jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")
    return call(indptr, columns, data, x, isa=ISAS.index(isa), threads=threads)


def _check_pairs(name: str, z, pairs, relation) -> None:
    expected = (
        ("z", z, jnp.float32, 2),
        ("pairs", pairs, jnp.int32, 2),
        ("relation", relation, jnp.float32, 1),
    )
    _check_arrays(name, expected)
    if pairs.shape[1] != 2:
        raise ValueError(f"{name} needs pairs as [P, 2], got shape {pairs.shape}")
    if relation.shape[0] not in (0, z.shape[1]):
        raise ValueError(
            f"{name} needs relation as [D] = [{z.shape[1]}] (or [0] for none), "
            f"got shape {relation.shape}"
        )
    _require_library()


def pair_scores(
    z: jax.Array, pairs: jax.Array, relation: jax.Array | None = None, *, isa: str = "auto"
) -> jax.Array:
    """Each pair's score on the native kernel (CPU only, one thread):

    .. math:: s_p = \\sum_d z_{u_p d} \\, r_d \\, z_{v_p d}

    with :math:`r = 1` when ``relation`` is None (the inner product).

    Args:
      z: float32 ``[N, D]``.
      pairs: int32 ``[P, 2]``, rows ``(u, v)`` of ``z``.
      relation: float32 ``[D]`` (DistMult's diagonal), or None.
      isa: as :func:`csr_spmm`.

    Returns:
      float32 ``[P]``, pairs summed in order (8 columns a vector register):
      the same bits from call to call.

    Raises:
      RuntimeError: the library is not available.
      ValueError: wrong dtypes or shapes, or an unknown ``isa``; a node id
        outside ``[0, N)`` fails when the program runs.
    """
    if isa not in ISAS:
        raise ValueError(f"isa must be one of {ISAS}, got {isa!r}")
    weighted = relation is not None
    relation = jnp.zeros((0,), jnp.float32) if relation is None else relation
    _check_pairs("pair_scores", z, pairs, relation)
    out = jax.ShapeDtypeStruct((pairs.shape[0],), jnp.float32)
    # Under vmap an unbatched argument gets a batch axis of 1, which the kernel
    # reads in place for every element (a shared z is never copied).
    call = jax.ffi.ffi_call("sparsegcn_pair_scores", out, vmap_method="expand_dims")
    return call(z, pairs, relation, weighted=int(weighted), isa=ISAS.index(isa))


def pair_scores_grad(
    z: jax.Array,
    pairs: jax.Array,
    relation: jax.Array | None,
    g: jax.Array,
    *,
    isa: str = "auto",
) -> tuple[jax.Array, jax.Array]:
    """The gradient of ``Σ_p g_p s_p`` (:func:`pair_scores`) on the native kernel:

    .. math::

        \\partial z_u = \\sum_{p: u_p = u} g_p \\, r \\odot z_{v_p}
            + \\sum_{p: v_p = u} g_p \\, r \\odot z_{u_p}, \\qquad
        \\partial r = \\sum_p g_p \\, z_{u_p} \\odot z_{v_p}

    Args:
      z, pairs, relation, isa: as :func:`pair_scores`.
      g: float32 ``[P]``.

    Returns:
      ``(dz [N, D], dr [D])`` float32; ``dr`` is zeros when ``relation`` is None.
      Pairs are added in order: the same bits from call to call.
    """
    if isa not in ISAS:
        raise ValueError(f"isa must be one of {ISAS}, got {isa!r}")
    weighted = relation is not None
    relation = jnp.zeros((0,), jnp.float32) if relation is None else relation
    _check_pairs("pair_scores_grad", z, pairs, relation)
    if g.dtype != jnp.float32 or g.shape != (pairs.shape[0],):
        raise ValueError(
            f"pair_scores_grad needs g as float32 [{pairs.shape[0]}], got {g.dtype} {g.shape}"
        )
    out = (
        jax.ShapeDtypeStruct(z.shape, jnp.float32),
        jax.ShapeDtypeStruct((z.shape[1],), jnp.float32),
    )
    call = jax.ffi.ffi_call("sparsegcn_pair_scores_grad", out, vmap_method="expand_dims")
    dz, dr = call(z, pairs, relation, g, weighted=int(weighted), isa=ISAS.index(isa))
    return dz, dr

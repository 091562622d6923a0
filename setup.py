"""Builds sparsegcn's optional native CSR kernel; everything else is in pyproject.toml.

``sparsegcn/backends/_csr_kernel.cc`` is an XLA FFI handler compiled against
the FFI headers that jaxlib ships (``jaxlib`` is a build requirement). It is
optional: when there is no C++ compiler, or the headers are missing, the
install goes on without it, prints why, and records the reason beside the
package, where ``sparsegcn.backends.native.unavailable_reason()`` reports it.
The CSR product then runs on XLA's kernel.

The flags keep the library portable: baseline x86-64 code, with the kernel's
hot loop also built for AVX2 + FMA in the source and chosen at load time
(no ``-march=native``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

KERNEL = "sparsegcn.backends._csr_kernel"
SOURCE = "sparsegcn/backends/_csr_kernel.cc"
# Where a failed build leaves its reason, beside the (missing) library.
BUILD_ERROR = "_csr_kernel.build-error.txt"


def jaxlib_include() -> str | None:
    """jaxlib's C++ include folder, which holds ``xla/ffi/api/ffi.h``, or None."""
    try:
        import jaxlib
    except ImportError:
        return None
    path = Path(jaxlib.__file__).resolve().parent / "include"
    return str(path) if (path / "xla" / "ffi" / "api" / "ffi.h").is_file() else None


class OptionalBuildExt(build_ext):
    """``build_ext`` that never fails the install: a kernel it cannot build is skipped."""

    def build_extension(self, ext: Extension) -> None:
        target = Path(self.get_ext_fullpath(ext.name))
        note = target.parent / BUILD_ERROR
        include = jaxlib_include()
        try:
            if include is None:
                raise RuntimeError("jaxlib's XLA FFI headers (jaxlib/include/xla/ffi) not found")
            # -isystem: the headers' own warnings are not ours.
            ext.extra_compile_args = [*ext.extra_compile_args, "-isystem", include]
            super().build_extension(ext)
        except Exception as error:  # a missing compiler raises several distutils types
            reason = f"{type(error).__name__}: {error}".strip()
            message = (
                f"sparsegcn: the native CSR kernel was not built ({reason}); "
                "the CSR product will use XLA's kernel"
            )
            print(f"WARNING: {message}", file=sys.stderr)
            note.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(reason + "\n")
        else:
            note.unlink(missing_ok=True)


setup(
    ext_modules=[
        Extension(
            KERNEL,
            sources=[SOURCE],
            language="c++",
            extra_compile_args=["-std=c++17", "-O3", "-pthread", "-fno-math-errno"],
            extra_link_args=["-pthread"],
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)

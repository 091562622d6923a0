"""Test configuration, in the spirit of equinox's: strict and explicit.

- Eight CPU devices are simulated (set before JAX starts) so the parallel
  tests run anywhere.
- NumPy-style implicit dtype and rank promotion raise, so library code must
  say what it means.
- Warnings are errors (``filterwarnings = error`` in pyproject.toml).
- Compiled programs are kept in JAX's persistent compilation cache
  (:func:`compilation_cache_dir`), so a rerun, and CI's second pass, reuse
  them instead of compiling again; and XLA compiles with most optimizations
  off and its faster-compiling fusion emitters (``SPARSEGCN_TEST_OPTIMIZE=1``
  turns both back to what users get).
- Every test that reads the shared data (through the ``data_root`` fixture)
  is marked ``shared_data``: ``pytest -m shared_data`` selects them.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"

import hashlib
import importlib.metadata
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# /proc/cpuinfo fields that name the processor and its instruction set (x86, Arm).
_CPU_IDENTITY = ("vendor_id", "model name", "flags", "CPU implementer", "CPU part", "Features")


def cpu_fingerprint() -> str:
    """A digest of this processor's model and instruction-set flags.

    XLA compiles CPU programs for the host's instruction set, and JAX's cache
    key does not name it: an entry compiled on a processor with AVX-512 would
    crash one without. The cache folder is keyed by this digest.
    """
    try:
        first_cpu = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0].splitlines()
    except OSError:  # not Linux: the architecture alone
        first_cpu = []
    described = [platform.machine()] + [
        line for line in first_cpu if line.split(":", 1)[0].strip() in _CPU_IDENTITY
    ]
    return hashlib.sha256("\n".join(described).encode()).hexdigest()[:16]


def compilation_cache_dir() -> Path:
    """Where the test run keeps compiled programs: ``$JAX_COMPILATION_CACHE_DIR``
    when set, else ``.pytest_cache/jax-<jaxlib version>-<cpu_fingerprint()>``
    in the checkout. JAX's own key covers the program, the compile options,
    the XLA flags and the jaxlib version; the folder adds the processor."""
    chosen = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if chosen:
        return Path(chosen)
    jaxlib = importlib.metadata.version("jaxlib")
    return REPO / ".pytest_cache" / f"jax-{jaxlib}-{cpu_fingerprint()}"


# Set before JAX starts, so subprocesses that tests run inherit them too.
# - Every program is worth keeping: the suite compiles thousands of small ones.
# - The suite's programs run on tiny graphs, so XLA's optimizations cost more
#   than they save: JAX_DISABLE_MOST_OPTIMIZATIONS (LLVM at -O0, no expensive
#   passes) compiles a GAT gradient in about half the CPU time. The checks are
#   on values, which the optimization level does not change beyond rounding.
#   SPARSEGCN_TEST_OPTIMIZE=1, or selecting the slow tests, compiles as users
#   do (pytest_configure below).
os.environ["JAX_COMPILATION_CACHE_DIR"] = str(compilation_cache_dir())
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


# XLA's CPU fusion emitters (MLIR) generate each fused kernel; its older LLVM IR
# emitters compile the suite's small programs in about half the time (backend
# compile of tests/nn/test_gat.py and test_sage.py: 32 s against 16 s, and the
# default suite 640 s against 357 s on 2 cores, 2026-12-06). The code differs, so
# results may differ in the last bit between two programs that are otherwise
# bitwise equal. Only on the jaxlib versions where it was measured: an XLA that
# does not know a flag aborts the process.
FAST_COMPILE_FLAG = "--xla_cpu_use_fusion_emitters=false"
FAST_COMPILE_JAXLIB = ((0, 10),)

_compile = {"fast_flag": False}


def fast_compile() -> bool:
    """Whether this run compiles with :data:`FAST_COMPILE_FLAG` (the default suite
    on a measured jaxlib). Tests that assert two programs agree bit for bit
    assert it without the flag (``SPARSEGCN_TEST_OPTIMIZE=1``, or the slow tests
    selected), and to a few units in the last place with it."""
    return _compile["fast_flag"]


def _fast_compile_flags() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    bridge = sys.modules.get("jax._src.xla_bridge")
    started = bool(getattr(bridge, "_backends", None))
    version = tuple(int(p) for p in importlib.metadata.version("jaxlib").split(".")[:2])
    if "xla_cpu_use_fusion_emitters" in flags or started or version not in FAST_COMPILE_JAXLIB:
        _compile["fast_flag"] = FAST_COMPILE_FLAG in flags.split()
        return
    os.environ["XLA_FLAGS"] = f"{flags} {FAST_COMPILE_FLAG}"  # the subprocesses' too
    _compile["fast_flag"] = True


def pytest_configure(config):
    """Most XLA optimizations off, and XLA's older and faster-compiling fusion
    emitters, unless the slow tests are selected: they train real models, whose
    optimized code pays for its compile many times over."""
    optimize = os.environ.get("SPARSEGCN_TEST_OPTIMIZE", "0") == "1"
    if optimize or "slow" in config.getoption("markexpr", "").replace("not slow", ""):
        return
    _fast_compile_flags()
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"  # for the tests' subprocesses too
    jax.config.update("jax_disable_most_optimizations", True)


@pytest.fixture(scope="module")
def pyg_nn():
    """``torch_geometric.nn`` for PyG parity tests, or a skip of those tests alone."""
    pytest.importorskip("torch", reason="PyG parity needs torch (never a dependency)")
    return pytest.importorskip(
        "torch_geometric.nn", reason="PyG parity needs torch_geometric (never a dependency)"
    )


def pytest_collection_modifyitems(config, items):
    """Marks ``shared_data`` every test that reads the shared data (``data_root``)."""
    for item in items:
        if "data_root" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.shared_data)


def data_candidates() -> list[Path]:
    """Where the shared test data is looked for, in order."""
    found = [os.environ.get("SPARSEGCN_TEST_DATA"), REPO.parent / "shared" / "data"]
    return [Path(c) for c in found if c]


def shared_data_dir() -> Path | None:
    """The shared test data: ``$SPARSEGCN_TEST_DATA`` or ``../shared/data`` beside the
    checkout, whichever holds ``planetoid/ind.cora.x`` first; ``None`` if neither does."""
    for candidate in data_candidates():
        if (candidate / "planetoid" / "ind.cora.x").exists():
            return candidate
    return None


def missing_data_reason() -> str:
    """Why a test that needs the shared data is skipped, naming where it looked."""
    looked = " and ".join(str(c / "planetoid" / "ind.cora.x") for c in data_candidates())
    return (
        f"shared test data not found: looked for {looked}; set SPARSEGCN_TEST_DATA to the "
        "folder holding planetoid/ind.cora.*"
    )


@pytest.fixture(scope="session")
def data_root() -> Path:
    """Root holding ``planetoid/ind.cora.*`` (read-only: never write here); skips the
    test, naming where it looked, when there is none."""
    root = shared_data_dir()
    if root is None:
        pytest.skip(missing_data_reason())
    return root


@pytest.fixture(scope="session")
def cora(data_root):
    """The Cora :class:`~sparsegcn.datasets.Dataset`, loaded once per session."""
    from sparsegcn.datasets import load

    return load("cora", data_root, download=False)

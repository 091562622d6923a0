"""pytest-benchmark configuration: ``pytest benchmarks/ --benchmark-only [--full]``.

The default size runs in under 10 minutes on a 2-core CPU; ``--full`` goes
to the limits (1M nodes, degree 100, width 256 where memory allows; cases
that do not fit are skipped with the estimate). Compilation never enters
a timed round: each benchmark compiles first, then times the compiled call
with ``block_until_ready``, and records compile time, XLA's peak-memory
estimate, GFLOP/s and the load average in ``extra_info``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import jax
import pytest

from sparsegcn.allocator import keep_freed_memory_unless_disabled

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help="benchmark the full matrix (1M nodes, degree 100, width 256): hours, not minutes",
    )


def pytest_configure(config):
    # As the sparsegcn command does: reuse freed buffers instead of faulting
    # fresh pages in on every call (SPARSEGCN_KEEP_FREED_MEMORY=0 turns it off).
    keep_freed_memory_unless_disabled()
    config.addinivalue_line("markers", "peers: compares with PyTorch Geometric / torch / scipy")


@pytest.fixture(scope="session")
def full(request) -> bool:
    return bool(request.config.getoption("--full"))


def shared_data_root() -> Path | None:
    """The folder holding ``planetoid/ind.cora.*``, as the tests find it, or None."""
    candidates = [
        os.environ.get("SPARSEGCN_TEST_DATA"),
        os.environ.get("SPARSEGCN_DATA"),
        REPO.parent / "shared" / "data",
        REPO / "datasets",
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "planetoid" / "ind.cora.x").exists():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def cora_root() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("Cora files not found: set SPARSEGCN_TEST_DATA to a folder holding planetoid/")
    return root


def run_compiled(benchmark, fn, args, *, rounds: int, extra: dict | None = None):
    """Compiles ``jax.jit(fn)`` for ``args``, then times the compiled call.

    Returns the compiled call's last result.
    """
    from sparsegcn.bench.timing import peak_bytes

    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(*args))  # warm-up outside the timed rounds

    def call():
        return jax.block_until_ready(compiled(*args))

    result = benchmark.pedantic(call, rounds=rounds, warmup_rounds=1, iterations=1)
    benchmark.extra_info.update(
        compile_s=round(compile_s, 3),
        peak_bytes=peak_bytes(compiled),
        load_average=[round(v, 2) for v in os.getloadavg()],
        **(extra or {}),
    )
    return result

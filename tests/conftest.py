"""Test configuration, in the spirit of equinox's: strict and explicit.

- Eight CPU devices are simulated (set before JAX starts) so the parallel
  tests run anywhere.
- NumPy-style implicit dtype and rank promotion raise, so library code must
  say what it means.
- Warnings are errors (``filterwarnings = error`` in pyproject.toml).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"

from pathlib import Path

import jax
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

REPO = Path(__file__).resolve().parents[1]


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

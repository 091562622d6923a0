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


def shared_data_dir() -> Path:
    """The shared test data: ``$SPARSEGCN_TEST_DATA`` or ``../shared/data`` beside the checkout."""
    candidates = [os.environ.get("SPARSEGCN_TEST_DATA"), REPO.parent / "shared" / "data"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "planetoid" / "ind.cora.x").exists():
            return Path(candidate)
    raise FileNotFoundError(
        "shared test data not found: expected ../shared/data/planetoid/ind.cora.* beside the "
        "checkout, or set SPARSEGCN_TEST_DATA to the folder holding planetoid/"
    )


@pytest.fixture(scope="session")
def data_root() -> Path:
    """Root holding ``planetoid/ind.cora.*`` (read-only: never write here)."""
    return shared_data_dir()


@pytest.fixture(scope="session")
def cora(data_root):
    """The Cora :class:`~sparsegcn.datasets.Dataset`, loaded once per session."""
    from sparsegcn.datasets import load

    return load("cora", data_root, download=False)

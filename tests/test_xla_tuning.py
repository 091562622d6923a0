"""XLA flag tuning on import: when it applies, and that it changes no result."""

import os
import subprocess
import sys

import numpy as np
import pytest

from sparsegcn import xla_tuning

PROBE = r"""
import json, os, sys
import sparsegcn, jax, jax.numpy as jnp
from sparsegcn.xla_tuning import status
x = jnp.arange(13264 * 8 * 7, dtype=jnp.float32).reshape(13264, 8, 7) / 1e5
y = jax.jit(lambda x: jnp.sum(jnp.sin(x) * x, axis=-1))(x)
print(json.dumps({"flags": os.environ.get("XLA_FLAGS", ""), **status(), "y": y[:3].tolist()}))
"""


def _probe(**env):
    clean = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", xla_tuning.ENV)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_import_adds_the_flag_on_a_measured_jaxlib_and_results_do_not_change():
    if xla_tuning._jaxlib_version() not in xla_tuning.TESTED_JAXLIB:
        pytest.skip(f"jaxlib {xla_tuning._jaxlib_version()} is not among the measured versions")
    tuned = _probe()
    plain = _probe(**{xla_tuning.ENV: "0"})
    assert tuned["applied"] and xla_tuning.FLAG in tuned["flags"]
    assert not plain["applied"] and xla_tuning.FLAG not in plain["flags"]
    assert "SPARSEGCN_XLA_TUNING='0' (off)" in plain["reason"]
    np.testing.assert_allclose(tuned["y"], plain["y"], rtol=1e-6)


def test_user_flags_and_the_opt_out_are_respected(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=+dot")
    monkeypatch.delenv(xla_tuning.ENV, raising=False)
    assert not xla_tuning.tune_xla_flags()
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_experimental_ynn_fusion_type=+dot"
    assert "already sets" in xla_tuning.status()["reason"]
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    monkeypatch.setenv(xla_tuning.ENV, "0")
    assert not xla_tuning.tune_xla_flags()
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"


def test_unmeasured_jaxlib_is_left_alone(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.delenv(xla_tuning.ENV, raising=False)
    monkeypatch.setattr(xla_tuning, "_jaxlib_version", lambda: (0, 99))
    assert not xla_tuning.tune_xla_flags()
    assert os.environ["XLA_FLAGS"] == ""
    assert "(0, 99)" in xla_tuning.status()["reason"]


def test_started_backends_are_reported_not_silently_claimed(monkeypatch):
    import jax

    jax.devices()  # this test process has started its backend
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setenv(xla_tuning.ENV, "1")
    assert not xla_tuning.tune_xla_flags()
    assert "started" in xla_tuning.status()["reason"]

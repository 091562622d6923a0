"""Parameter initializers."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def glorot_uniform(key: jax.Array, shape: tuple[int, int], dtype=jnp.float32) -> jax.Array:
    """Glorot/Xavier uniform init for a ``[fan_in, fan_out]`` weight.

    .. math:: W_{ij} \\sim U(-a, a), \\quad a = \\sqrt{6 / (\\mathrm{fan_{in}} + \\mathrm{fan_{out}})}

    References:
      Glorot & Bengio, *Understanding the difficulty of training deep
      feedforward neural networks*, AISTATS 2010.
    """
    fan_in, fan_out = shape
    limit = jnp.sqrt(jnp.asarray(6.0 / max(fan_in + fan_out, 1), dtype))
    return jax.random.uniform(key, shape, dtype, -limit, limit)


def linear_params(key: jax.Array, fan_in: int, fan_out: int, *, bias: bool = True) -> dict:
    """``{"w": [fan_in, fan_out] Glorot, "b": [fan_out] zeros}`` (no ``b`` if ``bias=False``)."""
    params = {"w": glorot_uniform(key, (fan_in, fan_out))}
    if bias:
        params["b"] = jnp.zeros((fan_out,), jnp.float32)
    return params

"""Masked node-classification losses and metrics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax


def masked_mean(values: jax.Array, mask: jax.Array | np.ndarray) -> jax.Array:
    """Mean of ``values [N]`` over ``mask [N]`` (bool); 0 for an empty mask."""
    weights = mask.astype(values.dtype)
    return jnp.sum(values * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def masked_cross_entropy(
    logits: jax.Array, labels: jax.Array | np.ndarray, mask: jax.Array | np.ndarray
) -> jax.Array:
    """Mean softmax cross-entropy over the masked nodes.

    .. math:: L = -\\frac{1}{|M|} \\sum_{i \\in M} \\log \\mathrm{softmax}(z_i)_{y_i}

    Args:
      logits: ``[N, C]``.
      labels: int ``[N]``; entries outside the mask may be anything in ``[0, C)``.
      mask: bool ``[N]``.

    Returns:
      Scalar loss.
    """
    safe = jnp.where(mask, labels, 0)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, safe)
    return masked_mean(losses, mask)


def masked_accuracy(
    logits: jax.Array, labels: jax.Array | np.ndarray, mask: jax.Array | np.ndarray
) -> jax.Array:
    """Fraction of masked nodes whose arg-max logit is the label."""
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return masked_mean(correct, mask)

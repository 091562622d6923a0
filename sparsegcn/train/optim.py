"""The optimizer every trainer uses: Adam with masked, injected weight decay."""

from __future__ import annotations

import jax
import optax

from sparsegcn.train.state import TrainConfig


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Adam with L2 weight decay on the layers ``config.decay_layers`` names.

    ``add_decayed_weights`` before ``adam`` is coupled L2 regularisation,
    the same update as PyTorch's ``Adam(weight_decay=...)`` in PyG's example.

    The learning rate and weight decay are injected hyperparameters
    (``optax.inject_hyperparams``): they live in the optimizer state as
    float32 scalars ``opt_state.hyperparams["learning_rate" | "weight_decay"]``,
    so one compiled program can train members with different values
    (:func:`sparsegcn.train.sweep.fit_sweep`) and checkpoints record them.
    The decay term is present whenever ``decay_layers != "none"``, even at
    zero decay (adding ``0 * p`` changes nothing), so every weight decay
    value shares one state structure.
    """

    def decay_mask(p):
        if config.decay_layers == "all":
            return jax.tree.map(lambda _: True, p)
        masked = jax.tree.map(lambda _: False, p)
        if config.decay_layers == "first":
            masked["layers"][0] = jax.tree.map(lambda _: True, p["layers"][0])
        return masked

    def build(learning_rate, weight_decay):
        parts = []
        if config.clip_norm is not None:
            parts.append(optax.clip_by_global_norm(config.clip_norm))
        if config.decay_layers != "none":
            parts.append(optax.masked(optax.add_decayed_weights(weight_decay), decay_mask))
        parts.append(optax.adam(learning_rate))
        return optax.chain(*parts)

    return optax.inject_hyperparams(build)(
        learning_rate=config.learning_rate, weight_decay=config.weight_decay
    )


def apply_optimizer(tx: optax.GradientTransformation, grads, opt_state, params):
    """``tx.update`` then ``apply_updates``; returns ``(params, opt_state)``.

    optax mixes Python floats with int32 step counts (Adam's bias
    correction), which JAX's strict dtype-promotion mode refuses, so its
    update runs under standard promotion whatever the caller's setting.
    """
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

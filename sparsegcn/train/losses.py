"""Masked node losses and metrics: classification and multi-label, and the
:class:`NodeObjective` a node trainer takes them from."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax


def masked_mean(values: jax.Array, mask: jax.Array | np.ndarray) -> jax.Array:
    """Mean of ``values [N]`` over ``mask [N]`` (bool); 0 for an empty mask.

    The nodes outside the mask are selected away, not multiplied by 0: an
    unlabelled node's value may be NaN (a placeholder label outside ``[0, C)``)."""
    weights = mask.astype(values.dtype)
    kept = jnp.where(jnp.asarray(mask, bool), values, jnp.zeros((), values.dtype))
    return jnp.sum(kept) / jnp.maximum(jnp.sum(weights), 1.0)


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


def cross_entropy_per_node(logits: jax.Array, labels: jax.Array | np.ndarray) -> jax.Array:
    """Softmax cross-entropy of each node, ``[N]``, from ``logits [N, C]`` and int ``labels [N]``
    (every entry a class in ``[0, C)``; unlabelled nodes hold any class and are masked later)."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def binary_cross_entropy_per_node(logits: jax.Array, labels: jax.Array | np.ndarray) -> jax.Array:
    """Per-task binary cross-entropy averaged over each node's present labels, ``[N]``.

    .. math::

        l_i = \\frac{1}{|T_i|} \\sum_{t \\in T_i}
            -\\left[y_{it} \\log \\sigma(z_{it}) + (1 - y_{it}) \\log (1 - \\sigma(z_{it}))\\right]

    with :math:`T_i = \\{t : y_{it} \\ge 0\\}` the tasks node ``i`` has a
    label for; a node without any gets 0. With every label present this is
    the mean over tasks that PyTorch's ``BCEWithLogitsLoss`` computes (OGB's
    ogbn-proteins baselines), averaged over nodes afterwards.

    Args:
      logits: ``[N, T]``.
      labels: int ``[N, T]``: 1 positive, 0 negative, -1 missing.

    Returns:
      float32 ``[N]``.
    """
    present = labels >= 0
    losses = optax.sigmoid_binary_cross_entropy(logits, (labels > 0).astype(logits.dtype))
    losses = jnp.where(present, losses, 0.0)
    count = jnp.sum(present, axis=-1).astype(logits.dtype)
    return jnp.sum(losses, axis=-1) / jnp.maximum(count, 1.0)


def masked_binary_cross_entropy(
    logits: jax.Array, labels: jax.Array | np.ndarray, mask: jax.Array | np.ndarray
) -> jax.Array:
    """Mean over the masked nodes of :func:`binary_cross_entropy_per_node` (scalar)."""
    return masked_mean(binary_cross_entropy_per_node(logits, labels), mask)


def masked_roc_auc(
    logits: jax.Array, labels: jax.Array | np.ndarray, mask: jax.Array | np.ndarray
) -> jax.Array:
    """ROC-AUC of each task over the masked nodes' present labels, averaged over tasks.

    :func:`sparsegcn.metrics.roc_auc` per column of ``logits [N, T]``
    (scores on any monotone scale) against ``labels [N, T]`` (1, 0, or -1
    missing), counting node ``i`` in task ``t`` when ``mask[i]`` and
    ``labels[i, t] >= 0``; then :func:`sparsegcn.metrics.mean_over_tasks`
    (tasks with both classes present). This is ``ogb``'s
    ``Evaluator("ogbn-proteins")`` ``rocauc`` on the masked nodes.

    Returns:
      float32 scalar; NaN when no task has both a positive and a negative.
    """
    from sparsegcn.metrics import mean_over_tasks, roc_auc

    labels = jnp.asarray(labels)
    valid = jnp.asarray(mask, bool)[:, None] & (labels >= 0)
    values = roc_auc(logits, (labels > 0).astype(jnp.float32), valid)
    return mean_over_tasks(values, logits, valid)


class NodeObjective(NamedTuple):
    """What a node trainer minimizes and scores: a task's loss and metric.

    The full-batch and sampled trainers read them from here (default
    :data:`CLASSIFICATION`); the task registry (:mod:`sparsegcn.tasks`)
    gives each node task its objective.

    Attributes:
      metric_name: the metric's name in reports (``"acc"``, ``"rocauc"``);
        the trainers' ``*_acc`` fields and the ``val_acc`` monitor hold
        this metric.
      node_losses: ``(logits [N, C], labels) -> [N]`` the loss of each
        node; the full-batch loss is its mean over the train mask, the
        sampled loss its seed-weighted sum.
      metric: ``(logits, labels, mask [N]) -> []``, higher is better.
    """

    metric_name: str
    node_losses: Callable
    metric: Callable

    def loss(self, logits: jax.Array, labels, mask) -> jax.Array:
        """Mean of :attr:`node_losses` over ``mask`` (scalar)."""
        return masked_mean(self.node_losses(logits, labels), mask)


def model_classes(model) -> int | None:
    """``model.config["num_classes"]``, or ``None`` for anything without one (the
    trainers' own checks name a model of the wrong type afterwards)."""
    config = getattr(model, "config", None)
    value = config.get("num_classes") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def chance_loss(metric: str, num_classes) -> float | None:
    """The loss of an uninformative prediction (all logits 0), which bounds the
    divergence guard's reference (:func:`~sparsegcn.train.guard.raise_if_loss_grew`):
    ``ln C`` for softmax cross-entropy over ``C`` classes (metric ``acc``), ``ln 2``
    for binary cross-entropy (``rocauc``, ``ap``); ``None`` otherwise (regression)."""
    if metric in ("rocauc", "ap"):
        return math.log(2.0)
    if metric == "acc" and isinstance(num_classes, int) and num_classes >= 2:
        return math.log(num_classes)
    return None


CLASSIFICATION = NodeObjective("acc", cross_entropy_per_node, masked_accuracy)
"""One class per node: softmax cross-entropy, accuracy."""

MULTILABEL = NodeObjective("rocauc", binary_cross_entropy_per_node, masked_roc_auc)
"""Several binary tasks per node, labels possibly missing: per-task binary
cross-entropy, ROC-AUC averaged over tasks (OGB's ogbn-proteins metric)."""

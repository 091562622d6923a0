"""Graph-level learning: k folds (or an official split) and several seeds as one program.

Every member of the run (one fold, one seed) gets its training graphs
packed into padded batches (:func:`~sparsegcn.batch.pack_graphs`), in
orders drawn from its seed and fold: balanced by size by default
(:func:`~sparsegcn.batch.balanced_order`, with the budget the largest batch
packed, :func:`~sparsegcn.batch.fit_budget`), or random
(``GraphTrainConfig.packing``);
the members' batches stack into ``[M, P, S, D, ...]`` arrays (``P``
packings, ``S`` steps per epoch, ``D`` devices; members with fewer steps get
empty ones, whose steps change nothing). One compiled call runs several
epochs for all members at once: ``vmap`` over members, a ``lax.scan`` over
epochs, inside it a permutation of the steps drawn on the device and a
``lax.scan`` over them, then an evaluation of the fold's held-out
(validation and test) graphs, packed once per fold and shared by the
fold's seeds: the scan collects their scores into ``[G, C]`` by
``graph_ids``, and the dataset's metric
(:data:`METRICS`: accuracy, ROC-AUC, average precision or RMSE, from
:mod:`sparsegcn.metrics`) is taken over each member's validation and test
graphs on the device. Nothing returns to the host between epochs but the
per-epoch metrics.

Three kinds of label (:attr:`~sparsegcn.datasets.graph_dataset.GraphDataset.kind`):

- ``"class"``: softmax cross-entropy per graph, averaged over the real
  graphs of a step;
- ``"binary"``: ``T`` tasks, binary cross-entropy with logits over the
  labelled entries only (NaN labels are missing and masked from the loss and
  the metrics), averaged over the labelled entries of a step, as OGB's mol
  baseline (``BCEWithLogitsLoss`` on ``y[is_labeled]``);
- ``"regression"``: ``T`` real targets, squared error (metric RMSE, as OGB's
  mol baseline: ``MSELoss`` on ``y[is_labeled]``) or absolute error (metric
  MAE, as the ZINC benchmark's ``L1Loss``) over the labelled entries,
  averaged over them; the model's outputs are the predictions.

Model selection is on the dataset's own metric (higher is better, but lower
for RMSE and MAE, :data:`LOWER_IS_BETTER`; ties: the
lower validation loss, then the earlier epoch), as Errica et al. (ICLR 2020)
propose for k folds; the program keeps each member's best params and
batch-norm statistics. Xu et al.'s figure, the epoch whose test accuracy
averaged over the folds is highest, is reported beside it (``cv_curve``); it
is optimistic, as it selects on test data.

Data parallelism (``devices=D``): a step's batch of up to ``batch_size``
graphs is ``D`` padded sub-batches of ``ceil(batch_size / D)`` graphs each,
packed greedily in the same order as one device would pack them, stacked on
a device axis placed with a :class:`~jax.sharding.NamedSharding` over the
mesh's ``sparsegcn.parallel.mesh.AXIS`` (each device holds its own
sub-batch). Inside the compiled step the ``D`` sub-batches are one
block-diagonal batch (:func:`merge_shards`), so XLA's partitioner
all-reduces the gradients and batch norm's sums: batch statistics are over
the whole global batch, as in Xu et al.'s and OGB's code, and a run on
``D`` devices equals a run on one (tested) whenever no sub-batch overflows
its budget (then both step on the same graphs).

References:
  Xu, Hu, Leskovec & Jegelka, *How Powerful are Graph Neural Networks?*,
  ICLR 2019. https://arxiv.org/abs/1810.00826

  Errica, Podda, Bacciu & Micheli, *A Fair Comparison of Graph Neural
  Networks for Graph Classification*, ICLR 2020. https://arxiv.org/abs/1912.09893

  Hu et al., *Open Graph Benchmark*, NeurIPS 2020 (``examples/graphproppred/mol``).
  https://arxiv.org/abs/2005.00687
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from sparsegcn import _checks
from sparsegcn.batch import (
    Budget,
    GraphBatch,
    balanced_order,
    batch_count,
    check_budget,
    check_packing,
    choose_budget,
    fit_budget,
    pack_graphs,
)
from sparsegcn.datasets.graph_dataset import REGRESSION_METRICS
from sparsegcn.metrics import average_precision, mean_over_tasks, roc_auc
from sparsegcn.nn.graph_model import GraphModel
from sparsegcn.train.loop import check_state_memory, compiled_need, drive, refuse_past_memory
from sparsegcn.train.losses import chance_loss
from sparsegcn.train.state import DIVERGENCE_EPOCHS, DIVERGENCE_FACTOR, check_divergence

MAX_PACKINGS = 8
"""The most packings of each member's training graphs (see :func:`member_batches`)."""

PACKING_BYTES = 32 << 20
"""Host and device bytes the packings of one member may take together."""

INNER_VALIDATION = 0.1
"""Fraction of each fold's training graphs held out (stratified) for model selection."""


@dataclasses.dataclass(frozen=True)
class GraphTrainConfig:
    """Settings of :func:`fit_graphs`; the defaults are Xu et al.'s.

    Attributes:
      epochs: passes over each member's training batches (350).
      learning_rate: Adam's initial rate (0.01).
      weight_decay: coupled L2 on every parameter (0).
      halve_every: the rate halves every this many epochs (50; 0: never).
      batch_size: graphs per step, over all devices (32).
      epochs_per_call: epochs per compiled call (default: about 10 calls).
      packings: how many packings of each member's graphs the epochs cycle
        through (default: :func:`packings_for`).
      packing: how graphs are dealt to batches (:data:`~sparsegcn.batch.PACKINGS`):
        ``"balanced"`` (size-stratified, a tighter budget) or ``"random"``.
      divergence_factor, divergence_epochs: the finite divergence guard, as
        :class:`~sparsegcn.train.TrainConfig`'s (``None``: off); a
        non-finite training loss always stops the run
        (:func:`~sparsegcn.train.loop.drive`).
    """

    epochs: int = 350
    learning_rate: float = 0.01
    weight_decay: float = 0.0
    halve_every: int = 50
    batch_size: int = 32
    epochs_per_call: int | None = None
    packings: int | None = None
    packing: str = "balanced"
    divergence_factor: float | None = DIVERGENCE_FACTOR
    divergence_epochs: int = DIVERGENCE_EPOCHS

    def __post_init__(self):
        check_packing(self.packing)
        check_divergence(self.divergence_factor, self.divergence_epochs)
        _checks.check_static_int("epochs", self.epochs, minimum=1)
        _checks.check_static_int("halve_every", self.halve_every, minimum=0)
        _checks.check_static_int("batch_size", self.batch_size, minimum=1)
        if self.packings is not None:
            _checks.check_static_int("packings", self.packings, minimum=1)
        if self.epochs_per_call is not None:
            _checks.check_static_int("epochs_per_call", self.epochs_per_call, minimum=1)
            if self.epochs % self.epochs_per_call:
                raise ValueError(
                    f"epochs_per_call={self.epochs_per_call} must divide epochs={self.epochs}"
                )
        # The shared table (sparsegcn._checks.HYPERPARAMETERS), as TrainConfig's.
        _checks.check_hyperparameters(
            {"learning_rate": self.learning_rate, "weight_decay": self.weight_decay}
        )

    @property
    def chunk(self) -> int:
        """Epochs per compiled call: a divisor of ``epochs`` near a tenth of it."""
        if self.epochs_per_call is not None:
            return self.epochs_per_call
        target = max(1, self.epochs // 10)
        return max(d for d in range(1, target + 1) if self.epochs % d == 0)


# -- splits -------------------------------------------------------------------


def stratified_folds(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """int ``[G]`` fold of each graph: each class shuffled, then dealt round-robin.

    Every fold gets ``⌊n_c / k⌋`` or ``⌈n_c / k⌉`` graphs of each class ``c``.
    NaN labels (missing) are one class of their own, so they too are spread
    evenly over the folds. ``[G, T]`` labels (binary tasks or regression
    targets) are not stratified: the graphs are shuffled and dealt as one class.

    Raises:
      ValueError: fewer graphs than folds, ``folds < 2``, a ``seed`` outside
        ``[0, 2**32)``, or labels neither ``[G]`` nor ``[G, T]``.
      TypeError: ``folds`` or ``seed`` not an integer.
    """
    labels = _check_fold_labels(labels)
    folds = _check_folds(folds, labels.shape[0])
    seed = int(_checks.check_hyperparameter("seed", seed))
    return _stratified_folds(labels, folds, seed)


def _check_fold_labels(labels) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim not in (1, 2):
        raise ValueError(
            f"labels must be [G] (a class per graph) or [G, T] (tasks), got shape {labels.shape}"
        )
    return labels


def _check_folds(folds, num_graphs: int) -> int:
    folds = int(_checks.check_bound("folds", folds, _checks.Bound(int, low=2)))
    if folds > num_graphs:
        raise ValueError(f"folds must be in [2, {num_graphs}] (the graphs), got {folds}")
    return folds


def _stratified_folds(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """:func:`stratified_folds` on checked arguments."""
    if folds < 2 or folds > labels.shape[0]:
        raise ValueError(f"folds must be in [2, {labels.shape[0]}] (the graphs), got {folds}")
    if labels.ndim != 1:
        labels = np.zeros(labels.shape[0], np.int64)
    # Strata in sorted order, every NaN in one (NumPy's equal_nan): NaN == NaN is
    # False, so matching on the values would leave NaN-labelled graphs in no fold.
    _, stratum = np.unique(labels, return_inverse=True)
    stratum = stratum.reshape(-1)
    rng = np.random.default_rng(seed)
    fold = np.full(labels.shape[0], -1, np.int64)
    offset = 0
    for c in range(int(stratum.max()) + 1):
        members = rng.permutation(np.flatnonzero(stratum == c))
        fold[members] = (offset + np.arange(members.shape[0])) % folds
        offset += members.shape[0]
    return fold


class Splits(NamedTuple):
    """Boolean ``[K, G]`` masks over the graphs, one row per fold, and each row's
    fold number ``[K]`` (it seeds the fold's packing order, so a fold trained
    alone packs as it does among the others)."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    fold: np.ndarray


def fold_splits(labels: np.ndarray, folds: int, seed: int) -> Splits:
    """Stratified ``folds``-fold splits, each with an inner validation split.

    Fold ``f`` tests on the graphs of fold ``f``; of the rest,
    :data:`INNER_VALIDATION` (stratified, at least one graph) validate and
    the others train.

    Args:
      labels: ``[G]`` classes (NaN: missing, a stratum of its own) or
        ``[G, T]`` labels (not stratified), as :func:`stratified_folds`.
      folds: ``K``, an integer in ``[2, G]``.
      seed: an integer in ``[0, 2**32)``.

    Raises:
      ValueError, TypeError: as :func:`stratified_folds`, naming the value.
    """
    labels = _check_fold_labels(labels)
    folds = _check_folds(folds, labels.shape[0])
    seed = int(_checks.check_hyperparameter("seed", seed))
    outer = _stratified_folds(labels, folds, seed)
    rows = []
    for f in range(folds):
        test = outer == f
        rest = np.flatnonzero(~test)
        inner_folds = max(2, round(1.0 / INNER_VALIDATION))
        inner = _stratified_folds(labels[rest], min(inner_folds, rest.shape[0]), seed + 1 + f)
        valid = np.zeros_like(test)
        valid[rest[inner == 0]] = True
        rows.append((~test & ~valid, valid, test))
    train, valid, test = (np.stack(r) for r in zip(*rows, strict=True))
    return Splits(train, valid, test, np.arange(folds))


def check_splits(caller: str, splits, num_graphs: int, name: str = "the dataset") -> Splits:
    """``splits`` as a :class:`Splits` of NumPy arrays, if it is one a run can use.

    Every mask must be bool ``[K, G]`` with the same ``K`` (an index array is
    not a mask: ``np.flatnonzero`` of ids would train on the wrong graphs),
    ``fold`` non-negative integers ``[K]``, and every fold must train,
    validate and test on at least one graph (an empty mask scores 0), with
    no graph in two of its splits.

    Raises:
      TypeError: ``splits`` lacks the fields of :class:`Splits`, or a mask is
        not bool; the message names the field, its dtype and shape.
      ValueError: a mask not ``[K, G]``, ``K`` differing between fields,
        a fold with no train, validation or test graph, or a graph in two
        splits of one fold, naming it.
    """
    missing = [field for field in Splits._fields if not hasattr(splits, field)]
    if missing:
        raise TypeError(
            f"{caller}: splits must be a Splits (bool [K, G] masks train, valid, test and "
            f"[K] fold numbers; fold_splits or official_splits make one), got "
            f"{type(splits).__name__}, which lacks {', '.join(missing)}"
        )
    masks: dict[str, np.ndarray] = {}
    for field in ("train", "valid", "test"):
        mask = _checks.as_host(f"splits.{field}", getattr(splits, field))
        if mask.dtype != np.bool_:
            binary = mask.size and np.isin(mask, (0, 1)).all()
            hint = (
                f"; give splits.{field}.astype(bool)"
                if binary and mask.ndim == 2 and mask.shape[1] == num_graphs
                else "; an index array is not a mask: set mask[k, ids] = True in "
                "np.zeros((K, G), bool)"
            )
            raise TypeError(
                f"{caller}: splits.{field} must be a bool [K, {num_graphs}] mask over the "
                f"graphs of {name}, got {mask.dtype} of shape {mask.shape}{hint}"
            )
        if mask.ndim != 2 or mask.shape[1] != num_graphs:
            raise ValueError(
                f"{caller}: splits.{field} must be [K, {num_graphs}] (a row per fold, a column "
                f"per graph of {name}), got shape {mask.shape}"
            )
        if masks and mask.shape[0] != masks["train"].shape[0]:
            raise ValueError(
                f"{caller}: splits.{field} has {mask.shape[0]} fold(s) (shape {mask.shape}) but "
                f"splits.train has {masks['train'].shape[0]} (shape {masks['train'].shape})"
            )
        masks[field] = mask
    folds = masks["train"].shape[0]
    if folds == 0:
        raise ValueError(
            f"{caller}: splits hold no fold (splits.train has shape (0, {num_graphs}))"
        )
    fold = _checks.as_host("splits.fold", splits.fold)
    if (
        fold.shape != (folds,)
        or fold.dtype == np.bool_
        or not np.issubdtype(fold.dtype, np.integer)
    ):
        raise ValueError(
            f"{caller}: splits.fold must be [{folds}] integer fold numbers (one per row of the "
            f"masks), got {fold.dtype} of shape {fold.shape}"
        )
    if (fold < 0).any():
        k = int(np.flatnonzero(fold < 0)[0])
        raise ValueError(f"{caller}: splits.fold[{k}] = {int(fold[k])} must be >= 0")
    for k in range(folds):
        for field, what in (("train", "train"), ("valid", "validate"), ("test", "test")):
            if not masks[field][k].any():
                raise ValueError(
                    f"{caller}: fold {k} has no graph to {what} on (splits.{field}[{k}] is all "
                    f"False); every fold needs train, validation and test graphs"
                )
        for first, second in (("train", "test"), ("train", "valid"), ("valid", "test")):
            shared = np.flatnonzero(masks[first][k] & masks[second][k])
            if shared.size:
                raise ValueError(
                    f"{caller}: fold {k} has graph {int(shared[0])} in both splits.{first} and "
                    f"splits.{second} ({shared.size} graph(s) in both); a graph it trains or "
                    "selects on would be scored as held out"
                )
    return Splits(masks["train"], masks["valid"], masks["test"], fold)


_OUTPUTS = {"class": "classes", "binary": "binary tasks", "regression": "regression targets"}


def check_graph_model(caller: str, model, dataset) -> None:
    """Refuses a model whose input or output width is not the dataset's, before
    anything is compiled (a wrong input width fails deep inside XLA; a wrong
    output width trains silently, or diverges after compiling).

    The model's ``config`` (``in_features``, ``num_classes``, ``feature_dims``)
    is compared with the dataset's feature columns, ``num_classes`` (classes,
    binary tasks or regression targets: the output width every metric of
    :data:`METRICS` reads) and categorical vocabularies.

    Raises:
      ValueError: naming both values and how to build the model.
    """
    settings = getattr(model, "config", None)
    if not isinstance(settings, dict):
        return
    label = f"model {getattr(model, 'name', type(model).__name__)!r}"
    shape = tuple(np.shape(dataset.features))
    in_features = settings.get("in_features")
    if isinstance(in_features, (int, np.integer)) and len(shape) == 2 and shape[1] != in_features:
        raise ValueError(
            f"{caller}: {dataset.name}'s node features have {shape[1]} columns (shape {shape}) "
            f"but {label} was built with in_features={in_features}; build it with "
            f"in_features={shape[1]}"
        )
    outputs = settings.get("num_classes")
    if isinstance(outputs, (int, np.integer)) and outputs != dataset.num_classes:
        what = _OUTPUTS.get(dataset.kind, "outputs")
        raise ValueError(
            f"{caller}: {dataset.name} has {dataset.num_classes} {what} (labels shape "
            f"{np.shape(dataset.labels)}, metric {dataset.metric!r}) but {label} was built "
            f"with num_classes={outputs} outputs; build it with num_classes="
            f"{dataset.num_classes}"
        )
    dims = settings.get("feature_dims")
    if dims is not None:
        have = dataset.feature_dims
        if have is None:
            raise ValueError(
                f"{caller}: {label} embeds categorical node columns (feature_dims={tuple(dims)}) "
                f"but {dataset.name}'s node features are real-valued (feature_dims None); build "
                "it without feature_dims"
            )
        small = [j for j, (d, h) in enumerate(zip(dims, have, strict=False)) if d < h]
        if small:
            j = small[0]
            raise ValueError(
                f"{caller}: {label} has feature_dims[{j}]={dims[j]} categories but "
                f"{dataset.name}'s column {j} takes {have[j]} (feature_dims={tuple(have)}); "
                f"build it with feature_dims={tuple(have)}"
            )


def official_splits(dataset) -> Splits:
    """The dataset's own split (``dataset.split``, e.g. OGB's scaffold split) as one fold.

    Raises:
      ValueError: the dataset has no split, or an index out of range.
    """
    if dataset.split is None:
        raise ValueError(f"{dataset.name} has no official split; use fold_splits")
    masks: list[np.ndarray] = []
    for name in ("train", "valid", "test"):
        index = np.asarray(dataset.split[name], np.int64)
        if index.size and (index.min() < 0 or index.max() >= dataset.num_graphs):
            raise ValueError(
                f"{dataset.name}: split {name!r} holds graph ids outside [0, {dataset.num_graphs})"
            )
        mask = np.zeros((1, dataset.num_graphs), bool)
        mask[0, index] = True
        masks.append(mask)
    return Splits(train=masks[0], valid=masks[1], test=masks[2], fold=np.zeros(1, np.int64))


# -- losses and metrics -------------------------------------------------------


def class_loss(
    logits: jax.Array, labels: jax.Array, mask: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Softmax cross-entropy summed over the graphs in ``mask``, and their count.

    Args:
      logits: ``[G, C]``.
      labels: int ``[G]``.
      mask: bool ``[G]``.

    Returns:
      ``(sum, count)``, float32 scalars.
    """
    safe = jnp.where(mask, labels, 0)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, safe)
    weight = mask.astype(logits.dtype)
    return jnp.sum(losses * weight), jnp.sum(weight)


def binary_loss(
    logits: jax.Array, labels: jax.Array, mask: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Binary cross-entropy with logits summed over the labelled entries of the
    graphs in ``mask``, and their count (OGB's mol baseline divides the one by
    the other).

    .. math::

        \\ell_{gt} = -y_{gt} \\log \\sigma(z_{gt}) - (1 - y_{gt}) \\log(1 - \\sigma(z_{gt})),
        \\qquad (g, t): m_g \\wedge y_{gt} \\ne \\mathrm{NaN}

    Args:
      logits: ``[G, T]``.
      labels: float ``[G, T]``, 0/1, NaN where missing.
      mask: bool ``[G]``.

    Returns:
      ``(sum, count)``, float32 scalars.
    """
    labelled = ~jnp.isnan(labels) & mask[:, None]
    safe = jnp.where(labelled, labels, 0.0).astype(logits.dtype)
    losses = optax.sigmoid_binary_cross_entropy(logits, safe)
    weight = labelled.astype(logits.dtype)
    return jnp.sum(jnp.where(labelled, losses, 0.0)), jnp.sum(weight)


def regression_loss(
    predictions: jax.Array, targets: jax.Array, mask: jax.Array, *, absolute: bool = False
) -> tuple[jax.Array, jax.Array]:
    """Squared (or, with ``absolute``, absolute) error summed over the labelled
    entries of the graphs in ``mask``, and their count (OGB's mol baseline:
    ``MSELoss`` on ``y[is_labeled]``; ZINC's: ``L1Loss``).

    .. math::

        \\ell_{gt} = (z_{gt} - y_{gt})^2 \\ \\text{or}\\ |z_{gt} - y_{gt}|,
        \\qquad (g, t): m_g \\wedge y_{gt} \\ne \\mathrm{NaN}

    Args:
      predictions: ``[G, T]``.
      targets: float ``[G, T]``, NaN where missing.
      mask: bool ``[G]``.

    Returns:
      ``(sum, count)``, float32 scalars.
    """
    labelled = ~jnp.isnan(targets) & mask[:, None]
    safe = jnp.where(labelled, targets, 0.0).astype(predictions.dtype)
    error = predictions - safe
    losses = jnp.abs(error) if absolute else jnp.square(error)
    return jnp.sum(jnp.where(labelled, losses, 0.0)), jnp.sum(labelled.astype(predictions.dtype))


def loss_sums(
    logits: jax.Array, labels: jax.Array, mask: jax.Array, *, metric: str = ""
) -> tuple[jax.Array, jax.Array]:
    """The loss of the labels' kind: :func:`class_loss` for int ``[G]`` labels;
    for ``[G, T]`` labels, :func:`regression_loss` when ``metric`` is one of
    :data:`~sparsegcn.datasets.graph_dataset.REGRESSION_METRICS` (absolute
    error for ``"mae"``), else :func:`binary_loss`."""
    if labels.ndim == 1:
        return class_loss(logits, labels, mask)
    if metric in REGRESSION_METRICS:
        return regression_loss(logits, labels, mask, absolute=metric == "mae")
    return binary_loss(logits, labels, mask)


def graph_loss(logits: jax.Array, batch: GraphBatch, *, metric: str = "") -> jax.Array:
    """The training loss of one padded batch: :func:`loss_sums` over its real
    graphs, divided by the count (0 for an empty batch).

    Args:
      logits: ``[G_b, C]`` (classes or tasks).
      batch: the :class:`~sparsegcn.batch.GraphBatch`.
      metric: the dataset's metric, which names a regression loss.
    """
    total, count = loss_sums(
        logits, jnp.asarray(batch.labels), jnp.asarray(batch.graph_mask), metric=metric
    )
    return total / jnp.maximum(count, 1.0)


def accuracy(scores: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
    """Fraction of the graphs in ``mask`` whose arg-max score is the label.

    Args:
      scores: ``[G, C]``; labels: int ``[G]``; mask: bool ``[G]``.
    """
    correct = (jnp.argmax(scores, axis=-1) == labels) & mask
    return jnp.sum(correct.astype(jnp.float32)) / jnp.maximum(
        jnp.sum(mask.astype(jnp.float32)), 1.0
    )


def _task_metric(fn: Callable) -> Callable:
    def metric(scores: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
        labelled = ~jnp.isnan(labels) & mask[:, None]
        values = fn(scores, jnp.where(labelled, labels, 0.0), labelled)
        return mean_over_tasks(values, scores, labelled)

    return metric


rocauc = _task_metric(roc_auc)
rocauc.__doc__ = """ROC-AUC of each task over the labelled entries of the graphs in ``mask``,
averaged over the tasks where it is defined (ogb's ``rocauc``).

Args:
  scores: ``[G, T]`` (logits or probabilities); labels: float ``[G, T]``, NaN
  missing; mask: bool ``[G]``."""
rocauc.__name__ = rocauc.__qualname__ = "rocauc"

ap = _task_metric(average_precision)
ap.__doc__ = """Average precision, as :func:`rocauc` averages ROC-AUC (ogb's ``ap``)."""
ap.__name__ = ap.__qualname__ = "ap"


def _per_task_error(predictions, targets, mask, absolute: bool) -> jax.Array:
    """float ``[T]``: the mean squared (or absolute) error of each task over the
    labelled entries of the graphs in ``mask``; NaN for a task without one."""
    labelled = ~jnp.isnan(targets) & mask[:, None]
    safe = jnp.where(labelled, targets, 0.0).astype(predictions.dtype)
    error = jnp.where(labelled, predictions - safe, 0.0)
    count = jnp.sum(labelled.astype(predictions.dtype), axis=0)
    losses = jnp.abs(error) if absolute else jnp.square(error)
    mean = jnp.sum(losses, axis=0) / jnp.maximum(count, 1.0)
    return jnp.where(count > 0, mean, jnp.nan)


def mae(predictions: jax.Array, targets: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean absolute error of each task over the labelled entries of the graphs in
    ``mask``, averaged over the tasks that have one.

    NaN when a labelled prediction is NaN (a diverged task counts, as in ``ogb``, and
    never drops out of the mean): only a task without a labelled entry is left out.

    Args:
      predictions: ``[G, T]``; targets: float ``[G, T]``, NaN missing; mask: bool ``[G]``.
    """
    values = _per_task_error(predictions, targets, mask, absolute=True)
    # A task's error is NaN without a labelled entry (left out of the mean) or with a
    # NaN prediction (the mean is NaN). mean_over_tasks leaves out every NaN value;
    # given the values as its scores too, with the labelled tasks as their mask, it
    # makes a labelled task's NaN the mean's.
    labelled = jnp.any(~jnp.isnan(targets) & mask[:, None], axis=0)
    return mean_over_tasks(values, values, labelled)


def rmse(predictions: jax.Array, targets: jax.Array, mask: jax.Array) -> jax.Array:
    """Root mean squared error of each task over the labelled entries of the graphs
    in ``mask``, averaged over the tasks that have one (ogb's ``rmse``).

    .. math::

        \\frac{1}{T} \\sum_t \\sqrt{\\frac{1}{|L_t|} \\sum_{g \\in L_t} (z_{gt} - y_{gt})^2},
        \\qquad L_t = \\{g : m_g \\wedge y_{gt} \\ne \\mathrm{NaN}\\}

    NaN when a labelled prediction is NaN, as :func:`mae`.

    Args:
      predictions: ``[G, T]``; targets: float ``[G, T]``, NaN missing; mask: bool ``[G]``.
    """
    values = jnp.sqrt(_per_task_error(predictions, targets, mask, absolute=False))
    labelled = jnp.any(~jnp.isnan(targets) & mask[:, None], axis=0)
    return mean_over_tasks(values, values, labelled)


METRICS: Mapping[str, Callable[[jax.Array, jax.Array, jax.Array], jax.Array]] = {
    "acc": accuracy,
    "rocauc": rocauc,
    "ap": ap,
    "rmse": rmse,
    "mae": mae,
}
"""``metric(scores [G, C], labels, mask [G]) -> []`` by the name a dataset gives
(``GraphDataset.metric``); higher is better but for :data:`LOWER_IS_BETTER`."""

LOWER_IS_BETTER = REGRESSION_METRICS
"""The metrics of :data:`METRICS` that model selection minimises (RMSE, MAE)."""


def selection_score(metric: str, values):
    """What model selection maximises: the values of ``metric``, negated for
    :data:`LOWER_IS_BETTER`, with NaN as ``-inf`` (NumPy or JAX arrays alike)."""
    xp = jnp if isinstance(values, jax.Array) else np
    signed = -values if metric in LOWER_IS_BETTER else values
    return xp.where(xp.isnan(signed), -xp.inf, signed)


# -- state and results --------------------------------------------------------


class MemberState(NamedTuple):
    """One member's training state (a leading ``[M]`` axis when stacked).

    Attributes:
      params, stats, opt_state: the model's params, its batch-norm running
        statistics and Adam's state.
      key: the member's PRNG key (split every epoch).
      best_params, best_stats: at ``best_epoch``.
      best_metric: float32 ``[]`` :func:`selection_score` of the validation
        metric at ``best_epoch`` (the metric, negated for RMSE; NaN counts as
        ``-inf``); ``-inf`` before the first epoch.
      best_loss: float32 ``[]`` validation loss there; ``+inf`` before.
      best_epoch: int32 ``[]`` 0-based; ``-1`` before the first epoch.
    """

    params: Any
    stats: Any
    opt_state: Any
    key: jax.Array
    best_params: Any
    best_stats: Any
    best_metric: jax.Array
    best_loss: jax.Array
    best_epoch: jax.Array


class Curves(NamedTuple):
    """Per-epoch metrics, ``[epochs, M]`` each; ``*_metric`` is the dataset's own
    (:data:`METRICS`: accuracy for class labels)."""

    train_loss: np.ndarray
    val_loss: np.ndarray
    val_metric: np.ndarray
    test_metric: np.ndarray


class GraphCheckpointState(NamedTuple):
    """What a graph run's checkpoint holds (see :mod:`sparsegcn.train.checkpoint`).

    Attributes:
      members: the :class:`MemberState` of every member, ``[M]`` leading.
      epoch: int32 ``[M]`` epochs trained.
      done: bool ``[M]``, every member reached the run's last epoch.
    """

    members: MemberState
    epoch: jax.Array
    done: jax.Array


@dataclasses.dataclass(frozen=True)
class GraphFitResult:
    """What :func:`fit_graphs` measured.

    Attributes:
      folds: ``K``; seeds: the seeds; members are fold-major (``m = f S + s``).
      metric: the metric's name (:data:`METRICS`).
      curves: :class:`Curves`.
      best_epoch: int ``[M]`` (0-based) chosen on validation.
      test_metric: ``[M]`` at ``best_epoch``; val_metric likewise.
      budget: the :class:`~sparsegcn.batch.Budget` of one device's sub-batch.
      batches_per_epoch: steps per member and epoch.
      node_fill, edge_fill: real node rows (edge slots) of the training
        steps over all their rows (slots), empty steps of members with fewer
        steps included: the share of the training compute that is not
        padding.
      packing: ``"balanced"`` or ``"random"`` (:data:`~sparsegcn.batch.PACKINGS`).
      packings: packings of each member's graphs, used in turn by the epochs.
      train_graphs: ``[M]`` training graphs per member.
      train_s: seconds of the compiled calls after compilation.
      epoch_s: each compiled call's seconds per epoch (its training steps
        and its evaluation; the epochs of a call run in one program).
      compile_s: seconds compiling.
      compiles: how many times the epoch program was traced (1).
      devices: devices each step's batch is split over.
      state: the final :class:`MemberState` (``[M]`` leading).
      start_epoch: the epoch training resumed from (0: a fresh run).
    """

    folds: int
    seeds: tuple[int, ...]
    metric: str
    curves: Curves
    best_epoch: np.ndarray
    test_metric: np.ndarray
    val_metric: np.ndarray
    budget: Budget
    batches_per_epoch: int
    packings: int
    train_graphs: np.ndarray
    train_s: float
    compile_s: float
    compiles: int
    devices: int = 1
    state: Any = None
    start_epoch: int = 0
    node_fill: float = float("nan")
    edge_fill: float = float("nan")
    packing: str = "balanced"
    epoch_s: tuple[float, ...] = ()

    @property
    def member_seeds(self) -> list[int]:
        """The seed of every member, fold-major."""
        return list(self.seeds) * self.folds

    @property
    def train_graphs_per_s(self) -> float:
        """Training graphs processed per second, all members and epochs, after compiling."""
        epochs = self.curves.train_loss.shape[0] - self.start_epoch
        total = float(self.train_graphs.sum()) * epochs
        return total / self.train_s if self.train_s > 0 else float("nan")


def _optimizer(config: GraphTrainConfig) -> optax.GradientTransformation:
    parts = []
    if config.weight_decay:
        parts.append(optax.add_decayed_weights(config.weight_decay))
    parts.append(optax.scale_by_adam())
    return optax.chain(*parts)


def init_member(model: GraphModel, config: GraphTrainConfig, key: jax.Array) -> MemberState:
    """A member's state before its first epoch, from its seed's key."""
    init_key, run_key = jax.random.split(key)
    params, stats = model.init(init_key)
    return MemberState(
        params,
        stats,
        _optimizer(config).init(params),
        run_key,
        params,
        stats,
        jnp.float32(-jnp.inf),
        jnp.float32(jnp.inf),
        jnp.int32(-1),
    )


def member_template(model: GraphModel, config: GraphTrainConfig, members: int) -> MemberState:
    """The shapes and dtypes of ``members`` stacked states (no arrays built)."""
    keys = jax.ShapeDtypeStruct((members,), jax.random.key(0).dtype)
    return jax.eval_shape(jax.vmap(lambda k: init_member(model, config, k)), keys)


def checkpoint_template(model: GraphModel, config: GraphTrainConfig, members: int) -> Any:
    """The :class:`GraphCheckpointState` a checkpoint of ``members`` members
    holds, as ``jax.ShapeDtypeStruct`` leaves (for
    :func:`~sparsegcn.train.checkpoint.load_checkpoint`)."""
    return GraphCheckpointState(
        member_template(model, config, members),
        jax.ShapeDtypeStruct((members,), jnp.int32),  # type: ignore[arg-type]
        jax.ShapeDtypeStruct((members,), jnp.bool_),  # type: ignore[arg-type]
    )


# -- batches over devices -----------------------------------------------------


def device_batch_size(batch_size: int, devices: int) -> int:
    """Graphs per device and step, ``ceil(batch_size / devices)``."""
    return -(-int(batch_size) // int(devices))


def step_group(group: int | None, batch_size: int, devices: int) -> int | None:
    """The ``group`` :func:`pack_steps` cuts sub-batches with: ``group``, or
    ``batch_size`` where ``devices`` does not divide it, so that a step's ``D``
    sub-batches of at most ``ceil(B / D)`` graphs hold ``B`` graphs, not
    ``D ceil(B / D)`` (7 graphs on 2 devices: 4 and 3, then the next 7)."""
    if group is None and int(batch_size) % int(devices):
        return int(batch_size)
    return group


def merge_shards(batch: GraphBatch) -> GraphBatch:
    """``D`` padded sub-batches (every leaf ``[D, ...]``) as one block-diagonal batch.

    Node rows, edge slots and graph slots are concatenated in device order;
    senders, receivers and ``node_graph`` are offset by ``d N_b`` and
    ``d G_b``. Each sub-batch keeps its own padding graph and padding node, so
    the merged batch has ``D`` padding graph slots (``graph_mask`` false) and
    padding edges of sub-batch ``d`` loop on its last node: nothing reaches
    a real graph from padding.

    Returns:
      A :class:`~sparsegcn.batch.GraphBatch` of ``D N_b`` nodes, ``D E_b``
      edges and ``D G_b`` graph slots.
    """
    d, n = batch.x.shape[0], batch.x.shape[1]
    g = batch.graph_mask.shape[1]
    node_offset = (jnp.arange(d, dtype=jnp.int32) * n)[:, None]
    graph_offset = (jnp.arange(d, dtype=jnp.int32) * g)[:, None]

    def flat(a):
        return None if a is None else jnp.reshape(a, (a.shape[0] * a.shape[1], *a.shape[2:]))

    merged = {name: flat(getattr(batch, name)) for name in GraphBatch._fields}
    merged["senders"] = flat(batch.senders + node_offset)
    merged["receivers"] = flat(batch.receivers + node_offset)
    merged["node_graph"] = flat(batch.node_graph + graph_offset)
    return GraphBatch(**merged)


def pack_steps(
    dataset,
    order: np.ndarray,
    budget: Budget,
    batch_size: int,
    devices: int = 1,
    *,
    num_steps: int | None = None,
    group: int | None = None,
) -> GraphBatch:
    """The graphs ``order`` packed as steps of ``devices`` sub-batches: leaves ``[S, D, ...]``.

    Sub-batches of ``device_batch_size(batch_size, devices)`` graphs are
    packed greedily in order (:func:`~sparsegcn.batch.pack_graphs`) and dealt
    ``D`` to a step, so one device's step ``s`` holds the graphs
    ``[s B, (s + 1) B)`` exactly as ``D`` devices' step ``s`` does when no
    sub-batch overflows its budget. ``group``: no sub-batch spans a multiple
    of ``group`` graphs (a balanced order's batches, ``group=batch_size``).
    Where ``devices`` does not divide ``batch_size`` the group is
    ``batch_size`` whatever is passed (:func:`step_group`): ``D`` sub-batches of
    ``ceil(B / D)`` graphs would hold more than ``B``.
    """
    per_device = device_batch_size(batch_size, devices)
    group = step_group(group, batch_size, devices)
    count = batch_count(dataset, order, budget, per_device, group=group)
    steps = -(-count // devices) if num_steps is None else num_steps
    packed = pack_graphs(
        dataset, order, budget, per_device, num_batches=steps * devices, group=group
    )
    return jax.tree.map(lambda a: a.reshape((steps, devices, *a.shape[1:])), packed)


def step_count(
    dataset,
    order: np.ndarray,
    budget: Budget,
    batch_size: int,
    devices: int,
    *,
    group: int | None = None,
) -> int:
    """How many steps :func:`pack_steps` makes of ``order``."""
    per_device = device_batch_size(batch_size, devices)
    group = step_group(group, batch_size, devices)
    return -(-batch_count(dataset, order, budget, per_device, group=group) // devices)


def _constrain(tree, mesh: Mesh | None):
    """Pins the device axis (axis 0) of every leaf to the mesh's devices."""
    if mesh is None:
        return tree
    from sparsegcn.parallel.mesh import AXIS

    sharding = NamedSharding(mesh, P(AXIS))
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)


# -- the compiled epochs ------------------------------------------------------


def _better(score, loss, best_score, best_loss):
    return (score > best_score) | ((score == best_score) & (loss < best_loss))


def make_epochs_fn(
    model: GraphModel,
    config: GraphTrainConfig,
    num_epochs: int,
    *,
    metric: str = "acc",
    num_graphs: int,
    mesh: Mesh | None = None,
):
    """``run(state, train, eval_batches, labels, valid, test, first_epoch) -> (state,
    metrics [num_epochs, 4])`` for one member: ``num_epochs`` epochs of training
    and evaluation.

    ``train`` is the member's ``[P, S, D, ...]`` batches (:func:`member_batches`),
    ``eval_batches`` ``[S_e, D, ...]`` batches holding at least the graphs of
    ``valid`` and ``test`` (:func:`fit_graphs`: its fold's), ``labels`` the dataset's
    (int ``[G]`` or float ``[G, T]``), ``valid``/``test`` bool ``[G]`` masks
    over the dataset's graphs, ``first_epoch`` the index of the first epoch
    (for the learning-rate schedule and the best epoch). The metrics are
    train loss, validation loss, validation and test ``metric``. ``vmap`` it
    over members. ``mesh``: the devices the ``D`` axis is split over.
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
    metric_fn = METRICS[metric]
    tx = _optimizer(config)

    def step_batch(train: GraphBatch, packing, b) -> GraphBatch:
        return merge_shards(_constrain(jax.tree.map(lambda a: a[packing, b], train), mesh))

    def train_epoch(state: MemberState, train: GraphBatch, epoch: jax.Array):
        key, perm_key, drop_key = jax.random.split(state.key, 3)
        packings, num_steps = train.graph_mask.shape[:2]
        packing = epoch % packings
        order = jax.random.permutation(perm_key, num_steps)
        halvings = epoch // config.halve_every if config.halve_every else jnp.zeros((), jnp.int32)
        lr = config.learning_rate * jnp.power(jnp.float32(0.5), halvings.astype(jnp.float32))

        def body(carry, inputs):
            params, stats, opt_state = carry
            b, k = inputs
            batch = step_batch(train, packing, b)

            def loss_fn(p):
                logits, new_stats = model.apply(p, stats, batch, key=k, training=True)
                total, count = loss_sums(logits, batch.labels, batch.graph_mask, metric=metric)
                return total / jnp.maximum(count, 1.0), (new_stats, count)

            (loss, (new_stats, count)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
            with jax.numpy_dtype_promotion("standard"):
                updates, new_opt = tx.update(grads, opt_state, params)
            new_params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
            real = count > 0  # an empty step (padding only) changes nothing

            def keep(new, old):
                return jax.tree.map(lambda n, o: jnp.where(real, n, o), new, old)

            carry = (keep(new_params, params), keep(new_stats, stats), keep(new_opt, opt_state))
            return carry, (loss * count, count)

        keys = jax.random.split(drop_key, num_steps)
        (params, stats, opt_state), (losses, counts) = jax.lax.scan(
            body, (state.params, state.stats, state.opt_state), (order, keys)
        )
        mean_loss = jnp.sum(losses) / jnp.maximum(jnp.sum(counts), 1.0)
        return state._replace(params=params, stats=stats, opt_state=opt_state, key=key), mean_loss

    def scores_of(params, stats, eval_batches: GraphBatch) -> jax.Array:
        def body(_, sub):
            batch = merge_shards(_constrain(sub, mesh))
            logits, _ = model.apply(params, stats, batch, training=False)
            return None, (logits, batch.graph_ids)

        _, (logits, ids) = jax.lax.scan(body, None, eval_batches)
        logits = logits.reshape(-1, logits.shape[-1])
        ids = ids.reshape(-1)
        ids = jnp.where(ids >= 0, ids, num_graphs)  # padding slots: dropped below
        empty = jnp.zeros((num_graphs, logits.shape[-1]), logits.dtype)
        return empty.at[ids].set(logits, mode="drop")

    def evaluate(params, stats, eval_batches, labels, valid, test):
        scores = scores_of(params, stats, eval_batches)
        total, count = loss_sums(scores, labels, valid, metric=metric)
        val_loss = total / jnp.maximum(count, 1.0)
        return val_loss, metric_fn(scores, labels, valid), metric_fn(scores, labels, test)

    def run(state: MemberState, train, eval_batches, labels, valid, test, first_epoch):
        def one(state: MemberState, epoch):
            state, train_loss = train_epoch(state, train, epoch)
            val_loss, val_metric, test_metric = evaluate(
                state.params, state.stats, eval_batches, labels, valid, test
            )
            score = selection_score(metric, val_metric)
            better = _better(score, val_loss, state.best_metric, state.best_loss)

            def pick(new, old):
                return jax.tree.map(lambda n, o: jnp.where(better, n, o), new, old)

            state = state._replace(
                best_params=pick(state.params, state.best_params),
                best_stats=pick(state.stats, state.best_stats),
                best_metric=jnp.where(better, score, state.best_metric),
                best_loss=jnp.where(better, val_loss, state.best_loss),
                best_epoch=jnp.where(better, epoch, state.best_epoch),
            )
            return state, jnp.stack([train_loss, val_loss, val_metric, test_metric])

        epochs = first_epoch + jnp.arange(num_epochs, dtype=jnp.int32)
        return jax.lax.scan(one, state, epochs)

    return run


def packings_for(dataset, budget: Budget, train_graphs: int, batch_size: int) -> int:
    """How many packings of a member's training graphs to prepare: up to
    :data:`MAX_PACKINGS`, within :data:`PACKING_BYTES` per member."""
    batches = -(-train_graphs // batch_size)
    width = dataset.features.shape[1] + 1
    edge_width = 8 + 4 * (0 if dataset.edge_features is None else dataset.edge_features.shape[1])
    labels = 4 * (1 if np.ndim(dataset.labels) == 1 else np.shape(dataset.labels)[1]) + 9
    one = batches * (4 * width * budget.nodes + edge_width * budget.edges + labels * budget.graphs)
    return int(max(1, min(MAX_PACKINGS, PACKING_BYTES // max(one, 1))))


def packing_order(
    dataset,
    graphs: np.ndarray,
    batch_size: int,
    rng: np.random.Generator,
    *,
    packing: str = "balanced",
    devices: int = 1,
) -> np.ndarray:
    """The graphs ``graphs`` in one packing's order, drawn from ``rng``.

    ``"random"``: a permutation; ``"balanced"``:
    :func:`~sparsegcn.batch.balanced_order` over global batches of
    ``batch_size`` graphs, each of ``devices`` balanced sub-batches. Pack it
    with ``group=`` :func:`packing_group`.
    """
    graphs = np.asarray(graphs, np.int64)
    if check_packing(packing) == "random":
        return rng.permutation(graphs)
    nodes = dataset.nodes_per_graph()[graphs]
    edges = dataset.edges_per_graph()[graphs]
    return graphs[balanced_order(nodes, edges, batch_size, rng=rng, devices=devices)]


def packing_group(packing: str, batch_size: int) -> int | None:
    """The ``group`` that :func:`pack_steps` packs a ``packing`` order with:
    ``batch_size`` for a balanced order (a split batch shifts no later one),
    ``None`` for a random one."""
    return batch_size if check_packing(packing) == "balanced" else None


def member_orders(
    dataset,
    splits: Splits,
    seeds: Sequence[int],
    batch_size: int,
    packings: int = 1,
    devices: int = 1,
    *,
    packing: str = "balanced",
) -> list[list[np.ndarray]]:
    """Every member's ``packings`` orders of its training graphs (:func:`packing_order`),
    drawn from ``default_rng([seed, fold])``; members fold-major."""
    orders = []
    for f in range(splits.train.shape[0]):
        graphs = np.flatnonzero(splits.train[f])
        for s in seeds:
            rng = np.random.default_rng([s, int(splits.fold[f])])
            orders.append(
                [
                    packing_order(
                        dataset, graphs, batch_size, rng, packing=packing, devices=devices
                    )
                    for _ in range(packings)
                ]
            )
    return orders


def member_batches(
    dataset,
    splits: Splits,
    seeds: Sequence[int],
    budget: Budget,
    batch_size: int,
    packings: int = 1,
    devices: int = 1,
    *,
    packing: str = "balanced",
    orders: Sequence[Sequence[np.ndarray]] | None = None,
) -> tuple[GraphBatch, np.ndarray]:
    """Every member's training graphs packed ``packings`` times, stacked
    ``[M, P, S, D, ...]``; and ``[M]`` counts.

    Members are fold-major; each packs its graphs in orders drawn from its
    seed and fold (:func:`member_orders`, or ``orders`` as it returns them),
    so a member packs the same whatever else trains beside it. Epoch ``e``
    steps on packing ``e mod P``, its steps in an order the device draws, so
    batches change composition as well as order. A step is ``D``
    sub-batches (:func:`pack_steps`) of a global batch of ``batch_size``
    graphs.
    """
    if orders is None:
        orders = member_orders(
            dataset, splits, seeds, batch_size, packings, devices, packing=packing
        )
    group = packing_group(packing, batch_size)
    most = max(
        step_count(dataset, o, budget, batch_size, devices, group=group)
        for member in orders
        for o in member
    )
    members = []
    for member in orders:
        packed = [
            pack_steps(dataset, o, budget, batch_size, devices, num_steps=most, group=group)
            for o in member
        ]
        members.append(jax.tree.map(lambda *a: np.stack(a), *packed))
    stacked = jax.tree.map(lambda *a: np.stack(a), *members)
    return stacked, np.array([member[0].shape[0] for member in orders], np.int64)


def fold_eval_batches(
    dataset,
    splits: Splits,
    budget: Budget,
    batch_size: int,
    devices: int = 1,
    *,
    packing: str = "balanced",
) -> GraphBatch:
    """Each fold's held-out (validation and test) graphs packed, stacked ``[K, S_e, D, ...]``.

    A fold scores only its own held-out graphs, not every graph of the
    dataset. ``"random"`` packs them in id order, ``"balanced"`` in a
    balanced order drawn from the fold's number.
    """
    group = packing_group(packing, batch_size)
    orders = []
    for f in range(splits.train.shape[0]):
        graphs = np.flatnonzero(splits.valid[f] | splits.test[f])
        if packing == "balanced":
            rng = np.random.default_rng([int(splits.fold[f]), 1 << 20])
            graphs = packing_order(dataset, graphs, batch_size, rng, devices=devices)
        orders.append(graphs)
    most = max(
        max(step_count(dataset, o, budget, batch_size, devices, group=group) for o in orders), 1
    )
    packed = [
        pack_steps(dataset, o, budget, batch_size, devices, num_steps=most, group=group)
        for o in orders
    ]
    return jax.tree.map(lambda *a: np.stack(a), *packed)


def train_fill(
    dataset, splits: Splits, seeds: Sequence[int], train: GraphBatch
) -> tuple[float, float]:
    """``(node_fill, edge_fill)`` of stacked ``[M, P, S, D, ...]`` training batches:
    the members' real nodes (edges) per epoch over the rows (slots) their steps compute."""
    members, _, steps, devices, rows = np.shape(train.x)[:5]
    slots = np.shape(train.senders)[-1]
    nodes, edges = dataset.nodes_per_graph(), dataset.edges_per_graph()
    fold_nodes = np.array([nodes[splits.train[f]].sum() for f in range(splits.train.shape[0])])
    fold_edges = np.array([edges[splits.train[f]].sum() for f in range(splits.train.shape[0])])
    per = len(seeds)
    real_nodes, real_edges = float(fold_nodes.sum()) * per, float(fold_edges.sum()) * per
    return (
        real_nodes / (members * steps * devices * rows),
        real_edges / max(members * steps * devices * slots, 1),
    )


def select_best(curves: Curves, metric: str = "acc") -> np.ndarray:
    """int ``[M]``: each member's epoch of best validation ``metric`` (highest, or
    lowest for :data:`LOWER_IS_BETTER`; NaN counts as worst; ties: lower
    validation loss, then earlier), as the program tracks it."""
    best = []
    score = selection_score(metric, np.asarray(curves.val_metric))
    for m in range(score.shape[1]):
        order = np.lexsort((np.arange(score.shape[0]), curves.val_loss[:, m], -score[:, m]))
        best.append(int(order[0]))
    return np.asarray(best, np.int64)


def _place(tree, mesh: Mesh | None, spec=None):
    if mesh is None:
        return jax.device_put(tree)
    from sparsegcn.parallel.mesh import put

    return put(tree, mesh, spec)


def check_program_memory(
    compiled, budget: Budget, members: int, batch_size: int, *, available: int | None = -1
) -> None:
    """Refuses a compiled training program that needs more memory than is free,
    before it runs (XLA's buffer assignment, ``compiled.memory_analysis()``: its
    temporaries and outputs, less the state it updates in place; the arguments
    are on the device already).

    Args:
      compiled: the compiled program.
      budget: the padded batch it trains on; ``members`` the folds x seeds it trains.
      batch_size: the graphs a batch packs (named in the message).
      available: free bytes; ``-1`` asks the default device
        (:func:`sparsegcn.bench.runner.available_memory`), ``None`` skips the check.

    Raises:
      ValueError: naming the need, what is free and what to lower.
    """
    refuse_past_memory(
        compiled_need(compiled),
        "this graph run's compiled program",
        "lower --batch-size, --hidden, --folds or --seeds",
        detail=(
            f" more (XLA's buffer assignment: {members} member(s) (folds x seeds) on batches "
            f"of up to {batch_size} graphs, padded to {budget.nodes} nodes and "
            f"{budget.edges} edges)"
        ),
        available=available,
    )


def fit_graphs(
    model: GraphModel,
    dataset,
    config: GraphTrainConfig,
    splits: Splits,
    *,
    seeds: Sequence[int] = (0,),
    budget: Budget | None = None,
    devices: int | Mesh = 1,
    state: MemberState | None = None,
    history: Mapping[str, np.ndarray] | None = None,
    on_chunk: Callable[[GraphCheckpointState, dict], None] | None = None,
    progress: bool = False,
) -> GraphFitResult:
    """Trains every (fold, seed) member of ``splits`` x ``seeds`` as one program.

    Args:
      model: a :class:`~sparsegcn.nn.graph_model.GraphModel`; its output width
        is the dataset's ``num_classes`` (classes, or binary tasks).
      dataset: a :class:`~sparsegcn.datasets.graph_dataset.GraphDataset`; its
        ``metric`` selects the model and is reported.
      config: :class:`GraphTrainConfig`.
      splits: :class:`Splits` (``[K, G]`` masks): :func:`fold_splits` or
        :func:`official_splits`.
      seeds: parameter, dropout and shuffling seeds of every fold.
      budget: one device's sub-batch budget; default: for
        ``config.packing="balanced"``, the largest sub-batch the members'
        packings hold (:func:`~sparsegcn.batch.fit_budget`: no training batch
        is split), else :func:`~sparsegcn.batch.choose_budget` for
        ``device_batch_size(config.batch_size, D)`` graphs.
      devices: ``D`` (local devices of every process: in a multi-process
        run, ``D`` times the processes) or a mesh from
        :func:`~sparsegcn.parallel.make_mesh`: each step's batch is split
        over them (see the module's docstring).
      state: resume from this :class:`MemberState` (``[M]`` leading), after
        ``history``'s epochs.
      history: the resumed run's curves so far, ``{Curves field: [epochs, M]}``.
      on_chunk: called after every compiled call with the
        :class:`GraphCheckpointState` and the curves so far (checkpoints).
      progress: show a progress bar (:func:`~sparsegcn.train.loop.drive`).

    Returns:
      A :class:`GraphFitResult`.

    Raises:
      ValueError, TypeError: before anything is compiled: a model whose
        ``in_features`` or ``num_classes`` is not the dataset's
        (:func:`check_graph_model`), ``splits`` that are not bool ``[K, G]``
        masks with a train, validation and test graph in every fold
        (:func:`check_splits`), a bad config or seed; each names the value.
    """
    config = _checks.check_config("fit_graphs", config, GraphTrainConfig, optional=False)
    if budget is not None:
        budget = check_budget(budget)
    seeds = _checks.check_seeds("fit_graphs", seeds)
    metric = dataset.metric
    if metric not in METRICS:
        raise ValueError(f"{dataset.name}: metric must be one of {list(METRICS)}, got {metric!r}")
    check_graph_model("fit_graphs", model, dataset)
    splits = check_splits("fit_graphs", splits, dataset.num_graphs, dataset.name)
    from sparsegcn.parallel.mesh import as_mesh

    # D local devices of every process (several processes: one mesh over all of them).
    whole = as_mesh(devices)
    num_devices = whole.size
    mesh: Mesh | None = None if num_devices == 1 else whole
    per_device = device_batch_size(config.batch_size, num_devices)
    nodes, edges = dataset.nodes_per_graph(), dataset.edges_per_graph()
    # From the whole dataset's size (and a random batch's budget, the larger),
    # so that a fold packs alike alone or among others.
    packings = config.packings or packings_for(
        dataset,
        budget if budget is not None else choose_budget(nodes, edges, per_device),
        dataset.num_graphs,
        per_device,
    )
    orders = member_orders(
        dataset, splits, seeds, config.batch_size, packings, num_devices, packing=config.packing
    )
    group = packing_group(config.packing, config.batch_size)
    if budget is None and config.packing == "balanced":
        budget = fit_budget(
            nodes, edges, [o for member in orders for o in member], per_device, group=group
        )
        # The held-out graphs are packed under it too: the largest may be in none of the
        # training batches (a graph larger than the budget cannot be packed at all).
        budget = budget._replace(
            nodes=max(budget.nodes, -(-max(int(nodes.max()), 1) // 8) * 8 + 1),
            edges=max(budget.edges, -(-max(int(edges.max()), 1) // 8) * 8),
        )
    elif budget is None:
        budget = choose_budget(nodes, edges, per_device)
    train, train_graphs = member_batches(
        dataset,
        splits,
        seeds,
        budget,
        config.batch_size,
        packings,
        num_devices,
        packing=config.packing,
        orders=orders,
    )
    node_fill, edge_fill = train_fill(dataset, splits, seeds, train)
    eval_batches = fold_eval_batches(
        dataset, splits, budget, config.batch_size, num_devices, packing=config.packing
    )
    folds = splits.train.shape[0]
    members = folds * len(seeds)
    from sparsegcn.parallel.mesh import AXIS

    replicated = P()
    valid = _place(jnp.asarray(splits.valid), mesh, replicated)
    test = _place(jnp.asarray(splits.test), mesh, replicated)
    labels = _place(jnp.asarray(dataset.labels), mesh, replicated)
    train_dev = _place(train, mesh, P(None, None, None, AXIS))
    eval_dev = _place(eval_batches, mesh, P(None, None, AXIS))

    done = 0
    if history:
        stored = [np.asarray(history[name]) for name in Curves._fields]
        done = int(stored[0].shape[0])
        if any(s.shape != (done, members) for s in stored):
            raise ValueError(
                f"history must hold [epochs, {members}] curves {list(Curves._fields)}, got "
                f"{ {n: np.shape(history[n]) for n in Curves._fields} }"
            )
    if state is None:
        if done:
            raise ValueError("history without the state it belongs to")
        keys = jnp.stack([jax.random.key(s) for s in seeds] * folds)
        init = jax.vmap(lambda k: init_member(model, config, k))
        check_state_memory(init, keys, what=f"this graph run ({members} member(s): folds x seeds)")
        state = jax.jit(init)(keys)
    state = _place(state, mesh, replicated)
    if done > config.epochs:
        raise ValueError(f"the resumed run trained {done} epochs, more than epochs={config.epochs}")
    chunk = config.chunk
    if (config.epochs - done) % chunk:
        chunk = math.gcd(chunk, config.epochs - done)
    traces = []

    def program(state, train, eval_batches, labels, valid, test, first_epoch):
        traces.append(1)
        run = make_epochs_fn(
            model, config, chunk, metric=metric, num_graphs=dataset.num_graphs, mesh=mesh
        )
        # Members are fold-major: [M] = [K, S]; a fold's seeds share its held-out batches.
        per_seed = jax.vmap(run, in_axes=(0, 0, None, None, None, None, None))
        per_fold = jax.vmap(per_seed, in_axes=(0, 0, 0, None, 0, 0, None))

        def by_fold(tree):
            return jax.tree.map(lambda a: a.reshape(folds, len(seeds), *a.shape[1:]), tree)

        state, out = per_fold(
            by_fold(state), by_fold(train), eval_batches, labels, valid, test, first_epoch
        )
        return jax.tree.map(lambda a: a.reshape(members, *a.shape[2:]), (state, out))

    args = (train_dev, eval_dev, labels, valid, test)
    start = time.perf_counter()
    compiled = jax.jit(program, donate_argnums=0).lower(state, *args, jnp.int32(done)).compile()
    compile_s = time.perf_counter() - start
    check_program_memory(compiled, budget, members, config.batch_size)
    start_epoch = done
    position = [done]

    def advance(state):
        state, out = compiled(state, *args, jnp.int32(position[0]))
        position[0] += chunk
        out = np.asarray(out)  # [M, chunk, 4]
        return state, {name: out[:, :, i] for i, name in enumerate(Curves._fields)}

    def checkpoint(hook: Callable, state, so_far: dict) -> None:
        epochs = jnp.full((members,), position[0], jnp.int32)
        hook(GraphCheckpointState(state, epochs, epochs >= config.epochs), so_far)

    state, history_out, seconds = drive(
        advance,
        state,
        epochs=config.epochs,
        seeds=list(seeds) * folds,
        start=done,
        history=None if not history else {n: np.asarray(history[n]) for n in Curves._fields},
        on_chunk=None if on_chunk is None else functools.partial(checkpoint, on_chunk),
        progress=progress,
        loss="train_loss",
        watch="val_metric",
        divergence_factor=config.divergence_factor,
        divergence_epochs=config.divergence_epochs,
        desc=f"{folds} folds x {len(seeds)} seeds",
        chance=chance_loss(metric, getattr(dataset, "num_classes", None)),
    )
    train_s = float(sum(seconds))
    curves = Curves(*(np.ascontiguousarray(history_out[name]) for name in Curves._fields))
    best = np.asarray(state.best_epoch).astype(np.int64)
    index = np.arange(members)
    return GraphFitResult(
        folds=folds,
        seeds=seeds,
        metric=metric,
        curves=curves,
        best_epoch=best,
        test_metric=curves.test_metric[best, index],
        val_metric=curves.val_metric[best, index],
        budget=budget,
        batches_per_epoch=int(train.graph_mask.shape[2]),
        packings=packings,
        train_graphs=train_graphs,
        train_s=train_s,
        epoch_s=tuple(t / chunk for t in seconds),
        compile_s=compile_s,
        compiles=len(traces),
        devices=num_devices,
        state=state,
        start_epoch=start_epoch,
        node_fill=node_fill,
        edge_fill=edge_fill,
        packing=config.packing,
    )


# -- predictions --------------------------------------------------------------


def readout_params(params: Mapping) -> dict:
    """``params`` with every linear head replaced by the identity on its readout,
    so that ``apply`` returns the graph embeddings instead of the scores.

    Xu et al.'s GIN (``"heads"``, one per layer, whose scores add up) then
    returns the concatenation of every layer's readout; a model with one
    ``"head"`` (OGB's) returns its pooled rows. Dropout acts only in training.

    Raises:
      ValueError: the params have neither ``"heads"`` nor ``"head"``.
    """
    if "heads" in params:
        widths = [int(head["w"].shape[0]) for head in params["heads"]]
        total, offset, heads = sum(widths), 0, []
        for width in widths:
            w = jnp.zeros((width, total), jnp.float32)
            w = w.at[:, offset : offset + width].set(jnp.eye(width, dtype=jnp.float32))
            heads.append({"w": w, "b": jnp.zeros((total,), jnp.float32)})
            offset += width
        return {**params, "heads": heads}
    if "head" in params:
        width = int(params["head"]["w"].shape[0])
        eye = {"w": jnp.eye(width, dtype=jnp.float32), "b": jnp.zeros((width,), jnp.float32)}
        return {**params, "head": eye}
    raise ValueError(
        f"the model's params have no linear head ('heads' or 'head'), only {sorted(params)}; "
        "its graph embeddings cannot be read"
    )


def predict_graphs(
    model: GraphModel,
    params,
    stats,
    dataset,
    *,
    batch_size: int = 32,
    budget: Budget | None = None,
    embeddings: bool = True,
    scores: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Every graph's predictions and embeddings under stacked params.

    Args:
      model: the :class:`~sparsegcn.nn.graph_model.GraphModel` trained.
      params, stats: ``[K]``-stacked (e.g. :attr:`MemberState.best_params`).
      dataset: the :class:`~sparsegcn.datasets.graph_dataset.GraphDataset`.
      batch_size, budget: how the graphs are packed (no effect on the values).
      embeddings: also compute the embeddings (:func:`readout_params`).
      scores: return the model's outputs themselves (logits), which the
        metrics score, as training does; see :func:`graph_predictions`.

    Returns:
      ``(predictions, embeddings)``: float32 ``[K, G, C]``
      (:func:`graph_predictions` of the outputs, or the outputs with
      ``scores``) and float32 ``[K, G, H]`` (or ``None``).
    """
    if budget is None:
        budget = choose_budget(dataset.nodes_per_graph(), dataset.edges_per_graph(), batch_size)
    batches = pack_graphs(dataset, np.arange(dataset.num_graphs), budget, batch_size)
    kind = dataset.kind
    ids = np.asarray(batches.graph_ids).reshape(-1)
    slots = np.flatnonzero(ids >= 0)
    rows = np.empty(dataset.num_graphs, np.int64)
    rows[ids[slots]] = slots  # each graph's slot in the flattened batches

    def gather(p, s, batches, rows):
        def body(_, batch):
            out, _ = model.apply(p, s, batch, training=False)
            return None, out

        _, out = jax.lax.scan(body, None, batches)
        return out.reshape(-1, out.shape[-1])[rows]

    @jax.jit
    def forward(params, stats, batches, rows):
        logits = jax.vmap(lambda p, s: gather(p, s, batches, rows))(params, stats)
        if not embeddings:
            return logits, None
        embedded = jax.vmap(lambda p, s: gather(readout_params(p), s, batches, rows))(params, stats)
        return logits, embedded

    logits, embedded = forward(params, stats, batches, rows)
    outputs = np.asarray(logits) if scores else graph_predictions(kind, np.asarray(logits))
    return outputs, None if embedded is None else np.asarray(embedded)


def graph_predictions(kind: str, scores: np.ndarray) -> np.ndarray:
    """A graph model's outputs ``[..., C]`` as predictions, float32: the softmax
    over classes (``kind`` ``"class"``), a sigmoid per task (``"binary"``), the
    outputs themselves for regression targets.

    Score metrics on the outputs, not on these: a float32 sigmoid is exactly 1
    past a logit of about 17, and such ties change ROC-AUC and AP (ranking
    metrics, which the outputs rank the same as exact probabilities would).
    """
    from scipy.special import expit, softmax

    scores = np.asarray(scores, np.float32)
    if kind == "regression":
        return scores
    if kind == "binary":
        return expit(scores).astype(np.float32, copy=False)
    return softmax(scores, axis=-1).astype(np.float32, copy=False)


__all__ = [
    "INNER_VALIDATION",
    "LOWER_IS_BETTER",
    "METRICS",
    "Curves",
    "GraphCheckpointState",
    "GraphFitResult",
    "GraphTrainConfig",
    "MemberState",
    "Splits",
    "accuracy",
    "ap",
    "binary_loss",
    "check_graph_model",
    "check_program_memory",
    "check_splits",
    "checkpoint_template",
    "class_loss",
    "device_batch_size",
    "fit_graphs",
    "fold_eval_batches",
    "fold_splits",
    "graph_loss",
    "graph_predictions",
    "init_member",
    "loss_sums",
    "mae",
    "make_epochs_fn",
    "member_batches",
    "member_orders",
    "member_template",
    "merge_shards",
    "official_splits",
    "pack_steps",
    "packing_group",
    "packing_order",
    "packings_for",
    "predict_graphs",
    "readout_params",
    "regression_loss",
    "rmse",
    "rocauc",
    "select_best",
    "selection_score",
    "step_count",
    "stratified_folds",
    "train_fill",
]

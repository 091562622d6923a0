"""Training configuration, data and state: plain immutable values, and the
functions that start and resume a state (every trainer uses them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sparsegcn._checks import check_hyperparameters
from sparsegcn.features import Features
from sparsegcn.nn.model import Model

Params = Any

#: Default factor of the finite divergence guard (see TrainConfig and sparsegcn.train.guard).
DIVERGENCE_FACTOR = 100.0
#: Default number of epochs in a row above the factor before the guard stops a run.
DIVERGENCE_EPOCHS = 10
#: What early stopping and model selection watch (see TrainConfig.monitor).
MONITORS = ("val_acc", "val_loss")


def check_divergence(factor: float | None, epochs: int) -> None:
    """Refuses bad divergence-guard settings with the shared words
    (:data:`~sparsegcn._checks.HYPERPARAMETERS`); every trainer's config calls it."""
    check_hyperparameters(
        {"divergence_factor": factor, "divergence_epochs": epochs},
        off={"divergence_factor": (None,)},
    )


CALLS_PER_RUN = 20
"""How many compiled calls a run of ``epochs`` makes by default (:func:`epochs_per_chunk`)."""


def epochs_per_chunk(
    epochs: int, epochs_per_call: int | None = None, patience: int | None = None
) -> int:
    """Epochs one compiled call runs (a ``lax.scan``): ``epochs_per_call``
    (at most ``epochs``), or by default about :data:`CALLS_PER_RUN` calls a run,
    and no more than ``patience`` epochs a call: a call runs all its epochs, a
    seed stopped early included (as no-ops), so a run whose seeds all stopped
    ends within ``patience`` epochs of it rather than at the end of a call of
    ``epochs / 20`` (``--epochs 100000 --patience 100``: 100 epochs a call,
    not 5,000). The progress bar, the divergence guard and checkpoints act
    between calls."""
    if epochs_per_call is not None:
        return min(epochs_per_call, epochs)
    chunk = max(1, -(-epochs // CALLS_PER_RUN))
    return chunk if patience is None else max(1, min(chunk, patience))


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters of a full-batch run; defaults reproduce Kipf & Welling.

    Attributes:
      epochs: maximum number of epochs (one optimizer step each).
      learning_rate: Adam step size.
      weight_decay: L2 coefficient, added to the gradient before Adam
        (``optax.add_decayed_weights``, as PyTorch's ``Adam(weight_decay=)``).
      decay_layers: ``"first"`` (Kipf & Welling: first layer only), ``"all"``
        or ``"none"``.
      patience: stop a seed after this many epochs without a better
        validation score (``monitor``); ``None`` never stops early. The
        best params (by ``monitor``) are restored either way.
      monitor: what "better" means, per epoch: ``"val_acc"`` (a higher
        validation accuracy, or an equal one with a lower loss) or
        ``"val_loss"`` (a lower validation loss; smoother on small
        validation sets, where accuracy moves in steps of ``1 / |val|``).
      epochs_per_call: epochs run per compiled call (a ``lax.scan``); the
        progress bar and checkpoints advance between calls. ``None`` picks
        about 20 calls per run, and at most ``patience`` epochs a call
        (:func:`epochs_per_chunk`).
      clip_norm: clip gradients to this global norm (``optax.clip_by_global_norm``).
      timing_steps: after training, time this many extra optimizer steps
        (results discarded) for ``train_step_ms_median``. Opt-in: timing
        compiles a second program (one optimizer step), so with the
        default 0 nothing more is compiled or run, ``train_step_ms_median``
        is NaN and ``compile_s`` is the training program's alone.
      divergence_factor, divergence_epochs: the finite divergence guard
        (:func:`~sparsegcn.train.guard.raise_if_loss_grew`): a seed whose
        training loss stays above ``divergence_factor`` times its first
        epoch's loss for ``divergence_epochs`` epochs in a row raises
        :class:`~sparsegcn.train.guard.DivergenceError`. ``None`` turns it
        off (non-finite losses are caught either way).
    """

    epochs: int = 200
    learning_rate: float = 0.01
    weight_decay: float = 5e-4
    decay_layers: str = "first"
    patience: int | None = 100
    monitor: str = "val_acc"
    epochs_per_call: int | None = None
    clip_norm: float | None = None
    timing_steps: int = 0
    divergence_factor: float | None = DIVERGENCE_FACTOR
    divergence_epochs: int = DIVERGENCE_EPOCHS

    def __post_init__(self):
        # The shared table (sparsegcn._checks.HYPERPARAMETERS) also checks the
        # CLI's Experiment and the model builders, with the same words.
        check_hyperparameters(
            {
                "epochs": self.epochs,
                "learning_rate": self.learning_rate,
                "weight_decay": self.weight_decay,
                "patience": self.patience,
                "epochs_per_call": self.epochs_per_call,
                "clip_norm": self.clip_norm,
                "timing_steps": self.timing_steps,
                "divergence_factor": self.divergence_factor,
                "divergence_epochs": self.divergence_epochs,
            },
            off={
                "patience": (None,),
                "epochs_per_call": (None,),
                "clip_norm": (None,),
                "divergence_factor": (None,),
            },
        )
        if self.monitor not in MONITORS:
            raise ValueError(f"monitor must be one of {MONITORS}, got {self.monitor!r}")
        if self.decay_layers not in ("first", "all", "none"):
            raise ValueError(
                f"decay_layers must be 'first', 'all' or 'none', got {self.decay_layers!r}"
            )

    @property
    def chunk(self) -> int:
        """Epochs per compiled call (:func:`epochs_per_chunk`)."""
        return epochs_per_chunk(self.epochs, self.epochs_per_call, self.patience)


class NodeData(NamedTuple):
    """Everything a full-batch step reads; a pytree passed as an argument (never
    closed over, so large arrays are not baked into the compiled program).

    Attributes:
      graph: the propagation graph, already normalized for the model.
      features: ``[N, F]`` dense array or :class:`~sparsegcn.SparseFeatures`.
      labels: int32 ``[N]``, in ``[0, C)`` (unlabelled nodes hold 0 and are masked out);
        or, for multi-label tasks, int32 ``[N, T]`` of 1, 0 and -1 (missing).
      train_mask, val_mask, test_mask: bool ``[N]``.
    """

    # Any view (sparsegcn.views): a Graph in any layout, or an EdgeShardedGraph.
    graph: Any
    features: Features
    # NumPy on the host until the trainer puts them on the device.
    labels: jax.Array | np.ndarray
    train_mask: jax.Array | np.ndarray
    val_mask: jax.Array | np.ndarray
    test_mask: jax.Array | np.ndarray


class LabelledNodes(Protocol):
    """What evaluation and prediction read: :class:`NodeData` or
    :class:`~sparsegcn.train.minibatch.MinibatchData` (same fields, read-only)."""

    @property
    def graph(self) -> Any: ...
    @property
    def features(self) -> Features: ...
    @property
    def labels(self) -> jax.Array | np.ndarray: ...
    @property
    def train_mask(self) -> jax.Array | np.ndarray: ...
    @property
    def val_mask(self) -> jax.Array | np.ndarray: ...
    @property
    def test_mask(self) -> jax.Array | np.ndarray: ...


_DATA_FIELDS = ("graph", "features", "labels", "train_mask", "val_mask", "test_mask")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_rows(caller: str, data) -> None:
    """Refuses labels or masks without one row per node of ``data.graph``, and masks that
    are not bool (an int or float mask would weight the mean: a mask of ``[0, 3]`` counts
    its node three times; one of length 1 broadcasts over every node)."""
    num_nodes = getattr(getattr(data, "graph", None), "num_nodes", None)
    for name in ("labels", "train_mask", "val_mask", "test_mask"):
        value = getattr(data, name)
        shape = getattr(value, "shape", None)
        if shape is None:
            value = np.asarray(value)
            shape = value.shape
        if isinstance(num_nodes, int) and (len(shape) == 0 or shape[0] != num_nodes):
            raise ValueError(
                f"{caller}: data.{name} has shape {tuple(shape)} but data.graph has "
                f"{num_nodes} nodes; give one row per node"
            )
        if name != "labels" and np.dtype(value.dtype) != np.bool_:
            raise TypeError(
                f"{caller}: data.{name} has dtype {np.dtype(value.dtype)}; masks must be bool "
                "(a number would weight its node in the means), e.g. mask.astype(bool)"
            )


def check_label_dtype(caller: str, labels) -> None:
    """Refuses labels that are not integers (a float label would be truncated to a class)."""
    dtype = np.dtype(getattr(labels, "dtype", None) or np.asarray(labels).dtype)
    if dtype == np.bool_ or not np.issubdtype(dtype, np.integer):
        raise TypeError(
            f"{caller}: data.labels has dtype {dtype}; labels must be integers (a class "
            "per node, or 1, 0 and -1 per task), e.g. labels.astype(np.int32)"
        )


def check_node_rows(caller: str, data) -> None:
    """Labels and masks with one row per node, bool masks and integer labels
    (:func:`check_node_data` without a model: what building trainer data checks)."""
    _check_rows(caller, data)
    check_label_dtype(caller, data.labels)


def _check_width(caller: str, model, in_features, features) -> None:
    """Refuses features whose width is not the model's ``in_features`` (a
    ``[N, F]`` product with an ``[F', H]`` weight fails deep inside XLA)."""
    shape = getattr(features, "shape", None)
    if shape is None:
        shape = np.shape(features)
    if len(shape) != 2:
        raise ValueError(
            f"{caller}: data.features must be [N, F] (nodes x features), got shape {tuple(shape)}"
        )
    if isinstance(in_features, int) and shape[1] != in_features:
        raise ValueError(
            f"{caller}: data.features has {shape[1]} columns (shape {tuple(shape)}) but model "
            f"{model.name!r} was built with in_features={in_features}; build it with "
            f"in_features={shape[1]}"
        )


def check_node_data(caller: str, model, data) -> None:
    """Refuses a model or data a trainer cannot use, before anything is compiled.

    Args:
      caller: the trainer's name, for the message (``"fit"``).
      model: should be a :class:`~sparsegcn.nn.Model`.
      data: should be a :class:`NodeData` (or a
        :class:`~sparsegcn.train.minibatch.MinibatchData`: the same fields).

    Raises:
      TypeError: ``model`` is not a ``Model``, or ``data`` lacks the fields of
        :class:`NodeData` (a dict, a :class:`~sparsegcn.datasets.Dataset`);
        the message names the value.
      ValueError: a labelled node's class is outside ``[0, num_classes)`` of
        the model (a 3-class model on 7-class labels), naming both; labels or
        a mask without one row per node of ``data.graph``.
      TypeError: also a mask that is not bool, or labels that are not integers.
      ValueError: also features that are not ``[N, F]``, or whose ``F`` is not
        the model's ``in_features``.
    """
    if not isinstance(model, Model):
        raise TypeError(
            f"{caller}: model must be a sparsegcn Model (init/apply, e.g. from "
            f"sparsegcn.create_model), got {type(model).__name__} {_shown(model)}"
        )
    missing = [name for name in _DATA_FIELDS if not hasattr(data, name)]
    if missing:
        hint = ""
        if hasattr(data, "split") and hasattr(data, "num_classes"):
            hint = " (a Dataset: make it NodeData with sparsegcn.experiment.node_data)"
        raise TypeError(
            f"{caller}: data must be a NodeData with fields {', '.join(_DATA_FIELDS)}; got "
            f"{type(data).__name__} {_shown(data)}, which lacks {', '.join(missing)}{hint}"
        )
    _check_rows(caller, data)
    settings = model.config if isinstance(model.config, dict) else {}
    _check_width(caller, model, settings.get("in_features"), data.features)
    num_classes = settings.get("num_classes")
    labels = data.labels
    check_label_dtype(caller, labels)
    if num_classes is None or not getattr(labels, "is_fully_addressable", True):
        return
    if isinstance(labels, jax.core.Tracer):
        return
    labels = np.asarray(labels)
    labelled = np.zeros(labels.shape[:1], bool)
    for name in ("train_mask", "val_mask", "test_mask"):
        mask = getattr(data, name)
        if isinstance(mask, jax.core.Tracer) or not getattr(mask, "is_fully_addressable", True):
            return
        mask = np.asarray(mask)
        if mask.shape != labels.shape[:1]:
            raise ValueError(
                f"{caller}: data.{name} has shape {mask.shape} but data.labels has "
                f"{labels.shape}; give one entry per node"
            )
        labelled |= mask.astype(bool)
    if labels.ndim == 2:  # multi-label: one output per task, labels 1, 0 or -1 (missing)
        if labels.shape[1] != num_classes:
            raise ValueError(
                f"{caller}: data.labels has {labels.shape[1]} tasks (shape {labels.shape}) but "
                f"model {model.name!r} has num_classes={num_classes} outputs; build it with one "
                f"output per task"
            )
        return
    bad = labelled & ((labels < 0) | (labels >= num_classes))
    if bad.any():
        node = int(np.flatnonzero(bad)[0])
        label = int(labels[node])
        if label < 0:
            raise ValueError(
                f"{caller}: node {node} has label {label}, outside [0, {num_classes}) of model "
                f"{model.name!r}; a labelled node (one in a mask) needs a class >= 0"
            )
        top = int(labels[labelled].max())
        raise ValueError(
            f"{caller}: node {node} has label {label} (labels reach {top}), outside "
            f"[0, {num_classes}) of model {model.name!r} built with num_classes={num_classes}; "
            f"build the model with the dataset's number of classes ({top + 1} at least)"
        )


_MASK_ROLES = (
    ("train_mask", "the gradients"),
    ("val_mask", "early stopping and the choice of the best epoch"),
    ("test_mask", "the reported test accuracy"),
)


def check_masks(data, trainer: str) -> None:
    """Raises unless ``data``'s train, validation and test masks each select a node.

    An empty mask would train on nothing, select the best epoch on nothing,
    or report an accuracy of 0 measured on nothing. Runs on the host
    before anything is compiled.

    Args:
      data: :class:`NodeData` or :class:`~sparsegcn.train.MinibatchData`
        (masks ``None`` are skipped).
      trainer: the function's name, for the message.

    Raises:
      ValueError: naming the first empty mask.
    """
    for field, role in _MASK_ROLES:
        mask = getattr(data, field, None)
        if mask is not None and not np.asarray(mask).any():
            raise ValueError(
                f"{trainer}: data.{field} selects no node (an empty split), but it is needed "
                f"for {role}"
            )


def index_mask(indices, num_nodes: int) -> np.ndarray:
    """bool ``[N]`` that is True at ``indices``."""
    mask = np.zeros(num_nodes, bool)
    mask[np.asarray(indices, np.int64)] = True
    return mask


class Best(NamedTuple):
    """The best epoch so far by the run's ``monitor`` (per seed)."""

    params: Params
    epoch: jax.Array  # int32 []
    val_acc: jax.Array  # float32 []
    val_loss: jax.Array  # float32 []
    train_acc: jax.Array  # float32 []
    test_acc: jax.Array  # float32 []


class TrainState(NamedTuple):
    """The whole state of one seed's run; with several seeds every leaf gains a
    leading ``[K]`` axis.
    """

    params: Params
    opt_state: optax.OptState
    key: jax.Array  # PRNG key, split every epoch
    epoch: jax.Array  # int32 [], epochs completed
    bad_epochs: jax.Array  # int32 [], epochs since the best
    done: jax.Array  # bool [], stopped early or reached config.epochs
    best: Best


def initial_best(params: Params) -> Best:
    zero = jnp.zeros((), jnp.float32)
    return Best(
        params=params,
        epoch=jnp.zeros((), jnp.int32),
        val_acc=jnp.asarray(-1.0, jnp.float32),
        val_loss=jnp.asarray(jnp.inf, jnp.float32),
        train_acc=zero,
        test_acc=zero,
    )


def init_state(model: Model, tx: optax.GradientTransformation, key: jax.Array) -> TrainState:
    """Fresh state for one seed: ``key`` is split into init and training keys."""
    init_key, train_key = jax.random.split(key)
    params = model.init(init_key)
    return TrainState(
        params=params,
        opt_state=tx.init(params),
        key=train_key,
        epoch=jnp.zeros((), jnp.int32),
        bad_epochs=jnp.zeros((), jnp.int32),
        done=jnp.zeros((), bool),
        best=initial_best(params),
    )


def seed_keys(seeds: Sequence[int]) -> jax.Array:
    """One PRNG key per integer seed, stacked ``[K]``."""
    return jnp.stack([jax.random.key(int(s)) for s in seeds])


def should_stop(config: TrainConfig, epoch: jax.Array, bad_epochs: jax.Array) -> jax.Array:
    """bool ``[]``: the epoch budget is spent or patience ran out."""
    done = epoch >= config.epochs
    if config.patience is not None:
        done = done | (bad_epochs >= config.patience)
    return done


def resume_state(state: TrainState, config: TrainConfig) -> TrainState:
    """``state`` (leading ``[K]`` axis) with ``done`` recomputed for ``config``.

    A checkpoint written at the end of a 50-epoch run has every seed done;
    resumed with ``epochs=200`` its seeds continue, while seeds that ran out
    of patience stay stopped (unless ``config`` has more patience). For a
    state taken mid-run with the same config nothing changes, which is what
    makes an interrupted and resumed run equal an uninterrupted one.
    """
    done = jax.vmap(lambda e, b: should_stop(config, e, b))(state.epoch, state.bad_epochs)
    return state._replace(done=done)

"""Training: losses, optimizer, the full-batch and mini-batch (sampled) multi-seed
trainers, the skeleton they share (:func:`run_training`) and their lifecycle
(checkpoints, divergence guard, sweeps)."""

from sparsegcn.train.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointHook,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    state_template,
)
from sparsegcn.train.fullbatch import (
    evaluate,
    fit,
    make_chunk_fn,
    make_step_fn,
    predict,
    run_epoch,
    train_step,
)
from sparsegcn.train.guard import DivergenceError
from sparsegcn.train.loop import FitResult, Trainer, run_training
from sparsegcn.train.losses import masked_accuracy, masked_cross_entropy, masked_mean
from sparsegcn.train.minibatch import (
    Batch,
    MinibatchConfig,
    MinibatchData,
    MinibatchFitResult,
    epoch_overflow,
    first_epoch_key,
    fit_minibatch,
    make_batches,
    make_grad_fn,
    minibatch_data,
    sampling_graph,
    train_epoch,
)
from sparsegcn.train.optim import apply_optimizer, make_optimizer
from sparsegcn.train.state import (
    Best,
    NodeData,
    TrainConfig,
    TrainState,
    index_mask,
    init_state,
    resume_state,
    seed_keys,
    should_stop,
)
from sparsegcn.train.streamed import (
    StreamedFitResult,
    fit_streamed,
    make_streamed_fns,
    train_epoch_streamed,
)
from sparsegcn.train.sweep import fit_sweep, set_hyperparams

__all__ = [
    "Batch",
    "Best",
    "Checkpoint",
    "CheckpointError",
    "CheckpointHook",
    "DivergenceError",
    "FitResult",
    "MinibatchConfig",
    "MinibatchData",
    "MinibatchFitResult",
    "NodeData",
    "StreamedFitResult",
    "TrainConfig",
    "TrainState",
    "Trainer",
    "apply_optimizer",
    "epoch_overflow",
    "evaluate",
    "first_epoch_key",
    "fit",
    "fit_minibatch",
    "fit_streamed",
    "fit_sweep",
    "index_mask",
    "init_state",
    "latest_checkpoint",
    "load_checkpoint",
    "make_batches",
    "make_chunk_fn",
    "make_grad_fn",
    "make_optimizer",
    "make_step_fn",
    "make_streamed_fns",
    "masked_accuracy",
    "masked_cross_entropy",
    "masked_mean",
    "minibatch_data",
    "predict",
    "resume_state",
    "run_epoch",
    "run_training",
    "sampling_graph",
    "save_checkpoint",
    "seed_keys",
    "set_hyperparams",
    "should_stop",
    "state_template",
    "train_epoch",
    "train_epoch_streamed",
    "train_step",
]

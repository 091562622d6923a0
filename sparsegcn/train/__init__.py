"""Training: losses, optimizer, and the full-batch multi-seed trainer."""

from sparsegcn.train.fullbatch import (
    FitResult,
    evaluate,
    fit,
    init_state,
    make_chunk_fn,
    make_optimizer,
    make_step_fn,
    run_epoch,
    seed_keys,
    train_step,
)
from sparsegcn.train.losses import masked_accuracy, masked_cross_entropy, masked_mean
from sparsegcn.train.state import Best, NodeData, TrainConfig, TrainState, index_mask

__all__ = [
    "Best",
    "FitResult",
    "NodeData",
    "TrainConfig",
    "TrainState",
    "evaluate",
    "fit",
    "index_mask",
    "init_state",
    "make_chunk_fn",
    "make_optimizer",
    "make_step_fn",
    "masked_accuracy",
    "masked_cross_entropy",
    "masked_mean",
    "run_epoch",
    "seed_keys",
    "train_step",
]

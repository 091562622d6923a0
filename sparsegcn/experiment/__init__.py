"""End-to-end runs: dataset -> prepared data -> model -> training -> report.

This is the library behind ``sparsegcn train`` and ``sparsegcn predict``:
every CLI option is a field of :class:`Experiment` (defaults live there and
nowhere else), :func:`run_experiment` returns the report the CLI prints and
writes as JSON, :func:`run_sweep` trains a grid, and
:func:`predict_checkpoint` reads a checkpoint back.

- :mod:`~sparsegcn.experiment.config`: :class:`Experiment`.
- :mod:`~sparsegcn.experiment.build`: data and model construction.
- :mod:`~sparsegcn.experiment.precompute`: features computed once before
  training (SGC's ``Â^K X``), cached on disk.
- :mod:`~sparsegcn.experiment.run`: one run and its report.
- :mod:`~sparsegcn.experiment.lifecycle`: checkpoints, resume, plots, predictions.
- :mod:`~sparsegcn.experiment.sweep`: hyperparameter grids.
"""

from sparsegcn.experiment.build import build_model, node_data, prepare_graph, reorder_dataset
from sparsegcn.experiment.config import DEFAULT_DATASET, MODELS, Experiment
from sparsegcn.experiment.lifecycle import (
    RESUME_MAY_CHANGE,
    Lifecycle,
    checkpoint_metadata,
    experiment_from_checkpoint,
    predict_checkpoint,
    process_settings,
    restore_checkpoint,
)
from sparsegcn.experiment.precompute import precompute_key, sgc_precompute
from sparsegcn.experiment.run import run_experiment, summarize
from sparsegcn.experiment.sweep import NOT_SWEEPABLE, SWEEP_AS_DATA, run_sweep

__all__ = [
    "DEFAULT_DATASET",
    "MODELS",
    "NOT_SWEEPABLE",
    "RESUME_MAY_CHANGE",
    "SWEEP_AS_DATA",
    "Experiment",
    "Lifecycle",
    "build_model",
    "checkpoint_metadata",
    "experiment_from_checkpoint",
    "node_data",
    "precompute_key",
    "predict_checkpoint",
    "prepare_graph",
    "process_settings",
    "reorder_dataset",
    "restore_checkpoint",
    "run_experiment",
    "run_sweep",
    "sgc_precompute",
    "summarize",
]

"""End-to-end runs: dataset -> prepared data -> model -> training -> report.

This is the library behind ``sparsegcn train``: every CLI option is a field
of :class:`Experiment` (defaults live here and nowhere else), and
:func:`run_experiment` returns the report the CLI prints and writes as JSON.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from sparsegcn import transforms
from sparsegcn.backends import DEFAULT_BACKEND, get_backend
from sparsegcn.datasets import Dataset, load
from sparsegcn.features import as_features, row_normalize
from sparsegcn.nn import Model, gcn, mlp
from sparsegcn.train import FitResult, NodeData, TrainConfig, fit, index_mask

DEFAULT_DATASET = "synthetic:tiny"
MODELS = ("gcn", "mlp")


def _field(default, help: str, **metadata):
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One training run's settings. Defaults reproduce Kipf & Welling's GCN."""

    dataset: str = _field(
        DEFAULT_DATASET, "dataset name; the default is generated in-process, no download"
    )
    root: str | None = _field(None, "data root (default: $SPARSEGCN_DATA or ./datasets)")
    scale: float = _field(1.0, "shrink factor for synthetic presets")
    model: str = _field("gcn", "model", choices=MODELS)
    backend: str = _field(
        DEFAULT_BACKEND, "propagation backend", choices=("dense", "segment", "bcoo")
    )
    hidden: int = _field(16, "hidden width")
    layers: int = _field(2, "number of layers")
    dropout: float = _field(0.5, "dropout rate")
    residual: bool = _field(False, "skip connections between equal-width hidden layers")
    lr: float = _field(0.01, "Adam learning rate")
    weight_decay: float = _field(5e-4, "L2 weight decay")
    decay_layers: str = _field("first", "layers to decay", choices=("first", "all", "none"))
    epochs: int = _field(200, "maximum epochs")
    patience: int = _field(100, "early-stopping patience in epochs (0: never stop early)")
    seeds: int = _field(1, "number of seeds, trained together as one compiled program")
    seed: int = _field(0, "first seed; seeds are seed, seed+1, ...")
    normalize_features: bool = _field(True, "row-normalize features (Kipf & Welling)")
    epochs_per_call: int = _field(0, "epochs per compiled call (0: about 20 calls per run)")
    clip_norm: float = _field(0.0, "clip gradients to this global norm (0: off)")

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {list(MODELS)}")
        get_backend(self.backend)
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            epochs=self.epochs,
            learning_rate=self.lr,
            weight_decay=self.weight_decay,
            decay_layers=self.decay_layers,
            patience=self.patience or None,
            epochs_per_call=self.epochs_per_call or None,
            clip_norm=self.clip_norm or None,
        )

    def seed_list(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))


def prepare_graph(dataset: Dataset, model: str):
    """The propagation graph each model expects, computed once on the host."""
    if model == "gcn":
        return transforms.sort_edges(transforms.gcn_norm(dataset.graph))
    return dataset.graph


def node_data(dataset: Dataset, model: str = "gcn", *, normalize_features: bool = True) -> NodeData:
    """Builds the :class:`NodeData` a full-batch trainer reads from a :class:`Dataset`."""
    n = dataset.num_nodes
    features = row_normalize(dataset.features) if normalize_features else dataset.features
    return NodeData(
        graph=prepare_graph(dataset, model),
        features=as_features(features, n),
        labels=np.maximum(dataset.labels, 0).astype(np.int32),
        train_mask=index_mask(dataset.split["train"], n),
        val_mask=index_mask(dataset.split["valid"], n),
        test_mask=index_mask(dataset.split["test"], n),
    )


def build_model(exp: Experiment, dataset: Dataset) -> Model:
    if exp.model == "gcn":
        return gcn(
            dataset.num_features,
            dataset.num_classes,
            hidden=exp.hidden,
            num_layers=exp.layers,
            dropout_rate=exp.dropout,
            residual=exp.residual,
            backend=exp.backend,
        )
    return mlp(
        dataset.num_features,
        dataset.num_classes,
        hidden=exp.hidden,
        num_layers=exp.layers,
        dropout_rate=exp.dropout,
    )


def summarize(exp: Experiment, dataset: Dataset, result: FitResult, wall_s: float) -> dict:
    """The report: the keys ``sparsegcn train --json`` promises, plus per-seed detail."""
    test, val = result.test_acc, result.val_acc
    return {
        "dataset": dataset.name,
        "model": exp.model,
        "backend": get_backend(exp.backend).name,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "num_stored_edges": dataset.graph.num_edges,
        "seeds": len(result.seeds),
        "seed_list": list(result.seeds),
        "test_acc_mean": float(test.mean()),
        "test_acc_std": float(test.std()),
        "val_acc_mean": float(val.mean()),
        "val_acc_std": float(val.std()),
        "test_acc": test.tolist(),
        "best_epoch": result.best_epoch.tolist(),
        "train_step_ms_median": result.train_step_ms_median,
        "train_step_ms_per_seed": result.train_step_ms_median / len(result.seeds),
        "epoch_ms_median": result.epoch_ms_median,
        "compile_s": result.compile_s,
        "wall_s": wall_s,
        "device": jax.devices()[0].device_kind,
        "config": dataclasses.asdict(exp),
    }


def run_experiment(exp: Experiment, *, progress: bool = False) -> dict:
    """Loads the data, trains ``exp.seeds`` models at once, returns the report."""
    start = time.perf_counter()
    dataset = load(exp.dataset, exp.root, scale=exp.scale, progress=progress)
    data = node_data(dataset, exp.model, normalize_features=exp.normalize_features)
    model = build_model(exp, dataset)
    result = fit(model, data, exp.train_config(), seeds=exp.seed_list(), progress=progress)
    return summarize(exp, dataset, result, time.perf_counter() - start)

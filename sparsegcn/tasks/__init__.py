"""The task registry: the one place that knows task names.

A task is what a run learns: a label per node of one graph (``node``) or a
label per graph of many small ones (``graph``). Like a model in
:mod:`sparsegcn.nn.registry`, each task is one :class:`Task` entry that
declares, in one place:

- the loss and the metrics;
- the datasets it owns (name prefixes) and how their data is prepared and
  batched;
- its pipeline, ``run(experiment, *, progress) -> report``: prepare the
  data, train, report;
- the models it trains, their default settings, and the
  :class:`~sparsegcn.experiment.Experiment` fields only it reads.

:func:`~sparsegcn.experiment.run_experiment` only looks the task up
(:func:`task_for`) and runs its pipeline; nothing else spells a task's name.
Pipelines, preparations and checks are named as ``"module:function"`` and
imported when used, so this module imports no trainer.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from sparsegcn.train.losses import (
    CLASSIFICATION,
    MULTILABEL,
    masked_accuracy,
    masked_binary_cross_entropy,
    masked_cross_entropy,
    masked_roc_auc,
)


def resolve(target: str) -> Callable:
    """The function ``"package.module:function"`` names."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _graph_loss(logits, batch, *, metric: str = ""):
    """Cross-entropy over a batch's real graphs (int labels), binary
    cross-entropy over its labelled entries (``[G, T]`` labels, NaN missing),
    or, for a regression ``metric`` (RMSE, MAE), squared or absolute error over them."""
    from sparsegcn.train.graphs import graph_loss

    return graph_loss(logits, batch, metric=metric)


def _graph_metric(name: str) -> Callable:
    def metric(scores, labels, mask):
        from sparsegcn.train.graphs import METRICS

        return METRICS[name](scores, labels, mask)

    metric.__name__ = metric.__qualname__ = f"graph_{name}"
    return metric


def _link_loss(positive_logits, negative_logits):
    from sparsegcn.nn.gae import sampled_reconstruction_loss

    return sampled_reconstruction_loss(positive_logits, negative_logits)


def _link_scores(positive_logits, negative_logits):
    import jax.numpy as jnp

    scores = jnp.concatenate([positive_logits, negative_logits])
    labels = jnp.concatenate([jnp.ones_like(positive_logits), jnp.zeros_like(negative_logits)])
    return scores, labels


def _link_auc(positive_logits, negative_logits):
    from sparsegcn.metrics import roc_auc

    return roc_auc(*_link_scores(positive_logits, negative_logits))


def _link_ap(positive_logits, negative_logits):
    from sparsegcn.metrics import average_precision

    return average_precision(*_link_scores(positive_logits, negative_logits))


@dataclasses.dataclass(frozen=True)
class Task:
    """One learning task.

    Attributes:
      description: one line for documentation.
      loss: the training objective, what the trainer minimises: the node
        task's ``loss(logits [N, C], labels [N], mask [N]) -> []``; the graph
        task's ``loss(logits [G_b, C], batch, *, metric="") -> []``, which
        chooses by the labels' kind (softmax cross-entropy for int ``[G_b]``
        classes, binary cross-entropy over labelled entries for ``[G_b, T]``
        tasks, squared or absolute error over them for regression targets,
        as the dataset's ``metric``, RMSE or MAE, names).
      metrics: ``{name: metric(scores, labels, mask) -> []}``, what the
        report holds (higher is better, but RMSE and MAE); a graph dataset reports and
        selects on the one it names (``GraphDataset.metric``).
      datasets: dataset name prefixes this task owns; ``()`` for the
        default task, which owns every other name.
      prepare: ``"module:function"`` that turns a loaded dataset into what
        its trainer steps on (node arrays; padded batches of graphs).
      pipeline: ``"module:function"``, ``run(experiment, *, progress=False)
        -> dict``, the whole run.
      models: the model names it trains (``None``: every registered one).
      defaults: ``{model: {Experiment field: value}}`` replacing the model
        registry's defaults for this task.
      fields: ``{Experiment field: off value}``: fields only this task
        reads; each is a row of :data:`sparsegcn.experiment.config.APPLIES`,
        so another task's runs refuse them when set.
      check: ``"module:function"``, ``check(experiment)`` refusing settings
        the task does not support, before any data is read (or ``None``).
      sweep: ``"module:function"``, ``sweep(experiment, axes, *, progress, given)
        -> report`` (``given``: the fields set on the command line) for ``--sweep`` (a ranked grid, ``report["rows"]`` and
        ``report["metric"]``); ``None``: ``--sweep`` is refused on it.
      folder: ``"module:function"``, ``folder(path) -> bool``: whether a
        dataset folder (a path given as the dataset) holds this task's data
        (``None``: none does).
      info: ``"module:function"``, ``info(dataset, root, *, progress) ->
        (stats, text)`` for ``sparsegcn info``; ``None``: the node statistics.
      predict: ``"module:function"``, ``predict(checkpoint, *, dataset,
        root, params, progress) -> dict`` for ``sparsegcn predict``;
        ``None``: the node task's.
      objective: for tasks the node trainers run (``fit``,
        ``fit_minibatch``), their :class:`~sparsegcn.train.losses.NodeObjective`
        (the per-node form of ``loss`` and the first of ``metrics``);
        ``None`` for tasks with a trainer of their own.
      borrows: the tasks whose datasets this one also learns from when
        asked by name (``--task link`` on a node dataset such as ``cora``).
      private_models: its ``models`` train under this task only; another
        task refuses them.
      saves: what its runs keep in a ``--checkpoint`` folder, one of
        :data:`sparsegcn.train.checkpoint.FOLDER_KINDS`: ``"checkpoints"``
        (every few epochs, resumable) or ``"link-model"`` (the final params,
        once). A folder holds one kind.
      decays: the layers its trainer decays by ``weight_decay``, whatever
        ``--decay-layers`` says (``"all"``: every parameter); its runs
        record it as their ``decay_layers`` (``"none"`` without weight
        decay) and refuse the option. ``None``: ``--decay-layers`` chooses.
    """

    description: str
    loss: Callable
    metrics: Mapping[str, Callable]
    prepare: str
    pipeline: str
    datasets: tuple[str, ...] = ()
    models: tuple[str, ...] | None = None
    defaults: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    check: str | None = None
    sweep: str | None = "sparsegcn.experiment.sweep:run_sweep"
    info: str | None = None
    predict: str | None = None
    folder: str | None = None
    objective: Any = None
    borrows: tuple[str, ...] = ()
    private_models: bool = False
    saves: str = "checkpoints"
    decays: str | None = None

    def owns(self, dataset: str) -> bool:
        """Whether ``dataset`` names one of this task's datasets: by its name's
        prefix, or a folder that :attr:`folder` recognises."""
        if any(dataset.startswith(prefix) for prefix in self.datasets):
            return True
        if self.folder is None:
            return False
        from sparsegcn.datasets import is_path

        return is_path(dataset) and bool(resolve(self.folder)(dataset))

    def model_defaults(self, model: str, registered: Mapping[str, Any]) -> Mapping[str, Any]:
        """``model``'s default settings under this task: its own, else the registry's."""
        return self.defaults.get(model, registered)

    def run(self, experiment, *, progress: bool = False) -> dict:
        """This task's pipeline on ``experiment``: the report."""
        return resolve(self.pipeline)(experiment, progress=progress)


# Xu et al. (ICLR 2019): 5 layers counting the input, hidden from {16, 32, 64}, final
# dropout from {0, 0.5}, Adam 0.01 halved every 50 epochs, 350 epochs, batch 32, no decay.
# No monitor: the graph trainer selects by the dataset's metric; decay_layers follows
# weight_decay (Task.decays).
_XU = dict(
    hidden=64,
    layers=5,
    dropout=0.5,
    lr=0.01,
    weight_decay=0.0,
    epochs=350,
    patience=0,
    batch_size=32,
)

# OGB's ogbn-mag R-GCN baseline (examples/nodeproppred/mag/sampler.py): 2 layers, hidden 64,
# dropout 0.5, Adam 0.01 without decay, fanouts 25,20, batches of 1024 papers, 3 epochs.
# No monitor: the hetero trainer selects by validation accuracy, with no choice.
_OGB_MAG_RGCN = dict(
    hidden=64,
    layers=2,
    dropout=0.5,
    lr=0.01,
    weight_decay=0.0,
    decay_layers="none",
    fanouts="25,20",
    epochs=3,
    patience=0,
    batch_size=1024,
)

TASKS: Mapping[str, Task] = MappingProxyType(
    {
        "node": Task(
            description="a class per node of one graph (full batch or sampled mini-batches)",
            loss=masked_cross_entropy,
            metrics={"acc": masked_accuracy},
            prepare="sparsegcn.experiment.build:node_data",
            pipeline="sparsegcn.experiment.run:run_node_experiment",
            objective=CLASSIFICATION,
        ),
        "graph": Task(
            description=(
                "a class, binary tasks or real targets per graph of many small graphs "
                "(padded batches, k folds or an official split)"
            ),
            loss=_graph_loss,
            # Each dataset names its own (GraphDataset.metric); selection maximises it.
            metrics={name: _graph_metric(name) for name in ("acc", "rocauc", "ap", "rmse", "mae")},
            prepare="sparsegcn.tasks.graph:prepare_graphs",
            pipeline="sparsegcn.tasks.graph:run_graph_experiment",
            datasets=("tu:", "ogbg-", "synthetic:mol"),
            models=("gin",),
            defaults={"gin": _XU},
            fields={
                "folds": 0,
                "readout": "sum",
                "learn_eps": False,
                "virtual_node": False,
                "degree_features": False,
                "packing": "balanced",
            },
            check="sparsegcn.tasks.graph:check_graph_experiment",
            sweep="sparsegcn.tasks.graph:run_graph_sweep",
            info="sparsegcn.tasks.graph:describe_graphs",
            predict="sparsegcn.tasks.graph:predict_graph_checkpoint",
            folder="sparsegcn.datasets.ondisk_graphs:is_graph_ondisk",
            decays="all",  # fit_graphs: add_decayed_weights on every parameter
        ),
        "hetero": Task(
            description="a class per node of one type of a heterogeneous graph (R-GCN on "
            "typed sampled mini-batches)",
            loss=masked_cross_entropy,
            metrics={"acc": masked_accuracy},
            prepare="sparsegcn.tasks.hetero:prepare_hetero",
            pipeline="sparsegcn.tasks.hetero:run_hetero_experiment",
            datasets=("ogbn-mag", "synthetic:mag"),
            models=("rgcn",),
            defaults={"rgcn": _OGB_MAG_RGCN},
            check="sparsegcn.tasks.hetero:check_hetero_experiment",
            sweep=None,
            info="sparsegcn.tasks.hetero:describe_hetero",
            predict="sparsegcn.tasks.hetero:predict_hetero_checkpoint",
            folder="sparsegcn.datasets.ondisk_hetero:is_hetero_ondisk",
        ),
        "node-multilabel": Task(
            description=(
                "several binary labels per node of one graph, some possibly missing "
                "(ROC-AUC averaged over tasks; full batch or sampled mini-batches)"
            ),
            loss=masked_binary_cross_entropy,
            metrics={"rocauc": masked_roc_auc},
            prepare="sparsegcn.experiment.build:node_data",
            pipeline="sparsegcn.experiment.run:run_node_experiment",
            datasets=("ogbn-proteins", "synthetic:proteins"),
            check="sparsegcn.tasks.multilabel:check_multilabel_experiment",
            sweep=None,
            folder="sparsegcn.datasets.ondisk:is_multilabel_ondisk",
            objective=MULTILABEL,
        ),
        "link": Task(
            description="whether a pair of nodes is an edge (GAE/VGAE, full batch or sampled "
            "mini-batches)",
            loss=_link_loss,
            metrics={"auc": _link_auc, "ap": _link_ap},
            prepare="sparsegcn.tasks.link:prepare_links",
            pipeline="sparsegcn.tasks.link:run_link_experiment",
            datasets=("ogbl-", "synthetic:collab", "synthetic:citation2"),
            models=("gae", "vgae"),
            fields={"use_valid_edges": False},
            check="sparsegcn.tasks.link:check_link_experiment",
            sweep=None,
            info="sparsegcn.tasks.link:describe_link_dataset",
            borrows=("node",),
            private_models=True,
            saves="link-model",
        ),
    }
)
"""Every task sparsegcn learns, by name."""


def task_name(dataset: str, task: str = "auto") -> str:
    """The name of the task that owns ``dataset`` (the default task's for any other),
    or ``task`` when one is asked for by name (``--task``; checked by :func:`check_task`)."""
    if task != "auto" and task in TASKS:
        return task
    if isinstance(dataset, str):
        for name, entry in TASKS.items():
            if entry.owns(dataset):
                return name
    return next(name for name, entry in TASKS.items() if not entry.datasets)


def task_for(dataset: str, task: str = "auto") -> Task:
    """The :class:`Task` that owns ``dataset`` (or ``task``, asked for by name)."""
    return TASKS[task_name(dataset, task)]


def check_task(experiment) -> None:
    """Refuses, before any data is read, what ``experiment``'s task does not take.

    A model the task does not train, and whatever the task's own ``check``
    refuses. A field another task alone reads (:attr:`Task.fields`) is refused
    by :data:`sparsegcn.experiment.config.APPLIES`, which has a row for each.

    Raises:
      ValueError: naming the setting, its value and the task's datasets.
    """
    asked = getattr(experiment, "task", "auto")
    owner = task_name(experiment.dataset)
    if asked != "auto":
        if asked not in TASKS:
            raise ValueError(f"unknown task {asked!r}; choose one of {['auto', *TASKS]}")
        if asked != owner and owner not in TASKS[asked].borrows:
            raise ValueError(
                f"--task {asked} does not apply to {experiment.dataset!r}, a {owner}-level dataset"
            )
    name = task_name(experiment.dataset, asked)
    task = TASKS[name]
    for other, spec in TASKS.items():
        if other != name and spec.private_models and experiment.model in (spec.models or ()):
            raise ValueError(
                f"model {experiment.model!r} trains on {other}-level tasks only; "
                f"{experiment.dataset!r} is a {name}-level dataset here (pass --task {other})"
            )
    if task.models is not None and experiment.model not in task.models:
        if asked == name and owner != name:  # --task link on a node dataset
            raise ValueError(
                f"--task {name} trains {', '.join(task.models)}; model {experiment.model!r} "
                f"does not (pass --model {task.models[0]})"
            )
        raise ValueError(
            f"{experiment.dataset} is a {name}-level dataset; model {experiment.model!r} does not "
            f"train on it, choose one of {list(task.models)}"
        )
    if task.check is not None:
        resolve(task.check)(experiment)


__all__ = ["TASKS", "Task", "check_task", "resolve", "task_for", "task_name"]

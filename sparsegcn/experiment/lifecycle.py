"""What ``--resume``, ``--checkpoint``, ``--plot`` and ``predict`` add around training."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sparsegcn import _interrupt
from sparsegcn.datasets import Dataset, data_location, is_path, load
from sparsegcn.datasets.base import reading_only
from sparsegcn.datasets.ogb import official_test_metric
from sparsegcn.experiment.build import build_model, node_data, reorder_dataset
from sparsegcn.experiment.config import APPLIES, Experiment, without_inapplicable
from sparsegcn.nn import Model
from sparsegcn.plots import plot_curves
from sparsegcn.tasks import task_for, task_name
from sparsegcn.train import FitResult, NodeData, init_state, make_optimizer, predict
from sparsegcn.train.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointHook,
    check_checkpoint_folder,
    check_metadata,
    checkpoint_files,
    dataset_fingerprint,
    fingerprint_expectation,
    load_checkpoint,
    read_manifest,
    state_template,
)
from sparsegcn.train.minibatch import MinibatchData, minibatch_data

# Fields a resumed run may change: where things are read and written, how
# long it trains, the propagation backend (same parameters, same math) and
# the placement on devices and processes (the state is replicated, so a run
# checkpointed on D devices resumes on any other count) and of the features
# (the same parameters wherever they live).
RESUME_MAY_CHANGE = frozenset(
    {
        "root",
        "feature_cache",
        "backend",
        "epochs",
        "patience",
        "epochs_per_call",
        "checkpoint",
        "checkpoint_every",
        "keep",
        "resume",
        "plot",
        "devices",
        "coordinator",
        "num_processes",
        "process_id",
        "features_on",
        "shard_features",
        # Streamed runs (the only ones these change) write no checkpoints.
        "graph_on",
        "max_batches",
        "overwrite",
        "divergence_factor",
        "divergence_epochs",
        # Graph runs: which graphs share a batch, as --devices changes it; the state does not.
        "packing",
    }
)


# What the processes of one multi-process run may be given differently: its own index,
# the coordinator as each reaches it, where each finds the data, and where process 0's
# outputs go (whether there are any must agree).
PER_PROCESS = frozenset({"process_id", "coordinator", "root"})
PRESENCE_ONLY = frozenset({"checkpoint", "plot", "feature_cache"})


def process_settings(exp: Experiment) -> dict[str, str]:
    """What every process of a multi-process run must agree on, as ``{field: text}``
    (:func:`~sparsegcn.parallel.check_same_settings`).

    Every :class:`Experiment` field but :data:`PER_PROCESS`; the output folders
    and files of :data:`PRESENCE_ONLY` by whether they are given; a dataset
    folder by its manifest (its path may differ by host) and ``resume`` by
    the checkpoint's epoch and arrays sha256 (the same file, wherever it is).
    """
    settings = {}
    for field in dataclasses.fields(exp):
        if field.name in PER_PROCESS:
            continue
        value = getattr(exp, field.name)
        if field.name in PRESENCE_ONLY:
            value = value is not None
        settings[field.name] = repr(value)
    if is_path(exp.dataset):
        manifest = Path(exp.dataset).expanduser() / "manifest.json"
        if manifest.is_file():
            settings["dataset"] = hashlib.sha256(manifest.read_bytes()).hexdigest()
    if exp.resume:
        resumed = read_manifest(exp.resume)
        settings["resume"] = f"epoch {resumed.get('epoch')}, {resumed.get('arrays_sha256')}"
    return settings


def checkpoint_metadata(exp: Experiment, dataset: Dataset) -> dict:
    """What every checkpoint of ``exp`` records: its config and the dataset's fingerprint
    (its splits as sets, :func:`_sorted_splits`)."""
    return {
        "config": dataclasses.asdict(exp),
        "dataset": dataset_fingerprint(_sorted_splits(dataset)),
    }


def _sorted_splits(dataset: Dataset) -> Dataset:
    """``dataset`` with each split's node ids in increasing order (itself if they are).

    A node run reads a split as a set: as a mask (:func:`node_data`; the
    sampled trainers draw their batches from the mask's nodes), by its size,
    or sorted (:func:`reorder_dataset`). A split file whose rows are a
    reordering of the same ids (never repeated, :class:`Dataset`) trains the
    same run, so its fingerprint is taken in this order.
    """
    split = {k: np.asarray(v) for k, v in dataset.split.items()}
    if all(bool((np.diff(v) >= 0).all()) for v in split.values()):
        return dataset
    return dataclasses.replace(dataset, split={k: np.sort(v) for k, v in split.items()})


def restore_checkpoint(exp: Experiment, dataset: Dataset, model: Model) -> Checkpoint:
    """Loads ``exp.resume``, refusing one written for another dataset, seeds or settings.

    Every :class:`Experiment` field outside :data:`RESUME_MAY_CHANGE` must
    equal the checkpoint's, and the dataset's fingerprint must match; then
    every state array must have this model's shape (see
    :func:`~sparsegcn.train.checkpoint.load_checkpoint`).
    """
    if exp.resume is None:
        raise ValueError("restore_checkpoint needs exp.resume (a checkpoint path), got None")
    tx = make_optimizer(exp.train_config())
    template = state_template(lambda key: init_state(model, tx, key), exp.seeds)
    manifest = read_manifest(exp.resume)
    return load_checkpoint(
        exp.resume,
        template,
        seeds=exp.seed_list(),
        expect={
            "dataset": expected_fingerprint(manifest, dataset),
            "config": resume_settings(exp, manifest),
        },
    )


def resume_settings(
    exp: Experiment, manifest: dict, may_change: frozenset = RESUME_MAY_CHANGE
) -> dict:
    """The settings of ``exp`` the checkpoint of ``manifest`` must have recorded alike.

    Every :class:`Experiment` field but ``may_change`` and those that do not
    apply to this run (:data:`~sparsegcn.experiment.config.APPLIES`: they had
    no effect on the checkpoint's run either). Two that name the same thing
    differently are taken as recorded: a dataset folder given by another path
    (``./tiny`` and ``DIR/tiny``; the dataset's fingerprint shows it is the
    same data), and a task given by name that the recorded ``auto`` chose.
    """
    settings = {k: v for k, v in dataclasses.asdict(exp).items() if k not in may_change}
    settings = {k: v for k, v in settings.items() if k not in APPLIES or APPLIES[k].when(exp)}
    metadata = manifest.get("metadata")
    recorded = metadata.get("config") if isinstance(metadata, dict) else None
    if not isinstance(recorded, dict):
        return settings
    dataset = recorded.get("dataset")
    if "dataset" in settings and isinstance(dataset, str):
        if is_path(dataset) and is_path(exp.dataset):
            settings["dataset"] = dataset
        task = recorded.get("task", "auto")
        if "task" in settings and isinstance(task, str):
            with contextlib.suppress(KeyError, StopIteration):
                if task_name(dataset, task) == task_name(exp.dataset, exp.task):
                    settings["task"] = task
    return settings


def expected_fingerprint(manifest: dict, dataset: Dataset) -> dict:
    """What a checkpoint's manifest must record for ``dataset``: its
    :func:`~sparsegcn.train.checkpoint.dataset_fingerprint` with sorted splits
    (:func:`_sorted_splits`), less the digests an older checkpoint lacks
    (:func:`~sparsegcn.train.checkpoint.fingerprint_expectation`).

    A checkpoint written before splits were sorted for it recorded them in
    the order they were read: that digest is expected of it when it is the
    one it records (the same rows, in the same order, as then).
    """
    ordered = _sorted_splits(dataset)
    fingerprint = dataset_fingerprint(ordered)
    stored = manifest.get("metadata", {}).get("dataset")
    key = "labels_split_sha256"
    if (
        ordered is not dataset
        and isinstance(stored, Mapping)
        and stored.get(key) != fingerprint[key]
    ):
        as_read = dataset_fingerprint(dataset)[key]
        if stored.get(key) == as_read:
            fingerprint[key] = as_read
    return fingerprint_expectation(manifest, fingerprint)


def check_dataset(checkpoint, dataset: Dataset) -> None:
    """Refuses ``dataset`` unless it is the one ``checkpoint`` was trained on: same
    name and sizes, labels and splits (as sets of node ids: :func:`_sorted_splits`),
    features and edges (their digests).

    Runs right after loading, before features are prepared or anything is
    compiled.

    Raises:
      CheckpointError: naming the first entry of the fingerprint that differs.
    """
    manifest = read_manifest(checkpoint)
    check_metadata(manifest, {"dataset": expected_fingerprint(manifest, dataset)})


@dataclasses.dataclass
class Lifecycle:
    """What ``--resume``, ``--checkpoint`` and ``--plot`` add around :func:`fit`.

    Attributes:
      resumed: the checkpoint training continues from, or ``None``.
      hook: the ``on_chunk`` checkpoint writer, or ``None``.
    """

    resumed: Checkpoint | None = None
    hook: CheckpointHook | None = None

    @staticmethod
    def check(exp: Experiment) -> None:
        """Refuses ``exp.resume`` and ``exp.checkpoint`` before any data is read.

        The checkpoint resumed from must be a readable manifest, and the
        checkpoint folder must not be locked by another process nor hold
        another run's checkpoints (a resumed run owns its own up to the
        epoch it resumes from; ``--overwrite`` allows the rest), nor files
        of the other kind than the task keeps there (the task's ``saves``). :meth:`start` (a link
        run: ``sparsegcn.tasks.link.claim_link_folder``) checks again
        when it takes the folder.
        """
        run_ids: tuple[str | None, ...] = ()
        after_epoch = None
        if exp.resume:
            manifest = read_manifest(exp.resume)
            run_ids, after_epoch = (manifest.get("run_id"),), manifest.get("epoch")
        if exp.checkpoint:
            check_checkpoint_folder(
                exp.checkpoint,
                run_ids=run_ids,
                overwrite=exp.overwrite,
                kind=task_for(exp.dataset, exp.task).saves,
                after_epoch=after_epoch if isinstance(after_epoch, int) else None,
            )

    @classmethod
    def start(cls, exp: Experiment, dataset: Dataset, model: Model) -> Lifecycle:
        """Restores ``exp.resume`` and claims ``exp.checkpoint`` (its lock, held until
        :meth:`finish`); a resumed run continues the resumed checkpoint's run id, so
        it may write beside that run's checkpoints."""
        resumed = restore_checkpoint(exp, dataset, model) if exp.resume else None
        epochs = exp.train_config().epochs
        if resumed is not None and resumed.epoch > epochs:
            # Nothing would train; the checkpoint would be saved again as if it had (as
            # the graph task refuses it too).
            raise ValueError(
                f"the resumed run trained {resumed.epoch} epochs, more than --epochs "
                f"{epochs}: give --epochs {resumed.epoch} or more to continue it"
            )
        hook = CheckpointHook.for_run(
            exp, seeds=exp.seed_list(), metadata=checkpoint_metadata(exp, dataset), resumed=resumed
        )
        return cls(resumed=resumed, hook=hook)

    def fit_kwargs(self) -> dict:
        """``state``, ``history`` and ``on_chunk`` for :func:`fit`."""
        kwargs: dict[str, Any] = {"on_chunk": self.hook}
        if self.resumed is not None:
            kwargs.update(state=self.resumed.state, history=self.resumed.history)
        return kwargs

    def finish(self, exp: Experiment, result: FitResult) -> dict:
        """Saves the final checkpoint if none was written, draws the plot; report entries.

        A plot that cannot be drawn (a full disk, ...) does not lose the run it
        belongs to: the entries then say ``"plot": None`` and, in
        ``"plot_error"``, why, and ``sparsegcn train`` reports the run before
        failing on it. An interrupt recorded by ``sparsegcn._interrupt``
        (a Ctrl-C whose ``KeyboardInterrupt`` was swallowed) stops it before
        either write.
        """
        if self.hook is not None:
            try:
                if not self.hook.saved:
                    _interrupt.check()
                    self.hook.save(result.state, result.history)
            finally:
                self.hook.close()
        entries = {
            "checkpoint": str(self.hook.saved[-1]) if self.hook else None,
            "resumed_from": str(self.resumed.path) if self.resumed else None,
            "resumed_epoch": self.resumed.epoch if self.resumed else None,
            "plot": exp.plot,
        }
        if exp.plot:
            count = len(result.seeds)
            title = f"{exp.model} on {exp.dataset}, {count} seed{'s' if count != 1 else ''}"
            _interrupt.check()
            try:
                plot_curves(result.history, exp.plot, title=title, metric=_metric_label(exp))
            except Exception as err:
                entries.update(plot=None, plot_error=_one_line(err))
        return entries


def _metric_label(exp: Experiment) -> str:
    """The validation metric a node run's ``val_acc`` curve holds, for its plot."""
    from sparsegcn.tasks import task_for

    objective = task_for(exp.dataset, exp.task).objective
    names = {"acc": "accuracy", "rocauc": "ROC-AUC"}
    return names.get(getattr(objective, "metric_name", "acc"), "metric")


def _one_line(err: Exception) -> str:
    """``err``'s message on one line, after its type unless it is an ``OSError``
    (whose message names the file)."""
    text = " ".join(str(err).split())
    if isinstance(err, OSError) and text:
        return text
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def run_inputs(exp: Experiment, checkpoint: str | None = None) -> list[tuple[str, object]]:
    """``(description, path)`` of what a run of ``exp`` reads, for
    :func:`~sparsegcn.files.check_not_inputs`: the dataset's file or folder,
    the files of the checkpoint resumed from (``exp.resume``) or predicted
    from (``checkpoint``), and, when predicting, the feature cache.

    Predicting reads the checkpoint alone, never the one its run resumed
    from: the ``resume`` its config records is not an input then (it may be
    pruned or moved since, or relative to another folder)."""
    inputs: list[tuple[str, object]] = [("the dataset", data_location(exp.dataset, exp.root))]
    source = checkpoint or exp.resume
    if source:
        inputs += [("the checkpoint file", path) for path in checkpoint_files(source)]
    if checkpoint and exp.feature_cache:
        inputs.append(("the feature cache", exp.feature_cache))
    return inputs


def experiment_from_checkpoint(manifest: dict, **overrides) -> Experiment:
    """The :class:`Experiment` a checkpoint was trained with, with ``overrides``.

    Raises:
      CheckpointError: the checkpoint records no or unknown settings, or a
        ``dataset`` override is of another task than the checkpoint's
        dataset (a graph dataset for a node checkpoint, ...): refused before
        any setting of the checkpoint's (its ``scale``) is applied to it.
    """
    config = dict(manifest.get("metadata", {}).get("config") or {})
    if not config:
        raise CheckpointError(
            f"{manifest.get('path')} records no experiment config (not written by sparsegcn train)"
        )
    known = {f.name for f in dataclasses.fields(Experiment)}
    unknown = sorted(set(config) - known)
    if unknown:
        raise CheckpointError(
            f"{manifest.get('path')} was written with settings this sparsegcn does not know: "
            f"{unknown}"
        )
    asked = overrides.get("dataset")
    if asked is not None and isinstance(config.get("dataset"), str):
        trained_on = task_name(config["dataset"], config.get("task", "auto"))
        other = task_name(asked)
        if other != trained_on:
            raise CheckpointError(
                f"{manifest.get('path')} is a {trained_on} checkpoint of "
                f"{config['dataset']!r}; dataset {asked!r} is a {other}-level dataset"
            )
    config.update({k: v for k, v in overrides.items() if v is not None})
    if overrides.get("dataset") is not None and overrides.get("root") is None:
        config["root"] = None if is_path(config["dataset"]) else config.get("root")
    # Settings that had no effect (recorded before they were refused) are dropped.
    return Experiment(**without_inapplicable(config))


def predict_checkpoint(
    checkpoint: str,
    *,
    dataset: str | None = None,
    root: str | None = None,
    params: str = "best",
    progress: bool = False,
) -> dict:
    """Class predictions and embeddings of every node from a training checkpoint.

    Args:
      checkpoint: checkpoint folder (its newest checkpoint) or manifest file.
      dataset: dataset name (default: the one trained on); its fingerprint
        (name, sizes, labels, splits, and digests of the features and edges)
        must match the checkpoint's.
      root: data root (default: the training run's).
      params: ``"best"`` (the early-stopping restored params, whose test
        accuracy ``sparsegcn train`` reports) or ``"last"``.
      progress: show loading progress.

    Returns:
      ``{"predictions": int32 [K, N], "embeddings": float32 [K, N, H],
      "test_acc": [K] accuracy of the predictions on the test split,
      "reported_test_acc": [K] as recorded in training (``best`` only),
      "seeds", "epoch", "checkpoint", "dataset"}``, and for ``ogbn-*``
      datasets when ``ogb`` is installed ``"ogb_evaluator"``: ``{"metric",
      "test": [K], "test_mean"}``, ogb's official metric of the predictions
      (:func:`~sparsegcn.datasets.ogb.official_test_metric`).
    """
    if params not in ("best", "last"):
        raise ValueError(f"params must be 'best' or 'last', got {params!r}")
    manifest = read_manifest(checkpoint)
    exp = experiment_from_checkpoint(manifest, dataset=dataset, root=root)
    with reading_only("predicting"):  # the root may come from the checkpoint: write nothing there
        data_set = load(exp.dataset, exp.root, scale=exp.scale, progress=progress)
    if data_set.multilabel:
        raise ValueError(
            f"predict gives a class per node; {data_set.name} is multi-label "
            f"({data_set.num_classes} binary tasks), which it does not support"
        )
    expect = {"dataset": expected_fingerprint(manifest, data_set)}
    check_metadata(manifest, expect)  # before the model is built or anything compiled
    model = build_model(exp, data_set)
    tx = make_optimizer(exp.train_config())
    template = state_template(lambda key: init_state(model, tx, key), len(manifest["seeds"]))
    ckpt = load_checkpoint(manifest["path"], template, expect=expect)
    # Trained on relabelled nodes: predict in that order, then restore the dataset's.
    relabelled, reordering = reorder_dataset(data_set, exp.reorder)
    full = node_data(
        relabelled,
        exp.model,
        normalize_features=exp.normalize_features,
        options=exp.options(),
        feature_cache=exp.feature_cache,
        write_feature_cache=False,  # the training run's cache: read, never created here
    )
    # Trained on sampled blocks: layer-wise inference over node chunks.
    data: NodeData | MinibatchData = minibatch_data(full) if exp.sampled else full
    chosen = ckpt.state.best.params if params == "best" else ckpt.state.params
    classes, embeddings = (np.asarray(a) for a in predict(model, chosen, data))
    if reordering is not None:
        classes, embeddings = classes[:, reordering.inverse], embeddings[:, reordering.inverse]
    test = data_set.split["test"]
    test_acc = (classes[:, test] == data_set.labels[test][None, :]).mean(axis=1)
    official = official_test_metric(data_set, classes)
    return {
        "predictions": classes,
        "embeddings": embeddings,
        "test_acc": test_acc,
        "reported_test_acc": np.asarray(ckpt.state.best.test_acc) if params == "best" else None,
        "seeds": list(ckpt.seeds),
        "epoch": ckpt.epoch,
        "checkpoint": str(ckpt.path),
        "dataset": data_set.name,
        **({} if official is None else {"ogb_evaluator": official}),
    }

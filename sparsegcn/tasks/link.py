"""The link task's pipeline: a split of node pairs, a GAE or VGAE, the report.

Datasets: the link datasets (``ogbl-*``, ``synthetic:collab``,
``synthetic:citation2``, :func:`~sparsegcn.datasets.links.load_links`, with
their official split and negatives) choose the task themselves; any node
dataset (``cora``, ``synthetic:*``, a folder) becomes one with ``--task
link``: its edges are split at random (85/5/10,
:func:`~sparsegcn.sampling.links.random_link_split`), one split per seed
(seeded by it), as Kipf & Welling re-split for every run.

:func:`run_link_experiment` loads, splits, prepares the encoder's graph
(its registry entry's preparation of the train edges), trains every seed as
one program (:func:`~sparsegcn.train.links.fit_links`; with ``--fanouts`` on
sampled mini-batches of train edges,
:func:`~sparsegcn.train.links.fit_links_sampled`, checked by
:func:`check_sampled_links`) and reports (:func:`summarize_links`;
``docs/link-prediction.md`` lists every key). ``--devices D`` splits each
step's pairs over ``D`` devices (both trainers' ``devices``); a count this
process lacks is refused before any data is read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import io
import itertools
import math
import os
import time
from pathlib import Path

import jax
import numpy as np

from sparsegcn.datasets.base import reading_only
from sparsegcn.features import as_features, normalize
from sparsegcn.train.checkpoint import (
    LINK_MODEL_FILES,
    LINK_MODEL_FORMAT,
    FolderLock,
    check_checkpoint_folder,
)

_FIXED = "trains for a fixed number of epochs and saves its final model once, without resuming"
_SELECTS_NONE = "trains for a fixed number of epochs and keeps the last params, selecting none"
_ON_DEVICE = "keeps the features and the graph on the device, whole"

# Experiment settings the link trainer does not read: the values that mean "unset",
# and what link training does instead.
_UNSUPPORTED = {
    "resume": ((None,), _FIXED),
    "plot": ((None,), "draws no curves (its report holds the final metrics)"),
    "reorder": (("none",), "keeps the dataset's node ids, which its splits and pairs name"),
    "residual": ((False,), "builds its encoder without residual connections"),
    "feature_cache": ((None,), "precomputes no features (the cache holds SGC's)"),
    "features_on": (("auto", "device"), _ON_DEVICE),
    "graph_on": (("auto", "device"), _ON_DEVICE),
    "max_batches": ((0,), "trains every batch of every epoch"),
    "shard_features": ((False,), _ON_DEVICE),
    "patience": ((0,), "trains for a fixed number of epochs, without early stopping"),
    "clip_norm": ((0.0,), "updates without gradient clipping"),
    "monitor": ((None,), _SELECTS_NONE),
    # The encoder propagates on its registry entry's graph (an edge list, or CSR where
    # the native kernel runs the product: the report's "layout"), never through a backend.
    "backend": (("segment",), "propagates on its encoder's own graph, not through a backend"),
    "edge_features": ((True,), "encodes node features alone, never edge features"),
}

# A sampled tree's positions are int32 (as node runs', experiment.resources).
_TREE_LIMIT = 2**31

OGB_LINK_PREFIX = "ogbl-"


def check_link_experiment(exp) -> None:
    """Refuses the settings link training does not support, naming the first.

    Raises:
      ValueError: resuming, plots, early stopping, a ``--monitor``, a
        ``--backend``, ``--no-edge-features``, ..., a sampled run that
        :func:`check_sampled_links` refuses, or ``--use-valid-edges`` on a
        dataset without an official split.
    """
    for name, (unset, why) in _UNSUPPORTED.items():
        value = getattr(exp, name)
        if value not in unset:
            flag = "--" + name.replace("_", "-")
            if value is False:
                flag = f"--no-{name.replace('_', '-')}"
            raise ValueError(
                f"{exp.dataset}: link prediction {why}; {name}={value!r} ({flag}) "
                "is not supported with it"
            )
    if exp.sampled:
        check_sampled_links(exp)
    from sparsegcn.nn.gae import FULL_DECODERS

    options = exp.options()
    if options["recon"] == "full" and options["decoder"] not in FULL_DECODERS:
        raise ValueError(
            f"--recon full scores all N² pairs as one matrix product; --decoder "
            f"{options['decoder']} has none: use --recon sampled or --decoder "
            f"{' or '.join(FULL_DECODERS)}"
        )
    if options["negatives"] != "pairs" and options["recon"] == "full":
        raise ValueError(
            f"--negatives {options['negatives']} chooses the negatives of --recon sampled; "
            "--recon full scores every pair and draws none"
        )
    if exp.use_valid_edges and not _owns(exp.dataset):
        raise ValueError(
            f"--use-valid-edges adds the official validation edges to the message-passing graph; "
            f"{exp.dataset!r} has no official link split (it is split at random)"
        )


def check_sampled_links(exp) -> None:
    """Refuses what sampled link training (:func:`~sparsegcn.train.links.fit_links_sampled`)
    does not do: the full reconstruction, an encoder without a sampled form, or
    a tree of ``2**31`` entries or more.

    A batch of ``B`` train edges (``ceil(B / D)`` on each of ``D`` devices)
    and as many negatives has ``S = 4B`` endpoints (``3B`` with target
    negatives, which share their positive's source), each the root of a tree
    whose deepest level holds ``S * k_1 * ... * k_L`` entries: the fanouts
    are not lowered to the graph's degrees (a link batch's padded trees are
    as wide as asked), so this is known before any data is read.

    Raises:
      ValueError: naming the first such setting.
    """
    from sparsegcn.nn.registry import ENCODERS, get_model_spec

    options = exp.options()
    why = "--fanouts trains on sampled batches of train edges against sampled negatives"
    if options["recon"] != "sampled":
        raise ValueError(f"{why}; recon={options['recon']!r} is not supported with it")
    if exp.epochs_per_call:
        raise ValueError(
            f"{why}, one epoch a compiled call; epochs_per_call={exp.epochs_per_call} "
            "is not supported with it"
        )
    if not get_model_spec(options["encoder"]).sampled:
        raise ValueError(
            f"{why}; encoder={options['encoder']!r} runs full batch only, choose one of "
            f"{[e for e in ENCODERS if get_model_spec(e).sampled]}"
        )
    batch = exp.minibatch_config()
    ends = 3 if options["negatives"] == "targets" else 4
    roots = ends * -(-batch.batch_size // exp.devices)
    entries = roots * math.prod(batch.fanouts)
    if entries >= _TREE_LIMIT:
        raise ValueError(
            f"--fanouts {exp.fanouts} with --batch-size {batch.batch_size} samples {entries} "
            f"tree entries per batch ({roots} endpoint nodes of its pairs and negatives"
            f"{f' on each of {exp.devices} devices' if exp.devices > 1 else ''}); a tree must "
            f"stay below 2**31 = {_TREE_LIMIT}: lower --fanouts or --batch-size"
        )


def estimate_link_bytes(exp, num_nodes: int, num_features: int, num_edges: int) -> int:
    """The bytes of the arrays that dominate a link run of ``exp``, as
    :func:`~sparsegcn.experiment.resources.estimate_bytes` counts a node run's.

    Per seed: the encoder's input dropout mask (``N F`` bytes full batch),
    the float32 activations of every layer over ``N`` nodes (``H`` times the
    encoder's heads wide, ``D``, or ``2D`` for VGAE's means and log-stds, at
    the last), with ``--recon full`` the ``[N, N]`` logits and their gradient,
    and for sampled runs each batch's trees (as a node run's, rooted at a
    batch's endpoint nodes, :func:`check_sampled_links`); the weights
    (``F -> H -> ... -> D``, and the decoder's ``D x D``) four times over:
    params, gradients and Adam's two moments; and a randomly split dataset's
    own split (its message graph, labels and edge index, about 32 bytes an
    edge). Times ``K = exp.seeds``. The features are left out, as for node runs.

    Args:
      exp: the run.
      num_nodes, num_features, num_edges: ``N``, ``F`` and the dataset's
        (directed) edges.
    """
    from sparsegcn.nn.registry import get_model_spec

    options = exp.options()
    n, f = int(num_nodes), int(num_features)
    dim = int(options["embedding_dim"]) * (2 if exp.model == "vgae" else 1)
    heads_option = get_model_spec(options["encoder"]).options.get("heads")
    heads = 1 if heads_option is None else int(heads_option.default)
    hidden, layers = int(exp.hidden) * heads, exp.layers or 1
    mask = 1 if (exp.dropout or 0) > 0 else 0
    per_seed = n * (hidden * (layers - 1) + dim) * 4
    if exp.sampled:
        batch = exp.minibatch_config()
        ends = 3 if options["negatives"] == "targets" else 4
        roots = ends * -(-batch.batch_size // exp.devices)
        levels = [roots * math.prod(batch.fanouts[:d]) for d in range(len(batch.fanouts) + 1)]
        per_seed += sum(levels) * (5 + hidden * 4) + levels[-1] * f * (4 + mask)
    else:
        per_seed += n * f * mask
        if options["recon"] == "full":
            per_seed += 8 * n * n
    if not _owns(exp.dataset):  # one split a seed
        per_seed += 32 * int(num_edges) + 16 * n
    widths = [f] + [hidden] * (layers - 1) + [dim]
    weights = sum(a * b for a, b in itertools.pairwise(widths))
    if options["decoder"] != "inner":
        weights += dim * dim
    return exp.seeds * (per_seed + 16 * weights)


def check_link_memory(
    exp, num_nodes: int, num_features: int, num_edges: int, *, available: int | None = -1
) -> None:
    """Refuses a link run whose estimate (:func:`estimate_link_bytes`) exceeds the
    memory available, in one line naming what to lower.

    Args:
      exp, num_nodes, num_features, num_edges: as :func:`estimate_link_bytes` takes them.
      available: bytes to check against; ``-1`` asks the default device
        (:func:`sparsegcn.bench.runner.available_memory`), ``None`` skips the check.

    Raises:
      ValueError: the estimate exceeds ``available``.
    """
    from sparsegcn.bench.runner import available_memory

    if available == -1:
        available = available_memory()
    if available is None:
        return
    need = estimate_link_bytes(exp, num_nodes, num_features, num_edges)
    if need <= available:
        return
    full = not exp.sampled and exp.options()["recon"] == "full"
    parts = ["weights", "optimizer state", "activations"]
    lower = ["--seeds", "--hidden", "--embedding-dim"]
    if exp.sampled:
        parts.append("sampled trees")
        lower += ["--batch-size", "--fanouts"]
    if full:
        parts.append(f"the {num_nodes}² reconstruction")
    raise ValueError(
        f"this link run needs an estimated {need / 2**30:.1f} GiB ({exp.seeds} seed(s) x "
        f"{need / exp.seeds / 2**20:.1f} MiB of {', '.join(parts[:-1])} and {parts[-1]}) but "
        f"{available / 2**30:.1f} GiB is available; lower {', '.join(lower[:-1])} or "
        f"{lower[-1]}{', or pass --recon sampled' if full else ''}"
    )


def _owns(dataset: str) -> bool:
    from sparsegcn.tasks import TASKS

    return TASKS["link"].owns(dataset)


def describe_link_dataset(
    name: str, root, *, progress: bool = False, scale: float = 1.0, seed: int = 0
) -> tuple[dict, str]:
    """``sparsegcn info`` of a link dataset: ``describe_links`` of
    :mod:`sparsegcn.datasets.links` at ``scale`` and ``seed`` (``progress`` is
    unused: nothing is downloaded)."""
    from sparsegcn.datasets.links import describe_links

    del progress
    return describe_links(name, root, scale=scale, seed=seed)


def link_feature_normalization(exp) -> str:
    """``exp.normalize_features``, with ``"auto"`` meaning ``"none"``: Kipf & Welling's
    GAE code feeds the raw features (Cora's binary bag of words). Row
    normalisation shrinks the encoder's first outputs about 18-fold on Cora, so
    VGAE's unit-variance noise drowns the means: on Cora, 10 seeds measured
    0.864 test AUC row-normalised against 0.914 raw (``docs/link-prediction.md``)."""
    return "none" if exp.normalize_features == "auto" else exp.normalize_features


def prepare_links(exp, *, progress: bool = False):
    """The data, model and trainer settings of ``exp``.

    Returns:
      ``(info, data, model, config)``: ``info`` a dict of the dataset's
      name, sizes, metric and split sizes; ``data`` the
      :class:`~sparsegcn.train.links.LinkData`; ``model`` the
      :class:`~sparsegcn.nn.gae.LinkModel`; ``config`` the
      :class:`~sparsegcn.train.links.LinkTrainConfig`.

    Raises:
      ValueError: the run would not fit in the default device's memory
        (:func:`check_link_memory`), before the data is split.
    """
    return _prepare_links(exp, progress=progress)[:4]


def encoder_packed() -> bool:
    """Whether the full-batch encoder's graph is packed in CSR
    (:func:`~sparsegcn.experiment.build.model_graph`), whatever its size.

    On an accelerator, and on CPU where the native CSR kernel runs the
    product (:func:`~sparsegcn.backends.native.ffi_available`): a Cora GAE
    step (sparse features) then runs in about 0.88 of the edge list's time
    and compiles faster (``docs/link-prediction.md``). Without the kernel,
    the edge list.
    """
    from sparsegcn.backends import native

    return jax.default_backend() != "cpu" or native.ffi_available()


def _prepare_links(exp, *, progress: bool = False, available: int | None = -1):
    """:func:`prepare_links`'s four, and the sampled epoch's
    :class:`~sparsegcn.train.links.SampledLinkData` of the first split (its
    message graph unprepared, as the neighbour sampler reads it).

    The memory the run needs is checked (:func:`check_link_memory` against
    ``available``) once the dataset is loaded, before it is split or anything
    is built or compiled."""
    from sparsegcn.datasets.base import default_root
    from sparsegcn.experiment.build import model_graph
    from sparsegcn.nn.registry import create_model
    from sparsegcn.train.links import LinkTrainConfig, eval_set, link_data, stack_link_data

    options = exp.options()
    test_graph = None  # the test pairs' message graph where it is not graph's
    if _owns(exp.dataset):
        import importlib

        root = default_root() if exp.root is None else exp.root
        links = importlib.import_module("sparsegcn.datasets.links")  # the link datasets' loaders
        generated = {"scale": exp.scale} if exp.dataset.startswith("synthetic:") else {}
        dataset = links.load_links(exp.dataset, root, progress=progress, **generated)
        if dataset.features is None:
            raise ValueError(
                f"{exp.dataset} has no node features; the link models encode node features"
            )
        check_link_memory(
            exp,
            dataset.num_nodes,
            dataset.features.shape[1],
            dataset.num_edges,
            available=available,
        )
        # Training and the validation pairs pass messages on the train edges alone;
        # --use-valid-edges adds the validation edges for the test pairs only, as
        # OGB's baselines' --use_valedges_as_input does (their full_adj_t).
        graph = links.message_graph(dataset)
        if exp.use_valid_edges:
            test_graph = links.message_graph(dataset, use_valid_edges=True)
        split, features, metric = dataset.split, dataset.features, dataset.metric
        undirected, name = not dataset.directed, dataset.name
        num_edges, form = dataset.num_edges, dataset.negatives
        train = split["train"]
    else:
        from sparsegcn.datasets import load
        from sparsegcn.sampling.links import random_link_split

        # load() defaults the root itself, and refuses one beside a folder path.
        dataset = load(exp.dataset, exp.root, scale=exp.scale, progress=progress)
        features, name, metric = dataset.features, dataset.name, "auc"
        num_edges, form = dataset.num_edges, "pairs"
        check_link_memory(exp, dataset.num_nodes, features.shape[1], num_edges, available=available)
        # Kipf & Welling split anew for every run: one random split per seed.
        try:
            splits = [random_link_split(dataset.graph, seed=seed) for seed in exp.seed_list()]
        except ValueError as err:
            raise ValueError(f"{exp.dataset}: {err}") from None
        graph, split, undirected = splits[0]
    n = graph.num_nodes
    x = as_features(normalize(features, link_feature_normalization(exp)), n)

    packed = encoder_packed()

    def data_of(graph, split, train):
        return link_data(
            model_graph(graph, options["encoder"], packed=packed),
            x,
            n,
            train,
            eval_set(split["valid"], split["valid_neg"], form),
            eval_set(split["test"], split["test_neg"], form),
            undirected=undirected,
        )

    if _owns(exp.dataset):
        data = data_of(graph, split, train)
        if test_graph is not None:
            prepared = model_graph(test_graph, options["encoder"], packed=packed)
            data = data._replace(test_graph=prepared)
    else:
        data = stack_link_data([data_of(s.graph, s.split, s.split["train"]) for s in splits])
    model = create_model(
        exp.model,
        int(features.shape[1]),
        options["embedding_dim"],
        hidden=exp.hidden,
        layers=exp.layers,
        dropout=exp.dropout,
        **options,
    )
    config = LinkTrainConfig(
        epochs=exp.epochs,
        learning_rate=exp.lr,
        weight_decay=exp.weight_decay,
        decay_layers=exp.decay_layers,
        metric="" if metric in ("auc", "rocauc", "ap") else metric,
        divergence_factor=exp.divergence_factor or None,
        divergence_epochs=exp.divergence_epochs,
        epochs_per_call=exp.epochs_per_call or None,
    )
    info = {
        "dataset": name,
        "num_nodes": n,
        "num_edges": num_edges,
        "num_message_edges": int(graph.num_edges),
        "num_test_message_edges": int((graph if test_graph is None else test_graph).num_edges),
        "layout": data.graph.layout_name,
        "metric": metric,
        "split": "official" if _owns(exp.dataset) else "random per seed (85/5/10, seeded by it)",
        "split_sizes": {k: int(np.asarray(v).shape[0]) for k, v in split.items()},
    }
    sampled = None
    if exp.sampled:
        from sparsegcn.train.links import sampled_link_data, stack_sampled_link_data

        if _owns(exp.dataset):
            sampled = sampled_link_data(
                graph, x, train, undirected=undirected, test_graph=test_graph
            )
        else:  # one split a seed, as the full-batch run has
            sampled = stack_sampled_link_data(
                [
                    sampled_link_data(s.graph, x, s.split["train"], undirected=undirected)
                    for s in splits
                ]
            )
    return info, data, model, config, sampled


def ogb_link_metric(name: str, metric: str, result) -> dict | None:
    """``{"metric", "test" [K], "test_mean"}`` from ``ogb``'s ``Evaluator`` on each
    seed's test scores, for ``ogbl-*`` datasets when ``ogb`` is installed; else ``None``.

    ``result.test_scores`` holds ``(positive [K, P], negative [K, Q] or [K, P, K'])``.
    Torch tensors are passed (ogb 1.3.6's NumPy branch of ``mrr`` is broken).
    """
    if not name.startswith(OGB_LINK_PREFIX) or importlib.util.find_spec("ogb") is None:
        return None
    import torch
    from ogb.linkproppred import Evaluator

    evaluator = Evaluator(name)
    pos, neg = result.test_scores
    values = []
    for p, q in zip(pos, neg, strict=True):
        # Copies: arrays read back from the device are read-only, which torch refuses.
        scores = {"y_pred_pos": np.array(p, np.float32), "y_pred_neg": np.array(q, np.float32)}
        out = evaluator.eval({k: torch.from_numpy(v) for k, v in scores.items()})
        key = f"{metric}_list" if metric == "mrr" else metric
        value = out[key]
        values.append(float(value.mean() if hasattr(value, "mean") else value))
    return {"metric": metric, "test": values, "test_mean": float(np.mean(values))}


def summarize_links(exp, info: dict, result, wall_s: float, ogb_metric: dict | None) -> dict:
    """The report of a link run; see ``docs/link-prediction.md`` for every key."""
    report = {
        **info,
        "model": exp.model,
        "encoder": exp.options()["encoder"],
        "decoder": exp.options()["decoder"],
        "recon": exp.options()["recon"],
        "negatives": exp.options()["negatives"],
        "backend": "segment",
        "seeds": len(result.seeds),
        "seed_list": list(result.seeds),
    }
    for split, values in (("test", result.test), ("val", result.valid)):
        for key, per_seed in values.items():
            per_seed = np.asarray(per_seed, np.float64)
            report[f"{split}_{key}_mean"] = float(per_seed.mean())
            report[f"{split}_{key}_std"] = float(per_seed.std())
            report[f"{split}_{key}"] = per_seed.tolist()
    report.update(
        {
            "final_loss": np.asarray(result.losses[-1]).tolist(),
            "loss_curve": np.asarray(result.losses).mean(axis=1).tolist(),
            "train_step_ms_median": result.train_step_ms_median,
            "train_step_ms_per_seed": result.train_step_ms_median / len(result.seeds),
            "epoch_ms_median": result.train_step_ms_median,
            "compile_s": result.compile_s,
            "train_s": result.train_s,
            "wall_s": wall_s,
            "device": jax.devices()[0].device_kind,
            "devices": result.devices,
            "processes": jax.process_count(),
            "parallelism": "link-pairs" if result.devices > 1 else "none",
            "checkpoint": None,
            "resumed_from": None,
            "plot": None,
            "config": dataclasses.asdict(exp),
        }
    )
    if ogb_metric is not None:
        report["ogb_evaluator"] = ogb_metric
    return report


def save_link_model(folder, exp, result) -> str:
    """Writes :data:`LINK_MODEL_FILES` into ``folder`` (made if missing), both or none.

    Returns:
      the folder's path.
    """
    from sparsegcn.files import json_writer, write_all_atomic

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    leaves = jax.tree_util.tree_leaves(result.params)
    buffer = io.BytesIO()
    np.savez(buffer, *[np.asarray(leaf) for leaf in leaves])
    blob = buffer.getvalue()
    meta = {
        "format": LINK_MODEL_FORMAT,
        "config": dataclasses.asdict(exp),
        "seeds": list(result.seeds),
        "leaves": len(leaves),
        "params_bytes": len(blob),
        "params_sha256": hashlib.sha256(blob).hexdigest(),
    }
    meta_file, params_file = LINK_MODEL_FILES
    write_all_atomic(
        {folder / meta_file: json_writer(meta), folder / params_file: lambda f: f.write(blob)}
    )
    return str(folder)


def read_link_arrays(folder, meta: dict) -> list[np.ndarray]:
    """A saved link model's arrays, checked against its settings (not yet against
    a model: :func:`read_link_params`); cheap, so callers run it before any data
    is read.

    Args:
      folder: the model's folder (:func:`save_link_model`).
      meta: its settings, as read from ``link-model.json``.

    Returns:
      the ``meta["leaves"]`` arrays, in the model's flattening order.

    Raises:
      ValueError: naming the file and what is wrong: settings without a
        leaf count or seeds, a truncated or corrupt arrays file (another
        size or sha256 than ``meta`` records, or no ``.npz``), or arrays
        that are not the ones ``meta`` lists.
    """
    from sparsegcn.files import NPY_MAGIC, CorruptFileError, open_regular, read_npz

    meta_file, params_file = LINK_MODEL_FILES
    path = Path(folder) / params_file
    count, seeds = meta.get("leaves"), meta.get("seeds")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"{Path(folder) / meta_file}: 'leaves' must be an int >= 1, got {count!r}")
    if not isinstance(seeds, list) or not seeds:
        raise ValueError(f"{Path(folder) / meta_file}: 'seeds' must be a non-empty list")
    digest, saved = meta.get("params_sha256"), meta.get("params_bytes")
    with open_regular(path, what="the link model's params") as f:
        size = os.fstat(f.fileno()).st_size
        if digest is not None and size != saved:  # refused unread, whatever its size
            raise ValueError(
                f"{path} is truncated or corrupt: {size} bytes where {meta_file} records {saved}"
            )
        blob = f.read()
    if digest is not None and hashlib.sha256(blob).hexdigest() != digest:
        raise ValueError(
            f"{path} is truncated or corrupt: its sha256 is not the one {meta_file} records"
        )
    if blob.startswith(NPY_MAGIC):
        raise ValueError(f"{path} is not a readable .npz of params (it holds one bare array)")
    if count * 128 > len(blob):  # each member takes more than 128 bytes: names unbuilt
        raise ValueError(
            f"{path} holds {len(blob)} bytes, too few for the {count} params {meta_file} lists"
        )
    names = [f"arr_{i}" for i in range(count)]
    try:
        # Only the listed members, each header checked before anything is decompressed.
        stored = read_npz(path, dict.fromkeys(names), what="link model params", data=blob)
    except CorruptFileError as err:
        raise ValueError(
            f"{path} is not a readable .npz of the {count} params {meta_file} lists ({err.cause})"
        ) from None
    return [stored[name] for name in names]


def read_link_params(folder, meta: dict, template, *, arrays=None) -> dict:
    """A saved link model's params, checked against the model they are for.

    Args:
      folder: the model's folder (:func:`save_link_model`).
      meta: its settings, as read from ``link-model.json``.
      template: one seed's params (``model.init(key)``), for the tree, the
        shapes and the dtypes.
      arrays: :func:`read_link_arrays`'s result, when already read.

    Returns:
      every seed's params: ``template``'s tree, each leaf ``[K, ...]``.

    Raises:
      ValueError: what :func:`read_link_arrays` refuses, or a leaf count,
        shape or dtype that is not the model's, naming the file and the param.
    """
    meta_file, params_file = LINK_MODEL_FILES
    path = Path(folder) / params_file
    leaves = read_link_arrays(folder, meta) if arrays is None else arrays
    count, seeds = len(leaves), meta["seeds"]
    expected = jax.tree_util.tree_leaves_with_path(template)
    if len(expected) != count:
        raise ValueError(
            f"{path} holds {count} array(s), but the model {meta_file} describes has "
            f"{len(expected)} params"
        )
    for (where, want), leaf in zip(expected, leaves, strict=True):
        shape = (len(seeds), *want.shape)
        if leaf.shape != shape or leaf.dtype != want.dtype:
            raise ValueError(
                f"{path}: param {jax.tree_util.keystr(where)} is {leaf.dtype} {list(leaf.shape)}, "
                f"but the model {meta_file} describes has {want.dtype} {list(shape)}"
            )
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), leaves)


def claim_link_folder(exp) -> FolderLock | None:
    """Takes ``exp.checkpoint``'s lock for this run, or ``None`` without a folder.

    A link run's folder belongs to it from before its data is read until
    its model is written: the lock (:class:`~sparsegcn.train.checkpoint.FolderLock`,
    the checkpoints' own) refuses a second run on the folder, and the folder
    is checked again under it (:func:`~sparsegcn.train.checkpoint.check_checkpoint_folder`
    with ``kind="link-model"``), so no model another run saved meanwhile
    is replaced without ``--overwrite``. Release it with ``release()``.

    Raises:
      CheckpointLockedError: another process holds the folder.
      CheckpointError: the folder holds checkpoints of a node or graph run,
        or a link model and ``exp.overwrite`` is false.
    """
    if not exp.checkpoint:
        return None
    # First unlocked, so a refused folder is not made (acquiring makes it).
    check_checkpoint_folder(exp.checkpoint, overwrite=exp.overwrite, kind="link-model")
    lock = FolderLock(exp.checkpoint).acquire()
    try:
        check_checkpoint_folder(exp.checkpoint, overwrite=exp.overwrite, kind="link-model")
    except BaseException:
        lock.release()
        raise
    return lock


def is_link_model(folder) -> bool:
    """Whether ``folder`` holds a link run's :data:`LINK_MODEL_FILES`."""
    return Path(folder).is_dir() and (Path(folder) / LINK_MODEL_FILES[0]).is_file()


def link_model_folder(path) -> str | None:
    """The link model's folder ``path`` names, as ``predict --checkpoint`` takes it:
    the folder itself, or its ``link-model.json``; ``None`` for anything else."""
    path = os.fspath(path)
    if Path(path).name == LINK_MODEL_FILES[0] and Path(path).is_file():
        path = os.path.dirname(path) or "."
    return path if is_link_model(path) else None


def _saved_link_run(folder, root: str | None):
    """``(meta, exp)``: a saved link model's settings and the experiment that trained it."""
    from sparsegcn.experiment.lifecycle import experiment_from_checkpoint
    from sparsegcn.files import read_json

    meta_file = LINK_MODEL_FILES[0]
    meta = read_json(Path(folder) / meta_file, what="the link model's settings")
    if not isinstance(meta, dict) or meta.get("format") != LINK_MODEL_FORMAT:
        raise ValueError(f"{folder} holds no sparsegcn link model ({meta_file})")
    if not isinstance(meta.get("config"), dict):
        raise ValueError(
            f"{Path(folder) / meta_file} records no experiment config (a 'config' object); "
            f"it was not written by sparsegcn train"
        )
    config = {**meta["config"], "checkpoint": None}  # predicting writes no model
    exp = experiment_from_checkpoint(
        {"metadata": {"config": config}, "path": str(folder)}, root=root
    )
    return meta, exp


def link_model_inputs(folder, *, root: str | None = None) -> list[tuple[str, object]]:
    """``(description, path)`` of what predicting from a saved link model reads,
    for :func:`~sparsegcn.files.check_not_inputs`: its two files and the
    dataset's file or folder (``root`` as :func:`predict_links` takes it).

    Raises:
      ValueError: ``folder`` holds no readable link model.
    """
    from sparsegcn.datasets import data_location

    _, exp = _saved_link_run(folder, root)
    inputs: list[tuple[str, object]] = [
        ("the link model's file", Path(folder) / name) for name in LINK_MODEL_FILES
    ]
    return [*inputs, ("the dataset", data_location(exp.dataset, exp.root))]


def predict_links(
    folder, pairs=None, *, root: str | None = None, progress: bool = False, what: str = "pairs"
) -> dict:
    """Every seed's node embeddings, and the scores of ``pairs``, from a saved link model.

    The data is prepared again as training prepared it (the same random
    split of every seed, or the dataset's own), so each seed embeds with
    the message-passing graph its test pairs were scored on: the one it was
    trained on, or with ``--use-valid-edges`` that graph and the validation
    edges.

    Args:
      folder: a ``--checkpoint`` folder of a link run (:func:`save_link_model`).
      pairs: int ``[P, 2]`` node pairs (``P = 0``: none, the embeddings
        alone), or ``None``.
      root: data root (default: the training run's).
      what: how the errors name ``pairs`` (the CLI: ``--pairs FILE``).

    Returns:
      ``{"dataset", "seeds", "embeddings" [K, N, D], "scores" [K, P] (logits) or
      None, "probabilities" [K, P] or None}``.

    Raises:
      ValueError: pairs that are not ``[P, 2]`` node ids in ``[0, N)``, or
        a folder whose files do not match.
    """

    if pairs is not None:
        pairs = np.asarray(pairs)
        if pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer):
            raise ValueError(f"{what} must be an int array [P, 2], got {pairs.dtype} {pairs.shape}")
    meta, exp = _saved_link_run(folder, root)
    arrays = read_link_arrays(folder, meta)  # before the data is read
    with reading_only("predicting"):  # the root may come from the model's file: write nothing there
        # The model trained with these settings: no memory estimate to refuse it by.
        info, data, model, _, _ = _prepare_links(exp, progress=progress, available=None)
    n = info["num_nodes"]
    if pairs is not None and pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise ValueError(f"{what}: node ids outside [0, {n}): {pairs.min()}..{pairs.max()}")
    params = read_link_params(folder, meta, model.init(jax.random.key(0)), arrays=arrays)
    axis = None
    if not _owns(exp.dataset):
        from sparsegcn.train.links import per_seed_axes

        axis = per_seed_axes()

    def embed(p, d):  # on the graph the test pairs were scored on
        return model.embed(p, d.graph if d.test_graph is None else d.test_graph, d.features)

    z = jax.jit(jax.vmap(embed, in_axes=(0, axis)))(params, data)
    scores = None
    if pairs is not None:
        # XLA's gathers, as the evaluation scores (the native pair kernels
        # serve the full-batch training step).
        def decode(p, z, pairs):
            return model.decode(p, z, pairs, kernel="xla")

        scores = jax.jit(jax.vmap(decode, in_axes=(0, 0, None)))(
            params, z, np.asarray(pairs, np.int32)
        )
        scores = np.asarray(scores)
    return {
        "dataset": info["dataset"],
        "seeds": list(meta["seeds"]),
        "embeddings": np.asarray(z),
        "scores": scores,
        "probabilities": None if scores is None else 1.0 / (1.0 + np.exp(-scores)),
    }


def fit_sampled(
    exp, data, model, config, sampled, *, devices=1, progress: bool = False, max_batches: int = 0
):
    """:func:`~sparsegcn.train.links.fit_links_sampled` on :func:`_prepare_links`'s
    data with ``exp``'s sampling settings (a randomly split dataset: one split a
    seed, stacked, in one program)."""
    from sparsegcn.train.links import fit_links_sampled

    batch = exp.minibatch_config()
    return fit_links_sampled(
        model,
        sampled,
        data,
        config,
        fanouts=batch.fanouts,
        batch_size=batch.batch_size,
        seeds=exp.seed_list(),
        devices=devices,
        sampler=batch.sampler,
        caps=batch.caps,
        progress=progress,
        max_batches=max_batches,
        per_seed_data=not _owns(exp.dataset),
    )


def run_link_experiment(exp, *, progress: bool = False) -> dict:
    """Loads, splits, trains every seed as one program, reports (:func:`summarize_links`).

    Several processes (``--coordinator``, ``--num-processes``) join first
    (:func:`sparsegcn.parallel.initialize`); a device count (``exp.devices``)
    this process lacks is refused next, before any data is read. Each step
    is then split over the devices of every process, and only process 0
    writes ``--checkpoint``'s model files; it holds that folder
    (:func:`claim_link_folder`) from before the data is read until they are
    written.
    """
    from sparsegcn.parallel import initialize
    from sparsegcn.train.links import link_mesh

    start = time.perf_counter()
    if exp.coordinator is not None:
        initialize(exp.coordinator, exp.num_processes, exp.process_id)
    mesh = link_mesh(exp.devices)
    devices = 1 if mesh is None else mesh
    # Only process 0 writes the model, so only it claims the folder.
    lock = claim_link_folder(exp) if jax.process_index() == 0 else None
    try:
        report = _run_links(exp, devices, start, progress=progress)
    finally:
        if lock is not None:
            lock.release()
    return report


def _run_links(exp, devices, start: float, *, progress: bool) -> dict:
    from sparsegcn.train.links import fit_links

    info, data, model, config, sampled = _prepare_links(exp, progress=progress)
    if sampled is None:
        result = fit_links(
            model,
            data,
            config,
            seeds=exp.seed_list(),
            per_seed_data=not _owns(exp.dataset),
            devices=devices,
            progress=progress,
        )
        batching: dict = {"sampled": False}
    else:
        batch = exp.minibatch_config()
        result = fit_sampled(exp, data, model, config, sampled, devices=devices, progress=progress)
        batches = -(-int(sampled.train.shape[-2]) // batch.batch_size)
        batching = {
            "sampled": True,
            "layout": f"sampled-{batch.sampler}",
            "fanouts": list(batch.fanouts),
            "batch_size": batch.batch_size,
            "batches_per_epoch": batches,
            "sampler": batch.sampler,
            "caps": None if batch.caps is None else list(batch.caps),
        }
    official = ogb_link_metric(info["dataset"], info["metric"], result)
    report = summarize_links(exp, info, result, time.perf_counter() - start, official)
    report.update(batching)
    if sampled is not None:
        # step_ms holds one sampled step (all seeds) each: an epoch is all its batches.
        report["epoch_ms_median"] = result.train_step_ms_median * batching["batches_per_epoch"]
    if exp.checkpoint and jax.process_index() == 0:
        report["checkpoint"] = save_link_model(exp.checkpoint, exp, result)
    return report


__all__ = [
    "LINK_MODEL_FILES",
    "check_link_experiment",
    "check_link_memory",
    "check_sampled_links",
    "claim_link_folder",
    "describe_link_dataset",
    "estimate_link_bytes",
    "is_link_model",
    "link_feature_normalization",
    "link_model_inputs",
    "ogb_link_metric",
    "predict_links",
    "prepare_links",
    "read_link_arrays",
    "read_link_params",
    "run_link_experiment",
    "save_link_model",
    "summarize_links",
]

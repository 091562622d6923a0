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
one program (:func:`~sparsegcn.train.links.fit_links`) and reports
(:func:`summarize_links`; ``docs/link-prediction.md`` lists every key).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time

import jax
import numpy as np

from sparsegcn import transforms
from sparsegcn.features import as_features, normalize

# Experiment settings the link trainer does not read, with the values that mean "unset".
_UNSUPPORTED = {
    "fanouts": (None, "none"),
    "checkpoint": (None,),
    "resume": (None,),
    "plot": (None,),
    "reorder": ("none",),
    "residual": (False,),
    "feature_cache": (None,),
    "features_on": ("auto", "device"),
    "graph_on": ("auto", "device"),
    "max_batches": (0,),
    "shard_features": (False,),
    "coordinator": (None,),
    "devices": (1,),
    "num_processes": (1,),
    "patience": (0,),
    "epochs_per_call": (0,),
    "clip_norm": (0.0,),
}

OGB_LINK_PREFIX = "ogbl-"


def check_link_experiment(exp) -> None:
    """Refuses the settings link training does not support, naming the first.

    Raises:
      ValueError: sampled mini-batches, several devices, checkpoints, plots,
        early stopping, ..., or ``--use-valid-edges`` on a dataset without
        an official split.
    """
    for name, unset in _UNSUPPORTED.items():
        value = getattr(exp, name)
        if value not in unset:
            raise ValueError(
                f"{exp.dataset}: link prediction trains full batch on one device for a fixed "
                f"number of epochs, without checkpoints; {name}={value!r} is not supported with it"
            )
    from sparsegcn.nn.gae import FULL_DECODERS

    options = exp.options()
    if options["recon"] == "full" and options["decoder"] not in FULL_DECODERS:
        raise ValueError(
            f"--recon full scores all N² pairs as one matrix product; --decoder "
            f"{options['decoder']} has none: use --recon sampled or --decoder "
            f"{' or '.join(FULL_DECODERS)}"
        )
    if exp.use_valid_edges and not _owns(exp.dataset):
        raise ValueError(
            f"--use-valid-edges adds the official validation edges to the message-passing graph; "
            f"{exp.dataset!r} has no official link split (it is split at random)"
        )


def _owns(dataset: str) -> bool:
    from sparsegcn.tasks import TASKS

    return TASKS["link"].owns(dataset)


def prepare_links(exp, *, progress: bool = False):
    """The data, model and trainer settings of ``exp``.

    Returns:
      ``(info, data, model, config)``: ``info`` a dict of the dataset's
      name, sizes, metric and split sizes; ``data`` the
      :class:`~sparsegcn.train.links.LinkData`; ``model`` the
      :class:`~sparsegcn.nn.gae.LinkModel`; ``config`` the
      :class:`~sparsegcn.train.links.LinkTrainConfig`.
    """
    from sparsegcn.datasets.base import default_root
    from sparsegcn.nn.registry import create_model, get_model_spec
    from sparsegcn.train.links import LinkTrainConfig, eval_set, link_data, stack_link_data

    root = default_root() if exp.root is None else exp.root
    options = exp.options()
    if _owns(exp.dataset):
        from sparsegcn.datasets.links import load_links, message_graph

        dataset = load_links(exp.dataset, root, progress=progress)
        if dataset.features is None:
            raise ValueError(
                f"{exp.dataset} has no node features; the link models encode node features"
            )
        graph = message_graph(dataset, use_valid_edges=exp.use_valid_edges)
        split, features, metric = dataset.split, dataset.features, dataset.metric
        undirected, name = not dataset.directed, dataset.name
        num_edges = dataset.num_edges
        train = split["train"]
        if exp.use_valid_edges:
            train = np.concatenate([train, split["valid"]])
    else:
        from sparsegcn.datasets import load
        from sparsegcn.sampling.links import random_link_split

        dataset = load(exp.dataset, root, scale=exp.scale, progress=progress)
        features, name, metric = dataset.features, dataset.name, "auc"
        num_edges = dataset.num_edges
        # Kipf & Welling split anew for every run: one random split per seed.
        splits = [random_link_split(dataset.graph, seed=seed) for seed in exp.seed_list()]
        graph, split, undirected = splits[0]
    n = graph.num_nodes
    encoder = get_model_spec(options["encoder"])
    x = as_features(normalize(features, exp.normalize_features), n)

    def data_of(graph, split, train):
        return link_data(
            transforms.sort_edges(encoder.prepare_graph(graph)),
            x,
            n,
            train,
            eval_set(split["valid"], split["valid_neg"]),
            eval_set(split["test"], split["test_neg"]),
            undirected=undirected,
        )

    if _owns(exp.dataset):
        data = data_of(graph, split, train)
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
    )
    info = {
        "dataset": name,
        "num_nodes": n,
        "num_edges": num_edges,
        "num_message_edges": int(graph.num_edges),
        "metric": metric,
        "split": "official" if _owns(exp.dataset) else "random per seed (85/5/10, seeded by it)",
        "split_sizes": {k: int(np.asarray(v).shape[0]) for k, v in split.items()},
    }
    return info, data, model, config


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
        out = evaluator.eval(
            {
                "y_pred_pos": torch.from_numpy(np.asarray(p)),
                "y_pred_neg": torch.from_numpy(np.asarray(q)),
            }
        )
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
        "backend": "segment",
        "layout": "edges",
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
            "train_s": float(np.sum(result.step_ms) / 1e3),
            "wall_s": wall_s,
            "device": jax.devices()[0].device_kind,
            "devices": 1,
            "processes": jax.process_count(),
            "parallelism": "none",
            "checkpoint": None,
            "resumed_from": None,
            "plot": None,
            "config": dataclasses.asdict(exp),
        }
    )
    if ogb_metric is not None:
        report["ogb_evaluator"] = ogb_metric
    return report


def run_link_experiment(exp, *, progress: bool = False) -> dict:
    """Loads, splits, trains every seed as one program, reports (:func:`summarize_links`)."""
    from sparsegcn.train.links import fit_links

    start = time.perf_counter()
    info, data, model, config = prepare_links(exp, progress=progress)
    result = fit_links(
        model,
        data,
        config,
        seeds=exp.seed_list(),
        per_seed_data=not _owns(exp.dataset),
        progress=progress,
    )
    official = ogb_link_metric(info["dataset"], info["metric"], result)
    return summarize_links(exp, info, result, time.perf_counter() - start, official)


__all__ = [
    "check_link_experiment",
    "ogb_link_metric",
    "prepare_links",
    "run_link_experiment",
    "summarize_links",
]

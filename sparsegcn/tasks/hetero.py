"""The heterogeneous node task: R-GCN on ``ogbn-mag`` and ``synthetic:mag``, sampled.

:func:`run_hetero_experiment` loads the dataset (:mod:`sparsegcn.datasets.mag`),
adds reverse relations as OGB's R-GCN baseline does (citations made
symmetric, every other relation reversed as ``rev_<relation>``), builds the
typed model (:func:`sparsegcn.nn.rgcn.rgcn`: learnable embeddings for the
featureless types) and trains it on sampled mini-batches of papers
(:func:`fit_hetero`):

- one epoch is one compiled ``lax.scan`` over its batches; each step samples
  the batch's typed tree on device (:func:`~sparsegcn.sampling.typed.sample_typed`),
  gathers each path's rows from its type's features or embeddings, and
  takes an Adam step (:func:`~sparsegcn.train.optim.make_optimizer`) on the
  mean cross-entropy of the batch's papers;
- after every epoch the validation and test papers are scored on sampled
  trees with the same fanouts (OGB's ``sampler.py`` scores full
  neighbourhoods layer by layer, which at full size would need tens of GB
  for the ``[E, F]`` gathers on this CPU-only path);
- the reported test accuracy is the one at the best validation epoch; with
  ``ogb`` importable, ``ogbn-mag``'s official ``Evaluator`` scores the same
  test predictions (``ogb_evaluator``).

Every shape is static (batches padded to the batch size, padded slots
masked), so an epoch compiles once (tested).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.datasets.mag import HeteroDataset

# Experiment settings the hetero trainer does not read, with the values that mean "unset".
_UNSUPPORTED = {
    "checkpoint": (None,),
    "resume": (None,),
    "plot": (None,),
    "reorder": ("none",),
    "residual": (False,),
    "feature_cache": (None,),
    "features_on": ("auto", "device"),
    "graph_on": ("auto", "device"),
    "sampler": ("tree",),
    "dedup_caps": (None,),
    "shard_features": (False,),
    "coordinator": (None,),
    "devices": (1,),
    "num_processes": (1,),
    "epochs_per_call": (0,),
    "backend": ("segment",),
}


def check_hetero_experiment(exp) -> None:
    """Refuses the settings the heterogeneous trainer does not support, naming the first.

    Raises:
      ValueError: full-batch training (``--fanouts none``), a sampler other
        than the tree, several devices, checkpoints, plots, ...
    """
    if exp.fanouts in (None, "none"):
        raise ValueError(
            f"{exp.dataset}: R-GCN trains on sampled mini-batches of papers; pass --fanouts "
            f"(OGB's baseline: 25,20), not {exp.fanouts!r}"
        )
    for name, unset in _UNSUPPORTED.items():
        value = getattr(exp, name)
        if value not in unset:
            raise ValueError(
                f"{exp.dataset}: the heterogeneous trainer samples typed trees on one device "
                f"without checkpoints; {name}={value!r} is not supported with it"
            )


class HeteroData(NamedTuple):
    """What :func:`fit_hetero` steps on, on the device.

    Attributes:
      dataset: the loaded :class:`~sparsegcn.datasets.mag.HeteroDataset`.
      graph: its graph with reverse relations (the model's edge types).
      csr: :class:`~sparsegcn.sampling.typed.HeteroCSR` of ``graph``.
      features: ``{type: [N_t, F]}`` device arrays of the featured types.
      labels: int32 ``[N_target]`` (``-1`` unlabelled).
    """

    dataset: HeteroDataset
    graph: Any
    csr: Any
    features: dict
    labels: jax.Array


def prepare_hetero(exp, *, progress: bool = False) -> HeteroData:
    """Loads ``exp.dataset``, adds reverse relations, moves everything to the device."""
    from sparsegcn.datasets.mag import load_mag
    from sparsegcn.sampling.typed import HeteroCSR

    dataset = load_mag(exp.dataset, exp.root, scale=exp.scale, seed=exp.seed, progress=progress)
    graph = dataset.graph.add_reverse_relations(merge_same_type=True)
    csr = HeteroCSR.from_graph(graph)
    features = {t: jnp.asarray(x, jnp.float32) for t, x in dataset.features.items()}
    return HeteroData(dataset, graph, csr, features, jnp.asarray(dataset.labels, jnp.int32))


class HeteroFit(NamedTuple):
    """One seed's training outcome.

    Attributes:
      params: the params of the best validation epoch.
      val_acc, test_acc: accuracies at that epoch.
      best_epoch: 1-based.
      test_classes: int ``[n_test]`` predicted classes at that epoch.
      losses: mean training loss per epoch.
      epoch_s: wall seconds of each epoch's training (compilation excluded).
      eval_s: wall seconds of each epoch's scoring of validation and test papers.
      step_s: seconds per training batch (median epoch / batches).
      batches: training batches per epoch.
      compile_s: seconds to compile the epoch and the scorer (ahead of time).
    """

    params: Any
    val_acc: float
    test_acc: float
    best_epoch: int
    test_classes: np.ndarray
    losses: list
    epoch_s: list
    eval_s: list
    step_s: float
    batches: int
    compile_s: float


def _batches(ids: np.ndarray, batch_size: int, limit: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` in padded rows of ``batch_size``: ``(ids [nb, B], mask [nb, B])``."""
    nb = max(1, -(-len(ids) // batch_size))
    if limit:
        nb = min(nb, limit)
    padded = np.zeros(nb * batch_size, np.int32)
    mask = np.zeros(nb * batch_size, bool)
    take = min(len(ids), nb * batch_size)
    padded[:take], mask[:take] = ids[:take], True
    return padded.reshape(nb, batch_size), mask.reshape(nb, batch_size)


def make_epoch(model, tx, fanouts, target: str):
    """The compiled epoch: ``epoch(params, opt_state, key, data, ids, mask) ->
    (params, opt_state, losses [nb])``, a ``lax.scan`` of sampled steps.

    ``params`` and ``opt_state`` are donated (the embeddings and Adam's
    moments are updated in place)."""
    from sparsegcn.sampling.typed import sample_typed
    from sparsegcn.train.losses import masked_cross_entropy
    from sparsegcn.train.optim import apply_optimizer

    def loss_fn(params, sample, features, labels, mask, key):
        logits = model.apply(params, sample, features, key=key, training=True)
        return masked_cross_entropy(logits, labels, mask)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def epoch(params, opt_state, key, csr, features, labels, ids, mask):
        def step(carry, batch):
            params, opt_state = carry
            b_ids, b_mask, b_key = batch
            k_sample, k_drop = jax.random.split(b_key)
            sample = sample_typed(csr, b_ids, fanouts, seed_type=target, key=k_sample, mask=b_mask)
            loss, grads = jax.value_and_grad(loss_fn)(
                params, sample, features, labels[b_ids], b_mask, k_drop
            )
            params, opt_state = apply_optimizer(tx, grads, opt_state, params)
            return (params, opt_state), loss

        keys = jax.random.split(key, ids.shape[0])
        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), (ids, mask, keys))
        return params, opt_state, losses

    return epoch


def make_predict(model, fanouts, target: str):
    """The compiled scorer: ``predict(params, key, data, ids [nb, B], mask) -> classes [nb, B]``."""
    from sparsegcn.sampling.typed import sample_typed

    @jax.jit
    def predict(params, key, csr, features, ids, mask):
        def one(batch):
            b_ids, b_mask, b_key = batch
            sample = sample_typed(csr, b_ids, fanouts, seed_type=target, key=b_key, mask=b_mask)
            return jnp.argmax(model.apply(params, sample, features), axis=-1).astype(jnp.int32)

        return jax.lax.map(one, (ids, mask, jax.random.split(key, ids.shape[0])))

    return predict


def fit_hetero(
    model,
    data: HeteroData,
    tx,
    *,
    fanouts,
    batch_size: int,
    epochs: int,
    seed: int = 0,
    patience: int = 0,
    max_batches: int = 0,
    progress: bool = False,
) -> HeteroFit:
    """Trains ``model`` on sampled batches of ``data``'s training papers; scores every epoch.

    Args:
      model: a :class:`~sparsegcn.nn.rgcn.HeteroModel` over ``data.graph``'s edge types.
      data: from :func:`prepare_hetero`.
      tx: the optax optimizer.
      fanouts: per hop (see :func:`~sparsegcn.sampling.typed.check_typed_fanouts`).
      batch_size: papers per batch ``B``.
      epochs: the most epochs.
      seed: PRNG seed (init, shuffling, sampling, dropout).
      patience: stop after this many epochs without a better validation
        accuracy (0: never).
      max_batches: train only this many batches per epoch and score this many
        of validation and test (0: all).

    Returns:
      A :class:`HeteroFit`.
    """
    from tqdm.auto import tqdm

    from sparsegcn.sampling.typed import check_typed_fanouts

    target = data.dataset.target
    table = check_typed_fanouts(fanouts, data.graph.edge_types)
    key = jax.random.key(seed)
    key, init_key = jax.random.split(key)
    params = model.init(init_key)
    opt_state = tx.init(params)
    split = {k: np.asarray(v) for k, v in data.dataset.split.items()}
    truth = np.asarray(data.dataset.labels)
    # Validation and test papers scored together: one program, one call per epoch.
    valid, test = split["valid"], split["test"]
    if max_batches:
        valid, test = valid[: max_batches * batch_size], test[: max_batches * batch_size]
    eval_ids, eval_mask = _batches(np.concatenate([valid, test]).astype(np.int32), batch_size)
    rng = np.random.default_rng(seed)
    train_ids = split["train"].astype(np.int32)
    ids, mask = _batches(train_ids, batch_size, max_batches)
    start = time.perf_counter()
    args = (data.csr, data.features)
    epoch_fn = (
        make_epoch(model, tx, table, target)
        .lower(params, opt_state, key, *args, data.labels, ids, mask)
        .compile()
    )
    predict = make_predict(model, table, target).lower(params, key, *args, eval_ids, eval_mask)
    predict = predict.compile()
    compile_s = time.perf_counter() - start
    best: dict[str, Any] = {"valid": -1.0}
    losses, epoch_s, eval_s, since = [], [], [], 0
    for epoch in tqdm(range(epochs), disable=not progress, desc="epochs"):
        ids, mask = _batches(rng.permutation(train_ids), batch_size, max_batches)
        key, k_epoch, k_eval = jax.random.split(key, 3)
        start = time.perf_counter()
        params, opt_state, batch_losses = epoch_fn(
            params, opt_state, k_epoch, *args, data.labels, ids, mask
        )
        losses.append(float(np.asarray(batch_losses).mean()))
        epoch_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        pred = np.asarray(predict(params, k_eval, *args, eval_ids, eval_mask))[eval_mask]
        eval_s.append(time.perf_counter() - start)
        parts = {"valid": (pred[: len(valid)], valid), "test": (pred[len(valid) :], test)}
        acc = {k: float((p == truth[i]).mean()) for k, (p, i) in parts.items()}
        if acc["valid"] > best["valid"]:
            # A host copy: the next epoch donates (overwrites) the device params.
            best = dict(acc, epoch=epoch + 1, classes=parts["test"][0])
            best["params"] = jax.tree.map(lambda a: np.array(a, copy=True), params)
            since = 0
        else:
            since += 1
        if patience and since >= patience:
            break
    return HeteroFit(
        params=best["params"],
        val_acc=best["valid"],
        test_acc=best["test"],
        best_epoch=best["epoch"],
        test_classes=best["classes"],
        losses=losses,
        epoch_s=epoch_s,
        eval_s=eval_s,
        step_s=float(np.median(epoch_s)) / ids.shape[0],
        batches=ids.shape[0],
        compile_s=compile_s,
    )


def build_model(exp, data: HeteroData):
    """The R-GCN ``exp`` asks for, over ``data.graph``."""
    from sparsegcn.nn.rgcn import rgcn

    dataset = data.dataset
    return rgcn(
        data.graph.num_nodes,
        data.graph.edge_types,
        {t: int(x.shape[1]) for t, x in dataset.features.items()},
        dataset.num_classes,
        target=dataset.target,
        hidden=exp.hidden,
        num_layers=exp.layers,
        dropout_rate=exp.dropout,
        num_bases=exp.options().get("num_bases", 0),
    )


def official_metric(dataset: HeteroDataset, classes: list[np.ndarray]) -> dict | None:
    """``ogb``'s ``Evaluator("ogbn-mag")`` on each seed's test predictions; ``None``
    for other datasets or without ``ogb``."""
    if dataset.name != "ogbn-mag" or importlib.util.find_spec("ogb") is None:
        return None
    from sparsegcn.datasets.ogb import import_ogb

    evaluator = import_ogb().Evaluator("ogbn-mag")
    truth = np.asarray(dataset.labels)[np.asarray(dataset.split["test"])][:, None]
    values = []
    for row in classes:
        if row.shape[0] != truth.shape[0]:
            return None  # scored on a subset (max_batches)
        result = evaluator.eval({"y_true": truth, "y_pred": row[:, None]})
        values.append(float(result[evaluator.eval_metric]))
    return {"metric": "acc", "test": values, "test_mean": float(np.mean(values))}


def run_hetero_experiment(exp, *, progress: bool = False) -> dict:
    """Loads, trains every seed in turn, reports."""
    from sparsegcn.train.optim import make_optimizer

    start = time.perf_counter()
    load_start = time.perf_counter()
    data = prepare_hetero(exp, progress=progress)
    load_s = time.perf_counter() - load_start
    model = build_model(exp, data)
    tx = make_optimizer(exp.train_config())
    fanouts = exp.minibatch_config().fanouts
    fits = [
        fit_hetero(
            model,
            data,
            tx,
            fanouts=fanouts,
            batch_size=exp.batch_size,
            epochs=exp.epochs,
            seed=seed,
            patience=exp.patience or 0,
            max_batches=exp.max_batches,
            progress=progress,
        )
        for seed in exp.seed_list()
    ]
    test = np.array([f.test_acc for f in fits])
    val = np.array([f.val_acc for f in fits])
    stats = data.dataset.stats()
    official = official_metric(data.dataset, [f.test_classes for f in fits])
    embedding_bytes = sum(
        int(np.prod(v.shape)) * 4 for v in jax.tree.leaves(fits[0].params["embeddings"])
    )
    return {
        "dataset": data.dataset.name,
        "model": exp.model,
        "backend": "segment",
        "layout": "sampled-typed-tree",
        "num_nodes": stats["num_nodes"],
        "num_edges": stats["num_edges"],
        "num_nodes_per_type": stats["num_nodes_per_type"],
        "num_edges_per_relation": stats["num_edges_per_relation"],
        "relations": ["___".join(k) for k in data.graph.edge_types],
        "seeds": len(fits),
        "seed_list": exp.seed_list(),
        "test_acc_mean": float(test.mean()),
        "test_acc_std": float(test.std()),
        "val_acc_mean": float(val.mean()),
        "val_acc_std": float(val.std()),
        "test_acc": test.tolist(),
        "best_epoch": [f.best_epoch for f in fits],
        "train_loss": [f.losses for f in fits],
        "batches_per_epoch": fits[0].batches,
        "train_step_ms_median": 1e3 * float(np.median([f.step_s for f in fits])),
        "epoch_s": [f.epoch_s for f in fits],
        "eval_s": [f.eval_s for f in fits],
        "epoch_ms_median": 1e3 * float(np.median([s for f in fits for s in f.epoch_s])),
        "compile_s": float(np.mean([f.compile_s for f in fits])),
        "embedding_bytes": embedding_bytes,
        "load_s": load_s,
        "wall_s": time.perf_counter() - start,
        "device": jax.devices()[0].device_kind,
        "devices": 1,
        "processes": 1,
        "parallelism": "none",
        "checkpoint": None,
        "resumed_from": None,
        "plot": None,
        "config": dataclasses.asdict(exp),
        **({} if official is None else {"ogb_evaluator": official}),
    }


def describe_hetero(name: str, root, *, progress: bool = False) -> tuple[dict, str]:
    """``sparsegcn info`` of a heterogeneous dataset: totals (raw edges), counts per
    node type and per relation, classes and split sizes.

    Returns:
      ``(stats, text)``.
    """
    from sparsegcn.datasets.mag import load_mag

    start = time.perf_counter()
    dataset = load_mag(name, root, progress=progress)
    stats = {**dataset.stats(), "load_s": time.perf_counter() - start}
    rows = [
        ("dataset", name),
        ("num_nodes", f"{stats['num_nodes']:,}"),
        ("num_edges (raw)", f"{stats['num_edges']:,}"),
        *((f"  nodes: {t}", f"{n:,}") for t, n in stats["num_nodes_per_type"].items()),
        *((f"  edges: {r}", f"{n:,}") for r, n in stats["num_edges_per_relation"].items()),
        ("features", ", ".join(f"{t}: {f}" for t, f in stats["num_features"].items())),
        ("classes", f"{stats['num_classes']} ({dataset.target})"),
        ("split", ", ".join(f"{p} {len(i):,}" for p, i in dataset.split.items())),
        ("load time", f"{stats['load_s']:.2f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return stats, "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


__all__ = [
    "HeteroData",
    "HeteroFit",
    "build_model",
    "check_hetero_experiment",
    "describe_hetero",
    "fit_hetero",
    "make_epoch",
    "make_predict",
    "official_metric",
    "prepare_hetero",
    "run_hetero_experiment",
]

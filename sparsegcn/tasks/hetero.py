"""The heterogeneous node task: R-GCN on ``ogbn-mag`` and ``synthetic:mag``, sampled.

:func:`run_hetero_experiment` loads the dataset (:mod:`sparsegcn.datasets.mag`),
adds reverse relations as OGB's R-GCN baseline does (citations made
symmetric, every other relation reversed as ``rev_<relation>``), builds the
typed model (:func:`sparsegcn.nn.rgcn.rgcn`: learnable embeddings for the
featureless types) and trains it on sampled mini-batches of papers
(:func:`fit_hetero`):

- one epoch is one compiled ``lax.scan`` over its batches; each step samples
  the batch on device, as a typed tree
  (:func:`~sparsegcn.sampling.typed.sample_typed`) or, with ``--sampler
  dedup``, each distinct node of each type once
  (:func:`~sparsegcn.sampling.typed_dedup.sample_typed_dedup`, optional
  ``--dedup-caps``), gathers the rows from each type's features or
  embeddings, and takes an Adam step (:func:`~sparsegcn.train.optim.make_optimizer`) on the
  mean cross-entropy of the batch's papers;
- after every epoch the validation and test papers are scored on samples
  of the same sampler and fanouts (OGB's ``sampler.py`` scores full
  neighbourhoods layer by layer, which at full size would need tens of GB
  for the ``[E, F]`` gathers on this CPU-only path);
- the reported test accuracy is the one at the best validation epoch; with
  ``ogb`` importable, ``ogbn-mag``'s official ``Evaluator`` scores the same
  test predictions (``ogb_evaluator``).

Every shape is static (batches padded to the batch size, padded slots
masked), so an epoch compiles once (tested).

With ``--devices D`` each step's batch is split over ``D`` devices (data
parallel, :func:`fit_hetero`; the params, the learnable embedding tables
among them, stay replicated); with ``--checkpoint``/``--resume`` the seeds'
progress is saved and restored (:class:`HeteroLifecycle`), and ``sparsegcn
predict`` reads the checkpoint (:func:`predict_hetero_checkpoint`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.datasets.base import reading_only
from sparsegcn.datasets.mag import HeteroDataset
from sparsegcn.train.loop import check_state_memory, drive
from sparsegcn.train.losses import chance_loss
from sparsegcn.train.state import DIVERGENCE_EPOCHS, DIVERGENCE_FACTOR

# Experiment settings the hetero trainer does not read: the values that mean "unset",
# and why another value cannot apply.
_UNSUPPORTED = {
    "plot": ((None,), "it draws no plots"),
    "reorder": (("none",), "it samples the typed graph as stored, without reordering it"),
    "residual": ((False,), "R-GCN has no residual connections"),
    "feature_cache": ((None,), "it keeps every node type's features on the device"),
    "features_on": (("auto", "device"), "it keeps every node type's features on the device"),
    "graph_on": (("auto", "device"), "it samples the typed graph on the device"),
    "shard_features": ((False,), "it replicates the features on every device"),
    "epochs_per_call": ((0,), "it compiles one epoch per call"),
}


def check_hetero_experiment(exp) -> None:
    """Refuses the settings the heterogeneous trainer does not support, naming the first.

    Raises:
      ValueError: full-batch training (``--fanouts none``), plots, ...
    """
    if exp.fanouts in (None, "none"):
        raise ValueError(
            f"{exp.dataset}: R-GCN trains on sampled mini-batches of papers; pass --fanouts "
            f"(OGB's baseline: 25,20), not {exp.fanouts!r}"
        )
    for name, (unset, reason) in _UNSUPPORTED.items():
        value = getattr(exp, name)
        if value not in unset:
            raise ValueError(
                f"{exp.dataset}: {name}={value!r} is not supported by the heterogeneous "
                f"trainer: {reason}"
            )
    from sparsegcn.datasets.mag import MAG_NAMES, MAG_NUM_EDGES
    from sparsegcn.nn.rgcn import check_num_bases

    if exp.dataset in MAG_NAMES:  # a folder's relations are known once it is read
        # Each relation and its reverse, a relation within one type made symmetric
        # instead (add_reverse_relations(merge_same_type=True)).
        relations = sum(1 if src == dst else 2 for src, _, dst in MAG_NUM_EDGES)
        check_num_bases(exp.options().get("num_bases", 0), relations, flag="--num-bases")


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
    """Loads ``exp.dataset``, adds reverse relations, moves everything to the device.

    Raises:
      ValueError: a non-finite feature, naming its node type, row and column
        (:meth:`~sparsegcn.datasets.mag.HeteroDataset.check_features`: read
        in row chunks, as a memory-mapped file allows); the loader's errors.
    """
    from sparsegcn.datasets.mag import load_mag
    from sparsegcn.sampling.typed import HeteroCSR

    dataset = load_mag(exp.dataset, exp.root, scale=exp.scale, seed=exp.seed, progress=progress)
    dataset.check_features()
    graph = dataset.graph.add_reverse_relations(merge_same_type=True)
    csr = HeteroCSR.from_graph(graph)
    features = {t: jnp.asarray(x, jnp.float32) for t, x in dataset.features.items()}
    return HeteroData(dataset, graph, csr, features, jnp.asarray(dataset.labels, jnp.int32))


class SeedState(NamedTuple):
    """One seed's training state between two epochs: what a checkpoint restores.

    Attributes:
      params: the model's params after ``epoch`` epochs (learnable embedding
        tables included, under ``params["embeddings"]``).
      opt_state: the optimizer's state.
      key: the PRNG key the next epoch splits (typed).
      best_params: the params of ``best_epoch`` (a host copy); before the
        first epoch, the initial params.
      epoch: int32 ``[]`` epochs trained.
      since: int32 ``[]`` epochs since the best validation accuracy.
      best_epoch: int32 ``[]`` 1-based; 0 before the first epoch (its
        accuracies are the curves' entries of that epoch).
      test_classes: int32 ``[n_test]`` predicted classes of the test papers
        at ``best_epoch``.
      done: bool ``[]``: training ended (``epochs`` reached, or ``patience``
        epochs without a better validation accuracy).
    """

    params: Any
    opt_state: Any
    key: Any
    best_params: Any
    epoch: Any
    since: Any
    best_epoch: Any
    test_classes: Any
    done: Any


CURVES = ("train_loss", "val_acc", "test_acc", "epoch_s", "eval_s")
"""The per-epoch curves a hetero run records (a checkpoint's history, ``[epochs, K]``)."""


class HeteroFit(NamedTuple):
    """One seed's training outcome.

    Attributes:
      params: the params of the best validation epoch (``None`` for a seed
        restored finished from a checkpoint, which keeps only the state of
        the seed in training).
      val_acc, test_acc: accuracies at that epoch.
      best_epoch: 1-based.
      test_classes: int ``[n_test]`` predicted classes at that epoch.
      losses: mean training loss per epoch.
      epoch_s: wall seconds of each epoch's training (compilation excluded).
      eval_s: wall seconds of each epoch's scoring of validation and test papers.
      step_s: seconds per training batch (median epoch / batches).
      batches: training batches per epoch.
      compile_s: seconds to compile the epoch and the scorer (ahead of time;
        0 when no epoch was left to train, about 0 when an earlier seed's
        call compiled the same :class:`HeteroPrograms`).
      val_accs, test_accs: validation and test accuracy per epoch.
      devices: devices each batch was split over.
      state: the final :class:`SeedState`.
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
    val_accs: Sequence[float] = ()
    test_accs: Sequence[float] = ()
    devices: int = 1
    state: Any = None


def _batches(
    ids: np.ndarray, batch_size: int, limit: int = 0, width: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` in rows of ``batch_size``, padded to ``width`` slots (default
    ``batch_size``): ``(ids [nb, width], mask [nb, width])``."""
    width = width or batch_size
    nb = max(1, -(-len(ids) // batch_size))
    if limit:
        nb = min(nb, limit)
    padded = np.zeros((nb, width), np.int32)
    mask = np.zeros((nb, width), bool)
    take = min(len(ids), nb * batch_size)
    rows = np.zeros(nb * batch_size, np.int32)
    rows[:take] = ids[:take]
    padded[:, :batch_size] = rows.reshape(nb, batch_size)
    mask[:, :batch_size] = (np.arange(nb * batch_size) < take).reshape(nb, batch_size)
    return padded, mask


def batch_width(batch_size: int, devices: int) -> int:
    """Slots of a global batch on ``devices`` devices: ``D ceil(B / D)`` (the
    slots past ``B`` are padding, masked)."""
    return int(devices) * -(-int(batch_size) // int(devices))


def _split_batch(tree, mesh):
    """Pins the batch axis (axis 0) of every leaf to the mesh's devices."""
    if mesh is None:
        return tree
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from sparsegcn.parallel.mesh import AXIS

    sharding = NamedSharding(mesh, P(AXIS))
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)


def _replicated(mesh):
    if mesh is None:
        return None
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    return NamedSharding(mesh, P())


def make_epoch(model, tx, fanouts, target: str, mesh=None, *, sampler: str = "tree", caps=None):
    """The compiled epoch: ``epoch(params, opt_state, key, csr, features, labels,
    ids [nb, W], mask) -> (params, opt_state, losses [nb])``, a ``lax.scan`` of
    sampled steps (``sampler``, ``caps``: :func:`~sparsegcn.sampling.typed_dedup.sample_hetero`).

    ``params`` and ``opt_state`` are donated (the embeddings and Adam's
    moments are updated in place). With a ``mesh`` (see :func:`fit_hetero`)
    each batch's slots, and so its sampled tree, are split over the mesh's
    devices; the loss is the mean over the global batch, so the gradient
    XLA all-reduces is the global batch's.
    """
    from sparsegcn.sampling.typed_dedup import sample_hetero
    from sparsegcn.train.losses import masked_cross_entropy
    from sparsegcn.train.optim import apply_optimizer

    def loss_fn(params, sample, features, labels, mask, key):
        logits = model.apply(params, sample, features, key=key, training=True)
        return masked_cross_entropy(logits, labels, mask)

    replicated = _replicated(mesh)
    out = None if replicated is None else (replicated, replicated, replicated)

    @functools.partial(jax.jit, donate_argnums=(0, 1), out_shardings=out)
    def epoch(params, opt_state, key, csr, features, labels, ids, mask):
        def step(carry, batch):
            params, opt_state = carry
            b_ids, b_mask, b_key = batch
            b_ids, b_mask = _split_batch((b_ids, b_mask), mesh)
            k_sample, k_drop = jax.random.split(b_key)
            sample = sample_hetero(
                sampler, csr, b_ids, fanouts, seed_type=target, key=k_sample, mask=b_mask, caps=caps
            )
            if sampler == "tree":  # dedup frontiers have no batch axis to split
                sample = _split_batch(sample, mesh)
            loss, grads = jax.value_and_grad(loss_fn)(
                params, sample, features, labels[b_ids], b_mask, k_drop
            )
            params, opt_state = apply_optimizer(tx, grads, opt_state, params)
            return (params, opt_state), loss

        keys = jax.random.split(key, ids.shape[0])
        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), (ids, mask, keys))
        return params, opt_state, losses

    return epoch


def make_predict(model, fanouts, target: str, mesh=None, *, sampler: str = "tree", caps=None):
    """The compiled scorer: ``predict(params, key, csr, features, ids [nb, W], mask) ->
    classes [nb, W]``; with a ``mesh`` each batch is split over its devices."""
    from sparsegcn.sampling.typed_dedup import sample_hetero

    # Replicated out: every process reads the whole prediction (several processes).
    @functools.partial(jax.jit, out_shardings=_replicated(mesh))
    def predict(params, key, csr, features, ids, mask):
        def one(batch):
            b_ids, b_mask, b_key = batch
            b_ids, b_mask = _split_batch((b_ids, b_mask), mesh)
            sample = sample_hetero(
                sampler, csr, b_ids, fanouts, seed_type=target, key=b_key, mask=b_mask, caps=caps
            )
            if sampler == "tree":
                sample = _split_batch(sample, mesh)
            return jnp.argmax(model.apply(params, sample, features), axis=-1).astype(jnp.int32)

        return jax.lax.map(one, (ids, mask, jax.random.split(key, ids.shape[0])))

    return predict


class HeteroPrograms(NamedTuple):
    """The jitted epoch and scorer of one run's settings, shared by its seeds.

    Each seed of a run trains the same shapes, so one pair of jitted
    functions serves them all and each compiles once per run, not once per
    seed (tested). Built by :func:`hetero_programs`; :func:`fit_hetero`
    refuses a pair made for other settings.

    Attributes:
      epoch: :func:`make_epoch`'s jitted epoch.
      predict: :func:`make_predict`'s jitted scorer.
      settings: the validated settings they were made for (model, tx,
        fanouts table, target, mesh, sampler, caps).
    """

    epoch: jax.stages.Wrapped
    predict: jax.stages.Wrapped
    settings: _FitSettings


class _FitSettings(NamedTuple):
    """A fit's validated settings: what its jitted programs are built from."""

    model: Any
    tx: Any
    fanouts: tuple
    target: str
    mesh: Any
    sampler: str
    caps: Any


def _fit_settings(
    model, tx, data: HeteroData, fanouts, devices, sampler: str, caps
) -> _FitSettings:
    """The validated settings of a fit (fanouts as a per-relation table)."""
    from sparsegcn.parallel.mesh import as_mesh
    from sparsegcn.sampling.typed import check_typed_fanouts
    from sparsegcn.sampling.typed_dedup import TYPED_SAMPLERS, check_typed_caps

    table = check_typed_fanouts(fanouts, data.graph.edge_types)
    if sampler not in TYPED_SAMPLERS:
        raise ValueError(f"sampler must be one of {TYPED_SAMPLERS}, got {sampler!r}")
    if caps is not None and sampler != "dedup":
        raise ValueError(f"caps={caps!r} applies to the dedup sampler, not {sampler!r}")
    caps = check_typed_caps(caps, data.graph.node_types, len(table))
    mesh = as_mesh(devices) if not isinstance(devices, int) or devices > 1 else None
    if mesh is not None and mesh.size == 1:
        mesh = None
    return _FitSettings(model, tx, table, data.dataset.target, mesh, sampler, caps)


def hetero_programs(
    model, tx, data: HeteroData, *, fanouts, devices=1, sampler: str = "tree", caps=None
) -> HeteroPrograms:
    """The jitted epoch and scorer for :func:`fit_hetero` with these arguments.

    Pass the result as ``programs`` to every seed's :func:`fit_hetero` call
    (with the same arguments) so that the seeds share one compilation.

    Raises:
      ValueError: bad fanouts, an unknown sampler, bad caps, or more
        devices than this process has.
    """
    f = _fit_settings(model, tx, data, fanouts, devices, sampler, caps)
    return HeteroPrograms(
        make_epoch(model, tx, f.fanouts, f.target, f.mesh, sampler=f.sampler, caps=f.caps),
        make_predict(model, f.fanouts, f.target, f.mesh, sampler=f.sampler, caps=f.caps),
        f,
    )


def _host(tree):
    """A host copy of every leaf (the next epoch donates the device buffers)."""
    return jax.tree.map(lambda a: np.array(a, copy=True), tree)


def init_seed_key(seed: int) -> jax.Array:
    """The key a seed's first epoch splits (:func:`init_seed_state`'s ``key``)."""
    return jax.random.split(jax.random.key(seed))[0]


def init_seed_state(model, tx, seed: int, num_test: int) -> SeedState:
    """A seed's state before its first epoch: ``model.init`` on a key split from ``seed``."""
    key = jax.random.key(seed)
    key, init_key = jax.random.split(key)
    params = model.init(init_key)
    return SeedState(
        params=params,
        opt_state=tx.init(params),
        key=key,
        best_params=params,
        epoch=np.int32(0),
        since=np.int32(0),
        best_epoch=np.int32(0),
        test_classes=np.zeros(num_test, np.int32),
        done=np.bool_(False),
    )


def seed_state_template(model, tx, num_test: int) -> SeedState:
    """The shapes and dtypes of a :class:`SeedState` (``jax.ShapeDtypeStruct``
    leaves, nothing built)."""
    params = jax.eval_shape(model.init, jax.random.key(0))
    scalar = functools.partial(jax.ShapeDtypeStruct, ())
    return SeedState(
        params=params,
        opt_state=jax.eval_shape(tx.init, params),
        key=jax.ShapeDtypeStruct((), jax.random.key(0).dtype),
        best_params=params,
        epoch=scalar(jnp.int32),
        since=scalar(jnp.int32),
        best_epoch=scalar(jnp.int32),
        test_classes=jax.ShapeDtypeStruct((num_test,), jnp.int32),
        done=scalar(jnp.bool_),
    )


def eval_papers(dataset: HeteroDataset, batch_size: int, max_batches: int = 0):
    """``(valid, test)`` ids scored every epoch (the first ``max_batches``
    batches' worth of each with ``max_batches``)."""
    valid, test = (np.asarray(dataset.split[k]) for k in ("valid", "test"))
    if max_batches:
        valid, test = valid[: max_batches * batch_size], test[: max_batches * batch_size]
    return valid, test


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
    devices=1,
    state: SeedState | None = None,
    history: Mapping[str, Sequence[float]] | None = None,
    on_epoch: Callable[[SeedState, dict], None] | None = None,
    progress: bool = False,
    sampler: str = "tree",
    caps=None,
    programs: HeteroPrograms | None = None,
    divergence_factor: float | None = DIVERGENCE_FACTOR,
    divergence_epochs: int = DIVERGENCE_EPOCHS,
) -> HeteroFit:
    """Trains ``model`` on sampled batches of ``data``'s training papers; scores every epoch.

    Data parallelism (``devices=D > 1``): every step's global batch of
    ``batch_size`` papers is padded to ``D ceil(B / D)`` slots
    (:func:`batch_width`) and split into ``D`` equal slices along the mesh's
    axis (a :class:`~jax.sharding.NamedSharding` over
    :func:`~sparsegcn.parallel.make_mesh`'s mesh); the typed tree is
    sampled for the global batch and split likewise, so each device samples,
    gathers and computes its own slice. The graph, the features, the params
    (learnable embedding tables of the featureless types included) and the
    optimizer state are replicated on every device. The loss is the mean
    over the global batch's papers, so XLA all-reduces the gradient of the
    global batch, every device applies the same update, and a run on ``D``
    devices equals a run on one up to float rounding (tested) whenever
    ``D`` divides ``batch_size`` (else the padding slots shift the sampler's
    random stream). The epoch's papers and their order do not depend on ``D``.

    Args:
      model: a :class:`~sparsegcn.nn.rgcn.HeteroModel` over ``data.graph``'s edge types.
      data: from :func:`prepare_hetero`.
      tx: the optax optimizer.
      fanouts: per hop (see :func:`~sparsegcn.sampling.typed.check_typed_fanouts`).
      batch_size: papers per batch ``B`` (over all devices).
      epochs: the most epochs.
      seed: PRNG seed (init, shuffling, sampling, dropout).
      patience: stop after this many epochs without a better validation
        accuracy (0: never).
      max_batches: train only this many batches per epoch and score this many
        of validation and test (0: all).
      devices: ``D`` local devices, or a mesh from
        :func:`~sparsegcn.parallel.make_mesh`.
      state: continue from this :class:`SeedState` (a checkpoint's); default
        :func:`init_seed_state`.
      history: ``state``'s curves so far, ``{name: [epochs]}`` for each of
        :data:`CURVES`.
      on_epoch: called after every epoch with the :class:`SeedState` and the
        curves so far (checkpoints).
      sampler: ``"tree"`` or ``"dedup"`` (training and scoring alike). The
        dedup sample has no batch axis: with several devices only the seeds
        are split and XLA partitions the rest.
      caps: dedup only: frontier caps per hop and type
        (:func:`~sparsegcn.sampling.typed_dedup.check_typed_caps`).
      programs: the jitted epoch and scorer from :func:`hetero_programs`
        with the same arguments, shared by several seeds so that they
        compile once; default: made for this call.
      divergence_factor, divergence_epochs: the finite divergence guard
        (``None``: off); a non-finite training loss always stops the run
        (:func:`~sparsegcn.train.loop.drive`).

    Returns:
      A :class:`HeteroFit`.

    Raises:
      ValueError: more devices than this process has (before anything is
        compiled), bad fanouts, an unknown sampler, bad caps, ``programs``
        made for other settings, an empty train, validation or test split
        (:meth:`~sparsegcn.datasets.mag.HeteroDataset.require_splits`), or a
        non-finite feature (naming its type, row and column).
    """
    from sparsegcn.datasets.hetero_dataset import check_finite_features
    from sparsegcn.parallel.mesh import AXIS, put

    data.dataset.require_splits()
    check_finite_features(data.features)
    settings = _fit_settings(model, tx, data, fanouts, devices, sampler, caps)
    if programs is None:
        programs = hetero_programs(
            model, tx, data, fanouts=fanouts, devices=devices, sampler=sampler, caps=caps
        )
    elif programs.settings != settings:
        differ = [
            name
            for name, a, b in zip(settings._fields, programs.settings, settings, strict=True)
            if a != b
        ]
        raise ValueError(f"programs were made for another {', '.join(differ)} than this fit's")
    mesh = settings.mesh
    num_devices = 1 if mesh is None else mesh.size
    width = batch_width(batch_size, num_devices)

    def place(tree, *spec):
        from jax.sharding import PartitionSpec as P

        return tree if mesh is None else put(tree, mesh, P(*spec))

    truth = np.asarray(data.dataset.labels)
    # Validation and test papers scored together: one program, one call per epoch.
    valid, test = eval_papers(data.dataset, batch_size, max_batches)
    eval_ids, eval_slots = _batches(
        np.concatenate([valid, test]).astype(np.int32), batch_size, width=width
    )
    eval_ids, eval_mask = place((eval_ids, eval_slots), None, AXIS)
    if state is None:
        check_state_memory(
            lambda: init_seed_state(model, tx, seed, len(test)), what=f"fit_hetero (seed {seed})"
        )
        state = init_seed_state(model, tx, seed, len(test))
    curves = {name: list((history or {}).get(name, ())) for name in CURVES}
    if any(len(c) != int(state.epoch) for c in curves.values()):
        raise ValueError(
            f"history must hold {int(state.epoch)} epochs of each of {list(CURVES)} (the "
            f"state's), got { {k: len(v) for k, v in curves.items()} }"
        )
    rng = np.random.default_rng(seed)
    train_ids = np.asarray(data.dataset.split["train"]).astype(np.int32)
    for _ in range(int(state.epoch)):  # the shuffles of the epochs already trained
        rng.permutation(train_ids)
    num_batches = _batches(train_ids, batch_size, max_batches)[0].shape[0]
    params, opt_state, key = place((state.params, state.opt_state, state.key))
    best_epoch = int(state.best_epoch)
    best = {
        "params": state.best_params,
        "valid": curves["val_acc"][best_epoch - 1] if best_epoch else -1.0,
        "test": curves["test_acc"][best_epoch - 1] if best_epoch else -1.0,
        "epoch": best_epoch,
        "classes": np.asarray(state.test_classes),
    }
    epoch, since, done = int(state.epoch), int(state.since), bool(state.done)
    compile_s = 0.0
    epoch_fn: Any = None
    predict: Any = None
    args: tuple = ()
    if not done and epoch < epochs:
        args = place((data.csr, data.features, data.labels))
        ids, mask = place(_batches(train_ids, batch_size, max_batches, width), None, AXIS)
        start = time.perf_counter()
        # The same jitted functions and shapes as an earlier seed's: a cache hit.
        epoch_fn = programs.epoch.lower(params, opt_state, key, *args, ids, mask).compile()
        predict = programs.predict.lower(params, key, *args[:2], eval_ids, eval_mask).compile()
        compile_s = time.perf_counter() - start

    def advance(state: SeedState) -> tuple[SeedState, dict]:
        nonlocal params, opt_state, key, best, since
        epoch = int(state.epoch)
        ids, mask = _batches(rng.permutation(train_ids), batch_size, max_batches, width)
        ids, mask = place((ids, mask), None, AXIS)
        key, k_epoch, k_eval = place(tuple(jax.random.split(key, 3)))
        start = time.perf_counter()
        params, opt_state, batch_losses = epoch_fn(params, opt_state, k_epoch, *args, ids, mask)
        latest = {"train_loss": float(np.asarray(batch_losses).mean())}
        latest["epoch_s"] = time.perf_counter() - start
        start = time.perf_counter()
        pred = np.asarray(predict(params, k_eval, *args[:2], eval_ids, eval_mask))
        pred = pred[eval_slots]  # the host copy: a split array spans other processes
        latest["eval_s"] = time.perf_counter() - start
        parts = {"valid": (pred[: len(valid)], valid), "test": (pred[len(valid) :], test)}
        acc = {k: float((p == truth[i]).mean()) for k, (p, i) in parts.items()}
        latest.update(val_acc=acc["valid"], test_acc=acc["test"])
        epoch += 1
        if acc["valid"] > best["valid"] or not best["epoch"]:
            # A host copy: the next epoch donates (overwrites) the device params.
            best = dict(acc, epoch=epoch, classes=parts["test"][0], params=_host(params))
            since = 0
        else:
            since += 1
        state = SeedState(
            params=params,
            opt_state=opt_state,
            key=key,
            best_params=best["params"],
            epoch=np.int32(epoch),
            since=np.int32(since),
            best_epoch=np.int32(best["epoch"]),
            test_classes=np.asarray(best["classes"], np.int32),
            done=np.bool_(epoch >= epochs or bool(patience and since >= patience)),
        )
        return state, {name: np.array([[value]]) for name, value in latest.items()}

    def as_lists(history: Mapping[str, np.ndarray]) -> dict:
        return {name: [float(v) for v in history[name][:, 0]] for name in CURVES}

    state, recorded, _ = drive(
        advance,
        state,
        epochs=epochs,
        seeds=[seed],
        finished=lambda s: bool(s.done) or int(s.epoch) >= epochs,
        start=int(state.epoch),
        history={n: np.asarray(c, np.float64)[:, None] for n, c in curves.items()}
        if int(state.epoch)
        else None,
        on_chunk=None if on_epoch is None else lambda s, h: on_epoch(s, as_lists(h)),
        progress=progress,
        loss="train_loss",
        watch="val_acc",
        divergence_factor=divergence_factor,
        divergence_epochs=divergence_epochs,
        chance=chance_loss("acc", int(data.dataset.num_classes)),
        desc=f"seed {seed}",
    )
    if recorded:
        curves = as_lists(recorded)
    epoch = int(state.epoch)
    return HeteroFit(
        params=best["params"],
        val_acc=best["valid"],
        test_acc=best["test"],
        best_epoch=best["epoch"],
        test_classes=np.asarray(best["classes"]),
        losses=curves["train_loss"],
        epoch_s=curves["epoch_s"],
        eval_s=curves["eval_s"],
        step_s=float(np.median(curves["epoch_s"])) / num_batches if epoch else float("nan"),
        batches=num_batches,
        compile_s=compile_s,
        val_accs=curves["val_acc"],
        test_accs=curves["test_acc"],
        devices=num_devices,
        state=state,
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


# -- checkpoints -----------------------------------------------------------------


class HeteroCheckpointState(NamedTuple):
    """What a hetero run's checkpoint holds (format: :mod:`sparsegcn.train.checkpoint`).

    Seeds train in turn, so a checkpoint keeps the whole training state of
    one seed, the one trained last (the last seed with ``epoch > 0``), and
    what the report needs of the others: each seed's epochs, best epoch and
    test predictions, and (in the history) its curves.

    Attributes:
      current: the :class:`SeedState` of the seed trained last.
      epoch: int32 ``[K]`` epochs each seed trained (0: not started).
      done: bool ``[K]`` each seed finished.
      best_epoch: int32 ``[K]`` 1-based (0: none yet).
      test_classes: int32 ``[K, n_test]`` test predictions at each best epoch.
    """

    current: SeedState
    epoch: Any
    done: Any
    best_epoch: Any
    test_classes: Any


def checkpoint_template(model, tx, seeds: int, num_test: int) -> HeteroCheckpointState:
    """The :class:`HeteroCheckpointState` of ``seeds`` seeds as ``jax.ShapeDtypeStruct``
    leaves (for :func:`~sparsegcn.train.checkpoint.load_checkpoint`)."""

    def per_seed(dtype, *shape):
        return jax.ShapeDtypeStruct((seeds, *shape), dtype)

    return HeteroCheckpointState(
        current=seed_state_template(model, tx, num_test),
        epoch=per_seed(jnp.int32),
        done=per_seed(jnp.bool_),
        best_epoch=per_seed(jnp.int32),
        test_classes=per_seed(jnp.int32, num_test),
    )


def hetero_fingerprint(dataset: HeteroDataset) -> dict:
    """What identifies a heterogeneous dataset for a checkpoint: its name, counts
    per type and relation, classes, and digests of its labels and split (whole),
    its features (per type, :func:`~sparsegcn.train.checkpoint.features_sha256`)
    and its relations' edges (whole up to
    :data:`~sparsegcn.train.checkpoint.FINGERPRINT_BYTES` per relation, else
    :data:`~sparsegcn.train.checkpoint.FINGERPRINT_ROWS` evenly spaced edges)."""
    import hashlib

    from sparsegcn.train.checkpoint import FINGERPRINT_BYTES, FINGERPRINT_ROWS, features_sha256

    labels = hashlib.sha256(np.ascontiguousarray(dataset.labels, np.int64).tobytes())
    for name in sorted(dataset.split):
        labels.update(name.encode())
        labels.update(np.ascontiguousarray(dataset.split[name], np.int64).tobytes())
    features = hashlib.sha256()
    for t in sorted(dataset.features):
        features.update(f"{t} {features_sha256(dataset.features[t])}\n".encode())
    graph = hashlib.sha256()
    for key in dataset.graph.edge_types:
        view = dataset.graph.relations[key]
        parts = [view.receivers, view.senders] + ([] if view.weights is None else [view.weights])
        count = int(np.shape(view.senders)[0])
        graph.update(f"{'___'.join(key)} {count} weighted={view.weights is not None}\n".encode())
        positions = None
        if count * 4 * len(parts) > FINGERPRINT_BYTES:
            positions = np.unique(np.linspace(0, count - 1, FINGERPRINT_ROWS).astype(np.int64))
        for part, dtype in zip(parts, (np.int64, np.int64, np.float32), strict=False):
            part = np.asarray(part)
            part = part if positions is None else part[positions]
            graph.update(np.ascontiguousarray(part, dtype).tobytes())
    return {
        "name": dataset.name,
        "target": dataset.target,
        "num_nodes": {t: int(n) for t, n in dataset.graph.num_nodes.items()},
        "num_edges": {"___".join(k): int(n) for k, n in dataset.graph.num_edges.items()},
        "num_classes": int(dataset.num_classes),
        "labels_split_sha256": labels.hexdigest(),
        "features_sha256": features.hexdigest(),
        "graph_sha256": graph.hexdigest(),
    }


def _resume_may_change() -> frozenset:
    """The settings a resumed hetero run may change: the node runs' list
    (:data:`~sparsegcn.experiment.lifecycle.RESUME_MAY_CHANGE`) less
    ``epochs`` (a finished seed's state is not kept, so it cannot train on)
    and ``max_batches`` (it chooses the batches)."""
    from sparsegcn.experiment.lifecycle import RESUME_MAY_CHANGE

    return RESUME_MAY_CHANGE - {"epochs", "max_batches"}


class _Records:
    """Every seed's progress, as the checkpoint records it."""

    def __init__(self, seeds: int, num_test: int):
        self.epoch = np.zeros(seeds, np.int32)
        self.done = np.zeros(seeds, bool)
        self.best_epoch = np.zeros(seeds, np.int32)
        self.test_classes = np.zeros((seeds, num_test), np.int32)
        self.curves: list[dict] = [{name: [] for name in CURVES} for _ in range(seeds)]
        self.current: SeedState | None = None

    def update(self, k: int, state: SeedState, curves: Mapping) -> None:
        self.epoch[k], self.done[k] = int(state.epoch), bool(state.done)
        self.best_epoch[k] = int(state.best_epoch)
        self.test_classes[k] = np.asarray(state.test_classes)
        self.curves[k] = {name: list(curves[name]) for name in CURVES}
        self.current = state

    def state(self) -> HeteroCheckpointState:
        if self.current is None:
            raise ValueError("no seed has trained an epoch yet: nothing to checkpoint")
        return HeteroCheckpointState(
            self.current,
            self.epoch.copy(),
            self.done.copy(),
            self.best_epoch.copy(),
            self.test_classes.copy(),
        )

    def history(self) -> dict:
        """``{curve: [epochs, K]}``, NaN after a seed's last epoch."""
        rows = int(self.epoch.max())
        out = {}
        for name in CURVES:
            table = np.full((rows, len(self.curves)), np.nan)
            for k, curves in enumerate(self.curves):
                table[: len(curves[name]), k] = curves[name]
            out[name] = table
        return out

    @classmethod
    def restore(cls, ckpt) -> tuple[_Records, int]:
        """The records of a loaded checkpoint and the index of its ``current`` seed.

        Raises:
          CheckpointError: the records contradict each other.
        """
        from sparsegcn.train.checkpoint import CheckpointError

        state = ckpt.state
        epoch = np.asarray(state.epoch)
        records = cls(epoch.shape[0], np.asarray(state.test_classes).shape[1])
        records.epoch[:] = epoch
        records.done[:] = np.asarray(state.done)
        records.best_epoch[:] = np.asarray(state.best_epoch)
        records.test_classes[:] = np.asarray(state.test_classes)
        started = np.flatnonzero(epoch > 0)
        c = int(started[-1]) if started.size else -1
        current = state.current
        if (
            c < 0
            or not records.done[:c].all()
            or int(current.epoch) != epoch[c]
            or bool(current.done) != records.done[c]
        ):
            raise CheckpointError(
                f"{ckpt.path} is inconsistent: seeds train in turn, but it records epochs "
                f"{epoch.tolist()} and done {records.done.tolist()} with its current seed at "
                f"epoch {int(current.epoch)}"
            )
        for k in range(c + 1):
            records.curves[k] = {
                name: [float(v) for v in ckpt.history[name][: epoch[k], k]] for name in CURVES
            }
        # Best params to the host, as training keeps them.
        records.current = current._replace(best_params=_host(current.best_params))
        return records, c

    def fit(self, k: int, batches: int) -> HeteroFit:
        """The :class:`HeteroFit` of a seed restored finished (its params are not
        kept; it compiled nothing in this run)."""
        curves, best = self.curves[k], int(self.best_epoch[k])
        return HeteroFit(
            params=None,
            val_acc=curves["val_acc"][best - 1],
            test_acc=curves["test_acc"][best - 1],
            best_epoch=best,
            test_classes=self.test_classes[k].copy(),
            losses=curves["train_loss"],
            epoch_s=curves["epoch_s"],
            eval_s=curves["eval_s"],
            step_s=float(np.median(curves["epoch_s"])) / batches,
            batches=batches,
            compile_s=0.0,
            val_accs=curves["val_acc"],
            test_accs=curves["test_acc"],
        )


@dataclasses.dataclass
class HeteroLifecycle:
    """``--resume`` and ``--checkpoint`` around the seeds' :func:`fit_hetero` calls.

    A checkpoint (a :class:`HeteroCheckpointState` and the curves
    :data:`CURVES`, ``[epochs, K]``) is written after every epoch that is a
    multiple of ``--checkpoint-every`` of the seed in training, and after
    the last seed's last epoch; its epoch is the most any seed has trained,
    so while a later seed catches up its checkpoints replace the file of
    that epoch. The folder is locked and owned by one run as a node run's
    is (:class:`~sparsegcn.train.checkpoint.CheckpointHook`).

    A resumed run must have the checkpoint's dataset (:func:`hetero_fingerprint`),
    seeds and settings (all but :func:`_resume_may_change`'s); it keeps the
    finished seeds' results, continues the seed trained last from its
    state, and trains the remaining seeds as an uninterrupted run would.

    Attributes:
      resumed: the :class:`~sparsegcn.train.checkpoint.Checkpoint` resumed, or ``None``.
      hook: the checkpoint writer, or ``None``.
      every: epochs between checkpoints (0: only at the end).
      records: every seed's progress so far.
      current: the index of the seed ``resumed`` trained last (-1: none).
    """

    resumed: Any
    hook: Any
    every: int
    records: _Records
    current: int = -1

    @classmethod
    def start(cls, exp, data: HeteroData, model, tx) -> HeteroLifecycle:
        """Restores ``exp.resume`` (refusing another dataset, seeds or settings)
        and claims ``exp.checkpoint``."""
        from sparsegcn.experiment.lifecycle import resume_settings
        from sparsegcn.train.checkpoint import CheckpointHook, load_checkpoint, read_manifest

        seeds = exp.seed_list()
        _, test = eval_papers(data.dataset, exp.batch_size, exp.max_batches)
        resumed, records, current = None, _Records(len(seeds), len(test)), -1
        if not (exp.resume or exp.checkpoint):
            return cls(resumed, None, 0, records, current)
        metadata = {"config": dataclasses.asdict(exp), "dataset": hetero_fingerprint(data.dataset)}
        if exp.resume:
            settings = resume_settings(exp, read_manifest(exp.resume), _resume_may_change())
            template: Any = checkpoint_template(model, tx, len(seeds), len(test))
            resumed = load_checkpoint(
                exp.resume,
                template,
                seeds=seeds,
                expect={"dataset": metadata["dataset"], "config": settings},
            )
            records, current = _Records.restore(resumed)
        hook = CheckpointHook.for_run(exp, seeds=seeds, metadata=metadata, resumed=resumed)
        return cls(resumed, hook, exp.checkpoint_every, records, current)

    def start_state(self, k: int) -> tuple[SeedState | None, dict | None]:
        """``(state, history)`` seed ``k`` continues from (``None``: a fresh start)."""
        if k != self.current or self.records.current is None:
            return None, None
        return self.records.current, self.records.curves[k]

    def finished(self, k: int) -> bool:
        """Whether seed ``k`` finished in the checkpoint resumed."""
        return k <= self.current and bool(self.records.done[k])

    def on_epoch(self, k: int) -> Callable[[SeedState, dict], None]:
        """The ``on_epoch`` of seed ``k``: records its progress, saves when due."""

        def record(state: SeedState, curves: dict) -> None:
            self.records.update(k, state, curves)
            if self.hook is None:
                return
            last = bool(state.done) and k == len(self.records.epoch) - 1
            if last or (self.every and int(state.epoch) % self.every == 0):
                self.hook.save(self.records.state(), self.records.history())

        return record

    def close(self) -> None:
        """Releases the checkpoint folder (this run writes no more)."""
        if self.hook is not None:
            self.hook.close()

    def finish(self) -> dict:
        """Saves the final checkpoint if none was written, releases the folder; report entries."""
        if self.hook is not None:
            if not self.hook.saved:
                self.hook.save(self.records.state(), self.records.history())
            self.hook.close()
        return {
            "checkpoint": str(self.hook.saved[-1]) if self.hook else None,
            "resumed_from": str(self.resumed.path) if self.resumed else None,
            "resumed_epoch": self.resumed.epoch if self.resumed else None,
        }


def run_hetero_experiment(exp, *, progress: bool = False) -> dict:
    """Loads, trains every seed in turn (over ``exp.devices``, with
    ``--checkpoint``/``--resume``: :class:`HeteroLifecycle`), reports."""
    from sparsegcn import parallel
    from sparsegcn.train.optim import make_optimizer

    start = time.perf_counter()
    if exp.coordinator is not None:
        parallel.initialize(exp.coordinator, exp.num_processes, exp.process_id)
    # Refuses a device count this process lacks, before any data is read.
    mesh = parallel.make_mesh(exp.devices) if exp.parallel else None
    load_start = time.perf_counter()
    data = prepare_hetero(exp, progress=progress)
    data.dataset.require_splits()  # before a checkpoint folder is claimed
    load_s = time.perf_counter() - load_start
    model = build_model(exp, data)
    tx = make_optimizer(exp.train_config())
    fanouts = exp.minibatch_config().fanouts
    # Several processes train the same seeds: process 0 alone writes checkpoints.
    writer = exp.for_process(jax.process_index())
    lifecycle = HeteroLifecycle.start(writer, data, model, tx)
    train = np.asarray(data.dataset.split["train"])
    batches = _batches(train, exp.batch_size, exp.max_batches)[0].shape[0]
    placement = mesh if mesh is not None else 1
    programs = hetero_programs(
        model,
        tx,
        data,
        fanouts=fanouts,
        devices=placement,
        sampler=exp.sampler,
        caps=exp.dedup_caps,
    )
    fits = []
    try:
        for k, seed in enumerate(exp.seed_list()):
            if lifecycle.finished(k):
                fits.append(lifecycle.records.fit(k, batches))
                continue
            state, history = lifecycle.start_state(k)
            fits.append(
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
                    devices=placement,
                    state=state,
                    history=history,
                    on_epoch=lifecycle.on_epoch(k),
                    progress=progress,
                    sampler=exp.sampler,
                    caps=exp.dedup_caps,
                    programs=programs,
                    divergence_factor=exp.divergence_factor or None,
                    divergence_epochs=exp.divergence_epochs,
                )
            )
    except BaseException:
        lifecycle.close()  # release the folder: this run writes no more
        raise
    entries = lifecycle.finish()
    test = np.array([f.test_acc for f in fits])
    val = np.array([f.val_acc for f in fits])
    stats = data.dataset.stats()
    official = official_metric(data.dataset, [f.test_classes for f in fits])
    overflow = None
    if exp.dedup_caps is not None:
        overflow = first_epoch_overflow(
            data,
            fanouts,
            exp.batch_size,
            exp.dedup_caps,
            exp.seed_list()[0],
            exp.max_batches,
            devices=1 if mesh is None else mesh.size,
        )
    tables = jax.eval_shape(model.init, jax.random.key(0))["embeddings"]
    embedding_bytes = sum(int(np.prod(v.shape)) * 4 for v in jax.tree.leaves(tables))
    devices = 1 if mesh is None else mesh.size
    return {
        "dataset": data.dataset.name,
        "model": exp.model,
        "backend": "segment",
        "layout": f"sampled-typed-{exp.sampler}",
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
        "compile_s": float(sum(f.compile_s for f in fits)),  # one compilation, shared
        "embedding_bytes": embedding_bytes,
        "load_s": load_s,
        "wall_s": time.perf_counter() - start,
        "device": jax.devices()[0].device_kind,
        "devices": devices,
        "processes": jax.process_count(),
        "parallelism": "data_parallel" if devices > 1 else "none",
        "plot": None,
        **entries,
        "config": dataclasses.asdict(exp),
        **({} if official is None else {"ogb_evaluator": official}),
        **({} if overflow is None else {"dedup_overflow": overflow}),
    }


def first_epoch_overflow(
    data: HeteroData,
    fanouts,
    batch_size: int,
    caps,
    seed: int,
    max_batches: int = 0,
    *,
    devices: int = 1,
) -> dict[str, list[int]]:
    """Per type and hop, the distinct nodes the capped dedup sampler dropped in
    :func:`fit_hetero`'s first epoch for ``seed`` (on ``devices`` devices, which
    pad the batches): a sampling pass alone over the same batches with the same
    sample keys.

    Returns:
      ``{type: [dropped at hop 1, ..., hop L]}``, summed over the batches.
    """
    from sparsegcn.sampling.typed_dedup import count_typed_overflow

    # fit_hetero's draws, in its order: init key, shuffled ids, epoch key, step keys.
    key = init_seed_key(seed)
    rng = np.random.default_rng(seed)
    train_ids = np.asarray(data.dataset.split["train"]).astype(np.int32)
    width = batch_width(batch_size, devices)
    ids, mask = _batches(rng.permutation(train_ids), batch_size, max_batches, width)
    _, k_epoch, _ = jax.random.split(key, 3)
    step_keys = jax.random.split(k_epoch, ids.shape[0])
    sample_keys = jax.vmap(lambda k: jax.random.split(k)[0])(step_keys)
    counts = count_typed_overflow(
        data.csr, ids, mask, sample_keys, fanouts, seed_type=data.dataset.target, caps=caps
    )
    return {t: v.tolist() for t, v in counts.items()}


def make_embed(model, fanouts, target: str, *, sampler: str = "tree", caps=None):
    """The compiled predictor of :func:`predict_hetero_checkpoint`: ``embed(params,
    key, csr, features, ids [nb, W], mask) -> (classes [nb, W], embeddings [nb, W, H])``,
    each batch on its own sampled neighbourhoods, as :func:`make_predict` scores."""
    from sparsegcn.sampling.typed_dedup import sample_hetero

    @jax.jit
    def embed(params, key, csr, features, ids, mask):
        def one(batch):
            b_ids, b_mask, b_key = batch
            sample = sample_hetero(
                sampler, csr, b_ids, fanouts, seed_type=target, key=b_key, mask=b_mask, caps=caps
            )
            logits, hidden = model.apply(params, sample, features, embed=True)
            return jnp.argmax(logits, axis=-1).astype(jnp.int32), hidden

        return jax.lax.map(one, (ids, mask, jax.random.split(key, ids.shape[0])))

    return embed


def predict_hetero_checkpoint(
    checkpoint: str,
    *,
    dataset: str | None = None,
    root: str | None = None,
    params: str = "best",
    progress: bool = False,
) -> dict:
    """Class predictions and embeddings of every target node from a hetero checkpoint.

    Seeds train in turn and a checkpoint keeps the params of the seed trained
    last only (:class:`HeteroCheckpointState`): that seed predicts. Every node
    of the target type (papers) is scored on neighbourhoods sampled as in
    training (the run's fanouts and sampler), from the seed's key: with fanouts
    that cover every neighbour the neighbourhoods are whole and the
    predictions are the full graph's.

    Args:
      checkpoint: checkpoint folder (its newest checkpoint) or manifest file.
      dataset: dataset name (default: the one trained on); its
        :func:`hetero_fingerprint` must match the checkpoint's.
      root: data root (default: the training run's).
      params: ``"best"`` (the params of the best validation epoch, whose test
        accuracy training reports) or ``"last"``.
      progress: show loading progress.

    Returns:
      ``{"predictions": int32 [1, N_target] classes, "embeddings": float32
      [1, N_target, H] (the target rows the last layer reads), "metric":
      "acc", "test": [1] the accuracy of the predictions on the test papers
      training scored (the whole test split unless ``--max-batches``),
      "reported_test": [1] as training recorded it (``best`` only), "seeds",
      "epoch", "checkpoint", "dataset", "rows"}``, and ``"ogb_evaluator"``
      for ``ogbn-mag`` when ``ogb`` is installed.

    Raises:
      ValueError: a bad ``params``; CheckpointError: another dataset, or a
        checkpoint that is not a hetero run's.
    """
    from sparsegcn.experiment.lifecycle import experiment_from_checkpoint
    from sparsegcn.sampling.typed import check_typed_fanouts
    from sparsegcn.train.checkpoint import check_metadata, load_checkpoint, read_manifest
    from sparsegcn.train.optim import make_optimizer

    if params not in ("best", "last"):
        raise ValueError(f"params must be 'best' or 'last', got {params!r}")
    manifest = read_manifest(checkpoint)
    exp = experiment_from_checkpoint(manifest, dataset=dataset, root=root)
    with reading_only("predicting"):  # the root may come from the checkpoint: write nothing there
        data = prepare_hetero(exp, progress=progress)
    expect = {"dataset": hetero_fingerprint(data.dataset)}
    check_metadata(manifest, expect)  # before the model is built or anything compiled
    model = build_model(exp, data)
    tx = make_optimizer(exp.train_config())
    sampling = exp.minibatch_config()
    _, test = eval_papers(data.dataset, sampling.batch_size, exp.max_batches)
    seeds = exp.seed_list()
    template: Any = checkpoint_template(model, tx, len(seeds), len(test))
    ckpt = load_checkpoint(manifest["path"], template, expect=expect)
    records, k = _Records.restore(ckpt)
    current = cast(SeedState, records.current)
    chosen = current.best_params if params == "best" else current.params
    target = data.dataset.target
    fanouts = check_typed_fanouts(sampling.fanouts, data.graph.edge_types)
    embed = make_embed(model, fanouts, target, sampler=exp.sampler, caps=exp.dedup_caps)
    num_target = int(data.dataset.graph.num_nodes[target])
    ids, mask = _batches(np.arange(num_target, dtype=np.int32), sampling.batch_size)
    classes, hidden = embed(
        chosen, jax.random.key(seeds[k]), data.csr, data.features, jnp.asarray(ids), mask
    )
    keep = mask.reshape(-1)
    classes = np.asarray(classes).reshape(-1)[keep]
    hidden = np.asarray(hidden, np.float32).reshape(keep.shape[0], -1)[keep]
    # The test papers training scored (the first --max-batches' worth, if set),
    # so that the accuracy compares with the recorded one.
    test = np.asarray(test)
    all_test = np.asarray(data.dataset.split["test"])
    truth = np.asarray(data.dataset.labels)
    accuracy = float((classes[test] == truth[test]).mean())
    reported = None
    if params == "best":
        reported = [float(ckpt.history["test_acc"][int(current.best_epoch) - 1, k])]
    official = official_metric(data.dataset, [classes[all_test]])
    return {
        "predictions": classes[None],
        "embeddings": hidden[None],
        "metric": "acc",
        "test": [accuracy],
        "reported_test": reported,
        "seeds": [seeds[k]],
        "epoch": int(current.epoch),
        "checkpoint": str(ckpt.path),
        "dataset": data.dataset.name,
        "rows": f"{target} nodes",
        **({} if official is None else {"ogb_evaluator": official}),
    }


def describe_hetero(
    name: str,
    root,
    *,
    progress: bool = False,
    verify: bool = False,
    scale: float = 1.0,
    seed: int = 0,
) -> tuple[dict, str]:
    """``sparsegcn info`` of a heterogeneous dataset (a name, or an on-disk hetero
    folder): totals (raw edges), counts per node type and per relation,
    classes and split sizes.

    Args:
      verify: for a folder, also check every file's sha256 (``--verify``).
      scale, seed: for ``synthetic:mag``, its generator's shrink factor and seed.

    Returns:
      ``(stats, text)``.

    Raises:
      ValueError: a ``root`` for a folder, ``verify`` for a name, ``scale`` or
        ``seed`` for what is not generated (as :func:`~sparsegcn.datasets.load`
        refuses them for node datasets: they would do nothing); the loader's
        errors.
    """
    from sparsegcn.datasets import _check_applies
    from sparsegcn.datasets.mag import load_mag

    _check_applies(name, root=root, scale=scale, seed=seed, verify=verify)
    start = time.perf_counter()
    dataset = load_mag(name, root, scale=scale, seed=seed, progress=progress, verify=verify)
    stats = {**dataset.stats(), "load_s": time.perf_counter() - start}
    rows = [
        ("dataset", dataset.name),
        *([("folder", name)] if dataset.name != name else []),
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
    "CURVES",
    "HeteroCheckpointState",
    "HeteroData",
    "HeteroFit",
    "HeteroLifecycle",
    "HeteroPrograms",
    "SeedState",
    "batch_width",
    "build_model",
    "check_hetero_experiment",
    "checkpoint_template",
    "describe_hetero",
    "eval_papers",
    "first_epoch_overflow",
    "fit_hetero",
    "hetero_fingerprint",
    "hetero_programs",
    "init_seed_key",
    "init_seed_state",
    "make_embed",
    "make_epoch",
    "make_predict",
    "official_metric",
    "predict_hetero_checkpoint",
    "prepare_hetero",
    "run_hetero_experiment",
    "seed_state_template",
]

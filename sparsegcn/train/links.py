"""Full-batch link prediction: several seeds as one compiled program.

- :func:`link_data`: the host arrays a link step reads (:class:`LinkData`),
  built once from a split (:func:`~sparsegcn.sampling.links.random_link_split`
  or a dataset's own);
- :func:`train_step`: encoder, fresh negatives (``recon="sampled"``: drawn on
  the device, :func:`~sparsegcn.sampling.links.uniform_negatives`) or every
  pair (``recon="full"``), loss, Adam update;
- :func:`evaluate`: AUC and AP of the validation and test positives against
  their negatives, plus Hits@K or MRR when the dataset's metric asks;
- :func:`train_epochs`: a chunk of epochs of ``vmap(train_step)`` over seeds
  as one ``lax.scan``;
- :func:`fit_links`: :func:`train_epochs`, compiled once ahead of time
  (compile time apart), called once a chunk (about 20 calls a run, or
  ``epochs_per_call``), each call timed after ``block_until_ready``; no early
  stopping (Kipf & Welling train 200 epochs and report the last);
- :func:`fit_links_sampled`: sampled mini-batches of train edges, one compiled
  epoch (a ``lax.scan`` of steps), seeds vmapped. A batch's positives and
  fresh negatives → their distinct endpoint nodes (:func:`batch_endpoints`)
  → their neighbour trees from the existing sampler
  (:func:`~sparsegcn.sampling.sample_blocks`) → the encoder on the trees →
  scores (:func:`sampled_link_loss`); with fanouts covering every neighbour
  it equals the full-batch step (tested). The CLI trains with it when a
  link run gets ``--fanouts`` (:mod:`sparsegcn.tasks.link`).

Data parallelism (``devices=D``, both trainers): params, optimizer state,
graph, features and evaluation pairs are replicated on a 1-D mesh
(:func:`~sparsegcn.parallel.make_mesh`); inside the one ``jit`` program the
pairs a step scores are split over the devices by a
:class:`~jax.sharding.NamedSharding` on the mesh axis
(``with_sharding_constraint``), and XLA's partitioner sums the loss and the
gradients over the devices (all-reduce). Negatives are drawn once for the
global batch, from the same key as on one device, and then split, so the
devices' shares together are exactly the one-device draw.

- Full batch: the encoder runs replicated over the whole graph on every
  device (its cost does not shrink with ``D``; the graph is not sharded);
  the decoder and the loss are split: the train positives and their
  negatives by rows (``recon="sampled"``), or the rows of the ``[N, N]``
  logits (``recon="full"``). The step is the one-device step's arithmetic,
  summed in another order.
- Sampled: each step's global batch of ``B`` seed edges, padded with
  weight-0 slots to ``D b`` (``b = ceil(B / D)``), becomes ``[D, b]``
  sub-batches, one per device; each device finds its sub-batch's endpoints,
  samples their trees with ``fold_in(key, d)`` and runs the encoder on them.
  The loss is a weighted sum over slots, so the sum of the devices' losses
  and gradients is the global batch's; with fanouts covering every
  neighbour and no dropout (deterministic trees) ``D`` devices equal one
  (tested). VGAE's KL term is then averaged over each sub-batch's rows.

Evaluation runs replicated on every device. With ``D = 1`` no mesh is made
and the program is the single-device one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from sparsegcn._checks import (
    check_hyperparameters,
    check_num_rows,
    check_seeds,
    check_static_int,
    is_traced,
)
from sparsegcn.datasets.link_base import check_node_ids
from sparsegcn.metrics import hits_at_k, mrr, ranking_auc_ap
from sparsegcn.nn.gae import (
    LinkModel,
    full_reconstruction_loss,
    sampled_reconstruction_loss,
    softplus,
)
from sparsegcn.sampling.links import (
    NEGATIVE_ROUNDS,
    EdgeIndex,
    corrupt_targets,
    edge_index,
    uniform_negatives,
)
from sparsegcn.train.loop import check_state_memory, drive
from sparsegcn.train.optim import apply_optimizer
from sparsegcn.train.state import (
    DIVERGENCE_EPOCHS,
    DIVERGENCE_FACTOR,
    check_divergence,
    epochs_per_chunk,
    seed_keys,
)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["positives", "negatives"],
    meta_fields=["per_source"],
)
@dataclasses.dataclass(frozen=True)
class EvalSet:
    """Positives and their negatives for one evaluation split; a pytree.

    Attributes:
      positives: int32 ``[P, 2]``.
      negatives: int32 ``[Q, 2]`` pairs shared by every positive, or
        ``[P, K]`` targets of each positive's source (per-source negatives,
        ogbl-citation2 style).
      per_source: static: whether ``negatives`` are targets per source;
        ``None`` tells it by their width (``K != 2``), so two targets per
        source must say so (:func:`eval_set`'s ``form``).
    """

    positives: jax.Array
    negatives: jax.Array
    per_source: bool | None = None

    def __post_init__(self):
        if self.per_source is None:
            object.__setattr__(self, "per_source", bool(np.shape(self.negatives)[1] != 2))

    def _replace(self, **changes) -> EvalSet:
        """A copy with ``changes``, as the named tuple it was took them."""
        return dataclasses.replace(self, **changes)


_EVAL_FIELDS = ("positives", "negatives")


class LinkData(NamedTuple):
    """Everything a link step and its evaluation read; a pytree passed as an
    argument, never closed over.

    Attributes:
      graph: the message-passing graph prepared for the encoder (train edges only).
      features: ``[N, F]``.
      train: int32 ``[P, 2]`` train positives (one row per undirected edge).
      labels: int32 ``[L, 2]``: the entries of ``A_train + I``, each once
        (the full loss's positives).
      edges: :class:`~sparsegcn.sampling.links.EdgeIndex` of the train edges
        (both directions), which sampled negatives avoid.
      pos_weight, norm: float32 ``[]``, Kipf & Welling's ``(N² - E) / E``
        and ``N² / (2 (N² - E))``, ``E`` the directed train edges.
      valid, test: :class:`EvalSet`.
      test_graph: the graph the test pairs are scored on, prepared as
        ``graph`` is, where it is not ``graph`` (ogbl-collab with
        ``--use-valid-edges``: the train and validation edges, OGB's
        baselines' ``full_adj_t``); ``None``: ``graph``. Training and the
        validation pairs always use ``graph``.
    """

    graph: Any
    features: Any
    train: jax.Array
    labels: jax.Array
    edges: EdgeIndex
    pos_weight: jax.Array
    norm: jax.Array
    valid: EvalSet
    test: EvalSet
    test_graph: Any = None


@dataclasses.dataclass(frozen=True)
class LinkTrainConfig:
    """Settings of :func:`fit_links`.

    Attributes:
      epochs: optimizer steps (one per epoch, full batch).
      learning_rate, weight_decay: Adam's; L2 weight decay on the encoder's
        first layer (``decay_layers="first"``), every weight (``"all"``) or none.
      decay_layers: ``"none"``, ``"first"`` or ``"all"``.
      negative_rounds: redraw rounds of the device negative sampler (what a
        negative is, the model says: ``model.config["negatives"]``,
        :func:`draw_negatives`).
      metric: the dataset's ranking metric besides AUC and AP:
        ``"hits@K"``, ``"mrr"`` or ``""`` (none).
      divergence_factor, divergence_epochs: the finite divergence guard, as
        :class:`~sparsegcn.train.TrainConfig`'s (``None``: off); a
        non-finite training loss always stops the run
        (:func:`~sparsegcn.train.loop.drive`).
      epochs_per_call: full-batch epochs per compiled call (:attr:`chunk`);
        ``None``: about 20 calls a run. The sampled trainer runs one epoch a call.

    Construction checks the settings against the shared table
    (:data:`~sparsegcn._checks.HYPERPARAMETERS`, as
    :class:`~sparsegcn.train.TrainConfig` does): a ``TypeError`` or
    ``ValueError`` names the setting, the value and the allowed range.
    """

    epochs: int = 200
    learning_rate: float = 0.01
    weight_decay: float = 0.0
    decay_layers: str = "none"
    negative_rounds: int = NEGATIVE_ROUNDS
    metric: str = ""
    divergence_factor: float | None = DIVERGENCE_FACTOR
    divergence_epochs: int = DIVERGENCE_EPOCHS
    epochs_per_call: int | None = None

    def __post_init__(self):
        check_hyperparameters(
            {
                "epochs": self.epochs,
                "learning_rate": self.learning_rate,
                "weight_decay": self.weight_decay,
                "epochs_per_call": self.epochs_per_call,
                "divergence_factor": self.divergence_factor,
                "divergence_epochs": self.divergence_epochs,
            },
            off={"epochs_per_call": (None,), "divergence_factor": (None,)},
        )
        check_static_int("negative_rounds", self.negative_rounds)
        if self.decay_layers not in ("none", "first", "all"):
            raise ValueError(
                f"decay_layers must be 'none', 'first' or 'all', got {self.decay_layers!r}"
            )

    @property
    def chunk(self) -> int:
        """Full-batch epochs per compiled call
        (:func:`~sparsegcn.train.state.epochs_per_chunk`)."""
        return epochs_per_chunk(self.epochs, self.epochs_per_call)


@dataclasses.dataclass
class LinkFitResult:
    """What :func:`fit_links` measured; per-seed arrays lead with ``[K]``.

    Attributes:
      seeds: the seeds.
      params: the final params of every seed.
      losses: ``[epochs, K]`` training losses.
      valid, test: ``{"auc", "ap"[, metric]}`` -> ``[K]`` (NumPy).
      test_scores: ``(positive [K, P], negative [K, Q] or [K, P, K'])`` logits.
      compile_s: seconds compiling the step and the evaluation.
      step_ms: wall time of one step (all seeds), after compile: of each call
        (:func:`fit_links`: a chunk of epochs, so each entry is the call's
        time over the steps it ran, the last call's idle epochs past
        ``config.epochs`` included: they run the step and keep the state;
        :func:`fit_links_sampled`: an epoch, over its batches).
      wall_s: seconds of the whole fit.
      devices: the devices each step was split over.
      train_s: seconds of the timed training calls together, compile apart.
    """

    seeds: tuple
    params: Any
    losses: np.ndarray
    valid: dict
    test: dict
    test_scores: tuple
    compile_s: float
    step_ms: np.ndarray
    wall_s: float
    devices: int = 1
    train_s: float = float("nan")

    @property
    def train_step_ms_median(self) -> float:
        """Median milliseconds of one step of all seeds."""
        return float(np.median(self.step_ms))


def _pairs(name: str, array) -> np.ndarray:
    pairs = np.asarray(array)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer):
        raise ValueError(f"{name} must be an int array of node pairs [P, 2], got {pairs.shape}")
    return _as_int32_ids(name, pairs)


def _as_int32_ids(name: str, ids: np.ndarray) -> np.ndarray:
    """``ids`` as int32, refusing a value int32 cannot hold by position and value (a
    cast would wrap ``2**32 + 7`` to the valid id 7)."""
    if ids.size and (ids.dtype.itemsize > 4 or ids.dtype == np.uint32):
        low, high = np.iinfo(np.int32).min, np.iinfo(np.int32).max
        wide = ids.astype(np.int64) if ids.dtype != np.uint64 else ids
        bad = (wide > high) if ids.dtype == np.uint64 else (wide < low) | (wide > high)
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{name}[{', '.join(map(str, at))}] = {int(ids[at])} is not a node id "
                "(ids are int32)"
            )
    return ids.astype(np.int32)


def eval_set(positives, negatives, form: str | None = None) -> EvalSet:
    """An :class:`EvalSet`: ``negatives`` ``[Q, 2]`` pairs or ``[P, K]`` targets.

    ``form`` (``"pairs"`` or ``"targets"``, a link dataset's ``negatives``)
    says which; ``None`` tells them by their width, reading two targets per
    source as pairs. The node ids are checked against the graph where ``N``
    is known: by :func:`link_data` and again by :func:`fit_links`.

    Raises:
      ValueError: not int arrays of those shapes, or not of ``form``'s.
    """
    pos = _pairs("positives", positives)
    neg = np.asarray(negatives)
    if neg.ndim != 2 or not np.issubdtype(neg.dtype, np.integer):
        raise ValueError(f"negatives must be an int array [Q, 2] or [P, K], got {neg.shape}")
    if form not in (None, "pairs", "targets"):
        raise ValueError(f"form must be 'pairs', 'targets' or None, got {form!r}")
    if form == "pairs" and neg.shape[1] != 2:
        raise ValueError(f"negatives of form 'pairs' must be [Q, 2], got {neg.shape}")
    if form == "targets" and neg.shape[0] != pos.shape[0]:
        raise ValueError(
            f"negatives of form 'targets' must be [P, K] with P = {pos.shape[0]} positives, "
            f"got {neg.shape}"
        )
    per_source = None if form is None else form == "targets"
    return EvalSet(jnp.asarray(pos), jnp.asarray(_as_int32_ids("negatives", neg)), per_source)


def _check_ids(name: str, array, num_nodes: int) -> None:
    """Refuses a concrete ``array`` of node ids holding one outside ``[0, num_nodes)``,
    naming the first (:func:`~sparsegcn.datasets.link_base.check_node_ids`).

    An array on an accelerator is reduced there first (its min and max come
    back) and copied to the host only to name a bad id. A traced one cannot
    be checked and is trusted.
    """
    if array is None or is_traced(array) or np.size(array) == 0:
        return
    on_device = isinstance(array, jax.Array) and any(d.platform != "cpu" for d in array.devices())
    if on_device and int(jnp.min(array)) >= 0 and int(jnp.max(array)) < num_nodes:
        return
    check_node_ids(name, np.asarray(array), num_nodes)


def _check_link_ids(label: str, data: LinkData) -> None:
    """Refuses node ids of ``data``'s train and evaluation pairs outside its graph
    (``N`` from its edge index), before anything is traced: XLA's gathers would
    clamp them, and a run would report metrics of pairs nobody asked for.
    ``label`` names ``data`` in the message (``"fit_links: data"``)."""
    n = int(data.edges.indptr.shape[-1]) - 1
    _check_ids(f"{label}.train", data.train, n)
    for name in ("valid", "test"):
        split = getattr(data, name)
        if split is not None:
            for field in _EVAL_FIELDS:
                _check_ids(f"{label}.{name}.{field}", getattr(split, field), n)


def link_data(
    graph,
    features,
    num_nodes: int,
    train,
    valid: EvalSet,
    test: EvalSet,
    *,
    undirected: bool = True,
    test_graph=None,
) -> LinkData:
    """The :class:`LinkData` of a split, on the host, once.

    Args:
      graph: the message-passing graph, prepared for the encoder.
      features: ``[N, F]`` (dense or :class:`~sparsegcn.SparseFeatures`).
      num_nodes: ``N``.
      train: int ``[P, 2]`` train positives.
      valid, test: :func:`eval_set` results.
      undirected: the train pairs stand for both directions.
      test_graph: the graph the test pairs are scored on, prepared as
        ``graph`` is (:attr:`LinkData.test_graph`); ``None``: ``graph``.

    Raises:
      ValueError: a node id of ``train``, ``valid`` or ``test`` outside
        ``[0, num_nodes)``, naming the first (XLA's gathers would clamp it,
        and the pair keys ``u N + v`` alias it to another pair), or a
        ``graph``, ``test_graph`` or ``features`` of another node count.
    """
    num_nodes = check_static_int("num_nodes", num_nodes, minimum=1)
    for name, g in (("graph", graph), ("test_graph", test_graph)):
        graph_nodes = getattr(g, "num_nodes", None)
        if isinstance(graph_nodes, int | np.integer) and graph_nodes != num_nodes:
            raise ValueError(
                f"num_nodes={num_nodes} disagrees with {name}.num_nodes={int(graph_nodes)}"
            )
    if features is not None and hasattr(features, "shape"):
        check_num_rows("features", tuple(features.shape), num_nodes)
    train = _pairs("train", train)
    check_node_ids("train", train, num_nodes)
    for name, split in (("valid", valid), ("test", test)):
        if split is not None:
            for field in _EVAL_FIELDS:
                _check_ids(f"{name}.{field}", getattr(split, field), num_nodes)
    u, v = train[:, 0].astype(np.int64), train[:, 1].astype(np.int64)
    if undirected:
        u, v = np.concatenate([u, v]), np.concatenate([v, u])
    off = u != v
    keys = np.unique(u[off] * num_nodes + v[off])
    directed = keys.size
    loops = np.arange(num_nodes, dtype=np.int64) * (num_nodes + 1)
    labels = np.unique(np.concatenate([keys, loops]))
    n2 = float(num_nodes) * num_nodes
    pos_weight = (n2 - directed) / max(directed, 1)
    norm = n2 / (2.0 * (n2 - directed))
    return LinkData(
        graph=graph,
        features=features,
        train=jnp.asarray(train),
        labels=jnp.asarray(np.stack([labels // num_nodes, labels % num_nodes], 1).astype(np.int32)),
        edges=edge_index(train, num_nodes, symmetric=undirected),
        pos_weight=jnp.float32(pos_weight),
        norm=jnp.float32(norm),
        valid=valid,
        test=test,
        test_graph=test_graph,
    )


def stack_link_data(members: Sequence[LinkData]) -> LinkData:
    """One :class:`LinkData` whose every leaf stacks ``members``' (``[K, ...]``),
    for :func:`fit_links` with ``per_seed_data``; the features are shared
    (the first member's), not stacked.

    The members must agree in shapes (random splits of one graph do) and in
    static fields; the edge index keeps the most search steps any needs.

    Raises:
      ValueError: members whose shapes differ, naming the first leaf.
    """
    steps = max(m.edges.steps for m in members)
    features = members[0].features
    members = [m._replace(edges=m.edges._replace(steps=steps), features=None) for m in members]
    return _stack(members, "per-seed link data")._replace(features=features)


def _stack(members: Sequence, what: str):
    """``members`` (pytrees of one structure and static fields) with every leaf
    stacked ``[K, ...]`` (NumPy); ``what`` names them in the errors."""
    first = jax.tree_util.tree_structure(members[0])
    for m in members[1:]:
        if str(jax.tree_util.tree_structure(m)) != str(first):
            raise ValueError(f"{what} must share one structure and static fields")
    leaves = [jax.tree_util.tree_leaves(m) for m in members]
    for i, column in enumerate(zip(*leaves, strict=True)):
        shapes = {np.shape(leaf) for leaf in column}
        if len(shapes) > 1:
            raise ValueError(f"{what}: leaf {i} has shapes {sorted(shapes)}")
    stacked = [
        np.stack([np.asarray(leaf) for leaf in column]) for column in zip(*leaves, strict=True)
    ]
    return jax.tree_util.tree_unflatten(first, stacked)


def per_seed_axes() -> LinkData:
    """The ``vmap`` axes of per-seed :class:`LinkData` (:func:`stack_link_data`):
    0 for every field but the shared features."""
    return LinkData._make([0] * len(LinkData._fields))._replace(features=None)


def make_optimizer(config: LinkTrainConfig) -> optax.GradientTransformation:
    """Adam with coupled L2 on the layers ``config.decay_layers`` names."""
    if config.decay_layers not in ("none", "first", "all"):
        raise ValueError(
            f"decay_layers must be 'none', 'first' or 'all', got {config.decay_layers!r}"
        )
    parts = []
    if config.decay_layers != "none" and config.weight_decay:

        def mask(params):
            flags = jax.tree.map(lambda _: config.decay_layers == "all", params)
            if config.decay_layers == "first":
                first = params["encoder"]["layers"][0]
                flags["encoder"]["layers"][0] = jax.tree.map(lambda _: True, first)
            return flags

        parts.append(optax.masked(optax.add_decayed_weights(config.weight_decay), mask))
    parts.append(optax.adam(config.learning_rate))
    return optax.chain(*parts)


# -- devices --------------------------------------------------------------------


def link_mesh(devices: int | Mesh) -> Mesh | None:
    """The mesh a link trainer splits its steps over: ``None`` for one device
    (the single-device program), else :func:`~sparsegcn.parallel.as_mesh` of
    ``devices`` (a count of local devices, checked, or a mesh).

    Raises:
      ValueError: more devices than this process has; the message says how
        to simulate devices on CPU.
    """
    from sparsegcn.parallel.mesh import as_mesh

    mesh = as_mesh(devices)
    return None if mesh.size == 1 else mesh


def split_rows(x: jax.Array, mesh: Mesh | None) -> jax.Array:
    """``x`` with its leading axis split over ``mesh``'s devices
    (``with_sharding_constraint``; a length that does not divide is padded
    by XLA); ``x`` itself without a mesh."""
    if mesh is None:
        return x
    from sparsegcn.parallel.mesh import AXIS

    spec = P(AXIS, *([None] * (x.ndim - 1)))
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def _replicated(tree, mesh: Mesh | None):
    if mesh is None:
        return tree
    from sparsegcn.parallel.mesh import put

    return put(tree, mesh)


def _jit_options(mesh: Mesh | None) -> dict:
    """Every output replicated on the mesh, as the next call's inputs are."""
    return {} if mesh is None else {"out_shardings": NamedSharding(mesh, P())}


# -- full batch -----------------------------------------------------------------


def draw_negatives(
    kind: str,
    key: jax.Array,
    positives: jax.Array,
    index: EdgeIndex,
    rounds: int,
    *,
    materialize: bool = False,
) -> jax.Array:
    """One training negative per positive, drawn on the device: int32 ``[P, 2]``.

    ``kind`` (:data:`~sparsegcn.nn.gae.NEGATIVES`, a link model's
    ``config["negatives"]``): ``"pairs"``, uniform pairs that are no edge of
    ``index`` and no self-loop (:func:`~sparsegcn.sampling.links.uniform_negatives`,
    PyG's ``negative_sampling``); ``"targets"``, ``(u, t)`` for each positive
    ``(u, v)``, ``t`` uniform among the nodes ``u`` has no edge to, not ``u``
    (:func:`~sparsegcn.sampling.links.corrupt_targets`, DGL's
    ``negative_sampler.Uniform(1)``): a sampled batch then has 3 endpoints a
    pair, not 4. ``materialize``: as the samplers take it (the full-batch
    step sets it; the sampled step, whose sub-batches are split over the
    devices, does not).
    """
    n = index.indptr.shape[0] - 1
    if kind == "pairs":
        return uniform_negatives(
            key, positives.shape[0], n, index, rounds=rounds, materialize=materialize
        )
    if kind != "targets":
        raise ValueError(f"negatives must be 'pairs' or 'targets', got {kind!r}")
    sources = positives[:, 0]
    targets = corrupt_targets(key, sources, 1, n, index, rounds=rounds, materialize=materialize)[
        :, 0
    ]
    return jnp.stack([sources, targets], axis=1)


def link_loss(
    model: LinkModel,
    params,
    data: LinkData,
    key: jax.Array,
    rounds: int,
    *,
    mesh: Mesh | None = None,
    negatives: str = "pairs",
):
    """The training objective of one seed: reconstruction plus ``kl / N`` (VGAE).

    ``recon="full"`` (``model.config``): :func:`~sparsegcn.nn.gae.full_reconstruction_loss`
    over every pair; ``"sampled"``: the train positives against as many
    negatives of kind ``negatives`` (:func:`draw_negatives`), drawn here on
    the device. With ``mesh``, the rows of
    the ``[N, N]`` logits, or the positives and the negatives (drawn for all
    of them, then split), are split over its devices (:func:`split_rows`).
    """
    encode_key, negative_key = jax.random.split(key)
    n = data.edges.indptr.shape[0] - 1
    z, kl = model.encode(params, data.graph, data.features, key=encode_key, training=True)
    if model.config["recon"] == "full":
        if model.decode_all is None:
            raise ValueError(f"recon='full' needs a dense decoder, not {model.config['decoder']!r}")
        logits = split_rows(model.decode_all(params, z), mesh)
        loss = full_reconstruction_loss(logits, data.labels, data.pos_weight, data.norm)
    else:
        drawn = draw_negatives(
            negatives, negative_key, data.train, data.edges, rounds, materialize=True
        )
        # Row i holds positive i and its negative: one decoding pass over both.
        pairs = split_rows(jnp.stack([data.train, drawn], axis=1), mesh)
        # The native pair kernel has no rule for splitting over devices: with
        # a mesh, XLA's gathers keep each device on its own rows.
        logits = model.decode(params, z, pairs, kernel="auto" if mesh is None else "xla")
        loss = sampled_reconstruction_loss(logits[:, 0], logits[:, 1])
    return loss + kl / n


def train_step(
    model: LinkModel,
    tx,
    config: LinkTrainConfig,
    params,
    opt_state,
    key,
    data,
    *,
    mesh: Mesh | None = None,
    live: jax.Array | None = None,
):
    """One optimizer step of one seed (its pairs split over ``mesh``, :func:`link_loss`).
    Returns ``(params, opt_state, key, loss)``.

    ``live``: a bool scalar; where false, the loss is computed but params,
    optimizer state and key come back as they were (an epoch past the end).
    """
    next_key, step_key = jax.random.split(key)
    loss, grads = jax.value_and_grad(
        lambda p: link_loss(
            model,
            p,
            data,
            step_key,
            config.negative_rounds,
            mesh=mesh,
            negatives=model.config.get("negatives", "pairs"),
        )
    )(params)
    if live is None:
        params, opt_state = apply_optimizer(tx, grads, opt_state, params)
        return params, opt_state, next_key, loss
    # A branch around the update only: the forward and backward pass stay
    # outside it, where XLA can hoist what they share across epochs.
    params, opt_state = jax.lax.cond(
        live,
        lambda: apply_optimizer(tx, grads, opt_state, params),
        lambda: (params, opt_state),
    )
    return params, opt_state, jnp.where(live, next_key, key), loss


def train_epochs(
    model: LinkModel,
    tx,
    config: LinkTrainConfig,
    params,
    opt_state,
    keys,
    first,
    data,
    *,
    mesh: Mesh | None = None,
    data_axis: Any = None,
):
    """``config.chunk`` full-batch epochs of ``K`` seeds, one ``lax.scan``.

    Epoch ``first + i`` runs :func:`train_step` for every seed (``vmap``;
    ``data_axis``: the seeds' axis in ``data``, ``None`` when they share it,
    :func:`per_seed_axes` when each has its own split). Epochs at or past
    ``config.epochs`` (the last chunk's tail) leave every state as it was.

    Args:
      params, opt_state, keys: ``[K, ...]`` each.
      first: int32 scalar, the 0-based index of the chunk's first epoch.

    Returns:
      ``(params, opt_state, keys, loss [K, chunk], active [K, chunk])``;
      ``active`` is false for the epochs that did not run.
    """

    def step(params, opt_state, keys, live):
        return jax.vmap(
            lambda p, o, k, d: train_step(model, tx, config, p, o, k, d, mesh=mesh, live=live),
            in_axes=(0, 0, 0, data_axis),
        )(params, opt_state, keys, data)

    def one(state, epoch):
        live = epoch < config.epochs
        *new, loss = step(*state, live)
        return tuple(new), (loss, jnp.broadcast_to(live, loss.shape))

    epochs = first + jnp.arange(config.chunk, dtype=jnp.int32)
    (params, opt_state, keys), (loss, active) = jax.lax.scan(one, (params, opt_state, keys), epochs)
    return params, opt_state, keys, loss.T, active.T


def _hits_k(metric: str) -> int | None:
    if metric.startswith("hits@"):
        return int(metric.split("@", 1)[1])
    return None


SCORE_ROWS = 256
"""Per-source rows :func:`score_set` scores at once: each gathers ``2 K`` embedding
rows (ogbl-citation2: ``K = 1,000``, width 256: 2 MB a row), so memory stays
``O(SCORE_ROWS K D)`` instead of ``O(P K D)`` (177 GB at full size)."""


def score_set(
    model: LinkModel, params, z: jax.Array, split: EvalSet
) -> tuple[jax.Array, jax.Array]:
    """``(positive scores [P], negative scores [Q] or [P, K])`` of one split.

    Per-source targets are scored :data:`SCORE_ROWS` sources at a time
    (``lax.map``), each source's true target with them, by one computation,
    so a negative equal to the true target ties with it exactly. XLA's
    gathers score them, not the native pair kernels: at ``synthetic:citation2``
    size (a 3 GB ``Z``) the evaluation took 160 against 146 s with them, and
    17.1 against 16.1 GB of peak memory."""
    if _per_source(split):

        def rows(source, targets):
            pairs = jnp.stack([jnp.broadcast_to(source, targets.shape), targets], axis=-1)
            return model.decode(params, z, pairs, kernel="xla")

        targets = jnp.concatenate([split.positives[:, 1:], split.negatives], axis=1)
        batch = max(min(SCORE_ROWS, targets.shape[0]), 1)
        scores = jax.lax.map(
            lambda st: rows(*st), (split.positives[:, 0], targets), batch_size=batch
        )
        return scores[:, 0], scores[:, 1:]
    return (
        model.decode(params, z, split.positives, kernel="xla"),
        model.decode(params, z, split.negatives, kernel="xla"),
    )


def _per_source(split: EvalSet) -> bool:
    """Per-source targets ``[P, K]`` rather than pairs ``[Q, 2]``."""
    return bool(split.per_source)


def split_metrics(pos: jax.Array, neg: jax.Array, metric: str) -> dict:
    """AUC and AP of ``pos`` against every negative, and ``metric`` (Hits@K, MRR)."""
    flat = neg.reshape(-1)
    auc, ap = ranking_auc_ap(pos, flat)
    out = {"auc": auc, "ap": ap}
    k = _hits_k(metric)
    if k is not None:
        out[metric] = hits_at_k(pos, flat, k)
    elif metric == "mrr":
        shared = jnp.broadcast_to(flat, (pos.shape[0], flat.shape[0]))
        out["mrr"] = mrr(pos, neg if neg.shape[0] == pos.shape[0] and neg.ndim == 2 else shared)
    return out


def evaluate(model: LinkModel, params, data: LinkData, metric: str = "") -> dict:
    """``{"valid": {...}, "test": {...}, "test_scores": (pos, neg)}`` of one seed
    (:func:`split_metrics`; the scores for ``ogb``'s ``Evaluator``): the
    validation pairs scored on embeddings of ``data.graph``, the test pairs on
    those of ``data.test_graph`` where it is set."""
    z = model.embed(params, data.graph, data.features)
    valid = score_set(model, params, z, data.valid)
    if data.test_graph is not None:  # the test pairs' own message graph
        z = model.embed(params, data.test_graph, data.features)
    test = score_set(model, params, z, data.test)
    return {
        "valid": split_metrics(*valid, metric),
        "test": split_metrics(*test, metric),
        "test_scores": test,
    }


def _seed_data(data: LinkData, k: int) -> LinkData:
    """Seed ``k``'s own :class:`LinkData` of a stacked one (the features are shared)."""
    return LinkData._make(
        field if name == "features" else jax.tree.map(lambda a: a[k], field)
        for name, field in zip(LinkData._fields, data, strict=True)
    )


class PhasedEvaluation(NamedTuple):
    """:func:`evaluate` of every seed in bounded memory: one seed and one phase at a time.

    :func:`evaluate` in one program, vmapped over ``K`` seeds, holds every
    seed's embedding of every node and every layer's temporaries beside the
    scoring's. At ogbl-citation2's size that is 3 GB an embedding a layer,
    and the one program needed 12 GB of temporaries for one seed. Here each
    seed is embedded (one compiled program, its temporaries freed when it
    returns), then each split is scored and measured (one program a split),
    then the embedding is dropped before the next seed's.

    Attributes:
      embed: compiled ``(params, graph, features) -> z [N, D]`` of one seed.
      valid, test: compiled ``(params, z, split) -> (metrics, (pos, neg))``.
      metric: the ranking metric besides AUC and AP (:func:`split_metrics`).
      per_seed: the data holds one split a seed.
      embed_test: ``embed`` compiled for ``data.test_graph``; ``None`` where
        the data has none (the test pairs are scored on ``embed``'s ``z``).
    """

    embed: Callable
    valid: Callable
    test: Callable
    metric: str
    per_seed: bool = False
    embed_test: Callable | None = None

    @classmethod
    def compile(
        cls, model: LinkModel, params, data: LinkData, metric: str, *, per_seed: bool = False
    ) -> PhasedEvaluation:
        """Compiles the three programs for ``params`` (``[K]`` leading) and ``data``
        (with ``per_seed``, one split a seed, stacked as :func:`stack_link_data` does)."""
        first = jax.tree.map(lambda a: a[0], params)
        data = _seed_data(data, 0) if per_seed else data
        embed = jax.jit(model.embed).lower(first, data.graph, data.features).compile()
        z = jax.eval_shape(model.embed, first, data.graph, data.features)

        def measure(p, z, split):
            pos, neg = score_set(model, p, z, split)
            return split_metrics(pos, neg, metric), (pos, neg)

        scored = jax.jit(measure)
        embed_test = None
        if data.test_graph is not None:
            embed_test = jax.jit(model.embed).lower(first, data.test_graph, data.features).compile()
        return cls(
            embed,
            scored.lower(first, z, data.valid).compile(),
            scored.lower(first, z, data.test).compile(),
            metric,
            per_seed,
            embed_test,
        )

    def __call__(self, params, data: LinkData) -> dict:
        """``{"valid": {name: [K]}, "test": {...}, "test_scores": (pos [K, P], neg [K, ...])}``
        (NumPy), as :func:`evaluate` vmapped over the seeds gives."""
        seeds = int(jax.tree.leaves(params)[0].shape[0])
        rows = []
        for k in range(seeds):
            p = jax.tree.map(lambda a, k=k: a[k], params)
            own = _seed_data(data, k) if self.per_seed else data
            z = self.embed(p, own.graph, own.features)
            valid, _ = self.valid(p, z, own.valid)
            if self.embed_test is not None:  # the test pairs' own message graph
                del z
                z = self.embed_test(p, own.test_graph, own.features)
            test, scores = self.test(p, z, own.test)
            rows.append(jax.tree.map(np.asarray, (valid, test, scores)))
            del z
        valid, test, scores = jax.tree.map(lambda *a: np.stack(a), *rows)
        return {"valid": valid, "test": test, "test_scores": scores}


def link_chance(model: LinkModel) -> float:
    """A link model's loss with every score 0 (the divergence guard's bound,
    :func:`~sparsegcn.train.loop.drive`): ``ln 2`` for the weighted full
    reconstruction, ``2 ln 2`` for the positives' mean plus the negatives'."""
    return math.log(2.0) * (1.0 if model.config.get("recon") == "full" else 2.0)


def _drive(
    program: Callable,
    state: tuple,
    data,
    config: LinkTrainConfig,
    seeds,
    progress,
    desc: str,
    chance: float | None = None,
) -> tuple[tuple, dict, list[float]]:
    """Runs a link trainer's compiled step or epoch, ``(params, opt_state, keys,
    data) -> (params, opt_state, keys, loss [K])``, on the shared host loop
    (:func:`~sparsegcn.train.loop.drive`) for ``config.epochs`` calls."""

    def advance(state: tuple) -> tuple[tuple, dict]:
        params, opt_state, keys, loss = program(*state, data)
        return (params, opt_state, keys), {"loss": loss[:, None]}

    return drive(
        advance,
        state,
        epochs=config.epochs,
        seeds=seeds,
        progress=progress,
        divergence_factor=config.divergence_factor,
        divergence_epochs=config.divergence_epochs,
        desc=desc,
        chance=chance,
    )


def check_link_config(config: LinkTrainConfig, model: LinkModel, caller: str = "fit_links") -> None:
    """Refuses settings the trainer cannot run, before tracing."""
    from sparsegcn._checks import check_config, check_static_int

    check_config(caller, config, LinkTrainConfig, optional=False)
    check_static_int("epochs", config.epochs, minimum=1)
    if config.epochs_per_call is not None:
        check_static_int("epochs_per_call", config.epochs_per_call, minimum=1)
    check_static_int("negative_rounds", config.negative_rounds, minimum=0)
    check_divergence(config.divergence_factor, config.divergence_epochs)
    if config.metric and config.metric != "mrr" and _hits_k(config.metric) is None:
        raise ValueError(f"metric must be '', 'mrr' or 'hits@K', got {config.metric!r}")
    if model.config["recon"] == "full" and model.decode_all is None:
        raise ValueError(f"recon='full' needs a dense decoder, not {model.config['decoder']!r}")


def _check_state_memory(model, tx: optax.GradientTransformation, keys: jax.Array, what: str):
    """Refuses seeds' parameters and optimizer state past free memory before building them
    (:func:`~sparsegcn.train.loop.check_state_memory`)."""

    def init(keys):
        params = jax.vmap(model.init)(keys)
        return params, jax.vmap(tx.init)(params)

    check_state_memory(init, keys, what=what)


def fit_links(
    model: LinkModel,
    data: LinkData,
    config: LinkTrainConfig,
    *,
    seeds: Sequence[int] = (0,),
    per_seed_data: bool = False,
    devices: int | Mesh = 1,
    progress: bool = False,
) -> LinkFitResult:
    """Trains ``len(seeds)`` link models as one compiled program and evaluates them.

    Every seed reads the same data, or with ``per_seed_data`` its own slice
    of ``data`` (every leaf but the features stacked ``[K, ...]``, :func:`stack_link_data`:
    a random split per seed, as Kipf & Welling re-split for every run); its
    seed draws its initial params, its VGAE noise and its negatives. The
    program (:func:`train_epochs`: ``config.chunk`` epochs of
    ``vmap(train_step)`` in one ``lax.scan``) is compiled once, ahead of
    time, and called once a chunk; each call is timed after
    ``block_until_ready``, compile time apart, and ``step_ms`` holds each
    call's time over its epochs.

    ``devices`` (a count of local devices or a mesh): every step's loss is
    split over them, the encoder replicated (see the module docstring); the
    device count is checked before anything else.

    Concrete node ids of ``data``'s train and evaluation pairs are checked
    against its graph before anything is compiled (XLA's gathers would clamp
    one outside it); traced ones are trusted.

    Returns:
      :class:`LinkFitResult`.

    Raises:
      ValueError: bad settings (:func:`check_link_config`), more devices
        than this process has, or a node id outside ``[0, N)`` in ``data``,
        naming the first.
    """
    check_link_config(config, model)
    mesh = link_mesh(devices)
    _check_link_ids("fit_links: data", data)
    start = time.perf_counter()
    seeds = check_seeds("fit_links", seeds)
    keys = seed_keys(seeds)
    init_keys, train_keys = jax.vmap(lambda k: jax.random.split(k))(keys).swapaxes(0, 1)
    tx = make_optimizer(config)
    _check_state_memory(model, tx, init_keys, f"fit_links ({len(seeds)} seed(s))")
    params = jax.vmap(model.init)(init_keys)
    opt_state = jax.vmap(tx.init)(params)
    params, opt_state, train_keys, data = _replicated((params, opt_state, train_keys, data), mesh)

    axis = per_seed_axes() if per_seed_data else None

    def epochs(params, opt_state, keys, first, data):
        return train_epochs(
            model, tx, config, params, opt_state, keys, first, data, mesh=mesh, data_axis=axis
        )

    def assess(params, data):
        return jax.vmap(lambda p, d: evaluate(model, p, d, config.metric), in_axes=(0, axis))(
            params, data
        )

    compile_start = time.perf_counter()
    first = 0  # the next chunk's first epoch, a host int (as a NumPy scalar: replicated)
    lowered = jax.jit(epochs, donate_argnums=(0, 1), **_jit_options(mesh)).lower(
        params, opt_state, train_keys, np.int32(first), data
    )
    epochs_fn = lowered.compile()
    assess_fn = jax.jit(assess).lower(params, data).compile()
    compile_s = time.perf_counter() - compile_start

    def advance(state: tuple) -> tuple[tuple, dict]:
        params, opt_state, keys, first = state
        params, opt_state, keys, loss, active = epochs_fn(
            params, opt_state, keys, np.int32(first), data
        )
        return (params, opt_state, keys, first + config.chunk), {"loss": loss, "active": active}

    (params, opt_state, train_keys, _), history, seconds = drive(
        advance,
        (params, opt_state, train_keys, first),
        epochs=config.epochs,
        seeds=seeds,
        progress=progress,
        divergence_factor=config.divergence_factor,
        divergence_epochs=config.divergence_epochs,
        desc=f"{model.name} x{len(seeds)}",
        chance=link_chance(model),
    )
    metrics = jax.tree.map(np.asarray, assess_fn(params, data))
    return LinkFitResult(
        seeds=seeds,
        params=params,
        losses=history["loss"],
        valid=metrics["valid"],
        test=metrics["test"],
        test_scores=tuple(metrics["test_scores"]),
        compile_s=compile_s,
        step_ms=1e3 * np.asarray(seconds) / config.chunk,  # every call runs chunk steps
        wall_s=time.perf_counter() - start,
        devices=1 if mesh is None else mesh.size,
        train_s=float(np.sum(seconds)),
    )


# -- sampled mini-batches ------------------------------------------------------


class SampledLinkData(NamedTuple):
    """What the sampled link epoch reads; a pytree passed as an argument.

    Attributes:
      indptr, indices: the message-passing graph's CSR (unweighted), which
        the neighbour sampler reads.
      features: ``[N, F]``.
      train: int32 ``[P, 2]`` train positives.
      edges: :class:`~sparsegcn.sampling.links.EdgeIndex` of the train edges.
      chunked: the same graph as a :class:`~sparsegcn.sampling.ChunkedGraph`
        (``indptr`` and ``indices`` are its arrays), on which
        :func:`fit_links_sampled` embeds every node for evaluation, layer by
        layer in bounded memory; ``None``: on ``eval_data``'s graph, full batch.
      test_chunked: ``eval_data.test_graph``'s graph as a
        :class:`~sparsegcn.sampling.ChunkedGraph`, on which the test pairs'
        nodes are embedded where ``chunked`` is set; ``None`` where
        ``eval_data`` has no ``test_graph``.
    """

    indptr: jax.Array
    indices: jax.Array
    features: Any
    train: jax.Array
    edges: EdgeIndex
    chunked: Any = None
    test_chunked: Any = None


def sampled_link_data(
    graph, features, train, *, undirected: bool = True, test_graph=None
) -> SampledLinkData:
    """:class:`SampledLinkData` of a message-passing ``graph`` (host, once).

    ``graph``: a :class:`~sparsegcn.Graph`, or its
    :func:`~sparsegcn.train.minibatch.sampling_graph` when the caller keeps
    that too (layer-wise evaluation reads it), so its CSR is built once.
    ``test_graph``: the graph the test pairs are scored on, where it is not
    ``graph`` (either form; :attr:`SampledLinkData.test_chunked`).
    """
    from sparsegcn.sampling.chunks import ChunkedGraph
    from sparsegcn.train.minibatch import sampling_graph

    def chunked(g):
        return g if isinstance(g, ChunkedGraph) else sampling_graph(g)

    csr = chunked(graph)
    train = _pairs("train", train)
    return SampledLinkData(
        indptr=csr.indptr,
        indices=csr.indices,
        features=features,
        train=jnp.asarray(train),
        edges=edge_index(train, graph.num_nodes, symmetric=undirected),
        chunked=csr,
        test_chunked=None if test_graph is None else chunked(test_graph),
    )


def stack_sampled_link_data(members: Sequence[SampledLinkData]) -> SampledLinkData:
    """One :class:`SampledLinkData` whose every leaf but the features stacks
    ``members``' (``[K, ...]``), for :func:`fit_links_sampled` with ``per_seed_data``:
    the message graphs of random splits of one graph, one a seed.

    Such splits keep as many edges each, so the arrays agree in shape; the
    static fields are made to agree: the edge index keeps the most search
    steps any needs, and the chunked graphs the longest chunk any has (a
    chunk's edge slice is masked beyond its own edges).

    Raises:
      ValueError: members without a chunked graph, or whose shapes differ.
    """
    if any(m.chunked is None for m in members):
        raise ValueError("per-seed sampled link data need each member's chunked graph")
    steps = max(m.edges.steps for m in members)
    longest = max(m.chunked.max_chunk_edges for m in members)
    sizes = {m.chunked.chunk_size for m in members}
    if len(sizes) > 1:
        raise ValueError(f"per-seed sampled link data: chunk sizes {sorted(sizes)} differ")
    features = members[0].features
    members = [
        m._replace(
            edges=m.edges._replace(steps=steps),
            chunked=dataclasses.replace(m.chunked, max_chunk_edges=longest),
            features=None,
        )
        for m in members
    ]
    return _stack(members, "per-seed sampled link data")._replace(features=features)


def per_seed_sampled_axes() -> SampledLinkData:
    """``vmap``'s ``in_axes`` of a stacked :class:`SampledLinkData` (features shared)."""
    return SampledLinkData._make([0, 0, None, 0, 0, 0, 0])


def batch_endpoints(pairs: jax.Array, negatives: jax.Array, *, shared_sources: bool = False):
    """The distinct endpoint nodes of a batch of positive and negative pairs.

    Args:
      pairs, negatives: int32 ``[B, 2]``.
      shared_sources: static: each negative has its positive's source
        (``negatives[:, 0] == pairs[:, 0]``, target-corrupting negatives),
        so the batch has ``S = 3B`` endpoints, not ``S = 4B``.

    Returns:
      ``(nodes [S], mask [S], local_pos [B, 2], local_neg [B, 2])``: the
      distinct nodes (padded with node 0, ``mask`` false there) and each
      pair as rows of ``nodes``.
    """
    b = pairs.shape[0]
    columns = [pairs[:, 0], pairs[:, 1], negatives[:, 1]]
    if not shared_sources:
        columns.insert(2, negatives[:, 0])
    ends = jnp.concatenate(columns)
    size = len(columns) * b
    nodes, inverse = jnp.unique(ends, size=size, fill_value=0, return_inverse=True)
    ordered = jnp.sort(ends)
    count = 1 + jnp.sum(ordered[1:] != ordered[:-1])
    mask = jnp.arange(size) < count
    inverse = inverse.reshape(len(columns), b)
    local_neg = jnp.stack([inverse[0], inverse[2]]) if shared_sources else inverse[2:]
    return nodes, mask, inverse[:2].T, local_neg.T


def sampled_link_loss(
    model: LinkModel,
    params,
    data: SampledLinkData,
    pairs: jax.Array,
    weights: jax.Array,
    key: jax.Array,
    fanouts: tuple[int, ...],
    rounds: int = NEGATIVE_ROUNDS,
    *,
    mesh: Mesh | None = None,
    sampler: str = "tree",
    caps=None,
    negatives: str = "pairs",
):
    """One batch's loss: ``B`` positives, ``B`` fresh negatives of kind
    ``negatives`` (:func:`draw_negatives`), their
    distinct endpoints' neighbour trees (:func:`~sparsegcn.sampling.sample_blocks`;
    ``sampler="dedup"``: their de-duplicated neighbourhoods,
    :func:`~sparsegcn.sampling.sample_dedup`, frontiers capped by ``caps``),
    the encoder on the samples, the decoder on the pairs.

    .. math::

        \\mathcal L = \\sum_i w_i \\big(\\mathrm{softplus}(-s^+_i) + \\mathrm{softplus}(s^-_i)\\big)
            + \\mathrm{KL} / N

    with ``weights`` ``w`` summing to 1 over an epoch's real pairs (0 on
    padding), so an epoch's mean equals :func:`sampled_reconstruction_loss`
    over all train pairs. VGAE's KL averages over the batch's rows.

    With ``mesh`` (``D`` devices) the ``B`` positives, the ``B`` negatives
    (drawn for all of them, as on one device) and the weights are padded
    (weight 0) to ``D b``, ``b = ceil(B / D)``, and split into ``[D, b]``
    sub-batches, one per device (:func:`split_rows`); sub-batch ``d``
    samples its trees with ``fold_in(key, d)``; the loss is the sum of the
    sub-batches'.
    """
    negative_key, tree_key, encode_key = jax.random.split(key, 3)
    shared = negatives == "targets"
    drawn = draw_negatives(negatives, negative_key, pairs, data.edges, rounds)
    if mesh is None:
        return _tree_loss(
            model,
            params,
            data,
            pairs,
            drawn,
            weights,
            (tree_key, encode_key),
            fanouts,
            sampler,
            caps,
            shared,
        )
    d = mesh.size
    per = -(-pairs.shape[0] // d)

    def shares(a):
        padded = jnp.pad(a, [(0, d * per - a.shape[0])] + [(0, 0)] * (a.ndim - 1))
        return split_rows(padded.reshape(d, per, *a.shape[1:]), mesh)

    def share_loss(pairs, negatives, weights, index):
        keys = (jax.random.fold_in(tree_key, index), jax.random.fold_in(encode_key, index))
        return _tree_loss(
            model, params, data, pairs, negatives, weights, keys, fanouts, sampler, caps, shared
        )

    losses = jax.vmap(share_loss)(
        shares(pairs), shares(drawn), shares(weights), jnp.arange(d, dtype=jnp.int32)
    )
    return jnp.sum(losses)


def _tree_loss(
    model,
    params,
    data,
    pairs,
    negatives,
    weights,
    keys,
    fanouts,
    sampler="tree",
    caps=None,
    shared_sources=False,
):
    """:func:`sampled_link_loss` of given negatives; ``keys``: ``(tree, encode)``."""
    from sparsegcn.sampling.dedup import sample_batch

    tree_key, encode_key = keys
    n = data.edges.indptr.shape[0] - 1
    nodes, mask, local_pos, local_neg = batch_endpoints(
        pairs, negatives, shared_sources=shared_sources
    )
    sample = sample_batch(
        sampler, data.indptr, data.indices, nodes, fanouts, key=tree_key, mask=mask, caps=caps
    )
    z, kl = model.encode(params, sample, data.features, key=encode_key, training=True)
    # XLA's gathers, not the native pair kernels: a batch's few pairs gain
    # nothing from them (Cora, 256 seed edges: 3.2-3.6 against 3.4-3.7 ms a
    # step; synthetic:citation2, 1,024: 1,252 against 1,235 ms), and with them
    # one full-size run's resident memory rose 1.9 GB in a timed batch.
    pos = model.decode(params, z, local_pos, kernel="xla")
    neg = model.decode(params, z, local_neg, kernel="xla")
    loss = jnp.sum(weights * (softplus(-pos) + softplus(neg)))
    return loss + kl / n * jnp.sum(weights)


def sampled_link_step(
    model: LinkModel,
    tx: optax.GradientTransformation,
    config: LinkTrainConfig,
    fanouts: tuple[int, ...],
    params,
    opt_state,
    data: SampledLinkData,
    pairs: jax.Array,
    weights: jax.Array,
    key: jax.Array,
    *,
    mesh: Mesh | None = None,
    sampler: str = "tree",
    caps=None,
):
    """One optimizer step of :func:`fit_links_sampled` on one batch of seed edges.

    Fresh negatives, the batch's neighbour trees, encoder, decoder and loss
    (:func:`sampled_link_loss`), then ``tx``'s update. Jit-able; ``model``,
    ``tx``, ``config`` and ``fanouts`` are static. The epoch scans it over
    its batches; ``benchmarks/link_sampled_epoch.py`` times it a batch at a time.

    Args:
      pairs: int32 ``[B, 2]`` seed edges.
      weights: float32 ``[B]``, 0 on padding slots.
      key: this step's PRNG key.

    Returns:
      ``(params, opt_state, loss [])``.
    """
    loss, grads = jax.value_and_grad(
        lambda q: sampled_link_loss(
            model,
            q,
            data,
            pairs,
            weights,
            key,
            fanouts,
            config.negative_rounds,
            mesh=mesh,
            sampler=sampler,
            caps=caps,
            negatives=model.config.get("negatives", "pairs"),
        )
    )(params)
    params, opt_state = apply_optimizer(tx, grads, opt_state, params)
    return params, opt_state, loss


def fit_links_sampled(
    model: LinkModel,
    data: SampledLinkData,
    eval_data: LinkData,
    config: LinkTrainConfig,
    *,
    fanouts: Sequence[int],
    batch_size: int,
    seeds: Sequence[int] = (0,),
    devices: int | Mesh = 1,
    sampler: str = "tree",
    caps=None,
    progress: bool = False,
    max_batches: int = 0,
    per_seed_data: bool = False,
) -> LinkFitResult:
    """Trains on sampled mini-batches of train edges: one compiled epoch, seeds vmapped.

    Each epoch shuffles the train pairs (padded to whole batches, padding
    weighted 0) and runs a ``lax.scan`` of optimizer steps
    (:func:`sampled_link_loss`); the epoch is compiled once, ahead of time,
    and ``step_ms`` holds each epoch's time divided by its batches. After the
    last epoch every seed is evaluated on ``eval_data``'s pairs
    (:func:`evaluate`, one seed and one phase at a time:
    :class:`PhasedEvaluation`), its nodes embedded on ``data.chunked`` (every
    neighbour, layer by layer in node chunks: the full-batch function in
    bounded memory; ogbl-citation2's graph full batch would gather 61 M
    messages of 256 floats a layer), or without it on ``eval_data``'s graph,
    prepared for the encoder, full batch.

    ``sampler``, ``caps``: the neighbour sampler (``"tree"`` or ``"dedup"``
    with optional per-hop frontier caps, :func:`sampled_link_loss`).
    ``per_seed_data``: ``data`` and ``eval_data`` hold one split a seed,
    every leaf but the features stacked ``[K, ...]``
    (:func:`stack_sampled_link_data`, :func:`stack_link_data`); seed ``k``
    trains and is evaluated on its own, in the same program. ``progress``: a
    progress bar over the epochs. ``max_batches``: train only
    the first this many batches of every epoch's shuffled order (0: all),
    each real pair of them weighing ``1 / (their count)``, as a whole epoch's
    do ``1 / P``; the evaluation is the full one.

    ``devices`` (a count of local devices or a mesh): each batch is split
    over them (:func:`sampled_link_loss`, the module docstring); the global
    batch is ``batch_size`` whatever their count, and the batches are those
    of a one-device run of the same seeds.

    Returns:
      :class:`LinkFitResult` (``losses``: each epoch's mean batch loss).

    Raises:
      ValueError: bad settings, more devices than this process has, or a
        node id outside ``[0, N)`` in ``data``'s or ``eval_data``'s pairs
        (checked as :func:`fit_links` checks them), naming the first.
    """
    from sparsegcn.sampling.neighbor import check_fanouts

    check_link_config(config, model, "fit_links_sampled")
    fanouts = check_fanouts(fanouts)
    from sparsegcn._checks import check_static_int

    batch_size = check_static_int("batch_size", batch_size, minimum=1)
    max_batches = check_static_int("max_batches", max_batches, minimum=0)
    from sparsegcn.sampling.dedup import SAMPLERS, check_caps

    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    caps = check_caps(caps, len(fanouts))
    if caps is not None and sampler != "dedup":
        raise ValueError(f"caps={caps!r} applies to sampler='dedup' only")
    mesh = link_mesh(devices)
    _check_ids("fit_links_sampled: data.train", data.train, int(data.edges.indptr.shape[-1]) - 1)
    _check_link_ids("fit_links_sampled: eval_data", eval_data)
    start = time.perf_counter()
    seeds = check_seeds("fit_links_sampled", seeds)
    keys = seed_keys(seeds)
    init_keys, train_keys = jax.vmap(lambda k: jax.random.split(k))(keys).swapaxes(0, 1)
    tx = make_optimizer(config)
    _check_state_memory(model, tx, init_keys, f"fit_links_sampled ({len(seeds)} seed(s))")
    params = jax.vmap(model.init)(init_keys)
    opt_state = jax.vmap(tx.init)(params)
    if data.chunked is not None:
        if (eval_data.test_graph is None) != (data.test_chunked is None):
            raise ValueError(
                "fit_links_sampled: eval_data.test_graph and data.test_chunked (the test "
                "pairs' message graph, full batch and chunked) must be given together"
            )
        eval_data = eval_data._replace(graph=data.chunked, test_graph=data.test_chunked)
    data = data._replace(test_chunked=None)  # evaluation's alone: no input of the epochs
    params, opt_state, train_keys, data, eval_data = _replicated(
        (params, opt_state, train_keys, data, eval_data), mesh
    )
    p = int(data.train.shape[-2])
    padded = -(-p // batch_size) * batch_size
    batches = padded // batch_size
    if max_batches:
        batches = min(batches, max_batches)

    def epoch(params, opt_state, key, data):
        key, order_key = jax.random.split(key)
        order = jax.random.permutation(order_key, padded)[: batches * batch_size]
        real = order < p
        pairs = data.train[jnp.minimum(order, p - 1)].reshape(batches, batch_size, 2)
        # Every real pair of the epoch weighs the same: 1/p over a whole epoch.
        share = 1.0 / jnp.maximum(jnp.sum(real), 1).astype(jnp.float32)
        weights = jnp.where(real, share, jnp.float32(0.0)).reshape(batches, batch_size)
        step_keys = jax.random.split(key, batches + 1)

        def step(carry, inputs):
            batch, w, k = inputs
            params, opt_state, loss = sampled_link_step(
                model,
                tx,
                config,
                fanouts,
                *carry,
                data,
                batch,
                w,
                k,
                mesh=mesh,
                sampler=sampler,
                caps=caps,
            )
            return (params, opt_state), loss

        (params, opt_state), losses = jax.lax.scan(
            step, (params, opt_state), (pairs, weights, step_keys[1:])
        )
        return params, opt_state, step_keys[0], jnp.sum(losses)

    data_axes = per_seed_sampled_axes() if per_seed_data else None

    def run_epoch(params, opt_state, keys, data):
        return jax.vmap(epoch, in_axes=(0, 0, 0, data_axes))(params, opt_state, keys, data)

    compile_start = time.perf_counter()
    lowered = jax.jit(run_epoch, donate_argnums=(0, 1), **_jit_options(mesh)).lower(
        params, opt_state, train_keys, data
    )
    epoch_fn = lowered.compile()
    assess_fn = PhasedEvaluation.compile(
        model, params, eval_data, config.metric, per_seed=per_seed_data
    )
    compile_s = time.perf_counter() - compile_start
    (params, opt_state, train_keys), history, seconds = _drive(
        epoch_fn,
        (params, opt_state, train_keys),
        data,
        config,
        seeds,
        progress,
        f"{model.name} x{len(seeds)}, {batches} batches",
        chance=link_chance(model),
    )
    metrics = assess_fn(params, eval_data)
    return LinkFitResult(
        seeds=seeds,
        params=params,
        losses=history["loss"],
        valid=metrics["valid"],
        test=metrics["test"],
        test_scores=tuple(metrics["test_scores"]),
        compile_s=compile_s,
        step_ms=1e3 * np.asarray(seconds) / batches,
        wall_s=time.perf_counter() - start,
        devices=1 if mesh is None else mesh.size,
        train_s=float(np.sum(seconds)),
    )


__all__ = [
    "SCORE_ROWS",
    "EvalSet",
    "LinkData",
    "LinkFitResult",
    "LinkTrainConfig",
    "PhasedEvaluation",
    "SampledLinkData",
    "batch_endpoints",
    "check_link_config",
    "draw_negatives",
    "eval_set",
    "evaluate",
    "fit_links",
    "fit_links_sampled",
    "link_data",
    "link_loss",
    "link_mesh",
    "make_optimizer",
    "per_seed_axes",
    "per_seed_sampled_axes",
    "sampled_link_data",
    "sampled_link_loss",
    "sampled_link_step",
    "score_set",
    "split_metrics",
    "split_rows",
    "stack_link_data",
    "stack_sampled_link_data",
    "train_epochs",
    "train_step",
]

"""The settings of one run: :class:`Experiment`, whose fields are the CLI options.

Defaults live here and nowhere else: ``sparsegcn train`` generates one
option per field (see :mod:`sparsegcn.cli.options`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple, TypeVar, cast

from sparsegcn._checks import check_hyperparameter, check_hyperparameters, check_static_int
from sparsegcn.backends import DEFAULT_BACKEND, get_backend
from sparsegcn.datasets import is_path
from sparsegcn.features import FEATURE_NORMALIZATIONS
from sparsegcn.nn.registry import MODELS as REGISTRY
from sparsegcn.nn.registry import get_model_spec
from sparsegcn.ops.ordering import require_order_library
from sparsegcn.parallel.distributed import check_processes
from sparsegcn.sampling import SAMPLERS, check_fanouts
from sparsegcn.sampling.feature_store import FEATURES_ON, check_features_on
from sparsegcn.sampling.host import GRAPH_ON, check_graph_on
from sparsegcn.tasks import TASKS, check_task, task_for, task_name
from sparsegcn.train import TrainConfig
from sparsegcn.train.minibatch import MinibatchConfig
from sparsegcn.train.state import DIVERGENCE_EPOCHS, DIVERGENCE_FACTOR, MONITORS
from sparsegcn.transforms import REORDER_METHODS

DEFAULT_DATASET = "synthetic:tiny"
MODELS = tuple(REGISTRY)
# Fields whose default is the chosen model's (its paper's settings, in the registry).
MODEL_DEFAULTS = (
    "hidden",
    "layers",
    "dropout",
    "lr",
    "weight_decay",
    "decay_layers",
    "fanouts",
    "epochs",
    "patience",
    "monitor",
    "batch_size",
)

HOST_GRAPH_PREPARATIONS = ("unweighted", "none")
"""Graph preparations (:data:`~sparsegcn.nn.registry.PREPARATIONS`) that keep the
stored structure, so the host sampler can read the on-disk CSR as it is."""

FALLBACK_DEFAULTS = {"epochs": 200, "patience": 100, "monitor": "val_acc", "batch_size": 512}
"""Values of the fields in :data:`MODEL_DEFAULTS` a model does not set."""


_T = TypeVar("_T")


class Applies(NamedTuple):
    """Where an :class:`Experiment` field has an effect (a row of :data:`APPLIES`).

    Attributes:
      when: ``when(experiment)`` is true where the field does something.
      where: what it applies to, in words.
      here: ``here(experiment)``: why this run is not such a run, in words.
      idle: values besides the field's default that ask for nothing
        (``fanouts="none"``: full batch).
    """

    when: Callable[[Experiment], bool]
    where: str
    here: Callable[[Experiment], str]
    idle: tuple = ()


def _names(test: Callable) -> str:
    return ", ".join(m for m in MODELS if test(REGISTRY[m]))


def _sampled(exp) -> bool:
    return exp.fanouts is not None and exp.fanouts != "none"


def _link_run(exp) -> bool:
    """Whether ``exp`` predicts links (its sampled runs: batches of train edges)."""
    return task_name(exp.dataset, getattr(exp, "task", "auto")) == "link"


def _full_batch(exp: Experiment) -> str:
    return f"{exp.model} trains full batch here, with fanouts={exp.fanouts or 'none'!r}"


_SAMPLED_RUN = Applies(
    _sampled,
    f"sampled mini-batch training (--fanouts; models {_names(lambda s: s.sampled)})",
    _full_batch,
)


def _owners(task: str) -> str:
    return ", ".join(f"{prefix}NAME" for prefix in TASKS[task].datasets)


def _batched_task(exp) -> bool:
    """Whether ``exp``'s task batches its data for its model (graph tasks: graphs per batch)."""
    return "batch_size" in task_for(exp.dataset, exp.task).defaults.get(exp.model, {})


def _node_trainer(exp) -> bool:
    """Whether ``exp``'s task trains with the node trainers (:attr:`~sparsegcn.tasks.Task.objective`),
    which propagate through ``--backend`` and read the node pipeline's settings."""
    return task_for(exp.dataset, exp.task).objective is not None


def _task_here(exp) -> str:
    return f"{exp.dataset!r} trains as a {task_name(exp.dataset, exp.task)}-level task"


def _writes_checkpoints(exp) -> bool:
    """Whether ``exp`` writes resumable checkpoints every few epochs (not a link model, once)."""
    return exp.checkpoint is not None and task_for(exp.dataset, exp.task).saves == "checkpoints"


def _checkpoints_here(exp) -> str:
    if exp.checkpoint is None:
        return "this run writes none"
    return f"{_task_here(exp)}, which saves its final model once"


def _task_row(name: str) -> Applies:
    def when(exp: Experiment) -> bool:
        return task_name(exp.dataset, exp.task) == name

    return Applies(
        when,
        f"{name}-level datasets ({_owners(name)})",
        lambda e: f"{e.dataset!r} is a {task_name(e.dataset, e.task)}-level dataset",
    )


def _task_rows() -> dict[str, Applies]:
    """A row per field that one task alone reads (:attr:`~sparsegcn.tasks.Task.fields`)."""
    return {field: _task_row(name) for name, task in TASKS.items() for field in task.fields}


def _graph_dataset(e) -> bool:
    """Whether ``e`` trains the graph task (its dataset's, or ``--task graph``)."""
    from sparsegcn.tasks import task_name

    return task_name(e.dataset, e.task) == "graph"


APPLIES: dict[str, Applies] = {
    "fanouts": Applies(
        lambda e: get_model_spec(e.model).sampled or _link_run(e),
        f"a model that runs on sampled blocks ({_names(lambda s: s.sampled)}) or link "
        "prediction (gae, vgae: sampled batches of train edges)",
        lambda e: f"{e.model} trains full batch only",
        idle=("none",),
    ),
    "batch_size": Applies(
        lambda e: _sampled(e) or _batched_task(e),
        f"sampled mini-batch training (--fanouts; models {_names(lambda s: s.sampled)}) and "
        f"graph-level datasets ({_owners('graph')})",
        _full_batch,
    ),
    "sampler": _SAMPLED_RUN,
    "dedup_caps": Applies(
        lambda e: _sampled(e) and e.sampler == "dedup",
        "the dedup sampler (--sampler dedup, with --fanouts)",
        lambda e: f"sampler={e.sampler!r}" if _sampled(e) else _full_batch(e),
    ),
    "features_on": _SAMPLED_RUN._replace(idle=("auto",)),
    "graph_on": _SAMPLED_RUN._replace(idle=("auto",)),
    "max_batches": _SAMPLED_RUN,
    "residual": Applies(
        lambda e: get_model_spec(e.model).residual,
        f"models with skip connections ({_names(lambda s: s.residual)})",
        lambda e: f"{e.model} has no skip connections",
    ),
    "feature_cache": Applies(
        lambda e: get_model_spec(e.model).precompute,
        f"models that precompute their features ({_names(lambda s: s.precompute)})",
        lambda e: f"{e.model} has none to cache",
    ),
    "checkpoint_every": Applies(
        _writes_checkpoints,
        "runs that write checkpoints every few epochs (--checkpoint, but not --task link)",
        _checkpoints_here,
    ),
    "keep": Applies(
        _writes_checkpoints,
        "runs that write checkpoints every few epochs (--checkpoint, but not --task link)",
        _checkpoints_here,
    ),
    "overwrite": Applies(
        lambda e: e.checkpoint is not None,
        "runs that write checkpoints (--checkpoint)",
        lambda e: "this run writes none",
    ),
    "divergence_epochs": Applies(
        lambda e: bool(e.divergence_factor),
        "runs that watch for divergence (--divergence-factor above 0)",
        lambda e: "divergence_factor=0 turns the watch off",
    ),
    "root": Applies(
        lambda e: not is_path(e.dataset),
        "datasets named by name (their files live under the data root)",
        lambda e: f"dataset {e.dataset!r} is a folder path, read as it is",
    ),
    "scale": Applies(
        lambda e: e.dataset.startswith("synthetic:") and not _graph_dataset(e),
        "generated node, link and heterogeneous datasets (synthetic:<preset>)",
        lambda e: (
            f"graph dataset {e.dataset!r} is generated at one size"
            if _graph_dataset(e)
            else f"dataset {e.dataset!r} is read as it is"
        ),
    ),
    # The graph, hetero and link trainers propagate with their own segment sums.
    "backend": Applies(
        _node_trainer,
        "node classification (the node trainers propagate through the backend)",
        lambda e: f"{_task_here(e)}, which propagates with segment sums of its own",
    ),
    "normalize_features": Applies(
        lambda e: _node_trainer(e) or _link_run(e),
        "node classification and link prediction (one feature matrix of one graph)",
        lambda e: f"{_task_here(e)}, whose features are used as stored",
    ),
    "edge_features": Applies(
        _node_trainer,
        "node classification (edge features become node features: their mean per node)",
        lambda e: f"{_task_here(e)}, whose trainer reads no edge features",
    ),
    # Left unset (None) where it does not apply, so even "val_acc" given is refused.
    "monitor": Applies(
        _node_trainer,
        "node classification (the node trainers select by val_acc or val_loss)",
        lambda e: f"{_task_here(e)}, which selects by its validation metric",
    ),
    # fit_graphs decays every parameter by --weight-decay (GraphTrainConfig has no layer
    # choice): such a task's runs record what it decays (Task.decays) instead.
    "decay_layers": Applies(
        lambda e: task_for(e.dataset, e.task).decays is None,
        "node, hetero and link training (graph-level training decays every parameter "
        "by --weight-decay)",
        _task_here,
    ),
    **_task_rows(),
}
"""Fields that apply only to some models or modes. A field given a value other than
its default (or an ``idle`` one) where its row's ``when`` is false is refused with
one line (:meth:`Experiment.check_applies`), as a model option is for the wrong
model (:meth:`~sparsegcn.nn.registry.ModelSpec.resolve_options`). A new option
that applies only sometimes needs one row here and nothing else."""


def _hetero_relations(exp) -> str:
    return f"{exp.dataset!r} is one relation, whose bases span the same weights"


OPTION_APPLIES: dict[str, Applies] = {
    "num_bases": Applies(
        lambda e: task_name(e.dataset, e.task) == "hetero",
        f"heterogeneous datasets ({', '.join(TASKS['hetero'].datasets)}, or their on-disk "
        "folders), whose relations share the bases",
        _hetero_relations,
    ),
}
""":data:`APPLIES` for model options (a model spec's ``options``):
an option given a value other than its default where its row's ``when`` is
false is refused the same way."""

PATH_FIELDS = ("root", "feature_cache", "checkpoint", "resume", "plot")
"""Fields that name a file or folder: ``None`` for none, never ``""`` (which would
mean the current folder, or turn the option off unseen)."""


WRITER_OPTIONS = ("checkpoint", "plot", "checkpoint_every", "keep", "overwrite")
"""What only process 0 of a multi-process run uses (:meth:`Experiment.for_process`)."""


def without_inapplicable(settings: dict) -> dict:
    """``settings`` (:class:`Experiment` field values, every field present, as a
    checkpoint records them) with each field that does not apply (:data:`APPLIES`)
    set back to its default: checkpoints written before such fields were refused
    recorded values that had no effect, and still load."""
    defaults = {f.name: f.default for f in dataclasses.fields(Experiment)}
    # Read as an Experiment by the rows (the fields they read are all present).
    view = cast(Experiment, types.SimpleNamespace(**{**defaults, **settings}))
    cleaned = dict(settings)
    for name, rule in APPLIES.items():
        value = getattr(view, name)
        if value != defaults[name] and value not in rule.idle and not rule.when(view):
            cleaned[name] = defaults[name]
    options = settings.get("model_options")
    spec = REGISTRY.get(view.model) if isinstance(view.model, str) else None
    if options is not None and spec is not None and _pairs(options):
        cleaned["model_options"] = tuple(
            (name, value)
            for name, value in (options.items() if isinstance(options, Mapping) else options)
            if not (
                name in OPTION_APPLIES
                and name in spec.options
                and value != spec.options[name].default
                and not OPTION_APPLIES[name].when(view)
            )
        )
    return cleaned


def _pairs(options) -> bool:
    """Whether ``options`` is a ``model_options`` value: ``{name: value}`` or
    ``(name, value)`` pairs with string names."""
    if isinstance(options, Mapping):
        return all(isinstance(name, str) for name in options)
    if isinstance(options, (str, bytes)) or not isinstance(options, (tuple, list)):
        return False
    return all(
        isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], str)
        for pair in options
    )


@functools.cache
def _field_kinds() -> dict[str, tuple[type, bool]]:
    """``{field: (type, optional)}`` of :class:`Experiment`, from its annotations."""
    kinds = {}
    for name, hint in typing.get_type_hints(Experiment).items():
        args = typing.get_args(hint)
        base = next((a for a in args if a is not type(None)), hint)
        kinds[name] = (base, type(None) in args)
    return kinds


def _check_field_types(exp: Experiment) -> None:
    """Refuses a field of the wrong type (a string for a bool, a number for a path),
    an empty path, a value outside a field's choices or malformed ``model_options``,
    naming the field: the CLI's parser cannot produce these, the Python API can."""
    for field in dataclasses.fields(exp):
        name, value = field.name, getattr(exp, field.name)
        kind, optional = _field_kinds()[name]
        if value is None and optional:
            continue
        flag = "--" + name.replace("_", "-")
        if kind is bool and not isinstance(value, bool):
            raise TypeError(
                f"{name} must be True or False, got {value!r} ({type(value).__name__}) ({flag})"
            )
        if kind is str and not isinstance(value, str):
            raise TypeError(
                f"{name} must be a string, got {value!r} ({type(value).__name__}) ({flag})"
            )
        if value == "" and (name in PATH_FIELDS or name == "dataset"):
            what = "a dataset" if name == "dataset" else "a path, or leave the option out"
            raise ValueError(f"{name}='' ({flag}) is empty: give {what}")
        choices = field.metadata.get("choices")
        if choices is not None and value not in choices:
            raise ValueError(f"{name} must be one of {list(choices)}, got {value!r} ({flag})")
    if exp.model_options is not None and not _pairs(exp.model_options):
        raise TypeError(
            "model_options must be (name, value) pairs with string names, or a {name: value} "
            f"mapping, got {exp.model_options!r}"
        )


def _resolved(name: str, value: _T | None, model: str) -> _T:
    """A :data:`MODEL_DEFAULTS` setting that :class:`Experiment` filled in from
    the model's defaults; ``ValueError`` naming it if neither gave one."""
    if value is None:
        raise ValueError(f"{name} is not set and model {model!r} registers no default for it")
    return value


def _field(default, help: str, **metadata):
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One training run's settings. Defaults reproduce Kipf & Welling's GCN.

    Fields in :data:`MODEL_DEFAULTS` left ``None`` take the chosen model's
    registered defaults (:mod:`sparsegcn.nn.registry`) when the experiment
    is created, so ``Experiment(model="gat")`` is Veličković et al.'s setup.
    """

    dataset: str = _field(
        DEFAULT_DATASET,
        "dataset name, or the path of an on-disk dataset folder (./NAME, DIR/NAME); the "
        "default is generated in-process, no download",
    )
    root: str | None = _field(None, "data root (default: $SPARSEGCN_DATA or ./datasets)")
    scale: float = _field(1.0, "shrink factor for synthetic presets")
    model: str = _field("gcn", "model", choices=MODELS)
    backend: str = _field(
        DEFAULT_BACKEND, "propagation backend", choices=("dense", "segment", "bcoo")
    )
    hidden: int | None = _field(None, "hidden width (per head for gat) [model default]")
    layers: int | None = _field(
        None, "number of layers [one per --fanouts hop for sampled runs, else model default]"
    )
    dropout: float | None = _field(None, "dropout rate [model default]")
    residual: bool = _field(False, "skip connections between equal-width hidden layers")
    model_options: tuple | None = _field(
        None,
        "the chosen model's own hyperparameters as (name, value) pairs; the CLI sets them "
        "with one flag each (see the model options of `sparsegcn train --help`) [model defaults]",
        cli=False,
    )
    lr: float | None = _field(None, "Adam learning rate [model default]")
    weight_decay: float | None = _field(None, "L2 weight decay [model default]")
    decay_layers: str | None = _field(
        None, "layers to decay [model default]", choices=("first", "all", "none")
    )
    epochs: int | None = _field(None, "maximum epochs [model default, else 200]")
    patience: int | None = _field(
        None, "early-stopping patience in epochs (0: never stop early) [model default, else 100]"
    )
    monitor: str | None = _field(
        None,
        "what early stopping and model selection watch: val_acc (then val_loss on ties) or "
        "val_loss [model default, else val_acc]",
        choices=MONITORS,
    )
    seeds: int = _field(1, "number of seeds, trained together as one compiled program")
    seed: int = _field(0, "first seed; seeds are seed, seed+1, ...")
    reorder: str = _field(
        "none",
        "relabel nodes for memory locality before training (community: label-propagation "
        "communities; metis: METIS parts of ~2048 nodes; networkit: Louvain communities; "
        "rcm; degree; metis and networkit need the order extra); reports and predictions "
        "stay in the dataset's order",
        choices=("none", *REORDER_METHODS),
    )
    normalize_features: str = _field(
        "auto",
        "row-normalize features: 'row' (Kipf & Welling), 'none', or 'auto' (row-normalize "
        "non-negative features such as bag-of-words, keep signed ones)",
        choices=FEATURE_NORMALIZATIONS,
    )
    feature_cache: str | None = _field(
        None,
        "folder caching features propagated once before training (sgc's A^K X), keyed by "
        "the dataset's fingerprint, graph and feature hashes, K and normalization "
        "(default: recompute every run)",
    )
    epochs_per_call: int = _field(
        0, "epochs per compiled call (0: about 20 calls per run, at most --patience epochs each)"
    )
    clip_norm: float = _field(0.0, "clip gradients to this global norm (0: off)")
    fanouts: str | None = _field(
        None,
        "neighbours sampled per hop, one hop per layer: trains on sampled mini-batches "
        "(sage by default, 25,10; gat, gatv2, gin and rgcn when given; 'none': full batch)",
    )
    batch_size: int | None = _field(
        None, "seeds per sampled mini-batch; graphs per batch of a graph task [512; graph: 32]"
    )
    sampler: str = _field(
        "tree",
        "neighbour sampler of mini-batches: 'tree' (a row per sampled path) or 'dedup' (a row "
        "per distinct node, relabelled blocks; see docs on sampling)",
        choices=SAMPLERS,
    )
    dedup_caps: str | None = _field(
        None,
        "dedup sampler: the most new nodes each hop keeps, comma-separated, one per hop "
        "(bounds the padded rows; overflowing nodes are dropped and counted)",
    )
    features_on: str = _field(
        "auto",
        "where sampled training keeps the features: 'device'; 'host' (RAM) or 'mmap' (the "
        "on-disk dataset's file), each batch's rows gathered on the host and copied over; "
        "'auto' picks from the sizes",
        choices=FEATURES_ON,
    )
    graph_on: str = _field(
        "auto",
        "where sampled training samples the graph: 'device' (inside the compiled step); "
        "'host' (NumPy, from the on-disk dataset's memory-mapped CSR, each batch's tree "
        "shipped with its feature rows; features then stay off the device); 'auto' picks "
        "'host' when the on-disk graph is too large to expand in RAM",
        choices=GRAPH_ON,
    )
    max_batches: int = _field(
        0,
        "train only the first B batches of every epoch and evaluate on B batches of validation "
        "and test nodes (a fixed random subset for node runs, the first B batches' worth of "
        "each split for heterogeneous datasets), projecting a full epoch's time; node runs "
        "with features or graph off the device, and heterogeneous runs (0: every batch)",
    )
    checkpoint: str | None = _field(None, "save checkpoints to this folder")
    checkpoint_every: int = _field(50, "epochs between checkpoints (0: only at the end)")
    keep: int | None = _field(
        None,
        "number of newest checkpoints to keep (0: all; default 3, or with --resume the "
        "resumed run's own --keep)",
    )
    resume: str | None = _field(None, "resume from this checkpoint folder or ckpt-*.json file")
    plot: str | None = _field(None, "draw loss and validation accuracy curves to this PNG")
    devices: int = _field(
        1,
        "local devices per process; gcn/mlp: edges and features sharded over them (full "
        "batch), sage: each mini-batch split over them (data parallel), --task link: each "
        "step's node pairs split over them; every seed trains on every device",
    )
    shard_features: bool = _field(
        False,
        "sampled models on several devices: split the features by rows over the devices "
        "(ceil(N/D) rows each, each batch's rows fetched with collectives) instead of "
        "replicating them",
    )
    coordinator: str | None = _field(
        None, "multi-process run: HOST:PORT where process 0 listens, the same for every process"
    )
    num_processes: int = _field(1, "multi-process run: number of processes")
    process_id: int = _field(0, "multi-process run: this process's index in [0, num-processes)")
    overwrite: bool = _field(
        False,
        "let --checkpoint replace the checkpoints of another run in that folder (once this "
        "run has written its first)",
    )
    divergence_factor: float = _field(
        DIVERGENCE_FACTOR,
        "stop when a seed's loss stays above this many times its first epoch's loss for "
        "--divergence-epochs epochs in a row (0: off; see docs/troubleshooting.md, "
        "'Training diverged')",
    )
    divergence_epochs: int = _field(
        DIVERGENCE_EPOCHS, "consecutive epochs above --divergence-factor that stop a run"
    )
    folds: int = _field(
        0,
        "graph datasets (tu:NAME): folds of cross-validation (stratified by class), each with "
        "an inner validation split, trained together as one program (0: one holdout split)",
    )
    packing: str = _field(
        "balanced",
        "graph datasets: how graphs share a batch: 'balanced' (sorted by size and dealt so "
        "that every batch's size is near the mean; a tighter budget, less padding) or "
        "'random' (a random order)",
        choices=("balanced", "random"),
    )
    readout: str = _field(
        "sum",
        "graph datasets: how each layer's node rows become one row per graph",
        choices=("sum", "mean", "max", "attention", "set2set"),
    )
    learn_eps: bool = _field(
        False, "graph datasets: GIN-eps (learn eps per layer) instead of GIN-0 (eps = 0)"
    )
    virtual_node: bool = _field(
        False, "graph datasets: a virtual node joined to every node of its graph (GIN-virtual)"
    )
    degree_features: bool = _field(
        False,
        "graph datasets: node features are one-hot node degrees instead of the dataset's own "
        "(Xu et al.'s input for social networks such as IMDB-BINARY, whose nodes have no label)",
    )
    edge_features: bool = _field(
        True,
        "use the dataset's edge features where it has them (ogbn-proteins: node features = "
        "mean of incident edges' features); --no-edge-features ignores them",
    )
    task: str = _field(
        "auto",
        "what to learn: 'auto' (the dataset's own task), or 'link' to predict the edges of a "
        "node dataset (split 85/5/10 at random by --seed); ogbl-* datasets are link datasets",
        choices=("auto", *TASKS),
    )
    use_valid_edges: bool = _field(
        False,
        "link datasets with an official split (ogbl-collab): the test edges are scored on "
        "embeddings that pass messages on the validation edges too (OGB's baselines' "
        "--use_valedges_as_input); training and validation use the train edges alone",
    )

    def __post_init__(self):
        if not isinstance(self.model, str) or self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {list(MODELS)}")
        _check_field_types(self)
        spec = get_model_spec(self.model)
        samples = spec.sampled or _link_run(self)
        if self.layers is None and samples and self.fanouts not in (None, "none"):
            # A sampled model takes one layer per hop: --fanouts 15,10,5 alone means 3 layers.
            object.__setattr__(self, "layers", len(check_fanouts(self.fanouts)))
        for name, default in self._model_defaults().items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        given = dict(self.model_options or ())
        if _link_run(self) and self.sampled and "recon" not in given and "recon" in spec.options:
            # Sampled link batches score sampled negatives on sampled trees: recon
            # "sampled" and a sampled encoder (sage) unless asked.
            given["recon"] = "sampled"
            given.setdefault("encoder", "sage")
        resolved = spec.resolve_options(self.model, given)
        object.__setattr__(self, "model_options", tuple(sorted(resolved.items())))
        if self.residual and resolved.get("jk", "none") != "none":
            raise ValueError(
                f"--residual with --jk {resolved['jk']}: jumping knowledge has no skip connections"
            )
        # Every number first, through the table the Python API shares
        # (sparsegcn._checks.HYPERPARAMETERS), so a bad value is named before
        # any data is read.
        numbers = {
            # Unset only for a model without hidden layers (sgc: no default).
            **({} if self.hidden is None else {"hidden": self.hidden}),
            "layers": self.layers,
            "dropout": self.dropout,
            "learning_rate": self.lr,
            "weight_decay": self.weight_decay,
            "epochs": self.epochs,
            "patience": self.patience,
            "seeds": self.seeds,
            "seed": self.seed,
            "scale": self.scale,
            "epochs_per_call": self.epochs_per_call,
            "clip_norm": self.clip_norm,
            "batch_size": self.batch_size,
            "checkpoint_every": self.checkpoint_every,
            "keep": self.keep,
            "divergence_factor": self.divergence_factor,
            "divergence_epochs": self.divergence_epochs,
        }
        option = {"learning_rate": "lr"}
        check_hyperparameters(
            numbers,
            labels=option,
            flags={k: "--" + option.get(k, k).replace("_", "-") for k in numbers},
            # 0 switches these options off (see their help).
            off={
                **{
                    k: (0,)
                    for k in ("patience", "epochs_per_call", "clip_norm", "divergence_factor")
                },
                "keep": (None,),  # 3, or the resumed run's (CheckpointHook.for_run)
            },
        )
        check_hyperparameter(
            "seed", self.seed + self.seeds - 1, label="the last seed", flag="--seed + --seeds - 1"
        )
        if self.monitor not in (None, *MONITORS):  # None: no node trainer selects (APPLIES)
            raise ValueError(f"monitor must be one of {list(MONITORS)}, got {self.monitor!r}")
        if self.plot is not None:  # not found out after training
            from sparsegcn.plots import check_plot_path

            check_plot_path(self.plot, what="--plot")
        for name in ("dataset", "fanouts", "decay_layers"):
            value = getattr(self, name)
            if not isinstance(value, str) and not (name == "fanouts" and value is None):
                raise TypeError(f"{name} must be a string, got {value!r}")
        get_backend(self.backend)
        check_static_int("devices", self.devices, minimum=1)
        check_processes(self.coordinator, self.num_processes, self.process_id)
        if not self.sampled and spec.uses_graph and self.parallel and self.backend != "segment":
            raise ValueError(
                f"with several devices or processes {self.model} propagates edge-sharded "
                f"(gather and segment_sum per shard); backend={self.backend!r} has no sharded "
                f"form, use --backend segment"
            )
        if self.reorder not in ("none", *REORDER_METHODS):
            raise ValueError(
                f"reorder must be 'none' or one of {REORDER_METHODS}, got {self.reorder!r}"
            )
        require_order_library(self.reorder)  # metis and networkit: refused before any data is read
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {list(SAMPLERS)}, got {self.sampler!r}")
        check_features_on(self.features_on)
        check_graph_on(self.graph_on)
        check_task(self)  # first: a graph run names what graph training does not support
        self.check_applies()
        if self.shard_features:
            # Sharded features live on the devices of a data-parallel run.
            refused = {
                "fanouts": None if self.sampled else self.fanouts or "none",
                "devices": None if self.parallel else self.devices,
                "features_on": None if self.features_on in ("auto", "device") else self.features_on,
            }
            why = {
                "fanouts": f"{self.model} trains full batch (with several devices its "
                "features are split with its edges already)",
                "devices": "one device has nothing to split the features over",
                "features_on": "the features stay on the host, not on the devices",
            }
            for name, value in refused.items():
                if value is not None:
                    raise ValueError(
                        f"--shard-features splits the features over the devices of a sampled "
                        f"data-parallel run; {name}={value!r}: {why[name]}"
                    )
        check_static_int("max_batches", self.max_batches, minimum=0)
        if self.features_on in ("host", "mmap"):
            self.check_streamed(f"features_on={self.features_on!r}")
        if self.graph_on == "host":
            self.check_streamed("graph_on='host'")
        if self.max_batches:
            self.check_streamed(f"max_batches={self.max_batches}")
        if self.sampled:
            hops = len(self.minibatch_config().fanouts)
            if hops != self.layers:
                raise ValueError(
                    f"{self.model} samples one hop per layer, but fanouts={self.fanouts!r} has "
                    f"{hops} hops and layers={self.layers}; pass --layers {hops}"
                )

    def _model_defaults(self) -> dict:
        """What this run takes for each field of :data:`MODEL_DEFAULTS` left unset
        (``None`` for none).

        The task's defaults for the model, else the model's registered ones,
        else :data:`FALLBACK_DEFAULTS`; but ``monitor`` stays unset where no
        node trainer selects (:data:`APPLIES`), and where the task's trainer
        decays weights by a rule of its own (:attr:`~sparsegcn.tasks.Task.decays`)
        ``decay_layers`` is what it decays with this run's weight decay.
        """
        task = task_for(self.dataset, self.task)
        filled = task.model_defaults(self.model, get_model_spec(self.model).defaults)
        defaults = {name: filled.get(name, FALLBACK_DEFAULTS.get(name)) for name in MODEL_DEFAULTS}
        if not APPLIES["monitor"].when(self):
            defaults["monitor"] = None
        if task.decays is not None:
            decay = defaults["weight_decay"] if self.weight_decay is None else self.weight_decay
            defaults["decay_layers"] = task.decays if decay else "none"
        return defaults

    def with_settings(self, given: Iterable[str] = (), /, **changes) -> Experiment:
        """This run with ``changes``, as :func:`dataclasses.replace`; but a change of
        ``model`` or ``task`` fills in the new model's defaults afresh.

        The settings this run took from its model and task (:data:`MODEL_DEFAULTS`,
        ``layers`` from ``fanouts``, model options at their defaults) are unset
        first, so ``--sweep model=gcn,gat`` trains each model with its own
        defaults; a value that equals the old model's default counts as taken
        unless its field is in ``given`` (the command line's flags: ``--lr
        0.01`` stays ``0.01`` for every swept model). Settings set otherwise
        stay, and are refused where they do not apply. A ``decay_layers`` its
        task decides follows the new ``weight_decay``.
        """
        if all(changes.get(k, getattr(self, k)) == getattr(self, k) for k in ("model", "task")):
            decided = not APPLIES["decay_layers"].when(self)
            return dataclasses.replace(
                self, **{**({"decay_layers": None} if decided else {}), **changes}
            )
        spec = get_model_spec(self.model)
        filled = self._model_defaults()
        settings = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        given = frozenset(given)
        for name in MODEL_DEFAULTS:
            if settings[name] == filled[name] and name not in given:
                settings[name] = None
        layers_from_hops = self.sampled and self.layers == len(check_fanouts(self.fanouts))
        if layers_from_hops and "layers" not in given:
            settings["layers"] = None  # one per hop: the new model counts them again
        settings["model_options"] = tuple(
            (name, value)
            for name, value in self.options().items()
            if value != spec.options[name].default
        )
        return Experiment(**{**settings, **changes})

    def check_applies(self, given: Iterable[str] = ()) -> None:
        """Refuses a setting that would do nothing in this run (:data:`APPLIES`).

        Args:
          given: fields set explicitly (the command line's flags), checked
            even where their value is the default; any field whose value
            differs from its default is checked anyway.

        Raises:
          ValueError: naming the first such field, its value, what it
            applies to and why this run is not that.
        """
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        # A setting the model or task fills in (batch_size: 512, or 32 for graphs) is unset.
        defaults.update(self._model_defaults())
        given = set(given)
        for name, rule in APPLIES.items():
            value = getattr(self, name)
            unset = value == defaults[name] and name not in given
            if unset or value in rule.idle or rule.when(self):
                continue
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{name}={value!r} ({flag}) applies only to {rule.where}; {rule.here(self)}"
            )
        options = get_model_spec(self.model).options
        for name, value in self.options().items():
            option_rule = OPTION_APPLIES.get(name)
            if option_rule is None or value == options[name].default or option_rule.when(self):
                continue
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{name}={value!r} ({flag}) applies only to {option_rule.where}; "
                f"{option_rule.here(self)}"
            )

    def check_streamed(self, reason: str) -> None:
        """Refuses what a streamed run (:func:`~sparsegcn.train.fit_streamed`: one seed,
        sampled trees, one device, no checkpoints) does not support; ``reason`` names
        the setting that made the run streamed.

        Raises:
          ValueError: naming the first unsupported setting and its value.
        """
        host_graph = self.graph_on == "host" or reason.startswith("graph_on")
        spec = get_model_spec(self.model)
        refused = {
            "fanouts": None if self.sampled else self.fanouts or "none",
            "seeds": self.seeds if self.seeds != 1 else None,
            # The streamed epoch localizes tree samples.
            "sampler": self.sampler if self.sampler != "tree" else None,
            "devices": self.devices if self.parallel else None,
            "checkpoint": self.checkpoint,
            "resume": self.resume,
            "plot": self.plot,
            # One epoch a call: the host gathers every batch between the device's steps.
            "epochs_per_call": self.epochs_per_call or None,
            # Relabelling would copy the file's features into RAM.
            "reorder": self.reorder
            if self.features_on == "mmap" and self.reorder != "none"
            else None,
            # The streamed step reads features gathered on the host.
            "features_on": "device" if self.features_on == "device" else None,
            # The host sampler reads the stored graph; GAT samples added self-loops too.
            "model": self.model
            if host_graph and spec.prepare not in HOST_GRAPH_PREPARATIONS
            else None,
        }
        for name, value in refused.items():
            if value is not None:
                raise ValueError(
                    f"{reason} trains one seed on sampled batches on one device without "
                    f"checkpoints, features off the device; {name}={value!r} is not supported "
                    "with it"
                )

    @property
    def sampled(self) -> bool:
        """Whether this run trains on sampled mini-batches (``fanouts`` set)."""
        return self.fanouts is not None and self.fanouts != "none"

    def options(self) -> dict:
        """The model's own hyperparameters, every one resolved (``{name: value}``)."""
        return dict(self.model_options or ())  # a tuple once __post_init__ ran

    def minibatch_config(self) -> MinibatchConfig:
        """Sampling settings of mini-batch training."""
        return MinibatchConfig(
            fanouts=check_fanouts(self.fanouts),
            batch_size=_resolved("batch_size", self.batch_size, self.model),
            sampler=self.sampler,
            caps=self.dedup_caps,
        )

    def train_config(self) -> TrainConfig:
        per_call = self.epochs_per_call or None
        epochs = _resolved("epochs", self.epochs, self.model)
        if per_call is None and self.checkpoint and self.checkpoint_every:
            # Checkpoints land on compiled-call boundaries: make every multiple
            # of checkpoint_every one of them.
            default = TrainConfig(epochs=epochs, patience=self.patience or None).chunk
            per_call = math.gcd(default, self.checkpoint_every)
        return TrainConfig(
            epochs=epochs,
            learning_rate=_resolved("lr", self.lr, self.model),
            weight_decay=_resolved("weight_decay", self.weight_decay, self.model),
            decay_layers=_resolved("decay_layers", self.decay_layers, self.model),
            patience=self.patience or None,
            # None where no node trainer selects; the hetero trainer reads this
            # config for its optimizer alone.
            monitor=self.monitor or TrainConfig.monitor,
            epochs_per_call=per_call,
            clip_norm=self.clip_norm or None,
            # The report carries train_step_ms_median: opt in to timing 20 steps.
            timing_steps=20,
            divergence_factor=self.divergence_factor or None,
            divergence_epochs=self.divergence_epochs,
        )

    @property
    def parallel(self) -> bool:
        """Whether the run spans more than one device (``devices * num_processes > 1``)."""
        return self.devices * self.num_processes > 1

    def seed_list(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))

    def for_process(self, index: int) -> Experiment:
        """What process ``index`` of a multi-process run writes of this run.

        Every process trains the same seeds; process 0 alone writes the
        checkpoints and draws the plot. Another process gets this run
        without ``checkpoint`` and ``plot``, and with the options that apply
        only to a checkpoint folder (:data:`WRITER_OPTIONS`) at their defaults.
        """
        if index == 0:
            return self
        defaults: dict = {
            f.name: f.default for f in dataclasses.fields(self) if f.name in WRITER_OPTIONS
        }
        return dataclasses.replace(self, **defaults)

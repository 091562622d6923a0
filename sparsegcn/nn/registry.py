"""The model registry: the one place that knows model names.

Each entry says how to build the model, which graph it reads (the host-side
preparation, computed once), how it trains by default, and its paper's
hyperparameters, which the CLI uses as defaults. The CLI choices,
``predict``, sweeps, checkpoints and the parallel trainers all read this
table; adding a model is one file with its builder plus one line here.

A builder is ``build(in_features, num_classes, **hyper) -> Model`` and
takes ``hidden``, ``num_layers`` and ``dropout_rate`` at least. A model's
own hyperparameters are declared here as :class:`Option` entries: each one
becomes a ``sparsegcn train`` flag and an entry of
``Experiment.model_options``, checked before any data is read, so a new
model needs no edit anywhere else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, cast

from sparsegcn import transforms
from sparsegcn._checks import HYPERPARAMETERS, Bound, check_bound, check_flag
from sparsegcn.graph import Graph
from sparsegcn.nn.appnp import appnp
from sparsegcn.nn.gae import DECODERS, NEGATIVES, RECONSTRUCTIONS, graph_autoencoder
from sparsegcn.nn.gat import gat, gatv2
from sparsegcn.nn.gcn import gcn
from sparsegcn.nn.gcnii import gcnii
from sparsegcn.nn.gin import gin
from sparsegcn.nn.jk import jk
from sparsegcn.nn.mlp import mlp
from sparsegcn.nn.model import Model
from sparsegcn.nn.rgcn import rgcn_homogeneous
from sparsegcn.nn.sage import sage
from sparsegcn.nn.sgc import sgc


def _self_loops(graph: Graph) -> Graph:
    """One unweighted self-loop per node and no other loop: GAT's neighbourhood."""
    plain = graph.replace(weights=None) if graph.weights is not None else graph
    return transforms.add_self_loops(transforms.remove_self_loops(plain))


def _unweighted(graph: Graph) -> Graph:
    return graph.replace(weights=None) if graph.weights is not None else graph


PREPARATIONS: Mapping[str, Callable[[Graph], Graph]] = MappingProxyType(
    {
        "gcn_norm": transforms.gcn_norm,
        "mean_norm": lambda g: transforms.mean_norm(_unweighted(g)),
        "unweighted": _unweighted,
        "self_loops": _self_loops,
        "none": lambda g: g,
    }
)
"""Host-side graph preparations by name: what a model's ``apply`` expects."""


class Option(NamedTuple):
    """One model-specific hyperparameter: a CLI flag and a builder keyword.

    Attributes:
      default: the paper's value; its type (``int``, ``float``, ``str``,
        ``bool``) is the option's.
      help: one line for ``--help``.
      choices: the allowed values of a string option.
      bound: the allowed range of a number.
      keyword: the builder's keyword (default: the option's name).
    """

    default: Any
    help: str
    choices: tuple | None = None
    bound: Bound | None = None
    keyword: str | None = None

    def check(self, name: str, value):
        """``value`` if allowed, else ``ValueError``/``TypeError`` naming it."""
        kind = type(self.default)
        if kind is bool or kind is str:
            if not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {value!r}")
            if self.choices is not None and value not in self.choices:
                raise ValueError(f"{name} must be one of {list(self.choices)}, got {value!r}")
            return value
        return check_bound(name, value, self.bound or Bound(kind))


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How to build, feed and train one model.

    Attributes:
      build: ``build(in_features, num_classes, **hyper) -> Model``.
      prepare: a key of :data:`PREPARATIONS`, the graph ``apply`` reads.
      sampled: whether ``apply`` accepts a
        :class:`~sparsegcn.sampling.NeighborSample` (mini-batch training).
      sampled_by_default: train on sampled mini-batches unless told
        otherwise (GraphSAGE); others sample only when given fanouts.
      defaults: the paper's settings, as :class:`~sparsegcn.experiment.Experiment`
        field values (``hidden``, ``layers``, ``dropout``, ``lr``,
        ``weight_decay``, ``fanouts``, ``epochs``, ``patience``,
        ``monitor``, ...).
      options: further ``Experiment`` fields passed to ``build``, as
        ``{field: builder keyword}``.
      uses_graph: ``False`` for graph-free baselines (no layout to choose).
      precompute: the trainers feed ``apply`` SGC's ``Â^K X`` (``K`` the
        ``hops`` option), propagated once before training and cached
        (:func:`sparsegcn.experiment.precompute.sgc_precompute`), and the
        builder gets ``precomputed=True``.
      reference: the paper, for the README's table.
      link_encoder: a GAE or VGAE may encode nodes with it (``--encoder``:
        :data:`ENCODERS`); ``False`` for models that read precomputed
        features, typed graphs, or are link models themselves.
    """

    build: Callable[..., Model]
    prepare: str
    sampled: bool
    sampled_by_default: bool = False
    defaults: Mapping = dataclasses.field(default_factory=dict)
    options: Mapping[str, Option] = dataclasses.field(default_factory=dict)
    residual: bool = False
    uses_graph: bool = True
    precompute: bool = False
    reference: str = ""
    link_encoder: bool = True

    def __post_init__(self):
        if self.prepare not in PREPARATIONS:
            raise ValueError(f"prepare must be one of {sorted(PREPARATIONS)}, got {self.prepare!r}")

    def resolve_options(self, name: str, given: Mapping) -> dict:
        """Every option of this model: ``given`` values checked, defaults for the rest.

        Raises:
          ValueError: an option this model does not take (the message names
            the models that do), or a value out of its range.
        """
        for option, value in given.items():
            if option not in self.options:
                encoder = given.get(
                    "encoder", getattr(self.options.get("encoder"), "default", None)
                )
                inner = MODELS.get(encoder) if isinstance(encoder, str) else None
                if inner is not None and option in inner.options:
                    raise ValueError(
                        f"{option}={value!r} is an option of --encoder {encoder}, which "
                        f"{name} builds with its defaults; encoder options cannot be set"
                    )
                users = [m for m, spec in MODELS.items() if option in spec.options]
                where = f"applies to {', '.join(users)}" if users else "is no model's option"
                raise ValueError(f"{option}={value!r} {where}, not {name}")
        return {
            option: spec.check(option, given.get(option, spec.default))
            for option, spec in self.options.items()
        }

    def prepare_graph(self, graph: Graph) -> Graph:
        """The graph this model's ``apply`` reads, computed once on the host."""
        return PREPARATIONS[self.prepare](graph)


# Veličković et al.: L2 on every weight (the first-layer-only decay is Kipf & Welling's);
# they train until neither the validation loss nor the accuracy has improved for 100
# epochs (up to 100,000). Measured on Cora, 10 seeds, the same runs selected three ways
# (benchmarks/results/gat-cora-stopping-rules.json): best validation loss 0.8325, their
# rule 0.8301, best validation accuracy 0.8304; capped at 200 epochs 0.8295.
_GAT = dict(
    hidden=8,
    layers=2,
    dropout=0.6,
    lr=0.005,
    weight_decay=5e-4,
    decay_layers="all",
    epochs=1000,
    patience=100,
    monitor="val_loss",
)
_HEADS = Option(8, "attention heads of the hidden layers", bound=HYPERPARAMETERS["heads"])
_HOPS = Option(
    10, "propagation steps K of the parameter-free propagation", bound=HYPERPARAMETERS["hops"]
)
_ALPHA = Option(0.1, "teleport (initial residual) weight alpha", bound=HYPERPARAMETERS["alpha"])
_VALUE_DROPOUT = Option(
    0.0,
    "dropout of the projected rows summed by attention (the GAT authors' code: 0.6)",
    bound=Bound(float, low=0.0, high=1.0, high_open=True),
)
_JK = Option(
    "none",
    "jumping knowledge: every layer's output combined (concatenated or element-wise max) "
    "before a linear classifier",
    choices=("none", "cat", "max"),
)
_KIPF = dict(hidden=16, layers=2, dropout=0.5, lr=0.01, weight_decay=5e-4, decay_layers="first")


def _link_model(variational: bool) -> Callable:
    """The builder of the ``gae`` (``vgae``) entry: ``--encoder`` is a registered
    model with ``D`` (``2D``) outputs, wrapped by :func:`~sparsegcn.nn.gae.graph_autoencoder`."""

    def build(
        in_features: int,
        num_classes: int,
        *,
        hidden: int = 32,
        num_layers: int = 2,
        dropout_rate: float = 0.0,
        encoder: str = "gcn",
        decoder: str = "inner",
        recon: str = "full",
        negatives: str = "pairs",
        embedding_dim: int | None = None,
    ):
        if encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {list(ENCODERS)}, got {encoder!r}")
        dim = num_classes if embedding_dim is None else embedding_dim
        inner = create_model(
            encoder,
            in_features,
            2 * dim if variational else dim,
            hidden=hidden,
            layers=num_layers,
            dropout=dropout_rate,
        )
        return graph_autoencoder(
            inner, dim, variational=variational, decoder=decoder, recon=recon, negatives=negatives
        )

    return build


_gae, _vgae = _link_model(False), _link_model(True)

# Kipf & Welling's (V)GAE (their gae/train.py): GCN 32 -> 16, no dropout, no decay,
# Adam 0.01, 200 epochs, no early stop. The encoder's graph is its own registry entry's.
_KIPF_GAE = dict(
    hidden=32,
    layers=2,
    dropout=0.0,
    lr=0.01,
    weight_decay=0.0,
    decay_layers="none",
    epochs=200,
    patience=0,
)

_NODE_MODELS: dict[str, ModelSpec] = {
    "gcn": ModelSpec(
        gcn,
        "gcn_norm",
        sampled=False,
        defaults=_KIPF,
        options={"jk": _JK},
        residual=True,
        reference="Kipf & Welling, ICLR 2017",
    ),
    "sage": ModelSpec(
        sage,
        "unweighted",
        sampled=True,
        sampled_by_default=True,
        defaults=dict(_KIPF, fanouts="25,10"),
        options={
            "aggregator": Option(
                "mean", "neighbourhood aggregation", choices=("mean", "max", "sum")
            ),
            "jk": _JK,
        },
        residual=True,
        reference="Hamilton, Ying & Leskovec, NeurIPS 2017",
    ),
    "gat": ModelSpec(
        gat,
        "self_loops",
        sampled=True,
        defaults=_GAT,
        options={"heads": _HEADS, "value_dropout": _VALUE_DROPOUT},
        reference="Veličković et al., ICLR 2018",
    ),
    "gatv2": ModelSpec(
        gatv2,
        "self_loops",
        sampled=True,
        defaults=_GAT,
        options={"heads": _HEADS, "value_dropout": _VALUE_DROPOUT},
        reference="Brody, Alon & Yahav, ICLR 2022",
    ),
    "gin": ModelSpec(
        gin,
        "unweighted",
        sampled=True,
        defaults=dict(_KIPF, hidden=64, decay_layers="all"),
        reference="Xu, Hu, Leskovec & Jegelka, ICLR 2019",
    ),
    "sgc": ModelSpec(
        sgc,
        "gcn_norm",
        sampled=False,
        link_encoder=False,  # its apply reads precomputed features
        # Wu et al.: lr 0.2, no dropout, L2 tuned per dataset (5e-6 here on Cora;
        # PyG's example's 5e-3 gives 0.779).
        defaults=dict(layers=1, dropout=0.0, lr=0.2, weight_decay=5e-6, decay_layers="all"),
        options={"hops": _HOPS._replace(default=2)},
        precompute=True,
        reference="Wu et al., ICML 2019",
    ),
    "appnp": ModelSpec(
        appnp,
        "gcn_norm",
        sampled=False,
        # Gasteiger et al.: L2 5e-3 on the first layer's weights only.
        defaults=dict(_KIPF, hidden=64, weight_decay=5e-3, decay_layers="first"),
        options={"hops": _HOPS, "alpha": _ALPHA},
        reference="Gasteiger, Bojchevski & Günnemann, ICLR 2019",
    ),
    "gcnii": ModelSpec(
        gcnii,
        "gcn_norm",
        sampled=False,
        # Chen et al. on Cora decay the convolutions by 0.01 and the linear maps
        # by 5e-4; the trainer has one value. Measured (1 seed, Cora): 5e-4 on
        # all 0.842 test; 0.01 on the convolutions alone (decay_layers=first,
        # they lead gcnii's params) 0.832, the linear maps overfit; 0.01 on
        # all 0.313.
        defaults=dict(
            hidden=64,
            layers=64,
            dropout=0.6,
            lr=0.01,
            weight_decay=5e-4,
            decay_layers="all",
            # Deep and slow to converge: 1000 epochs, the best validation
            # epoch kept, no early stop (Chen et al.: up to 1500, patience 100).
            epochs=1000,
            patience=0,
        ),
        options={
            "alpha": _ALPHA,
            "lam": Option(
                0.5,
                "lambda of the identity mapping, beta_l = log(lambda / l + 1)",
                bound=HYPERPARAMETERS["lam"],
            ),
        },
        reference="Chen, Wei, Huang, Ding & Li, ICML 2020",
    ),
    "jk": ModelSpec(
        jk,
        "gcn_norm",
        sampled=False,
        defaults=dict(_KIPF, hidden=64, layers=3, decay_layers="all"),
        options={"jk": _JK._replace(default="cat", choices=("cat", "max"), keyword="mode")},
        reference="Xu et al., ICML 2018",
    ),
    "mlp": ModelSpec(
        mlp,
        "none",
        sampled=False,
        defaults=_KIPF,
        uses_graph=False,
        reference="the graph-free baseline",
    ),
    # On a homogeneous graph one relation (GraphSAGE-mean); on ogbn-mag and
    # synthetic:mag the hetero task builds the typed model (sparsegcn.nn.rgcn.rgcn).
    "rgcn": ModelSpec(
        rgcn_homogeneous,
        "unweighted",
        sampled=True,
        link_encoder=False,  # typed (heterogeneous) graphs
        # OGB's ogbn-mag baseline (examples/nodeproppred/mag/sampler.py).
        defaults=dict(
            hidden=64, layers=2, dropout=0.5, lr=0.01, weight_decay=0.0, decay_layers="none"
        ),
        options={
            "num_bases": Option(
                0,
                "R-GCN basis decomposition: relation weights combine this many shared "
                "bases (0: a full weight per relation)",
                bound=Bound(int, low=0),
            )
        },
        reference="Schlichtkrull et al., ESWC 2018",
    ),
}

ENCODERS = tuple(name for name, spec in _NODE_MODELS.items() if spec.link_encoder)
"""Registered models a link model may encode with (``--encoder``): every model
whose spec sets ``link_encoder``, so a new node model is one without an edit here."""

_LINK_OPTIONS = {
    "encoder": Option("gcn", "the registered model that encodes nodes", choices=ENCODERS),
    "decoder": Option("inner", "the score of a node pair from its embeddings", choices=DECODERS),
    "recon": Option(
        "full",
        "reconstruction loss: every N^2 pair weighted (Kipf & Welling) or the train edges "
        "against as many uniform negatives drawn on the device each epoch (PyG)",
        choices=RECONSTRUCTIONS,
    ),
    "negatives": Option(
        "pairs",
        "what --recon sampled scores the train edges against: uniform node pairs (PyG's "
        "negative_sampling) or each edge's source with a uniform target (DGL's Uniform)",
        choices=NEGATIVES,
    ),
    "embedding_dim": Option(16, "width of the node embeddings", bound=HYPERPARAMETERS["hidden"]),
}

MODELS: Mapping[str, ModelSpec] = MappingProxyType(
    {
        **_NODE_MODELS,
        "gae": ModelSpec(
            cast(Callable[..., Model], _gae),  # a LinkModel: Model's fields and more
            "gcn_norm",
            sampled=False,
            link_encoder=False,
            defaults=_KIPF_GAE,
            options=_LINK_OPTIONS,
            reference="Kipf & Welling, NIPS BDL workshop 2016 (link prediction)",
        ),
        "vgae": ModelSpec(
            cast(Callable[..., Model], _vgae),
            "gcn_norm",
            sampled=False,
            link_encoder=False,
            defaults=_KIPF_GAE,
            options=_LINK_OPTIONS,
            reference="Kipf & Welling, NIPS BDL workshop 2016 (link prediction)",
        ),
    }
)
"""Every model sparsegcn trains, by name."""


def get_model_spec(name: str) -> ModelSpec:
    """The :class:`ModelSpec` registered as ``name``.

    Raises:
      ValueError: an unknown name (the message lists the known ones).
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    return MODELS[name]


def create_model(
    name: str,
    in_features: int,
    num_classes: int,
    *,
    hidden: int | None,
    layers: int,
    dropout: float,
    residual: bool = False,
    precomputed: bool = False,
    **options,
) -> Model:
    """Builds the registered model ``name``.

    Args:
      name: a key of :data:`MODELS`.
      in_features, num_classes: the data's widths.
      hidden, layers, dropout: the shared hyperparameters (``hidden`` is
        ``None`` for a model without hidden layers that sets no default).
      residual: skip connections (models whose spec takes them).
      precomputed: ``apply`` reads precomputed features (models whose spec
        sets ``precompute``: SGC's ``Â^K X``).
      options: the model's own options (:attr:`ModelSpec.options`);
        missing ones take their defaults.

    Raises:
      ValueError: an unknown model, an option it does not take, a value out
        of range (``in_features`` and ``num_classes`` must be >= 1), or ``residual`` (``precomputed``) for a model without skip
        connections (precomputed features).
    """
    spec = get_model_spec(name)
    for label, value in (("in_features", in_features), ("num_classes", num_classes)):
        check_bound(label, value, HYPERPARAMETERS[label])
    for label, value in (("residual", residual), ("precomputed", precomputed)):
        check_flag(label, value)
    resolved = spec.resolve_options(name, options)
    kwargs = {spec.options[k].keyword or k: v for k, v in resolved.items()}
    if residual and not spec.residual:
        raise ValueError(f"residual=True: {name} has no skip connections")
    if spec.residual:
        kwargs["residual"] = residual
    if precomputed and not spec.precompute:
        raise ValueError(f"precomputed=True: {name} has no precomputed features")
    if spec.precompute:
        kwargs["precomputed"] = precomputed
    return spec.build(
        in_features, num_classes, hidden=hidden, num_layers=layers, dropout_rate=dropout, **kwargs
    )

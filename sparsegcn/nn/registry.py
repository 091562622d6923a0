"""The model registry: the one place that knows model names.

Each entry says how to build the model, which graph it reads (the host-side
preparation, computed once), how it trains by default, and its paper's
hyperparameters, which the CLI uses as defaults. The CLI choices,
``predict``, sweeps, checkpoints and the parallel trainers all read this
table; adding a model is one file with its builder plus one line here.

A builder is ``build(in_features, num_classes, **hyper) -> Model`` and
takes ``hidden``, ``num_layers`` and ``dropout_rate`` at least; it names any
other hyperparameter it reads from the CLI in :attr:`ModelSpec.options`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType

from sparsegcn import transforms
from sparsegcn.graph import Graph
from sparsegcn.nn.appnp import appnp
from sparsegcn.nn.gat import gat, gatv2
from sparsegcn.nn.gcn import gcn
from sparsegcn.nn.gcnii import gcnii
from sparsegcn.nn.gin import gin
from sparsegcn.nn.jk import jk
from sparsegcn.nn.mlp import mlp
from sparsegcn.nn.model import Model
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
        ``weight_decay``, ``fanouts``, ...).
      options: further ``Experiment`` fields passed to ``build``, as
        ``{field: builder keyword}``.
      uses_graph: ``False`` for graph-free baselines (no layout to choose).
      reference: the paper, for the README's table.
    """

    build: Callable[..., Model]
    prepare: str
    sampled: bool
    sampled_by_default: bool = False
    defaults: Mapping = dataclasses.field(default_factory=dict)
    options: Mapping = dataclasses.field(default_factory=dict)
    uses_graph: bool = True
    reference: str = ""

    def __post_init__(self):
        if self.prepare not in PREPARATIONS:
            raise ValueError(f"prepare must be one of {sorted(PREPARATIONS)}, got {self.prepare!r}")

    def prepare_graph(self, graph: Graph) -> Graph:
        """The graph this model's ``apply`` reads, computed once on the host."""
        return PREPARATIONS[self.prepare](graph)


# Veličković et al.: L2 on every weight; the first-layer-only decay is Kipf & Welling's.
_GAT = dict(
    hidden=8, heads=8, layers=2, dropout=0.6, lr=0.005, weight_decay=5e-4, decay_layers="all"
)
_KIPF = dict(hidden=16, layers=2, dropout=0.5, lr=0.01, weight_decay=5e-4, decay_layers="first")

MODELS: Mapping[str, ModelSpec] = MappingProxyType(
    {
        "gcn": ModelSpec(
            gcn,
            "gcn_norm",
            sampled=False,
            defaults=_KIPF,
            options={"residual": "residual"},
            reference="Kipf & Welling, ICLR 2017",
        ),
        "sage": ModelSpec(
            sage,
            "unweighted",
            sampled=True,
            sampled_by_default=True,
            defaults=dict(_KIPF, fanouts="25,10", aggregator="mean"),
            options={"residual": "residual", "aggregator": "aggregator"},
            reference="Hamilton, Ying & Leskovec, NeurIPS 2017",
        ),
        "gat": ModelSpec(
            gat,
            "self_loops",
            sampled=True,
            defaults=_GAT,
            options={"heads": "heads"},
            reference="Veličković et al., ICLR 2018",
        ),
        "gatv2": ModelSpec(
            gatv2,
            "self_loops",
            sampled=True,
            defaults=_GAT,
            options={"heads": "heads"},
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
            # Wu et al.: lr 0.2, no dropout, L2 tuned per dataset (5e-6 here on Cora;
            # PyG's example's 5e-3 gives 0.779).
            defaults=dict(
                layers=1, dropout=0.0, lr=0.2, weight_decay=5e-6, decay_layers="all", hops=2
            ),
            options={"hops": "hops"},
            reference="Wu et al., ICML 2019",
        ),
        "appnp": ModelSpec(
            appnp,
            "gcn_norm",
            sampled=False,
            # Gasteiger et al.: L2 5e-3 on the first layer's weights only.
            defaults=dict(
                _KIPF, hidden=64, weight_decay=5e-3, decay_layers="first", hops=10, alpha=0.1
            ),
            options={"hops": "hops", "alpha": "alpha"},
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
                alpha=0.1,
                lam=0.5,
            ),
            options={"alpha": "alpha", "lam": "lam"},
            reference="Chen, Wei, Huang, Ding & Li, ICML 2020",
        ),
        "jk": ModelSpec(
            jk,
            "gcn_norm",
            sampled=False,
            defaults=dict(_KIPF, hidden=64, layers=3, decay_layers="all", jk="cat"),
            options={"jk": "mode"},
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
    hidden: int,
    layers: int,
    dropout: float,
    **options,
) -> Model:
    """Builds the registered model ``name`` (see :attr:`ModelSpec.options` for ``options``)."""
    spec = get_model_spec(name)
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        raise ValueError(f"model {name!r} takes no option(s) {unknown}")
    kwargs = {spec.options[field]: value for field, value in options.items()}
    return spec.build(
        in_features, num_classes, hidden=hidden, num_layers=layers, dropout_rate=dropout, **kwargs
    )

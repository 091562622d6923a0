"""Benchmark graphs: uniform random and community-structured, and the form
each backend variant propagates on.

Both kinds are undirected (every pair stored in both directions, as GCN
uses them) and unweighted before normalization. The community graphs come
from the degree-corrected stochastic block model of
:mod:`sparsegcn.datasets.sbm`: power-law degrees and 80% of edges inside
one of the classes, with node ids shuffled, so any locality must be found
by reordering.
"""

from __future__ import annotations

import numpy as np

from sparsegcn.backends import pack_gcn_norm
from sparsegcn.graph import Graph
from sparsegcn.transforms import gcn_norm, sort_edges

GRAPH_KINDS = ("random", "sbm")
#: Propagation variants the benchmark compares: a backend name, and for the
#: default backend how the graph is stored: packed in sliced ELL (D^-1/2
#: folded; "segment"), packed in CSR ("segment-csr", what the sparsegcn
#: command trains on), or the plain edge list ("segment-unpacked").
#: "attention" is GAT's sparse path on the edge list: per-edge scores from
#: both endpoints, a softmax per receiver, then the weighted product; it is
#: set against "segment-unpacked", the gather + segment_sum of the same shape.
VARIANTS = ("dense", "segment", "segment-csr", "segment-unpacked", "bcoo", "attention")
#: Opt-in variants (``--backends``), for the performance options: rows
#: gathered in bfloat16 and summed in float32 on the ELL-packed graph, and
#: the edge list's ``segment_sum`` told that receivers are sorted.
#: "attention-csr" runs the attention path with the weighted product on the
#: packed CSR layout (run-time weights through its edge ids).
#: "segment-csr-xla" is "segment-csr" on XLA's CSR kernel instead of
#: sparsegcn's native one (``Segment(csr_kernel="xla")``), to set the two
#: side by side.
EXTRA_VARIANTS = ("segment-bf16", "segment-sorted", "attention-csr", "segment-csr-xla")
# Variants that propagate on a packed graph.
PACKED_VARIANTS = ("segment", "segment-bf16", "segment-csr", "attention-csr", "segment-csr-xla")
ATTENTION_VARIANTS = ("attention", "attention-csr")
ALL_VARIANTS = VARIANTS + EXTRA_VARIANTS
SBM_CLASSES = 40
SBM_HOMOPHILY = 0.8
SBM_DEGREE_EXPONENT = 2.5


def random_graph(num_nodes: int, avg_degree: float, *, seed: int = 0) -> Graph:
    """Uniform random undirected graph with about ``avg_degree * N`` directed edges.

    ``round(avg_degree * N / 2)`` pairs are drawn uniformly with replacement,
    self-pairs redrawn, and stored in both directions (so rare repeated
    pairs are kept as duplicate edges, which propagation adds up).
    """
    pairs = round(avg_degree * num_nodes / 2)
    rng = np.random.default_rng(seed)
    a = rng.integers(0, num_nodes, pairs)
    b = rng.integers(0, num_nodes - 1, pairs) if num_nodes > 1 else np.zeros(pairs, np.int64)
    b = b + (b >= a)  # uniform over the other nodes: no self-loops
    return sort_edges(Graph(np.concatenate([a, b]), np.concatenate([b, a]), None, num_nodes))


def community_graph(num_nodes: int, avg_degree: float, *, seed: int = 0) -> Graph:
    """Degree-corrected SBM graph with ``round(avg_degree * N / 2)`` distinct pairs.

    Raises:
      ValueError: the graph is too dense for the generator at this size.
    """
    from sparsegcn.datasets import sbm

    pairs_wanted = round(avg_degree * num_nodes / 2)
    classes = max(1, min(SBM_CLASSES, num_nodes // 50))
    model = sbm.block_model(
        num_nodes,
        pairs_wanted,
        classes,
        degree_exponent=SBM_DEGREE_EXPONENT,
        imbalance=4.0,
        seed=seed,
    )
    pairs = sbm.sample_pairs(model, pairs_wanted, SBM_HOMOPHILY, seed=seed)
    senders, receivers = sbm.split_keys(sbm.symmetric_keys(pairs, num_nodes), num_nodes)
    return Graph(senders, receivers, None, num_nodes, edges_sorted=True)


def make_graph(kind: str, num_nodes: int, avg_degree: float, *, seed: int = 0) -> Graph:
    """A benchmark graph of ``kind`` (``"random"`` or ``"sbm"``)."""
    if kind == "random":
        return random_graph(num_nodes, avg_degree, seed=seed)
    if kind == "sbm":
        return community_graph(num_nodes, avg_degree, seed=seed)
    raise ValueError(f"unknown graph kind {kind!r}; choose one of {GRAPH_KINDS}")


def propagation_graph(graph: Graph, variant: str) -> Graph:
    """The normalized ``Â`` of ``graph`` in the form ``variant`` runs on.

    ``"segment"`` and ``"segment-bf16"`` get
    :func:`~sparsegcn.backends.pack_gcn_norm` (what a user gets by
    packing), ``"segment-csr"`` and ``"segment-csr-xla"`` the same in the
    CSR format, every other
    variant ``sort_edges(gcn_norm(g))``. All of them are the same matrix.
    """
    if variant not in ALL_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {ALL_VARIANTS}")
    if variant in ("segment-csr", "segment-csr-xla", "attention-csr"):
        return pack_gcn_norm(graph, format="csr")
    if variant in PACKED_VARIANTS:
        return pack_gcn_norm(graph)
    return sort_edges(gcn_norm(graph))


def backend_of(variant: str):
    """The ``backend=`` argument for a variant."""
    from sparsegcn.backends import Dense, Segment

    if variant == "segment-unpacked":
        return Segment(use_layout=False)
    if variant == "segment-sorted":
        return Segment(use_layout=False, use_sorted=True)
    if variant == "segment-bf16":
        return Segment(storage_dtype="bfloat16")
    if variant == "dense":
        return Dense(max_bytes=2**62)  # the runner applies its own memory limit
    if variant == "segment-csr":
        return "segment"
    if variant == "segment-csr-xla":
        return Segment(csr_kernel="xla")
    if variant in ATTENTION_VARIANTS:
        return "attention"
    return variant


def add_graph_arguments(parser, *, nodes: int = 200_000, degree: float = 10.0, features: int = 64):
    """``--nodes``, ``--degree`` and ``--features``: the benchmark scripts' graph options."""
    parser.add_argument("--nodes", type=int, default=nodes, help=f"node count (default {nodes})")
    parser.add_argument(
        "--degree", type=float, default=degree, help=f"average degree (default {degree:g})"
    )
    parser.add_argument(
        "--features", type=int, default=features, help=f"feature width (default {features})"
    )

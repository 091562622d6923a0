"""A small heterogeneous graph with every edge case the R-GCN tests need."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import sparsegcn as sg
from sparsegcn.datasets.mag import MagSpec, generate_mag
from sparsegcn.hetero import HeteroGraph
from sparsegcn.sampling.typed import HeteroCSR
from sparsegcn.tasks.hetero import HeteroData

NUM_NODES = {"paper": 7, "author": 5, "topic": 3, "venue": 2}

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")
TOPIC = ("paper", "has_topic", "topic")
EMPTY = ("venue", "hosts", "paper")


def small_hetero() -> HeteroGraph:
    """Papers (featured) citing each other with a duplicate edge and a self-loop;
    authors writing papers; papers with topics; a relation with no edges;
    paper 6 receives nothing, author 4 writes nothing, venues are isolated."""
    return HeteroGraph(
        dict(NUM_NODES),
        {
            CITES: (np.array([1, 1, 2, 3, 0, 4, 5, 2]), np.array([0, 0, 0, 1, 2, 3, 3, 2])),
            WRITES: (np.array([0, 1, 1, 2, 3, 3, 0]), np.array([0, 0, 1, 2, 3, 4, 5])),
            TOPIC: (np.array([0, 1, 2, 2, 5]), np.array([0, 0, 1, 2, 1])),
            EMPTY: (np.zeros(0, np.int32), np.zeros(0, np.int32)),
        },
    )


def paper_features(seed: int = 0, width: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(NUM_NODES["paper"], width)).astype(np.float32)


__all__ = [
    "CITES",
    "EMPTY",
    "NUM_NODES",
    "TOPIC",
    "WRITES",
    "hetero_data",
    "paper_features",
    "sg",
    "small_hetero",
    "tiny_spec",
]


def tiny_spec(**changes) -> MagSpec:
    """A ``synthetic:mag`` spec small enough for a test (400 papers, 4 venues)."""
    spec = MagSpec(
        num_nodes={"paper": 400, "author": 300, "institution": 10, "field_of_study": 30},
        num_edges={
            ("author", "affiliated_with", "institution"): 300,
            ("author", "writes", "paper"): 1200,
            ("paper", "cites", "paper"): 800,
            ("paper", "has_topic", "field_of_study"): 800,
        },
        num_classes=4,
        num_features=8,
        homophily=0.9,
        feature_signal=0.0,
        split_sizes={"train": 200, "valid": 100, "test": 100},
    )
    return MagSpec(**{**spec.__dict__, **changes})


def hetero_data(spec: MagSpec, seed: int = 0) -> HeteroData:
    """``generate_mag(spec)`` prepared as the hetero task prepares a dataset."""
    data = generate_mag(spec, seed=seed)
    graph = data.graph.add_reverse_relations(merge_same_type=True)
    features = {t: jnp.asarray(x) for t, x in data.features.items()}
    return HeteroData(
        data, graph, HeteroCSR.from_graph(graph), features, jnp.asarray(data.labels, jnp.int32)
    )

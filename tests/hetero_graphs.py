"""A small heterogeneous graph with every edge case the R-GCN tests need."""

from __future__ import annotations

import jax
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


def dense_rgcn(params, graph, x, target):
    """The R-GCN model on dense matrices: per relation ``D_r^{-1} A_r h_src W_r``, summed,
    plus the root weight, ReLU between layers; every type at every layer."""
    h = {**{t: jnp.asarray(v) for t, v in x.items()}, **params["embeddings"]}
    layers = params["layers"]
    for i_layer, layer in enumerate(layers):
        w_rel = (
            jnp.einsum("rb,bio->rio", layer["coeffs"], layer["bases"])
            if "bases" in layer
            else layer["w_rel"]
        )
        out = {}
        for t in graph.node_types:
            y = h[t] @ layer["root"][t]["w"] + layer["root"][t]["b"][None, :]
            for r, key in enumerate(graph.edge_types):
                if key[2] == t:
                    a = graph.to_dense(key)
                    deg = jnp.maximum(a.sum(axis=1, keepdims=True), 1.0)
                    y = y + (a / deg) @ h[key[0]] @ w_rel[r]
            out[t] = y if i_layer == len(layers) - 1 else jax.nn.relu(y)
        h = out
    return h[target]


def random_hetero(seed: int = 0) -> HeteroGraph:
    """Papers, authors and topics with random relations (no duplicate edges), reverses
    added: every node has several in-neighbours per relation, so samples repeat nodes."""
    rng = np.random.default_rng(seed)
    counts = {"paper": 30, "author": 20, "topic": 6}

    def edges(src, dst, m):
        pairs = np.unique(rng.integers(0, counts[src], m) * 1000 + rng.integers(0, counts[dst], m))
        return pairs // 1000, pairs % 1000

    graph = HeteroGraph(
        counts,
        {
            CITES: edges("paper", "paper", 90),
            WRITES: edges("author", "paper", 80),
            TOPIC: edges("paper", "topic", 40),
        },
    )
    return graph.add_reverse_relations()


__all__ = [
    "CITES",
    "EMPTY",
    "NUM_NODES",
    "TOPIC",
    "WRITES",
    "dense_rgcn",
    "hetero_data",
    "paper_features",
    "random_hetero",
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

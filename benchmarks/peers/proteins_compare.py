"""The ``proteins`` part of ``compare.py``: a full-batch GraphSAGE training step on ``synthetic:proteins``.

Every side trains the model ``benchmarks/proteins_epoch.py`` trains (OGB's
ogbn-proteins GraphSAGE baseline by default: 3 layers, hidden 256, no
dropout), one step a call: forward over every node, the multi-label loss
(per node the mean binary cross-entropy of its 112 tasks, averaged over the
training nodes), backward, Adam (0.01). A full-batch epoch is one such step;
``proteins_epoch.py``'s ``epoch_ms_median`` adds the ROC-AUC scoring, which
is left out here. Node features are the mean of each node's incident edges'
8 features (:func:`sparsegcn.experiment.build.use_edge_features`, OGB's
baselines), computed once by ours and given to the peers.

- **ours**: :func:`sparsegcn.train.train_step` with
  :data:`~sparsegcn.train.MULTILABEL` on the graph ``sparsegcn train``
  prepares for ``sage`` (:func:`~sparsegcn.experiment.build.node_data`),
  compiled apart.
- **PyG** (``pyg_peer.py`` case ``sage_full_step``): ``SAGEConv(aggr="mean")``
  on ``adj_t``, a ``torch.sparse`` CSR matrix (``torch.sparse.mm`` with a
  mean reduce; the edge-list path would hold a ``[E, F]`` message tensor:
  79 M x 256 floats, 81 GB).
- **DGL** (``dgl_peer.py`` case ``sage_full_step``): ``SAGEConv("mean")``
  on a ``DGLGraph`` (``update_all``).

Each peer is timed against ours in its own interleaved case (ours, peer,
ours, ...: :func:`compare.interleaved_rows`), and stopped before the next
starts, so only two processes hold a copy of the 79 M-edge graph at a time.
Rows carry ``peak_rss_gb`` (each process's peak resident set; ours includes
generating the dataset, released before the steps; ``rss_gb`` is ours after
them) and, on ours, ``ours_speedup`` (the peer's median
over ours, same rounds). A peer that runs out of memory, or fails otherwise,
is a ``missing: <error>`` row.
"""

from __future__ import annotations

import time

import jax
import numpy as np

PEER_LABELS = {
    "pyg": "PyG SAGEConv(mean) on torch.sparse CSR adj_t",
    "dgl": "DGL SAGEConv(mean), update_all",
}
OURS_LABEL = "sparsegcn GraphSAGE (train_step, packed CSR)"


def proteins_setup(scale: float, *, hidden: int, layers: int, lr: float = 0.01):
    """``(dataset, data, step, state)``: ``synthetic:proteins`` with edge-mean node
    features, its ``NodeData`` on the device, and our jittable training step."""
    from sparsegcn.datasets.proteins import generate_proteins
    from sparsegcn.experiment.build import node_data, use_edge_features
    from sparsegcn.nn.registry import create_model
    from sparsegcn.train import MULTILABEL, TrainConfig, init_state, make_optimizer, train_step

    dataset = use_edge_features(generate_proteins(scale, seed=0))
    data = jax.device_put(node_data(dataset, "sage", normalize_features="none"))
    model = create_model(
        "sage", dataset.num_features, dataset.num_classes, hidden=hidden, layers=layers, dropout=0.0
    )
    tx = make_optimizer(TrainConfig(learning_rate=lr, weight_decay=0.0, decay_layers="none"))
    state = init_state(model, tx, jax.random.key(0))

    def step(state, data):
        return train_step(model, tx, state, data, MULTILABEL)

    return dataset, data, step, state, model


def proteins_npz(folder: str, stem: str, dataset) -> str:
    """The raw graph (both directions stored), node features, labels and training ids."""
    from peer_process import write_npz

    return write_npz(
        folder,
        stem,
        senders=np.asarray(dataset.graph.senders, np.int32),
        receivers=np.asarray(dataset.graph.receivers, np.int32),
        num_nodes=np.int64(dataset.num_nodes),
        features=np.asarray(dataset.features, np.float32),
        labels=np.asarray(dataset.labels, np.int8),
        train=np.asarray(dataset.split["train"], np.int64),
    )


def proteins_rows(
    external,
    rounds,
    *,
    scale: float = 1.0,
    hidden: int = 256,
    layers: int = 3,
    lr: float = 0.01,
    peers: tuple[str, ...] = ("pyg", "dgl"),
) -> list[dict]:
    """Ours against each peer in turn, one interleaved case per peer."""
    from compare import interleaved_rows
    from hetero_compare import release_freed_memory, rss_gb
    from peer_process import PeerProcess

    tick = time.perf_counter()
    dataset, data, step, state, _ = proteins_setup(scale, hidden=hidden, layers=layers, lr=lr)
    load_s = time.perf_counter() - tick
    spec = {
        "data": proteins_npz(external.folder, "proteins", dataset),
        "hidden": hidden,
        "num_layers": layers,
        "lr": lr,
    }
    release_freed_memory()
    name = (
        f"sage full-batch step synthetic:proteins x{scale:g} (N={dataset.num_nodes}, "
        f"{dataset.graph.num_edges} stored edges), hidden {hidden} x {layers}"
    )
    rows = []
    for peer_name in peers:
        pair = interleaved_rows(
            f"{name} | vs {peer_name}",
            (OURS_LABEL, step, (state, data)),
            [(PEER_LABELS[peer_name], peer_name, "sage_full_step", spec)],
            external,
            rounds,
        )
        ours, theirs = pair
        current, peak = rss_gb()
        ours.update(peak_rss_gb=peak, rss_gb=current, load_s=load_s)
        ours["note"] += f"; RSS {current:.2f} GB after the steps"
        ours["layout"] = data.graph.layout_name
        if theirs["median_ms"] is not None:
            ours["ours_speedup"] = theirs["median_ms"] / ours["median_ms"]
            ours["note"] += f"; {ours['ours_speedup']:.2f}x {peer_name}"
        for row in pair:
            if row.get("peak_rss_gb") is not None:
                row["note"] += f"; peak RSS {row['peak_rss_gb']:.2f} GB"
        rows += pair
        peer = external.peers.get(peer_name)
        if isinstance(peer, PeerProcess):
            peer.close()  # its graph copy goes before the next peer builds one
    return rows


__all__ = ["OURS_LABEL", "PEER_LABELS", "proteins_npz", "proteins_rows", "proteins_setup"]

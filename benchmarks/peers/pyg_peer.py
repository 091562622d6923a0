"""PyG's graph-classification side of ``compare.py``: run under a Python with torch_geometric.

    $PYG_PYTHON benchmarks/peers/pyg_peer.py   # speaks peer_protocol

Made for ``torch_geometric==2.8.1`` with ``torch==2.13.0`` (CPU), in an
environment of its own (see benchmarks/README.md): no ``pyg-lib`` or
``torch-sparse``, so PyG takes its pure-torch paths. On the CPU with all
cores. Cases (the data is a ``graph_data`` ``.npz``):

- ``gin_epoch``: one training epoch a call, as PyG's own GIN examples run
  one: ``DataLoader(list of Data, batch_size, shuffle=True)`` (its
  collation, ``Batch.from_data_list``, is timed: it is PyG's real cost),
  :class:`gin_torch.GIN` with ``GINConv`` (GIN-0) and ``global_add_pool``,
  cross-entropy, Adam. ``stats``: batches and graphs of the last epoch.
- ``gin_forward``: the class scores of every graph as one batch, in
  training mode (batch statistics) with the weights of ``spec["weights"]``
  and no dropout: the tests compare it with ours.
- ``gae_step``: one GAE training step, as PyG's ``examples/autoencoder.py``
  runs one: ``GCNConv(F, 32, cached=True)`` → ReLU → ``GCNConv(32, 16,
  cached=True)`` in :class:`~torch_geometric.nn.GAE`, ``recon_loss(z,
  pos)`` (which draws ``negative_sampling(pos, N)``, one negative a
  positive, inside the call), backward, Adam. The ``.npz`` holds
  ``features [N, F]``, ``edge_index [2, E]`` (the message edges, both
  directions) and ``pos [2, P]`` (the train positives, one direction);
  ``stats["loss"]`` is the last call's loss.
- ``sage_full_step``: one full-batch GraphSAGE training step on one big
  graph (``proteins_compare``'s ``.npz``): :class:`sage_torch.SAGE` with
  ``SAGEConv(aggr="mean")`` on ``adj_t``, a ``torch.sparse`` CSR matrix
  (row ``i`` lists ``i``'s in-neighbours; PyG's ``spmm`` runs
  ``torch.sparse.mm(adj_t, x, "mean")``: no per-edge message tensor, which
  at 79 M edges and width 256 would not fit), ours' multi-label loss, Adam.
- ``sage_full_forward``: the same model's output for every node with the
  weights of ``spec["weights"]`` (``hetero_data.sage_weights``), no dropout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer_protocol import serve


def versions() -> dict:
    import torch
    import torch_geometric

    torch.set_num_threads(os.cpu_count() or 1)
    return {
        "torch_geometric": torch_geometric.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
    }


def _data_list(data):
    import torch
    from graph_data import graph_list
    from torch_geometric.data import Data

    return [
        Data(
            x=torch.from_numpy(x),
            edge_index=torch.from_numpy(np.stack([senders, receivers])),
            y=torch.tensor([label]),
        )
        for senders, receivers, x, label in graph_list(data)
    ]


def _model(spec: dict, data):
    import torch
    from gin_torch import GIN
    from torch_geometric.nn import GINConv, global_add_pool

    torch.manual_seed(0)
    return GIN(
        lambda mlp: GINConv(mlp, eps=0.0, train_eps=False),
        lambda conv, batch, h: conv(h, batch.edge_index),
        lambda batch, h: global_add_pool(h, batch.batch),
        int(data["features"].shape[1]),
        spec["hidden"],
        int(data["num_classes"]),
        spec["num_layers"],
        spec["dropout"],
    )


def _set_threads(spec: dict) -> None:
    """``spec["torch_threads"]``, when given, sets torch's threads for the rest of the peer's life."""
    import torch

    if spec.get("torch_threads"):
        torch.set_num_threads(int(spec["torch_threads"]))


def gin_epoch(spec: dict):
    import torch
    from gin_torch import train_epoch
    from torch_geometric.loader import DataLoader

    _set_threads(spec)
    data = np.load(spec["data"])
    graphs = _data_list(data)
    loader = DataLoader(
        [graphs[i] for i in data["train"]], batch_size=spec["batch_size"], shuffle=True
    )
    model = _model(spec, data)
    optimizer = torch.optim.Adam(model.parameters(), lr=spec["lr"])
    stats: dict = {"torch_threads": torch.get_num_threads()}

    def run():
        return train_epoch(model, optimizer, loader, lambda b: (b, b.x, b.y), stats)

    return run, stats


def gin_forward(spec: dict):
    from torch_geometric.data import Batch

    data = np.load(spec["data"])
    batch = Batch.from_data_list(_data_list(data))
    model = _model({**spec, "dropout": 0.0}, data)
    model.load_flat(np.load(spec["weights"]))
    model.train()

    def run():
        return model(batch, batch.x).detach().numpy()

    return run, {}


def gae_step(spec: dict):
    import torch
    from torch_geometric.nn import GAE, GCNConv

    _set_threads(spec)
    data = np.load(spec["data"])
    x = torch.from_numpy(data["features"])
    edge_index = torch.from_numpy(data["edge_index"].astype(np.int64))
    pos = torch.from_numpy(data["pos"].astype(np.int64))
    hidden, out = int(spec["hidden"]), int(spec["embedding_dim"])

    class GCNEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GCNConv(x.shape[1], hidden, cached=True)
            self.conv2 = GCNConv(hidden, out, cached=True)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    model = GAE(GCNEncoder())
    optimizer = torch.optim.Adam(model.parameters(), lr=spec["lr"])
    stats: dict = {"torch_threads": torch.get_num_threads()}

    def run():
        model.train()
        optimizer.zero_grad()
        z = model.encode(x, edge_index)
        loss = model.recon_loss(z, pos)
        loss.backward()
        optimizer.step()
        stats["loss"] = float(loss)
        return loss.detach().numpy()

    return run, stats


def _sage_full(spec: dict):
    """The full-batch GraphSAGE, its ``adj_t`` and the data of a proteins ``.npz``."""
    import torch
    from sage_torch import SAGE, read_multilabel
    from torch_geometric.nn import SAGEConv

    _set_threads(spec)
    data = np.load(spec["data"])
    n = int(data["num_nodes"])
    receivers = np.asarray(data["receivers"])
    order = np.argsort(receivers, kind="stable")
    crow = np.concatenate([[0], np.cumsum(np.bincount(receivers, minlength=n))])
    adj_t = torch.sparse_csr_tensor(
        torch.from_numpy(crow.astype(np.int64)),
        torch.from_numpy(np.asarray(data["senders"])[order].astype(np.int64)),
        torch.ones(receivers.shape[0]),
        size=(n, n),
    )
    del order
    x, labels, train = read_multilabel(data)
    torch.manual_seed(0)
    model = SAGE(
        lambda a, b: SAGEConv(a, b, aggr="mean"),
        lambda conv, adj, h: conv(h, adj),
        x.shape[1],
        int(spec["hidden"]),
        labels.shape[1],
        int(spec["num_layers"]),
        float(spec.get("dropout", 0.0)),
    )
    return model, adj_t, x, labels, train


def sage_full_step(spec: dict):
    import torch
    from sage_torch import full_batch_step

    model, adj_t, x, labels, train = _sage_full(spec)
    run = full_batch_step(model, adj_t, x, labels, train, float(spec["lr"]))
    return run, {"torch_threads": torch.get_num_threads(), "edges": int(adj_t.values().shape[0])}


def sage_full_forward(spec: dict):
    import torch

    model, adj_t, x, _, _ = _sage_full({**spec, "dropout": 0.0})
    model.load_flat(
        np.load(spec["weights"]), lambda conv: (conv.lin_r, conv.lin_l, conv.lin_l.bias)
    )
    model.eval()

    def run():
        with torch.no_grad():
            return model(adj_t, x).numpy()

    return run, {}


if __name__ == "__main__":
    raise SystemExit(
        serve(
            {
                "gin_epoch": gin_epoch,
                "gin_forward": gin_forward,
                "gae_step": gae_step,
                "sage_full_step": sage_full_step,
                "sage_full_forward": sage_full_forward,
            },
            versions,
        )
    )

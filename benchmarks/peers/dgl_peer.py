"""DGL's side of ``compare.py``: run under a Python that has DGL and torch.

    $DGL_PYTHON benchmarks/peers/dgl_peer.py   # speaks peer_protocol

Made for ``dgl==2.1.0`` with ``torch==2.2.1`` (its own virtual environment;
see benchmarks/README.md), on the CPU with all cores. Cases:

- ``propagate-copy``: ``Â x`` as ``D^-1/2 copy_u_sum(D^-1/2 x)`` on ``Â``'s
  structure (self-loops included; the scalings are computed once, outside
  the timed call, as ours are).
- ``propagate-weighted``: ``u_mul_e_sum`` with ``Â``'s edge weights.
- ``gcn_step``: Kipf & Welling's GCN with ``GraphConv(norm="both")`` on the
  graph plus self-loops, dropout before each layer, Adam with L2 weight
  decay on the first layer (as PyG's example, which the PyG row runs).
- ``gat_step``: Veličković et al.'s GAT with ``GATConv`` (8 heads of 8,
  feature and attention dropout 0.6, ELU, one output head), Adam with L2
  weight decay on every parameter.
- ``sage_batch``: one mini-batch of GraphSAGE training: ``NeighborSampler``
  draws the blocks (host side, as DGL does), features and labels are
  gathered, 3 ``SAGEConv(mean)`` layers, dropout, Adam. ``stats`` collects
  the distinct input rows and block edges of each batch.
- ``sage_epoch``: the same model and loader, one whole epoch a call (the
  protocol's untimed first call trains one batch).
- ``gin_epoch``: one epoch of graph classification a call (the data is a
  ``graph_data`` ``.npz``): ``GraphDataLoader`` over ``(graph, label)``
  pairs, shuffled (its collation, ``dgl.batch``, is timed: it is DGL's real
  cost), :class:`gin_torch.GIN` with ``GINConv(apply_func=MLP, "sum")``
  (GIN-0) and ``SumPooling``, cross-entropy, Adam. ``stats``: batches and
  graphs of the last epoch.
- ``gin_forward``: every graph's class scores as one ``dgl.batch``, in
  training mode with no dropout and the weights of ``spec["weights"]``.
- ``sage_full_step``: one full-batch GraphSAGE training step on one big
  graph (``proteins_compare``'s ``.npz``): :class:`sage_torch.SAGE` with
  ``SAGEConv(aggregator_type="mean")`` (``update_all`` with a mean; it
  projects first when that narrows the rows), ours' multi-label loss, Adam.
- ``sage_full_forward``: the same model's output for every node with the
  weights of ``spec["weights"]`` (``hetero_data.sage_weights``), no dropout.
- ``rgcn_batches``, ``rgcn_forward``: the sampled R-GCN of ``rgcn_dgl.py``
  on a typed graph (``compare.py --only mag``).
- ``link_batches``: sampled link prediction training batches of
  ``link_dgl.py`` (``as_edge_prediction_sampler`` over ``NeighborSampler``,
  GraphSAGE, dot-product scores; ``benchmarks/link_sampled_epoch.py``).

Propagation runs under ``torch.no_grad()``; every training call zeroes the
gradients first, so nothing accumulates from call to call.
"""

from __future__ import annotations

import importlib
import itertools
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DGLBACKEND", "pytorch")

from peer_protocol import serve


def versions() -> dict:
    import dgl
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    return {
        "dgl": dgl.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
    }


def _graph(data, self_loops: bool = False):
    import dgl
    import torch

    n = int(data["num_nodes"])
    g = dgl.graph(
        (
            torch.from_numpy(data["senders"].astype(np.int64)),
            torch.from_numpy(data["receivers"].astype(np.int64)),
        ),
        num_nodes=n,
    )
    return dgl.add_self_loop(g) if self_loops else g


def propagate_copy(spec: dict):
    import dgl
    import torch

    data = np.load(spec["data"])
    g = _graph(data)
    x = torch.from_numpy(np.asarray(data["x"], np.float32))
    scale = g.in_degrees().float().clamp(min=1).pow(-0.5)[:, None]

    def run():
        with torch.no_grad():
            return dgl.ops.copy_u_sum(g, x * scale) * scale

    return run, {}


def propagate_weighted(spec: dict):
    import dgl
    import torch

    data = np.load(spec["data"])
    g = _graph(data)
    x = torch.from_numpy(np.asarray(data["x"], np.float32))
    w = torch.from_numpy(np.asarray(data["weights"], np.float32))[:, None]

    def run():
        with torch.no_grad():
            return dgl.ops.u_mul_e_sum(g, x, w)

    return run, {}


def _train(spec: dict, model, graph, param_groups):
    import torch
    import torch.nn.functional as F

    data = np.load(spec["data"])
    x = torch.from_numpy(np.asarray(data["features"], np.float32))
    y = torch.from_numpy(data["labels"].astype(np.int64))
    mask = torch.from_numpy(data["train_mask"].astype(bool))
    optimizer = torch.optim.Adam(param_groups, lr=spec["lr"])

    def run():
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(graph, x)[mask], y[mask])
        loss.backward()
        optimizer.step()
        return loss.detach()

    return run, {"params": int(sum(p.numel() for p in model.parameters()))}


def gcn_step(spec: dict):
    import torch
    import torch.nn.functional as F
    from dgl.nn import GraphConv

    torch.manual_seed(0)
    data = np.load(spec["data"])
    sizes = (
        [int(data["features"].shape[1])]
        + [spec["hidden"]] * (spec["num_layers"] - 1)
        + [spec["num_classes"]]
    )
    rate = spec["dropout"]

    class GCN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(
                GraphConv(a, b, norm="both") for a, b in itertools.pairwise(sizes)
            )

        def forward(self, g, x):
            for i, conv in enumerate(self.convs):
                x = conv(g, F.dropout(x, rate, self.training))
                if i < len(self.convs) - 1:
                    x = x.relu()
            return x

    model = GCN()
    groups = [
        dict(params=model.convs[0].parameters(), weight_decay=spec["weight_decay"]),
        dict(params=[p for c in model.convs[1:] for p in c.parameters()], weight_decay=0.0),
    ]
    return _train(spec, model, _graph(data, self_loops=True), groups)


def gat_step(spec: dict):
    import torch
    import torch.nn.functional as F
    from dgl.nn import GATConv

    torch.manual_seed(0)
    data = np.load(spec["data"])
    hidden, heads, rate = spec["hidden"], spec["heads"], spec["dropout"]
    features = int(data["features"].shape[1])

    class GAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GATConv(features, hidden, heads, feat_drop=rate, attn_drop=rate)
            self.conv2 = GATConv(
                hidden * heads, spec["num_classes"], 1, feat_drop=rate, attn_drop=rate
            )

        def forward(self, g, x):
            x = F.elu(self.conv1(g, x).flatten(1))
            return self.conv2(g, x).mean(1)

    model = GAT()
    groups = [dict(params=model.parameters(), weight_decay=spec["weight_decay"])]
    return _train(spec, model, _graph(data, self_loops=True), groups)


def _sage_setup(spec: dict):
    """The GraphSAGE model, optimizer and loader both ``sage_*`` cases use,
    and ``train(input_nodes, seeds, blocks)``, one optimizer step."""
    import dgl
    import torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    torch.manual_seed(0)
    data = np.load(spec["data"])
    g = _graph(data)
    features = torch.from_numpy(np.asarray(data["features"], np.float32))
    labels = torch.from_numpy(data["labels"].astype(np.int64))
    train = torch.from_numpy(data["train_nodes"].astype(np.int64))
    hidden, rate = spec["hidden"], spec["dropout"]
    # DGL's fanouts run from the input layer to the seeds; ours from the seeds
    # outwards: reversed, the seeds' hop draws the same number as ours.
    sampler = dgl.dataloading.NeighborSampler(list(reversed(spec["fanouts"])))
    loader = dgl.dataloading.DataLoader(
        g, train, sampler, batch_size=spec["batch_size"], shuffle=True, drop_last=False
    )
    sizes = [features.shape[1]] + [hidden] * (len(spec["fanouts"]) - 1) + [spec["num_classes"]]

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(
                SAGEConv(a, b, "mean") for a, b in itertools.pairwise(sizes)
            )

        def forward(self, blocks, x):
            for i, (conv, block) in enumerate(zip(self.convs, blocks, strict=True)):
                x = conv(block, x)
                if i < len(self.convs) - 1:
                    x = F.dropout(x.relu(), rate, self.training)
            return x

    model = SAGE()
    optimizer = torch.optim.Adam(model.parameters(), lr=spec["lr"])
    stats = {"input_rows": [], "block_edges": [], "seeds": []}

    def train_step(input_nodes, seeds, blocks):
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(blocks, features[input_nodes]), labels[seeds])
        loss.backward()
        optimizer.step()
        stats["input_rows"].append(int(input_nodes.numel()))
        stats["block_edges"].append(int(sum(b.num_edges() for b in blocks)))
        stats["seeds"].append(int(seeds.numel()))
        return loss.detach()

    return loader, train_step, stats


def sage_batch(spec: dict):
    loader, train_step, stats = _sage_setup(spec)
    batches = iter(loader)

    def run():
        nonlocal batches
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            batch = next(batches)
        return train_step(*batch)

    return run, stats


def sage_epoch(spec: dict):
    """One full pass of the loader a call (every batch of the epoch, sampling
    included); the first call, the protocol's untimed one, warms up on one batch."""
    loader, train_step, stats = _sage_setup(spec)
    warmed = False

    def run():
        nonlocal warmed
        if not warmed:
            warmed = True
            return train_step(*next(iter(loader)))
        stats["batches"] = 0
        for batch in loader:
            loss = train_step(*batch)
            stats["batches"] += 1
        return loss

    return run, stats


def _dgl_graphs(data) -> list:
    """Each graph of a ``graph_data`` ``.npz`` as ``(DGLGraph with ndata["x"], label)``."""
    import dgl
    import torch
    from graph_data import graph_list

    out = []
    for senders, receivers, x, label in graph_list(data):
        g = dgl.graph(
            (torch.from_numpy(senders), torch.from_numpy(receivers)), num_nodes=x.shape[0]
        )
        g.ndata["x"] = torch.from_numpy(x)
        out.append((g, torch.tensor(label)))
    return out


def _gin(spec: dict, data):
    import torch
    from dgl.nn import GINConv, SumPooling
    from gin_torch import GIN

    torch.manual_seed(0)
    pool = SumPooling()
    return GIN(
        lambda mlp: GINConv(mlp, "sum", init_eps=0, learn_eps=False),
        lambda conv, g, h: conv(g, h),
        pool,
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
    from dgl.dataloading import GraphDataLoader
    from gin_torch import train_epoch

    _set_threads(spec)
    data = np.load(spec["data"])
    graphs = _dgl_graphs(data)
    loader = GraphDataLoader(
        [graphs[i] for i in data["train"]], batch_size=spec["batch_size"], shuffle=True
    )
    model = _gin(spec, data)
    optimizer = torch.optim.Adam(model.parameters(), lr=spec["lr"])
    stats: dict = {"torch_threads": torch.get_num_threads()}

    def run():
        return train_epoch(model, optimizer, loader, lambda b: (b[0], b[0].ndata["x"], b[1]), stats)

    return run, stats


def gin_forward(spec: dict):
    import dgl

    data = np.load(spec["data"])
    batch = dgl.batch([g for g, _ in _dgl_graphs(data)])
    model = _gin({**spec, "dropout": 0.0}, data)
    model.load_flat(np.load(spec["weights"]))
    model.train()

    def run():
        return model(batch, batch.ndata["x"]).detach().numpy()

    return run, {}


def _sage_full(spec: dict):
    """The full-batch GraphSAGE, its graph and the data of a proteins ``.npz``."""
    import torch
    from dgl.nn import SAGEConv
    from sage_torch import SAGE, read_multilabel

    _set_threads(spec)
    data = np.load(spec["data"])
    g = _graph(data)
    x, labels, train = read_multilabel(data)
    torch.manual_seed(0)
    model = SAGE(
        lambda a, b: SAGEConv(a, b, "mean"),
        lambda conv, graph, h: conv(graph, h),
        x.shape[1],
        int(spec["hidden"]),
        labels.shape[1],
        int(spec["num_layers"]),
        float(spec.get("dropout", 0.0)),
    )
    return model, g, x, labels, train


def sage_full_step(spec: dict):
    import torch
    from sage_torch import full_batch_step

    model, g, x, labels, train = _sage_full(spec)
    run = full_batch_step(model, g, x, labels, train, float(spec["lr"]))
    return run, {"torch_threads": torch.get_num_threads(), "edges": int(g.num_edges())}


def sage_full_forward(spec: dict):
    import torch

    model, g, x, _, _ = _sage_full({**spec, "dropout": 0.0})
    model.load_flat(
        np.load(spec["weights"]), lambda conv: (conv.fc_self, conv.fc_neigh, conv.fc_self.bias)
    )
    model.eval()

    def run():
        with torch.no_grad():
            return model(g, x).numpy()

    return run, {}


def _imported(module: str, name: str):
    """A case builder of ``module``, imported on first use (it imports torch and DGL)."""

    def build(spec: dict):
        return getattr(importlib.import_module(module), name)(spec)

    return build


if __name__ == "__main__":
    raise SystemExit(
        serve(
            {
                "propagate-copy": propagate_copy,
                "propagate-weighted": propagate_weighted,
                "gcn_step": gcn_step,
                "gat_step": gat_step,
                "sage_batch": sage_batch,
                "sage_epoch": sage_epoch,
                "gin_epoch": gin_epoch,
                "gin_forward": gin_forward,
                "sage_full_step": sage_full_step,
                "sage_full_forward": sage_full_forward,
                "rgcn_batches": _imported("rgcn_dgl", "rgcn_batches"),
                "rgcn_forward": _imported("rgcn_dgl", "rgcn_forward"),
                "link_batches": _imported("link_dgl", "link_batches"),
            },
            versions,
        )
    )

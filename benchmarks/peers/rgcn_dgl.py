"""DGL's R-GCN for ``compare.py --only mag``: cases of ``dgl_peer.py``, under DGL's Python.

The model computes ours (``sparsegcn.nn.rgcn.rgcn``, OGB's ogbn-mag
baseline): for every node ``i`` of type ``t`` in a layer,

.. math::

    h'_i = W_{\\mathrm{root}, t}^\\top h_i + b_t
         + \\sum_{r:\\ \\mathrm{dst}(r) = t} W_r^\\top \\frac{1}{|N_r(i)|}
           \\sum_{j \\in N_r(i)} h_j

as DGL writes it: ``HeteroGraphConv`` of one ``GraphConv(norm="right",
bias=False)`` per relation (``W_r`` times the mean over the relation's
in-neighbours; zero without any), summed per target type, plus one
``nn.Linear`` per node type (the root weight and bias). This is how DGL's
own ogbn-mag example (``examples/pytorch/ogb/ogbn-mag/hetero_rgcn.py``)
builds its ``RelGraphConvLayer``; the module ``dgl.nn.RelGraphConv`` runs on
the homogeneous view with one self-loop weight shared across types, which is
not OGB's baseline, and its sampler cannot draw fanouts per relation. ReLU and dropout follow every hidden layer; featureless node types
get a learnable ``[N_t, F]`` table (``nn.Parameter``, Glorot), updated
densely by ``torch.optim.Adam`` as ours by optax's Adam.

Batches come from ``dgl.dataloading.NeighborSampler`` over the typed graph
(fanouts per relation, seeds' hop first, as ours) and DGL's ``DataLoader``
over the training papers (shuffled); each block's input rows are gathered
from the features or embedding tables. Cases (the data is a
``hetero_data`` ``.npz``):

- ``rgcn_batches``: ``spec["batches"]`` training batches a call (sampling,
  gathering, forward, cross-entropy, backward, Adam), drawn from the
  loader in turn. ``stats``: input rows and block edges of each batch.
- ``rgcn_forward``: the target type's logits for every node of it, on
  blocks of ``MultiLayerFullNeighborSampler`` (every neighbour), with the
  weights of ``spec["weights"]`` (``hetero_data.rgcn_weights``), no dropout.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
import torch.nn.functional as F
from hetero_data import load_hetero
from torch import nn


class RGCN(nn.Module):
    """R-GCN over DGL blocks.

    Args:
      num_nodes: ``{type: N_t}``.
      edge_types: ``[(src, relation, dst)]``, relation names unique.
      widths: ``{type: F}`` of the featured types (one width).
      num_classes, hidden, num_layers, dropout: the model.
    """

    def __init__(self, num_nodes, edge_types, widths, num_classes, hidden, num_layers, dropout):
        from dgl.nn import GraphConv, HeteroGraphConv

        super().__init__()
        width = next(iter(widths.values()))
        self.featured = set(widths)
        self.embeddings = nn.ParameterDict()
        for t, n in num_nodes.items():
            if t not in widths:
                table = torch.empty(n, width)
                nn.init.xavier_uniform_(table)
                self.embeddings[t] = nn.Parameter(table)
        sizes = [width] + [hidden] * (num_layers - 1) + [num_classes]
        self.relations = [rel for _, rel, _ in edge_types]
        self.convs = nn.ModuleList(
            HeteroGraphConv(
                {
                    rel: GraphConv(a, b, norm="right", bias=False, allow_zero_in_degree=True)
                    for rel in self.relations
                },
                aggregate="sum",
            )
            for a, b in itertools.pairwise(sizes)
        )
        self.roots = nn.ModuleList(
            nn.ModuleDict({t: nn.Linear(a, b) for t in num_nodes})
            for a, b in itertools.pairwise(sizes)
        )
        self.dropout = dropout

    def inputs(self, features: dict, input_nodes: dict) -> dict:
        """The first block's input rows: features or embeddings, by type."""
        return {
            t: (features[t] if t in self.featured else self.embeddings[t])[ids]
            for t, ids in input_nodes.items()
            if ids.numel()
        }

    def forward(self, blocks, h: dict):
        last = len(self.convs) - 1
        for i, (block, conv, roots) in enumerate(zip(blocks, self.convs, self.roots, strict=True)):
            messages = conv(block, h)
            out = {}
            for t in block.dsttypes:
                count = block.num_dst_nodes(t)
                if not count or t not in h:
                    continue
                v = roots[t](h[t][:count])
                if t in messages:
                    v = v + messages[t]
                out[t] = v if i == last else F.dropout(F.relu(v), self.dropout, self.training)
            h = out
        return h

    def load_flat(self, weights) -> None:
        """Parameters from ``hetero_data.rgcn_weights``' layout (``[in, out]`` maps)."""
        with torch.no_grad():
            for t, table in self.embeddings.items():
                table.copy_(torch.from_numpy(weights[f"emb_{t}"]))
            for i, (conv, roots) in enumerate(zip(self.convs, self.roots, strict=True)):
                for t, root in roots.items():
                    root.weight.copy_(torch.from_numpy(weights[f"root_w_{i}_{t}"]).T)
                    root.bias.copy_(torch.from_numpy(weights[f"root_b_{i}_{t}"]))
                w_rel = torch.from_numpy(weights[f"w_rel_{i}"])
                for r, rel in enumerate(self.relations):
                    conv.mods[rel].weight.copy_(w_rel[r])  # GraphConv: h @ W, [in, out]


def endless(loader):
    """The loader's batches, epoch after epoch (a fresh shuffle each pass)."""
    while True:
        yield from loader


def _setup(spec: dict):
    """The typed graph, model, features and labels of a ``hetero_data`` ``.npz``."""
    import dgl

    torch.manual_seed(0)
    data = load_hetero(np.load(spec["data"]))
    g = dgl.heterograph(
        {
            key: (torch.from_numpy(s.astype(np.int64)), torch.from_numpy(r.astype(np.int64)))
            for key, (s, r) in data["relations"].items()
        },
        num_nodes_dict=data["num_nodes"],
    )
    features = {t: torch.from_numpy(x) for t, x in data["features"].items()}
    model = RGCN(
        data["num_nodes"],
        list(data["relations"]),
        {t: x.shape[1] for t, x in features.items()},
        int(spec["num_classes"]),
        int(spec["hidden"]),
        len(spec["fanouts"]),
        float(spec.get("dropout", 0.0)),
    )
    return g, model, features, data


def rgcn_batches(spec: dict):
    import dgl

    g, model, features, data = _setup(spec)
    target = data["target"]
    labels = torch.from_numpy(data["labels"])
    # DGL's fanouts run from the input layer to the seeds; ours from the seeds
    # outwards: reversed, the seeds' hop draws the same number as ours.
    sampler = dgl.dataloading.NeighborSampler(list(reversed(spec["fanouts"])))
    loader = dgl.dataloading.DataLoader(
        g,
        {target: torch.from_numpy(data["train"])},
        sampler,
        batch_size=int(spec["batch_size"]),
        shuffle=True,
        drop_last=False,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=float(spec["lr"]))
    stats: dict = {"input_rows": [], "block_edges": [], "seeds": [], "batches_per_call": 0}
    next_batch = endless(loader).__next__
    per_call = int(spec["batches"])

    def run():
        model.train()
        loss = torch.zeros(())
        for _ in range(per_call):
            input_nodes, seeds, blocks = next_batch()
            optimizer.zero_grad()
            logits = model(blocks, model.inputs(features, input_nodes))[target]
            loss = F.cross_entropy(logits, labels[seeds[target]])
            loss.backward()
            optimizer.step()
            stats["input_rows"].append(int(sum(v.numel() for v in input_nodes.values())))
            stats["block_edges"].append(int(sum(b.num_edges() for b in blocks)))
            stats["seeds"].append(int(seeds[target].numel()))
        stats["batches_per_call"] = per_call
        stats["loss"] = float(loss)
        return loss.detach()

    return run, stats


def rgcn_forward(spec: dict):
    import dgl

    g, model, features, data = _setup({**spec, "dropout": 0.0})
    model.load_flat(np.load(spec["weights"]))
    model.eval()
    target = data["target"]
    seeds = {target: torch.arange(data["num_nodes"][target])}
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(len(spec["fanouts"]))
    input_nodes, output_nodes, blocks = sampler.sample(g, seeds)

    def run():
        with torch.no_grad():
            logits = model(blocks, model.inputs(features, input_nodes))[target]
        out = torch.empty_like(logits)
        out[output_nodes[target]] = logits
        return out.numpy()

    return run, {}


__all__ = ["RGCN", "rgcn_batches", "rgcn_forward"]

"""DGL's sampled link prediction for ``benchmarks/link_sampled_epoch.py``: a case of
``dgl_peer.py``, under DGL's Python.

The model computes ours (``sparsegcn.nn.sage`` with the mean aggregator, in
``sparsegcn.nn.gae.graph_autoencoder`` with the ``inner`` decoder): per layer

.. math::

    h'_i = W_{\\mathrm{root}}^\\top h_i + W_{\\mathrm{neigh}}^\\top
           \\frac{1}{|N(i)|} \\sum_{j \\in N(i)} h_j + b

which is ``dgl.nn.SAGEConv(aggregator_type="mean")`` (``fc_self`` without
bias, ``fc_neigh`` with none, one bias), ReLU between layers, none after the
last; a pair scores ``z_u · z_v``; the loss is the binary cross-entropy of
the positives against the negatives (``softplus(-s+) + softplus(s-)``,
mean), Adam. No dropout, as ours in the benchmark.

Case ``link_batches`` (the data: the cache's ``train.npy`` ``[P, 2]`` and
``features.npy`` ``[N, F]``, read as they are):

- the message graph is the train pairs in both directions, built so that
  edge ids ``0 .. P - 1`` are the train pairs ``s → t`` (ours samples on the
  same symmetric graph);
- ``dgl.dataloading.as_edge_prediction_sampler(NeighborSampler(fanouts),
  negative_sampler=Uniform(1))`` over those ``P`` edge ids, shuffled,
  ``batch_size`` seed edges a batch, no edges excluded; ``spec["fanouts"]``
  in DGL's order (input layer first);
- one call is ``spec["batches"]`` training batches (sampling, gathering the
  input rows, forward, loss, backward, Adam). ``stats``: seeds, input rows
  and block edges of each batch, the last loss.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
import torch.nn.functional as F
from rgcn_dgl import endless
from torch import nn


class SAGE(nn.Module):
    """GraphSAGE (mean) over DGL blocks: ``widths[0] -> ... -> widths[-1]``."""

    def __init__(self, widths):
        from dgl.nn import SAGEConv

        super().__init__()
        self.convs = nn.ModuleList(
            SAGEConv(a, b, aggregator_type="mean") for a, b in itertools.pairwise(widths)
        )

    def forward(self, blocks, h):
        last = len(self.convs) - 1
        for i, (block, conv) in enumerate(zip(blocks, self.convs, strict=True)):
            h = conv(block, h)
            if i != last:
                h = F.relu(h)
        return h


def _dot(pair_graph, h) -> torch.Tensor:
    u, v = pair_graph.edges()
    return (h[u] * h[v]).sum(-1)


def link_batches(spec: dict):
    import dgl

    torch.manual_seed(int(spec.get("seed", 0)))
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    train = np.load(spec["train"], mmap_mode="r")
    s = torch.from_numpy(np.ascontiguousarray(train[:, 0], dtype=np.int64))
    t = torch.from_numpy(np.ascontiguousarray(train[:, 1], dtype=np.int64))
    num_pairs = int(s.shape[0])
    g = dgl.graph((torch.cat([s, t]), torch.cat([t, s])), num_nodes=int(spec["num_nodes"]))
    del s, t, train
    features = torch.from_numpy(np.load(spec["features"]))
    hidden, layers = int(spec["hidden"]), int(spec["layers"])
    model = SAGE([features.shape[1]] + [hidden] * layers)
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler([int(k) for k in spec["fanouts"]]),
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(1),
    )
    loader = dgl.dataloading.DataLoader(
        g,
        torch.arange(num_pairs),
        sampler,
        batch_size=int(spec["batch_size"]),
        shuffle=True,
        drop_last=False,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=float(spec["lr"]))
    stats: dict = {"input_rows": [], "block_edges": [], "seeds": [], "loss": None}
    next_batch = endless(loader).__next__
    per_call = int(spec["batches"])

    def run():
        model.train()
        loss = torch.zeros(())
        for _ in range(per_call):
            input_nodes, pair_graph, neg_graph, blocks = next_batch()
            optimizer.zero_grad()
            h = model(blocks, features[input_nodes])
            pos, neg = _dot(pair_graph, h), _dot(neg_graph, h)
            loss = F.softplus(-pos).mean() + F.softplus(neg).mean()
            loss.backward()
            optimizer.step()
            stats["input_rows"].append(int(input_nodes.numel()))
            stats["block_edges"].append(int(sum(b.num_edges() for b in blocks)))
            stats["seeds"].append(int(blocks[-1].num_dst_nodes()))
        stats["loss"] = float(loss)
        return loss.detach()

    return run, stats


__all__ = ["SAGE", "link_batches"]

"""Full-batch GraphSAGE on many binary tasks, in PyTorch, for the PyG and DGL peers.

Torch and NumPy only; each peer plugs in its library's ``SAGEConv`` (mean
aggregator). The model is the one ``sparsegcn.nn.sage.sage`` builds (and
``benchmarks/proteins_epoch.py`` trains on ``synthetic:proteins``): per
layer dropout, then

.. math::

    h'_i = W_{\\mathrm{root}}^\\top h_i
         + W_{\\mathrm{neigh}}^\\top \\frac{1}{|N(i)|} \\sum_{j \\in N(i)} h_j + b

and ReLU on hidden layers. The loss is ours
(``sparsegcn.train.losses.masked_binary_cross_entropy``): per node, the mean
of the binary cross-entropies of its present labels (``>= 0``), averaged
over the training nodes; with every label present that is PyTorch's
``BCEWithLogitsLoss`` over ``[train, tasks]``.

The weights of a ``.npz`` in ``hetero_data.sage_weights``' layout load
through :meth:`SAGE.load_flat`, given where a library keeps each conv's
root weight, neighbour weight and bias.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class SAGE(nn.Module):
    """GraphSAGE over the whole graph.

    Args:
      make_conv: ``make_conv(fan_in, fan_out) -> module``, a mean ``SAGEConv``.
      call_conv: ``call_conv(conv, graph, h) -> [N, F']``.
      in_features, hidden, num_classes, num_layers, dropout: the model.
    """

    def __init__(
        self,
        make_conv: Callable[[int, int], nn.Module],
        call_conv: Callable,
        in_features: int,
        hidden: int,
        num_classes: int,
        num_layers: int,
        dropout: float = 0.0,
    ):
        super().__init__()
        sizes = [in_features] + [hidden] * (num_layers - 1) + [num_classes]
        self.convs = nn.ModuleList(make_conv(a, b) for a, b in itertools.pairwise(sizes))
        self.call_conv, self.dropout = call_conv, dropout

    def forward(self, graph, x):
        h = x
        for i, conv in enumerate(self.convs):
            h = self.call_conv(conv, graph, F.dropout(h, self.dropout, self.training))
            if i < len(self.convs) - 1:
                h = F.relu(h)
        return h

    def load_flat(self, weights, parts: Callable) -> None:
        """Parameters from ``sage_weights``' layout; ``parts(conv) -> (root, neigh, bias)``
        gives the conv's ``nn.Linear`` for the root and neighbour terms and the
        bias parameter."""
        for i, conv in enumerate(self.convs):
            root, neigh, bias = parts(conv)
            with torch.no_grad():
                root.weight.copy_(torch.from_numpy(np.asarray(weights[f"w_root_{i}"]).T))
                neigh.weight.copy_(torch.from_numpy(np.asarray(weights[f"w_neigh_{i}"]).T))
                bias.copy_(torch.from_numpy(np.asarray(weights[f"b_{i}"])))


def multilabel_loss(logits: torch.Tensor, labels: torch.Tensor, train: torch.Tensor):
    """Ours: per node the mean BCE over its present labels, then the mean over ``train`` ids."""
    y = labels[train]
    present = (y >= 0).to(logits.dtype)
    losses = F.binary_cross_entropy_with_logits(
        logits[train], (y > 0).to(logits.dtype), reduction="none"
    )
    per_node = (losses * present).sum(1) / present.sum(1).clamp(min=1.0)
    return per_node.mean()


def full_batch_step(model: SAGE, graph, x, labels, train, lr: float):
    """``run()``: one training step (zero grads, forward, loss, backward, Adam) a call."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    def run():
        model.train()
        optimizer.zero_grad()
        loss = multilabel_loss(model(graph, x), labels, train)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return run


def read_multilabel(data):
    """``(features, labels, train)`` tensors of a proteins ``.npz`` (see ``proteins_compare``)."""
    return (
        torch.from_numpy(np.asarray(data["features"], np.float32)),
        torch.from_numpy(np.asarray(data["labels"], np.int8)),
        torch.from_numpy(np.asarray(data["train"]).astype(np.int64)),
    )


__all__ = ["SAGE", "full_batch_step", "multilabel_loss", "read_multilabel"]

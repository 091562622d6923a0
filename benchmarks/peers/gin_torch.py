"""Xu et al.'s GIN in PyTorch, for the PyG and DGL peers (``pyg_peer.py``, ``dgl_peer.py``).

Torch and NumPy only; each peer plugs in its library's ``GINConv`` and sum
pooling. The model is the one ``sparsegcn.nn.graph_gin.graph_gin`` builds
and Xu et al.'s code runs (github.com/weihua916/powerful-gnns,
``models/graphcnn.py``): ``num_layers`` counts the input; each GIN layer
applies ``Linear, BatchNorm, ReLU, Linear`` to ``h_i + Σ_{j→i} h_j``
(GIN-0), then BatchNorm and ReLU; every layer's representation, the input's
included, is summed per graph and mapped to class scores by its own linear
head, dropped out (``p = dropout``) and added up.

:func:`train_epoch` is one epoch as the peers time it: every batch the
library's loader yields (its collation included), forward, cross-entropy,
backward, Adam step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def _mlp(width_in: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(width_in, hidden),
        nn.BatchNorm1d(hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
    )


class GIN(nn.Module):
    """GIN-0 with a readout of every layer.

    Args:
      make_conv: ``make_conv(mlp) -> module`` whose ``conv(graph, h)`` (called
        through ``call_conv``) is ``mlp(h_i + Σ_j h_j)``.
      call_conv: ``call_conv(conv, graph, h)``.
      pool: ``pool(graph, h) -> [G, F]`` per-graph sums.
      in_features, hidden, num_classes, num_layers, dropout: as Xu et al.
    """

    def __init__(
        self,
        make_conv: Callable[[nn.Module], nn.Module],
        call_conv: Callable,
        pool: Callable,
        in_features: int,
        hidden: int,
        num_classes: int,
        num_layers: int = 5,
        dropout: float = 0.5,
    ):
        super().__init__()
        widths = [in_features] + [hidden] * (num_layers - 1)
        self.convs = nn.ModuleList(
            make_conv(_mlp(widths[k - 1], hidden)) for k in range(1, num_layers)
        )
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(1, num_layers))
        self.heads = nn.ModuleList(nn.Linear(w, num_classes) for w in widths)
        self.call_conv, self.pool, self.dropout = call_conv, pool, dropout

    def forward(self, graph, x):
        score = F.dropout(self.heads[0](self.pool(graph, x)), self.dropout, self.training)
        h = x
        for conv, norm, head in zip(self.convs, self.norms, self.heads[1:], strict=True):
            h = F.relu(norm(self.call_conv(conv, graph, h)))
            score = score + F.dropout(head(self.pool(graph, h)), self.dropout, self.training)
        return score

    def load_flat(self, weights) -> None:
        """Parameters from ``graph_data.gin_weights``' layout (``[in, out]`` maps)."""

        def put(param, name):
            value = torch.from_numpy(np.asarray(weights[name], np.float32))
            with torch.no_grad():
                param.copy_(value.T if param.dim() == 2 else value)

        for k, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True), start=1):
            mlp = _conv_mlp(conv)
            put(mlp[0].weight, f"w1_{k}")
            put(mlp[0].bias, f"b1_{k}")
            put(mlp[1].weight, f"bn1_scale_{k}")
            put(mlp[1].bias, f"bn1_bias_{k}")
            put(mlp[3].weight, f"w2_{k}")
            put(mlp[3].bias, f"b2_{k}")
            put(norm.weight, f"bn_scale_{k}")
            put(norm.bias, f"bn_bias_{k}")
        for k, head in enumerate(self.heads):
            put(head.weight, f"head_w_{k}")
            put(head.bias, f"head_b_{k}")


def _conv_mlp(conv: nn.Module) -> nn.Sequential:
    """The MLP inside a PyG (``.nn``) or DGL (``.apply_func``) ``GINConv``."""
    for name in ("nn", "apply_func"):
        inner = getattr(conv, name, None)
        if isinstance(inner, nn.Sequential):
            return inner
    raise TypeError(f"{type(conv).__name__} holds no MLP as .nn or .apply_func")


def train_epoch(
    model: GIN, optimizer, batches: Iterable, unpack: Callable, stats: dict
) -> torch.Tensor:
    """One pass over ``batches``: ``unpack(batch) -> (graph, x, labels)``, then
    forward, cross-entropy, backward and an Adam step per batch.

    ``stats`` gets ``batches`` and ``graphs`` of the pass. Returns the last loss.
    """
    model.train()
    count = graphs = 0
    loss = torch.zeros(())
    for batch in batches:
        graph, x, labels = unpack(batch)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(graph, x), labels)
        loss.backward()
        optimizer.step()
        count += 1
        graphs += int(labels.shape[0])
    stats["batches"], stats["graphs"] = count, graphs
    return loss.detach()


__all__ = ["GIN", "train_epoch"]

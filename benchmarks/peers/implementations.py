"""The same computations in PyTorch Geometric, torch.sparse and scipy.

Each builder takes the library's host data (a :class:`~sparsegcn.Graph` and
NumPy features) and returns a zero-argument callable running one step, so
the runner can time ours and theirs alike, in one process, on the same
graphs. Nothing here is a dependency of sparsegcn: ``torch`` and
``torch_geometric`` are imported on use, and callers skip when they are
missing (install with ``pip install torch==2.13.0 torch_geometric``).

Torch peers take ``device`` (``"cpu"`` or ``"cuda"``); their callables
synchronize the device before returning, so wall-clock timing around them
measures the finished work, as ``block_until_ready`` does for ours.
"""

from __future__ import annotations

import itertools
import os
import warnings

import numpy as np

from sparsegcn.graph import Graph


def have_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def have_pyg() -> bool:
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        return False
    return True


def _torch():
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    return torch


def torch_device(requested: str) -> str:
    """``"cpu"`` or ``"cuda"``; ``"auto"`` follows JAX's platform when torch sees a GPU."""
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"torch device {requested!r} is not one of 'auto', 'cpu', 'cuda'")
    if requested != "auto":
        return requested
    import jax

    if jax.default_backend() == "gpu" and have_torch() and _torch().cuda.is_available():
        return "cuda"
    return "cpu"


def _synchronized(torch, device: str, fn):
    """``fn`` followed by a device synchronization (a no-op on CPU)."""
    if device == "cpu":
        return fn

    def run():
        out = fn()
        torch.cuda.synchronize()
        return out

    return run


def torch_csr_propagate(a_hat: Graph, x: np.ndarray, device: str = "cpu"):
    """``torch.sparse.mm`` with ``Â`` as a CSR tensor (all cores, or cuSPARSE on ``cuda``)."""
    torch = _torch()
    csr = a_hat.to_scipy().astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        matrix = torch.sparse_csr_tensor(
            torch.from_numpy(csr.indptr.astype(np.int64)),
            torch.from_numpy(csr.indices.astype(np.int64)),
            torch.from_numpy(csr.data),
            csr.shape,
        ).to(device)
    features = torch.from_numpy(np.array(x, np.float32)).to(device)

    def run():
        with torch.no_grad():
            return torch.sparse.mm(matrix, features)

    return _synchronized(torch, device, run)


def scipy_csr_propagate(a_hat: Graph, x: np.ndarray):
    """``Â @ x`` with a scipy CSR matrix (one core)."""
    csr = a_hat.to_scipy().astype(np.float32)
    features = np.array(x, np.float32)
    return lambda: csr @ features


def pyg_propagate(a_hat: Graph, x: np.ndarray, device: str = "cpu"):
    """PyG's message passing (gather, scale, scatter-add): ``SimpleConv(aggr="sum")``."""
    torch = _torch()
    from torch_geometric.nn import SimpleConv

    conv = SimpleConv(aggr="sum")
    edge_index = torch.from_numpy(
        np.stack([np.asarray(a_hat.senders), np.asarray(a_hat.receivers)]).astype(np.int64)
    ).to(device)
    weight = torch.from_numpy(np.asarray(a_hat.edge_weights(), np.float32)).to(device)
    features = torch.from_numpy(np.array(x, np.float32)).to(device)

    def run():
        with torch.no_grad():
            return conv(features, edge_index, weight)

    return _synchronized(torch, device, run)


def pyg_gcn_step(
    graph: Graph,
    features: np.ndarray,
    labels: np.ndarray,
    train_mask: np.ndarray,
    num_classes: int,
    *,
    hidden: int,
    num_layers: int,
    dropout: float,
    weight_decay_first: float = 5e-4,
    lr: float = 0.01,
    device: str = "cpu",
):
    """PyG's GCN example step: ``GCNConv(cached=True)`` layers, dropout before
    each, Adam with weight decay on the first layer, cross-entropy on the
    training nodes. ``graph`` is the undirected graph without self-loops
    (``GCNConv`` adds them and normalizes, once, thanks to ``cached``).
    """
    torch = _torch()
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    sizes = [features.shape[1]] + [hidden] * (num_layers - 1) + [num_classes]

    class GCN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(
                GCNConv(a, b, cached=True) for a, b in itertools.pairwise(sizes)
            )

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = F.dropout(x, p=dropout, training=self.training)
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = x.relu()
            return x

    torch.manual_seed(0)
    model = GCN().to(device)
    optimizer = torch.optim.Adam(
        [
            dict(params=model.convs[0].parameters(), weight_decay=weight_decay_first),
            dict(params=[p for c in model.convs[1:] for p in c.parameters()], weight_decay=0.0),
        ],
        lr=lr,
    )
    edge_index = torch.from_numpy(
        np.stack([np.asarray(graph.senders), np.asarray(graph.receivers)]).astype(np.int64)
    ).to(device)
    x = torch.from_numpy(np.array(features, np.float32)).to(device)
    y = torch.from_numpy(np.asarray(labels, np.int64)).to(device)
    mask = torch.from_numpy(np.asarray(train_mask, bool)).to(device)

    def run():
        model.train()
        optimizer.zero_grad()
        out = model(x, edge_index)
        loss = F.cross_entropy(out[mask], y[mask])
        loss.backward()
        optimizer.step()
        return loss

    return _synchronized(torch, device, run)


def pyg_gat_step(
    graph: Graph,
    features: np.ndarray,
    labels: np.ndarray,
    train_mask: np.ndarray,
    num_classes: int,
    *,
    hidden: int = 8,
    heads: int = 8,
    dropout: float = 0.6,
    lr: float = 0.005,
    weight_decay: float = 5e-4,
    v2: bool = False,
    device: str = "cpu",
):
    """PyG's GAT example step (Veličković et al.'s Cora setup): dropout 0.6 on
    inputs and attention, ``GATConv(F, 8, heads=8)``, ELU, ``GATConv(64, C,
    heads=1, concat=False)``, Adam with weight decay on every parameter.
    ``graph`` is the undirected graph; ``GATConv`` adds the self-loops.
    ``v2`` takes ``GATv2Conv`` instead.
    """
    torch = _torch()
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv, GATv2Conv

    conv = GATv2Conv if v2 else GATConv

    class GAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = conv(features.shape[1], hidden, heads=heads, dropout=dropout)
            self.conv2 = conv(hidden * heads, num_classes, heads=1, concat=False, dropout=dropout)

        def forward(self, x, edge_index):
            x = F.dropout(x, p=dropout, training=self.training)
            x = F.elu(self.conv1(x, edge_index))
            x = F.dropout(x, p=dropout, training=self.training)
            return self.conv2(x, edge_index)

    torch.manual_seed(0)
    model = GAT().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    edge_index = torch.from_numpy(
        np.stack([np.asarray(graph.senders), np.asarray(graph.receivers)]).astype(np.int64)
    ).to(device)
    x = torch.from_numpy(np.array(features, np.float32)).to(device)
    y = torch.from_numpy(np.asarray(labels, np.int64)).to(device)
    mask = torch.from_numpy(np.asarray(train_mask, bool)).to(device)

    def run():
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x, edge_index)[mask], y[mask])
        loss.backward()
        optimizer.step()
        return loss

    return _synchronized(torch, device, run)

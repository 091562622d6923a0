"""Simplified graph convolution: SGC (Wu et al. 2019), logistic regression on ``Â^K X``.

SGC drops GCN's nonlinearities, so the whole network is one linear map of
the propagated features, ``softmax(Â^K X W + b)``. The propagation has no
parameters and can run once, before training: :func:`sgc_features`
computes ``Â^K X`` on the host (scipy), and ``sgc(..., precomputed=True)``
is then a plain linear model of those rows.

The registry's ``sgc`` takes that route: ``sparsegcn train`` (and
:func:`~sparsegcn.experiment.build.node_data`) computes ``Â^K X`` once
before training, cached on disk under ``--feature-cache``
(:mod:`sparsegcn.experiment.precompute`), and trains ``sgc(...,
precomputed=True)``: no graph product in the step. Built without
``precomputed`` the model computes the other exact form, ``Â^K (X W)``
(``Â^K`` commutes with the right product), ``K`` products at the class
width ``C`` inside the step, for callers that hold only raw features.
"""

from __future__ import annotations

import jax
import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks
from sparsegcn.features import Features, SparseFeatures, matmul
from sparsegcn.graph import Graph
from sparsegcn.nn.dropout import dropout
from sparsegcn.nn.initializers import linear_params
from sparsegcn.nn.model import Model, split_dropout_keys


def _host_matrix(graph: Graph) -> sp.csr_array:
    """``graph`` as a scipy ``[N, N]`` matrix, ``A[r, s] = w`` (duplicates summed)."""
    senders, receivers = np.asarray(graph.senders), np.asarray(graph.receivers)
    weights = (
        np.ones(senders.shape[0], np.float64)
        if graph.weights is None
        else np.asarray(graph.weights, np.float64)
    )
    n = graph.num_nodes
    return sp.csr_array((weights, (receivers, senders)), shape=(n, n))


def sgc_features(graph: Graph, x: Features, hops: int = 2) -> jax.Array:
    """``Â^K X``, once, on the host: SGC's parameter-free propagation.

    .. math:: \\bar X = \\hat A^K X

    computed in float64 with scipy (``K`` sparse-dense products), returned
    as float32.

    Args:
      graph: the normalized adjacency ``Â`` (``gcn_norm(g)``), ``N`` nodes,
        an edge-list :class:`~sparsegcn.Graph`.
      x: ``[N, F]`` dense or :class:`~sparsegcn.SparseFeatures`.
      hops: ``K >= 1``.

    Returns:
      ``[N, F]`` float32, dense.

    Raises:
      ValueError: ``hops < 1`` or ``x`` has not ``N`` rows.
    """
    _checks.check_static_int("hops", hops, minimum=1)
    rows = x.to_scipy().toarray() if isinstance(x, SparseFeatures) else np.asarray(x)
    rows = rows.astype(np.float64)
    if rows.shape[0] != graph.num_nodes:
        raise ValueError(f"x must have {graph.num_nodes} rows (one per node), got {rows.shape}")
    a = _host_matrix(graph)
    for _ in range(hops):
        rows = a @ rows
    return jax.numpy.asarray(rows, jax.numpy.float32)


def sgc(
    in_features: int,
    num_classes: int,
    *,
    hidden: int | None = None,
    num_layers: int = 1,
    dropout_rate: float = 0.0,
    hops: int = 2,
    precomputed: bool = False,
    dropout_impl: str = "hash",
) -> Model:
    """SGC: one linear layer on ``K``-step propagated features.

    .. math:: Y = \\hat A^K \\, \\mathrm{drop}(X) \\, W + b

    ``apply(params, graph, x)`` reads the normalized graph ``Â = gcn_norm(g)``
    (the registry's ``gcn_norm`` preparation) and computes ``Â^K (X W) + b``
    on any square view (a :class:`~sparsegcn.Graph` in any layout, an edge
    shard). With ``precomputed=True`` it is ``X W + b`` and ``x`` must be
    :func:`sgc_features` of the raw features; the graph is not read.

    Args:
      in_features: ``F``.
      num_classes: ``C``.
      hidden: must be ``None``: SGC has no hidden layer.
      num_layers: must be 1 (one linear map).
      dropout_rate: dropout of the input features (0 in Wu et al.); of
        ``Â^K X`` when precomputed.
      hops: ``K`` (2).
      precomputed: ``x`` is ``Â^K X`` already (:func:`sgc_features`).
      dropout_impl: ``"hash"`` (fast) or ``"threefry"``.

    Returns:
      A :class:`Model`. Params: ``{"layers": [{"w": [F, C], "b": [C]}]}``.
      ``embed`` returns the input rows of the linear map: ``Â^K X``
      (``[N, F]``), read from ``x`` when precomputed.

    Shapes:
      ``apply(params, graph, x [N, F]) -> [N, C]``.

    References:
      Wu, Souza, Zhang, Fifty, Yu & Weinberger, *Simplifying Graph
      Convolutional Networks*, ICML 2019. https://arxiv.org/abs/1902.07153
    """
    if hidden is not None:
        raise ValueError(f"sgc has no hidden layer; hidden must be None, got {hidden}")
    if num_layers != 1:
        raise ValueError(f"sgc is one linear layer; num_layers must be 1, got {num_layers}")
    _checks.check_flag("precomputed", precomputed)
    _checks.check_static_int("hops", hops, minimum=1)
    if not 0.0 <= dropout_rate < 1.0:
        raise ValueError(f"dropout_rate must be in [0, 1), got {dropout_rate}")
    config = dict(
        in_features=in_features,
        num_classes=num_classes,
        num_layers=1,
        dropout_rate=dropout_rate,
        hops=hops,
        precomputed=precomputed,
    )

    def init(key: jax.Array) -> dict:
        return {"layers": [linear_params(key, in_features, num_classes)]}

    def propagate(graph, h: jax.Array) -> jax.Array:
        for _ in range(hops):
            h = graph.product(graph.sources(h))
        return h

    def apply(params, graph, x: Features, *, key=None, training: bool = False):
        (drop_key,) = split_dropout_keys(key, 1, training, dropout_rate)
        if drop_key is not None:
            x = dropout(x, dropout_rate, key=drop_key, impl=dropout_impl)
        layer = params["layers"][0]
        z = matmul(x, layer["w"])
        if not precomputed:
            z = propagate(graph, z)
        return z + layer["b"][None, :]

    def embed(params, graph, x: Features) -> jax.Array:
        if precomputed:
            return x
        return propagate(graph, x.todense() if isinstance(x, SparseFeatures) else x)

    return Model(init=init, apply=apply, embed=embed, name="sgc", config=config)

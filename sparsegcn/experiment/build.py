"""From a :class:`~sparsegcn.datasets.Dataset` to what a trainer consumes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks, transforms
from sparsegcn.backends import get_backend, pack, pack_gcn_norm
from sparsegcn.datasets import Dataset
from sparsegcn.datasets.ondisk import EXPAND_FRACTION, ExpandedRows
from sparsegcn.experiment.config import HOST_GRAPH_PREPARATIONS, Experiment, _resolved
from sparsegcn.experiment.precompute import sgc_precompute
from sparsegcn.features import as_features, normalize
from sparsegcn.files import check_mapped, release_pages
from sparsegcn.nn import Model
from sparsegcn.nn.registry import create_model, get_model_spec
from sparsegcn.sampling.feature_store import (
    choose_features_on,
    device_memory_bytes,
    host_memory_bytes,
)
from sparsegcn.sampling.host import HostCSR
from sparsegcn.train import NodeData, index_mask
from sparsegcn.train.minibatch import MinibatchData, sampling_graph

PACK_MIN_EDGES = 1 << 20
"""Stored edges from which :func:`prepare_graph` packs GCN's graph by default.

Packing pays off on large graphs (several times faster propagation at
ogbn-arxiv size) but its compiled products unroll many gathers: on small
graphs such as Cora the edge list compiles faster and steps about as fast
(figures on the documentation's performance page).
"""

PACK_FORMAT = "csr"
"""Layout :func:`prepare_graph` packs in (see :func:`~sparsegcn.backends.pack`).

CSR, chosen by measurement against sliced ELL: on CPU a GCN step runs
about as fast, compiles several times faster and uses less memory; on a
GPU (cuSPARSE) it is the fastest layout. Both cost ``O(E F)`` per product.
The figures and their commands are on the documentation's performance page
(Packed layouts).
"""


def prepare_graph(
    dataset: Dataset, model: str, *, packed: bool | None = None, backend: str = "segment"
):
    """The graph ``model``'s ``apply`` reads, in the layout it will run on; host-side, once.

    :func:`model_graph` of ``dataset.graph``.
    """
    return model_graph(dataset.graph, model, packed=packed, backend=backend)


def model_graph(graph, model: str, *, packed: bool | None = None, backend: str = "segment"):
    """``graph`` prepared for ``model`` and put in the layout it will run on; host-side, once.

    The preparation is the model's (:mod:`sparsegcn.nn.registry`): GCN's
    ``Â = D^-1/2 (A + I) D^-1/2``, GAT's self-loops, GraphSAGE's ``D^-1 A``,
    or the graph as it is. Then the layout is chosen once, here:

    - ``backend="segment"``: packed in :data:`PACK_FORMAT` (the native CSR
      kernel; :func:`~sparsegcn.backends.pack_gcn_norm` for GCN) when
      ``packed``, else a receiver-sorted edge list. ``packed=None`` packs
      every graph on an accelerator, and on CPU graphs of at least
      :data:`PACK_MIN_EDGES` stored edges (on Cora the edge list steps as
      fast on CPU and compiles faster);
    - ``"bcoo"`` or ``"dense"``: that backend's view
      (:meth:`~sparsegcn.backends.Backend.view`).

    ``graph.layout_name`` names the layout that runs; reports print it.
    """
    spec = get_model_spec(model)
    if not spec.uses_graph:
        return graph
    if backend != "segment":
        return get_backend(backend).view(spec.prepare_graph(graph))
    if packed is None:
        on_cpu = jax.default_backend() == "cpu"
        packed = graph.num_edges >= PACK_MIN_EDGES or not on_cpu
    if packed and spec.prepare == "gcn_norm":
        return pack_gcn_norm(graph, format=PACK_FORMAT)
    prepared = spec.prepare_graph(graph)
    return pack(prepared, format=PACK_FORMAT) if packed else transforms.sort_edges(prepared)


def reorder_dataset(dataset: Dataset, method: str = "none"):
    """``dataset`` with its nodes relabelled by ``graph.reorder(method)``.

    Graph, feature rows, labels and split indices move together, so a model
    trained on the result learns the same task; accuracies do not depend on
    node order. Node outputs computed on it come back in the dataset's own
    order with ``reordering.restore`` (along the node axis).

    Args:
      dataset: the loaded dataset.
      method: ``"none"`` or a :func:`~sparsegcn.transforms.reorder` method.

    Returns:
      ``(dataset, None)`` for ``"none"``, else ``(relabelled, reordering)``
      with :class:`~sparsegcn.transforms.Reordering`.
    """
    if method == "none":
        return dataset, None
    reordering = dataset.graph.reorder(method)
    relabelled = dataclasses.replace(
        dataset,
        graph=reordering.graph,
        features=reordering.permute(dataset.features),
        labels=np.asarray(dataset.labels)[reordering.permutation],
        split={k: np.sort(reordering.inverse[np.asarray(v)]) for k, v in dataset.split.items()},
        info={**dataset.info, "reorder": method},
    )
    return relabelled, reordering


def node_data(
    dataset: Dataset,
    model: str = "gcn",
    *,
    normalize_features: str = "auto",
    packed: bool | None = None,
    backend: str = "segment",
    options: Mapping | None = None,
    feature_cache: str | Path | None = None,
    write_feature_cache: bool = True,
) -> NodeData:
    """Builds the :class:`NodeData` a full-batch trainer reads from a :class:`Dataset`.

    Args:
      dataset: the loaded dataset.
      model: a registered model name (see :func:`prepare_graph`).
      normalize_features: ``"auto"``, ``"row"`` or ``"none"``
        (:func:`~sparsegcn.features.normalize`).
      packed: pack the graph; ``None`` decides by size (see :func:`prepare_graph`).
      backend: the layout to convert to (see :func:`prepare_graph`).
      options: the model's options (:meth:`~sparsegcn.nn.registry.ModelSpec.resolve_options`;
        defaults for those missing).
      feature_cache: folder caching precomputed features, for models whose
        registry entry sets ``precompute`` (SGC's ``Â^K X``, see
        :mod:`sparsegcn.experiment.precompute`); ``None`` computes them
        without caching.
      write_feature_cache: store a miss in ``feature_cache`` (``False``: read only).
    """
    n = dataset.num_nodes
    spec = get_model_spec(model)
    for what, array in (("features", dataset.features), ("labels", dataset.labels)):
        check_mapped(array, f"the {what} file")  # changed since it was loaded: SIGBUS below
    check_mapped(dataset.graph.senders, "the graph's indices file")
    features = normalize(dataset.features, normalize_features)
    if spec.precompute:
        resolved = spec.resolve_options(model, dict(options or {}))
        features, _ = sgc_precompute(
            dataset,
            features,
            hops=resolved["hops"],
            normalize_features=normalize_features,
            cache_dir=feature_cache,
            write=write_feature_cache,
        )
    return NodeData(
        graph=prepare_graph(dataset, model, packed=packed, backend=backend),
        features=as_features(features, n),
        labels=node_labels(dataset.labels),
        train_mask=index_mask(dataset.split["train"], n),
        val_mask=index_mask(dataset.split["valid"], n),
        test_mask=index_mask(dataset.split["test"], n),
    )


def use_edge_features(dataset: Dataset, use: bool = True) -> Dataset:
    """``dataset`` as node models read it, its edge features (if any) turned into node features.

    No registered model reads per-edge features, so a graph's
    ``edge_features`` become node features, as OGB's ogbn-proteins baselines
    do: with ``use`` (``--edge-features``, the default), the mean of each
    node's incoming edges' rows (:func:`~sparsegcn.transforms.edge_mean_features`;
    on a symmetric graph, its incident edges) replaces the features of a
    dataset whose ``info["featureless"]`` says it has none, and is appended
    as further columns otherwise. Either way the graph is returned without
    its edge features (``--no-edge-features`` just drops them).

    Returns:
      ``dataset`` itself when its graph has no edge features.
    """
    graph = dataset.graph
    if graph.edge_features is None:
        return dataset
    changes: dict[str, Any] = {"graph": graph.without_edge_features()}
    if use:
        mean = transforms.edge_mean_features(graph)
        if dataset.info.get("featureless"):
            changes["features"] = mean
        elif sp.issparse(dataset.features):
            changes["features"] = sp.hstack([dataset.features, mean], format="csr")
        else:
            changes["features"] = np.hstack([np.asarray(dataset.features, np.float32), mean])
        changes["info"] = {**dataset.info, "edge_features": "mean of incident edges"}
    else:
        changes["info"] = {**dataset.info, "edge_features": "ignored"}
    return dataclasses.replace(dataset, **changes)


def node_labels(labels) -> np.ndarray:
    """The int32 labels a trainer reads: classes with unlabelled nodes (-1) as 0
    (they are masked out), or multi-label ``[N, T]`` as stored (-1: missing,
    which the loss and metric skip)."""
    labels = np.asarray(labels)
    if labels.ndim == 2:
        return labels.astype(np.int32)
    return np.maximum(labels, 0).astype(np.int32)


def build_model(exp: Experiment, dataset: Dataset) -> Model:
    """The registered model ``exp.model`` names, sized for ``dataset`` (reading
    precomputed features when its registry entry sets ``precompute``, as
    :func:`node_data` gives them)."""
    return create_model(
        exp.model,
        dataset.num_features,
        dataset.num_classes,
        hidden=exp.hidden,
        layers=_resolved("layers", exp.layers, exp.model),
        dropout=_resolved("dropout", exp.dropout, exp.model),
        residual=exp.residual,
        precomputed=get_model_spec(exp.model).precompute,
        **exp.options(),
    )


def resolve_graph_on(exp: Experiment, dataset: Dataset) -> str:
    """Where the run samples its graph: ``exp.graph_on`` with ``"auto"`` resolved.

    ``"auto"`` is ``"host"`` exactly when the on-disk graph was too large to
    expand in RAM (its receivers are an
    :class:`~sparsegcn.datasets.ondisk.ExpandedRows`); the run is then
    checked as a streamed one (:meth:`Experiment.check_streamed`).
    Full-batch runs sample nothing: ``"device"``.

    Raises:
      ValueError: a full-batch run or ``"device"`` for a graph too large to
        expand (its receivers are a stand-in no device takes), or an
        ``"auto"`` resolution to ``"host"`` that the settings do not support.
    """
    lazy = isinstance(dataset.graph.receivers, ExpandedRows)
    if not exp.sampled and lazy:  # before anything puts the stand-in on a device
        raise ValueError(
            f"{exp.model} trains full batch here, which needs {dataset.name}'s "
            f"{dataset.graph.num_edges:,} stored edges expanded in RAM, more than "
            f"{EXPAND_FRACTION:.3g} of it; train a sampled model (--fanouts) with the graph "
            "sampled on the host (--graph-on host)"
        )
    if not exp.sampled:
        return "device"
    if exp.graph_on == "device" and lazy:
        raise ValueError(
            f"graph_on='device' needs the graph's receivers in RAM, but {dataset.name}'s "
            f"{dataset.graph.num_edges:,} stored edges would take more than "
            f"{EXPAND_FRACTION:.3g} of RAM expanded; use --graph-on host"
        )
    if exp.graph_on == "auto":
        if not lazy:
            return "device"
        exp.check_streamed("graph_on='auto' (the graph is too large to expand in RAM)")
        return "host"
    return exp.graph_on


def host_csr(dataset: Dataset, model: str) -> HostCSR:
    """The graph ``model`` samples, as a :class:`~sparsegcn.sampling.host.HostCSR`.

    An on-disk dataset's own files (``indices.npy`` stays memory-mapped),
    unless its nodes were relabelled; else the CSR of its graph in RAM.

    Raises:
      ValueError: a model whose preparation changes the stored structure
        (GAT's self-loops).
    """
    spec = get_model_spec(model)
    if spec.prepare not in HOST_GRAPH_PREPARATIONS:
        raise ValueError(
            f"host sampling reads the stored graph, but {model} trains on it after "
            f"{spec.prepare!r}; use --graph-on device, or a model such as sage"
        )
    folder = dataset.info.get("folder")
    if folder is not None and "reorder" not in dataset.info:
        return HostCSR.open(folder)
    csr = dataset.graph.to_csr()
    return HostCSR.from_arrays(np.asarray(csr.indptr), np.asarray(csr.indices))


def resolve_features_on(exp: Experiment, dataset: Dataset, *, streamed: bool = False) -> str:
    """Where the run keeps its features: ``exp.features_on`` with ``"auto"`` resolved.

    Full-batch runs and sparse features always keep them on the device. A
    ``streamed`` run (graph sampled on the host, or ``max_batches``) keeps
    them off it: ``"auto"`` then picks ``"host"`` or ``"mmap"``.
    See :func:`~sparsegcn.sampling.feature_store.choose_features_on`.
    """
    x = dataset.features
    if not exp.sampled or sp.issparse(x):
        if exp.features_on in ("host", "mmap") or streamed:
            raise ValueError(
                f"features_on={exp.features_on!r} needs dense features and sampled training"
            )
        return "device"
    if streamed and exp.features_on == "device":
        raise ValueError(
            "this run streams its features (graph sampled on the host, or max_batches): "
            "features_on='device' is not supported with it; use 'auto', 'host' or 'mmap'"
        )
    return choose_features_on(
        exp.features_on,
        int(x.shape[0]) * int(x.shape[1]) * np.dtype(x.dtype).itemsize,
        on_disk=isinstance(x, np.memmap),
        device_bytes=0 if streamed else device_memory_bytes(),
        host_bytes=host_memory_bytes(),
    )


def _has_negative(x, chunk_rows: int = 1 << 16) -> bool:
    return any(bool((x[a : a + chunk_rows] < 0).any()) for a in range(0, x.shape[0], chunk_rows))


def streamed_data(
    dataset: Dataset,
    model: str,
    features_on: str,
    *,
    normalize_features: str = "auto",
    graph_on: str = "device",
) -> MinibatchData:
    """The :class:`~sparsegcn.train.MinibatchData` of a run whose features stay on the host.

    ``"host"``: the features normalized (:func:`~sparsegcn.features.normalize`)
    into a float32 array in RAM (an on-disk file is read in whole).
    ``"mmap"``: the memory-mapped file itself, read batch by batch; it is
    used as stored, so a normalization that would change it is refused
    (``"auto"`` checks the file for negative values in row chunks).
    With ``graph_on="host"`` the graph is left out (``None``): the trainer
    samples from :func:`host_csr`.

    Raises:
      ValueError: ``"mmap"`` with features that are not memory-mapped, or
        that would be row-normalized.
    """
    n = dataset.num_nodes
    x = dataset.features
    if features_on == "mmap":
        if not isinstance(x, np.memmap):
            raise ValueError("features_on='mmap' needs an on-disk dataset (memory-mapped features)")
        if normalize_features == "row" or (normalize_features == "auto" and not _has_negative(x)):
            raise ValueError(
                f"features_on='mmap' reads the file as stored, but normalize_features="
                f"{normalize_features!r} would row-normalize these non-negative features; pass "
                "normalize_features='none', or features_on='host' (normalized in RAM)"
            )
    else:
        x = np.ascontiguousarray(normalize(np.asarray(x), normalize_features), np.float32)
        _checks.check_finite("features", x)
    train_mask = index_mask(dataset.split["train"], n)
    if not train_mask.any():
        raise ValueError("mini-batch training needs at least one train node; the split has none")
    graph: Any = None
    if graph_on != "host":
        graph = sampling_graph(prepare_graph(dataset, model, packed=False))
    labels = np.maximum(dataset.labels, 0).astype(np.int32)
    release_pages(dataset.labels)  # a memory map's pages, read once: out of the RSS
    return MinibatchData(
        graph=graph,
        features=x,
        labels=labels,
        train_nodes=np.flatnonzero(train_mask).astype(np.int32),
        train_mask=train_mask,
        val_mask=index_mask(dataset.split["valid"], n),
        test_mask=index_mask(dataset.split["test"], n),
    )

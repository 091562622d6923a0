"""Summary statistics of a dataset: what ``sparsegcn info`` prints."""

from __future__ import annotations

import numpy as np

from sparsegcn.datasets.base import Dataset
from sparsegcn.datasets.ondisk import ExpandedRows

DEGREE_QUANTILES = (0.0, 0.5, 0.9, 0.99, 1.0)


def edge_homophily(dataset: Dataset, *, chunk: int = 1 << 24) -> float:
    """Fraction of stored edges joining two nodes of the same class.

    .. math:: h = \\frac{|\\{(s, r) \\in E : y_s = y_r\\}|}{|E|}

    Edges touching an unlabelled node (label -1) are left out. For
    multi-label ``[N, T]`` labels it is the fraction of (edge, task) pairs,
    both labels present, whose two labels agree. Computed in
    chunks so a memory-mapped edge list is never copied whole. NaN when no
    edge joins two labelled nodes.

    References:
      Zhu et al., *Beyond Homophily in Graph Neural Networks*, NeurIPS 2020.
    """
    labels = dataset.labels
    same = total = 0
    senders, receivers = dataset.graph.senders, dataset.graph.receivers
    for start in range(0, senders.shape[0], chunk):
        ys = labels[np.asarray(senders[start : start + chunk])]
        yr = labels[np.asarray(receivers[start : start + chunk])]
        labelled = (ys >= 0) & (yr >= 0)
        same += int(np.count_nonzero((ys == yr) & labelled))
        total += int(np.count_nonzero(labelled))
    return same / total if total else float("nan")


def describe(dataset: Dataset) -> dict:
    """The statistics ``sparsegcn info`` reports, as a JSON-ready dict.

    Keys: ``name``, ``num_nodes``, ``num_edges`` (as the publisher counts
    them), ``num_stored_edges`` (directed edges held), ``num_features``,
    ``num_classes`` (tasks, when multi-label), ``num_edge_features``, ``split_sizes``, ``degree`` (mean and in-degree
    quantiles), ``homophily`` (edge homophily), ``bytes`` (host memory),
    ``feature_format`` and ``metric``.
    """
    graph = dataset.graph
    if isinstance(graph.receivers, ExpandedRows):  # too large to expand: row lengths
        degrees = graph.receivers.degrees()
    else:
        degrees = np.bincount(np.asarray(graph.receivers), minlength=graph.num_nodes)
    quantiles = np.quantile(degrees, DEGREE_QUANTILES) if degrees.size else np.zeros(5)
    return {
        "name": dataset.name,
        "num_nodes": dataset.num_nodes,
        "num_edges": int(dataset.num_edges),
        "num_stored_edges": graph.num_edges,
        "num_features": dataset.num_features,
        "num_classes": dataset.num_classes,
        "num_edge_features": graph.num_edge_features,
        "split_sizes": dataset.split_sizes,
        "degree": {
            "mean": float(degrees.mean()) if degrees.size else 0.0,
            **{
                f"q{int(q * 100)}": float(v)
                for q, v in zip(DEGREE_QUANTILES, quantiles, strict=True)
            },
        },
        "homophily": edge_homophily(dataset),
        "bytes": dataset.nbytes,
        "feature_format": "sparse" if hasattr(dataset.features, "nnz") else "dense",
        "metric": dataset.metric,
    }

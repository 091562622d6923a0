"""Graph-level datasets by name: :func:`load_graphs` picks the loader.

The dataset type is :class:`~sparsegcn.datasets.graph_dataset.GraphDataset`
(re-exported here); each loader lives in its own module and is imported when
used.
"""

from __future__ import annotations

from sparsegcn.datasets.graph_dataset import GraphDataset


def load_graphs(name: str, root, *, download: bool = True, progress: bool = False) -> GraphDataset:
    """The graph-level dataset ``name`` under ``root``, by its name's prefix.

    Args:
      name: ``"tu:NAME"`` (:func:`~sparsegcn.datasets.tu.load_tu`).
      root: the data root.
      download: fetch a missing dataset where its loader can.
      progress: progress bars.

    Raises:
      ValueError: a name no graph loader knows.
    """
    from sparsegcn.datasets import TU_PREFIX

    if name.startswith(TU_PREFIX):
        from sparsegcn.datasets.tu import load_tu

        return load_tu(name, root, download=download, progress=progress)
    raise ValueError(f"{name!r} is not a graph-level dataset (expected tu:NAME)")


__all__ = ["load_graphs"]

"""Graph-level datasets by name: :func:`load_graphs` picks the loader.

The dataset type is :class:`~sparsegcn.datasets.graph_dataset.GraphDataset`
(re-exported here); each loader lives in its own module and is imported when
used.
"""

from __future__ import annotations

import os

from sparsegcn.datasets.graph_dataset import GraphDataset


def graph_names() -> list[str]:
    """The registered graph-level names :func:`load_graphs` takes (besides ``tu:NAME`` and
    folder paths)."""
    from sparsegcn.datasets import SYNTHETIC_GRAPHS
    from sparsegcn.datasets.ogbg import NAMES

    return [*NAMES, *SYNTHETIC_GRAPHS]


def load_graphs(
    name: str | os.PathLike,
    root,
    *,
    download: bool = True,
    progress: bool = False,
    seed: int = 0,
    verify: bool = False,
) -> GraphDataset:
    """The graph-level dataset ``name`` under ``root``, by its name's prefix.

    Args:
      name: ``"tu:NAME"`` (:func:`~sparsegcn.datasets.tu.load_tu`);
        ``"ogbg-*"`` (:func:`~sparsegcn.datasets.ogbg.load_ogbg`, OGB's raw
        files in ``<root>/ogbg_*``); ``"synthetic:molhiv"`` or
        ``"synthetic:molpcba"`` (generated,
        :func:`~sparsegcn.datasets.synthetic_graphs.generate_molecules`);
        or the path of an on-disk graph dataset folder
        (:func:`~sparsegcn.datasets.ondisk_graphs.load_graphs_ondisk`),
        written as a path (``sparsegcn.datasets.is_path``: ``./molpcba``).
      root: the data root (``None``: ``$SPARSEGCN_DATA`` or ``./datasets``;
        unused for a generated dataset or a folder).
      download: fetch a missing dataset where its loader can.
      progress: progress bars.
      seed: the generator's seed, for ``synthetic:*`` names (refused elsewhere).
      verify: check every file's sha256, for a folder.

    Raises:
      ValueError: a name no graph loader knows, or a ``seed`` for a dataset
        that is not generated.
    """
    from sparsegcn.datasets import OGBG_PREFIX, SYNTHETIC_GRAPHS, TU_PREFIX, is_path

    if isinstance(name, os.PathLike):  # a pathlib.Path is a folder, whatever it looks like
        text = str(os.fspath(name))
        name = text if is_path(text) else os.path.join(os.curdir, text)
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a string, got {name!r} ({type(name).__name__})")
    from sparsegcn.datasets.base import check_load_arguments

    check_load_arguments(root, download=download, progress=progress, verify=verify)
    if seed != 0 and name not in SYNTHETIC_GRAPHS:
        raise ValueError(
            f"seed={seed!r} applies only to generated graph datasets "
            f"({', '.join(sorted(SYNTHETIC_GRAPHS))}), not {name!r}"
        )
    if is_path(name):
        from sparsegcn.datasets.ondisk_graphs import load_graphs_ondisk

        return load_graphs_ondisk(os.path.expanduser(name), verify=verify)
    if root is None:
        from sparsegcn.datasets.base import default_root

        root = default_root()
    if name.startswith(TU_PREFIX):
        from sparsegcn.datasets.tu import load_tu

        return load_tu(name, root, download=download, progress=progress)
    if name.startswith(OGBG_PREFIX):
        from sparsegcn.datasets.ogbg import load_ogbg

        return load_ogbg(name, root, download=download, progress=progress)
    if name in SYNTHETIC_GRAPHS:
        from sparsegcn.datasets.synthetic_graphs import load_synthetic_graphs

        return load_synthetic_graphs(name, seed=seed)
    raise ValueError(
        f"{name!r} is not a graph-level dataset (expected tu:NAME, one of {graph_names()}, or "
        "the path of an on-disk graph dataset folder such as ./molpcba)"
    )


__all__ = ["graph_names", "load_graphs"]

"""Datasets: one entry point, :func:`load`, returning a :class:`Dataset`.

==================================  =============================================
name                                source
==================================  =============================================
``cora``, ``citeseer``, ``pubmed``  Planetoid files (downloaded, sha256-checked)
``ogbn-arxiv``, ``ogbn-products``,  the ``ogb`` package (optional extra
``ogbn-papers100M``                 ``sparsegcn[ogb]``) with its official splits
``synthetic:<preset>``              degree-corrected SBM generated locally
a folder path                       the on-disk format (:mod:`.ondisk`),
                                    memory-mapped
==================================  =============================================

:func:`save` writes any dataset in the on-disk format; :mod:`.convert`
streams OGB's raw files into it, and :mod:`.synthetic_disk` generates the
synthetic presets straight into it.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparsegcn.datasets.base import DATA_ROOT_ENV, SPLITS, Dataset, default_root

PLANETOID = ("cora", "citeseer", "pubmed")
OGB = ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M")
SYNTHETIC_PREFIX = "synthetic:"


def names() -> list[str]:
    """Every name :func:`load` accepts (synthetic ones as ``synthetic:<preset>``)."""
    from sparsegcn.datasets.synthetic import PRESETS

    return [*PLANETOID, *OGB, *(SYNTHETIC_PREFIX + p for p in PRESETS)]


def load(
    name: str,
    root: str | Path | None = None,
    *,
    scale: float = 1.0,
    seed: int = 0,
    download: bool = True,
    progress: bool = False,
    verify: bool = False,
) -> Dataset:
    """Loads a dataset by name, or from an on-disk dataset folder.

    Args:
      name: see the module table; ``synthetic:<preset>`` for generated graphs;
        a folder holding a ``manifest.json`` for the on-disk format (a name
        containing a path separator is always read as a folder).
      root: data root; defaults to ``$SPARSEGCN_DATA`` or ``./datasets``.
        Planetoid files live in ``<root>/planetoid/``, OGB datasets in
        ``<root>/ogbn_arxiv/`` etc. exactly as ``ogb`` lays them out, and
        synthetic caches in ``<root>/synthetic/``.
      scale: shrink factor for synthetic presets (nodes and edges scale together).
      seed: generator seed for synthetic presets.
      download: fetch missing files from the canonical source (Planetoid, OGB).
      progress: show progress bars for downloads and generation.
      verify: for an on-disk folder, check every file's sha256 too
        (:func:`~sparsegcn.datasets.ondisk.load_ondisk`).

    Raises:
      ValueError: unknown name, or a bad ``root``/``scale``;
        :class:`~sparsegcn.datasets.ondisk.FormatError` for a bad on-disk folder.
    """
    from sparsegcn.datasets.ondisk import is_ondisk, load_ondisk

    if is_ondisk(name) or (os.sep in name and not name.startswith(SYNTHETIC_PREFIX)):
        return load_ondisk(name, verify=verify, progress=progress)
    root = default_root() if root is None else Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"root {str(root)!r} exists but is not a directory")
    if name != name.strip():
        raise ValueError(f"dataset name {name!r} has surrounding whitespace")
    if name in PLANETOID:
        from sparsegcn.datasets.planetoid import load_planetoid

        return load_planetoid(name, root, download=download, progress=progress)
    if name in OGB:
        from sparsegcn.datasets.ogb import load_ogb

        return load_ogb(name, root, download=download, progress=progress)
    if name.startswith(SYNTHETIC_PREFIX):
        from sparsegcn.datasets.synthetic import load_synthetic

        preset = name[len(SYNTHETIC_PREFIX) :]
        return load_synthetic(preset, root, scale=scale, seed=seed, progress=progress)
    raise ValueError(
        f"unknown dataset {name!r}; choose one of {names()} or an on-disk dataset folder"
    )


def data_location(name: str, root: str | Path | None = None) -> Path | None:
    """The file or folder :func:`load` reads for ``(name, root)``, found without reading it.

    What a run's outputs may not overwrite (see
    :func:`~sparsegcn.files.check_not_inputs`): an on-disk dataset's folder,
    ``<root>/planetoid``, ``<root>/ogbn_arxiv`` etc., ``<root>/synthetic``,
    ``<root>/tu/NAME``;
    ``None`` for a name :func:`load` would refuse.
    """
    from sparsegcn.datasets.ondisk import is_ondisk
    from sparsegcn.datasets.tu import TU_PREFIX

    if is_ondisk(name) or (os.sep in name and not name.startswith(SYNTHETIC_PREFIX)):
        return Path(name)
    root = default_root() if root is None else Path(root)
    if name in PLANETOID:
        return root / "planetoid"
    if name in OGB:
        return root / name.replace("-", "_")
    if name.startswith(SYNTHETIC_PREFIX):
        return root / "synthetic"
    if name.startswith(TU_PREFIX):
        return root / "tu" / name[len(TU_PREFIX) :]
    return None


def save(dataset: Dataset, path, **kwargs):
    """Writes ``dataset`` to folder ``path`` in the on-disk format; see
    :func:`sparsegcn.datasets.ondisk.save` for the keywords."""
    from sparsegcn.datasets.ondisk import save as save_ondisk

    return save_ondisk(dataset, path, **kwargs)


__all__ = [
    "DATA_ROOT_ENV",
    "OGB",
    "PLANETOID",
    "SPLITS",
    "Dataset",
    "default_root",
    "load",
    "names",
    "save",
]

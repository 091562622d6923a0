"""Datasets: one entry point, :func:`load`, returning a :class:`Dataset`.

==================================  =============================================
name                                source
==================================  =============================================
``cora``, ``citeseer``, ``pubmed``  Planetoid files (downloaded, sha256-checked)
``ogbn-arxiv``, ``ogbn-products``,  the ``ogb`` package (optional extra
``ogbn-papers100M``                 ``sparsegcn[ogb]``) with its official splits
``ogbn-proteins``                   OGB's raw files read with pandas (:mod:`.proteins`)
``synthetic:<preset>``              degree-corrected SBM generated locally
``ogbl-*``, ``synthetic:collab``,   link prediction: :func:`.links.load_links`
``synthetic:citation2``             (a :class:`.links.LinkDataset`)
``synthetic:proteins``              ogbn-proteins' twin (:mod:`.proteins`)
a folder path                       the on-disk format (:mod:`.ondisk`),
                                    memory-mapped
==================================  =============================================

Names mean one thing (:func:`is_path`): a registered name is never read as a
folder, even where a folder of that name exists, and a folder is named by a
path that looks like one: it contains a ``/`` (or the platform's
separator), or starts with ``.``, ``/`` or ``~`` (``./cora``, ``data/cora``,
``~/cora``).

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
#: OGB link-prediction datasets (:mod:`.ogbl`), loaded by :func:`.links.load_links`.
OGBL = ("ogbl-collab", "ogbl-citation2", "ogbl-ddi", "ogbl-ppa")
#: Synthetic link-prediction presets (:mod:`.synthetic_links`): ``synthetic:collab`` etc.
SYNTHETIC_LINKS = ("collab", "citation2")
SYNTHETIC_PREFIX = "synthetic:"
TU_PREFIX = "tu:"  # graph-classification datasets (:mod:`.tu`)
OGBG_PREFIX = "ogbg-"  # OGB graph-property datasets read from OGB's raw files (:mod:`.ogbg`)
#: Generated twins of ogbg-molhiv and ogbg-molpcba at full size (:mod:`.synthetic_graphs`).
SYNTHETIC_GRAPHS = ("synthetic:molhiv", "synthetic:molpcba")
#: Names with these prefixes are registered names, never paths (``tu:MUTAG``).
REGISTERED_PREFIXES = (SYNTHETIC_PREFIX, TU_PREFIX)


def names() -> list[str]:
    """Every name :func:`load` accepts (synthetic ones as ``synthetic:<preset>``)."""
    from sparsegcn.datasets.proteins import PROTEINS, SYNTHETIC_PROTEINS
    from sparsegcn.datasets.synthetic import PRESETS

    return [
        *PLANETOID,
        *OGB,
        *(SYNTHETIC_PREFIX + p for p in PRESETS),
        PROTEINS,
        SYNTHETIC_PROTEINS,
    ]


def is_path(name: str) -> bool:
    """Whether ``name`` names a folder rather than a registered dataset.

    A path contains a separator (``/``, or the platform's own) or starts
    with ``.``, ``/`` or ``~``; ``synthetic:<preset>`` and ``tu:NAME`` never are. A
    registered name (:func:`names`) never contains a separator, so the two
    cannot be confused.
    """
    if name.startswith(REGISTERED_PREFIXES):
        return False
    separators = {"/", os.sep, *([os.altsep] if os.altsep else [])}
    return name.startswith((".", "~")) or any(s in name for s in separators)


def load(
    name: str | os.PathLike,
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
        a folder holding a ``manifest.json`` for the on-disk format, named by
        a path that looks like one (:func:`is_path`: ``./cora``, not ``cora``,
        which is always the Planetoid dataset).
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

    ``scale`` and ``seed`` apply to ``synthetic:<preset>`` only, ``verify``
    to a folder only, ``root`` to a name only: given elsewhere, they are
    refused rather than ignored.

    Raises:
      TypeError: ``name`` is neither a string nor a path object.
      ValueError: unknown name, or a bad ``root``/``scale``;
        :class:`~sparsegcn.datasets.ondisk.FormatError` for a bad on-disk folder.
    """
    from sparsegcn.datasets.ondisk import is_ondisk, load_ondisk

    if isinstance(name, os.PathLike):  # a pathlib.Path is a folder, whatever it looks like
        text = str(os.fspath(name))
        name = text if is_path(text) else os.path.join(os.curdir, text)
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a string, got {name!r} ({type(name).__name__})")
    from sparsegcn.datasets.base import check_load_arguments

    check_load_arguments(root, download=download, progress=progress, verify=verify)
    _check_applies(name, root=root, scale=scale, seed=seed, verify=verify)
    if is_path(name):
        return load_ondisk(os.path.expanduser(name), verify=verify, progress=progress)
    root = default_root() if root is None else Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"root {str(root)!r} exists but is not a directory")
    if name != name.strip():
        raise ValueError(f"dataset name {name!r} has surrounding whitespace")
    if name in OGBL or name in [SYNTHETIC_PREFIX + p for p in SYNTHETIC_LINKS]:
        raise ValueError(
            f"{name!r} is a link-prediction dataset: load it with "
            f"sparsegcn.datasets.links.load_links (the link task)"
        )
    if name.startswith((TU_PREFIX, OGBG_PREFIX)) or name in SYNTHETIC_GRAPHS:
        raise ValueError(
            f"{name!r} is a graph-level dataset: load it with "
            f"sparsegcn.datasets.graphs.load_graphs (the graph task)"
        )
    if name in ("ogbn-mag", SYNTHETIC_PREFIX + "mag"):
        raise ValueError(
            f"{name!r} is a heterogeneous dataset: load it with "
            f"sparsegcn.datasets.mag.load_mag (the hetero task)"
        )
    if name in PLANETOID:
        from sparsegcn.datasets.planetoid import load_planetoid

        return load_planetoid(name, root, download=download, progress=progress)
    if name in OGB:
        from sparsegcn.datasets.ogb import load_ogb

        return load_ogb(name, root, download=download, progress=progress)
    if name == "ogbn-proteins":
        from sparsegcn.datasets.proteins import load_proteins

        return load_proteins(root, progress=progress)
    if name == "synthetic:proteins":
        from sparsegcn.datasets.proteins import load_synthetic_proteins

        return load_synthetic_proteins(scale, seed=seed)
    if name.startswith(SYNTHETIC_PREFIX):
        from sparsegcn.datasets.synthetic import load_synthetic

        preset = name[len(SYNTHETIC_PREFIX) :]
        return load_synthetic(preset, root, scale=scale, seed=seed, progress=progress)
    hint = ""
    if is_ondisk(name):
        hint = f" (a folder is named by a path: write ./{name} for the on-disk dataset there)"
    raise ValueError(
        f"unknown dataset {name!r}; choose one of {names()} or the path of an on-disk "
        f"dataset folder{hint}"
    )


def _check_applies(name: str, **given) -> None:
    """Refuses a keyword of :func:`load` that would do nothing for dataset ``name``
    (as :data:`sparsegcn.experiment.config.APPLIES` does for training options)."""
    synthetic, path = name.startswith(SYNTHETIC_PREFIX), is_path(name)
    rules = {
        # keyword: (does nothing unless, value that asks for nothing, applies to)
        "scale": (synthetic, 1.0, "generated datasets (synthetic:<preset>)"),
        "seed": (synthetic, 0, "generated datasets (synthetic:<preset>)"),
        "verify": (
            path,
            False,
            "on-disk dataset folders (Planetoid and OGB files are "
            "checked against their sha256 on every download or load)",
        ),
        "root": (not path, None, "datasets named by name (a folder path is read as it is)"),
    }
    for key, (applies, unset, where) in rules.items():
        value = given[key]
        if not applies and value is not unset and value != unset:
            raise ValueError(f"{key}={value!r} applies only to {where}, not {name!r}")


def data_location(name: str, root: str | Path | None = None) -> Path | None:
    """The file or folder :func:`load` reads for ``(name, root)``, found without reading it.

    What a run's outputs may not overwrite (see
    :func:`~sparsegcn.files.check_not_inputs`): an on-disk dataset's folder,
    ``<root>/planetoid``, ``<root>/ogbn_arxiv`` etc. (``ogbn-mag`` and the
    ``ogbl-``/``ogbg-`` datasets too), ``<root>/synthetic``, ``<root>/tu/NAME``;
    ``None`` for a name no loader accepts.
    """
    if is_path(name):
        return Path(os.path.expanduser(name))
    root = default_root() if root is None else Path(root)
    if name in PLANETOID:
        return root / "planetoid"
    if name in OGB or name in OGBL or name in ("ogbn-proteins", "ogbn-mag"):
        return root / name.replace("-", "_")
    if name.startswith(SYNTHETIC_PREFIX):
        return root / "synthetic"
    if name.startswith(TU_PREFIX):
        return root / "tu" / name[len(TU_PREFIX) :]
    if name.startswith(OGBG_PREFIX):
        return root / name.replace("-", "_")
    return None


def save(dataset: Dataset, path, **kwargs):
    """Writes ``dataset`` to folder ``path`` in the on-disk format; see
    :func:`sparsegcn.datasets.ondisk.save` for the keywords."""
    from sparsegcn.datasets.ondisk import save as save_ondisk

    return save_ondisk(dataset, path, **kwargs)


__all__ = [
    "DATA_ROOT_ENV",
    "OGB",
    "OGBL",
    "PLANETOID",
    "SPLITS",
    "SYNTHETIC_LINKS",
    "Dataset",
    "default_root",
    "is_path",
    "load",
    "names",
    "save",
]

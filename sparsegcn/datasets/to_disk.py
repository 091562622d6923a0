"""Any dataset by name, written once into the on-disk format of its task.

``python -m sparsegcn.datasets.to_disk NAME --out DIR`` loads ``NAME`` as
``sparsegcn train`` would (generated, read from OGB's raw files, or from
another folder) and writes it where later runs memory-map it with
``--dataset DIR``:

=====================================  =========================================================
task of ``NAME``                       written by
=====================================  =========================================================
``node`` (``synthetic:arxiv``, ...)    :func:`sparsegcn.datasets.ondisk.save`
``node-multilabel``                    the same format with ``multilabel`` labels ``[N, T]``
(``synthetic:proteins``)               and the edge features
``hetero`` (``synthetic:mag``,         :func:`sparsegcn.datasets.ondisk_hetero.save_hetero`
``ogbn-mag``)
``graph`` (``tu:*``, ``ogbg-*``,       :func:`sparsegcn.datasets.ondisk_graphs.save_graphs`
``synthetic:molpcba``)
=====================================  =========================================================

The dataset is built in RAM first (as the in-memory loaders build it), so
the peak memory is theirs plus the save's sort of the edges (node
formats); for graphs too large for that, the streaming writers
(:mod:`sparsegcn.datasets.convert`, :mod:`sparsegcn.datasets.synthetic_disk`)
write the node format in bounded memory. Link-prediction datasets have no
on-disk format and are refused.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sparsegcn.datasets import data_location, load
from sparsegcn.files import check_inputs_outside, check_not_inputs

#: ``{task: on-disk format}`` of what :func:`save_to_disk` writes.
FORMATS = {
    "node": "sparsegcn-graph",
    "node-multilabel": "sparsegcn-graph",
    "hetero": "sparsegcn-hetero",
    "graph": "sparsegcn-graphs",
}


def save_to_disk(
    name: str,
    out,
    *,
    root=None,
    scale: float = 1.0,
    seed: int = 0,
    overwrite: bool = False,
    progress: bool = False,
) -> Path:
    """Loads dataset ``name`` and writes it to folder ``out`` in its task's format.

    Args:
      name: a dataset name or folder path, as ``--dataset`` takes it.
      out: the folder to write (checked before anything is loaded).
      root: the data root, for names read from files.
      scale, seed: for generated datasets (``synthetic:*``).
      overwrite: replace ``out`` if it is a dataset folder of that format.
      progress: progress messages while loading.

    Returns:
      ``Path(out)``.

    Raises:
      ValueError: a link-prediction dataset, an output that is the input,
        holds it (or the cache it is generated into), is a mount point or a
        non-empty folder without ``overwrite``, ``scale`` for a dataset
        that is not generated; whatever the loader and writer raise.
    """
    from sparsegcn.datasets.ondisk import _check_target
    from sparsegcn.tasks import task_name

    task = task_name(name)
    if task not in FORMATS:
        raise ValueError(
            f"{name!r} is a {task} dataset, which has no on-disk format; the formats store "
            f"the datasets of the tasks {sorted(FORMATS)}"
        )
    path = Path(out)
    inputs = [("the dataset", data_location(name, root))]
    check_not_inputs({"--out": path}, inputs)
    # A cache made on first use (<root>/synthetic) inside --out would make --out not a
    # dataset folder by the time the result is renamed over it.
    check_inputs_outside({"--out": path}, inputs)
    from sparsegcn.datasets import ondisk_graphs, ondisk_hetero

    written = {"hetero": ondisk_hetero.written_key, "graph": ondisk_graphs.written_key}
    if task in written:
        _check_target(path, overwrite, FORMATS[task], written[task])
    else:
        _check_target(path, overwrite, FORMATS[task])
    if task == "hetero":
        from sparsegcn.datasets.mag import load_mag
        from sparsegcn.datasets.ondisk_hetero import save_hetero

        hetero = load_mag(name, root, scale=scale, seed=seed, progress=progress)
        return save_hetero(hetero, path, overwrite=overwrite)
    if task == "graph":
        from sparsegcn.datasets.graphs import load_graphs
        from sparsegcn.datasets.ondisk_graphs import save_graphs

        if scale != 1.0:
            raise ValueError(f"scale={scale!r} does not apply to graph datasets such as {name!r}")
        graphs = load_graphs(name, root, seed=seed, progress=progress)
        return save_graphs(graphs, path, overwrite=overwrite)
    from sparsegcn.datasets.ondisk import save

    dataset = load(name, root, scale=scale, seed=seed, progress=progress)
    return save(dataset, path, overwrite=overwrite, progress=progress)


def main(argv=None) -> int:
    """``python -m sparsegcn.datasets.to_disk NAME --out DIR [--scale S] [--seed N]``."""
    from sparsegcn.cli.options import OneLineParser

    parser = OneLineParser(
        prog="python -m sparsegcn.datasets.to_disk",
        description="Load a dataset by name and write it in its task's on-disk format.",
    )
    parser.add_argument("name", help="dataset name (synthetic:mag, ogbn-proteins, ...) or folder")
    parser.add_argument("--out", required=True, help="the dataset folder to write")
    parser.add_argument("--root", default=None, help="data root (names read from files)")
    parser.add_argument("--scale", type=float, default=1.0, help="synthetic shrink factor")
    parser.add_argument("--seed", type=int, default=0, help="synthetic generator seed")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace --out if it is a sparsegcn dataset folder"
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    from sparsegcn.cli import run_tool
    from sparsegcn.cli.options import check_paths, expand_home

    args = expand_home(parser.parse_args(argv))

    def work():
        check_paths({"--out": args.out, "--root": args.root})
        return save_to_disk(
            args.name,
            args.out,
            root=args.root,
            scale=args.scale,
            seed=args.seed,
            overwrite=args.overwrite,
            progress=not args.no_progress,
        )

    return run_tool(parser.prog, work, debug=args.debug)


__all__ = ["FORMATS", "main", "save_to_disk"]

if __name__ == "__main__":
    sys.exit(main())

"""Synthetic presets generated straight to disk, streaming, in bounded memory.

:func:`sparsegcn.datasets.synthetic.generate` holds the whole graph in RAM
(for full ``synthetic:papers100M``, over 100 GB). :func:`generate_to_disk`
draws the same model (:mod:`sparsegcn.datasets.sbm`: the same node model,
the same edge draws, the same features, labels and splits for a seed) and
writes the on-disk format (:mod:`sparsegcn.datasets.ondisk`) piece by
piece:

1. **Nodes.** :func:`sbm.block_model`: about ``32`` bytes per node kept
   (``64`` at its peak), 7.1 GB at papers100M size.
2. **Pairs.** Each pool (same-class, cross-class) is drawn in the rounds of
   :func:`sbm.sample_pairs` (same draws, same round sizes), but each
   chunk's canonical keys ``lo * N + hi`` (``lo < hi``) are appended to one
   of ``P`` temporary files by the range of ``lo``. A pair lands in one
   file only, so de-duplicating file by file is exact; after each round
   each file is merged into its sorted distinct keys and the new pairs are
   counted. The surplus of the last round is dropped by a keyed hash
   (the ``surplus`` pairs of smallest hash): a uniformly random subset that
   does not depend on ``P``, so the output depends on the seed alone.
3. **CSR.** Receiver bucket ``b`` holds the forward edges ``hi -> lo`` of
   pair file ``b`` (their keys already read ``receiver * N + sender``) and
   the reversed edges ``lo -> hi`` of every pair file ``<= b`` with ``hi``
   in ``b``; so one sweep in ``b`` order appends the reverses to later
   buckets and writes bucket ``b``, sorted, into ``indices``/``indptr``.
4. **Features** block by block with :func:`sbm.class_features`'s streams
   (bit-identical to the in-memory generator's), **labels and splits** as
   :func:`~sparsegcn.datasets.synthetic.generate` draws them.

Memory is bounded by design, not by measurement: the node arrays
(``64 N``) plus the larger of one chunk of draws (``128`` bytes per draw,
2M draws) and one bucket's sort (``40`` bytes per directed edge, at most
``group_edges``); :func:`stream_bytes` gives the figure (9.1 GiB at full
papers100M size with the default ``group_edges``, within the 16 GB asked). Temporary disk: the
pair files (8 bytes per pair, plus the round's fresh draws), then reversed
edges waiting for their bucket.

Edges are distinct unordered non-loop pairs, ``round(h E)`` of them
same-class (as :func:`sbm.sample_pairs`), stored in both directions:
``2E`` directed edges.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from sparsegcn import _checks
from sparsegcn.datasets import sbm
from sparsegcn.datasets.ondisk import _HASH_BLOCK, FEATURE_DTYPES, DatasetWriter
from sparsegcn.datasets.synthetic import (
    GENERATOR,
    PRESETS,
    SyntheticSpec,
    _check_class_sizes,
    _draw_splits,
)
from sparsegcn.files import (
    check_work_folder,
    close_all,
    discard_temp_folder,
    naming_errors,
    release_pages,
    save_array,
    temp_folder,
    write_array,
)

GROUP_EDGES = 1 << 26
"""Default bound on the directed edges one bucket sorts at once."""
_BUCKETS_PER_GROUP = 4  # expected bucket = group_edges / 4: room for random imbalance
_HASH_BITS = 16  # histogram bins (top bits) for the surplus threshold


def stream_bytes(spec: SyntheticSpec, group_edges: int = GROUP_EDGES) -> int:
    """Peak host memory of :func:`generate_to_disk` by design, in bytes.

    ``64 N`` for the node model at its peak (classes, order, cdf, guide and
    their temporaries; later the labels, split permutation and feature
    block), plus the largest working set of one step: a chunk of edge
    draws (``128`` bytes per draw, as :func:`sbm.sampling_bytes`, at most
    2M draws), one bucket's sort (int64 keys, their sort and the row ids:
    ``40`` bytes per directed edge, at most ``group_edges``), one feature
    block, or the 16 MB read buffer of the checksums. Measured with
    tracemalloc at 111k nodes: draws 120 MB (estimate 217 MB), CSR 103 MB
    (estimate 129 MB), node model 6.2 MB (estimate 7.1 MB).
    """
    e = spec.num_edges
    chunk = min(e + e // 20 + 64, sbm.EDGE_BLOCK * sbm._CHUNK_BLOCKS)
    steps = (
        128 * chunk,
        40 * min(group_edges, 2 * e),
        16 * sbm.NODE_BLOCK * spec.num_features,
        2 * _HASH_BLOCK,
    )
    return 64 * spec.num_nodes + max(steps)


def disk_bytes(spec: SyntheticSpec, features_dtype: str = "float32") -> int:
    """Bytes of the finished dataset folder (the manifest aside).

    During generation the temporary pair files add at most about ``16``
    bytes per pair while the features are not yet written, so the finished
    folder is also the peak: 42.2 GB for full papers100M with float16
    features (and 70.6 GB with float32).
    """
    n, e = spec.num_nodes, spec.num_edges
    split = sum(spec.split_sizes()[k] for k in ("train", "valid", "test"))
    item = np.dtype(features_dtype).itemsize
    return 8 * (n + 1) + 4 * 2 * e + item * n * spec.num_features + 8 * n + 8 * split


def _splitmix(keys: np.ndarray, salt: int) -> np.ndarray:
    """A 64-bit mix of ``keys`` (uint64 arithmetic wraps): random priorities for trimming."""
    z = keys.astype(np.uint64) + np.uint64(salt)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class _PairFiles:
    """Per-``lo``-range files of sorted distinct pair keys, one set per pool."""

    def __init__(self, folder: Path, num_nodes: int, count: int):
        self.folder, self.n = folder, num_nodes
        self.width = -(-num_nodes // count)
        self.count = -(-num_nodes // self.width)

    def path(self, kind: str, b: int | np.integer) -> Path:
        return self.folder / f"{kind}{b:05d}.bin"

    def append(self, keys: np.ndarray, rows: np.ndarray, handles) -> None:
        """Appends each key to the open file of its row's range."""
        bucket = rows // self.width
        order = np.argsort(bucket, kind="stable")
        counts = np.bincount(bucket, minlength=self.count)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        keys = keys[order]
        for b in np.flatnonzero(counts):
            write_array(handles[b], keys[bounds[b] : bounds[b + 1]])

    def read(self, kind: str, b: int | np.integer) -> np.ndarray:
        path = self.path(kind, b)
        return np.fromfile(path, np.int64) if path.exists() else np.zeros(0, np.int64)


def _draw_pool(model, files: _PairFiles, same: bool, count: int, seed: int, bar) -> int:
    """Exactly ``count`` distinct pairs of one pool into ``files`` (kind ``same``/``cross``).

    The rounds and their sizes are :func:`sbm._sample_pool`'s; so are the
    draws. Returns the largest file in keys.
    """
    kind = "same" if same else "cross"
    n = model.num_nodes
    known = np.zeros(files.count, np.int64)
    draws = count + count // 20 + 64
    round_ = 0
    while known.sum() < count:
        if round_ == sbm._MAX_ROUNDS:
            raise RuntimeError(f"placed only {known.sum()} of {count} {kind} pairs")
        bar.total += draws
        bar.refresh()
        handles = [open(files.path("new", b), "wb") for b in range(files.count)]  # noqa: SIM115
        try:
            sizes = [min(sbm.EDGE_BLOCK, draws - s) for s in range(0, draws, sbm.EDGE_BLOCK)]
            for first in range(0, len(sizes), sbm._CHUNK_BLOCKS):
                last = min(first + sbm._CHUNK_BLOCKS, len(sizes))
                blocks = [(b, sizes[b]) for b in range(first, last)]
                keys = sbm._draw_chunk(model, same, seed, round_, blocks)
                files.append(keys, keys // n, handles)
                bar.update(sum(m for _, m in blocks))
        finally:
            close_all(handles)  # the buffered tails: a full disk raises here
        gained = 0
        for b in range(files.count):
            fresh = files.read("new", b)
            fresh.sort()
            merged, new = sbm._merge_new(files.read(kind, b), sbm._distinct_sorted(fresh))
            del fresh
            save_array(files.path(kind, b), merged)
            files.path("new", b).unlink()
            known[b] = merged.shape[0]
            gained += new
        rate = gained / draws
        missing = count - int(known.sum())
        draws = min(math.ceil(missing / max(rate, 1e-3) * 1.1) + 64, 2 * count + 64)
        round_ += 1
    _trim(files, kind, known, int(known.sum()) - count, seed, same)
    return int(known.max(initial=0))


def _trim(files: _PairFiles, kind: str, sizes: np.ndarray, surplus: int, seed: int, same: bool):
    """Drops the ``surplus`` keys of smallest hash, over all files (a uniform random subset)."""
    if surplus == 0:
        return
    salt = int(sbm.stream(seed, sbm.TRIM_STREAM, int(same)).integers(0, 2**63))
    shift = np.uint64(64 - _HASH_BITS)
    histogram = np.zeros(1 << _HASH_BITS, np.int64)
    for b in np.flatnonzero(sizes).tolist():
        top = _splitmix(files.read(kind, b), salt) >> shift
        histogram += np.bincount(top.astype(np.int64), minlength=histogram.shape[0])
    cumulative = np.cumsum(histogram)
    cut = int(np.searchsorted(cumulative, surplus))  # the bin holding the surplus-th hash
    below = int(cumulative[cut - 1]) if cut else 0
    candidates = []
    for b in np.flatnonzero(sizes).tolist():
        h = _splitmix(files.read(kind, b), salt)
        candidates.append(h[(h >> shift) == np.uint64(cut)])
    in_bin = np.sort(np.concatenate(candidates))
    threshold = in_bin[surplus - below - 1]  # hashes are distinct with overwhelming odds
    for b in np.flatnonzero(sizes).tolist():
        keys = files.read(kind, b)
        save_array(files.path(kind, b), keys[_splitmix(keys, salt) > threshold])


def generate_to_disk(
    spec: SyntheticSpec | str,
    out,
    *,
    scale: float = 1.0,
    seed: int = 0,
    features_dtype: str = "float32",
    overwrite: bool = False,
    progress: bool = False,
    group_edges: int = GROUP_EDGES,
    tmp_dir=None,
) -> Path:
    """Generates a synthetic preset straight into an on-disk dataset folder.

    Args:
      spec: a ``sparsegcn.datasets.synthetic.PRESETS`` name or a spec.
      out: the folder to write (refused if non-empty, unless ``overwrite``).
      scale: in ``(0, 1]``, applied to ``spec`` (nodes, edges, splits).
      seed: non-negative int; a seed defines the output bit for bit,
        whatever ``group_edges``.
      features_dtype: ``"float32"`` or ``"float16"`` (half the disk).
      overwrite: replace ``out`` if it is a sparsegcn dataset folder (never a
        folder holding anything else).
      progress: tqdm bars.
      group_edges: bound on the directed edges sorted at once (memory, see
        :func:`stream_bytes`).
      tmp_dir: folder for the temporary pair files (default: beside ``out``).

    Returns:
      ``Path(out)``. Its manifest's ``info`` records the generator, spec,
      seed, edge homophily and ``max_bucket_edges`` (the most directed
      edges any bucket sorted, ``<= group_edges`` by design).

    Raises:
      ValueError: bad ``scale``/``seed``/``features_dtype``, a graph too
        dense for its nodes, a non-empty ``out`` or one that is a mount
        point, or a ``tmp_dir`` that is (or lies inside) ``out``.
    """
    if isinstance(spec, str):
        if spec not in PRESETS:
            raise ValueError(f"unknown synthetic preset {spec!r}; choose one of {list(PRESETS)}")
        spec = PRESETS[spec]
    if not isinstance(spec, SyntheticSpec):
        raise TypeError(f"spec must be a SyntheticSpec or preset name, got {type(spec).__name__}")
    spec = spec.scaled(scale)
    seed = _checks.check_static_int("seed", seed)
    group_edges = _checks.check_static_int("group_edges", group_edges, minimum=1)
    if features_dtype not in FEATURE_DTYPES:
        raise ValueError(f"features_dtype must be one of {FEATURE_DTYPES}, got {features_dtype!r}")
    sizes = spec.split_sizes()
    _check_class_sizes(spec)
    out = Path(out)
    if tmp_dir is not None:  # pair files inside out: left there by a kill -9
        tmp_dir = check_work_folder(
            tmp_dir, what="tmp_dir (--tmp-dir)", outside={"out (--out)": out}
        )
    n, e = spec.num_nodes, spec.num_edges
    writer = DatasetWriter(
        out,
        num_nodes=n,
        num_stored_edges=2 * e,
        num_features=spec.num_features,
        features_dtype=features_dtype,
        overwrite=overwrite,
    )
    with writer, naming_errors(out):  # a full disk names the dataset, not a bucket file
        model = sbm.block_model(
            n,
            e,
            spec.num_classes,
            degree_exponent=spec.degree_exponent,
            imbalance=spec.class_imbalance,
            seed=seed,
        )
        same_capacity = model.pair_capacity()[0]
        num_same = min(round(spec.homophily * e), same_capacity // 4)
        if sbm.too_dense(model.pair_capacity(), e, spec.homophily) is not None:
            raise ValueError(
                f"{e} edges on {n} nodes is too dense for this generator: use a larger scale"
            )
        work = temp_folder(tmp_dir or out.parent, out.name, "pairs")
        # A full --tmp-dir names the pair files' folder, not --out (a full --out is found
        # before: the writer reserves its files' blocks).
        try:
            with naming_errors(f"the temporary pair files in {work.parent}"):
                buckets = max(1, math.ceil(_BUCKETS_PER_GROUP * 2 * e / group_edges))
                files = _PairFiles(work, n, buckets)
                with tqdm(total=0, disable=not progress, unit="draw", desc="edges") as bar:
                    _draw_pool(model, files, True, num_same, seed, bar)
                    _draw_pool(model, files, False, e - num_same, seed, bar)
                classes = model.labels
                del model
                max_bucket = _write_csr(writer, files, progress)
        finally:
            discard_temp_folder(work)
        _write_features(writer, classes, spec, seed, progress)
        labels, split = _draw_splits(spec, sizes, classes, seed)
        del classes
        writer.labels[:] = labels
        del labels
        for key, ids in split.items():
            writer.write_split(key, ids)
        info = {
            "source": "synthetic degree-corrected stochastic block model, streamed to disk",
            "generator": GENERATOR,
            "preset": spec.name,
            "scale": spec.scale,
            "seed": seed,
            "spec": dataclasses.asdict(spec),
            "directed": spec.directed,
            "homophily": spec.homophily,
            "edge_homophily": num_same / max(e, 1),
            "degree_exponent": spec.degree_exponent,
            "feature_signal": spec.feature_signal,
            "features": "class-conditional Gaussian, signed: row-normalizing them destroys the signal",
            "group_edges": group_edges,
            "max_bucket_edges": max_bucket,
        }
        return writer.finish(
            name=f"synthetic:{spec.name}",
            num_edges=e,
            num_classes=spec.num_classes,
            info=info,
            progress=progress,
        )


def _write_csr(writer: DatasetWriter, files: _PairFiles, progress: bool) -> int:
    """One sweep over the buckets: see step 3 of the module docstring. Returns the
    most directed edges one bucket held."""
    n = files.n
    handles = [open(files.path("reverse", b), "wb") for b in range(files.count)]  # noqa: SIM115
    offset, largest = 0, 0
    writer.indptr[0] = 0
    try:
        for b in tqdm(range(files.count), disable=not progress, desc="CSR", unit="bucket"):
            pairs = np.concatenate([files.read("same", b), files.read("cross", b)])
            files.path("same", b).unlink(missing_ok=True)
            files.path("cross", b).unlink(missing_ok=True)
            lo, hi = np.divmod(pairs, n)
            files.append(hi * n + lo, hi, handles)
            del lo, hi
            handles[b].close()
            keys = np.concatenate([pairs, files.read("reverse", b)])
            files.path("reverse", b).unlink()
            del pairs
            keys.sort()
            largest = max(largest, keys.shape[0])
            rows = keys // n
            r0, r1 = b * files.width, min((b + 1) * files.width, n)
            writer.indices[offset : offset + keys.shape[0]] = keys - rows * n
            writer.indptr[r0 + 1 : r1 + 1] = offset + np.cumsum(
                np.bincount(rows - r0, minlength=r1 - r0)
            )
            # Written pages of the maps would stay in the RSS until the end.
            release_pages(writer.indices, offset, offset + keys.shape[0])
            release_pages(writer.indptr, r0, r1 + 1)
            offset += keys.shape[0]
            del keys, rows
    finally:
        close_all(handles)
    if offset != writer.indices.shape[0]:
        raise AssertionError(f"wrote {offset} edges, expected {writer.indices.shape[0]}")
    return largest


def _write_features(writer, classes, spec: SyntheticSpec, seed: int, progress: bool) -> None:
    """:func:`sbm.class_features`, block by block into the file (same streams, same values)."""
    f = spec.num_features
    means = sbm.stream(seed, sbm.MEAN_STREAM).standard_normal((spec.num_classes, f))
    means = (means * (spec.feature_signal / math.sqrt(f))).astype(np.float32)
    block = np.empty((sbm.NODE_BLOCK, f), np.float32)
    n = classes.shape[0]
    with tqdm(total=n, disable=not progress, unit="node", desc="features") as bar:
        for b, start in enumerate(range(0, n, sbm.NODE_BLOCK)):
            rows = block[: min(sbm.NODE_BLOCK, n - start)]
            sbm.stream(seed, sbm.FEATURE_STREAM, b).standard_normal(out=rows, dtype=np.float32)
            rows += means[classes[start : start + rows.shape[0]]]
            writer.features[start : start + rows.shape[0]] = rows.astype(writer.features.dtype)
            release_pages(writer.features, start, start + rows.shape[0])
            bar.update(rows.shape[0])


def main(argv=None) -> int:
    """``python -m sparsegcn.datasets.synthetic_disk PRESET --out PATH [--scale S]``."""
    from sparsegcn.cli.options import OneLineParser

    parser = OneLineParser(
        prog="python -m sparsegcn.datasets.synthetic_disk",
        description="Generate a synthetic preset straight into sparsegcn's on-disk format.",
    )
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("--out", required=True, help="the dataset folder to write")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--features-dtype", choices=FEATURE_DTYPES, default="float32")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--group-edges", type=int, default=GROUP_EDGES)
    parser.add_argument("--tmp-dir", default=None)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    from sparsegcn.cli import run_tool
    from sparsegcn.cli.options import check_paths, expand_home

    args = expand_home(parser.parse_args(argv))

    def work():
        check_paths({"--out": args.out, "--tmp-dir": args.tmp_dir})
        return generate_to_disk(
            args.preset,
            args.out,
            scale=args.scale,
            seed=args.seed,
            features_dtype=args.features_dtype,
            overwrite=args.overwrite,
            progress=not args.no_progress,
            group_edges=args.group_edges,
            tmp_dir=args.tmp_dir,
        )

    return run_tool(parser.prog, work, debug=args.debug)


__all__ = ["GROUP_EDGES", "disk_bytes", "generate_to_disk", "main", "stream_bytes"]

if __name__ == "__main__":
    sys.exit(main())

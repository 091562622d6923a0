"""Synthetic OGB-sized datasets: a degree-corrected SBM with Gaussian features.

Each preset copies the published size of an OGB node-property dataset (nodes,
edges, feature width, classes, split sizes) so the engine can be exercised
at that scale with no download; the graph itself is drawn from the model in
:mod:`sparsegcn.datasets.sbm`. ``tiny`` is a Cora-sized graph, generated in
milliseconds and never cached: the default dataset of ``sparsegcn train``.

Every graph holds exactly the preset's edge count as distinct node pairs,
without self-loops; the stored :class:`~sparsegcn.Graph` is the symmetric one
models train on (``2 * num_edges`` directed edges, sorted by receiver then
sender). :func:`load_synthetic` caches generated datasets as ``.npy`` files
that later loads memory-map.

References:
  Hu et al., *Open Graph Benchmark: Datasets for Machine Learning on
  Graphs*, NeurIPS 2020 (the published statistics). https://arxiv.org/abs/2005.00687
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import shutil
from pathlib import Path

import numpy as np

from sparsegcn import _checks
from sparsegcn.datasets import sbm
from sparsegcn.datasets.base import SPLITS, Dataset, may_write_cache
from sparsegcn.files import (
    check_writable,
    discard_temp_folder,
    json_text,
    load_npy,
    naming_errors,
    read_json,
    save_npy,
    temp_folder,
)
from sparsegcn.graph import Graph

GENERATOR = "dcsbm-1"  # bump when a seed's output changes: older caches are then refused
MANIFEST = "manifest.json"
_ARRAYS = ("senders", "receivers", "features", "labels", *SPLITS)
_NEVER_CACHED = ("tiny",)


@dataclasses.dataclass(frozen=True)
class SyntheticSpec:
    """What to generate: sizes, split protocol and model parameters.

    Attributes:
      name: preset name.
      num_nodes: ``N``.
      num_edges: ``E`` as the publisher counts it; the stored symmetric graph
        holds ``2E`` directed edges either way.
      directed: whether the publisher's ``E`` counts directed edges (arxiv,
        papers100M: generated as ``E`` pairs none of which is reciprocated) or
        undirected pairs (products).
      num_features: ``F``.
      num_classes: ``C``.
      train_fraction, valid_fraction, test_fraction: split sizes as fractions of ``N``.
      labelled_fraction: fraction of nodes with a label (at least the splits');
        the others get label ``-1`` and appear in no split.
      train_per_class: when set, the train split takes this many nodes of
        every class (Planetoid's protocol) instead of ``train_fraction * N``.
      homophily: expected fraction of edges joining two nodes of one class.
      degree_exponent: ``γ`` of the degree distribution ``P(k) ∝ k^{-γ}``; > 2.
      feature_signal: ``s``: class means lie about ``s √2`` noise standard
        deviations apart (see :func:`sbm.class_features`).
      class_imbalance: ratio of the largest class's size to the smallest's.
      scale: the factor applied to the published sizes (see :meth:`scaled`).
    """

    name: str
    num_nodes: int
    num_edges: int
    directed: bool
    num_features: int
    num_classes: int
    train_fraction: float
    valid_fraction: float
    test_fraction: float
    labelled_fraction: float = 1.0
    train_per_class: int | None = None
    homophily: float = 0.8
    degree_exponent: float = 2.5
    feature_signal: float = 1.0
    class_imbalance: float = 4.0
    scale: float = 1.0

    def __post_init__(self):
        for name in ("num_nodes", "num_features", "num_classes"):
            _checks.check_static_int(name, getattr(self, name), minimum=1)
        _checks.check_static_int("num_edges", self.num_edges)
        if self.train_per_class is not None:
            _checks.check_static_int("train_per_class", self.train_per_class, minimum=1)
        for name in ("train_fraction", "valid_fraction", "test_fraction", "labelled_fraction"):
            _check_range(name, getattr(self, name), 0.0, 1.0)
        _check_range("homophily", self.homophily, 0.0, 1.0)
        if self.train_per_class is None:
            total = self.train_fraction + self.valid_fraction + self.test_fraction
            if total > self.labelled_fraction + 1e-9:
                raise ValueError(
                    f"split fractions sum to {total}, more than labelled_fraction="
                    f"{self.labelled_fraction}"
                )
        if not (math.isfinite(self.degree_exponent) and self.degree_exponent > 2):
            raise ValueError(f"degree_exponent must be > 2, got {self.degree_exponent}")
        if not (math.isfinite(self.feature_signal) and self.feature_signal >= 0):
            raise ValueError(f"feature_signal must be >= 0, got {self.feature_signal}")
        if not (math.isfinite(self.class_imbalance) and self.class_imbalance >= 1):
            raise ValueError(f"class_imbalance must be >= 1, got {self.class_imbalance}")
        _check_scale(self.scale)

    def scaled(self, scale: float) -> SyntheticSpec:
        """Nodes, edges and splits times ``scale`` (rounded); features, classes
        and model parameters unchanged. ``scale`` must lie in ``(0, 1]``.
        """
        scale = _check_scale(scale)
        if scale == 1.0:
            return self
        per_class = self.train_per_class
        return dataclasses.replace(
            self,
            num_nodes=max(round(self.num_nodes * scale), 1),
            num_edges=round(self.num_edges * scale),
            train_per_class=None if per_class is None else max(round(per_class * scale), 1),
            scale=self.scale * scale,
        )

    def _smallest_scale(self) -> float:
        """A scale (two significant digits) above this one at which the preset has
        a node in every split (rounding makes that not monotone in the scale)."""
        base = PRESETS.get(self.name, self)
        # Below one node's share nothing is generated: the search starts there.
        scale = max(self.scale, 1.0 / dataclasses.replace(base, scale=1.0).num_nodes)
        for _ in range(200):
            scale = min(1.0, float(f"{scale * 1.25:.2g}"))
            spec = dataclasses.replace(base, scale=1.0).scaled(scale)
            if spec._generates() or scale == 1.0:
                return scale
        return 1.0

    def _generates(self) -> bool:
        """Whether :func:`generate` makes this spec: a node in every split, the
        classes large enough for ``train_per_class``, the edges not too dense."""
        n, sizes = self.num_nodes, self.split_counts()
        classes = sbm.class_sizes(n, self.num_classes, self.class_imbalance)
        return (
            min(sizes) >= 1
            and sum(sizes) <= n
            and (self.train_per_class is None or classes.min() >= self.train_per_class)
            and sbm.too_dense(sbm.pair_capacity(classes), self.num_edges, self.homophily) is None
        )

    def split_counts(self) -> tuple[int, int, int]:
        """``(train, valid, test)`` node counts, unchecked (see :meth:`split_sizes`)."""
        n = self.num_nodes
        if self.train_per_class is None:
            fractions = (self.train_fraction, self.valid_fraction, self.test_fraction)
            bounds = np.round(n * np.cumsum(fractions)).astype(np.int64)
            train, valid, test = (int(v) for v in np.diff(bounds, prepend=0))
        else:
            train = self.train_per_class * self.num_classes
            valid, test = round(n * self.valid_fraction), round(n * self.test_fraction)
        return train, valid, test

    def split_sizes(self) -> dict:
        """``{"train", "valid", "test", "labelled"}`` node counts, each split
        at least 1 (else ``ValueError``: scaled too far).

        Fractions are rounded cumulatively, so splits that cover every node
        (ogbn-arxiv, ogbn-products) still do after scaling.
        """
        n = self.num_nodes
        train, valid, test = self.split_counts()
        for key, size in (("train", train), ("valid", valid), ("test", test)):
            if size < 1:
                raise ValueError(
                    f"synthetic:{self.name} at scale {self.scale:g} has {n} node(s) and an "
                    f"empty {key!r} split; use a larger --scale (e.g. "
                    f"{self._smallest_scale():g})"
                )
        labelled = max(round(n * self.labelled_fraction), train + valid + test)
        if labelled > n:
            raise ValueError(
                f"{self.name}: splits need {train} + {valid} + {test} nodes but there are only "
                f"{n}; use a larger --scale (e.g. {self._smallest_scale():g})"
            )
        return {"train": train, "valid": valid, "test": test, "labelled": labelled}


def _check_range(name: str, value, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    number = float(value)
    if not low <= number <= high:
        raise ValueError(f"{name} must lie in [{low}, {high}], got {value}")
    return number


def _check_scale(scale) -> float:
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number, got {scale!r}")
    number = float(scale)
    if not 0.0 < number <= 1.0:
        raise ValueError(f"scale must lie in (0, 1], got {scale}")
    return number


# Homophily: the edge homophily commonly quoted for ogbn-arxiv (0.655) and
# ogbn-products (0.808), not re-measured here (that needs the download); for
# papers100M we know no published value, and 0.6 is a guess. The degree
# exponents give heavy tails: at full size (seed 0) the largest degree is
# 4,631 for arxiv (mean 13.8) and 26,656 for products (mean 50.5). Feature
# signals make features alone informative but far from enough: a 2-layer MLP
# reaches 0.35 on arxiv at scale 0.1 (GCN 0.97) and 0.52 on tiny (GCN 0.84).
# The large presets exist to exercise the engine at scale, not to reproduce
# the published accuracies.
PRESETS: dict[str, SyntheticSpec] = {
    "arxiv": SyntheticSpec(
        name="arxiv",
        num_nodes=169_343,
        num_edges=1_166_243,
        directed=True,
        num_features=128,
        num_classes=40,
        train_fraction=90_941 / 169_343,
        valid_fraction=29_799 / 169_343,
        test_fraction=48_603 / 169_343,
        homophily=0.655,
        degree_exponent=2.5,
        feature_signal=2.0,
    ),
    "products": SyntheticSpec(
        name="products",
        num_nodes=2_449_029,
        num_edges=61_859_140,
        directed=False,
        num_features=100,
        num_classes=47,
        train_fraction=196_615 / 2_449_029,
        valid_fraction=39_323 / 2_449_029,
        test_fraction=2_213_091 / 2_449_029,
        homophily=0.808,
        degree_exponent=3.2,
        feature_signal=2.0,
    ),
    "papers100M": SyntheticSpec(
        name="papers100M",
        num_nodes=111_059_956,
        num_edges=1_615_685_872,
        directed=True,
        num_features=128,
        num_classes=172,
        train_fraction=1_207_179 / 111_059_956,
        valid_fraction=125_265 / 111_059_956,
        test_fraction=214_338 / 111_059_956,
        labelled_fraction=(1_207_179 + 125_265 + 214_338) / 111_059_956,
        homophily=0.6,
        degree_exponent=2.8,
        feature_signal=2.0,
    ),
    "tiny": SyntheticSpec(
        name="tiny",
        num_nodes=3_000,
        num_edges=12_000,
        directed=False,
        num_features=64,
        num_classes=7,
        train_fraction=140 / 3_000,
        valid_fraction=500 / 3_000,
        test_fraction=1_000 / 3_000,
        train_per_class=20,
        homophily=0.6,
        degree_exponent=2.5,
        feature_signal=2.0,
    ),
}


def estimate_bytes(spec: SyntheticSpec) -> int:
    """Peak host memory :func:`generate` needs for ``spec``, in bytes (an upper estimate).

    Three phases peak in turn: drawing the edges
    (:func:`sbm.sampling_bytes`); building the :class:`~sparsegcn.Graph`,
    whose ``2E`` int32 ids (``16E`` bytes) meet the int64 differences and
    masks of its sortedness check (measured ``65E`` in all; counted as
    ``72E``); and drawing the ``4NF`` bytes of features next to the finished
    graph. The node arrays of the model add about ``64N``.

    For full ogbn-products this gives 4.3 GiB; the measured peak is 3.7 GiB
    above the interpreter's own.
    """
    e, n = spec.num_edges, spec.num_nodes
    phases = (sbm.sampling_bytes(e), 72 * e, 16 * e + 4 * n * spec.num_features)
    return max(phases) + 64 * n


def _available_memory() -> int | None:
    """Bytes the OS can give without swapping: ``MemAvailable`` from
    ``/proc/meminfo``, else free physical pages, else ``None`` (unknown).
    """
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _check_memory(spec: SyntheticSpec) -> None:
    need, available = estimate_bytes(spec), _available_memory()
    if available is None or need <= available:
        return
    # 80% of the scale that would just fit, rounded down to one significant digit.
    fit = 0.8 * spec.scale * available / need
    magnitude = 10.0 ** math.floor(math.log10(fit))
    suggestion = math.floor(fit / magnitude) * magnitude
    raise ValueError(
        f"synthetic:{spec.name} at scale {spec.scale} needs about {need / 2**30:.1f} GiB "
        f"(graph, features and temporaries) but only {available / 2**30:.1f} GiB is available; "
        f"generate a smaller graph, e.g. --scale {suggestion:g}"
    )


def generate(spec: SyntheticSpec, *, seed: int = 0, progress: bool = False) -> Dataset:
    """Generates a dataset in memory.

    Args:
      spec: what to generate (a preset, possibly ``.scaled(...)``).
      seed: non-negative integer; a seed gives bit-identical arrays.
      progress: show tqdm progress bars.

    Returns:
      A :class:`Dataset` named ``synthetic:<name>`` whose graph is symmetric
      with ``2 * spec.num_edges`` sorted edges, features float32 ``[N, F]``,
      and ``num_edges == spec.num_edges``.

    Raises:
      ValueError: the estimated memory (:func:`estimate_bytes`) exceeds what
        is available, the graph is too dense for its node count, or a class
        is too small for ``train_per_class``.
    """
    if not isinstance(spec, SyntheticSpec):
        raise TypeError(f"spec must be a SyntheticSpec, got {type(spec).__name__}")
    seed = _checks.check_static_int("seed", seed)
    sizes = spec.split_sizes()
    _check_class_sizes(spec)
    _check_density(spec)
    _check_memory(spec)
    n = spec.num_nodes
    model = sbm.block_model(
        n,
        spec.num_edges,
        spec.num_classes,
        degree_exponent=spec.degree_exponent,
        imbalance=spec.class_imbalance,
        seed=seed,
    )
    classes = model.labels
    pairs = sbm.sample_pairs(model, spec.num_edges, spec.homophily, seed=seed, progress=progress)
    del model
    homophily = sbm.edge_homophily(pairs, classes)
    keys = sbm.symmetric_keys(pairs, n)
    del pairs
    senders, receivers = sbm.split_keys(keys, n)
    del keys
    graph = Graph(senders, receivers, None, n, edges_sorted=True)
    features = sbm.class_features(
        classes,
        spec.num_classes,
        spec.num_features,
        spec.feature_signal,
        seed=seed,
        progress=progress,
    )
    labels, split = _draw_splits(spec, sizes, classes, seed)
    info = {
        "source": "synthetic degree-corrected stochastic block model",
        "generator": GENERATOR,
        "preset": spec.name,
        "scale": spec.scale,
        "seed": seed,
        "directed": spec.directed,
        "homophily": spec.homophily,
        "edge_homophily": homophily,
        "degree_exponent": spec.degree_exponent,
        "feature_signal": spec.feature_signal,
        "features": "class-conditional Gaussian, signed: row-normalizing them destroys the signal",
    }
    return Dataset(
        name=f"synthetic:{spec.name}",
        graph=graph,
        features=features,
        labels=labels,
        split=split,
        num_classes=spec.num_classes,
        num_edges=spec.num_edges,
        info=info,
    )


def _check_density(spec: SyntheticSpec) -> None:
    """Refuses, before drawing, the edges :func:`~sparsegcn.datasets.sbm.sample_pairs`
    would refuse, with a scale at which the preset generates."""
    classes = sbm.class_sizes(spec.num_nodes, spec.num_classes, spec.class_imbalance)
    dense = sbm.too_dense(sbm.pair_capacity(classes), spec.num_edges, spec.homophily)
    if dense is not None:
        raise ValueError(
            f"synthetic:{spec.name} at scale {spec.scale:g} has {spec.num_edges} edges on "
            f"{spec.num_nodes} nodes, too dense for this generator ({dense[0]} cross-class "
            f"pairs exceed a quarter of the {dense[1]} possible); use a larger --scale (e.g. "
            f"{spec._smallest_scale():g})"
        )


def _check_class_sizes(spec: SyntheticSpec) -> None:
    if spec.train_per_class is None:
        return
    counts = sbm.class_sizes(spec.num_nodes, spec.num_classes, spec.class_imbalance)
    if counts.min() < spec.train_per_class:
        c = int(np.argmin(counts))
        raise ValueError(
            f"class {c} of synthetic:{spec.name} has {int(counts[c])} nodes, fewer than "
            f"train_per_class={spec.train_per_class}; use a larger scale"
        )


def _draw_splits(spec: SyntheticSpec, sizes: dict, classes: np.ndarray, seed: int):
    """Uniformly random disjoint splits of ``sizes`` (:meth:`SyntheticSpec.split_sizes`).

    Returns:
      ``(labels, split)``: int64 ``[N]`` labels, ``-1`` for unlabelled
      nodes, and ``{split: sorted int64 node ids}``.
    """
    n = classes.shape[0]
    order = sbm.stream(seed, sbm.SPLIT_STREAM).permutation(n)
    if spec.train_per_class is None:
        train = order[: sizes["train"]]
        rest = order[sizes["train"] :]
    else:
        counts = np.bincount(classes, minlength=spec.num_classes)
        by_class = order[np.argsort(classes[order], kind="stable")]
        rank = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
        train = by_class[rank < spec.train_per_class]
        taken = np.zeros(n, bool)
        taken[train] = True
        rest = order[~taken[order]]
    valid = rest[: sizes["valid"]]
    test = rest[sizes["valid"] : sizes["valid"] + sizes["test"]]
    extra = rest[sizes["valid"] + sizes["test"] : sizes["labelled"] - sizes["train"]]
    labels = np.full(n, -1, np.int64)
    for part in (train, valid, test, extra):
        labels[part] = classes[part]
    split = {"train": np.sort(train), "valid": np.sort(valid), "test": np.sort(test)}
    return labels, split


def cache_dir(root: str | os.PathLike, preset: str, scale: float, seed: int) -> Path:
    """``<root>/synthetic/<preset>-scale<scale>-seed<seed>`` (``scale`` as ``repr(float)``)."""
    return Path(root) / "synthetic" / f"{preset}-scale{float(scale)!r}-seed{int(seed)}"


def load_synthetic(
    preset: str,
    root: str | os.PathLike,
    *,
    scale: float = 1.0,
    seed: int = 0,
    progress: bool = False,
    cache: bool = True,
) -> Dataset:
    """Loads a synthetic preset, generating (and caching) it on first use.

    The first call writes the arrays to :func:`cache_dir` atomically (a
    temporary folder beside it, renamed into place once complete); later
    calls memory-map them. ``tiny`` is always generated in memory.

    Args:
      preset: one of :data:`PRESETS`.
      root: data root; the cache lives in ``<root>/synthetic/``.
      scale: in ``(0, 1]``; nodes, edges and splits shrink by this factor.
      seed: generator seed (non-negative integer).
      progress: show progress bars while generating.
      cache: write and reuse the on-disk cache (read, never written, inside
        :func:`~sparsegcn.datasets.base.reading_only`).

    Raises:
      ValueError: unknown preset, bad scale, not enough memory, or a cache
        folder whose files are corrupt or from another generator version.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown synthetic preset {preset!r}; choose one of {list(PRESETS)}")
    spec = PRESETS[preset].scaled(scale)
    spec.split_sizes()  # a scale that empties a split is refused, cached or not
    seed = _checks.check_static_int("seed", seed)
    if not cache or preset in _NEVER_CACHED:
        return generate(spec, seed=seed, progress=progress)
    folder = cache_dir(root, preset, scale, seed)
    if folder.exists():
        return _read_cache(folder, spec, seed)
    writes = may_write_cache()  # not while reading only (sparsegcn predict): kept in memory
    if writes:
        check_cache_writable(folder)
    dataset = generate(spec, seed=seed, progress=progress)
    if writes:
        _write_cache(folder, dataset, spec, seed)
    return dataset


def check_cache_writable(folder: Path) -> None:
    """Refuses a cache folder that could not be written, before generating what it caches.

    A read-only data root, or one of another user's, failed only when the
    generated dataset was written, after the whole graph was built. A
    temporary file is made and removed in the nearest existing folder on
    the way to ``folder`` (:func:`~sparsegcn.files.check_writable`).

    Raises:
      OSError: naming the cache folder, the folder that refused and why,
        and what to do.
    """
    try:
        check_writable(folder, what="the synthetic dataset's cache", folder=True)
    except OSError as err:
        refused = type(err)(
            f"{err}; the generated dataset is cached under the data root: pass --root a "
            f"writable folder (or make this one writable)"
        )
        refused.errno = err.errno
        raise refused from None


def _dataset_arrays(dataset: Dataset) -> dict:
    return {
        "senders": dataset.graph.senders,
        "receivers": dataset.graph.receivers,
        "features": dataset.features,
        "labels": dataset.labels,
        **dataset.split,
    }


def _save_array(path: Path, array: np.ndarray) -> None:
    save_npy(path, array)


def _fsync_dir(folder: Path) -> None:
    if os.name == "posix":  # directories cannot be opened on Windows
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _manifest(dataset: Dataset, spec: SyntheticSpec, seed: int, arrays: dict) -> dict:
    return {
        "generator": GENERATOR,
        "seed": seed,
        "spec": dataclasses.asdict(spec),
        "num_edges": dataset.num_edges,
        "info": dataset.info,
        "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in arrays.items()},
    }


def _write_cache(folder: Path, dataset: Dataset, spec: SyntheticSpec, seed: int) -> None:
    with naming_errors(folder):  # a full disk names the cache, not a temporary file
        _write_cache_files(folder, dataset, spec, seed)


def _write_cache_files(folder: Path, dataset: Dataset, spec: SyntheticSpec, seed: int) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_folder(folder.parent, folder.name)
    try:
        arrays = _dataset_arrays(dataset)
        with naming_errors(folder):  # the cache's name, not the temporary folder's
            for name, array in arrays.items():
                _save_array(tmp / f"{name}.npy", np.asarray(array))
        manifest = json_text(_manifest(dataset, spec, seed, arrays), indent=1)
        with naming_errors(folder / MANIFEST):
            publish_cache(tmp, folder, manifest)
    except BaseException:
        discard_temp_folder(tmp)
        raise


def publish_cache(tmp: Path, folder: Path, manifest: str) -> None:
    """Writes ``manifest`` (the last file) into the finished temporary cache
    folder ``tmp`` and renames it to ``folder``, both made durable.

    A concurrent call that finished the same cache first wins: ``tmp`` is
    then removed. The caller removes ``tmp`` on any error.
    """
    with open(tmp / MANIFEST, "w") as f:
        f.write(manifest)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    try:
        os.rename(tmp, folder)
    except OSError:
        if not (folder / MANIFEST).exists():
            raise
        shutil.rmtree(tmp)  # a concurrent call finished the same cache first
    _fsync_dir(folder.parent)


def read_cache_arrays(
    folder: Path, generator: str, spec, seed: int, names=None
) -> tuple[dict, dict[str, np.ndarray]]:
    """The manifest and memory-mapped arrays of the synthetic cache ``folder``.

    The manifest must name ``generator``, ``spec`` (a dataclass) and
    ``seed``, and each array the shape and dtype the manifest records.

    Args:
      names: the arrays to read (default: every one the manifest lists).

    Raises:
      ValueError: a missing, corrupt or stale manifest or array, naming the
        file and saying to delete the folder.
    """
    path = folder / MANIFEST
    hint = f"delete {folder} to regenerate it"
    try:
        manifest = read_json(path)
        listed = manifest["arrays"]
        shapes = {k: listed[k] for k in (listed if names is None else names)}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"synthetic cache manifest {path} is missing or corrupt ({err}); {hint}"
        ) from err
    if (manifest.get("generator"), manifest.get("spec"), manifest.get("seed")) != (
        generator,
        dataclasses.asdict(spec),
        seed,
    ):
        raise ValueError(
            f"synthetic cache {folder} was written for another generator version, spec or "
            f"seed (manifest {path}); {hint}"
        )
    arrays = {}
    for name, recorded in shapes.items():
        file = folder / f"{name}.npy"
        try:
            array = load_npy(file, mmap_mode="r")
        except (OSError, ValueError, EOFError) as err:
            raise ValueError(
                f"synthetic cache file {file} is missing, truncated or corrupt ({err}); {hint}"
            ) from err
        expected = (tuple(recorded["shape"]), recorded["dtype"])
        if (array.shape, str(array.dtype)) != expected:
            raise ValueError(
                f"synthetic cache file {file} holds {array.dtype} {array.shape} but the manifest "
                f"says {expected[1]} {expected[0]}; {hint}"
            )
        arrays[name] = array
    return manifest, arrays


def _read_cache(folder: Path, spec: SyntheticSpec, seed: int) -> Dataset:
    manifest, arrays = read_cache_arrays(folder, GENERATOR, spec, seed, _ARRAYS)
    graph = Graph(arrays["senders"], arrays["receivers"], None, spec.num_nodes, edges_sorted=True)
    return Dataset(
        name=f"synthetic:{spec.name}",
        graph=graph,
        features=arrays["features"],
        labels=arrays["labels"],
        split={k: arrays[k] for k in SPLITS},
        num_classes=spec.num_classes,
        num_edges=int(manifest["num_edges"]),
        info=manifest["info"],
    )

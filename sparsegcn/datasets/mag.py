"""ogbn-mag and its synthetic twin: heterogeneous node classification datasets.

``ogbn-mag`` (Hu et al. 2020, from the Microsoft Academic Graph) has four
node types and four relations; only papers have features (128-d word2vec
averages) and labels (one of 349 venues), and the split is by year (train up
to 2017, validation 2018, test 2019). :func:`load_mag_raw` reads OGB's raw
CSV layout (what ``mag.zip`` extracts to, under ``<root>/ogbn_mag``), the
files ``ogb``'s ``read_csv_heterograph_raw`` and ``read_node_label_hetero``
read, without ``ogb`` or ``torch`` (pandas parses the gzip CSVs in chunks):

- ``raw/num-node-dict.csv.gz`` (a header of node types, one row of counts);
- ``raw/triplet-type-list.csv.gz`` (one ``head,relation,tail`` per line);
- ``raw/relations/<head>___<relation>___<tail>/edge.csv.gz`` (``src,dst``
  per line) and ``num-edge-list.csv.gz``;
- ``raw/node-feat/<type>/node-feat.csv.gz`` for the featured types;
- ``raw/nodetype-has-label.csv.gz`` and ``raw/node-label/<type>/node-label.csv.gz``;
- ``split/time/nodetype-has-split.csv.gz`` and
  ``split/time/<type>/{train,valid,test}.csv.gz``.

``synthetic:mag`` generates a graph of ogbn-mag's size (:data:`MAG_NUM_NODES`,
:data:`MAG_NUM_EDGES`) in which the venue is learnable from the typed
neighbourhood (:func:`generate_mag`); ``scale`` shrinks every count, down to the
smallest that leaves every split enough papers (:meth:`MagSpec.scaled`).

References:
  Hu et al., *Open Graph Benchmark: Datasets for Machine Learning on
  Graphs*, NeurIPS 2020. https://arxiv.org/abs/2005.00687

  Wang et al., *Microsoft Academic Graph: When experts are not enough*,
  Quantitative Science Studies 1(1), 2020.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sparsegcn.datasets.hetero_dataset import MAG_CLASSES, HeteroDataset
from sparsegcn.hetero import EdgeType, HeteroGraph

MAG_NUM_NODES = {
    "author": 1_134_649,
    "field_of_study": 59_965,
    "institution": 8_740,
    "paper": 736_389,
}
"""ogbn-mag's node counts per type (``num-node-dict.csv.gz``)."""

MAG_NUM_EDGES = {
    ("author", "affiliated_with", "institution"): 1_043_998,
    ("author", "writes", "paper"): 7_145_660,
    ("paper", "cites", "paper"): 5_416_271,
    ("paper", "has_topic", "field_of_study"): 7_505_078,
}
"""ogbn-mag's raw edge counts per relation (before reverse edges)."""

MAG_SPLIT_SIZES = {"train": 629_571, "valid": 64_879, "test": 41_939}
"""Papers per split of the time split (published up to 2017, in 2018, in 2019)."""

MAG_FEATURES = 128
MIN_SPLIT_PAPERS = 10
"""The fewest validation or test papers :meth:`MagSpec.scaled` makes (an accuracy over
fewer is noise); the train split needs at least one paper per venue."""
MAG_NAMES = ("ogbn-mag", "synthetic:mag")


@dataclasses.dataclass(frozen=True)
class MagSpec:
    """What :func:`generate_mag` draws.

    Attributes:
      num_nodes: ``{type: N_t}``; must hold ``paper``, ``author``,
        ``institution`` and ``field_of_study``.
      num_edges: raw edges per relation of :data:`MAG_NUM_EDGES`.
      num_classes: venues ``C``.
      num_features: paper feature width.
      homophily: the probability that an edge joins its endpoint to a node
        of the same venue (an author's, field's or institution's home venue).
      feature_signal: the venue centroid's weight in the paper features
        (unit-variance noise on top).
      split_sizes: papers per split (by year).
    """

    num_nodes: Mapping[str, int] = dataclasses.field(default_factory=lambda: dict(MAG_NUM_NODES))
    num_edges: Mapping[EdgeType, int] = dataclasses.field(
        default_factory=lambda: dict(MAG_NUM_EDGES)
    )
    num_classes: int = MAG_CLASSES
    num_features: int = MAG_FEATURES
    homophily: float = 0.6
    feature_signal: float = 0.3
    split_sizes: Mapping[str, int] = dataclasses.field(
        default_factory=lambda: dict(MAG_SPLIT_SIZES)
    )

    def scaled(self, scale: float) -> MagSpec:
        """Every node, edge and split count times ``scale`` (at least one each, and
        at least three papers per venue).

        A scale is refused when it leaves the train split fewer papers than venues
        (some venues could not be learned) or the valid or test split fewer than
        :data:`MIN_SPLIT_PAPERS` (its accuracy would be noise), unless the split
        held fewer before scaling. At ogbn-mag's sizes the smallest scale that
        works is about ``0.00056`` (353 train, 36 valid, 23 test papers).

        Raises:
          ValueError: ``scale`` outside ``(0, 1]``, or too small (the message
            names ``--scale`` and a scale that works).
        """
        if not 0.0 < float(scale) <= 1.0:
            raise ValueError(f"scale must be in (0, 1], got {scale!r}")
        short = self._short_split(scale)
        if short is not None:
            key, papers, need = short
            why = f"its {need} venues" if key == "train" else f"{need}"
            raise ValueError(
                f"synthetic:mag at scale {scale:g} has {papers} paper(s) in the {key!r} split, "
                f"fewer than {why}; use a larger --scale (e.g. {self._smallest_scale():g})"
            )
        nodes = {t: max(1, round(n * scale)) for t, n in self.num_nodes.items()}
        nodes["paper"] = max(nodes["paper"], self.num_classes * 3)
        sizes = {k: max(1, round(v * scale)) for k, v in self.split_sizes.items()}
        edges = {k: max(1, round(v * scale)) for k, v in self.num_edges.items()}
        return dataclasses.replace(self, num_nodes=nodes, num_edges=edges, split_sizes=sizes)

    def _minimums(self) -> dict[str, int]:
        """The fewest papers :meth:`scaled` leaves in each split (never more than it holds)."""
        return {
            key: min(self.num_classes if key == "train" else MIN_SPLIT_PAPERS, int(size))
            for key, size in self.split_sizes.items()
        }

    def _short_split(self, scale: float) -> tuple[str, int, int] | None:
        """``(split, papers, minimum)`` of the first split that ``scale`` shrinks below its
        minimum, or ``None``."""
        for key, need in self._minimums().items():
            papers = max(1, round(self.split_sizes[key] * scale))
            if papers < need:
                return key, papers, need
        return None

    def _smallest_scale(self) -> float:
        """The smallest scale of two significant digits that :meth:`scaled` accepts."""
        low = max(
            (need - 0.5) / self.split_sizes[key]
            for key, need in self._minimums().items()
            if need > 0
        )
        step = 10.0 ** (math.floor(math.log10(low)) - 1)
        scale = math.ceil(low / step) * step
        while self._short_split(scale) is not None and scale < 1.0:
            scale += step
        return min(float(f"{scale:.3g}"), 1.0)


def _members(groups: np.ndarray, num_groups: int):
    """``(order, start, size)``: ids sorted by group and each group's slice."""
    order = np.argsort(groups, kind="stable").astype(np.int32)
    size = np.bincount(groups, minlength=num_groups)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    return order, start, size


def _pick(rng, groups_of_draws, members, uniform_n: int, homophily: float) -> np.ndarray:
    """For each draw, a node of its group (probability ``homophily``, where the group
    has members) or a uniform one of ``uniform_n``."""
    order, start, size = members
    m = groups_of_draws.shape[0]
    same = (rng.random(m) < homophily) & (size[groups_of_draws] > 0)
    out = rng.integers(0, uniform_n, m, dtype=np.int64)
    g = groups_of_draws[same]
    offset = (rng.random(g.shape[0]) * size[g]).astype(np.int64)
    out[same] = order[start[g] + offset]
    return out.astype(np.int32)


def generate_mag(spec: MagSpec, *, seed: int = 0) -> HeteroDataset:
    """Draws a heterogeneous graph shaped like ogbn-mag whose venues the typed graph carries.

    Every paper gets a venue (Zipf-like sizes, exponent 1) and weak features
    (``feature_signal`` times a random unit centroid per venue plus
    unit-variance Gaussian noise); every author, field of study and
    institution a home venue. Each relation's edges pick a source with
    heavy-tailed popularity (a node's weight ``~ Pareto``), then a target of
    the source's venue with probability ``homophily``, else any target: an
    author writes papers of its venue, a paper cites papers and has topics
    of its own venue, an author joins institutions of its venue. A paper's
    authors, topics and citations therefore reveal its venue, two hops away
    through the authors' other papers too; its features alone hardly do.
    Duplicate edges may occur (kept, as raw data can have them). Years
    follow the split: the first ``train`` papers of a random order are
    "up to 2017", then ``valid`` (2018), then ``test`` (2019).

    Vectorised NumPy: at full size about 21 M edges in a few tens of seconds
    and about 1.5 GB of peak memory (int64 draws per relation, then int32).

    Returns:
      A :class:`HeteroDataset` named ``synthetic:mag``.
    """
    rng = np.random.default_rng(seed)
    n = {t: int(spec.num_nodes[t]) for t in MAG_NUM_NODES}
    c = int(spec.num_classes)
    if n["paper"] < c:
        raise ValueError(f"{n['paper']} papers cannot cover {c} venues")
    if sum(spec.split_sizes.values()) > n["paper"]:
        raise ValueError(f"split sizes {dict(spec.split_sizes)} exceed {n['paper']} papers")
    weights = 1.0 / np.arange(1, c + 1)
    venue = np.concatenate([np.arange(c), rng.choice(c, n["paper"] - c, p=weights / weights.sum())])
    venue = rng.permutation(venue).astype(np.int64)
    centroids = rng.normal(size=(c, spec.num_features)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    features = rng.standard_normal((n["paper"], spec.num_features), dtype=np.float32)
    features += np.float32(spec.feature_signal * np.sqrt(spec.num_features)) * centroids[venue]
    home = {t: rng.integers(0, c, n[t]) for t in ("author", "field_of_study", "institution")}
    home["paper"] = venue
    members = {t: _members(home[t], c) for t in home}

    relations = {}
    for key, count in spec.num_edges.items():
        src_type, _, dst_type = key
        count = int(count)
        popularity = rng.pareto(2.0, n[src_type]) + 1.0
        senders = rng.choice(n[src_type], count, p=popularity / popularity.sum()).astype(np.int32)
        receivers = _pick(
            rng, home[src_type][senders], members[dst_type], n[dst_type], spec.homophily
        )
        relations[key] = (senders, receivers)
    graph = HeteroGraph(n, relations)

    order = rng.permutation(n["paper"])
    sizes = [int(spec.split_sizes[k]) for k in ("train", "valid", "test")]
    bounds = np.cumsum([0, *sizes])
    split = {
        k: np.sort(order[a:b])
        for k, a, b in zip(("train", "valid", "test"), bounds[:-1], bounds[1:], strict=False)
    }
    return HeteroDataset(
        name="synthetic:mag",
        graph=graph,
        features={"paper": features},
        target="paper",
        labels=venue,
        num_classes=c,
        split=split,
    )


# -- OGB's raw layout ----------------------------------------------------------
def _read(path: Path, dtype) -> np.ndarray:
    from sparsegcn.datasets.convert import _read_csv

    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    return _read_csv(path, dtype)


def _header_row(path: Path) -> dict:
    """A gzip CSV of one header line and one value row, as ``{column: value}``."""
    import gzip

    from sparsegcn.files import check_regular_file, reading

    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    check_regular_file(path)
    with reading(path), gzip.open(path, "rt") as f:
        lines = [line.strip() for line in f if line.strip()]
    if len(lines) != 2:
        raise ValueError(f"{path} must hold a header and one row, got {len(lines)} lines")
    header, values = lines[0].split(","), lines[1].split(",")
    if len(header) != len(values):
        raise ValueError(f"{path}: {len(header)} columns in the header, {len(values)} in the row")
    return dict(zip(header, values, strict=True))


def _node_counts(path: Path) -> dict[str, int]:
    """``num-node-dict.csv.gz`` as ``{type: N_t}``."""
    counts = {}
    for t, value in _header_row(path).items():
        try:
            counts[t] = int(value)
        except ValueError:
            counts[t] = -1
        if counts[t] < 0:
            raise ValueError(
                f"{path}: the count of {t!r} nodes is {value!r}, not a non-negative integer"
            )
    return counts


def _flags(path: Path) -> list[str]:
    """The columns of a ``nodetype-has-*.csv.gz`` file whose flag is ``True``."""
    flags = _header_row(path)
    for t, value in flags.items():
        if value not in ("True", "False"):
            raise ValueError(f"{path}: the flag of {t!r} is {value!r}; expected True or False")
    return [t for t, value in flags.items() if value == "True"]


def _features(path: Path, num_nodes: int) -> np.ndarray:
    """A ``node-feat.csv.gz`` file: ``num_nodes`` lines of as many finite numbers as the
    first, as float32 ``[num_nodes, F]``.

    Raises:
      FileNotFoundError: the file is missing.
      ValueError: naming the file and the first line (1-based) of another width
        or with a non-finite value, or the wrong line count.
    """
    import gzip

    from sparsegcn.datasets.proteins import read_table
    from sparsegcn.files import check_regular_file, reading

    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    check_regular_file(path)
    with reading(path), gzip.open(path, "rt") as f:
        first = f.readline().rstrip("\r\n")
    if not first:
        raise ValueError(f"{path}, line 1: expected comma-separated numbers, got {first!r}")
    return read_table(path, first.count(",") + 1, "float", rows=num_nodes)


def load_mag_raw(
    folder: str | Path, *, name: str = "ogbn-mag", progress: bool = False
) -> HeteroDataset:
    """Reads OGB's raw heterogeneous layout (``<root>/ogbn_mag``) into a :class:`HeteroDataset`.

    The labelled type must have features; other types have them where their
    ``node-feat`` file exists.

    Args:
      folder: the dataset folder holding ``raw/`` and ``split/time/``.
      name: the dataset's name in reports.

    Raises:
      FileNotFoundError: naming the first missing file.
      ValueError: a malformed file, named with the line where one applies (ids
        out of range in an edge file name the relation); a truncated or corrupt
        gzip is a :class:`~sparsegcn.files.CorruptFileError`.
    """
    from sparsegcn.datasets.base import check_disjoint_splits
    from sparsegcn.datasets.ogb import as_labels

    folder = Path(folder)
    raw = folder / "raw"
    start = time.perf_counter()
    counts = _node_counts(raw / "num-node-dict.csv.gz")
    triplets = sorted(tuple(row) for row in _read(raw / "triplet-type-list.csv.gz", str))
    relations = {}
    for key in triplets:
        sub = raw / "relations" / "___".join(key)
        edges = _read(sub / "edge.csv.gz", np.int64)
        declared = int(_read(sub / "num-edge-list.csv.gz", np.int64).reshape(-1)[0])
        if edges.shape[0] != declared or (edges.size and edges.shape[1] != 2):
            raise ValueError(
                f"{sub / 'edge.csv.gz'}: expected {declared} rows of src,dst, got shape {edges.shape}"
            )
        edges = edges.reshape(-1, 2)
        relations[tuple(key)] = (edges[:, 0], edges[:, 1])
    graph = HeteroGraph(counts, relations)
    labelled = _flags(raw / "nodetype-has-label.csv.gz")
    if len(labelled) != 1:
        raise ValueError(f"{name}: expected one labelled node type, got {labelled}")
    target = labelled[0]
    features = {}
    for t in counts:
        path = raw / "node-feat" / t / "node-feat.csv.gz"
        if path.exists() or t == target:
            features[t] = _features(path, counts[t])
    label_path = raw / "node-label" / target / "node-label.csv.gz"
    stored = _read(label_path, np.float64)
    if stored.shape[0] != counts[target]:
        raise ValueError(
            f"{label_path}: expected {counts[target]} lines (one per {target}), "
            f"got {stored.shape[0]}"
        )
    try:
        labels = as_labels(stored, counts[target])
    except ValueError as err:
        raise ValueError(f"{label_path}: {err}") from None
    split_dir = folder / "split" / "time"
    has_split = _flags(split_dir / "nodetype-has-split.csv.gz")
    if has_split != [target]:
        raise ValueError(f"{name}: the split covers {has_split}, the labels {target!r}")
    files = {part: split_dir / target / f"{part}.csv.gz" for part in ("train", "valid", "test")}
    split = {part: _read(path, np.int64).reshape(-1) for part, path in files.items()}
    for part, ids in split.items():
        bad = (ids < 0) | (ids >= counts[target])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{files[part]}, line {i + 1}: {target} id {int(ids[i])} is outside "
                f"[0, {counts[target]})"
            )
        unlabelled = labels[ids] < 0
        if unlabelled.any():
            i = int(np.flatnonzero(unlabelled)[0])
            raise ValueError(
                f"{files[part]}, line {i + 1}: {target} {int(ids[i])} has no label "
                f"(NaN in {label_path})"
            )
    check_disjoint_splits(
        split, error=lambda part, message: ValueError(f"{files[part]}: {message}")
    )
    if name == "ogbn-mag":
        # Its class count is known: a label past it is a corrupt file, not a new venue
        # (max + 1 made one label of 100000 into 100,001 classes).
        num_classes = MAG_CLASSES
        past = labels >= MAG_CLASSES
        if past.any():
            i = int(np.flatnonzero(past)[0])
            raise ValueError(
                f"{label_path}, line {i + 1}: label {int(labels[i])} is outside "
                f"[0, {MAG_CLASSES}): ogbn-mag has {MAG_CLASSES} venues"
            )
    else:
        num_classes = int(labels.max()) + 1 if (labels >= 0).any() else 0
    if progress:
        print(f"read {name} from {folder} in {time.perf_counter() - start:.1f} s")
    return HeteroDataset(
        name, graph, features, target, labels, num_classes, split, info={"folder": str(folder)}
    )


def _write_csv(path: Path, rows: np.ndarray, header: str | None = None, fmt: str = "%d") -> None:
    import gzip

    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        if header is not None:
            f.write(header + "\n")
        np.savetxt(f, rows, fmt=fmt, delimiter=",")


def write_mag_raw(dataset: HeteroDataset, folder: str | Path) -> Path:
    """Writes ``dataset`` in OGB's raw heterogeneous layout (what :func:`load_mag_raw`
    and ``ogb``'s ``read_csv_heterograph_raw`` read), split under ``split/time``.

    The folder is built next to ``folder`` and renamed into place; an existing
    ``folder`` is refused. Made for test fixtures and offline look-alikes:
    ``np.savetxt`` writes about a million rows a second.

    Raises:
      FileExistsError: ``folder`` exists.
    """
    from sparsegcn.files import discard_temp_folder, temp_folder

    folder = Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} exists; write_mag_raw does not overwrite")
    tmp = temp_folder(folder.parent, folder.name)
    try:
        raw = tmp / "raw"
        types = list(dataset.graph.num_nodes)
        counts = np.array([[dataset.graph.num_nodes[t] for t in types]])
        _write_csv(raw / "num-node-dict.csv.gz", counts, header=",".join(types))
        triplets = np.array(dataset.graph.edge_types, dtype=object)
        _write_csv(raw / "triplet-type-list.csv.gz", triplets, fmt="%s")
        for key, view in dataset.graph.relations.items():
            sub = raw / "relations" / "___".join(key)
            edges = np.stack([np.asarray(view.senders), np.asarray(view.receivers)], axis=1)
            _write_csv(sub / "edge.csv.gz", edges)
            _write_csv(sub / "num-edge-list.csv.gz", np.array([[edges.shape[0]]]))
        for t, x in dataset.features.items():
            _write_csv(raw / "node-feat" / t / "node-feat.csv.gz", x, fmt="%.9g")
        flags = np.array([[str(t == dataset.target) for t in types]], dtype=object)
        _write_csv(raw / "nodetype-has-label.csv.gz", flags, header=",".join(types), fmt="%s")
        _write_csv(
            raw / "node-label" / dataset.target / "node-label.csv.gz", dataset.labels[:, None]
        )
        split = tmp / "split" / "time"
        _write_csv(split / "nodetype-has-split.csv.gz", flags, header=",".join(types), fmt="%s")
        for part, idx in dataset.split.items():
            _write_csv(split / dataset.target / f"{part}.csv.gz", np.asarray(idx)[:, None])
        if os.path.lexists(folder):  # made meanwhile: an empty folder is not replaced either
            raise FileExistsError(f"{folder} exists; write_mag_raw does not overwrite")
        tmp.rename(folder)
    except BaseException:
        discard_temp_folder(tmp)
        raise
    return folder


def mag_folder(name: str, root: str | Path) -> Path:
    """Where ``ogbn-mag`` lives under ``root``: ``<root>/ogbn_mag`` (OGB's layout)."""
    return Path(root) / name.replace("-", "_")


def load_mag(
    name: str,
    root=None,
    *,
    scale: float = 1.0,
    seed: int = 0,
    progress: bool = False,
    verify: bool = False,
) -> HeteroDataset:
    """``ogbn-mag`` from ``<root>/ogbn_mag`` (raw layout, no download), ``synthetic:mag``,
    or an on-disk hetero folder named by a path (``./mag``, ``DIR/mag``:
    :func:`~sparsegcn.datasets.ondisk_hetero.load_hetero_ondisk`, memory-mapped).

    Args:
      verify: for a folder, also check every file's sha256.

    Raises:
      ValueError: another name, ``scale`` for ``ogbn-mag`` or a folder,
        ``verify`` for a name; :class:`~sparsegcn.datasets.ondisk.FormatError`
        for a bad folder.
      FileNotFoundError: ``ogbn-mag``'s files are missing (the message says
        where to put ``mag.zip``'s contents).
    """
    from sparsegcn.datasets import is_path
    from sparsegcn.datasets.base import check_load_arguments, default_root

    check_load_arguments(root, progress=progress, verify=verify)
    if is_path(name):
        if scale != 1.0:
            raise ValueError(f"scale={scale!r} applies only to generated datasets, not {name!r}")
        from sparsegcn.datasets.ondisk_hetero import load_hetero_ondisk

        return load_hetero_ondisk(name, verify=verify)
    if verify:
        raise ValueError(f"verify=True applies only to on-disk dataset folders, not {name!r}")
    if name == "synthetic:mag":
        start = time.perf_counter()
        spec = MagSpec() if scale == 1.0 else MagSpec().scaled(scale)
        data = generate_mag(spec, seed=seed)
        info = {"generator": "sparsegcn.datasets.mag.generate_mag", "scale": scale, "seed": seed}
        data = dataclasses.replace(data, info=info)
        if progress:
            print(f"generated synthetic:mag (scale {scale}) in {time.perf_counter() - start:.1f} s")
        return data
    if name != "ogbn-mag":
        raise ValueError(f"unknown heterogeneous dataset {name!r}; choose one of {list(MAG_NAMES)}")
    if scale != 1.0:
        raise ValueError(f"scale={scale!r} applies only to generated datasets, not {name!r}")
    folder = mag_folder(name, default_root() if root is None else root)
    if not (folder / "raw" / "num-node-dict.csv.gz").exists():
        raise FileNotFoundError(
            f"{name}: no raw files under {folder}; download http://snap.stanford.edu/ogb/data/"
            f"nodeproppred/mag.zip and extract it so that {folder}/raw and {folder}/split exist"
        )
    return load_mag_raw(folder, name=name, progress=progress)


__all__ = [
    "MAG_CLASSES",
    "MAG_FEATURES",
    "MAG_NAMES",
    "MAG_NUM_EDGES",
    "MAG_NUM_NODES",
    "MAG_SPLIT_SIZES",
    "MIN_SPLIT_PAPERS",
    "HeteroDataset",
    "MagSpec",
    "generate_mag",
    "load_mag",
    "load_mag_raw",
    "mag_folder",
    "write_mag_raw",
]

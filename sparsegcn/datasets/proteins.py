"""ogbn-proteins from OGB's raw files (no torch), and its full-size synthetic twin.

``ogbn-proteins`` (Hu et al. 2020; STRING protein associations) is one graph
of 132,534 proteins from 8 species and 39,561,252 undirected associations,
each with 8 features (association scores in ``[0, 1]``). Every protein has
112 binary labels (functions); the split is by species, and the metric is
ROC-AUC averaged over the 112 tasks. There are no node features: OGB's
baselines use the mean of a node's incident edges' features
(:func:`~sparsegcn.transforms.edge_mean_features`, applied by the training
pipeline under ``--edge-features``).

:func:`load_proteins` reads OGB's raw layout as ``ogb`` downloads it::

    <root>/ogbn_proteins/raw/edge.csv.gz           E lines "u,v" (0-based node ids)
    <root>/ogbn_proteins/raw/edge-feat.csv.gz      E lines of 8 floats
    <root>/ogbn_proteins/raw/node-label.csv.gz     N lines of 112 labels (0 or 1)
    <root>/ogbn_proteins/raw/node_species.csv.gz   N lines: the species' NCBI taxonomy id
                                                   (one of :data:`SPECIES`; ``species.csv.gz``
                                                   before ogb renames it)
    <root>/ogbn_proteins/raw/num-node-list.csv.gz  one line: N
    <root>/ogbn_proteins/raw/num-edge-list.csv.gz  one line: E
    <root>/ogbn_proteins/split/species/{train,valid,test}.csv.gz   node ids, one a line

with pandas (the ``ogb`` extra), never torch. As ``ogb``
(``add_inverse_edge=True``) the stored graph holds each association in
both directions, the reverse edge with the same features, and nothing is
merged. The dataset's node features are one constant column
(``info["featureless"]``), replaced by the edge-feature means when edge
features are used. Every line of a file is one row: a malformed file (a
blank line, a header, a field that is not a number of the file's kind,
another field count) raises ``ValueError`` naming the file, its first bad
line (1-based) and what that line holds, as do a node id out of range, a
label other than 0 and 1 and a species outside :data:`SPECIES`.

``synthetic:proteins`` (:func:`generate_proteins`) has the same sizes and
layout, generated in a few vectorised passes; see its docstring.

References:
  Hu et al., *Open Graph Benchmark: Datasets for Machine Learning on
  Graphs*, NeurIPS 2020. https://arxiv.org/abs/2005.00687

  Szklarczyk et al., *STRING v11*, Nucleic Acids Research 47, 2019.
"""

from __future__ import annotations

import csv
import gzip
import re
import zlib
from pathlib import Path

import numpy as np

from sparsegcn import _checks
from sparsegcn.datasets.base import SPLITS, Dataset
from sparsegcn.graph import Graph

PROTEINS = "ogbn-proteins"
SYNTHETIC_PROTEINS = "synthetic:proteins"
NUM_NODES = 132_534
NUM_EDGES = 39_561_252
NUM_EDGE_FEATURES = 8
NUM_TASKS = 112
NUM_SPECIES = 8
SPLIT_SIZES = {"train": 86_619, "valid": 21_236, "test": 24_679}
"""OGB's species split of ogbn-proteins (nodes per split)."""
SPECIES = (3702, 4932, 6239, 7227, 7955, 9606, 10090, 511145)
"""The NCBI taxonomy ids ``node_species.csv.gz`` holds, one per species (STRING's
A. thaliana, S. cerevisiae, C. elegans, D. melanogaster, D. rerio, H. sapiens,
M. musculus, E. coli; OGB's ``mapping/README.md``)."""

_CHUNK_ROWS = 1 << 21
_URL = "http://snap.stanford.edu/ogb/data/nodeproppred/proteins.zip"


_FLOAT32_MAX = float(np.finfo(np.float32).max)
_EXACT_INT = 2**53
"""Integers are read through float64, which holds every one below this magnitude."""
_NUMBER = re.compile(r"[ \t\f\v]*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[ \t\f\v]*")
"""A field pandas reads as a number, written out: no ``nan``, ``inf``, quotes or ``_``."""


def _field_problem(field: str, kind: str) -> str | None:
    """Why ``read_table`` refuses ``field`` in a ``kind`` file, or ``None``.

    Accepts what its pandas pass accepts, so that the line the message names
    is the one pandas stopped at: an integer may be written ``3.0`` or ``3e2``.
    """
    text = field.strip(" \t\f\v")
    if not _NUMBER.fullmatch(field):
        return f"{text!r} is not a finite number" if text else "a field is empty"
    value = float(field)
    if kind == "float":
        if not abs(value) <= _FLOAT32_MAX:
            return f"{text} is past float32's range"
        return None
    if not abs(value) < _EXACT_INT:
        return f"{text} is past 2**53, where float64 stops holding every integer"
    if value != round(value):
        return f"{text} is not an integer"
    return None


def _line_problem(line: str, columns: int, kind: str) -> str | None:
    """Why ``read_table`` refuses ``line`` (newline stripped), or ``None``."""
    if not line.strip(" \t\f\v"):
        return "the line is blank"
    fields = line.split(",")
    if len(fields) != columns:
        return f"{len(fields)} field{'s' if len(fields) != 1 else ''}"
    for field in fields:
        problem = _field_problem(field, kind)
        if problem is not None:
            return problem
    return None


def _bad_line(path: Path, columns: int, kind: str) -> tuple[int, str | None, str] | None:
    """``(line number, text, why)`` of the first line of ``path`` that ``read_table``
    refuses, ``text`` ``None`` where the file cannot be read from that line on."""
    number = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                text = line.rstrip("\r\n")
                problem = _line_problem(text, columns, kind)
                if problem is not None:
                    return number, text, problem
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as err:
        return number + 1, None, str(err)
    return None


def _malformed(path: Path, columns: int, kind: str, cause: str) -> ValueError:
    """The error for a file the pandas pass refused with ``cause``: its first bad line."""
    found = _bad_line(path, columns, kind)
    number_word = "integer" if kind == "int" else "finite float32 number"
    what = f"{columns} comma-separated {number_word}s" if columns != 1 else f"one {number_word}"
    if found is None:  # pandas refused what every line's own check accepts
        return ValueError(f"{path}: unreadable ({cause}); expected lines of {what}")
    number, text, problem = found
    if text is None:
        return ValueError(f"{path}: unreadable from line {number} on ({problem})")
    shown = text if len(text) <= 80 else text[:77] + "..."
    return ValueError(f"{path}, line {number}: expected {what}, got {shown!r} ({problem})")


def _accepted(values: np.ndarray, columns: int, kind: str) -> bool:
    """Whether a chunk pandas read holds only what :func:`_line_problem` accepts."""
    if values.shape[1] != columns:
        return False
    magnitude = np.abs(values)  # NaN (a blank line or a short one) fails both bounds
    if kind == "float":
        return bool((magnitude <= _FLOAT32_MAX).all())
    return bool((magnitude < _EXACT_INT).all() and (values == np.round(values)).all())


def read_table(path, columns: int, kind: str = "int", *, rows: int | None = None) -> np.ndarray:
    """A headerless gzip CSV of ``columns`` numbers per line, as int64 or float32 ``[n, columns]``.

    Row ``i`` is line ``i + 1``: blank lines are not skipped nor quotes
    read, so a message about a row can name its line. Read with pandas in
    chunks of ``2**21`` lines (each converted before the next is read); on
    any problem the file is scanned once more, line by line, with the same
    rules (an integer may be written ``3.0``), to name the first bad line.

    Args:
      path: the ``.csv.gz`` file.
      columns: numbers per line.
      kind: ``"int"`` (int64, magnitudes below ``2**53``) or ``"float"``
        (float32, finite).
      rows: the line count the file must have, if known.

    Raises:
      FileNotFoundError: the file is missing.
      ValueError: a line without ``columns`` numbers of the kind (naming the
        file, the 1-based line, what it holds and why it is refused), an
        unreadable gzip (from which line), or the wrong line count.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (ogbn-proteins raw files: {_URL})")
    try:
        import pandas as pd
    except ImportError as err:
        raise ImportError(
            "reading ogbn-proteins' CSV files needs pandas: pip install 'sparsegcn[ogb]'"
        ) from err
    dtype = np.int64 if kind == "int" else np.float32
    parts = []
    try:
        with pd.read_csv(
            path,
            header=None,
            chunksize=_CHUNK_ROWS,
            compression="gzip",
            dtype=np.float64,
            skip_blank_lines=False,
            quoting=csv.QUOTE_NONE,
            encoding="utf-8",
        ) as reader:
            for frame in reader:
                values = frame.to_numpy()
                if not _accepted(values, columns, kind):
                    raise ValueError("bad values")
                parts.append(values.astype(dtype))
    except pd.errors.EmptyDataError as err:  # also what pandas says of a blank first line
        if _bad_line(path, columns, kind) is not None:
            raise _malformed(path, columns, kind, str(err)) from None
        parts = []
    except (ValueError, OSError, EOFError, zlib.error, UnicodeDecodeError) as err:  # ParserError
        raise _malformed(path, columns, kind, (str(err).splitlines() or [""])[0]) from None
    table = np.concatenate(parts) if parts else np.zeros((0, columns), dtype)
    if rows is not None and table.shape[0] != rows:
        raise ValueError(f"{path}: expected {rows} lines, got {table.shape[0]}")
    return table


def _one_count(path: Path) -> int:
    table = read_table(path, 1, "int")
    if table.shape[0] != 1:
        raise ValueError(
            f"{path}: expected one line (ogbn-proteins is one graph), got {table.shape[0]}"
        )
    count = int(table[0, 0])
    if count < 0:
        raise ValueError(f"{path}, line 1: expected a count >= 0, got {count}")
    return count


def proteins_graph(edges: np.ndarray, edge_features: np.ndarray, num_nodes: int) -> Graph:
    """The stored graph of undirected pairs ``edges [E, 2]``: both directions, each copying
    its pair's ``edge_features [E, D]`` row (``ogb``'s ``add_inverse_edge``), nothing merged.

    Edge ``2 e`` is ``u -> v`` and ``2 e + 1`` is ``v -> u`` for pair ``e = (u, v)``.
    """
    e = edges.shape[0]
    senders = np.empty(2 * e, np.int32)
    receivers = np.empty(2 * e, np.int32)
    senders[0::2], senders[1::2] = edges[:, 0], edges[:, 1]
    receivers[0::2], receivers[1::2] = edges[:, 1], edges[:, 0]
    features = np.repeat(np.asarray(edge_features, np.float32), 2, axis=0)
    return Graph(senders, receivers, None, num_nodes, edge_features=features)


def _featureless(n: int) -> np.ndarray:
    return np.ones((n, 1), np.float32)


def load_proteins(root, *, progress: bool = False) -> Dataset:
    """``ogbn-proteins`` from OGB's raw files under ``<root>/ogbn_proteins`` (module docstring).

    Nothing is downloaded: fetch ``proteins.zip`` from OGB and unpack it
    there (``ogb``'s own loader does the same), or let ``ogb`` do it once.

    Returns:
      A multi-label :class:`~sparsegcn.datasets.Dataset`: labels int64
      ``[N, 112]``, graph with ``edge_features [2E, 8]``, metric
      ``"rocauc"``, ``num_edges = E`` (undirected pairs), features one
      constant column (``info["featureless"]``).

    Raises:
      FileNotFoundError: a missing file, named.
      ValueError: a malformed file (its name, first bad line and what it
        holds), node ids out of range, labels other than 0 and 1, species
        outside :data:`SPECIES`, or counts that disagree between files.
    """
    del progress  # pandas reads each file in one pass; there is nothing to show
    folder = Path(root) / "ogbn_proteins"
    raw = folder / "raw"
    n = _one_count(raw / "num-node-list.csv.gz")
    e = _one_count(raw / "num-edge-list.csv.gz")
    edges = read_table(raw / "edge.csv.gz", 2, "int", rows=e)
    bad = (edges < 0) | (edges >= n)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(
            f"{raw / 'edge.csv.gz'}, line {row + 1}: node id {int(edges[row, col])} is outside "
            f"[0, {n}) (num-node-list.csv.gz says {n} nodes)"
        )
    edge_features = read_table(raw / "edge-feat.csv.gz", NUM_EDGE_FEATURES, "float", rows=e)
    labels = read_table(raw / "node-label.csv.gz", NUM_TASKS, "int", rows=n)
    bad_labels = (labels < 0) | (labels > 1)
    if bad_labels.any():
        row, col = np.argwhere(bad_labels)[0]
        raise ValueError(
            f"{raw / 'node-label.csv.gz'}, line {row + 1}: label {int(labels[row, col])} in "
            f"column {col + 1} is not 0 or 1"
        )
    species_file = raw / "node_species.csv.gz"
    if not species_file.is_file() and (raw / "species.csv.gz").is_file():
        species_file = raw / "species.csv.gz"
    species = read_table(species_file, 1, "int", rows=n)[:, 0]
    unknown = ~np.isin(species, SPECIES)
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise ValueError(
            f"{species_file}, line {row + 1}: species {int(species[row])} is not one of "
            f"ogbn-proteins' {NUM_SPECIES} (their NCBI taxonomy ids: "
            f"{', '.join(map(str, SPECIES))})"
        )
    split = {}
    for key in SPLITS:
        file = folder / "split" / "species" / f"{key}.csv.gz"
        ids = read_table(file, 1, "int")[:, 0]
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            pos = int(np.flatnonzero((ids < 0) | (ids >= n))[0])
            raise ValueError(f"{file}, line {pos + 1}: node id {int(ids[pos])} is outside [0, {n})")
        split[key] = ids
    return Dataset(
        name=PROTEINS,
        graph=proteins_graph(edges, edge_features, n),
        features=_featureless(n),
        labels=labels,
        split=split,
        num_classes=NUM_TASKS,
        metric="rocauc",
        num_edges=e,
        info={
            "source": _URL,
            "folder": str(folder),
            "featureless": True,
            "num_species": int(np.unique(species).size),
        },
    )


def official_test_metric(dataset: Dataset, scores) -> dict | None:
    """``ogb``'s ``Evaluator("ogbn-proteins")`` ROC-AUC of each seed's scores on the test split.

    Args:
      dataset: a multi-label dataset named ``ogbn-proteins`` (112 tasks),
        in the node order of ``scores``.
      scores: float ``[K, N, 112]`` (logits or probabilities), one row per seed.

    Returns:
      ``{"metric": "rocauc", "test": [K], "test_mean": mean}``, or ``None``
      when ``ogb`` is not installed or the dataset is not ogbn-proteins
      shaped (the Evaluator insists on 112 tasks).
    """
    import importlib.util

    if (
        dataset.name != PROTEINS
        or not dataset.multilabel
        or dataset.num_classes != NUM_TASKS
        or importlib.util.find_spec("ogb") is None
    ):
        return None
    from ogb.nodeproppred import Evaluator

    test = np.asarray(dataset.split["test"])
    truth = np.asarray(dataset.labels)[test].astype(np.float64)
    truth[truth < 0] = np.nan  # ogb's missing labels
    evaluator = Evaluator(PROTEINS)
    values = [
        float(evaluator.eval({"y_true": truth, "y_pred": np.asarray(row)[test]})["rocauc"])
        for row in np.asarray(scores)
    ]
    return {"metric": "rocauc", "test": values, "test_mean": float(np.mean(values))}


# -- synthetic twin ---------------------------------------------------------------------

_LATENT = 8
_COMMUNITY = 64
_WITHIN_COMMUNITY = 0.7


def generate_proteins(scale: float = 1.0, *, seed: int = 0, chunk: int = 1 << 22) -> Dataset:
    """``synthetic:proteins``: ogbn-proteins' sizes, layout and task, generated.

    At ``scale=1``: 132,534 nodes in 8 species, 39,561,252 undirected pairs
    (stored both ways: 79,122,504 edges) with 8 edge features, 112 binary
    tasks, split by species into OGB's split sizes (train 86,619, valid
    21,236, test 24,679 nodes: species 0-4, 5, 6-7). ``scale`` multiplies
    the node and edge counts.

    The model, vectorised over chunks of edges:

    - each node ``i`` has a latent ``z_i = c_{m(i)} + 0.5 ε_i`` in
      ``R^8``, ``c`` the centre of its community ``m(i)`` (64 nodes of one
      species, all ``ε``, ``c`` standard normal);
    - a pair joins a sender drawn with probability proportional to a
      Pareto(2.5) weight to a receiver of its community (70 %) or of its
      species (30 %); pairs never cross species, as in STRING;
    - its 8 features are ``round(σ(W (z_u + z_v) / 2 + 0.3 η), 3)`` with
      ``W`` an 8 x 8 standard normal matrix and ``η`` noise, so they are
      symmetric in the pair and lie in ``[0, 1]``;
    - task ``t`` of node ``i`` is ``1`` when ``u_t · z_i + 0.5 ξ_{it} > b_t``,
      the thresholds ``b_t`` making 3 % to 40 % of the labels positive.

    A node's mean incident edge features are a noisy function of its own
    latent and its community's, so the labels are learnable from edge
    features and the neighbourhood (a GNN averages the noise away), and a
    model cannot learn them from anything else.

    Returns:
      A multi-label :class:`~sparsegcn.datasets.Dataset` like
      :func:`load_proteins`'s (its ``info`` records the generator).
    """
    if not (isinstance(scale, (int, float)) and 0 < scale <= 1):
        raise ValueError(f"scale must be in (0, 1], got {scale!r}")
    seed = _checks.check_static_int("seed", seed, minimum=0)
    rng = np.random.default_rng(seed)
    n = max(round(NUM_NODES * scale), 2 * NUM_SPECIES * 4)
    e = max(round(NUM_EDGES * scale), n)
    split_fraction = np.array([SPLIT_SIZES[k] for k in SPLITS], np.float64) / NUM_NODES
    # Species 0-4 train, 5 valid, 6-7 test; within a group the sizes are about equal.
    groups = np.round(split_fraction * n).astype(np.int64)
    groups[0] = n - groups[1:].sum()
    species_sizes = np.concatenate(
        [_parts(groups[0], 5), _parts(groups[1], 1), _parts(groups[2], 2)]
    )
    species_start = np.concatenate([[0], np.cumsum(species_sizes)])
    species = np.repeat(np.arange(NUM_SPECIES), species_sizes)
    # Communities: consecutive runs of 64 nodes within a species.
    local = np.arange(n) - species_start[species]
    community = species * (n // _COMMUNITY + 1) + local // _COMMUNITY
    _, community = np.unique(community, return_inverse=True)
    community_start = np.searchsorted(community, np.arange(community.max() + 1))
    community_size = np.bincount(community)
    centres = rng.standard_normal((community.max() + 1, _LATENT)).astype(np.float32)
    latent = centres[community] + 0.5 * rng.standard_normal((n, _LATENT)).astype(np.float32)
    mixing = rng.standard_normal((_LATENT, NUM_EDGE_FEATURES)).astype(np.float32)

    weight = rng.pareto(1.5, n) + 1.0  # P(k) ~ k^-2.5 sender weights
    cumulative = np.cumsum(weight / weight.sum())
    edges = np.empty((e, 2), np.int32)
    edge_features = np.empty((e, NUM_EDGE_FEATURES), np.float32)
    for start in range(0, e, chunk):
        m = min(chunk, e - start)
        u = np.minimum(np.searchsorted(cumulative, rng.random(m)), n - 1)
        near = rng.random(m) < _WITHIN_COMMUNITY
        c, s = community[u], species[u]
        lo = np.where(near, community_start[c], species_start[s])
        size = np.where(near, community_size[c], species_sizes[s])
        v = lo + (rng.random(m) * size).astype(np.int64)
        v = np.where(v == u, lo + (v - lo + 1) % size, v)  # no self-loops
        edges[start : start + m, 0] = u
        edges[start : start + m, 1] = v
        mid = 0.5 * (latent[u] + latent[v]) @ mixing
        noise = 0.3 * rng.standard_normal(mid.shape).astype(np.float32)
        edge_features[start : start + m] = np.round(1.0 / (1.0 + np.exp(-(mid + noise))), 3)

    directions = rng.standard_normal((_LATENT, NUM_TASKS)).astype(np.float32)
    directions /= np.linalg.norm(directions, axis=0, keepdims=True)
    margin = latent @ directions + 0.5 * rng.standard_normal((n, NUM_TASKS)).astype(np.float32)
    positive_rate = rng.uniform(0.03, 0.4, NUM_TASKS)
    ranked = np.sort(margin, axis=0)
    rows = np.minimum(((1.0 - positive_rate) * n).astype(np.int64), n - 1)
    labels = (margin > ranked[rows, np.arange(NUM_TASKS)]).astype(np.int64)

    group_of_species = np.array([0, 0, 0, 0, 0, 1, 2, 2])
    split = {
        key: np.flatnonzero(group_of_species[species] == g).astype(np.int64)
        for g, key in enumerate(SPLITS)
    }
    return Dataset(
        name=SYNTHETIC_PROTEINS,
        graph=proteins_graph(edges, edge_features, n),
        features=_featureless(n),
        labels=labels,
        split=split,
        num_classes=NUM_TASKS,
        metric="rocauc",
        num_edges=e,
        info={
            "generator": "sparsegcn.datasets.proteins.generate_proteins",
            "scale": scale,
            "seed": seed,
            "featureless": True,
            "num_species": NUM_SPECIES,
        },
    )


def _parts(total: int, count: int) -> np.ndarray:
    sizes = np.full(count, total // count, np.int64)
    sizes[: total % count] += 1
    return sizes


def load_synthetic_proteins(scale: float = 1.0, *, seed: int = 0) -> Dataset:
    """``synthetic:proteins`` at ``scale`` (:func:`generate_proteins`), generated on every call
    (about a minute at full size; not cached)."""
    return generate_proteins(scale, seed=seed)


__all__ = [
    "NUM_EDGES",
    "NUM_EDGE_FEATURES",
    "NUM_NODES",
    "NUM_TASKS",
    "PROTEINS",
    "SPECIES",
    "SPLIT_SIZES",
    "SYNTHETIC_PROTEINS",
    "generate_proteins",
    "load_proteins",
    "load_synthetic_proteins",
    "official_test_metric",
    "proteins_graph",
    "read_table",
]

"""Synthetic twins of ogbg-molhiv and ogbg-molpcba at full size, generated in seconds.

``synthetic:molhiv`` and ``synthetic:molpcba`` have the originals' numbers
of graphs, mean atoms and bonds per molecule, tasks, metric and split
fractions, OGB's 9 atom and 3 bond feature columns within OGB's
vocabularies (:data:`~sparsegcn.datasets.ogbg.ATOM_FEATURE_DIMS`,
:data:`~sparsegcn.datasets.ogbg.BOND_FEATURE_DIMS`), and labels that a
GNN can learn from the structure. Everything is vectorised NumPy over all
molecules at once (no Python loop per graph) and a function of the seed.

Generation (all per molecule, all molecules at once):

1. **Atoms**: ``n = 2 + round(Gamma)`` atoms, the Gamma's mean giving the
   preset's mean, clipped to ``[2, 200]``.
2. **Skeleton**: atom ``i > 0`` bonds to atom ``i - 1`` with probability
   ``chain`` (0.8), else to a uniformly chosen earlier atom: a tree of
   ``n - 1`` bonds.
3. **Rings**: wherever six consecutive atoms ``i - 5 .. i`` form a chain
   (each bonded to the previous one; blocks of six never overlap), a bond
   ``(i - 5, i)`` closes a 6-ring, with the probability that makes the mean
   bonds per molecule the preset's. A ring is aromatic with probability 0.6.
4. **Atom features** (OGB's columns): atomic number index drawn from
   organic-chemistry frequencies (ring atoms mostly C, some N, O, S;
   others also F, Cl, Br, P, I); chirality 0 (3 % tagged 1 or 2); degree =
   the atom's bond count; formal charge index 5 (charge 0; 1 % at +-1);
   hydrogens ``valence - degree``; radicals 0; hybridization SP2 for
   aromatic atoms, else SP3 (70 %) or SP2; aromatic and in-ring flags from
   step 3.
5. **Bond features**: aromatic bonds (type 3, conjugated) in aromatic
   rings; elsewhere single, double (10 %, half of them conjugated) or
   triple (1 %); stereo 0.
6. **Labels**: task ``t`` has a motif, a pair of atom types ``(a_t, b_t)``
   (``a_t`` among C, N, O; ``b_t`` among C, N, O, S, F, Cl) and a ring-atom
   type ``c_t`` among C, N, O, S (:func:`task_motifs`), and the score

   .. math:: s_t(g) = \\#\\{\\text{bonds } a_t - b_t \\text{ in } g\\}
             + \\#\\{\\text{aromatic ring atoms of type } c_t \\text{ in } g\\}
             + \\sigma_t\\, \\varepsilon_{g,t}, \\quad \\varepsilon \\sim N(0, 1),

   with ``sigma_t = SIGMA * max(std_g(count_t), 0.5)`` (``SIGMA = 1.5``: noise
   on the scale of the count's spread); ``y_t(g) = 1`` iff ``s_t(g)`` exceeds its
   ``1 - p_t`` quantile over all molecules, so a fraction ``p_t`` is
   positive. Both counts are 1-hop neighbourhood sums, so a GIN can compute
   them; the noise caps the attainable ROC-AUC below 1. A label is then
   missing (NaN), independently, with probability ``missing_rate``.
7. **Split**: scaffold-like, as OGB's scaffold split: molecules are
   grouped by a *scaffold key* (rings, aromatic rings, atoms // 8), groups
   sorted by size (largest first, ties by key) and laid end to end: those
   within the first 80 % go to train, then to 90 % valid, the rest test
   (:func:`scaffold_split`): rare skeletons land in valid and test, a
   distribution shift as in OGB.

Presets (:data:`PRESETS`): ``molhiv``: 41,127 molecules, 25.5 atoms and
27.5 bonds on average (OGB's table), 1 task with 3.5 % positives (1,443 of
41,127 in ogbg-molhiv), no missing labels, ROC-AUC. ``molpcba``: 437,929
molecules, 26.0 atoms, 28.1 bonds, 128 tasks, positive rates log-uniform
in [0.2 %, 6 %] (PCBA's assays are rare-hit screens; not measured here),
``missing_rate = 0.4``, average precision. The missing rate of the real
label matrix was not measured (no copy of the data was at hand and no
published figure was found); 0.4 is an assumption, to be replaced by
``np.isnan(load_graphs("ogbg-molpcba", root).labels).mean()`` once
measured (``missing_rate=`` overrides it).

Cost (measured on a shared 2-core machine; CPU time): ``molpcba`` 16 s,
peak 3.8 GB resident, 1.1 GB of arrays (11.4 M atoms, 24.6 M directed
edges); ``molhiv`` about 1 s and 0.5 GB.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sparsegcn.datasets.graph_dataset import GraphDataset
from sparsegcn.datasets.ogbg import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS

PREFIX = "synthetic:"

# Atomic-number indices (atomic number - 1) and how often each is drawn.
_C, _N, _O, _F, _P, _S, _CL, _BR, _I = 5, 6, 7, 8, 14, 15, 16, 34, 52
_CHAIN_TYPES = np.array([_C, _N, _O, _S, _F, _CL, _BR, _P, _I])
_CHAIN_P = np.array([0.70, 0.11, 0.12, 0.02, 0.02, 0.015, 0.006, 0.005, 0.004])
_RING_TYPES = np.array([_C, _N, _O, _S])
_RING_P = np.array([0.84, 0.11, 0.03, 0.02])
_VALENCE = np.zeros(ATOM_FEATURE_DIMS[0], np.int64)
_VALENCE[[_C, _N, _O, _S, _P]] = [4, 3, 2, 2, 3]
MOTIF_TYPES = (_C, _N, _O, _S, _F, _CL)
"""Atom types (atomic number - 1) the label motifs draw from: C, N, O, S, F, Cl."""

RING = 6
SIGMA = 1.5
CHAIN = 0.92
AROMATIC = 0.6


@dataclasses.dataclass(frozen=True)
class MoleculeSpec:
    """What :func:`generate_molecules` makes.

    Attributes:
      name: the dataset name, e.g. ``"synthetic:molhiv"``.
      num_graphs: molecules.
      mean_nodes: mean atoms per molecule.
      mean_bonds: mean bonds per molecule (each stored as two directed edges).
      num_tasks: binary tasks ``T``.
      positive_rate: ``(low, high)``: each task's positive fraction is
        log-uniform in it (equal bounds: that fraction for every task).
      missing_rate: probability that a label is missing (NaN).
      metric: ``"rocauc"`` or ``"ap"``.
    """

    name: str
    num_graphs: int
    mean_nodes: float
    mean_bonds: float
    num_tasks: int
    positive_rate: tuple[float, float]
    missing_rate: float
    metric: str


PRESETS: dict[str, MoleculeSpec] = {
    "molhiv": MoleculeSpec(
        "synthetic:molhiv", 41_127, 25.5, 27.5, 1, (0.035, 0.035), 0.0, "rocauc"
    ),
    "molpcba": MoleculeSpec(
        "synthetic:molpcba", 437_929, 26.0, 28.1, 128, (0.002, 0.06), 0.4, "ap"
    ),
}
"""The twins, by preset name (the dataset is ``synthetic:<preset>``)."""


def _fraction(name: str, value) -> float:
    value = float(value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return value


def _run_lengths(chained: np.ndarray) -> np.ndarray:
    """``run[i]``: how many consecutive ``True`` end at ``i`` (0 where ``chained[i]`` is False)."""
    index = np.arange(chained.shape[0])
    last_break = np.maximum.accumulate(np.where(chained, -1, index))
    return index - last_break


def generate_molecules(
    preset: str = "molhiv",
    *,
    seed: int = 0,
    num_graphs: int | None = None,
    missing_rate: float | None = None,
) -> GraphDataset:
    """A synthetic twin of ogbg-molhiv or ogbg-molpcba (the module docstring gives the rule).

    Args:
      preset: ``"molhiv"`` or ``"molpcba"`` (:data:`PRESETS`).
      seed: the generator's seed; the same seed gives the same arrays.
      num_graphs: molecules to make (default: the preset's, full size);
        smaller for tests.
      missing_rate: overrides the preset's probability of a missing label.

    Returns:
      A :class:`GraphDataset` named ``synthetic:<preset>``: int32 ``[n, 9]``
      atom and ``[E, 3]`` bond features with OGB's vocabularies, every bond
      stored as two directed edges (the bond, then its reverse, as ``ogb``
      stores them), float32 ``[G, T]`` 0/1 labels with NaN where missing, a
      scaffold-like 80/10/10 split, and the preset's metric. ``info["motifs"]``
      holds each task's ``(a_t, b_t, c_t)`` atomic-number indices and
      ``info["positive_rates"]`` its ``p_t``.

    Raises:
      ValueError: an unknown preset, ``num_graphs < 1``, a rate outside [0, 1).
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown molecule preset {preset!r}; choose one of {sorted(PRESETS)}")
    spec = PRESETS[preset]
    count = spec.num_graphs if num_graphs is None else int(num_graphs)
    if count < 1:
        raise ValueError(f"num_graphs must be >= 1, got {num_graphs}")
    missing = spec.missing_rate if missing_rate is None else _fraction("missing_rate", missing_rate)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng(seed)

    # 1. atoms per molecule: 2 + Gamma(k, theta), std about 10 atoms.
    mean = spec.mean_nodes - 2.0
    shape = mean**2 / 100.0
    sizes = np.clip(2 + np.rint(rng.gamma(shape, mean / shape, count)), 2, 200).astype(np.int64)
    node_ptr = np.zeros(count + 1, np.int64)
    np.cumsum(sizes, out=node_ptr[1:])
    n = int(node_ptr[-1])
    graph_of = np.repeat(np.arange(count), sizes)
    local = np.arange(n) - node_ptr[graph_of]

    # 2. skeleton: each non-first atom bonds to the previous one or an earlier one.
    chained = (local > 0) & (rng.random(n) < CHAIN)
    earlier = np.floor(rng.random(n) * np.maximum(local, 1)).astype(np.int64)
    parent = np.where(chained, local - 1, earlier)
    child = np.flatnonzero(local > 0)
    tree = np.stack([node_ptr[graph_of[child]] + parent[child], child], axis=1)

    # 3. rings: six chained atoms in a row (blocks of six, never overlapping).
    run = _run_lengths(chained)  # chained atoms ending here; the block starts one before
    candidates = np.flatnonzero((run >= RING - 1) & (run % RING == RING - 1))
    extra = max(spec.mean_bonds - spec.mean_nodes + 1.0, 0.0) * count
    close = rng.random(candidates.shape[0]) < min(1.0, extra / max(candidates.shape[0], 1))
    ends = candidates[close]
    aromatic_ring = rng.random(ends.shape[0]) < AROMATIC
    closures = np.stack([ends - (RING - 1), ends], axis=1)
    members = (ends[:, None] - np.arange(RING)[None, :]).ravel()  # [rings * 6]
    in_ring = np.zeros(n, bool)
    in_ring[members] = True
    aromatic = np.zeros(n, bool)
    aromatic[members[np.repeat(aromatic_ring, RING)]] = True
    # A tree bond is a ring bond when its child is one of a ring's last five atoms.
    ring_child = (ends[:, None] - np.arange(RING - 1)[None, :]).ravel()
    aromatic_child = np.zeros(n, bool)
    aromatic_child[ring_child[np.repeat(aromatic_ring, RING - 1)]] = True

    bonds = np.concatenate([tree, closures])
    bond_aromatic = np.concatenate([aromatic_child[child], aromatic_ring])
    order = np.argsort(graph_of[bonds[:, 1]], kind="stable")  # bonds graph by graph
    bonds, bond_aromatic = bonds[order], bond_aromatic[order]
    num_bonds = bonds.shape[0]
    bond_ptr = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(graph_of[bonds[:, 1]], minlength=count), out=bond_ptr[1:])

    # 4. atom features.
    atom = np.where(
        in_ring,
        rng.choice(_RING_TYPES, n, p=_RING_P),
        rng.choice(_CHAIN_TYPES, n, p=_CHAIN_P / _CHAIN_P.sum()),
    )
    degree = np.bincount(bonds.ravel(), minlength=n)
    features = np.zeros((n, len(ATOM_FEATURE_DIMS)), np.int32)
    features[:, 0] = atom
    u = rng.random(n)
    features[:, 1] = np.where(u < 0.015, 1, np.where(u < 0.03, 2, 0))
    features[:, 2] = np.minimum(degree, ATOM_FEATURE_DIMS[2] - 1)
    u = rng.random(n)
    features[:, 3] = np.where(u < 0.005, 4, np.where(u < 0.01, 6, 5))
    features[:, 4] = np.clip(_VALENCE[atom] - degree - aromatic, 0, 8)
    features[:, 6] = np.where(aromatic | (rng.random(n) < 0.3), 1, 2)
    features[:, 7] = aromatic
    features[:, 8] = in_ring

    # 5. bond features.
    draw = rng.random(size=(num_bonds,))
    bond_type = np.where(bond_aromatic, 3, np.where(draw < 0.01, 2, np.where(draw < 0.11, 1, 0)))
    conjugated = bond_aromatic | ((bond_type == 1) & (rng.random(num_bonds) < 0.5))
    bond_features = np.stack([bond_type, np.zeros(num_bonds, np.int64), conjugated], axis=1)

    # 6. labels.
    labels, motifs, rates = _labels(spec, rng, atom, bonds, aromatic, graph_of, count, missing)

    # 7. scaffold-like split.
    rings = np.bincount(graph_of[ends], minlength=count)
    aromatic_rings = np.bincount(graph_of[ends[aromatic_ring]], minlength=count)
    split = scaffold_split(rings * 10_000 + aromatic_rings * 100 + np.minimum(sizes // 8, 99))

    # Every bond as two directed edges, the bond then its reverse (as ogb stores them).
    pairs = np.repeat(bonds, 2, axis=0)
    pairs[1::2] = bonds[:, ::-1]
    return GraphDataset(
        name=spec.name,
        senders=pairs[:, 0].astype(np.int32),
        receivers=pairs[:, 1].astype(np.int32),
        node_ptr=node_ptr,
        edge_ptr=2 * bond_ptr,
        features=features,
        labels=labels,
        num_classes=spec.num_tasks,
        classes=np.arange(spec.num_tasks),
        edge_features=np.repeat(bond_features.astype(np.int32), 2, axis=0),
        info={
            "generator": "sparsegcn.datasets.synthetic_graphs.generate_molecules",
            "preset": preset,
            "seed": int(seed),
            "missing_rate": missing,
            "twin_of": "ogbg-" + preset,
            "motifs": [[MOTIF_TYPES[i] for i in row] for row in motifs.tolist()],
            "positive_rates": rates.tolist(),
        },
        metric=spec.metric,
        split=split,
        feature_dims=ATOM_FEATURE_DIMS,
        edge_feature_dims=BOND_FEATURE_DIMS,
    )


def motif_counts(
    atom: np.ndarray, bonds: np.ndarray, aromatic: np.ndarray, graph_of: np.ndarray, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per molecule, the bonds between each pair of :data:`MOTIF_TYPES` and the aromatic
    atoms of each type.

    Args:
      atom: int ``[n]`` atomic-number index of each atom.
      bonds: int ``[B, 2]`` bonds (global atom ids, each once).
      aromatic: bool ``[n]``.
      graph_of: int ``[n]`` molecule of each atom.
      count: molecules ``G``.

    Returns:
      ``(pairs, rings)``: int32 ``[K, K, G]`` bond counts by the two atoms'
      types, symmetric in the first two axes (``K = len(MOTIF_TYPES)``), and
      int32 ``[K, G]`` aromatic atoms by type (molecules last, so that one
      motif's counts are contiguous).
    """
    k = len(MOTIF_TYPES)
    slot = np.full(ATOM_FEATURE_DIMS[0], -1, np.int64)
    slot[list(MOTIF_TYPES)] = np.arange(k)
    a, b = slot[atom[bonds[:, 0]]], slot[atom[bonds[:, 1]]]
    keep = (a >= 0) & (b >= 0)
    lo, hi = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
    index = (lo * k + hi) * count + graph_of[bonds[keep, 0]]
    pairs = np.bincount(index, minlength=k * k * count).astype(np.int32).reshape(k, k, count)
    upper = np.triu_indices(k, 1)
    pairs[upper[1], upper[0]] = pairs[upper]
    s = slot[atom]
    keep = aromatic & (s >= 0)
    index = s[keep] * count + graph_of[keep]
    rings = np.bincount(index, minlength=k * count).astype(np.int32).reshape(k, count)
    return pairs, rings


def task_motifs(num_tasks: int, seed: int) -> np.ndarray:
    """int ``[T, 3]``: each task's ``(a_t, b_t, c_t)`` as indices into :data:`MOTIF_TYPES`.

    ``a_t`` is one of C, N, O, ``b_t`` any motif type and ``c_t`` one of C,
    N, O, S (the types rings hold), so that every motif occurs often enough
    to carry a signal. Task 0 is ``(C, N, N)``; the others are drawn from
    ``seed``.
    """
    rng = np.random.default_rng([seed, 1])
    motifs = rng.integers(0, (3, len(MOTIF_TYPES), 4), (num_tasks, 3))
    motifs[0] = (0, 1, 1)
    return motifs


def _labels(spec, rng, atom, bonds, aromatic, graph_of, count, missing):
    pairs, rings = motif_counts(atom, bonds, aromatic, graph_of, count)
    motifs = task_motifs(spec.num_tasks, int(rng.integers(2**31)))
    low, high = spec.positive_rate
    rates = np.exp(rng.uniform(np.log(low), np.log(high), spec.num_tasks))
    by_task = np.empty((spec.num_tasks, count), np.float32)  # rows contiguous
    for t, (a, b, c) in enumerate(motifs):  # one pass per task, vectorised over molecules
        score = (pairs[a, b] + rings[c]).astype(np.float32)
        score += SIGMA * max(float(score.std()), 0.5) * rng.standard_normal(count, np.float32)
        by_task[t] = score > np.quantile(score, 1.0 - rates[t])
    labels = np.ascontiguousarray(by_task.T)
    del by_task
    if missing > 0:
        labels[rng.random((count, spec.num_tasks), np.float32) < missing] = np.nan
    return labels, motifs, rates


def scaffold_split(keys: np.ndarray, fractions=(0.8, 0.1, 0.1)) -> dict[str, np.ndarray]:
    """OGB's scaffold-split procedure on integer scaffold ``keys`` ``[G]``.

    Groups of equal key are sorted by size (largest first, ties by key) and
    laid end to end; a group goes whole to train if it ends within the first
    ``fractions[0]`` of the graphs, to valid if within ``fractions[0] +
    fractions[1]``, else to test (OGB's procedure, except that a small group
    never goes back to fill train). Within a split, graph ids ascend.

    Returns:
      ``{"train", "valid", "test"}``: int64 graph ids.
    """
    keys = np.asarray(keys)
    count = keys.shape[0]
    unique, inverse, sizes = np.unique(keys, return_inverse=True, return_counts=True)
    order = np.lexsort((unique, -sizes))  # largest first, ties by key
    before = np.zeros(order.shape[0], np.int64)  # graphs in larger groups than this one
    before[order] = np.concatenate([[0], np.cumsum(sizes[order])[:-1]])
    start = before[inverse]
    train_end = fractions[0] * count
    valid_end = (fractions[0] + fractions[1]) * count
    group_end = start + sizes[inverse]
    bucket = np.where(group_end <= train_end, 0, np.where(group_end <= valid_end, 1, 2))
    ids = np.arange(count, dtype=np.int64)
    return {key: ids[bucket == i] for i, key in enumerate(("train", "valid", "test"))}


def load_synthetic_graphs(name: str, *, seed: int = 0) -> GraphDataset:
    """``synthetic:molhiv`` or ``synthetic:molpcba`` at full size (:func:`generate_molecules`)."""
    preset = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    if preset not in PRESETS:
        raise ValueError(
            f"unknown synthetic graph dataset {name!r}; choose one of "
            f"{[PREFIX + p for p in PRESETS]}"
        )
    return generate_molecules(preset, seed=seed)


__all__ = [
    "MOTIF_TYPES",
    "PRESETS",
    "MoleculeSpec",
    "generate_molecules",
    "load_synthetic_graphs",
    "motif_counts",
    "scaffold_split",
    "task_motifs",
]

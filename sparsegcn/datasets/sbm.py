"""Degree-corrected stochastic block model: the sampling core of the synthetic datasets.

Nodes carry a class ``y`` and a degree propensity ``θ``. Each edge is a
same-class edge with probability ``h`` (the edge homophily), a cross-class
edge otherwise. Either way its source ``s`` is drawn proportionally to
``θ``, and its target proportionally to ``θ`` among the nodes of the
source's class, or among the nodes of the other classes:

.. math::

    P(s) = \\frac{\\theta_s}{\\Theta}, \\qquad
    P(t \\mid s) = h \\, \\frac{\\theta_t [y_t = y_s]}{\\Theta_{y_s}}
                  + (1 - h) \\, \\frac{\\theta_t [y_t \\neq y_s]}{\\Theta - \\Theta_{y_s}}

where ``Θ`` sums ``θ`` over all nodes and ``Θ_c`` over class ``c``. A node's
expected degree is then roughly proportional to ``θ`` (Karrer & Newman's
degree correction), so a power-law ``θ`` gives a power-law degree
distribution. (Drawing the "otherwise" target from the whole graph instead
would add ``(1 - h) Σ_c (Θ_c/Θ)^2`` to the homophily.)

Self-loops are discarded and repeated pairs kept once. The same-class and
the cross-class pairs are drawn as two pools of exact sizes ``round(h E)``
and the rest: rounds of fresh draws top each pool up, and a pool's surplus is
dropped uniformly at random. So the result holds exactly ``E`` distinct
unordered pairs, and deduplication (which hits the denser same-class pairs
harder) cannot bias the homophily.

Randomness comes in fixed-size blocks, each from its own
``numpy.random.SeedSequence(seed, spawn_key=(stream, ...))``, so a seed
defines the output exactly; how many blocks are processed together (the
memory chunk) never changes it.

References:
  Karrer & Newman, *Stochastic blockmodels and community structure in
  networks*, Phys. Rev. E 83, 016107 (2011). https://arxiv.org/abs/1008.3926
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from tqdm.auto import tqdm

EDGE_BLOCK = 1 << 16  # edge draws per random stream: part of what a seed means
NODE_BLOCK = 1 << 12  # feature rows per random stream: likewise
_CHUNK_BLOCKS = 32  # edge blocks processed at once (~2M draws): bounds temporaries only
_MAX_ROUNDS = 100
NODE_STREAM, MEAN_STREAM, FEATURE_STREAM, EDGE_STREAM, TRIM_STREAM, SPLIT_STREAM = range(6)


def stream(seed: int, *key: int) -> np.random.Generator:
    """The independent generator for ``seed`` and a stream ``key`` (``spawn_key``)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


class BlockModel(NamedTuple):
    """The node half of the model: classes and propensities, arranged for sampling.

    Nodes are laid out by class in "positions"; ``order`` maps a position to
    its node id, which is a uniformly random permutation, so ids carry no
    class information.

    Attributes:
      labels: int64 ``[N]`` class of each node id.
      order: int32 ``[N]`` node id at each position (positions sorted by class).
      position_class: int32 ``[N]`` class at each position.
      class_start: int64 ``[C + 1]`` first position of each class, then ``N``.
      cdf: float64 ``[N]`` inclusive cumulative sum of ``θ`` over positions.
      guide: int64 ``[N]`` guide table for :func:`_lookup`.
    """

    labels: np.ndarray
    order: np.ndarray
    position_class: np.ndarray
    class_start: np.ndarray
    cdf: np.ndarray
    guide: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.order.shape[0])

    def pair_capacity(self) -> tuple[int, int]:
        """Numbers of distinct same-class and cross-class node pairs."""
        return pair_capacity(np.diff(self.class_start))


def pair_capacity(sizes: np.ndarray) -> tuple[int, int]:
    """Numbers of distinct same-class and cross-class pairs of nodes in classes of ``sizes``."""
    sizes = np.asarray(sizes, np.int64)
    same = int(np.sum(sizes * (sizes - 1) // 2))
    n = int(sizes.sum())
    return same, n * (n - 1) // 2 - same


def too_dense(
    capacity: tuple[int, int], num_edges: int, homophily: float
) -> tuple[int, int] | None:
    """``(cross-class pairs needed, those possible)`` when :func:`sample_pairs` would refuse
    ``num_edges`` edges on classes of ``capacity`` (:func:`pair_capacity`), else ``None``."""
    same_capacity, cross_capacity = capacity
    num_cross = num_edges - min(round(homophily * num_edges), same_capacity // 4)
    return (num_cross, cross_capacity) if num_cross > cross_capacity // 4 else None


def class_sizes(num_nodes: int, num_classes: int, imbalance: float) -> np.ndarray:
    """int64 ``[C]`` class sizes summing to ``N``, shares falling geometrically from
    class 0 to class ``C - 1`` by a total factor ``imbalance`` (largest remainders).
    """
    exponents = np.arange(num_classes) / max(num_classes - 1, 1)
    shares = imbalance**-exponents
    quota = num_nodes * shares / shares.sum()
    sizes = np.floor(quota).astype(np.int64)
    remainder_order = np.argsort(-(quota - sizes), kind="stable")
    sizes[remainder_order[: num_nodes - int(sizes.sum())]] += 1
    return sizes


def block_model(
    num_nodes: int,
    num_edges: int,
    num_classes: int,
    *,
    degree_exponent: float,
    imbalance: float,
    seed: int,
) -> BlockModel:
    """Draws classes and power-law propensities for ``num_nodes`` nodes.

    ``θ`` is Pareto with tail ``P(θ > x) = x^{1-γ}`` (``γ = degree_exponent``,
    the density exponent, so degrees follow ``P(k) ∝ k^{-γ}``), capped so that
    no node's expected degree ``2E θ / Θ`` exceeds ``(N - 1) / 2``: beyond that
    most of a node's draws would repeat pairs it already has.
    """
    rng = stream(seed, NODE_STREAM)
    sizes = class_sizes(num_nodes, num_classes, imbalance)
    position_class = np.repeat(np.arange(num_classes, dtype=np.int32), sizes)
    order = rng.permutation(num_nodes).astype(np.int32)
    labels = np.empty(num_nodes, np.int64)
    labels[order] = position_class
    theta = (1.0 - rng.random(num_nodes)) ** (-1.0 / (degree_exponent - 1.0))
    cap = (num_nodes - 1) / 2 * theta.sum() / max(2 * num_edges, 1)
    np.minimum(theta, max(cap, 1.0), out=theta)
    cdf = np.cumsum(theta)
    buckets = np.arange(num_nodes) * (cdf[-1] / num_nodes)
    guide = np.maximum(np.searchsorted(cdf, buckets, side="right") - 1, 0)
    class_start = np.concatenate([[0], np.cumsum(sizes)])
    return BlockModel(labels, order, position_class, class_start, cdf, guide)


def _lookup(cdf: np.ndarray, guide: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``searchsorted(cdf, x, side="right")`` for ``x`` in ``[0, cdf[-1])``.

    A binary search takes ~20 dependent cache misses per draw on a large
    ``cdf``; the guide table (Chen & Asau's indexed search) starts each draw
    at most a few positions short of its answer, so a handful of vectorized
    steps finish them all, ~20x faster.
    """
    k = guide.shape[0]
    bucket = np.minimum((x * (k / cdf[-1])).astype(np.int64), k - 1)
    pos = guide[bucket]
    active = np.flatnonzero(cdf[pos] <= x)
    while active.size:
        pos[active] += 1
        active = active[cdf[pos[active]] <= x[active]]
    return pos


def _draw_chunk(model: BlockModel, same: bool, seed: int, round_: int, blocks) -> np.ndarray:
    """Canonical keys ``min * N + max`` of the same-class (or cross-class) edges
    drawn by ``blocks`` (``(index, size)`` pairs), self-loops removed, in draw order.
    """
    pool = EDGE_STREAM, int(same), round_
    u = np.concatenate([stream(seed, *pool, b).random((2, m)) for b, m in blocks], axis=1)
    cdf, n = model.cdf, model.num_nodes
    top = np.nextafter(cdf[-1], 0.0)
    source = _lookup(cdf, model.guide, np.minimum(u[0] * cdf[-1], top))
    cls = model.position_class[source]
    start, stop = model.class_start[cls], model.class_start[cls + 1]
    low = np.where(start > 0, cdf[np.maximum(start - 1, 0)], 0.0)
    mass = cdf[stop - 1] - low
    if same:
        x = low + u[1] * mass
    else:  # skip the class's own interval of the cdf
        x = u[1] * (cdf[-1] - mass)
        x = np.where(x >= low, x + mass, x)
    target = _lookup(cdf, model.guide, np.minimum(x, top))
    # Rounding can move x across a class boundary: such rare draws are discarded.
    keep = (model.position_class[target] == cls) == same
    a, b = model.order[source[keep]], model.order[target[keep]]
    keep = a != b
    a, b = a[keep], b[keep]
    return np.minimum(a, b).astype(np.int64) * n + np.maximum(a, b)


def _draw_round(model, same, seed, round_, draws, bar) -> np.ndarray:
    """Distinct sorted keys of one round of ``draws`` edge draws."""
    sizes = [min(EDGE_BLOCK, draws - start) for start in range(0, draws, EDGE_BLOCK)]
    keys = np.empty(draws, np.int64)
    filled = 0
    for first in range(0, len(sizes), _CHUNK_BLOCKS):
        blocks = [(b, sizes[b]) for b in range(first, min(first + _CHUNK_BLOCKS, len(sizes)))]
        chunk = _draw_chunk(model, same, seed, round_, blocks)
        keys[filled : filled + chunk.shape[0]] = chunk
        filled += chunk.shape[0]
        bar.update(sum(m for _, m in blocks))
    keys = keys[:filled]
    keys.sort()
    return _distinct_sorted(keys)


def _distinct_sorted(keys: np.ndarray) -> np.ndarray:
    # np.unique re-sorts (and in NumPy 2.4 hashes int64 ~50x slower than this).
    if keys.size < 2:
        return keys
    first = np.empty(keys.shape, bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


def _merge_new(known: np.ndarray, fresh: np.ndarray) -> tuple[np.ndarray, int]:
    """Sorted union of two sorted distinct key arrays, and how many keys were new."""
    pos = np.minimum(np.searchsorted(known, fresh), max(known.size - 1, 0))
    new = fresh[known[pos] != fresh] if known.size else fresh
    merged = np.concatenate([known, new])
    merged.sort(kind="stable")  # timsort: two sorted runs merge in linear time
    return merged, int(new.size)


def _sample_pool(model, same: bool, count: int, *, seed: int, bar) -> np.ndarray:
    """Exactly ``count`` distinct sorted keys of same-class (or cross-class) pairs.

    Round 0 draws 5% more than needed; each later round draws what is still
    missing, divided by the last round's yield of new pairs, plus 10%.
    """
    keys = np.empty(0, np.int64)
    draws = count + count // 20 + 64
    round_ = 0
    while keys.size < count:
        if round_ == _MAX_ROUNDS:
            kind = "same-class" if same else "cross-class"
            raise RuntimeError(
                f"placed only {keys.size} of {count} {kind} pairs in {_MAX_ROUNDS} rounds"
            )
        bar.total += draws
        bar.refresh()
        keys, gained = _merge_new(keys, _draw_round(model, same, seed, round_, draws, bar))
        rate = gained / draws
        draws = min(math.ceil((count - keys.size) / max(rate, 1e-3) * 1.1) + 64, 2 * count + 64)
        round_ += 1
    surplus = keys.size - count
    if surplus:
        drop = stream(seed, TRIM_STREAM, int(same)).choice(keys.size, surplus, replace=False)
        keys = np.delete(keys, drop)
    return keys


def sample_pairs(
    model: BlockModel, num_edges: int, homophily: float, *, seed: int, progress: bool = False
) -> np.ndarray:
    """Exactly ``num_edges`` distinct unordered non-loop pairs from the model.

    ``round(homophily * num_edges)`` of them join two nodes of one class,
    unless the classes are too small to hold that many (more than a quarter
    of their ``Σ_c n_c (n_c - 1) / 2`` pairs, which happens only at tiny
    scales): then the same-class pool is capped there and the rest are
    cross-class pairs.

    Returns:
      int64 ``[num_edges]`` sorted keys ``a * N + b`` with ``a < b``.

    Raises:
      ValueError: the cross-class pairs would exceed a quarter of all
        possible ones (a graph that dense is no longer sparse, and draws
        would mostly repeat).
      RuntimeError: the rounds stop finding new pairs.
    """
    same_capacity, cross_capacity = model.pair_capacity()
    dense = too_dense((same_capacity, cross_capacity), num_edges, homophily)
    if dense is not None:
        raise ValueError(
            f"{num_edges} edges on {model.num_nodes} nodes is too dense for this generator: "
            f"{dense[0]} cross-class pairs exceed a quarter of the {dense[1]} possible; use a "
            f"larger scale"
        )
    num_same = min(round(homophily * num_edges), same_capacity // 4)
    num_cross = num_edges - num_same
    with tqdm(total=0, disable=not progress, unit="draw", desc="edges", leave=False) as bar:
        same = _sample_pool(model, True, num_same, seed=seed, bar=bar)
        cross = _sample_pool(model, False, num_cross, seed=seed, bar=bar)
    keys = np.concatenate([same, cross])
    del same, cross
    keys.sort(kind="stable")  # merges the two sorted pools in linear time
    return keys


def sampling_bytes(num_edges: int) -> int:
    """Upper estimate of the peak memory of :func:`sample_pairs`, in bytes.

    About 100 bytes per draw of the chunk in flight (uniforms, positions,
    classes, keys), plus the pools' int64 keys and their merge (measured
    28 bytes per edge once the chunk is small beside them).
    """
    chunk = min(num_edges + num_edges // 20 + 64, EDGE_BLOCK * _CHUNK_BLOCKS)
    return 128 * chunk + 32 * num_edges


def symmetric_keys(pairs: np.ndarray, num_nodes: int, chunk: int = 1 << 22) -> np.ndarray:
    """Both directions of every pair, as sorted keys ``receiver * N + sender``.

    Args:
      pairs: int64 ``[E]`` sorted keys ``a * N + b`` with ``a < b``; this is
        already the key of the edge ``b -> a``.

    Returns:
      int64 ``[2E]`` sorted keys.
    """
    e = pairs.shape[0]
    keys = np.empty(2 * e, np.int64)
    keys[:e] = pairs
    for start in range(0, e, chunk):
        a, b = np.divmod(pairs[start : start + chunk], num_nodes)
        keys[e + start : e + start + a.shape[0]] = b * num_nodes + a
    keys[e:].sort()
    keys.sort(kind="stable")  # merges the two sorted halves in linear time
    return keys


def split_keys(keys: np.ndarray, num_nodes: int, chunk: int = 1 << 22):
    """int32 ``(senders, receivers)`` from keys ``receiver * N + sender``."""
    senders = np.empty(keys.shape, np.int32)
    receivers = np.empty(keys.shape, np.int32)
    for start in range(0, keys.shape[0], chunk):
        r, s = np.divmod(keys[start : start + chunk], num_nodes)
        receivers[start : start + r.shape[0]] = r
        senders[start : start + s.shape[0]] = s
    return senders, receivers


def edge_homophily(pairs: np.ndarray, labels: np.ndarray, chunk: int = 1 << 22) -> float:
    """Fraction of pairs (int64 keys ``a * N + b``) joining two nodes of one class."""
    n = labels.shape[0]
    same = 0
    for start in range(0, pairs.shape[0], chunk):
        a, b = np.divmod(pairs[start : start + chunk], n)
        same += int(np.count_nonzero(labels[a] == labels[b]))
    return same / max(pairs.shape[0], 1)


def class_features(
    labels: np.ndarray,
    num_classes: int,
    num_features: int,
    signal: float,
    *,
    seed: int,
    progress: bool = False,
) -> np.ndarray:
    """Class-conditional Gaussian features, float32 ``[N, F]``.

    .. math:: x_i = \\mu_{y_i} + \\varepsilon_i, \\qquad
              \\mu_c \\sim \\mathcal N(0, \\tfrac{s^2}{F} I), \\quad
              \\varepsilon_i \\sim \\mathcal N(0, I)

    Two class means then lie about ``s √2`` noise standard deviations apart,
    whatever ``F``: from features alone, a pair of classes is confused with
    probability about ``Φ(-s / √2)``.
    """
    n = labels.shape[0]
    means = stream(seed, MEAN_STREAM).standard_normal((num_classes, num_features))
    means = (means * (signal / math.sqrt(num_features))).astype(np.float32)
    x = np.empty((n, num_features), np.float32)
    with tqdm(total=n, disable=not progress, unit="node", desc="features", leave=False) as bar:
        for b, start in enumerate(range(0, n, NODE_BLOCK)):
            block = x[start : start + NODE_BLOCK]
            stream(seed, FEATURE_STREAM, b).standard_normal(out=block, dtype=np.float32)
            block += means[labels[start : start + NODE_BLOCK]]
            bar.update(block.shape[0])
    return x

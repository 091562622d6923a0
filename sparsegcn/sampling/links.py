"""Edges as examples: a random train/validation/test edge split on the host, and
negative pairs sampled on the device inside the compiled epoch.

- :func:`random_link_split`: PyG's ``RandomLinkSplit`` semantics (85/5/10 by
  default). Both directions of an undirected edge land on the same side;
  validation and test edges leave the message-passing graph; validation and
  test negatives are drawn once, excluding every true edge exactly, and kept.
  Vectorised NumPy, seeded.
- :class:`EdgeIndex` and :func:`edge_index`: the true edges as a receiver-sorted
  CSR, so :func:`is_edge` answers "is ``(u, v)`` an edge?" on the device with a
  fixed number of binary-search steps (int32 throughout: no ``N²`` keys). A
  graph of at most :data:`BITMAP_MAX_NODES` nodes also gets an ``N²``-bit
  map, which answers with one gather instead.
- :func:`uniform_negatives` (uniform pairs) and :func:`corrupt_targets`
  (per-source corruption, for MRR-style ranking): drawn on the device with
  rejection of true edges and self-loops. Candidate nodes are uniform to a
  relative deviation of at most ``N / 2^32``
  (:func:`~sparsegcn.ops.random.uniform_below` of
  :func:`~sparsegcn.ops.random.hash_bits`, the neighbour sampler's draws),
  and rejection keeps them uniform over the non-edges. On a sparse graph,
  :func:`uniform_negatives` draws one candidate a slot and refills the
  rejected slots from a shared pool of spare candidates
  (:func:`spare_pool_size`: about ``count d`` plus a margin, ``d`` the
  rejected fraction of all pairs, the density plus ``1/N``), which runs short
  with a probability below ``1e-12`` a call. Otherwise (and always in
  :func:`corrupt_targets`, whose rejections depend on the source) each slot
  draws ``rounds + 1`` candidates at once (static shapes), tests them all in
  one vectorised pass, and keeps the first accepted one: sequential rejection
  sampling with at most ``rounds`` redraws, without a loop-carried
  dependency. A slot whose candidates are all rejected keeps its first, so
  the residual collision rate is about ``d ** (rounds + 1)``.

References:
  Kipf & Welling, *Variational Graph Auto-Encoders*, NIPS Workshop on
  Bayesian Deep Learning, 2016. https://arxiv.org/abs/1611.07308
  PyG ``torch_geometric.transforms.RandomLinkSplit`` and
  ``torch_geometric.utils.negative_sampling``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn._checks import (
    check_flag,
    check_hyperparameter,
    check_ids_in_range,
    check_key,
    check_static_int,
    is_traced,
)
from sparsegcn.backends.base import fence_ids
from sparsegcn.datasets.link_base import check_node_ids
from sparsegcn.graph import Graph
from sparsegcn.ops.random import hash_bits, uniform_below

NEGATIVE_ROUNDS = 3
"""Default redraw rounds of the device negative samplers (see the module docstring)."""


class LinkSplit(NamedTuple):
    """A graph's edges split into link-prediction examples.

    Attributes:
      graph: the message-passing graph: the train edges only (both
        directions of each undirected one), no self-loops.
      split: ``{"train", "valid", "test", "valid_neg", "test_neg"}`` ->
        int64 ``[P, 2]`` node pairs, one row per undirected edge (``u < v``)
        or per directed edge. Negatives are pairs that are no edge of the
        whole input graph (in either direction when undirected; in their
        own direction when directed, as PyG's and OGB's negatives), not
        self-loops, none repeated, the validation and test negatives disjoint.
      undirected: whether the input graph was symmetric.
    """

    graph: Graph
    split: dict
    undirected: bool


def _pair_keys(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    return u.astype(np.int64) * n + v.astype(np.int64)


def _check_fraction(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a fraction in [0, 1), got {value!r}")
    return float(value)


def _pairs_needed(val: float, test: float) -> int:
    """The fewest pairs ``M`` whose split holds out one example at least of each
    nonzero fraction (``floor(f * M) >= 1``), and trains on one: 3 at least."""
    m = 3
    for f in (val, test):
        if f > 0:
            m = max(m, math.ceil(1 / f))
            while math.floor(f * m) < 1:
                m += 1
    return m


AMBIGUOUS_RECIPROCITY = 0.9
"""Detecting whether a graph is undirected (``random_link_split(undirected=None)``), a
graph where at least this share of the edges have their reverse, but not all, is
refused as unclear."""


def random_link_split(
    graph: Graph,
    *,
    val: float = 0.05,
    test: float = 0.10,
    seed: int = 0,
    undirected: bool | None = None,
) -> LinkSplit:
    """Splits ``graph``'s edges into train, validation and test examples.

    Self-loops and duplicate edges are dropped first. An undirected graph
    (``undirected=None``: detected, every edge's reverse present) is split
    by unordered pair ``{u, v}``, so both directions go to one side (a graph
    where at least :data:`AMBIGUOUS_RECIPROCITY` of the edges, but not all,
    have their reverse is refused when detecting: split edge by edge, the
    reverse of a held-out edge would train); with
    ``undirected=True`` an edge stored in one direction is its pair too. The
    validation and test counts are ``floor(val * M)`` and ``floor(test * M)``
    of the ``M`` pairs (PyG's rule); the rest train. One negative per
    validation and test positive is drawn, excluding exactly every edge of
    the input graph, self-loops and earlier draws.

    Args:
      graph: host :class:`~sparsegcn.graph.Graph`, ``N`` nodes.
      val, test: fractions of the pairs held out.
      seed: the NumPy generator's seed, an integer in ``[0, 2**32)``.
      undirected: split by unordered pairs (``None``: detect).

    Returns:
      :class:`LinkSplit`.

    Raises:
      TypeError: a seed that is not an integer, or ``undirected`` neither
        ``None`` nor a bool.
      ValueError: fractions outside ``[0, 1)`` or summing to 1 or more, a
        seed outside ``[0, 2**32)``, a graph neither undirected nor clearly
        directed when ``undirected=None``, a graph with too few pairs to hold out
        one validation and one test example (20 at the default fractions;
        3 at least), or one too dense to draw the negatives from.
    """
    val, test = _check_fraction("val", val), _check_fraction("test", test)
    check_hyperparameter("seed", seed, label="random_link_split: seed")
    if undirected is not None:
        undirected = check_flag("undirected", undirected)
    if val + test >= 1:
        raise ValueError(f"val + test must be below 1, got {val} + {test}")
    n = graph.num_nodes
    s = np.asarray(graph.senders, np.int64)
    r = np.asarray(graph.receivers, np.int64)
    keep = s != r
    s, r = s[keep], r[keep]
    keys = np.unique(_pair_keys(s, r, n))
    if undirected is None:
        reverse = _pair_keys(keys % n, keys // n, n)
        paired = int(np.count_nonzero(np.isin(reverse, keys, assume_unique=True)))
        undirected = paired == keys.shape[0]
        if not undirected and paired >= AMBIGUOUS_RECIPROCITY * keys.shape[0]:
            # Split edge by edge, the reverse of a held-out edge would train (and pass
            # messages): most test edges leaked.
            raise ValueError(
                f"random_link_split: {paired:,} of the graph's {keys.shape[0]:,} edges have "
                f"their reverse, but not all, so whether it is undirected is unclear: split "
                f"edge by edge, a held-out edge's reverse would stay in training; pass "
                f"undirected=True (split by unordered pairs) or undirected=False, or store "
                f"the graph with both directions of every edge (sparsegcn.to_undirected)"
            )
    elif undirected:
        # Forced: an edge stored in one direction is the unordered pair all the same
        # (keeping u < v of the stored keys alone dropped the others).
        keys = np.unique(np.concatenate([keys, _pair_keys(keys % n, keys // n, n)]))
    u, v = keys // n, keys % n
    if undirected:
        lower = u < v
        u, v = u[lower], v[lower]
    m = u.shape[0]
    needed = _pairs_needed(val, test)
    if m < needed:
        what = "unordered pairs of an undirected graph" if undirected else "edges"
        raise ValueError(
            f"random_link_split needs at least {needed} edges ({what}, self-loops and "
            f"duplicates dropped) to hold out one validation and one test edge at val={val}, "
            f"test={test}; got {m}"
        )
    rng = np.random.default_rng(seed)
    perm = rng.permutation(m)
    num_val, num_test = math.floor(val * m), math.floor(test * m)
    num_train = m - num_val - num_test
    pairs = np.stack([u, v], axis=1)[perm]
    train, valid, held = np.split(pairs, [num_train, num_train + num_val])
    negatives = _draw_negatives(rng, keys, n, num_val + num_test, undirected)
    ms, mr = train[:, 0], train[:, 1]
    if undirected:
        ms, mr = np.concatenate([ms, mr]), np.concatenate([mr, ms])
    order = np.lexsort((ms, mr))
    message = Graph(
        ms[order].astype(np.int32), mr[order].astype(np.int32), num_nodes=n, edges_sorted=True
    )
    split = {
        "train": train,
        "valid": valid,
        "test": held,
        "valid_neg": negatives[:num_val],
        "test_neg": negatives[num_val:],
    }
    return LinkSplit(message, split, bool(undirected))


def _draw_negatives(
    rng: np.random.Generator, edge_keys: np.ndarray, n: int, count: int, undirected: bool
) -> np.ndarray:
    """``count`` distinct non-edge pairs (``u < v`` when undirected), no self-loops."""
    available = n * (n - 1) // (2 if undirected else 1) - (
        edge_keys.size // 2 if undirected else edge_keys.size
    )
    if count > available:
        raise ValueError(
            f"cannot draw {count} negative pairs: the graph has only {available} non-edges"
        )
    chosen = np.empty(0, np.int64)
    while chosen.size < count:
        want = 2 * (count - chosen.size) + 16
        a, b = rng.integers(0, n, want), rng.integers(0, n, want)
        if undirected:
            a, b = np.minimum(a, b), np.maximum(a, b)
        cand = _pair_keys(a, b, n)
        ok = (a != b) & ~np.isin(cand, edge_keys)
        cand = cand[ok]
        # The first occurrence of each new key, in draw order.
        _, first = np.unique(cand, return_index=True)
        cand = cand[np.sort(first)]
        cand = cand[~np.isin(cand, chosen)]
        chosen = np.concatenate([chosen, cand[: count - chosen.size]])
    return np.stack([chosen // n, chosen % n], axis=1)


BITMAP_MAX_NODES = 8192
"""Nodes up to which :func:`edge_index` adds the ``N²``-bit map (8 MiB at most).

On a small graph the binary search's steps are each a separate gather
whose fixed cost dominates a full-batch step; the map answers with one.
"""


class EdgeIndex(NamedTuple):
    """The true edges as a CSR for membership tests on the device; a pytree.

    Attributes:
      indptr: int32 ``[N + 1]``: row ``u``'s targets are
        ``indices[indptr[u]:indptr[u + 1]]``.
      indices: int32 ``[E]``, sorted within each row.
      steps: static: binary-search steps, ``ceil(log2(max degree + 1)) + 1``.
      bitmap: uint32 ``[ceil(N² / 32)]`` or ``None``: bit ``u N + v`` (word
        ``k >> 5``, bit ``k & 31``) is set when ``(u, v)`` is an edge;
        :func:`edge_index` builds it for at most :data:`BITMAP_MAX_NODES` nodes.
    """

    indptr: jax.Array
    indices: jax.Array
    steps: int
    bitmap: jax.Array | None = None


jax.tree_util.register_pytree_node(
    EdgeIndex,
    lambda e: ((e.indptr, e.indices, e.bitmap), e.steps),
    lambda steps, children: EdgeIndex(children[0], children[1], steps, children[2]),
)


def edge_index(pairs: np.ndarray, num_nodes: int, *, symmetric: bool = True) -> EdgeIndex:
    """An :class:`EdgeIndex` of ``pairs`` ``[P, 2]`` (and their reverses if ``symmetric``),
    with its bitmap when ``num_nodes <= BITMAP_MAX_NODES``.

    Raises:
      TypeError: ``num_nodes`` is not a static int.
      ValueError: a node id outside ``[0, num_nodes)``, naming the first
        (its key ``u N + v`` would alias another pair).
    """
    num_nodes = check_static_int("num_nodes", num_nodes)
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    check_node_ids("pairs", pairs, num_nodes)
    u, v = pairs[:, 0], pairs[:, 1]
    if symmetric:
        u, v = np.concatenate([u, v]), np.concatenate([v, u])
    keys = np.unique(_pair_keys(u, v, num_nodes))
    rows, cols = keys // num_nodes, keys % num_nodes
    degree = np.bincount(rows, minlength=num_nodes)
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int32)
    steps = math.ceil(math.log2(int(degree.max(initial=0)) + 1)) + 1
    bitmap = None
    if num_nodes <= BITMAP_MAX_NODES:
        words = np.zeros(-(-(num_nodes * num_nodes) // 32), np.uint32)
        np.bitwise_or.at(words, keys >> 5, np.left_shift(1, keys & 31).astype(np.uint32))
        bitmap = jnp.asarray(words)
    return EdgeIndex(jnp.asarray(indptr), jnp.asarray(cols.astype(np.int32)), steps, bitmap)


def is_edge(index: EdgeIndex, u: jax.Array, v: jax.Array) -> jax.Array:
    """Whether each ``(u[i], v[i])`` is an edge of ``index``; bool, ``u``'s shape.

    With a bitmap, bit ``u N + v``: one gather. Otherwise a binary search
    of ``v`` in row ``u``'s sorted targets, ``index.steps`` vectorised
    steps: exact, ``O(log max degree)`` per pair, int32 only.
    """
    if index.indices.shape[0] == 0:
        return jnp.zeros(jnp.shape(u), bool)
    if index.bitmap is not None:
        n = index.indptr.shape[0] - 1
        key = u * n + v
        word = index.bitmap.at[key >> 5].get(mode="promise_in_bounds")
        return ((word >> (key & 31).astype(jnp.uint32)) & 1) == 1
    lo = index.indptr[u]
    end = index.indptr[u + 1]
    hi = end
    last = index.indices.shape[0] - 1
    for _ in range(index.steps):
        mid = (lo + hi) // 2
        right = (mid < hi) & (index.indices[jnp.minimum(mid, last)] < v)
        lo = jnp.where(right, mid + 1, lo)
        hi = jnp.where(right, hi, mid)
    return (lo < end) & (index.indices[jnp.minimum(lo, last)] == v)


def _uniform_nodes(
    key: jax.Array, shape: tuple[int, ...], num_nodes: int, materialize: bool
) -> jax.Array:
    """int32 node ids of ``shape`` in ``[0, num_nodes)``, uniform to a relative
    deviation of at most ``num_nodes / 2^32``: one fused hash of ``key``
    (:func:`~sparsegcn.ops.random.hash_bits`, :func:`~sparsegcn.ops.random.uniform_below`).

    ``materialize``: computed in one vectorised loop of their own
    (:func:`~sparsegcn.backends.base.fence_ids`); fused into the membership
    test's gather, XLA computes the hash there one element at a time.
    """
    nodes = uniform_below(hash_bits(key, shape), jnp.int32(num_nodes))
    return fence_ids(nodes) if materialize else nodes


def _reject(index: EdgeIndex, u: jax.Array, v: jax.Array) -> jax.Array:
    return (u == v) | is_edge(index, u, v)


def _first_accepted(rejected: jax.Array) -> jax.Array:
    """Per slot, the first of the ``R`` draws (axis 0) that is not rejected; 0 if all are."""
    return jnp.argmin(rejected, axis=0)


def _take(draws: jax.Array, pick: jax.Array) -> jax.Array:
    """``draws[pick[i], i]`` for every slot ``i``: ``[R, *S]`` and ``[*S]`` -> ``[*S]``."""
    return jnp.take_along_axis(draws, pick[None], axis=0)[0]


SPARE_POOL_MAX_DENSITY = 1 / 16
"""Rejected fraction ``d`` up to which :func:`uniform_negatives` refills from a spare pool."""


def spare_pool_size(count: int, num_nodes: int, num_edges: int) -> int | None:
    """The spare candidates :func:`uniform_negatives` draws for ``count`` slots, or
    ``None`` where per-slot redraws are used (``d`` above :data:`SPARE_POOL_MAX_DENSITY`).

    With ``d = (num_edges + N) / N²`` (an upper bound of the rejected fraction:
    ``num_edges`` stored directed edges, ``N`` self-loops), the rejected slots
    number about ``mu = count d``. The pool covers ``t = mu + 8 sqrt(mu) + 8``
    of them and, its own acceptances being binomial, holds
    ``(t + 8 sqrt(t) + 8) / (1 - d)`` candidates: it runs short with a
    probability below ``1e-12`` a call. Static: every argument is a shape.
    """
    if count <= 0 or num_nodes <= 0:
        return None
    d = min(1.0, (num_edges + num_nodes) / float(num_nodes) ** 2)
    if d > SPARE_POOL_MAX_DENSITY:
        return None
    mu = count * d
    t = mu + 8 * math.sqrt(mu) + 8
    return math.ceil((t + 8 * math.sqrt(t) + 8) / (1 - d))


def _check_sampler_args(key, name: str, count, num_nodes, index: EdgeIndex, rounds) -> int:
    """Refuses a negative sampler's bad arguments before tracing; returns ``count``.

    All are static (shapes), but the key, which may be traced: its shape and
    dtype are checked, never its value."""
    check_key("key", key)
    count = check_static_int(name, count)
    check_static_int("rounds", rounds)
    num_nodes = check_static_int("num_nodes", num_nodes, minimum=1)
    indexed = index.indptr.shape[-1] - 1
    if num_nodes != indexed:
        raise ValueError(
            f"num_nodes={num_nodes} disagrees with the edge index of {indexed} nodes "
            f"(index.indptr has {indexed + 1} entries); pass the node count it was built for"
        )
    return count


def _refuse_no_non_edges(index: EdgeIndex, sources, num_nodes: int, what: str) -> None:
    """Raises where no negative exists: (``sources=None``) every pair of distinct nodes
    is an edge, or one of the concrete ``sources`` is linked to every other node. Its
    negatives could only be true edges or itself, and would be returned as negatives
    all the same. Reads the degrees of ``sources`` alone, and the rows of those of
    degree ``N - 1`` or more; a traced index is trusted."""
    if is_traced(index.indptr) or is_traced(index.indices):
        return
    full = num_nodes * (num_nodes - 1)
    if sources is None:  # called only where E >= N (N - 1): a small graph
        indptr = np.asarray(index.indptr, np.int64)
        u = np.repeat(np.arange(num_nodes), np.diff(indptr))
        v = np.asarray(index.indices, np.int64)
        if np.unique((u * num_nodes + v)[u != v]).size == full:
            raise ValueError(
                f"{what}: every pair of the {num_nodes} nodes is an edge, so there is no "
                f"negative to draw"
            )
        return
    nodes = np.unique(sources)
    with jax.ensure_compile_time_eval():  # concrete inputs inside a jit: read, not staged
        starts = np.asarray(index.indptr[nodes], np.int64)
        stops = np.asarray(index.indptr[nodes + 1], np.int64)
    wide = stops - starts >= num_nodes - 1  # the others have a non-edge for sure
    for u, start, stop in zip(nodes[wide], starts[wide], stops[wide], strict=True):
        with jax.ensure_compile_time_eval():
            row = np.asarray(index.indices[start:stop])
        if np.unique(row[row != u]).size == num_nodes - 1:
            raise ValueError(
                f"{what}: source {int(u)} has an edge to every other of the {num_nodes} "
                f"nodes, so it has no negative target to draw"
            )


def uniform_negatives(
    key: jax.Array,
    count: int,
    num_nodes: int,
    index: EdgeIndex,
    *,
    rounds: int = NEGATIVE_ROUNDS,
    materialize: bool = False,
) -> jax.Array:
    """``count`` uniform node pairs that are no edge of ``index`` and no self-loop.

    Rejection sampling, two ways (both jit-able: ``count``, ``num_nodes`` and
    ``rounds`` are static; the accepted pairs are independent and uniform over
    the non-edges either way):

    - a sparse graph (rejected fraction ``d`` at most
      :data:`SPARE_POOL_MAX_DENSITY`) and ``rounds >= 1``: one candidate a
      slot, plus a shared pool of :func:`spare_pool_size` spare candidates
      (about ``count d`` plus a margin). The ``k``-th rejected slot takes the
      ``k``-th accepted spare. Rejected pairs remain only if the pool runs
      short, with a probability below ``1e-12`` a call; a slot left over
      keeps its first candidate. ``count + spare`` draws, not
      ``(rounds + 1) count``.
    - otherwise, each slot draws ``rounds + 1`` candidates and keeps the
      first accepted one (at most ``rounds`` redraws); a slot with every
      candidate rejected keeps its first, a residual rate of about
      ``d ** (rounds + 1)``. ``rounds=0``: one candidate, no redraw.

    Args:
      key: one PRNG key (typed, or a legacy raw one).
      count, rounds: static ints ``>= 0``.
      num_nodes: ``N``, the node count ``index`` was built for.
      materialize: compute the candidate nodes before the membership test,
        in a vectorised loop of their own (faster on CPU). Its fence reads
        one element of the whole array: leave it off where the array is
        split over devices inside the program (the sampled step's
        per-device sub-batches), which it would make gather.

    Returns:
      int32 ``[count, 2]``.

    Raises:
      TypeError: ``key`` is not one PRNG key, or ``count``, ``num_nodes``
        or ``rounds`` is not a static int.
      ValueError: a negative ``count`` or ``rounds``, a batch of keys,
        ``num_nodes`` not ``index``'s node count, or (a concrete index) a
        graph where every pair is an edge: no negative exists.
    """
    count = _check_sampler_args(key, "count", count, num_nodes, index, rounds)
    if count and index.indices.shape[0] >= num_nodes * (num_nodes - 1):
        _refuse_no_non_edges(index, None, num_nodes, "uniform_negatives")
    spare = spare_pool_size(count, num_nodes, index.indices.shape[0]) if rounds >= 1 else None
    if spare is None:
        draws = rounds + 1
        u, v = _uniform_nodes(key, (2, draws, count), num_nodes, materialize)
        pick = _first_accepted(_reject(index, u, v))
        return jnp.stack([_take(u, pick), _take(v, pick)], axis=1)
    u, v = _uniform_nodes(key, (2, count + spare), num_nodes, materialize)
    rejected = _reject(index, u, v)
    head, accepted_spare = rejected[:count], ~rejected[count:]
    # The positions of the accepted spares, in order (padded with 0: never read).
    spares = jnp.nonzero(accepted_spare, size=spare, fill_value=0)[0] + count
    rank = jnp.cumsum(head) - 1  # the k-th rejected slot takes the k-th accepted spare
    refill = head & (rank < jnp.sum(accepted_spare))
    source = jnp.where(refill, spares[jnp.clip(rank, 0, spare - 1)], jnp.arange(count))
    return jnp.stack([u[source], v[source]], axis=1)


def corrupt_targets(
    key: jax.Array,
    sources: jax.Array,
    per_source: int,
    num_nodes: int,
    index: EdgeIndex,
    *,
    rounds: int = NEGATIVE_ROUNDS,
    materialize: bool = False,
) -> jax.Array:
    """``per_source`` random targets for each source that it has no edge to.

    Per-source corruption (the tail of ``(u, v)`` replaced), as MRR ranks a
    positive among its own negatives. The same rejection rule as
    :func:`uniform_negatives`; the residual rate of a source ``u`` is about
    ``((deg(u) + 1) / N) ** (rounds + 1)``.

    Args:
      key: one PRNG key (typed, or a legacy raw one).
      sources: int32 ``[P]``; concrete ones are checked to lie in
        ``[0, num_nodes)``, traced ones are trusted.
      per_source, rounds: static ints ``>= 0``.
      num_nodes: ``N``, the node count ``index`` was built for.
      materialize: compute the candidate nodes before the membership test,
        in a vectorised loop of their own (faster on CPU). Its fence reads
        one element of the whole array: leave it off where the array is
        split over devices inside the program (the sampled step's
        per-device sub-batches), which it would make gather.

    Returns:
      int32 ``[P, per_source]`` targets.

    Raises:
      TypeError: as :func:`uniform_negatives` (``per_source`` for ``count``).
      ValueError: as :func:`uniform_negatives`, or a concrete source
        outside ``[0, num_nodes)`` or linked to every other node (it has no
        negative target), naming the first.
    """
    per_source = _check_sampler_args(key, "per_source", per_source, num_nodes, index, rounds)
    if not is_traced(sources):
        check_ids_in_range("sources", np.asarray(sources).reshape(-1), num_nodes)
        if per_source:
            _refuse_no_non_edges(
                index, np.asarray(sources).reshape(-1), num_nodes, "corrupt_targets"
            )
    sources = jnp.asarray(sources, jnp.int32)
    shape = (sources.shape[0], per_source)
    draws = rounds + 1
    v = _uniform_nodes(key, (draws, *shape), num_nodes, materialize)
    u = jnp.broadcast_to(sources[None, :, None], v.shape)
    return _take(v, _first_accepted(_reject(index, u, v)))


__all__ = [
    "AMBIGUOUS_RECIPROCITY",
    "BITMAP_MAX_NODES",
    "NEGATIVE_ROUNDS",
    "SPARE_POOL_MAX_DENSITY",
    "EdgeIndex",
    "LinkSplit",
    "corrupt_targets",
    "edge_index",
    "is_edge",
    "random_link_split",
    "spare_pool_size",
    "uniform_negatives",
]

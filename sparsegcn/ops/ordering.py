"""Node orders for memory locality: host-side permutations of node ids.

Propagation reads the rows of ``x`` at each node's neighbours; when their
ids are close, those reads hit the cache. These functions compute the
relabelling from the edge arrays alone (NumPy and scipy, once, on the
host); :meth:`sparsegcn.Graph.reorder` applies it to a graph.

References:
  Cuthill & McKee, *Reducing the bandwidth of sparse symmetric
  matrices*, Proc. ACM National Conference, 1969; George & Liu,
  *Computer Solution of Large Sparse Positive Definite Systems*, 1981
  (the reversal). Raghavan, Albert & Kumara, *Near linear time algorithm
  to detect community structures in large-scale networks*, Phys. Rev. E
  76, 2007 (label propagation). Karypis & Kumar, *A fast and high quality
  multilevel scheme for partitioning irregular graphs*, SIAM J. Sci.
  Comput. 20, 1998 (METIS). Staudt & Meyerhenke, *Engineering parallel
  algorithms for community detection in massive networks*, IEEE TPDS 27,
  2016 (networkit's PLM, a parallel Louvain method).
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

__all__ = [
    "COMMUNITY_MAX_ROUNDS",
    "COMMUNITY_TOLERANCE",
    "METIS_PART_SIZE",
    "ORDER_LIBRARIES",
    "REORDER_METHODS",
    "community_labels",
    "metis_parts",
    "networkit_communities",
    "node_order",
    "require_order_library",
]

REORDER_METHODS = ("rcm", "degree", "community", "metis", "networkit")
COMMUNITY_MAX_ROUNDS = 30
COMMUNITY_TOLERANCE = 0.002  # stop once fewer than this share of nodes change label
# Nodes per METIS part. 2048 rows of 64-128 float32 features are 0.5-1 MiB,
# what one core's L2 cache holds, so a part's reads of its own rows stay
# there; Cluster-GCN's 1500 parts of ogbn-products are about 1600 nodes each.
# METIS took about as long for 30, 120 or 479 parts at products scale 0.1,
# and the product after the order did not change measurably with the part
# size (benchmarks/README.md, Locality orders).
METIS_PART_SIZE = 2048
# The optional libraries behind some methods (the ``order`` extra).
ORDER_LIBRARIES = {"metis": "pymetis", "networkit": "networkit"}


def require_order_library(method: str):
    """The module a reorder ``method`` needs, imported; ``None`` for built-in methods.

    Raises:
      ImportError: in one line naming the extra to install, when it is missing.
    """
    name = ORDER_LIBRARIES.get(method)
    if name is None:
        return None
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ImportError(
            f"reorder method {method!r} needs {name}, which is not installed; install the "
            f'order extra: pip install -e ".[order]" (or pip install {name})'
        ) from err


def _symmetric_pattern(senders: np.ndarray, receivers: np.ndarray, n: int) -> sp.csr_array:
    """The pattern of ``A + A^T`` without self-loops or duplicates, as CSR (values unused)."""
    off = senders != receivers
    s, r = senders[off].astype(np.int64), receivers[off].astype(np.int64)
    rows, cols = np.concatenate([r, s]), np.concatenate([s, r])
    pattern = sp.csr_array((np.ones(rows.shape[0], np.int32), (rows, cols)), shape=(n, n))
    pattern.sum_duplicates()
    return pattern


def community_labels(
    senders: np.ndarray,
    receivers: np.ndarray,
    num_nodes: int,
    *,
    seed: int = 0,
    max_rounds: int = COMMUNITY_MAX_ROUNDS,
    tolerance: float = COMMUNITY_TOLERANCE,
) -> np.ndarray:
    """Community labels by label propagation on the symmetrized graph.

    Every node starts in its own community. In each round, a random half of
    the nodes adopt the label most common among their neighbours (edges in
    both directions count, duplicates count twice; a node's own label gets
    half a vote, so it keeps its label on a tie). Updating half the nodes
    at a time keeps two halves of a community from swapping labels forever,
    which synchronous rounds do. Rounds stop when fewer than ``tolerance``
    of the nodes change, or after ``max_rounds``.

    Args:
      senders, receivers: int ``[E]`` validated ids.
      num_nodes: ``N``.
      seed: seed of the update order (the result is deterministic for it).
      max_rounds, tolerance: stopping rule.

    Returns:
      int64 ``[N]`` labels, each the id of some node of its community.
    """
    if not (isinstance(max_rounds, int) and max_rounds >= 1):
        raise ValueError(f"max_rounds must be an integer >= 1, got {max_rounds!r}")
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    n = num_nodes
    labels = np.arange(n, dtype=np.int64)
    if n == 0 or senders.shape[0] == 0:
        return labels
    rows = np.concatenate([receivers, senders, np.arange(n)]).astype(np.int64)
    cols = np.concatenate([senders, receivers]).astype(np.int64)
    votes = np.concatenate([np.ones(cols.shape[0], np.float32), np.full(n, 0.5, np.float32)])
    rng = np.random.default_rng(seed)
    for _ in range(max_rounds):
        ballot = sp.csr_array((votes, (rows, np.concatenate([labels[cols], labels]))), shape=(n, n))
        best = np.asarray(ballot.argmax(axis=1)).ravel()
        new = np.where(rng.random(n) < 0.5, best, labels)
        changed = np.count_nonzero(new != labels)
        labels = new
        if changed < tolerance * n:
            break
    return labels


def metis_parts(
    senders: np.ndarray,
    receivers: np.ndarray,
    num_nodes: int,
    *,
    part_size: int = METIS_PART_SIZE,
    seed: int = 0,
) -> np.ndarray:
    """METIS parts of the symmetrized graph (pymetis, the ``order`` extra).

    METIS's multilevel k-way partitioning splits the nodes into
    ``k = ceil(N / part_size)`` parts of nearly equal size with few edges
    between parts (self-loops dropped, edge directions and duplicates
    merged). Fixed-size parts keep a part's rows cache-sized whatever ``N``
    is; ``k`` grows with the graph (1,200 parts for ogbn-products, 54,000
    for papers100M).

    Args:
      senders, receivers: int ``[E]`` validated ids.
      num_nodes: ``N``.
      part_size: target nodes per part, >= 1.
      seed: METIS's random seed (the result is deterministic for it).

    Returns:
      int64 ``[N]`` part ids in ``[0, k)``.
    """
    if not (isinstance(part_size, int) and part_size >= 1):
        raise ValueError(f"part_size must be an integer >= 1, got {part_size!r}")
    pymetis = require_order_library("metis")
    n = num_nodes
    parts = max(1, math.ceil(n / part_size))
    if parts == 1 or senders.shape[0] == 0:  # nothing to cut: consecutive blocks
        return np.arange(n, dtype=np.int64) // part_size
    pattern = _symmetric_pattern(senders, receivers, n)
    idx = pymetis.zero_copy_dtype()  # the index width METIS was built with: no copy inside
    adjacency = pymetis.CSRAdjacency(pattern.indptr.astype(idx), pattern.indices.astype(idx))
    _, membership = pymetis.part_graph(
        parts, adjacency=adjacency, options=pymetis.Options(seed=seed)
    )
    return np.asarray(membership, np.int64)


def networkit_communities(
    senders: np.ndarray,
    receivers: np.ndarray,
    num_nodes: int,
    *,
    seed: int = 0,
    threads: int = 1,
) -> np.ndarray:
    """Louvain communities of the symmetrized graph (networkit's PLM, the ``order`` extra).

    PLM (parallel Louvain with recursive coarsening, standard modularity,
    no refinement) on the undirected simple graph (self-loops dropped,
    directions and duplicates merged). On one thread the result is a
    function of ``seed``; on several, threads race and it may vary from run
    to run. networkit's thread count and seed are process-wide: the thread
    count is restored afterwards, the seed is left set.

    Args:
      senders, receivers: int ``[E]`` validated ids.
      num_nodes: ``N``.
      seed: networkit's random seed.
      threads: OpenMP threads for PLM, >= 1.

    Returns:
      int64 ``[N]`` community ids.
    """
    if not (isinstance(threads, int) and threads >= 1):
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    nk = require_order_library("networkit")
    n = num_nodes
    if senders.shape[0] == 0:
        return np.arange(n, dtype=np.int64)
    upper = sp.triu(_symmetric_pattern(senders, receivers, n), k=1).tocoo()
    graph = nk.GraphFromCoo((upper.row, upper.col), n=n, directed=False)
    before = nk.getMaxNumberOfThreads()
    nk.setNumberOfThreads(threads)
    try:
        nk.setSeed(seed, False)
        plm = nk.community.PLM(graph, refine=False, par="balanced")
        plm.run()
        labels = np.asarray(plm.getPartition().getVector(), np.int64)
    finally:
        nk.setNumberOfThreads(before)
    return labels


def node_order(
    senders: np.ndarray,
    receivers: np.ndarray,
    num_nodes: int,
    *,
    method: str = "rcm",
    seed: int = 0,
    threads: int = 1,
) -> np.ndarray:
    """The permutation that relabels nodes for locality.

    Args:
      senders, receivers: int ``[E]`` validated host ids.
      num_nodes: ``N``.
      method: ``"rcm"``, reverse Cuthill–McKee on the symmetrized pattern
        (``scipy.sparse.csgraph.reverse_cuthill_mckee``), which narrows the
        band of ``A``; ``"degree"``, nodes by decreasing in-degree (ties
        in id order), which puts hubs, the most-read rows, together; or
        ``"community"``, nodes grouped by the communities label propagation
        finds (:func:`community_labels`), hubs first within each, so that
        most rows a node reads lie in its community's block. It costs
        ``O(E log E)`` per round on the host, 10-20 rounds (about 30 s for
        2.2M edges on the project's CPU, against 2 s for RCM), and pays on
        graphs with communities that RCM's bands miss. ``"metis"`` and
        ``"networkit"`` group nodes the same way, hubs first within each
        group, by METIS parts of about :data:`METIS_PART_SIZE` nodes
        (:func:`metis_parts`) or by networkit's parallel Louvain
        communities (:func:`networkit_communities`); both need the
        ``order`` extra and take a fraction of label propagation's time.
      seed: the random seed of ``"community"``, ``"metis"`` and ``"networkit"``.
      threads: networkit's threads (1: deterministic for ``seed``).

    Returns:
      int64 ``[N]`` permutation: new node ``i`` is old node ``permutation[i]``.
    """
    if method not in REORDER_METHODS:
        raise ValueError(f"reorder method must be one of {REORDER_METHODS}, got {method!r}")
    n = num_nodes
    if n == 0:  # scipy's RCM cannot take an empty matrix
        permutation = np.zeros(0, np.int64)
    elif method == "degree":
        counts = np.bincount(receivers, minlength=n)
        permutation = np.argsort(-counts, kind="stable")
    elif method in ("community", "metis", "networkit"):
        if method == "metis":
            labels = metis_parts(senders, receivers, n, seed=seed)
        elif method == "networkit":
            labels = networkit_communities(senders, receivers, n, seed=seed, threads=threads)
        else:
            labels = community_labels(senders, receivers, n, seed=seed)
        counts = np.bincount(receivers, minlength=n)
        permutation = np.lexsort((np.arange(n), -counts, labels))
    else:
        both = (np.concatenate([receivers, senders]), np.concatenate([senders, receivers]))
        pattern = sp.csr_array((np.ones(both[0].shape[0], np.int8), both), shape=(n, n))
        permutation = csgraph.reverse_cuthill_mckee(pattern, symmetric_mode=True)
    return permutation.astype(np.int64, copy=False)

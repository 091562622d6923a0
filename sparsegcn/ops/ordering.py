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
  76, 2007 (label propagation).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

__all__ = [
    "COMMUNITY_MAX_ROUNDS",
    "COMMUNITY_TOLERANCE",
    "REORDER_METHODS",
    "community_labels",
    "node_order",
]

REORDER_METHODS = ("rcm", "degree", "community")
COMMUNITY_MAX_ROUNDS = 30
COMMUNITY_TOLERANCE = 0.002  # stop once fewer than this share of nodes change label


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


def node_order(
    senders: np.ndarray, receivers: np.ndarray, num_nodes: int, *, method: str = "rcm"
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
        graphs with communities that RCM's bands miss.

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
    elif method == "community":
        labels = community_labels(senders, receivers, n)
        counts = np.bincount(receivers, minlength=n)
        permutation = np.lexsort((np.arange(n), -counts, labels))
    else:
        both = (np.concatenate([receivers, senders]), np.concatenate([senders, receivers]))
        pattern = sp.csr_array((np.ones(both[0].shape[0], np.int8), both), shape=(n, n))
        permutation = csgraph.reverse_cuthill_mckee(pattern, symmetric_mode=True)
    return permutation.astype(np.int64, copy=False)

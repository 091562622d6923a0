"""What a run asks of the graph and of memory, checked once the data is loaded and
before anything is compiled.

- **Fanouts beyond the graph.** A node of in-degree ``d`` contributes
  ``min(k, d)`` sampled neighbours (see :mod:`sparsegcn.sampling.neighbor`),
  so a fanout above the graph's largest in-degree samples nothing more: it
  only pads the tree (``B * k_1 * ... * k_L`` entries) and costs Floyd's
  ``O(k^2)`` draws per node. :func:`fit_to_graph` lowers such a fanout to
  the largest in-degree (every neighbour of every node, as before).
- **The tree's size.** The deepest level of a sampled tree, ``B * k_1 * ...
  * k_L`` entries, must stay below ``2**31`` (int32 positions).
- **Memory.** :func:`estimate_bytes` adds up the arrays that grow with the
  number of seeds ``K`` (every seed trains its own model on its own dropout
  masks): the input dropout mask (a byte per feature), the layers'
  activations (float32), and for sampled runs each batch's tree and gathered
  feature rows. A run whose estimate exceeds the memory available on the
  default device is refused in one line, instead of XLA failing to allocate
  after the compile.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from sparsegcn.bench.runner import available_memory
from sparsegcn.datasets.base import Dataset
from sparsegcn.experiment.config import Experiment
from sparsegcn.sampling.neighbor import check_fanouts
from sparsegcn.train.minibatch import effective_batch_size

_INT32_LIMIT = 2**31
_CHUNK = 1 << 24


def max_in_degree(graph) -> int:
    """The largest in-degree (edges per receiver) of a host graph, in ``O(chunk)`` temporaries
    beyond an ``[N]`` count; from the CSR offsets where the receivers are computed from them."""
    indptr = getattr(graph.receivers, "indptr", None)  # ondisk.ExpandedRows
    n = int(graph.num_nodes)
    if n == 0 or graph.num_edges == 0:
        return 0
    if indptr is not None:
        return max(
            int(np.diff(np.asarray(indptr[a : a + _CHUNK + 1])).max())
            for a in range(0, indptr.shape[0] - 1, _CHUNK)
        )
    counts = np.zeros(n, np.int64)
    receivers = graph.receivers
    for a in range(0, int(graph.num_edges), _CHUNK):
        counts += np.bincount(np.asarray(receivers[a : a + _CHUNK]), minlength=n)
    return int(counts.max())


def _fanouts(exp: Experiment) -> tuple[int, ...]:
    return check_fanouts(exp.fanouts)


def estimate_bytes(exp: Experiment, dataset: Dataset, fanouts=None) -> int:
    """The bytes of the arrays that dominate a run of ``exp`` on ``dataset``.

    Per seed: the input dropout mask (``N F`` bytes full batch, a byte per
    gathered feature sampled), the float32 activations of every layer (``N``
    rows, or every tree entry, times the layer widths), and for sampled runs
    the tree (int32 ids and a mask byte per entry), a hidden row per entry
    and the gathered float32 feature rows of its deepest level; and the
    weights of a plain stack (``F -> H -> ... -> C``, times the heads) four
    times over: the params, their gradients and Adam's two moments. Times
    ``K = exp.seeds``. (The features themselves are left out: they may stay
    on the host.)

    Args:
      exp: the run.
      dataset: the loaded data.
      fanouts: the fanouts to count (default: ``exp.fanouts``).
    """
    n, f, c = dataset.num_nodes, dataset.num_features, dataset.num_classes
    layers = exp.layers or 1
    heads = int(exp.options().get("heads", 1))
    hidden = exp.hidden or c
    mask = 1 if (exp.dropout or 0) > 0 else 0
    if exp.sampled:
        fanouts = _fanouts(exp) if fanouts is None else fanouts
        batch = effective_batch_size(len(dataset.split["train"]), exp.minibatch_config().batch_size)
        levels = [batch * math.prod(fanouts[:d]) for d in range(len(fanouts) + 1)]
        per_seed = sum(levels) * (5 + hidden * heads * 4) + levels[-1] * f * (4 + mask)
    else:
        per_seed = n * f * mask + n * (hidden * heads * (layers - 1) + c) * 4
    widths = [f] + [hidden * heads] * (layers - 1) + [c]
    weights = sum(a * b for a, b in itertools.pairwise(widths))
    return exp.seeds * (per_seed + 16 * weights)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def fit_to_graph(exp: Experiment, dataset: Dataset, *, available: int | None = -1) -> Experiment:
    """``exp`` with its fanouts lowered to the graph's largest in-degree, checked
    against the tree's int32 limit and the memory available.

    Args:
      exp: the run.
      dataset: the loaded data.
      available: bytes of memory to check against; ``-1`` asks the default
        device (:func:`sparsegcn.bench.runner.available_memory`), ``None``
        skips the check.

    Returns:
      ``exp``, or a copy whose ``fanouts`` are ``min(k, max in-degree)``
      (at least 1).

    Raises:
      ValueError: the sampled tree would reach ``2**31`` entries, or the
        estimate (:func:`estimate_bytes`) exceeds the available memory; the
        message names the values.
    """
    if exp.sampled:
        fanouts = _fanouts(exp)
        top = max(max_in_degree(dataset.graph), 1)
        if max(fanouts) > top:
            fanouts = tuple(min(k, top) for k in fanouts)
            exp = dataclasses.replace(exp, fanouts=",".join(map(str, fanouts)))
        batch = effective_batch_size(len(dataset.split["train"]), exp.minibatch_config().batch_size)
        entries = batch * math.prod(fanouts)
        if entries >= _INT32_LIMIT:
            raise ValueError(
                f"--fanouts {exp.fanouts} with a batch of {batch} seeds samples {entries} tree "
                f"entries per batch (the graph's largest in-degree is {top}); a tree must stay "
                f"below 2**31 = {_INT32_LIMIT}: lower --fanouts or --batch-size"
            )
    if available == -1:
        available = available_memory()
    if available is not None:
        need = estimate_bytes(exp, dataset)
        if need > available:
            raise ValueError(
                f"this run needs an estimated {_gib(need)} ({exp.seeds} seed(s) x "
                f"{need / exp.seeds / 2**20:.1f} MiB of activations and dropout masks"
                f"{' and sampled trees' if exp.sampled else ''}) but {_gib(available)} is "
                f"available; lower --seeds"
                f"{', --batch-size or --fanouts' if exp.sampled else ' or --hidden'}"
            )
    return exp


__all__ = ["estimate_bytes", "fit_to_graph", "max_in_degree"]

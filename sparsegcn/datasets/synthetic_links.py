"""Full-size synthetic twins of ogbl-collab and ogbl-citation2, generated locally.

Each preset copies the published sizes of its OGB dataset (nodes, positive
edges, feature width, split sizes, negatives) and its split protocol; the
graph is drawn from the degree-corrected stochastic block model of
:mod:`sparsegcn.datasets.sbm`, so links follow communities and are
learnable: a pair inside one community is far more likely to be an edge
than a uniform pair, and node features are Gaussian around a mean per
community (:func:`sbm.class_features`), so a model can tell from two
nodes' features whether they likely share a community.

**The edges.** :func:`sbm.sample_pairs` draws exactly ``E`` distinct
unordered non-loop pairs, a fraction ``homophily`` of them inside a
community; node propensities ``θ`` follow a power law (exponent
``degree_exponent``), so degrees are heavy-tailed.

``synthetic:collab`` (undirected; OGB's *time* split):

- every pair gets a year; exactly ``num_valid`` pairs get 2018 and
  ``num_test`` get 2019 (a uniformly random choice), the others a year in
  ``1963 .. 2017`` with ``P(y) ∝ exp(0.08 (y - 1963))`` (a field growing ~8 % a
  year); ``train`` holds the pairs before 2018, ``valid`` 2018, ``test`` 2019;
- each pair has a weight ``w ≥ 1`` (papers co-written that year):
  geometric, ``P(w) = 0.6 · 0.4^{w-1}``;
- a pair's two ends are in random order (so order carries no signal);
- ``valid_neg`` and ``test_neg``: ``num_negatives`` uniformly random pairs
  each (``100,000`` at full size, OGB's count) of two distinct nodes that
  are no edge of any split.

``synthetic:citation2`` (directed; OGB's protocol for citation2):

- every node gets a publication year in ``1960 .. 2019`` with
  ``P(y) ∝ exp(0.07 (y - 1960))``; each pair is oriented from the newer to
  the older paper (a coin decides within a year): ``s → t`` means ``s``
  cites ``t``;
- ``num_valid`` source papers of the last year with at least 3 references
  are chosen uniformly; for each, one reference is held out for ``valid``
  and another for ``test`` (OGB's 86,596 sources, each in both splits);
- ``valid_neg``/``test_neg``: per source, ``num_negatives`` (1,000) target
  nodes drawn uniformly (with replacement) among the nodes that are neither
  the source nor cited by it, in any split (exact exclusion: colliding
  draws are drawn again).

In both, no validation or test edge is in the training graph (each pair
has one year, or is held out once), unlike OGB's collab, where a pair that
collaborates again in 2019 is in both.

**Determinism and memory.** Every random draw comes from a stream of
:func:`sbm.stream` keyed by the seed, so a seed gives bit-identical arrays.
Work is vectorized and chunked; at full size citation2 holds the sorted
int64 keys of its 30.6 M edges (245 MB), their int64 pairs, the features
(1.5 GB) and the negatives (2 × 693 MB) at once; see
``docs/link-datasets.md`` for the measured time and peak memory.

:func:`load_synthetic_links` caches each generated dataset under
``<root>/synthetic/links-<preset>-scale<scale>-seed<seed>/`` as ``.npy``
files that later loads memory-map.

References:
  Hu et al., *Open Graph Benchmark: Datasets for Machine Learning on
  Graphs*, NeurIPS 2020 (the published statistics and protocols),
  https://arxiv.org/abs/2005.00687 ; Karrer & Newman, *Stochastic
  blockmodels and community structure in networks*, Phys. Rev. E 83 (2011).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from sparsegcn import _checks
from sparsegcn.datasets import sbm
from sparsegcn.datasets.base import may_write_cache
from sparsegcn.datasets.link_base import LINK_SPLITS, LinkDataset
from sparsegcn.datasets.synthetic import (
    _check_range,
    _check_scale,
    _save_array,
    check_cache_writable,
    publish_cache,
    read_cache_arrays,
)
from sparsegcn.files import discard_temp_folder, json_text, naming_errors, temp_folder
from sparsegcn.graph import Graph

GENERATOR = "links-dcsbm-1"  # bump when a seed's output changes: older caches are refused
MANIFEST = "manifest.json"
LINK_STREAM = 16  # sbm.stream(seed, LINK_STREAM, k): clear of sbm's own streams (0..5)
_YEAR, _WEIGHT, _FLIP, _NEG_VALID, _NEG_TEST, _SOURCES, _HELD = range(7)
_CHUNK = 1 << 22


@dataclasses.dataclass(frozen=True)
class LinkSpec:
    """What to generate: sizes, split protocol and model parameters.

    Attributes:
      name: preset name (``collab``, ``citation2``).
      num_nodes: ``N``.
      num_edges: positive edges of all splits, as the publisher counts them.
      directed: citation2's protocol (per-source held-out edges and
        negatives) if true, collab's (time split, shared negative pairs) if not.
      num_features: ``F``.
      num_communities: blocks of the model.
      num_valid, num_test: held-out edges (collab) or source nodes (citation2).
      num_negatives: negative pairs per split (collab) or targets per source
        (citation2).
      homophily: fraction of edges inside a community.
      degree_exponent: ``γ`` of the degree distribution; > 2.
      feature_signal: community means lie about ``s √2`` noise standard
        deviations apart (:func:`sbm.class_features`).
      scale: the factor applied to the published sizes (:meth:`scaled`).
    """

    name: str
    num_nodes: int
    num_edges: int
    directed: bool
    num_features: int
    num_communities: int
    num_valid: int
    num_test: int
    num_negatives: int
    homophily: float = 0.8
    degree_exponent: float = 2.5
    feature_signal: float = 2.0
    scale: float = 1.0

    def __post_init__(self):
        for field in ("num_nodes", "num_features", "num_communities", "num_negatives"):
            _checks.check_static_int(field, getattr(self, field), minimum=1)
        for field in ("num_edges", "num_valid", "num_test"):
            _checks.check_static_int(field, getattr(self, field))
        _check_range("homophily", self.homophily, 0.0, 1.0)
        if not self.degree_exponent > 2:
            raise ValueError(f"degree_exponent must be > 2, got {self.degree_exponent}")
        _check_scale(self.scale)

    def scaled(self, scale: float) -> LinkSpec:
        """Nodes, edges, held-out counts and (collab) negative pairs times ``scale``
        (rounded); citation2's targets per source, features and model unchanged,
        except that communities merge (at most ``N^2 / (16 h E)`` of them) so
        that a fraction ``homophily`` of the edges still fits inside them.

        Raises:
          ValueError: ``scale`` outside ``(0, 1]``, or so small that a split is empty.
        """
        scale = _check_scale(scale)
        if scale == 1.0:
            return self
        n, e = max(round(self.num_nodes * scale), 2), round(self.num_edges * scale)
        # Fewer, larger communities when the graph shrinks: the in-community
        # pairs (h E) must stay well under the pairs communities of N / C
        # nodes hold (about N^2 / 2C), or sbm.sample_pairs caps them there.
        fit = int(n * n / (16 * max(self.homophily, 0.05) * max(e, 1)))
        spec = dataclasses.replace(
            self,
            num_nodes=n,
            num_edges=e,
            num_communities=max(2, min(self.num_communities, fit)),
            num_valid=round(self.num_valid * scale),
            num_test=round(self.num_test * scale),
            num_negatives=(
                self.num_negatives if self.directed else max(round(self.num_negatives * scale), 1)
            ),
            scale=self.scale * scale,
        )
        if min(spec.num_valid, spec.num_test) < 1 or spec.num_edges <= spec.held_out:
            raise ValueError(
                f"synthetic:{self.name} at scale {scale:g} has {spec.num_edges} edges and "
                f"{spec.num_valid} / {spec.num_test} valid / test "
                f"{'sources' if self.directed else 'edges'}: a split is empty; use a larger scale"
            )
        return spec

    @property
    def held_out(self) -> int:
        """Positive edges outside ``train``."""
        return self.num_valid + self.num_test

    def stats(self) -> dict:
        """:func:`~sparsegcn.datasets.links.link_stats` of the dataset this spec generates,
        computed without generating it (the counts are exact by construction)."""
        n, train = self.num_nodes, self.num_edges - self.held_out
        neg = self.num_valid if self.directed else self.num_negatives
        sizes = {
            "train": train,
            "valid": self.num_valid,
            "test": self.num_test,
            "valid_neg": neg,
            "test_neg": self.num_test if self.directed else self.num_negatives,
        }
        per_neg = 8 * self.num_negatives if self.directed else 16
        nbytes = 16 * train + 4 * n * self.num_features + 16 * self.num_edges  # graph, x, pairs
        nbytes += per_neg * (sizes["valid_neg"] + sizes["test_neg"])
        nbytes += 8 * n if self.directed else 16 * train  # node_year; edge_weight, edge_year
        return {
            "name": f"synthetic:{self.name}",
            "num_nodes": n,
            "num_edges": self.num_edges,
            "num_stored_edges": 2 * train,
            "num_features": self.num_features,
            "directed": self.directed,
            "metric": "mrr" if self.directed else "hits@50",
            "negatives": "targets" if self.directed else "pairs",
            "num_negatives_per_source": self.num_negatives if self.directed else None,
            "split_sizes": sizes,
            "mean_degree": 2 * train / n,
            "bytes": nbytes,
            "note": f"generated on first load (scale {self.scale:g}); counts from the preset",
        }


# Sizes from OGB's dataset pages and the shapes of get_edge_split():
# ogbl-collab 1,179,052 / 60,084 / 46,329 edges, 100,000 negative pairs per
# split; ogbl-citation2 30,387,995 train edges, 86,596 valid and test
# sources with 1,000 negatives each. Communities and homophily are not
# published properties (collab has no classes): chosen so that the
# structure is learnable, not to reproduce OGB's scores.
LINK_PRESETS: dict[str, LinkSpec] = {
    "collab": LinkSpec(
        name="collab",
        num_nodes=235_868,
        num_edges=1_285_465,
        directed=False,
        num_features=128,
        num_communities=100,
        num_valid=60_084,
        num_test=46_329,
        num_negatives=100_000,
    ),
    "citation2": LinkSpec(
        name="citation2",
        num_nodes=2_927_963,
        num_edges=30_561_187,
        directed=True,
        num_features=128,
        num_communities=200,
        num_valid=86_596,
        num_test=86_596,
        num_negatives=1_000,
    ),
}
COLLAB_YEARS = (1963, 2017, 2018, 2019)
"""First and last training year, the validation year, the test year."""
CITATION_YEARS = (1960, 2019)
"""First and last publication year; sources of held-out edges are from the last."""


def _stream(seed: int, key: int) -> np.random.Generator:
    return sbm.stream(seed, LINK_STREAM, key)


def _growth_years(rng: np.random.Generator, count: int, first: int, last: int, rate: float):
    years = np.arange(first, last + 1)
    p = np.exp(rate * (years - first))
    return years[rng.choice(years.shape[0], size=count, p=p / p.sum())].astype(np.int64)


def _model(spec: LinkSpec, seed: int) -> sbm.BlockModel:
    return sbm.block_model(
        spec.num_nodes,
        spec.num_edges,
        spec.num_communities,
        degree_exponent=spec.degree_exponent,
        imbalance=4.0,
        seed=seed,
    )


def community_labels(spec: LinkSpec, *, seed: int = 0) -> np.ndarray:
    """int64 ``[N]`` community of each node of the dataset ``spec`` and ``seed`` generate
    (the model's blocks; not part of the dataset, for checks and analysis)."""
    return _model(spec, seed).labels


def _member(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Whether each of ``keys`` is in ``sorted_keys`` (chunked searchsorted)."""
    out = np.empty(keys.shape, bool)
    top = max(sorted_keys.shape[0] - 1, 0)
    for start in range(0, keys.shape[0], _CHUNK):
        chunk = keys[start : start + _CHUNK]
        pos = np.minimum(np.searchsorted(sorted_keys, chunk), top)
        out[start : start + _CHUNK] = sorted_keys[pos] == chunk if sorted_keys.size else False
    return out


def _negative_pairs(rng, count: int, n: int, pair_keys: np.ndarray) -> np.ndarray:
    """``count`` uniform pairs of distinct nodes whose key ``min * N + max`` is not in
    ``pair_keys``; colliding draws are drawn again."""
    out = np.empty((count, 2), np.int64)
    todo = np.arange(count)
    for _ in range(1000):
        if todo.size == 0:
            return out
        draw = rng.integers(0, n, size=(todo.size, 2), dtype=np.int64)
        a, b = draw[:, 0], draw[:, 1]
        bad = (a == b) | _member(pair_keys, np.minimum(a, b) * n + np.maximum(a, b))
        out[todo[~bad]] = draw[~bad]
        todo = todo[bad]
    raise RuntimeError(f"could not draw {count} negative pairs on {n} nodes: graph too dense")


def _negative_targets(rng, sources: np.ndarray, k: int, n: int, edge_keys: np.ndarray):
    """int64 ``[S, k]`` uniform targets per source, never the source and never a node it
    has an edge to (``edge_keys``: sorted ``s * N + t``); drawn again on collision."""
    out = np.empty((sources.shape[0], k), np.int64)
    rows = max(_CHUNK // k, 1)
    for start in range(0, sources.shape[0], rows):
        src = sources[start : start + rows]
        block = rng.integers(0, n, size=(src.shape[0], k), dtype=np.int64)
        for _ in range(1000):
            bad = (block == src[:, None]) | _member(edge_keys, src[:, None] * n + block)
            if not bad.any():
                break
            block[bad] = rng.integers(0, n, size=int(bad.sum()), dtype=np.int64)
        else:
            raise RuntimeError("could not draw negatives: a source cites nearly every node")
        out[start : start + src.shape[0]] = block
    return out


def _check_memory(spec: LinkSpec) -> None:
    from sparsegcn.datasets.synthetic import _available_memory

    e, n = spec.num_edges, spec.num_nodes
    need = max(sbm.sampling_bytes(e), 56 * e) + 4 * n * spec.num_features + 64 * n
    need += (16 if not spec.directed else 8 * spec.num_negatives) * 2 * spec.num_valid
    available = _available_memory()
    if available is not None and need > available:
        raise ValueError(
            f"synthetic:{spec.name} at scale {spec.scale:g} needs about {need / 2**30:.1f} GiB "
            f"but only {available / 2**30:.1f} GiB is available; use a smaller --scale"
        )


def generate_links(spec: LinkSpec, *, seed: int = 0, progress: bool = False) -> LinkDataset:
    """Generates a synthetic link dataset in memory (see the module docstring).

    Args:
      spec: a preset of :data:`LINK_PRESETS`, possibly ``.scaled(...)``.
      seed: non-negative integer; a seed gives bit-identical arrays.
      progress: progress bars while drawing edges and features.

    Returns:
      A :class:`LinkDataset` named ``synthetic:<name>``: ``num_edges ==
      spec.num_edges`` positives, ``2 * (E - held out)`` stored edges.

    Raises:
      ValueError: not enough memory, a graph too dense for its node count,
        or (citation2) fewer eligible sources than ``num_valid``.
    """
    if not isinstance(spec, LinkSpec):
        raise TypeError(f"spec must be a LinkSpec, got {type(spec).__name__}")
    seed = _checks.check_static_int("seed", seed)
    _check_memory(spec)
    model = _model(spec, seed)
    communities = model.labels
    keys = sbm.sample_pairs(model, spec.num_edges, spec.homophily, seed=seed, progress=progress)
    del model
    build = _citation if spec.directed else _collab
    parts = build(spec, keys, communities, seed)
    del keys
    features = sbm.class_features(
        communities,
        spec.num_communities,
        spec.num_features,
        spec.feature_signal,
        seed=seed,
        progress=progress,
    )
    info = {
        "source": "synthetic degree-corrected stochastic block model",
        "generator": GENERATOR,
        "preset": spec.name,
        "scale": spec.scale,
        "seed": seed,
        "homophily": spec.homophily,
        "num_communities": spec.num_communities,
        "degree_exponent": spec.degree_exponent,
        "feature_signal": spec.feature_signal,
    }
    return LinkDataset(
        name=f"synthetic:{spec.name}",
        features=features,
        metric="mrr" if spec.directed else "hits@50",
        directed=spec.directed,
        num_edges=spec.num_edges,
        info=info,
        **parts,
    )


def _graph_of(pair_keys: np.ndarray, n: int) -> Graph:
    """The symmetric sorted graph of sorted canonical keys ``min * N + max``."""
    both = sbm.symmetric_keys(pair_keys, n)
    senders, receivers = sbm.split_keys(both, n)
    del both
    return Graph(senders, receivers, None, n, edges_sorted=True)


def _pairs(keys: np.ndarray, n: int, flip: np.ndarray | None = None) -> np.ndarray:
    """int64 ``[P, 2]`` ``(key // N, key % N)``, the columns swapped where ``flip``."""
    out = np.empty((keys.shape[0], 2), np.int64)
    np.divmod(keys, n, out=(out[:, 0], out[:, 1]))
    if flip is not None:
        out[flip] = out[flip][:, ::-1]
    return out


def _collab(spec: LinkSpec, keys: np.ndarray, communities, seed: int) -> dict:
    n, e = spec.num_nodes, keys.shape[0]
    first, last, valid_year, test_year = COLLAB_YEARS
    rng = _stream(seed, _YEAR)
    order = rng.permutation(e)
    year = np.empty(e, np.int64)
    year[order[: spec.num_valid]] = valid_year
    year[order[spec.num_valid : spec.held_out]] = test_year
    year[order[spec.held_out :]] = _growth_years(rng, e - spec.held_out, first, last, 0.08)
    del order
    weight = np.asarray(_stream(seed, _WEIGHT).geometric(0.6, size=e), np.int64)
    flip = np.less(_stream(seed, _FLIP).random(e), 0.5)
    train = year < valid_year
    split = {
        "train": _pairs(keys[train], n, flip[train]),
        "valid": _pairs(keys[year == valid_year], n, flip[year == valid_year]),
        "test": _pairs(keys[year == test_year], n, flip[year == test_year]),
        "valid_neg": _negative_pairs(_stream(seed, _NEG_VALID), spec.num_negatives, n, keys),
        "test_neg": _negative_pairs(_stream(seed, _NEG_TEST), spec.num_negatives, n, keys),
    }
    return {
        "graph": _graph_of(keys[train], n),
        "split": split,
        "edge_weight": weight[train],
        "edge_year": year[train],
    }


def _citation(spec: LinkSpec, keys: np.ndarray, communities, seed: int) -> dict:
    n = spec.num_nodes
    first, last = CITATION_YEARS
    node_year = _growth_years(_stream(seed, _YEAR), n, first, last, 0.07)
    a, b = np.divmod(keys, n)
    coin = _stream(seed, _FLIP).random(keys.shape[0]) < 0.5
    newer_b = (node_year[b] > node_year[a]) | ((node_year[b] == node_year[a]) & coin)
    del coin
    src = np.where(newer_b, b, a)
    dst = np.where(newer_b, a, b)
    del a, b, newer_b
    directed = src * n + dst  # sorted: grouped by source
    del src, dst
    directed.sort()
    out_degree = np.bincount(directed // n, minlength=n)
    start = np.concatenate([[0], np.cumsum(out_degree)[:-1]])
    eligible = np.flatnonzero((node_year == last) & (out_degree >= 3))
    if eligible.shape[0] < spec.num_valid:
        raise ValueError(
            f"synthetic:{spec.name} at scale {spec.scale:g}: only {eligible.shape[0]} papers of "
            f"{last} cite 3 or more, fewer than the {spec.num_valid} sources asked; use a "
            f"larger scale"
        )
    rng = _stream(seed, _SOURCES)
    sources = np.sort(rng.choice(eligible, size=spec.num_valid, replace=False))
    degree = out_degree[sources]
    rng = _stream(seed, _HELD)
    first_pick = rng.integers(0, degree)
    second = rng.integers(0, degree - 1)
    second += second >= first_pick
    valid_at, test_at = start[sources] + first_pick, start[sources] + second
    held = np.zeros(directed.shape[0], bool)
    held[valid_at] = True
    held[test_at] = True
    split = {
        "valid": _pairs(directed[valid_at], n),
        "test": _pairs(directed[test_at], n),
        "valid_neg": _negative_targets(
            _stream(seed, _NEG_VALID), sources, spec.num_negatives, n, directed
        ),
        "test_neg": _negative_targets(
            _stream(seed, _NEG_TEST), sources, spec.num_negatives, n, directed
        ),
    }
    train_keys = directed[~held]
    del directed, held
    split["train"] = _pairs(train_keys, n)
    canonical = np.minimum(split["train"][:, 0], split["train"][:, 1]) * n
    canonical += np.maximum(split["train"][:, 0], split["train"][:, 1])
    del train_keys
    canonical.sort()
    return {"graph": _graph_of(canonical, n), "split": split, "node_year": node_year}


# -- the cache ----------------------------------------------------------------------------

_OPTIONAL = ("edge_weight", "edge_year", "node_year")


def cache_dir(root: str | os.PathLike, preset: str, scale: float, seed: int) -> Path:
    """``<root>/synthetic/links-<preset>-scale<scale>-seed<seed>`` (``scale`` as ``repr``)."""
    return Path(root) / "synthetic" / f"links-{preset}-scale{float(scale)!r}-seed{int(seed)}"


def _arrays(dataset: LinkDataset) -> dict:
    arrays = {
        "senders": dataset.graph.senders,
        "receivers": dataset.graph.receivers,
        "features": dataset.features,
        **dataset.split,
    }
    arrays.update({k: getattr(dataset, k) for k in _OPTIONAL if getattr(dataset, k) is not None})
    return arrays


def _write_cache(folder: Path, dataset: LinkDataset, spec: LinkSpec, seed: int) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_folder(folder.parent, folder.name)
    try:
        arrays = _arrays(dataset)
        with naming_errors(folder):
            for name, array in arrays.items():
                _save_array(tmp / f"{name}.npy", np.asarray(array))
            manifest = {
                "generator": GENERATOR,
                "seed": seed,
                "spec": dataclasses.asdict(spec),
                "info": dataset.info,
                "arrays": {
                    k: {"shape": list(np.shape(v)), "dtype": str(np.asarray(v).dtype)}
                    for k, v in arrays.items()
                },
            }
            publish_cache(tmp, folder, json_text(manifest, indent=1))
    except BaseException:
        discard_temp_folder(tmp)
        raise


def _read_cache(folder: Path, spec: LinkSpec, seed: int) -> LinkDataset:
    manifest, arrays = read_cache_arrays(folder, GENERATOR, spec, seed)
    graph = Graph(arrays["senders"], arrays["receivers"], None, spec.num_nodes, edges_sorted=True)
    return LinkDataset(
        name=f"synthetic:{spec.name}",
        graph=graph,
        features=arrays["features"],
        split={k: arrays[k] for k in LINK_SPLITS},
        metric="mrr" if spec.directed else "hits@50",
        directed=spec.directed,
        num_edges=spec.num_edges,
        info=manifest["info"],
        **{k: arrays[k] for k in _OPTIONAL if k in arrays},
    )


def load_synthetic_links(
    preset: str,
    root: str | os.PathLike,
    *,
    scale: float = 1.0,
    seed: int = 0,
    progress: bool = False,
    cache: bool = True,
) -> LinkDataset:
    """Loads a synthetic link preset, generating (and caching) it on first use.

    The first call writes the arrays to :func:`cache_dir` atomically (a
    temporary folder renamed into place once complete); later calls
    memory-map them.

    Args:
      preset: ``"collab"`` or ``"citation2"`` (:data:`LINK_PRESETS`).
      root: data root; the cache lives in ``<root>/synthetic/``.
      scale: in ``(0, 1]``; sizes shrink by this factor.
      seed: generator seed.
      progress: progress bars while generating.
      cache: write and reuse the on-disk cache (read, never written, inside
        :func:`~sparsegcn.datasets.base.reading_only`).

    Raises:
      ValueError: unknown preset, bad scale or seed, not enough memory, or
        a cache folder that is corrupt or from another generator version.
    """
    if preset not in LINK_PRESETS:
        raise ValueError(
            f"unknown synthetic link preset {preset!r}; choose one of {list(LINK_PRESETS)}"
        )
    spec = LINK_PRESETS[preset].scaled(scale)
    seed = _checks.check_static_int("seed", seed)
    if not cache:
        return generate_links(spec, seed=seed, progress=progress)
    folder = cache_dir(root, preset, scale, seed)
    if folder.exists():
        return _read_cache(folder, spec, seed)
    writes = may_write_cache()  # not while reading only (sparsegcn predict): kept in memory
    if writes:
        check_cache_writable(folder)
    dataset = generate_links(spec, seed=seed, progress=progress)
    if writes:
        _write_cache(folder, dataset, spec, seed)
    return dataset


__all__ = [
    "CITATION_YEARS",
    "COLLAB_YEARS",
    "GENERATOR",
    "LINK_PRESETS",
    "LinkSpec",
    "cache_dir",
    "community_labels",
    "generate_links",
    "load_synthetic_links",
]

"""Edge features survive every transform, the on-disk format, sampling and sharding.

The graph has a distinct feature row per edge (duplicates, a self-loop, a
node without in-edges, an isolated node), so each check can follow every
edge to its source: after a transform, each output edge's row must be the
row of the input edge it came from (or the stated merge of several).
"""

from __future__ import annotations

import collections
import dataclasses

import jax
import numpy as np
import pytest
from helpers import order_method

from sparsegcn import Graph, transforms
from sparsegcn.datasets import Dataset
from sparsegcn.datasets.ondisk import FormatError, load_ondisk, save
from sparsegcn.ops.ordering import REORDER_METHODS
from sparsegcn.parallel.edge_shard import EdgeShardedGraph
from sparsegcn.sampling import sample_blocks, sample_dedup, sampled_edge_features

# Node 4 has no in-edges; node 5 is isolated. 1 -> 2 is stored twice, 2 -> 2 is a loop,
# and 0 -> 1 / 1 -> 0 is a pair stored in both directions.
SENDERS = np.array([0, 1, 1, 2, 3, 1, 2, 4, 1], np.int32)
RECEIVERS = np.array([1, 2, 0, 2, 0, 2, 3, 3, 3], np.int32)
N = 6


def edge_rows(num_edges: int, width: int = 3) -> np.ndarray:
    """Row ``e`` = ``[e + 1, 10 (e + 1), -e]``: distinct and non-zero per edge."""
    e = np.arange(num_edges, dtype=np.float32)[:, None]
    return np.concatenate([e + 1, 10 * (e + 1), -e], axis=1)[:, :width]


@pytest.fixture
def graph() -> Graph:
    return Graph(SENDERS, RECEIVERS, None, N, edge_features=edge_rows(SENDERS.shape[0]))


def table(g: Graph) -> collections.Counter:
    """The multiset of ``(sender, receiver, feature row)`` of a graph."""
    f = np.asarray(g.edge_features)
    s, r = np.asarray(g.senders), np.asarray(g.receivers)
    return collections.Counter(
        (int(a), int(b), tuple(np.round(row, 5))) for a, b, row in zip(s, r, f, strict=True)
    )


def by_pair(g: Graph) -> dict:
    """``{(sender, receiver): [rows...]}`` of a graph."""
    out = collections.defaultdict(list)
    for a, b, row in zip(
        np.asarray(g.senders), np.asarray(g.receivers), np.asarray(g.edge_features), strict=True
    ):
        out[int(a), int(b)].append(np.asarray(row, np.float64))
    return out


def test_graph_validates_and_is_a_leaf(graph):
    with pytest.raises(ValueError, match=r"edge_features must have shape \(9, D\)"):
        Graph(SENDERS, RECEIVERS, None, N, edge_features=np.zeros((8, 2), np.float32))
    bad = edge_rows(9)
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="edge_features"):
        Graph(SENDERS, RECEIVERS, None, N, edge_features=bad)
    leaves = jax.tree.leaves(graph)
    assert len(leaves) == 3 and leaves[2] is graph.edge_features
    doubled = jax.jit(lambda g: g.edge_features * 2)(graph)
    np.testing.assert_array_equal(doubled, 2 * edge_rows(9))
    assert graph.num_edge_features == 3 and graph.without_edge_features().edge_features is None


@pytest.mark.parametrize("transform", [transforms.sort_edges, transforms.mean_norm])
def test_edge_order_transforms_keep_every_row(graph, transform):
    assert table(transform(graph)) == table(graph)


@pytest.mark.parametrize("method", [order_method(m) for m in REORDER_METHODS])
def test_reorder_moves_rows_with_their_edges(graph, method):
    """Each new edge, mapped back through the permutation, is an old edge with its own
    row (every row is distinct, so the multiset of triples pins each edge's row)."""
    reordering = graph.reorder(method, seed=1)
    out = reordering.graph
    assert out.edges_sorted
    old = reordering.permutation  # new node i is old node old[i]
    np.testing.assert_array_equal(np.sort(old), np.arange(N))
    back = Graph(old[out.senders], old[out.receivers], None, N, edge_features=out.edge_features)
    assert table(back) == table(graph)
    # Forward too: old edge e lands on (inverse[s], inverse[r]) with its row.
    new_rows = by_pair(out)
    inverse = reordering.inverse
    for e in range(graph.num_edges):
        moved = new_rows[int(inverse[SENDERS[e]]), int(inverse[RECEIVERS[e]])]
        assert any(np.array_equal(row, edge_rows(9)[e]) for row in moved), (e, moved)


def test_remove_self_loops(graph):
    out = transforms.remove_self_loops(graph)
    expected = table(graph)
    del expected[(2, 2, (4.0, 40.0, -3.0))]
    assert table(out) == expected


def _mean_in(graph: Graph, node: int) -> np.ndarray:
    rows = [
        graph.edge_features[e]
        for e in range(graph.num_edges)
        if graph.receivers[e] == node and graph.senders[e] != node
    ]
    return np.mean(rows, axis=0) if rows else np.zeros(graph.num_edge_features)


@pytest.mark.parametrize("how", ["mean", "zeros"])
def test_add_self_loops_fills_new_loops(graph, how):
    out = transforms.add_self_loops(graph, loop_features=how)
    assert table(
        out.replace(
            senders=out.senders[:9],
            receivers=out.receivers[:9],
            edge_features=out.edge_features[:9],
        )
    ) == table(graph)
    loops = {int(s): out.edge_features[9 + i] for i, s in enumerate(out.senders[9:])}
    assert sorted(loops) == [0, 1, 3, 4, 5]  # node 2 had a loop already
    for node, row in loops.items():
        want = _mean_in(graph, node) if how == "mean" else np.zeros(3)
        np.testing.assert_allclose(row, want, rtol=1e-6)
    # Hand-computed: node 0's in-edges are 1->0 (row 3) and 3->0 (row 5): mean of [3, 30, -2] and
    # [5, 50, -4]; nodes 4 and 5 have no in-edges.
    if how == "mean":
        np.testing.assert_allclose(loops[0], [4.0, 40.0, -3.0])
        np.testing.assert_array_equal(loops[4], [0, 0, 0])


def test_add_remaining_self_loops_keeps_the_last_loop(graph):
    extra = Graph(
        np.append(SENDERS, 2),
        np.append(RECEIVERS, 2),
        None,
        N,
        edge_features=edge_rows(10),
    )
    out = transforms.add_remaining_self_loops(extra, loop_features="zeros")
    loops = out.senders == out.receivers
    np.testing.assert_array_equal(out.senders[loops], np.arange(N))
    rows = out.edge_features[loops]
    np.testing.assert_array_equal(rows[2], edge_rows(10)[9])  # the last of the two 2 -> 2 loops
    np.testing.assert_array_equal(rows[[0, 1, 3, 4, 5]], np.zeros((5, 3)))
    kept = Graph(
        out.senders[~loops], out.receivers[~loops], None, N, edge_features=out.edge_features[~loops]
    )
    assert table(kept) == table(transforms.remove_self_loops(extra))


@pytest.mark.parametrize("self_loops", [True, False])
def test_gcn_norm_keeps_every_edges_row(self_loops):
    """gcn_norm's output, edge by edge: the non-loop edges in input order with their own
    rows, then one loop per node (the last existing loop's row, else the mean of the node's
    incoming non-loop rows); without self_loops every edge and row as given. The weights
    are the dense D^-1/2 A' D^-1/2 read at each edge."""
    senders, receivers = np.append(SENDERS, 2), np.append(RECEIVERS, 2)  # 2 -> 2 twice
    rows = edge_rows(10)
    extra = Graph(senders, receivers, None, N, edge_features=rows)
    out = transforms.gcn_norm(extra, self_loops=self_loops)
    loops = senders == receivers
    if self_loops:
        keep = np.flatnonzero(~loops)
        want_s = np.concatenate([senders[keep], np.arange(N)])
        want_r = np.concatenate([receivers[keep], np.arange(N)])
        loop_rows = [
            rows[np.flatnonzero(loops & (senders == i))[-1]]
            if (loops & (senders == i)).any()
            else _mean_in(extra, i)
            for i in range(N)
        ]
        want_rows = np.concatenate([rows[keep], np.array(loop_rows)])
        # Hand-computed: node 2's loops are edges 3 and 9, the last is kept; node 1's
        # in-edges are 0 -> 1 alone (row 0).
        np.testing.assert_array_equal(want_rows[len(keep) + 2], [10.0, 100.0, -9.0])
        np.testing.assert_array_equal(want_rows[len(keep) + 1], [1.0, 10.0, 0.0])
    else:
        want_s, want_r, want_rows = senders, receivers, rows
    np.testing.assert_array_equal(out.senders, want_s)
    np.testing.assert_array_equal(out.receivers, want_r)
    np.testing.assert_allclose(out.edge_features, want_rows, rtol=1e-6)
    dense = np.zeros((N, N))
    np.add.at(dense, (want_r, want_s), 1.0)
    scale = np.zeros(N)
    deg = dense.sum(1)
    scale[deg > 0] = deg[deg > 0] ** -0.5
    np.testing.assert_allclose(out.weights, scale[want_r] * scale[want_s], rtol=1e-6)


@pytest.mark.parametrize("how", ["mean", "sum", "max", "min"])
def test_coalesce_merges_duplicates(graph, how):
    out = transforms.coalesce(graph, feature_reduce=how)
    reduce = {"mean": np.mean, "sum": np.sum, "max": np.max, "min": np.min}[how]
    expected = {pair: reduce(rows, axis=0) for pair, rows in by_pair(graph).items()}
    got = by_pair(out)
    assert set(got) == set(expected)
    for pair, rows in got.items():
        assert len(rows) == 1
        np.testing.assert_allclose(rows[0], expected[pair], rtol=1e-6)
    # 1 -> 2 is edges 1 and 5: rows [2, 20, -1] and [6, 60, -5].
    if how == "mean":
        np.testing.assert_allclose(got[1, 2][0], [4.0, 40.0, -3.0])


def test_to_undirected_copies_and_merges_by_mean(graph):
    out = transforms.to_undirected(graph)
    expected = collections.defaultdict(list)
    for (s, r), rows in by_pair(graph).items():
        expected[s, r] += rows
        expected[r, s] += rows  # the reverse edge copies the row
    got = by_pair(out)
    assert set(got) == set(expected)
    for pair, rows in got.items():
        np.testing.assert_allclose(rows[0], np.mean(expected[pair], axis=0), rtol=1e-6)
    # 0 -> 1 (row 1) and 1 -> 0 (row 3): both directions get their mean [2, 20, -1].
    np.testing.assert_allclose(got[0, 1][0], [2.0, 20.0, -1.0])
    np.testing.assert_allclose(got[1, 0][0], [2.0, 20.0, -1.0])
    # 3 -> 0 alone: 0 -> 3 copies it.
    np.testing.assert_allclose(got[0, 3][0], edge_rows(9)[4])


def test_edge_mean_features_is_the_dense_mean(graph):
    incidence = np.zeros((N, graph.num_edges))
    incidence[RECEIVERS, np.arange(graph.num_edges)] = 1.0
    counts = incidence.sum(1, keepdims=True)
    dense = incidence @ edge_rows(9) / np.maximum(counts, 1)
    np.testing.assert_allclose(transforms.edge_mean_features(graph, chunk=4), dense, rtol=1e-6)
    with pytest.raises(ValueError, match="needs a graph with edge_features"):
        transforms.edge_mean_features(graph.without_edge_features())


def _dataset(graph: Graph) -> Dataset:
    return Dataset(
        name="edges",
        graph=graph,
        features=np.eye(N, dtype=np.float32),
        labels=np.array([0, 1, 0, 1, 0, 1]),
        split={"train": np.array([0, 1]), "valid": np.array([2]), "test": np.array([3])},
        num_classes=2,
    )


def test_save_and_load_keep_every_row(graph, tmp_path):
    save(_dataset(graph), tmp_path / "g")
    loaded = load_ondisk(tmp_path / "g", verify=True)
    assert isinstance(loaded.graph.edge_features, np.memmap)
    assert table(loaded.graph) == table(graph)
    # Stored in indices' order: row e belongs to the e-th stored edge.
    assert loaded.graph.edges_sorted
    plain = load_ondisk(save(_dataset(graph.without_edge_features()), tmp_path / "plain"))
    assert plain.graph.edge_features is None
    lazy = load_ondisk(tmp_path / "g", expand_limit=0)  # receivers computed on demand
    mean = transforms.edge_mean_features(lazy.graph, chunk=4)
    np.testing.assert_allclose(mean, transforms.edge_mean_features(graph), rtol=1e-6)
    assert lazy.graph.without_edge_features().receivers is lazy.graph.receivers


def test_load_names_a_bad_edge_feature_file(graph, tmp_path):
    folder = save(_dataset(graph), tmp_path / "g")
    np.save(folder / "edge_features.npy", np.zeros((9, 2), np.float32))
    with pytest.raises(FormatError, match=r"edge_features\.npy.*manifest says float32 \[9, 3\]"):
        load_ondisk(folder)


def _tree_edges(graph: Graph, sample, levels):
    csr = graph.to_csr()
    ids = np.asarray(csr.edge_ids)
    rows = [np.asarray(r) for r in sampled_edge_features(graph.edge_features, ids, sample)]
    for d in range(levels):
        parents = np.asarray(sample.nodes[d])[..., None]
        parents = np.broadcast_to(parents, sample.nodes[d + 1].shape)
        mask = np.asarray(sample.masks[d + 1])
        edge = ids[np.asarray(sample.edges[d])]
        assert mask.any()
        np.testing.assert_array_equal(graph.senders[edge][mask], sample.nodes[d + 1][mask])
        np.testing.assert_array_equal(graph.receivers[edge][mask], parents[mask])
        np.testing.assert_array_equal(rows[d][mask], graph.edge_features[edge][mask])
        assert not rows[d][~mask].any()


def test_tree_sampler_returns_the_sampled_edges(graph):
    csr = graph.to_csr()
    seeds = np.array([3, 2, 0, 5], np.int32)
    key = jax.random.key(1)
    plain = sample_blocks(csr.indptr, csr.indices, seeds, (2, 2), key=key)
    sample = sample_blocks(csr.indptr, csr.indices, seeds, (2, 2), key=key, with_edges=True)
    assert plain.edges is None
    for a, b in zip(plain.nodes, sample.nodes, strict=True):
        np.testing.assert_array_equal(a, b)  # the same tree with or without edges
    _tree_edges(graph, sample, 2)
    with pytest.raises(ValueError, match="with_edges=True"):
        sampled_edge_features(graph.edge_features, csr.edge_ids, plain)


def _unique_edge_graph(seed: int, n: int = 24, m: int = 90) -> Graph:
    """``m`` distinct random edges of ``n`` nodes (loops allowed), row ``e`` = ``edge_rows``."""
    rng = np.random.default_rng(seed)
    pairs = rng.choice(n * n, size=m, replace=False)
    senders, receivers = (pairs // n).astype(np.int32), (pairs % n).astype(np.int32)
    return Graph(senders, receivers, None, n, edge_features=edge_rows(m))


@pytest.mark.parametrize(
    ("case", "seeds", "fanouts", "caps"),
    [
        ("fixture", [3, 2, 4], (3, 2), None),  # 2 -> 2 is a loop; node 4 has no in-edges
        ("random", [5, 5, 0, 17, 9, 3], (4, 3), None),  # a repeated seed; nodes reached twice
        ("random", [5, 1, 0, 17, 9, 3], (4, 3), (8, 8)),  # caps drop nodes: their edges masked
    ],
)
def test_dedup_sampler_keeps_each_sampled_edges_features(graph, case, seeds, fanouts, caps):
    """Every sampled (source row -> frontier node) slot gets the feature row of that
    ``(src, dst)`` edge in the original graph, found by its endpoints (edges are unique);
    masked slots are zeros."""
    if case == "fixture":
        duplicate = 5  # the second 1 -> 2: drop it, so that endpoints name one edge
        keep = np.arange(graph.num_edges) != duplicate
        g = Graph(SENDERS[keep], RECEIVERS[keep], None, N, edge_features=graph.edge_features[keep])
    else:
        g = _unique_edge_graph(0)
    row_of = {
        (int(s), int(r)): np.asarray(f)
        for s, r, f in zip(g.senders, g.receivers, g.edge_features, strict=True)
    }
    assert len(row_of) == g.num_edges
    csr = g.to_csr()
    mask = np.ones(len(seeds), bool)
    mask[-1] = False  # a padded seed slot: no edges
    sample = sample_dedup(
        csr.indptr,
        csr.indices,
        np.array(seeds, np.int32),
        fanouts,
        key=jax.random.key(3),
        mask=mask,
        caps=caps,
        with_edges=True,
    )
    gathered = sampled_edge_features(g.edge_features, csr.edge_ids, sample)
    rows = np.concatenate([np.asarray(n) for n in sample.nodes])
    checked = 0
    for d, (neighbors, ok, features) in enumerate(
        zip(sample.neighbors, sample.edge_masks, gathered, strict=True)
    ):
        ok, features = np.asarray(ok), np.asarray(features)
        assert features.shape == (*ok.shape, g.num_edge_features)
        if d == 0:
            assert not ok[-1].any()  # the padded seed samples nothing
        assert not features[~ok].any()  # padding and dropped slots are zero rows
        targets = np.asarray(sample.nodes[d])
        for t, j in zip(*np.nonzero(ok), strict=True):
            src, dst = int(rows[int(neighbors[t, j])]), int(targets[t])
            np.testing.assert_array_equal(features[t, j], row_of[src, dst])
            checked += 1
    assert checked == int(sample.num_sampled_edges()) > 0
    if caps is not None:
        assert int(np.asarray(sample.overflow).sum()) > 0  # the caps bound: slots were masked
    plain = sample_dedup(
        csr.indptr, csr.indices, np.array(seeds, np.int32), fanouts, key=jax.random.key(3)
    )
    with pytest.raises(ValueError, match="DedupSample has no edges"):
        sampled_edge_features(g.edge_features, csr.edge_ids, plain)


@pytest.mark.parametrize("shards", [1, 3])
def test_edge_sharding_moves_rows_with_edges(graph, shards):
    sharded = EdgeShardedGraph.build(graph, shards)
    ids = np.asarray(sharded.edge_ids)
    real = ids >= 0
    np.testing.assert_array_equal(sharded.edge_features[real], graph.edge_features[ids[real]])
    assert not sharded.edge_features[~real].any()
    np.testing.assert_array_equal(sharded.edge_values(sharded.edge_features), graph.edge_features)
    leaves = jax.tree.leaves(sharded.without_edge_ids())
    assert any(leaf is sharded.edge_features for leaf in leaves)


def test_use_edge_features_replaces_appends_or_drops(graph):
    from sparsegcn.experiment.build import use_edge_features

    dataset = _dataset(graph)
    mean = transforms.edge_mean_features(graph)
    appended = use_edge_features(dataset)
    np.testing.assert_array_equal(appended.features, np.hstack([np.eye(N), mean]))
    assert appended.graph.edge_features is None and appended.num_edges == dataset.num_edges
    featureless = dataclasses.replace(dataset, info={"featureless": True})
    np.testing.assert_array_equal(use_edge_features(featureless).features, mean)
    dropped = use_edge_features(dataset, use=False)
    assert dropped.graph.edge_features is None
    np.testing.assert_array_equal(dropped.features, dataset.features)
    plain = dataclasses.replace(dataset, graph=graph.without_edge_features())
    assert use_edge_features(plain) is plain


def test_cli_flag_defaults_on():
    from sparsegcn.experiment import Experiment

    assert Experiment().edge_features is True
    assert Experiment(edge_features=False).edge_features is False


def test_a_non_finite_edge_feature_is_named_by_its_edge_not_the_derived_node_row(graph):
    # Before: an on-disk edge_features.npy holding NaN was reported as the derived node
    # features' "features[0, 0] = nan", naming no file the user has.
    import copy

    rows = np.asarray(graph.edge_features).copy()
    rows[5, 1] = np.nan
    # As a memory-mapped on-disk file arrives: a Graph built in memory checks its rows.
    damaged = copy.copy(graph)
    object.__setattr__(damaged, "edge_features", rows)
    with pytest.raises(ValueError, match=r"^edge_features\[5, 1\] = nan is not finite"):
        transforms.edge_mean_features(damaged, chunk=4)

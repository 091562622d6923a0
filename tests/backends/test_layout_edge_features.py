"""Edge features through every layout (sparsegcn/backends: as_layout, pack, unpack).

Each edge gets a row that names it (``graphs.with_edge_codes``: its position,
endpoints and weight), so the oracle is the edge list itself: wherever a
layout moves or indexes an edge, the row it holds or reads must name that
same edge, every edge exactly once, and padding must read zeros.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import GRAPH_CASES, random_graph, with_edge_codes
from helpers import compiled_programs

import sparsegcn as sg
from sparsegcn.backends import LAYOUTS, CsrLayout, PackedGraph, as_layout, pack, pack_gcn_norm
from sparsegcn.message_passing import message_passing

POSITION, SENDER, RECEIVER, WEIGHT = range(4)
PACKINGS = {
    "ell": lambda g: pack(g),
    "ell_split": lambda g: pack(g, widths=(1, 2, 3)),  # hubs' rows split into extra rows
    "csr": lambda g: pack(g, format="csr"),
}


def origin(features) -> np.ndarray:
    """Each row's position in the coded graph's edge list."""
    return np.asarray(features)[:, POSITION].astype(np.int64) - 1


def read_rows(features, edge_ids) -> np.ndarray:
    """Rows as a layout product reads per-edge data: by edge id, the padding id ``E`` as zeros."""
    features = np.asarray(features)
    padded = np.concatenate([features, np.zeros((1, features.shape[1]), features.dtype)])
    return padded[np.asarray(edge_ids)]


@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_keeps_each_edge_with_its_row_and_unpacks_to_the_edge_list(layout, case):
    graph = with_edge_codes(GRAPH_CASES[case]())
    view = as_layout(graph, layout)
    features = np.asarray(view.edge_features)
    assert features.shape == (graph.num_edges, 4) and features.dtype == np.float32
    moved = origin(features)
    np.testing.assert_array_equal(np.sort(moved), np.arange(graph.num_edges))
    # Row e of the view is the original row of the edge the view stores at e.
    np.testing.assert_array_equal(features, np.asarray(graph.edge_features)[moved])
    np.testing.assert_array_equal(view.senders, np.asarray(graph.senders)[moved])
    np.testing.assert_array_equal(view.receivers, np.asarray(graph.receivers)[moved])
    np.testing.assert_array_equal(view.edge_weights(), np.asarray(graph.edge_weights())[moved])
    if layout != "bcoo":  # BCOO sorts its edges; every other layout keeps their order
        np.testing.assert_array_equal(moved, np.arange(graph.num_edges))

    back = as_layout(view, "edges")
    assert type(back) is sg.Graph and back.layout_name == "edges"
    for name in ("senders", "receivers", "edge_features"):
        np.testing.assert_array_equal(getattr(back, name), getattr(view, name))
    assert type(view.unpack()) is sg.Graph


def layout_entries(layout, num_nodes: int):
    """``(edge_ids, columns, row_nodes)`` of every entry of a packed layout, padding included.

    Built from the layout's documented structure alone: CSR rows by
    ``indptr``; ELL slices numbered slice after slice (``first`` maps a node
    to its virtual row) and the hubs' extra rows by ``extra_hub``.
    """
    if isinstance(layout, CsrLayout):
        rows = np.repeat(np.arange(num_nodes), np.diff(np.asarray(layout.indptr)))
        return [(layout.edge_ids, layout.columns, rows)]
    first = np.asarray(layout.first)
    node_of_virtual = np.empty(sum(s.shape[1] for s in layout.slots), np.int64)
    present = first < node_of_virtual.shape[0]
    node_of_virtual[first[present]] = np.flatnonzero(present)
    entries, offset = [], 0
    for slots, edge_ids in zip(layout.slots, layout.edge_ids, strict=True):
        width, count = slots.shape
        rows = np.broadcast_to(node_of_virtual[offset : offset + count], (width, count))
        entries.append((edge_ids, slots, rows))
        offset += count
    hub_rows = np.asarray(layout.hubs)[np.asarray(layout.extra_hub)]
    extra_rows = np.broadcast_to(hub_rows, layout.extra_slots.shape)
    entries.append((layout.extra_edge_ids, layout.extra_slots, extra_rows))
    return entries


@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
@pytest.mark.parametrize("packing", sorted(PACKINGS))
def test_packed_layout_entries_read_the_row_of_their_own_edge_and_padding_reads_zeros(
    packing, case
):
    graph = with_edge_codes(GRAPH_CASES[case]())
    packed = PACKINGS[packing](graph)
    e, n = graph.num_edges, graph.num_nodes
    directions = [(packed.layout, SENDER, RECEIVER)]
    if packed.transpose_layout is not None:  # A^T: rows are senders, columns receivers
        directions.append((packed.transpose_layout, RECEIVER, SENDER))
    for layout, column_field, row_field in directions:
        seen = []
        for edge_ids, columns, row_nodes in layout_entries(layout, n):
            ids, columns = np.asarray(edge_ids), np.asarray(columns)
            rows = read_rows(packed.edge_features, ids)
            padding = ids == e
            np.testing.assert_array_equal(padding, columns == n)
            assert not rows[padding].any()
            real = rows[~padding]
            np.testing.assert_array_equal(real[:, column_field], columns[~padding])
            np.testing.assert_array_equal(real[:, row_field], row_nodes[~padding])
            seen.append(origin(real))
        np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(e))
        if isinstance(layout, CsrLayout):  # its row-order weights sit beside the rows
            np.testing.assert_array_equal(
                read_rows(packed.edge_features, layout.edge_ids)[:, WEIGHT], layout.data
            )


def dense_from_rows(graph: sg.Graph, column: int) -> np.ndarray:
    """``A[r, s] += f[e, column]`` over the coded graph's original edges (float64)."""
    a = np.zeros((graph.num_nodes, graph.num_nodes))
    f = np.asarray(graph.edge_features, np.float64)[:, column]
    np.add.at(a, (np.asarray(graph.receivers), np.asarray(graph.senders)), f)
    return a


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_products_weighted_by_its_feature_columns_match_the_original_edges(layout):
    """A jitted layer reading ``view.edge_features`` as per-edge (per-head) factors."""
    graph = with_edge_codes(random_graph(30, 90, seed=1))
    view = as_layout(graph, layout)
    x = jax.random.normal(jax.random.key(0), (graph.num_nodes, 2, 3))
    heads = (POSITION, WEIGHT)

    def product(view, x):
        return view.product(x, view.edge_features[:, jnp.array(heads)])

    expected = np.stack(
        [dense_from_rows(graph, c) @ np.asarray(x[:, h], np.float64) for h, c in enumerate(heads)],
        axis=1,
    )
    np.testing.assert_allclose(jax.jit(product)(view, x), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_edge_features_are_leaves_of_a_layout_under_jit_without_recompiling(layout):
    graph = with_edge_codes(random_graph(20, 50, seed=3))
    view = as_layout(graph, layout)
    x = jax.random.normal(jax.random.key(1), (graph.num_nodes, 4))

    @jax.jit
    def step(view, x):
        def message(x_j, x_i, e):
            return x_j * e[:, WEIGHT:] - x_i * e[:, POSITION:] * 0.01

        return message_passing(view, x, x, message=message, edge_features=view.edge_features)

    def reference(features):
        s, r = np.asarray(view.senders), np.asarray(view.receivers)
        w = np.asarray(view.edge_weights(), np.float64)[:, None]
        xs = np.asarray(x, np.float64)
        m = w * (xs[s] * features[:, WEIGHT:] - xs[r] * features[:, POSITION:] * 0.01)
        out = np.zeros_like(xs)
        np.add.at(out, r, m)
        return out

    np.testing.assert_allclose(step(view, x), reference(view.edge_features), rtol=1e-5, atol=1e-4)
    doubled = np.asarray(view.edge_features) * 2
    changed = view.replace(edge_features=doubled)
    assert type(changed) is type(view)
    assert jax.tree.structure(changed) == jax.tree.structure(view)
    out = []
    assert compiled_programs(lambda: out.append(step(changed, x))) == []
    np.testing.assert_allclose(out[0], reference(doubled), rtol=1e-5, atol=1e-4)
    on_device = jax.device_put(view)
    np.testing.assert_array_equal(on_device.edge_features, view.edge_features)


@pytest.mark.parametrize("format", ["ell", "csr"])
def test_packed_replace_keeps_rows_and_stays_packed_only_for_a_feature_change(format):
    graph = with_edge_codes(random_graph(15, 40, seed=2))
    packed = pack(graph, format=format)
    np.testing.assert_array_equal(packed.edge_features, graph.edge_features)
    assert "4 edge features" in repr(packed)

    reweighted = packed.replace(weights=np.ones(graph.num_edges, np.float32))
    assert type(reweighted) is sg.Graph
    np.testing.assert_array_equal(reweighted.edge_features, graph.edge_features)

    zeros = np.zeros_like(graph.edge_features)
    refeatured = packed.replace(edge_features=zeros)
    assert isinstance(refeatured, PackedGraph) and refeatured.layout is packed.layout
    np.testing.assert_array_equal(refeatured.edge_features, zeros)
    with pytest.raises(ValueError, match=r"edge_features must have shape \(\d+, D\).*got \(3, 4\)"):
        packed.replace(edge_features=zeros[:3])

    bare = packed.without_edge_features()
    assert isinstance(bare, PackedGraph) and bare.edge_features is None
    assert graph.edge_features is not None and packed.edge_features is not None
    assert pack(bare, format=format).edge_features is None
    other = "csr" if format == "ell" else "ell"
    np.testing.assert_array_equal(as_layout(packed, other).edge_features, graph.edge_features)


@pytest.mark.parametrize("format", ["ell", "csr"])
def test_pack_gcn_norm_carries_the_rows_gcn_norm_gives(format):
    """Folded (ELL) or stored (CSR) normalization: rows as gcn_norm's, loops included."""
    graph = with_edge_codes(random_graph(12, 30, seed=5, weighted=False))
    packed = pack_gcn_norm(graph, format=format)
    normalized = sg.gcn_norm(graph)
    np.testing.assert_array_equal(packed.edge_features, normalized.edge_features)
    np.testing.assert_array_equal(packed.senders, normalized.senders)
    np.testing.assert_array_equal(packed.receivers, normalized.receivers)

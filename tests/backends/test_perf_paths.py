"""The fast paths against the dense reference: packed graphs (sliced-ELL and
CSR layouts) with and without a folded scaling, row splitting of hubs, reduced-precision
storage, and the layer's matmul order; forward, gradients, jit and vmap."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from graphs import GRAPH_CASES, random_graph

import sparsegcn as sg
from sparsegcn.backends import (
    PackedGraph,
    Segment,
    build_csr,
    build_ell,
    csr_matmul,
    ell_matmul,
    native,
    pack,
    pack_gcn_norm,
)
from sparsegcn.nn.conv import gcn_conv

TOL = dict(rtol=2e-5, atol=2e-5)


def reference_matrix(g: sg.Graph) -> np.ndarray:
    """``A[r, s] = sum of w`` in float64, built by hand from the edge list."""
    a = np.zeros((g.num_nodes, g.num_nodes))
    w = np.ones(g.num_edges) if g.weights is None else np.asarray(g.weights, np.float64)
    np.add.at(a, (np.asarray(g.receivers), np.asarray(g.senders)), w)
    return a


def features(n: int, width: int = 3, seed: int = 0) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), (n, width), jnp.float32)


def hub_graph() -> sg.Graph:
    """Node 0 receives 40 edges (split into several virtual rows), node 1 none."""
    rng = np.random.default_rng(7)
    senders = np.concatenate([rng.integers(1, 12, 40), rng.integers(0, 12, 25)])
    receivers = np.concatenate([np.zeros(40, np.int64), rng.integers(2, 12, 25)])
    weights = rng.uniform(0.5, 2.0, senders.shape[0]).astype(np.float32)
    return sg.Graph(senders, receivers, weights, 12)


PACKINGS = {
    "default": lambda g: pack(g),
    "narrow": lambda g: pack(g, widths=(1, 2, 3)),  # forces row splitting
    "csr": lambda g: pack(g, format="csr"),
}
CASES = {**GRAPH_CASES, "hub": hub_graph}


@pytest.fixture(params=list(CASES), ids=list(CASES))
def graph(request):
    return CASES[request.param]()


@pytest.mark.parametrize("packing", list(PACKINGS))
def test_packed_forward_matches_reference(graph, packing):
    packed = PACKINGS[packing](graph)
    assert isinstance(packed, PackedGraph)
    x = features(graph.num_nodes)
    expected = reference_matrix(graph) @ np.asarray(x, np.float64)
    np.testing.assert_allclose(sg.propagate(packed, x), expected, **TOL)
    np.testing.assert_allclose(jax.jit(sg.propagate)(packed, x), expected, **TOL)
    np.testing.assert_allclose(packed.to_dense(), reference_matrix(graph), **TOL)


@pytest.mark.parametrize("packing", list(PACKINGS))
def test_packed_gradients_match_reference(graph, packing):
    packed = PACKINGS[packing](graph)
    x = features(graph.num_nodes)
    cot = features(graph.num_nodes, seed=1)
    a = reference_matrix(graph)

    def loss(x, w):
        g = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(packed), leaves(w))
        return jnp.sum(cot * sg.propagate(g, x))

    def leaves(w):
        flat = jax.tree_util.tree_leaves(packed)
        index = [i for i, leaf in enumerate(flat) if leaf is packed.weights]
        if index:
            flat[index[0]] = w
        return flat

    w0 = packed.weights if packed.weights is not None else None
    for fn in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1)))):
        gx, gw = fn(x, w0)
        np.testing.assert_allclose(gx, a.T @ np.asarray(cot, np.float64), **TOL)
        if w0 is not None:
            s, r = np.asarray(graph.senders), np.asarray(graph.receivers)
            expected_gw = np.sum(np.asarray(cot)[r] * np.asarray(x)[s], axis=1)
            np.testing.assert_allclose(gw, expected_gw, **TOL)


@pytest.mark.parametrize("format", ["ell", "csr"])
def test_packed_vmap_and_higher_rank(format):
    g = hub_graph()
    packed = pack(g, widths=(1, 4), format=format)
    a = reference_matrix(g)
    xs = jax.random.normal(jax.random.key(4), (4, g.num_nodes, 3), jnp.float32)
    out = jax.vmap(lambda x: sg.propagate(packed, x))(xs)
    np.testing.assert_allclose(out, np.einsum("rs,bsf->brf", a, np.asarray(xs, np.float64)), **TOL)
    grads = jax.vmap(jax.grad(lambda x: jnp.sum(sg.propagate(packed, x) ** 2)))(xs)
    for i in range(4):
        y = a @ np.asarray(xs[i], np.float64)
        np.testing.assert_allclose(grads[i], 2 * a.T @ y, rtol=1e-4, atol=1e-4)
    t = jax.random.normal(jax.random.key(3), (g.num_nodes, 2, 3), jnp.float32)
    np.testing.assert_allclose(
        sg.propagate(packed, t), np.einsum("rs,sij->rij", a, np.asarray(t, np.float64)), **TOL
    )
    v = features(g.num_nodes, 1)[:, 0]
    np.testing.assert_allclose(sg.propagate(packed, v), a @ np.asarray(v), **TOL)


def test_vmap_over_weights_of_a_packed_graph_goes_through_replace():
    g = hub_graph()
    packed = pack(g)
    ws = jax.random.uniform(jax.random.key(5), (3, g.num_edges), jnp.float32)
    x = features(g.num_nodes)
    out = jax.vmap(lambda w: sg.propagate(packed.replace(weights=w), x))(ws)
    for i in range(3):
        ref = reference_matrix(g.replace(weights=np.asarray(ws[i])))
        np.testing.assert_allclose(out[i], ref @ np.asarray(x, np.float64), **TOL)


def test_replace_returns_a_plain_graph_with_the_change():
    packed = pack(hub_graph())
    changed = packed.replace(weights=np.ones(packed.num_edges, np.float32))
    assert type(changed) is sg.Graph
    np.testing.assert_array_equal(changed.senders, packed.senders)
    assert type(packed.unpack()) is sg.Graph


@pytest.mark.parametrize("format", ["ell", "csr"])
def test_symmetric_graphs_share_one_layout_and_others_get_a_transpose(format):
    directed = hub_graph()
    assert pack(directed, format=format).transpose_layout is not None
    undirected = sg.to_undirected(random_graph(40, 100, weighted=False))
    packed = pack(undirected, format=format)
    assert packed.symmetric and packed.transpose_layout is None
    # Symmetric pattern, asymmetric weights: A^T != A, so a transpose is kept.
    s, r = np.asarray(undirected.senders), np.asarray(undirected.receivers)
    asymmetric = undirected.replace(weights=(1.0 + (s < r)).astype(np.float32))
    assert not pack(asymmetric, format=format).symmetric
    x = features(40)
    cot = features(40, seed=2)
    gx = jax.grad(lambda x: jnp.sum(cot * sg.propagate(pack(asymmetric, format=format), x)))(x)
    np.testing.assert_allclose(
        gx, reference_matrix(asymmetric).T @ np.asarray(cot, np.float64), **TOL
    )


@pytest.mark.parametrize("format", ["ell", "csr"])
@pytest.mark.parametrize("weighted", [False, True])
def test_pack_gcn_norm_equals_gcn_norm(weighted, format):
    g = sg.to_undirected(random_graph(60, 200, seed=4, weighted=False))
    if weighted:
        g = g.replace(weights=np.linspace(0.5, 2.0, g.num_edges, dtype=np.float32))
    packed = pack_gcn_norm(g, format=format)
    assert packed.format == format
    a_hat = sg.gcn_norm(g)
    # ELL folds D^-1/2 of an unweighted graph; CSR stores the normalized weights.
    assert (packed.scale is not None) == (not weighted and format == "ell")
    np.testing.assert_allclose(packed.to_dense(), a_hat.to_dense(), rtol=1e-6, atol=1e-7)
    x = features(60, 5)
    expected = reference_matrix(a_hat) @ np.asarray(x, np.float64)
    np.testing.assert_allclose(sg.propagate(packed, x), expected, **TOL)
    cot = features(60, 5, seed=9)
    gx = jax.jit(jax.grad(lambda x: jnp.sum(cot * sg.propagate(packed, x))))(x)
    np.testing.assert_allclose(gx, reference_matrix(a_hat).T @ np.asarray(cot), **TOL)


def test_folded_scale_still_gives_the_exact_weight_gradient():
    g = sg.to_undirected(random_graph(30, 80, seed=5, weighted=False))
    packed = pack_gcn_norm(g)
    x, cot = features(30), features(30, seed=3)
    treedef = jax.tree_util.tree_structure(packed)
    flat = jax.tree_util.tree_leaves(packed)
    position = next(i for i, leaf in enumerate(flat) if leaf is packed.weights)

    def loss(w):
        flat[position] = w
        return jnp.sum(cot * sg.propagate(jax.tree_util.tree_unflatten(treedef, flat), x))

    gw = jax.grad(loss)(jnp.asarray(packed.weights))
    s, r = np.asarray(packed.senders), np.asarray(packed.receivers)
    np.testing.assert_allclose(gw, np.sum(np.asarray(cot)[r] * np.asarray(x)[s], axis=1), **TOL)


def test_other_backends_read_a_packed_graph_as_its_edges():
    g = hub_graph()
    packed = pack(g)
    x = features(g.num_nodes)
    expected = reference_matrix(g) @ np.asarray(x, np.float64)
    for backend in ("dense", "bcoo", Segment(use_layout=False)):
        np.testing.assert_allclose(sg.propagate(packed, x, backend=backend), expected, **TOL)


@pytest.mark.parametrize("storage", ["bfloat16", "float16"])
@pytest.mark.parametrize("packed", [False, True])
def test_reduced_precision_storage_accumulates_in_float32(storage, packed):
    g = hub_graph()
    graph = pack(g) if packed else g
    x = features(g.num_nodes)
    out = sg.propagate(graph, x, backend=Segment(storage_dtype=storage))
    assert out.dtype == jnp.float32
    rounded = np.asarray(x.astype(storage).astype(jnp.float32), np.float64)
    np.testing.assert_allclose(out, reference_matrix(g) @ rounded, rtol=1e-5, atol=1e-5)
    assert not np.allclose(out, reference_matrix(g) @ np.asarray(x, np.float64), atol=1e-6)


def test_csr_layout_is_scipys_csr():
    g = hub_graph()
    s, r, w = np.asarray(g.senders), np.asarray(g.receivers), np.asarray(g.weights)
    layout = build_csr(s, r, g.num_nodes, w)
    counts = np.bincount(r, minlength=12)
    np.testing.assert_array_equal(layout.indptr, np.concatenate([[0], np.cumsum(counts)]))
    assert counts[0] == 40 and counts[1] == 0  # the hub, and a row with no entry
    reference = sp.csr_array((w, (r, s)), shape=(12, 12))  # sums duplicates
    rebuilt = sp.csr_array((layout.data, layout.columns, layout.indptr), shape=(12, 12))
    np.testing.assert_allclose(rebuilt.toarray(), reference.toarray(), rtol=1e-6)
    ones = build_csr(s, r, g.num_nodes)
    np.testing.assert_array_equal(ones.data, np.ones(g.num_edges, np.float32))


def test_csr_packing_refuses_what_it_cannot_do(monkeypatch):
    g = hub_graph()
    with pytest.raises(ValueError, match=r"format must be one of \('ell', 'csr'\), got 'coo'"):
        pack(g, format="coo")
    packed = pack(g, format="csr")
    with pytest.raises(ValueError, match="storage_dtype=bfloat16 needs an ELL-packed graph"):
        sg.propagate(packed, features(12), backend=Segment(storage_dtype="bfloat16"))
    from sparsegcn.backends import csr

    monkeypatch.setattr(csr, "INT32_MAX", 50)
    with pytest.raises(ValueError, match="int32 ids, but the graph has 65 edges and 12 nodes"):
        pack(g, format="csr")


def test_unknown_storage_dtype_is_refused():
    with pytest.raises(ValueError, match=r"storage_dtype must be one of .* got 'int8'"):
        Segment(storage_dtype="int8")


def test_pack_refuses_bad_scale_and_weighted_folding():
    g = random_graph(10, 20)
    with pytest.raises(ValueError, match="this graph has edge weights"):
        pack(g, scale=np.ones(10))
    unweighted = random_graph(10, 20, weighted=False)
    with pytest.raises(
        ValueError, match=r"scale must have shape \(10,\), one per node, got \(9,\)"
    ):
        pack(unweighted, scale=np.ones(9))
    with pytest.raises(ValueError, match=r"scale\[0\] = nan"):
        pack(unweighted, scale=np.full(10, np.nan))
    with pytest.raises(TypeError, match=r"pack expects a sparsegcn\.Graph, got ndarray"):
        pack(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="widths must be increasing positive integers"):
        pack(unweighted, widths=(4, 2))


def test_layout_splits_hubs_and_pads_out_of_range():
    g = hub_graph()
    layout = build_ell(np.asarray(g.senders), np.asarray(g.receivers), 12, widths=(1, 4, 16))
    # Node 0 has 40 entries: 16 in a slice, the other 24 in extra rows of 16 and 8.
    np.testing.assert_array_equal(layout.hubs, [0])
    assert layout.extra_slots.shape == (16, 2)
    np.testing.assert_array_equal(layout.extra_hub, [0, 0])
    assert np.sum(np.asarray(layout.extra_slots) < 12) == 24
    assert layout.hub_of[0] == 0 and np.all(np.asarray(layout.hub_of)[1:] == 1)
    # Node 1 receives nothing: its row index is V (read as zeros).
    num_virtual = sum(s.shape[1] for s in layout.slots)
    assert layout.first[1] == num_virtual
    assert all(s.shape[0] <= 16 for s in layout.slots)
    pairs = [*zip(layout.slots, layout.edge_ids, strict=True)]
    pairs.append((layout.extra_slots, layout.extra_edge_ids))
    for slots, edge_ids in pairs:
        assert np.array_equal(np.asarray(slots) == 12, np.asarray(edge_ids) == g.num_edges)
    assert sum(int(np.sum(np.asarray(s) < 12)) for s, _ in pairs) == g.num_edges
    x = features(12)
    np.testing.assert_allclose(
        ell_matmul(layout, x, jnp.asarray(g.weights), 12),
        reference_matrix(g) @ np.asarray(x, np.float64),
        **TOL,
    )


@pytest.mark.parametrize("widths", [(4, 8), (2, 16)])
def test_gcn_conv_matmul_orders_agree(widths):
    """Both products of the layer, ``Â (X W)`` and ``(Â X) W``, on a packed graph."""
    g = sg.to_undirected(random_graph(30, 90, seed=6, weighted=False))
    packed = pack_gcn_norm(g)
    fin, fout = widths
    x = features(30, fin)
    params = {"w": jax.random.normal(jax.random.key(1), (fin, fout)), "b": jnp.ones(fout)}
    a_hat = reference_matrix(sg.gcn_norm(g))
    expected = a_hat @ np.asarray(x, np.float64) @ np.asarray(params["w"]) + 1.0
    np.testing.assert_allclose(gcn_conv(params, packed, x), expected, rtol=1e-4, atol=1e-4)


def test_fence_returns_its_values_under_jit_vmap_and_grad():
    from sparsegcn.backends.base import fence

    ids = jnp.arange(5)
    x = jnp.linspace(-1.0, 1.0, 10).reshape(5, 2)
    np.testing.assert_array_equal(fence(x, ids), x)
    np.testing.assert_array_equal(jax.jit(fence)({"a": x}, ids)["a"], x)
    np.testing.assert_array_equal(jax.vmap(lambda v: fence(v, ids))(x.T), x.T)
    grad = jax.grad(lambda v: jnp.sum(fence(v, ids) ** 2))(x)
    np.testing.assert_allclose(grad, 2 * x)
    assert fence(x, jnp.zeros(0, jnp.int32)) is x


def test_sparse_feature_layer_matches_dense_features():
    g = sg.to_undirected(random_graph(30, 90, seed=8, weighted=False))
    packed = pack_gcn_norm(g)
    rng = np.random.default_rng(3)
    dense = (rng.random((30, 12)) < 0.2) * rng.random((30, 12))
    sparse = sg.as_features(sp.csr_array(dense.astype(np.float32)), 30)
    params = {"w": jax.random.normal(jax.random.key(2), (12, 4)), "b": jnp.zeros(4)}
    expected = reference_matrix(sg.gcn_norm(g)) @ dense @ np.asarray(params["w"], np.float64)
    for x in (sparse, jnp.asarray(dense, jnp.float32)):
        out = jax.jit(lambda p, x: gcn_conv(p, packed, x))(params, x)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_csr_product_batches_seeds_into_one_kernel_call():
    """vmap over x (the seeds of one compiled program) folds the batch into the
    feature axis: one native CSR call (sparsegcn's, or XLA's without the
    library), the same numbers as a loop."""
    g = hub_graph()
    packed = pack(g, format="csr")
    xs = jax.random.normal(jax.random.key(8), (3, g.num_nodes, 4), jnp.float32)
    fn = jax.jit(jax.vmap(lambda x: sg.propagate(packed, x)))
    a = reference_matrix(g)
    for i, out in enumerate(fn(xs)):
        np.testing.assert_allclose(out, a @ np.asarray(xs[i], np.float64), **TOL)
    if jax.default_backend() == "cpu":
        hlo = fn.lower(xs).compile().as_text()
        kernel = "sparsegcn_csr_spmm" if native.ffi_available() else "cpu_csr_sparse_dense"
        assert hlo.count(kernel) == 1
    # A batched layout (vmap over graphs) takes one product per element.
    layouts = jax.tree.map(lambda leaf: jnp.stack([leaf, leaf]), packed.layout)
    ys = jax.vmap(lambda layout, x: csr_matmul(layout, x, g.num_nodes))(layouts, xs[:2])
    for i in range(2):
        np.testing.assert_allclose(ys[i], a @ np.asarray(xs[i], np.float64), **TOL)


@pytest.mark.parametrize("fmt", ["ell", "csr"])
def test_a_folded_scale_is_applied_once_on_every_format(fmt):
    # Before: pack(g, scale=d, format="csr") stored scale[s] * scale[r] in the CSR layout
    # and scaled x and y too: diag(d)^2 A diag(d)^2 x. The scale in the old test was ones.
    g = random_graph(9, 20, weighted=False)
    adjacency, d = sg.gcn_norm_factors(g)
    packed = pack(adjacency, scale=d, format=fmt)
    expected = np.asarray(sg.gcn_norm(g).to_dense(), np.float64)
    x = jax.random.normal(jax.random.key(0), (9, 3))
    np.testing.assert_allclose(sg.propagate(packed, x), expected @ np.asarray(x), atol=1e-5)
    cotangent = jax.random.normal(jax.random.key(1), (9, 3))
    grad = jax.grad(lambda x: jnp.sum(sg.propagate(packed, x) * cotangent))(x)
    np.testing.assert_allclose(grad, expected.T @ np.asarray(cotangent), atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 2, 0), (0, 2, 3)])
def test_a_vmapped_csr_product_of_empty_batches_or_widths(shape):
    # Before: ZeroDivisionError from reshape(-1, b, f) when B or F is 0.
    view = sg.as_layout(sg.Graph(np.array([0, 1]), np.array([1, 0]), None, 2), "csr")
    assert jax.vmap(lambda x: sg.propagate(view, x))(jnp.zeros(shape)).shape == shape


@pytest.mark.parametrize("layout", ["edges", "bcoo", "dense", "ell"])
def test_bfloat16_features_are_summed_in_float32(layout):
    # Before: the edge list and BCOO summed bfloat16 rows in bfloat16, and a
    # hub of 667 in-edges was 26 % off (a sum stops growing once its step
    # falls below half the spacing of bfloat16 numbers).
    rng = np.random.default_rng(0)
    n, e = 700, 667
    senders, receivers = rng.integers(0, n, e).astype(np.int32), np.zeros(e, np.int32)
    g = sg.Graph(senders, receivers, rng.uniform(0.5, 1.5, e).astype(np.float32), n)
    x = jnp.asarray(rng.uniform(0.0, 1.0, (n, 4)), jnp.bfloat16)
    graph, backend = (pack(g), None) if layout == "ell" else (g, layout)
    if layout == "edges":
        backend = "segment"
    out = sg.propagate(graph, x, backend=backend)
    assert out.dtype == jnp.bfloat16
    want = reference_matrix(g) @ np.asarray(x, np.float64)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=1e-2, atol=1e-2)


HUB = 3_000  # a bfloat16 sum of ones stops at 256, a float16 one at 2048


def _hub_case(name):
    """``(propagate, x)``: a product whose hub (node 0) sums 3,000 unit rows, forward
    (``*-in``: 3,000 in-edges) or in its gradient (``*-out``: 3,000 out-edges)."""
    from sparsegcn.backends import Segment, as_layout

    n = HUB + 1
    leaves, hub = np.arange(1, n, dtype=np.int32), np.zeros(HUB, np.int32)
    into, out_of = sg.Graph(leaves, hub, None, n), sg.Graph(hub, leaves, None, n)
    star = sg.Graph(np.r_[leaves, hub], np.r_[hub, leaves], None, n)
    repeated = sg.Graph(hub + 1, hub, None, n)  # 3,000 copies of the edge 1 -> 0
    x16 = jnp.ones((n, 1), jnp.bfloat16)
    return {
        "csr-in": (lambda x: sg.propagate(as_layout(into, "csr"), x), x16),
        "dense-in": (lambda x: sg.propagate(as_layout(repeated, "dense"), x), x16),
        "edges-out": (lambda x: sg.propagate(as_layout(out_of, "edges"), x), x16),
        "segment-out": (lambda x: sg.propagate(out_of, x, backend="segment"), x16),
        "storage-out": (
            lambda x: sg.propagate(out_of, x, backend=Segment(storage_dtype="bfloat16")),
            jnp.ones((n, 1), jnp.float32),
        ),
        "ell-weights-out": (
            lambda x: sg.message_passing(
                as_layout(star, "ell"), x, edge_weight=jnp.ones(2 * HUB, jnp.float32)
            ),
            jnp.ones((n, 1), jnp.float16),
        ),
    }[name]


@pytest.mark.parametrize(
    "name", ["csr-in", "dense-in", "edges-out", "segment-out", "storage-out", "ell-weights-out"]
)
def test_a_hub_of_narrow_floats_is_summed_in_float32_forward_and_backward(name):
    # Before: the CSR layout summed bfloat16 in bfloat16 (a hub of 3,000 read 256), the
    # dense matrix added repeated edges in bfloat16, and the gradients of the edge list, of Segment's storage dtype
    # and of ELL's run-time weights scatter-added in the narrow dtype (256 or 2048).
    propagate, x = _hub_case(name)
    if name.endswith("-in"):
        value = propagate(x)[0, 0]
    else:
        value = jax.grad(lambda x: propagate(x).astype(jnp.float32).sum())(x)[0, 0]
    assert float(value) == pytest.approx(HUB, rel=1e-2)  # bfloat16 holds 3,000 to 0.4 %


# -- a packed graph's weights leaf replaced after packing (jit, vmap, learned weights) --

# Duplicated pairs (0-1 twice each way), a duplicated self-loop (2), and an
# isolated node (5): symmetric as packed, with ones as weights.
SYM_S = np.array([0, 1, 0, 1, 2, 2, 1, 2, 3, 4, 0, 3])
SYM_R = np.array([1, 0, 1, 0, 2, 2, 2, 1, 4, 3, 3, 0])
# The same plus one-way edges (0 -> 4 twice, 4 -> 4): packed with a transpose.
DIR_S = np.concatenate([SYM_S, [0, 0, 4]])
DIR_R = np.concatenate([SYM_R, [4, 4, 4]])
NODES = 6


def _ones_graph(senders, receivers):
    return sg.Graph(senders, receivers, np.ones(senders.shape[0], np.float32), NODES)


def _scaled(senders, receivers, fmt):
    scale = np.linspace(0.5, 1.5, NODES).astype(np.float32)
    return pack(sg.Graph(senders, receivers, None, NODES), scale=scale, format=fmt)


REWEIGHT_PACKINGS = {
    "ell_symmetric": lambda: pack(_ones_graph(SYM_S, SYM_R)),
    "ell_symmetric_split": lambda: pack(_ones_graph(SYM_S, SYM_R), widths=(1, 2)),
    "ell_directed": lambda: pack(_ones_graph(DIR_S, DIR_R)),
    "csr_symmetric": lambda: pack(_ones_graph(SYM_S, SYM_R), format="csr"),
    "csr_directed": lambda: pack(_ones_graph(DIR_S, DIR_R), format="csr"),
    "ell_scaled_symmetric": lambda: _scaled(SYM_S, SYM_R, "ell"),
    "ell_scaled_directed": lambda: _scaled(DIR_S, DIR_R, "ell"),
    "csr_scaled_symmetric": lambda: _scaled(SYM_S, SYM_R, "csr"),
    "ell_gcn_norm": lambda: pack_gcn_norm(sg.Graph(SYM_S, SYM_R, None, NODES)),
    # Built without its reverse pairing (not by pack): the gradient gathers and scatters.
    "ell_symmetric_unpaired": lambda: dataclasses.replace(
        pack(_ones_graph(SYM_S, SYM_R)), reverse_edges=None
    ),
    # A^T = A only with duplicates summed (2 = 1 + 1): no edge-by-edge reversal.
    "ell_symmetric_by_sums": lambda: pack(
        sg.Graph(np.array([0, 1, 1]), np.array([1, 0, 0]), np.float32([2, 1, 1]), NODES)
    ),
    "csr_symmetric_by_sums": lambda: pack(
        sg.Graph(np.array([0, 1, 1]), np.array([1, 0, 0]), np.float32([2, 1, 1]), NODES),
        format="csr",
    ),
}


def _with_weights(packed, w):
    """``packed`` with its weights leaf replaced, as jit, vmap and grad see it."""
    flat, treedef = jax.tree_util.tree_flatten(packed)
    return jax.tree_util.tree_unflatten(
        treedef, [w if leaf is packed.weights else leaf for leaf in flat]
    )


def _dense_reference(packed, w, x, cot):
    """Forward, gradient in x and gradient in w, in float64, from the weights ``w``."""
    s, r = np.asarray(packed.senders), np.asarray(packed.receivers)
    a = np.zeros((NODES, NODES))
    np.add.at(a, (r, s), np.asarray(w, np.float64))
    x, cot = np.asarray(x, np.float64), np.asarray(cot, np.float64)
    return a @ x, a.T @ cot, np.sum(cot[r] * x[s], axis=1)


def _reweight_loss(packed, x, w, cot):
    return jnp.sum(cot * sg.propagate(_with_weights(packed, w), x))


def _new_weights(packed, seed):
    """Asymmetric weights, none equal to the packed ones."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.uniform(2.0, 3.0, packed.num_edges), jnp.float32)


@pytest.mark.parametrize("packing", list(REWEIGHT_PACKINGS))
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_a_replaced_weights_leaf_is_read_by_forward_and_both_gradients(packing, mode):
    # Before: the CSR product read the weights copied into its layout at packing
    # (f(2w) = f(w)) and a folded scale ignored the weights, while the weight
    # gradient was non-zero; a layout packed as symmetric served as A^T for the
    # x gradient although the new weights were not symmetric.
    packed = REWEIGHT_PACKINGS[packing]()
    x, cot = features(NODES, seed=3), features(NODES, seed=4)
    w = _new_weights(packed, 0)
    forward = lambda x, w: sg.propagate(_with_weights(packed, w), x)  # noqa: E731
    grads = jax.grad(functools.partial(_reweight_loss, packed), argnums=(0, 1))
    if mode == "jit":
        forward, grads = jax.jit(forward), jax.jit(grads)
    y, (gx, gw) = forward(x, w), grads(x, w, cot)
    want_y, want_gx, want_gw = _dense_reference(packed, w, x, cot)
    np.testing.assert_allclose(y, want_y, **TOL)
    np.testing.assert_allclose(gx, want_gx, **TOL)
    np.testing.assert_allclose(gw, want_gw, **TOL)
    # The packed weights themselves still give the packed matrix.
    np.testing.assert_allclose(
        forward(x, packed.weights), _dense_reference(packed, packed.weights, x, cot)[0], **TOL
    )


@pytest.mark.parametrize("packing", list(REWEIGHT_PACKINGS))
def test_vmap_over_a_packed_graphs_weights_leaf(packing):
    packed = REWEIGHT_PACKINGS[packing]()
    x, cot = features(NODES, seed=5), features(NODES, seed=6)
    # One batch element keeps the packed weights, the others do not.
    ws = jnp.stack([jnp.asarray(packed.weights), _new_weights(packed, 1), _new_weights(packed, 2)])
    ys = jax.jit(jax.vmap(lambda w: sg.propagate(_with_weights(packed, w), x)))(ws)
    grads = jax.vmap(
        jax.grad(functools.partial(_reweight_loss, packed), argnums=(0, 1)), (None, 0, None)
    )
    gxs, gws = jax.jit(grads)(x, ws, cot)
    for i in range(ws.shape[0]):
        want_y, want_gx, want_gw = _dense_reference(packed, ws[i], x, cot)
        np.testing.assert_allclose(ys[i], want_y, **TOL)
        np.testing.assert_allclose(gxs[i], want_gx, **TOL)
        np.testing.assert_allclose(gws[i], want_gw, **TOL)


@pytest.mark.parametrize("fmt", ["ell", "csr"])
def test_packing_weighted_symmetric_graphs_keeps_one_layout_and_pairs_reverse_edges(fmt):
    packed = pack(_ones_graph(SYM_S, SYM_R), format=fmt)
    assert packed.symmetric and packed.transpose_layout is None
    assert _scaled(SYM_S, SYM_R, fmt).symmetric
    # Each edge (ELL) or layout entry (CSR) reads the weight of an edge the other way.
    rows = np.arange(SYM_S.shape[0]) if fmt == "ell" else np.asarray(packed.layout.edge_ids)
    reverse = np.asarray(packed.reverse_edges)
    np.testing.assert_array_equal(np.sort(reverse), np.arange(SYM_S.shape[0]))
    np.testing.assert_array_equal(SYM_S[reverse], SYM_R[rows])
    np.testing.assert_array_equal(SYM_R[reverse], SYM_S[rows])
    # Unweighted (ones whatever happens) and directed graphs need no pairing.
    assert pack(sg.Graph(SYM_S, SYM_R, None, NODES), format=fmt).reverse_edges is None
    directed = pack(_ones_graph(DIR_S, DIR_R), format=fmt)
    assert not directed.symmetric and directed.reverse_edges is None
    # Symmetric only with duplicates summed: a transpose layout instead.
    by_sums = REWEIGHT_PACKINGS[f"{fmt}_symmetric_by_sums"]()
    assert by_sums.transpose_layout is not None and by_sums.reverse_edges is None

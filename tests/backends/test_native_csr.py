"""The native CPU CSR kernel (sparsegcn.backends.native) against scipy and the
dense reference: awkward graphs, every feature width up to two column tiles
and a tail, both builds of the hot loop, determinism, the fallback to XLA's
kernel when the library is missing, and compiling once under jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from graphs import GRAPH_CASES, random_graph

import sparsegcn as sg
from sparsegcn.backends import CSR_KERNELS, Segment, csr_matmul, native, pack, propagate

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
NATIVE_CALL = "sparsegcn_csr_spmm"
XLA_CALL = "cpu_csr_sparse_dense"
TOL = dict(rtol=2e-5, atol=2e-5)

needs_library = pytest.mark.skipif(
    not native.ffi_available(),
    reason=f"native CSR kernel unavailable: {native.unavailable_reason()}",
)
needs_cpu = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="the native kernel is a CPU kernel"
)


def reference_matrix(g: sg.Graph) -> np.ndarray:
    """``A[r, s] = sum of w`` in float64, built by hand from the edge list."""
    a = np.zeros((g.num_nodes, g.num_nodes))
    w = np.ones(g.num_edges) if g.weights is None else np.asarray(g.weights, np.float64)
    np.add.at(a, (np.asarray(g.receivers), np.asarray(g.senders)), w)
    return a


def random_csr(rows: int, cols: int, density: float, seed: int) -> sp.csr_array:
    """A float32 CSR matrix with some empty rows and unsorted, repeated columns."""
    rng = np.random.default_rng(seed)
    nnz = int(rows * cols * density)
    r = np.sort(rng.integers(0, rows, nnz))
    c = rng.integers(0, cols, nnz)
    v = rng.uniform(-1.0, 1.0, nnz).astype(np.float32)
    indptr = np.zeros(rows + 1, np.int32)
    np.cumsum(np.bincount(r, minlength=rows), out=indptr[1:])
    return sp.csr_array((v, c.astype(np.int32), indptr), shape=(rows, cols))


def csr_arrays(a: sp.csr_array):
    return (
        jnp.asarray(a.indptr, jnp.int32),
        jnp.asarray(a.indices, jnp.int32),
        jnp.asarray(a.data, jnp.float32),
    )


def hlo_of(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


@needs_library
@needs_cpu
@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
def test_forward_and_gradient_match_dense(case):
    g = GRAPH_CASES[case]()
    packed = pack(g, format="csr")
    backend = Segment(csr_kernel="native")
    x = jax.random.normal(jax.random.key(0), (g.num_nodes, 5), jnp.float32)
    a = reference_matrix(g)
    y = jax.jit(lambda p, x: propagate(p, x, backend=backend))(packed, x)
    np.testing.assert_allclose(y, a @ np.asarray(x, np.float64), **TOL)

    def loss(x):
        return jnp.sum(jnp.square(propagate(packed, x, backend=backend)))

    x_bar = jax.jit(jax.grad(loss))(x)
    expected = 2 * a.T @ (a @ np.asarray(x, np.float64))
    np.testing.assert_allclose(x_bar, expected, **TOL)
    if g.num_edges:
        text = hlo_of(jax.grad(loss), x)
        assert text.count(NATIVE_CALL) == 2  # forward, and the gradient on A^T
        assert XLA_CALL not in text


@needs_library
@needs_cpu
def test_weight_gradient_and_run_time_weights_use_the_kernel():
    g = random_graph(40, 160, seed=4)
    packed = pack(g, format="csr")
    x = jax.random.normal(jax.random.key(1), (40, 6), jnp.float32)
    w = jnp.asarray(g.weights)

    def loss(w, x):
        return jnp.sum(jnp.square(packed.product(x, edge_weight=w)))

    w_bar, x_bar = jax.jit(jax.grad(loss, argnums=(0, 1)))(w, x)
    # Dense oracle of the same loss, in float64 by hand.
    a = reference_matrix(g)
    y = a @ np.asarray(x, np.float64)
    s, r = np.asarray(g.senders), np.asarray(g.receivers)
    np.testing.assert_allclose(x_bar, 2 * a.T @ y, **TOL)
    np.testing.assert_allclose(
        w_bar, np.sum(2 * y[r] * np.asarray(x, np.float64)[s], axis=1), rtol=1e-4, atol=1e-4
    )
    assert hlo_of(jax.grad(loss, argnums=(0, 1)), w, x).count(NATIVE_CALL) == 2


@needs_library
@needs_cpu
@pytest.mark.parametrize("isa", native.ISAS)
def test_every_width_up_to_130_matches_scipy(isa):
    """F = 1..130: one, two and part of a third 64-wide column tile, every
    vector remainder and every scalar tail; one program holds all widths."""
    a = random_csr(37, 53, 0.15, seed=5)
    indptr, columns, data = csr_arrays(a)
    rng = np.random.default_rng(6)
    xs = tuple(rng.standard_normal((53, f)).astype(np.float32) for f in range(1, 131))

    def products(xs):
        return tuple(native.csr_spmm(indptr, columns, data, x, isa=isa) for x in xs)

    for x, y in zip(xs, jax.jit(products)(xs), strict=True):
        np.testing.assert_allclose(y, a @ x.astype(np.float64), rtol=1e-5, atol=1e-5)


@needs_library
@needs_cpu
@pytest.mark.parametrize("isa", native.ISAS)
def test_both_sides_of_the_prefetch_threshold_match_scipy(isa):
    """An ``x`` that stays in the cache is read without prefetching its rows,
    a larger one with: the same sums either way, including the widths whose
    rows take a tail or a partial tile."""
    resident = native.kernel_info()["resident_bytes"]
    assert resident is not None and resident > 0
    rng = np.random.default_rng(7)
    for width in (16, 37, 64):
        for rows in (max(resident // (4 * width) - 1, 1), resident // (4 * width) + 50):
            a = random_csr(300, rows, min(0.05, 2000 / (300 * rows)), seed=rows + width)
            x = rng.standard_normal((rows, width)).astype(np.float32)
            y = native.csr_spmm(*csr_arrays(a), jnp.asarray(x), isa=isa)
            np.testing.assert_allclose(y, a @ x.astype(np.float64), rtol=1e-5, atol=1e-5)


@needs_library
@needs_cpu
def test_rows_without_entries_and_a_matrix_without_entries():
    x = jnp.ones((4, 9), jnp.float32)
    empty = sp.csr_array(
        (np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(6, np.int32)), shape=(5, 4)
    )
    y = native.csr_spmm(*csr_arrays(empty), x)
    assert y.shape == (5, 9)
    np.testing.assert_array_equal(y, np.zeros((5, 9), np.float32))


@needs_library
@needs_cpu
def test_bitwise_deterministic_across_calls_threads_and_builds():
    """Each row is summed by one thread in entry order: no thread count or
    chunking changes a bit, and repeated calls agree exactly."""
    a = random_csr(3000, 3000, 0.004, seed=7)
    indptr, columns, data = csr_arrays(a)
    x = jax.random.normal(jax.random.key(2), (3000, 72), jnp.float32)
    results = {
        threads: jax.jit(lambda x, t=threads: native.csr_spmm(indptr, columns, data, x, threads=t))
        for threads in (0, 1, 2, 3, 7)
    }
    first = np.asarray(results[0](x))
    for threads, fn in results.items():
        for _ in range(2):
            np.testing.assert_array_equal(np.asarray(fn(x)), first, err_msg=f"threads={threads}")
    np.testing.assert_allclose(first, a @ np.asarray(x, np.float64), rtol=1e-5, atol=1e-5)

    # Two independent products in one program may run at once: same bits.
    def two(x):
        return native.csr_spmm(indptr, columns, data, x), native.csr_spmm(
            indptr, columns, data, x[::-1]
        )

    both = jax.jit(two)(x)
    np.testing.assert_array_equal(np.asarray(both[0]), first)
    np.testing.assert_array_equal(np.asarray(both[1]), np.asarray(results[0](x[::-1])))


@needs_library
@needs_cpu
def test_kernel_choices_agree_and_auto_picks_native():
    g = random_graph(60, 300, seed=8)
    packed = pack(g, format="csr")
    x = jax.random.normal(jax.random.key(3), (60, 16), jnp.float32)
    outs = {}
    for kernel in CSR_KERNELS:
        fn = lambda p, x, k=kernel: propagate(p, x, backend=Segment(csr_kernel=k))  # noqa: E731
        outs[kernel] = np.asarray(jax.jit(fn)(packed, x))
        text = hlo_of(fn, packed, x)
        assert (NATIVE_CALL in text) == (kernel != "xla"), kernel
        assert (XLA_CALL in text) == (kernel == "xla"), kernel
    np.testing.assert_allclose(outs["native"], outs["xla"], **TOL)
    np.testing.assert_array_equal(outs["native"], outs["auto"])
    # The default product of a CSR-packed graph is the native one.
    assert NATIVE_CALL in hlo_of(lambda p, x: propagate(p, x), packed, x)


@needs_library
@needs_cpu
def test_compiles_once_in_a_loop():
    g = random_graph(50, 200, seed=9)
    packed = pack(g, format="csr")
    step = jax.jit(lambda p, x: x + 0.1 * propagate(p, x))
    x = jnp.ones((50, 8), jnp.float32)
    x = step(packed, x)  # the first call compiles
    events = []

    def listener(event, duration, **kwargs):
        if event == COMPILE_EVENT:
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for _ in range(5):
            x = step(packed, x)
        jax.block_until_ready(x)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert events == []
    assert step._cache_size() == 1


@needs_library
@needs_cpu
def test_vmap_over_seeds_is_one_kernel_call():
    g = random_graph(30, 90, seed=10)
    packed = pack(g, format="csr")
    xs = jax.random.normal(jax.random.key(4), (3, 30, 5), jnp.float32)
    fn = jax.vmap(lambda x: propagate(packed, x))
    a = reference_matrix(g)
    for i, y in enumerate(jax.jit(fn)(xs)):
        np.testing.assert_allclose(y, a @ np.asarray(xs[i], np.float64), **TOL)
    assert hlo_of(fn, xs).count(NATIVE_CALL) == 1


def test_without_the_library_auto_falls_back_and_native_refuses(monkeypatch):
    missing = native._Library(None, "", 0, "the native CSR kernel was not built (test)")
    monkeypatch.setattr(native, "_load", lambda: missing)
    assert not native.ffi_available()
    assert native.kernel_info()["reason"] == missing.error
    g = random_graph(20, 60, seed=11)
    packed = pack(g, format="csr")
    x = jax.random.normal(jax.random.key(5), (20, 4), jnp.float32)
    fn = lambda p, x: propagate(p, x)  # noqa: E731
    text = hlo_of(fn, packed, x)
    assert NATIVE_CALL not in text
    np.testing.assert_allclose(
        jax.jit(fn)(packed, x), reference_matrix(g) @ np.asarray(x, np.float64), **TOL
    )
    with pytest.raises(ValueError, match=r"csr_kernel='native' cannot run: .*not built"):
        Segment(csr_kernel="native")
    with pytest.raises(RuntimeError, match="not built"):
        native.csr_spmm(*csr_arrays(random_csr(3, 3, 0.5, seed=0)), jnp.ones((3, 2)))


def test_a_missing_library_is_reported_with_where_it_was_looked_for(monkeypatch):
    monkeypatch.setattr(native, "library_path", lambda: None)
    library = native._load.__wrapped__()
    assert library.error is not None
    assert "not built" in library.error and "pip install" in library.error


def test_bad_choices_raise_before_tracing():
    with pytest.raises(ValueError, match=r"csr_kernel must be one of .* got 'fast'"):
        Segment(csr_kernel="fast")
    g = random_graph(10, 20, seed=12)
    layout = pack(g, format="csr").layout
    with pytest.raises(ValueError, match="csr_kernel must be one of"):
        csr_matmul(layout, jnp.ones((10, 2)), 10, kernel="cuda")
    with pytest.raises(ValueError, match="isa must be one of"):
        native.csr_spmm(*csr_arrays(random_csr(3, 3, 0.5, seed=0)), jnp.ones((3, 2)), isa="avx9")
    with pytest.raises(ValueError, match="x as float32 with 2 dimension"):
        native.csr_spmm(*csr_arrays(random_csr(3, 3, 0.5, seed=0)), jnp.ones((3,)))


@needs_library
@needs_cpu
def test_out_of_range_column_is_an_error_not_a_crash():
    indptr = jnp.asarray([0, 1, 2], jnp.int32)
    columns = jnp.asarray([0, 5], jnp.int32)
    data = jnp.ones(2, jnp.float32)
    with pytest.raises(Exception, match=r"column id is outside \[0, 3\)"):
        jax.block_until_ready(native.csr_spmm(indptr, columns, data, jnp.ones((3, 4))))

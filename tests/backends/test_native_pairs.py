"""The native pair-score kernels (sparsegcn.backends.native.pair_scores and its
gradient) behind the inner-product and DistMult link decoders, against a
float64 reference built by hand with numpy: repeated pairs, self-pairs, widths
with and without a vector tail, no pairs at all, both builds of the loop,
vmapped seeds, a bad node id, and the program's choice of kernel."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sparsegcn.backends import native
from sparsegcn.nn.gae import decode_pairs, pair_scores, softplus

needs_library = pytest.mark.skipif(
    not native.ffi_available() or jax.default_backend() != "cpu",
    reason=f"native kernel unavailable: {native.unavailable_reason()}",
)
TOL = dict(rtol=1e-5, atol=1e-5)


def case(n: int, dim: int, count: int, seed: int):
    """``z [n, dim]``, ``pairs [count, 2]`` with a self-pair and a repeat, ``g [count]``."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, dim)).astype(np.float32)
    pairs = rng.integers(0, n, size=(count, 2)).astype(np.int32)
    if count >= 3:
        pairs[0] = (n - 1, n - 1)  # u == v: both halves of the gradient land on one row
        pairs[2] = pairs[1]  # the same pair twice
    g = rng.normal(size=count).astype(np.float32)
    relation = rng.normal(size=dim).astype(np.float32)
    return z, pairs, g, relation


def reference(z, pairs, g, relation):
    """Scores, ``∂z`` and ``∂r`` of ``Σ g s`` in float64, pair by pair."""
    z = z.astype(np.float64)
    r = np.ones(z.shape[1]) if relation is None else relation.astype(np.float64)
    u, v = pairs[:, 0], pairs[:, 1]
    scores = np.sum(z[u] * r * z[v], axis=1)
    dz = np.zeros_like(z)
    np.add.at(dz, u, g[:, None] * r * z[v])
    np.add.at(dz, v, g[:, None] * r * z[u])
    dr = np.sum(g[:, None] * z[u] * z[v], axis=0)
    return scores, dz, dr


@needs_library
@pytest.mark.parametrize("dim", [1, 3, 8, 16, 19])
@pytest.mark.parametrize("weighted", [False, True], ids=["inner", "distmult"])
@pytest.mark.parametrize("isa", native.ISAS)
def test_scores_and_gradient_match_the_float64_reference(dim, weighted, isa):
    z, pairs, g, relation = case(40, dim, 300, seed=dim)
    rel = relation if weighted else None
    want_s, want_dz, want_dr = reference(z, pairs, g, rel)
    r = None if rel is None else jnp.asarray(rel)
    got_s = native.pair_scores(jnp.asarray(z), jnp.asarray(pairs), r, isa=isa)
    got_dz, got_dr = native.pair_scores_grad(
        jnp.asarray(z), jnp.asarray(pairs), r, jnp.asarray(g), isa=isa
    )
    np.testing.assert_allclose(got_s, want_s, **TOL)
    np.testing.assert_allclose(got_dz, want_dz, **TOL)
    np.testing.assert_allclose(got_dr, want_dr if weighted else np.zeros(dim), **TOL)


@needs_library
@pytest.mark.parametrize("weighted", [False, True], ids=["inner", "distmult"])
def test_autodiff_through_the_decoder_matches_xla(weighted):
    """``pair_scores`` on the native kernel (custom VJP) and on XLA's gathers
    (autodiff): the same values and gradients, pairs of any leading shape."""
    z, pairs, g, relation = case(30, 16, 2 * 3 * 50, seed=3)
    pairs = jnp.asarray(pairs.reshape(50, 3, 2, 2))  # [P, 3, 2, 2], as the trainer stacks
    g = jnp.asarray(g.reshape(50, 3, 2))

    def objective(z, r, kernel):
        return jnp.sum(g * pair_scores(z, pairs, r if weighted else None, kernel=kernel))

    grad = jax.jit(jax.value_and_grad(objective, argnums=(0, 1)), static_argnums=2)
    (v_native, (dz_native, dr_native)) = grad(jnp.asarray(z), jnp.asarray(relation), "auto")
    (v_xla, (dz_xla, dr_xla)) = grad(jnp.asarray(z), jnp.asarray(relation), "xla")
    np.testing.assert_allclose(v_native, v_xla, **TOL)
    np.testing.assert_allclose(dz_native, dz_xla, **TOL)
    np.testing.assert_allclose(dr_native, dr_xla, **TOL)


@needs_library
def test_no_pairs_no_nodes_and_no_columns():
    empty = jnp.zeros((0, 2), jnp.int32)
    z = jnp.ones((5, 4))
    assert pair_scores(z, empty).shape == (0,)
    np.testing.assert_array_equal(jax.grad(lambda z: pair_scores(z, empty).sum())(z), 0.0)
    assert pair_scores(jnp.ones((0, 4)), empty).shape == (0,)
    pairs = jnp.array([[0, 1], [2, 2]], jnp.int32)
    np.testing.assert_array_equal(pair_scores(jnp.ones((5, 0)), pairs), [0.0, 0.0])


@needs_library
def test_vmapped_seeds_equal_each_seed_alone():
    z, pairs, _, _ = case(25, 16, 64, seed=4)
    zs = jnp.stack([jnp.asarray(z), 2.0 * jnp.asarray(z), -jnp.asarray(z)])
    batched = jax.jit(jax.vmap(lambda z: pair_scores(z, jnp.asarray(pairs))))(zs)
    for k in range(3):
        np.testing.assert_array_equal(batched[k], pair_scores(zs[k], jnp.asarray(pairs)))


@needs_library
def test_vmapped_gradients_equal_each_seed_alone():
    """Batched ``z``, pairs and relation (the kernels loop over the batch axis)."""
    cases = [case(20, 12, 40, seed=10 + k) for k in range(3)]
    zs, pairs, gs, rels = (jnp.asarray(np.stack(part)) for part in zip(*cases, strict=True))

    def grads(z, pairs, g, r):
        loss = lambda z, r: jnp.sum(g * pair_scores(z, pairs, r))  # noqa: E731
        return jax.grad(loss, argnums=(0, 1))(z, r)

    dz, dr = jax.jit(jax.vmap(grads))(zs, pairs, gs, rels)
    for k in range(3):
        want_dz, want_dr = grads(zs[k], pairs[k], gs[k], rels[k])
        np.testing.assert_array_equal(dz[k], want_dz)
        np.testing.assert_array_equal(dr[k], want_dr)
    # One z shared by every element (read in place): each element's gradient.
    dz, dr = jax.jit(jax.vmap(grads, in_axes=(None, 0, 0, None)))(zs[0], pairs, gs, rels[0])
    for k in range(3):
        want_dz, want_dr = grads(zs[0], pairs[k], gs[k], rels[0])
        np.testing.assert_array_equal(dz[k], want_dz)
        np.testing.assert_array_equal(dr[k], want_dr)


@needs_library
def test_the_same_bits_every_call():
    z, pairs, g, _ = case(60, 16, 500, seed=5)
    a = native.pair_scores_grad(jnp.asarray(z), jnp.asarray(pairs), None, jnp.asarray(g))[0]
    b = native.pair_scores_grad(jnp.asarray(z), jnp.asarray(pairs), None, jnp.asarray(g))[0]
    np.testing.assert_array_equal(a, b)


@needs_library
def test_a_node_id_out_of_range_fails_and_names_the_range():
    z = jnp.ones((4, 8))
    with pytest.raises(Exception, match=r"outside \[0, 4\)"):
        jax.block_until_ready(native.pair_scores(z, jnp.array([[0, 4]], jnp.int32)))
    with pytest.raises(Exception, match=r"outside \[0, 4\)"):
        jax.block_until_ready(
            native.pair_scores_grad(z, jnp.array([[-1, 0]], jnp.int32), None, jnp.ones((1,)))
        )


def test_bad_shapes_and_dtypes_fail_before_tracing():
    z = jnp.ones((4, 8))
    with pytest.raises(ValueError, match="pairs as int32"):
        native.pair_scores(z, jnp.zeros((3, 2), jnp.float32))
    with pytest.raises(ValueError, match=r"\[P, 2\]"):
        native.pair_scores(z, jnp.zeros((3, 3), jnp.int32))
    with pytest.raises(ValueError, match="relation"):
        native.pair_scores(z, jnp.zeros((3, 2), jnp.int32), jnp.ones((5,)))
    with pytest.raises(ValueError, match="kernel"):
        pair_scores(z, jnp.zeros((3, 2), jnp.int32), kernel="gpu")


@needs_library
def test_the_program_runs_the_kernel_it_was_asked_for():
    z = jnp.ones((10, 16))
    pairs = jnp.zeros((7, 2), jnp.int32)

    def hlo(kernel):
        loss = lambda z: jnp.sum(decode_pairs("inner", {}, z, pairs, kernel=kernel))  # noqa: E731
        return jax.jit(jax.grad(loss)).lower(z).compile().as_text()

    auto = hlo("auto")
    assert "sparsegcn_pair_scores" in auto and "sparsegcn_pair_scores_grad" in auto
    assert "sparsegcn_pair_scores" not in hlo("xla")


def test_softplus_matches_float64_and_its_derivative_is_the_sigmoid():
    x = np.concatenate([np.linspace(-60, 60, 2001), [0.0, -1e-7, 1e-7, 88.0, -88.0, 1e30]])
    x = x.astype(np.float32)
    want = np.logaddexp(0.0, x.astype(np.float64))
    np.testing.assert_allclose(softplus(jnp.asarray(x)), want, rtol=2e-6, atol=1e-30)
    slope = jax.vmap(jax.grad(softplus))(jnp.asarray(x))
    sigmoid = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(slope, sigmoid, rtol=1e-5, atol=1e-30)  # XLA flushes denormals
    assert float(jax.grad(softplus)(0.0)) == 0.5
    edge = softplus(jnp.array([-np.inf, np.inf], jnp.float32))
    np.testing.assert_array_equal(edge, [0.0, np.inf])


@needs_library
def test_the_full_batch_link_step_scores_on_the_kernels_and_the_evaluation_does_not():
    """Where the trainers use the kernels: the full-batch step's loss and
    gradient (one device); the evaluation keeps XLA's gathers."""
    from link_graphs import communities, data_of

    from sparsegcn.nn.registry import create_model
    from sparsegcn.train.links import link_loss, score_set

    graph, x = communities(n=24, seed=2)
    data = data_of(graph, x, 0)
    model = create_model("gae", 4, 4, hidden=8, layers=2, dropout=0.0, recon="sampled")
    params = model.init(jax.random.key(0))

    def loss(p):
        return link_loss(model, p, data, jax.random.key(1), 3)

    step = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
    assert "sparsegcn_pair_scores" in step and "sparsegcn_pair_scores_grad" in step
    z = model.embed(params, data.graph, data.features)
    scoring = jax.jit(lambda z: score_set(model, params, z, data.test)).lower(z)
    assert "sparsegcn_pair_scores" not in scoring.compile().as_text()

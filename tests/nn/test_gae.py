"""GAE and VGAE (sparsegcn/nn/gae.py): decoders, the full and sampled reconstruction
losses and the KL term against NumPy references, forward and gradient."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sparsegcn as sg
from sparsegcn.nn.gae import (
    decode_dense,
    decode_pairs,
    full_reconstruction_loss,
    graph_autoencoder,
    init_decoder,
    kl_divergence,
    pair_scores,
    sampled_reconstruction_loss,
)
from sparsegcn.nn.registry import create_model

RNG = np.random.default_rng(0)
Z = RNG.normal(size=(7, 4)).astype(np.float32)
PAIRS = np.array([[0, 1], [2, 2], [6, 3], [1, 0], [5, 4]], np.int32)


def softplus(x):
    return np.logaddexp(0.0, x)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_decode(name, params, z, pairs):
    zu, zv = z[pairs[:, 0]].astype(np.float64), z[pairs[:, 1]].astype(np.float64)
    if name == "inner":
        return (zu * zv).sum(1)
    if name == "distmult":
        return (zu * np.asarray(params["relation"]) * zv).sum(1)
    hidden = params["hidden"]
    h = np.maximum((zu * zv) @ np.asarray(hidden["w"]) + np.asarray(hidden["b"]), 0)
    return (h @ np.asarray(params["out"]["w"]) + np.asarray(params["out"]["b"]))[:, 0]


@pytest.mark.parametrize("name", ["inner", "distmult", "hadamard"])
def test_decoders_equal_numpy_forward_and_gradient(name):
    params = init_decoder(name, jax.random.key(1), 4)
    if name == "distmult":
        params = {"relation": jnp.asarray(RNG.normal(size=4).astype(np.float32))}
    got = jax.jit(lambda p, z: decode_pairs(name, p, z, PAIRS))(params, Z)
    np.testing.assert_allclose(got, numpy_decode(name, params, Z, PAIRS), rtol=1e-5, atol=1e-5)
    if name != "hadamard":
        dense = np.asarray(decode_dense(name, params, Z))
        every = np.stack(np.meshgrid(np.arange(7), np.arange(7), indexing="ij"), -1).reshape(-1, 2)
        np.testing.assert_allclose(
            dense.ravel(), numpy_decode(name, params, Z, every), rtol=1e-5, atol=1e-5
        )
    # Gradient of sum(w * s) with respect to z, against central differences in float64.
    w = RNG.normal(size=len(PAIRS))
    grad = np.asarray(jax.grad(lambda z: jnp.sum(w * decode_pairs(name, params, z, PAIRS)))(Z))
    z64, eps = Z.astype(np.float64), 1e-6
    numeric = np.zeros_like(z64)
    for idx in np.ndindex(*z64.shape):
        up, down = z64.copy(), z64.copy()
        up[idx] += eps
        down[idx] -= eps
        numeric[idx] = (
            w @ numpy_decode(name, params, up, PAIRS) - w @ numpy_decode(name, params, down, PAIRS)
        ) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=1e-3, atol=1e-4)


def test_dense_decoder_refuses_hadamard():
    with pytest.raises(ValueError, match="decoder 'hadamard' has no dense form"):
        decode_dense("hadamard", {}, Z)


def test_full_reconstruction_loss_is_kipf_and_wellings_weighted_cross_entropy():
    n = 6
    logits = RNG.normal(size=(n, n)).astype(np.float32) * 3
    edges = {(0, 1), (1, 0), (2, 3), (3, 2), (4, 5), (5, 4), (1, 2), (2, 1)}
    label = np.eye(n)
    for a, b in edges:
        label[a, b] = 1
    e = len(edges)
    pos_weight, norm = (n * n - e) / e, n * n / (2.0 * (n * n - e))
    positives = np.argwhere(label == 1).astype(np.int32)
    # tf.nn.weighted_cross_entropy_with_logits, averaged, times norm (gae/optimizer.py).
    x = logits.astype(np.float64)
    per_entry = pos_weight * label * softplus(-x) + (1 - label) * softplus(x)
    want = norm * per_entry.mean()
    loss = jax.jit(full_reconstruction_loss)
    got = loss(jnp.asarray(logits), positives, jnp.float32(pos_weight), jnp.float32(norm))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    grad = jax.grad(full_reconstruction_loss)(
        jnp.asarray(logits), positives, jnp.float32(pos_weight), jnp.float32(norm)
    )
    analytic = norm * (-pos_weight * label * sigmoid(-x) + (1 - label) * sigmoid(x)) / (n * n)
    np.testing.assert_allclose(grad, analytic, rtol=1e-4, atol=1e-7)


def test_sampled_reconstruction_loss_equals_numpy():
    pos, neg = RNG.normal(size=9).astype(np.float32), RNG.normal(size=5).astype(np.float32)
    want = softplus(-pos.astype(np.float64)).mean() + softplus(neg.astype(np.float64)).mean()
    np.testing.assert_allclose(sampled_reconstruction_loss(pos, neg), want, rtol=1e-6)


def test_kl_divergence_equals_the_hand_computed_gaussian_kl():
    mu = RNG.normal(size=(5, 3))
    logstd = RNG.normal(size=(5, 3)) * 0.3
    sigma2 = np.exp(2 * logstd)
    # KL(N(mu, sigma^2) || N(0, 1)) = 0.5 (sigma^2 + mu^2 - 1 - log sigma^2), per dimension.
    want = (0.5 * (sigma2 + mu**2 - 1 - np.log(sigma2))).sum(1).mean()
    got = kl_divergence(jnp.asarray(mu, jnp.float32), jnp.asarray(logstd, jnp.float32))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert float(kl_divergence(jnp.zeros((4, 2)), jnp.zeros((4, 2)))) == 0.0


def tiny_graph():
    return sg.gcn_norm(sg.Graph(np.array([0, 1, 2, 3]), np.array([1, 0, 3, 2]), None, 5))


def test_vgae_reparameterises_with_the_explicit_key_and_embeds_the_mean():
    model = create_model("vgae", 3, 2, hidden=4, layers=2, dropout=0.0, embedding_dim=2)
    params = model.init(jax.random.key(0))
    graph, x = tiny_graph(), jnp.asarray(RNG.normal(size=(5, 3)).astype(np.float32))
    out = model.apply(params, graph, x)  # inference: mu
    inner = create_model("gcn", 3, 4, hidden=4, layers=2, dropout=0.0)
    mu_logstd = inner.apply(params["encoder"], graph, x)
    mu, logstd = np.asarray(mu_logstd[:, :2]), np.asarray(mu_logstd[:, 2:])
    np.testing.assert_allclose(out, mu, rtol=1e-6)
    np.testing.assert_allclose(model.embed(params, graph, x), mu, rtol=1e-6)
    key = jax.random.key(5)
    z, kl = model.encode(params, graph, x, key=key, training=True)
    noise_key = jax.random.split(key)[1]
    eps = np.asarray(jax.random.normal(noise_key, (5, 2)))
    np.testing.assert_allclose(z, mu + eps * np.exp(logstd), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kl, kl_divergence(jnp.asarray(mu), jnp.asarray(logstd)), rtol=1e-6)
    z2, _ = model.encode(params, graph, x, key=jax.random.key(6), training=True)
    assert not np.allclose(z, z2)
    with pytest.raises(ValueError, match="needs an explicit PRNG key"):
        model.encode(params, graph, x, training=True)
    gae = create_model("gae", 3, 2, hidden=4, layers=2, dropout=0.0, embedding_dim=2)
    assert float(gae.encode(gae.init(jax.random.key(0)), graph, x)[1]) == 0.0


def test_link_models_refuse_unknown_parts_with_the_value():
    with pytest.raises(ValueError, match=r"decoder must be one of .* got 'bilinear'"):
        create_model("gae", 3, 2, hidden=4, layers=2, dropout=0.0, decoder="bilinear")
    with pytest.raises(ValueError, match=r"encoder must be one of .* got 'sgc'"):
        create_model("gae", 3, 2, hidden=4, layers=2, dropout=0.0, encoder="sgc")
    with pytest.raises(ValueError, match="recon='full' scores all N² pairs"):
        create_model("gae", 3, 2, hidden=4, layers=2, dropout=0.0, decoder="hadamard")


def test_graph_autoencoder_refuses_bad_embedding_dims_and_encoder_widths():
    encoder = create_model("gcn", 3, 4, hidden=4, layers=2, dropout=0.0)
    with pytest.raises(ValueError, match=r"^embedding_dim must be >= 1, got 0$"):
        graph_autoencoder(encoder, 0)
    with pytest.raises(ValueError, match=r"^embedding_dim must be >= 1, got -3$"):
        graph_autoencoder(encoder, -3)
    with pytest.raises(TypeError, match=r"^embedding_dim must be an integer >= 1, got 2.5 \(float"):
        graph_autoencoder(encoder, 2.5)
    # Before: accepted; the inner product then decoded all 4 columns of a "2-wide" Z.
    with pytest.raises(
        ValueError, match=r"embedding_dim=2 needs an encoder with 2 outputs, got 4 \(gcn\)"
    ):
        graph_autoencoder(encoder, 2)
    # VGAE: [mu, log sigma] is 2D wide. Before: D=4 from 4 outputs gave an empty log sigma.
    with pytest.raises(
        ValueError,
        match=r"variational embedding_dim=4 needs an encoder with 2 \* 4 = 8 outputs "
        r"\(\[mu, log sigma\]\), got 4 \(gcn\)",
    ):
        graph_autoencoder(encoder, 4, variational=True)
    five = create_model("gcn", 3, 5, hidden=4, layers=2, dropout=0.0)
    with pytest.raises(ValueError, match=r"2 \* 2 = 4 outputs .* got 5"):
        graph_autoencoder(five, 2, variational=True)
    assert graph_autoencoder(encoder, 4).config["num_classes"] == 4
    assert graph_autoencoder(encoder, np.int64(2), variational=True).variational


@pytest.mark.parametrize("kernel", ["auto", "xla"])
def test_pair_scores_refuse_node_ids_outside_z_when_concrete(kernel):
    z = jnp.arange(12, dtype=jnp.float32).reshape(4, 3)
    np.testing.assert_array_equal(
        pair_scores(z, jnp.array([[0, 1], [2, 3]], jnp.int32), kernel=kernel), [14.0, 212.0]
    )
    # Before, kernel="xla" (the default on GPU) clamped id 10 to row 3: 0*9 + 1*10 + 2*11 = 32.
    with pytest.raises(ValueError, match=r"pairs\[0, 1\] = 10 is not a node id in \[0, 4\)"):
        pair_scores(z, jnp.array([[0, 10]], jnp.int32), kernel=kernel)
    with pytest.raises(ValueError, match=r"pairs\[1, 0\] = -1 is not a node id in \[0, 4\)"):
        pair_scores(z, np.array([[0, 1], [-1, 2]], np.int32), kernel=kernel)
    with pytest.raises(ValueError, match=r"pairs\[0, 1\] = 4 is not a node id in \[0, 4\)"):
        decode_pairs("distmult", {"relation": jnp.ones(3)}, z, np.array([[0, 4]]), kernel=kernel)
    params = init_decoder("hadamard", jax.random.key(0), 3)
    with pytest.raises(ValueError, match=r"pairs\[0, 0, 1\] = 7 is not a node id in \[0, 4\)"):
        decode_pairs("hadamard", params, z, np.array([[[0, 7]]]))
    # Traced ids cannot be checked: they are trusted (and XLA's gather clamps them).
    traced = jax.jit(lambda p: pair_scores(z, p, kernel="xla"))(jnp.array([[0, 10]], jnp.int32))
    np.testing.assert_array_equal(traced, [32.0])

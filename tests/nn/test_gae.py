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
    init_decoder,
    kl_divergence,
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

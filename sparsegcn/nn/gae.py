"""Graph auto-encoders: an encoder from the model registry, a pair decoder, and
their losses (GAE and VGAE, Kipf & Welling 2016).

A link model is a :class:`LinkModel`: the :class:`~sparsegcn.nn.Model` fields
(``init``, ``apply`` giving the node embeddings ``Z``, ``embed``, ``name``,
``config``) plus ``encode`` (``Z`` and the KL term), ``decode`` (a logit per
node pair) and ``decode_all`` (the ``[N, N]`` logits, for the paper's full
reconstruction loss). Decoders (:data:`DECODERS`):

- ``"inner"``: :math:`s_{uv} = z_u^\\top z_v` (Kipf & Welling);
- ``"distmult"``: :math:`s_{uv} = z_u^\\top \\mathrm{diag}(r)\\, z_v`, one learned
  relation ``r`` (Yang et al. 2015), initialised to ones;
- ``"hadamard"``: :math:`s_{uv} = \\mathrm{MLP}(z_u \\odot z_v)`, a hidden layer of
  width ``D`` and ReLU (the OGB link baselines' ``LinkPredictor``).

References:
  Kipf & Welling, *Variational Graph Auto-Encoders*, NIPS Workshop on
  Bayesian Deep Learning, 2016. https://arxiv.org/abs/1611.07308
  Yang et al., *Embedding Entities and Relations for Learning and Inference
  in Knowledge Bases*, ICLR 2015. https://arxiv.org/abs/1412.6575
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn._checks import check_flag, check_hyperparameter, is_traced
from sparsegcn.backends import native
from sparsegcn.nn.initializers import linear_params
from sparsegcn.nn.model import Model

DECODERS = ("inner", "hadamard", "distmult")
"""Pair decoders by name (see the module docstring)."""

FULL_DECODERS = ("inner", "distmult")
"""Decoders whose ``[N, N]`` logits are one matrix product (the full loss takes them)."""

RECONSTRUCTIONS = ("full", "sampled")
"""Reconstruction losses: every ``N²`` pair weighted (the paper's), or the
train edges against as many uniform negatives drawn afresh each epoch (PyG's)."""

NEGATIVES = ("pairs", "targets")
"""Training negatives of ``recon="sampled"``: uniform node pairs (PyG's
``negative_sampling``), or each positive's source with a uniform target
(DGL's ``negative_sampler.Uniform``); see
:func:`sparsegcn.train.links.draw_negatives`."""

LOGSTD_MAX = 10.0
"""VGAE clamps ``log σ`` from above, as PyG does, so ``exp`` cannot overflow."""


class LinkModel(NamedTuple):
    """A link-prediction model as pure functions.

    Attributes:
      init: ``init(key) -> {"encoder": ..., "decoder": ...}``.
      apply: ``apply(params, graph, x, *, key=None, training=False) -> Z [N, D]``
        (VGAE: ``μ + ε σ`` when training, ``μ`` otherwise).
      embed: ``embed(params, graph, x) -> Z [N, D]``, inference mode.
      name, config: as :class:`~sparsegcn.nn.Model`.
      encode: ``encode(params, graph, x, *, key=None, training=False) ->
        (Z [N, D], kl [])``; ``kl`` is 0 for GAE.
      decode: ``decode(params, z, pairs [P, 2], *, kernel="auto") -> logits [P]``
        (``kernel``: as :func:`pair_scores`).
      decode_all: ``decode_all(params, z) -> logits [N, N]`` (``None`` for the
        ``hadamard`` decoder).
      variational: VGAE.
    """

    init: Callable[[jax.Array], Any]
    apply: Callable[..., jax.Array]
    embed: Callable[..., jax.Array]
    name: str
    config: dict
    encode: Callable[..., tuple[jax.Array, jax.Array]]
    decode: Callable[..., jax.Array]
    decode_all: Callable[..., jax.Array] | None
    variational: bool


def init_decoder(name: str, key: jax.Array, dim: int) -> dict:
    """The params of decoder ``name`` on ``dim``-wide embeddings."""
    if name == "inner":
        return {}
    if name == "distmult":
        return {"relation": jnp.ones((dim,), jnp.float32)}
    k1, k2 = jax.random.split(key)
    return {"hidden": linear_params(k1, dim, dim), "out": linear_params(k2, dim, 1)}


def _xla_pair_scores(z: jax.Array, pairs: jax.Array, relation: jax.Array) -> jax.Array:
    return jnp.sum(z[pairs[:, 0]] * relation[None, :] * z[pairs[:, 1]], axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _native_pair_scores(weighted: bool, z, pairs, relation) -> jax.Array:
    """The native kernels; unweighted (the inner product) they skip ``relation``
    and its gradient is zeros."""
    return native.pair_scores(z, pairs, relation if weighted else None)


def _native_pair_scores_fwd(weighted, z, pairs, relation):
    return _native_pair_scores(weighted, z, pairs, relation), (z, pairs, relation)


def _native_pair_scores_bwd(weighted, residuals, g):
    z, pairs, relation = residuals
    dz, dr = native.pair_scores_grad(z, pairs, relation if weighted else None, g)
    return dz, None, dr


_native_pair_scores.defvjp(_native_pair_scores_fwd, _native_pair_scores_bwd)


def _check_pair_ids(pairs, num_nodes: int) -> None:
    """Refuses concrete ``pairs`` holding a node id outside ``[0, num_nodes)``,
    naming the first (``pairs[i, j] = v is not a node id in [0, N)``).

    XLA's gathers clamp such an id to the nearest row and score a pair the
    caller did not ask for. Traced ``pairs`` (inside ``jit``, ``grad`` or
    ``vmap``) cannot be checked here and are trusted: check them where they
    enter, on the host.
    """
    if is_traced(pairs):
        return
    from sparsegcn.datasets.link_base import check_node_ids

    check_node_ids("pairs", np.asarray(pairs), num_nodes)


def pair_scores(
    z: jax.Array, pairs: jax.Array, relation: jax.Array | None = None, *, kernel: str = "auto"
) -> jax.Array:
    """:math:`s_p = \\sum_d z_{u_p d}\\, r_d\\, z_{v_p d}` for ``pairs`` ``[..., 2]`` -> ``[...]``.

    The inner-product decoder (``relation`` None, :math:`r = 1`) and DistMult.
    ``kernel``: ``"auto"`` runs the native CPU kernels
    (:func:`sparsegcn.backends.native.pair_scores` and its gradient: two rows
    of ``z`` read per pair, nothing written but the scores, or ``∂z``) for
    float32 ``z`` and int32 ``pairs`` when the program is lowered for the CPU
    and the library is built, XLA's gathers otherwise; ``"xla"`` always XLA's.
    Both give the same values up to float summation order.

    Concrete ``pairs`` are checked to hold node ids of ``z``'s rows
    (XLA's gathers would clamp one outside them);
    traced ``pairs`` are trusted.

    Raises:
      ValueError: an unknown ``kernel``, or a concrete node id outside
        ``[0, N)``, naming the first.
    """
    if kernel not in ("auto", "xla"):
        raise ValueError(f"kernel must be 'auto' or 'xla', got {kernel!r}")
    _check_pair_ids(pairs, z.shape[0])
    flat = pairs.reshape(-1, 2)
    weighted = relation is not None
    if relation is None:
        relation = jnp.ones((z.shape[-1],), z.dtype)
    usable = (
        kernel == "auto"
        and z.dtype == jnp.float32
        and flat.dtype == jnp.int32
        and relation.dtype == jnp.float32
        and native.ffi_available()
    )
    if not usable:
        scores = _xla_pair_scores(z, flat, relation)
    else:
        # Lowering keeps only the branch of the platform compiled for.
        on_cpu = functools.partial(_native_pair_scores, weighted)
        scores = jax.lax.platform_dependent(z, flat, relation, cpu=on_cpu, default=_xla_pair_scores)
    return scores.reshape(pairs.shape[:-1])


def decode_pairs(
    name: str, params: dict, z: jax.Array, pairs: jax.Array, *, kernel: str = "auto"
) -> jax.Array:
    """Decoder ``name``'s logit of each pair: ``[..., 2]`` node ids -> ``[...]``.

    ``kernel``: as :func:`pair_scores`, for ``inner`` and ``distmult``.
    Concrete ``pairs`` are checked as :func:`pair_scores` checks them.
    """
    if name == "inner":
        return pair_scores(z, pairs, kernel=kernel)
    if name == "distmult":
        return pair_scores(z, pairs, params["relation"], kernel=kernel)
    _check_pair_ids(pairs, z.shape[0])
    zu, zv = z[pairs[..., 0]], z[pairs[..., 1]]

    def row(vector):  # broadcast a [D] vector against [..., D] explicitly
        return vector.reshape((1,) * (zu.ndim - 1) + vector.shape)

    h = jax.nn.relu((zu * zv) @ params["hidden"]["w"] + row(params["hidden"]["b"]))
    return (h @ params["out"]["w"] + row(params["out"]["b"]))[..., 0]


def decode_dense(name: str, params: dict, z: jax.Array) -> jax.Array:
    """The ``[N, N]`` logits of every pair (``inner`` and ``distmult`` only)."""
    if name == "inner":
        return z @ z.T
    if name == "distmult":
        return (z * params["relation"][None, :]) @ z.T
    raise ValueError(f"decoder {name!r} has no dense form; use one of {list(FULL_DECODERS)}")


def kl_divergence(mu: jax.Array, logstd: jax.Array) -> jax.Array:
    """The mean over nodes of :math:`\\mathrm{KL}(\\mathcal N(\\mu, \\sigma^2) \\| \\mathcal N(0, I))`.

    .. math::

        \\frac1N \\sum_i -\\tfrac12 \\sum_d \\big(1 + 2\\log\\sigma_{id} - \\mu_{id}^2
            - \\sigma_{id}^2\\big)

    Kipf & Welling's objective subtracts ``kl / N`` from the
    log-likelihood (their ``(0.5 / N) * mean(sum(...))``), PyG's example adds
    ``kl_loss / N``: the same term.

    Args:
      mu, logstd: ``[N, D]``.

    Returns:
      float32 ``[]``.
    """
    per_node = 1.0 + 2.0 * logstd - mu**2 - jnp.exp(logstd) ** 2
    return -0.5 * jnp.mean(jnp.sum(per_node, axis=-1))


def full_reconstruction_loss(
    logits: jax.Array, positives: jax.Array, pos_weight: jax.Array, norm: jax.Array
) -> jax.Array:
    """Kipf & Welling's weighted cross-entropy over all ``N²`` entries.

    .. math::

        \\mathcal L = \\frac{\\eta}{N^2} \\sum_{u,v} \\big( w\\, A_{uv}
            \\,\\mathrm{softplus}(-s_{uv}) + (1 - A_{uv})\\,\\mathrm{softplus}(s_{uv}) \\big)

    with ``A`` the train adjacency plus the identity (their ``adj_label``),
    ``w = pos_weight = (N² - E) / E`` and ``η = norm = N² / (2 (N² - E))``,
    ``E`` the directed train edges. The label matrix is never built: the sum
    is the softplus of every logit plus a correction over the positives.

    Args:
      logits: ``[N, N]``.
      positives: int32 ``[L, 2]``: the pairs with ``A_uv = 1``, each once.
      pos_weight, norm: scalars.

    Returns:
      float32 ``[]``.
    """
    n2 = logits.shape[0] * logits.shape[1]
    at = logits[positives[:, 0], positives[:, 1]]
    total = jnp.sum(softplus(logits)) + jnp.sum(pos_weight * softplus(-at) - softplus(at))
    return norm * total / n2


@jax.custom_jvp
def softplus(x: jax.Array) -> jax.Array:
    """:math:`\\log(1 + e^x) = \\max(x, 0) + \\log(1 + e^{-|x|})`, elementwise,
    with the derivative :math:`\\sigma(x)`.

    ``jax.nn.softplus`` to float rounding (the same at ``±inf``), in fewer
    XLA ops on CPU than ``logaddexp`` and its derivative rule.
    """
    return jnp.maximum(x, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), t * jax.nn.sigmoid(x)


def sampled_reconstruction_loss(pos_logits: jax.Array, neg_logits: jax.Array) -> jax.Array:
    """PyG's ``GAE.recon_loss``: the mean cross-entropy of the positives plus
    that of the negatives, ``mean softplus(-s⁺) + mean softplus(s⁻)``."""
    return jnp.mean(softplus(-pos_logits)) + jnp.mean(softplus(neg_logits))


def graph_autoencoder(
    encoder: Model,
    embedding_dim: int,
    *,
    variational: bool = False,
    decoder: str = "inner",
    recon: str = "full",
    negatives: str = "pairs",
) -> LinkModel:
    """A GAE (or VGAE) around an encoder: the encoder embeds, a pair decoder scores.

    GAE: :math:`Z = f(X, A)`, ``encoder``'s ``D`` outputs. VGAE: its ``2D``
    outputs are :math:`[\\mu, \\log\\sigma]` and
    :math:`Z = \\mu + \\varepsilon \\odot \\sigma`, :math:`\\varepsilon \\sim
    \\mathcal N(0, I)` from the explicit ``key`` while training. With a GCN
    encoder, the last layer's two halves are exactly the paper's ``GCN_μ`` and
    ``GCN_σ`` sharing the first layer (``Â H [W_μ | W_σ] = [Â H W_μ | Â H W_σ]``).
    The registry's ``gae`` and ``vgae`` entries build the encoder from
    ``--encoder`` (a registered model) and call this.

    Args:
      encoder: a :class:`~sparsegcn.nn.Model` with ``D`` outputs (``2D`` for VGAE).
      embedding_dim: ``D`` (16 in the paper).
      variational: VGAE.
      decoder: one of :data:`DECODERS`.
      recon: one of :data:`RECONSTRUCTIONS`; recorded in ``config`` for the
        trainer (``"full"`` needs a decoder of :data:`FULL_DECODERS`).
      negatives: one of :data:`NEGATIVES`, what the trainer draws as
        ``recon="sampled"``'s negatives; recorded in ``config``.

    Returns:
      :class:`LinkModel`.

    Raises:
      TypeError: ``embedding_dim`` is not an integer.
      ValueError: ``embedding_dim`` below 1, or not matching the encoder's
        outputs (``encoder.config["num_classes"]``: ``D``, ``2D`` for VGAE);
        an unknown decoder or reconstruction, or ``recon="full"`` with the
        ``hadamard`` decoder.
    """
    check_flag("variational", variational)
    check_hyperparameter("hidden", embedding_dim, label="embedding_dim")
    dim = int(embedding_dim)
    width = encoder.config.get("num_classes")
    if isinstance(width, int | np.integer) and not isinstance(width, bool):
        if variational and width != 2 * dim:
            raise ValueError(
                f"variational embedding_dim={dim} needs an encoder with 2 * {dim} = {2 * dim} "
                f"outputs ([mu, log sigma]), got {width} ({encoder.name}); build the encoder "
                f"with {2 * dim} outputs"
            )
        if not variational and width != dim:
            raise ValueError(
                f"embedding_dim={dim} needs an encoder with {dim} outputs, got {width} "
                f"({encoder.name}); build the encoder with {dim} outputs"
            )
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {list(DECODERS)}, got {decoder!r}")
    if recon not in RECONSTRUCTIONS:
        raise ValueError(f"recon must be one of {list(RECONSTRUCTIONS)}, got {recon!r}")
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives must be one of {list(NEGATIVES)}, got {negatives!r}")
    if recon == "full" and decoder not in FULL_DECODERS:
        raise ValueError(
            f"recon='full' scores all N² pairs as one product; decoder {decoder!r} has none, "
            f"use recon='sampled' or a decoder of {list(FULL_DECODERS)}"
        )
    inner = encoder
    name = "vgae" if variational else "gae"
    config = dict(
        encoder.config,
        num_classes=dim,
        encoder=encoder.name,
        decoder=decoder,
        recon=recon,
        negatives=negatives,
    )

    def init(key: jax.Array) -> dict:
        k1, k2 = jax.random.split(key)
        return {"encoder": inner.init(k1), "decoder": init_decoder(decoder, k2, dim)}

    def encode(params, graph, x, *, key=None, training=False):
        if not variational:
            z = inner.apply(params["encoder"], graph, x, key=key, training=training)
            return z, jnp.zeros((), z.dtype)
        dropout_key = noise_key = None
        if training:
            if key is None:
                raise ValueError("training a VGAE needs an explicit PRNG key: encode(..., key=key)")
            dropout_key, noise_key = jax.random.split(key)
        out = inner.apply(params["encoder"], graph, x, key=dropout_key, training=training)
        mu, logstd = out[:, :dim], jnp.minimum(out[:, dim:], LOGSTD_MAX)
        kl = kl_divergence(mu, logstd)
        if not training:
            return mu, kl
        return mu + jax.random.normal(noise_key, mu.shape, mu.dtype) * jnp.exp(logstd), kl

    def apply(params, graph, x, *, key=None, training=False):
        return encode(params, graph, x, key=key, training=training)[0]

    def embed(params, graph, x):
        return encode(params, graph, x)[0]

    def decode(params, z, pairs, *, kernel="auto"):
        return decode_pairs(decoder, params["decoder"], z, pairs, kernel=kernel)

    def decode_all(params, z):
        return decode_dense(decoder, params["decoder"], z)

    return LinkModel(
        init=init,
        apply=apply,
        embed=embed,
        name=name,
        config=config,
        encode=encode,
        decode=decode,
        decode_all=decode_all if decoder in FULL_DECODERS else None,
        variational=variational,
    )


__all__ = [
    "DECODERS",
    "FULL_DECODERS",
    "NEGATIVES",
    "RECONSTRUCTIONS",
    "LinkModel",
    "decode_dense",
    "decode_pairs",
    "full_reconstruction_loss",
    "graph_autoencoder",
    "init_decoder",
    "kl_divergence",
    "pair_scores",
    "sampled_reconstruction_loss",
    "softplus",
]

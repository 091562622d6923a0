"""The ``gae`` part of ``compare.py``: one Cora GAE training step, ours against PyG.

Both sides train Kipf & Welling's GAE as PyG's ``examples/autoencoder.py``
sets it up: a GCN encoder ``F → 32 → 16`` (ReLU between, no dropout), the
inner-product decoder, Adam (lr 0.01), on the message edges and train
positives of one 85/5/10 random split of Cora (ours:
:func:`sparsegcn.tasks.link.prepare_links`, seed 0; PyG reads the same
arrays from an ``.npz``). Ours keeps Cora's bag-of-words features sparse,
as ``prepare_links`` makes them (:class:`~sparsegcn.SparseFeatures`); PyG
gets them dense, as its ``Planetoid`` loads them.

- PyG (``pyg_peer.py`` case ``gae_step``): ``GAE(GCNEncoder)``,
  ``recon_loss(z, pos)``, which calls ``negative_sampling`` inside, one
  uniform negative a positive; backward; ``Adam.step``.
- ours, ``recon="sampled"``: :func:`sparsegcn.train.links.train_step`, as
  :func:`~sparsegcn.train.links.fit_links` calls it: encoder, one fresh uniform
  negative a positive drawn on the device
  (:func:`~sparsegcn.sampling.links.uniform_negatives`, avoiding train
  edges), the same log-sigmoid loss, gradient, Adam.
- ours, ``recon="sampled"``, as the trainer runs it: a chunk of
  :data:`CHUNK` epochs in one call (:func:`sparsegcn.train.links.train_epochs`,
  a ``lax.scan`` of the same step: ``fit_links`` runs Kipf & Welling's 200
  epochs as 20 such calls), reported per step (the call's time over
  :data:`CHUNK`).
- ours, ``recon="full"``: the same step with the loss over all ``N²``
  pairs (the setup that meets the paper's accuracy), for scale.

Our programs are compiled apart and timed with ``block_until_ready``, the
data on the device as the trainer holds it (put there once); each
timed call reuses the same params and key, so it draws the same negatives
(the draw itself runs every call). Rows are interleaved rounds
(:func:`compare.interleaved_rows`); each of our rows gets ``ours_speedup``,
PyG's median over its median from the same rounds.
"""

from __future__ import annotations

import jax
import numpy as np

HIDDEN, EMBEDDING, LR = 32, 16, 0.01
CHUNK = 10
"""Epochs a call of the trainer's program runs for Kipf & Welling's 200 (about 20 calls a run)."""
PYG_LABEL = "PyG GAE + GCNConv (recon_loss with negative_sampling)"


def gae_setup(root, recon: str):
    """``(step, args, data)``: one seed's GAE train step on Cora and its arguments."""
    from sparsegcn.train.links import make_optimizer, train_step

    model, config, data = _prepared(root, recon)
    tx = make_optimizer(config)
    params = model.init(jax.random.key(0))
    opt_state = tx.init(params)

    def step(params, opt_state, key, data):
        return train_step(model, tx, config, params, opt_state, key, data)

    return step, (params, opt_state, jax.random.key(1), jax.device_put(data)), data


def gae_chunk_setup(root, chunk: int = CHUNK):
    """``(run, args)``: ``chunk`` epochs of one seed's sampled GAE training as
    ``fit_links`` calls them (:func:`~sparsegcn.train.links.train_epochs`)."""
    import dataclasses

    import jax.numpy as jnp

    from sparsegcn.train.links import make_optimizer, train_epochs

    model, config, data = _prepared(root, "sampled")
    config = dataclasses.replace(config, epochs=chunk, epochs_per_call=chunk)
    tx = make_optimizer(config)
    params = jax.vmap(model.init)(jax.random.key(0)[None])
    opt_state = jax.vmap(tx.init)(params)

    def run(params, opt_state, keys, data):
        return train_epochs(model, tx, config, params, opt_state, keys, jnp.int32(0), data)

    return run, (params, opt_state, jax.random.key(1)[None], jax.device_put(data))


def _prepared(root, recon: str):
    from sparsegcn.experiment.config import Experiment
    from sparsegcn.tasks.link import prepare_links

    exp = Experiment(
        dataset="cora",
        task="link",
        root=str(root),
        model="gae",
        hidden=HIDDEN,
        dropout=0.0,
        lr=LR,
        model_options=(("embedding_dim", EMBEDDING), ("recon", recon)),
    )
    _, stacked, model, config = prepare_links(exp)
    features = stacked.features  # shared by the seeds; every other leaf is [seeds, ...]
    data = jax.tree.map(lambda a: a[0], stacked._replace(features=None))._replace(features=features)
    return model, config, data


def gae_rows(root, external, rounds, *, full: bool = True) -> list[dict]:
    """Rows of the Cora GAE step: ours (sampled, then full) and PyG's."""
    from compare import interleaved_rows
    from peer_process import write_npz

    step, args, data = gae_setup(root, "sampled")
    ours = [("sparsegcn GAE, recon=sampled (1 device negative/positive)", step, args)]
    run, run_args = gae_chunk_setup(root)
    ours.append(
        (
            f"sparsegcn GAE, recon=sampled, the trainer's call ({CHUNK} epochs a call), per step",
            run,
            run_args,
            CHUNK,
        )
    )
    if full:
        full_step, full_args, _ = gae_setup(root, "full")
        ours.append(("sparsegcn GAE, recon=full (all N² pairs)", full_step, full_args))
    train = np.asarray(data.train, np.int64)
    x = data.features
    dense = np.asarray(x.todense() if hasattr(x, "todense") else x, np.float32)
    spec = {
        "data": write_npz(
            external.folder,
            "gae-cora",
            features=dense,
            edge_index=np.concatenate([train.T, train[:, ::-1].T], axis=1),
            pos=train.T.copy(),
        ),
        "hidden": HIDDEN,
        "embedding_dim": EMBEDDING,
        "lr": LR,
    }
    n, positives = int(data.features.shape[0]), int(train.shape[0])
    rows = interleaved_rows(
        f"gae step cora (N={n}, {positives} train positives)",
        ours,
        [(PYG_LABEL, "pyg", "gae_step", spec)],
        external,
        rounds,
    )
    pyg = rows[-1]["median_ms"]
    for row in rows[:-1]:
        if pyg is not None:
            row["ours_speedup"] = pyg / row["median_ms"]
            row["note"] += f"; {row['ours_speedup']:.1f}x PyG"
    return rows

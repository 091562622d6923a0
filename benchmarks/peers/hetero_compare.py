"""The ``mag`` part of ``compare.py``: sampled R-GCN training batches on ``synthetic:mag``, ours against DGL.

Both sides train OGB's ogbn-mag R-GCN baseline as ``sparsegcn train
--dataset synthetic:mag --model rgcn`` does: reverse relations added
(citations symmetric), 2 layers, hidden 64, dropout 0.5, learnable
``[N_t, 128]`` embeddings for authors, fields and institutions, Adam 0.01
(dense, every row every step), fanouts 25,20 per relation, batches of 1,024
training papers, mean cross-entropy. The model is
:func:`sparsegcn.nn.rgcn.rgcn`: a mean per relation times its weight,
summed over the relations into a type, plus a root weight and bias per type.

- **ours**: the trainer's compiled epoch (:func:`sparsegcn.tasks.hetero.make_epoch`:
  a ``lax.scan`` of steps, each sampling the batch's typed tree on device,
  gathering rows, forward, backward, Adam; params and Adam state donated,
  updated in place) over ``batches`` batches a call, compiled apart.
- **DGL** (``dgl_peer.py`` case ``rgcn_batches``, ``rgcn_dgl.py``):
  ``NeighborSampler`` + ``DataLoader`` over the same typed graph (read from
  one ``.npz``, :mod:`hetero_data`), ``HeteroGraphConv`` of ``GraphConv(norm="right")``
  per relation plus a ``Linear`` per type, ``batches`` batches a call.

Calls alternate (ours, DGL, ours, ...), each side's first call untimed.
Rows report ``median_ms`` per batch (a call's time over its batches; median
over calls), ``ours_speedup`` (DGL's median over ours, same rounds), the
epoch that ``ceil(train / batch_size)`` batches project, and each process's
peak resident set (ours includes generating the dataset, which is released
before the timed calls, and ``rss_gb`` is ours after them; DGL's includes
reading the ``.npz`` and building its graph). Ours computes on the sampled *tree* (a
row per path, ``rows_per_batch``); DGL on de-duplicated blocks (distinct
input rows and block edges per batch, medians).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import jax
import numpy as np

OURS_LABEL = "sparsegcn R-GCN (typed tree sampler, compiled scan)"
DGL_LABEL = "DGL NeighborSampler + HeteroGraphConv(GraphConv) R-GCN"


@dataclasses.dataclass(frozen=True)
class MagSetup:
    """The model and batches both sides train (OGB's ogbn-mag R-GCN baseline)."""

    fanouts: tuple[int, ...] = (25, 20)
    batch_size: int = 1024
    hidden: int = 64
    dropout: float = 0.5
    lr: float = 0.01


def rss_gb() -> tuple[float, float]:
    """``(current, peak)`` resident set of this process, GB."""
    import resource

    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e9, peak


def release_freed_memory() -> None:
    """Hands memory freed so far (generating the dataset, say) back to the kernel.

    ``compare.py`` makes glibc keep freed memory for reuse
    (:func:`sparsegcn.allocator.keep_freed_memory`), so without this the
    generation peak would stay resident beside the peer's process while the
    steps run. ``malloc_trim(0)`` releases the free pages once; the steps'
    own buffers are kept from their first call on, as before.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to release
        pass


def mag_experiment(scale: float, setup: MagSetup, seed: int = 0):
    """The ``sparsegcn train`` settings of the R-GCN run."""
    from sparsegcn.experiment.config import Experiment

    return Experiment(
        dataset="synthetic:mag",
        task="hetero",
        model="rgcn",
        scale=scale,
        seed=seed,
        fanouts=",".join(map(str, setup.fanouts)),
        batch_size=setup.batch_size,
        hidden=setup.hidden,
        layers=len(setup.fanouts),
        dropout=setup.dropout,
        lr=setup.lr,
        weight_decay=0.0,
        decay_layers="none",
        epochs=1,
    )


def mag_npz(folder: str, stem: str, data) -> str:
    """``data``'s typed graph (reverses included), paper features, labels and training
    papers in :mod:`hetero_data`'s layout."""
    from hetero_data import save_hetero

    dataset = data.dataset
    return save_hetero(
        folder,
        stem,
        num_nodes=dict(data.graph.num_nodes),
        relations={
            key: (np.asarray(view.senders), np.asarray(view.receivers))
            for key, view in data.graph.relations.items()
        },
        features={t: np.asarray(x) for t, x in dataset.features.items()},
        target=dataset.target,
        labels=np.asarray(dataset.labels),
        train=np.asarray(dataset.split["train"]),
    )


def tree_rows(table, edge_types, target: str, batch_size: int) -> int:
    """Rows our typed tree holds per batch (every path's slots, seeds included)."""
    from sparsegcn.sampling.typed import typed_paths

    total = 0
    for level in typed_paths(edge_types, target, len(table)):
        for path in level:
            total += batch_size * math.prod(table[d][r] for d, r in enumerate(path))
    return total


def batch_ids(rng, train: np.ndarray, batches: int, batch_size: int) -> np.ndarray:
    """``[batches, batch_size]`` training ids of a fresh shuffle (repeated when short)."""
    need = batches * batch_size
    order = np.concatenate([rng.permutation(train) for _ in range(-(-need // len(train)))])
    return order[:need].reshape(batches, batch_size).astype(np.int32)


def ours_epoch(data, exp):
    """``(epoch, model, tx, table)``: the trainer's epoch program for ``exp`` on ``data``."""
    from sparsegcn.sampling.typed import check_typed_fanouts
    from sparsegcn.tasks.hetero import build_model, make_epoch
    from sparsegcn.train.optim import make_optimizer

    model = build_model(exp, data)
    tx = make_optimizer(exp.train_config())
    table = check_typed_fanouts(exp.fanouts, data.graph.edge_types)
    return make_epoch(model, tx, table, data.dataset.target), model, tx, table


def mag_rows(
    external,
    rounds,
    *,
    scale: float = 1.0,
    batches: int = 5,
    setup: MagSetup = MagSetup(),
) -> list[dict]:
    """Rows of the sampled R-GCN batches: ours, then DGL's (``missing: ...`` without it)."""
    from compare import _missing_row, _row
    from peer_process import PeerError

    from sparsegcn.tasks.hetero import prepare_hetero

    exp = mag_experiment(scale, setup)
    tick = time.perf_counter()
    data = prepare_hetero(exp)
    load_s = time.perf_counter() - tick
    target = data.dataset.target
    train = np.asarray(data.dataset.split["train"], np.int32)
    steps = math.ceil(len(train) / setup.batch_size)
    edges = sum(data.graph.num_edges.values())
    case = (
        f"rgcn batches synthetic:mag x{scale:g} ({sum(data.graph.num_nodes.values())} nodes, "
        f"{edges} edges with reverses), fanouts {','.join(map(str, setup.fanouts))}, "
        f"batch {setup.batch_size}, hidden {setup.hidden}, {batches} batches a call"
    )
    spec = {
        "data": mag_npz(external.folder, "mag", data),
        "fanouts": list(setup.fanouts),
        "batch_size": setup.batch_size,
        "hidden": setup.hidden,
        "dropout": setup.dropout,
        "lr": setup.lr,
        "num_classes": data.dataset.num_classes,
        "batches": batches,
    }
    release_freed_memory()

    epoch, model, tx, table = ours_epoch(data, exp)
    key = jax.random.key(exp.seed)
    key, init_key = jax.random.split(key)
    params = model.init(init_key)
    opt_state = tx.init(params)
    rng = np.random.default_rng(exp.seed)
    mask = np.ones((batches, setup.batch_size), bool)
    args = (data.csr, data.features, data.labels)
    tick = time.perf_counter()
    compiled = epoch.lower(
        params, opt_state, key, *args, batch_ids(rng, train, batches, setup.batch_size), mask
    ).compile()
    compile_s = time.perf_counter() - tick

    last = {"loss": float("nan")}

    def ours_call() -> float:
        nonlocal params, opt_state, key
        ids = batch_ids(rng, train, batches, setup.batch_size)
        key, k = jax.random.split(key)
        start = time.perf_counter()
        params, opt_state, losses = compiled(params, opt_state, k, *args, ids, mask)
        jax.block_until_ready((params, opt_state, losses))
        elapsed = time.perf_counter() - start
        last["loss"] = float(np.asarray(losses)[-1])
        return elapsed

    first_s = ours_call()
    peer = external.peers.get("dgl", "dgl not requested")
    dgl_row = None
    if isinstance(peer, str):
        dgl_row = _missing_row(case, DGL_LABEL, peer)
    else:
        try:
            info = peer.setup("rgcn_batches", warmup=0, **spec)
        except PeerError as err:
            dgl_row = _missing_row(case, DGL_LABEL, str(err))
    ours_times, dgl_times, answer = [], [], None
    for _ in range(rounds.rounds):
        for _ in range(rounds.per_round):
            ours_times.append(ours_call() / batches)
        if dgl_row is None:
            try:
                answer = peer.time("rgcn_batches", rounds.per_round)
            except PeerError as err:
                dgl_row = _missing_row(case, DGL_LABEL, f"failed while timed: {err}")
                continue
            dgl_times += [t / batches for t in answer["times_s"]]
    rss_now, rss_peak = rss_gb()
    ours = _row(
        case,
        OURS_LABEL,
        ours_times,
        f"compile {compile_s:.1f} s, first call {first_s:.1f} s, load {load_s:.1f} s",
    )
    ours.update(
        batches_per_call=batches,
        rows_per_batch=tree_rows(table, data.graph.edge_types, target, setup.batch_size),
        last_loss=last["loss"],
        compile_s=compile_s,
        load_s=load_s,
        peak_rss_gb=rss_peak,
        rss_gb=rss_now,
    )
    rows = [ours]
    if dgl_row is None:
        dgl_row = _row(
            case,
            DGL_LABEL,
            dgl_times,
            f"setup {info['setup_s']:.1f} s, first call {info['first_call_s']:.1f} s",
        )
        stats = answer["stats"]
        dgl_row.update(
            batches_per_call=batches,
            per_batch={
                k: float(np.median(stats[k])) for k in ("input_rows", "block_edges", "seeds")
            },
            last_loss=stats.get("loss"),
            setup_s=info["setup_s"],
            peak_rss_gb=answer["peak_rss_gb"],
            versions=peer.versions,
        )
        ours["ours_speedup"] = dgl_row["median_ms"] / ours["median_ms"]
    rows.append(dgl_row)
    for row in rows:
        if row["median_ms"] is None:
            continue
        row["steps_per_epoch"] = steps
        row["projected_epoch_s"] = steps * row["median_ms"] / 1e3
        row["note"] += (
            f"; {row['median_ms']:.0f} ms a batch, epoch of {steps} batches "
            f"~{row['projected_epoch_s']:.0f} s; peak RSS {row['peak_rss_gb']:.2f} GB"
        )
    ours["note"] += f", {rss_now:.2f} GB after the batches"
    if "ours_speedup" in ours:
        ours["note"] += f"; {ours['ours_speedup']:.2f}x DGL"
    return rows


__all__ = [
    "DGL_LABEL",
    "OURS_LABEL",
    "MagSetup",
    "mag_npz",
    "mag_rows",
    "release_freed_memory",
    "rss_gb",
    "tree_rows",
]

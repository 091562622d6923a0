"""Ours against PyG, torch.sparse CSR, scipy CSR, DGL and Jraph, same graphs.

    python benchmarks/peers/compare.py                      # propagation + GCN steps
    python benchmarks/peers/compare.py --only propagation --nodes 200000
    python benchmarks/peers/compare.py --only propagation,steps,gat,sage \
        --dgl-python "$DGL_PYTHON" --jraph-python "$JRAPH_PYTHON"
    python benchmarks/peers/compare.py --json benchmarks/results/peers.json
    python benchmarks/peers/compare.py --torch-device cuda --nodes 1000000   # on a GPU

Propagation computes ``Â x`` (``Â = D^-1/2 (A + I) D^-1/2``) on a random
and a community-structured (SBM) graph. Ours runs the default backend on
the graph packed in CSR (the first row, which ratios refer to) and in
sliced ELL, on the plain edge list, and the BCOO backend; both packed forms
also after RCM and community reordering on the SBM graph. The peers run
on the graph as generated, and torch CSR also on the reordered ones. The GCN
steps are Kipf & Welling's Cora setup and a 3-layer, hidden-256 GCN on a
random graph of ogbn-arxiv's size, against PyG's GCN example. Every time is
a median after warm-up (ours: compiled, ``block_until_ready``); ratios are
``theirs / ours`` from the same run. Peers that are not installed are
skipped with a note.

DGL and Jraph run in their own virtual environments, as child processes
(``dgl_peer.py``, ``jraph_peer.py``; see :mod:`peer_process`), found by
``--dgl-python`` / ``--jraph-python`` or ``$SPARSEGCN_DGL_PYTHON`` /
``$SPARSEGCN_JRAPH_PYTHON``; a peer that is not found or does not import is
a row saying ``missing: <reason>``. Their cases (``... | interleaved``)
read the graph from one ``.npz`` this script writes, and are timed in
alternating rounds with ours (ours, DGL, Jraph, ours, ...), so a noisy
neighbour hits both sides alike; their ratios refer to ours from the same
rounds. Compile time (ours, Jraph) and first calls (DGL) are reported apart.
The ``sage`` part (run only when named) times mini-batch GraphSAGE training
batches on the ogbn-products-sized synthetic graph, ours against DGL's
``NeighborSampler`` + ``SAGEConv``, and projects an epoch; with
``--sage-epoch`` it then times one whole epoch of each side. On a GPU (``--torch-device cuda``, the default when JAX
runs on one and torch sees it) the torch peers run on the same GPU, ours
adds the BCOO backend with its cuSPARSE lowering, and the host-only scipy
row is left out.

The ``graph`` part (run only when named; :mod:`graph_compare`) times one
epoch of GIN graph classification (Xu et al.'s model, hidden 64, batch 32)
a call: ours (the graph trainer's compiled epoch program) against PyG
(``pyg_peer.py``, in its own environment: ``--pyg-python`` or
``$SPARSEGCN_PYG_PYTHON``), DGL and Jraph, on a PROTEINS-like synthetic
dataset and on MUTAG, with graphs/s.

The ``gae`` part (run only when named; :mod:`gae_compare`) times one Cora
GAE training step (GCN 1433 → 32 → 16, inner product, Adam): ours with one
fresh device-drawn negative a positive (``recon="sampled"``) and over all
``N²`` pairs (``recon="full"``) against PyG's ``GAE.recon_loss``, whose
``negative_sampling`` runs inside its step (``pyg_peer.py``), interleaved,
with ``ours_speedup``.

The ``mag`` part (run only when named; :mod:`hetero_compare`) times sampled
R-GCN training batches on ``synthetic:mag`` (OGB's ogbn-mag baseline: 2
layers, hidden 64, fanouts 25,20 per relation, batches of 1,024 papers):
ours (the hetero trainer's compiled epoch over ``--mag-batches`` batches a
call) against DGL's ``NeighborSampler`` + ``HeteroGraphConv`` of
``GraphConv`` per relation, alternating calls, with ms a batch, the
projected epoch and each process's peak RSS.

The ``proteins`` part (run only when named; :mod:`proteins_compare`) times
one full-batch GraphSAGE training step (an epoch) on ``synthetic:proteins``
with its 112-task loss: ours against PyG's ``SAGEConv`` on a ``torch.sparse``
CSR ``adj_t`` and DGL's ``SAGEConv``, each peer in its own interleaved case.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import implementations as peers
from conftest import shared_data_root
from peer_process import PeerError, PeerProcess, start_peer, write_npz

from sparsegcn.allocator import keep_freed_memory
from sparsegcn.backends import pack_gcn_norm, propagate
from sparsegcn.bench.graphs import add_graph_arguments, make_graph, propagation_graph
from sparsegcn.bench.runner import machine_info
from sparsegcn.bench.steps import arxiv_like_setup, cora_setup, gcn_step, registered_step
from sparsegcn.bench.timing import measure
from sparsegcn.datasets import data_location
from sparsegcn.files import check_outputs, write_json_atomic
from sparsegcn.transforms import gcn_norm, sort_edges


def time_python(fn, repeats: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _on(device: str) -> str:
    return "" if device == "cpu" else f"on {device}"


def _row(case: str, impl: str, times: list[float], note: str = "") -> dict:
    return {
        "case": case,
        "impl": impl,
        "median_ms": 1e3 * float(np.median(times)),
        "min_ms": 1e3 * float(np.min(times)),
        "repeats": len(times),
        "note": note,
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }


def _missing_row(case: str, impl: str, reason: str) -> dict:
    return {
        "case": case,
        "impl": impl,
        "median_ms": None,
        "min_ms": None,
        "repeats": 0,
        "note": f"missing: {reason}",
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }


@dataclasses.dataclass
class Rounds:
    """How the interleaved cases are timed: ``rounds`` rounds of ``per_round``
    calls on each side (ours first, then each peer in turn)."""

    rounds: int = 5
    per_round: int = 3


@dataclasses.dataclass
class External:
    """The started out-of-process peers (:class:`PeerProcess`), or why each is missing."""

    peers: dict[str, PeerProcess | str]
    folder: str  # where the shared .npz files go

    def close(self) -> None:
        for peer in self.peers.values():
            if isinstance(peer, PeerProcess):
                peer.close()


def interleaved_rows(
    case: str,
    ours: tuple | list[tuple],
    theirs: list[tuple[str, str, str, dict]],
    external: External,
    rounds: Rounds,
) -> list[dict]:
    """Ours and the out-of-process peers, timed in alternating rounds.

    Args:
      case: the case name (rows get ``case + " | interleaved"``).
      ours: ``(label, fn, args)`` or ``(label, fn, args, steps)``, or a list
        of them (each timed in every round, in that order); ``jax.jit(fn)``
        is compiled apart and called with ``block_until_ready``. A call that
        runs ``steps`` steps (a ``lax.scan`` of them, as a trainer's chunk
        does) is reported per step: its time over ``steps``.
      theirs: ``(label, peer, peer_case, spec)``; ``spec`` goes to the peer's
        case builder (it names the shared ``.npz``).
      external: the started peers.
      rounds: rounds and calls per round.

    Returns:
      One row per entry of ours, then one per peer case (``missing: ...`` rows for
      peers that are not there or failed to set up); ``stats`` holds what a
      peer case reported (sampled block sizes, say), ``peak_rss_gb`` the peer
      process's peak resident set.
    """
    case = f"{case} | interleaved"
    mine = []  # (label, compiled, args, compile seconds, times, steps a call)
    for label, fn, args, *steps in ours if isinstance(ours, list) else [ours]:
        tick = time.perf_counter()
        compiled = jax.jit(fn).lower(*args).compile()
        compile_s = time.perf_counter() - tick
        for _ in range(2):
            jax.block_until_ready(compiled(*args))
        mine.append((label, compiled, args, compile_s, [], steps[0] if steps else 1))
    live, rows_after = [], {}
    for impl, name, peer_case, spec in theirs:
        peer = external.peers.get(name, f"{name} not requested")
        if isinstance(peer, str):
            rows_after[impl] = _missing_row(case, impl, peer)
            continue
        try:
            info = peer.setup(peer_case, warmup=1, **spec)
        except PeerError as err:
            rows_after[impl] = _missing_row(case, impl, str(err))
            continue
        live.append((impl, peer, peer_case, info, []))
    last_stats: dict[str, dict] = {}
    peak_rss: dict[str, float] = {}
    for _ in range(rounds.rounds):
        for _, compiled, args, _, ours_times, steps in mine:
            for _ in range(rounds.per_round):
                start = time.perf_counter()
                jax.block_until_ready(compiled(*args))
                ours_times.append((time.perf_counter() - start) / steps)
        for entry in list(live):
            impl, peer, peer_case, _, times = entry
            try:
                answer = peer.time(peer_case, rounds.per_round)
            except PeerError as err:  # a peer that fails mid-way is reported, not fatal
                live.remove(entry)
                rows_after[impl] = _missing_row(case, impl, f"failed while timed: {err}")
                continue
            times.extend(answer["times_s"])
            last_stats[impl] = answer["stats"]
            peak_rss[impl] = answer.get("peak_rss_gb")
    rows = [
        _row(case, label, times, f"compile {c:.1f} s" + (f"; {k} steps a call" if k > 1 else ""))
        for label, _, _, c, times, k in mine
    ]
    versions = {}
    for impl, peer, _, info, times in live:
        row = _row(
            case,
            impl,
            times,
            f"setup {info['setup_s']:.1f} s, first call {info['first_call_s']:.2f} s",
        )
        row["stats"] = last_stats.get(impl, {})
        row["peak_rss_gb"] = peak_rss.get(impl)
        rows_after[impl] = row
        versions = peer.versions
        row["versions"] = versions
    rows += [rows_after[impl] for impl, *_ in theirs]
    return rows


def propagation_peer_rows(case: str, a_hat, x, ours_graph, external: External, rounds: Rounds):
    """``Â x``: ours (packed CSR) against DGL's two SpMM forms and Jraph's GCN layer."""
    coo = a_hat.to_scipy().tocoo()
    data = write_npz(
        external.folder,
        "propagate",
        senders=coo.col.astype(np.int32),
        receivers=coo.row.astype(np.int32),
        weights=coo.data.astype(np.float32),
        num_nodes=np.int64(a_hat.num_nodes),
        x=x,
    )
    spec = {"data": data}
    return interleaved_rows(
        case,
        (
            "sparsegcn packed CSR",
            lambda g, x: propagate(g, x, backend="segment"),
            (jax.device_put(ours_graph), jax.device_put(x)),
        ),
        [
            ("DGL copy_u_sum, D^-1/2 both sides", "dgl", "propagate-copy", spec),
            ("DGL u_mul_e_sum", "dgl", "propagate-weighted", spec),
            ("Jraph GraphConvolution", "jraph", "propagate", spec),
        ],
        external,
        rounds,
    )


def propagation_rows(
    kind: str,
    nodes: int,
    degree: float,
    features: int,
    repeats: int,
    device: str = "cpu",
    external: External | None = None,
    rounds: Rounds | None = None,
):
    case = f"propagate {kind} N={nodes} deg={degree:g} F={features}"
    graph = make_graph(kind, nodes, degree)
    a_hat = propagation_graph(graph, "segment-unpacked")
    x = np.random.default_rng(0).standard_normal((nodes, features), dtype=np.float32)
    xj = jax.device_put(x)
    rows = []

    def ours(g, label, note="", backend="segment"):
        timing = measure(
            lambda g, x: propagate(g, x, backend=backend), (jax.device_put(g), xj), repeats=repeats
        )
        rows.append(_row(case, label, list(timing.times_s), note))

    ours(propagation_graph(graph, "segment-csr"), "sparsegcn packed CSR")
    ours(propagation_graph(graph, "segment"), "sparsegcn packed ELL")
    ours(a_hat, "sparsegcn edge list")
    ours(a_hat, "sparsegcn bcoo", backend="bcoo")
    reordered = {}
    if kind == "sbm":
        for method in ("rcm", "community"):
            reordered[method] = graph.reorder(method).graph
            ours(
                propagation_graph(reordered[method], "segment-csr"),
                f"sparsegcn packed CSR +{method}",
            )
            ours(propagation_graph(reordered[method], "segment"), f"sparsegcn packed ELL +{method}")
    if peers.have_torch():
        rows.append(
            _row(
                case,
                "torch.sparse CSR",
                time_python(peers.torch_csr_propagate(a_hat, x, device), repeats),
                _on(device),
            )
        )
        for method, relabelled in reordered.items():
            a_new = propagation_graph(relabelled, "segment-unpacked")
            rows.append(
                _row(
                    case,
                    f"torch.sparse CSR +{method}",
                    time_python(peers.torch_csr_propagate(a_new, x, device), repeats),
                    _on(device),
                )
            )
    if device == "cpu":
        rows.append(
            _row(case, "scipy CSR", time_python(peers.scipy_csr_propagate(a_hat, x), repeats))
        )
    if peers.have_pyg():
        rows.append(
            _row(
                case,
                "PyG (scatter)",
                time_python(peers.pyg_propagate(a_hat, x, device), repeats),
                _on(device),
            )
        )
    if external is not None:
        rows += propagation_peer_rows(
            case, a_hat, x, propagation_graph(graph, "segment-csr"), external, rounds or Rounds()
        )
    return rows


def _training_npz(external: External, stem: str, setup) -> str:
    """The raw graph (no self-loops), dense features, labels and train mask of a step setup."""
    data = setup.data
    return write_npz(
        external.folder,
        stem,
        senders=np.asarray(setup.graph.senders, np.int32),
        receivers=np.asarray(setup.graph.receivers, np.int32),
        num_nodes=np.int64(setup.graph.num_nodes),
        features=np.asarray(setup.dense_features, np.float32),
        labels=np.asarray(data.labels, np.int32),
        train_mask=np.asarray(data.train_mask, bool),
    )


def gcn_peer_rows(
    name: str, setup, external: External, rounds: Rounds, peers_wanted=("dgl", "jraph")
) -> list[dict]:
    """The GCN step (``setup``'s sizes), ours against DGL ``GraphConv`` and Jraph."""
    spec = {
        "data": _training_npz(external, f"gcn-{name}", setup),
        "hidden": setup.hidden,
        "num_layers": setup.num_layers,
        "dropout": setup.dropout,
        "num_classes": setup.num_classes,
        "lr": 0.01,
        "weight_decay": 5e-4,
    }
    step, args = gcn_step(setup)
    labels = {"dgl": "DGL GraphConv", "jraph": "Jraph GraphConvolution + haiku"}
    return interleaved_rows(
        f"gcn step {name}",
        ("sparsegcn", step, args),
        [(labels[p], p, "gcn_step", spec) for p in peers_wanted],
        external,
        rounds,
    )


def gat_peer_rows(root, external: External, rounds: Rounds) -> list[dict]:
    """The Cora GAT step, ours against DGL ``GATConv`` and ``jraph.GAT``."""
    from sparsegcn.datasets import load

    setup = cora_setup(root)
    spec = {
        "data": _training_npz(external, "gat-cora", setup),
        "hidden": 8,
        "heads": 8,
        "dropout": 0.6,
        "num_classes": setup.num_classes,
        "lr": 0.005,
        "weight_decay": 5e-4,
    }
    step, args = registered_step(load("cora", root, download=False), "gat")
    return interleaved_rows(
        "gat step cora",
        ("sparsegcn", step, args),
        [
            ("DGL GATConv", "dgl", "gat_step", spec),
            ("Jraph GAT + haiku (no attention dropout)", "jraph", "gat_step", spec),
        ],
        external,
        rounds,
    )


STEP_GRAPHS = ("auto", "ell", "csr", "edges")


def step_graph(setup, form: str):
    """``setup`` with its propagation graph in ``form``: as set up, or packed
    ELL / packed CSR / the sorted edge list, for side-by-side steps."""
    if form == "auto":
        return setup
    if form == "edges":
        graph = sort_edges(gcn_norm(setup.graph))
    else:
        graph = pack_gcn_norm(setup.graph, format=form)
    return dataclasses.replace(setup, data=setup.data._replace(graph=graph))


def step_rows(
    name: str, setup, repeats: int, device: str = "cpu", forms: tuple[str, ...] = ("auto",)
) -> list[dict]:
    case = f"gcn step {name}"
    rows = []
    for form in forms:
        step, args = gcn_step(step_graph(setup, form))
        timing = measure(step, args, repeats=repeats, warmup=2)
        label = "sparsegcn" if form == "auto" else f"sparsegcn ({form})"
        rows.append(_row(case, label, list(timing.times_s), f"compile {timing.compile_s:.1f} s"))
    if peers.have_pyg():
        data = setup.data
        run = peers.pyg_gcn_step(
            setup.graph,
            setup.dense_features,
            np.asarray(data.labels),
            np.asarray(data.train_mask),
            setup.num_classes,
            hidden=setup.hidden,
            num_layers=setup.num_layers,
            dropout=setup.dropout,
            device=device,
        )
        rows.append(_row(case, "PyG GCNConv", time_python(run, repeats, warmup=2), _on(device)))
    return rows


def gat_rows(root, repeats: int, device: str = "cpu") -> list[dict]:
    """The Cora GAT training step (Veličković et al.'s setup), ours and PyG's GATConv."""
    from sparsegcn.datasets import load

    dataset = load("cora", root, download=False)
    rows = []
    for name in ("gat", "gatv2"):
        step, args = registered_step(dataset, name)
        timing = measure(step, args, repeats=repeats, warmup=2)
        rows.append(
            _row(
                f"{name} step cora",
                "sparsegcn",
                list(timing.times_s),
                f"compile {timing.compile_s:.1f} s",
            )
        )
        if peers.have_pyg():
            setup = cora_setup(root)
            data = setup.data
            run = peers.pyg_gat_step(
                setup.graph,
                setup.dense_features,
                np.asarray(data.labels),
                np.asarray(data.train_mask),
                setup.num_classes,
                device=device,
                v2=name == "gatv2",
            )
            label = "PyG GATv2Conv" if name == "gatv2" else "PyG GATConv"
            rows.append(
                _row(f"{name} step cora", label, time_python(run, repeats, warmup=2), _on(device))
            )
    return rows


def sage_rows(
    root: str,
    external: External,
    rounds: Rounds,
    *,
    scale: float = 1.0,
    fanouts: tuple[int, ...] = (15, 10, 5),
    batch_size: int = 1024,
    hidden: int = 256,
    dropout: float = 0.5,
    lr: float = 0.003,
    samplers: tuple[str, ...] = ("tree",),
    epoch: bool = False,
) -> list[dict]:
    """Mini-batch GraphSAGE training batches on the ogbn-products-sized graph.

    ``samplers`` picks our rows: ``tree`` (a row per sampled path) and
    ``dedup`` (a row per distinct node per hop, DGL's blocks; capped per hop
    at the largest count over 20 probe batches of another epoch, +5%, as
    ``benchmarks/sampler_dedup_vs_tree.py`` does).

    Ours is one compiled step (sampling inside, forward, backward, Adam;
    ``benchmarks/sage_products_epoch.py`` runs the same step in a scan over
    an epoch) on one fixed batch of ``batch_size`` seeds; DGL's draws each
    batch from its ``DataLoader`` (host-side ``NeighborSampler``, same hop
    fanouts, seeds' hop first), gathers the input rows and trains 3
    ``SAGEConv(mean)`` layers. Rows report batches/s and the epoch that
    ``ceil(train / batch_size)`` batches project; ours counts the tree slots
    a batch computes on (fixed), DGL the distinct input rows and block edges
    of the batches it timed (they vary; medians).

    With ``epoch``, one whole epoch of each side follows the rounds, in
    the same run: ours one compiled ``lax.scan`` over every batch (the
    first sampler's), compiled apart; DGL one full pass of its
    ``DataLoader`` (after one untimed batch). Their rows' ``median_ms`` is
    the epoch's wall time.
    """
    from sampler_dedup_vs_tree import probe_caps

    import sparsegcn as sg
    from sparsegcn.datasets import load
    from sparsegcn.sampling import dedup_sizes, tree_sizes
    from sparsegcn.train import (
        NodeData,
        TrainConfig,
        apply_optimizer,
        index_mask,
        init_state,
        make_optimizer,
    )
    from sparsegcn.train.minibatch import (
        effective_batch_size,
        first_batch,
        make_grad_fn,
        minibatch_data,
        steps_per_epoch,
        train_epoch,
    )

    dataset = load("synthetic:products", root, scale=scale)
    n = dataset.num_nodes
    labels = np.maximum(dataset.labels, 0).astype(np.int32)
    train = np.asarray(dataset.split["train"])
    data = jax.device_put(
        minibatch_data(
            NodeData(
                graph=dataset.graph,
                features=sg.as_features(dataset.features, n),
                labels=labels,
                train_mask=index_mask(train, n),
                val_mask=index_mask(dataset.split["valid"], n),
                test_mask=index_mask(dataset.split["test"], n),
            )
        )
    )
    batch_size = effective_batch_size(len(train), batch_size)
    steps = steps_per_epoch(len(train), batch_size)
    model = sg.sage(
        dataset.num_features,
        dataset.num_classes,
        hidden=hidden,
        num_layers=len(fanouts),
        dropout_rate=dropout,
    )
    tx = make_optimizer(TrainConfig(learning_rate=lr, weight_decay=0.0, decay_layers="none"))
    state = init_state(model, tx, jax.random.key(0))
    batch = first_batch(jax.random.key(1), data.train_nodes, batch_size)
    ours, slots, caps_of = [], {}, {}
    for sampler in samplers:
        caps = None
        if sampler == "dedup":
            caps = probe_caps(fanouts, batch_size, data, jax.random.key(3), 20, 1.05)
        caps_of[sampler] = caps
        grad_fn = make_grad_fn(model, fanouts, sampler=sampler, caps=caps)

        def step(params, opt_state, data, batch, key, grad_fn=grad_fn):
            loss, grads = grad_fn(params, data, batch, key)
            params, opt_state = apply_optimizer(tx, grads, opt_state, params)
            return params, opt_state, loss

        label = "sparsegcn" if sampler == "tree" else f"sparsegcn {sampler} sampler, caps {caps}"
        args = (state.params, state.opt_state, data, batch, jax.random.key(2))
        ours.append((label, step, args))
        if sampler == "dedup":
            sizes = dedup_sizes(batch_size, fanouts, num_nodes=n, caps=caps)
        else:
            sizes = tree_sizes(batch_size, fanouts)
        slots[label] = (sampler, list(sizes))

    spec = {
        "data": write_npz(
            external.folder,
            "sage-products",
            senders=np.asarray(dataset.graph.senders, np.int32),
            receivers=np.asarray(dataset.graph.receivers, np.int32),
            num_nodes=np.int64(n),
            features=np.asarray(dataset.features, np.float32),
            labels=labels,
            train_nodes=train.astype(np.int64),
        ),
        "fanouts": list(fanouts),
        "batch_size": batch_size,
        "hidden": hidden,
        "dropout": dropout,
        "lr": lr,
        "num_classes": dataset.num_classes,
    }
    case = (
        f"sage batch products-sized x{scale:g} (N={n}, {dataset.graph.num_edges} stored edges), "
        f"fanouts {','.join(map(str, fanouts))}, batch {batch_size}, hidden {hidden}"
    )
    rows = interleaved_rows(
        case,
        ours,
        [("DGL NeighborSampler + SAGEConv(mean)", "dgl", "sage_batch", spec)],
        external,
        rounds,
    )
    if epoch:
        sampler = samplers[0]
        epoch_grad_fn = make_grad_fn(model, fanouts, sampler=sampler, caps=caps_of[sampler])

        def one_epoch(params, opt_state, data, key):
            return train_epoch(epoch_grad_fn, tx, batch_size, params, opt_state, data, key)

        epoch_args = (state.params, state.opt_state, data, jax.random.key(4))
        tick = time.perf_counter()
        compiled = jax.jit(one_epoch).lower(*epoch_args).compile()
        compile_s = time.perf_counter() - tick
        tick = time.perf_counter()
        jax.block_until_ready(compiled(*epoch_args))
        wall = time.perf_counter() - tick
        epoch_case = f"sage epoch products-sized x{scale:g}, {steps} batches of {batch_size}"
        rows.append(
            _row(
                epoch_case,
                f"sparsegcn ({sampler} sampler), one compiled scan",
                [wall],
                f"compile {compile_s:.1f} s; {1e3 * wall / steps:.0f} ms a batch",
            )
        )
        peer = external.peers.get("dgl", "dgl not requested")
        impl = "DGL NeighborSampler + SAGEConv(mean), one DataLoader pass"
        try:
            if isinstance(peer, str):
                raise PeerError(peer)
            info = peer.setup("sage_epoch", warmup=0, **spec)
            answer = peer.time("sage_epoch", 1)
            (dgl_wall,) = answer["times_s"]
            batches = answer["stats"].get("batches")
            rows.append(
                _row(
                    epoch_case,
                    impl,
                    [dgl_wall],
                    f"setup {info['setup_s']:.1f} s; {batches} batches, "
                    f"{1e3 * dgl_wall / max(batches or 1, 1):.0f} ms a batch",
                )
            )
        except PeerError as err:
            rows.append(_missing_row(epoch_case, impl, str(err)))
    for row in rows:
        if row["median_ms"] is None or row["case"].startswith("sage epoch"):
            continue
        seconds = row["median_ms"] / 1e3
        row["batches_per_s"] = 1 / seconds
        row["projected_epoch_s"] = steps * seconds
        row["steps_per_epoch"] = steps
        stats = row.pop("stats", None)
        if stats:
            row["per_batch"] = {
                key: float(np.median(values)) for key, values in stats.items() if values
            }
            row["note"] += (
                f"; median {row['per_batch']['input_rows']:.0f} distinct input rows, "
                f"{row['per_batch']['block_edges']:.0f} block edges a batch"
            )
        elif row["impl"] in slots:
            sampler, sizes = slots[row["impl"]]
            kind = "tree slots" if sampler == "tree" else "padded dedup rows"
            row["per_batch"] = {"sampler": sampler, "rows": sizes, "rows_total": sum(sizes)}
            row["note"] += f"; {sum(sizes)} {kind} a batch {sizes}"
        row["note"] += f"; {row['batches_per_s']:.2f} batches/s, epoch ~{steps * seconds:.0f} s"
    return rows


def format_rows(rows: list[dict]) -> str:
    reference = {}
    for r in rows:
        reference.setdefault(r["case"], r["median_ms"])  # ours (first) per case
    lines = [f"{'case':44s} {'implementation':34s} {'median ms':>10s} {'vs ours':>8s}"]
    for r in rows:
        if r["median_ms"] is None:
            lines.append(f"{r['case']:44s} {r['impl']:34s} {'-':>10s} {'-':>8s} {r['note']}")
            continue
        ratio = r["median_ms"] / reference[r["case"]]
        lines.append(
            f"{r['case']:44s} {r['impl']:34s} {r['median_ms']:10.2f} {ratio:7.2f}x {r['note']}"
        )
    return "\n".join(lines)


PARTS = ("propagation", "steps", "gat", "sage", "graph", "gae", "mag", "proteins")
PEER_NAMES = ("dgl", "jraph", "pyg")
# The out-of-process peers each part runs.
PART_PEERS = {
    "propagation": ("dgl", "jraph"),
    "steps": ("dgl", "jraph"),
    "gat": ("dgl", "jraph"),
    "sage": ("dgl", "jraph"),
    "graph": ("dgl", "jraph", "pyg"),
    "gae": ("pyg",),
    "mag": ("dgl",),
    "proteins": ("pyg", "dgl"),
}


def inputs_read(parts, args) -> list[tuple[str, Path | None]]:
    """The dataset folders the chosen parts read (which the outputs must not replace)."""
    inputs = []
    if {"steps", "gat"} & set(parts) and shared_data_root() is not None:
        inputs.append(("Cora", data_location("cora", shared_data_root())))
    if "gae" in parts and (args.gae_root or shared_data_root()) is not None:
        inputs.append(("Cora (gae)", data_location("cora", args.gae_root or shared_data_root())))
    if "sage" in parts and args.sage_root is not None:
        inputs.append(("synthetic:products", data_location("synthetic:products", args.sage_root)))
    if "graph" in parts and "mutag" in args.graph_datasets:
        from graph_compare import tu_root

        found = tu_root(args.graph_root)
        if found is not None:
            inputs.append(("MUTAG", data_location("tu:MUTAG", found)))
    return inputs


def run_parts(parts, args, device, forms, external: External, parser) -> list[dict]:
    rounds = Rounds(args.rounds, args.per_round)
    rows = []
    if "propagation" in parts:
        for kind in ("random", "sbm"):
            rows += propagation_rows(
                kind, args.nodes, args.degree, args.features, args.repeats, device, external, rounds
            )
    if "gat" in parts or "steps" in parts:
        root = shared_data_root()
        if root is None and "gat" in parts:
            parser.error("the GAT step needs Cora: set SPARSEGCN_TEST_DATA")
    if "steps" in parts:
        if root is not None:
            setup = cora_setup(root)
            rows += step_rows("cora", setup, max(args.repeats, 50), device, forms)
            rows += gcn_peer_rows("cora", setup, external, Rounds(rounds.rounds, 20))
        else:
            print("note: Cora files not found; Cora step skipped", file=sys.stderr)
    if ("gat" in parts or "steps" in parts) and root is not None:
        rows += gat_rows(root, max(args.repeats, 50), device)
        rows += gat_peer_rows(root, external, Rounds(rounds.rounds, 20))
    if "steps" in parts:
        setup = arxiv_like_setup(scale=args.arxiv_scale)
        name = f"arxiv-sized x{args.arxiv_scale:g}"
        rows += step_rows(
            name,
            setup,
            args.repeats if device == "cuda" else min(args.repeats, 3),
            device,
            forms,
        )
        rows += gcn_peer_rows(name, setup, external, Rounds(rounds.rounds, 1), ("jraph",))
    if "sage" in parts:
        rows += sage_rows(
            args.sage_root,
            external,
            rounds,
            scale=args.sage_scale,
            samplers=args.sage_samplers,
            epoch=args.sage_epoch,
        )
    if "graph" in parts:
        from graph_compare import graph_rows

        rows += graph_rows(
            external,
            rounds,
            datasets=args.graph_datasets,
            root=args.graph_root,
            num_graphs=args.graph_graphs,
            members=args.graph_members,
            torch_threads=args.graph_torch_threads,
        )
    if "gae" in parts:
        from gae_compare import gae_rows

        root = args.gae_root or shared_data_root()
        if root is None:
            parser.error("the gae part needs Cora: --gae-root or $SPARSEGCN_TEST_DATA")
        rows += gae_rows(root, external, rounds, full=not args.gae_sampled_only)
    if "mag" in parts:
        from hetero_compare import mag_rows

        rows += mag_rows(external, rounds, scale=args.mag_scale, batches=args.mag_batches)
    if "proteins" in parts:
        from proteins_compare import proteins_rows

        rows += proteins_rows(
            external,
            rounds,
            scale=args.proteins_scale,
            hidden=args.proteins_hidden,
            layers=args.proteins_layers,
            peers=args.proteins_peers,
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        metavar="A,B",
        help=f"run these parts of {PARTS} (default: propagation,steps; sage, graph, gae, mag "
        "and proteins only when named)",
    )
    add_graph_arguments(parser)
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per measurement")
    parser.add_argument("--arxiv-scale", type=float, default=1.0, help="shrink the arxiv step")
    parser.add_argument(
        "--torch-device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where the torch peers run (default: cuda when JAX runs on a GPU torch sees)",
    )
    parser.add_argument(
        "--step-graphs",
        default="auto",
        metavar="A,B",
        help=f"graph forms our GCN steps run on, side by side, from {STEP_GRAPHS} "
        "(default: auto, the library's choice for this platform)",
    )
    for name in PEER_NAMES:
        parser.add_argument(
            f"--{name}-python",
            metavar="PATH",
            help=f"the Python of {name}'s own environment "
            f"(default: $SPARSEGCN_{name.upper()}_PYTHON; unset: its rows say missing)",
        )
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds (ours, DGL, Jraph) per case"
    )
    parser.add_argument("--per-round", type=int, default=3, help="calls per side in each round")
    parser.add_argument(
        "--sage-root", default=None, help="data root for the synthetic products cache (sage part)"
    )
    parser.add_argument(
        "--sage-scale", type=float, default=1.0, help="shrink the products-sized graph"
    )
    parser.add_argument(
        "--sage-samplers",
        default="tree",
        type=lambda v: tuple(p.strip() for p in v.split(",") if p.strip()),
        help="our samplers in the sage part, side by side: tree, dedup (default: tree)",
    )
    parser.add_argument(
        "--sage-epoch",
        action="store_true",
        help="sage part: after the rounds, time one whole epoch of ours (the first sampler) "
        "and of DGL, in the same run",
    )
    parser.add_argument(
        "--graph-datasets",
        default="synthetic,mutag",
        type=lambda v: tuple(p.strip() for p in v.split(",") if p.strip()),
        help="graph part: datasets, from synthetic (PROTEINS-like) and mutag "
        "(default: synthetic,mutag)",
    )
    parser.add_argument(
        "--graph-root",
        default=None,
        help="graph part: the data root holding tu/MUTAG (default: $SPARSEGCN_TEST_DATA, "
        "$SPARSEGCN_DATA, ../shared/data)",
    )
    parser.add_argument(
        "--graph-graphs", type=int, default=1113, help="graph part: graphs of the synthetic set"
    )
    parser.add_argument(
        "--graph-members",
        type=int,
        default=10,
        help="graph part: models in our vmapped row (1: no such row) (default: 10)",
    )
    parser.add_argument(
        "--graph-torch-threads",
        type=int,
        default=None,
        help="graph part: torch threads of the PyG and DGL peers (default: every core)",
    )
    parser.add_argument(
        "--gae-root",
        default=None,
        help="gae part: the data root holding planetoid/ind.cora.* (default: "
        "$SPARSEGCN_TEST_DATA, $SPARSEGCN_DATA, ../shared/data)",
    )
    parser.add_argument(
        "--gae-sampled-only",
        action="store_true",
        help="gae part: leave out our recon=full row",
    )
    parser.add_argument(
        "--mag-scale", type=float, default=1.0, help="mag part: shrink synthetic:mag (0, 1]"
    )
    parser.add_argument(
        "--mag-batches",
        type=int,
        default=5,
        help="mag part: training batches a timed call, each side (default: 5)",
    )
    parser.add_argument(
        "--proteins-scale",
        type=float,
        default=1.0,
        help="proteins part: shrink synthetic:proteins (0, 1]",
    )
    parser.add_argument(
        "--proteins-hidden", type=int, default=256, help="proteins part: hidden width (256)"
    )
    parser.add_argument(
        "--proteins-layers", type=int, default=3, help="proteins part: SAGE layers (3)"
    )
    parser.add_argument(
        "--proteins-peers",
        default="pyg,dgl",
        type=lambda v: tuple(p.strip() for p in v.split(",") if p.strip()),
        help="proteins part: the peers, one after the other (default: pyg,dgl)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    parser.add_argument(
        "--default-malloc",
        action="store_true",
        help="leave glibc's malloc as it is (by default freed memory is kept for reuse, as the "
        "sparsegcn command does; see sparsegcn.allocator)",
    )
    args = parser.parse_args(argv)
    parts = tuple(p.strip() for p in (args.only or "propagation,steps").split(",") if p.strip())
    for position, part in enumerate(parts):
        if part not in PARTS:
            parser.error(f"--only[{position}] = {part!r} is not one of {PARTS}")
    for name in ("rounds", "per_round"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not args.sage_scale > 0:
        parser.error(f"--sage-scale must be > 0, got {args.sage_scale}")
    for position, sampler in enumerate(args.sage_samplers):
        if sampler not in ("tree", "dedup"):
            parser.error(f"--sage-samplers[{position}] = {sampler!r} is not tree or dedup")
    if "sage" in parts and args.sage_root is None:
        parser.error("the sage part needs --sage-root (where the synthetic graph is cached)")
    for position, name in enumerate(args.graph_datasets):
        if name not in ("synthetic", "mutag"):
            parser.error(f"--graph-datasets[{position}] = {name!r} is not synthetic or mutag")
    if args.graph_graphs < 2:
        parser.error(f"--graph-graphs must be >= 2, got {args.graph_graphs}")
    if args.graph_torch_threads is not None and args.graph_torch_threads < 1:
        parser.error(f"--graph-torch-threads must be >= 1, got {args.graph_torch_threads}")
    if (
        args.gae_root is not None
        and not (Path(args.gae_root) / "planetoid" / "ind.cora.x").exists()
    ):
        parser.error(f"--gae-root {args.gae_root!r} holds no planetoid/ind.cora.x")
    if args.graph_members < 1:
        parser.error(f"--graph-members must be >= 1, got {args.graph_members}")
    for name in ("mag_scale", "proteins_scale"):
        if not 0 < getattr(args, name) <= 1:
            parser.error(f"--{name.replace('_', '-')} must be in (0, 1], got {getattr(args, name)}")
    for name in ("mag_batches", "proteins_hidden", "proteins_layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for position, name in enumerate(args.proteins_peers):
        if name not in PART_PEERS["proteins"]:
            parser.error(f"--proteins-peers[{position}] = {name!r} is not pyg or dgl")
    try:
        check_outputs({"--json": args.json}, inputs_read(parts, args))
    except (OSError, ValueError) as err:
        parser.error(str(err))
    if not args.default_malloc:
        keep_freed_memory()
    if not peers.have_pyg() and set(parts) & {"propagation", "steps"}:
        print("note: torch_geometric not installed; PyG rows skipped", file=sys.stderr)
    device = peers.torch_device(args.torch_device)
    forms = tuple(f.strip() for f in args.step_graphs.split(",") if f.strip())
    for position, form in enumerate(forms):
        if form not in STEP_GRAPHS:
            parser.error(f"--step-graphs[{position}] = {form!r} is not one of {STEP_GRAPHS}")
    with tempfile.TemporaryDirectory(prefix="sparsegcn-peers-") as folder:
        part_peers = {**PART_PEERS, "proteins": args.proteins_peers}
        wanted = tuple(
            name for name in PEER_NAMES if any(name in part_peers[part] for part in parts)
        )
        external = External(
            {name: start_peer(name, getattr(args, f"{name}_python")) for name in wanted},
            folder,
        )
        try:
            rows = run_parts(parts, args, device, forms, external, parser)
        finally:
            external.close()
    print(format_rows(rows))
    machine = machine_info()
    print(
        f"machine: {machine['cpu']}, {machine['cpu_count']} cores, load {machine['load_average']}"
    )
    if args.json:
        versions = {
            name: peer.versions if isinstance(peer, PeerProcess) else f"missing: {peer}"
            for name, peer in external.peers.items()
        }
        write_json_atomic(
            args.json,
            {
                "command": " ".join(["python", *sys.argv]),
                "rows": rows,
                "machine": machine,
                "torch_device": device,
                "peers": versions,
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``graph`` part of ``compare.py``: GIN training throughput, ours against PyG, DGL, Jraph.

One epoch of graph classification a call on every side: forward, backward
and an Adam update over every training graph once, in batches of 32. The
model is Xu et al.'s GIN-0 (5 layers counting the input, hidden 64, an MLP
``Linear, BN, ReLU, Linear`` then BN and ReLU in each layer, a sum readout
of every layer, each through its own linear head, dropout 0.5 on the
scores), Adam at 0.01. Every side reads the same ``.npz``
(:mod:`graph_data`): the same graphs, features, labels and training graphs.

- **ours**: the sparsegcn graph trainer's epoch program
  (:func:`sparsegcn.train.graphs.make_epochs_fn`, one epoch a call, no
  evaluation), on the batches :func:`~sparsegcn.train.graphs.member_batches`
  packed once (its packings, used in turn), compiled apart; and, as a
  second row in its own case, ``members`` models (seeds) trained together as
  one ``vmap``-ed program, counting every member's graphs.
- **PyG** (``pyg_peer.py``): ``DataLoader`` + ``GINConv`` + ``global_add_pool``.
- **DGL** (``dgl_peer.py``): ``GraphDataLoader`` + ``GINConv`` + ``SumPooling``.
  PyG's and DGL's loaders collate each batch on the host; that is timed, as
  it is their real cost.
- **Jraph** (``jraph_peer.py``): a jitted step per batch on batches that
  ``jraph.dynamically_batch`` packs (``pad_with_graphs``) under our budgets;
  packed on the host every epoch, as jraph's examples do, and, as another
  row, packed once and kept on the device.

Datasets: ``synthetic`` (:func:`graph_data.synthetic_tu`, PROTEINS-like:
1,113 graphs, 1,002 train) and ``mutag`` (``tu:MUTAG``, 188 graphs, 170
train) when its files are found. Rows carry ``graphs_per_s`` (training
graphs of an epoch over the median epoch time) and ``ours_speedup`` (ours'
graphs/s over theirs, same rounds).

The peers' graph cases run on the CPU only; where JAX sees a GPU, ours would
run there, so compare on the CPU (``JAX_PLATFORMS=cpu``).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from graph_data import graph_arrays, size_stats, synthetic_tu

GRAPH_DATASETS = ("synthetic", "mutag")

REPO = Path(__file__).resolve().parents[2]


def tu_root(given: str | None = None) -> Path | None:
    """The data root holding ``tu/MUTAG``: ``given``, else ``$SPARSEGCN_TEST_DATA``,
    ``$SPARSEGCN_DATA``, the repository's ``../shared/data`` or ``./datasets``."""
    candidates = [
        given,
        os.environ.get("SPARSEGCN_TEST_DATA"),
        os.environ.get("SPARSEGCN_DATA"),
        REPO.parent / "shared" / "data",
        REPO / "datasets",
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "tu" / "MUTAG" / "MUTAG_A.txt").exists():
            return Path(candidate)
    return None


def mutag_arrays(root) -> dict[str, np.ndarray]:
    """MUTAG in :mod:`graph_data`'s layout (features as sparsegcn reads them)."""
    from sparsegcn.datasets.graphs import load_graphs

    d = load_graphs("tu:MUTAG", root, download=False)
    return graph_arrays(
        d.senders, d.receivers, d.node_ptr, d.edge_ptr, d.features, d.labels, d.num_classes
    )


def as_dataset(arrays: dict, name: str):
    """A :class:`~sparsegcn.datasets.graphs.GraphDataset` of :mod:`graph_data` arrays."""
    from sparsegcn.datasets.graphs import GraphDataset

    classes = int(arrays["num_classes"])
    return GraphDataset(
        name=name,
        senders=np.asarray(arrays["senders"], np.int32),
        receivers=np.asarray(arrays["receivers"], np.int32),
        node_ptr=np.asarray(arrays["node_ptr"], np.int64),
        edge_ptr=np.asarray(arrays["edge_ptr"], np.int64),
        features=np.asarray(arrays["features"], np.float32),
        labels=np.asarray(arrays["labels"], np.int32),
        num_classes=classes,
        classes=np.arange(classes),
    )


def ours_epoch(
    arrays: dict,
    *,
    hidden: int = 64,
    num_layers: int = 5,
    dropout: float = 0.5,
    lr: float = 0.01,
    batch_size: int = 32,
    members: int = 1,
    packing: str = "balanced",
):
    """Our trainer's one-epoch program on the ``.npz`` arrays' training graphs.

    Args:
      arrays: :mod:`graph_data` arrays.
      hidden, num_layers, dropout, lr, batch_size: the model and optimizer.
      members: models trained together (seeds ``0 .. members-1`` on the same
        training graphs); 1: the plain program, no ``vmap``.
      packing: ``"balanced"`` (the trainer's default: balanced batches under
        the budget they need, :func:`~sparsegcn.batch.fit_budget`) or
        ``"random"`` (random batches under :func:`~sparsegcn.batch.choose_budget`).

    Returns:
      ``(fn, args, info)``: ``jax.jit(fn)(*args)`` runs one epoch (training
      only; the evaluation scan has no batches) and returns ``(state,
      metrics)``; ``info`` has ``budget``, ``batches``, ``packings``,
      ``graphs`` (training graphs per epoch, all members), ``node_fill``,
      ``edge_fill``, ``packing`` and ``peer_budget`` (a random batch's
      budget, :func:`~sparsegcn.batch.choose_budget`, which the Jraph peer
      packs its own random batches under).
    """
    from sparsegcn.batch import choose_budget, fit_budget
    from sparsegcn.nn.graph_gin import graph_gin
    from sparsegcn.train.graphs import (
        GraphTrainConfig,
        Splits,
        make_epochs_fn,
        member_batches,
        member_orders,
        pack_steps,
        packing_group,
        packings_for,
        train_fill,
    )

    dataset = as_dataset(arrays, "graph-compare")
    count = dataset.num_graphs
    train_mask = np.zeros((1, count), bool)
    train_mask[0, np.asarray(arrays["train"])] = True
    none = np.zeros_like(train_mask)
    splits = Splits(train_mask, none, none, np.zeros(1, np.int64))
    config = GraphTrainConfig(learning_rate=lr, batch_size=batch_size, packing=packing)
    nodes, edges = dataset.nodes_per_graph(), dataset.edges_per_graph()
    random_budget = choose_budget(nodes, edges, batch_size)
    packings = packings_for(dataset, random_budget, count, batch_size)
    seeds = tuple(range(members))
    orders = member_orders(dataset, splits, seeds, batch_size, packings, packing=packing)
    budget = random_budget
    if packing == "balanced":
        group = packing_group(packing, batch_size)
        budget = fit_budget(nodes, edges, [o for m in orders for o in m], batch_size, group=group)
    train, train_graphs = member_batches(
        dataset, splits, seeds, budget, batch_size, packings, packing=packing, orders=orders
    )
    node_fill, edge_fill = train_fill(dataset, splits, seeds, train)
    no_eval = jax.tree.map(lambda a: a[:0], pack_steps(dataset, np.arange(1), budget, batch_size))
    labels = jnp.asarray(dataset.labels)
    model = graph_gin(
        dataset.features.shape[1],
        dataset.num_classes,
        hidden=hidden,
        num_layers=num_layers,
        dropout_rate=dropout,
    )
    run = make_epochs_fn(model, config, 1, num_graphs=count)
    state = make_state(model, config, seeds)
    valid = jnp.zeros((members, count), bool)
    if members == 1:
        state = jax.tree.map(lambda a: a[0], state)
        train = jax.tree.map(lambda a: a[0], train)
        valid = valid[0]

        def fn(state, train, no_eval, labels, valid):
            return run(state, train, no_eval, labels, valid, valid, jnp.int32(0))

    else:
        program = jax.vmap(run, in_axes=(0, 0, None, None, 0, 0, None))

        def fn(state, train, no_eval, labels, valid):
            return program(state, train, no_eval, labels, valid, valid, jnp.int32(0))

    args = tuple(jax.device_put(a) for a in (state, train, no_eval, labels, valid))
    info = {
        "budget": budget._asdict(),
        "peer_budget": random_budget._asdict(),
        "batches": int(np.shape(train.graph_mask)[-3]),
        "packings": packings,
        "packing": packing,
        "graphs": int(train_graphs.sum()),
        "node_fill": node_fill,
        "edge_fill": edge_fill,
    }
    return fn, args, info


def make_state(model, config, seeds):
    """Stacked member states of each seed, as ``fit_graphs`` makes them."""
    from sparsegcn.train.graphs import init_member

    keys = jnp.stack([jax.random.key(s) for s in seeds])
    return jax.jit(jax.vmap(lambda k: init_member(model, config, k)))(keys)


def graph_rows(
    external,
    rounds,
    *,
    datasets=GRAPH_DATASETS,
    root=None,
    num_graphs: int = 1113,
    hidden: int = 64,
    num_layers: int = 5,
    batch_size: int = 32,
    dropout: float = 0.5,
    lr: float = 0.01,
    members: int = 10,
    torch_threads: int | None = None,
) -> list[dict]:
    """Every dataset's rows: ours, then PyG, DGL and Jraph (two rows), interleaved.

    ``external`` and ``rounds`` are ``compare.py``'s :class:`External` and
    :class:`Rounds`; each timed call is one epoch. ``torch_threads`` sets the
    PyG and DGL peers' torch threads (default: theirs, every core; on a
    loaded machine torch's OpenMP threads, spinning at their barriers, can
    make an epoch 50 times slower than one thread does). A dataset whose files are
    missing is a note on stderr, not a row.
    """
    from compare import interleaved_rows
    from peer_process import write_npz

    rows = []
    for name in datasets:
        if name == "synthetic":
            arrays = synthetic_tu(num_graphs)
            label = f"synthetic PROTEINS-like ({num_graphs} graphs)"
        elif name == "mutag":
            found = tu_root(root)
            if found is None:
                print("note: tu/MUTAG not found (--graph-root); MUTAG rows skipped")
                continue
            arrays = mutag_arrays(found)
            label = "tu:MUTAG (188 graphs)"
        else:
            raise ValueError(f"graph dataset {name!r} is not one of {GRAPH_DATASETS}")
        shape = size_stats(arrays)
        settings = dict(
            hidden=hidden, num_layers=num_layers, dropout=dropout, lr=lr, batch_size=batch_size
        )
        fn, args, info = ours_epoch(arrays, **settings)
        ours = [("sparsegcn (one compiled epoch)", fn, args)]
        if members > 1:
            many_fn, many_args, many_info = ours_epoch(arrays, members=members, **settings)
            ours.append((f"sparsegcn, {members} models in one vmapped program", many_fn, many_args))
        spec = {
            "data": write_npz(external.folder, f"graphs-{name}", **arrays),
            "budget": info["peer_budget"],
            "torch_threads": torch_threads,
            **settings,
        }
        case = (
            f"gin epoch {label}, {shape['train_graphs']} train graphs, "
            f"hidden {hidden}, batch {batch_size}"
        )
        found_rows = interleaved_rows(
            case,
            ours,
            [
                ("PyG DataLoader + GINConv + global_add_pool", "pyg", "gin_epoch", spec),
                ("DGL GraphDataLoader + GINConv + SumPooling", "dgl", "gin_epoch", spec),
                ("Jraph dynamically_batch every epoch + jit step", "jraph", "gin_epoch", spec),
                ("Jraph batches packed once + jit step", "jraph", "gin_epoch_prebatched", spec),
            ],
            external,
            rounds,
        )
        counts = {found_rows[0]["impl"]: info["graphs"]}
        if members > 1:
            counts[found_rows[1]["impl"]] = many_info["graphs"]
        rows += finish_rows(found_rows, counts, shape, info, members)
    return rows


def finish_rows(rows: list[dict], counts: dict, shape: dict, info: dict, members: int):
    """Adds graphs/s, and ours' speed-up over each peer, to the rows of one dataset.

    Args:
      rows: ``interleaved_rows``' rows: ours (one model) first, then, when
        ``members > 1``, our vmapped row, then the peers'.
      counts: training graphs an epoch of each of our rows, by ``impl``.
      shape: the dataset's :func:`graph_data.size_stats`.
      info: :func:`ours_epoch`'s info of the one-model row.
      members: models in the vmapped row (1: none).

    Returns:
      The rows, the vmapped one last in a case of its own (``case | N
      models``) with its graphs/s over one model's, not a speed-up.
    """
    graphs = counts[rows[0]["impl"]]
    for row in rows:
        row["dataset"] = shape
        if row["median_ms"] is None:
            continue
        stats = row.pop("stats", {}) or {}
        seen = counts.get(row["impl"], stats.get("graphs"))
        row["graphs_per_epoch"] = seen
        if seen is not None and seen != graphs and row["impl"] not in counts:
            row["note"] += f"; WARNING: {seen} graphs an epoch, ours {graphs}"
        row["batches_per_epoch"] = stats.get("batches", info["batches"])
        if stats.get("torch_threads") is not None:
            row["torch_threads"] = stats["torch_threads"]
            row["note"] += f"; {stats['torch_threads']} torch threads"
        row["graphs_per_s"] = (seen or graphs) / (row["median_ms"] / 1e3)
    ours = rows[0]
    ours["budget"], ours["packings"] = info["budget"], info["packings"]
    ours["note"] += f"; {info['batches']} batches, node fill {info['node_fill']:.2f}"
    many = rows[1] if members > 1 and len(rows) > 1 else None
    for row in rows:
        if row.get("graphs_per_s"):
            if row is not many:
                row["ours_speedup"] = ours["graphs_per_s"] / row["graphs_per_s"]
            row["note"] += f"; {row['graphs_per_s']:.0f} graphs/s"
    if many is None:
        return rows
    many["case"] = f"{many['case']} | {members} models"
    if many.get("graphs_per_s"):
        many["vs_one_model"] = many["graphs_per_s"] / ours["graphs_per_s"]
        many["note"] += (
            f"; {many['vs_one_model']:.2f}x one model's graphs/s"
            " (timed in the same rounds as the rows above)"
        )
    return [rows[0], *rows[2:], many]


__all__ = [
    "GRAPH_DATASETS",
    "as_dataset",
    "finish_rows",
    "graph_rows",
    "make_state",
    "mutag_arrays",
    "ours_epoch",
    "tu_root",
]

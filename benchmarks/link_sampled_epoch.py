"""Sampled link prediction on ``synthetic:citation2``: ours against DGL, one run.

Issue 24's case: GraphSAGE 3 × 256 (mean aggregator), fanouts 15,10,5,
batches of 1,024 seed edges with one uniform negative each, Adam, a
dot-product decoder; the sampled epoch's time, each side's peak resident
set, and ours' MRR against the 1,000 sampled negatives of each test source
(ogbl-citation2's protocol).

- **ours**: :func:`sparsegcn.train.links.sampled_link_step`, the step that
  :func:`~sparsegcn.train.links.fit_links_sampled` scans over an epoch
  (fresh negatives drawn on the device, the endpoints' neighbour trees,
  encoder, decoder, loss, Adam), jitted with params and Adam state donated,
  compiled ahead of time (compile time apart), called once a batch and
  timed after ``block_until_ready``. Seed edges are drawn uniformly from
  the train pairs (a batch's host-side gather is inside the timing);
  weights ``1 / B`` (the batch's mean, DGL's loss up to a factor 2).
  Negatives (``--negatives``): uniform node pairs that are no train edge
  (``pairs``, 4 endpoints a seed edge), or, as DGL draws them, the seed
  edge's source with a uniform target it has no train edge to (``targets``,
  3 endpoints).
- **DGL** 2.1 (``benchmarks/peers/link_dgl.py``, in its own process and
  environment, :mod:`peer_protocol`): ``as_edge_prediction_sampler``
  over ``NeighborSampler`` with ``Uniform(1)`` negatives (a seed edge's
  source with a uniform target), ``SAGEConv(mean)``, same widths, loss and
  Adam, one batch a call, timed the same way.

Our ``--fanouts 15,10,5`` samples 15 neighbours of each seed, then 10 of
each of those, then 5 (the CLI's order, seeds outwards); DGL's
``NeighborSampler`` list runs from the input layer to the seeds, so it is
given the reversed list (``[5, 10, 15]``) to sample the same counts per hop
(``--dgl-order as-given`` passes ``15,10,5`` as written instead).

Rounds alternate (ours ``--per-round`` batches, then DGL's); each side's
first batches are untimed. The median batch times ``ceil(P / B)`` batches
is the projected epoch (``P`` train pairs). Peak RSS: ours
``ru_maxrss`` of this process (loading the dataset included), DGL's of its
process (building its graph included). After the timed rounds ours trains
``--train-batches`` more batches, embeds every node layer by layer on the
full graph (:class:`~sparsegcn.sampling.ChunkedGraph`, bounded memory) and
ranks each test source's true target among its 1,000 negatives
(:func:`sparsegcn.metrics.mrr`, in chunks of sources).

Run: ``python benchmarks/link_sampled_epoch.py --scale 0.1`` (``--scale 1``
is full size: about 3.6 GiB of data, generated on first use into
``--root`` and memory-mapped afterwards). Writes
``benchmarks/results/link-sampled-citation2-<scale>[-loaded].json``
("loaded" when the 1-minute load average passed 1.5 during the run); either name
already there is refused before the run (``--out`` that path replaces it).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import platform
import resource
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

RSS_TARGET_GB = 20.0


def rss_gb() -> tuple[float, float]:
    """``(current, peak)`` resident set of this process, GB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e9, peak


class LoadWatch:
    """Samples the 1-minute load average every ``every`` seconds in a thread."""

    def __init__(self, every: float = 5.0):
        self.samples = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def _run(self, every):
        while not self._stop.wait(every):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])
        return {
            "start": self.samples[0],
            "end": self.samples[-1],
            "max": max(self.samples),
            "mean": sum(self.samples) / len(self.samples),
        }


def machine() -> dict:
    import jax

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    with open("/proc/meminfo") as f:
        total = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gb": total * 1024 / 1e9,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "device": jax.devices()[0].device_kind,
    }


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--root", default=os.environ.get("SPARSEGCN_DATA", "datasets"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--sampler", choices=("tree", "dedup"), default="tree")
    p.add_argument(
        "--negatives",
        choices=("pairs", "targets"),
        default="pairs",
        help="uniform node pairs, or each seed edge's source with a uniform target (DGL's)",
    )
    p.add_argument(
        "--caps",
        default=None,
        help="dedup: per-hop frontier caps A,B,C, or 'auto' (probe_caps: 15 %% above the most "
        "distinct nodes 4 uncapped probe batches reach)",
    )
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of timed batches")
    p.add_argument("--per-round", type=int, default=5, help="timed batches per side per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches per side first")
    p.add_argument(
        "--train-batches", type=int, default=200, help="more batches before the MRR (0: none)"
    )
    p.add_argument(
        "--mrr-sources", type=int, default=0, help="test sources ranked (0: all, -1: no MRR)"
    )
    p.add_argument("--mrr-chunk", type=int, default=256, help="test sources scored at once")
    p.add_argument(
        "--mrr-embed",
        choices=("chunked", "sampled"),
        default="chunked",
        help="embed every node with all neighbours, layer by layer (chunked), or only the "
        "ranked nodes on sampled neighbourhoods (the training sampler, fanouts and caps)",
    )
    p.add_argument(
        "--dgl-python",
        default=os.environ.get("SPARSEGCN_DGL_PYTHON"),
        help="the Python of DGL's own environment (default: $SPARSEGCN_DGL_PYTHON; unset: no DGL)",
    )
    p.add_argument("--dgl-order", choices=("per-hop", "as-given"), default="per-hop")
    p.add_argument("--dgl-threads", type=int, default=0, help="torch threads (0: its default)")
    p.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/...)")
    args = p.parse_args(argv)
    from sparsegcn.datasets import data_location
    from sparsegcn.files import check_outputs

    # Which default the run writes depends on the load seen during it: both must be new.
    outs = (
        [args.out]
        if args.out is not None
        else [default_out(args.scale, loaded) for loaded in (False, True)]
    )
    inputs = [("synthetic:citation2", data_location("synthetic:citation2", args.root))]
    try:
        for out in outs:
            check_outputs({"--out": out}, inputs, defaults=None if args.out else {"--out": out})
    except (OSError, ValueError) as err:
        p.error(str(err))
    return args


def default_out(scale: float, loaded: bool) -> Path:
    """Where a run without ``--out`` writes its JSON."""
    tag = f"{scale:g}" + ("-loaded" if loaded else "")
    return HERE / "results" / f"link-sampled-citation2-{tag}.json"


def load(args):
    """The dataset, its sampling graph, the sampled epoch's data and the cache folder."""
    from sparsegcn.datasets.links import load_links, message_graph
    from sparsegcn.datasets.synthetic_links import cache_dir
    from sparsegcn.features import as_features
    from sparsegcn.train.links import sampled_link_data
    from sparsegcn.train.minibatch import sampling_graph

    dataset = load_links("synthetic:citation2", args.root, scale=args.scale, seed=args.seed)
    graph = message_graph(dataset)
    chunked = sampling_graph(graph)
    x = as_features(dataset.features, graph.num_nodes)
    data = sampled_link_data(chunked, x, dataset.split["train"], undirected=not dataset.directed)
    folder = cache_dir(args.root, "citation2", args.scale, args.seed)
    return dataset, chunked, data, folder


def probe_caps(
    data,
    fanouts,
    batch_size: int,
    *,
    probes: int = 4,
    margin: float = 1.15,
    negatives_kind: str = "pairs",
):
    """Per-hop frontier caps for the dedup sampler: ``margin`` times the most distinct
    nodes any of ``probes`` uncapped batches (seed edges and their negatives, uniform
    pairs or the sources with uniform targets, as the step draws them) reaches at
    each hop, rounded up to a multiple of 1,024 and never above the uncapped size.
    Returns ``(caps, counts per probe)``."""
    import jax
    import numpy as np

    from sparsegcn.sampling.dedup import dedup_sizes, sample_dedup
    from sparsegcn.train.links import batch_endpoints

    n = int(data.indptr.shape[0]) - 1
    train = np.asarray(data.train)
    rng = np.random.default_rng(12345)
    counts = []
    for i in range(probes):
        pairs = train[rng.integers(0, train.shape[0], size=batch_size)]
        negatives = rng.integers(0, n, size=(batch_size, 2)).astype(np.int32)
        shared = negatives_kind == "targets"
        if shared:
            negatives[:, 0] = pairs[:, 0]
        nodes, mask, _, _ = batch_endpoints(pairs, negatives, shared_sources=shared)
        sample = sample_dedup(
            data.indptr, data.indices, nodes, fanouts, key=jax.random.key(i), mask=mask
        )
        counts.append([int(np.asarray(m).sum()) for m in sample.masks[1:]])
    full = dedup_sizes(int(nodes.shape[0]), fanouts, num_nodes=n)[1:]
    caps = [
        min(f, 1024 * math.ceil(margin * max(c[d] for c in counts) / 1024))
        for d, f in enumerate(full)
    ]
    return tuple(caps), counts


def sage_link_model(width: int, hidden: int, layers: int, negatives: str = "pairs"):
    """The benchmarked model: GAE with a GraphSAGE encoder (``layers`` x ``hidden``),
    the inner-product decoder and sampled negatives."""
    from sparsegcn.nn.registry import create_model

    return create_model(
        "gae",
        width,
        hidden,
        hidden=hidden,
        layers=layers,
        dropout=0.0,
        encoder="sage",
        decoder="inner",
        recon="sampled",
        negatives=negatives,
        embedding_dim=hidden,
    )


def ours_setup(args, data):
    """``(model, step, params, opt_state)``: the compiled step and fresh state."""
    import jax
    import jax.numpy as jnp

    from sparsegcn.sampling.dedup import check_caps, sample_batch
    from sparsegcn.train.links import LinkTrainConfig, make_optimizer, sampled_link_step

    fanouts = tuple(int(k) for k in args.fanouts.split(","))
    model = sage_link_model(int(data.features.shape[1]), args.hidden, args.layers, args.negatives)
    config = LinkTrainConfig(learning_rate=args.lr)
    caps, probes = args.caps, None
    if caps == "auto":
        caps, probes = probe_caps(data, fanouts, args.batch_size, negatives_kind=args.negatives)
    caps = check_caps(caps, len(fanouts))
    tx = make_optimizer(config)
    params = model.init(jax.random.key(args.seed))
    opt_state = tx.init(params)
    step = jax.jit(
        functools.partial(
            sampled_link_step,
            model,
            tx,
            config,
            fanouts,
            sampler=args.sampler,
            caps=caps,
        ),
        donate_argnums=(0, 1),
    )
    b = args.batch_size
    pairs = jnp.zeros((b, 2), jnp.int32)
    weights = jnp.full((b,), 1.0 / b, jnp.float32)
    compiled = step.lower(params, opt_state, data, pairs, weights, jax.random.key(0)).compile()

    def sample(ids, mask, key):
        return sample_batch(
            args.sampler, data.indptr, data.indices, ids, fanouts, key=key, mask=mask, caps=caps
        )

    return (
        model,
        compiled,
        params,
        opt_state,
        {"caps": caps, "probe_counts": probes, "sample": sample},
    )


def mrr_of(model, params, chunked, data, dataset, sources: int, chunk: int) -> dict:
    """Ours' test MRR: every node embedded layer by layer on the full graph, then each
    test source's true target ranked among its sampled negatives, ``chunk`` sources at once."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from sparsegcn.metrics import mrr

    tick = time.perf_counter()
    z = jax.jit(model.embed)(params, chunked, data.features)
    jax.block_until_ready(z)
    embed_s = time.perf_counter() - tick
    test = np.asarray(dataset.split["test"], np.int32)
    negatives = dataset.split["test_neg"]
    count = test.shape[0] if sources <= 0 else min(sources, test.shape[0])

    @jax.jit
    def chunk_sum(z, pairs, targets, mask):
        pos = model.decode(params, z, pairs)
        src = jnp.broadcast_to(pairs[:, :1], targets.shape)
        neg = model.decode(params, z, jnp.stack([src, targets], axis=-1))
        return mrr(pos, neg, mask) * jnp.sum(mask).astype(jnp.float32)

    tick = time.perf_counter()
    total = 0.0
    for start in range(0, count, chunk):
        stop = min(start + chunk, count)
        pairs = np.zeros((chunk, 2), np.int32)
        targets = np.zeros((chunk, negatives.shape[1]), np.int32)
        pairs[: stop - start] = test[start:stop]
        targets[: stop - start] = negatives[start:stop]
        mask = np.arange(chunk) < stop - start
        total += float(chunk_sum(z, pairs, targets, mask))
    return {
        "mrr": total / count,
        "sources": count,
        "negatives_per_source": int(negatives.shape[1]),
        "embed_s": embed_s,
        "score_s": time.perf_counter() - tick,
        "embedding": "every node, full neighbourhoods, layer by layer (ChunkedGraph)",
    }


def mrr_sampled(model, params, data, dataset, sources: int, sample, batch_nodes: int) -> dict:
    """Ours' test MRR with embeddings of only the ranked nodes (the test sources, their
    true targets and their negatives), each on its sampled neighbourhood
    (``sample(ids, mask, key)``: the training sampler), ``batch_nodes`` at a time."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from sparsegcn.metrics import mrr

    test = np.asarray(dataset.split["test"], np.int64)
    count = test.shape[0] if sources <= 0 else min(sources, test.shape[0])
    test = test[:count]
    negatives = np.asarray(dataset.split["test_neg"][:count], np.int64)
    nodes = np.unique(np.concatenate([test.ravel(), negatives.ravel()]))

    @jax.jit
    def embed(params, ids, mask, key):
        return model.embed(params, sample(ids, mask, key), data.features)

    tick = time.perf_counter()
    rows = []
    for i, start in enumerate(range(0, nodes.shape[0], batch_nodes)):
        ids = np.zeros(batch_nodes, np.int32)
        chunk = nodes[start : start + batch_nodes]
        ids[: chunk.shape[0]] = chunk
        mask = np.arange(batch_nodes) < chunk.shape[0]
        z = embed(params, ids, mask, jax.random.key(10_000 + i))
        rows.append(np.asarray(z)[: chunk.shape[0]])
    z = np.concatenate(rows)
    embed_s = time.perf_counter() - tick
    tick = time.perf_counter()
    src = z[np.searchsorted(nodes, test[:, 0])]
    pos = np.sum(src * z[np.searchsorted(nodes, test[:, 1])], axis=1)
    neg = np.einsum("pd,pkd->pk", src, z[np.searchsorted(nodes, negatives)])
    value = float(mrr(jnp.asarray(pos), jnp.asarray(neg)))
    return {
        "mrr": value,
        "sources": count,
        "negatives_per_source": int(negatives.shape[1]),
        "embedded_nodes": int(nodes.shape[0]),
        "embed_s": embed_s,
        "score_s": time.perf_counter() - tick,
        "embedding": "the ranked nodes only, each on its sampled neighbourhood (training "
        "sampler, fanouts and caps; no dropout)",
    }


def run(args) -> dict:
    import jax
    import numpy as np
    from peer_process import PeerError, start_peer

    from sparsegcn.allocator import keep_freed_memory_unless_disabled

    kept = keep_freed_memory_unless_disabled()  # as the sparsegcn command does
    watch = LoadWatch()
    started = datetime.datetime.now(datetime.UTC)
    phases: dict = {}

    def mark(name):
        now, peak = rss_gb()
        phases[name] = {"rss_gb": now, "peak_rss_gb": peak, "t_s": time.perf_counter() - t0}
        print(f"[{name}] {phases[name]}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    dataset, chunked, data, folder = load(args)
    load_s = time.perf_counter() - t0
    mark("loaded")
    model, step, params, opt_state, sampling = ours_setup(args, data)
    compile_s = time.perf_counter() - t0 - load_s
    mark("compiled")

    train_host = np.asarray(data.train)
    p, b = int(train_host.shape[0]), args.batch_size
    batches_per_epoch = math.ceil(p / b)
    weights = np.full((b,), 1.0 / b, np.float32)
    rng = np.random.default_rng(args.seed)
    key = jax.random.key(args.seed + 1)
    last = {"loss": float("nan")}

    def ours_batch() -> float:
        nonlocal params, opt_state, key
        tick = time.perf_counter()
        pairs = train_host[rng.integers(0, p, size=b)]
        key, k = jax.random.split(key)
        params, opt_state, loss = step(params, opt_state, data, pairs, weights, k)
        jax.block_until_ready((params, loss))
        elapsed = time.perf_counter() - tick
        last["loss"] = float(loss)
        return elapsed

    fanouts = [int(k) for k in args.fanouts.split(",")]
    dgl_fanouts = fanouts[::-1] if args.dgl_order == "per-hop" else fanouts
    spec = {
        "train": str(folder / "train.npy"),
        "features": str(folder / "features.npy"),
        "num_nodes": int(chunked.num_nodes),
        "fanouts": dgl_fanouts,
        "batch_size": b,
        "hidden": args.hidden,
        "layers": args.layers,
        "lr": args.lr,
        "batches": 1,
        "warmup": max(args.warmup - 1, 0),
        "seed": args.seed,
        "threads": args.dgl_threads,
    }
    peer = start_peer("dgl", args.dgl_python) if args.dgl_python else "no DGL Python given"
    dgl: dict = {}
    if isinstance(peer, str):
        dgl["missing"] = peer
    else:
        try:
            info = peer.setup("link_batches", **spec)
            dgl.update(
                setup_s=info["setup_s"],
                first_call_s=info["first_call_s"],
                peak_rss_gb=info["peak_rss_gb"],
                versions=peer.versions,
            )
        except PeerError as err:
            dgl["missing"] = str(err)
    first_s = [ours_batch() for _ in range(max(args.warmup, 1))]
    mark("warm")

    ours_times, dgl_times, answer = [], [], None
    for _ in range(args.rounds):
        ours_times += [ours_batch() for _ in range(args.per_round)]
        print(f"[round] ours {ours_times[-args.per_round :]}", file=sys.stderr, flush=True)
        if "missing" not in dgl:
            try:
                answer = peer.time("link_batches", args.per_round)
                dgl_times += answer["times_s"]
                print(f"[round] DGL {answer['times_s']}", file=sys.stderr, flush=True)
            except PeerError as err:
                dgl["missing"] = f"failed while timed: {err}"
    mark("timed")
    if not isinstance(peer, str):
        peer.close()

    def side(times):
        median_ms = 1e3 * float(np.median(times))
        return {
            "median_ms": median_ms,
            "times_ms": [1e3 * t for t in times],
            "batches_per_epoch": batches_per_epoch,
            "projected_epoch_s": batches_per_epoch * median_ms / 1e3,
        }

    slots = (3 if args.negatives == "targets" else 4) * b  # batch_endpoints' static size
    ours = {
        "label": f"sparsegcn sampled_link_step ({args.sampler} sampler, jit, donated state)",
        **side(ours_times),
        "compile_s": compile_s,
        "first_batches_s": first_s,
        "load_s": load_s,
        "last_loss": last["loss"],
        "endpoint_slots_per_batch": slots,
        "tree_rows_per_batch": slots * sum(math.prod(fanouts[:d]) for d in range(len(fanouts) + 1)),
    }
    if dgl_times:
        stats = answer["stats"]
        dgl.update(
            label="DGL as_edge_prediction_sampler(NeighborSampler, Uniform(1)) + SAGEConv(mean)",
            **side(dgl_times),
            fanouts_dgl_order=dgl_fanouts,
            peak_rss_gb=answer["peak_rss_gb"],
            last_loss=stats["loss"],
            per_batch_median={
                k: float(np.median(stats[k])) for k in ("seeds", "input_rows", "block_edges")
            },
        )

    mrr = None
    if args.mrr_sources >= 0:
        tick = time.perf_counter()
        for _ in range(args.train_batches):
            ours_batch()
        train_s = time.perf_counter() - tick
        trained = max(args.warmup, 1) + args.rounds * args.per_round + args.train_batches
        if args.mrr_embed == "chunked":
            mrr = mrr_of(model, params, chunked, data, dataset, args.mrr_sources, args.mrr_chunk)
        else:
            mrr = mrr_sampled(
                model, params, data, dataset, args.mrr_sources, sampling["sample"], 4 * b
            )
        mrr.update(train_batches=trained, extra_train_s=train_s, loss_after=last["loss"])
        mark("evaluated")
    now, peak = rss_gb()
    ours.update(peak_rss_gb=peak, rss_gb=now, phases=phases)
    loadavg = watch.stop()
    result = {
        "benchmark": "link-sampled-epoch",
        "issue": 24,
        "date": started.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "keeps_freed_memory": kept,
        "loadavg": loadavg,
        "loaded": loadavg["max"] > 1.5,
        "dataset": {
            "name": "synthetic:citation2",
            "scale": args.scale,
            "seed": args.seed,
            "num_nodes": int(chunked.num_nodes),
            "message_edges": int(chunked.graph.num_edges),
            "train_pairs": p,
            "test_sources": int(np.shape(dataset.split["test"])[0]),
        },
        "setup": {
            "model": "GraphSAGE (mean) encoder, inner-product decoder",
            "fanouts": fanouts,
            "sampler": args.sampler,
            "caps": sampling["caps"],
            "caps_given": args.caps,
            "dedup_probe_distinct_per_hop": sampling["probe_counts"],
            "batch_size": b,
            "hidden": args.hidden,
            "layers": args.layers,
            "lr": args.lr,
            "dropout": 0.0,
            "negatives_per_edge": 1,
            "negatives": args.negatives,
            "timed_batches_per_side": args.rounds * args.per_round,
            "rounds": args.rounds,
        },
        "ours": ours,
        "dgl": dgl,
        "mrr": mrr,
    }
    if "median_ms" in dgl:
        ratio = ours["projected_epoch_s"] / dgl["projected_epoch_s"]
        result["epoch_ratio_ours_over_dgl"] = ratio
        result["target_epoch_half_of_dgl_met"] = ratio <= 0.5
    result["target_rss_met"] = ours["peak_rss_gb"] <= RSS_TARGET_GB
    return result


def main(argv=None) -> int:
    from sparsegcn.files import write_atomic

    args = parse_args(argv)
    result = run(args)
    out = args.out if args.out is not None else default_out(args.scale, result["loaded"])
    text = json.dumps(result, indent=1) + "\n"
    write_atomic(out, lambda f: f.write(text.encode()))
    ours, dgl = result["ours"], result["dgl"]
    print(
        f"ours {ours['median_ms']:.0f} ms/batch, epoch ~{ours['projected_epoch_s']:.0f} s, "
        f"peak RSS {ours['peak_rss_gb']:.2f} GB"
    )
    if "median_ms" in dgl:
        print(
            f"DGL  {dgl['median_ms']:.0f} ms/batch, epoch ~{dgl['projected_epoch_s']:.0f} s, "
            f"peak RSS {dgl['peak_rss_gb']:.2f} GB; ours/DGL {result['epoch_ratio_ours_over_dgl']:.2f}"
        )
    else:
        print(f"DGL  missing: {dgl.get('missing')}")
    if result["mrr"]:
        print(f"MRR {result['mrr']['mrr']:.4f} over {result['mrr']['sources']} sources")
    print(f"load average {result['loadavg']}; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

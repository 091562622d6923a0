"""Peak memory of the sampled link trainer on synthetic:citation2: its evaluation, or a run.

    python benchmarks/link_eval_memory.py --root DIR [--scale 1.0] [--mode phased|one-program]
    python benchmarks/link_eval_memory.py --root DIR --mode run --max-batches B [--caps C1,C2,C3]

One process per mode (the peak resident set is the process's). Each loads the
dataset's cache (``load_links``), builds the evaluation data as
:func:`sparsegcn.train.links.fit_links_sampled` does (every node embedded with
all its neighbours on the ``ChunkedGraph``, per-source validation and test
negatives), initializes a GraphSAGE 3 x 256 link model (one seed) and runs:

- ``phased``: :class:`~sparsegcn.train.links.PhasedEvaluation`, what
  ``fit_links_sampled`` runs (one seed and one phase at a time);
- ``one-program``: :func:`~sparsegcn.train.links.evaluate` vmapped over the
  seeds in one compiled program, what it ran before;
- ``run``: what ``sparsegcn train --task link --model gae --encoder sage
  --fanouts 15,10,5 --batch-size 1024 --sampler dedup`` runs, its data
  prepared by the CLI's own function (``sparsegcn.tasks.link``), but with
  ``--max-batches`` batches of one epoch (a whole one takes about 10 hours
  on 2 cores), then the full evaluation: the peak of a whole run.

Writes JSON (``--out``, default ``benchmarks/results/link-eval-memory-S-MODE.json``,
refused if it exists) with the peak RSS after loading and after evaluating, the seconds, XLA's
temporary bytes and the metrics (which the two modes must share). The
allocator keeps freed memory (:func:`sparsegcn.allocator.keep_freed_memory`), as
the CLI does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def peak_gb() -> float:
    """This process's peak resident set (``VmHWM``), GB."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM"))
    return int(line.split()[1]) * 1024 / 1e9


def whole_run(args) -> dict:
    """``--mode run``: the CLI's data preparation, ``max_batches`` batches, the evaluation."""
    import numpy as np

    from sparsegcn.experiment import Experiment
    from sparsegcn.tasks.link import _prepare_links, fit_sampled

    exp = Experiment(
        dataset="synthetic:citation2",
        root=args.root,
        scale=args.scale,
        task="link",
        model="gae",
        model_options=(("encoder", "sage"),),
        hidden=args.hidden,
        layers=args.layers,
        dropout=0.0,
        lr=1e-3,
        epochs=1,
        fanouts=",".join(["15", "10", "5"][: args.layers]),
        batch_size=1024,
        sampler="dedup",
        dedup_caps=args.caps,
    )
    tick = time.perf_counter()
    info, data, model, config, sampled = _prepare_links(exp)
    prepared = peak_gb()
    prepare_s = time.perf_counter() - tick
    tick = time.perf_counter()
    result = fit_sampled(exp, data, model, config, sampled, max_batches=args.max_batches)
    return {
        "peak_rss_after_load_gb": prepared,
        "prepare_s": prepare_s,
        "fit_s": time.perf_counter() - tick,
        "batches": args.max_batches,
        "caps": args.caps,
        "step_ms": float(result.train_step_ms_median),
        "compile_s": result.compile_s,
        "loss": float(np.asarray(result.losses)[-1, 0]),
        "test": {k: float(np.asarray(v)[0]) for k, v in result.test.items()},
        "valid": {k: float(np.asarray(v)[0]) for k, v in result.valid.items()},
        "num_nodes": int(info["num_nodes"]),
    }


def run(args) -> dict:
    from sparsegcn.allocator import keep_freed_memory

    keep_freed_memory()
    import jax
    from link_sampled_epoch import machine

    header = {
        "benchmark": "link-eval-memory",
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/link_eval_memory.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "scale": args.scale,
        "model": f"gae, sage encoder {args.layers} x {args.hidden}, inner decoder, 1 seed",
        "mode": args.mode,
    }
    if args.mode == "run":
        out = whole_run(args)
        return {**header, **out, "peak_rss_gb": peak_gb(), "loadavg_end": os.getloadavg()[0]}
    return {**header, **evaluation(args, jax)}


def evaluation(args, jax) -> dict:
    import numpy as np
    from link_sampled_epoch import sage_link_model

    from sparsegcn.datasets.links import load_links, message_graph
    from sparsegcn.features import as_features
    from sparsegcn.train.links import LinkData, PhasedEvaluation, eval_set, evaluate
    from sparsegcn.train.minibatch import sampling_graph

    dataset = load_links("synthetic:citation2", args.root, scale=args.scale, seed=0)
    graph = message_graph(dataset)
    split = dataset.split
    data = jax.device_put(
        LinkData(
            graph=sampling_graph(graph),
            features=as_features(dataset.features, graph.num_nodes),
            train=None,
            labels=None,
            edges=None,
            pos_weight=None,
            norm=None,
            valid=eval_set(split["valid"], split["valid_neg"]),
            test=eval_set(split["test"], split["test_neg"]),
        )
    )
    num_nodes = int(graph.num_nodes)
    del dataset, graph
    loaded = peak_gb()
    width = int(data.features.shape[1])
    model = sage_link_model(width, args.hidden, args.layers)
    params = jax.vmap(model.init)(jax.random.split(jax.random.key(0), 1))
    tick = time.perf_counter()
    if args.mode == "phased":
        phased = PhasedEvaluation.compile(model, params, data, "mrr")
        temp = phased.embed.memory_analysis().temp_size_in_bytes
        compile_s = time.perf_counter() - tick
        tick = time.perf_counter()
        out = phased(params, data)
    else:

        def assess(p, d):
            return jax.vmap(lambda q: evaluate(model, q, d, "mrr"))(p)

        compiled = jax.jit(assess).lower(params, data).compile()
        temp = compiled.memory_analysis().temp_size_in_bytes
        compile_s = time.perf_counter() - tick
        tick = time.perf_counter()
        out = jax.tree.map(np.asarray, compiled(params, data))
    eval_s = time.perf_counter() - tick
    return {
        "loadavg_end": os.getloadavg()[0],
        "num_nodes": num_nodes,
        "peak_rss_after_load_gb": loaded,
        "peak_rss_gb": peak_gb(),
        "xla_temp_gb": temp / 1e9,
        "xla_temp_of": "the embedding program" if args.mode == "phased" else "the one program",
        "compile_s": compile_s,
        "eval_s": eval_s,
        "test": {k: float(np.asarray(v)[0]) for k, v in out["test"].items()},
        "valid": {k: float(np.asarray(v)[0]) for k, v in out["valid"].items()},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=os.environ.get("SPARSEGCN_DATA", "datasets"))
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--mode", choices=("phased", "one-program", "run"), default="phased")
    p.add_argument("--max-batches", type=int, default=20, help="--mode run: batches trained")
    p.add_argument("--caps", default=None, help="--mode run: the dedup sampler's caps per hop")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from sparsegcn.datasets import data_location
    from sparsegcn.files import check_outputs, write_atomic

    default = HERE / "results" / f"link-eval-memory-{args.scale:g}-{args.mode}.json"
    out = Path(args.out or default)
    try:
        check_outputs(
            {"--out": out},
            [("synthetic:citation2", data_location("synthetic:citation2", args.root))],
            defaults={"--out": default} if args.out is None else None,
        )
    except (OSError, ValueError) as err:
        p.error(str(err))
    result = run(args)
    text = json.dumps(result, indent=1) + "\n"
    write_atomic(out, lambda f: f.write(text.encode()))
    seconds = result["eval_s"] if "eval_s" in result else result["fit_s"]
    print(
        f"{args.mode}: peak RSS {result['peak_rss_gb']:.2f} GB (after loading "
        f"{result['peak_rss_after_load_gb']:.2f}), {seconds:.0f} s; wrote {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Peak memory of the sampled link trainer's evaluation on synthetic:citation2.

    python benchmarks/link_eval_memory.py --root DIR [--scale 1.0] [--mode phased|one-program]

One process per mode (the peak resident set is the process's). Each loads the
dataset's cache (``load_links``), builds the evaluation data as
:func:`sparsegcn.train.links.fit_links_sampled` does (every node embedded with
all its neighbours on the ``ChunkedGraph``, per-source validation and test
negatives), initializes a GraphSAGE 3 x 256 link model (one seed) and runs:

- ``phased``: :class:`~sparsegcn.train.links.PhasedEvaluation`, what
  ``fit_links_sampled`` runs (one seed and one phase at a time);
- ``one-program``: :func:`~sparsegcn.train.links.evaluate` vmapped over the
  seeds in one compiled program, what it ran before.

Writes JSON (``--out``, default ``benchmarks/results/link-eval-memory-S-MODE.json``)
with the peak RSS after loading and after evaluating, the seconds, XLA's
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


def run(args) -> dict:
    from sparsegcn.allocator import keep_freed_memory

    keep_freed_memory()
    import jax
    import numpy as np
    from link_sampled_epoch import machine, sage_link_model

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
        "benchmark": "link-eval-memory",
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/link_eval_memory.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "loadavg_end": os.getloadavg()[0],
        "scale": args.scale,
        "num_nodes": num_nodes,
        "model": f"gae, sage encoder {args.layers} x {args.hidden}, inner decoder, 1 seed",
        "mode": args.mode,
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
    p.add_argument("--mode", choices=("phased", "one-program"), default="phased")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    out = Path(args.out or HERE / "results" / f"link-eval-memory-{args.scale:g}-{args.mode}.json")
    if out.exists() and out.is_dir():
        print(f"--out {out} is a folder", file=sys.stderr)
        return 2
    result = run(args)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, out)
    print(
        f"{args.mode}: peak RSS {result['peak_rss_gb']:.2f} GB (after loading "
        f"{result['peak_rss_after_load_gb']:.2f}), {result['eval_s']:.0f} s; wrote {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

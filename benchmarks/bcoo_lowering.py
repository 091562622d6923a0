"""What the BCOO backend compiles to, and what its cuSPARSE lowering is worth.

    python benchmarks/bcoo_lowering.py --nodes 1000000 --json out.json

Times ``Â x`` (random graph, receiver-sorted, ``D^-1/2`` folded into the
edge weights) in one process with:

- ``bcoo`` with ``jax_bcoo_cusparse_lowering`` off (gather and scatter-add)
  and on (the cuSPARSE SpMM custom call, on GPU only);
- ``bcsr`` (``jax.experimental.sparse.BCSR``, CSR offsets) likewise;
- the default backend's sorted ``segment_sum`` on the same edge list, as the
  reference.

For each it reports the median, and whether the optimized program holds a
cuSPARSE custom call (read from ``compiled.as_text()``), so a figure can be
tied to the kernel that produced it. On CPU both flags compile the same
gather and scatter.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsegcn.backends import Segment, propagate
from sparsegcn.bench.graphs import add_graph_arguments, make_graph, propagation_graph
from sparsegcn.bench.runner import machine_info
from sparsegcn.bench.timing import measure
from sparsegcn.files import check_outputs, write_json_atomic


def _time(fn, args, repeats: int) -> dict:
    compiled = jax.jit(fn).lower(*args).compile()
    text = compiled.as_text().lower()
    timing = measure(fn, args, repeats=repeats)
    return {
        "median_ms": 1e3 * timing.median_s,
        "compile_s": timing.compile_s,
        "cusparse_call": "cusparse" in text,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_graph_arguments(parser)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    args = parser.parse_args(argv)
    try:
        check_outputs({"--json": args.json})
    except (OSError, ValueError) as err:
        parser.error(str(err))

    a_hat = propagation_graph(make_graph("random", args.nodes, args.degree), "bcoo")
    n = a_hat.num_nodes
    indices = np.stack([np.asarray(a_hat.receivers), np.asarray(a_hat.senders)], axis=1)
    weights = np.asarray(a_hat.edge_weights(), np.float32)
    bcoo = jsparse.BCOO(
        (jnp.asarray(weights), jnp.asarray(indices)),
        shape=(n, n),
        indices_sorted=True,
        unique_indices=False,
    )
    bcsr = jsparse.BCSR.from_bcoo(bcoo)
    x = jax.random.normal(jax.random.key(0), (n, args.features))
    rows = []
    for flag in (False, True):
        jax.config.update("jax_bcoo_cusparse_lowering", flag)
        # Fresh functions per flag: the flag is read when a function is lowered.
        for name, matrix in (("bcoo", bcoo), ("bcsr", bcsr)):
            row = _time(lambda m, x: m @ x, (matrix, x), args.repeats)
            rows.append({"impl": name, "cusparse_lowering": flag, **row})
    graph = jax.device_put(a_hat)
    row = _time(
        lambda g, x: propagate(g, x, backend=Segment(use_layout=False, use_sorted=True)),
        (graph, x),
        args.repeats,
    )
    rows.append({"impl": "segment (sorted edge list)", "cusparse_lowering": None, **row})

    print(f"A_hat x: N={n}, E={a_hat.num_edges}, F={args.features}, {jax.devices()[0]}")
    print(f"{'implementation':28s} {'flag':>5s} {'median ms':>10s} {'cuSPARSE call':>14s}")
    for r in rows:
        flag = "" if r["cusparse_lowering"] is None else str(r["cusparse_lowering"])
        print(f"{r['impl']:28s} {flag:>5s} {r['median_ms']:10.3f} {r['cusparse_call']!s:>14s}")
    if args.json:
        write_json_atomic(
            args.json,
            {
                "rows": rows,
                "num_nodes": n,
                "num_edges": a_hat.num_edges,
                "features": args.features,
                "machine": machine_info(),
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

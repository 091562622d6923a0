"""METIS's partition time against its number of parts, in interleaved rounds.

On the ogbn-products-sized synthetic graph (``--scale`` shrinks it), the
symmetrized pattern is built once; then ``pymetis.part_graph`` alone is
timed for ``k = ceil(N / part_size)`` parts, each part size once per round
so that a change in the machine's load falls on all of them alike. Prints
the edge cut and seconds of each call, and the medians as JSON (the
measurement behind ``sparsegcn.ops.ordering.METIS_PART_SIZE``).

Usage::

    python benchmarks/metis_part_sizes.py --scale 0.1 --part-sizes 8192,2048,512 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

from sparsegcn.datasets import load
from sparsegcn.ops import ordering


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synthetic:products")
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--part-sizes", default="8192,2048,512")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    pymetis = ordering.require_order_library("metis")
    graph = load(args.dataset, scale=args.scale).graph
    n = graph.num_nodes
    pattern = ordering._symmetric_pattern(np.asarray(graph.senders), np.asarray(graph.receivers), n)
    idx = pymetis.zero_copy_dtype()
    adjacency = pymetis.CSRAdjacency(pattern.indptr.astype(idx), pattern.indices.astype(idx))
    sizes = [int(v) for v in args.part_sizes.split(",")]
    times: dict[int, list[float]] = {size: [] for size in sizes}
    cuts: dict[int, int] = {}
    for _ in range(args.rounds):
        for size in sizes:
            parts = math.ceil(n / size)
            tick = time.perf_counter()
            cuts[size], _ = pymetis.part_graph(
                parts, adjacency=adjacency, options=pymetis.Options(seed=0)
            )
            times[size].append(time.perf_counter() - tick)
            print(f"part size {size}: {parts} parts, cut {cuts[size]:,}, {times[size][-1]:.1f} s")
    summary = {
        str(size): {
            "parts": math.ceil(n / size),
            "edge_cut": cuts[size],
            "seconds": times[size],
            "median_s": float(np.median(times[size])),
        }
        for size in sizes
    }
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

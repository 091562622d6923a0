"""The residual collision rate of the device negative sampler, measured against its formula.

On a dataset's random link split (Cora by default), draws ``--pairs`` uniform
negatives ``--repeats`` times for each number of redraw rounds and counts the
pairs that are still a train edge or a self-loop, next to the expected rate:
``d`` without redraws (``d``: the fraction of all ``N²`` pairs rejected), 0 where
the spare pool refills the rejected slots (a sparse graph; it runs short with
a probability below ``1e-12`` a call), ``d ** (rounds + 1)`` with per-slot
redraws. Prints one JSON line per round count (the table of
``docs/link-prediction.md``).

Usage::

    python benchmarks/link_negatives.py --root DATA --rounds 0,1,3
"""

from __future__ import annotations

import argparse
import json

import jax

from sparsegcn.datasets import load
from sparsegcn.sampling.links import (
    edge_index,
    is_edge,
    random_link_split,
    spare_pool_size,
    uniform_negatives,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--root", default=None)
    parser.add_argument("--rounds", default="0,1,3")
    parser.add_argument("--pairs", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    dataset = load(args.dataset, args.root)
    split = random_link_split(dataset.graph, seed=0)
    n = dataset.num_nodes
    index = edge_index(split.split["train"], n)
    d = (2 * len(split.split["train"]) + n) / n**2
    for rounds in (int(r) for r in args.rounds.split(",")):
        draw = jax.jit(lambda k, r=rounds: uniform_negatives(k, args.pairs, n, index, rounds=r))
        bad = 0
        for repeat in range(args.repeats):
            pairs = draw(jax.random.key(repeat))
            u, v = pairs[:, 0], pairs[:, 1]
            bad += int(((u == v) | is_edge(index, u, v)).sum())
        total = args.pairs * args.repeats
        spare = spare_pool_size(args.pairs, n, index.indices.shape[0]) if rounds else None
        row = {
            "dataset": args.dataset,
            "rounds": rounds,
            "rejected_fraction": d,
            "refill": "per-slot redraws" if spare is None else f"spare pool of {spare}",
            "expected": d ** (rounds + 1) if spare is None else 0.0,
            "measured": bad / total,
            "collisions": bad,
            "pairs": total,
        }
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One process of the two-process test in tests/test_distributed.py.

    python tests/distributed_worker.py --coordinator 127.0.0.1:PORT \\
        --num-processes 2 --process-id I --out params-I.npz

Joins the run, trains GraphSAGE data parallel and GCN edge-sharded for a
few epochs on a mesh of one device per process, and writes the final
params of both (atomically) to ``--out``. :func:`train` is also what the
test runs in a single process on the same number of devices, as the oracle.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def train(devices) -> dict[str, np.ndarray]:
    """Trains both models on ``devices`` (count or mesh); returns their params by name."""
    import jax
    from helpers import two_communities

    import sparsegcn as sg
    from sparsegcn.parallel import fit_data_parallel, fit_edge_sharded
    from sparsegcn.train import MinibatchConfig, TrainConfig, minibatch_data

    node_data = two_communities()
    config = TrainConfig(epochs=3, patience=None, timing_steps=0)
    sage = fit_data_parallel(
        sg.sage(8, 2, hidden=8),
        minibatch_data(node_data),
        config,
        MinibatchConfig((4, 3), 16),
        devices=devices,
        seeds=[0, 1],
    )
    gcn = fit_edge_sharded(
        sg.gcn(8, 2, hidden=8),
        node_data._replace(graph=sg.gcn_norm(node_data.graph)),
        config,
        devices=devices,
        seeds=[0, 1],
    )
    out = {}
    for name, result in (("sage", sage), ("gcn", gcn)):
        for path, leaf in jax.tree_util.tree_leaves_with_path(result.state.params):
            out[name + jax.tree_util.keystr(path)] = np.asarray(leaf)
        out[f"{name}/loss"] = result.history["loss"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from sparsegcn import parallel
    from sparsegcn.files import write_atomic

    parallel.initialize(args.coordinator, args.num_processes, args.process_id, timeout_s=60)
    try:
        params = train(1)
        write_atomic(args.out, lambda f: np.savez(f, **params))
    finally:
        parallel.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Full-batch GraphSAGE epochs on ``synthetic:proteins`` (issue 25's scale check).

Generates the twin (132,534 nodes, 79,122,504 stored edges with 8 features
at ``--scale 1``), turns the edge features into node features (the mean of
incident edges, as OGB's baselines), prepares GraphSAGE's graph (``D^-1 A``,
packed CSR), and trains ``--epochs`` full-batch epochs of the multi-label
objective (112 tasks, ROC-AUC), one epoch per compiled call, so
``epoch_ms_median`` is one optimizer step plus the evaluation of the train,
validation and test ROC-AUC. Reported: the time of every phase, compile time
apart, the median epoch, the test ROC-AUC of the best epoch and the peak RSS.

Usage::

    python benchmarks/proteins_epoch.py --hidden 256 --layers 3 --epochs 1 --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import time


def peak_rss_gb() -> float:
    """This process's peak resident set size, in GB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from sparsegcn.files import check_outputs, write_atomic

    try:
        check_outputs({"--json": args.json})
    except (OSError, ValueError) as err:
        parser.error(str(err))

    from link_sampled_epoch import machine

    from sparsegcn.datasets.proteins import generate_proteins
    from sparsegcn.experiment.build import node_data, use_edge_features
    from sparsegcn.nn.registry import create_model
    from sparsegcn.train import MULTILABEL, TrainConfig, fit

    marks: dict = {"load_average_at_start": os.getloadavg()[0]}
    start = time.perf_counter()
    dataset = generate_proteins(args.scale, seed=0)
    marks["generate_s"] = time.perf_counter() - start
    tick = time.perf_counter()
    dataset = use_edge_features(dataset)
    marks["edge_mean_s"] = time.perf_counter() - tick
    tick = time.perf_counter()
    data = node_data(dataset, "sage", normalize_features="none")
    marks["prepare_s"] = time.perf_counter() - tick
    model = create_model(
        "sage",
        dataset.num_features,
        dataset.num_classes,
        hidden=args.hidden,
        layers=args.layers,
        dropout=0.0,
    )
    config = TrainConfig(epochs=args.epochs, epochs_per_call=1, patience=None, weight_decay=0.0)
    tick = time.perf_counter()
    result = fit(model, data, config, objective=MULTILABEL)
    report = {
        **marks,
        "fit_s": time.perf_counter() - tick,
        "compile_s": result.compile_s,
        "epoch_ms_median": result.epoch_ms_median,
        "test_rocauc": float(result.test_acc[0]),
        "num_nodes": dataset.num_nodes,
        "num_stored_edges": dataset.graph.num_edges,
        "layout": data.graph.layout_name,
        "hidden": args.hidden,
        "layers": args.layers,
        "epochs": args.epochs,
        "scale": args.scale,
        "peak_rss_gb": peak_rss_gb(),
        "total_s": time.perf_counter() - start,
        "load_average_at_end": os.getloadavg()[0],
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        write_atomic(args.json, lambda f: f.write((text + "\n").encode()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

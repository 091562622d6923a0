"""``sparsegcn predict``: class predictions and embeddings of every node from a checkpoint,
or, from a link run's ``--checkpoint`` folder, the scores of node pairs read from a file.

Outputs (NumPy ``.npy``, no pickled objects), written all or none: every
output path is checked for writability before the checkpoint is read, each
file goes to a temporary file first, and they are renamed into place only
when all are written:

- ``--out``: int32 predicted classes, ``[N]`` when the checkpoint holds one
  seed, ``[K, N]`` (one row per seed, in the checkpoint's seed order) with
  several;
- ``--embeddings``: float32 hidden-layer embeddings (the last layer's input,
  ``Model.embed``), ``[N, H]`` or ``[K, N, H]`` likewise.

A link model (``sparsegcn train --task link --checkpoint DIR``) scores the
pairs of ``--pairs`` (an int ``.npy`` ``[P, 2]``; ``[0, 2]`` scores none,
for the embeddings alone): ``--out`` gets float32 logits ``[P]`` or ``[K,
P]`` (sigmoid for probabilities), ``--embeddings`` the node embeddings ``[N,
D]`` or ``[K, N, D]``. A link model keeps its last epoch's params alone:
``--params`` is refused with it.

Nodes are in the dataset's order.

On a graph-level checkpoint (``sparsegcn train`` on a graph dataset) the
outputs are per graph, in the dataset's order: ``--out`` holds float32
probabilities, ``[G, C]`` (softmax over classes) or ``[G, T]`` (a sigmoid per
binary task), or predicted targets ``[G, T]`` (regression datasets), ``[K, ...]`` with several members (folds x seeds, fold-major);
``--embeddings`` the graphs' readout (Xu et al.'s GIN: every layer's,
concatenated), ``[G, H]`` or ``[K, G, H]``; the summary gives the dataset's
metric of the predictions on each member's test graphs.

On a heterogeneous checkpoint (``sparsegcn train`` on ``ogbn-mag`` or
``synthetic:mag``) the seed trained last predicts (a hetero checkpoint keeps
only its params): ``--out`` holds int32 classes of every node of the target
type (papers), ``[N_target]``, each scored on neighbourhoods sampled as in
training; ``--embeddings`` the rows the last R-GCN layer reads, ``[N_target,
H]``. For ``ogbn-*`` datasets, when ``ogb`` is
installed, the summary also gives ogb's official ``Evaluator`` metric of
the predictions on the test split (``ogb_evaluator`` in ``--json``). The params are the early-stopping
restored ones (``--params best``, whose test accuracy ``sparsegcn train``
reports) unless ``--params last``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from sparsegcn.cli.outputs import check_not_kept_files
from sparsegcn.experiment import predict_checkpoint
from sparsegcn.experiment.lifecycle import experiment_from_checkpoint, run_inputs
from sparsegcn.files import (
    check_distinct_outputs,
    check_not_inputs,
    check_writable,
    json_writer,
    npy_writer,
    write_all_atomic,
)
from sparsegcn.tasks import resolve, task_for
from sparsegcn.train.checkpoint import CheckpointError, folder_of, folder_owns, read_manifest


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "predict",
        help="write class predictions and embeddings of every node from a checkpoint",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        metavar="DIR",
        help="checkpoint folder (its newest checkpoint) or a ckpt-*.json manifest",
    )
    parser.add_argument(
        "--dataset", help="dataset name (default: the one trained on; it must match)"
    )
    parser.add_argument("--root", metavar="DIR", help="data root (default: the training run's)")
    parser.add_argument(
        "--out", required=True, metavar="PATH", help="predicted classes, .npy ([N] or [K, N])"
    )
    parser.add_argument(
        "--embeddings", metavar="PATH", help="also write embeddings, .npy ([N, H] or [K, N, H])"
    )
    parser.add_argument(
        "--params",
        choices=("best", "last"),
        help="which params (default: best); a link model keeps its last alone",
    )
    parser.add_argument(
        "--pairs",
        metavar="PATH",
        help="link models: node pairs to score, an int .npy [P, 2]; --out gets their logits",
    )
    parser.add_argument("--json", metavar="PATH", help="write a summary as JSON")
    parser.set_defaults(func=run)


def _check_npy_path(flag: str, path: str | None) -> None:
    if path is not None and not path.endswith(".npy"):
        raise ValueError(f"{flag} must name a .npy file, got {path!r}")


def run(args: argparse.Namespace) -> int:
    from sparsegcn.cli.options import check_paths

    check_paths(  # "" would mean the current folder, or silently write nothing
        {
            "--checkpoint": args.checkpoint,
            "--out": args.out,
            "--embeddings": args.embeddings,
            "--json": args.json,
            "--root": args.root,
            "--pairs": args.pairs,
            "--dataset": args.dataset,
        }
    )
    _check_npy_path("--out", args.out)
    _check_npy_path("--embeddings", args.embeddings)
    outputs = {"--out": args.out, "--embeddings": args.embeddings, "--json": args.json}
    # Nor may an output replace any file of the checkpoint's folder (an older
    # checkpoint's manifest, its lock), not only those this run reads.
    check_distinct_outputs(outputs, {"--checkpoint": (folder_of(args.checkpoint), folder_owns)})
    for flag, path in outputs.items():
        if path:
            check_writable(path, what=flag)
    from sparsegcn.tasks.link import link_model_folder

    folder = link_model_folder(args.checkpoint)
    if folder is not None:
        args.checkpoint = folder
        return run_link(args)
    params = args.params or "best"
    if args.pairs is not None:
        if not os.path.exists(args.checkpoint):
            raise ValueError(f"--checkpoint {args.checkpoint!r} does not exist")
        try:
            read_manifest(args.checkpoint)
        except (CheckpointError, OSError, ValueError):
            raise ValueError(
                f"--pairs scores node pairs with a link model; {args.checkpoint!r} holds none "
                "(a link run's folder, or its link-model.json)"
            ) from None
        raise ValueError(
            f"--pairs scores node pairs with a link model; {args.checkpoint!r} is a node "
            "or graph classification checkpoint"
        )
    trained = experiment_from_checkpoint(
        read_manifest(args.checkpoint), dataset=args.dataset, root=args.root
    )
    check_not_inputs(outputs, run_inputs(trained, args.checkpoint))
    check_not_kept_files(outputs)
    task = task_for(trained.dataset, trained.task)
    if task.predict is not None:
        return _run_task_predict(args, resolve(task.predict), params)
    result = predict_checkpoint(
        args.checkpoint, dataset=args.dataset, root=args.root, params=params
    )
    predictions, embeddings = result["predictions"], result["embeddings"]
    if predictions.shape[0] == 1:
        predictions, embeddings = predictions[0], embeddings[0]
    test = np.asarray(result["test_acc"])
    official = result.get("ogb_evaluator")
    # All outputs or none: each is written to a temporary file, then all are renamed.
    writers = {args.out: npy_writer(predictions)}
    if args.embeddings:
        writers[args.embeddings] = npy_writer(embeddings)
    if args.json:
        reported = result["reported_test_acc"]
        writers[args.json] = json_writer(
            {
                "checkpoint": result["checkpoint"],
                "dataset": result["dataset"],
                "epoch": result["epoch"],
                "seeds": result["seeds"],
                "params": params,
                "out": args.out,
                "out_shape": list(predictions.shape),
                "embeddings": args.embeddings,
                "embeddings_shape": list(embeddings.shape) if args.embeddings else None,
                "test_acc": test.tolist(),
                "reported_test_acc": None if reported is None else np.asarray(reported).tolist(),
                **({"ogb_evaluator": official} if official else {}),
            }
        )
    write_all_atomic(writers)
    print(
        f"{result['dataset']}: {predictions.shape[-1]} nodes, {len(result['seeds'])} seed(s), "
        f"checkpoint epoch {result['epoch']}; test accuracy of the predictions "
        f"{test.mean():.4f} ± {test.std():.4f}"
    )
    if official:
        values = np.asarray(official["test"])
        print(f"ogb Evaluator test {official['metric']}: {values.mean():.4f} ± {values.std():.4f}")
    print(f"predictions: {args.out} int32 {list(predictions.shape)}")
    if args.embeddings:
        print(f"embeddings: {args.embeddings} float32 {list(embeddings.shape)}")
    return 0


def _run_task_predict(args: argparse.Namespace, predict, params: str) -> int:
    """``sparsegcn predict`` through a task's own ``predict`` (graph and hetero checkpoints)."""
    result = predict(args.checkpoint, dataset=args.dataset, root=args.root, params=params)
    predictions, embeddings = result["predictions"], result["embeddings"]
    if predictions.shape[0] == 1:
        predictions, embeddings = predictions[0], embeddings[0]
    metric, test = result["metric"], np.asarray(result["test"])
    official = result.get("ogb_evaluator")
    writers = {args.out: npy_writer(predictions)}
    if args.embeddings:
        writers[args.embeddings] = npy_writer(embeddings)
    if args.json:
        writers[args.json] = json_writer(
            {
                "checkpoint": result["checkpoint"],
                "dataset": result["dataset"],
                "epoch": result["epoch"],
                "seeds": result["seeds"],
                "params": params,
                "out": args.out,
                "out_shape": list(predictions.shape),
                "embeddings": args.embeddings,
                "embeddings_shape": list(embeddings.shape) if args.embeddings else None,
                "metric": metric,
                f"test_{metric}": test.tolist(),
                f"reported_test_{metric}": result["reported_test"],
                **({"ogb_evaluator": official} if official else {}),
            }
        )
    write_all_atomic(writers)
    rows = result.get("rows", "graphs")
    count = predictions.shape[-2] if rows == "graphs" else predictions.shape[-1]
    print(
        f"{result['dataset']}: {count} {rows}, {len(result['seeds'])} member(s), "
        f"checkpoint epoch {result['epoch']}; test {metric} of the predictions "
        f"{test.mean():.4f} ± {test.std():.4f} over the {test.shape[0]} member(s)"
    )
    if official:
        values = np.asarray(official["test"])
        print(f"ogb Evaluator test {official['metric']}: {values.mean():.4f} ± {values.std():.4f}")
    print(f"predictions: {args.out} {predictions.dtype} {list(predictions.shape)}")
    if args.embeddings:
        print(f"embeddings: {args.embeddings} float32 {list(embeddings.shape)}")
    return 0


def run_link(args: argparse.Namespace) -> int:
    """``predict`` of a link model: pair scores and embeddings, all outputs or none."""
    from sparsegcn.files import load_npy
    from sparsegcn.tasks.link import link_model_inputs, predict_links

    if args.pairs is None:
        raise ValueError(f"{args.checkpoint!r} holds a link model: pass --pairs PATH ([P, 2] .npy)")
    if args.dataset is not None:
        raise ValueError("--dataset: a link model predicts on the dataset it was trained on")
    if args.params is not None:
        raise ValueError(
            f"--params {args.params}: {args.checkpoint!r} holds a link model, which keeps "
            "one set of params, its last epoch's (link runs select none); drop --params"
        )
    _check_npy_path("--pairs", args.pairs)
    # No output may replace what this run reads: the pairs, the model, the dataset.
    inputs = [("--pairs", args.pairs), *link_model_inputs(args.checkpoint, root=args.root)]
    outputs = {"--out": args.out, "--embeddings": args.embeddings, "--json": args.json}
    check_not_inputs(outputs, inputs)
    check_not_kept_files(outputs)
    try:
        pairs = load_npy(args.pairs)
    except FileNotFoundError:
        raise ValueError(f"--pairs {args.pairs!r} does not exist") from None
    result = predict_links(args.checkpoint, pairs, root=args.root, what=f"--pairs {args.pairs!r}")
    scores, embeddings = result["scores"].astype(np.float32), result["embeddings"]
    if scores.shape[0] == 1:
        scores, embeddings = scores[0], embeddings[0]
    writers = {args.out: npy_writer(scores)}
    if args.embeddings:
        writers[args.embeddings] = npy_writer(embeddings.astype(np.float32))
    if args.json:
        writers[args.json] = json_writer(
            {
                "checkpoint": args.checkpoint,
                "dataset": result["dataset"],
                "seeds": result["seeds"],
                "pairs": args.pairs,
                "out": args.out,
                "out_shape": list(scores.shape),
                "embeddings": args.embeddings,
                "embeddings_shape": list(embeddings.shape) if args.embeddings else None,
                # No pairs (the embeddings alone): no mean.
                "mean_probability": float(np.mean(result["probabilities"])) if pairs.size else None,
            }
        )
    write_all_atomic(writers)
    print(f"{result['dataset']}: {pairs.shape[0]} pair(s) scored by {len(result['seeds'])} seed(s)")
    print(f"scores (logits): {args.out} float32 {list(scores.shape)}")
    if args.embeddings:
        print(f"embeddings: {args.embeddings} float32 {list(embeddings.shape)}")
    return 0

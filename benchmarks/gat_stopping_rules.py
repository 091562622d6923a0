"""Which epoch to keep: stopping rules compared on the same GAT runs (Cora).

    python benchmarks/gat_stopping_rules.py --root ../shared/data \\
        --json benchmarks/results/gat-cora-stopping-rules.json
    python benchmarks/gat_stopping_rules.py --root ../shared/data --model gatv2 \\
        --option value_dropout=0.6 --json out.json

Trains ``--seeds`` seeds for ``--epochs`` epochs with no early stopping,
keeps every epoch's validation accuracy, validation loss and test accuracy,
then replays three rules on that history, per seed, with patience 100 and
several epoch caps:

- ``val_acc``: the highest validation accuracy, then the lowest loss (the
  trainer's ``monitor="val_acc"``);
- ``val_loss``: the lowest validation loss (``monitor="val_loss"``);
- ``authors``: Veličković et al.'s code: an epoch resets patience when its
  accuracy is at least the best so far *or* its loss at most the lowest;
  the kept model is the last epoch that did both.

Each rule's row is the mean and standard deviation over seeds of the test
accuracy at the epoch it keeps. The rules are replayed exactly as the
trainer applies them (the ``val_acc`` and ``val_loss`` rows equal
``sparsegcn train --monitor ...`` with the same epochs and patience).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def keep_val_acc(va, vl, patience, cap):
    best, best_acc, best_loss, bad = 0, -1.0, np.inf, 0
    for e in range(cap):
        if va[e] > best_acc or (va[e] == best_acc and vl[e] < best_loss):
            best, best_acc, best_loss, bad = e, va[e], vl[e], 0
        else:
            bad += 1
            if bad >= patience:
                break
    return best


def keep_val_loss(va, vl, patience, cap):
    best, best_loss, bad = 0, np.inf, 0
    for e in range(cap):
        if vl[e] < best_loss:
            best, best_loss, bad = e, vl[e], 0
        else:
            bad += 1
            if bad >= patience:
                break
    return best


def keep_authors(va, vl, patience, cap):
    best, acc_max, loss_min, bad = 0, 0.0, np.inf, 0
    for e in range(cap):
        if va[e] >= acc_max or vl[e] <= loss_min:
            if va[e] >= acc_max and vl[e] <= loss_min:
                best = e
            acc_max, loss_min, bad = max(va[e], acc_max), min(vl[e], loss_min), 0
        else:
            bad += 1
            if bad == patience:
                break
    return best


RULES = {"val_acc": keep_val_acc, "val_loss": keep_val_loss, "authors": keep_authors}


def replay(history: dict, patience: int, caps) -> list[dict]:
    va, vl, te = (np.asarray(history[k]) for k in ("val_acc", "val_loss", "test_acc"))
    rows = []
    for cap in caps:
        for name, rule in RULES.items():
            kept = [
                rule(va[:, k], vl[:, k], patience, min(cap, len(va))) for k in range(va.shape[1])
            ]
            acc = np.array([te[e, k] for k, e in enumerate(kept)])
            rows.append(
                {
                    "rule": name,
                    "max_epochs": cap,
                    "patience": patience,
                    "test_acc_mean": float(acc.mean()),
                    "test_acc_std": float(acc.std()),
                    "kept_epoch_mean": float(np.mean(kept)) + 1,
                }
            )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(REPO.parent / "shared/data"))
    parser.add_argument("--model", default="gat", choices=("gat", "gatv2"))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--patience", type=int, default=100)
    parser.add_argument("--option", action="append", default=[], help="model option NAME=VALUE")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if not (Path(args.root) / "planetoid" / "ind.cora.x").exists():
        parser.error(f"needs planetoid/ind.cora.* under {args.root} (--root)")
    options = []
    for item in args.option:
        name, _, value = item.partition("=")
        try:
            options.append((name, float(value) if "." in value else int(value)))
        except ValueError:
            parser.error(f"--option {item!r}: expected NAME=NUMBER")

    from sparsegcn.datasets import data_location, load
    from sparsegcn.files import check_outputs

    try:
        check_outputs({"--json": args.json}, [("Cora", data_location("cora", args.root))])
    except (OSError, ValueError) as err:
        parser.error(str(err))

    from sparsegcn.experiment.build import build_model, node_data
    from sparsegcn.experiment.config import Experiment
    from sparsegcn.train import fit

    exp = Experiment(
        dataset="cora",
        root=args.root,
        model=args.model,
        seeds=args.seeds,
        epochs=args.epochs,
        patience=0,
        model_options=tuple(options),
    )
    dataset = load("cora", args.root)
    data = node_data(dataset, args.model, normalize_features=exp.normalize_features)
    result = fit(build_model(exp, dataset), data, exp.train_config(), seeds=exp.seed_list())
    history = {k: np.asarray(result.history[k]) for k in ("val_acc", "val_loss", "test_acc")}
    rows = replay(history, args.patience, sorted({200, 500, args.epochs}))
    print(f"{args.model} {dict(options)}: {args.seeds} seeds, {args.epochs} epochs")
    for r in rows:
        print(
            f"  {r['rule']:8s} max {r['max_epochs']:5d}  test {r['test_acc_mean']:.4f} "
            f"± {r['test_acc_std']:.4f}  kept epoch {r['kept_epoch_mean']:.0f}"
        )
    if args.json:
        from sparsegcn.files import write_json_atomic

        write_json_atomic(
            args.json,
            {
                "model": args.model,
                "options": dict(options),
                "seeds": args.seeds,
                "epochs": args.epochs,
                "rows": rows,
                "history": {k: v.tolist() for k, v in history.items()},
                "load": os.getloadavg(),
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

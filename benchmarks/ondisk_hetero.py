"""Saving and loading the full-size ``synthetic:mag`` and ``synthetic:proteins`` on disk.

Each phase runs in a process of its own, so that its peak RSS is its own:

- ``save``: generate the dataset in RAM (as ``--dataset synthetic:...``
  does), then write it (:func:`~sparsegcn.datasets.ondisk_hetero.save_hetero`
  for mag, :func:`~sparsegcn.datasets.ondisk.save` for proteins). Reported:
  generation and save seconds, the folder's size, the peak RSS.
- ``load``: memory-map the folder (the load-time checks included, not the
  sha256), then touch what one training batch of 1,024 target nodes reads:
  their features and labels, and their in-neighbours (proteins: the CSR
  rows and their edge features; mag: a scan of every relation into papers
  for the batch's incoming edges, then the features of the cited papers).
  Reported: load and touch seconds, the RSS after each and the peak; then,
  after the peak is read, the seconds of a sha256 check of every file.

Usage::

    python benchmarks/ondisk_hetero.py --dataset mag --folder DIR --json out.json

runs both phases (a subprocess each) and writes their raw reports with the
machine, versions and load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BATCH = 1024
NAMES = {"mag": "synthetic:mag", "proteins": "synthetic:proteins"}


def peak_rss_gb() -> float:
    """This process's peak resident set size, in GB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def rss_gb(field: str = "VmRSS") -> float:
    """This process's resident set size now, in GB: all of it (``VmRSS``), its anonymous
    memory (``RssAnon``: arrays, the heap) or its file pages (``RssFile``: the memory
    maps' pages read so far, which the kernel may drop at any time)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024 / 1e9
    return float("nan")


def rss_parts() -> dict:
    return {"anon_gb": rss_gb("RssAnon"), "file_gb": rss_gb("RssFile")}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def imports() -> dict:
    """Imports the package first, so that no phase's seconds count them."""
    start = time.perf_counter()
    import sparsegcn.datasets.mag
    import sparsegcn.datasets.ondisk
    import sparsegcn.datasets.ondisk_hetero
    import sparsegcn.datasets.proteins  # noqa: F401

    return {"import_s": time.perf_counter() - start, "rss_after_import_gb": rss_gb()}


def save_phase(dataset: str, folder: Path, scale: float) -> dict:
    baseline = imports()
    start = time.perf_counter()
    if dataset == "mag":
        from sparsegcn.datasets.mag import load_mag
        from sparsegcn.datasets.ondisk_hetero import save_hetero

        data = load_mag(NAMES[dataset], scale=scale)
        generate_s = time.perf_counter() - start
        rss_generated = rss_gb()
        tick = time.perf_counter()
        save_hetero(data, folder)
    else:
        from sparsegcn.datasets.ondisk import save
        from sparsegcn.datasets.proteins import generate_proteins

        data = generate_proteins(scale, seed=0)
        generate_s = time.perf_counter() - start
        rss_generated = rss_gb()
        tick = time.perf_counter()
        save(data, folder)
    save_s = time.perf_counter() - tick
    return {
        **baseline,
        "generate_s": generate_s,
        "save_s": save_s,
        "rss_after_generate_gb": rss_generated,
        "rss_after_save_parts": rss_parts(),
        "peak_rss_gb": peak_rss_gb(),
        "folder_bytes": folder_bytes(folder),
        "files": sorted(p.name for p in folder.iterdir()),
    }


def touch_mag(data) -> dict:
    """What one batch of papers reads: features, labels, incoming edges of every relation."""
    batch = np.sort(np.asarray(data.split["train"][:BATCH]))
    x = np.asarray(data.features["paper"][batch])
    y = np.asarray(data.labels[batch])
    incoming = {}
    cited = []
    for key, view in data.graph.relations.items():
        if key[2] != "paper":
            continue
        receivers, senders = view.receivers, view.senders
        found = 0
        for start in range(0, receivers.shape[0], 1 << 22):
            part = np.asarray(receivers[start : start + (1 << 22)])
            pos = np.searchsorted(batch, part)
            hit = (pos < batch.shape[0]) & (batch[np.minimum(pos, batch.shape[0] - 1)] == part)
            ids = np.asarray(senders[start : start + (1 << 22)])[hit]
            found += int(ids.shape[0])
            if key[0] == "paper":
                cited.append(ids)
        incoming["___".join(key)] = found
    neighbours = np.unique(np.concatenate(cited)) if cited else np.zeros(0, np.int64)
    x2 = np.asarray(data.features["paper"][neighbours])
    return {
        "batch": int(batch.shape[0]),
        "feature_rows": int(x.shape[0] + x2.shape[0]),
        "labels_read": int(y.shape[0]),
        "incoming_edges": incoming,
        "checksum": float(x.sum() + x2.sum()),
    }


def touch_proteins(data) -> dict:
    """What one batch of nodes reads: features, labels, its CSR rows and their edge features."""
    from sparsegcn.datasets.ondisk import load_csr

    batch = np.sort(np.asarray(data.split["train"][:BATCH]))
    indptr, indices = load_csr(data.info["folder"])
    lo, hi = np.asarray(indptr[batch]), np.asarray(indptr[batch + 1])
    positions = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)])
    senders = np.asarray(indices[positions])
    edge_rows = np.asarray(data.graph.edge_features[positions])
    x = np.asarray(data.features[batch])
    y = np.asarray(data.labels[batch])
    return {
        "batch": int(batch.shape[0]),
        "in_edges": int(positions.shape[0]),
        "distinct_senders": int(np.unique(senders).shape[0]),
        "labels_read": int(y.shape[0]),
        "checksum": float(edge_rows.sum() + x.sum()),
    }


def load_phase(dataset: str, folder: Path) -> dict:
    baseline = imports()
    start = time.perf_counter()
    if dataset == "mag":
        from sparsegcn.datasets.mag import load_mag

        data = load_mag(str(folder))
    else:
        from sparsegcn.datasets import load

        data = load(str(folder))
    load_s = time.perf_counter() - start
    rss_loaded, peak_loaded, parts_loaded = rss_gb(), peak_rss_gb(), rss_parts()
    tick = time.perf_counter()
    touched = touch_mag(data) if dataset == "mag" else touch_proteins(data)
    touch_s = time.perf_counter() - tick
    report = {
        **baseline,
        "load_s": load_s,
        "rss_after_load_gb": rss_loaded,
        "rss_after_load_parts": parts_loaded,
        "peak_rss_after_load_gb": peak_loaded,
        "touch_s": touch_s,
        "rss_after_touch_gb": rss_gb(),
        "rss_after_touch_parts": rss_parts(),
        "peak_rss_gb": peak_rss_gb(),
        "touch": touched,
    }
    tick = time.perf_counter()
    if dataset == "mag":
        from sparsegcn.datasets.ondisk_hetero import verify_hetero_checksums

        verify_hetero_checksums(folder)
    else:
        from sparsegcn.datasets.ondisk import verify_checksums

        verify_checksums(folder)
    report["verify_sha256_s"] = time.perf_counter() - tick
    return report


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


def versions() -> dict:
    import jax

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "jax": jax.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM",
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=sorted(NAMES), required=True)
    parser.add_argument("--folder", required=True, help="the dataset folder to write (new)")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--phase", choices=("save", "load", "both"), default="both")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    if args.phase == "save":
        print(json.dumps(save_phase(args.dataset, folder, args.scale)))
        return 0
    if args.phase == "load":
        print(json.dumps(load_phase(args.dataset, folder)))
        return 0
    if args.json and Path(args.json).exists():
        raise SystemExit(f"{args.json} exists; choose another name")
    from sparsegcn.files import check_outputs, write_atomic

    try:
        check_outputs({"--json": args.json}, [("the dataset folder (--folder)", folder)])
    except (OSError, ValueError) as err:
        parser.error(str(err))
    report: dict = {
        "dataset": NAMES[args.dataset],
        "scale": args.scale,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": f"python benchmarks/ondisk_hetero.py --dataset {args.dataset} --folder DIR"
        + (f" --scale {args.scale}" if args.scale != 1.0 else "")
        + (f" --json {args.json}" if args.json else ""),
        "page_cache": "warm: the load phase reads the files the save phase has just written",
        **versions(),
        "loadavg_before": loadavg(),
    }
    for phase in ("save", "load"):
        argv_phase = [sys.executable, __file__, "--dataset", args.dataset, "--folder", str(folder)]
        argv_phase += ["--scale", str(args.scale), "--phase", phase]
        tick = time.perf_counter()
        out = subprocess.run(argv_phase, check=True, capture_output=True, text=True).stdout
        report[phase] = json.loads(out.strip().splitlines()[-1])
        report[phase]["process_wall_s"] = time.perf_counter() - tick
        report[f"loadavg_after_{phase}"] = loadavg()
    report["loaded"] = max(report["loadavg_before"][0], report["loadavg_after_load"][0]) > 1.5
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        write_atomic(args.json, lambda f: f.write((text + "\n").encode()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Log-log plot of time against edges per backend; matplotlib is imported lazily."""

from __future__ import annotations

import os
from pathlib import Path

from sparsegcn.bench.graphs import ALL_VARIANTS
from sparsegcn.files import write_atomic

_PASS_TITLES = {"fwd": "forward  Â·x", "fwd_bwd": "forward + backward"}


def require_matplotlib():
    """Imports matplotlib with the file-only Agg backend, or explains how to get it."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(
            "--plot needs matplotlib: pip install 'sparsegcn[plot]' (or pip install matplotlib)"
        ) from err
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_report(report: dict, path: str | os.PathLike) -> Path:
    """Draws ``median_ms`` against ``num_edges``, one panel per pass, log-log.

    One line per backend (and reordering), per graph kind and feature width
    when the report has several. The PNG is written atomically.

    Returns:
      The path written.
    """
    plt = require_matplotlib()
    results = report["results"]
    passes = [p for p in ("fwd", "fwd_bwd") if any(r["pass"] == p for r in results)]
    if not passes:
        raise ValueError("the report has no results to plot")
    several_graphs = len({r["graph"] for r in results}) > 1
    several_widths = len({r["features"] for r in results}) > 1
    several_degrees = len({r["avg_degree"] for r in results}) > 1
    fig, axes = plt.subplots(1, len(passes), figsize=(6.4 * len(passes), 4.8), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    widths = sorted({r["features"] for r in results})
    dashes = ["-", (0, (5, 2)), (0, (1, 1)), (0, (5, 2, 1, 2))]
    for ax, pass_ in zip(axes[0], passes, strict=True):
        lines: dict = {}
        for r in results:
            if r["pass"] != pass_:
                continue
            key = (r["backend"], r["reorder"], r["graph"], r["features"], r["avg_degree"])
            lines.setdefault(key, []).append((r["num_edges"], r["median_ms"]))
        for (backend, reorder, graph, features, degree), points in sorted(
            lines.items(), key=lambda kv: (ALL_VARIANTS.index(kv[0][0]), *map(str, kv[0][1:]))
        ):
            points.sort()
            label = backend + (f" +{reorder}" if reorder else "")
            if several_graphs:
                label += f" {graph}"
            if several_widths:
                label += f" F={features}"
            if several_degrees:
                label += f" deg={degree:g}"
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker="o" if graph == "random" else "s",
                # Reordering: a lighter line; feature widths: dash patterns.
                linestyle=dashes[widths.index(features) % len(dashes)],
                alpha=1.0 if reorder is None else 0.6,
                color=colors[ALL_VARIANTS.index(backend) % len(colors)],
                label=label,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("edges E")
        ax.set_ylabel("median time (ms)")
        ax.set_title(_PASS_TITLES[pass_])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    machine = report.get("machine", {})
    where = machine.get("cpu", "?")
    if machine.get("backend", "cpu") != "cpu" and machine.get("devices"):
        where = machine["devices"][0].split(":", 1)[-1]  # e.g. "NVIDIA H200"
    fig.suptitle(
        f"sparsegcn propagation: {where}, {machine.get('backend', '?')}",
        fontsize="medium",
    )
    fig.tight_layout()
    try:
        return write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=110))
    finally:
        plt.close(fig)

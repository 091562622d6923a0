"""Training curves: loss and validation accuracy against epoch, mean and band over seeds.

matplotlib is an optional dependency (``pip install 'sparsegcn[plot]'``),
imported only when a plot is drawn. Figures are rendered with the Agg canvas
directly, without ``pyplot``, so drawing never touches global state or a
display.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sparsegcn.files import write_atomic

PANELS = (
    ("loss", "training loss"),
    ("val_acc", "validation accuracy"),
)


class PlotError(OSError):
    """A plot was not drawn after the work it shows was done and reported (exit status 1)."""


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            "plotting needs matplotlib, which is not installed; install the plot extra: "
            "pip install 'sparsegcn[plot]'"
        ) from err
    return Figure, FigureCanvasAgg


def seed_bands(
    history: Mapping, name: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Epochs, mean, and mean ± std over the seeds still training, for one metric.

    Args:
      history: per-epoch metrics ``{name: [E, K]}`` with the bool ``active``
        mask (a seed stops contributing once it has stopped early) and,
        optionally, ``epoch`` (1-based; defaults to ``1..E``).
      name: the metric to summarize.

    Returns:
      ``(epochs [E], mean [E], low [E], high [E])``; epochs where no seed was
      active are dropped.
    """
    if name not in history:
        raise ValueError(f"history has no metric {name!r}; it has {sorted(history)}")
    values = np.asarray(history[name], np.float64)
    if values.ndim != 2:
        raise ValueError(f"history[{name!r}] must be [epochs, seeds], got shape {values.shape}")
    active = np.asarray(history.get("active", np.ones(values.shape, bool)), bool)
    if active.shape != values.shape:
        raise ValueError(
            f"history['active'] has shape {active.shape}, history[{name!r}] {values.shape}"
        )
    epochs = np.arange(1, values.shape[0] + 1)
    if "epoch" in history:
        stamped = np.where(active, np.asarray(history["epoch"]), -1)
        epochs = stamped.max(axis=1)
    keep = active.any(axis=1)
    masked = np.where(active, values, np.nan)[keep]
    count = active[keep].sum(axis=1)
    mean = np.nansum(masked, axis=1) / count
    spread = np.sqrt(np.nansum((masked - mean[:, None]) ** 2, axis=1) / count)
    return epochs[keep], mean, mean - spread, mean + spread


def check_plot_path(path: str | os.PathLike, *, what: str = "plot path") -> Path:
    """Refuses a plot path that does not end in ``.png``, the one format drawn.

    Called by the commands with ``--plot`` before any work, so a run does not
    train for an hour and then fail on the name of its plot.

    Args:
      path: the PNG to be written.
      what: how the message names it, e.g. ``"--plot"``.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      ValueError: naming ``what`` and ``path``.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"{what} must end in .png, got {str(path)!r}")
    return path


def plot_curves(
    history: Mapping,
    path: str | os.PathLike,
    *,
    title: str | None = None,
    dpi: int = 120,
    metric: str = "accuracy",
) -> Path:
    """Draws training loss and the validation metric against epoch to a PNG.

    Each panel shows the mean over seeds as a line and mean ± one standard
    deviation as a shaded band, over the seeds still training at that epoch.
    The file is written atomically.

    Args:
      history: ``FitResult.history`` (``{name: [E, K]}``, with ``loss``,
        ``val_acc`` and ``active``).
      path: output file; ``.png``.
      title: figure title (default: the number of seeds).
      dpi: resolution.
      metric: what ``val_acc`` holds, for its axis label ("validation
        accuracy"; a multi-label run's is ROC-AUC).

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      ImportError: matplotlib is missing (names the ``sparsegcn[plot]`` extra).
      ValueError: a missing metric or a path not ending in ``.png``.
    """
    path = check_plot_path(path)
    bands = {name: seed_bands(history, name) for name, _ in PANELS}
    Figure, FigureCanvasAgg = _matplotlib()
    num_seeds = np.asarray(history["loss"]).shape[1]
    fig = Figure(figsize=(10, 4), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(PANELS))
    for ax, (name, label) in zip(axes, PANELS, strict=True):
        epochs, mean, low, high = bands[name]
        ax.plot(epochs, mean, color="C0", linewidth=1.5, label="mean")
        if num_seeds > 1:
            ax.fill_between(epochs, low, high, color="C0", alpha=0.25, linewidth=0, label="± 1 std")
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"validation {metric}" if name == "val_acc" else label)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best")
    fig.suptitle(title or f"mean over {num_seeds} seed{'s' if num_seeds != 1 else ''}")
    return write_atomic(path, lambda f: fig.savefig(f, format="png"))


__all__ = ["PlotError", "check_plot_path", "plot_curves", "seed_bands"]

"""Training curves: the bands' arithmetic, a valid PNG, and the missing-extra error."""

import struct
import sys

import numpy as np
import pytest

from sparsegcn.plots import plot_curves, seed_bands


def history(epochs=30, seeds=3, stop_seed_at=20):
    rng = np.random.default_rng(0)
    active = np.ones((epochs, seeds), bool)
    active[stop_seed_at:, 0] = False  # seed 0 stopped early
    t = np.arange(1, epochs + 1, dtype=np.float32)[:, None]
    return {
        "loss": (2.0 / t + 0.05 * rng.random((epochs, seeds))).astype(np.float32),
        "val_acc": (0.8 - 0.5 / t + 0.02 * rng.random((epochs, seeds))).astype(np.float32),
        "active": active,
        "epoch": np.broadcast_to(t.astype(np.int32), (epochs, seeds)),
    }


def test_bands_are_mean_and_std_over_active_seeds():
    h = {
        "loss": np.array([[1.0, 3.0], [2.0, 6.0], [9.0, 5.0]], np.float32),
        "active": np.array([[True, True], [True, True], [False, True]]),
    }
    epochs, mean, low, high = seed_bands(h, "loss")
    assert epochs.tolist() == [1, 2, 3]
    np.testing.assert_allclose(mean, [2.0, 4.0, 5.0])  # the stopped seed's 9.0 is ignored
    np.testing.assert_allclose(high - mean, [1.0, 2.0, 0.0])  # population std
    np.testing.assert_allclose(mean - low, [1.0, 2.0, 0.0])
    h["active"][2] = False
    epochs, mean, _, _ = seed_bands(h, "loss")
    assert epochs.tolist() == [1, 2] and mean.tolist() == [2.0, 4.0]


def test_bands_use_recorded_epochs():
    h = history(epochs=5, seeds=2, stop_seed_at=5)
    h["epoch"] = h["epoch"] + 50  # a resumed run's rows
    epochs, *_ = seed_bands(h, "loss")
    assert epochs.tolist() == [51, 52, 53, 54, 55]


def test_plot_writes_a_valid_png_with_content(tmp_path):
    path = plot_curves(history(), tmp_path / "curves.png", title="test run")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 480)  # 10 x 4 inches at 120 dpi
    assert data.rstrip()[-8:-4] == b"IEND"
    from matplotlib.image import imread

    image = imread(path)
    assert image.shape[:2] == (480, 1200)
    assert image[..., :3].std() > 0.05  # not blank: lines, bands and text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png"]  # no temp left


def test_single_seed_plots_without_band(tmp_path):
    h = {k: v[:, :1] for k, v in history(stop_seed_at=30).items()}
    assert plot_curves(h, tmp_path / "one.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_inputs_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"plot path must end in \.png, got '.*curves\.pdf'"):
        plot_curves(history(), tmp_path / "curves.pdf")
    with pytest.raises(ValueError, match=r"history has no metric 'val_acc'"):
        plot_curves({"loss": np.zeros((3, 1))}, tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"must be \[epochs, seeds\], got shape \(3,\)"):
        seed_bands({"loss": np.zeros(3)}, "loss")


def test_missing_matplotlib_names_the_extra(tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # makes the import fail
    with pytest.raises(ImportError, match=r"pip install 'sparsegcn\[plot\]'"):
        plot_curves(history(), tmp_path / "curves.png")
    assert not (tmp_path / "curves.png").exists()

"""A folder whose receivers would take too much RAM loads with lazy receivers."""

import numpy as np
import pytest

from sparsegcn.datasets import load, ondisk, save
from sparsegcn.datasets.ondisk import ExpandedRows, expand_rows, load_ondisk
from sparsegcn.datasets.stats import describe
from sparsegcn.sampling.host import rss_file_bytes


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save(load("synthetic:tiny"), tmp_path_factory.mktemp("lazy") / "tiny")


def test_receivers_are_expanded_up_to_an_eighth_of_ram(folder, monkeypatch):
    e = load_ondisk(folder).graph.num_edges
    assert isinstance(load_ondisk(folder).graph.receivers, np.ndarray)
    monkeypatch.setattr(ondisk, "physical_memory_bytes", lambda: 8 * 4 * e)
    assert isinstance(load_ondisk(folder).graph.receivers, np.ndarray)  # exactly 1/8
    monkeypatch.setattr(ondisk, "physical_memory_bytes", lambda: 8 * 4 * e - 8)
    lazy = load_ondisk(folder)
    assert isinstance(lazy.graph.receivers, ExpandedRows)
    assert lazy.graph.num_edges == e and len(lazy.graph.receivers) == e
    assert isinstance(load_ondisk(folder, expand_limit=4 * e).graph.receivers, np.ndarray)


def test_lazy_receivers_compute_any_slice_and_refuse_to_be_read_whole(folder):
    dataset = load_ondisk(folder, expand_limit=0)
    rows = dataset.graph.receivers
    indptr = np.load(folder / "indptr.npy")
    full = expand_rows(indptr, rows.shape[0])
    for a, b in [(0, 7), (3, 300), (0, rows.shape[0]), (rows.shape[0] - 5, rows.shape[0] + 9)]:
        np.testing.assert_array_equal(rows[a:b], full[a:b])
    np.testing.assert_array_equal(rows[5:40:3], full[5:40:3])
    positions = np.array([0, 17, rows.shape[0] - 1, -1])
    np.testing.assert_array_equal(rows[positions], full[positions])
    assert rows[10:10].shape == (0,) and rows.dtype == np.int32
    np.testing.assert_array_equal(rows.degrees(), np.bincount(full, minlength=indptr.size - 1))
    with pytest.raises(ValueError, match=r"are not in RAM: .*--graph-on host"):
        np.asarray(rows)
    with pytest.raises(IndexError, match="out of range"):
        rows[np.array([rows.shape[0]])]
    # `sparsegcn info` statistics run on it: degrees from indptr, homophily by slices
    lazy, eager = describe(dataset), describe(load_ondisk(folder))
    assert lazy["degree"] == eager["degree"] and lazy["homophily"] == eager["homophily"]


@pytest.mark.skipif(rss_file_bytes() is None, reason="RssFile needs Linux /proc")
def test_the_load_checks_leave_no_file_pages_resident(tmp_path):
    # 16 M edges: the checks read all of a 64 MB indices.npy.
    n, per_row = 1000, 16_000
    with ondisk.DatasetWriter(
        tmp_path / "g", num_nodes=n, num_stored_edges=n * per_row, num_features=1
    ) as writer:
        writer.indptr[:] = np.arange(n + 1, dtype=np.int64) * per_row
        row = np.repeat(np.arange(n, dtype=np.int32), per_row // n)
        for r in range(n):
            writer.indices[r * per_row : (r + 1) * per_row] = row
        writer.features[:] = 1
        writer.labels[:] = 0
        for node, split in enumerate(("train", "valid", "test")):
            writer.write_split(split, [node])
        folder = writer.finish(name="g", num_edges=n * per_row, num_classes=1)
    before = rss_file_bytes()
    dataset = load_ondisk(folder, expand_limit=0)
    assert rss_file_bytes() - before < 16 << 20
    assert int(dataset.graph.senders[-1]) == n - 1

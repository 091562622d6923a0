"""sparsegcn.files.release_pages: mapped pages leave the resident set, and nothing is lost."""

import mmap
import sys

import numpy as np
import pytest

from sparsegcn.files import release_pages

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"),
    reason="reads RssFile from /proc/self/status and needs madvise(MADV_DONTNEED)",
)


def _rss_file() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile line in /proc/self/status")


def test_written_pages_leave_the_rss_and_keep_their_values(tmp_path):
    rows, width = 40_000, 256  # 40 MB of float32
    array = np.lib.format.open_memmap(tmp_path / "a.npy", "w+", np.float32, (rows, width))
    before = _rss_file()
    array[:] = np.arange(rows, dtype=np.float32)[:, None]
    touched = _rss_file()
    assert touched - before > 0.9 * array.nbytes
    assert release_pages(array, 0, rows)
    assert _rss_file() - before < 0.05 * array.nbytes
    array[7, 3] = -1.0  # the map still works after the advice
    del array
    back = np.load(tmp_path / "a.npy")
    expected = np.arange(rows, dtype=np.float32)[:, None].repeat(width, 1)
    expected[7, 3] = -1.0
    np.testing.assert_array_equal(back, expected)


def test_a_row_range_of_a_read_only_slice(tmp_path):
    rows, width = 20_000, 512
    np.save(tmp_path / "b.npy", np.ones((rows, width), np.float32))
    array = np.load(tmp_path / "b.npy", mmap_mode="r")
    before = _rss_file()
    tail = array[rows // 2 :]
    assert float(tail.sum()) == tail.size
    grown = _rss_file() - before
    assert grown > 0.9 * tail.nbytes
    assert release_pages(tail, 0, tail.shape[0])
    assert _rss_file() - before < grown - 0.9 * tail.nbytes
    assert float(array.sum()) == array.size


def test_a_plain_array_has_nothing_to_release():
    assert release_pages(np.zeros((4, 2)), 0, 4) is False


def test_a_range_outside_the_array_names_it(tmp_path):
    array = np.lib.format.open_memmap(tmp_path / "c.npy", "w+", np.int32, (10,))
    with pytest.raises(ValueError, match=r"rows \[3, 11\) are outside an array of 10 rows"):
        release_pages(array, 3, 11)

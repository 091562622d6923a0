"""The TU reader against the format's README, on a hand-written miniature with
every optional file; malformed files refused naming file and line; the
download over a loopback server."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from fifos import fifo
from graph_sets import MINI, write_mini
from http_server import leftovers, serve
from racing import load_twice_at_once

from sparsegcn.datasets import tu
from sparsegcn.datasets.graph_dataset import one_hot_degrees
from sparsegcn.datasets.tu import load_tu, read_tu
from sparsegcn.files import CorruptFileError, NotRegularFileError


def test_miniature_with_every_optional_file(tmp_path):
    data = read_tu(write_mini(tmp_path), "MINI")
    assert data.name == "tu:MINI"
    assert (data.num_graphs, data.num_nodes, data.num_edges) == (3, 6, 6)
    np.testing.assert_array_equal(data.node_ptr, [0, 3, 5, 6])
    np.testing.assert_array_equal(data.edge_ptr, [0, 4, 6, 6])
    # Edges sorted by graph, file order kept within a graph, ids 0-based.
    np.testing.assert_array_equal(data.senders, [0, 1, 1, 2, 3, 4])
    np.testing.assert_array_equal(data.receivers, [1, 0, 2, 1, 4, 3])
    # Labels -1, 1 become classes 0, 1.
    np.testing.assert_array_equal(data.classes, [-1, 1])
    np.testing.assert_array_equal(data.labels, [1, 0, 1])
    # Node labels 0..2 one-hot, then the two attribute columns.
    expected_x = np.array(
        [
            [1, 0, 0, 0.5, 1],
            [0, 0, 1, 1.5, 2],
            [1, 0, 0, 2.5, 3],
            [0, 1, 0, 3.5, 4],
            [0, 1, 0, 4.5, 5],
            [0, 0, 1, 5.5, 6],
        ],
        np.float32,
    )
    np.testing.assert_array_equal(data.features, expected_x)
    # Edge labels 1..3 one-hot (shifted by their minimum), then the attribute, both
    # moved with their edges: file lines 2, 3, 4, 6, 1, 5.
    expected_e = np.array(
        [[1, 0, 0, 11], [1, 0, 0, 12], [0, 1, 0, 13], [0, 1, 0, 15], [0, 0, 1, 10], [0, 0, 1, 14]],
        np.float32,
    )
    np.testing.assert_array_equal(data.edge_features, expected_e)
    np.testing.assert_array_equal(data.targets, [[0.25], [0.5], [0.75]])


def test_self_loops_and_repeated_lines_are_kept_as_listed(tmp_path):
    # The documented difference from PyG's TUDataset, which drops the loop and merges
    # the repeat: node 6 gets a self-loop, graph 2's edge 4 -> 5 a second line.
    folder = write_mini(
        tmp_path,
        A=MINI["A"] + "6, 6\n4, 5\n",
        edge_labels=MINI["edge_labels"] + "1\n2\n",
        edge_attributes=MINI["edge_attributes"] + "16\n17\n",
    )
    data = read_tu(folder, "MINI")
    np.testing.assert_array_equal(data.edge_ptr, [0, 4, 7, 8])
    np.testing.assert_array_equal(data.senders[4:], [3, 4, 3, 5])
    np.testing.assert_array_equal(data.receivers[4:], [4, 3, 4, 5])
    np.testing.assert_array_equal(data.edge_features[4:, 3], [10, 14, 17, 16])


def test_only_required_files_give_constant_features(tmp_path):
    folder = write_mini(
        tmp_path,
        node_labels=None,
        node_attributes=None,
        edge_labels=None,
        edge_attributes=None,
        graph_attributes=None,
    )
    data = read_tu(folder, "MINI")
    np.testing.assert_array_equal(data.features, np.ones((6, 1), np.float32))
    assert data.edge_features is None and data.targets is None


def test_one_hot_degrees_replace_the_features_by_hand(tmp_path):
    # MINI: a path 1-2-3, an edge 4-5, node 6 alone: degrees 1, 2, 1, 1, 1, 0.
    data = read_tu(write_mini(tmp_path), "MINI")
    degrees = one_hot_degrees(data)
    np.testing.assert_array_equal(
        degrees.features,
        [[0, 1, 0], [0, 0, 1], [0, 1, 0], [0, 1, 0], [0, 1, 0], [1, 0, 0]],
    )
    assert degrees.features.dtype == np.float32 and degrees.feature_dims is None
    assert degrees.info["degrees"] == [0, 1, 2] and degrees.info["folder"] == data.info["folder"]
    np.testing.assert_array_equal(degrees.labels, data.labels)
    np.testing.assert_array_equal(degrees.senders, data.senders)
    assert data.features.shape == (6, 5)  # the dataset itself is left alone


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"A": "1, 2\n2\n"}, r"MINI_A.txt line 2: expected 2 comma-separated values, got 1"),
        ({"A": "1, 2\n2, x\n"}, r"MINI_A.txt line 2: 'x' is not an integer"),
        ({"A": "1, 2\n1_0, 1\n"}, r"MINI_A.txt line 2: '1_0' is not an integer"),  # was 10
        ({"A": "1, 2\n2, 7\n"}, r"MINI_A.txt line 2: node id out of \[1, 6\]: 2, 7"),
        ({"A": "1, 2\n3, 4\n"}, r"MINI_A.txt line 2: edge 3, 4 joins graphs 1 and 2"),
        ({"graph_indicator": "1\n1\n2\n1\n2\n3\n"}, r"MINI_graph_indicator.txt line 4"),
        ({"graph_indicator": "1\n1\n\n2\n2\n3\n"}, r"MINI_graph_indicator.txt line 3: empty"),
        ({"graph_labels": "1\n-1\n"}, r"MINI_graph_labels.txt: expected 3 lines"),
        ({"node_labels": "0\n2\n0\n1\n1\n"}, r"MINI_node_labels.txt: expected 6 lines"),
        ({"node_attributes": "1\n1\n1\n1\n1\nnan\n"}, r"node_attributes.txt line 6: 'nan'"),
        ({"edge_labels": "1\n1\n"}, r"MINI_edge_labels.txt: expected 6 lines"),
        (
            {"graph_labels": None, "graph_attributes": None},
            r"MINI_graph_labels.txt is missing, and so is MINI_graph_attributes.txt",
        ),
        # Before: "OverflowError: Python int too large to convert to C long", no file named.
        (
            {"A": "1, 2\n2, 99999999999999999999\n"},
            r"MINI_A.txt line 2: '99999999999999999999' is out of the 64-bit integer range",
        ),
        # Before: read as inf, with a RuntimeWarning on stderr.
        (
            {"node_attributes": "1\n1\n1\n1e39\n1\n1\n"},
            r"MINI_node_attributes.txt line 4: '1e39' is too large for float32",
        ),
        ({"edge_attributes": "1\n1\n1\n1\n-4e38\n1\n"}, r"edge_attributes.txt line 5"),
    ],
)
def test_malformed_files_are_refused_naming_file_and_line(tmp_path, changes, message):
    folder = write_mini(tmp_path, **changes)
    with pytest.raises(ValueError, match=message) as raised:
        read_tu(folder, "MINI")
    assert str(folder) in str(raised.value)  # the whole path, not the file name alone


def test_a_byte_order_mark_is_read_as_utf8_text(tmp_path):
    # Before: "'\\ufeff4' is not an integer".
    marked = {k: "\ufeff" + v for k, v in MINI.items()}
    data = read_tu(write_mini(tmp_path, **marked), "MINI")
    plain = read_tu(write_mini(tmp_path / "plain"), "MINI")
    np.testing.assert_array_equal(data.features, plain.features)
    np.testing.assert_array_equal(data.labels, plain.labels)
    np.testing.assert_array_equal(data.senders, plain.senders)


def test_mutag_counts(data_root):
    if not (data_root / "tu" / "MUTAG").exists():
        pytest.skip("no tu/MUTAG in the shared data")
    data = load_tu("tu:MUTAG", data_root, download=False)
    assert (data.num_graphs, data.num_nodes, data.num_edges) == (188, 3371, 7442)
    np.testing.assert_array_equal(np.bincount(data.labels), [63, 125])
    assert data.features.shape == (3371, 7) and data.edge_features.shape == (7442, 4)


def _zipped(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, f"MINI/{path.name}")
    return buffer.getvalue()


def test_download_checks_every_file_and_renames_into_place(tmp_path, monkeypatch):
    source = write_mini(tmp_path / "source")
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.iterdir()}
    monkeypatch.setitem(tu.TU_SHA256, "MINI", digests)
    root = tmp_path / "root"
    with serve({"/MINI.zip": _zipped(source)}) as (server, url):
        data = load_tu("tu:MINI", root, url=f"{url}/MINI.zip")
    assert server.requests == ["/MINI.zip"]
    assert data.num_graphs == 3
    assert sorted(p.name for p in (root / "tu").iterdir()) == ["MINI"]


def test_download_with_a_wrong_file_leaves_nothing(tmp_path, monkeypatch):
    source = write_mini(tmp_path / "source")
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.iterdir()}
    digests["MINI_A.txt"] = "0" * 64
    monkeypatch.setitem(tu.TU_SHA256, "MINI", digests)
    root = tmp_path / "root"
    with (
        serve({"/MINI.zip": _zipped(source)}) as (_, url),
        pytest.raises(ValueError, match=r"sha256 mismatch for MINI_A\.txt"),
    ):
        load_tu("tu:MINI", root, url=f"{url}/MINI.zip")
    assert not root.exists()  # nothing left, not even the folders the download made


def test_download_installs_only_checked_files(tmp_path, monkeypatch):
    # A data file the checksums do not cover would be read by read_tu (node
    # attributes become features): it refuses the archive; a README is skipped.
    source = write_mini(tmp_path / "source")
    attributes = (source / "MINI_node_attributes.txt").read_bytes()
    (source / "MINI_node_attributes.txt").unlink()  # as MUTAG has none
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.iterdir()}
    monkeypatch.setitem(tu.TU_SHA256, "MINI", digests)
    (source / "README.txt").write_text("about MINI")
    root = tmp_path / "root"
    with serve({"/MINI.zip": _zipped(source)}) as (_, url):
        load_tu("tu:MINI", root, url=f"{url}/MINI.zip")
    assert sorted(p.name for p in (root / "tu" / "MINI").iterdir()) == sorted(digests)
    (source / "MINI_node_attributes.txt").write_bytes(attributes)
    other = tmp_path / "other"
    with (
        serve({"/MINI.zip": _zipped(source)}) as (_, url),
        pytest.raises(ValueError, match=r"MINI_node_attributes\.txt', a data file without"),
    ):
        load_tu("tu:MINI", other, url=f"{url}/MINI.zip")
    assert not other.exists()
    monkeypatch.setattr(tu, "MAX_MEMBER_BYTES", 10)
    with (
        serve({"/MINI.zip": _zipped(source)}) as (_, url),
        pytest.raises(ValueError, match=r"expands to \d+ bytes, over the 10 a TU data file"),
    ):
        load_tu("tu:MINI", other, url=f"{url}/MINI.zip")
    assert not other.exists()


def test_unrecorded_dataset_is_not_downloaded(tmp_path):
    with pytest.raises(ValueError, match="no recorded sha256"):
        load_tu("tu:NOSUCH", tmp_path, url="http://127.0.0.1:9/NOSUCH.zip")
    with pytest.raises(ValueError, match="expected tu:NAME"):
        load_tu("tu:../x", tmp_path)


@pytest.mark.parametrize("suffix", ["A", "node_labels", "graph_attributes"])
def test_a_fifo_in_place_of_a_file_is_refused_unread(tmp_path, suffix):
    # Read as text, a FIFO blocks until a writer comes; fifo() unblocks such a
    # read, so without the refusal the test fails instead of hanging.
    folder = write_mini(tmp_path)
    with (
        fifo(folder / f"MINI_{suffix}.txt"),
        pytest.raises(
            NotRegularFileError, match=rf"MINI_{suffix}\.txt is not a regular file: it is a FIFO"
        ),
    ):
        read_tu(folder, "MINI")


def test_a_label_range_wider_than_the_lines_is_refused(tmp_path):
    # One edited line would make a [6, 200001] float32 block (a [3371, 200001] one,
    # 2.7 GB, for MUTAG); values within the line count keep PyG's widths.
    folder = write_mini(tmp_path, node_labels="0\n2\n0\n1\n1\n200000\n")
    with pytest.raises(
        ValueError, match=r"MINI_node_labels\.txt: label column 1 spans the values 0 \.\. 200000"
    ):
        read_tu(folder, "MINI")
    wide = tu.MIN_ONE_HOT_LIMIT - 1  # small files may still span up to the floor
    data = read_tu(write_mini(tmp_path, node_labels=f"0\n2\n0\n1\n1\n{wide}\n"), "MINI")
    assert data.features.shape == (6, tu.MIN_ONE_HOT_LIMIT + 2)  # + the two attributes


def _recorded(root: Path, monkeypatch) -> Path:
    folder = write_mini(root / "tu" / "MINI", node_attributes=None, edge_attributes=None)
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    monkeypatch.setitem(tu.TU_SHA256, "MINI", digests)
    return folder


def test_recorded_files_are_checked_on_every_load(tmp_path, monkeypatch):
    folder = _recorded(tmp_path, monkeypatch)
    assert load_tu("tu:MINI", tmp_path, download=False).num_edges == 6
    edges = folder / "MINI_A.txt"
    edges.write_text("\n".join(edges.read_text().splitlines()[:-2]) + "\n")  # still valid TU
    labels = folder / "MINI_edge_labels.txt"
    labels.write_text("\n".join(labels.read_text().splitlines()[:-2]) + "\n")
    assert read_tu(folder, "MINI").num_edges == 4  # what an unchecked load would give
    with pytest.raises(CorruptFileError, match=r"MINI_A\.txt: changed or truncated: its sha256"):
        load_tu("tu:MINI", tmp_path, download=False)


def test_a_missing_or_an_unrecorded_data_file_is_refused(tmp_path, monkeypatch):
    folder = _recorded(tmp_path, monkeypatch)
    (folder / "MINI_node_attributes.txt").write_text("1\n" * 6)  # would become features
    with pytest.raises(ValueError, match=r"MINI_node_attributes\.txt is not a file of the publ"):
        load_tu("tu:MINI", tmp_path, download=False)
    (folder / "MINI_node_attributes.txt").unlink()
    (folder / "MINI_edge_labels.txt").unlink()  # would silently drop the edge features
    with pytest.raises(ValueError, match=r"MINI_edge_labels\.txt is missing: it is a recorded"):
        load_tu("tu:MINI", tmp_path, download=False)


def test_a_download_that_is_not_a_zip_archive_names_it_and_its_url(tmp_path, monkeypatch):
    source = write_mini(tmp_path / "source")
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.iterdir()}
    monkeypatch.setitem(tu.TU_SHA256, "MINI", digests)
    root = tmp_path / "root"
    with (
        serve({"/MINI.zip": b"<html>not found</html>"}) as (_, url),
        pytest.raises(CorruptFileError, match=rf"MINI\.zip from {url}/MINI\.zip: not a zip"),
    ):
        load_tu("tu:MINI", root, url=f"{url}/MINI.zip")
    assert not root.exists()  # nothing left, not even the folders the download made


def test_a_download_over_the_archive_limit_is_cut_off(tmp_path, monkeypatch):
    # Without a bound a server that never stops sending fills the disk.
    source = write_mini(tmp_path / "source")
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.iterdir()}
    monkeypatch.setitem(tu.TU_SHA256, "MINI", digests)
    monkeypatch.setattr(tu, "MAX_ARCHIVE_BYTES", 1 << 20)
    root = tmp_path / "root"
    with (
        serve({"/MINI.zip": ("no-length", bytes(3 << 20))}) as (_, url),
        pytest.raises(ValueError, match=r"sent at least .* over the 1,048,576 allowed"),
    ):
        load_tu("tu:MINI", root, url=f"{url}/MINI.zip")
    assert not root.exists()  # nothing left, not even the folders the download made
    with serve({"/MINI.zip": _zipped(source)}) as (_, url):  # a real archive still fits
        assert load_tu("tu:MINI", root, url=f"{url}/MINI.zip").num_graphs == 3


def test_two_loads_downloading_at_once_both_use_the_one_folder(tmp_path, monkeypatch):
    # Before: the slower load's rename failed with "[Errno 39] Directory not empty",
    # though the dataset was in place (the CLI exited 1).
    source = write_mini(tmp_path / "source")
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.iterdir()}
    monkeypatch.setitem(tu.TU_SHA256, "MINI", digests)
    root = tmp_path / "root"
    with serve({"/MINI.zip": ("trickle", 1e-4, _zipped(source))}) as (server, url):
        results = load_twice_at_once(
            lambda: load_tu("tu:MINI", root, url=f"{url}/MINI.zip"), tu, monkeypatch
        )
    assert server.requests == ["/MINI.zip", "/MINI.zip"]
    assert [r if isinstance(r, Exception) else r.num_graphs for r in results] == [3, 3]
    assert leftovers(root / "tu") == ["MINI"]  # the second copy is gone
    assert leftovers(root / "tu" / "MINI") == sorted(digests)


def test_a_folder_another_load_put_in_place_meanwhile_is_checked(tmp_path, monkeypatch):
    # The copy found in place is used as a folder already there is: checked first.
    source = write_mini(tmp_path / "source")
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.iterdir()}
    monkeypatch.setitem(tu.TU_SHA256, "MINI", digests)
    root = tmp_path / "root"
    real = tu.download_file

    def meanwhile(*args, **kwargs):
        theirs = write_mini(root / "tu" / "MINI")
        (theirs / "MINI_A.txt").write_text("1, 2\n")  # valid TU, not the published file
        return real(*args, **kwargs)

    monkeypatch.setattr(tu, "download_file", meanwhile)
    with (
        serve({"/MINI.zip": _zipped(source)}) as (_, url),
        pytest.raises(CorruptFileError, match=r"MINI/MINI_A\.txt: changed or truncated"),
    ):
        load_tu("tu:MINI", root, url=f"{url}/MINI.zip")
    assert leftovers(root / "tu") == ["MINI"]
    assert (root / "tu" / "MINI" / "MINI_A.txt").read_text() == "1, 2\n"  # theirs, kept

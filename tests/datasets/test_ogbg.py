"""The ogbg-* reader against OGB's raw layout: a hand-written miniature checked array by
array, against ogb's own reader, malformed files refused naming file and line, the
download over a loopback server, and the official evaluator."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from http_server import leftovers, serve
from racing import load_twice_at_once

from sparsegcn.datasets import ogbg
from sparsegcn.datasets.graphs import load_graphs
from sparsegcn.datasets.ogbg import load_ogbg, read_ogbg
from sparsegcn.files import CorruptFileError

HAS_OGB = (
    importlib.util.find_spec("ogb") is not None and importlib.util.find_spec("torch") is not None
)

NODE_FEAT = [
    [5, 0, 1, 5, 3, 0, 2, 0, 0],
    [7, 0, 2, 5, 1, 0, 1, 1, 1],
    [6, 1, 1, 4, 0, 0, 1, 1, 1],
    [5, 0, 1, 5, 3, 0, 2, 0, 0],
    [16, 0, 1, 6, 0, 0, 5, 0, 0],
    [118, 4, 11, 11, 9, 5, 5, 1, 1],
]
EDGE_FEAT = [[0, 0, 0], [1, 0, 1], [3, 5, 1]]

# Three molecules of ogbg-molclintox's shape (2 tasks): 3 atoms and 2 bonds, 2 atoms and
# 1 bond (stored 1 -> 0), 1 atom and no bond; missing labels as pandas writes them
# (empty) and as text (nan).
MINI = {
    "raw/num-node-list.csv.gz": "3\n2\n1\n",
    "raw/num-edge-list.csv.gz": "2\n1\n0\n",
    "raw/edge.csv.gz": "0,1\n1,2\n1,0\n",
    "raw/node-feat.csv.gz": "".join(",".join(map(str, r)) + "\n" for r in NODE_FEAT),
    "raw/edge-feat.csv.gz": "".join(",".join(map(str, r)) + "\n" for r in EDGE_FEAT),
    "raw/graph-label.csv.gz": "0,1\n1,\n,nan\n",
    "split/scaffold/train.csv.gz": "0\n",
    "split/scaffold/valid.csv.gz": "1\n",
    "split/scaffold/test.csv.gz": "2\n",
    "RELEASE_v1.txt": "",
}
NAME = "ogbg-molclintox"


def write_ogbg(folder: Path, files=MINI, **changes) -> Path:
    """The miniature in OGB's raw layout under ``folder`` (``None`` in ``changes`` drops a
    file); ``.gz`` files are gzipped."""
    contents = {**files, **changes}
    for relative, text in contents.items():
        if text is None:
            continue
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode()
        path.write_bytes(gzip.compress(data) if relative.endswith(".gz") else data)
    return folder


def test_miniature_every_array(tmp_path):
    data = read_ogbg(write_ogbg(tmp_path / "ogbg_molclintox"), NAME)
    assert (data.name, data.num_graphs, data.num_nodes, data.num_edges) == (NAME, 3, 6, 6)
    np.testing.assert_array_equal(data.node_ptr, [0, 3, 5, 6])
    np.testing.assert_array_equal(data.edge_ptr, [0, 4, 6, 6])
    # Local ids shifted by the graph's first node; each bond then its reverse.
    np.testing.assert_array_equal(data.senders, [0, 1, 1, 2, 4, 3])
    np.testing.assert_array_equal(data.receivers, [1, 0, 2, 1, 3, 4])
    assert data.senders.dtype == data.receivers.dtype == np.int32
    np.testing.assert_array_equal(data.features, NODE_FEAT)
    assert data.features.dtype == np.int32 and data.feature_dims == ogbg.ATOM_FEATURE_DIMS
    np.testing.assert_array_equal(data.edge_features, np.repeat(EDGE_FEAT, 2, axis=0))
    assert data.edge_features.dtype == np.int32
    assert data.edge_feature_dims == ogbg.BOND_FEATURE_DIMS
    np.testing.assert_array_equal(data.labels, [[0, 1], [1, np.nan], [np.nan, np.nan]])
    assert data.labels.dtype == np.float32 and data.kind == "binary"
    assert (data.num_classes, data.metric) == (2, "rocauc")
    assert {k: v.tolist() for k, v in data.split.items()} == {
        "train": [0],
        "valid": [1],
        "test": [2],
    }


@pytest.mark.ogb
@pytest.mark.skipif(not HAS_OGB, reason="needs the optional extra: torch (CPU) and sparsegcn[ogb]")
def test_agrees_with_ogbs_own_reader(tmp_path, capsys):
    from sparsegcn.datasets.ogb import import_ogb

    import_ogb()  # without ogb's version-check threads
    import pandas as pd
    from ogb.io.read_graph_raw import read_csv_graph_raw

    folder = write_ogbg(tmp_path / "ogbg_molclintox")
    data = read_ogbg(folder, NAME)
    graphs = read_csv_graph_raw(str(folder / "raw"), add_inverse_edge=True)
    offsets = np.cumsum([0] + [g["num_nodes"] for g in graphs])
    edges = np.concatenate([g["edge_index"] + o for g, o in zip(graphs, offsets, strict=False)], 1)
    np.testing.assert_array_equal(data.senders, edges[0])
    np.testing.assert_array_equal(data.receivers, edges[1])
    np.testing.assert_array_equal(data.features, np.concatenate([g["node_feat"] for g in graphs]))
    np.testing.assert_array_equal(
        data.edge_features, np.concatenate([g["edge_feat"] for g in graphs])
    )
    np.testing.assert_array_equal(data.nodes_per_graph(), [g["num_nodes"] for g in graphs])
    labels = pd.read_csv(folder / "raw/graph-label.csv.gz", header=None).values
    np.testing.assert_array_equal(data.labels, labels.astype(np.float32))


@pytest.mark.ogb
@pytest.mark.skipif(not HAS_OGB, reason="needs the optional extra: torch (CPU) and sparsegcn[ogb]")
def test_constants_match_the_installed_ogb():
    from sparsegcn.datasets.ogb import import_ogb

    import_ogb()
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    assert tuple(get_atom_feature_dims()) == ogbg.ATOM_FEATURE_DIMS
    assert tuple(get_bond_feature_dims()) == ogbg.BOND_FEATURE_DIMS
    installed = ogbg.read_master(ogbg.installed_master())
    for name, row in ogbg.MASTER.items():
        assert installed[name] == row, name


def test_master_table_without_ogb(monkeypatch):
    monkeypatch.setattr(ogbg, "installed_master", lambda: None)
    row = ogbg.master_row("ogbg-molpcba")
    assert (row["num tasks"], row["eval metric"], row["add_inverse_edge"]) == ("128", "ap", "True")
    assert ogbg.master_row("ogbg-molesol")["task type"] == "regression"
    with pytest.raises(ValueError, match="unsupported OGB graph dataset 'ogbg-code2'"):
        ogbg.master_row("ogbg-code2")


def test_ppa_layout_multiclass_and_no_node_features(tmp_path):
    files = {k: v for k, v in MINI.items() if k != "raw/node-feat.csv.gz"}
    files["raw/edge-feat.csv.gz"] = "0.5,0,1\n0.25,1,0\n0,0,0.125\n"
    files["raw/graph-label.csv.gz"] = "36\n0\n7\n"
    files = {k.replace("scaffold", "species"): v for k, v in files.items()}
    data = read_ogbg(write_ogbg(tmp_path / "ogbg_ppa", files), "ogbg-ppa")
    np.testing.assert_array_equal(data.labels, [36, 0, 7])
    assert data.labels.dtype == np.int32 and (data.num_classes, data.metric) == (37, "acc")
    np.testing.assert_array_equal(data.features, np.zeros((6, 1)))
    assert data.feature_dims == (1,) and data.edge_feature_dims is None
    np.testing.assert_array_equal(
        data.edge_features[::2], [[0.5, 0, 1], [0.25, 1, 0], [0, 0, 0.125]]
    )
    files["raw/edge-feat.csv.gz"] = "0.5,0,1\n0.25,nan,0\n0,0,0.125\n"
    with pytest.raises(ValueError, match=r"edge-feat.csv.gz line 2: a value is not finite"):
        read_ogbg(write_ogbg(tmp_path / "bad", files), "ogbg-ppa")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"raw/edge.csv.gz": "0,1\n1,3\n1,0\n"},
            r"edge.csv.gz line 2: node id 1, 3 outside graph 0",
        ),
        (
            {"raw/edge.csv.gz": "0,1\n1\n1,0\n"},
            r"edge.csv.gz line 2: expected 2 comma-separated values, got 1",
        ),
        ({"raw/edge.csv.gz": "0,1\n1,x\n1,0\n"}, r"edge.csv.gz line 2: 'x' is not an integer"),
        ({"raw/edge.csv.gz": "0,1\n\n1,0\n"}, r"edge.csv.gz: line 2: empty line"),
        ({"raw/edge.csv.gz": "0,1\n1,2\n"}, r"edge.csv.gz: expected 3 lines"),
        ({"raw/num-edge-list.csv.gz": "2\n1\n"}, r"num-edge-list.csv.gz: expected 3 lines"),
        ({"raw/num-node-list.csv.gz": "3\n-2\n1\n"}, r"num-node-list.csv.gz line 2: count -2"),
        (
            {
                "raw/node-feat.csv.gz": MINI["raw/node-feat.csv.gz"].replace(
                    "5,0,1,5,3", "119,0,1,5,3", 1
                )
            },
            r"node-feat.csv.gz line 1: column 1 holds 119, outside the vocabulary \[0, 119\)",
        ),
        ({"raw/edge-feat.csv.gz": "0,0,0\n1,0,1\n"}, r"edge-feat.csv.gz: expected 3 lines"),
        ({"raw/edge-feat.csv.gz": "0,0,0\n1,0,1\n5,0,0\n"}, r"edge-feat.csv.gz line 3: column 1"),
        (
            {"raw/graph-label.csv.gz": "0,1\n2,\n,\n"},
            r"graph-label.csv.gz line 2: task 1 holds '2'",
        ),
        ({"raw/graph-label.csv.gz": "0,1\n1,0\n"}, r"graph-label.csv.gz: expected 3 lines"),
        ({"raw/graph-label.csv.gz": "0,1\n1.5,\n,\n"}, r"line 2: task 1 holds '1.5'"),
        ({"raw/graph-label.csv.gz": "0,1\n1,0,1\n,\n"}, r"label.csv.gz line 2: expected 2 comma"),
        ({"raw/graph-label.csv.gz": "0,1\n1\n0,0\n"}, r"graph-label.csv.gz line 2: expected 2"),
        ({"split/scaffold/valid.csv.gz": "1\n0\n"}, r"valid.csv.gz line 2: graph 0 is already"),
        ({"split/scaffold/test.csv.gz": "3\n"}, r"test.csv.gz line 1: graph id 3 is outside"),
        ({"raw/edge-feat.csv.gz": None}, r"edge-feat.csv.gz is missing"),
        ({"RELEASE_v1.txt": None}, r"has no RELEASE_v1.txt"),
    ],
)
def test_malformed_files_are_refused_naming_file_and_line(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        read_ogbg(write_ogbg(tmp_path / "d", **changes), NAME)


NO_EDGES = {
    "raw/num-edge-list.csv.gz": "0\n0\n0\n",
    "raw/edge.csv.gz": "",
    "raw/edge-feat.csv.gz": "",
}
INT64_MAX = "9223372036854775807"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # Counts summing to 0 used to skip reading the data files they describe.
        (
            {"raw/num-edge-list.csv.gz": "0\n0\n0\n"},
            r"edge\.csv\.gz: expected 0 lines \(the sum of num-edge-list\.csv\.gz\), got 3",
        ),
        (
            {**NO_EDGES, "raw/edge-feat.csv.gz": MINI["raw/edge-feat.csv.gz"]},
            r"edge-feat\.csv\.gz: expected 0 lines \(one per line of edge\.csv\.gz\), got 3",
        ),
        (
            {**NO_EDGES, "raw/num-node-list.csv.gz": "0\n0\n0\n"},
            r"node-feat\.csv\.gz: expected 0 lines \(the sum of num-node-list\.csv\.gz\), got 6",
        ),
        # Counts whose sum wrapped int64 (to 0 here) before the int32 check saw it.
        (
            {"raw/num-node-list.csv.gz": f"{INT64_MAX}\n{INT64_MAX}\n2\n"},
            rf"num-node-list\.csv\.gz line 1: count {INT64_MAX} is past 2147483647",
        ),
        (
            {"raw/num-edge-list.csv.gz": f"2\n{INT64_MAX}\n{INT64_MAX}\n"},
            rf"num-edge-list\.csv\.gz line 2: count {INT64_MAX} is past 2147483647",
        ),
    ],
)
def test_count_files_are_checked_against_the_data_not_trusted(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        read_ogbg(write_ogbg(tmp_path / "d", **changes), NAME)


def test_empty_data_files_where_the_counts_sum_to_zero(tmp_path):
    data = read_ogbg(write_ogbg(tmp_path / "d", **NO_EDGES), NAME)
    assert (data.num_graphs, data.num_nodes, data.num_edges) == (3, 6, 0)
    np.testing.assert_array_equal(data.edge_ptr, [0, 0, 0, 0])
    assert data.edge_features.shape == (0, 3) and data.senders.shape == (0,)


def test_truncated_gzip_is_refused_naming_the_file(tmp_path):
    folder = write_ogbg(tmp_path / "d")
    path = folder / "raw/node-feat.csv.gz"
    path.write_bytes(path.read_bytes()[:-12])
    with pytest.raises(CorruptFileError, match=r"node-feat.csv.gz: truncated"):
        read_ogbg(folder, NAME)


def _zipped(folder: Path, top: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, f"{top}/{path.relative_to(folder)}")
    return buffer.getvalue()


def test_download_checks_the_archive_and_renames_into_place(tmp_path, monkeypatch):
    archive = _zipped(write_ogbg(tmp_path / "source"), "clintox")
    monkeypatch.setitem(ogbg.ARCHIVE_SHA256, NAME, hashlib.sha256(archive).hexdigest())
    root = tmp_path / "root"
    with serve({"/clintox.zip": archive}) as (server, url):
        data = load_ogbg(NAME, root, url=f"{url}/clintox.zip")
    assert server.requests == ["/clintox.zip"]
    assert data.num_graphs == 3
    assert sorted(p.name for p in root.iterdir()) == ["ogbg_molclintox"]
    again = load_graphs(NAME, root, download=False)  # read from the folder, no request
    np.testing.assert_array_equal(again.senders, data.senders)


def test_two_loads_downloading_at_once_both_use_the_one_folder(tmp_path, monkeypatch):
    # Before: the slower load's rename failed with "[Errno 39] Directory not empty",
    # though the dataset was in place (ogbn and ogbl extract through the same code).
    archive = _zipped(write_ogbg(tmp_path / "source"), "clintox")
    monkeypatch.setitem(ogbg.ARCHIVE_SHA256, NAME, hashlib.sha256(archive).hexdigest())
    root = tmp_path / "root"
    with serve({"/clintox.zip": ("trickle", 1e-4, archive)}) as (server, url):
        results = load_twice_at_once(
            lambda: load_ogbg(NAME, root, url=f"{url}/clintox.zip"), ogbg, monkeypatch
        )
    assert server.requests == ["/clintox.zip", "/clintox.zip"]
    assert [r if isinstance(r, Exception) else r.num_graphs for r in results] == [3, 3]
    assert leftovers(root) == ["ogbg_molclintox"]  # the second copy and the archives are gone


def test_download_with_a_wrong_checksum_leaves_nothing(tmp_path, monkeypatch):
    archive = _zipped(write_ogbg(tmp_path / "source"), "clintox")
    monkeypatch.setitem(ogbg.ARCHIVE_SHA256, NAME, "0" * 64)
    root = tmp_path / "root"
    with serve({"/clintox.zip": archive}) as (_, url), pytest.raises(ValueError, match="sha256"):
        load_ogbg(NAME, root, url=f"{url}/clintox.zip")
    assert not root.exists()  # nor the folder it made


def test_no_recorded_checksum_refuses_and_says_where_to_put_the_folder(tmp_path):
    with pytest.raises(
        ValueError, match=r"no recorded sha256.*rename its folder 'hiv' to 'ogbg_molhiv'"
    ):
        load_ogbg("ogbg-molhiv", tmp_path)
    with pytest.raises(ValueError, match="drop download=False"):
        load_ogbg("ogbg-molhiv", tmp_path, download=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.ogb
@pytest.mark.skipif(not HAS_OGB, reason="needs the optional extra: torch (CPU) and sparsegcn[ogb]")
def test_evaluator_matches_sklearn():
    from sklearn.metrics import average_precision_score, roc_auc_score

    rng = np.random.default_rng(0)
    truth = (rng.random((50, 2)) < 0.4).astype(np.float32)
    truth[rng.random((50, 2)) < 0.2] = np.nan
    scores = rng.normal(size=(50, 2)) + np.nan_to_num(truth)
    known = ~np.isnan(truth)
    expected = np.mean(
        [roc_auc_score(truth[known[:, t], t], scores[known[:, t], t]) for t in range(2)]
    )
    assert ogbg.evaluate_graphs(NAME, truth, scores) == pytest.approx(expected)
    truth = (rng.random((60, 128)) < 0.3).astype(np.float32)
    scores = rng.normal(size=(60, 128)) + truth
    expected = np.mean([average_precision_score(truth[:, t], scores[:, t]) for t in range(128)])
    assert ogbg.evaluate_graphs("ogbg-molpcba", truth, scores) == pytest.approx(expected)
    with pytest.raises(ValueError, match="same shape"):
        ogbg.evaluate_graphs(NAME, truth, scores[:, :2])


def test_binary_label_tokens(tmp_path):
    # pandas writes 0.0/1.0 once a column holds a NaN, and the NaN as nothing: an empty
    # line of a one-task file is a missing label.
    path = tmp_path / "graph-label.csv.gz"
    path.write_bytes(gzip.compress(b"1.0\n\n0.0\nNaN\n0\n"))
    np.testing.assert_array_equal(ogbg.read_binary_labels(path, 1)[:, 0], [1, np.nan, 0, np.nan, 0])


def test_reading_imports_neither_torch_nor_ogb(tmp_path):
    import subprocess
    import sys

    write_ogbg(tmp_path / "ogbg_molclintox")
    code = (
        "import sys\n"
        "from sparsegcn.datasets.graphs import load_graphs\n"
        f"data = load_graphs({NAME!r}, {str(tmp_path)!r}, download=False)\n"
        "assert data.num_graphs == 3\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ogb', 'pandas')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr

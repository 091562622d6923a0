"""ogbl-* datasets from miniature folders in OGB's raw layout, values checked by hand."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from sparsegcn.datasets import OGBL, data_location, load
from sparsegcn.datasets.links import load_links, message_graph
from sparsegcn.datasets.ogbl import OGBL_LAYOUTS, read_csv
from sparsegcn.files import CorruptFileError


def _csv(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(",".join(map(str, row)) + "\n" for row in rows)
    path.write_bytes(gzip.compress(text.encode()))


def _raw(root: Path, name: str, *, n: int, edges, features=None, node_year=None) -> Path:
    folder = root / name.replace("-", "_")
    raw = folder / "raw"
    _csv(raw / "num-node-list.csv.gz", [[n]])
    _csv(raw / "num-edge-list.csv.gz", [[len(edges)]])
    _csv(raw / "edge.csv.gz", edges)
    if features is not None:
        _csv(raw / "node-feat.csv.gz", features)
    if node_year is not None:
        _csv(raw / "node_year.csv.gz", [[y] for y in node_year])
    (folder / "RELEASE_v1.txt").write_text("v1")
    return folder


COLLAB_FEATURES = [[0.5, -1.0, 2.0], [1.0, 0.0, 0.0], [0.25, 0.5, 0.75], [3.0, 2.0, 1.0], [0, 0, 1]]
COLLAB_TRAIN = [[0, 1], [1, 2], [0, 1], [3, 4]]  # (0, 1) collaborated in two years


def _collab_split(torch, *, as_numpy: bool):
    convert = (lambda a: np.asarray(a, np.int64)) if as_numpy else torch.tensor
    return {
        "train": {
            "edge": convert(COLLAB_TRAIN),
            "weight": convert([1, 2, 3, 1]),
            "year": convert([2010, 2011, 2015, 2012]),
        },
        "valid": {
            "edge": convert([[2, 3]]),
            "weight": convert([1]),
            "year": convert([2018]),
            "edge_neg": convert([[0, 4], [1, 3]]),
        },
        "test": {
            "edge": convert([[0, 2]]),
            "weight": convert([2]),
            "year": convert([2019]),
            "edge_neg": convert([[1, 4], [2, 4]]),
        },
    }


def _write_split(torch, folder: Path, kind: str, split: dict, *, legacy=False, whole=False):
    base = folder / "split" / kind
    base.mkdir(parents=True, exist_ok=True)
    if whole:
        torch.save(split, base / "split_dict.pt")
        return
    for key, part in split.items():
        torch.save(part, base / f"{key}.pt", _use_new_zipfile_serialization=not legacy)


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_registered_names_match_the_layouts():
    assert set(OGBL) == set(OGBL_LAYOUTS)
    assert data_location("ogbl-collab", "R") == Path("R") / "ogbl_collab"


@pytest.mark.parametrize("as_numpy", [True, False], ids=["numpy-dicts", "tensor-dicts"])
def test_collab_by_hand(tmp_path, torch, as_numpy):
    folder = _raw(tmp_path, "ogbl-collab", n=5, edges=COLLAB_TRAIN, features=COLLAB_FEATURES)
    _write_split(torch, folder, "time", _collab_split(torch, as_numpy=as_numpy))
    ds = load_links("ogbl-collab", tmp_path)
    assert (ds.num_nodes, ds.num_edges, ds.metric, ds.directed) == (5, 6, "hits@50", False)
    assert ds.negatives == "pairs"
    np.testing.assert_array_equal(ds.features, np.asarray(COLLAB_FEATURES, np.float32))
    assert ds.features.dtype == np.float32
    # Message graph: 0-1 (once, though listed twice), 1-2, 3-4, both directions, by receiver.
    g = ds.graph
    assert g.edges_sorted and g.weights is None
    assert list(zip(g.senders.tolist(), g.receivers.tolist(), strict=True)) == [
        (1, 0),
        (0, 1),
        (2, 1),
        (1, 2),
        (4, 3),
        (3, 4),
    ]
    np.testing.assert_array_equal(ds.split["train"], COLLAB_TRAIN)
    np.testing.assert_array_equal(ds.split["valid"], [[2, 3]])
    np.testing.assert_array_equal(ds.split["test_neg"], [[1, 4], [2, 4]])
    np.testing.assert_array_equal(ds.edge_weight, [1, 2, 3, 1])
    np.testing.assert_array_equal(ds.edge_year, [2010, 2011, 2015, 2012])
    assert ds.split["train"].dtype == np.int64
    # OGB's baseline adjacency: the weights summed over repeats (0-1: 1 + 3).
    weighted = message_graph(ds, weighted=True)
    dense = np.zeros((5, 5))
    np.add.at(dense, (weighted.receivers, weighted.senders), weighted.weights)
    expected = np.zeros((5, 5))
    for (a, b), w in (((0, 1), 4), ((1, 2), 2), ((3, 4), 1)):
        expected[a, b] = expected[b, a] = w
    np.testing.assert_array_equal(dense, expected)
    # --use-valid-edges: the validation pair (2, 3) joins, unweighted.
    full = message_graph(ds, use_valid_edges=True)
    pairs = set(zip(full.senders.tolist(), full.receivers.tolist(), strict=True))
    assert pairs == set(zip(g.senders.tolist(), g.receivers.tolist(), strict=True)) | {
        (2, 3),
        (3, 2),
    }
    assert full.num_edges == 8 and full.weights is None
    with pytest.raises(ValueError, match="choose one"):
        message_graph(ds, use_valid_edges=True, weighted=True)


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_citation2_by_hand(tmp_path, torch, legacy):
    edges = [[1, 0], [2, 0], [2, 1], [3, 2]]
    features = [[float(i), 1.0] for i in range(4)]
    folder = _raw(
        tmp_path, "ogbl-citation2", n=4, edges=edges, features=features,
        node_year=[2000, 2001, 2019, 2019],
    )  # fmt: skip
    split = {
        "train": {
            "source_node": torch.tensor([1, 2, 2, 3]),
            "target_node": torch.tensor([0, 0, 1, 2]),
        },
        "valid": {
            "source_node": torch.tensor([3]),
            "target_node": torch.tensor([0]),
            "target_node_neg": torch.tensor([[1, 1, 2]]),
        },
        "test": {
            "source_node": torch.tensor([3]),
            "target_node": torch.tensor([1]),
            "target_node_neg": torch.tensor([[0, 2, 2]]),
        },
    }
    _write_split(torch, folder, "time", split, legacy=legacy)
    ds = load_links("ogbl-citation2", tmp_path)
    assert (ds.metric, ds.directed, ds.negatives) == ("mrr", True, "targets")
    np.testing.assert_array_equal(ds.split["train"], edges)
    np.testing.assert_array_equal(ds.split["valid"], [[3, 0]])
    np.testing.assert_array_equal(ds.split["test"], [[3, 1]])
    np.testing.assert_array_equal(ds.split["valid_neg"], [[1, 1, 2]])
    np.testing.assert_array_equal(ds.node_year, [2000, 2001, 2019, 2019])
    # The message graph is symmetric, as OGB's baseline makes it (to_symmetric()).
    got = sorted(zip(ds.graph.senders.tolist(), ds.graph.receivers.tolist(), strict=True))
    assert got == sorted([(a, b) for a, b in edges] + [(b, a) for a, b in edges])
    assert ds.num_edges == 6


def test_ddi_without_features_and_split_dict(tmp_path, torch):
    folder = _raw(tmp_path, "ogbl-ddi", n=3, edges=[[0, 1]])
    split = {
        "train": {"edge": torch.tensor([[0, 1]])},
        "valid": {"edge": torch.tensor([[1, 2]]), "edge_neg": torch.tensor([[0, 2]])},
        "test": {"edge": torch.tensor([[0, 2]]), "edge_neg": torch.tensor([[1, 1]])},
    }
    _write_split(torch, folder, "target", split, whole=True)
    ds = load_links("ogbl-ddi", tmp_path)
    assert ds.features is None and ds.num_features == 0 and ds.metric == "hits@20"
    assert ds.edge_weight is None
    np.testing.assert_array_equal(ds.split["test_neg"], [[1, 1]])  # self-pairs are kept as given


def _write_numpy_split(folder: Path, kind: str, split: dict) -> None:
    """``split`` as OGB's ``<key>.pt`` files of NumPy dicts, written without torch."""
    from sparsegcn.datasets.torchfile import write_torch_file

    (folder / "split" / kind).mkdir(parents=True, exist_ok=True)
    for key, part in split.items():
        write_torch_file(part, folder / "split" / kind / f"{key}.pt")


@pytest.mark.parametrize("k", [1, 2, 3])
def test_citation2_per_source_negatives_of_any_width(tmp_path, k):
    # [P, 2] per-source negatives were read as node pairs, the form told by the width.
    edges = [[1, 0], [2, 0], [3, 1], [4, 2]]
    folder = _raw(
        tmp_path, "ogbl-citation2", n=6, edges=edges, features=[[0.5, 1.0]] * 6,
        node_year=[2000] * 6,
    )  # fmt: skip
    negatives = np.array([[0, 1, 2], [3, 5, 0]])[:, :k]
    pairs = {"source_node": np.array([5, 4]), "target_node": np.array([3, 1])}
    split = {
        "train": {"source_node": np.array([1, 2, 3, 4]), "target_node": np.array([0, 0, 1, 2])},
        "valid": {**pairs, "target_node_neg": negatives},
        "test": {**pairs, "target_node_neg": negatives[:, ::-1].copy()},
    }
    _write_numpy_split(folder, "time", split)
    ds = load_links("ogbl-citation2", tmp_path)
    assert ds.negatives == "targets"
    np.testing.assert_array_equal(ds.split["valid"], [[5, 3], [4, 1]])
    np.testing.assert_array_equal(ds.split["valid_neg"], negatives)
    np.testing.assert_array_equal(ds.split["test_neg"], negatives[:, ::-1])
    # One row of targets per positive, whatever the width: three rows for two sources fail.
    split["test"]["target_node_neg"] = np.zeros((3, k), np.int64)
    _write_numpy_split(folder, "time", split)
    with pytest.raises(ValueError, match=r"split\['test_neg'\] holds per-source negatives"):
        load_links("ogbl-citation2", tmp_path)


@pytest.mark.parametrize(
    ("weight", "words"),
    [
        # Cast to int64 before, inf and 1e30 became INT64_MIN; -5 and 0 were kept.
        ([1.0, np.inf, 3.0, 1.0], r"\[1\] = inf is not an integer that int64 holds"),
        ([1.0, 1e30, 3.0, 1.0], r"\[1\] = 1e\+30 is not an integer that int64 holds"),
        ([1.0, 1.0, np.nan, 1.0], r"\[2\] = nan is not an integer that int64 holds"),
        ([1, -5, 3, 1], r"\[1\] = -5: a weight counts the papers .* at least 1"),
        ([1.0, 2.0, 3.0, 0.0], r"\[3\] = 0: a weight counts the papers .* at least 1"),
    ],
)
def test_collab_weights_that_count_no_papers_are_refused(tmp_path, weight, words):
    folder = _raw(tmp_path, "ogbl-collab", n=5, edges=COLLAB_TRAIN, features=COLLAB_FEATURES)
    split = _collab_split(None, as_numpy=True)
    split["train"]["weight"] = np.array(weight)
    _write_numpy_split(folder, "time", split)
    with pytest.raises(ValueError, match=r"train\.pt \(train\['weight'\]\)" + words):
        load_links("ogbl-collab", tmp_path)


def test_missing_folder_says_where_to_put_it(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"collab\.zip.*rename its folder 'collab' to 'ogbl_collab'"
    ):
        load_links("ogbl-collab", tmp_path)
    assert not (tmp_path / "ogbl_collab").exists()
    with pytest.raises(ValueError, match=r"link-prediction dataset.*load_links"):
        load("ogbl-collab", tmp_path)


@pytest.mark.parametrize(
    ("rows", "pattern"),
    [
        ([[0, 1], [1, "x"]], r"edge\.csv\.gz, line 2, column 2: 'x' is not an integer"),
        ([[0, 1], [1.5, 2]], r"edge\.csv\.gz, line 2, column 1: '1\.5' is not an integer"),
        ([[0, 1], [1, ""]], r"edge\.csv\.gz, line 2, column 2: a missing value"),
        ([[0, 1], [1, 2, 3]], r"edge\.csv\.gz: malformed CSV .*line 2"),
        ([[0, 1], [1, 9]], r"edge\.csv\.gz: edge\[1, 1\] = 9 is not a node id in \[0, 5\)"),
        ([[0, 1, 2], [1, 2, 3]], r"edge\.csv\.gz, line 1: 3 value\(s\) per line, expected 2"),
    ],
)
def test_malformed_edges_name_file_and_line(tmp_path, torch, rows, pattern):
    folder = _raw(tmp_path, "ogbl-collab", n=5, edges=rows, features=COLLAB_FEATURES)
    _write_split(torch, folder, "time", _collab_split(torch, as_numpy=True))
    with pytest.raises(ValueError, match=pattern):
        load_links("ogbl-collab", tmp_path)


def test_malformed_features_and_split(tmp_path, torch):
    bad = [row[:] for row in COLLAB_FEATURES]
    bad[3][1] = "abc"
    folder = _raw(tmp_path, "ogbl-collab", n=5, edges=COLLAB_TRAIN, features=bad)
    _write_split(torch, folder, "time", _collab_split(torch, as_numpy=True))
    with pytest.raises(
        ValueError, match=r"node-feat\.csv\.gz, line 4, column 2: 'abc' is not a number"
    ):
        load_links("ogbl-collab", tmp_path)
    _csv(folder / "raw" / "node-feat.csv.gz", COLLAB_FEATURES[:4])
    with pytest.raises(
        ValueError, match=r"node-feat\.csv\.gz has 4 lines, one per node expected \(5\)"
    ):
        load_links("ogbl-collab", tmp_path)
    _csv(folder / "raw" / "node-feat.csv.gz", COLLAB_FEATURES)
    split = _collab_split(torch, as_numpy=True)
    split["test"]["edge"] = np.array([[0, 7]])
    _write_split(torch, folder, "time", split)
    with pytest.raises(ValueError, match=r"test\.pt: test pair\[0, 1\] = 7 is not a node id"):
        load_links("ogbl-collab", tmp_path)
    split = _collab_split(torch, as_numpy=True)
    del split["valid"]["edge_neg"]
    _write_split(torch, folder, "time", split)
    with pytest.raises(ValueError, match=r"valid\.pt: the 'valid' split has no 'edge_neg'"):
        load_links("ogbl-collab", tmp_path)
    (folder / "split" / "time" / "test.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"test\.pt is missing"):
        load_links("ogbl-collab", tmp_path)


def test_corrupt_gzip_is_named(tmp_path):
    path = tmp_path / "edge.csv.gz"
    path.write_bytes(gzip.compress(b"0,1\n2,3\n")[:-10])
    with pytest.raises(CorruptFileError, match=r"edge\.csv\.gz: "):
        read_csv(path, columns=2, integer=True)


def test_scale_is_refused_for_ogbl(tmp_path):
    with pytest.raises(ValueError, match=r"scale=0\.5 applies only to generated datasets"):
        load_links("ogbl-collab", tmp_path, scale=0.5)


@pytest.mark.parametrize(
    ("preset", "name"), [("collab", "ogbl-collab"), ("citation2", "ogbl-citation2")]
)
def test_save_layout_round_trip(tmp_path, preset, name):
    """save_ogbl_layout writes a folder that load_ogbl reads back unchanged (no torch needed)."""
    from sparsegcn.datasets.ogbl import save_ogbl_layout
    from sparsegcn.datasets.synthetic_links import LINK_PRESETS, generate_links

    ds = generate_links(LINK_PRESETS[preset].scaled(0.001), seed=2)
    folder = save_ogbl_layout(ds, tmp_path, name)
    assert folder == tmp_path / name.replace("-", "_")
    back = load_links(name, tmp_path)
    np.testing.assert_array_equal(back.features, ds.features)  # %.9g is exact for float32
    for key in ds.split:
        np.testing.assert_array_equal(back.split[key], ds.split[key], err_msg=key)
    np.testing.assert_array_equal(back.graph.senders, ds.graph.senders)
    np.testing.assert_array_equal(back.graph.receivers, ds.graph.receivers)
    for field in ("edge_weight", "edge_year", "node_year"):
        if getattr(ds, field) is None:
            assert getattr(back, field) is None
        else:
            np.testing.assert_array_equal(getattr(back, field), getattr(ds, field))
    with pytest.raises(ValueError, match="exists; refusing to overwrite"):
        save_ogbl_layout(ds, tmp_path, name)


def test_ogb_reads_the_same_folder(tmp_path, torch):
    """ogb's own LinkPropPredDataset on a folder in the layout agrees with load_links."""
    from sparsegcn.datasets.ogb import import_ogb
    from sparsegcn.datasets.ogbl import save_ogbl_layout
    from sparsegcn.datasets.synthetic_links import LINK_PRESETS, generate_links

    import_ogb()  # without ogb's version-check thread
    import ogb.linkproppred

    ds = generate_links(LINK_PRESETS["collab"].scaled(0.002), seed=4)
    folder = save_ogbl_layout(ds, tmp_path, "ogbl-collab")
    ours = load_links("ogbl-collab", tmp_path)
    reference = ogb.linkproppred.LinkPropPredDataset("ogbl-collab", root=str(tmp_path))
    graph = reference[0]
    assert graph["num_nodes"] == ours.num_nodes
    np.testing.assert_array_equal(graph["node_feat"], ours.features)
    edges = graph["edge_index"]  # ogb adds the inverse of each raw edge, repeats kept
    expected = np.unique(edges[1].astype(np.int64) * ours.num_nodes + edges[0])
    got = ours.graph.receivers.astype(np.int64) * ours.num_nodes + ours.graph.senders
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(graph["edge_weight"][::2, 0], ours.edge_weight)
    for key in ("train", "valid", "test"):  # our own files: trusted, so weights_only=False
        part = torch.load(folder / "split" / "time" / f"{key}.pt", weights_only=False)
        np.testing.assert_array_equal(part["edge"], ours.split[key])
    np.testing.assert_array_equal(part["edge_neg"], ours.split["test_neg"])


def _zipped_collab(tmp_path) -> tuple[bytes, object]:
    import zipfile

    from sparsegcn.datasets.ogbl import save_ogbl_layout
    from sparsegcn.datasets.synthetic_links import LINK_PRESETS, generate_links

    ds = generate_links(LINK_PRESETS["collab"].scaled(0.001), seed=1)
    folder = save_ogbl_layout(ds, tmp_path / "staging", "ogbl-collab")
    archive = tmp_path / "collab.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, Path("collab") / path.relative_to(folder))
    return archive.read_bytes(), ds


def test_download_with_a_known_digest_is_verified_and_extracted(tmp_path, monkeypatch):
    """The download path, for when a digest is published: served from 127.0.0.1."""
    import hashlib

    from http_server import serve

    from sparsegcn.datasets import ogbl

    body, ds = _zipped_collab(tmp_path)
    monkeypatch.setitem(ogbl.ARCHIVE_SHA256, "ogbl-collab", hashlib.sha256(body).hexdigest())
    root = tmp_path / "data"
    with serve({"/collab.zip": body}) as (server, base):
        loaded = ogbl.load_ogbl("ogbl-collab", root, url=f"{base}/collab.zip")
    assert server.requests == ["/collab.zip"]
    np.testing.assert_array_equal(loaded.split["valid_neg"], ds.split["valid_neg"])
    np.testing.assert_array_equal(loaded.features, ds.features)
    assert sorted(p.name for p in root.iterdir()) == ["ogbl_collab"]  # no archive, no temp
    flipped = bytearray(body)
    flipped[len(body) // 2] ^= 0xFF
    other = tmp_path / "other"
    with (
        serve({"/collab.zip": bytes(flipped)}) as (_, base),
        pytest.raises(ValueError, match="sha256"),
    ):
        ogbl.load_ogbl("ogbl-collab", other, url=f"{base}/collab.zip")
    assert list(other.iterdir()) == []

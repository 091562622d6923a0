"""The Planetoid loader and the restricted unpickler.

Cora is checked against published counts and against an independent
re-implementation of the GCN reference loader (Kipf & Welling,
``gcn/utils.py``) built on scipy. The CiteSeer-style gap handling is
checked on a hand-made miniature dataset. Downloads run against a local
HTTP server (see ``test_download.serve``).
"""

from __future__ import annotations

import os
import pickle
import pickletools
import re
import shutil
from collections import defaultdict

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import write_mini
from http_server import serve

from sparsegcn.datasets import load
from sparsegcn.datasets import planetoid as planetoid_module
from sparsegcn.datasets.download import sha256_file
from sparsegcn.datasets.planetoid import PARTS, PICKLE_GLOBALS, SHA256, load_planetoid
from sparsegcn.datasets.unpickle import safe_load

CORA_FILES = [f"ind.cora.{part}" for part in PARTS]


@pytest.fixture(scope="module")
def cora_dir(data_root):
    return data_root / "planetoid"


@pytest.fixture(scope="module")
def cora_raw(cora_dir):
    """The raw Cora objects, through the restricted unpickler (itself tested below)."""
    raw = {
        part: safe_load(cora_dir / f"ind.cora.{part}", allowed=PICKLE_GLOBALS)
        for part in PARTS[:-1]
    }
    raw["test.index"] = np.loadtxt(cora_dir / "ind.cora.test.index", dtype=np.int64)
    return raw


def copy_cora(src, root, names=CORA_FILES):
    folder = root / "planetoid"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(src / name, folder / name)
    return folder


def assert_same_dataset(a, b):
    assert a.num_nodes == b.num_nodes and a.num_classes == b.num_classes
    assert (a.features != b.features).nnz == 0
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.graph.senders, b.graph.senders)
    np.testing.assert_array_equal(a.graph.receivers, b.graph.receivers)
    for key in ("train", "valid", "test"):
        np.testing.assert_array_equal(a.split[key], b.split[key])


# -- Cora: counts and hand checks ---------------------------------------------------------


def test_cora_counts(cora):
    assert cora.name == "cora"
    assert cora.num_nodes == 2708
    assert cora.graph.num_edges == 10556
    assert cora.num_edges == 5278
    assert cora.num_features == 1433
    assert cora.num_classes == 7
    assert cora.split_sizes == {"train": 140, "valid": 500, "test": 1000}
    assert cora.metric == "acc"
    assert cora.info["source"] == "https://github.com/kimiyoung/planetoid/raw/master/data/"
    assert cora.info["license"] == "MIT (kimiyoung/planetoid)"
    assert cora.info["gap_nodes"] == 0


def test_cora_graph_is_symmetric_simple_and_unweighted(cora):
    g = cora.graph
    assert g.weights is None
    assert not (g.senders == g.receivers).any()
    keys = g.receivers.astype(np.int64) * g.num_nodes + g.senders
    assert np.unique(keys).size == g.num_edges  # no duplicate edges
    a = g.to_scipy()
    assert (a != a.T).nnz == 0
    assert a.diagonal().sum() == 0


def test_cora_labels_and_split(cora):
    np.testing.assert_array_equal(np.bincount(cora.labels[cora.split["train"]]), [20] * 7)
    assert cora.labels.min() == 0  # every Cora node is labelled
    # The published class sizes of Cora.
    np.testing.assert_array_equal(np.bincount(cora.labels), [351, 217, 418, 818, 426, 298, 180])
    np.testing.assert_array_equal(cora.split["train"], np.arange(140))
    np.testing.assert_array_equal(cora.split["valid"], np.arange(140, 640))
    np.testing.assert_array_equal(cora.split["test"], np.arange(1708, 2708))


def test_cora_features_are_raw_binary_csr(cora, cora_raw):
    f = cora.features
    assert isinstance(f, sp.csr_array)
    assert f.dtype == np.float32
    assert f.has_canonical_format
    np.testing.assert_array_equal(np.unique(f.data), [1.0])
    # Non-zeros counted straight from the pickled matrices: allx holds the
    # training nodes and tx the test nodes; x is a subset of allx.
    expected = cora_raw["allx"].nnz + cora_raw["tx"].nnz
    assert expected == 31261 + 17955
    assert f.nnz == expected


def test_cora_matches_gcn_reference_loader(cora, cora_raw):
    """The GCN authors' ``load_data`` logic, re-written with scipy only."""
    r = cora_raw
    test_idx_reorder = r["test.index"]
    test_idx_range = np.sort(test_idx_reorder)
    features = sp.vstack((r["allx"], r["tx"])).tolil()
    features[test_idx_reorder, :] = features[test_idx_range, :]
    labels = np.vstack((r["ally"], r["ty"]))
    labels[test_idx_reorder, :] = labels[test_idx_range, :]
    assert (cora.features != sp.csr_array(features, dtype=np.float32)).nnz == 0
    np.testing.assert_array_equal(cora.labels, labels.argmax(axis=1))

    n = cora.num_nodes
    rows = [i for i, nbrs in r["graph"].items() for _ in nbrs]
    cols = [j for nbrs in r["graph"].values() for j in nbrs]
    adj = sp.coo_array((np.ones(len(rows)), (rows, cols)), shape=(n, n)).tocsr()
    adj = ((adj + adj.T) > 0).astype(np.float64)
    adj.setdiag(0)
    adj.eliminate_zeros()
    assert (cora.graph.to_scipy() != adj).nnz == 0


def test_embedded_cora_sums_equal_the_published_sums_file(cora_dir):
    published = {}
    for line in (cora_dir / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        published[name] = digest
    assert SHA256["cora"] == published
    assert {name: sha256_file(cora_dir / name) for name in CORA_FILES} == published
    for name in ("cora", "citeseer", "pubmed"):
        assert sorted(SHA256[name]) == sorted(f"ind.{name}.{part}" for part in PARTS)


# -- The restricted unpickler -------------------------------------------------------------


def pickled_globals(path) -> set:
    """The (module, name) pairs a pickle file references (protocol-2 GLOBAL opcodes)."""
    found = set()
    for op, arg, _ in pickletools.genops(path.read_bytes()):
        assert op.name != "STACK_GLOBAL", "the Planetoid files are protocol 2"
        if op.name == "GLOBAL":
            found.add(tuple(arg.split(" ")))
    return found


def test_allow_list_is_exactly_what_cora_needs_plus_renamed_paths(cora_dir):
    used = set().union(*(pickled_globals(cora_dir / name) for name in CORA_FILES[:-1]))
    assert used == {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("scipy.sparse.csr", "csr_matrix"),
        ("collections", "defaultdict"),
        ("__builtin__", "list"),
    }
    renamed = {
        ("numpy._core.multiarray", "_reconstruct"),
        ("scipy.sparse._csr", "csr_matrix"),
        ("builtins", "list"),
    }
    assert used | renamed == PICKLE_GLOBALS


@pytest.mark.parametrize("name", CORA_FILES[:-1])
def test_every_cora_pickle_needs_every_global_it_uses(cora_dir, name):
    path = cora_dir / name
    for dropped in pickled_globals(path):
        module, attr = dropped
        with pytest.raises(
            pickle.UnpicklingError, match=rf"refusing to load global {module}\.{attr}"
        ):
            safe_load(path, allowed=PICKLE_GLOBALS - {dropped})


class _RunsShell:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


class _Evals:
    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return eval, (self.code,)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_malicious_pickle_is_refused_before_it_runs(tmp_path, protocol):
    marker = tmp_path / "pwned"
    payload = tmp_path / "evil.pkl"
    payload.write_bytes(pickle.dumps(_RunsShell(f"touch {marker}"), protocol=protocol))
    # os.system lives in the posix module on Linux/macOS and nt on Windows.
    system = f"{os.system.__module__}.system"
    with pytest.raises(
        pickle.UnpicklingError, match=rf"evil\.pkl: refusing to load global {system}"
    ):
        safe_load(payload, allowed=PICKLE_GLOBALS)
    assert not marker.exists()

    code = f"open({str(marker)!r}, 'w').close()"
    with open(payload, "wb") as f:
        pickle.dump(_Evals(code), f, protocol=protocol)
    with (
        open(payload, "rb") as f,
        pytest.raises(pickle.UnpicklingError, match=r"global (__builtin__|builtins)\.eval"),
    ):
        safe_load(f, allowed=PICKLE_GLOBALS)
    assert not marker.exists()

    pickle.loads(payload.read_bytes())  # control: the payload is live under plain pickle
    assert marker.exists()


def test_a_malicious_graph_file_is_refused_by_the_loader(tmp_path, data_root, monkeypatch):
    folder = copy_cora(data_root / "planetoid", tmp_path)
    marker = tmp_path / "pwned"
    evil = pickle.dumps({0: [1], 1: _RunsShell(f"touch {marker}")}, protocol=2)
    (folder / "ind.cora.graph").write_bytes(evil)
    # Pretend the checksum matched, to reach the unpickler.
    sums = dict(SHA256["cora"], **{"ind.cora.graph": sha256_file(folder / "ind.cora.graph")})
    monkeypatch.setitem(planetoid_module.SHA256, "cora", sums)
    with pytest.raises(pickle.UnpicklingError, match=r"ind\.cora\.graph: refusing to load global"):
        load_planetoid("cora", tmp_path, download=False)
    assert not marker.exists()


def test_current_numpy_scipy_pickles_load_through_renamed_paths(tmp_path):
    m = sp.csr_matrix(np.array([[0, 1.5], [2, 0]], np.float32))
    adj = defaultdict(list, {0: [1], 1: [0]})
    for protocol in (2, 4):
        loaded = safe_load(
            _bytes_file(tmp_path, pickle.dumps(adj, protocol=protocol)), allowed=PICKLE_GLOBALS
        )
        assert loaded == adj and isinstance(loaded, defaultdict)
    loaded = safe_load(_bytes_file(tmp_path, pickle.dumps(m, protocol=4)), allowed=PICKLE_GLOBALS)
    assert isinstance(loaded, sp.csr_matrix)
    np.testing.assert_array_equal(loaded.toarray(), m.toarray())


def _bytes_file(tmp_path, data):
    path = tmp_path / "obj.pkl"
    path.write_bytes(data)
    return path


def test_safe_load_rejects_bad_arguments(tmp_path):
    path = _bytes_file(tmp_path, pickle.dumps([1, 2]))
    with pytest.raises(TypeError, match="allowed must be a frozenset of"):
        safe_load(path, allowed=[("builtins", "list")])
    with pytest.raises(
        TypeError, match=r"allowed must hold \(module, name\) string pairs, got 'builtins.list'"
    ):
        safe_load(path, allowed=frozenset({"builtins.list"}))
    with pytest.raises(
        TypeError, match="path_or_file must be a path or a binary file object, got int"
    ):
        safe_load(3, allowed=PICKLE_GLOBALS)
    assert safe_load(path, allowed=frozenset()) == [1, 2]  # no globals needed


# -- Download path, against a local server ------------------------------------------------


@pytest.fixture
def cora_routes(data_root):
    return {f"/data/{name}": (data_root / "planetoid" / name).read_bytes() for name in CORA_FILES}


def test_fresh_root_downloads_all_eight_files(tmp_path, cora, cora_routes):
    with serve(cora_routes) as (server, url):
        fresh = load_planetoid("cora", tmp_path, base_url=f"{url}/data")
        assert sorted(server.requests) == sorted(cora_routes)
        again = load_planetoid("cora", tmp_path, base_url=f"{url}/data")
        assert len(server.requests) == 8  # present files are not fetched again
    assert sorted(p.name for p in (tmp_path / "planetoid").iterdir()) == sorted(CORA_FILES)
    assert_same_dataset(fresh, cora)
    assert_same_dataset(again, cora)
    assert fresh.num_edges == cora.num_edges


def test_only_missing_files_are_downloaded(tmp_path, data_root, cora_routes):
    copy_cora(data_root / "planetoid", tmp_path, CORA_FILES[:-2])
    with serve(cora_routes) as (server, url):
        load_planetoid("cora", tmp_path, base_url=f"{url}/data/")
    assert sorted(server.requests) == ["/data/ind.cora.graph", "/data/ind.cora.test.index"]


def test_corrupt_download_is_rejected_and_not_kept(tmp_path, cora_routes):
    body = bytearray(cora_routes["/data/ind.cora.graph"])
    body[len(body) // 2] ^= 0x01
    cora_routes["/data/ind.cora.graph"] = bytes(body)
    expected = SHA256["cora"]["ind.cora.graph"]
    with (
        serve(cora_routes) as (_, url),
        pytest.raises(
            ValueError, match=rf"sha256 mismatch for ind\.cora\.graph .*expected {expected}"
        ),
    ):
        load_planetoid("cora", tmp_path, base_url=f"{url}/data")
    kept = sorted(p.name for p in (tmp_path / "planetoid").iterdir())
    # Files before "graph" in PARTS order were fetched and verified; nothing else.
    assert kept == sorted(CORA_FILES[: PARTS.index("graph")])


def test_truncated_download_is_rejected_and_not_kept(tmp_path, cora_routes):
    body = cora_routes["/data/ind.cora.x"]
    cora_routes["/data/ind.cora.x"] = ("truncated", body[:1000], len(body))
    with (
        serve(cora_routes) as (_, url),
        pytest.raises(
            OSError, match=rf"truncated download from {re.escape(url)}/data/ind\.cora\.x"
        ),
    ):
        load_planetoid("cora", tmp_path, base_url=f"{url}/data")
    assert list(tmp_path.iterdir()) == []  # nor the planetoid/ folder it made


def test_http_404_is_a_clear_error(tmp_path, cora_routes):
    del cora_routes["/data/ind.cora.x"]
    with (
        serve(cora_routes) as (_, url),
        pytest.raises(OSError, match=rf"HTTP 404 .*{re.escape(url)}/data/ind\.cora\.x"),
    ):
        load_planetoid("cora", tmp_path, base_url=f"{url}/data", progress=False)
    assert list(tmp_path.iterdir()) == []  # nor the planetoid/ folder it made


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_file_on_disk_is_rejected_without_downloading(
    tmp_path, data_root, cora_routes, damage
):
    folder = copy_cora(data_root / "planetoid", tmp_path)
    path = folder / "ind.cora.allx"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[100] ^= 0x10
    else:
        del data[-10:]
    path.write_bytes(bytes(data))
    with serve(cora_routes) as (server, url):
        with pytest.raises(
            ValueError, match=rf"{re.escape(str(path))} is corrupt or truncated: its sha256 is"
        ):
            load_planetoid("cora", tmp_path, base_url=f"{url}/data")
        assert server.requests == []
    with pytest.raises(ValueError, match=r"ind\.cora\.allx is corrupt or truncated"):
        load("cora", tmp_path, download=False)


def test_missing_files_without_download_name_the_path(tmp_path, data_root):
    with pytest.raises(
        FileNotFoundError,
        match=rf"{re.escape(str(tmp_path / 'planetoid' / 'ind.cora.x'))} not found .*download=True",
    ):
        load("cora", tmp_path, download=False)
    copy_cora(data_root / "planetoid", tmp_path, [n for n in CORA_FILES if n != "ind.cora.ty"])
    with pytest.raises(FileNotFoundError, match=r"ind\.cora\.ty not found \(1 of 8 files missing"):
        load_planetoid("cora", tmp_path, download=False)
    assert not (tmp_path / "planetoid" / "ind.cora.ty").exists()


def test_unknown_name_is_refused(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"unknown Planetoid dataset 'Cora'; choose one of \['citeseer', 'cora', 'pubmed'\]",
    ):
        load_planetoid("Cora", tmp_path, download=False)


# -- CiteSeer-style test-index gaps, on a hand-made miniature -----------------------------


def test_citeseer_gaps_get_zero_features_and_no_label(tmp_path, monkeypatch):
    monkeypatch.setattr(planetoid_module, "NUM_VALID", 2)
    # allx nodes 0..3; test nodes listed as 8, 5, 7 (so tx row 0 is node 8); node 6 is a gap.
    graph = defaultdict(list, {0: [1, 1, 0], 1: [2], 5: [6], 8: [7], 6: []})
    sums = write_mini(
        tmp_path / "planetoid", "citeseer", test_index=[8, 5, 7], graph=graph, num_valid=2
    )
    monkeypatch.setitem(planetoid_module.SHA256, "citeseer", sums)
    d = load_planetoid("citeseer", tmp_path, download=False)

    assert d.num_nodes == 9 and d.num_features == 3 and d.num_classes == 2
    dense = d.features.toarray()
    np.testing.assert_array_equal(dense[8], [1, 2, 3])
    np.testing.assert_array_equal(dense[5], [4, 5, 6])
    np.testing.assert_array_equal(dense[7], [7, 8, 9])
    np.testing.assert_array_equal(dense[6], [0, 0, 0])
    np.testing.assert_array_equal(d.labels, [0, 1, 0, 1, -1, 1, -1, 0, 0])
    np.testing.assert_array_equal(d.split["train"], [0, 1])
    np.testing.assert_array_equal(d.split["valid"], [2, 3])
    np.testing.assert_array_equal(d.split["test"], [5, 7, 8])
    # Self-loop 0->0 dropped, duplicate 0->1 merged, everything symmetric.
    pairs = set(zip(d.graph.senders.tolist(), d.graph.receivers.tolist(), strict=True))
    undirected = {(0, 1), (1, 2), (5, 6), (8, 7)}
    assert pairs == undirected | {(b, a) for a, b in undirected}
    assert d.num_edges == 4
    assert d.info["self_loops_removed"] == 1 and d.info["raw_edges"] == 6
    assert d.info["gap_nodes"] == 2  # node 4 (after allx, before the first test id) and node 6


def test_graph_with_an_out_of_range_node_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(planetoid_module, "NUM_VALID", 2)
    graph = defaultdict(list, {0: [1], 3: [12]})
    sums = write_mini(tmp_path / "planetoid", "pubmed", test_index=[4, 5], graph=graph, num_valid=2)
    monkeypatch.setitem(planetoid_module.SHA256, "pubmed", sums)
    with pytest.raises(ValueError, match=r"ind\.pubmed\.graph: node 12 is outside \[0, 6\)"):
        load_planetoid("pubmed", tmp_path, download=False)


def test_test_index_overlapping_allx_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(planetoid_module, "NUM_VALID", 2)
    sums = write_mini(
        tmp_path / "planetoid", "pubmed", test_index=[3, 5], graph={0: [1]}, num_valid=2
    )
    monkeypatch.setitem(planetoid_module.SHA256, "pubmed", sums)
    with pytest.raises(
        ValueError, match=r"ind\.pubmed\.test\.index: test node 3 collides with the 4 allx"
    ):
        load_planetoid("pubmed", tmp_path, download=False)

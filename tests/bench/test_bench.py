"""``sparsegcn bench`` end to end on a tiny matrix, and the report's arithmetic."""

import itertools
import json
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from sparsegcn.backends import propagate
from sparsegcn.bench import (
    EXTRA_VARIANTS,
    Matrix,
    crossovers,
    format_table,
    make_graph,
    propagation_graph,
)
from sparsegcn.bench.graphs import backend_of
from sparsegcn.bench.runner import gather_bytes, min_bytes, pass_function
from sparsegcn.cli import main

TINY = ["--nodes", "12,40", "--degrees", "3", "--features", "4", "--repeats", "2"]
REQUIRED = {"backend", "num_nodes", "num_edges", "features", "pass", "median_ms", "peak_bytes"}


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    json_path, png_path = folder / "out.json", folder / "out.png"
    argv = ["bench", "--quick", *TINY, "--json", str(json_path), "--plot", str(png_path)]
    return main([*argv, "--no-progress"]), folder, json_path, png_path


def test_cli_writes_the_json_schema(bench_run):
    code, folder, json_path, _ = bench_run
    assert code == 0
    report = json.loads(json_path.read_text())
    records = report["results"]
    # 2 sizes x 2 passes x 6 variants, nothing skipped at this size.
    assert len(records) == 24 and report["skipped"] == []
    for entry in records:
        assert entry.keys() >= REQUIRED
        assert entry["pass"] in ("fwd", "fwd_bwd")
        assert entry["median_ms"] > 0 and entry["peak_bytes"] > 0
    assert {r["backend"] for r in records} == {
        "dense",
        "segment",
        "segment-csr",
        "segment-unpacked",
        "bcoo",
        "attention",
    }
    assert {r["num_nodes"] for r in records} == {12, 40}
    # Every attention row is set against the gather + segment_sum of its shape.
    assert len(report["attention"]) == 4
    for a in report["attention"]:
        assert a["gather_scatter_fraction"] == pytest.approx(
            a["gather_scatter_ms"] / a["median_ms"]
        )
    assert report["machine"]["cpu_count"] >= 1 and report["preset"] == "quick"
    stream = report["machine"]["stream_gbps"]
    fresh = report["machine"]["stream_fresh_gbps"]
    assert np.isfinite(stream) and stream > 0 and np.isfinite(fresh) and fresh > 0
    for entry in records:  # the fraction of the streaming bound is gbps over the bound
        assert entry["bound_fraction"] == pytest.approx(entry["gbps"] / stream)
        products = 2 if entry["pass"] == "fwd_bwd" else 1
        moved = products * gather_bytes(entry["num_nodes"], entry["num_edges"], entry["features"])
        floor = entry["gather_floor_ms"]
        assert np.isfinite(floor) and floor > 0
        assert floor == pytest.approx(1e3 * moved / (stream * 1e9))
        assert np.isfinite(entry["gather_floor_ratio"]) and entry["gather_floor_ratio"] > 0
        assert entry["gather_floor_ratio"] == pytest.approx(entry["median_ms"] / floor)
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temp files left


def test_records_count_the_graph_gcn_propagates_on(bench_run):
    _, _, json_path, _ = bench_run
    report = json.loads(json_path.read_text())
    graph = propagation_graph(make_graph("random", 40, 3.0), "bcoo")
    edges = {r["num_edges"] for r in report["results"] if r["num_nodes"] == 40}
    assert edges == {graph.num_edges}  # 60 pairs both ways, plus 40 self-loops
    assert graph.num_edges == 160


def test_cli_prints_the_table(bench_run, capsys):
    code = main(["bench", "--quick", *TINY, "--backends", "dense,segment", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:8] == [
        "graph",
        "pass",
        "F",
        "deg",
        "N",
        "E",
        "backend",
        "median",
    ]
    assert "crossover random fwd F=4 deg=3" in out
    assert "peak MiB" in out and "GB/s" in out
    assert "% stream" in out and "x gather" in out
    assert "GB/s (no allocation)" in out and "GB/s into a fresh buffer" in out


def test_plot_is_a_png(bench_run):
    _, _, _, png_path = bench_run
    data = png_path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(str(png_path))
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 200


def test_stream_bandwidth_counts_a_read_and_a_write(monkeypatch):
    from sparsegcn.bench import timing

    seen = {}

    def fake_measure(fn, args, **kwargs):
        (x,) = args
        seen["bytes"] = x.nbytes
        np.testing.assert_array_equal(np.asarray(fn(x))[:3], [1.0, 1.0, 1.0])  # y = x + 1
        return timing.Timing((0.004, 0.002, 0.003), 0.0, 0)

    monkeypatch.setattr(timing, "measure", fake_measure)
    gbps = timing.stream_bandwidth(nbytes=2**20, fresh=True)
    assert seen["bytes"] == 2**20
    assert gbps == pytest.approx(2 * 2**20 / 0.003 / 1e9)  # median of the three calls


def test_stream_kernel_donates_its_input():
    from sparsegcn.bench import timing

    x = jnp.zeros((1024,), jnp.float32)
    compiled = timing.stream_kernel(x)
    # XLA writes y into x's buffer: the whole input is aliased to the output...
    assert compiled.memory_analysis().alias_size_in_bytes == x.nbytes
    y = compiled(x)
    assert x.is_deleted()  # ...and the donated input is gone after the call
    np.testing.assert_array_equal(np.asarray(y), np.ones(1024, np.float32))
    kept = jnp.zeros((1024,), jnp.float32)
    fresh = timing.stream_kernel(kept, donate=False)
    assert fresh.memory_analysis().alias_size_in_bytes == 0
    fresh(kept)
    assert not kept.is_deleted()


def test_stream_bandwidth_times_the_donating_kernel(monkeypatch):
    """The no-allocation bound chains donated calls: each consumes the last output."""
    from sparsegcn.bench import timing

    real = timing.stream_kernel
    calls = []

    def spy(x, *, donate=True):
        compiled = real(x, donate=donate)
        assert donate

        def call(arg):
            out = compiled(arg)
            calls.append((arg, out))
            return out

        return call

    monkeypatch.setattr(timing, "stream_kernel", spy)
    gbps = timing.stream_bandwidth(nbytes=2**16, repeats=3)
    assert np.isfinite(gbps) and gbps > 0
    assert len(calls) == 2 + 3  # two warm-up calls, three timed
    for arg, _ in calls:
        assert arg.is_deleted()  # every input was donated
    for (_, out), (arg, _) in itertools.pairwise(calls):
        assert out is arg  # no new input allocated between calls
    np.testing.assert_array_equal(np.asarray(calls[-1][1])[:3], [5.0, 5.0, 5.0])


@pytest.mark.parametrize("variant", [v for v in EXTRA_VARIANTS if not v.startswith("attention")])
def test_opt_in_variants_compute_the_normalized_product(variant):
    graph = make_graph("random", 60, 4.0, seed=3)
    x = np.random.default_rng(0).standard_normal((60, 8)).astype(np.float32)
    # Independent reference: scipy's D^-1/2 (A + I) D^-1/2 built from the raw edges.
    a = sp.coo_matrix(
        (np.ones(graph.num_edges), (np.asarray(graph.receivers), np.asarray(graph.senders))),
        shape=(60, 60),
    ).tocsr() + sp.identity(60)
    scale = 1.0 / np.sqrt(np.asarray(a.sum(axis=1)).ravel())
    want = scale[:, None] * (a @ (scale[:, None] * x))
    got = propagate(propagation_graph(graph, variant), jnp.asarray(x), backend=backend_of(variant))
    tol = 1e-2 if variant == "segment-bf16" else 1e-5  # bf16 rows: ~3 significant digits
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


def test_bad_options_fail_with_a_clear_error(capsys):
    assert main(["bench", "--quick", "--backends", "dense,csr", "--no-progress"]) == 2
    assert "variants[1] = 'csr' is not one of" in capsys.readouterr().err
    assert main(["bench", "--quick", "--nodes", "1e3", "--no-progress"]) == 2
    assert "--nodes '1e3'" in capsys.readouterr().err


def test_plot_without_matplotlib_fails_before_measuring(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = main(["bench", "--quick", *TINY, "--plot", str(tmp_path / "p.png"), "--no-progress"])
    assert code == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_matrix_validation_names_the_value():
    with pytest.raises(ValueError, match=r"passes\[0\] = 'backward' is not one of"):
        Matrix(passes=("backward",))
    with pytest.raises(ValueError, match=r"nodes must be integers >= 2, got \(1,\)"):
        Matrix(nodes=(1,))
    with pytest.raises(ValueError, match=r"degrees must be positive, got \(0,\)"):
        Matrix(degrees=(0,))


def record(backend, n, ms, *, edges=None, pass_="fwd"):
    return {
        "backend": backend,
        "graph": "random",
        "num_nodes": n,
        "num_edges": edges or 10 * n,
        "avg_degree": 10.0,
        "features": 8,
        "pass": pass_,
        "reorder": None,
        "median_ms": ms,
        "peak_bytes": 1,
        "gflops": 1.0,
        "gbps": 1.0,
    }


def test_crossover_is_the_first_size_from_which_sparse_always_wins():
    results = [
        record("dense", 10, 1.0),
        record("segment", 10, 2.0),
        record("dense", 100, 3.0),
        record("bcoo", 100, 2.5),  # wins here...
        record("segment", 100, 2.9),
        record("dense", 1000, 5.0),
        record("segment", 1000, 6.0),  # ...but loses here: no crossover yet
        record("dense", 10000, 50.0),
        record("segment", 10000, 10.0),
        record("segment", 100000, 100.0),  # dense refused at this size
    ]
    skipped = [dict(record("dense", 100000, 0.0), reason="over the limit")]
    (found,) = crossovers(results, skipped)
    assert found["crossover_nodes"] == 10000
    assert found["fastest_sparse"] == "segment"
    assert found["density"] == pytest.approx(100000 / 10000**2)
    (never,) = crossovers([record("dense", 10, 1.0), record("segment", 10, 2.0)])
    assert never["crossover_nodes"] is None
    assert crossovers([record("segment", 10, 2.0), record("bcoo", 10, 1.0)]) == []  # no dense
    table = format_table(
        {"results": results, "skipped": skipped, "crossovers": [found], "machine": _MACHINE}
    )
    marked = [line for line in table.splitlines() if line.endswith("<- crossover")]
    assert len(marked) == 1 and " 10000 " in marked[0] and "segment" in marked[0]


_MACHINE = {"cpu": "test", "cpu_count": 1, "jax": "x", "backend": "cpu", "load_average": None}


def test_min_bytes_by_hand():
    # x and y: 2 * 5 nodes * 3 features * 4 bytes; ids: 4 * 7 edges; pointers: 4 * 6.
    assert min_bytes(5, 7, 3) == 120 + 28 + 24


def test_gather_floor_by_hand():
    # 7 gathered rows * 3 features * 4 bytes = 84; y: 5 * 3 * 4 = 60; ids 28; pointers 24.
    assert gather_bytes(5, 7, 3) == 84 + 60 + 28 + 24
    assert gather_bytes(5, 7, 3, itemsize=2) == 42 + 30 + 28 + 24
    # One product at 2 GB/s: 196 bytes take 98 ns; fwd_bwd does two products.
    from sparsegcn.bench.runner import Case, _record
    from sparsegcn.bench.timing import Timing

    timing = Timing((2e-6, 1e-6, 3e-6), 0.0, 1)
    for pass_, products in (("fwd", 1), ("fwd_bwd", 2)):
        case = Case(
            variant="segment", graph="random", num_nodes=5, avg_degree=1.4, features=3, pass_=pass_
        )
        rec = _record(case, 7, timing, 2.0)
        assert rec["gather_floor_ms"] == pytest.approx(products * 98e-6)
        assert rec["gather_floor_ratio"] == pytest.approx(2e-3 / (products * 98e-6))
        assert rec["bound_fraction"] == pytest.approx(products * 172 / 2e-6 / 1e9 / 2.0)


def test_generated_graphs_have_the_asked_size_and_no_self_loops():
    g = make_graph("random", 500, 6.0)
    assert g.num_edges == 3000
    assert not np.any(np.asarray(g.senders) == np.asarray(g.receivers))
    a = g.to_scipy()
    assert (a != a.T).nnz == 0
    community = make_graph("sbm", 500, 6.0)
    assert community.num_edges == 3000
    with pytest.raises(ValueError, match="unknown graph kind 'grid'"):
        make_graph("grid", 10, 2.0)


@pytest.mark.parametrize("variant", ["attention", "attention-csr"])
def test_attention_variants_compute_gat_attention(variant):
    """Scores x_j[0] + x_i[1] through LeakyReLU, softmax per receiver, weighted sum: by hand."""
    graph = propagation_graph(make_graph("random", 30, 4.0, seed=2), variant)
    x = np.random.default_rng(1).standard_normal((30, 3)).astype(np.float32)
    s, r = np.asarray(graph.senders), np.asarray(graph.receivers)
    e = x[s, 0] + x[r, 1]
    e = np.where(e > 0, e, 0.2 * e)
    want = np.zeros_like(x)
    for i in range(30):
        rows = r == i
        a = np.exp(e[rows] - e[rows].max())
        want[i] = (a / a.sum()) @ x[s[rows]]
    fn = pass_function("fwd", backend_of(variant))
    np.testing.assert_allclose(fn(graph, jnp.asarray(x), None), want, rtol=1e-5, atol=1e-5)

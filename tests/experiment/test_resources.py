"""What a run asks of the graph and of memory is checked before anything compiles:
fanouts beyond the largest in-degree are lowered to it, a tree of 2**31 entries
and a run larger than the memory available are refused in one line."""

from __future__ import annotations

import types

import numpy as np
import pytest

from sparsegcn.cli import main
from sparsegcn.datasets.base import Dataset
from sparsegcn.experiment import Experiment
from sparsegcn.graph import Graph


def star(leaves: int, *, train: int = 4) -> Dataset:
    """Node 0 receives an edge from each of ``leaves`` leaves (in-degree ``leaves``);
    every leaf receives one from node 0."""
    n = leaves + 1
    leaf = np.arange(1, n)
    senders = np.concatenate([leaf, np.zeros(leaves, np.int64)])
    receivers = np.concatenate([np.zeros(leaves, np.int64), leaf])
    ids = np.arange(n)
    return Dataset(
        name="star",
        graph=Graph(senders, receivers, None, n),
        features=np.ones((n, 3), np.float32),
        labels=ids % 2,
        split={"train": ids[:train], "valid": ids[train : train + 2], "test": ids[-2:]},
        num_classes=2,
        num_edges=leaves,
    )


def test_max_in_degree_matches_a_count_of_receivers():
    from sparsegcn.datasets.ondisk import ExpandedRows
    from sparsegcn.experiment.resources import max_in_degree

    rng = np.random.default_rng(0)
    receivers = np.sort(rng.integers(0, 50, 400))
    graph = Graph(rng.integers(0, 50, 400), receivers, None, 50)
    expected = int(np.bincount(receivers, minlength=50).max())
    assert max_in_degree(graph) == expected
    indptr = np.concatenate([[0], np.cumsum(np.bincount(receivers, minlength=50))])
    rows = types.SimpleNamespace(
        receivers=ExpandedRows(indptr, 400), num_nodes=50, num_edges=400
    )  # an on-disk graph too large to expand: read from the offsets
    assert max_in_degree(rows) == expected
    assert max_in_degree(Graph(np.zeros(0, int), np.zeros(0, int), None, 3)) == 0


def test_fanouts_above_the_largest_in_degree_are_lowered_to_it():
    from sparsegcn.experiment.resources import fit_to_graph

    dataset = star(5, train=2)  # disjoint splits; largest in-degree 5 (node 0), others 1
    exp = Experiment(model="sage", fanouts="100000,3,7")
    fitted = fit_to_graph(exp, dataset, available=None)
    assert fitted.fanouts == "5,3,5" and fitted.layers == 3
    same = Experiment(model="sage", fanouts="4,2")
    assert fit_to_graph(same, dataset, available=None) is same


def test_a_tree_of_2_to_the_31_entries_is_refused():
    from sparsegcn.experiment.resources import fit_to_graph

    dataset = star(50_000, train=600)  # a batch of 512 seeds
    exp = Experiment(model="sage", fanouts="50000,50000")  # 512 * 2.5e9 entries
    with pytest.raises(ValueError, match=r"samples 1280000000000 tree entries per batch"):
        fit_to_graph(exp, dataset, available=None)
    assert fit_to_graph(Experiment(model="sage", fanouts="50000,2"), dataset, available=None)


def test_the_memory_estimate_counts_what_grows_with_the_seeds():
    from sparsegcn.experiment.resources import estimate_bytes, fit_to_graph

    dataset = star(9)  # N = 10, F = 3, C = 2
    gcn = Experiment(model="gcn", seeds=7)  # hidden 16, 2 layers, dropout 0.5
    # Per seed: a dropout mask byte per feature, float32 activations 16 + 2 wide,
    # and 3x16 + 16x2 weights, each with a gradient and two Adam moments.
    assert estimate_bytes(gcn, dataset) == 7 * (10 * 3 + 10 * (16 + 2) * 4 + 16 * (48 + 32))
    sage = Experiment(model="sage", fanouts="2,3", seeds=2, batch_size=4, hidden=8, dropout=0.5)
    levels = [4, 8, 24]  # a batch of 4 seeds, then 2 and 3 neighbours each
    per_seed = sum(levels) * (5 + 8 * 4) + 24 * 3 * (4 + 1) + 16 * (3 * 8 + 8 * 2)
    assert estimate_bytes(sage, dataset) == 2 * per_seed
    with pytest.raises(
        ValueError, match=r"needs an estimated 0.0 GiB \(7 seed\(s\) x .* but 0.0 GiB is available"
    ):
        fit_to_graph(gcn, dataset, available=1000)
    assert fit_to_graph(gcn, dataset, available=10**6) is gcn


@pytest.mark.parametrize("fanouts", ["2147483648", "10,2147483648"])
def test_an_out_of_range_fanout_is_refused_before_the_data_is_read(tmp_path, capsys, fanouts):
    absent = str(tmp_path / "no-such-dataset")
    assert main(["train", "--dataset", absent, "--model", "sage", "--fanouts", fanouts]) == 2
    err = capsys.readouterr().err
    assert "must be <= 2**31 - 1 = 2147483647" in err and "got 2147483648" in err
    assert "no-such-dataset" not in err  # refused before the dataset is looked for

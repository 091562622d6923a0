"""``reading_only``: what predicting loads is read from the data root, never written there."""

import pytest

from sparsegcn.datasets import load
from sparsegcn.datasets.base import reading_only
from sparsegcn.datasets.graphs import load_graphs
from sparsegcn.datasets.links import load_links


def test_a_missing_download_is_refused_and_nothing_is_created(tmp_path):
    root = tmp_path / "root"
    with reading_only("predicting"), pytest.raises(FileNotFoundError) as err:
        load("cora", root)
    assert "predicting reads the data only" in str(err.value)
    assert str(root / "planetoid") in str(err.value)
    assert not root.exists()  # not even the folder a download would go to
    with reading_only("predicting"), pytest.raises(FileNotFoundError):
        load_links("ogbl-collab", root)
    with reading_only("predicting"), pytest.raises(FileNotFoundError, match="tu:MUTAG"):
        load_graphs("tu:MUTAG", root)
    assert not root.exists()


def test_a_synthetic_preset_is_generated_in_memory_and_not_cached(tmp_path):
    with reading_only("predicting"):
        kept = load("synthetic:arxiv", tmp_path, scale=0.001)
        links = load_links("synthetic:collab", tmp_path, scale=0.001)
    assert list(tmp_path.iterdir()) == []
    # The same data as a load that caches it, and a cache that exists is read.
    cached = load("synthetic:arxiv", tmp_path, scale=0.001)
    assert (tmp_path / "synthetic").is_dir()
    assert (cached.features == kept.features).all() and (cached.labels == kept.labels).all()
    with reading_only("predicting"):
        again = load("synthetic:arxiv", tmp_path, scale=0.001)
    assert (again.graph.receivers == kept.graph.receivers).all()
    assert links.num_edges == load_links("synthetic:collab", tmp_path, scale=0.001).num_edges

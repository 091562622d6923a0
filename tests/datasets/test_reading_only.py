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


@pytest.mark.parametrize("name", ["synthetic:arxiv", "synthetic:collab"])
def test_a_cache_that_cannot_be_written_is_refused_before_generating(tmp_path, monkeypatch, name):
    # A read-only --root failed "Read-only file system" only after the whole graph was built.
    import errno
    import tempfile

    from sparsegcn.datasets import synthetic, synthetic_links

    root = tmp_path / "ro"
    root.mkdir()
    real = tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):
        if dir is not None and str(dir).startswith(str(root)):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, dir=dir, **kwargs)

    def no_generating(*args, **kwargs):
        raise AssertionError("generated")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    monkeypatch.setattr(synthetic, "generate", no_generating)
    monkeypatch.setattr(synthetic_links, "generate_links", no_generating)
    loader = load_links if name == "synthetic:collab" else load
    with pytest.raises(OSError, match=r"cache .*ro/synthetic/.* cannot be written: Read-only"):
        loader(name, root, scale=0.001)
    assert list(root.iterdir()) == []
    with reading_only("predicting"):  # generated in memory, as before: nothing to write
        monkeypatch.undo()
        monkeypatch.setattr(tempfile, "mkstemp", read_only)
        assert loader(name, root, scale=0.001).num_nodes > 0
    assert list(root.iterdir()) == []

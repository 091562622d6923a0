"""Python API inputs that were coerced, lost or misread: each refused naming the value."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import sparsegcn as sg
from sparsegcn.train import TrainConfig


def _node_data(**fields):
    graph = sg.Graph(np.array([0, 1, 2, 3]), np.array([1, 0, 3, 2]), None, 4)
    mask = np.ones(4, bool)
    base = dict(
        graph=graph,
        features=np.eye(4, dtype=np.float32),
        labels=np.array([0, 1, 0, 1]),
        train_mask=mask,
        val_mask=mask,
        test_mask=mask,
    )
    return sg.NodeData(**{**base, **fields})


# -- features ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "words"),
    [
        # Before: 1e300 is finite in float64, and became inf in the float32 cast.
        (lambda: sg.as_features(np.array([[1e300, 1.0]])), r"features\[0, 0\] = 1e\+300 is past"),
        (
            lambda: sg.as_features(sp.csr_array(np.array([[1e300, 1.0]]))),
            r"features.values\[0\] = 1e\+300 is past",
        ),
        (
            lambda: sg.SparseFeatures(np.array([0]), np.array([0]), np.array([1e300]), (2, 2)),
            r"features.values\[0\] = 1e\+300 is past the range of float32",
        ),
        # Before: the imaginary part was dropped with a NumPy warning.
        (
            lambda: sg.SparseFeatures(np.array([0]), np.array([0]), np.array([3 + 1j]), (2, 2)),
            r"features.values must be real numbers, got dtype complex128",
        ),
        (
            lambda: sg.as_features(sp.csr_array(np.array([[1 + 1j, 1.0]]))),
            r"features.values must be real numbers, got dtype complex128",
        ),
        (
            lambda: sg.row_normalize(np.array([[1 + 1j, 2.0]])),
            r"features must be real numbers, got dtype complex128",
        ),
        # Before: a sparse row holding inf came back as zeros, a dense one as NaN.
        (
            lambda: sg.row_normalize(sp.csr_array(np.array([[np.inf, 1.0], [1.0, 3.0]]))),
            r"features.values\[0\] = inf is not finite",
        ),
        (lambda: sg.row_normalize(np.array([[np.inf, 1.0]])), r"features\[0, 0\] = inf"),
        # Before: "too many values to unpack", an AxisError.
        (
            lambda: sg.SparseFeatures(np.array([0]), np.array([0]), np.array([1.0]), (2, 2, 2)),
            r"shape must be \(N, F\), two sizes, got \(2, 2, 2\)",
        ),
        (lambda: sg.SparseFeatures.from_scipy(np.ones(3)), r"features must be \[N, F\]"),
        (lambda: sg.row_normalize(np.array([1.0, 2.0])), r"features must be \[N, F\]"),
    ],
)
def test_features_that_would_be_lost_in_float32_are_refused(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_row_normalize_still_normalizes_what_it_should():
    dense = np.array([[0.0, 0.0], [1.0, 3.0]])
    np.testing.assert_allclose(sg.row_normalize(dense), [[0.0, 0.0], [0.25, 0.75]])
    sparse = sg.row_normalize(sp.csr_array(dense))
    np.testing.assert_allclose(sparse.toarray(), [[0.0, 0.0], [0.25, 0.75]])
    # Rows whose float32 sum overflows (each value in range): before, all zeros (x / inf).
    huge = np.full((3, 5), 3e38, np.float32)
    np.testing.assert_allclose(sg.row_normalize(huge), np.full((3, 5), 0.2), rtol=1e-6)
    np.testing.assert_allclose(
        sg.row_normalize(sp.csr_array(huge)).toarray(), np.full((3, 5), 0.2), rtol=1e-6
    )
    # Duplicate entries add up (scipy's sum), and the caller's matrix is left as it was.
    dup = sp.csr_array((np.array([1.0, 1.0, 2.0], np.float32), [0, 0, 1], [0, 2, 3]), (2, 2))
    np.testing.assert_allclose(sg.row_normalize(dup).toarray(), [[1.0, 0.0], [0.0, 1.0]])
    assert dup.nnz == 3 and not dup.has_canonical_format


# -- node data -----------------------------------------------------------------


def test_minibatch_data_refuses_float_labels_instead_of_truncating_them():
    # Before: 6.9 became class 6, and fit_minibatch trained on it.
    with pytest.raises(TypeError, match=r"minibatch_data: data.labels has dtype float64"):
        sg.minibatch_data(_node_data(labels=np.array([0.0, 1.9, 0.0, 1.0])))
    with pytest.raises(TypeError, match=r"minibatch_data: data.val_mask has dtype int64"):
        sg.minibatch_data(_node_data(val_mask=np.array([0, 3, 1, 0])))


def test_a_negative_label_is_named_without_a_class_count_hint():
    labels = np.array([0, -1, 0, 1])
    with pytest.raises(ValueError, match=r"node 1 has label -1, outside \[0, 2\) .* needs a class"):
        sg.fit(sg.gcn(4, 2), _node_data(labels=labels), TrainConfig(epochs=1))


def test_shard_features_must_be_a_bool():
    data = sg.minibatch_data(_node_data())
    with pytest.raises(TypeError, match=r"shard_features must be True or False, got 'yes'"):
        sg.fit_data_parallel(sg.sage(4, 2), data, TrainConfig(epochs=1), shard_features="yes")


# -- checkpoints ----------------------------------------------------------------


@pytest.fixture(scope="module")
def two_seed_state():
    from sparsegcn.train.optim import make_optimizer
    from sparsegcn.train.state import init_state, seed_keys

    model, tx = sg.gcn(4, 2), make_optimizer(TrainConfig())
    return jax.vmap(lambda k: init_state(model, tx, k))(seed_keys([0, 1]))


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        # Before: saved, then refused on load as corruption ("do not match their manifest").
        (
            dict(history={"loss": np.zeros((2, 3))}),
            ValueError,
            r"history\['loss'\] has shape \(2, 3\); it must be \[epochs, K\] with K = 2",
        ),
        (dict(history={"loss": np.zeros(2)}), ValueError, r"history\['loss'\] has shape \(2,\)"),
        # Before: written (-1, 2**70) or a raw int() error ('a').
        (dict(seeds=[-1, 0]), ValueError, r"seeds\[0\] must be >= 0"),
        (dict(seeds=[0, "a"]), TypeError, r"seeds\[1\] must be an integer"),
        # Before: keep=1.5 wrote the checkpoint, then failed in pruning.
        (dict(keep=1.5), TypeError, r"keep must be an integer >= 1"),
        # Before: JSON turned the key 1 into "1", so the metadata no longer matched.
        (dict(metadata={"a": {1: 2}}), TypeError, r"metadata\['a'\] keys must be strings"),
    ],
)
def test_save_checkpoint_refuses_what_load_would_refuse_or_misread(
    tmp_path, two_seed_state, kwargs, error, words
):
    arguments = dict(seeds=[0, 1], **kwargs) if "seeds" not in kwargs else kwargs
    with pytest.raises(error, match=words):
        sg.save_checkpoint(tmp_path / "ck", two_seed_state, **arguments)
    assert not (tmp_path / "ck").exists() or not list((tmp_path / "ck").glob("ckpt-*"))


def test_members_may_share_a_seed(tmp_path, two_seed_state):
    # A graph run's members are folds x seeds: fold 0 and fold 1 of seed 0.
    path = sg.save_checkpoint(tmp_path / "ck", two_seed_state, seeds=[0, 0])
    assert path.exists()


def test_checkpoint_paths_must_be_paths():
    with pytest.raises(TypeError, match=r"a checkpoint path must be a str or os.PathLike, got 3"):
        sg.load_checkpoint(3, template=None)


# -- datasets and sampling -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("tu:MUTAG", r"graph-level dataset: load it with sparsegcn.datasets.graphs.load_graphs"),
        ("ogbg-molhiv", r"graph-level dataset"),
        ("synthetic:molhiv", r"graph-level dataset"),
        ("ogbn-mag", r"heterogeneous dataset: load it with sparsegcn.datasets.mag.load_mag"),
        ("synthetic:mag", r"heterogeneous dataset"),
    ],
)
def test_load_points_to_the_loader_of_another_task(tmp_path, name, words):
    # Before: "unknown dataset" (and "unknown synthetic preset 'molhiv'").
    with pytest.raises(ValueError, match=words):
        sg.datasets.load(name, tmp_path)


def test_load_refuses_string_flags_and_a_root_that_is_no_path(tmp_path):
    # Before: download="no" was truthy and tried the network; root=123 failed in pathlib.
    with pytest.raises(TypeError, match=r"download must be True or False, got 'no'"):
        sg.datasets.load("cora", tmp_path, download="no")
    with pytest.raises(TypeError, match=r"root must be a folder path, got 123"):
        sg.datasets.load("cora", 123)


def test_a_typed_fanout_is_named_by_hop_and_relation():
    from sparsegcn.sampling.typed import HeteroCSR, sample_typed

    cites, writes = ("paper", "cites", "paper"), ("author", "writes", "paper")
    graph = sg.HeteroGraph(
        {"paper": 3, "author": 2},
        {cites: (np.array([1, 2]), np.array([0, 0])), writes: (np.array([0, 1]), np.array([0, 1]))},
    )
    csr, seeds = HeteroCSR.from_graph(graph), jnp.array([0, 1], jnp.int32)
    # Before: "fanouts[1] must be >= 1", which named relation 1 of hop 0 as hop 1.
    with pytest.raises(ValueError, match=r"^fanouts\[0\]\[1\] must be >= 1, got -1$"):
        sample_typed(csr, seeds, [(1, -1)], seed_type="paper", key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"^fanouts\[0\]\['cites'\] must be >= 1, got 0$"):
        sample_typed(
            csr, seeds, [{"cites": 0, "writes": 1}], seed_type="paper", key=jax.random.key(0)
        )


# -- graph tasks and metrics ---------------------------------------------------------


def test_a_graph_in_two_splits_of_a_fold_is_refused():
    # Before: a Splits whose train and test masks shared a graph trained on it and
    # reported it as held out.
    from graph_sets import random_graphs

    from sparsegcn.nn.graph_gin import graph_gin
    from sparsegcn.train.graphs import GraphTrainConfig, fit_graphs, fold_splits

    data = random_graphs(count=12, seed=1)
    splits = fold_splits(data.labels, 3, seed=0)
    leaked = splits._replace(train=splits.train | splits.test)
    with pytest.raises(
        ValueError, match=r"fold 0 has graph \d+ in both splits.train and splits.test"
    ):
        fit_graphs(
            graph_gin(3, 2, hidden=4, num_layers=2), data, GraphTrainConfig(epochs=1), leaked
        )


def test_a_budget_must_be_a_budget():
    from graph_sets import random_graphs

    from sparsegcn.nn.graph_gin import graph_gin
    from sparsegcn.train.graphs import GraphTrainConfig, fit_graphs, fold_splits

    data = random_graphs(count=12, seed=1)
    splits = fold_splits(data.labels, 3, seed=0)
    # Before: AttributeError 'tuple' object has no attribute 'nodes'.
    with pytest.raises(
        TypeError, match=r"budget must be a Budget\(nodes, edges, graphs\), got tuple"
    ):
        fit_graphs(
            graph_gin(3, 2, hidden=4, num_layers=2),
            data,
            GraphTrainConfig(epochs=1),
            splits,
            budget=(33, 96, 7),
        )


def test_roc_auc_and_ap_refuse_masks_that_are_not_bool():
    # Before: a float mask was cast to bool, so 0.5 counted as a labelled entry.
    scores, labels = np.array([0.1, 0.9, 0.4]), np.array([0.0, 1.0, 1.0])
    from sparsegcn.metrics import average_precision, roc_auc

    for metric in (roc_auc, average_precision):
        with pytest.raises(TypeError, match=r"mask must be a bool array, got float32"):
            metric(scores, labels, np.array([1.0, 0.5, 0.0], np.float32))


def test_a_masked_max_keeps_an_infinite_value_of_a_real_edge():
    # Before: an all-True edge_mask turned the +inf max of node 1 into 0 (no mask: inf).
    from sparsegcn.views import Bipartite

    x = jnp.array([[np.inf], [1.0], [2.0]])
    view = Bipartite(np.array([0, 1]), np.array([1, 2]), None, np.array([True, True]), 0, 3, 3)
    plain = sg.Graph(np.array([0, 1]), np.array([1, 2]), None, 3)
    np.testing.assert_array_equal(
        sg.message_passing(view, x, aggregate="max").ravel(), [0, np.inf, 1]
    )
    np.testing.assert_array_equal(
        sg.message_passing(plain, x, aggregate="max").ravel(), [0, np.inf, 1]
    )
    masked = Bipartite(np.array([0, 1]), np.array([1, 2]), None, np.array([False, True]), 0, 3, 3)
    np.testing.assert_array_equal(sg.message_passing(masked, x, aggregate="max").ravel(), [0, 0, 1])


@pytest.mark.parametrize("layout", sg.LAYOUTS)
def test_the_x_gradient_under_vmap_over_edge_weights_on_every_layout(layout):
    # Before: on bcoo, JAX's BCOO transpose rule raised "dot_general requires lhs batch
    # dimensions..." for weights batched over a shared x; the other layouts were right.
    graph = sg.Graph(np.array([0, 1, 2, 2]), np.array([1, 2, 0, 1]), None, 3)
    view = sg.as_layout(graph, layout)
    x = jax.random.normal(jax.random.key(0), (3, 2))
    weights = jax.random.uniform(jax.random.key(1), (4, 4))  # four weight vectors, one x

    def loss(x, weights):
        products = jax.vmap(lambda w: sg.message_passing(view, x, edge_weight=w))(weights)
        return jnp.sum(jnp.sin(products))

    def dense_loss(x, weights):
        def one(w):
            # Weights are in the view's own edge order (bcoo sorts by receiver).
            a = jnp.zeros((3, 3)).at[np.asarray(view.receivers), np.asarray(view.senders)].add(w)
            return a @ x

        return jnp.sum(jnp.sin(jax.vmap(one)(weights)))

    for argnum in (0, 1):
        np.testing.assert_allclose(
            jax.grad(loss, argnum)(x, weights), jax.grad(dense_loss, argnum)(x, weights), rtol=1e-5
        )


@pytest.mark.parametrize(
    ("module", "loader", "name"),
    [
        ("sparsegcn.datasets.graphs", "load_graphs", "tu:MUTAG"),
        ("sparsegcn.datasets.links", "load_links", "ogbl-ddi"),
        ("sparsegcn.datasets.mag", "load_mag", "ogbn-mag"),
    ],
)
def test_every_loader_refuses_a_root_that_is_no_path(module, loader, name):
    import importlib

    load = getattr(importlib.import_module(module), loader)
    # Before: a TypeError from inside pathlib.
    with pytest.raises(TypeError, match=r"root must be a folder path, got 5 \(int\)"):
        load(name, 5)


def test_an_unlabelled_node_may_hold_any_label():
    # Before: a label >= C on a node in no mask made the loss NaN ("training diverged").
    from sparsegcn.train import NodeData

    rng = np.random.default_rng(0)
    n = 40
    edges = rng.integers(0, n, (2, 120))
    graph = sg.gcn_norm(sg.to_undirected(sg.Graph(edges[0], edges[1], None, n)))
    x = rng.normal(size=(n, 5)).astype(np.float32)
    labels = rng.integers(0, 3, n).astype(np.int32)
    masks = [np.isin(np.arange(n), r) for r in (range(20), range(20, 30), range(30, 39))]
    runs = []
    for placeholder in (0, 7):
        labels[39] = placeholder  # node 39 is in no mask
        data = NodeData(graph, x, labels.copy(), *masks)
        runs.append(sg.fit(sg.gcn(5, 3), data, TrainConfig(epochs=5)))
    first, second = (jax.tree.leaves(r.state.params) for r in runs)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)

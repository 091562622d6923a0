"""The task registry: every dataset has one task, each entry resolves, and
run_experiment does nothing but run the task's pipeline."""

from __future__ import annotations

import dataclasses

import pytest

from sparsegcn.experiment import Experiment
from sparsegcn.experiment import run as run_module
from sparsegcn.tasks import TASKS, resolve, task_for, task_name


def test_every_dataset_has_exactly_one_task():
    assert task_name("tu:MUTAG") == "graph"
    for name in ("cora", "ogbn-arxiv", "synthetic:tiny", "some/folder"):
        assert task_name(name) == "node"
    assert sum(not task.datasets for task in TASKS.values()) == 1  # one default task


@pytest.mark.parametrize("name", list(TASKS))
def test_every_entry_resolves(name):
    task = TASKS[name]
    for target in (task.pipeline, task.prepare, task.check):
        if target is not None:
            assert callable(resolve(target))
    assert callable(task.loss) and all(callable(m) for m in task.metrics.values())


def test_node_pipeline_is_the_node_experiment():
    assert resolve(TASKS["node"].pipeline) is run_module.run_node_experiment


def test_run_experiment_only_looks_the_task_up(monkeypatch):
    seen = []

    def pipeline(exp, *, progress=False):
        seen.append((exp.dataset, progress))
        return {"test_acc_mean": 1.0}

    fake = dataclasses.replace(TASKS["graph"], pipeline="test_tasks:fake_pipeline")
    monkeypatch.setattr(run_module, "task_for", lambda dataset, task="auto": fake)
    monkeypatch.setitem(globals(), "fake_pipeline", pipeline)
    report = run_module.run_experiment(Experiment(dataset="tu:MUTAG", model="gin"), progress=True)
    assert seen == [("tu:MUTAG", True)]
    assert report == {"task": "graph", "test_acc_mean": 1.0}


def test_a_task_borrowing_node_datasets_trains_with_its_own_objective(monkeypatch):
    # Before: the node pipeline looked the objective up by dataset alone, so a task named
    # by --task that borrows node datasets trained with plain cross-entropy.
    import types

    import sparsegcn.tasks as tasks_module

    own = TASKS["node-multilabel"].objective._replace(metric_name="own")
    borrowing = dataclasses.replace(TASKS["node"], borrows=("node",), objective=own)
    monkeypatch.setattr(tasks_module, "TASKS", {**TASKS, "node-own": borrowing})
    exp = types.SimpleNamespace(dataset="cora", task="node-own")
    assert run_module.node_objective(exp) is own
    plain = run_module.node_objective(types.SimpleNamespace(dataset="cora", task="auto"))
    assert plain is TASKS["node"].objective


def test_graph_task_defaults_are_xu_et_al():
    exp = Experiment(dataset="tu:MUTAG", model="gin")
    assert (exp.layers, exp.hidden, exp.lr, exp.epochs, exp.batch_size) == (5, 64, 0.01, 350, 32)
    node = Experiment(model="gin")
    assert (node.layers, node.batch_size) == (2, 512)
    assert task_for("tu:MUTAG") is TASKS["graph"]


def test_a_graph_dataset_folder_belongs_to_the_graph_task(tmp_path):
    from graph_sets import random_graphs

    from sparsegcn.datasets.ondisk_graphs import save_graphs

    folder = save_graphs(random_graphs(), tmp_path / "graphs")
    assert task_name(str(folder)) == "graph"
    assert task_name(str(tmp_path / "elsewhere")) == "node"  # no manifest: the node task's

"""The multi-label node task: several binary labels per node (``ogbn-proteins``).

It runs the node task's pipeline
(:func:`~sparsegcn.experiment.run.run_node_experiment`) with the task's
objective (:data:`~sparsegcn.train.losses.MULTILABEL`: per-task binary
cross-entropy, ROC-AUC averaged over tasks), on one device or, with
``--devices D``, on ``D`` devices of every process (``--num-processes``):
sampled GraphSAGE data parallel (:func:`~sparsegcn.parallel.fit_data_parallel`), full-batch
``gcn``, ``sage`` and ``mlp`` edge-sharded
(:func:`~sparsegcn.parallel.fit_edge_sharded`). Only the settings that
pipeline serves through trainers without an objective are refused here.
"""

from __future__ import annotations

# Experiment settings whose trainers take no objective (sharded features, streamed),
# with the values that leave them off.
_UNSUPPORTED = {
    "shard_features": (False,),
    "features_on": ("auto", "device"),
    "graph_on": ("auto", "device"),
    "max_batches": (0,),
}


def check_multilabel_experiment(exp) -> None:
    """Refuses what multi-label training does not support, naming the first setting.

    Multi-label runs train with the full-batch or the sampled trainer,
    features and graph on the device(s), in one process or several.

    Raises:
      ValueError: sharded features, or streamed features or graph.
    """
    for name, unset in _UNSUPPORTED.items():
        value = getattr(exp, name)
        if value not in unset:
            raise ValueError(
                f"{exp.dataset}: multi-label node training runs with features and graph on "
                f"its devices; {name}={value!r} is not supported with it"
            )


__all__ = ["check_multilabel_experiment"]

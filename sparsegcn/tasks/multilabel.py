"""The multi-label node task: several binary labels per node (``ogbn-proteins``).

It runs the node task's pipeline
(:func:`~sparsegcn.experiment.run.run_node_experiment`) with the task's
objective (:data:`~sparsegcn.train.losses.MULTILABEL`: per-task binary
cross-entropy, ROC-AUC averaged over tasks); only the settings that
pipeline serves through trainers without an objective are refused here.
"""

from __future__ import annotations

# Experiment settings whose trainers take no objective (data parallel, edge-sharded,
# streamed), with the values that leave them off.
_UNSUPPORTED = {
    "devices": (1,),
    "num_processes": (1,),
    "coordinator": (None,),
    "shard_features": (False,),
    "features_on": ("auto", "device"),
    "graph_on": ("auto", "device"),
    "max_batches": (0,),
}


def check_multilabel_experiment(exp) -> None:
    """Refuses what multi-label training does not support, naming the first setting.

    Multi-label runs train on one device with the full-batch or the sampled
    trainer (features and graph on the device).

    Raises:
      ValueError: several devices or processes, or streamed features or graph.
    """
    for name, unset in _UNSUPPORTED.items():
        value = getattr(exp, name)
        if value not in unset:
            raise ValueError(
                f"{exp.dataset}: multi-label node training runs on one device with features "
                f"and graph on it; {name}={value!r} is not supported with it"
            )


__all__ = ["check_multilabel_experiment"]

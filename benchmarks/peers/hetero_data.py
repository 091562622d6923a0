"""The heterogeneous graph and R-GCN weights every side of ``compare.py --only mag`` reads.

NumPy only: ``hetero_compare.py`` (ours) and ``rgcn_dgl.py`` (DGL's side,
under its own Python) import it, so both train on the same arrays, read
from one ``.npz``:

- ``node_types``: str ``[T]``; ``num_nodes``: int64 ``[T]``, in that order;
- ``edge_types``: str ``[R, 3]``, ``(src_type, relation, dst_type)`` rows in
  the order the model stores its relation weights (reverse relations
  already added);
- ``senders_<r>``, ``receivers_<r>``: int32 ``[E_r]`` of relation ``r``;
- ``features_<type>``: float32 ``[N_t, F]`` for each featured type;
- ``target``: str, the classified node type; ``labels``: int64
  ``[N_target]``; ``train``: int64 ``[P]`` training ids of the target type.

:func:`rgcn_weights` lays out an R-GCN's params (``sparsegcn.nn.rgcn``) in
one flat ``.npz`` (``[in, out]`` maps), for the test that checks DGL's
model computes ours.
"""

from __future__ import annotations

import os

import numpy as np


def save_hetero(
    folder: str,
    stem: str,
    *,
    num_nodes: dict,
    relations: dict,
    features: dict,
    target: str,
    labels,
    train,
) -> str:
    """The arrays above in ``folder/stem.npz`` (through a temp name).

    Args:
      num_nodes: ``{type: N_t}``.
      relations: ``{(src, relation, dst): (senders, receivers)}`` in model order.
      features: ``{type: [N_t, F]}``.
      target, labels, train: the classified type, its labels and training ids.
    """
    names = [rel for _, rel, _ in relations]
    if len(set(names)) != len(names):
        raise ValueError(f"relation names must be unique (DGL keys modules by them), got {names}")
    arrays = {
        "node_types": np.array(list(num_nodes)),
        "num_nodes": np.array([int(n) for n in num_nodes.values()], np.int64),
        "edge_types": np.array([list(k) for k in relations]).reshape(-1, 3),
        "target": np.array(target),
        "labels": np.asarray(labels, np.int64),
        "train": np.asarray(train, np.int64),
    }
    for r, (senders, receivers) in enumerate(relations.values()):
        arrays[f"senders_{r}"] = np.asarray(senders, np.int32)
        arrays[f"receivers_{r}"] = np.asarray(receivers, np.int32)
    for t, x in features.items():
        arrays[f"features_{t}"] = np.asarray(x, np.float32)
    path = os.path.join(folder, f"{stem}.npz")
    partial = os.path.join(folder, f"{stem}.partial.npz")
    np.savez(partial, **arrays)
    os.replace(partial, path)
    return path


def load_hetero(data) -> dict:
    """An opened ``.npz`` of :func:`save_hetero` as plain Python: ``num_nodes``
    ``{type: N}``, ``relations`` ``{(s, r, d): (senders, receivers)}``,
    ``features`` ``{type: [N_t, F]}``, ``target``, ``labels``, ``train``."""
    edge_types = [tuple(str(p) for p in row) for row in data["edge_types"]]
    types = [str(t) for t in data["node_types"]]
    return {
        "num_nodes": dict(zip(types, (int(n) for n in data["num_nodes"]), strict=True)),
        "relations": {
            key: (data[f"senders_{r}"], data[f"receivers_{r}"]) for r, key in enumerate(edge_types)
        },
        "features": {t: data[f"features_{t}"] for t in types if f"features_{t}" in data},
        "target": str(data["target"]),
        "labels": data["labels"],
        "train": data["train"],
    }


def rgcn_weights(params) -> dict[str, np.ndarray]:
    """An R-GCN's params as flat arrays: ``emb_<type>`` ``[N_t, F]``; per layer ``l``
    ``root_w_<l>_<type>`` ``[F, F']``, ``root_b_<l>_<type>`` ``[F']`` and
    ``w_rel_<l>`` ``[R, F, F']`` (composed from bases when the layer has them)."""
    flat = {f"emb_{t}": np.asarray(v, np.float32) for t, v in params["embeddings"].items()}
    for i, layer in enumerate(params["layers"]):
        for t, root in layer["root"].items():
            flat[f"root_w_{i}_{t}"] = np.asarray(root["w"], np.float32)
            flat[f"root_b_{i}_{t}"] = np.asarray(root["b"], np.float32)
        if "bases" in layer:
            w_rel = np.einsum("rb,bio->rio", layer["coeffs"], layer["bases"])
        else:
            w_rel = layer["w_rel"]
        flat[f"w_rel_{i}"] = np.asarray(w_rel, np.float32)
    return flat


def sage_weights(params) -> dict[str, np.ndarray]:
    """A GraphSAGE's params (``sparsegcn.nn.sage``) as ``w_root_<l>``, ``w_neigh_<l>``
    (``[F, F']``) and ``b_<l>`` (``[F']``)."""
    flat = {}
    for i, layer in enumerate(params["layers"]):
        for name in ("w_root", "w_neigh", "b"):
            flat[f"{name}_{i}"] = np.asarray(layer[name], np.float32)
    return flat


def save_weights(path: str, flat: dict[str, np.ndarray]) -> str:
    """``flat`` in ``path`` (an ``.npz``), through a temp name."""
    partial = f"{path}.partial.npz"
    np.savez(partial, **flat)
    os.replace(partial, path)
    return path


__all__ = ["load_hetero", "rgcn_weights", "sage_weights", "save_hetero", "save_weights"]

"""Checkpoints of a multi-seed training state: an ``.npz`` plus a JSON manifest.

Format (version 1). A checkpoint directory holds, per saved epoch ``E``:

- ``ckpt-EEEEEE-<sha12>.npz``: the state's leaves as NumPy arrays named
  ``leaf_00000``, ``leaf_00001``, ... in ``jax.tree_util`` flattening order,
  PRNG keys stored as their raw ``uint32`` key data
  (``jax.random.key_data``), plus the per-epoch history as ``history/<metric>``
  ``[epochs, K]``. Only numeric arrays are written (object arrays are
  refused) and files are read with ``allow_pickle=False``.
- ``ckpt-EEEEEE.json``: the manifest, written *after* the arrays; a
  checkpoint exists exactly when its manifest does. It records the format
  name and version, the epoch, the seeds, the arrays file's name, size and
  sha256, one entry per leaf (tree path, shape, dtype and, for keys, the PRNG
  implementation), the history's metric names, and caller ``metadata`` (the
  experiment config and a dataset fingerprint, for ``sparsegcn train``).

Every file is written atomically (temporary file in the same folder, fsync,
``os.replace``, fsync of the folder), so a crash leaves either the previous
checkpoints or the new one, never a partial file. Loading reads the arrays
file once, checks its size and sha256 against the manifest, then checks every
leaf's path, shape and dtype against a template state (and ``expect``ed
metadata against the manifest's); any mismatch raises
:class:`CheckpointError` naming it, before anything is returned.

orbax-checkpoint was considered and not used: it pulls in tensorstore,
protobuf, absl, etils and a dozen more packages, while a full-batch state is
a few megabytes that NumPy writes in milliseconds, and the compatibility
checks above would still be ours to write.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sparsegcn.files import fsync_directory, save_npy_atomic, write_atomic
from sparsegcn.train.state import TrainState

FORMAT = "sparsegcn.checkpoint"
FORMAT_VERSION = 1
_MANIFEST = re.compile(r"^ckpt-(\d{6,})\.json$")
_ARRAYS = re.compile(r"^ckpt-(\d{6,})-[0-9a-f]{12}\.npz$")
_TEMP_PREFIX = ".ckpt-"


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, truncated or incompatible with this run."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint.

    Attributes:
      path: the manifest file it was read from.
      epoch: the epoch it was saved at (the largest epoch over seeds).
      seeds: the integer seeds, in member order (``K`` of them).
      state: the :class:`TrainState`, every leaf with a leading ``[K]`` axis.
      history: per-epoch metrics ``{name: [epochs, K]}`` (NumPy).
      metadata: what the writer stored (for ``sparsegcn train``: ``config``,
        the experiment's fields, and ``dataset``, its fingerprint).
    """

    path: Path
    epoch: int
    seeds: tuple[int, ...]
    state: TrainState
    history: dict
    metadata: dict


# -- atomic files -------------------------------------------------------------


# -- describing trees ---------------------------------------------------------


def _is_key(leaf) -> bool:
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _describe(path, leaf) -> dict:
    entry = {
        "path": jax.tree_util.keystr(path),
        "shape": [int(d) for d in leaf.shape],
        "dtype": str(leaf.dtype),
    }
    if _is_key(leaf) and isinstance(leaf, jax.Array):
        entry["prng_impl"] = str(jax.random.key_impl(leaf))
    return entry


def describe_tree(tree) -> list[dict]:
    """One ``{"path", "shape", "dtype"[, "prng_impl"]}`` entry per leaf, in flattening order.

    Works on arrays and on ``jax.ShapeDtypeStruct`` templates alike; PRNG key
    leaves have a dtype such as ``key<fry>`` and, for concrete keys, the
    implementation's name (``threefry2x32``).
    """
    return [_describe(p, leaf) for p, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


def state_template(init: Callable[[jax.Array], TrainState], num_seeds: int) -> TrainState:
    """The shapes and dtypes of ``vmap(init)`` over ``num_seeds`` keys, computed abstractly.

    Args:
      init: ``init(key) -> TrainState`` for one seed, e.g.
        ``lambda k: init_state(model, tx, k)``.
      num_seeds: ``K``.

    Returns:
      A :class:`TrainState` of ``jax.ShapeDtypeStruct`` leaves (no arrays are built).
    """
    keys = jax.ShapeDtypeStruct((num_seeds,), jax.random.key(0).dtype)
    return jax.eval_shape(jax.vmap(init), keys)


# -- saving -------------------------------------------------------------------


def _history_arrays(history: Mapping | None) -> dict[str, np.ndarray]:
    arrays = {}
    for name, values in (history or {}).items():
        if "/" in name:
            raise ValueError(f"history metric names may not contain '/', got {name!r}")
        # Trainers that keep per-call chunks hand over lists of [chunk, K] arrays.
        arrays[name] = np.concatenate(values) if isinstance(values, list) else np.asarray(values)
    return arrays


def _serialize(state: TrainState, history: dict[str, np.ndarray]) -> tuple[bytes, list[dict]]:
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    leaves, arrays = [], {}
    for i, (path, leaf) in enumerate(flat):
        name = f"leaf_{i:05d}"
        entry = _describe(path, leaf)
        data = jax.random.key_data(leaf) if _is_key(leaf) else leaf
        arrays[name] = np.asarray(data)
        entry["name"] = name
        entry["stored_shape"] = list(arrays[name].shape)
        entry["stored_dtype"] = str(arrays[name].dtype)
        leaves.append(entry)
    for metric, values in history.items():
        arrays[f"history/{metric}"] = values
    for name, array in arrays.items():
        if array.dtype == object:
            raise TypeError(f"checkpoint array {name!r} has dtype object; only numbers are saved")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # numeric arrays only (checked above): no pickle inside
    return buffer.getvalue(), leaves


def _epochs(state: TrainState) -> np.ndarray:
    return np.atleast_1d(np.asarray(state.epoch)).astype(np.int64)


def save_checkpoint(
    directory: str | os.PathLike,
    state: TrainState,
    *,
    seeds: Sequence[int],
    history: Mapping | None = None,
    metadata: Mapping | None = None,
    keep: int | None = None,
) -> Path:
    """Saves ``state`` (leading ``[K]`` axis) as one checkpoint in ``directory``.

    Args:
      directory: the checkpoint folder (created if missing).
      state: the training state of every seed.
      seeds: the ``K`` integer seeds, in member order.
      history: per-epoch metrics ``{name: [epochs, K]}`` to store alongside.
      metadata: JSON-serializable description of the run, stored in the
        manifest and checked on load through ``expect``.
      keep: keep only the newest ``keep`` checkpoints (``None``: keep all).

    Returns:
      The manifest's path. Saving the same epoch again replaces it.
    """
    directory = Path(directory)
    seeds = [int(s) for s in seeds]
    epochs = _epochs(state)
    if epochs.shape[0] != len(seeds):
        raise ValueError(
            f"state holds {epochs.shape[0]} members but {len(seeds)} seeds were given: {seeds}"
        )
    if keep is not None and keep < 1:
        raise ValueError(f"keep must be >= 1 or None, got {keep}")
    epoch = int(epochs.max())
    history = _history_arrays(history)
    payload, leaves = _serialize(state, history)
    digest = hashlib.sha256(payload).hexdigest()
    arrays_name = f"ckpt-{epoch:06d}-{digest[:12]}.npz"
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "jax_version": jax.__version__,
        "epoch": epoch,
        "seed_epochs": epochs.tolist(),
        "seeds": seeds,
        "arrays": arrays_name,
        "arrays_bytes": len(payload),
        "arrays_sha256": digest,
        "leaves": leaves,
        "history": sorted(history),
        "metadata": _jsonable(dict(metadata or {})),
    }
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / arrays_name, lambda f: f.write(payload))
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    path = write_atomic(directory / f"ckpt-{epoch:06d}.json", lambda f: f.write(text.encode()))
    _prune(directory, keep)
    return path


def _jsonable(metadata: dict) -> dict:
    try:
        return json.loads(json.dumps(metadata, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise TypeError(f"checkpoint metadata must be plain JSON data: {err}") from None


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The committed checkpoints (manifests) in ``directory``, oldest epoch first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _MANIFEST.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest checkpoint's manifest in ``directory``, or ``None``."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def _prune(directory: Path, keep: int | None) -> None:
    """Drops checkpoints beyond the newest ``keep``, then unreferenced files.

    A manifest is removed before its arrays, so a crash in between leaves an
    orphan arrays file (cleaned up next time), never a dangling manifest.
    """
    manifests = list_checkpoints(directory)
    if keep is not None:
        for old in manifests[:-keep]:
            old.unlink(missing_ok=True)
        manifests = manifests[-keep:]
    referenced = set()
    for manifest in manifests:
        try:
            referenced.add(json.loads(manifest.read_text())["arrays"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged manifest keeps nothing alive; load reports it
    for path in directory.iterdir():
        stale_temp = path.name.startswith(_TEMP_PREFIX) and path.name.endswith(".tmp")
        orphan = _ARRAYS.match(path.name) and path.name not in referenced
        if stale_temp or orphan:
            path.unlink(missing_ok=True)
    fsync_directory(directory)


# -- loading ------------------------------------------------------------------


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A manifest path from a checkpoint folder (its newest) or a manifest file."""
    path = Path(path)
    if path.is_dir():
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"no checkpoint in {path}: expected ckpt-<epoch>.json files")
        return latest
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if not _MANIFEST.match(path.name):
        raise CheckpointError(
            f"{path} is not a checkpoint manifest (expected a folder or a ckpt-<epoch>.json file)"
        )
    return path


def read_manifest(path: str | os.PathLike) -> dict:
    """The validated manifest of a checkpoint (a folder's newest, or a manifest file)."""
    path = resolve_checkpoint(path)
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{path} is not a readable checkpoint manifest: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a {FORMAT} manifest")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format version {version}; this sparsegcn reads version "
            f"{FORMAT_VERSION}"
        )
    required = ("epoch", "seeds", "arrays", "arrays_bytes", "arrays_sha256", "leaves", "history")
    missing = [k for k in required if k not in manifest]
    if missing:
        raise CheckpointError(f"{path} lacks manifest fields {missing}")
    if Path(manifest["arrays"]).name != manifest["arrays"]:
        raise CheckpointError(f"{path} names arrays outside its folder: {manifest['arrays']!r}")
    manifest["path"] = str(path)
    return manifest


def _read_arrays(folder: Path, manifest: dict) -> dict[str, np.ndarray]:
    arrays_path = folder / manifest["arrays"]
    try:
        payload = arrays_path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"checkpoint arrays {arrays_path} cannot be read: {err}") from None
    if len(payload) != manifest["arrays_bytes"]:
        raise CheckpointError(
            f"checkpoint arrays {arrays_path} are truncated or corrupt: {len(payload)} bytes, "
            f"the manifest says {manifest['arrays_bytes']}"
        )
    digest = hashlib.sha256(payload).hexdigest()
    if digest != manifest["arrays_sha256"]:
        raise CheckpointError(
            f"checkpoint arrays {arrays_path} are corrupt: sha256 {digest}, the manifest says "
            f"{manifest['arrays_sha256']}"
        )
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError) as err:
        raise CheckpointError(f"checkpoint arrays {arrays_path} cannot be decoded: {err}") from None


def _check_expected(manifest: dict, expect: Mapping, where: str = "") -> None:
    for key, wanted in expect.items():
        name = f"{where}{key}"
        if key not in manifest:
            raise CheckpointError(
                f"incompatible checkpoint: it records no {name!r}, this run needs {wanted!r}"
            )
        found = manifest[key]
        if isinstance(wanted, Mapping) and isinstance(found, Mapping):
            _check_expected(found, wanted, f"{name}.")
        elif not _same_value(found, wanted):
            raise CheckpointError(
                f"incompatible checkpoint: {name} is {found!r} in the checkpoint but "
                f"{wanted!r} in this run"
            )


def _same_value(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _check_leaves(manifest: dict, template, arrays: dict[str, np.ndarray]) -> list:
    expected = describe_tree(template)
    stored = manifest["leaves"]
    if len(stored) != len(expected):
        raise CheckpointError(
            f"incompatible checkpoint: it holds {len(stored)} state arrays, this model's state "
            f"has {len(expected)} (another model, optimizer or clipping setting?)"
        )
    values = []
    for entry, want in zip(stored, expected, strict=True):
        for field in ("path", "shape", "dtype"):
            if entry.get(field) != want.get(field):
                raise CheckpointError(
                    f"incompatible checkpoint: state leaf {want['path']} has {field} "
                    f"{entry.get(field)!r} in the checkpoint but {want.get(field)!r} in this run"
                )
        array = arrays.get(entry.get("name"))
        if array is None:
            raise CheckpointError(f"checkpoint arrays lack {entry.get('name')!r} ({want['path']})")
        if list(array.shape) != entry.get("stored_shape") or str(array.dtype) != entry.get(
            "stored_dtype"
        ):
            raise CheckpointError(
                f"checkpoint array {entry.get('name')} ({want['path']}) is {array.dtype}"
                f"{list(array.shape)}, the manifest says {entry.get('stored_dtype')}"
                f"{entry.get('stored_shape')}"
            )
        if "prng_impl" in entry:
            try:
                value = jax.random.wrap_key_data(array, impl=entry["prng_impl"])
            except (TypeError, ValueError) as err:
                raise CheckpointError(
                    f"checkpoint key {want['path']} cannot be restored: {err}"
                ) from None
        else:
            value = jnp.asarray(array)
        if str(value.dtype) != want["dtype"]:
            raise CheckpointError(
                f"incompatible checkpoint: state leaf {want['path']} restores as {value.dtype}, "
                f"this run needs {want['dtype']}"
            )
        values.append(value)
    return values


def load_checkpoint(
    path: str | os.PathLike,
    template: TrainState,
    *,
    seeds: Sequence[int] | None = None,
    expect: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """Loads and verifies a checkpoint; nothing is returned unless all of it checks out.

    Args:
      path: a checkpoint folder (its newest checkpoint is read) or a manifest.
      template: the state this run would build (arrays or
        ``jax.ShapeDtypeStruct``; see :func:`state_template`). Every stored
        leaf must match its tree path, shape and dtype.
      seeds: if given, the checkpoint's seeds must equal these.
      expect: metadata the checkpoint must carry, compared recursively (for
        example ``{"dataset": {...fingerprint...}}``); extra stored keys are
        ignored.

    Returns:
      A :class:`Checkpoint`.

    Raises:
      CheckpointError: missing, unreadable, corrupt or truncated files, an
        unknown format version, or a mismatch with ``template``, ``seeds``
        or ``expect`` (the message names the first mismatch).
    """
    manifest = read_manifest(path)
    manifest_path = Path(manifest["path"])
    stored_seeds = [int(s) for s in manifest["seeds"]]
    if seeds is not None and stored_seeds != [int(s) for s in seeds]:
        raise CheckpointError(
            f"incompatible checkpoint: it holds seeds {stored_seeds} ({len(stored_seeds)} "
            f"seeds) but this run trains seeds {list(seeds)} ({len(seeds)} seeds)"
        )
    if expect:
        _check_expected(manifest.get("metadata", {}), expect, "metadata.")
    arrays = _read_arrays(manifest_path.parent, manifest)
    leaves = _check_leaves(manifest, template, arrays)
    history = {}
    for metric in manifest["history"]:
        values = arrays.get(f"history/{metric}")
        if values is None or values.ndim != 2 or values.shape[1] != len(stored_seeds):
            raise CheckpointError(f"checkpoint history {metric!r} is missing or not [epochs, K]")
        history[metric] = values
    state = jax.tree.unflatten(jax.tree.structure(template), leaves)
    epochs = _epochs(state)
    if epochs.shape[0] != len(stored_seeds) or int(epochs.max()) != manifest["epoch"]:
        raise CheckpointError(
            f"{manifest_path} is inconsistent: epoch {manifest['epoch']} and seeds "
            f"{stored_seeds}, but the state holds epochs {epochs.tolist()}"
        )
    return Checkpoint(
        path=manifest_path,
        epoch=int(manifest["epoch"]),
        seeds=tuple(stored_seeds),
        state=state,
        history=history,
        metadata=manifest.get("metadata", {}),
    )


# -- saving during training ---------------------------------------------------


class CheckpointHook:
    """An ``on_chunk`` hook for :func:`~sparsegcn.train.fit`: saves every ``every`` epochs.

    A checkpoint is written at the first compiled-call boundary at or after
    each multiple of ``every`` (choose ``epochs_per_call`` dividing
    ``every`` for exact multiples), and once more when every seed is done.

    Args:
      directory: checkpoint folder.
      seeds: the run's seeds.
      every: epochs between checkpoints (``0``: only at the end).
      keep: checkpoints to keep (``None``: all).
      metadata: stored in every manifest.
      start_epoch: the epoch training starts from (when resuming).
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        seeds: Sequence[int],
        every: int = 0,
        keep: int | None = None,
        metadata: Mapping | None = None,
        start_epoch: int = 0,
    ):
        if every < 0:
            raise ValueError(f"every must be >= 0, got {every}")
        self.directory = Path(directory)
        self.seeds = tuple(int(s) for s in seeds)
        self.every = every
        self.keep = keep
        self.metadata = dict(metadata or {})
        self._epoch = start_epoch
        self.saved: list[Path] = []

    def __call__(self, state: TrainState, history: dict) -> None:
        epoch = int(_epochs(state).max())
        due = self.every > 0 and epoch // self.every > self._epoch // self.every
        if due or bool(np.asarray(state.done).all()):
            self.save(state, history)
        self._epoch = epoch

    def save(self, state: TrainState, history: dict) -> Path:
        """Saves now, whatever the epoch."""
        path = save_checkpoint(
            self.directory,
            state,
            seeds=self.seeds,
            history=history,
            metadata=self.metadata,
            keep=self.keep,
        )
        self.saved.append(path)
        return path


def dataset_fingerprint(dataset) -> dict:
    """What identifies a dataset for a checkpoint: sizes, and a hash of labels and split.

    Args:
      dataset: a :class:`~sparsegcn.datasets.Dataset`.

    Returns:
      ``{"name", "num_nodes", "num_edges", "num_features", "num_classes",
      "labels_split_sha256"}``; the hash covers the labels and the train,
      valid and test indices, so another split of the same graph differs.
    """
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(dataset.labels, np.int64).tobytes())
    for name in sorted(dataset.split):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(dataset.split[name], np.int64).tobytes())
    return {
        "name": dataset.name,
        "num_nodes": int(dataset.num_nodes),
        "num_edges": int(dataset.num_edges),
        "num_features": int(dataset.num_features),
        "num_classes": int(dataset.num_classes),
        "labels_split_sha256": digest.hexdigest(),
    }


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Checkpoint",
    "CheckpointError",
    "CheckpointHook",
    "dataset_fingerprint",
    "describe_tree",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "read_manifest",
    "resolve_checkpoint",
    "save_checkpoint",
    "save_npy_atomic",
    "state_template",
    "write_atomic",
]

"""Output paths a command must not write: files sparsegcn keeps and reads back.

A command's outputs are checked against its own inputs
(:func:`sparsegcn.files.check_not_inputs`); a file of another checkpoint
folder or on-disk dataset is no input of the run, but replacing it leaves
that folder unreadable. :func:`check_not_kept_files` refuses those too.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from sparsegcn.files import MAX_JSON_BYTES
from sparsegcn.train.checkpoint import LOCK_NAME, folder_owns


def _sparsegcn_format(path: Path) -> str | None:
    """The ``format`` of the sparsegcn manifest at ``path`` (``"sparsegcn-graph"``,
    ``"sparsegcn.checkpoint"``, ...), or ``None`` where it is none (or unreadable)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_JSON_BYTES:
            return None
        with open(path, "rb") as f:
            if f.read(64).lstrip()[:1] != b"{":  # not a JSON object (an array, an image)
                return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    fmt = data.get("format") if isinstance(data, dict) else None
    return fmt if isinstance(fmt, str) and fmt.startswith("sparsegcn") else None


def _listed_files(manifest) -> set[str]:
    """Every ``"file"`` value in a manifest's nested objects and lists."""
    found: set[str] = set()
    stack = [manifest]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("file"), str):
                found.add(item["file"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def kept_file_owner(path: str | os.PathLike) -> str | None:
    """What ``path`` belongs to, when it is an existing file that sparsegcn keeps in a
    folder of its own and reads back: the manifest of an on-disk dataset, a
    checkpoint or a link model, a file such a dataset manifest lists beside
    it, or a checkpoint folder's arrays or lock. ``None`` otherwise."""
    if not os.path.isfile(path):
        return None
    real = Path(os.path.realpath(path))
    fmt = _sparsegcn_format(real)
    if fmt is not None:
        return f"the {fmt} manifest of {real.parent}"
    sibling = real.parent / "manifest.json"
    if _sparsegcn_format(sibling) is not None:
        with contextlib.suppress(OSError, ValueError, RecursionError):
            if real.name in _listed_files(json.loads(sibling.read_bytes())):
                return f"a file of the on-disk dataset {real.parent}"
    if folder_owns(real.name) and (real.parent / LOCK_NAME).exists():
        return f"a file of the checkpoint folder {real.parent}"
    return None


def check_not_kept_files(outputs: Mapping[str, str | os.PathLike | None]) -> None:
    """Refuses an output that would replace a file of a sparsegcn dataset, checkpoint
    or link-model folder (:func:`kept_file_owner`), inputs of this run or not:
    ``--json ck/ckpt-000030.json`` left that folder unreadable, its arrays orphaned.

    Raises:
      ValueError: naming the flag, the path and what it belongs to.
    """
    for flag, out in outputs.items():
        if out is None:
            continue
        owner = kept_file_owner(out)
        if owner is not None:
            raise ValueError(
                f"{flag} {out} would overwrite {owner}, which sparsegcn reads back "
                f"(the folder would be unreadable); write it elsewhere"
            )


__all__ = ["check_not_kept_files", "kept_file_owner"]

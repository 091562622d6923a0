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


#: What each output option writes: its file's leading bytes (after blanks, for JSON).
OUTPUT_KINDS: dict[str, tuple[str, tuple[bytes, ...]]] = {
    "--json": ("a JSON report", (b"{", b"[")),
    "--out": ("a .npy array", (b"\x93NUMPY",)),
    "--embeddings": ("a .npy array", (b"\x93NUMPY",)),
    "--plot": ("a PNG image", (b"\x89PNG\r\n\x1a\n",)),
}

_KNOWN_KINDS = (
    (b"\x93NUMPY", "a .npy array"),
    (b"PK\x03\x04", "a zip or .npz archive"),
    (b"\x89PNG", "a PNG image"),
    (b"%PDF", "a PDF"),
    (b"\x80", "a pickle"),
    (b"\x1f\x8b", "a gzip file"),
)


def other_kind(flag: str, path: str | os.PathLike) -> str | None:
    """What the existing file at ``path`` is, when it is not what ``flag`` writes
    (:data:`OUTPUT_KINDS`): ``"a .npy array"`` for ``--json preds.npy``, say.
    ``None`` when there is no such file, it is empty, it is of ``flag``'s kind,
    or ``flag`` writes no kind listed there."""
    if flag not in OUTPUT_KINDS or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None  # unreadable: check_writable speaks for it
    _, leads = OUTPUT_KINDS[flag]
    text = head.lstrip(b" \t\r\n") if flag == "--json" else head
    if not head or text.startswith(leads) or (flag == "--json" and not text):
        return None
    for lead, name in _KNOWN_KINDS:
        if head.startswith(lead):
            return name
    return "a text file" if _is_text(head) else "a binary file"


def _is_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start > len(head) - 4  # a character cut at the end of the sample
    return b"\0" not in head


def check_not_kept_files(outputs: Mapping[str, str | os.PathLike | None]) -> None:
    """Refuses an output that would replace a file of a sparsegcn dataset, checkpoint
    or link-model folder (:func:`kept_file_owner`), inputs of this run or not:
    ``--json ck/ckpt-000030.json`` left that folder unreadable, its arrays orphaned.
    Refuses too an output whose existing file is of another kind than the one the
    option writes (:func:`other_kind`): ``predict --json preds.npy`` replaced the
    predictions an earlier run had written with a summary. A file of the option's
    own kind (a report of an earlier run) is replaced, as an explicit path is.

    Raises:
      ValueError: naming the flag, the path and what it belongs to, or what it is.
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
        found = other_kind(flag, out)
        if found is not None:
            raise ValueError(
                f"{flag} {out} exists and is {found}, not {OUTPUT_KINDS[flag][0]} as {flag} "
                "writes; write it elsewhere, or remove that file first"
            )


__all__ = ["OUTPUT_KINDS", "check_not_kept_files", "kept_file_owner", "other_kind"]

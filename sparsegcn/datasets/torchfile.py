"""Reads ``torch.save`` files as NumPy, without torch and without running their pickles.

OGB ships the splits of its link datasets as ``split/<type>/{train,valid,test}.pt``:
``torch.save`` files of dicts holding tensors or NumPy arrays (ogbl-collab's
hold NumPy arrays). Two reasons not to read them with ``torch.load``:

- **Safety.** ``torch.load(weights_only=False)`` runs whatever the pickle
  names. ``weights_only=True`` is safe, but refuses NumPy arrays (their
  ``numpy.core.multiarray._reconstruct`` global is not on its list) and, on
  torch 2.6+, protocol-4 pickles (``FRAME``, opcode 149): it cannot read
  ogbl-collab's split at all.
- **Dependencies.** torch is not a dependency of sparsegcn.

:func:`read_torch_file` reads both containers ``torch.save`` has written:

- the **zip** archive (torch >= 1.6): ``<name>/data.pkl`` plus one member
  ``<name>/data/<key>`` of raw little-endian bytes per storage;
- the **legacy** stream (``_use_new_zipfile_serialization=False``): the
  pickles of the magic number, the protocol version (1001) and the system
  info, then the object's pickle, then the pickled list of storage keys, then
  each storage as an int64 element count followed by its bytes.

The object's pickle is read by a restricted unpickler that admits exactly
:data:`TORCH_GLOBALS`: NumPy's array reconstruction (for arrays pickled as
such, ``_codecs.encode``, which protocol 2 uses to spell their bytes, and
``bytes``, which it calls without arguments to spell an empty array's ``b""``:
a stand-in that returns ``b""`` and refuses any argument),
``collections.OrderedDict`` (the tensors' empty hook dict), and
torch's tensor rebuild functions and typed storage classes, which are
*not imported*: they are replaced by NumPy stand-ins, so a tensor becomes a
NumPy array of the same dtype, shape and strides (copied to C order). A
file naming any other global raises :class:`pickle.UnpicklingError` before
anything is imported; so does a tensor of a dtype NumPy lacks (bfloat16),
a sparse or quantized tensor, or a storage on a device other than the CPU
whose bytes are missing.

References:
  PyTorch, ``torch/serialization.py`` (``_save``, ``_legacy_save``,
  ``_load``, ``_legacy_load``), https://github.com/pytorch/pytorch
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from sparsegcn.datasets.unpickle import _resolve
from sparsegcn.files import (
    CorruptFileError,
    check_regular_file,
    open_regular,
    reading,
    write_atomic,
)

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
"""The first pickle of a legacy ``torch.save`` stream."""
LEGACY_PROTOCOL = 1001
"""The second pickle of a legacy stream: the format version torch writes."""
MAX_PICKLE_BYTES = 1 << 30
"""The most bytes the ``data.pkl`` member of a zip file may declare (1 GiB). A tensor's
bytes are a member of their own, bounded by its storage record; the pickle holds the
records, and the bytes of NumPy arrays saved as such (OGB's largest split arrays,
ogbl-citation2's train edges, take 486 MB). A member declaring more is refused unread,
and no more than a member declares is ever read (a deflated one could expand without
limit)."""

#: Storage class -> element dtype (little-endian, as torch writes on every platform
#: sparsegcn runs on; a ``byteorder`` member saying otherwise is refused).
STORAGE_DTYPES = {
    "DoubleStorage": np.dtype("<f8"),
    "FloatStorage": np.dtype("<f4"),
    "HalfStorage": np.dtype("<f2"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}

_NUMPY_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "scalar"),
        # Protocol 2 (torch.save's default) spells bytes as _codecs.encode(text, "latin1").
        ("_codecs", "encode"),
    }
)
_EMPTY_BYTES_GLOBALS = frozenset({("__builtin__", "bytes"), ("builtins", "bytes")})
"""How protocol 2 spells ``b""`` (an empty array's data): ``bytes()``. Resolved to a
stand-in that admits no argument, never to ``bytes`` itself (``bytes(n)`` allocates)."""
_TORCH_GLOBALS = frozenset(
    {
        ("torch._utils", "_rebuild_tensor"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("collections", "OrderedDict"),
        *(("torch", name) for name in STORAGE_DTYPES),
    }
)
TORCH_GLOBALS = _NUMPY_GLOBALS | _EMPTY_BYTES_GLOBALS | _TORCH_GLOBALS
"""Every global a file may name: ``(module, name)`` as the pickle spells it."""


class _Storage:
    """A storage's dtype and bytes (filled in after the pickle for legacy files)."""

    def __init__(self, dtype: np.dtype, numel: int):
        self.dtype, self.numel = dtype, numel
        self.data: np.ndarray | None = None


class _StorageType:
    """Stands in for ``torch.<X>Storage``: the pickle only uses it as a tag."""

    def __init__(self, name: str):
        self.name, self.dtype = name, STORAGE_DTYPES[name]


class _Tensor:
    """A tensor whose storage bytes may not be read yet (legacy files: after the pickle)."""

    def __init__(self, storage: _Storage, offset: int, size: tuple, stride: tuple):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride


def _rebuild_tensor(storage, storage_offset, size, stride, *_rest):
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError(
            f"a tensor's storage must be a storage record, got {type(storage).__name__}"
        )
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or min((*size, *stride, int(storage_offset)), default=0) < 0:
        raise pickle.UnpicklingError(
            f"a tensor has size {size}, stride {stride} and offset {storage_offset}: "
            f"not a valid strided view"
        )
    return _Tensor(storage, int(storage_offset), size, stride)


def _check_layout(tensor: _Tensor, source: str, where: str) -> None:
    """Refuses a view whose elements overlap: a stride-0 dimension (``expand``) or strides
    that revisit storage elements. Such a view holds more elements than its storage, so
    copying it out would let a file of a few bytes allocate without limit."""
    dims = sorted((s, n) for n, s in zip(tensor.size, tensor.stride, strict=True) if n > 1)
    reach = 1  # storage elements spanned by the dimensions of smaller stride
    for stride, n in dims:
        if stride < reach:
            raise CorruptFileError(
                source,
                f"tensor {where} of size {tensor.size} has strides {tensor.stride}, whose "
                f"elements overlap (a stride-0 or overlapping view); only views that "
                f"address each storage element at most once are read",
            )
        reach = stride * n
    count = int(np.prod(tensor.size, dtype=object))
    numel = tensor.storage.numel
    if count > numel:  # with no overlap, only a view past the storage's end: said plainly
        raise CorruptFileError(
            source,
            f"tensor {where} of size {tensor.size} has {count} elements, more than its "
            f"storage's {numel}",
        )


def _materialize(tensor: _Tensor, source: str, where: str) -> np.ndarray:
    """The C-ordered copy of ``tensor`` (``where`` names it in errors, e.g. ``obj['edge']``).

    Raises:
      CorruptFileError: its storage bytes are missing, it overlaps itself (see
        :func:`_check_layout`), or it reaches past its storage.
    """
    storage = tensor.storage
    if storage.data is None:
        raise CorruptFileError(source, f"the storage bytes of tensor {where} are missing")
    count = int(np.prod(tensor.size, dtype=object))
    if count == 0:
        return np.zeros(tensor.size, storage.dtype)
    _check_layout(tensor, source, where)
    last = tensor.offset + sum((n - 1) * s for n, s in zip(tensor.size, tensor.stride, strict=True))
    if last >= storage.data.shape[0]:
        raise CorruptFileError(
            source,
            f"tensor {where} of size {tensor.size} and stride {tensor.stride} at offset "
            f"{tensor.offset} reaches element {last}, past its storage of "
            f"{storage.data.shape[0]} elements",
        )
    item = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage.data[tensor.offset :],
        shape=tensor.size,
        strides=tuple(s * item for s in tensor.stride),
        writeable=False,
    )
    return np.array(view, order="C")  # ascontiguousarray would make a 0-d tensor 1-d


class _TorchUnpickler(pickle.Unpickler):
    def __init__(self, file, *, source: str, storages: dict, legacy: bool):
        super().__init__(file, encoding="latin1")
        self._source, self._storages, self._legacy = source, storages, legacy

    def find_class(self, module: str, name: str):
        if (module, name) not in TORCH_GLOBALS:
            raise pickle.UnpicklingError(
                f"{self._source}: refusing to load global {module}.{name}: a torch.save file "
                f"of tensors and NumPy arrays needs only {sorted(f'{m}.{n}' for m, n in TORCH_GLOBALS)}"
            )
        if module == "torch":
            return _StorageType(name)
        if module == "torch._utils":
            return _rebuild_tensor
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) in _EMPTY_BYTES_GLOBALS:
            return self._empty_bytes
        return _resolve(module, name)

    def _empty_bytes(self, *args, **kwargs) -> bytes:
        """Stands in for ``bytes``: ``b""`` for the argument-less call protocol 2 writes;
        any argument is refused (``bytes(10**12)`` would allocate a terabyte)."""
        if args or kwargs:
            raise pickle.UnpicklingError(
                f"{self._source}: bytes is admitted only as bytes(), protocol 2's spelling "
                f"of b'', got arguments {args!r:.80}"
            )
        return b""

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise pickle.UnpicklingError(
                f"{self._source}: unsupported persistent record {pid!r:.80} (only storages)"
            )
        expected = 6 if self._legacy else 5
        if len(pid) != expected:
            raise pickle.UnpicklingError(
                f"{self._source}: a storage record has {len(pid) - 1} fields, expected "
                f"{expected - 1}"
            )
        kind, key, _location, numel = pid[1], str(pid[2]), pid[3], pid[4]
        if not isinstance(kind, _StorageType):
            raise pickle.UnpicklingError(f"{self._source}: storage {key!r} has no storage type")
        if self._legacy and pid[5] is not None:
            raise pickle.UnpicklingError(
                f"{self._source}: storage {key!r} is a view of another storage (legacy "
                f"view metadata), which is not supported"
            )
        if key not in self._storages:
            self._storages[key] = _Storage(kind.dtype, int(numel))
        return self._storages[key]


def _convert(value, source: str, where: str = "obj"):
    """``value`` with every :class:`_Tensor` replaced by its NumPy array (dicts, lists,
    tuples walked; ``where`` spells the path to each, e.g. ``obj['edge']``)."""
    if isinstance(value, _Tensor):
        return _materialize(value, source, where)
    if isinstance(value, dict):
        return {k: _convert(v, source, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(v, source, f"{where}[{i}]") for i, v in enumerate(value))
    return value


class _Bounded(io.RawIOBase):
    """Reads at most ``limit`` bytes of ``f``, whatever the reader behind it yields."""

    def __init__(self, f, limit: int, path: Path, member: str):
        self._f, self._left, self._limit = f, limit, limit
        self._path, self._member = path, member

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._left == 0:
            if self._f.read(1):  # also makes zipfile check the CRC, at the declared end
                raise CorruptFileError(
                    self._path,
                    f"member {self._member!r} holds more than the {self._limit} bytes it declares",
                )
            return 0
        data = self._f.read(min(len(buffer), self._left))
        buffer[: len(data)] = data
        self._left -= len(data)
        return len(data)


class _Malformed(Exception):
    """A pickle that ``pickle`` itself fails on (:func:`_load`), as opposed to one
    this reader refuses (``pickle.UnpicklingError``, :class:`CorruptFileError`)."""


_PICKLE_ERRORS = (
    ValueError,  # an opcode's text argument that is no number ("garbage": 'g' reads "arbage")
    KeyError,  # a memo key never stored
    IndexError,  # a stack or memo index past its end
    TypeError,  # an allowed callable given arguments it does not take
    AttributeError,
    struct.error,
    UnicodeDecodeError,
    OverflowError,
    RecursionError,
)


def _load(unpickler: pickle.Unpickler) -> object:
    """``unpickler.load()``, its failures on malformed data raised as :class:`_Malformed`."""
    try:
        return unpickler.load()
    except CorruptFileError:
        raise
    except _PICKLE_ERRORS as err:
        raise _Malformed(f"{type(err).__name__}: {err}") from None


def _unpickle_member(path: Path, archive: zipfile.ZipFile, member: str, storages: dict) -> object:
    """Unpickles zip member ``member`` (``<name>/data.pkl``), reading at most the bytes it
    declares, and refusing one that declares more than :data:`MAX_PICKLE_BYTES` unread."""
    size = archive.getinfo(member).file_size
    if size > MAX_PICKLE_BYTES:
        raise CorruptFileError(
            path,
            f"member {member!r} declares {size} bytes, more than the {MAX_PICKLE_BYTES} a "
            f"torch.save pickle may have (MAX_PICKLE_BYTES); refused unread",
        )
    try:
        with archive.open(member) as raw, io.BufferedReader(_Bounded(raw, size, path, member)) as f:
            return _load(_TorchUnpickler(f, source=str(path), storages=storages, legacy=False))
    except _Malformed as err:
        raise CorruptFileError(path, f"member {member!r} is not a valid pickle ({err})") from None
    except MemoryError:
        # Pickle allocates a declared bytes length before reading it (see _read_legacy).
        raise CorruptFileError(
            path,
            f"member {member!r} declares a pickled length beyond memory in its {size} bytes: "
            f"a corrupt length",
        ) from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as err:
        raise CorruptFileError(
            path,
            f"member {member!r} is corrupt or shorter than its pickle "
            f"({size} bytes declared; {type(err).__name__}: {err})",
        ) from None


def _read_zip(path: Path, archive: zipfile.ZipFile) -> object:
    names = archive.namelist()
    pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
        raise CorruptFileError(
            path, f"should hold one <name>/data.pkl (torch.save's layout), got {names[:8]}"
        )
    prefix = pickles[0][: -len("data.pkl")]
    if f"{prefix}byteorder" in names:
        with archive.open(f"{prefix}byteorder") as f:  # "little" or "big": never read whole
            order = f.read(16).decode("ascii", "replace").strip()
        if order != "little":
            raise CorruptFileError(path, f"stores {order!r}-endian tensors; only 'little' is read")
    storages: dict[str, _Storage] = {}
    loaded = _unpickle_member(path, archive, pickles[0], storages)
    for key, storage in storages.items():
        member = f"{prefix}data/{key}"
        if member not in names:
            raise CorruptFileError(path, f"storage {key!r} has no member {member!r}")
        need = storage.numel * storage.dtype.itemsize
        size = archive.getinfo(member).file_size
        if size != need:  # torch writes exactly the storage; a larger member may be a bomb
            raise CorruptFileError(
                path, f"member {member!r} holds {size} bytes, its storage needs {need}"
            )
        with archive.open(member) as f:  # reads at most file_size bytes; a lie is an error
            data = f.read(need)
        if len(data) != need:
            raise CorruptFileError(
                path, f"member {member!r} ends after {len(data)} of its {need} bytes"
            )
        storage.data = np.frombuffer(data, storage.dtype, count=storage.numel)
    return _convert(loaded, str(path))


def _read_legacy(path: Path, f) -> object:
    def unpickle(what: str, storages: dict):
        try:
            return _load(_TorchUnpickler(f, source=str(path), storages=storages, legacy=True))
        except _Malformed as err:
            raise CorruptFileError(
                path,
                f"not a torch.save file: the {what} is not a valid pickle ({err})",
            ) from None
        except MemoryError:
            # A legacy stream's pickles hold no tensor data (the storages follow them), so
            # running out of memory in one means a record's length is corrupt: pickle
            # allocates a declared bytes length before reading it.
            raise CorruptFileError(
                path,
                f"the {what} declares more bytes than memory holds "
                f"({os.fstat(f.fileno()).st_size} bytes on disk): a corrupt length",
            ) from None

    def plain(what: str):
        try:
            return unpickle(what, {})
        except (EOFError, pickle.UnpicklingError) as err:
            raise CorruptFileError(path, f"the {what} cannot be read ({err})") from err

    magic = plain("header (magic number)")
    if magic != LEGACY_MAGIC:
        raise CorruptFileError(
            path, "not a torch.save file: neither a zip archive nor a legacy stream (magic number)"
        )
    protocol = plain("header (protocol version)")
    if protocol != LEGACY_PROTOCOL:
        raise CorruptFileError(path, f"legacy format version {protocol!r}, expected 1001")
    info = plain("header (system info)")
    if isinstance(info, dict) and info.get("little_endian") is False:
        raise CorruptFileError(path, "stores big-endian tensors; only little-endian is read")
    storages: dict[str, _Storage] = {}
    loaded = unpickle("object", storages)
    keys = plain("storage key list")
    if not isinstance(keys, list) or set(map(str, keys)) != set(storages):
        raise CorruptFileError(
            path, f"the storage key list {keys!r:.80} does not match the object's storages"
        )
    for key in map(str, keys):
        storage = storages[key]
        head = f.read(8)
        if len(head) != 8:
            raise CorruptFileError(path, f"truncated before storage {key!r}")
        (numel,) = struct.unpack("<q", head)
        if numel != storage.numel:
            raise CorruptFileError(
                path, f"storage {key!r} holds {numel} elements, its record says {storage.numel}"
            )
        need = numel * storage.dtype.itemsize
        left = os.fstat(f.fileno()).st_size - f.tell()
        if need > left:  # before reading: f.read(need) would allocate need bytes first
            raise CorruptFileError(
                path, f"truncated in storage {key!r} ({max(left, 0)} of {need} bytes)"
            )
        data = f.read(need)
        if len(data) != need:
            raise CorruptFileError(
                path, f"truncated in storage {key!r} ({len(data)} of {need} bytes)"
            )
        storage.data = np.frombuffer(data, storage.dtype)
    return _convert(loaded, str(path))


def read_torch_file(path: str | os.PathLike) -> object:
    """The object a ``torch.save`` file holds, tensors as NumPy arrays.

    Args:
      path: a ``.pt`` file written by ``torch.save`` (zip or legacy format).

    Returns:
      The saved object (dicts, lists, tuples, numbers, strings), each tensor
      replaced by a C-ordered NumPy array of its dtype and shape, NumPy
      arrays as they were saved.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      pickle.UnpicklingError: the pickle names a global outside
        :data:`TORCH_GLOBALS` (nothing of it is imported), or holds a record
        this reader does not support; the message names the file.
      CorruptFileError: not a ``torch.save`` file, truncated, or inconsistent:
        a storage whose bytes differ from its record's element count (checked
        before they are read: a zip member is read only up to its storage's
        size, a legacy stream's storage only if the file holds that many bytes
        more), or a tensor reaching past its storage or overlapping itself (a
        stride-0 ``expand`` view, which would be copied out at its full size),
        or a zip whose ``data.pkl`` declares more than :data:`MAX_PICKLE_BYTES`
        (refused unread; no member is read past the size it declares). The
        message names the file, and the tensor (``obj['edge']``) or the zip
        member where one is at fault.
    """
    path = check_regular_file(path)
    with reading(path):
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                return _read_zip(path, archive)
        with open_regular(path) as f:
            return _read_legacy(path, f)


def _numpy_only(value, where: str = "obj") -> None:
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError(f"{where} is an object array; only numeric arrays are written")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where} has a key {k!r} that is not a string")
            _numpy_only(v, f"{where}[{k!r}]")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _numpy_only(v, f"{where}[{i}]")
        return
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}; only NumPy arrays, dicts, lists, numbers"
    )


def write_torch_file(obj, path: str | os.PathLike) -> Path:
    """Writes ``obj`` (dicts, lists, numbers, NumPy arrays) as a legacy ``torch.save`` stream.

    The format OGB's ogbl-collab split files use: the header pickles
    (magic number, version 1001, system info), the object pickled with
    protocol 2 (NumPy arrays as NumPy pickles them, so no tensor storages),
    and an empty storage list. ``torch.load(path, weights_only=False)`` and
    :func:`read_torch_file` read it back; torch is not needed to write it.
    Written atomically (:func:`~sparsegcn.files.write_atomic`).

    Raises:
      TypeError: ``obj`` holds something other than the types above.
    """
    _numpy_only(obj)
    info = {
        "protocol_version": LEGACY_PROTOCOL,
        "little_endian": True,
        "type_sizes": {"short": 2, "int": 4, "long": 4},
    }

    no_storages: list[str] = []
    items: tuple[object, ...] = (LEGACY_MAGIC, LEGACY_PROTOCOL, info, obj, no_storages)

    def write(f) -> None:
        for item in items:
            pickle.dump(item, f, protocol=2)

    return write_atomic(path, write)


__all__ = [
    "LEGACY_MAGIC",
    "LEGACY_PROTOCOL",
    "MAX_PICKLE_BYTES",
    "STORAGE_DTYPES",
    "TORCH_GLOBALS",
    "read_torch_file",
    "write_torch_file",
]

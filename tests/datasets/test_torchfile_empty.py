"""Empty arrays in torch.save files: protocol 2 spells their ``b""`` as ``bytes()``, which
read_torch_file admits without admitting ``bytes`` itself. Runs without torch, except the
check against a file torch.save wrote."""

from __future__ import annotations

import importlib.util
import io
import pickle
import zipfile

import numpy as np
import pytest

from sparsegcn.datasets.torchfile import (
    LEGACY_MAGIC,
    LEGACY_PROTOCOL,
    read_torch_file,
    write_torch_file,
)

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32, np.float16, np.bool_])
@pytest.mark.parametrize("shape", [(0,), (0, 2), (3, 0), (0, 0, 4)])
def test_empty_arrays_round_trip(tmp_path, dtype, shape):
    obj = {"empty": np.zeros(shape, dtype), "full": np.array([[1, 2]], np.int64)}
    got = read_torch_file(write_torch_file(obj, tmp_path / "e.pt"))
    assert got["empty"].dtype == np.dtype(dtype) and got["empty"].shape == shape
    np.testing.assert_array_equal(got["full"], [[1, 2]])


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.skipif(not HAS_TORCH, reason="needs torch to write the file")
def test_empty_arrays_torch_save_wrote(tmp_path, legacy):
    import torch

    obj = {"edge_neg": np.zeros((0, 2), np.int64), "tensor": torch.zeros((0, 3))}
    path = tmp_path / "s.pt"
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy, pickle_protocol=2)
    got = read_torch_file(path)
    want = torch.load(path, weights_only=False)  # the oracle, on a file written here
    assert got["edge_neg"].dtype == want["edge_neg"].dtype == np.int64
    assert got["edge_neg"].shape == want["edge_neg"].shape == (0, 2)
    assert got["tensor"].dtype == np.float32 and got["tensor"].shape == (0, 3)


def _legacy_stream(payload: bytes) -> bytes:
    """A legacy torch.save stream whose object pickle is ``payload``."""
    stream = io.BytesIO()
    for header in (LEGACY_MAGIC, LEGACY_PROTOCOL, {"little_endian": True}):
        pickle.dump(header, stream, protocol=2)
    stream.write(payload)
    pickle.dump([], stream, protocol=2)
    return stream.getvalue()


# Hand-written protocol-2 pickles: GLOBAL, arguments, REDUCE, STOP.
_BYTES_WITH_ARGUMENT = [
    b"c__builtin__\nbytes\n(J\x00\x00\x00\x40tR.",  # bytes(2**30): a gigabyte of zeros
    b"cbuiltins\nbytes\n(X\x03\x00\x00\x00abcX\x05\x00\x00\x00asciitR.",
    b"cbuiltins\nbytes\n(]tR.",  # bytes([])
]
_OTHER_GLOBALS = [
    (b"c__builtin__\neval\n(X\x02\x00\x00\x001+tR.", "__builtin__.eval"),
    (b"cbuiltins\nbytearray\n)R.", "builtins.bytearray"),
    (b"cos\nsystem\n(X\x04\x00\x00\x00truetR.", "os.system"),
]


@pytest.mark.parametrize("container", ["zip", "legacy"])
@pytest.mark.parametrize("payload", _BYTES_WITH_ARGUMENT)
def test_bytes_with_any_argument_is_refused(tmp_path, container, payload):
    path = tmp_path / "evil.pt"
    if container == "zip":
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("evil/data.pkl", payload)
    else:
        path.write_bytes(_legacy_stream(payload))
    with pytest.raises(pickle.UnpicklingError, match=r"evil\.pt: bytes is admitted only as"):
        read_torch_file(path)


@pytest.mark.parametrize(("payload", "name"), _OTHER_GLOBALS)
def test_other_globals_are_still_refused(tmp_path, payload, name):
    path = tmp_path / "evil.pt"
    path.write_bytes(_legacy_stream(payload))
    with pytest.raises(pickle.UnpicklingError, match=rf"refusing to load global {name}"):
        read_torch_file(path)


def test_bytes_without_arguments_is_empty_bytes(tmp_path):
    for module in (b"__builtin__", b"builtins"):
        path = tmp_path / "b.pt"
        path.write_bytes(_legacy_stream(b"(X\x01\x00\x00\x00kc" + module + b"\nbytes\n)Rd."))
        assert read_torch_file(path) == {"k": b""}

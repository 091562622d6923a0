"""read_torch_file: torch.save files (zip and legacy) read as NumPy, without running pickles."""

from __future__ import annotations

import io
import os
import pickle
import zipfile

import numpy as np
import pytest

from sparsegcn.datasets.torchfile import read_torch_file
from sparsegcn.files import CorruptFileError

torch = pytest.importorskip("torch")


def _save(obj, path, *, legacy: bool, protocol: int = 2):
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy, pickle_protocol=protocol)
    return path


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("protocol", [2, 4])
def test_tensors_and_arrays_match_torch_load(tmp_path, legacy, protocol):
    base = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    obj = {
        "edge": torch.tensor([[0, 1], [2, 3]]),
        "weight": torch.tensor([1.5, -2.0], dtype=torch.float32),
        "transposed": base.t(),  # strides (1, 4): a non-contiguous view
        "slice": base[1:, 2:],  # an offset into a shared storage
        "int32": torch.tensor([7, 8, 9], dtype=torch.int32),
        "flags": torch.tensor([True, False]),
        "empty": torch.zeros((0, 2), dtype=torch.int64),
        "scalar": torch.tensor(3.5),  # 0-d: once read back as shape (1,)
        "numpy": np.array([[4, 5]], dtype=np.int64),
        "nested": [torch.tensor([1.0], dtype=torch.float64), (3, "x")],
    }
    path = _save(obj, tmp_path / "s.pt", legacy=legacy, protocol=protocol)
    got = read_torch_file(path)
    want = torch.load(path, weights_only=False)  # the oracle, on a file we wrote ourselves
    assert set(got) == set(want)
    for key in ("edge", "weight", "transposed", "slice", "int32", "flags", "empty", "scalar"):
        expected = want[key].numpy()
        assert got[key].dtype == expected.dtype, key
        assert got[key].shape == expected.shape, key
        np.testing.assert_array_equal(got[key], expected, err_msg=key)
        assert got[key].flags.c_contiguous
    np.testing.assert_array_equal(got["slice"], [[6, 7], [10, 11]])  # by hand
    np.testing.assert_array_equal(got["numpy"], [[4, 5]])
    np.testing.assert_array_equal(got["nested"][0], [1.0])
    assert got["nested"][1] == (3, "x")


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_refuses_foreign_globals_before_running_them(tmp_path):
    marker = tmp_path / "ran"
    payload = pickle.dumps({"edge": _Evil(marker)}, protocol=2)
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("evil/data.pkl", payload)
    with pytest.raises(pickle.UnpicklingError, match=r"evil\.pt: refusing to load global .*system"):
        read_torch_file(path)
    assert not marker.exists()
    # The same payload as a legacy stream is refused too.
    stream = io.BytesIO()
    for header in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
        pickle.dump(header, stream, protocol=2)
    stream.write(payload)
    legacy = tmp_path / "evil_legacy.pt"
    legacy.write_bytes(stream.getvalue())
    with pytest.raises(pickle.UnpicklingError, match="refusing to load global"):
        read_torch_file(legacy)
    assert not marker.exists()


def test_not_a_torch_file_and_truncation(tmp_path):
    text = tmp_path / "plain.pt"
    text.write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(CorruptFileError, match=r"plain\.pt: not a torch\.save file"):
        read_torch_file(text)
    full = _save({"x": torch.arange(100)}, tmp_path / "full.pt", legacy=True)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(full.read_bytes()[:-40])
    with pytest.raises(CorruptFileError, match=r"cut\.pt: truncated in storage"):
        read_torch_file(cut)
    with pytest.raises(FileNotFoundError):
        read_torch_file(tmp_path / "missing.pt")


def test_tensor_past_its_storage_is_refused(tmp_path):
    path = _save({"x": torch.arange(6)}, tmp_path / "x.pt", legacy=False)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    storage = next(n for n in members if n.endswith("/data/0"))
    members[storage] = members[storage][:16]  # 2 of the 6 int64s
    bad = tmp_path / "short.pt"
    with zipfile.ZipFile(bad, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    with pytest.raises(CorruptFileError, match=r"short\.pt: member .*data/0.* holds 16 bytes"):
        read_torch_file(bad)


def test_write_torch_file_round_trip(tmp_path):
    from sparsegcn.datasets.torchfile import write_torch_file

    obj = {"edge": np.array([[0, 1], [2, 3]]), "year": np.array([2018], np.int64), "k": [1, 2.5]}
    path = write_torch_file(obj, tmp_path / "w.pt")
    for loaded in (read_torch_file(path), torch.load(path, weights_only=False)):
        np.testing.assert_array_equal(loaded["edge"], obj["edge"])
        np.testing.assert_array_equal(loaded["year"], obj["year"])
        assert loaded["k"] == [1, 2.5]
    with pytest.raises(TypeError, match=r"obj\['t'\] is a Tensor"):
        write_torch_file({"t": torch.zeros(2)}, tmp_path / "t.pt")
    assert not (tmp_path / "t.pt").exists()


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize(
    ("make", "shown"),
    [
        (lambda: torch.zeros(1).expand(10**6), r"size \(1000000,\) has strides \(0,\)"),
        (lambda: torch.arange(4).as_strided((3, 2), (1, 1)), r"size \(3, 2\) has strides \(1, 1\)"),
    ],
    ids=["stride-0", "overlapping"],
)
def test_a_view_overlapping_its_storage_is_refused_naming_the_tensor(tmp_path, legacy, make, shown):
    # A stride-0 view of one element would be copied out at its full size: a
    # 1 KB file could ask for any amount of memory.
    path = _save({"edge": make()}, tmp_path / "v.pt", legacy=legacy)
    with pytest.raises(CorruptFileError, match=rf"v\.pt: tensor obj\['edge'\] of {shown}.*overlap"):
        read_torch_file(path)


def test_a_zip_storage_member_larger_than_its_storage_is_refused(tmp_path):
    path = _save({"x": torch.arange(4)}, tmp_path / "x.pt", legacy=False)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    storage = next(n for n in members if n.endswith("/data/0"))
    members[storage] += bytes(1 << 20)  # deflates to a few KB; read whole it would be 1 MB
    bad = tmp_path / "long.pt"
    with zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    with pytest.raises(CorruptFileError, match=r"long\.pt: member .*data/0.* holds 1048608 bytes"):
        read_torch_file(bad)


def test_a_legacy_storage_longer_than_the_file_is_refused_before_reading(tmp_path):
    # The record and the count claim 2**40 float64s (8 TiB) and the file ends there:
    # a read of the claimed size would fail to allocate (a bare MemoryError).
    storage = object()

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if obj is storage:
                return ("storage", torch.DoubleStorage, "0", "cpu", 2**40, None)
            return None

    class Tensor:
        def __reduce__(self):
            return (torch._utils._rebuild_tensor_v2, (storage, 0, (4,), (1,), False, {}))

    stream = io.BytesIO()
    for header in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
        pickle.dump(header, stream, protocol=2)
    Pickler(stream, protocol=2).dump(Tensor())
    pickle.dump(["0"], stream, protocol=2)
    stream.write((2**40).to_bytes(8, "little"))
    path = tmp_path / "claim.pt"
    path.write_bytes(stream.getvalue())
    with pytest.raises(CorruptFileError, match=r"claim\.pt: truncated in storage '0' \(0 of 8796"):
        read_torch_file(path)


def test_a_pickled_length_beyond_memory_is_a_corrupt_file(tmp_path):
    # A legacy stream whose object pickle declares a 2**40-byte bytes record (BINBYTES8):
    # pickle allocates the length before reading it, and the bare MemoryError said nothing.
    stream = io.BytesIO()
    for header in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
        pickle.dump(header, stream, protocol=2)
    stream.write(b"\x80\x04\x8e" + (2**40).to_bytes(8, "little") + b"abc")  # PROTO 4, BINBYTES8
    path = tmp_path / "length.pt"
    path.write_bytes(stream.getvalue())
    # (Where memory is overcommitted the allocation succeeds and the read comes up short.)
    with pytest.raises((CorruptFileError, pickle.UnpicklingError), match=r"length\.pt|truncated"):
        read_torch_file(path)


def _zip_with_pickle(path, payload: bytes, *, declared: int | None = None, deflate=False):
    """A zip holding ``bomb/data.pkl`` = ``payload``, its central directory claiming
    ``declared`` uncompressed bytes (the size zipfile reports and reads up to)."""
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as zf:
        zf.writestr("bomb/data.pkl", payload)
    data = bytearray(path.read_bytes())
    if declared is not None:
        entry = data.index(b"PK\x01\x02")  # the central directory record
        data[entry + 24 : entry + 28] = declared.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return path


def test_a_zip_pickle_member_declaring_gigabytes_is_refused_unread(tmp_path):
    # A valid 20-byte pickle whose member claims 4 GB: reading it whole (or letting a
    # deflate bomb of that size stream into the unpickler) is refused up front.
    path = _zip_with_pickle(
        tmp_path / "big.pt", pickle.dumps({"a": 1}, protocol=2), declared=0xF0000000
    )
    with pytest.raises(
        CorruptFileError,
        match=r"big\.pt: member 'bomb/data\.pkl' declares 4026531840 bytes, more than the "
        r"1073741824",
    ):
        read_torch_file(path)


def test_a_zip_pickle_member_is_read_no_further_than_it_declares(tmp_path):
    # 2 MiB of pickled bytes deflated to a few KB under a header claiming 1000 bytes:
    # the unpickler asks for 2 MiB, and gets the declared 1000 at most, as a corrupt file.
    payload = pickle.dumps(bytes(2 << 20), protocol=4)
    path = _zip_with_pickle(tmp_path / "liar.pt", payload, declared=1000, deflate=True)
    assert path.stat().st_size < 10_000
    with pytest.raises(
        CorruptFileError,
        match=r"liar\.pt: member 'bomb/data\.pkl' is corrupt or shorter than its pickle "
        r"\(1000 bytes declared; BadZipFile: Bad CRC-32",
    ):
        read_torch_file(path)


def test_a_zip_pickle_length_beyond_memory_is_a_corrupt_file(tmp_path):
    # BINBYTES8 declaring 2**40 bytes: pickle allocates the length before reading it.
    payload = b"\x80\x04\x8e" + (2**40).to_bytes(8, "little") + b"abc"
    path = _zip_with_pickle(tmp_path / "length.pt", payload)
    # (Where memory is overcommitted the allocation succeeds and the read comes up short.)
    with pytest.raises((CorruptFileError, pickle.UnpicklingError), match=r"length\.pt|truncated"):
        read_torch_file(path)


def test_a_malformed_pickle_is_a_corrupt_file_naming_it(tmp_path):
    # Before: "invalid literal for int() with base 10: 'arbage\n'", no file named
    # ('g' is pickle's GET, whose text argument "arbage" is no memo index).
    legacy = tmp_path / "test.pt"
    legacy.write_bytes(b"garbage\n")
    with pytest.raises(CorruptFileError, match=r"test\.pt: not a torch\.save file.*ValueError"):
        read_torch_file(legacy)
    zipped = _zip_with_pickle(tmp_path / "zipped.pt", b"garbage\n")
    with pytest.raises(CorruptFileError, match=r"zipped\.pt: member .* not a valid pickle"):
        read_torch_file(zipped)

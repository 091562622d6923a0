"""sparsegcn.files.read_npz and load_npy: a file's headers are checked before its data is read.

A 100-byte ``.npy`` header may declare ``10**13`` floats, and a few megabytes
of deflated zeros may expand to gigabytes: neither may allocate more than
the file can hold, and each is a :class:`CorruptFileError` naming the file
(and the member), which the CLI reports with exit status 2.
"""

from __future__ import annotations

import io
import random
import tracemalloc
import zipfile

import numpy as np
import pytest

from sparsegcn.cli import exit_status
from sparsegcn.files import CorruptFileError, NpySpec, load_npy, read_npz


def npy_header(shape, dtype="<f8") -> bytes:
    buffer = io.BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def add_zeros(archive: zipfile.ZipFile, name: str, nbytes: int) -> None:
    """A member holding ``nbytes`` zero bytes of ``uint8`` data, deflated about 1000:1."""
    with archive.open(name, "w", force_zip64=True) as f:
        f.write(npy_header((nbytes,), "|u1"))
        chunk = bytes(1 << 20)
        for start in range(0, nbytes, len(chunk)):
            f.write(chunk[: nbytes - start])


@pytest.fixture
def arrays():
    return {
        "x": np.arange(12, dtype=np.float32).reshape(3, 4),
        "f": np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
        "key": np.array("k" * 64),
        "empty": np.zeros((0, 5), np.float64),
    }


def test_read_npz_returns_exactly_the_expected_arrays(tmp_path, arrays):
    path = tmp_path / "a.npz"
    np.savez(path, **arrays)
    specs = {
        "x": NpySpec((3, None), "float32"),
        "f": None,
        "key": NpySpec((), "U64"),
        "empty": NpySpec((None, 5)),
    }
    read = read_npz(path, specs)
    assert list(read) == list(specs)
    for name, array in read.items():
        np.testing.assert_array_equal(array, arrays[name])
        assert array.dtype == arrays[name].dtype and array.flags.writeable
    assert read_npz(path, specs, data=path.read_bytes()).keys() == specs.keys()
    squeezed = tmp_path / "c.npz"  # compressed: needs a bound larger than the file
    np.savez_compressed(squeezed, x=np.zeros((100, 100), np.float32))
    with pytest.raises(CorruptFileError, match="more than the arrays can hold"):
        read_npz(squeezed, {"x": None})
    assert read_npz(squeezed, {"x": None}, max_bytes=40_000)["x"].shape == (100, 100)


def test_members_not_expected_missing_or_of_another_shape_are_refused(tmp_path, arrays):
    path = tmp_path / "a.npz"
    np.savez(path, **arrays)
    names = dict.fromkeys(arrays)
    with pytest.raises(CorruptFileError, match=r"a\.npz: member empty\.npy is not one of the"):
        read_npz(path, {"x": None, "f": None, "key": None})
    with pytest.raises(CorruptFileError, match=r"lacks member other\.npy of the cache expected"):
        read_npz(path, dict(names, other=None), what="cache")
    with pytest.raises(
        CorruptFileError,
        match=r"member x\.npy declares float32\[3, 4\], the arrays expected "
        r"float32\[4, \?\]",
    ):
        read_npz(path, dict(names, x=NpySpec((4, None), "float32")))
    with pytest.raises(CorruptFileError, match=r"member x\.npy declares float32\[3, 4\].*float64"):
        read_npz(path, dict(names, x=NpySpec(None, "float64")))
    twice = tmp_path / "twice.npz"
    with zipfile.ZipFile(twice, "w") as archive, pytest.warns(UserWarning, match="Duplicate"):
        archive.writestr("x.npy", npy_header((0,)))
        archive.writestr("x.npy", npy_header((0,)))
    with pytest.raises(CorruptFileError, match=r"member x\.npy appears twice"):
        read_npz(twice, {"x": None})
    bare = tmp_path / "bare.npz"
    np.save(bare.with_suffix(".npy"), arrays["x"])
    bare.with_suffix(".npy").rename(bare)
    with pytest.raises(CorruptFileError, match=r"bare\.npz: not an \.npz file of arrays"):
        read_npz(bare, {"x": None})


def test_a_header_declaring_a_huge_shape_is_refused_unallocated(tmp_path):
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", npy_header((10**13,)))  # 72.8 TiB in 128 bytes
    with pytest.raises(
        CorruptFileError,
        match=r"huge\.npz: member x\.npy declares float64\[10000000000000\] \(80000000000000 "
        r"bytes of data\) but holds 0 bytes after its header",
    ):
        read_npz(path, {"x": None})
    with pytest.raises(CorruptFileError, match=r"the arrays expected float64\[10\]"):
        read_npz(path, {"x": NpySpec((10,), "float64")})


def test_a_deflate_bomb_is_refused_before_it_is_decompressed(tmp_path):
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        add_zeros(archive, "x.npy", 1 << 26)  # 64 MiB in about 65 kB
    tracemalloc.start()
    try:
        with pytest.raises(CorruptFileError, match=r"members declare more than \d+ bytes of data"):
            read_npz(path, {"x": None})
        with pytest.raises(CorruptFileError, match=r"declares uint8\[67108864\], the arrays"):
            read_npz(path, {"x": NpySpec((1000,), "uint8")})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak} bytes allocated to refuse a 64 MiB member"


def test_damaged_archives_are_corrupt_file_errors_and_nothing_else(tmp_path, arrays):
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    good, names, rng = buffer.getvalue(), dict.fromkeys(arrays), random.Random(0)
    flipped = bytearray(good)
    flipped[good.index(arrays["x"].tobytes()) + 5] ^= 1
    with pytest.raises(CorruptFileError, match=r"member x\.npy: corrupt or truncated \(Bad CRC"):
        read_npz(tmp_path / "a.npz", names, data=bytes(flipped))
    for trial in range(400):
        damaged = bytearray(good)
        if trial % 2:
            damaged = damaged[: rng.randrange(len(good))]
        else:
            damaged[rng.randrange(len(good))] = rng.randrange(256)
        try:
            read_npz(tmp_path / "a.npz", names, data=bytes(damaged))
        except CorruptFileError as err:
            assert exit_status(err) == 2


@pytest.mark.parametrize(
    ("shape", "data", "cause"),
    [
        ((10**12, 2), b"", r"truncated: its header declares int64\[1000000000000, 2\]"),
        ((2**31, 2), bytes(16), r"truncated: .* the file holds 16 bytes after its 128-byte"),
        ((2, 2), bytes(40), r"longer than its header declares: .*\(32 bytes of data\)"),
    ],
    ids=["16-TB-in-80-bytes", "32-GB-in-144-bytes", "trailing-bytes"],
)
def test_load_npy_refuses_a_header_the_file_size_does_not_match(tmp_path, shape, data, cause):
    # --pairs: an 80-byte file declaring 16 TB was read as "out of memory", exit status 1.
    path = tmp_path / "pairs.npy"
    path.write_bytes(npy_header(shape, "<i8") + data)
    for mode in (None, "r"):
        with pytest.raises(CorruptFileError, match=rf"pairs\.npy: {cause}") as caught:
            load_npy(path, mmap_mode=mode)
        assert exit_status(caught.value) == 2
    np.save(path, np.arange(4).reshape(2, 2))
    np.testing.assert_array_equal(load_npy(path), np.arange(4).reshape(2, 2))

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
        "numpy": np.array([[4, 5]], dtype=np.int64),
        "nested": [torch.tensor([1.0], dtype=torch.float64), (3, "x")],
    }
    path = _save(obj, tmp_path / "s.pt", legacy=legacy, protocol=protocol)
    got = read_torch_file(path)
    want = torch.load(path, weights_only=False)  # the oracle, on a file we wrote ourselves
    assert set(got) == set(want)
    for key in ("edge", "weight", "transposed", "slice", "int32", "flags", "empty"):
        expected = want[key].numpy()
        assert got[key].dtype == expected.dtype, key
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

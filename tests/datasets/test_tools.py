"""The dataset tools (``python -m sparsegcn.datasets.to_disk``, ``synthetic_disk``,
``convert``): bad input is one line and exit 2 before any work, as in ``sparsegcn``."""

import pytest

from sparsegcn.cli import run_tool
from sparsegcn.datasets import convert, synthetic_disk, to_disk
from sparsegcn.datasets.links import describe_links


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("tmp_dir", ["", "missing/sub", "a-file"])
def test_a_tmp_dir_that_is_no_folder_is_refused_and_never_created(tmp_path, capsys, tmp_dir):
    # It was created (mkdir -p) and left behind, or named the errno of a file in its place.
    (tmp_path / "a-file").write_text("x")
    given = str(tmp_path / tmp_dir) if tmp_dir else ""
    out = tmp_path / "out"
    argv = ["tiny", "--out", str(out), "--tmp-dir", given, "--no-progress"]
    assert synthetic_disk.main(argv) == 2
    assert "--tmp-dir" in error_line(capsys)
    argv = ["ogbn-arxiv", "--root", str(tmp_path), "--out", str(out), "--tmp-dir", given]
    assert convert.main(argv) == 2
    assert "--tmp-dir" in error_line(capsys)
    assert not out.exists() and not (tmp_path / "missing").exists()


def test_an_empty_out_is_refused_by_its_flag(tmp_path, capsys):
    # --out "" meant the current folder: ". exists and is not empty".
    assert to_disk.main(["synthetic:tiny", "--out", "", "--no-progress"]) == 2
    assert error_line(capsys) == (
        "python -m sparsegcn.datasets.to_disk: error: --out '' is empty: give a path, or "
        "leave the option out"
    )
    assert synthetic_disk.main(["tiny", "--out", ""]) == 2
    assert "--out '' is empty" in error_line(capsys)


def test_a_seed_that_changes_nothing_is_refused(tmp_path, capsys):
    # to_disk tu:MUTAG --seed 3 wrote MUTAG as it is; info --seed -5 described collab.
    argv = ["tu:MUTAG", "--root", str(tmp_path), "--out", str(tmp_path / "o"), "--seed", "3"]
    assert to_disk.main(argv) == 2
    assert "seed=3 applies only to generated graph datasets" in error_line(capsys)
    with pytest.raises(ValueError, match="seed must be >= 0, got -5"):
        describe_links("synthetic:collab", seed=-5)


def test_run_tool_gives_one_line_an_exit_status_and_a_traceback_on_request(capsys):
    def interrupted():
        raise KeyboardInterrupt

    def broken():
        raise ValueError("bad value 7")

    assert run_tool("tool", lambda: "done") == 0 and capsys.readouterr().out == "done\n"
    assert run_tool("tool", interrupted) == 130
    assert error_line(capsys) == "tool: interrupted"
    assert run_tool("tool", broken) == 2
    assert error_line(capsys) == "tool: error: bad value 7"
    with pytest.raises(ValueError, match="bad value 7"):
        run_tool("tool", broken, debug=True)


def snapshot(folder) -> dict:
    """Every entry under ``folder`` with its bytes (``None`` for a folder)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


def test_a_tmp_dir_in_the_out_folder_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    # convert bucketed every edge into DIR/.out.edges-..., then refused --out as not a
    # dataset folder because of them; synthetic_disk's pairs there outlive a kill -9.
    out = tmp_path / "out"
    assert synthetic_disk.main(["tiny", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    (tmp_path / "ogbn_arxiv").mkdir()  # never read: refused first
    before = snapshot(tmp_path)

    def no_work(*args, **kwargs):
        raise AssertionError("the work started")

    monkeypatch.setattr(convert, "_num_nodes", no_work)
    monkeypatch.setattr(synthetic_disk.sbm, "block_model", no_work)
    for tmp_dir in (out, tmp_path / "link-to-out"):
        if tmp_dir.name == "link-to-out":
            tmp_dir.symlink_to(out)
            before = snapshot(tmp_path)
        flags = ["--out", str(out), "--overwrite", "--tmp-dir", str(tmp_dir), "--no-progress"]
        assert convert.main(["ogbn-arxiv", "--root", str(tmp_path), *flags]) == 2
        line = error_line(capsys)
        assert "--tmp-dir" in line and "is the folder out (--out)" in line, line
        assert synthetic_disk.main(["tiny", *flags]) == 2
        assert "is the folder out (--out)" in error_line(capsys)
        assert snapshot(tmp_path) == before
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"tmp_dir \(--tmp-dir\) .*sub' lies inside the folder"):
        synthetic_disk.generate_to_disk("tiny", tmp_path / "empty", tmp_dir=tmp_path / "empty/sub")
    # Beside --out, or --out inside the work folder: fine.
    monkeypatch.undo()
    synthetic_disk.generate_to_disk("tiny", tmp_path / "work" / "o", tmp_dir=tmp_path)
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["o"]


def test_an_input_made_inside_out_is_refused_before_any_work(tmp_path, capsys):
    # to_disk synthetic:arxiv --root X --out X wrote its cache X/synthetic into the
    # dataset folder X, then refused X as "not a sparsegcn dataset folder": X polluted.
    x = tmp_path / "X"
    assert to_disk.main(["synthetic:tiny", "--out", str(x), "--no-progress"]) == 0
    capsys.readouterr()
    before = snapshot(tmp_path)
    for root, out in ((x, x), (tmp_path / "Y", tmp_path / "Y"), (x / "r", x)):
        argv = ["synthetic:arxiv", "--scale", "0.001", "--root", str(root), "--out", str(out)]
        assert to_disk.main([*argv, "--overwrite", "--no-progress"]) == 2
        assert "synthetic lies inside --out" in error_line(capsys)
        assert snapshot(tmp_path) == before


def test_a_mount_point_as_out_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    # Built beside it, the dataset could not be renamed over it: EBUSY at the very end.
    import os

    mount = tmp_path / "mnt"
    mount.mkdir()
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: str(p) == str(mount) or real(p))
    for tool, name in ((synthetic_disk, "tiny"), (to_disk, "synthetic:tiny")):
        assert tool.main([name, "--out", str(mount), "--no-progress"]) == 2
        assert "mnt: it is a mount point" in error_line(capsys)
    assert convert.main(["ogbn-arxiv", "--root", str(tmp_path), "--out", str(mount)]) == 2
    assert "give a folder inside it" in error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mnt"] and not any(mount.iterdir())
    assert synthetic_disk.main(["tiny", "--out", str(mount / "ds"), "--no-progress"]) == 0


def test_the_current_folder_as_out_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    # Before: --out . generated the whole dataset, then failed with ". exists and is not
    # empty" (its own temporary folder, made inside "."); --out .. would have replaced the
    # folder holding the current one.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for out, where in ((".", "the current folder"), ("..", "a folder holding the current one")):
        assert synthetic_disk.main(["tiny", "--out", out]) == 2
        assert f"{out} is {where}, which the finished dataset folder would replace" in (
            error_line(capsys)
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"] and not any(work.iterdir())
    root = tmp_path / "root"  # outside the current folder: the input is not inside --out
    assert to_disk.main(["synthetic:tiny", "--out", ".", "--root", str(root)]) == 2
    assert ". is the current folder" in error_line(capsys)
    assert not root.exists() and not any(work.iterdir())

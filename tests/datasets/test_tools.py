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

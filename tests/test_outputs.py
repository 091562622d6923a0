"""sparsegcn.files: what outputs may replace, full disks, files changing under a run.

Each case is a fault the reliability probe of issue 26 met: a device or FIFO
replaced by a regular file, an output that is one of the run's inputs, a
full disk (ENOSPC from ``posix_fallocate``), a memory-mapped file truncated
under a running job, and temporary folders a killed process left behind.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sparsegcn.files import (
    _host_tag,
    check_distinct_outputs,
    check_mapped,
    check_not_inputs,
    check_writable,
    remove_stale_temp_folders,
    replace_folder,
    reserve_space,
    temp_folder,
    write_all_atomic,
    write_atomic,
    write_json_atomic,
)

# -- sinks and special files ----------------------------------------------------


def _fifo_with_reader(path):
    """A FIFO at ``path`` with a non-blocking reader already open (so writers do not wait)."""
    os.mkfifo(path)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)


def test_a_fifo_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "sink"
    reader = _fifo_with_reader(fifo)
    try:
        write_json_atomic(fifo, {"a": 1})
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # replaced by a regular file before
        assert os.read(reader, 1000) == b'{\n  "a": 1\n}\n'
        assert check_writable(fifo, what="--json") == fifo
        write_all_atomic({fifo: lambda f: f.write(b"x"), tmp_path / "b.bin": lambda f: None})
        assert os.read(reader, 10) == b"x" and stat.S_ISFIFO(os.stat(fifo).st_mode)
    finally:
        os.close(reader)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.bin", "sink"]  # no temp left


def test_a_fifo_nobody_reads_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "sink"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="no process reads from this FIFO"):
        write_atomic(fifo, lambda f: f.write(b"x"))
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_dev_null_is_a_sink_for_everyone():
    # Refused for an ordinary user before (a temporary file in /dev); as
    # root, replaced by a regular file (tested on a device of tmp_path below,
    # so that a regression cannot replace this machine's /dev/null).
    assert str(check_writable(os.devnull, what="--json")) == os.devnull
    if os.geteuid() != 0:
        write_json_atomic(os.devnull, {"a": 1})
        assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_character_device_is_never_replaced(tmp_path):
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    write_json_atomic(device, {"a": 1})
    assert stat.S_ISCHR(os.stat(device).st_mode)


def test_a_socket_is_refused_and_kept(tmp_path):
    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(OSError, match=r"s: it is a socket, not a regular file"):
            write_atomic(path, lambda f: f.write(b"x"))
        with pytest.raises(OSError, match=r"is a socket, not a regular file"):
            check_writable(path, what="--json")
        with pytest.raises(OSError, match=r"it is a socket"):
            write_all_atomic({tmp_path / "a": lambda f: None, path: lambda f: None})
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # all or none
    finally:
        server.close()


def test_a_symbolic_link_is_written_through_not_replaced(tmp_path):
    (tmp_path / "results").mkdir()
    target = tmp_path / "results" / "r1.json"
    target.write_text("old")
    link = tmp_path / "report.json"
    link.symlink_to(target)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and target.read_text() == '{\n  "a": 1\n}\n'
    write_all_atomic({link: lambda f: f.write(b"x")})
    assert link.is_symlink() and target.read_bytes() == b"x"
    fifo = tmp_path / "pipe"  # as /dev/stdout -> /proc/self/fd/1 -> a pipe
    reader = _fifo_with_reader(fifo)
    stdout = tmp_path / "stdout"
    stdout.symlink_to(fifo)
    try:
        assert check_writable(stdout, what="--json") == stdout
        write_atomic(stdout, lambda f: f.write(b"through"))
        assert os.read(reader, 100) == b"through"
    finally:
        os.close(reader)
    assert stdout.is_symlink() and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "pipe",
        "report.json",
        "results",
        "stdout",
    ]


def test_a_descriptor_of_this_process_is_written_to_not_replaced(tmp_path, monkeypatch):
    # `--json /dev/stdout >> runs.log`: /dev/stdout links to /proc/self/fd/1, which links
    # to runs.log; renaming over that replaced the user's log with the report.
    log = tmp_path / "runs.log"
    log.write_text("run 1\n")
    inode = log.stat().st_ino
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    saved = os.dup(1)
    try:
        os.dup2(fd, 1)
        with open(1, "w", closefd=False) as stdout:  # buffered, as a redirected stdout is
            monkeypatch.setattr(sys, "stdout", stdout)
            print("table")
            assert check_writable("/dev/stdout", what="--json") == Path("/dev/stdout")
            write_json_atomic("/dev/stdout", {"a": 1})
        for path in (f"/dev/fd/{fd}", f"/proc/self/fd/{fd}", f"/proc/{os.getpid()}/fd/{fd}"):
            assert check_writable(path, what="--json") == Path(path)
            write_atomic(path, lambda f: f.write(b"x\n"))
        write_all_atomic(
            {f"/dev/fd/{fd}": lambda f: f.write(b"y\n"), tmp_path / "b": lambda f: None}
        )
        # Two outputs to descriptors follow one another; one replaced by rename is refused.
        check_distinct_outputs({"--json": "/dev/stdout", "--plot": f"/dev/fd/{fd}"})
        check_distinct_outputs({"--json": os.devnull, "--plot": os.devnull})
        with pytest.raises(ValueError, match=r"--plot and --json name the same file"):
            check_distinct_outputs({"--json": f"/dev/fd/{fd}", "--plot": log})
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
    assert log.read_text() == 'run 1\ntable\n{\n  "a": 1\n}\nx\nx\nx\ny\n'
    assert log.stat().st_ino == inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "runs.log"]  # no temp left


def test_a_pipe_descriptor_is_written_and_a_closed_one_is_named(tmp_path):
    # `--json /dev/stdout | head`: /proc/self/fd/1 links to "pipe:[123]", no file at all.
    read, write = os.pipe()
    try:
        assert check_writable(f"/dev/fd/{write}", what="--json") == Path(f"/dev/fd/{write}")
        write_json_atomic(f"/dev/fd/{write}", {"a": 1})
        assert os.read(read, 100) == b'{\n  "a": 1\n}\n'
        with pytest.raises(OSError, match=rf"--json /dev/fd/{read} .*open for reading only"):
            check_writable(f"/dev/fd/{read}", what="--json")
        os.close(read)
        with pytest.raises(OSError, match=rf"cannot write /dev/fd/{write}: Broken pipe"):
            write_atomic(f"/dev/fd/{write}", lambda f: f.write(b"x"))
    finally:
        for fd in (read, write):
            with contextlib.suppress(OSError):
                os.close(fd)
    with pytest.raises(OSError, match=rf"/dev/fd/{write} .*descriptor {write} is not open"):
        check_writable(f"/dev/fd/{write}", what="--json")
    assert list(tmp_path.iterdir()) == []


# -- outputs that are inputs ----------------------------------------------------


def test_an_output_inside_an_input_folder_or_linked_to_an_input_is_refused(tmp_path):
    data = tmp_path / "ds"
    data.mkdir()
    (data / "features.npy").write_bytes(b"x")
    single = tmp_path / "ckpt.json"
    single.write_text("{}")
    inputs = [("the dataset", data), ("the checkpoint file", single), ("nothing", None)]
    for out in (data / "features.npy", data / "new.json", data, single):
        with pytest.raises(ValueError, match=r"--json .* would overwrite .*an input of this run"):
            check_not_inputs({"--json": out}, inputs)
    link = tmp_path / "link"
    link.symlink_to(data)
    with pytest.raises(ValueError, match="would overwrite the dataset"):
        check_not_inputs({"--out": link / "features.npy"}, inputs)
    hard = tmp_path / "hard.json"
    os.link(single, hard)
    with pytest.raises(ValueError, match="would overwrite the checkpoint file"):
        check_not_inputs({"--out": hard}, inputs)
    check_not_inputs(
        {"--json": tmp_path / "ds2" / "x.json", "--plot": None}, inputs
    )  # beside: fine


def test_an_output_on_the_target_of_a_link_in_an_input_folder_is_refused(tmp_path):
    # Before: a dataset whose files are links into a shared store (DVC, datalad,
    # git-annex) lost them to `--json store/ind.cora.x`: only the folder's real path
    # was compared, and the rename replaced the store's file.
    store, data = tmp_path / "store", tmp_path / "R" / "planetoid"
    (store / "shared").mkdir(parents=True)
    data.mkdir(parents=True)
    (store / "ind.cora.x").write_bytes(b"features")
    (store / "shared" / "edges.npy").write_bytes(b"edges")
    (data / "ind.cora.x").symlink_to(store / "ind.cora.x")
    (data / "sub").mkdir()  # a link a level down, and a linked folder
    (data / "sub" / "y.npy").symlink_to(Path("..", "..", "..", "store", "ind.cora.x"))
    (data / "linked").symlink_to(store / "shared")
    inputs = [("the dataset", data)]
    for out in (store / "ind.cora.x", store / "shared", store / "shared" / "edges.npy"):
        with pytest.raises(
            ValueError,
            match=rf"--json {re.escape(str(out))} would overwrite .* in the dataset "
            rf"{re.escape(str(data))}, an input of this run",
        ):
            check_not_inputs({"--json": out}, inputs)
    # Through a link of the output's own, too.
    alias = tmp_path / "alias.json"
    alias.symlink_to(store / "ind.cora.x")
    with pytest.raises(ValueError, match="would overwrite"):
        check_not_inputs({"--json": alias}, inputs)
    check_not_inputs({"--json": store / "report.json"}, inputs)  # beside the linked files: fine
    (data / "up").symlink_to("..")  # a link to a folder the input lies in reads nothing more
    check_not_inputs({"--json": tmp_path / "R" / "report.json"}, inputs)
    assert (store / "ind.cora.x").read_bytes() == b"features"


def test_an_output_inside_a_dataset_folder_the_run_downloads_is_refused(tmp_path, capsys):
    # Before: info --dataset tu:MUTAG --root R --json R/tu/MUTAG/MUTAG_A.txt downloaded
    # MUTAG, then replaced its verified edge file by the report (only an input already
    # there was treated as a folder).
    from sparsegcn.cli import main

    later = tmp_path / "tu" / "MUTAG"
    with pytest.raises(ValueError, match=r"lies inside the dataset .*made on first use"):
        check_not_inputs({"--json": later / "MUTAG_A.txt"}, [("the dataset", later)])
    check_not_inputs({"--json": tmp_path / "tu" / "x.json"}, [("the dataset", later)])
    argv = ["--dataset", "tu:MUTAG", "--root", str(tmp_path), "--no-progress"]
    for command in (["info"], ["train", "--model", "gin", "--epochs", "1"]):
        assert main([*command, *argv, "--json", str(later / "MUTAG_A.txt")]) == 2
        assert "lies inside the dataset" in capsys.readouterr().err
    assert not (tmp_path / "tu").exists()  # refused before any download


def test_outputs_that_would_land_on_one_another_are_refused(tmp_path, capsys):
    from sparsegcn.cli import main
    from sparsegcn.experiment.precompute import cache_owns
    from sparsegcn.train.checkpoint import folder_owns

    report = tmp_path / "report.json"
    with pytest.raises(ValueError, match=r"--plot and --json name the same file"):
        check_distinct_outputs({"--json": report, "--plot": report, "--x": None})
    link = tmp_path / "link.png"
    link.symlink_to(report)  # dangling: the write would land on report.json
    with pytest.raises(ValueError, match=r"--plot and --json name the same file"):
        check_distinct_outputs({"--json": report, "--plot": link})
    report.write_text("{}")
    hard = tmp_path / "hard.png"
    os.link(report, hard)
    with pytest.raises(ValueError, match=r"--plot and --json name the same file"):
        check_distinct_outputs({"--json": report, "--plot": hard})
    ck, cache = tmp_path / "ck", tmp_path / "cache"
    folders = {"--checkpoint": (ck, folder_owns), "--feature-cache": (cache, cache_owns)}
    for name in ("ckpt-000004.json", "ckpt-000004-0123456789ab.npz", ".lock", "link-model.json"):
        with pytest.raises(
            ValueError,
            match=r"--json .* names one of the files the folder of --checkpoint .* keeps",
        ):
            check_distinct_outputs({"--json": ck / name}, folders)
    with pytest.raises(ValueError, match=r"the folder of --feature-cache .* keeps"):
        check_distinct_outputs({"--json": cache / "sgc-0a1b.npz"}, folders)
    check_distinct_outputs({"--json": ck / "report.json", "--plot": ck / "curve.png"}, folders)
    # A resumed run's folder keeps its checkpoints too, the one resumed from or not.
    resumed = tmp_path / "resumed"
    with pytest.raises(ValueError, match=r"the folder of --resume .* keeps"):
        check_distinct_outputs(
            {"--json": resumed / "ckpt-000006.json"}, {"--resume": (resumed, folder_owns)}
        )
    # The command refuses before any work, and nothing is written.
    argv = ["train", "--epochs", "2", "--no-progress", "--checkpoint", str(ck)]
    assert main([*argv, "--json", str(ck / "ckpt-000002.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the files the folder of --checkpoint" in err[0]
    assert not ck.exists()


def test_a_file_output_a_folder_output_needs_as_a_folder_is_refused(tmp_path, capsys):
    from sparsegcn.cli import main
    from sparsegcn.experiment.precompute import cache_owns
    from sparsegcn.train.checkpoint import folder_owns

    out, j, fc, png = (tmp_path / name for name in ("out", "j", "fc", "p.png"))
    refusals = [
        ({"--json": out}, {"--checkpoint": (out, folder_owns)}, "--json and --checkpoint name "),
        (
            {"--json": j},
            {"--checkpoint": (j / "sub", folder_owns)},
            r"--json .*/j' is a file, but --checkpoint .*/j/sub' needs it",
        ),
        ({"--json": fc}, {"--feature-cache": (fc, cache_owns)}, "--json and --feature-cache"),
        ({"--plot": png}, {"--checkpoint": (png, folder_owns)}, "--plot and --checkpoint"),
        ({"--json": j, "--plot": j / "p.png"}, {}, r"--json .*/j' is a file, but --plot"),
        ({"--json": j / "r.json", "--plot": j}, {}, r"--plot .*/j' is a file, but --json"),
    ]
    for files, folders, message in refusals:
        with pytest.raises(ValueError, match=message):
            check_distinct_outputs(files, folders)
    link = tmp_path / "link.json"
    link.symlink_to(out)  # dangling: the report would land on out
    with pytest.raises(ValueError, match="--json and --checkpoint name the same path"):
        check_distinct_outputs({"--json": link}, {"--checkpoint": (out, folder_owns)})
    # Beside, or inside under a name the folder does not keep: fine.
    check_distinct_outputs({"--json": tmp_path / "o", "--plot": out / "p.png"})
    check_distinct_outputs({"--json": out / "r.json"}, {"--checkpoint": (out, folder_owns)})
    check_distinct_outputs({"--json": tmp_path / "ou"}, {"--checkpoint": (out, folder_owns)})
    # The command refuses before reading any data, and writes nothing.
    root = tmp_path / "root"
    root.mkdir()
    train = ["train", "--epochs", "2", "--no-progress", "--root", str(root)]
    commands = [
        ["--checkpoint", str(out), "--json", str(out)],
        ["--checkpoint", str(j / "sub"), "--json", str(j)],
        ["--model", "sgc", "--feature-cache", str(fc), "--json", str(fc)],
    ]
    for flags in commands:
        assert main([*train, *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "give each its own path" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "root"]
    assert not any(root.iterdir())


def test_an_input_inside_a_folder_the_run_replaces_is_refused(tmp_path):
    from sparsegcn.files import check_inputs_outside

    out = tmp_path / "out"
    for source in (out, out / "synthetic", out / "a" / "b"):  # there or not, made on first use
        with pytest.raises(ValueError, match=r"lies inside --out|is --out"):
            check_inputs_outside({"--out": out}, [("the dataset", source)])
    link = tmp_path / "link"
    link.symlink_to(out)
    with pytest.raises(ValueError, match=r"the cache .*link/synthetic lies inside --out"):
        check_inputs_outside({"--out": out}, [("the cache", link / "synthetic")])
    check_inputs_outside({"--out": out, "--x": None}, [("a", tmp_path / "outer"), ("b", None)])
    check_inputs_outside({"--out": out / "ds"}, [("the dataset", out)])  # the reverse: fine here
    assert sorted(os.listdir(tmp_path)) == ["link"]


@pytest.mark.parametrize("links", [True, False], ids=["hard-link", "no-hard-links"])
def test_a_failed_rename_puts_every_output_back(tmp_path, monkeypatch, links):
    # A link model's json + npz: the npz in a sticky folder owned by another user.
    import sparsegcn.files as files

    model, arrays, new = tmp_path / "m.json", tmp_path / "m.npz", tmp_path / "new.txt"
    model.write_text("old json")
    arrays.write_text("old npz")
    real = os.replace

    def refused(src, dst):
        if Path(dst) == arrays and str(src).endswith(".tmp"):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real(src, dst)

    def no_links(src, dst):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(files.os, "replace", refused)
    if not links:
        monkeypatch.setattr(files.os, "link", no_links)
    writers = {
        new: lambda f: f.write(b"new"),
        model: lambda f: f.write(b"new json"),
        arrays: lambda f: f.write(b"new npz"),
    }
    with pytest.raises(
        PermissionError, match=rf"^cannot write {re.escape(str(arrays))}: Operation not permitted$"
    ):
        write_all_atomic(writers)
    assert model.read_text() == "old json" and arrays.read_text() == "old npz"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.npz"]  # no temp, no backup
    monkeypatch.setattr(files.os, "replace", real)
    write_all_atomic(writers)
    assert [p.read_text() for p in (new, model, arrays)] == ["new", "new json", "new npz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.npz", "new.txt"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_device_or_fifo_output_that_fails_leaves_every_file_output_as_it_was(tmp_path):
    # Before: the files were renamed into place first, then the sink written; a sink that
    # failed (`predict --out p.npy --json /dev/full`) ended with an error, and p.npy replaced.
    out, new = tmp_path / "p.npy", tmp_path / "new.npy"
    out.write_bytes(b"old")
    fifo = tmp_path / "ff"  # nobody reads it
    os.mkfifo(fifo)
    for sink, message in (("/dev/full", "No space left on device"), (fifo, "no process reads")):
        writers = {
            out: lambda f: f.write(b"new"),
            sink: lambda f: f.write(b"{}"),
            new: lambda f: f.write(b"x"),
        }
        with pytest.raises(OSError, match=rf"^cannot write {re.escape(str(sink))}: {message}"):
            write_all_atomic(writers)
        assert out.read_bytes() == b"old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ff", "p.npy"]  # no temp, no backup
    # A sink after another that was written: the message says which was.
    reader = _fifo_with_reader(tmp_path / "ok")
    try:
        with pytest.raises(OSError, match=r"No space left on device; .*/ok was written already"):
            write_all_atomic(
                {
                    out: lambda f: f.write(b"new"),
                    tmp_path / "ok": lambda f: f.write(b"{}"),
                    "/dev/full": lambda f: f.write(b"{}"),
                }
            )
        assert os.read(reader, 10) == b"{}"
    finally:
        os.close(reader)
    assert out.read_bytes() == b"old"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_file_in_a_sticky_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    # As in /tmp: anyone may create files, only a file's owner (or the folder's) replace it.
    import sparsegcn.files as files

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs, mine = shared / "r.json", shared / "m.json"
    for path, uid in ((theirs, 4242), (mine, 1000)):
        path.write_text("kept")
        os.chown(path, uid, uid)
    monkeypatch.setattr(files.os, "geteuid", lambda: 1000)
    link = tmp_path / "report.json"
    link.symlink_to(theirs)
    for path in (theirs, link):
        with pytest.raises(
            PermissionError,
            match=rf"--json {re.escape(str(path))} cannot be replaced: it belongs to another user "
            rf"\(uid 4242\), and its folder {re.escape(str(shared))} has the sticky bit",
        ):
            check_writable(path, what="--json")
    for path in (mine, shared / "new.json"):
        check_writable(path, what="--json")
    shared.chmod(0o777)
    check_writable(theirs, what="--json")  # no sticky bit: the folder's writers may
    shared.chmod(0o1777)
    monkeypatch.setattr(files.os, "geteuid", lambda: 0)
    check_writable(theirs, what="--json")  # root (CAP_FOWNER) may
    assert sorted(p.name for p in shared.iterdir()) == ["m.json", "r.json"]


def test_a_plot_that_is_not_a_png_is_refused_before_any_work(tmp_path, capsys):
    from sparsegcn.cli import main

    ck, plot = tmp_path / "ck", tmp_path / "curves.pdf"
    argv = ["train", "--epochs", "2", "--no-progress", "--checkpoint", str(ck), "--plot", str(plot)]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [
        f"sparsegcn train: error: --plot must end in .png, got {str(plot)!r}"
    ]
    assert not ck.exists()
    from sparsegcn.experiment import Experiment

    with pytest.raises(ValueError, match=r"--plot must end in \.png"):
        Experiment(plot=str(plot))  # the Python API: refused before any data is read
    argv = ["bench", "--quick", "--nodes", "64", "--repeats", "1", "--no-progress"]
    assert main([*argv, "--plot", str(plot)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--plot must end in .png" in err
    assert list(tmp_path.iterdir()) == []


# -- full disks -------------------------------------------------------------------


def test_reserve_space_turns_a_full_disk_into_an_oserror(tmp_path, monkeypatch):
    file = tmp_path / "a.npy"
    file.write_bytes(b"")
    reserve_space(file, 10_000)
    assert file.stat().st_size == 10_000 and file.stat().st_blocks * 512 >= 10_000

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError, match=r"cannot write DS: No space left on device \(20,000 bytes"):
        reserve_space(file, 20_000, name="DS")


def test_bytes_a_full_disk_dropped_silently_are_an_error_naming_the_output(tmp_path):
    # np.save to an open file writes the data with ndarray.tofile, whose C buffer is
    # flushed unchecked: on a nearly full disk the file ended short, without an error,
    # and was renamed into place.
    out = tmp_path / "report.npy"
    out.write_bytes(b"kept")

    def dropped(f):
        f.write(b"x" * 100)
        f.flush()
        os.ftruncate(f.fileno(), 60)  # what the disk kept

    with pytest.raises(OSError, match=r"cannot write .*report\.npy: only 60 of 100 bytes reached"):
        write_atomic(out, dropped)
    with pytest.raises(OSError, match=r"cannot write .*report\.npy: only 60 of 100 bytes") as err:
        write_all_atomic({out: dropped, tmp_path / "other.json": lambda f: f.write(b"{}")})
    assert err.value.errno == errno.ENOSPC
    assert out.read_bytes() == b"kept" and sorted(os.listdir(tmp_path)) == ["report.npy"]


def test_writes_of_appended_arrays_raise_on_a_full_disk(tmp_path, monkeypatch):
    from sparsegcn.files import close_all, save_array, write_array

    path = tmp_path / "keys.bin"
    with open(path, "wb") as f:
        write_array(f, np.arange(3, dtype=np.int64))
        write_array(f, np.arange(6, dtype=np.int64).reshape(2, 3).T)  # C order, as tofile
    assert np.fromfile(path, np.int64).tolist() == [0, 1, 2, 0, 3, 1, 4, 2, 5]
    save_array(path, np.array([7], np.int64))
    assert np.fromfile(path, np.int64).tolist() == [7]

    class Full(io.BytesIO):
        def close(self):
            raise OSError(errno.ENOSPC, "No space left on device")

    files = [Full(), io.BytesIO(), Full()]
    with pytest.raises(OSError, match="No space left"):
        close_all(files)
    assert files[1].closed  # every file is closed, the first error raised


def test_numpys_short_write_is_said_in_words():
    from sparsegcn.files import _naming

    named = _naming(OSError("216704 requested and 4064 written"), "cache")
    assert str(named) == (
        "cannot write cache: only 4,064 of 216,704 bytes could be written (the disk, or a "
        "quota, is full)"
    )
    assert str(_naming(OSError(errno.ENOSPC, "No space left on device"), "x")) == (
        "cannot write x: No space left on device"
    )


# -- temporary folders ------------------------------------------------------------


def test_temp_folders_follow_the_umask_and_stale_ones_are_removed(tmp_path):
    old = os.umask(0o022)
    try:
        folder = temp_folder(tmp_path, "out")
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert remove_stale_temp_folders(tmp_path, "out") == []  # this process is alive
    ended = subprocess.Popen(["true"])
    ended.wait()  # a process that has ended, as one killed with -9 has
    dead = str(tmp_path / f".out.pairs-{_host_tag()}-{ended.pid}-abcdefgh.sparsegcn")
    os.mkdir(dead)
    (tmp_path / ".out.pairs-00000000-1-abcdefgh.sparsegcn").mkdir()  # another host's
    (tmp_path / ".out.tmp-mine").mkdir()  # not named as ours
    assert [str(p) for p in remove_stale_temp_folders(tmp_path, "out")] == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [folder.name, ".out.pairs-00000000-1-abcdefgh.sparsegcn", ".out.tmp-mine"]
    )


def _folder(path, text):
    path.mkdir()
    (path / "file").write_text(text)
    return path


def test_a_replaced_file_of_another_owner_keeps_the_owner_or_takes_the_umask(tmp_path, monkeypatch):
    # The mode was copied onto a file of this process's owner: a 0600 report of
    # another user became unreadable to them, and a 4755 one a set-user-id file of ours.
    if os.geteuid() != 0:
        pytest.skip("making files of another owner needs root")
    import sparsegcn.files as files

    report, theirs = tmp_path / "r.json", tmp_path / "s.json"
    for path, mode in ((report, 0o600), (theirs, 0o4755)):
        path.write_text("old")
        os.chown(path, 65534, 65534)
        path.chmod(mode)
    old = os.umask(0o022)
    try:
        write_json_atomic(theirs, {"a": 1})  # root may give it back to its owner
        assert (theirs.stat().st_uid, stat.S_IMODE(theirs.stat().st_mode)) == (65534, 0o755)

        def refused(path, uid, gid, **kwargs):
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(files.os, "chown", refused)  # as a user who is not root
        write_json_atomic(report, {"a": 1})
    finally:
        os.umask(old)
    assert (report.stat().st_uid, stat.S_IMODE(report.stat().st_mode)) == (0, 0o644)


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_a_folder_replaced_is_never_lost(tmp_path, monkeypatch, exchange):
    import sparsegcn.files as files

    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    path = _folder(tmp_path / "ds", "old")
    assert replace_folder(_folder(tmp_path / ".new1", "new"), path) == path
    assert (path / "file").read_text() == "new" and sorted(os.listdir(tmp_path)) == ["ds"]
    target = _folder(tmp_path / "target", "theirs")  # a link to a folder: the link is replaced
    link = tmp_path / "link"
    link.symlink_to(target)
    replace_folder(_folder(tmp_path / ".new2", "new"), link)
    assert not link.is_symlink() and (link / "file").read_text() == "new"
    assert (target / "file").read_text() == "theirs"
    assert sorted(os.listdir(tmp_path)) == ["ds", "link", "target"]
    # A link to an empty folder, or to nothing, was refused only at the end (ENOTDIR).
    (tmp_path / "empty").mkdir()
    for name, to in (("to-empty", tmp_path / "empty"), ("dangling", tmp_path / "nowhere")):
        (tmp_path / name).symlink_to(to)
        replace_folder(_folder(tmp_path / f".new-{name}", name), tmp_path / name)
        assert (tmp_path / name / "file").read_text() == name
        assert not (tmp_path / name).is_symlink()
    assert list((tmp_path / "empty").iterdir()) == [] and not (tmp_path / "nowhere").exists()
    for name in ("to-empty", "dangling", "empty"):
        shutil.rmtree(tmp_path / name)
    if exchange:
        return
    # Interrupted between moving the old folder aside and moving the new one in
    # (Ctrl-C): the old folder is put back, the new one is the caller's to remove.
    real = os.replace
    calls = []

    def interrupted(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(files.os, "replace", interrupted)
    new = _folder(tmp_path / ".new3", "newer")
    with pytest.raises(KeyboardInterrupt):
        replace_folder(new, path)
    monkeypatch.setattr(files.os, "replace", real)
    assert (path / "file").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == [".new3", "ds", "link", "target"]


def test_a_partial_download_a_killed_process_left_is_removed_by_the_next(tmp_path):
    from sparsegcn.files import temp_file_path

    ended = subprocess.Popen(["true"])
    ended.wait()
    mine = temp_file_path(tmp_path, "ind.cora.x")
    stale = tmp_path / mine.name.replace(f"-{os.getpid()}-", f"-{ended.pid}-")
    stale.write_bytes(b"half a download")
    (tmp_path / "ind.cora.x").write_bytes(b"the file")
    (tmp_path / ".ind.cora.x.0123.part").write_bytes(b"not named as ours")
    assert temp_file_path(tmp_path, "ind.cora.x").parent == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ind.cora.x.0123.part", "ind.cora.x"]


def test_a_folder_moved_aside_by_a_killed_process_is_put_back(tmp_path):
    # kill -9 between replace_folder's two renames: the old copy is all there is.
    ended = subprocess.Popen(["true"])
    ended.wait()
    aside = tmp_path / f".ds.old-{_host_tag()}-{ended.pid}-abcdefgh.sparsegcn"
    aside.mkdir()
    _folder(aside / "data", "only copy")
    assert remove_stale_temp_folders(tmp_path, "ds") == [aside]
    assert (tmp_path / "ds" / "file").read_text() == "only copy"
    assert sorted(os.listdir(tmp_path)) == ["ds"]
    # Once the new folder is in place, an old copy left behind is stale.
    aside.mkdir()
    _folder(aside / "data", "older")
    temp_folder(tmp_path, "ds").rmdir()
    assert (tmp_path / "ds" / "file").read_text() == "only copy"
    assert sorted(os.listdir(tmp_path)) == ["ds"]


# -- permissions of what is replaced -------------------------------------------------


def test_a_replaced_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path):
    secret, other, new = tmp_path / "secret.json", tmp_path / "shared.npy", tmp_path / "new.json"
    secret.write_text("old")
    secret.chmod(0o600)
    other.write_text("old")
    other.chmod(0o640)
    old = os.umask(0o022)
    try:
        write_json_atomic(secret, {"a": 1})
        write_all_atomic({other: lambda f: f.write(b"new"), new: lambda f: f.write(b"{}")})
        link = tmp_path / "link.json"
        link.symlink_to(secret)  # written through: the target's mode
        write_json_atomic(link, {"b": 2})
    finally:
        os.umask(old)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(other.stat().st_mode) == 0o640
    assert stat.S_IMODE(new.stat().st_mode) == 0o644
    assert secret.read_text() == '{\n  "b": 2\n}\n' and other.read_text() == "new"


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
@pytest.mark.parametrize("contents", [False, True], ids=["empty", "with-a-file"])
def test_a_replaced_folder_keeps_its_mode(tmp_path, monkeypatch, exchange, contents):
    import sparsegcn.files as files

    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    path = tmp_path / "out"
    path.mkdir()
    if contents:
        (path / "file").write_text("old")
    path.chmod(0o2770)  # a group's folder: set-group-id
    old = os.umask(0o022)
    try:
        new = temp_folder(tmp_path, "out")
        (new / "file").write_text("new")
        replace_folder(new, path)
        fresh = replace_folder(_folder(tmp_path / ".n", "new"), tmp_path / "fresh")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o2770
    assert (path / "file").read_text() == "new" and sorted(os.listdir(tmp_path)) == [
        "fresh",
        "out",
    ]
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o755  # nothing replaced: the umask's


def test_a_mount_point_is_named_as_one(tmp_path, monkeypatch):
    import sparsegcn.files as files
    from sparsegcn.files import check_not_mount_point

    mount = tmp_path / "mnt"
    mount.mkdir()
    monkeypatch.setattr(files.os.path, "ismount", lambda p: Path(p) == mount)
    with pytest.raises(ValueError, match=r"--out .*mnt: it is a mount point.*inside it, e\.g\. "):
        check_not_mount_point(mount, what="--out")
    check_not_mount_point(mount / "ds", what="--out")
    link = tmp_path / "link"
    link.symlink_to(mount)
    check_not_mount_point(link)  # the link is what is replaced

    def busy(src, dst):
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr(files.os, "replace", busy)
    with pytest.raises(OSError, match=r"^cannot write .*mnt: it is a mount point") as err:
        replace_folder(_folder(tmp_path / ".new", "x"), mount)
    assert err.value.errno == errno.EBUSY


# -- files truncated under a run ----------------------------------------------------


def test_a_mapped_file_truncated_under_a_run_is_an_error_not_sigbus(tmp_path):
    from sparsegcn.sampling.feature_store import HostFeatureStore
    from sparsegcn.sampling.host import HostCSR

    features = np.arange(4000 * 32, dtype=np.float32).reshape(4000, 32)
    np.save(tmp_path / "features.npy", features)
    np.save(tmp_path / "indices.npy", np.arange(4000, dtype=np.int32))
    mapped = np.load(tmp_path / "features.npy", mmap_mode="r")
    store = HostFeatureStore(mapped, 8, threads=1)
    csr = HostCSR.from_arrays(
        np.arange(4001, dtype=np.int64), np.load(tmp_path / "indices.npy", mmap_mode="r")
    )
    try:
        rows = np.array([0, 3999])
        np.testing.assert_array_equal(np.asarray(store.gather(rows, 2))[:2], features[rows])
        np.testing.assert_array_equal(csr.read(rows), rows)
        check_mapped(mapped[10:20], "features")
        os.truncate(tmp_path / "features.npy", 4096)
        os.truncate(tmp_path / "indices.npy", 4096)
        # Reading row 3999 now would be SIGBUS: the process would die without a word.
        with pytest.raises(OSError, match=r"features file .*features.npy shrank to 4,096 bytes"):
            store.gather(rows, 2)
        with pytest.raises(OSError, match=r"indices file .*indices.npy shrank to 4,096 bytes"):
            csr.read(rows)
    finally:
        store.close()


# -- a command's outputs, checked before the run -------------------------------------


def test_check_outputs_refuses_each_bad_output_before_any_work(tmp_path):
    from sparsegcn.files import check_outputs

    data = tmp_path / "data" / "planetoid"
    data.mkdir(parents=True)
    (data / "ind.cora.x").write_bytes(b"cora")
    (tmp_path / "folder").mkdir()
    kept = tmp_path / "results" / "kept.json"
    kept.parent.mkdir()
    kept.write_text("{}")
    inputs = [("dataset cora", data)]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    refusals = [
        ({"--out": data / "ind.cora.x"}, {}, ValueError, r"--out .*ind\.cora\.x would overwrite"),
        ({"--out": data / "new.json"}, {}, ValueError, r"--out .*new\.json would overwrite"),
        ({"--out": tmp_path / "r", "--json": tmp_path / "r"}, {}, ValueError, r"--json and --out"),
        ({"--json": tmp_path / "folder"}, {}, IsADirectoryError, r"--json .*folder is a folder"),
        ({"--out": kept}, {"--out": kept}, FileExistsError, r"--out defaults to .*kept\.json"),
    ]
    for outputs, defaults, error, message in refusals:
        with pytest.raises(error, match=message):
            check_outputs(outputs, inputs, defaults=defaults)
    cache = tmp_path / "data" / "synthetic"  # made on first use, by the run
    with pytest.raises(ValueError, match=r"--out .*synthetic/links/r\.json lies inside cache"):
        check_outputs({"--out": cache / "links" / "r.json"}, [("cache", cache)])
    with pytest.raises(NotADirectoryError, match=r"--json .*ind\.cora\.x/r\.json"):
        check_outputs({"--json": data / "ind.cora.x" / "r.json"})
    with pytest.raises(FileExistsError, match="pass --out PATH"):
        check_outputs({"--out": kept}, defaults={"--out": kept})
    if os.geteuid() != 0:
        (tmp_path / "folder").chmod(0o500)
        try:
            with pytest.raises(PermissionError, match=r"--json .*folder.*r\.json"):
                check_outputs({"--json": tmp_path / "folder" / "r.json"})
        finally:
            (tmp_path / "folder").chmod(0o700)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert (data / "ind.cora.x").read_bytes() == b"cora" and kept.read_text() == "{}"
    # Accepted: a new file under missing folders (made when written, not now), an existing
    # file given explicitly, a default path not yet written, and outputs left out.
    new = tmp_path / "new" / "deeper" / "r.json"
    check_outputs({"--out": new, "--json": kept, "--md": None}, inputs)
    check_outputs(
        {"--out": tmp_path / "fresh.json"}, inputs, defaults={"--out": tmp_path / "fresh.json"}
    )
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_feature_cache_in_a_runs_checkpoint_folder_is_refused(tmp_path, capsys):
    """``--feature-cache`` wrote its ``.npz`` into another run's locked checkpoint
    folder, and into this run's own; both are refused before any work."""
    from sparsegcn.cli import main

    other = tmp_path / "other"
    other.mkdir()
    (other / ".lock").write_text("")
    (other / "ckpt-000002.json").write_text("{}")
    before = sorted(p.name for p in other.iterdir())
    train = ["train", "--model", "sgc", "--epochs", "2", "--no-progress"]
    mine = tmp_path / "mine"
    for flags, message in (
        (["--feature-cache", str(other)], r"is a run's checkpoint folder \(it holds .lock\)"),
        (["--feature-cache", str(mine), "--checkpoint", str(mine)], "is the --checkpoint folder"),
    ):
        assert main([*train, *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and re.search(message, err[0]), err
    assert sorted(p.name for p in other.iterdir()) == before
    assert not mine.exists()


def test_an_output_over_a_file_of_another_kind_is_refused(tmp_path, capsys):
    """``predict --json preds.npy`` replaced the predictions with a summary: an existing
    file that is not what the option writes is refused before any work, and left
    as it was; a file of the option's own kind (an earlier report) is replaced."""
    from sparsegcn.cli import main
    from sparsegcn.cli.outputs import other_kind

    files = {
        "a.npy": None,  # written below
        "a.npz": None,
        "a.png": b"\x89PNG\r\n\x1a\n" + bytes(16),
        "notes.txt": "résumé, 42\n".encode(),
        "blob.bin": bytes(range(256)),
        "report.json": b'\n  {"test_acc_mean": 0.8}',
        "empty.json": b"",
    }
    np.save(tmp_path / "a.npy", np.arange(3))
    np.savez(tmp_path / "a.npz", x=np.arange(3))
    for name, data in files.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
    found = {name: other_kind("--json", tmp_path / name) for name in files}
    assert found == {
        "a.npy": "a .npy array",
        "a.npz": "a zip or .npz archive",
        "a.png": "a PNG image",
        "notes.txt": "a text file",
        "blob.bin": "a binary file",
        "report.json": None,
        "empty.json": None,
    }
    assert other_kind("--out", tmp_path / "a.npy") is None
    assert other_kind("--out", tmp_path / "report.json") == "a text file"
    assert other_kind("--plot", tmp_path / "a.png") is None
    assert other_kind("--plot", tmp_path / "missing.png") is None

    (tmp_path / "notes.png").write_bytes(files["notes.txt"])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    train = ["train", "--epochs", "2", "--no-progress"]
    for flag, name, message in (
        ("--json", "a.npy", r"--json .*a\.npy exists and is a \.npy array, not a JSON report"),
        ("--plot", "notes.png", r"--plot .*notes\.png exists and is a text file, not a PNG image"),
    ):
        assert main([*train, flag, str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and re.search(message, err[0]), err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    # An earlier report is replaced.
    assert main([*train, "--json", str(tmp_path / "report.json")]) == 0
    assert "test_acc_mean" in (tmp_path / "report.json").read_text()


def test_a_symbolic_link_as_a_dataset_folder_is_replaced_only_with_overwrite(tmp_path, capsys):
    """A dataset writer's ``--out`` that was a link (dangling, or to an empty folder)
    was replaced without ``--overwrite``, the user's link lost."""
    from sparsegcn.datasets import synthetic_disk

    empty = tmp_path / "empty"
    empty.mkdir()
    for name, target in (("dangling", tmp_path / "gone" / "x"), ("to-empty", empty)):
        link = tmp_path / name
        link.symlink_to(target)
        argv = ["tiny", "--no-progress", "--out", str(link)]
        assert synthetic_disk.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is a symbolic link (to " in err[0], err
        assert link.is_symlink() and os.readlink(link) == str(target)
        # With --overwrite the link is replaced, and what it names is left as it was.
        assert synthetic_disk.main([*argv, "--overwrite"]) == 0
        capsys.readouterr()
        assert link.is_dir() and not link.is_symlink() and (link / "manifest.json").is_file()
    assert not any(empty.iterdir()) and not (tmp_path / "gone").exists()


def test_an_output_through_a_link_into_a_missing_folder_is_refused(tmp_path, capsys):
    """``--json LINK`` whose target's folder is missing made that folder, outside the
    given path's own, and wrote there."""
    from sparsegcn.cli import main

    link = tmp_path / "report.json"
    link.symlink_to(tmp_path / "elsewhere" / "deep" / "r.json")
    assert main(["info", "--dataset", "synthetic:tiny", "--no-progress", "--json", str(link)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a symbolic link to" in err[0] and "does not exist" in err[0]
    assert not (tmp_path / "elsewhere").exists() and link.is_symlink()
    # A link into an existing folder is written through, as before.
    (tmp_path / "elsewhere").mkdir()
    link.unlink()
    link.symlink_to(tmp_path / "elsewhere" / "r.json")
    assert main(["info", "--dataset", "synthetic:tiny", "--no-progress", "--json", str(link)]) == 0
    assert link.is_symlink() and (tmp_path / "elsewhere" / "r.json").is_file()


def test_bench_refuses_a_negative_seed_before_measuring(capsys):
    from sparsegcn.cli import main

    assert main(["bench", "--no-progress", "--seed", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sparsegcn bench: error: --seed must be >= 0 and <= 4294967295, got -1"]

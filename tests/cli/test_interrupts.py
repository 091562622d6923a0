"""Ctrl-C and SIGTERM end a command with one line and 130 or 143, losing nothing.

JAX runs a callback on every garbage collection; a Ctrl-C whose
``KeyboardInterrupt`` is raised in it is printed as "Exception ignored" and
dropped, and the run went on: to ``--overwrite`` another run's checkpoints
and exit 0. The tests below deliver real signals, inside such a callback
where the bug needs it, and check the files on disk.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import sparsegcn as sg
from sparsegcn.cli import main, run_tool
from sparsegcn.cli import train as train_cli
from sparsegcn.train import TrainConfig, init_state, make_optimizer
from sparsegcn.train.checkpoint import CheckpointHook, save_checkpoint

REPO = Path(__file__).resolve().parents[2]
RUN = ["train", "--epochs", "2", "--patience", "0", "--no-progress"]


def outcome(script: str) -> tuple[int, str, str]:
    """``(status, stdout, stderr)`` of ``script`` run by this Python, in a process of its own."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout, done.stderr


def signal_in_gc_callback(signum: int = signal.SIGINT) -> str:
    """Sends ``signum`` to this process while the collector runs a callback, so
    that the exception its handler raises is swallowed, as in JAX's. Returns
    ``"swallowed"``: the exception did not come out here."""

    def callback(phase, info):
        gc.callbacks.remove(callback)
        os.kill(os.getpid(), signum)

    gc.callbacks.append(callback)
    gc.collect()
    return "swallowed"


def other_runs_checkpoint(folder: Path) -> dict[str, bytes]:
    """Saves a checkpoint of another run in ``folder``; its files' contents."""
    model = sg.mlp(3, 2, hidden=4)
    tx = make_optimizer(TrainConfig(epochs=2))
    state = jax.vmap(lambda k: init_state(model, tx, k))(jax.random.split(jax.random.key(0), 1))
    save_checkpoint(
        folder, state._replace(epoch=jnp.full((1,), 2, jnp.int32)), seeds=[0], run_id="other"
    )
    return files_of(folder)


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != ".lock"}


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_a_swallowed_ctrl_c_stops_the_overwrite_and_exits_130(tmp_path, monkeypatch, capsys):
    # Exit 0, and the other run's checkpoint deleted by --overwrite after the Ctrl-C.
    folder = tmp_path / "ck"
    before = other_runs_checkpoint(folder)
    real_save = CheckpointHook.save
    happened: list[str] = []

    def save(self, state, history):  # the first save deletes the other run's checkpoint
        happened.append(signal_in_gc_callback(signal.SIGINT))
        return real_save(self, state, history)

    monkeypatch.setattr(CheckpointHook, "save", save)
    status = main([*RUN, "--checkpoint", str(folder), "--overwrite"])
    assert happened == ["swallowed"]  # dropped by the interpreter, as in JAX's callback
    assert status == 130
    assert one_line(capsys) == "sparsegcn train: interrupted"  # no "Exception ignored" either
    assert files_of(folder) == before


def test_a_tool_reports_no_result_after_a_swallowed_ctrl_c(capsys):
    assert run_tool("tool", signal_in_gc_callback) == 130
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "tool: interrupted\n")
    assert run_tool("tool", lambda: "again") == 0  # the next command starts afresh
    assert capsys.readouterr().out == "again\n"


def test_the_command_restores_the_callers_signal_handlers():
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = [signal.getsignal(s) for s in handled]
    assert run_tool("tool", lambda: "done") == 0
    assert [signal.getsignal(s) for s in handled] == before


@pytest.mark.parametrize(
    "signame, status, word", [("SIGTERM", 143, "terminated"), ("SIGHUP", 129, "hangup")]
)
def test_sigterm_and_sighup_unwind_like_ctrl_c_and_remove_the_folder_the_run_made(
    tmp_path, monkeypatch, capsys, signame, status, word
):
    # SIGTERM, and later SIGHUP (a closed terminal), had no handler: the process
    # died where it stood, leaving the checkpoint folder it had made, holding
    # only its .lock (and a dataset tool its temporary folders of hundreds of MB).
    signum = getattr(signal, signame)
    folder = tmp_path / "new" / "ck"

    def fit_then_signalled(*args, **kwargs):
        assert (folder / ".lock").is_file()  # claimed, nothing saved yet
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.SIG_IGN, None):
            raise RuntimeError(f"{signame} has no handler: it would kill the test process")
        os.kill(os.getpid(), signum)
        raise AssertionError(f"{signame} did not stop the run")

    monkeypatch.setattr("sparsegcn.experiment.run.fit", fit_then_signalled)
    assert main([*RUN, "--checkpoint", str(folder)]) == status
    assert one_line(capsys) == f"sparsegcn train: {word}"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # new/ and new/ck were the run's


def test_a_failed_run_removes_only_the_folder_it_made(tmp_path, monkeypatch, capsys):
    def fit_fails(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("sparsegcn.experiment.run.fit", fit_fails)
    assert main([*RUN, "--checkpoint", str(tmp_path / "made")]) == 1
    assert "No space left on device" in one_line(capsys)
    assert not (tmp_path / "made").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("user notes")
    assert main([*RUN, "--checkpoint", str(kept)]) == 1
    capsys.readouterr()
    assert sorted(p.name for p in kept.iterdir()) == [".lock", "notes.txt"]
    assert (kept / "notes.txt").read_text() == "user notes"


def test_the_command_leaves_with_143_one_line_and_its_lock_released(tmp_path):
    # In a process of its own: the console script's way out (os._exit after the
    # report, past an interpreter teardown that crashed under JAX's threads).
    folder = tmp_path / "ck"
    script = textwrap.dedent(
        f"""
        import os, signal, sys, time
        from sparsegcn import cli
        from sparsegcn.train.checkpoint import FolderLock

        def run(args):
            lock = FolderLock({str(folder)!r}).acquire()
            print("claimed", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)
            lock.release()
            return 0

        cli.train.run = run
        sys.argv = ["sparsegcn", "train"]
        sys.exit(cli.console_main())
        """
    )
    assert outcome(script) == (
        143,
        "claimed\n",
        "sparsegcn train: terminated\n",
    )
    assert not folder.exists()  # the lock released, the folder it made removed


def test_a_command_that_returns_after_a_swallowed_ctrl_c_exits_130(monkeypatch, capsys):
    happened = []

    def run(args):
        happened.append(signal_in_gc_callback(signal.SIGINT))
        return 0

    monkeypatch.setattr(train_cli, "run", run)
    assert main(["train"]) == 130
    assert happened == ["swallowed"]
    assert one_line(capsys) == "sparsegcn train: interrupted"


def test_a_ctrl_c_after_the_work_is_done_says_so_in_one_line_and_exits_130():
    # A signal between the command's last check and the process's end (its
    # outputs written, its result printed) ended it with 130 and nothing on stderr.
    script = textwrap.dedent(
        """
        import os, signal, sys
        import sparsegcn.cli as cli

        def main(argv=None):
            print("done")
            signal.signal(signal.SIGINT, lambda *a: None)  # past the command's checks
            os.kill(os.getpid(), signal.SIGINT)
            cli._interrupt._received = signal.SIGINT  # as the handler records it
            return 0

        cli.main = main
        sys.exit(cli.console_main())
        """
    )
    assert outcome(script) == (130, "done\n", "sparsegcn: interrupted after its work was done\n")


def test_the_console_script_handles_a_ctrl_c_swallowed_while_jax_is_imported(tmp_path):
    # The console script (sparsegcn_console.main) installs the handler before
    # importing sparsegcn: a Ctrl-C swallowed during that import (here, after
    # install_first, in a gc callback) stops the command before it starts.
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    script = textwrap.dedent(
        f"""
        import gc, os, signal, sys
        import sparsegcn_console

        sparsegcn_console.install_first()
        assert "sparsegcn" not in sys.modules  # the handler is in before the package

        def callback(phase, info):
            gc.callbacks.remove(callback)
            os.kill(os.getpid(), signal.SIGINT)

        gc.callbacks.append(callback)
        gc.collect()  # the KeyboardInterrupt is raised in the callback, and swallowed
        sys.argv = ["sparsegcn", *{RUN!r}, "--checkpoint", {str(folder)!r}, "--overwrite"]
        sys.exit(sparsegcn_console.main())
        """
    )
    assert outcome(script) == (130, "", "sparsegcn: interrupted\n")
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    assert (folder / "notes.txt").read_text() == "mine"


def test_python_m_sparsegcn_records_a_ctrl_c_from_before_jax_is_imported(tmp_path):
    # `python -m` imports the package before any command code: the package installs
    # the handler first thing (deferred: recorded, not raised inside an extension's
    # import), and the command acts on it. A Ctrl-C 0.3 s in (JAX takes over a
    # second to import) used to be swallowed: the run went on, exit 0.
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "sparsegcn", *RUN, "--json", str(tmp_path / "r.json")]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        process.wait(timeout=0.3)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert (process.returncode, out) == (130, b"")
    assert err.decode() in ("sparsegcn: interrupted\n", "sparsegcn train: interrupted\n")
    assert not (tmp_path / "r.json").exists()


def test_the_programs_are_every_main_module_and_are_told_apart_from_others(monkeypatch):
    from sparsegcn import _interrupt

    mains = {
        ".".join(path.relative_to(REPO).with_suffix("").parts)
        for path in (REPO / "sparsegcn").rglob("*.py")
        if 'if __name__ == "__main__":' in path.read_text() or path.name == "__main__.py"
    }
    assert mains | {"sparsegcn"} == set(_interrupt.PROGRAMS)
    for argv, module in [
        (["python", "-m", "sparsegcn", "train"], "sparsegcn"),
        (["python", "-X", "dev", "-msparsegcn.datasets.convert"], "sparsegcn.datasets.convert"),
        (["python", "-u", "-m", "pytest", "-m", "slow"], "pytest"),
        (["python", "script.py", "-m", "sparsegcn"], None),
        (["python", "-c", "import sparsegcn", "-m", "sparsegcn"], None),
        (["python"], None),
    ]:
        monkeypatch.setattr(sys, "orig_argv", argv)
        assert _interrupt.program() == module

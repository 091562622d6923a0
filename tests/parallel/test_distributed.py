"""Several processes: settings checks, and two real processes training together."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from distributed_worker import train, train_tasks

from sparsegcn.experiment import Experiment
from sparsegcn.parallel import check_processes, parse_coordinator

TESTS = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120  # for both processes together; a run takes ~20 s on 2 cores


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env() -> dict:
    """The test's environment with one CPU device per process (one device per "host")."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = env.get("XLA_FLAGS", "").split()
    env["XLA_FLAGS"] = " ".join(f for f in flags if "force_host_platform_device_count" not in f)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return env


def run_together(commands: list[list[str]], cwd: Path, returncode: int = 0) -> list[str]:
    """Runs the commands as concurrent processes; returns their output; always reaps them.
    Each must exit with ``returncode``."""
    procs = [
        subprocess.Popen(
            cmd, cwd=cwd, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for cmd in commands
    ]
    deadline = time.monotonic() + TIMEOUT_S
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            outputs.append(out.decode(errors="replace"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the processes did not finish within {TIMEOUT_S} s")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:  # a timed-out pipe, else a ResourceWarning later
                proc.stdout.close()
    for i, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == returncode, (
            f"process {i} exited with {proc.returncode}:\n{out[-4000:]}"
        )
    return outputs


def test_coordinator_addresses_are_parsed_and_checked():
    assert parse_coordinator("127.0.0.1:1234") == ("127.0.0.1", 1234)
    assert parse_coordinator("node-7.cluster:80") == ("node-7.cluster", 80)
    assert parse_coordinator("[::1]:9000") == ("::1", 9000)
    for bad in ("127.0.0.1", ":1234", "host:0", "host:65536", "host:port"):
        with pytest.raises(ValueError, match="coordinator must be HOST:PORT"):
            parse_coordinator(bad)
    with pytest.raises(TypeError, match="coordinator must be a 'HOST:PORT' string"):
        parse_coordinator(1234)


def test_process_settings_are_checked_before_anything_starts():
    check_processes(None, 1, 0)
    check_processes("10.0.0.1:1234", 4, 3)
    with pytest.raises(ValueError, match=r"process_id must be in \[0, num_processes=2\), got 2"):
        check_processes("10.0.0.1:1234", 2, 2)
    with pytest.raises(ValueError, match="num_processes=2 needs a coordinator address"):
        check_processes(None, 2, 0)
    with pytest.raises(ValueError, match="num_processes must be >= 1, got 0"):
        check_processes(None, 0, 0)
    with pytest.raises(ValueError, match="coordinator must be HOST:PORT"):
        Experiment(coordinator="localhost", num_processes=2, process_id=1)
    with pytest.raises(ValueError, match="devices must be >= 1, got 0"):
        Experiment(devices=0)
    with pytest.raises(ValueError, match="backend='dense' has no sharded form"):
        Experiment(devices=2, backend="dense")
    assert Experiment(devices=2).parallel and not Experiment().parallel
    assert Experiment(coordinator="h:1", num_processes=2).parallel


@pytest.mark.parametrize(
    "tasks",
    # The graph and link trainers (11 s): slow; the CLI runs of every task across two
    # processes are slow tests below.
    [False, pytest.param(True, marks=pytest.mark.slow)],
)
def test_two_processes_train_together_and_agree_with_one_process(tmp_path, tasks):
    coordinator = f"127.0.0.1:{free_port()}"
    worker = [sys.executable, str(TESTS / "distributed_worker.py"), "--coordinator", coordinator]
    worker += ["--tasks"] if tasks else []
    commands = [
        [
            *worker,
            "--num-processes",
            "2",
            "--process-id",
            str(i),
            "--out",
            str(tmp_path / f"{i}.npz"),
        ]
        for i in range(2)
    ]
    run_together(commands, tmp_path)
    first, second = (dict(np.load(tmp_path / f"{i}.npz")) for i in range(2))
    assert sorted(first) == sorted(second)
    names = {"graph/train_loss", "link/loss", "sampled_link/loss"}
    assert (names if tasks else {"sage/loss", "gcn/loss"}) <= set(first)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    # One process with two devices runs the same program: same keys, same
    # batches, the collectives summing in another order at most.
    alone = train_tasks(2) if tasks else train(2)
    assert sorted(alone) == sorted(first)
    for name, value in alone.items():
        np.testing.assert_allclose(first[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_cli_runs_across_two_processes(tmp_path):
    coordinator = f"127.0.0.1:{free_port()}"
    argv = ["train", "--model", "sage", "--epochs", "3", "--seeds", "2", "--hidden", "8"]
    argv += ["--fanouts", "5,3", "--batch-size", "64", "--no-progress"]
    argv += ["--coordinator", coordinator, "--num-processes", "2"]
    # The checkpoint folder's options on every process (process 1 used to refuse them).
    argv += ["--checkpoint", str(tmp_path / "ckpt"), "--keep", "1", "--checkpoint-every", "1"]
    commands = [
        [sys.executable, "-m", "sparsegcn", *argv, "--process-id", str(i), "--json", f"{i}.json"]
        for i in range(2)
    ]
    outputs = run_together(commands, tmp_path)
    assert "devices: 2 (data_parallel) over 2 process(es)" in outputs[0]
    reports = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    for report in reports:
        assert (report["devices"], report["processes"]) == (2, 2)
    assert reports[0]["test_acc"] == reports[1]["test_acc"]
    assert reports[0]["checkpoint"] and reports[1]["checkpoint"] is None  # process 0 writes
    assert len(list((tmp_path / "ckpt").glob("ckpt-*.json"))) == 1


GRAPH_RUN = ["--dataset", "tu:MINI", "--model", "gin", "--folds", "3", "--hidden", "8"]
LINK_RUN = ["--dataset", "synthetic:tiny", "--scale", "0.05", "--task", "link", "--model", "gae"]
PROTEINS = ["--dataset", "synthetic:proteins", "--scale", "0.01", "--hidden", "16"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "argv", "key"),
    [
        ("graph", GRAPH_RUN, "test_acc"),
        ("link", LINK_RUN, "test_auc"),
        ("node-multilabel", [*PROTEINS, "--model", "sage", "--fanouts", "5,5"], "test_rocauc"),
        ("node-multilabel", [*PROTEINS, "--model", "gcn"], "test_rocauc"),
        (
            "hetero",
            [
                "--dataset",
                "synthetic:mag",
                "--scale",
                "0.002",
                "--hidden",
                "16",
                "--model",
                "rgcn",
                "--fanouts",
                "5,3",
            ],
            "test_acc",
        ),
    ],
)
def test_cli_task_runs_across_two_processes_equal_one_process_of_two_devices(
    tmp_path, task, argv, key
):
    from graph_sets import write_mini

    write_mini(tmp_path / "tu" / "MINI")
    coordinator = f"127.0.0.1:{free_port()}"
    base = ["train", *argv, "--root", str(tmp_path), "--epochs", "3", "--no-progress"]
    parallel = [*base, "--coordinator", coordinator, "--num-processes", "2"]
    parallel += ["--checkpoint", str(tmp_path / "ckpt")]
    commands = [
        [
            sys.executable,
            "-m",
            "sparsegcn",
            *parallel,
            "--process-id",
            str(i),
            "--json",
            f"{i}.json",
        ]
        for i in range(2)
    ]
    run_together(commands, tmp_path)
    reports = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    for report in reports:
        assert (report["task"], report["devices"], report["processes"]) == (task, 2, 2)
    assert reports[0][key] == reports[1][key]
    assert reports[0]["checkpoint"] and reports[1]["checkpoint"] is None  # process 0 writes
    # One process of two (simulated) devices runs the same program.
    from sparsegcn.cli import main

    assert main([*base, "--devices", "2", "--json", str(tmp_path / "one.json")]) == 0
    alone = json.loads((tmp_path / "one.json").read_text())
    np.testing.assert_allclose(reports[0][key], alone[key], rtol=1e-4, atol=1e-6)


def test_processes_on_one_host_given_one_json_path_are_refused_before_the_data_is_read(
    tmp_path,
):
    # Both processes renamed their report onto one file: the last one kept it, process
    # 0's report (the one naming the checkpoint) was lost, and nothing said so.
    (tmp_path / "sub").mkdir()
    root = tmp_path / "missing-root"  # nothing is read: it need not exist
    argv = ["train", "--dataset", "cora", "--root", str(root), "--epochs", "5", "--no-progress"]
    argv += ["--coordinator", f"127.0.0.1:{free_port()}", "--num-processes", "2"]
    paths = ["report.json", "sub/../report.json"]  # one file, spelled two ways
    commands = [
        [sys.executable, "-m", "sparsegcn", *argv, "--json", paths[i], "--process-id", str(i)]
        for i in range(2)
    ]
    for out in run_together(commands, tmp_path, returncode=2):
        assert out.strip().splitlines()[-1] == (
            "sparsegcn train: error: processes 0 and 1 would write --json to the same file on "
            "one host, and one report would replace the other; give each process its own "
            "--json path"
        )
    assert not root.exists() and not (tmp_path / "report.json").exists()


def test_output_identity_names_the_file_a_write_replaces(tmp_path):
    from sparsegcn.files import output_identity

    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "sub")
    (tmp_path / "to-file").symlink_to(tmp_path / "sub" / "r.json")
    same = {
        output_identity(p)
        for p in (
            tmp_path / "sub" / "r.json",
            tmp_path / "sub" / ".." / "sub" / "r.json",
            tmp_path / "link" / "r.json",
            tmp_path / "to-file",  # a link is written through, to its target
        )
    }
    assert len(same) == 1 and same != {bytes(8)}
    assert output_identity(tmp_path / "sub" / "s.json") not in same
    # Nothing replaced: no path, and outputs written in place by each process.
    assert output_identity(None) == output_identity("/dev/null") == bytes(8)
    assert output_identity("/dev/stdout") == bytes(8)


class _State(NamedTuple):
    """The least save_checkpoint takes: a pytree with an ``epoch`` per seed."""

    epoch: np.ndarray
    w: np.ndarray


def test_processes_given_different_settings_are_refused_before_the_data_is_read(tmp_path):
    # Resumed from two different checkpoints, or trained with two learning rates, the
    # processes ran the same collectives on different replicas and process 0 saved the
    # mix as a well-formed checkpoint.
    from sparsegcn.experiment import process_settings
    from sparsegcn.train import save_checkpoint
    from sparsegcn.train.checkpoint import read_manifest

    for name, epoch in (("a", 3), ("b", 4)):
        state = {"epoch": np.full(1, epoch), "w": np.full(2, float(epoch), np.float32)}
        save_checkpoint(tmp_path / name, _State(**state), seeds=[0])
    assert read_manifest(tmp_path / "a")["epoch"] == 3
    root = tmp_path / "missing-root"  # nothing is read: it need not exist
    coordinator = f"127.0.0.1:{free_port()}"
    argv = ["train", "--dataset", "cora", "--root", str(root), "--epochs", "5", "--no-progress"]
    argv += ["--coordinator", coordinator, "--num-processes", "2"]
    differ = [["--lr", "0.01", "--resume", "a"], ["--lr", "0.02", "--resume", "b"]]
    commands = [
        [sys.executable, "-m", "sparsegcn", *argv, *differ[i], "--process-id", str(i)]
        for i in range(2)
    ]
    outputs = run_together(commands, tmp_path, returncode=2)
    for out in outputs:
        assert out.strip().splitlines()[-1] == (
            "sparsegcn train: error: the processes of this run were given different lr, "
            "resume: process(es) [1] differ from process 0; run the same command on every "
            "process (only --process-id, --root and the output paths may differ; a checkpoint "
            "to resume from must be the same file everywhere)"
        )
    assert not root.exists()
    # What may differ: the index, the data root, where the outputs go (not whether).
    base = Experiment(coordinator="h:1", num_processes=2, checkpoint="ck", plot="p.png")
    other = Experiment(
        coordinator="h2:1", num_processes=2, process_id=1, root="/elsewhere", checkpoint="c2",
        plot="q.png",
    )  # fmt: skip
    assert process_settings(base) == process_settings(other)
    assert process_settings(base) != process_settings(
        Experiment(coordinator="h:1", num_processes=2)
    )
    # Process 1 writes nothing: its run drops the checkpoint folder's options (with
    # --keep, --checkpoint-every or --overwrite it used to be refused, and process 0 hung).
    writer = Experiment(checkpoint="ck", keep=2, checkpoint_every=10, overwrite=True, plot="p.png")
    assert writer.for_process(0) is writer
    alone = writer.for_process(1)
    assert (alone.checkpoint, alone.plot, alone.keep, alone.overwrite) == (None, None, None, False)

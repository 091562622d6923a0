"""Peers that live in their own virtual environments: DGL, Jraph and PyG.

None is a dependency of sparsegcn, and DGL pins a torch of its own, so
each runs as a child process under its environment's Python, speaking
:mod:`peer_protocol`. :func:`start_peer` finds that Python from an option or
an environment variable and returns a :class:`PeerProcess`, or the reason
the peer is missing (a row that says so, never an error).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# peer name -> (script, environment variable naming its Python)
PEERS = {
    "dgl": ("dgl_peer.py", "SPARSEGCN_DGL_PYTHON"),
    "jraph": ("jraph_peer.py", "SPARSEGCN_JRAPH_PYTHON"),
    "pyg": ("pyg_peer.py", "SPARSEGCN_PYG_PYTHON"),
}


class PeerError(RuntimeError):
    """A request the peer answered with an error, or a peer that died."""


class PeerProcess:
    """A running peer: :meth:`setup` a case, then :meth:`time` calls of it."""

    def __init__(self, name: str, python: str):
        script, _ = PEERS[name]
        self.name = name
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in close())
        self._process = subprocess.Popen(
            [python, str(HERE / script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=peer_environment(),
        )
        try:
            hello = self._read()
        except PeerError:
            self.close()
            raise
        if not hello.get("ok"):
            self.close()
            raise PeerError(hello.get("reason", "did not start"))
        self.versions: dict = hello["versions"]
        self.versions["glibc_tunables"] = peer_environment().get("GLIBC_TUNABLES", "")

    def _read(self) -> dict:
        line = self._process.stdout.readline()
        if not line:
            self._stderr.seek(0)
            tail = self._stderr.read()[-400:].strip().replace("\n", " | ")
            raise PeerError(f"{self.name} peer exited (rc {self._process.poll()}): {tail}")
        return json.loads(line)

    def request(self, **message) -> dict:
        self._process.stdin.write(json.dumps(message) + "\n")
        self._process.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise PeerError(f"{self.name}: {answer['error']}")
        return answer

    def setup(self, case: str, **spec) -> dict:
        """Builds ``case``; answers ``setup_s``, ``first_call_s`` and ``stats``."""
        return self.request(op="setup", case=case, spec=spec)

    def time(self, case: str, repeats: int) -> dict:
        """``repeats`` timed calls of ``case`` (set up before): ``times_s`` and ``stats``."""
        return self.request(op="time", case=case, repeats=repeats)

    def output(self, case: str) -> np.ndarray:
        """One call's result of ``case`` (set up before)."""
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "out.npy")
            self.request(op="output", case=case, path=path)
            return np.load(path)

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self._process.stdin.flush()
                self._process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        for stream in (self._process.stdin, self._process.stdout, self._stderr):
            if not stream.closed:
                with contextlib.suppress(OSError):  # a broken pipe to a peer that died
                    stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def peer_environment() -> dict[str, str]:
    """The environment a peer starts in: ours, plus, when this process keeps
    freed memory (:func:`sparsegcn.allocator.keep_freed_memory`, as the
    ``sparsegcn`` command and the benchmarks do), the same glibc settings as
    ``$GLIBC_TUNABLES``, so that neither side pays page faults the other does
    not (the peers' own torch allocations fault as XLA's did)."""
    from sparsegcn import allocator

    env = dict(os.environ)
    if allocator.keeps_freed_memory():
        given = env.get("GLIBC_TUNABLES", "")
        env["GLIBC_TUNABLES"] = ":".join(filter(None, (given, allocator.GLIBC_TUNABLES)))
    return env


def peer_python(name: str, given: str | None = None) -> str | None:
    """The peer's Python: ``given`` (an option), else its environment variable."""
    if name not in PEERS:
        raise ValueError(f"peer {name!r} is not one of {sorted(PEERS)}")
    return given or os.environ.get(PEERS[name][1]) or None


def start_peer(name: str, given: str | None = None) -> PeerProcess | str:
    """A started :class:`PeerProcess`, or why the peer is missing."""
    python = peer_python(name, given)
    if python is None:
        return f"no Python given (--{name}-python or ${PEERS[name][1]})"
    if not os.access(python, os.X_OK):
        return f"{python} is not an executable"
    try:
        return PeerProcess(name, python)
    except (PeerError, OSError) as err:
        return str(err)


def write_npz(folder: str, stem: str, **arrays) -> str:
    """``arrays`` saved to ``folder/stem.npz`` (through a temp name), for every peer to read."""
    path = os.path.join(folder, f"{stem}.npz")
    partial = os.path.join(folder, f"{stem}.partial.npz")
    np.savez(partial, **arrays)
    os.replace(partial, path)
    return path

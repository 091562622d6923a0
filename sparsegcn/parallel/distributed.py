"""Several processes, one run: JAX's own multi-process runtime.

Each process (typically one per host) runs the same program;
``jax.distributed.initialize`` connects them through a coordinator (process
0 listens on ``HOST:PORT``), after which ``jax.devices()`` lists every
process's devices, a :func:`~sparsegcn.parallel.make_mesh` mesh spans them
all and collectives (``psum``, ``all_gather``) cross process boundaries. On
CPU the collectives run over gloo (TCP).

It must run before anything starts JAX's backend (creating an array,
``jax.devices()``): ``sparsegcn train --coordinator`` calls
:func:`initialize` first thing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import jax
import numpy as np

from sparsegcn import _checks


def parse_coordinator(address: str) -> tuple[str, int]:
    """Splits ``"HOST:PORT"`` (``"[::1]:PORT"`` for IPv6) into host and port.

    Raises:
      ValueError: naming the address, when it has no host or no port in
        ``[1, 65535]``.
    """
    if not isinstance(address, str):
        raise TypeError(f"coordinator must be a 'HOST:PORT' string, got {address!r}")
    host, sep, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(
            f"coordinator must be HOST:PORT with a port in [1, 65535], e.g. 10.0.0.1:1234, "
            f"got {address!r}"
        )
    return host, int(port)


def check_processes(coordinator: str | None, num_processes: int, process_id: int) -> None:
    """Validates a multi-process setting (host-side, before anything starts).

    Raises:
      ValueError: ``num_processes < 1``, ``process_id`` outside
        ``[0, num_processes)``, several processes without a coordinator, or
        a malformed coordinator address.
    """
    num_processes = _checks.check_static_int("num_processes", num_processes, minimum=1)
    process_id = _checks.check_static_int("process_id", process_id, minimum=0)
    if process_id >= num_processes:
        raise ValueError(
            f"process_id must be in [0, num_processes={num_processes}), got {process_id}"
        )
    if coordinator is None:
        if num_processes > 1:
            raise ValueError(
                f"num_processes={num_processes} needs a coordinator address: --coordinator "
                "HOST:PORT, the same on every process (process 0 listens there)"
            )
        return
    parse_coordinator(coordinator)


def initialize(
    coordinator: str, num_processes: int, process_id: int, *, timeout_s: int = 300
) -> None:
    """Joins a multi-process run through ``jax.distributed.initialize``.

    Every process calls it with the same ``coordinator`` and
    ``num_processes`` and its own ``process_id``; it returns once all
    have joined (or fails after ``timeout_s``). Collectives on CPU use gloo.
    Calling it again with the same settings does nothing.

    Args:
      coordinator: ``"HOST:PORT"`` where process 0 listens, reachable by all.
      num_processes: ``P >= 1``.
      process_id: this process's index in ``[0, P)``.
      timeout_s: seconds to wait for every process to join.

    Raises:
      ValueError: bad settings (see :func:`check_processes`); JAX already
        started, or already joined with other settings; or joining failed
        (the message names the coordinator and the cause).
    """
    check_processes(coordinator, num_processes, process_id)
    if jax.distributed.is_initialized():
        if (jax.process_count(), jax.process_index()) == (num_processes, process_id):
            return
        raise ValueError(
            f"this process already joined a run as process {jax.process_index()} of "
            f"{jax.process_count()}; it cannot join as process {process_id} of {num_processes}"
        )
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=timeout_s,
        )
    except RuntimeError as err:
        raise ValueError(
            f"could not join the run at {coordinator} as process {process_id} of "
            f"{num_processes} (multi-process initialization must come before JAX is used, and "
            f"every process must reach the coordinator within {timeout_s} s): {err}"
        ) from err


def check_same_settings(settings: Mapping[str, str]) -> None:
    """Refuses a multi-process run whose processes were given different settings.

    Every process passes the settings that must agree (``{name: text}``; the
    same names on every process); each setting's sha256 is gathered from
    every process (``multihost_utils.process_allgather``, one collective of
    ``8 K`` bytes a process) and compared with process 0's. Processes that
    train on different data, hyperparameters or checkpoints would run the
    same collectives on different replicas: the result (and a checkpoint
    process 0 writes) would be wrong without any error. Does nothing in a
    one-process run.

    Raises:
      ValueError: on every process alike, naming the settings that differ and
        the processes that hold another value than process 0.
    """
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    names = sorted(settings)
    rows = [hashlib.sha256(f"{n}\0{settings[n]}".encode()).digest()[:8] for n in names]
    ours = np.frombuffer(b"".join(rows), np.uint32).reshape(len(names), 2)
    counts = np.asarray(multihost_utils.process_allgather(np.array([len(names)], np.int32)))
    if len(set(counts.ravel().tolist())) > 1:
        raise ValueError(
            f"the processes of this run compare {sorted(set(counts.ravel().tolist()))} settings: "
            f"run the same sparsegcn version on every process"
        )
    every = np.asarray(multihost_utils.process_allgather(ours))  # [P, K, 2]
    differ = (every != every[:1]).any(axis=2)  # [P, K]
    if differ.any():
        which = [names[k] for k in np.flatnonzero(differ.any(axis=0))]
        processes = np.flatnonzero(differ.any(axis=1)).tolist()
        raise ValueError(
            f"the processes of this run were given different {', '.join(which)}: process(es) "
            f"{processes} differ from process 0; run the same command on every process (only "
            f"--process-id, --root and the output paths may differ; a checkpoint to resume "
            f"from must be the same file everywhere)"
        )


def check_distinct_outputs(outputs: Mapping[str, str | None]) -> None:
    """Refuses a multi-process run in which two processes on one host would write
    one file.

    ``outputs`` is ``{flag: path}`` of the files every process writes (each
    its own report, ``--json``); ``None`` entries are not written. Each
    process gathers every process's :func:`~sparsegcn.files.output_identity`
    of each path (one ``process_allgather`` of 8 bytes an output): two
    processes that would rename their file onto one path keep only the
    last, and nothing says which. The same path on different hosts, and
    outputs written in place (``/dev/stdout``), are allowed. Does nothing in
    a one-process run.

    Raises:
      ValueError: on every process alike, naming the flag and the processes.
    """
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    from sparsegcn.files import output_identity

    names = sorted(outputs)
    if not names:
        return
    ours = np.frombuffer(b"".join(output_identity(outputs[n]) for n in names), np.uint32)
    every = np.asarray(multihost_utils.process_allgather(ours.reshape(len(names), 2)))
    for k, name in enumerate(names):
        first: dict[bytes, int] = {}
        for process in range(every.shape[0]):
            identity = every[process, k].tobytes()
            if not any(identity):
                continue
            if identity in first:
                raise ValueError(
                    f"processes {first[identity]} and {process} would write {name} to the "
                    f"same file on one host, and one report would replace the other; give "
                    f"each process its own {name} path"
                )
            first[identity] = process


def shutdown() -> None:
    """Leaves the multi-process run, if this process joined one."""
    if jax.distributed.is_initialized():
        jax.distributed.shutdown()

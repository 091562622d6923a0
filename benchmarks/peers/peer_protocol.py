"""The line protocol between ``compare.py`` and a peer in its own environment.

A peer (``dgl_peer.py``, ``jraph_peer.py``) runs under its own Python, with
its own torch / JAX, and never imports sparsegcn: this file is standard
library and NumPy only, and both sides import it. ``compare.py`` starts the
peer, writes one JSON object a line to its stdin and reads one JSON object a
line from its stdout:

- on start the peer says ``{"ok": true, "versions": {...}}``, or
  ``{"ok": false, "reason": "..."}`` when its library does not import;
- ``{"op": "setup", "case": NAME, "spec": {...}}`` builds the case from
  ``spec`` (which names an ``.npz`` written by ``compare.py``, so every peer
  reads the same arrays), runs it ``spec["warmup"]`` times and answers
  ``{"setup_s", "first_call_s", "stats", "peak_rss_gb"}``: the first call holds compilation
  or lazy format building, reported apart from the timed calls;
- ``{"op": "time", "case": NAME, "repeats": K}`` times ``K`` calls of a case
  set up before (several stay set up, so rounds can alternate) and answers
  ``{"times_s": [...], "stats": {...}, "peak_rss_gb": G}`` (the peer
  process's peak resident set so far, GB);
- ``{"op": "output", "case": NAME, "path": P}`` saves one call's result to
  ``P`` (``.npy``);
- ``{"op": "quit"}`` ends the peer.

A failing request answers ``{"error": "..."}`` and the peer goes on. Each
case's callable returns only after its work is finished (``block_until_ready``
for JAX; torch on the CPU is synchronous), so wall-clock timing around it is
the finished work.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable

import numpy as np

# A case builder takes the request's spec and returns ``(run, stats)``:
# ``run()`` performs one timed call and returns its result; ``stats`` is a
# dict the peer may fill while running (sizes of sampled blocks, say).
Builder = Callable[[dict], tuple[Callable[[], object], dict]]


def peak_rss_gb() -> float:
    """This process's peak resident set size so far, in GB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def _set_up(cases: dict, request: dict):
    name = request.get("case")
    if name not in cases:
        raise ValueError(f"case {name!r} was not set up (set up: {sorted(cases)})")
    return cases[name]


def serve(builders: dict[str, Builder], versions: Callable[[], dict]) -> int:
    """Answers requests from stdin until ``quit`` or end of input."""
    reply_to = sys.stdout
    sys.stdout = sys.stderr  # a library's prints must not break the protocol

    def reply(message: dict) -> None:
        reply_to.write(json.dumps(message) + "\n")
        reply_to.flush()

    try:
        found = versions()
    except Exception as err:  # an import failure is a missing peer, not a crash
        reply({"ok": False, "reason": f"{type(err).__name__}: {err}"})
        return 0
    reply({"ok": True, "versions": found})
    cases: dict[str, tuple[Callable[[], object], dict]] = {}
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "quit":
                break
            if op == "setup":
                name = request["case"]
                if name not in builders:
                    raise ValueError(f"case {name!r} is not one of {sorted(builders)}")
                tick = time.perf_counter()
                run, stats = builders[name](request["spec"])
                setup_s = time.perf_counter() - tick
                tick = time.perf_counter()
                run()
                first_call_s = time.perf_counter() - tick
                for _ in range(int(request["spec"].get("warmup", 1))):
                    run()
                cases[name] = (run, stats)
                reply(
                    {
                        "setup_s": setup_s,
                        "first_call_s": first_call_s,
                        "stats": stats,
                        "peak_rss_gb": peak_rss_gb(),
                    }
                )
            elif op == "time":
                run, stats = _set_up(cases, request)
                times = []
                for _ in range(int(request["repeats"])):
                    tick = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - tick)
                reply({"times_s": times, "stats": stats, "peak_rss_gb": peak_rss_gb()})
            elif op == "output":
                run, _ = _set_up(cases, request)
                np.save(request["path"], np.asarray(run(), np.float32))
                reply({"saved": request["path"]})
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as err:
            reply({"error": f"{type(err).__name__}: {err}"})
    return 0

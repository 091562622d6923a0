"""keep_freed_memory: large buffers are reused instead of being faulted in again.

Each case runs in a fresh interpreter: the setting lasts for the whole process. The
interpreter loads ``sparsegcn.allocator`` alone, without the package's ``__init__`` (which
imports JAX, about 2 s a process): the module needs nothing but the standard library.
"""

import importlib.util
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt is glibc's",
)

# Allocates, touches and frees a buffer of `size` float64 `count` times, in the
# main thread or in a new one (as XLA's worker threads do); prints the page faults.
FAULTS = """
import resource, sys, threading, types
import numpy as np
package = types.ModuleType("sparsegcn")
package.__path__ = {path!r}
sys.modules["sparsegcn"] = package
import sparsegcn.allocator as allocator
np._core.multiarray._set_madvise_hugepage(False)  # count 4 KiB pages
applied = {call}

def work():
    for _ in range({count}):
        buffer = np.ones({size})  # every page written
        del buffer

before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
if {threaded}:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
else:
    work()
after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(applied, allocator.keeps_freed_memory(), after - before)
"""


def run(
    call: str, threaded: bool = False, size: int = 8 << 20, count: int = 20, **env
) -> tuple[str, str, int]:
    spec = importlib.util.find_spec("sparsegcn")  # finds the package without running it
    assert spec is not None and spec.submodule_search_locations is not None
    path = list(spec.submodule_search_locations)
    code = FAULTS.format(call=call, threaded=threaded, size=size, count=count, path=path)
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")},
            "GLIBC_TUNABLES": "",
            **env,
        },
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0], out[1], int(out[2])


@pytest.mark.parametrize("threaded", [False, True], ids=["main-thread", "worker-thread"])
def test_freed_buffers_are_reused_instead_of_faulted_in_again(threaded):
    applied, recorded, kept = run("allocator.keep_freed_memory()", threaded)
    assert (applied, recorded) == ("True", "True")
    _, recorded, default = run("None", threaded)
    assert recorded == "False"
    # 20 x 16,384 pages of 4 KiB by default; kept: about the first buffer's pages only.
    assert default > 10 * 16_384, default
    assert kept < default / 5, (kept, default)


def test_a_free_top_over_2_gib_is_not_handed_back():
    # 2.125 GiB twice: the largest int as the trim threshold (2 GiB) would
    # return the freed top to the kernel and fault both in.
    size, count = 17 << 24, 2
    pages = size * 8 // 4096
    _, _, kept = run("allocator.keep_freed_memory()", size=size, count=count)
    assert kept < 1.5 * pages, (kept, pages)


def test_the_environment_variable_turns_it_off():
    assert run("allocator.keep_freed_memory_unless_disabled()", SPARSEGCN_KEEP_FREED_MEMORY="0")[
        :2
    ] == ("False", "False")
    assert run("allocator.keep_freed_memory_unless_disabled()")[:2] == ("True", "True")

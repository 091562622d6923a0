"""keep_freed_memory: large buffers are reused instead of being faulted in again.

Each case runs in a fresh interpreter: the setting lasts for the whole process.
"""

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt is glibc's",
)

# Allocates, touches and frees a 64 MiB buffer 20 times; prints the page faults.
FAULTS = """
import resource, sys
import numpy as np
import sparsegcn.allocator as allocator
np._core.multiarray._set_madvise_hugepage(False)  # count 4 KiB pages
applied = {call}
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    buffer = np.ones(8 << 20)  # 64 MiB, every page written
    del buffer
after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(applied, allocator.keeps_freed_memory(), after - before)
"""


def run(call: str, **env) -> tuple[str, str, int]:
    out = subprocess.run(
        [sys.executable, "-c", FAULTS.format(call=call)],
        env={**os.environ, "GLIBC_TUNABLES": "", **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0], out[1], int(out[2])


def test_freed_buffers_are_reused_instead_of_faulted_in_again():
    applied, recorded, kept = run("allocator.keep_freed_memory()")
    assert (applied, recorded) == ("True", "True")
    _, recorded, default = run("None")
    assert recorded == "False"
    # 20 x 16,384 pages of 4 KiB by default; kept: about the first buffer's pages only.
    assert default > 10 * 16_384, default
    assert kept < default / 5, (kept, default)


def test_the_environment_variable_turns_it_off():
    assert run("allocator.keep_freed_memory_unless_disabled()", SPARSEGCN_KEEP_FREED_MEMORY="0")[
        :2
    ] == ("False", "False")
    assert run("allocator.keep_freed_memory_unless_disabled()")[:2] == ("True", "True")

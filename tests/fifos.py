"""A FIFO for tests of code that must not read one, which never hangs a test."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from pathlib import Path


@contextlib.contextmanager
def fifo(path: Path):
    """Makes ``path`` a FIFO; a thread unblocks whoever opens it for reading (an
    empty file is what they read)."""
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    done = threading.Event()

    def unblock():
        while not done.wait(0.02):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as err:  # ENXIO: no reader is waiting
                if err.errno != errno.ENXIO:
                    return
                continue
            os.close(fd)

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join(timeout=5)

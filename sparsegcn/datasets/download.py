"""Verified, atomic file downloads over HTTP(S).

:func:`download_file` never leaves a partial file behind: it streams into a
temporary file in the destination's folder, checks the byte count and the
sha256 digest, fsyncs, and only then renames the file into place with
:func:`os.replace` (atomic on POSIX and Windows). Any failure removes the
temporary file and raises. With ``max_bytes`` a body larger than that is
refused (up front when ``Content-Length`` announces it), so a server that
never stops sending cannot fill the disk; a minimum rate and an overall
deadline (by default scaled to the body's size: :data:`DEADLINE`,
:data:`DEADLINE_RATE`) cut off one that sends too slowly.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Literal

from tqdm.auto import tqdm

from sparsegcn.files import (
    make_folders,
    naming_errors,
    remove_made_folders,
    sha256_file,
    temp_file_path,
)

_CHUNK = 1 << 20
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

MIN_RATE = 1024.0
"""Bytes per second a download must average over every ``timeout`` seconds (a server
that trickles a byte at a time never trips the per-read timeout)."""

DEADLINE = 3600.0
"""Seconds any download may take by default (``deadline="auto"``), however small."""

DEADLINE_RATE = 100_000.0
"""Bytes per second the default deadline allows a large body at least: a body of ``n``
bytes (its ``Content-Length``, else ``max_bytes``) gets ``max(DEADLINE, n / DEADLINE_RATE)``
seconds: an hour up to 360 MB, ten hours for 3.6 GB, a week for 60 GB. Generous (a
tenth of a slow 8 Mbit/s line), but finite: a server that keeps a download just above
:data:`MIN_RATE` would otherwise hold it for days."""


def _default_deadline(size: int | None) -> float:
    """The ``"auto"`` deadline for a body of ``size`` bytes (``None``: unknown)."""
    return DEADLINE if size is None else max(DEADLINE, size / DEADLINE_RATE)


class _Watchdog:
    """Shuts a download's sockets down when it falls below a rate or passes a deadline.

    A thread wakes every fraction of ``window`` seconds. When fewer than
    ``min_rate * window`` bytes arrived in the last ``window`` seconds (the
    headers' wait included), or ``deadline`` seconds have passed since the
    start, it records why and shuts every socket of the download down, so a
    read blocked on it returns at once.
    """

    def __init__(self, *, window: float, min_rate: float, deadline: float | None):
        self.window, self.min_rate, self.deadline = window, min_rate, deadline
        self.received = 0
        self.total: int | None = None  # the announced size, for messages
        self.reason: str | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="download-watchdog", daemon=True)

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self._thread.join()

    def stop(self) -> str | None:
        """Stops watching; returns why the download was cut off, or ``None``."""
        with self._lock:
            self._done.set()
            return self.reason

    def watch(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
            if self.reason is not None:
                _shut(sock)
        return sock

    def _watch(self) -> None:
        start = time.monotonic()
        mark, marked = start, 0
        # The deadline may change once the headers announce the size: re-read each time.
        while not self._done.wait(min(self.window, self.deadline or self.window) / 8):
            now = time.monotonic()
            if self.deadline is not None and now - start >= self.deadline:
                of = "" if self.total is None else f" of {self.total}"
                self._fire(
                    f"did not finish within the deadline of {self.deadline:g} s: cut off "
                    f"after {now - start:.2f} s with {self.received}{of} bytes received"
                )
                return
            if now - mark >= self.window:
                got = self.received - marked
                if got < self.min_rate * (now - mark):
                    self._fire(
                        f"stalled: {got} bytes in the last {now - mark:.3g} s, below the "
                        f"minimum rate of {self.min_rate:g} bytes/s"
                    )
                    return
                mark, marked = now, self.received

    def _fire(self, reason: str) -> None:
        with self._lock:
            if self._done.is_set():  # finished in the meantime
                return
            self.reason = reason
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _watched(connection_class, watchdog: _Watchdog):
    """``connection_class`` (an ``http.client`` connection) whose sockets ``watchdog`` watches."""

    def make(*args, **kwargs):
        connection = connection_class(*args, **kwargs)
        create = connection._create_connection
        connection._create_connection = lambda *a, **k: watchdog.watch(create(*a, **k))
        return connection

    return make


class _WatchedHandler(urllib.request.HTTPSHandler):
    """Opens ``http://`` and ``https://`` URLs on connections ``watchdog`` watches."""

    def __init__(self, watchdog: _Watchdog):
        super().__init__()
        self.watchdog = watchdog

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self.watchdog), req)

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self.watchdog), req)

    http_request = urllib.request.AbstractHTTPHandler.do_request_


def _opener(watchdog: _Watchdog) -> urllib.request.OpenerDirector:
    """An opener with HTTP(S) handlers only (urllib's default one would also follow a
    redirect to ftp://, and open file:// and data: URLs), its sockets watched."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.UnknownHandler(),
        _WatchedHandler(watchdog),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPRedirectHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


def _check_url(url: str) -> None:
    if not isinstance(url, str):
        raise TypeError(f"url must be a string, got {type(url).__name__}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"only http:// and https:// URLs can be downloaded, got {url!r}")


def _check_sha256(sha256: str | None) -> str | None:
    if sha256 is None:
        return None
    if not isinstance(sha256, str) or not _SHA256_HEX.fullmatch(sha256.lower()):
        raise ValueError(f"sha256 must be 64 hex digits or None, got {sha256!r}")
    return sha256.lower()


def _content_length(response) -> int | None:
    value = response.headers.get("Content-Length")
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        return None
    return length if length >= 0 else None


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; directories cannot be opened on Windows.
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open(url: str, timeout: float, watchdog: _Watchdog):
    try:
        return _opener(watchdog).open(url, timeout=timeout)
    except urllib.error.HTTPError as err:
        err.close()
        raise OSError(f"HTTP {err.code} {err.reason} while downloading {url}") from err
    except urllib.error.URLError as err:
        raise urllib.error.URLError(f"cannot download {url}: {err.reason}") from err
    except OSError as err:
        raise OSError(f"network error while downloading {url}: {err!r}") from err


def _read(response, url: str, received: int) -> bytes:
    try:
        return response.read1(_CHUNK)  # what one read brings: the watchdog counts it
    except http.client.HTTPException as err:
        # e.g. IncompleteRead on a broken chunked body: not an OSError by itself.
        raise OSError(
            f"broken HTTP response after {received} bytes while downloading {url}: {err!r}"
        ) from err
    except OSError as err:
        raise OSError(
            f"network error after {received} bytes while downloading {url}: {err!r}"
        ) from err


def _too_large(url: str, size: int, max_bytes: int, how: str) -> ValueError:
    return ValueError(
        f"download from {url} {how} {size:,} bytes, over the {max_bytes:,} allowed (max_bytes); "
        "nothing was saved"
    )


def _stream(
    url: str,
    out,
    *,
    dest: Path,
    progress: bool,
    timeout: float,
    watchdog,
    max_bytes: int | None,
    auto_deadline: bool,
) -> str:
    """Copies the body of ``url`` into ``out`` (standing for ``dest``) and returns its
    sha256 hex digest; refuses a body over ``max_bytes`` before writing past it. With
    ``auto_deadline``, a ``Content-Length`` sets the watchdog's deadline for its size."""
    with _open(url, timeout, watchdog) as response:
        if response.status != 200:
            raise OSError(f"HTTP {response.status} {response.reason} from {url}, expected 200")
        total = _content_length(response)
        if max_bytes is not None and total is not None and total > max_bytes:
            raise _too_large(url, total, max_bytes, "announces (Content-Length)")
        watchdog.total = total
        if auto_deadline and total is not None:
            watchdog.deadline = _default_deadline(total)
        digest = hashlib.sha256()
        received = 0
        bar = tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, disable=not progress)
        with bar:
            while chunk := _read(response, url, received):
                if max_bytes is not None and received + len(chunk) > max_bytes:
                    raise _too_large(url, received + len(chunk), max_bytes, "sent at least")
                with naming_errors(dest):  # a full disk names dest, not the temporary file
                    out.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                watchdog.received = received
                bar.update(len(chunk))
    if total is not None and received != total:
        raise OSError(
            f"truncated download from {url}: received {received} of {total} bytes "
            f"announced by Content-Length"
        )
    return digest.hexdigest()


def _cut_off(url: str, reason: str | None) -> TimeoutError:
    return TimeoutError(f"download from {url} {reason}; nothing was saved")


def download_file(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None,
    progress: bool = False,
    timeout: float = 30,
    min_rate: float = MIN_RATE,
    deadline: float | Literal["auto"] | None = "auto",
    max_bytes: int | None = None,
) -> Path:
    """Downloads ``url`` to ``dest`` atomically, verifying its sha256.

    The body is streamed into a temporary file in ``dest``'s folder (created
    if needed). The file is moved into place only after the whole body has
    arrived (as many bytes as ``Content-Length`` announced, when given) and
    its digest matches ``sha256``; it is fsynced first, so a crash leaves
    either the old state or the complete file, never a partial one. An
    existing ``dest`` is replaced.

    Args:
      url: an ``http://`` or ``https://`` URL. Redirects are followed, but only
        to HTTP(S) URLs.
      dest: the file to write.
      sha256: expected digest (64 hex digits, any case), or ``None`` to skip
        the check. Keyword-only and without a default, so that skipping it is
        always an explicit choice.
      progress: show a tqdm progress bar on stderr (its total comes from
        ``Content-Length`` when the server sends one).
      timeout: seconds to wait for the connection and for each read.
      min_rate: bytes per second the download must average over every
        ``timeout`` seconds, the wait for the headers included (0: no
        minimum); a server that trickles its answer is cut off.
      deadline: seconds the whole download may take, the wait for the
        headers included; past it the download is cut off. ``"auto"`` (the
        default): :data:`DEADLINE` (an hour), or more for a large body:
        ``n / DEADLINE_RATE`` seconds for ``n`` bytes (100 kB/s: ten hours
        for 3.6 GB), ``n`` being the ``Content-Length`` once the headers
        announce it, else ``max_bytes`` (else an hour). ``None``: no limit.
      max_bytes: the most bytes the body may have (``None``: no limit). A
        ``Content-Length`` above it is refused before the body is read; a body
        that grows past it (no or a false ``Content-Length``) is cut off at
        the first piece over it, so at most ``max_bytes`` are ever written.
        For downloads without a ``sha256``, whose size nothing else bounds.

    Returns:
      ``Path(dest)``.

    Raises:
      ValueError: a URL that is not HTTP(S), a malformed ``sha256``, a
        non-positive ``timeout``, a negative ``max_bytes``, ``dest`` is a
        directory, a body larger than ``max_bytes`` (the message names the
        URL and both sizes), or the digest of the downloaded bytes differs
        from ``sha256`` (the message names the file, the expected and the
        actual digest).
      OSError: an HTTP error status, a network error or timeout
        (:class:`urllib.error.URLError`, :class:`TimeoutError`), a download
        slower than ``min_rate`` or longer than ``deadline``
        (:class:`TimeoutError`; past the deadline, the message says when
        and how many bytes had arrived: ``download from URL did not finish
        within the deadline of 3600 s: cut off after 3600.05 s with 52300
        of 90000000 bytes received; nothing was saved``), or a body shorter
        than its ``Content-Length``. The message names the URL.

    Nothing is left at ``dest`` or in its folder when an error is raised, and
    the folders made for it are removed again while empty.
    """
    _check_url(url)
    expected = _check_sha256(sha256)
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not min_rate >= 0:
        raise ValueError(f"min_rate must be a number of bytes per second >= 0, got {min_rate!r}")
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0
    ):
        raise ValueError(f"max_bytes must be an int >= 0 or None, got {max_bytes!r}")
    auto_deadline = deadline == "auto"
    limit = _default_deadline(max_bytes) if auto_deadline else deadline
    if limit is not None and (isinstance(limit, str) or not limit > 0):
        raise ValueError(
            f"deadline must be a positive number of seconds, 'auto' or None, got {deadline!r}"
        )
    dest = Path(dest)
    if dest.is_dir():
        raise ValueError(f"dest {str(dest)!r} is a directory; give the path of the file to write")
    made = make_folders(dest.parent)  # removed again if the download fails
    # A random name opened with "x" (not tempfile.mkstemp) so that the file
    # gets the permissions the umask gives, like any other file the user writes;
    # named with this pid, so that a later download removes it after a kill -9.
    tmp = temp_file_path(dest.parent, dest.name)
    try:
        with naming_errors(dest):  # an error names dest, not the temporary name
            out = open(tmp, "xb")  # noqa: SIM115 -- closed by the `with` below, inside the cleanup
    except BaseException:
        remove_made_folders(made)
        raise
    try:
        with out, _Watchdog(window=timeout, min_rate=min_rate, deadline=limit) as watchdog:
            try:
                actual = _stream(
                    url,
                    out,
                    dest=dest,
                    progress=progress,
                    timeout=timeout,
                    watchdog=watchdog,
                    max_bytes=max_bytes,
                    auto_deadline=auto_deadline,
                )
            except Exception as err:
                if watchdog.stop() is None:
                    raise
                raise _cut_off(url, watchdog.reason) from err
            if watchdog.stop() is not None:  # the shut socket read as the end of the body
                raise _cut_off(url, watchdog.reason)
            if expected is not None and actual != expected:
                raise ValueError(
                    f"sha256 mismatch for {dest.name} downloaded from {url}: expected "
                    f"{expected}, got {actual}; the file was not saved to {str(dest)!r}"
                )
            with naming_errors(dest):
                out.flush()
                os.fsync(out.fileno())
        with naming_errors(dest):
            os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        remove_made_folders(made)
        raise
    _fsync_dir(dest.parent)
    return dest


__all__ = ["download_file", "sha256_file"]

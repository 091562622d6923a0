"""Verified, atomic file downloads over HTTP(S).

:func:`download_file` never leaves a partial file behind: it streams into a
temporary file in the destination's folder, checks the byte count and the
sha256 digest, fsyncs, and only then renames the file into place with
:func:`os.replace` (atomic on POSIX and Windows). Any failure removes the
temporary file and raises.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import secrets
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tqdm.auto import tqdm

from sparsegcn.files import naming

_CHUNK = 1 << 20
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

# Only HTTP(S) handlers: urllib's default opener would also follow a redirect
# to ftp://, and open file:// and data: URLs.
_OPENER = urllib.request.OpenerDirector()
for _handler in (
    urllib.request.ProxyHandler(),
    urllib.request.UnknownHandler(),
    urllib.request.HTTPHandler(),
    urllib.request.HTTPSHandler(),
    urllib.request.HTTPDefaultErrorHandler(),
    urllib.request.HTTPRedirectHandler(),
    urllib.request.HTTPErrorProcessor(),
):
    _OPENER.add_handler(_handler)


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 digest of a file, as 64 lowercase hex digits, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


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


def _open(url: str, timeout: float):
    try:
        return _OPENER.open(url, timeout=timeout)
    except urllib.error.HTTPError as err:
        err.close()
        raise OSError(f"HTTP {err.code} {err.reason} while downloading {url}") from err
    except urllib.error.URLError as err:
        raise urllib.error.URLError(f"cannot download {url}: {err.reason}") from err
    except OSError as err:
        raise OSError(f"network error while downloading {url}: {err!r}") from err


def _read(response, url: str, received: int) -> bytes:
    try:
        return response.read(_CHUNK)
    except http.client.HTTPException as err:
        # e.g. IncompleteRead on a broken chunked body: not an OSError by itself.
        raise OSError(
            f"broken HTTP response after {received} bytes while downloading {url}: {err!r}"
        ) from err
    except OSError as err:
        raise OSError(
            f"network error after {received} bytes while downloading {url}: {err!r}"
        ) from err


def _stream(url: str, out, *, dest: Path, progress: bool, timeout: float) -> str:
    """Copies the body of ``url`` into ``out`` (standing for ``dest``) and returns its
    sha256 hex digest."""
    with _open(url, timeout) as response:
        if response.status != 200:
            raise OSError(f"HTTP {response.status} {response.reason} from {url}, expected 200")
        total = _content_length(response)
        digest = hashlib.sha256()
        received = 0
        bar = tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, disable=not progress)
        with bar:
            while chunk := _read(response, url, received):
                with naming(dest):  # a full disk names dest, not the temporary file
                    out.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    if total is not None and received != total:
        raise OSError(
            f"truncated download from {url}: received {received} of {total} bytes "
            f"announced by Content-Length"
        )
    return digest.hexdigest()


def download_file(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None,
    progress: bool = False,
    timeout: float = 60,
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

    Returns:
      ``Path(dest)``.

    Raises:
      ValueError: a URL that is not HTTP(S), a malformed ``sha256``, a
        non-positive ``timeout``, ``dest`` is a directory, or the digest of the
        downloaded bytes differs from ``sha256`` (the message names the file,
        the expected and the actual digest).
      OSError: an HTTP error status, a network error or timeout
        (:class:`urllib.error.URLError`, :class:`TimeoutError`), or a body
        shorter than its ``Content-Length``. The message names the URL.

    Nothing is left at ``dest`` or in its folder when an error is raised.
    """
    _check_url(url)
    expected = _check_sha256(sha256)
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    dest = Path(dest)
    if dest.is_dir():
        raise ValueError(f"dest {str(dest)!r} is a directory; give the path of the file to write")
    dest.parent.mkdir(parents=True, exist_ok=True)
    # A random name opened with "x" (not tempfile.mkstemp) so that the file
    # gets the permissions the umask gives, like any other file the user writes.
    tmp = dest.parent / f".{dest.name}.{secrets.token_hex(8)}.part"
    with naming(dest):  # an error names dest, not the temporary name
        out = open(tmp, "xb")  # noqa: SIM115 -- closed by the `with` below, inside the cleanup
    try:
        with out:
            actual = _stream(url, out, dest=dest, progress=progress, timeout=timeout)
            if expected is not None and actual != expected:
                raise ValueError(
                    f"sha256 mismatch for {dest.name} downloaded from {url}: expected "
                    f"{expected}, got {actual}; the file was not saved to {str(dest)!r}"
                )
            with naming(dest):
                out.flush()
                os.fsync(out.fileno())
        with naming(dest):
            os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(dest.parent)
    return dest


__all__ = ["download_file", "sha256_file"]

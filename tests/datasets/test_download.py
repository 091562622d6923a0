"""download_file against a real HTTP server on 127.0.0.1, and sha256_file against hashlib.

Every request has a client timeout of a few seconds and every server is shut
down and joined, so no test can hang.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
import urllib.error

import pytest
from http_server import TIMEOUT, leftovers, serve

from sparsegcn.datasets.download import download_file, sha256_file

PAYLOAD = os.urandom(3 * (1 << 20) + 12345)  # spans several 1 MiB read chunks
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


def test_sha256_file_matches_hashlib(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(PAYLOAD)
    assert sha256_file(path) == PAYLOAD_SHA
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert sha256_file(empty) == hashlib.sha256(b"").hexdigest()


def test_download_writes_verified_file(tmp_path):
    dest = tmp_path / "sub" / "blob.bin"
    with serve({"/blob.bin": PAYLOAD}) as (server, url):
        out = download_file(f"{url}/blob.bin", dest, sha256=PAYLOAD_SHA.upper(), timeout=TIMEOUT)
    assert out == dest
    assert dest.read_bytes() == PAYLOAD
    assert leftovers(dest.parent) == ["blob.bin"]
    assert server.requests == ["/blob.bin"]


def test_download_without_content_length_and_without_checksum(tmp_path):
    dest = tmp_path / "blob.bin"
    with serve({"/b": ("no-length", PAYLOAD)}) as (_, url):
        download_file(f"{url}/b", dest, sha256=None, timeout=TIMEOUT)
    assert dest.read_bytes() == PAYLOAD


def test_download_follows_http_redirects(tmp_path):
    dest = tmp_path / "blob.bin"
    with serve({"/old": ("redirect", "/new"), "/new": PAYLOAD}) as (server, url):
        download_file(f"{url}/old", dest, sha256=PAYLOAD_SHA, timeout=TIMEOUT)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == ["/old", "/new"]


def test_download_progress_bar_reports_the_total(tmp_path, capsys):
    dest = tmp_path / "blob.bin"
    with serve({"/b": PAYLOAD}) as (_, url):
        download_file(f"{url}/b", dest, sha256=PAYLOAD_SHA, progress=True, timeout=TIMEOUT)
    err = capsys.readouterr().err
    assert "blob.bin" in err
    assert "100%" in err
    assert "3.16M/3.16M" in err  # total from Content-Length: 3158073 bytes


def test_checksum_mismatch_names_file_and_digests_and_leaves_nothing(tmp_path):
    corrupt = bytearray(PAYLOAD)
    corrupt[1000] ^= 0xFF
    actual = hashlib.sha256(corrupt).hexdigest()
    dest = tmp_path / "blob.bin"
    with (
        serve({"/b": bytes(corrupt)}) as (_, url),
        pytest.raises(ValueError, match=rf"sha256 mismatch for blob\.bin.*{PAYLOAD_SHA}.*{actual}"),
    ):
        download_file(f"{url}/b", dest, sha256=PAYLOAD_SHA, timeout=TIMEOUT)
    assert leftovers(tmp_path) == []


def test_failed_download_keeps_the_previous_file_intact(tmp_path):
    dest = tmp_path / "blob.bin"
    dest.write_bytes(b"previous version")
    with (
        serve({"/b": b"something else"}) as (_, url),
        pytest.raises(ValueError, match="sha256 mismatch"),
    ):
        download_file(f"{url}/b", dest, sha256=PAYLOAD_SHA, timeout=TIMEOUT)
    assert dest.read_bytes() == b"previous version"
    assert leftovers(tmp_path) == ["blob.bin"]


def test_truncated_body_is_an_oserror_naming_the_url(tmp_path):
    dest = tmp_path / "blob.bin"
    with (
        serve({"/b": ("truncated", PAYLOAD[:5000], len(PAYLOAD))}) as (_, url),
        pytest.raises(
            OSError, match=rf"truncated download from {re.escape(url)}/b: received 5000 of"
        ),
    ):
        # Without the byte count check this would be caught by the checksum;
        # with sha256=None only the count can catch it.
        download_file(f"{url}/b", dest, sha256=None, timeout=TIMEOUT)
    assert leftovers(tmp_path) == []


def test_truncated_body_without_content_length_fails_the_checksum(tmp_path):
    dest = tmp_path / "blob.bin"
    with (
        serve({"/b": ("no-length", PAYLOAD[:5000])}) as (_, url),
        pytest.raises(ValueError, match=r"sha256 mismatch for blob\.bin"),
    ):
        download_file(f"{url}/b", dest, sha256=PAYLOAD_SHA, timeout=TIMEOUT)
    assert leftovers(tmp_path) == []


def test_broken_chunked_body_is_an_oserror_naming_the_url(tmp_path):
    with (
        serve({"/b": ("broken-chunked", PAYLOAD[:5000])}) as (_, url),
        pytest.raises(OSError, match=rf"broken HTTP response .*{re.escape(url)}/b"),
    ):
        download_file(f"{url}/b", tmp_path / "blob.bin", sha256=None, timeout=TIMEOUT)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("code", [404, 500])
def test_http_error_status_is_an_oserror_naming_the_url(tmp_path, code):
    dest = tmp_path / "blob.bin"
    with (
        serve({"/b": ("status", code)}) as (_, url),
        pytest.raises(OSError, match=rf"HTTP {code} .*{re.escape(url)}/b"),
    ):
        download_file(f"{url}/b", dest, sha256=None, timeout=TIMEOUT)
    assert leftovers(tmp_path) == []


def test_connection_refused_is_a_urlerror_naming_the_url(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/b"
    with pytest.raises(urllib.error.URLError, match=rf"cannot download {re.escape(url)}"):
        download_file(url, tmp_path / "blob.bin", sha256=None, timeout=TIMEOUT)
    assert leftovers(tmp_path) == []


def test_timeout_is_bounded_and_names_the_url(tmp_path):
    with serve({"/b": ("slow", 2.0)}) as (_, url):
        start = time.monotonic()
        with pytest.raises(OSError, match=rf"{re.escape(url)}/b"):
            download_file(f"{url}/b", tmp_path / "blob.bin", sha256=None, timeout=0.3)
        assert time.monotonic() - start < 1.5
    assert leftovers(tmp_path) == []


def test_a_trickling_body_is_cut_off_below_the_minimum_rate(tmp_path):
    # A byte every 50 ms never trips the 0.3 s per-read timeout; 1000 bytes/s over
    # every 0.3 s window does.
    with serve({"/b": ("trickle", 0.05, b"x" * 100)}) as (_, url):
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=rf"^download from {re.escape(url)}/b stalled"):
            download_file(
                f"{url}/b", tmp_path / "blob.bin", sha256=None, timeout=0.3, min_rate=1000
            )
        assert time.monotonic() - start < 1.5
    assert leftovers(tmp_path) == []


def test_trickling_headers_are_cut_off_by_the_deadline(tmp_path):
    with serve({"/b": ("trickle-headers", 0.05)}) as (_, url):
        start = time.monotonic()
        with pytest.raises(
            TimeoutError, match=rf"{re.escape(url)}/b did not finish within the deadline of 0.4 s"
        ):
            download_file(
                f"{url}/b",
                tmp_path / "blob.bin",
                sha256=None,
                timeout=0.3,
                min_rate=0,
                deadline=0.4,
            )
        assert time.monotonic() - start < 1.5
    assert leftovers(tmp_path) == []


def test_redirect_to_a_non_http_scheme_is_refused(tmp_path):
    with (
        serve({"/b": ("redirect", "ftp://127.0.0.1/blob")}) as (_, url),
        pytest.raises(urllib.error.URLError, match=rf"cannot download {re.escape(url)}/b"),
    ):
        download_file(f"{url}/b", tmp_path / "blob.bin", sha256=None, timeout=TIMEOUT)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "127.0.0.1/x", "http:///x", "data:,hi"]
)
def test_only_http_urls_are_accepted(tmp_path, url):
    with pytest.raises(ValueError, match="only http:// and https:// URLs"):
        download_file(url, tmp_path / "x", sha256=None)
    assert leftovers(tmp_path) == []


def test_bad_arguments_fail_before_any_request(tmp_path):
    with pytest.raises(ValueError, match="sha256 must be 64 hex digits or None, got 'abc'"):
        download_file("http://127.0.0.1:9/x", tmp_path / "x", sha256="abc")
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds, got 0"):
        download_file("http://127.0.0.1:9/x", tmp_path / "x", sha256=None, timeout=0)
    with pytest.raises(ValueError, match="is a directory"):
        download_file("http://127.0.0.1:9/x", tmp_path, sha256=None)
    with pytest.raises(TypeError, match="url must be a string, got bytes"):
        download_file(b"http://127.0.0.1:9/x", tmp_path / "x", sha256=None)
    assert leftovers(tmp_path) == []


def test_a_body_over_max_bytes_is_refused_and_leaves_nothing(tmp_path):
    dest = tmp_path / "blob.bin"
    dest.write_bytes(b"previous version")
    limit = (1 << 20) + 5
    # No Content-Length: cut off at the first piece past the limit, whatever follows.
    with (
        serve({"/b": ("no-length", PAYLOAD)}) as (_, url),
        pytest.raises(ValueError, match=rf"{re.escape(url)}/b sent at least .* over the 1,048,581"),
    ):
        download_file(f"{url}/b", dest, sha256=None, timeout=TIMEOUT, max_bytes=limit)
    # A Content-Length over the limit is refused before the body is read.
    with (
        serve({"/b": ("truncated", PAYLOAD[:10], 10**12)}) as (_, url),
        pytest.raises(ValueError, match=r"announces \(Content-Length\) 1,000,000,000,000 bytes"),
    ):
        download_file(f"{url}/b", dest, sha256=None, timeout=TIMEOUT, max_bytes=limit)
    assert dest.read_bytes() == b"previous version"
    assert leftovers(tmp_path) == ["blob.bin"]
    # Exactly max_bytes is accepted, with and without Content-Length.
    for route in (PAYLOAD, ("no-length", PAYLOAD)):
        with serve({"/b": route}) as (_, url):
            download_file(f"{url}/b", dest, sha256=None, timeout=TIMEOUT, max_bytes=len(PAYLOAD))
        assert dest.read_bytes() == PAYLOAD
    with pytest.raises(ValueError, match="max_bytes must be an int >= 0 or None, got -1"):
        download_file("http://127.0.0.1:9/b", dest, sha256=None, max_bytes=-1)


def _cut_off_after(err: pytest.ExceptionInfo) -> float:
    """The elapsed seconds a deadline error reports."""
    return float(re.search(r"cut off after ([\d.]+) s", str(err.value)).group(1))


def test_a_trickling_body_is_cut_off_by_the_deadline_naming_the_elapsed_time(tmp_path):
    # 50 bytes/s passes the minimum rate of 10, but 100 bytes would take 2 s.
    with serve({"/b": ("trickle", 0.02, b"x" * 100)}) as (_, url):
        with pytest.raises(
            TimeoutError,
            match=rf"^download from {re.escape(url)}/b did not finish within the deadline of "
            r"0.5 s: cut off after [\d.]+ s with \d+ of 100 bytes received; nothing was saved$",
        ) as err:
            download_file(
                f"{url}/b",
                tmp_path / "blob.bin",
                sha256=None,
                timeout=0.3,
                min_rate=10,
                deadline=0.5,
            )
        assert 0.5 <= _cut_off_after(err) < 1.0
    assert leftovers(tmp_path) == []


def test_the_default_deadline_is_finite_and_grows_with_the_announced_size(tmp_path, monkeypatch):
    # Scaled down: at least 0.3 s, and 1 s per 200 announced bytes: 0.5 s for 100 bytes.
    from sparsegcn.datasets import download

    monkeypatch.setattr(download, "DEADLINE", 0.3)
    monkeypatch.setattr(download, "DEADLINE_RATE", 200.0)
    with serve({"/b": ("trickle", 0.02, b"x" * 100)}) as (_, url):
        with pytest.raises(
            TimeoutError, match=r"within the deadline of 0.5 s: cut off after"
        ) as err:
            download_file(f"{url}/b", tmp_path / "blob.bin", sha256=None, timeout=TIMEOUT)
        assert 0.5 <= _cut_off_after(err) < 1.0
    assert leftovers(tmp_path) == []
    with pytest.raises(
        ValueError, match="deadline must be a positive number of seconds, 'auto' or"
    ):
        download_file("http://127.0.0.1:9/b", tmp_path / "x", sha256=None, deadline="soon")

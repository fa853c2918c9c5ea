"""A client of the local Cloud Storage endpoint cannot hold it for the others: every trial of a job shares it, and
a trainer is hostile ground. Before, the endpoint served one connection at a time with no timeout, so a trainer
that opened a connection and sent nothing stopped every other trial's storage for good. Real endpoint processes,
raw sockets."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from gcskit import call, download, endpoint, media_upload, needs_gcs

pytestmark = needs_gcs


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "gcs" / "b").mkdir(parents=True)
    (tmp_path / "gcs" / "b" / "x.txt").write_text("x")
    return tmp_path / "gcs"


@contextmanager
def raw(host: str) -> Iterator[socket.socket]:
    where = urlsplit(host)
    sock = socket.create_connection((where.hostname, where.port), timeout=30)
    try:
        yield sock
    finally:
        sock.close()


def test_a_connection_that_sends_nothing_stalls_nobody_else(root):
    with endpoint(root) as gcs, raw(gcs.host), raw(gcs.host):
        assert download(gcs.host, "b", "x.txt") == (200, b"x")
        assert media_upload(gcs.host, "b", "y.txt", b"y")[0] == 200


def test_half_sent_headers_or_a_half_sent_body_stall_nobody_else(root):
    with endpoint(root) as gcs, raw(gcs.host) as headers_only, raw(gcs.host) as body_half:
        headers_only.sendall(b"GET /download/storage/v1/b/b/o/x.txt?alt=media HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        body_half.sendall(b"POST /upload/storage/v1/b/b/o?uploadType=media&name=half.txt HTTP/1.1\r\n"
                          b"Host: 127.0.0.1\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000\r\n\r\n"
                          + b"h" * 10)
        assert download(gcs.host, "b", "x.txt") == (200, b"x")
        assert media_upload(gcs.host, "b", "y.txt", b"y")[0] == 200
        body_half.sendall(b"h" * 990)  # the rest arrives: that upload completes too
        body_half.settimeout(30)
        assert body_half.recv(64).startswith(b"HTTP/1.0 200")
    assert (root / "b" / "half.txt").read_bytes() == b"h" * 1000


def test_an_answer_never_read_stalls_nobody_else(root):
    """A download far larger than the socket's buffers, never read: the answer is written outside the lock."""
    (root / "b" / "big.bin").write_bytes(b"\0" * (32 << 20))
    with endpoint(root) as gcs, raw(gcs.host) as reader:
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.sendall(b"GET /download/storage/v1/b/b/o/big.bin?alt=media HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        for i in range(3):
            assert download(gcs.host, "b", "x.txt") == (200, b"x"), i


def test_a_chunked_upload_is_read_whole_before_it_is_stored(root):
    with endpoint(root) as gcs:
        host = urlsplit(gcs.host)
        conn = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
        try:
            conn.request("POST", "/upload/storage/v1/b/b/o?uploadType=media&name=chunked.txt",
                         body=iter([b"one ", b"two ", b"three"]), encode_chunked=True,
                         headers={"Content-Type": "application/octet-stream"})
            assert conn.getresponse().status == 200
        finally:
            conn.close()
        assert download(gcs.host, "b", "chunked.txt") == (200, b"one two three")


@pytest.mark.parametrize("headers", [{"Content-Length": "ten"}, {"Transfer-Encoding": "chunked"}])
def test_a_bad_length_or_chunk_size_is_400_and_the_endpoint_goes_on(root, headers):
    with endpoint(root) as gcs:
        body = b"zz\r\nnot hex\r\n0\r\n\r\n" if "Transfer-Encoding" in headers else b"0123456789"
        status, answer = call(gcs.host, "POST", "/upload/storage/v1/b/b/o?uploadType=media&name=bad.txt",
                              body, {"Content-Type": "application/octet-stream", **headers})
        assert status == 400, answer
        assert b"bad request" in answer
        assert download(gcs.host, "b", "x.txt") == (200, b"x")
    assert not (root / "b" / "bad.txt").exists()


def _upload(host: str, name: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    return call(host, "POST", f"/upload/storage/v1/b/b/o?uploadType=media&name={name}", body,
                {"Content-Type": "application/octet-stream", **headers})


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_upload_is_stored_decoded(root, encoding):
    import gzip
    import zlib

    data = b"weights " * 1000
    # gzip: two members, as gzip.decompress reads them
    body = gzip.compress(data[:3000]) + gzip.compress(data[3000:]) if encoding == "gzip" else zlib.compress(data)
    with endpoint(root) as gcs:
        status, answer = _upload(gcs.host, "w.bin", body, {"Content-Encoding": encoding})
        assert status == 200, answer
        assert download(gcs.host, "b", "w.bin") == (200, data)
        status, answer = _upload(gcs.host, "cut.bin", body[:len(body) // 2], {"Content-Encoding": encoding})
        assert status == 400 and f"not valid {encoding}".encode() in answer, answer
    assert not (root / "b" / "cut.bin").exists()


def test_a_body_over_the_limit_is_413_whatever_its_encoding(root, monkeypatch):
    """A 2 MiB gzip body of zeros inflates to 2 GiB: the emulator decoded it whole, with no bound. The limit
    is set to 1 MiB here (``$TRIALS_GCS_MAX_BODY_MB``) so the test inflates little."""
    import gzip

    monkeypatch.setenv("TRIALS_GCS_MAX_BODY_MB", "1")
    bomb = gzip.compress(b"\0" * (8 << 20), compresslevel=1)  # 8 MiB decoded from ~35 KB
    with endpoint(root) as gcs:
        status, answer = _upload(gcs.host, "bomb.bin", bomb, {"Content-Encoding": "gzip"})
        assert status == 413, answer
        assert b"the gzip body decoded is over 1 MiB" in answer and b"TRIALS_GCS_MAX_BODY_MB" in answer
        # a declared length or chunk size over the limit is refused before any byte of it (raw: nothing unsent)
        for head in (b"Content-Length: 99999999999\r\n\r\n", b"Transfer-Encoding: chunked\r\n\r\n100001\r\n",
                     b"Transfer-Encoding: chunked\r\n\r\n80000\r\n" + b"y" * (512 << 10) + b"\r\n80001\r\n"):
            with raw(gcs.host) as sock:
                sock.sendall(b"POST /upload/storage/v1/b/b/o?uploadType=media&name=huge.bin HTTP/1.1\r\n"
                             b"Host: 127.0.0.1\r\n" + head)
                assert sock.recv(64).startswith(b"HTTP/1.0 413"), head[:40]
        assert _upload(gcs.host, "small.bin", b"s" * (512 << 10), {})[0] == 200
        assert download(gcs.host, "b", "x.txt") == (200, b"x")
    assert sorted(p.name for p in (root / "b").iterdir()) == ["small.bin", "x.txt"]


def test_a_bad_limit_stops_the_endpoints_start_with_its_name(root, monkeypatch):
    from trials.controller.gcs import emulator

    monkeypatch.setenv("TRIALS_GCS_MAX_BODY_MB", "lots")
    gcs, why = emulator.start(str(root), {})
    assert gcs is None
    assert why == ("the local Cloud Storage endpoint did not start: TRIALS_GCS_MAX_BODY_MB must be a whole number "
                   "of MiB above 0, got 'lots'")

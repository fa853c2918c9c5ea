"""A trainer cannot take all of the shared Cloud Storage endpoint's threads or memory: a cap on the connections
served at once, a due time for a request's headers, body and answer (a trickle is dropped), a budget for the
bodies held at once, and downloads sent from their files. Before, every connection got a thread for as long as it
sent a byte every 19 s, every body was held whole (a few at 1 GiB each filled memory), and a download read its
object whole into memory and held it again while a slow client read it. Real endpoint processes, raw sockets."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from gcskit import call, download, endpoint, media_upload, needs_gcs
from test_stalled_clients import raw

pytestmark = needs_gcs

MAX_CONNECTIONS = 64  # trials.controller.gcs.server's (a literal: the old endpoint had none to import)
UPLOAD = b"POST /upload/storage/v1/b/b/o?uploadType=media&name=%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "gcs" / "b").mkdir(parents=True)
    (tmp_path / "gcs" / "b" / "x.txt").write_text("x")
    return tmp_path / "gcs"


def eventually(check, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_one_connection_over_the_most_is_503_at_once_and_service_comes_back(root):
    with endpoint(root) as gcs:
        idle = [socket.create_connection(("127.0.0.1", int(gcs.host.rsplit(":", 1)[1])), timeout=30)
                for _ in range(MAX_CONNECTIONS)]
        try:
            status, answer = call(gcs.host, "GET", "/download/storage/v1/b/b/o/x.txt?alt=media", timeout=10)
            assert status == 503, answer
            assert f"serves {MAX_CONNECTIONS} connections at once".encode() in answer
        finally:
            for sock in idle[:4]:
                sock.close()
        try:
            assert eventually(lambda: download(gcs.host, "b", "x.txt") == (200, b"x"))
        finally:
            for sock in idle[4:]:
                sock.close()


def test_a_trickle_of_headers_or_of_a_body_is_dropped_after_the_grace(root):
    """A byte a second keeps a socket from ever being silent for IDLE_TIMEOUT_S: without a due time, 64 such
    connections would hold every slot for good."""
    from trials.controller.gcs.server import IDLE_TIMEOUT_S

    with endpoint(root) as gcs, raw(gcs.host) as headers, raw(gcs.host) as body:
        headers.sendall(b"GET /download/storage/v1/b/b/o/x.txt?alt=media HTTP/1.1\r\n")
        body.sendall(UPLOAD % b"trickle.bin" + b"Content-Type: application/octet-stream\r\n"
                     b"Content-Length: 1048576\r\n\r\n")
        start = time.monotonic()
        open_ = {"headers": headers, "body": body}
        dropped: dict[str, float] = {}
        while open_ and time.monotonic() - start < 3 * IDLE_TIMEOUT_S:
            for name, sock in list(open_.items()):
                try:
                    sock.sendall(b"X-Slow: 1\r\n" if name == "headers" else b"t")
                    sock.settimeout(0.01)
                    gone = sock.recv(1) == b""
                except TimeoutError:
                    gone = False
                except OSError:
                    gone = True
                finally:
                    sock.settimeout(30)
                if gone:
                    dropped[name] = time.monotonic() - start
                    del open_[name]
            time.sleep(1)
        assert set(dropped) == {"headers", "body"}, dropped
        assert min(dropped.values()) >= IDLE_TIMEOUT_S - 2, dropped  # the grace is kept
        assert download(gcs.host, "b", "x.txt") == (200, b"x")
    assert not (root / "b" / "trickle.bin").exists()


def test_bodies_held_at_once_are_bounded_and_a_503_says_try_again(root, monkeypatch):
    """The limit is 1 MiB a body, so 2 MiB held at once: two bodies under way hold it all."""
    monkeypatch.setenv("TRIALS_GCS_MAX_BODY_MB", "1")
    with endpoint(root) as gcs, raw(gcs.host) as first, raw(gcs.host) as second:
        for sock, name in ((first, b"first.bin"), (second, b"second.bin")):
            sock.sendall(UPLOAD % name + b"Content-Type: application/octet-stream\r\nContent-Length: 1048576\r\n"
                         b"\r\n" + b"f" * 10)
        answers: list[tuple[int, bytes]] = []
        assert eventually(lambda: answers.append(media_upload(gcs.host, "b", "third.bin", b"3" * 100))
                          or answers[-1][0] == 503), answers[-1]
        assert b"try again" in answers[-1][1] and b"twice TRIALS_GCS_MAX_BODY_MB" in answers[-1][1]
        assert download(gcs.host, "b", "x.txt") == (200, b"x")  # (no body: nothing taken)
        first.sendall(b"f" * (1048576 - 10))
        assert first.recv(64).startswith(b"HTTP/1.0 200")
        assert media_upload(gcs.host, "b", "third.bin", b"3" * 100)[0] == 200
    assert (root / "b" / "first.bin").stat().st_size == 1048576
    assert (root / "b" / "third.bin").read_bytes() == b"3" * 100


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_download_is_sent_from_its_file_not_memory(root):
    size = 256 << 20
    with (root / "b" / "big.bin").open("wb") as f:
        f.truncate(size)  # sparse: cheap to make, every byte 0
        f.seek(size - 4)
        f.write(b"tail")
    with endpoint(root) as gcs:
        before = _peak_rss_mb(gcs.proc.pid)
        status, data = download(gcs.host, "b", "big.bin")
        assert status == 200 and len(data) == size and data[-4:] == b"tail"
        del data
        grew = _peak_rss_mb(gcs.proc.pid) - before
        assert grew < 64, f"the endpoint's peak memory grew {grew:.0f} MiB for a 256 MiB download"
        for rng, want in (("bytes=5-9", b"\0" * 5), ("bytes=268435452-", b"tail"), ("bytes=0-0", b"\0")):
            status, part = call(gcs.host, "GET", "/download/storage/v1/b/b/o/big.bin?alt=media", None,
                                {"Range": rng})
            assert (status, part) == (206, want), rng
        status, small = call(gcs.host, "GET", "/storage/v1/b/b/o/x.txt?alt=media")
        assert (status, small) == (200, b"x")
        assert download(gcs.host, "b", "missing.txt")[0] == 404

"""Resumable uploads, copy, rewrite and compose are written from files, never held whole in memory; the real
google-cloud-storage client and raw HTTP, against a real endpoint process.

Before, each chunk of a resumable upload read the whole upload so far back into memory, and a copy, rewrite or
compose held every source whole: the endpoint's peak memory was about twice the object (a 1 GiB upload: 2.1 GB;
composing two 1 GiB objects: 4.2 GB), so one large model upload could take the machine's memory."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from gcskit import call, endpoint, needs_gcs

pytestmark = needs_gcs

MIB = 1 << 20


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "gcs" / "b").mkdir(parents=True)
    return tmp_path / "gcs"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(host: str) -> Any:
        from google.cloud import storage

        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
        return storage.Client(project="test")
    return make


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def test_a_large_resumable_upload_copy_rewrite_and_compose_keep_the_endpoints_memory_flat(root, client):
    data = os.urandom(160 * MIB)
    with endpoint(root) as gcs:
        bucket = client(gcs.host).bucket("b")
        bucket.blob("warm").upload_from_string(b"w")  # the endpoint's own start-up, before the baseline
        before = _peak_kib(gcs.proc.pid)
        blob = bucket.blob("model.bin", chunk_size=8 * MIB)  # 20 chunks, as a model saved with the client
        blob.upload_from_string(data)
        bucket.copy_blob(bucket.blob("model.bin"), bucket, "copy.bin")
        bucket.blob("rewritten.bin").rewrite(bucket.blob("model.bin"))
        bucket.blob("composed.bin").compose([bucket.blob("model.bin"), bucket.blob("copy.bin")])
        grown = (_peak_kib(gcs.proc.pid) - before) * 1024
        assert grown < 64 * MIB, f"the endpoint's peak memory grew by {grown / MIB:.0f} MiB for a 160 MiB object"
        for name in ("model.bin", "copy.bin", "rewritten.bin"):
            assert (root / "b" / name).read_bytes() == data, name
            assert bucket.get_blob(name).md5_hash == _md5_b64(data), name
        assert (root / "b" / "composed.bin").read_bytes() == data + data
        composed = bucket.get_blob("composed.bin")
        assert composed.size == 2 * len(data) and composed.md5_hash == _md5_b64(data + data)
        assert bucket.blob("composed.bin").download_as_bytes(start=len(data) - 3, end=len(data) + 2) == \
            data[-3:] + data[:3]
        assert not list((root / "_resumable").iterdir())  # the finished upload's file is gone


def _session(host: str, name: str, meta: dict[str, Any] | None = None) -> str:
    """A resumable upload started with raw HTTP: the path its chunks are PUT to."""
    import http.client
    from urllib.parse import urlsplit

    where = urlsplit(host)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:
        conn.request("POST", f"/upload/storage/v1/b/b/o?uploadType=resumable&name={name}",
                     body=json.dumps(meta or {}).encode(), headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 200
        location = answer.getheader("Location")
    finally:
        conn.close()
    assert location
    parts = urlsplit(location)
    return parts.path + "?" + parts.query


def test_chunks_out_of_place_are_400_a_status_query_says_what_arrived_and_finishes_the_upload(root):
    with endpoint(root) as gcs:
        path = _session(gcs.host, "r.bin")
        status, _ = call(gcs.host, "PUT", path, b"a" * 10, {"Content-Range": "bytes 0-9/*"})
        assert status == 308
        status, out = call(gcs.host, "PUT", path, b"b" * 10, {"Content-Range": "bytes 20-29/*"})
        assert status == 400 and b"expected 10, got 20" in out
        status, _ = call(gcs.host, "PUT", path, b"", {"Content-Range": "bytes */*"})
        assert status == 308  # (the size is not known yet)
        status, out = call(gcs.host, "PUT", path, b"c" * 5, {"Content-Range": "bytes 10-14/15"})
        assert status == 200, out
        assert json.loads(out)["size"] == "15"
        assert (root / "b" / "r.bin").read_bytes() == b"a" * 10 + b"c" * 5
        empty = _session(gcs.host, "empty.bin")
        status, out = call(gcs.host, "PUT", empty, b"", {"Content-Range": "bytes */0"})
        assert status == 200 and json.loads(out)["md5Hash"] == _md5_b64(b"")
        assert (root / "b" / "empty.bin").read_bytes() == b""
        status, _ = call(gcs.host, "PUT", path.replace("upload_id=", "upload_id=gone"), b"x",
                         {"Content-Range": "bytes 0-0/1"})
        assert status == 404


def test_a_declared_checksum_that_does_not_match_is_400_and_nothing_is_at_the_name(root):
    with endpoint(root) as gcs:
        path = _session(gcs.host, "r.bin", {"md5Hash": _md5_b64(b"something else")})
        status, _ = call(gcs.host, "PUT", path, b"a" * 10, {"Content-Range": "bytes 0-9/*"})
        assert status == 308
        status, out = call(gcs.host, "PUT", path, b"b" * 10, {"Content-Range": "bytes 10-19/20"})
        assert status == 400 and b"doesn't match calculated MD5" in out
        assert not (root / "b" / "r.bin").exists()
        assert [p.name for p in (root / "b").iterdir()] == []  # no half-written file either


def test_a_compose_of_a_missing_source_is_404_and_a_malformed_one_400(root):
    with endpoint(root) as gcs:
        (root / "b" / "one").write_bytes(b"1")
        status, _ = call(gcs.host, "POST", "/storage/v1/b/b/o/out/compose",
                         json.dumps({"sourceObjects": [{"name": "one"}, {"name": "missing"}]}).encode(),
                         {"Content-Type": "application/json"})
        assert status == 404
        status, _ = call(gcs.host, "POST", "/storage/v1/b/b/o/out/compose", json.dumps({"sourceObjects": 3}).encode(),
                         {"Content-Type": "application/json"})
        assert status == 400
        assert not (root / "b" / "out").exists()


def test_a_link_or_fifo_planted_as_an_uploads_file_is_never_written_through(root, tmp_path):
    from urllib.parse import parse_qs, urlsplit

    from gcskit import SECRET, secret_file

    from trials.controller.gcs.server import LocalBuckets

    secret = secret_file(tmp_path / "host")
    with endpoint(root) as gcs:
        for plant in ("link", "fifo"):
            path = _session(gcs.host, f"{plant}.bin")
            status, _ = call(gcs.host, "PUT", path, b"a" * 10, {"Content-Range": "bytes 0-9/*"})
            assert status == 308
            upload_id = parse_qs(urlsplit(path).query)["upload_id"][0]
            kept = root / "_resumable" / LocalBuckets.safe_id(upload_id)
            assert kept.read_bytes() == b"a" * 10
            kept.unlink()
            if plant == "link":
                kept.symlink_to(secret)
            else:
                os.mkfifo(kept)
            status, out = call(gcs.host, "PUT", path, b"b" * 10, {"Content-Range": "bytes 10-19/20"})
            assert status == 400 and b"expected 0, got 10" in out  # (what was planted is no upload's file)
            status, _ = call(gcs.host, "PUT", path, b"c" * 4, {"Content-Range": "bytes 0-3/4"})
            assert status == 200  # the upload starts again in a file of its own
            assert (root / "b" / f"{plant}.bin").read_bytes() == b"c" * 4
        assert secret.read_bytes() == SECRET

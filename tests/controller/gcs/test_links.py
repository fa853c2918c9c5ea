"""The local Cloud Storage endpoint never follows, reads, writes or deletes through a link a trainer
planted in its bucket folder, nor opens a FIFO or a device there; the real google-cloud-storage client
and raw HTTP, against a real endpoint process. (Through a trial's endpoint: test_trial_links.py.)"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from gcskit import SECRET, call, can_exchange, download, endpoint, exchange, media_upload, needs_gcs, secret_file

pytestmark = needs_gcs


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "gcs" / "b").mkdir(parents=True)
    return tmp_path / "gcs"


@pytest.fixture
def client(monkeypatch):
    def make(host: str):
        from google.cloud import storage

        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
        return storage.Client(project="test")
    return make


def _refused(do) -> int:
    """The HTTP status the client's call raised (it must raise: 403 or 404)."""
    from google.api_core import exceptions

    with pytest.raises((exceptions.Forbidden, exceptions.NotFound)) as raised:
        do()
    return raised.value.code


def test_the_real_client_still_uploads_downloads_lists_and_deletes(root, client):
    with endpoint(root) as gcs:
        bucket = client(gcs.host).bucket("b")
        bucket.blob("small/a.txt").upload_from_string("multipart")  # one multipart request
        big = os.urandom(600 * 1024)
        blob = bucket.blob("big/r.bin", chunk_size=256 * 1024)  # a resumable upload in 3 chunks
        blob.upload_from_string(big)
        (root / "b" / "fuse").mkdir()
        (root / "b" / "fuse" / "f.txt").write_text("through /gcs")
        assert bucket.blob("small/a.txt").download_as_text() == "multipart"
        assert bucket.blob("big/r.bin").download_as_bytes() == big  # md5/crc32c checked by the client
        assert bucket.blob("fuse/f.txt").download_as_text() == "through /gcs"
        assert sorted(b.name for b in client(gcs.host).list_blobs("b")) == ["big/r.bin", "fuse/f.txt", "small/a.txt"]
        assert (root / "b" / "big" / "r.bin").read_bytes() == big
        bucket.blob("small/a.txt").delete()
        assert not (root / "b" / "small" / "a.txt").exists()
        assert sorted(b.name for b in client(gcs.host).list_blobs("b", prefix="big/")) == ["big/r.bin"]
        made = client(gcs.host).create_bucket("fresh")
        made.blob("x").upload_from_string("x")
        assert (root / "fresh" / "x").read_text() == "x"
        assert not [p for p in (root / "b").rglob(".trials-upload-*")]  # no upload left half-written


def test_a_link_to_the_root_of_the_machine_is_never_written_through(root, tmp_path, client):
    (root / "b" / "esc").symlink_to("/")
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "planted.txt"
    name = "esc" + str(target)  # esc/<absolute host path>: through the link, the host's file
    with endpoint(root) as gcs:
        bucket = client(gcs.host).bucket("b")
        assert _refused(lambda: bucket.blob(name).upload_from_string("multipart")) == 403
        assert _refused(lambda: bucket.blob(name, chunk_size=256 * 1024).upload_from_string(b"r" * 300_000)) == 403
        status, _ = media_upload(gcs.host, "b", name, b"media")
        assert status == 403
        status, _ = call(gcs.host, "PUT", f"/b/{name}", b"xml", {"Content-Type": "text/plain"})
        assert status == 403
        bucket.blob("src.txt").upload_from_string("copied")
        assert _refused(lambda: bucket.copy_blob(bucket.blob("src.txt"), bucket, name)) == 403
        assert _refused(lambda: bucket.blob("esc/etc/passwd").download_as_bytes()) == 404
        assert _refused(lambda: bucket.blob("esc/etc/hostname").delete()) == 404
        names = [b.name for b in client(gcs.host).list_blobs("b")]
        assert names == ["src.txt"]  # nothing beneath the link is listed (the old endpoint did not list it either)
        bucket.blob("after.txt").upload_from_string("still serving")
    assert not target.exists() and os.listdir(outside) == []
    assert (root / "b" / "after.txt").read_text() == "still serving"
    assert os.readlink(root / "b" / "esc") == "/"  # the link itself is left alone


def test_a_link_to_a_0600_file_is_never_read_listed_overwritten_or_deleted(root, tmp_path, client):
    secret = secret_file(tmp_path / "outside")
    (root / "b" / "s.txt").symlink_to(secret)
    (root / "b" / "dir").symlink_to(secret.parent)
    (root / "b" / "plain.txt").write_text("plain")
    with endpoint(root) as gcs:
        bucket = client(gcs.host).bucket("b")
        for name in ("s.txt", "dir/secret"):
            assert _refused(lambda name=name: bucket.blob(name).download_as_bytes()) == 404
            assert _refused(lambda name=name: bucket.blob(name).reload()) == 404
            assert _refused(lambda name=name: bucket.blob(name).delete()) == 404
            status, body = download(gcs.host, "b", name)
            assert status == 404 and SECRET not in body
            status, body = call(gcs.host, "GET", f"/b/{name}")  # the public (XML) download
            assert status == 404 and SECRET not in body
        assert _refused(lambda: bucket.blob("s.txt").upload_from_string("overwritten")) == 403
        assert _refused(lambda: bucket.blob("dir/secret").upload_from_string("overwritten")) == 403
        assert [b.name for b in client(gcs.host).list_blobs("b")] == ["plain.txt"]
        status, body = call(gcs.host, "GET", "/storage/v1/b/b/o")
        assert status == 200 and SECRET not in body
        assert bucket.blob("plain.txt").download_as_text() == "plain"
    assert secret.read_bytes() == SECRET and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert (root / "b" / "s.txt").is_symlink() and (root / "b" / "dir").is_symlink()


def test_a_bucket_that_is_a_link_is_no_bucket(root, tmp_path, client):
    secret = secret_file(tmp_path / "outside")
    (root / "lnk").symlink_to(secret.parent)
    with endpoint(root) as gcs:
        assert _refused(lambda: client(gcs.host).bucket("lnk").blob("secret").download_as_bytes()) == 404
        status, _ = media_upload(gcs.host, "lnk", "new.txt", b"x")
        assert status == 404
        status, _ = call(gcs.host, "GET", "/storage/v1/b/lnk/o")
        assert status == 404
        status, _ = call(gcs.host, "POST", "/storage/v1/b?project=test", json.dumps({"name": "lnk"}).encode(),
                         {"Content-Type": "application/json"})
        assert status in (403, 409)  # creating it again: never a folder made through the link
    assert sorted(os.listdir(secret.parent)) == ["secret"]


def test_a_link_swapped_in_for_a_folder_never_wins(root, tmp_path):
    """A folder of the bucket and a link to a folder outside trade places all the time (renameat2
    RENAME_EXCHANGE: there is always one or the other) while uploads and downloads go through it:
    nothing is written outside, nothing outside is read, every answer is 200, 403 or 404."""
    if not can_exchange(tmp_path):
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available here")
    outside = tmp_path / "outside"
    secret_file(outside)
    real = root / "b" / "d"
    real.mkdir()
    (real / "secret").write_bytes(b"public")  # the same name as the 0600 file outside
    aside = root / "b" / "aside"
    aside.symlink_to(outside)
    stop = threading.Event()
    swaps = 0

    def swap() -> None:
        nonlocal swaps
        while not stop.is_set():
            exchange(real, aside)
            swaps += 1

    answers: dict[int, int] = {}
    read: set[bytes] = set()
    with endpoint(root) as gcs:
        swapper = threading.Thread(target=swap)
        swapper.start()
        try:
            deadline = time.monotonic() + 8
            n = 0
            while time.monotonic() < deadline or n < 100:
                status, _ = media_upload(gcs.host, "b", f"d/up{n}", b"up")
                answers[status] = answers.get(status, 0) + 1
                status, body = download(gcs.host, "b", "d/secret")
                answers[status] = answers.get(status, 0) + 1
                if status == 200:
                    read.add(body)
                n += 1
        finally:
            stop.set()
            swapper.join()
    assert swaps > 100, swaps
    assert set(answers) <= {200, 403, 404}, answers
    assert answers.get(200, 0) > 0  # the folder was there often enough to be used
    assert read <= {b"public"}, read  # never the 0600 file's content
    assert sorted(os.listdir(outside)) == ["secret"]  # no upload landed outside
    assert (outside / "secret").read_bytes() == SECRET


def test_a_fifo_or_a_device_in_a_bucket_is_no_object_and_never_stops_the_endpoint(root, client):
    os.mkfifo(root / "b" / "pipe")
    try:
        os.mknod(root / "b" / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
        device = True
    except PermissionError:
        device = False
    (root / "b" / "plain.txt").write_text("plain")
    with endpoint(root) as gcs:
        bucket = client(gcs.host).bucket("b")
        assert [b.name for b in client(gcs.host).list_blobs("b", timeout=30)] == ["plain.txt"]
        for name in ("pipe", "null") if device else ("pipe",):
            status, _ = download(gcs.host, "b", name)
            assert status == 404
            status, _ = media_upload(gcs.host, "b", name, b"x")
            assert status == 403
            assert _refused(lambda name=name: bucket.blob(name).delete()) == 404
        assert bucket.blob("plain.txt").download_as_text() == "plain"
    assert stat.S_ISFIFO(os.lstat(root / "b" / "pipe").st_mode)


def test_the_endpoints_own_state_files_are_never_written_through_links(root, tmp_path, client):
    from google.api_core.exceptions import Forbidden

    outside = tmp_path / "outside"
    victim = secret_file(outside)
    chunks = outside / "chunks"
    chunks.mkdir()
    (root / ".meta").symlink_to(victim)  # the emulator's state file, rewritten at every change
    (root / "_resumable").symlink_to(chunks)  # where resumable uploads keep their chunks
    with endpoint(root) as gcs:
        bucket = client(gcs.host).bucket("b")
        bucket.blob("m.txt").upload_from_string("multipart")  # its state written: the link replaced
        client(gcs.host).create_bucket("other")
        try:  # its chunks are kept beneath _resumable when it takes several requests: never through the link
            bucket.blob("r.bin", chunk_size=256 * 1024).upload_from_string(b"r" * 300_000)
            assert bucket.blob("r.bin").download_as_bytes() == b"r" * 300_000
        except Forbidden:
            pass
        assert bucket.blob("m.txt").download_as_text() == "multipart"
    assert victim.read_bytes() == SECRET
    assert os.listdir(chunks) == []
    assert (root / ".meta").is_file() and not (root / ".meta").is_symlink()


def test_a_garbage_state_file_does_not_stop_the_endpoint(root, client):
    (root / ".meta").write_text("{not json")
    (root / "b" / "x.txt").write_text("x")
    with endpoint(root) as gcs:
        assert client(gcs.host).bucket("b").blob("x.txt").download_as_text() == "x"
    (root / ".meta").write_text("[1, 2]")
    with endpoint(root) as gcs:
        assert [b.name for b in client(gcs.host).list_blobs("b")] == ["x.txt"]


def test_a_name_clashing_with_a_folder_or_going_up_is_refused_with_an_answer(root, client):
    (root / "b" / "folder").mkdir()
    (root / "b" / "file").write_text("f")
    with endpoint(root) as gcs:
        status, _ = media_upload(gcs.host, "b", "folder", b"x")
        assert status == 409
        status, _ = media_upload(gcs.host, "b", "file/below", b"x")
        assert status == 409
        for name in ("../up.txt", "a/../../up.txt"):
            status, _ = media_upload(gcs.host, "b", name, b"x")
            assert status == 403
        assert client(gcs.host).bucket("b").blob("file").download_as_text() == "f"
    assert not (root / "up.txt").exists() and not (root.parent / "up.txt").exists()


def test_a_bucket_folder_the_user_named_through_a_link_is_served(tmp_path, client):
    """The root's own path is the user's (``--gcs-root``): only what is beneath it is never followed."""
    (tmp_path / "real" / "b").mkdir(parents=True)
    (tmp_path / "real" / "b" / "x.txt").write_text("x")
    (tmp_path / "named").symlink_to(tmp_path / "real")
    with endpoint(tmp_path / "named") as gcs:
        bucket = client(gcs.host).bucket("b")
        assert bucket.blob("x.txt").download_as_text() == "x"
        bucket.blob("y.txt").upload_from_string("y")
    assert (tmp_path / "real" / "b" / "y.txt").read_text() == "y"

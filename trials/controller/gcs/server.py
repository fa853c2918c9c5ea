"""The local Cloud Storage endpoint (extra ``trials[gcs]``): gcp-storage-emulator over the job's bucket folder.

``python -m trials.controller.gcs.server ROOT``: serves ``ROOT/<bucket>/<object>`` (the folder that
is ``/gcs`` in every sandboxed replica) on 127.0.0.1 at a free port, prints the port on one line,
and runs until stdin closes or SIGTERM. ``ROOT`` ``-``: the first line of stdin names it (a server
started during the controller's start-up, before its job's folder exists); it then works in ROOT,
so ``/proc/PID/cwd`` says what it serves. Folders and files written straight into ROOT (through
``/gcs``) are buckets and objects before each request; uploads land there as plain files.
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
import os
import signal
import sys
import threading
from http import server
from pathlib import Path
from typing import Any

import google_crc32c
from gcp_storage_emulator import storage as emulator_storage  # type: ignore[import-untyped, import-not-found, unused-ignore]
from gcp_storage_emulator.handlers.buckets import _make_bucket_resource  # type: ignore[import-untyped, import-not-found, unused-ignore]
from gcp_storage_emulator.handlers.objects import _make_object_resource  # type: ignore[import-untyped, import-not-found, unused-ignore]
from gcp_storage_emulator.server import RequestHandler  # type: ignore[import-untyped, import-not-found, unused-ignore]

_INTERNAL = (".", "_")  # the emulator's own entries (.meta, _resumable, _softdelete): never buckets


class LocalBuckets(emulator_storage.Storage):  # type: ignore[misc]
    """The emulator's storage, kept in step with what others write into the bucket folder."""

    def __init__(self, root: str, base_url: str):
        super().__init__(use_memory_fs=True)
        self._store = emulator_storage._FileStore(use_memory=False, root=Path(root))
        self._read_config_from_file()
        self._root = root
        self._base_url = base_url
        self._lock = threading.Lock()
        self._stamps: dict[tuple[str, str], tuple[int, int]] = {}  # (bucket, name) -> (size, mtime)

    def sync(self) -> None:
        """Every folder of the root is a bucket, every file under it an object (and nothing else)."""
        with self._lock:
            seen_buckets = set()
            for bucket in os.listdir(self._root):
                if bucket.startswith(_INTERNAL) or not os.path.isdir(os.path.join(self._root, bucket)):
                    continue
                seen_buckets.add(bucket)
                if bucket not in self.buckets:
                    self.buckets[bucket] = _make_bucket_resource(bucket, self.project_number)
                self._sync_objects(bucket)
            for bucket in [b for b in self.buckets if b not in seen_buckets]:
                del self.buckets[bucket]
                self.objects.pop(bucket, None)

    def _sync_objects(self, bucket: str) -> None:
        objects = self.objects.setdefault(bucket, {})
        folder = os.path.join(self._root, bucket)
        present = set()
        for parent, _dirs, names in os.walk(folder):
            for name in names:
                path = os.path.join(parent, name)
                key = os.path.relpath(path, folder).replace(os.sep, "/")
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                present.add(key)
                stamp = (st.st_size, st.st_mtime_ns)
                if key in objects and self._stamps.get((bucket, key)) == stamp:
                    continue
                kind = mimetypes.guess_type(key)[0] or "application/octet-stream"
                resource = _make_object_resource(self._base_url, bucket, key, kind, str(st.st_size))
                resource.update(_hashes(path))  # clients check downloads against them
                objects[key] = resource
                self._stamps[(bucket, key)] = stamp
        for key in [k for k in objects if k not in present]:
            del objects[key]

    def _remember(self, bucket: str, name: str) -> None:
        try:
            st = os.stat(os.path.join(self._root, bucket, name))
        except OSError:
            return
        self._stamps[(bucket, name)] = (st.st_size, st.st_mtime_ns)

    def get_bucket(self, bucket_name: str) -> Any:
        self.sync()
        return super().get_bucket(bucket_name)

    def get_file_list(self, bucket_name: str, *args: Any, **kwargs: Any) -> Any:
        self.sync()
        return super().get_file_list(bucket_name, *args, **kwargs)

    def get_file_obj(self, bucket_name: str, file_name: str) -> Any:
        self.sync()
        return super().get_file_obj(bucket_name, file_name)

    def create_file(self, bucket_name: str, file_name: str, *args: Any, **kwargs: Any) -> Any:
        self.sync()
        result = super().create_file(bucket_name, file_name, *args, **kwargs)
        self._remember(bucket_name, file_name)  # its metadata (content type, ...) stays
        return result

    def create_resumable_upload(self, bucket_name: str, *args: Any, **kwargs: Any) -> Any:
        self.sync()
        return super().create_resumable_upload(bucket_name, *args, **kwargs)

    def delete_file(self, bucket_name: str, file_name: str) -> Any:
        self.sync()
        return super().delete_file(bucket_name, file_name)


def _hashes(path: str) -> dict[str, str]:
    md5 = hashlib.md5(usedforsecurity=False)
    crc: Any = google_crc32c.Checksum()  # type: ignore[no-untyped-call]
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            md5.update(chunk)
            crc.update(chunk)
    return {"md5Hash": base64.b64encode(md5.digest()).decode(), "crc32c": base64.b64encode(crc.digest()).decode()}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m trials.controller.gcs.server ROOT [BIND_ADDRESS]", file=sys.stderr)
        return 2
    root = args[0]
    if root == "-":
        root = sys.stdin.readline().rstrip("\n")
        if not root:
            return 0  # never given a folder: not needed after all
    root = os.path.abspath(root)
    bind = args[1] if len(args) == 2 else "127.0.0.1"
    os.makedirs(root, exist_ok=True)
    os.chdir(root)
    httpd = _Server((bind, 0), server.BaseHTTPRequestHandler)
    port = httpd.server_address[1]
    store = LocalBuckets(root, f"http://{bind}:{port}")
    httpd.RequestHandlerClass = lambda *a, **k: RequestHandler(store, *a, **k)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown).start())
    threading.Thread(target=_stop_on_eof, args=(httpd,), daemon=True).start()
    print(port, flush=True)
    httpd.serve_forever(poll_interval=0.05)
    httpd.server_close()
    return 0


class _Server(server.HTTPServer):
    """Binds with IP_FREEBIND: a container network's gateway address exists only once its bridge is up.

    ``busy`` is held while a request is handled: the end of stdin waits for it, then exits at once.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        self.busy = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.busy:
            super().process_request(request, client_address)

    def server_bind(self) -> None:
        import socket

        self.socket.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_FREEBIND", 15), 1)
        super().server_bind()


def _stop_on_eof(httpd: _Server) -> None:
    """The controller holds our stdin: when it closes it (or dies), we exit as soon as no request is
    being handled. Everything served lives in ROOT's files already; waiting for the serving loop's
    next poll and the interpreter's teardown took ~0.1 s of every job's end."""
    sys.stdin.read()
    with httpd.busy:
        httpd.server_close()
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())

"""The local Cloud Storage endpoint (extra ``trials[gcs]``): gcp-storage-emulator over the job's bucket folder.

``python -m trials.controller.gcs.server ROOT``: serves ``ROOT/<bucket>/<object>`` (the folder that
is ``/gcs`` in every sandboxed replica) on 127.0.0.1 at a free port, prints the port on one line,
and runs until stdin closes or SIGTERM. ``ROOT`` ``-``: the first line of stdin names it (a server
started during the controller's start-up, before its job's folder exists); it then works in ROOT,
so ``/proc/PID/cwd`` says what it serves. Folders and files written straight into ROOT (through
``/gcs``) are buckets and objects before each request; uploads land there as plain files.

Trainers write ROOT, so nothing in it is trusted: every file is reached beneath ROOT without following
a link (:mod:`trials.controller.gcs.beneath`); a link, FIFO or device is never an object, and a request
whose name goes through one answers 403 (a write or delete) or 404 (a read), never 500. Only its owner's
programs may talk to it: a ``Host`` other than the bound address or a loopback name (DNS rebinding) and
any request a browser marks as coming from a page (an ``Origin``, a ``Sec-Fetch-Site`` other than
``none``) answer 403; ``/wipe`` (the emulator's own, not Cloud Storage's) is not served. A client cannot
hold it for the others: each connection is read in its own thread, a socket silent for
:data:`IDLE_TIMEOUT_S` is dropped, and the buckets are worked on one request at a time only once its
whole body has arrived, the answer written out after (a trainer that opens a connection and sends
nothing, or sends a body and never reads the answer, stalls only itself). Nor can it take all of the
endpoint's threads or memory: at most :data:`MAX_CONNECTIONS` connections are served at once (one more
is answered 503 at once); a request's headers must arrive within :data:`IDLE_TIMEOUT_S`, and its body
and its answer at :data:`MIN_RATE` bytes a second or faster after that grace (a trickle of a byte a
second is dropped); a body is at most :data:`MAX_BODY_BYTES` (``$TRIALS_GCS_MAX_BODY_MB`` MiB) once
de-chunked and decoded (413 beyond: a gzip body of a few MB cannot inflate to all of memory), and the
bodies held at once at most twice that (503 beyond, each taken as it arrives); a download is sent from
its file, never read into memory, and resumable uploads, copies, rewrites and composes are written from files a
piece at a time (:mod:`trials.controller.gcs.streamed`). The Cloud Storage client retries a 503. Its stderr
goes to /dev/null once the port is printed: nobody reads it after the start, and a full pipe would
stop it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import ipaddress
import json
import logging
import mimetypes
import os
import signal
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable
from email.message import Message
from http import server
from typing import Any
from urllib.parse import urlsplit

from gcp_storage_emulator import storage as emulator_storage  # type: ignore[import-untyped, import-not-found, unused-ignore]
from gcp_storage_emulator.exceptions import NotFound  # type: ignore[import-untyped, import-not-found, unused-ignore]
from gcp_storage_emulator.handlers.buckets import _make_bucket_resource  # type: ignore[import-untyped, import-not-found, unused-ignore]
from gcp_storage_emulator.handlers.objects import _make_object_resource  # type: ignore[import-untyped, import-not-found, unused-ignore]
from gcp_storage_emulator.server import RequestHandler  # type: ignore[import-untyped, import-not-found, unused-ignore]

from trials.controller.gcs import beneath, streamed

_INTERNAL = (".", "_")  # the emulator's own entries (.meta, _resumable, _softdelete): never buckets
LOOPBACK_NAMES = ("localhost", "localhost.", "127.0.0.1", "::1")
_META = ".meta"  # the emulator's state file
META_MAX_BYTES = 64 << 20
MAX_BODY_BYTES = 1 << 30  # one request's body (decoded): the emulator holds it in memory
ENV_MAX_BODY_MB = "TRIALS_GCS_MAX_BODY_MB"  # sets it, in MiB
IDLE_TIMEOUT_S = 20.0  # a connection silent this long (headers, body or a read of the answer) is dropped
MAX_CONNECTIONS = 64  # served at once; one more is answered 503 and closed
MIN_RATE = 1 << 20  # bytes a second a body or an answer must average once IDLE_TIMEOUT_S of grace is over
PIECE = 1 << 20  # a body is read (and decoded) this much at a time, each piece taken from the budget
_REAP_S = 0.25  # how often the late connections are looked for
_reading = threading.local()  # .fds: a GET's open object files (its download is sent from them); else None


class FileSpan:
    """Bytes ``start`` to ``start + length`` of an open object file: what ``get_file`` gives a download
    (``len`` and slicing are all the emulator does with it), sent from the file once the lock is released."""

    __slots__ = ("fd", "start", "length")

    def __init__(self, fd: int, start: int, length: int):
        self.fd, self.start, self.length = fd, start, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: slice) -> FileSpan:
        if not isinstance(key, slice):
            raise TypeError("a span of a file is sliced, never indexed")
        start, stop, step = key.indices(self.length)
        if step != 1:
            raise TypeError("a span of a file is sliced with a step of 1")
        return FileSpan(self.fd, self.start + start, max(0, stop - start))


class _Held:
    """An answer held while the buckets' lock is: its bytes, and the spans of files it sends."""

    def __init__(self) -> None:
        self.parts: list[bytes | FileSpan] = []

    def write(self, data: Any) -> int:
        part = data if isinstance(data, FileSpan) else bytes(data)
        self.parts.append(part)
        return len(part)

    def flush(self) -> None:
        pass

    def size(self) -> int:
        return sum(len(part) for part in self.parts)


class _Full(Exception):
    """The bodies held at once would be over the budget."""


class _Budget:
    """Bytes of request bodies the endpoint holds at once, over every connection."""

    def __init__(self, total: int):
        self.total = total
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> None:
        with self._lock:
            if self.used + n > self.total:
                raise _Full(self.used)
            self.used += n

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n


class _OwnStore(beneath.Store):
    """Objects are refused through a link at their name; our own state (``.meta``, ``_resumable/*``,
    ``_softdelete/*``) replaces a link planted at its name (the rename never writes through it)."""

    def write_bytes(self, rel: str, content: bytes, *, replace_link: bool = False) -> None:
        names = beneath.split(rel)
        own = replace_link or bool(names and names[0].startswith(_INTERNAL))
        super().write_bytes(rel, content, replace_link=own)

    def read_bytes(self, rel: str, *, limit: int | None = None) -> bytes:
        if limit is None and beneath.split(rel) == [_META]:
            limit = META_MAX_BYTES  # read once, at the start: a trainer's huge one is garbage, not our memory
        return super().read_bytes(rel, limit=limit)


class LocalBuckets(emulator_storage.Storage):  # type: ignore[misc]
    """The emulator's storage, kept in step with what others write into the bucket folder."""

    def __init__(self, root: str, base_url: str):
        super().__init__(use_memory_fs=True)
        self._store = _OwnStore(root)
        self._read_config_from_file()
        self._root = root
        self._base_url = base_url
        self._lock = threading.Lock()
        self._stamps: dict[tuple[str, str], tuple[int, int]] = {}  # (bucket, name) -> (size, mtime)

    def _read_config_from_file(self) -> None:
        """Our state from ``ROOT/.meta`` (a trainer may have written it: garbage is an empty state)."""
        names = ("buckets", "objects", "resumable", "bucket_iam_policies", "soft_deleted")
        try:
            super()._read_config_from_file()
            if not all(isinstance(getattr(self, name), dict) for name in names):
                raise ValueError(".meta")
        except (OSError, ValueError, AttributeError, TypeError):
            for name in names:
                setattr(self, name, {})

    def sync(self) -> None:
        """Every folder of the root is a bucket, every regular file under it an object (and nothing
        else: a link, FIFO or device is none, and no link is followed)."""
        with self._lock:
            seen_buckets = set()
            for bucket in self._store.folders():
                if bucket.startswith(_INTERNAL):
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
        present = set()
        try:
            for key, st, parent, name in self._store.files(bucket):
                stamp = (st.st_size, st.st_mtime_ns)
                if key in objects and self._stamps.get((bucket, key)) == stamp:
                    present.add(key)
                    continue
                try:
                    hashes = _hashes(parent, name)  # clients check downloads against them
                except OSError:  # gone, or swapped for a link or a FIFO since it was listed
                    continue
                present.add(key)
                kind = mimetypes.guess_type(key)[0] or "application/octet-stream"
                resource = _make_object_resource(self._base_url, bucket, key, kind, str(st.st_size))
                resource.update(hashes)
                objects[key] = resource
                self._stamps[(bucket, key)] = stamp
        except OSError:  # the bucket went (or turned into a link) since it was listed
            pass
        for key in [k for k in objects if k not in present]:
            del objects[key]

    def _remember(self, bucket: str, name: str) -> None:
        try:
            st = self._store.stat(self._object_path(bucket, name))
        except (OSError, ValueError):
            return
        self._stamps[(bucket, name)] = (st.st_size, st.st_mtime_ns)

    def get_bucket(self, bucket_name: str) -> Any:
        self.sync()
        return super().get_bucket(bucket_name)

    def get_file_list(self, bucket_name: str, *args: Any, **kwargs: Any) -> Any:
        self.sync()
        return super().get_file_list(bucket_name, *args, **kwargs)

    def get_file(self, bucket_name: str, file_name: str, show_error: bool = True) -> Any:
        """The object's bytes; for a GET (a download), a span of its open file instead: never read into memory."""
        fds: list[int] | None = getattr(_reading, "fds", None)
        if fds is None:
            return super().get_file(bucket_name, file_name, show_error)
        try:
            fd = self._store.open_read(self._object_path(bucket_name, file_name))
        except (FileNotFoundError, IsADirectoryError, PermissionError):  # as the emulator's: a read is 404
            raise NotFound from None
        fds.append(fd)
        return FileSpan(fd, 0, os.fstat(fd).st_size)

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

    # -- what trials.controller.gcs.streamed writes from files
    def _resumable_path(self, file_id: str) -> str:
        return str(self._object_path(emulator_storage.RESUMABLE_DIR, self.safe_id(file_id)))

    def resumable_size(self, file_id: str) -> int:
        """The bytes an upload has received so far."""
        return self._store.size(self._resumable_path(file_id))

    def append_resumable(self, file_id: str, chunk: bytes) -> int:
        """Add a chunk at the end of the upload's file (nothing of it is read back); its size after."""
        return self._store.append(self._resumable_path(file_id), chunk)

    def resumable_fd(self, file_id: str) -> int:
        """A descriptor of the upload's file (the caller closes it)."""
        return self._store.open_read(self._resumable_path(file_id))

    def object_source(self, bucket_name: str, file_name: str) -> tuple[int, int]:
        """A descriptor of the object's file and its size, to read it from (the caller closes it)."""
        try:
            fd = self._store.open_read(self._object_path(bucket_name, file_name))
        except (FileNotFoundError, IsADirectoryError, beneath.Refused):  # as the emulator's: a source is 404
            raise NotFound from None
        return fd, os.fstat(fd).st_size

    def create_file_from(self, bucket_name: str, file_name: str, sources: list[bytes | tuple[int, int]],
                         file_obj: dict[str, Any], file_id: str | None = None) -> None:
        """``create_file`` with its bytes taken from ``sources`` a piece at a time (see ``streamed``): the
        checksums are computed on the way and checked before the new file is renamed over the name."""
        self.sync()
        if bucket_name not in self.buckets:
            raise NotFound
        hashed = streamed.Hashed()
        self._store.write_stream(self._object_path(bucket_name, file_name), hashed.pieces(sources),
                                 before_rename=lambda: hashed.settle(file_obj))
        file_obj["size"] = str(hashed.size)
        self.objects.setdefault(bucket_name, {})[file_name] = file_obj
        if file_id:
            self.delete_resumable_file_obj(file_id)
            self._delete_file(emulator_storage.RESUMABLE_DIR, self.safe_id(file_id))
        self._write_config_to_file()
        self._remember(bucket_name, file_name)


def _hashes(parent: int, name: str) -> dict[str, str]:
    hashed = streamed.Hashed()
    with os.fdopen(beneath.open_file(parent, name), "rb") as f:
        while chunk := f.read(streamed.PIECE):
            hashed.update(chunk)
    return hashed.resource()


def allowed_hosts(bind: str) -> frozenset[str]:
    """The ``Host`` names a request may carry: the bound address and the loopback names (the address
    a container on a trial network reaches us at is the bound one: its gateway)."""
    return frozenset({*LOOPBACK_NAMES, _host_name(bind)})


def refusal(headers: Message, allowed: frozenset[str]) -> str:
    """Why a request is refused before it is read ("" when it is not): a foreign ``Host`` (a web
    page's name rebound to our address) or a browser's marks of a request a page made."""
    hosts = headers.get_all("Host") or []
    if len(hosts) > 1:
        return "more than one Host header"
    if hosts and not _host_allowed(hosts[0], allowed):
        return "Host is neither this endpoint's address nor a loopback name"
    if headers.get("Origin") is not None:
        return "a request from a web page (Origin) is not served"
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site.strip().lower() != "none":
        return "a request from a web page (Sec-Fetch-Site) is not served"
    return ""


def _host_allowed(value: str, allowed: frozenset[str]) -> bool:
    try:
        parsed = urlsplit("http://" + value.strip())
        parsed.port  # noqa: B018 - a port that is not a number is refused (ValueError)
    except ValueError:
        return False
    name = parsed.hostname or ""
    if name in allowed or _host_name(name) in allowed:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(address: str) -> str:
    name = address.strip().lower().strip("[]")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


class _BucketHandler(RequestHandler):  # type: ignore[misc]
    """The emulator's handler, behind the Host and browser checks; a name through a link is 403 (a
    write, a delete) or 404 (a read: the emulator's own catch), a name clashing with a folder 409."""

    allowed: frozenset[str] = frozenset(LOOPBACK_NAMES)
    timeout = IDLE_TIMEOUT_S  # StreamRequestHandler sets it on the socket: every read and write
    max_body = MAX_BODY_BYTES
    rfile: Any  # the socket's, then the request's body read whole (_answer)
    wfile: Any  # the socket's, then a buffer while the buckets' lock is held (_answer)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        why = refusal(self.headers, self.allowed)
        if not why and urlsplit(self.path).path.rstrip("/") == "/wipe":
            why = "/wipe is the emulator's, not Cloud Storage's: not served here"
        if why:
            self._error(403, why)
            return False
        return True

    def handle_one_request(self) -> None:
        self._taken = 0
        self.server.watch(self.connection, time.monotonic() + IDLE_TIMEOUT_S)  # the request line and headers
        super().handle_one_request()

    def finish(self) -> None:
        self.server.watch(self.connection, None)
        super().finish()

    def _answer(self, do: Callable[[RequestHandler], None]) -> None:
        """The whole body is read off the socket first, the answer written after: the buckets' lock
        (``server.busy``) is never held while waiting on the client."""
        fds: list[int] = []
        try:
            try:
                body = self._read_body()
            except _Full as full:
                self._error(503, f"the endpoint holds {full.args[0] >> 20} MiB of request bodies, and at most "
                                 f"{self.server.budget.total >> 20} MiB at once (twice {ENV_MAX_BODY_MB}): try again",
                            retry_after=1)
                return
            if body is None:
                return
            socket_out = self.wfile
            answer = _Held()
            self.rfile, self.wfile = io.BytesIO(body), answer
            del body
            self.server.watch(self.connection, None)  # waiting for the lock, then working: not the client's time
            _reading.fds = fds if self.command == "GET" else None
            try:
                with self.server.busy:
                    self._work(do)
            finally:
                _reading.fds = None
                self.wfile = socket_out
            self.rfile = io.BytesIO()
            self._give_back()
            self.server.watch(self.connection, time.monotonic() + IDLE_TIMEOUT_S + answer.size() / MIN_RATE)
            for part in answer.parts:
                if isinstance(part, FileSpan):
                    self._send_span(part)
                else:
                    socket_out.write(part)
        finally:
            self._give_back()
            for fd in fds:
                os.close(fd)

    def _give_back(self) -> None:
        self.server.budget.give(self._taken)
        self._taken = 0

    def _take(self, n: int) -> None:
        self.server.budget.take(n)
        self._taken += n

    def _send_span(self, span: FileSpan) -> None:
        sent = 0
        if span.length:
            with os.fdopen(os.dup(span.fd), "rb") as f:
                sent = self.connection.sendfile(f, span.start, span.length)
        if sent < span.length:  # the file shrank since its length was sent: the client must not take it whole
            raise ConnectionResetError(errno.ECONNRESET, "the object's file shrank while it was sent")

    def _body_due(self, size: int) -> None:
        """The body's first ``size`` bytes are due by its start plus the grace plus their time at MIN_RATE."""
        self.server.watch(self.connection, self._body_start + IDLE_TIMEOUT_S + size / MIN_RATE)

    def _read_body(self) -> bytes | None:
        """The request's body, de-chunked and decoded (gzip, deflate), at most ``max_body`` bytes; the
        headers then say so (a Content-Length, no Transfer- or Content-Encoding) for the emulator, which
        would decode it again without a bound. None after answering 400 (a bad length, chunk size or
        encoding) or 413 (too large)."""
        length = self.headers.get("Content-Length")
        chunked = (self.headers.get("Transfer-Encoding") or "").strip().lower() == "chunked"
        self._body_start = time.monotonic()
        if chunked:
            body = self._read_chunks()
        elif length is None:
            body = b""
        elif not length.strip().isdigit():
            self._error(400, f"bad request: Content-Length {length[:40]!r} is not a number of bytes")
            return None
        elif int(length) > self.max_body:
            self._too_large(f"Content-Length {int(length)}")
            return None
        else:
            self._body_due(int(length))
            body = self._exactly(int(length))
        if body is None:
            return None
        encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
        if encoding in ("gzip", "deflate") and body:
            body = self._decode(body, encoding)
            if body is None:
                return None
        for name in ("Transfer-Encoding", "Content-Encoding", "Content-Length"):
            del self.headers[name]
        if body:
            self.headers["Content-Length"] = str(len(body))
        return body

    def _decode(self, body: bytes, encoding: str) -> bytes | None:
        """gzip (every member, as ``gzip.decompress``) or deflate (a zlib stream, as the emulator reads it),
        never more than ``max_body`` bytes out."""
        out: list[bytes] = []
        room = self.max_body
        rest = body
        try:
            while rest:
                # wbits: 16 + MAX_WBITS reads one gzip member, MAX_WBITS a zlib stream
                inflate = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
                data = rest
                while not inflate.eof:
                    part = inflate.decompress(data, PIECE)
                    if len(part) > room:
                        self._too_large(f"the {encoding} body decoded")
                        return None
                    self._take(len(part))
                    out.append(part)
                    room -= len(part)
                    data = inflate.unconsumed_tail
                    if not part and not data:
                        break
                if not inflate.eof:
                    raise zlib.error("truncated")
                rest = inflate.unused_data if encoding == "gzip" else b""
        except zlib.error:
            self._error(400, f"bad request: the body is not valid {encoding}")
            return None
        return b"".join(out)

    def _read_chunks(self) -> bytes | None:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            except ValueError:
                self._error(400, "bad request: a chunk size is not hexadecimal")
                return None
            if size <= 0:
                while self.rfile.readline(1024).strip():  # trailer fields, up to the blank line
                    pass
                return b"".join(parts)
            total += size
            if total > self.max_body:
                self._too_large("the chunked body")
                return None
            self._body_due(total)
            parts.append(self._exactly(size))
            self.rfile.readline(1024)

    def _too_large(self, what: str) -> None:
        self._error(413, f"{what} is over {self.max_body >> 20} MiB, the most this endpoint takes in one request "
                         f"({ENV_MAX_BODY_MB}; the Cloud Storage client sends large objects in resumable chunks of "
                         "100 MiB)")

    def _exactly(self, n: int) -> bytes:
        """``n`` bytes of the body, read a piece at a time as they arrive (each taken from the budget first): a
        length announced holds at most a piece ahead of its bytes."""
        parts: list[bytes] = []
        while n > 0:
            want = min(n, PIECE)
            self._take(want)
            data: bytes = self.rfile.read(want)
            if len(data) < want:
                raise ConnectionResetError(errno.ECONNRESET, "the client closed before its body's end")
            parts.append(data)
            n -= want
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _work(self, do: Callable[[RequestHandler], None]) -> None:
        try:
            do(self)
        except beneath.Refused as err:
            self._error(403, f"{err.strerror}: a link, FIFO or device is never followed, read or written")
        except FileNotFoundError:
            self._error(404, "No such object")
        except (IsADirectoryError, NotADirectoryError, FileExistsError) as err:
            self._error(409, f"{err.strerror}: the name clashes with a folder or a file in the bucket")
        except (ValueError, json.JSONDecodeError) as err:
            self._error(400, f"bad request: {type(err).__name__}")
        except OSError as err:
            if err.errno in (errno.EPIPE, errno.ECONNRESET):
                raise
            self._error(503, f"the bucket folder could not be used: {err.strerror}")

    def do_GET(self) -> None:
        self._answer(RequestHandler.do_GET)

    def do_POST(self) -> None:
        self._answer(lambda h: None if streamed.route(h, "POST") else RequestHandler.do_POST(h))

    def do_PUT(self) -> None:
        self._answer(lambda h: None if streamed.route(h, "PUT") else RequestHandler.do_PUT(h))

    def do_DELETE(self) -> None:
        self._answer(RequestHandler.do_DELETE)

    def do_PATCH(self) -> None:
        self._answer(RequestHandler.do_PATCH)

    def _error(self, code: int, message: str, *, retry_after: int | None = None) -> None:
        """Google's error shape; the connection is closed after it (the body may be unread)."""
        data = _error_body(code, message)
        self.close_connection = True
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        pass


def _error_body(code: int, message: str) -> bytes:
    reason = {400: "invalid", 403: "forbidden", 404: "notFound", 409: "conflict",
              413: "uploadTooLarge"}.get(code, "backendError")
    return json.dumps({"error": {"code": code, "message": message,
                                 "errors": [{"message": message, "domain": "global", "reason": reason}]}}).encode()


def _busy_answer() -> bytes:
    data = _error_body(503, f"the endpoint serves {MAX_CONNECTIONS} connections at once, the most it serves: "
                            "try again")
    return (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json; charset=UTF-8\r\n"
            b"Retry-After: 1\r\nConnection: close\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n"
            + data)


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
    max_mb = os.environ.get(ENV_MAX_BODY_MB, "").strip()
    if max_mb and not (max_mb.isdigit() and int(max_mb) > 0):
        print(f"{ENV_MAX_BODY_MB} must be a whole number of MiB above 0, got {max_mb[:40]!r}", file=sys.stderr)
        return 2
    os.makedirs(root, exist_ok=True)
    os.chdir(root)
    logging.getLogger("gcp_storage_emulator").disabled = True  # a line per missing object, to nobody
    if ":" in bind:  # an IPv6 address (a trial network's gateway may be one)
        _Server.address_family = socket.AF_INET6
    httpd = _Server((bind, 0), server.BaseHTTPRequestHandler)
    port = httpd.server_address[1]
    store = LocalBuckets(root, f"http://[{bind}]:{port}" if ":" in bind else f"http://{bind}:{port}")
    max_body = int(max_mb) << 20 if max_mb else MAX_BODY_BYTES
    handler = type("Handler", (_BucketHandler,), {"allowed": allowed_hosts(bind), "max_body": max_body})
    httpd.budget = _Budget(2 * max_body)
    httpd.RequestHandlerClass = lambda *a, **k: handler(store, *a, **k)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown).start())
    threading.Thread(target=_stop_on_eof, args=(httpd,), daemon=True).start()
    print(port, flush=True)
    _quiet_stderr()
    httpd.serve_forever(poll_interval=0.05)
    httpd.server_close()
    return 0


class _Server(server.ThreadingHTTPServer):
    """A thread per connection (daemons: a stalled client never delays the exit); binds with IP_FREEBIND:
    a container network's gateway address exists only once its bridge is up.

    ``busy`` is held while a request works on the buckets (its body read, its answer not yet sent): one at
    a time, as the emulator's state expects; the end of stdin waits for it, then exits at once.
    """

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any):
        self.busy = threading.Lock()
        self.budget = _Budget(2 * MAX_BODY_BYTES)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._due: dict[socket.socket, float] = {}  # a connection -> when it is dropped (while it waits on its client)
        self._due_lock = threading.Lock()
        super().__init__(*args, **kwargs)
        threading.Thread(target=self._reap, daemon=True).start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection, if fewer than MAX_CONNECTIONS are served; else a 503 sent without
        waiting (a client that does not read it loses it) and the connection closed."""
        if not self._slots.acquire(blocking=False):
            try:
                request.setblocking(False)
                request.send(_BUSY_ANSWER)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def watch(self, sock: socket.socket, due: float | None) -> None:
        """Drop ``sock`` at ``due`` (monotonic) unless watched again before; None: not while it is ours to finish."""
        with self._due_lock:
            if due is None:
                self._due.pop(sock, None)
            else:
                self._due[sock] = due

    def _reap(self) -> None:
        """A connection past its due time is shut down: its thread's read or write ends at once."""
        while True:
            time.sleep(_REAP_S)
            now = time.monotonic()
            with self._due_lock:  # (held: a connection unwatched at its end is never shut after its close)
                for sock in [s for s, due in self._due.items() if due <= now]:
                    del self._due[sock]
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A request that failed is dropped without a word (no traceback: see :func:`_quiet_stderr`)."""

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_FREEBIND", 15), 1)
        super().server_bind()


_BUSY_ANSWER = _busy_answer()


def _quiet_stderr() -> None:
    """Our stderr from here on is /dev/null: it is a pipe nobody reads after the start (a
    traceback a request caused, written there, would one day fill it and stop us)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


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

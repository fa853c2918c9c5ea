"""The HTTP layer of ``trials serve``: bounded under load and faults, every request past the guard first.

One thread a connection, at most :data:`MAX_CONNECTIONS` of them (beyond, new connections wait in
the listen queue of :data:`LISTEN_BACKLOG`, and kept-alive idle ones are closed first); a request
(line, headers, body) must arrive whole within :data:`READ_TIMEOUT_S` of its first byte, else its
connection is dropped (slowloris); a stopping server answers the requests in flight before it exits.
"""

from __future__ import annotations

import contextlib
import http
import http.server
import io
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trials.controller.api.errors import ApiError
from trials.controller.api.guard import Guard

MAX_BODY_BYTES = 8 * 1024 * 1024  # a job spec is a few KiB; a body over this is refused unread
READ_TIMEOUT_S = 5.0  # a request must arrive whole within this of its first byte (of the connection's start)
IDLE_TIMEOUT_S = 60.0  # a kept-alive connection waits this long for its next request
WRITE_TIMEOUT_S = 30.0  # a client that reads no answer for this long is dropped
MAX_CONNECTIONS = 256  # open at once (a thread each)
LISTEN_BACKLOG = 1024  # connections the kernel holds for the server (the kernel's somaxconn caps it)
DRAIN_TIMEOUT_S = 60.0  # how long a stopping server waits for the requests in flight
_DISCARD_MAX_BYTES = 1024 * 1024  # a refused request's body up to this is read and dropped (no reset)

Handle = Callable[[str, str, Mapping[str, str], bytes], tuple[int, dict[str, Any]]]


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes, each read bounded by the request's deadline (or the idle timeout between requests)."""

    def __init__(self, sock: socket.socket, deadline: float | None):
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        timeout = IDLE_TIMEOUT_S if self.deadline is None else self.deadline - time.monotonic()
        if timeout <= 0:
            raise TimeoutError("the request did not arrive whole in time")
        self.sock.settimeout(timeout)
        return self.sock.recv_into(buffer)


@dataclass
class _Connection:
    idle: bool = False
    since: float = 0.0


class Listener(http.server.ThreadingHTTPServer):
    """The server socket and its connections (see the module's docstring)."""

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True  # (in-flight requests are waited for by :meth:`drain`, with a bound)

    def __init__(self, address: tuple[str, int], handle: Handle, guard: Guard, *,
                 max_connections: int = MAX_CONNECTIONS):
        self.handle = handle
        self.guard = guard
        self.max_connections = max_connections
        self.closing = False
        self._connections: dict[socket.socket, _Connection] = {}
        self._changed = threading.Condition()
        super().__init__(address, _Handler)

    # --- connections ------------------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        with self._changed:
            while len(self._connections) >= self.max_connections and not self.closing:
                self._close_idle(oldest_only=True)
                self._changed.wait(0.2)
            if self.closing:
                self.shutdown_request(request)
                return
        self._admit(request, client_address)

    def _admit(self, request: Any, client_address: Any) -> None:
        with self._changed:
            self._connections[request] = _Connection(since=time.monotonic())
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        self._forget(request)

    def _forget(self, request: Any) -> None:
        with self._changed:
            if self._connections.pop(request, None) is not None:
                self._changed.notify_all()

    def mark(self, request: socket.socket, *, idle: bool) -> None:
        """A connection waits for its next request (idle: the first closed when connections run out), or not."""
        with self._changed:
            entry = self._connections.get(request)
            if entry is not None:
                entry.idle, entry.since = idle, time.monotonic()

    def _close_idle(self, *, oldest_only: bool) -> None:
        idle = sorted((c.since, id(s), s) for s, c in self._connections.items() if c.idle)
        for _, _, sock in idle[:1] if oldest_only else idle:
            self._connections[sock].idle = False  # (closed once)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # its thread's wait for a request ends: it closes

    def open_connections(self) -> int:
        with self._changed:
            return len(self._connections)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client gone mid-request is not the server's error (the API answers its own)

    # --- stopping ---------------------------------------------------------------------------------
    def begin_stop(self) -> None:
        """Take no new connection; close the idle ones; those mid-request finish (see :meth:`drain`)."""
        with self._changed:
            self.closing = True
            self._close_idle(oldest_only=False)
            self._changed.notify_all()

    def take_pending(self) -> int:
        """Serve the connections the kernel had completed before the stop (a client that connected, and maybe
        sent its request, while the server was starting or stopping): requests in flight too. Returns how many."""
        n = 0
        self.socket.setblocking(False)
        while True:
            try:
                request, client_address = self.get_request()
            except OSError:  # (BlockingIOError: none left)
                return n
            request.setblocking(True)
            self._admit(request, client_address)
            n += 1

    def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> int:
        """Wait for the requests in flight to be answered; returns how many were still open at the end."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._connections and time.monotonic() < deadline:
                self._close_idle(oldest_only=False)
                self._changed.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            return len(self._connections)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Listener
    server_version = "trials-serve"
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # read through the deadline instead
        self._reader = _DeadlineReader(self.connection, time.monotonic() + READ_TIMEOUT_S)
        self._buffered = io.BufferedReader(self._reader)
        self.rfile = self._buffered
        self._first = True

    def handle_one_request(self) -> None:
        if not self._first:  # kept alive: wait for the next request's first byte, then its deadline runs
            self.server.mark(self.connection, idle=True)
            self._reader.deadline = None
            try:
                ready = self._buffered.peek(1)
            except (OSError, ValueError):
                ready = b""
            self.server.mark(self.connection, idle=False)
            if not ready or self.server.closing:
                self.close_connection = True
                return
            self._reader.deadline = time.monotonic() + READ_TIMEOUT_S
        self._first = False
        try:
            super().handle_one_request()
        except (OSError, ValueError):  # reset, timed out mid-line, or closed under it: the connection ends
            self.close_connection = True

    def _serve(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        text = self.headers.get("Content-Length")
        try:
            length = int(text) if text is not None else 0
        except ValueError:
            length = -1
        refused = self.server.guard.check(self.command, self.headers, has_body=length != 0)
        if refused is not None:
            self.close_connection = True
            if 0 < length <= _DISCARD_MAX_BYTES:
                self.rfile.read(length)  # unread, it would reset the connection before the answer is read
            self._reply(refused.code, refused.body())
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            self._reply(400, ApiError(400, f"request body of {text!r} bytes refused: the limit is "
                                           f"{MAX_BODY_BYTES} bytes").body())
            return
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the client went away mid-body
            self.close_connection = True
            return
        status, out = self.server.handle(self.command, url.path, query, body)
        self._reply(status, out)

    do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = do_HEAD = do_OPTIONS = _serve

    def _reply(self, status: int, out: Mapping[str, Any]) -> None:
        if self.server.closing:
            self.close_connection = True
        self.connection.settimeout(WRITE_TIMEOUT_S)
        data = json.dumps(out).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="trials serve"')
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A request http.server cannot read (bad request line, headers too long): Google's error shape."""
        self.close_connection = True
        try:
            phrase = http.HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self._reply(code, ApiError(code, f"{phrase}: {message or explain or 'the request cannot be read'}").body())

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        pass

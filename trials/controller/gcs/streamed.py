"""The endpoint's object writes that take their bytes from files: resumable uploads, copy, rewrite and compose.

gcp-storage-emulator does them in memory: each chunk of a resumable upload read the whole upload so far back into
memory to add itself (a 1 GiB upload in 100 MiB chunks took 44 s and 2.1 GB of the endpoint's memory, a 5 GB model
would take over 10 GB), and a copy, rewrite or compose held every source whole (composing two 1 GiB objects: 4.2 GB).
Here a chunk is appended to its upload's file, and an object made from files (the finished upload, a copy's or a
compose's sources) is written a piece at a time into a new file, its MD5 and CRC32C computed on the way and checked
against what the client declared before the file is renamed over the name. The routes, the answers and the errors
are the emulator's own (its URL patterns; 308 with ``Range`` for a partial upload, 400 for a start out of place or a
checksum that does not match, 404 for a missing object or upload).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import google_crc32c
from gcp_storage_emulator import server as emulator_server  # type: ignore[import-untyped, import-not-found, unused-ignore]
from gcp_storage_emulator.exceptions import Conflict, NotFound  # type: ignore[import-untyped, import-not-found, unused-ignore]
from gcp_storage_emulator.handlers import objects  # type: ignore[import-untyped, import-not-found, unused-ignore]

PIECE = 1 << 20  # a file is read and written this much at a time
_RANGE = re.compile(r"bytes (?:(?P<start>\d+)-(?P<end>\d+|\*)|\*)/(?P<total>\d+|\*)")


class Hashed:
    """The MD5 and CRC32C of the bytes that went through :meth:`pieces`."""

    def __init__(self) -> None:
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.crc: Any = google_crc32c.Checksum()  # type: ignore[no-untyped-call]
        self.size = 0

    def pieces(self, sources: list[bytes | tuple[int, int]]) -> Iterator[bytes]:
        """The sources' bytes a piece at a time: a ``bytes`` as it is, ``(fd, length)`` the file's first
        ``length`` bytes (fewer there: ``OSError``, the file shrank)."""
        for source in sources:
            if isinstance(source, bytes):
                chunks: Iterator[bytes] = iter((source,))
            else:
                chunks = _file_pieces(*source)
            for chunk in chunks:
                self.update(chunk)
                yield chunk

    def update(self, chunk: bytes) -> None:
        self.md5.update(chunk)
        self.crc.update(chunk)
        self.size += len(chunk)

    def resource(self) -> dict[str, str]:
        """The checksums as an object resource names them."""
        return {"md5Hash": self.md5_b64(), "crc32c": self.crc_b64()}

    def md5_b64(self) -> str:
        return base64.b64encode(self.md5.digest()).decode("ascii")

    def crc_b64(self) -> str:
        return base64.b64encode(self.crc.digest()).decode("ascii")

    def settle(self, obj: dict[str, Any]) -> None:
        """Fill the object's checksums (and etag) from the bytes, or raise ``Conflict`` when the client
        declared others (the emulator's messages)."""
        for key, got, message in (("crc32c", self.crc_b64(), objects.CRC32C_CHECKSUM_ERROR),
                                  ("md5Hash", self.md5_b64(), objects.MD5_CHECKSUM_ERROR)):
            declared = obj.get(key)
            if not declared:
                obj[key] = got
            elif declared != got:
                raise Conflict(message.format(declared, got))
        if not obj.get("etag"):
            obj["etag"] = obj["md5Hash"]


def _file_pieces(fd: int, length: int) -> Iterator[bytes]:
    offset = 0
    while offset < length:
        chunk = os.pread(fd, min(PIECE, length - offset), offset)
        if not chunk:
            raise OSError(f"the file ended at {offset} of {length} bytes: it shrank while it was read")
        offset += len(chunk)
        yield chunk


def route(handler: Any, method: str) -> bool:
    """Answer the request here when the emulator's route for it is one of those done from files (True)."""
    method = handler.headers.get("x-http-method-override") or method
    request = emulator_server.Request(handler, method)
    for regex, handlers in emulator_server.HANDLERS:
        match = re.fullmatch(regex, request.path)
        if match:
            own = _OWN.get(handlers.get(method))
            if own is None:
                return False
            request.set_match(match)
            response = emulator_server.Response(handler)
            own(request, response, handler.storage)
            response.close()
            return True
    return False


def _answered(response: Any, work: Any) -> None:
    """The emulator's answers to the errors of an object write."""
    try:
        work()
    except NotFound:
        response.status = HTTPStatus.NOT_FOUND
    except Conflict as err:
        objects._handle_conflict(response, err)
    except _BadRequest as err:
        _bad_request(response, str(err))


class _BadRequest(Exception):
    pass


def _bad_request(response: Any, message: str) -> None:
    response.status = HTTPStatus.BAD_REQUEST
    response.json({"error": {"code": 400, "message": message,
                             "errors": [{"domain": "global", "reason": "invalid", "message": message}]}})


# -- resumable uploads -------------------------------------------------------------------------------
def upload_partial(request: Any, response: Any, storage: Any) -> None:
    """A PUT to a resumable upload: a chunk (``Content-Range: bytes START-END/TOTAL``, ``.../*`` while the size is
    unknown, ``START-*/...``), a status query (``bytes */TOTAL``, ``bytes */*``), or the whole object (no range)."""
    upload_id = (request.query.get("upload_id") or [""])[0]

    def work() -> None:
        obj = storage.get_resumable_file_obj(upload_id)
        header = (request.get_header("Content-Range", "") or "").strip()
        chunk = request.data or b""
        if not isinstance(chunk, bytes):
            raise _BadRequest("a resumable upload's chunk is its bytes")
        if not header:
            _finish(response, storage, obj, upload_id, [chunk])
            return
        m = _RANGE.fullmatch(header)
        if m is None:
            raise _BadRequest(f"bad Content-Range {header[:80]!r}")
        total = None if m["total"] == "*" else int(m["total"])
        received = storage.resumable_size(upload_id)
        if m["start"] is not None:  # a chunk
            start = int(m["start"])
            if start != received:
                raise _BadRequest(f"Invalid Content-Range start: expected {received}, got {start}")
            if m["end"] == "*" and total is None:
                total = start + len(chunk)  # the rest of a stream of unknown size, all in this request
            received = storage.append_resumable(upload_id, chunk) if chunk else received
        if total is not None and received >= total:
            _finish(response, storage, obj, upload_id, [(storage.resumable_fd(upload_id), total)] if total else [b""])
            return
        response.status = objects.GoogleHTTPStatus.RESUME_INCOMPLETE
        if received:
            response["Range"] = f"bytes=0-{received - 1}"

    _answered(response, work)


def _finish(response: Any, storage: Any, obj: dict[str, Any], upload_id: str,
            sources: list[bytes | tuple[int, int]]) -> None:
    try:
        storage.create_file_from(obj["bucket"], obj["name"], sources, obj, file_id=upload_id)
    finally:
        _close(sources)
    response.json(obj)


def _close(sources: list[bytes | tuple[int, int]]) -> None:
    for source in sources:
        if isinstance(source, tuple):
            with contextlib.suppress(OSError):
                os.close(source[0])


# -- copy, rewrite, compose --------------------------------------------------------------------------
def _copy_to_dest(request: Any, storage: Any) -> dict[str, Any]:
    p = request.params
    obj = storage.get_file_obj(p["bucket_name"], p["object_id"])
    dest: dict[str, Any] = objects._make_object_resource(request.base_url, p["dest_bucket_name"],
                                                         p["dest_object_id"], obj["contentType"], obj["size"], obj)
    sources: list[bytes | tuple[int, int]] = [storage.object_source(p["bucket_name"], p["object_id"])]
    try:
        storage.create_file_from(p["dest_bucket_name"], p["dest_object_id"], sources, dest)
    finally:
        _close(sources)
    return dest


def copy(request: Any, response: Any, storage: Any) -> None:
    _answered(response, lambda: response.json(_copy_to_dest(request, storage)))


def rewrite(request: Any, response: Any, storage: Any) -> None:
    def work() -> None:
        dest = _copy_to_dest(request, storage)
        size = str(dest["size"])
        response.json({"kind": "storage#rewriteResponse", "totalBytesRewritten": size, "objectSize": size,
                       "done": True, "resource": dest})

    _answered(response, work)


def compose(request: Any, response: Any, storage: Any) -> None:
    def work() -> None:
        body = request.data
        if not isinstance(body, dict) or not isinstance(body.get("sourceObjects"), list) \
                or not all(isinstance(s, dict) and isinstance(s.get("name"), str) for s in body["sourceObjects"]):
            raise _BadRequest("a compose names its sourceObjects, each by its name")
        bucket = request.params["bucket_name"]
        names = [s["name"] for s in body["sourceObjects"]]
        if not names:
            raise _BadRequest("a compose needs at least one of its sourceObjects")
        content_type = storage.get_file_obj(bucket, names[0])["contentType"]
        sources: list[bytes | tuple[int, int]] = []
        try:
            for name in names:
                sources.append(storage.object_source(bucket, name))
            total = sum(len(s) if isinstance(s, bytes) else s[1] for s in sources)
            dest = objects._make_object_resource(request.base_url, bucket, request.params["object_id"],
                                                 content_type, str(total), body.get("destination"))
            storage.create_file_from(bucket, request.params["object_id"], sources, dest)
        finally:
            _close(sources)
        response.json(dest)

    _answered(response, work)


_OWN = {objects.upload_partial: upload_partial, objects.copy: copy, objects.rewrite: rewrite,
        objects.compose: compose}

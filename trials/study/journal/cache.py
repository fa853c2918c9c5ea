"""What is kept beside a journal to read it fast: one file format, one rule for when a kept file holds.

Two files are kept beside ``journal.log`` (the read benchmark decides which earn their lines:
``benchmarks/README.md`` part 10):

- ``journal.log.snapshot`` (:data:`SNAPSHOT`): the lean replay of a journal prefix
  (:mod:`trials.study.replay`), read by ``describe``, ``best``, ``list`` and ``resume`` of an ended
  job, which then read only the journal's tail;
- ``journal.log.rest`` (:data:`TEXTS`): each finished trial's ``describe --format json`` text, per job,
  under the digest of what the text is made of besides the trial (:func:`spec_digest`).

**The format**: lines of JSON. The first is the header: this format, the trials version that wrote
it, its kind, and the journal prefix it is of (its length ``n_bytes``, its CRC-32 ``digest``, and the
journal's device, inode, size and modification and change times while it was hashed); each later line
is one part, read in order and only as far as the reader needs. A part of bytes (the texts, printable
ASCII and newlines: as JSON strings their escapes took longer to parse than the command's goal allows)
is a line ``{"bytes": N}`` followed by those N bytes and a newline.

**The rule**: a kept file holds while its header is of this format, this trials version and its kind,
and the journal still starts with the prefix it names: at once when the journal is the same file,
untouched since it was hashed (a write changes its change time, which no user can set; ``trials
repair`` writes a new file), else by hashing the journal's first ``n_bytes`` again. A kept file is
input, not code: opened without following a link, never blocking on a FIFO, a regular file only, and
parsed as JSON only. A kept file that is missing, stale, torn, foreign or of another version is as
none: the journal is replayed and the file written again (atomically; a job folder this process
cannot write keeps the old one). Against a rewrite, not against someone who can write the journal
(who can write anything the job shows): CRC-32, not a cryptographic hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from trials import __version__, files

SNAPSHOT = "snapshot"
TEXTS = "rest"
FORMAT = 1
MAX_HEADER_BYTES = 1 << 24  # the header holds ``list``'s per-study summaries: a few hundred bytes a job


class NotCurrent(Exception):
    """A kept file is there but does not hold (stale, torn, foreign, of another version, not a regular file)."""


def cache_path(journal: str, kind: str) -> str:
    return f"{journal}.{kind}"


def _line(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("ascii") + b"\n"


def _part(value: Any) -> bytes:
    if isinstance(value, bytes):
        return _line({"bytes": len(value)}) + value + b"\n"
    return _line(value)


def write(journal: str, kind: str, n_bytes: int, parts: Sequence[Any], **header: Any) -> None:
    """Keep ``parts`` (plain JSON values, or bytes) of the journal's first ``n_bytes`` as a file of
    ``kind``, with ``header``'s items in its header, atomically; a folder this process cannot write keeps
    the old one."""
    digest, journal_stat = prefix_digest(journal, n_bytes)
    head = {"format": FORMAT, "trials": __version__, "kind": kind, "n_bytes": n_bytes, "digest": digest,
            "journal_stat": journal_stat, **header}
    with contextlib.suppress(OSError):
        files.write_atomic(cache_path(journal, kind), b"".join(_part(part) for part in (head, *parts)))


class Kept:
    """A kept file that holds, open: its ``header``, then its parts in order (:meth:`part`)."""

    def __init__(self, f: IO[bytes], header: dict[str, Any]):
        self._f = f
        self.header = header
        self.n_bytes: int = header["n_bytes"]

    def part(self) -> Any:
        """The next part. Raises NotCurrent: torn or not JSON."""
        line = self._f.readline()
        if not line.endswith(b"\n"):
            raise NotCurrent("a torn part")
        try:
            return json.loads(line)
        except ValueError as err:
            raise NotCurrent(f"a part that is not JSON: {err}") from None

    def bytes_part(self) -> bytes:
        """The next part, one of bytes. Raises NotCurrent: torn, or not such a part."""
        size = self.part()
        if not (type(size) is dict and list(size) == ["bytes"] and type(size["bytes"]) is int and size["bytes"] >= 0):
            raise NotCurrent("not a part of bytes")
        if size["bytes"] >= os.fstat(self._f.fileno()).st_size - self._f.tell():  # (read would reserve it all first)
            raise NotCurrent("a part longer than the rest of the file")
        data = self._f.read(size["bytes"] + 1)
        if len(data) != size["bytes"] + 1 or data[-1:] != b"\n":
            raise NotCurrent("a torn part")
        return data[:-1]

    def __enter__(self) -> Kept:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


def open_current(journal: str, kind: str) -> Kept | None:
    """The file of ``kind`` kept for ``journal``, open, when it holds; None when there is none.

    Raises:
        NotCurrent: one is there that does not hold.
    """
    try:
        fd = files.open_regular(cache_path(journal, kind), os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise NotCurrent(f"unreadable: {err}") from None
    f = os.fdopen(fd, "rb")
    try:
        header = json.loads(f.readline(MAX_HEADER_BYTES))
        if not (isinstance(header, dict) and header.get("format") == FORMAT and header.get("kind") == kind
                and header.get("trials") == __version__ and type(header.get("n_bytes")) is int
                and header["n_bytes"] >= 0 and isinstance(header.get("digest"), str)):
            raise NotCurrent("another format, version or kind")
        if not prefix_holds(journal, header["n_bytes"], header["digest"], header.get("journal_stat")):
            raise NotCurrent("the journal no longer starts with the prefix it is of")
        return Kept(f, header)
    except BaseException as err:
        f.close()
        if isinstance(err, Exception) and not isinstance(err, NotCurrent):
            raise NotCurrent(f"{type(err).__name__}: {err}") from None
        raise


# --- the journal prefix a kept file is of -----------------------------------------------------------
# (file identity) -> [(n_bytes, crc)]: the prefixes hashed inside ``hashing_once`` (else None: none kept)
_HASHED: dict[tuple[int, int, int, int], list[tuple[int, int]]] | None = None


@contextlib.contextmanager
def hashing_once() -> Iterator[None]:
    """Within: a journal prefix hashed before (the file's device, inode, size and modification time the
    same) is continued from, not read again: for one command that checks both kept files of one
    journal (``describe --format json``: 2 x 56 MB at 10k trials). Scoped to that command: a
    long-lived process (the controller) hashes every time, as a rewrite in place within the clock's
    tick keeps the modification time."""
    global _HASHED
    outer, _HASHED = _HASHED, {} if _HASHED is None else _HASHED
    try:
        yield
    finally:
        _HASHED = outer


def prefix_hash(path: str, n_bytes: int) -> str:
    """The CRC-32 of the journal's first ``n_bytes`` with their length: what names the prefix a kept
    file is of (a journal rewritten behind its back no longer matches). It reads 56 MB in ~20 ms where
    SHA-1 took ~100. Inside :func:`hashing_once`, a prefix hashed before is continued from."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        done = [(n, c) for n, c in (_HASHED or {}).get(ident, ()) if n <= n_bytes]
        start, crc = max(done) if done else (0, 0)
        if start:
            f.seek(start)
        left = n_bytes - start
        while left > 0:
            n = f.readinto(view[:min(left, len(buf))])
            if not n:
                break
            crc = zlib.crc32(view[:n], crc)
            left -= n
    if not left and _HASHED is not None:
        _HASHED[ident] = [*_HASHED.get(ident, [])[-3:], (n_bytes, crc)]
    return f"crc32:{crc:08x}:{n_bytes - left}"


def _stat_key(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def prefix_digest(path: str, n_bytes: int) -> tuple[str, list[int] | None]:
    """``prefix_hash`` of the journal's first ``n_bytes``, and the journal's identity and times
    while it was hashed (None if it changed meanwhile): what ``prefix_holds`` checks first."""
    before = _stat_key(path)
    digest = prefix_hash(path, n_bytes)
    return digest, before if _stat_key(path) == before else None


def prefix_holds(path: str, n_bytes: int, digest: Any, stat_key: Any = None) -> bool:
    """Whether the journal still starts with the prefix ``prefix_digest`` named: at once when the
    journal is the same file, of the same size and modification and change times as when it was
    hashed (a finished job's: every command after the first), else by hashing it again (56 MB: ~0.1 s
    here). A write to the file changes its change time, which no user can set (and, since Linux 6.13,
    one after a stat is told from it); a rewrite through a new file (``trials repair``) changes its inode."""
    now = _stat_key(path)
    if now[2] < n_bytes:
        return False  # (truncated)
    if isinstance(stat_key, list) and stat_key == now:
        return True
    return bool(prefix_hash(path, n_bytes) == digest)


# --- the texts of ``describe --format json`` -------------------------------------------------------------
# what an indented text of ours holds: printable ASCII (non-ASCII is escaped) and newlines
_EXPECTED = bytes(range(0x20, 0x7F)) + b"\n"
_TEXTS_MADE = 1  # how a text is made (``view.describe_text``): another way, no text of the old one is used

Texts = dict[int, str]  # storage id -> the trial's text, as written two containers deep


@dataclass
class TextCache:
    """The kept texts, per job: ``{job id: (spec digest, texts)}``; each of a trial finished within the
    journal's first ``n_bytes`` (``load_texts`` checked that the journal still starts with them).

    A text is used only for a trial the journal holds finished within that prefix, which is exactly
    the trial it was made from (Optuna ignores any record about a finished trial); every other trial
    is converted from the journal."""

    n_bytes: int = 0
    jobs: dict[str, tuple[str, Texts]] = field(default_factory=dict)

    def texts(self, job_id: str, digest: str) -> Texts:
        """The job's texts, when they were made from this spec (else none)."""
        kept = self.jobs.get(job_id)
        return kept[1] if kept is not None and kept[0] == digest else {}


def spec_digest(spec: Mapping[str, Any] | None, metric_ids: Sequence[str]) -> str:
    """What a trial's text is made of besides the trial: the study spec, the metric ids, the way."""
    made_of = {"made": _TEXTS_MADE, "studySpec": (spec or {}).get("studySpec"), "metrics": list(metric_ids)}
    return hashlib.sha1(json.dumps(made_of, sort_keys=True, default=str).encode()).hexdigest()


def load_texts(journal: str) -> TextCache:
    """The texts kept for ``journal`` while it still starts with the prefix they are of; else none.
    A kept text that is anything but printable ASCII and newlines voids the file."""
    try:
        kept = open_current(journal, TEXTS)
        if kept is None:
            return TextCache()
        with kept:
            jobs = _texts_of(kept.part(), kept.bytes_part())
    except (NotCurrent, OSError):
        return TextCache()
    return TextCache(kept.n_bytes, jobs) if jobs is not None else TextCache()


def _texts_of(index: Any, data: bytes) -> dict[str, tuple[str, Texts]] | None:
    """The texts from their index ``{job id: [digest, [[storage id, length], ...]]}`` and ``data``, the
    texts one after another; None: not such, or a text that is not printable ASCII and newlines."""
    if type(index) is not dict or data.translate(None, _EXPECTED):
        return None
    blob = data.decode("ascii")
    jobs, at = {}, 0
    for job_id, kept in index.items():
        if type(kept) is not list or len(kept) != 2 or type(kept[0]) is not str or type(kept[1]) is not list:
            return None
        texts: Texts = {}
        for pair in kept[1]:
            if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not int or type(pair[1]) is not int \
                    or pair[1] < 0:
                return None
            texts[pair[0]] = blob[at:at + pair[1]]
            at += pair[1]
        jobs[job_id] = (kept[0], texts)
    return jobs if at == len(blob) else None


def _is_printable(text: str) -> bool:
    """Printable ASCII and newlines only (28 MB in ~20 ms: a regular expression took 0.5 s)."""
    return text.isascii() and not text.encode("ascii").translate(None, _EXPECTED)


def save_texts(journal: str, n_bytes: int, jobs: Mapping[str, tuple[str, Texts]]) -> None:
    """Keep ``jobs``' texts, each of a trial finished within the journal's first ``n_bytes`` (a text
    that is not printable ASCII and newlines voids the file when it is read)."""
    encoded = {job: (digest, [(sid, t.encode("utf-8")) for sid, t in texts.items()])
               for job, (digest, texts) in jobs.items()}
    index = {job: [digest, [[sid, len(b)] for sid, b in texts]] for job, (digest, texts) in encoded.items()}
    write(journal, TEXTS, n_bytes, [index, b"".join(b for _, texts in encoded.values() for _, b in texts)])

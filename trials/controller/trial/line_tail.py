"""Reading a trial's metric file line by line from where the last read ended, in bounded memory.

A line longer than ``max_line_bytes`` is skipped to its newline (its size noted, its bytes never
held); a torn last line waits for its newline; a file replaced, shrunk or (for a file rewritten
whole, as cloudml-hypertune does) whose first bytes or the bytes before the last read's end changed
is read again from its start.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

CHUNK_BYTES = 1 << 20
FINGERPRINT_BYTES = 4096


@dataclass(frozen=True, slots=True)
class TailState:
    """Where the next read of a file starts."""

    ino: int | None = None
    offset: int = 0  # just after the last byte consumed (a newline, or skipped bytes)
    skipping: int = 0  # bytes of an over-long line skipped so far (0: not inside one)
    skip_start: int = 0  # where that over-long line starts
    head: bytes = b""  # the file's first bytes, as read
    before: bytes = b""  # the bytes just before ``offset``, as read


@dataclass(eq=False)
class Scan:
    """One read of a file from ``start``; iterate :meth:`lines` once, then read the results."""

    fd: int
    start: TailState
    continued: bool  # it goes on from the previous read (False: the file is read from its start)
    max_line_bytes: int
    max_scan_bytes: int | None
    state: TailState = field(init=False)
    skipped: list[tuple[int, int]] = field(default_factory=list)  # (offset, size) of over-long lines
    at_eof: bool = False
    torn: bool = False  # a last line without its newline is left for a later read

    def __post_init__(self) -> None:
        self.state = self.start

    def lines(self) -> Iterator[bytes]:
        """The complete lines (without their newline) from the start, each at most
        ``max_line_bytes`` long."""
        start = self.start
        pos = consumed = start.offset
        skipping, skip_start = start.skipping, start.skip_start
        head = start.head if start.offset else b""
        buf = bytearray()
        recent: deque[tuple[int, bytes]] = deque(maxlen=3)
        scanned = 0
        while True:
            chunk = os.pread(self.fd, CHUNK_BYTES, pos)
            if not chunk:
                self.at_eof = True
                break
            recent.append((pos, chunk))
            if pos < FINGERPRINT_BYTES and len(head) < FINGERPRINT_BYTES and pos == len(head):
                head += chunk[:FINGERPRINT_BYTES - len(head)]
            i = 0
            while (j := chunk.find(b"\n", i)) >= 0:
                piece = chunk[i:j]
                if skipping:
                    self.skipped.append((skip_start, skipping + len(piece)))
                    skipping = 0
                elif len(buf) + len(piece) > self.max_line_bytes:
                    self.skipped.append((pos + i - len(buf), len(buf) + len(piece)))
                    buf.clear()
                else:
                    line = bytes(buf) + piece if buf else piece
                    buf.clear()
                    yield line
                consumed = pos + j + 1
                i = j + 1
            rest = len(chunk) - i
            if skipping:
                skipping += rest
                consumed = pos + len(chunk)
            elif rest:
                buf += chunk[i:]
                if len(buf) > self.max_line_bytes:  # garbage, not a torn line: skip it to its end
                    skipping, skip_start = len(buf), pos + len(chunk) - len(buf)
                    buf.clear()
                    consumed = pos + len(chunk)
            pos += len(chunk)
            scanned += len(chunk)
            if len(chunk) < CHUNK_BYTES:
                self.at_eof = True
                break
            if self.max_scan_bytes is not None and scanned >= self.max_scan_bytes:
                break
        self.torn = bool(buf) and self.at_eof
        before = start.before if consumed == start.offset else _bytes_before(self.fd, recent, consumed)
        self.state = TailState(ino=start.ino, offset=consumed, skipping=skipping, skip_start=skip_start,
                               head=head, before=before)


def _bytes_before(fd: int, recent: deque[tuple[int, bytes]], end: int) -> bytes:
    """The ``FINGERPRINT_BYTES`` before ``end``, from the chunks just read (else read again)."""
    lo = max(0, end - FINGERPRINT_BYTES)
    parts = []
    at = lo
    for pos, chunk in recent:
        if pos <= at < pos + len(chunk):
            piece = chunk[at - pos:min(end - pos, len(chunk))]
            parts.append(piece)
            at += len(piece)
    if at == end:
        return b"".join(parts)
    return os.pread(fd, end - lo, lo)


class LineTail:
    """The read position in one file across polls.

    Args:
        rewritten_whole: the writer rewrites the whole file (cloudml-hypertune): a read goes on
            from the last one only if the file's first bytes and those before the last read's end
            are as they were.
    """

    def __init__(self, *, rewritten_whole: bool):
        self.rewritten_whole = rewritten_whole
        self.state = TailState()

    def scan(self, fd: int, st: os.stat_result, *, max_line_bytes: int, max_scan_bytes: int | None) -> Scan:
        """A read of the open file ``fd`` (its ``fstat`` is ``st``); :meth:`commit` it once used."""
        prev = self.state
        go_on = (prev.offset > 0 and st.st_ino == prev.ino and st.st_size >= prev.offset
                 and (not self.rewritten_whole or self._unchanged(fd, prev)))
        start = prev if go_on else TailState(ino=st.st_ino)
        return Scan(fd=fd, start=start, continued=go_on, max_line_bytes=max_line_bytes,
                    max_scan_bytes=max_scan_bytes)

    @staticmethod
    def _unchanged(fd: int, prev: TailState) -> bool:
        if os.pread(fd, len(prev.head), 0) != prev.head:
            return False
        return os.pread(fd, len(prev.before), prev.offset - len(prev.before)) == prev.before

    def commit(self, scan: Scan) -> None:
        self.state = scan.state

    def reset(self) -> None:
        """Read the file from its start next time (a new writer, e.g. a restarted replica)."""
        self.state = TailState()

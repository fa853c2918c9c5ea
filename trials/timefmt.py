"""RFC 3339 timestamps and protobuf Duration strings, as the Vertex REST API writes them."""

from __future__ import annotations

import datetime
import re

# What rfc3339() writes (and strptime's "%Y-%m-%dT%H:%M:%S.%fZ" reads), parsed without _strptime:
# that module and its locale machinery cost ~3 ms to import at a job's end.
_RFC3339 = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})T(\d{1,2}):(\d{1,2}):(\d{1,2})\.(\d{1,6})Z")


def rfc3339(epoch_s: float) -> str:
    """``2026-11-30T05:30:27.123456Z``"""
    dt = datetime.datetime.fromtimestamp(epoch_s, tz=datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    """The epoch seconds of a :func:`rfc3339` text.

    Raises:
        ValueError: not such a text, or not a real date and time.
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 UTC timestamp like 2026-11-30T05:30:27.123456Z: {text!r}")
    year, month, day, hour, minute, second, fraction = match.groups()
    dt = datetime.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                           int(fraction.ljust(6, "0")), tzinfo=datetime.timezone.utc)
    return dt.timestamp()


def duration(seconds: float) -> str:
    """Protobuf Duration JSON: ``"12.5s"``."""
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return f"{text}s"


def wall_after(start_wall: float, start_mono: float, now_mono: float, *, not_before: float | None = None) -> float:
    """The wall time of an end: its start's wall time plus the monotonic time since the start.

    A wall clock set back (or forward) meanwhile does not move an end before its start or stretch a
    duration: durations come from the monotonic clock, timestamps from the wall clock. ``not_before``
    (an earlier start recorded by another process) bounds the result from below.
    """
    end = start_wall + max(0.0, now_mono - start_mono)
    return end if not_before is None else max(end, not_before)

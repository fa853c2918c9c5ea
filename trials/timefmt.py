"""RFC 3339 timestamps and protobuf Duration strings, as the Vertex REST API writes them."""

from __future__ import annotations

import datetime


def rfc3339(epoch_s: float) -> str:
    """``2026-11-30T05:30:27.123456Z``"""
    dt = datetime.datetime.fromtimestamp(epoch_s, tz=datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    dt = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return dt.timestamp()


def duration(seconds: float) -> str:
    """Protobuf Duration JSON: ``"12.5s"``."""
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return f"{text}s"

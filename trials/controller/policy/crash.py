"""The useful part of a crashed replica's stderr: the exception and the traceback's last lines.

Vertex's error text says only ``Termination reason: Error.``; the local view and the progress
output add this summary, read from plain lines or from JSON log lines (Cloud Logging's structured
form, whose ``message`` carries the traceback).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from trials.printable import printable

MAX_FRAME_LINES = 4  # the traceback's last lines kept beside the exception
MAX_LINE_CHARS = 300
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b.*|"
                        r"^[A-Za-z_][\w.]*: .*")
_JSON_TEXT_KEYS = ("message", "msg", "textPayload")
_JSON_TRACE_KEYS = ("exc_info", "exception", "stack_trace", "traceback", "stack")


def text_lines(stderr_tail: Sequence[str]) -> list[str]:
    """The stderr lines as text: a JSON log line becomes its message (and traceback) lines."""
    out: list[str] = []
    for raw in stderr_tail:
        line = raw.rstrip("\n")
        entry = _json_entry(line)
        if entry is None:
            out.append(line)
            continue
        for key in (*_JSON_TEXT_KEYS, *_JSON_TRACE_KEYS):
            value = entry.get(key)
            if isinstance(value, str) and value.strip():
                out.extend(value.splitlines())
    return out


def _json_entry(line: str) -> dict[str, object] | None:
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def summary(stderr_tail: Sequence[str]) -> list[str]:
    """The exception line, then up to ``MAX_FRAME_LINES`` last traceback lines; else the last
    non-empty line. Empty when stderr said nothing."""
    lines = [_clip(line) for line in text_lines(stderr_tail)]
    start = max((i for i, line in enumerate(lines) if line.strip() == _TRACEBACK), default=None)
    if start is not None:
        block = [line for line in lines[start + 1:] if line.strip()]
        frames = [line for line in block if line.startswith((" ", "\t"))]
        after = [line for line in block if not line.startswith((" ", "\t"))]
        exception = next((line for line in after if _EXCEPTION.match(line.strip())), None)
        if exception is None and after:
            exception = after[0]
        if exception is not None:
            return [exception.strip(), *(f.rstrip() for f in frames[-MAX_FRAME_LINES:])]
    for line in reversed(lines):
        if line.strip():
            return [line.strip()]
    return []


def _clip(line: str) -> str:
    text = printable(line)  # a trainer's ESC, BEL, NUL never reach a terminal, a page or JSON
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS - 3] + "..."

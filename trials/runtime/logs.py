"""Log records as Cloud Logging structured JSON lines (or plain text on a terminal)."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any

from trials import protocol
from trials.errors import ConfigError

# LogSeverity names (google/logging/type/log_severity.proto) for the standard levels.
_SEVERITY = {
    logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
    logging.ERROR: "ERROR", logging.CRITICAL: "CRITICAL",
}
FORMATS = ("json", "text")
LABELS = "logging.googleapis.com/labels"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def severity(levelno: int) -> str:
    """The Cloud Logging severity of a logging level (levels between two take the lower one)."""
    if levelno < logging.DEBUG:
        return "DEFAULT"
    best = "DEBUG"
    for level in sorted(_SEVERITY):
        if levelno >= level:
            best = _SEVERITY[level]
    return best


class JsonFormatter(logging.Formatter):
    """One JSON object per line with Cloud Logging's special fields.

    ``severity``, ``message`` (with the traceback when there is one, which Error Reporting picks
    up), ``timestampSeconds``/``timestampNanos``, ``logging.googleapis.com/labels`` and
    ``logging.googleapis.com/sourceLocation``; plus ``logger``. The fields of
    ``extra={"json_fields": {...}}`` (what Google's Cloud Logging library takes) are merged into the
    entry, as that library does; the special fields above keep their values.

    Example:
        >>> import logging
        >>> record = logging.LogRecord("x", logging.WARNING, "/a.py", 7, "hi %s", ("there",), None)
        >>> line = JsonFormatter(labels={"trial_id": "3"}).format(record)
        >>> import json; json.loads(line)["severity"], json.loads(line)["message"]
        ('WARNING', 'hi there')
    """

    def __init__(self, labels: Mapping[str, str] | None = None):
        super().__init__()
        self.labels = {str(k): str(v) for k, v in (labels or {}).items()}

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        elif record.exc_text:
            message = f"{message}\n{record.exc_text}"
        if record.stack_info:
            message = f"{message}\n{self.formatStack(record.stack_info)}"
        seconds = int(record.created)
        nanos = min(int(round((record.created - seconds) * 1e9)), 999_999_999)
        entry: dict[str, Any] = {
            "severity": severity(record.levelno),
            "message": message,
            "timestampSeconds": seconds,
            "timestampNanos": nanos,
            "logger": record.name,
            "logging.googleapis.com/sourceLocation": {
                "file": record.pathname, "line": str(record.lineno), "function": record.funcName,
            },
        }
        if self.labels:
            entry[LABELS] = dict(self.labels)
        extra = getattr(record, "json_fields", None)
        if isinstance(extra, Mapping):
            theirs = extra.get(LABELS)
            if isinstance(theirs, Mapping) and LABELS in entry:
                entry[LABELS] = {**{str(k): str(v) for k, v in theirs.items()}, **entry[LABELS]}
            entry = {**{str(k): v for k, v in extra.items()}, **entry}
        return json.dumps(entry, ensure_ascii=False, default=str)


def choose_format(environ: Mapping[str, str] | None = None, stream: IO[str] | None = None) -> str:
    """``$TRIALS_LOG_FORMAT`` if set, else text when ``stream`` (stdout) is a terminal, else json.

    Raises:
        ConfigError: ``$TRIALS_LOG_FORMAT`` is neither json nor text.
    """
    env = os.environ if environ is None else environ
    value = env.get(protocol.ENV_LOG_FORMAT, "").strip().lower()
    if value:
        if value not in FORMATS:
            raise ConfigError(
                f"${protocol.ENV_LOG_FORMAT} must be one of {', '.join(FORMATS)}, got {value!r}"
            )
        return value
    stream = sys.stdout if stream is None else stream
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


def make_formatter(fmt: str, labels: Mapping[str, str] | None = None) -> logging.Formatter:
    return JsonFormatter(labels) if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def install(*, fmt: str, labels: Mapping[str, str] | None = None, stream: IO[str] | None = None,
            level: int = logging.INFO) -> Callable[[], None] | None:
    """Send log records to ``stream`` (stderr) in ``fmt`` unless the root logger has handlers.

    A program that configured logging itself keeps its configuration (then this returns None).
    Otherwise it returns a function that undoes what this did (for in-process runs such as tests).
    """
    root = logging.getLogger()
    if root.handlers:
        return None
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(make_formatter(fmt, labels))
    old_level = root.level
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > level:
        root.setLevel(level)

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(old_level)

    return undo

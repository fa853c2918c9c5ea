"""A journal file checked record by record: which lines Optuna cannot read, and a repair keeping the rest."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from trials import files
from trials.errors import StorageError
from trials.study.optuna_internals import JournalStorageReplayResult

_SHOWN = 3  # bad lines named in a message


class CorruptJournalError(StorageError):
    """A job's journal file holds a record that cannot be read. Exit code 2: ``trials repair`` it."""

    exit_code = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class BadRecord:
    """One unreadable line of a journal (1-based) and why."""

    line: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalScan:
    """A journal read line by line: the raw lines Optuna can apply, and the ones it cannot."""

    good: list[bytes]
    bad: list[BadRecord]


def _parse(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    if not raw.endswith(b"\n"):
        return None, "a torn record (no newline)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 (byte {err.start})"
    if "\0" in text:
        return None, "NUL bytes"
    try:
        record = json.loads(text)
    except ValueError as err:
        return None, f"not JSON ({err.args[0].split(':')[0] if err.args else 'invalid'})"
    if not isinstance(record, dict) or not isinstance(record.get("op_code"), int):
        return None, "JSON, but not a journal record (no integer op_code)"
    return record, ""


def scan(path: str) -> JournalScan:
    """Replay ``path`` one record at a time (as Optuna would), keeping the lines it can apply."""
    replay = JournalStorageReplayResult("trials-check-")
    good: list[bytes] = []
    bad: list[BadRecord] = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            record, why = _parse(raw)
            glued = raw.rfind(b'{"op_code"')
            if record is None and glued > 0:  # a torn record with the next one glued to it
                record, _ = _parse(raw[glued:])
                if record is not None:
                    raw = raw[glued:]
                    bad.append(BadRecord(line=number, reason=f"{why}: a torn record before byte {glued}, "
                                                             "the record after it kept"))
                    why = ""
            if record is not None:
                try:
                    replay.apply_logs([record])
                except Exception as err:  # noqa: BLE001 - any shape Optuna trips over
                    why = f"a record Optuna cannot apply ({type(err).__name__})"
            if why:
                bad.append(BadRecord(line=number, reason=why))
            else:
                good.append(raw)
    return JournalScan(good=good, bad=bad)


def corrupt_error(path: str, cause: BaseException | None = None) -> CorruptJournalError:
    """The one-line error for a journal that cannot be read: file, first bad lines, what to do."""
    job = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if os.path.isdir(path):
        return CorruptJournalError(f"{path}: expected the job's journal file, got a directory")
    try:
        bad = scan(path).bad
    except OSError as err:
        return CorruptJournalError(f"{path}: cannot read the journal: {err.strerror or err}")
    if not bad:  # Optuna failed, yet every line applies alone: name its error
        why = f"{type(cause).__name__}: {cause}" if cause else "unreadable"
        return CorruptJournalError(f"{path}: the journal cannot be read ({why})")
    shown = "; ".join(f"line {b.line}: {b.reason}" for b in bad[:_SHOWN])
    more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
    return CorruptJournalError(
        f"{path}: {shown}{more}; `trials repair {job}` keeps every readable record and drops "
        f"{'these' if len(bad) > 1 else 'this one'} (the original is kept beside it)")


def repair(path: str) -> tuple[JournalScan, str | None]:
    """Rewrite ``path`` with only its readable records; the original is kept as ``<path>.corrupt-<time>``.

    Returns the scan and the backup's path (``None`` when nothing had to be dropped). Call only
    while no controller writes the journal.
    """
    result = scan(path)
    if not result.bad:
        return result, None
    backup = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
    os.link(path, backup)
    files.write_atomic(path, b"".join(result.good), fsync=True)
    return result, backup

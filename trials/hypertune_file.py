"""The cloudml-hypertune metric file: one JSON object a line, values as strings; parsed tolerantly.

The library rewrites the whole file on each report (a reader may see it torn), keeps its last 100
reports, and writes ``"0"`` for a missing step. Both the controller's reader and the runtime's local
view of a trial parse it here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from trials.records import Measurement

HYPERTUNE_RESERVED_KEYS = frozenset({"checkpoint_path", "global_step", "timestamp", "trial"})


@dataclass(frozen=True, slots=True, kw_only=True)
class HypertuneLine:
    """One metric of one line of a cloudml-hypertune file (a line may in theory hold several)."""

    tag: str
    value: float
    step: int
    timestamp: float | None = None
    trial: str | None = None
    checkpoint_path: str = ""


def _parse_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):
        return None


def _parse_step(value: object) -> int | None:
    """``"10"`` -> 10; the library writes "0" for None, so a missing step is 0; else None if bad."""
    if value is None:
        return 0
    number = _parse_float(value)
    if number is None or not math.isfinite(number) or number < 0 or not number.is_integer():
        return None
    return int(number)


def parse_hypertune_line(raw: str) -> list[HypertuneLine] | None:
    """The metrics of one stripped line; ``None`` unless it is a JSON object (torn, foreign)."""
    if not raw.startswith("{"):
        return None
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    step = _parse_step(record.get("global_step"))
    if step is None:
        return []
    timestamp = _parse_float(record.get("timestamp"))
    if timestamp is not None and not math.isfinite(timestamp):
        timestamp = None
    trial = record.get("trial")
    trial = None if trial is None else str(trial)
    checkpoint = record.get("checkpoint_path")
    checkpoint = checkpoint if isinstance(checkpoint, str) else ""
    out = []
    for tag, raw_value in record.items():
        if tag in HYPERTUNE_RESERVED_KEYS:
            continue
        value = _parse_float(raw_value)
        if value is not None:
            out.append(HypertuneLine(tag=tag, value=value, step=step, timestamp=timestamp,
                                     trial=trial, checkpoint_path=checkpoint))
    return out


def parse_hypertune_text(text: str) -> list[HypertuneLine]:
    """Parse a cloudml-hypertune metrics file; never raises.

    Skips torn, non-JSON and non-object lines, values that do not parse as a float, and negative or
    non-integral steps; keeps every tag (filtering is the caller's business). Values are strings in
    the file (``"0.9"``, ``"nan"``) and become floats; a missing ``global_step`` is step 0, as the
    library writes for ``None``.

    Example:
        >>> parse_hypertune_text('{"acc": "0.9", "global_step": "10", "timestamp": 5.0}')
        [HypertuneLine(tag='acc', value=0.9, step=10, timestamp=5.0, trial=None, checkpoint_path='')]
    """
    out: list[HypertuneLine] = []
    for raw in text.splitlines():
        out.extend(parse_hypertune_line(raw.strip()) or ())
    return out


def hypertune_measurements(lines: list[HypertuneLine]) -> list[Measurement]:
    """Lines grouped by step into measurements, in step order; a later line for a step and tag wins.

    A step's timestamp is that of its first line that has one.
    """
    by_step: dict[int, dict[str, float]] = {}
    stamps: dict[int, float] = {}
    for line in lines:
        by_step.setdefault(line.step, {})[line.tag] = line.value
        if line.timestamp is not None:
            stamps.setdefault(line.step, line.timestamp)
    return [Measurement(step=s, metrics=by_step[s], timestamp=stamps.get(s)) for s in sorted(by_step)]

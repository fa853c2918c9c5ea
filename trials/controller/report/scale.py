"""Axis limits for the report's plots, pure: a value axis ends on round ticks a little past its data,
an integer axis (trial ids, steps) half a unit or more past its ends, so no mark sits on the frame."""

from __future__ import annotations

import math

STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)  # tick steps, times a power of ten
PAD = 0.02  # of the data's span, kept free at each end before rounding (a mark is not cut by the frame)


def tick_step(span: float, n: int = 6) -> float:
    """A round step that cuts ``span`` into about ``n`` parts (1, 2, 2.5 or 5 times a power of ten)."""
    raw = span / n
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in STEPS if m * mag >= raw * (1 - 1e-9))


def nice_limits(low: float, high: float, *, n: int = 6, pad: float = PAD) -> tuple[float, float, float]:
    """(lower limit, upper limit, tick step): limits on round values (multiples of half the tick
    step) enclosing ``[low, high]`` and a ``pad`` of its span on each side (one value: ±5% of it, or
    ±0.5 around 0). Accuracies from 0 to 1 get -0.1 to 1.1, ticks 0 to 1 by 0.2."""
    low, high = min(low, high), max(low, high)
    if high == low:
        around = abs(high) * 0.05 or 0.5
        low, high = low - around, high + around
    span = high - low
    lo, hi = low - pad * span, high + pad * span
    step = tick_step(hi - lo, n)
    half, eps = step / 2, step * 1e-9  # a limit that is round already stays
    return _round(math.floor((lo + eps) / half) * half), _round(math.ceil((hi - eps) / half) * half), step


def integer_limits(low: int, high: int, *, pad: float = PAD) -> tuple[float, float]:
    """Limits for an axis of whole numbers: half a unit past each end, more on a long axis."""
    margin = max(0.5, round(pad * (high - low)))
    return low - margin, high + margin


def with_strip(low: float, high: float, *, strip: float, n: int = 6) -> tuple[float, float, float]:
    """``nice_limits`` with the lowest ``strip`` (a fraction of the axis) below ``low`` left free, for
    the marks of trials that have no value."""
    lo, hi, step = nice_limits(low, high, n=n)
    for _ in range(100):  # a step at a time; bounded whatever the numbers
        if (low - lo) >= strip * (hi - lo):
            break
        lo = _round(lo - step / 2)
    return lo, hi, step


def _round(x: float) -> float:
    return round(x, 12) + 0.0  # no -0.0, no 0.30000000000000004

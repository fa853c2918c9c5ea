"""Pure early-stopping rules for the three automated stopping specs.

Each rule looks at one running trial's curve (x, y) of the primary metric and the curves of the
trials that ran to completion, and says whether to stop the running trial now. The x-axis is the
step count, or the elapsed seconds when ``useElapsedDuration`` is set. Values are oriented so that
larger is better (minimized metrics are negated by the caller via ``orient``).

- median (``medianAutomatedStoppingSpec``): Vertex's rule (best value below the median of the completed
  trials' running averages) stopped the best slow starters or saved little on our benchmark, so ours
  asks the question directly: stop when the trial's best value so far is worse, at the same x, than
  the best value there of every completed trial whose result ranks in the top quarter (the leaders).
  A slow starter that is on the path of any leader is never stopped; a trial behind all of them is.
- decay curve (``decayCurveStoppingSpec``): Vertex fits a GP to predict the final value. Our honest
  equivalent is curve matching: the trial's predicted final value is its current value plus the
  largest gain any completed trial made from the same x to its end; stop when even that optimistic
  prediction does not reach the best final value so far.
- convex (``convexAutomatedStoppingSpec``): Vertex fits a convex (decelerating) curve. Ours assumes
  the gains of the last measurements keep shrinking geometrically, extrapolates to ``maxStepCount``
  (learned as the longest completed curve when unset), and stops when that prediction does not reach
  the best final value. The extrapolation is calibrated on the completed curves (it adds the largest
  under-prediction it made on them from the same x), so a curve like the best one is never stopped.
  The prediction is returned so the caller records it as the trial's last measurement, as Vertex does.

Every rule first passes the same guards (``guard``), so a stop always saves work and is never made
on too little evidence: enough completed trials; completed trials that report more than once (a job
whose trials report only at the end, such as AI Platform's single report at global_step=1000, has
nothing to stop early); a trial with enough reports of its own (optionally, far enough into the
horizon); and never at or beyond the last x any completed trial reached (the trial is about to end).
The median rule compares best values with best values at the same x, so a trial 0.07 % below a noisy
median is not stopped unless it is also behind every leader there.
``ended_early`` says whether a stopped trial really ended before its end (it may have finished while
being stopped).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from trials.spec import StoppingKind, StoppingSpec

Curve = Sequence[tuple[float, float]]  # (x, value), x increasing

# Chosen in benchmarks/early_stopping.py over five workloads x 5 seeds and checked on 5 held-out seeds
# (benchmarks/README.md, part 4): no loss of the best result beyond seed noise, no futile stop.
MIN_COMPLETED = 10  # the decay-curve rule: completed curves needed before it may stop a trial
MIN_POINTS = 1  # measurements of the running trial needed (a job whose trials report once: never)
MIN_FRACTION = 0.0  # no stop before this fraction of the horizon (0.1 and 0.25 cost savings, saved nothing)
MEDIAN_MIN_COMPLETED = 6  # the median rule's own evidence: completed curves needed
TOP_FRACTION = 0.25  # median rule: the leaders are the completed trials whose result ranks in this top fraction


@dataclass(frozen=True, slots=True)
class StopDecision:
    stop: bool
    reason: str = ""
    predicted_final: float | None = None  # convex rule: the extrapolated value (oriented)
    predicted_x: float | None = None


KEEP = StopDecision(False)


def orient(value: float, maximize: bool) -> float:
    return value if maximize else -value


def _show(value: float, maximize: bool) -> str:
    """A value for a message, back in the metric's own sign."""
    return f"{orient(value, maximize):.6g}"


def running_average_at(curve: Curve, x: float) -> float | None:
    """Mean of the curve's values with x' <= x (None when the curve has none yet)."""
    xs = [p[0] for p in curve]
    n = bisect.bisect_right(xs, x)
    if n == 0:
        return None
    values = [p[1] for p in curve[:n] if not math.isnan(p[1])]
    return statistics.fmean(values) if values else None


def value_at(curve: Curve, x: float) -> float | None:
    xs = [p[0] for p in curve]
    n = bisect.bisect_right(xs, x)
    return curve[n - 1][1] if n else None


def horizon(completed: Sequence[Curve]) -> float | None:
    """The last x any completed trial reached (None without completed curves)."""
    ends = [c[-1][0] for c in completed if c]
    return max(ends) if ends else None


def guard(current: Curve, completed: Sequence[Curve], *, min_completed: int = MIN_COMPLETED,
          min_points: int = MIN_POINTS, min_fraction: float = MIN_FRACTION) -> bool:
    """Whether any rule may stop ``current`` now: enough evidence, and a stop would save work."""
    completed = [c for c in completed if c]
    if len(completed) < min_completed or len(current) < max(min_points, 1):
        return False
    if statistics.median(len(c) for c in completed) < 2:
        return False  # completed trials report once (at their end): nothing to save, nothing to compare
    end = horizon(completed)
    x = current[-1][0]
    return end is not None and min_fraction * end <= x < end


def ended_early(current: Curve, completed: Sequence[Curve]) -> bool:
    """Whether a trial told to stop really ended before its end: its last x is before the horizon."""
    end = horizon([c for c in completed if c])
    return bool(current) and end is not None and current[-1][0] < end


def best_at(curve: Curve, x: float) -> float | None:
    """The curve's best value with x' <= x (None when it has none yet)."""
    xs = [p[0] for p in curve]
    n = bisect.bisect_right(xs, x)
    values = [p[1] for p in curve[:n] if not math.isnan(p[1])]
    return max(values) if values else None


def _quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile, linearly interpolated between order statistics (numpy's default)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median_rule(current: Curve, completed: Sequence[Curve], *, min_completed: int = MEDIAN_MIN_COMPLETED,
                min_points: int = MIN_POINTS, min_fraction: float = MIN_FRACTION, top: float = TOP_FRACTION,
                maximize: bool = True, elapsed: bool = False) -> StopDecision:
    """Stop when the trial's best value so far is worse than the best value at the same point of every
    completed trial whose result ranks in the ``top`` fraction (the leaders): none of the trials that
    ended near the top was this far behind there (``elapsed``: the curves' x is seconds, else steps;
    it words the reason)."""
    if not guard(current, completed, min_completed=min_completed, min_points=min_points,
                 min_fraction=min_fraction):
        return KEEP
    x = current[-1][0]
    pairs = [(at, final) for c in completed
             if (at := best_at(c, x)) is not None and (final := best_at(c, c[-1][0])) is not None]
    if len(pairs) < max(min_completed, 1):
        return KEEP
    cut = _quantile([final for _, final in pairs], 1 - top)
    leaders = [at for at, final in pairs if final >= cut]
    bar = min(leaders)
    best = max((v for _, v in current if not math.isnan(v)), default=-math.inf)
    if best < bar:
        worse = "below" if maximize else "above"
        where = f"{x:g} s" if elapsed else f"step {x:g}"
        shown = _show(best, maximize) if best > -math.inf else "NaN (no number reported)"
        return StopDecision(True, f"best value {shown} is {worse} {_show(bar, maximize)}: at "
                                  f"{where}, each of the {len(leaders)} completed trials (of {len(pairs)}) that "
                                  f"ended in the top {_fraction(top)} had reached {_show(bar, maximize)} or better")
    return KEEP


def _fraction(top: float) -> str:
    return {0.5: "half", 0.25: "quarter"}.get(top, f"{top * 100:g} %")


def decay_curve_rule(current: Curve, completed: Sequence[Curve], *, min_completed: int = MIN_COMPLETED,
                     min_points: int = MIN_POINTS, min_fraction: float = MIN_FRACTION,
                     maximize: bool = True) -> StopDecision:
    if not guard(current, completed, min_completed=min_completed, min_points=min_points,
                 min_fraction=min_fraction):
        return KEEP
    x, y = current[-1]
    if math.isnan(y):
        return KEEP
    best_final = max(c[-1][1] for c in completed if c)
    gains = []
    for c in completed:
        at = value_at(c, x)
        if at is None or c[-1][0] <= x:
            continue
        gains.append(max(v for xx, v in c if xx >= x) - at)
    if len(gains) < min_completed:
        return KEEP
    optimistic = y + max(gains)
    if optimistic < best_final:
        return StopDecision(True, f"even the largest remaining gain seen ({max(gains):.6g}) would "
                                  f"end at {_show(optimistic, maximize)}, worse than the best "
                                  f"{_show(best_final, maximize)}")
    return KEEP


def _convex_extrapolate(points: Curve, horizon: float) -> float | None:
    """Extrapolate the last three points to ``horizon`` assuming geometrically shrinking gains."""
    if len(points) < 3:
        return None
    (_, y0), (x1, y1), (x2, y2) = points[-3], points[-2], points[-1]
    if any(math.isnan(v) for v in (y0, y1, y2)):
        return None
    g1, g2 = y1 - y0, y2 - y1
    steps_left = max(0.0, (horizon - x2) / max(x2 - x1, 1e-12))
    if g1 > 0 and 0 < g2 < g1:
        ratio = g2 / g1
        return y2 + g2 * ratio * (1 - float(ratio ** steps_left)) / (1 - ratio)
    # Gains not shrinking: extrapolate linearly with the recent gain, never downward.
    return y2 + max(g2, 0.0) * steps_left


def convex_rule(
    current: Curve,
    completed: Sequence[Curve],
    *,
    max_step: float | None,
    min_step: float | None,
    min_measurements: int | None,
    maximize: bool = True,
) -> StopDecision:
    need = min_measurements if min_measurements is not None else 5
    if len(completed) <= need or len(current) < max(need, 3) or not guard(current, completed, min_completed=need + 1):
        return KEEP
    end = max_step if max_step else max(c[-1][0] for c in completed if c)
    floor = min_step if min_step is not None else end / 10
    x, y = current[-1]
    if x < floor or x >= end or math.isnan(y):
        return KEEP
    predicted = _convex_extrapolate(current, end)
    if predicted is None:
        return KEEP
    # Calibrate on the completed curves: add the largest amount by which the same extrapolation,
    # made at the same x, under-predicted their real final value.
    errors = []
    for c in completed:
        head = [p for p in c if p[0] <= x]
        guess = _convex_extrapolate(head, end)
        if guess is not None:
            errors.append(c[-1][1] - guess)
    predicted += max([0.0, *errors])
    best_final = max(c[-1][1] for c in completed if c)
    if predicted < best_final:
        return StopDecision(True, f"convex extrapolation to {end:g} predicts "
                                  f"{_show(predicted, maximize)}, worse than the best "
                                  f"{_show(best_final, maximize)}",
                            predicted_final=predicted, predicted_x=end)
    return KEEP


def decide(spec: StoppingSpec, current: Curve, completed: Sequence[Curve], *,
           maximize: bool = True) -> StopDecision:
    """Apply the stopping spec's rule to one running trial (``maximize`` only words the reason)."""
    if spec.kind is StoppingKind.MEDIAN:
        return median_rule(current, completed, maximize=maximize, elapsed=spec.use_elapsed_duration)
    if spec.kind is StoppingKind.DECAY_CURVE:
        return decay_curve_rule(current, completed, maximize=maximize)
    return convex_rule(
        current, completed, max_step=spec.max_step_count, min_step=spec.min_step_count,
        min_measurements=spec.min_measurement_count, maximize=maximize,
    )

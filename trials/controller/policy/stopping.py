"""Pure early-stopping rules for the three automated stopping specs.

Each rule looks at one running trial's curve (x, y) of the primary metric and the curves of the trials
before it, and says whether to stop the running trial now. The x-axis is the step count, or the elapsed
seconds when ``useElapsedDuration`` is set. Values are oriented so that larger is better (minimized
metrics are negated by the caller via ``orient``). The other trials come as :class:`Reference`: a curve,
its trial id (named in a stop's reason) and whether it ran to its end (completed) or was stopped early.

- median (``medianAutomatedStoppingSpec``): Vertex documents "best value below the median of the other
  trials' running averages"; measured with the default sampler on real curves (benchmarks/README.md part
  12) that rule only stops clearly bad trials on rising curves (a trial's best is above its own running
  average) and saved 13-18 % of the work. Ours asks whether the trial is on the path of any leader: it
  is stopped when its value at x is below the value there of every leader (by more than the completed
  curves' step-to-step noise, :func:`noise`: one validation example is no reason), the top :data:`MEDIAN_TOP`
  (a fifth) of the other trials ranked as the sampler ranks them (``npgp.stopped_as_values``: completed
  ones by their final value, above those stopped early and those still running, which rank by how far
  they got). Every trial counts, a stopped one with its curve up to its stop and a running one with its
  curve so far (Vizier uses every measurement of every trial), so the bar moves as the job learns: each
  stop adds a trial to the ranking, so the top fifth takes in more of the completed trials and the bar
  comes down (the leaders of issue 16 were the completed trials' top quarter alone: once the rule stopped
  every new trial, nothing completed and two trials' first epoch stayed the bar for the rest of the job).
  At an x where fewer than :data:`MEDIAN_MIN_TRIALS` trials have a report, the rule waits; the running
  trials' reports count there, so with trials in parallel the first trials after the first completed
  ones are judged too. A trial on a leader's path that can no longer reach the best final value is
  stopped as the decay-curve rule below stops it, from :data:`MEDIAN_HOPELESS_COMPLETED` completed
  curves that were no better than it at x (``from_behind``: a curve ahead of it is further along and gains
  less; from those, a slow learner behind fast ones that overfit was stopped at its first step, and the
  gbdt curves' best final suffered), and so is a trial past its best (:func:`past_best_rule`: its last
  :data:`MEDIAN_PATIENCE` values below its own best, which never reached the best final: an overfitting
  curve leads early and falls late, and stays on the leaders' path until it falls below all of them).
  The reason names the trials that formed the bar.
- decay curve (``decayCurveStoppingSpec``): Vertex predicts the final value from the curve and stops a
  trial when its chance of beating the best value so far is very low. Ours predicts from the completed
  trials' own curves: each completed trial that ran past x says how much a curve gained from x to its
  end; the trial is stopped when none of those gains (at least :data:`MIN_COMPLETED` of them) would
  bring its current value to the best final value so far: an estimated chance of 0 in that many. (The
  gains of a trial stopped early end at its stop, so they say nothing of a final value: not used.)
- convex (``convexAutomatedStoppingSpec``): Vertex fits a convex (decelerating) curve. Ours assumes
  the gains of the last measurements keep shrinking geometrically, extrapolates to ``maxStepCount``
  (learned as the longest completed curve when unset), and stops when that prediction does not reach
  the best final value. The extrapolation is calibrated on the completed curves (it adds the largest
  under-prediction it made on them from the same x), so a curve like the best one is never stopped.
  The prediction is returned so the caller records it as the trial's last measurement, as Vertex does.

Every rule first passes the same guards (``guard``), so a stop always saves work: completed trials
that report more than once (a job whose trials report only at the end, such as AI Platform's single
report at global_step=1000, has nothing to stop early); a trial with enough reports of its own; and
never in the last tenth (:data:`MAX_FRACTION`) of the horizon, the last x any completed trial reached: a
stop there saves at most a tenth of a trial and loses its final value, which the sampler learns most from
and the user may pick (measured on part 12's gbdt curves: the median spec's stops in that tenth were a third of
the good trials it killed and saved under 1 % of the epochs). ``ended_early``
says whether a stopped trial really ended before its end (it may have finished while being stopped).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from trials.spec import StoppingKind, StoppingSpec

Curve = Sequence[tuple[float, float]]  # (x, value), x increasing

# Chosen on benchmarks/combined.py (part 12): real curves of two workloads, the default sampler, screened on 30-60 seeds
# in one process (benchmarks/combined_replay.py), recorded with real jobs on 20.
MIN_COMPLETED = 5  # the decay-curve rule: completed curves running past x needed before it may stop a trial
MIN_POINTS = 1  # measurements of the running trial needed (a job whose trials report once: never)
MIN_FRACTION = 0.0  # no stop before this fraction of the horizon (0.1 and 0.25 cost savings, saved nothing)
MAX_FRACTION = 0.9  # no stop from this fraction of the horizon on: it would save a tenth and lose a final value
MEDIAN_MIN_TRIALS = 5  # the median rule: trials with a running average at x needed for a bar there
MEDIAN_MIN_COMPLETED = 1  # ... of which completed (where trials end: a stop must save work)
MEDIAN_TOP = 0.2  # the median rule's leaders: this top fraction of the other trials
MEDIAN_HOPELESS_COMPLETED: int | None = 2  # ... and stops a trial the decay-curve rule finds hopeless from this many
MEDIAN_PATIENCE = 4  # ... and a trial past its best for this many reports whose best never reached the best final
SHOWN_TRIALS = 8  # a stop's reason names at most this many trials of its bar ("and N more")


@dataclass(frozen=True, slots=True)
class Reference:
    """Another trial's curve a rule compares with: its id (named in reasons), whether it ran to its end, and
    whether it is still running (its curve so far; not completed)."""

    curve: Curve
    trial_id: str = ""
    completed: bool = True
    running: bool = False


def references(curves: Sequence[Curve | Reference]) -> list[Reference]:
    """Plain curves are completed trials' (with no id); empty curves are left out."""
    out = []
    for c in curves:
        ref = c if isinstance(c, Reference) else Reference(curve=c)
        if ref.curve:
            out.append(ref)
    return out


def _completed(curves: Sequence[Curve | Reference]) -> list[Curve]:
    return [r.curve for r in references(curves) if r.completed]


def _names(refs: Sequence[Reference]) -> str:
    """"trials 3, 5 and 9" (at most SHOWN_TRIALS, then "and N more"); "" when they have no ids."""
    ids = sorted((r.trial_id for r in refs if r.trial_id), key=lambda t: (len(t), t))
    if not ids:
        return ""
    if len(ids) > SHOWN_TRIALS:
        shown = ", ".join(ids[:SHOWN_TRIALS]) + f" and {len(ids) - SHOWN_TRIALS} more"
    else:
        shown = ", ".join(ids[:-1]) + (" and " if len(ids) > 1 else "") + ids[-1]
    return f"trial{'s' if len(ids) > 1 else ''} {shown}"


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


def guard(current: Curve, others: Sequence[Curve | Reference], *, min_completed: int = MIN_COMPLETED,
          min_points: int = MIN_POINTS, min_fraction: float = MIN_FRACTION,
          max_fraction: float = MAX_FRACTION) -> bool:
    """Whether any rule may stop ``current`` now: enough completed trials, and a stop would save work (x is
    before ``max_fraction`` of the horizon: a trial in its last stretch is let finish, for its final value)."""
    completed = _completed(others)
    if len(completed) < min_completed or len(current) < max(min_points, 1):
        return False
    if statistics.median(len(c) for c in completed) < 2:
        return False  # completed trials report once (at their end): nothing to save, nothing to compare
    end = horizon(completed)
    x = current[-1][0]
    return end is not None and min_fraction * end <= x < max_fraction * end


def ended_early(current: Curve, others: Sequence[Curve | Reference]) -> bool:
    """Whether a trial told to stop really ended before its end: its last x is before the horizon."""
    end = horizon(_completed(others))
    return bool(current) and end is not None and current[-1][0] < end


def best_at(curve: Curve, x: float) -> float | None:
    """The curve's best value with x' <= x (None when it has none yet)."""
    xs = [p[0] for p in curve]
    n = bisect.bisect_right(xs, x)
    values = [p[1] for p in curve[:n] if not math.isnan(p[1])]
    return max(values) if values else None


def _rank_key(ref: Reference) -> tuple[int, float, float]:
    """How the sampler ranks a finished trial (larger is better; ``npgp.stopped_as_values``, Optuna TPE's
    order): every completed trial by its final value above every stopped one, those by how far they got,
    then by their value there (NaN: the worst). A running trial ranks as if stopped at its last report."""
    x, y = ref.curve[-1]
    y = -math.inf if math.isnan(y) else y
    return (1, y, 0.0) if ref.completed else (0, x, y)


def median_rule(current: Curve, others: Sequence[Curve | Reference], *, min_trials: int = MEDIAN_MIN_TRIALS,
                min_completed: int = MEDIAN_MIN_COMPLETED, min_points: int = MIN_POINTS,
                min_fraction: float = MIN_FRACTION, top: float = MEDIAN_TOP,
                hopeless_completed: int | None = None, patience: int = MEDIAN_PATIENCE, maximize: bool = True,
                elapsed: bool = False) -> StopDecision:
    """Stop when the trial's value at x is below the value there of every leader: the ``top`` fraction of
    the other trials, ranked as the sampler ranks them (completed ones by their final value, above those
    stopped early or running; each one's curve up to its stop or its last report). Waits where fewer than
    ``min_trials`` trials have a report at or before x (``elapsed``: the curves' x is seconds, else steps; it
    words the reason). Else (waiting or not), with ``hopeless_completed`` completed curves, stops a trial past
    its best (:func:`past_best_rule`, ``patience`` reports) and one that cannot reach the best final value
    (:func:`decay_curve_rule` from the completed curves that were no better at x: its own wait); the median spec
    (:func:`decide`) asks for :data:`MEDIAN_HOPELESS_COMPLETED`, None leaves the leaders alone."""
    decision = _leaders_rule(current, others, min_trials=min_trials, min_completed=min_completed,
                             min_points=min_points, min_fraction=min_fraction, top=top, maximize=maximize,
                             elapsed=elapsed)
    if decision.stop or hopeless_completed is None:
        return decision
    decision = past_best_rule(current, others, patience=patience, min_completed=hopeless_completed,
                              min_fraction=min_fraction, maximize=maximize, elapsed=elapsed)
    if decision.stop:
        return decision
    return decay_curve_rule(current, others, min_completed=hopeless_completed, min_points=min_points,
                            min_fraction=min_fraction, maximize=maximize, from_behind=True, elapsed=elapsed)


def _leaders_rule(current: Curve, others: Sequence[Curve | Reference], *, min_trials: int, min_completed: int,
                  min_points: int, min_fraction: float, top: float, maximize: bool, elapsed: bool) -> StopDecision:
    if not guard(current, others, min_completed=min_completed, min_points=min_points, min_fraction=min_fraction):
        return KEEP
    x, y = current[-1]
    refs = references(others)
    if sum(1 for r in refs if value_at(r.curve, x) is not None) < max(min_trials, 1):
        return KEEP  # too few trials reached x for a bar: wait
    ranked = sorted(refs, key=_rank_key, reverse=True)
    leaders = [(r, v) for r in ranked[:max(1, math.ceil(top * len(ranked)))]
               if (v := value_at(r.curve, x)) is not None and not math.isnan(v)]
    if not leaders:
        return KEEP
    bar = min(v for _, v in leaders)
    margin = noise([r.curve for r in refs if r.completed])
    if not (math.isnan(y) or y < bar - margin):
        return KEEP
    worse = "below" if maximize else "above"
    where = f"{x:g} s" if elapsed else f"step {x:g}"
    shown = "NaN (no number reported)" if math.isnan(y) else _show(y, maximize)
    n_stopped = sum(1 for r, _ in leaders if not r.completed and not r.running)
    n_running = sum(1 for r, _ in leaders if r.running)
    of = "".join([f", {n_stopped} of them stopped early (at their stop)" if n_stopped else "",
                  f", {n_running} of them running (at their last report)" if n_running else ""])
    names = _names([r for r, _ in leaders])
    lead = f"the worst there of the {len(leaders)} leaders" if len(leaders) > 1 else "the leader's value there"
    by = f" by more than the curves' noise ({margin:.3g})" if margin > 0 else ""
    return StopDecision(True, f"value {shown} at {where} is {worse} {_show(bar, maximize)}{by}, {lead} "
                              f"(the top {_fraction(top)} of {len(ranked)} trials{of})"
                              + (f": {names}" if names else ""))


def noise(curves: Sequence[Curve]) -> float:
    """The curves' step-to-step noise: the median, over the interior points of the completed curves, of how far a
    value lies from the mean of its two neighbours (0 without three points). The leaders' bar is lowered by it,
    so a trial one validation example behind a leader is not stopped for it."""
    devs = [abs(c[i][1] - (c[i - 1][1] + c[i + 1][1]) / 2) for c in curves for i in range(1, len(c) - 1)
            if not any(math.isnan(c[j][1]) for j in (i - 1, i, i + 1))]
    return statistics.median(devs) if devs else 0.0


def _fraction(top: float) -> str:
    return {0.5: "half", 0.25: "quarter", 0.2: "fifth"}.get(top, f"{top * 100:g} %")


def past_best_rule(current: Curve, others: Sequence[Curve | Reference], *, patience: int = MEDIAN_PATIENCE,
                   min_completed: int = 2, min_fraction: float = MIN_FRACTION, maximize: bool = True,
                   elapsed: bool = False) -> StopDecision:
    """Stop a trial past its best: its last ``patience`` reports are all below its own best so far by more than
    the completed curves' noise (an overfitting curve: a validation loss that has turned up), and that best never
    reached the best final value of the completed trials. Such a curve keeps falling away from its best (measured
    on part 12's gbdt curves: two trials a job ran to such an end, 0.16-0.24 against a best final near 0.137)."""
    if len(current) <= patience or not guard(current, others, min_completed=min_completed,
                                             min_points=patience + 1, min_fraction=min_fraction):
        return KEEP
    completed = [r for r in references(others) if r.completed]
    best_ref = max(completed, key=lambda r: r.curve[-1][1])
    best_final = best_ref.curve[-1][1]
    values = [(y, x) for x, y in current if not math.isnan(y)]
    if len(values) <= patience:
        return KEEP
    own_best, own_x = max(values)
    margin = noise([r.curve for r in completed])
    last = [y for _, y in current[-patience:]]
    if own_best >= best_final or not all(not math.isnan(y) and y < own_best - margin for y in last):
        return KEEP
    worse = "below" if maximize else "above"
    best_name = f" (trial {best_ref.trial_id})" if best_ref.trial_id else ""
    by = f" by more than the curves' noise ({margin:.3g})" if margin > 0 else ""
    where = f"{own_x:g} s" if elapsed else f"step {own_x:g}"
    return StopDecision(True, f"past its best: its last {patience} values are {worse} its own best "
                              f"{_show(own_best, maximize)} (at {where}){by}, and that best is worse than the best "
                              f"final value {_show(best_final, maximize)}{best_name}")


def decay_curve_rule(current: Curve, others: Sequence[Curve | Reference], *, min_completed: int = MIN_COMPLETED,
                     min_points: int = MIN_POINTS, min_fraction: float = MIN_FRACTION,
                     maximize: bool = True, from_behind: bool = False, elapsed: bool = False) -> StopDecision:
    """Stop when none of the gains the completed trials made from x to their end (at least
    ``min_completed`` of them) would bring the trial's current value to the best final value so far.
    ``from_behind``: only the completed curves that were no better than the trial at x count (a curve ahead of
    it there is further along and gains less: its gain says little of what a trial behind it can still gain)."""
    if not guard(current, others, min_completed=min_completed, min_points=min_points, min_fraction=min_fraction):
        return KEEP
    x, y = current[-1]
    if math.isnan(y):
        return KEEP
    completed = [r for r in references(others) if r.completed]
    best_ref = max(completed, key=lambda r: r.curve[-1][1])
    best_final = best_ref.curve[-1][1]
    gains = []
    for ref in completed:
        c = ref.curve
        at = value_at(c, x)
        if at is None or c[-1][0] <= x or math.isnan(at) or (from_behind and at > y):
            continue
        gains.append((max(v for xx, v in c if xx >= x) - at, ref))
    if len(gains) < max(min_completed, 1):
        return KEEP  # too few completed curves run past x: wait
    largest = max(g for g, _ in gains)
    optimistic = y + largest
    if optimistic < best_final:
        names = _names([r for _, r in gains])
        best_name = f" (trial {best_ref.trial_id})" if best_ref.trial_id else ""
        behind = (f" no better than it at {x:g} s" if elapsed else f" no better than it at step {x:g}") \
            if from_behind else ""
        return StopDecision(True, f"even the largest gain from here of the {len(gains)} completed trials{behind} "
                                  f"that ran past it ({largest:.6g}{': ' + names if names else ''}) would end at "
                                  f"{_show(optimistic, maximize)}, worse than the best "
                                  f"{_show(best_final, maximize)}{best_name}")
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
    others: Sequence[Curve | Reference],
    *,
    max_step: float | None,
    min_step: float | None,
    min_measurements: int | None,
    maximize: bool = True,
) -> StopDecision:
    need = min_measurements if min_measurements is not None else 5
    completed = _completed(others)
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


def decide(spec: StoppingSpec, current: Curve, others: Sequence[Curve | Reference], *,
           maximize: bool = True) -> StopDecision:
    """Apply the stopping spec's rule to one running trial (``maximize`` only words the reason); ``others``:
    the other trials' curves (plain curves are completed trials')."""
    if spec.kind is StoppingKind.MEDIAN:
        return median_rule(current, others, hopeless_completed=MEDIAN_HOPELESS_COMPLETED, maximize=maximize,
                           elapsed=spec.use_elapsed_duration)
    if spec.kind is StoppingKind.DECAY_CURVE:
        return decay_curve_rule(current, others, maximize=maximize)
    return convex_rule(
        current, others, max_step=spec.max_step_count, min_step=spec.min_step_count,
        min_measurements=spec.min_measurement_count, maximize=maximize,
    )

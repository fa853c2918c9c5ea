"""Part 4: work saved and best result lost by each early-stopping rule and its constants, on five workloads.

The workloads (``benchmarks.stopping_workloads``: digits MLP, the gbdt example, a noisy curve, a
rising curve with a slow start, one report at global_step=1000) give each seed a job of trials with
random parameters and their full curves. Each variant replays the same job in trial order, one slot:
after each report the rule sees the trial's curve so far and the full curves of the trials that ran
to completion (a stopped trial's curve is not used by later decisions, as in the job loop), through
``trials.controller.policy.stopping`` with the variant's constants. Work is the steps a trial ran (epochs,
boosting rounds). "Best" is the best value any trial measured (its BEST measurement). A "futile" stop
is one at a trial's own last report: it saves nothing and, in a real job, kills the trial as it
saves its model. The ``old_*`` variants are the rules as they were before issue 16 (2 completed
trials, 1 point, no guards); ``prev_median`` the median rule chosen first in issue 16 (running
averages, 10 completed trials, a quarter-IQR margin). Seed noise is the interquartile range over seeds
of the best result without stopping. The default is chosen on seeds 0-4; seeds 5-9 (held out) check
it and its neighbours.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import report
from benchmarks.stopping_workloads import GOAL_WORKLOADS, WORKLOADS, Curve, curves

PART = "stopping"
N_TRIALS = 30
SEEDS = 5
HELD_OUT_SEEDS = range(5, 10)  # not used to choose the default: a check that it holds on new jobs
GOAL_SAVED = 0.40


def variants() -> dict[str, dict[str, Any]]:
    """name -> constants: the product default, the old rules, and the grids the default was chosen from."""
    from trials.controller.policy import stopping as st

    out: dict[str, dict[str, Any]] = {
        "none": {"rule": "none"}, "old_median": {"rule": "old_median"}, "old_decay_curve": {"rule": "old_decay_curve"},
        "prev_median": {"rule": "running_median", "min_completed": 10, "margin": 0.25},
        "default_median": {"rule": "median"}, "default_decay_curve": {"rule": "decay_curve"},
        "default_convex": {"rule": "convex"}}
    # the product rule (median spec): behind every leader (completed trials ending in the top fraction)
    for mc, top in itertools.product((4, 5, 6, 7, 8, 10), (0.25, 0.34, 0.5)):
        out[f"leaders c{mc} top{top:g}"] = {"rule": "median", "min_completed": mc, "top": top}
    # the rule before (median of running averages, a margin of the IQR): the grid of the last session
    for mc, margin in itertools.product((5, 8, 10), (0.0, 0.25, 0.5)):
        out[f"running-median c{mc} m{margin:g}"] = {"rule": "running_median", "min_completed": mc, "margin": margin}
    # tried here too: the median of best values, only where completed trials' early ranks predicted their
    # final ranks (Spearman >= rho between their best at x and their final best)
    for mc, rho in itertools.product((5, 6, 8), (0.4, 0.5, 0.7)):
        out[f"rank-gated c{mc} rho{rho:g}"] = {"rule": "rank_gated", "min_completed": mc, "rho": rho}
    for mc, mp in itertools.product((3, 5, 10), (1, 2)):
        out[f"decay c{mc} p{mp}"] = {"rule": "decay_curve", "min_completed": mc, "min_points": mp}
    out["default_median"].update(min_points=st.MIN_POINTS, min_fraction=st.MIN_FRACTION)
    out["default_decay_curve"].update(min_completed=st.MIN_COMPLETED, min_points=st.MIN_POINTS,
                                      min_fraction=st.MIN_FRACTION)
    return out


def _running_median(current: Curve, completed: Sequence[Curve], min_completed: int, margin: float) -> bool:
    """The median rule before this default: best value below the median of the completed trials' running
    averages at x by more than ``margin`` x their IQR (with the same guards)."""
    from trials.controller.policy import stopping as st

    if not st.guard(current, completed, min_completed=min_completed):
        return False
    x = current[-1][0]
    averages = [a for a in (st.running_average_at(c, x) for c in completed) if a is not None]
    if len(averages) < min_completed:
        return False
    q1, q3 = report.quartiles(averages)
    return max(v for _, v in current) < statistics.median(averages) - margin * (q3 - q1)


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for r, i in enumerate(order):
        ranks[i] = float(r)
    for v in set(values):  # ties share their mean rank
        tied = [i for i, w in enumerate(values) if w == v]
        for i in tied:
            ranks[i] = statistics.fmean(ranks[j] for j in tied)
    return ranks


def _rank_gated(current: Curve, completed: Sequence[Curve], min_completed: int, rho: float) -> bool:
    from trials.controller.policy import stopping as st

    if not st.guard(current, completed, min_completed=min_completed):
        return False
    x = current[-1][0]
    pairs = [(a, st.best_at(c, c[-1][0])) for c in completed if (a := st.best_at(c, x)) is not None]
    early, final = [a for a, _ in pairs], [f for _, f in pairs]
    if len(pairs) < min_completed or len(set(early)) < 2 or len(set(final)) < 2:
        return False
    if statistics.correlation(_ranks(early), _ranks(final)) < rho:
        return False
    return max(v for _, v in current) < statistics.median(early)


def _leaders(current: Curve, completed: Sequence[Curve], min_completed: int, top: float) -> bool:
    """The median spec's rule of issue 16: stop when the trial's best value so far is worse, at the same x,
    than the best value there of every completed trial whose final ranks in the ``top`` fraction."""
    from trials.controller.policy import stopping as st

    if not st.guard(current, completed, min_completed=min_completed):
        return False
    x = current[-1][0]
    pairs = [(at, final) for c in completed
             if (at := st.best_at(c, x)) is not None and (final := st.best_at(c, c[-1][0])) is not None]
    if len(pairs) < max(min_completed, 1):
        return False
    finals = sorted(f for _, f in pairs)
    pos = (1 - top) * (len(finals) - 1)
    lo = int(pos)
    cut = finals[lo] + (finals[min(lo + 1, len(finals) - 1)] - finals[lo]) * (pos - lo)
    best = max((v for _, v in current if v == v), default=float("-inf"))
    return best < min(at for at, final in pairs if final >= cut)


def _old_median(current: Curve, completed: Sequence[Curve]) -> bool:
    from trials.controller.policy import stopping as st

    if len(completed) < 2 or not current:
        return False
    x = current[-1][0]
    averages = [a for a in (st.running_average_at(c, x) for c in completed) if a is not None]
    return len(averages) >= 2 and max(v for _, v in current) < statistics.median(averages)


def _old_decay(current: Curve, completed: Sequence[Curve]) -> bool:
    from trials.controller.policy import stopping as st

    if len(completed) < 2 or not current:
        return False
    x, y = current[-1]
    gains = [max(v for xx, v in c if xx >= x) - at for c in completed
             if (at := st.value_at(c, x)) is not None and c[-1][0] > x]
    return len(gains) >= 2 and y + max(gains) < max(c[-1][1] for c in completed)


def decider(v: dict[str, Any]) -> Callable[[Curve, Sequence[Curve]], bool]:
    from trials.controller.policy import stopping as st

    rule = v["rule"]
    kw = {k: v[k] for k in ("min_completed", "min_points", "min_fraction") if k in v}
    if rule == "running_median":
        return lambda cur, done: _running_median(cur, done, v["min_completed"], v["margin"])
    if rule == "rank_gated":
        return lambda cur, done: _rank_gated(cur, done, v["min_completed"], v["rho"])
    if rule == "none":
        return lambda cur, done: False
    if rule == "old_median":
        return _old_median
    if rule == "old_decay_curve":
        return _old_decay
    if rule == "median" and "top" in v:  # the leaders' rule of issue 16 (the product rule before issue 48)
        return lambda cur, done: _leaders(cur, done, v["min_completed"], v["top"])
    if rule == "median":  # the product rule (the median spec's); this replay gives it completed curves only
        return lambda cur, done: st.median_rule(cur, done, hopeless_completed=st.MEDIAN_HOPELESS_COMPLETED,
                                                **kw).stop
    if rule == "decay_curve":
        return lambda cur, done: st.decay_curve_rule(cur, done, **kw).stop
    return lambda cur, done: st.convex_rule(cur, done, max_step=None, min_step=None, min_measurements=None).stop


def _work(curve: Curve) -> float:
    return curve[-1][0] + (1.0 if curve[0][0] == 0 else 0.0)  # steps run (Keras-style epochs count from 0)


def replay(job: Sequence[Curve], decide: Callable[[Curve, Sequence[Curve]], bool]) -> dict[str, Any]:
    completed: list[Curve] = []
    work = best = 0.0
    best = float("-inf")
    n_stopped = futile = 0
    for full in job:
        ran = full
        for i in range(len(full)):
            if decide(full[:i + 1], completed):
                ran = full[:i + 1]
                n_stopped += 1
                futile += i == len(full) - 1
                break
        else:
            completed.append(full)
        work += _work(ran)
        best = max(best, max(v for _, v in ran))
    return {"work": work, "best": best, "n_stopped": n_stopped, "futile": futile}


def _curves_cached(workload: str, seed: int, n_trials: int, cache_dir: str | None) -> list[Curve]:
    """The job's curves, kept in ``cache_dir`` (if given) so a re-run replays without retraining."""
    import json
    import os

    if cache_dir is None:
        return curves(workload, seed, n_trials)
    path = os.path.join(cache_dir, f"{workload}-{seed}-{n_trials}.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return [[(float(x), float(y)) for x, y in c] for c in json.load(f)]
    job = curves(workload, seed, n_trials)
    os.makedirs(cache_dir, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(job, f)
    os.replace(path + ".tmp", path)
    return job


def run_workload(workload: str, seed: int, n_trials: int, cache_dir: str | None = None,
                 only: Sequence[str] | None = None) -> list[dict[str, Any]]:
    job = _curves_cached(workload, seed, n_trials, cache_dir)
    return [{"workload": workload, "seed": seed, "variant": name, **replay(job, decider(v))}
            for name, v in variants().items() if only is None or name in only]


def _run_star(args: tuple) -> list[dict[str, Any]]:
    return run_workload(*args)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload and variant: medians over seeds against ``none`` of the same seed; the goal per variant."""
    by = {(r["workload"], r["variant"], r["seed"]): r for r in runs}
    workloads = [w for w in WORKLOADS if any(r["workload"] == w for r in runs)]
    names = list(dict.fromkeys(r["variant"] for r in runs))
    seeds = sorted({r["seed"] for r in runs})
    table: dict[str, dict[str, Any]] = {}
    for w in workloads:
        base_best = [by[(w, "none", s)]["best"] for s in seeds]
        q1, q3 = report.quartiles(base_best)
        for name in names:
            rs = [by[(w, name, s)] for s in seeds]
            delta = [r["best"] - by[(w, "none", s)]["best"] for r, s in zip(rs, seeds, strict=True)]
            base_work = [by[(w, "none", s)]["work"] for s in seeds]
            table.setdefault(name, {})[w] = {
                "saved": report.median(1 - r["work"] / b for r, b in zip(rs, base_work, strict=True)),
                "delta": report.median(delta), "worst_delta": min(delta), "noise": q3 - q1,
                "n_stopped": report.median(r["n_stopped"] for r in rs), "futile": sum(r["futile"] for r in rs),
                "best": report.median(r["best"] for r in rs)}
    goals = {}
    for name, all_cells in table.items():
        cells = {w: c for w, c in all_cells.items() if w in GOAL_WORKLOADS}
        saved = report.median(c["saved"] for c in cells.values())
        lost = [w for w, c in cells.items() if -c["delta"] > c["noise"]]
        no_loss = not lost
        futile = sum(c["futile"] for c in cells.values())
        goals[name] = {"median_saved": saved, "no_loss": no_loss, "lost_on": lost, "futile": futile,
                       "met": saved >= GOAL_SAVED and no_loss and futile == 0}
    return {"workloads": workloads, "cells": table, "goals": goals}


SHOWN = ("none", "old_median", "old_decay_curve", "prev_median", "default_median", "default_decay_curve",
         "default_convex")
GRIDS = ("leaders ", "running-median ", "rank-gated ", "decay ")


def render(summary: dict[str, Any], n_trials: int, n_seeds: int, *, label: str = "",
           n_per_family: int = 3) -> str:
    goals, cells = summary["goals"], summary["cells"]
    text = ""
    for w in summary["workloads"]:
        rows = [[name, f"{c['saved'] * 100:.0f} %", c["n_stopped"], c["futile"], c["best"], c["delta"],
                 c["worst_delta"], c["noise"], "yes" if -c["delta"] <= c["noise"] else "NO"]
                for name in SHOWN if name in cells for c in [cells[name][w]]]
        text += report.table(f"Early stopping, {w}: {n_trials} trials, median of {n_seeds} seeds{label}",
                             ["variant", "work saved", "stopped", "futile stops (all seeds)", "best",
                              "best - none", "worst seed", "seed noise", "within noise"], rows)
    ranked = sorted((n for n in goals if n.startswith(GRIDS)),
                    key=lambda n: (not goals[n]["met"], not goals[n]["no_loss"], goals[n]["futile"],
                                   -goals[n]["median_saved"]))
    # the frontier: every variant of the product rule's grid, the best 3 of each other family
    shown_grid = [n for n in ranked if n.startswith(GRIDS[0])]
    shown_grid += [n for g in GRIDS[1:] for n in [m for m in ranked if m.startswith(g)][:n_per_family]]
    rows = [[n, f"{goals[n]['median_saved'] * 100:.0f} %", ", ".join(goals[n]["lost_on"]) or "yes", goals[n]["futile"],
             report.verdict(goals[n]["met"])] + [f"{cells[n][w]['saved'] * 100:.0f} %" for w in summary["workloads"]]
            for n in [*[s for s in SHOWN[1:] if s in goals], *shown_grid]]
    text += report.table(f"Goal{label} (the five issue workloads, not late_bloomer): >= 40 % of work saved on "
                         "the median workload, no loss beyond seed noise, no futile stop (grid variants below)",
                         ["variant", "median saved", "no loss (else: lost on)", "futile", "goal",
                          *[f"saved {w}" for w in summary["workloads"]]], rows)
    return text


HELD_OUT_VARIANTS = ("none", "old_median", "prev_median", "default_median", "default_decay_curve", "default_convex",
                     "leaders c5 top0.25", "leaders c7 top0.25", "leaders c8 top0.25")


def _replay_all(jobs: list[tuple], workers: int) -> list[dict[str, Any]]:
    with report.worker_pool(workers) as pool:
        return [r for rs in pool.map(_run_star, jobs) for r in rs]


def run(*, quick: bool = False, out_dir: str | None = None, workers: int = 2,
        cache_dir: str | None = None) -> dict[str, Any]:
    n_trials, seeds = (8, [0]) if quick else (N_TRIALS, list(range(SEEDS)))
    held_out = [] if quick else list(HELD_OUT_SEEDS)
    t = time.perf_counter()
    runs = _replay_all([(w, s, n_trials, cache_dir) for s in seeds for w in WORKLOADS], workers)
    held_runs = _replay_all([(w, s, n_trials, cache_dir, HELD_OUT_VARIANTS) for s in held_out for w in WORKLOADS],
                            workers)
    wall = time.perf_counter() - t
    summary = summarize(runs)
    result = {"quick": quick, "n_trials": n_trials, "seeds": seeds, "wall_s": wall, "summary": summary, "runs": runs,
              "held_out_seeds": held_out}
    print(render(summary, n_trials, len(seeds)))
    if held_runs:
        result["held_out"] = summarize(held_runs)
        result["held_out_runs"] = held_runs
        label = f", held-out seeds {held_out[0]}-{held_out[-1]}"
        print(render(result["held_out"], n_trials, len(held_out), label=label))
    path = report.write_result(PART, result, out_dir=out_dir)
    print(f"results: {path}  ({wall:.0f} s)")
    return result

"""Part 3: simple regret of the default algorithm against OSS Vizier, GP, TPE, CMA-ES and random.

Runs in-process with the samplers the controller builds (``trials.study``): the default is
``choose_sampler_name`` + ``make_sampler``, exactly what ALGORITHM_UNSPECIFIED uses, and parameters
are suggested through ``trials.study.suggest`` from a StudySpec as in a job. ``vizier`` is OSS Vizier's
default designer (GP-UCB-PE, ``benchmarks.search_vizier``), Vertex's own algorithm. ``batch`` trials
run at once: Optuna asks ``batch`` trials before telling any (TPE's constant liar sees the running
ones), Vizier suggests a batch (its pure-exploration batch). Each run goes to the largest budget; the
regret at a smaller budget is read from the same run's first trials (no sampler here knows the
budget). Simple regret = true value of the incumbent minus the optimum; for the noisy function the
incumbent is chosen by the noisy observations and scored by its noise-free value.

``python -m benchmarks.search_quality grid OUT.jsonl --samplers ... --seeds ... --trials N --batch B``
appends one line per finished run (long grids survive interruption); ``table OUT.jsonl ...``
summarizes whatever finished.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import report
from benchmarks.search_problems import NOISE_SD, PROBLEMS, Problem, problem, study_spec  # noqa: F401

PART = "search"


# --- samplers -------------------------------------------------------------------------------------
def sampler_names() -> list[str]:
    """default, random, tpe (plain Optuna), cmaes, gp and vizier, each only when its package is installed."""
    import importlib.util

    from benchmarks import search_vizier
    from trials.study.samplers import gp_available

    cmaes = ["cmaes"] if importlib.util.find_spec("cmaes") is not None else []
    return (["default", "random", "tpe"] + cmaes + (["gp"] if gp_available() else [])
            + (["vizier"] if search_vizier.available() else []))


def missing_note(samplers: Sequence[str]) -> str:
    notes = []
    if "gp" not in samplers:
        notes.append("GP not measured: torch is not installed (pip install trials[bench])")
    if "cmaes" not in samplers:
        notes.append("CMA-ES not measured: the cmaes package is not installed (pip install trials[bench])")
    if "vizier" not in samplers:
        notes.append("OSS Vizier not measured: google-vizier[jax] is not installed (pip install trials[bench])")
    return "; ".join(notes) or "every sampler's package is installed"


def default_name(spec, n_trials: int) -> str:
    from trials.study.samplers import choose_sampler_name

    return choose_sampler_name(spec, n_trials=n_trials)


def _gp_alternate(seed: int):
    """Plain GP on odd trials, half-rank warped GP on even ones (a hedge between the two)."""
    from trials.study.warped_gp import WarpedGPSampler

    class Alternate(WarpedGPSampler):
        def sample_relative(self, study, trial, search_space):
            self._warps["half_rank_warp"] = trial.number % 2 == 0
            return super().sample_relative(study, trial, search_space)

    return Alternate(seed=seed, n_startup_trials=10)


def _warped(**warps):
    def build(seed: int):
        from trials.study.warped_gp import WarpedGPSampler

        return WarpedGPSampler(seed=seed, n_startup_trials=10, **warps)
    return build


def half_log(y, scale_from: int | None = None):
    """The worse half (labels to maximise) log-compressed, ``m - s * log1p((m - y) / s)``; the better half kept.

    ``s`` is the spread of the better half around the median ``m`` (of the first ``scale_from`` values
    when given), as in Vizier's half-rank warping. Smooth and monotone, slope 1 at the median. Returns
    the warped labels and their derivative (``None`` when there is no spread to scale by).
    """
    import numpy as np

    y = np.array(y, dtype=np.float64)
    median = float(np.median(y))
    ref = y[:scale_from] if scale_from else y
    m = float(np.median(ref))
    unique = np.unique(ref)
    good = unique[unique >= m]
    s = math.sqrt(float(((good - m) ** 2).sum()) / good.size)
    if not s > 0:
        s = math.sqrt(float(((unique - m) ** 2).sum()) / unique.size)
    if not s > 0:
        return y, None
    bad = y < median
    out = y.copy()
    out[bad] = median - s * np.log1p((median - y[bad]) / s)
    return out, np.where(bad, 1.0 / (1.0 + (median - y) / s), 1.0)


def _shadow(trials, values):
    import copy

    out = []
    for t, v in zip(trials, values, strict=True):
        c = copy.copy(t)
        c.values = [float(v)]
        out.append(c)
    return out


def _half_log_gp(scale_from: int | None = None):
    """GPSampler fitted to half-log warped values (a smooth alternative to Vizier's rank-based half)."""
    def build(seed: int):
        import numpy as np
        import optuna

        class HalfLog(optuna.samplers.GPSampler):
            def _sample_relative_impl(self, study, completed, running, space):
                if len(completed) > 1:
                    sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
                    y = sign * np.array([t.values[0] for t in completed])
                    if np.isfinite(y).all():
                        completed = _shadow(completed, sign * half_log(y, scale_from)[0])
                return super()._sample_relative_impl(study, completed, running, space)

        return HalfLog(seed=seed, n_startup_trials=10)
    return build


def _evidence_choice(warped: str):
    """Plain GP or warped GP, whichever explains the values better: the GP's marginal likelihood of the
    standardised (warped) values plus the log Jacobian of warping and standardising (Snelson et al.'s
    warped GP evidence). The Jacobian is the half-log warp's; ``warped`` is what is fitted when the warp
    wins (half-log itself, or Vizier's half-rank, which has no derivative, with half-log as its proxy).
    """
    def build(seed: int):
        import numpy as np
        import optuna
        import torch
        from optuna._gp import gp
        from optuna._gp import search_space as gp_search_space

        from trials.study.warped_gp import warp

        class EvidenceChoice(optuna.samplers.GPSampler):
            choices: list[tuple[int, bool, float]] = []

            def _evidence(self, X, is_categorical, v, log_jacobian, key) -> float:
                std = max(float(np.std(v)), 1e-10)
                gpr = gp.fit_kernel_params(X=X, Y=(v - v.mean()) / std, is_categorical=is_categorical,
                                           log_prior=self._log_prior, minimum_noise=self._minimum_noise,
                                           gpr_cache=self._evidence_cache.get(key),
                                           deterministic_objective=self._deterministic)
                self._evidence_cache[key] = gpr
                with torch.no_grad():
                    return float(gpr.marginal_log_likelihood()) + log_jacobian - v.size * math.log(std)

            def _sample_relative_impl(self, study, completed, running, space):
                maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
                y = (1.0 if maximize else -1.0) * np.array([t.values[0] for t in completed])
                if len(completed) > 1 and np.isfinite(y).all():
                    w, dw = half_log(y)
                    if dw is not None:
                        self._evidence_cache = getattr(self, "_evidence_cache", {})
                        gspace = gp_search_space.SearchSpace(space)
                        X = gspace.get_normalized_params(completed)
                        gain = self._evidence(X, gspace.is_categorical, w, float(np.log(dw).sum()), "warped") \
                            - self._evidence(X, gspace.is_categorical, y, 0.0, "plain")
                        self.choices = [*self.choices, (len(completed), gain > 0, gain)]
                        if gain > 0:
                            sign = 1.0 if maximize else -1.0
                            values = sign * w if warped == "half-log" else warp(
                                [t.values[0] for t in completed], maximize=maximize)
                            completed = _shadow(completed, values)
                return super()._sample_relative_impl(study, completed, running, space)

        return EvidenceChoice(seed=seed, n_startup_trials=10)
    return build


def _tpe_multivariate(seed: int):
    import optuna

    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=10)


# Candidates measured to choose the default (benchmarks/README.md part 3, "Choosing the default"); not in the
# default grid: `grid --samplers gp-select,gp-select-rank,gp-vizier-warp,gp-log-warp,gp-alternate,...`.
VARIANTS = {
    "gp-vizier-warp": _warped(half_rank_warp=True, log=True),  # OSS Vizier's whole default label warping
    "gp-log-warp": _warped(half_rank_warp=False, log=True),
    "gp-alternate": _gp_alternate,
    "gp-half-log": _half_log_gp(),
    "gp-half-log-startup": _half_log_gp(scale_from=10),
    "gp-select": _evidence_choice("half-log"),
    "gp-select-rank": _evidence_choice("half-rank"),
    "tpe-multivariate": _tpe_multivariate,  # multivariate TPE without `group` (the default groups)
}


def build_sampler(name: str, spec, n_trials: int, seed: int):
    import optuna

    from trials.study.samplers import make_sampler

    if name == "default":
        return make_sampler(default_name(spec, n_trials), seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)  # Optuna's defaults, as a user would write it
    if name in VARIANTS:
        return VARIANTS[name](seed)
    return make_sampler(name, seed=seed)


class _Observer:
    """Best-so-far regret after each trial; the incumbent is chosen on the (noisy) observations."""

    def __init__(self, prob: Problem, seed: int):
        self.prob, self.optimum = prob, prob.optimum()
        self.noise = random.Random(seed * 7919 + 1)
        self.best_obs, self.best_true = math.inf, math.inf
        self.trace: list[float] = []

    def observe(self, params: dict[str, Any]) -> float:
        true = self.prob.fn(params)
        observed = true + (self.noise.gauss(0, self.prob.noise_sd) if self.prob.noise_sd else 0.0)
        if observed < self.best_obs:
            self.best_obs, self.best_true = observed, true
        self.trace.append(self.best_true - self.optimum)
        return observed


def one_run(problem_name: str, sampler: str, seed: int, n_trials: int, batch: int = 1,
            partial: str | None = None, ahead: bool = False) -> dict[str, Any]:
    """Best-so-far regret after each trial of one (problem, sampler, seed, batch) run, and suggest times.

    ``partial``: a file rewritten after each batch with the run so far (a slow run cut short still counts
    for the budgets it reached). ``ahead`` (Optuna samplers, batch 1): each trial is asked while the one
    before still runs, as a one-slot job with suggestions ahead of time asks (``trials.study.ahead``).
    """
    prob = problem(problem_name)
    spec = study_spec(prob)
    obs = _Observer(prob, seed)
    suggest_s = 0.0
    t = time.perf_counter()
    if sampler == "vizier":
        from benchmarks import search_vizier

        designer = search_vizier.Designer(spec, seed)
        while len(obs.trace) < n_trials:
            t0 = time.perf_counter()
            params = designer.suggest(min(batch, n_trials - len(obs.trace)))
            suggest_s += time.perf_counter() - t0
            designer.complete([obs.observe(p) for p in params])
            if partial:
                _write_partial(partial, problem_name, sampler, seed, batch, n_trials, obs.trace, suggest_s)
    else:
        import optuna

        from trials.study.space import suggest

        optuna.logging.set_verbosity(optuna.logging.ERROR)  # not the independent-sampling fallbacks
        study = optuna.create_study(direction="minimize", sampler=build_sampler(sampler, spec, n_trials, seed))
        pending: tuple[Any, Any] | None = None
        while ahead and len(obs.trace) + (pending is not None) < n_trials:
            t0 = time.perf_counter()
            trial = study.ask()  # the one before still runs: it is pending for the sampler
            asked_now = (trial, suggest(trial, spec))
            suggest_s += time.perf_counter() - t0
            if pending is not None:
                study.tell(pending[0], obs.observe(pending[1]))
            pending = asked_now
        if pending is not None:
            study.tell(pending[0], obs.observe(pending[1]))
        while len(obs.trace) < n_trials:
            t0 = time.perf_counter()
            asked = []
            for _ in range(min(batch, n_trials - len(obs.trace))):
                trial = study.ask()
                asked.append((trial, suggest(trial, spec)))
            suggest_s += time.perf_counter() - t0
            for trial, params in asked:
                study.tell(trial, obs.observe(params))
    return {"problem": problem_name, "sampler": sampler, "seed": seed, "batch": batch, "n_trials": n_trials,
            "ahead": ahead, "regret": obs.trace, "seconds": time.perf_counter() - t,
            "suggest_s_per_trial": suggest_s / n_trials,
            "resolved": default_name(spec, n_trials) if sampler == "default" else sampler}


def _write_partial(path: str, problem_name: str, sampler: str, seed: int, batch: int, n_trials: int,
                   trace: list[float], suggest_s: float) -> None:
    record = {"problem": problem_name, "sampler": sampler, "seed": seed, "batch": batch, "n_trials": n_trials,
              "regret": trace, "partial": True, "suggest_s_per_trial": suggest_s / max(len(trace), 1)}
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    os.replace(path + ".tmp", path)


def _run_star(args: tuple) -> dict[str, Any]:
    return one_run(*args)


# --- the part -------------------------------------------------------------------------------------
def run(*, quick: bool = False, out_dir: str | None = None, workers: int = 2) -> dict[str, Any]:
    """``python -m benchmarks search``: every problem and sampler, one slot (Vizier: see ``grid``)."""
    budgets = (12, 20) if quick else (40, 100)
    seeds = list(range(2 if quick else 5))
    problems = [p.name for p in PROBLEMS]
    samplers = [s for s in sampler_names() if s != "vizier" and not (quick and s == "gp")]
    jobs = [(p, s, seed, budgets[-1]) for p in problems for s in samplers for seed in seeds]
    jobs.sort(key=lambda j: j[1] not in ("default", "tpe"))  # slow ones first for better packing
    t = time.perf_counter()
    with report.worker_pool(workers) as pool:
        runs = list(pool.map(_run_star, jobs))
    wall = time.perf_counter() - t
    summary = summarize(runs, budgets)
    left_out = "OSS Vizier (seconds per suggestion) is left out here: run it with `grid`"
    if quick:
        left_out = "--quick leaves out the GP and OSS Vizier columns"
    note = f"{missing_note(sampler_names())}; {left_out}"
    result = {"quick": quick, "budgets": budgets, "seeds": seeds, "samplers": samplers,
              "not_measured": note, "noise_sd": NOISE_SD, "wall_s": wall, "summary": summary,
              "runs": [_slim(r, budgets) for r in runs]}
    path = report.write_result(PART, result, out_dir=out_dir)
    print(render(summary, budgets, result["not_measured"]))
    print(f"results: {path}  ({wall:.0f} s)")
    return result


def _slim(r: dict[str, Any], budgets: Sequence[int]) -> dict[str, Any]:
    return {**r, "regret": {str(b): r["regret"][b - 1] for b in budgets if b <= len(r["regret"])}}


def _regret_at(r: dict[str, Any], b: int) -> float | None:
    regret = r["regret"]
    if isinstance(regret, dict):
        return regret.get(str(b))
    return regret[b - 1] if b <= len(regret) else None


def _longest(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One run per (problem, sampler, seed, batch): the one that reached the most trials.

    A seed's 40-trial run and its later 100-trial run both give a regret at 40 trials; counting both
    would count the seed twice. (They agree where both exist: the same seed suggests the same trials.)
    """
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in runs:
        key = (r["problem"], r["sampler"], r["seed"], r.get("batch", 1))
        if key not in best or len(r["regret"]) > len(best[key]["regret"]):
            best[key] = r
    return list(best.values())


def summarize(runs: list[dict[str, Any]], budgets: Sequence[int]) -> dict[str, Any]:
    """Median regret per (problem, batch, budget, sampler), the best sampler, and the default's verdict.

    Seed noise is the interquartile range over seeds of the best sampler's regret (of the default's
    when the best has fewer than 3 seeds): the default is "within noise" when its median exceeds the
    best median by at most that much.
    """
    cells: dict[str, Any] = {}
    runs = _longest(runs)
    names = [p.name for p in PROBLEMS]
    keys = sorted({(r["problem"], r.get("batch", 1)) for r in runs},
                  key=lambda k: (names.index(k[0]) if k[0] in names else 99, k[1]))
    for prob, batch in keys:
        for b in budgets:
            row: dict[str, Any] = {}
            for r in runs:
                if r["problem"] != prob or r.get("batch", 1) != batch:
                    continue
                value = _regret_at(r, b)
                if value is not None:
                    row.setdefault(r["sampler"], []).append(r)
            if "default" not in row:
                continue
            stats = {}
            for s, rs in row.items():
                values = [_regret_at(r, b) for r in rs]
                q1, q3 = report.quartiles(values)
                stats[s] = {"median": report.median(values), "q1": q1, "q3": q3, "n": len(values),
                            "suggest_s": report.median(r["suggest_s_per_trial"] for r in rs),
                            "resolved": rs[0].get("resolved", s)}
            best = min(stats, key=lambda s: stats[s]["median"])
            ref = best if stats[best]["n"] >= 3 else "default"
            noise = stats[ref]["q3"] - stats[ref]["q1"]
            gap = stats["default"]["median"] - stats[best]["median"]
            cells[f"{prob}@{b}x{batch}"] = {"problem": prob, "budget": b, "batch": batch, "samplers": stats,
                                             "best": best, "noise": noise, "default_gap": gap,
                                             "default_within_noise": gap <= noise}
    verdicts = [c["default_within_noise"] for c in cells.values()]
    return {"cells": cells, "default_never_worse_than_best_beyond_noise": bool(verdicts) and all(verdicts)}


ORDER = ("default", "vizier", "gp", "tpe", "cmaes", "random")


def render(summary: dict[str, Any], budgets: Sequence[int], note: str) -> str:
    samplers = [s for s in ORDER if any(s in c["samplers"] for c in summary["cells"].values())]
    rows, times = [], {}
    for cell in summary["cells"].values():
        st = cell["samplers"]
        rows.append([cell["problem"], cell["budget"], cell["batch"], st["default"]["resolved"]]
                    + [st[s]["median"] if s in st else float("nan") for s in samplers]
                    + [cell["best"], cell["default_gap"], cell["noise"], report.verdict(cell["default_within_noise"])])
        for s in samplers:  # per run, so once per problem (a run gives every budget it reached)
            if s in st and (cell["budget"] == budgets[-1] or s == "vizier"):
                times.setdefault((s, cell["batch"]), []).append(st[s]["suggest_s"])
    seeds = {s: max((c["samplers"][s]["n"] for c in summary["cells"].values() if s in c["samplers"]), default=0)
             for s in samplers}
    text = report.table(
        "Search quality: median simple regret over seeds (lower is better; seeds: "
        + ", ".join(f"{s} {n}" for s, n in seeds.items()) + ")",
        ["problem", "trials", "batch", "default is"] + samplers
        + ["best", "default - best", "seed noise (IQR)", "default within noise"], rows)
    text += report.table("Wall time per suggestion (median over problems, whole runs)",
                         ["sampler", "batch", "ms per suggestion"],
                         [[s, q, report.median(v) * 1000] for (s, q), v in sorted(times.items())])
    return text + f"\n{note}.\n"


def _load(paths: Sequence[str]) -> list[dict[str, Any]]:
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            runs.extend(json.loads(line) for line in f if line.strip())
    return runs


def _same_as_default(path: str, prob: str, sampler: str, seed: int, batch: int, n_trials: int) -> dict | None:
    """The default's finished run when ``sampler`` is what the default resolves to (the same sampler, seed).

    Not for ``tpe``: the column is Optuna's plain TPESampler, the default's TPE is multivariate and grouped.
    """
    if sampler in ("default", "tpe") or default_name(study_spec(problem(prob)), n_trials) != sampler:
        return None
    try:
        runs = _load([path])
    except FileNotFoundError:
        return None
    for r in runs:
        if (r["problem"], r["sampler"], r["seed"], r["batch"], r["n_trials"]) == \
                (prob, "default", seed, batch, n_trials):
            return {**r, "sampler": sampler, "resolved": sampler, "copied_from": "default"}
    return None


def vs_record(paths: Sequence[str], record: str) -> str:
    """The default's runs in ``paths`` against the runs of record's default (``record``, a part-3 result), cell by
    cell, each judged against the record's other samplers: to tell whether a change of the default's sampler moved
    its search (the flat problems; the conditional one's default is TPE)."""
    with open(record, encoding="utf-8") as f:
        old = [r for r in json.load(f)["runs"] if r["problem"] != "conditional"]
    new = [r for r in _load(paths) if r["sampler"] == "default"]
    others = [r for r in old if r["sampler"] != "default"]
    budgets = (40, 100)
    s_new, s_old = summarize(new + others, budgets), summarize([r for r in old if r["sampler"] == "default"] + others,
                                                               budgets)
    rows, ratios = [], []
    for key, c in s_new["cells"].items():
        o = s_old["cells"].get(key)
        if o is None:
            continue
        n_med, o_med = c["samplers"]["default"]["median"], o["samplers"]["default"]["median"]
        ratios.append(n_med / o_med if o_med > 0 else 1.0)
        rows.append([c["problem"], c["budget"], c["batch"], o_med, n_med, ratios[-1], c["best"],
                     report.verdict(o["default_within_noise"]), report.verdict(c["default_within_noise"])])
    seeds = sorted({r["seed"] for r in new})
    text = report.table(f"The default: runs of record against these runs ({len(seeds)} seeds), median simple regret",
                        ["problem", "trials", "batch", "record", "now", "now / record", "best now",
                         "record within noise", "now within noise"], rows)
    met_old = sum(r[7] == report.verdict(True) for r in rows)
    met_new = sum(r[8] == report.verdict(True) for r in rows)
    geo = math.exp(sum(math.log(max(x, 1e-300)) for x in ratios) / len(ratios)) if ratios else float("nan")
    per = [report.median([r["suggest_s_per_trial"] for r in rs]) * 1000 for rs in
           (new, [r for r in old if r["sampler"] == "default"])]
    return (text + f"\ncells within seed noise of the best: record {met_old}, now {met_new} of {len(rows)}; "
            f"geometric mean of now / record {geo:.2f}; per suggestion {per[0]:.1f} ms now, "
            f"{per[1]:.1f} ms in the record\n")


def paired(before: str, after: str, budgets: Sequence[int] = (40, 100)) -> str:
    """The default's runs of two grids, seed by seed (the same problems, seeds and batch): to tell a change
    that should not move the search (the same model in other arithmetic, whose rounding alone sends a run
    elsewhere) from one that does. Per cell: the median regrets, the geometric mean of after / before over
    the seeds, and how many seeds each side won."""
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["problem"], r["batch"], r["seed"]

    old = {key(r): r for r in _load([before]) if r["sampler"] == "default"}
    new = {key(r): r for r in _load([after]) if r["sampler"] == "default"}
    cells = sorted({(p, b) for p, b, _ in old.keys() & new.keys()})
    rows, logs, won, lost = [], [], 0, 0
    for name, batch in cells:
        seeds = sorted(s for p, b, s in old.keys() & new.keys() if (p, b) == (name, batch))
        for budget in budgets:
            pairs = [(old[(name, batch, s)]["regret"][budget - 1], new[(name, batch, s)]["regret"][budget - 1])
                     for s in seeds]
            cell = [math.log((b + 1e-12) / (a + 1e-12)) for a, b in pairs]
            better, worse = sum(b < a for a, b in pairs), sum(b > a for a, b in pairs)
            if name != "conditional":  # (its default is TPE: the GP is not asked)
                logs += cell
                won, lost = won + better, lost + worse
            per = [report.median([side[(name, batch, s)]["suggest_s_per_trial"] for s in seeds]) * 1000
                   for side in (old, new)]
            rows.append([name, budget, batch, len(seeds), report.median([a for a, _ in pairs]),
                         report.median([b for _, b in pairs]), math.exp(sum(cell) / len(cell)),
                         f"{better} / {worse}", f"{per[0]:.1f} / {per[1]:.1f}"])
    text = report.table("The default's runs, seed by seed: before against after (median simple regret)",
                        ["problem", "trials", "batch", "seeds", "before", "after", "after / before (geometric)",
                         "seeds after won / lost", "ms a suggestion before / after"], rows)
    geo = math.exp(sum(logs) / len(logs)) if logs else float("nan")
    return text + (f"\nflat problems: after / before {geo:.2f} (geometric mean over every seed and budget); "
                   f"after won {won}, lost {lost}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search_quality")
    sub = parser.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grid", help="run a grid, one JSON line per finished run")
    g.add_argument("out")
    g.add_argument("--problems", default=",".join(p.name for p in PROBLEMS))
    g.add_argument("--samplers", default="default,random,tpe,cmaes,gp")
    g.add_argument("--seeds", default="0,1,2,3,4")
    g.add_argument("--trials", type=int, default=100)
    g.add_argument("--batch", default="1")
    t = sub.add_parser("table", help="summarize JSON-line files")
    t.add_argument("files", nargs="+")
    t.add_argument("--budgets", default="40,100")
    v = sub.add_parser("vs-record", help="the default's runs in these files against the runs of record's default")
    v.add_argument("files", nargs="+")
    here = os.path.dirname(os.path.abspath(__file__))
    v.add_argument("--record", default=os.path.join(here, "results", "search.json"))
    pr = sub.add_parser("pair", help="the default's runs of two grids (before, after), seed by seed")
    pr.add_argument("before")
    pr.add_argument("after")
    args = parser.parse_args(argv)
    if args.cmd == "pair":
        print(paired(args.before, args.after))
        return 0
    if args.cmd == "vs-record":
        print(vs_record(args.files, args.record))
        return 0
    if args.cmd == "table":
        budgets = [int(b) for b in args.budgets.split(",")]
        summary = summarize(_load(args.files), budgets)
        print(render(summary, budgets, missing_note(sampler_names())))
        return 0
    done = set()
    with contextlib.suppress(FileNotFoundError):
        done = {(r["problem"], r["sampler"], r["seed"], r["batch"], r["n_trials"]) for r in _load([args.out])}
    for seed in (int(s) for s in args.seeds.split(",")):
        for batch in (int(b) for b in args.batch.split(",")):
            for prob in args.problems.split(","):
                for sampler in args.samplers.split(","):
                    if (prob, sampler, seed, batch, args.trials) in done:
                        continue
                    r = _same_as_default(args.out, prob, sampler, seed, batch, args.trials) \
                        or one_run(prob, sampler, seed, args.trials, batch, partial=args.out + ".partial")
                    with open(args.out, "a", encoding="utf-8") as f:
                        f.write(json.dumps(r) + "\n")
                    print(f"{prob} {sampler} seed {seed} batch {batch}: regret {r['regret'][-1]:.4g}, "
                          f"{r['suggest_s_per_trial']:.3f} s/suggestion", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

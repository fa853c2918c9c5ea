"""Part 3: simple regret of the default algorithm against random, plain TPE, CMA-ES (and GP) on test functions.

Runs in-process through Optuna with the samplers the controller builds (``trials.study.samplers``): the
default is ``choose_sampler_name`` + ``make_sampler``, exactly what ALGORITHM_UNSPECIFIED uses, and
parameters are suggested through ``trials.study.space.suggest`` from a StudySpec as in a job. Trials run
one after the other (one slot). Each run goes to the largest budget; the regret at a smaller budget
is read from the same run's first trials (none of these samplers knows the budget). Simple regret =
true value of the incumbent minus the optimum; for the noisy function the incumbent is chosen by the
noisy observations and scored by its noise-free value.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import report

PART = "search"
NOISE_SD = 0.1  # noisy Hartmann6: Gaussian noise on each observation (the function spans [-3.32, 0])


# --- test functions -------------------------------------------------------------------------------
def branin(x: Sequence[float]) -> float:
    x1, x2 = x
    a, b, c, r, s, t = 1.0, 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


_H_A = ((10, 3, 17, 3.5, 1.7, 8), (0.05, 10, 17, 0.1, 8, 14), (3, 3.5, 1.7, 10, 17, 8), (17, 8, 0.05, 10, 0.1, 14))
_H_P = ((1312, 1696, 5569, 124, 8283, 5886), (2329, 4135, 8307, 3736, 1004, 9991),
        (2348, 1451, 3522, 2883, 3047, 6650), (4047, 8828, 8732, 5743, 1091, 381))
_H_ALPHA = (1.0, 1.2, 3.0, 3.2)


def hartmann6(x: Sequence[float]) -> float:
    total = 0.0
    for alpha, a, p in zip(_H_ALPHA, _H_A, _H_P, strict=False):
        total += alpha * math.exp(-sum(ai * (xi - pi * 1e-4) ** 2 for ai, xi, pi in zip(a, x, p, strict=False)))
    return -total


def rosenbrock(x: Sequence[float]) -> float:
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    name: str
    fn: Callable[[Sequence[float]], float]
    bounds: tuple[tuple[float, float], ...]
    optimum: float
    noise_sd: float = 0.0


PROBLEMS = (
    Problem(name="branin", fn=branin, bounds=((-5, 10), (0, 15)), optimum=0.39788735772973816),
    Problem(name="hartmann6", fn=hartmann6, bounds=((0, 1),) * 6, optimum=-3.3223680114155147),
    Problem(name="rosenbrock5", fn=rosenbrock, bounds=((-5, 10),) * 5, optimum=0.0),
    Problem(name="noisy_hartmann6", fn=hartmann6, bounds=((0, 1),) * 6, optimum=-3.3223680114155147,
            noise_sd=NOISE_SD),
)


def study_spec(problem: Problem):
    from trials.spec import Goal, MetricSpec, ParameterSpec, ParameterType, ScaleType, StudySpec

    params = tuple(ParameterSpec(parameter_id=f"x{i}", type=ParameterType.DOUBLE, min_value=float(lo),
                                 max_value=float(hi), scale_type=ScaleType.UNIT_LINEAR_SCALE)
                   for i, (lo, hi) in enumerate(problem.bounds))
    return StudySpec(metrics=(MetricSpec(metric_id="value", goal=Goal.MINIMIZE),), parameters=params)


# --- samplers -------------------------------------------------------------------------------------
def sampler_names() -> list[str]:
    """default, random, tpe (plain Optuna), cmaes and gp, each only when its package is installed."""
    import importlib.util

    from trials.study.samplers import gp_available

    cmaes = ["cmaes"] if importlib.util.find_spec("cmaes") is not None else []
    return ["default", "random", "tpe"] + cmaes + (["gp"] if gp_available() else [])


def missing_note(samplers: list[str]) -> str:
    notes = []
    if "gp" not in samplers:
        notes.append("GP not measured: torch (its extra) is not installed")
    if "cmaes" not in samplers:
        notes.append("CMA-ES not measured: the cmaes package is not installed (pip install trials[bench])")
    return "; ".join(notes) or "every sampler measured"


def build_sampler(name: str, spec, n_trials: int, seed: int):
    import optuna

    from trials.study.samplers import choose_sampler_name, make_sampler

    if name == "default":
        return make_sampler(choose_sampler_name(spec, n_trials=n_trials), seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)  # Optuna's defaults, as a user would write it
    return make_sampler(name, seed=seed)


def one_run(problem_name: str, sampler: str, seed: int, n_trials: int) -> dict[str, Any]:
    """Best-so-far true value after each trial of one (problem, sampler, seed) run."""
    import optuna

    from trials.study.space import suggest

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    problem = next(p for p in PROBLEMS if p.name == problem_name)
    spec = study_spec(problem)
    study = optuna.create_study(direction="minimize", sampler=build_sampler(sampler, spec, n_trials, seed))
    noise = random.Random(seed * 7919 + 1)
    best_obs, best_true, trace = math.inf, math.inf, []
    t = time.perf_counter()
    for _ in range(n_trials):
        trial = study.ask()
        params = suggest(trial, spec)
        x = [float(params[f"x{i}"]) for i in range(len(problem.bounds))]
        true = problem.fn(x)
        observed = true + (noise.gauss(0, problem.noise_sd) if problem.noise_sd else 0.0)
        study.tell(trial, observed)
        if observed < best_obs:
            best_obs, best_true = observed, true
        trace.append(best_true - problem.optimum)
    return {"problem": problem_name, "sampler": sampler, "seed": seed, "regret": trace,
            "seconds": time.perf_counter() - t}


def _run_star(args: tuple) -> dict[str, Any]:
    return one_run(*args)


# --- the part -------------------------------------------------------------------------------------
def run(*, quick: bool = False, out_dir: str | None = None, workers: int = 2) -> dict[str, Any]:
    budgets = (12, 20) if quick else (40, 100)
    seeds = list(range(2 if quick else 5))
    problems = [p.name for p in PROBLEMS]
    samplers = sampler_names()
    jobs = [(p, s, seed, budgets[-1]) for p in problems for s in samplers for seed in seeds]
    jobs.sort(key=lambda j: j[1] not in ("default", "tpe"))  # slow ones first for better packing
    t = time.perf_counter()
    with report.worker_pool(workers) as pool:
        runs = list(pool.map(_run_star, jobs))
    wall = time.perf_counter() - t
    summary = summarize(runs, problems, samplers, budgets)
    result = {"quick": quick, "budgets": budgets, "seeds": seeds, "samplers": samplers,
              "not_measured": missing_note(samplers),
              "noise_sd": NOISE_SD, "wall_s": wall, "summary": summary,
              "runs": [{**r, "regret": [r["regret"][b - 1] for b in budgets]} for r in runs]}
    path = report.write_result(PART, result, out_dir=out_dir)
    print(render(summary, samplers, budgets, len(seeds), result["not_measured"]))
    print(f"results: {path}  ({wall:.0f} s)")
    return result


def summarize(runs: list[dict[str, Any]], problems: list[str], samplers: list[str],
              budgets: Sequence[int]) -> dict[str, Any]:
    """Median regret per cell, the best sampler per (problem, budget), and the default's verdict.

    Seed noise is the interquartile range over seeds of the best sampler's regret: the default is
    "within noise" when its median exceeds the best median by at most that much.
    """
    cells: dict[str, Any] = {}
    verdicts = []
    for p in problems:
        for b in budgets:
            row = {}
            for s in samplers:
                values = [r["regret"][b - 1] for r in runs if r["problem"] == p and r["sampler"] == s]
                q1, q3 = report.quartiles(values)
                row[s] = {"median": report.median(values), "q1": q1, "q3": q3,
                          "seconds": report.median(r["seconds"] for r in runs
                                                   if r["problem"] == p and r["sampler"] == s)}
            best = min(samplers, key=lambda s: row[s]["median"])
            noise = row[best]["q3"] - row[best]["q1"]
            gap = row["default"]["median"] - row[best]["median"]
            ok = gap <= noise
            cells[f"{p}@{b}"] = {"samplers": row, "best": best, "noise": noise, "default_gap": gap,
                                 "default_within_noise": ok}
            verdicts.append(ok)
    return {"cells": cells, "default_never_worse_than_best_beyond_noise": all(verdicts)}


def render(summary: dict[str, Any], samplers: list[str], budgets: Sequence[int], n_seeds: int, gp_note: str) -> str:
    rows = []
    for key, cell in summary["cells"].items():
        problem, budget = key.split("@")
        best = cell["best"]
        rows.append([problem, budget] + [cell["samplers"][s]["median"] for s in samplers]
                    + [best, cell["default_gap"], cell["noise"], report.verdict(cell["default_within_noise"])])
    text = report.table(
        f"Search quality: median simple regret over {n_seeds} seeds (lower is better)",
        ["problem", "trials"] + samplers + ["best", "default - best", "seed noise (IQR)", "default within noise"],
        rows)
    text += f"\n{gp_note}.\n"
    if "tpe" in samplers and all(c["samplers"]["default"]["median"] == c["samplers"]["tpe"]["median"]
                                 for c in summary["cells"].values()):
        text += ("The default and plain Optuna TPE are the same sampler here: Optuna 5's TPESampler already "
                 "defaults to multivariate + constant liar for one objective, and group=True only matters "
                 "for conditional spaces.\n")
    return text

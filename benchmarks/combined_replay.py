"""Part 12's screen: the default search and a stopping rule over the recorded curves, in this process.

``python -m benchmarks.combined_replay [--seeds N] [--parallel P] [--workload W] [--variant NAME ...]``

The same curves, spec and sampler as ``benchmarks/combined.py``'s real jobs (``trials.study.samplers.make_sampler``
with the job's start-up, the spec's search space through ``trials.study.space``), and the job loop's own rule
(``trials.controller.policy.stopping``), but no processes: ``parallel`` trials advance one epoch per tick in
lockstep, each epoch is judged as it is reported (as the loop does when an epoch takes longer than its 50 ms pass),
the trials finished so far are the rule's references as the loop hands them (completed, and stopped up to their
stop), and a finished slot asks the sampler at once. Deterministic for a seed: rules are compared on the same
trajectories' start. Used to screen rule variants before the real jobs' run of record; what it prints are the
part-12 columns (best final, epochs, model-based suggestions, stopped, good trials killed), medians over seeds,
and the share of jobs whose best final reaches the no-stopping arm's median (``reach``).

Besides the loop's rule and Optuna's pruners, two variants measure what a rule that knows more could gain:
``oracle`` is the loop's rule with a perfect veto (a trial whose full run ends in the grid's top 10 % is never
stopped: the ceiling of any veto, since no rule can know it), and ``gp-veto`` the loop's rule vetoed by a model
over (params, step) (:func:`gp_veto_rule`: a GP over every measurement of every trial, Vizier's performance-curve
idea, asked whether the trial's value at the horizon could reach the best final value).
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import combined
from benchmarks.trainers.replay_curve import nearest

# (trial, its curve, finished, running, the workload's grid)
Rule = Callable[[Any, list[tuple[float, float]], list[Any], list[Any], dict[str, Any]], bool]


@dataclass
class _Slot:
    trial: Any
    params: dict[str, float]
    curve: list[float]
    trial_id: str
    seen: list[tuple[float, float]] = field(default_factory=list)


def default_rule(trial: Any, current: list[tuple[float, float]], finished: list[Any], running: list[Any],
                 grid: dict[str, Any] | None = None) -> bool:
    """The job loop's median rule, as ``loop/metrics.py`` calls it."""
    from trials.controller.policy import stopping

    del trial, grid
    return stopping.median_rule(current, finished + running,
                                hopeless_completed=stopping.MEDIAN_HOPELESS_COMPLETED).stop


def optuna_pruner(trial: Any, current: list[tuple[float, float]], finished: list[Any], running: list[Any],
                  grid: dict[str, Any] | None = None) -> bool:
    """The study's own pruner (``optuna_arm``'s): Optuna's ``should_prune``."""
    del current, finished, running, grid
    return bool(trial.should_prune())


def _params(trial: Any) -> dict[str, float]:
    return {k: float(v) for k, v in trial.params.items()}


def oracle_rule(trial: Any, current: list[tuple[float, float]], finished: list[Any], running: list[Any],
                grid: dict[str, Any]) -> bool:
    """The loop's rule with a perfect veto: a trial whose full run ends in the grid's top 10 % is never stopped
    (its final is read off the recorded curve, which no rule can know: the ceiling of any veto)."""
    final = grid["curves"][nearest(grid, _params(trial))][-1]
    return default_rule(trial, current, finished, running) and combined.oriented(grid, final) < combined.top_cut(grid)


GP_VETO_KAPPA = 0.5  # gp-veto keeps a trial whose predicted final + this many standard deviations reaches the best
_GP_STEPS = frozenset({1, 2, 3, 4, 6, 8, 11, 15, 20})  # the steps of each curve the GP sees (and the last)


def _unit(grid: dict[str, Any], params: dict[str, float]) -> list[float]:
    """Params in [0, 1] over the grid's axes (log axes by their log)."""
    out = []
    for name, values in grid["axes"].items():
        lo, hi, v = min(values), max(values), params[name]
        if grid["scale"].get(name) == "log":
            lo, hi, v = math.log(lo), math.log(hi), math.log(v)
        out.append((v - lo) / (hi - lo) if hi > lo else 0.5)
    return out


def gp_veto_rule(trial: Any, current: list[tuple[float, float]], finished: list[Any], running: list[Any],
                 grid: dict[str, Any]) -> bool:
    """The loop's rule, vetoed by a model over (params, step): a GP (the default sampler's, ``npgp``) over every
    measurement of every trial (the running one's too; inputs the params in [0, 1] and x over the horizon, output
    the values' normal scores by rank, so a blown-up log loss weighs as a rank) predicts the trial's value at the
    horizon; the stop is vetoed when that mean plus :data:`GP_VETO_KAPPA` standard deviations reaches the best
    final value so far."""
    import numpy as np
    from scipy.stats import norm

    from trials.study import npgp

    if not default_rule(trial, current, finished, running):
        return False
    study_trials = trial.study.get_trials(deepcopy=False)
    me = _unit(grid, _params(trial))
    end = max(r.curve[-1][0] for r in finished if r.completed)
    xs, ys = [], []
    for tid, curve in [(r.trial_id, r.curve) for r in finished + running] + [("", current)]:
        unit = me if not tid else _unit(grid, _params(study_trials[int(tid) - 1]))
        for x, y in curve:
            if int(x) in _GP_STEPS or (x, y) == curve[-1]:
                xs.append([*unit, x / end])
                ys.append(y)
    best = max(r.curve[-1][1] for r in finished if r.completed)
    values = np.append(np.asarray(ys), best)
    scores = norm.ppf((values.argsort().argsort() + 0.5) / len(values))
    mean, std = scores[:-1].mean(), max(float(scores[:-1].std()), 1e-9)
    gp = npgp.fit(np.asarray(xs), (scores[:-1] - mean) / std, np.zeros(len(me) + 1, dtype=bool))
    post = gp.posterior(np.asarray([[*me, 1.0]]))
    predicted = float(post["mean"][0]) + GP_VETO_KAPPA * math.sqrt(float(post["var"][0]))
    return bool(predicted < (scores[-1] - mean) / std)


def simulate(workload: str, seed: int, rule: Rule | None, **options: Any) -> dict[str, Any]:
    """One job (:func:`_simulate`), without the samplers' experimental-feature warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _simulate(workload, seed, rule, **options)


def _simulate(workload: str, seed: int, rule: Rule | None, *, parallel: int = combined.PARALLEL,
             n_trials: int = combined.N_TRIALS, sampler_name: str = "gp-warped",
             optuna_arm: str | None = None) -> dict[str, Any]:
    """One job: the outcome columns of ``combined._outcome``."""
    import optuna
    from optuna.trial import TrialState

    from trials.controller.policy import stopping
    from trials.spec.load import loads_spec
    from trials.study import space
    from trials.study.choice import startup_trials
    from trials.study.samplers import make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    grid = combined.load(workload)
    job = loads_spec(combined.spec_text(grid, workload, stopping=rule is not None), source=f"{workload}.yaml")
    n_startup = startup_trials(n_trials, sampler_name)
    pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
    if optuna_arm is None:
        sampler = make_sampler(sampler_name, seed=seed, n_startup=n_startup)
    else:  # combined.run_optuna_arm's sampler and pruner, at this parallelism
        n_startup = 10
        sampler = (optuna.samplers.RandomSampler(seed=seed) if optuna_arm == "random"
                   else optuna.samplers.TPESampler(seed=seed))
        pruner = {"tpe+median": optuna.pruners.MedianPruner(),
                  "tpe+hyperband": optuna.pruners.HyperbandPruner(min_resource=1, max_resource=grid["epochs"],
                                                                  reduction_factor=3)}.get(optuna_arm, pruner)
    study = optuna.create_study(direction="maximize" if grid["maximize"] else "minimize", sampler=sampler,
                                pruner=pruner)
    running: list[_Slot] = []
    finished: list[stopping.Reference] = []
    ran: list[tuple[dict[str, float], int, bool, float | None]] = []
    started = n_model = 0

    def start() -> None:
        nonlocal started, n_model
        done = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
        n_model += done >= n_startup and optuna_arm != "random"
        trial = study.ask()
        params = {k: float(v) for k, v in space.suggest(trial, job.study).items()}
        started += 1
        running.append(_Slot(trial, params, grid["curves"][nearest(grid, params)], str(started)))

    while started < n_trials or running:
        while started < n_trials and len(running) < parallel:
            start()
        for slot in list(running):
            epoch = len(slot.seen) + 1
            value = slot.curve[epoch - 1]
            slot.trial.report(value, epoch)
            slot.seen.append((float(epoch), stopping.orient(value, grid["maximize"])))
            others = [stopping.Reference(curve=list(s.seen), trial_id=s.trial_id, completed=False, running=True)
                      for s in running if s is not slot]
            if epoch == len(slot.curve):
                study.tell(slot.trial, value)
                finished.append(stopping.Reference(curve=list(slot.seen), trial_id=slot.trial_id))
                ran.append((slot.params, epoch, False, value))
                running.remove(slot)
            elif rule is not None and rule(slot.trial, list(slot.seen), list(finished), others, grid):
                study.tell(slot.trial, state=TrialState.PRUNED)
                finished.append(stopping.Reference(curve=list(slot.seen), trial_id=slot.trial_id, completed=False))
                ran.append((slot.params, epoch, True, None))
                running.remove(slot)
    return combined._outcome(grid, ran, n_model)


def screen(variants: dict[str, Rule | None], *, seeds: int, parallel: int,
           workloads: Sequence[str] = combined.WORKLOADS) -> dict[str, dict[str, dict[str, float]]]:
    """Medians over seeds per workload and variant, and ``reach``: the share of jobs whose best final is at
    least the median best final of the same seeds without stopping (ran first, whatever ``variants`` holds)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for w in workloads:
        out[w] = {}
        grid = combined.load(w)
        baseline = statistics.median(combined.oriented(grid, simulate(w, s, None, parallel=parallel)["best_final"])
                                     for s in range(seeds))
        for name, rule in variants.items():
            arm = name[len("optuna "):] if name.startswith("optuna ") else None
            rows = [simulate(w, s, rule, parallel=parallel, optuna_arm=arm) for s in range(seeds)]
            out[w][name] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            cell = out[w][name]
            cell["killed_mean"] = statistics.fmean(r["killed"] for r in rows)
            cell["reach"] = sum(combined.oriented(grid, r["best_final"]) >= baseline for r in rows) / len(rows)
            print(f"{w:7s} {name:24s} best {cell['best_final']:.5g}  reach {cell['reach']:4.0%}  "
                  f"epochs {cell['epochs']:5.1f}  model {cell['model']:4.1f}  stopped {cell['stopped']:4.1f}  "
                  f"killed {cell['killed']:3.1f} (mean {cell['killed_mean']:.2f})", flush=True)
    return out


VARIANTS: dict[str, Rule | None] = {"none": None, "median (loop's rule)": default_rule,
                                    "optuna tpe+median": optuna_pruner, "optuna tpe+hyperband": optuna_pruner,
                                    "oracle": oracle_rule, "gp-veto": gp_veto_rule}
DEFAULT_VARIANTS = ("none", "median (loop's rule)", "optuna tpe+median", "optuna tpe+hyperband")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=combined.SEEDS)
    parser.add_argument("--parallel", type=int, default=combined.PARALLEL)
    parser.add_argument("--workload", action="append", choices=combined.WORKLOADS)
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS),
                        help=f"(repeatable) default: {', '.join(DEFAULT_VARIANTS)}")
    a = parser.parse_args()
    screen({v: VARIANTS[v] for v in a.variant or DEFAULT_VARIANTS}, seeds=a.seeds, parallel=a.parallel,
           workloads=a.workload or combined.WORKLOADS)

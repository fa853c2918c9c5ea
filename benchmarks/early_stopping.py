"""Part 4: epochs and training time saved by each stopping spec and by Optuna's pruners, at equal best value.

The objective is a real learning curve (``trainers/digits.py``: a numpy MLP on scikit-learn's bundled
digits data, validation accuracy after each epoch). Each variant runs one slot, in-process, with the
default sampler (``make_sampler("tpe")``, same seed per variant), over the same seeds:

- none: every trial trains all epochs;
- median / decay_curve / convex: after each epoch ``trials.controller.stopping.decide`` sees the trial's curve
  and the curves of the trials that ran to completion, exactly as the job loop's ``_check_stopping``
  does; a stopped trial ends SUCCEEDED with its last measurement (convex: the predicted one) and is
  told to the sampler as such, and its curve is not used by later decisions (as in ``JobRunner``);
- successive_halving / hyperband: Optuna's pruners with their defaults (what a user would write),
  ``trial.report`` + ``should_prune`` each epoch, pruned trials told as PRUNED.

"Best" is the best accuracy any trial actually measured (never the convex rule's prediction).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from benchmarks import report

PART = "stopping"
EPOCHS = 20
N_TRIALS = 40
STOPPING_VARIANTS = ("median", "decay_curve", "convex")
PRUNER_VARIANTS = ("successive_halving", "hyperband")
CANDIDATE_VARIANTS = ("median_same_step", "median_2pt_3done")
VARIANTS = ("none",) + STOPPING_VARIANTS + PRUNER_VARIANTS + CANDIDATE_VARIANTS
DEFAULT_RULE = "median"  # Vertex's medianAutomatedStoppingSpec: the rule most jobs use
MAX_LOSS_POINTS = 0.5


# --- candidate rules (measured to decide the default; not product rules) ----------------------------
def candidate_rule(name: str):
    """A variant of the median rule, as a ``decide(spec, current, completed)`` stand-in.

    - median_same_step: Optuna's MedianPruner semantics: the trial's best value so far against the
      median of the completed trials' values *at the same step* (not their running averages);
    - median_2pt_3done: Vertex's rule with the earlier, more cautious defaults (a trial needs 2
      measurements and 3 trials must have completed; now 1 and 2).
    """
    import statistics

    from trials.controller import stopping

    min_completed = 3 if name == "median_2pt_3done" else stopping.MIN_COMPLETED
    min_points = 2 if name == "median_2pt_3done" else stopping.MIN_POINTS

    def decide(spec, current, completed):
        if len(completed) < min_completed or len(current) < min_points:
            return stopping.KEEP
        x = current[-1][0]
        at = stopping.value_at if name == "median_same_step" else stopping.running_average_at
        refs = [r for r in (at(c, x) for c in completed) if r is not None]
        if len(refs) < min_completed:
            return stopping.KEEP
        best = max(v for _, v in current)
        return stopping.StopDecision(best < statistics.median(refs), name)

    return decide


def study_spec(stopping: str | None):
    from trials.spec import (
        Goal,
        MetricSpec,
        ParameterSpec,
        ParameterType,
        ScaleType,
        StoppingKind,
        StoppingSpec,
        StudySpec,
    )

    def double(name: str, lo: float, hi: float, log: bool = False) -> ParameterSpec:
        return ParameterSpec(parameter_id=name, type=ParameterType.DOUBLE, min_value=lo, max_value=hi,
                             scale_type=ScaleType.UNIT_LOG_SCALE if log else ScaleType.UNIT_LINEAR_SCALE)

    params = (
        double("learning_rate", 1e-3, 1.0, log=True),
        ParameterSpec(parameter_id="hidden", type=ParameterType.INTEGER, min_value=16, max_value=96,
                      scale_type=ScaleType.UNIT_LINEAR_SCALE),
        ParameterSpec(parameter_id="batch_size", type=ParameterType.DISCRETE, values=(32, 64, 128, 256)),
        double("weight_decay", 1e-6, 1e-1, log=True),
        double("momentum", 0.0, 0.95),
    )
    kinds = {"median": StoppingKind.MEDIAN, "decay_curve": StoppingKind.DECAY_CURVE,
             "convex": StoppingKind.CONVEX}
    if stopping in CANDIDATE_VARIANTS:
        stopping = "median"
    spec = StoppingSpec(kind=kinds[stopping]) if stopping in kinds else None
    return StudySpec(metrics=(MetricSpec(metric_id="accuracy", goal=Goal.MAXIMIZE),), parameters=params,
                     stopping=spec)


def run_variant(variant: str, seed: int, n_trials: int, epochs: int) -> dict[str, Any]:
    """One job of ``n_trials`` trials for one variant and seed; per-trial epochs, CPU seconds, values."""
    import optuna

    from benchmarks.trainers import digits
    from trials.controller import stopping
    from trials.study.samplers import make_sampler
    from trials.study.space import suggest

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    digits.load_digits()
    spec = study_spec(variant)
    decide = candidate_rule(variant) if variant in CANDIDATE_VARIANTS else stopping.decide
    pruner = None
    if variant == "successive_halving":
        pruner = optuna.pruners.SuccessiveHalvingPruner()
    elif variant == "hyperband":
        pruner = optuna.pruners.HyperbandPruner()
    # A fixed name: Hyperband assigns brackets by a hash of the study name and trial number.
    study = optuna.create_study(study_name=f"{variant}-{seed}", direction="maximize",
                                sampler=make_sampler("tpe", seed=seed), pruner=pruner)
    completed: list[list[tuple[float, float]]] = []
    trials = []
    for number in range(n_trials):
        trial = study.ask()
        params = suggest(trial, spec)
        curve: list[tuple[float, float]] = []
        stopped = pruned = False
        predicted = None
        t = time.process_time()  # CPU time: the pool's other worker and other load do not count
        for epoch, accuracy in enumerate(digits.train(params, epochs=epochs, seed=seed * 1000 + number), start=1):
            curve.append((float(epoch), accuracy))
            if spec.stopping is not None:
                decision = decide(spec.stopping, curve, completed)
                if decision.stop:
                    stopped = True
                    predicted = decision.predicted_final
                    break
            elif pruner is not None:
                trial.report(accuracy, epoch)
                if trial.should_prune():
                    pruned = True
                    break
        seconds = time.process_time() - t
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, predicted if predicted is not None else curve[-1][1])
        if not stopped and not pruned:
            completed.append(curve)
        trials.append({"epochs": len(curve), "seconds": seconds, "last": curve[-1][1],
                       "best": max(v for _, v in curve), "stopped": stopped or pruned})
    return {"variant": variant, "seed": seed, "trials": trials,
            "epochs": sum(t["epochs"] for t in trials), "seconds": sum(t["seconds"] for t in trials),
            "best_final": max(t["last"] for t in trials), "n_stopped": sum(t["stopped"] for t in trials)}


def _run_star(args: tuple) -> dict[str, Any]:
    return run_variant(*args)


def run(*, quick: bool = False, out_dir: str | None = None, workers: int = 2) -> dict[str, Any]:
    n_trials, epochs = (8, 4) if quick else (N_TRIALS, EPOCHS)
    seeds = list(range(1 if quick else 5))
    jobs = [(v, seed, n_trials, epochs) for seed in seeds for v in VARIANTS]
    t = time.perf_counter()
    with report.worker_pool(workers) as pool:
        runs = list(pool.map(_run_star, jobs))
    wall = time.perf_counter() - t
    summary = summarize(runs, seeds)
    result = {"quick": quick, "n_trials": n_trials, "epochs": epochs, "seeds": seeds, "wall_s": wall,
              "summary": summary,
              "runs": [{k: v for k, v in r.items() if k != "trials"}
                       | {"epochs_per_trial": [t["epochs"] for t in r["trials"]]}
                       for r in runs]}
    path = report.write_result(PART, result, out_dir=out_dir)
    print(render(summary, n_trials, epochs, len(seeds)))
    print(f"results: {path}  ({wall:.0f} s)")
    return result


def summarize(runs: list[dict[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """Per variant: medians over seeds of epochs/time saved against ``none`` of the same seed."""
    by = {(r["variant"], r["seed"]): r for r in runs}
    rows = {}
    for v in VARIANTS:
        saved_epochs, saved_time, delta, best, stopped = [], [], [], [], []
        for s in seeds:
            base, r = by[("none", s)], by[(v, s)]
            saved_epochs.append(1 - r["epochs"] / base["epochs"])
            saved_time.append(1 - r["seconds"] / base["seconds"])
            delta.append((r["best_final"] - base["best_final"]) * 100)
            best.append(r["best_final"])
            stopped.append(r["n_stopped"])
        rows[v] = {"epochs_saved": report.median(saved_epochs), "time_saved": report.median(saved_time),
                   "best_final": report.median(best), "delta_points": report.median(delta),
                   "worst_delta_points": min(delta), "n_stopped": report.median(stopped),
                   "epochs": report.median(by[(v, s)]["epochs"] for s in seeds)}
    def meets(r: dict[str, Any]) -> bool:
        return r["epochs_saved"] >= 0.40 and r["delta_points"] >= -MAX_LOSS_POINTS

    return {"variants": rows, "default_rule": DEFAULT_RULE,
            "goal_default_saves_40pct_at_no_loss": meets(rows[DEFAULT_RULE]),
            "variants_meeting_goal": [v for v, r in rows.items() if v != "none" and meets(r)]}


def render(summary: dict[str, Any], n_trials: int, epochs: int, n_seeds: int) -> str:
    rows = []
    for v, r in summary["variants"].items():
        rows.append([v, r["epochs"], f"{r['epochs_saved'] * 100:.0f} %", f"{r['time_saved'] * 100:.0f} %",
                     r["n_stopped"], r["best_final"], r["delta_points"], r["worst_delta_points"]])
    text = report.table(
        f"Early stopping: {n_trials} trials x up to {epochs} epochs, digits MLP, TPE, median of {n_seeds} seeds",
        ["variant", "epochs", "epochs saved", "train CPU saved", "trials stopped", "best accuracy",
         "delta vs none (points)", "worst seed delta"], rows)
    text += report.table("Goal", ["goal", "status"], [[
        f"default rule ({summary['default_rule']}) saves >= 40 % of epochs within {MAX_LOSS_POINTS} points",
        report.verdict(summary["goal_default_saves_40pct_at_no_loss"])]])
    text += ("\nvariants that would meet it (median over seeds): "
             f"{', '.join(summary['variants_meeting_goal']) or 'none'}\n")
    return text

"""Part 12's screen: the default search and a stopping rule over the recorded curves, in this process.

``python -m benchmarks.combined_replay [--seeds N] [--parallel P] [--variant NAME ...]``

The same curves, spec and sampler as ``benchmarks/combined.py``'s real jobs (``trials.study.samplers.make_sampler``
with the job's start-up, the spec's search space through ``trials.study.space``), and the job loop's own rule
(``trials.controller.policy.stopping``), but no processes: ``parallel`` trials advance one epoch per tick in
lockstep, each epoch is judged as it is reported (as the loop does when an epoch takes longer than its 50 ms pass),
the trials finished so far are the rule's references as the loop hands them (completed, and stopped up to their
stop), and a finished slot asks the sampler at once. Deterministic for a seed: rules are compared on the same
trajectories' start. Used to screen rule variants before the real jobs' run of record; what it prints are the
part-12 columns (best final, epochs, model-based suggestions, stopped, good trials killed), medians over seeds.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import combined
from benchmarks.trainers.replay_curve import nearest

Rule = Callable[[Any, list[tuple[float, float]], list[Any], list[Any]], bool]  # (trial, its curve, finished, running)


@dataclass
class _Slot:
    trial: Any
    params: dict[str, float]
    curve: list[float]
    trial_id: str
    seen: list[tuple[float, float]] = field(default_factory=list)


def default_rule(trial: Any, current: list[tuple[float, float]], finished: list[Any], running: list[Any]) -> bool:
    """The job loop's median rule, as ``loop/metrics.py`` calls it."""
    from trials.controller.policy import stopping

    del trial
    return stopping.median_rule(current, finished + running,
                                hopeless_completed=stopping.MEDIAN_HOPELESS_COMPLETED).stop


def optuna_pruner(trial: Any, current: list[tuple[float, float]], finished: list[Any], running: list[Any]) -> bool:
    """The study's own pruner (``optuna_arm``'s): Optuna's ``should_prune``."""
    del current, finished, running
    return bool(trial.should_prune())


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
            elif rule is not None and rule(slot.trial, list(slot.seen), list(finished), others):
                study.tell(slot.trial, state=TrialState.PRUNED)
                finished.append(stopping.Reference(curve=list(slot.seen), trial_id=slot.trial_id, completed=False))
                ran.append((slot.params, epoch, True, None))
                running.remove(slot)
    return combined._outcome(grid, ran, n_model)


def screen(variants: dict[str, Rule | None], *, seeds: int, parallel: int,
           workloads: Sequence[str] = combined.WORKLOADS) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for w in workloads:
        out[w] = {}
        for name, rule in variants.items():
            arm = name[len("optuna "):] if name.startswith("optuna ") else None
            rows = [simulate(w, s, rule, parallel=parallel, optuna_arm=arm) for s in range(seeds)]
            out[w][name] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            cell = out[w][name]
            print(f"{w:7s} {name:24s} best {cell['best_final']:.4g}  epochs {cell['epochs']:5.1f}  "
                  f"model {cell['model']:4.1f}  stopped {cell['stopped']:4.1f}  killed {cell['killed']:3.1f}",
                  flush=True)
    return out


VARIANTS: dict[str, Rule | None] = {"none": None, "median (loop's rule)": default_rule,
                                    "optuna tpe+median": optuna_pruner, "optuna tpe+hyperband": optuna_pruner}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=combined.SEEDS)
    parser.add_argument("--parallel", type=int, default=combined.PARALLEL)
    parser.add_argument("--workload", action="append", choices=combined.WORKLOADS)
    a = parser.parse_args()
    screen(VARIANTS, seeds=a.seeds, parallel=a.parallel, workloads=a.workload or combined.WORKLOADS)

"""Part 12: the default search and early stopping together, on real learning curves (issue 48).

Curves recorded once over a grid (``benchmarks/record_curves.py``, ``benchmarks/data/curves_*.json``: the
digits MLP's validation accuracy over 20 epochs, gradient boosting's validation log loss over 20 x 5
rounds) are replayed by a trainer written as Vertex users write them (``benchmarks/trainers/replay_curve.py``:
argparse, cloudml-hypertune, the nearest recorded configuration, a small sleep per epoch). Per workload and
seed, every arm has the same budget of :data:`N_TRIALS` trials:

- ``default+stopping``: ``trials sweep`` with the default sampler and ``medianAutomatedStoppingSpec``;
- ``default``: the same without stopping;
- ``random``, ``tpe`` (Optuna's TPESampler), ``tpe+median`` (with MedianPruner), ``tpe+hyperband`` (with
  HyperbandPruner, min 1, max 20 epochs, factor 3): Optuna's own ask-and-tell loop over the same curves,
  :data:`PARALLEL` trials at once in lockstep (``benchmarks/combined_replay.py``: as ``optimize(n_jobs=2)``
  with equal epochs); ``tpe+median x1``: TPE + MedianPruner one trial at a time (the run of record before).

The trials arms run as real jobs (processes, the metric file, the job loop, the sampler's own process),
:data:`PARALLEL` trials at once as the README's job, each epoch :data:`SLEEP_S` long so that the loop judges
every epoch (as it does real epochs of seconds); the Optuna arms run in this process (the curves are the
same, so what is compared is the search and the pruning).

Per arm: the best FINAL value found (the chosen trial's full-run value: the best trial that ran to its end,
as ``trials best`` picks it, its last recorded value; what the user gets by retraining it), the epochs run,
the model-based suggestions, and good trials killed (stopped trials whose full run ends in the grid's top
10 %). Seed noise: the interquartile range over seeds of ``default``'s best final.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks import report
from benchmarks.trainers.replay_curve import nearest

PART = "combined"
N_TRIALS = 20
PARALLEL = 2
SEEDS = 10
SLEEP_S = 0.1  # per epoch: longer than the loop's 50 ms pass, so the rule judges every epoch as with real epochs
WORKLOADS = ("digits", "gbdt")
TRIALS_ARMS = ("default+stopping", "default")
OPTUNA_ARMS = ("random", "tpe", "tpe+median", "tpe+hyperband", "tpe+median x1")
ARMS = TRIALS_ARMS + OPTUNA_ARMS
HERE = os.path.dirname(os.path.abspath(__file__))
CONTINUOUS = ("learning_rate", "alpha", "subsample")  # the other axes are discrete in the spec


def curves_path(workload: str) -> str:
    return os.path.join(HERE, "data", f"curves_{workload}.json")


def load(workload: str) -> dict[str, Any]:
    with open(curves_path(workload), encoding="utf-8") as f:
        grid: dict[str, Any] = json.load(f)
    return grid


def oriented(grid: dict[str, Any], value: float) -> float:
    return value if grid["maximize"] else -value


def top_cut(grid: dict[str, Any], share: float = 0.10) -> float:
    """The oriented full-run final value a configuration needs to be in the grid's top ``share``."""
    finals = sorted((oriented(grid, c[-1]) for c in grid["curves"]), reverse=True)
    return finals[max(0, math.ceil(share * len(finals)) - 1)]


def spec_text(grid: dict[str, Any], workload: str, *, stopping: bool) -> str:
    lines = [f"display_name: combined-{workload}",
             f"metrics: {{{grid['metric']}: {'maximize' if grid['maximize'] else 'minimize'}}}", "parameters:"]
    for name, values in grid["axes"].items():
        if name in CONTINUOUS:
            scale = ", scale: log" if grid["scale"][name] == "log" else ""
            lines.append(f"  {name}: {{type: double, min: {min(values)}, max: {max(values)}{scale}}}")
        else:
            lines.append(f"  {name}: {{type: discrete, values: {sorted(values)}}}")
    lines += [f"command: [{sys.executable}, {os.path.join(HERE, 'trainers', 'replay_curve.py')}, "
              f"--curves={curves_path(workload)}, --sleep_s={SLEEP_S}]",
              f"max_trial_count: {N_TRIALS}", f"parallel_trial_count: {PARALLEL}"]
    if stopping:
        lines.append("stopping: {type: median}")
    return "\n".join(lines) + "\n"


def _outcome(grid: dict[str, Any], ran: list[tuple[dict[str, float], int, bool, float | None]],
             n_model: int) -> dict[str, Any]:
    """``ran``: per trial (params, epochs run, stopped early, its reported final if it ran to its end)."""
    cut = top_cut(grid)
    full = [grid["curves"][nearest(grid, p)][-1] for p, _, _, _ in ran]
    done = [(oriented(grid, f), i) for i, (_, _, stopped, f) in enumerate(ran) if not stopped and f is not None]
    # (every trial stopped: the best full run of any)
    chosen = max(done)[1] if done else max(range(len(ran)), key=lambda i: oriented(grid, full[i]))
    return {"best_final": full[chosen], "epochs": sum(e for _, e, _, _ in ran), "model": n_model,
            "stopped": sum(1 for _, _, s, _ in ran if s),
            "killed": sum(1 for (_, _, s, _), f in zip(ran, full, strict=True) if s and oriented(grid, f) >= cut)}


def run_trials_arm(workload: str, seed: int, arm: str, root: str) -> dict[str, Any]:
    from trials.controller.jobs import registry
    from trials.controller.jobs import view as job_view
    from trials.study.choice import MODEL, suggestion_counts

    grid = load(workload)
    job_id = f"{workload}-{arm.replace('+', '-')}-{seed}"
    spec = os.path.join(root, job_id + ".yaml")
    with open(spec, "w", encoding="utf-8") as f:
        f.write(spec_text(grid, workload, stopping=arm == "default+stopping"))
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "trials", "sweep", spec, "--job-id", job_id, "--root", root,
                           "--seed", str(seed)], capture_output=True, text=True, timeout=1800, cwd=root)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{job_id}: exit {done.returncode}: {done.stderr[-2000:]}")
    h = registry.open_job(job_id, root=root, storage=None)
    get = job_view.params_of(h)
    ran = []
    trials = h.store.frozen_trials()
    for t_ in trials:
        measurements = t_.user_attrs.get("measurements") or []
        if not t_.params:
            continue
        stopped = bool(t_.user_attrs.get("stopped_early"))
        final = t_.values[0] if t_.state.name == "COMPLETE" and t_.values else None
        ran.append(({k: float(v) for k, v in get(t_).items()}, len(measurements), stopped, final))
    out = _outcome(grid, ran, suggestion_counts(trials)[MODEL])
    end = [line for line in done.stdout.splitlines() if line.startswith("suggestions:")]
    return {**out, "wall_s": wall, "end_line": end[0] if end else ""}


def run_optuna_arm(workload: str, seed: int, arm: str) -> dict[str, Any]:
    from benchmarks import combined_replay

    if arm.endswith(" x1"):
        return combined_replay.simulate(workload, seed, combined_replay.optuna_pruner, parallel=1,
                                        optuna_arm=arm[:-3])
    return combined_replay.simulate(workload, seed, combined_replay.optuna_pruner, parallel=PARALLEL, optuna_arm=arm)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for w in WORKLOADS:
        rows = [r for r in runs if r["workload"] == w]
        if not rows:
            continue
        seeds = sorted({r["seed"] for r in rows})
        by = {(r["arm"], r["seed"]): r for r in rows}
        base = [by[("default", s)]["best_final"] for s in seeds if ("default", s) in by]
        q1, q3 = report.quartiles(base) if len(base) > 1 else (0.0, 0.0)
        cells = {}
        for arm in ARMS:
            rs = [by[(arm, s)] for s in seeds if (arm, s) in by]
            if not rs:
                continue
            cells[arm] = {k: report.median(r[k] for r in rs) for k in ("best_final", "epochs", "model", "killed",
                                                                        "stopped")}
        maximize = load(w)["maximize"]
        sign = 1.0 if maximize else -1.0
        noise = q3 - q1
        both = [s for s in seeds if ("default+stopping", s) in by and ("default", s) in by]
        ratio = report.median(by[("default+stopping", s)]["epochs"] / by[("default", s)]["epochs"] for s in both)
        ds, d, tm = cells["default+stopping"], cells["default"], cells["tpe+median"]
        goals = {
            "within noise of default, <= 60 % of its epochs":
                sign * (ds["best_final"] - d["best_final"]) >= -noise and ratio <= 0.60,
            "as good as tpe+median (within noise) at no more epochs":
                sign * (ds["best_final"] - tm["best_final"]) >= -noise and ds["epochs"] <= tm["epochs"],
            "<= 1 good trial killed per job (median)": ds["killed"] <= 1,
        }
        out[w] = {"cells": cells, "noise": noise, "epochs_ratio": ratio, "goals": goals, "n_seeds": len(seeds)}
    return out


def render(summary: dict[str, Any]) -> str:
    text = ""
    for w, s in summary.items():
        grid = load(w)
        rows = [[arm, c["best_final"], c["epochs"], c["model"], c["stopped"], c["killed"]]
                for arm, c in s["cells"].items()]
        text += report.table(f"{w}: {N_TRIALS} trials, median of {s['n_seeds']} seeds ({grid['metric']}, "
                             f"{'maximize' if grid['maximize'] else 'minimize'}; seed noise {s['noise']:.4g})",
                             ["arm", "best final", "epochs", "model-based", "stopped", "good trials killed"], rows)
        text += "\n".join(f"  goal: {name}: {report.verdict(ok)}" for name, ok in s["goals"].items())
        text += f"\n  (default+stopping ran {s['epochs_ratio'] * 100:.0f} % of default's epochs, median of seeds)\n"
    return text


def run(*, quick: bool = False, out_dir: str | None = None, seeds: int | None = None) -> dict[str, Any]:
    n_seeds = seeds or (2 if quick else SEEDS)
    runs = []
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="combined-") as root:
        for seed in range(n_seeds):
            for w in WORKLOADS:
                for arm in TRIALS_ARMS:
                    runs.append({"workload": w, "seed": seed, "arm": arm, **run_trials_arm(w, seed, arm, root)})
                for arm in OPTUNA_ARMS:
                    runs.append({"workload": w, "seed": seed, "arm": arm, **run_optuna_arm(w, seed, arm)})
                print(f"seed {seed} {w}: " + ", ".join(f"{r['arm']} {r['best_final']:.4g}/{r['epochs']}"
                                                       for r in runs if r["seed"] == seed and r["workload"] == w),
                      flush=True)
    wall = time.perf_counter() - t
    summary = summarize(runs)
    print(render(summary))
    result = {"quick": quick, "n_trials": N_TRIALS, "parallel": PARALLEL, "seeds": n_seeds, "wall_s": wall,
              "summary": summary, "runs": runs}
    path = report.write_result(PART, result, out_dir=out_dir)
    print(f"results: {path}  ({wall:.0f} s)")
    return result


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", type=int)
    parser.add_argument("--out")
    a = parser.parse_args()
    run(quick=a.quick, out_dir=a.out, seeds=a.seeds)

"""Part 8: suggestions ahead of time (issue 27, goal 1): does a slot ever wait for the default sampler?

The job: N trials x 10 epochs of 50 ms (``trainers/busy.py``), 1 and 2 slots, two workloads: epochs
of CPU busy loop (every core busy with 2 slots on 2 cores: the sampler's own CPU time then adds to the
wall whatever process it runs in) and epochs that wait (a trainer on a GPU or on I/O: the cores are
free for the sampler). Each mode a fresh process timed from outside:

- floor: the same trial processes spawned back to back, no controller;
- tpe: ``trials sweep --sampler tpe`` (TPE in the loop: 15-40 ms per suggestion);
- default: ``trials sweep`` with the default sampler (the warped GP when torch is installed), its
  suggestions made ahead of time in the sampler's own process;
- inline: the same with ``TRIALS_SUGGEST=inline``, the GP in the loop (what every release before did).

Reported: wall and its ratio to the TPE sweep's (goal: default within 1.05x), slot time lost waiting
for suggestions as the loop measured it (job meta ``suggest_wait_s``; goal: <= 1 % of slot time),
and the controller's peak RSS sampled from /proc (goal: near 50 MiB; the GP's memory is the
worker's). Then the GP's own cost per suggestion at 10, 100 and 300 completed trials, timed in a
process set up as the worker is (``OMP_NUM_THREADS=1``), median of 3. Last, what suggesting ahead
costs the search one trial at a time (the suggestion then lacks the running trial's result): the
default sampler's regret inline against ahead on four of part 3's problems, 5 seeds, 40 trials.

``python -m benchmarks suggest [--quick]``
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks import controller_overhead as co
from benchmarks import report

PART = "suggest"
REPO = co.REPO
FULL = co.Sizes(n_trials=40, epochs=10, work_ms=50.0, repeats=2)
WORKLOADS = ("cpu", "wait")
QUICK = co.Sizes(n_trials=14, epochs=2, work_ms=10.0, repeats=1)
COST_AT = (10, 100, 300)
COST_AT_QUICK = (10, 30)
MODES = ("floor", "tpe", "default", "inline")


def _peak_rss_mib(proc: subprocess.Popen[str]) -> tuple[float, str, str]:
    """Wait for ``proc`` sampling its RSS every 50 ms; (peak MiB, stdout, stderr)."""
    peak = 0.0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status", encoding="utf-8") as f:
                kb = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            peak = max(peak, kb / 1024)
        except OSError:
            pass
        time.sleep(0.05)
    out, err = proc.communicate()
    return peak, out, err


def _waited(root: str, job_id: str) -> dict[str, float]:
    """The job's slot time waiting for suggestions, and the suggestion worker's suggestions and CPU."""
    from trials.study.storage import open_storage
    from trials.study.store import JobStore

    store = JobStore.open(open_storage(f"journal:{os.path.join(root, job_id, 'journal.log')}"), job_id)
    meta = store.meta()
    return {"suggest_wait_s": meta.suggest_wait_s or 0.0, "suggestions": float(meta.suggestions or 0.0),
            "suggest_cpu_s": meta.suggest_cpu_s or 0.0}


def trainer_argv(sizes: co.Sizes, workload: str) -> list[str]:
    if workload == "cpu":
        return co.trainer_argv(sizes)
    return [report.PYTHON, co.TRAINER, f"--epochs={sizes.epochs}", "--work-ms=0", f"--sleep-ms={sizes.work_ms:g}"]


def run_mode(mode: str, sizes: co.Sizes, slots: int, workload: str = "cpu") -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix=f"bench-suggest-{mode}-")
    times_path = os.path.join(workdir, "times.txt")
    env = report.installed_env(BENCH_TIMES=times_path)
    env.pop("TRIALS_SUGGEST", None)
    try:
        launch = os.path.join(workdir, "launch")
        os.makedirs(launch)
        root = os.path.join(workdir, "jobs")
        if mode == "floor":
            cmd = [report.PYTHON, "-m", "benchmarks.suggest_ahead", "floor", str(slots), workdir,
                   co._sizes_json(sizes), workload]
        else:
            spec = os.path.join(workdir, "spec.yaml")
            co.write_spec(spec, sizes.n_trials, slots)
            cmd = co.sweep_command(spec, root, "bench", trainer_argv(sizes, workload),
                                   sampler="tpe" if mode == "tpe" else None)
            if mode == "inline":
                env["TRIALS_SUGGEST"] = "inline"
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=launch, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peak, _, err = _peak_rss_mib(proc)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(f"{mode} run failed ({proc.returncode}): {err[-2000:]}")
        times = co.read_times(times_path)
        if len(times) != sizes.n_trials:
            raise RuntimeError(f"{mode}: expected {sizes.n_trials} trial records, got {len(times)}")
        out: dict[str, Any] = {"wall_s": wall, "rss_mib": peak, "gaps_s": co._gaps(times)}
        if mode != "floor":
            out.update(_waited(root, "bench"))
        return out
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _floor_child(slots: int, workdir: str, sizes: co.Sizes, workload: str) -> None:
    """The floor: the same trial processes back to back in ``slots`` lanes, no controller."""
    import threading

    base = trainer_argv(sizes, workload)
    rng = random.Random(0)
    todo = list(range(sizes.n_trials))
    lock = threading.Lock()

    def lane() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            env = dict(os.environ, CLOUD_ML_TRIAL_ID=str(i + 1),
                       CLOUD_ML_HP_METRIC_FILE=os.path.join(workdir, f"{i + 1}.metrics"))
            subprocess.run(base + [f"--x={rng.random()!r}", f"--y={rng.random()!r}"], env=env, check=True)

    lanes = [threading.Thread(target=lane) for _ in range(slots)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()


# --- the GP's own cost per suggestion -----------------------------------------------------------------
def _cost_child(n: int, repeats: int) -> dict[str, Any]:
    """Seconds per gp-warped suggestion over ``n`` completed trials of a 2-D problem, as the worker makes it."""
    import optuna
    from optuna.distributions import FloatDistribution

    from trials.spec.load import loads_spec
    from trials.study import ahead
    from trials.study.samplers import make_sampler
    from trials.study.storage import quiet_optuna

    quiet_optuna()
    study = loads_spec("metrics: {loss: minimize}\nparameters:\n  x: {type: double, min: 0, max: 1}\n"
                       "  y: {type: double, min: 0, max: 1}\ncommand: [python, t.py]\n", source="b.yaml").study
    rng = random.Random(n)
    dist = {"x": FloatDistribution(0, 1), "y": FloatDistribution(0, 1)}
    mirror = {}
    for i in range(n):
        x, y = rng.random(), rng.random()
        mirror[i] = optuna.trial.create_trial(params={"x": x, "y": y}, distributions=dist,
                                              values=[(x - 0.3) ** 2 + (y - 0.6) ** 2 + 0.1 * rng.random()])
    sampler = make_sampler("gp-warped", seed=0)
    ahead._suggest_one(sampler, [optuna.study.StudyDirection.MINIMIZE], study, mirror)  # torch's first call
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        ahead._suggest_one(sampler, [optuna.study.StudyDirection.MINIMIZE], study, mirror)
        times.append(time.perf_counter() - t)
    return {"n": n, "median_s": statistics.median(times), "min_s": min(times)}


def suggestion_cost(at: tuple[int, ...], repeats: int) -> list[dict[str, Any]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    rows = []
    for n in at:
        out = subprocess.run([report.PYTHON, "-m", "benchmarks.suggest_ahead", "cost", str(n), str(repeats)],
                             env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


# --- what suggesting ahead costs the search -------------------------------------------------------------
QUALITY_PROBLEMS = ("branin", "hartmann6", "rosenbrock5", "mixed")


def _quality_run(args: tuple[str, int, int, bool]) -> dict[str, Any]:
    from benchmarks import search_quality

    name, seed, n, lag = args
    run = search_quality.one_run(name, "default", seed, n, 1, ahead=lag)
    return {"problem": name, "seed": seed, "ahead": lag, "regret": run["regret"][-1]}


def quality(seeds: int, n_trials: int, workers: int = 1) -> list[dict[str, Any]]:
    """The default sampler's simple regret after ``n_trials`` one at a time: each suggestion made after
    the last result (inline) against made while the trial before runs (ahead), same seeds."""
    jobs = [(p, s, n_trials, lag) for p in QUALITY_PROBLEMS for s in range(seeds) for lag in (False, True)]
    with report.worker_pool(workers) as pool:
        runs = list(pool.map(_quality_run, jobs))
    rows = []
    for p in QUALITY_PROBLEMS:
        inline = {r["seed"]: r["regret"] for r in runs if r["problem"] == p and not r["ahead"]}
        lagged = {r["seed"]: r["regret"] for r in runs if r["problem"] == p and r["ahead"]}
        worse = sum(lagged[s] > inline[s] for s in inline)
        rows.append({"problem": p, "inline": statistics.median(inline.values()),
                     "ahead": statistics.median(lagged.values()), "ahead_worse_seeds": worse, "seeds": len(inline)})
    return rows


# --- the part ---------------------------------------------------------------------------------------
def summarize(raw: dict[str, dict[str, list[dict[str, Any]]]], sizes: co.Sizes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for slots, modes in raw.items():  # "<workload> <slots>"
        row: dict[str, Any] = {}
        for mode, runs in modes.items():
            row[mode] = {"wall_s": report.median(r["wall_s"] for r in runs),
                         "rss_mib": report.median(r["rss_mib"] for r in runs),
                         "suggest_wait_s": report.median(r.get("suggest_wait_s", 0.0) for r in runs),
                         "suggestions": report.median(r.get("suggestions", 0.0) for r in runs),
                         "suggest_cpu_s": report.median(r.get("suggest_cpu_s", 0.0) for r in runs)}
        slot_time = row["default"]["wall_s"] * int(slots.split()[-1])
        row["default_over_tpe"] = row["default"]["wall_s"] / row["tpe"]["wall_s"]
        row["inline_over_tpe"] = row["inline"]["wall_s"] / row["tpe"]["wall_s"]
        row["tpe_over_floor"] = row["tpe"]["wall_s"] / row["floor"]["wall_s"]
        row["idle_share"] = row["default"]["suggest_wait_s"] / slot_time
        row["goals"] = {"default wall <= 1.05x tpe": row["default_over_tpe"] <= 1.05,
                        "idle slot time from suggestions <= 1 %": row["idle_share"] <= 0.01,
                        "controller RSS <= 80 MiB": row["default"]["rss_mib"] <= 80}
        out[slots] = row
    return out


def render(summary: dict[str, Any], cost: list[dict[str, Any]], sizes: co.Sizes) -> str:
    rows = []
    for slots, row in summary.items():
        for mode in MODES:
            m = row[mode]
            rows.append([mode, slots, m["wall_s"], m["wall_s"] / row["tpe"]["wall_s"], m["rss_mib"],
                         m["suggest_wait_s"] if mode != "floor" else "",
                         (f"{m['suggestions']:g} / {m['suggest_cpu_s']:.2f} s" if m.get("suggestions") else "")])
    parts = [report.table(
        f"Suggestions ahead: {sizes.n_trials} trials x {sizes.epochs} epochs x {sizes.work_ms:g} ms CPU "
        f"(median of {sizes.repeats})",
        ["mode", "epochs, slots", "wall s", "x tpe", "controller peak RSS MiB", "slot s waiting for suggestions",
         "worker: suggestions / CPU (imports and warm-up included)"],
        rows)]
    goals = [[slots, goal, report.verdict(ok)] for slots, row in summary.items() for goal, ok in row["goals"].items()]
    ratios = [[slots, row["default_over_tpe"], row["inline_over_tpe"], row["tpe_over_floor"],
               f"{100 * row['idle_share']:.2f} %"] for slots, row in summary.items()]
    parts.append(report.table("Ratios (same run)", ["epochs, slots", "default/tpe wall", "inline/tpe wall",
                                                    "tpe/floor wall", "idle share (default)"], ratios))
    parts.append(report.table("Goals", ["epochs, slots", "goal", "status"], goals))
    parts.append(report.table("The warped GP's cost per suggestion (in the worker, OMP_NUM_THREADS=1)",
                              ["completed trials", "median ms", "min ms"],
                              [[c["n"], c["median_s"] * 1000, c["min_s"] * 1000] for c in cost]))
    return "\n\n".join(parts)


def render_quality(rows: list[dict[str, Any]], n_trials: int) -> str:
    return report.table(
        f"The default sampler one trial at a time, {n_trials} trials: simple regret (median over seeds)",
        ["problem", "inline (after the last result)", "ahead (one trial pending)", "ahead/inline",
         "seeds where ahead is worse"],
        [[r["problem"], r["inline"], r["ahead"], r["ahead"] / r["inline"] if r["inline"] else float("nan"),
          f"{r['ahead_worse_seeds']} of {r['seeds']}"] for r in rows])


def run(*, quick: bool = False, out_dir: str | None = None) -> dict[str, Any]:
    from trials.study.samplers import gp_available

    if not gp_available():
        print("suggest: the GP needs scipy (pip install 'trials[gp]'): part skipped")
        return {"skipped": "no scipy"}
    sizes = QUICK if quick else FULL
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for workload in WORKLOADS:
        for slots in (1, 2):
            modes: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
            for _ in range(sizes.repeats):  # interleaved: the machine's noise hits every mode alike
                for mode in MODES:
                    modes[mode].append(run_mode(mode, sizes, slots, workload))
            raw[f"{workload} {slots}"] = modes
    cost = suggestion_cost(COST_AT_QUICK if quick else COST_AT, 1 if quick else 3)
    summary = summarize(raw, sizes)
    n_quality = 15 if quick else 40
    quality_rows = quality(1 if quick else 5, n_quality)
    data = {"quick": quick, "sizes": {k: getattr(sizes, k) for k in co.Sizes.__slots__}, "summary": summary,
            "cost": cost, "quality": quality_rows, "raw": raw}
    path = report.write_result(PART, data, out_dir=out_dir)
    print(render(summary, cost, sizes))
    print()
    print(render_quality(quality_rows, n_quality))
    print(f"results: {path}")
    return data


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "floor":
        _floor_child(int(sys.argv[2]), sys.argv[3], co.Sizes(**json.loads(sys.argv[4])), sys.argv[5])
    elif len(sys.argv) >= 2 and sys.argv[1] == "cost":
        print(json.dumps(_cost_child(int(sys.argv[2]), int(sys.argv[3]))))
    elif len(sys.argv) >= 2 and sys.argv[1] == "quality":  # quality [SEEDS] [TRIALS]: that table alone
        n = int(sys.argv[3]) if len(sys.argv) > 3 else 40
        print(render_quality(quality(int(sys.argv[2]) if len(sys.argv) > 2 else 5, n), n))
    else:
        run(quick="--quick" in sys.argv)

"""Part 5: does the controller's per-trial cost stay flat over thousands of trials?

- sweep: ``trials sweep`` with N short trials (``busy.py`` with one 0-ms epoch and one report) on
  2 slots. The benchmark samples the controller process's RSS and CPU time from ``/proc`` while it
  runs; each trial writes its own start/end times. Per-trial wall = time between the starts of
  trial k and trial k+100 / 100, for the first and the last 100 trials; the ideal is the same
  processes spawned back to back on 2 lanes without a controller (the floor, measured on 200).
- in-process: ``trials.tune`` with N trials whose objective reports once, in a fresh process:
  per-trial cost for the first and last 100 trials (from ``on_trial`` times) and RSS at the end.

The sampler is RANDOM_SEARCH in both, so the sampler's own cost (TPE grows with the history) is
not what is measured: this part measures the controller's bookkeeping.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks import controller_overhead as co
from benchmarks import report

PART = "scale"
WINDOW = 100
PROJECTED_TRIAL_S = 1.0  # Ray Tune's bookkeeping test runs 1-second trials


def _proc_sample(pid: int) -> tuple[float, float] | None:
    """(RSS MiB, CPU seconds) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return rss, cpu
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def _window_cost(starts: list[float], first: bool) -> float:
    """Seconds per trial between the starts of WINDOW consecutive trials at the start or end."""
    w = min(WINDOW, len(starts) - 1)
    return (starts[w] - starts[0]) / w if first else (starts[-1] - starts[-1 - w]) / w


def _cpu_between(samples: list[tuple[float, float, float]], t0: float, t1: float) -> float:
    """Controller CPU seconds used between wall times t0 and t1 (nearest samples)."""
    def at(t: float) -> float:
        return min(samples, key=lambda s: abs(s[0] - t))[2]
    return at(t1) - at(t0)


def sweep_scale(n_trials: int, slots: int = 2) -> dict[str, Any]:
    sizes = co.Sizes(n_trials=n_trials, epochs=1, work_ms=0.0)
    workdir = tempfile.mkdtemp(prefix="bench-scale-")
    times_path = os.path.join(workdir, "times.txt")
    spec = os.path.join(workdir, "spec.yaml")
    co.write_spec(spec, n_trials, slots, algorithm="random")
    cmd = co.sweep_command(spec, os.path.join(workdir, "jobs"), "scale", co.trainer_argv(sizes)) + []
    cmd.insert(cmd.index("--seed"), "--quiet")
    env = dict(os.environ, BENCH_TIMES=times_path, PYTHONPATH=co.REPO)
    samples: list[tuple[float, float, float]] = []
    try:
        t = time.perf_counter()
        with open(os.path.join(workdir, "out.log"), "w") as log:
            launch = os.path.join(workdir, "launch")  # times.txt outside the trials' copy-on-write view
            os.makedirs(launch, exist_ok=True)
            proc = subprocess.Popen(cmd, env=env, cwd=launch, stdout=log, stderr=subprocess.STDOUT)
            while proc.poll() is None:
                s = _proc_sample(proc.pid)
                if s is not None:
                    samples.append((time.time(), *s))
                time.sleep(0.2)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            with open(os.path.join(workdir, "out.log"), encoding="utf-8") as f:
                raise RuntimeError(f"scale sweep failed ({proc.returncode}): {f.read()[-2000:]}")
        times = co.read_times(times_path)
        if len(times) != n_trials:
            raise RuntimeError(f"scale sweep: expected {n_trials} trial records, got {len(times)}")
        starts = sorted(s for s, _ in times.values())
        w = min(WINDOW, len(starts) - 1)
        first_cpu = _cpu_between(samples, starts[0], starts[w]) / w if samples else float("nan")
        last_cpu = _cpu_between(samples, starts[-1 - w], starts[-1]) / w if samples else float("nan")
        return {"n_trials": n_trials, "slots": slots, "wall_s": wall,
                "first_s_per_trial": _window_cost(starts, True), "last_s_per_trial": _window_cost(starts, False),
                "first_cpu_s_per_trial": first_cpu, "last_cpu_s_per_trial": last_cpu,
                "controller_cpu_s": samples[-1][2] if samples else float("nan"),
                "rss_end_mib": samples[-1][1] if samples else float("nan"),
                "rss_max_mib": max(s[1] for s in samples) if samples else float("nan"),
                "rss_at_first_window_mib":
                    min(samples, key=lambda s: abs(s[0] - starts[w]))[1] if samples else float("nan")}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def floor_scale(n_trials: int, slots: int = 2) -> dict[str, Any]:
    sizes = co.Sizes(n_trials=n_trials, epochs=1, work_ms=0.0)
    run = co.run_mode("floor", sizes, slots)
    return {"n_trials": n_trials, "wall_s": run["wall_s"], "s_per_trial": run["span_s"] / n_trials}


# --- in-process ---------------------------------------------------------------------------------------
def inprocess_job(n_trials: int) -> dict[str, Any]:
    """Run in a fresh process (``python -m benchmarks.scale inprocess N``): trials.tune, N trials."""
    import trials
    from trials.spec import Algorithm, Goal, JobSpec, MetricSpec, ParameterSpec, ParameterType, StudySpec

    spec = JobSpec(study=StudySpec(
        metrics=(MetricSpec(metric_id="score", goal=Goal.MAXIMIZE),),
        parameters=(ParameterSpec(parameter_id="x", type=ParameterType.DOUBLE, min_value=0.0, max_value=1.0),),
        algorithm=Algorithm.RANDOM_SEARCH), max_trial_count=n_trials)
    stamps: list[float] = []

    def objective(ctx) -> None:
        ctx.report(1, score=float(ctx.config.x))

    rss0 = _proc_sample(os.getpid())
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        result = trials.tune(objective, spec, seed=0, directory=tmp,
                             on_trial=lambda rest: stamps.append(time.perf_counter()))
        wall = time.perf_counter() - t
        rss1 = _proc_sample(os.getpid())
    w = min(WINDOW, len(stamps) - 1)
    return {"n_trials": n_trials, "state": result.state, "n_done": len(result.trials), "wall_s": wall,
            "first_s_per_trial": (stamps[w] - stamps[0]) / w, "last_s_per_trial": (stamps[-1] - stamps[-1 - w]) / w,
            "mean_s_per_trial": wall / n_trials,
            "rss_start_mib": rss0[0] if rss0 else None, "rss_end_mib": rss1[0] if rss1 else None}


def inprocess_scale(n_trials: int) -> dict[str, Any]:
    proc = subprocess.run([report.PYTHON, "-m", "benchmarks.scale", "inprocess", str(n_trials)],
                          cwd=co.REPO, env=dict(os.environ, PYTHONPATH=co.REPO), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"in-process job failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the part -----------------------------------------------------------------------------------------
def run(*, quick: bool = False, out_dir: str | None = None) -> dict[str, Any]:
    n_sweep, n_tune, n_floor = (60, 300, 20) if quick else (2000, 10000, 100)
    before = floor_scale(n_floor)  # the ideal, measured before and after: the machine's load drifts
    sweep = sweep_scale(n_sweep)
    after = floor_scale(n_floor)
    floor = {"n_trials": 2 * n_floor, "wall_s": before["wall_s"] + after["wall_s"],
             "s_per_trial": (before["s_per_trial"] + after["s_per_trial"]) / 2,
             "before_s_per_trial": before["s_per_trial"], "after_s_per_trial": after["s_per_trial"]}
    tune = inprocess_scale(n_tune)
    summary = summarize(sweep, floor, tune)
    result = {"quick": quick, "sampler": "RANDOM_SEARCH (so the sampler's cost is not what is measured)",
              "sweep": sweep, "floor": floor, "inprocess": tune, "summary": summary}
    path = report.write_result(PART, result, out_dir=out_dir)
    print(render(summary, sweep, floor, tune))
    print(f"results: {path}")
    return result


def summarize(sweep: dict[str, Any], floor: dict[str, Any], tune: dict[str, Any]) -> dict[str, Any]:
    ideal = floor["s_per_trial"]
    first, last = sweep["first_s_per_trial"], sweep["last_s_per_trial"]
    cost_first, cost_last = first - ideal, last - ideal
    # What the measured per-trial cost would add to 1-second trials on the same 2 slots:
    projected = max(cost_first, cost_last) / (PROJECTED_TRIAL_S / sweep["slots"] + ideal)
    return {
        "sweep_last_over_first": last / first,
        "sweep_cost_first_ms": cost_first * 1000, "sweep_cost_last_ms": cost_last * 1000,
        "sweep_overhead_over_ideal": last / ideal - 1,
        "projected_overhead_1s_trials": projected,
        "sweep_cpu_last_over_first": sweep["last_cpu_s_per_trial"] / sweep["first_cpu_s_per_trial"]
        if sweep["first_cpu_s_per_trial"] else float("nan"),
        "inprocess_last_over_first": tune["last_s_per_trial"] / tune["first_s_per_trial"],
        "goals": {
            "sweep last 100 <= 2x first 100 (wall)": last / first <= 2,
            "sweep last 100 <= 2x first 100 (controller CPU)":
                sweep["last_cpu_s_per_trial"] <= 2 * sweep["first_cpu_s_per_trial"],
            "in-process last 100 <= 2x first 100": tune["last_s_per_trial"] / tune["first_s_per_trial"] <= 2,
            "sweep overhead <= 10 % over ideal (these short trials)": last / ideal - 1 <= 0.10,
            "projected overhead <= 10 % for 1-s trials": projected <= 0.10,
        },
    }


def render(summary: dict[str, Any], sweep: dict[str, Any], floor: dict[str, Any], tune: dict[str, Any]) -> str:
    rows = [
        [f"sweep, {sweep['n_trials']} trials, 2 slots", sweep["first_s_per_trial"] * 1000,
         sweep["last_s_per_trial"] * 1000, summary["sweep_last_over_first"], sweep["rss_end_mib"], sweep["wall_s"]],
        ["  controller CPU per trial", sweep["first_cpu_s_per_trial"] * 1000, sweep["last_cpu_s_per_trial"] * 1000,
         summary["sweep_cpu_last_over_first"], float("nan"), float("nan")],
        [f"floor (ideal), {floor['n_trials']} trials, 2 lanes, before / after",
         floor.get("before_s_per_trial", floor["s_per_trial"]) * 1000,
         floor.get("after_s_per_trial", floor["s_per_trial"]) * 1000, float("nan"), float("nan"), floor["wall_s"]],
        [f"in-process trials.tune, {tune['n_trials']} trials", tune["first_s_per_trial"] * 1000,
         tune["last_s_per_trial"] * 1000, summary["inprocess_last_over_first"], tune["rss_end_mib"], tune["wall_s"]],
    ]
    text = report.table("Scale (RANDOM_SEARCH): per-trial wall ms, first and last 100 trials",
                        ["run", "first 100 ms/trial", "last 100 ms/trial", "last/first", "RSS at end MiB", "wall s"],
                        rows)
    text += (f"\ncontroller RSS: {sweep['rss_at_first_window_mib']:.0f} MiB after 100 trials, "
             f"{sweep['rss_end_mib']:.0f} MiB at the end (peak {sweep['rss_max_mib']:.0f}); in-process job: "
             f"{tune['rss_start_mib']:.0f} MiB before, {tune['rss_end_mib']:.0f} MiB after "
             f"{tune['n_trials']} trials.\n")
    text += (f"\nsweep over ideal: {summary['sweep_overhead_over_ideal'] * 100:.0f} % for these "
             f"{floor['s_per_trial'] * 1000:.0f}-ms-per-slot trials "
             f"(controller cost {summary['sweep_cost_first_ms']:.1f} -> "
             f"{summary['sweep_cost_last_ms']:.1f} ms per trial); the same cost on 1-s trials would be "
             f"{summary['projected_overhead_1s_trials'] * 100:.1f} %.\n\n")
    text += report.table("Goals", ["goal", "status"], [[k, report.verdict(v)] for k, v in summary["goals"].items()])
    return text


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "inprocess":
        print(json.dumps(inprocess_job(int(sys.argv[2]))))
        sys.exit(0)
    sys.exit("usage: python -m benchmarks.scale inprocess N (the part runs from python -m benchmarks scale)")

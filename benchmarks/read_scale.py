"""Part "read": do the commands that only read a job read only what they need?

A 10,000-trial and a 1,000-trial journal job are built in-process through the job store the loop
writes with (its claim, its first attributes, its metric reports, its outcome: what a real sweep
records, ~16 journal records per trial), with fsync skipped while building. Each command then runs
in a fresh process, interleaved, median of a few: ``describe``, ``best``, ``list``, ``resume`` of
the finished job (its decision: nothing to run) and ``report`` with plots of the 1,000-trial job.
Baselines in the same run: ``python -c "import trials"`` (process start) and the old path, Optuna's
full replay of the journal (``JournalStorage`` opened and every trial read once); with
``TRIALS_BENCH_BASELINE=/path/to/another/checkout`` the same commands from that checkout too,
interleaved (``TRIALS_BENCH_BASELINE=/work/main python -m benchmarks read``). More checkouts, each
timed the same way on its own jobs: ``TRIALS_BENCH_VARIANTS=NAME=PATH,NAME=PATH`` (e.g. one with a
cache taken out, to see what the cache earns); ``TRIALS_BENCH_COMMANDS=describe,best,resume`` times
only the commands whose label starts with one of those words (and the two baselines).

Goals (issue 27, goal 4): describe/best/list/resume of the 10,000-trial job < 0.5 s wall; report of
the 1,000-trial job with plots < 5 s.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from benchmarks import report
from trials.controller.report.page import IMPORTANCES_CACHE
from trials.records import JobState
from trials.study.journal import cache as journal_cache

PART = "read"
GOAL_READ_S = 0.5
GOAL_REPORT_S = 5.0
SPEC = """
display_name: read-scale
metrics: {{{metrics}}}
parameters:
  learning_rate: {{type: double, min: 0.0001, max: 0.1, scale: log}}
  batch_size: {{type: discrete, values: [16, 32, 64, 128]}}
  layers: {{type: integer, min: 1, max: 8}}
  optimizer: {{type: categorical, values: [adam, sgd, rmsprop]}}
algorithm: random
max_trial_count: {n}
parallel_trial_count: 4
"""


@contextlib.contextmanager
def _no_fsync() -> Iterator[None]:
    """Building a benchmark job needs no durability: 10,000 trials of fsyncs would take minutes."""
    real = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real


def build_job(root: str, job_id: str, n_trials: int, *, n_metrics: int = 1, seed: int = 0,
              n_running: int = 2, n_waiting: int = 3, epochs: int = 10, requeued: bool = True) -> str:
    """A finished-looking journal job of ``n_trials``: mostly succeeded, some stopped early, some
    failed, ``n_running`` left ACTIVE mid-run and ``n_waiting`` never started; with ``requeued``
    ~2 % sent back to the queue after they ran (a resume runs them again: a job with nothing left
    to run has none).

    Returns the job folder.
    """
    from trials.controller.jobs import registry
    from trials.controller.loop.record import active_attrs
    from trials.controller.policy.outcome import finished_trial, record_finished
    from trials.records import LiveChunks, Measurement, TrialState
    from trials.spec.load import loads_spec
    from trials.timefmt import rfc3339

    metric_ids = ["accuracy", "latency_ms"][:n_metrics]
    goals = ", ".join(f"{m}: {'maximize' if i == 0 else 'minimize'}" for i, m in enumerate(metric_ids))
    job = loads_spec(SPEC.format(metrics=goals, n=n_trials), source="read_scale.yaml")
    rng = random.Random(seed)
    wall = 1_767_225_600.0  # 2026-01-01
    with _no_fsync():
        h = registry.create_job(job, root=root, job_id=job_id, spec_path=None, storage=None,
                                base_output_dir=None, project_number=None, local_command=["python", "train.py"],
                                seed=seed)
        store = h.store
        meta = store.meta()
        store.write_meta(replace(meta, state=JobState.RUNNING, start_time=rfc3339(wall)), since=meta)
        for i in range(n_trials - n_waiting):
            with store.batch():
                claimed = store.claim(job.study)
                assert claimed is not None
                store.set_trial_attrs(claimed.storage_id, **active_attrs(
                    claimed, job_dir=h.job_dir, base_output=None, worker="bench-host-1", wall=wall))
            kind = rng.random()
            running = i >= n_trials - n_waiting - n_running
            n_steps = rng.randint(1, epochs - 1) if running or kind < 0.15 else epochs
            ms = []
            for step in range(1, n_steps + 1):
                acc = 1 - 0.5 / step * (0.5 + rng.random())
                values = {"accuracy": acc, "latency_ms": 10 + 90 * rng.random()}
                ms.append(Measurement(step=step, metrics={m: values[m] for m in metric_ids},
                                      elapsed_s=round(0.5 * step, 6)))
            chunks, elapsed, live = LiveChunks(), {}, {}
            for chunk in (ms[:n_steps // 2], ms[n_steps // 2:]):  # the loop stores what each poll read
                if chunk:
                    for m in chunk:  # (as MetricsPolicy.report_new keeps them: in chunks of steps)
                        elapsed[str(m.step)] = m.elapsed_s
                        chunks.touch(str(m.step))
                        if n_metrics > 1:
                            live[str(m.step)] = {k: v for k, v in m.metrics.items() if k != "accuracy"}
                    store.report_many(claimed.storage_id, [(m.step, m.metrics["accuracy"]) for m in chunk],
                                      chunks.attrs(elapsed, live))
            wall += 5.0
            if running:
                continue
            if requeued and 0.15 <= kind < 0.17:  # back to the queue (a controller stopped): it stays queued
                store.set_trial_attrs(claimed.storage_id, state=TrialState.REQUESTED.value, end_time=None,
                                      start_time=None, measurements=None, requeued=True,
                                      previous_measurements=[])
                store.requeue(claimed.storage_id)
                continue
            failure = ("The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error."
                       if kind < 0.07 else None)
            stopped = 0.07 <= kind < 0.15
            outcome = finished_trial(ms, job.study, failure=failure, reported_tags=metric_ids,
                                     end_time=rfc3339(wall), stopped_early=stopped,
                                     stop_detail="below the median of the completed trials" if stopped else "")
            extra: dict[str, Any] = {"attempts": [{"replica": "workerpool0-0", "exitStatus": 1 if failure else 0,
                                                   "startTime": rfc3339(wall - 5), "endTime": rfc3339(wall)}]}
            if failure:
                extra["error_detail"] = ["ValueError: loss is NaN", "Traceback (most recent call last): ..."]
            with store.batch():
                record_finished(store, number=claimed.number, storage_id=claimed.storage_id, outcome=outcome,
                                extra=extra)
        meta = store.meta()
        store.write_meta(replace(meta, state=JobState.SUCCEEDED if not n_running else JobState.RUNNING,
                                 end_time=rfc3339(wall)), since=meta)
    return h.job_dir


# --- timing -----------------------------------------------------------------------------------------
_OLD_PATH = """
import sys
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
s = JournalStorage(JournalFileBackend(sys.argv[1]))  # (Optuna's own: no snapshot of trials' kept beside it)
study = s.get_all_studies()[0]
print(len(s.get_all_trials(study._study_id, deepcopy=False)))
"""


def commands(root: str, big: str, small: str, out_dir: str, *, n_big: int = 10_000,
             n_small: int = 1_000) -> list[tuple[str, list[str], float | None]]:
    """(label, argv, goal seconds or None for a baseline)."""
    b, s = f"{n_big:,}", f"{n_small:,}"
    py = report.PYTHON
    trials = [py, "-m", "trials"]
    journal = os.path.join(root, big, "journal.log")
    return [
        ('python -c "import trials"', [py, "-c", "import trials"], None),
        (f"old path: Optuna's full replay ({b})", [py, "-c", _OLD_PATH, journal], None),
        (f"describe ({b})", [*trials, "describe", big, "--root", root], GOAL_READ_S),
        (f"describe --format json ({b})", [*trials, "describe", big, "--root", root, "--format", "json"],
         GOAL_READ_S),
        (f"describe --format json, no trial's text kept yet ({b})",
         [*trials, "describe", big, "--root", root, "--format", "json"], None),
        (f"best ({b})", [*trials, "best", big, "--root", root], GOAL_READ_S),
        (f"list ({b} + {s})", [*trials, "list", "--root", root], GOAL_READ_S),
        (f"resume, nothing to run ({b})", [*trials, "resume", big, "--root", root], GOAL_READ_S),
        (f"resume, nothing to run, its slow path: Optuna opens the job ({b})",
         ["env", "TRIALS_RESUME_FAST=0", *trials, "resume", big, "--root", root], None),
        (f"report with plots ({s})", [*trials, "report", small, "--root", root, "--out", out_dir], GOAL_REPORT_S),
        (f"report with plots, the first of these results ({s})",
         [*trials, "report", small, "--root", root, "--out", out_dir + "-first"], GOAL_REPORT_S),
    ]


def first_of_results(label: str, root: str, small: str) -> None:
    """Before a timed "first of these results" report: its job has no importances computed yet (as
    after any new result: the cache is keyed by the trials it is computed from)."""
    if "the first of these results" in label:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(root, small, IMPORTANCES_CACHE))
    if "no trial's text kept yet" in label:  # (``describe --format json``: as before its first run)
        for job in os.listdir(root):
            with contextlib.suppress(OSError):
                os.unlink(journal_cache.cache_path(os.path.join(root, job, "journal.log"), journal_cache.TEXTS))


def time_once(argv: list[str], env: dict[str, str], cwd: str | None = None) -> float:
    """One run's wall time; ``cwd``: a folder without a ``trials`` package (``python -m`` puts the
    working folder first on the path: run from a checkout, its code would be the one timed)."""
    t = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=cwd)
    return time.perf_counter() - t


def command_env(repo: str, pycache: str) -> dict[str, str]:
    """The commands' environment: ``repo`` on the path, and its bytecode written and reused (in
    ``pycache``) as an installed package has it, whatever this shell says (a
    ``PYTHONDONTWRITEBYTECODE`` compiled every module in every timed run)."""
    env = dict(os.environ, PYTHONPATH=repo, PYTHONPYCACHEPREFIX=pycache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def variants() -> list[tuple[str, str]]:
    """(name, checkout) of the other checkouts to time: ``TRIALS_BENCH_BASELINE`` as "baseline", then
    each ``NAME=PATH`` of ``TRIALS_BENCH_VARIANTS``."""
    out = [("baseline", b)] if (b := os.environ.get("TRIALS_BENCH_BASELINE")) else []
    for item in filter(None, os.environ.get("TRIALS_BENCH_VARIANTS", "").split(",")):
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"TRIALS_BENCH_VARIANTS: expected NAME=PATH,..., got {item!r}")
        out.append((name, path))
    return out


def selected(label: str) -> bool:
    """Whether ``TRIALS_BENCH_COMMANDS`` (words a label starts with; unset: all) times this command."""
    words = [w for w in os.environ.get("TRIALS_BENCH_COMMANDS", "").split(",") if w]
    return not words or label.startswith(("python -c", "old path", *words))


def run(*, quick: bool = False, out_dir: str | None = None) -> dict[str, Any]:
    """Time the commands; with ``TRIALS_BENCH_BASELINE`` (another checkout, e.g. main's) or
    ``TRIALS_BENCH_VARIANTS`` each also runs from that checkout on its own copy of the jobs (the
    snapshot formats may differ), interleaved with this one's, and the table gives the ratio."""
    n_big, n_small = (500, 100) if quick else (10_000, 1_000)
    repeats = 2 if quick else 5
    others = variants()
    baseline = next((path for name, path in others if name == "baseline"), None)
    load_start = os.getloadavg()
    workdir = tempfile.mkdtemp(prefix="bench-read-")
    try:
        root = os.path.join(workdir, "jobs")
        t = time.perf_counter()
        build_job(root, "big", n_big, n_running=0, n_waiting=0, requeued=False)  # resume: nothing to run
        build_job(root, "small", n_small, n_metrics=1, seed=1, n_running=0, n_waiting=0)
        built_s = time.perf_counter() - t
        runs = [("", root, command_env(report.REPO, os.path.join(workdir, "pycache")))]
        # each other checkout's jobs built again, not copied: a job records its folder (a copy's report would
        # use the first's)
        for name, path in others:
            other_root = os.path.join(workdir, f"{name}-jobs")
            build_job(other_root, "big", n_big, n_running=0, n_waiting=0, requeued=False)
            build_job(other_root, "small", n_small, n_metrics=1, seed=1, n_running=0, n_waiting=0)
            runs.append((f"{name} ", other_root, command_env(path, os.path.join(workdir, f"{name}-pycache"))))
        cmds = {who: [c for c in commands(jobs, "big", "small", os.path.join(workdir, who + "report"), n_big=n_big,
                                          n_small=n_small) if selected(c[0])] for who, jobs, _ in runs}
        for _ in range(2):  # twice untimed: bytecode, snapshots and caches as after any earlier command
            for who, jobs, env in runs:
                for label, argv, _ in cmds[who]:
                    first_of_results(label, jobs, "small")
                    time_once(argv, env, workdir)
        times: dict[str, list[float]] = {who + label: [] for who, _, _ in runs for label, _, _ in cmds[who]}
        loads: list[float] = []  # the 1-minute load average after each round (the machine may be shared)
        for _ in range(repeats):
            for i in range(len(cmds[""])):
                for who, jobs, env in runs:
                    label, argv, _ = cmds[who][i]
                    first_of_results(label, jobs, "small")
                    times[who + label].append(time_once(argv, env, workdir))
            loads.append(round(os.getloadavg()[0], 2))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    labels = [(label, goal) for label, _, goal in cmds[""]]
    base = statistics.median(times[labels[0][0]])
    old = statistics.median(times[labels[1][0]])
    rows, results, goals = [], {}, {}
    for label, goal in labels:
        med = statistics.median(times[label])
        ok = med <= goal if goal is not None and not quick else None
        results[label] = {"median_s": med, "min_s": min(times[label]), "x_import_trials": med / base,
                          "x_old_replay": med / old, "goal_s": goal, "goal": ok}
        if goal is not None and not quick:
            goals[f"{label} < {goal:g} s"] = ok
        row = [label, med * 1000, min(times[label]) * 1000, med / base, med / old]
        for name, _ in others:
            then = statistics.median(times[f"{name} {label}"])
            results[label].update({f"{name}_median_s": then, f"x_{name}": med / then})
            row += [then * 1000, med / then]
        rows.append([*row, "" if ok is None else report.verdict(ok)])
    load = os.getloadavg()
    data = {"quick": quick, "repeats": repeats, "n_trials": [n_big, n_small], "build_s": built_s,
            "baseline": baseline, "variants": dict(others), "load_avg": load, "load_avg_start": load_start,
            "load_avg_rounds": loads, "commands": results, "goals": goals}
    path = report.write_result(PART, data, out_dir=out_dir)
    header = ["command", "median ms", "min ms", "x import trials", "x old replay"]
    for name, _ in others:
        header += [f"{name} ms", f"x {name}"]
    print(report.table(f"Reading a job: {n_big:,} and {n_small:,} trials, median of {repeats} interleaved runs "
                       f"(built in {built_s:.0f} s; load average {load_start[0]:.1f} at the start, "
                       f"{min(loads):.1f}-{max(loads):.1f} after each round)"
                       + "".join(f"; {name}: {checkout}" for name, checkout in others),
                       [*header, "goal"], rows))
    print(f"results: {path}")
    return data


if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])

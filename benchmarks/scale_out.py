"""Scale-out on PostgreSQL: trials/minute for 1, 2 and 4 workers, and the storage's per-trial cost.

``python -m benchmarks.scale_out [--url URL] [--trials N] [--work-ms MS] [--quick]``

Issue 27's PostgreSQL goals, each against its baseline in the same run:

- SQL statements per trial over a whole ``trials worker`` job (no-op trials, one report each),
  counted with SQLAlchemy's ``before_cursor_execute`` event (an ``executemany`` counts once, as it
  is one round trip), at 100 and 1,000 trials; the goal is <= 15. Also how many times the whole
  study was read (Optuna's ``_get_trials``): a constant (start and end), not one per trial.
- the job loop's cost per trial at 100 vs 1,000 trials: ``trials.tune`` on PostgreSQL with an
  objective that returns at once (the loop, the storage, no processes), wall / trials; flat is
  within +-20 %.
- resume to the first trial: ``trials resume`` of a 1,000-trial job with half its trials finished,
  from the command's start to its first trial's start, against the same for a 100-trial job.
- 4 workers vs 1 on trials that sleep 1 s (sleeping, not burning CPU: on 2 cores 4 busy trials
  cannot run 4x faster whatever the controller does): trials/second from the first trial's start to
  the last one's end, the workers' start-up (launch to their first trial) reported apart.

- throughput: one job of N trials in PostgreSQL (random search, ``parallelTrialCount`` = the number
  of workers), and 1, 2 or 4 ``trials worker`` processes with one trial slot each, all started at
  once; trials/minute = N / wall time from the first worker's start to the last worker's exit
  (worker start-up, imports and job end included). Each trial is a CPU busy loop of ``--work-ms``
  and one hypertune report. The machine's cores bound the speed-up, so each row also shows the floor:
  the same trial processes on as many lanes with no controller and no storage.
- storage cost per trial, in process, without trial processes: the calls the job loop makes for one
  trial (claim, start attributes, three intermediate values, final attributes, complete; on
  PostgreSQL also the lease, the ownership check and its release), timed on the journal file (the
  single-host default) and on PostgreSQL.
- end to end per trial: the gap between two consecutive trial starts of a single lane (no-op trial)
  under ``trials sweep`` on the journal and under one ``trials worker`` on PostgreSQL.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

DEFAULT_URL = os.environ.get("TRIALS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

# The trial: a CPU busy loop of WORK_MS (or a sleep of SLEEP_MS), one report, and its start/end
# appended to BENCH_TIMES.
TRIAL = r"""
import os, sys, time
t0 = time.time()
import hypertune
work = float(os.environ.get("BENCH_WORK_MS", "0")) / 1000
end = time.process_time() + work
while time.process_time() < end:
    pass
time.sleep(float(os.environ.get("BENCH_SLEEP_MS", "0")) / 1000)
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=float(sys.argv[-1].split("=")[1]), global_step=1)
path = os.environ.get("BENCH_TIMES")
if path:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{os.environ['CLOUD_ML_TRIAL_ID']} {t0:.6f} {time.time():.6f}\n".encode())
    os.close(fd)
"""


def spec_dict(n_trials: int, parallel: int, work_ms: float, times: str, sleep_ms: float = 0) -> dict:
    return {
        "studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}],
                      "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}],
                      "algorithm": "RANDOM_SEARCH"},
        "maxTrialCount": n_trials, "parallelTrialCount": parallel,
        "trialJobSpec": {"workerPoolSpecs": [{
            "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
            "containerSpec": {"imageUri": "local", "command": ["python", "-c", TRIAL],
                              "env": [{"name": "BENCH_WORK_MS", "value": str(work_ms)},
                                      {"name": "BENCH_SLEEP_MS", "value": str(sleep_ms)},
                                      {"name": "BENCH_TIMES", "value": times}]}}]},
    }


def times_file(workdir: str) -> str:
    """Where the trials append their times: in the job's buckets (``create``'s gcs root), which the host sandbox
    binds through to every trial (elsewhere a trial's writes stay in its copy-on-write layer: nothing recorded)."""
    os.makedirs(os.path.join(workdir, "gcs"), exist_ok=True)
    return os.path.join(workdir, "gcs", "times.txt")


def create(workdir: str, storage: str | None, job_id: str, spec: dict):
    os.makedirs(os.path.join(workdir, "launch"), exist_ok=True)
    from trials.controller.jobs import registry
    from trials.spec.load import parse_spec

    job = parse_spec(spec, source="<benchmark>")
    return registry.create_job(job, root=os.path.join(workdir, "jobs"), job_id=job_id, spec_path=None,
                                 storage=storage, base_output_dir=None, project_number=None,
                                 local_command=None, cwd=os.path.join(workdir, "launch"), seed=1,
                                 gcs_root=os.path.join(workdir, "gcs"))


def trials_cmd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "trials", *argv]


# --- throughput ------------------------------------------------------------------------------------

def run_workers(workdir: str, url: str, job_id: str, n_workers: int) -> None:
    """``n_workers`` ``trials worker`` processes on the job until they all end (any failure raises)."""
    procs = [subprocess.Popen(trials_cmd("worker", job_id, "--storage", url, "--parallel-trial-count", "1",
                                         "--root", os.path.join(workdir, "jobs"), "--quiet"),
                              cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(n_workers)]
    for p in procs:
        _out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"worker exited {p.returncode}: {err.strip()[-500:]}")

def throughput(url: str, n_workers: int, n_trials: int, work_ms: float) -> float:
    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        job_id = f"bench-{uuid.uuid4().hex[:10]}"
        times = times_file(workdir)
        create(workdir, url, job_id, spec_dict(n_trials, n_workers, work_ms, times))
        t0 = time.monotonic()
        run_workers(workdir, url, job_id, n_workers)
        wall = time.monotonic() - t0
        with open(times, encoding="utf-8") as f:
            done = len(f.read().splitlines())
        if done != n_trials:
            raise RuntimeError(f"expected {n_trials} trials to run, {done} did")
        return n_trials / wall * 60


def floor_rate(n_lanes: int, n_trials: int, work_ms: float) -> float:
    """Trials/minute of the same trial processes on ``n_lanes`` lanes with no controller at all."""
    import threading

    env = {**os.environ, "BENCH_WORK_MS": str(work_ms), "CLOUD_ML_TRIAL_ID": "0"}
    env.pop("BENCH_TIMES", None)
    todo = list(range(n_trials))
    lock = threading.Lock()

    def lane() -> None:
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            subprocess.run([sys.executable, "-c", TRIAL, "--x=0.5"], env=env, check=True)

    t0 = time.monotonic()
    threads = [threading.Thread(target=lane) for _ in range(n_lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return n_trials / (time.monotonic() - t0) * 60


# --- storage cost per trial, in process -------------------------------------------------------------
def storage_cycle_ms(storage: str | None, n: int) -> float:
    """Median milliseconds of :func:`run_cycles` on a job of ``n`` trials."""
    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        job_id = f"bench-{uuid.uuid4().hex[:10]}"
        h = create(workdir, storage, job_id, spec_dict(n, n, 0, os.path.join(workdir, "t")))
        return statistics.median(run_cycles(h, n, workdir))


# --- issue 27: statements per trial, cost per trial by job size, resume, 4 workers vs 1 -------------------
@contextlib.contextmanager
def counted_statements() -> Iterator[dict[str, int]]:
    """Counts SQL statements sent by any SQLAlchemy engine of this process, and whole-study reads
    (Optuna's ``RDBStorage._get_trials``), while the block runs."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    counts = {"statements": 0, "study_reads": 0}

    def on_statement(*_args: object) -> None:
        counts["statements"] += 1

    from trials.study.storage import RetryingRDBStorage

    whole = RetryingRDBStorage._get_trials

    def counted(self, *args, **kwargs):
        counts["study_reads"] += 1
        return whole(self, *args, **kwargs)

    event.listen(Engine, "before_cursor_execute", on_statement)
    RetryingRDBStorage._get_trials = counted
    try:
        yield counts
    finally:
        RetryingRDBStorage._get_trials = whole
        event.remove(Engine, "before_cursor_execute", on_statement)


def worker_statements(url: str, n_trials: int) -> dict[str, float]:
    """One ``trials worker`` (in this process) runs a job of ``n_trials`` no-op trials: SQL statements
    per trial, whole-study reads, wall per trial."""
    from trials.cli import main as trials_main

    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        job_id = f"bench-{uuid.uuid4().hex[:10]}"
        times = times_file(workdir)
        create(workdir, url, job_id, spec_dict(n_trials, 1, 0, times))
        t0 = time.perf_counter()
        with counted_statements() as counts, contextlib.redirect_stdout(io.StringIO()):
            code = trials_main(["worker", job_id, "--storage", url, "--root", os.path.join(workdir, "jobs"), "--quiet"])
        wall = time.perf_counter() - t0
        with open(times, encoding="utf-8") as f:
            done = len(f.read().splitlines())
        if code != 0 or done != n_trials:
            raise RuntimeError(f"worker exited {code} after {done} of {n_trials} trials")
    return {"per_trial": counts["statements"] / n_trials, "study_reads": counts["study_reads"],
            "wall_per_trial_ms": wall / n_trials * 1000}


def cycle_ms_by_size(url: str, small: int, large: int) -> tuple[float, float]:
    """Median milliseconds of the job loop's storage calls for one trial (:func:`run_cycles`, a
    worker's claim with its lease), in a job of ``small`` and one of ``large`` trials, interleaved
    (the small job's cycles spread among the large one's: the machine's noise hits both alike)."""
    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        jobs = [create(os.path.join(workdir, str(n)), url, f"bench-{uuid.uuid4().hex[:10]}",
                       spec_dict(n, 1, 0, os.path.join(workdir, "t"))) for n in (small, large)]
        samples: list[list[float]] = [[], []]
        every = large // small
        for i in range(large):
            samples[1] += run_cycles(jobs[1], 1, workdir)
            if i % every == 0 and len(samples[0]) < small:
                samples[0] += run_cycles(jobs[0], 1, workdir)
    return statistics.median(samples[0]), statistics.median(samples[1])


def tune_ms_per_trial(url: str, n_trials: int) -> float:
    """``trials.tune`` on PostgreSQL with an objective that returns at once: the loop's cost per trial."""
    import dataclasses

    import trials
    from trials.spec.load import parse_spec

    @dataclasses.dataclass
    class Config:
        x: float = 0.5

    def objective(config: Config, ctx: trials.TrialContext) -> None:
        ctx.report(1, score=config.x)

    spec = parse_spec({"studySpec": spec_dict(1, 1, 0, "")["studySpec"], "maxTrialCount": n_trials,
                       "parallelTrialCount": 1}, source="<benchmark>")
    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        t0 = time.perf_counter()
        result = trials.tune(objective, spec, Config, storage=url, directory=workdir, seed=1,
                             job_id=f"bench-{uuid.uuid4().hex[:10]}")
        wall = time.perf_counter() - t0
    if len(result.trials) != n_trials:
        raise RuntimeError(f"expected {n_trials} trials, got {len(result.trials)}")
    return wall / n_trials * 1000


def resume_to_first_trial_s(url: str, n_trials: int) -> float:
    """``trials resume`` of a job of ``n_trials`` whose first half finished: seconds from the
    command's start to its first trial's start."""
    from trials.records import JobState

    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        job_id = f"bench-{uuid.uuid4().hex[:10]}"
        times = times_file(workdir)
        h = create(workdir, url, job_id, spec_dict(n_trials, 1, 0, times))
        run_cycles(h, n_trials // 2, workdir)
        meta = h.store.meta()
        h.store.write_meta(replace(meta, state=JobState.CANCELLED), since=meta)
        t0 = time.time()
        proc = subprocess.Popen(trials_cmd("resume", job_id, "--storage", url, "--root", os.path.join(workdir, "jobs"),
                                           "--quiet"), cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while not os.path.exists(times) or not os.path.getsize(times):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"resume ended ({proc.returncode}) before its first trial")
                time.sleep(0.01)
            with open(times, encoding="utf-8") as f:
                first = min(float(line.split()[1]) for line in f.read().splitlines())
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=120)
    return first - t0


def sleeping_workers(url: str, n_workers: int, n_trials: int, sleep_ms: float) -> tuple[float, float, float]:
    """For ``n_workers`` workers on trials that sleep: (trials/second from the first trial's start
    to the last one's end; the same once every worker runs: the sum of each worker's rate between
    its first and last trial starts; median seconds from a worker's launch to its first trial)."""
    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        job_id = f"bench-{uuid.uuid4().hex[:10]}"
        times = times_file(workdir)
        h = create(workdir, url, job_id, spec_dict(n_trials, n_workers, 0, times, sleep_ms=sleep_ms))
        launched = time.time()
        run_workers(workdir, url, job_id, n_workers)
        with open(times, encoding="utf-8") as f:
            rows = [line.split() for line in f.read().splitlines()]
        worker_of = {str(n + 1): a["worker"] for n, a in h.store.trial_attrs("worker").items()}
    if len(rows) != n_trials:
        raise RuntimeError(f"expected {n_trials} trials to run, {len(rows)} did")
    starts, ends = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    by_worker: dict[str, list[float]] = {}
    for r in rows:
        by_worker.setdefault(worker_of[r[0]], []).append(float(r[1]))
    steady = sum((len(s) - 1) / (max(s) - min(s)) for s in by_worker.values() if len(s) > 1)
    firsts = [min(s) for s in by_worker.values()]
    return (n_trials / (max(ends) - min(starts)), steady, statistics.median(t - launched for t in firsts))


def report_issue27(url: str, *, quick: bool) -> dict[str, float]:
    """Print issue 27's PostgreSQL figures, each with its baseline from this run; returns them."""
    small, large = (20, 200) if quick else (100, 1000)
    mid = 50 if quick else 300  # (a trial process each: ~0.3 s a trial here)
    out: dict[str, float] = {}
    s_small, s_large = worker_statements(url, small), worker_statements(url, mid)
    print(f"SQL statements per trial, one worker, no-op trials: {s_small['per_trial']:.1f} at {small} trials, "
          f"{s_large['per_trial']:.1f} at {mid} (goal <= 15; 88 before issue 27); whole-study reads "
          f"{s_small['study_reads']} and {s_large['study_reads']} per job (a constant, not one per trial)")
    out.update(statements_per_trial=s_large["per_trial"], study_reads=s_large["study_reads"])
    print(f"  (wall per trial of those jobs, trial processes included: {s_small['wall_per_trial_ms']:.0f} ms "
          f"at {small}, {s_large['wall_per_trial_ms']:.0f} ms at {mid})")
    c_small, c_large = cycle_ms_by_size(url, small, large)
    print(f"a worker's storage calls per trial (median, interleaved): {c_small:.1f} ms in a job of {small} trials, "
          f"{c_large:.1f} ms in one of {large} (x{c_large / c_small:.2f}; flat is within 0.8-1.2)")
    t_small, t_large = tune_ms_per_trial(url, small), tune_ms_per_trial(url, large)
    print(f"whole job loop per trial (trials.tune on PostgreSQL, instant objective, wall / trials): "
          f"{t_small:.1f} ms at {small} trials, {t_large:.1f} ms at {large} (x{t_large / t_small:.2f})")
    out.update(cycle_ms_small=c_small, cycle_ms_large=c_large, ms_per_trial_small=t_small, ms_per_trial_large=t_large)
    r_small, r_large = resume_to_first_trial_s(url, small), resume_to_first_trial_s(url, large)
    print(f"resume to its first trial (half the trials finished): {r_large:.2f} s at {large} trials, "
          f"{r_small:.2f} s at {small} (x{r_large / r_small:.2f})")
    out.update(resume_small_s=r_small, resume_large_s=r_large)
    n_sleep = 8 if quick else 32
    one, steady_one, start_one = sleeping_workers(url, 1, n_sleep, 1000)
    four, steady_four, start_four = sleeping_workers(url, 4, n_sleep, 1000)
    print(f"{n_sleep} trials sleeping 1 s, start-up excluded (each worker's rate from its first trial on, summed): "
          f"4 workers {steady_four:.2f} trials/s vs 1 worker {steady_one:.2f} (x{steady_four / steady_one:.2f}; "
          f"goal >= 3.5)")
    print(f"  first trial start to last trial end: 4 workers {four:.2f}/s vs 1 {one:.2f}/s (x{four / one:.2f}); "
          f"start-up, launch to first trial (median): {start_four:.2f} s (4 workers at once), {start_one:.2f} s (1)")
    out.update(four_vs_one=steady_four / steady_one, four_vs_one_window=four / one, startup_one_s=start_one,
               startup_four_s=start_four)
    return out


def run_cycles(h, n: int, workdir: str) -> list[float]:
    """The job loop's storage calls for ``n`` trials, in process (claim, attributes, three steps,
    the end, the lease); returns each cycle's milliseconds."""
    from trials.controller.jobs import run as job_run
    from trials.timefmt import rfc3339

    shared = getattr(h, "bench_shared", None) or job_run.shared_job(h, stale_after_s=30)
    h.bench_shared = shared  # (one worker's view for every cycle of this job)
    store, study = h.store, h.job.study
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        with store.batch():
            claimed = shared.claim(study, cap=n) if shared else store.claim(study)
            store.set_trial_attrs(claimed.storage_id, state="ACTIVE", trial_id=claimed.trial_id,
                                  worker="bench", trial_dir=workdir, start_time=rfc3339(time.time()))
        for step in range(1, 4):
            store.report(claimed.storage_id, step, 0.1 * step)
        with store.batch():
            store.set_trial_attrs(claimed.storage_id, measurements=[{"step": 3, "metrics": {"score": 0.3}}],
                                  attempts=[{"replica": "workerpool0-0", "exitStatus": 0}],
                                  end_time=rfc3339(time.time()), state="SUCCEEDED",
                                  final_measurement={"step": 3, "metrics": {"score": 0.3}})
            store.complete(claimed.number, [0.3])
            if shared:
                shared.release(claimed.storage_id)
        samples.append((time.perf_counter() - t) * 1000)
    return samples


# --- end to end per trial ---------------------------------------------------------------------------
def lane_gap_s(url: str | None, n_trials: int) -> float:
    """Median gap between consecutive trial starts on one lane (no-op trials)."""
    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        job_id = f"bench-{uuid.uuid4().hex[:10]}"
        times = times_file(workdir)
        spec = spec_dict(n_trials, 1, 0, times)
        if url is None:
            import json

            path = os.path.join(workdir, "spec.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(spec, f)
            cmd = trials_cmd("sweep", path, "--job-id", job_id, "--quiet", "--seed", "1")
        else:
            create(workdir, url, job_id, spec)
            cmd = trials_cmd("worker", job_id, "--storage", url, "--root", os.path.join(workdir, "jobs"), "--quiet")
        subprocess.run(cmd, cwd=workdir, check=True, stdout=subprocess.DEVNULL, timeout=600)
        with open(times, encoding="utf-8") as f:
            starts = sorted(float(line.split()[1]) for line in f.read().splitlines())
        return statistics.median(b - a for a, b in zip(starts, starts[1:], strict=False))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale_out", description=__doc__.splitlines()[0])
    p.add_argument("--url", default=DEFAULT_URL, help="PostgreSQL URL (default: the local test server)")
    p.add_argument("--trials", type=int, default=24, help="trials per throughput run (default 24)")
    p.add_argument("--work-ms", type=float, default=500, help="CPU work per trial (default 500 ms)")
    p.add_argument("--quick", action="store_true", help="fewer trials everywhere")
    p.add_argument("--only-issue27", action="store_true", help="only issue 27's PostgreSQL figures")
    a = p.parse_args(argv)
    if a.only_issue27:
        report_issue27(a.url, quick=a.quick)
        return 0
    n_trials = 8 if a.quick else a.trials
    n_cycle = 15 if a.quick else 40
    n_lane = 8 if a.quick else 20
    from trials.storage_url import redact

    print(f"scale-out on {redact(a.url)}; {os.cpu_count()} CPU cores; trial = {a.work_ms:g} ms CPU + one report")
    print(f"  (floor: the same trial processes on N lanes, no controller, no storage; load average "
          f"{os.getloadavg()[0]:.1f} at start)")
    rates = {}
    for n in (1, 2, 4):
        rates[n] = throughput(a.url, n, n_trials, a.work_ms)
        floor = floor_rate(n, n_trials, a.work_ms)
        print(f"  {n} worker(s): {rates[n]:6.1f} trials/min  "
              f"({n_trials} trials, x{rates[n] / rates[1]:.2f} vs 1 worker;"
              f" floor {floor:.1f}/min, {rates[n] / floor:.0%} of it)")
    journal_ms = storage_cycle_ms(None, n_cycle)
    pg_ms = storage_cycle_ms(a.url, n_cycle)
    print(f"storage calls per trial (median of {n_cycle}): journal {journal_ms:.1f} ms, "
          f"PostgreSQL {pg_ms:.1f} ms (x{pg_ms / journal_ms:.1f}, +{pg_ms - journal_ms:.1f} ms)")
    gap_journal = lane_gap_s(None, n_lane)
    gap_pg = lane_gap_s(a.url, n_lane)
    print(f"one lane, no-op trials, start to start (median of {n_lane - 1}): journal sweep "
          f"{gap_journal * 1000:.0f} ms, PostgreSQL worker {gap_pg * 1000:.0f} ms "
          f"(x{gap_pg / gap_journal:.2f}, +{(gap_pg - gap_journal) * 1000:.0f} ms per trial)")
    report_issue27(a.url, quick=a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())

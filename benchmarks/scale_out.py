"""Scale-out on PostgreSQL: trials/minute for 1, 2 and 4 workers, and the storage's per-trial cost.

``python -m benchmarks.scale_out [--url URL] [--trials N] [--work-ms MS] [--quick]``

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
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

DEFAULT_URL = os.environ.get("TRIALS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

# The trial: a CPU busy loop of WORK_MS, one report, and its start/end appended to BENCH_TIMES.
TRIAL = r"""
import os, sys, time
t0 = time.time()
import hypertune
work = float(os.environ.get("BENCH_WORK_MS", "0")) / 1000
end = time.process_time() + work
while time.process_time() < end:
    pass
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=float(sys.argv[-1].split("=")[1]), global_step=1)
path = os.environ.get("BENCH_TIMES")
if path:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{os.environ['CLOUD_ML_TRIAL_ID']} {t0:.6f} {time.time():.6f}\n".encode())
    os.close(fd)
"""


def spec_dict(n_trials: int, parallel: int, work_ms: float, times: str) -> dict:
    return {
        "studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}],
                      "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}],
                      "algorithm": "RANDOM_SEARCH"},
        "maxTrialCount": n_trials, "parallelTrialCount": parallel,
        "trialJobSpec": {"workerPoolSpecs": [{
            "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
            "containerSpec": {"imageUri": "local", "command": ["python", "-c", TRIAL],
                              "env": [{"name": "BENCH_WORK_MS", "value": str(work_ms)},
                                      {"name": "BENCH_TIMES", "value": times}]}}]},
    }


def create(workdir: str, storage: str | None, job_id: str, spec: dict):
    os.makedirs(os.path.join(workdir, "launch"), exist_ok=True)  # times.txt stays outside the trials' view
    from trials.controller.jobs import registry
    from trials.spec.load import parse_spec

    job = parse_spec(spec, source="<benchmark>")
    return registry.create_job(job, root=os.path.join(workdir, "jobs"), job_id=job_id, spec_path=None,
                                 storage=storage, base_output_dir=None, project_number=None,
                                 local_command=None, cwd=os.path.join(workdir, "launch"), seed=1)


def trials_cmd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "trials", *argv]


# --- throughput ------------------------------------------------------------------------------------
def throughput(url: str, n_workers: int, n_trials: int, work_ms: float) -> float:
    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        job_id = f"bench-{uuid.uuid4().hex[:10]}"
        times = os.path.join(workdir, "times.txt")
        create(workdir, url, job_id, spec_dict(n_trials, n_workers, work_ms, times))
        t0 = time.monotonic()
        procs = [subprocess.Popen(trials_cmd("worker", job_id, "--storage", url, "--parallel-trial-count", "1",
                                             "--root", os.path.join(workdir, "jobs"), "--quiet"),
                                  cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for _ in range(n_workers)]
        for p in procs:
            _out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"worker exited {p.returncode}: {err.strip()[-500:]}")
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
    from trials.timefmt import rfc3339

    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        job_id = f"bench-{uuid.uuid4().hex[:10]}"
        h = create(workdir, storage, job_id, spec_dict(n, n, 0, os.path.join(workdir, "t")))
        from trials.controller.jobs import run as job_run

        shared = job_run.shared_job(h, stale_after_s=30)
        store, study = h.store, h.job.study
        samples = []
        for _ in range(n):
            t = time.perf_counter()
            claimed = shared.claim(study, cap=n) if shared else store.claim(study)
            store.set_trial_attrs(claimed.storage_id, state="ACTIVE", trial_id=claimed.trial_id,
                                  worker="bench", trial_dir=workdir, start_time=rfc3339(time.time()))
            for step in range(1, 4):
                store.report(claimed.storage_id, step, 0.1 * step)
            if shared:
                shared.owns(claimed.storage_id)
            store.set_trial_attrs(claimed.storage_id, measurements=[{"step": 3, "metrics": {"score": 0.3}}],
                                  attempts=[{"replica": "workerpool0-0", "exitStatus": 0}],
                                  end_time=rfc3339(time.time()), state="SUCCEEDED",
                                  final_measurement={"step": 3, "metrics": {"score": 0.3}})
            store.complete(claimed.number, [0.3])
            if shared:
                shared.release(claimed.storage_id)
            samples.append((time.perf_counter() - t) * 1000)
        return statistics.median(samples)


# --- end to end per trial ---------------------------------------------------------------------------
def lane_gap_s(url: str | None, n_trials: int) -> float:
    """Median gap between consecutive trial starts on one lane (no-op trials)."""
    with tempfile.TemporaryDirectory(prefix="scale-out-") as workdir:
        job_id = f"bench-{uuid.uuid4().hex[:10]}"
        times = os.path.join(workdir, "times.txt")
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
    a = p.parse_args(argv)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-replica cost of the container view (issue 13): replica starts with and without the sandbox.

Each start goes through ``spawn.start_replica`` / ``sandbox.start_sandboxed`` exactly as the job
loop starts a replica, and is timed until the replica has exited and been reaped. Six ways, run
interleaved in one process so machine noise hits them alike:

- ``preexec fork (before)``: ``start_replica`` as it was (a Python ``preexec_fn`` for
  PR_SET_PDEATHSIG, which forces a full fork of the controller), no cgroup;
- ``shim``: the exec shim only (PR_SET_PDEATHSIG, a fresh cgroup joined): what every replica pays now;
- ``shim + sandbox``: the shim plus the whole view (namespaces, the host's file system copy-on-write,
  hidden job folder, /gcs); the removal of its layers once it ended (issue 46: on the job's own thread,
  off the loop) is timed apart, as the last row;
- the same three with ``python -c pass`` as the trainer: the ratio a real trial start sees.

The goal: ``sandbox`` − ``shim`` < 10 ms per replica start.

Then the two ``true`` starts again while the other CPUs are busy (one busy-looping process per CPU
but one: a job whose other slots are training): what a start costs in a job with several slots. (The
shim starts each child on the forking CPU, ``shim.c``'s ``stay_here``: in the controller benchmark's
2-slot sweep that halved the launch's wait for the trainer's exec; this lane shows no such change.)

Last, the two ``true`` starts with dirty data on the file system under the trial's folder (a file of
``DIRTY_MB`` written again before each start, never synced: another trial's checkpoint being written):
an overlay's unmount used to run syncfs on that whole file system, so a replica's end waited for the
write-back of all of it; the overlay is ``volatile`` now (``shim.c``) and the two should cost the same.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks import report

GOAL_MS = 10.0
DIRTY_MB = 256


def _before(argv: list[str], log: str, cwd: str) -> None:
    """The start as it was: ``start_replica`` without the shim (a ``preexec_fn`` fork), no cgroup."""
    from trials.controller.process import shim, spawn

    def unavailable() -> str:
        raise shim.ShimUnavailable("benchmark: the start before the shim")

    real = shim.shim_path
    shim.shim_path = unavailable  # type: ignore[assignment]
    try:
        r = spawn.start_replica(argv, env=dict(os.environ), cwd=cwd, stdout_path=log, stderr_path=log,
                                  name="workerpool0-0")
    finally:
        shim.shim_path = real  # type: ignore[assignment]
    r._proc.wait()
    r.close()


def _layers() -> dict[str, Any]:
    """What removes a start's layers when it ends (issue 46), where there is one: a run of an earlier
    commit's sandbox (before issue 46 every layer was kept) gets none."""
    try:
        from trials.controller.process.layers import Layers
    except ImportError:
        return {}
    return {"layers": Layers()}


def _write_unsynced(path: str, mb: int) -> None:
    """``mb`` MiB of dirty page cache in ``path`` (rewritten in place: dirty again, never synced)."""
    block = b"\xa5" * (1 << 20)
    with open(path, "r+b" if os.path.exists(path) else "wb") as f:
        for _ in range(mb):
            f.write(block)


def _interleaved(ways: dict[str, Any], times: dict[str, list[float]], repeats: int, trial: str) -> None:
    for i in range(repeats + 2):
        for label, way in ways.items():
            t = time.perf_counter()
            untimed = way() or 0.0  # (what a way times apart)
            if i >= 2:  # two warm-ups
                times[label].append(time.perf_counter() - t - untimed)
        shutil.rmtree(os.path.join(trial, "sandbox"), ignore_errors=True)


def run(*, quick: bool = False, out_dir: str | None = None) -> dict[str, Any]:
    from trials.controller.process import sandbox

    repeats = 5 if quick else 41
    work = tempfile.mkdtemp(prefix="bench-sandbox-")
    try:
        launch, job = os.path.join(work, "launch"), os.path.join(work, "launch", "trials-jobs", "bench")
        trial = os.path.join(job, "1")
        os.makedirs(trial)
        view = sandbox.detect(launch_dir=launch, job_dir=job, gcs_root=os.path.join(job, "gcs"))
        if not view.on:
            print(f"sandbox part skipped: {view.reason}")
            return {"skipped": view.reason}
        plain = sandbox.off(view.launch_dir, view.job_dir, view.gcs_root, "benchmark")
        true = shutil.which("true") or "/bin/true"
        log = os.path.join(trial, "workerpool0-0.stdout.log")

        kept = _layers()
        removals: list[float] = []

        def start(box: sandbox.Sandbox, argv: list[str]) -> float:
            r = sandbox.start_sandboxed(box, argv, env=dict(os.environ), trial_dir=trial, outputs=[],
                                        replica="workerpool0-0", stdout_path=log, stderr_path=log,
                                        name="workerpool0-0", **kept)
            r._proc.wait()
            r.close()
            if kept and box.on:  # the start's layers removed by the job's own thread: timed apart
                t = time.perf_counter()
                kept["layers"].drain()
                removals.append(time.perf_counter() - t)
                return removals[-1]  # (not the start's)
            return 0.0

        ways = {
            "true: preexec fork (before)": lambda: _before([true], log, launch),
            "true: shim": lambda: start(plain, [true]),
            "true: shim + sandbox": lambda: start(view, [true]),
            "python -c pass: preexec fork (before)": lambda: _before([sys.executable, "-c", "pass"], log, launch),
            "python -c pass: shim": lambda: start(plain, [sys.executable, "-c", "pass"]),
            "python -c pass: shim + sandbox": lambda: start(view, [sys.executable, "-c", "pass"]),
        }
        times: dict[str, list[float]] = {label: [] for label in ways}
        _interleaved(ways, times, repeats, trial)
        if removals:
            times["layers removed after a sandboxed start (the job's thread)"] = removals[2 * 2:]  # (warm-ups)
        busy_ways = {f"{label}, other CPUs busy": ways[label] for label in ("true: shim", "true: shim + sandbox")}
        n_busy = max(len(os.sched_getaffinity(0)) - 1, 1)
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n_busy)]
        try:
            time.sleep(0.2)
            times.update({label: [] for label in busy_ways})
            _interleaved(busy_ways, times, repeats, trial)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
        dirty_mb = 16 if quick else DIRTY_MB
        dirty_path = os.path.join(work, "dirty.bin")

        dirty_ways = {f"{label}, {dirty_mb} MB dirty": ways[label] for label in ("true: shim", "true: shim + sandbox")}
        times.update({label: [] for label in dirty_ways})
        for i in range(min(repeats, 9) + 1):
            for label, way in dirty_ways.items():
                _write_unsynced(dirty_path, dirty_mb)  # dirty again before each start, untimed
                t = time.perf_counter()
                untimed = way() or 0.0
                if i >= 1:  # one warm-up
                    times[label].append(time.perf_counter() - t - untimed)
            shutil.rmtree(os.path.join(trial, "sandbox"), ignore_errors=True)
        os.unlink(dirty_path)  # never written back: gone with its pages
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {label: statistics.median(v) * 1000 for label, v in times.items()}
    cost = med["true: shim + sandbox"] - med["true: shim"]
    ratio = med["python -c pass: shim + sandbox"] / med["python -c pass: shim"]
    busy_cost = med["true: shim + sandbox, other CPUs busy"] - med["true: shim, other CPUs busy"]
    dirty = [label for label in med if label.endswith("MB dirty")]
    dirty_cost = med[dirty[1]] - med[dirty[0]]
    data = {"quick": quick, "repeats": repeats, "median_ms": med,
            "sandbox_cost_ms": cost, "python_start_ratio": ratio, "sandbox_cost_busy_ms": busy_cost,
            "sandbox_cost_dirty_ms": dirty_cost,
            "goals": {f"sandbox cost < {GOAL_MS} ms per replica start": cost < GOAL_MS}}
    path = report.write_result("sandbox", data, out_dir=out_dir)
    rows = [[label, value, min(times[label]) * 1000] for label, value in med.items()]
    print(report.table(f"Replica start until reaped: median of {repeats} interleaved runs",
                       ["start", "median ms", "min ms"], rows))
    print(f"sandbox cost per replica start: {cost:.2f} ms ({report.verdict(cost < GOAL_MS)} < {GOAL_MS} ms); "
          f"python -c pass with/without the sandbox: x{ratio:.2f}; with the other CPUs busy: {busy_cost:.2f} ms; "
          f"with {dirty[0].rsplit(', ', 1)[1]} on the file system: {dirty_cost:.2f} ms")
    print(f"results: {path}")
    return data

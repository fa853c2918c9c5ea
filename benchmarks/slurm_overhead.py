"""Part 11: ``trials sweep --runtime slurm`` against the same trials submitted to Slurm by hand.

A real two-node test cluster (``tests/slurm/slurmkit.py``: one CPU per node) in a temp folder, and in
one run, interleaved:

- baseline: the N trials of ``trainers/argparse_tiny.py`` (argparse + hypertune, a few 50 ms epochs),
  each its own ``sbatch`` job whose script runs the trainer and then writes its exit status to a file
  (what a user writes without us, Slurm's defaults), its end seen by that file polled every 20 ms (not
  ``sbatch --wait``, whose own poll of the job's state sleeps 2 s and more: that would time Slurm's
  client, not the job), two at a time (one per node);
- a stricter one: each trial a blocking ``srun python train.py`` (its own allocation and one step,
  back as soon as the step ended: no polling), two at a time;
- sweep: ``trials sweep SPEC --runtime slurm -- python argparse_tiny.py`` of the same N trials with
  ``parallelTrialCount: 2``, timed from outside and through :mod:`benchmarks.controller_startup`'s
  stamps, so the controller's start-up (interpreter, imports, job creation, the shared-folder check
  on a node, until its first ``sbatch`` answered) is told apart from its per-trial cost.

Goal: the sweep's wall time per trial <= 1.10x the baseline's, with and without the start-up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from benchmarks import controller_overhead as co
from benchmarks import report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = os.path.join(REPO, "benchmarks", "trainers", "argparse_tiny.py")
SLURMKIT = os.path.join(REPO, "tests", "slurm")
PART = "slurm"
GOAL_RATIO = 1.10
SLOTS = 2
# the sweep's steps, stamped as controller_startup stamps part 2's (label -> (module, attribute path))
SLURM_STEPS = {
    "shared-folder check (srun on a node)": ("trials.controller.slurm.preflight", "check_shared"),
    "sbatch (one submission)": ("trials.controller.slurm.commands", "Slurm.submit"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    n_trials: int = 20
    epochs: int = 4
    work_ms: float = 50.0
    repeats: int = 3


FULL = Sizes()
QUICK = Sizes(n_trials=2, epochs=2, work_ms=10.0, repeats=1)


def trainer_argv(sizes: Sizes) -> list[str]:
    return [report.PYTHON, TRAINER, f"--epochs={sizes.epochs}", f"--work-ms={sizes.work_ms:g}"]


def _params(i: int) -> tuple[float, float]:
    return ((i * 0.37) % 1.0, (i * 0.61) % 1.0)


POLL_S = 0.02  # the baseline lanes' look at a trial's done file


def baseline_script(sizes: Sizes, i: int, workdir: str, srun: str, times_path: str) -> str:
    """The batch script of trial ``i`` as a user writes it (Slurm's defaults: the submitter's environment):
    the trainer, then its exit status into ``done-<i>`` (the lane's sign that the trial ended)."""
    import shlex

    x, y = _params(i)
    env = {"CLOUD_ML_TRIAL_ID": str(i + 1), "CLOUD_ML_HP_METRIC_FILE": os.path.join(workdir, f"{i + 1}.metrics"),
           "BENCH_TIMES": times_path}
    del srun
    return "\n".join([
        "#!/bin/sh", f"#SBATCH --job-name=bench-baseline-{i + 1}", "#SBATCH --ntasks=1",
        f"#SBATCH --output={os.path.join(workdir, 'slurm-%j.out')}",
        *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
        shlex.join([*trainer_argv(sizes), f"--x={x!r}", f"--y={y!r}"]),
        f"echo $? > {shlex.quote(done_path(workdir, i))}", ""])


def done_path(workdir: str, i: int) -> str:
    return os.path.join(workdir, f"done-{i + 1}")


def srun_argv(sizes: Sizes, i: int, srun: str) -> list[str]:
    x, y = _params(i)
    return [srun, "-N1", "-n1", f"--job-name=bench-srun-{i + 1}", "--export=ALL", *trainer_argv(sizes),
            f"--x={x!r}", f"--y={y!r}"]


def run_baseline(sizes: Sizes, env: dict[str, str], *, how: str = "sbatch") -> dict[str, Any]:
    """The N trials as ``sbatch`` jobs whose end each lane sees by their ``done`` file, polled every
    ``POLL_S`` (``sbatch --wait`` polls the job's state every 2 s and more: it would time Slurm's client, not
    the job), or (``how="srun"``) as blocking ``srun`` commands; SLOTS lanes each submitting its next
    trial when its last ended."""
    workdir = tempfile.mkdtemp(prefix="bench-slurm-base-")
    times_path = os.path.join(workdir, "times.txt")
    srun = shutil.which("srun", path=env.get("PATH")) or "srun"
    next_index = iter(range(sizes.n_trials))
    lock = threading.Lock()
    failures: list[str] = []

    def lane() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            if how == "srun":
                trial_env = dict(env, CLOUD_ML_TRIAL_ID=str(i + 1), BENCH_TIMES=times_path,
                                 CLOUD_ML_HP_METRIC_FILE=os.path.join(workdir, f"{i + 1}.metrics"))
                done = subprocess.run(srun_argv(sizes, i, srun), env=trial_env, capture_output=True, check=False,
                                      cwd=workdir)
            else:
                done = subprocess.run(["sbatch", "--parsable"], env=env, capture_output=True, check=False,
                                      input=baseline_script(sizes, i, workdir, srun, times_path).encode())
                end = time.monotonic() + 600
                while done.returncode == 0 and not os.path.exists(done_path(workdir, i)):
                    if time.monotonic() > end:
                        failures.append(f"trial {i + 1}: no end in 600 s")
                        break
                    time.sleep(POLL_S)
            if done.returncode != 0:
                failures.append(done.stderr.decode(errors="replace")[-500:])

    try:
        t = time.perf_counter()
        threads = [threading.Thread(target=lane) for _ in range(SLOTS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t
        if failures:
            raise RuntimeError(f"baseline: {len(failures)} sbatch job(s) failed: {failures[0]}")
        times = co.read_times(times_path)
        if len(times) != sizes.n_trials:
            raise RuntimeError(f"baseline: expected {sizes.n_trials} trial records, got {len(times)}")
        return {"wall_s": wall, "trainer_s": [e - s for s, e in times.values()]}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_sweep(sizes: Sizes, env: dict[str, str]) -> dict[str, Any]:
    """``trials sweep SPEC --runtime slurm`` of the N trials, timed from outside, with start-up stamps."""
    workdir = tempfile.mkdtemp(prefix="bench-slurm-sweep-")
    times_path = os.path.join(workdir, "times.txt")
    stamps_path = os.path.join(workdir, "stamps.json")
    try:
        spec = os.path.join(workdir, "spec.yaml")
        co.write_spec(spec, sizes.n_trials, SLOTS)
        cmd = [report.PYTHON, "-m", "benchmarks.slurm_overhead", "sweep", stamps_path, "sweep", spec,
               "--runtime", "slurm", "--root", os.path.join(workdir, "jobs"), "--job-id", "bench", "--seed", "0",
               "--sampler", "tpe", "--", *trainer_argv(sizes)]
        launch = os.path.join(workdir, "launch")
        os.makedirs(launch)
        child_env = dict(env, BENCH_TIMES=times_path, PYTHONPATH=REPO)
        spawned = time.time()
        t = time.perf_counter()
        proc = subprocess.run(cmd, env=child_env, cwd=launch, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(f"sweep failed ({proc.returncode}): {proc.stderr[-2000:]}")
        times = co.read_times(times_path)
        if len(times) != sizes.n_trials:
            raise RuntimeError(f"sweep: expected {sizes.n_trials} trial records, got {len(times)}")
        with open(stamps_path, encoding="utf-8") as f:
            stamps = json.load(f)
        return {"wall_s": wall, "trainer_s": [e - s for s, e in times.values()],
                **startup_parts(stamps, spawned), **co._sweep_latencies(os.path.join(workdir, "jobs"), "bench", times)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def missing() -> str | None:
    """Why the test cluster cannot start here (None: it can): ``slurmkit.missing()``."""
    if SLURMKIT not in sys.path:
        sys.path.insert(0, SLURMKIT)
    import slurmkit

    why: str | None = slurmkit.missing()
    return why


def startup_parts(stamps: dict[str, Any], spawned: float) -> dict[str, float]:
    """The controller's start-up: from its spawn until its first ``sbatch`` answered, and its parts."""
    steps = stamps["steps"]

    def first(label: str) -> tuple[float, float] | None:
        return next(((t0, t1) for name, t0, t1 in steps if name == label), None)

    submit = first("sbatch (one submission)")
    check = first("shared-folder check (srun on a node)")
    imported = first("import the CLI (trials.cli)")
    return {
        "startup_s": (submit[1] - spawned) if submit else float("nan"),
        "interpreter_s": stamps["first_line"] - spawned,
        "import_cli_s": (imported[1] - imported[0]) if imported else float("nan"),
        "shared_check_s": (check[1] - check[0]) if check else float("nan"),
        "first_sbatch_s": (submit[1] - submit[0]) if submit else float("nan"),
        "controller_cpu_s": stamps.get("cpu_s", float("nan")),
    }


def summarize(raw: dict[str, list[dict[str, Any]]], sizes: Sizes) -> dict[str, Any]:
    n = sizes.n_trials
    base = report.median(r["wall_s"] for r in raw["baseline"])
    sweep = report.median(r["wall_s"] for r in raw["sweep"])
    startup = report.median(r["startup_s"] for r in raw["sweep"])
    steady = report.median(r["wall_s"] - r["startup_s"] for r in raw["sweep"])
    parts = {k: report.median(r[k] for r in raw["sweep"])
             for k in ("interpreter_s", "import_cli_s", "shared_check_s", "first_sbatch_s", "controller_cpu_s")}
    srun = report.median(r["wall_s"] for r in raw.get("baseline_srun", []))
    out = {
        "baseline_s_per_trial": base / n, "baseline_srun_s_per_trial": srun / n,
        "sweep_s_per_trial": sweep / n, "sweep_steady_s_per_trial": steady / n,
        "ratio": sweep / base, "ratio_steady": steady / base,
        "ratio_srun": sweep / srun, "ratio_srun_steady": steady / srun,
        "startup_s": startup, "startup_parts_s": parts,
        "trainer_s": {m: report.median(t for r in raw[m] for t in r["trainer_s"]) for m in raw},
        "latency_s": {k: report.median(t for r in raw["sweep"] for t in r.get(k, []))
                      for k in ("child_start_s", "exit_to_finalized_s")},
    }
    out["goals"] = {
        f"sweep wall per trial <= {GOAL_RATIO}x sbatch (start-up included)": out["ratio"] <= GOAL_RATIO,
        f"sweep wall per trial <= {GOAL_RATIO}x sbatch (start-up excluded)": out["ratio_steady"] <= GOAL_RATIO,
    }
    return out


def render(summary: dict[str, Any], sizes: Sizes) -> str:
    title = (f"Slurm: {sizes.n_trials} trials x {sizes.epochs} epochs x {sizes.work_ms:g} ms, 2 at a time on "
             f"2 nodes (median of {sizes.repeats})")
    base, srun = summary["baseline_s_per_trial"], summary.get("baseline_srun_s_per_trial", float("nan"))
    rows = [["baseline: sbatch per trial, its end polled every 20 ms", base * 1000, 1.0, base / srun, ""],
            ["stricter: a blocking srun per trial", srun * 1000, srun / base, 1.0, ""],
            ["trials sweep --runtime slurm", summary["sweep_s_per_trial"] * 1000, summary["ratio"],
             summary["ratio_srun"], report.verdict(summary["ratio"] <= GOAL_RATIO)],
            ["  less its start-up", summary["sweep_steady_s_per_trial"] * 1000, summary["ratio_steady"],
             summary["ratio_srun_steady"], report.verdict(summary["ratio_steady"] <= GOAL_RATIO)]]
    text = report.table(title, ["mode", "wall ms per trial", "x sbatch", "x srun", f"goal <= {GOAL_RATIO}"],
                        rows)
    labels = {"interpreter_s": "interpreter start", "import_cli_s": "import the CLI",
              "shared_check_s": "shared-folder check (srun on a node)",
              "first_sbatch_s": "first sbatch", "controller_cpu_s": "controller CPU, whole job"}
    parts = [["START-UP (spawn to the first sbatch answered)", summary["startup_s"] * 1000]]
    parts += [[labels[k], v * 1000] for k, v in summary["startup_parts_s"].items()]
    parts += [[f"trainer process, {m} (median)", v * 1000] for m, v in summary["trainer_s"].items()]
    text += "\n" + report.table("The sweep's start-up and parts (median ms)", ["part", "ms"], parts)
    lat = summary.get("latency_s", {})
    names = {"child_start_s": "trial launched -> its trainer's first line (sbatch, job start, entry)",
             "exit_to_finalized_s": "trainer's end -> trial recorded (exit file seen)"}
    if lat:
        text += "\n" + report.table("Per trial, from the journal (median ms)", ["part", "ms"],
                                     [[names[k], v * 1000] for k, v in lat.items()])
    return text


def run(*, quick: bool = False, out_dir: str | None = None, sizes: Sizes | None = None) -> dict[str, Any]:
    why = missing()
    if why is not None:
        print(f"slurm part skipped: {why}")
        return {"skipped": why}
    import slurmkit

    sizes = sizes or (QUICK if quick else FULL)
    root = tempfile.mkdtemp(prefix="bench-slurm-cluster-")
    cluster = slurmkit.MiniCluster(slurmkit.Path(root)).start()
    try:
        env = cluster.env
        modes = ("baseline", "sweep", "baseline_srun")
        raw: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        for rep in range(sizes.repeats):  # interleaved against drift
            for mode in modes[rep % 3:] + modes[:rep % 3]:
                if mode == "sweep":
                    raw[mode].append(run_sweep(sizes, env))
                else:
                    raw[mode].append(run_baseline(sizes, env, how="srun" if mode == "baseline_srun" else "sbatch"))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    summary = summarize(raw, sizes)
    result = {"sizes": {k: getattr(sizes, k) for k in Sizes.__slots__}, "quick": quick, "summary": summary,
              "raw": raw}
    path = report.write_result(PART, result, out_dir=out_dir)
    print(render(summary, sizes))
    print(report.table("Goals", ["goal", "status"], [[k, report.verdict(v)] for k, v in summary["goals"].items()]))
    print(f"results: {path}")
    return result


def _sweep_main(argv: list[str]) -> int:
    """``python -m benchmarks.slurm_overhead sweep STAMPS trials-args...``: the sweep through
    controller_startup's stamps, with the Slurm steps stamped too."""
    from benchmarks import controller_startup

    controller_startup.STEPS.update(SLURM_STEPS)
    code = controller_startup.main(argv)
    controller_startup.exit_as_trials_does(code)
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["sweep"]:
        sys.exit(_sweep_main(sys.argv[2:]))
    sys.exit(run(quick="--quick" in sys.argv[1:]) and 0)

"""Start-up cost of a trial: the runtime's entrypoint against ``python -c "import hypertune"``.

Runs each command ``--repeats`` times, interleaved (so machine noise hits all alike), after
``--warmup`` runs that also write the bytecode caches, and prints medians, minimums and the ratio
to the hypertune import. The goal (issue 3) is a ratio <= 1.3 for the entrypoint.

    python benchmarks/trial_start.py [--repeats 21] [--check]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOOP = os.path.join(ROOT, "tests", "scripts", "noop_trial.py")
GOAL_RATIO = 1.3
REPORT_ONCE = '''"""One report through hypertune + metrics.jsonl, TensorBoard off."""
OPTIONS = {"tensorboard": False}


def objective(ctx):
    ctx.report(1, accuracy=0.5)
'''


def trials_run() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "trials-run")
    found = beside if os.path.exists(beside) else shutil.which("trials-run")
    if not found:
        raise SystemExit("trials-run is not installed: pip install -e .")
    return found


def commands(workdir: str) -> list[tuple[str, list[str], bool]]:
    """(label, argv, held to the goal)."""
    report_once = os.path.join(workdir, "report_once.py")
    with open(report_once, "w") as file:
        file.write(REPORT_ONCE)
    py, run = sys.executable, trials_run()
    return [
        ("python -c pass", [py, "-c", "pass"], False),
        ('python -c "import hypertune"', [py, "-c", "import hypertune"], False),
        ("python -m trials.runtime.entrypoint --help", [py, "-m", "trials.runtime.entrypoint", "--help"], True),
        ("trials-run <noop trial>", [run, NOOP], True),
        ("trials-run <one report, no TensorBoard>", [run, report_once], False),
    ]


def child_env(workdir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIP_", "CLOUD_ML_", "TRIALS_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env["TRIALS_OUTPUT_ROOT"] = os.path.join(workdir, "runs")
    env["TRIALS_LOG_FORMAT"] = "json"
    return env


def time_once(argv: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--check", action="store_true", help=f"exit 1 if a ratio > {GOAL_RATIO}")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trial-start-") as workdir:
        cmds = commands(workdir)
        env = child_env(workdir)
        times: dict[str, list[float]] = {label: [] for label, _, _ in cmds}
        for i in range(args.warmup + args.repeats):
            for label, cmd, _ in cmds:
                elapsed = time_once(cmd, env, workdir)
                if i >= args.warmup:
                    times[label].append(elapsed)
    base = statistics.median(times['python -c "import hypertune"'])
    print(f"{'command':44} {'median':>9} {'min':>9} {'x hypertune':>12}")
    failed = False
    for label, _, goal in cmds:
        median = statistics.median(times[label])
        ratio = median / base
        verdict = ""
        if goal:
            ok = ratio <= GOAL_RATIO
            failed |= not ok
            verdict = f"  goal <= {GOAL_RATIO}: {'ok' if ok else 'MISSED'}"
        print(f"{label:44} {median * 1e3:7.1f}ms {min(times[label]) * 1e3:7.1f}ms {ratio:11.2f}x"
              f"{verdict}")
    print(f"({args.repeats} interleaved runs each after {args.warmup} warm-up runs; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f})")
    return 1 if failed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())

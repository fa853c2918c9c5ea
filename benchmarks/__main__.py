"""``python -m benchmarks [PART ...] [--quick] [--out DIR]``: run the benchmark parts, print their tables."""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import time
from collections.abc import Sequence

# part name -> module (each has ``run(*, quick, out_dir)`` writing results/<part>.json)
PARTS = {
    "start": "benchmarks.trial_start",
    "controller": "benchmarks.controller_overhead",
    "search": "benchmarks.search_quality",
    "stopping": "benchmarks.early_stopping",
    "scale": "benchmarks.scale",
    "sandbox": "benchmarks.sandbox_start",
    "container": "benchmarks.container_start",
    "read": "benchmarks.read_scale",
    "suggest": "benchmarks.suggest_ahead",
    "slurm": "benchmarks.slurm_overhead",
    "combined": "benchmarks.combined",
    "warm": "benchmarks.warm_start",
}


def run_start(*, quick: bool, out_dir: str | None) -> dict:
    """Part 1 through the runtime's ``benchmarks/trial_start.py`` (its commands and timer), with results."""
    import statistics
    import tempfile

    from benchmarks import report, trial_start

    repeats, warmup = (3, 1) if quick else (21, 2)
    with tempfile.TemporaryDirectory(prefix="trial-start-") as workdir:
        cmds = trial_start.commands(workdir)
        env = trial_start.child_env(workdir)
        times: dict[str, list[float]] = {label: [] for label, _, _ in cmds}
        for i in range(warmup + repeats):  # interleaved, so machine noise hits every command alike
            for label, cmd, _ in cmds:
                elapsed = trial_start.time_once(cmd, env, workdir)
                if i >= warmup:
                    times[label].append(elapsed)
    base = statistics.median(times['python -c "import hypertune"'])
    rows, results = [], {}
    for label, _, goal in cmds:
        med = statistics.median(times[label])
        ok = med / base <= trial_start.GOAL_RATIO if goal else None
        results[label] = {"median_ms": med * 1000, "min_ms": min(times[label]) * 1000, "x_hypertune": med / base,
                          "goal": ok}
        rows.append([label, med * 1000, min(times[label]) * 1000, med / base,
                     "" if ok is None else report.verdict(ok)])
    goals = {f"{label} <= {trial_start.GOAL_RATIO}x import hypertune": r["goal"]
             for label, r in results.items() if r["goal"] is not None}
    data = {"quick": quick, "repeats": repeats, "commands": results, "goals": goals}
    path = report.write_result("start", data, out_dir=out_dir)
    print(report.table(f"Trial start: median of {repeats} interleaved runs",
                       ["command", "median ms", "min ms", "x import hypertune", f"goal <= {trial_start.GOAL_RATIO}"],
                       rows))
    print(f"results: {path}")
    return data


def run_part(name: str, *, quick: bool, out_dir: str | None) -> dict:
    if name == "start":
        return run_start(quick=quick, out_dir=out_dir)
    module = importlib.import_module(PARTS[name])
    run = getattr(module, "run", None)
    if run is not None:
        accepted = inspect.signature(run).parameters
        kwargs = {k: v for k, v in (("quick", quick), ("out_dir", out_dir)) if k in accepted}
        return run(**kwargs) or {}
    main = module.main  # a script-style module: main(argv) -> int
    argv = (["--quick"] if quick else []) + (["--out", out_dir] if out_dir else [])
    code = main(argv)
    if code:
        raise RuntimeError(f"{PARTS[name]}.main exited {code}")
    return {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("parts", nargs="*", choices=[*PARTS, []], metavar="PART",
                        help=f"any of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: a smoke run for CI")
    parser.add_argument("--out", help="directory for the <part>.json results (default benchmarks/results; "
                        "with --quick a new temporary directory)")
    parser.add_argument("--debug", action="store_true", help="stop at the first failing part with its traceback")
    args = parser.parse_args(argv)
    if args.quick and not args.out:
        import tempfile

        args.out = tempfile.mkdtemp(prefix="benchmarks-quick-")  # never overwrite the results of record
    parts = args.parts or list(PARTS)
    failed = []
    t0 = time.perf_counter()
    for name in parts:
        print(f"\n=== {name} ===", flush=True)
        t = time.perf_counter()
        try:
            run_part(name, quick=args.quick, out_dir=args.out)
        except Exception as err:  # noqa: BLE001 - one broken part must not hide the others
            failed.append(name)
            print(f"{name}: FAILED: {type(err).__name__}: {err}", file=sys.stderr)
            if args.debug:
                raise
        print(f"({name}: {time.perf_counter() - t:.0f} s)", flush=True)
    print(f"\nall parts: {time.perf_counter() - t0:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""``trials.tune``'s time per trial at a base revision and in this checkout, interleaved; prints the ratio.

``python -m benchmarks.tune_overhead [--base main] [--runs 5] [--trials 50] [--reports 5] [--stopping]``

Each run is a fresh process of this interpreter importing ``trials`` from one tree: the base
revision exported with ``git archive`` into a temporary folder, or this checkout. It warms up (a
3-trial job: imports, Optuna), then times one ``trials.tune`` of ``--trials`` trials of a trivial
objective reporting ``--reports`` steps (random search, so the sampler costs next to nothing; a
temporary job folder, removed before ``tune`` returns, as users get it). ``--stopping`` adds the median
stopping rule (the in-process backend then runs each objective in a thread that takes turns with the
loop). Runs alternate base / this checkout, so machine noise hits both alike; the medians of ``--runs``
runs each and their ratio are printed. No timing is asserted anywhere: the ratio is for reading.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPACE = """
metrics: {score: maximize}
parameters:
  x: {type: double, min: 0, max: 1}
algorithm: random
max_trial_count: 3
"""


def child(n_trials: int, n_reports: int, stopping: bool = False) -> dict[str, object]:
    """One timed run in this process (``--child``): seconds per trial, and which ``trials`` ran."""
    import dataclasses
    import time

    import trials
    from trials.spec.load import loads_spec

    @dataclasses.dataclass
    class Config:
        x: float = 0.5

    def objective(config: Config, ctx: trials.TrialContext) -> None:
        for step in range(1, n_reports + 1):
            ctx.report(step, score=config.x * step)

    spec = loads_spec(SPACE + ("stopping: {type: median}\n" if stopping else ""))
    trials.tune(objective, spec, Config, seed=0)  # warm-up: imports, Optuna, the first files
    start = time.perf_counter()
    result = trials.tune(objective, spec, Config, seed=0, max_trial_count=n_trials)
    elapsed = time.perf_counter() - start
    if len(result.trials) != n_trials:  # a broken tree must not look fast
        raise RuntimeError(f"{len(result.trials)} trials ran, not {n_trials}: {result!r}")
    return {"s_per_trial": elapsed / n_trials, "trials": os.path.dirname(os.path.abspath(trials.__file__))}


def export(ref: str, into: str) -> str:
    """The ``trials`` package of ``ref`` in a folder of ``into`` (read from git: the checkout is untouched)."""
    tar_path = os.path.join(into, "base.tar")
    with open(tar_path, "wb") as out:
        subprocess.run(["git", "-C", REPO, "archive", ref, "trials"], stdout=out, check=True)
    root = os.path.join(into, "base")
    with tarfile.open(tar_path) as tar:
        tar.extractall(root)  # our own repository's archive
    return root


def run_once(tree: str, n_trials: int, n_reports: int, stopping: bool) -> float:
    """Seconds per trial of one run of ``tree`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(n_trials), str(n_reports),
                          *(["--stopping"] if stopping else [])],
                         env=env, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    data = json.loads(out.stdout.strip().splitlines()[-1])
    if not str(data["trials"]).startswith(os.path.abspath(tree)):  # the tree asked for, not an installed one
        raise RuntimeError(f"the run imported trials from {data['trials']}, not from {tree}")
    return float(data["s_per_trial"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tune_overhead", description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="main", help="the git revision to compare with (default: main)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each tree (default: 5)")
    parser.add_argument("--trials", type=int, default=50, help="trials per run (default: 50)")
    parser.add_argument("--reports", type=int, default=5, help="reports per trial (default: 5)")
    parser.add_argument("--stopping", action="store_true", help="with the median stopping rule")
    parser.add_argument("--child", nargs=2, type=int, metavar=("TRIALS", "REPORTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, stopping=args.stopping)))
        return 0
    with tempfile.TemporaryDirectory(prefix="tune-overhead-") as tmp:
        trees = {"base": export(args.base, tmp), "this": REPO}
        times: dict[str, list[float]] = {"base": [], "this": []}
        for i in range(args.runs):
            for label in ("base", "this") if i % 2 == 0 else ("this", "base"):
                times[label].append(run_once(trees[label], args.trials, args.reports, args.stopping))
    base, this = statistics.median(times["base"]), statistics.median(times["this"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rule = ", median stopping rule" if args.stopping else ""
    print(f"trials.tune, {args.trials} trials x {args.reports} reports{rule}, median of {args.runs} interleaved runs "
          f"(load {load:.1f} on {os.cpu_count()} CPUs)")
    for label, name, median in (("base", f"base ({args.base})", base), ("this", "this checkout", this)):
        runs = " ".join(f"{t * 1000:.2f}" for t in times[label])
        print(f"  {name}: {median * 1000:.2f} ms per trial (runs: {runs})")
    print(f"  ratio this/base: {this / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Part warm (issue 51): an import-heavy trainer's sweep, warm (``--warm-start``) against fresh and in-process.

The trainer is ``trainers/torch_digits.py`` (argparse + hypertune, ``import torch, sklearn``, an MLP on
scikit-learn's digits, Adam: the first optimizer made imports ``torch._dynamo``), copied into a
temporary launch folder as ``train.py``, as a user's project holds it. The same parameter sets (a
grid: 4 learning rates x 4 widths = 16), EPOCHS epochs each, 2 at a time, run four ways, each a fresh
process timed from the outside (its own start and imports count):

- **warm**: ``trials sweep spec.yaml --warm-start`` (the spec: ``command: [python, train.py]``,
  ``args: [--epochs=12]``, grid, ``parallel_trial_count: 2``);
- **fresh**: ``trials sweep spec.yaml``: each trial a fresh process, as on Vertex (today's sweep);
- **optuna**: plain Optuna as a user writes it in one script: ``GridSampler`` over the same grid,
  ``study.optimize(objective, n_jobs=2)`` (threads), the objective calling the trainer's ``train``;
- **tune**: ``trials.tune(objective, "spec.yaml", Config)`` with the same objective.

Every variant's process has ``OMP_NUM_THREADS=1`` (one intra-op thread a trial, two trials on two
cores; torch's default of one thread a core, two trials at a time, spins its OpenMP workers against
each other: 15 s to train what takes 0.4 s alone, measured on this machine under load).

Rounds interleave the variants (each round in another order), so machine noise hits each alike; the
medians are compared. Goals (issue 51): warm wall <= 1.0 x optuna and <= 0.4 x fresh; and the warm
sweep's trials report exactly the values of the fresh sweep's, step by step, parameter set by
parameter set (the training is seeded). The in-process variants' values are compared too, for reading
(optuna's two threads share torch's global generator: its values may differ).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = os.path.join(REPO, "benchmarks", "trainers", "torch_digits.py")
PART = "warm"
VARIANTS = ("warm", "fresh", "optuna", "tune")
WARM_VS_OPTUNA_GOAL = 1.0
WARM_VS_FRESH_GOAL = 0.4


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    learning_rates: tuple[float, ...] = (0.001, 0.003, 0.01, 0.03)
    hidden: tuple[int, ...] = (32, 64, 128, 256)
    epochs: int = 12
    rounds: int = 5
    slots: int = 2

    @property
    def n_trials(self) -> int:
        return len(self.learning_rates) * len(self.hidden)


FULL = Sizes()
QUICK = Sizes(learning_rates=(0.01, 0.03), hidden=(32, 64), epochs=2, rounds=1)


def spec_text(sizes: Sizes) -> str:
    """The user's spec (short form): the trainer's command and args, the grid, 2 at a time."""
    return (f"display_name: warm-bench\n"
            f"metrics: {{accuracy: maximize}}\n"
            f"parameters:\n"
            f"  learning_rate: {{type: discrete, values: {list(sizes.learning_rates)}}}\n"
            f"  hidden: {{type: categorical, values: {[str(h) for h in sizes.hidden]}}}\n"
            f"algorithm: grid\n"
            f"max_trial_count: {sizes.n_trials}\n"
            f"parallel_trial_count: {sizes.slots}\n"
            f"command: [python, train.py]\n"
            f"args: [--epochs={sizes.epochs}]\n")


def key(learning_rate: Any, hidden: Any) -> str:
    """One parameter set, the same whichever variant ran it."""
    return f"learning_rate={float(learning_rate):g},hidden={int(float(hidden))}"


# --- the in-process variants, each run as ``python -m benchmarks.warm_start --child NAME FOLDER OUT`` -----
def _trainer(folder: str) -> Any:
    sys.path.insert(0, folder)
    import train  # type: ignore[import-not-found]  # the copied trainer

    return train


def optuna_child(folder: str, sizes: Sizes) -> dict[str, list[float]]:
    """Plain Optuna, threads: what a user writes to run the trainer's training 2 at a time in one process."""
    import optuna

    train = _trainer(folder)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    grid: dict[str, list[float]] = {"learning_rate": list(sizes.learning_rates),
                                    "hidden": [float(h) for h in sizes.hidden]}
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.GridSampler(grid, seed=0))

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_categorical("learning_rate", grid["learning_rate"])
        hidden = trial.suggest_categorical("hidden", grid["hidden"])
        accuracy = float("nan")
        for step, accuracy in enumerate(train.train(lr, int(hidden), sizes.epochs), start=1):
            trial.report(accuracy, step)
        return accuracy

    study.optimize(objective, n_trials=sizes.n_trials, n_jobs=sizes.slots)
    return {key(t.params["learning_rate"], t.params["hidden"]): [t.intermediate_values[s]
                                                                 for s in sorted(t.intermediate_values)]
            for t in study.trials}


def tune_child(folder: str) -> dict[str, list[float]]:
    """``trials.tune`` over the user's spec, the objective calling the same training."""
    import dataclasses

    import trials

    train = _trainer(folder)

    @dataclasses.dataclass
    class Config:
        learning_rate: float = 0.01
        hidden: str = "64"  # (a categorical parameter: its values are strings)
        epochs: int = 10  # (as the trainer's argparse default: the spec's args say 12)

    def objective(config: Config, ctx: trials.TrialContext) -> None:
        for step, accuracy in enumerate(train.train(config.learning_rate, int(config.hidden), config.epochs),
                                        start=1):
            ctx.report(step, accuracy=accuracy)

    result = trials.tune(objective, os.path.join(folder, "spec.yaml"), Config, seed=0)
    return values_of(result.trials)


PROBE_HEAD = "import time as _probe_time\n_PROBE_FIRST = _probe_time.time()\n"
PROBE_IMPORTED = "_PROBE_IMPORTED = _probe_time.time()\n"
PROBE_TAIL = """
import os as _probe_os
with open(_probe_os.environ["TRIALS_PROBE_OUT"], "w") as _probe_out:
    _probe_out.write(f"{_PROBE_FIRST} {_PROBE_IMPORTED} {_probe_time.time()}\\n")
"""


def probe_source(trainer: str) -> str:
    """The trainer with three time stamps: its first line, after its imports, after its training."""
    lines = trainer.splitlines(keepends=True)
    head = next(i for i, line in enumerate(lines) if line.startswith("import "))  # (after the docstring)
    body = next(i for i, line in enumerate(lines) if line.startswith("BATCH_SIZE"))  # (after the imports)
    return ("".join(lines[:head]) + PROBE_HEAD + "".join(lines[head:body]) + PROBE_IMPORTED + "".join(lines[body:])
            + PROBE_TAIL)


def profile_child(folder: str, sizes: Sizes, n: int = 6) -> dict[str, list[dict[str, float]]]:
    """Where a trial's time goes, fresh (the host backend) and warm (the warm backend over it): ``n``
    trials one at a time (no second slot competing), each timed from the backend's start call to the exit
    the backend saw, split by the trainer's own stamps."""
    import trials.startup  # noqa: F401 - (as the trials command: its start-up)
    from trials.controller.backend.protocol import ReplicaStart
    from trials.controller.process.host import HostBackend
    from trials.controller.warm.backend import WarmBackend

    launch = os.path.join(folder, "profile")
    os.makedirs(launch, exist_ok=True)
    with open(TRAINER, encoding="utf-8") as f:
        source = probe_source(f.read())
    with open(os.path.join(launch, "train.py"), "w", encoding="utf-8") as f:
        f.write(source)
    out: dict[str, list[dict[str, float]]] = {}
    for mode in ("fresh", "warm"):
        job = os.path.join(folder, f"profile-{mode}")
        host = HostBackend(launch_dir=launch, job_dir=job, gcs_root=os.path.join(job, "gcs"), gcs_endpoint=False)
        backend: Any = WarmBackend(host, host, job_dir=job) if mode == "warm" else host
        backend.open(lambda line: None)
        rows = []
        try:
            for i in range(1, n + 1):
                trial = os.path.join(job, str(i))
                os.makedirs(trial)
                log = os.path.join(trial, "out.log")
                env = {**os.environ, "CLOUD_ML_TRIAL_ID": str(i), "TRIALS_PROBE_OUT": os.path.join(trial, "probe"),
                       "CLOUD_ML_HP_METRIC_FILE": os.path.join(trial, "metrics")}
                request = ReplicaStart(argv=(report.PYTHON, "train.py", "--learning_rate=0.01", "--hidden=64",
                                             f"--epochs={sizes.epochs}"), env=env, cwd=launch,
                                       name="workerpool0-0", label=f"{i}/workerpool0-0", trial_dir=trial,
                                       stdout_path=log, stderr_path=log)
                asked = time.time()
                handle = backend.start(request)
                started = time.time()
                while handle.poll() is None:
                    time.sleep(0.005)
                seen = time.time()
                ended = handle.poll()
                if ended is None or ended.status != 0:
                    raise RuntimeError(f"profile {mode} trial {i} exited {ended}")
                handle.close()
                with open(os.path.join(trial, "probe"), encoding="utf-8") as f:
                    first, imported, end = (float(x) for x in f.read().split())
                rows.append({"start_call": started - asked, "to_first_line": first - started,
                             "imports": imported - first, "training": end - imported, "exit_seen": seen - end,
                             "total": seen - asked})
        finally:
            backend.close()
        out[mode] = rows
    return out


def values_of(rest_trials: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Parameter set -> the first metric at each step, from REST trials (``trials describe --format json``)."""
    out = {}
    for t in rest_trials:
        params = {p["parameterId"]: p["value"] for p in t.get("parameters", [])}
        steps = sorted(t.get("measurements", []), key=lambda m: int(m.get("stepCount", 0)))
        out[key(params["learning_rate"], params["hidden"])] = [float(m["metrics"][0]["value"]) for m in steps]
    return out


# --- the parent ----------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = report.installed_env(OMP_NUM_THREADS="1")
    env["PATH"] = f"{os.path.dirname(report.PYTHON)}:{env.get('PATH', os.defpath)}"
    return env


def run_variant(name: str, folder: str, tag: str, sizes: Sizes, env: Mapping[str, str]) -> dict[str, Any]:
    """One timed run: its wall, its values by parameter set, and (sweeps) its trials' own times."""
    out = os.path.join(folder, f"{tag}.json")
    root = os.path.join(folder, "jobs")
    if name in ("warm", "fresh"):
        argv = [report.PYTHON, "-m", "trials", "sweep", "spec.yaml", "--root", root, "--job-id", tag,
                "--seed", "0", "--quiet", *(["--warm-start"] if name == "warm" else [])]
    else:
        argv = [report.PYTHON, "-m", "benchmarks.warm_start", "--child", name, folder, out,
                *(["--quick"] if sizes == QUICK else [])]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=folder, env=dict(env), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}")
    row: dict[str, Any] = {"wall_s": wall, "load_before": load}
    if name in ("warm", "fresh"):
        described = subprocess.run([report.PYTHON, "-m", "trials", "describe", tag, "--root", root, "--format",
                                    "json"], cwd=folder, env=dict(env), capture_output=True, text=True, check=True)
        rest = json.loads(described.stdout)
        row["values"] = values_of(rest.get("trials", []))
        row["trial_s"] = [_seconds(t["endTime"]) - _seconds(t["startTime"]) for t in rest.get("trials", [])
                          if t.get("startTime") and t.get("endTime")]
        if name == "warm":
            row["warm_said"] = sorted({line for line in (proc.stdout + proc.stderr).splitlines()
                                       if "--warm-start" in line})
    else:
        with open(out, encoding="utf-8") as f:
            row["values"] = json.load(f)
    return row


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def compare(reference: Mapping[str, list[float]], other: Mapping[str, list[float]], epochs: int) -> list[str]:
    """How ``other`` differs from ``reference`` (empty: the same parameter sets, every step equal)."""
    problems = []
    if set(reference) != set(other):
        problems.append(f"parameter sets differ: {sorted(set(reference) ^ set(other))[:4]}")
    for k in sorted(set(reference) & set(other)):
        if len(other[k]) != epochs:
            problems.append(f"{k}: {len(other[k])} steps, not {epochs}")
        elif other[k] != reference[k]:
            step = next(i for i, (a, b) in enumerate(zip(reference[k], other[k], strict=True), 1) if a != b)
            problems.append(f"{k}: step {step} {other[k][step - 1]!r} != {reference[k][step - 1]!r}")
    return problems


def run(*, quick: bool = False, out_dir: str | None = None, rounds: int | None = None) -> dict[str, Any]:
    sizes = QUICK if quick else FULL
    n_rounds = rounds or sizes.rounds
    env = _env()
    folder = tempfile.mkdtemp(prefix="bench-warm-")
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    started = time.strftime("%Y-%m-%d %H:%M:%S %z")
    loads = [os.getloadavg()[0]]
    parts: dict[str, list[dict[str, float]]] = {}
    try:
        shutil.copyfile(TRAINER, os.path.join(folder, "train.py"))
        with open(os.path.join(folder, "spec.yaml"), "w", encoding="utf-8") as f:
            f.write(spec_text(sizes))
        for r in range(n_rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for name in order:
                row = run_variant(name, folder, f"{name}-{r}", sizes, env)
                runs[name].append(row)
                loads.append(os.getloadavg()[0])
                print(f"round {r + 1}/{n_rounds} {name}: {row['wall_s']:.1f} s (load {row['load_before']:.1f})",
                      flush=True)
        out = os.path.join(folder, "profile.json")
        subprocess.run([report.PYTHON, "-m", "benchmarks.warm_start", "--child", "profile", folder, out,
                        *(["--quick"] if quick else [])], cwd=folder, env=env, check=True)
        with open(out, encoding="utf-8") as f:
            parts = json.load(f)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return summarize(runs, sizes, started=started, loads=loads, out_dir=out_dir, parts=parts)


PARTS = (("start_call", "the backend's start call (warm: the launcher's answer, any wait for it)"),
         ("to_first_line", "start -> the trainer's first line (fork + shim entry, or exec + interpreter)"),
         ("imports", "the trainer's imports"),
         ("training", "its training (fresh: the first optimizer's lazy imports too)"),
         ("exit_seen", "its last line -> its exit seen (teardown, reaping)"),
         ("total", "total"))


def parts_table(parts: Mapping[str, list[dict[str, float]]]) -> str:
    """Where a trial's time goes: fresh (every trial), warm (its 3rd and later trials: the 1st is the survey,
    the 2nd may wait for the launcher's last imports, shown apart)."""
    warm = parts["warm"][2:] or parts["warm"]
    second = parts["warm"][1] if len(parts["warm"]) > 1 else parts["warm"][0]
    rows = [[label, statistics.median(r[k] for r in parts["fresh"]), statistics.median(r[k] for r in warm),
             second[k]] for k, label in PARTS]
    return report.table(f"Where a trial's time goes (s, median of {len(parts['fresh'])} trials one at a time)",
                        ["part", "fresh", "warm (3rd on)", "warm 2nd"], rows)


def summarize(runs: Mapping[str, list[dict[str, Any]]], sizes: Sizes, *, started: str, loads: Sequence[float],
              out_dir: str | None, parts: Mapping[str, list[dict[str, float]]]) -> dict[str, Any]:
    medians = {v: statistics.median(r["wall_s"] for r in runs[v]) for v in VARIANTS}
    reference = runs["fresh"][0]["values"]
    same = {v: [compare(reference, r["values"], sizes.epochs) for r in runs[v]] for v in VARIANTS}
    goals = {
        f"warm sweep wall <= {WARM_VS_OPTUNA_GOAL} x plain Optuna n_jobs={sizes.slots}":
            medians["warm"] <= WARM_VS_OPTUNA_GOAL * medians["optuna"],
        f"warm sweep wall <= {WARM_VS_FRESH_GOAL} x fresh sweep":
            medians["warm"] <= WARM_VS_FRESH_GOAL * medians["fresh"],
        "warm trials report the fresh trials' values, every step": all(not p for p in same["warm"]),
    }
    labels = {"warm": "trials sweep --warm-start", "fresh": "trials sweep (fresh, today's)",
              "optuna": f"plain Optuna, n_jobs={sizes.slots} (threads)", "tune": "trials.tune (in-process)"}
    rows = []
    for v in VARIANTS:
        walls = " ".join(f"{r['wall_s']:.1f}" for r in runs[v])
        trial_s = [s for r in runs[v] for s in r.get("trial_s", [])]
        rows.append([labels[v], medians[v], walls, medians[v] / medians["optuna"], medians[v] / medians["fresh"],
                     statistics.median(trial_s) if trial_s else float("nan"),
                     "same" if all(not p for p in same[v]) else "differ"])
    title = (f"Warm start: {sizes.n_trials} trials x {sizes.epochs} epochs, {sizes.slots} at a time, "
             f"median of {len(runs['warm'])} interleaved rounds")
    print(report.table(title, ["variant", "wall s", "rounds s", "x optuna", "x fresh", "trial s (median)",
                               "values vs fresh"], rows))
    paired = {v: statistics.median(w["wall_s"] / o["wall_s"] for w, o in zip(runs["warm"], runs[v], strict=True))
              for v in ("optuna", "fresh", "tune")}
    print("warm / the other, round by round (median): "
          + ", ".join(f"{labels[v]} {ratio:.2f}" for v, ratio in paired.items()))
    for goal, ok in goals.items():
        print(f"goal: {goal}: {report.verdict(ok)}")
    for v in VARIANTS:
        for i, problems in enumerate(same[v]):
            for p in problems[:3]:
                print(f"  {v} round {i + 1}: {p}")
    for line in sorted({s for r in runs["warm"] for s in r.get("warm_said", [])}):
        print(f"  warm said: {line}")
    print(parts_table(parts))
    print(f"load average (1 min) over the run: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs")
    data = {"sizes": {"n_trials": sizes.n_trials, "epochs": sizes.epochs, "slots": sizes.slots},
            "started": started, "loads": list(loads), "median_wall_s": medians, "paired_ratios": paired,
            "goals": goals,
            "differences": same, "runs": runs, "parts": parts}
    path = report.write_result(PART, data, out_dir=out_dir)
    print(f"results: {path}")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.warm_start", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 x 2 trials x 2 epochs, one round")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5)")
    parser.add_argument("--out", help="directory for warm.json (default benchmarks/results)")
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "FOLDER", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, folder, out = args.child
        sizes = QUICK if args.quick else FULL
        values: Any
        if name == "profile":
            values = profile_child(folder, sizes, n=3 if args.quick else 6)
        else:
            values = optuna_child(folder, sizes) if name == "optuna" else tune_child(folder)
        with open(out, "w", encoding="utf-8") as f:
            json.dump(values, f)
        return 0
    run(quick=args.quick, out_dir=args.out, rounds=args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())

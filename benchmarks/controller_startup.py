"""Part 2's start-up split: ``python [-X importtime] -m benchmarks.controller_startup OUT trials-args...``.

Runs ``trials.cli.main`` unchanged, with wall-clock stamps around the steps a sweep takes before its
first trial and after its last one (cProfile would inflate them), and writes them to ``OUT`` (JSON).
With ``-X importtime`` the interpreter's import report (stderr) splits the imports by package:
:func:`import_split` sums each module's own time into its top-level package. The stamps cost a
few microseconds a call; imports happen as the plain command does them (nothing is pre-imported).
"""

from __future__ import annotations

import time

FIRST_LINE = time.time()  # the interpreter is up (stamped before any other import)

import importlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable, Iterable  # noqa: E402
from typing import Any  # noqa: E402

# label -> (module, attribute path): what a sweep does before its first trial and after its last.
# A name that moved reads "n/a" in the table (a smoke test checks they exist).
STEPS = {
    "import the CLI (trials.cli)": ("trials.cli", "main"),  # (stamped by its own import below)
    "read the spec": ("trials.spec.load", "load_spec"),
    "create the job (folder, journal, WAITING trials)": ("trials.controller.jobs.registry", "create_job"),
    "run options (job's settings read back)": ("trials.controller.jobs.run", "run_options"),
    "sandbox probe": ("trials.controller.process.sandbox", "detect"),
    "local Cloud Storage endpoint start": ("trials.controller.process.host", "start_endpoint"),
    "job recorded RUNNING": ("trials.controller.loop.state", "LoopState.begin_job"),
    "claim (suggest + journal write)": ("trials.controller.loop.state", "LoopState.next_claim"),
    "prepare the trial folder": ("trials.controller.loop.launcher", "TrialLauncher.prepare"),
    "start the replica (spawn)": ("trials.controller.loop.launcher", "TrialLauncher.start"),
    "finish the job (end state)": ("trials.controller.loop.state", "LoopState.finish_job"),
    "stop the endpoint (backend close)": ("trials.controller.process.host", "HostBackend.close"),
    "summary (best trials printed)": ("trials.cli.run", "_summary"),
}
IMPORT_STEPS = ("trials.cli",)
AFTER_LAST_TRIAL = ("finish the job (end state)", "stop the endpoint (backend close)", "summary (best trials printed)")
FIRST_LAUNCH = "start the replica (spawn)"
CPU = "controller CPU, whole job (user + system)"


def _stamped(original: Callable[..., Any], label: str, log: list[tuple[str, float, float]]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            log.append((label, t, time.time()))

    return wrapper


def _stamp_when_imported(log: list[tuple[str, float, float]]) -> None:
    """Wrap each step as its module is first imported by the command itself (an import hook)."""
    pending = {module: [] for module, _ in STEPS.values()}
    for label, (module, path) in STEPS.items():
        if module not in IMPORT_STEPS:
            pending[module].append((label, path))

    def wrap(module_name: str) -> None:
        mod = sys.modules.get(module_name)
        for label, path in pending.pop(module_name, []):
            owner: Any = mod
            *parents, name = path.split(".")
            for part in parents:
                owner = getattr(owner, part, None)
            if owner is not None and hasattr(owner, name):
                setattr(owner, name, _stamped(getattr(owner, name), label, log))

    class Finder:
        """After a watched module is executed, wrap its steps (then it forgets it)."""

        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
            if name not in pending:
                return None
            sys.meta_path.remove(Finder)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, Finder)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            execute = loader.exec_module

            def exec_module(module: Any) -> None:
                execute(module)
                wrap(name)

            loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, Finder)


def import_split(stderr_lines: Iterable[str]) -> dict[str, float]:
    """Seconds of import per top-level package from ``-X importtime`` lines (each module's own time)."""
    out: dict[str, float] = {}
    for line in stderr_lines:
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        try:
            self_us, _cum, name = (p.strip() for p in line[len("import time:"):].split("|"))
            own_s = int(self_us) / 1e6
        except ValueError:
            continue
        root = name.split(".", 1)[0]
        key = root if root in ("trials", "optuna", "numpy", "sqlalchemy", "yaml", "tqdm", "colorlog", "alembic") \
            else "stdlib and others"
        out[key] = out.get(key, 0.0) + own_s
    return out


def parts(stamps: dict[str, Any], *, spawn: float, exit_: float,
          times: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Seconds of each start-up and end part of one run: the stamps, the benchmark's spawn and exit
    wall times, and the trials' own (start, end) stamps. The first call of each step counts before
    the first trial (the first claim, prepare and spawn), the last one after the last trial (each runs once)."""
    first_trial = min(s for s, _ in times.values())
    last_end = max(e for _, e in times.values())
    steps = [(label, t0, t1) for label, t0, t1 in stamps["steps"]]
    launched = min((t1 for label, _, t1 in steps if label == FIRST_LAUNCH), default=first_trial)
    out = {"interpreter start (spawn to its first line)": stamps["first_line"] - spawn}
    for label in STEPS:
        calls = [(t0, t1) for name, t0, t1 in steps if name == label]
        if label in AFTER_LAST_TRIAL:
            out[label] = calls[-1][1] - calls[-1][0] if calls else float("nan")
        else:
            calls = [c for c in calls if c[0] <= launched]
            out[label] = calls[0][1] - calls[0][0] if calls else float("nan")
    out["first trial: spawned to its first line"] = first_trial - launched
    before = [v for k, v in out.items() if k not in AFTER_LAST_TRIAL and v == v]
    out["START-UP TOTAL (spawn to the first trial's first line)"] = first_trial - spawn
    out["other before the first trial (imports, ...)"] = (first_trial - spawn) - sum(before)
    after = [out[k] for k in AFTER_LAST_TRIAL if out[k] == out[k]]
    out["END TOTAL (the last trial's end to exit)"] = exit_ - last_end
    out["interpreter exit (main returned to exit)"] = exit_ - stamps["main_end"]
    after.append(out["interpreter exit (main returned to exit)"])
    out["other after the last trial (exit seen, record, ...)"] = (exit_ - last_end) - sum(after)
    if "cpu_s" in stamps:  # (not a part of the wall: what the controller took from the trials' cores)
        out[CPU] = stamps["cpu_s"]
    return out


def main(argv: list[str]) -> int:
    out_path, args = argv[0], argv[1:]
    log: list[tuple[str, float, float]] = []
    _stamp_when_imported(log)
    t = time.time()
    import trials.startup

    trials.startup.set_up_command(args)  # as the `trials` console script is set up (trials.startup.trials_command)
    from trials.cli import main as cli_main

    log.append(("import the CLI (trials.cli)", t, time.time()))
    code = 1
    try:
        code = cli_main(args)
    finally:
        import resource

        used = resource.getrusage(resource.RUSAGE_SELF)  # the controller's own CPU, not its children's
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump({"first_line": FIRST_LINE, "main_end": time.time(), "steps": log,
                       "cpu_s": used.ru_utime + used.ru_stime}, f)
    return code


def exit_as_trials_does(code: int) -> None:
    """End the process the way the ``trials`` command does (``trials.cli.exit_now`` where it exists)."""
    import trials.cli

    ending = getattr(trials.cli, "exit_now", sys.exit)
    ending(code)


if __name__ == "__main__":
    exit_as_trials_does(main(sys.argv[1:]))

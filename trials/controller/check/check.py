"""`trials check`: run a trainer for real, inject what Vertex would, and record what it did.

Three probes share one time box: a clean run of trial "1" with the spec's first parameters; the
same run interrupted by SIGTERM after some reports and started again as Vertex restarts a replica;
and, when the spec has several replicas, every replica of a run, each non-primary one with its own
output folders so that what it saves can be told apart. The verdicts are in
:mod:`trials.controller.check.scorecard`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from trials import files, protocol
from trials.controller.check import scorecard
from trials.controller.check.identity_audit import AUDIT_ENV, SITECUSTOMIZE
from trials.controller.check.probe import Probe, walk
from trials.controller.process.host import HostBackend
from trials.controller.process.replica import free_port
from trials.controller.trial import launch
from trials.errors import ConfigError
from trials.spec.export import with_base_output
from trials.spec.model import JobSpec, ParameterSpec, ParameterType, StudySpec, Value

DEFAULT_TIME_LIMIT_S = 180.0
DEFAULT_GRACE_S = 10.0
_EPOCH_WORDS = ("epoch", "step", "iteration", "iter", "n_iter", "rounds", "estimators")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckOptions:
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    grace_s: float = DEFAULT_GRACE_S
    params: Mapping[str, Value] = field(default_factory=dict)
    local_command: Sequence[str] | None = None
    project_number: str = protocol.DEFAULT_PROJECT_NUMBER
    cwd: str = "."
    folder: str | None = None  # where runs keep their files (default: a temporary folder, removed)
    pass_env: tuple[str, ...] = ()  # withheld host variables passed anyway (--pass-env)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    lines: list[scorecard.Line]
    notes: list[str]
    params: dict[str, Value]
    folder: str

    @property
    def ready(self) -> bool:
        return not scorecard.failed(self.lines)


def first_params(study: StudySpec, given: Mapping[str, Value]) -> dict[str, Value]:
    """The spec's first point: the first value of each list, the low end of each range, conditional
    children where their parent's value selects them; ``given`` wins. Epoch-like integer parameters
    take their minimum, which keeps the check short where the spec allows it."""
    out: dict[str, Value] = {}
    while True:
        new = [p for p in study.active_parameters(out) if p.parameter_id not in out]
        if not new:
            break
        for p in new:
            out[p.parameter_id] = given[p.parameter_id] if p.parameter_id in given else _first_value(p)
    unknown = sorted(set(given) - set(out))
    if unknown:
        raise ConfigError(f"--params names {unknown[0]!r}, which is not an active parameter of the spec "
                          f"(expected one of {sorted(out)})")
    return out


def _first_value(p: ParameterSpec) -> Value:
    if p.values:  # CATEGORICAL, DISCRETE
        return p.values[0]
    low = p.min_value if p.min_value is not None else 0
    return int(low) if p.type is ParameterType.INTEGER else float(low)


def parse_params(items: Sequence[str], study: StudySpec) -> dict[str, Value]:
    """``--params name=value`` (repeatable or comma-separated), typed by the spec."""
    by_id = {p.parameter_id: p for p in study.all_parameters()}
    out: dict[str, Value] = {}
    for item in (part for chunk in items for part in chunk.split(",") if part):
        name, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--params expects name=value, got {item!r}")
        p = by_id.get(name)
        if p is None:
            raise ConfigError(f"--params: unknown parameter {name!r} (the spec has {sorted(by_id)})")
        try:
            out[name] = _typed(p, raw)
        except ValueError:
            raise ConfigError(f"--params: {name} expects a {p.type.name.lower()} value, got {raw!r}") from None
    return out


def _typed(p: ParameterSpec, raw: str) -> Value:
    if p.type is ParameterType.CATEGORICAL:
        if raw not in p.values:
            raise ValueError(raw)
        return raw
    value: Value = int(raw) if p.type is ParameterType.INTEGER else float(raw)
    if not p.contains(value):
        raise ValueError(raw)
    return value


def run_check(job: JobSpec, options: CheckOptions, *, echo: Callable[[str], None] = lambda _m: None) -> CheckResult:
    """Run the probes within ``options.time_limit_s`` and judge them."""
    params = first_params(job.study, options.params)
    folder = options.folder or tempfile.mkdtemp(prefix="trials-check-")
    os.makedirs(folder, exist_ok=True)
    cwd = os.path.abspath(options.cwd)
    backend = HostBackend(launch_dir=cwd, job_dir=folder, gcs_root=os.path.join(folder, "gcs"), gcs_endpoint=False)
    view = backend.view
    t0 = time.monotonic()
    budget = options.time_limit_s
    notes: list[str] = [] if view.on else [view.describe()]

    def probe_for(name: str, attempt: int = 0) -> Probe:
        launches, trial_dir = _launches(job, params, options, folder=os.path.join(folder, name), attempt=attempt)
        return Probe(launches, trial_dir=trial_dir, cwd=cwd, backend=backend, exclude=folder)

    # 1. the clean run
    echo(f"clean run with {_flags_text(job, params)}")
    probe = probe_for("clean")
    probe.begin()
    exited = probe.watch(t0 + 0.45 * budget)
    if not exited:
        notes.append(f"the clean run was stopped after {0.45 * budget:.0f} s to stay in the time box "
                     f"(--time-limit {budget:.0f}); its later epochs were not seen")
        probe.terminate(options.grace_s)
    else:
        # The other replicas may lag the primary (they start later): let them end on their own so
        # that what they report and save is seen, within the primary's own run time again.
        probe.wait_all(min(t0 + 0.45 * budget, probe.clock() + probe.clock() - probe.start + 5.0))
        probe.kill()
    clean = probe.seen(0, stopped=not exited, outside=probe.outside_writes())
    launches = probe.launches
    secondary = probe.seen(1, stopped=not exited, outside=[]) if len(launches) > 1 else None
    obs = scorecard.Observations(metric_ids=job.study.metric_ids, clean=clean, secondary=secondary,
                                 secondary_name=launches[1].name if len(launches) > 1 else "",
                                 sandboxed=view.on, notes=notes)

    # 2. SIGTERM in the middle, then a restart in the same folders
    steps = [r.step for r in clean.reports if r.tag == job.study.metric_ids[0]]
    if len(steps) >= 2 and clean.exit_code == 0:
        at = max(1, len(steps) // 2)
        echo(f"restart probe: SIGTERM after {at} report(s), then the same command again")
        probe = probe_for("restart")
        probe.begin()
        primary = job.study.metric_ids[0]
        done = probe.watch(t0 + 0.75 * budget, until=lambda rs: sum(r.tag == primary for r in rs) >= at)
        stop = scorecard.StopSeen(grace_s=options.grace_s)
        stop.sent_after_steps = [r.step if r.step else None for r in probe.primary_reports() if r.tag == primary]
        if done:
            notes.append("the run ended before SIGTERM could be sent; the restart probe was skipped")
            probe.kill()
        else:
            stop.exit_after_s = probe.terminate(options.grace_s)
            stop.exit_code = probe.replicas[0].poll()
            stop.reported_before_restart = [r.step for r in probe.primary_reports() if r.tag == primary]
            for lau in probe.launches:  # a restarted replica starts with a fresh metric file, as on a new VM
                if os.path.lexists(lau.metric_file):
                    os.replace(lau.metric_file, lau.metric_file + ".attempt-0")
            stop.checkpoints_before_restart = walk(probe.launches[0].env.get(protocol.ENV_CHECKPOINT_DIR, ""))
            first_outside = probe.outside_writes()
            again = probe_for("restart", attempt=1)
            again.begin()
            finished = again.watch(t0 + 0.95 * budget)
            if not finished:
                notes.append("the restarted run was stopped by the time box")
                again.terminate(options.grace_s)
            else:
                again.kill()
            stop.restart = again.seen(0, stopped=not finished,
                                      outside=sorted(set(first_outside) | set(again.outside_writes())))
            obs.stop = stop
    lines = scorecard.judge(obs)
    if not options.folder:
        _remove_tree(folder)
    return CheckResult(lines=lines, notes=notes, params=params, folder=folder)


def _launches(job: JobSpec, params: Mapping[str, Value], options: CheckOptions, *, folder: str,
              attempt: int) -> tuple[list[launch.ReplicaLaunch], str]:
    trial_dir = os.path.join(folder, "trial")
    audit_dir = os.path.join(trial_dir, "audit")  # in the trial folder: a sandboxed replica sees it
    os.makedirs(audit_dir, exist_ok=True)
    files.write_text_atomic(os.path.join(audit_dir, "sitecustomize.py"), SITECUSTOMIZE)
    base = os.path.join(folder, "outputs")
    job = with_base_output(job, base)  # a local base, as a sweep's default: the AIP_* variables are set
    paths = replace(launch.trial_paths(trial_dir, base, "1"), trial_dir=trial_dir)
    n = len(job.trial_job.replicas() if job.trial_job else [None])
    out = launch.build_replicas(
        job=job, job_id="check", trial_id="1", params=params, paths=paths,
        project_number=options.project_number, local_command=options.local_command,
        base_env=launch.clean_base_env(os.environ, options.pass_env), ports=[free_port() for _ in range(n)],
        gcs_root=os.path.join(folder, "gcs"), attempt=attempt,
    )
    result = []
    for lau in out:
        env = dict(lau.env)
        env[AUDIT_ENV] = os.path.join(trial_dir, f"{lau.name}.audit")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (audit_dir, env.get("PYTHONPATH", "")) if p)
        if not lau.is_primary:  # its own output folders: what it saves is told apart from the primary's
            own = launch.trial_paths(trial_dir, os.path.join(folder, "outputs-" + lau.name), "1")
            env.update({protocol.ENV_MODEL_DIR: own.model_dir, protocol.ENV_CHECKPOINT_DIR: own.checkpoint_dir,
                        protocol.ENV_TENSORBOARD_LOG_DIR: own.tensorboard_dir})
        result.append(replace(lau, env=env))
    return result, trial_dir


def _flags_text(job: JobSpec, params: Mapping[str, Value]) -> str:
    return " ".join(launch.trial_flags(job.study, params)) or "no flags"


def _remove_tree(top: str) -> None:
    import shutil

    shutil.rmtree(top, ignore_errors=True)


def check_main(job: JobSpec, options: CheckOptions, *, fmt: str, out: Callable[[str], None] = print) -> int:
    """Run the check and print the scorecard; exit 1 when a check failed."""
    say = (lambda m: print(f"trials check: {m}", file=sys.stderr)) if fmt == "text" else (lambda _m: None)
    result = run_check(job, options, echo=say)
    text = scorecard.format_json(result.lines, result.notes) if fmt == "json" else \
        scorecard.format_text(result.lines, result.notes)
    out(text)
    return protocol.EXIT_OK if result.ready else protocol.EXIT_ERROR

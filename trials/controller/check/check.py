"""`trials check`: run a trainer for real, inject what Vertex would, and record what it did.

Three probes share one time box: a clean run of trial "1" with the spec's first parameters; the
same run interrupted by SIGTERM after half the clean run's reports (counted in its metric file; a
Python trainer is held there until the signal was sent, :mod:`trials.controller.check.hold`) and
started again as Vertex restarts a replica;
and, when the spec has several replicas, every replica of a run, each non-primary one with its own
output folders so that what it saves can be told apart. Each run is a one-trial job run by the job
loop, as ``trials sweep`` runs its trials; what is the check's own is its trial policy and what its
backend adds (:mod:`trials.controller.check.probe`). The verdicts are in
:mod:`trials.controller.check.scorecard`.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from trials import protocol
from trials.controller.backend.protocol import ReplicaBackend
from trials.controller.check import scorecard
from trials.controller.check.probe import Attempt, Hold, ProbeBackend, ProbePolicy
from trials.controller.check.seen import run_seen
from trials.controller.jobs import registry
from trials.controller.jobs import run as job_run
from trials.controller.loop.effects import Clock, Signals, SystemClock
from trials.controller.loop.runner import JobRunner
from trials.controller.process.host import HostBackend
from trials.controller.trial import launch
from trials.errors import ConfigError
from trials.records import JobState
from trials.spec.export import with_base_output
from trials.spec.model import JobSpec, LocalOptions, ParameterSpec, ParameterType, StudySpec, Value

DEFAULT_TIME_LIMIT_S = 180.0
DEFAULT_GRACE_S = 10.0
CHECK_JOB_ID = "check"  # each probe's job (CLOUD_ML_JOB_ID), in <folder>/<probe>/check/
_EPOCH_WORDS = ("epoch", "step", "iteration", "iter", "round", "estimator")  # in parameter names, singular


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
    runtime: str = "host"  # or podman / docker: the probes run as containers of the pools' images
    images: Mapping[str, str] = field(default_factory=dict)  # --image URI=LOCAL
    strict: bool = False  # --strict: what Vertex recommends (resume, SIGTERM handled) is required
    warm_start: bool = False  # --warm-start: also run the trial fresh and warm (trials.controller.check.warm)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    lines: list[scorecard.Line]
    notes: list[str]
    params: dict[str, Value]
    folder: str
    observations: scorecard.Observations  # what was seen, as judged

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


def run_check(job: JobSpec, options: CheckOptions, *, echo: Callable[[str], None] = lambda _m: None,
              backend: ReplicaBackend | None = None, clock: Clock | None = None,
              signals: Signals | None = None) -> CheckResult:
    """Run the probes within ``options.time_limit_s`` and judge them.

    Each probe is a one-trial job in the check's folder, run by the job loop (``JobRunner``) with a
    :class:`~trials.controller.check.probe.ProbePolicy` and through a
    :class:`~trials.controller.check.probe.ProbeBackend`. ``backend`` runs the replicas (default:
    host processes in their sandbox); ``clock`` and ``signals`` are the loop's (replay tests).

    Raises:
        ConfigError: the trainer's command cannot be built or started.
        KeyboardInterrupt: a stop signal (Ctrl-C) cancelled a probe; its replicas were stopped.
    """
    params = first_params(job.study, options.params)
    from trials.controller.backend import registry

    in_image = registry.get(options.runtime).in_image
    if not in_image:  # in an image, a pool without a command runs the image's ENTRYPOINT
        _check_command(job, options.local_command)
    folder = options.folder or tempfile.mkdtemp(prefix="trials-check-")
    os.makedirs(folder, exist_ok=True)
    notes: list[str] = []
    if backend is None and in_image:
        from trials.controller.container import runtime as container_runtime
        from trials.controller.container.backend import ContainerBackend

        backend = ContainerBackend(runtime=container_runtime.find(options.runtime), job_dir=folder,
                                   gcs_root=os.path.join(folder, "gcs"), images=options.images,
                                   pass_env=options.pass_env, gcs_endpoint=False)
        sandboxed = False
    elif backend is None:
        host = HostBackend(launch_dir=os.path.abspath(options.cwd), job_dir=folder,
                           gcs_root=os.path.join(folder, "gcs"), gcs_endpoint=False, keep_layers=True)
        sandboxed, backend = host.view.on, host
        if not sandboxed:
            notes.append(host.view.describe())
    else:
        sandboxed = False
    probes = _Probes(job, params, options, folder=folder, backend=backend, clock=clock or SystemClock(),
                     signals=signals)
    try:
        obs = probes.observe(notes, echo, sandboxed=sandboxed, in_image=in_image)
        lines = scorecard.judge(obs)
        if options.warm_start:
            lines.append(probes.warm(obs, echo))
    finally:
        if not options.folder:
            shutil.rmtree(folder, ignore_errors=True)
    return CheckResult(lines=lines, notes=notes, params=params, folder=folder, observations=obs)


class _Probes:
    """The check's probe runs, each a one-trial job in its own folder run by the job loop."""

    def __init__(self, job: JobSpec, params: Mapping[str, Value], options: CheckOptions, *, folder: str,
                 backend: ReplicaBackend, clock: Clock, signals: Signals | None):
        self.job = job
        self.params = dict(params)
        self.options = options
        self.folder = folder
        self.backend = backend
        self.clock = clock
        self.signals = signals
        self.primary = _replica_names(job)[0]
        self.metric_id = job.study.metric_ids[0]
        self.t0 = clock.monotonic()

    def at(self, share: float) -> float:
        """The moment ``share`` of the time box is used up (monotonic, the loop's clock)."""
        return self.t0 + share * self.options.time_limit_s

    def observe(self, notes: list[str], echo: Callable[[str], None], *, sandboxed: bool,
                in_image: bool = False) -> scorecard.Observations:
        budget = self.options.time_limit_s
        # 1. the clean run; the other replicas may lag the primary (they start later): they may end
        # on their own after it, so that what they report and save is seen
        echo(f"clean run with {_flags_text(self.job, self.params)}")
        policy = ProbePolicy(metric_id=self.metric_id, box_until=self.at(0.45), hold_others=True)
        run = self.run("clean", policy)
        if policy.stopped_by_box:
            notes.append(f"the clean run was stopped after {0.45 * budget:.0f} s to stay in the time box "
                         f"(--time-limit {budget:.0f}); its later epochs were not seen")
        clean = self.seen(run, policy, self.primary, 0, stopped=policy.stopped_by_box,
                          outside=run.outside_writes())
        names = run.first_names()
        secondary = self.seen(run, policy, names[1], 0, stopped=policy.stopped_by_box, outside=[]) \
            if len(names) > 1 else None
        obs = scorecard.Observations(metric_ids=self.job.study.metric_ids, clean=clean, secondary=secondary,
                                     secondary_name=names[1] if len(names) > 1 else "", sandboxed=sandboxed,
                                     has_base=_has_base(self.job), in_image=in_image, strict=self.options.strict,
                                     notes=notes, longer_run=longer_run(self.job.study, self.params))
        # 2. SIGTERM after half the clean run's reports (the trainer held there when it is Python),
        # then a restart in the same folders
        steps = [r.step for r in clean.reports if r.tag == self.metric_id]
        if len(steps) >= 2 and clean.exit_code == 0:
            at = max(1, len(steps) // 2)
            echo(f"restart probe: SIGTERM after {at} of {len(steps)} reports, then the same command again")
            policy = ProbePolicy(metric_id=self.metric_id, box_until=self.at(0.95), interrupt_after=at,
                                 interrupt_by=self.at(0.75))
            run = self.run("restart", policy, hold=Hold(tag=self.metric_id, after=at, max_s=0.3 * budget))
            if policy.ended_before_interrupt:
                obs.interrupt_missed = True
            else:
                if policy.stopped_by_box:
                    notes.append("the restarted run was stopped by the time box")
                obs.stop = self.stop_seen(run, policy)
        return obs

    def warm(self, obs: scorecard.Observations, echo: Callable[[str], None]) -> scorecard.Line:
        """The warm-start probe's line (:mod:`trials.controller.check.warm`): the host's trials only."""
        from trials.controller.check import warm

        if not isinstance(self.backend, HostBackend):
            return warm.judge(warm.WarmSeen(skipped=f"--warm-start forks host trials only (the check ran "
                                                    f"--runtime {self.options.runtime})"), None)
        clean = obs.clean.reports if obs.clean.exit_code == 0 and not obs.clean.stopped_by_check else None
        # each run may take three times the clean run (a warm child that hangs ends at its timeout)
        timeout_s = min(self.options.time_limit_s, max(60.0, 3 * obs.clean.duration_s))
        seen = warm.run_warm(self.job, self.params, folder=self.folder, host=self.backend, say=echo,
                             run_job=lambda job, root, backend: self._run_one(root, backend, timeout_s))
        return warm.judge(seen, clean)

    def _run_one(self, root: str, backend: ReplicaBackend, timeout_s: float) -> str:
        """A one-trial job in ``root`` with the check's parameters through ``backend``, no probe policy, the
        trial stopped after ``timeout_s``; its state."""
        job = _one_trial(self.job)
        if job.trial_job is not None:
            job = replace(job, trial_job=replace(job.trial_job, scheduling=replace(job.trial_job.scheduling,
                                                                                   timeout_s=timeout_s)))
        h = registry.create_job(
            job, root=root, job_id=CHECK_JOB_ID, spec_path=None, storage=None,
            base_output_dir=os.path.join(root, "outputs") if _has_base(self.job) else None,
            project_number=self.options.project_number,
            local_command=self.options.local_command, cwd=os.path.abspath(self.options.cwd),
            gcs_root=os.path.join(self.folder, "gcs"), pass_env=self.options.pass_env)
        h.store.fix_params(0, self.params, self.job.study)
        options = job_run.run_options(h, runtime="host", images={}, echo=False, grace_period_s=self.options.grace_s,
                                      memory_limit_mb=None, inject_restarts=0.0, slots=1, seed=None)
        options.keep_going = True  # the check watches the trainer: no job rule (a wrong tag's) cuts its run short
        state = JobRunner(h.store, h.job, options, backend=backend, clock=self.clock, signals=self.signals).run()
        if state == JobState.CANCELLED:
            raise KeyboardInterrupt
        return state

    def run(self, name: str, policy: ProbePolicy, *, hold: Hold | None = None) -> ProbeBackend:
        """One probe: a one-trial job in ``<folder>/<name>/``, run by the job loop until it ends
        (with ``hold``, the primary's first attempt waits there until the policy's signal was sent)."""
        root = os.path.join(self.folder, name)
        h = registry.create_job(
            _one_trial(self.job), root=root, job_id=CHECK_JOB_ID, spec_path=None, storage=None,
            # the probes' own base when the job has one (AIP_* set, as on Vertex), else none (no AIP_*)
            base_output_dir=os.path.join(root, "outputs") if _has_base(self.job) else None,
            project_number=self.options.project_number,
            local_command=self.options.local_command, cwd=os.path.abspath(self.options.cwd),
            gcs_root=os.path.join(self.folder, "gcs"), pass_env=self.options.pass_env)
        h.store.fix_params(0, self.params, self.job.study)
        options = job_run.run_options(h, runtime=self.options.runtime, images=dict(self.options.images),
                                      echo=False, grace_period_s=self.options.grace_s, memory_limit_mb=None,
                                      inject_restarts=0.0, slots=1, seed=None)
        options.keep_going = True  # the check watches the trainer: no job rule (a wrong tag's) cuts its run short
        probe = ProbeBackend(self.backend, primary=self.primary, outputs_root=root, cwd=options.cwd,
                             exclude=self.folder, clock=self.clock.monotonic, hold=hold)
        policy.release = probe.release
        runner = JobRunner(h.store, h.job, options, backend=probe,
                           clock=self.clock, signals=self.signals, policy=policy)
        state = runner.run()
        if probe.start_error is not None:
            raise probe.start_error
        if state == JobState.CANCELLED:
            raise KeyboardInterrupt
        return probe

    def seen(self, run: ProbeBackend, policy: ProbePolicy, name: str, number: int, *, stopped: bool,
             outside: list[str]) -> scorecard.RunSeen:
        """What one attempt of one replica did (nothing, when it never started)."""
        a = run.attempt(name, number)
        if a is None:
            return scorecard.RunSeen(stopped_by_check=stopped, outside_writes=outside)
        first = policy.first_report_mono.get(number) if name == self.primary else None
        ended = a.handle.poll()
        return run_seen(name=name, env=a.env, trial_dir=a.trial_dir, exit_code=None if ended is None else ended.status,
                        duration_s=_ended(a, self.clock) - a.start_mono, stopped=stopped,
                        first_report_s=None if first is None else max(0.0, first - a.start_mono),
                        outside=outside)

    def stop_seen(self, run: ProbeBackend, policy: ProbePolicy) -> scorecard.StopSeen:
        """The SIGTERM probe: the primary's interrupted attempt, what it left, and its restart."""
        grace_s = self.options.grace_s
        stop = scorecard.StopSeen(grace_s=grace_s, sent_after_steps=list(policy.sent_after_steps))
        first, again = run.attempt(self.primary, 0), run.attempt(self.primary, 1)
        if first is not None:
            exited = first.handle.poll()
            stop.exit_code = None if exited is None else exited.status
            # the host's replicas tell the signal; an image's runtime and Slurm, only the status
            stop.signal = None if exited is None else exited.signal
            sent = first.handle.stop_requested_at
            ended = exited.exited_mono if exited is not None else \
                (again.start_mono if again is not None else self.clock.monotonic())
            took = None if sent is None else max(0.0, ended - sent)
            stop.exit_after_s = took if took is not None and took < grace_s else None  # None: killed
        left = run.left.get(1)
        if left is not None:
            stop.reported_before_restart = [r.step for r in left.reports if r.tag == self.metric_id]
            stop.checkpoints_before_restart = left.checkpoints
        stop.restart = self.seen(run, policy, self.primary, 1, stopped=policy.stopped_by_box,
                                 outside=run.outside_writes())
        return stop


def _ended(a: Attempt, clock: Clock) -> float:
    ended = a.handle.poll()
    return ended.exited_mono if ended is not None else clock.monotonic()


def _check_command(job: JobSpec, local_command: Sequence[str] | None) -> None:
    """Refuse now a trainer whose command cannot be built (a probe's start would fail on it)."""
    trial_job = with_base_output(job, ".").trial_job  # with a local base, as the probes run it
    for _i, _j, pool in trial_job.replicas() if trial_job is not None else ():
        launch.base_command(pool, local_command)


def longer_run(study: StudySpec, params: Mapping[str, Value]) -> str:
    """How to make the probes' run longer: ``--params NAME=VALUE`` for an epoch-like integer parameter
    the spec lets grow (4× the value run, at most its maximum), else ""."""
    for p in study.all_parameters():
        value = params.get(p.parameter_id)
        words = p.parameter_id.lower().replace("-", "_").split("_")
        if p.type is not ParameterType.INTEGER or not isinstance(value, int) or p.max_value is None \
                or not any(w.rstrip("s") in _EPOCH_WORDS for w in words):
            continue
        more = min(int(p.max_value), max(4 * value, value + 1))
        if more > value:
            return f"--params {p.parameter_id}={more}"
    return ""


def _has_base(job: JobSpec) -> bool:
    return job.trial_job is not None and job.trial_job.base_output_directory is not None


def _one_trial(job: JobSpec) -> JobSpec:
    """The job a probe runs: one trial, no early stopping, no per-trial timeout and none of the
    spec's local settings (the check has its own time box and grace period)."""
    trial_job = job.trial_job
    if trial_job is not None:
        trial_job = replace(trial_job, scheduling=replace(trial_job.scheduling, timeout_s=None))
    return replace(job, max_trial_count=1, parallel_trial_count=1, max_failed_trial_count=0,
                   study=replace(job.study, stopping=None), trial_job=trial_job, local=LocalOptions())


def _replica_names(job: JobSpec) -> list[str]:
    """The trial's replicas, the primary first."""
    replicas = job.trial_job.replicas() if job.trial_job else []
    return [protocol.replica_name(i, j) for i, j, _pool in replicas] or [protocol.replica_name(0, 0)]


def _flags_text(job: JobSpec, params: Mapping[str, Value]) -> str:
    return " ".join(launch.trial_flags(job.study, params)) or "no flags"


def check_main(job: JobSpec, options: CheckOptions, *, fmt: str, out: Callable[[str], None] = print) -> int:
    """Run the check and print the scorecard; exit 1 when a check failed."""
    say = (lambda m: print(f"trials check: {m}", file=sys.stderr)) if fmt == "text" else (lambda _m: None)
    result = run_check(job, options, echo=say)
    text = scorecard.format_json(result.lines, result.notes) if fmt == "json" else \
        scorecard.format_text(result.lines, result.notes)
    out(text)
    return protocol.EXIT_OK if result.ready else protocol.EXIT_ERROR

"""``trials sweep``, ``resume`` and ``worker``: run a job's trials, then print its summary."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from trials import protocol
from trials.errors import ConfigError
from trials.printable import printable
from trials.records import JobState, TrialState

if TYPE_CHECKING:  # each command imports what it needs when it runs
    from typing import Any

    from trials.cli.progress import Progress
    from trials.controller.backend.registry import BackendEntry
    from trials.controller.gcs.emulator import Warm
    from trials.controller.jobs.registry import JobHandle
    from trials.controller.jobs.view import Job
    from trials.controller.loop.runner import JobRunner
    from trials.controller.trial.devices import DevicePlan
    from trials.spec import JobSpec


def _cmd_sweep(args: argparse.Namespace) -> int:
    endpoint = None
    if args.runtime is None:  # the host backend's Cloud Storage endpoint loads while Optuna does
        from trials.controller.process.host import warm_endpoint

        endpoint = warm_endpoint(None, args.pass_env)
    try:
        return _sweep(args, endpoint)
    finally:
        if endpoint is not None:
            endpoint.close()  # (a no-op once the job's backend took it)
        from trials.study import choice

        choice.close_warm()  # (a no-op once the job took it)


def _sweep(args: argparse.Namespace, endpoint: Warm | None) -> int:
    from dataclasses import replace

    from trials.controller.jobs import registry
    from trials.spec import Algorithm
    from trials.spec.load import load_spec

    job = load_spec(args.spec)
    job = _with_overrides(job, args)
    if args.algorithm:
        algo = Algorithm[args.algorithm]
        job = replace(job, study=replace(job.study, algorithm=algo))
        if algo is Algorithm.GRID_SEARCH:
            from trials.spec.export import to_rest
            from trials.spec.load import parse_spec

            parse_spec(to_rest(job), source="--algorithm GRID_SEARCH")  # re-validate the grid rule
    if args.sampler:
        from trials.study.choice import check_choice

        check_choice(args.sampler, job.study)  # before a job folder and id are used up
    _warm_suggester(job, args.sampler)
    command = args.local_command
    from trials.controller.trial.view import check_command

    runtime, images = _runtime(job, args, stored=None)  # a missing runtime or image: before a job folder
    own = _own_options(args, None, runtime, folders=[args.root, args.gcs_root or args.root, os.getcwd()])
    if not runtime.in_image:  # in an image, a pool without a command runs the image's ENTRYPOINT
        check_command(job, command, args.spec)  # before a job folder and id are used up
    if not args.no_trainer_check and runtime.trainer_preflight:
        from trials.controller.trial import preflight

        argv = preflight.trainer_command(job, command or None)
        if preflight.is_trials_trainer(argv):  # spec and Config disagree: say so before any trial
            line = preflight.check_trainer(argv, args.spec, required=False)
            if line.startswith("note:") and not args.quiet:
                print(line)
    plan = _device_plan(job, args, runtime)  # before creating the job: a spec this machine cannot run
    from trials.controller.backend import registry as backend_registry

    keeps = runtime is not backend_registry.get(None)  # (a job of the default runtime keeps none)
    h = registry.create_job(
        job, root=args.root, job_id=args.job_id, spec_path=args.spec, storage=args.storage,
        base_output_dir=args.base_output_dir, project_number=args.project_number,
        local_command=command or None, seed=args.seed, gcs_root=args.gcs_root, stale_after_s=args.stale_after,
        pass_env=args.pass_env, sampler=args.sampler, runtime=runtime.name if keeps else None,
        images=images if keeps else None, options=own if keeps else None,
    )
    return _run_and_report(h, args, resume=False, plan=plan, endpoint=endpoint)


def _warm_suggester(job: JobSpec, sampler: str | None) -> None:
    """Start the model's suggestion process now, when the job's sampler suggests ahead: it loads its
    libraries (~0.3 s of CPU) while this process loads Optuna, not when the first trials fill the cores."""
    from trials.study import choice

    if os.environ.get(protocol.ENV_SUGGEST, "ahead") == "inline":
        return
    name = sampler or choice.choose_sampler_name(job.study, n_trials=job.max_trial_count)
    if name in choice.AHEAD_SAMPLERS and job.max_trial_count > choice.AHEAD_SAMPLERS[name]:
        choice.warm(name)


def _runtime(job: JobSpec, args: argparse.Namespace, *, stored: Any,
             stored_images: Any = None) -> tuple[BackendEntry, dict[str, str]]:
    """``--runtime`` and ``--image``, else the job's own: checked (the runtime starts containers, every
    image exists locally, its own flags apply) before anything is written."""
    from trials.controller.backend import registry
    from trials.controller.jobs import backends

    runtime = backends.choose(args.runtime, stored)
    registry.check_flags(runtime, args)
    if not runtime.takes_images:
        return runtime, {}
    from trials.controller.container import runtime as container_runtime

    images = dict(stored_images) if isinstance(stored_images, dict) else {}
    images.update(container_runtime.parse_image_map(args.image))
    backends.preflight(runtime, job, images)
    return runtime, images


def _own_options(args: argparse.Namespace, stored: Any, runtime: BackendEntry, *,
                 folders: list[str]) -> dict[str, Any] | None:
    """The runtime's own options (``--partition``, ``--slurm-arg`` of Slurm), else the job's, checked
    (before anything is written); None: the runtime has none."""
    from trials.controller.jobs import backends

    return backends.own_options(runtime, args, stored, folders=folders,
                                say=(lambda line: None) if args.quiet else print)


def _cmd_resume(args: argparse.Namespace) -> int:
    ended = _resume_ended(args)
    if ended is not None:
        return ended
    from trials.controller.jobs import admin as job_admin
    from trials.controller.jobs import registry
    from trials.controller.jobs import run as job_run

    if args.max_trial_count is not None:  # the spec's rule, before the job is touched
        from trials.spec.node import INT32_MAX, Node

        Node(args.max_trial_count, "--max-trial-count", "command line").integer(lo=1, hi=INT32_MAX)
    h = registry.open_job(args.job, root=args.root, storage=args.storage)
    counts = _resume_counts(h, args)  # checked by the spec's rules before anything is written
    # a FAILED job resumed with the failure budget it has would fail again at once: say so, write nothing
    job_admin.check_failure_budget(h, max_failed=counts.get("max_failed_trial_count"),
                                   max_trial_count=args.max_trial_count, keep_going=args.keep_going)
    if args.local_command:  # a job created from an image without command can be given one now
        job_run.set_command(h, args.local_command)
    meta = h.store.meta()
    runtime, images = _runtime(h.job, args, stored=meta.runtime, stored_images=meta.images)
    if not runtime.in_image:
        job_run.check_runnable(h)
    own = _own_options(args, meta.options_of(runtime.name), runtime,
                       folders=[h.job_dir, meta.gcs_root or h.job_dir, meta.cwd or h.job_dir])
    kept = meta
    if (args.runtime or args.image) and (runtime.name, images) != (meta.runtime or "host", meta.images):
        kept = replace(kept, runtime=runtime.name, images=images, options=meta.options_of(runtime.name))
    if own is not None and own != meta.options_of(runtime.name):
        kept = replace(kept, options=own)
    h.store.write_meta(kept, since=meta)  # kept by the job from now on (nothing written when nothing changed)
    added, holder = 0, None
    if args.max_trial_count is not None or counts:
        added, holder = job_admin.change(h, max_trial_count=args.max_trial_count, counts=counts)
    if counts:
        print(f"job {h.job_id}: " + ", ".join(f"{_REST_NAMES[k]} {v}" for k, v in counts.items()) + " from now on")
    if args.max_trial_count is not None:
        if holder is not None:  # seen under the state lock: that controller has not ended and runs them
            by = f" (pid {holder})" if holder else ""
            print(f"job {h.job_id}: added {added} trials (now {h.job.max_trial_count}); the controller "
                  f"already running the job{by} runs them")
            return protocol.EXIT_OK
        print(f"job {h.job_id}: added {added} trials")
    return _run_and_report(h, args, resume=True)


# what ``trials resume`` may be given and still take the fast path: each changes nothing of the job
# and nothing the command prints for a job with nothing to run (any other option given: the slow path)
_FAST_RESUME_ARGS = frozenset({"command", "handler", "job", "root", "storage", "quiet", "json_logs", "echo",
                               "debug", "gc_paused"})  # (gc_paused: set by main)


def _resume_ended(args: argparse.Namespace) -> int | None:
    """``trials resume`` of a job that has nothing to run, answered without Optuna and without writing
    anything; None: run the slow path (open the job with Optuna, run the job loop), which stays the
    one source of truth.

    Taken only when no option but ``--root``, ``--storage`` (a journal), ``--quiet``, ``--json-logs``,
    ``--echo`` and ``--debug`` was given: never with ``--max-trial-count``, ``--max-failed-trial-count``,
    ``--parallel-trial-count``, a command after ``--``, ``--runtime``, ``--image``, ``--partition``,
    ``--slurm-arg``, ``--keep-going`` (what the slow path writes), nor ``--seed``, ``--gpus``,
    ``--ignore-accelerators``, ``--stale-after``, ``--grace-period``, ``--memory-limit``,
    ``--inject-restarts``, ``--pass-env`` (what it checks or prints); and only for a job
    ``jobs.ended.read_ended`` recognises (a journal job already ended SUCCEEDED with every trial
    ended, nothing in doubt). It prints what the slow path prints for such a job, through the same
    functions: the job's line and its outputs line, the loop's ``job_done`` event (``--json-logs``),
    the summary "no trial ran this time" and its best trials. Not printed: the warnings of the
    replica backend's start (the sandbox off, no Cloud Storage endpoint), which no run opens here.
    ``TRIALS_RESUME_FAST=0`` turns it off.
    """
    if os.environ.get(protocol.ENV_RESUME_FAST, "").strip().lower() in protocol.OFF_VALUES:
        return None
    if any(not (value is None or value is False or value == []) for name, value in vars(args).items()
           if name not in _FAST_RESUME_ARGS):
        return None
    from trials.controller.jobs.ended import read_ended

    h = read_ended(args.job, root=args.root, storage=args.storage)
    if h is None:
        return None
    from trials.controller.loop.events import JobDone

    n_trials = len(h.store.frozen_trials())
    if not args.quiet and not args.json_logs:
        print(_job_line(h, n_trials))
        print(_outputs_line(h))
    progress = _progress(h, args, n_trials)
    progress(JobDone(state=JobState.SUCCEEDED, error=None))  # the loop's last event for such a job
    progress.close()
    return _summary(h, args, max_parallel=0)


_REST_NAMES = {"max_failed_trial_count": "maxFailedTrialCount", "parallel_trial_count": "parallelTrialCount"}


def _resume_counts(h: JobHandle, args: argparse.Namespace) -> dict[str, int]:
    """``resume --max-failed-trial-count`` / ``--parallel-trial-count``: the changed counts, checked
    with sweep's rules (against the job's maxTrialCount, or the new ``--max-trial-count``)."""
    changed = _with_overrides(h.job, args)
    return {name: getattr(changed, name) for name in _REST_NAMES
            if getattr(args, name) is not None and getattr(changed, name) != getattr(h.job, name)}


def _cmd_worker(args: argparse.Namespace) -> int:
    from trials.controller.jobs import registry
    from trials.records import FINAL_JOB_STATES
    from trials.storage_url import is_journal_url

    if not args.storage or is_journal_url(args.storage):
        raise ConfigError(f"trials worker: --storage must be the database URL the job was created in "
                          f"(e.g. postgresql://user@host/db), got {args.storage!r}")
    if args.slots is not None and args.slots < 1:
        raise ConfigError(f"--parallel-trial-count must be >= 1, got {args.slots}")
    h = registry.open_job(args.job, root=args.root or protocol.DEFAULT_JOBS_ROOT, storage=args.storage)
    if args.root:  # this host's folder for the trials' logs and metric files
        h.job_dir = registry.job_dir_of(args.root, h.job_id)
    args.root = args.root or protocol.DEFAULT_JOBS_ROOT
    state = h.store.meta().state
    if state in FINAL_JOB_STATES or state == JobState.CANCELLING:
        print(f"job {h.job_id} is {state}; nothing to run")
        return 0
    return _run_and_report(h, args, resume=False, join=True)


def _with_overrides(job: JobSpec, args: argparse.Namespace) -> JobSpec:
    """The spec with the count flags applied, each checked by the spec's own rules (before any write)."""
    from dataclasses import replace

    from trials.spec import rules
    from trials.spec.node import INT32_MAX, Node

    def flag(name: str) -> Node | None:
        value = getattr(args, name)
        return None if value is None else Node(value, "--" + name.replace("_", "-"), "command line")

    n_max, n_par, n_fail = (flag(n) for n in ("max_trial_count", "parallel_trial_count", "max_failed_trial_count"))
    changes: dict[str, Any] = {
        field: node.integer(lo=0 if field == "max_failed_trial_count" else 1, hi=INT32_MAX)
        for field, node in (("max_trial_count", n_max), ("parallel_trial_count", n_par),
                            ("max_failed_trial_count", n_fail)) if node is not None}
    job = replace(job, **changes)
    if job.max_failed_trial_count > job.max_trial_count:
        rules.counts(Node(job.max_trial_count, "--max-trial-count" if n_max else "maxTrialCount", "command line"),
                     None, Node(job.max_failed_trial_count, "--max-failed-trial-count" if n_fail
                                else "maxFailedTrialCount", "command line"))
    if args.seed is not None:  # numpy seeds a sampler with 0..2**32-1; resume adds the trials run
        Node(args.seed, "--seed", "command line").integer(lo=0, hi=INT32_MAX)
    return job


def _device_plan(job: JobSpec, args: argparse.Namespace, runtime: BackendEntry | None = None) -> DevicePlan:
    """Check the worker options (before a sweep creates its job) and plan the GPUs (under Slurm, the
    cluster assigns them: this host hands out none)."""
    from trials.controller.trial import devices

    if args.stale_after is not None:
        from trials.study.database.leases import MIN_STALE_AFTER_S

        if not args.stale_after >= MIN_STALE_AFTER_S:
            raise ConfigError(f"--stale-after must be >= {MIN_STALE_AFTER_S:g} seconds (the job's lease "
                              f"timeout; workers heartbeat 6 times within it), got {args.stale_after}")
    if runtime is not None and not runtime.local_gpus:
        if args.gpus is not None:
            raise ConfigError(f"--gpus: under --runtime {runtime.name} the cluster assigns each trial its GPUs "
                              f"(machineSpec.acceleratorCount), got --gpus {args.gpus!r}")
        return devices.DevicePlan()
    return devices.plan(job, gpus=args.gpus, ignore_accelerators=args.ignore_accelerators)


def _loop_starts(args: argparse.Namespace) -> None:
    """The garbage collector, paused by ``main`` while a job command imports and opens its job (~8 ms of
    the controller's start-up, none of it cyclic garbage), runs again; what start-up made is frozen
    (``gc.freeze``: the loop's collections never walk Optuna's and numpy's modules). ``main`` undoes both."""
    if getattr(args, "gc_paused", False):
        args.gc_paused = False
        gc.freeze()
        gc.enable()


def _run_and_report(h: JobHandle, args: argparse.Namespace, *, resume: bool, join: bool = False,
                    plan: DevicePlan | None = None, endpoint: Warm | None = None) -> int:
    from trials.controller.loop.signals import LoopSignals

    signals = LoopSignals()  # from here on a stop signal is kept for the job loop, never the default action
    release = signals.hold()
    try:
        return _run_held(h, args, signals, resume=resume, join=join, plan=plan, endpoint=endpoint)
    finally:
        release()


def _run_held(h: JobHandle, args: argparse.Namespace, signals: Any, *, resume: bool, join: bool,
              plan: DevicePlan | None, endpoint: Warm | None = None) -> int:
    from trials.controller.backend import registry
    from trials.controller.jobs import backends
    from trials.controller.jobs import run as job_run
    from trials.controller.loop.events import JobWarning
    from trials.storage_url import redact

    meta = h.store.meta()
    plan = plan or _device_plan(h.job, args, backends.choose(args.runtime, meta.runtime))
    runtime, images = None, None
    own = None
    if join and (args.runtime or args.image or args.partition or args.slurm_arg):  # this worker's own runtime
        runtime, images = _runtime(h.job, args, stored=meta.runtime, stored_images=meta.images)
    chosen = runtime or registry.get(meta.runtime)  # (the job's is the default)
    if join:
        own = _own_options(args, meta.options_of(chosen.name), chosen,
                           folders=[h.job_dir, meta.gcs_root or h.job_dir, meta.cwd or h.job_dir])
    if args.keep_going and not meta.keep_going:
        h.store.write_meta(replace(meta, keep_going=True), since=meta)  # kept by the job, as its other run settings are
    progress = _progress(h, args, h.store.n_trials())
    shared = job_run.shared_job(h, stale_after_s=args.stale_after,
                                notify=lambda line: progress(JobWarning(message=line)), signals=signals)
    options = job_run.run_options(
        h, echo=args.echo, grace_period_s=args.grace_period, memory_limit_mb=args.memory_limit,
        inject_restarts=args.inject_restarts, slots=getattr(args, "slots", None), seed=args.seed,
        devices=plan, shared=shared, join=join, pass_env=args.pass_env,
        runtime=runtime.name if runtime is not None else None, images=images, own=own,
        warm_start=getattr(args, "warm_start", False),
    )
    if not args.quiet and not args.json_logs:
        who = f"worker {shared.me} joined " if join and shared is not None else ""
        print(who + _job_line(h, h.store.n_trials()))
        print(_outputs_line(h))
        if shared is not None and not join:
            print(f"more workers join with: trials worker {h.job_id} --storage {redact(h.storage_url)}")
    _loop_starts(args)
    try:
        runner = job_run.run_job(h, options, emit=progress, resume=resume, lock=not join, signals=signals,
                                 endpoint=endpoint)
    finally:
        progress.close()  # no live view left above an error (it is cleared at the job's end)
    if join and runner.state.leaving and shared is not None:
        print(f"worker {shared.me} left job {h.job_id} after starting {runner.state.n_started} trials; "
              f"its running trials went back to the queue")
        return protocol.EXIT_INTERRUPTED
    return _summary(h, args, max_parallel=runner.state.max_parallel, chaos=_chaos_line(runner))


def _job_line(h: Job, n_trials: int) -> str:
    from trials.cli.progress import sampler_words

    meta = h.store.meta()
    return (f"job {h.job_id}: {n_trials} trials, {h.job.parallel_trial_count} in parallel, "
            f"{sampler_words(meta.sampler, meta.startup, n_trials)}; folder {h.job_dir}")


def _outputs_line(h: Job) -> str:
    """Where the trials' AIP_* folders are, or that there are none (the job has no base, as on Vertex)."""
    base = h.job.trial_job.base_output_directory if h.job.trial_job else None
    if base is None:
        return ("outputs: the job has no baseOutputDirectory, so trials get no AIP_MODEL_DIR, AIP_CHECKPOINT_DIR "
                "or AIP_TENSORBOARD_LOG_DIR (as on Vertex); --base-output-dir DIR gives them a base")
    line = f"outputs: AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR under {base.rstrip('/')}/<trial id>/"
    gcs_root = h.store.meta().gcs_root
    if protocol.is_gcs_uri(base) and gcs_root is not None:
        with contextlib.suppress(ValueError):  # a base that maps outside /gcs was refused at creation
            line += f" (here: {protocol.local_path(base.rstrip('/') + '/', gcs_root)})"
    return line


def _progress(h: Job, args: argparse.Namespace, n_trials: int) -> Progress:
    from trials.cli.progress import TRIAL_LINES, Progress

    mode = "quiet" if args.quiet else ("json" if args.json_logs else None)
    return Progress(total=n_trials, metric_ids=h.job.study.metric_ids,
                    maximize=h.job.study.metrics[0].maximize, mode=mode,
                    trial_lines=0 if args.echo else TRIAL_LINES)  # echoed lines would break a redrawn view


def _chaos_line(runner: JobRunner) -> str | None:
    """Chaos mode's verdict on the run's measurements (None: no chaos)."""
    if runner.opt.inject_restarts <= 0:
        return None
    problems = []
    if runner.state.conflicts_total:
        problems.append(f"{runner.state.conflicts_total} steps reported twice with different values")
    if runner.state.lost_steps_total:
        problems.append(f"{runner.state.lost_steps_total} steps lost")
    verdict = ("consistent: no step lost or reported twice with different values"
               if not problems else "INCONSISTENT: " + ", ".join(problems))
    return f"chaos: {runner.injected_total} restarts injected; measurements {verdict}"


def _summary(h: Job, args: argparse.Namespace, *, max_parallel: int, chaos: str | None = None) -> int:
    """Print the job's summary (as its run left it: ``max_parallel`` trials at most ran at once here,
    0 for none; ``chaos``: chaos mode's line); returns the command's exit code."""
    from trials.controller.jobs import view as job_view
    from trials.protocol import format_flag

    meta = h.store.meta()
    state, error = meta.state, meta.error
    trials = h.store.frozen_trials()
    n_ok = sum(1 for t in trials if t.user_attrs.get("state") == TrialState.SUCCEEDED)
    n_bad = sum(1 for t in trials if t.user_attrs.get("state") == TrialState.INFEASIBLE)
    n_early = sum(1 for t in trials if t.user_attrs.get("stopped_early"))
    # a job whose every trial was infeasible "succeeded" as Vertex says, but nothing worked: exit 1
    nothing_worked = state == JobState.SUCCEEDED and n_ok == 0 and n_bad > 0
    codes = {JobState.SUCCEEDED: 0, JobState.CANCELLED: protocol.EXIT_INTERRUPTED}
    code = 1 if nothing_worked or state is None else codes.get(state, 1)
    if args.quiet:
        return code
    if args.json_logs:  # the summary as one more JSON line: stdout stays one object per line
        import json

        from trials.study.choice import suggestion_counts

        get = job_view.params_of(h)
        print(json.dumps({
            "severity": "INFO" if code == 0 else "ERROR",
            "message": f"job {h.job_id} {state}", "event": "job_summary", "job_id": h.job_id,
            "state": state, "succeeded": n_ok, "stopped_early": n_early, "infeasible": n_bad,
            "not_run": len(trials) - n_ok - n_bad, "error": error, "suggestions": suggestion_counts(trials),
            "best": [{"trial_id": str(t.number + 1), "values": list(t.values), "parameters": get(t)}
                     for t in job_view.best_trials(h)],
        }, default=str))
        return code
    ran = f"; at most {max_parallel} in parallel" if max_parallel else "; no trial ran this time"
    print(f"job {h.job_id} {state}: {n_ok} succeeded ({n_early} stopped early), {n_bad} infeasible, "
          f"{len(trials) - n_ok - n_bad} not run{ran}")
    from trials.cli.progress import suggestions_end_line

    if (words := suggestions_end_line(trials, meta.sampler)) is not None:
        print(words)
    if chaos is not None:
        print(chaos)
    if meta.study_stopped:
        print(printable(meta.study_stopped))
    if error:
        print(f"error: {printable(str(error.get('message')))}")
    best = job_view.best_trials(h)
    get = job_view.params_of(h)
    pareto = len(h.job.study.metrics) > 1
    if pareto and best:
        print(f"Pareto front ({len(best)} trials, {', '.join(h.job.study.metric_ids)}):")
    for t in best:
        metrics = ", ".join(f"{m}={v:.6g}" for m, v in zip(h.job.study.metric_ids, t.values, strict=False))
        flags = " ".join(format_flag(k, v) for k, v in get(t).items())
        print(f"{'  trial' if pareto else 'best trial'} {t.number + 1}: {metrics}  {flags}")
    if nothing_worked:
        first = next((t.user_attrs.get("infeasible_reason") for t in trials if t.user_attrs.get("infeasible_reason")),
                     "")
        print(f"error: no trial succeeded, so this job found nothing (first reason: {printable(str(first))})")
        return code
    if state == JobState.SUCCEEDED:
        return 0
    if state in (JobState.CANCELLED, JobState.CANCELLING):  # CANCELLING: other workers still stopping
        root = f" --root {args.root}" if args.root != protocol.DEFAULT_JOBS_ROOT else ""
        print(f"resume it with: trials resume {h.job_id}{root}")
        return protocol.EXIT_INTERRUPTED
    return 1


def _cmd_serve(args: argparse.Namespace) -> int:
    from trials.controller.api.options import JobOptions
    from trials.controller.api.server import serve_main

    options = JobOptions(runtime=args.runtime, images=tuple(args.image), gpus=args.gpus,
                         ignore_accelerators=args.ignore_accelerators, memory_limit_mb=args.memory_limit,
                         warm_start=args.warm_start)
    return serve_main(root=args.root, storage=args.storage, options=options, project_number=args.project_number,
                      host=args.host, port=args.port, quiet=args.quiet, token=args.token, no_auth=args.no_auth,
                      max_running_jobs=args.max_running_jobs)

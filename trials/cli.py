"""The ``trials`` command line: argparse subcommands; each imports what it needs when it runs."""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from trials import protocol
from trials.errors import ConfigError, TrialsError
from trials.printable import printable

if TYPE_CHECKING:  # each command imports what it needs when it runs
    from typing import Any

    from trials.controller.devices import DevicePlan
    from trials.controller.job import JobRunner
    from trials.controller.jobs import JobHandle
    from trials.controller.progress import Progress
    from trials.spec import JobSpec

Handler = Callable[[argparse.Namespace], int]


def _cmd_validate(args: argparse.Namespace) -> int:
    from trials.controller import trial_view
    from trials.spec.load import load_spec
    from trials.spec.text import summary

    job = load_spec(args.spec)
    print(summary(job))
    try:
        trial_view.check_command(job, args.local_command, args.spec)
    except ConfigError as err:  # valid for Vertex; `trials sweep` refuses it without `-- COMMAND`
        print(f"note: {err}")
        return protocol.EXIT_OK
    for line in trial_view.sample_view(job, local_command=args.local_command or None,
                                       pass_env=args.pass_env):
        print(line)
    if args.trainer is not None:
        from trials.controller import preflight

        argv = preflight.trainer_command(job, args.local_command or None,
                                         target=args.trainer or None)
        print(preflight.check_trainer(argv, args.spec, required=True))
    return protocol.EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    import os
    from dataclasses import replace

    from trials.spec.export import export_text

    command = None
    if os.path.isfile(args.spec):  # a spec file
        from trials.spec.load import load_spec

        job = load_spec(args.spec)
        name = os.path.splitext(os.path.basename(args.spec))[0]
    else:  # a job: the spec it stored, with its actual trial count
        from trials.controller import jobs as controller
        from trials.errors import JobNotFoundError

        try:
            h = controller.open_job(args.spec, root=args.root, storage=args.storage)
        except (JobNotFoundError, ConfigError) as err:
            raise JobNotFoundError(f"expected a spec file or a job id, got {args.spec!r}: no such file, "
                                   f"and {err}") from None
        n = len(h.store.frozen_trials())
        job = replace(h.job, max_trial_count=n) if n else h.job
        command = h.store.meta().get("local_command")
        name = h.job_id
    sys.stdout.write(export_text(job, args.format, image_uri=args.image_uri,
                                 base_output_dir=args.base_output_dir, command=command,
                                 display_name=name, draft=args.draft))
    return protocol.EXIT_OK


def _progress(h: JobHandle, args: argparse.Namespace) -> Progress:
    from trials.controller.progress import Progress

    mode = "quiet" if args.quiet else ("json" if args.json_logs else None)
    return Progress(total=len(h.store.frozen_trials()), metric_ids=h.job.study.metric_ids,
                    maximize=h.job.study.metrics[0].maximize, mode=mode)


def _device_plan(job: JobSpec, args: argparse.Namespace) -> DevicePlan:
    """Check the worker options (before a sweep creates its job) and plan the GPUs."""
    from trials.controller import devices

    if args.stale_after is not None:
        from trials.controller.worker import MIN_STALE_AFTER_S

        if not args.stale_after >= MIN_STALE_AFTER_S:
            raise ConfigError(f"--stale-after must be >= {MIN_STALE_AFTER_S:g} seconds (the job's lease "
                              f"timeout; workers heartbeat 6 times within it), got {args.stale_after}")
    return devices.plan(job, gpus=args.gpus, ignore_accelerators=args.ignore_accelerators)


def _run_and_report(h: JobHandle, args: argparse.Namespace, *, resume: bool, join: bool = False,
                    plan: DevicePlan | None = None) -> int:
    from trials.controller import jobs as controller
    from trials.storage_url import redact

    plan = plan or _device_plan(h.job, args)
    progress = _progress(h, args)
    shared = controller.shared_job(h, stale_after_s=args.stale_after,
                                   notify=lambda line: progress("warning", {"message": line}))
    options = controller.run_options(
        h, echo=args.echo, grace_period_s=args.grace_period, memory_limit_mb=args.memory_limit,
        inject_restarts=args.inject_restarts, slots=getattr(args, "slots", None), seed=args.seed,
        devices=plan, shared=shared, join=join, pass_env=args.pass_env,
    )
    if not args.quiet and not args.json_logs:
        who = f"worker {shared.me} joined " if join and shared is not None else ""
        print(f"{who}job {h.job_id}: {len(h.store.frozen_trials())} trials, "
              f"{h.job.parallel_trial_count} in parallel; folder {h.job_dir}")
        if shared is not None and not join:
            print(f"more workers join with: trials worker {h.job_id} --storage {redact(h.storage_url)}")
    runner = controller.run_job(h, options, progress=progress, resume=resume, lock=not join)
    if join and runner.leaving and shared is not None:
        print(f"worker {shared.me} left job {h.job_id} after starting {runner.n_started} trials; "
              f"its running trials went back to the queue")
        return protocol.EXIT_INTERRUPTED
    return _summary(h, runner, args)


def _summary(h: JobHandle, runner: JobRunner, args: argparse.Namespace) -> int:
    from trials.controller import jobs as controller
    from trials.protocol import format_flag

    state = h.store.get_meta("state")
    error = h.store.get_meta("error")
    trials = h.store.frozen_trials()
    n_ok = sum(1 for t in trials if t.user_attrs.get("state") == "SUCCEEDED")
    n_bad = sum(1 for t in trials if t.user_attrs.get("state") == "INFEASIBLE")
    n_early = sum(1 for t in trials if t.user_attrs.get("stopped_early"))
    # a job whose every trial was infeasible "succeeded" as Vertex says, but nothing worked: exit 1
    nothing_worked = state == "JOB_STATE_SUCCEEDED" and n_ok == 0 and n_bad > 0
    code = 1 if nothing_worked else {"JOB_STATE_SUCCEEDED": 0, "JOB_STATE_CANCELLED": protocol.EXIT_INTERRUPTED}.get(
        state, 1)
    if args.quiet:
        return code
    if args.json_logs:  # the summary as one more JSON line: stdout stays one object per line
        import json

        get = controller.params_of(h)
        print(json.dumps({
            "severity": "INFO" if code == 0 else "ERROR",
            "message": f"job {h.job_id} {state}", "event": "job_summary", "job_id": h.job_id,
            "state": state, "succeeded": n_ok, "stopped_early": n_early, "infeasible": n_bad,
            "not_run": len(trials) - n_ok - n_bad, "error": error,
            "best": [{"trial_id": str(t.number + 1), "values": list(t.values), "parameters": get(t)}
                     for t in controller.best_trials(h)],
        }, default=str))
        return code
    ran = f"; at most {runner.max_parallel} in parallel" if runner.max_parallel else "; no trial ran this time"
    print(f"job {h.job_id} {state}: {n_ok} succeeded ({n_early} stopped early), {n_bad} infeasible, "
          f"{len(trials) - n_ok - n_bad} not run{ran}")
    if runner.opt.inject_restarts > 0:
        problems = []
        if runner.conflicts_total:
            problems.append(f"{runner.conflicts_total} steps reported twice with different values")
        if runner.lost_steps_total:
            problems.append(f"{runner.lost_steps_total} steps lost")
        verdict = ("consistent: no step lost or reported twice with different values"
                   if not problems else "INCONSISTENT: " + ", ".join(problems))
        print(f"chaos: {runner.injected_total} restarts injected; measurements {verdict}")
    if error:
        print(f"error: {printable(str(error.get('message')))}")
    best = controller.best_trials(h)
    get = controller.params_of(h)
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
    if state == "JOB_STATE_SUCCEEDED":
        return 0
    if state in ("JOB_STATE_CANCELLED", "JOB_STATE_CANCELLING"):  # CANCELLING: other workers still stopping
        root = f" --root {args.root}" if args.root != "trials-jobs" else ""
        print(f"resume it with: trials resume {h.job_id}{root}")
        return protocol.EXIT_INTERRUPTED
    return 1


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


def _cmd_sweep(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from trials.controller import jobs as controller
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
    command = args.local_command
    from trials.controller.trial_view import check_command

    check_command(job, command, args.spec)  # before a job folder and id are used up
    if not args.no_trainer_check:
        from trials.controller import preflight

        argv = preflight.trainer_command(job, command or None)
        if preflight.is_trials_trainer(argv):  # spec and Config disagree: say so before any trial
            line = preflight.check_trainer(argv, args.spec, required=False)
            if line.startswith("note:") and not args.quiet:
                print(line)
    plan = _device_plan(job, args)  # before creating the job: a spec this machine cannot run
    h = controller.create_job(
        job, root=args.root, job_id=args.job_id, spec_path=args.spec, storage=args.storage,
        base_output_dir=args.base_output_dir, project_number=args.project_number,
        local_command=command or None, seed=args.seed, gcs_root=args.gcs_root, stale_after_s=args.stale_after,
        pass_env=args.pass_env,
    )
    return _run_and_report(h, args, resume=False, plan=plan)


def _cmd_check(args: argparse.Namespace) -> int:
    from trials.controller.check import CheckOptions, check_main, parse_params
    from trials.spec.load import load_spec

    job = load_spec(args.spec)
    if not args.time_limit > 0:
        raise ConfigError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    options = CheckOptions(
        time_limit_s=args.time_limit, grace_s=args.grace_period, params=parse_params(args.params, job.study),
        local_command=args.local_command or None, folder=args.keep, pass_env=tuple(args.pass_env),
    )
    return check_main(job, options, fmt=args.format)


def _cmd_worker(args: argparse.Namespace) -> int:
    from trials.controller import jobs as controller
    from trials.controller.job import CANCELLING, FINAL_STATES
    from trials.storage_url import is_journal_url

    if not args.storage or is_journal_url(args.storage):
        raise ConfigError(f"trials worker: --storage must be the database URL the job was created in "
                          f"(e.g. postgresql://user@host/db), got {args.storage!r}")
    if args.slots is not None and args.slots < 1:
        raise ConfigError(f"--parallel-trial-count must be >= 1, got {args.slots}")
    h = controller.open_job(args.job, root=args.root or "trials-jobs", storage=args.storage)
    if args.root:  # this host's folder for the trials' logs and metric files
        h.job_dir = controller.job_dir_of(args.root, h.job_id)
    args.root = args.root or "trials-jobs"
    state = h.store.get_meta("state")
    if state in FINAL_STATES or state == CANCELLING:
        print(f"job {h.job_id} is {state}; nothing to run")
        return 0
    return _run_and_report(h, args, resume=False, join=True)


def _cmd_resume(args: argparse.Namespace) -> int:
    from trials.controller import jobs as controller

    if args.max_trial_count is not None:  # the spec's rule, before the job is touched
        from trials.spec.node import INT32_MAX, Node

        Node(args.max_trial_count, "--max-trial-count", "command line").integer(lo=1, hi=INT32_MAX)
    h = controller.open_job(args.job, root=args.root, storage=args.storage)
    if args.local_command:  # a job created from an image without command can be given one now
        controller.set_command(h, args.local_command)
    controller.check_runnable(h)
    if args.max_trial_count is not None:
        added = controller.extend(h, args.max_trial_count)
        holder = controller.running_controller(h)
        if holder is not None:  # the extension took effect: the running controller runs them
            by = f" (pid {holder})" if holder else ""
            print(f"job {h.job_id}: added {added} trials (now {h.job.max_trial_count}); the controller "
                  f"already running the job{by} runs them")
            return protocol.EXIT_OK
        print(f"job {h.job_id}: added {added} trials")
    return _run_and_report(h, args, resume=True)


def _cmd_describe(args: argparse.Namespace) -> int:
    import json

    from trials.controller import describe
    from trials.controller import jobs as controller

    h = controller.open_job(args.job, root=args.root, storage=args.storage)
    if args.format == "local-json":  # attempts, exit statuses, stop reasons, folders, workers
        print(json.dumps(controller.describe_local(h), indent=2))
        return 0
    rest = controller.describe(h)
    if args.format == "json":  # exactly the v1 HyperparameterTuningJob
        print(json.dumps(rest, indent=2))
        return 0
    header, body = describe.rows(rest, h.job.study.reported_metric_ids, local=controller.describe_local(h)["trials"],
                                 exact=args.format == "csv")
    if args.format == "csv":
        sys.stdout.write(describe.format_csv(header, body))
        return 0
    print(f"job {h.job_id}  {rest['state']}  {len(rest['trials'])} trials  folder {h.job_dir}")
    if rest.get("error"):
        print(f"error: {printable(str(rest['error'].get('message')))}")
    print(describe.format_table(header, body))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from trials.controller import describe
    from trials.controller import jobs as controller

    jobs = controller.list_jobs(args.root, args.storage)
    if not jobs:
        print(f"no jobs under {args.root}" if not args.storage else "no jobs in the storage")
        return 0
    print(describe.format_table(["job", "state", "trials", "created"],
                                [[j["job_id"], j["state"], str(j["trials"]), j["create_time"]] for j in jobs]))
    return 0


def _cmd_cancel(args: argparse.Namespace) -> int:
    from trials.controller import jobs as controller

    h = controller.open_job(args.job, root=args.root, storage=args.storage)
    state = controller.cancel(h)
    print(f"job {h.job_id}: {state}")
    return 0


def _cmd_repair(args: argparse.Namespace) -> int:
    from trials.controller import jobs as controller

    kept, dropped, backup = controller.repair_job(args.root, args.job)
    if not dropped:
        print(f"job {args.job}: the journal is readable ({kept} records); nothing to repair")
        return 0
    print(f"job {args.job}: kept {kept} records, dropped {len(dropped)}; the original is {backup}")
    for line in dropped:
        print(f"  dropped {line}")
    return 0


def _cmd_best(args: argparse.Namespace) -> int:
    import json

    from trials.controller import jobs as controller
    from trials.protocol import format_flag, local_path

    h = controller.open_job(args.job, root=args.root, storage=args.storage)
    get = controller.params_of(h)
    meta = h.store.meta()
    metric_ids = h.job.study.metric_ids
    best: list[dict[str, Any]] = [
            {"trial_id": str(t.number + 1), "metrics": dict(zip(metric_ids, t.values, strict=False)),
             "parameters": get(t), "flags": [format_flag(k, v) for k, v in get(t).items()],
             "model_dir": local_path(meta["base_output"].rstrip("/") + f"/{t.number + 1}/model/",
                                     meta["gcs_root"])}
            for t in controller.best_trials(h)]
    if args.format == "json":  # exact numbers; one trial, or the Pareto front of several metrics
        print(json.dumps({"job_id": h.job_id, "metric_ids": list(metric_ids), "best": best}, indent=2))
        return 0 if best else 1
    if not best:
        print(f"job {h.job_id} has no succeeded trial yet")
        return 1
    for b in best:
        print(f"trial {b['trial_id']}: " + ", ".join(f"{m}={v:.6g}" for m, v in b["metrics"].items()))
        print("  flags: " + " ".join(b["flags"]))
        print(f"  model: {b['model_dir']}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from trials.controller import describe
    from trials.controller import jobs as controller
    from trials.controller.report import write_report

    h = controller.open_job(args.job, root=args.root, storage=args.storage)
    report = write_report(h, out_dir=args.out, plots=not args.no_plots)
    if report.top_rows:
        print(report.top_title)
        print(describe.format_table(report.top_header, report.top_rows))
    else:
        print(f"job {h.job_id}: no trial has succeeded yet")
    if report.note:
        print(f"note: {report.note}")
    for title, why in report.skipped:
        print(f"skipped {title}: {why}")
    print(f"report: {report.index_html}")
    return 0


def _job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="trials-jobs", help="directory holding one folder per job (default ./trials-jobs)")
    p.add_argument("--storage", help="Optuna storage URL (default: journal file in the job folder)")


def _non_negative(text: str) -> float:
    """An argparse type: a finite number >= 0 (NaN, inf or a negative rate would hang or mislead)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--grace-period", type=_non_negative, metavar="SECONDS",
                   help="SIGTERM -> SIGKILL grace (default 10)")
    p.add_argument("--memory-limit", type=_positive_int, metavar="MB",
                   help="per-replica memory limit; over it the replica is OOM-killed")
    p.add_argument("--inject-restarts", type=_non_negative, metavar="RATE",
                   help="chaos mode: SIGTERM+restart replicas at RATE per trial-second")
    p.add_argument("--seed", type=int, help="sampler and chaos seed")
    p.add_argument("--echo", action="store_true", help="echo every replica's output, prefixed")
    p.add_argument("--quiet", action="store_true", help="print only warnings and the summary's exit code")
    p.add_argument("--json-logs", action="store_true", help="one JSON object per event")
    p.add_argument("--gpus", metavar="IDS", help="GPUs to hand out, e.g. 0,1,2 (default: nvidia-smi -L)")
    p.add_argument("--ignore-accelerators", action="store_true",
                   help="run a spec that asks for accelerators on CPU (CUDA_VISIBLE_DEVICES='')")
    p.add_argument("--stale-after", type=float, metavar="SECONDS",
                   help="database jobs: a trial whose worker missed heartbeats this long is re-run (default 30)")
    _pass_env_arg(p)


def _env_name(text: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise argparse.ArgumentTypeError(f"expected an environment variable name, got {text!r}")
    return text


def _pass_env_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pass-env", action="append", default=[], type=_env_name, metavar="NAME",
                   help="pass this host variable to the trials although it is withheld "
                        "(GOOGLE_*, CLOUDSDK_*, AWS_*, ...; repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trials",
        description="Run Vertex AI HyperparameterTuningJobs offline.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("validate", help="check a spec and print what a trial would get")
    p.add_argument("spec", help="gcloud YAML, REST JSON, legacy hptuning_config.yaml or search space")
    _pass_env_arg(p)
    p.add_argument("--trainer", nargs="?", const="", metavar="TARGET",
                   help="check every parameter, type, range and choice against a trials.main/trials-run "
                        "trainer: module:function or file.py[:function], or (no TARGET) the command "
                        "after -- or the spec's")
    p.set_defaults(handler=_cmd_validate)

    p = sub.add_parser("export", help="write a spec or a job's spec as gcloud YAML or REST JSON")
    p.add_argument("spec", metavar="JOB|SPEC", help="a spec file, or the id of a job under --root / in --storage")
    _job_args(p)
    p.add_argument("--format", choices=("gcloud-yaml", "rest-json"), default="gcloud-yaml")
    p.add_argument("--image-uri", help="container image for every pool (containerSpec.imageUri, "
                   "pythonPackageSpec.executorImageUri)")
    p.add_argument("--base-output-dir", metavar="gs://BUCKET/PATH",
                   help="baseOutputDirectory of the exported job (a local one is refused)")
    p.add_argument("--draft", action="store_true",
                   help="write the job even when Vertex would reject it (no image, local paths)")
    p.set_defaults(handler=_cmd_export)

    p = sub.add_parser("sweep", help="run a tuning job locally",
                       usage="trials sweep SPEC [options] [-- LOCAL COMMAND...]")
    p.add_argument("spec")
    _job_args(p)
    p.add_argument("--job-id")
    p.add_argument("--max-trial-count", type=int)
    p.add_argument("--parallel-trial-count", type=int)
    p.add_argument("--max-failed-trial-count", type=int)
    p.add_argument("--algorithm", choices=("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"))
    p.add_argument("--base-output-dir")
    p.add_argument("--gcs-root", help="local directory standing in for /gcs (default: <job>/gcs)")
    p.add_argument("--project-number", help="CLOUD_ML_PROJECT_ID given to trials (default 000000000000)")
    p.add_argument("--no-trainer-check", action="store_true",
                   help="do not ask a trials.main/trials-run trainer to check the spec's flags first")
    _run_args(p)
    p.set_defaults(handler=_cmd_sweep)

    p = sub.add_parser("resume", help="continue a job (after a crash or cancel), or add trials")
    p.add_argument("job")
    _job_args(p)
    p.add_argument("--max-trial-count", type=int, help="new total number of trials")
    _run_args(p)
    p.set_defaults(handler=_cmd_resume)

    p = sub.add_parser("check", help="run a trainer for real and score it against Vertex's rules",
                       usage="trials check SPEC [options] [-- COMMAND ...]")
    p.add_argument("spec")
    p.add_argument("--params", action="append", default=[], metavar="NAME=VALUE",
                   help="parameter values (default: the spec's first values; repeatable, or comma-separated)")
    p.add_argument("--time-limit", type=float, default=180.0, metavar="SECONDS",
                   help="time box for all the runs (default 180)")
    p.add_argument("--grace-period", type=_non_negative, default=10.0, metavar="SECONDS",
                   help="how long a replica may take to exit after SIGTERM (default 10)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--keep", metavar="DIR", help="keep the runs' folders (logs, outputs) in DIR")
    _pass_env_arg(p)
    p.set_defaults(handler=_cmd_check)

    p = sub.add_parser("worker", help="join a job in a database and run its trials until it is done",
                       usage="trials worker JOB --storage URL [--parallel-trial-count N] [options]")
    p.add_argument("job")
    p.add_argument("--storage", help="the job's database URL, e.g. postgresql://user@host/db")
    p.add_argument("--root", help="this host's folder for trial logs (default: the job's folder)")
    p.add_argument("--parallel-trial-count", type=int, dest="slots", metavar="N",
                   help="at most N trials on this worker (the job's parallelTrialCount caps all workers)")
    _run_args(p)
    p.set_defaults(handler=_cmd_worker)

    p = sub.add_parser("describe", help="print a job (Vertex REST shape with --format json)")
    p.add_argument("job")
    _job_args(p)
    p.add_argument("--format", choices=("table", "json", "csv", "local-json"), default="table",
                   help="json: the v1 HyperparameterTuningJob resource, exactly; local-json: what "
                   "only the local run knows (attempts, exit statuses, stop reasons, folders)")
    p.set_defaults(handler=_cmd_describe)

    p = sub.add_parser("list", help="list jobs")
    _job_args(p)
    p.set_defaults(handler=_cmd_list)

    p = sub.add_parser("cancel", help="cancel a running job")
    p.add_argument("job")
    _job_args(p)
    p.set_defaults(handler=_cmd_cancel)

    p = sub.add_parser("repair", help="rewrite a job's journal with every readable record; say what was dropped")
    p.add_argument("job")
    p.add_argument("--root", default="trials-jobs", help="directory holding one folder per job (default ./trials-jobs)")
    p.set_defaults(handler=_cmd_repair)

    p = sub.add_parser("best", help="the best trial's flags and model directory")
    p.add_argument("job")
    _job_args(p)
    p.add_argument("--format", choices=["text", "json"], default="text",
                   help="json: exact values, parameters, flags and model folder of each best trial")
    p.set_defaults(handler=_cmd_best)

    p = sub.add_parser("report", help="write an HTML report with plots into the job folder")
    p.add_argument("job")
    _job_args(p)
    p.add_argument("--out", metavar="DIR", help="where to write index.html and the PNGs (default <job folder>/report)")
    p.add_argument("--no-plots", action="store_true", help="tables only, no matplotlib")
    p.set_defaults(handler=_cmd_report)

    return parser


def _version() -> str:
    from trials import __version__

    return f"trials {__version__}"


_UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for bad input, one line on stderr)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    local_command: list[str] = []
    if "--" in argv:  # `trials sweep SPEC [options] -- LOCAL COMMAND...`
        cut = argv.index("--")
        argv, local_command = argv[:cut], argv[cut + 1:]
    args, extra = parser.parse_known_args(argv)
    if extra:
        hint = _command_hint(args, extra, local_command)
        if hint is None:
            parser.parse_args(argv)  # argparse's own usage and "unrecognized arguments", exit 2
        print(f"trials {args.command}: error: {hint}", file=sys.stderr)
        return protocol.EXIT_USAGE
    args.local_command = local_command
    try:
        code: int = args.handler(args)
        return code
    except BrokenPipeError:  # `trials describe JOB | head`
        sys.stderr.close()
        return protocol.EXIT_OK
    except KeyboardInterrupt:
        print("trials: interrupted", file=sys.stderr)
        return protocol.EXIT_INTERRUPTED
    except TrialsError as err:
        if args.debug:
            return _traceback(args, err.exit_code)
        print(f"trials: error: {_scrub(args, _one_line(str(err)))}", file=sys.stderr)
        return err.exit_code
    except OSError as err:
        if args.debug:
            return _traceback(args, protocol.EXIT_ERROR)
        if err.errno in _UNWRITABLE:  # a read-only job root, a folder of another user
            where = f" {err.filename}" if err.filename else ""
            print(f"trials: error: cannot write{_scrub(args, _one_line(where))}: {err.strerror} (trials "
                  f"{args.command} needs write access to the job folder; check --root or the mount)",
                  file=sys.stderr)
            return protocol.EXIT_USAGE
        print(f"trials: internal error: {type(err).__name__}: {_scrub(args, _one_line(str(err)))} "
              "(run with --debug for the traceback)", file=sys.stderr)
        return protocol.EXIT_ERROR
    except Exception as err:  # noqa: BLE001 - the CLI's last line of defence
        if args.debug:
            return _traceback(args, protocol.EXIT_ERROR)
        print(f"trials: internal error: {type(err).__name__}: {_scrub(args, _one_line(str(err)))} "
              f"(run with --debug for the traceback)", file=sys.stderr)
        return protocol.EXIT_ERROR


_TAKES_COMMAND = ("sweep", "resume", "validate", "check")


def _command_hint(args: argparse.Namespace, extra: list[str], local_command: list[str]) -> str | None:
    """For a command that runs a trainer: the words argparse did not take were meant as the command."""
    if args.command not in _TAKES_COMMAND or local_command or extra[0].startswith("-"):
        return None
    import shlex

    words = list(extra)
    options = "[options]"
    if getattr(args, "trainer", None):  # `validate SPEC --trainer python train.py`: argparse took `python`
        words.insert(0, args.trainer)
        options = "--trainer"
    given = " ".join(shlex.quote(word) for word in words)
    target = str(getattr(args, "spec", None) or getattr(args, "job", ""))
    return (f"unexpected arguments {given!r}: put the trainer's command after `--`, as in "
            f"`trials {args.command} {shlex.quote(target)} {options} -- {given}`")


def _scrub(args: argparse.Namespace, text: str) -> str:
    """Never print a storage password, whatever the message (drivers quote URLs and DSNs)."""
    url = getattr(args, "storage", None)
    if not url or "@" not in url:
        return text
    from trials.storage_url import scrub

    return scrub(text, url)


def _traceback(args: argparse.Namespace, code: int) -> int:
    import traceback

    sys.stderr.write(_scrub(args, traceback.format_exc()))
    return code


def _one_line(text: str) -> str:
    return " ".join(text.split()) if "\n" in text else text


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

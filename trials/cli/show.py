"""``trials describe``, ``list``, ``best``, ``report`` and ``export``: read a job (or a spec) and print it."""

from __future__ import annotations

import argparse
import os
import shlex
import stat
import sys
from typing import TYPE_CHECKING

from trials import protocol
from trials.errors import ConfigError
from trials.printable import printable
from trials.records import JobState

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from trials.job_meta import JobMeta
    from trials.spec import JobSpec


def _cmd_describe(args: argparse.Namespace) -> int:
    from trials.controller.jobs import describe
    from trials.controller.jobs import view as job_view
    from trials.jsontext import dumps_indented

    if args.format == "json":  # exactly the v1 HyperparameterTuningJob
        print(job_view.describe_text(args.job, root=args.root, storage=args.storage))
        return 0
    # a table or CSV counts each trial's steps and shows no attempt: slim finished trials will do
    h = job_view.read_job(args.job, root=args.root, storage=args.storage,
                          whole=args.format not in ("table", "csv"))
    if args.format == "local-json":  # attempts, exit statuses, stop reasons, folders, workers
        print(dumps_indented(job_view.describe_local(h)))
        return 0
    header, body = job_view.table(h, exact=args.format == "csv")
    if args.format == "csv":
        sys.stdout.write(describe.format_csv(header, body))
        return 0
    meta = h.store.meta()  # (what the REST job says of it: its state, its error)
    print(f"job {h.job_id}  {meta.state or JobState.QUEUED}  {len(body)} trials  folder {h.job_dir}")
    if meta.error:
        print(f"error: {printable(str(meta.error.get('message')))}")
    if meta.study_stopped:
        print(printable(meta.study_stopped))
    ahead = job_view.suggestions_line(meta)
    if ahead:
        print(ahead)
    print(describe.format_table(header, body))
    if made := job_view.suggestions_made_line(meta, h.store.frozen_trials()):  # model or random (issue 48)
        print(made)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from trials.controller.jobs import describe
    from trials.controller.jobs import view as job_view

    jobs = job_view.list_jobs(args.root, args.storage)
    if not jobs:
        print(f"no jobs under {args.root}" if not args.storage else "no jobs in the storage")
        return 0
    print(describe.format_table(["job", "state", "trials", "created"],
                                [[j["job_id"], j["state"], str(j["trials"]), j["create_time"]] for j in jobs]))
    return 0


def _cmd_best(args: argparse.Namespace) -> int:
    import json

    from trials.controller.jobs import view as job_view
    from trials.protocol import format_flag

    h = job_view.read_job(args.job, root=args.root, storage=args.storage, whole=False)
    get = job_view.params_of(h)
    meta = h.store.meta()
    metric_ids = h.job.study.metric_ids
    best: list[dict[str, Any]] = [
            {"trial_id": str(t.number + 1), "metrics": dict(zip(metric_ids, t.values, strict=False)),
             "parameters": get(t), "flags": [format_flag(k, v) for k, v in get(t).items()],
             **_command(h.job, meta.local_command, get(t)), "cwd": meta.cwd,
             "model_dir": _model_dir(meta, t)}
            for t in job_view.best_trials(h)]
    if args.format == "json":  # exact numbers; one trial, or the Pareto front of several metrics
        print(json.dumps({"job_id": h.job_id, "metric_ids": list(metric_ids), "best": best}, indent=2))
        return 0 if best else 1
    if not best:
        print(f"job {h.job_id} has no succeeded trial yet")
        return 1
    for b in best:
        print(f"trial {b['trial_id']}: " + ", ".join(f"{m}={v:.6g}" for m, v in b["metrics"].items()))
        if b["command"] is not None:
            print("  command: " + printable(shlex.join(b["command"])))
        else:  # an image's own ENTRYPOINT ran: what it was given
            print(f"  command: the ENTRYPOINT of {printable(b['image'] or 'the image')} with "
                  + printable(shlex.join(b["args"])))
        if b["cwd"]:
            print(f"  run in: {printable(shlex.quote(b['cwd']))}")
        print(f"  model: {b['model_dir'] or 'no AIP_MODEL_DIR (the job has no baseOutputDirectory)'}")
    return 0


def _command(job: JobSpec, local_command: Sequence[str] | None, params: dict[str, Any]) -> dict[str, Any]:
    """What the trial's primary replica ran, as the launcher builds it (``launch.replica_argv``):
    ``command`` its whole argv (None: its image's ENTRYPOINT ran), ``args`` what followed the
    command, ``image`` the pool's image."""
    from trials.controller.trial import launch
    from trials.spec import TrialJobSpec, WorkerPoolSpec

    trial_job = job.trial_job or TrialJobSpec(worker_pools=(WorkerPoolSpec(),))
    pool = trial_job.replicas()[0][2]
    flags = launch.trial_flags(job.study, params)
    image, _ = launch.image_command(pool, local_command)
    try:
        command: list[str] | None = launch.replica_argv(pool, local_command, flags, as_written=True)
    except ConfigError:  # a container runtime ran the image's ENTRYPOINT
        command = None
    return {"command": command, "args": [*pool.args, *flags], "image": image}


def _model_dir(meta: JobMeta, t: Any) -> str | None:
    """Where a trial's model is: ``<base>/<trial>/model/`` (local), or without a base output directory
    the trials runtime's own ``<trial folder>/model/`` when it is a real folder; else None."""
    from trials.protocol import local_path

    if meta.base_output:
        return local_path(meta.base_output.rstrip("/") + f"/{t.number + 1}/model/", meta.gcs_root)
    trial_dir = t.user_attrs.get("trial_dir") or (os.path.join(meta.job_dir, str(t.number + 1))
                                                  if meta.job_dir else None)
    if isinstance(trial_dir, str):
        path = os.path.join(trial_dir, "model")
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                return path + "/"
        except OSError:
            pass
    return None


def _cmd_report(args: argparse.Namespace) -> int:
    from trials.controller.jobs import describe
    from trials.controller.jobs import view as job_view
    from trials.controller.report.page import write_report

    h = job_view.read_job(args.job, root=args.root, storage=args.storage)
    if not args.no_plots:
        from trials.controller.report.plots import matplotlib_available

        if not matplotlib_available():
            from trials.errors import ConfigError

            raise ConfigError("trials report: its plots need matplotlib, which is not installed: pip install "
                              "'trials[report]' (or --no-plots for a report of tables only)")
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


def _cmd_export(args: argparse.Namespace) -> int:
    """The spec, or a job's stored spec, as Vertex takes it: the export's own changes said on stderr, one line
    each, so nothing that runs on Vertex changes without a word (the local command only when asked)."""
    import os
    import shlex
    from dataclasses import replace

    from trials.printable import printable
    from trials.spec.export import changes, prepare, render

    command = None
    if os.path.isfile(args.spec):  # a spec file
        from trials.spec.load import load_spec

        job = stored = load_spec(args.spec)
        name = os.path.splitext(os.path.basename(args.spec))[0]
    else:  # a job: the spec it stored, with its actual trial count
        from trials.controller.jobs import view as job_view
        from trials.errors import JobNotFoundError

        try:
            h = job_view.read_job(args.spec, root=args.root, storage=args.storage)
        except (JobNotFoundError, ConfigError) as err:
            raise JobNotFoundError(f"expected a spec file or a job id, got {args.spec!r}: no such file, "
                                   f"and {err}") from None
        stored = h.job
        n = len(h.store.frozen_trials())
        job = replace(h.job, max_trial_count=n) if n else h.job
        command = h.store.meta().local_command
        name = h.job_id
    if args.with_local_command and not command:
        raise ConfigError(f"--with-local-command: {args.spec} has no local command (a job run with `-- COMMAND` "
                          f"has one; a spec file has none)")
    final = prepare(job, image_uri=args.image_uri, base_output_dir=args.base_output_dir,
                    command=command if args.with_local_command else None, display_name=name)
    text = render(final, args.format, draft=args.draft)
    for line in changes(stored, final):
        print(f"trials export: {printable(line)}", file=sys.stderr)
    if command and not args.with_local_command:
        shown = printable(" ".join(shlex.quote(word) for word in command))
        print(f"trials export: note: the job ran locally with `{shown}` (after --); the export leaves it out, so on "
              f"Vertex the image's ENTRYPOINT runs (--with-local-command puts it in containerSpec.command)",
              file=sys.stderr)
    sys.stdout.write(text)
    return protocol.EXIT_OK

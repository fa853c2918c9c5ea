"""``trials validate``, ``check``, ``cancel``, ``repair`` and ``gc``: check a spec or a trainer, look after a job."""

from __future__ import annotations

import argparse

from trials import protocol
from trials.errors import ConfigError


def _cmd_validate(args: argparse.Namespace) -> int:
    from trials.controller.container import runtime as container_runtime
    from trials.controller.jobs import backends
    from trials.controller.trial import view as trial_view
    from trials.spec.load import load_spec
    from trials.spec.text import summary

    job = load_spec(args.spec)
    runtime = backends.choose(args.runtime)
    images = container_runtime.parse_image_map(args.image)
    print(summary(job))
    if not runtime.in_image:
        try:
            trial_view.check_command(job, args.local_command, args.spec)
        except ConfigError as err:  # valid for Vertex; `trials sweep` refuses it without `-- COMMAND`
            print(f"note: {err}")
            return protocol.EXIT_OK
    for line in trial_view.sample_view(job, local_command=args.local_command or None,
                                       pass_env=args.pass_env, runtime=runtime.name, images=images):
        print(line)
    if args.trainer is not None:
        from trials.controller.trial import preflight

        lines, error = preflight.validate_trainer(job, args.spec, local_command=args.local_command or None,
                                                  target=args.trainer or None, pass_env=args.pass_env)
        for line in lines:
            print(line)
        if error is not None:
            raise ConfigError(error)
    return protocol.EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    from trials.controller.check.check import CheckOptions, check_main, parse_params
    from trials.spec.load import load_spec

    job = load_spec(args.spec)
    if args.base_output_dir is not None:
        from trials.spec.export import with_base_output

        job = with_base_output(job, args.base_output_dir)
    if not args.time_limit > 0:
        raise ConfigError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    from trials.controller.container import runtime as container_runtime
    from trials.controller.jobs import backends

    runtime = backends.choose(args.runtime)
    if not runtime.probes:
        raise ConfigError(f"--runtime {runtime.name}: trials check runs its probes on this host (or in containers: "
                          f"--runtime podman); a {runtime.name} job's trials run with trials sweep SPEC --runtime "
                          f"{runtime.name}")
    images = container_runtime.parse_image_map(args.image)
    backends.preflight(runtime, job, images)
    options = CheckOptions(
        time_limit_s=args.time_limit, grace_s=args.grace_period, params=parse_params(args.params, job.study),
        local_command=args.local_command or None, folder=args.keep, pass_env=tuple(args.pass_env),
        runtime=runtime.name, images=images, strict=args.strict, warm_start=args.warm_start,
    )
    return check_main(job, options, fmt=args.format)


def _cmd_cancel(args: argparse.Namespace) -> int:
    from trials.controller.jobs import admin as job_admin
    from trials.controller.jobs import registry

    h = registry.open_job(args.job, root=args.root, storage=args.storage)
    state, ended = job_admin.cancel(h)
    if ended:
        # Vertex answers FAILED_PRECONDITION here (gcloud exits 1); locally a cancel of a job that has
        # ended is done already: exit 0, so a cleanup script or a cancel racing the job's end is no failure
        print(f"job {h.job_id} already {state.removeprefix('JOB_STATE_')}: nothing to cancel")
    else:
        print(f"job {h.job_id}: {state}")
    return protocol.EXIT_OK


def _cmd_repair(args: argparse.Namespace) -> int:
    from trials.controller.jobs import admin as job_admin

    kept, dropped, backup = job_admin.repair_job(args.root, args.job)
    if not dropped:
        print(f"job {args.job}: the journal is readable ({kept} records); nothing to repair")
        return 0
    print(f"job {args.job}: kept {kept} records, dropped {len(dropped)}; the original is {backup}")
    for line in dropped:
        print(f"  dropped {line}")
    return 0


def _cmd_gc(args: argparse.Namespace) -> int:
    from trials.controller.jobs import admin as job_admin
    from trials.controller.jobs import view as job_view
    from trials.printable import printable

    h = job_view.read_job(args.job, root=args.root, storage=args.storage, whole=False)
    n, freed = job_admin.collect_layers(h.job_dir, h.job_id)
    if not n:
        print(f"job {h.job_id}: no sandbox layers to remove in {printable(h.job_dir)}")
    else:
        print(f"job {h.job_id}: removed {n} sandbox layers of failed attempts ({freed / 1e6:.1f} MB)")
    return protocol.EXIT_OK

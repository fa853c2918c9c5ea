"""What ``trials validate`` shows of a trial's process: its command and the environment it will see."""

from __future__ import annotations

import os
import shlex
from collections.abc import Collection, Mapping, Sequence

from trials import protocol
from trials.controller.backend import registry
from trials.controller.trial import launch
from trials.spec import JobSpec, WorkerPoolSpec
from trials.spec.text import sample_trial

JOB_DIR = "<job folder>"
JOB_ID = "<job id>"
_SHOWN_HOST_NAMES = 12


def check_command(job: JobSpec, local_command: Sequence[str] | None, source: str) -> None:
    """Refuse a spec whose trials have nothing to run (before a job folder or id is used up).

    Raises:
        ConfigError: a pool's image has no command and none was given after ``--``.
    """
    from trials.errors import ConfigError

    if job.trial_job is None:
        if not local_command:
            raise ConfigError(f"{source} has no trialJobSpec and no command: give the trial "
                              f"command after --, e.g. trials sweep SPEC -- python train.py")
        return
    for pool in _pools(job):
        try:
            launch.base_command(pool, local_command)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None


def sample_view(job: JobSpec, *, local_command: Sequence[str] | None, pass_env: Collection[str],
                environ: Mapping[str, str] | None = None, runtime: str = "host",
                images: Mapping[str, str] | None = None) -> list[str]:
    """Lines describing the primary replica of a sample trial: argv, then its environment
    (``runtime`` podman/docker: the container it runs as, and no host variable)."""
    environ = os.environ if environ is None else environ
    params = {p.parameter_id: v for p, v in sample_trial(job.study)}
    from trials.spec.export import with_trial_job

    job = with_trial_job(job)  # a local command's job: the one pool a sweep gives it
    assert job.trial_job is not None
    base_output = job.trial_job.base_output_directory  # None: no AIP_* (as on Vertex)
    paths = launch.trial_paths(JOB_DIR, base_output, "1")
    in_image = registry.get(runtime).in_image
    base_env = {} if in_image else launch.clean_base_env(environ, pass_env)
    n = len(job.trial_job.replicas()) if job.trial_job else 1
    primary = launch.build_replicas(
        job=job, job_id=JOB_ID, trial_id="1", params=params, paths=paths,
        project_number=protocol.DEFAULT_PROJECT_NUMBER, local_command=local_command, base_env=base_env,
        ports=[protocol.REPLICA_PORT] * n, gcs_root=os.path.join(JOB_DIR, "gcs"), in_image=in_image,
    )[0]
    if in_image:
        return _image_view(primary, runtime, images or {}, base_output, pass_env, environ)
    spec_env = {e.name for pool in _pools(job) for e in pool.env}
    set_here = {k: v for k, v in primary.env.items()
                if k not in spec_env and (k not in base_env or base_env[k] != v)}
    lines = [f"the sample trial's {primary.name} runs: {shlex.join(primary.argv)}",
             "its environment:"]
    lines += [f"  {k}={_short(v)}" for k, v in sorted(set_here.items())]
    lines += [f"  {k}={_short(primary.env[k])}  (spec env)" for k in sorted(spec_env)
              if k in primary.env]
    kept = sorted(k for k in base_env if k not in primary.env or primary.env[k] == base_env[k])
    shown = ", ".join(kept[:_SHOWN_HOST_NAMES]) + (", ..." if len(kept) > _SHOWN_HOST_NAMES else "")
    if base_output is None:
        lines.append("  (no AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR: the job has no "
                     "baseOutputDirectory)")
    lines.append(f"  + {len(kept)} variables of this host's environment ({shown})")
    passed = sorted(k for k in pass_env if k in environ and protocol.is_withheld_env(k))
    if passed:
        lines.append(f"  passed on purpose (--pass-env): {', '.join(passed)}")
    withheld = launch.withheld_env(environ, pass_env)
    if withheld:
        lines.append(f"  withheld (the host's cloud identity; pass one with --pass-env NAME): "
                     f"{', '.join(withheld)}")
    return lines


def _pools(job: JobSpec) -> list[WorkerPoolSpec]:
    if job.trial_job is None:
        return []
    return [pool for pool in job.trial_job.worker_pools if pool is not None]


def _short(value: str, limit: int = 120) -> str:
    text = value.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."


def _image_view(primary: launch.ReplicaLaunch, runtime: str, images: Mapping[str, str], base_output: str | None,
                pass_env: Collection[str], environ: Mapping[str, str]) -> list[str]:
    """The sample trial's primary replica as a container: its image, entry point, args and environment."""
    image = primary.image or "(no image)"
    local = images.get(image)
    shown = image + (f" (the local image {local})" if local else "")
    how = (f"{shlex.join(primary.command)} in place of its ENTRYPOINT" if primary.command
           else "its own ENTRYPOINT")
    lines = [f"the sample trial's {primary.name} runs as a {runtime} container of {shown}: {how}, "
             f"with {shlex.join(primary.args) or 'no arguments'}"]
    if primary.package_uris:
        lines.append(f"  after pip-installing {', '.join(primary.package_uris)} into the image's Python")
    lines.append("its environment (the image's own variables, then):")
    env = {**primary.env, protocol.ENV_GCS_ROOT: "/gcs"}
    lines += [f"  {k}={_short(v)}" for k, v in sorted(env.items())]
    if base_output is None:
        lines.append("  (no AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR: the job has no "
                     "baseOutputDirectory)")
    passed = sorted(k for k in pass_env if k in environ)
    lines.append("  nothing of this host's environment" + (f" but, on purpose (--pass-env): {', '.join(passed)}"
                                                            if passed else ""))
    lines.append(f"  mounted: /gcs (the job's bucket folder), the trial folder {JOB_DIR}/1")
    return lines

"""Pure construction of what a trial's replicas get: argv, environment and directory paths."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from trials import protocol
from trials.errors import ConfigError
from trials.spec import EnvVar, JobSpec, StudySpec, TrialJobSpec, Value, WorkerPoolSpec

LOCAL_HOST = "127.0.0.1"
PYTHON_NAMES = ("python", "python3")
# Inherited variables that would confuse a trial if the controller itself runs inside a trial.
_SCRUBBED_PREFIXES = ("CLOUD_ML_", "AIP_", "TRIALS_")
_SCRUBBED = {"CLUSTER_SPEC", "TF_CONFIG", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}
TF_ROLES = {0: "chief", 1: "worker", 2: "ps", 3: "evaluator"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaLaunch:
    """Everything needed to start one replica of one trial."""

    name: str  # workerpool0-0
    pool: int
    index: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    metric_file: str
    is_primary: bool
    # what a container runtime runs: the pool's image, the command that replaces its ENTRYPOINT (None:
    # the image's own) and what follows it (the pool's args, then the tuning flags), unresolved
    image: str | None = None
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] = ()
    package_uris: tuple[str, ...] = ()  # a python package pool's, installed before it runs


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialPaths:
    trial_dir: str  # control files: logs, args, metric files
    # <base>/<trial_id>/ as the trial sees it (local path or gs:// URI) and its AIP_* folders; all None
    # when the job has no baseOutputDirectory (Vertex then sets no AIP_* variable)
    base_dir: str | None
    model_dir: str | None
    checkpoint_dir: str | None
    tensorboard_dir: str | None


def trial_paths(job_dir: str, base_output: str | None, trial_id: str, *, custom_job: bool = False) -> TrialPaths:
    """``base_output`` is a local directory or a ``gs://`` URI (kept as a URI, as Vertex does), or
    None: the job has no base output directory. A CustomJob's outputs are the base's own ``model/``,
    ``checkpoints/`` and ``logs/`` (a tuning job's trial gets a folder of its id under the base)."""
    if base_output is None:
        return TrialPaths(trial_dir=os.path.join(job_dir, trial_id), base_dir=None, model_dir=None,
                          checkpoint_dir=None, tensorboard_dir=None)
    base = base_output.rstrip("/") + "/" + ("" if custom_job else trial_id + "/")
    return TrialPaths(
        trial_dir=os.path.join(job_dir, trial_id),
        base_dir=base,
        model_dir=base + "model/",
        checkpoint_dir=base + "checkpoints/",
        tensorboard_dir=base + "logs/",
    )


def trial_flags(study: StudySpec, params: Mapping[str, Value]) -> list[str]:
    """``--<id>=<value>`` per active parameter, in StudySpec order."""
    return [
        protocol.format_flag(p.parameter_id, params[p.parameter_id])
        for p in study.active_parameters(params)
        if p.parameter_id in params
    ]


def expand_env(entries: Sequence[EnvVar], service: Mapping[str, str]) -> dict[str, str]:
    """Vertex's ``$(VAR)`` expansion: from earlier entries and service vars; ``$$(VAR)`` escapes."""
    resolved: dict[str, str] = {}
    pattern = re.compile(r"\$\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")

    def sub(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return f"$({match.group(1)})"
        name = match.group(2)
        if name in resolved:
            return resolved[name]
        if name in service:
            return service[name]
        return match.group(0)

    for entry in entries:
        resolved[entry.name] = pattern.sub(sub, entry.value)
    return resolved


def image_command(pool: WorkerPoolSpec,
                  local_command: Sequence[str] | None) -> tuple[str | None, tuple[str, ...] | None]:
    """The image a pool runs in and the command replacing its ENTRYPOINT (None: the image's own), as a
    container runtime runs them: the command after ``--`` stands in for the spec's; a python package
    runs ``python3 -m MODULE`` in its executor image (the packages installed first, see the backend)."""
    command = tuple(local_command) if local_command else None
    if pool.container is not None:
        return pool.container.image_uri, command or (tuple(pool.container.command) or None)
    if pool.python_package is not None:
        return pool.python_package.executor_image_uri, command or ("python3", "-m", pool.python_package.python_module)
    return None, command


def base_command(pool: WorkerPoolSpec, local_command: Sequence[str] | None, *,
                 as_written: bool = False) -> list[str]:
    """The command a replica runs before its args: local override, container command, or python -m.

    ``as_written``: ``python`` left as the spec or the command after ``--`` says (to show it to a user,
    who runs it in their own environment), not this interpreter's path."""
    if local_command:
        return _python(list(local_command), as_written)
    if pool.container is not None:
        if not pool.container.command:
            raise ConfigError(
                f"containerSpec of image {pool.container.image_uri!r} has no command; locally the "
                f"image's ENTRYPOINT is unknown: give the command after --, e.g. "
                f"trials sweep SPEC -- python train.py"
            )
        return _python(list(pool.container.command), as_written)
    if pool.python_package is not None:
        return ["python3" if as_written else sys.executable, "-m", pool.python_package.python_module]
    raise ConfigError("a worker pool has neither containerSpec nor pythonPackageSpec")


def replica_argv(pool: WorkerPoolSpec, local_command: Sequence[str] | None, flags: Sequence[str], *,
                 as_written: bool = False) -> list[str]:
    """A host replica's whole argv, in Vertex's order: its command, the pool's args, then the trial's
    parameter ``flags`` (:func:`trial_flags`); ``as_written`` as in :func:`base_command`."""
    return [*base_command(pool, local_command, as_written=as_written), *pool.args, *flags]


def _python(argv: list[str], as_written: bool = False) -> list[str]:
    # `python` in a spec means the trainer's interpreter: locally, the controller's own.
    if argv and argv[0] in PYTHON_NAMES and not as_written:
        return [sys.executable, *argv[1:]]
    return argv


def clean_base_env(environ: Mapping[str, str], pass_env: Collection[str] = ()) -> dict[str, str]:
    """The host variables a replica inherits: all but a parent trial's and the user's cloud identity.

    ``pass_env`` names withheld variables (``protocol.is_withheld_env``) to pass anyway.
    """
    return {
        k: v for k, v in environ.items()
        if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)
        and (k in pass_env or not protocol.is_withheld_env(k))
    }


def withheld_env(environ: Mapping[str, str], pass_env: Collection[str] = ()) -> list[str]:
    """The names of the host variables :func:`clean_base_env` withholds, sorted."""
    return sorted(k for k in environ if protocol.is_withheld_env(k) and k not in pass_env)


def build_replicas(
    *,
    job: JobSpec,
    job_id: str,
    trial_id: str,
    params: Mapping[str, Value],
    paths: TrialPaths,
    project_number: str,
    local_command: Sequence[str] | None,
    base_env: Mapping[str, str],
    ports: Sequence[int],
    gcs_root: str,
    attempt: int = 0,
    job_spec_rest: Mapping[str, object] | None = None,
    in_image: bool = False,
) -> list[ReplicaLaunch]:
    """Argv and env for every replica of a trial (``ports``: one free port per replica).

    ``in_image``: the replicas run in their pools' images (a container runtime): a pool without a
    command runs the image's ENTRYPOINT, so no host command is built for it (``argv`` is empty)."""
    trial_job = job.trial_job or TrialJobSpec(worker_pools=(WorkerPoolSpec(),))
    replicas = trial_job.replicas()
    if len(ports) < len(replicas):
        raise ValueError(f"need {len(replicas)} ports, got {len(ports)}")
    flags = trial_flags(job.study, params)
    cluster: dict[str, list[str]] = {}
    addresses: dict[tuple[int, int], str] = {}
    # in images, a trial of several replicas has a network of its own: each replica by its name on
    # Vertex's port; on the host (or alone), 127.0.0.1 and a free port each
    by_name = in_image and len(replicas) > 1
    for k, (i, j, _pool) in enumerate(replicas):
        address = f"{protocol.replica_name(i, j)}:{protocol.REPLICA_PORT}" if by_name else f"{LOCAL_HOST}:{ports[k]}"
        cluster.setdefault(f"workerpool{i}", []).append(address)
        addresses[(i, j)] = address
    multi = len(replicas) > 1
    job_dict = dict(job_spec_rest or {})
    outputs: dict[str, str] = {}
    if paths.base_dir is not None:  # the trial's own CustomJob has <base>/<trial id>/ as its base (as on Vertex)
        job_dict["baseOutputDirectory"] = {"outputUriPrefix": paths.base_dir}
        outputs = {protocol.ENV_MODEL_DIR: paths.base_dir + "model/",
                   protocol.ENV_CHECKPOINT_DIR: paths.base_dir + "checkpoints/",
                   protocol.ENV_TENSORBOARD_LOG_DIR: paths.base_dir + "logs/"}
    out = []
    for rank, (i, j, pool) in enumerate(replicas):
        name = protocol.replica_name(i, j)
        metric_file = os.path.join(paths.trial_dir, protocol.metric_file_name(name))
        service = {
            protocol.ENV_TRIAL_ID: trial_id,
            protocol.ENV_JOB_ID: job_id,
            protocol.ENV_PROJECT_ID: project_number,
            protocol.ENV_METRIC_FILE: metric_file,
            **outputs,  # only with a base, as on Vertex
            protocol.ENV_CLUSTER_SPEC: json.dumps({
                "cluster": cluster,
                "environment": "cloud",
                "task": {"type": f"workerpool{i}", "index": j, "trial": trial_id},
                "job": job_dict,
            }),
            protocol.ENV_TRIAL_DIR: paths.trial_dir,
            protocol.ENV_STOP_FILE: os.path.join(paths.trial_dir, protocol.STOP_FILE),
            protocol.ENV_REPLICA: name,
            protocol.ENV_ATTEMPT: str(attempt),
            protocol.ENV_GCS_ROOT: gcs_root,
        }
        if multi:
            tf_cluster: dict[str, list[str]] = {}
            for (pi, _pj), address in addresses.items():
                if pi in (0, 1, 2):
                    tf_cluster.setdefault(TF_ROLES[pi], []).append(address)
            service[protocol.ENV_TF_CONFIG] = json.dumps({
                "cluster": tf_cluster,
                "task": {"type": TF_ROLES.get(i, "worker"), "index": j, "trial": trial_id},
                "job": job_dict,
                "environment": "cloud",
            })
            master = addresses[replicas[0][0], replicas[0][1]]
            service[protocol.ENV_MASTER_ADDR] = master.rsplit(":", 1)[0]
            service[protocol.ENV_MASTER_PORT] = master.rsplit(":", 1)[1]
            service[protocol.ENV_WORLD_SIZE] = str(len(replicas))
            service[protocol.ENV_RANK] = str(rank)
        env = dict(base_env)
        env.update(service)
        env.update(expand_env(pool.env, {**base_env, **service}))
        image, command = image_command(pool, local_command)
        argv = [] if in_image else replica_argv(pool, local_command, flags)
        out.append(ReplicaLaunch(
            name=name, pool=i, index=j, argv=tuple(argv), env=env, metric_file=metric_file,
            is_primary=(rank == 0), image=image, command=command, args=(*pool.args, *flags),
            package_uris=pool.python_package.package_uris if pool.python_package and not local_command else (),
        ))
    return out

"""Jobs on disk and in storage: name them, create, open and list them (running one: ``run``;
changing one from outside: ``admin``; showing one: ``view``)."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from trials import protocol
from trials.errors import ConfigError, JobNotFoundError, StorageError, did_you_mean
from trials.job_meta import JobMeta
from trials.records import JobState
from trials.spec import Algorithm, JobSpec, LocalOptions
from trials.storage_url import JOURNAL_FILE, redact
from trials.timefmt import rfc3339

if TYPE_CHECKING:  # Optuna is imported by the commands that write a job, never by those that read one
    from trials.study.storage import BaseStorage
    from trials.study.store import JobStore



@dataclass(kw_only=True)
class JobHandle:
    job_id: str
    job_dir: str
    storage_url: str
    store: JobStore
    job: JobSpec


# --- naming and paths -----------------------------------------------------------------------------
def default_job_id(job: JobSpec, spec_path: str | None) -> str:
    stem = job.display_name or (os.path.splitext(os.path.basename(spec_path))[0] if spec_path else "job")
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "job"
    return f"{stem[:100]}-{time.strftime('%Y%m%d-%H%M%S')}"


def job_dir_of(root: str, job_id: str) -> str:
    try:
        protocol.check_job_id(job_id)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    path = os.path.abspath(os.path.join(root, job_id))
    if os.path.dirname(path) != os.path.abspath(root):
        raise ConfigError(f"--job-id {job_id!r} would leave the job root {root!r}")
    return path


def storage_url_for(job_dir: str, storage: str | None) -> str:
    return storage or "journal:" + os.path.join(job_dir, JOURNAL_FILE)


def resolve_base_output(job: JobSpec, base_output_dir: str | None) -> str | None:
    """The base output directory the job's trials use: ``--base-output-dir`` (a local one on purpose),
    else the spec's ``outputUriPrefix``, else None: as on Vertex, no AIP_* variable is set."""
    prefix = job.trial_job.base_output_directory if job.trial_job else None
    for value, source in ((base_output_dir, "--base-output-dir"), (prefix, "outputUriPrefix")):
        if value and protocol.is_gcs_uri(value):
            try:
                protocol.local_path(value, "/")  # gs:// never maps outside the /gcs root
            except ValueError as err:
                raise ConfigError(f"{source}: {err}") from None
    if base_output_dir:
        return os.path.abspath(base_output_dir) if not protocol.is_gcs_uri(base_output_dir) else base_output_dir
    prefix = job.trial_job.base_output_directory if job.trial_job else None
    if prefix:
        return prefix if protocol.is_gcs_uri(prefix) else os.path.abspath(prefix)
    return None


# --- spec in storage ------------------------------------------------------------------------------
def spec_to_storage(job: JobSpec) -> dict[str, Any]:
    from trials.spec.export import to_rest

    return to_rest(job)


def with_base_output(job: JobSpec, base_output: str) -> JobSpec:
    """The job with the base output directory its trials use written into its spec (a relative local
    one made absolute, ``--base-output-dir`` in place of the spec's)."""
    from trials.spec.export import with_base_output as with_base

    current = job.trial_job.base_output_directory if job.trial_job else None
    return job if current == base_output else with_base(job, base_output)


def spec_from_storage(meta: JobMeta) -> JobSpec:
    """The job's spec as its record keeps it (``checked_meta``: the record has one)."""
    from trials.spec.load import parse_spec

    spec: dict[str, Any] = meta.spec or {}
    local = meta.local
    if local.get("custom_job"):  # a CustomJob (trials serve): its one trial's job, no study to read
        from trials.spec.vertex import custom_job

        body: dict[str, Any] = {k: spec[k] for k in ("displayName", "labels") if k in spec}
        return custom_job({**body, "jobSpec": spec.get("trialJobSpec")}, source="<job storage>")
    metric_ids = [m.get("metricId") for m in spec.get("studySpec", {}).get("metrics", [])]
    spaced = [i for i, mid in enumerate(metric_ids) if isinstance(mid, str) and mid != "".join(mid.split())]
    if spaced:  # a legacy hyperparameterMetricTag may hold whitespace, a Vertex metricId may not
        spec = copy.deepcopy(spec)
        for i in spaced:
            spec["studySpec"]["metrics"][i]["metricId"] = f"legacy_metric_{i}"
    job = parse_spec(spec, source="<job storage>")
    if spaced:
        metrics = tuple(replace(m, metric_id=metric_ids[i]) if i in spaced else m
                        for i, m in enumerate(job.study.metrics))
        job = replace(job, study=replace(job.study, metrics=metrics))
    if meta.base_output:  # a job stored before its base was written into its spec
        job = with_base_output(job, meta.base_output)
    return replace(job, local=LocalOptions(**local)) if local else job


# --- create / open --------------------------------------------------------------------------------
def create_job(job: JobSpec, *, root: str, job_id: str | None, spec_path: str | None,
               storage: str | None, base_output_dir: str | None, project_number: str | None,
               local_command: Sequence[str] | None, cwd: str | None = None,
               seed: int | None = None, gcs_root: str | None = None,
               pass_env: Sequence[str] = (), stale_after_s: float | None = None,
               sampler: str | None = None, runtime: str | None = None, images: Mapping[str, str] | None = None,
               options: Mapping[str, Any] | None = None) -> JobHandle:
    """Create a job (its folder, storage and WAITING trials); ``sampler`` overrides the default rule's choice;
    ``runtime``, its ``images`` and own ``options``: the job's (None: host's)."""
    from trials.study.samplers import check_choice, choose_sampler_name
    from trials.study.space import grid_size
    from trials.study.storage import open_storage
    from trials.study.store import JobStore

    if job.trial_job is None and not local_command:  # before the folder and id are used up
        raise ConfigError(f"{spec_path or 'the spec'} has no trialJobSpec and no command: give the "
                          f"trial command after --, e.g. trials sweep SPEC -- python train.py")
    job_id = default_job_id(job, spec_path) if job_id is None else job_id
    job_dir = job_dir_of(root, job_id)
    if storage is None and os.path.exists(os.path.join(job_dir, JOURNAL_FILE)):
        raise ConfigError(f"job {job_id!r} already exists in {job_dir}; use `trials resume {job_id}` "
                          f"or choose another --job-id")
    url = storage_url_for(job_dir, storage)
    from trials.spec.export import with_trial_job

    job = with_trial_job(job)  # a local command's job has the one pool Vertex would run
    base_output = resolve_base_output(job, base_output_dir)
    if base_output is not None:
        job = with_base_output(job, base_output)  # describe and export show the base trials use
    n = job.max_trial_count
    if job.study.algorithm is Algorithm.GRID_SEARCH:
        n = min(n, grid_size(job.study))
    sampler = check_choice(sampler, job.study) if sampler else choose_sampler_name(job.study, n_trials=n)
    # Everything that can refuse the options runs before the job folder exists: a bad
    # --base-output-dir or --storage leaves nothing behind.
    meta = JobMeta(
        state=JobState.QUEUED, create_time=rfc3339(time.time()), job_dir=job_dir, base_output=base_output,
        gcs_root=os.path.abspath(gcs_root) if gcs_root else os.path.join(job_dir, "gcs"),
        project_number=project_number or protocol.DEFAULT_PROJECT_NUMBER,
        local_command=tuple(local_command) if local_command else None,
        cwd=os.path.abspath(cwd or os.getcwd()),
        pass_env=tuple(dict.fromkeys(pass_env)),
        local={k: getattr(job.local, k) for k in ("inject_restarts", "grace_period_s", "memory_limit_mb")}
        | ({"custom_job": True} if job.local.custom_job else {}),
        runtime=runtime, images=dict(images or {}), options=dict(options) if options is not None else None,
    )
    if storage is not None:  # a database job: every worker takes over a trial after the same silence
        from trials.study.database.leases import DEFAULT_STALE_AFTER_S

        meta = replace(meta, stale_after_s=stale_after_s or DEFAULT_STALE_AFTER_S)
    database = None if storage is None else open_storage(url)

    def build(storage_obj: BaseStorage) -> JobStore:
        return JobStore.create(storage_obj, job_id, job, spec_to_storage(job), meta,
                               sampler_name=sampler, seed=seed)

    made = not os.path.isdir(job_dir)
    try:
        os.makedirs(job_dir, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create the job folder {job_dir}: {err.strerror or err}") from None
    try:
        if database is None:
            store = _create_journal_atomically(os.path.join(job_dir, JOURNAL_FILE), job_id, build)
        else:
            store = build(database)
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(job_dir)  # only if empty: never a folder with anything of value in it
        raise
    return JobHandle(job_id=job_id, job_dir=job_dir, storage_url=url, store=store, job=job)


def _create_journal_atomically(path: str, job_id: str, build: Callable[[BaseStorage], JobStore]) -> JobStore:
    """Write a new job's journal under a temporary name, then link it into place.

    A controller killed while creating a job (study, spec, trials: many journal writes) leaves no
    half-created job that neither ``sweep`` nor ``resume`` could use: the sweep just runs again.
    """
    from trials.study.storage import open_storage
    from trials.study.store import JobStore

    for name in os.listdir(os.path.dirname(path)):
        m = re.fullmatch(re.escape(JOURNAL_FILE) + r"\.(\d+)\.creating(\.lock)?", name)
        if m and not _pid_alive(int(m.group(1))):
            os.unlink(os.path.join(os.path.dirname(path), name))  # left by a killed creation
    tmp = f"{path}.{os.getpid()}.creating"
    try:
        build(open_storage("journal:" + tmp))
        os.link(tmp, path)  # unlike rename, never replaces a job another sweep just created
    except FileExistsError:
        raise ConfigError(f"job {job_id!r} already exists in {os.path.dirname(path)}; use "
                          f"`trials resume {job_id}` or choose another --job-id") from None
    finally:
        for leftover in (tmp, tmp + ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
    return JobStore.open(open_storage("journal:" + path), job_id)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def open_job(job_id: str, *, root: str, storage: str | None) -> JobHandle:
    """A job to run or change (Optuna's storage opened); ``view.read_job`` for one only shown."""
    from trials.study.storage import open_storage
    from trials.study.store import JobStore

    url = job_url(job_id, root=root, storage=storage)
    store = JobStore.open(open_storage(url), job_id)
    meta = checked_meta(store.meta(), job_id, url)
    # A seeded job's sampler goes on from where the job is: JobStore.open moves its seed on by the
    # trials already sampled (study/store.resumed_seed).
    return JobHandle(job_id=job_id, job_dir=meta.job_dir or job_dir_of(root, job_id), storage_url=url,
                     store=store, job=spec_from_storage(meta))


def job_url(job_id: str, *, root: str, storage: str | None) -> str:
    """The storage URL of a job (its journal under ``root`` unless ``storage``); it must exist."""
    job_dir = job_dir_of(root, job_id)
    if storage is None and not os.path.exists(os.path.join(job_dir, JOURNAL_FILE)):
        close = did_you_mean(job_id, _jobs_under(root))
        hint = f": did you mean {close}?" if close else ""
        raise JobNotFoundError(f"no job {job_id!r} under {os.path.abspath(root)}{hint} (looked for "
                               f"{os.path.join(job_dir, JOURNAL_FILE)}); pass --root or --storage")
    return storage_url_for(job_dir, storage)


def _jobs_under(root: str) -> list[str]:
    """The ids of the jobs under ``root`` (its folders with a journal)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return [n for n in names if os.path.isfile(os.path.join(root, n, JOURNAL_FILE))]


def checked_meta(meta: JobMeta, job_id: str, url: str) -> JobMeta:
    """``meta``, the record of a trials job (one with a spec).

    Raises:
        StorageError: the study is not a trials job.
    """
    if meta.spec is None:
        raise StorageError(f"study {job_id!r} in {redact(url)} is not a trials job (no spec attribute)")
    return meta

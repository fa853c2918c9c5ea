"""Jobs on disk and in storage: create, run, resume, describe, list and cancel them."""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from trials import protocol
from trials.controller.describe import job_to_rest, shown
from trials.controller.job import (
    CANCELLED,
    CANCELLING,
    FINAL_STATES,
    QUEUED,
    RUNNING,
    JobRunner,
    RunOptions,
)
from trials.errors import ConfigError, JobNotFoundError, StorageError
from trials.spec import Algorithm, JobSpec, LocalOptions, Value
from trials.storage_url import JOURNAL_FILE, redact
from trials.study.samplers import choose_sampler_name, make_sampler
from trials.study.space import grid_size, values_from_optuna
from trials.study.storage import RetryingRDBStorage, open_storage
from trials.study.store import JobStore
from trials.timefmt import rfc3339

if TYPE_CHECKING:
    from trials.controller.worker import SharedJob
    from trials.study.storage import BaseStorage
    from trials.study.store import FrozenTrial

DEFAULT_ROOT = "trials-jobs"
DEFAULT_PROJECT_NUMBER = "000000000000"
LOCK_FILE = "controller.lock"


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


def resolve_base_output(job: JobSpec, base_output_dir: str | None, job_dir: str) -> str:
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
    return job_dir


class ControllerLock:
    """One controller per job folder: an flock the kernel drops when the controller dies."""

    def __init__(self, job_dir: str):
        self.path = os.path.join(job_dir, LOCK_FILE)
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise ConfigError(f"the job in {os.path.dirname(self.path)} is already being run "
                              f"by another controller ({holder or 'unknown pid'})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# --- spec in storage ------------------------------------------------------------------------------
def spec_to_storage(job: JobSpec) -> dict[str, Any]:
    from trials.spec.export import to_rest

    return to_rest(job)


def with_base_output(job: JobSpec, base_output: str) -> JobSpec:
    """The job with the base output directory its trials use written into its spec (Vertex sets
    ``AIP_*`` only when the spec has one; a local default base is the job folder)."""
    from trials.spec.export import with_base_output as with_base

    current = job.trial_job.base_output_directory if job.trial_job else None
    return job if current == base_output else with_base(job, base_output)


def spec_from_storage(meta: dict[str, Any]) -> JobSpec:
    from trials.spec.load import parse_spec

    spec = meta["spec"]
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
    if meta.get("base_output"):  # a job stored before its base was written into its spec
        job = with_base_output(job, meta["base_output"])
    local = meta.get("local") or {}
    return replace(job, local=LocalOptions(**local)) if local else job


# --- create / open --------------------------------------------------------------------------------
def create_job(job: JobSpec, *, root: str, job_id: str | None, spec_path: str | None,
               storage: str | None, base_output_dir: str | None, project_number: str | None,
               local_command: Sequence[str] | None, cwd: str | None = None,
               seed: int | None = None, gcs_root: str | None = None,
               pass_env: Sequence[str] = (), stale_after_s: float | None = None) -> JobHandle:
    if job.trial_job is None and not local_command:  # before the folder and id are used up
        raise ConfigError(f"{spec_path or 'the spec'} has no trialJobSpec and no command: give the "
                          f"trial command after --, e.g. trials sweep SPEC -- python train.py")
    job_id = default_job_id(job, spec_path) if job_id is None else job_id
    job_dir = job_dir_of(root, job_id)
    if storage is None and os.path.exists(os.path.join(job_dir, JOURNAL_FILE)):
        raise ConfigError(f"job {job_id!r} already exists in {job_dir}; use `trials resume {job_id}` "
                          f"or choose another --job-id")
    url = storage_url_for(job_dir, storage)
    base_output = resolve_base_output(job, base_output_dir, job_dir)
    job = with_base_output(job, base_output)  # describe and export show the base trials use
    n = job.max_trial_count
    if job.study.algorithm is Algorithm.GRID_SEARCH:
        n = min(n, grid_size(job.study))
    sampler = choose_sampler_name(job.study, n_trials=n)
    # Everything that can refuse the options runs before the job folder exists: a bad
    # --base-output-dir or --storage leaves nothing behind.
    meta: dict[str, Any] = {
        "state": QUEUED, "create_time": rfc3339(time.time()), "job_dir": job_dir,
        "base_output": base_output,
        "gcs_root": os.path.abspath(gcs_root) if gcs_root else os.path.join(job_dir, "gcs"),
        "project_number": project_number or DEFAULT_PROJECT_NUMBER,
        "local_command": list(local_command) if local_command else None,
        "cwd": os.path.abspath(cwd or os.getcwd()),
        "pass_env": list(dict.fromkeys(pass_env)),
        "local": {k: getattr(job.local, k) for k in ("inject_restarts", "grace_period_s", "memory_limit_mb")},
    }
    if storage is not None:  # a database job: every worker takes over a trial after the same silence
        from trials.controller.worker import DEFAULT_STALE_AFTER_S

        meta["stale_after_s"] = stale_after_s or DEFAULT_STALE_AFTER_S
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
    job_dir = job_dir_of(root, job_id)
    if storage is None and not os.path.exists(os.path.join(job_dir, JOURNAL_FILE)):
        raise JobNotFoundError(f"no job {job_id!r} under {os.path.abspath(root)} (looked for "
                               f"{os.path.join(job_dir, JOURNAL_FILE)}); pass --root or --storage")
    url = storage_url_for(job_dir, storage)
    store = JobStore.open(open_storage(url), job_id)
    meta = store.meta()
    if "spec" not in meta:
        raise StorageError(f"study {job_id!r} in {redact(url)} is not a trials job (no spec attribute)")
    if meta.get("seed") is not None:
        # A seeded sampler restarts its sequence in every process: go on from where the job is,
        # or a resumed job would suggest the parameters of its first trials again.
        n_suggested = sum(1 for t in store.frozen_trials() if t.params)
        if n_suggested:
            store.study.sampler = make_sampler(meta.get("sampler", "tpe"),
                                               seed=int(meta["seed"]) + n_suggested)
    return JobHandle(job_id=job_id, job_dir=meta.get("job_dir") or job_dir, storage_url=url,
                     store=store, job=spec_from_storage(meta))


def list_jobs(root: str, storage: str | None) -> list[dict[str, Any]]:
    from trials.study.storage import study_summaries

    out = []
    if storage:
        opened = open_storage(storage)
        for s in study_summaries(opened):
            attrs = s.user_attrs
            n = sum(map(shown, opened.get_all_trials(s._study_id, deepcopy=False)))
            out.append({"job_id": s.study_name, "state": attrs.get("trials:state", "?"),
                        "trials": n, "create_time": attrs.get("trials:create_time", "")})
        return out
    if not os.path.isdir(root):
        return out
    for name in sorted(os.listdir(root)):
        if os.path.exists(os.path.join(root, name, JOURNAL_FILE)):
            try:
                h = open_job(name, root=root, storage=None)
            except Exception as err:  # noqa: BLE001 - one broken job must not hide the others
                out.append({"job_id": name, "state": f"unreadable: {type(err).__name__}", "trials": 0,
                            "create_time": ""})
                continue
            meta = h.store.meta()
            out.append({"job_id": name, "state": meta.get("state", "?"),
                        "trials": sum(map(shown, h.store.frozen_trials())),  # as `describe` counts
                        "create_time": meta.get("create_time", "")})
    return out


# --- run ------------------------------------------------------------------------------------------
def set_command(h: JobHandle, command: Sequence[str]) -> None:
    """Give a job created without a command (an image's ENTRYPOINT) the one to run locally.

    Raises:
        ConfigError: the job already has another command.
    """
    current = h.store.get_meta("local_command")
    if current and list(current) != list(command):
        raise ConfigError(f"job {h.job_id} already runs {shlex.join(current)}; resume it without "
                          f"-- COMMAND, or start a new job with `trials sweep`")
    if not current:
        h.store.set_meta(local_command=list(command))


def check_runnable(h: JobHandle) -> None:
    """Refuse to resume a job whose trials have no command (``trials resume JOB -- COMMAND``)."""
    from trials.controller.trial_view import check_command

    try:
        check_command(h.job, h.store.get_meta("local_command"), f"job {h.job_id}")
    except ConfigError as err:
        raise ConfigError(str(err).replace("trials sweep SPEC --", f"trials resume {h.job_id} --")) from None


def run_options(h: JobHandle, *, echo: bool, grace_period_s: float | None, memory_limit_mb: int | None,
                inject_restarts: float | None, slots: int | None, seed: int | None,
                devices: Any = None, shared: Any = None, join: bool = False,
                pass_env: Sequence[str] = ()) -> RunOptions:
    meta = h.store.meta()
    local = h.job.local
    return RunOptions(
        job_dir=h.job_dir, base_output=meta["base_output"], gcs_root=meta["gcs_root"],
        project_number=meta["project_number"], cwd=meta["cwd"],
        local_command=tuple(meta["local_command"]) if meta.get("local_command") else None,
        grace_period_s=grace_period_s if grace_period_s is not None else (local.grace_period_s or 10.0),
        memory_limit_mb=memory_limit_mb if memory_limit_mb is not None else local.memory_limit_mb,
        inject_restarts=inject_restarts if inject_restarts is not None else local.inject_restarts,
        slots=slots, echo=sys.stdout if echo else None, seed=seed,
        devices=devices, shared=shared, join=join,
        pass_env=tuple(dict.fromkeys([*(meta.get("pass_env") or ()), *pass_env])),
    )


def is_shared(h: JobHandle) -> bool:
    """Whether the job lives in a database that several workers can share (not a journal file)."""
    from trials.storage_url import is_journal_url

    return not is_journal_url(h.storage_url)


def shared_job(h: JobHandle, *, stale_after_s: float | None = None,
               notify: Callable[[str], None] | None = None) -> SharedJob | None:
    """The worker's view of a database job (leases, global cap, takeover), or None for a journal.

    ``notify`` gets one line per database outage; the storage then retries through outages.
    """
    if not is_shared(h):
        return None
    from trials.controller.worker import DEFAULT_STALE_AFTER_S, SharedJob
    from trials.outages import Outages

    say = notify or (lambda line: print(f"trials: {line}", file=sys.stderr, flush=True))
    outages = Outages(say, url=h.storage_url)
    storage = h.store.storage
    if isinstance(storage, RetryingRDBStorage):
        storage.outages = outages
    job_value = h.store.get_meta("stale_after_s")
    if job_value is None:  # a job created before the lease timeout was the job's: its first worker sets it
        job_value = stale_after_s or DEFAULT_STALE_AFTER_S
        h.store.set_meta(stale_after_s=job_value)
    elif stale_after_s is not None and stale_after_s != job_value:
        say(f"--stale-after {stale_after_s:g} ignored: the job's lease timeout is {float(job_value):g}s "
            f"(set when it was created), the same for every worker")
    return SharedJob(h.store, stale_after_s=float(job_value), outages=outages)


def run_job(h: JobHandle, options: RunOptions, *, progress: Callable[[str, dict[str, Any]], None] | None = None,
            resume: bool = False,
            lock: bool = True) -> JobRunner:
    locker = ControllerLock(h.job_dir) if lock else None
    if locker:
        os.makedirs(h.job_dir, exist_ok=True)
        locker.acquire()
        repair_journal(h.storage_url)
    try:
        runner = JobRunner(h.store, h.job, options, progress=progress)
        if resume and options.shared is None:  # shared jobs take over stale trials instead
            _reap_leftovers(h)
            runner.resume_running()
        runner.run()
        return runner
    finally:
        if locker:
            locker.release()


def repair_journal(url: str) -> None:
    """Undo what a SIGKILLed controller can leave in a journal file: its write lock, a torn record.

    Optuna waits 30 s before breaking a journal lock file whose owner died, and a record cut short
    by the kill would glue itself to the next one. Call with the controller lock held: then no
    other controller is alive, and the remaining writers (``trials cancel``) hold the journal lock
    for milliseconds.
    """
    if url.startswith("journal:"):
        path = url[len("journal:"):]
    elif url.endswith((".log", ".journal")) and "://" not in url:
        path = url
    else:
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + ".lock")
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0 or (f.seek(size - 1), f.read(1))[1] == b"\n":
                return
            start = max(0, size - (1 << 20))
            f.seek(start)
            tail = f.read()
            cut = tail.rfind(b"\n")
            f.truncate(start + cut + 1 if cut >= 0 else (0 if start == 0 else size))
    except FileNotFoundError:
        return


def _reap_leftovers(h: JobHandle) -> int:
    """Kill replicas a SIGKILLed controller left behind (recorded in each trial's pids.json)."""
    from trials.controller.process import reap_leftovers

    records = []
    for t in h.store.running_trials():
        path = os.path.join(h.job_dir, str(t.number + 1), protocol.PIDS_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                records.extend(json.load(f))
        except (OSError, ValueError):
            continue
    return reap_leftovers(records) if records else 0


def _repair_if_idle(h: JobHandle) -> None:
    """Before writing without the controller lock: repair the journal if no controller runs."""
    if _lock_holder(h.job_dir) is None:
        repair_journal(h.storage_url)


def extend(h: JobHandle, max_trial_count: int) -> int:
    _repair_if_idle(h)
    n = len(h.store.frozen_trials())
    if max_trial_count <= n:
        raise ConfigError(f"--max-trial-count must be more than the job's {n} trials to add any, "
                          f"got {max_trial_count}")
    added = h.store.add_trials(max_trial_count - n, h.job)
    if added == 0:
        raise ConfigError(f"the grid of job {h.job_id} is exhausted ({n} points); no trial to add")
    spec = dict(h.store.get_meta("spec"))
    spec["maxTrialCount"] = n + added
    h.store.set_meta(spec=spec)
    h.job = replace(h.job, max_trial_count=n + added)
    return added


def cancel(h: JobHandle) -> str:
    state = h.store.get_meta("state")
    if state in FINAL_STATES:
        return str(state)
    _repair_if_idle(h)
    h.store.set_meta(state=CANCELLING)
    shared = shared_job(h) if is_shared(h) else None
    if shared is not None:
        shared.requeue_stale()  # trials of dead workers: nobody else would ever stop them
    holder = _lock_holder(h.job_dir)
    if holder is not None:  # a live controller stops its trials and ends the job
        if holder:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(holder, signal.SIGTERM)
        return CANCELLING
    if shared is None and state in (QUEUED, RUNNING, CANCELLING):
        _requeue_orphans(h)  # the controller died: nobody else would ever stop its trials
    if state in (QUEUED, RUNNING, CANCELLING) and not h.store.running_trials():
        h.store.set_meta(state=CANCELLED, end_time=rfc3339(time.time()),
                         error={"code": 1, "message": "The job was cancelled."})
        return CANCELLED
    return CANCELLING


def repair_job(root: str, job_id: str) -> tuple[int, list[str], str | None]:
    """Rewrite a job's journal with every readable record (``trials repair``).

    Returns the records kept, a description of each line dropped, and where the original was kept.
    """
    from trials.study.journal_check import repair

    job_dir = job_dir_of(root, job_id)
    path = os.path.join(job_dir, JOURNAL_FILE)
    if not os.path.isfile(path):
        raise JobNotFoundError(f"no journal of job {job_id!r} at {path}; pass --root")
    holder = _lock_holder(job_dir)
    if holder is not None:
        who = f"pid {holder}" if holder else "pid unknown"
        raise ConfigError(f"job {job_id} is being run by a controller ({who}); stop it first")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + ".lock")  # a killed writer's: nobody writes now
    result, backup = repair(path)
    return len(result.good), [f"line {b.line}: {b.reason}" for b in result.bad], backup


def _requeue_orphans(h: JobHandle) -> None:
    """Trials a dead controller left RUNNING: kill their leftover replicas, queue them again (as the
    controller does on cancel: same id and parameters on resume)."""
    _reap_leftovers(h)
    for t in h.store.running_trials():
        h.store.set_trial_attrs(t._trial_id, state="REQUESTED", end_time=None)
        h.store.requeue(t._trial_id)


def running_controller(h: JobHandle) -> int | None:
    """The pid of the live controller running this job folder (0: pid unknown), or ``None``."""
    return _lock_holder(h.job_dir)


def _lock_holder(job_dir: str) -> int | None:
    """The pid of the controller holding the job folder's lock; 0 if held, pid not yet written; None if free."""
    path = os.path.join(job_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # nobody holds it
        except BlockingIOError:
            text = os.read(fd, 200).decode(errors="replace")
            m = re.search(r"pid (\d+)", text)
            return int(m.group(1)) if m else 0  # held, its pid not written yet
    finally:
        os.close(fd)


# --- describe -------------------------------------------------------------------------------------
def params_of(h: JobHandle) -> Callable[[FrozenTrial], dict[str, Value]]:
    study = h.job.study

    def get(t: FrozenTrial) -> dict[str, Value]:
        return values_from_optuna(study, t.params)

    return get


def describe(h: JobHandle) -> dict[str, Any]:
    meta = h.store.meta()
    meta["update_time"] = rfc3339(time.time())
    return job_to_rest(h.job_id, meta, h.store.frozen_trials(), params_of(h),
                       h.job.study.reported_metric_ids)


def describe_local(h: JobHandle) -> dict[str, Any]:
    """What only the local run knows, per trial (``describe --format local-json``)."""
    from trials.controller.describe import local_details

    meta = h.store.meta()
    return {"jobId": h.job_id, "jobFolder": h.job_dir, "state": meta.get("state"),
            "baseOutput": meta.get("base_output"), "localCommand": meta.get("local_command"),
            "trials": local_details(h.store.frozen_trials())}


def best_trials(h: JobHandle) -> list[Any]:
    """The best SUCCEEDED trial (single metric), or the Pareto front (several metrics)."""
    done = [t for t in h.store.frozen_trials() if t.state.name == "COMPLETE"]
    if not done:
        return []
    if len(h.job.study.metrics) == 1:
        sign = 1 if h.job.study.metrics[0].maximize else -1
        return [max(done, key=lambda t: sign * t.values[0])]
    return list(h.store.study.best_trials)

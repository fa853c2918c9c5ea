"""``trials serve``: Vertex AI's v1 JobService REST API on localhost, over the local controller.

The real ``google-cloud-aiplatform`` SDK (``api_transport="rest"``, ``api_endpoint`` pointed here)
creates, watches, lists, cancels and deletes HyperparameterTuningJobs. A job created here is a job
like any other: its folder under ``--root`` (or its study in ``--storage``), run by one controller
process, ``trials resume JOB`` as the CLI would start it; ``trials describe/report/best`` see it.
Nothing here decides a job's rules: the request body is read by the spec loader (the same errors
as ``trials validate``), the resource is ``describe``'s, cancel is ``trials cancel``'s.

Requests are handled in :meth:`Api.handle` (method, path, query, body → status, JSON), which the
HTTP layer (:mod:`listener`) only wraps, after :mod:`guard` let the request in (its token, Host,
Origin, Content-Type); errors are Google's shape ``{"error": {"code", "message", "status"}}``.
At most ``--max-running-jobs`` controllers run at once (:mod:`admission`); the others' jobs wait
``JOB_STATE_QUEUED``. Every job runs with the server's job options (:mod:`options`: the runtime and
its image map, the GPUs or ``--ignore-accelerators``, the memory limit); one that asks for more
accelerators than the server hands out is refused at its create. A job created through the API runs
its command as the server's user: the token is the boundary, and what a job names on the host (its
outputs, its packages) is ``gs://`` or under the server's root.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trials import protocol
from trials.controller.api import record
from trials.controller.api.admission import default_max_running_jobs
from trials.controller.api.controllers import CODE_INTERNAL, Controllers
from trials.controller.api.errors import ApiError
from trials.controller.api.guard import Guard
from trials.controller.api.listener import DRAIN_TIMEOUT_S, MAX_BODY_BYTES, Listener
from trials.controller.api.options import JobOptions, check_accelerators, check_options, server_gpus
from trials.controller.api.request import check_host_paths, check_id, int_param, json_body, parse_filter
from trials.errors import ConfigError, JobNotFoundError, TrialsError
from trials.printable import printable
from trials.records import FINAL_JOB_STATES, JobState, TrialState
from trials.timefmt import rfc3339

__all__ = ["MAX_BODY_BYTES", "Api", "ApiError", "make_server", "parse_filter", "serve_main"]

DEFAULT_PAGE_SIZE = 100
_SPEC_KEY = {"hyperparameterTuningJobs": "trialJobSpec", "customJobs": "jobSpec"}
_ROUTE = re.compile(r"^/v1/projects/(?P<project>[^/:]+)/locations/(?P<location>[^/:]+)/"
                    r"(?P<kind>hyperparameterTuningJobs|customJobs|operations)"
                    r"(?:/(?P<id>[^/:]+))?(?::(?P<verb>[A-Za-z]+))?$")
_OUTPUT_ONLY = ("name", "state", "trials", "createTime", "startTime", "endTime", "updateTime", "error", "bestTrialId")
TUNING, CUSTOM = "hyperparameterTuningJobs", "customJobs"
_NOUN = {TUNING: "HyperparameterTuningJob", CUSTOM: "CustomJob"}
_FIELD = {TUNING: "hyperparameterTuningJob", CUSTOM: "customJob"}


@dataclass
class Api:
    """The API's state: where jobs live, how their controllers start, the operations it answered.

    Args:
        root: the folder of job folders (``trials sweep --root``).
        storage: an Optuna storage URL the jobs' studies go in instead of a journal per job.
        options: what every job's controller gets (``--runtime``, ``--image``, ``--gpus``,
            ``--ignore-accelerators``, ``--memory-limit``), checked by :func:`options.check_options`.
        project_number: what a trial's ``CLOUD_ML_PROJECT_ID`` is (the path's project is kept as given
            in resource names).
        python: the interpreter the controllers run under.
        max_running_jobs: controllers at once (``--max-running-jobs``); the other jobs wait QUEUED.
        endpoint: the server's Cloud Storage endpoint (``STORAGE_EMULATOR_HOST``), given to every
            host-runtime job's replicas instead of an endpoint per job.
        controllers: who runs the jobs (default: :class:`Controllers` of these settings).
    """

    root: str
    storage: str | None = None
    options: JobOptions = field(default_factory=JobOptions)
    project_number: str | None = None
    python: str = sys.executable
    max_running_jobs: int = field(default_factory=default_max_running_jobs)
    endpoint: str | None = None
    log: Callable[[str], None] = lambda line: None
    controllers: Controllers | None = None
    _operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _cwd: str = field(default_factory=os.getcwd)
    _gpus: tuple[tuple[str, ...], str] | None = None  # the GPUs jobs share, found at the first job asking

    def __post_init__(self) -> None:
        if self.controllers is None:
            self.controllers = Controllers(root=self.root, storage=self.storage, options=self.options,
                                           python=self.python,
                                           max_running_jobs=self.max_running_jobs, endpoint=self.endpoint,
                                           cwd=self.cwd, log=self.log)

    @property
    def runner(self) -> Controllers:
        """The jobs' controllers (set in ``__post_init__``)."""
        if self.controllers is None:
            raise RuntimeError("Api.controllers is set by __post_init__")  # (never: a dataclass's own call)
        return self.controllers

    @property
    def gcs_root(self) -> str:
        """The buckets of every job made here (``ROOT/gcs``): what the server's Cloud Storage endpoint
        serves, so a package the SDK staged is where the trials read it."""
        return os.path.join(self.root, "gcs")

    @property
    def cwd(self) -> str:
        """Where trial commands run (relative paths in them): the folder ``trials serve`` started in."""
        return self._cwd or os.getcwd()

    # --- requests -----------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """One request: ``(HTTP status, JSON body)``; never raises."""
        try:
            return 200, self._route(method, path, query, body)
        except ApiError as err:
            return err.code, err.body()
        except TrialsError as err:  # a job's own error (its storage unreadable, ...): said, not a traceback
            return 500, ApiError(500, printable(str(err))).body()
        except Exception as err:  # noqa: BLE001 - the server answers every request
            return 500, ApiError(500, f"internal error: {type(err).__name__}: {printable(str(err))}").body()

    def _route(self, method: str, path: str, query: Mapping[str, str], body: bytes) -> dict[str, Any]:
        m = _ROUTE.match(urllib.parse.unquote(path))
        if m is None:
            raise ApiError(404, f"no method {method} {printable(path)[:200]}: this server serves "
                                f"/v1/projects/P/locations/L/hyperparameterTuningJobs and customJobs (and their "
                                f"operations)")
        parent = f"projects/{m['project']}/locations/{m['location']}"
        kind, job_id, verb = m["kind"], m["id"], m["verb"]
        if job_id is not None and kind != "operations":
            check_id(job_id, f"{parent}/{kind}/")
        if kind == "operations":
            if method == "GET" and job_id and not verb:
                return self._operation(parent, job_id)
            raise ApiError(404, f"no method {method} on operations")
        if job_id is None:
            if method == "POST" and not verb:
                return self.create(parent, json_body(body), kind)
            if method == "GET" and not verb:
                return self.list_jobs(parent, query, kind)
        elif method == "GET" and not verb:
            return self.get(parent, job_id, kind)
        elif method == "POST" and verb == "cancel":
            return self.cancel(parent, job_id, kind)
        elif method == "DELETE" and not verb:
            return self.delete(parent, job_id, kind)
        raise ApiError(404, f"no method {method} {printable(path)[:200]}"
                            + (f" (:{verb})" if verb else ""))

    def create(self, parent: str, body: dict[str, Any], kind: str = TUNING) -> dict[str, Any]:
        """``jobs.create``: the job is made (its folder, WAITING trials) before the answer, then run.

        A CustomJob is made as the one-trial job that runs its ``jobSpec`` (``spec.vertex.custom_job``)."""
        from trials.controller.jobs import registry
        from trials.controller.trial.view import check_command
        from trials.spec.load import parse_spec
        from trials.spec.vertex import custom_job

        field_name = _FIELD[kind]
        if not str(body.get("displayName") or "").strip():
            raise ApiError(400, f"{field_name}.displayName: Required field is not set.")
        name = body.get("name")
        if isinstance(name, str) and name:
            existing = name.rsplit("/", 1)[-1]
            check_id(existing, f"{field_name}.name: ")
            if self._exists(existing):
                raise ApiError(409, f"{_NOUN[kind]} {printable(name)[:200]} already exists")
        spec = {k: v for k, v in body.items() if k not in _OUTPUT_ONLY}
        try:
            job = (parse_spec(spec, source=field_name) if kind == TUNING
                   else custom_job(spec, source=field_name))
            if self.options.on_host:
                check_command(job, None, field_name)
        except ConfigError as err:
            raise ApiError(400, str(err)) from None
        check_host_paths(job, f"{field_name}.{_SPEC_KEY[kind]}", root=self.root, cwd=self.cwd)
        check_accelerators(job, self.options, f"{field_name}.{_SPEC_KEY[kind]}", self.gpus)
        job_id = self._claim_id(parent, kind)  # its folder and API record, before the job (see `record`)
        job_dir = registry.job_dir_of(self.root, job_id)
        try:
            h = registry.create_job(job, root=self.root, job_id=job_id, spec_path=None, storage=self.storage,
                                    base_output_dir=None, project_number=self.project_number,
                                    local_command=None, cwd=self.cwd, gcs_root=self.gcs_root)
        except BaseException as err:
            record.abandon(job_dir)
            if isinstance(err, ConfigError):
                raise ApiError(400, str(err)) from None
            raise
        meta = h.store.meta()  # (a server stopped before this write adopts the job)
        h.store.write_meta(replace(meta, api_parent=parent, api_kind=kind), since=meta)
        self.log(f"{_NOUN[kind]} {job_id} created ({printable(str(body.get('displayName')))[:80]})")
        self.runner.submit(job_id)
        return self.get(parent, job_id, kind)

    def get(self, parent: str, job_id: str, kind: str = TUNING) -> dict[str, Any]:
        from trials.controller.jobs import view

        missing = ApiError(404, f"{_NOUN[kind]} {parent}/{kind}/{printable(job_id)[:100]} does not exist")
        try:
            h = view.read_job(job_id, root=self.root, storage=self.storage)
        except JobNotFoundError:
            raise missing from None
        if (h.store.meta().api_kind or TUNING) != kind:
            raise missing
        return _as_api(h, kind)

    def list_jobs(self, parent: str, query: Mapping[str, str], kind: str = TUNING) -> dict[str, Any]:
        from trials.controller.jobs import view

        keep = parse_filter(query.get("filter", ""))
        size = int_param(query, "pageSize", DEFAULT_PAGE_SIZE) or DEFAULT_PAGE_SIZE
        start = int_param(query, "pageToken", 0)
        jobs = []
        for row in sorted(view.list_jobs(self.root, self.storage), key=lambda r: (r["create_time"], r["job_id"])):
            try:
                h = view.read_job(row["job_id"], root=self.root, storage=self.storage)
            except TrialsError:
                continue  # (a broken job folder is not listed; `trials list` shows it)
            if (h.store.meta().api_kind or TUNING) != kind:
                continue
            rest = _as_api(h, kind)
            if rest["name"].startswith(parent + "/") and keep(rest):
                jobs.append(rest)
        out: dict[str, Any] = {}
        page = jobs[start:start + size]
        if page:
            out[kind] = page
        if start + size < len(jobs):
            out["nextPageToken"] = str(start + size)
        return out

    def cancel(self, parent: str, job_id: str, kind: str = TUNING) -> dict[str, Any]:
        from trials.controller.jobs import admin, registry

        self.get(parent, job_id, kind)  # 404 first
        h = registry.open_job(job_id, root=self.root, storage=self.storage)
        state, ended = admin.cancel(h)
        self.runner.cancelled(job_id)  # (one that waited for a controller never runs)
        if ended:
            raise ApiError(400, f"Cannot cancel {_NOUN[kind]} {job_id}: it is already in {state}",
                           "FAILED_PRECONDITION")
        self.log(f"{_NOUN[kind]} {job_id} cancel requested")
        return {}

    def delete(self, parent: str, job_id: str, kind: str = TUNING) -> dict[str, Any]:
        """``jobs.delete``: only a job that has ended (Vertex refuses a running one); an operation, done."""
        from trials.controller.jobs import admin, registry

        rest = self.get(parent, job_id, kind)
        h = registry.open_job(job_id, root=self.root, storage=self.storage)
        if rest.get("state") not in FINAL_JOB_STATES or admin.running_controller(h) is not None:
            raise ApiError(400, f"{_NOUN[kind]} {job_id} is {rest.get('state')}: cancel it and wait "
                                f"for it to end before deleting it", "FAILED_PRECONDITION")
        if self.storage is not None:
            h.store.delete_study()
        from trials.controller.trial.packages import packages_dir

        job_dir = registry.job_dir_of(self.root, job_id)
        for folder in (job_dir, packages_dir(job_dir)):  # the job, and its packages' environments beside it
            if os.path.isdir(folder) and not os.path.islink(folder):
                shutil.rmtree(folder)
        self.log(f"{_NOUN[kind]} {job_id} deleted")
        now = rfc3339(time.time())
        op_id = str(secrets.randbelow(10**18))
        op_name = f"{parent}/operations/{op_id}"
        op: dict[str, Any] = {"name": op_name, "done": True,
              "metadata": {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.DeleteOperationMetadata",
                           "genericMetadata": {"createTime": now, "updateTime": now}},
              "response": {"@type": "type.googleapis.com/google.protobuf.Empty"}}
        with self._lock:
            self._operations[op_name] = op
        return op

    def _operation(self, parent: str, op_id: str) -> dict[str, Any]:
        with self._lock:
            op = self._operations.get(f"{parent}/operations/{op_id}")
        if op is None:
            raise ApiError(404, f"Operation {parent}/operations/{printable(op_id)[:100]} does not exist")
        return op

    # --- creation ----------------------------------------------------------------------------
    def gpus(self) -> tuple[tuple[str, ...], str]:
        """The GPUs the jobs' trials share and where that came from (found once: ``nvidia-smi -L`` is slow)."""
        from trials.controller.trial.devices import detect_gpus

        with self._lock:
            if self._gpus is None:
                self._gpus = server_gpus(self.options, os.environ, detect_gpus)
            return self._gpus

    def _exists(self, job_id: str) -> bool:
        from trials.controller.jobs import registry

        try:
            registry.job_url(job_id, root=self.root, storage=self.storage)
        except JobNotFoundError:
            return False
        if self.storage is None:
            return True
        from trials.controller.jobs import view

        return any(r["job_id"] == job_id for r in view.list_jobs(self.root, self.storage))

    def _claim_id(self, parent: str, kind: str) -> str:
        """A numeric id, as Vertex gives: its folder made (which claims it) with the job's API record."""
        from trials.controller.jobs import registry

        os.makedirs(self.root, exist_ok=True)
        while True:
            job_id = str(10**17 + secrets.randbelow(9 * 10**17))
            try:
                record.claim(registry.job_dir_of(self.root, job_id), parent=parent, kind=kind)
            except FileExistsError:
                continue
            return job_id

def _as_api(h: Any, kind: str) -> dict[str, Any]:
    """A job's v1 resource as the API serves it: its error in the SDK's words, naming the trainer's output."""
    from trials.controller.jobs import view
    from trials.controller.jobs.api_words import api_error

    rest = view.describe(h)
    if rest.get("error"):
        rest["error"] = api_error(rest["error"], job_dir=h.job_dir)
    return rest if kind == TUNING else custom_job_rest(rest)


def custom_job_rest(tuning: Mapping[str, Any]) -> dict[str, Any]:
    """The CustomJob resource of the one-trial job that ran it (the tuning job's resource): its
    ``jobSpec``, its state and times; its trial failed (INFEASIBLE) = the CustomJob FAILED with why, unless
    the service itself failed it (its controllers died: an internal error, the job's own)."""
    name = str(tuning["name"]).replace(f"/{TUNING}/", f"/{CUSTOM}/")
    out: dict[str, Any] = {"name": name, "displayName": tuning.get("displayName")}
    if "trialJobSpec" in tuning:
        out["jobSpec"] = tuning["trialJobSpec"]
    if "labels" in tuning:
        out["labels"] = tuning["labels"]
    state, error = tuning.get("state"), tuning.get("error")
    trial = (tuning.get("trials") or [None])[0]
    if (state in (JobState.SUCCEEDED, JobState.FAILED) and trial is not None
            and trial.get("state") == TrialState.INFEASIBLE and (error or {}).get("code") != CODE_INTERNAL):
        state = JobState.FAILED.value
        error = {"code": 3, "message": trial.get("infeasibleReason") or "The replica failed."}
    out["state"] = state
    for key in ("createTime", "startTime", "endTime", "updateTime"):
        if key in tuning:
            out[key] = tuning[key]
    if error:
        out["error"] = error
    return out


def make_server(api: Api, host: str = "127.0.0.1", port: int = 0, guard: Guard | None = None) -> Listener:
    """The HTTP server of ``api`` on ``host:port``; ``guard``: who it answers (default: no token, the Host,
    Origin and Content-Type checks only)."""
    return Listener((host, port), api.handle, guard or Guard.for_server(token=None, bind=host, token_file="-"))


def serve_main(*, root: str, storage: str | None, options: JobOptions | None = None,
               project_number: str | None, host: str, port: int, quiet: bool = False, token: str | None = None,
               no_auth: bool = False, max_running_jobs: int | None = None) -> int:
    """``trials serve``: answer until SIGINT/SIGTERM, then the requests in flight; the jobs it started go
    on under their controllers, each with ``options``.

    Raises:
        ConfigError: a bad option (before anything listens).
    """
    from trials.controller.api import guard as guards
    from trials.controller.gcs import emulator

    secret, source = guards.choose_token(token, no_auth=no_auth, environ=os.environ)
    if max_running_jobs is not None and max_running_jobs < 1:
        raise ConfigError(f"--max-running-jobs must be >= 1, got {max_running_jobs}")
    options = check_options(options or JobOptions())
    os.makedirs(root, exist_ok=True)
    root = os.path.abspath(root)
    try:
        token_file = guards.write_token_file(root, secret)
    except OSError as err:
        raise ConfigError(f"--root {root}: cannot write {guards.TOKEN_FILE} there: {err.strerror or err}") from None
    log = (lambda line: None) if quiet else (lambda line: print(line, flush=True))
    try:
        server = Listener((host, port), lambda *a: api.handle(*a),
                          Guard.for_server(token=secret, bind=host, token_file=token_file))
    except OSError as err:
        raise ConfigError(f"--port {port}: cannot listen on {host}:{port}: {err.strerror}") from None
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:  # (from here on: a signal during start-up stops it as well)
        if not stopping.is_set():
            stopping.set()
            server.begin_stop()
            threading.Thread(target=server.shutdown, daemon=True).start()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    os.makedirs(os.path.join(root, "gcs"), exist_ok=True)
    buckets, why = emulator.start(os.path.join(root, "gcs"))
    api = Api(root=root, storage=storage, options=options, project_number=project_number,
              max_running_jobs=max_running_jobs or default_max_running_jobs(),
              endpoint=buckets.host if buckets is not None else None, log=log)
    where = f"http://{host}:{server.server_address[1]}"
    print(f"serving Vertex AI's v1 JobService API on {where} (jobs in {api.root})", flush=True)
    if secret is None:
        print(f"  aiplatform.init(api_endpoint={where!r}, api_transport='rest', "
              f"credentials=AnonymousCredentials(), project=..., location=...)", flush=True)
        print(f"  warning: --no-auth: anyone who can reach {where} runs commands as this user (uid {os.getuid()}), "
              f"web pages included", flush=True)
    else:
        print(f"  aiplatform.init(api_endpoint={where!r}, api_transport='rest', "
              f'credentials=google.oauth2.credentials.Credentials(token="{secret}"), project=..., location=...)',
              flush=True)
        print(f"  the token ({'random' if source == 'random' else 'from ' + source}) is in {token_file} (mode 0600; "
              f"gcloud: --access-token-file={token_file})", flush=True)
    if buckets is not None:
        print(f"  Cloud Storage (the jobs' buckets, {api.gcs_root}): STORAGE_EMULATOR_HOST={buckets.host}", flush=True)
    else:
        print(f"  no Cloud Storage endpoint: {why}", flush=True)
    given = options.resume_args(images_used=list(options.image_map()))
    if given:
        print(f"  every job runs with {shlex.join(given)}", flush=True)
    adopted, removed = record.adopt(api.root, api.storage)
    for job_id in adopted:
        print(f"adopted job {job_id}: the server stopped while creating it", flush=True)
    for job_id in removed:
        print(f"removed the creation of job {job_id} that never made its job (the server stopped during it)",
              flush=True)
    resumed = api.runner.resume_jobs()
    if resumed:
        print(f"resumed {len(resumed)} job{'s' if len(resumed) > 1 else ''}: {', '.join(resumed)}", flush=True)

    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.begin_stop()
        server.take_pending()  # (connected before the stop: in flight as well)
        server.server_close()  # no new connection; those open finish their request
        left_open = server.drain()
        api.runner.stop()
        if buckets is not None:
            buckets.stop()
    if left_open:
        print(f"stopped with {left_open} request(s) unanswered after {DRAIN_TIMEOUT_S:.0f} s", flush=True)
    left, waiting = api.runner.running(), api.runner.waiting()
    if left:
        print(f"stopped serving; {len(left)} job{'s' if len(left) > 1 else ''} still running under "
              f"{'their controllers' if len(left) > 1 else 'its controller'} ({', '.join(left)}): "
              f"`trials serve` again watches them, `trials cancel JOB --root {root}` stops one", flush=True)
    if waiting:
        print(f"{len(waiting)} job(s) left JOB_STATE_QUEUED ({', '.join(waiting[:5])}"
              f"{', ...' if len(waiting) > 5 else ''}): `trials serve` again starts them", flush=True)
    return protocol.EXIT_OK

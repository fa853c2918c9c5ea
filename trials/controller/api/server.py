"""``trials serve``: Vertex AI's v1 JobService REST API on localhost, over the local controller.

The real ``google-cloud-aiplatform`` SDK (``api_transport="rest"``, ``api_endpoint`` pointed here)
creates, watches, lists, cancels and deletes HyperparameterTuningJobs. A job created here is a job
like any other: its folder under ``--root`` (or its study in ``--storage``), run by one controller
process, ``trials resume JOB`` as the CLI would start it; ``trials describe/report/best`` see it.
Nothing here decides a job's rules: the request body is read by the spec loader (the same errors
as ``trials validate``), the resource is ``describe``'s, cancel is ``trials cancel``'s.

Requests are handled in :meth:`Api.handle` (method, path, query, body → status, JSON), which the
HTTP layer only wraps; errors are Google's shape ``{"error": {"code", "message", "status"}}``.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trials import protocol
from trials.errors import ConfigError, JobNotFoundError, TrialsError
from trials.printable import printable
from trials.records import FINAL_JOB_STATES, JobState, TrialState
from trials.timefmt import rfc3339

MAX_BODY_BYTES = 8 * 1024 * 1024  # a job spec is a few KiB; a body over this is refused unread
DEFAULT_PAGE_SIZE = 100
CONTROLLER_RESTARTS = 3  # a controller that dies with its job unfinished is started again this often
CONTROLLER_LOG = "serve-controller.log"
_ROUTE = re.compile(r"^/v1/projects/(?P<project>[^/:]+)/locations/(?P<location>[^/:]+)/"
                    r"(?P<kind>hyperparameterTuningJobs|customJobs|operations)"
                    r"(?:/(?P<id>[^/:]+))?(?::(?P<verb>[A-Za-z]+))?$")
_OUTPUT_ONLY = ("name", "state", "trials", "createTime", "startTime", "endTime", "updateTime", "error", "bestTrialId")
TUNING, CUSTOM = "hyperparameterTuningJobs", "customJobs"
_NOUN = {TUNING: "HyperparameterTuningJob", CUSTOM: "CustomJob"}
_FIELD = {TUNING: "hyperparameterTuningJob", CUSTOM: "customJob"}
_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 500: "INTERNAL",
           501: "UNIMPLEMENTED"}


class ApiError(Exception):
    """A request refused: the HTTP code, Google's status name and the message the SDK shows."""

    def __init__(self, code: int, message: str, status: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or _STATUS.get(code, "UNKNOWN")

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "status": self.status}}


@dataclass
class _Controller:
    job_id: str
    proc: subprocess.Popen[bytes]
    restarts: int = 0


@dataclass
class Api:
    """The API's state: where jobs live, how their controllers start, the operations it answered.

    Args:
        root: the folder of job folders (``trials sweep --root``).
        storage: an Optuna storage URL the jobs' studies go in instead of a journal per job.
        runtime: ``--runtime`` of each job's controller (host when None).
        images: ``--image URI=LOCAL`` of each job's controller.
        project_number: what a trial's ``CLOUD_ML_PROJECT_ID`` is (the path's project is kept as given
            in resource names).
        python: the interpreter the controllers run under.
    """

    root: str
    storage: str | None = None
    runtime: str | None = None
    project_number: str | None = None
    images: Sequence[str] = ()
    python: str = sys.executable
    log: Callable[[str], None] = lambda line: None
    _controllers: dict[str, _Controller] = field(default_factory=dict)
    _operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: bool = False
    _cwd: str = field(default_factory=os.getcwd)

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
        if kind == "operations":
            if method == "GET" and job_id and not verb:
                return self._operation(parent, job_id)
            raise ApiError(404, f"no method {method} on operations")
        if job_id is None:
            if method == "POST" and not verb:
                return self.create(parent, _json_body(body), kind)
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
            if self._exists(existing):
                raise ApiError(409, f"{_NOUN[kind]} {printable(name)[:200]} already exists")
        spec = {k: v for k, v in body.items() if k not in _OUTPUT_ONLY}
        try:
            job = (parse_spec(spec, source=field_name) if kind == TUNING
                   else custom_job(spec, source=field_name))
            if self.runtime in (None, "host"):
                check_command(job, None, field_name)
        except ConfigError as err:
            raise ApiError(400, str(err)) from None
        job_id = self._new_id()
        try:
            h = registry.create_job(job, root=self.root, job_id=job_id, spec_path=None, storage=self.storage,
                                    base_output_dir=None, project_number=self.project_number,
                                    local_command=None, cwd=self.cwd, gcs_root=self.gcs_root)
        except ConfigError as err:
            raise ApiError(400, str(err)) from None
        h.store.set_meta(api_parent=parent, api_kind=kind)
        self.log(f"{_NOUN[kind]} {job_id} created ({printable(str(body.get('displayName')))[:80]})")
        self._start(job_id)
        return self.get(parent, job_id, kind)

    def get(self, parent: str, job_id: str, kind: str = TUNING) -> dict[str, Any]:
        from trials.controller.jobs import view

        missing = ApiError(404, f"{_NOUN[kind]} {parent}/{kind}/{printable(job_id)[:100]} does not exist")
        try:
            h = view.read_job(job_id, root=self.root, storage=self.storage)
        except JobNotFoundError:
            raise missing from None
        if (h.store.get_meta("api_kind") or TUNING) != kind:
            raise missing
        rest = view.describe(h)
        return rest if kind == TUNING else custom_job_rest(rest)

    def list_jobs(self, parent: str, query: Mapping[str, str], kind: str = TUNING) -> dict[str, Any]:
        from trials.controller.jobs import view

        keep = parse_filter(query.get("filter", ""))
        size = _int_param(query, "pageSize", DEFAULT_PAGE_SIZE) or DEFAULT_PAGE_SIZE
        start = _int_param(query, "pageToken", 0)
        jobs = []
        for row in sorted(view.list_jobs(self.root, self.storage), key=lambda r: (r["create_time"], r["job_id"])):
            try:
                h = view.read_job(row["job_id"], root=self.root, storage=self.storage)
            except TrialsError:
                continue  # (a broken job folder is not listed; `trials list` shows it)
            if (h.store.get_meta("api_kind") or TUNING) != kind:
                continue
            rest = view.describe(h)
            rest = rest if kind == TUNING else custom_job_rest(rest)
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
        job_dir = registry.job_dir_of(self.root, job_id)
        if os.path.isdir(job_dir) and not os.path.islink(job_dir):
            shutil.rmtree(job_dir)
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

    # --- controllers --------------------------------------------------------------------------
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

    def _new_id(self) -> str:
        """A numeric id, as Vertex gives (its folder does not exist yet)."""
        from trials.controller.jobs import registry

        while True:
            job_id = str(10**17 + secrets.randbelow(9 * 10**17))
            if not os.path.exists(registry.job_dir_of(self.root, job_id)):
                return job_id

    def controller_command(self, job_id: str) -> list[str]:
        cmd = [self.python, "-m", "trials", "resume", job_id, "--root", self.root, "--quiet"]
        if self.storage:
            cmd += ["--storage", self.storage]
        if self.runtime:
            cmd += ["--runtime", self.runtime]
        for image in self.images:
            cmd += ["--image", image]
        return cmd

    def _start(self, job_id: str, restarts: int = 0) -> None:
        """Run the job's controller (``trials resume JOB``) in its own session, its output in the job folder."""
        from trials.controller.jobs import registry

        job_dir = registry.job_dir_of(self.root, job_id)
        os.makedirs(job_dir, exist_ok=True)
        fd = os.open(os.path.join(job_dir, CONTROLLER_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                     0o644)
        try:
            proc = subprocess.Popen(self.controller_command(job_id), stdin=subprocess.DEVNULL, stdout=fd,
                                    stderr=fd, cwd=self.cwd, start_new_session=True)
        finally:
            os.close(fd)
        with self._lock:
            self._controllers[job_id] = _Controller(job_id, proc, restarts)
        threading.Thread(target=self._watch, args=(job_id, proc), daemon=True, name=f"controller-{job_id}").start()

    def _watch(self, job_id: str, proc: subprocess.Popen[bytes]) -> None:
        """A controller ended: its job ended, or it died (started again, then the job FAILED with why)."""
        code = proc.wait()
        with self._lock:
            entry = self._controllers.pop(job_id, None)
            if self._stopping:
                return
        restarts = entry.restarts if entry else 0
        state = self._state(job_id)
        if state is None or state in FINAL_JOB_STATES:
            self.log(f"job {job_id} {state or 'gone'}")
            return
        if code != protocol.EXIT_USAGE and restarts < CONTROLLER_RESTARTS:
            self.log(f"job {job_id}: its controller exited ({code}) with the job {state}: started again")
            self._start(job_id, restarts + 1)
            return
        self._fail(job_id, f"the job's controller exited with code {code}: {self._log_tail(job_id)}")

    def _state(self, job_id: str) -> str | None:
        from trials.controller.jobs import view

        try:
            return str(view.read_job(job_id, root=self.root, storage=self.storage).store.get_meta("state"))
        except TrialsError:
            return None

    def _fail(self, job_id: str, message: str) -> None:
        from trials.controller.jobs import registry

        with contextlib.suppress(TrialsError):
            h = registry.open_job(job_id, root=self.root, storage=self.storage)
            h.store.set_meta(state=JobState.FAILED.value, end_time=rfc3339(time.time()),
                             error={"code": 9, "message": message})
        self.log(f"job {job_id} FAILED: {message}")

    def _log_tail(self, job_id: str) -> str:
        from trials.controller.jobs import registry
        from trials.controller.trial.files import tail_lines

        path = os.path.join(registry.job_dir_of(self.root, job_id), CONTROLLER_LOG)
        lines = [line for line in tail_lines(path, n=20, max_bytes=4096) if line.strip()]
        return printable(lines[-1])[:500] if lines else "(no output)"

    def resume_jobs(self) -> list[str]:
        """On start: every job made through the API that has not ended and has no live controller runs again."""
        from trials.controller.jobs import admin, registry, view

        resumed = []
        for row in view.list_jobs(self.root, self.storage):
            if row["state"] in FINAL_JOB_STATES:
                continue
            try:
                h = registry.open_job(row["job_id"], root=self.root, storage=self.storage)
            except TrialsError:
                continue
            if not h.store.get_meta("api_parent") or admin.running_controller(h) is not None:
                continue
            self._start(row["job_id"])
            resumed.append(row["job_id"])
        return resumed

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._controllers)

    def stop(self) -> None:
        """The server stops; the jobs' controllers go on (as Vertex's jobs outlive a client)."""
        with self._lock:
            self._stopping = True


def custom_job_rest(tuning: Mapping[str, Any]) -> dict[str, Any]:
    """The CustomJob resource of the one-trial job that ran it (the tuning job's resource): its
    ``jobSpec``, its state and times; its trial failed (INFEASIBLE) = the CustomJob FAILED with why."""
    name = str(tuning["name"]).replace(f"/{TUNING}/", f"/{CUSTOM}/")
    out: dict[str, Any] = {"name": name, "displayName": tuning.get("displayName")}
    if "trialJobSpec" in tuning:
        out["jobSpec"] = tuning["trialJobSpec"]
    if "labels" in tuning:
        out["labels"] = tuning["labels"]
    state, error = tuning.get("state"), tuning.get("error")
    trial = (tuning.get("trials") or [None])[0]
    if (state in (JobState.SUCCEEDED, JobState.FAILED) and trial is not None
            and trial.get("state") == TrialState.INFEASIBLE):
        state = JobState.FAILED.value
        error = {"code": 3, "message": trial.get("infeasibleReason") or "The replica failed."}
    out["state"] = state
    for key in ("createTime", "startTime", "endTime", "updateTime"):
        if key in tuning:
            out[key] = tuning[key]
    if error:
        out["error"] = error
    return out


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body.decode("utf-8")) if body.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ApiError(400, f"Invalid JSON payload received. {printable(str(err))[:200]}") from None
    if not isinstance(value, dict):
        raise ApiError(400, f"Invalid JSON payload received. Expected an object, got {type(value).__name__}")
    return value


def _int_param(query: Mapping[str, str], key: str, default: int) -> int:
    text = query.get(key)
    if text in (None, ""):
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ApiError(400, f"{key}: expected an integer >= 0, got {printable(text)[:50]!r}")
    return value


_TERM = re.compile(r'^\s*(?P<key>[A-Za-z_][\w.]*)\s*(?P<op>!=|=)\s*(?P<value>"[^"]*"|[^\s"]+)\s*$')
_FILTER_KEYS = {"state": "state", "display_name": "displayName", "displayName": "displayName"}


def parse_filter(text: str) -> Callable[[Mapping[str, Any]], bool]:
    """A list ``filter`` (terms ``state``, ``display_name``/``displayName``, ``labels.KEY`` with ``=``
    or ``!=``, joined by ``AND``) as a predicate on a job's resource; anything else is refused."""
    terms: list[tuple[Sequence[str], bool, str]] = []
    for part in re.split(r"\s+AND\s+", text.strip()) if text.strip() else []:
        m = _TERM.match(part)
        key = m["key"] if m else ""
        if m is None or not (key in _FILTER_KEYS or key.startswith("labels.")):
            raise ApiError(400, f"filter: cannot read {printable(part)[:100]!r}: this server filters on state, "
                                f"display_name and labels.KEY with = or !=, joined by AND")
        path = ("labels", key[len("labels."):]) if key.startswith("labels.") else (_FILTER_KEYS[key],)
        terms.append((path, m["op"] == "=", m["value"].strip('"')))

    def keep(rest: Mapping[str, Any]) -> bool:
        for path, equal, value in terms:
            got: Any = rest
            for k in path:
                got = got.get(k) if isinstance(got, Mapping) else None
            if (str(got) == value) != equal:
                return False
        return True

    return keep


class _Handler(http.server.BaseHTTPRequestHandler):
    api: Api
    server_version = "trials-serve"
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        body = b""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            status, out = 400, ApiError(400, f"request body of {self.headers.get('Content-Length')!r} bytes refused: "
                                             f"the limit is {MAX_BODY_BYTES} bytes").body()
        else:
            body = self.rfile.read(length) if length else b""
            status, out = self.api.handle(self.command, url.path, query, body)
        data = json.dumps(out).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        pass


def make_server(api: Api, host: str = "127.0.0.1", port: int = 0) -> http.server.ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"api": api})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve_main(*, root: str, storage: str | None, runtime: str | None, images: Sequence[str] = (),
               project_number: str | None, host: str, port: int, quiet: bool = False) -> int:
    """``trials serve``: answer until SIGINT/SIGTERM; the jobs it started go on under their controllers."""
    from trials.controller.gcs import emulator

    os.makedirs(root, exist_ok=True)
    api = Api(root=os.path.abspath(root), storage=storage, runtime=runtime, images=tuple(images),
              project_number=project_number,
              log=(lambda line: None) if quiet else (lambda line: print(line, flush=True)))
    try:
        server = make_server(api, host, port)
    except OSError as err:
        raise ConfigError(f"--port {port}: cannot listen on {host}:{port}: {err.strerror}") from None
    resumed = api.resume_jobs()
    where = f"http://{host}:{server.server_address[1]}"
    print(f"serving Vertex AI's v1 JobService API on {where} (jobs in {api.root})", flush=True)
    print(f"  aiplatform.init(api_endpoint={where!r}, api_transport='rest', "
          f"credentials=AnonymousCredentials(), project=..., location=...)", flush=True)
    os.makedirs(api.gcs_root, exist_ok=True)
    buckets, why = emulator.start(api.gcs_root)
    if buckets is not None:
        print(f"  Cloud Storage (the jobs' buckets, {api.gcs_root}): STORAGE_EMULATOR_HOST={buckets.host}", flush=True)
    else:
        print(f"  no Cloud Storage endpoint: {why}", flush=True)
    if resumed:
        print(f"resumed {len(resumed)} job{'s' if len(resumed) > 1 else ''}: {', '.join(resumed)}", flush=True)

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        api.stop()
        server.server_close()
        if buckets is not None:
            buckets.stop()
    left = api.running()
    if left:
        print(f"stopped serving; {len(left)} job{'s' if len(left) > 1 else ''} still running under "
              f"{'their controllers' if len(left) > 1 else 'its controller'} ({', '.join(left)}): "
              f"`trials serve` again watches them, `trials cancel JOB --root {root}` stops one", flush=True)
    return protocol.EXIT_OK

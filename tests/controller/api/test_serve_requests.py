"""`trials serve`'s request handling: bad bodies, unknown methods, huge requests, filters, paging;
one clear error in Google's shape each, never a traceback, nothing recorded lost."""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trials.controller.api.controllers import Controllers
from trials.controller.api.server import MAX_BODY_BYTES, Api, ApiError, make_server, parse_filter

PARENT = "/v1/projects/p/locations/l"
JOBS = PARENT + "/hyperparameterTuningJobs"
SPEC = {
    "displayName": "d",
    "studySpec": {"metrics": [{"metricId": "loss", "goal": 2}],
                  "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}]},
    "maxTrialCount": 1,
    "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                                          "containerSpec": {"imageUri": "gcr.io/p/t:1",
                                                            "command": ["python", "-c", "pass"]}}]},
}


@dataclass
class NotRun(Controllers):
    """A job given a controller is only recorded, not run (the SDK tests run them)."""

    started: list[str] = field(default_factory=list)

    def start(self, job_id: str, restarts: int = 0) -> None:
        self.started.append(job_id)


class NoControllers(Api):
    """Requests only: the real API over controllers that record what they would start."""

    def __post_init__(self) -> None:
        self.controllers = NotRun(root=self.root, storage=self.storage)

    @property
    def started(self) -> list[str]:
        return self.controllers.started if isinstance(self.controllers, NotRun) else []


@pytest.fixture
def api(tmp_path: Path) -> NoControllers:
    return NoControllers(root=str(tmp_path / "jobs"))


def error(api: Api, method: str, path: str, body: bytes = b"", query: dict | None = None) -> tuple[int, str, str]:
    status, out = api.handle(method, path, query or {}, body)
    assert set(out) == {"error"} and set(out["error"]) == {"code", "message", "status"}, out
    assert out["error"]["code"] == status
    return status, out["error"]["status"], out["error"]["message"]


def test_bad_bodies_are_invalid_argument_and_make_no_job(api: NoControllers, tmp_path: Path) -> None:
    assert error(api, "POST", JOBS, b"{not json") == (
        400, "INVALID_ARGUMENT", "Invalid JSON payload received. Expecting property name enclosed in double quotes: "
                                 "line 1 column 2 (char 1)")
    assert error(api, "POST", JOBS, b"[1, 2]") == (
        400, "INVALID_ARGUMENT", "Invalid JSON payload received. Expected an object, got list")
    assert error(api, "POST", JOBS, b"\xff\xfe") [:2] == (400, "INVALID_ARGUMENT")
    no_name = {k: v for k, v in SPEC.items() if k != "displayName"}
    assert error(api, "POST", JOBS, json.dumps(no_name).encode()) == (
        400, "INVALID_ARGUMENT", "hyperparameterTuningJob.displayName: Required field is not set.")
    bad = {**SPEC, "maxTrialCount": "many"}
    status, name, message = error(api, "POST", JOBS, json.dumps(bad).encode())
    assert (status, name) == (400, "INVALID_ARGUMENT") and message.startswith("hyperparameterTuningJob: maxTrialCount")
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())
    assert getattr(api, "started", []) == []


def test_unknown_paths_and_methods_are_not_found(api: NoControllers) -> None:
    assert error(api, "GET", "/v1/projects/p/datasets")[:2] == (404, "NOT_FOUND")
    assert error(api, "GET", "/v2/" + JOBS)[:2] == (404, "NOT_FOUND")
    assert error(api, "PUT", JOBS)[:2] == (404, "NOT_FOUND")
    assert error(api, "POST", JOBS + "/1:pause") == (404, "NOT_FOUND", f"no method POST {JOBS}/1:pause (:pause)")
    assert error(api, "GET", JOBS + "/123") == (
        404, "NOT_FOUND", "HyperparameterTuningJob projects/p/locations/l/hyperparameterTuningJobs/123 does not exist")
    assert error(api, "GET", PARENT + "/operations/9")[:2] == (404, "NOT_FOUND")
    assert error(api, "POST", PARENT + "/customJobs", b"{}") == (
        400, "INVALID_ARGUMENT", "customJob.displayName: Required field is not set.")
    assert error(api, "POST", PARENT + "/customJobs", b'{"displayName": "c"}')[:2] == (400, "INVALID_ARGUMENT")
    # control characters in a path are escaped in the message
    assert "\x1b" not in error(api, "GET", "/v1/\x1b[2J")[2]


def test_a_created_job_is_listed_paged_filtered_refused_twice_and_deleted_only_once_ended(api: NoControllers) -> None:
    status, made = api.handle("POST", JOBS, {}, json.dumps(SPEC).encode())
    assert status == 200, made
    assert made["name"].startswith("projects/p/locations/l/hyperparameterTuningJobs/")
    assert made["state"] == "JOB_STATE_QUEUED" and made["displayName"] == "d"
    assert api.started == [made["name"].rsplit("/", 1)[1]]
    status, second = api.handle("POST", JOBS, {}, json.dumps({**SPEC, "displayName": "e"}).encode())
    assert status == 200
    # a create naming an existing job: ALREADY_EXISTS
    assert error(api, "POST", JOBS, json.dumps({**SPEC, "name": made["name"]}).encode())[:2] == (409, "ALREADY_EXISTS")
    status, page = api.handle("GET", JOBS, {"pageSize": "1"}, b"")
    assert status == 200 and [j["name"] for j in page["hyperparameterTuningJobs"]] == [made["name"]]
    status, page2 = api.handle("GET", JOBS, {"pageSize": "1", "pageToken": page["nextPageToken"]}, b"")
    assert [j["name"] for j in page2["hyperparameterTuningJobs"]] == [second["name"]] and "nextPageToken" not in page2
    status, only = api.handle("GET", JOBS, {"filter": 'display_name="e"'}, b"")
    assert [j["name"] for j in only["hyperparameterTuningJobs"]] == [second["name"]]
    assert api.handle("GET", "/v1/projects/q/locations/l/hyperparameterTuningJobs", {}, b"") == (200, {})
    assert error(api, "GET", JOBS, query={"pageToken": "x"}) == (
        400, "INVALID_ARGUMENT", "pageToken: expected an integer >= 0, got 'x'")
    assert error(api, "GET", JOBS, query={"filter": "create_time>1"})[:2] == (400, "INVALID_ARGUMENT")
    # a job not ended cannot be deleted; cancelled (no controller runs it here), it can
    path = "/v1/" + made["name"]
    assert error(api, "DELETE", path)[:2] == (400, "FAILED_PRECONDITION")
    assert api.handle("POST", path + ":cancel", {}, b"") == (200, {})
    assert api.handle("GET", path, {}, b"")[1]["state"] == "JOB_STATE_CANCELLED"
    assert error(api, "POST", path + ":cancel")[:2] == (400, "FAILED_PRECONDITION")
    status, op = api.handle("DELETE", path, {}, b"")
    assert status == 200 and op["done"] is True and op["name"].startswith("projects/p/locations/l/operations/")
    assert api.handle("GET", "/v1/" + op["name"], {}, b"") == (200, op)
    assert error(api, "GET", path)[:2] == (404, "NOT_FOUND")
    assert api.handle("GET", "/v1/" + second["name"], {}, b"")[0] == 200  # the other job is untouched


def test_the_project_number_is_what_trials_get_and_the_paths_project_is_kept(tmp_path: Path) -> None:
    from trials.controller.jobs import view

    api = NoControllers(root=str(tmp_path / "jobs"), project_number="123456")
    status, made = api.handle("POST", "/v1/projects/my-proj/locations/asia-east1/hyperparameterTuningJobs", {},
                              json.dumps(SPEC).encode())
    assert status == 200 and made["name"].startswith("projects/my-proj/locations/asia-east1/")
    h = view.read_job(made["name"].rsplit("/", 1)[1], root=str(tmp_path / "jobs"), storage=None)
    assert h.store.meta().project_number == "123456"  # CLOUD_ML_PROJECT_ID of its trials


def test_filters() -> None:
    job = {"state": "JOB_STATE_RUNNING", "displayName": "a b", "labels": {"team": "x"}}
    assert parse_filter("")(job)
    assert parse_filter('state="JOB_STATE_RUNNING"')(job)
    assert parse_filter('state=JOB_STATE_RUNNING AND displayName="a b" AND labels.team=x')(job)
    assert not parse_filter("state!=JOB_STATE_RUNNING")(job)
    assert not parse_filter("labels.owner=y")(job)
    for bad in ("state", "create_time>1", "state=A OR state=B", 'display_name="unterminated'):
        with pytest.raises(ApiError, match="^filter: cannot read"):
            parse_filter(bad)


def test_a_huge_request_is_refused_unread_with_one_error(api: NoControllers) -> None:
    server = make_server(api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
        conn.putrequest("POST", JOBS)
        conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        conn.putheader("Content-Type", "application/json")
        conn.endheaders()
        conn.send(b"{" * 1024)  # (the rest is never sent: the server must answer without it)
        r = conn.getresponse()
        body = json.loads(r.read())
        assert r.status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
        assert body["error"]["message"] == (f"request body of '{MAX_BODY_BYTES + 1}' bytes refused: the limit is "
                                            f"{MAX_BODY_BYTES} bytes")
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
        conn.request("GET", JOBS + "?filter=state%3DJOB_STATE_QUEUED")
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read()) == {}
        conn.request("GET", JOBS, headers={"Authorization": "Bearer ya29.any-token"})  # any token, or none
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read()) == {}
    finally:
        server.shutdown()
        server.server_close()
    assert getattr(api, "started", []) == []


def test_a_failed_controllers_last_line_is_read_safely(tmp_path: Path) -> None:
    """What a job FAILED by its controller's exit says: the log's last line, escaped; a link planted
    there is not followed."""
    api = NoControllers(root=str(tmp_path / "jobs"))
    folder = tmp_path / "jobs" / "7"
    folder.mkdir(parents=True)
    (folder / "serve-controller.log").write_text("starting\ntrials: error: --runtime podman: not installed\x1b[2J\n\n")
    assert api.runner.log_tail("7") == "trials: error: --runtime podman: not installed\\x1b[2J"
    (folder / "serve-controller.log").unlink()
    (folder / "serve-controller.log").symlink_to("/etc/passwd")
    assert api.runner.log_tail("7") == "(no output)"


def test_an_api_jobs_outputs_and_packages_are_gs_or_under_the_servers_root(tmp_path: Path) -> None:
    """A container mounts a job's local base output (read-write) and packages: through the API, they are
    gs:// or under the server's root, else 400 naming the field, and nothing is made."""
    root = tmp_path / "jobs"
    (root / "inside").mkdir(parents=True)
    (root / "link").symlink_to("/")
    api = NoControllers(root=str(root), _cwd=str(root))
    tuning_field = "hyperparameterTuningJob.trialJobSpec.baseOutputDirectory.outputUriPrefix"
    for prefix in ("/etc", "/", "../outside", str(tmp_path), str(root / "link" / "etc"), str(root) + "-sibling"):
        body = {**SPEC, "trialJobSpec": {**SPEC["trialJobSpec"], "baseOutputDirectory": {"outputUriPrefix": prefix}}}
        status, name, message = error(api, "POST", JOBS, json.dumps(body).encode())
        assert (status, name) == (400, "INVALID_ARGUMENT"), prefix
        assert message == (f"{tuning_field}: a job made through trials serve writes and reads gs:// or a folder "
                           f"under the server's root {root} (--root), got {prefix!r}")
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
            "containerSpec": {"imageUri": "gcr.io/p/t:1", "command": ["true"]}}
    custom = {"displayName": "c",
              "jobSpec": {"workerPoolSpecs": [pool], "baseOutputDirectory": {"outputUriPrefix": "/"}}}
    message = error(api, "POST", PARENT + "/customJobs", json.dumps(custom).encode())[2]
    assert message.startswith("customJob.jobSpec.baseOutputDirectory.outputUriPrefix: a job made through")
    package = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
               "pythonPackageSpec": {"executorImageUri": "gcr.io/p/t:1", "pythonModule": "m",
                                     "packageUris": ["gs://b/p.tar.gz", "/etc/shadow"]}}
    custom = {"displayName": "c", "jobSpec": {"workerPoolSpecs": [package]}}
    message = error(api, "POST", PARENT + "/customJobs", json.dumps(custom).encode())[2]
    assert message.startswith("customJob.jobSpec.workerPoolSpecs[0].pythonPackageSpec.packageUris[1]: "), message
    assert sorted(p.name for p in root.iterdir()) == ["inside", "link"] and getattr(api, "started", []) == []
    for prefix in ("gs://bucket/out", str(root / "inside" / "out"), "inside/out"):
        body = {**SPEC, "trialJobSpec": {**SPEC["trialJobSpec"], "baseOutputDirectory": {"outputUriPrefix": prefix}}}
        status, made = api.handle("POST", JOBS, {}, json.dumps(body).encode())
        assert status == 200, made


def test_a_bad_id_a_malformed_too_deep_or_out_of_range_body_is_invalid_argument_never_internal(
        api: NoControllers, tmp_path: Path) -> None:
    for job_id in ("%2e%2e", "..", "%00", "a%0Ab", "-x", "x" * 200):
        for method, suffix in (("GET", ""), ("POST", ":cancel"), ("DELETE", "")):
            status, name, message = error(api, method, f"{JOBS}/{job_id}{suffix}")
            assert (status, name) == (400, "INVALID_ARGUMENT"), (job_id, message)
            assert message.startswith("Invalid resource name projects/p/locations/l/hyperparameterTuningJobs/")
    named = {**SPEC, "name": "projects/p/locations/l/x/.."}
    status, name, message = error(api, "POST", JOBS, json.dumps(named).encode())
    assert (status, name) == (400, "INVALID_ARGUMENT") and "hyperparameterTuningJob.name" in message
    for body, says in ((b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "Nested deeper than 64 levels"),
                       (b'{"a": ' + b"[" * 65 + b"]" * 65 + b"}", "Nested deeper than 64 levels"),
                       (b'{"maxTrialCount": ' + b"9" * 5000 + b"}", "The number 99999999999999999999... (5000 digits) "
                                                                     "is out of range"),
                       (b'{"maxTrialCount": 18446744073709551616}', "The number 18446744073709551616 is out of range"),
                       (b'{"x": 1e999}', "The number 1e999 is out of range of a double"),
                       (b'{"x": NaN}', "NaN is not JSON"),
                       (b'{"a": "\\ud800"}' + b"\xff", "Invalid JSON payload received.")):
        status, name, message = error(api, "POST", JOBS, body)
        assert (status, name) == (400, "INVALID_ARGUMENT") and says in message, (body[:40], message)
    big = {**SPEC, "maxTrialCount": 2**62}  # in range of the JSON reader, refused by the spec's own rule
    assert error(api, "POST", JOBS, json.dumps(big).encode())[:2] == (400, "INVALID_ARGUMENT")
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())

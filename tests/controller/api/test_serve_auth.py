"""`trials serve` answers only its owner: a request without the token, from a web page (a real headless
Chromium on another loopback port), with a foreign Host, or from another local account runs nothing."""

from __future__ import annotations

import http.server
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from servekit import CUSTOM_JOBS, TUNING_JOBS, Serve, cancel_all, environ_without_token, job_folders, marker_job, ran

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
OTHER_USER = "trials-serve-other"


@pytest.fixture
def serve(tmp_path: Path):
    s = Serve(tmp_path / "jobs", env=environ_without_token())
    yield s
    s.stop()
    cancel_all(s.root)


def test_without_the_token_every_method_is_401_in_googles_shape_and_nothing_runs(serve: Serve,
                                                                                  tmp_path: Path) -> None:
    assert serve.token and serve.lines[1].startswith("  aiplatform.init(api_endpoint=")
    token_file = serve.root / "serve.token"
    assert token_file.read_text() == serve.token and stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert f"is in {token_file} (mode 0600; gcloud: --access-token-file={token_file})" in serve.lines[2]
    json_type = {"Content-Type": "application/json"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {serve.token}"},
                    {"Authorization": f"Bearer {serve.token}x"}, {"Authorization": serve.token or ""}):
        for method, path in (("POST", CUSTOM_JOBS), ("POST", TUNING_JOBS), ("GET", CUSTOM_JOBS),
                             ("GET", CUSTOM_JOBS + "/1"), ("POST", CUSTOM_JOBS + "/1:cancel"),
                             ("DELETE", CUSTOM_JOBS + "/1")):
            status, out, got = serve.call(method, path, marker_job() if method == "POST" else None,
                                          {**headers, **json_type})
            assert status == 401, (headers, method, path, out)
            assert out["error"]["status"] == "UNAUTHENTICATED" and out["error"]["code"] == 401
            assert str(token_file) in out["error"]["message"]
            assert got["WWW-Authenticate"] == 'Bearer realm="trials serve"'
    time.sleep(1)
    assert job_folders(serve.root) == [] and ran(serve.root) == []
    # the token it printed: the command runs (the same request, so the test above could see one run)
    made = serve.ok("POST", CUSTOM_JOBS, marker_job())
    assert made["name"].startswith("projects/p/locations/l/customJobs/")
    assert ran(serve.root, timeout_s=120)


def test_a_foreign_host_a_web_origin_and_a_non_json_body_are_refused_even_with_the_token(serve: Serve,
                                                                                       tmp_path: Path) -> None:
    auth, json_type = serve.auth(), {"Content-Type": "application/json"}
    port = serve.port
    refused = [
        (403, "PERMISSION_DENIED", {"Host": f"rebind.attacker.example:{port}"}),  # DNS rebinding
        (403, "PERMISSION_DENIED", {"Host": "evil.example"}),
        (403, "PERMISSION_DENIED", {"Host": f"10.1.2.3:{port}"}),
        (403, "PERMISSION_DENIED", {"Origin": f"http://127.0.0.1:{port + 1}"}),
        (403, "PERMISSION_DENIED", {"Origin": "null"}),
        (403, "PERMISSION_DENIED", {"Sec-Fetch-Site": "cross-site"}),
        (403, "PERMISSION_DENIED", {"Sec-Fetch-Site": "same-site"}),  # a page on another port of this host
        (415, "INVALID_ARGUMENT", {"Content-Type": "text/plain"}),  # a "simple" request, sent without preflight
        (415, "INVALID_ARGUMENT", {"Content-Type": "application/x-www-form-urlencoded"}),
    ]
    for code, name, extra in refused:
        status, out, _ = serve.call("POST", CUSTOM_JOBS, marker_job(), {**auth, **json_type, **extra})
        assert (status, out["error"]["status"]) == (code, name), (extra, out)
    status, out, _ = serve.call("POST", CUSTOM_JOBS, marker_job(), auth)  # a body without Content-Type
    assert status == 415 and out["error"]["message"] == "Content-Type must be application/json, got none"
    status, out, _ = serve.call("GET", CUSTOM_JOBS, None, {**auth, "Host": f"evil.example:{port}"})
    assert status == 403 and "Host 'evil.example:" in out["error"]["message"]  # reads refused too
    time.sleep(1)
    assert job_folders(serve.root) == [] and ran(serve.root) == []
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "127.0.0.1", f"[::1]:{port}"):
        status, _, _ = serve.call("GET", CUSTOM_JOBS, None, {**auth, "Host": host})
        assert status == 200, host
    made, _, _ = serve.call("POST", CUSTOM_JOBS, marker_job(),
                            {**auth, "Content-Type": "application/json; charset=utf-8"})
    assert made == 200 and ran(serve.root, timeout_s=120)


def test_the_token_is_fixed_by_flag_or_variable_and_off_only_by_no_auth_with_a_warning(tmp_path: Path) -> None:
    env = {**environ_without_token(), "TRIALS_SERVE_TOKEN": "from-the-variable_0123456789"}
    s = Serve(tmp_path / "a", env=env)
    try:
        assert s.token == "from-the-variable_0123456789"
        assert "the token (from TRIALS_SERVE_TOKEN) is in" in s.lines[2]
        assert s.call("GET", CUSTOM_JOBS, None, s.auth())[0] == 200
    finally:
        s.stop()
    s = Serve(tmp_path / "b", "--token", "from.the~flag+1/2=", env=env)  # the flag wins over the variable
    try:
        assert s.token == "from.the~flag+1/2=" and (tmp_path / "b" / "serve.token").read_text() == s.token
        assert s.call("GET", CUSTOM_JOBS, None, {"Authorization": "Bearer from-the-variable_0123456789"})[0] == 401
    finally:
        s.stop()
    s = Serve(tmp_path / "b", "--no-auth", env=env)
    try:
        assert s.token is None and "credentials=AnonymousCredentials()" in s.lines[1]
        assert s.lines[2].startswith(f"  warning: --no-auth: anyone who can reach {s.url} runs commands as this user")
        assert not (tmp_path / "b" / "serve.token").exists()  # (a stale token is not left to be used)
        assert s.call("GET", CUSTOM_JOBS, None, {})[0] == 200
        assert s.call("GET", CUSTOM_JOBS, None, {"Origin": "http://127.0.0.1:1"})[0] == 403  # (still checked)
    finally:
        s.stop()
    for args, message in ((["--token", "has space"], "trials: error: --token: a token is letters, digits"),
                          (["--token", "x", "--no-auth"], "trials: error: --no-auth and --token: choose one")):
        run = subprocess.run([sys.executable, "-m", "trials", "serve", "--port", "0", "--root", str(tmp_path / "c"),
                              *args], capture_output=True, text=True, timeout=60, env=env)
        assert run.returncode == 2 and run.stderr.startswith(message) and run.stderr.count("\n") == 1, run.stderr
        assert "Traceback" not in run.stderr and "has space" not in run.stderr


class _Page(http.server.BaseHTTPRequestHandler):
    """Serves the attacking page and records when its requests were sent."""

    html = b""
    done: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.startswith("/done"):
            type(self).done.append(self.path)
        body = self.html if self.path == "/" else b"ok"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.mark.parametrize("mode", ["token", "no-auth"])
def test_a_web_page_on_another_loopback_port_gets_no_command_run(tmp_path: Path, mode: str) -> None:
    """A page's "simple" no-cors POST (text/plain, no preflight) to the server, by its address and by a
    rebound name: nothing runs, with the token and even with --no-auth (the Origin and Host checks)."""
    if CHROMIUM is None:
        if os.environ.get("TRIALS_REQUIRE_CHROMIUM") == "1":
            pytest.fail("headless Chromium is required here (TRIALS_REQUIRE_CHROMIUM=1)")
        pytest.skip("headless Chromium is not installed")
    s = Serve(tmp_path / "jobs", *(["--no-auth"] if mode == "no-auth" else []), env=environ_without_token())
    body = marker_job()
    import json

    targets = [f"{s.url}{CUSTOM_JOBS}", f"http://rebind.attacker.example:{s.port}{CUSTOM_JOBS}",
               f"http://localhost:{s.port}{CUSTOM_JOBS}"]
    page = type("Page", (_Page,), {"done": [], "html": f"""<!doctype html><script>
        const body = {json.dumps(json.dumps(body))};
        Promise.allSettled({json.dumps(targets)}.map(u => fetch(u, {{method: "POST", mode: "no-cors",
            headers: {{"Content-Type": "text/plain"}}, body}})))
          .then(r => fetch("/done?" + r.map(x => x.status).join(",")));
        </script>""".encode()})
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), page)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    profile = tempfile.mkdtemp(prefix="trials-chromium-")
    browser = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--host-resolver-rules=MAP rebind.attacker.example 127.0.0.1",
         f"http://127.0.0.1:{site.server_address[1]}/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not page.done and time.monotonic() < deadline and browser.poll() is None:
            time.sleep(0.1)
        assert page.done == ["/done?fulfilled,fulfilled,fulfilled"], page.done  # the three requests were sent
        time.sleep(2)  # (a job made by them would be there by now)
        assert job_folders(s.root) == [] and ran(s.root, timeout_s=10) == []
    finally:
        os.killpg(browser.pid, signal.SIGKILL)
        browser.wait()
        site.shutdown()
        site.server_close()
        shutil.rmtree(profile, ignore_errors=True)
        s.stop()
        cancel_all(s.root)


def test_another_local_account_without_the_token_gets_401_and_cannot_read_it(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making and switching to another account needs root")
    python = shutil.which("python3", path="/usr/bin:/bin")  # the test venv's may be unreadable to that user
    if python is None or shutil.which("useradd") is None:
        pytest.skip("no system python3 or useradd")
    made_user = False
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", OTHER_USER], check=True,
                       capture_output=True, timeout=60)
        made_user = True
    work = Path(tempfile.mkdtemp(prefix="trials-serve-other-"))
    try:
        os.chmod(work, 0o755)  # the other account can reach the root: only the token file's mode stops it
        s = Serve(work / "jobs", env=environ_without_token())
        os.chmod(work / "jobs", 0o755)
        try:
            import json

            probe = f"""
import json, urllib.request, urllib.error
def call(method, data=None):
    req = urllib.request.Request({s.url + CUSTOM_JOBS!r}, data=data, method=method,
                                 headers={{"Content-Type": "application/json"}})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code
try:
    open({str(s.root / "serve.token")!r}).read()
    token = "read"
except OSError as err:
    token = type(err).__name__
print(json.dumps([call("GET"), call("POST", {json.dumps(marker_job())!r}.encode()), token]))
"""
            user = pwd.getpwnam(OTHER_USER)
            run = subprocess.run([python, "-c", probe], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                                 capture_output=True, text=True, timeout=120, cwd="/",
                                 env={"PATH": "/usr/bin:/bin", "HOME": "/"})
            assert run.returncode == 0, run.stderr
            assert json.loads(run.stdout) == [401, 401, "PermissionError"]
            time.sleep(1)
            assert job_folders(s.root) == [] and ran(s.root) == []
        finally:
            s.stop()
            cancel_all(s.root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if made_user:
            subprocess.run(["userdel", OTHER_USER], capture_output=True, timeout=60)

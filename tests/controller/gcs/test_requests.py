"""Who the local Cloud Storage endpoint answers: its owner's programs (the google-cloud-storage client
sends no Origin), never a web page (a foreign Host: DNS rebinding; a browser's Origin or Sec-Fetch-Site),
and a flood of requests for missing objects never stops it. Real endpoint processes, raw HTTP, and a real
headless Chromium loading a page from another loopback port."""

from __future__ import annotations

import http.server
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from gcskit import call, download, endpoint, media_upload, needs_gcs

pytestmark = needs_gcs

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "gcs" / "b").mkdir(parents=True)
    (tmp_path / "gcs" / "b" / "x.txt").write_text("x")
    return tmp_path / "gcs"


def test_a_foreign_host_is_refused_and_loopback_names_are_served(root):
    with endpoint(root) as gcs:
        port = urlsplit(gcs.host).port
        for host in (f"rebind.attacker.example:{port}", "evil.example", f"10.1.2.3:{port}", "localhost.evil.example",
                     f"127.0.0.1:{port}@evil.example", "127.0.0.1:notaport"):
            status, body = call(gcs.host, "GET", "/storage/v1/b/b/o", headers={"Host": host})
            assert status == 403, host
            assert json.loads(body)["error"]["code"] == 403
            status, _ = media_upload(gcs.host, "b", "from-rebind.txt", b"x", headers={"Host": host})
            assert status == 403, host
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", f"127.0.0.2:{port}",
                     f"LOCALHOST:{port}"):
            status, body = call(gcs.host, "GET", "/storage/v1/b/b/o", headers={"Host": host})
            assert status == 200, (host, body)
            assert [o["name"] for o in json.loads(body)["items"]] == ["x.txt"]
    assert not (root / "b" / "from-rebind.txt").exists()


def _own_address() -> str:
    """An address of this machine that is not a loopback one ("" when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))  # nothing is sent: the kernel picks the source address
            address = str(s.getsockname()[0])
        except OSError:
            return ""
    return "" if ipaddress.ip_address(address).is_loopback else address


def test_the_bound_address_is_a_host_it_serves(root):
    """A container on a trial network reaches the endpoint at the gateway it is bound to (not a loopback
    address: the Host it sends is accepted because it is the bound one)."""
    address = _own_address()
    if not address:
        pytest.skip("this machine has no address but loopback ones")
    with endpoint(root, bind=address) as gcs:
        assert gcs.host.startswith(f"http://{address}:")
        status, _ = call(gcs.host, "GET", "/storage/v1/b/b/o", headers={"Host": urlsplit(gcs.host).netloc})
        assert status == 200
        for host in ("gateway.evil.example", f"10.1.2.3:{urlsplit(gcs.host).port}"):
            status, _ = call(gcs.host, "GET", "/storage/v1/b/b/o", headers={"Host": host})
            assert status == 403, host


def test_an_ipv6_bound_address_is_served(root):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with endpoint(root, bind="::1") as gcs:
        assert gcs.host.startswith("http://[::1]:")
        status, body = download(gcs.host, "b", "x.txt")
        assert (status, body) == (200, b"x")


def test_a_request_a_browser_marks_as_a_pages_is_refused(root):
    with endpoint(root) as gcs:
        for headers in ({"Origin": "http://127.0.0.1:8000"}, {"Origin": "null"},
                        {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                        {"Sec-Fetch-Site": "same-origin"}):
            status, _ = media_upload(gcs.host, "b", "from-page.txt", b"x", headers={**headers,
                                                                                   "Content-Type": "text/plain"})
            assert status == 403, headers
            status, body = download(gcs.host, "b", "x.txt") if not headers else call(
                gcs.host, "GET", "/download/storage/v1/b/b/o/x.txt?alt=media", headers=headers)
            assert status == 403 and body != b"x", headers
        status, body = call(gcs.host, "GET", "/download/storage/v1/b/b/o/x.txt?alt=media",
                            headers={"Sec-Fetch-Site": "none"})  # typed into the address bar by its owner
        assert (status, body) == (200, b"x")
    assert not (root / "b" / "from-page.txt").exists()


def test_wipe_is_not_served(root):
    with endpoint(root) as gcs:
        status, _ = call(gcs.host, "GET", "/wipe")
        assert status == 403
        status, _ = call(gcs.host, "GET", "/wipe?keep-buckets=true")
        assert status == 403
    assert (root / "b" / "x.txt").read_text() == "x"


def test_a_flood_of_requests_for_missing_objects_never_stops_the_endpoint(root):
    """Each logged a line to a stderr pipe nobody reads after the start: ~2000 of them filled it and
    the endpoint stopped for good (every trial's storage with it)."""
    with endpoint(root) as gcs:
        for i in range(3000):
            status, _ = download(gcs.host, "b", f"missing-{i}")
            assert status == 404, i
        status, body = download(gcs.host, "b", "x.txt")
        assert (status, body) == (200, b"x")


class _Page(http.server.BaseHTTPRequestHandler):
    html = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.html)))
        self.end_headers()
        self.wfile.write(self.html)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_a_page_from_another_loopback_port_changes_nothing(root, tmp_path):
    """Headless Chromium loads a page served on another loopback port; its script sends what a page
    may send without a preflight: a no-cors text/plain POST upload, GETs of /wipe and of an object."""
    if CHROMIUM is None:
        if os.environ.get("TRIALS_REQUIRE_CHROMIUM") == "1":
            pytest.fail("the browser test is required here (TRIALS_REQUIRE_CHROMIUM=1): headless Chromium is missing")
        pytest.skip("headless Chromium is not installed")
    with endpoint(root) as gcs:
        target = gcs.host
        script = f"""
          const t = {json.dumps(target)};
          fetch(t + "/upload/storage/v1/b/b/o?uploadType=media&name=from-page.txt",
                {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: "page"}})
            .finally(() => {{ document.title = "posted"; }});
          new Image().src = t + "/wipe";
          fetch(t + "/upload/storage/v1/b/b/o?uploadType=media&name=x.txt",
                {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: "overwritten"}});
          fetch(t + "/storage/v1/b/b/o/x.txt", {{method: "DELETE", mode: "no-cors"}});
        """
        page = type("Page", (_Page,), {"html": f"<html><body><script>{script}</script></body></html>".encode()})
        site = http.server.HTTPServer(("127.0.0.1", 0), page)
        thread = threading.Thread(target=site.serve_forever, daemon=True)
        thread.start()
        try:
            profile = tmp_path / "profile"
            run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                                  "--virtual-time-budget=5000", "--dump-dom",
                                  f"http://127.0.0.1:{site.server_address[1]}/"],
                                 capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr[-2000:]
        finally:
            site.shutdown()
            site.server_close()
        status, body = download(gcs.host, "b", "x.txt")
        assert (status, body) == (200, b"x")
    assert sorted(os.listdir(root / "b")) == ["x.txt"]
    assert (root / "b" / "x.txt").read_text() == "x"

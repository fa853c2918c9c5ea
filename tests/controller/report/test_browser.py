"""The report page in a real browser (headless Chromium, skipped where it is not installed, unless
``TRIALS_REQUIRE_CHROMIUM=1``, as .ci/run sets where it installed it): the script runs, pointing at a
trial's line shows its tip and highlights it in every plot and table."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
from jobkit import fake_job

from trials.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("TRIALS_REQUIRE_CHROMIUM") == "1"


def _needs(what: bool, why: str) -> None:
    """Skip without ``what``, or fail where the browser test must run (``TRIALS_REQUIRE_CHROMIUM=1``)."""
    if what:
        return
    if REQUIRED:
        pytest.fail(f"the browser test is required here (TRIALS_REQUIRE_CHROMIUM=1): {why}")
    pytest.skip(why)


@pytest.fixture(autouse=True)
def _chromium() -> None:
    _needs(CHROMIUM is not None, "headless Chromium is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _hover(ws_url: str, page_url: str, selector: str) -> tuple[str, list[int], bytes]:
    try:
        import websockets
    except ImportError:
        _needs(False, "the websockets package is not installed")
    async with websockets.connect(ws_url, max_size=2**26) as ws:
        n = 0

        async def call(method: str, **params: object) -> dict:
            nonlocal n
            n += 1
            await ws.send(json.dumps({"id": n, "method": method, "params": params}))
            while True:
                msg = json.loads(await ws.recv())
                if msg.get("id") == n:
                    return msg.get("result", {})

        async def value(expression: str) -> object:
            return (await call("Runtime.evaluate", expression=expression, returnByValue=True))["result"]["value"]

        await call("Page.enable")
        await call("Page.navigate", url=page_url)
        for _ in range(100):
            if await value("document.readyState") == "complete":
                break
            await asyncio.sleep(0.1)
        # points along the trial's line, in screen coordinates; move there until the tip shows
        points = await value(f"""(function(){{var p=document.querySelector('{selector}');
            p.scrollIntoView({{block:'center'}}); var m=p.getScreenCTM(), L=p.getTotalLength(), out=[];
            for (var i=1;i<10;i++){{var q=p.getPointAtLength(L*i/10);
              var s=new DOMPoint(q.x,q.y).matrixTransform(m); out.push([s.x,s.y]);}} return out;}})()""")
        tip, hot = "", [0, 0]
        for x, y in points:
            await call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
            tip, *hot = await value("[document.querySelector('.tip').style.display==='block'"
                                    "? document.querySelector('.tip').textContent : '',"
                                    " document.querySelectorAll('.plot .hot').length,"
                                    " document.querySelectorAll('tr.hot').length]")
            if tip:
                break
        shot = await call("Page.captureScreenshot", format="png")
        return tip, hot, base64.b64decode(shot["data"])


def test_pointing_at_a_trial_shows_its_tip_and_highlights_it_everywhere(tmp_path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        _needs(False, "matplotlib is not installed")
    fake_job(tmp_path, outcomes=[("ok", [0.9, 0.5, 0.3], False), ("ok", [0.8, 0.7], True),
                                 ("ok", [0.7, 0.4, 0.2], False), ("ok", [0.6, 0.5, 0.45], False), None, None])
    assert main(["report", "rep", "--root", str(tmp_path / "jobs")]) == 0
    page = (tmp_path / "jobs" / "rep" / "report" / "index.html").as_uri()
    port = _free_port()
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={port}",
            f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1200", "about:blank"]
    browser = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as r:
                    tabs = json.load(r)
                break
            except OSError:
                assert time.monotonic() < deadline, "Chromium did not start"
                time.sleep(0.2)
        ws_url = next(t["webSocketDebuggerUrl"] for t in tabs if t["type"] == "page")
        tip, hot, png = asyncio.run(_hover(ws_url, page, '#parallel_coordinate [data-trial="3"] path'))
    finally:
        browser.terminate()
        browser.wait(timeout=30)
    (tmp_path / "hover.png").write_bytes(png)
    assert tip.startswith("trial 3 · SUCCEEDED · loss=0.2 · lr=")
    # the same trial in the history, the learning curves and the parallel coordinates, and its rows
    # in the top trials and all trials tables
    assert hot == [3, 2]

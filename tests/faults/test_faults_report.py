"""`trials report` killed half-way (SIGTERM, SIGKILL): `report/` is whole or absent, an older report
stays whole until the new one replaces it, and the next `trials report` cleans up and works."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

pytestmark = [pytest.mark.faults]

# `trials report` with one change: after its first PNG it says so in HOLD_FILE and waits for a signal
# (the moment the test kills it is arranged, not guessed)
HOLDING_REPORT = """\
import os, signal, sys
from matplotlib.figure import Figure

real = Figure.savefig
main_pid = os.getpid()

def savefig(self, fname, *args, **kwargs):
    real(self, fname, *args, **kwargs)
    if os.environ.get("HOLD_IN_CHILD") and os.getpid() == main_pid:
        return  # (held in the forked child that draws two of the plots, killed with the command)
    if str(fname).endswith(".png") and not os.path.exists(os.environ["HOLD_FILE"]):
        with open(os.environ["HOLD_FILE"], "w") as f:
            f.write(str(fname))
        while True:
            signal.pause()

Figure.savefig = savefig
from trials.cli import main
sys.exit(main(sys.argv[1:]))
"""


def assert_whole(report: Path) -> bytes:
    """index.html is complete and every plot it shows has its PNG, nothing else is there; its bytes."""
    index = (report / "index.html").read_bytes()
    assert index.rstrip().endswith(b"</html>"), index[-200:]
    shown = set(re.findall(r"<div class='plot' id='([^']+)'>", index.decode()))
    assert shown, "the report shows no plot (the test needs a report with PNGs)"
    assert {p.name for p in report.iterdir()} == {"index.html"} | {f"{stem}.png" for stem in shown}
    for stem in shown:
        png = (report / f"{stem}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and png.endswith(b"IEND\xaeB`\x82"), stem
    return index


def leftovers(job_dir: Path) -> list[str]:
    return sorted(p.name for p in job_dir.iterdir() if p.name.startswith(".report."))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("earlier", [False, True], ids=["first-report", "over-an-earlier-report"])
@pytest.mark.parametrize("in_child", [False, True], ids=["", "held-in-the-drawing-child"])
def test_a_report_killed_half_way_leaves_the_old_report_or_none(jobs, signum, earlier, in_child):
    job_id = jobs.job_id("report")
    out = jobs.sweep(jobs.spec(n=4), job_id, "--epochs=3", opts=["--quiet"])
    assert out.returncode == 0, out.stderr
    job_dir = jobs.job_dir(job_id)
    report = job_dir / "report"
    old = None
    if earlier:
        first = jobs.cli("report", job_id)
        assert first.returncode == 0, first.stderr
        old = assert_whole(report)
    (jobs.root / "holding_report.py").write_text(HOLDING_REPORT)
    hold = jobs.root / "hold"
    proc = subprocess.Popen([sys.executable, str(jobs.root / "holding_report.py"), "report", job_id],
                            cwd=jobs.root, env={**jobs.env(), "HOLD_FILE": str(hold),
                                                **({"HOLD_IN_CHILD": "1"} if in_child else {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jobs.started.append(proc)
    deadline = time.monotonic() + 120
    while not hold.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the report never wrote its first PNG"
        time.sleep(0.02)
    written = hold.read_text()
    os.kill(proc.pid, signum)  # one PNG written, the others and index.html not yet
    proc.communicate(timeout=30)
    assert proc.returncode == -signum
    assert Path(written).exists()  # the kill came in the middle of the report, as arranged
    if earlier:
        assert assert_whole(report) == old  # the earlier report, untouched
    else:
        assert not report.exists(), sorted(p.name for p in report.iterdir())
    assert leftovers(job_dir), "the killed report left no staging folder (where did it write?)"
    again = jobs.cli("report", job_id)
    assert again.returncode == 0, again.stderr
    assert f"report: {report / 'index.html'}" in again.stdout, again.stdout
    assert_whole(report)
    assert leftovers(job_dir) == []  # the killed run's folder was removed

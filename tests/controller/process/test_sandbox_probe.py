"""The sandbox probe's folder of a controller killed during its probe is removed by the next one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trials.controller.process import sandbox


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_probe_folders_of_dead_controllers_go_and_the_rest_stay(tmp_path: Path) -> None:
    job = tmp_path / "job"
    (job / f".sandbox-probe-{dead_pid()}" / "probe" / "upper").mkdir(parents=True)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    try:
        (job / f".sandbox-probe-{alive.pid}").mkdir()  # a worker of the same folder probing now
        (job / ".sandbox-probe-notapid").mkdir()
        (job / f".sandbox-probe-{dead_pid()}").symlink_to(outside)  # a link is never followed
        (job / "7").mkdir()
        sandbox._remove_dead_probes(str(job))
        left = sorted(p.name for p in job.iterdir())
        assert left == sorted(["7", ".sandbox-probe-notapid", f".sandbox-probe-{alive.pid}",
                               *(p.name for p in job.iterdir() if p.is_symlink())])
        assert any(p.is_symlink() for p in job.iterdir()) and (outside / "keep").read_text() == "x"
    finally:
        alive.kill()
        alive.wait()

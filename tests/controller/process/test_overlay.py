"""A sandboxed replica's launch folder is a volatile overlay: its end syncs no file system.

Without ``volatile`` the unmount of the replica's overlay (when its namespace ends) runs syncfs on the
whole file system under the upper layer, so every replica's exit waited for every dirty page there
(another trial's checkpoint, a dataset being unpacked): 159 ms with 300 MB dirty on this machine kind.
The copy-on-write layer is thrown away with the replica, as a Vertex container's is.

Real shim, real replica: the trainer prints the mount options of its own working folder.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from trials.controller.process import sandbox, shim

PRINT_OPTIONS = """
import os
cwd = os.getcwd()
for line in open("/proc/self/mountinfo"):
    fields = line.split(" - ")
    if fields[0].split()[4] == cwd:
        kind, _source, options = fields[1].split()[:3]
        print(kind, options)
"""


def _kernel_at_least(major: int, minor: int) -> bool:
    parts = os.uname().release.split(".")
    try:
        return (int(parts[0]), int(parts[1].split("-")[0])) >= (major, minor)
    except (ValueError, IndexError):
        return False


def run_in_view(tmp_path: Path, code: str) -> tuple[str, Path]:
    try:
        shim.shim_path()
    except shim.ShimUnavailable as err:
        pytest.skip(f"no exec shim here: {err}")
    launch, job = tmp_path / "launch", tmp_path / "job"
    launch.mkdir()
    trial = job / "1"
    trial.mkdir(parents=True)
    box = sandbox.detect(launch_dir=str(launch), job_dir=str(job), gcs_root=str(job / "gcs"))
    if not box.on:
        pytest.skip(f"no sandbox here: {box.reason}")
    out = trial / "out.log"
    replica = sandbox.start_sandboxed(
        box, [sys.executable, "-c", code], env=dict(os.environ), trial_dir=str(trial), outputs=(),
        replica="workerpool0-0", stdout_path=str(out), stderr_path=str(out), name="workerpool0-0")
    deadline = time.monotonic() + 60
    while replica.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    replica.close()
    ended = replica.poll()
    assert ended is not None and ended.status == 0, out.read_text()
    assert replica.upper_dir is not None
    return out.read_text(), Path(replica.upper_dir)


@pytest.mark.skipif(not _kernel_at_least(5, 10), reason="overlayfs has no volatile before Linux 5.10")
def test_the_launch_folder_is_a_volatile_overlay_whose_writes_land_in_the_upper_layer(tmp_path: Path) -> None:
    code = PRINT_OPTIONS + "\nopen('written.txt', 'w').write('kept')\n"
    text, upper = run_in_view(tmp_path, code)
    kind, options = text.split()
    assert kind == "overlay"
    assert "volatile" in options.split(",") or "fsync=volatile" in options.split(","), options
    assert (upper / "written.txt").read_text() == "kept"  # after the unmount: nothing lost by skipping syncfs
    assert not (tmp_path / "launch" / "written.txt").exists()

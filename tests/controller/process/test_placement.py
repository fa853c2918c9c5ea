"""A replica keeps the controller's CPU set: the shim pins each of its forks to the forking CPU (so a
child does not queue behind a busy trainer) and both sides take the original set back at once.

Real shim, real children: the trainer prints ``os.sched_getaffinity(0)``; with the pinning left in
place it would print one CPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trials.controller.process import sandbox, shim
from trials.controller.process.replica import Replica

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: a pinned child looks the same")

PRINT_CPUS = "import os; print(sorted(os.sched_getaffinity(0)))"


@contextlib.contextmanager
def controller_cpus(cpus: set[int]) -> Iterator[None]:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def run_replica(tmp_path: Path, box_on: bool) -> list[int]:
    try:
        shim.shim_path()
    except shim.ShimUnavailable as err:
        pytest.skip(f"no exec shim here: {err}")
    launch, job = tmp_path / "launch", tmp_path / "job"
    launch.mkdir(exist_ok=True)
    trial = job / "1"
    trial.mkdir(parents=True, exist_ok=True)
    if box_on:
        box = sandbox.detect(launch_dir=str(launch), job_dir=str(job), gcs_root=str(job / "gcs"))
        if not box.on:
            pytest.skip(f"no sandbox here: {box.reason}")
    else:
        box = sandbox.off(str(launch), str(job), str(job / "gcs"), "test")
    out = trial / f"out-{time.monotonic_ns()}.log"
    replica: Replica = sandbox.start_sandboxed(
        box, [sys.executable, "-c", PRINT_CPUS], env=dict(os.environ), trial_dir=str(trial), outputs=(),
        replica="workerpool0-0", stdout_path=str(out), stderr_path=str(out), name="workerpool0-0")
    deadline = time.monotonic() + 60
    while replica.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    replica.close()
    ended = replica.poll()
    assert ended is not None and ended.status == 0, out.read_text()
    return [int(c) for c in out.read_text().strip().strip("[]").split(",")]


@pytest.mark.parametrize("box_on", [True, False], ids=["sandbox", "no-sandbox"])
def test_a_replica_gets_the_controllers_cpus_not_the_forking_one(tmp_path: Path, box_on: bool) -> None:
    everything = sorted(os.sched_getaffinity(0))
    for _ in range(3):  # each time from whichever CPU the shim ran on
        assert run_replica(tmp_path, box_on) == everything


@pytest.mark.parametrize("box_on", [True, False], ids=["sandbox", "no-sandbox"])
def test_a_controller_limited_to_some_cpus_gives_its_replicas_the_same(tmp_path: Path, box_on: bool) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    some = set(allowed[-2:])  # (taskset -c ... trials sweep): never widened to every CPU
    with controller_cpus(some):
        assert run_replica(tmp_path, box_on) == sorted(some)
    with controller_cpus({allowed[0]}):
        assert run_replica(tmp_path, box_on) == [allowed[0]]


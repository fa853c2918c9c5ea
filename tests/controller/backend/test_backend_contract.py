"""One contract every replica backend keeps, run over each backend this machine has.

Modelled on optuna's storage conformance suite: the same cases, through the seam's protocol only
(``ReplicaBackend.start``, ``ReplicaHandle.poll``/``begin_stop``/``advance_stop``/``close``), over host
processes in their sandbox and without it, podman, docker and the loop's scripted backend. A backend is
skipped only where its part is missing here, and not where CI requires it (``TRIALS_REQUIRE_CONTAINERS``,
``TRIALS_REQUIRE_DOCKER``, as the backends' own suites). Cases a backend cannot have (the scripted
backend writes no log and starts no child) say so in ``Kit.lacks``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trials import protocol
from trials.controller.backend.protocol import ReplicaBackend, ReplicaHandle, ReplicaStart

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "loop"))
from backendkit import FakeBackend, FakeClock, Script  # noqa: E402

BASE_IMAGE = os.environ.get("TRIALS_TEST_BASE_IMAGE", "localhost/trials-debpy:1")
IMAGE_URI = "us-docker.pkg.dev/contract/images/python:1"  # what a request names; the kit maps it to BASE_IMAGE
GRACE_S = 2.0

_READY = "import os, pathlib, signal, sys, time\nready = pathlib.Path(sys.argv[1]) / 'ready'\n"
PROGRAMS = {  # each case's trainer, as a python -c program; argv[1]: the trial folder
    "exit0": "import sys\nprint('out line', flush=True)\nprint('err line', file=sys.stderr, flush=True)\n",
    "exit1": "raise SystemExit(1)\n",
    # a trainer that ends on SIGTERM as the signal's default action would (143; in a container it is PID 1,
    # where the default action is ignored, so it says so itself)
    "term-exits": _READY + "signal.signal(signal.SIGTERM, lambda *_: os._exit(143))\nready.write_text('1')\n"
                           "time.sleep(120)\n",
    "ignores-term": _READY + "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nready.write_text('1')\n"
                             "time.sleep(120)\n",
    # exits soon, leaving a child that ticks into the trial folder while it runs
    "leaves-child": "import subprocess, sys\n"
                    "subprocess.Popen([sys.executable, '-c', 'import pathlib, sys, time\\n"
                    "p = pathlib.Path(sys.argv[1]) / \"ticks\"\\nwhile True:\\n"
                    "    with p.open(\"a\") as f: f.write(\".\")\\n    time.sleep(0.1)\\n', sys.argv[1]])\n"
                    "import time; time.sleep(0.5)\n",
}
SCRIPTS = {  # the same cases for the scripted backend (a fake clock, no process)
    "exit0": Script(steps=1, exit_code=0),
    "exit1": Script(steps=1, exit_code=1),
    "term-exits": Script(steps=10_000, on_term="exit"),
    "ignores-term": Script(steps=10_000, on_term="ignore"),
}


@dataclass
class Kit:
    """One backend under the contract: its backend, its clock and how it starts a case."""

    backend: ReplicaBackend
    start: Callable[[str, Path], ReplicaHandle]
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    lacks: dict[str, str] = field(default_factory=dict)  # case -> why it cannot have it
    stop_status: int = 143  # a replica that ends on the stop it was asked for (in-process: 75, as asked)
    opened: bool = False

    def wait_exit(self, h: ReplicaHandle, timeout_s: float = 90.0) -> int:
        deadline = self.monotonic() + timeout_s
        while (status := h.poll()) is None:
            assert self.monotonic() < deadline, f"{h.name} did not exit within {timeout_s}s"
            self.sleep(0.05)
        return status

    def stop(self, h: ReplicaHandle, grace_s: float = GRACE_S, timeout_s: float = 90.0) -> tuple[int, float]:
        """TERM, the grace, KILL, as the loop stops a replica; returns its status and how long it took."""
        started = self.monotonic()
        h.begin_stop(started)
        while not h.advance_stop(self.monotonic(), grace_s):
            assert self.monotonic() - started < timeout_s, f"{h.name} did not stop within {timeout_s}s"
            self.sleep(0.05)
        status = h.poll()
        assert status is not None
        return status, self.monotonic() - started


def _request(tmp: Path, case: str, **kw: Any) -> ReplicaStart:
    trial = tmp / "job" / "1"
    trial.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", os.defpath), protocol.ENV_TRIAL_ID: "1", protocol.ENV_ATTEMPT: "0",
           protocol.ENV_METRIC_FILE: str(trial / "hypertune.metrics")}
    return ReplicaStart(argv=kw.pop("argv", (sys.executable, "-c", PROGRAMS.get(case, ""), str(trial))), env=env,
                        cwd=str(tmp / "launch"), name="workerpool0-0", label="workerpool0-0", trial_dir=str(trial),
                        stdout_path=str(trial / "stdout.log"), stderr_path=str(trial / "stderr.log"), **kw)


def _host(tmp: Path, *, sandboxed: bool) -> Kit:
    from trials.controller.process import sandbox
    from trials.controller.process.host import HostBackend

    launch, job = tmp / "launch", tmp / "job"
    launch.mkdir(exist_ok=True)
    (job / "gcs").mkdir(parents=True, exist_ok=True)
    if sandboxed:
        box = sandbox.detect(launch_dir=str(launch), job_dir=str(job), gcs_root=str(job / "gcs"))
        if not box.on:
            pytest.skip(f"no sandbox here: {box.reason}")
    else:
        box = sandbox.off(str(launch), str(job), str(job / "gcs"), "contract")
    backend = HostBackend(launch_dir=str(launch), job_dir=str(job), gcs_root=str(job / "gcs"), sandbox=box,
                          gcs_endpoint=False)
    return Kit(backend, lambda case, t: backend.start(_request(t, case)))


def _unavailable(require: str, why: str) -> None:
    if os.environ.get(require) == "1":
        pytest.fail(f"required here ({require}=1): {why}")
    pytest.skip(why)


def _container(tmp: Path, name: str, require: str, monkeypatch: pytest.MonkeyPatch) -> Kit:
    from trials.controller.container import runtime as rt
    from trials.controller.container.backend import ContainerBackend

    if shutil.which(name) is None:
        _unavailable(require, f"{name} is not installed")
    monkeypatch.delenv(rt.ENV_GLOBAL_ARGS, raising=False)  # (podman's options, where set, are not docker's)
    runtime = rt.find(name)
    if name == "docker":
        if runtime.call("info", "--format", "{{.ServerVersion}}", timeout=30).returncode != 0:
            _unavailable(require, "no docker daemon answers")
        if not runtime.image_exists(BASE_IMAGE) and shutil.which("podman"):  # copied from podman's store
            save = subprocess.Popen(["podman", "save", BASE_IMAGE], stdout=subprocess.PIPE)
            subprocess.run([runtime.program, "load", "-q"], stdin=save.stdout, capture_output=True, timeout=300)
            save.wait()
    if not runtime.image_exists(BASE_IMAGE):
        _unavailable(require, f"no base image {BASE_IMAGE} in {name} (.ci/run builds it)")
    try:
        runtime.check_starts(BASE_IMAGE)
    except rt.RuntimeUnavailable as err:
        if name != "podman":
            _unavailable(require, str(err))
        # this machine kind (no rlimit raises, hybrid cgroups): the settings tests/containers applies
        conf = tmp / "containers.conf"
        conf.write_text("[containers]\ndefault_ulimits = []\n")
        monkeypatch.setenv("CONTAINERS_CONF", str(conf))
        monkeypatch.setenv(rt.ENV_GLOBAL_ARGS, "--runtime runc --cgroup-manager=cgroupfs")
        runtime = rt.find(name)
        runtime.check_starts(BASE_IMAGE)
    job = tmp / "job"
    (job / "gcs").mkdir(parents=True, exist_ok=True)
    backend = ContainerBackend(runtime=runtime, job_dir=str(job), gcs_root=str(job / "gcs"),
                               images={IMAGE_URI: BASE_IMAGE}, gcs_endpoint=False)

    def start(case: str, t: Path) -> ReplicaHandle:
        trial = str(t / "job" / "1")
        program = PROGRAMS[case].replace("sys.executable", "'python3'")
        return backend.start(_request(t, case, argv=(), image=IMAGE_URI,
                                      entrypoint=("python3", "-c", program, trial)))
    return Kit(backend, start)


def _slurm(tmp: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Kit:
    from trials.controller.slurm.backend import SlurmBackend

    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    (tmp / "launch").mkdir(exist_ok=True)
    backend = SlurmBackend(job_dir=str(tmp / "job"), job_key=f"contract-{tmp.name}", grace_s=GRACE_S)
    return Kit(backend, lambda case, t: backend.start(_request(t, case)))


def _objective(config: Any, ctx: Any) -> None:
    """The in-process cases (the case in ``config.case``): the objective is the program."""
    if config.case == 1:
        raise RuntimeError("the objective failed")
    if config.case == 2:  # runs until the stop it is asked for reaches it
        for step in ctx.steps(10_000_000):
            ctx.report(step, score=0.5)
            time.sleep(0.01)
        return
    ctx.report(1, score=0.5)


def _in_process(tmp: Path) -> Kit:
    import dataclasses

    from trials.controller.inprocess.backend import COMMAND, InProcessBackend
    from trials.runtime.context import RunOptions
    from trials.spec.load import loads_spec

    @dataclasses.dataclass
    class Config:
        case: int = 0

    study = loads_spec("metrics: {score: maximize}\nparameters:\n  case: {type: integer, min: 0, max: 2}\n"
                       "max_trial_count: 1\n").study
    backend = InProcessBackend(_objective, Config, study=study,
                               options=RunOptions(install_signals=False, tensorboard=False))
    number = {"exit0": 0, "exit1": 1, "term-exits": 2}

    def start(case: str, t: Path) -> ReplicaHandle:
        request = _request(t, case, argv=(COMMAND, f"--case={number[case]}"))
        env = {**request.env, protocol.ENV_JOB_ID: "job", protocol.ENV_TRIAL_DIR: request.trial_dir,
               protocol.ENV_STOP_FILE: str(Path(request.trial_dir) / protocol.STOP_FILE)}
        return backend.start(dataclasses.replace(request, env=env))
    nothing = "in-process, nothing can be killed and nothing is started: a stop is a request the objective honours"
    return Kit(backend, start, lacks={"exit0-logs": "in-process, the objective's prints are the caller's",
                                      "ignores-term": nothing, "leaves-child": nothing},
               stop_status=protocol.EXIT_STOPPED)


def _scripted(tmp: Path) -> Kit:
    clock = FakeClock()
    cases: list[str] = []
    backend = FakeBackend(clock, lambda trial, attempt: SCRIPTS[cases[-1]])

    def start(case: str, t: Path) -> ReplicaHandle:
        cases.append(case)
        return backend.start(_request(t, case, argv=("trainer", "--x=0.5")))
    no_process = "a scripted replica is no process: it writes no log and starts no child"
    return Kit(backend, start, monotonic=clock.monotonic, sleep=clock.sleep,
               lacks={"exit0-logs": no_process, "leaves-child": no_process})


BACKENDS = ["host-sandbox", "host-plain", "podman", "docker", "slurm", "in-process", "scripted"]


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A two-node Slurm cluster of the tests/slurm kit (skipped where Slurm is missing, failed instead
    under ``TRIALS_REQUIRE_SLURM=1``)."""
    sys.path.insert(0, str(HERE.parent.parent / "slurm"))
    from slurmkit import MiniCluster, need_slurm

    need_slurm()
    cluster = MiniCluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=BACKENDS)
def kit(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kit]:
    name = request.param
    if name.startswith("host"):
        made = _host(tmp_path, sandboxed=name == "host-sandbox")
    elif name == "slurm":
        made = _slurm(tmp_path, request.getfixturevalue("slurm_cluster"), monkeypatch)
    elif name in ("podman", "docker"):
        made = _container(tmp_path, name, "TRIALS_REQUIRE_CONTAINERS" if name == "podman" else "TRIALS_REQUIRE_DOCKER",
                          monkeypatch)
    elif name == "in-process":
        made = _in_process(tmp_path)
    else:
        made = _scripted(tmp_path)
    made.backend.open(lambda line: None)
    try:
        yield made
    finally:
        made.backend.close()


def _needs(kit: Kit, case: str) -> None:
    if case in kit.lacks:
        pytest.skip(kit.lacks[case])


@pytest.mark.parametrize(("case", "status"), [("exit0", 0), ("exit1", 1)])
def test_an_exit_code_is_the_status(kit: Kit, tmp_path: Path, case: str, status: int) -> None:
    h = kit.start(case, tmp_path)
    try:
        assert kit.wait_exit(h) == status
        assert h.oom_killed is False and h.stop_requested_at is None
        assert isinstance(h.placement, dict)
    finally:
        h.close()


def test_what_it_prints_goes_to_its_log_files(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "exit0-logs")
    h = kit.start("exit0", tmp_path)
    try:
        assert kit.wait_exit(h) == 0
    finally:
        h.close()
    trial = tmp_path / "job" / "1"
    assert "out line" in (trial / "stdout.log").read_text()
    assert "err line" in (trial / "stderr.log").read_text()


def _ready(kit: Kit, tmp_path: Path, h: ReplicaHandle) -> None:
    if kit.lacks.get("leaves-child"):  # scripted, in-process: it runs as soon as it starts
        return
    deadline = time.monotonic() + 90
    while not (tmp_path / "job" / "1" / "ready").exists():
        assert h.poll() is None, f"it exited ({h.poll()}) before it was ready"
        assert time.monotonic() < deadline, "it never got ready"
        time.sleep(0.05)


def test_a_stop_ends_a_replica_that_exits_on_sigterm_with_143_within_the_grace(kit: Kit, tmp_path: Path) -> None:
    h = kit.start("term-exits", tmp_path)
    try:
        _ready(kit, tmp_path, h)
        status, _ = kit.stop(h, grace_s=60.0)  # ended by the TERM: the stop never waits out this grace
        assert status == kit.stop_status
        assert h.stop_requested_at is not None and h.oom_killed is False
    finally:
        h.close()


def test_a_replica_that_ignores_sigterm_is_killed_after_the_grace_with_137(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "ignores-term")
    h = kit.start("ignores-term", tmp_path)
    try:
        _ready(kit, tmp_path, h)
        status, took = kit.stop(h)
        assert status == 137
        assert took >= GRACE_S  # SIGKILL only once the grace was over
        assert h.oom_killed is False  # killed by the stop, not over a memory limit
    finally:
        h.close()


def test_nothing_it_started_runs_on_after_its_exit(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "leaves-child")
    h = kit.start("leaves-child", tmp_path)
    try:
        assert kit.wait_exit(h) == 0
        status, _ = kit.stop(h)  # the stop steps the loop runs on every replica that exited
        assert status == 0  # its status stays its exit's
    finally:
        h.close()
    ticks = tmp_path / "job" / "1" / "ticks"
    assert ticks.exists()  # (the child ticked before its parent exited)
    size = ticks.stat().st_size
    time.sleep(2.0)
    assert ticks.stat().st_size == size, "a child of the replica still runs after its stop steps"
    assert all(isinstance(line, str) for line in h.leftovers)  # what was killed, where the backend can tell


# --- a dead controller's replicas, found and cleaned ---------------------------------------------------
TICKER = """import os, time
trial = os.environ["TRIALS_TRIAL_DIR"]
if os.fork() == 0:  # a child in the replica's group: it outlives a leader the controller's death takes
    while True:
        with open(os.path.join(trial, "ticks"), "a") as f:
            f.write(".")
        time.sleep(0.1)
time.sleep(600)
"""


def _job_spec(tmp: Path) -> Path:
    import json

    body = {"studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}],
                          "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0.1, "maxValue": 0.9}}]},
            "maxTrialCount": 1, "parallelTrialCount": 1,
            "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                                  "containerSpec": {"imageUri": IMAGE_URI}}]}}
    path = tmp / "spec.json"
    path.write_text(json.dumps(body))
    return path


def _ticking(ticks: Path, wait_s: float = 2.0) -> bool:
    size = ticks.stat().st_size if ticks.exists() else -1
    time.sleep(wait_s)
    return ticks.exists() and ticks.stat().st_size != size


@pytest.mark.parametrize("runtime", ["host", "podman", "slurm"])
def test_cancel_of_a_job_whose_controller_was_killed_ends_what_it_left_running(
        runtime: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    flags = ["--runtime", runtime]
    if runtime == "podman":
        _container(tmp_path, "podman", "TRIALS_REQUIRE_CONTAINERS", monkeypatch)
        flags += ["--image", f"{IMAGE_URI}={BASE_IMAGE}"]
    elif runtime == "slurm":
        monkeypatch.setenv("SLURM_CONF", str(request.getfixturevalue("slurm_cluster").conf))
    python = sys.executable if runtime != "podman" else "python3"
    root = tmp_path / "jobs"
    sweep = subprocess.Popen([sys.executable, "-m", "trials", "sweep", str(_job_spec(tmp_path)), "--root", str(root),
                              "--job-id", "dead", *flags, "--", python, "-c", TICKER],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ticks = root / "dead" / "1" / "ticks"
    try:
        deadline = time.monotonic() + 120
        while not ticks.exists():
            assert sweep.poll() is None, "the controller ended before its trial ticked"
            assert time.monotonic() < deadline, "the trial never ticked"
            time.sleep(0.2)
    finally:
        sweep.kill()  # SIGKILL: no clean-up of its own
        sweep.wait()
    cancel = subprocess.run([sys.executable, "-m", "trials", "cancel", "dead", "--root", str(root)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=180)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert "JOB_STATE_CANCELLED" in cancel.stdout
    deadline = time.monotonic() + 60  # (a Slurm job's end after scancel is the cluster's to make)
    while _ticking(ticks):
        assert time.monotonic() < deadline, f"{runtime}: what the dead controller left still runs after the cancel"

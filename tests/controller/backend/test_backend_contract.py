"""One contract every replica backend keeps, run over each backend this machine has.

Modelled on optuna's storage conformance suite: the same cases, through the seam's protocol only
(``ReplicaBackend.start``/``check_memory``, ``ReplicaHandle.poll``/``begin_stop``/``advance_stop``/``close``
and the exit record ``poll`` returns), over host processes in their sandbox and without it, podman, docker,
Slurm, in-process calls and the loop's scripted backend. A backend is skipped only where its part is missing
here, and not where CI requires it (``TRIALS_REQUIRE_CONTAINERS``, ``TRIALS_REQUIRE_DOCKER``,
``TRIALS_REQUIRE_SLURM``, as the backends' own suites). Cases a backend cannot have (the scripted backend
writes no log and starts no child; nothing can be killed in-process) say so in ``Kit.lacks``; what a backend
cannot see (the signal behind a status, what a container left) is in the kit's ``tells_*`` fields.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trials import protocol
from trials.controller.backend.protocol import ExitHow, ReplicaBackend, ReplicaExit, ReplicaHandle, ReplicaStart

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "loop"))
from backendkit import FakeBackend, FakeClock, Script  # noqa: E402

BASE_IMAGE = os.environ.get("TRIALS_TEST_BASE_IMAGE", "localhost/trials-debpy:1")
IMAGE_URI = "us-docker.pkg.dev/contract/images/python:1"  # what a request names; the kit maps it to BASE_IMAGE
GRACE_S = 2.0
MEMORY_LIMIT_MB = 64

_READY = "import os, pathlib, signal, sys, time\nready = pathlib.Path(sys.argv[1]) / 'ready'\n"
PROGRAMS = {  # each case's trainer, as a python -c program; argv[1]: the trial folder
    "exit0": "import sys\nprint('out line', flush=True)\nprint('err line', file=sys.stderr, flush=True)\n",
    "exit1": "raise SystemExit(1)\n",
    # a trainer that ends on SIGTERM with the status the signal's default action gives (143), by exiting so: in
    # a container it is PID 1, where the default action is ignored
    "term-exits": _READY + "signal.signal(signal.SIGTERM, lambda *_: os._exit(143))\nready.write_text('1')\n"
                           "time.sleep(120)\n",
    "term-default": _READY + "ready.write_text('1')\ntime.sleep(120)\n",  # SIGTERM's default action ends it
    "ignores-term": _READY + "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nready.write_text('1')\n"
                             "time.sleep(120)\n",
    # exits soon, leaving a child that ticks into the trial folder while it runs
    "leaves-child": "import subprocess, sys\n"
                    "subprocess.Popen([sys.executable, '-c', 'import pathlib, sys, time\\n"
                    "p = pathlib.Path(sys.argv[1]) / \"ticks\"\\nwhile True:\\n"
                    "    with p.open(\"a\") as f: f.write(\".\")\\n    time.sleep(0.1)\\n', sys.argv[1]])\n"
                    "import time; time.sleep(0.5)\n",
    # 16 MB more every 50 ms, each page written, far over MEMORY_LIMIT_MB
    "oom": "import time\nheld = []\nfor _ in range(64):\n    held.append(b'x' * (16 << 20))\n    time.sleep(0.05)\n"
           "time.sleep(120)\n",
    # writes the addresses it was given, in the trial folder, under its replica's name; the primary, whose end
    # ends the trial (a backend may stop its mates then, as Vertex does), first waits for its mates' files
    "addresses": "import json, os, pathlib, sys, time\n"
                 "seen = {k: os.environ.get(k) for k in ('CLUSTER_SPEC', 'TF_CONFIG')}\n"
                 "folder = pathlib.Path(sys.argv[1])\n"
                 "(folder / ('seen-' + os.environ['TRIALS_REPLICA'] + '.json')).write_text(json.dumps(seen))\n"
                 "n = sum(len(v) for v in json.loads(seen['CLUSTER_SPEC'] or '{}').get('cluster', {}).values())\n"
                 "deadline = time.time() + 60\n"
                 "while os.environ['TRIALS_REPLICA'] == 'workerpool0-0' and time.time() < deadline \\\n"
                 "        and len(list(folder.glob('seen-*.json'))) < n:\n"
                 "    time.sleep(0.05)\n",
}
SCRIPTS = {  # the same cases for the scripted backend (a fake clock, no process)
    "exit0": Script(steps=1, exit_code=0),
    "exit1": Script(steps=1, exit_code=1),
    "term-exits": Script(steps=10_000, on_term="exit"),
    "term-default": Script(steps=10_000, on_term="exit"),
    "ignores-term": Script(steps=10_000, on_term="ignore"),
    "leaves-child": Script(steps=1, leftovers=("4242 (python3)",)),
    "oom": Script(steps=10, oom_at_step=1),
    "addresses": Script(steps=1),
}


@dataclass
class Kit:
    """One backend under the contract: its backend, its clock, how it makes a case's request, and what it can tell."""

    backend: ReplicaBackend
    request: Callable[..., ReplicaStart]  # (case, tmp_path, **ReplicaStart fields) -> the case's request
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    lacks: dict[str, str] = field(default_factory=dict)  # case -> why it cannot have it
    stop_status: int = 143  # a replica that ends on the stop it was asked for (in-process: 75, as asked)
    tells_signal: bool = False  # it sees the signal behind a status (else only its own SIGKILL is one)
    tells_leftovers: bool = True  # it names what a replica left running
    placement_keys: tuple[str, ...] = ()  # what its exit records say of where a replica ran
    in_image: bool = False  # the loop builds its trials' addresses for images (each replica by its name)
    addresses_hosted: bool = False  # the replica's addresses name the hosts it was placed on (Slurm's nodes)
    seen: Callable[[ReplicaHandle, Path], dict[str, Any]] | None = None  # what a replica saw (default: its file)

    def start(self, case: str, tmp: Path, **kw: Any) -> ReplicaHandle:
        return self.backend.start(self.request(case, tmp, **kw))

    def wait_exit(self, h: ReplicaHandle, timeout_s: float = 90.0) -> int:
        return self.wait_record(h, timeout_s).status

    def wait_record(self, h: ReplicaHandle, timeout_s: float = 90.0) -> ReplicaExit:
        """Poll as the loop does (its memory check each pass) until it ends."""
        deadline = self.monotonic() + timeout_s
        while (ended := h.poll()) is None:
            assert self.monotonic() < deadline, f"{h.name} did not exit within {timeout_s}s"
            self.backend.check_memory()
            self.sleep(0.05)
        return ended

    def stop(self, h: ReplicaHandle, grace_s: float = GRACE_S, timeout_s: float = 90.0) -> tuple[ReplicaExit, float]:
        """TERM, the grace, KILL, as the loop stops a replica; returns its exit record and how long it took."""
        started = self.monotonic()
        h.begin_stop(started)
        while not h.advance_stop(self.monotonic(), grace_s):
            assert self.monotonic() - started < timeout_s, f"{h.name} did not stop within {timeout_s}s"
            self.sleep(0.05)
        ended = h.poll()
        assert ended is not None
        return ended, self.monotonic() - started


def _request(tmp: Path, case: str, **kw: Any) -> ReplicaStart:
    trial = tmp / "job" / "1"
    trial.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", os.defpath), protocol.ENV_TRIAL_ID: "1", protocol.ENV_ATTEMPT: "0",
           protocol.ENV_METRIC_FILE: str(trial / "hypertune.metrics"), protocol.ENV_REPLICA: "workerpool0-0",
           **kw.pop("env", {})}
    name = kw.pop("name", "workerpool0-0")
    return ReplicaStart(argv=kw.pop("argv", (sys.executable, "-c", PROGRAMS.get(case, ""), str(trial))), env=env,
                        cwd=str(tmp / "launch"), name=name, label=name, trial_dir=str(trial),
                        stdout_path=str(trial / f"{name}.out.log"), stderr_path=str(trial / f"{name}.err.log"), **kw)


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
    return Kit(backend, lambda case, t, **kw: _request(t, case, **kw), tells_signal=True)


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

    def request(case: str, t: Path, **kw: Any) -> ReplicaStart:
        trial = str(t / "job" / "1")
        program = PROGRAMS[case].replace("sys.executable", "'python3'")
        return _request(t, case, argv=(), image=IMAGE_URI, entrypoint=("python3", "-c", program, trial), **kw)
    pid1 = f"PID 1 of its {name} container: SIGTERM's default action is ignored there"
    return Kit(backend, request, lacks={"term-default": pid1}, in_image=True,
               tells_leftovers=False)  # (what it left ends with its container: nothing to name)


def _slurm(tmp: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Kit:
    from trials.controller.slurm.backend import SlurmBackend

    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    (tmp / "launch").mkdir(exist_ok=True)
    backend = SlurmBackend(job_dir=str(tmp / "job"), job_key=f"contract-{tmp.name}", grace_s=GRACE_S)
    return Kit(backend, lambda case, t, **kw: _request(t, case, **kw), placement_keys=("slurmJobId", "node"),
               addresses_hosted=True)


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

    def request(case: str, t: Path, **kw: Any) -> ReplicaStart:
        made = _request(t, case, argv=(COMMAND, f"--case={number[case]}"), **kw)
        env = {**made.env, protocol.ENV_JOB_ID: "job", protocol.ENV_TRIAL_DIR: made.trial_dir,
               protocol.ENV_STOP_FILE: str(Path(made.trial_dir) / protocol.STOP_FILE)}
        return dataclasses.replace(made, env=env)
    nothing = "in-process, nothing can be killed and nothing is started: a stop is a request the objective honours"
    return Kit(backend, request, stop_status=protocol.EXIT_STOPPED,
               lacks={"exit0-logs": "in-process, the objective's prints are the caller's",
                      "ignores-term": nothing, "term-default": nothing, "leaves-child": nothing,
                      "oom": "in-process, the calls share this process's memory: no limit can be set on one",
                      "addresses": "in-process, a trial is one call of the objective: no trial of several replicas"})


def _scripted(tmp: Path) -> Kit:
    clock = FakeClock()
    cases: list[str] = []
    backend = FakeBackend(clock, lambda trial, attempt: SCRIPTS[cases[-1]])

    def request(case: str, t: Path, **kw: Any) -> ReplicaStart:
        cases.append(case)
        return _request(t, case, argv=("trainer", "--x=0.5"), **kw)

    def seen(h: ReplicaHandle, t: Path) -> dict[str, Any]:
        replica = next(r for r in backend.started if r is h)
        return {k: replica.env.get(k) for k in (protocol.ENV_CLUSTER_SPEC, protocol.ENV_TF_CONFIG)}
    no_process = "a scripted replica is no process: it writes no log and starts no child"
    return Kit(backend, request, monotonic=clock.monotonic, sleep=clock.sleep, seen=seen,
               lacks={"exit0-logs": no_process, "leaves-child-ticks": no_process})


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


def _ready(kit: Kit, tmp_path: Path, h: ReplicaHandle) -> None:
    if kit.seen is not None or "ignores-term" in kit.lacks:  # scripted, in-process: it runs as soon as it starts
        return
    deadline = time.monotonic() + 90
    while not (tmp_path / "job" / "1" / "ready").exists():
        assert h.poll() is None, f"it exited ({h.poll()}) before it was ready"
        assert time.monotonic() < deadline, "it never got ready"
        time.sleep(0.05)


def _check_record(kit: Kit, ended: ReplicaExit, *, since: float, status: int, how: ExitHow,
                  sig: int | None) -> None:
    """The exit record's fields, and that it is a record: the same one at the next poll, frozen."""
    assert (ended.status, ended.how, ended.signal) == (status, how, sig)
    assert since <= ended.exited_mono <= kit.monotonic() + 1e-6  # (+ the scripted clock's rounding)
    assert sorted(ended.placement) == sorted(kit.placement_keys), ended.placement
    assert all(ended.placement[key] for key in kit.placement_keys)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ended.status = 3  # type: ignore[misc]


# --- the exit record ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("case", "status"), [("exit0", 0), ("exit1", 1)])
def test_an_exit_code_is_the_status_of_an_exit(kit: Kit, tmp_path: Path, case: str, status: int) -> None:
    since = kit.monotonic()
    h = kit.start(case, tmp_path)
    try:
        ended = kit.wait_record(h)
        _check_record(kit, ended, since=since, status=status, how=ExitHow.EXIT, sig=None)
        assert h.poll() == ended and h.stop_requested_at is None and ended.leftovers == ()
    finally:
        h.close()


def test_a_stop_ends_a_replica_that_exits_on_sigterm_with_143_within_the_grace(kit: Kit, tmp_path: Path) -> None:
    h = kit.start("term-exits", tmp_path)
    try:
        _ready(kit, tmp_path, h)
        since = kit.monotonic()
        ended, _ = kit.stop(h, grace_s=60.0)  # ended by the TERM: the stop never waits out this grace
        _check_record(kit, ended, since=since, status=kit.stop_status, how=ExitHow.EXIT, sig=None)  # it exited so
        assert h.stop_requested_at == pytest.approx(since, abs=1.0)
    finally:
        h.close()


def test_sigterms_default_action_is_143_by_signal_where_the_backend_can_tell(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "term-default")
    h = kit.start("term-default", tmp_path)
    try:
        _ready(kit, tmp_path, h)
        since = kit.monotonic()
        ended, _ = kit.stop(h, grace_s=60.0)
        if kit.tells_signal:
            _check_record(kit, ended, since=since, status=143, how=ExitHow.SIGNAL, sig=signal.SIGTERM)
        else:  # (Slurm's entry, the scripted backend: a status; a SIGTERM can be caught, so it is an exit's)
            _check_record(kit, ended, since=since, status=143, how=ExitHow.EXIT, sig=None)
    finally:
        h.close()


def test_a_replica_that_ignores_sigterm_is_killed_after_the_grace_with_137(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "ignores-term")
    h = kit.start("ignores-term", tmp_path)
    try:
        _ready(kit, tmp_path, h)
        since = kit.monotonic()
        ended, took = kit.stop(h)
        assert took >= GRACE_S  # SIGKILL only once the grace was over
        # killed by the stop, not over a memory limit: a SIGKILL every backend can tell (it sent it)
        _check_record(kit, ended, since=since, status=137, how=ExitHow.SIGNAL, sig=signal.SIGKILL)
    finally:
        h.close()


def test_a_replica_over_its_memory_limit_ends_oom_with_137(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "oom")
    since = kit.monotonic()
    h = kit.start("oom", tmp_path, memory_limit_mb=MEMORY_LIMIT_MB)
    try:
        ended = kit.wait_record(h)
        assert (ended.status, ended.how) == (137, ExitHow.OOM), ended
        assert ended.oom_killed and since <= ended.exited_mono <= kit.monotonic() + 1e-6
        done, _ = kit.stop(h)  # the stop steps after its exit: its record stays
        assert (done.status, done.how) == (137, ExitHow.OOM)
    finally:
        h.close()


# --- what it leaves, what it prints, where it ran, what it is told ----------------------------------------
def test_nothing_it_started_runs_on_after_its_exit(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "leaves-child")
    _needs(kit, "leaves-child-ticks")
    h = kit.start("leaves-child", tmp_path)
    try:
        assert kit.wait_exit(h) == 0
        ended, _ = kit.stop(h)  # the stop steps the loop runs on every replica that exited
        assert ended.status == 0 and ended.how is ExitHow.EXIT  # its status stays its exit's
    finally:
        h.close()
    ticks = tmp_path / "job" / "1" / "ticks"
    assert ticks.exists()  # (the child ticked before its parent exited)
    size = ticks.stat().st_size
    time.sleep(2.0)
    assert ticks.stat().st_size == size, "a child of the replica still runs after its stop steps"


def test_what_it_left_running_is_named_in_its_exit_record(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "leaves-child")
    h = kit.start("leaves-child", tmp_path)
    try:
        first = kit.wait_record(h)
        ended, _ = kit.stop(h)  # what outlived it is killed by the stop steps, and named
        assert (ended.status, ended.exited_mono) == (first.status, first.exited_mono)
        if kit.tells_leftovers:
            assert ended.leftovers, "the child it left running is not in its exit record"
            assert all(re.fullmatch(r"\d+ \(.+\)", line) for line in ended.leftovers), ended.leftovers
            assert any("python" in line for line in ended.leftovers), ended.leftovers
        else:
            assert ended.leftovers == ()
        assert h.poll() == ended  # the record, once complete, stays
    finally:
        h.close()


def test_what_it_prints_goes_to_the_log_files_its_start_names(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "exit0-logs")
    h = kit.start("exit0", tmp_path, name="workerpool1-3")
    try:
        assert kit.wait_exit(h) == 0
    finally:
        h.close()
    trial = tmp_path / "job" / "1"
    out, err = (trial / "workerpool1-3.out.log").read_text(), (trial / "workerpool1-3.err.log").read_text()
    assert "out line" in out and "err line" not in out
    assert "err line" in err and "out line" not in err


def _cluster_of(spec: str | None, *, hosted: bool) -> Any:
    """A CLUSTER_SPEC or TF_CONFIG, its addresses' hosts left out where the backend places them (Slurm's nodes)."""
    assert spec is not None
    data = json.loads(spec)
    if hosted:
        data["cluster"] = {role: [a.rsplit(":", 1)[1] for a in addresses]
                           for role, addresses in data["cluster"].items()}
    return data


def test_each_replica_of_a_trial_of_several_sees_the_addresses_the_loop_gave_it(kit: Kit, tmp_path: Path) -> None:
    _needs(kit, "addresses")
    from trials.controller.process.replica import free_port
    from trials.controller.trial import launch
    from trials.spec.load import loads_spec

    job = loads_spec(json.dumps({
        "studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}],
                      "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0.1, "maxValue": 0.9}}]},
        "maxTrialCount": 1, "parallelTrialCount": 1,
        "trialJobSpec": {"workerPoolSpecs": [
            {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": n,
             "containerSpec": {"imageUri": IMAGE_URI}} for n in (1, 1)]}}))  # (two: the test cluster's CPUs)
    launches = launch.build_replicas(  # as the loop's launcher builds them
        job=job, job_id="contract", trial_id="1", params={"x": 0.5},
        paths=launch.trial_paths(str(tmp_path / "job"), None, "1"), project_number="0",
        local_command=None if kit.in_image else ["python3"], base_env={}, ports=[free_port() for _ in range(2)],
        gcs_root=str(tmp_path / "job" / "gcs"), in_image=kit.in_image)
    assert [lau.name for lau in launches] == ["workerpool0-0", "workerpool1-0"]
    handles = [kit.start("addresses", tmp_path, name=lau.name,
                         env={k: v for k, v in lau.env.items() if k != protocol.ENV_METRIC_FILE}) for lau in launches]
    try:
        for lau, h in zip(launches, handles, strict=True):  # (the scripted workers run until stopped)
            if kit.seen is None:
                status = kit.wait_exit(h)
                # a mate still exiting when the primary's success is seen is stopped (SIGTERM, 143), as on Vertex:
                # under load, Slurm's did (the primary waits for the mates' files, not for their ends)
                assert status == 0 or (lau.name != "workerpool0-0" and status == 143), \
                    (status, (tmp_path / "job" / "1" / f"{lau.name}.err.log").read_text())
        for h in handles:
            kit.stop(h)
    finally:
        for h in handles:
            h.close()
    for lau, h in zip(launches, handles, strict=True):
        if kit.seen is not None:
            seen = kit.seen(h, tmp_path)
        else:
            seen = json.loads((tmp_path / "job" / "1" / f"seen-{lau.name}.json").read_text())
        for key in (protocol.ENV_CLUSTER_SPEC, protocol.ENV_TF_CONFIG):
            assert _cluster_of(seen[key], hosted=kit.addresses_hosted) == \
                _cluster_of(lau.env[key], hosted=kit.addresses_hosted), (lau.name, key)


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

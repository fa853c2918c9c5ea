"""The warm backend with real processes: each hazard of a forked trial has its rule (issue 51)."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from trials.controller.backend.protocol import ReplicaStart
from trials.controller.process.host import HostBackend
from trials.controller.warm import launcher as launcher_module
from trials.controller.warm.backend import WarmBackend

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the host sandbox needs Linux")

WARM_MARK = "import gc; WARM = gc.get_freeze_count() > 0\n"  # only a launcher's child starts with frozen objects


class Bench:
    """A launch folder, a job folder, a site folder outside both, and the warm backend over the host one."""

    def __init__(self, tmp_path, trainer: str):
        self.launch = tmp_path / "launch"
        self.job = tmp_path / "job"
        self.site = tmp_path / "site"
        for folder in (self.launch, self.job, self.site, tmp_path / "home"):
            folder.mkdir()
        (self.launch / "train.py").write_text(WARM_MARK + textwrap.dedent(trainer))
        self.home = str(tmp_path / "home")
        self.host = HostBackend(launch_dir=str(self.launch), job_dir=str(self.job), gcs_root=str(self.job / "gcs"),
                                gcs_endpoint=False)
        self.warm = WarmBackend(self.host, self.host, job_dir=str(self.job))
        self.said: list[str] = []
        self.warm.open(self.said.append)
        self.n = 0

    def start(self, **env: str):
        self.n += 1
        trial = self.job / str(self.n)
        trial.mkdir()
        full = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin", "HOME": self.home,
                "PYTHONPATH": str(self.site), "CLOUD_ML_TRIAL_ID": str(self.n), **env}
        log = str(trial / "out.log")
        request = ReplicaStart(argv=(sys.executable, "train.py"), env=full, cwd=str(self.launch),
                               name="workerpool0-0", label=f"{self.n}/workerpool0-0", trial_dir=str(trial),
                               stdout_path=log, stderr_path=log)
        return self.warm.start(request), log

    def run(self, **env: str) -> tuple[int, str]:
        handle, log = self.start(**env)
        deadline = time.monotonic() + 120
        while handle.poll() is None:
            assert time.monotonic() < deadline, Path(log).read_text()
            time.sleep(0.02)
        while time.monotonic() < deadline:
            handle.close()
            if not handle.running():  # type: ignore[attr-defined]
                break
            time.sleep(0.02)
        ended = handle.poll()
        assert ended is not None
        return ended.status, Path(log).read_text()

    def close(self) -> None:
        self.warm.close()


@pytest.fixture
def bench(tmp_path, request):
    made: list[Bench] = []

    def make(trainer: str) -> Bench:
        b = Bench(tmp_path, trainer)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_a_warm_trial_is_in_its_own_sandbox_cgroup_and_processes(bench):
    """The shim's namespaces are entered by exec: a plain fork would write the host's /etc."""
    probe = f"/etc/trials-warm-probe-{uuid.uuid4().hex}"
    b = bench(f"""
        import os
        with open({probe!r}, "w") as f:
            f.write("x")
        print("warm=" + str(WARM))
        print("pid=" + str(os.getpid()))
        print("cwd=" + os.getcwd())
        print("trial=" + os.environ["CLOUD_ML_TRIAL_ID"])
    """)
    status, text = b.run()  # the survey: fresh
    assert status == 0, text
    assert lines(text)["warm"] == "False"
    status, text = b.run()
    assert status == 0, text
    seen = lines(text)
    assert seen["warm"] == "True", (text, b.said)
    assert not os.path.exists(probe)  # its write went to its copy-on-write layer
    assert seen["pid"] == "2"  # its own PID namespace, under the shim's init
    assert seen["cwd"] == str(b.launch)
    assert seen["trial"] == "2"  # the per-trial variables are the child's own


def test_children_draw_their_own_random_numbers(bench):
    """Without a reseed every child draws what the launcher's NumPy generator would."""
    b = bench("""
        import random
        import numpy
        print("warm=" + str(WARM))
        print("numpy=" + repr(numpy.random.rand()))
        print("random=" + repr(random.random()))
    """)
    b.run()
    draws = [lines(b.run()[1]) for _ in range(3)]
    assert all(d["warm"] == "True" for d in draws), draws
    assert len({d["numpy"] for d in draws}) == 3
    assert len({d["random"] for d in draws}) == 3


def test_start_up_variables_get_a_launcher_of_their_own(bench):
    """A variable read at import is frozen in the launcher: a trial with another value needs another one."""
    b = bench("""
        import frozen
        print("warm=" + str(WARM))
        print("value=" + frozen.VALUE)
    """)
    (b.site / "frozen.py").write_text("import os\nVALUE = os.environ['FROZEN_NUM_THREADS']\n")
    assert lines(b.run(FROZEN_NUM_THREADS="1")[1])["value"] == "1"
    one = lines(b.run(FROZEN_NUM_THREADS="1")[1])
    assert one == {"warm": "True", "value": "1"}
    two = lines(b.run(FROZEN_NUM_THREADS="2")[1])
    assert two["value"] == "2"
    two = lines(b.run(FROZEN_NUM_THREADS="2")[1])
    assert two == {"warm": "True", "value": "2"}


def test_a_launcher_with_a_thread_forks_nothing(bench):
    """A thread of the launcher holding a lock at the fork leaves it locked for good in the child."""
    b = bench("""
        import sys
        import locker
        print("warm=" + str(WARM))
        sys.exit(0 if locker.LOCK.acquire(timeout=10) else 3)
    """)
    (b.site / "locker.py").write_text(textwrap.dedent("""
        import threading, time
        LOCK = threading.Lock()
        def hold():
            while True:
                with LOCK:
                    time.sleep(0.5)
                time.sleep(0.001)
        threading.Thread(target=hold, daemon=True).start()
    """))
    b.run()
    status, text = b.run()
    assert status == 0, text
    assert lines(text)["warm"] == "False"  # refused by the launcher, run fresh
    assert any("threads" in line for line in b.said), b.said


def test_cuda_initialised_in_the_launcher_is_a_hazard():
    """No CUDA here: a stand-in torch whose CUDA says it is initialised."""

    class Cuda:
        def __init__(self, on: bool):
            self.on = on

        def is_initialized(self) -> bool:
            return self.on

    class Torch:
        def __init__(self, on: bool):
            self.cuda = Cuda(on)

    assert launcher_module.fork_hazard({"torch": Torch(True)}, 1) is not None
    assert launcher_module.fork_hazard({"torch": Torch(False)}, 1) is None
    assert launcher_module.fork_hazard({}, 2) is not None


def test_a_changed_preloaded_file_starts_a_new_launcher(bench):
    b = bench("""
        import edited
        print("warm=" + str(WARM))
        print("value=" + edited.VALUE)
    """)
    module = b.site / "edited.py"
    module.write_text("VALUE = 'old'\n")
    b.run()
    assert lines(b.run()[1]) == {"warm": "True", "value": "old"}
    module.write_text("VALUE = 'new!'\n")
    assert lines(b.run()[1])["value"] == "new!"  # fresh while the new launcher imports
    assert lines(b.run()[1]) == {"warm": "True", "value": "new!"}


def test_a_warm_trial_exits_without_the_interpreter_teardown(bench):
    """gc.freeze() in the launcher and os._exit in the child: a teardown that takes 60 s is never run."""
    b = bench("""
        import os, time
        class Slow:
            def __del__(self):
                if os.environ["CLOUD_ML_TRIAL_ID"] != "1":
                    time.sleep(60)
        keep = Slow()
        print("warm=" + str(WARM), flush=False)
    """)
    b.run()
    started = time.monotonic()
    status, text = b.run()
    assert status == 0
    assert lines(text) == {"warm": "True"}  # (its buffered output was flushed)
    assert time.monotonic() - started < 30


def test_a_warm_trial_stops_on_sigterm_and_keeps_its_exit_status(bench):
    b = bench("""
        import sys, time
        print("warm=" + str(WARM), flush=True)
        if sys.argv[0] and len(sys.argv) == 1 and __import__("os").environ["CLOUD_ML_TRIAL_ID"] == "3":
            sys.exit(7)
        time.sleep(0 if __import__("os").environ["CLOUD_ML_TRIAL_ID"] == "1" else 60)
    """)
    b.run()
    handle, log = b.start()
    deadline = time.monotonic() + 60
    while "warm=True" not in Path(log).read_text():
        assert time.monotonic() < deadline and handle.poll() is None, Path(log).read_text()
        time.sleep(0.02)
    assert "2-workerpool0-0" in handle.tree.path and len(handle.tree.pids()) >= 2  # its own cgroup holds it
    handle.begin_stop(time.monotonic())
    while not handle.advance_stop(time.monotonic(), 30.0):
        time.sleep(0.02)
    ended = handle.poll()
    assert ended is not None and (ended.status, ended.how, ended.signal) == (128 + signal.SIGTERM, "signal",
                                                                             signal.SIGTERM)
    assert b.run() == (7, "warm=True\n")


class _DeadLauncher:
    """A launcher that died before it told its child's exit."""

    exits: dict[int, tuple[int, float]] = {}
    gone = True

    def pump(self) -> None:
        pass


def test_a_warm_trial_whose_launcher_died_before_telling_its_exit_is_lost(tmp_path: Path) -> None:
    from trials.controller.warm.process import WarmProc, WarmReplica

    replica = WarmReplica(WarmProc(_DeadLauncher(), 4242), name="workerpool0-0",  # type: ignore[arg-type]
                          argv=["python"], stdout_path=str(tmp_path / "out"), stderr_path=str(tmp_path / "err"))
    ended = replica.poll()
    assert ended is not None and (ended.status, ended.how, ended.signal) == (137, "lost", None)
    assert replica.poll() == ended

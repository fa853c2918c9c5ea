"""trials/controller/slurm/entry.py: the trainer's environment on a node, the rendezvous of a submission's
replicas (fake clock), and the entry run end to end on this machine without Slurm (``SLURM_PROCID`` set
here, a real launch file, real trainer processes): exit status, forwarded signals, memory limit,
leftovers, a missing program, and the exit file each time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from trials.controller.slurm import entry
from trials.controller.slurm import launchfile as lf

REPO = str(Path(__file__).resolve().parents[3])
NAME = "workerpool0-0"


# --- node_env ------------------------------------------------------------------------------------
NODE = {"SLURM_JOB_ID": "12", "SLURM_PROCID": "0", "SLURMD_NODENAME": "n1", "CUDA_VISIBLE_DEVICES": "1",
        "GPU_DEVICE_ORDINAL": "1", "ROCR_VISIBLE_DEVICES": "1", "HOME": "/root", "PATH": "/node/bin",
        "DATABASE_URL": "postgresql://secret", "XSLURM_FAKE": "no"}


def test_node_env_without_gpus_adds_slurm_vars_and_hides_every_gpu():
    launch_env = {"PATH": "/trial/bin", "CLOUD_ML_TRIAL_ID": "3", "CUDA_VISIBLE_DEVICES": "0",
                  "GPU_DEVICE_ORDINAL": "0", "SLURM_JOB_ID": "stale"}
    env = entry.node_env(launch_env, NODE, gpus=0)
    assert env == {"PATH": "/trial/bin", "CLOUD_ML_TRIAL_ID": "3", "CUDA_VISIBLE_DEVICES": "",
                   "SLURM_JOB_ID": "12", "SLURM_PROCID": "0", "SLURMD_NODENAME": "n1"}


def test_node_env_with_gpus_takes_slurms_assignment_only():
    env = entry.node_env({"PATH": "/trial/bin", "CUDA_VISIBLE_DEVICES": "0,1,2"}, NODE, gpus=1)
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["GPU_DEVICE_ORDINAL"] == "1"
    assert env["ROCR_VISIBLE_DEVICES"] == "1"
    assert env["PATH"] == "/trial/bin"
    for key in ("HOME", "DATABASE_URL", "XSLURM_FAKE"):
        assert key not in env
    # asked for GPUs, and Slurm named none: none named (not the launch file's)
    assert "CUDA_VISIBLE_DEVICES" not in entry.node_env({"CUDA_VISIBLE_DEVICES": "0"}, {"SLURM_PROCID": "0"}, gpus=2)


# --- gather_addresses ------------------------------------------------------------------------------
class FakeClock:
    def __init__(self, on_sleep=None):
        self.now = 100.0
        self.sleeps = 0
        self.on_sleep = on_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps += 1
        self.now += s
        if self.on_sleep:
            self.on_sleep(self.sleeps)


def _rdv_launch(tmp_path, mine, ranks, wait_s=5.0, sub="t1-a1"):
    return {"rendezvous": str(tmp_path / "t1"), "submission": sub, "replicas": [{"name": n} for n in mine],
            "ranks": ranks, "wait_s": wait_s}


def _addr(launch, name, host, port, sub):
    os.makedirs(launch["rendezvous"], exist_ok=True)
    lf.write_json(lf.addr_path(launch["rendezvous"], name), {"submission": sub, "host": host, "port": port})


def test_gather_waits_for_the_submissions_replicas_and_reads_the_others_older_addresses(tmp_path):
    launch = _rdv_launch(tmp_path, ["workerpool0-0", "workerpool1-0"],
                         ["workerpool0-0", "workerpool1-0", "workerpool1-1"])
    _addr(launch, "workerpool1-0", "old-node", 1111, "t1-a0")  # the previous attempt's: not this one's
    _addr(launch, "workerpool1-1", "n2", 2224, "t1-a0")  # runs on from an older attempt: read as it is

    def peer_starts(n: int) -> None:
        if n == 3:
            _addr(launch, "workerpool1-0", "n2", 2223, "t1-a1")

    clock = FakeClock(peer_starts)
    out = entry.gather_addresses(launch, "workerpool0-0", "n1", 2222, clock=clock, sleep=clock.sleep)
    assert out == {"workerpool0-0": ("n1", 2222), "workerpool1-0": ("n2", 2223), "workerpool1-1": ("n2", 2224)}
    assert clock.sleeps == 3  # waited until the peer of this submission wrote, not a poll more
    own = json.loads(Path(lf.addr_path(launch["rendezvous"], "workerpool0-0")).read_text())
    assert own == {"submission": "t1-a1", "host": "n1", "port": 2222}


def test_gather_gives_up_at_wait_s_without_the_missing_replica(tmp_path):
    launch = _rdv_launch(tmp_path, ["workerpool0-0", "workerpool1-0"], ["workerpool0-0", "workerpool1-0"],
                         wait_s=2.0)
    clock = FakeClock()
    out = entry.gather_addresses(launch, "workerpool0-0", "n1", 2222, clock=clock, sleep=clock.sleep)
    assert out == {"workerpool0-0": ("n1", 2222)}
    assert 2.0 <= clock.now - 100.0 <= 2.0 + 2 * entry.POLL_S  # waited wait_s, and no longer


def test_gather_of_a_single_replica_does_not_wait(tmp_path):
    launch = _rdv_launch(tmp_path, [NAME], [NAME])
    clock = FakeClock()
    assert entry.gather_addresses(launch, NAME, "n1", 2222, clock=clock, sleep=clock.sleep) == {NAME: ("n1", 2222)}
    assert clock.sleeps == 0


# --- run, end to end through main (SLURM_PROCID set here) ------------------------------------------
def _launch(tmp_path: Path, code: str | None, *, argv: list[str] | None = None, memory_limit_mb: int | None = None,
            env: dict[str, str] | None = None) -> tuple[Path, dict]:
    sub = tmp_path / "job" / "slurm" / "t1-a0"
    sub.mkdir(parents=True)
    trial = tmp_path / "trial"
    trial.mkdir()
    if code is not None:
        (tmp_path / "train.py").write_text(textwrap.dedent(code))
    cluster = {"cluster": {"workerpool0": ["127.0.0.1:2222"]}, "task": {"type": "workerpool0", "index": 0}}
    rep = {"name": NAME, "argv": argv or [sys.executable, str(tmp_path / "train.py")],
           "env": {"PATH": os.environ["PATH"], "CLUSTER_SPEC": json.dumps(cluster), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": "2222", "MARKS": str(tmp_path), **(env or {})},
           "cwd": str(trial), "stdout": str(trial / "stdout.log"), "stderr": str(trial / "stderr.log"),
           "exit": lf.exit_path(str(sub), NAME), "signal": lf.signal_path(str(sub), NAME), "port": 2222, "gpus": 0,
           "memory_limit_mb": memory_limit_mb}
    launch = lf.launch_record(submission="t1-a0", trial_id="1", trial_dir=str(trial),
                              rendezvous=lf.rendezvous_dir(str(tmp_path / "job"), "1"), replicas=[rep], ranks=[NAME],
                              wait_s=5.0)
    path = sub / "launch.json"
    lf.write_json(str(path), launch)
    return path, rep


def _start(path: Path, procid: str = "0") -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": REPO, "SLURM_PROCID": procid, "SLURMD_NODENAME": "n7",
           "SLURM_JOB_ID": "99", "NODE_SECRET": "x"}
    return subprocess.Popen([sys.executable, "-m", "trials.controller.slurm.entry", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _run(path: Path, timeout: float = 60) -> tuple[int, bytes]:
    proc = _start(path)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def _exit_file(rep: dict) -> dict:
    return json.loads(Path(rep["exit"]).read_text())


def _wait_for(path: Path, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_trainers_exit_status_its_environment_and_the_exit_file(tmp_path):
    path, rep = _launch(tmp_path, """
        import json, os, sys
        print("hello out"); print("hello err", file=sys.stderr)
        json.dump(dict(os.environ), open(os.path.join(os.environ["MARKS"], "env.json"), "w"))
        sys.exit(3)
    """)
    code, _ = _run(path)
    assert code == 3
    note = _exit_file(rep)
    assert note["status"] == 3 and note["oom"] is False and note["node"] == "n7" and note["leftovers"] == []
    assert abs(note["wall"] - time.time()) < 60
    assert lf.read_exit(rep["exit"]).status == 3
    trainer_env = json.loads((tmp_path / "env.json").read_text())
    assert trainer_env["SLURM_PROCID"] == "0" and trainer_env["SLURM_JOB_ID"] == "99"
    assert trainer_env["CUDA_VISIBLE_DEVICES"] == "" and "NODE_SECRET" not in trainer_env
    host = os.uname().nodename
    assert json.loads(trainer_env["CLUSTER_SPEC"])["cluster"]["workerpool0"] == [f"{host}:2222"]
    assert trainer_env["MASTER_ADDR"] == host and trainer_env["MASTER_PORT"] == "2222"
    assert Path(rep["stdout"]).read_text() == "hello out\n"
    assert Path(rep["stderr"]).read_text() == "hello err\n"
    addr = lf.read_address(lf.addr_path(lf.rendezvous_dir(str(tmp_path / "job"), "1"), NAME), "t1-a0")
    assert addr == (host, 2222)


def test_a_signal_file_term_reaches_the_trainers_process_group(tmp_path):
    path, rep = _launch(tmp_path, """
        import os, signal, subprocess, sys, time
        marks = os.environ["MARKS"]
        child = subprocess.Popen([sys.executable, "-c",
            "import os, signal, sys, time\\n"
            "def on(*a):\\n"
            "    open(os.path.join(sys.argv[1], 'child-term'), 'w').close(); sys.exit(0)\\n"
            "signal.signal(signal.SIGTERM, on)\\n"
            "open(os.path.join(sys.argv[1], 'child-ready'), 'w').close()\\n"
            "time.sleep(60)\\n", marks])
        def on_term(*a):
            open(os.path.join(marks, "trainer-term"), "w").close()
            child.wait()
            sys.exit(75)
        signal.signal(signal.SIGTERM, on_term)
        while not os.path.exists(os.path.join(marks, "child-ready")):
            time.sleep(0.01)
        open(os.path.join(marks, "ready"), "w").close()
        time.sleep(60)
    """)
    proc = _start(path)
    try:
        _wait_for(tmp_path / "ready")
        lf.write_json(rep["signal"] + ".unused", {})  # (files beside it are not read)
        Path(rep["signal"]).write_text("1 TERM")
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75
    assert (tmp_path / "trainer-term").exists() and (tmp_path / "child-term").exists()
    note = _exit_file(rep)
    assert note["status"] == 75 and note["oom"] is False and note["leftovers"] == []


def test_a_sigterm_to_the_entry_alone_is_not_sent_again_and_the_entry_outlives_it_to_write_the_exit(tmp_path):
    """Slurm's signals (scancel --signal, its time limit, a cancel) reach every process of the step: the
    trainer gets its one SIGTERM from Slurm, so the entry does not send it a second; it stays to write the
    exit."""
    path, rep = _launch(tmp_path, """
        import os, signal, sys, time
        terms = []
        def on_term(*a):
            terms.append(1)
            open(os.path.join(os.environ["MARKS"], "term-%d" % len(terms)), "w").close()
            if len(terms) == 1:
                time.sleep(0.5)  # a second SIGTERM, if any, would arrive meanwhile
                sys.exit(75)
        signal.signal(signal.SIGTERM, on_term)
        open(os.path.join(os.environ["MARKS"], "ready"), "w").close()
        time.sleep(60)
    """)
    proc = _start(path)
    try:
        _wait_for(tmp_path / "ready")
        proc.send_signal(signal.SIGTERM)  # the entry's share of Slurm's signal to the step
        time.sleep(0.5)
        assert proc.poll() is None and not (tmp_path / "term-1").exists()  # not forwarded, not dead
        os.killpg(int(_pid_of_trainer(tmp_path)), signal.SIGTERM)  # the trainer's share
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75 and _exit_file(rep)["status"] == 75
    assert (tmp_path / "term-1").exists() and not (tmp_path / "term-2").exists()


def _pid_of_trainer(tmp_path) -> str:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if f"MARKS={tmp_path}".encode() in env.split(b"\0") and os.getpgid(int(pid)) == int(pid):
                return pid
    raise AssertionError("the trainer is not running")


def test_a_memory_limit_exceeded_is_an_oom_kill(tmp_path):
    path, rep = _launch(tmp_path, """
        import os, time
        block = bytearray(200 * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1  # resident, not only reserved
        open(os.path.join(os.environ["MARKS"], "allocated"), "w").close()
        time.sleep(60)
    """, memory_limit_mb=50)
    code, _ = _run(path)
    assert code == 137
    note = _exit_file(rep)
    assert note["status"] == 137 and note["oom"] is True  # (killed once over 50 MB: maybe before "allocated")


def test_a_background_child_left_behind_is_listed_and_killed(tmp_path):
    path, rep = _launch(tmp_path, """
        import os, subprocess
        child = subprocess.Popen(["sleep", "120"])
        open(os.path.join(os.environ["MARKS"], "child.pid"), "w").write(str(child.pid))
    """)
    code, _ = _run(path)
    assert code == 0
    pid = int((tmp_path / "child.pid").read_text())
    note = _exit_file(rep)
    assert note["status"] == 0 and note["leftovers"] == [f"{pid} (sleep)"]
    end = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _alive(pid)


def test_a_missing_program_is_127_with_its_message_in_the_stderr_log(tmp_path):
    path, rep = _launch(tmp_path, None, argv=[str(tmp_path / "no-such-trainer"), "--lr=0.1"])
    code, _ = _run(path)
    assert code == 127
    note = _exit_file(rep)
    assert note["status"] == 127 and note["oom"] is False and note["node"] == "n7"
    log = Path(rep["stderr"]).read_text()
    assert "no-such-trainer" in log and "could not be executed on node n7" in log


def test_a_program_that_is_not_executable_is_126(tmp_path):
    (tmp_path / "plain.txt").write_text("not a program")
    path, rep = _launch(tmp_path, None, argv=[str(tmp_path / "plain.txt")])
    code, _ = _run(path)
    assert code == 126 and _exit_file(rep)["status"] == 126


def test_a_task_beyond_the_replicas_does_nothing_and_a_bad_launch_file_is_2(tmp_path):
    path, rep = _launch(tmp_path, "raise SystemExit(5)\n")
    proc = _start(path, procid="1")
    assert proc.wait(timeout=30) == 0 and not Path(rep["exit"]).exists()
    proc = _start(path, procid="")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and b"SLURM_PROCID is unset" in err
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{nope")
    proc = _start(garbage)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and b"not a launch file" in err

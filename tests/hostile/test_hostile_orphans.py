"""Grandchildren that call setsid() die with their trial and are named, also without a cgroup (issue 12.8).

Without a writable cgroup v2 (a non-root user; forced here with ``TRIALS_CGROUP=off``) the controller
is a child subreaper: a trainer's daemons (double fork + setsid) become its children, and at trial end
it finds those of each trial, kills them and says so. Real controllers, real trainers, real ``sleep``s.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from trials.controller.process.groups import read_stat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))
from faultkit import Jobs  # noqa: E402

pytestmark = [pytest.mark.faults]

# Runs under any python (the unprivileged test uses the system one): no hypertune, no trials.
TRAINER = """\
import json, os, time
trial_dir = os.environ["TRIALS_TRIAL_DIR"]
# each os.pipe() end closes at exec: its reader sees EOF once a sleep runs (a trainer that exited before
# its children exec'd left processes still named python: seen under load)
ran_r, ran_w = os.pipe()
child = os.fork()
if child == 0:  # leaves the trainer's process group, stays its child until the trainer exits
    os.setsid()
    os.execvp("sleep", ["sleep", "240"])
os.close(ran_w)
os.read(ran_r, 1)
r, w = os.pipe()
ran_r, ran_w = os.pipe()
middle = os.fork()
if middle == 0:  # a daemon: double fork + setsid, orphaned while the trainer still runs
    os.setsid()
    grandchild = os.fork()
    if grandchild == 0:
        os.execvp("sleep", ["sleep", "240"])
    os.write(w, str(grandchild).encode())
    os._exit(0)
os.waitpid(middle, 0)
os.close(w)
os.close(ran_w)
daemon = int(os.read(r, 64))
os.read(ran_r, 1)
with open(os.path.join(trial_dir, "orphans.json"), "w") as f:
    json.dump([child, daemon], f)
with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "w") as f:
    f.write(json.dumps({"loss": "0.5", "global_step": "1", "timestamp": time.time()}) + "\\n")
"""


def _alive(pid: int) -> bool:
    """Running, not a zombie (this machine's PID 1 may never reap orphans)."""
    stat = read_stat(pid)
    return stat is not None and stat.state not in "ZX"


def _orphans(job_dir: Path, trial: str) -> list[int]:
    return json.loads((job_dir / trial / "orphans.json").read_text())


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _check(out: subprocess.CompletedProcess, job_dir: Path) -> None:
    """Each trial's two sleeps are gone, and its own warning names exactly them."""
    text = out.stdout + out.stderr
    sandboxed = "the sandbox is off" not in text
    pids = {trial: _orphans(job_dir, trial) for trial in ("1", "2")}
    try:
        assert out.returncode == 0, text
        for trial, mine in pids.items():
            survivors = [pid for pid in mine if _alive(pid)] if not sandboxed else []
            assert not survivors, f"trial {trial}: the setsid() descendants {survivors} survived\n{text}"
            said = re.findall(rf"trial {trial}: workerpool0-0 exited and left (\d+) processes running; "
                              r"killed them: ([^\n]*)", text)
            assert said, f"trial {trial}: nothing said about what was killed\n{text}"
            n, names = said[0]
            assert int(n) == 2, text
            named = [_named(entry) for entry in re.findall(r"\d+ \([^)]*\)", names)]
            assert sorted(seen for _, seen in named) == sorted(mine), text  # the pids the trainer saw
            assert not [host for host, _ in named if _alive(host)], text
    finally:
        if not sandboxed:  # pids of the trainer's PID namespace name nothing here
            _kill([pid for mine in pids.values() for pid in mine])


def _named(entry: str) -> tuple[int, int]:
    """``4242 (sleep)`` or, from a replica's PID namespace, ``4242 (sleep, pid 3 in the trial)``:
    the host's pid and the pid the trainer saw."""
    m = re.fullmatch(r"(\d+) \(sleep(?:, pid (\d+) in the trial)?\)", entry)
    assert m, entry
    return int(m.group(1)), int(m.group(2) or m.group(1))


def test_without_a_cgroup_the_subreaper_kills_and_names_each_trials_daemons(tmp_path: Path) -> None:
    jobs = Jobs(tmp_path)
    trainer = tmp_path / "daemons.py"
    trainer.write_text(TRAINER)
    job_id = jobs.job_id("orphans")
    env = {**jobs.env(), "TRIALS_CGROUP": "off"}
    try:
        out = subprocess.run([sys.executable, "-m", "trials", "sweep", jobs.spec(n=2, parallel=2),
                              "--job-id", job_id, "--", sys.executable, str(trainer)],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        _check(out, jobs.job_dir(job_id))
    finally:
        jobs.cleanup()


def _as_nobody(*argv: str) -> bool:
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                          capture_output=True, timeout=60).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to switch user")
def test_an_unprivileged_controller_kills_and_names_each_trials_daemons() -> None:
    if not _as_nobody(sys.executable, "-c", "import trials, optuna"):
        pytest.skip("user nobody cannot run this interpreter here")
    root = Path(tempfile.mkdtemp(prefix="trials-nobody-orphans-"))  # pytest's folders are root-only
    try:
        root.chmod(0o777)
        jobs = Jobs(root)
        trainer = root / "daemons.py"
        trainer.write_text(TRAINER)
        trainer.chmod(0o644)
        spec = Path(jobs.spec(n=2, parallel=2))
        spec.chmod(0o644)
        job_id = jobs.job_id("nobody")
        # The trainer runs under the system python: this test's interpreter may sit in a folder
        # (/root/...) that only the host's root may open once inside a user namespace.
        system_python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
        env = {**jobs.env(), "HOME": str(root), "XDG_CACHE_HOME": str(root / ".cache")}
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", job_id,
                              "--", system_python, str(trainer)],
                             cwd=root, env=env, capture_output=True, text=True, timeout=180)
        _check(out, jobs.job_dir(job_id))
    finally:
        shutil.rmtree(root, ignore_errors=True)


EXIT_TRAINER = """\
import json, os, time
r, w = os.pipe()
middle = os.fork()
if middle == 0:  # a daemon that claims another attempt: no replica's own, still the trial's
    os.setsid()
    grandchild = os.fork()
    if grandchild == 0:
        os.environ["TRIALS_ATTEMPT"] = "99"
        os.execvp("sleep", ["sleep", "240"])
    os.write(w, str(grandchild).encode())
    os._exit(0)
os.waitpid(middle, 0)
os.close(w)
with open(os.path.join(os.environ["TRIALS_TRIAL_DIR"], "orphans.json"), "w") as f:
    json.dump([int(os.read(r, 64))], f)
with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "w") as f:
    f.write(json.dumps({"loss": "0.5", "global_step": "1", "timestamp": time.time()}) + "\\n")
"""


def test_what_no_replica_claims_is_killed_and_named_when_the_controller_exits(tmp_path: Path) -> None:
    jobs = Jobs(tmp_path)
    trainer = tmp_path / "stray.py"
    trainer.write_text(EXIT_TRAINER)
    job_id = jobs.job_id("stray")
    # No sandbox: in a replica's PID namespace the daemon is its init's child, so its replica claims it
    env = {**jobs.env(), "TRIALS_CGROUP": "off", "TRIALS_SANDBOX": "off"}
    pids: list[int] = []
    try:
        out = subprocess.run([sys.executable, "-m", "trials", "sweep", jobs.spec(n=1), "--job-id", job_id,
                              "--", sys.executable, str(trainer)],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        pids = _orphans(jobs.job_dir(job_id), "1")
        assert out.returncode == 0, out.stdout + out.stderr
        assert not _alive(pids[0]), f"the stray daemon {pids[0]} outlived the controller\n{out.stderr}"
        assert (f"trials: warning: 1 processes of trials were still running at exit; killed them: "
                f"{pids[0]} (sleep)") in out.stderr, out.stderr
    finally:
        _kill(pids)
        jobs.cleanup()

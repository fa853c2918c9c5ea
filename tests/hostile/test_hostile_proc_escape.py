"""A trainer cannot reach its controller through /proc, and cancel never trusts a forged lock (issue 23.1-2).

Real controllers, real trainers (``tests/scripts/proc_escape_trainer.py``), a real ``trials cancel``
and a real unrelated ``sleep`` (the victim). The trainer walks its parent pids and scans every pid
it can see for the holder of ``controller.lock``, writes through ``/proc/<pid>/root`` into the
launch folder and ``journal.log``, and rewrites the lock file through ``/proc/<pid>/fd/<n>`` as
``pid <victim>``. With the sandbox each replica has its own PID namespace and /proc: it finds no
controller. Without it (``TRIALS_SANDBOX=off``) it can, but cancel proves the lock's holder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))
from faultkit import SCRIPTS, Jobs  # noqa: E402

pytestmark = [pytest.mark.faults]

TRAINER = SCRIPTS / "proc_escape_trainer.py"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
_WAIT_S = 120.0


def _sandbox_on(root: Path, prefix: Sequence[str], env: dict[str, str]) -> bool:
    probe = [*prefix, sys.executable, "-c",
             "import sys; from trials.controller.process import sandbox; "
             "sys.exit(0 if sandbox.detect(launch_dir=sys.argv[1], job_dir=sys.argv[2], "
             "gcs_root=sys.argv[3]).on else 1)",
             str(root), str(root / "probe-job"), str(root / "probe-job" / "gcs")]
    try:
        return subprocess.run(probe, cwd=root, env=env, capture_output=True, timeout=60).returncode == 0
    finally:
        shutil.rmtree(root / "probe-job", ignore_errors=True)


def _attack_and_cancel(root: Path, *, prefix: Sequence[str] = (), python: str = sys.executable,
                       extra_env: dict[str, str] | None = None, sandboxed: bool = True) -> dict:
    """Run the escaping trainer, cancel the job once it has tried; check the victim lives and, with
    the sandbox, that the launch folder and the journal are untouched."""
    jobs = Jobs(root)
    env = {**jobs.env(), **(extra_env or {})}
    job_id = jobs.job_id("escape")
    job_dir = jobs.job_dir(job_id)
    marker = f"FORGED-{jobs.tag}"
    spec = Path(jobs.spec(n=1))
    spec.chmod(0o644)
    launch = root / "launch"  # the job folder outside it: the sandbox hides it behind an empty tmpfs
    launch.mkdir(mode=0o777)
    launch.chmod(0o777)
    before = sorted(p.name for p in launch.iterdir())
    victim = subprocess.Popen([*prefix, "sleep", "300"])
    sweep = subprocess.Popen([*prefix, sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", job_id,
                              "--root", str(root / "trials-jobs"),
                              "--", python, str(TRAINER), str(victim.pid), marker,
                              *(["umount"] if sandboxed else [])],
                             cwd=launch, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        escape = job_dir / "1" / "escape.json"
        deadline = time.monotonic() + _WAIT_S
        while not escape.exists() and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert escape.exists(), f"the trainer did not get to try\n{sweep.communicate(timeout=30)}"
        done = json.loads(escape.read_text())
        journal_before = (job_dir / "journal.log").read_bytes()
        cancel = subprocess.run([*prefix, sys.executable, "-m", "trials", "cancel", job_id], cwd=root,
                                env=env, capture_output=True, text=True, timeout=_WAIT_S)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        try:
            out, err = sweep.communicate(timeout=_WAIT_S)
        except subprocess.TimeoutExpired:
            sweep.kill()
            out, err = sweep.communicate()
            raise AssertionError(f"cancel did not reach the controller: {done}\n{out}\n{err}") from None
        assert victim.poll() is None, f"trials cancel signalled the unrelated pid {victim.pid}: {done}"
        assert sweep.returncode == 130, out + err
        journal = (job_dir / "journal.log").read_bytes()
        assert journal.startswith(journal_before)  # every record as it was, only appended to
        records = [json.loads(line) for line in journal.splitlines()]  # still a journal Optuna reads
        forged = [r for r in records if marker in (r.get("worker_id"), r.get("study_name"))]
        assert not forged or not sandboxed, f"a forged record reached the journal: {done}"
        assert jobs.describe(job_id)["state"] == "JOB_STATE_CANCELLED"
        return done
    finally:
        for proc in (sweep, victim):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if sweep.stdout is not None:
            sweep.stdout.close()
            sweep.stderr.close()  # type: ignore[union-attr]
        planted = sorted(p.name for p in launch.iterdir() if p.name not in before)
        jobs.cleanup()
        assert not planted or not sandboxed, f"the trainer wrote {planted} into the real launch folder"


def test_a_trainer_cannot_reach_its_controller_through_proc(tmp_path: Path) -> None:
    if not _sandbox_on(tmp_path, (), Jobs(tmp_path).env()):
        pytest.skip("no sandbox here (the fallback test still runs)")
    done = _attack_and_cancel(tmp_path)
    assert done["unmounted"] == [], done  # no CAP_SYS_ADMIN: the job folder stays hidden, /proc its own
    assert done["host_writes"] == [], done  # /sys (the cgroup files) and /proc/sys are read-only
    assert done["holders"] == [], done  # it saw no controller at all
    assert done["ancestors"] == [], done  # its parent is the namespace's init, PID 1
    assert done["init_fds"] == [], done  # and init's fds are not the trainer's to open
    assert not [w for w in done["wrote"] if not w.startswith("planted")], done  # plants: in its overlay


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to switch user")
def test_an_unprivileged_trainer_cannot_reach_its_controller_through_proc() -> None:
    root = Path(tempfile.mkdtemp(prefix="trials-nobody-escape-"))  # pytest's folders are root-only
    try:
        root.chmod(0o777)
        env = {**Jobs(root).env(), "HOME": str(root), "XDG_CACHE_HOME": str(root / ".cache")}
        if subprocess.run([*NOBODY, sys.executable, "-c", "import trials, optuna"], env=env,
                          capture_output=True, timeout=60).returncode != 0:
            pytest.skip("user nobody cannot run this interpreter here")
        if not _sandbox_on(root, NOBODY, env):
            pytest.skip("unprivileged user namespaces are refused here")
        # The trainer runs under the system python: this test's interpreter may sit in a folder
        # (/root/...) that only the host's root may open once inside a user namespace.
        system_python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
        done = _attack_and_cancel(root, prefix=NOBODY, python=system_python,
                                  extra_env={"HOME": str(root), "XDG_CACHE_HOME": str(root / ".cache")})
        assert done["holders"] == [] and done["init_fds"] == [] and done["unmounted"] == [], done
        assert done["host_writes"] == [], done
        assert done["ancestors"] == [], done  # its own PID namespace: no controller, no other trial
        assert not [w for w in done["wrote"] if not w.startswith("planted")], done
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_without_the_sandbox_cancel_still_refuses_a_forged_lock_holder(tmp_path: Path) -> None:
    done = _attack_and_cancel(tmp_path, extra_env={"TRIALS_SANDBOX": "off"}, sandboxed=False)
    assert done["holders"], done  # a plain child finds its controller and writes as it (documented)
    assert any(w.startswith("lock through") for w in done["wrote"]), done


FORGE_PIDS = """\
import json, os, sys, time
trial_dir = os.environ["TRIALS_TRIAL_DIR"]
pids = os.path.join(trial_dir, "pids.json")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # the controller records this replica first: then forge it
    try:
        with open(pids) as f:
            if json.load(f):
                break
    except (OSError, ValueError):
        pass
    time.sleep(0.02)
forged = [{"name": "workerpool0-0", "pid": 4194304 + 11, "pgid": int(sys.argv[1]), "start_time": 0}]
with open(pids, "w") as f:
    json.dump(forged, f)
with open(os.environ["CLOUD_ML_HP_METRIC_FILE"], "w") as f:
    f.write(json.dumps({"loss": "0.5", "global_step": "1", "timestamp": time.time()}) + "\\n")
open(os.path.join(trial_dir, "forged"), "w").close()
time.sleep(120)
"""


@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_a_forged_pids_file_does_not_make_cancel_kill_another_group(tmp_path: Path, sandbox: str) -> None:
    jobs = Jobs(tmp_path)
    trainer = tmp_path / "forge.py"
    trainer.write_text(FORGE_PIDS)
    job_id = jobs.job_id("forgepids")
    env = {**jobs.env(), "TRIALS_SANDBOX": sandbox}
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)  # its own group: the target
    sweep = subprocess.Popen([sys.executable, "-m", "trials", "sweep", jobs.spec(n=1), "--job-id", job_id,
                              "--", sys.executable, str(trainer), str(victim.pid)],
                             cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        forged = jobs.job_dir(job_id) / "1" / "forged"
        deadline = time.monotonic() + _WAIT_S
        while not forged.exists() and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert forged.exists(), "the trainer did not get to forge its pids.json"
        sweep.kill()  # the controller dies; the next one reaps what pids.json names
        sweep.wait()
        out = jobs.cli("cancel", job_id)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "JOB_STATE_CANCELLED" in out.stdout, out.stdout
        assert victim.poll() is None, "trials cancel killed the group a forged pids.json named"
    finally:
        for proc in (sweep, victim):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        jobs.cleanup()

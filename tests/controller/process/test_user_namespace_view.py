"""The sandbox without root (a user namespace) leaves the host as it was too (issue 46, item 6).

There the host is read-only but for the launch folder, the home folder, /tmp and /var/tmp, each
copy-on-write: a trainer's ``pip install --user`` and /tmp scratch land in its layers, a write to /etc
or /usr/local fails (EROFS), and the layers go when the attempt ends. Real processes: the controller side
runs as user nobody under the system Python (the sandbox's modules need only the standard library; this
test's interpreter may sit in a folder nobody cannot enter), the trainer too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")

TRAINER = r"""
import json, os, sys
token, home = sys.argv[1], os.environ["HOME"]
seen = {}
for name, path in [("home", f"{home}/.local/lib/probe-{token}"), ("tmp", f"/tmp/trials-probe-{token}"),
                   ("etc", f"/etc/trials-probe-{token}"), ("usr", f"/usr/local/trials-probe-{token}")]:
    try:
        os.makedirs(path)
        with open(os.path.join(path, "x"), "w") as f:
            f.write("scratch")
        seen[name] = "written"
    except OSError as err:
        seen[name] = err.strerror
print(json.dumps(seen))
"""

DRIVER = r"""
import json, os, sys, time
from trials.controller.process import layers, sandbox
launch, job, trainer, token = sys.argv[1:5]
trial = os.path.join(job, "1")
os.makedirs(trial)
box = sandbox.detect(launch_dir=launch, job_dir=job, gcs_root=os.path.join(job, "gcs"))
if box.namespace != "user":
    print(json.dumps({"skip": box.reason or str(box.namespace)}))
    sys.exit(0)
kept = layers.Layers()
log = os.path.join(trial, "workerpool0-0.log")
replica = sandbox.start_sandboxed(box, [sys.executable, trainer, token], env=dict(os.environ), trial_dir=trial,
                                  outputs=(), replica="workerpool0-0", stdout_path=log, stderr_path=log,
                                  name="workerpool0-0", layers=kept)
deadline = time.monotonic() + 60
while replica.poll() is None and time.monotonic() < deadline:
    time.sleep(0.01)
replica.close()
kept.drain()
print(json.dumps({"exit": replica.poll().status, "said": box.describe(), "log": open(log).read(),
                  "layers": os.listdir(os.path.join(trial, "sandbox"))}))
"""


def as_nobody(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NOBODY, *argv], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or SYSTEM_PYTHON is None,
                    reason="needs root to switch user, and a system python3")
def test_without_root_the_host_is_read_only_and_the_private_folders_layers_go() -> None:
    assert SYSTEM_PYTHON is not None
    env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    if as_nobody(SYSTEM_PYTHON, "-c", "import trials.controller.process.sandbox", env=env).returncode != 0:
        pytest.skip("user nobody cannot import this checkout's trials under the system python")
    top = Path(tempfile.mkdtemp(prefix="trials-nobody-"))  # pytest's folders are root-only
    token = uuid.uuid4().hex[:12]
    try:
        top.chmod(0o755)
        home, work = top / "home", top / "work"
        for folder in (home, work):
            folder.mkdir()
            os.chown(folder, 65534, 65534)
        (top / "trainer.py").write_text(TRAINER)
        env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
        proc = as_nobody(SYSTEM_PYTHON, "-c", DRIVER, str(work / "launch"), str(work / "launch" / "trials-jobs" / "j"),
                         str(top / "trainer.py"), token, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = json.loads(proc.stdout.splitlines()[-1])
        if "skip" in got:
            pytest.skip(f"no user-namespace sandbox here: {got['skip']}")
        assert got["exit"] == 0, got["log"]
        seen = json.loads(got["log"].splitlines()[-1])
        assert seen == {"home": "written", "tmp": "written", "etc": "Read-only file system",
                        "usr": "Read-only file system"}
        assert not (home / ".local").exists() and not Path(f"/tmp/trials-probe-{token}").exists()
        assert got["layers"] == []  # the attempt succeeded: its layers went with it
        assert "read-only" in got["said"] and "/tmp" in got["said"]  # what it does not protect, said
    finally:
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(f"/tmp/trials-probe-{token}", ignore_errors=True)

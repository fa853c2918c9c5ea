"""Host trials leave the host as it was (issue 46, item 6): real `trials sweep`, `describe`, `gc` processes.

A trainer that does what ``pip install --user`` does (writes ``$HOME/.local``) and writes ``/etc`` and
``/usr/local`` changes nothing on the host: its writes land in its attempt's copy-on-write layer. The
layers of finished attempts are gone after the job; a replica's last failed attempt's is kept, named by
``trials describe --format local-json``, and ``trials gc JOB`` removes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from trials.controller.process import sandbox

pytestmark = pytest.mark.integration

TRAINER = """
import os, sys
token, home = sys.argv[1], os.environ["HOME"]
attempt = int(os.environ.get("TRIALS_ATTEMPT", "0"))
os.makedirs(f"{home}/.local/lib/python3/site-packages/probe_{token}", exist_ok=True)  # pip install --user
with open(f"{home}/.local/lib/python3/site-packages/probe_{token}/__init__.py", "w") as f:
    f.write("x = 1\\n")
with open(f"/etc/trials-probe-{token}", "w") as f:
    f.write("written by a trial")
os.makedirs(f"/usr/local/trials-probe-{token}", exist_ok=True)
with open(f"/usr/local/trials-probe-{token}/x", "wb") as f:
    f.write(b"\\0" * 200_000)  # some scratch
import hypertune
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=1.0, global_step=1)
if os.environ["CLOUD_ML_TRIAL_ID"] == "2":
    sys.exit(3 if attempt < 2 else 1)  # two restartable crashes, then a permanent error: the trial fails
"""


def sandbox_as_root(tmp: Path) -> bool:
    if os.geteuid() != 0:
        return False
    probe = sandbox.detect(launch_dir=str(tmp), job_dir=str(tmp / "probe-job"), gcs_root=str(tmp / "probe-gcs"),
                           environ={})
    return probe.namespace == "mount"


def trials_cli(*argv: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trials", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=240, env=env)


def host_paths(home: Path, token: str) -> list[Path]:
    return [home / ".local", Path(f"/etc/trials-probe-{token}"), Path(f"/usr/local/trials-probe-{token}")]


def test_a_trials_writes_to_home_etc_and_usr_stay_in_its_layers_which_go_but_the_last_failed(tmp_path: Path) -> None:
    if not sandbox_as_root(tmp_path):
        pytest.skip("needs root and mount namespaces (the user-namespace path: test_user_namespace_view)")
    launch, home = tmp_path / "launch", tmp_path / "home"
    launch.mkdir()
    home.mkdir()
    (launch / "train.py").write_text(TRAINER)
    (launch / "spec.yaml").write_text(
        "studySpec:\n"
        "  metrics: [{metricId: score, goal: MAXIMIZE}]\n"
        "  parameters: [{parameterId: x, doubleValueSpec: {minValue: 0.0, maxValue: 1.0}}]\n"
        "maxTrialCount: 2\nparallelTrialCount: 1\nmaxFailedTrialCount: 2\n"
        "trialJobSpec:\n  workerPoolSpecs:\n"
        "  - {machineSpec: {machineType: n1-standard-4}, replicaCount: 1, containerSpec: {imageUri: gcr.io/p/t}}\n")
    token = uuid.uuid4().hex[:12]
    env = {**os.environ, "HOME": str(home),
           "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")}
    try:
        proc = trials_cli("sweep", "spec.yaml", "--job-id", "host", "--", sys.executable, "train.py", token,
                          cwd=launch, env=env)
        left = [str(p) for p in host_paths(home, token) if p.exists()]
        assert not left, f"the trials changed the host: {left}\n{proc.stdout}{proc.stderr}"
        job = launch / "trials-jobs" / "host"
        rest = json.loads(trials_cli("describe", "host", "--format", "json", cwd=launch, env=env).stdout)
        assert [t["state"] for t in rest["trials"]] == ["SUCCEEDED", "INFEASIBLE"], proc.stdout + proc.stderr
        layers = {str(p.relative_to(job)) for p in job.glob("*/sandbox/*")}
        assert layers == {"2/sandbox/workerpool0-0.2"}, layers  # the succeeded attempt's and the earlier failed go
        kept = job / "2" / "sandbox" / "workerpool0-0.2"
        assert (kept / "layers" / "0" / "upper" / "etc" / f"trials-probe-{token}").read_text() == "written by a trial"

        local = json.loads(trials_cli("describe", "host", "--format", "local-json", cwd=launch, env=env).stdout)
        assert local["keptLayers"] == [{"trial": "2", "path": str(kept)}]

        gc = trials_cli("gc", "host", cwd=launch, env=env)
        assert gc.returncode == 0, gc.stderr
        assert "removed 1 sandbox layers" in gc.stdout
        assert not kept.exists() and not list(job.glob("*/sandbox/*"))
        local = json.loads(trials_cli("describe", "host", "--format", "local-json", cwd=launch, env=env).stdout)
        assert "keptLayers" not in local
        again = trials_cli("gc", "host", cwd=launch, env=env)
        assert again.returncode == 0 and "no sandbox layers" in again.stdout
    finally:
        for path in host_paths(home, token)[1:]:  # (the code as found wrote them on the host)
            subprocess.run(["rm", "-rf", "--", str(path)], check=False)


def test_gc_refuses_while_a_controller_runs_the_job(tmp_path: Path) -> None:
    from trials.controller.jobs.admin import collect_layers
    from trials.errors import ConfigError

    job = tmp_path / "job"
    (job / "1" / "sandbox" / "workerpool0-0.0" / "upper").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode()); print('held', flush=True); "
        "time.sleep(60)"), str(job / "controller.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="is being run by a controller"):
            collect_layers(str(job), "j")
        assert (job / "1" / "sandbox" / "workerpool0-0.0").exists()
    finally:
        holder.kill()
        holder.wait()
    assert collect_layers(str(job), "j")[0] == 1
    assert not (job / "1" / "sandbox").exists()

"""trials/controller/process/orphans.py: without a cgroup, the controller as subreaper kills a replica's escaped
descendants and reaps exactly those (real processes, in a child interpreter: the subreaper mark is
process-wide and must not stay on pytest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""\
    import json, os, subprocess, sys
    os.environ["TRIALS_CGROUP"] = "off"
    from trials.controller.process import sandbox

    trial_dir, daemons = sys.argv[1], sys.argv[2]
    # the controller's own children: another replica's leader and a helper, both Popen's to reap
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True,
                                 env={**os.environ, "TRIALS_TRIAL_DIR": trial_dir, "TRIALS_REPLICA": "workerpool0-0",
                                      "TRIALS_ATTEMPT": "1"})
    helper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    env = {**os.environ, "TRIALS_TRIAL_DIR": trial_dir, "TRIALS_REPLICA": "workerpool0-0", "TRIALS_ATTEMPT": "0",
           "CLOUD_ML_HP_METRIC_FILE": os.path.join(trial_dir, "m")}
    view = sandbox.off(trial_dir, trial_dir, trial_dir, "test")
    r = sandbox.start_sandboxed(view, [sys.executable, daemons], env=env, trial_dir=trial_dir, outputs=(),
                                replica="workerpool0-0", name="workerpool0-0",
                                stdout_path=os.path.join(trial_dir, "out.log"),
                                stderr_path=os.path.join(trial_dir, "err.log"))
    r._proc.wait()
    status = r.stop(grace_s=5.0)
    r.close()
    me = str(os.getpid())
    zombies = []
    for pid in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if stat[1] == me and stat[0] == "Z":
            zombies.append(int(pid))
    result = {"status": status, "leftovers": r.leftovers, "zombies": zombies,
              "bystander": bystander.poll(), "helper": helper.poll()}
    bystander.kill(); helper.kill()
    result["bystander_reaped_by_popen"] = bystander.wait()
    print(json.dumps(result))
""")


def test_escaped_descendants_are_killed_named_and_reaped_and_nothing_else_is(tmp_path: Path) -> None:
    daemons = tmp_path / "daemons.py"
    src = (Path(__file__).resolve().parents[2] / "hostile" / "test_hostile_orphans.py").read_text()
    body = src.split('TRAINER = """\\\n', 1)[1].split('"""', 1)[0].replace("\\\\n", "\\n")
    daemons.write_text(body)
    trial_dir = tmp_path / "1"
    trial_dir.mkdir()
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(trial_dir), str(daemons)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    pids = json.loads((trial_dir / "orphans.json").read_text())
    assert got["status"] == 0
    # each named by its pid and program: `sleep`, or `python` when the kill came between its fork and its exec
    # (seen with the suite in 4 workers)
    named = {int(entry.split(" ", 1)[0]): entry.split(" ", 1)[1] for entry in got["leftovers"]}
    assert sorted(named) == sorted(pids), got
    assert all(name == "(sleep)" or name.startswith("(python") for name in named.values()), got
    assert got["zombies"] == [], "the killed descendants were not reaped"
    assert got["bystander"] is None and got["helper"] is None, "a Popen child of the controller was touched"
    assert got["bystander_reaped_by_popen"] == -9  # its exit status was Popen's to collect, intact


def test_a_process_read_mid_execve_is_read_again_before_it_counts_as_nobodys(monkeypatch) -> None:
    """Its environment reads empty while its execve replaces its memory: a trainer's escaped child caught
    there was missed (its leftovers went unkilled under load). It is read again; an env -i one stays
    nobody's."""
    from trials.controller.process import orphans

    tree = orphans.OrphanTree({"TRIALS_TRIAL_DIR": "/t/1", "TRIALS_REPLICA": "workerpool0-0", "TRIALS_ATTEMPT": "0"})
    reads = iter([set(), set(), {b"TRIALS_TRIAL_DIR=/t/1", b"TRIALS_REPLICA=workerpool0-0", b"TRIALS_ATTEMPT=0",
                                 b"PATH=/bin"}])
    monkeypatch.setattr(orphans, "_environ", lambda pid: next(reads))
    monkeypatch.setattr(orphans, "_EXEC_RETRY_S", 0.0)
    alive = orphans._Stat(state="S", ppid=os.getpid(), pgid=1, start_time=1)
    assert tree._ours(4242, alive)
    monkeypatch.setattr(orphans, "_environ", lambda pid: set())
    assert not tree._ours(4243, alive)

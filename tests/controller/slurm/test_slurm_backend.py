"""trials/controller/slurm/backend.py replayed against a fake ``commands.Slurm`` (scripted squeue rows and
exit codes, recorded sbatch scripts and scancel calls): one job per trial attempt, restarts, stops, lost
jobs, a dead controller's jobs, sbatch failures, exit files Slurm does not back. Real files in tmp_path;
no cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trials import protocol
from trials.controller.backend.protocol import BackendError, ReplicaStart
from trials.controller.slurm import backend as sb
from trials.controller.slurm import launchfile as lf
from trials.controller.slurm.commands import JobRow
from trials.controller.slurm.states import merge_states
from trials.controller.slurm.verdict import SlurmWord

TWO = ("workerpool0-0", "workerpool1-0")


class FakeSlurm:
    """What the backend asks of ``commands.Slurm``, scripted."""

    def __init__(self) -> None:
        self.paths = {"sbatch": "/usr/bin/sbatch", "squeue": "/usr/bin/squeue", "scancel": "/usr/bin/scancel",
                      "srun": "/usr/bin/srun"}
        self.scripts: list[str] = []
        self.submit_args: list[list[str]] = []
        self.next_id = 100
        self.rows: list[JobRow] = []
        self.cancels: list[tuple[str, str | None]] = []
        self.fail_submit: str | None = None
        self.queries: list[tuple[list[str], str | None]] = []
        self.codes: dict[str, tuple[int, int]] = {}  # job id -> ExitCode (code, signal) scontrol prints
        self.words: dict[str, SlurmWord | str | None] = {}  # job id -> what job_word answers instead
        self.word_queries: list[tuple[str, str]] = []
        self.word_error: str | None = None

    def submit(self, script: str, args=()) -> str:
        if self.fail_submit:
            raise BackendError(f"sbatch failed: {self.fail_submit}")
        self.scripts.append(script)
        self.submit_args.append(list(args))
        self.next_id += 1
        return str(self.next_id)

    def jobs(self, job_ids=(), *, user=None, name=None):
        ids = set(job_ids)
        self.queries.append((sorted(ids), user))
        return [r for r in self.rows if (not ids or r.job_id in ids) and (name is None or r.name == name)]

    def cancel(self, job_id: str, sig: str | None = None) -> None:
        self.cancels.append((job_id, sig))

    def job_word(self, job_id: str, name: str):
        """scontrol's word: the rows' state with the scripted exit code (None: Slurm forgot the job)."""
        self.word_queries.append((job_id, name))
        if self.word_error:
            raise BackendError(self.word_error)
        if job_id in self.words:
            return self.words[job_id]
        rows = [r for r in self.rows if r.job_id == job_id]
        if not rows:
            return None
        code, sig = self.codes.get(job_id, (0, 0))
        return SlurmWord(state=merge_states([r.state for r in rows]), exit_code=code, exit_signal=sig,
                         nodes=",".join(r.nodes for r in rows), source="scontrol")

    def running(self, job_id: str, *, components: int = 1, state: str = "RUNNING", name: str = "x",
                comment: str = "") -> None:
        self.rows = [r for r in self.rows if r.job_id != job_id]
        self.rows += [JobRow(job_id=job_id, name=name, comment=comment, state=state, nodes=f"n{k + 1}", reason="None")
                      for k in range(components)]


@pytest.fixture
def slurm(monkeypatch) -> FakeSlurm:
    monkeypatch.setattr(sb, "STATE_EVERY_S", 0.0)  # squeue at every poll: the scripted rows are read at once
    return FakeSlurm()


def _cluster_spec(names, me) -> str:
    cluster: dict[str, list[str]] = {}
    for k, name in enumerate(names):
        pool = name.split("-")[0]
        cluster.setdefault(pool, []).append(f"127.0.0.1:{2222 + k}")
    pool, _, index = me.rpartition("-")
    return json.dumps({"cluster": cluster, "task": {"type": pool, "index": int(index)}})


def _request(tmp_path: Path, name: str, *, trial: str = "1", names=TWO, attempt: int = 0,
             memory_limit_mb: int | None = None) -> ReplicaStart:
    trial_dir = tmp_path / "job" / trial
    trial_dir.mkdir(parents=True, exist_ok=True)
    env = {protocol.ENV_TRIAL_ID: trial, protocol.ENV_ATTEMPT: str(attempt), "PATH": os.environ["PATH"],
           protocol.ENV_CLUSTER_SPEC: _cluster_spec(names, name)}
    return ReplicaStart(argv=(sys.executable, "train.py"), env=env, cwd=str(tmp_path), name=name, label=name,
                        trial_dir=str(trial_dir), stdout_path=str(trial_dir / f"{name}.out"),
                        stderr_path=str(trial_dir / f"{name}.err"), memory_limit_mb=memory_limit_mb)


def st(replica: sb.SlurmReplica) -> int | None:
    """Its status once it ended, else None."""
    ended = replica.poll()
    return None if ended is None else ended.status


def _backend(tmp_path: Path, slurm: FakeSlurm, **kw) -> sb.SlurmBackend:
    backend = sb.SlurmBackend(job_dir=str(tmp_path / "job"), slurm=slurm, **kw)  # type: ignore[arg-type]
    backend.open(lambda line: None)
    return backend


def _launch_of(replica) -> dict:
    return json.loads(Path(replica.backend.sub_dir(replica.submission.sub_id), "launch.json").read_text())


def _write_exit(replica, status: int, **fields) -> None:
    lf.write_json(lf.exit_path(replica.backend.sub_dir(replica.submission.sub_id), replica.name),
                  {"status": status, "oom": False, "wall": fields.pop("wall", 1.0), "node": "n2", "leftovers": [],
                   **fields})


def test_two_replicas_are_held_until_both_started_then_submitted_once_as_one_het_job(tmp_path, slurm):
    backend = _backend(tmp_path, slurm, partition="debug", extra=("--qos=high",))
    chief = backend.start(_request(tmp_path, "workerpool0-0", memory_limit_mb=300))
    assert slurm.scripts == [] and chief.submission is None
    worker = backend.start(_request(tmp_path, "workerpool1-0", memory_limit_mb=300))
    assert len(slurm.scripts) == 1
    script = slurm.scripts[0]
    assert script.count("#SBATCH hetjob") == 1 and "--het-group=0,1" in script
    assert script.count("#SBATCH --partition=debug") == 2 and script.count("#SBATCH --qos=high") == 2
    assert script.count("#SBATCH --mem-per-cpu=300M") == 2
    assert f"#SBATCH --job-name=trials-{sb.job_tag(str(tmp_path / 'job'))}-1" in script
    assert f"#SBATCH --comment=trials:{backend.me}" in script
    assert "exec /usr/bin/srun " in script
    assert chief.submission is worker.submission and chief.placement["slurmJobId"] == "101"
    assert slurm.submit_args[0] == ["--chdir", backend.sub_dir(chief.submission.sub_id)]
    launch = _launch_of(chief)
    assert [r["name"] for r in launch["replicas"]] == list(TWO) and launch["ranks"] == list(TWO)
    assert [r["port"] for r in launch["replicas"]] == [2222, 2223]
    assert launch["replicas"][0]["argv"] == [sys.executable, "train.py"]
    slurm.running("101", components=2)
    assert chief.poll() is None and worker.poll() is None
    assert worker.record() == {"name": "workerpool1-0", "runtime": "slurm", "slurm_job": "101",
                               "submission": worker.submission.sub_id}


def test_a_one_replica_trial_is_submitted_at_its_start(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    r = backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    assert len(slurm.scripts) == 1 and "hetjob" not in slurm.scripts[0] and "--het-group" not in slurm.scripts[0]
    assert "#SBATCH --ntasks=1" in slurm.scripts[0] and r.submission is not None


def test_a_restart_of_one_replica_while_the_other_runs_is_submitted_alone(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    chief = backend.start(_request(tmp_path, "workerpool0-0"))
    worker = backend.start(_request(tmp_path, "workerpool1-0"))
    slurm.running("101", components=2)
    _write_exit(worker, 1)
    assert st(worker) == 1 and chief.poll() is None
    again = backend.start(_request(tmp_path, "workerpool1-0", attempt=1))
    assert len(slurm.scripts) == 2 and again.submission is not None and again.submission is not chief.submission
    second = slurm.scripts[1]
    assert "hetjob" not in second and "--het-group" not in second and "#SBATCH --ntasks=1" in second
    launch = _launch_of(again)
    assert [r["name"] for r in launch["replicas"]] == ["workerpool1-0"] and launch["ranks"] == list(TWO)
    assert "-a1-" in again.submission.sub_id
    assert chief.poll() is None  # the chief's job runs on


def test_stopping_every_replica_is_term_then_kill_through_the_entries_and_scancel_only_when_they_do_not_act(
        tmp_path, slurm, monkeypatch):
    backend = _backend(tmp_path, slurm)
    chief = backend.start(_request(tmp_path, "workerpool0-0"))
    worker = backend.start(_request(tmp_path, "workerpool1-0"))
    slurm.running("101", components=2)
    for r in (chief, worker):
        assert r.begin_stop(50.0) == 50.0
    sub_dir = backend.sub_dir(chief.submission.sub_id)
    signals = {n: Path(lf.signal_path(sub_dir, n)).read_text().split()[1] for n in TWO}
    assert signals == {"workerpool0-0": "TERM", "workerpool1-0": "TERM"} and slurm.cancels == []
    assert chief.begin_stop(51.0) == 50.0  # once
    assert chief.advance_stop(52.0, 10.0) is False and slurm.cancels == []  # within the grace
    monkeypatch.setattr(sb, "ENTRY_KILL_S", 3600.0)
    for r in (chief, worker):
        assert r.advance_stop(60.0, 10.0) is False
    assert {Path(lf.signal_path(sub_dir, n)).read_text().split()[1] for n in TWO} == {"KILL"}
    assert slurm.cancels == []  # the entries carry out the SIGKILL
    monkeypatch.setattr(sb, "ENTRY_KILL_S", 0.0)  # … and when they do not (a hung node): Slurm's own
    assert chief.advance_stop(62.0, 10.0) is False
    assert slurm.cancels == [("101", "KILL"), ("101", None)]
    slurm.running("101", components=2, state="CANCELLED")
    for r in (chief, worker):
        _write_exit(r, 137)
        assert r.advance_stop(63.0, 10.0) is True and st(r) == 137
        assert r.poll().oom_killed is False


def test_stopping_a_job_still_queued_cancels_it(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    r = backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    slurm.running("101", state="PENDING")
    assert r.poll() is None
    r.begin_stop(5.0)
    assert slurm.cancels == [("101", None)]
    assert not os.path.exists(lf.signal_path(backend.sub_dir(r.submission.sub_id), "workerpool0-0"))


def test_begin_stop_of_one_replica_while_another_runs_writes_its_signal_file(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    chief = backend.start(_request(tmp_path, "workerpool0-0"))
    worker = backend.start(_request(tmp_path, "workerpool1-0"))
    slurm.running("101", components=2)
    worker.begin_stop(10.0)
    sub_dir = backend.sub_dir(worker.submission.sub_id)
    assert Path(lf.signal_path(sub_dir, "workerpool1-0")).read_text() == "1 TERM"
    assert not os.path.exists(lf.signal_path(sub_dir, "workerpool0-0")) and slurm.cancels == []
    worker.advance_stop(30.0, 5.0)
    assert Path(lf.signal_path(sub_dir, "workerpool1-0")).read_text() == "2 KILL" and slurm.cancels == []
    assert chief.poll() is None


def test_a_job_gone_from_squeue_without_an_exit_file_is_137_after_the_grace(tmp_path, slurm, monkeypatch):
    monkeypatch.setattr(sb, "ENDED_GRACE_S", 0.3)
    backend = _backend(tmp_path, slurm)
    r = backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    slurm.running("101")
    assert r.poll() is None
    slurm.rows = []  # Slurm forgot it (a lost node, MinJobAge, scancel from outside)
    assert r.poll() is None  # the exit file may lag on a shared folder
    import time

    end = time.monotonic() + 10
    while r.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    ended = r.poll()
    assert ended is not None and (ended.status, ended.how, ended.signal) == (137, "lost", None)
    assert ended.placement["slurmState"] == "GONE" and ended.placement["slurmJobId"] == "101"


@pytest.mark.parametrize(("state", "status", "how"), [
    ("NODE_FAIL", 137, "lost"), ("PREEMPTED", 137, "lost"), ("OUT_OF_MEMORY", 137, "oom"), ("TIMEOUT", 143, "exit"),
    ("CANCELLED", 143, "exit"), ("FAILED", 1, "exit")])
def test_a_job_ended_without_an_exit_file_gets_a_status_from_its_slurm_state(tmp_path, slurm, monkeypatch,
                                                                             state, status, how):
    monkeypatch.setattr(sb, "ENDED_GRACE_S", 0.0)
    backend = _backend(tmp_path, slurm)
    r = backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    slurm.running("101", state=state)
    assert st(r) == status and r.placement["slurmState"] == state
    assert r.poll().oom_killed is (state == "OUT_OF_MEMORY") and r.poll().how == how
    log = Path(r.request.stderr_path).read_text() if os.path.exists(r.request.stderr_path) else ""
    assert ("wrote no exit" in log) == (status == 1)


def test_an_exit_file_that_arrives_within_the_grace_wins_over_the_slurm_state(tmp_path, slurm, monkeypatch):
    monkeypatch.setattr(sb, "ENDED_GRACE_S", 60.0)
    backend = _backend(tmp_path, slurm)
    r = backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    slurm.running("101", state="COMPLETED")
    assert r.poll() is None
    _write_exit(r, 0)
    assert st(r) == 0 and "slurmState" not in r.placement


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_open_cancels_a_dead_controllers_jobs_and_not_a_live_ones(tmp_path, slurm, monkeypatch):
    import socket

    from trials.controller.process.groups import process_start_time

    tag = sb.job_tag(str(tmp_path / "job"))
    host = socket.gethostname()
    dead = f"trials:{host}:{_dead_pid()}:12345"
    live = f"trials:{host}:{os.getppid()}:{process_start_time(os.getppid())}"
    slurm.running("7", name=f"trials-{tag}-1", comment=dead)
    slurm.running("8", name=f"trials-{tag}-2", comment=live)
    slurm.running("9", name="trials-othertag-3", comment=dead)  # another job's
    slurm.running("10", name=f"trials-{tag}-4", comment=dead, state="COMPLETED")  # ended already
    said: list[str] = []

    def gone_after_cancel(job_ids=(), *, user=None, name=None):
        ids = set(job_ids)
        if ids and ("7", None) in slurm.cancels:
            return [r for r in slurm.rows if r.job_id in ids and r.job_id != "7"]
        return [r for r in slurm.rows if not ids or r.job_id in ids]

    monkeypatch.setattr(slurm, "jobs", gone_after_cancel)
    backend = sb.SlurmBackend(job_dir=str(tmp_path / "job"), slurm=slurm)  # type: ignore[arg-type]
    backend.open(said.append)
    assert slurm.cancels == [("7", None)]
    assert len(said) == 1 and "cancelled 1 Slurm job(s)" in said[0] and "7" in said[0]


def test_open_with_nothing_left_says_nothing(tmp_path, slurm):
    said: list[str] = []
    sb.SlurmBackend(job_dir=str(tmp_path / "job"), slurm=slurm).open(said.append)  # type: ignore[arg-type]
    assert said == [] and slurm.cancels == [] and slurm.queries[0][1]  # asked for the user's jobs


def test_an_sbatch_failure_raises_backend_error_from_start(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    slurm.fail_submit = "Invalid partition name specified"
    with pytest.raises(BackendError, match="Invalid partition"):
        backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    slurm.fail_submit = None  # the loop retries the attempt: a new start submits it
    r = backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    assert r.submission is not None and len(slurm.scripts) == 1


def test_a_missing_program_is_a_config_error_before_any_submission(tmp_path, slurm):
    from trials.errors import ConfigError

    backend = _backend(tmp_path, slurm)
    request = _request(tmp_path, "workerpool0-0", names=("workerpool0-0",))
    bad = ReplicaStart(**{**{f: getattr(request, f) for f in request.__dataclass_fields__},
                          "argv": ("/no/such/python", "train.py")})
    with pytest.raises(ConfigError):
        backend.start(bad)
    assert slurm.scripts == []


def test_close_cancels_what_still_runs(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    r = backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    done = backend.start(_request(tmp_path, "workerpool0-0", trial="2", names=("workerpool0-0",)))
    slurm.running("101")
    slurm.running("102", state="COMPLETED")
    _write_exit(done, 0)
    assert st(done) == 0 and r.poll() is None
    backend.close()
    assert slurm.cancels == [("101", None)]


def test_a_stop_of_a_replica_never_submitted_is_sigterm_and_nothing_is_submitted(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    chief = backend.start(_request(tmp_path, "workerpool0-0"))
    chief.begin_stop(5.0)
    assert st(chief) == 128 + signal.SIGTERM and slurm.scripts == [] and slurm.cancels == []


def test_stopping_every_replica_of_a_job_sends_each_trainer_one_term_through_its_signal_file(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    chief = backend.start(_request(tmp_path, "workerpool0-0"))
    worker = backend.start(_request(tmp_path, "workerpool1-0"))
    slurm.running("101", components=2)
    for r in (chief, worker):  # the supervisor's begin_stop: every live replica, one after the other
        r.begin_stop(50.0)
    sub_dir = backend.sub_dir(chief.submission.sub_id)
    assert ("101", "TERM") not in slurm.cancels
    for name in TWO:
        assert Path(lf.signal_path(sub_dir, name)).read_text().split()[1] == "TERM"
    chief.advance_stop(60.0, 10.0)  # after the grace: SIGKILL through its entry, as the TERM was
    assert Path(lf.signal_path(sub_dir, "workerpool0-0")).read_text().split()[1] == "KILL"


def test_a_squeue_failure_while_polling_reads_as_still_running(tmp_path, slurm, monkeypatch):
    backend = _backend(tmp_path, slurm)
    r = backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    slurm.running("101")
    assert r.poll() is None

    def busy(job_ids=(), *, user=None, name=None):
        raise BackendError("squeue did not answer in 30s")

    monkeypatch.setattr(slurm, "jobs", busy)
    assert r.poll() is None
    assert r.begin_stop(5.0) == 5.0  # a stop during the outage goes on too


def test_the_launch_file_is_readable_by_its_owner_only(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    r = backend.start(_request(tmp_path, "workerpool0-0", names=("workerpool0-0",)))
    path = Path(backend.sub_dir(r.submission.sub_id), "launch.json")
    assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)


def test_stopping_the_rest_of_a_job_started_since_its_last_state_read_signals_it_and_never_cancels_it(
        tmp_path, slurm, monkeypatch):
    """The state kept for the polls said PENDING; the job has started since (its chief even ended): the
    rest is stopped through the entries, not scancel-ed as "still queued" (seen once in CI: a two-pool
    trial SUCCEEDED, its Slurm job CANCELLED, its worker killed without its SIGTERM)."""
    monkeypatch.setattr(sb, "STATE_EVERY_S", 3600.0)  # the kept state is never refreshed by the polls
    backend = _backend(tmp_path, slurm)
    chief = backend.start(_request(tmp_path, "workerpool0-0"))
    worker = backend.start(_request(tmp_path, "workerpool1-0"))
    slurm.running("101", components=2, state="PENDING")
    assert chief.poll() is None and worker.poll() is None  # read PENDING, kept
    slurm.running("101", components=2)  # it starts; the chief ends (its success waits for the job's end)
    _write_exit(chief, 0)
    assert chief.poll() is None
    worker.begin_stop(10.0)
    assert slurm.cancels == []
    assert Path(lf.signal_path(backend.sub_dir(worker.submission.sub_id), "workerpool1-0")).read_text() in (
        "1 TERM", "2 TERM")  # (the chief's success claim, which scontrol saw running, stopped it first)


# ---------------------------------------------------------------- exit files against Slurm's word (issue 46)
def _one(tmp_path, slurm, trial="2"):
    backend = _backend(tmp_path, slurm)
    r = backend.start(_request(tmp_path, "workerpool0-0", trial=trial, names=("workerpool0-0",)))
    return backend, r


def test_a_forged_exit_file_of_a_running_one_task_job_is_ignored_and_the_trial_goes_on(tmp_path, slurm):
    backend, r = _one(tmp_path, slurm)
    slurm.running("101")
    _write_exit(r, 0, node="forged")  # another trial's trainer wrote it: same user, same shared folder
    for _ in range(3):
        assert r.poll() is None  # scontrol asked (at most every CLAIM_RECHECK_S, then less often): it runs
    assert 1 <= len(slurm.word_queries) <= 3
    # the job ends as its real entry says (it rewrites the file): that counts, the forged note is kept
    slurm.running("101", state="FAILED")
    slurm.codes["101"] = (3, 0)
    _write_exit(r, 3)
    assert st(r) == 3 and r.placement["node"] == "n1"  # where Slurm ran it, not what a file says
    assert r.placement["exitFile"] == "an exit file said status 0 while Slurm said the job was RUNNING (not counted)"
    assert set(slurm.word_queries) == {("101", backend.job_name("2"))}


def test_an_exit_file_that_disagrees_with_slurms_exit_code_loses_and_both_sides_are_kept(tmp_path, slurm):
    _backend_, r = _one(tmp_path, slurm)
    slurm.running("101", state="FAILED")
    slurm.codes["101"] = (1, 0)
    _write_exit(r, 0, node="forged", leftovers=["1 (x\x1b[2J)"])
    assert st(r) == 1
    said = r.placement["exitFile"]
    assert said == ("the exit file says status 0, Slurm (scontrol) says the job ended FAILED with exit code 1:0: "
                    "Slurm's status 1 counts")
    assert r.placement["slurmState"] == "FAILED" and r.placement["node"] == "n1" and r.poll().leftovers == ()
    assert f"trials: Slurm job 101: {said}" in Path(r.request.stderr_path).read_text()


@pytest.mark.parametrize(("state", "code", "status"), [("COMPLETED", (0, 0), 0), ("FAILED", (137, 0), 137),
                                                       ("CANCELLED", (143, 0), 143), ("FAILED", (0, 9), 137)])
def test_an_exit_file_that_agrees_with_slurm_counts_whole(tmp_path, slurm, state, code, status):
    _backend_, r = _one(tmp_path, slurm)
    slurm.running("101", state=state)
    slurm.codes["101"] = code
    _write_exit(r, status, oom=status == 137, leftovers=["7 (sleep)"])
    assert st(r) == status and "exitFile" not in r.placement
    assert r.poll().oom_killed is (status == 137) and r.poll().leftovers == ("7 (sleep)",)


def test_a_job_cancelled_before_it_ran_never_confirms_a_success(tmp_path, slurm):
    _backend_, r = _one(tmp_path, slurm)
    slurm.running("101", state="CANCELLED")  # ExitCode 0:0: no script ever ran
    _write_exit(r, 0)
    assert st(r) == 143 and "Slurm's status 143 counts" in r.placement["exitFile"]


def test_an_exit_file_of_a_job_slurm_no_longer_knows_is_not_counted(tmp_path, slurm):
    _backend_, r = _one(tmp_path, slurm)
    slurm.running("101")
    assert r.poll() is None
    slurm.rows = []  # gone from squeue and scontrol, and no accounting (sacct)
    _write_exit(r, 0)
    assert st(r) == 137  # as a VM that vanished: a worker restart
    assert "Slurm no longer knows the job" in r.placement["exitFile"]


def test_an_exit_file_of_a_renamed_job_is_not_counted(tmp_path, slurm):
    _backend_, r = _one(tmp_path, slurm)
    slurm.running("101", state="COMPLETED")
    slurm.words["101"] = "the job's name is not trials-x-2 (renamed: 'y JobState=COMPLETED'...)"
    _write_exit(r, 0)
    assert st(r) == 137 and "cannot be read (the job's name is not" in r.placement["exitFile"]


def test_scontrol_busy_when_the_job_ended_is_asked_again_at_the_next_poll(tmp_path, slurm):
    _backend_, r = _one(tmp_path, slurm)
    slurm.running("101", state="COMPLETED")
    _write_exit(r, 0)
    slurm.word_error = "scontrol did not answer in 30s"
    assert r.poll() is None
    slurm.word_error = None
    assert st(r) == 0


def test_scontrol_still_saying_running_when_squeue_said_ended_waits(tmp_path, slurm):
    _backend_, r = _one(tmp_path, slurm)
    slurm.running("101", state="COMPLETED")
    slurm.words["101"] = SlurmWord(state="COMPLETING", exit_code=0, exit_signal=0, nodes="n1", source="scontrol")
    _write_exit(r, 0)
    assert r.poll() is None
    del slurm.words["101"]
    assert st(r) == 0


def test_an_exit_file_of_a_job_still_queued_is_ignored_even_with_several_tasks(tmp_path, slurm):
    backend = _backend(tmp_path, slurm)
    chief = backend.start(_request(tmp_path, "workerpool0-0"))
    worker = backend.start(_request(tmp_path, "workerpool1-0"))
    slurm.running("101", components=2, state="PENDING")
    _write_exit(worker, 1)
    _write_exit(chief, 0)
    assert worker.poll() is None and chief.poll() is None
    sub_dir = backend.sub_dir(chief.submission.sub_id)
    assert not os.path.exists(lf.signal_path(sub_dir, "workerpool1-0"))  # a job not started: nothing to stop


def test_a_primarys_success_in_a_running_job_of_several_tasks_waits_for_the_job_and_stops_the_others(
        tmp_path, slurm):
    backend = _backend(tmp_path, slurm, grace_s=0.0)
    chief = backend.start(_request(tmp_path, "workerpool0-0"))
    worker = backend.start(_request(tmp_path, "workerpool1-0"))
    slurm.running("101", components=2)
    _write_exit(chief, 0, node="n1")
    assert chief.poll() is None  # a claim until Slurm says the job ended
    sub_dir = backend.sub_dir(chief.submission.sub_id)
    assert Path(lf.signal_path(sub_dir, "workerpool1-0")).read_text() == "1 TERM"  # as after a primary's success
    assert not os.path.exists(lf.signal_path(sub_dir, "workerpool0-0"))
    assert chief.poll() is None
    assert Path(lf.signal_path(sub_dir, "workerpool1-0")).read_text() == "2 KILL"  # after the grace (0 here)
    _write_exit(worker, 143)
    assert worker.poll() is None  # held too: the loop must see the primary's success with it
    slurm.running("101", components=2, state="FAILED")
    slurm.codes["101"] = (143, 0)  # srun: the highest of its tasks' statuses
    assert st(chief) == 0 and st(worker) == 143
    assert chief.placement["node"] == "n1" and "exitFile" not in chief.placement and slurm.cancels == []


@pytest.mark.parametrize(("state", "code", "claim", "status"), [
    ("COMPLETED", (0, 0), 1, 0),  # every task exited 0
    ("FAILED", (2, 0), 5, 2),  # above the highest of the tasks'
    ("FAILED", (5, 0), 2, 2),  # at most the highest: another task's 5
    ("NODE_FAIL", (0, 0), 0, 137),
])
def test_a_job_of_several_tasks_bounds_each_claim_by_slurms_exit_code(tmp_path, slurm, state, code, claim, status):
    backend = _backend(tmp_path, slurm)
    backend.start(_request(tmp_path, "workerpool0-0"))
    worker = backend.start(_request(tmp_path, "workerpool1-0"))
    slurm.running("101", components=2, state=state)
    slurm.codes["101"] = code
    _write_exit(worker, claim)
    assert st(worker) == status
    assert ("exitFile" in worker.placement) == (claim != status)


def test_others_that_do_not_carry_out_the_kill_after_a_primarys_success_are_cancelled_through_slurm(
        tmp_path, slurm, monkeypatch):
    monkeypatch.setattr(sb, "ENTRY_KILL_S", 0.0)
    backend = _backend(tmp_path, slurm, grace_s=0.0)
    chief = backend.start(_request(tmp_path, "workerpool0-0"))
    backend.start(_request(tmp_path, "workerpool1-0"))
    slurm.running("101", components=2)
    _write_exit(chief, 0)
    assert chief.poll() is None and slurm.cancels == []  # SIGTERM through the worker's entry first
    assert chief.poll() is None and slurm.cancels == [("101", "KILL"), ("101", None)]  # a hung node
    slurm.running("101", components=2, state="CANCELLED")
    slurm.codes["101"] = (0, 9)
    assert st(chief) == 0  # its success, within what Slurm says of the job (137: the highest of its tasks')


def test_an_exit_file_makes_slurms_word_asked_at_once_so_its_end_is_not_a_state_period_late(
        tmp_path, slurm, monkeypatch):
    import time

    monkeypatch.setattr(sb, "STATE_EVERY_S", 3600.0)  # without an exit file: never read again here
    _backend_, r = _one(tmp_path, slurm)
    slurm.running("101")
    assert r.poll() is None
    n = len(slurm.queries)
    slurm.running("101", state="COMPLETED")
    assert r.poll() is None and len(slurm.queries) == n  # nothing new to read for
    _write_exit(r, 0)
    end = time.monotonic() + 10
    while r.poll() is None and time.monotonic() < end:
        time.sleep(0.01)
    assert st(r) == 0 and len(slurm.queries) == n  # scontrol's word, asked at once, not squeue's next read
    assert len(slurm.word_queries) == 1

"""The Slurm backend: each trial attempt one Slurm job, each replica one of its tasks.

The loop starts a trial's replicas one by one (``start``); the backend holds them until all the trial's
replicas that are starting now are there, then submits them as one job: one worker pool as ``--ntasks``,
several as a heterogeneous job (one component per pool), ``machineSpec.acceleratorCount`` as
``--gpus-per-task``, ``--memory-limit`` as memory per task, ``scheduling.timeout`` as ``--time`` (past the
controller's own stop), ``--partition`` and ``--slurm-arg`` in every component, ``--no-requeue`` (a lost
node is a worker restart the loop decides, resubmitted, never Slurm's requeue hold), and only Slurm's own
variables in the job's environment (``commands.job_env``: nothing else of the controller's reaches a
node, no database credentials).

A replica's exit is what its entry wrote (:mod:`entry`) as far as Slurm agrees (:mod:`verdict`: a trainer
can write any trial's exit file, so a one-task job's file counts only once Slurm says the job ended, with
the exit code Slurm saw; a disagreement is kept in the attempt's ``exitFile`` and Slurm's word counts), or,
when the job ended without one (a node lost, the job cancelled outside), the job's Slurm state: lost or
preempted is a SIGKILL we did not send (137: the worker restarts within its budget).

Stopping (a cancel, an early stop, a timeout, a restart): SIGTERM through each replica's signal file, which
its entry sends to the trainer's process group (one SIGTERM, as on Vertex; ``scancel --signal`` reaches
every process of the step and cannot address one replica), SIGKILL the same way after the grace (Slurm's own
kill of a step takes the entry first and would orphan the trainer); a job still queued is ``scancel``-ed,
and so is one whose entries have not carried out a SIGKILL within ``ENTRY_KILL_S`` (a hung node: ``scancel
--signal=KILL``, then ``scancel``). Each job is named after the job (its storage and id) and the trial and
carries its controller in its comment; a new controller cancels (and waits out) the jobs of a dead one
before it starts any trial, and another controller's copy of a trial before its first submission of it, so a
trial never runs twice.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import trials
from trials import files, protocol
from trials.controller.backend.protocol import BackendError, ReplicaExit, ReplicaStart
from trials.controller.backend.stopping import StopSteps
from trials.controller.container.backend import controller_alive, replica_count
from trials.controller.process.echo import Echo
from trials.controller.process.groups import process_start_time
from trials.controller.process.spawn import resolve_program
from trials.controller.slurm import commands, verdict
from trials.controller.slurm import launchfile as lf
from trials.controller.slurm import script as sc
from trials.controller.slurm import states as slurm_states
from trials.errors import ConfigError
from trials.printable import printable

STATE_EVERY_S = 1.0  # squeue at most this often for all the jobs of the backend
CLAIM_RECHECK_S = 0.03  # an exit file is there and squeue last said its job runs: ask scontrol this soon (backing
# off to STATE_EVERY_S: half the time since the file was first seen), as the job ends ~50 ms after its entry's file
ENDED_GRACE_S = 3.0  # a job ended without its entry's exit file: wait this long for it (a shared folder's lag)
KILL_EVERY_S = 1.0
ENTRY_KILL_S = 5.0  # a SIGKILL the entries did not carry out in this long: scancel the job
LEFT_JOBS_WAIT_S = 90.0  # how long a new controller waits for a dead one's jobs to end after scancel
RENDEZVOUS_WAIT_S = 600.0  # how long an entry waits for the other replicas of its job to start
LAZY_SUBMIT_TRIES = 3


def job_key(storage_url: str, job_id: str) -> str:
    """What names a job's Slurm jobs on every host: its storage (password redacted) and id."""
    from trials.storage_url import redact

    return f"{redact(storage_url)}|{job_id}"


def job_tag(job_dir: str) -> str:
    return hashlib.sha256(os.path.abspath(job_dir).encode()).hexdigest()[:10]


class _Submission:
    """One Slurm job: the replicas it runs, in task order."""

    def __init__(self, sub_id: str, job_id: str, replicas: list[SlurmReplica]):
        self.sub_id = sub_id
        self.job_id = job_id
        self.replicas = replicas
        self.cancelled = False
        self.signals = 0
        self.first_kill = 0.0
        self.word: verdict.SlurmWord | None = None  # Slurm's word on its end, once read
        self.success_claimed_at: float | None = None  # its primary's entry wrote 0 while the job ran
        self.mates_killed_at: float | None = None
        self.submitted_mono = time.monotonic()


class SlurmReplica(StopSteps):
    """One replica attempt: a task of a Slurm job (submitted with the trial's other starting replicas)."""

    kill_every_s = KILL_EVERY_S

    def __init__(self, backend: SlurmBackend, request: ReplicaStart, *, gpus: int, port: int):
        self.backend = backend
        self.request = request
        self.name = request.name
        self.trial_id = request.env.get(protocol.ENV_TRIAL_ID, "x")
        self.gpus = gpus
        self.port = port
        self.argv = list(request.argv)
        self.placement: dict[str, str] = {}  # its Slurm job, then its node (in its exit record)
        self.submission: _Submission | None = None
        self._status: int | None = None
        self._exit: ReplicaExit | None = None
        self._ended_seen: float | None = None
        self._killed = False
        self._submit_failures = 0
        self._nodes = ""  # the job's nodes as squeue last said
        self._early_claim: tuple[int, str] | None = None  # an exit file seen while Slurm said the job ran
        self._claim_seen: float | None = None  # when (monotonic)
        self._asked_at = -1e9  # when scontrol was last asked about the job because of that file
        self._echoes: list[Echo] = []
        if request.echo is not None:
            for path in (request.stdout_path, request.stderr_path):
                try:
                    offset = os.path.getsize(path)
                except OSError:
                    offset = 0
                    with contextlib.suppress(OSError):
                        files.append_bytes(path, b"")
                echo = Echo(path, offset, f"[{request.label}] ", request.echo)
                echo.start()
                self._echoes.append(echo)

    @property
    def upper_dir(self) -> str | None:
        return None  # its writes go where its node's run them

    # ---------------------------------------------------------------- status
    def poll(self) -> ReplicaExit | None:
        if self._exit is None:
            self._poll()
        return self._exit

    def _poll(self) -> int | None:
        if self.submission is None:
            self._submit_lazily()
            if self.submission is None:
                return self._status
        sub = self.submission
        claim = lf.read_exit(lf.exit_path(self.backend.sub_dir(sub.sub_id), self.name))
        state, nodes = self.backend.state_of(sub.job_id)
        self._nodes = nodes or self._nodes
        n_tasks = len(sub.replicas)
        if state not in slurm_states.ENDED and state != "GONE":
            if claim is None:
                return None
            if verdict.judge_running(claim, state=state, replica=self.name, n_tasks=n_tasks,
                                     success_claimed=sub.success_claimed_at is not None):
                return self._finish(claim.status, wall=claim.wall, node=claim.node, oom=claim.oom,
                                    leftovers=claim.leftovers)  # its entry's word: Slurm keeps no task's end
            word = self._ask_soon(sub)
            if isinstance(word, verdict.SlurmWord):
                if word.state in slurm_states.ENDED:
                    return self._judge(claim, word.state, sub)
                state = word.state
            self._early_claim = self._early_claim or (claim.status, state)
            if n_tasks > 1 and self.name == verdict.PRIMARY and claim.status == 0 and verdict.started(state):
                self.backend.stop_mates(sub, self, time.monotonic())
            return None  # a one-task job that has not ended has not exited, whatever a file says
        if claim is not None:
            return self._judge(claim, state, sub)
        now = time.monotonic()
        if self._ended_seen is None:
            self._ended_seen = now
        if now - self._ended_seen < ENDED_GRACE_S:
            return None  # the exit file may lag behind the job's end on a shared folder
        return self._finish(self._lost_status(state, sub), wall=None, node="", oom=state == "OUT_OF_MEMORY",
                            leftovers=(), state=state)

    def _ask_soon(self, sub: _Submission) -> verdict.SlurmWord | str | None:
        """Slurm's word on the job now, when an exit file is there and squeue's state (read every
        ``STATE_EVERY_S``) said the job runs: asked ``CLAIM_RECHECK_S`` after the file, then less and less
        often (a forged file keeps costing at most one scontrol a ``STATE_EVERY_S``); None when not asked."""
        now = time.monotonic()
        self._claim_seen = self._claim_seen or now
        if now - self._asked_at < min(STATE_EVERY_S, max(CLAIM_RECHECK_S, (now - self._claim_seen) / 2)):
            return None
        self._asked_at = now
        try:
            return self.backend.slurm_word(sub, self.trial_id)
        except BackendError:
            return None

    def _judge(self, claim: lf.ExitNote, state: str, sub: _Submission) -> int | None:
        """The replica's end once squeue says its job ended: the exit file as far as Slurm agrees."""
        try:
            word = self.backend.slurm_word(sub, self.trial_id)
        except BackendError:
            return None  # slurmctld too busy: asked again at the next poll
        if isinstance(word, verdict.SlurmWord) and word.state not in slurm_states.ENDED:
            return None  # scontrol does not say it ended yet (squeue's state is up to a second old)
        found = verdict.judge_ended(claim, word if isinstance(word, verdict.SlurmWord) else None,
                                    n_tasks=len(sub.replicas))
        conflict = found.conflict
        if isinstance(word, str):
            conflict = f"the exit file says status {claim.status}, and Slurm's word on the job cannot be read " \
                       f"({word}): the file is not counted"
        if self._early_claim is not None and self._early_claim[0] != (found.status if found.counted else -1):
            early = f"an exit file said status {self._early_claim[0]} while Slurm said the job was " \
                    f"{self._early_claim[1]} (not counted)"
            conflict = f"{early}; {conflict}" if conflict else early
        if conflict:
            self.placement["exitFile"] = conflict
            self._note(f"Slurm job {sub.job_id}: {conflict}")
        ended = word.state if isinstance(word, verdict.SlurmWord) else state
        if found.counted and found.status is not None:
            node = word.nodes if isinstance(word, verdict.SlurmWord) and len(sub.replicas) == 1 else claim.node
            return self._finish(found.status, wall=claim.wall, node=node or claim.node,
                                oom=claim.oom and found.status == 128 + signal.SIGKILL, leftovers=claim.leftovers)
        # no word from Slurm (it forgot the job, or its lines were tampered with): as a VM that vanished
        status = found.status if found.status is not None else 128 + signal.SIGKILL
        return self._finish(status, wall=None, node=word.nodes if isinstance(word, verdict.SlurmWord) else "",
                            oom=ended == "OUT_OF_MEMORY", leftovers=(), state=ended)

    def _lost_status(self, state: str, sub: _Submission) -> int:
        """The status of a replica whose job ended without its entry's word."""
        if state in slurm_states.LOST or self._killed or state in ("OUT_OF_MEMORY", "GONE"):
            return 128 + signal.SIGKILL  # a lost node or a kill: as a VM that vanished
        if state in ("CANCELLED", "TIMEOUT", "DEADLINE"):
            return 128 + signal.SIGTERM  # Slurm's own stop: SIGTERM first
        self._note(f"Slurm job {sub.job_id} ended {state} and the replica's entry wrote no exit; Slurm's "
                   f"log of the job: {self.backend.sub_dir(sub.sub_id)}/slurm-{sub.job_id}.out")
        return 1

    def _finish(self, status: int, *, wall: float | None, node: str, oom: bool,
                leftovers: Sequence[str], state: str = "") -> int:
        self._status = status
        now_mono, now_wall = time.monotonic(), time.time()
        exited_mono = now_mono - max(0.0, now_wall - wall) if wall is not None else now_mono
        if self.submission is not None:  # (a file's time: never before the job was submitted)
            exited_mono = max(exited_mono, self.submission.submitted_mono)
        if node or self._nodes:
            self.placement["node"] = printable(node or self._nodes)
        if state:
            self.placement["slurmState"] = state
        lost = (state in slurm_states.LOST or state == "GONE") and not self._killed  # its end was not seen
        self._exit = ReplicaExit.of_status(status, exited_mono=exited_mono, killed=self._killed, lost=lost,
                                           oom=oom and not self._killed or state == "OUT_OF_MEMORY",
                                           leftovers=tuple(printable(x) for x in leftovers), placement=self.placement)
        return status

    def _note(self, text: str) -> None:
        """A line of the controller's in the replica's stderr log (read into the trial's failure)."""
        with contextlib.suppress(OSError):
            files.append_bytes(self.request.stderr_path, f"trials: {text}\n".encode("utf-8", "replace"))

    def _submit_lazily(self) -> None:
        try:
            self.backend.submit_pending(self.trial_id)
        except BackendError as err:
            self._submit_failures += 1
            if self._submit_failures >= LAZY_SUBMIT_TRIES:
                for r in self.backend.drop_pending(self.trial_id):
                    r._note(f"the replica could not be submitted to Slurm: {err}")
                    r._finish(1, wall=None, node="", oom=False, leftovers=())

    # ---------------------------------------------------------------- stopping
    def deliver_term(self) -> None:
        if self.submission is None and self._status is None:
            self.backend.drop_pending(self.trial_id, only=self)  # never submitted: nothing ran
            self._finish(128 + signal.SIGTERM, wall=None, node="", oom=False, leftovers=())
        else:
            super().deliver_term()

    def send_signal_group(self, sig: int) -> None:
        if self._status is not None or self.submission is None:
            return
        self._killed = self._killed or sig == signal.SIGKILL
        with contextlib.suppress(BackendError):  # Slurm too slow to answer: the next stop step again
            self.backend.signal(self.submission, self, sig)

    # ---------------------------------------------------------------- records
    def record(self) -> dict[str, Any] | None:
        rec: dict[str, Any] = {"name": self.name, "runtime": "slurm"}
        if self.submission is not None:
            rec.update(slurm_job=self.submission.job_id, submission=self.submission.sub_id)
        return rec

    def close(self) -> None:
        for echo in self._echoes:
            echo.finishing.set()
        for echo in self._echoes:
            echo.join(5.0)
        self._echoes = []


class SlurmBackend:
    """Replicas of one job as tasks of Slurm jobs.

    Args:
        job_dir: the job's folder (on the cluster's shared path; its ``slurm/`` folder holds the launch
            and exit files).
        job_key: what names the job across hosts (its storage and id): the Slurm jobs' names carry its hash,
            so a worker that takes over a trial finds the copy another host's dead worker left (default:
            the job folder).
        accelerators: GPUs per replica name (``machineSpec.acceleratorCount``; absent: none).
        partition: ``--partition``; ``extra``: more sbatch options for every component (``--slurm-arg``).
        timeout_s, grace_s: the trial's ``scheduling.timeout`` and the stop grace (``--time`` is past both).
        environ: the controller's environment (Slurm's commands run in it; nodes never get it).
    """

    def __init__(self, *, job_dir: str, job_key: str | None = None, accelerators: Mapping[str, int] | None = None,
                 partition: str | None = None,
                 extra: Sequence[str] = (), timeout_s: float | None = None, grace_s: float = 10.0,
                 environ: Mapping[str, str] | None = None, slurm: commands.Slurm | None = None):
        self.job_dir = os.path.abspath(job_dir)
        self.accelerators = dict(accelerators or {})
        self.partition = partition
        self.extra = tuple(extra)
        self.time_limit_min = sc.time_limit_minutes(timeout_s, grace_s)
        self.grace_s = grace_s
        self.environ = dict(os.environ if environ is None else environ)
        self.slurm = slurm or commands.Slurm(self.environ)
        self.tag = job_tag(job_key or self.job_dir)
        self._checked: set[str] = set()  # trials whose earlier copies (another controller's) were looked for
        self.me = f"{socket.gethostname()}:{os.getpid()}:{process_start_time(os.getpid()) or 0}"
        self._pending: dict[str, list[SlurmReplica]] = {}
        self._by_trial: dict[str, list[SlurmReplica]] = {}
        self._subs: dict[str, _Submission] = {}
        self._states: dict[str, tuple[str, str]] = {}
        self._states_at = -1e9
        self._n = 0

    def sub_dir(self, sub_id: str) -> str:
        return lf.submission_dir(self.job_dir, sub_id)

    def job_name(self, trial_id: str) -> str:
        return f"trials-{self.tag}-{trial_id}"

    # ---------------------------------------------------------------- the seam
    def open(self, say: Callable[[str], None]) -> None:
        os.makedirs(lf.slurm_dir(self.job_dir), exist_ok=True)
        left = self.left_jobs()
        if left:
            for job_id in left:
                self.slurm.cancel(job_id)
            self._wait_gone(left)
            say(f"cancelled {len(left)} Slurm job(s) an earlier controller of this job left: "
                f"{', '.join(left[:5])}")

    def start(self, request: ReplicaStart) -> SlurmReplica:
        argv = list(request.argv)
        if not argv:
            raise ConfigError(f"replica {request.name}: no command to run (a pool without one runs its image's "
                              f"ENTRYPOINT: --runtime podman or docker)")
        argv[0] = resolve_program(request.name, argv[0], request.cwd, request.env)  # ConfigError as on the host
        port = _port_of(request)
        replica = SlurmReplica(self, request, gpus=self.accelerators.get(request.name, 0), port=port)
        replica.argv = argv
        trial = replica.trial_id
        pending = self._pending.setdefault(trial, [])
        pending[:] = [r for r in pending if r.name != request.name]  # a retried start replaces its failure
        pending.append(replica)
        running = [r for r in self._by_trial.get(trial, ())
                   if r.submission is not None and r._status is None and r.stop_requested_at is None
                   and r.name not in {p.name for p in pending}]
        if len(pending) + len(running) >= replica_count(request.env):
            try:
                self.submit_pending(trial)
            except BackendError:
                pending.remove(replica)
                replica.close()
                raise
        return replica

    def check_memory(self) -> None:
        """Each entry enforces its replica's limit on its node (its exit says so)."""

    def close(self) -> None:
        for sub in self._subs.values():
            if any(r._status is None for r in sub.replicas) and not sub.cancelled:
                with contextlib.suppress(BackendError):
                    self.slurm.cancel(sub.job_id)
        self._pending.clear()

    # ---------------------------------------------------------------- submissions
    def submit_pending(self, trial_id: str) -> None:
        """Submit the trial's held replicas as one Slurm job (nothing held: nothing done)."""
        pending = self._pending.get(trial_id)
        if not pending:
            return
        if trial_id not in self._checked:
            self._cancel_other_copies(trial_id)
            self._checked.add(trial_id)
        self._n += 1
        attempt = max(int(r.request.env.get(protocol.ENV_ATTEMPT, "0") or 0) for r in pending)
        sub_id = f"t{trial_id}-a{attempt}-{os.getpid()}-{self._n}-{int(time.time() * 1000) % 10**9}"
        sub_dir = self.sub_dir(sub_id)
        os.makedirs(sub_dir, exist_ok=True)
        order = sorted(pending, key=lambda r: _rank(r.name))
        rdv = lf.rendezvous_dir(self.job_dir, trial_id)
        os.makedirs(rdv, exist_ok=True)
        ranks = _ranks(order[0].request.env) or [r.name for r in order]
        launch = lf.launch_record(
            submission=sub_id, trial_id=trial_id, trial_dir=order[0].request.trial_dir, rendezvous=rdv,
            ranks=ranks, wait_s=RENDEZVOUS_WAIT_S,
            replicas=[{"name": r.name, "argv": r.argv, "env": dict(r.request.env),
                       "cwd": r.request.cwd, "stdout": r.request.stdout_path, "stderr": r.request.stderr_path,
                       "exit": lf.exit_path(sub_dir, r.name), "signal": lf.signal_path(sub_dir, r.name),
                       "port": r.port, "gpus": r.gpus, "memory_limit_mb": r.request.memory_limit_mb}
                      for r in order])
        launch_file = os.path.join(sub_dir, "launch.json")
        lf.write_json(launch_file, launch, mode=0o600)  # every replica's environment: the user's only
        mem = order[0].request.memory_limit_mb
        submission = sc.Submission(
            job_name=self.job_name(trial_id), comment=f"trials:{self.me}", output=os.path.join(sub_dir, "slurm-%j.out"),
            components=sc.components([_rank(r.name)[0] for r in order], [r.gpus for r in order], mem),
            launch_file=launch_file, python=sys.executable, package_root=package_root(),
            srun=self.slurm.paths["srun"], partition=self.partition, time_limit_min=self.time_limit_min,
            extra=self.extra)
        job_id = self.slurm.submit(sc.batch_script(submission), ["--chdir", sub_dir])
        sub = _Submission(sub_id, job_id, order)
        self._subs[job_id] = sub
        del self._pending[trial_id]
        mine = self._by_trial.setdefault(trial_id, [])
        mine[:] = [r for r in mine if r._status is None and r.name not in {o.name for o in order}] + order
        for r in order:
            r.submission = sub
            r.placement["slurmJobId"] = job_id

    def drop_pending(self, trial_id: str, only: SlurmReplica | None = None) -> list[SlurmReplica]:
        """Forget held replicas (all of the trial's, or ``only``); returns those dropped."""
        pending = self._pending.get(trial_id, [])
        dropped = [r for r in pending if only is None or r is only]
        pending[:] = [r for r in pending if r not in dropped]
        if not pending:
            self._pending.pop(trial_id, None)
        return dropped

    def signal(self, sub: _Submission, replica: SlurmReplica, sig: int) -> None:
        """Signal one replica through its entry's signal file (the entry sends it to its trainer's process
        group: one SIGTERM, as on Vertex; ``scancel --signal`` would reach every process of the step and
        cannot address one replica of several). A job still queued is cancelled (``scancel``); a SIGKILL
        the entries have not carried out within ``ENTRY_KILL_S`` (a hung node) is Slurm's own."""
        kill = sig == signal.SIGKILL
        whole = all(r._status is not None or r.stop_requested_at is not None for r in sub.replicas)
        # (a state read now: the one kept for the polls may be from before the job started, and a
        # running job cancelled as "queued" kills its replicas without their SIGTERM and grace)
        if whole and not sub.cancelled and self.state_of(sub.job_id, fresh=True)[0] in slurm_states.QUEUED:
            self.slurm.cancel(sub.job_id)  # nothing ran yet: it never will
            sub.cancelled = True
            self._states_at = -1e9  # read its state again at the next poll
            return
        if kill and whole and not sub.cancelled:
            now = time.monotonic()
            sub.first_kill = sub.first_kill or now
            if now - sub.first_kill >= ENTRY_KILL_S:
                self.slurm.cancel(sub.job_id, "KILL")
                self.slurm.cancel(sub.job_id)
                sub.cancelled = True
                self._states_at = -1e9
                return
        sub.signals += 1
        files.write_atomic(lf.signal_path(self.sub_dir(sub.sub_id), replica.name),
                           f"{sub.signals} {'KILL' if kill else 'TERM'}".encode("ascii"))

    def slurm_word(self, sub: _Submission, trial_id: str) -> verdict.SlurmWord | str | None:
        """Slurm's word on a job squeue says ended (read once: an ended job's word does not change)."""
        if sub.word is not None:
            return sub.word
        word = self.slurm.job_word(sub.job_id, self.job_name(trial_id))
        if isinstance(word, verdict.SlurmWord) and word.state in slurm_states.ENDED:
            sub.word = word
        return word

    def stop_mates(self, sub: _Submission, primary: SlurmReplica, now: float) -> None:
        """The primary's entry wrote 0 while its job runs: that claim waits for the job's end (Slurm's word),
        and the job's other replicas are stopped as the loop stops them after a primary's success (SIGTERM
        through their entries, SIGKILL after the grace), which ends the job. A forged claim does no more
        (a process of the same user can signal the job's steps itself)."""
        claimed_at = sub.success_claimed_at
        first = claimed_at is None
        if claimed_at is None:
            claimed_at = sub.success_claimed_at = now
        kill = not first and now - claimed_at >= self.grace_s and (
            sub.mates_killed_at is None or now - sub.mates_killed_at >= KILL_EVERY_S)
        if not (first or kill):
            return
        if kill:
            sub.mates_killed_at = now
        mates = [r for r in sub.replicas if r is not primary and r._status is None]
        hung = [r for r in mates if lf.read_exit(lf.exit_path(self.sub_dir(sub.sub_id), r.name)) is None]
        if kill and hung and not sub.cancelled and now - claimed_at >= self.grace_s + ENTRY_KILL_S:
            with contextlib.suppress(BackendError):  # entries that do not carry out a SIGKILL: Slurm's own
                self.slurm.cancel(sub.job_id, "KILL")
                self.slurm.cancel(sub.job_id)
                sub.cancelled = True
                self._states_at = -1e9
            return
        for r in mates:
            with contextlib.suppress(BackendError, OSError):
                self.signal(sub, r, signal.SIGKILL if kill else signal.SIGTERM)

    def state_of(self, job_id: str, *, fresh: bool = False) -> tuple[str, str]:
        """A job's Slurm state and nodes (``GONE``: Slurm no longer knows it), read for all jobs at once
        (at most every ``STATE_EVERY_S``; ``fresh``: now)."""
        now = time.monotonic()
        if fresh or now - self._states_at >= STATE_EVERY_S:
            live = [j for j, s in self._subs.items() if any(r._status is None for r in s.replicas)]
            try:
                self._states = commands.job_state(self.slurm.jobs(live)) if live else {}
            except BackendError:  # slurmctld restarting or too busy: what it said last, asked again soon
                self._states_at = now
                return self._states.get(job_id, ("UNKNOWN", ""))
            self._states_at = now
        return self._states.get(job_id, ("GONE", ""))

    def left_jobs(self) -> list[str]:
        """This job's Slurm jobs that a controller that is gone left queued or running."""
        rows = self.slurm.jobs(user=getpass.getuser())
        out = []
        for row in rows:
            if not row.name.startswith(f"trials-{self.tag}-") or row.state in slurm_states.ENDED:
                continue
            owner = row.comment.removeprefix("trials:")
            if owner != self.me and not controller_alive(owner) and row.job_id not in out:
                out.append(row.job_id)
        return out

    def _cancel_other_copies(self, trial_id: str) -> None:
        """Before this controller's first submission of a trial: a copy another controller left queued or
        running (a dead worker whose trial this one took over, on any host) is cancelled and waited out."""
        name = self.job_name(trial_id)
        rows = [r for r in self.slurm.jobs(user=getpass.getuser(), name=name)
                if r.name == name and r.state not in slurm_states.ENDED and r.comment != f"trials:{self.me}"]
        others = list(dict.fromkeys(r.job_id for r in rows))
        for job_id in others:
            self.slurm.cancel(job_id)
        if others:
            self._wait_gone(others)

    def _wait_gone(self, job_ids: Sequence[str]) -> None:
        deadline = time.monotonic() + LEFT_JOBS_WAIT_S
        while time.monotonic() < deadline:
            states = commands.job_state(self.slurm.jobs(job_ids))
            if all(states.get(j, ("GONE", ""))[0] in slurm_states.ENDED | {"GONE"} for j in job_ids):
                return
            time.sleep(0.5)
        raise BackendError(f"Slurm job(s) {', '.join(job_ids)} an earlier controller left did not end "
                           f"{LEFT_JOBS_WAIT_S:g}s after scancel; cancel them (scancel) and resume")


def cancel_left_jobs(*, job_dir: str, job_key: str) -> list[str]:
    """``scancel`` the Slurm jobs of a job whose controllers are gone (``trials cancel`` of a job whose
    controller died); returns their ids. Not waited for: the next controller waits them out."""
    backend = SlurmBackend(job_dir=job_dir, job_key=job_key)
    left = backend.left_jobs()
    for job_id in left:
        backend.slurm.cancel(job_id)
    return left


def _rank(name: str) -> tuple[int, int]:
    """``workerpool1-0`` -> (1, 0): the order of replicas in the trial's CLUSTER_SPEC."""
    head, _, index = name.rpartition("-")
    pool = head.removeprefix("workerpool")
    return (int(pool) if pool.isdigit() else 99, int(index) if index.isdigit() else 0)


def _ranks(env: Mapping[str, str]) -> list[str]:
    """The trial's replica names in rank order, from its CLUSTER_SPEC."""
    try:
        cluster = json.loads(env.get(protocol.ENV_CLUSTER_SPEC, "{}")).get("cluster", {})
        names = [protocol.replica_name(int(role[len("workerpool"):]), j)
                 for role, entries in cluster.items() if role.startswith("workerpool")
                 for j in range(len(entries))]
    except (ValueError, AttributeError, TypeError):
        return []
    return sorted(names, key=_rank)


def _port_of(request: ReplicaStart) -> int:
    """The port the launcher picked for the replica (in its CLUSTER_SPEC), else Vertex's 2222."""
    try:
        cluster = json.loads(request.env.get(protocol.ENV_CLUSTER_SPEC, "{}"))
        task = cluster["task"]
        address = cluster["cluster"][task["type"]][int(task["index"])]
        return int(str(address).rsplit(":", 1)[1])
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return protocol.REPLICA_PORT


def package_root() -> str:
    """The folder holding the ``trials`` package (first on the entry's sys.path on the nodes)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(trials.__file__)))

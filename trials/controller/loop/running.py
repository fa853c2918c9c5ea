"""One running trial's bookkeeping (replicas, attempts, restarts, why it stops) and the pure decision
of what a replica's exit means for it.

Each exit is classified exactly once, from the one poll of the loop tick that saw it
(:meth:`RunningTrial.new_exits`); a trial is finished only when every replica's exit has been
classified and no restart is pending (:meth:`RunningTrial.all_exits_classified`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trials.controller.backend.protocol import ReplicaExit, ReplicaHandle
from trials.controller.policy import exits
from trials.controller.trial import launch
from trials.controller.trial.metrics_reader import TrialMetricsReader
from trials.records import LiveChunks, StopReason
from trials.study.store import Claimed
from trials.timefmt import rfc3339, wall_after


class ExitAction(str, enum.Enum):
    RECORD = "record"  # nothing to decide: the trial is stopping, or a restart is already pending
    SUCCESS = "success"  # the primary replica succeeded: stop the others, the trial is done
    RESTART = "restart"  # restart the replica (same trial id, same env)
    RETRY_JOB = "retry_job"  # a transient exit: every replica of the trial starts again
    FAIL = "fail"  # the trial fails with ``message``
    WAIT = "wait"  # a non-primary replica finished: wait for the primary


@dataclass(frozen=True, slots=True, kw_only=True)
class ExitDecision:
    action: ExitAction
    message: str | None = None  # the trial's failure, or the restarted attempt's reason
    detail: tuple[str, ...] = ()  # the exception and the traceback's last lines (local view)
    injected: bool = False  # a chaos-mode restart (does not use up the crash budget)
    budget: str = ""  # the retry budget a restart uses ("worker restart 2 of 5", "job retry 1 of 3")


def decide_exit(
    status: int,
    *,
    replica: str,
    is_primary: bool,
    oom_killed: bool,
    told_to_stop: bool,
    trial_stop: StopReason | None,
    restart_pending: bool,
    n_crash_restarts: int,
    stderr_tail: Sequence[str] = (),
    n_job_retries: int = 0,
) -> ExitDecision:
    """What one replica's exit means for its trial (pure).

    Args:
        status: Vertex-style exit status (128 + signal).
        told_to_stop: the loop had sent this replica SIGTERM (a chaos injection when the trial
            itself is not stopping).
        trial_stop: why the whole trial is stopping, or None while it runs.
        restart_pending: the replica was stopped to be restarted (restartJobOnWorkerRestart).
        n_crash_restarts: restarts of this replica after its own crashes so far (injections and
            restarts caused by other replicas excluded).
        n_job_retries: retries of the trial's whole CustomJob after transient exits so far.
    """
    if trial_stop is not None or restart_pending:
        return ExitDecision(action=ExitAction.RECORD)
    injected = told_to_stop
    decision = exits.classify_exit(status, replica=replica, oom_killed=oom_killed,
                                    restarts_so_far=0 if injected else n_crash_restarts,
                                    stderr_tail=stderr_tail, job_retries_so_far=n_job_retries)
    kind = decision.kind
    if injected and (kind is exits.ExitKind.RESTARTABLE or (kind is exits.ExitKind.SUCCEEDED and not is_primary)):
        return ExitDecision(action=ExitAction.RESTART, injected=True)  # a maintenance restart
    if kind is exits.ExitKind.SUCCEEDED:
        return ExitDecision(action=ExitAction.SUCCESS if is_primary else ExitAction.WAIT)
    if kind is exits.ExitKind.RESTARTABLE:
        return ExitDecision(action=ExitAction.RESTART, message=exits.exit_message(replica, status),
                            detail=decision.detail, budget=decision.budget)
    if kind is exits.ExitKind.RETRY_JOB:
        return ExitDecision(action=ExitAction.RETRY_JOB, message=exits.exit_message(replica, status),
                            detail=decision.detail, budget=decision.budget)
    return ExitDecision(action=ExitAction.FAIL, message=decision.message, detail=decision.detail)


@dataclass(eq=False)
class RunningTrial:
    """A claimed trial while its replicas run: what the loop knows and has decided about it."""

    claimed: Claimed
    paths: launch.TrialPaths
    launches: list[launch.ReplicaLaunch]
    reader: TrialMetricsReader
    start_wall: float
    start_mono: float
    replicas: dict[str, ReplicaHandle] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    injected_by: dict[str, int] = field(default_factory=dict)  # replica -> injected restarts
    # replica -> restarts it did not cause (restartJobOnWorkerRestart, job retries)
    collateral_by: dict[str, int] = field(default_factory=dict)
    job_retries: int = 0  # the trial's CustomJob retried whole (transient exits, worker restarts used up)
    # replica -> its own crash restarts before the job's last retry (a retry gives a fresh budget)
    crash_floor: dict[str, int] = field(default_factory=dict)
    running_attempt: dict[str, int] = field(default_factory=dict)  # replica -> its TRIALS_ATTEMPT now
    exited: dict[str, int] = field(default_factory=dict)  # replica -> classified exit status
    restart_at: dict[str, float] = field(default_factory=dict)  # replicas stopping to be restarted
    attempts: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: StopReason | None = None
    failure: str | None = None
    failure_detail: tuple[str, ...] = ()  # the exception and traceback tail, for the local view
    stopped_early: bool = False
    stopped_by_study: bool = False  # studyStoppingConfig.shouldStopAsap stopped it (stopped early, whatever its length)
    stop_detail: str = ""
    predicted: tuple[float, float] | None = None  # convex rule: (x, oriented value)
    stored: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> metrics in the storage
    live_elapsed: dict[str, float] = field(default_factory=dict)  # step -> elapsed s, for describe
    # step -> the metrics its intermediate value cannot hold (other metrics, a non-finite primary)
    live_metrics: dict[str, dict[str, float | str]] = field(default_factory=dict)
    live_chunks: LiveChunks = field(default_factory=LiveChunks)  # which attribute holds each step's entries
    warned_tags: bool = False
    injected: int = 0
    next_injection: float = math.inf
    next_metrics_poll: float = 0.0
    metrics_read_at: float = 0.0  # (monotonic) its last metrics read that took what the file held
    progress_n: int = 0  # steps stored when its progress was last told (runner._tell_progress)
    progress_at: float = 0.0  # when (monotonic)
    devices: tuple[tuple[str, ...], ...] | None = None  # per replica, primary first
    pid_records: list[dict[str, Any]] = field(default_factory=list)
    ended_mono: float | None = None  # when its last replica exited (monotonic; the trial's end)

    @property
    def trial_id(self) -> str:
        return self.claimed.trial_id

    @property
    def stopping(self) -> bool:
        return self.stop_reason is not None

    @property
    def lost(self) -> bool:
        return self.stop_reason is StopReason.LOST

    def launch_of(self, name: str) -> launch.ReplicaLaunch:
        return next(lau for lau in self.launches if lau.name == name)

    def new_exits(self) -> dict[str, ReplicaExit]:
        """THE poll of a tick: replicas whose exit is not classified yet and that have exited now."""
        out = {}
        for name, replica in self.replicas.items():
            if name in self.exited:
                continue
            ended = replica.poll()
            if ended is not None:
                out[name] = ended
        return out

    def all_exits_classified(self) -> bool:
        """Every replica's exit was seen by a snapshot and classified; no restart is pending."""
        return not self.restart_at and all(name in self.exited for name in self.replicas)

    def wall_at(self, mono: float) -> float:
        """The wall time of a moment of this run: its start's wall time plus the monotonic time since."""
        return wall_after(self.start_wall, self.start_mono, mono)

    def record_exit(self, name: str, ended: ReplicaExit) -> dict[str, Any]:
        """Book an exit (once): the replica's attempt ended as ``ended`` says (its status, when, an OOM kill)."""
        mono = ended.exited_mono
        self.exited[name] = ended.status
        self.ended_mono = mono if self.ended_mono is None else max(self.ended_mono, mono)
        entry = {"replica": name, "attempt": self.running_attempt.get(name, 0), "exitStatus": ended.status,
                 "time": rfc3339(self.wall_at(mono)), "oomKilled": ended.oom_killed}
        self.attempts.append(entry)
        return entry

    def _own_restarts(self, name: str) -> int:
        return (self.restarts.get(name, 0) - self.injected_by.get(name, 0)
                - self.collateral_by.get(name, 0))

    def n_crash_restarts(self, name: str) -> int:
        """Restarts of ``name`` after its own crashes since the job's last retry (its worker budget)."""
        return self._own_restarts(name) - self.crash_floor.get(name, 0)

    def retry_job(self, names: Sequence[str], now: float) -> None:
        """The trial's CustomJob runs again: every replica restarts with a fresh worker budget."""
        self.job_retries += 1
        self.schedule_restart(names, now, injected=False, cause="")
        for name in names:
            self.crash_floor[name] = self._own_restarts(name)

    def schedule_restart(self, names: Sequence[str], now: float, *, injected: bool,
                         cause: str | None = None) -> None:
        """These replicas restart once their groups are gone (each restart counted once).

        ``cause``: the replica whose exit caused the restarts; the others' restarts are collateral
        and do not use up their own budget (a job retry passes ``""``: none is the cause).
        """
        for name in names:
            if name in self.restart_at:
                continue
            self.restarts[name] = self.restarts.get(name, 0) + 1
            if injected:
                self.injected_by[name] = self.injected_by.get(name, 0) + 1
            elif cause is not None and name != cause:
                self.collateral_by[name] = self.collateral_by.get(name, 0) + 1
            self.restart_at[name] = now

    def injectable(self) -> list[str]:
        """Replicas a chaos injection may stop: running, not told to stop, no restart pending."""
        return [lau.name for lau in self.launches
                if lau.name in self.replicas and lau.name not in self.exited
                and lau.name not in self.restart_at
                and self.replicas[lau.name].stop_requested_at is None
                and self.replicas[lau.name].poll() is None]

"""One probe run of `trials check` through the job loop: the replica backend it watches the run
through (:class:`ProbeBackend`) and the trial policy that interrupts and time-boxes it
(:class:`ProbePolicy`). The loop starts, stops and restarts the replicas; these two only add what
the check needs to see, and say when.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from trials import files, protocol
from trials.controller.backend.protocol import BackendError, ReplicaBackend, ReplicaHandle, ReplicaStart
from trials.controller.check import hold, scorecard
from trials.controller.check.identity_audit import AUDIT_ENV, SITECUSTOMIZE
from trials.controller.check.seen import Snapshot, changed, read_reports, snapshot, upper_writes, walk
from trials.controller.loop.launcher import write_through
from trials.controller.loop.running import ExitAction, ExitDecision, RunningTrial
from trials.controller.loop.trial_policy import PassAction
from trials.errors import ConfigError

HOLD_EXTRA_S = 5.0  # the other replicas may run the primary's run time again, and this, after it exits
AUDIT_DIR = "audit"  # in the trial folder: a sandboxed replica sees it


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One replica attempt as the probe saw it start."""

    name: str
    number: int  # its TRIALS_ATTEMPT
    env: Mapping[str, str]  # as started (with what the check adds)
    trial_dir: str
    handle: ReplicaHandle
    start_mono: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Hold:
    """Hold the primary's first attempt after ``after`` reports of ``tag`` (:mod:`~trials.controller.check.hold`),
    at most ``max_s`` seconds."""

    tag: str
    after: int
    max_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Left:
    """What an attempt of the primary left when the next one started (before its fresh metric file)."""

    reports: list[scorecard.SeenReport]
    checkpoints: list[str]


class ProbeBackend:
    """The job loop's replica backend for one probe run: ``inner`` starts the replicas.

    Each start gets what the check adds: the identity audit (a ``sitecustomize`` on PYTHONPATH) and,
    for a non-primary replica, its own output folders, so that what it saves is told apart from the
    primary's. A restarted replica starts with a fresh metric file, as on a new VM (the last one is
    moved aside to ``<file>.attempt-<n>``). Every attempt is kept, with what the primary left before
    each restart and snapshots of the working folder (its writes, when there is no sandbox). With
    ``hold``, the primary's first attempt waits after that many reports until :meth:`release`.

    Args:
        inner: the backend that runs the replicas (the host's).
        primary: the primary replica's name.
        outputs_root: where the non-primary replicas' own output folders go (``outputs-<name>/``).
        cwd: the working folder (snapshotted to see writes there); ``exclude``: a folder of it not to look at.
        clock: monotonic time, the loop's.
        hold: where the primary's first attempt waits for the probe's SIGTERM (None: nowhere).
    """

    def __init__(self, inner: ReplicaBackend, *, primary: str, outputs_root: str, cwd: str, exclude: str,
                 clock: Callable[[], float] = time.monotonic, hold: Hold | None = None):
        self.inner = inner
        self.primary = primary
        self.outputs_root = outputs_root
        self.cwd = cwd
        self.exclude = exclude
        self.clock = clock
        self.hold = hold
        self.release_file = ""  # the hold's, once the primary's first attempt got it
        self.attempts: list[Attempt] = []
        self.left: dict[int, Left] = {}  # the primary's attempt number -> what the attempt before it left
        self.start_error: OSError | ConfigError | BackendError | None = None  # the last start, if it failed
        self._snapshots: list[Snapshot] = []  # before the first start and at each restart
        self._points: set[int] = set()

    def open(self, say: Callable[[str], None]) -> None:
        self.inner.open(say)

    def check_memory(self) -> None:
        self.inner.check_memory()

    def close(self) -> None:
        self.inner.close()

    def start(self, request: ReplicaStart) -> ReplicaHandle:
        number = int(request.env.get(protocol.ENV_ATTEMPT) or 0)
        if number not in self._points:  # the run starts, or restarts: what is in the working folder now
            self._points.add(number)
            self._snapshots.append(snapshot(self.cwd, exclude=self.exclude))
        if number > 0:
            self._fresh_vm(request, number)
        env = self._env(request)
        start_mono = self.clock()
        try:
            handle = self.inner.start(replace(
                request, env=env, outputs=write_through(env, env.get(protocol.ENV_GCS_ROOT, ""))))
        except (OSError, ConfigError, BackendError) as err:
            self.start_error = err  # the check says it as the run's error (the loop fails the trial)
            raise
        self.start_error = None  # (an internal error the loop's retry got past)
        self.attempts.append(Attempt(name=request.name, number=number, env=env, trial_dir=request.trial_dir,
                                     handle=handle, start_mono=start_mono))
        return handle

    def _fresh_vm(self, request: ReplicaStart, number: int) -> None:
        metric_file = request.env.get(protocol.ENV_METRIC_FILE, "")
        if request.name == self.primary:
            self.left[number] = Left(reports=read_reports(metric_file),
                                     checkpoints=walk(request.env.get(protocol.ENV_CHECKPOINT_DIR, "")))
        if metric_file and os.path.lexists(metric_file):
            os.replace(metric_file, f"{metric_file}.attempt-{number - 1}")

    def _env(self, request: ReplicaStart) -> dict[str, str]:
        env = dict(request.env)
        audit_dir = os.path.join(request.trial_dir, AUDIT_DIR)
        os.makedirs(audit_dir, exist_ok=True)
        files.write_text_atomic(os.path.join(audit_dir, "sitecustomize.py"), SITECUSTOMIZE + hold.SITECUSTOMIZE_HOLD)
        env[AUDIT_ENV] = os.path.join(request.trial_dir, f"{request.name}.audit")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (audit_dir, env.get("PYTHONPATH", "")) if p)
        if self.hold is not None and request.name == self.primary \
                and int(request.env.get(protocol.ENV_ATTEMPT) or 0) == 0:
            self.release_file = os.path.join(audit_dir, hold.RELEASE_FILE)
            env[hold.HOLD_ENV] = hold.hold_env(metric_file=env.get(protocol.ENV_METRIC_FILE, ""), tag=self.hold.tag,
                                               after=self.hold.after, release=self.release_file,
                                               max_s=self.hold.max_s)
        if request.name != self.primary and protocol.ENV_MODEL_DIR in env:
            own = os.path.join(self.outputs_root, "outputs-" + request.name, env.get(protocol.ENV_TRIAL_ID, "1"))
            env.update({protocol.ENV_MODEL_DIR: own + "/model/", protocol.ENV_CHECKPOINT_DIR: own + "/checkpoints/",
                        protocol.ENV_TENSORBOARD_LOG_DIR: own + "/logs/"})
        return env

    def release(self) -> None:
        """End the hold: the probe's SIGTERM was sent."""
        hold.release(self.release_file)

    def attempt(self, name: str, number: int) -> Attempt | None:
        return next((a for a in self.attempts if a.name == name and a.number == number), None)

    def first_names(self) -> list[str]:
        """The replicas in the order they first started (the primary first)."""
        return [a.name for a in self.attempts if a.number == 0]

    def outside_writes(self) -> list[str]:
        """What the replicas wrote in their working folder: their overlays' upper layers when they ran
        in the sandbox, else the folder's files that changed between the start, each restart and now."""
        uppers = [a.handle.upper_dir for a in self.attempts if a.handle.upper_dir]
        if uppers:
            return upper_writes(uppers)
        points = [*self._snapshots, snapshot(self.cwd, exclude=self.exclude)]
        return sorted({f for before, after in zip(points, points[1:], strict=False) for f in changed(before, after)})


class ProbePolicy:
    """When `trials check` interrupts or ends a probe run: the job loop's trial policy for it.

    No exit decides anything (each is WAIT once classified): the loop neither restarts a crashed
    replica nor stops the others when the primary exits. This policy ends the run instead:

    - once the primary exited: at once; with ``hold_others``, when the other replicas ended too, at
      the latest after the primary's own run time again plus ``HOLD_EXTRA_S`` (what they report and
      save is seen);
    - at ``box_until`` (the time box): ``stopped_by_box``;
    - with ``interrupt_after``: after that many reports of ``metric_id`` by the primary (or at
      ``interrupt_by``), the whole trial is interrupted once (SIGTERM, the grace period, SIGKILL)
      and started again as attempt 1 by the loop; a primary that exits first ends the run
      (``ended_before_interrupt``). ``release`` is called on the pass after a signal was sent (the
      interruption, the time box): a trainer held for the interruption goes on then.

    Deadlines are monotonic times on the loop's clock; ``first_report_mono`` notes when the primary's
    first report of each attempt was seen (its hypertune file, read each pass until then).
    """

    def __init__(self, *, metric_id: str, box_until: float, hold_others: bool = False,
                 interrupt_after: int | None = None, interrupt_by: float = math.inf,
                 release: Callable[[], None] = lambda: None):
        self.metric_id = metric_id
        self.box_until = box_until
        self.hold_others = hold_others
        self.interrupt_after = interrupt_after
        self.interrupt_by = interrupt_by
        self.release = release
        self.released = False
        self.first_report_mono: dict[int, float] = {}  # attempt -> when its first report was seen
        self.interrupted_at: float | None = None
        self.sent_after_steps: list[int | None] = []  # the primary's steps when it was interrupted
        self.ended_before_interrupt = False
        self.stopped_by_box = False
        self._starts: dict[int, float] = {}
        self._hold_until: float | None = None

    def on_exit(self, run: RunningTrial, name: str, decision: ExitDecision) -> ExitDecision:
        if decision.action is ExitAction.RECORD:  # stopping, or restarting: nothing to decide
            return decision
        return replace(decision, action=ExitAction.WAIT)  # the probe, not the exit, ends the run

    def on_pass(self, run: RunningTrial, now: float) -> PassAction:
        primary = next((lau for lau in run.launches if lau.is_primary), None)
        if primary is None:  # it could not be started: the trial fails
            return PassAction.GO_ON
        attempt = run.running_attempt.get(primary.name, 0)
        start = self._starts.setdefault(attempt, run.start_mono if attempt == 0 else now)
        waiting = self.interrupt_after is not None and self.interrupted_at is None
        reports = read_reports(primary.metric_file) if waiting or attempt not in self.first_report_mono else []
        if reports:
            self.first_report_mono.setdefault(attempt, now)
        if not self.released and (self.interrupted_at is not None or run.stopping or run.restart_at):
            self.released = True  # the signal was sent on an earlier pass: a held trainer has it now
            self.release()
        if run.stopping or run.restart_at:
            return PassAction.GO_ON
        exited = primary.name in run.exited
        if waiting:
            if exited:
                self.ended_before_interrupt = True
                return self._end(run)
            steps = [r.step for r in reports if r.tag == self.metric_id]
            if len(steps) >= (self.interrupt_after or 0) or now >= self.interrupt_by:
                self.interrupted_at, self.sent_after_steps = now, steps
                return PassAction.INTERRUPT
            return PassAction.GO_ON
        if exited:
            if not self.hold_others:
                return self._end(run)
            if self._hold_until is None:
                self._hold_until = min(self.box_until, now + (now - start) + HOLD_EXTRA_S)
            return self._end(run) if now >= self._hold_until else PassAction.GO_ON
        if now >= self.box_until:
            self.stopped_by_box = True
            return PassAction.STOP
        return PassAction.GO_ON

    @staticmethod
    def _end(run: RunningTrial) -> PassAction:
        """Stop what still runs (the loop ends the trial by itself once every exit is in)."""
        return PassAction.GO_ON if run.all_exits_classified() else PassAction.STOP

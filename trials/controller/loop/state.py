"""The job as a whole while its loop runs: how it runs here (``LoopOptions``), its state in the store,
which trial runs next, why it stops, the failure rule's counts, and the totals the summary prints."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TextIO

from trials.controller.loop import events, stopped
from trials.controller.loop.effects import Clock
from trials.controller.policy import exits, rerun, study_stopping
from trials.controller.trial.devices import DevicePlan
from trials.records import JobState, StopReason, TrialState
from trials.spec import JobSpec
from trials.study.store import Claimed, JobStore
from trials.timefmt import parse_rfc3339, rfc3339, wall_after

if TYPE_CHECKING:
    from trials.study.ahead import Suggestion
    from trials.study.database.leases import SharedJob

DEFAULT_GRACE_S = 10.0
STATE_CHECK_INTERVAL_S = 1.0  # how often the loop reads the job's state written by others (cancel)


@dataclass(kw_only=True)
class LoopOptions:
    job_dir: str
    base_output: str | None  # local directory or gs:// URI: trials get <base>/<trial_id>/...; None: no AIP_*
    gcs_root: str
    project_number: str
    cwd: str
    local_command: tuple[str, ...] | None = None
    grace_period_s: float = DEFAULT_GRACE_S
    poll_interval_s: float = 0.05
    memory_limit_mb: int | None = None
    slots: int | None = None  # local cap on parallel trials (workers); None = the job's count
    inject_restarts: float = 0.0  # chaos mode: SIGTERM + restart rate per trial-second
    echo: TextIO | None = None  # copy replica output here, prefixed
    seed: int | None = None
    shared: SharedJob | None = None  # one of several workers on a database job
    join: bool = False  # a `trials worker`: Ctrl-C / SIGTERM leaves the job instead of cancelling it
    runtime: str = "host"  # host processes, or a container runtime (podman, docker): replicas run in their images
    images: dict[str, str] = field(default_factory=dict)  # --image URI=LOCAL: a local image for a spec's URI
    slurm_partition: str | None = None  # --runtime slurm: --partition
    slurm_args: tuple[str, ...] = ()  # --runtime slurm: --slurm-arg (sbatch options for every trial)
    devices: DevicePlan | None = None  # GPUs handed to replicas (None: CUDA_VISIBLE_DEVICES untouched)
    pass_env: tuple[str, ...] = ()  # withheld host variables passed to replicas anyway (--pass-env)
    suggest_ahead: bool = True  # a model-based sampler suggests while trials run (trials.study.ahead)
    keep_going: bool = False  # --keep-going: trials infeasible for one reason do not end the job
    warm_start: bool = False  # --warm-start: host trials forked from a launcher holding their imports (warm/)
    # trials serve's root for a job made through its API: the trials' local output folders stay beneath it and are
    # made there without following a link (another job's trial may have planted one since the create's check)
    confine: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialRecorded:
    """What recording a finished trial changes in the job: its counts and its totals."""

    requeued: bool = False  # back to the queue (not the trial's fault): nothing is counted
    succeeded: bool = False
    failure: str | None = None  # why it failed (the failure rule counts it)
    infeasible: str | None = None  # why it is infeasible without failing (the same-reason rule counts it)
    conflicts: int = 0  # steps reported twice with different values
    lost_steps: int = 0  # chaos mode: gaps in its step sequence
    repeated_steps: str = ""  # it reported a step twice: warned once per job
    warnings: tuple[events.JobWarning, ...] = ()  # said before ``final``
    final: events.TrialDone | events.TrialRequeued | None = None  # said once the job counted it


class LoopState:
    """The job-level state of one job loop, owned by its ``JobRunner``."""

    def __init__(self, store: JobStore, job: JobSpec, options: LoopOptions, *,
                 emit: events.Emit, clock: Clock):
        self.store = store
        self.job = job
        self.opt = options
        self.emit = emit
        self.clock = clock
        self.shared = options.shared
        self.worker_name = self.shared.me if self.shared else f"{socket.gethostname()}:{os.getpid()}"
        self.cancel_requested = False
        self.leaving = False  # a joined worker asked to stop: its trials go back to the queue
        self.exhausted = False
        self.job_error: str | None = None
        self.n_failed = 0
        self.n_succeeded = 0
        self.n_started = 0
        self.first_failure: str | None = None
        self.infeasible: list[tuple[str, str]] = []  # (trial id, reason) infeasible without failing, by end
        self.max_parallel = 0
        self.suggest_wait_s = 0.0  # slot time spent waiting for a suggestion made ahead (trials.study.ahead)
        self.suggest_stats: dict[str, float] = {}  # the suggestion worker's: suggestions made, its CPU
        self.conflicts_total = 0
        self.lost_steps_total = 0  # chaos mode: gaps in the step sequence of restarted trials
        self.warned_repeated_steps = False  # reports repeating a step: said once per job
        self._last_state_check = -STATE_CHECK_INTERVAL_S
        self.kill_now = False  # a second stop signal: SIGKILL every replica at once
        self._pending_resumed: list[Claimed] = []
        self._next_claim_at = 0.0
        self._begin_wall: float | None = None  # when this run began (wall), for its end time
        self.study_stopping = study_stopping.from_job(job)  # studyStoppingConfig, if it sets a rule
        self.study_stopped: str | None = store.meta().study_stopped  # why the study stopped
        self._begin_mono = 0.0

    @property
    def job_stop_reason(self) -> StopReason | None:
        """Why every running trial must stop now (None: they go on)."""
        if self.cancel_requested:
            return StopReason.CANCEL
        if self.leaving:
            return StopReason.LEAVE
        if self.job_error is not None:
            return StopReason.JOB_END
        return None

    @property
    def accepting_trials(self) -> bool:
        return self.job_stop_reason is None

    def resume_running(self) -> int:
        """Queue the trials left RUNNING by a dead controller to run again (same id and params)."""
        for frozen in self.store.running_trials():
            self._pending_resumed.append(self.store.reclaim(frozen, self.job.study))
        return len(self._pending_resumed)

    def study_stop_due(self) -> bool:
        """Whether the study's stopping rules (``studyStoppingConfig``) stop it now (asked before a claim).

        The first time they do, the reason is stored (``describe``, the end line) and said once.
        """
        if self.study_stopped is not None:
            return True
        if self.study_stopping is None:
            return False
        trials = self.store.frozen_trials()
        started = [t for t in trials if t.user_attrs.get("state") not in (None, TrialState.REQUESTED)]
        primary = self.job.study.metrics[0]
        finished = sorted(
            (study_stopping.Finished(end_time=parse_rfc3339(t.user_attrs["end_time"]), value=(
                (t.values[0] if primary.maximize else -t.values[0])
                if t.user_attrs.get("state") == TrialState.SUCCEEDED and t.values else None))
             for t in started if t.user_attrs.get("state") in (TrialState.SUCCEEDED, TrialState.INFEASIBLE)
             and isinstance(t.user_attrs.get("end_time"), str)),
            key=lambda f: f.end_time)
        meta = self.store.meta()
        begin = meta.start_time
        decision = study_stopping.decide(
            self.study_stopping, began=parse_rfc3339(begin) if isinstance(begin, str) else self.clock.wall(),
            now=self.clock.wall(), n_trials=len(started) + 1, finished=finished,
            single_objective=len(self.job.study.metrics) == 1)
        if not decision.stop:
            return False
        self.study_stopped = decision.reason
        self.store.write_meta(replace(meta, study_stopped=decision.reason), since=meta)
        asap = " (shouldStopAsap: the running trials stop now)" if self.study_stopping.should_stop_asap else ""
        self.emit(events.JobNote(message=f"{decision.reason}; no more trials start{asap}"))
        return True

    @property
    def resumed_next(self) -> bool:
        """Whether the next claim is a trial run again (with its own parameters: nothing to suggest)."""
        return bool(self._pending_resumed)

    def next_claim(self, now: float, suggestion: Suggestion | None = None) -> Claimed | None:
        """The next trial to run here: a resumed one first, else a claim (None: nothing to claim now),
        with the parameters of ``suggestion`` when they were suggested ahead of time."""
        if self._pending_resumed:
            return self._pending_resumed.pop(0)
        params = suggestion.params if suggestion is not None else None
        extra = suggestion.system_attrs if suggestion is not None else None
        if self.shared is None:
            claimed: Claimed | None = self.store.claim(self.job.study, params=params, system_attrs=extra)
            self.exhausted = claimed is None
            return claimed
        if now < self._next_claim_at:
            return None
        claimed = self.shared.claim(self.job.study, cap=self.job.parallel_trial_count, params=params,
                                    system_attrs=extra)
        if claimed is None:
            # Nothing claimable: wait for a free global slot or a stale trial to take over,
            # until no trial of the job is waiting or running anywhere.
            self.exhausted = self.shared.n_waiting == 0 and self.shared.n_running == 0
            self._next_claim_at = now + min(1.0, self.shared.heartbeat_s)
        return claimed

    def on_stop_signal(self, signum: int) -> None:
        """SIGINT/SIGTERM/SIGHUP: cancel the job (a joined worker leaves it); a second one kills now."""
        if self.shared is not None and self.shared.outages is not None:
            self.shared.outages.interrupt(signum)  # waiting out a database outage: stop waiting
        if self.opt.join:  # a joined worker leaves; the job goes on with the others
            if self.leaving:
                self.kill_now = True
            self.leaving = True
            return
        if self.cancel_requested:
            self.kill_now = True  # a second Ctrl-C: kill now
        self.cancel_requested = True

    def begin_job(self) -> None:
        """Count what earlier runs finished; the job is RUNNING with this controller."""
        self._count_finished()
        if self.shared is None:  # the failure rule over every trial so far: a FAILED job stays FAILED
            self.job_error = self._failure_rules()
        self._begin_wall, self._begin_mono = self.clock.wall(), self.clock.monotonic()
        with self.store.batch():  # one journal write
            meta = self.store.meta()
            running = meta if meta.start_time is not None else replace(meta, start_time=rfc3339(self._begin_wall))
            if not self.opt.join:
                running = replace(running, state=JobState.RUNNING, end_time=None, error=None,
                                  controller=self.worker_name)
            elif meta.state in (JobState.QUEUED, JobState.PENDING):
                running = replace(running, state=JobState.RUNNING)
            self.store.write_meta(running, since=meta)
        self.emit(events.JobRunning())

    def check_external_state(self, now: float) -> None:
        """A cancel (``trials cancel``) or a failure another worker decided, read from the store."""
        if self.cancel_requested:
            meta = self.store.meta()
            if meta.state != JobState.CANCELLING:
                self.store.write_meta(replace(meta, state=JobState.CANCELLING), since=meta)
                self.emit(events.JobCancelling())
        if now - self._last_state_check < STATE_CHECK_INTERVAL_S:
            return
        self._last_state_check = now
        meta = self.store.meta()
        if meta.state in (JobState.CANCELLING, JobState.CANCELLED):
            self.cancel_requested = True
        elif self.shared is not None and meta.state == JobState.FAILED and self.job_error is None:
            self.job_error = (meta.error or {}).get("message") or "another worker ended the job FAILED"

    def trial_recorded(self, recorded: TrialRecorded, trial_id: str) -> str:
        """Apply what recording a trial changed: the totals, then the job's failure rule.

        Returns the repeated-steps warning when this is the first of the job (it is said once), else "".
        """
        self.conflicts_total += recorded.conflicts
        self.lost_steps_total += recorded.lost_steps
        first_repeat = ""
        if recorded.repeated_steps and not self.warned_repeated_steps:
            self.warned_repeated_steps = True
            first_repeat = recorded.repeated_steps
        if not recorded.requeued:
            self._count_finished_trial(trial_id, succeeded=recorded.succeeded, failure=recorded.failure,
                                       infeasible=recorded.infeasible)
        return first_repeat

    def _count_finished_trial(self, trial_id: str, *, succeeded: bool, failure: str | None,
                              infeasible: str | None = None) -> None:
        """A trial finished here: apply the job's failure rules."""
        if succeeded:
            self.n_succeeded += 1
        if (failure or infeasible) and self.shared is not None:
            self.n_failed = self.n_succeeded = 0  # the job's failure rule counts every worker's trials
            self.first_failure = None
            self.infeasible = []
            self._count_finished()
        elif failure:
            self.n_failed += 1
            self.first_failure = self.first_failure or f"Trial {trial_id}: {failure}"
        elif infeasible:
            self.infeasible.append((trial_id, infeasible))
        else:
            return
        error = self._failure_rules()
        if error and self.job_error is None:
            self.job_error = error

    def _failure_rules(self) -> str | None:
        """Vertex's failure rule (``maxFailedTrialCount``), then ours: the first trials infeasible for one reason."""
        error = exits.job_failure(self.job, n_failed=self.n_failed, n_succeeded=self.n_succeeded,
                                  first_failure=self.first_failure)
        if error is not None or len(self.infeasible) < exits.SAME_REASON_TRIALS:
            return error
        return exits.same_reason_failure(self.job, infeasible=self.infeasible, n_succeeded=self.n_succeeded,
                                         n_left=self.store.waiting_running()[0], keep_going=self.opt.keep_going)

    def _count_finished(self) -> None:
        attrs = self.store.trial_attrs(*exits.INFEASIBLE_ATTRS)
        for number, a in sorted(attrs.items()):
            if a.get("failed"):
                self.n_failed += 1
                reason = a.get("infeasible_reason")
                self.first_failure = self.first_failure or f"Trial {number + 1}: {reason}"
            elif a.get("state") == TrialState.SUCCEEDED and not exits.waits_to_rerun(a):
                self.n_succeeded += 1  # (a stopped run waiting to run again counts when that run ends)
        self.infeasible = exits.infeasible_by_end(attrs)

    def more_to_run(self) -> bool:
        """At the loop's end: trials were added meanwhile (``trials resume --max-trial-count``) to run here.

        Asked under the job's state lock, where an extender writes its trials: a controller that
        says no ends inside the same hold, so no trial can be added after it looked and before it ended.
        """
        if self.shared is not None or not self.accepting_trials or self.study_stopped is not None:
            return False
        n_waiting = self.store.waiting_running()[0]
        if not n_waiting:
            return False
        self.exhausted = False
        self.emit(events.TrialsAdded(waiting=n_waiting, total=self.store.n_trials()))
        return True

    def _end_wall(self, start: str | None) -> float:
        """Now, as this run's start wall time plus the monotonic time since, never before the job's
        start (``start``, as its record keeps it)."""
        if self._begin_wall is None:
            return self.clock.wall()
        try:
            floor = parse_rfc3339(start) if start is not None else None
        except ValueError:
            floor = None
        return wall_after(self._begin_wall, self._begin_mono, self.clock.monotonic(), not_before=floor)

    def finish_job(self) -> str:
        """Record the job's end state (the last worker of a shared job does); returns it.

        A cancel (``trials cancel``) since the loop's last look counts; a cancel that came when every
        trial had already finished cancels nothing: the job SUCCEEDED (or FAILED) as its trials did.
        """
        if self.shared is None and not self.cancel_requested and \
                self.store.meta().state in (JobState.CANCELLING, JobState.CANCELLED):
            self.cancel_requested = True
        if self.shared is not None and self.job_error is None:
            if self.leaving:
                self.emit(events.JobLeft())
                return str(self.store.meta().state)
            if self.cancel_requested:
                self.shared.requeue_stale()
                if self.shared.others_active():
                    return JobState.CANCELLING.value  # the last worker to stop sets CANCELLED
            elif sum(self.shared.counts()):
                return str(self.store.meta().state)  # left with trials still to run
        for claimed in self._pending_resumed:  # left RUNNING by a dead controller, not run again here:
            # shown as it stopped (its start, the steps it stored, an end), never REQUESTED, and queued again
            frozen = claimed.stored or self.store.storage.get_trial(claimed.storage_id)
            why = rerun.CANCELLED_ORPHAN if self.cancel_requested else rerun.ENDED_ORPHAN
            stopped.requeue_stopped(self.store, self.job.study, frozen, why=why)
        self._pending_resumed.clear()
        error: dict[str, Any] | None
        if self.job_error is not None:
            state, error = JobState.FAILED, {"code": exits.JOB_FAILED_CODE, "message": self.job_error}
        elif self.cancel_requested and (self.shared is not None or any(self.store.waiting_running())):
            state, error = JobState.CANCELLED, {"code": 1, "message": "The job was cancelled."}
        else:
            state, error = JobState.SUCCEEDED, None
        meta = self.store.meta()
        done = replace(meta, state=state, end_time=rfc3339(self._end_wall(meta.start_time)), error=error,
                       controller=None)
        if self.suggest_wait_s:  # (a run that suggested nothing ahead keeps the last run's numbers)
            done = replace(done, suggest_wait_s=round(self.suggest_wait_s, 3))
        if self.suggest_stats:
            done = replace(done, suggestions=self.suggest_stats.get("suggestions", done.suggestions),
                           suggest_cpu_s=self.suggest_stats.get("suggest_cpu_s", done.suggest_cpu_s))
        self.store.write_meta(done, since=meta)
        self.emit(events.JobDone(state=state, error=error))
        return state.value

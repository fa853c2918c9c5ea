"""The job loop: claim trials, start their replicas, consume what happens to them, decide, record.

One thread. Each pass takes ONE snapshot of every replica's exit and consumes the events of the
pass: replicas exited (with their codes), metrics read, timers due (restart, timeout, chaos),
signals, a cancel, a lost lease. What to do comes from pure functions (``trial_run.decide_exit``,
``stopping``, ``policy``, ``outcome.finished_trial``, ``chaos``); effects go through small
interfaces: the replica factory, the clock and the signals are injected (``effects``), trial files
are written by ``trial_files``, records go to the store.
"""

from __future__ import annotations

import errno
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from trials import protocol
from trials.controller import gcs_emulator, launch, policy, sandbox
from trials.controller.chaos import Chaos
from trials.controller.devices import DeviceAllocator, DevicePlan
from trials.controller.effects import Clock, ReplicaFactory, Signals, SystemClock
from trials.controller.job_state import JobProgress
from trials.controller.outcome import finished_trial, record_finished
from trials.controller.process import check_memory_all, start_replica
from trials.controller.signals import LoopSignals
from trials.controller.trial_launch import TrialLauncher, start_error_text
from trials.controller.trial_metrics import TrialMetrics
from trials.controller.trial_run import TrialRun
from trials.controller.trial_supervisor import TrialSupervisor
from trials.errors import ConfigError, DiskFullError
from trials.records import FINAL_JOB_STATES, JobState, StopReason, TrialState, measurement_to_dict
from trials.spec import JobSpec, Scheduling
from trials.study.store import Claimed, JobStore
from trials.timefmt import rfc3339

# Vertex job states (names kept for the modules that import them from here)
QUEUED, PENDING, RUNNING = JobState.QUEUED, JobState.PENDING, JobState.RUNNING
SUCCEEDED, FAILED = JobState.SUCCEEDED, JobState.FAILED
CANCELLING, CANCELLED = JobState.CANCELLING, JobState.CANCELLED
FINAL_STATES = FINAL_JOB_STATES

DEFAULT_GRACE_S = 10.0
METRICS_POLL_S = 0.25  # metric reads of a running trial when no stopping rule needs every step
STOP_POLL_S = 0.02  # while stopping every replica on the way out
# A write failed for want of space (or a file-size limit): the job pauses instead of dying
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@dataclass(kw_only=True)
class RunOptions:
    job_dir: str
    base_output: str  # local directory or gs:// URI: trials get <base>/<trial_id>/...
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
    shared: Any = None  # trials.controller.worker.SharedJob: one of several workers on a database job
    join: bool = False  # a `trials worker`: Ctrl-C / SIGTERM leaves the job instead of cancelling it
    devices: DevicePlan | None = None  # GPUs handed to replicas (None: CUDA_VISIBLE_DEVICES untouched)
    pass_env: tuple[str, ...] = ()  # withheld host variables passed to replicas anyway (--pass-env)
    sandbox: Any = None  # trials.controller.sandbox.Sandbox; None: detected when the run starts


class JobRunner(JobProgress):
    """Runs one job until every trial is done, the job fails, or it is cancelled.

    Args:
        store: the job in its storage; ``job`` its spec; ``options`` how to run it here.
        progress: called with each event for the user (``trial_started``, ``trial_done``, ...).
        clock: monotonic and wall time (default: the system's).
        replica_factory: starts a replica (default: ``process.start_replica``).
        signals: installs the stop-signal handlers and waits between passes (default: ``LoopSignals``).
    """

    def __init__(self, store: JobStore, job: JobSpec, options: RunOptions, *,
                 progress: Callable[[str, dict[str, Any]], None] | None = None,
                 clock: Clock | None = None, replica_factory: ReplicaFactory = start_replica,
                 signals: Signals | None = None):
        super().__init__(store, job, options, progress=progress, clock=clock or SystemClock())
        self.running: dict[str, TrialRun] = {}
        self.kill_now = False
        self._signals: Signals = signals or LoopSignals()
        self._metrics = TrialMetrics(store, job, self.progress)
        plan = options.devices
        self._alloc = DeviceAllocator(plan.devices) if plan and plan.devices is not None else None
        spec_rest = store.get_meta("spec") or {}
        self._launcher = TrialLauncher(job, store.job_id, options, factory=replica_factory, clock=self.clock,
                                       trial_job_rest=spec_rest.get("trialJobSpec", {}), alloc=self._alloc)
        scheduling = job.trial_job.scheduling if job.trial_job else Scheduling()
        self._chaos = Chaos(options.inject_restarts, options.seed)
        self._sup = TrialSupervisor(store=store, launcher=self._launcher, chaos=self._chaos, clock=self.clock,
                                    progress=self.progress, grace_s=options.grace_period_s,
                                    timeout_s=scheduling.timeout_s,
                                    restart_all=scheduling.restart_job_on_worker_restart, echo=options.echo)
        self._pending_resumed: list[Claimed] = []
        self._next_claim_at = 0.0

    @property
    def injected_total(self) -> int:
        """Chaos mode: restarts injected so far."""
        return int(self._sup.n_injected)

    def _start_container(self) -> gcs_emulator.Emulator | None:
        """The replicas' container view and the local Cloud Storage endpoint, each said once if absent.

        Only the production factory is wrapped: an injected one (tests) starts replicas as it likes.
        """
        if self._launcher.factory is not start_replica:
            return None
        view = self.opt.sandbox or sandbox.detect(launch_dir=self.opt.cwd, job_dir=self.opt.job_dir,
                                                  gcs_root=self.opt.gcs_root)
        if not view.on:
            self.progress("warning", {"message": view.describe()})
        gcs, why = gcs_emulator.start(self.opt.gcs_root)
        if gcs is None and gcs_emulator.available() and not gcs_emulator.disabled():
            self.progress("warning", {"message": f"no local Cloud Storage endpoint: {why}"})
        extra = {protocol.ENV_STORAGE_EMULATOR_HOST: gcs.host} if gcs is not None else {}
        self._launcher.factory = sandbox.SandboxedStart(view, extra)
        return gcs

    # ------------------------------------------------------------------ public
    def resume_running(self) -> int:
        """Queue the trials left RUNNING by a dead controller to run again (same id and params)."""
        for frozen in self.store.running_trials():
            self._pending_resumed.append(self.store.reclaim(frozen, self.job.study))
        return len(self._pending_resumed)

    def run(self) -> str:
        """Run the job; returns its final Vertex job state."""
        self.begin_job()
        gcs = self._start_container()
        restore = self._signals.install(self.on_stop_signal)
        full: OSError | None = None
        try:
            self._loop()
        except OSError as err:
            if err.errno not in DISK_FULL_ERRNOS:
                raise
            full = err  # nothing more can be recorded: pause, keep what is recorded
        finally:
            self._stop_everything()
            restore()
            if gcs is not None:
                gcs.stop()
        if full is not None:
            where = f" writing {full.filename}" if full.filename else ""
            raise DiskFullError(
                f"the disk is full ({full.strerror}{where}): job {self.store.job_id} is paused, its running "
                f"trials were stopped and stay RUNNING; free some space, then: trials resume {self.store.job_id}"
            ) from full
        return self.finish_job()

    # ------------------------------------------------------------------ loop
    def _loop(self) -> None:
        while True:
            now = self.clock.monotonic()
            self.check_external_state(now)  # a cancel or a failure decided elsewhere
            if self.accepting_trials:
                self._fill_slots(now)
                self.max_parallel = max(self.max_parallel, len(self.running))
            if self.shared is not None and self.shared.beat_due():
                self._on_heartbeat(now)
            n_running = len(self.running)
            for run in list(self.running.values()):
                self._pass(run, now)
            if not self.running and not self.accepting_trials:
                return
            if not self.running and self.exhausted:
                return
            if len(self.running) < n_running and not self.exhausted:
                continue  # a trial just finished: fill its slot now, not one poll interval later
            self._signals.wait(self.opt.poll_interval_s)

    def _fill_slots(self, now: float) -> None:
        cap = self.job.parallel_trial_count
        if self.opt.slots:
            cap = min(cap, self.opt.slots)
        while len(self.running) < cap:
            if self._alloc is not None and self.opt.devices is not None \
                    and not self._alloc.fits(self.opt.devices.counts):
                return  # the next trial waits in REQUESTED until its devices are free
            with self.store.batch():  # the claim and the trial's first attributes: one journal write
                claimed = self._next_claim(now)
                if claimed is not None and not claimed.resumed:
                    self.store.set_trial_attrs(claimed.storage_id, **self._active_attrs(claimed))
            if claimed is None:
                return
            self._launch(claimed, now)

    def _active_attrs(self, claimed: Claimed) -> dict[str, Any]:
        paths = launch.trial_paths(self.opt.job_dir, self.opt.base_output, claimed.trial_id)
        return {"state": TrialState.ACTIVE.value, "trial_id": claimed.trial_id, "worker": self.worker_name,
                "trial_dir": paths.trial_dir, "start_time": rfc3339(self.clock.wall())}

    def _next_claim(self, now: float) -> Claimed | None:
        if self._pending_resumed:
            return self._pending_resumed.pop(0)
        if self.shared is None:
            claimed: Claimed | None = self.store.claim(self.job.study)
            self.exhausted = claimed is None
            return claimed
        if now < self._next_claim_at:
            return None
        claimed = self.shared.claim(self.job.study, cap=self.job.parallel_trial_count)
        if claimed is None:
            # Nothing claimable: wait for a free global slot or a stale trial to take over,
            # until no trial of the job is waiting or running anywhere.
            self.exhausted = self.shared.n_waiting == 0 and self.shared.n_running == 0
            self._next_claim_at = now + min(1.0, self.shared.heartbeat_s)
        return claimed

    def _launch(self, claimed: Claimed, now: float) -> None:
        try:
            previous = (self._trial_attr(claimed, "attempts") or []) if claimed.resumed else []
            run = self._launcher.prepare(claimed, now, previous)
        except (OSError, ConfigError) as err:  # a full disk, a missing command: the trial fails
            run = self._launcher.empty_run(claimed, now)
            self.running[claimed.trial_id] = run
            self._sup.fail(run, now, f"The trial could not be started: {start_error_text(err, run.paths.trial_dir)}.")
            return
        self.running[claimed.trial_id] = run
        for lau in run.launches:
            try:
                self._launcher.start(run, lau, attempt=0, echo=self.opt.echo)
            except (OSError, ConfigError) as err:
                run.launches = [x for x in run.launches if x.name in run.replicas]  # those started
                self._sup.fail(run, now, f"The trial could not be started: "
                                     f"{start_error_text(err, run.paths.trial_dir)}.")
                return
        if claimed.resumed:  # (a fresh claim got its attributes with the claim)
            attrs: dict[str, Any] = {"state": TrialState.ACTIVE.value, "trial_id": claimed.trial_id,
                                     "worker": self.worker_name, "trial_dir": run.paths.trial_dir}
            if self.shared is not None:
                attrs["attempts"] = run.attempts  # visible in `describe` while the re-run goes on
            self.store.set_trial_attrs(claimed.storage_id, **attrs)
        self.n_started += 1
        run.next_injection = self._chaos.next_due(now)
        self.progress("trial_started", {"trial_id": claimed.trial_id, "params": claimed.params,
                                        "resumed": claimed.resumed})

    # ------------------------------------------------------------------ one pass over a trial
    def _pass(self, run: TrialRun, now: float) -> None:
        if self.kill_now:
            for r in run.replicas.values():
                r.send_signal_group(signal.SIGKILL)
        if self.opt.memory_limit_mb:
            check_memory_all(r for r in run.replicas.values() if r.poll() is None)  # type: ignore[misc]
        exits = run.new_exits()  # THE snapshot: each exit below is classified exactly once
        self._on_metrics(run, now, final=bool(exits))
        for name, status in exits.items():
            self._sup.on_exit(run, name, status, now)
        self._sup.on_restarts_due(run, now)
        self._sup.on_timers(run, now, self.job_stop_reason)
        if run.stopping:
            for name, r in run.replicas.items():
                if name not in run.exited:
                    r.advance_stop(now, self.opt.grace_period_s)
        if run.all_exits_classified() and self._sup.groups_gone(run, now):
            self._finalize(run)

    def _on_metrics(self, run: TrialRun, now: float, *, final: bool) -> None:
        if run.lost:
            return  # the trial is another worker's now: nothing more is written for it here
        # Without a stopping rule nothing is decided on the way: read at most every
        # METRICS_POLL_S (and when a replica exits); with one, read every pass.
        if self.job.study.stopping is None and not final:
            if now < run.next_metrics_poll:
                return
            run.next_metrics_poll = now + METRICS_POLL_S
        if not run.reader.poll():
            return
        self._metrics.warn_unknown_tags(run)
        try:
            if not self._metrics.report_new(run) or run.stopping:
                return
        except RuntimeError as err:
            if self._taken_over(run, err):
                return
            raise
        decision = self._metrics.early_stop(run)
        if decision is not None and decision.stop:
            run.stopped_early = True
            run.stop_detail = decision.reason
            if decision.predicted_final is not None and decision.predicted_x is not None:
                run.predicted = (decision.predicted_x, decision.predicted_final)
            self._sup.begin_stop(run, now, StopReason.EARLY)  # ACTIVE -> STOPPING

    def _on_heartbeat(self, now: float) -> None:
        lost = set(self.shared.beat([r.claimed.storage_id for r in self.running.values() if not r.lost]))
        for run in self.running.values():
            if run.claimed.storage_id in lost and not run.lost:
                self._lose(run, now)

    def _lose(self, run: TrialRun, now: float) -> None:
        """Another worker took the trial over: stop its replicas here, write nothing more for it."""
        self.progress("warning", {"trial_id": run.trial_id, "message": (
            f"trial {run.trial_id}: another worker took it over (this worker missed its "
            f"heartbeats); stopping it here")})
        run.stop_reason = None  # whatever it was stopping for, it is not ours to record
        self._sup.begin_stop(run, now, StopReason.LOST)

    def _taken_over(self, run: TrialRun, err: RuntimeError) -> bool:
        """Whether a refused write means the trial is another worker's now (it is then lost here).

        A worker paused past its lease (SIGSTOP, a suspended VM) may write before its next
        heartbeat tells it; the storage then refuses a write to a trial the new owner finished
        (Optuna's UpdateFinishedTrialError, a RuntimeError).
        """
        if self.shared is None or self.shared.owns(run.claimed.storage_id):
            return False
        if not run.lost:
            self._lose(run, self.clock.monotonic())
        return True

    # ------------------------------------------------------------------ finalize
    def _finalize(self, run: TrialRun) -> None:
        del self.running[run.trial_id]
        if self._alloc is not None:
            self._alloc.release(run.trial_id)
        for name, r in run.replicas.items():
            r.close()
            leftovers = getattr(r, "leftovers", None)  # process.Replica: killed after its leader exited
            if leftovers:
                self.progress("warning", {"trial_id": run.trial_id, "message": (
                    f"trial {run.trial_id}: {name} exited and left {len(leftovers)} processes running; "
                    f"killed them: {', '.join(leftovers)}")})
        if not run.lost and self.shared is not None and not self.shared.owns(run.claimed.storage_id):
            run.stop_reason = StopReason.LOST
        if not run.lost:
            try:
                with self.store.batch():  # its last steps, attributes and state: one journal write
                    self._record(run)
            except RuntimeError as err:
                if not self._taken_over(run, err):
                    raise
        if run.lost:
            self.progress("trial_requeued", {"trial_id": run.trial_id, "lost": True})
            # the worker that took it over records it

    def _record(self, run: TrialRun) -> None:
        """Record a trial that ended here: back to the queue, or finished with its outcome."""
        run.reader.poll(final=True)
        self._metrics.warn_unknown_tags(run)
        self._metrics.report_new(run)
        measurements = [m.with_elapsed(run.start_wall) for m in run.reader.measurements()]
        if run.stopped_early and not self._metrics.ended_early(measurements):
            run.stopped_early, run.predicted = False, None  # it reached its end while being stopped
        self.conflicts_total += run.reader.conflicts
        if run.injected:
            self.lost_steps_total += policy.missing_steps([m.step for m in measurements])
        sid = run.claimed.storage_id
        extra: dict[str, Any] = {"attempts": run.attempts}
        if run.failure and run.failure_detail:
            extra["error_detail"] = list(run.failure_detail)
        if run.reader.unknown_tags:
            extra["unknown_tags"] = sorted(run.reader.unknown_tags)
        if run.reader.missing_steps_warning:
            extra["metrics_warning"] = run.reader.missing_steps_warning
            self.progress("warning", {"trial_id": run.trial_id, "message": run.reader.missing_steps_warning})
        repeated = run.reader.repeated_steps_warning
        if repeated:
            extra["metrics_warning"] = "; ".join(filter(None, (extra.get("metrics_warning"), repeated)))
            if not self._warned_repeated_steps:  # once per job: every trial of a trainer does it
                self._warned_repeated_steps = True
                self.progress("warning", {"trial_id": run.trial_id, "message": f"trial {run.trial_id}: {repeated}"})
        if run.injected:
            extra["injected_restarts"] = run.injected
        if run.stop_reason is not None and run.stop_reason.requeues:
            # Not the trial's fault: it goes back to the queue and runs again on resume.
            # ACTIVE -> REQUESTED: a trial not yet run again has no start time and no measurements
            # (what this run reported stays in its folder and in previous_measurements)
            self.store.set_trial_attrs(sid, **extra, state=TrialState.REQUESTED.value, end_time=None,
                                       start_time=None, measurements=None, requeued=True,
                                       previous_measurements=[measurement_to_dict(m) for m in measurements])
            self.store.requeue(sid)
            if self.shared is not None:
                self.shared.release(sid)
            self.progress("trial_requeued", {"trial_id": run.trial_id})
            return
        outcome = finished_trial(
            measurements, self.job.study, failure=run.failure, reported_tags=run.reader.reported_tags,
            end_time=rfc3339(self.clock.wall()), stopped_early=run.stopped_early,
            stop_detail=run.stop_detail, predicted=run.predicted)
        record_finished(self.store, number=run.claimed.number, storage_id=sid, outcome=outcome, extra=extra)
        if outcome.succeeded and not run.stopped_early:
            self._metrics.forget_curves()
        if self.shared is not None:
            self.shared.release(sid)
        self.count_finished_trial(run.trial_id, succeeded=outcome.succeeded, failure=run.failure)
        self.progress("trial_done", {
            "trial_id": run.trial_id, "state": outcome.state.value, "reason": outcome.reason,
            "values": outcome.values, "stopped_early": run.stopped_early, "steps": len(outcome.measurements),
            "seconds": self.clock.monotonic() - run.start_mono, "params": run.claimed.params,
            **({"detail": list(run.failure_detail)} if run.failure and run.failure_detail else {}),
            "last_step": measurements[-1].step if measurements else None,  # reported, not predicted
            # ended without the spec's metric: the progress says once what to do about it
            "missing_metric": not outcome.succeeded and not run.failure and "final_measurement" not in outcome.attrs,
            "reported_tags": sorted(run.reader.reported_tags), "metrics_source": run.reader.source,
        })

    # ------------------------------------------------------------------ the way out
    def _stop_everything(self) -> None:
        """Leave no replica behind (used on the way out, also after an exception)."""
        deadline = self.clock.monotonic() + self.opt.grace_period_s
        live = [r for run in self.running.values() for r in run.replicas.values() if r.poll() is None]
        for r in live:
            r.begin_stop(self.clock.monotonic())
        while live and self.clock.monotonic() < deadline + 1:
            live = [r for r in live if not r.advance_stop(self.clock.monotonic(), self.opt.grace_period_s)]
            if live:
                self.clock.sleep(STOP_POLL_S)
        for run in list(self.running.values()):
            for r in run.replicas.values():
                r.close()

    def on_stop_signal(self, signum: int) -> None:
        """SIGINT/SIGTERM/SIGHUP: cancel the job (a joined worker leaves it); a second one kills now."""
        if self.opt.join:  # a joined worker leaves; the job goes on with the others
            if self.leaving:
                self.kill_now = True
            self.leaving = True
            return
        if self.cancel_requested:
            self.kill_now = True  # a second Ctrl-C: kill now
        self.cancel_requested = True

    def _trial_attr(self, claimed: Claimed, key: str) -> Any:
        return self.store.storage.get_trial(claimed.storage_id).user_attrs.get(key)


__all__ = ["CANCELLED", "CANCELLING", "FAILED", "FINAL_STATES", "PENDING", "QUEUED", "RUNNING", "SUCCEEDED",
           "JobRunner", "RunOptions"]

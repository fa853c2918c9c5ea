"""The job loop: claim trials, start their replicas, consume what happens to them, decide, record.

One thread. Each pass takes ONE snapshot of every replica's exit and consumes the events of the
pass: replicas exited (with their codes), metrics read, timers due (restart, timeout, chaos),
signals, a cancel, a lost lease. What to do comes from pure functions (``running.decide_exit``,
``stopping``, ``policy``, ``outcome.finished_trial``, ``chaos``); effects go through small
interfaces: the replica factory, the clock and the signals are injected (``effects``), trial files
are written by ``trial.files``, what a trial is recorded as by ``record``.

The caller's say over each running trial is a ``trial_policy.TrialPolicy``, consulted at two points
of a trial's pass: ``on_exit`` right after each exit is classified (it may change what the exit
means: ``trials check`` lets the other replicas finish after the primary's), and ``on_pass`` after
the pass's exits, due restarts and timers (it may interrupt the trial, a maintenance restart of
every replica as attempt + 1, or stop it: ``trials check``'s restart probe and time box). The
default, ``LoopRules``, changes nothing (``trials sweep``).
"""

from __future__ import annotations

import contextlib
import errno
import math
import signal
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from trials import protocol
from trials.controller.backend.protocol import INTERNAL_ERROR_MESSAGE, BackendError, ReplicaBackend, ReplicaExit
from trials.controller.loop import events
from trials.controller.loop.chaos import Chaos
from trials.controller.loop.effects import Clock, Signals, Suggestions, SystemClock
from trials.controller.loop.launcher import TrialLauncher, start_error_text
from trials.controller.loop.metrics import TrialMetrics
from trials.controller.loop.record import active_attrs, record_trial
from trials.controller.loop.running import RunningTrial
from trials.controller.loop.signals import LoopSignals
from trials.controller.loop.state import LoopOptions, LoopState, TrialRecorded
from trials.controller.loop.state_lock import state_lock
from trials.controller.loop.supervisor import TrialSupervisor
from trials.controller.loop.trial_policy import TrialPolicy
from trials.controller.policy import tags
from trials.controller.trial.devices import DeviceAllocator
from trials.errors import ConfigError, DiskFullError
from trials.records import StopReason, TrialState
from trials.spec import JobSpec, Scheduling
from trials.study.store import Claimed, JobStore, NotHeldError

if TYPE_CHECKING:  # a database job's leases: sqlalchemy, which a journal job never needs
    from trials.study.ahead import Suggestion
    from trials.study.database.leases import SharedJob

# Without a stopping rule, the running trials' metrics are read (and their new steps written) together,
# on one clock of this period: one journal write a period for all of them, whatever the slots (each
# trial's reads on its own clock were a write each, ~1 ms of the controller's CPU with the file's lock).
# A trial's steps are read again when it exits; those not read yet stay in its metrics file, which a
# resumed controller reads before the trial starts again. But a cloudml-hypertune file keeps only its
# last 100 reports and is rewritten whole at each one: a trial reporting faster than a quarter of that a
# period is read on a halved clock (down to a sixteenth, :func:`metrics_period`), one that has not
# reported yet on the fastest (its first second may hold more than 100), and a read that finds the file
# in the middle of a rewrite is made again on the next pass.
METRICS_POLL_S = 1.0
METRICS_POLL_HALVINGS = 4  # the fastest clock: METRICS_POLL_S / 2**4
HYPERTUNE_READ_SHARE = 25  # reports a read may find new: a quarter of the file's 100
PROGRESS_TICK_S = 1.0  # a running trial's progress is told at least this often (the live view's clocks)
STOP_POLL_S = 0.02  # while stopping every replica on the way out
# A write failed for want of space (or a file-size limit): the job pauses instead of dying
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class JobRunner:
    """Runs one job until every trial is done, the job fails, or it is cancelled.

    It owns the job's state (``state``, a :class:`LoopState`) and the running trials (``running``);
    everything it does to the world goes through what it is given.

    Args:
        store: the job in its storage; ``job`` its spec; ``options`` how to run it here.
        emit: called with each event for the user (:mod:`trials.controller.loop.events`).
        clock: monotonic and wall time (default: the system's).
        backend: starts the replicas (:class:`trials.controller.process.host.HostBackend` for host processes).
        signals: installs the stop-signal handlers and waits between passes (default: ``LoopSignals``).
        policy: the caller's say over each running trial (default: ``LoopRules``, none; see the module).
        suggestions: parameters suggested ahead of time (default: :func:`trials.study.ahead.for_job`
            when the job's sampler is model-based and ``options.suggest_ahead``; else the claim suggests).
    """

    def __init__(self, store: JobStore, job: JobSpec, options: LoopOptions, *, backend: ReplicaBackend,
                 emit: events.Emit = events.ignore, clock: Clock | None = None,
                 signals: Signals | None = None, policy: TrialPolicy | None = None,
                 suggestions: Suggestions | None = None):
        self.store = store
        self.job = job
        self.opt = options
        # events of a pass whose writes are batched reach the listeners once the batch is written: on a
        # database its writes are not visible before its commit (a listener reading the trial, as
        # `trials.tune` does, read it RUNNING)
        self._events = events.HeldEvents(emit)
        emit = self._events
        self.emit = emit
        self.clock: Clock = clock or SystemClock()
        self.state = LoopState(store, job, options, emit=emit, clock=self.clock)
        self.shared = options.shared
        self.running: dict[str, RunningTrial] = {}
        self._signals: Signals = signals or LoopSignals()
        self._metrics = TrialMetrics(store, job, emit)
        plan = options.devices
        self._alloc = DeviceAllocator(plan.devices) if plan and plan.devices is not None else None
        spec_rest = store.meta().spec or {}
        self._backend = backend
        self._launcher = TrialLauncher(job, store.job_id, options, backend=self._backend, clock=self.clock,
                                       trial_job_rest=spec_rest.get("trialJobSpec", {}), alloc=self._alloc)
        scheduling = job.trial_job.scheduling if job.trial_job else Scheduling()
        self._chaos = Chaos(options.inject_restarts, options.seed)
        self._sup = TrialSupervisor(store=store, launcher=self._launcher, chaos=self._chaos, clock=self.clock,
                                    emit=emit, grace_s=options.grace_period_s,
                                    timeout_s=scheduling.timeout_s,
                                    restart_all=scheduling.restart_job_on_worker_restart, echo=options.echo,
                                    save_metrics=self._store_metrics, trial_policy=policy)
        if suggestions is None and options.suggest_ahead:
            from trials.study import ahead

            suggestions = ahead.for_job(store, job.study, sampler_name=store.sampler_name, seed=store.sampler_seed,
                                        job_dir=options.job_dir, depth=self._cap(), n_trials=store.n_trials())
        self._ahead = suggestions
        self._slot_waits = False  # a free slot waits for a suggestion being made
        self._claimed: list[Claimed] = []  # claimed beside a record in this pass, started after its write
        self._waits_since: float | None = None  # since when

    @property
    def injected_total(self) -> int:
        """Chaos mode: restarts injected so far."""
        return int(self._sup.n_injected)

    # ------------------------------------------------------------------ public
    def run(self, *, on_end: Callable[[], None] | None = None) -> str:
        """Run the job; returns its final Vertex job state.

        The stop signals are handled from before the job is recorded RUNNING until after its end
        state is written: a SIGTERM at any moment of the run cancels it cleanly. ``on_end`` runs
        when the end state is written, inside the same hold of the job's state lock (``run_job``
        releases the controller lock there: see ``state_lock``).
        """
        restore = self._signals.install(self.state.on_stop_signal)
        try:
            return self._run(on_end)
        finally:
            restore()

    def _run(self, on_end: Callable[[], None] | None) -> str:
        self.state.begin_job()
        self._backend.open(lambda message: self.emit(events.JobWarning(message=message)))
        full: OSError | None = None
        state = ""
        try:
            while True:
                self._loop()
                with state_lock(self.opt.job_dir):  # a cancel or trials added: seen now, or after the end
                    if self.state.more_to_run():
                        continue  # trials were added while the last ones finished: run them too
                    if self._ahead is not None:
                        self.state.suggest_stats = self._ahead.stats()  # recorded with the job's end
                    state = self.state.finish_job()
                    if on_end is not None:
                        on_end()
                    break
        except OSError as err:
            if err.errno not in DISK_FULL_ERRNOS:
                raise
            full = err  # nothing more can be recorded: pause, keep what is recorded
        finally:
            if self._ahead is not None:
                self._ahead.close()  # a suggestion in flight is dropped: nothing was recorded for it
            self._stop_everything()
            self._backend.close()
        if full is not None:
            where = f" writing {full.filename}" if full.filename else ""
            raise DiskFullError(
                f"the disk is full ({full.strerror}{where}): job {self.store.job_id} is paused, its running "
                f"trials were stopped and stay RUNNING; free some space, then: trials resume {self.store.job_id}"
            ) from full
        return state

    # ------------------------------------------------------------------ loop
    def _loop(self) -> None:
        while True:
            now = self.clock.monotonic()
            self.state.check_external_state(now)  # a cancel or a failure decided elsewhere
            if self._ahead is not None:
                self._ahead.pump()  # an answer that came; a spare suggestion asked after it
            if self.state.accepting_trials:
                self._fill_slots(now)
                self.state.max_parallel = max(self.state.max_parallel, len(self.running))
            if self.shared is not None and self.shared.beat_due():
                self._on_heartbeat(self.shared, now)
            n_running = len(self.running)
            if self.opt.memory_limit_mb and self.running:
                self._backend.check_memory()
            with self._pass_writes(now):
                for run in list(self.running.values()):
                    self._pass(run, now)
            self._start_claimed()
            if not self.running and not self.state.accepting_trials:
                return
            if not self.running and self.state.exhausted:
                return
            if len(self.running) < n_running and not self.state.exhausted:
                continue  # a trial just finished: fill its slot now, not one poll interval later
            waiting = self._ahead.fileno() if self._ahead is not None and self._slot_waits else None
            self._signals.wait(self.opt.poll_interval_s, () if waiting is None else (waiting,))

    def _cap(self) -> int:
        """How many trials run here at once."""
        cap = self.job.parallel_trial_count
        return min(cap, self.opt.slots) if self.opt.slots else cap

    def _fill_slots(self, now: float) -> None:
        cap = self._cap()
        self._slot_waits = False
        while len(self.running) < cap:
            if self._alloc is not None and self.opt.devices is not None \
                    and not self._alloc.fits(self.opt.devices.counts):
                return  # the next trial waits in REQUESTED until its devices are free
            if self.state.study_stop_due():
                self.state.exhausted = True
                self._stop_for_study(now)
                return
            suggestion = None
            if self._ahead is not None and not self.state.resumed_next:
                suggestion = self._ahead.take()
                if suggestion is None:
                    self._ahead.prefetch(needed=True)  # none asked yet (or being made): the slot waits for it
                    suggestion = self._ahead.take()  # (a random start-up one is ready at once)
                    if suggestion is None:
                        self._slot_waits = True  # the loop goes on, and wakes when the answer comes
                        if self._waits_since is None:
                            self._waits_since = now
                        return
                if self._waits_since is not None:  # what the slot lost to the sampler (meta suggest_wait_s)
                    self.state.suggest_wait_s += self.clock.monotonic() - self._waits_since
                    self._waits_since = None
            claimed = self._claim(now, suggestion)
            if claimed is None:
                return
            now = self.clock.monotonic()  # a suggestion can take seconds: the trial starts now
            self._launch(claimed, now)
            if self._ahead is not None:
                self._ahead.prefetch()  # the next trial's parameters, while this one runs

    def _claim(self, now: float, suggestion: Suggestion | None) -> Claimed | None:
        """The next trial claimed, its first attributes beside it: one journal write (None: nothing to claim)."""
        with self.store.batch():
            claimed = self.state.next_claim(now, suggestion)
            if claimed is not None and not claimed.resumed:
                self.store.set_trial_attrs(claimed.storage_id, **active_attrs(
                    claimed, job_dir=self.opt.job_dir, base_output=self.opt.base_output,
                    worker=self.state.worker_name, wall=self.clock.wall()))
        if claimed is None:
            if suggestion is not None and self._ahead is not None and suggestion.params is not None:
                self._ahead.give_back(suggestion)  # no trial to claim now (a shared job's slots)
            return None
        if suggestion is not None and suggestion.warning:
            self.emit(events.JobWarning(trial_id=claimed.trial_id,
                                        message=f"trial {claimed.trial_id}: {suggestion.warning}"))
        return claimed

    def _claim_beside_record(self, now: float) -> None:
        """A trial was just recorded: the next trial's claim joins that write (one lock, one write and one
        fsync on the way from one trial to the next, not two). Its replicas start once the write is made
        (``_start_claimed``, after the pass), as a claim's always do. Only where the claim is the loop's
        own plain case: no suggestions ahead (the slot may wait for one), no worker of a shared job (its
        claim is a lease), no devices to fit, no study stopping rule to ask; otherwise the next pass's
        ``_fill_slots`` claims, as before."""
        if (self._ahead is not None or self.shared is not None or self._alloc is not None
                or self.state.study_stopping is not None or not self.state.accepting_trials
                or self.state.exhausted or len(self.running) + len(self._claimed) >= self._cap()):
            return
        claimed = self._claim(now, None)
        if claimed is not None:
            self._claimed.append(claimed)

    def _start_claimed(self) -> None:
        """Start the trials claimed beside a record in the pass just made (their claims are written now)."""
        while self._claimed:
            self._launch(self._claimed.pop(0), self.clock.monotonic())

    def _stop_for_study(self, now: float) -> None:
        """The study stopped with ``shouldStopAsap``: its running trials stop now, as stopped early."""
        config = self.state.study_stopping
        if config is None or not config.should_stop_asap:
            return
        for run in self.running.values():
            if not run.stopping:
                run.stopped_early = run.stopped_by_study = True
                run.stop_detail = self.state.study_stopped or ""
                self._sup.begin_stop(run, now, StopReason.EARLY)

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
        run.metrics_read_at = now  # (the rate of its first reports is counted from here)
        self._metrics.resume_from_store(run)  # what earlier controllers read of it is kept, and
        self._store_metrics(run)  # what this one read of earlier attempts is stored before they restart
        for lau in run.launches:
            try:
                self._launcher.start(run, lau, attempt=0, echo=self.opt.echo)
            except BackendError as err:  # retried and failed again: Vertex's internal error
                run.launches = [x for x in run.launches if x.name in run.replicas]
                self._sup.fail(run, now, INTERNAL_ERROR_MESSAGE, (str(err),))
                return
            except (OSError, ConfigError) as err:
                run.launches = [x for x in run.launches if x.name in run.replicas]  # those started
                self._sup.fail(run, now, f"The trial could not be started: "
                                     f"{start_error_text(err, run.paths.trial_dir)}.")
                return
        if claimed.resumed:  # (a fresh claim got its attributes with the claim)
            attrs: dict[str, Any] = {"state": TrialState.ACTIVE.value, "trial_id": claimed.trial_id,
                                     "worker": self.state.worker_name, "trial_dir": run.paths.trial_dir}
            if self.shared is not None:
                attrs["attempts"] = run.attempts  # visible in `describe` while the re-run goes on
            self.store.set_trial_attrs(claimed.storage_id, **attrs)
        self.state.n_started += 1
        run.next_injection = self._chaos.next_due(now)
        self.emit(events.TrialStarted(trial_id=claimed.trial_id, params=claimed.params, resumed=claimed.resumed))

    # ------------------------------------------------------------------ one pass over a trial
    @contextlib.contextmanager
    def _pass_writes(self, now: float) -> Iterator[None]:
        """A pass that reads several trials' metrics writes what it read of all of them together: on a
        journal file one lock, one write and one fsync, on a database one transaction (its events reach
        the listeners after it, see ``__init__``). Not for a worker of a shared job: there a trial's
        writes are refused as a whole when its lease is another worker's, and must not take another
        trial's with them."""
        if self.shared is not None or len(self.running) < 2 or (
                self.job.study.stopping is None and all(now < r.next_metrics_poll for r in self.running.values())):
            yield  # (no reads due: nothing to write; a replica's exit has its own batch)
            return
        with self._events.held(), self.store.batch():
            yield

    def _pass(self, run: RunningTrial, now: float) -> None:
        if self.state.kill_now:
            for r in run.replicas.values():
                r.send_signal_group(signal.SIGKILL)
        exits = run.new_exits()  # THE snapshot: each exit below is classified exactly once
        if not exits:
            self._pass_on(run, now, exits)
            return
        # A replica exited: its last steps and, when the trial ends with it, the trial's record reach
        # the journal in one write and one fsync (each was its own, on the way to the next trial).
        with self._events.held(), self.store.batch():
            self._pass_on(run, now, exits)

    def _pass_on(self, run: RunningTrial, now: float, exits: dict[str, ReplicaExit]) -> None:
        self._on_metrics(run, now, final=bool(exits))
        self._tell_progress(run, now)
        for name, ended in exits.items():
            self._sup.on_exit(run, name, ended, now)
        self._sup.on_restarts_due(run, now)
        self._sup.on_timers(run, now, self.state.job_stop_reason)
        self._sup.on_policy(run, now)  # the caller's trial policy: go on, interrupt, stop
        if run.stopping:
            for name, r in run.replicas.items():
                if name not in run.exited:
                    r.advance_stop(now, self.opt.grace_period_s)
        if run.all_exits_classified() and self._sup.groups_gone(run, now):
            self._finalize(run)

    def _on_metrics(self, run: RunningTrial, now: float, *, final: bool) -> None:
        if run.lost:
            return  # the trial is another worker's now: nothing more is written for it here
        # Without a stopping rule nothing is decided on the way: read on the METRICS_POLL_S clock
        # (and when a replica exits); with one, read every pass.
        timed = self.job.study.stopping is None and not final
        if timed and now < run.next_metrics_poll:
            return
        changed = run.reader.poll()
        if timed:
            run.next_metrics_poll = self._next_metrics_read(run, now)
        if not changed:
            return
        self._metrics.warn_unknown_tags(run)
        self._wrong_tags(run)
        if not self._store_metrics(run) or run.stopping:
            return
        decision = self._metrics.early_stop(run, list(self.running.values()))
        if decision is not None and decision.stop:
            run.stopped_early = True
            run.stop_detail = decision.reason
            if decision.predicted_final is not None and decision.predicted_x is not None:
                run.predicted = (decision.predicted_x, decision.predicted_final)
            self._sup.begin_stop(run, now, StopReason.EARLY)  # ACTIVE -> STOPPING

    def _wrong_tags(self, run: RunningTrial) -> None:
        """A trial that reports only other tags than the spec's, in a job where none reported the spec's metric:
        the job fails now, not three infeasible trials later (``tags.wrong_tag_failure``)."""
        reader = run.reader
        if self.state.job_error is not None or not reader.unknown_tags or reader.n_other_steps < tags.WRONG_TAG_STEPS:
            return
        ids = self.job.study.metric_ids
        seen = self.state.n_succeeded > 0 or any(
            any(m in r.reader.reported_tags for m in ids) for r in self.running.values())
        error = tags.wrong_tag_failure(self.job, trial_id=run.trial_id, reported=reader.reported_tags,
                                       n_other_steps=reader.n_other_steps, spec_metric_seen=seen,
                                       keep_going=self.opt.keep_going, source=reader.source)
        if error is not None:
            self.state.job_error = error  # every running trial stops (JOB_END); the job ends FAILED

    @staticmethod
    def _next_metrics_read(run: RunningTrial, now: float) -> float:
        """When a running trial's metrics are read next (it was read at ``now``)."""
        reader = run.reader
        if reader.source == protocol.METRICS_LOG:
            return next_tick(now, METRICS_POLL_S)  # lossless: nothing to lose by waiting
        if reader.reread_soon:
            return now  # in the middle of a rewrite: again on the next pass
        since, run.metrics_read_at = now - run.metrics_read_at, now
        if reader.source is None:  # nothing reported yet: its first second may overflow the file
            return next_tick(now, METRICS_POLL_S / 2 ** METRICS_POLL_HALVINGS)
        return next_tick(now, metrics_period(METRICS_POLL_S, reader.new_reports, since))

    def _tell_progress(self, run: RunningTrial, now: float) -> None:
        """The listener hears of a running trial's new steps, and every PROGRESS_TICK_S that it runs on."""
        n = len(run.stored)
        if run.lost or (n == run.progress_n and now - run.progress_at < PROGRESS_TICK_S):
            return
        run.progress_n, run.progress_at = n, now
        step = max(run.stored) if run.stored else None
        values = run.stored[step] if step is not None else {}
        self.emit(events.TrialProgress(trial_id=run.trial_id, step=step, seconds=max(0.0, now - run.start_mono),
                                       metrics={m: values[m] for m in self.job.study.metric_ids if m in values},
                                       other=run.reader.other_tags))

    def _on_heartbeat(self, shared: SharedJob, now: float) -> None:
        lost = set(shared.beat([r.claimed.storage_id for r in self.running.values() if not r.lost]))
        for run in self.running.values():
            if run.claimed.storage_id in lost and not run.lost:
                self._lose(run, now)

    def _lose(self, run: RunningTrial, now: float) -> None:
        """Another worker took the trial over: stop its replicas here, write nothing more for it."""
        self.emit(events.JobWarning(trial_id=run.trial_id, message=(
            f"trial {run.trial_id}: another worker took it over (this worker missed its "
            f"heartbeats); stopping it here")))
        run.stop_reason = None  # whatever it was stopping for, it is not ours to record
        self._sup.begin_stop(run, now, StopReason.LOST)

    def _store_metrics(self, run: RunningTrial) -> bool:
        """Store the steps read and not stored yet; False if none (or the trial is lost here)."""
        try:
            return self._metrics.report_new(run)
        except RuntimeError as err:
            if self._taken_over(run, err):
                return False
            raise

    def _taken_over(self, run: RunningTrial, err: RuntimeError) -> bool:
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
    def _finalize(self, run: RunningTrial) -> None:
        del self.running[run.trial_id]
        if self._alloc is not None:
            self._alloc.release(run.trial_id)
        for name, r in run.replicas.items():
            r.close()
            ended = r.poll()
            if ended is not None and ended.leftovers:  # killed after its leader exited
                self.emit(events.JobWarning(trial_id=run.trial_id, message=(
                    f"trial {run.trial_id}: {name} exited and left {len(ended.leftovers)} processes running; "
                    f"killed them: {', '.join(ended.leftovers)}")))
        if not run.lost:
            try:
                # its last steps, attributes, state and lease: one journal write, one database transaction
                # (which writes nothing if its lease is another worker's now)
                with self.store.batch():
                    recorded = record_trial(self.store, self.job, self._metrics, run, shared=self.shared,
                                            clock=self.clock,
                                            job_failure=self.state.first_failure or self.state.job_error)
                    if recorded.succeeded and not (recorded.failure or recorded.infeasible or recorded.requeued):
                        self._claim_beside_record(self.clock.monotonic())  # (a failure may fail the job: not then)
            except NotHeldError:
                run.stop_reason = StopReason.LOST
            except RuntimeError as err:
                if not self._taken_over(run, err):
                    raise
            else:
                self._recorded(run, recorded)
        if run.lost:
            self.emit(events.TrialRequeued(trial_id=run.trial_id, lost=True))
            # the worker that took it over records it

    def _recorded(self, run: RunningTrial, recorded: TrialRecorded) -> None:
        """The job counts a recorded trial; the listener hears of it (warnings first, then its end)."""
        first_repeat = self.state.trial_recorded(recorded, run.trial_id)
        for warning in recorded.warnings:
            self.emit(warning)
        if first_repeat:  # once per job: every trial of a trainer does it
            self.emit(events.JobWarning(trial_id=run.trial_id, message=first_repeat))
        if recorded.final is not None:
            self.emit(recorded.final)

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

    def _trial_attr(self, claimed: Claimed, key: str) -> Any:
        frozen = claimed.stored or self.store.storage.get_trial(claimed.storage_id)
        return frozen.user_attrs.get(key)


def metrics_period(base: float, new_reports: int, seconds: float) -> float:
    """The period of a trial's next metrics read: ``base``, halved (at most METRICS_POLL_HALVINGS
    times) until a read at the rate of the last one (``new_reports`` in ``seconds``) finds at most
    HYPERTUNE_READ_SHARE new reports, so a cloudml-hypertune file (its last 100 kept) is read
    before it overflows, whatever the slowdowns of a loaded machine (pure).

    Example:
        >>> metrics_period(1.0, 20, 1.0), metrics_period(1.0, 66, 1.0), metrics_period(1.0, 500, 1.0)
        (1.0, 0.25, 0.0625)
    """
    rate = new_reports / max(seconds, 1e-3)
    period = base
    for _ in range(METRICS_POLL_HALVINGS):
        if rate * period <= HYPERTUNE_READ_SHARE:
            break
        period /= 2
    return period


def next_tick(now: float, period: float) -> float:
    """The first multiple of ``period`` after ``now``: every trial's reads fall due in the same pass (pure)."""
    return (math.floor(now / period) + 1) * period


__all__ = ["JobRunner", "LoopOptions"]

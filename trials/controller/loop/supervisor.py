"""What happens to one running trial's replicas: exits, restarts, stops, timeouts, chaos injections,
and what the loop's caller asks (its ``TrialPolicy``: an interruption, a stop).

Each handler consumes one event of a loop pass and asks a pure function what it means
(``running.decide_exit``, ``policy``, ``chaos``), then the caller's trial policy; its effects are
signals to the replicas (through their handles), replica starts (through the launcher and its
injected factory), the ``STOP`` file, and events for the listener.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from trials.controller.backend.protocol import INTERNAL_ERROR_MESSAGE, BackendError, ReplicaExit
from trials.controller.loop import events
from trials.controller.loop.chaos import Chaos
from trials.controller.loop.effects import Clock
from trials.controller.loop.launcher import TrialLauncher, start_error_text
from trials.controller.loop.running import ExitAction, RunningTrial, decide_exit
from trials.controller.loop.trial_policy import LoopRules, PassAction, TrialPolicy
from trials.controller.policy import exits
from trials.controller.trial.files import request_stop, stderr_tail
from trials.errors import ConfigError
from trials.records import StopReason, TrialState
from trials.study.store import JobStore


class TrialSupervisor:
    """Handles the events of running trials for one job loop."""

    def __init__(self, *, store: JobStore, launcher: TrialLauncher, chaos: Chaos, clock: Clock,
                 emit: events.Emit, grace_s: float, timeout_s: float | None,
                 restart_all: bool, echo: TextIO | None,
                 save_metrics: Callable[[RunningTrial], object] | None = None,
                 trial_policy: TrialPolicy | None = None):
        self.store = store
        self.launcher = launcher
        self.chaos = chaos
        self.clock = clock
        self.emit = emit
        self.grace_s = grace_s
        self.timeout_s = timeout_s
        self.restart_all = restart_all
        self.echo = echo
        self.save_metrics = save_metrics  # stores what was read of a trial (before a restart)
        self.trial_policy: TrialPolicy = trial_policy or LoopRules()  # the caller's say (check's probes)
        self.n_injected = 0

    def on_exit(self, run: RunningTrial, name: str, ended: ReplicaExit, now: float) -> None:
        r = run.replicas[name]
        status = ended.status
        entry = run.record_exit(name, ended)
        entry.update(ended.placement)  # where it ran (a Slurm job and node), for describe's local view
        r.close()
        lau = run.launch_of(name)
        decision = decide_exit(
            status, replica=name, is_primary=lau.is_primary, oom_killed=ended.oom_killed,
            told_to_stop=r.stop_requested_at is not None, trial_stop=run.stop_reason,
            restart_pending=name in run.restart_at, n_crash_restarts=run.n_crash_restarts(name),
            stderr_tail=stderr_tail(run.paths.trial_dir, name, status) if status else (),
            n_job_retries=run.job_retries,
        )
        decision = self.trial_policy.on_exit(run, name, decision)
        if decision.action in (ExitAction.RESTART, ExitAction.RETRY_JOB):
            if decision.message:
                entry["reason"] = decision.message
            if decision.detail:
                entry["detail"] = list(decision.detail)
            if decision.budget:
                entry["budget"] = decision.budget  # which Vertex retry budget this restart uses
            if decision.action is ExitAction.RETRY_JOB:
                self._retry_job(run, name, status, now, decision.budget)
            else:
                self._schedule_restart(run, name, now, injected=decision.injected,
                                       budget=decision.budget)
        elif decision.action is ExitAction.SUCCESS:
            self.begin_stop(run, now, StopReason.SUCCESS)  # the primary exited 0: stop the others
        elif decision.action is ExitAction.FAIL:
            self.fail(run, now, decision.message or exits.exit_message(name, status), decision.detail)

    def _schedule_restart(self, run: RunningTrial, name: str, now: float, *, injected: bool,
                          budget: str = "") -> None:
        names = [lau.name for lau in run.launches] if self.restart_all else [name]
        for other in names:
            if other not in run.exited:
                run.replicas[other].begin_stop(now)  # restartJobOnWorkerRestart: the whole trial restarts
        run.schedule_restart(names, now, injected=injected, cause=name)
        why = "injected maintenance restart" if injected else f"exit {run.exited.get(name)}, {budget}"
        if self.restart_all and len(names) > 1 and not injected:
            why += ", with the whole trial (restartJobOnWorkerRestart)"
        self.emit(events.ReplicaRestart(trial_id=run.trial_id, replica=name, why=why, restarts=run.restarts[name]))

    def _retry_job(self, run: RunningTrial, name: str, status: int, now: float, budget: str) -> None:
        """A transient exit (SIGABRT, SIGSEGV), or a worker's restarts used up: Vertex retries the whole
        job; here the trial's CustomJob, every replica started again (same trial id, ``TRIALS_ATTEMPT`` + 1)."""
        names = [lau.name for lau in run.launches]
        for other in names:
            if other not in run.exited:
                run.replicas[other].begin_stop(now)
        run.retry_job(names, now)
        self.emit(events.ReplicaRestart(
            trial_id=run.trial_id, replica=name, restarts=run.restarts[name],
            why=f"{'exit' if 'worker restarts' in budget else 'transient exit'} {status}: "
                f"the trial's CustomJob runs again, {budget}"))

    def on_restarts_due(self, run: RunningTrial, now: float) -> None:
        for name in list(run.restart_at):
            r = run.replicas[name]
            r.begin_stop(now)  # the leader or what is left of its group
            if not r.advance_stop(now, self.grace_s):
                continue
            del run.restart_at[name]
            ended = r.poll()
            if name not in run.exited and ended is not None:  # stopped for the restart: booked, not judged
                run.record_exit(name, ended)
                r.close()
            if run.stopping:
                continue
            lau = run.launch_of(name)
            if lau.is_primary:
                run.reader.poll(final=True)  # the last reports of the attempt that ended,
                if self.save_metrics is not None:  # stored before the new process rewrites its file
                    self.save_metrics(run)
                run.reader.on_restart()
            try:
                run.running_attempt[name] = run.restarts[name]
                self.launcher.start(run, lau, attempt=run.restarts[name], echo=self.echo)
            except BackendError as err:  # retried and failed again: Vertex's internal error
                self.fail(run, now, INTERNAL_ERROR_MESSAGE, (str(err),))
            except (OSError, ConfigError) as err:  # e.g. a full disk: the trial fails, the job goes on
                self.fail(run, now, f"The replica {name} could not be restarted: "
                                     f"{start_error_text(err, run.paths.trial_dir)}.")

    def on_timers(self, run: RunningTrial, now: float, job_stop: StopReason | None) -> None:
        if run.stopping:
            return
        if self.timeout_s and now - run.start_mono > self.timeout_s:
            run.failure = exits.timeout_message(self.timeout_s)
            self.begin_stop(run, now, StopReason.TIMEOUT)
        elif job_stop is not None:
            self.begin_stop(run, now, job_stop)
        elif now >= run.next_injection:
            self._inject(run, now)

    def on_policy(self, run: RunningTrial, now: float) -> None:
        """The trial policy's word at the end of a pass: go on, interrupt the trial, or stop it."""
        action = self.trial_policy.on_pass(run, now)
        if run.stopping or action is PassAction.GO_ON:
            return
        if action is PassAction.INTERRUPT:
            self.interrupt(run, now)
        else:
            self.begin_stop(run, now, StopReason.TIMEOUT)  # ACTIVE -> STOPPING, as at its timeout

    def interrupt(self, run: RunningTrial, now: float) -> None:
        """A maintenance event on the whole trial: every replica gets SIGTERM and starts again
        (``TRIALS_ATTEMPT`` + 1) once its group is gone, whatever its exit (restart pending: the exit
        is recorded, not judged); no restart budget is used."""
        names = [lau.name for lau in run.launches if lau.name in run.replicas and lau.name not in run.restart_at]
        for name in names:
            if name not in run.exited:
                run.replicas[name].begin_stop(now)  # SIGTERM, as before VM maintenance
        run.schedule_restart(names, now, injected=True)
        run.injected += 1
        for name in names:
            self.emit(events.InjectedRestart(trial_id=run.trial_id, replica=name))

    def _inject(self, run: RunningTrial, now: float) -> None:
        run.next_injection = self.chaos.next_due(now)
        name = self.chaos.pick(run.injectable())
        if name is None:
            return
        run.replicas[name].begin_stop(now)  # SIGTERM, as before VM maintenance
        run.injected += 1
        self.n_injected += 1
        self.emit(events.InjectedRestart(trial_id=run.trial_id, replica=name))

    def fail(self, run: RunningTrial, now: float, message: str, detail: tuple[str, ...] = ()) -> None:
        if run.failure is None:
            run.failure, run.failure_detail = message, detail
        self.begin_stop(run, now, StopReason.FAILED)

    def begin_stop(self, run: RunningTrial, now: float, reason: StopReason) -> None:
        if run.stopping and run.stop_reason is not StopReason.SUCCESS:
            return
        run.stop_reason = reason
        run.restart_at.clear()
        if reason not in (StopReason.LOST, StopReason.SUCCESS):  # a lost trial's folder is another worker's
            request_stop(run.paths.trial_dir)  # the runtime also watches this file (trainers masking SIGTERM)
        live = [r for name, r in run.replicas.items() if name not in run.exited]
        for r in live:
            r.begin_stop(now)
        if reason in (StopReason.EARLY, StopReason.TIMEOUT):  # ACTIVE -> STOPPING during the grace
            self.store.set_trial_attrs(run.claimed.storage_id, state=TrialState.STOPPING.value)
        if reason is StopReason.FAILED:  # the failure itself is said once, when the trial ends
            if live:
                self.emit(events.TrialStopping(trial_id=run.trial_id, reason=reason,
                                               detail="stopping its other replicas"))
        elif reason is not StopReason.SUCCESS:
            self.emit(events.TrialStopping(trial_id=run.trial_id, reason=reason,
                                           detail=run.stop_detail or run.failure or ""))

    def groups_gone(self, run: RunningTrial, now: float) -> bool:
        """Every leader exited: stop what is left of their groups (children that outlived them)."""
        done = True
        for r in run.replicas.values():
            r.begin_stop(now)
            done = r.advance_stop(now, self.grace_s) and done
        return done

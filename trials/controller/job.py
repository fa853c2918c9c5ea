"""The job loop: claim trials, start their replicas, watch them, decide, record. One thread.

Decisions come from pure modules (``policy``, ``stopping``, ``launch``); effects are processes
(``process``), files in the trial directory and the Optuna storage (``study``).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from trials import protocol
from trials.controller import launch, policy, stopping
from trials.controller.devices import DeviceAllocator, DevicePlan, replica_env
from trials.controller.metrics_reader import TrialMetricsReader
from trials.controller.process import Replica, check_memory_all, free_port, reap_leftovers, start_replica, tail_lines
from trials.controller.signals import LoopSignals
from trials.errors import ConfigError
from trials.records import Measurement, measurement_from_dict, measurement_to_dict
from trials.spec import JobSpec, Scheduling
from trials.study.store import Claimed, JobStore
from trials.timefmt import rfc3339

# Vertex job states
QUEUED, PENDING, RUNNING = "JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING"
SUCCEEDED, FAILED = "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"
CANCELLING, CANCELLED = "JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"
FINAL_STATES = (SUCCEEDED, FAILED, CANCELLED)

DEFAULT_GRACE_S = 10.0
STATE_CHECK_INTERVAL_S = 1.0
METRICS_POLL_S = 0.25  # metric reads of a running trial when no stopping rule needs every step
FULL_DISK_BYTES = 64 * 1024  # less free space than this under a trial directory: the disk is full


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


@dataclass(eq=False)
class TrialRun:
    claimed: Claimed
    paths: launch.TrialPaths
    launches: list[launch.ReplicaLaunch]
    reader: TrialMetricsReader
    start_wall: float
    start_mono: float
    replicas: dict[str, Replica] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    exited: dict[str, int] = field(default_factory=dict)  # replica -> last exit status
    attempts: list[dict[str, Any]] = field(default_factory=list)
    stopping: bool = False
    stop_reason: str | None = None  # early | timeout | failed | cancel | job_end | success
    failure: str | None = None
    stopped_early: bool = False
    stop_detail: str = ""
    predicted: tuple[float, float] | None = None  # convex rule: (x, oriented value)
    reported_steps: int = -1
    live_elapsed: dict[str, float] = field(default_factory=dict)  # step -> elapsed s, for describe
    failure_detail: tuple[str, ...] = ()  # the exception and traceback tail, for the local view
    warned_tags: bool = False
    injected: int = 0
    injected_by: dict[str, int] = field(default_factory=dict)  # replica -> injected restarts
    next_injection: float = math.inf
    restart_at: dict[str, float] = field(default_factory=dict)
    devices: tuple[tuple[str, ...], ...] | None = None  # per replica, primary first
    lost: bool = False  # another worker took the trial over: record nothing
    pid_records: list[dict[str, Any]] = field(default_factory=list)
    next_metrics_poll: float = 0.0

    @property
    def trial_id(self) -> str:
        return self.claimed.trial_id


class JobRunner:
    """Runs one job until every trial is done, the job fails, or it is cancelled."""

    def __init__(self, store: JobStore, job: JobSpec, options: RunOptions, *,
                 progress: Callable[[str, dict], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.job = job
        self.opt = options
        self.progress = progress or (lambda event, data: None)
        self.clock = clock
        self.running: dict[str, TrialRun] = {}
        self.cancel_requested = False
        self.kill_now = False
        self.exhausted = False
        self.job_error: str | None = None
        self.n_failed = 0
        self.n_succeeded = 0
        self.first_failure: str | None = None
        self.max_parallel = 0
        self.injected_total = 0
        self.conflicts_total = 0
        self.lost_steps_total = 0  # chaos mode: gaps in the step sequence of restarted trials
        self._curves_cache: list[list[tuple[float, float]]] | None = None
        self._last_state_check = 0.0
        self._pending_resumed: list[Claimed] = []
        self._rng = random.Random(options.seed)
        self._signals = LoopSignals()
        self._metric_ids = job.study.metric_ids
        self._warned_tag_sets: set[frozenset[str]] = set()
        self._spec_rest = store.get_meta("spec") or {}
        self._trial_job_rest = dict(self._spec_rest.get("trialJobSpec", {}))
        self.shared = options.shared
        self.worker_name = self.shared.me if self.shared else f"{socket.gethostname()}:{os.getpid()}"
        self.leaving = False  # a joined worker asked to stop: its trials go back to the queue
        self.n_started = 0
        self._next_claim_at = 0.0
        plan = options.devices
        self._alloc = DeviceAllocator(plan.devices) if plan and plan.devices is not None else None

    # ------------------------------------------------------------------ public
    def resume_running(self) -> int:
        """Queue the trials left RUNNING by a dead controller to run again (same id and params)."""
        for frozen in self.store.running_trials():
            self._pending_resumed.append(self.store.reclaim(frozen, self.job.study))
        return len(self._pending_resumed)

    def run(self) -> str:
        """Run the job; returns its final Vertex job state."""
        self._count_finished()
        now_wall = time.time()
        if self.store.get_meta("start_time") is None:
            self.store.set_meta(start_time=rfc3339(now_wall))
        if not self.opt.join:
            self.store.set_meta(state=RUNNING, end_time=None, error=None, controller=self.worker_name)
        elif self.store.get_meta("state") in (QUEUED, PENDING):
            self.store.set_meta(state=RUNNING)
        self.progress("job_running", {})
        restore = self._install_signals()
        try:
            self._loop()
        finally:
            self._stop_everything()
            restore()
        return self._finish_job()

    def request_cancel(self) -> None:
        self.cancel_requested = True

    # ------------------------------------------------------------------ loop
    def _loop(self) -> None:
        while True:
            now = self.clock()
            self._check_external_state(now)
            if self.cancel_requested and self.store.get_meta("state") != CANCELLING:
                self.store.set_meta(state=CANCELLING)
                self.progress("job_cancelling", {})
            if not self.cancel_requested and self.job_error is None and not self.leaving:
                self._fill_slots(now)
                self.max_parallel = max(self.max_parallel, len(self.running))
            if self.shared is not None and self.shared.beat_due():
                self._heartbeat(now)
            n_running = len(self.running)
            for run in list(self.running.values()):
                self._tick(run, now)
            if not self.running and (self.cancel_requested or self.job_error or self.exhausted
                                     or self.leaving):
                return
            if len(self.running) < n_running and not self.exhausted:
                continue  # a trial just finished: fill its slot now, not one poll interval later
            self._wait(self.opt.poll_interval_s)

    def _fill_slots(self, now: float) -> None:
        cap = self.job.parallel_trial_count
        if self.opt.slots:
            cap = min(cap, self.opt.slots)
        while len(self.running) < cap:
            if self._alloc is not None and not self._alloc.fits(self.opt.devices.counts):
                return  # the next trial waits in REQUESTED until its devices are free
            if self._pending_resumed:
                claimed = self._pending_resumed.pop(0)
            elif self.shared is not None:
                if now < self._next_claim_at:
                    return
                claimed = self.shared.claim(self.job.study, cap=self.job.parallel_trial_count)
                if claimed is None:
                    # Nothing claimable: wait for a free global slot or a stale trial to take over,
                    # until no trial of the job is waiting or running anywhere.
                    self.exhausted = self.shared.n_waiting == 0 and self.shared.n_running == 0
                    self._next_claim_at = now + min(1.0, self.shared.heartbeat_s)
                    return
            else:
                claimed = self.store.claim(self.job.study)
                if claimed is None:
                    self.exhausted = True
                    return
            try:
                self._launch(claimed, now)
            except (OSError, ConfigError) as err:  # a full disk, a missing command: the trial fails
                self._fail_launch(claimed, now, err)

    def _fail_launch(self, claimed: Claimed, now: float, err: OSError | ConfigError) -> None:
        """The trial could not be prepared or started: it fails with the reason, the job goes on."""
        run = self.running.get(claimed.trial_id)
        if run is None:
            paths = launch.trial_paths(self.opt.job_dir, self.opt.base_output, claimed.trial_id)
            reader = TrialMetricsReader(os.path.join(paths.trial_dir, protocol.HYPERTUNE_FILE),
                                        os.path.join(paths.trial_dir, protocol.METRICS_LOG),
                                        self.job.study.reported_metric_ids, start_time=time.time())
            run = TrialRun(claimed=claimed, paths=paths, launches=[], reader=reader,
                           start_wall=time.time(), start_mono=now)
            self.running[claimed.trial_id] = run
        run.launches = [lau for lau in run.launches if lau.name in run.replicas]  # those started
        run.failure = f"The trial could not be started: {_os_error_text(err, run.paths.trial_dir)}."
        self._begin_stop(run, now, "failed")

    def _check_external_state(self, now: float) -> None:
        if now - self._last_state_check < STATE_CHECK_INTERVAL_S:
            return
        self._last_state_check = now
        state = self.store.get_meta("state")
        if state in (CANCELLING, CANCELLED):
            self.cancel_requested = True
        elif self.shared is not None and state == FAILED and self.job_error is None:
            error = self.store.get_meta("error") or {}
            self.job_error = error.get("message") or "another worker ended the job FAILED"

    def _heartbeat(self, now: float) -> None:
        lost = set(self.shared.beat([r.claimed.storage_id for r in self.running.values() if not r.lost]))
        for run in self.running.values():
            if run.claimed.storage_id in lost:
                run.lost = True
                self.progress("warning", {"trial_id": run.trial_id, "message": (
                    f"trial {run.trial_id}: another worker took it over (this worker missed its "
                    f"heartbeats); stopping it here")})
                self._begin_stop(run, now, "lost")

    # ------------------------------------------------------------------ launch
    def _launch(self, claimed: Claimed, now: float) -> None:
        paths = launch.trial_paths(self.opt.job_dir, self.opt.base_output, claimed.trial_id)
        os.makedirs(paths.trial_dir, exist_ok=True)
        stop_file = os.path.join(paths.trial_dir, protocol.STOP_FILE)
        if os.path.exists(stop_file):
            os.unlink(stop_file)
        for d in (paths.model_dir, paths.checkpoint_dir, paths.tensorboard_dir):
            os.makedirs(protocol.local_path(d, self.opt.gcs_root), exist_ok=True)
        n_replicas = len(self.job.trial_job.replicas()) if self.job.trial_job else 1
        ports = [free_port() for _ in range(n_replicas)] if n_replicas > 1 else [2222]
        launches = launch.build_replicas(
            job=self.job, job_id=self.store.job_id, trial_id=claimed.trial_id,
            params=claimed.params, paths=paths, project_number=self.opt.project_number,
            local_command=self.opt.local_command, base_env=launch.clean_base_env(os.environ, self.opt.pass_env),
            ports=ports, gcs_root=self.opt.gcs_root, job_spec_rest=self._trial_job_rest,
        )
        primary = launches[0]
        reader = TrialMetricsReader(
            primary.metric_file, os.path.join(paths.trial_dir, protocol.METRICS_LOG),
            self.job.study.reported_metric_ids, start_time=time.time(),
        )
        run = TrialRun(claimed=claimed, paths=paths, launches=launches, reader=reader,
                       start_wall=time.time(), start_mono=now)
        if self._alloc is not None:
            run.devices = self._alloc.allocate(claimed.trial_id, self.opt.devices.counts)
        if claimed.resumed:
            # Measurements of earlier attempts stay in the trial directory and are read again.
            run.attempts = list(self._trial_attr(claimed, "attempts") or [])
            entry = {"reason": claimed.resume_reason or "resumed after the controller stopped",
                     "time": rfc3339(time.time())}
            if claimed.previous_worker:
                entry["worker"] = claimed.previous_worker
                self._reap_previous(claimed.previous_worker, paths.trial_dir)
            run.attempts.append(entry)
            reader.poll(final=True)  # what the earlier attempt reported (its processes are gone)
            reader.on_restart()
        self._write_json(os.path.join(paths.trial_dir, protocol.ARGS_FILE), {
            "trial_id": claimed.trial_id, "parameters": claimed.params,
            "replicas": {l.name: list(l.argv) for l in launches},
        })
        self._write_json(os.path.join(paths.trial_dir, protocol.ENV_FILE), {
            l.name: {k: v for k, v in l.env.items() if k not in os.environ or os.environ.get(k) != v}
            for l in launches
        })
        self.running[claimed.trial_id] = run
        for lau in launches:
            self._start(run, lau, attempt=0)
        attrs: dict[str, Any] = {"state": "ACTIVE", "trial_id": claimed.trial_id,
                                 "worker": self.worker_name, "trial_dir": paths.trial_dir}
        if not claimed.resumed:
            attrs["start_time"] = rfc3339(run.start_wall)
        elif self.shared is not None:
            attrs["attempts"] = run.attempts  # visible in `describe` while the re-run goes on
        self.store.set_trial_attrs(claimed.storage_id, **attrs)
        self.n_started += 1
        if self.opt.inject_restarts > 0:
            run.next_injection = now + self._rng.expovariate(self.opt.inject_restarts)
        self.progress("trial_started", {"trial_id": claimed.trial_id, "params": claimed.params,
                                        "resumed": claimed.resumed})

    def _start(self, run: TrialRun, lau: launch.ReplicaLaunch, *, attempt: int) -> None:
        env = dict(lau.env)
        env[protocol.ENV_ATTEMPT] = str(attempt)
        if self.opt.devices is not None:
            group = run.devices[run.launches.index(lau)] if run.devices is not None else None
            env.update(replica_env(group, hide=self.opt.devices.hide))
        replica = start_replica(
            list(lau.argv), env=env, cwd=self.opt.cwd,
            stdout_path=os.path.join(run.paths.trial_dir, protocol.stdout_log(lau.name)),
            stderr_path=os.path.join(run.paths.trial_dir, protocol.stderr_log(lau.name)),
            name=f"{run.trial_id}/{lau.name}" if self.opt.echo else lau.name,
            echo=self.opt.echo, memory_limit_mb=self.opt.memory_limit_mb,
        )
        run.replicas[lau.name] = replica
        run.exited.pop(lau.name, None)
        self._record_pids(run, replica)

    def _reap_previous(self, previous_worker: str, trial_dir: str) -> None:
        """A dead worker on this host may have left replicas of the trial running: stop them."""
        if previous_worker.rsplit(":", 1)[0] != socket.gethostname():
            return
        try:
            with open(os.path.join(trial_dir, "pids.json"), encoding="utf-8") as f:
                records = json.load(f)
        except (OSError, ValueError):
            return
        if records:
            reap_leftovers(records)

    def _record_pids(self, run: TrialRun, replica: Replica) -> None:
        # Every replica started in this run stays listed: a resumed controller reaps their groups.
        run.pid_records.append(replica.record())
        self._write_json(os.path.join(run.paths.trial_dir, "pids.json"), run.pid_records)

    # ------------------------------------------------------------------ tick
    def _tick(self, run: TrialRun, now: float) -> None:
        if self.kill_now:
            for r in run.replicas.values():
                r.send_signal_group(signal.SIGKILL)
        if self.opt.memory_limit_mb:
            check_memory_all(r for r in run.replicas.values() if r.poll() is None)
        self._poll_metrics(run, now)
        self._check_exits(run, now)
        self._maybe_restart_later(run, now)
        timeout = (self.job.trial_job.scheduling if self.job.trial_job else Scheduling()).timeout_s
        if not run.stopping and timeout and now - run.start_mono > timeout:
            run.failure = policy.timeout_message(timeout)
            self._begin_stop(run, now, "timeout")
        if not run.stopping and self.cancel_requested:
            self._begin_stop(run, now, "cancel")
        if not run.stopping and self.leaving:
            self._begin_stop(run, now, "leave")
        if not run.stopping and self.job_error is not None:
            self._begin_stop(run, now, "job_end")
        if not run.stopping and now >= run.next_injection:
            self._inject_restart(run, now)
        if run.stopping:
            for name, r in run.replicas.items():
                if name not in run.exited or r.poll() is None:
                    r.advance_stop(now, self.opt.grace_period_s)
        if self._all_exited(run):
            self._finalize(run)

    def _all_exited(self, run: TrialRun) -> bool:
        if run.restart_at:
            return False
        # Only exits that _check_exits classified count: a replica that exited after that poll
        # (a crash, an injected SIGTERM landing during start-up) is classified on the next tick,
        # never judged by what its trial reported so far.
        if any(name not in run.exited for name in run.replicas):
            return False
        # Every leader exited: stop what is left of their groups (children that outlived them).
        now = self.clock()
        done = True
        for r in run.replicas.values():
            r.begin_stop(now)
            done = r.advance_stop(now, self.opt.grace_period_s) and done
        return done

    def _check_exits(self, run: TrialRun, now: float) -> None:
        for lau in run.launches:
            r = run.replicas[lau.name]
            if lau.name in run.exited or r.poll() is None:
                continue
            status = r.exit_status
            run.exited[lau.name] = status
            run.attempts.append({
                "replica": lau.name, "attempt": run.restarts.get(lau.name, 0), "exitStatus": status,
                "time": rfc3339(time.time()), "oomKilled": bool(r.oom_killed),
            })
            r.close()
            if run.stopping and run.stop_reason != "failed":
                continue
            if lau.name in run.restart_at:
                continue  # stopped to be restarted (restartJobOnWorkerRestart): already decided
            tail = tail_lines(os.path.join(run.paths.trial_dir, protocol.stderr_log(lau.name)), 20)
            if status and not any(line.strip() for line in tail):
                tail = _full_disk_reason(run.paths.trial_dir)
            injected = r.stop_requested_at is not None and run.stop_reason is None
            # Injected maintenance restarts do not use up the budget for crashes.
            n_crash_restarts = run.restarts.get(lau.name, 0) - run.injected_by.get(lau.name, 0)
            decision = policy.classify_exit(
                status, replica=lau.name, stop_requested=run.stopping, oom_killed=r.oom_killed,
                restarts_so_far=0 if injected else n_crash_restarts, stderr_tail=tail,
            )
            if injected and decision.kind in (policy.ExitKind.STOPPED, policy.ExitKind.RESTARTABLE,
                                              policy.ExitKind.SUCCEEDED):
                # chaos mode: the replica was told to stop for "maintenance"; restart it.
                if decision.kind is not policy.ExitKind.SUCCEEDED or not lau.is_primary:
                    self._schedule_restart(run, lau, now, "injected maintenance restart")
                    continue
            kind = decision.kind
            if kind is policy.ExitKind.SUCCEEDED:
                if lau.is_primary:
                    run.stop_reason = "success"  # the primary exited 0: stop the other replicas
                    run.stopping = True
                    for other in run.replicas.values():
                        if other.poll() is None:
                            other.begin_stop(now)
            elif kind is policy.ExitKind.RESTARTABLE:
                run.attempts[-1]["reason"] = policy.exit_message(lau.name, status)
                if decision.detail:
                    run.attempts[-1]["detail"] = list(decision.detail)
                self._schedule_restart(run, lau, now, "exit")
            elif kind in (policy.ExitKind.PERMANENT, policy.ExitKind.OOM):
                run.failure = decision.message
                run.failure_detail = decision.detail
                self._begin_stop(run, now, "failed")

    def _schedule_restart(self, run: TrialRun, lau: launch.ReplicaLaunch, now: float, why: str) -> None:
        spec = self.job.trial_job.scheduling if self.job.trial_job else Scheduling()
        names = [l.name for l in run.launches] if spec.restart_job_on_worker_restart else [lau.name]
        for name in names:
            r = run.replicas[name]
            if r.poll() is None:
                r.begin_stop(now)  # restartJobOnWorkerRestart: the whole trial restarts
            run.restarts[name] = run.restarts.get(name, 0) + 1
            if why.startswith("injected"):
                run.injected_by[name] = run.injected_by.get(name, 0) + 1
            run.restart_at[name] = now
        self.progress("replica_restart", {"trial_id": run.trial_id, "replica": lau.name,
                                          "why": why, "restarts": run.restarts[lau.name]})

    def _maybe_restart_later(self, run: TrialRun, now: float) -> None:
        for name in list(run.restart_at):
            r = run.replicas[name]
            r.begin_stop(now)  # the leader or what is left of its group
            if not r.advance_stop(now, self.opt.grace_period_s):
                continue
            del run.restart_at[name]
            if name not in run.exited:
                run.exited[name] = r.exit_status
                r.close()
            if run.stopping:
                continue
            lau = next(l for l in run.launches if l.name == name)
            if lau.is_primary:
                run.reader.poll(final=True)  # the last reports of the attempt that ended
                run.reader.on_restart()
            try:
                self._start(run, lau, attempt=run.restarts[name])
            except (OSError, ConfigError) as err:  # e.g. a full disk: the trial fails, the job goes on
                run.failure = (f"The replica {name} could not be restarted: "
                               f"{_os_error_text(err, run.paths.trial_dir)}.")
                self._begin_stop(run, now, "failed")

    def _inject_restart(self, run: TrialRun, now: float) -> None:
        live = [l for l in run.launches if run.replicas[l.name].poll() is None
                and run.replicas[l.name].stop_requested_at is None  # already told to stop: not twice
                and l.name not in run.restart_at]
        run.next_injection = now + self._rng.expovariate(self.opt.inject_restarts)
        if not live:
            return
        lau = self._rng.choice(live)
        run.replicas[lau.name].begin_stop(now)  # SIGTERM, as before VM maintenance
        run.injected += 1
        self.injected_total += 1
        self.progress("injected_restart", {"trial_id": run.trial_id, "replica": lau.name})

    def _begin_stop(self, run: TrialRun, now: float, reason: str) -> None:
        if run.stopping and run.stop_reason not in ("success",):
            return
        run.stopping = True
        run.stop_reason = reason
        run.restart_at.clear()
        try:  # the runtime also watches this file (for trainers that mask SIGTERM)
            if reason != "lost":  # a lost trial's directory now belongs to the worker running it
                open(os.path.join(run.paths.trial_dir, protocol.STOP_FILE), "w").close()
        except OSError:
            pass
        live = [r for r in run.replicas.values() if r.poll() is None]
        for r in live:
            r.begin_stop(now)
        if reason == "early":
            self.store.set_trial_attrs(run.claimed.storage_id, state="STOPPING")
        if reason == "failed":  # the failure itself is said once, when the trial ends
            if live:
                self.progress("trial_stopping", {"trial_id": run.trial_id, "reason": reason,
                                                 "detail": "stopping its other replicas"})
            return
        self.progress("trial_stopping", {"trial_id": run.trial_id, "reason": reason,
                                         "detail": run.stop_detail or run.failure or ""})

    # ------------------------------------------------------------------ metrics and stopping
    def _poll_metrics(self, run: TrialRun, now: float) -> None:
        # Without a stopping rule nothing is decided on the way: read at most every
        # METRICS_POLL_S (the final read at exit gets the rest); with one, read every tick.
        if self.job.study.stopping is None:
            if now < run.next_metrics_poll:
                return
            run.next_metrics_poll = now + METRICS_POLL_S
        if not run.reader.poll():
            return
        self._warn_unknown_tags(run)
        if self._report_new(run) and self.job.study.stopping is not None and not run.stopping:
            self._check_stopping(run)

    def _warn_unknown_tags(self, run: TrialRun) -> None:
        if not run.warned_tags and run.reader.unknown_tags:
            run.warned_tags = True
            tags = frozenset(run.reader.unknown_tags)
            if tags not in self._warned_tag_sets:  # once per trial in the record, once per job here
                self._warned_tag_sets.add(tags)
                names = ", ".join(sorted(tags))
                if self._metric_ids[0] in run.reader.reported_tags:
                    # reported beside the objective: deliberate extra metrics, kept but not tuned
                    self.progress("note", {"trial_id": run.trial_id, "message": (
                        f"trial {run.trial_id} also reports {names}, not in the spec (spec metrics: "
                        f"{', '.join(self._metric_ids)}): recorded in metrics.jsonl, not tuned")})
                else:
                    self.progress("warning", {"trial_id": run.trial_id, "message": (
                        f"trial {run.trial_id} reports tags not in the spec: {names} "
                        f"(spec metrics: {', '.join(self._metric_ids)}); other trials reporting the "
                        f"same tags are not warned again")})

    def _report_new(self, run: TrialRun) -> bool:
        """Record the primary metric of steps not yet in the storage (Optuna intermediate values)."""
        primary = self._metric_ids[0]
        new = [m for m in run.reader.measurements()
               if m.step > run.reported_steps and primary in m.metrics]
        if not new:
            return False
        items = [(m.step, m.metrics[primary]) for m in new]
        for m in new:  # a running trial's measurements carry elapsedDuration in describe
            elapsed = m.elapsed_s if m.elapsed_s is not None else (
                m.timestamp - run.start_wall if m.timestamp else None)
            if elapsed is not None:
                run.live_elapsed[str(m.step)] = round(max(0.0, elapsed), 6)
        self.store.report_many(run.claimed.storage_id, items,
                               {"live_elapsed_s": dict(run.live_elapsed)} if run.live_elapsed else None)
        run.reported_steps = items[-1][0]
        return True

    def _curve(self, measurements: Sequence[Measurement], start: float | None = None) -> list[tuple[float, float]]:
        spec = self.job.study.stopping
        primary = self.job.study.metrics[0]
        out = []
        for m in measurements:
            if primary.metric_id not in m.metrics:
                continue
            x = float(m.step)
            if spec is not None and spec.use_elapsed_duration:
                x = m.elapsed_s if m.elapsed_s is not None else (m.timestamp - start if m.timestamp and start else float(m.step))
            out.append((x, stopping.orient(m.metrics[primary.metric_id], primary.maximize)))
        return out

    def _completed_curves(self) -> list[list[tuple[float, float]]]:
        if self._curves_cache is None:
            curves = []
            for t in self.store.completed_curves():
                if t.user_attrs.get("stopped_early"):
                    continue
                ms = [measurement_from_dict(d) for d in t.user_attrs.get("measurements", [])]
                curve = self._curve(ms)
                if curve:
                    curves.append(curve)
            self._curves_cache = curves
        return self._curves_cache

    def _check_stopping(self, run: TrialRun) -> None:
        spec = self.job.study.stopping
        assert spec is not None
        current = self._curve(run.reader.measurements(), run.start_wall)
        decision = stopping.decide(spec, current, self._completed_curves(),
                                   maximize=self.job.study.metrics[0].maximize)
        if decision.stop:
            run.stopped_early = True
            run.stop_detail = decision.reason
            if decision.predicted_final is not None and decision.predicted_x is not None:
                run.predicted = (decision.predicted_x, decision.predicted_final)
            self._begin_stop(run, self.clock(), "early")  # ACTIVE -> STOPPING

    # ------------------------------------------------------------------ finalize
    def _finalize(self, run: TrialRun) -> None:
        del self.running[run.trial_id]
        if self._alloc is not None:
            self._alloc.release(run.trial_id)
        if self.shared is not None and (run.lost or not self.shared.owns(run.claimed.storage_id)):
            for r in run.replicas.values():
                r.close()
            self.progress("trial_requeued", {"trial_id": run.trial_id, "lost": True})
            return  # the worker that took it over records it
        run.reader.poll(final=True)
        self._warn_unknown_tags(run)
        self._report_new(run)
        for r in run.replicas.values():
            r.close()
        measurements = [m.with_elapsed(run.start_wall) for m in run.reader.measurements()]
        if run.predicted is not None and measurements:
            x, oriented = run.predicted
            primary = self.job.study.metrics[0]
            value = oriented if primary.maximize else -oriented
            measurements.append(Measurement(step=int(x), metrics={primary.metric_id: value},
                                            elapsed_s=measurements[-1].elapsed_s))
        self.conflicts_total += run.reader.conflicts
        if run.injected:
            self.lost_steps_total += policy.missing_steps([m.step for m in measurements])
        sid = run.claimed.storage_id
        attrs: dict[str, Any] = {
            "measurements": [measurement_to_dict(m) for m in measurements],
            "attempts": run.attempts, "end_time": rfc3339(time.time()),
        }
        if run.failure and run.failure_detail:
            attrs["error_detail"] = list(run.failure_detail)
        if run.reader.unknown_tags:
            attrs["unknown_tags"] = sorted(run.reader.unknown_tags)
        if run.reader.missing_steps_warning:
            attrs["metrics_warning"] = run.reader.missing_steps_warning
            self.progress("warning", {"trial_id": run.trial_id, "message": run.reader.missing_steps_warning})
        if run.injected:
            attrs["injected_restarts"] = run.injected
        if run.stop_reason in ("cancel", "job_end", "leave"):
            # Not the trial's fault: it goes back to the queue and runs again on resume.
            attrs.update(state="REQUESTED", end_time=None)
            self.store.set_trial_attrs(sid, **attrs)
            self.store.requeue(sid)
            if self.shared is not None:
                self.shared.release(sid)
            self.progress("trial_requeued", {"trial_id": run.trial_id})
            return
        state, reason, values, final = self._outcome(run, measurements)
        if final is not None:
            attrs["final_measurement"] = measurement_to_dict(final)
        attrs["state"] = state
        if reason:
            attrs["infeasible_reason"] = reason
        if run.failure:
            attrs["failed"] = True
        if run.stopped_early:
            attrs["stopped_early"] = True
            attrs["stop_reason"] = run.stop_detail
        self.store.set_trial_attrs(sid, **attrs)
        if state == "SUCCEEDED":
            self.store.complete(run.claimed.number, values, stopped_early=run.stopped_early)
            self.n_succeeded += 1
            if not run.stopped_early:
                self._curves_cache = None
        else:
            self.store.fail(run.claimed.number)
        if self.shared is not None:
            self.shared.release(sid)
        if run.failure and self.shared is not None:
            self.n_failed = self.n_succeeded = 0  # the job's failure rule counts every worker's trials
            self.first_failure = None
            self._count_finished()
        elif run.failure:
            self.n_failed += 1
            self.first_failure = self.first_failure or f"Trial {run.trial_id}: {run.failure}"
            error = policy.job_failure(self.job, n_failed=self.n_failed, n_succeeded=self.n_succeeded,
                                       first_failure=self.first_failure)
            if error and self.job_error is None:
                self.job_error = error
        self.progress("trial_done", {
            "trial_id": run.trial_id, "state": state, "reason": reason, "values": values,
            "stopped_early": run.stopped_early, "steps": len(measurements),
            "seconds": self.clock() - run.start_mono, "params": run.claimed.params,
            **({"detail": list(run.failure_detail)} if run.failure and run.failure_detail else {}),
        })

    def _outcome(self, run: TrialRun, measurements: list[Measurement]):
        return policy.trial_outcome(measurements, self.job.study.metrics, best=self.job.study.selects_best,
                                    failure=run.failure, reported_tags=run.reader.reported_tags)

    # ------------------------------------------------------------------ job end
    def _count_finished(self) -> None:
        for t in self.store.frozen_trials():
            if t.user_attrs.get("failed"):
                self.n_failed += 1
                self.first_failure = self.first_failure or f"Trial {t.number + 1}: {t.user_attrs.get('infeasible_reason')}"
            elif t.user_attrs.get("state") == "SUCCEEDED":
                self.n_succeeded += 1

    def _finish_job(self) -> str:
        now = rfc3339(time.time())
        if self.shared is not None and self.job_error is None:
            if self.leaving:
                self.progress("job_left", {})
                return self.store.get_meta("state")
            if self.cancel_requested:
                self.shared.requeue_stale()
                if self.shared.others_active():
                    return CANCELLING  # the last worker to stop sets CANCELLED
            elif sum(self.shared.counts()):
                return self.store.get_meta("state")  # left with trials still to run
        if self.job_error is not None:
            state, error = FAILED, {"code": policy.JOB_FAILED_CODE, "message": self.job_error}
        elif self.cancel_requested:
            state, error = CANCELLED, {"code": 1, "message": "The job was cancelled."}
        else:
            state, error = SUCCEEDED, None
        self.store.set_meta(state=state, end_time=now, error=error, controller=None)
        self.progress("job_done", {"state": state, "error": error})
        return state

    def _stop_everything(self) -> None:
        """Leave no replica behind (used on the way out, also after an exception)."""
        deadline = self.clock() + self.opt.grace_period_s
        live = [r for run in self.running.values() for r in run.replicas.values() if r.poll() is None]
        for r in live:
            r.begin_stop(self.clock())
        while live and self.clock() < deadline + 1:
            live = [r for r in live if not r.advance_stop(self.clock(), self.opt.grace_period_s)]
            time.sleep(0.02)
        for run in list(self.running.values()):
            for r in run.replicas.values():
                r.close()

    # ------------------------------------------------------------------ signals and waiting
    def _install_signals(self) -> Callable[[], None]:
        def on_stop(signum: int) -> None:
            if self.opt.join:  # a joined worker leaves; the job goes on with the others
                if self.leaving:
                    self.kill_now = True
                self.leaving = True
                return
            if self.cancel_requested:
                self.kill_now = True  # a second Ctrl-C: kill now
            self.cancel_requested = True

        return self._signals.install(on_stop)

    def _wait(self, timeout: float) -> None:
        self._signals.wait(timeout)

    # ------------------------------------------------------------------ helpers
    def _trial_attr(self, claimed: Claimed, key: str) -> Any:
        return self.store.storage.get_trial(claimed.storage_id).user_attrs.get(key)

    @staticmethod
    def _write_json(path: str, data: Any) -> None:
        # Whole or not at all: a controller killed mid-write must not leave a torn pids.json
        # (its replicas' children would never be reaped) or args.json.
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True, default=str)
        os.replace(tmp, path)


def _os_error_text(err: OSError | ConfigError, trial_dir: str) -> str:
    if not isinstance(err, OSError):
        return str(err).rstrip(".")
    return f"{err.strerror or err} ({getattr(err, 'filename', None) or trial_dir})"


def _full_disk_reason(path: str) -> list[str]:
    """A replica that failed without a word on stderr may have found its disk full: say so."""
    try:
        st = os.statvfs(path)
    except OSError:
        return []
    if st.f_bavail * st.f_frsize >= FULL_DISK_BYTES:
        return []
    return [f"No space left on device: the filesystem of {path} is full "
            f"({st.f_bavail * st.f_frsize} bytes free) and the replica wrote nothing to stderr"]

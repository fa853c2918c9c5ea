"""Starting a claimed trial: its folder and files, its replicas' commands and environments, and each
replica start (first or restart) through the loop's replica backend."""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from trials import files, protocol
from trials.controller.backend import registry
from trials.controller.backend.protocol import MAX_INTERNAL_RETRIES, BackendError, ReplicaBackend, ReplicaStart
from trials.controller.loop.effects import Clock
from trials.controller.loop.running import RunningTrial
from trials.controller.process.groups import reap_leftovers
from trials.controller.process.replica import free_port
from trials.controller.trial import files as trial_files
from trials.controller.trial import launch
from trials.controller.trial.devices import ENV_CUDA_VISIBLE_DEVICES, DeviceAllocator, DevicePlan, replica_env
from trials.controller.trial.metrics_reader import TrialMetricsReader
from trials.errors import ConfigError
from trials.spec import JobSpec
from trials.study.store import Claimed
from trials.timefmt import rfc3339

if TYPE_CHECKING:
    from trials.controller.loop.state import LoopOptions


class TrialLauncher:
    """Prepares trial folders and starts replicas for one job loop.

    Args:
        job: the job spec; ``job_id`` its id; ``trial_job_rest`` the stored trialJobSpec (REST form).
        options: the loop's ``LoopOptions`` (paths, command, echo, memory limit, devices, pass_env).
        backend: starts the replicas (:class:`trials.controller.process.host.HostBackend` in production).
        clock: wall time for the records.
        alloc: hands out devices to trials (None: devices untouched).
    """

    def __init__(self, job: JobSpec, job_id: str, options: LoopOptions, *, backend: ReplicaBackend,
                 clock: Clock,
                 trial_job_rest: Mapping[str, Any], alloc: DeviceAllocator | None,
                 environ: Mapping[str, str] | None = None):
        self.job = job
        self.job_id = job_id
        self.opt = options
        self.backend = backend
        self.clock = clock
        self.trial_job_rest = dict(trial_job_rest)
        self.alloc = alloc
        self.environ = dict(os.environ if environ is None else environ)

    def _wall_at(self, now: float) -> float:
        """The wall time at the monotonic moment ``now`` (the pass's): a run's end is its start's wall
        time plus the monotonic time since, so a start's wall time read later (after the trial folder was
        made, on a loaded machine 100 ms and more) would move its recorded end past the next trial's start."""
        return self.clock.wall() - max(0.0, self.clock.monotonic() - now)

    def _reader(self, paths: launch.TrialPaths, metric_file: str) -> TrialMetricsReader:
        return TrialMetricsReader(metric_file, os.path.join(paths.trial_dir, protocol.METRICS_LOG),
                                  self.job.study.reported_metric_ids, start_time=self.clock.wall())

    def empty_run(self, claimed: Claimed, now: float) -> RunningTrial:
        """A run with no replica: for a trial that could not be prepared (it fails at once)."""
        paths = launch.trial_paths(self.opt.job_dir, self.opt.base_output, claimed.trial_id,
                                   custom_job=self.job.local.custom_job)
        reader = self._reader(paths, os.path.join(paths.trial_dir, protocol.HYPERTUNE_FILE))
        return RunningTrial(claimed=claimed, paths=paths, launches=[], reader=reader,
                        start_wall=self._wall_at(now), start_mono=now)

    def _make_output(self, path: str) -> None:
        """Make one of a trial's output folders without following a link a trainer planted on the way: beneath the
        bucket folder (every trial writes ``/gcs``), and for a job made through ``trials serve`` beneath the server's
        root, where the create checked it was (a trial of another job may write there since).

        Raises:
            NotADirectoryError: a link or a file on the way (named), or the folder left the server's root.
        """
        confine = self.opt.confine
        if confine and not files.is_beneath(path, self.opt.gcs_root):
            if not files.is_beneath(path, confine):
                raise NotADirectoryError(errno.EXDEV, "refusing an output folder outside the server's root "
                                                      f"{confine} (trials serve --root)", path)
            files.makedirs_beneath(confine, path)
            return
        files.makedirs_beneath(self.opt.gcs_root, path)

    def prepare(self, claimed: Claimed, now: float, previous_attempts: list[dict[str, Any]]) -> RunningTrial:
        """Create the trial folder and its files; the run has no replica started yet.

        Raises:
            OSError: the folder or a file could not be written (a full disk, a planted directory).
            ConfigError: the replicas' commands cannot be built.
        """
        paths = launch.trial_paths(self.opt.job_dir, self.opt.base_output, claimed.trial_id,
                                   custom_job=self.job.local.custom_job)
        os.makedirs(paths.trial_dir, exist_ok=True)
        trial_files.clear_stop(paths.trial_dir)
        for d in (paths.model_dir, paths.checkpoint_dir, paths.tensorboard_dir):
            if d is not None:  # no base output directory: the trainer saves where it chooses
                self._make_output(protocol.local_path(d, self.opt.gcs_root))
        in_image = registry.get(self.opt.runtime).in_image
        n_replicas = len(self.job.trial_job.replicas()) if self.job.trial_job else 1
        ports = [free_port() for _ in range(n_replicas)] if n_replicas > 1 else [protocol.REPLICA_PORT]
        launches = launch.build_replicas(
            job=self.job, job_id=self.job_id, trial_id=claimed.trial_id,
            params=claimed.params, paths=paths, project_number=self.opt.project_number,
            local_command=self.opt.local_command,
            # in an image: nothing of the host's environment (the image's own PATH, HOME...)
            base_env={} if in_image else launch.clean_base_env(self.environ, self.opt.pass_env),
            ports=ports, gcs_root=self.opt.gcs_root, job_spec_rest=self.trial_job_rest, in_image=in_image,
        )
        run = RunningTrial(claimed=claimed, paths=paths, launches=launches,
                       reader=self._reader(paths, launches[0].metric_file),
                       start_wall=self._wall_at(now), start_mono=now)
        if self.alloc is not None and self.opt.devices is not None:
            run.devices = self.alloc.allocate(claimed.trial_id, self.opt.devices.counts)
        if claimed.resumed:
            # Measurements of earlier attempts stay in the trial directory and are read again.
            run.attempts = list(previous_attempts)
            entry = {"reason": claimed.resume_reason or "resumed after the controller stopped",
                     "time": rfc3339(self.clock.wall())}
            if claimed.previous_worker:
                entry["worker"] = claimed.previous_worker
                self._reap_previous(claimed.previous_worker, paths.trial_dir)
            run.attempts.append(entry)
            run.reader.poll(final=True)  # what the earlier attempt reported (its processes are gone)
            run.reader.on_restart()
        trial_files.write_args(paths.trial_dir, claimed.trial_id, claimed.params,
                               {lau.name: lau.argv for lau in launches})
        # a replica's devices are written even when the worker's own allocation has the same ids (Slurm's)
        envs = {lau.name: {**lau.env, **self._device_env(run, lau)} for lau in launches}
        trial_files.write_env(paths.trial_dir, envs, self.environ,
                              keep=(ENV_CUDA_VISIBLE_DEVICES,) if self.opt.devices is not None else ())
        return run

    def _device_env(self, run: RunningTrial, lau: launch.ReplicaLaunch) -> dict[str, str]:
        """``CUDA_VISIBLE_DEVICES`` of a replica whose worker manages devices (else nothing)."""
        plan: DevicePlan | None = self.opt.devices
        if plan is None:
            return {}
        group = run.devices[run.launches.index(lau)] if run.devices is not None else None
        return replica_env(group, hide=plan.hide)

    def start(self, run: RunningTrial, lau: launch.ReplicaLaunch, *, attempt: int, echo: TextIO | None) -> None:
        """Start (or restart) one replica and list it in ``pids.json``.

        Raises:
            BackendError: the backend failed the start 3 times (an internal error); the caller fails the trial.
            OSError, ConfigError: it could not be started; the caller fails the trial.
        """
        env = dict(lau.env)
        env[protocol.ENV_ATTEMPT] = str(attempt)
        env.update(self._device_env(run, lau))
        group = run.devices[run.launches.index(lau)] if run.devices is not None else None
        request = ReplicaStart(
            argv=tuple(lau.argv), env=env, cwd=self.opt.cwd, name=lau.name,
            label=f"{run.trial_id}/{lau.name}" if echo else lau.name, trial_dir=run.paths.trial_dir,
            stdout_path=os.path.join(run.paths.trial_dir, protocol.stdout_log(lau.name)),
            stderr_path=os.path.join(run.paths.trial_dir, protocol.stderr_log(lau.name)),
            outputs=write_through(env, self.opt.gcs_root), devices=group, echo=echo,
            memory_limit_mb=self.opt.memory_limit_mb, image=lau.image, entrypoint=lau.command, args=lau.args,
            package_uris=lau.package_uris,
        )
        for retry in range(MAX_INTERNAL_RETRIES + 1):
            try:
                replica = self.backend.start(request)
                break
            except BackendError as err:  # not the trainer's fault: the attempt again, as Vertex does
                entry = {"replica": lau.name, "attempt": attempt, "internalError": str(err),
                         "time": rfc3339(self.clock.wall())}
                if retry < MAX_INTERNAL_RETRIES:
                    entry["budget"] = f"internal retry {retry + 1} of {MAX_INTERNAL_RETRIES}"
                run.attempts.append(entry)
                if retry == MAX_INTERNAL_RETRIES:
                    raise
        run.replicas[lau.name] = replica
        run.exited.pop(lau.name, None)
        # Every replica started in this run stays listed: a resumed controller reaps their groups.
        record = replica.record()
        if record is not None:
            run.pid_records.append(record)
            trial_files.write_pids(run.paths.trial_dir, run.pid_records)

    @staticmethod
    def _reap_previous(previous_worker: str, trial_dir: str) -> None:
        """A dead worker on this host may have left replicas of the trial running: stop them."""
        if previous_worker.rsplit(":", 1)[0] != socket.gethostname():
            return
        records = trial_files.read_pids(trial_dir)
        if records:
            reap_leftovers(records, trial_dir=trial_dir)


def start_error_text(err: OSError | ConfigError | BackendError, trial_dir: str) -> str:
    """One line for a trial that could not be prepared or a replica that could not be started."""
    if not isinstance(err, OSError):
        return str(err).rstrip(".")
    return f"{err.strerror or err} ({err.filename or trial_dir})"


def write_through(env: Mapping[str, str], gcs_root: str) -> tuple[str, ...]:
    """The host folder a replica writes through besides its trial folder: ``<base>/<trial>/``, the
    parent of its ``AIP_MODEL_DIR`` (mapped from gs:// into the job's /gcs root); () without one."""
    model_dir = env.get(protocol.ENV_MODEL_DIR)
    if not model_dir:
        return ()
    local = protocol.local_path(model_dir, env.get(protocol.ENV_GCS_ROOT) or gcs_root)
    return (os.path.dirname(local.rstrip("/")),)

"""The trial context an objective receives: config, report, should_stop, checkpoint/restore, paths.

On the trial's start-up path: imports only the standard library's light modules; reporting,
checkpoints, the cluster role and logging load on first use. The descriptors here are slotted
classes, not dataclasses, for the same reason (``dataclasses`` costs ~10 ms to import).
"""

from __future__ import annotations

import os
import sys

from trials import protocol
from trials.errors import CheckpointError, ConfigError
from trials.runtime.environment import DEFAULT_OUTPUT_ROOT, TrialEnv
from trials.runtime.options import RunOptions

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import logging
    from collections.abc import Callable, Iterator, Mapping
    from typing import Any

    from trials.runtime.checkpoint import CheckpointStore
    from trials.runtime.cluster import ClusterRole
    from trials.runtime.reporting import Reporter

__all__ = ["DEFAULT_METRIC", "DEFAULT_OUTPUT_ROOT", "FIRST_STEP", "LogSetup", "RunOptions", "TrialContext",
           "TrialEnv"]

DEFAULT_METRIC = "training/hptuning/metric"  # hypertune's tag when none is given
FIRST_STEP = 1


class LogSetup:
    """Installs structured logging on first need: when the program uses ``logging`` or we log."""

    __slots__ = ("_labels", "_undo", "_done", "installed_format")

    def __init__(self, labels: Callable[[], Mapping[str, str]] | Mapping[str, str]):
        self._labels = labels
        self._undo: Callable[[], None] | None = None
        self._done = False
        self.installed_format: str | None = None  # set when our handler is the one in place

    def ensure(self) -> None:
        if self._done:
            return
        self._done = True
        from trials.runtime import logs

        try:
            fmt = logs.choose_format()
        except ConfigError as err:
            print(f"trials: warning: {err}; logging as json", file=sys.stderr)
            fmt = "json"
        labels = self._labels() if callable(self._labels) else self._labels
        self._undo = logs.install(fmt=fmt, labels=labels)
        if self._undo is not None:
            self.installed_format = fmt

    def maybe(self) -> None:
        """Install if the program has imported logging (costs nothing when it has not)."""
        if not self._done and "logging" in sys.modules:
            self.ensure()

    def logger(self) -> logging.Logger:
        self.ensure()
        import logging

        return logging.getLogger("trials")

    def undo(self) -> None:
        undo, self._undo = self._undo, None
        self._done, self.installed_format = False, None
        if undo is not None:
            undo()


class TrialContext:
    """What an objective gets besides its config.

    Example:
        >>> def objective(config, ctx):  # doctest: +SKIP
        ...     state = ctx.restore() or {"w": 0.0}
        ...     for step in ctx.steps(config.epochs):       # resumes after the checkpointed step
        ...         state["w"] += config.learning_rate
        ...         ctx.report(step, accuracy=state["w"])   # hypertune + metrics.jsonl
        ...         ctx.checkpoint(state, step)              # atomic, keeps the last 3
    """

    def __init__(self, *, config: Any, env: TrialEnv, options: RunOptions | None = None,
                 log: LogSetup | None = None):
        self.config = config
        self.env = env
        self.options = options or RunOptions()
        self._log = log or LogSetup(self._labels)
        self._reporter: Reporter | None = None
        self._store: CheckpointStore | None = None
        self._role: ClusterRole | None = None
        self._stop_reason: str | None = None
        self._restored_step: int | None = None
        self._pending: tuple[Any, int] | None = None
        self.last_checkpoint_step: int | None = None
        self.reports_after_stop = 0  # report() calls made once should_stop was already true
        self.on_report: Callable[[TrialContext, int, dict[str, float]], None] | None = None

    # --- identity and paths -------------------------------------------------------------------
    @property
    def trial_id(self) -> str | None:
        return self.env.trial_id or self.role.trial

    @property
    def job_id(self) -> str | None:
        return self.env.job_id

    @property
    def project_number(self) -> str | None:
        """``$CLOUD_ML_PROJECT_ID``: Vertex puts the project *number* there; never inferred."""
        return self.env.project_number

    @property
    def attempt(self) -> int:
        return self.env.attempt

    @property
    def is_local(self) -> bool:
        return self.env.is_local

    @property
    def model_dir(self) -> str:
        return self.env.model_dir

    @property
    def checkpoint_dir(self) -> str:
        return self.env.checkpoint_dir

    @property
    def tensorboard_dir(self) -> str:
        return self.env.tensorboard_dir

    @property
    def trial_dir(self) -> str:
        return self.env.trial_dir

    def local_path(self, path: str) -> str:
        """``gs://bucket/x`` -> ``/gcs/bucket/x`` (the root is ``$TRIALS_GCS_ROOT`` locally)."""
        return protocol.local_path(path, self.env.gcs_root)

    @property
    def role(self) -> ClusterRole:
        if self._role is None:
            from trials.runtime.cluster import read_cluster_role

            self._role = read_cluster_role(self.env.environ)
        return self._role

    @property
    def is_primary(self) -> bool:
        return self.role.is_primary

    @property
    def _writes(self) -> bool:
        return self.options.all_replicas or self.role.is_primary

    def _labels(self) -> dict[str, str]:
        """Log labels: trial id, replica (``workerpool0-0``) and attempt."""
        trial_id, replica = self.env.trial_id, self.env.replica
        try:
            trial_id = trial_id or self.role.trial
            replica = replica or self.role.replica
        except ConfigError:  # a malformed CLUSTER_SPEC fails where it is used, not in logging
            pass
        labels = {"trial_id": trial_id or "", "replica": replica or "",
                  "attempt": str(self.env.attempt)}
        return {k: v for k, v in labels.items() if v}

    @property
    def logger(self) -> logging.Logger:
        """The ``trials`` logger, with structured logging installed."""
        return self._log.logger()

    # --- reporting ------------------------------------------------------------------------------
    @property
    def reporter(self) -> Reporter:
        if self._reporter is None:
            from trials.runtime.reporting import Reporter

            scalars = None
            if self.options.tensorboard and self._writes:
                from trials.runtime.tensorboard import ScalarWriter

                scalars = ScalarWriter(self.tensorboard_dir, warn=self._warn, hparams=self._hparams())
            self._reporter = Reporter(metrics_log=self.env.metrics_log,
                                      metric_file=self.env.metric_file, attempt=self.attempt,
                                      scalars=scalars, on_skip=self._skipped)
        return self._reporter

    def _hparams(self) -> dict[str, Any]:
        """The config's values for TensorBoard's HParams view (numbers, str, bool; others as text)."""
        from trials.runtime.params import config_values

        try:
            values = config_values(self.config)
        except TypeError:  # a config without fields
            return {}
        out: dict[str, Any] = {}
        for name, value in values.items():
            raw = getattr(value, "value", value)  # an Enum member: its value
            out[name] = raw if raw is None or isinstance(raw, (bool, int, float, str)) else repr(raw)
        return out

    def _warn(self, message: str) -> None:
        self._log.logger().warning(message)

    def _skipped(self, step: int, last: int) -> None:
        self._log.logger().info("step %d not reported again: step %d was already reported", step, last)

    def report(self, step: int, metrics: Mapping[str, float] | None = None, /, *,
               allow_nonfinite: bool = False, **more: float) -> bool:
        """Report the metrics of one step (call once per epoch, steps increasing).

        Each metric goes through ``hypertune.HyperTune().report_hyperparameter_tuning_metric``
        and the step is appended to ``metrics.jsonl``. A step at or below the last reported one
        (for instance after a restart) is skipped. Non-primary replicas report nothing unless
        ``all_replicas`` was set.

        Args:
            step: the step (epoch) number, an integer >= 0.
            metrics: metrics as a mapping (for names that are not identifiers, e.g. ``val/loss``).
            allow_nonfinite: report NaN/inf instead of raising; the trial then becomes infeasible.
            **more: metrics as keyword arguments, e.g. ``accuracy=0.9``.

        Returns:
            True if the step was written.

        Raises:
            MetricsError: no metric, a non-number, or NaN/inf without ``allow_nonfinite``.
        """
        if self._stop_reason is not None:
            self.reports_after_stop += 1
        values = dict(metrics or {})
        values.update(more)
        self._log.maybe()
        from trials.runtime.reporting import check_metrics, check_step

        step = check_step(step)
        checked = check_metrics(values, allow_nonfinite=allow_nonfinite)
        if not self._writes:
            return False
        written = self.reporter.report(step, checked, allow_nonfinite=allow_nonfinite)
        if written and self.on_report is not None:
            self.on_report(self, step, checked)
        return written

    @property
    def last_step(self) -> int | None:
        """The last step reported (by this or an earlier attempt) or restored; None before any."""
        reported = self.reporter.last_step if self._writes else None
        steps = [s for s in (reported, self._restored_step, self.last_checkpoint_step) if s is not None]
        return max(steps) if steps else None

    # --- stopping -----------------------------------------------------------------------------
    @property
    def should_stop(self) -> bool:
        """True after SIGTERM, :meth:`request_stop`, or once ``$TRIALS_STOP_FILE`` exists."""
        if self._stop_reason is None and self.env.stop_file and os.path.exists(self.env.stop_file):
            self._stop_reason = "stop file"
        return self._stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason if self.should_stop else None

    def request_stop(self, reason: str = "request_stop") -> None:
        """Ask the objective to stop after the current step (what SIGTERM does)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    def steps(self, last: int) -> Iterator[int]:
        """``start_step .. last`` inclusive, ending early (between steps) once :attr:`should_stop`."""
        step = self.start_step
        while step <= last and not self.should_stop:
            yield step
            step += 1

    # --- checkpoints --------------------------------------------------------------------------
    @property
    def store(self) -> CheckpointStore:
        if self._store is None:
            from trials.runtime.checkpoint import CheckpointStore

            self._store = CheckpointStore(self.checkpoint_dir, keep=self.options.keep_checkpoints,
                                          fmt=self.options.checkpoint_format,
                                          warn=self._warn)
            if not self.env.is_local and not self.env.environ.get(protocol.ENV_CHECKPOINT_DIR):
                self._warn(f"AIP_CHECKPOINT_DIR is not set (the job has no baseOutputDirectory): checkpoints go "
                           f"to {self.checkpoint_dir}, which a restarted replica on Vertex does not find")
        return self._store

    def checkpoint(self, state: Any, step: int | None = None) -> str | None:
        """Save ``state`` as the checkpoint of ``step`` (default: the last reported step).

        The write is atomic (temp file, fsync, rename, fsync of the directory); the newest
        ``keep_checkpoints`` are kept. With ``checkpoint_every`` N > 1 only every N-th step is
        written, and the latest state is written when the trial stops or ends.

        Returns:
            The checkpoint's path, or None if it was deferred or this replica does not write.
        """
        if step is None:
            step = self.reporter.last_step if self._writes else None
            if step is None:
                raise CheckpointError("checkpoint() needs a step: pass step=… or report() first")
        if not self._writes:
            return None
        every = self.options.checkpoint_every
        if every > 1 and step % every != 0 and not self.should_stop:
            self._pending = (state, step)
            return None
        self._pending = None
        path = self.store.save(state, step)
        self.last_checkpoint_step = step
        return path

    def flush_checkpoint(self) -> str | None:
        """Write a deferred checkpoint, if any (the runtime calls this when the objective ends)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        path = self.store.save(*pending)
        self.last_checkpoint_step = pending[1]
        return path

    def restore(self, default: Any = None) -> Any:
        """The newest readable checkpoint's state, or ``default`` when there is none.

        Afterwards :attr:`start_step` is the step after the checkpoint's, so a loop over
        ``ctx.steps(n)`` continues where the previous attempt stopped.
        """
        found = self.store.load_latest()
        if found is None:
            return default
        step, state = found
        self._restored_step = step
        self._log.maybe()
        if "logging" in sys.modules:
            self._log.logger().info("restored checkpoint of step %d from %s", step,
                                    self.checkpoint_dir)
        return state

    @property
    def restored_step(self) -> int | None:
        return self._restored_step

    @property
    def start_step(self) -> int:
        """The first step to run: one after the restored checkpoint's, else 1."""
        return FIRST_STEP if self._restored_step is None else self._restored_step + 1

    def close(self, *, failed: bool = False) -> None:
        """Close the metric and TensorBoard files (``failed``: the HParams session ends as a failure)."""
        if self._reporter is not None:
            self._reporter.close(failed=failed)

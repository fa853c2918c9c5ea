"""Where a trial's inputs and outputs are: paths and identity resolved once from its environment.

On the trial's start-up path: standard library's light modules and the vocabulary only.
"""

from __future__ import annotations

import os
import time

from trials import protocol
from trials.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

DEFAULT_OUTPUT_ROOT = "trials-output"
_TUNING_VARS = (*protocol.VERTEX_ENV_VARS, protocol.ENV_TRIAL_DIR)


class TrialEnv:
    """Where a trial's inputs and outputs are, resolved once from the environment.

    Inside a tuning job every path comes from its variable (``gs://`` mapped to the local mount);
    a path whose variable is unset falls back under the trial directory. Outside one (no Vertex
    or ``TRIALS_TRIAL_DIR`` variable) everything goes under
    ``$TRIALS_OUTPUT_ROOT/<run id>/`` (default ``./trials-output``).
    """

    __slots__ = ("environ", "is_local", "trial_id", "job_id", "project_number", "attempt",
                 "metric_file", "trial_dir", "model_dir", "checkpoint_dir", "tensorboard_dir",
                 "stop_file", "gcs_root", "output_dir", "replica")

    def __init__(self, environ: Mapping[str, str] | None = None, *, now: float | None = None):
        env = dict(os.environ if environ is None else environ)
        self.environ = env
        self.is_local = not any(env.get(name) for name in _TUNING_VARS)
        self.trial_id = env.get(protocol.ENV_TRIAL_ID) or None
        self.job_id = env.get(protocol.ENV_JOB_ID) or None
        self.project_number = env.get(protocol.ENV_PROJECT_ID) or None
        self.replica = env.get(protocol.ENV_REPLICA) or None
        self.gcs_root = env.get(protocol.ENV_GCS_ROOT) or None
        self.stop_file = env.get(protocol.ENV_STOP_FILE) or None
        attempt = env.get(protocol.ENV_ATTEMPT, "0") or "0"
        if not attempt.isdigit():
            raise ConfigError(f"${protocol.ENV_ATTEMPT} must be an integer >= 0, got {attempt!r}")
        self.attempt = int(attempt)

        root = env.get(protocol.ENV_OUTPUT_ROOT) or DEFAULT_OUTPUT_ROOT
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
        run_id = f"trial-{self.trial_id}" if self.trial_id else f"{stamp}-{os.getpid()}"
        self.output_dir = os.path.abspath(os.path.join(root, run_id))
        trial_dir = env.get(protocol.ENV_TRIAL_DIR)
        self.trial_dir = os.path.abspath(self._map(trial_dir)) if trial_dir else self.output_dir
        base = self.trial_dir
        self.model_dir = self._dir(protocol.ENV_MODEL_DIR, base, "model")
        self.checkpoint_dir = self._dir(protocol.ENV_CHECKPOINT_DIR, base, "checkpoints")
        self.tensorboard_dir = self._dir(protocol.ENV_TENSORBOARD_LOG_DIR, base, "logs")

        metric_file = env.get(protocol.ENV_METRIC_FILE)
        if metric_file is not None and not os.path.dirname(metric_file):
            raise ConfigError(
                f"${protocol.ENV_METRIC_FILE} must be a path with a directory (cloudml-hypertune "
                f"cannot create ''), got {metric_file!r}"
            )
        if metric_file:
            self.metric_file = os.path.abspath(metric_file)
        elif self.is_local:
            self.metric_file = os.path.join(self.trial_dir, protocol.HYPERTUNE_FILE)
        else:
            self.metric_file = "/tmp/hypertune/output.metrics"  # the library's default, as on Vertex

    def _map(self, path: str) -> str:
        try:
            return protocol.local_path(path, self.gcs_root)
        except ValueError as err:
            raise ConfigError(f"{err} (a trial path)") from err

    def _dir(self, var: str, base: str, name: str) -> str:
        value = self.environ.get(var)
        if value:
            try:
                return os.path.abspath(protocol.local_path(value, self.gcs_root))
            except ValueError as err:
                raise ConfigError(f"${var}: {err}") from err
        return os.path.join(base, name)

    @property
    def metrics_log(self) -> str:
        return os.path.join(self.trial_dir, protocol.METRICS_LOG)

    def make_dirs(self) -> None:
        for path in (self.trial_dir, self.model_dir, self.checkpoint_dir, self.tensorboard_dir):
            os.makedirs(path, exist_ok=True)

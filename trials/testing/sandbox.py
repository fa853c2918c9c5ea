"""A trial's environment for a test: every ``AIP_*``/``CLOUD_ML_*``/``TRIALS_*`` variable pointed into ``tmp_path``."""

from __future__ import annotations

import os

import pytest

from trials import protocol

TRIAL_ID = "1"
JOB_ID = "pytest-job"
PROJECT_NUMBER = "123456789012"


class TrialSandbox:
    """Every ``AIP_*``/``CLOUD_ML_*``/``TRIALS_*`` variable pointed into ``tmp_path``.

    Attributes:
        root: the sandbox directory.
        env: the variables set (a copy; the process environment is changed via monkeypatch).
        trial_dir, metric_file, model_dir, checkpoint_dir, tensorboard_dir, stop_file,
        gcs_root, output_root: the paths those variables hold.
    """

    def __init__(self, root: str, monkeypatch: pytest.MonkeyPatch):
        self.root = root
        self._monkeypatch = monkeypatch
        self.trial_dir = os.path.join(root, "job", "trials", TRIAL_ID)
        base = os.path.join(root, "job", "output", TRIAL_ID)
        self.metric_file = os.path.join(self.trial_dir, protocol.HYPERTUNE_FILE)
        self.model_dir = os.path.join(base, "model")
        self.checkpoint_dir = os.path.join(base, "checkpoints")
        self.tensorboard_dir = os.path.join(base, "logs")
        self.stop_file = os.path.join(self.trial_dir, protocol.STOP_FILE)
        self.gcs_root = os.path.join(root, "gcs")
        self.output_root = os.path.join(root, "local-runs")
        for name in (*protocol.VERTEX_ENV_VARS, *protocol.PROJECT_ENV_VARS):
            monkeypatch.delenv(name, raising=False)
        self.env: dict[str, str] = {}
        self.set(**{
            protocol.ENV_TRIAL_ID: TRIAL_ID,
            protocol.ENV_JOB_ID: JOB_ID,
            protocol.ENV_PROJECT_ID: PROJECT_NUMBER,
            protocol.ENV_METRIC_FILE: self.metric_file,
            protocol.ENV_MODEL_DIR: self.model_dir + "/",
            protocol.ENV_CHECKPOINT_DIR: self.checkpoint_dir + "/",
            protocol.ENV_TENSORBOARD_LOG_DIR: self.tensorboard_dir + "/",
            protocol.ENV_TRIAL_DIR: self.trial_dir,
            protocol.ENV_STOP_FILE: self.stop_file,
            protocol.ENV_REPLICA: protocol.replica_name(0, 0),
            protocol.ENV_ATTEMPT: "0",
            protocol.ENV_GCS_ROOT: self.gcs_root,
            protocol.ENV_OUTPUT_ROOT: self.output_root,
            protocol.ENV_LOG_FORMAT: "json",
        })

    def set(self, **variables: str | None) -> None:
        """Set (or, with None, remove) variables for the rest of the test."""
        for name, value in variables.items():
            if value is None:
                self._monkeypatch.delenv(name, raising=False)
                self.env.pop(name, None)
            else:
                self._monkeypatch.setenv(name, str(value))
                self.env[name] = str(value)

    def local(self) -> TrialSandbox:
        """Remove every tuning variable: the objective runs as ``python train.py`` would."""
        keep = {protocol.ENV_OUTPUT_ROOT, protocol.ENV_LOG_FORMAT}
        self.set(**{name: None for name in list(self.env) if name not in keep})
        return self

    def stop(self) -> None:
        """Create the stop file (what the controller does to stop a trial without a signal)."""
        os.makedirs(os.path.dirname(self.stop_file), exist_ok=True)
        open(self.stop_file, "w").close()

"""Fixtures of the fault suite (helpers in faultkit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from faultkit import Jobs


@pytest.fixture
def jobs(tmp_path: Path):
    j = Jobs(tmp_path)
    yield j
    j.cleanup()


@pytest.fixture
def gate(jobs: Jobs) -> Path:
    """A file the fault trainer's ``--gate`` waits for, in the shared bucket (a sandboxed trial sees the
    rest of the host as it was when it started; this one it sees live): sweep with ``--gcs-root
    jobs.gcs_root``."""
    return jobs.shared() / "go"

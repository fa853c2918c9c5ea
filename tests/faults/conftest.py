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
def gate(tmp_path_factory) -> Path:
    """A file the fault trainer's ``--gate`` waits for, outside the launch folder (a sandboxed trial
    sees that folder as it was when it started; this one it sees live)."""
    return tmp_path_factory.mktemp("gate") / "go"

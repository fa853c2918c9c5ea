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

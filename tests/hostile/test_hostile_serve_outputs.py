"""A trial of one served job cannot turn another served job's output folder into a host folder.

``trials serve`` checks at create that a job's local ``outputUriPrefix`` is under its root (``--root``), links
resolved. A trial of another job writes its own folder under that root, so it can plant a link there after the check:
before, the later job's controller made ``<prefix>/model`` (and mounted it into the trial, writable) through the link,
as root. Now a served job's output folders are made beneath the root at each trial's start, never through a link."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.controller.api.servekit import CUSTOM_JOBS, Serve, cancel_all, custom_job, environ_without_token

pytestmark = [pytest.mark.integration]


def _ended(s: Serve, name: str, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (job := s.ok("GET", "/v1/" + name))["state"] not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    return job


def test_a_link_planted_after_the_create_check_makes_no_output_folder_on_the_host(tmp_path: Path) -> None:
    victim, go = tmp_path / "victim", tmp_path / "go"
    victim.mkdir()
    s = Serve(tmp_path / "jobs", "--max-running-jobs", "1", env=environ_without_token())
    try:
        # the planter runs first (one job at a time) and plants only once the victim job has passed its check
        planter = s.ok("POST", CUSTOM_JOBS, custom_job(
            ["sh", "-c", f'while [ ! -e {go} ]; do sleep 0.1; done; ln -s {victim} "$TRIALS_TRIAL_DIR/out"'],
            name="planter"))
        planter_id = planter["name"].rsplit("/", 1)[-1]
        prefix = s.root / planter_id / "1" / "out"
        job = s.ok("POST", CUSTOM_JOBS, custom_job(["sh", "-c", 'echo hi > "$AIP_MODEL_DIR/m"'], name="victim",
                                                   baseOutputDirectory={"outputUriPrefix": str(prefix)}))
        go.touch()
        assert _ended(s, planter["name"])["state"] == "JOB_STATE_SUCCEEDED"
        assert prefix.is_symlink()
        ended = _ended(s, job["name"])
        assert list(victim.iterdir()) == [], "the controller made a folder through the planted link"
        assert ended["state"] == "JOB_STATE_FAILED", ended
        message = ended["error"]["message"]
        assert "refusing a symlink where a folder was expected" in message and f"{planter_id}/1/out" in message, \
            message
    finally:
        s.stop()
        cancel_all(s.root)

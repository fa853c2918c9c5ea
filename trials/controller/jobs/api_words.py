"""A job's error in the words of whoever made it through ``trials serve``: the fields as the SDK and the REST
body spell them (not the CLI's flags), and where the trainer's own output is (pure).

The controller writes one error for every way a job is run; ``trials serve`` answers its users with
:func:`api_error` of it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from trials import protocol
from trials.controller.policy.exits import ALLOW_MORE, KEEP_GOING

API_ALLOW_MORE = "maxFailedTrialCount (the SDK's max_failed_trial_count) N allows N failed trials"
API_KEEP_GOING = "`trials resume JOB --keep-going` runs every trial"
_CLI_WORDS = {ALLOW_MORE: API_ALLOW_MORE, KEEP_GOING: API_KEEP_GOING}
_TRIAL = re.compile(r"\bTrial (\d+): ")
_REPLICA = re.compile(r"\bThe replica (workerpool\d+-\d+) ")


def api_message(message: str, *, job_dir: str) -> str:
    """``message`` with the CLI's words in the API's, and, when it names a failed trial, where that
    trial's trainer wrote its output (its replica's stderr log in the job folder)."""
    out = message
    for cli, api in _CLI_WORDS.items():
        out = out.replace(cli, api)
    trial = _TRIAL.search(message)
    if trial is None:
        return out
    replica = _REPLICA.search(message, trial.end())
    name = replica.group(1) if replica else protocol.replica_name(0, 0)
    log = os.path.join(job_dir, trial.group(1), protocol.stderr_log(name))
    return f"{out} The trainer's output: {log} (and {protocol.stdout_log(name)} beside it)."


def api_error(error: Mapping[str, Any] | None, *, job_dir: str) -> dict[str, Any] | None:
    """The job's stored ``error`` (``{code, message}``) as an API job's REST ``error``."""
    if not error:
        return None
    return {**error, "message": api_message(str(error.get("message", "")), job_dir=job_dir)}

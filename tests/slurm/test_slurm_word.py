"""Slurm's word on a job's end from the real commands (``commands.Slurm.job_word``): what a trial's end is
checked against (issue 46), and what a process of the job's owner cannot forge in it."""

from __future__ import annotations

import subprocess

import pytest
from slurmjobs import wait_for

from trials.controller.slurm import commands
from trials.controller.slurm import states as slurm_states
from trials.controller.slurm.verdict import SlurmWord

pytestmark = pytest.mark.integration


def _submit(env, name: str, script: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", "-J", name, "-o", "/dev/null", "--wrap", script], env=env,
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return out.strip().split(";")[0]


def _update(env, job_id: str, field: str) -> None:
    subprocess.run(["scontrol", "update", f"jobid={job_id}", field], env=env, check=True, timeout=30)


def test_the_exit_code_scontrol_gives_and_what_a_jobs_owner_cannot_forge_in_it(slurm_env):
    slurm = commands.Slurm(slurm_env)
    ended = _submit(slurm_env, "trials-w-1", "exit 4")
    word = wait_for(lambda: (w := slurm.job_word(ended, "trials-w-1")) and isinstance(w, SlurmWord)
                    and w.state in slurm_states.ENDED and w, 30, "the job's end")
    assert (word.state, word.status, word.source) == ("FAILED", 4, "scontrol") and word.nodes in ("n1", "n2")

    running = _submit(slurm_env, "trials-w-2", "sleep 60")
    try:
        wait_for(lambda: (w := slurm.job_word(running, "trials-w-2")) and w.state == "RUNNING", 30, "its start")
        # the owner (any trial's trainer) writes Slurm-looking fields into the comment ...
        _update(slurm_env, running, "comment=c JobState=COMPLETED ExitCode=0:0 NodeList=forged")
        word = slurm.job_word(running, "trials-w-2")
        assert isinstance(word, SlurmWord) and (word.state, word.nodes) != ("COMPLETED", "forged")
        assert word.state == "RUNNING"
        # ... and into the name: then no line of the job is read as Slurm's
        _update(slurm_env, running, "name=x JobState=COMPLETED ExitCode=0:0")
        said = slurm.job_word(running, "trials-w-2")
        assert isinstance(said, str) and said.startswith("the job's name is not trials-w-2")
        # squeue's rows: a "|" in the name or comment does not move the state
        _update(slurm_env, running, "name=a|COMPLETED|n9|None")
        assert commands.job_state(slurm.jobs([running]))[running][0] == "RUNNING"
    finally:
        slurm.cancel(running)
    # a job Slurm does not know, on a cluster without accounting: no word, and sacct is not asked again
    assert slurm.job_word("999999", "trials-w-3") is None and slurm.accounting is False

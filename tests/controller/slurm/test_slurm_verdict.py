"""trials/controller/slurm/verdict.py: Slurm's word parsed (scontrol, sacct) without trusting what a job's
owner can set, and the pure decision of which end of a replica counts (its entry's exit file or Slurm's)."""

from __future__ import annotations

import pytest

from trials.controller.slurm import verdict
from trials.controller.slurm.launchfile import ExitNote
from trials.controller.slurm.verdict import SlurmWord

NAME = "trials-0123456789-2"


def _line(job_id="41", name=NAME, state="COMPLETED", code="0:0", nodes="n1", comment="trials:h:1:2", het=""):
    return (f"JobId={job_id} {het}JobName={name} UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 "
            f"Account=(null) QOS=(null) JobState={state} Reason=None Dependency=(null) Requeue=0 Restarts=0 "
            f"BatchFlag=1 Reboot=0 ExitCode={code} RunTime=00:00:01 Partition=debug NodeList={nodes} "
            f"BatchHost={nodes} NumNodes=1 WorkDir=/tmp/a b Comment={comment} StdOut=/tmp/o Power= ")


def _claim(status: int) -> ExitNote:
    return ExitNote(status=status, oom=False, wall=1.0, node="forged", leftovers=())


def _word(state: str, code: int = 0, sig: int = 0) -> SlurmWord:
    return SlurmWord(state=state, exit_code=code, exit_signal=sig, nodes="n1", source="scontrol")


def test_scontrol_of_a_one_component_job():
    word = verdict.parse_scontrol_job(_line(state="FAILED", code="3:0") + "\n", "41", NAME)
    assert word == SlurmWord(state="FAILED", exit_code=3, exit_signal=0, nodes="n1", source="scontrol")
    assert word.status == 3


def test_scontrol_of_a_heterogeneous_job_takes_the_leaders_exit_and_merges_the_states():
    text = "\n".join([_line("41", het="HetJobId=41 HetJobOffset=0 ", state="FAILED", code="143:0", nodes="n1"),
                      _line("42", het="HetJobId=41 HetJobOffset=1 ", state="FAILED", code="0:0", nodes="n2")])
    word = verdict.parse_scontrol_job(text, "41", NAME)
    assert isinstance(word, SlurmWord) and (word.state, word.status, word.nodes) == ("FAILED", 143, "n1,n2")


def test_a_name_or_comment_holding_forged_fields_is_never_read_as_slurms():
    # any process of the job's owner may run: scontrol update jobid=41 name="x JobState=COMPLETED ExitCode=0:0"
    renamed = _line(name="x JobState=COMPLETED ExitCode=0:0", state="RUNNING")
    said = verdict.parse_scontrol_job(renamed, "41", NAME)
    assert isinstance(said, str) and said.startswith(f"the job's name is not {NAME}")
    # a comment comes after Slurm's own fields: the first JobState and ExitCode are Slurm's
    commented = _line(state="FAILED", code="1:0", comment="c JobState=COMPLETED ExitCode=0:0 NodeList=forged")
    word = verdict.parse_scontrol_job(commented, "41", NAME)
    assert isinstance(word, SlurmWord) and (word.state, word.status, word.nodes) == ("FAILED", 1, "n1")
    # the name must be ours whole, not a prefix of a longer one
    assert isinstance(verdict.parse_scontrol_job(_line(name=NAME + "0"), "41", NAME), str)


def test_scontrol_of_another_job_garbage_or_nothing_is_none():
    assert verdict.parse_scontrol_job(_line(job_id="40"), "41", NAME) is None
    assert verdict.parse_scontrol_job("garbage\n\nJobId=x\n", "41", NAME) is None
    assert verdict.parse_scontrol_job("", "41", NAME) is None
    assert isinstance(verdict.parse_scontrol_job(f"JobId=41 JobName={NAME} UserId=0", "41", NAME), str)


def test_sacct_allocation_lines():
    text = "41+0|CANCELLED by 0|0:15|n1\n41+1|CANCELLED by 0|0:0|n2\nbad\n40|COMPLETED|0:0|n1\n"
    word = verdict.parse_sacct(text, "41")
    assert word == SlurmWord(state="CANCELLED", exit_code=0, exit_signal=15, nodes="n1,n2", source="sacct")
    assert word.status == 143
    assert verdict.parse_sacct("41|FAILED|2:0|None assigned\n", "41") == SlurmWord(
        state="FAILED", exit_code=2, exit_signal=0, nodes="", source="sacct")
    assert verdict.parse_sacct("", "41") is None and verdict.parse_sacct("41|FAILED|x:0|n1", "41") is None


@pytest.mark.parametrize(("word", "status"), [
    (_word("COMPLETED"), 0), (_word("FAILED", 1), 1), (_word("FAILED", 0, 9), 137), (_word("CANCELLED", 143), 143),
    (_word("CANCELLED"), 143), (_word("TIMEOUT"), 143), (_word("NODE_FAIL"), 137), (_word("PREEMPTED", 0), 137),
    (_word("OUT_OF_MEMORY", 0, 9), 137), (_word("FAILED"), 1), (_word("BOOT_FAIL", 3), 137),
])
def test_slurms_status_of_a_job(word, status):
    assert word.status == status


@pytest.mark.parametrize(("status", "state", "replica", "n_tasks", "claimed", "counts"), [
    (0, "RUNNING", "workerpool0-0", 1, False, False),  # a one-task job that runs has not exited
    (1, "RUNNING", "workerpool0-0", 1, False, False),
    (1, "COMPLETING", "workerpool0-0", 1, False, False),
    (1, "RUNNING", "workerpool1-0", 2, False, True),  # several tasks: a replica's end is its entry's word
    (0, "RUNNING", "workerpool1-0", 2, False, True),
    (0, "RUNNING", "workerpool0-0", 2, False, False),  # ... but a primary's success waits for the job's end
    (1, "RUNNING", "workerpool0-0", 2, False, True),
    (143, "RUNNING", "workerpool1-0", 2, True, False),  # and so does what ends after it
    (1, "PENDING", "workerpool1-0", 2, False, False),  # a job not started: nothing of it exited
    (1, "CONFIGURING", "workerpool1-0", 2, False, False),
    (1, "UNKNOWN", "workerpool1-0", 2, False, False),  # squeue did not answer
])
def test_judge_running(status, state, replica, n_tasks, claimed, counts):
    assert verdict.judge_running(_claim(status), state=state, replica=replica, n_tasks=n_tasks,
                                 success_claimed=claimed) is counts


@pytest.mark.parametrize(("claim", "word", "n_tasks", "status", "counted"), [
    (0, _word("COMPLETED"), 1, 0, True),
    (3, _word("FAILED", 3), 1, 3, True),
    (0, _word("FAILED", 3), 1, 3, False),  # the forged success of issue 46, once the job ended
    (3, _word("COMPLETED"), 1, 0, False),
    (0, _word("CANCELLED"), 1, 143, False),  # cancelled before it ran: no success
    (143, _word("CANCELLED", 143), 1, 143, True),
    (137, _word("NODE_FAIL"), 1, 137, True),
    (0, _word("NODE_FAIL"), 1, 137, False),
    (0, _word("COMPLETED"), 3, 0, True),
    (1, _word("COMPLETED"), 3, 0, False),  # every task exited 0
    (0, _word("FAILED", 143), 3, 0, True),  # a primary's success, the others stopped
    (143, _word("FAILED", 143), 3, 143, True),
    (200, _word("FAILED", 143), 3, 143, False),  # above the highest of the tasks'
    (0, _word("PREEMPTED"), 3, 137, False),
])
def test_judge_ended(claim, word, n_tasks, status, counted):
    found = verdict.judge_ended(_claim(claim), word, n_tasks=n_tasks)
    assert (found.status, found.counted) == (status, counted)
    assert bool(found.conflict) is not counted
    if not counted:
        assert f"the exit file says status {claim}" in found.conflict and word.state in found.conflict


def test_judge_ended_without_slurms_word_counts_nothing():
    found = verdict.judge_ended(_claim(0), None, n_tasks=1)
    assert found.status is None and not found.counted and "Slurm no longer knows the job" in found.conflict

"""trials/controller/slurm/commands.py: squeue's rows parsed, and one state per job (heterogeneous
components merged, array tasks and garbage ignored, a running component keeps the job running, a
lost component wins over the others' ends)."""

from __future__ import annotations

import pytest

from trials.controller.slurm import commands
from trials.controller.slurm.commands import JobRow


def _row(job_id: str, state: str, nodes: str = "") -> JobRow:
    return JobRow(job_id=job_id, name="trials-x-1", comment="trials:h:1:2", state=state, nodes=nodes, reason="None")


def test_parse_squeue_merges_het_components_under_the_leader_id():
    text = ("12+0|RUNNING|n1|None|trials-ab-1|trials:h:1:2\n"
            "12+1|PENDING||Resources|trials-ab-1|trials:h:1:2\n"
            "13|COMPLETED|n2|None|trials-ab-2|trials:h:1:2\n")
    rows = commands.parse_squeue(text)
    assert [(r.job_id, r.state, r.nodes) for r in rows] == [("12", "RUNNING", "n1"), ("12", "PENDING", ""),
                                                            ("13", "COMPLETED", "n2")]
    assert rows[0].name == "trials-ab-1" and rows[0].comment == "trials:h:1:2" and rows[1].reason == "Resources"


def test_parse_squeue_ignores_array_tasks_garbage_and_short_lines():
    text = ("14_3|RUNNING|n1|None|arr|c\n"  # an array task: never ours
            "14_[4-9]|PENDING||None|arr|c\n"
            "garbage\n"
            "\n"
            "x|RUNNING|n1|None|y|z\n"
            "16|RUNNING|n1|few\n"
            "17|CANCELLED by 0|n1|None|ok|c\n")
    rows = commands.parse_squeue(text)
    assert [(r.job_id, r.state) for r in rows] == [("17", "CANCELLED")]  # "CANCELLED by 0": its first word


def test_a_name_or_comment_holding_the_separator_cannot_shift_the_state_or_the_nodes():
    # a job's owner (any trial's trainer: the same user) may rename it and change its comment (scontrol update)
    text = "15|RUNNING|n1|None|x|COMPLETED|n9|None|trials-ab-1|trials:h:1:2\n"
    [row] = commands.parse_squeue(text)
    assert (row.job_id, row.state, row.nodes, row.reason) == ("15", "RUNNING", "n1", "None")
    assert row.comment == "trials:h:1:2" and row.name == "x|COMPLETED|n9|None|trials-ab-1"
    assert commands.SQUEUE_FORMAT.startswith("%i|%T|%N|%r|")


def test_parse_squeue_keeps_a_row_with_an_empty_state():
    assert [r.state for r in commands.parse_squeue("18||n1|None|n|c\n")] == [""]


def test_job_state_merges_components_and_their_nodes():
    states = commands.job_state([_row("12", "COMPLETED", "n1"), _row("12", "RUNNING", "n2"), _row("13", "PENDING")])
    assert states == {"12": ("RUNNING", "n1,n2"), "13": ("PENDING", "")}


@pytest.mark.parametrize(("first", "second", "merged"), [
    ("RUNNING", "COMPLETED", "RUNNING"),  # one running component keeps the job running
    ("COMPLETED", "RUNNING", "RUNNING"),
    ("COMPLETED", "PENDING", "PENDING"),
    ("COMPLETED", "COMPLETED", "COMPLETED"),
    ("COMPLETED", "FAILED", "FAILED"),  # the worst end
    ("FAILED", "COMPLETED", "FAILED"),
    ("NODE_FAIL", "CANCELLED", "NODE_FAIL"),  # lost wins
    ("CANCELLED", "NODE_FAIL", "NODE_FAIL"),
    ("COMPLETED", "NODE_FAIL", "NODE_FAIL"),
    ("FAILED", "PREEMPTED", "PREEMPTED"),
    ("BOOT_FAIL", "FAILED", "BOOT_FAIL"),
])
def test_job_state_of_two_components(first, second, merged):
    assert commands.job_state([_row("7", first), _row("7", second)])["7"][0] == merged


def test_a_lost_component_wins_whatever_the_order_of_three():
    for order in (("COMPLETED", "NODE_FAIL", "FAILED"), ("FAILED", "COMPLETED", "NODE_FAIL"),
                  ("NODE_FAIL", "FAILED", "COMPLETED")):
        assert commands.job_state([_row("7", s) for s in order])["7"][0] == "NODE_FAIL", order


def test_job_state_of_nothing_is_empty():
    assert commands.job_state([]) == {}


def test_last_line_is_the_last_non_blank_line_printable_and_bounded():
    assert commands.last_line(b"") == "no message"
    assert commands.last_line(b"first\nsbatch: error: Batch job submission failed\n\n  \n") == \
        "sbatch: error: Batch job submission failed"
    assert "\x1b" not in commands.last_line(b"bad \x1b[31mred\n")
    assert len(commands.last_line(b"x" * 5000)) <= 300

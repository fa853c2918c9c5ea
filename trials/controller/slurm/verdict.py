"""Which end of a Slurm replica counts: its entry's exit file is a claim, Slurm's word on the job is the truth.

A trainer runs as the same user as every other trial's and can write any trial's exit file (issue 46: one
trainer ended another trial SUCCEEDED with a well-formed file). So (pure functions, no I/O):

- while Slurm says the job has not ended, a one-task job's exit file is ignored; in a job of several tasks
  (one per replica) a replica's file is its entry's word (Slurm keeps no per-task end; a replica restarted
  alone needs it), except a primary's success: that waits for the job's end like any other claim of its job;
- once the job ended, the file counts only when it agrees with Slurm: a one-task job's status is the batch
  step's exit code (the entry exits with the status it writes); a job of several tasks exits with the
  highest of its tasks' (``srun``), so a claim above it, or any claim but 0 of a job that completed, is
  false. On a disagreement Slurm's status counts, and what each side said is kept.

Slurm's word: ``scontrol show job -o`` while slurmctld keeps the job (``MinJobAge``), ``sacct`` after that
where accounting exists. Both print the job's name, which its owner (any trial's trainer) may change:
:func:`parse_scontrol_job` reads a line only when the name is the one the controller gave.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from trials.controller.slurm.launchfile import ExitNote
from trials.controller.slurm.states import LOST, QUEUED, merge_states
from trials.printable import printable

PRIMARY = "workerpool0-0"
_SIGKILL, _SIGTERM = 128 + signal.SIGKILL, 128 + signal.SIGTERM
_HEAD = re.compile(r"JobId=(\d+)(?: HetJobId=(\d+) HetJobOffset=(\d+))? JobName=")


@dataclass(frozen=True, slots=True)
class SlurmWord:
    """What Slurm says about one job (a heterogeneous job's components merged)."""

    state: str  # JobState (the worst end over the components)
    exit_code: int  # the batch step's exit code (ExitCode=N:S -> N) ...
    exit_signal: int  # ... or the signal that ended it (S)
    nodes: str  # NodeList of the components
    source: str  # "scontrol" or "sacct"

    @property
    def status(self) -> int:
        """The Vertex-style status Slurm gives the job (the entry of a one-task job exits with its replica's)."""
        if self.state in LOST or self.state == "OUT_OF_MEMORY":
            return _SIGKILL  # a node lost, or the job over its memory: as a VM that vanished
        if self.exit_signal:
            return 128 + self.exit_signal
        if self.exit_code:
            return self.exit_code
        if self.state == "COMPLETED":
            return 0
        if self.state in ("CANCELLED", "TIMEOUT", "DEADLINE"):
            return _SIGTERM  # stopped by Slurm before its script said anything
        return 1

    def said(self) -> str:
        return (f"Slurm ({self.source}) says the job ended {self.state} with exit code "
                f"{self.exit_code}:{self.exit_signal}")


@dataclass(frozen=True, slots=True)
class ExitVerdict:
    """A replica's end: its status, whether the entry's exit file counted (its oom, leftovers, time), and
    what the file and Slurm each said when they disagree ("" when they agree)."""

    status: int | None  # None: Slurm gave no word on the job (it no longer knows it)
    counted: bool
    conflict: str = ""


def parse_scontrol_job(text: str, job_id: str, name: str) -> SlurmWord | str | None:
    """``scontrol show job -o JOB_ID``: Slurm's word, None when no line is the job's, or a one-line reason
    when the job's lines cannot be trusted (its name is not ``name``: a same-user process renamed it, and
    a name may hold ``JobState=COMPLETED``)."""
    states: list[str] = []
    nodes: list[str] = []
    code: tuple[int, int] | None = None
    for line in text.splitlines():
        head = _HEAD.match(line)
        if head is None or (head.group(2) or head.group(1)) != job_id:
            continue
        rest = line[head.end():]
        if not rest.startswith(name + " "):
            return f"the job's name is not {name} (renamed: {printable(rest[:60])!r}...)"
        rest = rest[len(name):]  # what follows the name is Slurm's own (the comment comes after these)
        state = re.search(r" JobState=([A-Z_]+)", rest)
        exit_code = re.search(r" ExitCode=(\d+):(\d+)", rest)
        if state is None or exit_code is None:
            return "scontrol printed no JobState or ExitCode for it"
        states.append(state.group(1))
        node = re.search(r" NodeList=(\S+)", rest)
        if node and node.group(1) != "(null)":
            nodes.append(node.group(1))
        if head.group(1) == job_id:  # the leader (or the only component): the batch script's exit
            code = (int(exit_code.group(1)), int(exit_code.group(2)))
    if not states:
        return None
    if code is None:
        return "scontrol printed no line for the job's leader"
    return SlurmWord(state=merge_states(states), exit_code=code[0], exit_signal=code[1], nodes=",".join(nodes),
                     source="scontrol")


def parse_sacct(text: str, job_id: str) -> SlurmWord | None:
    """``sacct -n -P -X -j JOB_ID -o JobID,State,ExitCode,NodeList`` (no field a job's owner can set)."""
    states: list[str] = []
    nodes: list[str] = []
    code: tuple[int, int] | None = None
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 4:
            continue
        jid, state, exit_code, node = parts
        leader, _, offset = jid.partition("+")
        codes = exit_code.split(":")
        if leader != job_id or not state or len(codes) != 2 or not all(c.isdigit() for c in codes):
            continue
        states.append(state.split()[0])  # "CANCELLED by 0"
        if node and node not in ("None assigned", "(null)"):
            nodes.append(node)
        if offset in ("", "0"):
            code = (int(codes[0]), int(codes[1]))
    if not states or code is None:
        return None
    return SlurmWord(state=merge_states(states), exit_code=code[0], exit_signal=code[1], nodes=",".join(nodes),
                     source="sacct")


def started(state: str) -> bool:
    """Slurm says the job has started (running, suspended or ending); not queued, not unknown."""
    return state not in QUEUED and state not in ("", "UNKNOWN")


def judge_running(claim: ExitNote, *, state: str, replica: str, n_tasks: int, success_claimed: bool) -> bool:
    """Does an exit file count while Slurm says its job (in ``state``) has not ended? Only in a job of several
    tasks that has started, and not once its primary claimed success (that and every later claim wait for
    the job's end)."""
    if n_tasks <= 1 or not started(state):
        return False
    return not (success_claimed or (replica == PRIMARY and claim.status == 0))


def judge_ended(claim: ExitNote, word: SlurmWord | None, *, n_tasks: int) -> ExitVerdict:
    """A replica's end once Slurm says its job ended (``word``: its word, in one of the ``ENDED`` states, or
    None when Slurm no longer knows the job)."""
    if word is None:
        return ExitVerdict(status=None, counted=False,
                       conflict=f"the exit file says status {claim.status}, and Slurm no longer knows the job "
                                f"(no accounting): the file is not counted")
    said = word.said()
    if word.state in LOST or word.state == "OUT_OF_MEMORY":
        if claim.status == word.status:
            return ExitVerdict(status=claim.status, counted=True)
        return _conflict(claim, word.status, said)
    if n_tasks <= 1:
        if claim.status == word.status:
            return ExitVerdict(status=claim.status, counted=True)
        return _conflict(claim, word.status, said)
    # several tasks: srun exits with the highest of its tasks' statuses
    if word.status == 0 and claim.status != 0:
        return _conflict(claim, 0, said + " (every task exited 0)")
    if claim.status > word.status:
        return _conflict(claim, word.status, said + " (the highest of its tasks')")
    return ExitVerdict(status=claim.status, counted=True)


def _conflict(claim: ExitNote, status: int, said: str) -> ExitVerdict:
    return ExitVerdict(status=status, counted=False,
                   conflict=f"the exit file says status {claim.status}, {said}: Slurm's status {status} counts")

"""What the caller of a job loop decides about its running trials, beside the loop's own rules.

A :class:`TrialPolicy` is consulted at two points of each pass over a running trial (see
:class:`trials.controller.loop.runner.JobRunner`): when a replica's exit has been classified (it may
change what the exit means) and once the pass's exits, restarts and timers have been handled (it
may interrupt the trial or end it). Everything it asks is done by the loop's own mechanisms: the
backend's stop (SIGTERM, the grace period, SIGKILL of the whole group), the restart with
``TRIALS_ATTEMPT`` + 1. ``trials sweep`` uses :class:`LoopRules`, which changes nothing;
``trials check`` drives its probes with one (:class:`trials.controller.check.probe.ProbePolicy`).
"""

from __future__ import annotations

import enum
from typing import Protocol

from trials.controller.loop.running import ExitDecision, RunningTrial


class PassAction(str, enum.Enum):
    """What a policy asks of the loop for one running trial at the end of a pass."""

    GO_ON = "go_on"  # nothing: the loop's rules decide
    # A maintenance event on the whole trial: every replica gets SIGTERM and starts again
    # (TRIALS_ATTEMPT + 1) once its group is gone, whatever its exit; no restart budget is used.
    INTERRUPT = "interrupt"
    # End the trial now, as its timeout would (SIGTERM, the grace period, SIGKILL; ACTIVE -> STOPPING),
    # but not as a failure: it is recorded with what it reported.
    STOP = "stop"


class TrialPolicy(Protocol):
    """The caller's say over each running trial (the default, :class:`LoopRules`, has none)."""

    def on_exit(self, run: RunningTrial, name: str, decision: ExitDecision) -> ExitDecision:
        """What the exit of replica ``name`` means, given the loop's classification ``decision``
        (``running.decide_exit``, made once per exit); the loop acts on the returned decision."""
        ...

    def on_pass(self, run: RunningTrial, now: float) -> PassAction:
        """Once per pass over a running trial, after its exits, due restarts and timers (also while
        it stops: the loop then ignores the answer)."""
        ...


class LoopRules:
    """The default policy: the loop's rules alone (``trials sweep``)."""

    def on_exit(self, run: RunningTrial, name: str, decision: ExitDecision) -> ExitDecision:
        return decision

    def on_pass(self, run: RunningTrial, now: float) -> PassAction:
        return PassAction.GO_ON

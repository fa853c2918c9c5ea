"""Slurm's job states, as trials reads them: which end a job, which are queued, which are not the trainer's doing."""

from __future__ import annotations

from collections.abc import Sequence

# Slurm's job states that end a job (squeue --states=all lists them while the controller keeps the job)
ENDED = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT"})
QUEUED = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SUSPENDED"})
LOST = frozenset({"BOOT_FAIL", "NODE_FAIL", "PREEMPTED", "REVOKED"})  # not the trainer's doing: a worker restart


def merge_states(states: Sequence[str]) -> str:
    """The state of a job of several components (one still running keeps it running; else the worst end)."""
    out = states[0] if states else ""
    for state in states[1:]:
        out = _merge(out, state)
    return out


def _merge(a: str, b: str) -> str:
    if a not in ENDED:
        return a
    if b not in ENDED:
        return b
    return a if a in LOST or b == "COMPLETED" else b

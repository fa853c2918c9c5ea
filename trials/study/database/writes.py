"""What a batch writes to a database trial, without the database (no sqlalchemy): the job loop and a
journal job import this; :mod:`trials.study.database.rdb` writes it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna import distributions
from optuna.trial import TrialState


class NotHeldError(RuntimeError):
    """A statement a batch required to change a row changed none (the trial's lease is another worker's):
    the batch's transaction was rolled back, nothing of it is written."""


@dataclass
class TrialWrite:
    """What one batch writes to one trial; :func:`apply` writes it in the caller's transaction."""

    params: dict[str, tuple[float, distributions.BaseDistribution]] = field(default_factory=dict)
    user_attrs: dict[str, Any] = field(default_factory=dict)
    system_attrs: dict[str, Any] = field(default_factory=dict)
    steps: dict[int, float] = field(default_factory=dict)
    state: TrialState | None = None  # RUNNING -> this (a finished state, or WAITING: back to the queue)
    values: list[float] | None = None
    required: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # each must change a row
    # moved to RUNNING by this worker since the batch began (the claim's writes): nothing to check
    claimed: bool = False

    @property
    def only_state(self) -> bool:
        """Nothing but a state: finishing a trial already finished is then skipped, as Optuna's
        ``tell(skip_if_finished=True)`` does; any other write to a finished trial is refused."""
        return not (self.params or self.user_attrs or self.system_attrs or self.steps or self.required)


def check_values(values: Sequence[float], n_objectives: int) -> list[float]:
    """The values Optuna's ``tell`` accepts for COMPLETE: one per objective, none NaN."""
    out = [float(v) for v in values]
    if len(out) != n_objectives:
        raise ValueError(f"expected {n_objectives} values (one per objective), got {len(out)}: {out}")
    if any(math.isnan(v) for v in out):
        raise ValueError(f"a trial's values cannot be NaN, got {out}")
    return out

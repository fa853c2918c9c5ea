"""Chaos mode: when to send a running trial's replicas a "maintenance" SIGTERM, and which one.

Injections follow a Poisson process per trial (``rate`` per trial-second, seeded). An injected
restart ends an attempt like a VM maintenance event on Vertex: the replica is restarted with the
same trial id and environment, and the restart does not use up the crash-restart budget.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence


class Chaos:
    """The injection schedule of one job.

    Args:
        rate: injections per trial-second (0: never).
        seed: seed of the schedule (None: not reproducible).
    """

    def __init__(self, rate: float, seed: int | None = None):
        if not rate >= 0 or math.isinf(rate):
            raise ValueError(f"inject_restarts must be a finite rate >= 0, got {rate!r}")
        self.rate = rate
        self._rng = random.Random(seed)

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def next_due(self, now: float) -> float:
        """When the next injection into a trial comes due (``inf`` when chaos mode is off)."""
        return now + self._rng.expovariate(self.rate) if self.rate > 0 else math.inf

    def pick(self, candidates: Sequence[str]) -> str | None:
        """The replica to stop among those running and not already stopping (None: none)."""
        return self._rng.choice(list(candidates)) if candidates else None

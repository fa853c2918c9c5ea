"""Which trials are best: the one ranking every view of a job and ``trials.tune`` use (pure).

One metric: the higher value wins when it is maximized, the lower one otherwise; only finite values
rank; a tie goes to the candidate given first (callers give trials in id order: the earlier trial).
Several metrics: the Pareto front, the candidates no other one dominates.

Each caller chooses its candidates; this module only orders them. ``trials.tune`` and the report's
table take every SUCCEEDED trial, ``trials best``/``sweep``'s summary the COMPLETE ones (a trial
stopped early is PRUNED in the storage), the plots and the live progress the real results (not
stopped early).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")


def ranked(candidates: Iterable[T], value: Callable[[T], float | None], *, maximize: bool) -> list[T]:
    """The candidates whose value is a finite number, best first; ties keep the order given.

    Args:
        candidates: the trials (any shape) that may rank, in id order.
        value: a candidate's value of the metric that decides (None: it has none and does not rank).
        maximize: the metric's goal.

    Example:
        >>> ranked([("1", 0.2), ("2", 0.5), ("3", 0.5), ("4", None)], lambda t: t[1], maximize=True)
        [('2', 0.5), ('3', 0.5), ('1', 0.2)]
    """
    sign = 1.0 if maximize else -1.0
    scored = [(sign * v, c) for c in candidates if (v := value(c)) is not None and math.isfinite(v)]
    scored.sort(key=lambda pair: -pair[0])  # a stable sort: a tie keeps the order given
    return [c for _, c in scored]


def best_of(candidates: Iterable[T], value: Callable[[T], float | None], *, maximize: bool) -> T | None:
    """The first of :func:`ranked` (the best; a tie: the one given first), or None when none ranks."""
    found = ranked(candidates, value, maximize=maximize)
    return found[0] if found else None


def pareto_front(candidates: Iterable[T], values: Callable[[T], Sequence[float]],
                 maximize: Sequence[bool]) -> list[T]:
    """The candidates no other one dominates (as good in every metric, better in one), in the order given.

    Equal values dominate neither way: both are on the front (as in Optuna's ``best_trials``).
    """
    items = list(candidates)
    signs = [1.0 if mx else -1.0 for mx in maximize]
    keys = [[s * v for s, v in zip(signs, values(c), strict=True)] for c in items]
    return [c for c, k in zip(items, keys, strict=True) if not any(dominates(o, k) for o in keys)]


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether ``a`` dominates ``b`` (values oriented so that larger is better)."""
    return all(x >= y for x, y in zip(a, b, strict=True)) and any(x > y for x, y in zip(a, b, strict=True))

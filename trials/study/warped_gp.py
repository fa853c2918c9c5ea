"""Optuna's GPSampler fitted to warped objective values, as Google Vizier's GP bandit fits its labels.

Optuna's GPSampler standardises the objective values and fits a GP to them. On a heavy-tailed
objective (Rosenbrock's values span six decades; a loss that blows up for some learning rates) the
few huge values dominate the fit, and the GP models the bad region instead of the good one. OSS
Vizier, which Vertex's default algorithm is, warps its labels first (``create_default_warper``:
half-rank, then log). This sampler does the first step before Optuna's GP sees them:

- **half-rank** (the default): values worse than the median are replaced by the Gaussian quantile
  of their rank, scaled by the spread of the better half: the bad half keeps its order but not its
  magnitude; the good half is unchanged;
- **log** (``log=True``, Vizier's second step): ``0.5 - log1p((max - y) / (max - min) * 0.5) / log(1.5)``,
  differences among the good values stretched, among the bad ones compressed. Measured worse on
  Branin, Hartmann6 and the mixed space (``benchmarks/README.md`` part 3), so off.

Both are monotone, so the best trial, the ranks and the acquisition's incumbent are unchanged; only
the GP's view of the distances between values is. The values in the study are never touched.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from trials.study.npgp import NumpyGPSampler

LOG_OFFSET = 1.5  # Vizier's LogWarperComponent default


def half_rank(y: np.ndarray) -> np.ndarray:
    """Vizier's HalfRankComponent on labels to maximise: the worse half mapped to Gaussian quantiles."""
    y = np.array(y, dtype=np.float64)
    if y.size <= 1:
        return y
    median = float(np.median(y))
    unique = np.unique(y)
    good = unique[unique >= median]
    std = math.sqrt(float(((good - median) ** 2).sum()) / good.size)
    if not std > 0:
        std = math.sqrt(float(((unique - median) ** 2).sum()) / unique.size)
    dense_rank = np.searchsorted(unique, y) + 1  # 1 = the worst value
    median_index = int(np.searchsorted(unique, median, "left"))
    denominator = median_index + (0.5 if unique[median_index] == median else 0.0)
    normal = NormalDist()
    out = y.copy()
    for i, (value, rank) in enumerate(zip(y, dense_rank, strict=True)):
        if value < median:
            out[i] = normal.inv_cdf(0.5 * (rank - 0.5) / denominator) * std + median
    return np.asarray(out, dtype=np.float64)


def log_warp(y: np.ndarray, offset: float = LOG_OFFSET) -> np.ndarray:
    """Vizier's LogWarperComponent on labels to maximise: result in [0.5 - 1, 0.5], best = 0.5."""
    y = np.asarray(y, dtype=float)
    lo, hi = float(y.min()), float(y.max())
    if not hi > lo:
        return np.full_like(y, 0.5)
    return 0.5 - np.log1p((hi - y) / (hi - lo) * (offset - 1)) / math.log(offset)


def warp(values: Sequence[float], *, maximize: bool, half_rank_warp: bool = True, log: bool = False) -> np.ndarray:
    """The warped values, in the study's own direction (lower is still better when minimising)."""
    sign = 1.0 if maximize else -1.0
    y = sign * np.asarray(values, dtype=float)
    finite = np.isfinite(y)
    out = y.copy()
    if finite.sum() > 1:
        w = half_rank(y[finite]) if half_rank_warp else y[finite]
        out[finite] = log_warp(w) if log else w
        # infinite values (a diverged loss): just below the worst finite one
        out[~finite & (y < 0)] = out[finite].min() - 1.0
        out[~finite & (y > 0)] = out[finite].max()
    return np.asarray(sign * out, dtype=np.float64)


class WarpedGPSampler(NumpyGPSampler):
    """Optuna's GPSampler (as :mod:`trials.study.npgp` computes it, without torch) whose GP sees warped
    values (one objective; otherwise plain GPSampler)."""

    def __init__(self, *, half_rank_warp: bool = True, log: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._warps = {"half_rank_warp": half_rank_warp, "log": log}

    def _sample_relative_impl(self, study: optuna.Study, completed_trials: list[FrozenTrial],
                              running_trials: list[FrozenTrial],
                              search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if len(study.directions) == 1 and len(completed_trials) > 1:
            maximize = study.direction == StudyDirection.MAXIMIZE
            warped = warp([t.values[0] for t in completed_trials], maximize=maximize, **self._warps)
            shadow = []
            for t, v in zip(completed_trials, warped, strict=True):
                c = copy.copy(t)
                c.values = [float(v)]
                shadow.append(c)
            completed_trials = shadow
        return super()._sample_relative_impl(
            study, completed_trials, running_trials, search_space)

"""Test problems of the search benchmark: functions, known optima and the StudySpec each is searched with.

Four continuous classics (Branin, Hartmann6, noisy Hartmann6, Rosenbrock-5D) and two spaces a job
often has: ``mixed`` (a double, an integer and a categorical: Branin with its second axis on integers
and a categorical scale/shift) and ``conditional`` (a categorical choosing one of three branches, each
with its own child parameters). Every objective takes the parameter values by parameterId.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NOISE_SD = 0.1  # noisy Hartmann6: Gaussian noise on each observation (the function spans [-3.32, 0])


def branin(x: Sequence[float]) -> float:
    x1, x2 = x
    a, b, c, r, s, t = 1.0, 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


_H_A = ((10, 3, 17, 3.5, 1.7, 8), (0.05, 10, 17, 0.1, 8, 14), (3, 3.5, 1.7, 10, 17, 8), (17, 8, 0.05, 10, 0.1, 14))
_H_P = ((1312, 1696, 5569, 124, 8283, 5886), (2329, 4135, 8307, 3736, 1004, 9991),
        (2348, 1451, 3522, 2883, 3047, 6650), (4047, 8828, 8732, 5743, 1091, 381))
_H_ALPHA = (1.0, 1.2, 3.0, 3.2)


def hartmann6(x: Sequence[float]) -> float:
    total = 0.0
    for alpha, a, p in zip(_H_ALPHA, _H_A, _H_P, strict=False):
        total += alpha * math.exp(-sum(ai * (xi - pi * 1e-4) ** 2 for ai, xi, pi in zip(a, x, p, strict=False)))
    return -total


def rosenbrock(x: Sequence[float]) -> float:
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


# mixed: Branin over (double x1, integer n), times a categorical scale plus its shift.
MIXED_SCALE = {"plain": (1.0, 0.0), "steep": (2.0, 0.1), "shifted": (0.5, 1.0)}


def mixed(p: Mapping[str, Any]) -> float:
    scale, shift = MIXED_SCALE[str(p["kind"])]
    return branin((float(p["x1"]), float(p["n"]))) * scale + shift


@functools.lru_cache(maxsize=1)
def mixed_optimum() -> float:
    """Brute force over the integers and a fine x1 grid, refined by golden-section per integer."""
    best = math.inf
    for n in range(0, 16):
        lo, hi = -5.0, 10.0
        xs = [lo + (hi - lo) * i / 3000 for i in range(3001)]
        x0 = min(xs, key=lambda x: branin((x, n)))
        a, b = max(lo, x0 - 0.01), min(hi, x0 + 0.01)
        for _ in range(60):
            m1, m2 = a + (b - a) / 3, b - (b - a) / 3
            if branin((m1, n)) < branin((m2, n)):
                b = m2
            else:
                a = m1
        best = min(best, branin(((a + b) / 2, n)))
    scale, shift = min(MIXED_SCALE.values(), key=lambda s: best * s[0] + s[1])
    return best * scale + shift


# conditional: three branches; the best (0.0) is only in branch "b".
def conditional(p: Mapping[str, Any]) -> float:
    branch = str(p["branch"])
    if branch == "a":
        return 0.5 + (float(p["a_x"]) - 1) ** 2 + (float(p["a_y"]) + 2) ** 2 / 4
    if branch == "b":
        return 0.1 * (int(p["b_n"]) - 5) ** 2 + 2 * (float(p["b_x"]) - 0.7) ** 2
    return 0.2 + (math.log10(float(p["c_lr"])) + 2) ** 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    name: str
    fn: Callable[[Mapping[str, Any]], float]  # parameter values by id -> value (minimized)
    optimum: Callable[[], float]
    noise_sd: float = 0.0
    bounds: tuple[tuple[float, float], ...] = ()  # continuous problems: x0, x1, ... in these ranges


def _vector(fn: Callable[[Sequence[float]], float], dims: int) -> Callable[[Mapping[str, Any]], float]:
    return lambda p: fn([float(p[f"x{i}"]) for i in range(dims)])


def _const(v: float) -> Callable[[], float]:
    return lambda: v


_H6_OPT = -3.3223680114155147
PROBLEMS = (
    Problem(name="branin", fn=_vector(branin, 2), bounds=((-5, 10), (0, 15)), optimum=_const(0.39788735772973816)),
    Problem(name="hartmann6", fn=_vector(hartmann6, 6), bounds=((0, 1),) * 6, optimum=_const(_H6_OPT)),
    Problem(name="noisy_hartmann6", fn=_vector(hartmann6, 6), bounds=((0, 1),) * 6, optimum=_const(_H6_OPT),
            noise_sd=NOISE_SD),
    Problem(name="rosenbrock5", fn=_vector(rosenbrock, 5), bounds=((-5, 10),) * 5, optimum=_const(0.0)),
    Problem(name="mixed", fn=mixed, optimum=mixed_optimum),
    Problem(name="conditional", fn=conditional, optimum=_const(0.0)),
)


def problem(name: str) -> Problem:
    return next(p for p in PROBLEMS if p.name == name)


def study_spec(prob: Problem):
    """The StudySpec a job would have for this problem (one metric, minimized)."""
    from trials.spec import (
        ConditionalParameterSpec,
        Goal,
        MetricSpec,
        ParameterSpec,
        ParameterType,
        ScaleType,
        StudySpec,
    )

    linear, log = ScaleType.UNIT_LINEAR_SCALE, ScaleType.UNIT_LOG_SCALE

    def num(pid: str, lo: float, hi: float, *, integer: bool = False, scale: ScaleType = linear) -> ParameterSpec:
        kind = ParameterType.INTEGER if integer else ParameterType.DOUBLE
        return ParameterSpec(parameter_id=pid, type=kind, min_value=int(lo) if integer else float(lo),
                             max_value=int(hi) if integer else float(hi), scale_type=scale)

    def cat(pid: str, values: Sequence[str], conditionals: Sequence[Any] = ()) -> ParameterSpec:
        return ParameterSpec(parameter_id=pid, type=ParameterType.CATEGORICAL, values=tuple(values),
                             conditionals=tuple(conditionals))

    if prob.name == "mixed":
        params: tuple[ParameterSpec, ...] = (num("x1", -5, 10), num("n", 0, 15, integer=True),
                                             cat("kind", list(MIXED_SCALE)))
    elif prob.name == "conditional":
        def when(value: str, *children: ParameterSpec) -> list[Any]:
            return [ConditionalParameterSpec(parent_values=(value,), parameter=c) for c in children]

        params = (cat("branch", ["a", "b", "c"],
                      when("a", num("a_x", -5, 5), num("a_y", -5, 5))
                      + when("b", num("b_x", 0, 1), num("b_n", 1, 8, integer=True))
                      + when("c", num("c_lr", 1e-4, 1, scale=log))),)
    else:
        params = tuple(num(f"x{i}", lo, hi) for i, (lo, hi) in enumerate(prob.bounds))
    return StudySpec(metrics=(MetricSpec(metric_id="value", goal=Goal.MINIMIZE),), parameters=params)

"""The search space in Optuna's terms: distributions, parameter names, suggestions and grid points."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from trials.spec import ParameterSpec, ParameterType, ScaleType, StudySpec, Value, parent_matches
from trials.study.names import REVERSE_LOG_SUFFIX as REVERSE_LOG_SUFFIX
from trials.study.names import escape_id as escape_id
from trials.study.names import mirror as _mirror
from trials.study.names import mirrored as _mirrored
from trials.study.names import optuna_name as optuna_name
from trials.study.names import optuna_names as optuna_names
from trials.study.names import parameter_id_of as parameter_id_of
from trials.study.names import values_from_optuna as values_from_optuna
from trials.study.optuna_internals import suggest_value


def distribution(p: ParameterSpec) -> BaseDistribution:
    """The Optuna distribution of a parameter (reverse log: the mirrored variable, log-scaled)."""
    log = p.scale_type in (ScaleType.UNIT_LOG_SCALE, ScaleType.UNIT_REVERSE_LOG_SCALE)
    if p.type is ParameterType.DOUBLE:
        low, high = p.bounds()
        return FloatDistribution(float(low), float(high), log=log)
    if p.type is ParameterType.INTEGER:
        low, high = p.bounds()
        return IntDistribution(int(low), int(high), log=log)
    if p.type is ParameterType.DISCRETE:
        return CategoricalDistribution([_num(v) for v in p.values])
    return CategoricalDistribution(list(p.values))


def _num(v: Value) -> Value:
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def mirrors_doubles(study: StudySpec) -> bool:
    """Whether a value of the study can come back from Optuna changed: a reverse-log double is
    mirrored (``min + max - x``) and mirrored back, which may move it by a rounding."""
    return any(_mirrored(p) and p.type is ParameterType.DOUBLE for p in study.all_parameters())


def suggest(trial: optuna.Trial, study: StudySpec) -> dict[str, Value]:
    """Suggest the active parameters of a trial, parents before their conditional children."""

    def pick(p: ParameterSpec) -> Value:
        raw = suggest_value(trial, optuna_name(p, study), distribution(p))
        return _mirror(p, raw) if _mirrored(p) else raw

    return study.choose(pick)


def grid(study: StudySpec) -> list[dict[str, Value]]:
    """Every grid point as a list (small grids, tests); :func:`iter_grid` for any size."""
    return list(iter_grid(study))


def iter_grid(study: StudySpec, start: int = 0) -> Iterator[dict[str, Value]]:
    """The grid points from index ``start``, lazily, in a fixed order (the first parameter outermost,
    conditional children expanded under matching parents): a grid of 1001**8 points costs nothing
    until points are taken."""
    pieces = [_iter_param(p) for p in study.parameters]
    for combo in itertools.islice(_product([_Reiterable(piece) for piece in pieces]), start, None):
        point: dict[str, Value] = {}
        for part in combo:
            point.update(part)
        yield point


def grid_size(study: StudySpec) -> int:
    """How many points :func:`iter_grid` yields, counted without enumerating them."""
    return math.prod(_size(p) for p in study.parameters)


def _size(p: ParameterSpec) -> int:
    points = p.grid_points()
    if not p.conditionals:
        return len(points)
    return sum(math.prod(_size(c.parameter) for c in p.conditionals
                         if parent_matches(_num(v), c.parent_values)) for v in points)


def _iter_param(p: ParameterSpec) -> Callable[[], Iterator[dict[str, Value]]]:
    """A re-startable iterator over one parameter's sub-points (itself and its active children)."""

    def run() -> Iterator[dict[str, Value]]:
        for raw in p.grid_points():
            v = _num(raw)
            children = [_Reiterable(_iter_param(c.parameter)) for c in p.conditionals
                        if parent_matches(v, c.parent_values)]
            for combo in _product(children):
                point: dict[str, Value] = {p.parameter_id: v}
                for part in combo:
                    point.update(part)
                yield point

    return run


class _Reiterable:
    """An iterable that starts its iterator afresh on each ``iter()`` (nested loops, no list)."""

    def __init__(self, make: Callable[[], Iterator[dict[str, Value]]]):
        self._make = make

    def __iter__(self) -> Iterator[dict[str, Value]]:
        return self._make()


def _product(iterables: list[_Reiterable]) -> Iterator[tuple[dict[str, Value], ...]]:
    """``itertools.product`` without materialising its inputs (each is iterated again per outer item)."""
    if not iterables:
        yield ()
        return
    head, rest = iterables[0], iterables[1:]
    for item in head:
        for tail in _product(rest):
            yield (item, *tail)


def fixed_params(study: StudySpec, point: Mapping[str, Value]) -> dict[str, Any]:
    """Grid point -> Optuna fixed params (names and mirrored values as the distributions expect)."""
    out = {}
    for p in study.active_parameters(point):  # the branch each conditional id is under here
        if p.parameter_id in point:
            v = point[p.parameter_id]
            out[optuna_name(p, study)] = _mirror(p, v) if _mirrored(p) else v
    return out

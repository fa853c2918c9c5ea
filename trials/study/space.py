"""The search space in Optuna's terms: distributions, parameter names, suggestions and grid points."""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from trials.spec import ParameterSpec, ParameterType, ScaleType, StudySpec, Value, parent_matches

REVERSE_LOG_SUFFIX = ":reverse_log"
# A parameterId may hold any character but whitespace; '#' and ':' mark the adapter's own suffixes,
# so they (and the escape character) are percent-escaped in the id part of a name: injective, and
# an id without them is its own name (journals of earlier versions read the same).
_ESCAPES = str.maketrans({"%": "%25", "#": "%23", ":": "%3A"})
_UNESCAPES = {"%25": "%", "%23": "#", "%3A": ":"}
_ESCAPED = re.compile("%25|%23|%3A")


def escape_id(parameter_id: str) -> str:
    """The id part of an Optuna name: never holds '#' or ':' (``x#2`` -> ``x%232``)."""
    return parameter_id.translate(_ESCAPES)


def parameter_id_of(name: str) -> str:
    """The parameterId an Optuna name belongs to (suffixes dropped, escapes undone)."""
    base = name.removesuffix(REVERSE_LOG_SUFFIX).split("#", 1)[0]
    return _ESCAPED.sub(lambda m: _UNESCAPES[m.group(0)], base)


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


def _mirrored(p: ParameterSpec) -> bool:
    return (p.scale_type is ScaleType.UNIT_REVERSE_LOG_SCALE
            and p.type in (ParameterType.DOUBLE, ParameterType.INTEGER))


@functools.lru_cache(maxsize=64)
def optuna_names(study: StudySpec) -> dict[ParameterSpec, str]:
    """The Optuna parameter name of each spec parameter.

    Normally the parameterId (``#``, ``:`` and ``%`` percent-escaped, see :func:`escape_id`);
    ``<id>:reverse_log`` for a mirrored reverse-log parameter; and
    ``<id>#2``, ``<id>#3`` … for further conditional branches that reuse an id with another range
    (Optuna refuses two value spaces under one name).
    """
    names: dict[ParameterSpec, str] = {}
    seen: dict[str, int] = {}
    for p in study.all_parameters():
        if p in names:
            continue
        k = seen.get(p.parameter_id, 0) + 1
        seen[p.parameter_id] = k
        base = escape_id(p.parameter_id) + ("" if k == 1 else f"#{k}")
        names[p] = base + (REVERSE_LOG_SUFFIX if _mirrored(p) else "")
    return names


def optuna_name(p: ParameterSpec, study: StudySpec) -> str:
    return optuna_names(study)[p]


def values_from_optuna(study: StudySpec, params: Mapping[str, Any]) -> dict[str, Value]:
    """A trial's parameter values (by parameterId) from its Optuna params."""
    values: dict[str, Value] = {}
    for p, name in optuna_names(study).items():
        if name in params:
            raw = params[name]
            values[p.parameter_id] = _mirror(p, raw) if _mirrored(p) else raw
    return values


def _num(v: Value) -> Value:
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def mirrors_doubles(study: StudySpec) -> bool:
    """Whether a value of the study can come back from Optuna changed: a reverse-log double is
    mirrored (``min + max - x``) and mirrored back, which may move it by a rounding."""
    return any(_mirrored(p) and p.type is ParameterType.DOUBLE for p in study.all_parameters())


def _mirror(p: ParameterSpec, raw: Any) -> Value:
    # Reverse log spreads values near the top: x = min + max - y with y log-uniform.
    low, high = p.bounds()
    x = low + high - raw
    return int(x) if p.type is ParameterType.INTEGER else float(x)


def suggest(trial: optuna.Trial, study: StudySpec) -> dict[str, Value]:
    """Suggest the active parameters of a trial, parents before their conditional children."""

    def pick(p: ParameterSpec) -> Value:
        raw = trial._suggest(optuna_name(p, study), distribution(p))
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
    for combo in itertools.islice(_product([_Lazy(piece) for piece in pieces]), start, None):
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
            children = [_Lazy(_iter_param(c.parameter)) for c in p.conditionals
                        if parent_matches(v, c.parent_values)]
            for combo in _product(children):
                point: dict[str, Value] = {p.parameter_id: v}
                for part in combo:
                    point.update(part)
                yield point

    return run


class _Lazy:
    """An iterable that starts its iterator afresh on each ``iter()`` (nested loops, no list)."""

    def __init__(self, make: Callable[[], Iterator[dict[str, Value]]]):
        self._make = make

    def __iter__(self) -> Iterator[dict[str, Value]]:
        return self._make()


def _product(iterables: list[_Lazy]) -> Iterator[tuple[dict[str, Value], ...]]:
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

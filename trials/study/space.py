"""The search space in Optuna's terms: distributions, parameter names, suggestions and grid points."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping
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
    """Every grid point (conditional children expanded under matching parents), in a fixed order."""

    def expand(p: ParameterSpec) -> list[dict[str, Value]]:
        out: list[dict[str, Value]] = []
        for v in p.grid_points():
            v = _num(v)
            branches: list[list[dict[str, Value]]] = [[{}]]
            for cond in p.conditionals:
                if parent_matches(v, cond.parent_values):
                    branches.append(expand(cond.parameter))
            for combo in itertools.product(*branches):
                point = {p.parameter_id: v}
                for part in combo:
                    point.update(part)
                out.append(point)
        return out

    points: list[dict[str, Value]] = [{}]
    for p in study.parameters:
        points = [{**a, **b} for a in points for b in expand(p)]
    return points


def fixed_params(study: StudySpec, point: Mapping[str, Value]) -> dict[str, Any]:
    """Grid point -> Optuna fixed params (names and mirrored values as the distributions expect)."""
    out = {}
    for p in study.active_parameters(point):  # the branch each conditional id is under here
        if p.parameter_id in point:
            v = point[p.parameter_id]
            out[optuna_name(p, study)] = _mirror(p, v) if _mirrored(p) else v
    return out

"""How a job is named in Optuna's terms, without Optuna: parameter names, values back from Optuna's
params, the prefix of the job's own attributes and its record read from them (what a command that only
reads a job needs)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from trials.job_meta import JobMeta
from trials.spec import ParameterSpec, ParameterType, ScaleType, StudySpec, Value

ATTR_PREFIX = "trials:"  # the job's own study attributes (its record's members) start with it
REVERSE_LOG_SUFFIX = ":reverse_log"
# A parameterId may hold any character but whitespace; '#' and ':' mark the adapter's own suffixes,
# so they (and the escape character) are percent-escaped in the id part of a name: injective, and
# an id without them is its own name (journals of earlier versions read the same).
_ESCAPES = str.maketrans({"%": "%25", "#": "%23", ":": "%3A"})
_UNESCAPES = {"%25": "%", "%23": "#", "%3A": ":"}
_ESCAPED = re.compile("%25|%23|%3A")


def job_meta(attrs: Mapping[str, Any], job_id: str) -> JobMeta:
    """Job ``job_id``'s record from its study's user attributes (each member ``trials:<member>``).

    Raises:
        JobMetaError: written by a newer trials, or a member of the wrong type.
    """
    n = len(ATTR_PREFIX)
    return JobMeta.from_json({k[n:]: v for k, v in attrs.items() if k.startswith(ATTR_PREFIX)}, job=job_id)


def meta_attr(member: str) -> str:
    """The study user attribute that holds the record's member ``member``."""
    return ATTR_PREFIX + member


def escape_id(parameter_id: str) -> str:
    """The id part of an Optuna name: never holds '#' or ':' (``x#2`` -> ``x%232``)."""
    return parameter_id.translate(_ESCAPES)


def parameter_id_of(name: str) -> str:
    """The parameterId an Optuna name belongs to (suffixes dropped, escapes undone)."""
    base = name.removesuffix(REVERSE_LOG_SUFFIX).split("#", 1)[0]
    return _ESCAPED.sub(lambda m: _UNESCAPES[m.group(0)], base)


def mirrored(p: ParameterSpec) -> bool:
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
        names[p] = base + (REVERSE_LOG_SUFFIX if mirrored(p) else "")
    return names


def optuna_name(p: ParameterSpec, study: StudySpec) -> str:
    return optuna_names(study)[p]


def values_from_optuna(study: StudySpec, params: Mapping[str, Any]) -> dict[str, Value]:
    """A trial's parameter values (by parameterId) from its Optuna params."""
    return values_reader(study)(params)


def values_reader(study: StudySpec) -> Callable[[Mapping[str, Any]], dict[str, Value]]:
    """``values_from_optuna`` of one study, its names worked out once (a table of 10,000 trials
    called it per trial)."""
    plan = [(name, p.parameter_id, p if mirrored(p) else None) for p, name in optuna_names(study).items()]

    def read(params: Mapping[str, Any]) -> dict[str, Value]:
        values: dict[str, Value] = {}
        for name, parameter_id, mirrored_p in plan:
            if name in params:
                raw = params[name]
                values[parameter_id] = raw if mirrored_p is None else mirror(mirrored_p, raw)
        return values

    return read


def mirror(p: ParameterSpec, raw: Any) -> Value:
    # Reverse log spreads values near the top: x = min + max - y with y log-uniform.
    low, high = p.bounds()
    x = low + high - raw
    return int(x) if p.type is ParameterType.INTEGER else float(x)

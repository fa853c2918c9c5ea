"""Check a search space against a trainer's own flags: every parameter, type, range and choice.

Runs inside the trainer's process (``trainer --help`` with ``$TRIALS_CHECK_SPEC`` set), so the flags
are exactly the ones ``trials.main``/``trials-run`` would parse: the Config's fields, bounded by the
trainer's own ``spec=`` when it has one. Nothing of the objective runs.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from trials import protocol
from trials.errors import ConfigError, FlagError
from trials.runtime.flags import convert
from trials.runtime.params import Param
from trials.spec import ParameterSpec, ParameterType, StudySpec


def _probe_values(p: ParameterSpec) -> list[Any]:
    """The values a trial can get that tell a type or a range apart: bounds, an interior double,
    every discrete or categorical value."""
    if p.type in (ParameterType.CATEGORICAL, ParameterType.DISCRETE):
        return list(p.values)
    lo, hi = p.min_value, p.max_value
    assert lo is not None and hi is not None  # validated by the spec loader
    if p.type is ParameterType.INTEGER:
        return [int(lo), int(hi)]
    interior = lo + (hi - lo) * 0.37  # a double a sampler may give: rarely integral
    return [float(lo), interior, float(hi)]


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"did you mean --{close[0]}?" if close else f"its flags: {', '.join('--' + k for k in known)}"


def _type_problem(p: ParameterSpec, param: Param) -> str | None:
    if p.type is ParameterType.DOUBLE and param.kind in ("int", "bool"):
        return (f"spec parameter `{p.parameter_id}` is DOUBLE {p.describe_range()} but the trainer's "
                f"--{param.name} is {param.kind}: make the field a float")
    if p.type is ParameterType.INTEGER and param.kind in ("str", "bool"):
        return (f"spec parameter `{p.parameter_id}` is INTEGER but the trainer's --{param.name} is "
                f"{param.kind}: make the field an int")
    return None


def _fixed_flags(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """(name, value or None) of the ``--name[=value]`` tokens a trial gets before its parameters."""
    out: list[tuple[str, str | None]] = []
    tokens = list(args)
    for i, token in enumerate(tokens):
        if not token.startswith("--") or token == "--":
            continue
        name, eq, value = token[2:].partition("=")
        if not eq and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            value = tokens[i + 1]
        out.append((name, value if (eq or value) else None))
    return out


def check_params(params: Sequence[Param], study: StudySpec, *, args: Sequence[str] = (),
                 spec_source: str = "the spec") -> tuple[list[str], int]:
    """Problems a trial would hit when the trainer with ``params`` gets the spec's flags.

    Args:
        params: the trainer's flags (:func:`trials.runtime.params.build_params`).
        study: the search space to check.
        args: the fixed arguments every trial gets before its parameter flags (spec ``args``).
        spec_source: how to name the spec in messages.

    Returns:
        (problems, number of values checked); no problem means every trial's flags parse.
    """
    by_name: dict[str, Param] = {}
    for param in params:
        for alias in (param.name, param.name.replace("_", "-"), param.name.replace("-", "_")):
            by_name.setdefault(alias, param)
    known = [param.name for param in params]
    problems: list[str] = []
    n_values = 0
    top_level = {p.parameter_id for p in study.parameters}
    for p in study.all_parameters():
        found = by_name.get(p.parameter_id)
        if found is None:
            problems.append(f"--{p.parameter_id} (a parameter of {spec_source}) is not a flag of the "
                            f"trainer: {_did_you_mean(p.parameter_id, known)}")
            continue
        param = found
        if p.parameter_id not in top_level and param.required:
            problems.append(f"`{p.parameter_id}` is conditional in {spec_source}, so some trials do not "
                            f"get --{param.name}, which the trainer requires: give the field a default")
            continue
        typed = _type_problem(p, param)
        if typed:
            problems.append(typed)
            continue
        for value in _probe_values(p):
            n_values += 1
            text = protocol.format_value(value)
            try:
                convert(param, text)
            except FlagError as err:
                hint = ""
                if p.type is ParameterType.CATEGORICAL and param.kind in ("int", "float"):
                    hint = (f": the spec's choices are strings, so make the field a str (or a Literal of "
                            f"the choices), not {param.kind}")
                problems.append(f"--{p.parameter_id}={text} (in {p.describe_range()} of {spec_source}) is "
                                f"refused by the trainer: {err}{hint}")
                break
    given = {p.parameter_id for p in study.all_parameters()}  # conditional ones: reported above
    for name, value in _fixed_flags(args):
        fixed = by_name.get(name)
        if fixed is None:
            problems.append(f"--{name} (in the trial's args) is not a flag of the trainer: "
                            f"{_did_you_mean(name, known)}")
        elif value is not None and fixed.kind != "bool":
            try:
                convert(fixed, value)
            except FlagError as err:
                problems.append(f"--{name}={value} (in the trial's args) is refused by the trainer: {err}")
        given.add(fixed.name if fixed is not None else name)
    for param in params:
        if param.required and param.name not in given:
            problems.append(f"the trainer requires --{param.name} ({param.type_name()}) but neither "
                            f"{spec_source} nor the trial's args give it")
    return problems, n_values


def answer(params_or_error: Sequence[Param] | ConfigError, argv: Sequence[str],
           environ: Mapping[str, str]) -> None:
    """Write the check of ``$TRIALS_CHECK_SPEC`` against these params to ``$TRIALS_CHECK_OUT``."""
    out = environ[protocol.ENV_CHECK_OUT]
    if isinstance(params_or_error, ConfigError):
        result: dict[str, Any] = {"problems": [f"the trainer's own flags: {params_or_error}"], "n_values": 0}
    else:
        from trials.spec.load import load_spec

        spec_path = environ[protocol.ENV_CHECK_SPEC]
        args = [a for a in argv if a not in ("-h", "--help")]
        problems, n_values = check_params(params_or_error, load_spec(spec_path).study, args=args,
                                          spec_source=os.path.basename(spec_path))
        result = {"problems": problems, "n_values": n_values,
                  "flags": [param.name for param in params_or_error]}
    with open(out, "w", encoding="utf-8") as file:
        json.dump(result, file)

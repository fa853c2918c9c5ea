"""Trial flags -> checked values: parse ``--name=value`` tokens against the trial's ``Param``s
(:mod:`trials.runtime.params`), convert and check each one, and the ``--help`` text.

This module is on the trial's start-up path: it imports no more than ``argparse`` and ``math``.
"""

from __future__ import annotations

import argparse
import math

from trials.errors import FlagError
from trials.runtime.params import Param, choice_text, spec_default

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing costs ~4 ms at start-up
    from collections.abc import Mapping, Sequence
    from typing import Any, NoReturn

_TRUE = ("true", "1", "yes", "on", "t", "y")
_FALSE = ("false", "0", "no", "off", "f", "n")


# --- Parsing -----------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise FlagError(message)


def _option_names(name: str) -> list[str]:
    names = [f"--{name}"]
    for alt in (name.replace("_", "-"), name.replace("-", "_")):
        if f"--{alt}" not in names:
            names.append(f"--{alt}")
    return names


def wants_help(argv: Sequence[str]) -> bool:
    return any(token in ("-h", "--help") for token in argv)


def convert(param: Param, text: str, source: str | None = None) -> Any:
    """Turn one flag's text into its typed value, checked against the spec when there is one.

    Raises:
        FlagError: naming the flag, the value, the allowed type or range and the spec file.
    """
    flag = f"--{param.name}"
    kind = param.kind
    if kind == "int":
        value: Any = _to_int(text, flag)
    elif kind == "float":
        try:
            value = float(text)
        except ValueError:
            raise FlagError(f"{flag} expects a number, got {text!r}") from None
    elif kind == "bool":
        low = text.strip().lower()
        if low not in _TRUE + _FALSE:
            raise FlagError(f"{flag} expects true or false, got {text!r}")
        value = low in _TRUE
    elif kind == "choice":
        value = _to_choice(param, text, flag)
    else:
        value = text
    specs = [spec for spec, _ in param.branches if spec is not None]
    raw = getattr(value, "value", value)
    if specs and not any(spec.contains(raw) for spec in specs):
        where = f" ({source})" if source else ""
        ranges = " or ".join(spec.describe_range() for spec in specs)
        raise FlagError(
            f"{flag}={text} is outside the search space: `{param.name}` must be in "
            f"{ranges}{where}"
        )
    return value


def _to_int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if math.isfinite(number) and number.is_integer():
        return int(number)  # "64.0" from a writer that used str() on a proto double
    raise FlagError(f"{flag} expects an integer, got {text!r}")


def _to_choice(param: Param, text: str, flag: str) -> Any:
    for choice in param.choices:
        raw = getattr(choice, "value", choice)
        if text in (str(raw), choice_text(choice), getattr(choice, "name", None)):
            return choice
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            try:
                if float(text) == float(raw):
                    return choice
            except ValueError:
                pass
    allowed = ", ".join(choice_text(c) for c in param.choices)
    raise FlagError(f"{flag} must be one of {{{allowed}}}, got {text!r}")


def parse_flags(argv: Sequence[str], params: Sequence[Param], *,
                source: str | None = None) -> dict[str, Any]:
    """Parse ``--name=value`` / ``--name value`` / ``--name-with-dashes=value`` tokens.

    Returns the value of every parameter: given flags converted and checked, missing ones at their
    default; conditional spec parameters that are inactive read as None.

    Raises:
        FlagError: an unknown flag (the message lists the known ones), a bad value, a missing
            required flag, or a conditional flag given while its parent does not select it.
    """
    parser = _Parser(add_help=False, allow_abbrev=False, prog="trial")
    for p in params:
        if p.kind == "bool":
            parser.add_argument(*_option_names(p.name), dest=p.name, nargs="?", const="true",
                                default=argparse.SUPPRESS)
        else:
            parser.add_argument(*_option_names(p.name), dest=p.name, default=argparse.SUPPRESS)
    namespace, extra = parser.parse_known_args(list(argv))
    if extra:
        known = ", ".join(f"--{p.name}" for p in params) or "(none)"
        what = "unknown flag" if extra[0].startswith("-") else "unexpected argument"
        raise FlagError(f"{what} {extra[0]!r}; known flags: {known}")
    given = vars(namespace)
    values: dict[str, Any] = {}
    for p in params:
        if p.name in given:
            values[p.name] = convert(p, given[p.name], source)
        elif p.required:
            raise FlagError(f"missing required flag --{p.name} ({p.type_name()})")
        else:
            values[p.name] = p.default
    _check_conditionals(params, values, given, source)
    return values


def _parent_selects(parent_value: Any, parent_values: tuple[Any, ...]) -> bool:
    raw = getattr(parent_value, "value", parent_value)
    if raw is None:
        return False
    from trials.spec.model import parent_matches

    return parent_matches(raw, parent_values)


def _check_conditionals(params: Sequence[Param], values: dict[str, Any], given: Mapping[str, Any],
                        source: str | None) -> None:
    where = f" ({source})" if source else ""
    for p in params:  # spec order: a parent comes before its children
        if p.parent is None:
            continue
        branches = [(spec, parent) for spec, parent in p.branches if parent is not None]
        active = [(spec, parent) for spec, parent in branches
                  if _parent_selects(values.get(parent[0]), parent[1])]
        if not active and p.name in given:
            options = " or ".join(
                f"--{parent[0]} is one of {{{', '.join(choice_text(v) for v in parent[1])}}}"
                for _, parent in branches)
            got = ", ".join(f"--{name}={choice_text(values.get(name))}"
                            for name in dict.fromkeys(parent[0] for _, parent in branches))
            raise FlagError(f"--{p.name} applies only when {options}{where}, got {got}")
        if active:
            spec = active[0][0]
            if p.name in given and spec is not None and len(branches) > 1:
                raw = getattr(values[p.name], "value", values[p.name])
                if not spec.contains(raw):
                    parent_name = active[0][1][0]
                    raise FlagError(
                        f"--{p.name}={given[p.name]} is outside the search space: `{p.name}` must be "
                        f"in {spec.describe_range()} when --{parent_name}="
                        f"{choice_text(values.get(parent_name))}{where}")
            if p.name not in given and values[p.name] is None and spec is not None:
                values[p.name] = spec_default(spec)
        elif p.name not in given and p.spec is not None and p.default is None:
            values[p.name] = None


# --- Help ------------------------------------------------------------------------------------------
def format_help(params: Sequence[Param], *, prog: str, source: str | None = None) -> str:
    """``--help``: every hyperparameter with its type, default and allowed range."""
    lines = [f"usage: {prog} [--name=VALUE ...]", ""]
    if not params:
        lines.append("This objective takes no hyperparameters.")
        return "\n".join(lines) + "\n"
    header = "hyperparameters" + (f" (search space: {source})" if source else "")
    lines.append(header + ":")
    rows = []
    for p in params:
        default = "required" if p.required else f"default {choice_text(p.default)}"
        if p.spec is not None:
            detail = f"range {p.spec.describe_range()}"
        elif p.kind == "choice":
            detail = "one of the choices"
        else:
            detail = "not tuned"
        if p.parent is not None:
            values = ", ".join(choice_text(v) for v in p.parent[1])
            detail += f"; only when --{p.parent[0]} in {{{values}}}"
        if p.help:
            detail += f"; {p.help}"
        rows.append((f"--{p.name} {p.type_name()}", default, detail))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    for a, b, c in rows:
        lines.append(f"  {a.ljust(w0)}  {b.ljust(w1)}  {c}")
    lines += ["", "Flags also parse as --name value and --name-with-dashes=value."]
    return "\n".join(lines) + "\n"

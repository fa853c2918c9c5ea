"""Trial flags -> a typed config: parameters from a Config dataclass and/or a StudySpec, checked.

This module is on the trial's start-up path, so it imports neither ``dataclasses`` nor ``typing``
itself (they cost ~10 ms; a user's Config module has already paid for them) and its descriptors
are plain slotted classes rather than dataclasses.
"""

from __future__ import annotations

import argparse
import math
import sys

from trials.errors import ConfigError, FlagError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing costs ~4 ms at start-up
    from collections.abc import Iterable, Iterator, Mapping, Sequence
    from typing import Any, NoReturn

    from trials.spec import ParameterSpec, StudySpec

    Parent = tuple[str, tuple[Any, ...]]  # (parent flag, the parent values that select this one)

_MISSING = object()
_TRUE = ("true", "1", "yes", "on", "t", "y")
_FALSE = ("false", "0", "no", "off", "f", "n")
KINDS = ("int", "float", "str", "bool", "choice")


class Param:
    """One flag: its name, value kind, default, allowed choices and (optionally) its spec."""

    __slots__ = ("name", "kind", "default", "choices", "optional", "spec", "parent", "help", "branches")

    def __init__(self, name: str, kind: str, *, default: Any = _MISSING, choices: tuple[Any, ...] = (),
                 optional: bool = False, spec: ParameterSpec | None = None,
                 parent: Parent | None = None, help: str = ""):
        if kind not in KINDS:
            raise ConfigError(f"flag kind must be one of {KINDS}, got {kind!r} for {name!r}")
        self.name, self.kind, self.default, self.choices = name, kind, default, choices
        self.optional, self.spec, self.parent, self.help = optional, spec, parent, help
        # A conditional id may appear under several parents (disjoint conditions): each
        # (spec, parent) is one branch; the branch whose parent is selected checks the value.
        self.branches: list[tuple[ParameterSpec | None, Parent | None]] = [(spec, parent)]

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    def type_name(self) -> str:
        if self.kind == "choice":
            return "{" + ",".join(_choice_text(c) for c in self.choices) + "}"
        return self.kind.upper()

    def __repr__(self) -> str:
        return f"Param({self.name!r}, {self.kind!r}, default={self.default!r})"


class Params:
    """A read-only config built from a search space alone: ``config.learning_rate``, ``config["x"]``.

    An inactive conditional parameter reads as ``None``.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no hyperparameter {name!r}; known: {sorted(self._values)}",
                                 name=name, obj=self) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a trial config is read-only")

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Params) and other._values == self._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items(), key=lambda kv: kv[0])))

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Params({inner})"


def _choice_text(value: object) -> str:
    from trials.protocol import format_value

    return format_value(getattr(value, "value", value))


# --- Config dataclass ------------------------------------------------------------------------
def _resolve(annotation: Any, cls: type) -> Any:
    if not isinstance(annotation, str):
        return annotation
    module = sys.modules.get(cls.__module__)
    namespace = dict(vars(module)) if module else {}
    import builtins

    namespace.setdefault("__builtins__", builtins)
    try:
        return eval(annotation, namespace)  # noqa: S307 - a type annotation of the user's Config
    except Exception as err:  # noqa: BLE001 - re-raised with the field's name
        raise ConfigError(
            f"cannot resolve the type {annotation!r} of {cls.__name__} (from its annotations): {err}"
        ) from err


def _describe_type(annotation: Any) -> tuple[str, tuple[Any, ...], bool]:
    """(kind, choices, optional) for a supported annotation; ConfigError otherwise."""
    if annotation in (int, float, str, bool):
        return annotation.__name__, (), False
    import enum

    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "choice", tuple(annotation), False
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return "choice", tuple(args), False
    import types

    if origin in (typing.Union, getattr(types, "UnionType", None)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            kind, choices, _ = _describe_type(rest[0])
            return kind, choices, True
    raise ConfigError(
        f"a Config field must be int, float, str, bool, a Literal, an Enum or Optional of one, "
        f"got {annotation!r}"
    )


def params_from_config(config_cls: type) -> list[Param]:
    """One Param per field of a dataclass ``Config`` (fields with ``init=False`` are skipped).

    Raises:
        ConfigError: ``config_cls`` is not a dataclass, or a field has an unsupported type.
    """
    fields = getattr(config_cls, "__dataclass_fields__", None)
    if not isinstance(fields, dict):
        raise ConfigError(f"Config must be a dataclass, got {config_cls!r}")
    import dataclasses  # the user's dataclass already imported it: free

    out = []
    for f in dataclasses.fields(config_cls):
        if not f.init:
            continue
        try:
            kind, choices, optional = _describe_type(_resolve(f.type, config_cls))
        except ConfigError as err:
            raise ConfigError(f"{config_cls.__name__}.{f.name}: {err}") from err
        default: Any = _MISSING
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        optional = optional or default is None
        out.append(Param(f.name, kind, default=default, choices=choices, optional=optional,
                         help=str(f.metadata.get("help", "")) if f.metadata else ""))
    return out


# --- StudySpec ---------------------------------------------------------------------------------
def spec_default(p: ParameterSpec) -> Any:
    """A default for a spec parameter run without a flag: the middle of its range or values."""
    from trials.spec import ParameterType, ScaleType

    if p.type in (ParameterType.CATEGORICAL, ParameterType.DISCRETE):
        values = p.values
        value = values[0] if p.type is ParameterType.CATEGORICAL else values[(len(values) - 1) // 2]
        return int(value) if _integral_values((value,)) and p.type is ParameterType.DISCRETE else value
    low, high = p.bounds()
    lo, hi = float(low), float(high)
    mid = math.sqrt(lo * hi) if p.scale_type is ScaleType.UNIT_LOG_SCALE and lo > 0 else (lo + hi) / 2
    return int(round(mid)) if p.type is ParameterType.INTEGER else mid


def _integral_values(values: Iterable[Any]) -> bool:
    return all(not isinstance(v, str) and float(v).is_integer() for v in values)


def _spec_kind(p: ParameterSpec) -> str:
    from trials.spec import ParameterType

    if p.type is ParameterType.DOUBLE:
        return "float"
    if p.type is ParameterType.INTEGER:
        return "int"
    if p.type is ParameterType.DISCRETE:
        return "int" if _integral_values(p.values) else "float"
    return "str"


def params_from_spec(study: StudySpec) -> list[Param]:
    """One Param per spec parameter (conditional children included, default None when inactive)."""
    out: list[Param] = []

    by_name: dict[str, Param] = {}

    def visit(p: ParameterSpec, parent: Parent | None) -> None:
        default = None if parent else spec_default(p)
        known = by_name.get(p.parameter_id)
        if known is not None and parent is not None and known.parent is not None:
            known.branches.append((p, parent))  # the same id under another parent value
        else:
            param = Param(p.parameter_id, _spec_kind(p), default=default, spec=p,
                          optional=parent is not None, parent=parent)
            by_name[p.parameter_id] = param
            out.append(param)
        for cond in p.conditionals:
            visit(cond.parameter, (p.parameter_id, cond.parent_values))

    for p in study.parameters:
        visit(p, None)
    return out


def build_params(config_cls: type | None = None, study: StudySpec | None = None,
                 source: str | None = None) -> list[Param]:
    """The flags of a trial: Config fields (types, defaults) checked against the spec's parameters.

    Raises:
        ConfigError: neither is given, or a spec parameter has no field in ``config_cls``.
    """
    if config_cls is None and study is None:
        return []
    if study is None:
        assert config_cls is not None
        return params_from_config(config_cls)
    spec_params = params_from_spec(study)
    if config_cls is None:
        return spec_params
    by_name = {p.name: p for p in params_from_config(config_cls)}
    where = f" (in {source})" if source else ""
    for sp in spec_params:
        field = by_name.get(sp.name)
        if field is None:
            raise ConfigError(
                f"spec parameter {sp.name!r}{where} has no field in {config_cls.__name__}; "
                f"expected one of its fields {sorted(by_name)} or a new field"
            )
        field.spec, field.parent, field.branches = sp.spec, sp.parent, list(sp.branches)
        if sp.parent is not None and field.required:
            raise ConfigError(
                f"{config_cls.__name__}.{sp.name} is conditional{where} and may be absent: "
                f"give it a default (e.g. None)"
            )
    return list(by_name.values())


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
        if text in (str(raw), _choice_text(choice), getattr(choice, "name", None)):
            return choice
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            try:
                if float(text) == float(raw):
                    return choice
            except ValueError:
                pass
    allowed = ", ".join(_choice_text(c) for c in param.choices)
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
                f"--{parent[0]} is one of {{{', '.join(_choice_text(v) for v in parent[1])}}}"
                for _, parent in branches)
            got = ", ".join(f"--{name}={_choice_text(values.get(name))}"
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
                        f"{_choice_text(values.get(parent_name))}{where}")
            if p.name not in given and values[p.name] is None and spec is not None:
                values[p.name] = spec_default(spec)
        elif p.name not in given and p.spec is not None and p.default is None:
            values[p.name] = None


def make_config(config_cls: type | None, values: Mapping[str, Any]) -> Any:
    """``config_cls(**values)`` or a read-only :class:`Params` when there is no Config class."""
    if config_cls is None:
        return Params(values)
    try:
        return config_cls(**values)
    except (TypeError, ValueError) as err:
        raise FlagError(f"{config_cls.__name__} rejected the flags: {err}") from err


def config_values(config: Any) -> dict[str, Any]:
    """The field values of a config (a dataclass instance or :class:`Params`) as a dict."""
    if isinstance(config, Params):
        return config.as_dict()
    fields = getattr(config, "__dataclass_fields__", None)
    if isinstance(fields, dict):
        return {name: getattr(config, name) for name in fields}
    return dict(vars(config))


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
        default = "required" if p.required else f"default {_choice_text(p.default)}"
        if p.spec is not None:
            detail = f"range {p.spec.describe_range()}"
        elif p.kind == "choice":
            detail = "one of the choices"
        else:
            detail = "not tuned"
        if p.parent is not None:
            values = ", ".join(_choice_text(v) for v in p.parent[1])
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

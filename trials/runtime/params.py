"""The flags a trial takes: one ``Param`` per Config field and/or spec parameter, and the config
built from their values.

This module is on the trial's start-up path, so it imports neither ``dataclasses`` nor ``typing``
itself (they cost ~10 ms; a user's Config module has already paid for them) and its descriptors
are plain slotted classes rather than dataclasses.
"""

from __future__ import annotations

import math
import sys

from trials.errors import ConfigError, FlagError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing costs ~4 ms at start-up
    from collections.abc import Iterable, Iterator, Mapping
    from typing import Any

    from trials.spec import ParameterSpec, StudySpec

    Parent = tuple[str, tuple[Any, ...]]  # (parent flag, the parent values that select this one)


_MISSING = object()
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
            return "{" + ",".join(choice_text(c) for c in self.choices) + "}"
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


def choice_text(value: object) -> str:
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


# --- the config ----------------------------------------------------------------------------------
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

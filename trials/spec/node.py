"""A cursor over a parsed spec document: typed reads that fail with file, path, expected and got."""

from __future__ import annotations

import difflib
import enum
import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from trials.errors import SpecError
from trials.printable import printable

E = TypeVar("E", bound=enum.Enum)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MAX = 2**31 - 1
_DURATION = re.compile(r"^(\d+)(\.\d{1,9})?s$")
_NUMERIC = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_INTEGRAL = re.compile(r"^[+-]?\d+$")
_SNAKE = re.compile(r"_([a-z0-9])")


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()


def show(value: object) -> str:
    """Describe a found value for an error message: ``"abc" (a string)``, ``a list``, ``null``."""
    if value is MISSING:
        return "nothing (the key is missing)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a bool)"
    if isinstance(value, Mapping):
        return f"a mapping with keys {_keys(value)}" if value else "an empty mapping"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}" if value else "an empty list"
    text = json.dumps(value) if isinstance(value, str) else repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = {str: "a string", int: "an integer", float: "a number"}.get(type(value))
    return f"{text} ({kind or type(value).__name__})"


def one_line(text: str) -> str:
    """Escape line breaks and other unprintable characters (keys may hold them) so a message
    stays on one line."""
    return printable(text)


def _keys(mapping: Mapping[str, object]) -> str:
    names = [str(k) for k in mapping]
    return "[" + ", ".join(names[:6]) + (", ..." if len(names) > 6 else "") + "]"


def json_name(key: str) -> str:
    """The lowerCamelCase JSON name of a proto field name (``min_value`` -> ``minValue``), as
    protobuf derives it."""
    return _SNAKE.sub(lambda m: m.group(1).upper(), key)


def suggest(key: str, valid: Collection[str]) -> str | None:
    """The closest valid key: camelCase of a snake_case key first, then difflib."""
    camel = json_name(key)
    for candidate in (camel, key.lower()):
        for name in valid:
            if candidate == name or candidate.lower() == name.lower():
                return name
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return close[0] if close else None


@dataclass(frozen=True, slots=True)
class Node:
    """A value in the document with its path (``studySpec.parameters[2].parameterId``).

    ``proto``: the document is a protobuf message in proto3 JSON (the REST/gcloud form): a key may
    be the field's JSON name or its proto name (``minValue`` or ``min_value``) and ``null`` is
    unset. ``defaulted``: the key is absent and the value is its proto3 default (0, "", false),
    which the rules then judge; messages say so.
    """

    value: object
    path: str
    source: str
    proto: bool = False
    defaulted: bool = False

    def fail(self, expected: str, *, got: str | None = None) -> NoReturn:
        """Raise a one-line SpecError: ``<source>: <path>: expected …, got …``."""
        found = got or show(self.value)
        if self.defaulted:
            found += ", the default of the missing key"
        self.error(f"expected {expected}, got {found}")

    def error(self, message: str) -> NoReturn:
        raise SpecError(one_line(message), source=one_line(self.source),
                        path=one_line(self.path) or "(top level)")

    @property
    def missing(self) -> bool:
        return self.value is MISSING or self.value is None

    def _sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def child(self, value: object, path: str) -> Node:
        """A Node inside this one (same source, same reading rules)."""
        return Node(value, path, self.source, self.proto)

    def default(self, key: str, value: object) -> Node:
        """The Node of this mapping's absent ``key``: its proto3 default ``value``, marked so."""
        return Node(value, self._sub(key), self.source, self.proto, defaulted=True)

    def mapping(self, allowed: Collection[str], ignored: Collection[str] = ()) -> dict[str, Node]:
        """The mapping's known keys as Nodes (ignored keys dropped); unknown keys are errors."""
        return self.fields(allowed, ignored)[0]

    def fields(self, allowed: Collection[str], ignored: Collection[str] = ()
               ) -> tuple[dict[str, Node], dict[str, Node]]:
        """The mapping's known keys and its ignored keys as Nodes; unknown keys are errors.

        Keys are returned under their names in ``allowed``/``ignored``; with ``proto`` a proto
        field name stands for its JSON name (both at once is an error) and a ``null`` value is
        left out (proto3 JSON: unset). Paths keep the key as written.
        """
        if not isinstance(self.value, Mapping):
            self.fail("a mapping")
        out: dict[str, Node] = {}
        dropped: dict[str, Node] = {}
        written: dict[str, str] = {}
        for key, value in self.value.items():
            if not isinstance(key, str):
                self.child(value, self._sub(str(key))).fail("a string key", got=show(key))
            where = self.child(value, self._sub(key))
            name = key
            if self.proto and key not in allowed and key not in ignored:
                name = json_name(key)
            if name not in allowed and name not in ignored:
                hint = suggest(key, allowed)
                where.error(f"unknown key `{key}`" + (f"; did you mean `{hint}`?" if hint else "")
                            + f" (expected one of: {', '.join(sorted(allowed))}; got `{key}`)")
            if name in written:
                where.fail(f"`{name}` once (`{written[name]}` and `{key}` name the same field)",
                           got="both")
            written[name] = key
            if self.proto and value is None:
                continue
            (out if name in allowed else dropped)[name] = where
        return out, dropped

    def items(self) -> list[tuple[str, Node]]:
        """A free-form mapping (labels, short-form parameters): keys must be strings."""
        if not isinstance(self.value, Mapping):
            self.fail("a mapping")
        out = []
        for key, value in self.value.items():
            if not isinstance(key, str):
                self.child(value, self._sub(str(key))).fail("a string key", got=show(key))
            out.append((key, self.child(value, self._sub(key))))
        return out

    def list(self, what: str, *, min_len: int = 0, max_len: int | None = None) -> list[Node]:
        if not isinstance(self.value, list):
            self.fail(f"a list of {what}")
        n = len(self.value)
        if n < min_len or (max_len is not None and n > max_len):
            bound = f"at least {min_len}" if max_len is None else f"{min_len} to {max_len}"
            self.fail(f"a list of {bound} {what}", got=f"{n} items" if n else "an empty list")
        return [self.child(v, f"{self.path}[{i}]") for i, v in enumerate(self.value)]

    def string(self, *, what: str = "a string", allow_empty: bool = False) -> str:
        if not isinstance(self.value, str):
            hint = " (quote it in YAML)" if isinstance(self.value, (bool, int, float)) else ""
            self.fail(what + hint)
        if not allow_empty and not self.value:
            self.fail(f"{what}, non-empty")
        return self.value

    def strings(self, what: str = "strings", *, max_len: int | None = None) -> tuple[str, ...]:
        return tuple(n.string(allow_empty=True) for n in self.list(what, max_len=max_len))

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            self.fail("true or false")
        return self.value

    def integer(self, *, lo: int | None = None, hi: int = INT64_MAX) -> int:
        """An integer; JSON int64 strings ("12") and integral floats (12.0) are accepted."""
        v = self.value
        if isinstance(v, str) and _INTEGRAL.match(v.strip()):
            v = int(v.strip())
        elif isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail("an integer")
        low = INT64_MIN if lo is None else lo
        if v < low or v > hi:
            wide = hi in (INT32_MAX, INT64_MAX)
            rng = ("within int64" if lo is None and wide else f"≥ {low}" if wide else
                   f"{low}..{hi}" if lo is not None else f"≤ {hi}")
            self.fail(f"an integer {rng}" + (f" (at most {hi})" if wide and v > hi else ""))
        return v

    def number(self) -> float:
        """A finite number; numeric strings ("1e-4", which YAML reads as a string) are accepted."""
        v = self.value
        if isinstance(v, str) and _NUMERIC.match(v.strip()):
            v = float(v.strip())
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail("a number")
        try:
            out = float(v)
        except OverflowError:
            self.fail("a finite number")
        if not math.isfinite(out):
            self.fail("a finite number")
        return out

    def enum(self, cls: type[E], *, numbers: Mapping[int, E] | None = None,
             names: Mapping[str, E] | None = None) -> E:
        """An enum by name (``MAXIMIZE``) or, as proto JSON allows, by number (``1``, ``"1"``)."""
        table = names if names is not None else {m.value: m for m in cls}
        v = self.value
        if numbers and isinstance(v, str) and _INTEGRAL.match(v.strip()):
            v = int(v.strip())
        if numbers and isinstance(v, int) and not isinstance(v, bool) and v in numbers:
            return numbers[v]
        if isinstance(v, str) and v in table:
            return table[v]
        hint = suggest(v, table) if isinstance(v, str) else None
        listed = ", ".join(table) if not numbers else ", ".join(
            f"{m.value if isinstance(m.value, str) else m.name} ({n})" for n, m in numbers.items())
        self.fail("one of " + listed + (f" (did you mean {hint}?)" if hint else ""))

    def name_of(self, values: Mapping[str, int]) -> str:
        """A proto enum value's name, given by name or number (``values``: name -> number)."""
        numbers = {n: name for name, n in values.items()}
        v = self.value
        if isinstance(v, str) and _INTEGRAL.match(v.strip()):
            v = int(v.strip())
        if isinstance(v, int) and not isinstance(v, bool) and v in numbers:
            return numbers[v]
        if isinstance(v, str) and v in values:
            return v
        hint = suggest(v, values) if isinstance(v, str) else None
        self.fail("one of " + ", ".join(f"{name} ({n})" for name, n in values.items())
                  + (f" (did you mean {hint}?)" if hint else ""))

    def duration_s(self, *, numbers_ok: bool = False) -> float:
        """A protobuf Duration string ("3600s", "1.5s") as seconds (> 0)."""
        v = self.value
        if numbers_ok and isinstance(v, (int, float)) and not isinstance(v, bool):
            seconds = float(v)
        elif isinstance(v, str) and _DURATION.match(v.strip()):
            seconds = float(v.strip()[:-1])
        else:
            self.fail('a duration like "3600s" or "1.5s"')
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail("a positive duration")
        return seconds


def absent(fields: Mapping[str, Node], key: str) -> bool:
    """Whether ``key`` of a mapping from :meth:`Node.mapping` is missing or null (both mean unset)."""
    return key not in fields or fields[key].value is None


def parse_text(text: str, *, source: str, fmt: str | None) -> object:
    """Parse ``text`` as ``fmt`` ("json" | "yaml" | None = JSON, then YAML) into a document.

    Raises:
        SpecError: a syntax error (with line and column), a duplicate key, or an empty document.
    """
    if not text.strip():
        raise SpecError("expected a spec document, got an empty file", source=source)
    if fmt == "json":
        return _parse_json(text, source)
    if fmt is None and text.lstrip().startswith(("{", "[")):
        try:
            return _parse_json(text, source)
        except SpecError:
            pass  # YAML is a superset of JSON; its error message is the one to report
    return _parse_yaml(text, source)


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


class _Duplicate(Exception):
    def __init__(self, key: object):
        super().__init__(key)
        self.key = key


def _parse_json(text: str, source: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as err:
        raise SpecError(f"invalid JSON at line {err.lineno}, column {err.colno}: expected valid "
                        f"JSON, got {err.msg}", source=source) from err
    except _Duplicate as err:
        raise SpecError(f"expected unique keys in every JSON object, got `{err.key}` twice",
                        source=source) from err
    except RecursionError as err:
        raise SpecError("expected a JSON document, got one nested too deeply",
                        source=source) from err


def _parse_yaml(text: str, source: str) -> object:
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[object, object]:
        loader.flatten_mapping(node)
        out: dict[object, object] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                duplicate = key in out
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "found an unhashable key", key_node.start_mark) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "expected unique keys in every mapping", None, f"`{key}` twice",
                    key_node.start_mark)
            out[key] = loader.construct_object(value_node, deep=True)
        return out

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(err.problem or "a syntax error").split())
        problem = re.sub(r"^(but )?found ", "", problem)
        context = " ".join(str(err.context or "").split())
        expected = (context[len("expected "):] if context.startswith("expected ") else
                    f"valid YAML ({context})" if context else "valid YAML")
        raise SpecError(f"invalid YAML{where}: expected {expected}, got {problem}",
                        source=source) from err
    except yaml.YAMLError as err:
        raise SpecError(f"invalid YAML: expected valid YAML, got {' '.join(str(err).split())}",
                        source=source) from err
    except RecursionError as err:
        raise SpecError("expected a YAML document, got one nested too deeply",
                        source=source) from err

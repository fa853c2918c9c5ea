"""The code of trials' dataclass methods, kept between processes as a module's bytecode is.

``@dataclass`` writes each class's methods (``__init__``, ``__repr__``, ``__eq__``; ``__hash__``, ``__setattr__`` and
``__delattr__`` for a frozen class) as source text and compiles that text with ``exec`` every time the class
is made: ~0.6 ms a class on this machine kind, ~30 ms for the ~50 classes a job command imports before its
first trial. The text is fixed by the class's fields, so the code compiled from it can be kept: beside the
module's ``.pyc`` (``__cached__`` with ``.dataclasses`` for ``.pyc``, where ``sys.pycache_prefix`` puts it),
keyed by the exact text, after the bytecode's magic number. ``compile`` of the same text with the same flags
gives the same code as ``exec`` of the text (tested method by method against plain ``exec``). Only trials' own
modules are kept; any other class's text is compiled as before.

A process that compiled a text its module's file did not have writes the file at exit (atomically:
a new file renamed into place), unless Python writes no bytecode (``-B``, ``PYTHONDONTWRITEBYTECODE``).
A file that cannot be read, or was not written by this version of this module for this Python, is
ignored (and written again). The file can be trusted as far as the ``.pyc`` beside it.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.util
import marshal
import os
import sys
import types
from typing import Any

HEADER = importlib.util.MAGIC_NUMBER + b" trials dataclass code 1\n"
SUFFIX = ".dataclasses"
_exec = builtins.exec
# module name -> (its file or None, the texts it holds, the texts this process used)
_tables: dict[str, tuple[str | None, dict[str, types.CodeType], dict[str, types.CodeType]]] = {}
_dirty: set[str] = set()
stats = {"compiled": 0, "kept": 0}  # (read by the tests)


def install(dataclasses: types.ModuleType) -> None:
    """Make ``dataclasses`` compile through :func:`cached_exec` (its ``exec`` is looked up in its globals)."""
    dataclasses.exec = cached_exec  # type: ignore[attr-defined]


def cached_exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:  # noqa: A002
    """``exec`` as ``dataclasses`` calls it; a trials module's text runs from its kept code."""
    if type(source) is str and type(globals) is dict:
        name = globals.get("__name__")
        if type(name) is str and (name == "trials" or name.startswith("trials.")):
            _exec(_code(name, globals, source), globals, locals)
            return
    _exec(source, globals, locals)


def _code(module: str, globals: dict[str, Any], source: str) -> types.CodeType:
    entry = _tables.get(module)
    if entry is None:
        path = _path(globals.get("__cached__"))
        entry = _tables[module] = (path, _read(path) if path else {}, {})
    path, table, used = entry
    code = table.get(source)
    if code is None:
        code = table[source] = compile(source, "<string>", "exec", dont_inherit=True)  # what exec(str) does here
        stats["compiled"] += 1
        if path is not None and not sys.dont_write_bytecode:
            if not _dirty:
                import atexit

                atexit.register(write)
            _dirty.add(module)
    else:
        stats["kept"] += 1
    used[source] = code
    return code


def _path(cached: Any) -> str | None:
    if type(cached) is not str or not cached.endswith(".pyc"):
        return None
    return cached[: -len(".pyc")] + SUFFIX


def _read(path: str) -> dict[str, types.CodeType]:
    try:
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(HEADER):
            return {}
        table = marshal.loads(data[len(HEADER):])
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if type(table) is not dict or not all(type(k) is str and type(v) is types.CodeType for k, v in table.items()):
        return {}
    return table


def write() -> None:
    """Write the file of each module that compiled a text it did not have (at exit)."""
    for module in sorted(_dirty):
        path, table, used = _tables[module]
        if path is None:
            continue
        # texts of an edited module's old classes go when they outnumber the ones in use
        keep = table if len(table) <= 2 * len(used) + 8 else used
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(HEADER + marshal.dumps(keep))
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _dirty.clear()

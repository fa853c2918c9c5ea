"""The layout shows the three roles, imports go one way, and only the Optuna adapter imports the storage.

Every import counts, the ones inside functions too: a function-level import is still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "trials"

VOCABULARY = {f"trials.{m}" for m in (
    "errors", "files", "hypertune_file", "job_meta", "jsontext", "printable", "protocol", "records", "storage_url",
    "timefmt")}
ENTRY = {"trials", "trials.__main__", "trials.cli", "trials.pytest_plugin", "trials.testing",
         "trials.startup", "trials._dataclass_code"}  # (the command processes' set-up: trials.startup)
# role -> the roles it may import (itself included); the arrows point one way
ALLOWED = {
    "vocabulary": {"vocabulary"},
    "spec": {"vocabulary", "spec"},
    "runtime": {"vocabulary", "spec", "runtime"},
    "study": {"vocabulary", "spec", "study"},
    "controller": {"vocabulary", "spec", "runtime", "study", "controller"},
    "entry": {"vocabulary", "spec", "runtime", "study", "controller", "entry"},
}
HEAVY = ("optuna", "sqlalchemy", "yaml", "numpy")
STORAGE = ("optuna", "sqlalchemy", "psycopg2")
MAX_MODULES_PER_FOLDER = 15
CONTROLLER = PACKAGE / "controller"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def role(module: str) -> str:
    if module in VOCABULARY:
        return "vocabulary"
    if module in ENTRY or module.startswith(("trials.cli.", "trials.testing.")):  # the CLI; the testing helpers
        return "entry"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in ("spec", "runtime", "study", "controller"):
        return parts[1]
    raise AssertionError(f"{module} belongs to no role: put it in a subpackage or the vocabulary")


def imports(module: str) -> set[str]:
    """Every module this one imports, anywhere in its body, resolved to a module of ours or a top name."""
    tree = ast.parse(MODULES[module].read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:
                    names.add(f"{node.module}.{a.name}")
    return names


def ours(module: str) -> set[str]:
    found = set()
    for name in imports(module):
        # "trials.spec.model" is ours; so is "trials.spec" (the package's __init__)
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def test_every_module_has_a_role():
    for module in MODULES:
        role(module)


def test_no_flat_prefixes_stand_in_for_a_package():
    flat = sorted(m for m in MODULES if m.count(".") == 1 and m not in VOCABULARY | ENTRY)
    assert flat == [f"trials.{p}" for p in ("controller", "runtime", "spec", "study")]


def _folders() -> list[Path]:
    return sorted({p.parent for p in PACKAGE.rglob("*.py")})


def _prefix_families(names: list[str]) -> dict[str, list[str]]:
    """Three or more module names sharing ``<prefix>_`` (the bare ``<prefix>`` counts too): a package in disguise."""
    prefixes = {n.split("_")[0] for n in names if "_" in n.strip("_")}
    families = {p: sorted(n for n in names if n == p or n.startswith(p + "_")) for p in prefixes}
    return {p: f for p, f in families.items() if len(f) >= 3}


@pytest.mark.parametrize("folder", _folders(), ids=lambda f: str(f.relative_to(PACKAGE.parent)))
def test_no_prefix_family_in_any_folder(folder):
    names = [p.stem for p in folder.glob("*.py") if not p.stem.startswith("__")]
    assert _prefix_families(names) == {}, f"{folder.relative_to(PACKAGE.parent)}: make these a subpackage"


def test_a_prefix_family_is_found_when_there_is_one():
    assert _prefix_families(["job", "job_state", "job_lock", "jobs", "launch"]) == {
        "job": ["job", "job_lock", "job_state"]}
    assert _prefix_families(["state", "state_lock", "line_tail", "metrics_reader"]) == {}


@pytest.mark.parametrize("folder", _folders(), ids=lambda f: str(f.relative_to(PACKAGE.parent)))
def test_a_folder_holds_at_most_about_fifteen_modules(folder):
    names = [p.stem for p in folder.glob("*.py") if not p.stem.startswith("__")]
    assert len(names) <= MAX_MODULES_PER_FOLDER, f"{folder.relative_to(PACKAGE.parent)}: {len(names)} modules"


def test_each_subpackage_init_is_only_a_docstring():
    # importing a room costs nothing and can close no cycle
    for init in sorted(PACKAGE.rglob("__init__.py")):
        if init.parent in (PACKAGE, PACKAGE / "cli", PACKAGE / "spec", PACKAGE / "testing"):  # public names there
            continue
        body = ast.parse(init.read_text()).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), init


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_one_way(module):
    mine = role(module)
    wrong = sorted(m for m in ours(module) if role(m) not in ALLOWED[mine] and m != "trials")
    assert wrong == [], f"{module} ({mine}) imports {wrong}"


def test_only_the_adapter_subpackage_imports_the_storage_libraries():
    offenders = sorted((m, n) for m in MODULES if role(m) != "study" for n in imports(m)
                       if n.split(".")[0] in STORAGE)
    assert offenders == []


def test_the_vocabulary_imports_only_the_standard_library_and_itself():
    for module in sorted(VOCABULARY):
        outside = sorted(n for n in imports(module) if n.split(".")[0] != "trials"
                         and n.split(".")[0] not in sys.stdlib_module_names)
        assert outside == [], f"{module} imports {outside}"


def room(module: str) -> str | None:
    """The controller subpackage a module is in (``trials.controller.loop.runner`` -> ``loop``)."""
    parts = module.split(".")
    return parts[2] if len(parts) >= 4 and parts[:2] == ["trials", "controller"] else None


def test_every_controller_module_is_in_a_room():
    assert sorted(p.stem for p in CONTROLLER.glob("*.py")) == ["__init__"]
    assert all(room(m) for m in MODULES if m.startswith("trials.controller.") and m.count(".") >= 3)


def test_the_controller_rooms_import_each_other_without_cycles():
    graph: dict[str, set[str]] = {}
    for m in MODULES:
        if room(m):
            graph.setdefault(room(m), set()).update(r for d in ours(m) if (r := room(d)) and r != room(m))
    assert _sccs(graph) == [], {r: sorted(d) for r, d in graph.items()}


def _cycles() -> list[list[str]]:
    return _sccs({m: set(ours(m) - {"trials"}) for m in MODULES})


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    return found


def test_no_import_cycles_function_level_imports_included():
    # A package's __init__ that re-exports a submodule is not a cycle of behaviour, but we keep
    # even those out: each strongly connected component must be a single module.
    assert _cycles() == []


def test_a_cycle_is_found_when_there_is_one(monkeypatch):
    fake = {"trials.a": {"trials.b"}, "trials.b": {"trials.a"}}
    monkeypatch.setattr(sys.modules[__name__], "MODULES", {**MODULES, "trials.a": None, "trials.b": None})
    monkeypatch.setattr(sys.modules[__name__], "ours", lambda m: fake.get(m, set()))
    assert ["trials.a", "trials.b"] in _cycles()


START_UP = """
import sys
import trials
import trials.runtime.entrypoint, trials.runtime.context, trials.runtime.reporting
import trials.runtime.checkpoint, trials.runtime.flags, trials.runtime.params, trials.runtime.objective
import trials.runtime.logs
import trials.pytest_plugin, trials.testing
trials.main, trials.TrialContext
print(" ".join(m for m in {heavy!r} if m in sys.modules))
"""


def test_the_trial_start_up_path_loads_nothing_heavy():
    out = subprocess.run([sys.executable, "-c", START_UP.format(heavy=HEAVY)],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _classes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(module)
    return found


def test_one_name_one_thing_no_class_name_is_defined_twice():
    twice = {name: where for name, where in _classes().items() if len(where) > 1}
    assert twice == {}


DESIGN = PACKAGE.parent / "docs" / "DESIGN.md"


def test_every_controller_room_is_on_the_design_page():
    text = DESIGN.read_text()
    rooms = sorted(p.name for p in CONTROLLER.iterdir() if (p / "__init__.py").exists())
    assert [r for r in rooms if f"`{r}/`" not in text] == []


def test_every_loop_event_is_in_the_design_pages_schema_with_its_fields():
    from dataclasses import fields

    from trials.controller.loop import events

    subclasses = {c for c in vars(events).values() if isinstance(c, type) and issubclass(c, events.Event)
                  and c is not events.Event}
    assert subclasses == set(events.ALL_EVENTS)
    rows = {line.split("|")[1].strip().strip("`"): line for line in DESIGN.read_text().splitlines()
            if line.startswith("| `")}
    for cls in events.ALL_EVENTS:
        assert cls.name in rows, f"{cls.__name__} ({cls.name}) is not in docs/DESIGN.md's event table"
        missing = [f.name for f in fields(cls) if f"`{f.name}`" not in rows[cls.name]]
        assert missing == [], f"{cls.name}: fields {missing} are not in docs/DESIGN.md"


def test_states_are_named_by_their_enums_not_by_literal_strings():
    import re

    literal = re.compile(r'"(JOB_STATE_[A-Z_]+|REQUESTED|ACTIVE|STOPPING|SUCCEEDED|INFEASIBLE)"')
    offenders = sorted(f"{m}:{n}" for m, path in MODULES.items() if m != "trials.records"
                       for n, line in enumerate(path.read_text().splitlines(), 1) if literal.search(line))
    assert offenders == []


def test_the_loop_asks_a_replica_handle_only_what_its_protocol_says():
    loop = [m for m in MODULES if m.startswith(("trials.controller.loop.", "trials.controller.check."))]
    offenders = sorted(m for m in loop if m != "trials.controller.loop.events" and "getattr(" in MODULES[m].read_text())
    assert offenders == []
    from dataclasses import fields

    from trials.controller.loop.state import LoopOptions

    assert [f.name for f in fields(LoopOptions) if "Any" in str(f.type)] == []

"""No code outside the backends' own rooms and the registry branches on a backend's name (issue 49):
what a caller must know of a runtime is a field of its ``registry.BackendEntry``."""

from __future__ import annotations

import ast
from pathlib import Path

import trials

PACKAGE = Path(trials.__file__).parent
# the backends' own rooms, and the two modules that map a runtime's name to what is known of it
ROOMS = ("controller/container/", "controller/slurm/", "controller/inprocess/", "controller/process/")
REGISTRY = ("controller/backend/registry.py", "controller/jobs/backends.py")
NAMES = frozenset({"host", "slurm", "podman", "docker", "container", "in-process"})
ONLY_BACKENDS = frozenset({"podman", "docker"})  # names that mean nothing else: any use is one


def _names_in(node: ast.AST) -> set[str]:
    """The backend names ``node`` is, or holds as a tuple, list or set of constants."""
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_names_in(e) for e in node.elts))
    return set()


def name_branches(source: str) -> list[tuple[int, str]]:
    """(line, what) of each place ``source`` compares with a backend's name (``==``, ``!=``, ``in``,
    ``is``, a ``case``), or names podman or docker at all."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            names = set().union(*(_names_in(n) for n in (node.left, *node.comparators)))
            if names:
                found.append((node.lineno, f"compares with {sorted(names)}"))
        elif isinstance(node, ast.MatchValue) and _names_in(node.value):
            found.append((node.lineno, f"a case of {sorted(_names_in(node.value))}"))
        elif isinstance(node, ast.Constant) and node.value in ONLY_BACKENDS:
            found.append((node.lineno, f"names {node.value!r}"))
    return sorted(set(found))


def test_nothing_outside_the_backends_and_the_registry_branches_on_a_backend_name() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(ROOMS) or rel in REGISTRY:
            continue
        found += [f"trials/{rel}:{line}: {what}" for line, what in name_branches(path.read_text(encoding="utf-8"))]
    assert not found, "ask registry.BackendEntry instead:\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_branch() -> None:
    source = '''
if runtime != "host": pass
if name == "slurm": pass
if runtime in ("host", "slurm"): pass
if "podman" in x: pass
images = {"docker": 1}
match runtime:
    case "in-process": pass
if text == "hostname" or name == "Host": pass
'''
    assert sorted({line for line, _ in name_branches(source)}) == [2, 3, 4, 5, 6, 8]

"""docs/RELIABILITY.md names real tests, and every fault test is in it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.faults]

TESTS = Path(__file__).resolve().parent.parent
DOC = TESTS.parent / "docs" / "RELIABILITY.md"


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_the_reliability_table_matches_the_tests() -> None:
    cited = set(re.findall(r"`((?:faults|hostile)/test_\w+\.py)::(test_\w+)`", DOC.read_text()))
    assert cited
    for file, name in cited:
        assert name in _test_names(TESTS / file), f"docs/RELIABILITY.md cites a missing test {file}::{name}"
    for path in sorted((TESTS / "faults").glob("test_faults_*.py")):
        if path.name == Path(__file__).name:
            continue
        for name in _test_names(path):
            assert (f"faults/{path.name}", name) in cited, f"{path.name}::{name} is not in docs/RELIABILITY.md"

"""The environment lists of ``trials.protocol`` are the table docs/VERTEX_EMULATION.md shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trials import protocol

DOC = Path(__file__).parents[1] / "docs" / "VERTEX_EMULATION.md"
SECTION = "## The trial's environment: what it keeps of the host's"


def _table() -> dict[str, str]:
    """The section's table: group -> its variables cell."""
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| group")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return {c[0]: c[1] for c in cells}


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _prefixes(cell: str) -> list[str]:
    names = _names(cell)
    assert all(n.endswith("_*") for n in names), names
    return [n[:-1] for n in names]  # `AWS_*` -> AWS_


def test_the_doc_table_has_exactly_the_groups_of_the_code() -> None:
    assert list(_table()) == ["withheld: prefixes", "withheld: names", "passed: trust store",
                              "kept: toolchain names", "kept: toolchain prefixes", "everything else"]


def test_withheld_and_kept_lists_are_the_same_in_the_doc_and_the_code() -> None:
    table = _table()
    assert sorted(_prefixes(table["withheld: prefixes"])) == sorted(protocol.WITHHELD_ENV_PREFIXES)
    assert sorted(_names(table["withheld: names"])) == sorted(protocol.WITHHELD_ENV_NAMES)
    assert sorted(_names(table["kept: toolchain names"])) == sorted(protocol.TOOLCHAIN_ENV_NAMES)
    assert sorted(_prefixes(table["kept: toolchain prefixes"])) == sorted(protocol.TOOLCHAIN_ENV_PREFIXES)
    markers, examples = table["passed: trust store"].split("; e.g.", 1)
    assert sorted(_names(markers)) == sorted(protocol.TRUST_ENV_MARKERS)
    assert table["everything else"] == "kept"
    # and the rule does what the table says
    for prefix in protocol.WITHHELD_ENV_PREFIXES:
        assert protocol.is_withheld_env(f"{prefix}PROJECT")
    assert all(protocol.is_withheld_env(name) for name in protocol.WITHHELD_ENV_NAMES)
    for name in _names(examples):
        assert not protocol.is_withheld_env(name), name
        assert any(marker in name for marker in protocol.TRUST_ENV_MARKERS), name
    assert any(name.startswith(protocol.WITHHELD_ENV_PREFIXES) for name in _names(examples))
    kept = [*protocol.TOOLCHAIN_ENV_NAMES, *(f"{p}X" for p in protocol.TOOLCHAIN_ENV_PREFIXES)]
    assert not [name for name in kept if protocol.is_withheld_env(name)]


@pytest.mark.parametrize("name", ["CLOUD_SDK_VERSION", "HTTPS_PROXY", "NO_PROXY", "WANDB_PROJECT"])
def test_names_near_a_withheld_prefix_are_kept_and_listed_or_ordinary(name: str) -> None:
    assert not protocol.is_withheld_env(name)
    near = [p for p in protocol.WITHHELD_ENV_PREFIXES
            if name.replace("_", "").startswith(p.replace("_", ""))]
    if near:  # CLOUD_SDK_VERSION reads like CLOUDSDK_*: the table says why it is kept
        assert name in protocol.TOOLCHAIN_ENV_NAMES

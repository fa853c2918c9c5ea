"""The fast indented JSON writer is the stdlib's ``json.dumps(obj, indent=2)``, character for character."""

from __future__ import annotations

import enum
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trials.jsontext import Encoded, dumps_indented

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
           | st.text())
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(documents)
def test_any_plain_document_is_written_as_the_stdlib_writes_it(doc):
    assert dumps_indented(doc) == json.dumps(doc, indent=2)


@pytest.mark.parametrize("doc", [
    {}, [], "", {"a": {}}, {"a": []}, [[], {}], 0, -0.0, 1e300, 2**70, math.inf, -math.inf, math.nan,
    "\u202e\x1b[2J\n\"\\", {"é": "ü"}, {"trials": [{"id": "1", "measurements": [{"stepCount": "1"}]}]},
])
def test_edge_cases(doc):
    assert dumps_indented(doc) == json.dumps(doc, indent=2)


class Color(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize("doc", [{1: "int key"}, {None: 1, True: 2, 1.5: 3}, [Color.RED], {"a": Color.RED}])
def test_what_only_the_stdlib_writes_is_left_to_it(doc):
    assert dumps_indented(doc) == json.dumps(doc, indent=2)


def test_what_the_stdlib_refuses_is_refused_the_same_way():
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(cycle)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indented({"a": object()})


@settings(max_examples=200, deadline=None)
@given(st.lists(documents, max_size=4), st.lists(st.booleans(), max_size=4))
def test_text_written_at_its_depth_is_placed_as_is(items, encode):
    # describe --format json: each finished trial's text, written once at depth 2 ({"trials": [here]})
    placed = [Encoded(dumps_indented(v, level=2)) if i < len(encode) and encode[i] else v
              for i, v in enumerate(items)]
    doc = {"name": "job", "trials": placed, "state": "JOB_STATE_SUCCEEDED"}
    expected = json.dumps({"name": "job", "trials": items, "state": "JOB_STATE_SUCCEEDED"}, indent=2)
    assert dumps_indented(doc) == expected


def test_encoded_text_beside_what_only_the_stdlib_writes_is_parsed_back():
    doc = {"trials": [Encoded(dumps_indented({"id": "1", "x": [1.5]}, level=2))], "odd": {1: "int key"}}
    assert dumps_indented(doc) == json.dumps({"trials": [{"id": "1", "x": [1.5]}], "odd": {1: "int key"}}, indent=2)


def test_only_plain_values_are_written_nested():
    with pytest.raises(ValueError, match="plain JSON"):
        dumps_indented({1: "int key"}, level=2)

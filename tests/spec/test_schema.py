"""The loader's v1 schema is the installed google-cloud-aiplatform v1 types, field by field."""

from __future__ import annotations

import pytest

from trials.spec import schema
from trials.spec.carried import OUTPUT_KEYS
from trials.spec.node import Node, json_name

types = pytest.importorskip("google.cloud.aiplatform_v1.types",
                            reason="google-cloud-aiplatform is not installed")
descriptor = pytest.importorskip("google.protobuf.descriptor")

PACKAGE = "google.cloud.aiplatform.v1."
WRAPPERS = {"google.protobuf.BoolValue": "bool", "google.protobuf.Int32Value": "int32",
            "google.protobuf.Duration": "duration", "google.protobuf.Timestamp": "timestamp"}


def _kind(f: object) -> tuple[str, str]:
    fd = descriptor.FieldDescriptor
    if f.type == fd.TYPE_MESSAGE:
        full = f.message_type.full_name
        if f.message_type.GetOptions().map_entry:
            return "map", ""
        if full in WRAPPERS:
            return WRAPPERS[full], ""
        return "message", full.removeprefix(PACKAGE)
    if f.type == fd.TYPE_ENUM:
        return "enum", f.enum_type.full_name.removeprefix(PACKAGE)
    return {fd.TYPE_STRING: "string", fd.TYPE_BOOL: "bool", fd.TYPE_INT32: "int32",
            fd.TYPE_INT64: "int64", fd.TYPE_DOUBLE: "double"}[f.type], ""


def _reachable() -> dict[str, object]:
    """Every v1 message a create request can hold (output-only fields not followed)."""
    out: dict[str, object] = {}
    todo = [types.HyperparameterTuningJob.pb().DESCRIPTOR]
    while todo:
        d = todo.pop()
        name = d.full_name.removeprefix(PACKAGE)
        if name in out:
            continue
        out[name] = d
        for f in d.fields:
            if name == "HyperparameterTuningJob" and f.json_name in OUTPUT_KEYS:
                continue
            kind, ref = _kind(f)
            if kind == "message":
                todo.append(f.message_type)
    return out


def test_every_message_and_field_of_a_create_request_is_in_the_schema() -> None:
    messages = _reachable()
    assert set(schema.MESSAGES) == set(messages)
    for name, d in messages.items():
        expected = {}
        for f in d.fields:
            if name == "HyperparameterTuningJob" and f.json_name in OUTPUT_KEYS:
                continue
            kind, ref = _kind(f)
            presence = f.has_presence and not f.is_repeated
            expected[f.json_name] = schema.Field(kind, ref, f.is_repeated and kind != "map",
                                                 presence and kind != "map")
            assert json_name(f.name) == f.json_name  # the proto name maps to the JSON name
        assert schema.MESSAGES[name] == expected, name


def test_every_enum_has_the_v1_names_and_numbers() -> None:
    found = {}
    for d in _reachable().values():
        for f in d.fields:
            if f.type == descriptor.FieldDescriptor.TYPE_ENUM:
                e = f.enum_type
                found[e.full_name.removeprefix(PACKAGE)] = {v.name: v.number for v in e.values}
    found.pop("JobState", None)  # output only
    assert found == schema.ENUMS


def test_canonical_form_of_one_message_written_three_ways_is_one_value() -> None:
    ways = [{"strategy": "SPOT", "disableRetries": False, "maxWaitDuration": "1800.000s"},
            {"strategy": 4, "max_wait_duration": "1800s"},
            {"strategy": "4", "disable_retries": None, "maxWaitDuration": "1800s"}]
    values = [schema.canonical(Node(w, "scheduling", "x"), "Scheduling") for w in ways]
    assert values == [{"strategy": "SPOT", "maxWaitDuration": "1800s"}] * 3
    # presence: a wrapper or a message set to its default stays
    config = {"shouldStopAsap": False, "minimumRuntimeConstraint": {}, "minNumTrials": 0}
    assert schema.canonical(Node(config, "c", "x"), "StudySpec.StudyStoppingConfig") == config

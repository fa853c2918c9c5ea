"""The v1 messages of a HyperparameterTuningJob request, as proto3 JSON reads them (stdlib only).

``HyperparameterTuningJob.from_json`` (protobuf's ``json_format.Parse``) reads a field under its
lowerCamelCase JSON name or its snake_case proto name, an enum by name or by number, ``null`` as
unset, and an absent scalar as its default (0, "", false, the enum's 0 value); only messages,
``optional`` fields and wrapper types keep "set to the default" apart from "unset". This module
holds what that needs to know about the v1 types: each input field's kind, which fields keep
their presence, and every enum's names and numbers. The loader reads the job with it; a test
compares it with the installed ``google.cloud.aiplatform_v1`` types field by field.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from decimal import Decimal

from trials.spec.node import Node

_DURATION = re.compile(r"^(-?\d+)(\.\d{1,9})?s$")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message: ``kind`` is string, bool, int32, int64, double, enum, message,
    duration, timestamp or map (string to string); ``ref`` names the enum or message;
    ``presence``: set-to-the-default differs from unset (messages, ``optional``, wrappers)."""

    kind: str
    ref: str = ""
    repeated: bool = False
    presence: bool = False


S, B, I32, I64, D = Field("string"), Field("bool"), Field("int32"), Field("int64"), Field("double")
OPT_B, OPT_D, OPT_I64, OPT_S = (Field("bool", presence=True), Field("double", presence=True),
                                Field("int64", presence=True), Field("string", presence=True))
I32_VALUE, BOOL_VALUE = Field("int32", presence=True), Field("bool", presence=True)  # wrappers
DURATION, TIMESTAMP = Field("duration", presence=True), Field("timestamp", presence=True)
MAP = Field("map")
STRINGS, DOUBLES, INT64S = (Field("string", repeated=True), Field("double", repeated=True),
                            Field("int64", repeated=True))


def _msg(ref: str) -> Field:
    return Field("message", ref, presence=True)


def _msgs(ref: str) -> Field:
    return Field("message", ref, repeated=True)


def _enum(ref: str) -> Field:
    return Field("enum", ref)


_PS = "StudySpec.ParameterSpec"
_CPS = f"{_PS}.ConditionalParameterSpec"

# The input fields of every message a create request holds, in the protos' order (the output-only
# fields of the job resource are left out: a create request never sets them).
MESSAGES: dict[str, dict[str, Field]] = {
    "HyperparameterTuningJob": {
        "displayName": S, "studySpec": _msg("StudySpec"), "maxTrialCount": I32,
        "parallelTrialCount": I32, "maxFailedTrialCount": I32,
        "trialJobSpec": _msg("CustomJobSpec"), "labels": MAP,
        "encryptionSpec": _msg("EncryptionSpec")},
    "EncryptionSpec": {"kmsKeyName": S},
    "StudySpec": {
        "decayCurveStoppingSpec": _msg("StudySpec.DecayCurveAutomatedStoppingSpec"),
        "medianAutomatedStoppingSpec": _msg("StudySpec.MedianAutomatedStoppingSpec"),
        "convexAutomatedStoppingSpec": _msg("StudySpec.ConvexAutomatedStoppingSpec"),
        "metrics": _msgs("StudySpec.MetricSpec"), "parameters": _msgs(_PS),
        "algorithm": _enum("StudySpec.Algorithm"),
        "observationNoise": _enum("StudySpec.ObservationNoise"),
        "measurementSelectionType": _enum("StudySpec.MeasurementSelectionType"),
        "studyStoppingConfig": _msg("StudySpec.StudyStoppingConfig")},
    "StudySpec.DecayCurveAutomatedStoppingSpec": {"useElapsedDuration": B},
    "StudySpec.MedianAutomatedStoppingSpec": {"useElapsedDuration": B},
    "StudySpec.ConvexAutomatedStoppingSpec": {
        "maxStepCount": I64, "minStepCount": I64, "minMeasurementCount": I64,
        "learningRateParameterName": S, "useElapsedDuration": B, "updateAllStoppedTrials": OPT_B},
    "StudySpec.MetricSpec": {
        "metricId": S, "goal": _enum("StudySpec.MetricSpec.GoalType"),
        "safetyConfig": _msg("StudySpec.MetricSpec.SafetyMetricConfig")},
    "StudySpec.MetricSpec.SafetyMetricConfig": {
        "safetyThreshold": D, "desiredMinSafeTrialsFraction": OPT_D},
    _PS: {
        "doubleValueSpec": _msg(f"{_PS}.DoubleValueSpec"),
        "integerValueSpec": _msg(f"{_PS}.IntegerValueSpec"),
        "categoricalValueSpec": _msg(f"{_PS}.CategoricalValueSpec"),
        "discreteValueSpec": _msg(f"{_PS}.DiscreteValueSpec"),
        "parameterId": S, "scaleType": _enum(f"{_PS}.ScaleType"),
        "conditionalParameterSpecs": _msgs(_CPS)},
    f"{_PS}.DoubleValueSpec": {"minValue": D, "maxValue": D, "defaultValue": OPT_D},
    f"{_PS}.IntegerValueSpec": {"minValue": I64, "maxValue": I64, "defaultValue": OPT_I64},
    f"{_PS}.CategoricalValueSpec": {"values": STRINGS, "defaultValue": OPT_S},
    f"{_PS}.DiscreteValueSpec": {"values": DOUBLES, "defaultValue": OPT_D},
    _CPS: {
        "parentDiscreteValues": _msg(f"{_CPS}.DiscreteValueCondition"),
        "parentIntValues": _msg(f"{_CPS}.IntValueCondition"),
        "parentCategoricalValues": _msg(f"{_CPS}.CategoricalValueCondition"),
        "parameterSpec": _msg(_PS)},
    f"{_CPS}.DiscreteValueCondition": {"values": DOUBLES},
    f"{_CPS}.IntValueCondition": {"values": INT64S},
    f"{_CPS}.CategoricalValueCondition": {"values": STRINGS},
    "StudySpec.StudyStoppingConfig": {
        "shouldStopAsap": BOOL_VALUE, "minimumRuntimeConstraint": _msg("StudyTimeConstraint"),
        "maximumRuntimeConstraint": _msg("StudyTimeConstraint"), "minNumTrials": I32_VALUE,
        "maxNumTrials": I32_VALUE, "maxNumTrialsNoProgress": I32_VALUE,
        "maxDurationNoProgress": DURATION},
    "StudyTimeConstraint": {"maxDuration": DURATION, "endTime": TIMESTAMP},
    "CustomJobSpec": {
        "persistentResourceId": S, "workerPoolSpecs": _msgs("WorkerPoolSpec"),
        "scheduling": _msg("Scheduling"), "serviceAccount": S, "network": S,
        "reservedIpRanges": STRINGS, "pscInterfaceConfig": _msg("PscInterfaceConfig"),
        "baseOutputDirectory": _msg("GcsDestination"), "protectedArtifactLocationId": S,
        "tensorboard": S, "enableWebAccess": B, "enableDashboardAccess": B, "experiment": S,
        "experimentRun": S, "models": STRINGS},
    "WorkerPoolSpec": {
        "containerSpec": _msg("ContainerSpec"), "pythonPackageSpec": _msg("PythonPackageSpec"),
        "machineSpec": _msg("MachineSpec"), "replicaCount": I64, "nfsMounts": _msgs("NfsMount"),
        "lustreMounts": _msgs("LustreMount"), "diskSpec": _msg("DiskSpec")},
    "ContainerSpec": {"imageUri": S, "command": STRINGS, "args": STRINGS, "env": _msgs("EnvVar")},
    "EnvVar": {"name": S, "value": S},
    "PythonPackageSpec": {
        "executorImageUri": S, "packageUris": STRINGS, "pythonModule": S, "args": STRINGS,
        "env": _msgs("EnvVar")},
    "MachineSpec": {
        "machineType": S, "acceleratorType": _enum("AcceleratorType"), "acceleratorCount": I32,
        "gpuPartitionSize": S, "tpuTopology": S,
        "reservationAffinity": _msg("ReservationAffinity")},
    "ReservationAffinity": {
        "reservationAffinityType": _enum("ReservationAffinity.Type"), "key": S, "values": STRINGS},
    "NfsMount": {"server": S, "path": S, "mountPoint": S},
    "LustreMount": {"instanceIp": S, "volumeHandle": S, "filesystem": S, "mountPoint": S},
    "DiskSpec": {"bootDiskType": S, "bootDiskSizeGb": I32},
    "Scheduling": {
        "timeout": DURATION, "restartJobOnWorkerRestart": B,
        "strategy": _enum("Scheduling.Strategy"), "disableRetries": B,
        "maxWaitDuration": DURATION},
    "PscInterfaceConfig": {"networkAttachment": S, "dnsPeeringConfigs": _msgs("DnsPeeringConfig")},
    "DnsPeeringConfig": {"domain": S, "targetProject": S, "targetNetwork": S},
    "GcsDestination": {"outputUriPrefix": S},
}

# Every enum's names and numbers (the 0 value is each enum's default). Enums only ever gain members.
ENUMS: dict[str, dict[str, int]] = {
    "StudySpec.MetricSpec.GoalType": {"GOAL_TYPE_UNSPECIFIED": 0, "MAXIMIZE": 1, "MINIMIZE": 2},
    f"{_PS}.ScaleType": {"SCALE_TYPE_UNSPECIFIED": 0, "UNIT_LINEAR_SCALE": 1, "UNIT_LOG_SCALE": 2,
                         "UNIT_REVERSE_LOG_SCALE": 3},
    "StudySpec.Algorithm": {"ALGORITHM_UNSPECIFIED": 0, "GRID_SEARCH": 2, "RANDOM_SEARCH": 3},
    "StudySpec.ObservationNoise": {"OBSERVATION_NOISE_UNSPECIFIED": 0, "LOW": 1, "HIGH": 2},
    "StudySpec.MeasurementSelectionType": {"MEASUREMENT_SELECTION_TYPE_UNSPECIFIED": 0,
                                           "LAST_MEASUREMENT": 1, "BEST_MEASUREMENT": 2},
    "AcceleratorType": {
        "ACCELERATOR_TYPE_UNSPECIFIED": 0, "NVIDIA_TESLA_K80": 1, "NVIDIA_TESLA_P100": 2,
        "NVIDIA_TESLA_V100": 3, "NVIDIA_TESLA_P4": 4, "NVIDIA_TESLA_T4": 5, "TPU_V2": 6,
        "TPU_V3": 7, "NVIDIA_TESLA_A100": 8, "NVIDIA_A100_80GB": 9, "TPU_V4_POD": 10,
        "NVIDIA_L4": 11, "TPU_V5_LITEPOD": 12, "NVIDIA_H100_80GB": 13, "NVIDIA_H100_MEGA_80GB": 14,
        "NVIDIA_H200_141GB": 15, "NVIDIA_B200": 16, "NVIDIA_GB200": 17, "NVIDIA_RTX_PRO_6000": 18},
    "ReservationAffinity.Type": {"TYPE_UNSPECIFIED": 0, "NO_RESERVATION": 1, "ANY_RESERVATION": 2,
                                 "SPECIFIC_RESERVATION": 3},
    "Scheduling.Strategy": {"STRATEGY_UNSPECIFIED": 0, "ON_DEMAND": 1, "LOW_COST": 2,
                            "STANDARD": 3, "SPOT": 4, "FLEX_START": 6},
}


def enum_numbers(enum: str) -> dict[int, str]:
    """``{number: name}`` of an enum."""
    return {number: name for name, number in ENUMS[enum].items()}


class _Unset:
    """A field at its proto3 default without presence: proto3 JSON does not write it."""


UNSET = _Unset()


def canonical(node: Node, message: str) -> dict[str, object]:
    """A message value as the REST body writes it, validated against the v1 types.

    JSON names, enums as names, int64 as strings, durations as ``"12.5s"``, fields in the protos'
    order; a field without presence at its default is left out, so every way of writing one
    message gives one value.

    Raises:
        SpecError: an unknown field (with did-you-mean), a value of the wrong kind, an unknown
            enum name or number; the message names the field's path as written.
    """
    fields = MESSAGES[message]
    given = Node(node.value, node.path, node.source, proto=True).mapping(set(fields))
    out: dict[str, object] = {}
    for name, field in fields.items():
        if name in given:
            value = field_value(given[name], field)
            if value is not UNSET:
                out[name] = value
    return out


def field_value(node: Node, field: Field) -> object:
    """One field's canonical value (see ``canonical``), or UNSET when proto3 JSON leaves it out."""
    if field.repeated:
        items = [_scalar(item, field) for item in node.list(f"{field.kind} values")]
        return items if items else UNSET
    if field.kind == "map":
        pairs = {key: value.string(what="a string", allow_empty=True) for key, value in node.items()}
        return pairs if pairs else UNSET
    value = _scalar(node, field)
    return value if field.presence or not _is_default(value, field) else UNSET


def _scalar(node: Node, field: Field) -> object:
    kind = field.kind
    if kind == "message":
        return canonical(node, field.ref)
    if kind == "string":
        return node.string(allow_empty=True)
    if kind == "bool":
        return node.boolean()
    if kind == "int32":
        return node.integer(lo=-(2**31), hi=2**31 - 1)
    if kind == "int64":
        return str(node.integer())
    if kind == "double":
        return node.number()
    if kind == "enum":
        return node.name_of(ENUMS[field.ref])
    if kind == "duration":
        return _duration_text(node)
    return _timestamp_text(node)


def _is_default(value: object, field: Field) -> bool:
    """Whether a canonical scalar is its kind's proto3 default."""
    if field.kind == "enum":
        return ENUMS[field.ref].get(str(value)) == 0
    if field.kind == "int64":
        return value == "0"
    return value in ("", False, 0)


def _duration_text(node: Node) -> str:
    """A protobuf Duration (``"3600s"``, ``"-1.5s"``) in its shortest form."""
    text = node.value.strip() if isinstance(node.value, str) else ""
    if not _DURATION.match(text):
        node.fail('a duration like "3600s" or "1.5s"')
    return format(Decimal(text[:-1]).normalize(), "f") + "s"


def _timestamp_text(node: Node) -> str:
    """A protobuf Timestamp as RFC 3339 text (a YAML timestamp becomes its UTC text)."""
    v = node.value
    if isinstance(v, datetime.datetime):
        when = v if v.tzinfo else v.replace(tzinfo=datetime.timezone.utc)
        return when.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    if not isinstance(v, str) or not _TIMESTAMP.match(v.strip()):
        node.fail('an RFC 3339 timestamp like "2030-01-01T00:00:00Z"')
    return v.strip()


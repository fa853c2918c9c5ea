"""Vertex fields a spec may carry that the emulator does not use: found on load, written on export.

The key sets are the v1 types' fields (``google.cloud.aiplatform_v1.types``) that the job model does
not hold; a test compares them with the generated types. A carried field is kept as its JSON text
under its REST path (``trialJobSpec.workerPoolSpecs[0].nfsMounts``) and exported unchanged.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from typing import Any

# Output-only fields of the job resource: never part of a create request, never carried.
OUTPUT_KEYS = frozenset({"name", "state", "trials", "createTime", "startTime", "endTime",
                         "updateTime", "error", "satisfiesPzs", "satisfiesPzi"})
CARRIED_KEYS: dict[str, frozenset[str]] = {
    "job": frozenset({"encryptionSpec"}),
    "studySpec": frozenset({"observationNoise", "studyStoppingConfig"}),
    "valueSpec": frozenset({"defaultValue"}),
    "trialJobSpec": frozenset({"serviceAccount", "network", "reservedIpRanges",
                               "pscInterfaceConfig", "persistentResourceId",
                               "protectedArtifactLocationId", "tensorboard", "experiment",
                               "experimentRun", "models", "enableWebAccess",
                               "enableDashboardAccess"}),
    "workerPoolSpec": frozenset({"nfsMounts", "lustreMounts"}),
    "machineSpec": frozenset({"gpuPartitionSize", "tpuTopology", "reservationAffinity"}),
    "scheduling": frozenset({"strategy", "disableRetries", "maxWaitDuration"}),
}
VALUE_SPEC_KEYS = ("doubleValueSpec", "integerValueSpec", "categoricalValueSpec",
                   "discreteValueSpec")
_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")

Carried = tuple[tuple[str, str], ...]


def collect(doc: Mapping[str, Any]) -> Carried:
    """Every carried field of a HyperparameterTuningJob document (already validated)."""
    out: list[tuple[str, str]] = []

    def take(node: object, kind: str, path: str) -> None:
        if isinstance(node, Mapping):
            for key in sorted(CARRIED_KEYS[kind]):
                if node.get(key) is not None:
                    out.append((f"{path}.{key}" if path else key, to_text(node[key])))

    def parameter(node: object, path: str) -> None:
        if not isinstance(node, Mapping):
            return
        for key in VALUE_SPEC_KEYS:
            take(node.get(key), "valueSpec", f"{path}.{key}")
        for j, cond in enumerate(node.get("conditionalParameterSpecs") or ()):
            if isinstance(cond, Mapping):
                parameter(cond.get("parameterSpec"),
                          f"{path}.conditionalParameterSpecs[{j}].parameterSpec")

    take(doc, "job", "")
    study = doc.get("studySpec")
    if isinstance(study, Mapping):
        take(study, "studySpec", "studySpec")
        for i, p in enumerate(study.get("parameters") or ()):
            parameter(p, f"studySpec.parameters[{i}]")
    tj = doc.get("trialJobSpec")
    if isinstance(tj, Mapping):
        take(tj, "trialJobSpec", "trialJobSpec")
        take(tj.get("scheduling"), "scheduling", "trialJobSpec.scheduling")
        for i, pool in enumerate(tj.get("workerPoolSpecs") or ()):
            where = f"trialJobSpec.workerPoolSpecs[{i}]"
            take(pool, "workerPoolSpec", where)
            if isinstance(pool, Mapping):
                take(pool.get("machineSpec"), "machineSpec", f"{where}.machineSpec")
    return tuple(sorted(out))


def to_text(value: object) -> str:
    """JSON text of a carried value (YAML timestamps become RFC 3339 strings)."""
    return json.dumps(value, ensure_ascii=False, default=_json_default)


def _json_default(value: object) -> str:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def apply(out: dict[str, Any], carried: Carried) -> dict[str, Any]:
    """Write ``carried`` into an exported document in place (missing mappings are created;
    a field under a list entry the export does not have is skipped)."""
    for path, text in carried:
        segments: list[str | int] = [name if name else int(index)
                                     for name, index in _SEGMENT.findall(path)]
        node: Any = out
        for seg, nxt in zip(segments, segments[1:], strict=False):
            if isinstance(seg, int):
                if not isinstance(node, list) or seg >= len(node):
                    break
                node = node[seg]
            else:
                if not isinstance(node, dict):
                    break
                node = node.setdefault(seg, [] if isinstance(nxt, int) else {})
        else:
            if isinstance(node, dict) and isinstance(segments[-1], str):
                node[segments[-1]] = json.loads(text)
    return out


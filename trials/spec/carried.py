"""Vertex fields a spec may carry that the emulator does not use: found on load, written on export.

The key sets are the v1 types' fields (``google.cloud.aiplatform_v1.types``) that the job model does
not hold; a test compares them with the generated types. A carried field is kept as the JSON text of
its canonical value (``trials.spec.schema.canonical``: validated, JSON names, enum names) under its
REST path (``trialJobSpec.workerPoolSpecs[0].nfsMounts``), found by ``trials.spec.vertex`` while
it parses, and exported as it is.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

# Carried fields the controller reads and emulates (kept as JSON here, interpreted by the job loop:
# ``trials.controller.policy.study_stopping``)
EMULATED = frozenset({"studySpec.studyStoppingConfig"})
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
_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")

Carried = tuple[tuple[str, str], ...]


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


"""What a ``trials serve`` request carries, read strictly: its JSON body, its ids, its list parameters,
the host paths a job names. Anything malformed, too deep, out of range or outside the server's root is
``400 INVALID_ARGUMENT`` with one message, never an internal error."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trials import files, protocol
from trials.controller.api.errors import ApiError
from trials.printable import printable
from trials.spec.model import JobSpec

MAX_BODY_DEPTH = 64  # a job spec nests ~8 deep; deeper is refused before anything recurses over it
_MAX_INT_DIGITS = 20  # int64/uint64 fields: a longer integer is refused unconverted
_INT_RANGE = (-(2**63), 2**64 - 1)


def json_body(body: bytes) -> dict[str, Any]:
    """The request's JSON object; a malformed, too deep or out-of-range one is ``400 INVALID_ARGUMENT``."""
    try:
        value = (json.loads(body.decode("utf-8"), parse_int=_bounded_int, parse_float=_finite_float,
                            parse_constant=_no_constant) if body.strip() else {})
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ApiError(400, f"Invalid JSON payload received. {printable(str(err))[:200]}") from None
    except RecursionError:
        raise ApiError(400, f"Invalid JSON payload received. Nested deeper than {MAX_BODY_DEPTH} levels") from None
    if not isinstance(value, dict):
        raise ApiError(400, f"Invalid JSON payload received. Expected an object, got {type(value).__name__}")
    _check_depth(value)
    return value


def _bounded_int(text: str) -> int:
    digits = text.lstrip("-")
    value = int(text) if len(digits) <= _MAX_INT_DIGITS else None
    if value is None or not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
        shown = text if len(text) <= 30 else f"{text[:20]}... ({len(digits)} digits)"
        raise ApiError(400, f"Invalid JSON payload received. The number {shown} is out of range: an integer "
                            f"field holds at most 64 bits")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ApiError(400, f"Invalid JSON payload received. The number {printable(text)[:30]} is out of range "
                            f"of a double")
    return value


def _no_constant(text: str) -> float:
    raise ApiError(400, f"Invalid JSON payload received. {text} is not JSON (a double field takes \"{text}\" "
                        f"as a string)")


def _check_depth(value: object) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_BODY_DEPTH:
            raise ApiError(400, f"Invalid JSON payload received. Nested deeper than {MAX_BODY_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def check_id(job_id: str, where: str) -> None:
    try:
        protocol.check_job_id(job_id)
    except ValueError as err:
        raise ApiError(400, f"Invalid resource name {where}{printable(job_id)[:100]}: {err}") from None


def check_host_paths(job: JobSpec, where: str, *, root: str, cwd: str) -> None:
    """What a job made through the API names on the host: its base output directory and its local packages
    must be ``gs://`` (``ROOT/gcs``) or under the server's root (a container mounts them).

    Raises:
        ApiError: 400 naming the field, for any other host path.
    """
    spec = job.trial_job
    if spec is None:
        return
    named = [(f"{where}.baseOutputDirectory.outputUriPrefix", spec.base_output_directory)]
    for i, pool in enumerate(spec.worker_pools):
        for k, uri in enumerate(pool.python_package.package_uris if pool and pool.python_package else ()):
            named.append((f"{where}.workerPoolSpecs[{i}].pythonPackageSpec.packageUris[{k}]", uri))
    top = os.path.abspath(root)
    for key, value in named:
        if not value or protocol.is_gcs_uri(value):
            continue
        path = os.path.abspath(os.path.join(cwd, value))
        real = os.path.realpath(path), os.path.realpath(top)
        if not (files.is_beneath(path, top) and files.is_beneath(*real)):
            raise ApiError(400, f"{key}: a job made through trials serve writes and reads gs:// or a folder under "
                                f"the server's root {top} (--root), got {printable(value)[:200]!r}")


def int_param(query: Mapping[str, str], key: str, default: int) -> int:
    text = query.get(key)
    if text in (None, ""):
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ApiError(400, f"{key}: expected an integer >= 0, got {printable(text)[:50]!r}")
    return value


_TERM = re.compile(r'^\s*(?P<key>[A-Za-z_][\w.]*)\s*(?P<op>!=|=)\s*(?P<value>"[^"]*"|[^\s"]+)\s*$')
_FILTER_KEYS = {"state": "state", "display_name": "displayName", "displayName": "displayName"}


def parse_filter(text: str) -> Callable[[Mapping[str, Any]], bool]:
    """A list ``filter`` (terms ``state``, ``display_name``/``displayName``, ``labels.KEY`` with ``=``
    or ``!=``, joined by ``AND``) as a predicate on a job's resource; anything else is refused."""
    terms: list[tuple[Sequence[str], bool, str]] = []
    for part in re.split(r"\s+AND\s+", text.strip()) if text.strip() else []:
        m = _TERM.match(part)
        key = m["key"] if m else ""
        if m is None or not (key in _FILTER_KEYS or key.startswith("labels.")):
            raise ApiError(400, f"filter: cannot read {printable(part)[:100]!r}: this server filters on state, "
                                f"display_name and labels.KEY with = or !=, joined by AND")
        path = ("labels", key[len("labels."):]) if key.startswith("labels.") else (_FILTER_KEYS[key],)
        terms.append((path, m["op"] == "=", m["value"].strip('"')))

    def keep(rest: Mapping[str, Any]) -> bool:
        for path, equal, value in terms:
            got: Any = rest
            for k in path:
                got = got.get(k) if isinstance(got, Mapping) else None
            if (str(got) == value) != equal:
                return False
        return True

    return keep

"""A job's metadata as one typed, versioned record: its fields, its JSON form, and reading what earlier versions wrote.

The JSON form is an object, one member a field (docs/DESIGN.md, "The job's record")::

    {"version": 1, "spec": {...}, "sampler": "tpe", "start_time": "2026-...", "runtime": "slurm",
     "slurm": {"partition": "gpu"}, ...}

A member left out, or null, is the field's default; a writer leaves defaults out. The runtime's own options
are the member named after the runtime (``runtime``'s value). A member this version does not know (a newer
writer's, of the same version) is kept in :attr:`JobMeta.extra` and written back with the record. A record
without ``version`` was written before the record had one: it is version 1, the same members. A record of
a newer version is refused (:class:`~trials.errors.JobMetaError`).

The storage keeps each member as a study user attribute of its own (``trials:<member>``, see
:mod:`trials.study.names`), so a writer changes only the members it changes: two processes writing
different fields of one job (``trials cancel`` and the job's controller) never undo each other's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from trials.errors import JobMetaError
from trials.records import JobState

VERSION = 1  # the version this trials writes, and the newest it reads
VERSION_KEY = "version"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobMeta:
    """One job's metadata (what ``trials`` keeps of a job beside its trials).

    Example:
        >>> meta = JobMeta.from_json({"spec": {"maxTrialCount": 4}, "sampler": "tpe"}, job="j")
        >>> meta.sampler == "tpe" and meta.version == 1 and meta.keep_going is False
        True
        >>> JobMeta.from_json(meta.to_json(), job="j") == meta
        True
    """

    version: int = VERSION
    # what the job is: its spec and how it was made
    spec: dict[str, Any] | None = None  # the Vertex REST spec; None: not a trials job
    local: dict[str, Any] = field(default_factory=dict)  # LocalOptions' fields kept with the job
    create_time: str | None = None
    job_dir: str | None = None
    base_output: str | None = None
    gcs_root: str | None = None
    project_number: str | None = None
    local_command: tuple[str, ...] | None = None
    cwd: str | None = None
    pass_env: tuple[str, ...] = ()
    stale_after_s: float | None = None
    keep_going: bool = False
    # its sampler
    sampler: str | None = None
    seed: int | None = None
    startup: int | None = None
    # how its replicas run
    runtime: str | None = None  # None: host
    images: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] | None = None  # the runtime's own options (its member is named after it)
    # where it is
    state: JobState | None = None
    start_time: str | None = None
    end_time: str | None = None
    error: dict[str, Any] | None = None  # {"code": int, "message": str}, as the REST job's
    controller: str | None = None  # the worker running it (host:pid)
    study_stopped: str | None = None  # why studyStoppingConfig stopped the study
    # trials serve's
    api_parent: str | None = None
    api_kind: str | None = None
    # the sampler's own process in the last run (trials.study.ahead); kept only finite and >= 0
    suggestions: float | None = None
    suggest_cpu_s: float | None = None
    suggest_wait_s: float | None = None
    # members of a newer writer (same version), kept as they were
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.options is not None and not self.runtime:
            raise ValueError(f"options need a runtime to be kept under, got options={self.options!r}")
        if self.runtime in _MEMBERS or self.runtime == VERSION_KEY:
            raise ValueError(f"runtime must not be named as a field, got {self.runtime!r}")

    # -- the JSON form
    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, job: str) -> JobMeta:
        """The record in ``data`` (its JSON form), as any version up to :data:`VERSION` wrote it.

        Raises:
            JobMetaError: a newer version, or a member of the wrong type (named with ``job``).
        """
        version = data.get(VERSION_KEY)
        if version is None:
            version = 1  # written before the record had a version: the same members
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise JobMetaError(f"job {job!r}: metadata {VERSION_KEY} must be a positive integer, "
                               f"got {_shown(version)}")
        if version > VERSION:
            raise JobMetaError(f"job {job!r} was written by a newer trials: its metadata version is {version}, "
                               f"this trials reads version {VERSION} (upgrade trials to open it)")
        values: dict[str, Any] = {}
        for name, read in _MEMBERS.items():
            raw = data.get(name)
            if raw is not None:
                value = read(raw)
                if value is _BAD:
                    raise JobMetaError(f"job {job!r}: metadata {name} must be {_EXPECTED[read]}, "
                                       f"got {_shown(raw)}")
                if value is not None:
                    values[name] = value
        runtime = values.get("runtime")
        if runtime == VERSION_KEY:
            raise JobMetaError(f"job {job!r}: metadata runtime must not be named as a field, got {runtime!r}")
        options = data.get(runtime) if runtime is not None else None
        if options is not None:
            if not isinstance(options, dict):
                raise JobMetaError(f"job {job!r}: metadata {runtime} (the runtime's options) must be an "
                                   f"object, got {_shown(options)}")
            values["options"] = options
        extra = {k: v for k, v in data.items() if k not in _MEMBERS and k not in (VERSION_KEY, runtime)}
        return cls(version=version, extra=extra, **values)

    def to_json(self) -> dict[str, Any]:
        """The JSON form: the version, every field not at its default, the runtime's options, the kept members."""
        default = _DEFAULT
        return {k: v for k, v in self.members().items()
                if k == VERSION_KEY or k not in default or v != default[k]}

    def members(self) -> dict[str, Any]:
        """Every member of the JSON form, those at their default too (what a writer compares)."""
        out: dict[str, Any] = {**self.extra, VERSION_KEY: self.version}
        for name in _MEMBERS:
            out[name] = _to_json_value(getattr(self, name))
        if self.options is not None and self.runtime is not None:
            out[self.runtime] = self.options
        return out

    def changed(self, since: JobMeta) -> dict[str, Any]:
        """The members of the JSON form that differ from ``since``'s (what writing this record over it writes)."""
        before = since.members()
        missing = object()
        return {k: v for k, v in self.members().items() if before.get(k, missing) != v
                and not (v is None and k not in before)}

    # -- questions the callers ask
    def options_of(self, runtime: str) -> dict[str, Any] | None:
        """The own options the job keeps for ``runtime`` (its own runtime's, or those kept from an earlier one)."""
        if runtime == self.runtime:
            return self.options
        kept = self.extra.get(runtime)
        return kept if isinstance(kept, dict) else None


def _to_json_value(value: Any) -> Any:
    if isinstance(value, JobState):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


_BAD = object()  # a reader's answer for a value of the wrong type


def _text(raw: Any) -> Any:
    return raw if isinstance(raw, str) else _BAD


def _integer(raw: Any) -> Any:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else _BAD


def _number(raw: Any) -> Any:
    return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else _BAD


def _flag(raw: Any) -> Any:
    return raw if isinstance(raw, bool) else _BAD


def _object(raw: Any) -> Any:
    return raw if isinstance(raw, dict) else _BAD


def _texts(raw: Any) -> Any:
    return tuple(raw) if isinstance(raw, list) and all(isinstance(x, str) for x in raw) else _BAD


def _text_map(raw: Any) -> Any:
    ok = isinstance(raw, dict) and all(isinstance(v, str) for v in raw.values())
    return raw if ok else _BAD


def _state(raw: Any) -> Any:
    try:
        return JobState(raw)
    except ValueError:
        return _BAD


def _measured(raw: Any) -> Any:
    # written by trials only as finite numbers >= 0; anything else (an edited journal) reads as none
    ok = isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw) and raw >= 0
    return raw if ok else None


_READERS = {"str": _text, "int": _integer, "float": _number, "bool": _flag, "dict[str, Any]": _object,
            "tuple[str, ...]": _texts, "dict[str, str]": _text_map, "JobState": _state, "measured": _measured}
_EXPECTED = {_text: "a string", _integer: "an integer", _number: "a number", _flag: "true or false",
             _object: "an object", _texts: "a list of strings", _text_map: "an object of strings",
             _state: "one of " + ", ".join(s.value for s in JobState), _measured: "a number"}
_MEASURED = ("suggestions", "suggest_cpu_s", "suggest_wait_s")


def _reader(name: str, annotation: str) -> Any:
    if name in _MEASURED:
        return _measured
    return _READERS[annotation.removesuffix(" | None")]


# the fields that are members of their own (version, options and extra are members otherwise)
_MEMBERS = {f.name: _reader(f.name, str(f.type)) for f in fields(JobMeta)
            if f.name not in ("version", "options", "extra")}
_DEFAULT = JobMeta().members()


def _shown(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."

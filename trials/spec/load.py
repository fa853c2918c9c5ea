"""Load a job spec in any of four forms (gcloud YAML, REST JSON, legacy, short): read and dispatch."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

from trials.errors import SpecError
from trials.files import kind_of
from trials.spec.model import JobSpec, ParameterType
from trials.spec.node import Node, parse_text, suggest
from trials.spec.vertex import parse_job

MAX_SPEC_BYTES = 64 * 1024 * 1024  # a 100,000-value spec is 10 MB; more is a wrong path, not a spec
FORMS = ("a gcloud/REST job (top-level `studySpec`), a legacy hptuning_config (top-level "
         "`trainingInput`) or a search space (top-level `metrics` and `parameters`)")


def load_spec(path: str | os.PathLike[str]) -> JobSpec:
    """Read a spec file: ``.json`` as JSON, ``.yaml``/``.yml`` as YAML, anything else JSON then YAML.

    Raises:
        SpecError: the file is unreadable or invalid; the one-line message names the file, the
            path inside it, what was expected and what was found.
    """
    source = os.fspath(path)
    try:
        text = _read_spec_file(source).decode("utf-8")
    except FileNotFoundError as err:
        raise SpecError("expected an existing spec file, got no such file", source=source) from err
    except IsADirectoryError as err:
        raise SpecError("expected a spec file, got a directory", source=source) from err
    except UnicodeDecodeError as err:
        raise SpecError(f"expected UTF-8 text, got an undecodable byte at offset {err.start}",
                        source=source) from err
    except OSError as err:
        raise SpecError(f"expected a readable spec file, got {err.strerror or err}",
                        source=source) from err
    suffix = Path(source).suffix.lower()
    fmt = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(suffix)
    return parse_spec(parse_text(text, source=source, fmt=fmt), source=source)


def _read_spec_file(source: str) -> bytes:
    """The bytes of a regular file of at most MAX_SPEC_BYTES; never blocks on a FIFO or a device."""
    fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(source)
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(f"expected a regular spec file, got {kind_of(st.st_mode)}", source=source)
        if st.st_size > MAX_SPEC_BYTES:
            raise SpecError(f"expected a spec file of at most {MAX_SPEC_BYTES // (1024 * 1024)} MiB, "
                            f"got {st.st_size} bytes", source=source)
        os.set_blocking(fd, True)
        chunks, left = [], MAX_SPEC_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:  # it grew while being read
            raise SpecError(f"expected a spec file of at most {MAX_SPEC_BYTES // (1024 * 1024)} MiB, "
                            "got more", source=source)
        return b"".join(chunks)
    finally:
        os.close(fd)


def loads_spec(text: str, *, source: str = "<string>") -> JobSpec:
    """Parse spec text (JSON or YAML) into a JobSpec.

    Raises:
        SpecError: invalid text or spec; ``source`` names it in the message.
    """
    return parse_spec(parse_text(text, source=source, fmt=None), source=source)


def parse_spec(data: object, *, source: str) -> JobSpec:
    """Validate an already-parsed document (any of the four forms) into a JobSpec.

    Raises:
        SpecError: the document is invalid; the message names ``source`` and the path inside it.
    """
    root = Node(data, "", source)
    if not isinstance(data, dict):
        root.fail(f"a mapping at the top level: {FORMS}")
    _reject_nul(data, source)
    keys = set(data)
    if "trainingInput" in keys:
        from trials.spec.legacy import parse_legacy

        return _runnable(parse_legacy(root), source, "trainingInput.jobDir",
                         "trainingInput.hyperparameters.params")
    if keys & {"studySpec", "trialJobSpec", "study_spec", "trial_job_spec"}:  # JSON or proto names
        return _runnable(parse_job(root), source,
                         "trialJobSpec.baseOutputDirectory.outputUriPrefix", "studySpec.parameters")
    if keys & {"metrics", "parameters"}:
        from trials.spec.short import parse_short

        return _runnable(parse_short(root), source, "base_output_dir", "parameters")
    for key in keys:
        hint = suggest(str(key), ("studySpec", "trialJobSpec", "trainingInput", "metrics",
                                  "parameters"))
        if hint:
            Node(data[key], str(key), source).error(
                f"unknown top-level key `{key}`; did you mean `{hint}`? (expected {FORMS}; "
                f"got `{key}`)")
    root.fail(FORMS, got=f"top-level keys {sorted(map(str, keys))}" if keys else "an empty mapping")


def _reject_nul(data: object, source: str) -> None:
    """No key or string may hold a NUL character: no argv or environment can carry one."""
    stack: list[tuple[object, str]] = [(data, "")]
    seen: set[int] = set()  # YAML aliases share containers: visit each once
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if "\0" in value:
                Node(value, path, source).fail("text without NUL characters (no argv or "
                                               "environment variable can carry one)")
        elif isinstance(value, (dict, list)) and id(value) not in seen:
            seen.add(id(value))
            if isinstance(value, dict):
                for key, item in value.items():
                    stack.append((key, path))
                    stack.append((item, f"{path}.{key}" if path else str(key)))
            else:
                stack.extend((item, f"{path}[{i}]") for i, item in enumerate(value))


def _runnable(job: JobSpec, source: str, output_path: str, params_path: str) -> JobSpec:
    """Checks every form shares: an output URI that stays in /gcs, sampleable double ranges."""
    from trials.protocol import is_gcs_uri, local_path

    base = job.trial_job.base_output_directory if job.trial_job else None
    if base and is_gcs_uri(base):
        try:
            local_path(base, "/")
        except ValueError:
            Node(base, output_path, source).fail(
                "gs://BUCKET/path with a bucket and no '..' segment (it maps into the /gcs mount)")
    for p in job.study.all_parameters():
        if p.type is ParameterType.DOUBLE and not math.isfinite(p.bounds()[1] - p.bounds()[0]):
            Node(p.parameter_id, params_path, source).fail(
                f"a range whose width is a finite number for parameter {p.parameter_id!r}",
                got=f"[{p.min_value!r}, {p.max_value!r}] (the width overflows)")
    return job


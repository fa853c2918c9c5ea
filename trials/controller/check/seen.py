"""What a probe run of `trials check` left to be seen: its reports, its output, the files it wrote."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from trials import files, protocol
from trials.controller.check import scorecard
from trials.controller.check.identity_audit import AUDIT_ENV
from trials.hypertune_file import parse_hypertune_text

UNSET = "unset "  # the audit's note of a read of an unset AIP_* variable: "unset $AIP_MODEL_DIR"
SOFT_UNSET = "unset-soft "  # the same through .get, getenv or `in`: the trainer may do without it
_MAX_LOG_BYTES = 4 << 20
_MAX_WALK = 20_000
_IGNORED_NAMES = {"__pycache__", ".git", ".hg", ".svn", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                  ".ipynb_checkpoints"}
_AREAS = {"model": protocol.ENV_MODEL_DIR, "checkpoints": protocol.ENV_CHECKPOINT_DIR,
          "logs": protocol.ENV_TENSORBOARD_LOG_DIR}


def run_seen(*, name: str, env: Mapping[str, str], trial_dir: str, exit_code: int | None, duration_s: float,
             stopped: bool, first_report_s: float | None, outside: list[str]) -> scorecard.RunSeen:
    """One replica's run as its files show it: ``env`` is the environment it was started with."""
    out = read_text(os.path.join(trial_dir, protocol.stdout_log(name)))
    err = read_text(os.path.join(trial_dir, protocol.stderr_log(name)))
    lines = [line for line in (out + "\n" + err).splitlines() if line.strip()]
    err_lines = [line for line in err.splitlines() if line.strip()] or lines
    n_json = sum(1 for line in lines if is_json_object(line))
    audit = read_text(env.get(AUDIT_ENV, ""))
    return scorecard.RunSeen(
        exit_code=exit_code, duration_s=duration_s, stopped_by_check=stopped,
        reports=read_reports(env.get(protocol.ENV_METRIC_FILE, "")), first_report_s=first_report_s,
        error_tail=[message(line) for line in err_lines[-3:]], n_log_lines=len(lines), n_json_lines=n_json,
        written={area: walk(env.get(var, "")) for area, var in _AREAS.items()},
        outside_writes=outside,
        identity_reads=sorted({line for line in audit.splitlines() if line and not line.startswith("unset")}),
        unset_reads=sorted({line[len(UNSET):] for line in audit.splitlines() if line.startswith(UNSET)}),
        soft_unset_reads=sorted({line[len(SOFT_UNSET):] for line in audit.splitlines()
                                 if line.startswith(SOFT_UNSET)}),
    )


def read_text(path: str) -> str:
    if not path:
        return ""
    try:
        return files.read_regular(path, max_bytes=_MAX_LOG_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def read_reports(metric_file: str) -> list[scorecard.SeenReport]:
    """Every report in a hypertune file as written (any tag, a missing step as None)."""
    return [scorecard.SeenReport(tag=h.tag, step=h.step or None, value=h.value)
            for h in parse_hypertune_text(read_text(metric_file))]


def is_json_object(line: str) -> bool:
    line = line.strip()
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def message(line: str) -> str:
    if is_json_object(line):
        entry = json.loads(line)
        for key in ("message", "msg", "textPayload"):
            if isinstance(entry.get(key), str):
                return str(entry[key]).splitlines()[-1] if entry[key] else ""
    return line.strip()


def walk(top: str) -> list[str]:
    """Regular files under ``top`` (relative names), without following links; bounded."""
    if not top or top.startswith("gs://") or not os.path.isdir(top):
        return []
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(dirnames)
        for name in sorted(filenames):
            found.append(os.path.relpath(os.path.join(dirpath, name), top))
            if len(found) >= 1000:
                return found
    return found


def upper_writes(uppers: Sequence[str]) -> list[str]:
    """What sandboxed replicas wrote in their working folder: the files of their overlays' upper layers."""
    return sorted({f for upper in uppers for f in walk(upper)
                   if not set(f.split(os.sep)) & _IGNORED_NAMES and not f.endswith((".pyc", ".pyo"))})


Snapshot = dict[str, tuple[int, int]]


def snapshot(top: str, *, exclude: str) -> Snapshot:
    """(mtime, size) of each file under the working folder, to see what a run wrote there."""
    out: Snapshot = {}
    exclude = os.path.abspath(exclude)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in _IGNORED_NAMES
                       and os.path.abspath(os.path.join(dirpath, d)) != exclude]
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[os.path.relpath(path, top)] = (st.st_mtime_ns, st.st_size)
            if len(out) >= _MAX_WALK:
                return out
    return out


def changed(before: Snapshot, after: Snapshot) -> list[str]:
    return sorted(p for p, sig in after.items() if before.get(p) != sig)

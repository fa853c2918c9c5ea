"""One run of a trial's replicas, watched for `trials check`: its reports, its output, the files it wrote."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Sequence

from trials import files, protocol
from trials.controller.backend.protocol import ReplicaBackend, ReplicaHandle, ReplicaStart
from trials.controller.check import scorecard
from trials.controller.check.identity_audit import AUDIT_ENV
from trials.controller.loop.launcher import write_through
from trials.controller.trial import launch
from trials.hypertune_file import parse_hypertune_text

_POLL_S = 0.1
_MAX_LOG_BYTES = 4 << 20
_MAX_WALK = 20_000
_IGNORED_NAMES = {"__pycache__", ".git", ".hg", ".svn", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                  ".ipynb_checkpoints"}


class Probe:
    """One run of all replicas of trial "1" in one folder, watched until it ends or is stopped."""

    def __init__(self, launches: Sequence[launch.ReplicaLaunch], *, trial_dir: str, cwd: str,
                 backend: ReplicaBackend, exclude: str = "",
                 clock: Callable[[], float] = time.monotonic):
        self.launches = launches
        self.trial_dir = trial_dir
        self.cwd = cwd
        self.backend = backend
        self.exclude = exclude
        self.clock = clock
        self.replicas: list[ReplicaHandle] = []
        self.start = 0.0
        self.first_report_s: float | None = None
        self.before: Snapshot = {}

    def begin(self) -> None:
        self.before = snapshot(self.cwd, exclude=self.exclude)
        self.start = self.clock()
        for lau in self.launches:
            self.replicas.append(self.backend.start(ReplicaStart(
                argv=tuple(lau.argv), env=lau.env, cwd=self.cwd, name=lau.name, label=lau.name,
                trial_dir=self.trial_dir, outputs=write_through(lau.env, lau.env.get(protocol.ENV_GCS_ROOT, "")),
                stdout_path=os.path.join(self.trial_dir, protocol.stdout_log(lau.name)),
                stderr_path=os.path.join(self.trial_dir, protocol.stderr_log(lau.name)))))

    def outside_writes(self) -> list[str]:
        """What the replicas wrote in their working folder: their overlay's upper layer when they ran
        in the sandbox, else the folder's files that changed since :meth:`begin`."""
        uppers = [r.upper_dir for r in self.replicas if r.upper_dir]
        if uppers:
            return sorted({f for upper in uppers for f in walk(upper)
                           if not set(f.split(os.sep)) & _IGNORED_NAMES and not f.endswith((".pyc", ".pyo"))})
        return changed(self.before, snapshot(self.cwd, exclude=self.exclude))

    def primary_reports(self) -> list[scorecard.SeenReport]:
        return read_reports(self.launches[0].metric_file)

    def watch(self, deadline: float, until: Callable[[list[scorecard.SeenReport]], bool] | None = None) -> bool:
        """Wait until the primary exits, ``until`` holds, or ``deadline``; True when the primary exited."""
        primary = self.replicas[0]
        while True:
            exited = primary.poll() is not None
            reports = self.primary_reports()
            if reports and self.first_report_s is None:
                self.first_report_s = self.clock() - self.start
            if exited:
                return True
            if until is not None and until(reports):
                return False
            if self.clock() >= deadline:
                return False
            time.sleep(_POLL_S)

    def wait_all(self, deadline: float) -> None:
        while any(r.poll() is None for r in self.replicas) and self.clock() < deadline:
            time.sleep(_POLL_S)

    def terminate(self, grace_s: float) -> float | None:
        """SIGTERM every replica's group; SIGKILL what is left after ``grace_s``. Returns the seconds
        the primary took to exit, or None when it had to be killed."""
        sent = self.clock()
        for r in self.replicas:
            if r.poll() is None:
                r.send_signal_group(signal.SIGTERM)
        took: float | None = None
        while self.clock() - sent < grace_s:
            if self.replicas[0].poll() is not None and took is None:
                took = self.clock() - sent
            if all(r.poll() is not None for r in self.replicas):
                break
            time.sleep(_POLL_S)
        if took is None and self.replicas[0].poll() is not None:
            took = self.clock() - sent
        self.kill()
        return took

    def kill(self) -> None:
        for r in self.replicas:
            if r.poll() is None:
                r.send_signal_group(signal.SIGKILL)
        for r in self.replicas:
            r.close()

    def seen(self, index: int, *, stopped: bool, outside: list[str]) -> scorecard.RunSeen:
        lau, rep = self.launches[index], self.replicas[index]
        out = read_text(os.path.join(self.trial_dir, protocol.stdout_log(lau.name)))
        err = read_text(os.path.join(self.trial_dir, protocol.stderr_log(lau.name)))
        lines = [line for line in (out + "\n" + err).splitlines() if line.strip()]
        err_lines = [line for line in err.splitlines() if line.strip()] or lines
        n_json = sum(1 for line in lines if is_json_object(line))
        audit = read_text(lau.env.get(AUDIT_ENV, ""))
        return scorecard.RunSeen(
            exit_code=rep.poll(), duration_s=self.clock() - self.start, stopped_by_check=stopped,
            reports=read_reports(lau.metric_file), first_report_s=self.first_report_s if index == 0 else None,
            error_tail=[message(line) for line in err_lines[-3:]], n_log_lines=len(lines), n_json_lines=n_json,
            written={area: walk(lau.env.get(var, "")) for area, var in _AREAS.items()},
            outside_writes=outside, identity_reads=sorted(set(audit.splitlines())),
        )


_AREAS = {"model": protocol.ENV_MODEL_DIR, "checkpoints": protocol.ENV_CHECKPOINT_DIR,
          "logs": protocol.ENV_TENSORBOARD_LOG_DIR}


def read_text(path: str) -> str:
    if not path:
        return ""
    try:
        return files.read_regular(path, max_bytes=_MAX_LOG_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def read_reports(metric_file: str) -> list[scorecard.SeenReport]:
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

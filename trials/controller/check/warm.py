"""`trials check --warm-start`: whether a trainer is safe to fork from a warm launcher (issue 51).

The evidence a user wants before ``trials sweep --warm-start``: the same trial run fresh and warm.
Three one-trial jobs with the check's parameters, one after another, through one warm backend
(:mod:`trials.controller.warm.backend`) over the check's host backend: the first runs fresh (the
survey: the launcher learns its modules), the second and third are forked from the launcher. Each is
trial 1 of job ``check``, as the clean run is, so a trainer that seeds from its trial id seeds alike.

:func:`judge` says, in one line:

- a trial that could not start warm, and why (a thread in the launcher at the fork, CUDA initialised,
  the command's form): the warm backend's own reason;
- a warm run that failed where the fresh one did not;
- fresh runs that agree (a seeded trainer): the warm runs must report the same values at every step;
- fresh runs that differ (an unseeded trainer): the warm runs must differ from each other too, else
  the children share a random state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from trials import protocol
from trials.controller.backend.protocol import ReplicaHandle, ReplicaStart
from trials.controller.check.scorecard import Line, SeenReport, Verdict
from trials.controller.check.seen import read_reports
from trials.controller.process.host import HostBackend
from trials.controller.warm.backend import WarmBackend
from trials.spec.model import JobSpec, Value

CHECK = "warm start"
RULE = ("--warm-start forks each trial from a launcher that imported the trainer's modules: a trial must "
        "report what a fresh process reports")
N_RUNS = 3  # the survey (fresh), then two warm


@dataclass(slots=True, kw_only=True)
class WarmRun:
    """One of the probe's runs."""

    warm: bool
    exit_code: int | None
    reports: list[SeenReport] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class WarmSeen:
    runs: list[WarmRun] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # the warm backend's reasons for running fresh
    skipped: str = ""  # why the probe did not run


class _Recording:
    """The warm backend as the loop sees it for one job: its starts are noted; closing a job's run closes
    the host backend's part only (the launcher serves the next job)."""

    def __init__(self, warm: WarmBackend, host: HostBackend, said: list[str]):
        self.warm = warm
        self.host = host
        self.said = said
        self.starts: list[tuple[ReplicaStart, ReplicaHandle, bool]] = []

    def open(self, say: Callable[[str], None]) -> None:
        def both(line: str) -> None:
            if line.startswith("--warm-start"):
                self.said.append(line)
            say(line)

        self.warm.open(both)

    def start(self, request: ReplicaStart) -> ReplicaHandle:
        handle = self.warm.start(request)
        self.starts.append((request, handle, self.warm.ran_warm(handle)))
        return handle

    def check_memory(self) -> None:
        self.warm.check_memory()

    def close(self) -> None:
        self.host.close()


def run_warm(job: JobSpec, params: Mapping[str, Value], *, folder: str, host: HostBackend,
             run_job: Callable[[JobSpec, str, _Recording], str], say: Callable[[str], None] = lambda _m: None,
             ) -> WarmSeen:
    """The probe's runs (``run_job(one-trial job, root, backend)`` runs one, returning its state)."""
    seen = WarmSeen()
    warm = WarmBackend(host, host, job_dir=folder)
    record = _Recording(warm, host, seen.said)
    try:
        for n in range(1, N_RUNS + 1):
            what = "fresh: the launcher learns its modules" if n == 1 else "forked from the launcher"
            say(f"warm-start probe: run {n} of {N_RUNS}, {what}")
            before = len(record.starts)
            run_job(job, os.path.join(folder, f"warm-{n}"), record)
            if len(record.starts) == before:
                seen.runs.append(WarmRun(warm=False, exit_code=None))
                continue
            request, handle, forked = record.starts[before]
            ended = handle.poll()
            seen.runs.append(WarmRun(warm=forked, exit_code=None if ended is None else ended.status,
                                     reports=read_reports(request.env.get(protocol.ENV_METRIC_FILE, ""))))
    finally:
        warm.close()
    return seen


def _values(reports: Sequence[SeenReport]) -> list[tuple[str, int | None, float]]:
    return [(r.tag, r.step, r.value) for r in reports]


def _first_difference(a: Sequence[SeenReport], b: Sequence[SeenReport]) -> str:
    for x, y in zip(a, b, strict=False):
        if (x.tag, x.step, x.value) != (y.tag, y.step, y.value):
            return f"{x.tag} at step {x.step}: {y.value!r} warm, {x.value!r} fresh"
    return f"{len(b)} reports warm, {len(a)} fresh"


def judge(seen: WarmSeen, clean: Sequence[SeenReport] | None) -> Line:
    """The probe's one line (pure). ``clean``: the clean run's reports when it ended on its own with 0."""
    if seen.skipped:
        return Line(check=CHECK, verdict=Verdict.SKIP, seen=seen.skipped, rule=RULE)
    runs = seen.runs
    if len(runs) < N_RUNS:
        return Line(check=CHECK, verdict=Verdict.SKIP, seen="the probe's runs did not all start", rule=RULE)
    fresh, forked = runs[0], runs[1:]
    if fresh.exit_code != 0:
        return Line(check=CHECK, verdict=Verdict.SKIP, rule=RULE,
                    seen=f"the fresh run exited {fresh.exit_code}: nothing to compare the warm runs with")
    cold = [i + 2 for i, r in enumerate(forked) if not r.warm]
    if cold:
        why = "; ".join(line.removeprefix("--warm-start: ") for line in dict.fromkeys(seen.said)) or "no reason"
        return Line(check=CHECK, verdict=Verdict.FAIL, seen=f"run {cold[0]} could not start warm: {why}",
                    fix="run without --warm-start, or keep the trainer's imports free of threads and CUDA",
                    rule=RULE)
    failed = [(i + 2, r.exit_code) for i, r in enumerate(forked) if r.exit_code != 0]
    if failed:
        return Line(check=CHECK, verdict=Verdict.FAIL, rule=RULE,
                    seen=f"warm run {failed[0][0]} exited {failed[0][1]} where the fresh run exited 0",
                    fix="run without --warm-start (a warm trial that fails runs again fresh: twice the time)")
    references = [fresh.reports] + ([list(clean)] if clean is not None else [])
    seeded = all(_values(r) == _values(fresh.reports) for r in references)
    n = len(fresh.reports)
    if seeded:
        wrong = next((r for r in forked if _values(r.reports) != _values(fresh.reports)), None)
        if wrong is None:
            return Line(check=CHECK, verdict=Verdict.PASS, rule=RULE,
                        seen=f"the same trial reported the same {n} values fresh ({len(references)} runs) and "
                             f"warm ({len(forked)} runs); forked with no thread in the launcher")
        return Line(check=CHECK, verdict=Verdict.FAIL, rule=RULE,
                    seen=f"fresh runs agree, a warm one differs: {_first_difference(fresh.reports, wrong.reports)}",
                    fix="something read at import is frozen in the launcher (an environment variable, a file, "
                        "a generator's state): read it in the trainer's own code, or run without --warm-start")
    if _values(forked[0].reports) == _values(forked[1].reports):
        return Line(check=CHECK, verdict=Verdict.FAIL, rule=RULE,
                    seen="fresh runs differ (the trainer is not seeded), but the two warm runs reported the same "
                         "values: the children share a random state",
                    fix="seed the trainer (its results are then comparable), or run without --warm-start")
    return Line(check=CHECK, verdict=Verdict.INFO, rule=RULE,
                seen="values differ from run to run, fresh as warm (the trainer is not seeded): each warm run "
                     "drew its own random numbers; seed it to compare warm and fresh value by value")

"""A scripted replica backend for the job loop's replay tests: replicas that report and exit as a
:class:`Script` says, on a fake clock, with fake stop signals; no subprocess, no sleep."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trials import protocol
from trials.controller.backend.protocol import ReplicaExit, ReplicaStart
from trials.controller.backend.stopping import StopSteps


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_800_000_000.0 + self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class FakeSignals:
    """Waiting advances the clock; ``at`` delivers signals or runs hooks at given times."""

    def __init__(self, clock: FakeClock, at: list[tuple[float, Any]] | None = None):
        self.clock = clock
        self.at = sorted(at or [], key=lambda item: item[0])
        self.on_stop: Callable[[int], None] | None = None

    def install(self, on_stop: Callable[[int], None]) -> Callable[[], None]:
        self.on_stop = on_stop
        return lambda: None

    def wait(self, timeout: float, fds: Sequence[int] = ()) -> None:
        self.clock.t += timeout
        while self.at and self.at[0][0] <= self.clock.t - 1000.0:
            _, what = self.at.pop(0)
            if callable(what):
                what()
            else:
                assert self.on_stop is not None
                self.on_stop(what)


@dataclass
class Script:
    """What one attempt of a replica does, in seconds of the fake clock since it started."""

    steps: int = 3
    step_s: float = 1.0
    exit_code: int = 0  # after the last step
    crash_at_step: int | None = None  # exits with crash_code instead of reporting this step
    crash_code: int = 139
    exit_on_poll: int | None = None  # exits with crash_code just before its n-th poll sees it
    on_term: str = "exit"  # "exit": exits at once (with term_code); "ignore": only SIGKILL ends it
    term_code: int = 143
    oom_at_step: int | None = None  # killed over its memory limit instead of reporting this step (137)
    leftovers: tuple[str, ...] = ()  # what it leaves running when it exits (killed by its stop steps)
    placement: dict[str, str] = field(default_factory=dict)
    offset: float = 0.0  # added to every reported value
    first_step: int = 1  # the global_step of its first report (a trainer resuming from a checkpoint)
    tag: str = "loss"  # the metric tag it reports (another than the spec's: every trial is infeasible)
    cap: int | None = None  # its metric file keeps only its last `cap` reports (cloudml-hypertune: 100)
    torn_s: float = 0.0  # the file is in the middle of a rewrite (torn) the first torn_s of every second


@dataclass(eq=False)
class FakeReplica(StopSteps):
    """A scripted replica: the shared stop steps, with signals that only go in ``signals``."""

    clock: FakeClock
    name: str
    env: dict[str, str]
    script: Script
    start: float = 0.0
    returncode: int | None = None
    exited_mono: float | None = None  # the exit's own time, where the script says it (else the poll's)
    oom_killed: bool = False
    killed: bool = False  # SIGKILL ended it
    signals: list[int] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)
    n_polls: int = 0
    kill_every_s = 0.0

    def __post_init__(self) -> None:
        self.start = self.clock.t

    @property
    def upper_dir(self) -> str | None:
        return None

    def _run(self) -> None:
        """Catch up with the clock: report the steps that came due, exit when the script says."""
        s = self.script
        elapsed = self.clock.t - self.start
        due = min(s.steps, int(elapsed / s.step_s + 1e-9))
        for step in range(len(self.reports) + 1, due + 1):
            if step == s.oom_at_step:
                self.returncode, self.oom_killed = 137, True
                return
            if step == s.crash_at_step:
                self.returncode = s.crash_code
                return
            self._report(step + s.first_step - 1)
        if s.torn_s and self.reports:
            self._write()  # torn or whole, as the clock now says
        if due == s.steps and self.name.endswith("-0"):
            self.returncode = s.exit_code
            # what the SIGCHLD handler notes (exit_times): the exit's own time, however late the poll
            self.exited_mono = self.clock.monotonic() - (elapsed - s.steps * s.step_s)

    def _report(self, step: int) -> None:
        x = float(self.env.get("X", "0.5"))
        value = s_value(x, step, self.script.offset)
        self.reports.append(json.dumps({self.script.tag: str(value), "global_step": str(step),
                                        "timestamp": self.clock.wall(), "trial": self.env[protocol.ENV_TRIAL_ID],
                                        "checkpoint_path": ""}))
        self._write()

    def _write(self) -> None:
        s = self.script
        text = "\n".join(self.reports[-s.cap:] if s.cap else self.reports) + "\n"
        if s.torn_s and self.clock.t % 1.0 < s.torn_s - 1e-9:
            text = text[: len(text) // 2 + 7]  # what a reader sees between the truncation and the last write
        Path(self.env[protocol.ENV_METRIC_FILE]).write_text(text)

    def poll(self) -> ReplicaExit | None:
        self.n_polls += 1
        if self.returncode is None and self.script.exit_on_poll == self.n_polls:
            self.returncode = self.script.crash_code  # exited since the last poll
        if self.returncode is None:
            self._run()
        if self.returncode is None:
            return None
        if self.exited_mono is None:
            self.exited_mono = self.clock.monotonic()  # seen now: the loop's clock
        left = self.script.leftovers if self.stop_requested_at is not None else ()  # killed by the stop steps
        if self.killed:
            return ReplicaExit.of_returncode(-signal.SIGKILL, exited_mono=self.exited_mono, leftovers=left)
        return ReplicaExit.of_status(self.returncode, exited_mono=self.exited_mono, oom=self.oom_killed,
                                     leftovers=left, placement=self.script.placement)

    def deliver_term(self) -> None:
        if self.returncode is None:
            self.signals.append(signal.SIGTERM)
            if self.script.on_term == "exit":
                self.returncode = self.script.term_code

    def send_signal_group(self, sig: int) -> None:
        self.signals.append(sig)
        if sig == signal.SIGKILL and self.returncode is None:
            self.returncode, self.killed = 137, True

    def record(self) -> dict[str, Any] | None:
        return {"name": self.name, "pid": 1_000_000, "pgid": 1_000_000, "start_time": None}

    def close(self) -> None:
        pass


def s_value(x: float, step: int, offset: float = 0.0) -> float:
    return offset + (x - 0.3) ** 2 + 1.0 / (step + 1)


class FakeBackend:
    """Starts scripted replicas on the fake clock; ``plan(trial_id, attempt)`` gives each attempt's script."""

    def __init__(self, clock: FakeClock, plan: Callable[[str, int], Script]):
        self.clock = clock
        self.plan = plan
        self.started: list[FakeReplica] = []
        self.opened = self.closed = 0

    def open(self, say: Callable[[str], None]) -> None:
        self.opened += 1

    def start(self, request: ReplicaStart) -> FakeReplica:
        x = next(a.split("=", 1)[1] for a in request.argv if a.startswith("--x="))
        script = self.plan(request.env[protocol.ENV_TRIAL_ID], int(request.env[protocol.ENV_ATTEMPT]))
        replica = FakeReplica(self.clock, request.label, {**request.env, "X": x}, script)
        self.started.append(replica)
        return replica

    def check_memory(self) -> None:
        pass

    def close(self) -> None:
        self.closed += 1

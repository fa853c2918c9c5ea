"""In-process replicas: each replica attempt one call of the objective through the runtime (``trials.tune``).

With turns (a job with a stopping rule: the loop must see every step), the call runs in its own
thread, and it and the loop never run at the same time. The objective runs only while the loop waits
in :meth:`InProcessReplica.poll` (or :meth:`~InProcessReplica.advance_stop`): from where it was to its
next report, or to its end. Then it waits in its report hook while the loop makes one pass over the
trial: it reads the step the objective just wrote, applies the stopping rule, maybe asks it to stop.
So the loop sees every step as it is reported, a stop decision reaches the objective before its next
step, and nothing waits on a timer: a trial costs what its objective costs plus a thread switch per
report (tens of microseconds on an idle machine; a scheduler's time slice on a busy one).

Without turns (no stopping rule: nothing is decided while a trial runs), the whole call runs inside
:meth:`InProcessBackend.start`, in the caller's own thread, and the replica has exited when the loop
first polls it: no thread, no switch, the objective where it would be in a plain call.

Nothing can be killed in-process. A stop is a request (``ctx.request_stop``), which the runtime
honours at the objective's next step or ``should_stop``; an objective that never looks keeps its
thread until it returns. What a replica leaves when the job ends early (an error, Ctrl-C in the
caller) is released: asked to stop, it runs on alone to its next step, on a daemon thread. A
``KeyboardInterrupt`` ends the job, raised in the caller, whichever thread it reached.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
import time
import traceback
from collections.abc import Callable

from trials import files, protocol
from trials.controller.backend.protocol import ReplicaExit, ReplicaStart
from trials.controller.backend.stopping import StopSteps
from trials.errors import ConfigError
from trials.runtime import entrypoint
from trials.runtime.context import RunOptions, TrialContext
from trials.runtime.objective import TrialOutcome, failure_summary
from trials.spec import StudySpec

# argv[0] of an in-process replica, where a host replica has its program: the objective is the
# program here, so the backend drops it; the flags (the job's args, then --<parameterId>=<value>) follow
COMMAND = "trials.tune"
STOP_REASON = "stop requested by the job"  # what ``ctx.stop_reason`` says (the runtime logs it)
_OBJECTIVE, _LOOP = "objective", "loop"  # whose turn it is


def exit_status(code: int, *, stop_requested: bool) -> int:
    """The Vertex-style status the loop's exit rules read for an objective's call that ended with ``code`` (pure).

    On a host, an exit that is not a user error is worth another attempt (a preempted worker, a
    segfault). In-process there is no such thing, and the same call would end the same way again, so
    no status may restart it:

    - 0, 1 (the objective raised) and 2 (bad flags): as they are (1 and 2 are permanent failures);
    - 75 (stopped on request): as it is when the loop asked (a stop it asked for); when it did not,
      the objective stopped itself (``ctx.request_stop`` of its own): it ended as it chose, 0;
    - any other code (``sys.exit(3)``, 130 from a ``KeyboardInterrupt`` raised in the objective): 1.
    """
    if code == protocol.EXIT_STOPPED:
        return code if stop_requested else protocol.EXIT_OK
    if code in (protocol.EXIT_OK, protocol.EXIT_ERROR, protocol.EXIT_USAGE):
        return code
    return protocol.EXIT_ERROR


class InProcessReplica(StopSteps):
    """One replica attempt: one call of the objective, in its own thread taking turns with the job loop
    (``turns``), or whole inside :meth:`start`, in the caller's thread.

    Its stop steps are :class:`StopSteps`' with a stop request for every signal: nothing can be killed
    in-process, and an objective that never looks at ``should_stop`` runs to its end.

    Attributes:
        outcome: how the call ended (the runtime's ``TrialOutcome``: exit code, exception), None while it runs.
    """

    def __init__(self, *, name: str, call: Callable[[Callable[[TrialContext], None]], TrialOutcome],
                 clock: Callable[[], float], stderr_path: str, thread_name: str, turns: bool = True):
        self.name = name
        self.exited_mono: float | None = None
        self.outcome: TrialOutcome | None = None
        self._call = call
        self._clock = clock
        self._stderr_path = stderr_path
        self._cond = threading.Condition()
        self._turn = _LOOP  # the objective waits for its first turn (the loop's first poll)
        self._released = False  # no more turns: the objective runs on alone
        self._ctx: TrialContext | None = None
        self._interrupt: BaseException | None = None  # a KeyboardInterrupt not raised in the caller yet
        self._thread: threading.Thread | None = None
        if turns:
            context = contextvars.copy_context()  # the caller's context variables, as in a plain call
            self._thread = threading.Thread(target=context.run, args=(self._main,), name=thread_name, daemon=True)

    def start(self) -> None:
        """Start the call's thread (it waits for the loop's first poll), or, without turns, make the whole call.

        Raises:
            KeyboardInterrupt: Ctrl-C during a call made here (the job ends: nothing is recorded of it).
        """
        if self._thread is not None:
            self._thread.start()
            return
        self._end(self._run())
        self._raise_interrupt()

    # ------------------------------------------------------------------ the call
    def _run(self) -> TrialOutcome:
        try:
            outcome = self._call(self._on_context)
        except BaseException as err:  # noqa: BLE001 - the runtime never raises for the objective; if it does, the trial fails
            outcome = TrialOutcome(protocol.EXIT_ERROR, error=err)
        self._log_failure(outcome)
        return outcome

    def _end(self, outcome: TrialOutcome) -> None:
        with self._cond:
            self.outcome = outcome
            self.exited_mono = self._clock()
            if isinstance(outcome.error, KeyboardInterrupt):
                self._interrupt = outcome.error
            self._turn = _LOOP
            self._cond.notify_all()

    def _raise_interrupt(self) -> None:
        """A KeyboardInterrupt the call ended with is the caller's: raised once, where the loop runs."""
        interrupt, self._interrupt = self._interrupt, None
        if interrupt is not None:
            raise interrupt

    def _main(self) -> None:
        """The call's thread: it waits for its first turn."""
        with self._cond:
            while self._turn == _LOOP and not self._released:
                self._cond.wait()
            started = self._turn == _OBJECTIVE
        # released before its first turn (the job ended first): never called
        self._end(self._run() if started else TrialOutcome(protocol.EXIT_STOPPED))

    def _on_context(self, ctx: TrialContext) -> None:
        with self._cond:
            self._ctx = ctx
            if self._stop_requested_at is not None:
                ctx.request_stop(STOP_REASON)
        if self._thread is not None:
            ctx.on_report = self._on_report

    def _on_report(self, ctx: TrialContext, step: int, metrics: dict[str, float]) -> None:
        """After each report (written to the metric files): the loop's turn, until it gives this one back."""
        with self._cond:
            if self._released:
                return
            self._turn = _LOOP
            self._cond.notify_all()
            while self._turn == _LOOP and not self._released:
                self._cond.wait()

    def _log_failure(self, outcome: TrialOutcome) -> None:
        """Append to the replica's stderr log what a host replica's would end with: the exception's
        traceback (the loop quotes its summary in the trial's local view). Its other output went to
        this process's own streams."""
        err = outcome.error
        if err is None or outcome.exit_code in (protocol.EXIT_OK, protocol.EXIT_STOPPED):
            return
        if outcome.exit_code == protocol.EXIT_ERROR and err.__traceback__ is not None:
            text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        else:
            text = failure_summary(err) + "\n"
        with contextlib.suppress(OSError):  # the log is a copy: the trial fails all the same
            files.append_bytes(self._stderr_path, text.encode("utf-8", "replace"))

    # ------------------------------------------------------------------ the loop's side
    def _step(self) -> None:
        """Give the objective its turn, to its next report or its end (the caller holds the lock)."""
        if self.outcome is not None or self._released:
            return
        self._turn = _OBJECTIVE
        self._cond.notify_all()
        try:
            while self._turn == _OBJECTIVE:
                self._cond.wait()
        except BaseException:  # KeyboardInterrupt in the caller's thread: the objective cannot get it
            self._release(STOP_REASON)
            raise

    def _release(self, reason: str) -> None:
        """No more turns: ask the objective to stop and let it run on alone (the caller holds the lock)."""
        self._released = True
        if self._stop_requested_at is None:
            self._stop_requested_at = self._clock()
        if self._ctx is not None:
            self._ctx.request_stop(reason)
        self._cond.notify_all()

    @property
    def upper_dir(self) -> str | None:
        return None  # it shares this process's folder

    def poll(self) -> ReplicaExit | None:
        """Let the objective run to its next report or its end; how it ended, else None.

        Raises:
            KeyboardInterrupt: the call ended with one (the job ends).
        """
        with self._cond:
            self._step()
            self._raise_interrupt()
            if self.outcome is None:
                return None
            assert self.exited_mono is not None
            status = exit_status(self.outcome.exit_code, stop_requested=self._stop_requested_at is not None)
            return ReplicaExit(status=status, exited_mono=self.exited_mono)

    def running(self) -> bool:
        """Let the objective run to its next report or its end; whether it runs on."""
        with self._cond:
            self._step()
            return self.outcome is None

    def begin_stop(self, now: float) -> float:
        """Ask the objective to stop (``ctx.request_stop``: at its next step or ``should_stop``)."""
        with self._cond:  # (the objective's thread reads it in ``_on_context``)
            return super().begin_stop(now)

    def deliver_term(self) -> None:
        """The stop request (the lock is held): the objective sees it at its next step or ``should_stop``."""
        if self._ctx is not None:
            self._ctx.request_stop(STOP_REASON)

    def send_signal_group(self, sig: int) -> None:
        """No signal reaches a call: any one (the loop's SIGKILL of a second Ctrl-C) is a stop request."""
        self.begin_stop(self._clock())

    def record(self) -> None:
        """Nothing: no process can outlive its controller here (no ``pids.json``)."""
        return None

    def close(self) -> None:
        """A replica closed before it ended (the job ended first) is released: asked to stop, it runs on alone."""
        with self._cond:
            if self.outcome is None:
                self._release(STOP_REASON)

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the call to end (tests); whether it did."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return self.outcome is not None


class InProcessBackend:
    """Replicas as calls of ``objective`` in this process (one at a time: the loop runs with ``slots=1``).

    Each call is ``trials.runtime.entrypoint.run`` with the replica's flags and environment, as
    ``trials-run`` would make it in a host replica, without signal handlers (they belong to the
    caller) or TensorBoard files.

    Args:
        objective: ``objective(config, ctx)`` or ``objective(ctx)``.
        Config: the dataclass of hyperparameters, or None.
        study: the spec the flags are checked against.
        options: the runtime's options for every call.
        turns: each call in its own thread, taking a turn per report (the loop sees every step: a job
            with a stopping rule); False: each whole call inside ``start``, in the caller's thread.
        clock: monotonic time, the loop's (for ``exited_mono``).
    """

    def __init__(self, objective: Callable[..., object], Config: type | None, *, study: StudySpec,
                 options: RunOptions, turns: bool = True, clock: Callable[[], float] = time.monotonic):
        self.objective = objective
        self.turns = turns
        self.Config = Config
        self.study = study
        self.options = options
        self.clock = clock
        # trial id -> its last attempt, until ``take_error`` (an exception holds its frames: take each)
        self._replicas: dict[str, InProcessReplica] = {}

    def open(self, say: Callable[[str], None]) -> None:
        """Nothing to set up: the calls share this process (its folder, its environment, its /gcs)."""

    def start(self, request: ReplicaStart) -> InProcessReplica:
        """Start one call (its thread waits for the loop's first poll), or, without turns, make it whole.

        Raises:
            ConfigError: the command is not :data:`COMMAND` (this backend runs no program).
            KeyboardInterrupt: Ctrl-C during a whole call made here.
        """
        if not request.argv or request.argv[0] != COMMAND:
            raise ConfigError(f"the in-process backend runs the objective, not a program: the command must be "
                              f"{COMMAND!r} and the flags, got {list(request.argv[:1])}")
        trial_id = request.env.get(protocol.ENV_TRIAL_ID) or request.name
        run = functools.partial(entrypoint.run, self.objective, self.Config, spec=self.study,
                                argv=list(request.argv[1:]), environ=dict(request.env), options=self.options,
                                prog=f"trial {trial_id}")

        def call(hook: Callable[[TrialContext], None]) -> TrialOutcome:
            return run(on_context=hook)

        replica = InProcessReplica(name=request.name, call=call, clock=self.clock, turns=self.turns,
                                   stderr_path=request.stderr_path, thread_name=f"trials.tune {request.label}")
        self._replicas[trial_id] = replica
        replica.start()
        return replica

    def take_error(self, trial_id: str) -> BaseException | None:
        """The exception the trial's last call ended with (None: it raised none); forgets the trial."""
        replica = self._replicas.pop(trial_id, None)
        if replica is None or replica.outcome is None:
            return None
        return replica.outcome.error

    def check_memory(self) -> None:
        """Nothing: the calls share this process's memory, no limit can be set on one of them."""

    def close(self) -> None:
        """Release every call that has not ended (the job ended first): each is asked to stop."""
        for replica in list(self._replicas.values()):
            replica.close()

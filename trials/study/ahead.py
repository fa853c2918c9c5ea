"""Suggestions made ahead of time, in a process of their own (``python -m trials.study.ahead``).

A model-based sampler (the GP, OSS Vizier) costs 0.1-0.5 s per suggestion and more as the study
grows; made in the job loop, every freed slot would wait for it and so would metric reading,
stopping and signals. Here the next trial's parameters are computed while trials run:

- after each launch the loop asks for the next suggestion (:meth:`AheadSuggester.prefetch`); the
  request carries the study's trials as they are now — the running ones too, which the samplers
  treat as pending (Optuna's GPSampler and our Vizier sampler both do, as Vizier's batch
  suggestions and Optuna's constant liar do) — so the suggestion is the one the sampler would make
  right after that launch, whatever the timing of the answer;
- a worker process holds the real sampler (torch, JAX and their memory stay out of the
  controller) over an in-memory mirror of those trials; it never touches the job's storage;
- when a slot frees, the loop takes the suggestion that is ready (:meth:`take`) and claims a
  WAITING trial with it in one write — unless results came since it was asked and the sampler is
  cheap beside the trials (:data:`FRESH_SHARE`): it is then made again with them (a suggestion made
  ahead costs the search: ``benchmarks/suggest_ahead.py``'s quality table); nothing is recorded
  before the claim, so a controller killed with a suggestion in hand loses nothing but that suggestion.

While fewer trials have finished (completed or stopped early: both teach the model, see
:func:`trials.study.npgp.stopped_as_values`) than the sampler's random start-up needs
(:func:`trials.study.choice.startup_trials`), a suggestion is a random one made in the loop at the claim
(what the sampler itself would do, without its process). A worker that fails or dies makes that one
trial random, with a warning; a dead worker is started again for the next suggestion,
at most :data:`MAX_RESTARTS` times.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import optuna
from optuna.trial import FrozenTrial, TrialState

from trials.spec import StudySpec, Value
from trials.study import choice
from trials.study import optuna_internals as internals
from trials.study.choice import AHEAD_SAMPLERS, MODEL, SUGGESTED_ATTR, WARM_UP, startup_trials

HEADER = struct.Struct("!Q")
_EARLY_LOG_MAX = 1 << 20  # what a worker started early printed before its job came, copied into the log
MAX_RESTARTS = 3
# What the mirror needs of a trial: the samplers that run ahead read the states, parameters and values
MIRRORED_STATES = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)
# A suggestion made ahead lacks the results that came since it was asked: when one came, it is made
# again with them — the slot waiting for it — if the sampler takes at most this share of the time the
# slot's trial ran (trials of minutes: always; trials of a second: never, the slot would idle)
FRESH_SHARE = 0.02


@dataclass(frozen=True, slots=True)
class Suggestion:
    """The next trial's parameters, or None: sample them in the loop at random (the sampler's start-up,
    a failed suggestion, or nothing left to suggest for)."""

    params: dict[str, Value] | None
    system_attrs: dict[str, Any] = field(default_factory=dict)  # what the sampler noted on the trial
    warning: str = ""  # said with the trial it is used for
    seconds: float = 0.0  # how long the worker took
    asked_at: float = 0.0  # (monotonic) when it was asked
    results: int = 0  # the finished trials it was made with
    fresh: bool = False  # asked when its slot was free: used as it is


def _frame(obj: Any) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def _stripped(t: FrozenTrial) -> FrozenTrial:
    """What the worker's mirror keeps of a trial (no attributes; of its intermediate values, a stopped
    trial's last one: where it stopped ranks it among the stopped trials)."""
    last = {}
    if t.state == TrialState.PRUNED and t.intermediate_values:
        step = max(t.intermediate_values)
        last = {step: t.intermediate_values[step]}
    return FrozenTrial(number=t.number, state=t.state, value=None,
                       values=list(t.values) if t.values is not None else None,
                       datetime_start=t.datetime_start, datetime_complete=t.datetime_complete,
                       params=dict(t.params), distributions=dict(t.distributions), user_attrs={},
                       system_attrs={}, intermediate_values=last, trial_id=internals.storage_id(t))


def _fingerprint(t: FrozenTrial) -> tuple[Any, ...]:
    return (t.state, tuple(t.values) if t.values is not None else None, tuple(sorted(t.params.items())))


class AheadSuggester:
    """The controller's side: one worker process, at most one suggestion in flight or ready.

    Args:
        store: the job's :class:`~trials.study.store.JobStore` (its trials are the snapshot);
        study: the study spec; ``sampler_name``/``seed``: the sampler the worker builds;
        log_path: the worker's stderr (Optuna's warnings, a traceback if it dies).
    """

    def __init__(self, store: Any, study: StudySpec, *, sampler_name: str, seed: int | None, log_path: str,
                 directions: list[optuna.study.StudyDirection], depth: int = 1, n_startup: int | None = None):
        self.store = store
        self.study = study
        self.sampler_name = sampler_name
        self.seed = seed
        self.n_startup = AHEAD_SAMPLERS[sampler_name] if n_startup is None else n_startup
        self.log_path = log_path
        self.directions = directions
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = bytearray()
        self._sent: dict[int, tuple[Any, ...]] = {}
        self._seq = 0
        self._inflight: int | None = None  # the seq of the request the worker works on
        self._ready: Suggestion | None = None
        self._spare: list[Suggestion] = []  # made ahead after the next one, with it pending
        self._refill = False  # an answer came: a spare may be asked
        self.depth = depth  # how many suggestions may be ready at once (the slots that may free together)
        self._restarts = 0
        self._started_once = False
        self._said_gave_up = False
        self._asked_at = 0.0
        self._results = 0  # the finished trials the request in flight carries
        self._fresh = False  # it was asked for a free slot
        self.n_model = 0  # suggestions the worker made
        self.worker_seconds = 0.0  # their total time in the worker
        self.worker_cpu_s = 0.0  # the workers' CPU (imports, warm-up, suggestions), as their last answers said
        self._cpu_before = 0.0  # (that of the workers before a restart)

    # -- the loop's side
    def prefetch(self, *, needed: bool = False) -> None:
        """Ask for the next suggestion now, from the trials as they are (a no-op if one is asked or ready).

        During the sampler's random start-up nothing is asked ahead: the trial is random if it is
        still in the start-up when its slot frees (``needed``: now), as the sampler itself decides
        at the claim; so the first model-based trial is the one the sampler's rule says, its slot
        waiting for that one suggestion.
        """
        if self._inflight is not None:
            return
        if self._ready is not None and (needed or self._ready.params is None or 1 + len(self._spare) >= self.depth):
            return  # (the next one is ready: a spare only if more slots may free before a launch)
        pending = [r.params for r in (self._ready, *self._spare) if r is not None and r.params is not None]
        waiting = self.store.waiting_running()[0]
        if waiting <= len(pending):  # (a database: one count query)
            if needed and not pending:
                self._ready = Suggestion(None)  # nothing to suggest for: the loop's claim finds none
            return
        mirrored = self.store.frozen_trials(MIRRORED_STATES)
        self._results = sum(t.state != TrialState.RUNNING for t in mirrored)
        self._fresh = needed
        self._start_when_due(mirrored)
        if sum(t.state != TrialState.RUNNING for t in mirrored) < self.n_startup:  # (completed or stopped)
            if needed:
                self._ready = Suggestion(None)  # the sampler's random start-up: made in the loop
            return
        if not self._ensure_worker():
            self._ready = Suggestion(None, warning=self._gave_up())  # said once: then random, silently
            return
        now = {t.number: _fingerprint(t) for t in mirrored}
        changed = [_stripped(t) for t in mirrored if self._sent.get(t.number) != now[t.number]]
        dropped = [n for n in self._sent if n not in now]
        self._seq += 1
        try:
            self._write({"seq": self._seq, "trials": changed, "dropped": dropped, "pending": pending})
        except OSError:
            self._worker_died()
            return
        self._sent = now
        self._inflight, self._asked_at = self._seq, time.monotonic()

    def take(self) -> Suggestion | None:
        """The suggestion for the trial about to be claimed, or None while the worker still works.

        A suggestion asked ahead is asked again, with the results that came since, when the sampler
        is cheap beside the trials (:data:`FRESH_SHARE`): the slot then waits for that one.
        """
        if self._ready is None and self._inflight is not None:
            self._read_answers()
        ready, self._ready = self._ready, (self._spare.pop(0) if self._spare else None)
        if ready is not None and ready.params is not None and not ready.fresh and self._stale_and_affordable(ready):
            self._spare.clear()  # made before the same results: made again too
            self._ready = None
            self.prefetch(needed=True)
            if self._ready is not None:  # (could not ask: the one in hand is as good as any)
                self._ready = None
                return ready
            return None
        return ready

    def _stale_and_affordable(self, ready: Suggestion) -> bool:
        ran = time.monotonic() - ready.asked_at  # about how long the slot's trial ran since it was asked
        if ready.seconds > FRESH_SHARE * ran:
            return False
        counts: dict[TrialState, int] = self.store.counts()
        return counts.get(TrialState.COMPLETE, 0) + counts.get(TrialState.PRUNED, 0) > ready.results

    def give_back(self, suggestion: Suggestion) -> None:
        """A suggestion taken for a claim that found no trial to claim: it is the next one again."""
        if self._ready is not None:
            self._spare.insert(0, self._ready)
        self._ready = suggestion

    def pump(self) -> None:
        """Each pass of the loop: read an answer that came, and ask for a spare suggestion after it (up to
        ``depth`` ready, each made with those before it pending: slots that free together wait for none)."""
        if self._inflight is not None:
            self._read_answers()
        if self._refill and self._inflight is None:
            self._refill = False
            self.prefetch()

    def fileno(self) -> int | None:
        """The worker's answer pipe while a suggestion is in flight (for the loop's wait)."""
        if self._inflight is None or self._proc is None or self._proc.stdout is None:
            return None
        return self._proc.stdout.fileno()

    def stats(self) -> dict[str, float]:
        """What the job records of its model's suggestions (job meta): how many, and the worker's CPU."""
        if not self.n_model:
            return {}
        return {"suggestions": self.n_model, "suggest_cpu_s": round(self.worker_cpu_s, 3)}

    def close(self) -> None:
        """Stop the worker (a suggestion in flight is dropped: nothing was recorded for it)."""
        busy, self._inflight = self._inflight is not None, None
        self._spare.clear()
        self._reap(wait_s=0.0 if busy else 1.0)  # idle, it exits at the end of its input

    # -- the worker process
    def _start_when_due(self, mirrored: list[FrozenTrial]) -> None:
        """Start the worker with the job (when it has more trials than the random start-up): its
        imports and warm-up (torch: seconds of CPU, at a low priority so the trials go first) run
        while the start-up trials do, so the first model-based trial does not wait for them (started
        at half the start-up, the first one waited 2.5 s of a 13 s job with 2 slots)."""
        if self._proc is None and self._restarts == 0 and not self._started_once:
            self.start()

    def _ensure_worker(self) -> bool:
        if self._proc is not None and self._proc.poll() is None:
            return True
        if self._proc is not None:
            self._reap()
        if self._restarts > MAX_RESTARTS:
            return False
        self.start()
        return self._proc is not None

    def start(self) -> None:
        """Start the worker now (its imports take a second or two: done while the first trials run), or
        take the one ``trials sweep`` started ahead of the job (:mod:`trials.study.choice`)."""
        if self._proc is not None:
            return
        self._started_once = True
        self._cpu_before = self.worker_cpu_s
        self._proc = choice.take(self.sampler_name)
        if self._proc is None:
            from trials.files import open_log

            try:  # (a symlink or FIFO planted as the log is replaced, never followed or blocked on)
                log = open_log(self.log_path)
                try:
                    self._proc = choice.spawn(self.sampler_name, log)
                finally:
                    os.close(log)
            except OSError:
                self._proc = None
                self._restarts += 1
                return
        self._buf.clear()
        self._sent = {}
        try:
            self._write({"init": True, "study": self.study, "sampler": self.sampler_name, "seed": self.seed,
                         "directions": self.directions, "log": self.log_path, "n_startup": self.n_startup})
        except OSError:
            self._worker_died()

    def _write(self, message: Mapping[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(_frame(dict(message)))
        self._proc.stdin.flush()

    def _read_answers(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self._worker_died()
                return
            self._buf += chunk
        while len(self._buf) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buf)
            if len(self._buf) < HEADER.size + size:
                break
            answer = pickle.loads(bytes(self._buf[HEADER.size:HEADER.size + size]))
            del self._buf[:HEADER.size + size]
            if answer.get("seq") != self._inflight:
                continue  # (an answer to a request dropped by close: none is read after one)
            self._inflight = None
            self.worker_seconds += float(answer.get("seconds", 0.0))
            self.worker_cpu_s = self._cpu_before + float(answer.get("cpu_s", 0.0))
            if answer.get("error"):
                if self._ready is None:  # (a spare that failed is not made: the next one is asked when due)
                    self._ready = Suggestion(None, warning=f"the sampler failed ({answer['error']}); its "
                                                           f"parameters were sampled at random")
            else:
                self.n_model += 1
                made = Suggestion(dict(answer["params"]), {**(answer.get("system_attrs") or {}), SUGGESTED_ATTR: MODEL},
                                  seconds=float(answer.get("seconds", 0.0)), asked_at=self._asked_at,
                                  results=self._results, fresh=self._fresh)
                if self._ready is None:
                    self._ready = made
                else:
                    self._spare.append(made)
                self._refill = not self._fresh

    def _reap(self, wait_s: float = 5.0) -> int | None:
        """End the worker: its input closed, it exits; killed if it has not within ``wait_s``."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        return choice.close(proc, wait_s)

    def _worker_died(self) -> None:
        status = self._reap()
        self._restarts += 1
        self._inflight = None
        how = f"exited with status {status}" if status is not None and status >= 0 else (
            f"was killed by signal {-status}" if status is not None else "could not be started")
        self._ready = Suggestion(None, warning=(
            f"the sampler's process {how} (its log: {self.log_path}); these parameters were sampled at "
            f"random" + ("" if self._restarts <= MAX_RESTARTS else "; no more model-based suggestions")))

    def _gave_up(self) -> str:
        if self._said_gave_up:
            return ""
        self._said_gave_up = True
        return (f"the sampler's process failed {self._restarts} times (its log: {self.log_path}); the "
                f"parameters are sampled at random from now on")


def for_job(store: Any, study: StudySpec, *, sampler_name: str, seed: int | None,
            job_dir: str, n_trials: int, depth: int = 1) -> AheadSuggester | None:
    """The job's ahead suggester when its sampler runs ahead, else None (the loop samples as before).

    The store's own sampler becomes a seeded random one: the loop samples with it only the start-up
    trials and those whose suggestion failed. The start-up is the store's (``n_startup``, as the job was
    created: :func:`~trials.study.choice.startup_trials` of its trials). The worker starts with the job, if
    the job has more trials than its start-up.
    """
    if sampler_name not in AHEAD_SAMPLERS:
        return None
    directions = list(store.study.directions)
    ahead = AheadSuggester(store, study, sampler_name=sampler_name, seed=seed, directions=directions,
                           log_path=os.path.join(job_dir, "sampler.log"), depth=depth,
                           n_startup=min(AHEAD_SAMPLERS[sampler_name], getattr(store, "n_startup", None)
                                         or startup_trials(n_trials, sampler_name)))
    store.study.sampler = optuna.samplers.RandomSampler(seed=seed)
    if n_trials > ahead.n_startup:
        ahead._start_when_due(store.frozen_trials(MIRRORED_STATES))
    else:
        ahead._started_once = True  # (the start-up is the whole job: never started, unless asked for)
    return ahead


# --- the worker -----------------------------------------------------------------------------------
def _read(stream: BinaryIO) -> Any:
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)


class _MirrorStorage(optuna.storages.InMemoryStorage):
    """The in-memory study a suggestion is made over, rebuilt for each one from the mirror's trials."""

    def __init__(self) -> None:
        super().__init__()
        self._shallow = internals.has_internals(self, "InMemoryStorage")  # (another Optuna's: its way)

    def add_copy(self, study_id: int, template: FrozenTrial) -> None:
        """``create_new_trial(study_id, template_trial=template)`` without its deep copy (a third of a
        suggestion's time at 300 trials): a shallow copy takes the new number and id, and what it shares
        with the mirror is never written (the sampler writes to the trial it samples, a new one)."""
        if not self._shallow:
            self.create_new_trial(study_id, template_trial=template)
            return
        internals.add_trial_copy(self, study_id, template)


def _suggest_one(sampler: optuna.samplers.BaseSampler, directions: list[Any], study: StudySpec,
                 mirror: Mapping[int, FrozenTrial], pending: Sequence[Mapping[str, Value]] = ()
                 ) -> tuple[dict[str, Value], dict[str, Any]]:
    """The next trial's parameters over ``mirror``, with ``pending`` (suggestions made, not yet claimed)
    as running trials."""
    from trials.study.space import fixed_params, suggest

    storage = _MirrorStorage()
    study_id = storage.create_new_study(directions, "ahead")
    for number in sorted(mirror):
        storage.add_copy(study_id, mirror[number])
    mirror_study = optuna.Study(study_name="ahead", storage=storage, sampler=sampler)
    for params in pending:
        tid = storage.create_new_trial(study_id)
        storage.set_trial_system_attr(tid, internals.FIXED_PARAMS_ATTR, fixed_params(study, params))
        suggest(optuna.Trial(mirror_study, tid), study)  # (fixed: the sampler is not asked)
    trial_id = storage.create_new_trial(study_id)
    params = suggest(optuna.Trial(mirror_study, trial_id), study)
    return params, dict(storage.get_trial_system_attrs(trial_id))


def _orphan_watch(parent: int) -> None:
    """A controller killed outright cannot close our input while a suggestion runs (OSS Vizier's take
    minutes): once it is gone, end this process group (the worker and what it started) at once."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.killpg(0, signal.SIGKILL)


def _import_sampler(name: str) -> None:
    """Import what the sampler ``name`` suggests with (SciPy's optimize, torch for Optuna's own GP)."""
    for module in WARM_UP.get(name, ()):
        importlib.import_module(module)
    if name == "gp-warped":
        importlib.import_module("trials.study.warped_gp")


def _log_to(path: str) -> None:
    """From now on what the worker prints goes to its job's log, after what it printed before its job came
    (a worker started ahead of its job printed to a temporary file); a log that cannot be opened leaves it."""
    import stat

    from trials.files import open_log

    try:  # (a symlink or FIFO planted as the log is replaced, never followed or blocked on)
        fd = open_log(path)
    except OSError:
        return
    sys.stderr.flush()
    with contextlib.suppress(OSError):
        early, log = os.fstat(2), os.fstat(fd)
        if stat.S_ISREG(early.st_mode) and (early.st_dev, early.st_ino) != (log.st_dev, log.st_ino):
            os.lseek(2, 0, os.SEEK_SET)
            left = _EARLY_LOG_MAX
            while left > 0 and (chunk := os.read(2, min(left, 1 << 16))):
                os.write(fd, chunk)
                left -= len(chunk)
    os.dup2(fd, 2)
    os.dup2(fd, 1)
    os.close(fd)


def _warm_up(init: Mapping[str, Any]) -> None:
    """Import the model's packages and make one throwaway suggestion now, while the random start-up
    trials run: a GP's first fit in a process costs several times a later one. A sampler of its
    own (seeded apart) on random trials: the job's sampler and its random state are not touched."""
    _import_sampler(init["sampler"])
    from trials.study.samplers import make_sampler
    from trials.study.space import suggest

    with contextlib.suppress(Exception):  # a warm-up that fails changes nothing: the real suggestion will say
        scratch = optuna.create_study(directions=init["directions"], sampler=optuna.samplers.RandomSampler(seed=0))
        for i in range(AHEAD_SAMPLERS[init["sampler"]] + 1):
            trial = scratch.ask()
            suggest(trial, init["study"])
            scratch.tell(trial, [float(i % 3)] * len(init["directions"]))
        mirror = {t.number: t for t in scratch.get_trials(deepcopy=False)}
        _suggest_one(make_sampler(init["sampler"], seed=0), init["directions"], init["study"], mirror)


def main() -> int:
    """The worker: an init message, then one suggestion per request until its input ends."""
    from trials.study.samplers import make_sampler
    from trials.study.storage import quiet_optuna

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's: it closes our input
    parent = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else os.getppid()
    threading.Thread(target=_orphan_watch, args=(parent,), daemon=True).start()  # (gone before we looked: ends now)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever prints goes to the log, not into the answers
    named = sys.argv[2] if len(sys.argv) > 2 else None  # the sampler: its libraries load before the job comes
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    if named in WARM_UP:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, niceness + 10)  # the trials first while we load
        _import_sampler(named)
    inp = sys.stdin.buffer
    init = _read(inp)
    if init is None:
        return 0
    if init.get("log"):
        _log_to(str(init["log"]))
    quiet_optuna()
    sampler = make_sampler(init["sampler"], seed=init["seed"], n_startup=int(init.get("n_startup", 10)))
    if init["sampler"] in WARM_UP:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, niceness + 10)
        _warm_up(init)
        with contextlib.suppress(OSError):  # back (root may; otherwise it stays lower: trials still first)
            os.setpriority(os.PRIO_PROCESS, 0, niceness)
    mirror: dict[int, FrozenTrial] = {}
    while True:
        req = _read(inp)
        if req is None:
            return 0
        for number in req["dropped"]:
            mirror.pop(number, None)
        if req["dropped"]:
            # the mirror's trials were renumbered: Optuna's cached intersection (a cursor over
            # trial numbers) would skip some (GPSampler's)
            internals.forget_search_space(sampler)
        mirror.update((t.number, t) for t in req["trials"])
        began = time.monotonic()
        answer: dict[str, Any] = {"seq": req["seq"]}
        try:
            answer["params"], answer["system_attrs"] = _suggest_one(sampler, init["directions"], init["study"], mirror,
                                                                    req.get("pending", ()))
        except Exception as err:  # noqa: BLE001 - any sampler failure: that trial is random, the job goes on
            import traceback

            traceback.print_exc()
            answer["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}".rstrip(": ")
        answer["seconds"] = time.monotonic() - began
        answer["cpu_s"] = time.process_time()  # the worker's whole CPU so far: imports and warm-up too
        out.write(_frame(answer))
        out.flush()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # (no teardown of the ~800 modules loaded: the controller waits for this exit at the job's end)


__all__ = ["AHEAD_SAMPLERS", "AheadSuggester", "Suggestion", "for_job"]

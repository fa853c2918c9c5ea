"""The ahead suggester with its real worker process (``python -m trials.study.ahead``) over a journal job."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from pathlib import Path

import pytest

from trials.job_meta import JobMeta
from trials.spec.load import loads_spec
from trials.study import ahead, optuna_internals
from trials.study.samplers import gp_available
from trials.study.storage import open_storage
from trials.study.store import JobStore

pytestmark = pytest.mark.skipif(not gp_available(), reason="the GP sampler needs scipy")

SPEC = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: -5.0, max: 10.0}
  y: {type: double, min: 0.0, max: 15.0}
command: [python, train.py]
max_trial_count: 14
parallel_trial_count: 2
"""
ANSWER_BOUND_S = 120.0  # a bound on a broken worker, not a timing claim: answers take well under a second


def branin(x: float, y: float) -> float:
    return (y - 5.1 / 39.48 * x * x + 5 / 3.1416 * x - 6) ** 2 + 10 * (1 - 1 / 25.13) * __import__("math").cos(x) + 10


def job(tmp_path: Path, name: str, *, completed: int = 10) -> JobStore:
    spec = loads_spec(SPEC, source="t.yaml")
    store = JobStore.create(open_storage(f"journal:{tmp_path / name}.log"), name, spec, {}, JobMeta(),
                            sampler_name="gp-warped", seed=5)
    for _ in range(completed):
        claimed = store.claim(spec.study)
        assert claimed is not None
        store.complete(claimed.number, [branin(float(claimed.params["x"]), float(claimed.params["y"]))])
    return store


def suggester(store: JobStore, tmp_path: Path, **kw: object) -> ahead.AheadSuggester:
    # (changed attributes reach a worker started after them: none is started up front then)
    made = ahead.for_job(store, loads_spec(SPEC, source="t.yaml").study, sampler_name="gp-warped", seed=11,
                         job_dir=str(tmp_path), n_trials=1 if kw else 14)
    assert made is not None
    for k, v in kw.items():
        setattr(made, k, v)
    return made


def answer(s: ahead.AheadSuggester) -> ahead.Suggestion:
    deadline = time.monotonic() + ANSWER_BOUND_S
    while (got := s.take()) is None:
        assert time.monotonic() < deadline, "no answer from the worker"
        fd = s.fileno()
        select.select([fd] if fd is not None else [], [], [], 1.0)
    return got


def test_a_suggestion_is_the_models_made_apart_from_the_trials_as_they_were_asked_and_is_seeded(tmp_path: Path) -> None:
    study = loads_spec(SPEC, source="t.yaml").study
    first, second = suggester(job(tmp_path, "a"), tmp_path), suggester(job(tmp_path, "b"), tmp_path)
    running = first.store.claim(study)  # trial 11 runs: the next suggestion counts it as pending
    assert running is not None and second.store.claim(study) == running
    try:
        first.prefetch()
        assert running.number in first._sent  # the running trial went to the worker's mirror
        second.prefetch()
        a, b = answer(first), answer(second)
    finally:
        first.close()
        second.close()
    assert a.params is not None and a.warning == ""
    assert -5.0 <= float(a.params["x"]) <= 10.0 and 0.0 <= float(a.params["y"]) <= 15.0
    assert a.params == b.params  # the same trials, the same seed: the same suggestion
    assert first.n_model == 1 and first.worker_seconds > 0
    assert first.worker_cpu_s > first.worker_seconds / 10  # the worker's CPU, imports included, as it said
    assert first._proc is None  # closed


def test_the_random_start_up_is_made_in_the_loop_without_asking_the_worker(tmp_path: Path) -> None:
    store = job(tmp_path, "c", completed=3)
    s = suggester(store, tmp_path)
    try:
        s.prefetch()  # after a launch: nothing is asked during the start-up
        assert s.take() is None and s._inflight is None
        s.prefetch(needed=True)  # a free slot: random, now
        got = s.take()
        assert got is not None and got.params is None and got.warning == ""
        assert s._inflight is None and s.n_model == 0
        assert store.study.sampler.__class__.__name__ == "RandomSampler"  # the loop's own, for these
    finally:
        s.close()


def test_a_killed_worker_makes_one_trial_random_and_is_started_again(tmp_path: Path) -> None:
    store = job(tmp_path, "d")
    s = suggester(store, tmp_path)
    try:
        s.prefetch()
        assert s._proc is not None
        os.kill(s._proc.pid, signal.SIGKILL)
        got = answer(s)
        assert got.params is None
        assert got.warning.startswith("the sampler's process was killed by signal 9 (its log: ")
        assert got.warning.endswith("); these parameters were sampled at random")
        s.prefetch()  # a new worker for the next one
        again = answer(s)
        assert again.params is not None and s.n_model == 1
    finally:
        s.close()


def test_a_sampler_that_fails_makes_that_trial_random_and_the_worker_goes_on(tmp_path: Path) -> None:
    store = job(tmp_path, "e")
    s = suggester(store, tmp_path, study=None)  # the worker cannot suggest for no study
    try:
        s.prefetch()
        got = answer(s)
        assert got.params is None
        assert got.warning.startswith("the sampler failed (") and got.warning.endswith(
            "); its parameters were sampled at random"), got.warning
        assert s._proc is not None and s._proc.poll() is None  # still there for the next one
        assert "Traceback" in (tmp_path / "sampler.log").read_text()
    finally:
        s.close()


def test_a_worker_whose_controller_died_ends_itself(tmp_path: Path) -> None:
    # The controller (here a child python that starts a suggester, then is SIGKILLed) cannot close
    # the worker's input — here a fork of it keeps that pipe open, as a suggestion in progress keeps
    # the worker from reading it: the worker sees its parent gone and ends its process group.
    import subprocess
    import sys

    script = f"""
import sys, time
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parent.parent.parent)!r})
from tests.study.test_ahead import job, suggester
s = suggester(job(Path({str(tmp_path)!r}), "f"), Path({str(tmp_path)!r}))
import os
holder = os.fork()
if holder == 0:
    time.sleep(600)
    os._exit(0)
print(s._proc.pid, holder, flush=True)
time.sleep(600)
"""
    ctl = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert ctl.stdout is not None
        worker, holder = map(int, ctl.stdout.readline().split())
        ctl.kill()
        ctl.wait()
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{worker}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break  # gone, not yet reaped
            except FileNotFoundError:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the worker outlived its controller by 30 s")
    finally:
        ctl.kill()
        with contextlib.suppress(NameError, ProcessLookupError):
            os.kill(holder, signal.SIGKILL)


@pytest.mark.parametrize("share", [0.0, 1e9])
def test_a_suggestion_made_ahead_is_made_again_with_the_new_result_when_the_sampler_is_cheap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share: float) -> None:
    monkeypatch.setattr(ahead, "FRESH_SHARE", share)
    store = job(tmp_path, "g")
    study = loads_spec(SPEC, source="t.yaml").study
    s = suggester(store, tmp_path)
    running = store.claim(study)
    assert running is not None
    try:
        s.prefetch()  # after the launch: trial 11 is pending
        deadline = time.monotonic() + ANSWER_BOUND_S
        while s._ready is None:  # answered, not taken
            assert time.monotonic() < deadline
            select.select([s.fileno()], [], [], 1.0)
            s._read_answers()
        early = s._ready
        assert early is not None and early.results == 10 and not early.fresh
        store.complete(running.number, [1.0])  # its result comes before the slot takes the suggestion
        got = s.take()
        if share == 0.0:  # the sampler is dear beside the trials: the one made ahead is used
            assert got is early
            return
        assert got is None and s._inflight is not None  # asked again, the slot waits
        again = answer(s)
        assert again.fresh and again.results == 11 and again.params is not None
        assert s.n_model == 2
    finally:
        s.close()


def test_with_two_slots_a_spare_is_made_with_the_next_one_pending(tmp_path: Path) -> None:
    store = job(tmp_path, "h")
    s = suggester(store, tmp_path)
    s.depth = 2
    try:
        s.prefetch()
        deadline = time.monotonic() + ANSWER_BOUND_S
        while s._ready is None or s._spare == [] or s._inflight is not None:  # the loop's passes
            assert time.monotonic() < deadline, (s._ready, s._spare)
            fd = s.fileno()
            select.select([fd] if fd is not None else [], [], [], 0.5)
            s.pump()
        first, spare = s._ready, s._spare[0]
        assert first.params is not None and spare.params is not None and first.params != spare.params
        assert s.n_model == 2 and len(s._spare) == 1  # depth 2: no third
        s.pump()
        assert s._inflight is None
        assert s.take() is first and s.take() is spare and s.take() is None
    finally:
        s.close()


def test_the_mirror_study_is_the_one_create_new_trial_builds_and_leaves_the_mirror_as_it_was(monkeypatch) -> None:
    import optuna
    from optuna.distributions import FloatDistribution

    from trials.study.samplers import make_sampler

    study = loads_spec(SPEC, source="t.yaml").study
    dist = {"x": FloatDistribution(-5.0, 10.0), "y": FloatDistribution(0.0, 15.0)}
    points = [(-5.0 + 15 * ((i * 0.618) % 1), 15 * ((i * 0.382) % 1)) for i in range(13)]
    mirror = {i + 3: optuna.trial.create_trial(params={"x": x, "y": y}, distributions=dist,
                                               value=branin(x, y)) for i, (x, y) in enumerate(points[:12])}
    mirror[20] = optuna.trial.create_trial(params=dict(zip("xy", points[12], strict=True)), distributions=dist,
                                           state=optuna.trial.TrialState.RUNNING)
    before = {n: (t.number, t._trial_id, dict(t.params), t.state) for n, t in mirror.items()}
    built: list[optuna.storages.InMemoryStorage] = []
    real_add = ahead._MirrorStorage.add_copy

    def recording(self, study_id, template):  # type: ignore[no-untyped-def]
        if not built or built[-1] is not self:
            built.append(self)
        real_add(self, study_id, template)

    monkeypatch.setattr(ahead._MirrorStorage, "add_copy", recording)
    fast = ahead._suggest_one(make_sampler("gp-warped", seed=3), [optuna.study.StudyDirection.MINIMIZE], study,
                              mirror, [{"x": 1.0, "y": 2.0}])
    monkeypatch.setattr(ahead._MirrorStorage, "add_copy",
                        lambda self, sid, t: (built.append(self) if not built or built[-1] is not self else None,
                                              self.create_new_trial(sid, template_trial=t)))
    deep = ahead._suggest_one(make_sampler("gp-warped", seed=3), [optuna.study.StudyDirection.MINIMIZE], study,
                              mirror, [{"x": 1.0, "y": 2.0}])
    assert fast == deep and fast[0]  # the same study: the same suggestion
    monkeypatch.setattr(ahead._MirrorStorage, "add_copy", real_add)
    monkeypatch.setitem(optuna_internals.PRIVATE_ATTRIBUTES, "InMemoryStorage",
                        {**optuna_internals.PRIVATE_ATTRIBUTES["InMemoryStorage"], "_not_in_this_optuna": "int"})
    assert ahead._suggest_one(make_sampler("gp-warped", seed=3), [optuna.study.StudyDirection.MINIMIZE], study,
                              mirror, [{"x": 1.0, "y": 2.0}]) == fast  # another Optuna's internals: its own way
    a, b = (s.get_all_trials(s.get_all_studies()[0]._study_id, deepcopy=False) for s in built)
    assert [(t.number, t._trial_id, t.state, t.params, t.values) for t in a] == \
        [(t.number, t._trial_id, t.state, t.params, t.values) for t in b]
    assert a[0].number == 0 and len(a) == 15  # renumbered from 0: 13 mirrored, 1 pending, the one suggested
    assert built[0].get_best_trial(0)._trial_id == built[1].get_best_trial(0)._trial_id
    assert {n: (t.number, t._trial_id, dict(t.params), t.state) for n, t in mirror.items()} == before


def test_a_worker_started_ahead_of_its_job_is_the_jobs_and_prints_to_the_jobs_log(tmp_path: Path) -> None:
    from trials.study import choice

    store = job(tmp_path, "w")
    choice.warm("gp-warped")  # as `trials sweep` does once the spec says the sampler runs ahead
    assert choice._warm is not None
    warm = choice._warm[1]
    s = suggester(store, tmp_path, study=None)  # (a sampler that fails: its traceback shows where it prints)
    try:
        s.prefetch()
        assert s._proc is warm and choice._warm is None  # taken, not started again
        got = answer(s)
        assert got.params is None and got.warning.startswith("the sampler failed (")
        assert warm.poll() is None  # still there for the next one
        assert "Traceback" in (tmp_path / "sampler.log").read_text()  # the job's log, once its job came
    finally:
        s.close()
    assert warm.poll() is not None


def test_a_warm_worker_of_another_sampler_or_no_job_is_closed() -> None:
    from trials.study import choice

    choice.warm("gp-warped")
    assert choice._warm is not None
    first = choice._warm[1]
    choice.warm("vizier")  # (one at a time: the first stays)
    assert choice._warm[1] is first
    assert choice.take("vizier") is None  # not the job's sampler: ended, the job starts its own
    assert first.poll() is not None and choice._warm is None  # (killed and reaped at once)
    choice.warm("gp-warped")
    second = choice._warm[1]
    choice.close_warm()  # no job took it (a spec refused after it started): killed at once, not waited for
    assert second.poll() is not None and choice._warm is None
    choice.close_warm()  # (nothing warm: a no-op)


@pytest.mark.parametrize("warm", [False, True])
def test_a_fifo_or_symlink_planted_as_the_samplers_log_is_replaced_not_blocked_on(tmp_path: Path, warm: bool) -> None:
    from trials.study import choice

    store = job(tmp_path, f"h{warm}")
    os.mkfifo(tmp_path / "sampler.log")  # (a writer's open of a FIFO without a reader blocks forever)
    target = tmp_path / "elsewhere.txt"
    target.write_text("not the log\n")
    if warm:
        (tmp_path / "sampler.log").unlink()
        (tmp_path / "sampler.log").symlink_to(target)
        choice.warm("gp-warped")
    s = suggester(store, tmp_path, study=None)  # (a sampler that fails: its traceback goes to the log)
    try:
        s.prefetch()
        got = answer(s)
        assert got.params is None and got.warning.startswith("the sampler failed (")
    finally:
        s.close()
        choice.close_warm()
    log = tmp_path / "sampler.log"
    assert not log.is_symlink() and log.is_file() and "Traceback" in log.read_text()
    assert target.read_text() == "not the log\n"

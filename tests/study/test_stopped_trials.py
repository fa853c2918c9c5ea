"""What the samplers learn from trials stopped early (PRUNED), their start-up, and the claim's note of how
each trial's parameters were chosen (issue 48)."""

from __future__ import annotations

import select
import time
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

from trials.job_meta import JobMeta
from trials.spec.load import loads_spec
from trials.study import ahead
from trials.study.choice import MODEL, RANDOM, SUGGESTED_ATTR, startup_trials, suggestion_counts, suggestions_words
from trials.study.npgp import stopped_as_values
from trials.study.samplers import gp_available
from trials.study.storage import open_storage
from trials.study.store import JobStore

SPACE = {"x": FloatDistribution(-5.0, 10.0), "y": FloatDistribution(0.0, 15.0)}
ANSWER_BOUND_S = 120.0  # a bound on a broken worker, not a timing claim


def spec_text(n_trials: int) -> str:
    return f"""\
metrics: {{accuracy: maximize}}
parameters:
  x: {{type: double, min: -5.0, max: 10.0}}
  y: {{type: double, min: 0.0, max: 15.0}}
command: [python, train.py]
max_trial_count: {n_trials}
parallel_trial_count: 1
stopping: {{type: median}}
"""


def done(x: float, y: float, value: float) -> optuna.trial.FrozenTrial:
    return create_trial(params={"x": x, "y": y}, distributions=SPACE, value=value,
                        intermediate_values={1: value / 2, 2: value})


def stopped(x: float, y: float, step: int, value: float) -> optuna.trial.FrozenTrial:
    return create_trial(state=TrialState.PRUNED, params={"x": x, "y": y}, distributions=SPACE,
                        intermediate_values={s: value for s in range(1, step + 1)})


FOUR_DONE = [done(0.0, 0.0, 0.60), done(5.0, 5.0, 0.90), done(-3.0, 12.0, 0.70), done(8.0, 2.0, 0.80)]


def test_the_start_up_is_half_the_job_between_four_and_ten() -> None:
    assert [startup_trials(n) for n in (1, 4, 8, 10, 12, 19, 20, 300)] == [4, 4, 4, 5, 6, 10, 10, 10]
    assert startup_trials(12, "vizier") == 1  # OSS Vizier's own start-up is one trial


def test_stopped_trials_rank_below_every_completed_one_in_tpes_order() -> None:
    late_good = stopped(1.0, 1.0, step=5, value=0.5)
    late_bad = stopped(2.0, 2.0, step=5, value=0.1)
    early_good = stopped(3.0, 3.0, step=1, value=0.95)  # a high first value: still below the later ones
    values = [t.values[0] for t in stopped_as_values(FOUR_DONE, [early_good, late_bad, late_good],
                                                     StudyDirection.MAXIMIZE)]
    assert max(values) < 0.60  # below the worst completed trial
    assert values[2] > values[1] > values[0]  # further first, then the better value at the same step
    minimized = stopped_as_values(FOUR_DONE, [late_good, early_good], StudyDirection.MINIMIZE)
    assert all(t.values[0] > 0.90 for t in minimized)  # minimizing: worse is larger
    assert minimized[0].values[0] < minimized[1].values[0]
    alone = stopped_as_values([], [early_good, late_good], StudyDirection.MAXIMIZE)  # nothing completed yet
    assert alone[1].values[0] > alone[0].values[0]


def _gp_suggestion(trials: list[optuna.trial.FrozenTrial], n_startup: int = 4) -> dict[str, float]:
    from trials.study.warped_gp import WarpedGPSampler

    study = optuna.create_study(direction="maximize", sampler=WarpedGPSampler(seed=3, n_startup_trials=n_startup))
    for t in trials:
        study.add_trial(t)
    trial = study.ask(SPACE)
    return dict(trial.params)


@pytest.mark.skipif(not gp_available(), reason="the GP sampler needs scipy")
def test_a_stopped_trial_changes_the_gps_next_suggestion() -> None:
    without = _gp_suggestion(FOUR_DONE)
    with_stopped = _gp_suggestion([*FOUR_DONE, stopped(5.2, 5.3, step=1, value=0.2)])
    assert with_stopped != without
    # (the stopped trial sits next to the best one: the model now doubts that corner, so it looks elsewhere)
    assert abs(with_stopped["x"] - 5.1) + abs(with_stopped["y"] - 5.2) > 0.05


@pytest.mark.skipif(not gp_available(), reason="the GP sampler needs scipy")
def test_the_gps_start_up_counts_stopped_trials_with_completed_ones() -> None:
    from trials.study.warped_gp import WarpedGPSampler

    trials = [FOUR_DONE[0], FOUR_DONE[1], stopped(1.0, 9.0, step=1, value=0.3), stopped(9.0, 9.0, step=2, value=0.2)]
    study = optuna.create_study(direction="maximize", sampler=WarpedGPSampler(seed=3, n_startup_trials=4))
    for t in trials:
        study.add_trial(t)
    sampler = study.sampler
    frozen = study.ask().number
    relative = sampler.sample_relative(study, study.trials[frozen], SPACE)
    assert set(relative) == {"x", "y"}  # the model suggests: 2 completed + 2 stopped make the start-up's 4


def _finish(store: JobStore, spec_study: object, *, value: float, stop_at: int | None) -> None:
    claimed = store.claim(spec_study)  # type: ignore[arg-type]
    assert claimed is not None
    steps = range(1, (stop_at or 3) + 1)
    store.report_many(claimed.storage_id, [(s, value * s / 3) for s in steps])
    store.complete(claimed.number, [value * steps[-1] / 3], stopped_early=stop_at is not None)


def test_a_claim_notes_random_start_up_then_the_model_counting_stopped_trials(tmp_path: Path) -> None:
    spec = loads_spec(spec_text(8), source="t.yaml")  # 8 trials: a start-up of 4
    store = JobStore.create(open_storage(f"journal:{tmp_path / 'j'}.log"), "j", spec, {}, JobMeta(),
                            sampler_name="tpe", seed=1)
    assert store.n_startup == 4 and store.meta().startup == 4
    for i, stop in enumerate((None, 1, None, 2)):  # 2 completed, 2 stopped early
        _finish(store, spec.study, value=0.5 + i / 10, stop_at=stop)
    nxt = store.claim(spec.study)
    assert nxt is not None
    kinds = {t.number: t.system_attrs.get(SUGGESTED_ATTR) for t in store.frozen_trials() if t.params}
    assert kinds == {0: RANDOM, 1: RANDOM, 2: RANDOM, 3: RANDOM, 4: MODEL}
    counts = suggestion_counts(store.frozen_trials())
    assert counts == {"model": 1, "random": 4, "fixed": 0}
    assert suggestions_words(counts, "tpe") == ("suggestions: 1 from the tpe model, 4 random "
                                                "(its start-up or a fallback)")
    reopened = JobStore.open(open_storage(f"journal:{tmp_path / 'j'}.log"), "j")
    assert reopened.n_startup == 4  # a resume keeps the job's start-up


def test_counts_ignore_what_is_not_a_known_word() -> None:
    class T:
        def __init__(self, kind: object) -> None:
            self.system_attrs = {SUGGESTED_ATTR: kind}

    assert suggestion_counts([T("model"), T(["model"]), T("grid\n"), T(None)]) == {"model": 1, "random": 0, "fixed": 0}
    assert suggestions_words({"model": 0, "random": 0, "fixed": 0}, "gp-warped") is None


@pytest.mark.skipif(not gp_available(), reason="the GP sampler needs scipy")
def test_the_ahead_worker_suggests_once_completed_and_stopped_trials_fill_the_start_up(tmp_path: Path) -> None:
    spec = loads_spec(spec_text(8), source="t.yaml")
    store = JobStore.create(open_storage(f"journal:{tmp_path / 'g'}.log"), "g", spec, {}, JobMeta(),
                            sampler_name="gp-warped", seed=2)
    s = ahead.for_job(store, spec.study, sampler_name="gp-warped", seed=2, job_dir=str(tmp_path), n_trials=8)
    assert s is not None and s.n_startup == 4
    try:
        for i, stop in enumerate((None, 1, 1, None)):
            _finish(store, spec.study, value=0.4 + i / 10, stop_at=stop)
        s.prefetch(needed=True)
        deadline = time.monotonic() + ANSWER_BOUND_S
        while (got := s.take()) is None:
            assert time.monotonic() < deadline, "no answer from the worker"
            fd = s.fileno()
            select.select([fd] if fd is not None else [], [], [], 1.0)
        assert got.params is not None, got.warning  # the model's, not the start-up's random one
        assert got.system_attrs[SUGGESTED_ATTR] == MODEL
        claimed = store.claim(spec.study, params=got.params, system_attrs=got.system_attrs)
        assert claimed is not None
        assert store.trial(claimed.number).system_attrs[SUGGESTED_ATTR] == MODEL
    finally:
        s.close()

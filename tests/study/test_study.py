"""The Optuna adapter: search-space mapping, grid, atomic claims, requeue, storage URLs."""


import optuna
import pytest

from trials.errors import ConfigError
from trials.job_meta import JobMeta
from trials.records import JobState
from trials.spec import (
    Algorithm,
    ConditionalParameterSpec,
    Goal,
    JobSpec,
    MetricSpec,
    ParameterSpec,
    ParameterType,
    ScaleType,
    StudySpec,
)
from trials.storage_url import redact
from trials.study import choice, samplers, space
from trials.study.storage import open_storage
from trials.study.store import JobStore

CAT = ParameterSpec(parameter_id="opt", type=ParameterType.CATEGORICAL, values=("adam", "sgd"), conditionals=(
    ConditionalParameterSpec(parent_values=("sgd",), parameter=ParameterSpec(
        parameter_id="momentum", type=ParameterType.DISCRETE, values=(0.0, 0.9))),))
GRID_STUDY = StudySpec(metrics=(MetricSpec(metric_id="a"),), algorithm=Algorithm.GRID_SEARCH, parameters=(
    ParameterSpec(parameter_id="n", type=ParameterType.INTEGER, min_value=1, max_value=3), CAT))


def test_grid_expands_conditionals_under_matching_parents_only():
    points = space.grid(GRID_STUDY)
    assert len(points) == 3 * (1 + 2)
    assert {"n": 1, "opt": "adam"} in points
    assert {"n": 2, "opt": "sgd", "momentum": 0.9} in points
    assert len({tuple(sorted(p.items())) for p in points}) == len(points)


def _store(study, n, tmp_path, url=None):
    job = JobSpec(study=study, max_trial_count=n)
    storage = open_storage(url or f"journal:{tmp_path}/j.log")
    name = samplers.choose_sampler_name(study, n_trials=n)
    meta = JobMeta(state=JobState.QUEUED)
    return JobStore.create(storage, "job", job, {"spec": 1}, meta, sampler_name=name, seed=1), job


def test_grid_job_creates_at_most_the_grid_and_claims_each_point_once(tmp_path):
    store, job = _store(GRID_STUDY, 50, tmp_path)
    seen = []
    while (c := store.claim(job.study)) is not None:
        seen.append(tuple(sorted(c.params.items())))
    assert len(seen) == 9 == len(set(seen))
    assert store.add_trials(5, job) == 0  # grid exhausted


def test_trial_ids_start_at_one_and_claims_stop_at_max(tmp_path):
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(
        ParameterSpec(parameter_id="x", type=ParameterType.DOUBLE, min_value=0.1, max_value=1.0,
                      scale_type=ScaleType.UNIT_LOG_SCALE),))
    store, job = _store(study, 3, tmp_path)
    ids = []
    while (c := store.claim(job.study)) is not None:
        assert 0.1 <= c.params["x"] <= 1.0
        ids.append(c.trial_id)
        store.complete(c.number, [c.params["x"]])
    assert ids == ["1", "2", "3"]
    assert store.add_trials(2, job) == 2
    assert store.claim(job.study).trial_id == "4"


def test_reverse_log_values_are_mirrored_into_range(tmp_path):
    p = ParameterSpec(parameter_id="beta", type=ParameterType.DOUBLE, min_value=0.01, max_value=1.0,
                      scale_type=ScaleType.UNIT_REVERSE_LOG_SCALE)
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(p,), algorithm=Algorithm.RANDOM_SEARCH)
    store, job = _store(study, 200, tmp_path)
    values = []
    for _ in range(200):
        c = store.claim(job.study)
        values.append(c.params["beta"])
        store.complete(c.number, [0.0])
    assert all(0.01 <= v <= 1.0 for v in values)
    # reverse log: about half the mass in the top tenth of the range, almost none in the bottom tenth
    top = sum(v > 0.9 for v in values)
    bottom = sum(v < 0.11 for v in values)
    assert top > 60 and bottom < 20
    frozen = store.frozen_trials()[0]
    assert "beta:reverse_log" in frozen.params


def test_requeued_trial_keeps_its_id_and_parameters(tmp_path):
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(CAT,))
    store, job = _store(study, 2, tmp_path)
    c = store.claim(job.study)
    store.requeue(c.storage_id)
    again = store.claim(job.study)
    assert (again.trial_id, again.params) == (c.trial_id, c.params)


def test_reclaim_running_trial_returns_stored_params(tmp_path):
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(CAT,))
    store, job = _store(study, 1, tmp_path)
    c = store.claim(job.study)
    (frozen,) = store.running_trials()
    r = store.reclaim(frozen, job.study)
    assert r.resumed and r.params == c.params and r.trial_id == "1"


def test_fixed_params_are_what_a_waiting_trial_is_claimed_with(tmp_path):
    # `trials check` runs the spec's first point: conditional, mirrored and grid parameters included
    beta = ParameterSpec(parameter_id="beta", type=ParameterType.DOUBLE, min_value=0.01, max_value=1.0,
                         scale_type=ScaleType.UNIT_REVERSE_LOG_SCALE)
    for study in (StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(CAT, beta)), GRID_STUDY):
        store, job = _store(study, 1, tmp_path / study.algorithm.value)
        point = {"opt": "sgd", "momentum": 0.9, **({"beta": 0.02} if study is not GRID_STUDY else {"n": 3})}
        store.fix_params(0, point, study)
        c = store.claim(job.study)
        assert (c.trial_id, c.params) == ("1", point)


def test_multi_metric_study_has_one_direction_per_metric(tmp_path):
    study = StudySpec(metrics=(MetricSpec(metric_id="a"), MetricSpec(metric_id="b", goal=Goal.MINIMIZE)),
                      parameters=(CAT,))
    store, job = _store(study, 1, tmp_path)
    assert [d.name for d in store.study.directions] == ["MAXIMIZE", "MINIMIZE"]


def test_sqlite_storage_and_redaction(tmp_path):
    store, job = _store(GRID_STUDY, 2, tmp_path, url=f"sqlite:///{tmp_path}/x.db")
    assert store.claim(job.study) is not None
    assert redact("postgresql://bob:secret@db/x") == "postgresql://bob:***@db/x"
    assert "secret" not in redact("postgresql://bob:secret@db/x")
    with pytest.raises(ConfigError):
        open_storage("not a url")


def test_sampler_rule():
    assert samplers.choose_sampler_name(GRID_STUDY, n_trials=5) == "grid"
    rnd = StudySpec(metrics=GRID_STUDY.metrics, parameters=GRID_STUDY.parameters, algorithm=Algorithm.RANDOM_SEARCH)
    assert samplers.choose_sampler_name(rnd, n_trials=5) == "random"
    default = StudySpec(metrics=GRID_STUDY.metrics, parameters=GRID_STUDY.parameters)
    assert samplers.choose_sampler_name(default, n_trials=5) == "tpe"  # conditional space: always TPE


@pytest.mark.parametrize("gp", [True, False])
def test_default_rule_for_a_flat_space(monkeypatch, gp):
    monkeypatch.setattr(choice, "gp_available", lambda name="gp-warped": gp)  # (where the choice is made)
    x = ParameterSpec(parameter_id="x", type=ParameterType.DOUBLE, min_value=0, max_value=1)
    flat = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(x,))
    assert samplers.choose_sampler_name(flat, n_trials=300) == ("gp-warped" if gp else "tpe")
    assert samplers.choose_sampler_name(flat, n_trials=301) == "tpe"  # GP's cost grows cubically
    two = StudySpec(metrics=(MetricSpec(metric_id="a"), MetricSpec(metric_id="b")), parameters=(x,))
    assert samplers.choose_sampler_name(two, n_trials=5) == "tpe"


@pytest.mark.parametrize("missing", ["scipy", "torch"])
def test_the_warped_gp_needs_scipy_and_optunas_gp_torch_too(monkeypatch, missing):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda m: None if m == missing else real(m))
    # both import scipy lazily: without it they would fail mid-job
    assert samplers.gp_available("gp-warped") is (missing == "torch")
    assert samplers.gp_available() is (missing == "torch")
    assert not samplers.gp_available("gp")


def test_one_id_under_two_parents_gets_two_optuna_names(tmp_path):
    w_small = ParameterSpec(parameter_id="w", type=ParameterType.DISCRETE, values=(8.0, 16.0))
    w_big = ParameterSpec(parameter_id="w", type=ParameterType.DISCRETE, values=(32.0, 64.0))
    n = ParameterSpec(parameter_id="n", type=ParameterType.INTEGER, min_value=1, max_value=4, conditionals=(
        ConditionalParameterSpec(parent_values=(1, 2), parameter=w_small),
        ConditionalParameterSpec(parent_values=(3, 4), parameter=w_big)))
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(n,), algorithm=Algorithm.RANDOM_SEARCH)
    assert space.optuna_names(study) == {n: "n", w_small: "w", w_big: "w#2"}
    store, job = _store(study, 30, tmp_path)
    for _ in range(30):  # Optuna would refuse two value spaces under one name
        c = store.claim(job.study)
        assert c.params["w"] in ((8, 16) if c.params["n"] <= 2 else (32, 64))
        store.complete(c.number, [0.0])
    frozen = store.frozen_trials()[0]
    assert space.values_from_optuna(study, frozen.params) == store.reclaim(frozen, study).params


def test_batched_journal_writes_read_back_like_the_public_api(tmp_path):
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(CAT,))
    store, job = _store(study, 1, tmp_path)
    c = store.claim(job.study)
    store.report_many(c.storage_id, [(1, 0.5), (2, float("nan")), (3, 0.75)])
    store.set_trial_attrs(c.storage_id, state="SUCCEEDED", measurements=[{"step": 1}], n=3)
    store.complete(c.number, [0.75])
    # a fresh process's view: plain Optuna on the journal file
    from optuna.storages.journal import JournalFileBackend

    reopened = optuna.load_study(study_name="job", storage=optuna.storages.JournalStorage(
        JournalFileBackend(f"{tmp_path}/j.log")))
    (t,) = reopened.trials
    assert t.intermediate_values == {1: 0.5, 3: 0.75}  # NaN is not an intermediate value
    assert t.user_attrs == {"state": "SUCCEEDED", "measurements": [{"step": 1}], "n": 3}


NO_SIDE_EFFECTS = """
import logging, warnings
import optuna
level, filters = optuna.logging.get_verbosity(), list(warnings.filters)
import trials.study, trials.study.storage, trials.study.journal.log, trials.study.space
import trials.study.samplers, trials.study.store
assert optuna.logging.get_verbosity() == level, "optuna's log level changed at import"
assert warnings.filters == filters, "warning filters changed at import"
trials.study.storage.in_memory_storage()
assert optuna.logging.get_verbosity() == optuna.logging.WARNING
print("ok")
"""


def test_importing_the_adapter_configures_nothing_opening_a_storage_quiets_optuna():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", NO_SIDE_EFFECTS], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_storage_url_and_outage_modules_do_not_import_optuna():
    import subprocess
    import sys

    code = "import sys, trials.storage_url, trials.study.database.outages; print('optuna' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_reopened_seeded_job_does_not_suggest_its_first_trials_again(tmp_path):
    from trials.spec.load import loads_spec
    from trials.study.storage import open_storage
    from trials.study.store import JobStore

    job = loads_spec("metrics: {loss: minimize}\nparameters:\n  x: {type: double, min: 0.0, max: 1.0}\n"
                     "command: [python, t.py]\nmax_trial_count: 6\n", source="t.yaml")
    url = f"sqlite:///{tmp_path / 'j.db'}"

    def xs(store: JobStore, n: int) -> list[float]:
        out = []
        for _ in range(n):
            claimed = store.claim(job.study)
            assert claimed is not None
            out.append(float(claimed.params["x"]))
        return out

    first = xs(JobStore.create(open_storage(url), "j", job, {}, JobMeta(), sampler_name="tpe", seed=7), 3)
    again = xs(JobStore.open(open_storage(url), "j"), 3)  # a resume: the sampler is made again
    assert not set(first) & set(again)
    # reproducible: the same history reopened gives the same next suggestion
    url2 = f"sqlite:///{tmp_path / 'k.db'}"
    xs(JobStore.create(open_storage(url2), "j", job, {}, JobMeta(), sampler_name="tpe", seed=7), 3)
    assert xs(JobStore.open(open_storage(url2), "j"), 1) == again[:1]

"""The database storage's own reads and one-transaction writes (trials/study/database/rdb.py) on SQLite: they
read what Optuna reads, and keep Optuna's rules for finished trials."""

import optuna
import pytest
from optuna.trial import TrialState

from trials.study.database import rdb
from trials.study.storage import open_storage


@pytest.fixture()
def storage(tmp_path):
    return open_storage(f"sqlite:///{tmp_path / 'jobs.db'}")


def a_trial(storage, *, finish=False):
    study = optuna.create_study(storage=storage, directions=["maximize", "minimize"])
    trial = study.ask()
    trial.suggest_float("x", 0, 1)
    trial.suggest_categorical("c", ["a", "b"])
    trial.set_user_attr("note", {"k": [1, 2]})
    trial.storage.set_trial_system_attr(trial._trial_id, "fixed_params", {"x": 0.5})
    storage.set_trial_intermediate_value(trial._trial_id, 1, 0.25)  # (Trial.report refuses two objectives)
    storage.set_trial_intermediate_value(trial._trial_id, 2, float("inf"))
    if finish:
        study.tell(trial, [1.0, float("-inf")])
    return study, trial._trial_id


@pytest.mark.parametrize("finish", [False, True])
def test_a_trial_reads_as_optunas_own_get_trial_reads_it(storage, finish):
    _study, tid = a_trial(storage, finish=finish)
    assert storage.get_trial(tid) == optuna.storages.RDBStorage.get_trial(storage, tid)


def test_a_batch_writes_params_steps_attributes_state_and_values_together(storage):
    study, tid = a_trial(storage)
    dist = optuna.distributions.FloatDistribution(0, 2)
    storage.write_trials({tid: rdb.TrialWrite(params={"y": (1.5, dist)}, user_attrs={"note": "new", "end": 3},
                                              steps={2: 0.5, 3: 0.75}, state=TrialState.COMPLETE, values=[2.0, 3.0])})
    t = optuna.storages.RDBStorage.get_trial(storage, tid)
    assert t.state is TrialState.COMPLETE and t.values == [2.0, 3.0] and t.datetime_complete is not None
    assert t.params["y"] == 1.5 and t.user_attrs == {"note": "new", "end": 3}
    assert t.intermediate_values == {1: 0.25, 2: 0.5, 3: 0.75}


def test_a_finished_trial_refuses_writes_skips_a_second_finish_and_a_retry_finds_its_own_commit(storage):
    _study, tid = a_trial(storage, finish=True)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        storage.write_trials({tid: rdb.TrialWrite(user_attrs={"late": 1})})
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        storage.write_trials({tid: rdb.TrialWrite(user_attrs={"late": 1}, state=TrialState.FAIL)})
    storage.write_trials({tid: rdb.TrialWrite(state=TrialState.FAIL)})  # tell(skip_if_finished=True)'s rule
    with storage.scoped_session() as session:  # the answer to an earlier attempt was lost: it committed
        rdb.apply(session, tid, rdb.TrialWrite(user_attrs={"late": 1}, state=TrialState.COMPLETE), retried=True)
        session.commit()
    t = storage.get_trial(tid)
    assert t.state is TrialState.COMPLETE and "late" not in t.user_attrs


def test_a_required_statement_that_changes_no_row_rolls_the_whole_batch_back(storage):
    _study, tid = a_trial(storage)
    w = rdb.TrialWrite(user_attrs={"end": 1}, state=TrialState.COMPLETE, values=[1.0, 1.0],
                       required=[("DELETE FROM trial_user_attributes WHERE key = :k", {"k": "nobody's"})])
    with pytest.raises(rdb.NotHeldError):
        storage.write_trials({tid: w})
    t = storage.get_trial(tid)
    assert t.state is TrialState.RUNNING and "end" not in t.user_attrs and t.values is None


def test_counts_and_attributes_of_every_trial_without_reading_the_trials(storage):
    study, tid = a_trial(storage)
    study.enqueue_trial({"x": 0.1})
    assert storage.count_states(study._study_id) == {TrialState.RUNNING: 1, TrialState.WAITING: 1}
    assert storage.user_attrs_of(study._study_id, ["note", "absent"]) == {0: {"note": {"k": [1, 2]}}}
    assert storage.n_sampled(study._study_id) == 1
    [(number, waiting_id, frozen)] = storage.waiting_trials(study._study_id, limit=8)
    assert (number, frozen.state, frozen.system_attrs["fixed_params"]) == (1, TrialState.RUNNING, {"x": 0.1})
    assert waiting_id != tid

"""A job's record: its JSON form round-trips, what earlier versions wrote reads with the old defaults, a newer
version is refused in one line, members it does not know are kept, and the store writes only what changed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trials.errors import JobMetaError
from trials.job_meta import VERSION, JobMeta
from trials.records import JobState

# The members as trials wrote them before the record had a version (685c048: registry.create_job,
# JobStore.create, the loop's begin_job and finish_job, `sweep --keep-going`): tests/data/job_v1's job.
V1 = {
    "spec": {"studySpec": {"metrics": [{"metricId": "loss", "goal": "MINIMIZE"}]}, "maxTrialCount": 2},
    "sampler": "gp-warped", "seed": 1, "startup": 4, "state": "JOB_STATE_SUCCEEDED",
    "create_time": "2026-12-06T18:08:25.924040Z", "job_dir": "/jobs/v1", "base_output": None,
    "gcs_root": "/jobs/v1/gcs", "project_number": "000000000000", "local_command": ["python", "train.py"],
    "cwd": "/work", "pass_env": ["LANG"], "local": {"inject_restarts": 0.0, "grace_period_s": None,
                                                   "memory_limit_mb": None},
    "keep_going": True, "start_time": "2026-12-06T18:08:26.098363Z", "end_time": "2026-12-06T18:08:26.541154Z",
    "error": None, "controller": None,
}


def test_a_record_round_trips_through_its_json_form():
    meta = JobMeta(spec={"maxTrialCount": 3}, local={"custom_job": True}, create_time="t0", job_dir="/j",
                   base_output="gs://b/o", gcs_root="/j/gcs", project_number="123", local_command=("python", "t.py"),
                   cwd="/w", pass_env=("HOME",), stale_after_s=30.0, keep_going=True, sampler="tpe", seed=7,
                   startup=10, runtime="slurm", images={"u": "l"}, options={"partition": "gpu", "args": []},
                   state=JobState.FAILED, start_time="t1", end_time="t2", error={"code": 3, "message": "m"},
                   controller="h:1", study_stopped="why", api_parent="projects/p/locations/l",
                   api_kind="customJobs", suggestions=29, suggest_cpu_s=0.8, suggest_wait_s=0.05,
                   extra={"newer": [1, 2]})
    text = json.dumps(meta.to_json())  # plain JSON
    assert JobMeta.from_json(json.loads(text), job="j") == meta
    assert json.loads(text)["slurm"] == {"partition": "gpu", "args": []}  # the runtime's options under its name
    assert json.loads(text)["version"] == VERSION == 1


def test_a_default_record_writes_only_its_version():
    assert JobMeta().to_json() == {"version": 1}
    assert JobMeta.from_json({}, job="j") == JobMeta()


def test_what_an_earlier_version_wrote_reads_as_version_1_with_the_defaults_the_call_sites_used():
    meta = JobMeta.from_json(V1, job="v1")
    assert meta.version == 1 and meta.extra == {}
    assert meta.state is JobState.SUCCEEDED and meta.keep_going is True and meta.pass_env == ("LANG",)
    assert meta.local_command == ("python", "train.py") and meta.seed == 1 and meta.startup == 4
    # absent then: `get_meta(key)` was None, or the call site's `or {}` / `or ()` / bool()
    assert (meta.runtime, meta.images, meta.options, meta.stale_after_s) == (None, {}, None, None)
    assert (meta.study_stopped, meta.api_parent, meta.api_kind) == (None, None, None)
    assert (meta.suggestions, meta.suggest_cpu_s, meta.suggest_wait_s) == (None, None, None)
    assert meta.options_of("slurm") is None
    oldest = JobMeta.from_json({"spec": V1["spec"]}, job="v1")  # a job from before most members existed
    assert (oldest.state, oldest.keep_going, oldest.pass_env, oldest.local) == (None, False, (), {})
    # written back, the members come out as they went in (None is the default: left out)
    assert {k: v for k, v in V1.items() if v is not None} == {
        k: v for k, v in meta.to_json().items() if k != "version"}


def test_a_newer_version_is_refused_in_one_line_naming_the_job_and_both_versions():
    with pytest.raises(JobMetaError) as err:
        JobMeta.from_json({**V1, "version": 2}, job="v1")
    assert str(err.value) == ("job 'v1' was written by a newer trials: its metadata version is 2, this trials "
                              "reads version 1 (upgrade trials to open it)")
    assert err.value.exit_code == 2
    for bad in ("2", 0, True, 1.5):
        with pytest.raises(JobMetaError, match=r"job 'v1': metadata version must be a positive integer, got "):
            JobMeta.from_json({"version": bad}, job="v1")


def test_members_a_newer_writer_added_are_kept_and_written_back():
    meta = JobMeta.from_json({**V1, "version": 1, "placement_policy": {"spread": True}, "note": "x"}, job="v1")
    assert meta.extra == {"placement_policy": {"spread": True}, "note": "x"}
    assert meta.to_json()["placement_policy"] == {"spread": True} and meta.to_json()["note"] == "x"
    changed = replace(meta, state=JobState.RUNNING)
    assert changed.extra == meta.extra and changed.changed(meta) == {"state": "JOB_STATE_RUNNING"}


@pytest.mark.parametrize(("member", "value", "expected"), [
    ("seed", "7", "an integer"), ("keep_going", "yes", "true or false"), ("spec", [1], "an object"),
    ("local_command", "python t.py", "a list of strings"), ("images", {"u": 1}, "an object of strings"),
    ("state", "JOB_STATE_NAPPING", "one of JOB_STATE_QUEUED"), ("stale_after_s", "30", "a number"),
])
def test_a_member_of_the_wrong_type_is_refused_naming_it(member, value, expected):
    with pytest.raises(JobMetaError) as err:
        JobMeta.from_json({**V1, member: value}, job="v1")
    assert str(err.value).startswith(f"job 'v1': metadata {member} must be {expected}")
    assert "\n" not in str(err.value) and repr(value)[:40] in str(err.value)


def test_the_sampler_process_numbers_keep_only_finite_non_negative_numbers():
    # an edited journal: never an error, as describe always showed the job
    meta = JobMeta.from_json({"suggestions": "29\x1b[2J", "suggest_cpu_s": float("nan"), "suggest_wait_s": -1}, job="j")
    assert (meta.suggestions, meta.suggest_cpu_s, meta.suggest_wait_s) == (None, None, None)
    assert JobMeta.from_json({"suggestions": True, "suggest_wait_s": 0.25}, job="j").suggest_wait_s == 0.25


def test_the_runtime_options_are_the_member_named_after_the_runtime():
    meta = JobMeta.from_json({"runtime": "slurm", "slurm": {"partition": "gpu"}, "podman": {"old": 1}}, job="j")
    assert meta.options == {"partition": "gpu"} and meta.options_of("slurm") == {"partition": "gpu"}
    assert meta.options_of("podman") == {"old": 1} and meta.extra == {"podman": {"old": 1}}  # an earlier runtime's
    with pytest.raises(JobMetaError, match=r"metadata slurm \(the runtime's options\) must be an object, got 'x'"):
        JobMeta.from_json({"runtime": "slurm", "slurm": "x"}, job="j")
    with pytest.raises(ValueError, match="options need a runtime"):
        JobMeta(options={"partition": "gpu"})


def test_changed_is_what_differs_a_cleared_member_written_as_null():
    before = JobMeta.from_json(V1, job="v1")
    after = replace(before, state=JobState.RUNNING, end_time=None, error=None, controller="h:2")
    assert after.changed(before) == {"state": "JOB_STATE_RUNNING", "end_time": None, "controller": "h:2"}
    assert before.changed(before) == {}
    moved = replace(before, runtime="slurm", options={"partition": "p"})
    assert moved.changed(before) == {"runtime": "slurm", "slurm": {"partition": "p"}}


# --- in a storage -----------------------------------------------------------------------------------
def _store(tmp_path: Path):
    from trials.spec.load import loads_spec
    from trials.study.storage import open_storage
    from trials.study.store import JobStore

    job = loads_spec("maxTrialCount: 2\nstudySpec:\n  metrics: [{metricId: loss, goal: MINIMIZE}]\n"
                     "  parameters: [{parameterId: x, doubleValueSpec: {minValue: 0, maxValue: 1}}]\n")
    url = f"journal:{tmp_path / 'journal.log'}"
    JobStore.create(open_storage(url), "j", job, {"maxTrialCount": 2}, JobMeta(state=JobState.QUEUED),
                    sampler_name="tpe", seed=None)
    return url, lambda: JobStore.open(open_storage(url), "j")


def _attr_writes(store, monkeypatch) -> list[str]:
    written: list[str] = []
    original = store.storage.set_study_user_attr
    monkeypatch.setattr(store.storage, "set_study_user_attr",
                        lambda study_id, key, value: (written.append(key), original(study_id, key, value)))
    return written


def test_a_store_writes_the_version_at_creation_and_only_the_changed_members_after(tmp_path, monkeypatch):
    _, opened = _store(tmp_path)
    store = opened()
    attrs = store.storage.get_study_user_attrs(0)
    assert attrs["trials:version"] == 1 and "trials:seed" not in attrs  # a default is left out
    meta = store.meta()
    assert (meta.spec, meta.sampler, meta.state) == ({"maxTrialCount": 2}, "tpe", JobState.QUEUED)
    written = _attr_writes(store, monkeypatch)
    store.write_meta(replace(meta, state=JobState.RUNNING, end_time=None), since=meta)
    assert written == ["trials:state"]  # end_time was None already
    assert opened().meta() == replace(meta, state=JobState.RUNNING)


def test_a_newer_writers_member_survives_a_write_and_a_newer_version_refuses_to_open(tmp_path):
    from trials.study.storage import open_storage

    url, opened = _store(tmp_path)
    newer = open_storage(url)  # what a newer trials of the same version writes beside the members it knows
    newer.set_study_user_attr(0, "trials:placement_policy", {"spread": True})
    store = opened()
    meta = store.meta()
    assert meta.extra == {"placement_policy": {"spread": True}}
    store.write_meta(replace(meta, state=JobState.RUNNING), since=meta)
    store.write_meta(store.meta())  # the whole record, written again
    assert opened().meta().extra == {"placement_policy": {"spread": True}}
    newer.set_study_user_attr(0, "trials:version", 2)
    with pytest.raises(JobMetaError, match="^job 'j' was written by a newer trials: its metadata version is 2, "):
        opened()

"""Tests for trials.runtime.context: TrialEnv resolution, report/stop/checkpoint/restore on TrialContext."""

import json
import os

import pytest

from trials import protocol
from trials.errors import CheckpointError, ConfigError, MetricsError
from trials.runtime.context import RunOptions, TrialContext, TrialEnv
from trials.runtime.reporting import read_hypertune_file


def make_ctx(environ=None, **options):
    env = TrialEnv(environ)
    env.make_dirs()
    return TrialContext(config=None, env=env, options=RunOptions(tensorboard=False, **options))


def test_local_env_puts_everything_under_the_output_root(tmp_path):
    env = TrialEnv({"TRIALS_OUTPUT_ROOT": str(tmp_path)}, now=0)
    assert env.is_local and env.trial_id is None
    assert env.output_dir.startswith(str(tmp_path)) and env.trial_dir == env.output_dir
    assert env.model_dir == os.path.join(env.output_dir, "model")
    assert env.checkpoint_dir == os.path.join(env.output_dir, "checkpoints")
    assert env.tensorboard_dir == os.path.join(env.output_dir, "logs")
    assert env.metric_file == os.path.join(env.output_dir, "hypertune.metrics")
    assert env.metrics_log == os.path.join(env.output_dir, "metrics.jsonl")


def test_tuning_env_maps_gs_paths_and_reads_ids(tmp_path):
    env = TrialEnv({
        "CLOUD_ML_TRIAL_ID": "3", "CLOUD_ML_JOB_ID": "j", "CLOUD_ML_PROJECT_ID": "42",
        "AIP_MODEL_DIR": "gs://bucket/out/3/model/", "AIP_CHECKPOINT_DIR": str(tmp_path / "c"),
        "TRIALS_GCS_ROOT": str(tmp_path / "gcs"), "TRIALS_ATTEMPT": "2",
        "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "m" / "f"),
    })
    assert not env.is_local and (env.trial_id, env.job_id, env.project_number) == ("3", "j", "42")
    assert env.model_dir == str(tmp_path / "gcs" / "bucket" / "out" / "3" / "model")
    assert env.checkpoint_dir == str(tmp_path / "c") and env.attempt == 2
    assert env.trial_dir.endswith(os.path.join("trials-output", "trial-3"))  # no TRIALS_TRIAL_DIR
    assert env.metric_file == str(tmp_path / "m" / "f")


def test_tuning_env_without_metric_file_uses_the_library_default():
    assert TrialEnv({"CLOUD_ML_TRIAL_ID": "1"}).metric_file == "/tmp/hypertune/output.metrics"


@pytest.mark.parametrize("environ, needle", [
    ({"TRIALS_ATTEMPT": "x"}, "$TRIALS_ATTEMPT must be an integer"),
    ({"CLOUD_ML_HP_METRIC_FILE": "bare"}, "must be a path with a directory"),
    ({"AIP_MODEL_DIR": "gs://b/../x"}, "$AIP_MODEL_DIR"),
])
def test_bad_env(environ, needle):
    with pytest.raises(ConfigError) as info:
        TrialEnv(environ)
    assert needle in str(info.value)


def test_report_writes_both_files_and_is_skipped_on_replay(trial_env):
    ctx = make_ctx()
    assert ctx.report(1, accuracy=0.5) and ctx.report(2, {"val/loss": 0.1}, accuracy=0.6)
    ctx.close()
    assert [m.step for m in read_hypertune_file(trial_env.metric_file)] == [1, 2]
    again = make_ctx()
    assert again.last_step == 2 and not again.report(2, accuracy=0.6)
    again.close()


def test_nonfinite_needs_opt_in(trial_env):
    ctx = make_ctx()
    with pytest.raises(MetricsError, match="allow_nonfinite=True"):
        ctx.report(1, loss=float("inf"))
    assert ctx.report(1, loss=float("inf"), allow_nonfinite=True)
    ctx.close()


def test_only_the_primary_reports_by_default(trial_env):
    spec = {"cluster": {"workerpool0": ["a"], "workerpool1": ["b"]},
            "task": {"type": "workerpool1", "index": 0, "trial": "1"}}
    trial_env.set(CLUSTER_SPEC=json.dumps(spec))
    ctx = make_ctx()
    assert not ctx.is_primary and not ctx.report(1, accuracy=0.5)
    assert ctx.checkpoint({"s": 1}, 1) is None
    assert not os.path.exists(trial_env.metric_file)
    ctx_all = make_ctx(all_replicas=True)
    assert ctx_all.report(1, accuracy=0.5)
    ctx_all.close()


def test_checkpoint_restore_and_start_step(trial_env):
    ctx = make_ctx(keep_checkpoints=2)
    assert ctx.restore({"fresh": True}) == {"fresh": True} and ctx.start_step == 1
    for step in ctx.steps(4):
        ctx.report(step, accuracy=step / 10)
        ctx.checkpoint({"epoch": step})  # step defaults to the last reported one
    assert sorted(os.listdir(trial_env.checkpoint_dir)) == ["ckpt-00000003.json",
                                                          "ckpt-00000004.json"]
    ctx.close()
    resumed = make_ctx()
    assert resumed.restore() == {"epoch": 4} and resumed.restored_step == 4
    assert resumed.start_step == 5 and list(resumed.steps(6)) == [5, 6]


def test_checkpoint_without_step_or_report_is_an_error(trial_env):
    with pytest.raises(CheckpointError, match="needs a step"):
        make_ctx().checkpoint({"a": 1})


def test_checkpoint_every_defers_and_flushes(trial_env):
    ctx = make_ctx(checkpoint_every=3)
    for step in (1, 2, 3, 4):
        ctx.checkpoint({"s": step}, step)
    assert ctx.store.steps() == [3]
    ctx.flush_checkpoint()
    assert ctx.store.steps() == [3, 4]
    assert ctx.flush_checkpoint() is None


def test_stop_request_ends_steps_between_steps(trial_env):
    ctx = make_ctx()
    seen = []
    for step in ctx.steps(10):
        seen.append(step)
        if step == 2:
            ctx.request_stop("test")
    assert seen == [1, 2] and ctx.should_stop and ctx.stop_reason == "test"


def test_stop_file_sets_should_stop(trial_env):
    ctx = make_ctx()
    assert not ctx.should_stop
    trial_env.stop()
    assert ctx.should_stop and ctx.stop_reason == "stop file"


def test_checkpoint_when_stopping_is_written_even_off_the_interval(trial_env):
    ctx = make_ctx(checkpoint_every=5)
    ctx.request_stop()
    assert ctx.checkpoint({"s": 2}, 2) is not None


def test_identity_and_paths(trial_env):
    ctx = make_ctx()
    assert (ctx.trial_id, ctx.job_id, ctx.project_number) == ("1", "pytest-job", "123456789012")
    assert ctx.model_dir == trial_env.model_dir and os.path.isdir(ctx.model_dir)
    assert ctx.checkpoint_dir == trial_env.checkpoint_dir
    assert ctx.tensorboard_dir == trial_env.tensorboard_dir
    assert ctx.local_path("gs://b/x/y") == os.path.join(trial_env.gcs_root, "b", "x", "y")
    assert ctx.role.replica == protocol.replica_name(0, 0) and ctx.attempt == 0


def test_trial_id_falls_back_to_cluster_spec(trial_env):
    trial_env.set(CLOUD_ML_TRIAL_ID=None,
                  CLUSTER_SPEC=json.dumps({"task": {"type": "workerpool0", "index": 0,
                                                    "trial": "9"}}))
    assert make_ctx().trial_id == "9"


def test_bad_run_options():
    with pytest.raises(ConfigError, match="checkpoint_every must be an integer >= 1"):
        RunOptions(checkpoint_every=0)


def test_log_labels_come_from_the_env_and_cluster_spec(trial_env):
    trial_env.set(TRIALS_REPLICA=None, CLOUD_ML_TRIAL_ID=None, TRIALS_ATTEMPT="2",
                  CLUSTER_SPEC=json.dumps({"cluster": {"workerpool0": ["a"], "workerpool1": ["b"]},
                                           "task": {"type": "workerpool1", "index": 0,
                                                    "trial": "5"}}))
    assert make_ctx()._labels() == {"trial_id": "5", "replica": "workerpool1-0", "attempt": "2"}
    trial_env.set(CLUSTER_SPEC="{bad", CLOUD_ML_TRIAL_ID="4")
    assert make_ctx()._labels() == {"trial_id": "4", "attempt": "2"}


def test_a_tuning_run_without_aip_checkpoint_dir_warns_where_its_checkpoints_go(tmp_path, caplog):
    """No baseOutputDirectory, no AIP_CHECKPOINT_DIR (as on Vertex): the checkpoints go to the trial's own
    folder, which a restarted replica on Vertex does not find; the log says so once."""
    environ = {"CLOUD_ML_TRIAL_ID": "2", "TRIALS_TRIAL_DIR": str(tmp_path / "t")}
    ctx = make_ctx(environ)
    with caplog.at_level("WARNING"):
        ctx.report(1, accuracy=0.5)
        ctx.checkpoint({"epoch": 1})
        ctx.checkpoint({"epoch": 2}, step=2)
    warned = [r.getMessage() for r in caplog.records if "AIP_CHECKPOINT_DIR is not set" in r.getMessage()]
    assert len(warned) == 1 and str(tmp_path / "t" / "checkpoints") in warned[0], caplog.records
    assert os.listdir(tmp_path / "t" / "checkpoints")
    ctx.close()
    caplog.clear()
    with_dir = make_ctx({**environ, "AIP_CHECKPOINT_DIR": str(tmp_path / "c")})
    with caplog.at_level("WARNING"):
        with_dir.report(1, accuracy=0.5)
        with_dir.checkpoint({"epoch": 1})
    assert not [r for r in caplog.records if "AIP_CHECKPOINT_DIR" in r.getMessage()]
    with_dir.close()

"""Every example runs through `trials sweep` (small counts), from the repository root as documented."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trials.cli import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
IMAGE = "us-docker.pkg.dev/my-project/trainers/digits-mlp:1"


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the specs name their commands relative to the repository root


def _sweep(tmp_path, capsys, *argv) -> dict:
    code = main(["sweep", *argv[:1], "--root", str(tmp_path), "--job-id", "ex", "--seed", "3", *argv[1:]])
    out = capsys.readouterr().out
    assert code == 0, out
    assert main(["describe", "ex", "--root", str(tmp_path), "--format", "json"]) == 0
    rest = json.loads(capsys.readouterr().out)
    assert rest["state"] == "JOB_STATE_SUCCEEDED"
    return rest


def _final(trial) -> dict:
    return {m["metricId"]: m["value"] for m in trial["finalMeasurement"]["metrics"]}


def _params(trial) -> dict:
    return {p["parameterId"]: p["value"] for p in trial["parameters"]}


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="the digits data ships with scikit-learn")
def test_digits_mlp_runtime_example_and_its_report(tmp_path, capsys, at_root):
    rest = _sweep(tmp_path, capsys, "search_spaces/digits_mlp.yaml", "--max-trial-count", "3")
    assert len(rest["trials"]) == 3
    for t in rest["trials"]:
        assert t["state"] == "SUCCEEDED"
        assert 0.0 < _final(t)["accuracy"] <= 1.0
        # the spec's base gs://my-bucket/digits-mlp is the job's local bucket folder
        assert (tmp_path / "ex" / "gcs" / "my-bucket" / "digits-mlp" / t["id"] / "model" / "model.npz").is_file()
    # the report of a finished example job: every file exists and is not empty
    assert main(["report", "ex", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "ex" / "report"
    expected = {"index.html", "optimization_history.png", "intermediate_values.png",
                "parallel_coordinate.png", "param_importances.png"}
    assert set(os.listdir(folder)) == expected
    assert all((folder / name).stat().st_size > 0 for name in expected)
    assert "Top 3 trials by accuracy" in out and str(folder / "index.html") in out


def test_argparse_hypertune_trainer_is_tuned_unchanged(tmp_path, capsys, at_root):
    train = EXAMPLES / "argparse_hypertune" / "train.py"
    imports = {ln.split()[1] for ln in train.read_text().splitlines() if ln.startswith(("import ", "from "))}
    assert "trials" not in imports and {"argparse", "hypertune"} <= imports  # plain argparse + hypertune
    rest = _sweep(tmp_path, capsys, "examples/argparse_hypertune/config.yaml", "--max-trial-count", "4",
                  "--", "python", str(train))
    assert [t["state"] for t in rest["trials"]] == ["SUCCEEDED"] * 4
    for t in rest["trials"]:
        args = json.loads((tmp_path / "ex" / t["id"] / "args.json").read_text())
        argv = args["replicas"]["workerpool0-0"]
        assert argv[1:3] == [str(train), "--epochs=10"]  # the command, then the spec's args
        assert {a.split("=")[0] for a in argv[3:]} == {"--learning_rate", "--l2", "--batch_size"}
        lines = (tmp_path / "ex" / t["id"] / "hypertune.metrics").read_text().splitlines()
        assert json.loads(lines[0])["trial"] == t["id"]  # hypertune wrote where Vertex would tell it
        assert len(t["measurements"]) >= 1 and _final(t)["val_loss"] > 0


def test_multi_replica_primary_reports_workers_get_ranks_and_are_stopped(tmp_path, capsys, at_root):
    rest = _sweep(tmp_path, capsys, "examples/multi_replica/config.yaml", "--max-trial-count", "2")
    for t in rest["trials"]:
        assert t["state"] == "SUCCEEDED" and len(t["measurements"]) == 20
        trial_dir = tmp_path / "ex" / t["id"]
        env = json.loads((trial_dir / "env.json").read_text())
        assert sorted(env) == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
        assert [env[r]["RANK"] for r in sorted(env)] == ["0", "1", "2"]
        assert {env[r]["WORLD_SIZE"] for r in env} == {"3"}
        assert {env[r]["MASTER_PORT"] for r in env} == {env["workerpool0-0"]["MASTER_PORT"]}
        for worker, rank in (("workerpool1-0", 1), ("workerpool1-1", 2)):
            log = (trial_dir / f"{worker}.stdout.log").read_text()
            assert f"rank {rank}: training done; waiting to be stopped" in log
            # the workers never exit on their own: the controller stopped them after the primary's exit 0
            assert f"rank {rank}: SIGTERM received after the primary finished" in log
            assert not (trial_dir / f"{worker}.hypertune.metrics").exists()  # only the primary reports
        # averaged gradients over 3 shards == full-batch training in one process
        flags = [f"--{k}={v!r}" for k, v in _params(t).items()]
        alone = subprocess.run(
            [sys.executable, str(EXAMPLES / "multi_replica" / "train.py"), "--epochs=20", *flags],
            env={**os.environ, "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / f"alone{t['id']}.metrics")},
            capture_output=True, text=True, timeout=60, check=True)
        last = alone.stdout.strip().splitlines()[-1]
        assert last.startswith("epoch 20: val_loss=")
        alone_loss = float(last.split("=")[1].split()[0])
        assert _final(t)["val_loss"] == pytest.approx(alone_loss, rel=1e-5)


def test_conditional_search_space_passes_only_active_flags(tmp_path, capsys, at_root):
    rest = _sweep(tmp_path, capsys, "examples/conditional/search_space.yaml", "--max-trial-count", "6",
                  "--algorithm", "RANDOM_SEARCH")
    seen = set()
    for t in rest["trials"]:
        assert t["state"] == "SUCCEEDED"
        p = _params(t)
        assert ("hidden_units" in p) == ("activation" in p) == (p["model"] == "mlp")
        assert ("momentum" in p) == (p["optimizer"] == "sgd")
        assert ("beta1" in p) == (p["optimizer"] == "adam")
        assert ("nesterov" in p) == (p.get("momentum") == 0.9)
        argv = json.loads((tmp_path / "ex" / t["id"] / "args.json").read_text())["replicas"]["workerpool0-0"]
        assert sorted(a.split("=")[0][2:] for a in argv[3:]) == sorted(p)  # the flags are exactly the active ones
        final = _final(t)
        assert set(final) == {"accuracy", "n_params"}
        assert final["n_params"] == (3 if p["model"] == "linear" else 4 * p["hidden_units"] + 1)
        seen.add((p["model"], p["optimizer"]))
    assert len(seen) >= 2  # more than one branch was exercised


@pytest.mark.parametrize("fmt", ["rest-json", "gcloud-yaml"])
def test_vertex_example_export_of_digits_mlp_validates(capsys, fmt, at_root):
    types = pytest.importorskip("google.cloud.aiplatform_v1.types",
                                reason="google-cloud-aiplatform is not installed")
    assert main(["export", "search_spaces/digits_mlp.yaml", "--format", fmt, "--image-uri", IMAGE]) == 0
    text = capsys.readouterr().out
    body = json.loads(text) if fmt == "rest-json" else yaml.safe_load(text)
    job = types.HyperparameterTuningJob.from_json(json.dumps(body))
    pool = job.trial_job_spec.worker_pool_specs[0]
    assert pool.container_spec.image_uri == IMAGE
    assert list(pool.container_spec.command) == ["python", "examples/digits_mlp/train.py"]
    assert pool.machine_spec.machine_type and pool.replica_count == 1
    assert job.max_trial_count == 12 and job.parallel_trial_count == 2
    assert {p.parameter_id for p in job.study_spec.parameters} == {"learning_rate", "hidden_units", "alpha",
                                                                  "batch_size"}
    assert job.study_spec.median_automated_stopping_spec is not None
    # the README's Dockerfile puts the repository where that command finds it
    dockerfile = (EXAMPLES / "vertex" / "Dockerfile").read_text()
    assert "WORKDIR /app" in dockerfile and "examples/digits_mlp" in dockerfile

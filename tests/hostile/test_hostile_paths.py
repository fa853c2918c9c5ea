"""Paths: job folders stay in the root, trial folders in the job folder, gs:// URIs in the /gcs root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trials import protocol
from trials.controller.jobs.registry import job_dir_of
from trials.controller.trial import launch
from trials.errors import ConfigError

TRAINER = str(Path(__file__).resolve().parent.parent / "scripts" / "fault_trainer.py")
BAD_IDS = ["../x", "a/b", ".", "..", "", "x\n", ".hidden", "/abs", "a\\b", "x" * 129, "a b", "~", "-x", "ü"]
GOOD_IDS = ["x", "job-1", "a..b", "A_b.c-9", "x" * 128]


@pytest.mark.parametrize("job_id", BAD_IDS)
def test_job_dir_of_refuses_ids_that_are_not_one_plain_folder_name(tmp_path: Path, job_id: str) -> None:
    with pytest.raises(ConfigError, match="a job id must be"):
        job_dir_of(str(tmp_path), job_id)


@pytest.mark.parametrize("job_id", GOOD_IDS)
def test_job_dir_of_is_a_direct_child_of_the_root(tmp_path: Path, job_id: str) -> None:
    path = job_dir_of(str(tmp_path / "root" / ".." / "root"), job_id)
    assert os.path.dirname(path) == str(tmp_path / "root")
    assert os.path.basename(path) == job_id


@pytest.mark.parametrize("trial_id", ["1", "2", "30", "100000"])
@pytest.mark.parametrize("base", ["/out", "gs://bucket/run", "gs://bucket/run/"])
def test_trial_folders_live_in_the_job_folder(trial_id: str, base: str) -> None:
    paths = launch.trial_paths("/jobs/j", base, trial_id)
    assert paths.trial_dir == f"/jobs/j/{trial_id}"
    assert paths.model_dir == base.rstrip("/") + f"/{trial_id}/model/"


@pytest.mark.parametrize("uri", ["gs://b/../x", "gs://b/x/..", "gs://../x", "gs://./x", "gs://", "gs:///x",
                                 "gs://b/x/../../../etc/passwd"])
def test_gs_uris_never_map_outside_the_gcs_root(uri: str) -> None:
    with pytest.raises(ValueError):
        protocol.local_path(uri, "/gcs-root")


@pytest.mark.parametrize("uri", ["gs://b", "gs://b/", "gs://b/x/./y", "gs://b/..x/y.."])
def test_plain_gs_uris_map_under_the_gcs_root(uri: str) -> None:
    local = protocol.local_path(uri, "/gcs-root")
    assert os.path.normpath(local).startswith("/gcs-root/b")


@pytest.mark.integration
def test_a_job_writes_only_in_its_folder_and_gs_outputs_in_its_gcs_root(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    spec = work / "spec.yaml"
    spec.write_text("metrics: {loss: minimize}\n"
                    "parameters:\n  p: {type: categorical, values: ['../../escape', '/tmp/abs']}\n"
                    "algorithm: grid\nmax_trial_count: 2\nparallel_trial_count: 2\n"
                    f"command: [python, {TRAINER}]\nargs: [--fault=argv, --epochs=1]\n"
                    "base_output_dir: gs://bucket/runs/\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUD_ML_", "AIP_", "TRIALS_"))}
    out = subprocess.run([sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", "paths",
                          "--grace-period", "1"], cwd=work, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    job = work / "trials-jobs" / "paths"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert sorted(p.name for p in work.iterdir()) == ["spec.yaml", "trials-jobs"]
    assert sorted(p.name for p in (work / "trials-jobs").iterdir()) == ["paths"]
    assert sorted(p.name for p in job.iterdir() if p.is_dir()) == ["1", "2", "gcs"]
    for trial_id in ("1", "2"):
        env_json = json.loads((job / trial_id / "env.json").read_text())["workerpool0-0"]
        assert env_json["AIP_MODEL_DIR"] == f"gs://bucket/runs/{trial_id}/model/"
        assert (job / "gcs" / "bucket" / "runs" / trial_id / "model").is_dir()
    assert not (tmp_path / "escape").exists() and not Path("/tmp/abs").exists()

"""Huge grids are enumerated lazily; absurd replica counts are refused at validation."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))
from faultkit import TRAINER, Jobs  # noqa: E402

pytestmark = [pytest.mark.faults]

HUGE_GRID = "metrics: {loss: minimize}\nparameters:\n" + "".join(
    f"  p{i}: {{type: integer, min: 0, max: 1000}}\n" for i in range(8)) + (
    "algorithm: grid\nmax_trial_count: 1\n")


@pytest.fixture
def jobs(tmp_path: Path):
    j = Jobs(tmp_path)
    yield j
    j.cleanup()


def _limit_memory() -> None:  # 2 GiB of address space: building 1001**8 points fails fast, not late
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_a_grid_of_1001_to_the_8th_points_runs_its_first_trials(jobs: Jobs, monkeypatch) -> None:
    import subprocess

    popen = subprocess.Popen.__init__

    def limited(self, *args, **kwargs):  # every process the test starts runs under the limit
        kwargs.setdefault("preexec_fn", _limit_memory)
        popen(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", limited)
    spec = jobs.root / "grid.yaml"
    spec.write_text(HUGE_GRID)
    job_id = jobs.job_id("hugegrid")
    out = jobs.cli("validate", str(spec), timeout=60)
    assert out.returncode == 0, out.stderr
    out = jobs.sweep(str(spec), job_id, "--epochs=1", opts=["--quiet"], timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    out = jobs.cli("resume", job_id, "--max-trial-count", "3", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    rest = jobs.describe(job_id)
    assert [t["state"] for t in rest["trials"]] == ["SUCCEEDED"] * 3
    points = [{p["parameterId"]: p["value"] for p in t["parameters"]} for t in rest["trials"]]
    # the first grid points, the last parameter innermost
    assert [[int(pt[f"p{i}"]) for i in range(8)] for pt in points] == [
        [0] * 7 + [k] for k in range(3)]


@pytest.mark.parametrize("form,text", [
    ("short", "metrics: {loss: minimize}\nparameters:\n  x: {type: double, min: 0, max: 1}\n"
              "command: [python, x.py]\nreplica_count: 100000\n"),
    ("gcloud", "studySpec:\n  metrics: [{metricId: loss, goal: MINIMIZE}]\n"
               "  parameters: [{parameterId: x, doubleValueSpec: {minValue: 0, maxValue: 1}}]\n"
               "trialJobSpec:\n  workerPoolSpecs:\n  - {replicaCount: 100000, containerSpec: "
               "{imageUri: local, command: [python]}, machineSpec: {machineType: n1-standard-4}}\n"),
])
def test_an_absurd_replica_count_is_refused_at_validation(jobs: Jobs, form: str, text: str) -> None:
    spec = jobs.root / "spec.yaml"
    spec.write_text(text)
    for command in ("validate", "sweep"):
        out = jobs.cli(command, str(spec), "--", "python", TRAINER, timeout=60)
        assert out.returncode == 2, out.stdout + out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "100000" in lines[0] and "256" in lines[0], out.stderr
    assert not (jobs.root / "trials-jobs").exists()

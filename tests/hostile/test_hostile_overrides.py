"""Command-line overrides are checked with the spec's rules before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPEC = "metrics: {loss: minimize}\nparameters:\n  x: {type: double, min: 0, max: 1}\nmax_trial_count: 2\n"
TRAINER = str(Path(__file__).resolve().parent.parent / "scripts" / "fault_trainer.py")

CASES = [
    (["--max-trial-count", "99999999999999999999"], "--max-trial-count", 2),
    (["--max-trial-count", "2147483648"], "--max-trial-count", 2),
    (["--parallel-trial-count", "0"], "--parallel-trial-count", 2),
    (["--max-failed-trial-count", "-1"], "--max-failed-trial-count", 2),
    (["--max-failed-trial-count", "3"], "--max-failed-trial-count", 2),
    (["--seed", "-1"], "--seed", 2),
    (["--seed", "99999999999"], "--seed", 2),
    (["--base-output-dir", "gs://bucket/../../etc"], "--base-output-dir", 2),
    (["--storage", "nonsense"], "--storage", 2),
    (["--storage", "postgresql://trials@127.0.0.1:1/none"], "127.0.0.1:1", 1),
]


@pytest.mark.parametrize("argv,fragment,code", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_bad_override_is_one_line_and_leaves_nothing_behind(tmp_path: Path, argv: list[str],
                                                               fragment: str, code: int) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIALS_", "CLOUD_ML_"))}
    out = subprocess.run([sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", "j", *argv,
                          "--", sys.executable, TRAINER], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == code, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], out.stderr
    assert "internal error" not in out.stderr
    assert not (tmp_path / "trials-jobs" / "j").exists()  # no empty job folder, no .creating file


def test_resume_checks_max_trial_count_with_the_spec_rule(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("max_trial_count: 2", "max_trial_count: 1"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIALS_", "CLOUD_ML_"))}

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trials", *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    assert cli("sweep", str(spec), "--job-id", "j", "--quiet", "--", sys.executable, TRAINER).returncode == 0
    journal = (tmp_path / "trials-jobs" / "j" / "journal.log").read_bytes()
    out = cli("resume", "j", "--max-trial-count", "99999999999999999999")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--max-trial-count" in out.stderr and "2147483647" in out.stderr
    assert (tmp_path / "trials-jobs" / "j" / "journal.log").read_bytes() == journal

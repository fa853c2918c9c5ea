"""Chaos mode: injected maintenance restarts (SIGTERM + restart, same trial id and env)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.faults]

REPO = Path(__file__).resolve().parents[2]
DIGITS_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
SUMMARY = re.compile(r"chaos: (\d+) restarts injected; measurements (consistent|INCONSISTENT)")


def run_digits(jobs, job_id: str, spec: Path, *opts: str):
    """The digits example job (3 trials, 2 in parallel) run from the repository root."""
    out = jobs.cli("sweep", str(spec), "--root", str(jobs.root / "trials-jobs"), "--job-id", job_id,
                   "--max-trial-count", "3", "--grace-period", "5", *opts, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    return out


def check_restart_consistent(jobs, job_id: str, stdout: str) -> int:
    match = SUMMARY.search(stdout)
    assert match, stdout[-2000:]
    n_injected = int(match.group(1))
    assert match.group(2) == "consistent"
    study = jobs.optuna_study(job_id)
    assert [t.user_attrs["state"] for t in study.trials] == ["SUCCEEDED"] * len(study.trials)
    assert sum(t.user_attrs.get("injected_restarts", 0) for t in study.trials) == n_injected
    for t in study.trials:
        steps = [m["step"] for m in t.user_attrs["measurements"]]
        n_steps = 10 if not t.user_attrs.get("stopped_early") else len(steps)
        assert steps == list(range(1, n_steps + 1)), (t.number + 1, steps)  # none lost, none twice
        # Each injection ended an attempt: exit 75 (the runtime stopped between epochs), 143 (SIGTERM
        # came before its handler was set) or 0 (the trial was finishing anyway: no restart needed).
        exits = [a["exitStatus"] for a in t.user_attrs["attempts"] if "exitStatus" in a]
        if t.user_attrs.get("stopped_early"):
            exits = exits[:-1]  # the median rule stopped the last attempt, not an injection
        stops = [status for status in exits if status]
        assert set(stops) <= {75, 143}, t.user_attrs["attempts"]
        assert len(stops) in (t.user_attrs.get("injected_restarts", 0),
                              t.user_attrs.get("injected_restarts", 0) - 1), t.user_attrs["attempts"]
    return n_injected


def test_inject_restarts_on_the_digits_example(jobs) -> None:
    job_id = jobs.job_id("chaos")
    # A digits trial lasts 0.2-0.4 s on a quiet machine: seed 31's first injection comes due 8 ms after
    # the first trial's launch (rate 1.5 per trial-second), so at least one lands however fast it runs.
    out = run_digits(jobs, job_id, DIGITS_SPEC, "--inject-restarts", "1.5", "--seed", "31")
    assert check_restart_consistent(jobs, job_id, out.stdout) > 0


def test_inject_restarts_from_the_spec_local_options(jobs) -> None:
    spec = jobs.root / "digits_chaos.yaml"
    spec.write_text(DIGITS_SPEC.read_text() + "local: {inject_restarts: 1.0}\n")
    job_id = jobs.job_id("chaosspec")
    out = run_digits(jobs, job_id, spec, "--seed", "31")  # first injection due 12 ms after launch
    assert check_restart_consistent(jobs, job_id, out.stdout) > 0


def test_a_trainer_that_is_not_restart_consistent_is_called_out(jobs) -> None:
    job_id = jobs.job_id("drift")
    out = jobs.sweep(jobs.spec(n=2, parallel=2), job_id, "--fault=drift", "--epochs=20", "--sleep=0.05",
                     opts=["--inject-restarts", "2", "--seed", "1"])
    match = SUMMARY.search(out.stdout)
    assert match and int(match.group(1)) > 0, out.stdout[-2000:]
    assert "measurements INCONSISTENT" in out.stdout
    assert re.search(r"INCONSISTENT: \d+ steps reported twice with different values", out.stdout)


def test_a_replica_that_is_stopping_is_not_injected_again(jobs) -> None:
    job_id = jobs.job_id("slowstop")
    # Seed 28 injects into both trials in their first 0.15 s; each stop then takes 1 s, during
    # which more injections come due (rate 1/s): they must not count as more restarts.
    out = jobs.sweep(jobs.spec(n=2, parallel=2), job_id, "--fault=slowstop", "--stop-s=1",
                     "--epochs=5", "--sleep=0.1", opts=["--inject-restarts", "1", "--seed", "28"])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    assert SUMMARY.search(out.stdout), out.stdout[-2000:]
    for t in jobs.optuna_study(job_id).trials:
        stops = [a for a in t.user_attrs["attempts"] if a.get("exitStatus")]
        # one injection per stop; at most one more landing while the last attempt was exiting 0
        assert t.user_attrs.get("injected_restarts", 0) - len(stops) in (0, 1), t.user_attrs["attempts"]


def test_a_trainer_killed_by_every_injection_is_restarted_not_recorded_done(jobs) -> None:
    # Issue 11 §1 / issue 12 item 2: the trainer dies at once on SIGTERM (exit 143), often while its
    # interpreter starts. An exit landing between two polls of one loop tick was never classified,
    # so the trial was recorded SUCCEEDED with the steps it had reached, without a restart.
    job_id = jobs.job_id("sigdie")
    out = jobs.sweep(jobs.spec(n=12, parallel=3), job_id, "--epochs=5", "--sleep=0.1",
                     opts=["--inject-restarts", "3", "--seed", "5"], timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    match = SUMMARY.search(out.stdout)
    assert match and int(match.group(1)) > 0, out.stdout[-2000:]
    assert match.group(2) == "consistent", out.stdout[-2000:]
    trials = jobs.optuna_study(job_id).trials
    assert len(trials) == 12
    for t in trials:
        steps = [m["step"] for m in t.user_attrs["measurements"]]
        assert t.user_attrs["state"] == "SUCCEEDED", (t.number + 1, t.user_attrs)
        assert steps == [1, 2, 3, 4, 5], (t.number + 1, steps, t.user_attrs["attempts"])
        exits = [a["exitStatus"] for a in t.user_attrs["attempts"] if "exitStatus" in a]
        assert exits[-1] == 0, (t.number + 1, t.user_attrs["attempts"])  # the last attempt finished
        assert set(exits[:-1]) <= {143}, t.user_attrs["attempts"]

"""A trial's measurements across controller restarts: the record is the union of every attempt's
reports, whichever controller read them (issue 23, item 3)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from faultkit import SCRIPTS, Jobs, wait_no_processes

from trials import protocol
from trials.hypertune_file import parse_hypertune_text

pytestmark = [pytest.mark.faults]

TRAINER = str(SCRIPTS / "resume_trainer.py")
N_TRIALS = 10
EPOCHS = 8
N_KILLS = 3
SET_TRIAL_INTERMEDIATE_VALUE = 7  # optuna's JournalOperation code


def journal_steps(job_dir: Path) -> dict[int, set[int]]:
    """Trial number -> the steps whose intermediate value a controller wrote to the journal."""
    out: dict[int, set[int]] = {}
    try:
        text = (job_dir / "journal.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            op = json.loads(line)
        except ValueError:
            continue  # a torn last record (the controller was SIGKILLed)
        if isinstance(op, dict) and op.get("op_code") == SET_TRIAL_INTERMEDIATE_VALUE:
            out.setdefault(int(op["trial_id"]), set()).add(int(op["step"]))
    return out


def file_steps(job_dir: Path, number: int) -> list[int]:
    """The steps the trial's hypertune file holds now (it holds only its current process's)."""
    try:
        text = (job_dir / str(number + 1) / protocol.HYPERTUNE_FILE).read_text(errors="replace")
    except OSError:
        return []
    return sorted({line.step for line in parse_hypertune_text(text)})


def lost_at_kill(job_dir: Path, number: int) -> set[int]:
    """The steps of trial ``number`` that the kill of its controller just now lost: a trainer dies with
    its controller (PR_SET_PDEATHSIG), and when that is in the middle of cloudml-hypertune's
    truncate-and-rewrite of its file (seen: 0 bytes, ~1 kill in 10 of a trainer reporting 66 times a
    second, under load), the steps up to its checkpoint that only that file held are gone, as they
    would be on Vertex. A whole file loses nothing."""
    assert wait_no_processes(str(job_dir / str(number + 1)), timeout_s=10.0) == [], "a trainer outlived its controller"
    try:
        raw = (job_dir / str(number + 1) / protocol.HYPERTUNE_FILE).read_bytes()
        done = int(json.loads((job_dir / str(number + 1) / "ckpt.json").read_text())["epoch"])
    except FileNotFoundError:
        return set()
    if raw.endswith(b"\n") and len(parse_hypertune_text(raw.decode())) == len(raw.splitlines()):
        return set()  # whole
    kept = journal_steps(job_dir).get(number, set()) | set(file_steps(job_dir, number))
    return set(range(1, done + 1)) - kept


def wait_for(proc: subprocess.Popen, what: str, condition, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found is not None:
            return found
        assert proc.poll() is None, f"the controller ended before {what}: {proc.communicate()[1]}"
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.long
def test_a_trial_resumed_by_several_controllers_keeps_every_step(jobs: Jobs) -> None:
    """SIGKILL the controller at chosen moments, ``trials resume`` each time.

    First kill: a trial has its step 2 in the journal. Each later kill: a trial's hypertune file
    was rewritten by a process resumed from its checkpoint (its first step is past 1) whose earlier
    steps only the storage holds (an earlier controller read them from the replaced file). The
    next controller must start from the storage: every SUCCEEDED trial has steps 1..8.
    """
    job_id = jobs.job_id("union")
    job_dir = jobs.job_dir(job_id)
    spec = jobs.spec(n=N_TRIALS, parallel=2)
    proc = jobs.start("sweep", spec, "--job-id", job_id, "--grace-period", "0.3", "--seed", "3",
                      "--quiet", "--", "python", TRAINER, f"--epochs={EPOCHS}", "--sleep=0.3")

    def step_2_stored():
        return next((n for n, steps in journal_steps(job_dir).items() if 2 in steps), None)

    first_steps: dict[int, int] = {}  # trial -> first step of its file at the previous kill
    lost: dict[int, set[int]] = {}  # trial -> steps a kill lost with its hypertune file (lost_at_kill)
    triggers = []
    for kill in range(N_KILLS):
        if kill == 0:
            triggers.append(wait_for(proc, "a trial's step 2 in the journal", step_2_stored))
        else:
            def rewritten_after_resume():
                stored = journal_steps(job_dir)
                for number, steps in stored.items():
                    held = file_steps(job_dir, number)
                    if (held and held[0] > 1 and held[-1] < EPOCHS and first_steps.get(number) != held[0]
                            and min(steps) < held[0]):
                        return number, held[0]
                return None

            number, first = wait_for(proc, "a resumed trial's fresh hypertune file", rewritten_after_resume)
            first_steps[number] = first
            triggers.append((number, first))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        for number in range(N_TRIALS):
            lost[number] = lost.get(number, set()) | lost_at_kill(job_dir, number)
        for number in journal_steps(job_dir):
            held = file_steps(job_dir, number)
            if held:
                first_steps.setdefault(number, held[0])
        proc = jobs.start("resume", job_id, "--grace-period", "0.3", "--quiet")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err

    job = jobs.describe(job_id)
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert len(job["trials"]) == N_TRIALS
    missing = {}
    for trial in job["trials"]:
        assert trial["state"] == "SUCCEEDED", trial
        steps = [int(m["stepCount"]) for m in trial["measurements"]]
        if steps != [s for s in range(1, EPOCHS + 1) if s not in lost.get(int(trial["id"]) - 1, set())]:
            missing[trial["id"]] = steps
        # elapsed times count from the trial's start, whichever controller read the step
        elapsed = [float(m["elapsedDuration"].rstrip("s")) for m in trial["measurements"]]
        assert elapsed == sorted(elapsed), (trial["id"], elapsed)
        assert trial["finalMeasurement"]["stepCount"] == str(EPOCHS)
    assert not missing, f"trials with steps missing after the kills at {triggers}: {missing} (lost: {lost})"
    assert wait_no_processes(jobs.tag) == [], "orphan processes outlived the job"


RETURN_SPEC = """\
metrics: {accuracy: maximize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
max_trial_count: 1
parallel_trial_count: 1
"""


def test_a_resumed_run_that_trained_nothing_does_not_record_its_return_value(jobs: Jobs, tmp_path: Path) -> None:
    """Attempt 0 exits right after its last checkpoint (step 10 of 10); the restarted attempt
    trains no step and returns 0.0 from before its loop: no step 11, the final measurement is
    step 10's, and the trial's log says once why the returned value was not recorded."""
    job_id = jobs.job_id("retval")
    spec = tmp_path / "return.yaml"
    spec.write_text(RETURN_SPEC)
    out = jobs.cli("sweep", str(spec), "--job-id", job_id, "--grace-period", "0.3", "--quiet", "--",
                   "python", str(SCRIPTS / "return_trainer.py"), timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    (trial,) = jobs.describe(job_id)["trials"]
    steps = [int(m["stepCount"]) for m in trial["measurements"]]
    attempts = [a.get("exitStatus") for a in jobs.local(job_id)["1"]["attempts"]]
    assert attempts == [3, 0], attempts  # a real restart: the crash, then the resumed attempt
    assert steps == list(range(1, 11)), steps
    final = trial["finalMeasurement"]
    assert final["stepCount"] == "10"
    assert final["metrics"][0]["value"] > 0.5, final
    log = (jobs.job_dir(job_id) / "1" / "workerpool0-0.stderr.log").read_text(errors="replace")
    warned = [line for line in log.splitlines() if "trained no step" in line]
    assert len(warned) == 1, log[-3000:]
    assert "accuracy=0.0" in warned[0] and "step 10" in warned[0], warned


def _limit_address_space() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))


@pytest.mark.parametrize("kind, junk_mb, sparse", [("hypertune", 8, False), ("jsonl", 8, False),
                                                   ("hypertune", 500, True), ("jsonl", 500, True)])
def test_a_junk_line_between_two_reports_is_skipped_with_one_warning(jobs: Jobs, kind: str, junk_mb: int,
                                                                    sparse: bool) -> None:
    """Step 1, a junk line of 8 MiB (or 500 MB, under a 1.5 GiB address-space limit on the
    controller, so it must not be read into memory), step 3: both steps are recorded, and one
    warning names the trial, the file and the junk line's size."""
    import subprocess as sp
    import sys

    job_id = jobs.job_id(f"junk{kind}{junk_mb}")
    out = sp.run([sys.executable, "-m", "trials", "sweep", jobs.spec(n=1), "--job-id", job_id, "--grace-period",
                  "0.3", "--", "python", str(SCRIPTS / "junk_line_trainer.py"), f"--file={kind}",
                  f"--junk-mb={junk_mb}", f"--sparse={int(sparse)}"],
                 cwd=jobs.root, env=jobs.env(), capture_output=True, text=True, timeout=120,
                 preexec_fn=_limit_address_space)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (trial,) = jobs.describe(job_id)["trials"]
    assert trial["state"] == "SUCCEEDED", trial
    assert [m["stepCount"] for m in trial["measurements"]] == ["1", "3"]
    size = junk_mb << 20
    warnings = [line for line in (out.stdout + out.stderr).splitlines() if "skipped a line" in line]
    assert len(warnings) == 1, out.stdout + out.stderr
    assert "trial 1" in warnings[0] and f"of {size} bytes" in warnings[0], warnings
    name = protocol.HYPERTUNE_FILE if kind == "hypertune" else protocol.METRICS_LOG
    assert name in warnings[0], warnings


LONG_SPEC = """\
metrics: {loss: minimize, acc: maximize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
max_trial_count: 1
parallel_trial_count: 1
"""
LONG_EPOCHS = 150  # more than two chunks of live steps (trials.records.LIVE_CHUNK_STEPS)


def live_writes(job_dir: Path) -> list[dict]:
    """Every live attribute a controller wrote to the journal (one dict a write: name -> steps)."""
    out = []
    for line in (job_dir / "journal.log").read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            op = json.loads(line)
        except ValueError:
            continue
        attrs = op.get("user_attr") if isinstance(op, dict) else None
        if isinstance(attrs, dict):
            out.append({k: v for k, v in attrs.items() if k.startswith(("live_elapsed_s", "live_metrics"))})
    return [w for w in out if w]


def test_a_long_trial_of_two_metrics_resumed_mid_run_keeps_every_step_of_both_and_writes_each_step_a_few_times(
        jobs: Jobs) -> None:
    """A trial with more steps than two chunks of its live attributes, its controller SIGKILLed past
    step 100 and resumed: every step of both metrics is recorded, and the journal holds each step's
    live entries a bounded number of times (one attribute of every step, written again at each poll,
    grew with the square of the steps).

    "Every step" but those the kill itself lost (:func:`lost_at_kill`): asking for steps 1..150
    whatever the trainer's file held failed CI once, its last checkpointed step in no record. When
    the kill left the file empty, the trial's record says so (``metrics_warning``), and only then."""
    job_id = jobs.job_id("long")
    job_dir = jobs.job_dir(job_id)
    spec = jobs.root / "long.yaml"
    spec.write_text(LONG_SPEC)
    proc = jobs.start("sweep", str(spec), "--job-id", job_id, "--grace-period", "0.3", "--quiet", "--",
                      "python", TRAINER, f"--epochs={LONG_EPOCHS}", "--sleep=0.03", "--also=acc")
    wait_for(proc, "step 100 in the journal",
             lambda: next((n for n, steps in journal_steps(job_dir).items() if max(steps) >= 100), None))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    lost = lost_at_kill(job_dir, 0)
    emptied = (job_dir / "1" / protocol.HYPERTUNE_FILE).stat().st_size == 0  # (the kill's usual cut)
    proc = jobs.start("resume", job_id, "--grace-period", "0.3", "--quiet")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err

    (trial,) = jobs.describe(job_id)["trials"]
    assert trial["state"] == "SUCCEEDED", trial
    x = next(p["value"] for p in trial["parameters"] if p["parameterId"] == "x")
    got = [(int(m["stepCount"]), {v["metricId"]: v["value"] for v in m["metrics"]}) for m in trial["measurements"]]
    assert [s for s, _ in got] == [s for s in range(1, LONG_EPOCHS + 1) if s not in lost], f"lost at the kill: {lost}"
    warning = jobs.local(job_id)["1"].get("metrics_warning", "")
    assert ("hypertune.metrics was empty after its process ended" in warning) == emptied, warning
    for step, metrics in got:
        assert metrics == {"loss": pytest.approx((x - 0.3) ** 2 + 1.0 / (step + 1)), "acc": step / 1000}, step
    elapsed = [float(m["elapsedDuration"].rstrip("s")) for m in trial["measurements"]]
    assert elapsed == sorted(elapsed)

    writes = live_writes(job_dir)
    names = {name for w in writes for name in w}
    assert {"live_elapsed_s.0", "live_elapsed_s.1", "live_elapsed_s.2", "live_metrics.2"} <= names, names
    assert not names & {"live_elapsed_s", "live_metrics"}  # no unchunked attribute
    entries = sum(len(steps) for w in writes for steps in w.values())
    assert entries <= 2 * LONG_EPOCHS * 64, entries  # each step in at most its chunk's writes (64 steps each)

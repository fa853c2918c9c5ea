"""`trials check`'s verdicts: what was seen while running a trainer, judged against the Vertex rules.

Pure: :func:`judge` turns the observations of the probe runs into one line per check; the runs
themselves are in :mod:`trials.controller.check.check`.
"""

from __future__ import annotations

import enum
import json
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

from trials.printable import printable as _escape


def _printable(text: str) -> str:
    return _escape(text, limit=200)


class Verdict(str, enum.Enum):
    PASS = "pass"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True, slots=True, kw_only=True)
class SeenReport:
    """One metric report as the controller read it (hypertune file or metrics.jsonl)."""

    tag: str
    step: int | None  # None: no global_step given (hypertune writes "0")
    value: float


@dataclass(slots=True, kw_only=True)
class RunSeen:
    """What one run of one replica did."""

    exit_code: int | None = None  # None: never exited (killed by the check)
    duration_s: float = 0.0
    stopped_by_check: bool = False  # shortened to stay in the time box
    reports: list[SeenReport] = field(default_factory=list)
    first_report_s: float | None = None  # seconds from start to the first report
    error_tail: list[str] = field(default_factory=list)
    n_log_lines: int = 0
    n_json_lines: int = 0
    written: dict[str, list[str]] = field(default_factory=dict)  # "model"/"checkpoints"/"logs" -> files
    outside_writes: list[str] = field(default_factory=list)  # relative to the working folder
    identity_reads: list[str] = field(default_factory=list)
    unset_reads: list[str] = field(default_factory=list)  # AIP_* output variables read while unset
    soft_unset_reads: list[str] = field(default_factory=list)  # the same through .get / getenv / `in`


@dataclass(slots=True, kw_only=True)
class StopSeen:
    """The SIGTERM probe: a run interrupted after some reports, then restarted."""

    sent_after_steps: list[int | None] = field(default_factory=list)  # steps reported before SIGTERM
    exit_after_s: float | None = None  # None: still running at the end of the grace period
    exit_code: int | None = None
    signal: int | None = None  # the signal that ended it (its default action), where the backend can tell
    grace_s: float = 0.0
    reported_before_restart: list[int | None] = field(default_factory=list)  # steps, once it had exited
    checkpoints_before_restart: list[str] = field(default_factory=list)
    restart: RunSeen | None = None


@dataclass(slots=True, kw_only=True)
class Observations:
    metric_ids: tuple[str, ...]
    clean: RunSeen
    stop: StopSeen | None = None  # None: the clean run ended too early to interrupt it
    secondary: RunSeen | None = None  # a non-primary replica, when the spec has several
    secondary_name: str = ""
    sandboxed: bool = False  # writes outside the working folder could be seen (overlay)
    has_base: bool = True  # the job has a base output directory: AIP_* are set
    in_image: bool = False  # the runs were containers of the job's images (their own file systems)
    interrupt_missed: bool = False  # the restart probe's run ended before its SIGTERM could be sent
    longer_run: str = ""  # how to make the run longer ("--params epochs=40"), or ""
    strict: bool = False  # (--strict) resuming and handling SIGTERM, which Vertex recommends, are required
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class Line:
    check: str
    verdict: Verdict
    seen: str
    fix: str = ""
    rule: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "verdict": self.verdict.value, "seen": self.seen, "fix": self.fix,
                "rule": self.rule}


RULE_METRIC = "the tuning metric is read from hypertune's reports with the spec's metric id as their tag"
RULE_STEP = "measurements are per global_step; early stopping and BEST_MEASUREMENT compare steps"
RULE_DIRS = "only what is written under AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR is kept"
RULE_BASE = ("AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR are set only when the job has a "
             "baseOutputDirectory")
FIX_BASE = ("give the job a base (trialJobSpec.baseOutputDirectory.outputUriPrefix: gs://BUCKET/PATH; "
            "base_output_dir in a short spec), or do without the variable when it is unset")
RULE_RESTART = "a replica is restarted after a host maintenance or a transient error; it must resume"
RULE_RESTART_RECOMMENDED = ("a replica is restarted after a host maintenance or a transient error; without a "
                            "checkpoint it starts over (allowed, but the time is lost)")
RULE_SIGTERM = "a replica gets SIGTERM before it is stopped (maintenance, timeout, cancel, early stop)"
RULE_LOGS = "Cloud Logging reads one JSON object per line (severity, message) as a structured entry"
RULE_IDENTITY = ("the project is CLOUD_ML_PROJECT_ID and the credentials are the job's service account; the "
                 "host's gcloud identity is not there")
RULE_PRIMARY = "in distributed training only the primary replica (workerpool0-0) reports and saves"


def _steps(reports: Sequence[SeenReport], metric_ids: Sequence[str]) -> list[int | None]:
    primary = metric_ids[0] if metric_ids else None
    return [r.step for r in reports if r.tag == primary]


def _list(items: Sequence[str], n: int = 3) -> str:
    shown = ", ".join(_printable(i) for i in items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


def _runs(o: Observations) -> Line:
    c = o.clean
    if c.exit_code == 0 or (c.stopped_by_check and c.reports):
        how = "exited 0" if c.exit_code == 0 else "was stopped by the time box after reporting"
        return Line(check="runs", verdict=Verdict.PASS, seen=f"{how} in {c.duration_s:.1f} s")
    tail = f": {_printable(c.error_tail[-1])}" if c.error_tail else ""
    code = "never exited" if c.exit_code is None else f"exited with status {c.exit_code}"
    return Line(check="runs", verdict=Verdict.FAIL, seen=f"{code} in {c.duration_s:.1f} s{tail}",
                fix="run it alone with the printed flags and fix the error", rule="")


def _metric(o: Observations) -> Line:
    tags = sorted({r.tag for r in o.clean.reports})
    missing = [m for m in o.metric_ids if m not in tags]
    if not missing:
        return Line(check="metric tag", verdict=Verdict.PASS, seen=f"reports {_list(list(o.metric_ids))}")
    seen = f"reported {_list(tags)}" if tags else "reported no metric"
    return Line(check="metric tag", verdict=Verdict.FAIL, seen=f"{seen}; the spec's metric is {_list(missing)}",
                fix=f"report hyperparameter_metric_tag={missing[0]!r} (ctx.report({missing[0]}=…) in trials.main)",
                rule=RULE_METRIC)


def _global_step(o: Observations) -> Line:
    steps = _steps(o.clean.reports, o.metric_ids)
    if not steps:
        return Line(check="global step", verdict=Verdict.SKIP, seen="no report of the spec's metric")
    if all(s in (None, 0) for s in steps):
        return Line(check="global step", verdict=Verdict.FAIL,
                    seen=f"{len(steps)} report(s) without a global_step",
                    fix="pass global_step=epoch (or the training step) to report_hyperparameter_tuning_metric",
                    rule=RULE_STEP)
    ints = [s for s in steps if s is not None]
    if any(b <= a for a, b in zip(ints, ints[1:], strict=False)):
        return Line(check="global step", verdict=Verdict.WARN,
                    seen=f"steps do not increase: {_list([str(s) for s in ints], 6)}",
                    fix="report each step once, in increasing order", rule=RULE_STEP)
    return Line(check="global step", verdict=Verdict.PASS, seen=f"steps {ints[0]}…{ints[-1]}, increasing")


def _every_epoch(o: Observations) -> Line:
    n = len(_steps(o.clean.reports, o.metric_ids))
    if n == 0:
        return Line(check="reports per epoch", verdict=Verdict.SKIP, seen="no report of the spec's metric")
    if n == 1:
        return Line(check="reports per epoch", verdict=Verdict.WARN, seen="one report, at the end",
                    fix="report every epoch so early stopping can act and a restart keeps the curve",
                    rule=RULE_STEP)
    return Line(check="reports per epoch", verdict=Verdict.PASS, seen=f"{n} reports")


def _outputs(o: Observations) -> Line:
    reads = sorted({r for run in _all_runs(o) for r in run.unset_reads})
    if reads:
        return Line(check="AIP_* outputs", verdict=Verdict.FAIL,
                    seen=f"read {_list(reads)}, which is unset: the job has no baseOutputDirectory",
                    fix=FIX_BASE, rule=RULE_BASE)
    failed = [run for run in _all_runs(o) if run.soft_unset_reads and run.exit_code not in (0, None)]
    if failed:
        reads = sorted({r for run in failed for r in run.soft_unset_reads})
        return Line(check="AIP_* outputs", verdict=Verdict.FAIL,
                    seen=f"read {_list(reads)} (unset: the job has no baseOutputDirectory), then exited with "
                         f"status {failed[0].exit_code}", fix=FIX_BASE, rule=RULE_BASE)
    soft = sorted({r for run in _all_runs(o) for r in run.soft_unset_reads})
    if soft:
        return Line(check="AIP_* outputs", verdict=Verdict.INFO,
                    seen=f"read {_list(soft)}, unset (the job has no baseOutputDirectory), and did without it",
                    fix="to keep a model on Vertex, give the job a base or write to /gcs/…", rule=RULE_BASE)
    if not o.has_base:
        return Line(check="AIP_* outputs", verdict=Verdict.INFO,
                    seen="the job has no baseOutputDirectory: no AIP_* folders, as on Vertex; the trainer did "
                         "not read them", fix="to keep a model on Vertex, give the job a base or write to /gcs/…",
                    rule=RULE_BASE)
    return Line(check="AIP_* outputs", verdict=Verdict.PASS, seen="set from the job's baseOutputDirectory")


def _model_dir(o: Observations) -> Line:
    if not o.has_base:
        return Line(check="model in AIP_MODEL_DIR", verdict=Verdict.SKIP,
                    seen="no AIP_MODEL_DIR (no baseOutputDirectory)")
    files = o.clean.written.get("model", [])
    if files:
        return Line(check="model in AIP_MODEL_DIR", verdict=Verdict.PASS, seen=f"wrote {_list(files)}")
    return Line(check="model in AIP_MODEL_DIR", verdict=Verdict.WARN, seen="nothing written there",
                fix="save the model under os.environ['AIP_MODEL_DIR'] (a gs:// URI: write to /gcs/…)",
                rule=RULE_DIRS)


def _tensorboard(o: Observations) -> Line:
    if not o.has_base:
        return Line(check="TensorBoard logs", verdict=Verdict.SKIP,
                    seen="no AIP_TENSORBOARD_LOG_DIR (no baseOutputDirectory)")
    files = o.clean.written.get("logs", [])
    if files:
        return Line(check="TensorBoard logs", verdict=Verdict.PASS, seen=f"wrote {_list(files)}")
    return Line(check="TensorBoard logs", verdict=Verdict.INFO, seen="nothing in AIP_TENSORBOARD_LOG_DIR",
                fix="write summaries there if you use Vertex AI TensorBoard", rule=RULE_DIRS)


def _outside(o: Observations) -> Line:
    if o.in_image:
        return Line(check="writes outside AIP dirs", verdict=Verdict.SKIP,
                    seen="in its image: what it writes outside /gcs and the AIP folders dies with its container, "
                         "as on Vertex (not listed)")
    files = sorted({f for run in _all_runs(o) for f in run.outside_writes})
    if files:
        return Line(check="writes outside AIP dirs", verdict=Verdict.FAIL,
                    seen=f"wrote {_list(files)} in its working folder (lost on Vertex)",
                    fix="write outputs under AIP_MODEL_DIR / AIP_CHECKPOINT_DIR (or /gcs/…)" if o.has_base else
                    "write outputs to /gcs/… (or give the job a baseOutputDirectory and use AIP_MODEL_DIR)",
                    rule=RULE_DIRS)
    return Line(check="writes outside AIP dirs", verdict=Verdict.PASS, seen="nothing written in its working folder")


def _not_interrupted(o: Observations, check: str, missed: str) -> Line:
    """The restart probe did not run, or its run ended before SIGTERM (``missed`` says so)."""
    if o.interrupt_missed:
        return _too_fast(o, check, missed)
    c = o.clean
    if c.exit_code != 0:
        why = "the clean run did not exit 0: no run to interrupt"
    elif len(_steps(c.reports, o.metric_ids)) < 2:
        why = "fewer than 2 reports of the spec's metric: no middle to interrupt the run at"
    else:
        why = "the run was not interrupted"
    return Line(check=check, verdict=Verdict.SKIP, seen=why)


def _too_fast(o: Observations, check: str, what: str) -> Line:
    """Inconclusive: the trainer ran its steps faster than the check could interrupt it (a warning)."""
    n = len(_steps(o.clean.reports, o.metric_ids))
    longer = f" ({o.longer_run})" if o.longer_run else ""
    return Line(check=check, verdict=Verdict.WARN,
                seen=f"inconclusive: {what} ({n} reports in {o.clean.duration_s:.1f} s)",
                fix=f"run more epochs or steps{longer} so that the run can be interrupted halfway")


def _sigterm(o: Observations) -> Line:
    s = o.stop
    if s is None:
        return _not_interrupted(o, "SIGTERM", "the run ended before SIGTERM could be sent")
    n = len(_steps(o.clean.reports, o.metric_ids))
    clean = [x for x in _steps(o.clean.reports, o.metric_ids) if x is not None]
    at = f"at step {s.sent_after_steps[-1]}" if s.sent_after_steps and s.sent_after_steps[-1] is not None else ""
    at += f" of {clean[-1]}" if at and clean else ""
    if s.exit_after_s is None:
        return Line(check="SIGTERM", verdict=Verdict.FAIL,
                    seen=f"still running {s.grace_s:.0f} s after SIGTERM {at}; killed".replace("  ", " "),
                    fix="handle SIGTERM: save a checkpoint and exit (trials.main does it for you)",
                    rule=RULE_SIGTERM)
    if len(s.sent_after_steps) >= n > 0:
        return _too_fast(o, "SIGTERM", "it arrived after the last step")
    more = len(s.reported_before_restart) - len(s.sent_after_steps)
    if _trained_on(s):
        return Line(check="SIGTERM", verdict=Verdict.FAIL,
                    seen=f"went on for {more} more steps after SIGTERM {at}, exited after {s.exit_after_s:.1f} s"
                    .replace("  ", " "),
                    fix="handle SIGTERM: finish the step, save a checkpoint and exit (trials.main does it for you)",
                    rule=RULE_SIGTERM)
    if len(s.reported_before_restart) >= n > 0:  # it ended on its own: its last step was the one in hand
        return _too_fast(o, "SIGTERM", f"SIGTERM came {at} and the run ended with its last step".replace("  ", " "))
    if _killed_by_sigterm(o, s):
        saved = "nothing saved" if not s.checkpoints_before_restart else \
            f"the step in hand lost (its last checkpoint: {_list(s.checkpoints_before_restart, 1)})"
        how = "killed by it" if s.signal == signal.SIGTERM else f"status {s.exit_code}, SIGTERM's default action"
        return Line(check="SIGTERM", verdict=Verdict.FAIL if o.strict else Verdict.WARN,
                    seen=f"did not handle SIGTERM: {how} {at}, {saved}".replace("  ", " "),
                    fix="catch SIGTERM, save a checkpoint under AIP_CHECKPOINT_DIR and exit (trials.main does it "
                        "for you)", rule=RULE_SIGTERM)
    return Line(check="SIGTERM", verdict=Verdict.PASS,
                seen=f"exited {s.exit_after_s:.1f} s after SIGTERM {at} (status {s.exit_code})".replace("  ", " "))


def _killed_by_sigterm(o: Observations, s: StopSeen) -> bool:
    """It ended by SIGTERM's default action: the signal, where the backend tells it (the host's replicas); an
    image's replica, whose runtime gives only a status: 143, what that action gives."""
    if s.signal is not None:
        return s.signal == signal.SIGTERM
    return o.in_image and s.exit_code == 128 + signal.SIGTERM


def _trained_on(s: StopSeen) -> bool:
    """It went on after SIGTERM: killed at the end of the grace period, or 2 steps more (finishing the
    step in hand is fine; training on is not)."""
    return s.exit_after_s is None or len(s.reported_before_restart) - len(s.sent_after_steps) >= 2


def _resume(o: Observations) -> Line:
    s = o.stop
    if s is None or s.restart is None:
        return _not_interrupted(o, "resume after restart", "not restarted: the run ended before SIGTERM could be sent")
    clean = [x for x in _steps(o.clean.reports, o.metric_ids) if x is not None]
    before = [x for x in (s.reported_before_restart or s.sent_after_steps) if x is not None]
    after = [x for x in _steps(s.restart.reports, o.metric_ids) if x is not None]
    if s.restart.exit_code not in (0, None) and not after:
        tail = f": {_printable(s.restart.error_tail[-1])}" if s.restart.error_tail else ""
        return Line(check="resume after restart", verdict=Verdict.FAIL,
                    seen=f"the restarted replica exited with status {s.restart.exit_code}{tail}",
                    fix="a restart runs the same command again: it must start from the checkpoint",
                    rule=RULE_RESTART)
    if not before:
        return Line(check="resume after restart", verdict=Verdict.SKIP, seen="too few reports to compare")
    last = before[-1]
    if after and after[0] <= min(before):
        return _started_over(o, s, after[0], last)
    if clean and last >= clean[-1]:  # nothing was left to resume
        if _trained_on(s):
            return Line(check="resume after restart", verdict=Verdict.SKIP,
                        seen="not seen: the run went on to its last step after SIGTERM")
        return _too_fast(o, "resume after restart",
                         f"restarted after the last step ({last}): resuming mid-run was not seen")
    if not after:
        if s.restart.exit_code == 0:
            missing = [x for x in clean if x > last]
            return Line(check="resume after restart", verdict=Verdict.FAIL,
                        seen=f"the restarted replica exited 0 without reporting {_span(missing)} "
                             f"(restarted at step {last})",
                        fix="load the checkpoint at start and train on from its step to the last epoch",
                        rule=RULE_RESTART)
        return Line(check="resume after restart", verdict=Verdict.SKIP,
                    seen="the restarted replica reported nothing before the time box ended it")
    first, expected = after[0], next((x for x in clean if x > last), last + 1)  # the clean run's next step
    if first <= last:
        return Line(check="resume after restart", verdict=Verdict.WARN,
                    seen=f"resumed at step {first}: steps {first}…{last} reported twice",
                    fix="checkpoint after each report, or resume from the step after the checkpoint",
                    rule=RULE_RESTART)
    if first > expected:
        return Line(check="resume after restart", verdict=Verdict.WARN,
                    seen=f"resumed at step {first} after step {last}: step {expected} lost",
                    rule=RULE_RESTART)
    return Line(check="resume after restart", verdict=Verdict.PASS,
                seen=f"resumed at step {first} after a restart at step {last}; none lost or twice")


def _started_over(o: Observations, s: StopSeen, first: int, last: int) -> Line:
    """Started over after a restart: a failure when it had checkpointed (the checkpoint went unused); else what
    Vertex recommends but does not require (a warning; a failure with --strict)."""
    if s.checkpoints_before_restart:
        return Line(check="resume after restart", verdict=Verdict.FAIL,
                    seen=f"started over at step {first} after a restart at step {last} (checkpoint "
                         f"{_list(s.checkpoints_before_restart, 1)} in AIP_CHECKPOINT_DIR not used)",
                    fix="load the latest checkpoint from AIP_CHECKPOINT_DIR at start and train on from its step",
                    rule=RULE_RESTART)
    verdict = Verdict.FAIL if o.strict else Verdict.WARN
    if not o.has_base:
        return Line(check="resume after restart", verdict=verdict,
                    seen=f"started over at step {first} after a restart at step {last} (no AIP_CHECKPOINT_DIR: "
                         f"the job has no baseOutputDirectory)",
                    fix="recommended: give the job a baseOutputDirectory, save a checkpoint under AIP_CHECKPOINT_DIR "
                        "every epoch and load it at start (a restart then loses at most an epoch)",
                    rule=RULE_RESTART_RECOMMENDED)
    return Line(check="resume after restart", verdict=verdict,
                seen=f"started over at step {first} after a restart at step {last} (no checkpoint in "
                     f"AIP_CHECKPOINT_DIR)",
                fix="recommended: save a checkpoint under AIP_CHECKPOINT_DIR every epoch and load it at start (a "
                    "restart then loses at most an epoch)", rule=RULE_RESTART_RECOMMENDED)


def _span(steps: Sequence[int]) -> str:
    """``steps 4…10``, ``step 4``."""
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}…{steps[-1]}" if steps else "its steps"


def _restart_cost(o: Observations) -> Line:
    s = o.stop
    if s is None or s.restart is None or s.restart.first_report_s is None or o.clean.first_report_s is None:
        return Line(check="restart cost", verdict=Verdict.SKIP, seen="not measured")
    return Line(check="restart cost", verdict=Verdict.INFO,
                seen=f"first report {s.restart.first_report_s:.1f} s after a restart "
                     f"(first run: {o.clean.first_report_s:.1f} s)")


def _logs(o: Observations) -> Line:
    c = o.clean
    if c.n_log_lines == 0:
        return Line(check="structured logs", verdict=Verdict.SKIP, seen="no output")
    share = c.n_json_lines / c.n_log_lines
    if share >= 0.5:
        return Line(check="structured logs", verdict=Verdict.PASS,
                    seen=f"{c.n_json_lines} of {c.n_log_lines} lines are JSON")
    return Line(check="structured logs", verdict=Verdict.WARN,
                seen=f"{c.n_json_lines} of {c.n_log_lines} output lines are JSON",
                fix='log one JSON object per line with "severity" and "message" (trials.main does)',
                rule=RULE_LOGS)


def _identity(o: Observations) -> Line:
    reads = sorted({r for run in _all_runs(o) for r in run.identity_reads})
    if reads:
        return Line(check="host cloud identity", verdict=Verdict.FAIL, seen=f"read {_list(reads)}",
                    fix="take the project from CLOUD_ML_PROJECT_ID and pass it explicitly "
                        "(storage.Client(project=…)); credentials come from the job's service account",
                    rule=RULE_IDENTITY)
    return Line(check="host cloud identity", verdict=Verdict.PASS, seen="not read")


def _primary_only(o: Observations) -> Line:
    s = o.secondary
    if s is None:
        return Line(check="primary replica only", verdict=Verdict.SKIP, seen="one replica in the spec")
    did = []
    if s.reports:
        did.append(f"reported {_list(sorted({r.tag for r in s.reports}))}")
    if s.written.get("model"):
        did.append(f"saved {_list(s.written['model'])} in AIP_MODEL_DIR")
    if did:
        return Line(check="primary replica only", verdict=Verdict.FAIL,
                    seen=f"{o.secondary_name} " + " and ".join(did),
                    fix="report and save only where CLUSTER_SPEC's task is workerpool0 index 0",
                    rule=RULE_PRIMARY)
    return Line(check="primary replica only", verdict=Verdict.PASS,
                seen=f"{o.secondary_name} neither reported nor saved")


def _all_runs(o: Observations) -> list[RunSeen]:
    runs = [o.clean]
    if o.stop and o.stop.restart:
        runs.append(o.stop.restart)
    if o.secondary:
        runs.append(o.secondary)
    return runs


CHECKS = (_runs, _metric, _global_step, _every_epoch, _outputs, _model_dir, _tensorboard, _outside, _sigterm, _resume,
          _restart_cost, _logs, _identity, _primary_only)


def judge(o: Observations) -> list[Line]:
    """One line per check, in a fixed order."""
    return [check(o) for check in CHECKS]


def failed(lines: Sequence[Line]) -> bool:
    return any(line.verdict is Verdict.FAIL for line in lines)


def format_text(lines: Sequence[Line], notes: Sequence[str] = ()) -> str:
    width = max(len(line.check) for line in lines)
    out = []
    for line in lines:
        out.append(f"{line.verdict.value.upper():4}  {line.check:<{width}}  {line.seen}")
        if line.verdict in (Verdict.WARN, Verdict.FAIL) and line.fix:
            out.append(f"{'':4}  {'':<{width}}  → {line.fix}")
            if line.rule:
                out.append(f"{'':4}  {'':<{width}}    (Vertex: {line.rule})")
    counts = {v: sum(1 for line in lines if line.verdict is v) for v in Verdict}
    out.append(f"{counts[Verdict.PASS]} passed, {counts[Verdict.WARN]} warnings, {counts[Verdict.FAIL]} failed, "
               f"{counts[Verdict.SKIP]} not applicable")
    out.extend(f"note: {n}" for n in notes)
    return "\n".join(out)


def format_json(lines: Sequence[Line], notes: Sequence[str] = ()) -> str:
    return json.dumps({"ready": not failed(lines), "checks": [line.to_dict() for line in lines],
                       "notes": list(notes)}, indent=2)

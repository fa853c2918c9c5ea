"""Hostile input corpus: each case gets exit 2 and one error line, and nothing is written outside ``work/``."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from trials import cli

TRAINER = str(Path(__file__).resolve().parent.parent / "scripts" / "fault_trainer.py")
JOB_COMMANDS = ("resume", "describe", "cancel", "best")

SHORT = "metrics: {{a: maximize}}\nparameters:\n{params}\n{extra}"
X = "  x: {type: double, min: 0, max: 1}"
GCLOUD = """\
studySpec:
  metrics: {metrics}
  parameters: {params}
{extra}"""
METRICS = "[{metricId: a, goal: MAXIMIZE}]"
XG = "[{parameterId: x, doubleValueSpec: {minValue: 0, maxValue: 1}}]"


def short(params: str = X, extra: str = "") -> str:
    return SHORT.format(params=params, extra=extra)


def gcloud(params: str = XG, metrics: str = METRICS, extra: str = "") -> str:
    return GCLOUD.format(params=params, metrics=metrics, extra=extra)


CHILD = "{parameterId: c, doubleValueSpec: {minValue: 0, maxValue: 1}}"


def cond(parent: str, key: str, values: str, child: str = CHILD) -> str:
    return (f"[{{parameterId: p, {parent}, conditionalParameterSpecs: "
            f"[{{{key}: {{values: {values}}}, parameterSpec: {child}}}]}}]")


def legacy(params: str, extra: str = "") -> str:
    return ("trainingInput:\n  hyperparameters:\n    goal: MAXIMIZE\n    hyperparameterMetricTag: a\n"
            f"    params: {params}\n{extra}")


@dataclass(frozen=True)
class Case:
    id: str
    spec: str | bytes | None = None  # None: a valid spec
    argv: tuple[str, ...] = ("validate",)  # the spec path goes right after the subcommand
    fragment: str = ""  # a piece of the one error line ("a|b": either, as the libraries' versions word it)
    filename: str = "spec.yaml"


def bomb() -> str:
    lines = ["labels: {l0: &a0 x}"]
    for i in range(1, 9):
        prev = f"*a{i - 1}"
        lines.append(f"display_name: &a{i} [{', '.join([prev] * 9)}]" if i == 8 else
                     f"x{i}: &a{i} [{', '.join([prev] * 9)}]")
    return "\n".join(lines) + "\n"


CASES = [
    # --- malformed YAML / JSON ---------------------------------------------------------------
    Case("yaml-unclosed-flow", "metrics: {a: maximize\n", fragment="invalid YAML"),
    Case("yaml-tab-indent", "metrics:\n\t{a: maximize}\n", fragment="invalid YAML at line 2"),
    Case("yaml-bad-indent", "metrics:\n  a: maximize\n parameters: x\n", fragment="invalid YAML"),
    Case("yaml-duplicate-key", short() + "metrics: {b: minimize}\n", fragment="`metrics` twice"),
    Case("yaml-python-tag", "!!python/object/apply:os.system ['echo pwned']\n", fragment="constructor"),
    # PyYAML >= 6.0.3 refuses the depth itself; older ones parse it, and the spec is refused as a list
    Case("yaml-deep-nesting", "[" * 5000 + "]" * 5000, fragment="nesting depth|expected a mapping at the top level"),
    Case("yaml-recursive-alias", "metrics: &m [*m]\nparameters: {}\n", fragment="recursive"),
    Case("yaml-alias-bomb", bomb() + short(), fragment="display_name"),
    Case("json-trailing-comma", '{"metrics": {"a": "maximize"},}', filename="s.json", fragment="s.json"),
    Case("json-single-quotes", "{'metrics': 1}", filename="s.json", fragment="s.json"),
    Case("json-truncated", '{"studySpec": {"metrics": [', filename="s.json", fragment="s.json"),
    Case("json-deep-nesting", "[" * 100_000, filename="s.json", fragment="nested too deeply"),
    Case("json-duplicate-key", '{"metrics": {"a": "maximize", "a": "minimize"}}', filename="s.json",
         fragment="`a` twice"),
    Case("binary-nul", b"\x00\x01\x02metrics", fragment="spec.yaml"),
    Case("invalid-utf8", b"metrics: {a: maximize}\n\xff\xfe\n", fragment="expected UTF-8 text"),
    Case("empty-file", "", fragment="empty"),
    Case("only-comment", "# nothing here\n", fragment="a mapping at the top level"),
    Case("top-level-list", "- a\n- b\n", fragment="a mapping at the top level"),
    Case("top-level-scalar", "42\n", fragment="a mapping at the top level"),
    Case("unknown-top-key", "studySpecs: {}\n", fragment="did you mean `studySpec`"),
    Case("missing-file", None, argv=("validate", "--", "x"), fragment="no such file"),
    # --- wrong types --------------------------------------------------------------------------
    Case("metrics-list-in-short-form", "metrics: [a]\nparameters:\n" + X + "\n", fragment="metrics"),
    Case("goal-unknown", short().replace("maximize", "upwards"), fragment="upwards"),
    Case("parameters-string", "metrics: {a: maximize}\nparameters: lots\n", fragment="parameters"),
    Case("type-unknown", short("  x: {type: float, min: 0, max: 1}"), fragment="float"),
    Case("min-not-a-number", short("  x: {type: double, min: abc, max: 1}"), fragment="parameters.x.min"),
    Case("min-boolean", short("  x: {type: double, min: true, max: 1}"), fragment="a bool"),
    Case("values-not-a-list", short("  c: {type: categorical, values: a}"), fragment="parameters.c.values"),
    Case("max-trial-count-word", gcloud(extra="maxTrialCount: ten\n"), fragment="maxTrialCount"),
    Case("max-trial-count-float", short(extra="max_trial_count: 2.5\n"), fragment="2.5"),
    Case("parallel-negative", gcloud(extra="parallelTrialCount: -2\n"), fragment="parallelTrialCount"),
    Case("parallel-zero-short", short(extra="parallel_trial_count: 0\n"), fragment="parallel_trial_count"),
    Case("max-failed-negative", short(extra="max_failed_trial_count: -1\n"), fragment="max_failed_trial_count"),
    Case("parameter-id-integer", gcloud("[{parameterId: 5, doubleValueSpec: {minValue: 0, maxValue: 1}}]"),
         fragment="parameterId"),
    Case("metric-id-null", gcloud(metrics="[{metricId: null, goal: MAXIMIZE}]"), fragment="metricId"),
    Case("scale-unknown", short("  x: {type: double, min: 0, max: 1, scale: cubic}"), fragment="cubic"),
    Case("algorithm-unknown", gcloud().replace("  parameters:", "  algorithm: SIMULATED_ANNEALING\n  parameters:"),
         fragment="SIMULATED_ANNEALING"),
    Case("timeout-garbage", short(extra="command: [python]\ntimeout: 1e30\n"), fragment="timeout"),
    Case("timeout-negative", short(extra="command: [python]\ntimeout: -5\n"), fragment="positive duration"),
    # --- huge numbers -------------------------------------------------------------------------
    Case("integer-beyond-int64", short("  n: {type: integer, min: 0, max: 100000000000000000000000000}"),
         fragment="int64"),
    Case("max-trial-count-beyond-int32", short(extra="max_trial_count: 99999999999999999999\n"),
         fragment="2147483647"),
    Case("double-1e400", short("  x: {type: double, min: 0, max: 1e400}"), fragment="finite number"),
    Case("double-range-overflows", short("  x: {type: double, min: -1e308, max: 1e308}"),
         fragment="the width overflows"),
    Case("discrete-1e400", short("  d: {type: discrete, values: [1, 1e400]}"), fragment="parameters.d.values"),
    Case("display-name-10mb", "display_name: " + "x" * 10_000_000 + "\n" + short(),
         fragment="at most 128 characters, got 10000000"),
    # --- NaN and infinite bounds --------------------------------------------------------------
    Case("min-nan", short("  x: {type: double, min: .nan, max: 1}"), fragment="got nan"),
    Case("max-inf", short("  x: {type: double, min: 0, max: .inf}"), fragment="got inf"),
    Case("min-minus-inf", short("  x: {type: double, min: -.inf, max: 1}"), fragment="got -inf"),
    Case("discrete-nan", short("  d: {type: discrete, values: [.nan]}"), fragment="parameters.d.values"),
    Case("json-nan-literal", json.dumps({"studySpec": {"metrics": [{"metricId": "a", "goal": "MAXIMIZE"}],
                                                      "parameters": [{"parameterId": "x", "doubleValueSpec": {
                                                          "minValue": float("nan"), "maxValue": 1}}]}}),
         filename="s.json", fragment="minValue"),
    # --- empty lists --------------------------------------------------------------------------
    Case("gcloud-parameters-empty", gcloud("[]"), fragment="studySpec.parameters"),
    Case("gcloud-metrics-empty", gcloud(metrics="[]"), fragment="studySpec.metrics"),
    Case("short-parameters-empty", "metrics: {a: maximize}\nparameters: {}\n", fragment="at least one parameter"),
    Case("categorical-empty", short("  c: {type: categorical, values: []}"), fragment="an empty list"),
    Case("discrete-empty", short("  d: {type: discrete, values: []}"), fragment="an empty list"),
    Case("parent-values-empty", gcloud(cond("categoricalValueSpec: {values: [a]}", "parentCategoricalValues", "[]")),
         fragment="parentCategoricalValues"),
    Case("worker-pools-empty", gcloud(extra="trialJobSpec: {workerPoolSpecs: []}\n"), fragment="workerPoolSpecs"),
    # --- duplicate ids ------------------------------------------------------------------------
    Case("duplicate-parameter-id", gcloud("[{parameterId: x, doubleValueSpec: {minValue: 0, maxValue: 1}}, "
                                          "{parameterId: x, integerValueSpec: {minValue: 0, maxValue: 1}}]"),
         fragment="x"),
    Case("duplicate-metric-id", gcloud(metrics="[{metricId: a, goal: MAXIMIZE}, {metricId: a, goal: MINIMIZE}]"),
         fragment="a"),
    Case("duplicate-short-parameter", short(X + "\n" + X), fragment="`x` twice"),
    Case("duplicate-categorical-value", short("  c: {type: categorical, values: [a, a]}"), fragment="'a' twice"),
    Case("duplicate-discrete-value", short("  d: {type: discrete, values: [1, 1]}"), fragment="parameters.d.values"),
    Case("conditional-reuses-top-id", gcloud(cond("categoricalValueSpec: {values: [a]}", "parentCategoricalValues",
                                                  "[a]", CHILD.replace("parameterId: c", "parameterId: p"))),
         fragment="p"),
    # --- cyclic / orphan conditionals ---------------------------------------------------------
    Case("orphan-parent-value",
         gcloud(cond("categoricalValueSpec: {values: [a, b]}", "parentCategoricalValues", "[zzz]")),
         fragment="zzz"),
    Case("conditional-on-double",
         gcloud(cond("doubleValueSpec: {minValue: 0, maxValue: 1}", "parentDiscreteValues", "[0.5]")),
         fragment="conditionalParameterSpecs"),
    Case("parent-kind-mismatch", gcloud(cond("categoricalValueSpec: {values: [a]}", "parentIntValues", "[1]")),
         fragment="parentIntValues"),
    Case("conditional-cycle-via-alias", "studySpec:\n  metrics: [{metricId: a}]\n  parameters: &ps\n"
                                        "  - parameterId: p\n    categoricalValueSpec: {values: [a]}\n"
                                        "    conditionalParameterSpecs: *ps\n", fragment="recursive"),
    # --- unicode and control characters in ids and values -------------------------------------
    Case("parameter-id-nbsp", short('  "a\u00a0b": {type: double, min: 0, max: 1}'), fragment="without whitespace"),
    Case("parameter-id-newline", short('  "a\\nb": {type: double, min: 0, max: 1}'), fragment="without whitespace"),
    Case("metric-id-newline", 'metrics: {"a\\nb": maximize}\nparameters:\n' + X + "\n", fragment="without whitespace"),
    Case("categorical-nul", short('  c: {type: categorical, values: ["a\\0b"]}'), fragment="without NUL"),
    Case("args-nul", short(extra='command: [python]\nargs: ["--x=\\0"]\n'), fragment="without NUL"),
    Case("env-value-nul", short(extra='command: [python]\nenv: {A: "\\0"}\n'), fragment="without NUL"),
    Case("env-name-with-equals", short(extra='command: [python]\nenv: {"A=B": x}\n'), fragment="C identifier"),
    # --- output locations ---------------------------------------------------------------------
    Case("gcloud-output-dotdot", gcloud(extra="trialJobSpec:\n  workerPoolSpecs: [{containerSpec: {imageUri: local, "
                                              "command: [python]}}]\n  baseOutputDirectory: "
                                              "{outputUriPrefix: 'gs://b/x/../../y'}\n"),
         fragment="outputUriPrefix"),
    Case("short-output-dotdot-bucket", short(extra="command: [python]\nbase_output_dir: gs://../x\n"),
         fragment="base_output_dir"),
    Case("short-output-no-bucket", short(extra="command: [python]\nbase_output_dir: 'gs://'\n"),
         fragment="with a bucket"),
    Case("legacy-jobdir-dotdot", legacy("[{parameterName: x, type: DOUBLE, minValue: 0, maxValue: 1}]",
                                        "  pythonModule: t.task\n  jobDir: gs://b/../../etc\n"),
         fragment="jobDir"),
    Case("flag-output-dotdot", short(), argv=("sweep", "--job-id", "j", "--base-output-dir", "gs://b/../../x"),
         fragment="--base-output-dir"),
    Case("flag-output-bucket-dotdot", short(), argv=("sweep", "--job-id", "j", "--base-output-dir", "gs://../x"),
         fragment="--base-output-dir"),
    # --- job ids ------------------------------------------------------------------------------
    *[Case(f"job-id-{name}", short(), argv=("sweep", f"--job-id={job_id}"), fragment="a job id must be")
      for name, job_id in [("parent", "../x"), ("slash", "a/b"), ("dot", "."), ("dotdot", ".."), ("empty", ""),
                           ("newline", "x\n"), ("inner-newline", "a\nb"), ("absolute", "/tmp/x"), ("home", "~"),
                           ("dash", "-rf"), ("space", "a b"), ("shell", "$(id)"), ("semicolon", "x;reboot"),
                           ("unicode", "ジョブ"), ("too-long", "x" * 129)]],
    *[Case(f"{cmd}-job-id-parent", None, argv=(cmd, "../x"), fragment="a job id must be") for cmd in JOB_COMMANDS],
    # --- command-line options -----------------------------------------------------------------
    *[Case(f"option-{flag[2:]}-{value}", short(), argv=("sweep", "--job-id", "j", flag, value), fragment=flag)
      for flag, value in [("--inject-restarts", "nan"), ("--inject-restarts", "inf"), ("--inject-restarts", "-1"),
                          ("--grace-period", "-1"), ("--grace-period", "nan"), ("--memory-limit", "0"),
                          ("--max-trial-count", "0"), ("--parallel-trial-count", "0"),
                          ("--max-failed-trial-count", "-1"), ("--algorithm", "BAYES")]],
    Case("option-storage-garbage", short(), argv=("sweep", "--job-id", "j", "--storage", "nope"), fragment="--storage"),
]


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as exit_:  # argparse
            rc = exit_.code
    return rc, err.getvalue()


def build_argv(case: Case, spec_path: str) -> list[str]:
    command, *rest = case.argv
    if command in JOB_COMMANDS:
        return [command, *rest]
    if "--" in rest:  # the spec path itself is the hostile part
        return [command, rest[rest.index("--") + 1], *rest[:rest.index("--")]]
    argv = [command, spec_path, *rest]
    return argv + ["--", "python", TRAINER] if command == "sweep" else argv


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_gets_one_line_and_exit_2(case: Case, tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    spec = work / case.filename
    if case.spec is not None:
        spec.write_bytes(case.spec if isinstance(case.spec, bytes) else case.spec.encode())
    rc, err = run_cli(build_argv(case, case.filename))

    assert rc == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "internal error" not in err, err
    if lines[0].startswith("usage:"):  # argparse: its usage line, then one error line
        assert len(lines) == 2 and ": error: " in lines[1], err
    else:
        assert len(lines) == 1 and lines[0].startswith("trials: error: "), err
    assert any(fragment in lines[-1] for fragment in case.fragment.split("|")), lines[-1]
    assert len(lines[-1]) < 2000, "the error line quotes the input, not all of it"
    # Nothing ran and nothing was written outside the working directory.
    assert [p.name for p in tmp_path.iterdir()] == ["work"]
    assert not list(work.glob("trials-jobs/*/journal.log")), "a rejected input created a job"
    assert not list(work.glob("trials-jobs/*/[0-9]*")), "a rejected input created a trial directory"


def test_a_10mb_spec_with_100k_categorical_values_validates_in_seconds(tmp_path: Path, monkeypatch) -> None:
    import time

    monkeypatch.chdir(tmp_path)
    values = ", ".join(f"v{i:07d}" + "x" * 90 for i in range(100_000))
    Path("big.yaml").write_text(short(f"  c: {{type: categorical, values: [{values}]}}"))
    assert Path("big.yaml").stat().st_size > 10_000_000
    start = time.monotonic()
    rc, err = run_cli(["validate", "big.yaml"])
    assert rc == 0, err
    assert time.monotonic() - start < 20  # it took 106 s when uniqueness was checked in a list

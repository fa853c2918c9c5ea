"""Bad specs: each gives one SpecError line naming the file, the path inside it, expected and got."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trials.errors import SpecError
from trials.spec.load import load_spec, parse_spec

GCLOUD = """\
studySpec:
  metrics: [{metricId: acc, goal: MAXIMIZE}]
  parameters:
  - parameterId: lr
    doubleValueSpec: {minValue: 0.001, maxValue: 0.1}
    scaleType: UNIT_LOG_SCALE
  - parameterId: opt
    categoricalValueSpec: {values: [adam, sgd]}
%s
"""


def g(extra: str = "", **replace: str) -> str:
    """The base gcloud spec with text replaced and ``extra`` appended (indented under studySpec)."""
    text = GCLOUD % extra
    for old, new in replace.items():
        text = text.replace(old.replace("__", " "), new)
    return text


def cond(child: str, parent_key: str = "parentCategoricalValues", values: str = "[sgd]") -> str:
    """A conditional under ``opt`` (appended to the second parameter)."""
    return (f"    conditionalParameterSpecs:\n"
            f"    - {parent_key}: {{values: {values}}}\n"
            f"      parameterSpec: {child}")


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    where: str  # the path (or line) the message must name
    fragment: str  # a piece of the expected/got text
    file: str = "spec.yaml"


SHORT = "metrics: {acc: maximize}\nparameters:\n  lr: {type: double, min: 0.001, max: 0.1}\n"
LEGACY = """\
trainingInput:
  hyperparameters:
    goal: MAXIMIZE
    hyperparameterMetricTag: acc
    params:
    - {parameterName: lr, type: DOUBLE, minValue: 0.001, maxValue: 0.1}
"""
P1 = "studySpec.parameters[0]"
P2 = "studySpec.parameters[1]"
C0 = f"{P2}.conditionalParameterSpecs[0]"

CASES = [
    # --- syntax and document shape
    Case("yaml-syntax", "studySpec:\n  metrics:\n\t- a\n", "line 3, column 1",
         "that cannot start any token"),
    Case("json-syntax", '{"studySpec": {', "line 1", "expected valid JSON", "spec.json"),
    Case("empty-file", "   \n", "spec.yaml", "empty file"),
    Case("top-level-list", "- a\n- b\n", "(top level)", "got a list of 2"),
    Case("no-form", "foo: 1\n", "(top level)", "top-level keys ['foo']"),
    Case("top-level-typo", "studyspec: {}\n", "studyspec", "did you mean `studySpec`"),
    Case("yaml-two-documents", "a: 1\n---\nb: 2\n", "line 2",
         "expected a single document in the stream, got another document"),
    Case("yaml-duplicate-key", g(replace="").replace("studySpec:", "studySpec:\n  algorithm: "
                                                     "GRID_SEARCH\n  algorithm: RANDOM_SEARCH", 1),
         "line 3", "expected unique keys in every mapping, got `algorithm` twice"),
    Case("json-duplicate-key", '{"studySpec": {}, "studySpec": {}}', "spec.json",
         "`studySpec` twice", "spec.json"),
    # --- unknown keys
    Case("key-with-line-break", g() + '"label\\nx": 1\n', "label\\nx", "unknown key `label\\nx`"),
    Case("unknown-parameterID", g(**{"- parameterId: lr": "- parameterID: lr"}),
         f"{P1}.parameterID", "did you mean `parameterId`?"),
    Case("snake-case-typo", g(**{"scaleType:": "scale_typo:"}), f"{P1}.scale_typo",
         "did you mean `scaleType`?"),
    Case("json-and-proto-name", g(**{"scaleType: UNIT_LOG_SCALE": "scaleType: UNIT_LOG_SCALE\n"
                                     "    scale_type: UNIT_LOG_SCALE"}), f"{P1}.scale_type",
         "`scaleType` once (`scaleType` and `scale_type` name the same field)"),
    Case("unknown-study-key", g("  algorithmm: GRID_SEARCH"), "studySpec.algorithmm",
         "did you mean `algorithm`?"),
    # --- DOUBLE / INTEGER bounds
    Case("min-above-max", g(**{"minValue: 0.001": "minValue: 0.5"}),
         f"{P1}.doubleValueSpec.maxValue", "maxValue ≥ minValue (0.5)"),
    Case("log-scale-zero", g(**{"minValue: 0.001": "minValue: 0"}),
         f"{P1}.doubleValueSpec.minValue", "strictly positive"),
    Case("reverse-log-negative", g(**{"minValue: 0.001": "minValue: -1",
                                      "UNIT_LOG_SCALE": "UNIT_REVERSE_LOG_SCALE"}),
         f"{P1}.doubleValueSpec.minValue", "UNIT_REVERSE_LOG_SCALE needs"),
    Case("integer-fractional", g(**{"doubleValueSpec: {minValue: 0.001": "integerValueSpec: "
                                    "{minValue: 1.5"}), f"{P1}.integerValueSpec.minValue",
         "expected an integer"),
    Case("integer-huge", g(**{"doubleValueSpec: {minValue: 0.001, maxValue: 0.1}":
                              "integerValueSpec: {minValue: 1, maxValue: 1180591620717411303424}"}),
         f"{P1}.integerValueSpec.maxValue", "1180591620717411303424"),
    Case("nan-bound", g(**{"minValue: 0.001": "minValue: .nan"}),
         f"{P1}.doubleValueSpec.minValue", "finite number"),
    Case("inf-bound", g(**{"maxValue: 0.1": "maxValue: .inf"}),
         f"{P1}.doubleValueSpec.maxValue", "got inf"),
    Case("bool-bound", g(**{"minValue: 0.001": "minValue: true"}),
         f"{P1}.doubleValueSpec.minValue", "true (a bool)"),
    Case("missing-max", g(**{", maxValue: 0.1": ""}), f"{P1}.doubleValueSpec.maxValue",
         "maxValue ≥ minValue (0.001), got 0.0 (a number), the default of the missing key"),
    Case("log-scale-min-absent", g(**{"minValue: 0.001, ": ""}), f"{P1}.doubleValueSpec.minValue",
         "a value > 0 (UNIT_LOG_SCALE needs a strictly positive range), got 0.0 (a number), "
         "the default of the missing key"),
    Case("categorical-values-absent", g(**{"{values: [adam, sgd]}": "{}"}),
         f"{P2}.categoricalValueSpec.values", "got an empty list, the default of the missing key"),
    # --- DISCRETE / CATEGORICAL values
    Case("discrete-decreasing", g(**{"categoricalValueSpec: {values: [adam, sgd]}":
                                     "discreteValueSpec: {values: [4, 2]}"}),
         f"{P2}.discreteValueSpec.values[1]", "increasing order"),
    Case("discrete-too-close", g(**{"categoricalValueSpec: {values: [adam, sgd]}":
                                    "discreteValueSpec: {values: [1.0, 1.00000000000001]}"}),
         f"{P2}.discreteValueSpec.values[1]", "1e-10 apart"),
    Case("discrete-empty", g(**{"categoricalValueSpec: {values: [adam, sgd]}":
                                "discreteValueSpec: {values: []}"}),
         f"{P2}.discreteValueSpec.values", "1 to 1000"),
    Case("discrete-too-many", g(**{"categoricalValueSpec: {values: [adam, sgd]}":
                                   f"discreteValueSpec: {{values: {list(range(1001))}}}"}),
         f"{P2}.discreteValueSpec.values", "got 1001 items"),
    Case("discrete-log-zero", g(**{"categoricalValueSpec: {values: [adam, sgd]}":
                                   "discreteValueSpec: {values: [0, 1]}\n    scaleType: "
                                   "UNIT_LOG_SCALE"}),
         f"{P2}.discreteValueSpec.values[0]", "strictly positive"),
    Case("categorical-duplicate", g(**{"[adam, sgd]": "[adam, adam]"}),
         f"{P2}.categoricalValueSpec.values[1]", "'adam' twice"),
    Case("categorical-empty", g(**{"[adam, sgd]": "[]"}), f"{P2}.categoricalValueSpec.values",
         "at least 1"),
    Case("categorical-bool", g(**{"[adam, sgd]": "[yes, no]"}),
         f"{P2}.categoricalValueSpec.values[0]", "quote it in YAML"),
    Case("categorical-scale", g(**{"[adam, sgd]}": "[adam, sgd]}\n    scaleType: UNIT_LINEAR_SCALE"}),
         f"{P2}.scaleType", "no scale type for a CATEGORICAL"),
    Case("two-value-specs", g(**{"    scaleType: UNIT_LOG_SCALE":
                                 "    scaleType: UNIT_LOG_SCALE\n    integerValueSpec: "
                                 "{minValue: 1, maxValue: 2}"}),
         P1, "doubleValueSpec and integerValueSpec"),
    Case("no-value-spec", g(**{"    categoricalValueSpec: {values: [adam, sgd]}\n": ""}), P2,
         "none of them"),
    Case("bad-scale-name", g(**{"UNIT_LOG_SCALE": "LOG"}), f"{P1}.scaleType",
         "one of SCALE_TYPE_UNSPECIFIED"),
    # --- ids and metrics
    Case("metric-id-space", g(**{"metricId: acc": "metricId: 'my acc'"}),
         "studySpec.metrics[0].metricId", "without whitespace"),
    Case("duplicate-metric", g(**{"metrics: [{metricId: acc, goal: MAXIMIZE}]":
                                  "metrics: [{metricId: acc}, {metricId: acc}]"}),
         "studySpec.metrics[1]", "`acc` again"),
    Case("no-metrics", g(**{"[{metricId: acc, goal: MAXIMIZE}]": "[]"}), "studySpec.metrics",
         "got an empty list"),
    Case("bad-goal", g(**{"goal: MAXIMIZE": "goal: maximize"}), "studySpec.metrics[0].goal",
         "did you mean MAXIMIZE?"),
    Case("param-id-space", g(**{"parameterId: lr": "parameterId: 'l r'"}), f"{P1}.parameterId",
         "without whitespace"),
    Case("duplicate-param", g(**{"parameterId: opt": "parameterId: lr"}), f"{P2}.parameterId",
         "already used at studySpec.parameters[0].parameterId"),
    Case("no-parameters", "studySpec:\n  metrics: [{metricId: a}]\n  parameters: []\n",
         "studySpec.parameters", "at least 1 parameters"),
    # --- grid search and conditionals
    Case("grid-double", g("  algorithm: GRID_SEARCH"), P1, "DOUBLE parameter `lr`"),
    Case("grid-conditional-double",
         g(cond("{parameterId: m, doubleValueSpec: {minValue: 0, maxValue: 1}}") +
           "\n  algorithm: GRID_SEARCH", **{"    doubleValueSpec: {minValue: 0.001, maxValue: 0.1}"
                                            "\n    scaleType: UNIT_LOG_SCALE":
                                            "    integerValueSpec: {minValue: 1, maxValue: 3}"}),
         f"{C0}.parameterSpec", "DOUBLE parameter `m`"),
    Case("parent-int-out-of-range",
         g(**{"categoricalValueSpec: {values: [adam, sgd]}": "integerValueSpec: {minValue: 1, "
              "maxValue: 3}"}) + cond("{parameterId: m, integerValueSpec: {minValue: 1, "
                                      "maxValue: 2}}", "parentIntValues", "[2, 7]"),
         f"{C0}.parentIntValues.values[1]", "a value of the parent `opt` [1, 3]"),
    Case("parent-categorical-missing",
         g() + cond("{parameterId: m, integerValueSpec: {minValue: 1, maxValue: 2}}",
                    values="[rmsprop]"),
         f"{C0}.parentCategoricalValues.values[0]", "{adam, sgd}"),
    Case("parent-discrete-missing",
         g(**{"categoricalValueSpec: {values: [adam, sgd]}": "discreteValueSpec: {values: [1, 2]}"})
         + cond("{parameterId: m, integerValueSpec: {minValue: 1, maxValue: 2}}",
                "parentDiscreteValues", "[3]"),
         f"{C0}.parentDiscreteValues.values[0]", "got 3"),
    Case("parent-wrong-kind",
         g() + cond("{parameterId: m, integerValueSpec: {minValue: 1, maxValue: 2}}",
                    "parentIntValues", "[1]"),
         f"{C0}.parentIntValues.values", "the parent `opt` is CATEGORICAL"),
    Case("conditional-duplicates-top-level",
         g() + cond("{parameterId: lr, integerValueSpec: {minValue: 1, maxValue: 2}}"),
         f"{C0}.parameterSpec.parameterId", "`lr` is already used"),
    Case("siblings-overlap",
         g() + cond("{parameterId: m, integerValueSpec: {minValue: 1, maxValue: 2}}") +
         "\n    - parentCategoricalValues: {values: [adam, sgd]}\n"
         "      parameterSpec: {parameterId: m, integerValueSpec: {minValue: 3, maxValue: 4}}",
         f"{P2}.conditionalParameterSpecs[1]", "both on sgd"),
    Case("two-stopping-specs", g("  medianAutomatedStoppingSpec: {}\n"
                                 "  decayCurveStoppingSpec: {}"),
         "studySpec.decayCurveStoppingSpec", "at most one automated stopping spec"),
    Case("convex-unknown-lr-param", g("  convexAutomatedStoppingSpec: "
                                      "{learningRateParameterName: eta}"),
         "studySpec.convexAutomatedStoppingSpec", "`eta`"),
    # --- counts and job fields
    Case("failed-above-max", g() + "maxTrialCount: 3\nmaxFailedTrialCount: 4\n",
         "maxFailedTrialCount", "≤ maxTrialCount (3)"),
    Case("max-trials-negative", g() + "maxTrialCount: -3\n", "maxTrialCount",
         "an integer ≥ 1 (0 or no value: 1, as gcloud sets it), got -3"),
    Case("parallel-negative", g() + "parallelTrialCount: -1\n", "parallelTrialCount", "got -1"),
    Case("display-name-long", g() + f"displayName: {'x' * 129}\n", "displayName",
         "at most 128 characters"),
    Case("label-uppercase", g() + "labels: {Team: ml}\n", "labels.Team", "label key"),
    Case("local-inject-range", g() + "trialsLocal: {injectRestarts: 2}\n",
         "trialsLocal.injectRestarts", "between 0 and 1"),
    Case("pools-empty", g() + "trialJobSpec: {workerPoolSpecs: []}\n",
         "trialJobSpec.workerPoolSpecs", "at least 1 worker pool specs"),
    Case("pool0-skipped", g() + "trialJobSpec: {workerPoolSpecs: [{}]}\n",
         "trialJobSpec.workerPoolSpecs[0]", "only later pools may be {}"),
    Case("container-no-image", g() + "trialJobSpec: {workerPoolSpecs: [{containerSpec: "
                                     "{command: [python]}}]}\n",
         "trialJobSpec.workerPoolSpecs[0].containerSpec.imageUri", "an image URI"),
    Case("replica-count-negative", g() + "trialJobSpec: {workerPoolSpecs: [{replicaCount: '-1', "
                                         "containerSpec: {imageUri: local}}]}\n",
         "trialJobSpec.workerPoolSpecs[0].replicaCount", "a replica count of 1 to 256 (0 or no value: 1)"),
    Case("accelerator-unknown-number", g() + "trialJobSpec: {workerPoolSpecs: [{machineSpec: "
                                             "{acceleratorType: 99}, containerSpec: {imageUri: local}}]}\n",
         "trialJobSpec.workerPoolSpecs[0].machineSpec.acceleratorType",
         "one of ACCELERATOR_TYPE_UNSPECIFIED (0), NVIDIA_TESLA_K80 (1)"),
    Case("accelerator-unknown-name", g() + "trialJobSpec: {workerPoolSpecs: [{machineSpec: "
                                           "{acceleratorType: NVIDIA_TESLA_T5}, containerSpec: {imageUri: local}}]}\n",
         "trialJobSpec.workerPoolSpecs[0].machineSpec.acceleratorType", "did you mean NVIDIA_TESLA_T4?"),
    Case("goal-unknown-number", g(**{"goal: MAXIMIZE": "goal: 3"}), "studySpec.metrics[0].goal",
         "one of GOAL_TYPE_UNSPECIFIED (0), MAXIMIZE (1), MINIMIZE (2), got 3 (an integer)"),
    Case("carried-enum-unknown", g() + "trialJobSpec: {workerPoolSpecs: [{containerSpec: {imageUri: "
                                       "local}}], scheduling: {strategy: SPOTT}}\n",
         "trialJobSpec.scheduling.strategy", "did you mean SPOT?"),
    Case("carried-unknown-key", g("  studyStoppingConfig: {minNumTrial: 2}"),
         "studySpec.studyStoppingConfig.minNumTrial", "did you mean `minNumTrials`?"),
    Case("carried-wrong-kind", g() + "encryptionSpec: projects/p/keys/k\n", "encryptionSpec",
         "expected a mapping"),
    Case("replica-count-text", g() + "trialJobSpec: {workerPoolSpecs: [{replicaCount: 'two', "
                                     "containerSpec: {imageUri: local}}]}\n",
         "trialJobSpec.workerPoolSpecs[0].replicaCount", '"two" (a string)'),
    Case("env-name", g() + "trialJobSpec: {workerPoolSpecs: [{containerSpec: {imageUri: local, "
                           "env: [{name: 1BAD, value: x}]}}]}\n",
         "trialJobSpec.workerPoolSpecs[0].containerSpec.env[0].name", "C identifier"),
    Case("timeout-format", g() + "trialJobSpec: {workerPoolSpecs: [{containerSpec: {imageUri: "
                                 "local}}], scheduling: {timeout: 1h}}\n",
         "trialJobSpec.scheduling.timeout", 'duration like "3600s"'),
    Case("args-number", g() + "trialJobSpec: {workerPoolSpecs: [{containerSpec: {imageUri: local, "
                              "args: [--epochs, 3]}}]}\n",
         "trialJobSpec.workerPoolSpecs[0].containerSpec.args[1]", "3 (an integer)"),
    # --- REST JSON
    Case("rest-int64-garbage", json.dumps({"studySpec": {
        "metrics": [{"metricId": "a"}], "parameters": [
            {"parameterId": "n", "integerValueSpec": {"minValue": "1", "maxValue": "4x"}}]}}),
         "studySpec.parameters[0].integerValueSpec.maxValue", '"4x"', "spec.json"),
    Case("rest-nan", '{"studySpec": {"metrics": [{"metricId": "a"}], "parameters": [{"parameterId":'
                     ' "x", "doubleValueSpec": {"minValue": NaN, "maxValue": 1}}]}}',
         "studySpec.parameters[0].doubleValueSpec.minValue", "finite", "spec.json"),
    # --- legacy
    Case("legacy-typo", LEGACY.replace("parameterName", "parameterNmae"),
         "trainingInput.hyperparameters.params[0].parameterNmae", "did you mean `parameterName`"),
    Case("legacy-missing-type", LEGACY.replace("type: DOUBLE, ", ""),
         "trainingInput.hyperparameters.params[0].type", "the key is missing"),
    Case("legacy-wrong-values-key", LEGACY.replace("minValue: 0.001, maxValue: 0.1",
                                                   "categoricalValues: [a]"),
         "trainingInput.hyperparameters.params[0].categoricalValues", "only minValue and maxValue"),
    Case("legacy-args-without-trainer", LEGACY + "  args: [--x=1]\n", "trainingInput.args",
         "`pythonModule` or `masterConfig.imageUri`"),
    Case("legacy-no-hyperparameters", "trainingInput: {pythonModule: a.b}\n",
         "trainingInput.hyperparameters", "the key is missing"),
    # --- short form
    Case("short-unknown-type", SHORT.replace("type: double", "type: float"),
         "parameters.lr.type", "one of double, integer, discrete, categorical"),
    Case("short-values-on-double", SHORT.replace("min: 0.001", "values: [1], min: 0.001"),
         "parameters.lr.values", "unknown key `values`"),
    Case("short-args-without-command", SHORT + "args: [--x=1]\n", "args",
         "`command`, `python_module` or `image_uri`"),
    Case("short-bad-goal", SHORT.replace("acc: maximize", "acc: max"), "metrics.acc",
         "one of maximize, minimize"),
    Case("short-command-and-module", SHORT + "command: [python, t.py]\npython_module: t\n",
         "python_module", "either `command` or `python_module`"),
    Case("short-when-parent-value", SHORT + "  opt:\n    type: categorical\n    values: [a, b]\n"
         "    when:\n    - values: [c]\n      parameters:\n        m: {type: integer, min: 1, "
         "max: 2}\n", "parameters.opt.when[0].values[0]", "a value of the parent `opt`"),
    Case("short-stopping-type", SHORT + "stopping: {type: early}\n", "stopping.type",
         "one of median, decay_curve, convex"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_spec_gives_one_line_with_file_path_expected_got(tmp_path: Path, case: Case) -> None:
    path = tmp_path / case.file
    path.write_text(case.text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert case.where in message
    assert "expected" in message and "got" in message
    assert case.fragment in message, message


def test_case_table_is_large_and_names_are_unique() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)


def test_missing_file_and_directory_and_bad_encoding(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="got a directory"):
        load_spec(tmp_path)
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"metrics: {acc\xe9: maximize}\n")
    with pytest.raises(SpecError, match="UTF-8"):
        load_spec(bad)


def test_error_carries_source_and_path_attributes(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(g(**{"minValue: 0.001": "minValue: 0.5"}), encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.source == str(path)
    assert info.value.path == f"{P1}.doubleValueSpec.maxValue"
    assert info.value.exit_code == 2


def _mutations() -> st.SearchStrategy:
    junk = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                     st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4),
                                                                          st.integers(), max_size=2))
    return st.lists(st.tuples(st.integers(0, 10_000), junk), min_size=1, max_size=3)


def _nodes(doc: object, out: list) -> list:
    out.append(doc)
    if isinstance(doc, dict):
        for v in doc.values():
            _nodes(v, out)
    elif isinstance(doc, list):
        for v in doc:
            _nodes(v, out)
    return out


FIXTURES = sorted((Path(__file__).parents[1] / "data" / "specs").glob("*"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fixture=st.sampled_from(FIXTURES), mutations=_mutations())
def test_mutated_specs_load_or_raise_spec_error_only(fixture: Path, mutations: list) -> None:
    import yaml

    doc = yaml.safe_load(fixture.read_text(encoding="utf-8"))
    for index, junk in mutations:
        containers = [n for n in _nodes(doc, []) if isinstance(n, (dict, list)) and n]
        target = containers[index % len(containers)]
        if isinstance(target, dict):
            target[list(target)[index % len(target)]] = junk
        else:
            target[index % len(target)] = junk
    try:
        parse_spec(doc, source=fixture.name)
    except SpecError as err:
        assert "\n" not in str(err) and fixture.name in str(err)

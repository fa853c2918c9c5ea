"""Property tests: random input to the spec parser, the trial flag parser and the metrics readers.

Only the project's own errors may escape the parsers (``TrialsError``; ``FlagError`` for flags);
the metrics readers never raise on file content.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import math
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trials.controller.trial.metrics_reader import TrialMetricsReader
from trials.errors import FlagError, TrialsError
from trials.hypertune_file import parse_hypertune_text
from trials.records import parse_records
from trials.runtime.flags import parse_flags
from trials.runtime.params import build_params
from trials.spec.load import load_spec, loads_spec, parse_spec

SPECS = Path(__file__).resolve().parent.parent / "data" / "specs"
FIXTURES = {p.name: yaml.safe_load(p.read_text()) if p.suffix != ".json" else json.loads(p.read_text())
            for p in sorted(SPECS.iterdir())}
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Keys the spec forms know: random documents built from them reach deep into the parsers.
KEYS = ["studySpec", "metrics", "metricId", "goal", "parameters", "parameterId", "doubleValueSpec",
        "integerValueSpec", "categoricalValueSpec", "discreteValueSpec", "minValue", "maxValue",
        "values", "scaleType", "conditionalParameterSpecs", "parentCategoricalValues",
        "parentIntValues", "parentDiscreteValues", "parameterSpec", "algorithm", "maxTrialCount",
        "parallelTrialCount", "maxFailedTrialCount", "trialJobSpec", "workerPoolSpecs",
        "containerSpec", "imageUri", "command", "args", "env", "name", "value", "replicaCount",
        "baseOutputDirectory", "outputUriPrefix", "scheduling", "timeout", "trialsLocal",
        "injectRestarts", "medianAutomatedStoppingSpec", "convexAutomatedStoppingSpec",
        "trainingInput", "hyperparameters", "params", "parameterName", "type", "min", "max",
        "scale", "when", "stopping", "local", "inject_restarts", "max_trial_count", "command",
        "base_output_dir", "display_name", "displayName", "labels", "measurementSelectionType"]
TEXT = st.one_of(st.sampled_from(["", "MAXIMIZE", "DOUBLE", "UNIT_LOG_SCALE", "gs://b/../x", "a\x00b",
                                  "1e400", "nan", "-1", "3600s", "x" * 300, "λ", "$(rm -rf ~)"]),
                 st.text(max_size=20))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), TEXT)
JSONISH = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=5),
                               st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)),
                                               children, max_size=6)),
    max_leaves=40,
)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(_paths(v, prefix + (i,)))
    return out


@st.composite
def mutated_specs(draw) -> Any:
    """A valid fixture with one to three places replaced by random data (or deleted)."""
    doc = copy.deepcopy(FIXTURES[draw(st.sampled_from(sorted(FIXTURES)))])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            return draw(JSONISH)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(JSONISH)
    return doc


def _parse(data: Any) -> None:
    try:
        parse_spec(data, source="<hypothesis>")
    except TrialsError as err:
        assert "\n" not in str(err), "errors are one line"


@SETTINGS
@given(JSONISH)
def test_spec_parser_random_documents_raise_only_trials_errors(data: Any) -> None:
    _parse(data)


@SETTINGS
@given(mutated_specs())
def test_spec_parser_mutated_valid_specs_raise_only_trials_errors(data: Any) -> None:
    _parse(data)


@SETTINGS
@given(st.text(max_size=300))
@example("metrics: {a: maximize}\nparameters:\n  x: {type: double, min: 0, max: 1}\n" + "x: &a [*a]")
@example("{" * 2000)
def test_spec_text_random_text_raises_only_trials_errors(text: str) -> None:
    try:
        loads_spec(text)
    except TrialsError as err:
        assert "\n" not in str(err)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(["s.yaml", "s.json", "s.txt"]))
def test_spec_files_of_random_bytes_raise_only_trials_errors(tmp_path_factory, data: bytes, name: str) -> None:
    path = tmp_path_factory.mktemp("spec") / name
    path.write_bytes(data)
    try:
        load_spec(path)
    except TrialsError as err:
        assert "\n" not in str(err)


# --- the trial's flag parser -------------------------------------------------------------------
class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Config:
    learning_rate: float = 0.1
    n_layers: int = 2
    name: str = "run"
    use_bn: bool = False
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float | None = None
    color: Color = Color.RED
    batch_size: int = 32


CONDITIONAL = Path(__file__).resolve().parents[2] / "search_spaces" / "conditional.yaml"
SPEC_PARAMS = build_params(study=load_spec(CONDITIONAL).study, source="conditional.yaml")
CONFIG_PARAMS = build_params(Config)
NAMES = [p.name for p in SPEC_PARAMS + CONFIG_PARAMS] + ["n-layers", "learning-rate", "h", "help", ""]
VALUES = st.one_of(st.sampled_from(["", "nan", "inf", "-inf", "1e999", "64.0", "0x10", "1_000", "١٢", "true",
                                    "adam", "sgd", "rmsprop", "RED", "red", "0.9", "-1", " 3 ", "=", "--x"]),
                   st.text(max_size=12))
TOKENS = st.one_of(
    st.builds(lambda n, v: f"--{n}={v}", st.sampled_from(NAMES), VALUES),
    st.builds(lambda n: f"--{n}", st.sampled_from(NAMES)),
    VALUES,
    st.sampled_from(["--", "-", "-h", "--help", "-x", "---x=1", "--=1"]),
)


@SETTINGS
@given(st.lists(TOKENS, max_size=8), st.sampled_from(["spec", "config"]))
def test_flag_parser_random_argv_raises_only_flag_errors(argv: list[str], which: str) -> None:
    params = SPEC_PARAMS if which == "spec" else CONFIG_PARAMS
    try:
        values = parse_flags(argv, params, source="conditional.yaml")
    except FlagError as err:
        assert "\n" not in str(err)
    except SystemExit as exit_:  # argparse's own exit, if it ever takes it, must be a usage error
        assert exit_.code == 2
    else:
        assert set(values) == {p.name for p in params}


def test_flag_parser_takes_an_id_that_appears_under_two_parents() -> None:
    params = build_params(study=load_spec(SPECS / "full.gcloud.yaml").study)
    assert [p.name for p in params].count("width") == 1  # one --width flag, two branches
    assert parse_flags(["--depth=1", "--width=8"], params)["width"] == 8
    assert parse_flags(["--depth=4", "--width=64"], params)["width"] == 64
    assert parse_flags(["--depth=4"], params)["width"] in (32, 64, 128)  # the active branch's default
    with pytest.raises(FlagError, match="when --depth=1"):
        parse_flags(["--depth=1", "--width=64"], params)  # valid only under the other branch
    with pytest.raises(FlagError, match="outside the search space"):
        parse_flags(["--depth=1", "--width=7"], params)


# --- the metrics readers -----------------------------------------------------------------------
HT_VALUES = st.one_of(SCALARS, st.sampled_from(["0.5", "nan", "inf", "1e999", "-0", "10", "1.5", "-3"]),
                      st.lists(SCALARS, max_size=2), st.dictionaries(TEXT, SCALARS, max_size=2))
HT_RECORD = st.dictionaries(
    st.one_of(st.sampled_from(["loss", "accuracy", "global_step", "timestamp", "trial", "checkpoint_path"]),
              st.text(max_size=6)),
    HT_VALUES, max_size=6)


def _lines(records: list, garbage: list[str], cut: int) -> str:
    lines = [json.dumps(r, default=str) for r in records] + garbage
    text = "\n".join(lines)
    return text[:cut] if cut else text


@SETTINGS
@given(st.lists(HT_RECORD, max_size=6), st.lists(st.text(max_size=30), max_size=3), st.integers(0, 400))
def test_hypertune_text_never_raises(records: list, garbage: list[str], cut: int) -> None:
    for line in parse_hypertune_text(_lines(records, garbage, cut)):
        assert isinstance(line.value, float) and line.step >= 0


@SETTINGS
@given(st.text(max_size=500))
def test_hypertune_random_text_never_raises(text: str) -> None:
    parse_hypertune_text(text)


JL_RECORD = st.fixed_dictionaries(
    {}, optional={"step": HT_VALUES, "timestamp": HT_VALUES, "attempt": HT_VALUES,
                  "metrics": st.one_of(st.dictionaries(TEXT, HT_VALUES, max_size=3), HT_VALUES)})


@SETTINGS
@given(st.lists(JL_RECORD, max_size=6), st.lists(st.text(max_size=30), max_size=3), st.integers(0, 400))
def test_metrics_jsonl_records_never_raise(records: list, garbage: list[str], cut: int) -> None:
    for m in parse_records(_lines(records, garbage, cut)):
        assert m.step >= 0 and all(isinstance(v, float) for v in m.metrics.values())


@SETTINGS
@given(st.text(max_size=500))
def test_metrics_jsonl_random_text_never_raises(text: str) -> None:
    parse_records(text)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=4), st.binary(max_size=300))
def test_metrics_reader_polling_random_bytes_never_raises(tmp_path_factory, writes: list[bytes], jsonl: bytes) -> None:
    folder = tmp_path_factory.mktemp("trial")
    hypertune, log = folder / "hypertune.metrics", folder / "metrics.jsonl"
    reader = TrialMetricsReader(hypertune, log, ["loss"], start_time=0.0)
    for i, data in enumerate(writes):
        hypertune.write_bytes(data)  # the library rewrites the whole file
        with open(log, "ab") as f:
            f.write(jsonl[i::len(writes)])
        reader.poll()
        if i == 1:
            reader.on_restart()
    reader.poll(final=True)
    for m in reader.measurements():
        assert all(isinstance(v, float) and (math.isfinite(v) or math.isnan(v) or math.isinf(v))
                   for v in m.metrics.values())
    reader.missing_steps_warning  # noqa: B018 - a property that must not raise either

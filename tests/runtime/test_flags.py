"""Tests for trials.runtime.flags and trials.runtime.params: Config dataclasses and StudySpecs ->
parsed, checked trial flags."""

import dataclasses
import enum
import sys
import types
from typing import Literal

import pytest

from trials.errors import ConfigError, FlagError
from trials.protocol import format_flag
from trials.runtime.flags import format_help, parse_flags
from trials.runtime.params import (
    Params,
    build_params,
    make_config,
    params_from_config,
    spec_default,
)
from trials.spec import (
    ConditionalParameterSpec,
    MetricSpec,
    ParameterSpec,
    ParameterType,
    ScaleType,
    StudySpec,
)

LR = ParameterSpec(parameter_id="learning_rate", type=ParameterType.DOUBLE, min_value=1e-4,
                   max_value=0.1, scale_type=ScaleType.UNIT_LOG_SCALE)
UNITS = ParameterSpec(parameter_id="hidden_units", type=ParameterType.DISCRETE,
                      values=(16, 32, 64, 128))
LAYERS = ParameterSpec(parameter_id="layers", type=ParameterType.INTEGER, min_value=1, max_value=4)
MOMENTUM = ParameterSpec(parameter_id="momentum", type=ParameterType.DOUBLE, min_value=0.0,
                         max_value=0.99)
OPT = ParameterSpec(parameter_id="optimizer", type=ParameterType.CATEGORICAL,
                    values=("adam", "sgd"),
                    conditionals=(ConditionalParameterSpec(parent_values=("sgd",),
                                                           parameter=MOMENTUM),))
STUDY = StudySpec(metrics=(MetricSpec(metric_id="accuracy"),),
                  parameters=(LR, UNITS, LAYERS, OPT))
SRC = "search_spaces/test.yaml"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Config:
    learning_rate: float = 0.01
    hidden_units: int = 64
    layers: int = 2
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float | None = None
    epochs: int = 10
    color: Color = Color.RED
    verbose: bool = False
    name: str = "run"


def parse(argv, config=Config, study=STUDY):
    return parse_flags(argv, build_params(config, study, SRC), source=SRC)


def test_defaults_when_no_flags():
    values = parse([])
    assert make_config(Config, values) == Config()


def test_every_flag_form_parses_with_its_type():
    values = parse(["--learning_rate=0.05", "--hidden_units", "128", "--optimizer=sgd",
                    "--momentum=0.9", "--epochs=3", "--color=blue", "--verbose", "--name=x y"])
    assert values["learning_rate"] == 0.05 and values["hidden_units"] == 128
    assert isinstance(values["hidden_units"], int) and values["color"] is Color.BLUE
    assert values["verbose"] is True and values["name"] == "x y" and values["momentum"] == 0.9


def test_dashed_names_and_last_flag_wins():
    values = parse(["--learning-rate=0.02", "--hidden-units=32", "--learning_rate=0.03"])
    assert values["learning_rate"] == 0.03 and values["hidden_units"] == 32


def test_controller_formatting_round_trips():
    tokens = [format_flag("learning_rate", 1e-4), format_flag("hidden_units", 64.0),
              format_flag("layers", 3)]
    assert tokens[1] == "--hidden_units=64"
    values = parse(tokens)
    assert values["learning_rate"] == 1e-4 and values["hidden_units"] == 64


def test_integral_float_text_is_accepted_for_int():
    assert parse(["--hidden_units=64.0"])["hidden_units"] == 64


@pytest.mark.parametrize("argv, needle", [
    (["--learning_rate=0.5"], "--learning_rate=0.5 is outside the search space: `learning_rate` "
                              "must be in [0.0001, 0.1] (log) (search_spaces/test.yaml)"),
    (["--hidden_units=48"], "{16, 32, 64, 128}"),
    (["--layers=9"], "[1, 4]"),
    (["--optimizer=rmsprop"], "must be one of {adam, sgd}, got 'rmsprop'"),
    (["--hidden_units=abc"], "--hidden_units expects an integer, got 'abc'"),
    (["--learning_rate=fast"], "--learning_rate expects a number, got 'fast'"),
    (["--verbose=maybe"], "--verbose expects true or false"),
    (["--lr=0.1"], "unknown flag '--lr=0.1'; known flags: --learning_rate, --hidden_units"),
    (["stray"], "unexpected argument 'stray'"),
    (["--momentum=0.5"], "--momentum applies only when --optimizer is one of {sgd}"),
    (["--learning_rat=0.01"], "unknown flag"),  # no prefix matching
])
def test_bad_flags_are_one_line_errors_naming_flag_and_range(argv, needle):
    with pytest.raises(FlagError) as info:
        parse(argv)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_conditional_child_absent_is_none_and_present_when_parent_selects():
    assert parse(["--optimizer=adam"])["momentum"] is None
    assert parse(["--optimizer=sgd", "--momentum=0.5"])["momentum"] == 0.5


def test_spec_only_config_is_read_only_params_with_midpoint_defaults():
    params = build_params(None, STUDY, SRC)
    config = make_config(None, parse_flags([], params))
    assert isinstance(config, Params)
    assert config.learning_rate == pytest.approx((1e-4 * 0.1) ** 0.5)
    assert config.hidden_units == 32 and isinstance(config.hidden_units, int)
    assert config.layers in (2, 3) and config.optimizer == "adam" and config.momentum is None
    assert config["layers"] == config.layers and "layers" in config
    with pytest.raises(AttributeError):
        config.layers = 5
    with pytest.raises(AttributeError, match="no hyperparameter 'nope'"):
        config.nope  # noqa: B018 - reading it is what raises


def test_spec_only_active_child_gets_its_default():
    config = make_config(None, parse_flags(["--optimizer=sgd"], build_params(None, STUDY)))
    assert config.momentum == pytest.approx(0.495)


def test_spec_default_values():
    assert spec_default(LAYERS) in (2, 3)
    assert spec_default(UNITS) == 32


def test_spec_parameter_missing_from_config_is_an_error():
    @dataclasses.dataclass
    class Small:
        learning_rate: float = 0.01

    with pytest.raises(ConfigError, match="spec parameter 'hidden_units'.*has no field in Small"):
        build_params(Small, STUDY, SRC)


def test_conditional_field_without_default_is_an_error():
    @dataclasses.dataclass
    class NoDefault:
        momentum: float
        learning_rate: float = 0.01
        hidden_units: int = 16
        layers: int = 1
        optimizer: str = "adam"

    with pytest.raises(ConfigError, match="conditional"):
        build_params(NoDefault, STUDY, SRC)


def test_required_field_must_be_given():
    @dataclasses.dataclass
    class Req:
        steps: int

    params = params_from_config(Req)
    with pytest.raises(FlagError, match="missing required flag --steps"):
        parse_flags([], params)
    assert parse_flags(["--steps=3"], params) == {"steps": 3}


def test_string_annotations_resolve(monkeypatch):
    module = types.ModuleType("user_config_module")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec("from __future__ import annotations\nimport dataclasses\nfrom typing import Optional\n"
         "@dataclasses.dataclass\nclass C:\n    x: int = 1\n    y: Optional[str] = None\n",
         module.__dict__)
    params = params_from_config(module.C)
    assert [(p.name, p.kind, p.optional) for p in params] == [("x", "int", False), ("y", "str", True)]


def test_unsupported_field_type_is_an_error():
    @dataclasses.dataclass
    class Bad:
        sizes: list = dataclasses.field(default_factory=list)

    with pytest.raises(ConfigError, match="Bad.sizes"):
        params_from_config(Bad)


def test_non_dataclass_config_is_an_error():
    with pytest.raises(ConfigError, match="must be a dataclass"):
        params_from_config(dict)


def test_help_lists_type_default_and_range_of_every_parameter():
    text = format_help(build_params(Config, STUDY, SRC), prog="train.py", source=SRC)
    assert "search space: search_spaces/test.yaml" in text
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  --")}
    assert set(lines) == {f"--{f.name}" for f in dataclasses.fields(Config)}
    assert "FLOAT" in lines["--learning_rate"] and "default 0.01" in lines["--learning_rate"]
    assert "[0.0001, 0.1] (log)" in lines["--learning_rate"]
    assert "{16, 32, 64, 128}" in lines["--hidden_units"]
    assert "only when --optimizer in {sgd}" in lines["--momentum"]
    assert "not tuned" in lines["--epochs"]


def test_make_config_reports_dataclass_validation():
    @dataclasses.dataclass
    class Checked:
        x: int = 1

        def __post_init__(self):
            if self.x > 5:
                raise ValueError("x too big")

    with pytest.raises(FlagError, match="Checked rejected the flags: x too big"):
        make_config(Checked, {"x": 9})

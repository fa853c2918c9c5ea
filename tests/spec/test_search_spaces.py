"""The shipped search spaces load, validate and say what the examples expect."""

from __future__ import annotations

from pathlib import Path

import pytest

from trials.spec import Goal, ParameterType, ScaleType, StoppingKind
from trials.spec.load import load_spec
from trials.spec.text import sample_trial, summary

SPACES = Path(__file__).parents[2] / "search_spaces"
ALL = sorted(SPACES.glob("*.yaml"))


def test_at_least_four_search_spaces_ship() -> None:
    names = {p.name for p in ALL}
    assert {"mlp.yaml", "gbdt.yaml", "conditional.yaml", "legacy_hptuning_config.yaml"} <= names


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_every_search_space_loads_and_has_a_sample_trial(path: Path) -> None:
    job = load_spec(path)
    assert job.study.metrics and job.study.parameters
    sample = sample_trial(job.study)
    for param, value in sample:
        assert param.contains(value), (param.parameter_id, value)
    assert "A sample trial gets: --" in summary(job)


def test_mlp() -> None:
    job = load_spec(SPACES / "mlp.yaml")
    study = job.study
    assert [(m.metric_id, m.goal) for m in study.metrics] == [("accuracy", Goal.MAXIMIZE)]
    kinds = {p.parameter_id: (p.type, p.scale_type) for p in study.parameters}
    assert kinds == {
        "learning_rate": (ParameterType.DOUBLE, ScaleType.UNIT_LOG_SCALE),
        "hidden_units": (ParameterType.DISCRETE, ScaleType.SCALE_TYPE_UNSPECIFIED),
        "alpha": (ParameterType.DOUBLE, ScaleType.UNIT_LOG_SCALE),
        "batch_size": (ParameterType.DISCRETE, ScaleType.SCALE_TYPE_UNSPECIFIED),
    }


def test_gbdt() -> None:
    study = load_spec(SPACES / "gbdt.yaml").study
    assert [(m.metric_id, m.goal) for m in study.metrics] == [("val_loss", Goal.MINIMIZE)]
    types = {p.parameter_id: p.type for p in study.parameters}
    assert types == {"n_estimators": ParameterType.INTEGER, "max_depth": ParameterType.INTEGER,
                     "learning_rate": ParameterType.DOUBLE, "subsample": ParameterType.DOUBLE,
                     "min_samples_leaf": ParameterType.INTEGER}
    assert study.parameter("learning_rate").scale_type is ScaleType.UNIT_LOG_SCALE


def test_conditional_has_sgd_momentum_adam_beta1_and_a_nested_level() -> None:
    study = load_spec(SPACES / "conditional.yaml").study
    optimizer = study.parameter("optimizer")
    children = {c.parameter.parameter_id: c.parent_values for c in optimizer.conditionals}
    assert children == {"momentum": ("sgd",), "beta1": ("adam",)}
    assert study.parameter("momentum").conditionals[0].parameter.parameter_id == "nesterov"
    assert len(study.metrics) == 2


def test_legacy_config_is_the_mlp_job() -> None:
    legacy = load_spec(SPACES / "legacy_hptuning_config.yaml")
    mlp = load_spec(SPACES / "mlp.yaml")
    assert legacy.study.parameters == mlp.study.parameters
    assert legacy.study.metrics == mlp.study.metrics
    assert legacy.study.stopping is not None
    assert legacy.study.stopping.kind is StoppingKind.MEDIAN
    assert (legacy.max_trial_count, legacy.parallel_trial_count) == (
        mlp.max_trial_count, mlp.parallel_trial_count)

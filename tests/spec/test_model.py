"""The job model's own rules: which parent values select a conditional child."""

import pytest

from trials.spec import ConditionalParameterSpec, MetricSpec, ParameterSpec, ParameterType, StudySpec, parent_matches


@pytest.mark.parametrize("value,parents,selected", [
    ("sgd", ("sgd", "adam"), True),
    ("SGD", ("sgd",), False),
    (2, (2.0,), True),
    (0.1 + 0.2, (0.3,), True),  # within DISCRETE_MIN_GAP, as the spec rules compare values
    (0.3001, (0.3,), False),
    (1, ("1",), False),  # a number never selects a category's string
])
def test_parent_matches(value, parents, selected):
    assert parent_matches(value, parents) is selected


def test_active_parameters_follow_the_matching_branch():
    child = ParameterSpec(parameter_id="m", type=ParameterType.DOUBLE, min_value=0.0, max_value=1.0)
    parent = ParameterSpec(parameter_id="n", type=ParameterType.DISCRETE, values=(0.1, 0.3), conditionals=(
        ConditionalParameterSpec(parent_values=(0.3,), parameter=child),))
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(parent,))
    assert study.active_parameters({"n": 0.1 + 0.2}) == [parent, child]
    assert study.active_parameters({"n": 0.1}) == [parent]

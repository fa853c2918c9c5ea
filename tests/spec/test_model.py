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


def test_choose_visits_parents_before_children_and_only_selected_branches():
    small = ParameterSpec(parameter_id="w", type=ParameterType.DISCRETE, values=(8.0, 16.0))
    big = ParameterSpec(parameter_id="w", type=ParameterType.DISCRETE, values=(32.0, 64.0))
    n = ParameterSpec(parameter_id="n", type=ParameterType.INTEGER, min_value=1, max_value=4, conditionals=(
        ConditionalParameterSpec(parent_values=(1, 2), parameter=small),
        ConditionalParameterSpec(parent_values=(3, 4), parameter=big)))
    lr = ParameterSpec(parameter_id="lr", type=ParameterType.DOUBLE, min_value=0.1, max_value=1.0)
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(n, lr))
    visited = []

    def pick(p):
        visited.append(p)
        return {"n": 3, "w": p.values[0] if p.values else None, "lr": 0.5}[p.parameter_id]

    assert study.choose(pick) == {"n": 3, "w": 32.0, "lr": 0.5}
    assert visited == [n, big, lr]

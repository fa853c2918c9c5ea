"""trials.tune honours the spec's args and says it runs one trial at a time (issue 51, item 5)."""

import dataclasses
import warnings

import pytest

import trials
from trials.spec.load import loads_spec

SPACE = """
metrics: {score: maximize}
parameters:
  x: {type: double, min: 0, max: 1}
max_trial_count: 3
"""


@dataclasses.dataclass
class Config:
    x: float = 0.5
    epochs: int = 10
    tag: str = "none"


def objective(config, ctx):
    for step in range(1, config.epochs + 1):
        ctx.report(step, score=config.x + 0.001 * step)


def test_the_specs_args_reach_every_trial(tmp_path):
    """Before: a user's --epochs=3 in the spec's args trained the Config's 10 epochs."""
    spec = loads_spec(SPACE + "command: [python, train.py]\nargs: [--epochs=3]\n")
    result = trials.tune(objective, spec, Config, directory=str(tmp_path), seed=0)
    assert [len(t["measurements"]) for t in result.trials] == [3, 3, 3]


def test_tunes_own_args_come_after_the_specs(tmp_path):
    spec = loads_spec(SPACE + "command: [python, train.py]\nargs: [--epochs=3]\n")
    seen = []

    def record(config, ctx):
        seen.append((config.epochs, config.tag))
        objective(config, ctx)

    trials.tune(record, spec, Config, directory=str(tmp_path), seed=0, args=("--tag=mine",))
    assert seen == [(3, "mine")] * 3


def test_a_parallel_trial_count_above_one_is_said_to_run_one_at_a_time(tmp_path):
    spec = loads_spec(SPACE + "parallel_trial_count: 2\n")
    with pytest.warns(UserWarning, match=r"trials.tune runs one trial at a time in this process: "
                                         r"parallelTrialCount 2 in the spec is not used"):
        trials.tune(objective, spec, Config, directory=str(tmp_path / "a"), seed=0)
    path = tmp_path / "space.yaml"
    path.write_text(SPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one at a time is what it asked for: nothing to say
        trials.tune(objective, str(path), Config, directory=str(tmp_path / "b"), seed=0)
